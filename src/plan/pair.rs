//! Which network adapters go with each task's GPUs (`adapters`): the adapters nearest each
//! GPU in the PCI tree, so that a rank's traffic leaves by the adapter next to its GPU; and
//! the warnings of a `network` mapping: a task handed an adapter no fabric variable names, or
//! the tasks' adapters all on fewer packages than the node's.
//!
//! - **Candidates** are the node's fabric adapters, the devices the `network` class hands out
//!   (`enumerate::fabric_of`): InfiniBand and RoCE adapters with an RDMA address, Omni-Path,
//!   Slingshot. A management or plain Ethernet port, or a function without RDMA, is never
//!   paired.
//! - **Nearness** is the deepest common ancestor of the GPU and the adapter, PCI bridges
//!   included: the same PCIe switch beats the same root port or host bridge, which beats the
//!   same locality object, which beats a CPU-side ancestor further up.
//! - **Not nearer than the machine**: an adapter whose only common ancestor with the GPU is the
//!   Machine (another socket) is no adapter of that GPU. Such a GPU gets none, and the plan
//!   warns; it is never handed a far adapter in silence.
//! - **Ties** split in bus order: the GPUs whose nearest adapters are the same set share that
//!   set out in bus order (two GPUs, two adapters: one each; two GPUs, one adapter: both;
//!   one GPU, two adapters: both).
//! - **Node-wide**: every GPU of the node is paired, whatever GPUs the step holds, so a GPU's
//!   adapter does not depend on its neighbours' steps (two jobs with one GPU each keep to
//!   their own adapters).
//! - **Sharing** is expected (two GPUs under one switch with one HCA) and needs no `shared`;
//!   the plan records which tasks share each adapter ([`super::types::Paired::holders`]).

use super::types::{Paired, PlanError, TaskPlan};
use crate::device::{Device, DeviceClass};
use crate::node::Node;
use crate::spec::{Spec, Target};
use crate::topology::Topology;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// How near two devices are: the depth of their deepest common CPU-side ancestor, then how
/// many PCI bridges below it they share. `(0, 0)`: only the Machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
struct Nearness {
    cpu_depth: u32,
    bridges: usize,
}

/// Every GPU's adapters on the node, by device index.
pub(super) struct NodePairs {
    /// `Ok`: the adapters (device indexes, bus order); `Err`: none, and the nearest ones,
    /// which share only the Machine with it.
    by_gpu: HashMap<usize, Result<Vec<usize>, Vec<usize>>>,
    /// When the node has no candidate at all: why (one warning instead of one per GPU).
    none_on_node: Option<String>,
}

/// Refuses `adapters` on a mapping that holds no GPU (a named network or block device; the
/// classes are refused by the spec parser).
pub(super) fn check_target(spec: &Spec, node: &Node, list: &[usize]) -> Result<(), PlanError> {
    if !spec.adapters || list.iter().any(|&i| node.devices[i].class == DeviceClass::Gpu) {
        return Ok(());
    }
    match list.first().map(|&i| &node.devices[i]) {
        Some(d) => Err(PlanError::AdaptersWithoutGpu { name: d.name.clone(), class: d.class }),
        None => Ok(()),
    }
}

