//! The plugin in slurmd: at its start ([`init`]), a broken configuration or `topology=` told
//! to the admin at once rather than at the first job, and the node discovered once into the
//! topology cache the steps read; at its stop ([`exit`]), that cache removed. Nothing here
//! fails a hook: a failing `init` would stop slurmd, so problems are logged, and the steps
//! then discover the node themselves.

use crate::args::ArgsError;
use crate::cache;
use crate::discover;
use crate::entry::{self, admin_log, test_panic};
use map_by_device::cache::Written;
use map_by_device::config::Config;
use slurm_spank::LogLevel;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The plugin's state in slurmd.
#[derive(Default)]
pub struct State {
    /// The topology cache it wrote, whose lock it holds while it runs.
    cache: Option<Written>,
}

impl State {
    /// slurmd, at its start: see [`init`].
    pub fn init(&mut self, config: &Result<Config, ArgsError>, slurm: &str) {
        if let Some(written) = init(config, slurm) {
            self.cache = Some(written);
        }
    }

    /// slurmd, at its stop: see [`exit`].
    pub fn exit(&mut self) {
        exit(self.cache.take());
    }
}

/// `init` failed in slurmd before [`init`] ran (the context or the arguments could not be
/// read): said, and slurmd goes on (a failing init would stop it).
pub fn init_failed(message: &str) {
    admin_log(LogLevel::Error, &format!("{message}; slurmd goes on, and steps discover the node themselves"));
}

/// slurmd, at its start: tells the admin about a broken configuration or topology= now
/// rather than at the first job, and writes the topology cache (kept, with its lock, for as
/// long as slurmd runs). `slurm` is the Slurm release the plugin was built for, for the log.
fn init(config: &Result<Config, ArgsError>, slurm: &str) -> Option<Written> {
    let c = match config {
        Err(e) => {
            admin_log(LogLevel::Error, &format!("plugstack.conf: {e}"));
            return None;
        }
        Ok(c) => c,
    };
    if let Some(path) = &c.topology {
        if let Err(e) = discover::trusted_xml(path) {
            admin_log(LogLevel::Error, &format!("every mapped step will fail here: {e}"));
        }
    }
    admin_log(LogLevel::Debug, &format!("built for Slurm {slurm}, settings {c:?}"));
    c.cache_dir().and_then(|dir| write_cache(&dir, c.discovery_timeout()))
}

/// slurmd, at its stop: removes the topology cache it wrote (if it is still the one).
/// slurmd is stopping either way; a problem is logged.
fn exit(cache: Option<Written>) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        test_panic("slurmd_exit");
        let Some(written) = cache else { return };
        let path = written.path.clone();
        match written.remove() {
            Ok(true) => admin_log(LogLevel::Debug, &format!("removed the topology cache {}", path.display())),
            Ok(false) => {}
            Err(e) => admin_log(LogLevel::Info, &format!("cannot remove the topology cache {}: {e}", path.display())),
        }
    }));
    if let Err(panic) = outcome {
        admin_log(LogLevel::Error, &entry::internal_error("in slurmd_exit", panic.as_ref()));
    }
}

/// slurmd, at its start: discovers the node and writes the topology cache in `dir`, or says
/// why not.
fn write_cache(dir: &std::path::Path, timeout: std::time::Duration) -> Option<Written> {
    // The slurmd context is slurmd's; make sure of it before writing as root.
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    if comm.trim() != "slurmd" {
        admin_log(LogLevel::Info, &format!("not writing the topology cache from process {:?}", comm.trim()));
        return None;
    }
    // The engine's cache keeps the discovery's error (DiscoverError) for its own.
    let discover = || discover::live(timeout);
    match catch_unwind(AssertUnwindSafe(|| cache::write(dir, discover))) {
        Ok(Ok(written)) => {
            admin_log(LogLevel::Info, &written.note);
            Some(written)
        }
        Ok(Err(e)) => {
            admin_log(LogLevel::Error, &format!("no topology cache, every step will discover the node: {e}"));
            None
        }
        Err(panic) => {
            admin_log(LogLevel::Error, &entry::internal_error("writing the topology cache", panic.as_ref()));
            None
        }
    }
}
