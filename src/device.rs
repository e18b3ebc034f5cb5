//! The node model's devices: one entry per PCI function (or per vendor-backend partition),
//! with the class it belongs to, the names it is known by, the identity its vendor runtime
//! accepts, and its locality. Built by [`crate::enumerate`], read by [`crate::plan`] and
//! [`crate::env`].

use crate::cpuset::CpuSet;
use crate::topology::{PciBridge, PciBusId};
use std::fmt;

/// The device classes a spec can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceClass {
    Gpu,
    Network,
    Block,
}

impl fmt::Display for DeviceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceClass::Gpu => "gpu",
            DeviceClass::Network => "network",
            DeviceClass::Block => "block",
        })
    }
}

/// The vendor of a device, as far as the variables we write care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
    Intel,
    /// Mellanox / NVIDIA networking (PCI vendor 15b3).
    Mellanox,
    Other,
}

impl Vendor {
    pub fn from_pci(vendor_id: u16) -> Vendor {
        match vendor_id {
            0x10de => Vendor::Nvidia,
            0x1002 => Vendor::Amd,
            0x8086 => Vendor::Intel,
            0x15b3 => Vendor::Mellanox,
            _ => Vendor::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
            Vendor::Intel => "intel",
            Vendor::Mellanox => "mellanox",
            Vendor::Other => "other",
        }
    }
}

/// The fabric a network adapter carries, as the fabric libraries see it (`enumerate` reads
/// it from hwloc: `docs/variables.md`, "Which adapters are a fabric"). An adapter with none
/// is held back from the `network` class ([`HeldBack`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fabric {
    /// An OpenFabrics (verbs) device with an RDMA address on a port: InfiniBand or RoCE.
    Rdma,
    /// An Intel Omni-Path HFI (`hfi1_N`).
    OmniPath,
    /// An HPE Slingshot (Cassini) NIC.
    Slingshot,
}

impl Fabric {
    pub fn name(self) -> &'static str {
        match self {
            Fabric::Rdma => "InfiniBand/RoCE",
            Fabric::OmniPath => "Omni-Path",
            Fabric::Slingshot => "Slingshot",
        }
    }
}

/// Why a device of a class is not among the devices its class hands out; it can still be
/// named (except removable media, which is never handed out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeldBack {
    /// A network interface with no OpenFabrics device, no Omni-Path and no Slingshot function:
    /// a management or plain Ethernet port.
    PlainEthernet,
    /// An OpenFabrics device none of whose ports has an RDMA address (no `Port<N>GID<M>`, no
    /// `Port<N>LID` other than 0): a function without RDMA, such as a VM's Ethernet VF.
    NoRdmaAddress,
    /// A block device hwloc calls `Removable Media Device` (an optical drive).
    RemovableMedia,
}

impl fmt::Display for HeldBack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeldBack::PlainEthernet => "plain Ethernet, no fabric",
            HeldBack::NoRdmaAddress => "without RDMA: no GID or LID on its OpenFabrics ports",
            HeldBack::RemovableMedia => "removable media, an optical drive",
        })
    }
}

/// Which Level Zero hierarchy model (`ZE_FLAT_DEVICE_HIERARCHY`) a set of ordinals belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ZeHierarchy {
    Flat,
    Composite,
    Combined,
}

impl ZeHierarchy {
    pub fn as_str(self) -> &'static str {
        match self {
            ZeHierarchy::Flat => "FLAT",
            ZeHierarchy::Composite => "COMPOSITE",
            ZeHierarchy::Combined => "COMBINED",
        }
    }

    /// Reads an environment value the way the Level Zero driver does (case-insensitive
    /// here for robustness; anything else is `None`, i.e. "the driver's default").
    pub fn parse(value: &str) -> Option<ZeHierarchy> {
        match value.trim().to_ascii_uppercase().as_str() {
            "FLAT" => Some(ZeHierarchy::Flat),
            "COMPOSITE" => Some(ZeHierarchy::Composite),
            "COMBINED" => Some(ZeHierarchy::Combined),
            _ => None,
        }
    }
}

/// The name a GPU's vendor runtime accepts for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GpuIdentity {
    /// `GPU-<uuid>` as NVML reports it, for `CUDA_VISIBLE_DEVICES`.
    Nvidia { uuid: String },
    /// 16 lowercase hex digits (zero-padded), used as `GPU-<id>` in `ROCR_VISIBLE_DEVICES`.
    Amd { unique_id: String },
    /// The Level Zero driver index and device index hwloc recorded, for `ZE_AFFINITY_MASK`.
    LevelZero { driver: u32, device: u32 },
}

impl GpuIdentity {
    /// An AMD identity from the unique id as hwloc's ROCm SMI backend (`AMDUUID`, `%llx`,
    /// leading zeros dropped) or the amdgpu driver (`%016llx`) writes it; ROCr wants `GPU-` +
    /// 16 hex digits. AMD SMI's 8-4-4-4-12 form is no ROCr token; zero means "no id".
    pub fn amd(value: &str) -> Result<GpuIdentity, AmdIdError> {
        let v = value.trim().trim_start_matches("0x").to_ascii_lowercase();
        if v.contains('-') {
            return Err(AmdIdError::SmiForm { value: value.to_string() });
        }
        if v.is_empty() || v.len() > 16 || !v.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(AmdIdError::NotHex { value: value.to_string() });
        }
        if v.chars().all(|c| c == '0') {
            return Err(AmdIdError::Zero);
        }
        Ok(GpuIdentity::Amd { unique_id: format!("{v:0>16}") })
    }

    /// The text shown to users and matched by a name spec (`GPU-...`, `ze:0.1`).
    pub fn display_id(&self) -> String {
        match self {
            GpuIdentity::Nvidia { uuid } => uuid.clone(),
            GpuIdentity::Amd { unique_id } => format!("GPU-{unique_id}"),
            GpuIdentity::LevelZero { driver, device } => format!("ze:{driver}.{device}"),
        }
    }
}