impl NodePairs {
    /// Pairs every GPU of the node with its nearest candidate adapters.
    pub(super) fn new(node: &Node) -> NodePairs {
        let topo = &node.topology;
        let gpus = node.class_indexes(DeviceClass::Gpu);
        let candidates: Vec<usize> = node
            .class_indexes(DeviceClass::Network)
            .into_iter()
            .filter(|&i| node.devices[i].fabric.is_some())
            .collect();
        let mut by_gpu = HashMap::new();
        if candidates.is_empty() {
            return NodePairs { by_gpu, none_on_node: Some(no_candidates(node)) };
        }
        // GPUs whose nearest adapters are the same set, in bus order.
        let mut groups: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
        for &g in &gpus {
            let gpu = &node.devices[g];
            let near: Vec<Nearness> = candidates.iter().map(|&a| nearness(topo, gpu, &node.devices[a])).collect();
            let best = near.iter().copied().max().unwrap_or_default();
            let tied: Vec<usize> = candidates.iter().zip(&near).filter(|(_, n)| **n == best).map(|(&a, _)| a).collect();
            if best == Nearness::default() {
                by_gpu.insert(g, Err(tied));
                continue;
            }
            match groups.iter_mut().find(|(t, _)| *t == tied) {
                Some((_, members)) => members.push(g),
                None => groups.push((tied, vec![g])),
            }
        }
        for (tied, members) in groups {
            let (t, n) = (tied.len(), members.len());
            for (p, g) in members.into_iter().enumerate() {
                let share = if t >= n { tied[p * t / n..(p + 1) * t / n].to_vec() } else { vec![tied[p * t / n]] };
                by_gpu.insert(g, Ok(share));
            }
        }
        NodePairs { by_gpu, none_on_node: None }
    }

    /// The adapters of a task holding `devs`: those of each of its GPUs, in bus order, once.
    pub(super) fn for_task(&self, devs: &[usize]) -> Vec<usize> {
        let mut out: Vec<usize> = devs.iter().filter_map(|g| self.by_gpu.get(g)).flatten().flatten().copied().collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// One warning for the plan's GPUs that got no adapter (naming them and their tasks,
    /// grouped by the far adapters), or one for the node when it has no candidate at all.
    pub(super) fn warnings(&self, node: &Node, tasks: &[TaskPlan], warnings: &mut Vec<String>) {
        let mut lonely: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for t in tasks {
            for &d in t.devices.iter().filter(|&&d| node.devices[d].class == DeviceClass::Gpu) {
                if self.none_on_node.is_some() || matches!(self.by_gpu.get(&d), Some(Err(_))) {
                    lonely.entry(d).or_default().push(t.task);
                }
            }
        }
        if lonely.is_empty() {
            return;
        }
        if let Some(why) = &self.none_on_node {
            warnings.push(format!("adapters: {why}, so no task is given an adapter"));
            return;
        }
        let mut by_far: Vec<(&Vec<usize>, Vec<String>)> = Vec::new();
        for (d, ids) in lonely {
            let Some(Err(far)) = self.by_gpu.get(&d) else { continue };
            let gpu = &node.devices[d];
            let item = format!("{} at {} ({})", gpu.name, gpu.busid_text(), tasks_text(&ids));
            match by_far.iter_mut().find(|(f, _)| *f == far) {
                Some((_, items)) => items.push(item),
                None => by_far.push((far, vec![item])),
            }
        }
        for (far, gpus) in by_far {
            let names: Vec<&str> = far.iter().map(|&a| node.devices[a].name.as_str()).collect();
            let (one, them) = if gpus.len() == 1 { ("GPU", "it") } else { ("GPUs", "them") };
            let share = if names.len() == 1 { "shares" } else { "share" };
            warnings.push(format!(
                "adapters: no network adapter is nearer than the whole machine to {one} {} ({} {share} only the \
                 Machine with {them}: another socket), so no adapter is paired with {them}: UCX_NET_DEVICES and PSM3_NIC \
                 name none for {them}, and NCCL_IB_HCA (one list for the node) only adapters paired with other GPUs; \
                 map gpu without adapters to let the fabric library choose",
                gpus.join(", "),
                names.join(", ")
            ));
        }
    }
}

/// Each device group's adapters (the groups of `assignment`, once each), with every task
/// paired with each adapter: one list per adapter, shared by its tasks' entries. Empty
/// without `adapters`.
pub(super) fn adapters_by_group<'a>(
    pairs: Option<&NodePairs>,
    assignment: &'a [Vec<usize>],
) -> HashMap<&'a [usize], Vec<Paired>> {
    let Some(pairs) = pairs else { return HashMap::new() };
    let mut by_group: HashMap<&[usize], Vec<usize>> = HashMap::new();
    let mut holders: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for (t, devs) in assignment.iter().enumerate() {
        let adapters = by_group.entry(devs).or_insert_with(|| pairs.for_task(devs));
        for &a in adapters.iter() {
            holders.entry(a).or_default().push(t as u32);
        }
    }
    let holders: BTreeMap<usize, Arc<[u32]>> = holders.into_iter().map(|(a, v)| (a, Arc::from(v))).collect();
    by_group
        .into_iter()
        .map(|(devs, adapters)| {
            let paired = adapters
                .into_iter()
                .map(|device| Paired {
                    device,
                    holders: holders.get(&device).cloned().unwrap_or_else(|| Arc::from([])),
                })
                .collect();
            (devs, paired)
        })
        .collect()
}

