//! `map-by-device check`: is this node ready for `--map-by-device`? One report, in plain
//! words, for the administrator who just installed the plugin or changed a node.
//!
//! It answers, from the same engine the plugin runs:
//! - which devices of each class the node has, in the order tasks are mapped to them;
//! - for each GPU, whether it can be named to its runtime and from where (an hwloc backend's
//!   info key, or a kernel driver file), and if not, the refusal a user would get, with its fix;
//! - whether the plugin is enabled (a `plugstack.conf` line) and its settings are valid;
//! - whether the admin's `default=` maps on this node (planned for one task);
//! - the topology-cache and GPU-allocation settings (`cache`, `cache_dir`,
//!   `require_step_gpus`) and, for this machine, whether slurmd's cache file is there and
//!   passes the owner and mode checks the steps make ([`cache_state`]).
//!
//! The node is ready when nothing a job could ask for is refused because of the node or its
//! configuration: the settings are valid, the plugin file exists, every GPU can be named and
//! the default (if any) maps. A default that finds no device of its class is *not* a problem:
//! an admin default is soft, and such a node runs its jobs unmapped by design. The topology
//! cache never makes a node unready: without it (or with one the steps do not trust) every
//! step discovers the node itself, which is slower but maps the same way; it is reported in
//! the notes.
//!
//! Pure: the caller (the CLI) reads the files, the topology and the cache file's metadata;
//! this module only reads the values it is handed. [`parse_plugstack`] reads one
//! `plugstack.conf` text; following its `include` lines is the caller's job.

use crate::config::{Config, DEFAULT_CACHE_DIR, DEFAULT_PROC_ROOT, DEFAULT_SYS_ROOT};
use crate::device::{Device, DeviceClass, GpuIdentity, IdentitySource};
use crate::node::Node;
use crate::plan::{plan, PlanError, StepFacts};
use crate::report;
use crate::spec::{BindLevel, Spec, Target};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

pub use crate::config::CACHE_FILE_NAME;

/// One `required`/`optional` line of a `plugstack.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlugstackLine {
    /// 1-based line number in its file.
    pub line: usize,
    pub required: bool,
    /// The plugin path as written (absolute, or relative to Slurm's `PluginDir`).
    pub path: String,
    /// The plugin's arguments: the rest of the line split on blanks (Slurm honours no quotes).
    pub args: Vec<String>,
}

/// What a `plugstack.conf` line says, as Slurm reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlugstackItem {
    Plugin(PlugstackLine),
    /// `include PATTERN` (a glob; relative patterns are relative to the including file).
    Include {
        line: usize,
        pattern: String,
    },
    /// A line Slurm would refuse (it fails every srun): its number and text.
    Invalid {
        line: usize,
        text: String,
    },
}

/// Reads one `plugstack.conf` text: `#` starts a comment, blank lines are skipped, words are
/// split on blanks.
pub fn parse_plugstack(text: &str) -> Vec<PlugstackItem> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("");
        let mut words = content.split_whitespace();
        let Some(first) = words.next() else { continue };
        match first {
            "required" | "optional" => match words.next() {
                Some(path) => out.push(PlugstackItem::Plugin(PlugstackLine {
                    line,
                    required: first == "required",
                    path: path.to_string(),
                    args: words.map(str::to_string).collect(),
                })),
                None => out.push(PlugstackItem::Invalid { line, text: raw.trim().to_string() }),
            },
            "include" => match words.next() {
                Some(pattern) => out.push(PlugstackItem::Include { line, pattern: pattern.to_string() }),
                None => out.push(PlugstackItem::Invalid { line, text: raw.trim().to_string() }),
            },
            _ => out.push(PlugstackItem::Invalid { line, text: raw.trim().to_string() }),
        }
    }
    out
}

/// Whether a plugstack path names this plugin: the packaged `map_by_device.so`, or the
/// build tree's `libmap_by_device_spank.so`.
pub fn is_this_plugin(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.contains("map_by_device") || file.contains("map-by-device")
}

/// The plugin's line as found in the `plugstack.conf` files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginEntry {
    /// `FILE line N`.
    pub origin: String,
    pub line: PlugstackLine,
    /// Whether the plugin file exists; `None` when the path is relative (resolved by Slurm
    /// against its `PluginDir`, which is not checked here).
    pub exists: Option<bool>,
}

