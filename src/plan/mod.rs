//! The planner: (spec, node, step facts) -> one assignment per local task.
//!
//! One question per file, each taking the previous one's answer (seed 000 "Placement" and
//! "Binding, and the bind ceiling"):
//! 1. [`order`]: which devices, in which order ([`device_order`]: on a step given only part of
//!    the node's CPUs, the devices local to them first and, unless `bind=none`, only those);
//! 2. [`assign`]: which task gets which devices;
//! 3. [`pair`]: with `adapters`, which network adapters go with each task's GPUs;
//! 4. [`bind`]: which CPUs each task gets (from the task's own devices, never its adapters);
//! 5. the environment from [`crate::env`], here, over the task's devices and adapters, with
//!    one `NCCL_IB_HCA` for the whole node ([`nccl`]: and where NCCL would not use the
//!    adapter paired with a GPU, the warning).
//!
//! Pure: no I/O, no Slurm, no hwloc, no process environment.

mod assign;
mod bind;
mod facts;
pub mod nccl;
mod order;
mod pair;

pub use facts::{
    parse_step_gpus, spec_may_use_gpus, visible_devices, visible_gpus, StepFacts, StepGpusError, VisibleDevices,
    MAX_GPU_INDEX, MAX_STEP_GPUS_TEXT,
};
pub use order::{device_order, interleave, named_device, DeviceOrder, Near};

use crate::cpuset::CpuSet;
use crate::device::{Device, DeviceClass, GpuIdentity, Vendor};
use crate::node::Node;
use crate::spec::{BindLevel, EnvMode, Spec};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// One task's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPlan {
    /// Local task id.
    pub task: u32,
    /// Indexes into [`Node::devices`].
    pub devices: Vec<usize>,
    /// `adapters`: the network adapters paired with the task's GPUs, in bus order (empty
    /// without `adapters`). Named in the environment beside the GPUs; the CPUs follow the
    /// GPUs alone.
    pub adapters: Vec<Paired>,
    /// The CPU mask to apply; `None` = leave the task's mask alone (`bind=none`, `closest`).
    pub cpus: Option<CpuSet>,
    /// Variables to set in the task's environment (replacing existing values). Tasks with
    /// the same devices (and OpenMP places) share one map: a 1,024-task plan makes a few
    /// dozen, not a thousand.
    pub env: Arc<BTreeMap<String, String>>,
}

/// A network adapter paired with a task's GPU, and who on the node has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paired {
    /// Index into [`Node::devices`].
    pub device: usize,
    /// Every local task paired with this adapter, ascending, the task itself included
    /// (several GPUs under one switch with one HCA share it; that needs no `shared`). One list
    /// per adapter, shared by its tasks' entries.
    pub holders: std::sync::Arc<[u32]>,
}

