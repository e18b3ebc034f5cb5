//! The map-by-device SPANK plugin: `srun --map-by-device=SPEC` places each task of a step
//! next to its own device, binds it to that device's CPUs and names the device in the
//! variables its runtime reads. Thin glue: every decision is the engine's
//! (`map_by_device::{spec, config, load, node, plan}`); this crate talks to Slurm.
//!
//! This file is the dispatch: the symbols Slurm looks for, each hook branching on Slurm's
//! context into the file of that context (as pyxis does), and the hook state. Hooks (why
//! these, in docs/plugin.md):
//! - `init` (every context): register `--map-by-device` (option.rs), read the plugstack.conf
//!   arguments (args.rs); in slurmd, discover the node once and write the topology cache the
//!   steps read (slurmd.rs).
//! - `init_post_opt` in srun/sbatch/salloc (srun.rs): refuse a bad spec or a broken
//!   configuration before anything is allocated or launched, and heterogeneous components
//!   whose specs differ (het.rs).
//! - `user_init` in slurmstepd, once per step (slurmstepd.rs, step.rs): load the topology,
//!   make the whole node's plan, keep it (or the refusal) for the tasks.
//! - `task_init` in each task, as the user, after Slurm's own binding and just before exec
//!   (slurmstepd.rs): set the task's CPU mask and variables; report a refusal of the job's
//!   own request (the step fails, srun exits 1), including a GPU mapping on top of Slurm's
//!   `--gpu-bind` (probes.rs); a refused task then ends its step on every node (end_step.rs).
//! - `slurmd_exit`: remove the topology cache this slurmd wrote (slurmd.rs).
//!
//! **Invariants:** no panic leaves a hook (each body runs under `catch_unwind`, so the
//! slurm-spank crate's global locks are never poisoned either); nothing the job's user
//! controls chooses what topology is read; a task is never bound outside the step's CPUs.

mod args;
mod cache;
mod discover;
mod end_step;
mod entry;
mod error;
mod het;
mod option;
mod probes;
mod slurmd;
mod slurmstepd;
mod srun;
mod step;

use args::ArgsError;
use entry::{admin_log, test_panic};
use error::{guarded, HookError, HookResult};
use map_by_device::config::Config;
use option::{OPTION, USAGE};
use slurm_spank::{Context, LogLevel, Plugin, SpankHandle};
use std::error::Error;

mod slurm_version {
    include!(concat!(env!("OUT_DIR"), "/slurm_version.rs"));
}

// The bindings (and so the values of the spank_item enum this plugin passes to Slurm) must
// come from the same Slurm as the version the plugin declares: SKIP_SLURM_BINDINGS builds
// use the crate's bundled 23.11 bindings, whose items do not match 22.05.
const _: () = assert!(
    slurm_version::SLURM_VERSION_NUMBER == slurm_spank::SLURM_VERSION_NUMBER,
    "slurm-spank's bindings were not generated from the installed Slurm headers: unset SKIP_SLURM_BINDINGS and build from the workspace (see spank/shim/slurm/spank.h)"
);

