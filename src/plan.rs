//! The planner: (spec, node, step facts) -> one assignment per local task.
//!
//! Steps, in order (seed 000 "Placement" and "Binding, and the bind ceiling"):
//! 1. the device list: the class's devices in PCI-bus order (or the one named device),
//!    narrowed to the GPUs Slurm allocated to the step, then `interleave`d;
//! 2. groups of `ndev` contiguous devices; task `t` takes group `t` (wrapping only with
//!    `shared`), or with `closest` the device nearest its existing binding (seed 004);
//! 3. the task's locality is the common ancestor of its devices' localities; a binding
//!    object strictly larger than it is refused (the bind ceiling); finer bindings come from
//!    the devices' own localities, first free unit in order, never outside the step's CPUs;
//! 4. the environment from [`crate::env`].
//!
//! Pure: no I/O, no Slurm, no hwloc, no process environment.

use crate::cpuset::CpuSet;
use crate::device::{Device, DeviceClass, Vendor};
use crate::node::Node;
use crate::spec::{BindLevel, GroupLevel, Spec, Target};
use crate::topology::{ObjKind, Topology};
use std::collections::{BTreeMap, HashMap};

/// What Slurm (or the CLI's flags) tells the planner about the step on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepFacts {
    /// Tasks of the step on this node (local ids 0..ntasks).
    pub ntasks: u32,
    /// `--cpus-per-task`, the default `pe` for per-core bindings.
    pub cpus_per_task: Option<u32>,
    /// The CPUs Slurm allocated to the step on this node; `None` = the whole node.
    pub allowed_cpus: Option<CpuSet>,
    /// Each task's existing binding (for `closest`), by local id; a missing or empty entry
    /// means unbound.
    pub task_cpus: Option<Vec<CpuSet>>,
    /// The task environment the rules read (`ZE_FLAT_DEVICE_HIERARCHY` ...).
    pub env: BTreeMap<String, String>,
    /// Slurm's global GPU indices allocated to the step (PCI-bus order of the node's GPUs).
    pub step_gpus: Option<Vec<u32>>,
}

/// The longest `SLURM_STEP_GPUS` text read: Slurm writes a few bytes per GPU.
pub const MAX_STEP_GPUS_TEXT: usize = 4096;

/// The largest GPU index accepted from Slurm (no node has this many GPUs).
pub const MAX_GPU_INDEX: u32 = 4095;

/// A `SLURM_STEP_GPUS` that is not a GPU index list Slurm would write. Keeps a short,
/// printable excerpt of the text (it may be huge or hold control characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SLURM_STEP_GPUS={shown} is not a GPU index list as Slurm writes it ({why}), so the GPUs Slurm gave the step are unknown; ask your administrator to check the node's GRES")]
pub struct StepGpusError {
    pub shown: String,
    pub why: String,
}

