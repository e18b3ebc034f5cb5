//! The CPUs a process may run on, and changing them: `sched_getaffinity`/`sched_setaffinity`
//! on the calling thread, and the cpuset cgroup the calling process lives in.
//!
//! Used in slurmstepd (`user_init`: which CPUs does Slurm let this step use?), in each task
//! (`task_init`: where did Slurm bind me, and bind me where the plan says), and by
//! `map-by-device exec` (a rank another launcher started binds itself the same way).

use crate::cpuset::{CpuSet, MAX_CPU};
use std::io;
use std::path::{Path, PathBuf};

/// The calling thread's CPU affinity (`sched_getaffinity(0)`), whatever the machine's size.
#[doc(alias = "sched_getaffinity")]
pub fn current() -> io::Result<CpuSet> {
    // Start at 1024 CPUs (glibc's cpu_set_t) and grow while the kernel says the buffer is
    // too small (EINVAL), up to the engine's CPU number limit.
    let mut words = 16usize;
    loop {
        let mut buf = vec![0u64; words];
        let bytes = words * std::mem::size_of::<u64>();
        // SAFETY:
        // - `buf` is a live, writable buffer of exactly `bytes` bytes for the whole call;
        // - the kernel writes at most `bytes` bytes and returns how many it wrote;
        // - pid 0 means the calling thread, so no other process is involved.
        let rc = unsafe { libc::syscall(libc::SYS_sched_getaffinity, 0, bytes, buf.as_mut_ptr()) };
        if rc >= 0 {
            return Ok(from_words(&buf));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINVAL) && (words * 64) < MAX_CPU as usize {
            words *= 2;
            continue;
        }
        return Err(err);
    }
}

/// Binds the calling thread (in a task: the task, before exec) to `cpus`.
#[doc(alias = "sched_setaffinity")]
pub fn set_current(cpus: &CpuSet) -> io::Result<()> {
    let buf = to_words(cpus);
    if buf.iter().all(|w| *w == 0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty CPU set"));
    }
    let bytes = buf.len() * std::mem::size_of::<u64>();
    // SAFETY:
    // - `buf` is a live buffer of exactly `bytes` bytes that the kernel only reads;
    // - pid 0 means the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setaffinity, 0, bytes, buf.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn from_words(words: &[u64]) -> CpuSet {
    let mut set = CpuSet::new();
    for (i, &w) in words.iter().enumerate() {
        for b in 0..64u32 {
            if w & (1u64 << b) != 0 {
                set.insert(i as u32 * 64 + b);
            }
        }
    }
    set
}

fn to_words(cpus: &CpuSet) -> Vec<u64> {
    let last = cpus.iter().last().unwrap_or(0);
    // Whole kernel words (unsigned long), at least 1024 bits like glibc's cpu_set_t.
    let mut words = vec![0u64; ((last as usize / 64) + 1).max(16)];
    for cpu in cpus.iter() {
        words[cpu as usize / 64] |= 1u64 << (cpu % 64);
    }
    words
}

/// The cpuset cgroup of the calling process and the CPUs it allows: v1 (`cpuset`
/// controller) or v2 (unified, `cpuset.cpus.effective`). `None` when the process is in no
/// cpuset cgroup or the files cannot be read.
///
/// Called in slurmstepd (`user_init`). Under Slurm's cgroup/v1, slurmstepd sits in the step's
/// own cpuset (`.../job_<id>/step_<id>`). Under cgroup/v2 it sits in `.../step_<id>/slurm`,
/// which only the job's cpuset limits, and the step's CPUs are those of the sibling
/// `.../step_<id>/user`, where the tasks go (Slurm's `cgroup_v2.c`): that one is read.
pub fn cgroup_cpus() -> Option<(PathBuf, CpuSet)> {
    use std::io::BufRead;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    // Read a line at a time and stop at the cgroup mount: the kernel writes mountinfo as it
    // is read, and the whole of it (every mount of the node) costs more than the rest of a
    // step's planning from the cache.
    let mountinfo = std::io::BufReader::with_capacity(1024, std::fs::File::open("/proc/self/mountinfo").ok()?);
    cgroup_cpus_from(&cgroups, mountinfo.lines().map_while(Result::ok), |p| std::fs::read_to_string(p).ok())
}

