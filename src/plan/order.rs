//! Which devices, in which order: the class's devices in PCI-bus order (or the one named
//! device), narrowed to the GPUs Slurm allocated to the step; on a step given only part of
//! the node's CPUs, the devices local to them first and, unless `bind=none`, only those (a
//! device elsewhere could not be bound: a partial-node step takes the devices it can reach);
//! then `interleave`d or `compact`; and the warning when they all share one locality.

use super::facts::StepFacts;
use super::types::PlanError;
use crate::cpuset::CpuSet;
use crate::device::{Device, DeviceClass};
use crate::node::Node;
use crate::spec::{BindLevel, GroupLevel, Spec, Target};
use crate::topology::{ObjKind, Topology};

/// The devices a step is handed, in the order tasks take them ([`device_order`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceOrder {
    /// Indexes into [`Node::devices`]: the devices local to the step's CPUs first (and,
    /// unless `bind=none`, only those), each part in PCI-bus order, `interleave`d or `compact`.
    pub devices: Vec<usize>,
    /// The devices of the request (the step's GPUs among them) that are not local to the
    /// step's CPUs: left out, or with `bind=none` handed out after the local ones.
    pub elsewhere: Vec<usize>,
    /// The word that names them in messages (`gpu`, or the device's name).
    pub word: String,
    /// Said with the plan: the class handed out devices it holds back, having nothing else
    /// (a node whose only network ports are plain Ethernet).
    pub note: Option<String>,
}

/// A step given only part of the node, with devices left out for being far from its CPUs:
/// the step's CPUs and those devices, in words, for [`PlanError::TooFewNear`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Near {
    pub allowed: String,
    /// `rsmi0 at CPUs 1, ...`.
    pub elsewhere: String,
}

impl DeviceOrder {
    /// `Some` when devices were left out for being far from the step's CPUs (never with
    /// `bind=none`, which hands them out last).
    pub(super) fn near(&self, node: &Node, facts: &StepFacts) -> Option<Near> {
        if self.elsewhere.is_empty() || self.elsewhere.iter().any(|i| self.devices.contains(i)) {
            return None;
        }
        Some(Near {
            allowed: facts.allowed_cpus.as_ref().map(CpuSet::to_list).unwrap_or_default(),
            elsewhere: localities(node, &self.elsewhere),
        })
    }
}