/// What an adapter no fabric variable names is, in words.
fn unnamed_kind(d: &Device) -> String {
    match (d.fabric, d.held_back) {
        (Some(crate::device::Fabric::Slingshot), _) => {
            "Slingshot, whose CXI device this topology does not name: hwloc 2.14 and later do".into()
        }
        (_, Some(why)) => why.to_string(),
        _ if d.ofed_name.is_some() => "an OpenFabrics device no fabric library here takes".into(),
        _ => "a fabric adapter no variable names".into(),
    }
}

/// A `network` mapping on a node with named fabric adapters that gives some tasks an adapter no
/// fabric variable names (an OpenFabrics device of a vendor no row knows, a Slingshot NIC
/// whose CXI device hwloc does not name, a port named by the job): those tasks get only
/// `PMIX_DEVICE_ID` where their neighbours get `NCCL_IB_HCA`, which the plan says rather than
/// leave to be discovered. A node whose adapters are all of that kind treats every task
/// alike: no warning.
pub(super) fn unnamed_adapters_warning(spec: &Spec, node: &Node, tasks: &[TaskPlan], warnings: &mut Vec<String>) {
    let named = |i: &usize| !crate::env::fabric_variables(&node.devices[*i]).is_empty();
    if spec.target != Target::Class(DeviceClass::Network) || !node.class_indexes(DeviceClass::Network).iter().any(named)
    {
        return;
    }
    let mut given: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for t in tasks {
        for &d in &t.devices {
            if !named(&d) {
                given.entry(d).or_default().push(t.task);
            }
        }
    }
    if given.is_empty() {
        return;
    }
    let items: Vec<String> = given
        .iter()
        .map(|(&d, ids)| {
            let dev = &node.devices[d];
            format!("{} at {} ({}; {})", dev.name, dev.busid_text(), unnamed_kind(dev), tasks_text(ids))
        })
        .collect();
    let them = if items.len() == 1 { "it" } else { "them" };
    warnings.push(format!(
        "no fabric variable names {}: UCX_NET_DEVICES and PSM3_NIC are not set for {them}, and NCCL_IB_HCA (one \
         list for the node) names only the other tasks' adapters; map fewer tasks, or map gpu:adapters",
        items.join(", ")
    ));
}

/// The package (its index among the topology's objects) whose CPUs hold `d`'s locality.
fn package_of(node: &Node, d: &Device) -> Option<usize> {
    node.topology.objects.iter().position(|o| {
        o.kind == crate::topology::ObjKind::Package && !d.locality.is_empty() && d.locality.is_subset(&o.cpuset)
    })
}

