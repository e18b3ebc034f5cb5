//! The per-node topology cache: slurmd discovers the node once, at its start, and every step
//! reads the result instead of running hwloc's discovery again (about 15 ms per step).
//!
//! - **Writer**: slurmd's `init` hook, as root ([`write`]). It removes the old file, discovers
//!   the node with `map_by_device::load::live()`, writes the JSON to a temporary file (0644)
//!   in the cache directory (created 0755 if missing) and renames it over `topology.json`.
//!   Before the rename it takes a shared `flock` on the file and keeps that descriptor open
//!   for the life of slurmd (it survives slurmd's daemonizing forks; it is close-on-exec, so
//!   no slurmstepd or script inherits it).
//! - **Reader**: each step's `user_init`, as the job's user ([`read`]). It uses the file only if
//!   every directory on the path is root's and writable by nobody else (a sticky ancestor such
//!   as /tmp is allowed, the cache directory itself must not be), the file is a regular file
//!   owned by root and not writable by group or others (checked on the opened descriptor,
//!   opened without following a symlink), the lock is still held (a non-blocking exclusive
//!   `flock` fails: the slurmd that wrote it is running, so the file is newer than that
//!   slurmd's start), it was written by this very plugin file (device, inode, size and mtime
//!   of the loaded .so: a plugin upgraded by rename invalidates it) and on this boot.
//!   Anything else: live discovery, and the reason goes to slurmd.log.
//!
//! The path comes from the admin's config only (`cache_dir`), never from the job.

use map_by_device::topology::Topology;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The cache file's name in the cache directory.
pub use map_by_device::config::CACHE_FILE_NAME as FILE_NAME;

/// Bumped when the file's layout changes.
const FORMAT: u32 = 1;

/// Larger than any real topology's JSON (a 2,048-PU node with its I/O is a few MB).
const MAX_BYTES: u64 = 64 << 20;

/// The file as written.
#[derive(Serialize, Deserialize)]
struct CacheFile {
    format: u32,
    /// The plugin .so that wrote it: [`plugin_file`], as text (`dev:ino:size:mtime`), so
    /// that tools which read numbers as doubles (jq) cannot change it.
    plugin: String,
    /// `/proc/sys/kernel/random/boot_id` when it was written.
    boot_id: String,
    /// slurmd's pid when it wrote it (for the log only: slurmd may daemonize after `init`).
    writer_pid: u32,
    /// Seconds since the epoch.
    written: u64,
    /// How long the discovery took, in ms (for the log).
    discovery_ms: f64,
    topology: Topology,
}

/// A topology read from the cache, and where from (for the log).
pub struct Cached {
    pub topology: Topology,
    pub description: String,
}

/// Why the cache was not used.
#[derive(Debug)]
pub enum Miss {
    /// There is no cache file (slurmd did not write one): not worth more than a debug line.
    Absent(String),
    /// There is one, but it must not be used: the admin should hear of it.
    Rejected(String),
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Absent(m) | Miss::Rejected(m) => f.write_str(m),
        }
    }
}

/// What slurmd keeps while it runs: the locked descriptor of the file it wrote.
pub struct Written {
    /// Holds the shared lock that tells steps the writer is alive.
    lock: File,
    pub path: PathBuf,
    pub note: String,
}

