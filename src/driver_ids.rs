//! GPU identities read from the kernel driver by PCI bus id, for nodes whose hwloc has no
//! vendor backend (a distribution's hwloc reports GPUs as DRM `cardN`/`renderDN` only).
//!
//! - NVIDIA: `<proc>/driver/nvidia/gpus/<busid>/information`, line `GPU UUID: GPU-...`.
//! - AMD: `<sys>/bus/pci/devices/<busid>/unique_id`, `%016llx` (ROCr's `GPU-<id>` token).
//! - Intel: only hwloc's Level Zero backend knows the ordinals: nothing to read.
//! - InfiniBand port states, re-read for a topology cached before a link came up.
//!
//! The roots come from the admin's config only (never from a job's environment), so tests
//! can point them at fixture trees (`topologies/drivers/`). Nothing is guessed: a file that
//! is absent gives no identity, and a malformed one is a problem that names the file.

use crate::device::{Device, GpuIdentity, Identity, IdentitySource, Vendor};
use crate::topology::{PciBusId, Topology};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Files larger than this are not driver files; refuse rather than read them whole.
const MAX_FILE: u64 = 64 * 1024;

/// A driver file that exists but cannot give an identity. Keeps the path and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct DriverFileError {
    pub path: PathBuf,
    pub problem: DriverFileProblem,
}

/// What is wrong with a driver file.
#[derive(Debug, thiserror::Error)]
pub enum DriverFileProblem {
    #[error("cannot read it: {0}")]
    Unreadable(std::io::Error),
    #[error("{0} bytes, too large for a driver file")]
    TooLarge(u64),
    #[error(transparent)]
    Malformed(#[from] Malformed),
}

/// What a driver file that was read says wrong, or leaves out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("malformed GPU UUID {0:?}")]
    GpuUuid(String),
    #[error("no 'GPU UUID:' line (the driver leaves it out when its UUID cache is invalid)")]
    NoGpuUuid,
    #[error("malformed Device Minor {}", crate::text::excerpt(.0))]
    DeviceMinor(String),
    #[error("no 'Device Minor:' line")]
    NoDeviceMinor,
    /// AMD's `unique_id`.
    #[error(transparent)]
    AmdId(#[from] crate::device::AmdIdError),
}

/// Where driver files are read from: the roots the admin's config gives (or `/proc`, `/sys`
/// for the node's own topology); `None` = do not read that vendor's files.
#[derive(Debug, Clone, Copy, Default)]
pub struct Roots<'a> {
    pub proc_root: Option<&'a Path>,
    pub sys_root: Option<&'a Path>,
}

fn read_small(path: &Path) -> Result<Option<String>, DriverFileError> {
    let fail = |problem| DriverFileError { path: path.to_path_buf(), problem };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(DriverFileProblem::Unreadable(e))),
    };
    if meta.len() > MAX_FILE {
        return Err(fail(DriverFileProblem::TooLarge(meta.len())));
    }
    std::fs::read_to_string(path).map(Some).map_err(|e| fail(DriverFileProblem::Unreadable(e)))
}

/// The NVIDIA driver's information file for `busid`.
pub fn nvidia_path(proc_root: &Path, busid: PciBusId) -> PathBuf {
    proc_root.join("driver/nvidia/gpus").join(busid.to_string()).join("information")
}

/// The amdgpu driver's `unique_id` attribute for `busid`.
pub fn amd_path(sys_root: &Path, busid: PciBusId) -> PathBuf {
    sys_root.join("bus/pci/devices").join(busid.to_string()).join("unique_id")
}

/// Reads the `GPU UUID:` line of an NVIDIA information file (tabs and spaces mixed: split
/// at the first `:` and trim).
pub fn parse_nvidia_information(text: &str) -> Result<String, Malformed> {
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        if key.trim() == "GPU UUID" {
            let uuid = value.trim();
            let hex = uuid.strip_prefix("GPU-").unwrap_or("");
            let ok = hex.len() == 36
                && hex
                    .char_indices()
                    .all(|(i, c)| if [8, 13, 18, 23].contains(&i) { c == '-' } else { c.is_ascii_hexdigit() });
            return if ok {
                Ok(format!("GPU-{}", hex.to_ascii_lowercase()))
            } else {
                Err(Malformed::GpuUuid(uuid.to_string()))
            };
        }
    }
    Err(Malformed::NoGpuUuid)
}

