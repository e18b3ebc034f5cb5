//! Test-only hooks for the end-to-end tests: pauses at named points of root's file handling,
//! to widen a race window (the "security:" cases of `tests/e2e/run.sh`), and forced panics in
//! the plugin's hooks and option callback (`tests/e2e/hardening.sh`). Compiled in only with
//! the `test-hooks` feature, which no package build enables: in every other build [`pause`]
//! and [`panic_if_asked`] are empty functions.
//!
//! With the feature, `pause(point)` does something only when slurmd's own environment says
//! `MBD_TEST_PAUSE_AT=<point>` and `MBD_TEST_PAUSE_FILE=<path>`: it creates `<path>.reached`,
//! then waits (at most 60 s) until `<path>` exists. Points: `cache-dir-opened` (slurmd, after
//! it opened `cache_dir`) and `live-discovery` (inside live discovery's child process, before
//! hwloc runs: a discovery that hangs, to prove the deadline of `discovery_timeout`).
//!
//! `panic_if_asked(hook, context)` panics when the process environment names a file in
//! `MBD_TEST_PANIC_FILE` and a line of that file is `<hook>` or `<hook>@<context>` (`init`,
//! `init_post_opt`, `user_init`, `task_init`, `slurmd_exit`, `option`; contexts `local`,
//! `remote`, `allocator`, `slurmd`). slurmd and the steps it starts read slurmd's own
//! environment, srun its own: the test changes the file between cases, not the daemons.

/// Waits at `point` when the test asked for it (see the module docs).
pub fn pause(point: &str) {
    if let Some(p) = pause_planned(point) {
        p.wait();
    }
}

/// A pause asked for at one point, read from the environment ahead of time: the child of a
/// multi-threaded process (live discovery's, [`crate::bounded`]) must not read the
/// environment, so the parent reads it and the child waits.
pub struct Pause {
    #[cfg(feature = "test-hooks")]
    point: String,
    #[cfg(feature = "test-hooks")]
    go: std::path::PathBuf,
}

/// The pause the test asked for at `point`, if any.
#[cfg(feature = "test-hooks")]
pub fn pause_planned(point: &str) -> Option<Pause> {
    if std::env::var("MBD_TEST_PAUSE_AT").ok().as_deref() != Some(point) {
        return None;
    }
    let go = std::env::var_os("MBD_TEST_PAUSE_FILE").map(std::path::PathBuf::from)?;
    Some(Pause { point: point.to_string(), go })
}

/// Never a pause: this build has no test hooks.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn pause_planned(_point: &str) -> Option<Pause> {
    None
}

impl Pause {
    /// Creates `<path>.reached`, then waits (at most 60 s) until `<path>` exists.
    #[cfg(feature = "test-hooks")]
    pub fn wait(self) {
        let mut reached = self.go.clone().into_os_string();
        reached.push(".reached");
        let _ = std::fs::write(&reached, &self.point);
        for _ in 0..6000 {
            if self.go.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Does nothing: this build has no test hooks.
    #[cfg(not(feature = "test-hooks"))]
    #[inline(always)]
    pub fn wait(self) {}
}

/// Panics in `hook` (run in SPANK context `context`) when the test asked for it (see the
/// module docs).
#[cfg(feature = "test-hooks")]
pub fn panic_if_asked(hook: &str, context: &str) {
    let Some(file) = std::env::var_os("MBD_TEST_PANIC_FILE") else { return };
    let Ok(asked) = std::fs::read_to_string(file) else { return };
    let qualified = format!("{hook}@{context}");
    if asked.lines().map(str::trim).any(|l| l == hook || l == qualified) {
        panic!("test-hooks: forced panic in {hook} ({context})");
    }
}

/// Does nothing: this build has no test hooks.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn panic_if_asked(_hook: &str, _context: &str) {}
