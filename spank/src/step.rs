//! The node side of a step: what slurmstepd decides once in `user_init` (which spec, which
//! topology, which step facts, the whole node's plan) and what each task does with it in
//! `task_init` (its CPU mask, its variables, its verbose line).
//!
//! Nothing here returns an error to Slurm from `user_init`: Slurm 22.05 lets srun exit 0 when
//! `user_init` fails, so every refusal is kept in [`Step`] and reported by the tasks, where
//! a failed hook fails the step (srun exits 1).

use crate::args::ArgsError;
use crate::cache;
use crate::discover::DiscoverError;
use map_by_device::affinity;
use map_by_device::config::Config;
use map_by_device::cpuset::{CpuListError, CpuSet};
use map_by_device::device::DeviceClass;
use map_by_device::node::Node;
use map_by_device::plan::{self, Plan, StepFacts, TaskPlan};
use map_by_device::spec::Spec;
use map_by_device::text::excerpt;
use map_by_device::topology::{ObjKind, Topology};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Who asked for the mapping: the job (hard: a refusal fails the step) or the admin's
/// `default=` (soft: a refusal runs the job unmapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    User,
    AdminDefault,
}

/// The step's state on this node, kept from `user_init` for the tasks.
#[derive(Debug)]
pub enum Step {
    /// Nothing to do: no spec, `none`, or a soft default that does not apply here.
    Off,
    /// The request cannot be honoured; `message` is the engine's one-line reason.
    Refused { origin: Origin, message: String },
    /// The whole node's plan.
    Planned(Box<Planned>),
}

/// A step with a plan.
#[derive(Debug)]
pub struct Planned {
    pub origin: Origin,
    pub spec: Spec,
    pub node: Node,
    pub facts: StepFacts,
    pub plan: Plan,
    /// This machine's host name, for messages (the task's own `SLURMD_NODENAME`, which Slurm
    /// writes, is preferred where there is one: slurmstepd.rs `map_task`).
    pub node_name: String,
}

/// What `user_init` read from Slurm, handed to [`decide`].
pub struct Inputs<'a> {
    /// The job's `--map-by-device` text (command line, `#SBATCH` or environment form).
    pub user_spec: Option<String>,
    /// The plugin's settings, or why they could not be read.
    pub config: Result<Config, &'a ArgsError>,
    /// `S_JOB_LOCAL_TASK_COUNT`.
    pub ntasks: u32,
    /// `S_STEP_CPUS_PER_TASK`.
    pub cpus_per_task: Option<u32>,
    /// The job's environment (`S_JOB_ENV`).
    pub env: BTreeMap<String, String>,
    /// `S_STEP_ALLOC_CORES`: the step's cores on this node, in Slurm's abstract numbering.
    pub step_alloc_cores: Option<String>,
    /// Slurm's gres/gpu plugin runs in this slurmstepd ([`crate::probes::gres_gpu_loaded`]), so the
    /// environment's `SLURM_STEP_GPUS` is Slurm's (set or removed), not the job's.
    pub slurm_sets_step_gpus: bool,
}

/// The outcome of `user_init`: the step, a note for slurmd.log at debug level (what was
/// decided, from which facts, in how long) and notices for slurmd.log at info level (a cache
/// that was not trusted, the step's CPUs taken from the last-resort source).
pub struct Decision {
    pub step: Step,
    pub note: String,
    pub notices: Vec<String>,
}

