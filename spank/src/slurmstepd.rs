//! The plugin in slurmstepd, the step's side of each node: `user_init` decides once for the
//! step (step.rs: which spec, which topology, the whole node's plan) and keeps the outcome;
//! each task's `task_init` applies its part (the CPU mask, the variables, the verbose line)
//! or reports the refusal, and a refused task ends its step on every node (end_step.rs).
//!
//! Nothing fails `user_init`: Slurm 22.05 lets srun exit 0 when it fails, so every refusal,
//! and a failure of `init` or `init_post_opt` in this process ([`State::init_failed`]), is
//! kept and reported by the tasks, where a failed hook fails the step (srun exits 1).

use crate::args::ArgsError;
use crate::end_step;
use crate::entry::{self, admin_log, test_panic};
use crate::error::{guarded, HookError, HookResult};
use crate::option;
use crate::probes;
use crate::step::{self, Origin, Step};
use map_by_device::affinity;
use map_by_device::config::Config;
use map_by_device::report;
use slurm_spank::{LogLevel, SpankError, SpankHandle};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Step ids above this are Slurm's own steps (batch script, extern, interactive), which are
/// not the job's tasks: they are left alone, or the batch script would be bound like task 0
/// and pass its variables on to every step it launches (`SLURM_MAX_NORMAL_STEP_ID`, slurm.h).
const SLURM_MAX_NORMAL_STEP_ID: u32 = 0xffff_fff0;

/// The plugin's state in slurmstepd (each task inherits a copy when slurmstepd forks it).
#[derive(Default)]
pub struct State {
    /// The step's plan or refusal, from `user_init`.
    step: Option<Step>,
    /// The error the last hook returned is not to be shown (see [`HookError::Quiet`]).
    quiet: bool,
    /// A task: `task_init` refused it, so [`State::report_error`] ends the step once it said why.
    end_step: bool,
    /// Why `init` or `init_post_opt` failed in this process, reported by `task_init`.
    init_failure: Option<String>,
}

/// Why `user_init` has no decision: the step is refused (or, with nothing asked, runs unmapped).
#[derive(Debug, thiserror::Error)]
enum UserInitError {
    #[error("cannot read the step id: {0}")]
    StepId(SpankError),
    /// `init`'s or the option callback's failure in this process, already worded.
    #[error("{0}")]
    Earlier(String),
    #[error(transparent)]
    Value(#[from] option::NotUtf8),
    #[error("cannot read the local task count: {0}")]
    TaskCount(SpankError),
}

impl State {
    /// `init` or `init_post_opt` failed here: said in slurmd.log now, and by `task_init` to
    /// the job (the first failure).
    pub fn init_failed(&mut self, message: String) {
        admin_log(LogLevel::Error, &message);
        self.init_failure.get_or_insert(message);
    }

    /// Decides for the step and keeps the outcome. Never fails: Slurm 22.05 ignores a
    /// `user_init` failure in srun's exit code, so the outcome is kept and reported from
    /// `task_init`.
    pub fn user_init(&mut self, spank: &mut SpankHandle, config: Option<&Result<Config, ArgsError>>) {
        // Who asked, known before anything can go wrong: an unexpected failure below is
        // then hard for the job's own request, soft for the admin's default, and nothing
        // at all for a step that asked for nothing.
        let requested = if option::value().is_some() || option::failure().is_some() {
            Some(Origin::User)
        } else if matches!(config, Some(Ok(c)) if c.default.is_some()) {
            Some(Origin::AdminDefault)
        } else {
            None
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| self.decide(spank, config, requested)));
        let failure = match outcome {
            Ok(Ok(step::Decision { step, note, notices })) => {
                for n in &notices {
                    admin_log(LogLevel::Info, n);
                }
                if !note.is_empty() {
                    admin_log(LogLevel::Debug, &note);
                }
                self.step = Some(step);
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(panic) => entry::internal_error("in user_init", panic.as_ref()),
        };
        self.step = Some(match requested {
            Some(origin) => Step::Refused { origin, message: failure },
            None => {
                admin_log(LogLevel::Info, &failure);
                Step::Off
            }
        });
    }

