//! `map-by-device`: preview what the plugin would do, on this machine or on any lstopo XML.
//!
//! Glue only: flags -> engine inputs -> engine -> text or JSON. Exit status: 0 success,
//! 2 a refusal or a usage error (one line `map-by-device: error: ...` on stderr, nothing on
//! stdout), 1 `check` found the node not ready.

use clap::{Args, Parser, Subcommand};
use map_by_device::cpuset::CpuSet;
use map_by_device::device::{Device, ZeHierarchy};
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, StepFacts};
use map_by_device::report;
use map_by_device::spec::{Spec, Target};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "map-by-device", version, about = "Preview --map-by-device plans on this node or on an lstopo XML")]
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
    },
    /// Show the plan for one step on this node: each task's devices, CPUs and variables.
    Plan(PlanArgs),
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
    #[arg(long, short = 'n', value_name = "N")]
    ntasks: u32,
    /// Slurm's --cpus-per-task (the default pe for per-core bindings).
    #[arg(long, short = 'c', value_name = "N")]
    cpus_per_task: Option<u32>,
    /// The CPUs allocated to the step on this node (a cpulist such as 0-3,8).
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
    /// The --map-by-device spec.
    spec: String,
}

fn node_from(source: &Source) -> Result<Node, String> {
    let live = source.topology.is_none();
    let topology = match &source.topology {
        Some(path) => map_by_device::load::from_xml_file(path),
        None => map_by_device::load::live(),
    }
    .map_err(|e| e.to_string())?;
    let ze_hierarchy = match &source.ze_hierarchy {
        Some(m) => Some(
            ZeHierarchy::parse(m)
                .ok_or_else(|| format!("invalid --ze-hierarchy {m:?}: expected FLAT, COMPOSITE or COMBINED"))?,
        ),
        // The discovering process is this one: its own environment says which model applied.
        None if live => std::env::var("ZE_FLAT_DEVICE_HIERARCHY").ok().and_then(|v| ZeHierarchy::parse(&v)),
        None => None,
    };
    let hostname = source.hostname.clone().or_else(|| {
        live.then(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string())).flatten()
    });
    let options = NodeOptions {
        hostname,
        proc_root: source.proc_root.clone().or_else(|| live.then(|| PathBuf::from("/proc"))),
        sys_root: source.sys_root.clone().or_else(|| live.then(|| PathBuf::from("/sys"))),
        ze_hierarchy,
    };
    Ok(Node::new(topology, options))
}

fn parse_list(flag: &str, text: &str) -> Result<Vec<u32>, String> {
    text.split(',')
        .map(|s| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("invalid {flag} {text:?}: expected numbers separated by commas"))
        })
        .collect()
}

fn facts_from(args: &PlanArgs) -> Result<StepFacts, String> {
    let allowed_cpus = args
        .allowed_cpus
        .as_deref()
        .map(|t| CpuSet::parse_list(t).map_err(|e| format!("--allowed-cpus: {e}")))
        .transpose()?;
    let task_cpus = args
        .task_cpus
        .as_deref()
        .map(|t| {
            t.split(';')
                .map(|l| CpuSet::parse_list(l).map_err(|e| format!("--task-cpus: {e}")))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let mut env = BTreeMap::new();
    for kv in &args.env {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("invalid --env {kv:?}: expected NAME=VALUE"))?;
        env.insert(k.to_string(), v.to_string());
    }
    Ok(StepFacts {
        ntasks: args.ntasks,
        cpus_per_task: args.cpus_per_task,
        allowed_cpus,
        task_cpus,
        env,
        step_gpus: args.step_gpus.as_deref().map(|t| parse_list("--step-gpus", t)).transpose()?,
    })
}

/// Human table: one row per device.
fn devices_table(devices: &[&Device]) -> String {
    let mut out =
        format!("{:<8} {:<13} {:<12} {:<9} {:<40} {}\n", "CLASS", "BUSID", "NAME", "VENDOR", "ID", "LOCALITY");
    for d in devices {
        let id = d
            .identity
            .as_ref()
            .map(|i| i.display_id())
            .or_else(|| d.identity_problem.as_ref().map(|_| "(none)".into()));
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

fn run(cli: Cli) -> Result<String, String> {
    match cli.command {
        Command::Devices { source, class, json } => {
            let node = node_from(&source)?;
            let filter = class.as_deref().map(Spec::parse).transpose().map_err(|e| e.to_string())?.map(|s| s.target);
            let devices: Vec<&Device> = node
                .devices
                .iter()
                .filter(|d| match &filter {
                    None | Some(Target::None) => true,
                    Some(Target::Class(c)) => d.class == *c,
                    Some(Target::Name(n)) => d.answers_to(n),
                })
                .collect();
            Ok(if json { format!("{}\n", report::devices_json(&devices)) } else { devices_table(&devices) })
        }
        Command::Plan(args) => {
            let spec = Spec::parse(&args.spec).map_err(|e| e.to_string())?;
            let facts = facts_from(&args)?;
            let node = node_from(&args.source)?;
            let plan = plan(&spec, &node, &facts).map_err(|e| e.to_string())?;
            if args.json {
                return Ok(format!("{}\n", report::plan_json(&node, &plan)));
            }
            let mut out = String::new();
            for t in &plan.tasks {
                out.push_str(&report::task_line(&node, t));
                out.push('\n');
            }
            for w in &plan.warnings {
                out.push_str(&format!("warning: {w}\n"));
            }
            Ok(out)
        }
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(text) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("map-by-device: error: {e}");
            ExitCode::from(2)
        }
    }
}
