//! What the integration tests share: where the project's fixtures are, and where the
//! optional reference data is.
//!
//! The real lstopo exports in `../shared/topologies` (next to the repository on the
//! project's own machines) are reference data, not part of the project: a user's clone does
//! not have them. Tests that read them run where the directory exists, and otherwise say
//! plainly that they skipped, on a line of their own that cargo's output capture does not
//! hide (`skipped: ...`; scripts/test-all.sh counts those lines).

#![allow(dead_code)] // each test crate uses its own part of this module

use std::io::Write as _;
use std::path::PathBuf;

mod assert;
#[allow(unused_imports)] // each test crate uses its own part of this module
pub use assert::contains_all;

/// A fixture of the project (`topologies/NAME`).
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies").join(name)
}

/// The reference exports' directory, if this checkout has it next to it.
pub fn reference_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/topologies");
    dir.is_dir().then_some(dir)
}

/// The reference export NAME, or `None` after printing that `what` was skipped without it.
pub fn reference(name: &str, what: &str) -> Option<PathBuf> {
    match reference_dir() {
        Some(dir) => Some(dir.join(name)),
        None => {
            skipped(what);
            None
        }
    }
}

/// Prints `skipped: WHAT (...)` straight to stderr: a test that returns early passes, so
/// this line is the only trace of the skip, and cargo's capture would hide a `println!`.
pub fn skipped(what: &str) {
    let line =
        format!("skipped: {what} (the real lstopo exports in ../shared/topologies are not next to this checkout)\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Prints `skipped: TEXT` straight to stderr, past cargo's output capture (see [`skipped`]).
pub fn skip_line(text: &str) {
    let _ = std::io::stderr().write_all(format!("skipped: {text}\n").as_bytes());
}
