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
//! Where its dependencies are looked for: the dynamic loader finds the libraries it links
//! that the process has not loaded yet (slurmstepd has no `libgcc_s.so.1`; some builds no
//! `libhwloc`) through `LD_LIBRARY_PATH`, whose relative entries (`.`, an empty one) name the
//! working directory, and a step's slurmstepd works in the job's directory, with root's real
//! uid (issue 38). So the library is opened with `/` as the working directory
//! ([`in_root_directory`]), in a thread of its own that has its own working directory, joined
//! before the hook returns: nothing of the job's directory is looked at, and no other thread
//! of slurmstepd sees its directory change. It is the only thing the plugin loads or runs in a
//! step; hwloc's own plugins are loaded in the discovery's child, which works in `/` as the
//! job's user (`map_by_device::bounded`, `map_by_device::load`).
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

/// Runs `f` with `/` as its working directory, and the process's own left as it is: in a
/// thread of its own that stops sharing the process's working directory (`unshare(CLONE_FS)`)
/// and changes to `/`, joined before this returns. Where a thread cannot be started or a
/// security policy refuses `unshare`, on this thread with the process's working directory
/// changed to `/` around `f` and back ([`around_process`]): other threads of the process see
/// `/` meanwhile, which is the fallback's cost.
pub fn in_root_directory<T: Send, F: FnOnce() -> T + Send>(f: F) -> std::io::Result<T> {
    let mut pending = Some(f);
    let ran = std::thread::scope(|scope| {
        let pending = &mut pending;
        let worker = std::thread::Builder::new().spawn_scoped(scope, move || {
            // SAFETY: unshare(CLONE_FS) only gives this thread its own working directory, root
            // and umask (copies of the process's); chdir reads a NUL-terminated path.
            let own = unsafe { libc::unshare(libc::CLONE_FS) == 0 && libc::chdir(c"/".as_ptr()) == 0 };
            own.then(|| pending.take().map(|f| f())).flatten()
        });
        worker.ok().map(std::thread::ScopedJoinHandle::join)
    });
    match ran {
        Some(Ok(Some(done))) => return Ok(done),
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        _ => {}
    }
    match pending {
        Some(f) => around_process(f),
        None => Err(std::io::Error::other("the library was not opened")),
    }
}

/// [`in_root_directory`]'s fallback: the process's working directory is `/` while `f` runs,
/// then the one it was (kept open, so that a rename or a path through links cannot change
/// which directory that is).
pub fn around_process<T>(f: impl FnOnce() -> T) -> std::io::Result<T> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: opens "." (a NUL-terminated path) as a descriptor of this process.
    let fd = unsafe { libc::open(c".".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned here alone.
    let saved = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: chdir reads a NUL-terminated path.
    if unsafe { libc::chdir(c"/".as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    /// Changes back if `f` panics.
    struct Back<'a>(&'a OwnedFd);
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            // SAFETY: fchdir to a directory descriptor that outlives the guard.
            unsafe { libc::fchdir(self.0.as_raw_fd()) };
        }
    }
    let back = Back(&saved);
    let done = f();
    std::mem::forget(back); // (a reference: nothing leaks)
                            // SAFETY: fchdir to the directory descriptor kept above.
    if unsafe { libc::fchdir(saved.as_raw_fd()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::other(format!("cannot change back to the working directory: {e}")));
    }
    Ok(done)
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
        /// The working directory could not be set to `/` for loading it, or set back.
        #[error("cannot load {} from the root directory: {source}", path.display())]
        Directory { path: PathBuf, source: std::io::Error },
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
        // Out of the working directory (the job's, in a step): see the module's docs. The
        // handle crosses back as an address; the loader's message is read on the thread that
        // called dlopen (dlerror is per thread).
        let opened = super::in_root_directory(|| {
            // SAFETY: a NUL-terminated path; RTLD_LOCAL keeps the library's symbols to itself.
            // Loading runs no code of the library's beyond the Rust runtime's own initialisers.
            let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                Err(dl_error())
            } else {
                Ok(handle as usize)
            }
        })
        .map_err(|e| OpenError::Directory { path: path.clone(), source: e })?;
        let handle = opened.map_err(|why| OpenError::Dlopen { path: path.clone(), why })? as *mut c_void;
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn cwd() -> PathBuf {
        std::env::current_dir().unwrap()
    }

    /// The library is opened with `/` as the working directory, and the process's own (the
    /// job's, in a step) is never changed: `/proc/self/cwd` is the main thread's.
    #[test]
    fn the_library_is_opened_from_the_root_directory_and_the_process_stays_where_it_is() {
        let before = cwd();
        let (inside, process) = in_root_directory(|| (cwd(), std::fs::read_link("/proc/self/cwd").unwrap())).unwrap();
        assert_eq!(inside, Path::new("/"));
        assert_eq!(process, before);
        assert_eq!(cwd(), before);
        // A panic comes back to the caller's guard.
        assert!(std::panic::catch_unwind(|| in_root_directory(|| panic!("boom"))).is_err());
        assert_eq!(cwd(), before);
    }

    const FALLBACK_CHILD: &str = "MAP_BY_DEVICE_CWD_FALLBACK_CHILD";

    /// The fallback changes the process's directory: tried in a fresh copy of this test binary.
    #[test]
    fn the_fallback_changes_the_process_directory_around_and_back() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["discover::tests::fallback_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(FALLBACK_CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("FALLBACK: ok"), "the child did not run: {stdout}");
    }

    #[test]
    fn fallback_child() {
        if std::env::var_os(FALLBACK_CHILD).is_none() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("mbd-fallback-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::env::set_current_dir(&dir).unwrap();
        let here = cwd();
        assert_eq!(around_process(cwd).unwrap(), Path::new("/"));
        assert_eq!(cwd(), here);
        assert!(std::panic::catch_unwind(|| around_process(|| panic!("boom"))).is_err());
        assert_eq!(cwd(), here, "a panic left the process in /");
        std::env::set_current_dir("/").unwrap();
        std::fs::remove_dir(&dir).unwrap();
        println!("FALLBACK: ok");
    }
}