pub fn decide(inputs: Inputs) -> Decision {
    let start = Instant::now();
    let mut log = Log::default();
    let step = decide_inner(inputs, &mut log);
    let what = match &step {
        Step::Off => "nothing to map".to_string(),
        Step::Refused { origin, message } => format!("refused ({origin:?}): {message}"),
        Step::Planned(p) => format!("planned {} tasks for {}", p.plan.tasks.len(), p.spec),
    };
    let mut note = format!("{what} in {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
    for n in &log.notes {
        note.push_str("; ");
        note.push_str(n);
    }
    Decision { step, note, notices: log.notices }
}

/// What [`decide_inner`] has to say for slurmd.log.
#[derive(Default)]
struct Log {
    notes: Vec<String>,
    notices: Vec<String>,
}

fn decide_inner(inputs: Inputs, log: &mut Log) -> Step {
    let Inputs { user_spec, config, ntasks, cpus_per_task, env, step_alloc_cores, slurm_sets_step_gpus } = inputs;
    let (origin, spec, config) = match request(user_spec, config) {
        Ok(Some(request)) => request,
        Ok(None) => return Step::Off,
        Err(refused) => return refused,
    };
    let refused = |message: String| Step::Refused { origin, message };
    // An external launcher's step (srun --external-launcher, marked by srun: probes.rs) is
    // the launcher's, not its ranks': the admin's default leaves it alone.
    if origin == Origin::AdminDefault && env.contains_key(crate::probes::EXTERNAL_LAUNCHER_MARK) {
        log.notes.push("default not applied, an external launcher's step (srun --external-launcher)".into());
        return Step::Off;
    }
    // The job asked Slurm for a CPU binding of its own: the admin's default leaves it alone.
    if origin == Origin::AdminDefault {
        if let Some(why) = crate::probes::job_cpu_binding(&env) {
            log.notes.push(format!("default not applied, the job asked Slurm for its own CPU binding ({why})"));
            return Step::Off;
        }
    }
    let node = match load_node(&config, log) {
        Ok(node) => node,
        Err(e) => return refused(e.to_string()),
    };
    // This machine's name, for messages: never `SLURMD_NODENAME` from `env`, which is the
    // job's environment as srun sent it (the job's user writes it, newlines included).
    let node_name = map_by_device::host::name().unwrap_or_else(|| node.hostname().to_string());
    // What Slurm gave the step of the node's GPUs (a node without GPUs says so first).
    let text = step_gpus_text(&env, slurm_sets_step_gpus, log);
    let no_gpus = text.is_none() && no_gpus_without_list(&config, slurm_sets_step_gpus, log);
    let step_gpus = if no_gpus {
        // The planner refuses a GPU it would hand out (PlanError::NoStepGpus).
        Ok(Some(Vec::new()))
    } else {
        step_gpus(text, &env, slurm_sets_step_gpus, &spec, &node)
    };
    let step_gpus = match step_gpus {
        Ok(gpus) => gpus,
        Err(e) => return refused(e.to_string()),
    };
    let (allowed_cpus, how) = match step_cpus(&node.topology, step_alloc_cores.as_deref()) {
        Ok(found) => found,
        Err(e) => return refused(e.to_string()),
    };
    if how.last_resort {
        log.notices.push(format!("the step's CPUs are taken from slurmstepd's own affinity: {}", how.text));
    }
    log.notes.push(format!(
        "{ntasks} tasks, cpus-per-task {cpus_per_task:?}, step GPUs {step_gpus:?}, step CPUs {} from {}",
        allowed_cpus.to_list(),
        how.text
    ));
    let facts = StepFacts { ntasks, cpus_per_task, allowed_cpus: Some(allowed_cpus), task_cpus: None, env, step_gpus };
    // A job's spec means what it says; an admin's default never gives a task fewer devices
    // than the step's divided by its tasks (soft::as_default), or steps aside.
    let (spec, plan) = match origin {
        Origin::User => match plan::plan(&spec, &node, &facts) {
            Ok(plan) => (spec, plan),
            Err(e) => return refused(e.to_string()),
        },
        Origin::AdminDefault => match map_by_device::soft::as_default(&spec, &node, &facts) {
            Ok(map_by_device::soft::Soft::Maps { spec, plan }) => (spec, plan),
            Ok(map_by_device::soft::Soft::Aside { why }) => {
                return refused(format!("the default {spec} steps aside: {why}"))
            }
            Err(e) => return refused(e.to_string()),
        },
    };
    Step::Planned(Box::new(Planned { origin, spec, node, facts, plan, node_name }))
}

/// Who asks for what: the job's spec (hard), else the admin's default (soft), with the
/// settings. `Ok(None)`: nothing to map (no request, `none`). `Err`: the request is refused.
fn request(
    user_spec: Option<String>,
    config: Result<Config, &ArgsError>,
) -> Result<Option<(Origin, Spec, Config)>, Step> {
    let origin = match (&user_spec, &config) {
        (Some(_), _) => Origin::User,
        (None, Ok(c)) if c.default.is_some() => Origin::AdminDefault,
        // No request; or a broken configuration, which cannot say whether there is a default,
        // and without a request from the job there is nothing to refuse (slurmd.log has it).
        (None, _) => return Ok(None),
    };
    let config = config.map_err(|e| Step::Refused {
        origin,
        message: format!("the plugin's configuration on this node is broken, ask your administrator: {e}"),
    })?;
    let mut spec = match (user_spec, &config.default) {
        (Some(text), _) => Spec::parse(&text).map_err(|e| Step::Refused {
            origin,
            message: format!("invalid --map-by-device={}: {e}", excerpt(&text)),
        })?,
        (None, Some(default)) => default.clone(),
        (None, None) => return Ok(None),
    };
    // The admin's `omp` setting, unless the spec says omp=... itself.
    spec.omp = spec.omp.or(config.omp);
    Ok((!spec.is_none()).then_some((origin, spec, config)))
}

/// The node as the admin chose to describe it: `topology=`, slurmd's cache of the node, or
/// the live machine. Nothing of the job (its environment, its options) reaches the loader.
fn load_node(config: &Config, log: &mut Log) -> Result<Node, DiscoverError> {
    let (topology, this_node, cached) = match &config.topology {
        Some(path) => {
            log.notes.push(format!("topology {}", path.display()));
            (crate::discover::trusted_xml(path), false, false)
        }
        None => match config.cache_dir().map(|dir| cache::read(&dir)) {
            Some(Ok(cached)) => {
                log.notes.push(format!("topology from {}", cached.description));
                (Ok(cached.topology), true, true)
            }
            miss => {
                match &miss {
                    Some(Err(cache::Miss::Rejected(why))) => {
                        log.notices.push(format!("{why}; discovering the node live"))
                    }
                    Some(Err(cache::Miss::Absent(why))) => log.notes.push(format!("live discovery ({why})")),
                    _ => log.notes.push("live discovery (cache = false)".into()),
                }
                (crate::discover::live(config.discovery_timeout()), true, false)
            }
        },
    };
    let mut topology = topology?;
    let options = config.node_options(this_node, map_by_device::host::name());
    if let (true, Some(sys)) = (cached, &options.sys_root) {
        // The cache is as old as slurmd; an InfiniBand link may have come up since.
        let changed = map_by_device::driver_ids::refresh_ib_port_states(&mut topology, sys);
        if changed > 0 {
            log.notes.push(format!("{changed} InfiniBand port states changed since slurmd cached the topology"));
        }
    }
    Ok(Node::new(topology, options))
}

/// Why the step's GPUs on this node are unknown, for a mapping that may use them.
#[derive(Debug, thiserror::Error)]
pub enum GpusError {
    /// `SLURM_STEP_GPUS` cannot be read.
    #[error(transparent)]
    Unreadable(#[from] plan::StepGpusError),
    /// Slurm's visible-devices variables disagree with the step's GPUs, or cannot be mapped.
    #[error(transparent)]
    Visible(#[from] plan::VisibleGpusError),
}

/// `SLURM_STEP_GPUS` where it is Slurm's: only where its gres/gpu plugin runs in this
/// slurmstepd (it then sets or removes it for every step); elsewhere the value would be the
/// job's own, and is not read at all.
fn step_gpus_text<'a>(env: &'a BTreeMap<String, String>, slurm_sets_step_gpus: bool, log: &mut Log) -> Option<&'a str> {
    match env.get("SLURM_STEP_GPUS") {
        Some(v) if !slurm_sets_step_gpus => {
            log.notes.push(format!(
                "SLURM_STEP_GPUS ignored ({} bytes): Slurm's gres/gpu plugin does not run in this step, so the value \
                 is the job's own",
                v.len()
            ));
            None
        }
        other => other.map(String::as_str),
    }
}

/// Whether a step without `SLURM_STEP_GPUS` has no GPU on this node: `require_step_gpus` when
/// the admin set it; unset, exactly where Slurm's gres/gpu runs in the step (it removes the
/// variable from a step that asked for no GPU), while a node whose GPUs Slurm does not manage
/// gives every step all of them (docs/slurm-allocation.md).
fn no_gpus_without_list(config: &Config, slurm_sets_step_gpus: bool, log: &mut Log) -> bool {
    let (no_gpus, rule) = match config.require_step_gpus {
        Some(r) => (r, "require_step_gpus"),
        None => (slurm_sets_step_gpus, "Slurm's gres/gpu runs in the step"),
    };
    if no_gpus {
        log.notes.push(format!("no SLURM_STEP_GPUS and {rule}: the step has no GPU here"));
    }
    no_gpus
}

/// The GPUs Slurm allocated to the step on this node, from `SLURM_STEP_GPUS` (`text`, Slurm's
/// or `None`: [`step_gpus_text`]) and its visible-devices variables; `None` when the node's
/// GPUs are not Slurm's to give, which a step without the list only is where
/// [`no_gpus_without_list`] says so.
fn step_gpus(
    text: Option<&str>,
    env: &BTreeMap<String, String>,
    slurm_sets_step_gpus: bool,
    spec: &Spec,
    node: &Node,
) -> Result<Option<Vec<u32>>, GpusError> {
    let indices = plan::step_gpus_for(text, spec)?;
    if !slurm_sets_step_gpus || !plan::spec_may_use_gpus(spec) {
        return Ok(indices);
    }
    plan::visible_gpus(env, node, indices).map_err(GpusError::Visible)
}

/// Why the step's CPUs on this node are unknown: nothing is bound.
#[derive(Debug, thiserror::Error)]
pub enum StepCpusError {
    /// The allocated cores' CPUs, the cpuset cgroup's directory and its CPUs.
    #[error(
        "the step's allocated cores (CPUs {cores}) and its cpuset cgroup {} (CPUs {cgroup_cpus}) do not overlap, so \
         the step's CPUs on this node are unknown: not binding (ask your administrator to check slurm.conf's node \
         description against the hardware)",
        cgroup.display()
    )]
    Disjoint { cores: CpuSet, cgroup: PathBuf, cgroup_cpus: CpuSet },
    /// Neither source exists, and slurmstepd's own affinity cannot be read.
    #[error(
        "cannot tell which CPUs the step was given on this node (no allocated cores, no cpuset cgroup, and \
         slurmstepd's affinity is unreadable: {0}): not binding"
    )]
    Unknown(std::io::Error),
}