impl Written {
    /// At slurmd's shutdown: removes the file if it is still the one this slurmd wrote.
    pub fn remove(self) -> io::Result<bool> {
        let mine = self.lock.metadata()?;
        match std::fs::symlink_metadata(&self.path) {
            Ok(now) if now.dev() == mine.dev() && now.ino() == mine.ino() => {
                std::fs::remove_file(&self.path)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// slurmd, at its start, as root: discovers the node and (re)writes the cache in `dir`.
pub fn write(dir: &Path) -> Result<Written, String> {
    ensure_dir(dir)?;
    let path = dir.join(FILE_NAME);
    // First remove the old file: if anything below fails, the steps find no cache rather
    // than one from an earlier slurmd.
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot remove the old cache {}: {e}", path.display())),
    }
    let start = Instant::now();
    let topology = map_by_device::load::live().map_err(|e| e.to_string())?;
    let discovery_ms = start.elapsed().as_secs_f64() * 1e3;
    let file = CacheFile {
        format: FORMAT,
        plugin: plugin_file().map_err(|e| format!("cannot identify the plugin's own file: {e}"))?,
        boot_id: boot_id().map_err(|e| format!("cannot read the boot id: {e}"))?,
        writer_pid: std::process::id(),
        written: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        discovery_ms,
        topology,
    };
    let json = serde_json::to_vec(&file).map_err(|e| format!("cannot serialize the topology: {e}"))?;
    let tmp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let result = (|| -> io::Result<File> {
        let _ = std::fs::remove_file(&tmp);
        // Private until it is locked and written (nobody else can open it and take the lock
        // first), then readable by the steps (set explicitly: slurmd's umask applies to open).
        let mut f =
            OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        flock(&f, libc::LOCK_SH | libc::LOCK_NB)?;
        f.write_all(&json)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, &path)?;
        Ok(f)
    })();
    match result {
        Ok(lock) => Ok(Written {
            lock,
            note: format!(
                "cached this node's topology in {} ({} bytes; discovery took {discovery_ms:.1} ms): {} PUs, {} PCI functions",
                path.display(),
                json.len(),
                file.topology.all_cpus().iter().count(),
                file.topology.pci.len()
            ),
            path,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(format!("cannot write the cache {}: {e}", path.display()))
        }
    }
}

/// A step, as the job's user: the cached topology in `dir`, if it can be trusted.
pub fn read(dir: &Path) -> Result<Cached, Miss> {
    let path = dir.join(FILE_NAME);
    let canonical_dir = match std::fs::canonicalize(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Miss::Absent(format!("no cache directory {}", dir.display())))
        }
        Err(e) => return Err(Miss::Rejected(format!("cannot resolve the cache directory {}: {e}", dir.display()))),
    };
    trusted_dirs(&canonical_dir).map_err(Miss::Rejected)?;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(canonical_dir.join(FILE_NAME))
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Miss::Absent(format!("no cache file {}", path.display())))
        }
        Err(e) => return Err(Miss::Rejected(format!("cannot open the cache {}: {e}", path.display()))),
    };
    let reject = |why: String| Miss::Rejected(format!("cache {} not used: {why}", path.display()));
    let meta = file.metadata().map_err(|e| reject(format!("cannot stat it: {e}")))?;
    trusted_file(&meta).map_err(reject)?;
    // The writer holds a shared lock for as long as it runs: if an exclusive one can be
    // taken, no slurmd stands behind the file any more.
    match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => {
            let _ = flock(&file, libc::LOCK_UN);
            return Err(reject(
                "no running slurmd holds it (written by a slurmd that has stopped, or copied by hand)".into(),
            ));
        }
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {}
        Err(e) => return Err(reject(format!("cannot test its lock: {e}"))),
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&file).take(MAX_BYTES).read_to_end(&mut bytes).map_err(|e| reject(format!("cannot read it: {e}")))?;
    let cached: CacheFile = serde_json::from_slice(&bytes)
        .map_err(|e| reject(format!("not a cache this plugin can read ({e}); slurmd rewrites it when it restarts")))?;
    if cached.format != FORMAT {
        return Err(reject(format!("format {} (this plugin reads {FORMAT})", cached.format)));
    }
    let me = plugin_file().map_err(|e| reject(format!("cannot identify the plugin's own file: {e}")))?;
    if cached.plugin != me {
        return Err(reject(
            "written by another build of the plugin (the .so was replaced: restart slurmd to rewrite the cache)".into(),
        ));
    }
    let boot = boot_id().map_err(|e| reject(format!("cannot read the boot id: {e}")))?;
    if cached.boot_id != boot {
        return Err(reject("written before the node last booted".into()));
    }
    Ok(Cached {
        description: format!(
            "slurmd's cache {} (written by pid {} at {}, discovery then took {:.1} ms)",
            path.display(),
            cached.writer_pid,
            cached.written,
            cached.discovery_ms
        ),
        topology: cached.topology,
    })
}

/// slurmd: makes sure `dir` exists, is root's and writable by nobody else.
fn ensure_dir(dir: &Path) -> Result<(), String> {
    if !dir.is_absolute() {
        return Err(format!("cache directory {} is not absolute", dir.display()));
    }
    match std::fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| format!("cannot create the cache directory {}: {e}", dir.display()))?;
            // The mode given to mkdir is reduced by slurmd's umask; users must traverse it.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("cannot make {} mode 0755: {e}", dir.display()))?;
        }
        Err(e) => return Err(format!("cannot stat the cache directory {}: {e}", dir.display())),
    }
    let canonical =
        std::fs::canonicalize(dir).map_err(|e| format!("cannot resolve the cache directory {}: {e}", dir.display()))?;
    trusted_dirs(&canonical)
}

