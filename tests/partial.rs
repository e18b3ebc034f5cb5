//! A step given only some of a node's CPUs (`-N2 -n2`, one CPU per node; a node shared with
//! other jobs) is handed the devices local to its CPUs first and, unless `bind=none`, only
//! those: a device elsewhere could not be bound near the task. On the project's fixtures,
//! where PCI-bus order and CPU order disagree (`e2e-2gpu-amd`: the first GPU in bus order
//! is local to CPU 1) or where a step reaches only some of the GPUs (`turin-h200`,
//! `uneven-3plus1`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use map_by_device::cpuset::CpuSet;
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{device_order, plan, Plan, PlanError, StepFacts};
use map_by_device::spec::Spec;
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::OnceLock;

fn node(file: &str) -> Node {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies").join(file);
    Node::new(load::from_xml_file(&path).unwrap(), NodeOptions::default())
}

fn facts(ntasks: u32, cpus: &str) -> StepFacts {
    StepFacts { ntasks, allowed_cpus: Some(CpuSet::parse_list(cpus).unwrap()), ..StepFacts::default() }
}

fn run(n: &Node, spec: &str, f: &StepFacts) -> Result<Plan, PlanError> {
    plan(&Spec::parse(spec).unwrap(), n, f)
}

/// Each task's first device (its name) and CPUs ("-" when not bound).
fn summary(n: &Node, p: &Plan) -> Vec<String> {
    p.tasks
        .iter()
        .map(|t| {
            let names: Vec<&str> = t.devices.iter().map(|&i| n.devices[i].name.as_str()).collect();
            format!("{} {}", names.join("+"), t.cpus.as_ref().map_or("-".to_string(), CpuSet::to_list))
        })
        .collect()
}

#[test]
fn the_gpu_next_to_the_steps_cpu_comes_first() {
    let n = node("e2e-2gpu-amd.xml");
    // Bus order: rsmi0 (0000:41:00.0, CPU 1), then rsmi1 (0000:c1:00.0, CPU 0).
    assert_eq!(summary(&n, &run(&n, "gpu", &facts(1, "0")).unwrap()), ["rsmi1 0"]);
    assert_eq!(summary(&n, &run(&n, "gpu", &facts(1, "1")).unwrap()), ["rsmi0 1"]);
    // The whole node: plain bus order, as before.
    assert_eq!(summary(&n, &run(&n, "gpu", &facts(2, "0-1")).unwrap()), ["rsmi0 1", "rsmi1 0"]);
    assert_eq!(
        summary(&n, &run(&n, "gpu", &StepFacts { ntasks: 2, ..StepFacts::default() }).unwrap()),
        ["rsmi0 1", "rsmi1 0"]
    );
    // Every binding level that sits inside the device's locality.
    for spec in ["gpu:bind=core", "gpu:bind=numa", "gpu:bind=hwthread", "gpu:interleave", "gpu:pe=1"] {
        assert_eq!(summary(&n, &run(&n, spec, &facts(1, "0")).unwrap()), ["rsmi1 0"], "{spec}");
    }
}

#[test]
fn bind_none_hands_out_the_far_devices_last() {
    let n = node("e2e-2gpu-amd.xml");
    let p = run(&n, "gpu:bind=none", &facts(2, "0")).unwrap();
    assert_eq!(summary(&n, &p), ["rsmi1 -", "rsmi0 -"]);
    let order = device_order(&Spec::parse("gpu:bind=none").unwrap(), &n, &facts(2, "0")).unwrap();
    let names: Vec<&str> = order.elsewhere.iter().map(|&i| n.devices[i].name.as_str()).collect();
    assert_eq!(names, ["rsmi0"]);
    // closest keeps the task's binding (bind=none): the far GPU is still in its list.
    assert_eq!(run(&n, "gpu:closest", &facts(2, "0")).unwrap().tasks.len(), 2);
}

