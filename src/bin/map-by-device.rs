//! `map-by-device`: preview what the plugin would do, on this machine or on any lstopo XML.
//!
//! Glue only: flags -> engine inputs -> engine -> text or JSON. Exit status: 0 success,
//! 2 a refusal or a usage error (one line `map-by-device: error: ...` on stderr, nothing on
//! stdout), 1 `check` found the node not ready.

use clap::{Args, Parser, Subcommand};
use map_by_device::check::{self, CacheProbe, CheckInput, GresInput, NodeSlurm, PluginEntry, PlugstackItem, Setup};
use map_by_device::config::Config;
use map_by_device::cpuset::CpuSet;
use map_by_device::device::{Device, DeviceClass, Vendor, ZeHierarchy};
use map_by_device::node::Node;
use map_by_device::plan::{plan, PlanError, StepFacts};
use map_by_device::report;
use map_by_device::slurm_release::{self, SlurmVersion};
use map_by_device::spec::{Spec, Target};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Why a command could not run: the engine's refusal (its own message), or a flag or file
/// that cannot be used (the flag or path, and the fix). Printed as one line, exit 2.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Spec(#[from] map_by_device::spec::SpecError),
    #[error(transparent)]
    Load(#[from] map_by_device::load::LoadError),
    #[error(transparent)]
    Plan(#[from] map_by_device::plan::PlanError),
    #[error("{flag}: {source}")]
    CpuList { flag: &'static str, source: map_by_device::cpuset::CpuListError },
    #[error("--step-gpus: {0}")]
    StepGpus(#[from] map_by_device::plan::StepGpusError),
    #[error("{0}")]
    VisibleGpus(String),
    #[error("invalid --env {given:?}: expected NAME=VALUE with a non-empty NAME")]
    Env { given: String },
    #[error("{flag} is empty: give the step's CPUs as a cpulist such as 0-3,8")]
    EmptyCpus { flag: &'static str },
    #[error("{flag} names CPUs {cpus} that {host} does not have (its CPUs: {node}): give CPUs of this node")]
    CpusOutsideNode { flag: &'static str, cpus: String, host: String, node: String },
    #[error("--cpus-per-task 0: a task needs at least one CPU")]
    ZeroCpusPerTask,
    #[error("-n 0: a step has at least one task on the node; give -n N with the step's tasks on this node")]
    ZeroTasks,
    /// Open MPI's `--map-by`, or Slurm's `--ntasks-per-node`, given to `plan`.
    #[error("{0}")]
    Foreign(String),
    #[error("invalid --ze-hierarchy {given:?}: expected FLAT, COMPOSITE or COMBINED")]
    ZeHierarchy { given: String },
    #[error("cannot read {flag} {}: {source}", path.display())]
    Read { flag: &'static str, path: PathBuf, source: std::io::Error },
    #[error("cannot write --svg {}: {source}", path.display())]
    WriteSvg { path: PathBuf, source: std::io::Error },
}

/// The spec in short, under `plan --help`; map-by-device(8) has it in full.
const SPEC_HELP: &str = "\
SPEC: TARGET[:QUALIFIER[=VALUE]]...
  TARGET     gpu, network (nic, fabric, openfabrics), block, none, or one device by name,
             UUID, PCI bus id or PMIx id (mlx5_0, GPU-46f7..., 0000:06:00.0, gpu://host::nvml2)
  QUALIFIERS interleave[=LEVEL] shared ndev=N|auto compact ppr=N pe=N hwtcpus bind=LEVEL
             overload env=all|none omp closest adapters verbose
  bind=      split (default), locality, hwthread, core, l1cache, l2cache, l3cache, numa,
             package (socket), none
  Words may be shortened to a unique prefix; ':' separates qualifiers, ',' does not.
  Examples: gpu   gpu:interleave:bind=core   gpu:ndev=auto:omp   nic:shared
  See map-by-device(8) for every rule, and the user guide for real plans.";

#[derive(Parser)]
#[command(
    name = "map-by-device",
    version,
    about = "Preview --map-by-device plans on this node or on an lstopo XML, and check a node for the plugin"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the node's devices in mapping order (PCI bus order, per class).
    Devices {
        #[command(flatten)]
        source: Source,
        /// Only devices of this class (gpu, network, block) or with this name.
        #[arg(long, value_name = "TARGET")]
        class: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also draw the node and these devices as an SVG picture in FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// Show the plan for one step on this node: each task's devices, CPUs and variables.
    #[command(after_help = SPEC_HELP)]
    Plan(PlanArgs),
    /// Tell whether this node is ready for the plugin (exit status 0 ready, 1 not ready).
    ///
    /// Reports the node's devices and their order, which GPUs can be named and how (hwloc
    /// backend or driver file), which would be refused and why, whether gres.conf numbers the
    /// GPUs in the order they are mapped in, the plugin's settings from
    /// plugstack.conf and its config file (with the topology cache and require_step_gpus),
    /// whether the admin's default maps here (for one task, one task per device of its class,
    /// and one task more), and, for this machine, whether slurmd's topology
    /// cache file is there and owned and protected as the steps require.
    Check(CheckArgs),
}

#[derive(Args)]
struct CheckArgs {
    #[command(flatten)]
    source: Source,
    /// The plugstack.conf whose map_by_device line (and its includes) to check. Default when
    /// reading this machine: slurm.conf's PlugStackConfig, else /etc/slurm/plugstack.conf.
    #[arg(long, value_name = "FILE")]
    plugstack: Option<PathBuf>,
    /// A TOML config file to check, as if the plugstack line said config=FILE.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The gres.conf whose GPU order to compare with the mapping order. Default when reading
    /// this machine: gres.conf next to slurm.conf (/etc/slurm/gres.conf), if there is one.
    #[arg(long, value_name = "FILE")]
    gres_conf: Option<PathBuf>,
}

#[derive(Args)]
struct Source {
    /// Read this lstopo XML instead of the local machine.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// Read NVIDIA driver identity files under DIR (default /proc for the local machine only).
    #[arg(long, value_name = "DIR")]
    proc_root: Option<PathBuf>,
    /// Read AMD driver identity files under DIR (default /sys for the local machine only).
    #[arg(long, value_name = "DIR")]
    sys_root: Option<PathBuf>,
    /// The Level Zero hierarchy model the topology was discovered under (FLAT, COMPOSITE, COMBINED).
    #[arg(long, value_name = "MODEL")]
    ze_hierarchy: Option<String>,
    /// Host name for PMIx ids and reports (default: the topology's HostName).
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    source: Source,
    /// Number of tasks of the step on this node.
    #[arg(long, short = 'n', value_name = "N", required_unless_present_any = ["map_by", "ntasks_per_node"])]
    ntasks: Option<u32>,
    /// Open MPI's option, refused with its --map-by-device spelling.
    #[arg(long = "map-by", value_name = "X", hide = true)]
    map_by: Option<String>,
    /// Slurm's option, refused: the preview's -n is the tasks on this node.
    #[arg(long = "ntasks-per-node", value_name = "N", hide = true)]
    ntasks_per_node: Option<String>,
    /// Slurm's --cpus-per-task (the default pe for per-core bindings).
    #[arg(long, short = 'c', value_name = "N")]
    cpus_per_task: Option<u32>,
    /// The CPUs allocated to the step on this node (a cpulist such as 0-3,8). The devices
    /// local to them are handed out first and, unless bind=none, they are the only ones.
    #[arg(long, value_name = "CPULIST")]
    allowed_cpus: Option<String>,
    /// Each task's existing binding, for closest: cpulists separated by ';'.
    #[arg(long, value_name = "CPULIST[;CPULIST...]")]
    task_cpus: Option<String>,
    /// Slurm's global GPU indices allocated to the step (comma list, PCI-bus order).
    #[arg(long, value_name = "LIST")]
    step_gpus: Option<String>,
    /// A variable of the task's environment the rules read (NAME=VALUE; repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Print a table that fits a terminal: each task's devices by name, its CPUs, and its
    /// variables (long values such as UUIDs by name only; a long value every task has alike,
    /// such as the node's NCCL_IB_HCA, once below the table).
    #[arg(long, conflicts_with = "json")]
    short: bool,
    /// Also draw the plan as an SVG picture in FILE (written for a refused plan too).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// The --map-by-device spec (one that starts with '-' is read as a spec too).
    #[arg(allow_hyphen_values = true, required_unless_present = "map_by")]
    spec: Option<String>,
}

/// The step's CPUs and the tasks' bindings must be CPUs of the node.
fn facts_fit(facts: &StepFacts, node: &Node) -> Result<(), CliError> {
    let all = node.topology.all_cpus();
    let named = facts.allowed_cpus.iter().map(|c| ("--allowed-cpus", c));
    let tasks = facts.task_cpus.iter().flatten().map(|c| ("--task-cpus", c));
    for (flag, cpus) in named.chain(tasks) {
        let outside = cpus.difference(&all);
        if !outside.is_empty() {
            return Err(CliError::CpusOutsideNode {
                flag,
                cpus: outside.to_list(),
                host: node.hostname().to_string(),
                node: all.to_list(),
            });
        }
    }
    Ok(())
}

fn node_from(source: &Source) -> Result<Node, CliError> {
    node_with(source, &Config::default(), false)
}

/// Builds the node from the flags, falling back on the plugin's settings (`check`): its
/// `topology=`, `proc_root`, `sys_root` and `ze_hierarchy`. With `configured`, the Level Zero
/// model comes from the settings only, as in the plugin.
fn node_with(source: &Source, config: &Config, configured: bool) -> Result<Node, CliError> {
    let xml = source.topology.as_ref().or(config.topology.as_ref());
    let live = xml.is_none();
    let topology = match (&source.topology, &config.topology) {
        // A file the preview's own flag names that cannot be read is the flag's mistake, said
        // as such (the plugin's message names its topology=).
        (Some(path), _) => map_by_device::load::from_xml_file(path).map_err(|e| match e {
            map_by_device::load::LoadError::Read { path, source } => {
                CliError::Read { flag: "--topology", path, source }
            }
            other => other.into(),
        }),
        // The plugin's own topology=, read the way the plugin reads it.
        (None, Some(path)) => map_by_device::load::from_trusted_xml_file(path).map_err(CliError::from),
        (None, None) => map_by_device::load::live(config.discovery_timeout()).map_err(CliError::from),
    }?;
    let hostname = source.hostname.clone().or_else(|| live.then(map_by_device::host::name).flatten());
    // The plugin's rules first (config roots, else the node's own /proc and /sys when live),
    // then the flags on top.
    let mut options = config.node_options(live, hostname);
    if let Some(p) = &source.proc_root {
        options.proc_root = Some(p.clone());
    }
    if let Some(p) = &source.sys_root {
        options.sys_root = Some(p.clone());
    }
    match &source.ze_hierarchy {
        Some(m) => {
            options.ze_hierarchy = Some(ZeHierarchy::parse(m).ok_or(CliError::ZeHierarchy { given: m.clone() })?)
        }
        // With the plugin's settings the model comes from them only, as in the plugin.
        None if configured => {}
        // The discovering process is this one: its own environment says which model applied.
        None if live => {
            options.ze_hierarchy = std::env::var("ZE_FLAT_DEVICE_HIERARCHY").ok().and_then(|v| ZeHierarchy::parse(&v))
        }
        None => {}
    }
    Ok(Node::new(topology, options))
}

/// `plan --map-by X` (Open MPI's option) and `plan --ntasks-per-node N` (Slurm's): what the
/// preview takes instead, with the spec or option that does it.
fn foreign_flags(args: &PlanArgs) -> Result<(), CliError> {
    if let Some(x) = &args.map_by {
        let fix = match Spec::parse(x) {
            Err(e @ map_by_device::spec::SpecError::OpenMpi { .. }) => e.to_string(),
            _ => format!("map-by-device plan -n N {}", map_by_device::text::excerpt(x)),
        };
        return Err(CliError::Foreign(format!(
            "--map-by is Open MPI's option; plan previews --map-by-device, whose spec is its last word: {fix}"
        )));
    }
    if let Some(n) = &args.ntasks_per_node {
        return Err(CliError::Foreign(format!(
            "--ntasks-per-node is Slurm's option; plan previews one node: write -n {} for the step's tasks on it",
            map_by_device::text::excerpt(n)
        )));
    }
    Ok(())
}

fn facts_from(args: &PlanArgs) -> Result<StepFacts, CliError> {
    foreign_flags(args)?;
    let ntasks = match args.ntasks {
        Some(0) => return Err(CliError::ZeroTasks),
        Some(n) => n,
        None => return Err(CliError::ZeroTasks),
    };
    if args.cpus_per_task == Some(0) {
        return Err(CliError::ZeroCpusPerTask);
    }
    if args.allowed_cpus.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(CliError::EmptyCpus { flag: "--allowed-cpus" });
    }
    let allowed_cpus = args
        .allowed_cpus
        .as_deref()
        .map(|t| CpuSet::parse_list(t).map_err(|source| CliError::CpuList { flag: "--allowed-cpus", source }))
        .transpose()?;
    let task_cpus = args
        .task_cpus
        .as_deref()
        .map(|t| {
            t.split(';')
                .map(|l| CpuSet::parse_list(l).map_err(|source| CliError::CpuList { flag: "--task-cpus", source }))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let mut env = BTreeMap::new();
    for kv in &args.env {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| CliError::Env { given: kv.clone() })?;
        env.insert(k.to_string(), v.to_string());
    }
    Ok(StepFacts {
        ntasks,
        cpus_per_task: args.cpus_per_task,
        allowed_cpus,
        task_cpus,
        env,
        step_gpus: args.step_gpus.as_deref().map(map_by_device::plan::parse_step_gpus).transpose()?,
    })
}

/// Human table: one row per device.
fn devices_table(devices: &[&Device]) -> String {
    let mut out =
        format!("{:<8} {:<13} {:<12} {:<9} {:<40} {}\n", "CLASS", "BUSID", "NAME", "VENDOR", "ID", "LOCALITY");
    for d in devices {
        let id = d.gpu_id().map(|i| i.display_id()).or_else(|| d.identity_problem().map(|_| "(none)".into()));
        out.push_str(&format!(
            "{:<8} {:<13} {:<12} {:<9} {:<40} {}\n",
            d.class.to_string(),
            d.busid_text(),
            d.name,
            d.vendor.name(),
            id.unwrap_or_else(|| "-".into()),
            d.locality
        ));
    }
    out
}

/// The slurm.conf Slurm reads: `SLURM_CONF`, else /etc/slurm/slurm.conf.
fn slurm_conf() -> PathBuf {
    std::env::var_os("SLURM_CONF").map_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"), PathBuf::from)
}

/// The plugstack.conf Slurm reads: slurm.conf's `PlugStackConfig`, else
/// /etc/slurm/plugstack.conf.
fn system_plugstack() -> PathBuf {
    let slurm_conf = slurm_conf();
    let from_conf = std::fs::read_to_string(&slurm_conf).ok().and_then(|text| {
        text.lines().find_map(|l| {
            let l = l.split('#').next().unwrap_or("").trim();
            let (k, v) = l.split_once('=')?;
            k.trim().eq_ignore_ascii_case("PlugStackConfig").then(|| PathBuf::from(v.trim()))
        })
    });
    from_conf.unwrap_or_else(|| PathBuf::from("/etc/slurm/plugstack.conf"))
}

/// Matches a file name against a glob pattern with `*` and `?` (what plugstack includes use).
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob_match(&pattern[1..], name) || (!name.is_empty() && glob_match(pattern, &name[1..])),
        (Some(b'?'), Some(_)) => glob_match(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob_match(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// The files an `include` pattern names, sorted like glob(3); wildcards only in the last part.
fn expand_include(pattern: &str, base: &Path) -> Result<Vec<PathBuf>, String> {
    let path = base.join(pattern);
    let has_wild = |s: &str| s.contains(['*', '?', '[']);
    if !has_wild(pattern) {
        return Ok(vec![path]);
    }
    let (dir, file) = match (path.parent(), path.file_name().and_then(|f| f.to_str())) {
        (Some(d), Some(f)) => (d.to_path_buf(), f.to_string()),
        _ => return Err(format!("cannot expand include {pattern:?}")),
    };
    if has_wild(&dir.to_string_lossy()) || file.contains('[') {
        return Err(format!("include {pattern:?}: only * and ? in the file name are checked here"));
    }
    let mut out: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                !name.starts_with('.') && glob_match(file.as_bytes(), name.as_bytes())
            })
            .map(|e| e.path())
            .collect(),
        Err(_) => Vec::new(), // glob(3): no match, nothing included
    };
    out.sort();
    Ok(out)
}

/// What the plugstack files say about this plugin: its lines, the files read, problems.
#[derive(Default)]
struct PlugstackFindings {
    entries: Vec<PluginEntry>,
    files: Vec<String>,
    problems: Vec<String>,
}

fn read_plugstack(path: &Path, depth: usize, found: &mut PlugstackFindings) {
    if depth > 8 {
        found.problems.push(format!("{}: includes nested too deeply (a cycle?)", path.display()));
        return;
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            found.problems.push(format!("cannot read {}: {e}", path.display()));
            return;
        }
    };
    found.files.push(path.display().to_string());
    let base = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    for item in check::parse_plugstack(&text) {
        match item {
            PlugstackItem::Plugin(line) if check::is_this_plugin(&line.path) => {
                let exists = Path::new(&line.path).is_absolute().then(|| Path::new(&line.path).is_file());
                let built_for = (exists == Some(true)).then(|| plugin_version(Path::new(&line.path)));
                let discover = (exists == Some(true)).then(|| map_by_device::cache::discover_library(Path::new(&line.path)));
                found.entries.push(PluginEntry {
                    origin: format!("{} line {}", path.display(), line.line),
                    line,
                    exists,
                    built_for,
                    discover,
                });
            }
            PlugstackItem::Plugin(_) => {}
            PlugstackItem::Include { line, pattern } => match expand_include(&pattern, &base) {
                Ok(files) => {
                    for f in files {
                        read_plugstack(&f, depth + 1, found);
                    }
                }
                Err(e) => found.problems.push(format!("{} line {line}: {e}", path.display())),
            },
            PlugstackItem::Invalid { line, text } => found.problems.push(format!(
                "{} line {line}: Slurm cannot read {text:?} (expected required|optional PATH [ARGS] or include PATTERN): every srun fails",
                path.display()
            )),
        }
    }
}

/// Reads the topology cache on this machine exactly as a step does, except that the plugin
/// build is the plugstack.conf entry's file (the steps compare the .so they were loaded from).
fn probe_cache(dir: &Path, plugin: Option<&Path>) -> CacheProbe {
    let identity = plugin.and_then(|p| map_by_device::cache::plugin_identity(p).ok());
    let outcome = map_by_device::cache::read(dir, identity.as_deref()).map(|c| c.description);
    CacheProbe { path: dir.join(check::CACHE_FILE_NAME), outcome }
}

/// The Slurm release a plugin file declares (its `plugin_version`, what Slurm compares). At
/// most 64 MiB are read (the plugin is about 2 MB; a plugstack line may name anything).
fn plugin_version(path: &Path) -> Result<SlurmVersion, String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 << 20).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read it: {e}"))?;
    slurm_release::exported_u32(&bytes, "plugin_version").map(SlurmVersion).map_err(|e| e.to_string())
}

/// The Slurm release this node runs: what `slurmd -V` says (the daemon that loads the plugin),
/// else, on a node without slurmd, the `plugin_version` of one of Slurm's own plugins in the
/// directories of `plugin_paths` or Slurm's usual plugin directories (the installed release).
fn node_slurm(plugin_paths: &[&Path]) -> Result<NodeSlurm, String> {
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
        Ok(out) => format!("slurmd -V printed {:?}", String::from_utf8_lossy(&out.stdout).trim()),
        Err(e) => format!("no slurmd to ask ({e}) and no task_affinity.so in Slurm's plugin directories"),
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
    use map_by_device::trusted_fs::{problem, Kind, TrustedDir};
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

/// `check`: resolves the settings as the plugin would, loads the node, and reports.
fn run_check(args: &CheckArgs) -> Result<(String, bool), CliError> {
    flags_name_files(args)?;
    let (plugstack, found) = plugstack_findings(args);
    let (setup, notes) = plugin_setup(args, plugstack.as_deref(), &found)?;
    let (config, configured) = match &setup {
        Setup::Configured { config: Ok(c), .. } => (c.clone(), true),
        _ => (Config::default(), false),
    };
    let node = node_with(&args.source, &config, configured).map_err(|e| e.to_string());
    let mut problems = found.problems;
    let gres = node.as_ref().ok().and_then(|n| gres_input(args, n, &mut problems)).transpose()?;
    let input = CheckInput {
        node: node.as_ref().map_err(Clone::clone),
        topology_source: topology_source(&args.source, &config),
        cache: cache_probe(args, &setup, &config, configured),
        slurm: slurm_of(&setup),
        setup,
        problems,
        notes,
        gres,
    };
    let report = check::check(&input);
    Ok((report.text, report.ready))
}

/// What the gres.conf check reads: `--gres-conf`, else (this machine) gres.conf next to
/// slurm.conf when there is one, and the `Device Minor` of each NVIDIA GPU's driver file
/// under the node's proc root. A default gres.conf that cannot be read is a problem.
fn gres_input(args: &CheckArgs, node: &Node, problems: &mut Vec<String>) -> Option<Result<GresInput, CliError>> {
    let path = match &args.gres_conf {
        Some(p) => p.clone(),
        None if args.source.topology.is_none() => {
            let p = slurm_conf().parent().unwrap_or(Path::new("/etc/slurm")).join("gres.conf");
            p.exists().then_some(p)?
        }
        None => return None,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(source) if args.gres_conf.is_some() => {
            return Some(Err(CliError::Read { flag: "--gres-conf", path, source }))
        }
        Err(e) => {
            problems.push(format!("cannot read {}: {e}", path.display()));
            return None;
        }
    };
    let proc_root = node.options.proc_root.as_deref();
    let nvidia_minors = node
        .devices
        .iter()
        .filter(|d| d.class == DeviceClass::Gpu && d.vendor == Vendor::Nvidia)
        .filter_map(|d| Some((d.busid_text(), d.busid?)))
        .filter_map(|(text, busid)| {
            let root = proc_root?;
            let minor = match map_by_device::driver_ids::nvidia_minor(root, busid) {
                Ok(Some(m)) => Ok(m),
                Ok(None) => Err(format!("no {}", map_by_device::driver_ids::nvidia_path(root, busid).display())),
                Err(e) => Err(e.to_string()),
            };
            Some((text, minor))
        })
        .collect();
    Some(Ok(GresInput {
        origin: path.display().to_string(),
        text,
        proc_root: proc_root.map(|p| p.display().to_string()),
        nvidia_minors,
    }))
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
        None if args.config.is_none() && args.source.topology.is_none() => Some(system_plugstack()),
        None => None,
    };
    let mut found = PlugstackFindings::default();
    if let Some(p) = &plugstack {
        if p.exists() || args.plugstack.is_some() {
            read_plugstack(p, 0, &mut found);
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
            Setup::Configured { entries: found.entries.clone(), origin, config: config.map_err(|e| e.to_string()) }
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
            Some(probe_cache(&dir, plugin.as_deref()))
        }
        _ => None,
    }
}

/// The node's Slurm release, looked for when a plugstack line names the plugin.
fn slurm_of(setup: &Setup) -> Option<Result<NodeSlurm, String>> {
    match setup {
        Setup::Configured { entries, .. } if !entries.is_empty() => {
            let paths: Vec<&Path> = entries.iter().map(|e| Path::new(&e.line.path)).collect();
            Some(node_slurm(&paths))
        }
        _ => None,
    }
}

/// A GPU identity refusal, in the preview's words: the plugin's fix names its config file's
/// `proc_root`/`sys_root`; a preview reads driver files under `--proc-root`/`--sys-root`.
/// (`check` keeps the plugin's words: it checks the plugin's settings.)
fn preview_fix(e: PlanError) -> PlanError {
    match e {
        PlanError::NoIdentity { device, busid, host, problem, fix } => {
            let fix = fix
                .replace("set proc_root in the plugin config", "give the node's /proc with --proc-root DIR")
                .replace("set sys_root in the plugin config", "give the node's /sys with --sys-root DIR");
            PlanError::NoIdentity { device, busid, host, problem, fix }
        }
        other => other,
    }
}

fn write_svg(path: &Path, svg: &str) -> Result<(), CliError> {
    write_output(path, svg.as_bytes()).map_err(|source| CliError::WriteSvg { path: path.to_path_buf(), source })
}

/// Writes an output file (`--svg`) the way root may write into any directory, `/tmp` among
/// them: never through a symbolic link at `path`, never into a file that is there already.
/// The text goes to a new file beside `path` (`O_CREAT|O_EXCL|O_NOFOLLOW`, a name nobody
/// could have planted), which is then renamed over `path` (rename replaces the entry, and
/// follows no link). What `path` names now may be nothing or a regular file of this user's;
/// a symbolic link, another kind of file or another user's file is refused and left alone.
/// The directory is opened once and both steps are relative to it.
fn write_output(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let refuse = |why: String| Err(std::io::Error::other(why));
    let Some(name) = path.file_name() else { return refuse("not a file name".into()) };
    let dir_path = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(dir_path)?;
    let c_name = CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `libc::stat` is plain data: all zero bytes are a valid value of it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor, `c_name` a NUL-terminated string and `st` a
    // writable stat buffer, all alive for the call.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), c_name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc == 0 {
        // SAFETY: geteuid cannot fail and has no arguments.
        let me = unsafe { libc::geteuid() };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                return refuse("it is a symbolic link: not followed; write under a directory of your own".into())
            }
            libc::S_IFREG if st.st_uid != me => {
                return refuse(format!(
                    "the file there belongs to user {}: not replaced; write under a directory of your own",
                    st.st_uid
                ))
            }
            libc::S_IFREG => {}
            _ => return refuse("it is not a regular file: not replaced".into()),
        }
    } else {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            return Err(e);
        }
    }
    let (file, temp) = new_file_beside(&dir)?;
    let written = (&file).write_all(contents).and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| {
        // SAFETY: `dir` is open, both names are NUL-terminated strings alive for the call.
        let rc = unsafe { libc::renameat(dir.as_raw_fd(), temp.as_ptr(), dir.as_raw_fd(), c_name.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    });
    if renamed.is_err() {
        // SAFETY: as for renameat; the temporary name is this process's own new file.
        unsafe { libc::unlinkat(dir.as_raw_fd(), temp.as_ptr(), 0) };
    }
    renamed
}

