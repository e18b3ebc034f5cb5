//! The map-by-device SPANK plugin: `srun --map-by-device=SPEC` places each task of a step
//! next to its own device, binds it to that device's CPUs and names the device in the
//! variables its runtime reads. Thin glue: every decision is the engine's
//! (`map_by_device::{spec, config, load, node, plan}`); this crate talks to Slurm.
//!
//! Hooks (why these, in docs/plugin.md):
//! - `init` (every context): register `--map-by-device`, read the plugstack.conf arguments;
//!   in slurmd, discover the node once and write the topology cache the steps read.
//! - `init_post_opt` in srun/sbatch/salloc: refuse a bad spec or a broken configuration
//!   before anything is allocated or launched, and heterogeneous components whose specs
//!   differ (het.rs).
//! - `user_init` in slurmstepd, once per step: load the topology, make the whole node's plan,
//!   keep it (or the refusal) for the tasks.
//! - `task_init` in each task, as the user, after Slurm's own binding and just before exec:
//!   set the task's CPU mask and variables; report a refusal of the job's own request (the
//!   step fails, srun exits 1), including a GPU mapping on top of Slurm's `--gpu-bind`;
//!   a refused task then ends its step on every node (end_step.rs).
//! - `slurmd_exit`: remove the topology cache this slurmd wrote.
//!
//! **Invariants:** no panic leaves a hook (each body runs under `catch_unwind`, so the
//! slurm-spank crate's global locks are never poisoned either); nothing the job's user
//! controls chooses what topology is read; a task is never bound outside the step's CPUs.

mod affinity;
mod cache;
mod discover;
mod end_step;
mod entry;
mod error;
mod het;
mod option;
mod probes;
mod slurmd;
mod step;

use entry::{admin_log, test_panic};
use error::{guarded, HookError, HookResult};
use map_by_device::config::Config;
use map_by_device::report;
use map_by_device::spec::Spec;
use map_by_device::text;
use option::{user_spec, OPTION, USAGE};
use slurm_spank::{Context, LogLevel, Plugin, SpankHandle};
use std::collections::BTreeMap;
use std::error::Error;
use std::panic::{catch_unwind, AssertUnwindSafe};
use step::{Origin, Step};

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
/// The other unused hooks (`local_user_init`, `task_init_privileged`, `task_post_fork`,
/// `task_exit`, `exit`) would only cost a call each. This is the crate's macro (0.4.1, pinned)
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

/// Step ids above this are Slurm's own steps (batch script, extern, interactive), which are
/// not the job's tasks: they are left alone, or the batch script would be bound like task 0
/// and pass its variables on to every step it launches (`SLURM_MAX_NORMAL_STEP_ID`, slurm.h).
const SLURM_MAX_NORMAL_STEP_ID: u32 = 0xffff_fff0;

/// The plugin's state in one process (srun, sbatch, salloc, slurmd or one step's slurmstepd;
/// each task inherits a copy when slurmstepd forks it).
#[derive(Default)]
pub struct MapByDevice {
    /// The plugstack.conf arguments, read in `init`, or why they could not be.
    config: Option<Result<Config, String>>,
    /// slurmstepd: the step's plan or refusal, from `user_init`.
    step: Option<Step>,
    /// The error the last hook returned is not to be shown (see [`HookError::Quiet`]).
    quiet: bool,
    /// slurmd: the topology cache it wrote, whose lock it holds while it runs.
    cache: Option<map_by_device::cache::Written>,
    /// srun, sbatch, salloc: the components of a heterogeneous job seen so far.
    components: het::Components,
    /// A task: `task_init` refused it, so `report_error` ends the step once it said why.
    end_step: bool,
    /// slurmstepd: why `init` failed, reported by `task_init` (see [`MapByDevice::init`]).
    init_failure: Option<String>,
}

