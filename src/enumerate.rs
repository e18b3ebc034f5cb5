//! Device enumeration: from the topology's PCI functions and OS devices to the node's
//! devices, one per PCI function, in PCI-bus order (seed 000, "Device discovery").
//!
//! Why these rules:
//! - A function's `cuda0`, `nvml0`, `opencl0d0`, `card1` and `renderD128` are one GPU, and
//!   `mlx5_1` and `eno4np0` one adapter: counting OS devices finds nine GPUs on the Turin node
//!   where there are four.
//! - GPUs are the functions with a vendor-backend OS device if the topology has any; otherwise
//!   class-03xx functions with a DRM render node, and NVIDIA's class-03xx functions with no
//!   DRM device at all (a compute node whose `nvidia` driver runs without `nvidia-drm`, under
//!   an hwloc without NVML: measured on an H200 node, where hwloc shows the function and
//!   nothing below it; the driver file names it). That keeps out the BMC display adapter
//!   (ASPEED `card0`), which hwloc reports with the same OS device type as an H200.
//!   We match on `Backend` info and names, never on the OS device type or subtype alone,
//!   which vary with the hwloc that wrote an XML (DGX-2's NVML devices are CoProc there).
//! - Several OS devices of one backend under one function (MI300A partitions: six `rsmiN`
//!   per function) are distinct GPUs, not aliases.
//! - Identities must be unique on the node: a value shared by several GPUs (a sanitised
//!   export's all-zero UUIDs) names none of them, and is treated as missing.
//! - Each device carries its function's chain of PCI bridges (`Device::pci_path`) beside its
//!   locality: pairing a GPU with its network adapter (`adapters`) needs to know which PCIe
//!   switch or root port two devices share, which the CPU-side locality cannot tell.
//! - A network function is a fabric adapter, or held back from the `network` class
//!   ([`fabric_of`]; `docs/variables.md`, "Which adapters are a fabric"): a management port
//!   in bus order between the rails would otherwise take a rail's task.
//! - Every block OS device is its own device (an NVMe drive's namespaces `nvme1n1`,
//!   `nvme1n2`; the disks behind one SATA controller), in bus order then name order with
//!   numbers compared as numbers: a function holds no aliases of one disk, and naming
//!   `nvme1n1` must give `nvme1n1`. Removable media (an optical drive) is held back.

use crate::device::{Device, DeviceClass, Fabric, GpuIdentity, HeldBack, Identity, IdentitySource, Vendor};
use crate::topology::{LooseOsDevice, OsDevice, PciFunction, Topology};
use std::collections::HashMap;

/// The hwloc backends that make an OS device an unambiguous compute GPU, with the name
/// prefix hwloc gives their OS devices.
const GPU_BACKENDS: [(&str, &str); 5] =
    [("CUDA", "cuda"), ("NVML", "nvml"), ("RSMI", "rsmi"), ("LevelZero", "ze"), ("OpenCL", "opencl")];

/// The backend of a vendor OS device (`Backend` info, else a name like `nvml3`), if any.
fn gpu_backend(osdev: &OsDevice) -> Option<&'static str> {
    if let Some(b) = osdev.info("Backend") {
        if let Some((name, _)) = GPU_BACKENDS.iter().find(|(n, _)| n.eq_ignore_ascii_case(b)) {
            return Some(name);
        }
    }
    let numbered = |prefix: &str| {
        osdev.name.strip_prefix(prefix).is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    if let Some((name, _)) = GPU_BACKENDS.iter().find(|(_, prefix)| numbered(prefix)) {
        return Some(name);
    }
    (osdev.osdev_type == "CoProc").then_some("CoProc")
}

/// Preference for a GPU's primary name: the runtime's own device first.
fn name_rank(osdev: &OsDevice) -> usize {
    const ORDER: [&str; 6] = ["CUDA", "RSMI", "LevelZero", "NVML", "OpenCL", "CoProc"];
    gpu_backend(osdev).and_then(|b| ORDER.iter().position(|o| *o == b)).unwrap_or(ORDER.len())
}

fn is_drm(osdev: &OsDevice) -> bool {
    ["card", "renderD", "controlD"].iter().any(|p| osdev.name.starts_with(p))
}

fn is_render_node(osdev: &OsDevice) -> bool {
    osdev.name.starts_with("renderD")
}

