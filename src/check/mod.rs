//! `map-by-device check`: is this node ready for `--map-by-device`? One report, in plain
//! words, for the administrator who just installed the plugin or changed a node.
//!
//! It answers, from the same engine the plugin runs:
//! - which devices of each class the node has, in the order tasks are mapped to them, and
//!   which of them a step given only part of the node's CPUs is handed ([`PartialStep`]);
//! - for each GPU, whether it can be named to its runtime and from where (an hwloc backend's
//!   info key, or a kernel driver file), and if not, the refusal a user would get, with its fix;
//! - whether the plugin is enabled (a `plugstack.conf` line) and its settings are valid, and
//!   whether it is loaded after pyxis where pyxis is there too ([`pyxis_order_problems`]);
//! - whether the admin's `default=` maps on this node (planned for one task), and what it does
//!   for a step of one task per device of its class and of one task more ([`DefaultStep`]);
//! - whether a hand-written gres.conf numbers the GPUs in the order the plugin maps them
//!   (PCI bus order), which `SLURM_STEP_GPUS` relies on ([`GresReport`]);
//! - which Slurm release the installed plugin file was built for (its `plugin_version`), and
//!   whether this node runs that release: Slurm loads a SPANK plugin only into its own
//!   major.minor, so a node with another release refuses every srun ([`crate::slurm_release`]);
//! - the topology-cache and GPU-allocation settings (`cache`, `cache_dir`,
//!   `require_step_gpus`, with the rule in force for a step Slurm gave no GPU list, from
//!   slurm.conf's `GresTypes` where it was read) and, for this machine, whether slurmd's cache
//!   file is there and passes the checks the steps make ([`cache_state`]), and whether it was
//!   written by another build of the plugin (an upgrade's window: the steps discover the node
//!   until slurmd restarts);
//! - for this machine, whether the running slurmd's `LD_LIBRARY_PATH` has a relative or empty
//!   entry, which a step's root processes resolve in the job's directory ([`slurmd_env`]).
//!
//! The node is ready when nothing a job could ask for is refused because of the node or its
//! configuration: the settings are valid, the plugin file exists, every GPU can be named and
//! the default (if any) maps. A default that finds no device of its class is *not* a problem:
//! an admin default is soft, and such a node runs its jobs unmapped by design. The topology
//! cache never makes a node unready: without it (or with one the steps do not trust) every
//! step discovers the node itself, which is slower but maps the same way; it is reported in
//! the notes.
//!
//! [`check`] is pure: it reads only the values it is handed ([`CheckInput`]). The reading
//! that fills them lives beside the part it feeds, for the CLI to call: [`read_plugstack`]
//! (the plugstack files and their includes), [`node_slurm`] (the node's Slurm release),
//! [`read_gres`] (gres.conf and the NVIDIA minors), [`read_gres_types`] (slurm.conf's
//! `GresTypes`), [`probe_cache`] (the topology cache), [`slurmd_env::read`] (the running
//! slurmd's environment).

mod findings;
mod gres;
mod plugstack;
mod release;
mod render;
pub mod slurmd_env;

pub use crate::config::CACHE_FILE_NAME;
pub use findings::partial_steps;
pub use gres::{read_gres_types, read_input as read_gres, GresGpu, GresInput, GresReport};
pub use plugstack::{
    is_pyxis, is_this_plugin, parse_plugstack, pyxis_order_problems, read_plugstack, slurm_conf, system_plugstack,
    LoadedPlugin, Place, PluginEntry, PlugstackFindings, PlugstackItem, PlugstackLine, Setup,
};
pub use release::{node_slurm, NodeSlurmError, PluginVersionError};

use crate::cpuset::CpuSet;
use crate::device::DeviceClass;
use crate::node::Node;
use std::path::PathBuf;

