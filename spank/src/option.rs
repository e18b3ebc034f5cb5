//! `--map-by-device=SPEC`: the option's registration and its callback, which are the plugin's
//! own rather than slurm-spank's.
//!
//! Why: Slurm calls an option's callback directly (srun, sbatch and salloc for the command
//! line, `#SBATCH` and the environment form; slurmstepd for the options srun passed on), so
//! the callback is an FFI entry like the hooks. slurm-spank 0.4.1's `SpankHandle::register_option`
//! registers the crate's own `extern "C" fn spank_option_callback`, which runs
//! `OPTION_CACHE.try_lock().expect(..)` with no `catch_unwind`: a panic there (a poisoned
//! or held lock) cannot unwind out of an `extern "C"` function and aborts the process. That
//! callback cannot be wrapped from outside (the abort happens inside it), so this module
//! registers the option with `spank_option_register` itself, with a callback that runs under
//! `catch_unwind` and keeps the value in this module's own store (read with [`value`]).
//! A panic there becomes an error return (-1, with its message through `slurm_error`):
//! Slurm then refuses the option (srun exits 1 before anything is allocated).
//!
//! The raw `spank_t` that registration needs is the one Slurm passed to the hook being run
//! (`entry::handle`, set by the exported hooks in lib.rs for the duration of each call).
//!
//! Here too: the option's name and `--help` text, the job's value as text ([`user_spec`]), and
//! the forgetting of the value after a heterogeneous component's `init_post_opt`
//! ([`forget_after_hook`], [`hook_done`]).

