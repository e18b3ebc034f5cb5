//! The planner: (spec, node, step facts) -> one assignment per local task.
//!
//! One question per file, each taking the previous one's answer (seed 000 "Placement" and
//! "Binding, and the bind ceiling"):
//! 1. [`order`]: which devices, in which order ([`device_order`]: on a step given only part of
//!    the node's CPUs, the devices local to them first and, unless `bind=none`, only those);
//! 2. [`assign`]: which task gets which devices;
//! 3. [`pair`]: with `adapters`, which network adapters go with each task's GPUs;
//! 4. [`bind`]: which CPUs each task gets (from the task's own devices, never its adapters);
//! 5. the environment from [`crate::env`], here, over the task's devices and adapters, with
//!    one `NCCL_IB_HCA` for the whole node ([`nccl`]: and where NCCL would not use the
//!    adapter paired with a GPU, the warning).
//!
//! An admin's default goes through [`crate::soft`] (`as_default`) around this: the share a
//! default may not go below, or stepping aside.
//!
//! Pure: no I/O, no Slurm, no hwloc, no process environment.

mod assign;
mod bind;
mod facts;
pub mod nccl;
mod order;
mod pair;
mod types;

pub use facts::{
    parse_step_gpus, spec_may_use_gpus, step_gpus_for, visible_devices, visible_gpus, StepFacts, StepGpusError,
    VisibleDevices, VisibleGpusError, MAX_GPU_INDEX, MAX_STEP_GPUS_TEXT,
};
pub use order::{device_order, interleave, named_device, DeviceOrder, Near};
pub use types::{FixKind, IdentityFix, Paired, Plan, PlanError, RootWords, TaskPlan};

use crate::cpuset::CpuSet;
use crate::device::{Device, DeviceClass, GpuIdentity};
use crate::node::Node;
use crate::spec::{EnvMode, Spec};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Computes the plan. Pure: no I/O, no Slurm, no hwloc.
pub fn plan(spec: &Spec, node: &Node, facts: &StepFacts) -> Result<Plan, PlanError> {
    let mut plan = Plan::default();
    if spec.is_none() || facts.ntasks == 0 {
        return Ok(plan);
    }
    let topo = &node.topology;
    let order = device_order(spec, node, facts)?;
    let near = order.near(node, facts);
    let DeviceOrder { devices: list, word: class_word, note, .. } = order;
    plan.warnings.extend(note);
    pair::check_target(spec, node, &list)?;
    let assignment = assign::tasks(spec, node, facts, &list, &class_word, near.as_ref(), &mut plan.warnings)?;
    order::degenerate_warning(node, &list, &class_word, spec, &mut plan.warnings);
    order::compact_hint(node, spec, &list, &assignment, &class_word, &mut plan.warnings);
    let pairs = spec.adapters.then(|| pair::NodePairs::new(node));

    let bind = spec.bind_level();
    let allowed = facts.allowed_cpus.clone().unwrap_or_else(|| topo.all_cpus());
    check_identities(&assignment, node, spec)?;
    let mut binder = bind::Binder::new(topo, bind, spec, facts, allowed);
    binder.prepare(&node.devices, &assignment)?;
    if spec.env == EnvMode::PmixOnly {
        plan.warnings.push(
            "env=none: tasks are placed and bound, and told only PMIX_DEVICE_ID: no device-selection variable is \
             written, so each task's runtime sees every device of the node"
                .into(),
        );
    }
    let core_of_pu = if spec.omp == Some(true) { topo.core_of_pu() } else { Vec::new() };
    let mut scratch = Vec::new();
    let adapters = pair::adapters_by_group(pairs.as_ref(), &assignment);
    let held = node_adapters(node, &assignment, &adapters);
    let hcas: Vec<usize> =
        held.iter().copied().filter(|&i| node.devices.get(i).is_some_and(crate::env::names_to_nccl)).collect();
    let adapter_devices: Vec<&Device> = held.iter().filter_map(|&i| node.devices.get(i)).collect();
    // Tasks with the same devices share their adapters and, for the same OpenMP places,
    // their variables.
    let mut groups: HashMap<&[usize], Group> = HashMap::new();
    for (t, devs) in assignment.iter().enumerate() {
        let group = groups.entry(devs).or_insert_with(|| Group::new(node, devs, &adapters));
        let cpus = binder.bind_task(t as u32, &node.devices, devs)?;
        let places = omp_places(spec, &core_of_pu, &mut scratch, cpus.as_ref());
        let (env, warnings) = group.environment(facts, node, spec, places, &adapter_devices)?;
        for w in warnings {
            let line = format!("task {t}: {w}");
            if !plan.warnings.contains(&line) {
                plan.warnings.push(line);
            }
        }
        plan.tasks.push(TaskPlan { task: t as u32, devices: devs.clone(), adapters: group.paired.clone(), cpus, env });
    }
    plan.warnings.append(&mut binder.warnings);
    if let Some(pairs) = &pairs {
        pairs.warnings(node, &plan.tasks, &mut plan.warnings);
        if plan.tasks.iter().any(|t| t.env.contains_key("NCCL_IB_HCA")) {
            nccl::warnings(node, &plan.tasks, &hcas, &mut plan.warnings);
        }
    }
    pair::unnamed_adapters_warning(spec, node, &plan.tasks, &mut plan.warnings);
    pair::uneven_adapters_warning(spec, node, &list, &plan.tasks, &mut plan.warnings);
    Ok(plan)
}

