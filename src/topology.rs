//! The node's hardware as plain data: the CPU tree (machine, packages, groups, NUMA nodes,
//! caches, cores, hardware threads) and the PCI functions with their OS devices and info keys.
//!
//! This is what the hwloc loader (`crate::load`) produces and everything after it reads.
//! Nothing here knows about hwloc's API or about Slurm, so the enumerator and the planner are
//! pure functions that tests can feed from XML or build by hand.

use crate::cpuset::CpuSet;
use std::fmt;

/// The kinds of CPU-side (non-I/O) object the planner cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum ObjKind {
    Machine,
    Package,
    Die,
    Group,
    /// A NUMA node. In hwloc 2 these are memory children, not tree ancestors: its `parent` is
    /// the object it is attached to and it is never used as a common ancestor.
    NumaNode,
    L3Cache,
    L2Cache,
    L1Cache,
    Core,
    Pu,
    /// Anything else with a cpuset (L4/L5 caches, instruction caches, MemCache ...).
    Other,
}

/// One CPU-side object of the tree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuObject {
    pub kind: ObjKind,
    /// hwloc's logical index within its kind (what `lstopo` prints as `L#`).
    pub logical_index: u32,
    /// hwloc's OS index (`P#`), where the kind has one.
    pub os_index: Option<u32>,
    /// Tree depth from the Machine (0). NUMA nodes carry their parent's depth.
    pub depth: u32,
    /// Index into [`Topology::objects`] of the parent; `None` only for the Machine.
    pub parent: Option<usize>,
    /// The PUs (OS indexes) under this object.
    pub cpuset: CpuSet,
}

/// A PCI address `domain:bus:device.function`, ordered numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciBusId {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for PciBusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

crate::cpuset::serde_as_text!(PciBusId);

impl std::str::FromStr for PciBusId {
    type Err = String;
    /// Reads `0000:06:00.0` or `06:00.0` (domain 0).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid PCI bus id {s:?} (expected DDDD:BB:DD.F such as 0000:06:00.0)");
        let (rest, function) = s.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, dev] => (*d, *b, *dev),
            [b, dev] => ("0", *b, *dev),
            _ => return Err(bad()),
        };
        Ok(PciBusId {
            domain: u32::from_str_radix(domain, 16).map_err(|_| bad())?,
            bus: u8::from_str_radix(bus, 16).map_err(|_| bad())?,
            device: u8::from_str_radix(device, 16).map_err(|_| bad())?,
            function: u8::from_str_radix(function, 16).map_err(|_| bad())?,
        })
    }
}

/// An hwloc OS device (`cuda0`, `nvml0`, `renderD128`, `mlx5_0`, `ib0`, `nvme0n1` ...).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OsDevice {
    pub name: String,
    /// hwloc's OS device type as it names it: "GPU", "CoProc", "Network", "OpenFabrics",
    /// "Block", "DMA", "Memory" (varies with the hwloc that wrote an XML; do not rely on it
    /// for GPU detection, see the enumerator).
    pub osdev_type: String,
    /// hwloc's subtype (`CUDA`, `NVML`, `RSMI`, `LevelZero`, `OpenCL`, `NVMe` ...), when
    /// the writer recorded one.
    pub subtype: Option<String>,
    /// Info key/value pairs in file order (`Backend`, `NVIDIAUUID`, `AMDUUID`,
    /// `LevelZeroDriverIndex`, `NodeGUID`, `Port1State` ...).
    pub infos: Vec<(String, String)>,
}

impl OsDevice {
    /// The first value of info key `key`.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.infos.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// A PCI function and the OS devices hwloc found under it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PciFunction {
    pub busid: PciBusId,
    pub vendor_id: u16,
    pub device_id: u16,
    /// PCI class and subclass, e.g. 0x0302 for a 3D controller.
    pub class_id: u16,
    /// Index into [`Topology::objects`] of the nearest non-I/O ancestor (the locality).
    pub locality: usize,
    pub osdevs: Vec<OsDevice>,
}

/// An OS device that hangs off no PCI function (`sda` under the Machine, for example).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LooseOsDevice {
    pub osdev: OsDevice,
    /// Index into [`Topology::objects`] of the nearest non-I/O ancestor.
    pub locality: usize,
}

/// A node's topology as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Topology {
    /// The `HostName` info of the root object, if any.
    pub hostname: Option<String>,
    /// Every CPU-side object, parents before children; index 0 is the Machine.
    pub objects: Vec<CpuObject>,
    /// Every PCI function that has OS devices or that a filter needs (in any order).
    pub pci: Vec<PciFunction>,
    /// OS devices with no PCI parent.
    pub loose: Vec<LooseOsDevice>,
}