#[test]
fn more_tasks_than_local_devices_is_refused_naming_the_far_ones() {
    let n = node("e2e-2gpu-amd.xml");
    let e = run(&n, "gpu", &facts(2, "0")).unwrap_err();
    assert!(matches!(e, PlanError::TooFewNear { have: 1, .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("than the 1 that e2e-2gpu-amd has near the step's CPUs 0 (outside them: rsmi0 at CPUs 1)")
            && text.contains("or use bind=none"),
        "{text}"
    );
    // shared (and overload, for the one CPU): both tasks on the GPU they can reach.
    assert_eq!(summary(&n, &run(&n, "gpu:shared:overload", &facts(2, "0")).unwrap()), ["rsmi1 0", "rsmi1 0"]);
    assert!(matches!(run(&n, "gpu:shared", &facts(2, "0")), Err(PlanError::SplitTooMany { .. })));
    // ndev=2 needs both GPUs, and only one is near the step.
    let e = run(&n, "gpu:ndev=2", &facts(1, "0")).unwrap_err();
    assert!(matches!(e, PlanError::TooFewNear { have: 1, ndev: 2, .. }), "{e}");
    assert!(e.to_string().contains("rsmi0 at CPUs 1"), "{e}");
    assert!(run(&n, "gpu:ndev=2:bind=none", &facts(1, "0")).is_ok());
}

#[test]
fn no_local_device_names_every_locality() {
    let n = node("turin-h200.xml");
    let e = run(&n, "gpu", &facts(1, "0-15")).unwrap_err();
    assert!(matches!(e, PlanError::NoLocalDevice { .. }), "{e}");
    let text = e.to_string();
    for want in [
        "no gpu device of turin-h200 is local to the step's CPUs 0-15",
        "cuda0 at CPUs 16-31,144-159",
        "cuda3 at CPUs 112-127,240-255",
        "or use bind=none",
    ] {
        assert!(text.contains(want), "{want:?} missing: {text}");
    }
    // bind=none maps anyway, in bus order (none is local).
    let p = run(&n, "gpu:bind=none", &facts(2, "0-15")).unwrap();
    assert_eq!(summary(&n, &p), ["cuda0 -", "cuda1 -"]);
}

#[test]
fn interleave_orders_the_local_devices_among_themselves() {
    let n = node("turin-h200.xml");
    // The step holds cuda1's CPUs (socket 0) and cuda3's (socket 1), not cuda0's or cuda2's.
    let f = facts(2, "32-47,112-127");
    assert_eq!(summary(&n, &run(&n, "gpu:interleave", &f).unwrap()), ["cuda1 32-47", "cuda3 112-127"]);
    let f = facts(4, "32-47,112-127");
    let p = run(&n, "gpu:interleave:bind=none", &f).unwrap();
    assert_eq!(summary(&n, &p), ["cuda1 -", "cuda3 -", "cuda0 -", "cuda2 -"]);
}

#[test]
fn network_adapters_follow_the_same_rule() {
    let n = node("e2e-2gpu.xml");
    assert_eq!(summary(&n, &run(&n, "network", &facts(1, "1")).unwrap()), ["mlx5_1 1"]);
    assert_eq!(summary(&n, &run(&n, "network", &facts(1, "0")).unwrap()), ["mlx5_0 0"]);
}

#[test]
fn the_steps_gpus_are_narrowed_first() {
    let n = node("uneven-3plus1.xml");
    // Slurm gave the step GPUs 0 and 2 (CPUs 0-1 and 4-5) and CPUs 4-7: only GPU 2 is near.
    let f = StepFacts { step_gpus: Some(vec![0, 2]), ..facts(1, "4-7") };
    assert_eq!(summary(&n, &run(&n, "gpu", &f).unwrap()), ["cuda2 4-5"]);
    let f = StepFacts { step_gpus: Some(vec![0, 2]), ..facts(2, "4-7") };
    let e = run(&n, "gpu", &f).unwrap_err();
    assert!(e.to_string().contains("outside them: cuda0 at CPUs 0-1"), "{e}");
}

#[test]
fn a_named_device_is_never_swapped() {
    let n = node("e2e-2gpu-amd.xml");
    let e = run(&n, "rsmi0", &facts(1, "0")).unwrap_err();
    assert!(matches!(e, PlanError::OutsideAllocation { .. }), "{e}");
    assert_eq!(summary(&n, &run(&n, "rsmi0:bind=none", &facts(1, "0")).unwrap()), ["rsmi0 -"]);
}

fn turin() -> &'static Node {
    static N: OnceLock<Node> = OnceLock::new();
    N.get_or_init(|| node("turin-h200.xml"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Whatever CPUs the step holds, a bound task's device is local to some of them, and a
    /// refusal for lack of devices happens only when the local ones are too few.
    #[test]
    fn bound_tasks_get_devices_they_can_reach(
        ntasks in 1u32..5,
        allowed in proptest::collection::btree_set(0u32..256, 1..120),
    ) {
        let n = turin();
        let allowed: CpuSet = allowed.into_iter().collect();
        let f = StepFacts { ntasks, allowed_cpus: Some(allowed.clone()), ..StepFacts::default() };
        let gpus: Vec<usize> = n.class_indexes(map_by_device::device::DeviceClass::Gpu);
        let near = gpus.iter().filter(|&&i| n.devices[i].locality.intersects(&allowed)).count();
        match plan(&Spec::parse("gpu").unwrap(), n, &f) {
            Ok(p) => {
                for t in &p.tasks {
                    prop_assert!(n.devices[t.devices[0]].locality.intersects(&allowed));
                }
                prop_assert!(ntasks as usize <= near);
            }
            Err(PlanError::TooManyTasks { have, .. } | PlanError::TooFewNear { have, .. }) => {
                prop_assert!(have == near && (ntasks as usize) > near)
            }
            Err(PlanError::NoLocalDevice { .. }) => prop_assert_eq!(near, 0),
            Err(e) => prop_assert!(false, "unexpected refusal: {}", e),
        }
    }
}