/// What the caller found about the plugin's configuration.
#[derive(Debug, Clone)]
pub enum Setup {
    /// No `plugstack.conf` or config file was examined (a preview of an XML).
    NotExamined,
    /// The plugin is configured; `config` is the result of reading its settings.
    Configured {
        /// The `plugstack.conf` line(s) that load the plugin (none when only `--config` was given).
        entries: Vec<PluginEntry>,
        /// Where the settings come from, for the report (`FILE line N`, `config file F`).
        origin: String,
        config: Result<Config, String>,
    },
    /// The `plugstack.conf` files read do not load the plugin.
    NotEnabled {
        /// The files read (the main file and its includes).
        files: Vec<String>,
    },
}

/// Everything [`check`] looks at.
#[derive(Debug, Clone)]
pub struct CheckInput<'a> {
    /// The node, or why its topology could not be loaded.
    pub node: Result<&'a Node, String>,
    /// Where the topology came from, in words (`this machine (live hwloc discovery)`).
    pub topology_source: String,
    pub setup: Setup,
    /// Problems the caller met while reading files (an unreadable include, an invalid line).
    pub problems: Vec<String>,
    /// What the caller saw of the topology cache on this machine; `None` when it did not look
    /// (a `--topology` preview of another node, settings without a cache, or no settings).
    pub cache: Option<CacheProbe>,
}

/// What the caller found when it read the topology cache on this machine the way a step
/// does ([`crate::cache::read`]): the description of a cache the steps would use, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// What the admin's default does on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultOutcome {
    /// No default configured (or the settings could not be read).
    NotConfigured,
    /// `default=none`.
    Off,
    /// It maps: one task's plan line, and the plan's warnings.
    Maps { spec: String, task: String, warnings: Vec<String> },
    /// No device of its class here: jobs run unmapped (soft), which is not a problem.
    NotApplicable { spec: String, reason: String },
    /// Refused for another reason: jobs run unmapped although the admin meant them mapped.
    Refused { spec: String, message: String },
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

/// The outcome of [`check`].
#[derive(Debug, Clone)]
pub struct CheckReport {
    pub host: Option<String>,
    pub topology_source: String,
    pub devices: Vec<DeviceLine>,
    /// PCI display functions that are not compute GPUs (BMC adapters), by bus id and names.
    pub ignored_display: Vec<String>,
    pub gpus: Vec<GpuStatus>,
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
    let mut notes = Vec::new();

    let config = match &input.setup {
        Setup::NotExamined => None,
        Setup::NotEnabled { files } => {
            problems.push(format!(
                "the plugin is not enabled: no required/optional line for map_by_device.so in {} \
                 (add one, see plugstack.conf.example or /etc/slurm/plugstack.conf.d/map-by-device.conf)",
                if files.is_empty() { "plugstack.conf".to_string() } else { files.join(", ") }
            ));
            None
        }
        Setup::Configured { entries, config, origin } => {
            if entries.len() > 1 {
                let where_: Vec<&str> = entries.iter().map(|e| e.origin.as_str()).collect();
                problems.push(format!(
                    "the plugin is loaded {} times ({}): Slurm would register --map-by-device twice; keep one line",
                    entries.len(),
                    where_.join(", ")
                ));
            }
            for e in entries {
                if !e.line.required {
                    problems.push(format!(
                        "{} loads the plugin as optional: Slurm ignores the failures of an optional plugin, so a \
                         request it refuses (or a broken configuration) runs the job unmapped instead of failing \
                         the step; write required",
                        e.origin
                    ));
                }
                if e.exists == Some(false) {
                    problems.push(format!(
                        "{} names the plugin {}, which does not exist: {}",
                        e.origin,
                        e.line.path,
                        if e.line.required {
                            "every srun on this node fails (required); install the package or fix the path"
                        } else {
                            "Slurm skips it (optional), so --map-by-device is unknown here; install the package or fix the path"
                        }
                    ));
                }
            }
            match config {
                Ok(c) => Some(c),
                Err(e) => {
                    problems.push(format!(
                        "configuration error ({origin}): {e}; every srun/sbatch/salloc is refused until it is fixed"
                    ));
                    None
                }
            }
        }
    };

    // The cache makes steps faster, not different: whatever is found is a note.
    let cache = input.cache.as_ref().map(cache_state);
    match &cache {
        Some(CacheState::Absent { path, why }) => notes.push(format!(
            "no topology cache ({why}): every step discovers the node itself (about 15 ms per step) until slurmd \
             starts with the plugin in its plugstack.conf and writes {} (if it cannot, slurmd.log says why)",
            path.display()
        )),
        Some(CacheState::Untrusted { path, reasons }) => notes.push(format!(
            "the steps will not use the topology cache {}: {}; they discover the node themselves (about 15 ms per \
             step). Restart slurmd, which rewrites the file, after making the cache directory and every directory \
             above it root's and writable only by root (mode 0755) if they are not",
            path.display(),
            reasons.join("; ")
        )),
        _ => {}
    }