fn is_network(osdev: &OsDevice) -> bool {
    matches!(osdev.osdev_type.as_str(), "Network" | "OpenFabrics")
}

fn is_block(osdev: &OsDevice) -> bool {
    osdev.osdev_type == "Block"
}

/// Enumerates every device of the node, in (class, PCI bus id, partition) order, with
/// loose devices (no PCI parent) last by name within their class. `host` names the node in
/// PMIx GPU ids. GPUs get the identity hwloc recorded, if any; the caller may then fill in
/// identities from driver files and must call [`settle_identities`].
pub fn devices(topology: &Topology, host: &str) -> Vec<Device> {
    let mut pci: Vec<&PciFunction> = topology.pci.iter().collect();
    pci.sort_by_key(|f| f.busid);
    let mut out = gpus(topology, &pci, host);
    out.extend(by_function(topology, &pci, DeviceClass::Network, is_network));
    out.extend(block_devices(topology, &pci));
    for (class, pred) in [(DeviceClass::Network, is_network as fn(&OsDevice) -> bool), (DeviceClass::Block, is_block)] {
        let mut loose: Vec<&LooseOsDevice> = topology.loose.iter().filter(|l| pred(&l.osdev)).collect();
        loose.sort_by_key(|l| natural_key(&l.osdev.name));
        out.extend(loose.into_iter().map(|l| {
            let osdevs = std::slice::from_ref(&l.osdev);
            let mut d = base_device(topology, class, None, l.locality, osdevs);
            d.pmix_id = pmix_other_id(class, osdevs);
            classify(&mut d, None, osdevs);
            d
        }));
    }
    out
}

/// A name's runs of digits and of other characters, digits compared as numbers: `nvme1n2`
/// before `nvme1n10`, `nvme2n1` before `nvme10n1`.
fn natural_key(name: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            let (run, tail) = rest.split_at(digits);
            out.push((run.parse().unwrap_or(u64::MAX), String::new()));
            rest = tail;
        } else {
            let text = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
            let (run, tail) = rest.split_at(text);
            out.push((0, run.to_string()));
            rest = tail;
        }
    }
    out
}

/// Every block OS device under a PCI function, one device each, in bus order then name order.
fn block_devices(topology: &Topology, pci: &[&PciFunction]) -> Vec<Device> {
    let mut out = Vec::new();
    for f in pci {
        let mut disks: Vec<&OsDevice> = f.osdevs.iter().filter(|o| is_block(o)).collect();
        disks.sort_by_key(|d| natural_key(&d.name));
        for disk in disks {
            let osdevs = std::slice::from_ref(disk);
            let mut d = base_device(topology, DeviceClass::Block, Some(f), f.locality, osdevs);
            d.pmix_id = pmix_other_id(DeviceClass::Block, osdevs);
            classify(&mut d, Some(f), osdevs);
            out.push(d);
        }
    }
    out
}

/// The PCI ids of HPE's Slingshot NICs: Cassini 1 (Cray `17db:0501`) and Cassini 2 (HPE
/// `1590:0371`), as HPE's CXI driver declares them (`cass_core.h`).
const SLINGSHOT_PCI_IDS: [(u16, u16); 2] = [(0x17db, 0x0501), (0x1590, 0x0371)];

/// Which fabric a network function (or loose interface) carries, or why it is no fabric
/// adapter, from what hwloc recorded (`docs/variables.md`, "Which adapters are a fabric"):
/// - **Slingshot**: an OS device of subtype `Slingshot` (hwloc 2.9 and later give it to an
///   `hsnN`/`hsiN` interface whose device has a `cxi` class, and 2.14 and later to the `cxiN`
///   device itself), or a Cassini's PCI ids (exports by an older hwloc);
/// - **Omni-Path**: an OpenFabrics device of the `hfi1` driver (`hfi1_N`);
/// - **InfiniBand/RoCE**: an OpenFabrics device with an RDMA address on some port: a
///   `Port<N>GID<M>` (hwloc records only initialised GIDs) or a `Port<N>LID` other than 0 and
///   0xffff (InfiniBand's unassigned and permissive LIDs);
/// - otherwise an OpenFabrics device without one (a VM's Ethernet VF) or plain Ethernet.
pub fn fabric_of(f: Option<&PciFunction>, osdevs: &[OsDevice]) -> Result<Fabric, HeldBack> {
    let cassini = f.is_some_and(|f| SLINGSHOT_PCI_IDS.contains(&(f.vendor_id, f.device_id)));
    if cassini || osdevs.iter().any(|o| o.subtype.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("Slingshot"))) {
        return Ok(Fabric::Slingshot);
    }
    match osdevs.iter().find(|o| o.osdev_type == "OpenFabrics") {
        Some(ofa) if ofa.name.starts_with("hfi1_") => Ok(Fabric::OmniPath),
        Some(ofa) if has_rdma_address(ofa) => Ok(Fabric::Rdma),
        Some(_) => Err(HeldBack::NoRdmaAddress),
        None => Err(HeldBack::PlainEthernet),
    }
}

