//! The node side of a step: what slurmstepd decides once in `user_init` (which spec, which
//! topology, which step facts, the whole node's plan) and what each task does with it in
//! `task_init` (its CPU mask, its variables, its verbose line).
//!
//! Nothing here returns an error to Slurm from `user_init`: Slurm 22.05 lets srun exit 0 when
//! `user_init` fails, so every refusal is kept in [`Step`] and reported by the tasks, where
//! a failed hook fails the step (srun exits 1).

use crate::affinity;
use map_by_device::config::Config;
use map_by_device::cpuset::CpuSet;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{self, Plan, StepFacts, TaskPlan};
use map_by_device::spec::Spec;
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
    /// Slurm's name for this node (`SLURMD_NODENAME`), for messages.
    pub node_name: String,
}

/// What `user_init` read from Slurm, handed to [`decide`].
pub struct Inputs {
    /// The job's `--map-by-device` text (command line, `#SBATCH` or environment form).
    pub user_spec: Option<String>,
    /// The plugin's settings, or why they could not be read.
    pub config: Result<Config, String>,
    /// `S_JOB_LOCAL_TASK_COUNT`.
    pub ntasks: u32,
    /// `S_STEP_CPUS_PER_TASK`.
    pub cpus_per_task: Option<u32>,
    /// The job's environment (`S_JOB_ENV`).
    pub env: BTreeMap<String, String>,
    /// `S_STEP_ALLOC_CORES`: the step's cores on this node, in Slurm's abstract numbering.
    pub step_alloc_cores: Option<String>,
}

/// The outcome of `user_init` and a note for slurmd.log on how long it took.
pub fn decide(inputs: Inputs) -> (Step, String) {
    let start = Instant::now();
    let mut facts_note = String::new();
    let step = decide_inner(inputs, &mut facts_note);
    let what = match &step {
        Step::Off => "nothing to map".to_string(),
        Step::Refused { origin, message } => format!("refused ({origin:?}): {message}"),
        Step::Planned(p) => format!("planned {} tasks for {}", p.plan.tasks.len(), p.spec),
    };
    let mut note = format!("{what} in {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
    if !facts_note.is_empty() {
        note.push_str("; ");
        note.push_str(&facts_note);
    }
    (step, note)
}

fn decide_inner(inputs: Inputs, note: &mut String) -> Step {
    let Inputs { user_spec, config, ntasks, cpus_per_task, env, step_alloc_cores } = inputs;
    let (origin, text) = match (&user_spec, &config) {
        (Some(text), _) => (Origin::User, text.clone()),
        (None, Ok(c)) => match &c.default {
            Some(text) => (Origin::AdminDefault, text.clone()),
            None => return Step::Off,
        },
        // A broken configuration cannot say whether there is a default; without a request
        // from the job there is nothing to refuse (slurmd.log has the error).
        (None, Err(_)) => return Step::Off,
    };
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            return Step::Refused {
                origin,
                message: format!("the plugin's configuration on this node is broken, ask your administrator: {e}"),
            }
        }
    };
    let spec = match Spec::parse(&text) {
        Ok(s) => s,
        Err(e) => return Step::Refused { origin, message: format!("invalid --map-by-device={text}: {e}") },
    };
    if spec.is_none() {
        return Step::Off;
    }

    // Only the admin chooses what is loaded: topology= or the live machine. Nothing of the
    // job (its environment, its options) reaches the loader.
    let (topology, live) = match &config.topology {
        Some(path) => (map_by_device::load::from_xml_file(path), false),
        None => (map_by_device::load::live(), true),
    };
    let topology = match topology {
        Ok(t) => t,
        Err(e) => return Step::Refused { origin, message: e.to_string() },
    };
    // Driver identity files describe this machine: read them by default only when the
    // topology is this machine's; for an XML the admin says where (config file).
    let root = |set: &Option<PathBuf>, default: &str| set.clone().or_else(|| live.then(|| PathBuf::from(default)));
    let options = NodeOptions {
        hostname: local_hostname(),
        proc_root: root(&config.proc_root, "/"),
        sys_root: root(&config.sys_root, "/"),
        ze_hierarchy: config.ze_hierarchy,
    };
    let node = Node::new(topology, options);

    let node_name = env.get("SLURMD_NODENAME").cloned().unwrap_or_else(|| node.hostname().to_string());
    let step_gpus = env.get("SLURM_STEP_GPUS").and_then(|v| parse_indices(v));
    let (allowed_cpus, how) = step_cpus(&node.topology, step_alloc_cores.as_deref());
    *note = format!(
        "{ntasks} tasks, cpus-per-task {cpus_per_task:?}, step GPUs {step_gpus:?}, step CPUs {} from {how}",
        allowed_cpus.as_ref().map_or("unknown".to_string(), |c| c.to_list())
    );
    let facts = StepFacts { ntasks, cpus_per_task, allowed_cpus, task_cpus: None, env, step_gpus };
    match plan::plan(&spec, &node, &facts) {
        Ok(plan) => Step::Planned(Box::new(Planned { origin, spec, node, facts, plan, node_name })),
        Err(e) => Step::Refused { origin, message: e.to_string() },
    }
}