/// A `network` mapping whose tasks' adapters all lie in fewer packages than the class's
/// adapters do (Summit's four rails, two per socket, and two tasks: both on socket 0): the
/// other package's adapters stay unused while the tasks crowd one socket. Said with the spec
/// that spreads them (`interleave`); a spec that already orders them is left alone.
pub(super) fn uneven_adapters_warning(
    spec: &Spec,
    node: &Node,
    list: &[usize],
    tasks: &[TaskPlan],
    warnings: &mut Vec<String>,
) {
    if spec.target != Target::Class(DeviceClass::Network) || spec.interleave.is_some() || spec.compact || spec.closest {
        return;
    }
    let mut used: Vec<usize> = tasks.iter().flat_map(|t| t.devices.iter().copied()).collect();
    used.sort_unstable();
    used.dedup();
    let packages = |devs: &[usize]| {
        let mut p: Vec<usize> =
            devs.iter().filter_map(|&i| node.devices.get(i)).filter_map(|d| package_of(node, d)).collect();
        p.sort_unstable();
        p.dedup();
        p
    };
    let (mine, all) = (packages(&used), packages(list));
    if mine.is_empty() || mine.len() >= used.len().min(all.len()) {
        return;
    }
    let idle: Vec<&str> = list
        .iter()
        .filter(|i| !used.contains(i))
        .filter_map(|&i| node.devices.get(i))
        .filter(|d| package_of(node, d).is_some_and(|p| !mine.contains(&p)))
        .map(|d| d.name.as_str())
        .collect();
    let shown = if idle.len() > 4 { format!("{}, ...", idle[..4].join(", ")) } else { idle.join(", ") };
    let mut better = spec.clone();
    better.interleave = Some(crate::spec::GroupLevel::Package);
    warnings.push(format!(
        "the tasks' {} network adapters all lie in {} of the node's {} packages with adapters, leaving {} on the \
         others unused ({shown}): --map-by-device={better} spreads the tasks over the packages",
        used.len(),
        mine.len(),
        all.len(),
        idle.len()
    ));
}

pub(super) fn tasks_text(ids: &[u32]) -> String {
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    format!("{} {}", if ids.len() == 1 { "task" } else { "tasks" }, list.join(","))
}

/// Why a node has no adapter to pair: it has no fabric adapter; the network devices it does
/// have, and why each is held back.
fn no_candidates(node: &Node) -> String {
    let others: Vec<String> = node
        .held_back(DeviceClass::Network)
        .into_iter()
        .map(|i| {
            let d = &node.devices[i];
            format!("{} is {}", d.name, d.held_back.map(|h| h.to_string()).unwrap_or_default())
        })
        .collect();
    let have = if others.is_empty() { String::new() } else { format!(" ({})", others.join("; ")) };
    format!(
        "node {} has no fabric adapter (InfiniBand or RoCE with an RDMA address, Omni-Path, Slingshot){have}",
        node.hostname()
    )
}

