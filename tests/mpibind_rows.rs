//! The rows where LLNL's mpibind used to do better than this plugin, on the same machines
//! (the peers comparison): whole allocations (`ndev=auto`), disjoint CPUs for tasks that
//! share a locality (`bind=split`, the default), device groups chosen by locality
//! (`compact`), and OpenMP (`omp`). Each is checked on the project's own fixtures, and on
//! the real exports in `../shared/topologies` where that directory exists (said when it
//! does not).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use map_by_device::cpuset::CpuSet;
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, Plan, PlanError, StepFacts};
use map_by_device::spec::Spec;
use std::path::PathBuf;

mod common;

fn node(name: &str) -> Node {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies").join(name);
    Node::new(load::from_xml_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())), NodeOptions::default())
}

/// A real export, or `None` (and a line saying so) when `../shared/topologies` is absent.
fn real(name: &str) -> Option<Node> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/topologies").join(name);
    if !path.exists() {
        common::skip_line(&format!("{} is not here (the real exports are outside the repository)", path.display()));
        return None;
    }
    Some(Node::new(load::from_xml_file(&path).unwrap(), NodeOptions::default()))
}

fn run_with(node: &Node, spec: &str, facts: StepFacts) -> Result<Plan, PlanError> {
    plan(&Spec::parse(spec).unwrap(), node, &facts)
}

fn run(node: &Node, spec: &str, n: u32) -> Result<Plan, PlanError> {
    run_with(node, spec, StepFacts { ntasks: n, ..StepFacts::default() })
}

/// Each task's device names and CPU list.
fn rows(node: &Node, spec: &str, n: u32) -> Vec<(Vec<String>, String)> {
    run(node, spec, n)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .tasks
        .iter()
        .map(|t| {
            let names = t.devices.iter().map(|&d| node.devices[d].name.clone()).collect();
            (names, t.cpus.as_ref().map(CpuSet::to_list).unwrap_or_default())
        })
        .collect()
}

fn names(list: &str) -> Vec<String> {
    list.split(' ').map(str::to_string).collect()
}

fn env_of(p: &Plan, task: usize, name: &str) -> Option<String> {
    p.tasks[task].env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
}

// 1. The whole allocation, not one device per task.

#[test]
fn ndev_auto_divides_every_device_among_the_tasks() {
    let turin = node("turin-h200.xml");
    assert_eq!(
        rows(&turin, "gpu:ndev=auto", 2),
        vec![(names("cuda0 cuda1"), "16-47,144-175".to_string()), (names("cuda2 cuda3"), "96-127,224-255".to_string())]
    );
    // One task takes all four; four tasks one each (ndev=1).
    assert_eq!(rows(&turin, "gpu:ndev=auto", 1)[0].0, names("cuda0 cuda1 cuda2 cuda3"));
    assert_eq!(rows(&turin, "gpu:ndev=auto", 4), rows(&turin, "gpu", 4));
    for n in [3, 5, 8] {
        let e = run(&turin, "gpu:ndev=auto", n).unwrap_err();
        assert!(matches!(e, PlanError::NdevAuto { have: 4, .. }), "{n} tasks: {e}");
        assert!(e.to_string().contains(&format!("among its {n} tasks")), "{e}");
    }
    // With interleave, each task's share is one GPU per package.
    assert_eq!(rows(&turin, "gpu:interleave:ndev=auto", 2)[0].0, names("cuda0 cuda2"));

    let mi250x = node("amd-mi250x.xml");
    let two = rows(&mi250x, "gpu:ndev=auto", 2);
    assert_eq!(two[0].0, names("rsmi0 rsmi1 rsmi2 rsmi3"));
    assert_eq!(two[1].0, names("rsmi4 rsmi5 rsmi6 rsmi7"));
    assert_eq!(rows(&mi250x, "gpu:ndev=auto", 4)[3].0, names("rsmi6 rsmi7"));
}