/// A `Port<N>GID<M>` info, or a `Port<N>LID` that is an address (not 0, not 0xffff).
fn has_rdma_address(ofa: &OsDevice) -> bool {
    ofa.infos.iter().any(|(k, v)| {
        let Some(rest) = k.strip_prefix("Port") else { return false };
        let port_digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match &rest[port_digits..] {
            _ if port_digits == 0 => false,
            "LID" => {
                let v = v.trim();
                let lid =
                    v.strip_prefix("0x").map_or_else(|| v.parse::<u32>().ok(), |h| u32::from_str_radix(h, 16).ok());
                lid.is_some_and(|l| l != 0 && l != 0xffff)
            }
            key => {
                key.strip_prefix("GID").is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
                    && !v.trim().is_empty()
            }
        }
    })
}

/// The CXI device name of a Slingshot function: an OS device `cxiN` (hwloc 2.14 and later).
fn cxi_name(osdevs: &[OsDevice]) -> Option<String> {
    osdevs
        .iter()
        .map(|o| o.name.as_str())
        .find(|n| n.strip_prefix("cxi").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())))
        .map(str::to_string)
}

/// Sets what the class-specific rules read: a network device's fabric (or why it has none)
/// and CXI name; removable media held back.
fn classify(d: &mut Device, f: Option<&PciFunction>, osdevs: &[OsDevice]) {
    match d.class {
        DeviceClass::Network => match fabric_of(f, osdevs) {
            Ok(fabric) => {
                d.fabric = Some(fabric);
                if fabric == Fabric::Slingshot {
                    d.cxi_name = cxi_name(osdevs);
                }
            }
            Err(why) => d.held_back = Some(why),
        },
        DeviceClass::Block => {
            let removable = osdevs.iter().any(|o| o.subtype.as_deref() == Some("Removable Media Device"));
            if removable {
                d.held_back = Some(HeldBack::RemovableMedia);
            }
        }
        DeviceClass::Gpu => {}
    }
}

fn base_device(
    topology: &Topology,
    class: DeviceClass,
    f: Option<&PciFunction>,
    locality: usize,
    osdevs: &[OsDevice],
) -> Device {
    // A network function's name: its OpenFabrics device, else its interface (`hsn0` before
    // the `cxi0` that hwloc 2.14 adds beside it, so the name is the same on every hwloc).
    let name = match class {
        DeviceClass::Network => osdevs
            .iter()
            .find(|o| o.osdev_type == "OpenFabrics")
            .or_else(|| osdevs.iter().find(|o| cxi_name(std::slice::from_ref(*o)).is_none()))
            .or(osdevs.first()),
        _ => osdevs.first(),
    }
    .map(|o| o.name.clone())
    .unwrap_or_default();
    let (ofed_name, active_ports) = match osdevs.iter().find(|o| o.osdev_type == "OpenFabrics") {
        Some(ofa) => (Some(ofa.name.clone()), active_ports(ofa)),
        None => (None, Vec::new()),
    };
    Device {
        class,
        busid: f.map(|f| f.busid),
        name,
        osnames: osdevs.iter().map(|o| o.name.clone()).collect(),
        vendor: f.map_or(Vendor::Other, |f| Vendor::from_pci(f.vendor_id)),
        pci_vendor_id: f.map(|f| f.vendor_id),
        pci_class_id: f.map(|f| f.class_id),
        identity: None,
        locality: topology.objects.get(locality).map(|o| o.cpuset.clone()).unwrap_or_else(|| topology.all_cpus()),
        locality_obj: if locality < topology.objects.len() { locality } else { 0 },
        pci_path: f.map(|f| f.bridges.clone()).unwrap_or_default(),
        ofed_name,
        active_ports,
        pmix_id: None,
        fabric: None,
        cxi_name: None,
        held_back: None,
    }
}

