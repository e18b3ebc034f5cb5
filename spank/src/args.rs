//! The plugstack.conf arguments: the plugin's settings ([`Config`]), read in `init` in every
//! context, or why they could not be ([`ArgsError`]).

use map_by_device::config::{Config, ConfigError};
use slurm_spank::SpankHandle;

/// Why the plugstack.conf arguments give no settings.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// slurm-spank's error, which names the argument, as text: its `Display` calls Slurm's
    /// `spank_strerror`, which the unit tests (no Slurm around them) cannot link.
    #[error("plugstack.conf arguments are not UTF-8: {0}")]
    NotUtf8(String),
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

/// The settings the admin wrote after the plugin's path in plugstack.conf.
pub fn read(spank: &SpankHandle) -> Result<Config, ArgsError> {
    let args: Vec<String> =
        spank.plugin_argv().map_err(|e| ArgsError::NotUtf8(e.to_string()))?.into_iter().map(str::to_string).collect();
    Ok(Config::from_plugin_args(&args)?)
}