/// Reads Slurm's step GPU list (`0,1` or `0-1`), refusing anything Slurm would not write:
/// over [`MAX_STEP_GPUS_TEXT`] bytes, an index above [`MAX_GPU_INDEX`], or not a list. Cheap
/// whatever the input (the value reaches root's process from the job where Slurm does not
/// set it).
pub fn parse_step_gpus(text: &str) -> Result<Vec<u32>, StepGpusError> {
    let shown = || {
        let head: String = text.chars().take(40).collect();
        let more = if head.len() < text.len() { format!("... ({} bytes)", text.len()) } else { String::new() };
        format!("{:?}{more}", head)
    };
    let fail = |why: String| StepGpusError { shown: shown(), why };
    if text.len() > MAX_STEP_GPUS_TEXT {
        return Err(fail(format!("longer than {MAX_STEP_GPUS_TEXT} bytes")));
    }
    let set = CpuSet::parse_list(text.trim()).map_err(|e| fail(e.reason))?;
    match set.iter().last() {
        Some(last) if last > MAX_GPU_INDEX => Err(fail(format!("index {last} is above {MAX_GPU_INDEX}"))),
        _ => Ok(set.iter().collect()),
    }
}

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
    let (mut list, class_word) = device_list(spec, node, facts, &host)?;
    if let Some(level) = spec.interleave {
        list = interleave(topo, &node.devices, &list, level);
    }
    let ndev = spec.ndev as usize;
    if list.len() < ndev {
        return Err(PlanError::NdevTooLarge { ndev: spec.ndev, class: class_word, have: list.len(), host });
    }
    let groups: Vec<&[usize]> = list.chunks_exact(ndev).collect();
    let needed = u64::from(facts.ntasks) * u64::from(spec.ndev);
    if !spec.shared && facts.ntasks as usize > groups.len() {
        return Err(PlanError::TooManyTasks {
            ntasks: facts.ntasks,
            ndev: spec.ndev,
            needed,
            class: class_word,
            have: list.len(),
            host,
        });
    }
    if list.len() % ndev != 0 && facts.ntasks as usize > groups.len().saturating_sub(1) {
        plan.warnings.push(format!(
            "{} of the {} {class_word} devices do not fill a group of ndev={ndev} and are left unused",
            list.len() % ndev,
            list.len()
        ));
    }

    let assignment: Vec<Vec<usize>> = if spec.closest {
        closest_assignment(spec, node, facts, &list)?
    } else {
        (0..facts.ntasks as usize).map(|t| groups[t % groups.len()].to_vec()).collect()
    };

    degenerate_warning(node, &list, &class_word, spec, &mut plan.warnings);

    let bind = spec.bind_level();
    let allowed = facts.allowed_cpus.clone().unwrap_or_else(|| topo.all_cpus());
    let mut binder = Binder::new(topo, bind, spec, facts, allowed);
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

/// The devices to map over, in PCI-bus order, and the word that names them in messages.
fn device_list(spec: &Spec, node: &Node, facts: &StepFacts, host: &str) -> Result<(Vec<usize>, String), PlanError> {
    let (mut list, word) = match &spec.target {
        Target::Class(class) => {
            let list = node.class_indexes(*class);
            if list.is_empty() {
                return Err(PlanError::NoDevices { class: *class, host: host.into() });
            }
            (list, class.to_string())
        }
        Target::Name(name) => match node.devices.iter().position(|d| d.answers_to(name)) {
            Some(i) => (vec![i], name.clone()),
            None => {
                let known: Vec<&str> = node.devices.iter().map(|d| d.name.as_str()).collect();
                return Err(PlanError::UnknownDevice {
                    name: name.clone(),
                    host: host.into(),
                    known: if known.is_empty() { "none".into() } else { known.join(", ") },
                    hint: if name.contains(',') {
                        "; a comma does not separate qualifiers, write them with ':' (gpu:ndev=2)"
                    } else {
                        ""
                    },
                });
            }
        },
        Target::None => return Ok((Vec::new(), "none".into())),
    };
    if let Some(step_gpus) = &facts.step_gpus {
        let gpus = node.class_indexes(DeviceClass::Gpu);
        let mut allowed = Vec::new();
        for &g in step_gpus {
            match gpus.get(g as usize) {
                Some(&i) => allowed.push(i),
                None => return Err(PlanError::StepGpuOutOfRange { index: g, have: gpus.len(), host: host.into() }),
            }
        }
        list.retain(|i| node.devices[*i].class != DeviceClass::Gpu || allowed.contains(i));
        if list.is_empty() {
            return Err(PlanError::NoDevices {
                class: DeviceClass::Gpu,
                host: format!("{host} (among the GPUs allocated to the step)"),
            });
        }
    }
    Ok((list, word))
}

fn group_kind(level: GroupLevel) -> ObjKind {
    match level {
        GroupLevel::Package => ObjKind::Package,
        GroupLevel::Numa => ObjKind::NumaNode,
        GroupLevel::L3Cache => ObjKind::L3Cache,
        GroupLevel::L2Cache => ObjKind::L2Cache,
        GroupLevel::L1Cache => ObjKind::L1Cache,
    }
}

