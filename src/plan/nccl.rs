//! Which adapter NCCL itself gives each GPU among those `NCCL_IB_HCA` lists, and the warning
//! where that is not the adapter `adapters` paired with it.
//!
//! `NCCL_IB_HCA` is one list per node (`env`): NCCL requires the same value on every rank of
//! a node, and picks each GPU's adapters from that list itself. It ranks them as NCCL 2.30's
//! `ncclTopoGetLocal` (src/graph/topo.cc) does, by the class of the PCI path between GPU and
//! adapter (src/graph/paths.cc, `ncclTopoSetPaths`; src/include/graph.h):
//!
//! - **PIX**: both hang off the same PCI node (one PCIe switch);
//! - **PXB**: they meet at a PCI node further up, through more than one switch, without
//!   passing the CPU;
//! - **PHB**: they meet only at the CPU (NCCL's CPU node is a NUMA domain: every host bridge
//!   and root port of it alike; there is no `NODE` class since NCCL 2.6);
//! - **SYS**: different NUMA domains.
//!
//! NCCL's PCI nodes are not every bridge: its sysfs walk (`ncclTopoGetXmlFromSys`,
//! src/graph/xml.cc) steps up two levels at a time, so a switch's downstream port folds into
//! its upstream port, and a root port directly above a device is skipped. Here: every second
//! PCI bridge up from the device, until the host bridge; the CPU node is the device's locality.
//!
//! Not modelled: NCCL ranks paths by bandwidth before class (the check assumes the adapters'
//! links are alike, as on nodes built with one adapter model), PXN routes through an
//! NVLink peer GPU, and Broadcom switches NCCL flattens. Where several adapters tie for a GPU,
//! NCCL tells them apart by the GPU's device index (`ncclTopoGetLocalNetType`), which the plan
//! cannot know: the plan says so.

use super::types::TaskPlan;
use crate::device::{Device, DeviceClass};
use crate::node::Node;
use crate::topology::PciBusId;
use std::collections::BTreeMap;
use std::fmt;

/// NCCL's PCI path classes between a GPU and a network adapter, nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathClass {
    Pix,
    Pxb,
    Phb,
    Sys,
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathClass::Pix => "PIX",
            PathClass::Pxb => "PXB",
            PathClass::Phb => "PHB",
            PathClass::Sys => "SYS",
        })
    }
}

/// The PCI nodes NCCL puts above a device, nearest first: every second bridge up from it,
/// while bridges with an address last (NCCL stops at the first sysfs parent that is not a
/// PCI address: the host bridge).
fn pci_nodes(d: &Device) -> Vec<PciBusId> {
    let up: Vec<PciBusId> = d.pci_path.iter().rev().map_while(|b| b.busid).collect();
    up.into_iter().skip(1).step_by(2).collect()
}

/// The class of NCCL's path between `gpu` and `adapter`.
pub fn path_class(gpu: &Device, adapter: &Device) -> PathClass {
    let (g, a) = (pci_nodes(gpu), pci_nodes(adapter));
    if let Some(gi) = g.iter().position(|n| a.contains(n)) {
        let ai = a.iter().position(|n| *n == g[gi]);
        return if gi == 0 && ai == Some(0) { PathClass::Pix } else { PathClass::Pxb };
    }
    if gpu.locality_obj == adapter.locality_obj {
        PathClass::Phb
    } else {
        PathClass::Sys
    }
}

/// The adapters of `listed` (device indexes) NCCL ranks first for `gpu`, with their class.
pub fn nearest(node: &Node, gpu: usize, listed: &[usize]) -> Option<(PathClass, Vec<usize>)> {
    let g = node.devices.get(gpu)?;
    let classes: Vec<(usize, PathClass)> =
        listed.iter().filter_map(|&a| node.devices.get(a).map(|d| (a, path_class(g, d)))).collect();
    let best = classes.iter().map(|(_, c)| *c).min()?;
    Some((best, classes.into_iter().filter(|(_, c)| *c == best).map(|(a, _)| a).collect()))
}

/// What NCCL would choose from for a GPU: its nearest adapters, their class, and whether the
/// paired adapters are among them (a tie NCCL breaks by device index).
type Choice = (Vec<usize>, PathClass, bool);

