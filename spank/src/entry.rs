//! What every entry from Slurm into the plugin shares (the exported hooks and the option
//! callback): the raw `spank_t` of the hook being run, for the calls slurm-spank does not
//! wrap (`spank_option_register`, option.rs), the panic hook that keeps a panic caught
//! inside the plugin quiet, the error and log lines ([`admin_log`], [`user_error`]) and the
//! test builds' forced panics ([`test_panic`]). Below lib.rs and option.rs, so that both
//! import it and neither imports the other.
//!
//! Why a panic hook: Rust's default one prints "thread panicked at ..." and, with the job's
//! `RUST_BACKTRACE`, a backtrace on srun's or the task's stderr, before `catch_unwind` turns
//! the panic into the plugin's one-line error. While the plugin runs (an [`Entry`] is alive on
//! the thread) the hook only notes where the panic happened, for [`panic_report`]; elsewhere
//! (another Rust library in the same process) it defers to the hook that was there before.

use slurm_spank::{spank_log, spank_sys, LogLevel};
use std::cell::{Cell, RefCell};
use std::sync::Once;

thread_local! {
    /// The handle of the hook Slurm is running on this thread (null outside hooks).
    static HANDLE: Cell<spank_sys::spank_t> = const { Cell::new(std::ptr::null_mut()) };
    /// Entries into the plugin alive on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Where the last panic inside the plugin happened on this thread.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The plugin is running on this thread until this is dropped: a hook (with Slurm's handle)
/// or the option callback (without one).
pub struct Entry {
    previous: spank_sys::spank_t,
}

impl Entry {
    pub fn enter(spank: spank_sys::spank_t) -> Entry {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if DEPTH.with(Cell::get) > 0 {
                    let at = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
                    PANIC_AT.with(|p| *p.borrow_mut() = at);
                } else {
                    previous(info);
                }
            }));
        });
        DEPTH.with(|d| d.set(d.get() + 1));
        let previous = HANDLE.with(|h| h.replace(spank));
        Entry { previous }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        HANDLE.with(|h| h.set(self.previous));
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// The handle of the hook being run on this thread, or null.
pub fn handle() -> spank_sys::spank_t {
    HANDLE.with(Cell::get)
}

/// A caught panic as text: its message and where it happened.
pub fn panic_report(payload: &(dyn std::any::Any + Send)) -> String {
    let text = map_by_device::panics::text(payload);
    match PANIC_AT.with(|p| p.borrow_mut().take()) {
        Some(at) => format!("{text} at {at}"),
        None => text,
    }
}

/// The one-line error that replaces a panic caught at `place` (`in task_init`):
/// [`map_by_device::panics::internal_error`] with the [`panic_report`].
pub fn internal_error(place: &str, payload: &(dyn std::any::Any + Send)) -> String {
    map_by_device::panics::internal_error(place, &panic_report(payload))
}

/// Logs for the administrator: slurmd.log from slurmstepd/slurmd (never the user's terminal).
/// Every line goes through `text::log_line`: one printable line of bounded length, whatever
/// of the job's (its spec, its environment) the message quotes.
pub fn admin_log(level: LogLevel, message: &str) {
    spank_log(level, &map_by_device::text::log_line(&format!("map-by-device: {message}")));
}

/// A line for the job's terminal (`slurm_spank_log`: the task's stderr, unprefixed): the plan's
/// warnings and the `verbose` lines, through `text::log_line` as [`admin_log`]'s.
pub fn user_log(message: &str) {
    slurm_spank::slurm_spank_log(&map_by_device::text::log_line(message));
}

/// An error line: on the terminal in srun/sbatch/salloc, in slurmd.log elsewhere.
pub fn user_error(message: &str) {
    admin_log(LogLevel::Error, message);
}

/// Test builds only (`--features test-hooks`): panics at `hook` when the test asked for it
/// (see `map_by_device::test_hooks::panic_if_asked`), to prove the panic never leaves the
/// plugin. Every other build compiles this to nothing.
pub fn test_panic(hook: &str) {
    #[cfg(feature = "test-hooks")]
    {
        // SAFETY: spank_context only reads Slurm's global plugin stack; it has no arguments.
        let context = match unsafe { slurm_spank::spank_sys::spank_context() } {
            slurm_spank::spank_sys::spank_context_S_CTX_LOCAL => "local",
            slurm_spank::spank_sys::spank_context_S_CTX_REMOTE => "remote",
            slurm_spank::spank_sys::spank_context_S_CTX_ALLOCATOR => "allocator",
            slurm_spank::spank_sys::spank_context_S_CTX_SLURMD => "slurmd",
            slurm_spank::spank_sys::spank_context_S_CTX_JOB_SCRIPT => "job_script",
            _ => "unknown",
        };
        map_by_device::test_hooks::panic_if_asked(hook, context);
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = hook;
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_is_quiet_and_located() {
        let entry = Entry::enter(std::ptr::null_mut());
        let payload = std::panic::catch_unwind(|| panic!("boom")).unwrap_err();
        let report = panic_report(payload.as_ref());
        drop(entry);
        assert!(report.starts_with("boom at spank/src/entry.rs:"), "{report}");
        assert_eq!(DEPTH.with(Cell::get), 0);
    }
}
