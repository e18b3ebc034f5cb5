//! Reading a topology with hwloc, through the discovery library `map_by_device_discover.so`
//! (the `discover/` crate) next to the plugin's own file. The plugin itself does not link
//! hwloc: srun, sbatch and salloc load the plugin and never discover anything, and hwloc with
//! its libraries cost each of their steps about 0.1 ms to load (see discover/src/lib.rs).
//! The library is opened on first use, in slurmd when it writes the topology cache or checks
//! `topology=`, and in a step's slurmstepd that reads `topology=` or discovers the node live.
//!
//! Where it is looked for: only in the directory the plugin was loaded from (the admin's
//! plugstack.conf line), never through a search path or anything of the job's; that directory
//! (and every one above it) and the file must be root's and writable only by root, as for
//! `topology=` and the cache (`map_by_device::cache::discover_library`).
//!
//! The unit tests of this crate call the engine's loader directly: there is no library next
//! to a test binary. The end-to-end suites run every path through the library.

use map_by_device::topology::Topology;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why no topology was read. Every message is the one the plugin logs or refuses with.
#[derive(Debug, thiserror::Error)]
#[cfg_attr(test, allow(dead_code))]
pub enum DiscoverError {
    /// The library could not be opened (the same answer for the whole process).
    #[cfg(not(test))]
    #[error(transparent)]
    Open(&'static library::OpenError),
    /// The `topology=` path, which a C string cannot carry.
    #[error("{}: the path holds a NUL byte", .0.display())]
    NulPath(PathBuf),
    #[error("the discovery library returned nothing")]
    NoAnswer,
    /// The library's own one-line message (hwloc's, the file's, another build's).
    #[error("{0}")]
    Failed(String),
    /// The library's answer is no topology of this build's.
    #[error(transparent)]
    Json(#[from] map_by_device::cache::JsonError),
    /// The unit tests call the engine's loader directly.
    #[cfg(test)]
    #[error(transparent)]
    Load(#[from] map_by_device::load::LoadError),
}

/// Discovers this machine in a child process killed after `timeout`.
pub fn live(timeout: Duration) -> Result<Topology, DiscoverError> {
    #[cfg(not(test))]
    return library::call(None, timeout);
    #[cfg(test)]
    return Ok(map_by_device::load::live(timeout)?);
}

/// Loads the admin's `topology=` file (root's, writable only by root).
pub fn trusted_xml(path: &Path) -> Result<Topology, DiscoverError> {
    #[cfg(not(test))]
    return library::call(Some(path), Duration::ZERO);
    #[cfg(test)]
    return Ok(map_by_device::load::from_trusted_xml_file(path)?);
}

#[cfg(not(test))]
mod library {
    use super::DiscoverError;
    use map_by_device::cache::LibraryError;
    use map_by_device::topology::Topology;
    use std::ffi::{c_char, c_int, c_void, CStr, CString};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;
    use std::time::Duration;

    /// Why the discovery library cannot be used in this process.
    #[derive(Debug, thiserror::Error)]
    pub enum OpenError {
        #[error("cannot find the discovery library: the plugin's own file is unknown ({0})")]
        PluginUnknown(std::io::Error),
        /// Not where it must be, or not trusted there.
        #[error(transparent)]
        Library(#[from] LibraryError),
        #[error("cannot load {}: the path holds a NUL byte", .0.display())]
        NulPath(PathBuf),
        /// The loader's message.
        #[error("cannot load {}: {why}", path.display())]
        Dlopen { path: PathBuf, why: String },
        #[error("{} has no {symbol} (a library from another build? install the plugin's own)", path.display())]
        NoSymbol { path: PathBuf, symbol: String },
    }

    /// `mbd_discover` and `mbd_discover_free` (discover/src/lib.rs).
    type DiscoverFn = unsafe extern "C" fn(*const c_char, *const c_char, u64, *mut *mut c_char) -> c_int;
    type FreeFn = unsafe extern "C" fn(*mut c_char);

    struct Library {
        discover: DiscoverFn,
        free: FreeFn,
    }

    /// The library's entry points, opened once per process (and never closed: a Rust
    /// library's thread-local destructors may still run from it).
    fn library() -> Result<&'static Library, &'static OpenError> {
        static LIBRARY: OnceLock<Result<Library, OpenError>> = OnceLock::new();
        LIBRARY.get_or_init(open).as_ref()
    }

    fn open() -> Result<Library, OpenError> {
        let plugin = crate::cache::plugin_path().map_err(OpenError::PluginUnknown)?;
        let path = map_by_device::cache::discover_library(&plugin)?;
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| OpenError::NulPath(path.clone()))?;
        // SAFETY: a NUL-terminated path; RTLD_LOCAL keeps the library's symbols to itself.
        // Loading runs no code of the library's beyond the Rust runtime's own initialisers.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(OpenError::Dlopen { path, why: dl_error() });
        }
        let symbol = |name: &CStr| -> Result<*mut c_void, OpenError> {
            // SAFETY: `handle` is a live handle from dlopen (never closed); `name` is NUL-terminated.
            let f = unsafe { libc::dlsym(handle, name.as_ptr()) };
            if f.is_null() {
                return Err(OpenError::NoSymbol { path: path.clone(), symbol: name.to_string_lossy().into_owned() });
            }
            Ok(f)
        };
        let (discover, free) = (symbol(c"mbd_discover")?, symbol(c"mbd_discover_free")?);
        // SAFETY: both symbols are the library's exported functions of exactly these
        // signatures (discover/src/lib.rs); the interface check in each call refuses a
        // library built from other sources.
        Ok(unsafe {
            Library {
                discover: std::mem::transmute::<*mut c_void, DiscoverFn>(discover),
                free: std::mem::transmute::<*mut c_void, FreeFn>(free),
            }
        })
    }

    fn dl_error() -> String {
        // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl call
        // on this thread; it is copied at once.
        let e = unsafe { libc::dlerror() };
        if e.is_null() {
            return "unknown error".into();
        }
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }

    pub fn call(xml: Option<&Path>, timeout: Duration) -> Result<Topology, DiscoverError> {
        let lib = library().map_err(DiscoverError::Open)?;
        let interface = CString::new(map_by_device::cache::topology_interface()).unwrap_or_default();
        let xml = match xml {
            Some(p) => {
                Some(CString::new(p.as_os_str().as_bytes()).map_err(|_| DiscoverError::NulPath(p.to_path_buf()))?)
            }
            None => None,
        };
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings that outlive the call (or null for the path), and a
        // writable pointer for the answer (mbd_discover's contract).
        let code = unsafe {
            (lib.discover)(
                interface.as_ptr(),
                xml.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                timeout_ms,
                &mut out,
            )
        };
        if out.is_null() {
            return Err(DiscoverError::NoAnswer);
        }
        // SAFETY: `out` is the library's NUL-terminated answer; copied, then handed back once.
        let text = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
        // SAFETY: as above: freed by the library that allocated it, once.
        unsafe { (lib.free)(out) };
        match code {
            0 => Ok(map_by_device::cache::topology_from_json(&text)?),
            _ => Err(DiscoverError::Failed(text)),
        }
    }
}