/// The symbols Slurm looks for: the plugin's name, type and version, and **only the hooks this
/// plugin implements**. slurm-spank's own `SPANK_PLUGIN!` exports every hook, among them
/// `slurm_spank_job_prolog` and `slurm_spank_job_epilog`: their mere presence makes slurmd
/// start a `slurmstepd spank prolog` and a `spank epilog` process for every job on every node
/// (Slurm 22.05 `plugstack.c:spank_stack_plugin_valid_for_context`, `prep_script_slurmd.c`),
/// measured at about 15-20 ms per job, and holds each finished job's CPUs until its epilog ran.
/// The other unused hooks (`task_init_privileged`, `task_post_fork`,
/// `task_exit`, `exit`) would only cost a call each; `local_user_init` is one call in srun. This is the crate's macro (0.4.1, pinned)
/// with that list cut down; each hook goes through the same crate entry points.
macro_rules! export_spank_plugin {
    ($name:literal, $version:expr, $ty:ty, [$(($c_hook:ident, $hook:ident)),* $(,)?]) => {
        const fn byte_string_size<T>(_: &T) -> usize {
            std::mem::size_of::<T>()
        }
        #[no_mangle]
        pub static plugin_name: [u8; byte_string_size($name) + 1] =
            *slurm_spank::byte_strings::concat_bytes!($name, "\0");
        #[no_mangle]
        pub static plugin_type: [u8; 6] = *b"spank\0";
        #[no_mangle]
        pub static plugin_version: std::os::raw::c_uint = $version;

        $(
            #[no_mangle]
            #[doc(hidden)]
            pub extern "C" fn $c_hook(
                spank: slurm_spank::spank_sys::spank_t,
                ac: std::os::raw::c_int,
                argv: *const *const std::os::raw::c_char,
            ) -> std::os::raw::c_int {
                // The handle for option.rs, and quiet panics, for this call (entry.rs).
                let _entry = crate::entry::Entry::enter(spank);
                slurm_spank::spank_callback_with_globals::<$ty, _>(|plugin, options, need_setup| {
                    let mut spank = slurm_spank::init_spank_handle(spank, ac, argv, options);
                    if need_setup {
                        plugin.setup(&mut spank).map_err(|e| {
                            plugin.report_error(&mut spank, e.as_ref());
                            e
                        })?;
                    }
                    let result = plugin.$hook(&mut spank).map_err(|e| {
                        plugin.report_error(&mut spank, e.as_ref());
                        e
                    });
                    // A heterogeneous component's init_post_opt is done with its value (het.rs).
                    crate::option::hook_done();
                    result
                })
            }
        )*
    };
}

export_spank_plugin!(
    b"map-by-device",
    slurm_version::SLURM_VERSION_NUMBER,
    MapByDevice,
    [
        (slurm_spank_init, init),
        (slurm_spank_init_post_opt, init_post_opt),
        (slurm_spank_local_user_init, local_user_init),
        (slurm_spank_user_init, user_init),
        (slurm_spank_task_init, task_init),
        (slurm_spank_slurmd_exit, slurmd_exit),
    ]
);

/// Slurm 25.05 and later: what a failing `slurm_spank_init` of this (required) plugin does.
/// Without this symbol Slurm treats it as a node failure and drains the node; this plugin's
/// failures are never the node's fault (its `init` fails only when Slurm cannot give it its
/// context or register `--map-by-device`), so the job fails and the node stays up. Older
/// releases have no such choice (docs/plugin.md, "Failures and the node").
#[cfg(slurm_init_failure_mode)]
#[no_mangle]
pub static slurm_spank_init_failure_mode: std::os::raw::c_int =
    slurm_spank::spank_sys::slurm_err_t_ESPANK_JOB_FAILURE as std::os::raw::c_int;

/// The plugin's state in one process (srun, sbatch, salloc, slurmd or one step's slurmstepd;
/// each task inherits a copy when slurmstepd forks it): the settings every context reads, and
/// each context's own.
#[derive(Default)]
pub struct MapByDevice {
    /// The plugstack.conf arguments, read in `init`, or why they could not be.
    config: Option<Result<Config, ArgsError>>,
    /// srun, sbatch, salloc: the components of a heterogeneous job seen so far.
    srun: srun::State,
    /// slurmd: the topology cache it wrote.
    slurmd: slurmd::State,
    /// slurmstepd: the step's plan or refusal, and what its tasks report.
    slurmstepd: slurmstepd::State,
}

// SAFETY: slurm-spank's contract: the task hooks run in children slurmstepd forks from itself,
// so the plugin must not be multi-threaded. It keeps no thread: every hook runs on Slurm's
// thread and returns; the discovery library is opened on a thread of its own that is joined
// before the hook returns (discover.rs, `in_root_directory`); live discovery runs in a forked
// child process (bounded), not a thread.
unsafe impl Plugin for MapByDevice {
    /// No tracing subscriber: this plugin logs through Slurm directly, and does not read
    /// `RUST_LOG` from a user's environment.
    fn setup(&mut self, _spank: &mut SpankHandle) -> HookResult {
        Ok(())
    }

