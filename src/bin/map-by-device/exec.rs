//! `map-by-device exec [SPEC] -- PROGRAM`: maps one rank that another launcher started
//! (mpirun, mpiexec.hydra, torchrun), as the plugin maps local task *i* of a step, then runs
//! the program in its place.
//!
//! The same engine, rules and words as the plugin: the plugin's settings from plugstack.conf,
//! its topology (`topology=`, else slurmd's cache, else discovery), `plan::plan` for a spec
//! (hard: a refusal stops the rank) and `soft::as_default` for the admin's default (soft: the
//! program runs unmapped). What differs is where the step's facts come from: the local rank
//! and rank count from the launcher's variables ([`map_by_device::launcher`]), the CPUs from
//! the rank's own process (what its launcher holds), the GPUs from `SLURM_STEP_GPUS` and the
//! visible-devices variables it inherited. It runs as the user and only ever narrows them.

use crate::error::CliError;
use crate::flags::ExecArgs;
use crate::inputs::node_with;
use map_by_device::affinity;
use map_by_device::config::Config;
use map_by_device::cpuset::CpuSet;
use map_by_device::launcher::{self, LocalRank};
use map_by_device::node::Node;
use map_by_device::plan::{self, Plan, StepFacts, TaskPlan, VisibleDevices};
use map_by_device::spec::Spec;
use map_by_device::text::excerpt;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The job's own `--map-by-device` as its tasks inherit it: srun's copy for the step, else
/// the environment form that salloc, sbatch (`#SBATCH`) or the user set.
const JOB_OPTION_VARS: [&str; 2] =
    ["_SLURM_SPANK_OPTION_map_by_device_map_by_device", "SLURM_SPANK__SLURM_SPANK_OPTION_map_by_device_map_by_device"];

/// Who asked: the rank's own spec or the job's (hard), or the admin's default (soft).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    Hard,
    Default,
}

/// What exec does for the rank.
enum Outcome {
    /// Run the program as it is, and why (for `--print`).
    Unmapped(String),
    /// The rank's part of the plan.
    Mapped(Box<Mapped>),
}

/// A rank with a plan: the spec applied, the node, the whole node's plan, the rank's part,
/// the CPUs its ranks share, and whether a failure to apply it stops the rank.
struct Mapped {
    spec: Spec,
    node: Node,
    plan: Plan,
    task: TaskPlan,
    allowed: Option<CpuSet>,
    hard: bool,
}

/// `exec`: `Ok(text)` only with `--print`; otherwise the program replaces this process, and
/// an `Err` is a refusal (the program does not run).
pub(crate) fn run_exec(args: &ExecArgs) -> Result<(String, bool), CliError> {
    let env: BTreeMap<String, String> =
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    let rank = launcher::local_rank(&env).map_err(|e| CliError::Foreign(e.to_string()))?;
    let outcome = decide(args, &env, &rank)?;
    if args.print {
        return Ok((printed(&outcome), true));
    }
    if let Outcome::Mapped(m) = &outcome {
        apply(m, &rank)?;
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Err(CliError::Foreign(
            "no program to run: write map-by-device exec [SPEC] -- PROGRAM [ARGS...]".into(),
        ));
    };
    let e = std::process::Command::new(program).args(rest).exec();
    Err(CliError::Foreign(format!("cannot run {}: {e}", excerpt(&program.to_string_lossy()))))
}