/// Everything [`check`] looks at.
#[derive(Debug)]
pub struct CheckInput<'a> {
    /// The node, or why its topology could not be loaded (the loader's or the caller's error).
    pub node: Result<&'a Node, &'a (dyn std::error::Error + 'static)>,
    /// Where the topology came from, in words (`this machine (live hwloc discovery)`).
    pub topology_source: String,
    pub setup: Setup,
    /// Problems the caller met while reading files (an unreadable include, an invalid line).
    pub problems: Vec<String>,
    /// Notes the caller met while reading files (a `--config` draft the plugin would not read
    /// where it is).
    pub notes: Vec<String>,
    /// What the caller saw of the topology cache on this machine; `None` when it did not look
    /// (a `--topology` preview of another node, settings without a cache, or no settings).
    pub cache: Option<CacheProbe>,
    /// The Slurm release of this node, or why it is unknown; `None` when not looked for (no
    /// plugstack line names the plugin).
    pub slurm: Option<Result<NodeSlurm, NodeSlurmError>>,
    /// The node's gres.conf and its NVIDIA GPUs' minor numbers; `None` when not looked at.
    pub gres: Option<GresInput>,
    /// Whether slurm.conf's `GresTypes` names gpu, so that Slurm's gres/gpu runs in every step
    /// of the node ([`read_gres_types`]); `None` when not read. It says which rule holds for a
    /// step without `SLURM_STEP_GPUS` where `require_step_gpus` is unset.
    pub gres_types_gpu: Option<bool>,
    /// The running slurmd's environment (every slurmd found); `None` when not looked at (the
    /// check of another node, or of settings no plugstack line of this machine names).
    pub slurmd_env: Option<Vec<slurmd_env::SlurmdEnvironment>>,
}

/// The Slurm release this node runs, and where that was read (`slurmd -V`, a Slurm plugin's
/// `plugin_version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSlurm {
    pub version: crate::slurm_release::SlurmVersion,
    pub source: String,
}

/// What the caller found when it read the topology cache on this machine the way a step
/// does ([`crate::cache::read`]): the description of a cache the steps would use, or why not.
#[derive(Debug)]
pub struct CacheProbe {
    /// `<cache_dir>/topology.json`.
    pub path: PathBuf,
    pub outcome: Result<String, crate::cache::Miss>,
}

/// What [`cache_state`] makes of a [`CacheProbe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheState {
    /// No cache file (or no directory): slurmd has not written one since it last started
    /// with the plugin, so every step discovers the node itself.
    Absent { path: PathBuf, why: String },
    /// There is one, but the steps will not trust it: the reasons, one each.
    Untrusted { path: PathBuf, reasons: Vec<String> },
    /// There is one, written by another build of the plugin than the one plugstack.conf names
    /// (its `.so` was replaced since slurmd started): the steps discover the node until
    /// slurmd restarts and rewrites it.
    OtherBuild { path: PathBuf },
    /// The steps use it: every test a step makes passed (owner and mode of the directories and
    /// files, the running slurmd's lock, the plugin build, this boot).
    Trusted { path: PathBuf, description: String },
}

/// How a GPU is named to its runtime, or why it cannot be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuNaming {
    /// Named by `id`; `source` says from where (`hwloc: NVIDIAUUID of nvml0`, a driver file).
    Named { id: String, source: String },
    /// A job mapping this GPU is refused with `message` (the engine's own words and fix).
    Refused { message: String },
}

/// One GPU's line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuStatus {
    pub busid: String,
    pub name: String,
    pub naming: GpuNaming,
}

