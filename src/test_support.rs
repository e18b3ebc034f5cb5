//! Helpers for the engine's own unit tests (compiled only for `cargo test`).

use std::io::Write as _;
use std::path::PathBuf;

// The integration tests' assertions, the same file (one place for each).
#[path = "../tests/common/assert.rs"]
mod assert;
pub use assert::contains_all;

/// Whether the tests run as root (some checks need root-owned files).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh directory that [`crate::trusted_fs`] trusts (root's, under directories only root
/// can write), below the crate's `target/`; `None`, with a line saying so, when the tests do
/// not run as root or the checkout is not in such a place.
pub fn trusted_scratch(name: &str) -> Option<PathBuf> {
    if !is_root() {
        skipped("needs root (the directories must be root's)");
        return None;
    }
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/trusted-scratch");
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = crate::trusted_fs::TrustedDir::open_or_create(&dir, 0o755) {
        skipped(&format!("the checkout is not under root-only directories ({e})"));
        return None;
    }
    Some(dir)
}

/// Prints `skipped: TEXT` straight to stderr, past cargo's output capture (a `println!` is
/// captured and a test that returns early passes): scripts/test-all.sh counts these lines.
pub fn skipped(text: &str) {
    let _ = std::io::stderr().write_all(format!("skipped: {text}\n").as_bytes());
}