/// The rank's plan, or why the program runs unmapped; `Err` refuses a hard request.
fn decide(args: &ExecArgs, env: &BTreeMap<String, String>, rank: &LocalRank) -> Result<Outcome, CliError> {
    let (config, plugin) = plugin_settings();
    let (origin, text) = match (&args.spec, JOB_OPTION_VARS.iter().find_map(|v| env.get(*v))) {
        (Some(s), _) => (Origin::Hard, s.clone()),
        (None, Some(s)) => (Origin::Hard, s.clone()),
        (None, None) => match config.as_ref().ok().and_then(|c| c.default.as_ref()) {
            Some(d) => (Origin::Default, d.to_string()),
            None => return Ok(Outcome::Unmapped("nothing to map: no spec, no --map-by-device, no default".into())),
        },
    };
    let soft = |why: String| -> Result<Outcome, CliError> {
        match origin {
            Origin::Default => Ok(Outcome::Unmapped(why)),
            Origin::Hard => Err(CliError::Foreign(why)),
        }
    };
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            return soft(format!("the plugin's configuration on this node is broken, ask your administrator: {e}"))
        }
    };
    let mut spec = match Spec::parse(&text) {
        Ok(s) => s,
        Err(e) => return soft(format!("invalid --map-by-device={}: {e}", excerpt(&text))),
    };
    spec.omp = spec.omp.or(config.omp);
    if spec.is_none() {
        return Ok(Outcome::Unmapped(format!("nothing to map: the spec is {spec}")));
    }
    let node = match load_node(args, &config, plugin) {
        Ok(n) => n,
        Err(e) => return soft(e.to_string()),
    };
    let facts = match facts(args, env, rank, &spec, &node) {
        Ok(f) => f,
        Err(e) => return soft(e.to_string()),
    };
    let allowed = facts.allowed_cpus.clone();
    let (spec, plan) = match origin {
        Origin::Hard => (spec.clone(), plan::plan(&spec, &node, &facts)?),
        Origin::Default => match map_by_device::soft::as_default(&spec, &node, &facts) {
            Ok(map_by_device::soft::Soft::Maps { spec, plan }) => (spec, plan),
            Ok(map_by_device::soft::Soft::Aside { why }) => {
                return soft(format!("the default {spec} steps aside: {why}"))
            }
            Err(e) => return soft(e.to_string()),
        },
    };
    let task = match task_plan(&spec, &node, &facts, &plan, rank.rank) {
        Ok(t) => t,
        Err(e) => return soft(e.to_string()),
    };
    Ok(Outcome::Mapped(Box::new(Mapped { spec, node, plan, task, allowed, hard: origin == Origin::Hard })))
}

/// The plugin's settings as plugstack.conf gives them on this machine (no plugstack.conf, or
/// no line for the plugin: no settings, so no default), and the plugin file the line names
/// (the topology cache must be that build's).
fn plugin_settings() -> (Result<Config, String>, Option<PathBuf>) {
    let path = map_by_device::check::system_plugstack();
    let mut found = map_by_device::check::PlugstackFindings::default();
    if path.exists() {
        map_by_device::check::read_plugstack(&path, 0, &mut found);
    }
    match found.entries.first() {
        None => (Ok(Config::default()), None),
        Some(entry) => {
            let plugin = Some(PathBuf::from(&entry.line.path)).filter(|p| p.is_absolute());
            (Config::from_plugin_args(&entry.line.args).map_err(|e| e.to_string()), plugin)
        }
    }
}

/// The node as the plugin describes it: `--topology`, else the settings' `topology=`, else
/// slurmd's cache of this node when it can be trusted, else discovery.
fn load_node(args: &ExecArgs, config: &Config, plugin: Option<PathBuf>) -> Result<Node, CliError> {
    if args.source.topology.is_none() && config.topology.is_none() {
        if let Some(dir) = config.cache_dir() {
            let identity = plugin.and_then(|p| map_by_device::cache::plugin_identity(&p).ok());
            if let Ok(cached) = map_by_device::cache::read(&dir, identity.as_deref()) {
                let hostname = args.source.hostname.clone().or_else(map_by_device::host::name);
                let options = config.node_options(true, hostname);
                let mut topology = cached.topology;
                if let Some(sys) = &options.sys_root {
                    map_by_device::driver_ids::refresh_ib_port_states(&mut topology, sys);
                }
                return Ok(Node::new(topology, options));
            }
        }
    }
    // This machine's name, as the plugin names it, unless the node is another's (--topology).
    let mut source = args.source.clone();
    if source.topology.is_none() && source.hostname.is_none() {
        source.hostname = map_by_device::host::name();
    }
    node_with(&source, config, true)
}