/// What the admin's default does on this node (as the plugin applies a default:
/// [`crate::soft::as_default`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultOutcome {
    /// No default configured (or the settings could not be read).
    NotConfigured,
    /// `default=none`.
    Off,
    /// It maps a one-task step (a launcher's daemon): the spec applied (the default, with
    /// `ndev=auto` where the step has more devices than tasks), that task's plan line and the
    /// plan's warnings; then the larger steps.
    Maps { spec: String, applied: String, task: String, warnings: Vec<String>, larger: Vec<DefaultStep> },
    /// It steps aside for a one-task step (`closest`, `ppr=`: a share it cannot take).
    Aside { spec: String, why: String, larger: Vec<DefaultStep> },
    /// No device of its class here: jobs run unmapped (soft), which is not a problem.
    NotApplicable { spec: String, reason: String },
    /// Refused for another reason: jobs run unmapped although the admin meant them mapped.
    Refused { spec: String, message: String },
}

/// The default planned for a step of `ntasks` tasks on the whole node: one task per device
/// of its class here, and one task more (what jobs of those sizes get).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultStep {
    pub ntasks: u32,
    /// Why this size: `one per gpu device here`, `one more than the gpu devices here`.
    pub why: String,
    pub outcome: StepOutcome,
}

/// What a default does for one step size ([`DefaultStep`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// Each task's device names and the plan's warnings.
    Maps { tasks: Vec<Vec<String>>, warnings: Vec<String> },
    /// The default steps aside (such jobs run unmapped, seeing every device): why.
    Aside(String),
    /// Refused (such jobs run unmapped: a default is soft).
    Refused(crate::plan::PlanError),
}

/// One device's line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLine {
    pub class: DeviceClass,
    pub busid: String,
    pub name: String,
    pub locality: String,
    /// The variables a task mapped to this device alone is given (names only).
    pub variables: Vec<String>,
}

/// What a step given only `cpus` of the node is handed of `class`, by the same rule as the
/// plugin and `plan --allowed-cpus` ([`crate::plan::device_order`]): the devices local to
/// those CPUs, in order, then the others, which only `bind=none` hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialStep {
    pub class: DeviceClass,
    pub cpus: CpuSet,
    /// Device names, local ones first.
    pub local: Vec<String>,
    pub elsewhere: Vec<String>,
}

/// The outcome of [`check`].
#[derive(Debug, Clone)]
pub struct CheckReport {
    pub host: Option<String>,
    pub topology_source: String,
    pub devices: Vec<DeviceLine>,
    /// PCI display functions that are not compute GPUs (BMC adapters), by bus id and names.
    pub ignored_display: Vec<String>,
    /// For each class whose devices do not all share one locality: what a step holding only
    /// one of those localities' CPUs is handed.
    pub partial: Vec<PartialStep>,
    pub gpus: Vec<GpuStatus>,
    /// gres.conf's GPUs for this node against the mapping order, when it was read.
    pub gres: Option<GresReport>,
    pub default: DefaultOutcome,
    /// Why the node is not ready, one line each (empty when ready).
    pub problems: Vec<String>,
    /// Things worth knowing that do not make the node unready.
    pub notes: Vec<String>,
    /// The topology cache on this machine, when the caller looked ([`CheckInput::cache`]).
    pub cache: Option<CacheState>,
    /// The report in plain words.
    pub text: String,
    pub ready: bool,
}

/// Checks a node and its plugin configuration. Pure.
pub fn check(input: &CheckInput<'_>) -> CheckReport {
    let mut problems = input.problems.clone();
    let mut notes = input.notes.clone();
    let config = findings::setup(&input.setup, &mut problems);
    if let Setup::Configured { entries, .. } = &input.setup {
        release::check(entries, input.slurm.as_ref(), &mut problems, &mut notes);
    }
    let cache = findings::cache(input.cache.as_ref(), &mut notes);
    if let Some(found) = &input.slurmd_env {
        slurmd_env::problems(found, &mut problems, &mut notes);
    }
    let mut report = CheckReport {
        host: None,
        topology_source: input.topology_source.clone(),
        devices: Vec::new(),
        ignored_display: Vec::new(),
        partial: Vec::new(),
        gpus: Vec::new(),
        gres: None,
        default: DefaultOutcome::NotConfigured,
        problems: Vec::new(),
        notes: Vec::new(),
        cache,
        text: String::new(),
        ready: false,
    };
    match &input.node {
        Err(e) => problems.push(format!("the topology cannot be loaded: {e}")),
        Ok(node) => {
            report.host = Some(node.hostname().to_string());
            report.devices = findings::devices(node, &mut problems, &mut notes);
            report.ignored_display = findings::ignored_displays(node);
            report.partial = partial_steps(node);
            report.gpus = findings::gpus(node, &mut problems);
            report.gres = input.gres.as_ref().and_then(|g| gres::check(g, node, &mut problems, &mut notes));
            findings::step_gpus_rule(node, config, input.gres_types_gpu, report.gres.as_ref(), &mut notes);
            report.default = findings::default(node, config, &mut problems, &mut notes);
        }
    }
    report.ready = problems.is_empty() && input.node.is_ok();
    report.problems = problems;
    report.notes = notes;
    report.text = render::report(&report, input);
    report
}