/// The network adapters the tasks of the node hold or are paired with (device indexes, bus
/// order): what the node-wide rows list (`NCCL_IB_HCA`, `FI_CXI_DEVICE_NAME`).
fn node_adapters(node: &Node, assignment: &[Vec<usize>], adapters: &HashMap<&[usize], Vec<Paired>>) -> Vec<usize> {
    let held = assignment.iter().flatten().copied().chain(adapters.values().flatten().map(|p| p.device));
    let mut out: Vec<usize> =
        held.filter(|&i| node.devices.get(i).is_some_and(|d| d.class == DeviceClass::Network)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A task's variables and the warnings their rules gave.
type Environment = (Arc<BTreeMap<String, String>>, Vec<String>);

/// What the tasks holding one group of devices have in common: the paired adapters and the
/// variables, once per OpenMP placement (only `omp` makes these differ between tasks of a
/// group).
struct Group<'a> {
    /// The group's devices, then its adapters: the devices the variables name.
    named: Vec<&'a Device>,
    /// How many of `named` are the group's own devices.
    own: usize,
    paired: Vec<Paired>,
    envs: Vec<(Option<crate::env::Places>, Result<Environment, PlanError>)>,
}

impl<'a> Group<'a> {
    fn new(node: &'a Node, devs: &[usize], adapters: &HashMap<&[usize], Vec<Paired>>) -> Group<'a> {
        let paired = adapters.get(devs).cloned().unwrap_or_default();
        let mut named: Vec<&Device> = devs.iter().filter_map(|&i| node.devices.get(i)).collect();
        let own = named.len();
        named.extend(paired.iter().filter_map(|p| node.devices.get(p.device)));
        Group { named, own, paired, envs: Vec::new() }
    }

    /// The variables of a task of this group with these OpenMP places: the GPUs' and their
    /// adapters', from the same rows, or the value a variable's grammar refuses.
    fn environment(
        &mut self,
        facts: &StepFacts,
        node: &Node,
        spec: &Spec,
        places: Option<crate::env::Places>,
        node_adapters: &[&Device],
    ) -> Result<Environment, PlanError> {
        if let Some((_, env)) = self.envs.iter().find(|(p, _)| *p == places) {
            return env.clone();
        }
        let inputs = crate::env::Inputs {
            node_adapters: Some(node_adapters),
            task_env: &facts.env,
            discovery_model: node.options.ze_hierarchy,
            mode: spec.env,
            omp: places,
        };
        let env = crate::env::task_env(&self.named, &inputs)
            .map(|(vars, warnings)| (Arc::new(vars), warnings))
            .map_err(|source| PlanError::InvalidValue {
                devices: self.named[..self.own]
                    .iter()
                    .map(|d| crate::text::quoted(&d.name))
                    .collect::<Vec<_>>()
                    .join(", "),
                source,
            });
        self.envs.push((places, env.clone()));
        env
    }
}

/// With `omp`, the places of a bound task's mask: its cores, or its hardware threads with
/// `hwtcpus` (a task left unbound has no places to name). `core_of_pu` is the topology's
/// lookup, `scratch` a buffer reused across tasks.
fn omp_places(
    spec: &Spec,
    core_of_pu: &[Option<u32>],
    scratch: &mut Vec<u32>,
    cpus: Option<&CpuSet>,
) -> Option<crate::env::Places> {
    let cpus = cpus.filter(|_| spec.omp == Some(true))?;
    let threads = spec.hwtcpus;
    scratch.clear();
    if !threads {
        scratch.extend(cpus.iter().filter_map(|pu| core_of_pu.get(pu as usize).copied().flatten()));
        scratch.sort_unstable();
        scratch.dedup();
    }
    let count = if scratch.is_empty() { cpus.len() } else { scratch.len() };
    Some(crate::env::Places { count, threads })
}

/// Every GPU the plan hands out must be nameable to its runtime (seed 000: mapping by device
/// and then declining to act on it is indistinguishable from a working run): a vendor
/// identity, and for Level Zero ordinals the hierarchy model they were recorded under.
/// `env=none` (placement only, said by the job) is the one exception. The refusal names the
/// first such GPU in full and every other one after it, so that one fix covers them all.
fn check_identities(assignment: &[Vec<usize>], node: &Node, spec: &Spec) -> Result<(), PlanError> {
    if spec.env == EnvMode::PmixOnly {
        return Ok(());
    }
    let mut seen = vec![false; node.devices.len()];
    let mut refusals = Vec::new();
    for &d in assignment.iter().flatten() {
        if let (Some(dev), Some(false)) = (node.devices.get(d), seen.get(d).copied()) {
            seen[d] = true;
            if let Err(e) = check_identity(dev, node) {
                refusals.push((dev, e));
            }
        }
    }
    let mut refusals = refusals.into_iter();
    match refusals.next() {
        None => Ok(()),
        Some((_, PlanError::NoIdentity { device, busid, host, problem, mut fix })) => {
            fix.others = refusals.map(|(d, _)| format!("{} at {}", d.name, d.busid_text())).collect();
            Err(PlanError::NoIdentity { device, busid, host, problem, fix })
        }
        Some((_, other)) => Err(other),
    }
}

/// One GPU's part of [`check_identities`].
fn check_identity(d: &Device, node: &Node) -> Result<(), PlanError> {
    let unknown_model = node.options.ze_hierarchy.is_none();
    let refused = |d: &Device, problem: String, kind: FixKind| PlanError::NoIdentity {
        device: d.name.clone(),
        busid: d.busid_text(),
        host: node.hostname().into(),
        problem,
        fix: Box::new(IdentityFix { kind, roots: RootWords::PLUGIN, others: Vec::new() }),
    };
    if d.class == DeviceClass::Gpu {
        match d.gpu_id() {
            None => {
                let problem = d.identity_problem().map(str::to_string).unwrap_or_else(|| "no vendor identity".into());
                return Err(refused(d, problem, FixKind::Vendor(d.vendor)));
            }
            Some(GpuIdentity::LevelZero { .. }) if unknown_model => {
                return Err(refused(
                    d,
                    "its Level Zero ordinal is known, but not the hierarchy model (FLAT, COMPOSITE or COMBINED) it \
                     was recorded under, so ZE_AFFINITY_MASK cannot say which device it is"
                        .into(),
                    FixKind::ZeHierarchy,
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}
