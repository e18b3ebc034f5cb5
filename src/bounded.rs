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
    // SAFETY: fork has no preconditions; the child below only runs `f`, serializes, writes
    // and calls _exit, never returning into the caller's frames.
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
        // `None`: it panicked.
        let result: Option<Result<T, E>> = catch_unwind(AssertUnwindSafe(f)).ok();
        let bytes = serde_json::to_vec(&result).unwrap_or_default();
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
        Ok(bytes) => match serde_json::from_slice::<Option<Result<T, E>>>(&bytes) {
            Ok(Some(result)) => Ok(result),
            Ok(None) => Err(BoundedError::Panicked),
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
