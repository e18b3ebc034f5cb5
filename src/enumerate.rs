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

use crate::device::{Device, DeviceClass, GpuIdentity, Identity, IdentitySource, Vendor};
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
    out.extend(by_function(topology, &pci, DeviceClass::Block, is_block));
    for (class, pred) in [(DeviceClass::Network, is_network as fn(&OsDevice) -> bool), (DeviceClass::Block, is_block)] {
        let mut loose: Vec<&LooseOsDevice> = topology.loose.iter().filter(|l| pred(&l.osdev)).collect();
        loose.sort_by(|a, b| a.osdev.name.cmp(&b.osdev.name));
        out.extend(loose.into_iter().map(|l| {
            let mut d = base_device(topology, class, None, l.locality, std::slice::from_ref(&l.osdev));
            d.pmix_id = pmix_other_id(class, std::slice::from_ref(&l.osdev));
            d
        }));
    }
    out
}

fn base_device(
    topology: &Topology,
    class: DeviceClass,
    f: Option<&PciFunction>,
    locality: usize,
    osdevs: &[OsDevice],
) -> Device {
    let name = match class {
        DeviceClass::Network => osdevs.iter().find(|o| o.osdev_type == "OpenFabrics").or(osdevs.first()),
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