/// Reads the topology cache on this machine exactly as a step does, except that the plugin
/// build is the plugstack.conf entry's file (the steps compare the .so they were loaded from).
pub fn probe_cache(dir: &std::path::Path, plugin: Option<&std::path::Path>) -> CacheProbe {
    let identity = plugin.and_then(|p| crate::cache::plugin_identity(p).ok());
    let outcome = crate::cache::read(dir, identity.as_deref()).map(|c| c.description);
    CacheProbe { path: dir.join(CACHE_FILE_NAME), outcome }
}

/// What a [`CacheProbe`] means for the steps. Pure: the caller ran the steps' own reader.
pub fn cache_state(probe: &CacheProbe) -> CacheState {
    let path = probe.path.clone();
    match &probe.outcome {
        Ok(description) => CacheState::Trusted { path, description: description.clone() },
        Err(crate::cache::Miss::Absent(why)) => CacheState::Absent { path, why: why.to_string() },
        Err(crate::cache::Miss::Rejected(crate::cache::Rejected {
            why: crate::cache::Rejection::OtherBuild { .. },
            ..
        })) => CacheState::OtherBuild { path },
        Err(crate::cache::Miss::Rejected(why)) => CacheState::Untrusted { path, reasons: vec![why.to_string()] },
    }
}

