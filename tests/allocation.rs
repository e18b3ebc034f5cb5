//! Slurm's allocation bounds every plan: a job owning 4 of a node's 16 cores and 2 of its 4
//! GPUs is mapped inside them, and a device whose locality lies outside them is refused; a
//! step's --cpus-per-task counts CPUs and is never given fewer; a step Slurm gave no GPU has none.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use map_by_device::cpuset::CpuSet;
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, PlanError, StepFacts};
use map_by_device::soft::{as_default, Soft};
use map_by_device::spec::Spec;
use std::path::PathBuf;

/// uneven-3plus1: 16 cores (PU = core), GPUs local to PUs 0-1, 2-3, 4-5 and 10-11.
fn node() -> Node {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies/uneven-3plus1.xml");
    Node::new(load::from_xml_file(&path).unwrap(), NodeOptions::default())
}

fn step(n: u32, cpus: &str, gpus: &[u32]) -> StepFacts {
    StepFacts {
        ntasks: n,
        allowed_cpus: Some(CpuSet::parse_list(cpus).unwrap()),
        step_gpus: Some(gpus.to_vec()),
        ..StepFacts::default()
    }
}

#[test]
fn four_of_sixteen_cores_and_two_of_four_gpus() {
    let n = node();
    for spec in ["gpu", "gpu:bind=core", "gpu:bind=numa", "gpu:interleave", "gpu:shared:pe=1"] {
        let facts = step(2, "2-5", &[1, 2]);
        let p = plan(&Spec::parse(spec).unwrap(), &n, &facts).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let allowed = facts.allowed_cpus.unwrap();
        let gpus: Vec<String> = p.tasks.iter().map(|t| n.devices[t.devices[0]].busid_text()).collect();
        assert_eq!(gpus, ["0000:2a:00.0", "0000:3c:00.0"], "{spec}: only the step's GPUs");
        for t in &p.tasks {
            let c = t.cpus.as_ref().unwrap();
            assert!(!c.is_empty() && c.is_subset(&allowed), "{spec}: task {} on {c}", t.task);
        }
        assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list().split(['-', ',']).next(), Some("2"), "{spec}");
    }
    // Three tasks, two allocated GPUs: refused without shared.
    assert!(matches!(
        plan(&Spec::parse("gpu").unwrap(), &n, &step(3, "2-5", &[1, 2])),
        Err(PlanError::TooManyTasks { .. })
    ));
}

#[test]
fn a_device_outside_the_cpus_is_refused_naming_both() {
    let n = node();
    let e = plan(&Spec::parse("gpu").unwrap(), &n, &step(2, "2-5", &[0, 3])).unwrap_err();
    assert!(matches!(e, PlanError::NoLocalDevice { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("at CPUs 0-1") && text.contains("at CPUs 10-11") && text.contains("CPUs 2-5"), "{text}");
    // bind=none needs no CPUs near the device: the environment alone is still right.
    let p = plan(&Spec::parse("gpu:bind=none").unwrap(), &n, &step(2, "2-5", &[0, 3])).unwrap();
    assert!(p.tasks.iter().all(|t| t.cpus.is_none()));
}

/// turin-h200: two threads per core (CPU n and n+128), GPU 0 local to CPUs 16-31,144-159.
fn turin() -> Node {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies/turin-h200.xml");
    Node::new(load::from_xml_file(&path).unwrap(), NodeOptions::default())
}

fn facts(n: u32, cpus_per_task: u32, allowed: Option<&str>, gpus: &[u32]) -> StepFacts {
    StepFacts {
        ntasks: n,
        cpus_per_task: Some(cpus_per_task),
        allowed_cpus: allowed.map(|a| CpuSet::parse_list(a).unwrap()),
        step_gpus: Some(gpus.to_vec()),
        ..StepFacts::default()
    }
}

/// `srun -n 2 -c 8` on a node of two threads per core is given 8 cores, 16 CPUs: -c counts
/// CPUs, so each task gets 4 cores (8 CPUs) of them, and the two fit (issue 41).
#[test]
fn cpus_per_task_counts_cpus_on_an_smt_node() {
    let n = turin();
    let f = facts(2, 8, Some("16-23,144-151"), &[0]);
    let p = plan(&Spec::parse("gpu:shared:bind=core").unwrap(), &n, &f).unwrap_or_else(|e| panic!("{e}"));
    let cpus: Vec<String> = p.tasks.iter().map(|t| t.cpus.as_ref().unwrap().to_list()).collect();
    assert_eq!(cpus, ["16-19,144-147", "20-23,148-151"]);
    // Where the step holds one thread of each core, a core brings one CPU: 8 cores.
    let f = facts(1, 8, Some("16-31"), &[0]);
    let p = plan(&Spec::parse("gpu:bind=core").unwrap(), &n, &f).unwrap();
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), "16-23");
}