impl Paired {
    /// The other local tasks paired with the same adapter as `task`, ascending.
    pub fn shared_with(&self, task: u32) -> Vec<u32> {
        self.holders.iter().copied().filter(|&t| t != task).collect()
    }
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
    /// `hint`: "" or "; did you mean gpu?" or the comma rule with the spec rewritten;
    /// `known`: the class words and the node's device names.
    #[error("node {host} has no device named {name:?}{hint} ({known})")]
    UnknownDevice { name: String, host: String, known: String, hint: String },
    /// `fix` ends with the other GPUs of the plan that are refused too, if any.
    #[error("GPU {device} at {busid} on {host} cannot be named to its runtime: {problem}. Without an identity every task would silently use the same GPU; {fix}")]
    NoIdentity { device: String, busid: String, host: String, problem: String, fix: String },
    #[error("{ntasks} tasks with ndev={ndev}{ppr} need {needed} {class} devices, but {host} has {have} to give: {fix}, or run fewer tasks")]
    TooManyTasks {
        ntasks: u32,
        ndev: u32,
        ppr: String,
        needed: u64,
        class: String,
        have: usize,
        host: String,
        fix: &'static str,
    },
    #[error("ndev=auto divides the {have} {class} devices of {host} among its {ntasks} tasks, but they do not divide evenly: run a number of tasks that divides {have}, or give ndev=N (the devices left over are then unused)")]
    NdevAuto { have: usize, class: String, ntasks: u32, host: String },
    #[error("ndev={ndev} asks for more {class} devices per task than the {have} that {host} has to give: lower ndev")]
    NdevTooLarge { ndev: u32, class: String, have: usize, host: String },
    /// A step on part of the node: more devices are needed than lie near its CPUs.
    #[error("{ntasks} tasks with ndev={ndev} need more {class} devices than the {have} that {host} has near the step's CPUs {allowed} (outside them: {elsewhere}): ask Slurm for CPUs near them (--exclusive for the whole node), or use bind=none; else add :shared to give several tasks one device, or run fewer tasks")]
    TooFewNear { ntasks: u32, ndev: u32, class: String, have: usize, host: String, allowed: String, elsewhere: String },
    #[error("no {class} device of {host} is local to the step's CPUs {allowed} ({elsewhere}): ask Slurm for CPUs near one (--exclusive for the whole node, or --gres-flags=enforce-binding so that GPUs come with the cores gres.conf gives them), or use bind=none")]
    NoLocalDevice { class: String, host: String, allowed: String, elsewhere: String },
    #[error("bind={level} is above the locality of {device} ({locality_cpus}): the {level} holds CPUs {object_cpus}, so the task would not be near its device. Bind to a level inside the locality (e.g. bind=locality or bind=core), or use ndev= so that each task's devices span the {level}")]
    BindAboveLocality { level: BindLevel, device: String, locality_cpus: String, object_cpus: String },
    #[error("{device} is local to CPUs {locality_cpus}, none of which are allocated to this step (allowed CPUs: {allowed}): ask Slurm for CPUs near it (--exclusive for the whole node, or --gres-flags=enforce-binding so that GPUs come with the cores gres.conf gives them), or use bind=none")]
    OutsideAllocation { device: String, locality_cpus: String, allowed: String },
    #[error("no {level} object lies within the locality of {device} ({locality_cpus}) and the step's CPUs ({allowed}): choose a finer bind level")]
    NoBindObject { level: BindLevel, device: String, locality_cpus: String, allowed: String },
    #[error("Slurm allocated GPU index {index} to the step, but node {host} has only {have} GPUs in its topology: the topology does not describe this node (check the plugin's topology=)")]
    StepGpuOutOfRange { index: u32, have: usize, host: String },
    #[error("tasks {first} and {second} are both closest to {device}: add :shared to let them share it, or bind the tasks apart")]
    ClosestCollision { first: u32, second: u32, device: String },
    #[error("adapters gives each task the network adapters nearest its GPUs, but {name} is a {class} device: map a GPU with :adapters, or drop adapters")]
    AdaptersWithoutGpu { name: String, class: DeviceClass },
    #[error("device {devices} cannot be named: {source}")]
    InvalidValue { devices: String, source: crate::env::InvalidValue },
    #[error("task {task} asks for {want} {unit}, but the locality of {device} has {have} within the step's CPUs (CPUs {locality_cpus}): ask for fewer (pe=, --cpus-per-task), or give each task more devices (ndev=) so that its locality is larger")]
    PeTooLarge { task: u32, want: String, unit: &'static str, have: usize, device: String, locality_cpus: String },
    #[error("{tasks} tasks share the locality of {device} (CPUs {locality_cpus}), which has {have} {unit}: each would need a share of its own. Run fewer tasks there, count hardware threads (hwtcpus), or add :overload to let tasks share CPUs")]
    SplitTooMany { tasks: u32, device: String, unit: &'static str, have: usize, locality_cpus: String },
    #[error("task {task} would share CPUs with another task of the step: the {have} {unit} near {device} (CPUs {locality_cpus}) are all taken by earlier tasks. Run fewer tasks, bind to smaller units (bind=hwthread), or add :overload to let tasks share CPUs")]
    Overloaded { task: u32, unit: &'static str, have: usize, device: String, locality_cpus: String },
}

/// Computes the plan. Pure: no I/O, no Slurm, no hwloc.
pub fn plan(spec: &Spec, node: &Node, facts: &StepFacts) -> Result<Plan, PlanError> {
    let mut plan = Plan::default();
    if spec.is_none() || facts.ntasks == 0 {
        return Ok(plan);
    }
    let topo = &node.topology;
    let order = device_order(spec, node, facts)?;
    let near = order.near(node, facts);
    let DeviceOrder { devices: list, word: class_word, .. } = order;
    pair::check_target(spec, node, &list)?;
    let assignment = assign::tasks(spec, node, facts, &list, &class_word, near.as_ref(), &mut plan.warnings)?;
    order::degenerate_warning(node, &list, &class_word, spec, &mut plan.warnings);
    order::compact_hint(node, spec, &list, &assignment, &class_word, &mut plan.warnings);
    let pairs = spec.adapters.then(|| pair::NodePairs::new(node));

    let bind = spec.bind_level();
    let allowed = facts.allowed_cpus.clone().unwrap_or_else(|| topo.all_cpus());
    check_identities(&assignment, node, spec)?;
    let mut binder = bind::Binder::new(topo, bind, spec, facts, allowed);
    binder.prepare(&node.devices, &assignment)?;
    if spec.env == EnvMode::PmixOnly {
        plan.warnings.push(
            "env=none: tasks are placed and bound, and told only PMIX_DEVICE_ID: no device-selection variable is \
             written, so each task's runtime sees every device of the node"
                .into(),
        );
    }
    let core_of_pu = if spec.omp == Some(true) { topo.core_of_pu() } else { Vec::new() };
    let mut scratch = Vec::new();
    let adapters = pair::adapters_by_group(pairs.as_ref(), &assignment);
    let hcas = node_hcas(node, &assignment, &adapters);
    let hca_devices: Vec<&Device> = hcas.iter().filter_map(|&i| node.devices.get(i)).collect();
    // Tasks with the same devices share their adapters and, for the same OpenMP places,
    // their variables.
    let mut groups: HashMap<&[usize], Group> = HashMap::new();
    for (t, devs) in assignment.iter().enumerate() {
        let group = groups.entry(devs).or_insert_with(|| Group::new(node, devs, &adapters));
        let cpus = binder.bind_task(t as u32, &node.devices, devs)?;
        let places = omp_places(spec, &core_of_pu, &mut scratch, cpus.as_ref());
        let (env, warnings) = group.environment(facts, node, spec, places, &hca_devices)?;
        for w in warnings {
            let line = format!("task {t}: {w}");
            if !plan.warnings.contains(&line) {
                plan.warnings.push(line);
            }
        }
        plan.tasks.push(TaskPlan { task: t as u32, devices: devs.clone(), adapters: group.paired.clone(), cpus, env });
    }
    plan.warnings.append(&mut binder.warnings);
    if let Some(pairs) = &pairs {
        pairs.warnings(node, &plan.tasks, &mut plan.warnings);
        if plan.tasks.iter().any(|t| t.env.contains_key("NCCL_IB_HCA")) {
            nccl::warnings(node, &plan.tasks, &hcas, &mut plan.warnings);
        }
    }
    pair::unnamed_adapters_warning(spec, node, &plan.tasks, &mut plan.warnings);
    Ok(plan)
}

/// The adapters the node's `NCCL_IB_HCA` lists (device indexes, bus order): every one NCCL
/// takes among the devices the tasks hold or are paired with.
fn node_hcas(node: &Node, assignment: &[Vec<usize>], adapters: &HashMap<&[usize], Vec<Paired>>) -> Vec<usize> {
    let held = assignment.iter().flatten().copied().chain(adapters.values().flatten().map(|p| p.device));
    let mut hcas: Vec<usize> = held.filter(|&i| node.devices.get(i).is_some_and(crate::env::names_to_nccl)).collect();
    hcas.sort_unstable();
    hcas.dedup();
    hcas
}

/// A task's variables and the warnings their rules gave.
type Environment = (Arc<BTreeMap<String, String>>, Vec<String>);

/// What the tasks holding one group of devices have in common: the paired adapters and the
/// variables, once per OpenMP placement (only `omp` makes these differ between tasks of a
/// group).
struct Group<'a> {
    /// The group's devices, then its adapters: the devices the variables name.
    named: Vec<&'a Device>,
    /// How many of `named` are the group's own devices.
    own: usize,
    paired: Vec<Paired>,
    envs: Vec<(Option<crate::env::Places>, Result<Environment, PlanError>)>,
}

impl<'a> Group<'a> {
    fn new(node: &'a Node, devs: &[usize], adapters: &HashMap<&[usize], Vec<Paired>>) -> Group<'a> {
        let paired = adapters.get(devs).cloned().unwrap_or_default();
        let mut named: Vec<&Device> = devs.iter().filter_map(|&i| node.devices.get(i)).collect();
        let own = named.len();
        named.extend(paired.iter().filter_map(|p| node.devices.get(p.device)));
        Group { named, own, paired, envs: Vec::new() }
    }

    /// The variables of a task of this group with these OpenMP places: the GPUs' and their
    /// adapters', from the same rows, or the value a variable's grammar refuses.
    fn environment(
        &mut self,
        facts: &StepFacts,
        node: &Node,
        spec: &Spec,
        places: Option<crate::env::Places>,
        node_hcas: &[&Device],
    ) -> Result<Environment, PlanError> {
        if let Some((_, env)) = self.envs.iter().find(|(p, _)| *p == places) {
            return env.clone();
        }
        let inputs = crate::env::Inputs {
            node_hcas: Some(node_hcas),
            task_env: &facts.env,
            discovery_model: node.options.ze_hierarchy,
            mode: spec.env,
            omp: places,
        };
        let env = crate::env::task_env(&self.named, &inputs)
            .map(|(vars, warnings)| (Arc::new(vars), warnings))
            .map_err(|source| PlanError::InvalidValue {
                devices: self.named[..self.own]
                    .iter()
                    .map(|d| crate::env::shown(&d.name))
                    .collect::<Vec<_>>()
                    .join(", "),
                source,
            });
        self.envs.push((places, env.clone()));
        env
    }
}

/// With `omp`, the places of a bound task's mask: its cores, or its hardware threads with
/// `hwtcpus` (a task left unbound has no places to name). `core_of_pu` is the topology's
/// lookup, `scratch` a buffer reused across tasks.
fn omp_places(
    spec: &Spec,
    core_of_pu: &[Option<u32>],
    scratch: &mut Vec<u32>,
    cpus: Option<&CpuSet>,
) -> Option<crate::env::Places> {
    let cpus = cpus.filter(|_| spec.omp == Some(true))?;
    let threads = spec.hwtcpus;
    scratch.clear();
    if !threads {
        scratch.extend(cpus.iter().filter_map(|pu| core_of_pu.get(pu as usize).copied().flatten()));
        scratch.sort_unstable();
        scratch.dedup();
    }
    let count = if scratch.is_empty() { cpus.len() } else { scratch.len() };
    Some(crate::env::Places { count, threads })
}

/// Every GPU the plan hands out must be nameable to its runtime (seed 000: mapping by device
/// and then declining to act on it is indistinguishable from a working run): a vendor
/// identity, and for Level Zero ordinals the hierarchy model they were recorded under.
/// `env=none` (placement only, said by the job) is the one exception. The refusal names the
/// first such GPU in full and every other one after it, so that one fix covers them all.
fn check_identities(assignment: &[Vec<usize>], node: &Node, spec: &Spec) -> Result<(), PlanError> {
    if spec.env == EnvMode::PmixOnly {
        return Ok(());
    }
    let mut seen = vec![false; node.devices.len()];
    let mut refusals = Vec::new();
    for &d in assignment.iter().flatten() {
        if let (Some(dev), Some(false)) = (node.devices.get(d), seen.get(d).copied()) {
            seen[d] = true;
            if let Err(e) = check_identity(dev, node) {
                refusals.push((dev, e));
            }
        }
    }
    let mut refusals = refusals.into_iter();
    match refusals.next() {
        None => Ok(()),
        Some((_, PlanError::NoIdentity { device, busid, host, problem, mut fix })) => {
            let others: Vec<String> = refusals.map(|(d, _)| format!("{} at {}", d.name, d.busid_text())).collect();
            if !others.is_empty() {
                fix.push_str(&format!(" (the same refusal holds for {})", others.join(", ")));
            }
            Err(PlanError::NoIdentity { device, busid, host, problem, fix })
        }
        Some((_, other)) => Err(other),
    }
}

/// One GPU's part of [`check_identities`].
fn check_identity(d: &Device, node: &Node) -> Result<(), PlanError> {
    let unknown_model = node.options.ze_hierarchy.is_none();
    let refused = |d: &Device, problem: String, fix: &'static str| PlanError::NoIdentity {
        device: d.name.clone(),
        busid: d.busid_text(),
        host: node.hostname().into(),
        problem,
        fix: fix.to_string(),
    };
    if d.class == DeviceClass::Gpu {
        match d.gpu_id() {
            None => {
                let problem = d.identity_problem().map(str::to_string).unwrap_or_else(|| "no vendor identity".into());
                return Err(refused(d, problem, identity_fix(d.vendor)));
            }
            Some(GpuIdentity::LevelZero { .. }) if unknown_model => {
                return Err(refused(
                    d,
                    "its Level Zero ordinal is known, but not the hierarchy model (FLAT, COMPOSITE or COMBINED) it \
                     was recorded under, so ZE_AFFINITY_MASK cannot say which device it is"
                        .into(),
                    "the admin sets ze_hierarchy in the plugin's config file (the ZE_FLAT_DEVICE_HIERARCHY in force \
                     where the topology was discovered); to be placed and bound without a ZE_AFFINITY_MASK, add \
                     :env=none",
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
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