    let node = match &input.node {
        Ok(n) => n,
        Err(e) => {
            problems.push(format!("the topology cannot be loaded: {e}"));
            let mut report = CheckReport {
                host: None,
                topology_source: input.topology_source.clone(),
                devices: Vec::new(),
                ignored_display: Vec::new(),
                gpus: Vec::new(),
                default: DefaultOutcome::NotConfigured,
                problems,
                notes,
                cache,
                text: String::new(),
                ready: false,
            };
            report.text = render(&report, input);
            return report;
        }
    };

    let ze = node.options.ze_hierarchy;
    let level_zero = node.devices.iter().filter(|d| matches!(d.gpu_id(), Some(GpuIdentity::LevelZero { .. }))).count();
    if level_zero > 0 && ze.is_none() {
        problems.push(format!(
            "{level_zero} Level Zero GPUs, but the hierarchy model their ordinals were recorded under is unknown, so \
             ZE_AFFINITY_MASK is never written and every task sees every Intel GPU: set ze_hierarchy (FLAT, COMPOSITE \
             or COMBINED: the ZE_FLAT_DEVICE_HIERARCHY in force where the topology was discovered) in the plugin's \
             config file"
        ));
    }
    let devices: Vec<DeviceLine> = node
        .devices
        .iter()
        .map(|d| {
            let (env, warnings) = match crate::env::task_env(&[d], &BTreeMap::new(), ze) {
                Ok(found) => found,
                Err(e) => {
                    problems.push(format!("device {}: {e}", crate::env::shown(&d.name)));
                    Default::default()
                }
            };
            for w in warnings {
                // The Level Zero model is reported once, above.
                if !matches!(d.gpu_id(), Some(GpuIdentity::LevelZero { .. })) && !notes.contains(&w) {
                    notes.push(w);
                }
            }
            DeviceLine {
                class: d.class,
                busid: d.busid_text(),
                name: d.name.clone(),
                locality: d.locality.to_list(),
                variables: env.keys().cloned().collect(),
            }
        })
        .collect();

    if node.topology.pci.is_empty() && node.topology.loose.is_empty() {
        notes.push(
            "the topology has no I/O devices at all: if this node has GPUs or adapters, the topology was \
             exported without them (lstopo --of xml keeps them by default; slurmstepd's own hwloc_topo_*.xml \
             cache does not) or hwloc could not see the PCI bus"
                .to_string(),
        );
    }

    let gpu_busids: Vec<String> =
        node.devices.iter().filter(|d| d.class == DeviceClass::Gpu).map(Device::busid_text).collect();
    let ignored_display: Vec<String> = node
        .topology
        .pci
        .iter()
        .filter(|f| f.is_display() && !gpu_busids.contains(&f.busid.to_string()))
        .map(|f| {
            let names: Vec<&str> = f.osdevs.iter().map(|o| o.name.as_str()).collect();
            format!("{} {}", f.busid, if names.is_empty() { "(no OS device)".to_string() } else { names.join(" ") })
        })
        .collect();

    let gpus: Vec<GpuStatus> = node
        .devices
        .iter()
        .filter(|d| d.class == DeviceClass::Gpu)
        .map(|d| GpuStatus { busid: d.busid_text(), name: d.name.clone(), naming: gpu_naming(node, d) })
        .collect();
    for g in &gpus {
        if let GpuNaming::Refused { message } = &g.naming {
            problems.push(message.clone());
        }
    }

    if !gpus.is_empty() && config.is_some_and(|c| c.require_step_gpus != Some(true)) {
        notes.push(format!(
            "{} GPUs here and require_step_gpus is not set: a step without SLURM_STEP_GPUS maps over every GPU of \
             the node. If they are Slurm GRES (gres.conf), set require_step_gpus = true in the config file: Slurm \
             unsets SLURM_STEP_GPUS for a step that asked for no GPU, and such a step would otherwise be told \
             GPUs that are not its own",
            gpus.len()
        ));
    }