/// How `d` is named, or the refusal a job mapping it alone would get (the engine's words).
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn plugstack_lines_as_slurm_reads_them() {
        let text = "# comment\n\
                    include /etc/slurm/plugstack.conf.d/*.conf\n\
                    \n\
                    optional /usr/lib/slurm/map_by_device.so default=gpu  topology=/etc/t.xml # note\n\
                    required   spank_other.so\n\
                    required\n\
                    bogus line\n";
        let items = parse_plugstack(text);
        assert_eq!(
            items,
            vec![
                PlugstackItem::Include { line: 2, pattern: "/etc/slurm/plugstack.conf.d/*.conf".into() },
                PlugstackItem::Plugin(PlugstackLine {
                    line: 4,
                    required: false,
                    path: "/usr/lib/slurm/map_by_device.so".into(),
                    args: vec!["default=gpu".into(), "topology=/etc/t.xml".into()],
                }),
                PlugstackItem::Plugin(PlugstackLine {
                    line: 5,
                    required: true,
                    path: "spank_other.so".into(),
                    args: vec![],
                }),
                PlugstackItem::Invalid { line: 6, text: "required".into() },
                PlugstackItem::Invalid { line: 7, text: "bogus line".into() },
            ]
        );
    }

    #[test]
    fn recognises_the_plugin_by_file_name() {
        assert!(is_this_plugin("/usr/lib/x86_64-linux-gnu/slurm-wlm/map_by_device.so"));
        assert!(is_this_plugin("/work/target/release/libmap_by_device_spank.so"));
        assert!(is_this_plugin("map_by_device.so"));
        assert!(!is_this_plugin("/usr/lib/slurm/spank_pyxis.so"));
        assert!(!is_this_plugin("/opt/map_by_device/spank_other.so"));
    }

    /// pyxis loaded after this plugin hands every task task 0's variables: a problem naming
    /// the line to move, through `include`s too; pyxis first (or absent) is no problem.
    #[test]
    fn pyxis_must_be_loaded_before_the_plugin() {
        let dir = std::env::temp_dir().join(format!("mbd-pyxis-order-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("plugstack.conf.d")).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        let read = |name: &str| {
            let mut found = PlugstackFindings::default();
            read_plugstack(&dir.join(name), 0, &mut found);
            found
        };
        let d = dir.display();
        let ours = "required /usr/lib/slurm/map_by_device.so default=gpu\n";
        let pyxis = "required /usr/local/lib/slurm/spank_pyxis.so\n";
        // Same file, wrong order: move our line after pyxis's.
        write("a.conf", &format!("# site\n{ours}{pyxis}"));
        let found = read("a.conf");
        assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
        let p = &found.problems[0];
        assert!(
            p.starts_with(&format!("pyxis ({d}/a.conf line 3) is loaded after map-by-device ({d}/a.conf line 2)")),
            "{p}"
        );
        assert!(p.contains("every task would get task 0's CUDA_VISIBLE_DEVICES"), "{p}");
        assert!(p.contains("pyxis 0.24.0, pyxis_slurmstepd.c"), "{p}");
        assert!(
            p.ends_with(&format!(
                "move {d}/a.conf line 2 (the line that loads map-by-device) after line 3 (the line that loads pyxis)"
            )),
            "{p}"
        );
        // The right order, and no pyxis at all: nothing to say.
        write("b.conf", &format!("{pyxis}{ours}"));
        assert!(read("b.conf").problems.is_empty());
        write("c.conf", ours);
        assert!(read("c.conf").problems.is_empty());
        // pyxis brought in by an include after our line: move our line after the include.
        write("plugstack.conf.d/pyxis.conf", pyxis);
        write("d.conf", &format!("{ours}include plugstack.conf.d/*.conf\n"));
        let found = read("d.conf");
        assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
        assert!(
            found.problems[0].ends_with(&format!(
                "move {d}/d.conf line 1 (the line that loads map-by-device) after line 2 (the include that brings pyxis in)"
            )),
            "{}",
            found.problems[0]
        );
        // Both in files of one include, ours sorting first: rename ours.
        write("plugstack.conf.d/map-by-device.conf", ours);
        write("e.conf", "include plugstack.conf.d/*.conf\n");
        let found = read("e.conf");
        assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
        assert!(
            found.problems[0].ends_with(&format!(
                "rename {d}/plugstack.conf.d/map-by-device.conf so that it sorts after {d}/plugstack.conf.d/pyxis.conf \
                 (the include at {d}/e.conf line 1 reads them in name order)"
            )),
            "{}",
            found.problems[0]
        );
        // Renamed to sort after pyxis's file: fine.
        std::fs::rename(
            dir.join("plugstack.conf.d/map-by-device.conf"),
            dir.join("plugstack.conf.d/zz-map-by-device.conf"),
        )
        .unwrap();
        let found = read("e.conf");
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        assert_eq!(found.loaded.len(), 2);
        assert!(is_pyxis(&found.loaded[0].path) && is_this_plugin(&found.loaded[1].path));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unloadable_topology_is_not_ready() {
        let unreadable = crate::load::LoadError::Read {
            path: "/x.xml".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        let input = CheckInput {
            node: Err(&unreadable),
            topology_source: "/x.xml".into(),
            setup: Setup::NotExamined,
            problems: vec![],
            notes: vec![],
            cache: None,
            slurm: None,
            gres: None,
            gres_types_gpu: None,
            slurmd_env: None,
        };
        let r = check(&input);
        assert!(!r.ready);
        assert!(r.text.contains(&format!("the topology cannot be loaded: {unreadable}")), "{}", r.text);
        assert!(r.text.contains("Ready: no, 1 problem:"), "{}", r.text);
    }

    /// Which rule gives a step without `SLURM_STEP_GPUS` its GPUs: the settings line says it
    /// from slurm.conf's GresTypes, and a note where the settings and Slurm disagree.
    #[test]
    fn the_step_gpus_rule_in_force_is_said() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies/turin-h200.xml");
        let node =
            crate::node::Node::new(crate::load::from_xml_file(&path).unwrap(), crate::node::NodeOptions::default());
        let gres_conf = |text: &str| GresInput {
            origin: "gres.conf".into(),
            text: text.into(),
            proc_root: None,
            nvidia_minors: vec![],
        };
        let run = |require: Option<bool>, types: Option<bool>, gres: Option<GresInput>| {
            let config = Config { require_step_gpus: require, ..Config::default() };
            let input = CheckInput {
                node: Ok(&node),
                topology_source: "t".into(),
                setup: Setup::Configured { entries: vec![], origin: "c".into(), config: Ok(config) },
                problems: vec![],
                notes: vec![],
                cache: None,
                slurm: None,
                gres,
                gres_types_gpu: types,
                slurmd_env: None,
            };
            check(&input)
        };
        let r = run(None, Some(true), None);
        assert!(r.text.contains("require_step_gpus (unset): slurm.conf's GresTypes names gpu, so Slurm's gres/gpu runs in every step: a step without SLURM_STEP_GPUS has no GPU here"), "{}", r.text);
        let r = run(None, Some(false), None);
        assert!(r.text.contains("(unset): slurm.conf's GresTypes names no gpu, so Slurm does not manage GPUs: every GPU of the node is a step's"), "{}", r.text);
        // GresTypes names gpu but gres.conf gives this node none: every step has no GPU here.
        let r = run(None, Some(true), Some(gres_conf("NodeName=other Name=gpu File=/dev/nvidia0\n")));
        assert!(
            r.notes.iter().any(|n| n.contains("gres.conf gives this node none of its 4 GPUs")
                && n.contains("require_step_gpus = false")),
            "{:?}",
            r.notes
        );
        // require_step_gpus = false where Slurm manages GPUs: a note to remove it.
        let r = run(Some(false), Some(true), None);
        assert!(
            r.notes
                .iter()
                .any(|n| n.starts_with("require_step_gpus = false: a step Slurm gave no GPU maps over the 4 GPUs")),
            "{:?}",
            r.notes
        );
        let r = run(Some(true), Some(true), None);
        assert!(
            r.text.contains("require_step_gpus true: a step without SLURM_STEP_GPUS has no GPU here"),
            "{}",
            r.text
        );
        assert!(!r.notes.iter().any(|n| n.contains("require_step_gpus")), "{:?}", r.notes);
    }

    /// A node that could not be loaded, for the tests of what else `check` says.
    pub(super) fn no_topology() -> crate::load::LoadError {
        crate::load::LoadError::Read {
            path: "/t.xml".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }
    }

    fn probe(outcome: Result<&str, crate::cache::Miss>) -> CacheProbe {
        CacheProbe { path: "/run/map-by-device/topology.json".into(), outcome: outcome.map(str::to_string) }
    }

    #[test]
    fn the_cache_is_judged_by_the_steps_own_reader() {
        use crate::cache::{Absent, Miss, Rejected, Rejection};
        let path = PathBuf::from("/run/map-by-device/topology.json");
        assert_eq!(
            cache_state(&probe(Ok("slurmd's cache"))),
            CacheState::Trusted { path: path.clone(), description: "slurmd's cache".into() }
        );
        assert_eq!(
            cache_state(&probe(Err(Miss::Absent(Absent::File(path.clone()))))),
            CacheState::Absent { path: path.clone(), why: "no cache file /run/map-by-device/topology.json".into() }
        );
        assert_eq!(
            cache_state(&probe(Err(Miss::Rejected(Rejected { path: path.clone(), why: Rejection::TooLarge })))),
            CacheState::Untrusted {
                path,
                reasons: vec!["cache /run/map-by-device/topology.json not used: larger than 67108864 bytes".into()]
            }
        );
    }

    #[test]
    fn the_cache_never_makes_a_node_unready() {
        let none = no_topology();
        let input = CheckInput {
            node: Err(&none),
            topology_source: "this machine".into(),
            setup: Setup::Configured { entries: vec![], origin: "config file c".into(), config: Ok(Config::default()) },
            problems: vec![],
            notes: vec![],
            cache: Some(probe(Err(crate::cache::Miss::Rejected(crate::cache::Rejected {
                path: "/run/map-by-device/topology.json".into(),
                why: crate::cache::Rejection::OldBoot { cached: "a".into(), now: "b".into() },
            })))),
            slurm: None,
            gres: None,
            gres_types_gpu: None,
            slurmd_env: None,
        };
        let r = check(&input);
        assert_eq!(r.problems.len(), 1, "only the topology: {:?}", r.problems);
        assert!(r.notes.iter().any(|n| n.contains("will not use the topology cache")), "{:?}", r.notes);
        assert!(r.text.contains("    cache             true (default)"), "{}", r.text);
        assert!(r.text.contains("    cache_dir         /run/map-by-device (default)\n"), "{}", r.text);
        assert!(r.text.contains("    require_step_gpus (unset): where Slurm's gres/gpu runs"), "{}", r.text);
        assert!(
            r.text.contains("topology cache /run/map-by-device/topology.json: not used by the steps"),
            "{}",
            r.text
        );
    }

    /// After the plugin's .so is replaced (an upgrade), slurmd's cache names another build
    /// until slurmd restarts: the steps discover the node meanwhile, and check says so.
    #[test]
    fn a_cache_of_another_build_is_an_upgrades_window() {
        let none = no_topology();
        let path = PathBuf::from("/run/map-by-device/topology.json");
        let other = crate::cache::Rejected {
            path: path.clone(),
            why: crate::cache::Rejection::OtherBuild { cached: "1:2:3:4.0".into(), reader: "1:5:3:4.0".into() },
        };
        let mut input = CheckInput {
            node: Err(&none),
            topology_source: "this machine".into(),
            setup: Setup::Configured { entries: vec![], origin: "config file c".into(), config: Ok(Config::default()) },
            problems: vec![],
            notes: vec![],
            cache: Some(probe(Err(crate::cache::Miss::Rejected(other)))),
            slurm: None,
            gres: None,
            gres_types_gpu: None,
            slurmd_env: None,
        };
        let r = check(&input);
        assert_eq!(r.cache, Some(CacheState::OtherBuild { path }));
        assert_eq!(r.problems.len(), 1, "only the topology: {:?}", r.problems);
        assert!(
            r.notes.iter().any(|n| n.contains(
                "was written by another build of the plugin (its .so was replaced since \
                 slurmd started, as an upgrade does): until slurmd restarts, every step discovers the node itself"
            )),
            "{:?}",
            r.notes
        );
        assert!(
            r.text.contains(
                "topology cache /run/map-by-device/topology.json: written by another build of the plugin, not used by \
                 the steps until slurmd restarts"
            ),
            "{}",
            r.text
        );
        // slurmd's environment, when looked at: a relative library path makes the node unready.
        input.slurmd_env =
            Some(vec![slurmd_env::SlurmdEnvironment { pid: 9, library_path: Ok(Some("/usr/local/lib:.".into())) }]);
        let r = check(&input);
        assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
        assert!(r.text.contains("  - slurmd (pid 9) runs with LD_LIBRARY_PATH=\"/usr/local/lib:.\""), "{}", r.text);
    }
}
