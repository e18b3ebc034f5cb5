//! Test-only hooks for the end-to-end tests: pauses at named points of root's file handling,
//! to widen a race window (the "security:" cases of `tests/e2e/run.sh`), and forced panics in
//! the plugin's hooks and option callback (`tests/e2e/hardening.sh`). Compiled in only with
//! the `test-hooks` feature, which no package build enables: in every other build [`pause`]
//! and [`panic_if_asked`] are empty functions.
//!
//! With the feature, `pause(point)` does something only when slurmd's own environment says
//! `MBD_TEST_PAUSE_AT=<point>` and `MBD_TEST_PAUSE_FILE=<path>`: it creates `<path>.reached`,
//! then waits (at most 60 s) until `<path>` exists.
//!
//! `panic_if_asked(hook, context)` panics when the process environment names a file in
//! `MBD_TEST_PANIC_FILE` and a line of that file is `<hook>` or `<hook>@<context>` (`init`,
//! `init_post_opt`, `user_init`, `task_init`, `slurmd_exit`, `option`; contexts `local`,
//! `remote`, `allocator`, `slurmd`). slurmd and the steps it starts read slurmd's own
//! environment, srun its own: the test changes the file between cases, not the daemons.

/// Waits at `point` when the test asked for it (see the module docs).
#[cfg(feature = "test-hooks")]
pub fn pause(point: &str) {
    if std::env::var("MBD_TEST_PAUSE_AT").ok().as_deref() != Some(point) {
        return;
    }
    let Some(go) = std::env::var_os("MBD_TEST_PAUSE_FILE").map(std::path::PathBuf::from) else { return };
    let mut reached = go.clone().into_os_string();
    reached.push(".reached");
    let _ = std::fs::write(&reached, point);
    for _ in 0..6000 {
        if go.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Does nothing: this build has no test hooks.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn pause(_point: &str) {}

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
