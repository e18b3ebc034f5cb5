//! What the fuzz targets share: the project's fixture topologies (compiled in, so that a target
//! reads no file), and the invariants every plan and every refusal must hold, whatever the
//! input. A broken invariant panics, which libFuzzer reports as a crash with the input that
//! caused it.
//!
//! The invariants (issue 12, `docs/ARCHITECTURE.md`):
//! - a plan has one entry per task, each with `ndev` distinct devices (at least one with
//!   `ndev=auto`) of what the spec asked for (the class, or the one named device), and among
//!   the GPUs Slurm gave the step;
//! - no device is given to two tasks unless the spec says `shared`, nor to more than `ppr`
//!   tasks with `ppr=N`; an adapter paired with a task is a network device that names it;
//! - a CPU set is never empty, never outside the step's CPUs, and never outside the common
//!   ancestor of the task's devices' localities;
//! - `bind=none` and `closest` leave the mask alone;
//! - every variable is a known one with a one-line value;
//! - a refusal is one line of printable text of bounded length.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use map_by_device::cpuset::CpuSet;
use map_by_device::device::DeviceClass;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{Plan, PlanError, StepFacts};
use map_by_device::spec::{BindLevel, Spec, Target};
use map_by_device::topology::{ObjKind, Topology};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// The project's fixtures (`topologies/*.xml`), by name.
pub const FIXTURES: [(&str, &str); 12] = [
    ("e2e-2gpu", include_str!("../../topologies/e2e-2gpu.xml")),
    ("e2e-2gpu-drm", include_str!("../../topologies/e2e-2gpu-drm.xml")),
    ("no-gpu", include_str!("../../topologies/no-gpu.xml")),
    ("drm-only", include_str!("../../topologies/drm-only.xml")),
    ("omnipath", include_str!("../../topologies/omnipath.xml")),
    ("uneven-3plus1", include_str!("../../topologies/uneven-3plus1.xml")),
    ("degenerate-machine", include_str!("../../topologies/degenerate-machine.xml")),
    ("degenerate-one-complex", include_str!("../../topologies/degenerate-one-complex.xml")),
    ("intel-pvc", include_str!("../../topologies/intel-pvc.xml")),
    ("amd-mi250x", include_str!("../../topologies/amd-mi250x.xml")),
    ("turin-h200", include_str!("../../topologies/turin-h200.xml")),
    ("synthetic-64gpu", include_str!("../../topologies/synthetic-64gpu.xml")),
];

/// The fixtures as nodes, loaded once per fuzzing process.
pub fn nodes() -> &'static [Node] {
    static NODES: OnceLock<Vec<Node>> = OnceLock::new();
    NODES.get_or_init(|| {
        FIXTURES
            .iter()
            .map(|(name, xml)| {
                let topology = map_by_device::load::from_xml_str(xml).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
                Node::new(topology, NodeOptions::default())
            })
            .collect()
    })
}

/// A message shown to a user or written to slurmd.log: one line, no control characters, and
/// not a quote of a huge input.
pub fn assert_message(what: &str, message: &str, max: usize) {
    assert!(!message.is_empty(), "{what}: empty message");
    assert!(message.len() <= max, "{what}: message of {} bytes (at most {max})", message.len());
    assert!(!message.chars().any(char::is_control), "{what}: control character in {message:?}");
}

/// The specs every topology target plans with (the planner's main paths).
pub const SPECS: [&str; 10] = [
    "gpu",
    "network",
    "block",
    "gpu:interleave:bind=core",
    "gpu:ndev=2:bind=numa",
    "network:interleave=numa:pe=2:hwtcpus",
    "gpu:shared:bind=hwthread",
    "gpu:closest",
    "gpu:bind=package",
    "network:bind=l3cache",
];

/// Plans `spec` for `ntasks` on `node` (whole node, unbound tasks) and checks the outcome.
pub fn plan_and_check(node: &Node, spec: &Spec, ntasks: u32) {
    let facts = StepFacts { ntasks, ..StepFacts::default() };
    let outcome = map_by_device::plan::plan(spec, node, &facts);
    check_plan(node, spec, &facts, &outcome);
}

