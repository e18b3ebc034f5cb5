//! Assertions shared by the integration tests (`tests/common`) and the engine's unit tests
//! (`src/test_support.rs` includes this file): one place for "the output says each of these".

/// Asserts that `out` contains every one of `needles`, naming the first one missing and
/// showing the whole output.
pub fn contains_all<S: AsRef<str>>(out: &str, needles: &[S]) {
    for needle in needles {
        let needle = needle.as_ref();
        assert!(out.contains(needle), "{needle:?} not in:\n{out}");
    }
}
