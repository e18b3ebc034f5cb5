//! slurmd's environment, which every step's slurmstepd inherits: a relative entry of its
//! `LD_LIBRARY_PATH` (`.`, `lib`, an empty one, which the dynamic loader takes for `.`) names
//! each process's working directory, and a step's slurmstepd works in the job's directory with
//! root's real uid, where a library the job's user put there would be found by root's
//! processes (issue 38). [`problems`] is pure; [`read`] finds the running slurmd and reads its
//! environment from `/proc` (root only: slurmd is root's).

use std::path::Path;

/// What [`read`] found of one running slurmd.
#[derive(Debug)]
pub struct SlurmdEnvironment {
    pub pid: u32,
    /// Its `LD_LIBRARY_PATH` (`None`: unset), or why its environment cannot be read.
    pub library_path: Result<Option<String>, std::io::Error>,
}

/// The problems and notes slurmd's environment gives: a relative or empty entry of its
/// `LD_LIBRARY_PATH` is a problem (one per slurmd); an environment that cannot be read a note.
pub fn problems(found: &[SlurmdEnvironment], problems: &mut Vec<String>, notes: &mut Vec<String>) {
    for slurmd in found {
        match &slurmd.library_path {
            Ok(Some(value)) => {
                let relative = relative_entries(value);
                if relative.is_empty() {
                    continue;
                }
                problems.push(format!(
                    "slurmd (pid {}) runs with LD_LIBRARY_PATH={}, whose {} relative: the dynamic loader looks there \
                     from each process's working directory, and a step's slurmstepd works in the job's directory \
                     with root's real uid, so a library the job's user put there can be loaded by root; give \
                     slurmd absolute library paths only (in /etc/default/slurmd or its systemd unit), then \
                     restart slurmd",
                    slurmd.pid,
                    crate::text::quoted(value),
                    match relative.as_slice() {
                        [one] => format!("entry {one} is"),
                        many => format!("entries {} are", many.join(", ")),
                    }
                ));
            }
            Ok(None) => {}
            Err(e) => notes.push(format!(
                "cannot read the environment of slurmd (pid {}): {e}; run check as root to see whether its \
                 LD_LIBRARY_PATH holds a relative entry, which a step's root processes would resolve in the \
                 job's directory",
                slurmd.pid
            )),
        }
    }
}

/// The entries of an `LD_LIBRARY_PATH` value that the dynamic loader resolves from the
/// working directory, each quoted: relative ones, and empty ones (glibc reads an empty entry,
/// `a:` or `a::b`, as the working directory; an empty value it ignores), shown as `""`.
/// Entries are separated by `:` or `;`, as glibc's loader reads them. `$ORIGIN` (the program's
/// own directory) is not the working directory.
pub fn relative_entries(value: &str) -> Vec<String> {
    if value.is_empty() {
        return Vec::new();
    }
    value
        .split([':', ';'])
        .filter(|e| !e.starts_with('/') && !e.starts_with("$ORIGIN") && !e.starts_with("${ORIGIN}"))
        .map(crate::text::quoted)
        .collect()
}

/// Every running slurmd on this machine (root's processes named `slurmd` whose parent is not
/// one: not the children a slurmd forks for a moment), with its `LD_LIBRARY_PATH`.
pub fn read() -> Vec<SlurmdEnvironment> {
    read_under(Path::new("/proc"))
}

fn read_under(proc_root: &Path) -> Vec<SlurmdEnvironment> {
    let Ok(dir) = std::fs::read_dir(proc_root) else { return Vec::new() };
    let mut pids: Vec<u32> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    pids.sort_unstable();
    let is_slurmd = |pid: u32| {
        std::fs::read_to_string(proc_root.join(format!("{pid}/comm"))).is_ok_and(|c| c.trim_end() == "slurmd")
    };
    pids.into_iter()
        .filter(|&pid| is_slurmd(pid))
        .filter_map(|pid| {
            let status = std::fs::read_to_string(proc_root.join(format!("{pid}/status"))).ok()?;
            let field = |name: &str| {
                status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next())
            };
            let root = field("Uid:") == Some("0");
            let parent = field("PPid:").and_then(|p| p.parse().ok());
            (root && !parent.is_some_and(is_slurmd)).then_some(pid)
        })
        .map(|pid| SlurmdEnvironment {
            pid,
            library_path: std::fs::read(proc_root.join(format!("{pid}/environ"))).map(|env| library_path(&env)),
        })
        .collect()
}

