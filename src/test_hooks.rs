//! Pauses at named points of root's file handling, for the end-to-end tests that widen a race
//! window (`tests/e2e/security.sh`). Compiled in only with the `test-hooks` feature, which no
//! package build enables: in every other build [`pause`] is an empty function.
//!
//! With the feature, `pause(point)` does something only when slurmd's own environment says
//! `MBD_TEST_PAUSE_AT=<point>` and `MBD_TEST_PAUSE_FILE=<path>`: it creates `<path>.reached`,
//! then waits (at most 60 s) until `<path>` exists.

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