    /// Registers the option first (without it Slurm could not hand the job's value on), then
    /// reads the configuration. A later failure is not returned where Slurm would turn it
    /// into something worse than the plugin's own refusal: in slurmd a failing init stops
    /// slurmd ("failed to initialize plugin stack": the node would go down for what only
    /// costs the steps their cache), so slurmd says why and goes on; in slurmstepd Slurm
    /// reports "task launch failed: Plugin initialization failed" and srun 22.05 still exits
    /// 0, so the failure is kept and `task_init` fails the step with it (as for `user_init`).
    fn init(&mut self, spank: &mut SpankHandle) -> HookResult {
        let context = spank.context().ok();
        if matches!(context, Some(Context::Local | Context::Allocator | Context::Remote)) {
            guarded("init", || {
                option::register(OPTION, "spec", USAGE)
                    .map_err(|e| HookError::Report(format!("cannot register --{OPTION}: {e}")))
            })?;
        }
        let result = guarded("init", || {
            let context = context.ok_or_else(|| HookError::Report("cannot tell the SPANK context".into()))?;
            test_panic("init");
            let config = args::read(spank);
            if context == Context::Slurmd {
                self.slurmd.init(&config, slurm_version::SLURM_VERSION_TEXT);
            }
            self.config = Some(config);
            Ok(())
        });
        match (context, result) {
            (Some(Context::Slurmd), Err(e)) => {
                slurmd::init_failed(&e.to_string());
                Ok(())
            }
            (Some(Context::Remote), Err(e)) => {
                self.slurmstepd.init_failed(e.to_string());
                Ok(())
            }
            (_, result) => result,
        }
    }

    /// In srun, sbatch and salloc: checks the configuration and the job's spec (srun.rs). In
    /// slurmstepd it has nothing to do; a failure there (only a forced panic of a test build)
    /// is kept and reported by `task_init`, as `init`'s is.
    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> HookResult {
        let context = spank.context().ok();
        let result = guarded("init_post_opt", || {
            let context = context.ok_or_else(|| HookError::Report("cannot tell the SPANK context".into()))?;
            test_panic("init_post_opt");
            match context {
                Context::Local | Context::Allocator => self.srun.init_post_opt(self.config.as_ref()),
                _ => Ok(()),
            }
        });
        match (context, result) {
            (Some(Context::Remote), Err(e)) => {
                self.slurmstepd.init_failed(e.to_string());
                Ok(())
            }
            (_, result) => result,
        }
    }

    /// In srun, before it launches the step: marks an external launcher's step (srun.rs).
    /// Never fails srun: whatever goes wrong (even a panic) only leaves the step unmarked.
    fn local_user_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        let marked = guarded("local_user_init", || {
            self.srun.local_user_init(spank, self.config.as_ref(), slurm_version::SLURM_VERSION_NUMBER)
        });
        if let Err(e) = marked {
            admin_log(LogLevel::Debug, &format!("external launcher's step not marked: {e}"));
        }
        Ok(())
    }

    /// In slurmstepd, once per step: the step's decision (slurmstepd.rs). Never fails.
    fn user_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        if spank.context().ok() == Some(Context::Remote) {
            self.slurmstepd.user_init(spank, self.config.as_ref());
        }
        Ok(())
    }

    /// In each task (Slurm calls it only in slurmstepd): the task's part of the plan.
    fn task_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        self.slurmstepd.task_init(spank)
    }

    /// slurmd stops: remove the cache it wrote (if the file is still its own). Never fails:
    /// slurmd is stopping either way, and says what went wrong.
    fn slurmd_exit(&mut self, _spank: &mut SpankHandle) -> HookResult {
        self.slurmd.exit();
        Ok(())
    }

    /// Errors are shown to the user with `slurm_error` (the crate's default logs at info
    /// level, which users never see from slurmstepd: they would only read "rc=-1").
    fn report_error(&self, spank: &mut SpankHandle, error: &dyn Error) {
        let mut report = error.to_string();
        let mut source = error.source();
        while let Some(s) = source {
            report.push_str(&format!(": {s}"));
            source = s.source();
        }
        self.slurmstepd.report_error(spank, &report);
    }
}
