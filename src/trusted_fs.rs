//! Paths that root (slurmd, or slurmstepd on the job's behalf) reads or writes, opened so that
//! no job user can steer where they lead.
//!
//! Why: the plugin runs as root in slurmd and in every step. A path such as `cache_dir` or
//! `topology=` that passes through a directory a user can write lets that user swap a
//! component for a symlink between a check and a use, and so make root delete, create or
//! `chmod` a file of the user's choosing. Checking a canonical path and then using the
//! original one by name (the earlier design) leaves exactly that window.
//!
//! How:
//! - every directory from `/` down is opened with `O_PATH | O_DIRECTORY | O_NOFOLLOW`
//!   relative to its parent's descriptor, and checked on that descriptor ([`problem`]): a
//!   directory owned by root and writable by nobody else. A symlink anywhere in the path,
//!   a `..` component, or any directory a user could change (a sticky `/tmp` included) is
//!   refused with the path and the fix;
//! - everything after that (open, create, rename, unlink) happens relative to the last
//!   descriptor ([`TrustedDir`]), never by name from `/` again, so a path changed after the
//!   check cannot redirect the operation;
//! - files are opened with `O_NOFOLLOW | O_NONBLOCK` and checked on the opened descriptor:
//!   a regular file, owned by root, writable by nobody else, of bounded size.
//!
//! This is an I/O edge of the engine (like `load` and `driver_ids`); the rule itself is the
//! pure [`problem`], which `check` also reports through these functions.

use std::ffi::CString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// What a path is, as `fstat` saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

impl Kind {
    fn from_mode(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// The one rule: what is wrong with an object root is about to trust, or `None`. It must be
/// of the expected kind, owned by root, and writable by neither group nor others (sticky
/// bits do not help: a user who can create entries in a directory can make a name point
/// elsewhere before root first uses it).
pub fn problem(expected: Kind, kind: Kind, uid: u32, mode: u32) -> Option<String> {
    if kind != expected {
        return Some(match (expected, kind) {
            (_, Kind::Symlink) => "is a symbolic link (root does not follow links here)".into(),
            (Kind::Dir, _) => "is not a directory".into(),
            _ => "is not a regular file".into(),
        });
    }
    if uid != 0 {
        return Some(format!("is owned by uid {uid}, not root"));
    }
    if mode & 0o022 != 0 {
        return Some(format!("is writable by group or others (mode {:04o})", mode & 0o7777));
    }
    None
}

/// Why a path could not be trusted or opened. Each message names the path and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{path} is not an absolute path without '..': give a full path")]
    NotAbsolute { path: PathBuf },
    #[error("{path} does not exist")]
    NotFound { path: PathBuf },
    #[error(
        "{what} {path} {problem}: root does not use a path that someone else can change; keep it in directories \
         owned by root and writable only by root (mode 0755), such as /run or /etc/slurm"
    )]
    Untrusted { what: &'static str, path: PathBuf, problem: String },
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is larger than {max} bytes")]
    TooLarge { path: PathBuf, max: u64 },
}

impl TrustError {
    /// Whether the path (or one of its directories) simply does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, TrustError::NotFound { .. })
    }
}

/// A directory opened from `/` down through trusted directories only; operations on names
/// inside it are relative to its descriptor.
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl fmt::Debug for TrustedDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TrustedDir({})", self.path.display())
    }
}

/// A file's identity and protection, as `fstat`/`fstatat` saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    pub uid: u32,
    pub mode: u32,
    pub size: u64,
    pub dev: u64,
    pub ino: u64,
}