/// The GPUs of the plan for which NCCL, choosing among `listed` (the node's `NCCL_IB_HCA`),
/// would not use exactly the adapters `adapters` paired with them: another adapter is nearer
/// by NCCL's classes, or several tie and NCCL picks among them by device index. One warning
/// per set NCCL would choose from, naming each GPU, its tasks and its paired adapters. GPUs
/// with no paired adapter are warned about by the pairing itself.
pub(super) fn warnings(node: &Node, tasks: &[TaskPlan], listed: &[usize], warnings: &mut Vec<String>) {
    let mut by_gpu: BTreeMap<usize, (Vec<usize>, Vec<u32>)> = BTreeMap::new();
    for t in tasks {
        let paired: Vec<usize> = t.adapters.iter().map(|p| p.device).filter(|a| listed.contains(a)).collect();
        for &g in t.devices.iter().filter(|&&d| node.devices.get(d).is_some_and(|d| d.class == DeviceClass::Gpu)) {
            by_gpu.entry(g).or_insert_with(|| (paired.clone(), Vec::new())).1.push(t.task);
        }
    }
    let name = |i: usize| node.devices.get(i).map_or("?", |d| d.name.as_str());
    let mut groups: Vec<(Choice, Vec<String>)> = Vec::new();
    for (g, (paired, holders)) in by_gpu {
        let (Some(gpu), Some((class, best))) = (node.devices.get(g), nearest(node, g, listed)) else { continue };
        if paired.is_empty() || best == paired {
            continue;
        }
        let paired_text: Vec<String> = paired
            .iter()
            .filter_map(|&a| node.devices.get(a))
            .map(|d| format!("{} {}", d.name, path_class(gpu, d)))
            .collect();
        let item = format!(
            "GPU {} at {} ({}, paired with {})",
            gpu.name,
            gpu.busid_text(),
            super::pair::tasks_text(&holders),
            paired_text.join(", ")
        );
        let tie = paired.iter().all(|a| best.contains(a));
        let key = (best, class, tie);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, items)) => items.push(item),
            None => groups.push((key, vec![item])),
        }
    }
    for ((best, class, tie), gpus) in groups {
        let set = best.iter().map(|&i| name(i)).collect::<Vec<_>>().join(", ");
        let what = if tie {
            "ranks them alike and picks among them by the GPU's device index, so it may use another than the paired \
             adapter"
        } else {
            "would use them rather than the paired adapter (the pairing counts every PCI bridge, NCCL every second \
             one)"
        };
        warnings.push(format!(
            "NCCL_IB_HCA lists the node's adapters, and for {} NCCL's nearest are {set} ({class}: {}): it {what}; \
             UCX_NET_DEVICES and PSM3_NIC name the paired one",
            gpus.join("; "),
            class_words(class)
        ));
    }
}