use map_by_device::text;
use slurm_spank::spank_sys;
use std::ffi::{CStr, CString, OsString};
use std::os::raw::{c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The option's name, as users type it (`--map-by-device=SPEC`).
pub const OPTION: &str = "map-by-device";

/// The option's one-line `--help` text.
pub const USAGE: &str = "Give each task its own device and the CPUs near it. SPEC is gpu, network, block, \
a device name or none, then :qualifiers (interleave shared ndev=N|auto compact ppr=N pe=N hwtcpus bind=LEVEL overload env=all|none omp closest adapters verbose)";

/// Set by srun's/sbatch's/salloc's `init_post_opt`: forget the option's value once the hook
/// returns, so that the next component of a heterogeneous job shows its own (het.rs).
static FORGET: AtomicBool = AtomicBool::new(false);

/// The value Slurm gave the option in this process (the last one, as Slurm's own options).
static VALUE: Mutex<Option<OsString>> = Mutex::new(None);

/// Why the callback failed in this process, if it did. srun and sbatch refuse the option on
/// the -1, but slurmstepd goes on as if the option had not been given: `user_init` reads this
/// and fails the step instead of running it unmapped.
static FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// The option's value, if Slurm gave it one in this process.
pub fn value() -> Option<OsString> {
    VALUE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// Forgets the value (srun/sbatch/salloc, after a heterogeneous component's `init_post_opt`:
/// the next component shows its own, see het.rs).
pub fn forget() {
    *VALUE.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}

/// Why the option's callback failed in this process (see [`FAILURE`]).
pub fn failure() -> Option<String> {
    FAILURE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// The value is forgotten when the hook being run returns ([`hook_done`]).
pub fn forget_after_hook() {
    FORGET.store(true, Ordering::Relaxed);
}

/// Called by every exported hook as it returns: forgets the value if [`forget_after_hook`]
/// asked for it.
pub fn hook_done() {
    if FORGET.swap(false, Ordering::Relaxed) {
        forget();
    }
}

/// The job's `--map-by-device` value is not UTF-8 (the value, as given).
#[derive(Debug, thiserror::Error)]
#[error("--{} value is not UTF-8: {}", OPTION, text::excerpt(&.0.to_string_lossy()))]
pub struct NotUtf8(pub OsString);

/// The job's `--map-by-device` text, from the command line, `#SBATCH` or the environment
/// form (Slurm hands all three to the option callback, whose value this module keeps).
pub fn user_spec() -> Result<Option<String>, NotUtf8> {
    match value() {
        None => Ok(None),
        Some(v) => match v.into_string() {
            Ok(s) => Ok(Some(s.trim().to_string())),
            Err(v) => Err(NotUtf8(v)),
        },
    }
}

/// Why the option could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("no SPANK handle: register only from a hook")]
    NoHandle,
    /// One of the strings (as given).
    #[error("{0:?} holds a NUL byte")]
    Nul(String),
    /// Slurm's return code.
    #[error("spank_option_register returned {0}")]
    Refused(spank_sys::spank_err_t),
}

/// Registers `--NAME=ARGINFO` with `usage`, with [`callback`]. Only valid in `init` (Slurm's
/// rule for `spank_option_register`).
pub fn register(name: &str, arginfo: &str, usage: &str) -> Result<(), RegisterError> {
    let spank = crate::entry::handle();
    if spank.is_null() {
        return Err(RegisterError::NoHandle);
    }
    let text = |s: &str| CString::new(s).map_err(|_| RegisterError::Nul(s.to_string()));
    let (name, arginfo, usage) = (text(name)?, text(arginfo)?, text(usage)?);
    let mut option = spank_sys::spank_option {
        name: name.as_ptr(),
        arginfo: arginfo.as_ptr(),
        usage: usage.as_ptr(),
        has_arg: 1,
        val: 0,
        cb: Some(callback),
    };
    // SAFETY:
    // - `spank` is the handle Slurm passed to the hook running on this thread (entry::Entry
    //   sets it for exactly the duration of that call), so it is valid here;
    // - `option` and the strings it points to live until the call returns, and Slurm copies
    //   the name, arginfo and usage strings when it registers an option (plugstack.c
    //   `_spank_option_copy`), as slurm-spank itself relies on.
    let rc = unsafe { spank_sys::spank_option_register(spank, &mut option) };
    if rc == spank_sys::ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(RegisterError::Refused(rc))
    }
}

/// Slurm's option callback: keeps the value. Never unwinds into Slurm.
extern "C" fn callback(_val: c_int, optarg: *const c_char, _remote: c_int) -> c_int {
    let _entry = crate::entry::Entry::enter(crate::entry::handle());
    let kept = catch_unwind(AssertUnwindSafe(|| {
        crate::entry::test_panic("option");
        let value = if optarg.is_null() {
            None
        } else {
            // SAFETY: Slurm passes a NUL-terminated string that lives for the call (or NULL,
            // handled above); it is copied out at once.
            Some(std::ffi::OsStr::from_bytes(unsafe { CStr::from_ptr(optarg) }.to_bytes()).to_os_string())
        };
        *VALUE.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = value;
    }));
    match kept {
        Ok(()) => 0,
        Err(panic) => {
            let message = crate::entry::internal_error("in the --map-by-device option callback", panic.as_ref());
            crate::entry::user_error(&message);
            *FAILURE.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(message);
            -1
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use map_by_device::spec::Spec;

    #[test]
    fn usage_is_one_line() {
        assert!(!USAGE.contains('\n'));
    }

    /// `srun --help` lists every qualifier the parser knows (issue 24: `adapters` was missing).
    #[test]
    fn usage_lists_every_qualifier() {
        let e = Spec::parse("gpu:no_such_qualifier").unwrap_err().to_string();
        let list = e.split("expected one of ").nth(1).unwrap();
        for q in list.split(", ") {
            assert!(
                USAGE.split(['(', ')', ' ']).any(|w| w == q || w.starts_with(&format!("{q}="))),
                "{q} not in {USAGE}"
            );
        }
    }

    #[test]
    fn a_value_that_is_not_utf8_is_quoted() {
        use std::os::unix::ffi::OsStringExt;
        let e = NotUtf8(OsString::from_vec(b"gpu\xff".to_vec()));
        let shown = e.to_string();
        assert!(shown.starts_with("--map-by-device value is not UTF-8: ") && shown.contains("gpu"), "{shown}");
    }
}