/// The step as this rank sees it: its launcher's rank count, the CPUs its launcher holds,
/// the GPUs it may use, its environment.
fn facts(
    args: &ExecArgs,
    env: &BTreeMap<String, String>,
    rank: &LocalRank,
    spec: &Spec,
    node: &Node,
) -> Result<StepFacts, CliError> {
    let allowed_cpus = match &args.allowed_cpus {
        Some(t) if t.trim().is_empty() => return Err(CliError::EmptyCpus { flag: "--allowed-cpus" }),
        Some(t) => Some(CpuSet::parse_list(t).map_err(|source| CliError::CpuList { flag: "--allowed-cpus", source })?),
        // Another node's topology: its CPUs are not this process's.
        None if args.source.topology.is_some() => None,
        None => Some(rank_cpus()?),
    };
    let facts = StepFacts {
        ntasks: rank.size,
        cpus_per_task: None,
        allowed_cpus,
        task_cpus: None,
        env: env.clone(),
        step_gpus: None,
    };
    crate::inputs::facts_fit(&facts, node)?;
    let step_gpus = plan::step_gpus_for(env.get("SLURM_STEP_GPUS").map(String::as_str), spec)?;
    let step_gpus = if plan::spec_may_use_gpus(spec) { visible(env, node, step_gpus)? } else { step_gpus };
    Ok(StepFacts { step_gpus, ..facts })
}

/// The CPUs the ranks of this node share: the launcher's (the parent process, which every
/// rank it forked inherited before it may have bound each one apart), within this process's
/// cpuset cgroup. A rank whose CPUs are not within its parent's (a shell in between) plans
/// over its own.
fn rank_cpus() -> Result<CpuSet, CliError> {
    let own = affinity::current().map_err(|e| CliError::Foreign(format!("cannot read this process's CPUs: {e}")))?;
    let parent = parent_cpus().filter(|p| own.is_subset(p) && !p.is_empty()).unwrap_or_else(|| own.clone());
    let cpus = match affinity::cgroup_cpus() {
        Some((_, cgroup)) if !parent.intersection(&cgroup).is_empty() => parent.intersection(&cgroup),
        _ => parent,
    };
    Ok(cpus)
}

/// The parent process's `Cpus_allowed_list`, if it can be read.
fn parent_cpus() -> Option<CpuSet> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", std::os::unix::process::parent_id())).ok()?;
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    CpuSet::parse_list(list.trim()).ok()
}

/// The step's GPUs narrowed by the visible-devices variable the rank inherited: by UUID (as
/// the plugin writes them, or Slurm with `env_uuid`) exactly those GPUs; by index only as a
/// whole (an index cannot be placed on the node). Never more than `SLURM_STEP_GPUS`.
fn visible(
    env: &BTreeMap<String, String>,
    node: &Node,
    indices: Option<Vec<u32>>,
) -> Result<Option<Vec<u32>>, CliError> {
    for var in map_by_device::env::slurm_identity_variables() {
        let Some(value) = env.get(var) else { continue };
        let items: Vec<&str> = value.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        match plan::visible_devices(value) {
            VisibleDevices::Mig(_) => return Ok(plan::visible_gpus(env, node, indices)?),
            VisibleDevices::Uuids(ids) => {
                let mut mine = node.gpu_indices_of(&ids).map_err(|id| plan::VisibleGpusError::Unknown { var, id })?;
                mine.sort_unstable();
                if let Some(list) = &indices {
                    if let Some(g) = mine.iter().find(|g| !list.contains(g)) {
                        return Err(CliError::Foreign(format!(
                            "{var} names GPU {g} of the node, which is not among the step's GPUs (SLURM_STEP_GPUS={}): \
                             exec never widens what Slurm gave the step",
                            list.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                        )));
                    }
                }
                return Ok(Some(mine));
            }
            VisibleDevices::Indices => {
                let whole = indices
                    .as_ref()
                    .map_or(node.class_indexes(map_by_device::device::DeviceClass::Gpu).len(), Vec::len);
                if items.is_empty() {
                    return Ok(Some(Vec::new()));
                }
                if items.len() != whole {
                    return Err(CliError::Foreign(format!(
                        "{var}={} shows this rank {} of the step's {whole} GPUs by index, which cannot be placed on the \
                         node: name them by UUID, or unset {var} so that exec divides the step's GPUs",
                        excerpt(value),
                        items.len()
                    )));
                }
            }
        }
    }
    Ok(indices)
}