// SAFETY: slurm-spank's contract: the task hooks run in children slurmstepd forks from itself,
// so the plugin must not be multi-threaded. It starts no thread: every hook runs on Slurm's
// thread and returns, and live discovery runs in a forked child process (bounded), not a thread.
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
            let args: Result<Vec<String>, String> = spank
                .plugin_argv()
                .map(|v| v.into_iter().map(str::to_string).collect())
                .map_err(|e| format!("plugstack.conf arguments are not UTF-8: {e}"));
            let config = args.and_then(|a| Config::from_plugin_args(&a).map_err(|e| e.to_string()));
            if context == Context::Slurmd {
                if let Some(written) = slurmd::init(&config, slurm_version::SLURM_VERSION_TEXT) {
                    self.cache = Some(written);
                }
            }
            self.config = Some(config);
            Ok(())
        });
        match (context, result) {
            (Some(Context::Slurmd), Err(e)) => {
                admin_log(LogLevel::Error, &format!("{e}; slurmd goes on, and steps discover the node themselves"));
                Ok(())
            }
            (Some(Context::Remote), Err(e)) => {
                admin_log(LogLevel::Error, &e.to_string());
                self.init_failure = Some(e.to_string());
                Ok(())
            }
            (_, result) => result,
        }
    }

    /// In srun, sbatch and salloc: checks the configuration and the job's spec. In slurmstepd
    /// it has nothing to do; a failure there (only a forced panic of a test build) is kept and
    /// reported by `task_init`, as `init`'s is.
    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> HookResult {
        let context = spank.context().ok();
        let result = guarded("init_post_opt", || {
            let context = context.ok_or_else(|| HookError::Report("cannot tell the SPANK context".into()))?;
            test_panic("init_post_opt");
            if !matches!(context, Context::Local | Context::Allocator) {
                return Ok(());
            }
            // A broken configuration fails every submission, with its message: the admin
            // hears of it at once, and no job runs with settings nobody intended.
            if let Some(Err(e)) = &self.config {
                return Err(HookError::Report(format!("plugstack.conf: {e}")));
            }
            let text = user_spec().map_err(|e| HookError::Report(e.to_string()))?;
            if let Some(text) = &text {
                Spec::parse(text)
                    .map_err(|e| HookError::Report(format!("invalid --{OPTION}={}: {e}", text::excerpt(text))))?;
            }
            // Called once per component of a heterogeneous job: each must say the same.
            option::forget_after_hook();
            self.components.add(text.as_deref()).map_err(HookError::Report)
        });
        match (context, result) {
            (Some(Context::Remote), Err(e)) => {
                admin_log(LogLevel::Error, &e.to_string());
                self.init_failure.get_or_insert_with(|| e.to_string());
                Ok(())
            }
            (_, result) => result,
        }
    }

    fn user_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        // Never fails: Slurm 22.05 ignores a user_init failure in srun's exit code, so the
        // outcome is kept and reported from task_init.
        if spank.context().ok() != Some(Context::Remote) {
            return Ok(());
        }
        // Who asked, known before anything can go wrong: an unexpected failure below is
        // then hard for the job's own request, soft for the admin's default, and nothing
        // at all for a step that asked for nothing.
        let requested = if option::value().is_some() || option::failure().is_some() {
            Some(Origin::User)
        } else if matches!(&self.config, Some(Ok(c)) if c.default.is_some()) {
            Some(Origin::AdminDefault)
        } else {
            None
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<step::Decision, String> {
            test_panic("user_init");
            // A step that asked for nothing (most steps, where no default= is set) reads
            // nothing: no step id, no environment, no decision (docs/plugin.md, "Cost").
            if requested.is_none() && self.init_failure.is_none() {
                return Ok(step::Decision {
                    step: Step::Off,
                    note: "nothing to map: no --map-by-device and no default=".into(),
                    notices: Vec::new(),
                });
            }
            let step_id = spank.job_stepid().map_err(|e| format!("cannot read the step id: {e}"))?;
            if step_id >= SLURM_MAX_NORMAL_STEP_ID {
                return Ok(step::Decision {
                    step: Step::Off,
                    note: format!("step {step_id:#x} is Slurm's own (batch, extern or interactive): not mapped"),
                    notices: Vec::new(),
                });
            }
            if let Some(failure) = self.init_failure.clone().or_else(option::failure) {
                return Err(failure);
            }
            let user = user_spec().map_err(|e| e.to_string())?;
            let inputs = step::Inputs {
                user_spec: user,
                config: self.config.clone().unwrap_or_else(|| Ok(Config::default())),
                ntasks: spank.job_local_task_count().map_err(|e| format!("cannot read the local task count: {e}"))?,
                cpus_per_task: spank.step_cpus_per_task().ok().and_then(|n| u32::try_from(n).ok()).filter(|n| *n >= 1),
                env: job_env(spank),
                step_alloc_cores: spank.step_alloc_cores().ok().map(str::to_string),
                slurm_sets_step_gpus: probes::gres_gpu_loaded(),
            };
            Ok(step::decide(inputs))
        }));
        let failure = match outcome {
            Ok(Ok(step::Decision { step, note, notices })) => {
                for n in &notices {
                    admin_log(LogLevel::Info, n);
                }
                if !note.is_empty() {
                    admin_log(LogLevel::Debug, &note);
                }
                self.step = Some(step);
                return Ok(());
            }
            Ok(Err(message)) => message,
            Err(panic) => entry::internal_error("in user_init", panic.as_ref()),
        };
        self.step = Some(match requested {
            Some(origin) => Step::Refused { origin, message: failure },
            None => {
                admin_log(LogLevel::Info, &failure);
                Step::Off
            }
        });
        Ok(())
    }

    fn task_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        // A refusal of this task alone, rather than of the whole node's plan.
        let mut per_task = false;
        let result = guarded("task_init", || {
            test_panic("task_init");
            let Some(step) = &self.step else { return Ok(()) };
            let task = spank.task_id().map_err(|e| HookError::Report(format!("cannot read the task id: {e}")))?;
            let task = u32::try_from(task).map_err(|_| HookError::Report(format!("bad local task id {task}")))?;
            let Some(planned) = planned_step(step, task)? else { return Ok(()) };
            let soft = planned.origin == Origin::AdminDefault;
            match map_task(spank, planned, task) {
                Ok(()) => Ok(()),
                // Slurm bound GPUs to the tasks itself (--gpu-bind ...): under ConstrainDevices
                // the task can open only those, so a GPU from the plan could be one it may not
                // use. The job's own request fails with the fix; the admin's default steps aside.
                Err(Refusal::SlurmBindsGpus(why)) if soft => {
                    if task == 0 {
                        admin_log(
                            LogLevel::Debug,
                            &format!("default not applied, Slurm binds the GPUs of this step ({why})"),
                        );
                    }
                    Ok(())
                }
                Err(Refusal::SlurmBindsGpus(why)) => Err(once(task, probes::gpu_binding_refusal(&planned.spec, &why))),
                Err(Refusal::Task(message)) if soft => {
                    admin_log(LogLevel::Debug, &format!("default not applied to task {task}: {message}"));
                    Ok(())
                }
                Err(Refusal::Task(message)) => {
                    per_task = true;
                    Err(HookError::Report(message))
                }
            }
        });
        self.quiet = matches!(&result, Err(e) if matches!(e.downcast_ref::<HookError>(), Some(HookError::Quiet(_))));
        // The step ends on every node (end_step.rs) unless every task is failing anyway: a
        // node-wide refusal on a step of one node, not part of a heterogeneous step.
        let reported = matches!(&result, Err(e) if matches!(e.downcast_ref::<HookError>(), Some(HookError::Report(_))));
        let env = |name: &str| spank.getenv(name).ok().flatten();
        self.end_step = reported && (per_task || end_step::spans_other_nodes(spank.job_nnodes().ok(), env));
        result
    }

    /// slurmd stops: remove the cache it wrote (if the file is still its own). Never fails:
    /// slurmd is stopping either way, and says what went wrong.
    fn slurmd_exit(&mut self, _spank: &mut SpankHandle) -> HookResult {
        slurmd::exit(self.cache.take());
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
        let level = if self.quiet { LogLevel::Debug } else { LogLevel::Error };
        admin_log(level, &report);
        // A refused task ends its step on every node, now that its reason is on the user's
        // terminal (end_step.rs). Another task of a node-wide refusal (quiet) leaves it to task 0.
        if self.end_step {
            let env = |name: &str| spank.getenv(name).ok().flatten();
            let ended = match (spank.job_id(), spank.job_stepid()) {
                (Ok(job), Ok(step)) => end_step::kill_all(&end_step::jobs_of_step(job, env), step),
                (Err(e), _) | (_, Err(e)) => Err(format!("cannot read the step id: {e}")),
            };
            if let Err(e) = ended {
                admin_log(LogLevel::Error, &format!("the step's tasks on other nodes were not stopped: {e}"));
            }
        }
    }
}

