//! The plugin files' Slurm release against this node's: Slurm compares major.minor of a
//! SPANK plugin's `plugin_version` with its own and refuses to load any other ("Incompatible
//! Slurm plugin version", `src/common/plugin.c`), which fails every srun, sbatch and salloc
//! of a `required` plugin. The caller reads both versions ([`crate::slurm_release`]).

use super::{NodeSlurm, PluginEntry};

/// A problem for each plugin file built for another release than the node's (or not a
/// loadable plugin at all); a note when the node's release is unknown.
pub(super) fn check(
    entries: &[PluginEntry],
    slurm: Option<&Result<NodeSlurm, String>>,
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

#[cfg(test)]
mod tests {
    use super::super::{check as check_node, CheckInput, CheckReport, PlugstackLine, Setup};
    use super::*;
    use crate::config::Config;
    use crate::slurm_release::SlurmVersion;

    fn entry(built_for: Option<Result<SlurmVersion, String>>) -> PluginEntry {
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
        built: Option<Result<SlurmVersion, String>>,
        node: Option<Result<NodeSlurm, String>>,
    ) -> CheckReport {
        let input = CheckInput {
            node: Err("no topology".into()),
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
        let r = release_check(Some(Ok(SlurmVersion(0x160508))), Some(Err("no slurmd here".into())));
        assert_eq!(r.problems.len(), 1);
        assert!(r.notes.iter().any(|n| n.contains("no slurmd here") && n.contains("Slurm 22.05")), "{:?}", r.notes);
        let r = release_check(Some(Err("no exported symbol plugin_version".into())), slurmd(0x160508));
        assert!(r.problems.iter().any(|p| p.contains("not a plugin Slurm can load")), "{:?}", r.problems);
    }
}