/// `rsmi0 at CPUs 1, cuda3 at CPUs 96-111`.
fn localities(node: &Node, devices: &[usize]) -> String {
    devices
        .iter()
        .filter_map(|&i| node.devices.get(i))
        .map(|d| format!("{} at CPUs {}", d.name, d.locality))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The devices `spec` hands out on `node` for this step, in order: the class's devices in
/// PCI-bus order (or the named device), narrowed to the GPUs Slurm allocated to the step.
/// When the step's CPUs (`facts.allowed_cpus`) do not reach every one of them, the devices
/// whose locality shares a CPU with the step come first, in that order; the others follow
/// with `bind=none` and are left out otherwise, since a task could not be bound near them.
/// `interleave` and `compact` reorder each part on its own. A device named by the job is never left out
/// (binding it outside the step is refused, naming it). The plugin, `plan --allowed-cpus`
/// and `check` all order devices through this function.
pub fn device_order(spec: &Spec, node: &Node, facts: &StepFacts) -> Result<DeviceOrder, PlanError> {
    let host = node.hostname();
    let (list, word, note) = device_list(spec, node, facts, host)?;
    let (mut local, mut far): (Vec<usize>, Vec<usize>) = match (&facts.allowed_cpus, &spec.target) {
        (Some(allowed), Target::Class(_)) => {
            list.iter().partition(|&&i| node.devices.get(i).is_some_and(|d| d.locality.intersects(allowed)))
        }
        _ => (list, Vec::new()),
    };
    if let Some(level) = spec.interleave {
        local = interleave(&node.topology, &node.devices, &local, level);
        far = interleave(&node.topology, &node.devices, &far, level);
    }
    if spec.compact {
        local = compact(&node.devices, &local);
        far = compact(&node.devices, &far);
    }
    if far.is_empty() {
        return Ok(DeviceOrder { devices: local, elsewhere: far, word, note });
    }
    if spec.bind_level() == BindLevel::None {
        let devices = local.iter().chain(&far).copied().collect();
        return Ok(DeviceOrder { devices, elsewhere: far, word, note });
    }
    if local.is_empty() {
        return Err(PlanError::NoLocalDevice {
            class: word,
            host: host.to_string(),
            allowed: facts.allowed_cpus.as_ref().map(CpuSet::to_list).unwrap_or_default(),
            elsewhere: localities(node, &far),
        });
    }
    Ok(DeviceOrder { devices: local, elsewhere: far, word, note })
}

/// `eno1: plain Ethernet (...); sr0: removable media (...)`.
fn held_text(node: &Node, devices: &[usize]) -> String {
    devices
        .iter()
        .filter_map(|&i| node.devices.get(i))
        .map(|d| format!("{}: {}", d.name, d.held_back.map(|h| h.to_string()).unwrap_or_default()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A class's devices, or why there are none: a topology without I/O objects says so; a
/// node whose only network ports are no fabric adapter hands those out, with a note; removable
/// media never.
fn class_list(node: &Node, class: DeviceClass, host: &str) -> Result<(Vec<usize>, Option<String>), PlanError> {
    let list = node.class_indexes(class);
    if !list.is_empty() {
        return Ok((list, None));
    }
    if node.topology.pci.is_empty() && node.topology.loose.is_empty() {
        return Err(PlanError::NoIoDevices { host: host.into() });
    }
    let held = node.held_back(class);
    if held.is_empty() {
        return Err(PlanError::NoDevices { class, host: host.into() });
    }
    if class != DeviceClass::Network {
        return Err(PlanError::OnlyHeldBack { class, host: host.into(), held: held_text(node, &held) });
    }
    let note = format!(
        "node {host} has no fabric adapter (InfiniBand or RoCE with an RDMA address, Omni-Path, Slingshot): network \
         hands out its other ports ({}), which no fabric library uses for RDMA, so no fabric variable names them",
        held_text(node, &held)
    );
    Ok((held, Some(note)))
}

/// The devices to map over, in PCI-bus order, and the word that names them in messages.
type ListAndWord = (Vec<usize>, String, Option<String>);

fn device_list(spec: &Spec, node: &Node, facts: &StepFacts, host: &str) -> Result<ListAndWord, PlanError> {
    let (mut list, word, note) = match &spec.target {
        Target::Class(class) => {
            let (list, note) = class_list(node, *class, host)?;
            (list, class.to_string(), note)
        }
        Target::Name(name) => (vec![named_device(node, name)?], name.clone(), None),
        Target::None => return Ok((Vec::new(), "none".into(), None)),
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
        if list.is_empty() && step_gpus.is_empty() {
            return Err(PlanError::NoStepGpus { host: host.into() });
        }
        if list.is_empty() {
            return Err(PlanError::NoDevices {
                class: DeviceClass::Gpu,
                host: format!("{host} (among the GPUs allocated to the step)"),
            });
        }
    }
    Ok((list, word, note))
}

/// The one device `name` names (OS name, identity, bus id or PMIx id), or the refusal: a name
/// several devices answer to (a PCI address of an APU's partitions, of a drive's namespaces)
/// names them; removable media is never handed out; an unknown name lists what the node has
/// and the nearest word to what was typed.
pub fn named_device(node: &Node, name: &str) -> Result<usize, PlanError> {
    let found: Vec<usize> = (0..node.devices.len()).filter(|&i| node.devices[i].answers_to(name)).collect();
    match found.as_slice() {
        [one] => {
            return match node.devices[*one].held_back {
                Some(why @ crate::device::HeldBack::RemovableMedia) => Err(PlanError::NeverHandedOut {
                    name: node.devices[*one].name.clone(),
                    host: node.hostname().into(),
                    why,
                }),
                _ => Ok(*one),
            }
        }
        [] => {}
        several => {
            let names: Vec<&str> = several.iter().map(|&i| node.devices[i].name.as_str()).collect();
            return Err(PlanError::AmbiguousName {
                name: name.to_string(),
                host: node.hostname().into(),
                count: names.len(),
                devices: names.join(", "),
            });
        }
    }
    let known: Vec<&str> = node.devices.iter().map(|d| d.name.as_str()).collect();
    let hint = if name.contains(',') {
        format!("; {}", crate::spec::comma_fix(name))
    } else {
        crate::spec::suggest::nearest(name, crate::spec::class_words().chain(["none"]))
            .or_else(|| crate::spec::suggest::nearest(name, known.iter().copied()))
            .map(|w| format!("; did you mean {w}?"))
            .unwrap_or_default()
    };
    Err(PlanError::UnknownDevice {
        name: name.to_string(),
        host: node.hostname().to_string(),
        known: format!(
            "classes: {}; devices here: {}",
            crate::spec::class_words().collect::<Vec<_>>().join(", "),
            if known.is_empty() { "none".into() } else { known.join(", ") }
        ),
        hint,
    })
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

/// `compact`: the devices in tree order of their localities (parents before children, as
/// the topology lists its objects), PCI order kept among devices of one locality. Devices
/// under one package, NUMA domain or cache are then contiguous, so that each task's run of
/// `ndev` is as local as the topology allows (fewest, deepest common ancestor); the
/// assignment puts each run back into PCI order.
pub fn compact(devices: &[Device], list: &[usize]) -> Vec<usize> {
    let mut out = list.to_vec();
    out.sort_by_key(|&d| devices[d].locality_obj);
    out
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

/// The logical indexes of the NUMA domains whose CPUs `devices` are local to, ascending.
fn numa_domains(node: &Node, devices: &[usize]) -> Vec<u32> {
    let mut out: Vec<u32> = node
        .topology
        .objects
        .iter()
        .filter(|o| o.kind == ObjKind::NumaNode)
        .filter(|o| devices.iter().filter_map(|&d| node.devices.get(d)).any(|d| d.locality.intersects(&o.cpuset)))
        .map(|o| o.logical_index)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether NUMA domains (ascending logical indexes) are neighbours, one after the other.
fn adjacent(domains: &[u32]) -> bool {
    match (domains.first(), domains.last()) {
        (Some(first), Some(last)) => (last - first) as usize + 1 == domains.len(),
        _ => true,
    }
}

/// Hints at `compact` when a task's devices lie in NUMA domains that are not neighbours (the
/// first four GCDs of an MI250X node in PCI order) and `compact` would give every task
/// neighbouring ones. `assignment`: each task's devices in the plan.
pub(super) fn compact_hint(
    node: &Node,
    spec: &Spec,
    list: &[usize],
    assignment: &[Vec<usize>],
    class_word: &str,
    warnings: &mut Vec<String>,
) {
    if spec.compact || spec.interleave.is_some() || spec.closest || !matches!(spec.target, Target::Class(_)) {
        return;
    }
    let Some((task, domains)) = assignment
        .iter()
        .enumerate()
        .filter(|(_, devs)| devs.len() > 1)
        .map(|(t, devs)| (t, numa_domains(node, devs)))
        .find(|(_, domains)| !adjacent(domains))
    else {
        return;
    };
    let ndev = assignment[task].len();
    let compacted = compact(&node.devices, list);
    if !compacted.chunks_exact(ndev).all(|group| adjacent(&numa_domains(node, group))) {
        return;
    }
    let mut better = spec.clone();
    better.compact = true;
    let mut names: Vec<String> = domains.iter().map(u32::to_string).collect();
    let last = names.pop().unwrap_or_default();
    let names = if names.is_empty() { last } else { format!("{} and {last}", names.join(", ")) };
    warnings.push(format!(
        "task {task}'s {ndev} {class_word} devices lie in NUMA domains {}, which are not neighbours (PCI order is not \
         the topology's here): --map-by-device={better} gives each task devices of neighbouring domains",
        names
    ));
}

/// Warns when every listed device shares one locality: binding cannot be made more specific.
pub(super) fn degenerate_warning(
    node: &Node,
    list: &[usize],
    class_word: &str,
    spec: &Spec,
    warnings: &mut Vec<String>,
) {
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