impl Meta {
    fn from_stat(st: &libc::stat) -> Meta {
        Meta {
            kind: Kind::from_mode(st.st_mode),
            uid: st.st_uid,
            mode: st.st_mode & 0o7777,
            size: u64::try_from(st.st_size).unwrap_or(0),
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }

    fn of_file(file: &File) -> io::Result<Meta> {
        let m = file.metadata()?;
        Ok(Meta {
            kind: Kind::from_mode(m.mode()),
            uid: m.uid(),
            mode: m.mode() & 0o7777,
            size: m.size(),
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

fn cstring(name: &std::ffi::OsStr, path: &Path) -> Result<CString, TrustError> {
    CString::new(name.as_bytes()).map_err(|_| TrustError::NotAbsolute { path: path.to_path_buf() })
}

/// The components of an absolute path without `..` (`.` is skipped).
fn components(path: &Path) -> Result<Vec<&std::ffi::OsStr>, TrustError> {
    let bad = || TrustError::NotAbsolute { path: path.to_path_buf() };
    let mut out = Vec::new();
    let mut iter = path.components();
    if iter.next() != Some(Component::RootDir) {
        return Err(bad());
    }
    for c in iter {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

fn fstat(fd: &impl AsRawFd) -> io::Result<Meta> {
    // SAFETY: `st` is plain old data that fstat fully writes on success; `fd` is a live
    // descriptor borrowed for the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; fstat only writes into `st`.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    if rc == 0 {
        Ok(Meta::from_stat(&st))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: describes a symlink, not its target.
fn stat_at(dir: &OwnedFd, name: &CString) -> io::Result<Meta> {
    // SAFETY: `st` is plain old data that fstatat fully writes on success.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is a live descriptor and `name` NUL-terminated for the call; `st` is
    // writable; the flag makes it describe a link rather than its target.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc == 0 {
        Ok(Meta::from_stat(&st))
    } else {
        Err(io::Error::last_os_error())
    }
}

fn openat(dir: Option<&OwnedFd>, name: &CString, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `name` is a NUL-terminated string that lives for the call; `dirfd` is either
    // AT_FDCWD or a live descriptor borrowed for the call; openat returns a new descriptor
    // that nothing else owns, or -1.
    let fd = unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_CLOEXEC, libc::c_uint::from(mode)) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

const DIR_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;

impl TrustedDir {
    /// Opens the existing directory `path`, checking it and every directory above it.
    pub fn open(path: &Path) -> Result<TrustedDir, TrustError> {
        Self::walk(path, None)
    }

    /// As [`TrustedDir::open`], creating the missing directories (root's, `mode`, whatever
    /// the process's umask) below the last existing one. For slurmd, as root.
    pub fn open_or_create(path: &Path, mode: u32) -> Result<TrustedDir, TrustError> {
        Self::walk(path, Some(mode))
    }

    fn walk(path: &Path, create: Option<u32>) -> Result<TrustedDir, TrustError> {
        let parts = components(path)?;
        let root = CString::new("/").map_err(|_| TrustError::NotAbsolute { path: path.into() })?;
        let io = |op, at: &Path, source| TrustError::Io { op, path: at.to_path_buf(), source };
        let mut at = PathBuf::from("/");
        let mut fd = openat(None, &root, DIR_FLAGS, 0).map_err(|e| io("open", &at, e))?;
        Self::check_dir(&fd, &at, parts.is_empty())?;
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let name = cstring(part, path)?;
            let next = match openat(Some(&fd), &name, DIR_FLAGS, 0) {
                Ok(next) => next,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => match create {
                    Some(mode) => Self::make_dir(&fd, &name, mode, &at)?,
                    None => return Err(TrustError::NotFound { path: at }),
                },
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) => {
                    let what = if i + 1 == parts.len() { "the directory" } else { "a parent directory" };
                    let kind = stat_at(&fd, &name).map_or(Kind::Other, |m| m.kind);
                    let problem = problem(Kind::Dir, kind, 0, 0).unwrap_or_else(|| "is not a directory".into());
                    return Err(TrustError::Untrusted { what, path: at, problem });
                }
                Err(e) => return Err(io("open", &at, e)),
            };
            fd = next;
            Self::check_dir(&fd, &at, i + 1 == parts.len())?;
        }
        Ok(TrustedDir { fd, path: path.to_path_buf() })
    }

    fn check_dir(fd: &OwnedFd, at: &Path, last: bool) -> Result<(), TrustError> {
        let meta = fstat(fd).map_err(|source| TrustError::Io { op: "examine", path: at.to_path_buf(), source })?;
        match problem(Kind::Dir, meta.kind, meta.uid, meta.mode) {
            None => Ok(()),
            Some(problem) => Err(TrustError::Untrusted {
                what: if last { "the directory" } else { "a parent directory" },
                path: at.to_path_buf(),
                problem,
            }),
        }
    }

    /// `mkdirat` in a trusted parent, then the mode set on the new directory's own
    /// descriptor (mkdir's mode is reduced by the umask; users must be able to traverse it).
    fn make_dir(parent: &OwnedFd, name: &CString, mode: u32, at: &Path) -> Result<OwnedFd, TrustError> {
        let io = |op, source| TrustError::Io { op, path: at.to_path_buf(), source };
        // SAFETY: `parent` is a live descriptor and `name` a NUL-terminated string, both
        // borrowed for the call; mkdirat creates the entry or fails.
        let rc = unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o700) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(io("create", e));
            }
        }
        let dir = openat(Some(parent), name, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
            .map_err(|e| io("open", e))?;
        // SAFETY: `dir` is a live descriptor of the directory just opened; fchmod only
        // changes its mode bits.
        if unsafe { libc::fchmod(dir.as_raw_fd(), mode) } != 0 {
            return Err(io("set the mode of", io::Error::last_os_error()));
        }
        Ok(dir)
    }

    /// The path this directory was opened as (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn name(&self, name: &str) -> Result<CString, TrustError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(TrustError::NotAbsolute { path: self.path.join(name) });
        }
        CString::new(name).map_err(|_| TrustError::NotAbsolute { path: self.path.join(name) })
    }

    /// `fstatat` of `name` without following a symlink; `None` when it does not exist.
    pub fn stat(&self, name: &str) -> Result<Option<Meta>, TrustError> {
        let c = self.name(name)?;
        match stat_at(&self.fd, &c) {
            Ok(meta) => Ok(Some(meta)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(source) => Err(TrustError::Io { op: "examine", path: self.path.join(name), source }),
        }
    }

    /// Opens `name` for reading, never through a symlink, and checks it on the descriptor:
    /// a regular file, root's, writable by nobody else, at most `max` bytes.
    pub fn open_file(&self, name: &str, max: u64) -> Result<(File, Meta), TrustError> {
        let c = self.name(name)?;
        let path = self.path.join(name);
        let fd = match openat(Some(&self.fd), &c, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(TrustError::NotFound { path }),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(TrustError::Untrusted {
                    what: "the file",
                    path,
                    problem: "is a symbolic link (root does not follow links here)".into(),
                })
            }
            Err(source) => return Err(TrustError::Io { op: "open", path, source }),
        };
        let file = File::from(fd);
        let meta =
            Meta::of_file(&file).map_err(|source| TrustError::Io { op: "examine", path: path.clone(), source })?;
        if let Some(problem) = problem(Kind::File, meta.kind, meta.uid, meta.mode) {
            return Err(TrustError::Untrusted { what: "the file", path, problem });
        }
        if meta.size > max {
            return Err(TrustError::TooLarge { path, max });
        }
        Ok((file, meta))
    }

    /// Reads all of `name` (see [`TrustedDir::open_file`]).
    pub fn read(&self, name: &str, max: u64) -> Result<Vec<u8>, TrustError> {
        let (file, meta) = self.open_file(name, max)?;
        let mut bytes = Vec::with_capacity(usize::try_from(meta.size).unwrap_or(0));
        file.take(max + 1).read_to_end(&mut bytes).map_err(|source| TrustError::Io {
            op: "read",
            path: self.path.join(name),
            source,
        })?;
        if bytes.len() as u64 > max {
            return Err(TrustError::TooLarge { path: self.path.join(name), max });
        }
        Ok(bytes)
    }

    /// Creates `name` (it must not exist), opened read-write, mode `mode`, never through a
    /// symlink.
    pub fn create_new(&self, name: &str, mode: u32) -> Result<File, TrustError> {
        let c = self.name(name)?;
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
        let fd = openat(Some(&self.fd), &c, flags, mode).map_err(|source| TrustError::Io {
            op: "create",
            path: self.path.join(name),
            source,
        })?;
        Ok(File::from(fd))
    }

    /// Removes `name`; `Ok(false)` when it was not there.
    pub fn unlink(&self, name: &str) -> Result<bool, TrustError> {
        let c = self.name(name)?;
        // SAFETY: the directory descriptor is live and `c` NUL-terminated for the call.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            return Ok(false);
        }
        Err(TrustError::Io { op: "remove", path: self.path.join(name), source: e })
    }

