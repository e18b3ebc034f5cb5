//! The plugin files' Slurm release against this node's: Slurm compares major.minor of a
//! SPANK plugin's `plugin_version` with its own and refuses to load any other ("Incompatible
//! Slurm plugin version", `src/common/plugin.c`), which fails every srun, sbatch and salloc
//! of a `required` plugin. [`node_slurm`] reads the node's release, `plugin_version` a plugin
//! file's ([`crate::slurm_release`]), for `map-by-device check`.

use super::{NodeSlurm, PluginEntry};
use crate::slurm_release::{self, SlurmVersion};
use std::path::{Path, PathBuf};

/// A problem for each plugin file built for another release than the node's (or not a
/// loadable plugin at all); a note when the node's release is unknown.
pub(super) fn check(
    entries: &[PluginEntry],
    slurm: Option<&Result<NodeSlurm, NodeSlurmError>>,
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    for e in entries {
        match (&e.built_for, slurm) {
            (None, _) => {}
            (Some(Err(why)), _) => problems.push(format!(
                "{} names {}, which is not a plugin Slurm can load ({why}): reinstall the package",
                e.origin, e.line.path
            )),
            (Some(Ok(built)), Some(Ok(node))) if !built.same_series(node.version) => problems.push(format!(
                "{} was built for Slurm {} (plugin_version {built}), but this node runs Slurm {} ({}): Slurm refuses to \
                 load it (\"Incompatible Slurm plugin version\"), so every srun, sbatch and salloc here fails; install \
                 the map-by-device package built for Slurm {}",
                e.line.path,
                built.series(),
                node.version,
                node.source,
                node.version.series()
            )),
            (Some(Ok(_)), Some(Ok(_)) | None) => {}
            (Some(Ok(built)), Some(Err(why))) => notes.push(format!(
                "cannot tell which Slurm this node runs ({why}); {} was built for Slurm {} and loads into that release only",
                e.line.path,
                built.series()
            )),
        }
    }
}

// --- Reading the versions: what `map-by-device check` hands the report ---

/// Why a plugin file's Slurm release could not be read (its reading error as text: a check
/// input is plain data).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginVersionError {
    #[error("cannot read it: {0}")]
    Read(String),
    #[error(transparent)]
    Elf(#[from] slurm_release::ElfError),
}

/// Why the node's Slurm release is unknown: what `slurmd -V` printed instead, or why there
/// was no slurmd to ask (and no Slurm plugin to read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeSlurmError {
    #[error("slurmd -V printed {printed:?}")]
    Printed { printed: String },
    #[error("no slurmd to ask ({why}) and no task_affinity.so in Slurm's plugin directories")]
    NoSlurmd { why: String },
}

/// The Slurm release a plugin file declares (its `plugin_version`, what Slurm compares). At
/// most 64 MiB are read (the plugin is about 2 MB; a plugstack line may name anything).
pub(super) fn plugin_version(path: &Path) -> Result<SlurmVersion, PluginVersionError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 << 20).read_to_end(&mut bytes))
        .map_err(|e| PluginVersionError::Read(e.to_string()))?;
    Ok(SlurmVersion(slurm_release::exported_u32(&bytes, "plugin_version")?))
}

/// The Slurm release this node runs: what `slurmd -V` says (the daemon that loads the plugin),
/// else, on a node without slurmd, the `plugin_version` of one of Slurm's own plugins in the
/// directories of `plugin_paths` or Slurm's usual plugin directories (the installed release).
pub fn node_slurm(plugin_paths: &[&Path]) -> Result<NodeSlurm, NodeSlurmError> {
    let slurmd = installed_slurmd(plugin_paths)
        .ok_or_else(|| std::io::Error::other("none installed where root may run it"))
        .and_then(|path| std::process::Command::new(path).arg("-V").env_clear().output());
    if let Ok(out) = &slurmd {
        if let Some(version) = SlurmVersion::from_version_output(&String::from_utf8_lossy(&out.stdout)) {
            return Ok(NodeSlurm { version, source: format!("slurmd -V{}", slurm_packaging()) });
        }
    }
    let dirs = plugin_paths.iter().filter_map(|p| p.parent()).map(Path::to_path_buf).chain(
        [
            // Debian's packages, then SchedMD's own (slurm-smd, built from the debian/ in their
            // source), then RPM and source installs.
            "/usr/lib/x86_64-linux-gnu/slurm-wlm",
            "/usr/lib/aarch64-linux-gnu/slurm-wlm",
            "/usr/lib/x86_64-linux-gnu/slurm",
            "/usr/lib/aarch64-linux-gnu/slurm",
            "/usr/lib64/slurm",
            "/usr/lib/slurm",
            "/usr/local/lib/slurm",
        ]
        .into_iter()
        .map(PathBuf::from),
    );
    for dir in dirs {
        // task/affinity is part of every Slurm build.
        let own = dir.join("task_affinity.so");
        if let Ok(version) = plugin_version(&own) {
            return Ok(NodeSlurm { version, source: format!("plugin_version of {}", own.display()) });
        }
    }
    Err(match slurmd {
        Ok(out) => NodeSlurmError::Printed { printed: String::from_utf8_lossy(&out.stdout).trim().to_string() },
        Err(e) => NodeSlurmError::NoSlurmd { why: e.to_string() },
    })
}