/// `Port<N>State` = 4 (IB_PORT_ACTIVE) on an OpenFabrics device, ascending.
fn active_ports(ofa: &OsDevice) -> Vec<u32> {
    let mut ports: Vec<u32> = ofa
        .infos
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix("Port")?.strip_suffix("State")?.parse().ok()?;
            (v.trim() == "4").then_some(n)
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// PMIx's id for a network or block device (openpmix `pmix_hwloc.c`).
fn pmix_other_id(class: DeviceClass, osdevs: &[OsDevice]) -> Option<String> {
    match class {
        DeviceClass::Network => {
            if let Some(ofa) = osdevs.iter().find(|o| o.osdev_type == "OpenFabrics") {
                if let (Some(node), Some(sys)) = (ofa.info("NodeGUID"), ofa.info("SysImageGUID")) {
                    return Some(format!("fab://{node}::{sys}"));
                }
            }
            osdevs.iter().filter_map(|o| o.info("Address")).find_map(|addr| match addr.matches(':').count() {
                5 => Some(format!("ipv4://{addr}")),
                19 => Some(format!("ipv6://{addr}")),
                _ => None,
            })
        }
        DeviceClass::Block => osdevs.first().map(|o| format!("blk://{}", o.name)),
        DeviceClass::Gpu => None,
    }
}

fn by_function<'a>(
    topology: &'a Topology,
    pci: &'a [&'a PciFunction],
    class: DeviceClass,
    pred: fn(&OsDevice) -> bool,
) -> impl Iterator<Item = Device> + 'a {
    pci.iter().filter_map(move |f| {
        let osdevs: Vec<OsDevice> = f.osdevs.iter().filter(|o| pred(o)).cloned().collect();
        if osdevs.is_empty() {
            return None;
        }
        let mut d = base_device(topology, class, Some(f), f.locality, &osdevs);
        d.pmix_id = pmix_other_id(class, &osdevs);
        classify(&mut d, Some(f), &osdevs);
        Some(d)
    })
}

/// An NVIDIA display-class function with no DRM device (no `nvidia-drm`) and no vendor OS
/// device: a GPU that hwloc shows only as its PCI function. Named by its bus id until the
/// driver file names it (`nvidia<minor>`, `driver_ids::fill_identities`); no PMIx id, which
/// PMIx builds from an OS device.
fn bare_nvidia_gpu(topology: &Topology, f: &PciFunction) -> Option<Device> {
    if !f.is_display() || Vendor::from_pci(f.vendor_id) != Vendor::Nvidia || f.osdevs.iter().any(is_drm) {
        return None;
    }
    let mut d = base_device(topology, DeviceClass::Gpu, Some(f), f.locality, &[]);
    d.name = f.busid.to_string();
    d.identity = Some(Identity::Missing {
        reason: "hwloc reports no device below its PCI function (it was built without NVIDIA's backend, and \
                 nvidia-drm, which would give it a render node, is not loaded)"
            .into(),
    });
    Some(d)
}

fn gpus(topology: &Topology, pci: &[&PciFunction], host: &str) -> Vec<Device> {
    let vendor_mode = pci.iter().flat_map(|f| &f.osdevs).any(|o| gpu_backend(o).is_some());
    let mut out = Vec::new();
    for f in pci {
        if vendor_mode {
            out.extend(vendor_gpus(topology, f, host));
        } else if let Some(d) = bare_nvidia_gpu(topology, f) {
            out.push(d);
        } else if f.is_display() && f.osdevs.iter().any(is_render_node) {
            let osdevs: Vec<OsDevice> = f.osdevs.iter().filter(|o| is_drm(o)).cloned().collect();
            let mut d = base_device(topology, DeviceClass::Gpu, Some(f), f.locality, &osdevs);
            if let Some(render) = osdevs.iter().find(|o| is_render_node(o)) {
                d.name = render.name.clone();
                d.pmix_id = Some(format!("gpu://{host}::{}", render.name));
            }
            d.identity = Some(Identity::Missing {
                reason: format!(
                    "hwloc reports it only as DRM devices ({}), so it was built without the vendor's backend",
                    d.osnames.join(", ")
                ),
            });
            out.push(d);
        }
    }
    out
}

