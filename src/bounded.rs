//! Running work that might never finish — hwloc's live discovery — in a child process with
//! a deadline, so that the caller (slurmd at its start, a step's `user_init`, the CLI) always
//! gets an answer in time.
//!
//! Why a process and not a thread: a thread stuck in a library call (an X server that never
//! answers, a GPU driver that hangs, a dead NFS mount under `/sys`) cannot be stopped, and
//! would keep whatever it holds; a child can be killed. The child runs the function, writes
//! its result as JSON into a pipe and leaves with `_exit` (no atexit handlers, no buffers of
//! the parent flushed twice); the parent reads the pipe until EOF or the deadline, then kills
//! and reaps the child.
//!
//! The child of a multi-threaded parent (slurmstepd, slurmd, a test harness) may only rely on
//! what `fork` keeps consistent: glibc makes `malloc` safe in the child, and the function run
//! there must take no lock another thread of the parent could hold (so the caller reads the
//! environment before forking, not the child).
//!
//! The child is confined before the function runs ([`confine`]): it changes to `/`, so that
//! nothing it loads is found relative to the caller's directory (a step's slurmstepd works in
//! the job's directory, where a relative entry of slurmd's `LD_LIBRARY_PATH` would find the
//! user's libraries); and where the caller can regain root (a step's slurmstepd runs with real
//! and saved uid 0 and the job's user as its effective uid), it gives root up for good: the
//! job's groups, gid and uid, saved ids included, checked before the function runs. Whatever
//! the function loads then runs as the job's user, out of the job's directory; a child that
//! cannot be confined runs nothing ([`BoundedError::Unconfined`]).

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Why a bounded run gave no result.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum BoundedError {
    #[error("it did not finish within {seconds} s (killed)")]
    TimedOut { seconds: f64 },
    #[error("it panicked")]
    Panicked,
    #[error("cannot start it in a child process: {0}")]
    Start(String),
    #[error("its child process ended without an answer ({0})")]
    NoAnswer(String),
    /// The child could not leave the caller's directory or give up root: it ran nothing.
    #[error("its child process ran nothing: {0}")]
    Unconfined(ConfineError),
}

/// Why a child could not be confined ([`confine`]). The numbers are `errno` values, worded
/// when shown.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ConfineError {
    #[error("cannot change to /: {}", os_error(*.0))]
    Chdir(i32),
    /// A call that gives up root failed (`setresuid(...)`, its errno).
    #[error("cannot give up root for the job's user ({call}: {})", os_error(*.errno))]
    Drop { call: String, errno: i32 },
    /// Root is still within reach after giving it up (what was found).
    #[error("root is still within reach after giving it up ({0})")]
    StillRoot(String),
}

fn os_error(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

/// What the child sends back through the pipe.
#[derive(serde::Serialize, serde::Deserialize)]
enum Answer<T, E> {
    Done(Result<T, E>),
    Panicked,
    Unconfined(ConfineError),
}

/// The largest answer read back (a 2,048-PU node's topology is a few MB).
const MAX_ANSWER: usize = 256 << 20;

/// Runs `f` in a forked child and returns its result, its error as the value it was (both
/// cross the pipe as JSON), or why there is none: it took longer than `timeout` (the child is
/// then killed), it panicked, it died.
pub fn run<T, E, F>(timeout: Duration, f: F) -> Result<Result<T, E>, BoundedError>
where
    T: Serialize + DeserializeOwned,
    E: Serialize + DeserializeOwned,
    F: FnOnce() -> Result<T, E>,
{
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints, which pipe2 fills on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(BoundedError::Start(format!("pipe: {}", std::io::Error::last_os_error())));
    }
    let (read_end, write_end) = (fds[0], fds[1]);
    // The caller's supplementary groups, which the child keeps when it gives up root: read
    // here, so that the child allocates nothing before it is confined.
    let groups = supplementary_groups();
    // SAFETY: fork has no preconditions; the child below only confines itself, runs `f`,
    // serializes, writes and calls _exit, never returning into the caller's frames.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        close(read_end);
        close(write_end);
        return Err(BoundedError::Start(format!("fork: {e}")));
    }
    if pid == 0 {
        close(read_end);
        close_all_but(write_end);
        // A crash in the child is the child's: it dies of the signal and the parent reports
        // it. It must not run the handlers the host process installed for its own crashes
        // (slurmstepd's, a sanitizer's), which would act as if the host had crashed.
        for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT] {
            // SAFETY: restoring a signal's default disposition in this single-threaded child
            // affects nothing but the child.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        let answer: Answer<T, E> = match confine(&groups) {
            Ok(()) => catch_unwind(AssertUnwindSafe(f)).map_or(Answer::Panicked, Answer::Done),
            Err(e) => Answer::Unconfined(e),
        };
        let bytes = serde_json::to_vec(&answer).unwrap_or_default();
        write_all(write_end, &bytes);
        // SAFETY: _exit ends the child at once; nothing of the parent runs in it after this.
        unsafe { libc::_exit(0) }
    }
    close(write_end);
    let deadline = Instant::now() + timeout;
    let answer = read_until(read_end, deadline);
    close(read_end);
    let finished = reap(pid, answer.is_ok());
    match answer {
        Ok(bytes) => match serde_json::from_slice::<Answer<T, E>>(&bytes) {
            Ok(Answer::Done(result)) => Ok(result),
            Ok(Answer::Panicked) => Err(BoundedError::Panicked),
            Ok(Answer::Unconfined(e)) => Err(BoundedError::Unconfined(e)),
            Err(_) => Err(BoundedError::NoAnswer(finished.unwrap_or_else(|| "its answer is unreadable".into()))),
        },
        Err(ReadEnd::Deadline) => Err(BoundedError::TimedOut { seconds: timeout.as_secs_f64() }),
        Err(ReadEnd::Failed(e)) => Err(BoundedError::NoAnswer(e)),
    }
}

