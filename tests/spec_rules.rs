//! The spec's rules as tables, like the seed's: one device named by any of its ids (those
//! with ':' included) on every class; `ppr`; no silent core overload; `pe` honoured or
//! refused. Each table runs on the Turin fixture and, where `../shared/topologies` exists, on
//! the real export it follows (a line says so when it is skipped).
//!
//! Turin (topologies/turin-h200.xml): GPU0..3 on NUMA 1, 2, 6, 7 (cores 16-31, 32-47,
//! 96-111, 112-127; core c has the PUs c and c+128).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a panic is the failure report.

use map_by_device::cpuset::CpuSet;
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, Plan, PlanError, StepFacts};
use map_by_device::spec::Spec;
use std::path::PathBuf;

mod common;

fn node(path: PathBuf) -> Node {
    Node::new(load::from_xml_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())), NodeOptions::default())
}

/// The Turin fixture, and the real NVML export where it exists.
fn turins() -> Vec<Node> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut v = vec![node(root.join("topologies/turin-h200.xml"))];
    let real = root.join("../shared/topologies/turin-4gpu-nvml.xml");
    if real.exists() {
        v.push(node(real));
    } else {
        common::skip_line(&format!("the real turin-4gpu-nvml.xml ({} is absent)", real.display()));
    }
    v
}

fn run(node: &Node, spec: &str, n: u32) -> Result<Plan, PlanError> {
    plan(
        &Spec::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}")),
        node,
        &StepFacts { ntasks: n, ..Default::default() },
    )
}

/// Each task's devices (primary names) and CPUs, `cuda0 16,144`.
fn table(node: &Node, spec: &str, n: u32) -> Vec<String> {
    run(node, spec, n)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .tasks
        .iter()
        .map(|t| {
            let devs: Vec<&str> = t.devices.iter().map(|&i| node.devices[i].name.as_str()).collect();
            format!("{} {}", devs.join("+"), t.cpus.as_ref().map(CpuSet::to_list).unwrap_or_default())
        })
        .collect()
}