/// The CPUs Slurm lets this step use on this node, as slurmstepd sees them in `user_init`:
/// - its own affinity (under task/cgroup slurmstepd already sits in the step's cpuset;
///   under task/affinity alone it is slurmd's, usually the whole node),
/// - its cpuset cgroup's CPUs (task/cgroup with ConstrainCores: the step's cpuset),
/// - the step's allocated cores (`S_STEP_ALLOC_CORES`: Slurm's abstract core numbers, which
///   are the cores' logical indexes when slurm.conf describes the node as it is; ignored
///   when they do not fit the topology, e.g. with `SlurmdParameters=config_overrides`).
///
/// The result is their intersection; `None` when nothing could be read (the planner then
/// uses the whole node). The second value says where it came from, for the debug log.
pub fn step_cpus(topology: &Topology, alloc_cores: Option<&str>) -> (Option<CpuSet>, String) {
    let own = affinity::current().ok();
    let cgroup = affinity::cgroup_cpus();
    let cores = alloc_cores.map(|list| cores_cpus(topology, list));
    let how = format!(
        "slurmstepd affinity {}, cpuset cgroup {}, allocated cores {}",
        own.as_ref().map_or("unreadable".to_string(), |c| c.to_list()),
        cgroup.as_ref().map_or("none".to_string(), |(dir, c)| format!("{} ({})", c.to_list(), dir.display())),
        match (alloc_cores, &cores) {
            (Some(list), Some(Ok(cpus))) => format!("{list} = CPUs {cpus}"),
            (Some(list), Some(Err(why))) => format!("{list} (ignored: {why})"),
            _ => "unknown".to_string(),
        }
    );
    let mut sets = [own, cgroup.map(|(_, c)| c), cores.and_then(Result::ok)].into_iter().flatten();
    let first = sets.next();
    let cpus = first.map(|f| sets.fold(f, |acc, s| acc.intersection(&s)));
    (cpus, how)
}

/// The CPUs of Slurm's abstract cores `list` (`0-3,8`): core k is the topology's core with
/// logical index k (Slurm numbers cores socket by socket in hwloc's order, `xcpuinfo.c`).
fn cores_cpus(topology: &Topology, list: &str) -> Result<CpuSet, String> {
    let ids = CpuSet::parse_list(list).map_err(|e| e.to_string())?;
    let cores: Vec<&CpuSet> = topology.of_kind(ObjKind::Core).map(|c| &c.cpuset).collect();
    let mut cpus = CpuSet::new();
    for id in ids.iter() {
        let core = cores.get(id as usize).ok_or_else(|| {
            format!("core {id} is beyond the topology's {} cores: slurm.conf describes another layout", cores.len())
        })?;
        cpus = cpus.union(core);
    }
    if cpus.is_empty() {
        return Err("no CPUs".into());
    }
    Ok(cpus)
}

/// `0,1` or `0-1` (Slurm writes GPU index lists both ways).
fn parse_indices(text: &str) -> Option<Vec<u32>> {
    let set = CpuSet::parse_list(text.trim()).ok()?;
    Some(set.iter().collect())
}

fn local_hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY:
    // - `buf` is a live, writable buffer of `buf.len()` bytes for the whole call;
    // - gethostname writes at most that many bytes (possibly without a NUL, handled below).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

