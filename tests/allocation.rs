//! Slurm's allocation bounds every plan: a job owning 4 of a node's 16 cores and 2 of its 4
//! GPUs is mapped inside them, and a device whose locality lies outside them is refused; a
//! step's --cpus-per-task counts CPUs and is never given fewer; a step Slurm gave no GPU has none.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use map_by_device::cpuset::CpuSet;
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, PlanError, StepFacts};
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

/// The step's GPUs a plan leaves idle: what an admin default must not do.
#[test]
fn idle_step_gpus_are_the_ones_no_task_holds() {
    let n = turin();
    let gpus = n.class_indexes(map_by_device::device::DeviceClass::Gpu);
    let p = plan(&Spec::parse("gpu").unwrap(), &n, &facts(1, 1, None, &[0, 1])).unwrap();
    assert_eq!(map_by_device::plan::idle_step_gpus(&n, &facts(1, 1, None, &[0, 1]), &p), vec![gpus[1]]);
    let p = plan(&Spec::parse("gpu:ndev=auto").unwrap(), &n, &facts(1, 1, None, &[0, 1])).unwrap();
    assert!(map_by_device::plan::idle_step_gpus(&n, &facts(1, 1, None, &[0, 1]), &p).is_empty());
    // A network plan names no GPU: the step's GPUs are the tasks' as Slurm set them.
    let p = plan(&Spec::parse("network").unwrap(), &n, &facts(1, 1, None, &[0, 1])).unwrap();
    assert!(map_by_device::plan::idle_step_gpus(&n, &facts(1, 1, None, &[0, 1]), &p).is_empty());
    // Without Slurm's list there is nothing Slurm gave.
    let f = StepFacts { ntasks: 1, ..StepFacts::default() };
    let p = plan(&Spec::parse("gpu").unwrap(), &n, &f).unwrap();
    assert!(map_by_device::plan::idle_step_gpus(&n, &f, &p).is_empty());
}