/// Checks every invariant of the module docs on one planner outcome.
pub fn check_plan(node: &Node, spec: &Spec, facts: &StepFacts, outcome: &Result<Plan, PlanError>) {
    let plan = match outcome {
        Err(e) => return assert_message("plan refusal", &e.to_string(), 64 * 1024),
        Ok(p) => p,
    };
    if spec.is_none() || facts.ntasks == 0 {
        assert!(plan.tasks.is_empty(), "nothing asked, yet {} tasks planned", plan.tasks.len());
        return;
    }
    assert_eq!(plan.tasks.len(), facts.ntasks as usize, "one entry per task");
    let topo = &node.topology;
    let allowed = facts.allowed_cpus.clone().unwrap_or_else(|| topo.all_cpus());
    let mut given: BTreeMap<usize, u32> = BTreeMap::new();
    for (t, task) in plan.tasks.iter().enumerate() {
        assert_eq!(task.task as usize, t, "tasks in order");
        check_devices(node, spec, facts, &task.devices);
        for a in &task.adapters {
            let d = node.devices.get(a.device).unwrap_or_else(|| panic!("adapter index {} out of range", a.device));
            assert_eq!(d.class, DeviceClass::Network, "adapter {} is not a network device", d.name);
            assert!(a.holders.contains(&task.task), "task {t} is not among its adapter's holders");
        }
        if !spec.shared {
            let most = spec.ppr.unwrap_or(1);
            for d in &task.devices {
                let n = given.entry(*d).or_insert(0);
                *n += 1;
                assert!(*n <= most, "device {d} given to {n} tasks (ppr {most}) without shared");
            }
        }
        let no_mask = spec.bind_level() == BindLevel::None || spec.closest;
        match &task.cpus {
            None => assert!(no_mask, "task {t}: no CPU set although the spec binds ({spec})"),
            Some(cpus) => {
                assert!(!no_mask, "task {t}: bound to {cpus} although the spec does not bind ({spec})");
                assert!(!cpus.is_empty(), "task {t}: empty CPU set");
                assert!(cpus.is_subset(&allowed), "task {t}: CPUs {cpus} outside the step's {allowed}");
                let locality = task_locality(topo, node, &task.devices);
                assert!(cpus.is_subset(&locality), "task {t}: CPUs {cpus} outside its devices' locality {locality}");
            }
        }
        for (name, value) in task.env.iter() {
            assert!(map_by_device::env::all_names().contains(&name.as_str()), "unknown variable {name}");
            assert!(!value.contains(['\n', '\r', '\0']), "{name}={value:?} is not one line");
        }
    }
    for w in &plan.warnings {
        assert_message("plan warning", w, 64 * 1024);
    }
    // NCCL requires one NCCL_IB_HCA on every rank of a node: every task that gets one, and
    // then every task, has the same.
    let hcas: std::collections::BTreeSet<Option<&String>> =
        plan.tasks.iter().map(|t| t.env.get("NCCL_IB_HCA")).collect();
    assert!(hcas.len() <= 1, "NCCL_IB_HCA differs between tasks of the node: {hcas:?}");
}

/// A task's devices: `ndev` distinct ones, of the requested class or the named device, and
/// GPUs only among the step's.
fn check_devices(node: &Node, spec: &Spec, facts: &StepFacts, devices: &[usize]) {
    if spec.ndev_auto {
        assert!(!devices.is_empty(), "ndev=auto gave a task no device");
    } else {
        assert_eq!(devices.len(), spec.ndev as usize, "ndev={} but {} devices", spec.ndev, devices.len());
    }
    let distinct: BTreeSet<&usize> = devices.iter().collect();
    assert_eq!(distinct.len(), devices.len(), "a device twice in one task: {devices:?}");
    let gpus: Vec<usize> = node.class_indexes(DeviceClass::Gpu);
    for &i in devices {
        let d = node.devices.get(i).unwrap_or_else(|| panic!("device index {i} out of range"));
        match &spec.target {
            Target::Class(c) => assert_eq!(d.class, *c, "asked for {c}, given {}", d.name),
            Target::Name(n) => assert!(d.answers_to(n), "asked for {n:?}, given {}", d.name),
            Target::None => panic!("none maps nothing"),
        }
        if let (Some(step), DeviceClass::Gpu) = (&facts.step_gpus, d.class) {
            let index = gpus.iter().position(|&g| g == i).unwrap() as u32;
            assert!(step.contains(&index), "GPU index {index} is not among the step's {step:?}");
        }
    }
}

/// The CPUs of the deepest object (not a NUMA node) that holds all the devices' localities;
/// for a single device its own locality.
fn task_locality(topo: &Topology, node: &Node, devices: &[usize]) -> CpuSet {
    let union = devices.iter().fold(CpuSet::new(), |acc, &i| acc.union(&node.devices[i].locality));
    if devices.len() == 1 {
        return union;
    }
    topo.objects
        .iter()
        .filter(|o| o.kind != ObjKind::NumaNode && union.is_subset(&o.cpuset))
        .min_by_key(|o| o.cpuset.len())
        .map_or_else(|| topo.all_cpus(), |o| o.cpuset.clone())
}

/// Bytes as text for the parsers that take text (invalid UTF-8 is what the plugin's callers
/// refuse or replace before parsing: [`String::from_utf8_lossy`] is what `load` does).
pub fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}
