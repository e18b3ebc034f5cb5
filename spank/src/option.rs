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

use slurm_spank::spank_sys;
use std::ffi::{CStr, CString, OsString};
use std::os::raw::{c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

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

/// Registers `--NAME=ARGINFO` with `usage`, with [`callback`]. Only valid in `init` (Slurm's
/// rule for `spank_option_register`).
pub fn register(name: &str, arginfo: &str, usage: &str) -> Result<(), String> {
    let spank = crate::entry::handle();
    if spank.is_null() {
        return Err("no SPANK handle: register only from a hook".into());
    }
    let text = |s: &str| CString::new(s).map_err(|_| format!("{s:?} holds a NUL byte"));
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
        Err(format!("spank_option_register returned {rc}"))
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
