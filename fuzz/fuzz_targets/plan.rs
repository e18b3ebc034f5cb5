//! Spec x fixture x step through the planner: any spec the parser accepts, on any of the
//! project's fixture topologies, with any task count, step CPUs, existing task bindings and
//! step GPUs. Every plan is checked against the invariants of `map_by_device_fuzz` (CPU sets
//! non-empty, inside the step and the devices' locality; devices distinct unless shared).

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use map_by_device::cpuset::CpuSet;
use map_by_device::plan::StepFacts;
use map_by_device::spec::Spec;
use map_by_device_fuzz::{check_plan, nodes};
use std::collections::BTreeMap;

#[derive(Arbitrary, Debug)]
enum TargetPick {
    Gpu,
    Network,
    Block,
    None,
    /// One of the node's devices, by one of the names it answers to.
    Device(u8, u8),
    Text(String),
}

#[derive(Arbitrary, Debug)]
enum Qualifier {
    Interleave(Option<u8>),
    Shared(Option<bool>),
    Ndev(u8),
    NdevAuto,
    Compact,
    Ppr(u8),
    Pe(u8),
    Overload,
    Env(bool),
    Omp(Option<bool>),
    Adapters,
    Hwtcpus,
    Bind(u8),
    Closest,
    Verbose,
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    fixture: u8,
    target: TargetPick,
    qualifiers: Vec<Qualifier>,
    ntasks: u8,
    cpus_per_task: Option<u8>,
    /// CPUs of the step (numbers wrap at the node's size plus a few that do not exist).
    allowed: Option<Vec<u16>>,
    task_cpus: Option<Vec<Vec<u16>>>,
    step_gpus: Option<Vec<u8>>,
    ze_flat: Option<u8>,
}

const LEVELS: [&str; 6] = ["package", "numa", "l3cache", "l2cache", "l1cache", "node"];
const BINDS: [&str; 11] =
    ["hwthread", "core", "l1cache", "l2cache", "l3cache", "numa", "package", "locality", "split", "none", "x"];

fn spec_text(input: &Input, node: &map_by_device::node::Node) -> String {
    let mut s = match &input.target {
        TargetPick::Gpu => "gpu".to_string(),
        TargetPick::Network => "network".to_string(),
        TargetPick::Block => "block".to_string(),
        TargetPick::None => "none".to_string(),
        TargetPick::Device(i, j) if !node.devices.is_empty() => {
            let d = &node.devices[*i as usize % node.devices.len()];
            let mut names: Vec<String> = d.osnames.clone();
            names.push(d.busid_text());
            if let Some(id) = d.gpu_id() {
                names.push(id.display_id());
            }
            names[*j as usize % names.len()].clone()
        }
        TargetPick::Device(..) => "gpu".to_string(),
        TargetPick::Text(t) => t.clone(),
    };
    for q in &input.qualifiers {
        s.push(':');
        s.push_str(&match q {
            Qualifier::Interleave(None) => "interleave".to_string(),
            Qualifier::Interleave(Some(l)) => format!("interleave={}", LEVELS[*l as usize % LEVELS.len()]),
            Qualifier::Shared(None) => "shared".to_string(),
            Qualifier::Shared(Some(b)) => format!("shared={b}"),
            Qualifier::Ndev(n) => format!("ndev={}", n % 9),
            Qualifier::NdevAuto => "ndev=auto".to_string(),
            Qualifier::Compact => "compact".to_string(),
            Qualifier::Ppr(n) => format!("ppr={}", n % 9),
            Qualifier::Pe(n) => format!("pe={}", n % 9),
            Qualifier::Overload => "overload".to_string(),
            Qualifier::Env(all) => format!("env={}", if *all { "all" } else { "none" }),
            Qualifier::Omp(None) => "omp".to_string(),
            Qualifier::Omp(Some(b)) => format!("omp={b}"),
            Qualifier::Adapters => "adapters".to_string(),
            Qualifier::Hwtcpus => "hwtcpus".to_string(),
            Qualifier::Bind(l) => format!("bind={}", BINDS[*l as usize % BINDS.len()]),
            Qualifier::Closest => "closest".to_string(),
            Qualifier::Verbose => "verbose".to_string(),
            Qualifier::Raw(r) => r.clone(),
        });
    }
    s
}

fn cpus(list: &[u16], span: u32) -> CpuSet {
    list.iter().map(|&c| u32::from(c) % span).collect()
}

fuzz_target!(|input: Input| {
    let nodes = nodes();
    let node = &nodes[input.fixture as usize % nodes.len()];
    let Ok(spec) = Spec::parse(&spec_text(&input, node)) else { return };
    // A few CPU numbers past the node's last, which no object holds.
    let span = node.topology.all_cpus().iter().last().unwrap_or(0) + 4;
    let mut env = BTreeMap::new();
    if let Some(z) = input.ze_flat {
        env.insert(
            "ZE_FLAT_DEVICE_HIERARCHY".to_string(),
            ["FLAT", "COMPOSITE", "COMBINED", "bogus"][z as usize % 4].into(),
        );
    }
    let facts = StepFacts {
        ntasks: u32::from(input.ntasks % 72),
        cpus_per_task: input.cpus_per_task.map(|c| u32::from(c % 9)).filter(|c| *c >= 1),
        allowed_cpus: input.allowed.as_deref().map(|a| cpus(a, span)),
        task_cpus: input.task_cpus.as_ref().map(|t| t.iter().map(|c| cpus(c, span)).collect()),
        env,
        step_gpus: input.step_gpus.map(|g| {
            let mut g: Vec<u32> = g.into_iter().map(|i| u32::from(i % 70)).collect();
            g.sort_unstable();
            g.dedup();
            g
        }),
    };
    let outcome = map_by_device::plan::plan(&spec, node, &facts);
    check_plan(node, &spec, &facts, &outcome);
});