/// The rank's assignment; with `closest`, remade from the rank's own binding, as the plugin
/// remakes a task's.
fn task_plan(spec: &Spec, node: &Node, facts: &StepFacts, plan: &Plan, rank: u32) -> Result<TaskPlan, CliError> {
    let replanned;
    let plan = if spec.closest {
        let mine = affinity::current().map_err(|e| CliError::Foreign(format!("cannot read this rank's CPUs: {e}")))?;
        let mut task_cpus = vec![CpuSet::new(); facts.ntasks as usize];
        if let Some(slot) = task_cpus.get_mut(rank as usize) {
            *slot = mine;
        }
        let facts = StepFacts { task_cpus: Some(task_cpus), ..facts.clone() };
        replanned = plan::plan(&Spec { shared: true, ..spec.clone() }, node, &facts)?;
        &replanned
    } else {
        plan
    };
    plan.tasks.iter().find(|t| t.task == rank).cloned().ok_or_else(|| {
        CliError::Foreign(format!("the plan has no assignment for local rank {rank} ({} planned)", plan.tasks.len()))
    })
}

/// `--print`: the rank's line as `plan` prints a task, its warnings, or why it runs unmapped.
fn printed(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Unmapped(why) => format!("runs unmapped: {why}\n"),
        Outcome::Mapped(m) => {
            let (node, plan, task) = (&m.node, &m.plan, &m.task);
            let mut out = map_by_device::report::task_line(node, task);
            out.push('\n');
            for w in &plan.warnings {
                out.push_str(&format!("warning: {w}\n"));
            }
            out
        }
    }
}

/// Binds this process and sets the rank's variables, as the plugin does for a task; the
/// program then inherits both. `hard`: a failure here stops the rank, else it runs unmapped.
fn apply(m: &Mapped, rank: &LocalRank) -> Result<(), CliError> {
    let Mapped { spec, node, plan, task, allowed, hard } = m;
    let (allowed, hard) = (allowed.as_ref(), *hard);
    if let Some(cpus) = &task.cpus {
        let refused = match allowed.filter(|a| !cpus.is_subset(a)) {
            Some(a) => {
                Some(format!("rank {}: CPUs {cpus} are not all this rank's (allowed: {a}); not binding", rank.rank))
            }
            None => affinity::set_current(cpus)
                .err()
                .map(|e| format!("rank {}: cannot bind to CPUs {cpus}: {e}", rank.rank)),
        };
        if let Some(why) = refused {
            return if hard { Err(CliError::Foreign(why)) } else { Ok(()) };
        }
    }
    for (name, value) in task.env.iter() {
        std::env::set_var(name, value);
    }
    if hard && rank.rank == 0 {
        for w in &plan.warnings {
            eprintln!("map-by-device: warning: {w}");
        }
    }
    if spec.verbose {
        let now = affinity::current().ok();
        let host = std::env::var("SLURMD_NODENAME").ok().or_else(map_by_device::host::name);
        let host = host.as_deref().unwrap_or(node.hostname());
        eprintln!(
            "{} (rank from {}: {})",
            map_by_device::report::verbose_line(host, rank.rank, None, node, task, now.as_ref()),
            rank.launcher.name,
            rank.read
        );
    }
    Ok(())
}
