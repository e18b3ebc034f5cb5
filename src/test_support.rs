//! Helpers for the engine's own unit tests (compiled only for `cargo test`).

use std::io::Write as _;
use std::path::PathBuf;

// The integration tests' assertions, the same file (one place for each).
#[path = "../tests/common/assert.rs"]
mod assert;
pub use assert::contains_all;

/// Whether the tests run as root (some checks need root-owned files).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh directory that [`crate::trusted_fs`] trusts (root's, under directories only root
/// can write), below the crate's `target/`; `None`, with a line saying so, when the tests do
/// not run as root or the checkout is not in such a place.
pub fn trusted_scratch(name: &str) -> Option<PathBuf> {
    if !is_root() {
        skipped("needs root (the directories must be root's)");
        return None;
    }
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/trusted-scratch");
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = crate::trusted_fs::TrustedDir::open_or_create(&dir, 0o755) {
        skipped(&format!("the checkout is not under root-only directories ({e})"));
        return None;
    }
    Some(dir)
}

/// Prints `skipped: TEXT` straight to stderr, past cargo's output capture (a `println!` is
/// captured and a test that returns early passes): scripts/test-all.sh counts these lines.
pub fn skipped(text: &str) {
    let _ = std::io::stderr().write_all(format!("skipped: {text}\n").as_bytes());
}

/// PCI trees built by hand for the planner's tests: two packages, GPUs and HCAs under chains
/// of bridges.
pub mod pci {
    use crate::cpuset::CpuSet;
    use crate::node::{Node, NodeOptions};
    use crate::topology::{CpuObject, ObjKind, OsDevice, PciBridge, PciBusId, PciFunction, Topology};

    pub fn obj(kind: ObjKind, parent: Option<usize>, depth: u32, cpus: &str) -> CpuObject {
        let cpuset = CpuSet::parse_list(cpus).unwrap_or_default();
        CpuObject { kind, logical_index: 0, os_index: None, depth, parent, cpuset }
    }

    pub fn busid(bus: u8) -> PciBusId {
        PciBusId { domain: 0, bus, device: 0, function: 0 }
    }

    /// A PCI bridge at `bus`, or a host bridge (`None`) named by the bus below it.
    pub fn br(bus: Option<u8>, below: u8) -> PciBridge {
        PciBridge { busid: bus.map(busid), domain: 0, secondary_bus: below, subordinate_bus: below }
    }

    pub fn osdev(name: &str, kind: &str, infos: &[(&str, &str)]) -> OsDevice {
        let infos = infos.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        OsDevice { name: name.into(), osdev_type: kind.into(), subtype: None, infos }
    }

    pub fn gpu(bus: u8, locality: usize, bridges: Vec<PciBridge>) -> PciFunction {
        let uuid = format!("GPU-{bus:08x}-0000-0000-0000-000000000001");
        PciFunction {
            busid: busid(bus),
            vendor_id: 0x10de,
            device_id: 0x20b5,
            class_id: 0x0302,
            locality,
            osdevs: vec![osdev(&format!("nvml{bus}"), "GPU", &[("Backend", "NVML"), ("NVIDIAUUID", &uuid)])],
            bridges,
        }
    }

    pub fn hca(bus: u8, locality: usize, bridges: Vec<PciBridge>) -> PciFunction {
        PciFunction {
            busid: busid(bus),
            vendor_id: 0x15b3,
            device_id: 0x101b,
            class_id: 0x0207,
            locality,
            osdevs: vec![osdev(&format!("mlx5_{bus:x}"), "OpenFabrics", &[("Port1State", "4"), ("Port1LID", "0x1")])],
            bridges,
        }
    }

    /// Two packages; `pci` under them (locality 1 = package 0, 2 = package 1).
    pub fn node(pci: Vec<PciFunction>) -> Node {
        let objects = vec![
            obj(ObjKind::Machine, None, 0, "0-3"),
            obj(ObjKind::Package, Some(0), 1, "0-1"),
            obj(ObjKind::Package, Some(0), 1, "2-3"),
        ];
        let topology = Topology { hostname: Some("t".into()), objects, pci, loose: Vec::new() };
        Node::new(topology, NodeOptions::default())
    }
}
