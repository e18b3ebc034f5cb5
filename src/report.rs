//! How devices and plans are shown: the one-line task report (`verbose` in the plugin, the
//! CLI's table rows), the CLI's JSON, and the pictures ([`svg`]). One place, so the plugin
//! and the preview tool say the same thing about the same plan.

pub mod svg;

use crate::cpuset::CpuSet;
use crate::device::Device;
use crate::node::Node;
use crate::plan::{Plan, TaskPlan};
use crate::text::printable;
use serde_json::{json, Map, Value};

/// `0000:06:00.0 cuda0 GPU-46f7...` — how a device is named in one-line reports. Names and
/// identities come from topology and driver files: anything but printable ASCII is escaped,
/// so that a crafted file cannot add lines to slurmd.log or a user's terminal.
pub fn device_label(d: &Device) -> String {
    let mut s = format!("{} {}", d.busid_text(), printable(&d.name));
    if let Some(id) = d.gpu_id() {
        s.push(' ');
        s.push_str(&printable(&id.display_id()));
    }
    s
}

/// The CPU list of a task, or `unchanged` when the plan leaves its mask alone.
pub fn cpus_text(task: &TaskPlan) -> String {
    task.cpus.as_ref().map_or_else(|| "unchanged".to_string(), |c| c.to_list())
}