/// Reads the `Device Minor:` line of an NVIDIA information file: `N` of the GPU's
/// `/dev/nvidiaN`, which a hand-written gres.conf names (`map-by-device check`).
pub fn parse_nvidia_minor(text: &str) -> Result<u32, Malformed> {
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        if key.trim() == "Device Minor" {
            let value = value.trim();
            return value.parse::<u32>().map_err(|_| Malformed::DeviceMinor(value.to_string()));
        }
    }
    Err(Malformed::NoDeviceMinor)
}

/// The `/dev/nvidiaN` minor number of the NVIDIA GPU at `busid`, from
/// `<proc_root>/driver/nvidia/gpus/<busid>/information`; `None` when there is no such file.
pub fn nvidia_minor(proc_root: &Path, busid: PciBusId) -> Result<Option<u32>, DriverFileError> {
    let path = nvidia_path(proc_root, busid);
    let Some(text) = read_small(&path)? else { return Ok(None) };
    parse_nvidia_minor(&text).map(Some).map_err(|m| DriverFileError { path, problem: m.into() })
}

/// The identity of the GPU at `busid` from its driver's files, if the roots are set and the
/// file exists.
pub fn lookup(
    vendor: Vendor,
    busid: PciBusId,
    roots: Roots<'_>,
) -> Result<Option<(GpuIdentity, IdentitySource)>, DriverFileError> {
    type Parser = fn(&str) -> Result<GpuIdentity, Malformed>;
    let Some(path) = driver_file(vendor, busid, roots) else { return Ok(None) };
    let parse: Parser = match vendor {
        Vendor::Nvidia => |t| parse_nvidia_information(t).map(|uuid| GpuIdentity::Nvidia { uuid }),
        _ => |t| GpuIdentity::amd(t).map_err(Malformed::from),
    };
    let Some(text) = read_small(&path)? else { return Ok(None) };
    let id = parse(&text).map_err(|m| DriverFileError { path: path.clone(), problem: m.into() })?;
    Ok(Some((id, IdentitySource::DriverFile { path: path.display().to_string() })))
}

/// The driver file that names a GPU of `vendor` at `busid`, where the roots say to read it.
fn driver_file(vendor: Vendor, busid: PciBusId, roots: Roots<'_>) -> Option<PathBuf> {
    match (vendor, roots) {
        (Vendor::Nvidia, Roots { proc_root: Some(root), .. }) => Some(nvidia_path(root, busid)),
        (Vendor::Amd, Roots { sys_root: Some(root), .. }) => Some(amd_path(root, busid)),
        _ => None,
    }
}

/// Gives each GPU that hwloc could not name the identity its driver's files hold; a file
/// that exists but cannot be used adds its problem to the GPU's reason, and so does a file
/// that is absent (the driver is not loaded, or the GPU is gone though the topology, taken
/// earlier, still lists it). Then call `enumerate::settle_identities`.
pub fn fill_identities(devices: &mut [Device], roots: Roots<'_>) {
    for d in devices.iter_mut() {
        let (Some(Identity::Missing { reason }), Some(busid)) = (&d.identity, d.busid) else { continue };
        match lookup(d.vendor, busid, roots) {
            Ok(Some((id, source))) => {
                // A GPU hwloc gave no OS device (named by its bus id) takes the name of its
                // device file, /dev/nvidia<minor>, which gres.conf's File= lines use too.
                if d.osnames.is_empty() && d.vendor == Vendor::Nvidia {
                    if let Some(Ok(Some(minor))) = roots.proc_root.map(|root| nvidia_minor(root, busid)) {
                        d.name = format!("nvidia{minor}");
                    }
                }
                d.identity = Some(Identity::Named { id, source })
            }
            Ok(None) => {
                if let Some(path) = driver_file(d.vendor, busid, roots) {
                    d.identity = Some(Identity::Missing { reason: format!("{reason}, and {}", absent(&path)) });
                }
            }
            Err(e) => d.identity = Some(Identity::Missing { reason: format!("{reason}; {e}") }),
        }
    }
}