/// The GPUs of one function in vendor mode: one per OS device of the backend with the most
/// OS devices here (partitions), each taking the k-th OS device of every backend.
fn vendor_gpus(topology: &Topology, f: &PciFunction, host: &str) -> Vec<Device> {
    let mut per_backend: Vec<(&str, Vec<&OsDevice>)> = Vec::new();
    for o in &f.osdevs {
        if let Some(b) = gpu_backend(o) {
            match per_backend.iter_mut().find(|(name, _)| *name == b) {
                Some((_, v)) => v.push(o),
                None => per_backend.push((b, vec![o])),
            }
        }
    }
    let count = per_backend.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    let drm: Vec<&OsDevice> = f.osdevs.iter().filter(|o| is_drm(o)).collect();
    (0..count)
        .map(|k| {
            let mut osdevs: Vec<OsDevice> =
                per_backend.iter().filter_map(|(_, v)| v.get(k).map(|o| (*o).clone())).collect();
            if count == 1 {
                osdevs.extend(drm.iter().map(|o| (*o).clone()));
            }
            // The primary name is the compute backend's OS device (cuda0 before nvml0/opencl0d0).
            osdevs.sort_by_key(name_rank);
            let mut d = base_device(topology, DeviceClass::Gpu, Some(f), f.locality, &osdevs);
            // The PMIx id names the GPU-type OS device (nvml0, rsmi0), never a DRM card node;
            // a CoProc-only device (Level Zero) is named by its compute OS device.
            let pmix_name = osdevs
                .iter()
                .find(|o| o.osdev_type == "GPU" && !is_drm(o))
                .or_else(|| osdevs.iter().find(|o| gpu_backend(o).is_some()))
                .map(|o| o.name.clone());
            d.pmix_id = pmix_name.map(|n| format!("gpu://{host}::{n}"));
            d.identity = Some(hwloc_identity(f.vendor_id, &osdevs));
            d
        })
        .collect()
}

/// The vendor identity an hwloc backend recorded on any OS device of the GPU, or why none.
fn hwloc_identity(vendor_id: u16, osdevs: &[OsDevice]) -> Identity {
    let named = |id, o: &OsDevice, key: &str| Identity::Named {
        id,
        source: IdentitySource::Hwloc { osdev: o.name.clone(), key: key.into() },
    };
    let missing = |reason: String| Identity::Missing { reason };
    for o in osdevs {
        if let Some(uuid) = o.info("NVIDIAUUID") {
            let uuid = uuid.trim();
            if uuid.starts_with("GPU-") && uuid.len() > 4 {
                return named(GpuIdentity::Nvidia { uuid: uuid.to_string() }, o, "NVIDIAUUID");
            }
            return missing(format!("{} has NVIDIAUUID {uuid:?}, which is not a GPU-<uuid>", o.name));
        }
        if let Some(id) = o.info("AMDUUID") {
            return match GpuIdentity::amd(id) {
                Ok(amd) => named(amd, o, "AMDUUID"),
                Err(why) => missing(format!("{} has AMDUUID {id:?}: {why}", o.name)),
            };
        }
        if let (Some(drv), Some(dev)) = (o.info("LevelZeroDriverIndex"), o.info("LevelZeroDriverDeviceIndex")) {
            if let (Ok(driver), Ok(device)) = (drv.trim().parse(), dev.trim().parse()) {
                return named(GpuIdentity::LevelZero { driver, device }, o, "LevelZeroDriverDeviceIndex");
            }
        }
    }
    let backends: Vec<&str> = osdevs.iter().filter_map(gpu_backend).collect();
    let why = match Vendor::from_pci(vendor_id) {
        Vendor::Nvidia => "no NVIDIAUUID (hwloc's NVML backend records it)",
        Vendor::Amd => "no AMDUUID (hwloc's RSMI backend records it)",
        Vendor::Intel => "no LevelZeroDriverIndex/LevelZeroDriverDeviceIndex (hwloc's Level Zero backend records them)",
        _ => "no vendor identity",
    };
    missing(format!("{why}; backends seen: {}", if backends.is_empty() { "none".into() } else { backends.join(", ") }))
}