/// `LD_LIBRARY_PATH` in a `/proc/<pid>/environ` (NUL-separated `NAME=value` entries; the
/// first one of the name, as `getenv` answers).
pub fn library_path(environ: &[u8]) -> Option<String> {
    environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(b"LD_LIBRARY_PATH="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slurmd(value: Option<&str>) -> SlurmdEnvironment {
        SlurmdEnvironment { pid: 42, library_path: Ok(value.map(str::to_string)) }
    }

    fn judged(found: &[SlurmdEnvironment]) -> (Vec<String>, Vec<String>) {
        let (mut p, mut n) = (Vec::new(), Vec::new());
        problems(found, &mut p, &mut n);
        (p, n)
    }

    #[test]
    fn relative_and_empty_entries_are_the_working_directory() {
        assert_eq!(relative_entries("/usr/local/lib:."), vec!["\".\""]);
        assert_eq!(relative_entries("/usr/local/lib:"), vec!["\"\""], "an empty entry is ./");
        assert_eq!(relative_entries(":/usr/lib"), vec!["\"\""]);
        assert_eq!(relative_entries("/a::/b"), vec!["\"\""]);
        assert!(relative_entries("").is_empty(), "set but empty: the loader ignores it");
        assert_eq!(relative_entries("/a;lib"), vec!["\"lib\""], "glibc's other separator");
        assert_eq!(relative_entries("lib:../x:/ok"), vec!["\"lib\"", "\"../x\""]);
        assert!(relative_entries("/usr/local/lib:/opt/cuda/lib64").is_empty());
        assert!(relative_entries("$ORIGIN/../lib:${ORIGIN}/x").is_empty(), "the program's own directory");
    }

    #[test]
    fn a_relative_library_path_is_a_problem_with_its_reason() {
        let (p, n) = judged(&[slurmd(Some("/usr/local/lib:."))]);
        assert!(n.is_empty(), "{n:?}");
        assert_eq!(p.len(), 1, "{p:?}");
        let p = &p[0];
        assert!(
            p.starts_with(
                "slurmd (pid 42) runs with LD_LIBRARY_PATH=\"/usr/local/lib:.\", whose entry \".\" is relative"
            ),
            "{p}"
        );
        assert!(p.contains("a step's slurmstepd works in the job's directory with root's real uid"), "{p}");
        assert!(p.contains("absolute library paths only") && p.contains("restart slurmd"), "{p}");
        let (p, _) = judged(&[slurmd(Some("lib::/x"))]);
        assert!(p[0].contains("whose entries \"lib\", \"\" are relative"), "{p:?}");
        // A newline in the value stays on the line.
        let (p, _) = judged(&[slurmd(Some(".\ninjected"))]);
        assert!(!p[0].contains('\n'), "{p:?}");
    }

    #[test]
    fn absolute_or_unset_is_fine_and_an_unreadable_environment_is_a_note() {
        assert_eq!(judged(&[slurmd(None), slurmd(Some("/usr/local/lib"))]), (vec![], vec![]));
        let denied = SlurmdEnvironment { pid: 7, library_path: Err(std::io::ErrorKind::PermissionDenied.into()) };
        let (p, n) = judged(&[denied]);
        assert!(p.is_empty(), "{p:?}");
        assert!(
            n[0].starts_with("cannot read the environment of slurmd (pid 7): permission denied; run check as root"),
            "{n:?}"
        );
    }

    #[test]
    fn the_variable_is_read_from_a_proc_environ() {
        assert_eq!(library_path(b"A=1\0LD_LIBRARY_PATH=/x:.\0B=2\0"), Some("/x:.".into()));
        assert_eq!(library_path(b"LD_LIBRARY_PATH=\0"), Some(String::new()));
        assert_eq!(library_path(b"XLD_LIBRARY_PATH=/x\0A=1"), None);
        assert_eq!(library_path(b"LD_LIBRARY_PATH=first\0LD_LIBRARY_PATH=second\0"), Some("first".into()));
        assert_eq!(library_path(b""), None);
    }

    /// The reader on a /proc of its own: root's slurmd, not its forked child, not a user's
    /// process named slurmd.
    #[test]
    fn the_reader_finds_roots_slurmd_and_its_variable() {
        let dir = std::env::temp_dir().join(format!("mbd-slurmd-env-{}", std::process::id()));
        let proc_entry = |pid: u32, comm: &str, uid: u32, ppid: u32, environ: &[u8]| {
            let d = dir.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(
                d.join("status"),
                format!("Name:\t{comm}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
            )
            .unwrap();
            std::fs::write(d.join("environ"), environ).unwrap();
        };
        proc_entry(1, "systemd", 0, 0, b"");
        proc_entry(100, "slurmd", 0, 1, b"LD_LIBRARY_PATH=/usr/local/lib:.\0");
        proc_entry(101, "slurmd", 0, 100, b"LD_LIBRARY_PATH=/usr/local/lib:.\0");
        proc_entry(200, "slurmd", 1000, 1, b"LD_LIBRARY_PATH=.\0");
        std::fs::create_dir_all(dir.join("self")).unwrap();
        let found = read_under(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, 100);
        assert_eq!(found[0].library_path.as_ref().unwrap().as_deref(), Some("/usr/local/lib:."));
    }
}