fn refusal(node: &Node, spec: &str, n: u32) -> String {
    let e = run(node, spec, n).expect_err(spec).to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

/// Core `c` and its hardware thread on Turin.
fn core(c: u32) -> String {
    format!("{c},{}", c + 128)
}

#[test]
fn every_id_of_every_device_names_it_alone() {
    for n in turins() {
        let mut forms = 0;
        for (i, d) in n.devices.iter().enumerate() {
            let mut ids: Vec<String> = d.osnames.clone();
            ids.extend(d.gpu_id().map(|id| id.display_id()));
            ids.extend(d.pmix_id.clone());
            if let Some(b) = d.busid {
                ids.push(b.to_string());
                if b.domain == 0 {
                    ids.push(b.to_string()["0000:".len()..].to_string());
                }
            }
            for id in ids {
                // The id alone, and the id followed by qualifiers: the qualifiers still parse.
                for spec in [id.clone(), format!("{id}:bind=none:verbose")] {
                    let s = Spec::parse(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
                    assert!(s.verbose == spec.ends_with("verbose"), "{spec}");
                    let p = plan(&s, &n, &StepFacts { ntasks: 1, ..Default::default() })
                        .unwrap_or_else(|e| panic!("{spec}: {e}"));
                    assert_eq!(p.tasks[0].devices, vec![i], "{spec} names {}", d.name);
                    forms += 1;
                }
            }
        }
        // GPUs by OS name, UUID, gpu://host::name and bus id; adapters by fab:// and ipv4://
        // ids too; disks by blk://.
        for prefix in ["gpu://", "fab://", "ipv4://", "blk://", "GPU-"] {
            assert!(
                n.devices.iter().any(|d| d.pmix_id.as_deref().is_some_and(|p| p.starts_with(prefix))
                    || d.gpu_id().is_some_and(|g| g.display_id().starts_with(prefix))),
                "{}: no device has a {prefix} id",
                n.hostname()
            );
        }
        assert!(forms > 100, "{forms}");
    }
}

#[test]
fn the_value_in_pmix_device_id_is_accepted_back() {
    for n in turins() {
        let p = run(&n, "gpu:interleave", 4).unwrap();
        for t in &p.tasks {
            let id = &t.env["PMIX_DEVICE_ID"];
            let again = run(&n, id, 1).unwrap();
            assert_eq!(again.tasks[0].devices, t.devices, "{id}");
            assert_eq!(again.tasks[0].env, t.env, "{id}");
        }
    }
}

#[test]
fn ppr_puts_consecutive_tasks_on_each_device() {
    for n in turins() {
        // -n 8 gpu:ppr=2:bind=core -> tasks 0,1 on GPU0 (cores 16, 17), 2,3 on GPU1 ...
        assert_eq!(
            table(&n, "gpu:ppr=2:bind=core", 8),
            [
                format!("cuda0 {}", core(16)),
                format!("cuda0 {}", core(17)),
                format!("cuda1 {}", core(32)),
                format!("cuda1 {}", core(33)),
                format!("cuda2 {}", core(96)),
                format!("cuda2 {}", core(97)),
                format!("cuda3 {}", core(112)),
                format!("cuda3 {}", core(113)),
            ]
        );
        // With interleave the devices are reordered first: GPU0, GPU2, GPU1, GPU3.
        let t = table(&n, "gpu:interleave:ppr=2:bind=core", 4);
        assert_eq!(
            t,
            [
                format!("cuda0 {}", core(16)),
                format!("cuda0 {}", core(17)),
                format!("cuda2 {}", core(96)),
                format!("cuda2 {}", core(97))
            ]
        );
        // With ndev=2: two tasks on each pair of GPUs.
        let t = table(&n, "gpu:ndev=2:ppr=2:bind=core", 4);
        assert!(
            t[0].starts_with("cuda0+cuda1 ") && t[1].starts_with("cuda0+cuda1 ") && t[2].starts_with("cuda2+cuda3 "),
            "{t:?}"
        );
        assert_ne!(t[0], t[1], "the two tasks of a pair get their own cores");
        // pe sizes each task, and the tasks of one GPU stay apart.
        let t = table(&n, "gpu:ppr=2:pe=4", 2);
        assert_eq!(t, ["cuda0 16-19,144-147", "cuda0 20-23,148-151"]);
        // More tasks than ppr times the devices: refused, unless shared (then it wraps).
        let e = refusal(&n, "gpu:ppr=2", 9);
        assert!(e.contains("9 tasks with ndev=1 and ppr=2 need 5 gpu devices") && e.contains("raise ppr="), "{e}");
        let t = table(&n, "gpu:ppr=2:shared:bind=core", 9);
        assert!(t[8].starts_with("cuda0 "), "task 8 wraps to GPU0: {t:?}");
        assert_eq!(t[8], format!("cuda0 {}", core(18)), "and gets a core of its own");
    }
}

#[test]
fn shared_never_stacks_tasks_on_cores_unless_overload() {
    for n in turins() {
        // -n 8 gpu:shared:pe=16: each GPU's locality has 16 cores; the second task on a GPU
        // would get exactly the CPUs of the first.
        let e = refusal(&n, "gpu:shared:pe=16", 8);
        assert!(e.contains("task 4 would share CPUs") && e.contains("16 cores near cuda0 (CPUs 16-31,144-159)"), "{e}");
        assert!(e.contains("add :overload"), "{e}");
        // With room for both, shared GPUs get disjoint cores.
        let t = table(&n, "gpu:shared:pe=8", 8);
        assert_eq!(t[0], "cuda0 16-23,144-151");
        assert_eq!(t[4], "cuda0 24-31,152-159");
        // -n 80 gpu:shared:bind=core: 20 tasks per GPU on 16 cores; task 64 is the 17th on GPU0.
        let e = refusal(&n, "gpu:shared:bind=core", 80);
        assert!(e.starts_with("task 64 would share CPUs"), "{e}");
        assert!(run(&n, "gpu:shared:bind=core", 64).is_ok());
        // Asked for: the second round starts over from the least used.
        let t = table(&n, "gpu:shared:pe=16:overload", 8);
        assert_eq!(t[4], t[0]);
        // The whole locality holds as many tasks as it has cores.
        assert!(run(&n, "gpu:shared", 64).is_ok());
        let e = refusal(&n, "gpu:shared", 68);
        assert!(e.starts_with("17 tasks share the locality of cuda0 (CPUs 16-31,144-159), which has 16 cores"), "{e}");
        assert!(run(&n, "gpu:shared:bind=locality", 64).is_ok());
        assert!(refusal(&n, "gpu:shared:bind=locality", 68).starts_with("task 64 would share CPUs"));
    }
}

#[test]
fn pe_is_honoured_or_refused_naming_both_numbers() {
    for n in turins() {
        assert_eq!(table(&n, "gpu:pe=16", 1), ["cuda0 16-31,144-159"]);
        let e = refusal(&n, "gpu:pe=20", 1);
        assert!(e.contains("asks for pe=20 cores, but the locality of cuda0 has 16"), "{e}");
        let e = refusal(&n, "gpu:pe=40:hwtcpus", 1);
        assert!(e.contains("asks for pe=40 hardware threads") && e.contains("has 32"), "{e}");
        assert!(refusal(&n, "gpu:pe=65536", 1).contains("pe=65536"));
        let big = plan(
            &Spec::parse("gpu:bind=core").unwrap(),
            &n,
            &StepFacts { ntasks: 1, cpus_per_task: Some(99999), ..Default::default() },
        )
        .unwrap_err()
        .to_string();
        // Slurm's -c counts CPUs: two threads per core here.
        assert!(big.contains("--cpus-per-task=99999 CPUs, that is 50000 cores") && big.contains("has 16"), "{big}");
        // Two GPUs' worth of cores for a task that holds two GPUs.
        assert_eq!(table(&n, "gpu:ndev=2:pe=32:bind=core", 1), ["cuda0+cuda1 16-47,144-175"]);
    }
}
