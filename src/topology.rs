//! The node's hardware as plain data: the CPU tree (machine, packages, groups, NUMA nodes,
//! caches, cores, hardware threads) and the PCI functions with their OS devices, info keys
//! and the chain of PCI bridges (host bridge, root port, switch ports) above each.
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

/// Text that is not a PCI bus id; keeps the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid PCI bus id {text:?} (expected DDDD:BB:DD.F such as 0000:06:00.0)")]
pub struct PciBusIdError {
    pub text: String,
}

impl std::str::FromStr for PciBusId {
    type Err = PciBusIdError;
    /// Reads `0000:06:00.0` or `06:00.0` (domain 0).
    fn from_str(s: &str) -> Result<Self, PciBusIdError> {
        let bad = || PciBusIdError { text: s.to_string() };
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

/// A PCI bridge above a function, identified as hwloc gives it: a host bridge by the domain
/// and bus range below it (hwloc gives it no bus id), a PCI-to-PCI bridge (root port, switch
/// port) by its own bus id. Two functions under the same bridge object have equal entries in
/// their [`PciFunction::bridges`] chains, which is how the planner finds the PCIe switch or
/// root port two devices share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PciBridge {
    /// The bridge's own address; `None` for a host bridge.
    pub busid: Option<PciBusId>,
    /// The PCI domain of the buses below it.
    pub domain: u32,
    /// The lowest and highest bus number below it (`bridge_pci="0000:[2c-3b]"` in an XML).
    pub secondary_bus: u8,
    pub subordinate_bus: u8,
}

impl fmt::Display for PciBridge {
    /// `0000:2d:04.0` for a PCI bridge, `host bridge 0000:[2b-3b]` for a host bridge.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.busid {
            Some(b) => write!(f, "{b}"),
            None => {
                write!(f, "host bridge {:04x}:[{:02x}-{:02x}]", self.domain, self.secondary_bus, self.subordinate_bus)
            }
        }
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
    /// The PCI bridges between the locality and the function, outermost (the host bridge)
    /// first; empty when hwloc put the function right under its locality.
    pub bridges: Vec<PciBridge>,
}

impl PciFunction {
    /// A display controller (PCI class 03xx: VGA, 3D, other display): what a GPU function is
    /// when hwloc names it only through DRM devices.
    pub fn is_display(&self) -> bool {
        self.class_id >> 8 == 0x03
    }
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

    /// Each PU's core, as a lookup by PU number (`None`: not a PU, or a PU outside any
    /// core): built once, so that counting the cores of many CPU sets costs their size, not
    /// a walk over the topology each.
    pub fn core_of_pu(&self) -> Vec<Option<u32>> {
        let mut map = Vec::new();
        for core in self.objects.iter().filter(|o| o.kind == ObjKind::Core) {
            for pu in core.cpuset.iter() {
                let i = pu as usize;
                if map.len() <= i {
                    map.resize(i + 1, None);
                }
                map[i] = Some(core.logical_index);
            }
        }
        map
    }

    /// The whole machine's PUs.
    pub fn all_cpus(&self) -> CpuSet {
        self.objects.first().map(|o| o.cpuset.clone()).unwrap_or_default()
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