/// Why a driver file that should name a GPU is absent, in a GPU's identity problem.
fn absent(path: &Path) -> String {
    format!(
        "its driver file {} is gone (the driver is not loaded, or the GPU was removed since the topology was \
         taken: export topology= again, or restart slurmd)",
        path.display()
    )
}

/// Re-reads the state of every InfiniBand port (`Port<N>State` of the OpenFabrics OS
/// devices) from `<sys_root>/class/infiniband/<dev>/ports/<N>/state`, the file hwloc read
/// them from (hwloc keeps its first digit: `4: ACTIVE` gives `4`). A topology discovered
/// earlier (slurmd's cache) may predate a link coming up, or an adapter going away: an
/// adapter whose `<sys_root>/class/infiniband/<dev>` directory is gone has its ports down
/// (`1`), so no task is told to use them. A file that cannot be read otherwise leaves the
/// value as it was. Returns how many values changed.
pub fn refresh_ib_port_states(topology: &mut Topology, sys_root: &Path) -> usize {
    refresh_ib_port_states_with(topology, |device, port| {
        let dir = sys_root.join("class/infiniband").join(device);
        if matches!(std::fs::symlink_metadata(&dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            return Some(GONE_PORT_STATE.to_string());
        }
        let path = dir.join("ports").join(port).join("state");
        let mut text = String::new();
        // A sysfs attribute is at most a page; a fixture tree's file is read no further.
        std::fs::File::open(path).and_then(|f| f.take(4096).read_to_string(&mut text)).ok().map(|_| text)
    })
}

/// [`refresh_ib_port_states`] with the files read by `read(device, port)` (the contents of
/// `<device>/ports/<port>/state`, or `None`), so that the rule can be tested and fuzzed without
/// files. `read` is only asked about a device name that is one path component (no `/`, not
/// `.` or `..`: the name comes from the topology, and must not lead the read elsewhere) and a
/// port that is a decimal number.
pub fn refresh_ib_port_states_with(
    topology: &mut Topology,
    mut read: impl FnMut(&str, &str) -> Option<String>,
) -> usize {
    let mut changed = 0;
    let osdevs = topology
        .pci
        .iter_mut()
        .flat_map(|f| f.osdevs.iter_mut())
        .chain(topology.loose.iter_mut().map(|l| &mut l.osdev));
    for osdev in osdevs.filter(|o| o.osdev_type == "OpenFabrics") {
        if osdev.name.is_empty() || osdev.name.contains(['/', '\0']) || osdev.name == "." || osdev.name == ".." {
            continue;
        }
        for (key, value) in osdev.infos.iter_mut() {
            let Some(port) = key.strip_prefix("Port").and_then(|k| k.strip_suffix("State")) else { continue };
            if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Some(state) = read(&osdev.name, port).as_deref().and_then(ib_port_state) else { continue };
            if *value != state {
                *value = state;
                changed += 1;
            }
        }
    }
    changed
}

/// What a port of an adapter that is gone reads as: down (IB_PORT_DOWN).
const GONE_PORT_STATE: &str = "1: DOWN (the adapter is gone)";

/// The state hwloc records for an InfiniBand port, from the text of its sysfs `state` file
/// (`4: ACTIVE` gives `4`): the first digit after leading white space, or `None`.
pub fn ib_port_state(text: &str) -> Option<String> {
    text.trim_start().chars().next().filter(char::is_ascii_digit).map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{LooseOsDevice, OsDevice, PciFunction};

    fn hca(name: &str, infos: &[(&str, &str)]) -> OsDevice {
        OsDevice {
            name: name.into(),
            osdev_type: "OpenFabrics".into(),
            subtype: None,
            infos: infos.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn device_minors_are_read_from_the_information_file() {
        let text = "GPU UUID:     \t GPU-2fa8685e-6ae2-c4f4-39df-551ea6a96245\nDevice Minor: \t 3\n";
        assert_eq!(parse_nvidia_minor(text), Ok(3));
        assert_eq!(parse_nvidia_minor("Device Minor: x\n").unwrap_err().to_string(), "malformed Device Minor x");
        let long = parse_nvidia_minor(&format!("Device Minor: {}\n", "9".repeat(1 << 16))).unwrap_err().to_string();
        assert!(long.len() < 200 && long.ends_with("(65536 bytes)"), "{long}");
        assert_eq!(parse_nvidia_minor("Model: A100\n"), Err(Malformed::NoDeviceMinor));
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/drivers/nvidia/proc");
        assert_eq!(nvidia_minor(&root, "0000:ca:00.0".parse().unwrap()).unwrap(), Some(1));
        assert_eq!(nvidia_minor(&root, "0000:99:00.0".parse().unwrap()).unwrap(), None);
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
                bridges: Vec::new(),
            }],
            loose: vec![LooseOsDevice { osdev: hca("mlx5_9", &[("Port1State", "1")]), locality: 0 }],
            ..Topology::default()
        };
        assert_eq!(refresh_ib_port_states(&mut topo, &root), 2);
        let infos = &topo.pci[0].osdevs[0].infos;
        assert_eq!(topo.pci[0].osdevs[0].info("Port1State"), Some("4"));
        assert_eq!(topo.pci[0].osdevs[0].info("Port2State"), Some("1"));
        // No file (port 3, mlx5_9): left as discovered.
        assert_eq!(topo.pci[0].osdevs[0].info("Port3State"), Some("4"));
        assert_eq!(topo.loose[0].osdev.info("Port1State"), Some("1"));
        assert_eq!(infos[0], ("NodeGUID".to_string(), "x".to_string()));
        assert_eq!(refresh_ib_port_states(&mut topo, &root), 0);
        // Hot-unplug: the adapter's directory is gone, the cache still says active. Its ports
        // are down now (UCX_NET_DEVICES leaves it out, with the "no active port" warning).
        topo.loose[0].osdev.infos = vec![("Port1State".into(), "4".into())];
        assert_eq!(refresh_ib_port_states(&mut topo, &root), 1);
        assert_eq!(topo.loose[0].osdev.info("Port1State"), Some("1"));
        std::fs::remove_dir_all(root.join("class/infiniband/mlx5_0")).unwrap();
        assert_eq!(refresh_ib_port_states(&mut topo, &root), 2, "mlx5_0's active ports 1 and 3 are down now");
        assert_eq!(topo.pci[0].osdevs[0].info("Port1State"), Some("1"));
        assert_eq!(topo.pci[0].osdevs[0].info("Port3State"), Some("1"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn ib_port_state_reads_the_first_digit_and_never_leaves_the_device_directory() {
        assert_eq!(ib_port_state(" 4: ACTIVE\n").as_deref(), Some("4"));
        assert_eq!(ib_port_state("ACTIVE"), None);
        assert_eq!(ib_port_state(""), None);
        let mut topo = Topology {
            loose: ["../../etc", "..", "a/b", "", "mlx5_0"]
                .iter()
                .map(|n| LooseOsDevice { osdev: hca(n, &[("Port1State", "1"), ("PortxState", "1")]), locality: 0 })
                .collect(),
            ..Topology::default()
        };
        let mut asked = Vec::new();
        let changed = refresh_ib_port_states_with(&mut topo, |dev, port| {
            asked.push(format!("{dev}/{port}"));
            Some("4: ACTIVE".into())
        });
        assert_eq!((changed, asked), (1, vec!["mlx5_0/1".to_string()]));
    }

    const INFO: &str = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 123\nGPU UUID: \t GPU-46F7E0A2-1C3B-4D5E-8F90-0A1B2C3D4E5F\nDevice Minor: \t 0\n";

    #[test]
    fn nvidia_information_uuid_line() {
        assert_eq!(parse_nvidia_information(INFO).unwrap(), "GPU-46f7e0a2-1c3b-4d5e-8f90-0a1b2c3d4e5f");
        assert!(parse_nvidia_information("Model: x\n").unwrap_err().to_string().contains("no 'GPU UUID:'"));
        assert_eq!(parse_nvidia_information("GPU UUID: GPU-zz\n"), Err(Malformed::GpuUuid("GPU-zz".into())));
    }
}