/// Which Debian packages the node's Slurm came from, for the report: SchedMD's own
/// (`slurm-smd-slurmd`, whose plugins live in `/usr/lib/<multiarch>/slurm`) or Debian's
/// (`slurmd`, plugins in `.../slurm-wlm`), as dpkg's own database (root's) lists them;
/// nothing elsewhere (RPM, a source install).
fn slurm_packaging() -> &'static str {
    let listed = |name: &str| Path::new("/var/lib/dpkg/info").join(format!("{name}.list")).is_file();
    if listed("slurm-smd-slurmd") {
        ", SchedMD's slurm-smd packages"
    } else if listed("slurmd") {
        ", Debian's packages"
    } else {
        ""
    }
}

/// The installed Slurm's `slurmd`, by its path, never through `PATH` (`check` runs as root,
/// and a directory early in root's `PATH` need not be root's): `sbin/slurmd` beside the
/// plugin directories' prefixes (`/usr/lib/x86_64-linux-gnu/slurm-wlm` -> `/usr/sbin`,
/// `/opt/slurm/lib/slurm` -> `/opt/slurm/sbin`), then `/usr/sbin`, `/usr/local/sbin`; only
/// one root may trust ([`trusted_executable`]) is run.
fn installed_slurmd(plugin_paths: &[&Path]) -> Option<PathBuf> {
    let beside = plugin_paths.iter().flat_map(|p| p.ancestors().skip(2).take(3)).map(|prefix| prefix.join("sbin"));
    let usual = ["/usr/sbin", "/usr/local/sbin"].into_iter().map(PathBuf::from);
    beside.chain(usual).find_map(|dir| trusted_executable(dir.join("slurmd")))
}

/// `path` if it is a file root may run: by the `trusted_fs` rule (root's, in directories only
/// root can write, writable only by root). A symbolic link in such a directory is root's
/// choice (Debian's alternatives: `/usr/sbin/slurmd` -> `/etc/alternatives/slurmd` ->
/// `/usr/sbin/slurmd-wlm`), so it is followed, and where it leads is checked the same way.
fn trusted_executable(mut path: PathBuf) -> Option<PathBuf> {
    use crate::trusted_fs::{problem, Kind, TrustedDir};
    for _ in 0..8 {
        let dir = TrustedDir::open(path.parent()?).ok()?;
        let meta = dir.stat(path.file_name()?.to_str()?).ok()??;
        if meta.kind == Kind::Symlink {
            let target = std::fs::read_link(&path).ok()?;
            path = path.parent()?.join(target);
            continue;
        }
        return problem(Kind::File, meta.kind, meta.uid, meta.mode).is_none().then_some(path);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::{check as check_node, CheckInput, CheckReport, PlugstackLine, Setup};
    use super::*;
    use crate::config::Config;
    use crate::slurm_release::SlurmVersion;

    fn entry(built_for: Option<Result<SlurmVersion, PluginVersionError>>) -> PluginEntry {
        PluginEntry {
            origin: "/etc/slurm/plugstack.conf.d/map-by-device.conf line 30".into(),
            line: PlugstackLine {
                line: 30,
                required: true,
                path: "/usr/lib/x86_64-linux-gnu/slurm-wlm/map_by_device.so".into(),
                args: vec![],
            },
            exists: Some(true),
            built_for,
            discover: None,
        }
    }

    fn release_check(
        built: Option<Result<SlurmVersion, PluginVersionError>>,
        node: Option<Result<NodeSlurm, NodeSlurmError>>,
    ) -> CheckReport {
        let none = crate::check::tests::no_topology();
        let input = CheckInput {
            node: Err(&none),
            topology_source: "this machine".into(),
            setup: Setup::Configured {
                entries: vec![entry(built)],
                origin: "plugstack".into(),
                config: Ok(Config::default()),
            },
            problems: vec![],
            notes: vec![],
            cache: None,
            slurm: node,
            gres: None,
            gres_types_gpu: None,
            slurmd_env: None,
        };
        check_node(&input)
    }

    #[test]
    fn a_plugin_built_for_another_slurm_release_is_not_ready() {
        let slurmd = |v: u32| Some(Ok(NodeSlurm { version: SlurmVersion(v), source: "slurmd -V".into() }));
        // 24.11.5 plugin on a 24.11.7 node: Slurm compares major.minor only.
        let r = release_check(Some(Ok(SlurmVersion(0x180b05))), slurmd(0x180b07));
        assert_eq!(r.problems.len(), 1, "only the topology: {:?}", r.problems);
        assert!(r.text.contains("    built for Slurm 24.11 (24.11.5)"), "{}", r.text);
        assert!(r.text.contains("  Slurm on this node: 24.11.7 (slurmd -V)"), "{}", r.text);
        // The 22.05 build on a 26.05 node: refused, naming both and the fix.
        let r = release_check(Some(Ok(SlurmVersion(0x160508))), slurmd(0x1a0505));
        let p = r.problems.iter().find(|p| p.contains("Incompatible")).expect("a release problem");
        assert!(p.contains("built for Slurm 22.05") && p.contains("runs Slurm 26.05.5 (slurmd -V)"), "{p}");
        assert!(p.contains("package built for Slurm 26.05"), "{p}");
        // Unknown node release: a note, not a problem; an unreadable file: a problem.
        let r = release_check(
            Some(Ok(SlurmVersion(0x160508))),
            Some(Err(NodeSlurmError::NoSlurmd { why: "no slurmd here".into() })),
        );
        assert_eq!(r.problems.len(), 1);
        assert!(r.notes.iter().any(|n| n.contains("no slurmd here") && n.contains("Slurm 22.05")), "{:?}", r.notes);
        let r = release_check(Some(Err(slurm_release::ElfError::Malformed("symbol value").into())), slurmd(0x160508));
        assert!(r.problems.iter().any(|p| p.contains("not a plugin Slurm can load")), "{:?}", r.problems);
    }
}