/// What a class means, for the warning.
fn class_words(class: PathClass) -> &'static str {
    match class {
        PathClass::Pix => "the same PCIe switch",
        PathClass::Pxb => "through several PCIe switches",
        PathClass::Phb => "through the CPU",
        PathClass::Sys => "across NUMA domains",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, StepFacts};
    use crate::spec::Spec;
    use crate::test_support::pci::{br, gpu, hca, node};

    fn device<'a>(n: &'a Node, name: &str) -> &'a Device {
        n.devices.iter().find(|d| d.name == name).unwrap_or_else(|| panic!("{name}"))
    }

    fn warnings_of(n: &Node, ntasks: u32) -> Vec<String> {
        let spec = Spec::parse("gpu:adapters:bind=none").unwrap_or_else(|e| panic!("{e}"));
        let p = plan(&spec, n, &StepFacts { ntasks, ..StepFacts::default() }).unwrap_or_else(|e| panic!("{e}"));
        p.warnings.into_iter().filter(|w| w.starts_with("NCCL_IB_HCA")).collect()
    }

    /// NCCL's sysfs walk, by hand: a root port (0x10) under the host bridge, a switch below it
    /// (upstream 0x11, downstream ports 0x12-0x14), a second switch (0x15, 0x16) below
    /// downstream port 0x12.
    #[test]
    fn classes_follow_nccls_walk_two_bridges_at_a_time() {
        let (h, rp) = (br(None, 0x10), br(Some(0x10), 0x11));
        let (up, d2, d3, d4) = (br(Some(0x11), 0x12), br(Some(0x12), 0x20), br(Some(0x12), 0x30), br(Some(0x12), 0x40));
        let (up2, d5) = (br(Some(0x20), 0x21), br(Some(0x21), 0x22));
        let n = node(vec![
            gpu(0x30, 1, vec![h, rp, up, d3]),
            hca(0x40, 1, vec![h, rp, up, d4]),
            gpu(0x22, 1, vec![h, rp, up, d2, up2, d5]),
            hca(0x11, 1, vec![h, rp]),
            hca(0x81, 2, vec![br(None, 0x80), br(Some(0x80), 0x81)]),
        ]);
        let (g_switch, g_deep) = (device(&n, "nvml48"), device(&n, "nvml34"));
        let (h_switch, h_root, h_far) = (device(&n, "mlx5_40"), device(&n, "mlx5_11"), device(&n, "mlx5_81"));
        // One switch between them: PIX. Through the nested switch as well: PXB.
        assert_eq!(path_class(g_switch, h_switch), PathClass::Pix);
        assert_eq!(path_class(g_deep, h_switch), PathClass::Pxb);
        // The HCA on the root port: NCCL folds the root port into the CPU, so only PHB, as
        // for any adapter of the same NUMA domain; the other package's: SYS.
        assert_eq!(path_class(g_switch, h_root), PathClass::Phb);
        assert_eq!(path_class(g_switch, h_far), PathClass::Sys);
        let all: Vec<usize> = (0..n.devices.len()).filter(|&i| n.devices[i].class == DeviceClass::Network).collect();
        let idx = |name: &str| n.devices.iter().position(|d| d.name == name).unwrap_or(usize::MAX);
        assert_eq!(nearest(&n, idx("nvml48"), &all), Some((PathClass::Pix, vec![idx("mlx5_40")])));
    }

    /// The pairing counts every bridge in common; NCCL every second one from the device up.
    /// An adapter behind a bridge of its own (an adapter's internal switch) shares four bridges
    /// with the first GPU and is paired with it, but falls out of step with NCCL's walk (PHB),
    /// while the second GPU's adapter, under a switch of its own, shares three and is PXB to
    /// NCCL: the plan says NCCL would use that one for the first GPU.
    #[test]
    fn where_nccl_would_use_another_adapter_the_plan_says_so() {
        let (h, rp, s1u) = (br(None, 0x10), br(Some(0x10), 0x11), br(Some(0x11), 0x12));
        let (s1d, s1e) = (br(Some(0x12), 0x13), br(Some(0x12), 0x20));
        let (s2u, s2d, inner) = (br(Some(0x13), 0x14), br(Some(0x14), 0x15), br(Some(0x13), 0x16));
        let (s3u, s3d, s3e) = (br(Some(0x20), 0x21), br(Some(0x21), 0x22), br(Some(0x21), 0x23));
        let n = node(vec![
            gpu(0x15, 1, vec![h, rp, s1u, s1d, s2u, s2d]),
            hca(0x16, 1, vec![h, rp, s1u, s1d, inner]),
            gpu(0x22, 1, vec![h, rp, s1u, s1e, s3u, s3d]),
            hca(0x23, 1, vec![h, rp, s1u, s1e, s3u, s3e]),
        ]);
        let (g, paired, other) = (device(&n, "nvml21"), device(&n, "mlx5_16"), device(&n, "mlx5_23"));
        assert_eq!((path_class(g, paired), path_class(g, other)), (PathClass::Phb, PathClass::Pxb));
        let w = warnings_of(&n, 2);
        assert_eq!(w.len(), 1, "{w:?}");
        for needle in [
            "GPU nvml21 at 0000:15:00.0 (task 0, paired with mlx5_16 PHB)",
            "NCCL's nearest are mlx5_23 (PXB",
            "would use them rather than the paired adapter",
        ] {
            assert!(w[0].contains(needle), "{needle}: {}", w[0]);
        }
        // The second GPU's own adapter is PIX to it, and its pair: not named.
        assert!(!w[0].contains("nvml34"), "{}", w[0]);
    }

    /// Two GPUs and two adapters, each pair on a root port of its own in one NUMA domain:
    /// NCCL sees all four paths as PHB and picks by device index; one warning names both.
    #[test]
    fn ties_nccl_breaks_by_index_are_warned_once_per_set() {
        let h = br(None, 0x10);
        let port = |b: u8| br(Some(0x10), b);
        let n = node(vec![
            gpu(0x11, 1, vec![h, port(0x11)]),
            hca(0x12, 1, vec![h, port(0x12)]),
            gpu(0x13, 1, vec![h, port(0x13)]),
            hca(0x14, 1, vec![h, port(0x14)]),
        ]);
        let w = warnings_of(&n, 2);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("(task 0, paired with mlx5_12 PHB); GPU nvml19"), "{}", w[0]);
        assert!(
            w[0].contains("NCCL's nearest are mlx5_12, mlx5_14 (PHB: through the CPU): it ranks them alike"),
            "{}",
            w[0]
        );
        // Under one switch each (PIX), NCCL's choice is the pair: nothing to say.
        let (s, d) = (br(Some(0x10), 0x11), |b: u8| br(Some(0x11), b));
        let n = node(vec![gpu(0x12, 1, vec![h, s, d(0x12)]), hca(0x13, 1, vec![h, s, d(0x13)])]);
        assert!(warnings_of(&n, 1).is_empty());
    }
}