/// The deepest common ancestor of two devices, bridges included.
fn nearness(topo: &Topology, a: &Device, b: &Device) -> Nearness {
    let depth = |i: usize| topo.objects.get(i).map_or(0, |o| o.depth);
    if a.locality_obj == b.locality_obj {
        let bridges = a.pci_path.iter().zip(&b.pci_path).take_while(|(x, y)| x == y).count();
        return Nearness { cpu_depth: depth(a.locality_obj), bridges };
    }
    // Climb from the deeper side until both meet (localities are normal objects, whose
    // parents are normal objects); a malformed tree ends at the Machine.
    let (mut x, mut y) = (a.locality_obj, b.locality_obj);
    for _ in 0..2 * topo.objects.len() {
        if x == y {
            break;
        }
        let parent = |i: usize| topo.objects.get(i).and_then(|o| o.parent).unwrap_or(0);
        if depth(x) >= depth(y) {
            x = parent(x);
        } else {
            y = parent(y);
        }
    }
    Nearness { cpu_depth: if x == y { depth(x) } else { 0 }, bridges: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, StepFacts};
    use crate::test_support::pci::{br, gpu, hca, node};
    use crate::topology::PciFunction;

    fn adapters_of_task0(n: &Node, ntasks: u32) -> Vec<String> {
        let spec = Spec::parse("gpu:adapters:bind=none").unwrap_or_else(|e| panic!("{e}"));
        let p = plan(&spec, n, &StepFacts { ntasks, ..StepFacts::default() }).unwrap_or_else(|e| panic!("{e}"));
        p.tasks[0].adapters.iter().map(|a| n.devices[a.device].name.clone()).collect()
    }

    #[test]
    fn deepest_common_ancestor_first_switch_then_root_port_then_locality() {
        let (h0, r1, s, d1, d2, r2) = (
            br(None, 0x10),
            br(Some(0x10), 0x11),
            br(Some(0x11), 0x12),
            br(Some(0x12), 0x13),
            br(Some(0x12), 0x14),
            br(Some(0x10), 0x15),
        );
        let g = gpu(0x13, 1, vec![h0, r1, s, d1]);
        let switch = hca(0x14, 1, vec![h0, r1, s, d2]);
        let root_port = hca(0x16, 1, vec![h0, r1, br(Some(0x11), 0x16)]);
        let host_bridge = hca(0x17, 1, vec![h0, r2]);
        let locality = hca(0x21, 1, vec![br(None, 0x20)]);
        let far = hca(0x81, 2, vec![br(None, 0x80)]);
        let all = vec![g.clone(), switch, root_port.clone(), host_bridge.clone(), locality.clone(), far.clone()];
        assert_eq!(adapters_of_task0(&node(all), 1), ["mlx5_14"]);
        let no_switch = vec![g.clone(), root_port, host_bridge.clone(), locality.clone(), far.clone()];
        assert_eq!(adapters_of_task0(&node(no_switch), 1), ["mlx5_16"]);
        let no_root = vec![g.clone(), host_bridge, locality.clone(), far.clone()];
        assert_eq!(adapters_of_task0(&node(no_root), 1), ["mlx5_17"]);
        assert_eq!(adapters_of_task0(&node(vec![g.clone(), locality, far.clone()]), 1), ["mlx5_21"]);
        // Only the machine in common: none, and a warning naming the far adapter.
        let n = node(vec![g, far]);
        assert!(adapters_of_task0(&n, 1).is_empty());
        let spec = Spec::parse("gpu:adapters:bind=none").unwrap_or_else(|e| panic!("{e}"));
        let p = plan(&spec, &n, &StepFacts { ntasks: 1, ..StepFacts::default() }).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.warnings.iter().any(|w| w.contains("mlx5_81 shares only the Machine")), "{:?}", p.warnings);
    }

    #[test]
    fn ties_split_in_bus_order() {
        let h = br(None, 0x10);
        let port = |b: u8| br(Some(0x10), b);
        // One GPU, two adapters equally near: both.
        let one = node(vec![
            gpu(0x11, 1, vec![h, port(0x11)]),
            hca(0x12, 1, vec![h, port(0x12)]),
            hca(0x13, 1, vec![h, port(0x13)]),
        ]);
        assert_eq!(adapters_of_task0(&one, 1), ["mlx5_12", "mlx5_13"]);
        // Four GPUs, two adapters, all on one host bridge: two GPUs per adapter, in bus order.
        let mut pci: Vec<PciFunction> = (0x11..=0x14).map(|b| gpu(b, 1, vec![h, port(b)])).collect();
        pci.extend([hca(0x15, 1, vec![h, port(0x15)]), hca(0x16, 1, vec![h, port(0x16)])]);
        let four = node(pci);
        let spec = Spec::parse("gpu:adapters:bind=none").unwrap_or_else(|e| panic!("{e}"));
        let p = plan(&spec, &four, &StepFacts { ntasks: 4, ..StepFacts::default() }).unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(&str, Vec<u32>)> = p
            .tasks
            .iter()
            .map(|t| (four.devices[t.adapters[0].device].name.as_str(), t.adapters[0].shared_with(t.task)))
            .collect();
        let want = [("mlx5_15", vec![1]), ("mlx5_15", vec![0]), ("mlx5_16", vec![3]), ("mlx5_16", vec![2])];
        assert_eq!(got, want);
    }
}