/// A binding smaller than -c is refused with the ways to give the task more; it never
/// silently gives less than Slurm gave (issue 41).
#[test]
fn fewer_cpus_than_cpus_per_task_is_refused_with_its_fix() {
    let n = turin();
    let e = plan(&Spec::parse("gpu").unwrap(), &n, &facts(2, 64, None, &[0, 1])).unwrap_err();
    assert!(matches!(e, PlanError::FewerCpusThanAsked { task: 0, have: 32, asked: 64, .. }), "{e:?}");
    let text = e.to_string();
    for fix in ["bind=locality", "run fewer tasks", "ndev=N", "bind=none"] {
        assert!(text.contains(fix), "{fix} not in {text}");
    }
    assert!(!text.contains("raise pe"), "{text}");
    // Exactly the CPUs near each GPU: mapped.
    assert!(plan(&Spec::parse("gpu").unwrap(), &n, &facts(2, 32, None, &[0, 1])).is_ok());
    // Two GPUs per task: their CPUs together hold 64.
    let p = plan(&Spec::parse("gpu:ndev=2").unwrap(), &n, &facts(1, 64, None, &[0, 1])).unwrap();
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().len(), 64);
    // bind=split shares a GPU's CPUs among its tasks: 4 tasks of 16 CPUs on a 32-CPU locality
    // would get 8 each; bind=locality gives each all 32 (they may share cores: overload).
    let e = plan(&Spec::parse("gpu:shared").unwrap(), &n, &facts(4, 16, None, &[0])).unwrap_err();
    assert!(matches!(e, PlanError::FewerCpusThanAsked { have: 8, asked: 16, .. }), "{e:?}");
    // pe smaller than -c: raising it is the first fix, where the CPUs near the GPU hold them.
    let e = plan(&Spec::parse("gpu:pe=4").unwrap(), &n, &facts(2, 16, None, &[0, 1])).unwrap_err().to_string();
    assert!(e.contains("raise pe=4 to 8 or drop it"), "{e}");
    // -c 1 (Slurm's own default) never refuses a binding.
    assert!(plan(&Spec::parse("gpu:shared:bind=hwthread").unwrap(), &n, &facts(8, 1, None, &[0])).is_ok());
    // bind=none keeps Slurm's binding: nothing to compare.
    assert!(plan(&Spec::parse("gpu:bind=none").unwrap(), &n, &facts(2, 64, None, &[0, 1])).is_ok());
}

