//! The plugin in srun, sbatch and salloc (Slurm's local and allocator contexts), before
//! anything is allocated or launched: `init_post_opt` refuses a broken configuration, a bad
//! `--map-by-device` spec, and components of a heterogeneous job whose specs differ (het.rs).
//! The option itself is registered by `init` in every context that sees it (lib.rs,
//! option.rs).

use crate::args::ArgsError;
use crate::error::HookError;
use crate::het;
use crate::option::{self, OPTION};
use map_by_device::config::Config;
use map_by_device::spec::Spec;
use map_by_device::text;

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
}