impl Topology {
    /// All objects of one kind, in logical order.
    pub fn of_kind(&self, kind: ObjKind) -> impl Iterator<Item = &CpuObject> + '_ {
        let mut v: Vec<&CpuObject> = self.objects.iter().filter(|o| o.kind == kind).collect();
        v.sort_by_key(|o| o.logical_index);
        v.into_iter()
    }

    /// The whole machine's PUs.
    pub fn all_cpus(&self) -> CpuSet {
        self.objects.first().map(|o| o.cpuset.clone()).unwrap_or_default()
    }

    /// Re-reads the state of every InfiniBand port (`Port<N>State` of the OpenFabrics OS
    /// devices) from `<sys_root>/class/infiniband/<dev>/ports/<N>/state`, the file hwloc read
    /// them from (hwloc keeps its first digit: `4: ACTIVE` gives `4`). A topology discovered
    /// earlier (slurmd's cache) may predate a link coming up; everything else it holds does
    /// not change while the node runs. A file that cannot be read leaves the value as it was.
    /// Returns how many values changed.
    pub fn refresh_ib_port_states(&mut self, sys_root: &std::path::Path) -> usize {
        let mut changed = 0;
        let osdevs =
            self.pci.iter_mut().flat_map(|f| f.osdevs.iter_mut()).chain(self.loose.iter_mut().map(|l| &mut l.osdev));
        for osdev in osdevs.filter(|o| o.osdev_type == "OpenFabrics") {
            let dir = sys_root.join("class/infiniband").join(&osdev.name).join("ports");
            for (key, value) in osdev.infos.iter_mut() {
                let Some(port) = key.strip_prefix("Port").and_then(|k| k.strip_suffix("State")) else { continue };
                if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(dir.join(port).join("state")) else { continue };
                let Some(digit) = text.trim_start().chars().next().filter(char::is_ascii_digit) else { continue };
                if *value != digit.to_string() {
                    *value = digit.to_string();
                    changed += 1;
                }
            }
        }
        changed
    }

    /// Indexes of `index` and its tree ancestors, nearest first (NUMA nodes are skipped as
    /// ancestors but returned when `index` itself is one).
    pub fn ancestors(&self, index: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut cur = Some(index);
        while let Some(i) = cur {
            let Some(obj) = self.objects.get(i) else { break };
            if i == index || obj.kind != ObjKind::NumaNode {
                out.push(i);
            }
            cur = obj.parent;
            if out.len() > self.objects.len() {
                break; // a malformed parent cycle; never loop forever
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn hca(name: &str, infos: &[(&str, &str)]) -> OsDevice {
        OsDevice {
            name: name.into(),
            osdev_type: "OpenFabrics".into(),
            subtype: None,
            infos: infos.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn ib_port_states_are_reread_from_sysfs() {
        let root = std::env::temp_dir().join(format!("mbd-ibports-{}", std::process::id()));
        let ports = root.join("class/infiniband/mlx5_0/ports");
        std::fs::create_dir_all(ports.join("1")).unwrap();
        std::fs::create_dir_all(ports.join("2")).unwrap();
        std::fs::write(ports.join("1/state"), "4: ACTIVE\n").unwrap();
        std::fs::write(ports.join("2/state"), "1: DOWN\n").unwrap();
        let mut topo = Topology {
            pci: vec![PciFunction {
                busid: "0000:18:00.0".parse().unwrap(),
                vendor_id: 0x15b3,
                device_id: 0x101b,
                class_id: 0x0207,
                locality: 0,
                osdevs: vec![
                    hca("mlx5_0", &[("NodeGUID", "x"), ("Port1State", "1"), ("Port2State", "4"), ("Port3State", "4")]),
                    OsDevice { name: "ib0".into(), osdev_type: "Network".into(), subtype: None, infos: vec![] },
                ],
            }],
            loose: vec![LooseOsDevice { osdev: hca("mlx5_9", &[("Port1State", "1")]), locality: 0 }],
            ..Topology::default()
        };
        assert_eq!(topo.refresh_ib_port_states(&root), 2);
        let infos = &topo.pci[0].osdevs[0].infos;
        assert_eq!(topo.pci[0].osdevs[0].info("Port1State"), Some("4"));
        assert_eq!(topo.pci[0].osdevs[0].info("Port2State"), Some("1"));
        // No file (port 3, mlx5_9): left as discovered.
        assert_eq!(topo.pci[0].osdevs[0].info("Port3State"), Some("4"));
        assert_eq!(topo.loose[0].osdev.info("Port1State"), Some("1"));
        assert_eq!(infos[0], ("NodeGUID".to_string(), "x".to_string()));
        assert_eq!(topo.refresh_ib_port_states(&root), 0);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
