//! The plugin's side of the per-node topology cache (the cache itself, its trust and
//! liveness rules, is the engine's `map_by_device::cache`): which plugin file this code was
//! loaded from, so that a step accepts only a cache written by the very same build.

use map_by_device::cache;
pub use map_by_device::cache::{Cached, Miss, WriteError, Written};
use map_by_device::topology::Topology;
use std::io;
use std::path::{Path, PathBuf};

/// slurmd, at its start, as root: discovers the node with `discover` and (re)writes the cache.
pub fn write<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    dir: &Path,
    discover: impl FnOnce() -> Result<Topology, E>,
) -> Result<Written, WriteError> {
    let me = plugin_identity().map_err(WriteError::PluginIdentity)?;
    cache::write(dir, &me, discover)
}

/// A step, as the job's user: the cached topology, if it can be trusted.
pub fn read(dir: &Path) -> Result<Cached, Miss> {
    let me = plugin_identity().map_err(|e| Miss::plugin_identity(dir, e))?;
    cache::read(dir, Some(&me))
}

/// The identity of the .so this code was loaded from (see `cache::plugin_identity`).
fn plugin_identity() -> io::Result<String> {
    cache::plugin_identity(&plugin_path()?)
}

/// The file this code was loaded from (`dladdr` on one of its functions).
pub(crate) fn plugin_path() -> io::Result<PathBuf> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let addr = plugin_path as fn() -> io::Result<PathBuf> as *const libc::c_void;
    // SAFETY:
    // - `addr` is the address of a function of this library, `info` a live, writable Dl_info;
    // - dladdr only fills `info`; `dli_fname` then points into the loader's own data, which
    //   lives as long as the library stays loaded (it is copied out at once below).
    let rc = unsafe { libc::dladdr(addr, &mut info) };
    if rc == 0 || info.dli_fname.is_null() {
        return Err(io::Error::other("dladdr found no file for the plugin's code"));
    }
    // SAFETY: dli_fname is non-null and NUL-terminated (dladdr's contract).
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    use std::os::unix::ffi::OsStrExt;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_knows_its_own_file() {
        // In a test binary, the code is the test executable itself.
        let path = plugin_path().unwrap();
        assert!(path.exists(), "{}", path.display());
        assert_eq!(plugin_identity().unwrap(), cache::plugin_identity(&path).unwrap());
    }
}
