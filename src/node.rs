//! The node model: a topology plus its enumerated devices, built once per step (plugin) or
//! per command (CLI) and read by the planner.

use crate::device::{Device, DeviceClass, ZeHierarchy};
use crate::text::printable;
use crate::topology::Topology;
use std::path::PathBuf;

/// Where identities and names come from, beyond the topology itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeOptions {
    /// Host name for PMIx GPU ids (`gpu://<host>::nvml0`); defaults to the topology's HostName.
    pub hostname: Option<String>,
    /// Root of the kernel's /proc for driver identity files (NVIDIA); `None` = do not read.
    pub proc_root: Option<PathBuf>,
    /// Root of /sys for driver identity files (AMD `unique_id`); `None` = do not read.
    pub sys_root: Option<PathBuf>,
    /// The Level Zero hierarchy model in force where the topology was discovered.
    pub ze_hierarchy: Option<ZeHierarchy>,
}

/// A node's topology and its devices in PCI-bus order.
#[derive(Debug, Clone)]
pub struct Node {
    pub topology: Topology,
    pub devices: Vec<Device>,
    pub options: NodeOptions,
}

impl Node {
    /// Names from a topology file or slurmd's cache reach one-line messages, reports and
    /// (after their grammar check) variables: they are made printable here, once
    /// ([`crate::text::printable`]). A name that needed it then fails its variable's grammar,
    /// so its device is refused rather than named (found by the cache fuzz target: a host name
    /// with a control character went into every refusal).
    ///
    /// Enumerates the devices of `topology` (pure, [`crate::enumerate`]), then gives GPUs that
    /// hwloc could not name the identity in their driver's files (I/O, only under the roots
    /// in `options`: [`crate::driver_ids`]), then drops identities that name no single GPU.
    pub fn new(mut topology: Topology, mut options: NodeOptions) -> Node {
        for name in [&mut topology.hostname, &mut options.hostname].into_iter().flatten() {
            *name = printable(name);
        }
        let mut node = Node { topology, devices: Vec::new(), options };
        let mut devices = crate::enumerate::devices(&node.topology, node.hostname());
        for d in &mut devices {
            for name in d.osnames.iter_mut().chain([&mut d.name]) {
                *name = printable(name);
            }
        }
        let roots = crate::driver_ids::Roots {
            proc_root: node.options.proc_root.as_deref(),
            sys_root: node.options.sys_root.as_deref(),
        };
        crate::driver_ids::fill_identities(&mut devices, roots);
        crate::enumerate::settle_identities(&mut devices);
        node.devices = devices;
        node
    }

    /// The devices one class hands out, in order, as indexes into `devices`: every device of
    /// the class but those held back ([`crate::device::HeldBack`]: plain Ethernet, functions
    /// without RDMA, removable media).
    pub fn class_indexes(&self, class: DeviceClass) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&i| self.devices[i].class == class && self.devices[i].held_back.is_none())
            .collect()
    }

    /// The devices of one class that it holds back, in order, as indexes into `devices`.
    pub fn held_back(&self, class: DeviceClass) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&i| self.devices[i].class == class && self.devices[i].held_back.is_some())
            .collect()
    }

    /// Slurm's GPU index (position in PCI-bus order among the node's GPUs) of each GPU named
    /// by its vendor identity (`GPU-<uuid>`, any case); `Err` names the first one the node does
    /// not have.
    pub fn gpu_indices_of(&self, ids: &[String]) -> Result<Vec<u32>, String> {
        let gpus = self.class_indexes(DeviceClass::Gpu);
        ids.iter()
            .map(|id| {
                gpus.iter()
                    .position(|&i| self.devices[i].gpu_id().is_some_and(|g| g.display_id().eq_ignore_ascii_case(id)))
                    .map(|p| p as u32)
                    .ok_or_else(|| id.clone())
            })
            .collect()
    }

    /// The host name used in ids and messages.
    pub fn hostname(&self) -> &str {
        self.options.hostname.as_deref().or(self.topology.hostname.as_deref()).unwrap_or("localhost")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{CpuObject, ObjKind, OsDevice, PciFunction};

    #[test]
    fn names_are_printable_once_in_the_node() {
        let cpuset = crate::cpuset::CpuSet::single(0);
        let machine =
            CpuObject { kind: ObjKind::Machine, logical_index: 0, os_index: Some(0), depth: 0, parent: None, cpuset };
        let hca = OsDevice { name: "mlx5\n0".into(), osdev_type: "OpenFabrics".into(), subtype: None, infos: vec![] };
        let topology = Topology {
            hostname: Some("omni\u{7f}path".into()),
            objects: vec![machine],
            pci: vec![PciFunction {
                busid: "0000:18:00.0".parse().unwrap(),
                vendor_id: 0x15b3,
                device_id: 0x101b,
                class_id: 0x0207,
                locality: 0,
                osdevs: vec![hca],
                bridges: Vec::new(),
            }],
            loose: vec![],
        };
        let node = Node::new(topology, NodeOptions::default());
        assert_eq!(node.hostname(), "omni\\u{7f}path");
        assert_eq!(node.devices[0].name, "mlx5\\n0");
        assert!(node.devices[0].osnames.iter().all(|n| !n.contains('\n')));
    }
}
