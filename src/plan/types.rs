//! What the planner hands back: the plan (each task's devices, adapters, CPUs and
//! variables) and why a plan cannot be made. The types every step of [`super`] shares, below
//! them all, so that no step imports from the module that sequences them.

use crate::cpuset::CpuSet;
use crate::device::{DeviceClass, Vendor};
use crate::spec::BindLevel;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One task's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPlan {
    /// Local task id.
    pub task: u32,
    /// Indexes into [`crate::node::Node::devices`].
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
    /// Index into [`crate::node::Node::devices`].
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
    /// The topology holds no PCI function and no OS device at all: it was exported without
    /// its I/O objects (`lstopo` without `--whole-io`, or an hwloc without its PCI support).
    #[error("the topology of {host} has no I/O devices at all (no PCI function, no OS device), so it names no GPU, network adapter or disk: an lstopo export made without them (export it again with `lstopo --whole-io FILE.xml` and use that file), or an hwloc without its PCI support (Debian: install libhwloc-plugins)")]
    NoIoDevices { host: String },
    /// Only held-back devices of the class: removable media, which is never handed out.
    #[error("node {host} has no {class} devices to hand out ({held}): run on a node that has them, or use --map-by-device=none")]
    OnlyHeldBack { class: DeviceClass, host: String, held: String },
    /// A name that several devices answer to: a PCI address holding several GPUs (an APU's
    /// partitions) or several disks (an NVMe drive's namespaces).
    #[error("{name:?} names {count} devices on {host} ({devices}): name one of them instead")]
    AmbiguousName { name: String, host: String, count: usize, devices: String },
    /// A device its class never hands out, named.
    #[error("{name} on {host} is {why}, which map-by-device never hands out: name a disk, or map block")]
    NeverHandedOut { name: String, host: String, why: crate::device::HeldBack },
    /// `hint`: "" or "; did you mean gpu?" or the comma rule with the spec rewritten;
    /// `known`: the class words and the node's device names.
    #[error("node {host} has no device named {name:?}{hint} ({known})")]
    UnknownDevice { name: String, host: String, known: String, hint: String },
    /// `fix` ends with the other GPUs of the plan that are refused too, if any.
    #[error("GPU {device} at {busid} on {host} cannot be named to its runtime: {problem}. Without an identity every task would silently use the same GPU; {fix}")]
    NoIdentity { device: String, busid: String, host: String, problem: String, fix: Box<IdentityFix> },
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
    /// Slurm manages the node's GPUs and gave the step none of them (no `SLURM_STEP_GPUS`
    /// where its gres/gpu runs; `--step-gpus none` in a preview).
    #[error("the step has no GPUs on {host} (Slurm set no SLURM_STEP_GPUS): ask Slurm for them (--gpus-per-node=N, --gpus-per-task=N or --gres=gpu:N), or map another device class")]
    NoStepGpus { host: String },
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
    /// A task's binding holds fewer CPUs than the `--cpus-per-task` Slurm gave it (`pe_fix`:
    /// "" or the `pe=` that would hold them, with "; else ").
    #[error("task {task} would be bound to {have} {} near {device} (CPUs {cpus}), fewer than the {asked} it asked Slurm for with --cpus-per-task: {pe_fix}bind to a larger level (bind=locality gives each task every CPU near its devices), run fewer tasks, give each task more devices (ndev=N) and so the CPUs near them, or keep Slurm's binding (bind=none)", if *have == 1 { "CPU" } else { "CPUs" })]
    FewerCpusThanAsked { task: u32, have: usize, cpus: String, device: String, asked: u32, pe_fix: String },
    #[error("task {task} would share CPUs with another task of the step: the {have} {unit} near {device} (CPUs {locality_cpus}) are all taken by earlier tasks. Run fewer tasks, bind to smaller units (bind=hwthread), or add :overload to let tasks share CPUs")]
    Overloaded { task: u32, unit: &'static str, have: usize, device: String, locality_cpus: String },
}

/// How to make a GPU nameable, for [`PlanError::NoIdentity`]: what to install or set, by
/// vendor, and the other GPUs of the plan the same fix covers. The driver files' roots are
/// named by each front end in its own words ([`RootWords`]): the plugin's config file keys,
/// a preview's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityFix {
    pub kind: FixKind,
    /// How this front end sets the driver files' roots.
    pub roots: RootWords,
    /// The other GPUs refused alike (`NAME at BUSID`).
    pub others: Vec<String>,
}

/// Which of a GPU's identity sources is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixKind {
    /// No vendor identity: hwloc's backend for the vendor, or its driver file where it has one.
    Vendor(Vendor),
    /// A Level Zero ordinal without the hierarchy model it was recorded under.
    ZeHierarchy,
}

/// How a front end tells the admin to set where driver files are read: the plugin's config
/// keys ([`RootWords::PLUGIN`]), a preview's `--proc-root`/`--sys-root`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootWords {
    /// Where `/proc` is read (`set proc_root in the plugin config`).
    pub proc_root: &'static str,
    /// Where `/sys` is read (`set sys_root in the plugin config`).
    pub sys_root: &'static str,
}

impl RootWords {
    /// The plugin's words (and `check`'s, which checks the plugin's settings).
    pub const PLUGIN: RootWords =
        RootWords { proc_root: "set proc_root in the plugin config", sys_root: "set sys_root in the plugin config" };
}

impl std::fmt::Display for IdentityFix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            FixKind::Vendor(Vendor::Nvidia) => write!(
                f,
                "install an hwloc built with its NVML backend, or load the NVIDIA kernel driver and {} so that \
                 /proc/driver/nvidia/gpus/<busid>/information is read",
                self.roots.proc_root
            )?,
            FixKind::Vendor(Vendor::Amd) => write!(
                f,
                "install an hwloc built with its RSMI backend, or load the amdgpu driver and {} so that \
                 /sys/bus/pci/devices/<busid>/unique_id is read",
                self.roots.sys_root
            )?,
            FixKind::Vendor(Vendor::Intel) => f.write_str(
                "install an hwloc built with its Level Zero backend (Intel GPUs have no driver file that names them)",
            )?,
            FixKind::Vendor(_) => f.write_str(
                "this GPU's vendor has no identity the plugin knows; map it by another class or use \
                 --map-by-device=none",
            )?,
            FixKind::ZeHierarchy => f.write_str(
                "the admin sets ze_hierarchy in the plugin's config file (the ZE_FLAT_DEVICE_HIERARCHY in force \
                 where the topology was discovered); to be placed and bound without a ZE_AFFINITY_MASK, add \
                 :env=none",
            )?,
        }
        if !self.others.is_empty() {
            write!(f, " (the same refusal holds for {})", self.others.join(", "))?;
        }
        Ok(())
    }
}