/// Every directory from `/` down to `dir` (a canonical path) must be root's and not writable
/// by group or others; an ancestor may be world-writable if it is sticky (/tmp): nobody can
/// then rename or remove root's entries in it. The cache directory itself may not.
fn trusted_dirs(dir: &Path) -> Result<(), String> {
    for (i, d) in dir.ancestors().enumerate() {
        let meta = std::fs::symlink_metadata(d).map_err(|e| format!("cannot stat {}: {e}", d.display()))?;
        let mode = meta.mode();
        let what = if i == 0 { "the cache directory" } else { "a parent of the cache directory" };
        if !meta.is_dir() {
            return Err(format!("{what} {} is not a directory", d.display()));
        }
        if meta.uid() != 0 {
            return Err(format!("{what} {} is owned by uid {}, not root", d.display(), meta.uid()));
        }
        let sticky = mode & 0o1000 != 0;
        if mode & 0o022 != 0 && (i == 0 || !sticky) {
            return Err(format!(
                "{what} {} is writable by group or others (mode {:04o}): make it 0755",
                d.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

fn trusted_file(meta: &std::fs::Metadata) -> Result<(), String> {
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.uid() != 0 {
        return Err(format!("owned by uid {}, not root", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("writable by group or others (mode {:04o})", meta.mode() & 0o7777));
    }
    if meta.len() > MAX_BYTES {
        return Err(format!("{} bytes, larger than any topology", meta.len()));
    }
    Ok(())
}

fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    // SAFETY: `file` owns a valid open descriptor for the whole call; flock only reads it.
    let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn boot_id() -> io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim().to_string())
}

/// The identity of the .so this code was loaded from (`dladdr` on one of its functions):
/// device, inode, size and modification time. A step's plugin accepts a cache only from the
/// very file it was loaded from (an upgrade installs a new file by rename: a new inode).
fn plugin_file() -> io::Result<String> {
    let meta = std::fs::metadata(plugin_path()?)?;
    Ok(format!("{}:{}:{}:{}.{:09}", meta.dev(), meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec()))
}

fn plugin_path() -> io::Result<PathBuf> {
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

    /// A fresh root-owned directory under the test's temp dir (these tests run as root in
    /// the suite; as another user the trust checks refuse, which is what they are for).
    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("mbd-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn trust_rules_for_directories() {
        let d = tempdir("dirs");
        if is_root() {
            assert!(trusted_dirs(&std::fs::canonicalize(&d).unwrap()).is_ok());
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
            let e = trusted_dirs(&d).unwrap_err();
            assert!(e.contains("writable by group or others") && e.contains("0777"), "{e}");
            // Sticky is fine for a parent, not for the cache directory itself.
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
            assert!(trusted_dirs(&d).is_err());
            let sub = d.join("c");
            std::fs::create_dir(&sub).unwrap();
            std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
            assert!(trusted_dirs(&sub).is_ok());
            std::os::unix::fs::chown(&sub, Some(65534), None).unwrap();
            assert!(trusted_dirs(&sub).unwrap_err().contains("uid 65534"));
        } else {
            assert!(trusted_dirs(&d).unwrap_err().contains("not root"));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_cache_is_absent_not_rejected() {
        let d = tempdir("absent");
        assert!(matches!(read(&d.join("none")), Err(Miss::Absent(_))));
        if is_root() {
            assert!(matches!(read(&d), Err(Miss::Absent(_))));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn round_trip_while_the_writer_holds_its_lock() {
        if !is_root() {
            return;
        }
        let d = tempdir("roundtrip");
        let written = write(&d.join("sub")).unwrap();
        let meta = std::fs::metadata(&written.path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o644);
        assert_eq!(std::fs::metadata(d.join("sub")).unwrap().mode() & 0o7777, 0o755);
        let live = map_by_device::load::live().unwrap();
        let cached = read(&d.join("sub")).map_err(|e| e.to_string()).unwrap();
        assert_eq!(cached.topology, live);
        assert!(cached.description.contains("slurmd's cache"), "{}", cached.description);
        // slurmd stops: the file goes, and a copy left behind would not be trusted.
        std::fs::copy(&written.path, d.join("copy")).unwrap();
        assert!(written.remove().unwrap());
        std::fs::rename(d.join("copy"), d.join("sub").join(FILE_NAME)).unwrap();
        let e = read(&d.join("sub")).err().unwrap().to_string();
        assert!(e.contains("no running slurmd holds it"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_unlocked_or_tampered_file_is_rejected() {
        if !is_root() {
            return;
        }
        let d = tempdir("tampered");
        let path = d.join(FILE_NAME);
        std::fs::write(&path, b"{}").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Not locked by any writer.
        let e = read(&d).err().unwrap().to_string();
        assert!(e.contains("no running slurmd holds it"), "{e}");
        // Locked, but not JSON this plugin wrote.
        let lock = File::open(&path).unwrap();
        flock(&lock, libc::LOCK_SH).unwrap();
        let e = read(&d).err().unwrap().to_string();
        assert!(e.contains("not a cache this plugin can read"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = read(&d).err().unwrap().to_string();
        assert!(e.contains("writable by group or others (mode 0666)"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let e = read(&d).err().unwrap().to_string();
        assert!(e.contains("owned by uid 65534"), "{e}");
        // A symlink in place of the file is not followed.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        assert!(matches!(read(&d), Err(Miss::Rejected(_))));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