impl Planned {
    /// This task's assignment. With `closest`, the plan is remade for this task from the
    /// binding Slurm just gave it (known only now, in the task); the whole-node plan made in
    /// `user_init` already refused what does not depend on bindings (too many tasks, no
    /// identity ...).
    pub fn task_plan(&self, task: u32) -> Result<TaskPlan, String> {
        let replanned;
        let plan = if self.spec.closest {
            let mine = affinity::current().map_err(|e| format!("cannot read task {task}'s CPU binding: {e}"))?;
            let mut task_cpus = vec![CpuSet::new(); self.facts.ntasks as usize];
            if let Some(slot) = task_cpus.get_mut(task as usize) {
                *slot = mine;
            }
            let facts = StepFacts { task_cpus: Some(task_cpus), ..self.facts.clone() };
            // Each task sees only its own binding, so tasks cannot check each other for
            // collisions here; `shared` keeps the others' guesses from being reported as one.
            let spec = Spec { shared: true, ..self.spec.clone() };
            replanned = plan::plan(&spec, &self.node, &facts).map_err(|e| e.to_string())?;
            &replanned
        } else {
            &self.plan
        };
        plan.tasks.iter().find(|t| t.task == task).cloned().ok_or_else(|| {
            format!("the plan has no assignment for local task {task} ({} tasks planned)", plan.tasks.len())
        })
    }

    /// The `verbose` line for one task, like `--cpu-bind=verbose`: node, task, devices, CPUs
    /// and variables.
    pub fn verbose_line(
        &self,
        node: Option<&str>,
        task: u32,
        global: Option<u32>,
        tp: &TaskPlan,
        cpus_now: Option<&CpuSet>,
    ) -> String {
        let devices: Vec<String> = tp
            .devices
            .iter()
            .filter_map(|&i| self.node.devices.get(i))
            .map(|d| {
                let mut s = format!("{} {}", d.name, d.busid_text());
                if let Some(id) = &d.identity {
                    s.push(' ');
                    s.push_str(&id.display_id());
                }
                s
            })
            .collect();
        let cpus = match (&tp.cpus, cpus_now) {
            (Some(c), _) => format!("CPUs {c} set"),
            (None, Some(now)) => format!("CPUs {now} kept"),
            (None, None) => "CPUs kept".to_string(),
        };
        let vars: Vec<String> = tp.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let global = global.map(|g| format!(" (global {g})")).unwrap_or_default();
        format!(
            "map-by-device: {}, task {task}{global}: {}; {cpus}; {}",
            node.unwrap_or(&self.node_name),
            if devices.is_empty() { "no device".to_string() } else { devices.join(", ") },
            if vars.is_empty() { "no variables".to_string() } else { vars.join(" ") }
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn inputs(user: Option<&str>, config: Result<Config, String>) -> Inputs {
        Inputs {
            user_spec: user.map(str::to_string),
            config,
            ntasks: 2,
            cpus_per_task: Some(1),
            env: BTreeMap::new(),
            step_alloc_cores: None,
        }
    }

    fn run(inputs: Inputs) -> Step {
        decide_inner(inputs, &mut String::new())
    }

    #[test]
    fn no_request_is_off() {
        assert!(matches!(run(inputs(None, Ok(Config::default()))), Step::Off));
        assert!(matches!(run(inputs(Some("none"), Ok(Config::default()))), Step::Off));
        let default = Config { default: Some("gpu".into()), ..Config::default() };
        assert!(matches!(run(inputs(Some("none"), Ok(default))), Step::Off));
    }

    #[test]
    fn broken_config_refuses_only_explicit_requests() {
        assert!(matches!(run(inputs(None, Err("bad".into()))), Step::Off));
        match run(inputs(Some("gpu"), Err("unknown argument \"x\"".into()))) {
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
            default: Some("gpu".into()),
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
        let e = cores_cpus(&topo, "0-7").unwrap_err();
        assert!(e.contains("core 2 is beyond the topology's 2 cores"), "{e}");
    }

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../topologies").join(name)
    }

    #[test]
    fn gpu_index_lists() {
        assert_eq!(parse_indices("0,1"), Some(vec![0, 1]));
        assert_eq!(parse_indices("0-2"), Some(vec![0, 1, 2]));
        assert_eq!(parse_indices("x"), None);
    }
}
