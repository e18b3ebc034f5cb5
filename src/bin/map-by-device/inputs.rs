//! The inputs `devices` and `plan` resolve from their flags: the node (a topology, the driver
//! roots, the Level Zero model) and the step's facts.

use crate::error::CliError;
use crate::flags::{PlanArgs, Source};
use map_by_device::config::Config;
use map_by_device::cpuset::CpuSet;
use map_by_device::device::ZeHierarchy;
use map_by_device::node::Node;
use map_by_device::plan::StepFacts;
use map_by_device::spec::Spec;
use std::collections::BTreeMap;

/// The step's CPUs and the tasks' bindings must be CPUs of the node.
pub(crate) fn facts_fit(facts: &StepFacts, node: &Node) -> Result<(), CliError> {
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

pub(crate) fn node_from(source: &Source) -> Result<Node, CliError> {
    node_with(source, &Config::default(), false)
}

/// Builds the node from the flags, falling back on the plugin's settings (`check`): its
/// `topology=`, `proc_root`, `sys_root` and `ze_hierarchy`. With `configured`, the Level Zero
/// model comes from the settings only, as in the plugin.
pub(crate) fn node_with(source: &Source, config: &Config, configured: bool) -> Result<Node, CliError> {
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
pub(crate) fn foreign_flags(args: &PlanArgs) -> Result<(), CliError> {
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

pub(crate) fn facts_from(args: &PlanArgs) -> Result<StepFacts, CliError> {
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
        // `none`: Slurm manages the node's GPUs and gave the step none (no SLURM_STEP_GPUS where
        // its gres/gpu runs).
        step_gpus: match args.step_gpus.as_deref().map(str::trim) {
            Some("none") => Some(Vec::new()),
            other => other.map(map_by_device::plan::parse_step_gpus).transpose()?,
        },
    })
}