/// Why Slurm's abstract core list gives no CPUs of this topology.
#[derive(Debug, thiserror::Error)]
pub enum CoresError {
    #[error(transparent)]
    List(#[from] CpuListError),
    /// A core number and the topology's number of cores.
    #[error("core {id} is beyond the topology's {cores} cores: slurm.conf describes another layout")]
    Beyond { id: u32, cores: usize },
    #[error("no CPUs")]
    Empty,
}

/// Where the step's CPUs came from, for the log.
pub struct CpusFrom {
    pub text: String,
    /// Neither the allocated cores nor a cpuset cgroup could be read: slurmstepd's own
    /// affinity was used.
    pub last_resort: bool,
}

/// The CPUs Slurm allocated to this step on this node, as slurmstepd can tell in `user_init`
/// (docs/slurm-allocation.md, Recommendation (a)):
/// 1. `S_STEP_ALLOC_CORES`, Slurm's abstract core numbers, which are the cores' logical
///    indexes (hwloc `L#`): each gives all of its core's PUs. Ignored (and said) when an index
///    does not fit the topology: slurm.conf then describes another layout.
/// 2. intersected with the step's cpuset cgroup (v1: slurmstepd's own; v2: the step's `user`
///    sibling), which is what task/cgroup enforces.
/// 3. only when neither exists, slurmstepd's own affinity, which under task/affinity is
///    slurmd's (the whole node, or the specialized cores with CoreSpec): the last resort.
///
/// Sources 1 and 2 not overlapping is a refusal that names both.
pub fn step_cpus(topology: &Topology, alloc_cores: Option<&str>) -> Result<(CpuSet, CpusFrom), StepCpusError> {
    step_cpus_from(topology, alloc_cores, affinity::cgroup_cpus(), affinity::current)
}

fn step_cpus_from(
    topology: &Topology,
    alloc_cores: Option<&str>,
    cgroup: Option<(PathBuf, CpuSet)>,
    own_affinity: impl FnOnce() -> std::io::Result<CpuSet>,
) -> Result<(CpuSet, CpusFrom), StepCpusError> {
    let cores = alloc_cores.map(|list| (list, cores_cpus(topology, list)));
    let cores_text = match &cores {
        Some((list, Ok(cpus))) => format!("allocated cores {list} = CPUs {cpus}"),
        Some((list, Err(why))) => format!("allocated cores {list} ignored: {why}"),
        None => "allocated cores unknown".to_string(),
    };
    let cgroup_text = match &cgroup {
        Some((dir, cpus)) => format!("cpuset cgroup {} = CPUs {cpus}", dir.display()),
        None => "no cpuset cgroup".to_string(),
    };
    let text = format!("{cores_text}, {cgroup_text}");
    let cores = cores.and_then(|(_, c)| c.ok());
    let cpus = match (cores, &cgroup) {
        (Some(c), Some((dir, g))) => {
            let both = c.intersection(g);
            if both.is_empty() {
                return Err(StepCpusError::Disjoint { cores: c, cgroup: dir.clone(), cgroup_cpus: g.clone() });
            }
            both
        }
        (Some(c), None) => c,
        (None, Some((_, g))) => g.clone(),
        (None, None) => {
            let own = own_affinity().map_err(StepCpusError::Unknown)?;
            let text = format!("{text}: slurmstepd's affinity {own} (last resort)");
            return Ok((own, CpusFrom { text, last_resort: true }));
        }
    };
    Ok((cpus, CpusFrom { text, last_resort: false }))
}

/// The CPUs of Slurm's abstract cores `list` (`0-3,8`): core k is the topology's core with
/// logical index k (Slurm numbers cores socket by socket in hwloc's order, `xcpuinfo.c`).
fn cores_cpus(topology: &Topology, list: &str) -> Result<CpuSet, CoresError> {
    let ids = CpuSet::parse_list(list)?;
    let cores: Vec<&CpuSet> = topology.of_kind(ObjKind::Core).map(|c| &c.cpuset).collect();
    let mut cpus = CpuSet::new();
    for id in ids.iter() {
        let core = cores.get(id as usize).ok_or(CoresError::Beyond { id, cores: cores.len() })?;
        cpus = cpus.union(core);
    }
    if cpus.is_empty() {
        return Err(CoresError::Empty);
    }
    Ok(cpus)
}

/// Why a task has no assignment.
#[derive(Debug, thiserror::Error)]
pub enum TaskPlanError {
    /// `closest`: the task's own binding (the task) cannot be read.
    #[error("cannot read task {task}'s CPU binding: {error}")]
    Binding { task: u32, error: std::io::Error },
    /// `closest`: the task's plan cannot be remade from its binding.
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    /// The plan and the number of tasks it holds.
    #[error("the plan has no assignment for local task {task} ({planned} tasks planned)")]
    NoAssignment { task: u32, planned: usize },
}

impl Planned {
    /// Whether Slurm's own GPU binding of a task (the task's `SLURM_STEP_GPUS`, which Slurm
    /// rewrites per task when it binds) gives it exactly the GPUs the plan gives it.
    pub fn agrees_with_slurm(&self, tp: &TaskPlan, task_gpus: Option<&str>) -> bool {
        let Some(slurms) = task_gpus.and_then(|t| plan::parse_step_gpus(t).ok()) else { return false };
        let gpus = self.node.class_indexes(DeviceClass::Gpu);
        let mut mine: Vec<u32> =
            tp.devices.iter().filter_map(|d| gpus.iter().position(|g| g == d)).map(|p| p as u32).collect();
        mine.sort_unstable();
        !mine.is_empty() && mine == slurms
    }

