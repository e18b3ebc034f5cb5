//! GPU identities read from the kernel driver by PCI bus id, for nodes whose hwloc has no
//! vendor backend (a distribution's hwloc reports GPUs as DRM `cardN`/`renderDN` only).
//!
//! - NVIDIA: `<proc>/driver/nvidia/gpus/<busid>/information`, line `GPU UUID: GPU-...`.
//! - AMD: `<sys>/bus/pci/devices/<busid>/unique_id`, `%016llx` (ROCr's `GPU-<id>` token).
//! - Intel: only hwloc's Level Zero backend knows the ordinals: nothing to read.
//!
//! The roots come from the admin's config only (never from a job's environment), so tests
//! can point them at fixture trees (`topologies/drivers/`). Nothing is guessed: a file that
//! is absent gives no identity, and a malformed one is a problem that names the file.

use crate::device::{GpuIdentity, IdentitySource, Vendor};
use crate::node::NodeOptions;
use crate::topology::PciBusId;
use std::path::{Path, PathBuf};

/// Files larger than this are not driver files; refuse rather than read them whole.
const MAX_FILE: u64 = 64 * 1024;

fn read_small(path: &Path) -> Result<Option<String>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if meta.len() > MAX_FILE {
        return Err(format!("{} is {} bytes, too large for a driver file", path.display(), meta.len()));
    }
    std::fs::read_to_string(path).map(Some).map_err(|e| format!("cannot read {}: {e}", path.display()))
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
pub fn parse_nvidia_information(text: &str) -> Result<String, String> {
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
                Err(format!("malformed GPU UUID {uuid:?}"))
            };
        }
    }
    Err("no 'GPU UUID:' line (the driver leaves it out when its UUID cache is invalid)".into())
}

/// The identity of the GPU at `busid` from its driver's files, if the admin configured the
/// roots and the file exists. `Err` names the file and what is wrong with it.
pub fn lookup(
    vendor: Vendor,
    busid: PciBusId,
    options: &NodeOptions,
) -> Result<Option<(GpuIdentity, IdentitySource)>, String> {
    match vendor {
        Vendor::Nvidia => {
            let Some(root) = &options.proc_root else { return Ok(None) };
            let path = nvidia_path(root, busid);
            let Some(text) = read_small(&path)? else { return Ok(None) };
            let uuid = parse_nvidia_information(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(Some((GpuIdentity::Nvidia { uuid }, IdentitySource::DriverFile { path: path.display().to_string() })))
        }
        Vendor::Amd => {
            let Some(root) = &options.sys_root else { return Ok(None) };
            let path = amd_path(root, busid);
            let Some(text) = read_small(&path)? else { return Ok(None) };
            let unique_id = crate::enumerate::amd_unique_id(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(Some((GpuIdentity::Amd { unique_id }, IdentitySource::DriverFile { path: path.display().to_string() })))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 123\nGPU UUID: \t GPU-46F7E0A2-1C3B-4D5E-8F90-0A1B2C3D4E5F\nDevice Minor: \t 0\n";

    #[test]
    fn nvidia_information_uuid_line() {
        assert_eq!(parse_nvidia_information(INFO).unwrap(), "GPU-46f7e0a2-1c3b-4d5e-8f90-0a1b2c3d4e5f");
        assert!(parse_nvidia_information("Model: x\n").unwrap_err().contains("no 'GPU UUID:'"));
        assert!(parse_nvidia_information("GPU UUID: GPU-zz\n").unwrap_err().contains("GPU-zz"));
    }
}