    /// Renames `from` to `to`, both in this directory (replacing `to` atomically).
    pub fn rename(&self, from: &str, to: &str) -> Result<(), TrustError> {
        let (f, t) = (self.name(from)?, self.name(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: the directory descriptor is live and both names NUL-terminated for the call.
        if unsafe { libc::renameat(fd, f.as_ptr(), fd, t.as_ptr()) } == 0 {
            return Ok(());
        }
        Err(TrustError::Io { op: "rename", path: self.path.join(from), source: io::Error::last_os_error() })
    }
}

/// Reads the whole file `path` (at most `max` bytes) as root may trust it: every directory
/// above it and the file itself pass [`problem`].
pub fn read_file(path: &Path, max: u64) -> Result<Vec<u8>, TrustError> {
    let (dir, name) = split(path)?;
    TrustedDir::open(dir)?.read(name, max)
}

fn split(path: &Path) -> Result<(&Path, &str), TrustError> {
    let bad = || TrustError::NotAbsolute { path: path.to_path_buf() };
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(bad)?;
    let dir = path.parent().ok_or_else(bad)?;
    Ok((dir, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_rule() {
        assert_eq!(problem(Kind::Dir, Kind::Dir, 0, 0o755), None);
        assert_eq!(problem(Kind::File, Kind::File, 0, 0o644), None);
        assert_eq!(problem(Kind::File, Kind::File, 0, 0o600), None);
        assert!(problem(Kind::Dir, Kind::Dir, 0, 0o1777).unwrap().contains("mode 1777"));
        assert!(problem(Kind::Dir, Kind::Dir, 0, 0o775).unwrap().contains("group or others"));
        assert!(problem(Kind::File, Kind::File, 1000, 0o644).unwrap().contains("uid 1000"));
        assert!(problem(Kind::File, Kind::Symlink, 0, 0o777).unwrap().contains("symbolic link"));
        assert!(problem(Kind::Dir, Kind::File, 0, 0o755).unwrap().contains("not a directory"));
        assert!(problem(Kind::File, Kind::Other, 0, 0o644).unwrap().contains("not a regular file"));
    }

    #[test]
    fn relative_and_dotdot_paths_are_refused() {
        for p in ["etc/slurm", "/etc/../tmp", ""] {
            assert!(matches!(TrustedDir::open(Path::new(p)), Err(TrustError::NotAbsolute { .. })), "{p}");
        }
    }

    #[test]
    fn a_sticky_world_writable_parent_is_refused() {
        // /tmp is root's but mode 1777 on every Debian system.
        let meta = std::fs::metadata("/tmp").unwrap();
        if meta.uid() != 0 || meta.mode() & 0o002 == 0 {
            crate::test_support::skipped("/tmp is not a root-owned world-writable directory here");
            return;
        }
        let e = TrustedDir::open(Path::new("/tmp")).unwrap_err().to_string();
        assert!(e.contains("the directory /tmp is writable by group or others (mode 1777)"), "{e}");
        assert!(!e.contains('\n'));
        let e = read_file(Path::new("/tmp/x/topology.xml"), 10).unwrap_err().to_string();
        assert!(e.contains("a parent directory /tmp is writable"), "{e}");
    }

    #[test]
    fn root_owned_paths_are_read_and_limits_hold() {
        if !(crate::test_support::is_root() && Path::new("/etc/hostname").exists()) {
            crate::test_support::skipped("needs root and /etc/hostname");
            return;
        }
        let dir = TrustedDir::open(Path::new("/etc")).unwrap();
        assert!(!dir.read("hostname", 1 << 20).unwrap().is_empty());
        assert!(matches!(dir.read("hostname", 0), Err(TrustError::TooLarge { .. })));
        assert!(matches!(dir.open_file("no-such-file-here", 10), Err(TrustError::NotFound { .. })));
        assert!(matches!(TrustedDir::open(Path::new("/etc/no-such-dir")), Err(TrustError::NotFound { .. })));
        assert!(dir.stat("no-such-file-here").unwrap().is_none());
    }

    #[test]
    fn symlinks_and_files_in_the_path_are_refused() {
        let Some(base) = crate::test_support::trusted_scratch("trusted-fs") else { return };
        let real = base.join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("f"), b"x").unwrap();
        std::fs::set_permissions(real.join("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&real, base.join("link")).unwrap();
        std::os::unix::fs::symlink(real.join("f"), real.join("flink")).unwrap();
        let e = TrustedDir::open(&base.join("link")).unwrap_err().to_string();
        assert!(e.contains("link is a symbolic link"), "{e}");
        let e = read_file(&base.join("link/f"), 10).unwrap_err().to_string();
        assert!(e.contains("the directory") && e.contains("link is a symbolic link"), "{e}");
        let e = read_file(&base.join("link/sub/f"), 10).unwrap_err().to_string();
        assert!(e.contains("a parent directory") && e.contains("link is a symbolic link"), "{e}");
        let dir = TrustedDir::open(&real).unwrap();
        assert_eq!(dir.read("f", 10).unwrap(), b"x");
        let e = dir.read("flink", 10).unwrap_err().to_string();
        assert!(e.contains("the file") && e.contains("symbolic link"), "{e}");
        assert!(matches!(TrustedDir::open(&real.join("f")), Err(TrustError::Untrusted { .. })));
        std::fs::set_permissions(real.join("f"), std::fs::Permissions::from_mode(0o664)).unwrap();
        assert!(dir.read("f", 10).unwrap_err().to_string().contains("mode 0664"));
        // Created directories get their mode whatever the umask, and operations stay in the
        // directory that was opened even if its path is replaced afterwards.
        let made = TrustedDir::open_or_create(&base.join("a/b"), 0o755).unwrap();
        assert_eq!(std::fs::metadata(base.join("a/b")).unwrap().mode() & 0o7777, 0o755);
        std::fs::rename(base.join("a"), base.join("moved")).unwrap();
        std::os::unix::fs::symlink(&real, base.join("a")).unwrap();
        drop(made.create_new("new", 0o600).unwrap());
        assert!(base.join("moved/b/new").exists() && !real.join("new").exists());
        assert!(made.unlink("new").unwrap() && !made.unlink("new").unwrap());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