    /// Whether the task's assignment includes a GPU.
    pub fn assigns_gpu(&self, tp: &TaskPlan) -> bool {
        tp.devices.iter().any(|&i| self.node.devices.get(i).is_some_and(|d| d.class == DeviceClass::Gpu))
    }

    /// This task's assignment. With `closest`, the plan is remade for this task from the
    /// binding Slurm just gave it (known only now, in the task); the whole-node plan made in
    /// `user_init` already refused what does not depend on bindings (too many tasks, no
    /// identity ...).
    pub fn task_plan(&self, task: u32) -> Result<TaskPlan, TaskPlanError> {
        let replanned;
        let plan = if self.spec.closest {
            let mine = affinity::current().map_err(|error| TaskPlanError::Binding { task, error })?;
            let mut task_cpus = vec![CpuSet::new(); self.facts.ntasks as usize];
            if let Some(slot) = task_cpus.get_mut(task as usize) {
                *slot = mine;
            }
            let facts = StepFacts { task_cpus: Some(task_cpus), ..self.facts.clone() };
            // Each task sees only its own binding, so tasks cannot check each other for
            // collisions here; `shared` keeps the others' guesses from being reported as one.
            let spec = Spec { shared: true, ..self.spec.clone() };
            replanned = plan::plan(&spec, &self.node, &facts)?;
            &replanned
        } else {
            &self.plan
        };
        plan.tasks
            .iter()
            .find(|t| t.task == task)
            .cloned()
            .ok_or(TaskPlanError::NoAssignment { task, planned: plan.tasks.len() })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use map_by_device::plan::VisibleGpusError;

    fn inputs<'a>(user: Option<&str>, config: Result<Config, &'a ArgsError>) -> Inputs<'a> {
        Inputs {
            user_spec: user.map(str::to_string),
            config,
            ntasks: 2,
            cpus_per_task: Some(1),
            env: BTreeMap::new(),
            step_alloc_cores: None,
            // A node whose GPUs Slurm does not manage (no gres/gpu in the step).
            slurm_sets_step_gpus: false,
        }
    }