/// Round-robin over the groups of `level` (in order of first appearance), dropping
/// exhausted groups. A level that does not partition the devices leaves the order alone.
pub fn interleave(topo: &Topology, devices: &[Device], list: &[usize], level: GroupLevel) -> Vec<usize> {
    let kind = group_kind(level);
    let objs: Vec<(usize, &CpuSet)> =
        topo.objects.iter().enumerate().filter(|(_, o)| o.kind == kind).map(|(i, o)| (i, &o.cpuset)).collect();
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for &d in list {
        let loc = &devices[d].locality;
        let Some(&(g, _)) = objs.iter().find(|(_, cs)| !loc.is_empty() && loc.is_subset(cs)) else {
            return list.to_vec();
        };
        match groups.iter_mut().find(|(id, _)| *id == g) {
            Some((_, v)) => v.push(d),
            None => groups.push((g, vec![d])),
        }
    }
    let longest = groups.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    (0..longest).flat_map(|round| groups.iter().filter_map(move |(_, v)| v.get(round).copied())).collect()
}

/// The deepest tree object (not a NUMA node) whose CPUs include all of `cpus`.
fn common_ancestor(topo: &Topology, cpus: &CpuSet) -> usize {
    topo.objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.kind != ObjKind::NumaNode && cpus.is_subset(&o.cpuset))
        .max_by_key(|(i, o)| (o.depth, std::cmp::Reverse(*i)))
        .map_or(0, |(i, _)| i)
}

/// `closest` (seed 004): each bound task takes the device whose locality shares the deepest
/// common ancestor with its CPUs; ties are split by the task's position among the cores of
/// that ancestor; a single device is taken at once; an unbound task takes the plain order.
fn closest_assignment(
    spec: &Spec,
    node: &Node,
    facts: &StepFacts,
    list: &[usize],
) -> Result<Vec<Vec<usize>>, PlanError> {
    let topo = &node.topology;
    let all = facts.allowed_cpus.clone().unwrap_or_else(|| topo.all_cpus());
    let mut owner: HashMap<usize, u32> = HashMap::new();
    let mut out = Vec::new();
    for t in 0..facts.ntasks {
        let bound =
            facts.task_cpus.as_ref().and_then(|v| v.get(t as usize)).filter(|c| !c.is_empty() && !all.is_subset(c));
        let pick = match bound {
            _ if list.len() == 1 => list[0],
            None => list[t as usize % list.len()],
            Some(cpus) => {
                let scored: Vec<(usize, u32, usize)> = list
                    .iter()
                    .map(|&d| {
                        let anc = common_ancestor(topo, &cpus.union(&node.devices[d].locality));
                        (d, topo.objects[anc].depth, anc)
                    })
                    .collect();
                let best = scored.iter().map(|s| s.1).max().unwrap_or(0);
                let tied: Vec<&(usize, u32, usize)> = scored.iter().filter(|s| s.1 == best).collect();
                if tied.len() == 1 {
                    tied[0].0
                } else {
                    let anc = tied[0].2;
                    let cores: Vec<&CpuSet> = topo
                        .of_kind(ObjKind::Core)
                        .filter(|c| c.cpuset.is_subset(&topo.objects[anc].cpuset))
                        .map(|c| &c.cpuset)
                        .collect();
                    let first = cpus.first().unwrap_or(0);
                    let pos = cores.iter().position(|c| c.contains(first)).unwrap_or(0);
                    tied[(pos * tied.len() / cores.len().max(1)).min(tied.len() - 1)].0
                }
            }
        };
        if !spec.shared {
            if let Some(&first) = owner.get(&pick) {
                return Err(PlanError::ClosestCollision { first, second: t, device: node.devices[pick].name.clone() });
            }
            owner.insert(pick, t);
        }
        out.push(vec![pick]);
    }
    Ok(out)
}

