//! The plugin in srun, sbatch and salloc (Slurm's local and allocator contexts), before
//! anything is allocated or launched: `init_post_opt` refuses a broken configuration, a bad
//! `--map-by-device` spec, and components of a heterogeneous job whose specs differ (het.rs).
//! The option itself is registered by `init` in every context that sees it (lib.rs,
//! option.rs).

use crate::args::ArgsError;
use crate::error::HookError;
use crate::het;
use crate::option::{self, OPTION};
use crate::probes;
use map_by_device::config::Config;
use map_by_device::spec::Spec;
use map_by_device::text;
use slurm_spank::SpankHandle;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// The plugin's state in srun, sbatch or salloc.
#[derive(Default)]
pub struct State {
    /// The components of a heterogeneous job seen so far.
    components: het::Components,
}

impl State {
    /// Checks the configuration and the job's spec, once per component of the job.
    pub fn init_post_opt(&mut self, config: Option<&Result<Config, ArgsError>>) -> Result<(), HookError> {
        // A broken configuration fails every submission, with its message: the admin
        // hears of it at once, and no job runs with settings nobody intended.
        if let Some(Err(e)) = config {
            return Err(HookError::Report(format!("plugstack.conf: {e}")));
        }
        let text = option::user_spec().map_err(|e| HookError::Report(e.to_string()))?;
        if let Some(text) = &text {
            Spec::parse(text)
                .map_err(|e| HookError::Report(format!("invalid --{OPTION}={}: {e}", text::excerpt(text))))?;
        }
        // Called once per component of a heterogeneous job: each must say the same.
        option::forget_after_hook();
        self.components.add(text.as_deref()).map_err(|e| HookError::Report(e.to_string()))
    }

    /// In srun, before the step is launched: marks a step of `srun --external-launcher` (Slurm
    /// 23.11 and later) for slurmstepd, which cannot see Slurm's own mark, so that an admin's
    /// default steps aside for it (probes.rs, [`probes::EXTERNAL_LAUNCHER_MARK`]). Only where
    /// a default is set, on a release that has the option (`slurm_version`, the
    /// `SLURM_VERSION_NUMBER` the plugin was built for); srun's environment is the job's
    /// from here on (srun merges it after this hook, `pre_launch_srun_job`). Never fails: the
    /// mark only spares the default, and nothing here may stop a job that asked for nothing.
    pub fn local_user_init(
        &self,
        spank: &mut SpankHandle,
        config: Option<&Result<Config, ArgsError>>,
        slurm_version: u32,
    ) -> Result<(), HookError> {
        let has_default = matches!(config, Some(Ok(c)) if c.default.is_some());
        if !has_default || slurm_version < EXTERNAL_LAUNCHER_SINCE {
            return Ok(());
        }
        let env_value = std::env::var_os("SLURM_EXTERNAL_LAUNCHER");
        let own = std::fs::read("/proc/self/cmdline").unwrap_or_default();
        let argv: Vec<&OsStr> = own.split(|b| *b == 0).filter(|a| !a.is_empty()).map(OsStr::from_bytes).collect();
        // srun's own options: its argv less argv[0] and the program with its arguments.
        let program = spank.job_argv_os().map(|a| a.len()).unwrap_or(0);
        let options = argv.get(1..argv.len().saturating_sub(program)).unwrap_or(&[]);
        if probes::external_launcher(options, env_value.as_deref()) {
            // srun's own environment: `spank_setenv` is refused in srun ("valid only in remote
            // context", 24.11), and srun copies its environment into the step's right after
            // this hook (`pre_launch_srun_job`: `env_array_merge(&job->env, environ)`).
            std::env::set_var(probes::EXTERNAL_LAUNCHER_MARK, "1");
        }
        Ok(())
    }
}

/// `SLURM_VERSION_NUMBER` of Slurm 23.11, the first with `srun --external-launcher`.
const EXTERNAL_LAUNCHER_SINCE: u32 = (23 << 16) | (11 << 8);