/// A task's devices, `gpu 0000:06:00.0 cuda0 GPU-..., ...`, or `no device`; then its paired
/// adapters, `paired network 0000:03:00.0 mlx5_0` with `(shared with task 1)` when other
/// tasks of the node have the same one.
pub fn devices_text(node: &Node, task: &TaskPlan) -> String {
    let mut devices: Vec<String> = task
        .devices
        .iter()
        .filter_map(|&i| node.devices.get(i))
        .map(|d| format!("{} {}", d.class, device_label(d)))
        .collect();
    for p in &task.adapters {
        let Some(d) = node.devices.get(p.device) else { continue };
        let shared = match p.shared_with(task.task).as_slice() {
            [] => String::new(),
            [one] => format!(" (shared with task {one})"),
            many => format!(" (shared with tasks {})", many.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        };
        devices.push(format!("paired {} {}{shared}", d.class, device_label(d)));
    }
    if devices.is_empty() {
        "no device".to_string()
    } else {
        devices.join(", ")
    }
}

/// The variables too long for `plan --short`'s rows that every task of a plan of several
/// has, with the same value.
fn shared_long_values(plan: &Plan) -> Vec<(&String, &String)> {
    let Some((first, rest)) = plan.tasks.split_first() else { return Vec::new() };
    if rest.is_empty() {
        return Vec::new();
    }
    first.env.iter().filter(|(k, v)| v.len() > SHORT_VALUE && rest.iter().all(|t| t.env.get(*k) == Some(*v))).collect()
}

/// A task's variables, `NAME=value NAME=value`, or `no variables`.
pub fn env_text(task: &TaskPlan) -> String {
    let vars: Vec<String> = task.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if vars.is_empty() {
        "no variables".to_string()
    } else {
        vars.join(" ")
    }
}

/// The values `plan --short` prints in full; longer ones (UUIDs, PMIx ids) are named only.
const SHORT_VALUE: usize = 16;

/// `plan --short`: a table that fits a terminal, one row per task: its devices by name (and
/// `+adapter` for a paired one), its CPUs, and the variables it gets, with the values of the
/// short ones (`NCCL_IB_HCA==mlx5_0`, `OMP_NUM_THREADS=4`) and the names alone of the long
/// ones (a GPU's UUID is the device's, shown by `devices`); then the long values every task
/// has alike (the node's `NCCL_IB_HCA`), once; then the warnings.
pub fn plan_short(node: &Node, plan: &Plan) -> String {
    let rows: Vec<[String; 4]> = plan
        .tasks
        .iter()
        .map(|t| {
            let mut devices: Vec<String> =
                t.devices.iter().filter_map(|&i| node.devices.get(i)).map(|d| printable(&d.name)).collect();
            devices.extend(
                t.adapters
                    .iter()
                    .filter_map(|p| node.devices.get(p.device))
                    .map(|d| format!("+{}", printable(&d.name))),
            );
            let vars: Vec<String> = t
                .env
                .iter()
                .map(|(k, v)| if v.len() <= SHORT_VALUE { format!("{k}={}", printable(v)) } else { k.clone() })
                .collect();
            [
                t.task.to_string(),
                if devices.is_empty() { "-".into() } else { devices.join(",") },
                cpus_text(t),
                if vars.is_empty() { "-".into() } else { vars.join(" ") },
            ]
        })
        .collect();
    let header = ["TASK", "DEVICES", "CPUS", "VARIABLES"].map(String::from);
    let width = |c: usize| std::iter::once(&header).chain(&rows).map(|r| r[c].len()).max().unwrap_or(0);
    let (w0, w1, w2) = (width(0), width(1), width(2));
    let mut out = String::new();
    for r in std::iter::once(&header).chain(&rows) {
        out.push_str(&format!("{:<w0$}  {:<w1$}  {:<w2$}  {}\n", r[0], r[1], r[2], r[3]));
    }
    for (k, v) in shared_long_values(plan) {
        out.push_str(&format!("every task: {k}={}\n", printable(v)));
    }
    for w in &plan.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// One line per task, like `--cpu-bind=verbose`:
/// `task 0 on node1: gpu 0000:06:00.0 cuda0 GPU-...; cpus 16,144; CUDA_VISIBLE_DEVICES=GPU-... PMIX_DEVICE_ID=...`
pub fn task_line(node: &Node, task: &TaskPlan) -> String {
    format!(
        "task {} on {}: {}; cpus {}; {}",
        task.task,
        printable(node.hostname()),
        devices_text(node, task),
        cpus_text(task),
        env_text(task)
    )
}

/// The plugin's `verbose` line for one task, like `--cpu-bind=verbose`: node, task (and
/// its global id), devices, CPUs (`set` by the plan, or `kept` as Slurm bound them) and
/// variables.
pub fn verbose_line(
    node_name: &str,
    task: u32,
    global: Option<u32>,
    node: &Node,
    tp: &TaskPlan,
    cpus_now: Option<&CpuSet>,
) -> String {
    let cpus = match (&tp.cpus, cpus_now) {
        (Some(c), _) => format!("CPUs {c} set"),
        (None, Some(now)) => format!("CPUs {now} kept"),
        (None, None) => "CPUs kept".to_string(),
    };
    let global = global.map(|g| format!(" (global {g})")).unwrap_or_default();
    format!(
        "map-by-device: {}, task {task}{global}: {}; {cpus}; {}",
        printable(node_name),
        devices_text(node, tp),
        env_text(tp)
    )
}

fn device_json(d: &Device, full: bool) -> Value {
    let mut m = Map::new();
    m.insert("class".into(), json!(d.class));
    m.insert("busid".into(), json!(d.busid.map(|b| b.to_string())));
    m.insert("name".into(), json!(d.name));
    if full {
        m.insert("osnames".into(), json!(d.osnames));
        m.insert("vendor".into(), json!(d.vendor));
    }
    m.insert("id".into(), json!(d.gpu_id().map(|i| i.display_id())));
    if full {
        m.insert("locality".into(), json!(d.locality.to_list()));
        if let Some(fabric) = d.fabric {
            m.insert("fabric".into(), json!(fabric));
        }
        if let Some(why) = d.held_back {
            m.insert("held_back".into(), json!(why.to_string()));
        }
    }
    Value::Object(m)
}

/// Why the class of `d` does not hand it out, as the devices listings say it: ` (held back:
/// plain Ethernet ...)`, or nothing.
pub fn held_back_note(d: &Device) -> String {
    d.held_back.map(|why| format!(" (held back: {why})")).unwrap_or_default()
}

/// `{"devices":[{"class","busid","name","osnames","vendor","id","locality"[,"fabric"][,"held_back"]}]}`
pub fn devices_json(devices: &[&Device]) -> Value {
    json!({ "devices": devices.iter().map(|d| device_json(d, true)).collect::<Vec<_>>() })
}

/// `{"tasks":[{"task","devices":[{"class","busid","name","id"}],"cpus","env"}],"warnings":[]}`;
/// with `adapters`, each task also has `"adapters":[{"class","busid","name","id","shared_with"}]`.
pub fn plan_json(node: &Node, plan: &Plan) -> Value {
    let tasks: Vec<Value> = plan
        .tasks
        .iter()
        .map(|t| {
            let mut task = json!({
                "task": t.task,
                "devices": t.devices.iter().filter_map(|&i| node.devices.get(i)).map(|d| device_json(d, false)).collect::<Vec<_>>(),
                "cpus": t.cpus.as_ref().map(|c| c.to_list()),
                "env": &*t.env,
            });
            if !t.adapters.is_empty() {
                let adapters: Vec<Value> = t
                    .adapters
                    .iter()
                    .filter_map(|p| node.devices.get(p.device).map(|d| (p, d)))
                    .map(|(p, d)| {
                        let mut v = device_json(d, false);
                        v["shared_with"] = json!(p.shared_with(t.task));
                        v
                    })
                    .collect();
                task["adapters"] = json!(adapters);
            }
            task
        })
        .collect();
    json!({ "tasks": tasks, "warnings": plan.warnings })
}