/// Warns when every listed device shares one locality: binding cannot be made more specific.
fn degenerate_warning(node: &Node, list: &[usize], class_word: &str, spec: &Spec, warnings: &mut Vec<String>) {
    if list.len() < 2 || spec.bind_level() == BindLevel::None {
        return;
    }
    let first = node.devices[list[0]].locality_obj;
    if list.iter().all(|&d| node.devices[d].locality_obj == first) {
        let obj = &node.topology.objects[first];
        warnings.push(format!(
            "all {} {class_word} devices share one locality ({:?} L#{}, CPUs {}): each task still gets its own device, \
             but binding could not be made more specific than that",
            list.len(),
            obj.kind,
            obj.logical_index,
            obj.cpuset
        ));
    }
}

fn check_identity(devs: &[&Device], host: &str) -> Result<(), PlanError> {
    match devs.iter().find(|d| d.class == DeviceClass::Gpu && d.identity.is_none()) {
        Some(d) => Err(PlanError::NoIdentity {
            device: d.name.clone(),
            busid: d.busid_text(),
            host: host.into(),
            problem: d.identity_problem.clone().unwrap_or_else(|| "no vendor identity".into()),
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

fn bind_kind(level: BindLevel) -> Option<ObjKind> {
    Some(match level {
        BindLevel::HwThread => ObjKind::Pu,
        BindLevel::Core => ObjKind::Core,
        BindLevel::L1Cache => ObjKind::L1Cache,
        BindLevel::L2Cache => ObjKind::L2Cache,
        BindLevel::L3Cache => ObjKind::L3Cache,
        BindLevel::Numa => ObjKind::NumaNode,
        BindLevel::Package => ObjKind::Package,
        BindLevel::Locality | BindLevel::None => return None,
    })
}

/// Hands out CPUs: per-unit use counts so that tasks sharing a locality get distinct units
/// (first free, in logical order) and a second round starts over from the least used.
struct Binder<'a> {
    topo: &'a Topology,
    level: BindLevel,
    /// Units of the binding level (or cores/PUs for `pe`), in logical order.
    units: Vec<&'a CpuSet>,
    /// Objects of the binding level, for the ceiling and for widening `pe` picks.
    level_objs: Vec<&'a CpuSet>,
    /// The units are the level's own objects (no `pe`): one object per task.
    units_are_level: bool,
    /// `pe` picked cores/threads under a coarser level: widen to the level's objects.
    widen: bool,
    uses: Vec<u32>,
    per_task: usize,
    allowed: CpuSet,
    regions: HashMap<Vec<usize>, Region>,
}

/// Where one group of devices may be bound.
#[derive(Clone)]
enum Region {
    /// Always these CPUs (`None`: leave the mask alone).
    Fixed(Option<CpuSet>),
    /// Pick from these units (indexes into `Binder::units`), least used first.
    Units(Vec<usize>),
}

impl<'a> Binder<'a> {
    fn new(topo: &'a Topology, level: BindLevel, spec: &Spec, facts: &StepFacts, allowed: CpuSet) -> Binder<'a> {
        let pe = spec.pe.or(match level {
            BindLevel::Core | BindLevel::HwThread => facts.cpus_per_task,
            _ => None,
        });
        let level_objs: Vec<&CpuSet> =
            bind_kind(level).map_or(Vec::new(), |k| topo.of_kind(k).map(|o| &o.cpuset).collect());
        let unit_kind = match (pe, level) {
            (Some(_), _) if spec.hwtcpus => Some(ObjKind::Pu),
            (Some(_), BindLevel::HwThread) => Some(ObjKind::Pu),
            (Some(_), _) => Some(ObjKind::Core),
            (None, l) => bind_kind(l),
        };
        let mut units: Vec<&CpuSet> = unit_kind.map_or(Vec::new(), |k| topo.of_kind(k).map(|o| &o.cpuset).collect());
        if units.is_empty() && unit_kind == Some(ObjKind::Core) {
            // A topology without Core objects: hardware threads are the CPUs.
            units = topo.of_kind(ObjKind::Pu).map(|o| &o.cpuset).collect();
        }
        let uses = vec![0; units.len()];
        let coarse = !matches!(level, BindLevel::Core | BindLevel::HwThread | BindLevel::Locality | BindLevel::None);
        Binder {
            topo,
            level,
            units,
            level_objs,
            units_are_level: pe.is_none(),
            widen: pe.is_some() && coarse,
            uses,
            per_task: pe.unwrap_or(1) as usize,
            allowed,
            regions: HashMap::new(),
        }
    }

    /// Where a task holding `devs` may be bound: a fixed CPU set, or the units to pick from
    /// (in device order). Checks the allocation and the bind ceiling.
    fn region(&self, devices: &[Device], devs: &[usize]) -> Result<Region, PlanError> {
        let own: Vec<&Device> = devs.iter().filter_map(|&i| devices.get(i)).collect();
        let Some(first) = own.first() else { return Ok(Region::Fixed(None)) };
        let union = own.iter().fold(CpuSet::new(), |acc, d| acc.union(&d.locality));
        let locality = if own.len() == 1 {
            first.locality.clone()
        } else {
            self.topo.objects[common_ancestor(self.topo, &union)].cpuset.clone()
        };
        let names = || own.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join("+");
        if !locality.intersects(&self.allowed) {
            return Err(PlanError::OutsideAllocation {
                device: names(),
                locality_cpus: locality.to_list(),
                allowed: self.allowed.to_list(),
            });
        }
        // The bind ceiling: an object of the level that strictly contains the locality.
        if let Some(obj) = self.level_objs.iter().find(|o| locality.is_subset(o)) {
            if obj.is_strict_superset(&locality) {
                return Err(PlanError::BindAboveLocality {
                    level: self.level,
                    device: names(),
                    locality_cpus: locality.to_list(),
                    object_cpus: obj.to_list(),
                });
            }
            if self.units_are_level {
                // The level object is the locality itself (bind=numa on a NUMA-local GPU).
                return Ok(Region::Fixed(Some(obj.intersection(&self.allowed))));
            }
        }
        if self.level == BindLevel::Locality {
            return Ok(Region::Fixed(Some(locality.intersection(&self.allowed))));
        }
        // Finer bindings come from the devices' own localities, in device order.
        let mut taken = vec![false; self.units.len()];
        let mut candidates: Vec<usize> = Vec::new();
        for d in &own {
            for (i, u) in self.units.iter().enumerate() {
                // Inside the device's locality, or holding it without leaving the task's.
                let near = u.is_subset(&d.locality) || (d.locality.is_subset(u) && u.is_subset(&locality));
                if near && !taken[i] && u.intersects(&self.allowed) {
                    taken[i] = true;
                    candidates.push(i);
                }
            }
        }
        if candidates.is_empty() {
            return Err(PlanError::NoBindObject {
                level: self.level,
                device: names(),
                locality_cpus: locality.to_list(),
                allowed: self.allowed.to_list(),
            });
        }
        Ok(Region::Units(candidates))
    }

    fn bind_task(&mut self, devices: &[Device], devs: &[usize]) -> Result<Option<CpuSet>, PlanError> {
        if self.level == BindLevel::None {
            return Ok(None);
        }
        // Tasks with the same devices have the same region: work it out once per group.
        let region = match self.regions.get(devs) {
            Some(r) => r.clone(),
            None => {
                let r = self.region(devices, devs)?;
                self.regions.insert(devs.to_vec(), r.clone());
                r
            }
        };
        let candidates = match region {
            Region::Fixed(cpus) => return Ok(cpus),
            Region::Units(candidates) => candidates,
        };
        let mut order: Vec<(u32, usize, usize)> =
            candidates.iter().enumerate().map(|(pos, &i)| (self.uses[i], pos, i)).collect();
        order.sort_unstable();
        let mut cpus = CpuSet::new();
        for &(_, _, i) in order.iter().take(self.per_task) {
            self.uses[i] += 1;
            cpus = cpus.union(self.units[i]);
        }
        // pe picks cores or threads; a coarser bind level widens to the objects holding them.
        if self.widen {
            cpus = self.level_objs.iter().filter(|o| o.intersects(&cpus)).fold(CpuSet::new(), |acc, o| acc.union(o));
        }
        Ok(Some(cpus.intersection(&self.allowed)))
    }
}
