//! The per-node topology cache: slurmd discovers the node once, at its start, and every step
//! reads the result instead of running hwloc's discovery again (about 15 ms per step).
//!
//! - **Writer**: slurmd's `init` hook, as root ([`write`]). In the cache directory (created
//!   0755 if missing; it and every directory above it must be root's and writable only by
//!   root, see [`crate::trusted_fs`]) it removes the old cache, creates a fresh lock file
//!   `topology.lock` (mode 0600: only root can open it) and takes an exclusive `flock` on it,
//!   which it keeps for the life of slurmd. Then it discovers the node, writes the JSON to a
//!   temporary file (created 0600) on which it first takes an open-file-description write
//!   lock over the whole file (`F_OFD_SETLK`), makes it 0644 and renames it over
//!   `topology.json`; it keeps that descriptor, and so the lock, for the life of slurmd (the
//!   descriptor survives slurmd's daemonizing forks, a forked child closing its copy does not
//!   release it, and it is close-on-exec). The JSON names the lock file's device and inode.
//!   Every operation is relative to the directory's descriptor.
//! - **Reader**: each step's `user_init`, as the job's user ([`read`]); also `map-by-device
//!   check`. The file is used only if the directory and the file pass the trust rule, the
//!   JSON is this format, written by this very plugin file (device, inode, size and mtime of
//!   the loaded .so: an upgrade by rename invalidates it) on this boot, and **the slurmd that
//!   wrote it still runs**: on the descriptor it read the bytes from, the reader asks the
//!   kernel for a read lock over the whole file (`F_OFD_GETLK`), which only a write lock
//!   conflicts with. A write lock needs the file open for writing, and only root can open it
//!   so (root's, 0644); other users can take read locks at most, which prove nothing, and
//!   none at all while slurmd's lock covers the file, so they can neither fake the proof nor
//!   slow it (the kernel walks this one file's locks, and slurmd's comes first). One `fcntl`,
//!   whatever the node's other locks (the earlier fallback read `/proc/locks`, which costs
//!   O(N^2) in the node's lock count and any user can fill: issue 27), and whatever the
//!   reader can see of slurmd's process (`hidepid`, another pid namespace, a daemonized
//!   slurmd's new pid). Without that lock, the writer's pid and start time recorded in the
//!   JSON decide (its pid as `/proc` names it and field 22 of `/proc/self/stat`: a root
//!   process with both is the writer, since no other process of this boot can have both; not
//!   `getpid()`, which in a pid namespace that sees the machine's /proc names another process). `topology.lock` must still be root's,
//!   0600 and the one the JSON names. Anything else: the caller discovers the node live and
//!   logs why.
//!
//! The path comes from the admin's config only (`cache_dir`), never from the job.

use crate::topology::Topology;
use crate::trusted_fs::{self, Kind, TrustError, TrustedDir};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The cache file's name in the cache directory.
pub use crate::config::CACHE_FILE_NAME as FILE_NAME;

/// The lock file slurmd holds while it runs, in the cache directory.
pub const LOCK_NAME: &str = "topology.lock";

/// Bumped when the file's layout changes (2: the lock moved to a root-only lock file; 3: each
/// PCI function carries its chain of PCI bridges; 4: the writer's start time).
pub const FORMAT: u32 = 4;

/// A topology as the JSON this file and the discovery library (`discover/`) carry it in.
pub fn topology_to_json(topology: &Topology) -> Result<String, JsonError> {
    serde_json::to_string(topology).map_err(JsonError::Write)
}

/// The topology [`topology_to_json`] wrote.
pub fn topology_from_json(json: &str) -> Result<Topology, JsonError> {
    serde_json::from_str(json).map_err(JsonError::Read)
}

