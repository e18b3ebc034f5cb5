//! Which devices, in which order: the class's devices in PCI-bus order (or the one named
//! device), narrowed to the GPUs Slurm allocated to the step, then `interleave`d; and the
//! warning when they all share one locality.

use super::{PlanError, StepFacts};
use crate::cpuset::CpuSet;
use crate::device::{Device, DeviceClass};
use crate::node::Node;
use crate::spec::{BindLevel, GroupLevel, Spec, Target};
use crate::topology::{ObjKind, Topology};

/// The devices to map over, in PCI-bus order, and the word that names them in messages.
pub(super) fn device_list(
    spec: &Spec,
    node: &Node,
    facts: &StepFacts,
    host: &str,
) -> Result<(Vec<usize>, String), PlanError> {
    let (mut list, word) = match &spec.target {
        Target::Class(class) => {
            let list = node.class_indexes(*class);
            if list.is_empty() {
                return Err(PlanError::NoDevices { class: *class, host: host.into() });
            }
            (list, class.to_string())
        }
        Target::Name(name) => (vec![named_device(node, name)?], name.clone()),
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

/// The one device `name` names (OS name, identity, bus id or PMIx id), or the refusal that
/// lists what the node has and the nearest word to what was typed.
pub fn named_device(node: &Node, name: &str) -> Result<usize, PlanError> {
    if let Some(i) = node.devices.iter().position(|d| d.answers_to(name)) {
        return Ok(i);
    }
    let known: Vec<&str> = node.devices.iter().map(|d| d.name.as_str()).collect();
    let hint = if name.contains(',') {
        format!("; a comma does not separate qualifiers, write them with ':' ({})", name.replace(',', ":"))
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