    let default = match config.and_then(|c| c.default.as_ref()) {
        None => DefaultOutcome::NotConfigured,
        Some(spec) => default_outcome(node, spec),
    };
    match &default {
        // Already listed as a GPU problem: say so rather than repeat it.
        DefaultOutcome::Refused { spec, message } if problems.contains(message) => problems.push(format!(
            "the default {spec:?} does not map on this node, so its jobs run unmapped: its GPUs cannot be named (above)"
        )),
        DefaultOutcome::Refused { spec, message } => problems
            .push(format!("the default {spec:?} does not map on this node, so its jobs run unmapped: {message}")),
        DefaultOutcome::NotApplicable { spec, .. } => notes.push(format!(
            "the default {spec:?} finds no device of its class here: jobs run unmapped (an admin default is soft)"
        )),
        _ => {}
    }

    let mut report = CheckReport {
        host: Some(node.hostname().to_string()),
        topology_source: input.topology_source.clone(),
        devices,
        ignored_display,
        gpus,
        default,
        ready: problems.is_empty(),
        problems,
        notes,
        cache,
        text: String::new(),
    };
    report.text = render(&report, input);
    report
}

/// What a [`CacheProbe`] means for the steps. Pure: the caller ran the steps' own reader.
pub fn cache_state(probe: &CacheProbe) -> CacheState {
    let path = probe.path.clone();
    match &probe.outcome {
        Ok(description) => CacheState::Trusted { path, description: description.clone() },
        Err(crate::cache::Miss::Absent(why)) => CacheState::Absent { path, why: why.clone() },
        Err(crate::cache::Miss::Rejected(why)) => CacheState::Untrusted { path, reasons: vec![why.clone()] },
    }
}

/// How `d` is named, or the refusal a job mapping it alone would get (the engine's words).
fn gpu_naming(node: &Node, d: &Device) -> GpuNaming {
    if let Some(id) = d.gpu_id() {
        let source = match d.identity_source() {
            Some(IdentitySource::Hwloc { osdev, key }) => format!("hwloc: {key} of {osdev}"),
            Some(IdentitySource::DriverFile { path }) => format!("driver file {path}"),
            None => "hwloc".to_string(),
        };
        return GpuNaming::Named { id: id.display_id(), source };
    }
    let mut spec = Spec::new(Target::Name(d.name.clone()));
    spec.bind = Some(BindLevel::None);
    let message = match plan(&spec, node, &StepFacts { ntasks: 1, ..StepFacts::default() }) {
        Err(e) => e.to_string(),
        // Not expected: a GPU without identity is always refused. Say what is known.
        Ok(_) => format!(
            "GPU {} at {} has no identity: {}",
            d.name,
            d.busid_text(),
            d.identity_problem().unwrap_or("unknown reason")
        ),
    };
    GpuNaming::Refused { message }
}

/// Plans the default for one task, as the plugin would for a one-task step.
fn default_outcome(node: &Node, spec: &Spec) -> DefaultOutcome {
    if spec.is_none() {
        return DefaultOutcome::Off;
    }
    let text = spec.to_string();
    match plan(spec, node, &StepFacts { ntasks: 1, ..StepFacts::default() }) {
        Ok(p) => DefaultOutcome::Maps {
            spec: text.to_string(),
            task: p.tasks.first().map(|t| report::task_line(node, t)).unwrap_or_default(),
            warnings: p.warnings,
        },
        Err(e @ PlanError::NoDevices { .. }) => {
            DefaultOutcome::NotApplicable { spec: text.to_string(), reason: e.to_string() }
        }
        Err(e) => DefaultOutcome::Refused { spec: text.to_string(), message: e.to_string() },
    }
}