enum ReadEnd {
    Deadline,
    Failed(String),
}

/// Reads `fd` to EOF, or stops at the deadline.
fn read_until(fd: libc::c_int, deadline: Instant) -> Result<Vec<u8>, ReadEnd> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadEnd::Deadline);
        }
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: `pfd` is one valid pollfd for the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(ReadEnd::Failed(format!("poll: {e}")));
        }
        if rc == 0 {
            continue; // the loop's check ends it at the deadline
        }
        // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes for the call.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return Ok(out),
            n if n > 0 => {
                out.extend_from_slice(&buf[..n as usize]);
                if out.len() > MAX_ANSWER {
                    return Err(ReadEnd::Failed("its answer is too large".into()));
                }
            }
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(ReadEnd::Failed(format!("read: {e}")));
                }
            }
        }
    }
}

/// Reaps the child: waits briefly when it has answered (it is about to `_exit`), otherwise
/// kills it first. Never blocks for long: a child stuck in the kernel stays a zombie rather
/// than hang the caller. Returns how it ended, when known (for messages).
fn reap(pid: libc::pid_t, answered: bool) -> Option<String> {
    if !answered {
        // SAFETY: `pid` is our own child; sending it SIGKILL has no other effect.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let until = Instant::now() + Duration::from_secs(2);
    // An answered child exits within microseconds: look again soon, then less often.
    let mut pause = Duration::from_micros(50);
    loop {
        let mut status = 0;
        // SAFETY: `status` is a writable int; WNOHANG makes waitpid return at once.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            return Some(if libc::WIFSIGNALED(status) {
                format!("killed by signal {}", libc::WTERMSIG(status))
            } else {
                format!("exit status {}", libc::WEXITSTATUS(status))
            });
        }
        // ECHILD: someone else (a SIGCHLD handler of the host process) reaped it.
        if rc < 0 || Instant::now() >= until {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

fn write_all(fd: libc::c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live buffer of `bytes.len()` bytes for the call.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// In the child: closes every descriptor above stderr but `keep` (the answer's pipe). The
/// host process's descriptors are none of the child's business, and one it kept would
/// outlive the host: slurmd's locked `topology.lock` held by a discovery child stuck in the
/// kernel after slurmd is gone, a step's sockets to slurmd. `close_range` (Linux 5.9) by
/// its system call number, so that the plugin needs no newer glibc; else the descriptors
/// listed in `/proc/self/fd`.
fn close_all_but(keep: libc::c_int) {
    let keep = libc::c_uint::try_from(keep).unwrap_or(0);
    let ranges = [(3, keep.saturating_sub(1)), (keep.saturating_add(1), libc::c_uint::MAX)];
    let mut closed = true;
    for (first, last) in ranges.into_iter().filter(|(first, last)| first <= last) {
        // SAFETY: close_range only closes descriptors of this (single-threaded) child in the
        // range given; it reads no memory of the caller.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_uint) };
        closed &= rc == 0;
    }
    if closed {
        return;
    }
    let open: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    for fd in open.into_iter().filter(|&fd| fd > 2 && libc::c_uint::try_from(fd).is_ok_and(|fd| fd != keep)) {
        close(fd);
    }
}

fn close(fd: libc::c_int) {
    // SAFETY: `fd` is a descriptor this module opened and closes exactly once.
    unsafe { libc::close(fd) };
}

/// The calling thread's supplementary groups, or the `errno` of `getgroups`.
fn supplementary_groups() -> Result<Vec<libc::gid_t>, i32> {
    for _ in 0..3 {
        // SAFETY: a size of 0 only asks for the count; the list pointer is not used.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let Ok(len) = usize::try_from(n) else { return Err(errno()) };
        let mut groups: Vec<libc::gid_t> = vec![0; len];
        // SAFETY: `groups` has room for `n` gids, which getgroups fills at most.
        let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
        match usize::try_from(got) {
            Ok(got) => {
                groups.truncate(got);
                return Ok(groups);
            }
            // EINVAL: the list grew between the two calls; ask again.
            Err(_) if errno() == libc::EINVAL => continue,
            Err(_) => return Err(errno()),
        }
    }
    Err(libc::EINVAL)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// In the child, before anything of the caller's runs: changes to `/`, and, where root can be
/// regained (real or saved uid 0 under another effective uid, as in a step's slurmstepd after
/// Slurm's `seteuid` to the job's user), gives root up for good: takes euid 0 back for the
/// moment (allowed: the real uid is 0), sets the caller's supplementary `groups`, then its
/// effective gid and uid as real, effective and saved ids; then checks that all six ids are
/// the job's, that `setresuid(0, 0, 0)` now fails, and that no capability is left. Root itself
/// (slurmd, an admin's CLI) and a process with no root to regain only change directory.
///
/// Raw system calls only (the child of a multi-threaded process, which is single-threaded:
/// glibc's wrappers would signal threads that are gone), and no allocation but an error's.
fn confine(groups: &Result<Vec<libc::gid_t>, i32>) -> Result<(), ConfineError> {
    // SAFETY: chdir only reads the NUL-terminated path.
    if unsafe { libc::chdir(c"/".as_ptr()) } != 0 {
        return Err(ConfineError::Chdir(errno()));
    }
    let (ruid, euid, suid) = uids()?;
    if euid == 0 || (ruid != 0 && suid != 0) {
        return Ok(());
    }
    // SAFETY: getegid has no preconditions and cannot fail.
    let gid = unsafe { libc::getegid() };
    let groups = groups.as_ref().map_err(|&errno| ConfineError::Drop { call: "getgroups".into(), errno })?;
    const ZERO: libc::c_long = 0;
    let unchanged = libc::c_long::from(libc::uid_t::MAX);
    let (u, g) = (libc::c_long::from(euid), libc::c_long::from(gid));
    let count = libc::c_long::try_from(groups.len()).unwrap_or(libc::c_long::MAX);
    let done = |call: &str, rc: libc::c_long| {
        let errno = errno();
        if rc == 0 {
            Ok(())
        } else {
            Err(ConfineError::Drop { call: call.into(), errno })
        }
    };
    // The four calls change only this single-threaded child's credentials.
    // SAFETY: setresuid takes ids by value.
    done("setresuid(-1, 0, -1)", unsafe { libc::syscall(libc::SYS_setresuid, unchanged, ZERO, unchanged) })?;
    // SAFETY: setgroups reads `count` gids from the live slice.
    done("setgroups", unsafe { libc::syscall(libc::SYS_setgroups, count, groups.as_ptr()) })?;
    // SAFETY: setresgid takes ids by value.
    done("setresgid", unsafe { libc::syscall(libc::SYS_setresgid, g, g, g) })?;
    // SAFETY: setresuid takes ids by value.
    done("setresuid", unsafe { libc::syscall(libc::SYS_setresuid, u, u, u) })?;
    let now = uids()?;
    if now != (euid, euid, euid) {
        return Err(ConfineError::StillRoot(format!("uids {}/{}/{}", now.0, now.1, now.2)));
    }
    let now = gids()?;
    if now != (gid, gid, gid) {
        return Err(ConfineError::StillRoot(format!("gids {}/{}/{}", now.0, now.1, now.2)));
    }
    // SAFETY: as above; expected to fail with EPERM.
    if unsafe { libc::syscall(libc::SYS_setresuid, ZERO, ZERO, ZERO) } == 0 {
        return Err(ConfineError::StillRoot("setresuid(0, 0, 0) succeeded".into()));
    }
    let (effective, permitted) = capabilities()?;
    if effective != 0 || permitted != 0 {
        return Err(ConfineError::StillRoot(format!(
            "capabilities effective {effective:#x}, permitted {permitted:#x}"
        )));
    }
    Ok(())
}

/// Real, effective and saved uids.
fn uids() -> Result<(libc::uid_t, libc::uid_t, libc::uid_t), ConfineError> {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three writable uid_t for the call.
    if unsafe { libc::syscall(libc::SYS_getresuid, &mut r as *mut libc::uid_t, &mut e as *mut _, &mut s as *mut _) }
        != 0
    {
        return Err(ConfineError::Drop { call: "getresuid".into(), errno: errno() });
    }
    Ok((r, e, s))
}

/// Real, effective and saved gids.
fn gids() -> Result<(libc::gid_t, libc::gid_t, libc::gid_t), ConfineError> {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three writable gid_t for the call.
    if unsafe { libc::syscall(libc::SYS_getresgid, &mut r as *mut libc::gid_t, &mut e as *mut _, &mut s as *mut _) }
        != 0
    {
        return Err(ConfineError::Drop { call: "getresgid".into(), errno: errno() });
    }
    Ok((r, e, s))
}

/// This thread's effective and permitted capability sets (all 64 bits).
fn capabilities() -> Result<(u64, u64), ConfineError> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header { version: VERSION_3, pid: 0 };
    let mut data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: a version-3 header and room for its two data structs.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut Header, data.as_mut_ptr()) } != 0 {
        return Err(ConfineError::Drop { call: "capget".into(), errno: errno() });
    }
    let both = |f: fn(&Data) -> u32| u64::from(f(&data[0])) | (u64::from(f(&data[1])) << 32);
    Ok((both(|d| d.effective), both(|d| d.permitted)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_come_back() {
        let got: Result<Vec<u32>, String> = run(Duration::from_secs(10), || Ok(vec![1, 2, 3])).unwrap();
        assert_eq!(got, Ok(vec![1, 2, 3]));
        let got: Result<u8, String> = run(Duration::from_secs(10), || Err("no".into())).unwrap();
        assert_eq!(got, Err("no".to_string()));
    }

    #[test]
    fn a_hang_is_cut_at_the_deadline() {
        let t0 = Instant::now();
        let e = run::<u8, String, _>(Duration::from_millis(300), || {
            std::thread::sleep(Duration::from_secs(30));
            Ok(0)
        })
        .unwrap_err();
        assert_eq!(e, BoundedError::TimedOut { seconds: 0.3 });
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(e.to_string(), "it did not finish within 0.3 s (killed)");
    }

    /// The child has nothing of its parent's open but stdin, stdout and stderr (issue 27:
    /// slurmd's locked topology.lock, held by a stuck discovery child, outlived slurmd).
    #[test]
    fn the_child_keeps_none_of_the_parents_descriptors() {
        let parents = std::fs::File::open("/proc/self/status").unwrap();
        let mine = std::os::unix::io::AsRawFd::as_raw_fd(&parents);
        let open: Result<(bool, Vec<i32>), String> = run(Duration::from_secs(10), || {
            // Before the listing opens a descriptor of its own (which may take the same number).
            // SAFETY: F_GETFD only asks whether `mine` is an open descriptor of this process.
            let kept = unsafe { libc::fcntl(mine, libc::F_GETFD) } != -1;
            let listed = std::fs::read_dir("/proc/self/fd").map_err(|e| e.to_string())?;
            Ok((
                kept,
                listed.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).filter(|&fd: &i32| fd > 2).collect(),
            ))
        })
        .unwrap();
        let (kept, open) = open.unwrap();
        // The answer's pipe and the listing's own directory, nothing else.
        assert!(!kept && open.len() <= 2, "{open:?} (the parent's file: {mine}, kept: {kept})");
        drop(parents);
    }

    #[test]
    fn the_child_works_in_the_root_directory() {
        let cwd: Result<std::path::PathBuf, String> =
            run(Duration::from_secs(10), || std::env::current_dir().map_err(|e| e.to_string())).unwrap();
        assert_eq!(cwd.unwrap(), std::path::Path::new("/"));
    }

    const STEP_PROBE: &str = "MAP_BY_DEVICE_STEP_PROBE";

    /// A step's child holds the job's ids only (issue 38): slurmstepd runs `user_init` with
    /// real and saved uid 0 and the job's user as effective uid, in the job's directory, and
    /// a library the child loaded from there regained root with `setresuid(0, 0, 0)`. Run in
    /// a fresh copy of this test binary, whose credentials the probe changes.
    #[test]
    fn a_steps_child_holds_only_the_jobs_ids_in_the_root_directory() {
        if !crate::test_support::is_root() {
            crate::test_support::skipped("needs root (the probe takes on a step's credentials)");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["bounded::tests::step_probe", "--exact", "--nocapture", "--test-threads=1"])
            .env(STEP_PROBE, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "the probe failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("STEP PROBE: ok"), "the probe did not run: {stdout}");
    }

    /// What a child found of its own credentials.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Ids {
        uids: (u32, u32, u32),
        gids: (u32, u32, u32),
        groups: Vec<u32>,
        cwd: String,
        /// `setresuid(0, 0, 0)`: 0 when it succeeded, else its errno.
        regain: i32,
    }

    fn own_ids() -> Ids {
        let (uids, gids) = (uids().unwrap(), gids().unwrap());
        let mut groups = supplementary_groups().unwrap();
        groups.sort_unstable();
        let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
        const ZERO: libc::c_long = 0;
        // SAFETY: takes ids by value; changes only this (single-threaded) child's credentials.
        let rc = unsafe { libc::syscall(libc::SYS_setresuid, ZERO, ZERO, ZERO) };
        Ids { uids, gids, groups, cwd, regain: if rc == 0 { 0 } else { errno() } }
    }

    /// The probe itself; does something only when started by the test above.
    #[test]
    fn step_probe() {
        if std::env::var_os(STEP_PROBE).is_none() {
            return;
        }
        const USER: u32 = 65534;
        const GROUP: u32 = 65534;
        const OTHER: u32 = 100;
        // The job's directory, the user's own.
        let dir = std::env::temp_dir().join(format!("mbd-step-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(USER), Some(GROUP)).unwrap();
        std::env::set_current_dir(&dir).unwrap();
        // As slurmstepd before user_init (22.05 mgr.c, `_drop_privileges`): the job's groups,
        // then its gid and uid as the effective ones only.
        // SAFETY: plain credential calls of this probe process, with a live two-gid list.
        unsafe {
            assert_eq!(libc::setgroups(2, [GROUP, OTHER].as_ptr()), 0);
            assert_eq!(libc::setegid(GROUP), 0);
            assert_eq!(libc::seteuid(USER), 0);
        }
        // Root is within reach here, as in slurmstepd.
        assert_eq!(uids().unwrap(), (0, USER, 0));
        let child: Result<Ids, String> = run(Duration::from_secs(10), || Ok(own_ids())).unwrap();
        let child = child.unwrap();
        println!("the child: {child:?}");
        assert_eq!(
            child,
            Ids {
                uids: (USER, USER, USER),
                gids: (GROUP, GROUP, GROUP),
                groups: vec![OTHER, GROUP],
                cwd: "/".into(),
                regain: libc::EPERM,
            }
        );
        // The caller keeps its own credentials and directory.
        assert_eq!(uids().unwrap(), (0, USER, 0));
        assert_eq!(std::env::current_dir().unwrap(), dir);
        // SAFETY: back to root (the saved uid allows it), to clean up.
        unsafe { assert_eq!(libc::seteuid(0), 0) };
        std::fs::remove_dir(&dir).unwrap();
        println!("STEP PROBE: ok");
    }

    /// Root itself (slurmd, an admin's CLI) keeps its ids; only its directory changes.
    #[test]
    fn root_stays_root_in_its_child() {
        if !crate::test_support::is_root() {
            crate::test_support::skipped("needs root");
            return;
        }
        let child: Result<Ids, String> = run(Duration::from_secs(10), || Ok(own_ids())).unwrap();
        let child = child.unwrap();
        assert_eq!((child.uids, child.cwd.as_str()), ((0, 0, 0), "/"), "{child:?}");
    }

    #[test]
    fn a_panic_or_a_crash_is_an_error_not_a_hang() {
        let e = run::<u8, String, _>(Duration::from_secs(10), || panic!("boom")).unwrap_err();
        assert_eq!(e, BoundedError::Panicked);
        assert_eq!(e.to_string(), "it panicked");
        let e = run::<u8, String, _>(Duration::from_secs(10), || {
            // SAFETY: ends the child process at once, as a crash would.
            unsafe { libc::_exit(3) }
        })
        .unwrap_err();
        assert!(matches!(e, BoundedError::NoAnswer(ref why) if why.contains("exit status 3")), "{e:?}");
        // A crash, whatever handler the parent had for it: the child dies of the signal.
        let e = run::<u8, String, _>(Duration::from_secs(10), || {
            // SAFETY: raises SIGSEGV in the child, as a NULL dereference in a C library would.
            unsafe { libc::raise(libc::SIGSEGV) };
            Ok(0)
        })
        .unwrap_err();
        assert!(matches!(e, BoundedError::NoAnswer(ref why) if why.contains("killed by signal 11")), "{e:?}");
    }
}
