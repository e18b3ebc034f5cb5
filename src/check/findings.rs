//! What [`super::check`] finds, one question per function: the plugin's setup, the
//! topology cache, the devices and the variables they give, display adapters that are not
//! GPUs, what a step on part of the node is handed, how each GPU is named, the
//! GPU-allocation setting, and what the default does.

use super::{
    CacheProbe, CacheState, DefaultOutcome, DefaultStep, DeviceLine, GpuNaming, GpuStatus, PartialStep, Setup,
    StepOutcome,
};
use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::device::{Device, DeviceClass, GpuIdentity, IdentitySource};
use crate::env::Inputs;
use crate::node::Node;
use crate::plan::{device_order, plan, PlanError, StepFacts};
use crate::report;
use crate::soft::{as_default, Soft};
use crate::spec::{BindLevel, EnvMode, Spec, Target};
use std::collections::BTreeMap;

/// Problems with how the plugin is enabled; the settings, when they could be read.
pub(super) fn setup<'a>(setup: &'a Setup, problems: &mut Vec<String>) -> Option<&'a Config> {
    let (entries, config, origin) = match setup {
        Setup::NotExamined => return None,
        Setup::NotEnabled { files } => {
            problems.push(format!(
                "the plugin is not enabled: no required/optional line for map_by_device.so in {} \
                 (add one, see plugstack.conf.example or /etc/slurm/plugstack.conf.d/map-by-device.conf)",
                if files.is_empty() { "plugstack.conf".to_string() } else { files.join(", ") }
            ));
            return None;
        }
        Setup::Configured { entries, config, origin } => (entries, config, origin),
    };
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
                "{} loads the plugin as optional: Slurm ignores the failures of an optional plugin, so a request \
                 it refuses (or a broken configuration) runs the job unmapped instead of failing the step; write \
                 required",
                e.origin
            ));
        }
        if let Some(Err(why)) = &e.discover {
            problems.push(format!(
                "{}: {why}; without it slurmd cannot write the topology cache, and steps that read topology= or \
                 discover the node fail",
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

/// The topology cache, as a note: it makes steps faster, not different.
pub(super) fn cache(probe: Option<&CacheProbe>, notes: &mut Vec<String>) -> Option<CacheState> {
    let state = probe.map(super::cache_state);
    match &state {
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
        Some(CacheState::OtherBuild { path }) => notes.push(format!(
            "the topology cache {} was written by another build of the plugin (its .so was replaced since slurmd \
             started, as an upgrade does): until slurmd restarts, every step discovers the node itself (about 15 \
             ms per step); restart slurmd, which rewrites the cache, to end this window",
            path.display()
        )),
        _ => {}
    }
    state
}

/// One line per device with the variables a task mapped to it alone gets; problems with the
/// Level Zero model and with values their variables refuse.
pub(super) fn devices(node: &Node, problems: &mut Vec<String>, notes: &mut Vec<String>) -> Vec<DeviceLine> {
    let ze = node.options.ze_hierarchy;
    let level_zero = node.devices.iter().filter(|d| matches!(d.gpu_id(), Some(GpuIdentity::LevelZero { .. }))).count();
    if level_zero > 0 && ze.is_none() {
        problems.push(format!(
            "{level_zero} Level Zero GPUs, but the hierarchy model their ordinals were recorded under is unknown, so \
             ZE_AFFINITY_MASK cannot say which GPU a task got and every GPU mapping here is refused: set ze_hierarchy \
             (FLAT, COMPOSITE or COMBINED: the ZE_FLAT_DEVICE_HIERARCHY in force where the topology was discovered) \
             in the plugin's config file; until then only jobs that add :env=none (placed and bound, no \
             ZE_AFFINITY_MASK) are mapped"
        ));
    }
    let lines = node
        .devices
        .iter()
        .map(|d| {
            let (env, warnings) = match crate::env::task_env(
                &[d],
                &Inputs {
                    node_adapters: None,
                    task_env: &BTreeMap::new(),
                    discovery_model: ze,
                    mode: EnvMode::All,
                    omp: None,
                },
            ) {
                Ok(found) => found,
                Err(e) => {
                    problems.push(format!("device {}: {e}", crate::text::quoted(&d.name)));
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
    lines
}

/// PCI display functions that are not compute GPUs (BMC adapters), by bus id and names.
pub(super) fn ignored_displays(node: &Node) -> Vec<String> {
    let gpu_busids: Vec<String> =
        node.devices.iter().filter(|d| d.class == DeviceClass::Gpu).map(Device::busid_text).collect();
    node.topology
        .pci
        .iter()
        .filter(|f| f.is_display() && !gpu_busids.contains(&f.busid.to_string()))
        .map(|f| {
            let names: Vec<&str> = f.osdevs.iter().map(|o| o.name.as_str()).collect();
            format!("{} {}", f.busid, if names.is_empty() { "(no OS device)".to_string() } else { names.join(" ") })
        })
        .collect()
}

/// [`PartialStep`]s for every class with devices at more than one locality, one per
/// locality (in the devices' order).
pub fn partial_steps(node: &Node) -> Vec<PartialStep> {
    let mut out = Vec::new();
    for class in [DeviceClass::Gpu, DeviceClass::Network, DeviceClass::Block] {
        let mut localities: Vec<CpuSet> = Vec::new();
        for i in node.class_indexes(class) {
            let loc = &node.devices[i].locality;
            if !loc.is_empty() && !localities.contains(loc) {
                localities.push(loc.clone());
            }
        }
        if localities.len() < 2 {
            continue;
        }
        for cpus in localities {
            let mut spec = Spec::new(Target::Class(class));
            spec.bind = Some(BindLevel::None);
            let facts = StepFacts { ntasks: 1, allowed_cpus: Some(cpus.clone()), ..StepFacts::default() };
            let Ok(order) = device_order(&spec, node, &facts) else { continue };
            let name = |i: &usize| node.devices[*i].name.clone();
            let local = order.devices.iter().filter(|i| !order.elsewhere.contains(i)).map(name).collect();
            let elsewhere = order.elsewhere.iter().map(name).collect();
            out.push(PartialStep { class, cpus, local, elsewhere });
        }
    }
    out
}

/// How each GPU is named; a GPU that cannot be is a problem.
pub(super) fn gpus(node: &Node, problems: &mut Vec<String>) -> Vec<GpuStatus> {
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
    gpus
}

/// What a step without `SLURM_STEP_GPUS` gets of this node's GPUs, where the settings and
/// slurm.conf's `GresTypes` (`gres_types_gpu`, when read) make that worth a note: every GPU
/// of the node although Slurm manages them (`require_step_gpus = false`, or unset where
/// `GresTypes` names no gpu while gres.conf gives the node GPUs), or none although gres.conf
/// gives the node no GPU (`GresTypes` is the cluster's: its gres/gpu runs on every node).
pub(super) fn step_gpus_rule(
    node: &Node,
    config: Option<&Config>,
    gres_types_gpu: Option<bool>,
    gres: Option<&super::GresReport>,
    notes: &mut Vec<String>,
) {
    let Some(config) = config else { return };
    let gpus = node.class_indexes(DeviceClass::Gpu).len();
    if gpus == 0 {
        return;
    }
    let gres_gpus = gres.map(|g| g.gpus.len());
    match (config.require_step_gpus, gres_types_gpu, gres_gpus) {
        (Some(false), Some(true), _) | (Some(false), _, Some(1..)) => notes.push(format!(
            "require_step_gpus = false: a step Slurm gave no GPU maps over the {gpus} GPUs of the node, other jobs' \
             included, although Slurm manages them (GresTypes names gpu, or gres.conf lists them): remove the key"
        )),
        (None, Some(true), Some(0)) => notes.push(format!(
            "slurm.conf's GresTypes names gpu, so Slurm's gres/gpu runs in every step here, but gres.conf gives \
             this node none of its {gpus} GPUs: every step is told it has no GPU and a GPU mapping is refused. \
             If Slurm is not to manage these GPUs, set require_step_gpus = false in this node's config file"
        )),
        (None, Some(false), Some(1..)) => notes.push(
            "gres.conf lists GPUs for this node but slurm.conf's GresTypes names no gpu: Slurm does not manage them, \
             so every step may map every GPU of the node; add gpu to GresTypes to give each job its own"
                .to_string(),
        ),
        _ => {}
    }
}

/// What the default does here: a refusal is a problem, a default without devices a note.
pub(super) fn default(
    node: &Node,
    config: Option<&Config>,
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> DefaultOutcome {
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
        // One task per device is the job a default is for: its refusal is the admin's problem.
        DefaultOutcome::Maps { spec, larger, .. } | DefaultOutcome::Aside { spec, larger, .. }
            if config.and_then(|c| c.default.as_ref()).is_some_and(|d| matches!(d.target, Target::Class(_))) =>
        {
            if let Some(DefaultStep { ntasks, why, outcome: StepOutcome::Refused(e) }) = larger.first() {
                problems.push(format!(
                    "the default {spec:?} does not map a step of {ntasks} tasks ({why}), so such jobs run unmapped: {e}"
                ));
            }
        }
        DefaultOutcome::NotApplicable { spec, .. } => notes.push(format!(
            "the default {spec:?} finds no device of its class here: jobs run unmapped (an admin default is soft)"
        )),
        _ => {}
    }
    default
}

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

/// Applies the default to a one-task step, as the plugin would (a launcher's daemon), then to
/// the larger steps ([`larger_steps`]).
fn default_outcome(node: &Node, spec: &Spec) -> DefaultOutcome {
    if spec.is_none() {
        return DefaultOutcome::Off;
    }
    let text = spec.to_string();
    match as_default(spec, node, &StepFacts { ntasks: 1, ..StepFacts::default() }) {
        Ok(Soft::Maps { spec: applied, plan }) => DefaultOutcome::Maps {
            spec: text,
            applied: applied.to_string(),
            task: plan.tasks.first().map(|t| report::task_line(node, t)).unwrap_or_default(),
            warnings: plan.warnings,
            larger: larger_steps(node, spec),
        },
        Ok(Soft::Aside { why }) => DefaultOutcome::Aside { spec: text, why, larger: larger_steps(node, spec) },
        Err(e @ PlanError::NoDevices { .. }) => DefaultOutcome::NotApplicable { spec: text, reason: e.to_string() },
        Err(e) => DefaultOutcome::Refused { spec: text, message: e.to_string() },
    }
}

/// The default for a step of one task per device of its class here (a realistic job: one
/// rank per GPU) and for one task more (the refusal, or the sharing, such a job meets), each
/// on the whole node. A size of one is the one-task step, already shown.
fn larger_steps(node: &Node, spec: &Spec) -> Vec<DefaultStep> {
    let sizes = match &spec.target {
        Target::Class(c) => {
            let n = node.class_indexes(*c).len();
            [(n, format!("one per {c} device here")), (n + 1, format!("one more than the {c} devices here"))]
        }
        _ => [(1, String::new()), (2, "more tasks than the one device it names".to_string())],
    };
    sizes
        .into_iter()
        .filter(|(n, _)| *n > 1)
        .map(|(n, why)| {
            let ntasks = u32::try_from(n).unwrap_or(u32::MAX);
            let outcome = match as_default(spec, node, &StepFacts { ntasks, ..StepFacts::default() }) {
                Ok(Soft::Maps { plan, .. }) => {
                    let names = |t: &crate::plan::TaskPlan| {
                        t.devices.iter().filter_map(|&i| node.devices.get(i)).map(|d| d.name.clone()).collect()
                    };
                    StepOutcome::Maps { tasks: plan.tasks.iter().map(names).collect(), warnings: plan.warnings }
                }
                Ok(Soft::Aside { why }) => StepOutcome::Aside(why),
                Err(e) => StepOutcome::Refused(e),
            };
            DefaultStep { ntasks, why, outcome }
        })
        .collect()
}
