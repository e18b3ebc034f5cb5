//! The planner: (spec, node, step facts) -> one assignment per local task.
//!
//! One question per file, each taking the previous one's answer (seed 000 "Placement" and
//! "Binding, and the bind ceiling"):
//! 1. [`order`]: which devices, in which order;
//! 2. [`assign`]: which task gets which devices;
//! 3. [`bind`]: which CPUs each task gets;
//! 4. the environment from [`crate::env`], here.
//!
//! Pure: no I/O, no Slurm, no hwloc, no process environment.

mod assign;
mod bind;
mod facts;
mod order;

pub use facts::{parse_step_gpus, StepFacts, StepGpusError, MAX_GPU_INDEX, MAX_STEP_GPUS_TEXT};
pub use order::interleave;

use crate::cpuset::CpuSet;
use crate::device::{Device, DeviceClass, Vendor};
use crate::node::Node;
use crate::spec::{BindLevel, Spec};
use std::collections::{BTreeMap, HashMap};

/// One task's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPlan {
    /// Local task id.
    pub task: u32,
    /// Indexes into [`Node::devices`].
    pub devices: Vec<usize>,
    /// The CPU mask to apply; `None` = leave the task's mask alone (`bind=none`, `closest`).
    pub cpus: Option<CpuSet>,
    /// Variables to set in the task's environment (replacing existing values).
    pub env: BTreeMap<String, String>,
}

/// The whole node's plan for one step.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub tasks: Vec<TaskPlan>,
    pub warnings: Vec<String>,
}

/// Why a plan cannot be made. Each message is one line naming the device, the CPUs and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("node {host} has no {class} devices: run on a node that has them, or use --map-by-device=none")]
    NoDevices { class: DeviceClass, host: String },
    #[error("node {host} has no device named {name:?}{hint} (devices here: {known})")]
    UnknownDevice { name: String, host: String, known: String, hint: &'static str },
    #[error("GPU {device} at {busid} on {host} cannot be named to its runtime: {problem}. Without an identity every task would silently use the same GPU; {fix}")]
    NoIdentity { device: String, busid: String, host: String, problem: String, fix: &'static str },
    #[error("{ntasks} tasks with ndev={ndev} need {needed} {class} devices, but {host} has {have} to give: add :shared to give several tasks one device, or run fewer tasks")]
    TooManyTasks { ntasks: u32, ndev: u32, needed: u64, class: String, have: usize, host: String },
    #[error("ndev={ndev} asks for more {class} devices per task than the {have} that {host} has to give: lower ndev")]
    NdevTooLarge { ndev: u32, class: String, have: usize, host: String },
    #[error("bind={level} is above the locality of {device} ({locality_cpus}): the {level} holds CPUs {object_cpus}, so the task would not be near its device. Bind to a level inside the locality (e.g. bind=locality or bind=core), or use ndev= so that each task's devices span the {level}")]
    BindAboveLocality { level: BindLevel, device: String, locality_cpus: String, object_cpus: String },
    #[error("{device} is local to CPUs {locality_cpus}, none of which are allocated to this step (allowed CPUs: {allowed}): ask Slurm for CPUs near it, or use bind=none")]
    OutsideAllocation { device: String, locality_cpus: String, allowed: String },
    #[error("no {level} object lies within the locality of {device} ({locality_cpus}) and the step's CPUs ({allowed}): choose a finer bind level")]
    NoBindObject { level: BindLevel, device: String, locality_cpus: String, allowed: String },
    #[error("Slurm allocated GPU index {index} to the step, but node {host} has only {have} GPUs in its topology: the topology does not describe this node (check the plugin's topology=)")]
    StepGpuOutOfRange { index: u32, have: usize, host: String },
    #[error("tasks {first} and {second} are both closest to {device}: add :shared to let them share it, or bind the tasks apart")]
    ClosestCollision { first: u32, second: u32, device: String },
    #[error("device {devices} cannot be named: {source}")]
    InvalidValue { devices: String, source: crate::env::InvalidValue },
}

/// Computes the plan. Pure: no I/O, no Slurm, no hwloc.
pub fn plan(spec: &Spec, node: &Node, facts: &StepFacts) -> Result<Plan, PlanError> {
    let mut plan = Plan::default();
    if spec.is_none() || facts.ntasks == 0 {
        return Ok(plan);
    }
    let host = node.hostname().to_string();
    let topo = &node.topology;
    let (mut list, class_word) = order::device_list(spec, node, facts, &host)?;
    if let Some(level) = spec.interleave {
        list = order::interleave(topo, &node.devices, &list, level);
    }
    let assignment = assign::tasks(spec, node, facts, &list, &class_word, &mut plan.warnings)?;
    order::degenerate_warning(node, &list, &class_word, spec, &mut plan.warnings);

    let bind = spec.bind_level();
    let allowed = facts.allowed_cpus.clone().unwrap_or_else(|| topo.all_cpus());
    let mut binder = bind::Binder::new(topo, bind, spec, facts, allowed);
    let mut env_cache = HashMap::new();
    for (t, devs) in assignment.into_iter().enumerate() {
        let refs: Vec<&Device> = devs.iter().filter_map(|&i| node.devices.get(i)).collect();
        check_identity(&refs, &host)?;
        let cpus = binder.bind_task(&node.devices, &devs)?;
        let (env, warnings) = env_cache
            .entry(devs.clone())
            .or_insert_with(|| crate::env::task_env(&refs, &facts.env, node.options.ze_hierarchy))
            .clone()
            .map_err(|source| PlanError::InvalidValue {
                devices: refs.iter().map(|d| crate::env::shown(&d.name)).collect::<Vec<_>>().join(", "),
                source,
            })?;
        for w in warnings {
            let line = format!("task {t}: {w}");
            if !plan.warnings.contains(&line) {
                plan.warnings.push(line);
            }
        }
        plan.tasks.push(TaskPlan { task: t as u32, devices: devs, cpus, env });
    }
    Ok(plan)
}

fn check_identity(devs: &[&Device], host: &str) -> Result<(), PlanError> {
    match devs.iter().find(|d| d.class == DeviceClass::Gpu && d.gpu_id().is_none()) {
        Some(d) => Err(PlanError::NoIdentity {
            device: d.name.clone(),
            busid: d.busid_text(),
            host: host.into(),
            problem: d.identity_problem().map(str::to_string).unwrap_or_else(|| "no vendor identity".into()),
            fix: identity_fix(d.vendor),
        }),
        None => Ok(()),
    }
}

/// Which of the two identity sources to install, per vendor.
fn identity_fix(vendor: Vendor) -> &'static str {
    match vendor {
        Vendor::Nvidia => "install an hwloc built with its NVML backend, or load the NVIDIA kernel driver and set proc_root in the plugin config so that /proc/driver/nvidia/gpus/<busid>/information is read",
        Vendor::Amd => "install an hwloc built with its RSMI backend, or load the amdgpu driver and set sys_root in the plugin config so that /sys/bus/pci/devices/<busid>/unique_id is read",
        Vendor::Intel => "install an hwloc built with its Level Zero backend (Intel GPUs have no driver file that names them)",
        _ => "this GPU's vendor has no identity the plugin knows; map it by another class or use --map-by-device=none",
    }
}
