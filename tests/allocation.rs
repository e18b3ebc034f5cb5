//! Slurm's allocation bounds every plan: a job owning 4 of a node's 16 cores and 2 of its 4
//! GPUs is mapped inside them, and a device whose locality lies outside them is refused.

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