/// Why a topology could not cross between the plugin and its discovery library as JSON.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error("cannot write the topology as JSON: {0}")]
    Write(#[source] serde_json::Error),
    #[error("cannot read the topology's JSON: {0}")]
    Read(#[source] serde_json::Error),
}

/// The discovery library's file names, looked for in this order in the plugin's own
/// directory: as the packages install it beside `map_by_device.so`, and as cargo names it
/// beside `libmap_by_device_spank.so` in a build tree.
pub const DISCOVER_LIBRARY: [&str; 2] = ["map_by_device_discover.so", "libmap_by_device_discover.so"];

/// The discovery library that goes with the plugin file `plugin` (spank/src/discover.rs loads
/// it, `map-by-device check` looks for it): the first of [`DISCOVER_LIBRARY`] beside it, which
/// must be root's and writable only by root in a directory chain that is too (the
/// [`crate::trusted_fs`] rule), or why there is none to use.
pub fn discover_library(plugin: &Path) -> Result<PathBuf, LibraryError> {
    let dir = plugin.parent().unwrap_or(Path::new("/"));
    let untrusted = |name: &str, why: String| LibraryError::Untrusted { path: dir.join(name), why };
    let trusted = TrustedDir::open(dir).map_err(|e| untrusted(DISCOVER_LIBRARY[0], e.to_string()))?;
    for name in DISCOVER_LIBRARY {
        match trusted.stat(name) {
            Ok(Some(meta)) => {
                return match trusted_fs::problem(Kind::File, meta.kind, meta.uid, meta.mode) {
                    Some(problem) => Err(untrusted(name, format!("it {problem}"))),
                    None => Ok(dir.join(name)),
                }
            }
            Ok(None) => {}
            Err(e) => return Err(untrusted(name, e.to_string())),
        }
    }
    Err(LibraryError::Missing { path: dir.join(DISCOVER_LIBRARY[0]) })
}

/// Why there is no discovery library to load beside the plugin's file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LibraryError {
    /// `why`: the file's or its directories' problem under the `trusted_fs` rule.
    #[error("will not load the discovery library {}: {why}", path.display())]
    Untrusted { path: PathBuf, why: String },
    #[error(
        "the discovery library {} is missing: install it beside the plugin (the package does; from source, \
         copy target/release/libmap_by_device_discover.so there as {})",
        path.display(),
        DISCOVER_LIBRARY[0]
    )]
    Missing { path: PathBuf },
}

/// What the plugin and its discovery library (`discover/`) must agree on to pass a
/// [`Topology`] as JSON: the engine's version and this file's layout of the topology.
pub fn topology_interface() -> String {
    format!("map-by-device {} topology format {FORMAT}", env!("CARGO_PKG_VERSION"))
}

/// Larger than any real topology's JSON (a 2,048-PU node with its I/O is a few MB).
pub const MAX_BYTES: u64 = 64 << 20;

/// The file as written, and as [`parse`] reads it back.
#[derive(Debug, Serialize, Deserialize)]
pub struct CacheFile {
    pub format: u32,
    /// The plugin .so that wrote it ([`plugin_identity`]), as text so that tools which read
    /// numbers as doubles (jq) cannot change it.
    pub plugin: String,
    /// `/proc/sys/kernel/random/boot_id` when it was written.
    pub boot_id: String,
    /// slurmd's pid when it wrote it, as `/proc` names it (`/proc/self`): in a pid namespace
    /// whose `/proc` is another namespace's, not `getpid()` (see [`own_process`]).
    pub writer_pid: u32,
    /// That process's start time, clock ticks after boot (field 22 of `/proc/self/stat`):
    /// with the pid, it names one process of this boot.
    pub writer_start: u64,
    /// Seconds since the epoch.
    pub written: u64,
    /// How long the discovery took, in ms (for the log).
    pub discovery_ms: f64,
    /// `dev:ino` of the lock file the writer holds.
    pub lock: String,
    pub topology: Topology,
}

/// A topology read from the cache, and where from (for the log).
#[derive(Debug)]
pub struct Cached {
    pub topology: Topology,
    pub description: String,
}

/// Why the cache was not used.
#[derive(Debug, thiserror::Error)]
pub enum Miss {
    /// There is no cache (slurmd did not write one): not worth more than a debug line.
    #[error(transparent)]
    Absent(Absent),
    /// There is one, but it must not be used: the admin should hear of it.
    #[error(transparent)]
    Rejected(Rejected),
}

/// What of the cache is not there.
#[derive(Debug, thiserror::Error)]
pub enum Absent {
    #[error("no cache directory {}", .0.display())]
    Directory(PathBuf),
    #[error("no cache file {}", .0.display())]
    File(PathBuf),
}

/// A cache file at `path` that the steps must not use, and why.
#[derive(Debug, thiserror::Error)]
pub struct Rejected {
    pub path: PathBuf,
    pub why: Rejection,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.why {
            // Before any file is looked at: the reader's own problem, not the cache's.
            why @ Rejection::PluginIdentity(_) => write!(f, "{why}"),
            why => write!(f, "cache {} not used: {why}", self.path.display()),
        }
    }
}