#[test]
fn ndev_auto_divides_the_gpus_slurm_gave_the_step() {
    let turin = node("turin-h200.xml");
    // --gpus-per-node=2 on this node: Slurm's GPUs 1 and 3.
    let facts = StepFacts { ntasks: 1, step_gpus: Some(vec![1, 3]), ..StepFacts::default() };
    let p = run_with(&turin, "gpu:ndev=auto", facts).unwrap();
    let got: Vec<&str> = p.tasks[0].devices.iter().map(|&d| turin.devices[d].name.as_str()).collect();
    assert_eq!(got, ["cuda1", "cuda3"]);
    // --gpus-per-task=2 with 2 tasks: the step holds 4, each task 2, in Slurm's order.
    let facts = StepFacts { ntasks: 2, step_gpus: Some(vec![0, 1, 2, 3]), ..StepFacts::default() };
    let p = run_with(&turin, "gpu:ndev=auto", facts).unwrap();
    assert_eq!(p.tasks[1].devices.len(), 2);
    // The end-to-end node of that case (tests/e2e/run.sh, four GRES GPUs, two per CPU): task
    // k gets exactly Slurm's GPUs 2k and 2k+1, and the one CPU next to both.
    let e2e = node("e2e-4gpu.xml");
    let facts = |ntasks| StepFacts {
        ntasks,
        step_gpus: Some(vec![0, 1, 2, 3]),
        allowed_cpus: Some(CpuSet::parse_list("0-1").unwrap()),
        ..StepFacts::default()
    };
    let p = run_with(&e2e, "gpu:ndev=auto", facts(2)).unwrap();
    let got: Vec<(Vec<&str>, String)> = p
        .tasks
        .iter()
        .map(|t| {
            let names = t.devices.iter().map(|&d| e2e.devices[d].name.as_str()).collect();
            (names, t.cpus.as_ref().unwrap().to_list())
        })
        .collect();
    assert_eq!(got, [(vec!["cuda0", "cuda1"], "0".to_string()), (vec!["cuda2", "cuda3"], "1".to_string())]);
    assert_eq!(env_of(&p, 1, "CUDA_VISIBLE_DEVICES").unwrap().split(',').count(), 2);
    // Three GPUs for two tasks do not divide.
    let facts = StepFacts { ntasks: 2, step_gpus: Some(vec![0, 1, 2]), ..StepFacts::default() };
    assert!(matches!(run_with(&turin, "gpu:ndev=auto", facts), Err(PlanError::NdevAuto { have: 3, ntasks: 2, .. })));
}

#[test]
fn ndev_auto_on_the_real_machines() {
    if let Some(turin) = real("turin-4gpu-nvml.xml") {
        let r = rows(&turin, "gpu:ndev=auto", 2);
        assert_eq!(r[0].1, "16-47,144-175");
        assert_eq!(r[1].1, "96-127,224-255");
    }
    if let Some(tioga) = real("eas-tioga.xml") {
        // mpibind's row: two halves of four GCDs each.
        let r = rows(&tioga, "gpu:ndev=auto", 2);
        assert_eq!(r.iter().map(|(d, _)| d.len()).collect::<Vec<_>>(), [4, 4]);
        assert!(!CpuSet::parse_list(&r[0].1).unwrap().intersects(&CpuSet::parse_list(&r[1].1).unwrap()));
    }
}

// 2. Disjoint CPUs for tasks that share a locality.

#[test]
fn tasks_on_one_locality_split_it_into_disjoint_whole_core_shares() {
    // Two GPUs under one package of two cores: one core each, in task order.
    let one = node("e2e-1socket-2gpu.xml");
    assert_eq!(rows(&one, "gpu", 2), vec![(names("cuda0"), "0".into()), (names("cuda1"), "1".into())]);
    // bind=locality keeps the seed's whole-locality binding.
    assert_eq!(rows(&one, "gpu:bind=locality", 2)[1].1, "0-1");
    // More tasks than cores is refused, naming the fix; overload lets them share.
    let e = run(&one, "gpu:shared", 3).unwrap_err();
    assert!(matches!(e, PlanError::SplitTooMany { tasks: 3, have: 2, .. }), "{e}");
    assert!(e.to_string().contains(":overload"), "{e}");
    assert_eq!(rows(&one, "gpu:shared:overload", 3)[2].1, "0-1");

    // Four GPUs per 16-CPU locality: 4 CPUs each, the next locality starting afresh.
    let syn = node("synthetic-64gpu.xml");
    let r = rows(&syn, "gpu", 8);
    let cpus: Vec<&str> = r.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(cpus, ["0-3", "4-7", "8-11", "12-15", "16-19", "20-23", "24-27", "28-31"]);
    // Three tasks on 16 cores: 5 each, core 15 left over, and the plan says so.
    let p = run(&syn, "gpu", 3).unwrap();
    assert_eq!(p.tasks[2].cpus.as_ref().unwrap().to_list(), "10-14");
    assert!(p.warnings.iter().any(|w| w.contains("each gets 5") && w.contains("CPUs 15")), "{:?}", p.warnings);

    // shared tasks on one GPU of the Turin node: its 16 cores in two halves.
    let turin = node("turin-h200.xml");
    let r = rows(&turin, "gpu:shared", 8);
    assert_eq!((r[0].1.as_str(), r[4].1.as_str()), ("16-23,144-151", "24-31,152-159"));
    // A task alone on its locality gets all of it, as PRRTE binds it.
    assert_eq!(rows(&turin, "gpu", 4)[0].1, "16-31,144-159");
}

#[test]
fn split_shares_stay_inside_the_step_cpus() {
    let turin = node("turin-h200.xml");
    // The step holds 6 cores of cuda0's NUMA domain (both threads) and nothing else there.
    let allowed: CpuSet = (16..22).chain(144..150).chain(32..48).chain(160..176).collect();
    let facts = StepFacts { ntasks: 6, allowed_cpus: Some(allowed.clone()), ..StepFacts::default() };
    let p = run_with(&turin, "gpu:ppr=3", facts).unwrap();
    let cpus: Vec<String> = p.tasks.iter().map(|t| t.cpus.as_ref().unwrap().to_list()).collect();
    assert_eq!(cpus[..3], ["16-17,144-145", "18-19,146-147", "20-21,148-149"]);
    assert_eq!(cpus[3], "32-36,160-164");
}