/// Why an AMD unique id is not one ROCr takes ([`GpuIdentity::amd`]); the caller names the
/// value's source (and quotes it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmdIdError {
    #[error(
        "the AMD SMI UUID form (8-4-4-4-12) is not accepted by ROCR_VISIBLE_DEVICES; use an hwloc whose RSMI \
         backend uses ROCm SMI (HWLOC_RSMI_BACKEND=rocm) or the driver's unique_id"
    )]
    SmiForm { value: String },
    #[error("not up to 16 hex digits")]
    NotHex { value: String },
    #[error("zero means the GPU has no unique id")]
    Zero,
}

/// Where a GPU's identity came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentitySource {
    /// An hwloc backend's info key (`NVIDIAUUID` on `nvml0`, `AMDUUID` on `rsmi0` ...).
    Hwloc { osdev: String, key: String },
    /// A kernel driver file (`/proc/driver/nvidia/gpus/<busid>/information` ...).
    DriverFile { path: String },
}

/// What a GPU is called by its vendor's runtime, or why it cannot be named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The runtime's name for it, and where that came from.
    Named { id: GpuIdentity, source: IdentitySource },
    /// No usable identity: missing backend info, a malformed or duplicated value ...
    Missing { reason: String },
}

/// One device of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub class: DeviceClass,
    /// `None` for devices with no PCI parent (sorted last, by name).
    pub busid: Option<PciBusId>,
    /// The primary OS device name (`cuda0`, `rsmi3`, `mlx5_0`, `nvme0n1`, `renderD128`).
    pub name: String,
    /// Every OS device name of this device, in topology order.
    pub osnames: Vec<String>,
    pub vendor: Vendor,
    pub pci_vendor_id: Option<u16>,
    pub pci_class_id: Option<u16>,
    /// GPUs only: the identity the vendor runtime accepts, or why there is none. `None` for
    /// devices that need none (network, block).
    pub identity: Option<Identity>,
    /// The CPUs of the nearest non-I/O ancestor.
    pub locality: CpuSet,
    /// Index of that ancestor in [`crate::topology::Topology::objects`].
    pub locality_obj: usize,
    /// The PCI bridges between that ancestor and the device, outermost first (host bridge,
    /// root port, switch ports): what tells two devices under one PCIe switch apart from two
    /// that only share a NUMA domain. Empty for devices with no PCI parent.
    pub pci_path: Vec<PciBridge>,
    /// Network: OpenFabrics device name for NCCL/UCX (`mlx5_0`), if any.
    pub ofed_name: Option<String>,
    /// Network: the OpenFabrics ports hwloc reported active (`Port<N>State` = 4), ascending.
    pub active_ports: Vec<u32>,
    /// The device's PMIx UUID (`gpu://host::nvml0`, `fab://guid::guid`, `ipv4://mac`).
    pub pmix_id: Option<String>,
    /// Network: the fabric it carries, if any.
    pub fabric: Option<Fabric>,
    /// Slingshot: the CXI device name libfabric's `cxi` provider takes (`cxi0`), where hwloc
    /// reports it (2.14 and later: a `cxiN` OS device beside `hsnN`).
    pub cxi_name: Option<String>,
    /// Why its class does not hand it out, if it does not.
    pub held_back: Option<HeldBack>,
}

impl Device {
    /// The vendor identity, if the GPU has one.
    pub fn gpu_id(&self) -> Option<&GpuIdentity> {
        match &self.identity {
            Some(Identity::Named { id, .. }) => Some(id),
            _ => None,
        }
    }

    /// Where the GPU's identity came from.
    pub fn identity_source(&self) -> Option<&IdentitySource> {
        match &self.identity {
            Some(Identity::Named { source, .. }) => Some(source),
            _ => None,
        }
    }

    /// Why the GPU has no identity.
    pub fn identity_problem(&self) -> Option<&str> {
        match &self.identity {
            Some(Identity::Missing { reason }) => Some(reason),
            _ => None,
        }
    }

    /// The bus id as text, or `-` for a device with no PCI parent.
    pub fn busid_text(&self) -> String {
        self.busid.map(|b| b.to_string()).unwrap_or_else(|| "-".into())
    }

    /// Whether a name spec names this device: an OS name (`mlx5_0`, exact), its identity
    /// (`GPU-46f7...`), its PMIx id (`gpu://node07::nvml0`, what `PMIX_DEVICE_ID` says), or its
    /// PCI bus id (`0000:06:00.0`, or `06:00.0` for domain 0); ids and bus ids in any case.
    pub fn answers_to(&self, name: &str) -> bool {
        self.osnames.iter().any(|n| n == name)
            || self.gpu_id().is_some_and(|id| id.display_id().eq_ignore_ascii_case(name))
            || self.pmix_id.as_deref().is_some_and(|p| p.eq_ignore_ascii_case(name))
            || self.busid.is_some_and(|b| name.parse::<PciBusId>().is_ok_and(|n| n == b))
    }
}