/// Why a cache file that is there must not be used.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// The reading plugin cannot name its own file, so cannot tell which build wrote the cache.
    #[error("cannot identify the plugin's own file: {0}")]
    PluginIdentity(#[source] io::Error),
    /// The cache directory fails the trust rule or cannot be opened.
    #[error("{0}")]
    Directory(#[source] TrustError),
    /// The cache file fails the trust rule (only the problem is told: the path is already) or
    /// cannot be opened.
    #[error("{}", match .0 { TrustError::Untrusted { problem, .. } => problem.clone(), e => e.to_string() })]
    File(#[source] TrustError),
    #[error("cannot read it: {0}")]
    Read(#[source] io::Error),
    #[error("larger than {MAX_BYTES} bytes")]
    TooLarge,
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Writer(#[from] WriterGone),
    /// The cache names another build of the plugin than the reader's.
    #[error("written by another build of the plugin (the .so was replaced: restart slurmd to rewrite the cache)")]
    OtherBuild { cached: String, reader: String },
    #[error("cannot read the boot id: {0}")]
    BootId(#[source] io::Error),
    #[error("written before the node last booted")]
    OldBoot { cached: String, now: String },
}

impl Miss {
    /// A reader that cannot name its own plugin file (`io`) cannot use the cache in `dir`.
    pub fn plugin_identity(dir: &Path, io: io::Error) -> Miss {
        Miss::Rejected(Rejected { path: dir.join(FILE_NAME), why: Rejection::PluginIdentity(io) })
    }
}

/// Why a cache file's bytes are not a cache this plugin reads ([`parse`]).
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// serde's words about the JSON.
    #[error("not a cache this plugin can read ({}); slurmd rewrites it when it restarts", serde_words(.0))]
    Json(#[source] serde_json::Error),
    #[error("format {0} (this plugin reads {FORMAT}); restart slurmd to rewrite it")]
    Format(u32),
}

/// serde quotes a bad enum word as it is (control characters too): escaped and cut short,
/// since the line goes to slurmd.log.
fn serde_words(e: &serde_json::Error) -> String {
    let mut why = crate::text::printable(&e.to_string());
    if why.len() > 400 {
        let cut = (0..=400).rev().find(|&i| why.is_char_boundary(i)).unwrap_or(0);
        why.truncate(cut);
        why.push_str("...");
    }
    why
}

/// Why the cache's writer is not proven alive ([`liveness`]).
#[derive(Debug, thiserror::Error)]
pub enum WriterGone {
    /// `topology.lock` could not be examined.
    #[error("{0}")]
    LockUnreadable(#[source] TrustError),
    /// The kernel would not say whether the cache file is write-locked.
    #[error("cannot ask for its lock: {0}")]
    LockProbe(#[source] io::Error),
    #[error("{STOPPED}: there is no {LOCK_NAME}")]
    NoLockFile,
    /// The lock file fails the trust rule (`problem`: its kind or owner or mode).
    #[error("{LOCK_NAME} {0}")]
    LockUntrusted(String),
    #[error("{LOCK_NAME} can be opened by others (mode {0:04o}), so its lock proves nothing")]
    LockOpenToOthers(u32),
    /// The lock file is `found` (`dev:ino`), the cache names `recorded`.
    #[error("{STOPPED}: {LOCK_NAME} is not the one the cache names")]
    OtherLock { recorded: String, found: String },
    #[error("{STOPPED}")]
    Stopped,
}

const STOPPED: &str = "no running slurmd holds it (written by a slurmd that has stopped, or copied by hand)";

/// Why slurmd could not write the topology cache (the steps then discover the node
/// themselves). Each message says what failed and on what.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot identify the plugin's own file: {0}")]
    PluginIdentity(#[source] io::Error),
    #[error("cache_dir: {0}")]
    CacheDir(#[source] TrustError),
    /// An entry of the cache directory (the old file, the lock file) could not be handled.
    #[error(transparent)]
    Entry(#[from] TrustError),
    #[error("cannot lock {LOCK_NAME}: {0}")]
    Lock(#[source] io::Error),
    #[error("cannot examine {LOCK_NAME}: {0}")]
    ExamineLock(#[source] io::Error),
    #[error("cannot read this process's pid and start time in /proc: {0}")]
    OwnProcess(#[source] io::Error),
    /// The discovery's own error.
    #[error("{0}")]
    Discovery(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot read the boot id: {0}")]
    BootId(#[source] io::Error),
    #[error("cannot serialize the topology: {0}")]
    Serialize(#[source] serde_json::Error),
    #[error("cannot write the cache in {}: {source}", dir.display())]
    File { dir: PathBuf, source: FileError },
    #[error("the cache file vanished")]
    Vanished,
}

/// Why the new cache file could not be written beside the old one, for [`WriteError::File`].
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(transparent)]
    Entry(#[from] TrustError),
    /// `op` (lock, write, chmod) on the temporary file `tmp`.
    #[error("cannot {op} {tmp}: {source}")]
    Step { op: &'static str, tmp: String, source: io::Error },
}

/// Why slurmd could not remove its cache at its shutdown.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("cannot examine the lock file: {0}")]
    ExamineLock(#[source] io::Error),
    #[error(transparent)]
    Entry(#[from] TrustError),
}

/// What slurmd keeps while it runs: the cache directory and the locked lock file.
pub struct Written {
    dir: TrustedDir,
    /// Holds the exclusive `flock` on `topology.lock`.
    lock: File,
    /// The cache file itself, opened for writing, with the open file description's write
    /// lock (`F_OFD_SETLK`) over all of it that tells steps the writer is alive.
    _held: File,
    file: (u64, u64),
    pub path: PathBuf,
    pub note: String,
}

impl Written {
    /// At slurmd's shutdown: removes the cache and the lock file if they are still the ones
    /// this slurmd wrote. `Ok(true)` when the cache file was removed.
    pub fn remove(self) -> Result<bool, RemoveError> {
        let same = |name: &str, id: (u64, u64)| matches!(self.dir.stat(name), Ok(Some(m)) if (m.dev, m.ino) == id);
        let lock_meta = self.lock.metadata().map_err(RemoveError::ExamineLock)?;
        let mut removed = false;
        if same(FILE_NAME, self.file) {
            removed = self.dir.unlink(FILE_NAME)?;
        }
        if same(LOCK_NAME, (lock_meta.dev(), lock_meta.ino())) {
            self.dir.unlink(LOCK_NAME)?;
        }
        Ok(removed)
    }
}

/// slurmd, at its start, as root: (re)writes the cache in `dir` with the topology that
/// `discover` finds. `plugin` is the writing plugin's [`plugin_identity`].
pub fn write<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    dir: &Path,
    plugin: &str,
    discover: impl FnOnce() -> Result<Topology, E>,
) -> Result<Written, WriteError> {
    let cache_dir = TrustedDir::open_or_create(dir, 0o755).map_err(WriteError::CacheDir)?;
    crate::test_hooks::pause("cache-dir-opened");
    // First remove the old file: if anything below fails, the steps find no cache rather
    // than one from an earlier slurmd.
    cache_dir.unlink(FILE_NAME)?;
    cache_dir.unlink(LOCK_NAME)?;
    let lock = cache_dir.create_new(LOCK_NAME, 0o600)?;
    flock(&lock, libc::LOCK_EX | libc::LOCK_NB).map_err(WriteError::Lock)?;
    let lock_meta = lock.metadata().map_err(WriteError::ExamineLock)?;

    let me = own_process().map_err(WriteError::OwnProcess)?;
    let start = Instant::now();
    let topology = discover().map_err(|e| WriteError::Discovery(e.into()))?;
    let discovery_ms = start.elapsed().as_secs_f64() * 1e3;
    let file = CacheFile {
        format: FORMAT,
        plugin: plugin.to_string(),
        boot_id: boot_id().map_err(WriteError::BootId)?,
        writer_pid: me.0,
        writer_start: me.1,
        written: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        discovery_ms,
        lock: format!("{}:{}", lock_meta.dev(), lock_meta.ino()),
        topology,
    };
    let json = serde_json::to_vec(&file).map_err(WriteError::Serialize)?;
    let tmp = format!(".{FILE_NAME}.{}.tmp", std::process::id());
    let _ = cache_dir.unlink(&tmp);
    let written = (|| -> Result<File, FileError> {
        let step = |op, source| FileError::Step { op, tmp: tmp.clone(), source };
        let mut f = cache_dir.create_new(&tmp, 0o600)?;
        // Locked while it is still 0600: no one else can have opened it, or hold a lock on it.
        ofd_write_lock(&f).map_err(|e| step("lock", e))?;
        f.write_all(&json).map_err(|e| step("write", e))?;
        // Readable by the steps once complete (fchmod: the umask does not apply).
        f.set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(|e| step("chmod", e))?;
        cache_dir.rename(&tmp, FILE_NAME)?;
        Ok(f)
    })();
    let held = match written {
        Ok(f) => f,
        Err(source) => {
            let _ = cache_dir.unlink(&tmp);
            return Err(WriteError::File { dir: dir.to_path_buf(), source });
        }
    };
    let meta = cache_dir.stat(FILE_NAME)?.ok_or(WriteError::Vanished)?;
    let path = dir.join(FILE_NAME);
    let note = format!(
        "cached this node's topology in {} ({} bytes; discovery took {discovery_ms:.1} ms): {} PUs, {} PCI functions",
        path.display(),
        json.len(),
        file.topology.all_cpus().len(),
        file.topology.pci.len()
    );
    Ok(Written { dir: cache_dir, lock, _held: held, file: (meta.dev, meta.ino), path, note })
}

/// A step (as the job's user) or `check`: the cached topology in `dir`, if it can be trusted.
/// `plugin` is the reading plugin's [`plugin_identity`]; `None` skips that one test.
pub fn read(dir: &Path, plugin: Option<&str>) -> Result<Cached, Miss> {
    let path = dir.join(FILE_NAME);
    let reject = |why: Rejection| Miss::Rejected(Rejected { path: path.clone(), why });
    let cache_dir = match TrustedDir::open(dir) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Err(Miss::Absent(Absent::Directory(dir.to_path_buf()))),
        Err(e) => return Err(reject(Rejection::Directory(e))),
    };
    let (file, meta) = match cache_dir.open_file(FILE_NAME, MAX_BYTES) {
        Ok(opened) => opened,
        Err(e) if e.is_not_found() => return Err(Miss::Absent(Absent::File(path))),
        Err(e) => return Err(reject(Rejection::File(e))),
    };
    let mut bytes = Vec::with_capacity(usize::try_from(meta.size).unwrap_or(0));
    (&file).take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|e| reject(Rejection::Read(e)))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(reject(Rejection::TooLarge));
    }
    let cached = parse(&bytes).map_err(|e| reject(e.into()))?;
    writer_alive(&cache_dir, &cached, &file).map_err(|e| reject(e.into()))?;
    if let Some(me) = plugin {
        if cached.plugin != me {
            return Err(reject(Rejection::OtherBuild { cached: cached.plugin, reader: me.to_string() }));
        }
    }
    let boot = boot_id().map_err(|e| reject(Rejection::BootId(e)))?;
    if cached.boot_id != boot {
        return Err(reject(Rejection::OldBoot { cached: cached.boot_id, now: boot }));
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

/// The contents of a cache file, from its bytes: this format, and a topology the planner
/// can read. Pure (no file, no clock), so that it can be fuzzed; whether the file may be
/// trusted, and whether its writer still runs, is [`read`]'s business.
pub fn parse(bytes: &[u8]) -> Result<CacheFile, ParseError> {
    let cached: CacheFile = serde_json::from_slice(bytes).map_err(ParseError::Json)?;
    if cached.format != FORMAT {
        return Err(ParseError::Format(cached.format));
    }
    Ok(cached)
}

/// The liveness proof (see the module's notes): the lock file named in the cache is root's,
/// mode 0600, and either a write lock is held on the cache file the bytes were read from
/// (`file`: only root can open it for writing, so only root can hold one; slurmd does for
/// as long as it runs) or the writing process still runs (a root process with the recorded
/// pid and start time). [`liveness`] decides. O(1) whatever other users do: one `fcntl` on
/// a file no one else can lock, then (only without the lock) two small reads of `/proc`.
fn writer_alive(dir: &TrustedDir, cached: &CacheFile, file: &File) -> Result<(), WriterGone> {
    let meta = dir.stat(LOCK_NAME).map_err(WriterGone::LockUnreadable)?;
    let locked = write_locked(file).map_err(WriterGone::LockProbe)?;
    let running = !locked && matches!(process_start(cached.writer_pid), Ok((start, 0)) if start == cached.writer_start);
    liveness(meta.as_ref(), &cached.lock, running, locked)
}

/// Whether the cache's writer still runs, from what the reader saw: the lock file's metadata
/// (`None`: there is none), the `dev:ino` the cache names, whether a root process with the
/// writer's recorded pid and start time runs, and whether a write lock is held on the cache
/// file ([`write_locked`]). Pure, so that it can be fuzzed (`fuzz/fuzz_targets/cache_parse.rs`).
pub fn liveness(
    lock: Option<&trusted_fs::Meta>,
    recorded: &str,
    writer_running: bool,
    write_locked: bool,
) -> Result<(), WriterGone> {
    let Some(meta) = lock else { return Err(WriterGone::NoLockFile) };
    if let Some(problem) = trusted_fs::problem(Kind::File, meta.kind, meta.uid, meta.mode) {
        return Err(WriterGone::LockUntrusted(problem));
    }
    if meta.mode & 0o077 != 0 {
        return Err(WriterGone::LockOpenToOthers(meta.mode));
    }
    let found = format!("{}:{}", meta.dev, meta.ino);
    if found != *recorded {
        return Err(WriterGone::OtherLock { recorded: recorded.to_string(), found });
    }
    if writer_running || write_locked {
        Ok(())
    } else {
        Err(WriterGone::Stopped)
    }
}

/// A write lock of this open file description over all of `file` (`F_OFD_SETLK`), which
/// lasts until the last descriptor of it is closed: it survives slurmd's daemonizing forks
/// (the child's descriptor is the same description) and a forked child closing its copy.
fn ofd_write_lock(file: &File) -> io::Result<()> {
    let mut whole = whole_file(libc::F_WRLCK);
    // SAFETY: `file` owns a valid open descriptor for the whole call and `whole` is a valid
    // `struct flock` that F_OFD_SETLK only reads.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut whole) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether another open file description holds a write lock on `file`: `F_OFD_GETLK` for a
/// read lock over all of it, which only a write lock conflicts with. A write lock needs the
/// file open for writing, which only root can do (root's, mode 0644); other users can take
/// read locks at most (and none at all while slurmd holds its lock over the whole file), so
/// they can neither fake the answer nor lengthen the kernel's walk of the file's locks.
fn write_locked(file: &File) -> io::Result<bool> {
    let mut probe = whole_file(libc::F_RDLCK);
    // SAFETY: `file` owns a valid open descriptor for the whole call and `probe` is a valid
    // `struct flock` (l_pid 0, as F_OFD_GETLK requires) that the kernel overwrites.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut probe) };
    if rc == 0 {
        Ok(i32::from(probe.l_type) == libc::F_WRLCK)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A `struct flock` of type `kind` from byte 0 to the end of the file, whatever its length.
fn whole_file(kind: libc::c_int) -> libc::flock {
    // SAFETY: `libc::flock` is plain data: all zero bytes are a valid value of it (l_start 0,
    // l_len 0 = to the end, l_pid 0).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl
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

/// This process as `/proc` names it: its pid there (`/proc/self`) and its start time (from
/// `/proc/self/stat`). Not `getpid()`: in a pid namespace whose `/proc` is the machine's (a
/// container sharing the host's /proc, `unshare --pid` without `--mount-proc`), slurmd is
/// pid 1 to itself while `/proc/1` is another process; a cache that recorded pid 1 with
/// `/proc/1`'s start time would name that other process, which outlives slurmd, and a step
/// (which reads the same `/proc`) would take a dead slurmd's cache for a live one's.
fn own_process() -> io::Result<(u32, u64)> {
    let link = std::fs::read_link("/proc/self")?;
    let pid = link.to_str().and_then(|p| p.parse().ok()).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, format!("/proc/self links to {}, not a pid", link.display()))
    })?;
    let mut text = String::new();
    File::open("/proc/self/stat")?.take(4096).read_to_string(&mut text)?;
    let start = stat_start_time(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "/proc/self/stat: no start time"))?;
    Ok((pid, start))
}

/// The start time (clock ticks after boot) and owner of process `pid`, from `/proc`.
fn process_start(pid: u32) -> io::Result<(u64, u32)> {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let owner = std::fs::metadata(&dir)?.uid();
    let mut text = String::new();
    File::open(dir.join("stat"))?.take(4096).read_to_string(&mut text)?;
    let start = stat_start_time(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("/proc/{pid}/stat: no start time")))?;
    Ok((start, owner))
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so fields are counted after the
/// last `)`: that is field 3, and field 22 is the 20th from there.
pub fn stat_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn boot_id() -> io::Result<String> {
    let mut text = String::new();
    File::open("/proc/sys/kernel/random/boot_id")?.take(128).read_to_string(&mut text)?;
    Ok(text.trim().to_string())
}

/// A plugin file's identity: device, inode, size and modification time. A step's plugin
/// accepts a cache only from the very file it was loaded from (an upgrade installs a new
/// file by rename: a new inode); `check` computes it for the plugstack.conf entry.
pub fn plugin_identity(path: &Path) -> io::Result<String> {
    let meta = std::fs::metadata(path)?;
    Ok(format!("{}:{}:{}:{}.{:09}", meta.dev(), meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::trusted_scratch;
    use std::os::unix::fs::PermissionsExt;

    fn tiny() -> Topology {
        crate::load::from_xml_file(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies/e2e-2gpu.xml")).unwrap()
    }

    #[test]
    fn start_time_is_field_22_counted_after_the_command_name() {
        let line =
            "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        assert_eq!(stat_start_time(line), Some(987654));
        assert_eq!(stat_start_time("12 (x) S 1 2"), None, "too short");
        assert_eq!(stat_start_time("no parenthesis at all"), None);
        let (me, uid) = process_start(std::process::id()).unwrap();
        assert!(me > 0);
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(uid, euid);
        // The writer names itself as /proc does: here (no pid namespace between this process
        // and its /proc) that is getpid() and the same start time.
        assert_eq!(own_process().unwrap(), (std::process::id(), me));
    }

    #[test]
    fn liveness_trusts_only_roots_private_named_locked_file() {
        use crate::trusted_fs::{Kind, Meta};
        let dev = libc::makedev(0, 0x1a);
        let good = Meta { kind: Kind::File, uid: 0, mode: 0o100600, size: 0, dev, ino: 5678 };
        let named = format!("{dev}:5678");
        assert!(matches!(liveness(Some(&good), &named, false, true), Ok(())));
        let refused = |m: Meta, recorded: &str, locked: bool| {
            liveness(Some(&m), recorded, false, locked).unwrap_err().to_string()
        };
        let none = liveness(None, &named, false, true).unwrap_err();
        assert!(matches!(none, WriterGone::NoLockFile) && none.to_string().contains("there is no topology.lock"));
        assert!(refused(Meta { uid: 1000, ..good }, &named, true).contains("owned by uid 1000"));
        assert!(refused(Meta { mode: 0o100644, ..good }, &named, true).contains("can be opened by others (mode"));
        assert!(refused(Meta { kind: Kind::Symlink, ..good }, &named, true).contains("symbolic link"));
        assert!(refused(good, &format!("{dev}:9"), true).contains("is not the one the cache names"));
        assert!(refused(good, &named, false).starts_with("no running slurmd holds it"));
        // The writer itself still running proves it without the lock, but never a file that
        // fails the other rules.
        assert!(matches!(liveness(Some(&good), &named, true, false), Ok(())));
        assert!(liveness(Some(&Meta { mode: 0o100644, ..good }), &named, true, false).is_err());
        assert!(liveness(None, &named, true, false).is_err());
    }

    /// Only a write lock of another open file description counts: a read lock (all another
    /// user could take) does not, nor the reader's own lock, and the writer's lies on the
    /// file for as long as any descriptor of it is open (a forked child's close included).
    #[test]
    fn only_another_descriptions_write_lock_proves_the_writer() {
        let dir = std::env::temp_dir().join(format!("mbd-ofd-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let writer = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&dir).unwrap();
        let reader = File::open(&dir).unwrap();
        assert!(!write_locked(&reader).unwrap());
        let mut read_lock = whole_file(libc::F_RDLCK);
        // SAFETY: a valid descriptor and `struct flock` for the call.
        assert_eq!(unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_OFD_SETLK, &mut read_lock) }, 0);
        let other = File::open(&dir).unwrap();
        assert!(!write_locked(&other).unwrap(), "a read lock is no proof");
        drop(reader);
        ofd_write_lock(&writer).unwrap();
        assert!(!write_locked(&writer).unwrap(), "its own lock is no conflict for the writer");
        assert!(write_locked(&other).unwrap());
        let copy = writer.try_clone().unwrap();
        drop(writer);
        assert!(write_locked(&other).unwrap(), "held while a descriptor of it is open");
        drop(copy);
        assert!(!write_locked(&other).unwrap());
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn the_fuzzers_seed_caches_are_this_format() {
        // Seeds the parser refuses at once would keep the fuzzer out of the topology's fields.
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/cache_parse");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                parse(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                seen += 1;
            }
        }
        assert!(seen >= 3, "{seen} seeds in {}", dir.display());
    }

    #[test]
    fn no_cache_is_absent_not_rejected() {
        assert!(matches!(read(Path::new("/nonexistent/map-by-device"), None), Err(Miss::Absent(_))));
        let Some(d) = trusted_scratch("cache-absent") else { return };
        assert!(matches!(read(&d, None), Err(Miss::Absent(_))));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn round_trip_while_the_writer_holds_its_lock() {
        let Some(d) = trusted_scratch("cache-roundtrip") else { return };
        let sub = d.join("sub");
        let written = write(&sub, "me", || Ok::<_, io::Error>(tiny())).unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        assert_eq!((mode(&written.path), mode(&sub), mode(&sub.join(LOCK_NAME))), (0o644, 0o755, 0o600));
        let cached = read(&sub, Some("me")).map_err(|e| e.to_string()).unwrap();
        assert_eq!(cached.topology, tiny());
        assert!(cached.description.contains("slurmd's cache"), "{}", cached.description);
        assert!(read(&sub, Some("other build")).unwrap_err().to_string().contains("another build"));
        // slurmd stops: both files go, and a copy left behind would not be trusted.
        std::fs::copy(&written.path, d.join("copy")).unwrap();
        assert!(written.remove().unwrap());
        assert!(!sub.join(LOCK_NAME).exists());
        std::fs::rename(d.join("copy"), sub.join(FILE_NAME)).unwrap();
        let e = read(&sub, None).unwrap_err().to_string();
        assert!(e.contains("no running slurmd holds it"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_lock_anyone_can_take_proves_nothing() {
        let Some(d) = trusted_scratch("cache-lock") else { return };
        let written = write(&d, "me", || Ok::<_, io::Error>(tiny())).unwrap();
        let lock_path = d.join(LOCK_NAME);
        // The real writer stops (its lock goes; here the writer is this test process, so the
        // file is made to name a process that has ended), and another process locks the
        // leftovers.
        let mut stale: CacheFile = serde_json::from_slice(&std::fs::read(&written.path).unwrap()).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        stale.writer_pid = child.id();
        child.wait().unwrap();
        let stale = serde_json::to_vec(&stale).unwrap();
        drop(written);
        std::fs::write(d.join(FILE_NAME), &stale).unwrap();
        // A read lock on the cache file (0644: all another user can take) proves nothing.
        let reader = File::open(d.join(FILE_NAME)).unwrap();
        let mut read_lock = whole_file(libc::F_RDLCK);
        // SAFETY: a valid descriptor and `struct flock` for the call.
        assert_eq!(unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_OFD_SETLK, &mut read_lock) }, 0);
        let e = read(&d, None).unwrap_err().to_string();
        assert!(e.contains("no running slurmd holds it"), "{e}");
        drop(reader);
        // A write lock, which needs the file open for writing (only root can): trusted.
        let other = std::fs::OpenOptions::new().write(true).open(d.join(FILE_NAME)).unwrap();
        ofd_write_lock(&other).unwrap();
        assert!(read(&d, None).is_ok());
        // topology.lock made openable by others: refused, whatever the lock.
        std::fs::set_permissions(&lock_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read(&d, None).unwrap_err().to_string();
        assert!(e.contains("can be opened by others (mode 0644)"), "{e}");
        drop(other);
        std::fs::set_permissions(&lock_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A child that another test forked (the XML loader's) while `other` was open shares its
        // lock until it exits: wait for such children, a few seconds at most.
        let stopped = || read(&d, None).is_err_and(|e| e.to_string().contains("no running slurmd holds it"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !stopped() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(stopped(), "{:?}", read(&d, None).map(|_| "trusted"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_untrusted_or_foreign_file_is_rejected() {
        let Some(d) = trusted_scratch("cache-tampered") else { return };
        let written = write(&d, "me", || Ok::<_, io::Error>(tiny())).unwrap();
        let path = d.join(FILE_NAME);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = read(&d, None).unwrap_err().to_string();
        assert!(e.contains("writable by group or others (mode 0666)"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(read(&d, None).unwrap_err().to_string().contains("owned by uid 65534"));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"{}").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read(&d, None).unwrap_err().to_string().contains("not a cache this plugin can read"));
        // A bad word is quoted escaped, on one line.
        let e = parse(br#"{"format":2,"topology":{"objects":[{"kind":"Numa\nNode"}]}}"#).unwrap_err();
        assert!(matches!(e, ParseError::Json(_)), "{e:?}");
        let e = e.to_string();
        assert!(e.contains(r"unknown variant `Numa\nNode`") && !e.contains('\n'), "{e}");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        let e = read(&d, None).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        drop(written);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