/// Slurm manages the node's GPUs and gave the step none: a GPU mapping has nothing to map and
/// says how to ask Slurm for GPUs; a mapping of another class is unaffected.
#[test]
fn a_step_slurm_gave_no_gpu_has_none() {
    let n = turin();
    let e = plan(&Spec::parse("gpu").unwrap(), &n, &facts(1, 1, None, &[])).unwrap_err();
    assert!(matches!(e, PlanError::NoStepGpus { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("--gpus-per-node=N") && text.contains("--gpus-per-task=N"), "{text}");
    // A GPU named by the job is not the step's either.
    let e = plan(&Spec::parse("cuda0").unwrap(), &n, &facts(1, 1, None, &[])).unwrap_err();
    assert!(matches!(e, PlanError::NoStepGpus { .. }), "{e:?}");
    assert!(plan(&Spec::parse("network").unwrap(), &n, &facts(1, 1, None, &[])).is_ok());
}

/// An admin's default never gives a task fewer devices than the step's divided by its tasks:
/// a one-task step (a launcher's daemon) gets all of them, or the default steps aside.
#[test]
fn a_default_gives_a_one_task_step_every_device_of_the_step() {
    let n = turin();
    let gpus = n.class_indexes(map_by_device::device::DeviceClass::Gpu);
    let gpu = Spec::parse("gpu").unwrap();
    match as_default(&gpu, &n, &facts(1, 1, None, &[0, 1])).unwrap() {
        Soft::Maps { spec, plan } => {
            assert_eq!(spec.to_string(), "gpu:ndev=auto");
            assert_eq!(plan.tasks[0].devices, vec![gpus[0], gpus[1]]);
            // ... and the CPUs of both.
            let both = n.devices[gpus[0]].locality.union(&n.devices[gpus[1]].locality);
            assert!(both.is_subset(plan.tasks[0].cpus.as_ref().unwrap()), "{:?}", plan.tasks[0].cpus);
        }
        other => panic!("{other:?}"),
    }
    // The job's own spec means what it says: one GPU.
    assert_eq!(plan(&gpu, &n, &facts(1, 1, None, &[0, 1])).unwrap().tasks[0].devices, vec![gpus[0]]);
    // Where Slurm does not manage the GPUs, every GPU of the node is the step's.
    let whole = StepFacts { ntasks: 1, ..StepFacts::default() };
    match as_default(&gpu, &n, &whole).unwrap() {
        Soft::Maps { plan, .. } => assert_eq!(plan.tasks[0].devices, gpus),
        other => panic!("{other:?}"),
    }
    // Four GPUs, two tasks: two each. Three GPUs, two tasks: no even share, so aside.
    match as_default(&gpu, &n, &facts(2, 1, None, &[0, 1, 2, 3])).unwrap() {
        Soft::Maps { plan, .. } => assert!(plan.tasks.iter().all(|t| t.devices.len() == 2)),
        other => panic!("{other:?}"),
    }
    match as_default(&gpu, &n, &facts(2, 1, None, &[0, 1, 2])).unwrap() {
        Soft::Aside { why } => assert!(why.contains("3 do not divide among 2 tasks"), "{why}"),
        other => panic!("{other:?}"),
    }
    // As many tasks as GPUs: the default as written, one each.
    match as_default(&gpu, &n, &facts(2, 1, None, &[0, 1])).unwrap() {
        Soft::Maps { spec, plan } => {
            assert_eq!(spec, gpu);
            assert!(plan.tasks.iter().all(|t| t.devices.len() == 1));
        }
        other => panic!("{other:?}"),
    }
}

/// On every fixture, for each class and step size: where a default maps, every task holds at
/// least the step's devices divided by its tasks and no device of the step is left to no
/// task; where it steps aside, the plain plan would have left one to no task (or given a task
/// fewer than its share).
#[test]
fn a_default_never_gives_a_task_less_than_its_share_on_any_fixture() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "xml") {
            continue;
        }
        let n = Node::new(load::from_xml_file(&path).unwrap(), NodeOptions::default());
        for class in ["gpu", "network", "block", "gpu:interleave", "network:shared"] {
            let spec = Spec::parse(class).unwrap();
            let Ok(order) = map_by_device::plan::device_order(&spec, &n, &StepFacts::default()) else { continue };
            let have = order.devices.len();
            for ntasks in 1..=(have as u32 + 1) {
                let f = StepFacts { ntasks, ..StepFacts::default() };
                let name = format!("{}: {class} -n {ntasks}", path.display());
                match as_default(&spec, &n, &f) {
                    Ok(Soft::Maps { plan, .. }) => {
                        checked += 1;
                        let share = have / ntasks as usize;
                        assert!(plan.tasks.iter().all(|t| t.devices.len() >= share.max(1)), "{name}");
                        for d in &order.devices {
                            assert!(plan.tasks.iter().any(|t| t.devices.contains(d)), "{name}: {d} idle");
                        }
                    }
                    Ok(Soft::Aside { why }) => {
                        checked += 1;
                        assert!(have % ntasks as usize != 0 || spec.shared, "{name}: aside ({why})");
                    }
                    // Refused as the job's own spec would be (too many tasks, a bind ceiling).
                    Err(e) => assert!(plan(&spec, &n, &f).is_err(), "{name}: {e}"),
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} cases");
}