fn render(r: &CheckReport, input: &CheckInput<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Node {}: topology from {}", r.host.as_deref().unwrap_or("(unknown)"), r.topology_source);

    if input.node.is_ok() {
        let _ = writeln!(out, "\nDevices, in the order tasks are mapped to them (PCI bus order):");
        for class in [DeviceClass::Gpu, DeviceClass::Network, DeviceClass::Block] {
            let of: Vec<&DeviceLine> = r.devices.iter().filter(|d| d.class == class).collect();
            if of.is_empty() {
                let _ = writeln!(out, "  {class}: none");
                continue;
            }
            let _ = writeln!(out, "  {class}: {}", of.len());
            for (i, d) in of.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "    {i:>2}  {:<13} {:<12} CPUs {:<20} sets {}",
                    d.busid,
                    d.name,
                    d.locality,
                    if d.variables.is_empty() { "nothing".to_string() } else { d.variables.join(" ") }
                );
            }
        }
        for f in &r.ignored_display {
            let _ = writeln!(out, "  not a compute GPU (display adapter without a render node or vendor backend): {f}");
        }

        if !r.gpus.is_empty() {
            let _ = writeln!(out, "\nGPU names (what CUDA_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES/ZE_AFFINITY_MASK get):");
            for g in &r.gpus {
                match &g.naming {
                    GpuNaming::Named { id, source } => {
                        let _ = writeln!(out, "  {} {:<12} {id} (from {source})", g.busid, g.name);
                    }
                    GpuNaming::Refused { .. } => {
                        let _ = writeln!(
                            out,
                            "  {} {:<12} cannot be named: mapping it is refused (below)",
                            g.busid, g.name
                        );
                    }
                }
            }
        }
    }

    let _ = writeln!(out, "\nPlugin configuration:");
    match &input.setup {
        Setup::NotExamined => {
            let _ = writeln!(out, "  not examined (give --plugstack FILE or --config FILE to check one)");
        }
        Setup::NotEnabled { files } => {
            let _ = writeln!(out, "  not enabled in {}", files.join(", "));
        }
        Setup::Configured { entries, origin, config } => {
            for e in entries {
                let _ = writeln!(
                    out,
                    "  {}: {} {}{}{}",
                    e.origin,
                    if e.line.required { "required" } else { "optional" },
                    e.line.path,
                    match e.exists {
                        Some(true) => " (present)",
                        Some(false) => " (MISSING)",
                        None => " (relative to Slurm's PluginDir)",
                    },
                    if e.line.args.is_empty() { String::new() } else { format!(" {}", e.line.args.join(" ")) }
                );
            }
            match config {
                Ok(c) => {
                    let _ = writeln!(out, "  settings from {origin}:");
                    let path = |p: &Option<std::path::PathBuf>, unset: &str| {
                        p.as_ref().map_or(unset.to_string(), |p| p.display().to_string())
                    };
                    let _ = writeln!(
                        out,
                        "    default           {}",
                        c.default.as_ref().map_or("(none: jobs map only when they ask)".to_string(), Spec::to_string)
                    );
                    let _ = writeln!(
                        out,
                        "    topology          {}",
                        path(&c.topology, "(none: the node's own, from slurmd's cache or live discovery)")
                    );
                    // Unset, the plugin reads the node's own driver files only when the topology is
                    // the node's own (live discovery or slurmd's cache of it).
                    let root = |p: &Option<std::path::PathBuf>, own: &str| match (p, &c.topology) {
                        (Some(p), _) => p.display().to_string(),
                        (None, None) => format!("(unset: {own}, the node's own)"),
                        (None, Some(_)) => "(unset: no driver file is read with topology=)".to_string(),
                    };
                    let _ = writeln!(out, "    proc_root         {}", root(&c.proc_root, DEFAULT_PROC_ROOT));
                    let _ = writeln!(out, "    sys_root          {}", root(&c.sys_root, DEFAULT_SYS_ROOT));
                    let _ = writeln!(
                        out,
                        "    ze_hierarchy      {}",
                        c.ze_hierarchy.map_or("(unset: Level Zero masks are not written)", |z| z.as_str())
                    );
                    let cache = match (&c.topology, c.cache) {
                        (Some(_), _) => "not used: the steps read topology= instead",
                        (None, Some(false)) => "false: every step discovers the node itself (about 15 ms per step)",
                        (None, Some(true)) => "true: the steps read the topology slurmd discovered at its start",
                        (None, None) => "true (default): the steps read the topology slurmd discovered at its start",
                    };
                    let _ = writeln!(out, "    cache             {cache}");
                    let _ = writeln!(
                        out,
                        "    cache_dir         {}{}",
                        path(&c.cache_dir, &format!("{DEFAULT_CACHE_DIR} (default)")),
                        if c.cache_dir().is_none() { " (not used)" } else { "" }
                    );
                    let _ = writeln!(
                        out,
                        "    require_step_gpus {}",
                        match c.require_step_gpus {
                            Some(true) => "true: a GPU mapping of a step without SLURM_STEP_GPUS is refused",
                            Some(false) => "false: a step without SLURM_STEP_GPUS maps over every GPU of the node",
                            None => "false (default): a step without SLURM_STEP_GPUS maps over every GPU of the node",
                        }
                    );
                    match &r.cache {
                        None => {}
                        Some(CacheState::Absent { path, .. }) => {
                            let _ = writeln!(out, "  topology cache {}: absent (see the notes)", path.display());
                        }
                        Some(CacheState::Untrusted { path, .. }) => {
                            let _ = writeln!(
                                out,
                                "  topology cache {}: not used by the steps (see the notes)",
                                path.display()
                            );
                        }
                        Some(CacheState::Trusted { description, .. }) => {
                            let _ = writeln!(out, "  topology cache: used by the steps: {description}");
                        }
                    }
                }
                Err(_) => {
                    let _ = writeln!(out, "  settings from {origin}: INVALID (below)");
                }
            }
        }
    }

    match &r.default {
        DefaultOutcome::NotConfigured => {}
        DefaultOutcome::Off => {
            let _ = writeln!(out, "\nDefault: none (jobs are mapped only when they ask)");
        }
        DefaultOutcome::Maps { spec, task, warnings } => {
            let _ = writeln!(out, "\nDefault {spec:?} on this node, for a one-task step:\n  {task}");
            for w in warnings {
                let _ = writeln!(out, "  warning: {w}");
            }
        }
        DefaultOutcome::NotApplicable { spec, reason } => {
            let _ = writeln!(out, "\nDefault {spec:?} does not apply on this node (jobs run unmapped): {reason}");
        }
        DefaultOutcome::Refused { spec, .. } => {
            let _ = writeln!(out, "\nDefault {spec:?} is refused on this node (below)");
        }
    }

    if !r.notes.is_empty() {
        let _ = writeln!(out, "\nNotes:");
        for n in &r.notes {
            let _ = writeln!(out, "  - {n}");
        }
    }
    if r.problems.is_empty() {
        let _ = writeln!(out, "\nReady: yes");
    } else {
        let _ =
            writeln!(out, "\nReady: no, {} problem{}:", r.problems.len(), if r.problems.len() == 1 { "" } else { "s" });
        for p in &r.problems {
            let _ = writeln!(out, "  - {p}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn an_unloadable_topology_is_not_ready() {
        let input = CheckInput {
            node: Err("cannot read topology XML /x.xml".into()),
            topology_source: "/x.xml".into(),
            setup: Setup::NotExamined,
            problems: vec![],
            cache: None,
        };
        let r = check(&input);
        assert!(!r.ready);
        assert!(r.text.contains("cannot read topology XML /x.xml"), "{}", r.text);
        assert!(r.text.contains("Ready: no, 1 problem:"), "{}", r.text);
    }

    fn probe(outcome: Result<&str, crate::cache::Miss>) -> CacheProbe {
        CacheProbe { path: "/run/map-by-device/topology.json".into(), outcome: outcome.map(str::to_string) }
    }

    #[test]
    fn the_cache_is_judged_by_the_steps_own_reader() {
        use crate::cache::Miss;
        let path = PathBuf::from("/run/map-by-device/topology.json");
        assert_eq!(
            cache_state(&probe(Ok("slurmd's cache"))),
            CacheState::Trusted { path: path.clone(), description: "slurmd's cache".into() }
        );
        assert_eq!(
            cache_state(&probe(Err(Miss::Absent("no cache file".into())))),
            CacheState::Absent { path: path.clone(), why: "no cache file".into() }
        );
        assert_eq!(
            cache_state(&probe(Err(Miss::Rejected("mode 0666".into())))),
            CacheState::Untrusted { path, reasons: vec!["mode 0666".into()] }
        );
    }

    #[test]
    fn the_cache_never_makes_a_node_unready() {
        let input = CheckInput {
            node: Err("no topology".into()),
            topology_source: "this machine".into(),
            setup: Setup::Configured { entries: vec![], origin: "config file c".into(), config: Ok(Config::default()) },
            problems: vec![],
            cache: Some(probe(Err(crate::cache::Miss::Rejected("the directory is writable by others".into())))),
        };
        let r = check(&input);
        assert_eq!(r.problems.len(), 1, "only the topology: {:?}", r.problems);
        assert!(r.notes.iter().any(|n| n.contains("will not use the topology cache")), "{:?}", r.notes);
        assert!(r.text.contains("    cache             true (default)"), "{}", r.text);
        assert!(r.text.contains("    cache_dir         /run/map-by-device (default)\n"), "{}", r.text);
        assert!(r.text.contains("    require_step_gpus false (default)"), "{}", r.text);
        assert!(
            r.text.contains("topology cache /run/map-by-device/topology.json: not used by the steps"),
            "{}",
            r.text
        );
    }
}