/// The step's plan for task `task`, `None` when there is nothing to do; the job's own
/// refusal, the same for every task of the node, is an error (task 0 says it once).
fn planned_step(step: &Step, task: u32) -> Result<Option<&step::Planned>, HookError> {
    match step {
        Step::Off => Ok(None),
        Step::Refused { origin: Origin::AdminDefault, message } => {
            if task == 0 {
                admin_log(LogLevel::Debug, &format!("default not applied, task runs unmapped: {message}"));
            }
            Ok(None)
        }
        Step::Refused { origin: Origin::User, message } => Err(once(task, message.clone())),
        Step::Planned(p) => Ok(Some(p)),
    }
}

/// A node-wide message: reported by task 0, the other tasks fail quietly.
fn once(task: u32, message: String) -> HookError {
    if task == 0 {
        HookError::Report(message)
    } else {
        HookError::Quiet(message)
    }
}

/// Why a task is not mapped as planned.
enum Refusal {
    /// Slurm bound GPUs to the tasks (what gave it away).
    SlurmBindsGpus(String),
    /// Something about this task (its plan, its binding, its variables).
    Task(String),
}

/// Task `task`'s part of the plan: its assignment, checked against Slurm's own GPU
/// binding, applied (mask, then variables) and reported (warnings, `verbose`).
fn map_task(spank: &mut SpankHandle, planned: &step::Planned, task: u32) -> Result<(), Refusal> {
    let tp = planned.task_plan(task).map_err(Refusal::Task)?;
    if planned.assigns_gpu(&tp) {
        let now = |name: &str| spank.getenv(name).ok().flatten();
        if let Some(why) = probes::slurm_gpu_binding(&planned.facts.env, planned.facts.ntasks, now) {
            // Slurm's per-task GPUs (--gpus-per-task=N gives task k the step's GPUs kN..kN+N-1)
            // are exactly the plan's (ndev=auto divides them the same way): nothing to refuse.
            if !planned.agrees_with_slurm(&tp, now("SLURM_STEP_GPUS").as_deref()) {
                return Err(Refusal::SlurmBindsGpus(why));
            }
        }
    }
    if let Some(cpus) = &tp.cpus {
        // Never outside the step's CPUs, whatever the plan says.
        if let Some(allowed) = planned.facts.allowed_cpus.as_ref().filter(|a| !cpus.is_subset(a)) {
            return Err(Refusal::Task(format!(
                "task {task}: CPUs {cpus} are not all allocated to the step (allowed: {allowed}); not binding"
            )));
        }
        affinity::set_current(cpus)
            .map_err(|e| Refusal::Task(format!("task {task}: cannot bind to CPUs {cpus}: {e}")))?;
    }
    for (name, value) in tp.env.iter() {
        spank
            .setenv(name, value, true)
            .map_err(|e| Refusal::Task(format!("task {task}: cannot set {name}={value}: {e}")))?;
    }
    if task == 0 && planned.origin == Origin::User {
        for w in &planned.plan.warnings {
            entry::user_log(&format!("map-by-device: warning: {w}"));
        }
    }
    if planned.spec.verbose {
        let now = affinity::current().ok();
        let global = spank.task_global_id().ok();
        // Slurm's node name is in the task's environment by now (not in user_init's).
        let node = spank.getenv("SLURMD_NODENAME").ok().flatten();
        let node = node.as_deref().unwrap_or(&planned.node_name);
        entry::user_log(&report::verbose_line(node, task, global, &planned.node, &tp, now.as_ref()));
    }
    Ok(())
}

/// The job's environment (`S_JOB_ENV`) as a map; entries that are not UTF-8 are skipped.
fn job_env(spank: &SpankHandle) -> BTreeMap<String, String> {
    spank
        .job_env_os()
        .map(|vars| {
            vars.into_iter()
                .filter_map(|kv| kv.to_str())
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default()
}
