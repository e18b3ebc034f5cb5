//! The inputs `check` resolves from its flags: which plugstack.conf, config file and
//! gres.conf to read (the reading itself is the engine's, beside each part of the check it
//! feeds: [`map_by_device::check`]), the plugin's settings, the node, and this machine's
//! topology cache and Slurm release.

use crate::error::CliError;
use crate::flags::{CheckArgs, Source};
use crate::inputs::node_with;
use map_by_device::check::{self, CacheProbe, CheckInput, GresInput, NodeSlurm, PlugstackFindings, Setup};
use map_by_device::config::Config;
use map_by_device::node::Node;
use std::path::{Path, PathBuf};

/// `check`: resolves the settings as the plugin would, loads the node, and reports.
pub(crate) fn run_check(args: &CheckArgs) -> Result<(String, bool), CliError> {
    flags_name_files(args)?;
    let (plugstack, found) = plugstack_findings(args);
    let (setup, notes) = plugin_setup(args, plugstack.as_deref(), &found)?;
    let (config, configured) = match &setup {
        Setup::Configured { config: Ok(c), .. } => (c.clone(), true),
        _ => (Config::default(), false),
    };
    let node = node_with(&args.source, &config, configured);
    let mut problems = found.problems;
    let gres = node.as_ref().ok().and_then(|n| gres_input(args, n, &mut problems)).transpose()?;
    let input = CheckInput {
        node: node.as_ref().map_err(|e| e as &(dyn std::error::Error + 'static)),
        topology_source: topology_source(&args.source, &config),
        cache: cache_probe(args, &setup, &config, configured),
        slurm: slurm_of(&setup),
        slurmd_env: slurmd_env_of(args, &setup),
        setup,
        problems,
        notes,
        gres,
        gres_types_gpu: gres_types(args),
    };
    let report = check::check(&input);
    Ok((report.text, report.ready))
}

/// What the gres.conf check reads: `--gres-conf`, else (this machine) gres.conf next to
/// slurm.conf when there is one ([`check::read_gres`]). A default gres.conf that cannot be
/// read is a problem.
fn gres_input(args: &CheckArgs, node: &Node, problems: &mut Vec<String>) -> Option<Result<GresInput, CliError>> {
    let path = match &args.gres_conf {
        Some(p) => p.clone(),
        None if args.source.topology.is_none() => {
            let p = check::slurm_conf().parent().unwrap_or(Path::new("/etc/slurm")).join("gres.conf");
            p.exists().then_some(p)?
        }
        None => return None,
    };
    match check::read_gres(&path, node) {
        Ok(input) => Some(Ok(input)),
        Err(source) if args.gres_conf.is_some() => Some(Err(CliError::Read { flag: "--gres-conf", path, source })),
        Err(e) => {
            problems.push(format!("cannot read {}: {e}", path.display()));
            None
        }
    }
}

/// Whether this machine's slurm.conf names gpu in `GresTypes` (`None` for another node's
/// `--topology`, or without a readable slurm.conf).
fn gres_types(args: &CheckArgs) -> Option<bool> {
    args.source.topology.is_none().then(|| check::read_gres_types(&check::slurm_conf()).ok()).flatten()
}

/// The files `check` is told to read exist (a typo is a usage error, not a report).
fn flags_name_files(args: &CheckArgs) -> Result<(), CliError> {
    for (flag, path) in [("--plugstack", &args.plugstack), ("--config", &args.config), ("--gres-conf", &args.gres_conf)]
    {
        if let Some(p) = path {
            if let Err(source) = std::fs::metadata(p) {
                return Err(CliError::Read { flag, path: p.clone(), source });
            }
        }
    }
    Ok(())
}

/// The plugstack.conf to read (`--plugstack`, else this machine's unless the check is of
/// a config file or another node's topology) and what its lines say about the plugin.
fn plugstack_findings(args: &CheckArgs) -> (Option<PathBuf>, PlugstackFindings) {
    let plugstack = match &args.plugstack {
        Some(p) => Some(p.clone()),
        None if args.config.is_none() && args.source.topology.is_none() => Some(check::system_plugstack()),
        None => None,
    };
    let mut found = PlugstackFindings::default();
    if let Some(p) = &plugstack {
        if p.exists() || args.plugstack.is_some() {
            check::read_plugstack(p, 0, &mut found);
        } else {
            found.files.push(format!("{} (which does not exist)", p.display()));
        }
    }
    (plugstack, found)
}

/// The plugin's settings: its plugstack line's arguments, with `--config` in place of its
/// `config=`, read as the plugin reads them; and the notes that reading left.
///
/// A `--config` file that the plugstack line does not name is a draft: it is read wherever it
/// is (a home directory, /tmp) for its settings, and a note says where the plugin would not
/// read it (only root's files, in directories only root can write). A file the line names is
/// read as the plugin reads it: from a path root may trust, or not at all.
fn plugin_setup(
    args: &CheckArgs,
    plugstack: Option<&Path>,
    found: &PlugstackFindings,
) -> Result<(Setup, Vec<String>), CliError> {
    let mut notes = Vec::new();
    let setup = match (plugstack, &args.config) {
        (None, None) => Setup::NotExamined,
        (Some(_), None) if found.entries.is_empty() => Setup::NotEnabled { files: found.files.clone() },
        _ => {
            let mut plugin_args: Vec<String> = found.entries.first().map(|e| e.line.args.clone()).unwrap_or_default();
            let mut origin = found.entries.first().map(|e| e.origin.clone()).unwrap_or_default();
            let mut draft = None;
            if let Some(file) = &args.config {
                let file = std::path::absolute(file).map_err(|source| CliError::Read {
                    flag: "--config",
                    path: file.clone(),
                    source,
                })?;
                let named = plugin_args.iter().any(|a| a.strip_prefix("config=").map(Path::new) == Some(&file));
                plugin_args.retain(|a| !a.starts_with("config="));
                plugin_args.push(format!("config={}", file.display()));
                if !origin.is_empty() {
                    origin.push_str(" with ");
                }
                origin.push_str(&format!("config file {}, given with --config", file.display()));
                if !named {
                    draft = Some(file);
                }
            }
            let config = match &draft {
                None => Config::from_plugin_args(&plugin_args),
                Some(file) => {
                    if let Err(e) = map_by_device::trusted_fs::read_file(file, map_by_device::config::MAX_FILE_BYTES) {
                        if !e.is_not_found() {
                            notes.push(draft_note(file, &e));
                        }
                    }
                    Config::from_plugin_args_reading(&plugin_args, |p| Config::from_draft(p, "given with --config"))
                }
            };
            Setup::Configured { entries: found.entries.clone(), origin, config }
        }
    };
    Ok((setup, notes))
}

/// Why the plugin would not read a `--config` draft where it is, and where to put it.
fn draft_note(file: &Path, why: &map_by_device::trusted_fs::TrustError) -> String {
    format!(
        "{} (--config) was checked as a draft: the plugin reads its config file only from a root-owned path, in \
         directories only root can write, and would refuse this one where it is ({why}); install it before naming it \
         in config=, e.g. install -m 0644 {} /etc/slurm/map-by-device.toml",
        file.display(),
        file.display()
    )
}

/// Where the topology comes from, in words.
fn topology_source(source: &Source, config: &Config) -> String {
    match (&source.topology, &config.topology) {
        (Some(p), _) => format!("{} (--topology)", p.display()),
        (None, Some(p)) => format!("{} (topology= of the plugin's settings)", p.display()),
        (None, None) => "this machine (live hwloc discovery)".to_string(),
    }
}

/// The topology cache is this machine's: looked at only when the node checked is this one
/// and the settings use a cache (no topology=, cache not false).
fn cache_probe(args: &CheckArgs, setup: &Setup, config: &Config, configured: bool) -> Option<CacheProbe> {
    match (configured, &args.source.topology, config.cache_dir()) {
        (true, None, Some(dir)) => {
            let plugin = match setup {
                Setup::Configured { entries, .. } => {
                    entries.first().map(|e| PathBuf::from(&e.line.path)).filter(|p| p.is_absolute())
                }
                _ => None,
            };
            Some(check::probe_cache(&dir, plugin.as_deref()))
        }
        _ => None,
    }
}

/// The running slurmd's environment, looked at when the node checked is this one and a
/// plugstack line of it names the plugin (the steps it starts are the plugin's).
fn slurmd_env_of(args: &CheckArgs, setup: &Setup) -> Option<Vec<check::slurmd_env::SlurmdEnvironment>> {
    match setup {
        Setup::Configured { entries, .. } if !entries.is_empty() && args.source.topology.is_none() => {
            Some(check::slurmd_env::read())
        }
        _ => None,
    }
}

/// The node's Slurm release, looked for when a plugstack line names the plugin.
fn slurm_of(setup: &Setup) -> Option<Result<NodeSlurm, check::NodeSlurmError>> {
    match setup {
        Setup::Configured { entries, .. } if !entries.is_empty() => {
            let paths: Vec<&Path> = entries.iter().map(|e| Path::new(&e.line.path)).collect();
            Some(check::node_slurm(&paths))
        }
        _ => None,
    }
}