#[test]
fn coral_lassen_gets_ten_disjoint_cores_per_gpu() {
    let Some(lassen) = real("coral-lassen.xml") else { return };
    let r = rows(&lassen, "gpu", 4);
    let cpus: Vec<&str> = r.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(cpus, ["8-47", "48-87", "96-135", "136-175"]);
}

// 3. Groups of devices chosen by locality.

#[test]
fn compact_groups_devices_by_the_topology_tree() {
    let mi250x = node("amd-mi250x.xml");
    // PCI order: the first four GCDs sit on NUMA domains 1 and 3.
    assert_eq!(rows(&mi250x, "gpu:ndev=4", 2)[0].1, "16-31,48-63,80-95,112-127");
    // compact: two adjacent NUMA domains each, PCI order inside a group.
    assert_eq!(
        rows(&mi250x, "gpu:ndev=4:compact", 2),
        vec![
            (names("rsmi2 rsmi3 rsmi4 rsmi5"), "0-31,64-95".to_string()),
            (names("rsmi0 rsmi1 rsmi6 rsmi7"), "32-63,96-127".to_string())
        ]
    );
    // Pairs: one NUMA domain each, in the tree's order.
    let r = rows(&mi250x, "gpu:ndev=2:compact", 4);
    assert_eq!(r[0], (names("rsmi4 rsmi5"), "0-15,64-79".to_string()));
    assert_eq!(r[3], (names("rsmi0 rsmi1"), "48-63,112-127".to_string()));
    // With ndev=auto too.
    assert_eq!(rows(&mi250x, "gpu:ndev=auto:compact", 2), rows(&mi250x, "gpu:ndev=4:compact", 2));
    // Where PCI order already follows the tree, compact changes nothing.
    let turin = node("turin-h200.xml");
    assert_eq!(rows(&turin, "gpu:ndev=2:compact", 2), rows(&turin, "gpu:ndev=2", 2));
    assert!(Spec::parse("gpu:compact:interleave").is_err());
}

#[test]
fn compact_on_the_real_machines() {
    if let Some(tioga) = real("eas-tioga.xml") {
        let r = rows(&tioga, "gpu:ndev=4:compact", 2);
        assert_eq!(r[0], (names("rsmi2 rsmi3 rsmi4 rsmi5"), "0-31,64-95".to_string()));
        assert_eq!(r[1].1, "32-63,96-127");
    }
    if let Some(turin) = real("turin-4gpu-nvml.xml") {
        assert_eq!(rows(&turin, "gpu:ndev=2:compact", 2), rows(&turin, "gpu:ndev=2", 2));
    }
}

// 4. OpenMP.

#[test]
fn omp_tells_each_task_its_binding_and_keeps_the_users_values() {
    let turin = node("turin-h200.xml");
    let p = run(&turin, "gpu:pe=4:omp", 2).unwrap();
    for t in 0..2 {
        assert_eq!(env_of(&p, t, "OMP_NUM_THREADS").as_deref(), Some("4"));
        assert_eq!(env_of(&p, t, "OMP_PLACES").as_deref(), Some("cores"));
        assert_eq!(env_of(&p, t, "OMP_PROC_BIND").as_deref(), Some("spread"));
    }
    // Hardware threads with hwtcpus: 4 threads on 2 cores.
    let p = run(&turin, "gpu:pe=4:hwtcpus:omp", 1).unwrap();
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), "16-17,144-145");
    assert_eq!(env_of(&p, 0, "OMP_NUM_THREADS").as_deref(), Some("4"));
    assert_eq!(env_of(&p, 0, "OMP_PLACES").as_deref(), Some("threads"));
    // The default binding: a split share's cores.
    let p = run(&turin, "gpu:shared:omp", 8).unwrap();
    assert_eq!(env_of(&p, 4, "OMP_NUM_THREADS").as_deref(), Some("8"));
    // The user's own OMP_NUM_THREADS is kept; the other two are still written.
    let env = [("OMP_NUM_THREADS".to_string(), "2".to_string())].into_iter().collect();
    let p = run_with(&turin, "gpu:pe=4:omp", StepFacts { ntasks: 1, env, ..StepFacts::default() }).unwrap();
    assert_eq!(env_of(&p, 0, "OMP_NUM_THREADS"), None);
    assert_eq!(env_of(&p, 0, "OMP_PLACES").as_deref(), Some("cores"));
    // No binding, no OpenMP variable; without omp, none either.
    let p = run(&turin, "gpu:bind=none:omp", 1).unwrap();
    assert!(p.tasks[0].env.iter().all(|(k, _)| !k.starts_with("OMP_")), "{:?}", p.tasks[0].env);
    let p = run(&turin, "gpu:pe=4", 1).unwrap();
    assert!(p.tasks[0].env.iter().all(|(k, _)| !k.starts_with("OMP_")), "{:?}", p.tasks[0].env);
    assert!(run(&turin, "gpu:pe=4:omp=false", 1).unwrap().tasks[0].env.iter().all(|(k, _)| !k.starts_with("OMP_")));
}
