//! The plugin's hwloc side, as a library of its own: `map_by_device_discover.so`, installed
//! next to the plugin's `map_by_device.so` and loaded by it (spank/src/discover.rs) only where
//! a topology has to be read with hwloc: in slurmd when it writes the topology cache, and in
//! a step's slurmstepd for `topology=` or live discovery (`cache = false`, a stale cache).
//!
//! Why a separate library: srun, sbatch and salloc load the plugin too, and do not map hwloc
//! (slurmstepd and slurmd do). Linked into the plugin, hwloc with libudev and libcap cost every
//! step about 0.1 ms of srun's time (0.8% of a one-task step on Slurm 26.05), for code srun
//! never runs. The plugin's common path, a mapping from slurmd's cache, needs no hwloc at all.
//!
//! The interface is one C function and its `free`: the topology crosses as the JSON the cache
//! uses, which both sides read with the same engine. Both sides name the interface they were
//! built for ([`map_by_device::cache::topology_interface`]); a helper from another build
//! refuses, and the plugin says which two met.
//!
//! **Invariants:** no panic leaves [`mbd_discover`] (the hook that called it is inside Slurm);
//! the only inputs are the admin's (the `topology=` path, the discovery timeout), never the
//! job's; every string it returns is freed by [`mbd_discover_free`], in this library's
//! allocator.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Duration;

/// [`mbd_discover`]: `*out` holds the topology's JSON.
pub const OK: c_int = 0;
/// [`mbd_discover`]: `*out` holds why the topology could not be read.
pub const FAILED: c_int = 1;

/// Reads a topology with hwloc and returns it as JSON in `*out` ([`OK`]) or a one-line error
/// ([`FAILED`]). `xml_path` null: discovers this machine, in a child process killed after
/// `timeout_ms` (`map_by_device::load::live`); otherwise loads that `topology=` file, which
/// must be root's (`map_by_device::load::from_trusted_xml_file`). `interface` is the caller's
/// [`map_by_device::cache::topology_interface`]: another one is refused.
///
/// # Safety
/// `interface` and a non-null `xml_path` are NUL-terminated strings; `out` points to writable
/// storage for one pointer, which the caller passes to [`mbd_discover_free`] once read.
#[no_mangle]
pub unsafe extern "C" fn mbd_discover(
    interface: *const c_char,
    xml_path: *const c_char,
    timeout_ms: u64,
    out: *mut *mut c_char,
) -> c_int {
    if out.is_null() {
        return FAILED;
    }
    // SAFETY: the caller passes NUL-terminated strings (or a null xml_path), per this
    // function's contract; they are only read, and copied before it returns.
    let (interface, xml_path) = unsafe {
        (
            (!interface.is_null()).then(|| CStr::from_ptr(interface).to_string_lossy().into_owned()),
            (!xml_path.is_null()).then(|| CStr::from_ptr(xml_path).to_string_lossy().into_owned()),
        )
    };
    quiet_panics();
    let result = catch_unwind(AssertUnwindSafe(|| discover(interface.as_deref(), xml_path.as_deref(), timeout_ms)))
        .unwrap_or_else(|panic| Err(DiscoverError::Panicked(map_by_device::panics::text(panic.as_ref()))));
    let (code, text) = match result {
        Ok(json) => (OK, json),
        Err(e) => (FAILED, e.to_string()),
    };
    // A NUL inside the text (never in JSON or in these messages) would cut it: replaced.
    let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `out` is non-null and writable per the contract; the string is handed over
    // and comes back through mbd_discover_free.
    unsafe { *out = text.into_raw() };
    code
}

/// Frees a string [`mbd_discover`] returned (null is ignored).
///
/// # Safety
/// `s` is null or a pointer `mbd_discover` stored in its `out`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn mbd_discover_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: `s` came from CString::into_raw in mbd_discover (the contract), once.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Why [`mbd_discover`] gives no topology: its one-line message, handed to the plugin.
#[derive(Debug, thiserror::Error)]
enum DiscoverError {
    #[error("the discovery library is {mine}, the plugin {plugin}: install both from the same build")]
    Interface { mine: String, plugin: String },
    #[error(transparent)]
    Load(#[from] map_by_device::load::LoadError),
    #[error(transparent)]
    Json(#[from] map_by_device::cache::JsonError),
    /// A panic caught in [`mbd_discover`] (its text).
    #[error("{}", map_by_device::panics::internal_error("in the discovery library", .0))]
    Panicked(String),
}

fn discover(interface: Option<&str>, xml_path: Option<&str>, timeout_ms: u64) -> Result<String, DiscoverError> {
    let mine = map_by_device::cache::topology_interface();
    if interface != Some(mine.as_str()) {
        return Err(DiscoverError::Interface { plugin: interface.unwrap_or("unnamed").to_string(), mine });
    }
    let topology = match xml_path {
        Some(path) => map_by_device::load::from_trusted_xml_file(Path::new(path)),
        None => map_by_device::load::live(Duration::from_millis(timeout_ms)),
    }?;
    Ok(map_by_device::cache::topology_to_json(&topology)?)
}

/// A panic here is reported by [`mbd_discover`] as its error; this library's own copy of the
/// standard library would otherwise print "thread panicked at ..." on slurmd's stderr first.
fn quiet_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(interface: Option<&str>, xml: Option<&str>) -> (c_int, String) {
        let interface = interface.map(|s| CString::new(s).unwrap());
        let xml = xml.map(|s| CString::new(s).unwrap());
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid strings or null, and a writable out pointer.
        let code = unsafe {
            mbd_discover(
                interface.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                xml.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                5000,
                &mut out,
            )
        };
        // SAFETY: out was set by mbd_discover; copied, then freed once.
        let text = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
        // SAFETY: as above.
        unsafe { mbd_discover_free(out) };
        (code, text)
    }

    #[test]
    fn another_builds_interface_is_refused_naming_both() {
        let (code, text) = call(Some("map-by-device 0.0.0 topology format 1"), None);
        assert_eq!(code, FAILED);
        assert!(text.contains("map-by-device 0.0.0 topology format 1"), "{text}");
        assert!(text.contains(&map_by_device::cache::topology_interface()), "{text}");
        assert_eq!(call(None, None).0, FAILED);
    }

    #[test]
    fn a_topology_file_comes_back_as_the_engines_json() {
        // Not root-trusted in a checkout under a user's home: the refusal is the answer then.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../topologies/e2e-2gpu.xml");
        let path = std::fs::canonicalize(path).unwrap();
        let (code, text) = call(Some(&map_by_device::cache::topology_interface()), path.to_str());
        match map_by_device::load::from_trusted_xml_file(&path) {
            Ok(direct) => {
                assert_eq!(code, OK, "{text}");
                let back = map_by_device::cache::topology_from_json(&text).unwrap();
                let json = map_by_device::cache::topology_to_json;
                assert_eq!(json(&back).unwrap(), json(&direct).unwrap());
            }
            Err(e) => assert_eq!((code, text), (FAILED, e.to_string())),
        }
    }

    #[test]
    fn a_missing_file_is_a_one_line_error() {
        let (code, text) = call(Some(&map_by_device::cache::topology_interface()), Some("/nonexistent/t.xml"));
        assert_eq!(code, FAILED);
        assert!(text.contains("/nonexistent/t.xml") && !text.contains('\n'), "{text}");
    }
}
