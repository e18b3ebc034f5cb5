//! What a hook hands back to Slurm: [`HookError`] (a message for the user, or a quiet
//! failure) and [`guarded`], which runs a hook body so that no panic leaves it. Below lib.rs
//! and the context files (srun.rs, slurmd.rs, slurmstepd.rs), so that all of them use it and
//! none imports lib.rs.

use crate::entry;
use std::error::Error;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error a hook returns to Slurm.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// Shown to the user through `slurm_error` (lib.rs `report_error`).
    #[error("{0}")]
    Report(String),
    /// Fails the hook without a message (another task of the step reports it).
    #[error("{0}")]
    Quiet(String),
}

/// What a hook returns to the slurm-spank crate.
pub type HookResult = Result<(), Box<dyn Error>>;

/// Runs a hook body, turning a panic into a reported error so that no panic reaches the
/// slurm-spank wrapper (which would poison its locks) or Slurm.
pub fn guarded(hook: &str, body: impl FnOnce() -> Result<(), HookError>) -> HookResult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Box::new(e)),
        Err(panic) => Err(Box::new(HookError::Report(entry::internal_error(&format!("in {hook}"), panic.as_ref())))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_reported_error() {
        let err = guarded("task_init", || -> Result<(), HookError> { panic!("boom {}", 42) }).unwrap_err();
        let hook = err.downcast_ref::<HookError>().expect("a HookError");
        assert!(matches!(hook, HookError::Report(_)));
        assert_eq!(err.to_string(), "internal error in task_init: boom 42 (please report this bug)");
        let err = guarded("init", || -> Result<(), HookError> { std::panic::panic_any(7u8) }).unwrap_err();
        assert!(err.to_string().contains("non-text panic"));
    }

    #[test]
    fn errors_pass_through_and_success_is_ok() {
        assert!(guarded("init", || Ok(())).is_ok());
        let err = guarded("init", || Err(HookError::Quiet("q".into()))).unwrap_err();
        assert!(matches!(err.downcast_ref::<HookError>(), Some(HookError::Quiet(m)) if m == "q"));
    }
}