/// [`cgroup_cpus`] on given file contents (testable): `mountinfo` is its lines, read only up
/// to the mount found.
fn cgroup_cpus_from<L: AsRef<str>>(
    cgroups: &str,
    mountinfo: impl IntoIterator<Item = L>,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<(PathBuf, CpuSet)> {
    // /proc/self/cgroup lines: "ID:CONTROLLERS:PATH"; v1 cpuset has "cpuset" among the
    // controllers, v2 has ID 0 and no controllers.
    let mut v1 = None;
    let mut v2 = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if controllers.split(',').any(|c| c == "cpuset") {
            v1 = Some(path.to_string());
        } else if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    // mountinfo fields: ... 4:root 5:mountpoint ... " - " fstype source superopts.
    let mount = |want_v1: bool| -> Option<(String, String)> {
        mountinfo.into_iter().find_map(|line| {
            let line = line.as_ref();
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let fstype = *right.first()?;
            let opts = right.get(2).copied().unwrap_or("");
            let ok = if want_v1 {
                fstype == "cgroup" && opts.split(',').any(|o| o == "cpuset")
            } else {
                fstype == "cgroup2"
            };
            ok.then(|| Some((fields.get(3)?.to_string(), fields.get(4)?.to_string()))).flatten()
        })
    };
    let (path, (root, mountpoint), files): (String, (String, String), &[&str]) = if let Some(p) = v1 {
        (p, mount(true)?, &["cpuset.effective_cpus", "cpuset.cpus"])
    } else {
        let p = v2?;
        (v2_step_user(&p).unwrap_or(p), mount(false)?, &["cpuset.cpus.effective"])
    };
    // The cgroup path is relative to the hierarchy's root; the mount shows `root` of it.
    let rel = path.strip_prefix(root.as_str()).unwrap_or(&path).trim_start_matches('/');
    let dir = Path::new(&unescape_mount(&mountpoint)).join(rel);
    for file in files {
        if let Some(text) = read(&dir.join(file)) {
            if let Ok(set) = CpuSet::parse_list(text.trim()) {
                if !set.is_empty() {
                    return Some((dir, set));
                }
            }
        }
    }
    None
}

/// Slurm's cgroup/v2 layout: slurmstepd in `<...>/step_<id>/slurm`, the tasks (and the
/// step's cpuset) in `<...>/step_<id>/user`.
fn v2_step_user(path: &str) -> Option<String> {
    let (parent, last) = path.trim_end_matches('/').rsplit_once('/')?;
    let step = parent.rsplit('/').next()?;
    (last == "slurm" && step.starts_with("step_")).then(|| format!("{parent}/user"))
}

/// mountinfo escapes blanks and backslashes in paths as octal (`\040`).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0').wrapping_mul(64).wrapping_add((d[1] - b'0') * 8 + (d[2] - b'0')));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
33 30 0:29 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 30 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_cpuset_of_a_slurm_step() {
        let cg = "9:cpuset:/slurm_node1/uid_0/job_7/step_0\n0::/\n";
        let got = cgroup_cpus_from(cg, MOUNTINFO_V1.lines(), |p| {
            (p == Path::new("/sys/fs/cgroup/cpuset/slurm_node1/uid_0/job_7/step_0/cpuset.cpus")).then(|| "1\n".into())
        });
        let (dir, cpus) = got.unwrap();
        assert_eq!(dir, Path::new("/sys/fs/cgroup/cpuset/slurm_node1/uid_0/job_7/step_0"));
        assert_eq!(cpus.to_list(), "1");
    }

    #[test]
    fn v2_unified() {
        let mi = "40 1 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let got = cgroup_cpus_from("0::/system.slice/slurmstepd.scope/job_3/step_0\n", mi.lines(), |p| {
            p.ends_with("job_3/step_0/cpuset.cpus.effective").then(|| "0-3\n".into())
        });
        assert_eq!(got.unwrap().1.to_list(), "0-3");
    }

    #[test]
    fn v2_slurmstepd_reads_the_steps_user_cgroup() {
        let mi = "40 1 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let cg = "0::/system.slice/node1_slurmstepd.scope/job_3/step_0/slurm\n";
        let got = cgroup_cpus_from(cg, mi.lines(), |p| {
            if p == Path::new(
                "/sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_3/step_0/user/cpuset.cpus.effective",
            ) {
                Some("2-3\n".into())
            } else {
                // slurmstepd's own cgroup: the job's CPUs, not the step's.
                Some("0-7\n".into())
            }
        });
        let (dir, cpus) = got.unwrap();
        assert!(dir.ends_with("step_0/user"), "{}", dir.display());
        assert_eq!(cpus.to_list(), "2-3");
        assert_eq!(v2_step_user("/a/job_1/step_batch/slurm").as_deref(), Some("/a/job_1/step_batch/user"));
        assert_eq!(v2_step_user("/a/job_1/slurm"), None);
        assert_eq!(v2_step_user("/user.slice/x"), None);
    }

    #[test]
    fn no_cpuset_controller_is_none() {
        assert!(cgroup_cpus_from("5:memory:/x\n", MOUNTINFO_V1.lines(), |_| Some("0".into())).is_none());
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount("/a\\040b/c"), "/a b/c");
        assert_eq!(unescape_mount("/plain"), "/plain");
    }

    #[test]
    fn affinity_round_trip() {
        let now = current().unwrap();
        assert!(!now.is_empty());
        set_current(&now).unwrap();
        assert_eq!(current().unwrap(), now);
        assert_eq!(from_words(&to_words(&"0,63,64,1000".parse().unwrap())).to_list(), "0,63-64,1000");
        assert!(set_current(&CpuSet::new()).is_err());
    }
}