/// Drops identities that name no single GPU: a value shared by several GPUs of the node (a
/// sanitised export's all-zero UUIDs) or all zeros. Call after every identity is known.
pub fn settle_identities(devices: &mut [Device]) {
    let mut counts: HashMap<GpuIdentity, usize> = HashMap::new();
    for id in devices.iter().filter_map(Device::gpu_id) {
        *counts.entry(id.clone()).or_default() += 1;
    }
    for d in devices.iter_mut() {
        let Some(id) = d.gpu_id() else { continue };
        let n = counts.get(id).copied().unwrap_or(0);
        let zero = id.display_id().trim_start_matches("GPU-").chars().all(|c| c == '0' || c == '-');
        if n > 1 || zero {
            let what = if n > 1 { format!("shared by {n} GPUs on this node") } else { "all zeros".to_string() };
            d.identity = Some(Identity::Missing {
                reason: format!(
                    "its identity {} is {what} (a sanitised or broken export), so it names no GPU",
                    id.display_id()
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, kind: &str, subtype: Option<&str>, infos: &[(&str, &str)]) -> OsDevice {
        OsDevice {
            name: name.into(),
            osdev_type: kind.into(),
            subtype: subtype.map(str::to_string),
            infos: infos.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn function(vendor_id: u16, device_id: u16) -> PciFunction {
        PciFunction {
            busid: "0000:01:00.0".parse().unwrap_or_else(|e| panic!("{e}")),
            vendor_id,
            device_id,
            class_id: 0x0200,
            locality: 0,
            osdevs: Vec::new(),
            bridges: Vec::new(),
        }
    }

    #[test]
    fn a_fabric_by_what_hwloc_recorded() {
        let ofa = |infos: &[(&str, &str)]| [dev("mlx5_0", "OpenFabrics", None, infos)];
        let f = function(0x15b3, 0x1019);
        // A GID, or a LID that is an address: RDMA. LID 0 (RoCE, or a VF) needs a GID.
        assert_eq!(
            fabric_of(Some(&f), &ofa(&[("Port1GID0", "fe80:0000:0000:0000:0000:0000:0000:0001")])),
            Ok(Fabric::Rdma)
        );
        assert_eq!(fabric_of(Some(&f), &ofa(&[("Port1LID", "0x17c")])), Ok(Fabric::Rdma));
        assert_eq!(fabric_of(Some(&f), &ofa(&[("Port2LID", "12")])), Ok(Fabric::Rdma));
        for lid in ["0x0", "0xffff", "0", "x"] {
            assert_eq!(
                fabric_of(Some(&f), &ofa(&[("Port1LID", lid), ("Port1State", "4")])),
                Err(HeldBack::NoRdmaAddress)
            );
        }
        assert_eq!(
            fabric_of(Some(&f), &ofa(&[("PortGID0", "fe80::1"), ("Port1GIDx", "fe80::1")])),
            Err(HeldBack::NoRdmaAddress)
        );
        let hfi = [dev("hfi1_0", "OpenFabrics", None, &[])];
        assert_eq!(fabric_of(Some(&function(0x8086, 0x24f0)), &hfi), Ok(Fabric::OmniPath));
        // Slingshot by subtype (hwloc 2.9+), or by a Cassini's PCI ids (older exports).
        let hsn = [dev("hsn0", "Network", Some("Slingshot"), &[("Address", "02:00:00:00:00:01")])];
        assert_eq!(fabric_of(Some(&function(0x1234, 0x0001)), &hsn), Ok(Fabric::Slingshot));
        let hsi = [dev("hsi0", "Network", None, &[("Address", "02:00:00:00:00:01")])];
        assert_eq!(fabric_of(Some(&function(0x17db, 0x0501)), &hsi), Ok(Fabric::Slingshot));
        assert_eq!(fabric_of(Some(&function(0x1590, 0x0371)), &hsi), Ok(Fabric::Slingshot));
        assert_eq!(fabric_of(Some(&function(0x8086, 0x1537)), &hsi), Err(HeldBack::PlainEthernet));
        assert_eq!(fabric_of(None, &hsi), Err(HeldBack::PlainEthernet));
        let cxi = [hsn[0].clone(), dev("cxi0", "Network", Some("Slingshot"), &[("NID", "0x1a40")])];
        assert_eq!(cxi_name(&cxi), Some("cxi0".into()));
        assert_eq!(cxi_name(&hsn), None);
    }

    #[test]
    fn names_in_number_order() {
        let mut v = vec!["nvme1n10", "nvme10n1", "nvme1n2", "nvme2n1", "nvme1n1", "sda"];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(v, ["nvme1n1", "nvme1n2", "nvme1n10", "nvme2n1", "nvme10n1", "sda"]);
    }
}