    /// `user_init`'s decision, from what Slurm tells about the step.
    fn decide(
        &self,
        spank: &mut SpankHandle,
        config: Option<&Result<Config, ArgsError>>,
        requested: Option<Origin>,
    ) -> Result<step::Decision, UserInitError> {
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
        let step_id = spank.job_stepid().map_err(UserInitError::StepId)?;
        if step_id >= SLURM_MAX_NORMAL_STEP_ID {
            return Ok(step::Decision {
                step: Step::Off,
                note: format!("step {step_id:#x} is Slurm's own (batch, extern or interactive): not mapped"),
                notices: Vec::new(),
            });
        }
        if let Some(failure) = self.init_failure.clone().or_else(option::failure) {
            return Err(UserInitError::Earlier(failure));
        }
        let inputs = step::Inputs {
            user_spec: option::user_spec()?,
            config: config.map_or_else(|| Ok(Config::default()), |c| c.as_ref().cloned()),
            ntasks: spank.job_local_task_count().map_err(UserInitError::TaskCount)?,
            cpus_per_task: spank.step_cpus_per_task().ok().and_then(|n| u32::try_from(n).ok()).filter(|n| *n >= 1),
            env: job_env(spank),
            step_alloc_cores: spank.step_alloc_cores().ok().map(str::to_string),
            slurm_sets_step_gpus: probes::gres_gpu_loaded(),
        };
        Ok(step::decide(inputs))
    }

    /// Maps this task as the step's plan says, or refuses it.
    pub fn task_init(&mut self, spank: &mut SpankHandle) -> HookResult {
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
                // Only a default meets this (map_task): the job's own GPU binding stands.
                Err(Refusal::JobChoseGpus(why)) => {
                    if task == 0 {
                        admin_log(
                            LogLevel::Debug,
                            &format!("default not applied, the job chose its own GPU binding ({why})"),
                        );
                    }
                    Ok(())
                }
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

    /// Logs the error a hook returned (`report`, with its sources): at debug level when
    /// another task of the step reports it. A refused task then ends its step on every node,
    /// now that its reason is on the user's terminal (end_step.rs); another task of a
    /// node-wide refusal (quiet) leaves it to task 0. In srun, sbatch, salloc and slurmd the
    /// state is empty: an error line, nothing ended.
    pub fn report_error(&self, spank: &mut SpankHandle, report: &str) {
        let level = if self.quiet { LogLevel::Debug } else { LogLevel::Error };
        admin_log(level, report);
        if !self.end_step {
            return;
        }
        let env = |name: &str| spank.getenv(name).ok().flatten();
        let why = match (spank.job_id(), spank.job_stepid()) {
            (Ok(job), Ok(step)) => match end_step::kill_all(&end_step::jobs_of_step(job, env), step) {
                Ok(()) => return,
                Err(e) => e.to_string(),
            },
            (Err(e), _) | (_, Err(e)) => format!("cannot read the step id: {e}"),
        };
        admin_log(LogLevel::Error, &format!("the step's tasks on other nodes were not stopped: {why}"));
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
    /// An admin default's task: the job told Slurm not to bind its GPUs (`--gpu-bind=none`,
    /// what gave it away), so each task keeps all of the step's.
    JobChoseGpus(String),
    /// Something about this task (its plan, its binding, its variables).
    Task(String),
}

/// Task `task`'s part of the plan: its assignment, checked against Slurm's own GPU
/// binding, applied (mask, then variables) and reported (warnings, `verbose`).
fn map_task(spank: &mut SpankHandle, planned: &step::Planned, task: u32) -> Result<(), Refusal> {
    let tp = planned.task_plan(task).map_err(|e| Refusal::Task(e.to_string()))?;
    let now = |name: &str| spank.getenv(name).ok().flatten();
    if planned.origin == Origin::AdminDefault {
        // The job asked Slurm for its own GPU binding (none included): the admin's default,
        // whatever it maps, leaves the step as Slurm set it up.
        let (env, ntasks) = (&planned.facts.env, planned.facts.ntasks);
        if let Some(why) = probes::slurm_gpu_binding(env, ntasks, now) {
            return Err(Refusal::SlurmBindsGpus(why));
        }
        if let Some(why) = probes::job_gpu_bind_none(env, ntasks, now) {
            return Err(Refusal::JobChoseGpus(why));
        }
    } else if planned.assigns_gpu(&tp) {
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