/// A new, empty file in `dir` under a name of this process's (`O_EXCL`: a name someone else
/// took, a file or a link, is skipped), for [`write_output`].
fn new_file_beside(dir: &std::fs::File) -> std::io::Result<(std::fs::File, std::ffi::CString)> {
    use std::os::unix::io::{AsRawFd, FromRawFd};
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    for attempt in 0..64u32 {
        let name = format!(".map-by-device-{}-{:08x}.tmp", std::process::id(), nanos.wrapping_add(attempt));
        let c_name = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
        // SAFETY: `dir` is an open descriptor and `c_name` a NUL-terminated string, both alive
        // for the call; the mode is the third (variadic) argument O_CREAT reads.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c_name.as_ptr(), flags, 0o666 as libc::c_uint) };
        if fd >= 0 {
            // SAFETY: `fd` was just opened by this call and is owned by nothing else.
            return Ok((unsafe { std::fs::File::from_raw_fd(fd) }, c_name));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    Err(std::io::Error::other("no free temporary name beside it"))
}

/// Runs one command: its output, and whether it succeeded (`false`: `check` found the node
/// not ready, exit 1). `Err` is a refusal or usage error (exit 2).
fn run(cli: Cli) -> Result<(String, bool), CliError> {
    match cli.command {
        Command::Devices { source, class, json, svg } => {
            let node = node_from(&source)?;
            let filter = class.as_deref().map(Spec::parse).transpose()?.map(|s| s.target);
            // A name that is no device here is a mistake to name, not an empty table.
            if let Some(Target::Name(n)) = &filter {
                map_by_device::plan::named_device(&node, n)?;
            }
            let devices: Vec<&Device> = node
                .devices
                .iter()
                .filter(|d| match &filter {
                    None | Some(Target::None) => true,
                    Some(Target::Class(c)) => d.class == *c,
                    Some(Target::Name(n)) => d.answers_to(n),
                })
                .collect();
            if let Some(path) = &svg {
                write_svg(path, &report::svg::devices_svg(&node, class.as_deref(), &devices))?;
            }
            let text = if json { format!("{}\n", report::devices_json(&devices)) } else { devices_table(&devices) };
            Ok((text, true))
        }
        Command::Plan(args) => {
            foreign_flags(&args)?;
            let spec = Spec::parse(args.spec.as_deref().unwrap_or_default())?;
            let mut facts = facts_from(&args)?;
            let node = node_from(&args.source)?;
            facts_fit(&facts, &node)?;
            if map_by_device::plan::spec_may_use_gpus(&spec) {
                // Slurm's CUDA_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES given with --env, read as the plugin does.
                facts.step_gpus = map_by_device::plan::visible_gpus(&facts.env, &node, facts.step_gpus.take())
                    .map_err(CliError::VisibleGpus)?;
            }
            let outcome = plan(&spec, &node, &facts).map_err(preview_fix);
            if let Some(path) = &args.svg {
                write_svg(path, &report::svg::plan_svg(&node, &spec, &facts, outcome.as_ref()))?;
            }
            let plan = outcome.map_err(|e| match e {
                // The preview's flags, named as such (the plugin's message names its topology=).
                PlanError::StepGpuOutOfRange { index, have, host } => CliError::Foreign(format!(
                    "--step-gpus names GPU index {index}, but the topology of {host} has only {have} GPUs: give \
                     indices below {have}, or the --topology of the node they belong to"
                )),
                other => CliError::Plan(other),
            })?;
            if args.json {
                return Ok((format!("{}\n", report::plan_json(&node, &plan)), true));
            }
            if args.short {
                return Ok((report::plan_short(&node, &plan), true));
            }
            let mut out = String::new();
            for t in &plan.tasks {
                out.push_str(&report::task_line(&node, t));
                out.push('\n');
            }
            for w in &plan.warnings {
                out.push_str(&format!("warning: {w}\n"));
            }
            Ok((out, true))
        }
        Command::Check(args) => run_check(&args),
    }
}

/// clap's multi-line usage error as the one line the man page promises: the error, then
/// the usage, then the hint.
fn one_line(rendered: &str) -> String {
    let mut out = String::new();
    for line in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let line = line.strip_prefix("error: ").unwrap_or(line);
        if let Some(usage) = line.strip_prefix("Usage: ") {
            out.push_str(&format!("; usage: {usage}"));
        } else if line.starts_with("For more information") {
            out.push_str("; see --help");
        } else if out.is_empty() {
            out.push_str(line);
        } else {
            out.push(' ');
            out.push_str(line);
        }
    }
    out
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version: what was asked for, on stdout.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("map-by-device: error: {}", one_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok((text, ok)) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("map-by-device: error: {e}");
            ExitCode::from(2)
        }
    }
}