    fn run(inputs: Inputs) -> Step {
        decide_inner(inputs, &mut Log::default())
    }

    #[test]
    fn no_request_is_off() {
        assert!(matches!(run(inputs(None, Ok(Config::default()))), Step::Off));
        assert!(matches!(run(inputs(Some("none"), Ok(Config::default()))), Step::Off));
        let default = Config { default: Some(Spec::parse("gpu").unwrap()), ..Config::default() };
        assert!(matches!(run(inputs(Some("none"), Ok(default))), Step::Off));
    }

    #[test]
    fn broken_config_refuses_only_explicit_requests() {
        let bad = ArgsError::from(Config::from_plugin_args(&["x".to_string()]).unwrap_err());
        assert!(matches!(run(inputs(None, Err(&bad))), Step::Off));
        match run(inputs(Some("gpu"), Err(&bad))) {
            Step::Refused { origin: Origin::User, message } => assert!(message.contains("\"x\""), "{message}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_user_spec_is_refused_with_the_engine_message() {
        match run(inputs(Some("gpu:bogus"), Ok(Config::default()))) {
            Step::Refused { origin: Origin::User, message } => {
                assert!(message.contains("gpu:bogus") && message.contains("\"bogus\""), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_topology_is_refused_softly_for_a_default() {
        let config = Config {
            default: Some(Spec::parse("gpu").unwrap()),
            topology: Some("/nonexistent/topology.xml".into()),
            ..Config::default()
        };
        match run(inputs(None, Ok(config))) {
            Step::Refused { origin: Origin::AdminDefault, message } => {
                assert!(message.contains("/nonexistent/topology.xml"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn allocated_cores_are_logical_cores() {
        let topo = map_by_device::load::from_xml_file(&fixture("e2e-2gpu.xml")).unwrap();
        assert_eq!(cores_cpus(&topo, "1").unwrap().to_list(), "1");
        assert_eq!(cores_cpus(&topo, "0-1").unwrap().to_list(), "0-1");
        // 8 cores declared on a 2-core node (config_overrides): not this topology's cores.
        let e = cores_cpus(&topo, "0-7").unwrap_err().to_string();
        assert!(e.contains("core 2 is beyond the topology's 2 cores"), "{e}");
    }

    /// Prints `skipped: TEXT` straight to stderr, past cargo's output capture, for
    /// scripts/test-all.sh to count (a test that returns early passes).
    fn skipped(text: &str) {
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(format!("skipped: {text}\n").as_bytes());
    }

    fn fixture(name: &str) -> PathBuf {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../topologies").join(name);
        std::fs::canonicalize(&path).unwrap_or(path)
    }

    /// The fixture as a `topology=` the plugin will read: root's, under root-only
    /// directories. `None`, with a line saying so, where the checkout is not.
    fn trusted_fixture(name: &str) -> Option<PathBuf> {
        let path = fixture(name);
        match map_by_device::trusted_fs::read_file(&path, 1 << 24) {
            Ok(_) => Some(path),
            Err(e) => {
                skipped(&format!("the fixture cannot be a topology= here ({e})"));
                None
            }
        }
    }

    fn fixture_topology() -> Topology {
        map_by_device::load::from_xml_file(&fixture("e2e-2gpu.xml")).unwrap()
    }

    #[test]
    fn step_cpus_are_the_allocated_cores_within_the_cgroup() {
        let topo = fixture_topology();
        let cg = |list: &str| Some((PathBuf::from("/sys/fs/cgroup/cpuset/slurm/job_1/step_0"), list.parse().unwrap()));
        let never = || -> std::io::Result<CpuSet> { panic!("the affinity is the last resort") };
        // task/affinity: the root cpuset holds the whole node, the cores say which.
        let (cpus, how) = step_cpus_from(&topo, Some("1"), cg("0-1"), never).unwrap();
        assert_eq!(cpus.to_list(), "1");
        assert!(!how.last_resort && how.text.contains("allocated cores 1 = CPUs 1"), "{}", how.text);
        // task/cgroup: both agree.
        assert_eq!(step_cpus_from(&topo, Some("0"), cg("0"), never).unwrap().0.to_list(), "0");
        // config_overrides: cores beyond the topology are ignored, the cgroup stands.
        let (cpus, how) = step_cpus_from(&topo, Some("0-5"), cg("0-1"), never).unwrap();
        assert_eq!(cpus.to_list(), "0-1");
        assert!(how.text.contains("ignored: core 2 is beyond"), "{}", how.text);
        // No cgroup: the cores alone.
        assert_eq!(step_cpus_from(&topo, Some("0"), None, never).unwrap().0.to_list(), "0");
        // Disjoint: refused, naming both.
        let e = step_cpus_from(&topo, Some("0"), cg("1"), never).err().unwrap().to_string();
        assert!(e.contains("CPUs 0") && e.contains("CPUs 1") && e.contains("do not overlap"), "{e}");
    }

    #[test]
    fn slurmstepd_affinity_is_only_the_last_resort() {
        let topo = fixture_topology();
        let (cpus, how) = step_cpus_from(&topo, None, None, || Ok("1".parse().unwrap())).unwrap();
        assert_eq!(cpus.to_list(), "1");
        assert!(how.last_resort && how.text.contains("last resort"), "{}", how.text);
        let (cpus, how) = step_cpus_from(&topo, Some("9"), None, || Ok("0-1".parse().unwrap())).unwrap();
        assert_eq!(cpus.to_list(), "0-1");
        assert!(how.last_resort);
        let e = step_cpus_from(&topo, None, None, || Err(std::io::Error::other("nope"))).err().unwrap().to_string();
        assert!(e.contains("nope") && e.contains("not binding"), "{e}");
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn an_unreadable_step_gpu_list_is_refused_for_gpus_only() {
        let Some(topology) = trusted_fixture("e2e-2gpu.xml") else { return };
        let mut i = inputs(Some("gpu"), Ok(Config { topology: Some(topology.clone()), ..Config::default() }));
        i.env = env(&[("SLURM_STEP_GPUS", "gpu:a100")]);
        i.slurm_sets_step_gpus = true;
        match run(i) {
            Step::Refused { origin: Origin::User, message } => {
                assert!(message.contains("SLURM_STEP_GPUS"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let mut i = inputs(Some("network"), Ok(Config { topology: Some(topology), ..Config::default() }));
        i.env = env(&[("SLURM_STEP_GPUS", "gpu:a100")]);
        i.slurm_sets_step_gpus = true;
        i.step_alloc_cores = Some("0-1".into());
        assert!(matches!(run(i), Step::Planned(_)));
    }

    /// The admin's `omp = true`: every mapped task is told its binding in the OpenMP
    /// variables, a variable the job set itself is kept (each of the three on its own), and a
    /// job's `omp=false` opts out.
    #[test]
    fn admin_omp_tells_each_task_and_keeps_the_jobs_own_values() {
        let Some(topology) = trusted_fixture("e2e-2gpu.xml") else { return };
        let config = Config { topology: Some(topology), omp: Some(true), ..Config::default() };
        let planned = |spec: &str, job_env: &[(&str, &str)]| {
            let mut i = inputs(Some(spec), Ok(config.clone()));
            i.step_alloc_cores = Some("0-1".into());
            i.env = env(job_env);
            match run(i) {
                Step::Planned(p) => p.plan.tasks.iter().map(|t| t.env.clone()).collect::<Vec<_>>(),
                other => panic!("{spec}: {other:?}"),
            }
        };
        let omp = |e: &BTreeMap<String, String>| {
            ["OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND"].map(|k| e.get(k).cloned().unwrap_or_default())
        };
        // One core each (bind=split on two packages of one core).
        for e in planned("gpu", &[]) {
            assert_eq!(omp(&e), ["1", "cores", "spread"], "{e:?}");
        }
        // The job's own values: not written, so the task keeps what it has.
        for e in planned("gpu", &[("OMP_NUM_THREADS", "7")]) {
            assert_eq!(omp(&e), ["", "cores", "spread"], "{e:?}");
        }
        for e in planned("gpu", &[("OMP_PLACES", "threads"), ("OMP_PROC_BIND", "close")]) {
            assert_eq!(omp(&e), ["1", "", ""], "{e:?}");
        }
        // The job says no.
        for e in planned("gpu:omp=false", &[]) {
            assert_eq!(omp(&e), ["", "", ""], "{e:?}");
        }
        // Without the setting, only omp in the spec.
        let mut i = inputs(Some("gpu"), Ok(Config { omp: None, ..config.clone() }));
        i.step_alloc_cores = Some("0-1".into());
        match run(i) {
            Step::Planned(p) => assert!(p.plan.tasks.iter().all(|t| !t.env.contains_key("OMP_PLACES"))),
            other => panic!("{other:?}"),
        }
    }

    /// A step without `SLURM_STEP_GPUS`: no GPU where Slurm's gres/gpu runs in the step (a
    /// job's GPU mapping refused with how to ask Slurm for GPUs, a default stepping aside), all
    /// of the node's where it does not; `require_step_gpus` set says which, whatever runs.
    #[test]
    fn without_step_gpus_no_gpu_where_slurm_manages_them() {
        let Some(topology) = trusted_fixture("e2e-2gpu.xml") else { return };
        let config = Config { topology: Some(topology), ..Config::default() };
        let step = |spec: Option<&str>, config: &Config, slurm: bool| {
            let mut i = inputs(spec, Ok(config.clone()));
            i.step_alloc_cores = Some("0-1".into());
            i.slurm_sets_step_gpus = slurm;
            run(i)
        };
        let no_gpu = |step: Step, want: Origin| match step {
            Step::Refused { origin, message } if origin == want => assert!(
                message.contains("the step has no GPUs on")
                    && message.contains("--gpus-per-node=N")
                    && message.contains("--gpus-per-task=N"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        };
        let mapped = |step: Step| match step {
            Step::Planned(p) => assert_eq!(p.plan.tasks.len(), 2),
            other => panic!("{other:?}"),
        };
        // Unset: the rule follows gres/gpu.
        no_gpu(step(Some("gpu"), &config, true), Origin::User);
        no_gpu(step(Some("cuda1"), &config, true), Origin::User);
        let default = Config { default: Some(Spec::parse("gpu").unwrap()), ..config.clone() };
        no_gpu(step(None, &default, true), Origin::AdminDefault);
        mapped(step(Some("gpu"), &config, false));
        mapped(step(None, &default, false));
        // Other classes do not need GPUs.
        mapped(step(Some("network"), &config, true));
        // Set: the admin's word.
        let required = Config { require_step_gpus: Some(true), ..config.clone() };
        no_gpu(step(Some("gpu"), &required, false), Origin::User);
        mapped(step(Some("network"), &required, false));
        let not_required = Config { require_step_gpus: Some(false), ..config };
        mapped(step(Some("gpu"), &not_required, true));
    }

    /// An admin default leaves a job that asked Slurm for its own CPU binding alone, and
    /// steps aside rather than give a task less than Slurm gave it (GPUs left idle, fewer
    /// CPUs than --cpus-per-task); the job's own spec is refused only for the latter.
    #[test]
    fn a_default_never_gives_less_than_slurm_nor_overrides_the_jobs_binding() {
        let Some(topology) = trusted_fixture("e2e-2gpu.xml") else { return };
        let default =
            Config { topology: Some(topology), default: Some(Spec::parse("gpu").unwrap()), ..Config::default() };
        let step = |user: Option<&str>, ntasks: u32, cpus: u32, job_env: &[(&str, &str)]| {
            let mut i = inputs(user, Ok(default.clone()));
            i.step_alloc_cores = Some("0-1".into());
            i.slurm_sets_step_gpus = true;
            i.ntasks = ntasks;
            i.cpus_per_task = Some(cpus);
            i.env = env(job_env);
            let mut log = Log::default();
            let step = decide_inner(i, &mut log);
            (step, log.notes.join("; "))
        };
        let gpus = [("SLURM_STEP_GPUS", "0,1")];
        assert!(matches!(step(None, 2, 1, &gpus).0, Step::Planned(_)));
        // --cpu-bind=cores: off, and the debug note says why.
        let (s, notes) =
            step(None, 2, 1, &[gpus[0], ("SLURM_CPU_BIND_TYPE", "cores"), ("SLURM_CPU_BIND", "quiet,cores")]);
        assert!(matches!(s, Step::Off), "{s:?}");
        assert!(notes.contains("the job asked Slurm for its own CPU binding (SLURM_CPU_BIND_TYPE=cores)"), "{notes}");
        // The job's own spec is the job's: its --cpu-bind does not stop it.
        let own = [gpus[0], ("SLURM_CPU_BIND_TYPE", "cores")];
        assert!(matches!(step(Some("gpu"), 2, 1, &own).0, Step::Planned(_)));
        // srun --external-launcher (srun marks the step): the default leaves it alone; the
        // job's own spec still maps it.
        let ext = [gpus[0], (crate::probes::EXTERNAL_LAUNCHER_MARK, "1")];
        let (s, notes) = step(None, 1, 2, &ext);
        assert!(matches!(s, Step::Off), "{s:?}");
        assert!(notes.contains("an external launcher's step"), "{notes}");
        assert!(matches!(step(Some("gpu"), 2, 1, &ext).0, Step::Planned(_)));
        // One task on two GPUs (a launcher's daemon): the default gives it both, never one.
        match step(None, 1, 1, &gpus).0 {
            Step::Planned(p) => {
                assert_eq!(p.spec.to_string(), "gpu:ndev=auto");
                assert_eq!(p.plan.tasks[0].devices.len(), 2, "{:?}", p.plan);
            }
            other => panic!("{other:?}"),
        }
        // One GPU far from a one-CPU step is
        // left to no task: the default steps aside rather than hide it.
        let mut i = inputs(None, Ok(default.clone()));
        i.step_alloc_cores = Some("0".into());
        i.slurm_sets_step_gpus = true;
        i.ntasks = 1;
        i.env = env(&gpus);
        match decide_inner(i, &mut Log::default()) {
            Step::Refused { origin: Origin::AdminDefault, message } => {
                assert!(message.contains("steps aside") && message.contains("(cuda1; they are far"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // ... which the job's own spec may ask for (the plan warns).
        assert!(matches!(step(Some("gpu"), 1, 1, &gpus).0, Step::Planned(_)));
        // Two CPUs per task on GPUs near one CPU each: soft for the default, hard for the job.
        assert!(matches!(step(None, 2, 2, &gpus).0, Step::Refused { origin: Origin::AdminDefault, .. }));
        match step(Some("gpu"), 2, 2, &gpus).0 {
            Step::Refused { origin: Origin::User, message } => {
                assert!(message.contains("fewer than the 2 it asked Slurm for with --cpus-per-task"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_jobs_own_step_gpus_are_ignored_where_slurm_does_not_set_them() {
        let Some(topology) = trusted_fixture("e2e-2gpu.xml") else { return };
        let config = Config { topology: Some(topology), ..Config::default() };
        let huge = vec!["0-1048576"; 13_000].join(",");
        for (value, slurm) in [("1", false), (huge.as_str(), false), ("1", true)] {
            let mut i = inputs(Some("gpu"), Ok(config.clone()));
            i.ntasks = 1;
            i.env = env(&[("SLURM_STEP_GPUS", value)]);
            i.step_alloc_cores = Some("0-1".into());
            i.slurm_sets_step_gpus = slurm;
            let mut log = Log::default();
            let t0 = Instant::now();
            let step = decide_inner(i, &mut log);
            assert!(t0.elapsed().as_secs_f64() < 1.0, "{:?}", t0.elapsed());
            let Step::Planned(p) = step else { panic!("{step:?}") };
            // Ignored: the node's first GPU; Slurm's: GPU index 1.
            assert_eq!(p.plan.tasks[0].devices, vec![usize::from(slurm)], "{value:.20} {slurm}");
            assert_eq!(log.notes.iter().any(|n| n.contains("SLURM_STEP_GPUS ignored")), !slurm);
        }
        // Slurm's value, but absurd: refused quickly with a short message.
        let mut i = inputs(Some("gpu"), Ok(config));
        i.env = env(&[("SLURM_STEP_GPUS", huge.as_str())]);
        i.slurm_sets_step_gpus = true;
        let t0 = Instant::now();
        match run(i) {
            Step::Refused { message, .. } => {
                assert!(message.contains("SLURM_STEP_GPUS=") && message.len() < 400, "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(t0.elapsed().as_secs_f64() < 1.0);
    }

    #[test]
    fn slurms_visible_devices_narrow_or_refuse() {
        let node = Node::new(fixture_topology(), map_by_device::node::NodeOptions::default());
        let (g0, g1) = ("GPU-2fa8685e-6ae2-c4f4-39df-551ea6a96245", "GPU-1bc1cea7-7fd4-5fb3-299e-bdaf9d7efe54");
        let visible = |var: &str, value: &str, indices: Option<Vec<u32>>| {
            plan::visible_gpus(&env(&[(var, value)]), &node, indices)
        };
        // Numeric: SLURM_STEP_GPUS decides.
        assert_eq!(visible("CUDA_VISIBLE_DEVICES", "0", Some(vec![1])), Ok(Some(vec![1])));
        // env_uuid: the UUIDs name the GPUs, in PCI order, and agree with SLURM_STEP_GPUS.
        assert_eq!(visible("CUDA_VISIBLE_DEVICES", &format!("{g1},{g0}"), Some(vec![0, 1])), Ok(Some(vec![0, 1])));
        assert_eq!(visible("ROCR_VISIBLE_DEVICES", g1, None), Ok(Some(vec![1])));
        let e = visible("CUDA_VISIBLE_DEVICES", g1, Some(vec![0])).unwrap_err();
        assert!(matches!(&e, VisibleGpusError::Order { uuids, step_gpus, .. } if *uuids == [1] && *step_gpus == [0]));
        let e = e.to_string();
        assert!(e.contains("SLURM_STEP_GPUS says [0]") && e.contains("PCI-bus order"), "{e}");
        let e = visible("CUDA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000000", Some(vec![0])).unwrap_err();
        assert!(e.to_string().contains("does not have"), "{e}");
        // MIG: refused, Slurm's value kept, the fix named.
        let e = visible("CUDA_VISIBLE_DEVICES", "MIG-4b4f7a2c-1f0e-5a3d-9a1b-2c3d4e5f6a7b", Some(vec![0])).unwrap_err();
        assert!(matches!(e, VisibleGpusError::Mig { var: "CUDA_VISIBLE_DEVICES", .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("MIG instances") && e.contains("--map-by-device=none"), "{e}");
    }
}
