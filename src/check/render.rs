//! The `check` report in plain words: the devices, what a step on part of the node is
//! handed, the GPU names, the plugin's configuration and settings, the default, then the
//! notes and the verdict.

use super::{
    CacheState, CheckInput, CheckReport, DefaultOutcome, DefaultStep, DeviceLine, GpuNaming, GresReport, NodeSlurm,
    PartialStep, Setup, StepOutcome,
};
use crate::config::{Config, DEFAULT_CACHE_DIR, DEFAULT_PROC_ROOT, DEFAULT_SYS_ROOT};
use crate::device::DeviceClass;
use crate::spec::Spec;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The whole report.
pub(super) fn report(r: &CheckReport, input: &CheckInput<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Node {}: topology from {}", r.host.as_deref().unwrap_or("(unknown)"), r.topology_source);
    if input.node.is_ok() {
        devices(&mut out, r);
        partial(&mut out, &r.partial);
        gpus(&mut out, r);
        gres(&mut out, r.gres.as_ref());
    }
    let _ = writeln!(out, "\nPlugin configuration:");
    setup(&mut out, r, input);
    default(&mut out, &r.default);
    verdict(&mut out, r);
    out
}

fn devices(out: &mut String, r: &CheckReport) {
    let _ = writeln!(out, "\nDevices, in the order tasks are mapped to them (PCI bus order):");
    for class in [DeviceClass::Gpu, DeviceClass::Network, DeviceClass::Block] {
        let of: Vec<&DeviceLine> = r.devices.iter().filter(|d| d.class == class).collect();
        if of.is_empty() {
            let _ = writeln!(out, "  {class}: none");
            continue;
        }
        let _ = writeln!(out, "  {class}: {}", of.len());
        for (i, d) in of.iter().enumerate() {
            let _ = writeln!(
                out,
                "    {i:>2}  {:<13} {:<12} CPUs {:<20} sets {}",
                d.busid,
                d.name,
                d.locality,
                if d.variables.is_empty() { "nothing".to_string() } else { d.variables.join(" ") }
            );
        }
    }
    for f in &r.ignored_display {
        let _ = writeln!(out, "  not a compute GPU (display adapter without a render node or vendor backend): {f}");
    }
}

/// The devices a step on part of the node is handed (see [`PartialStep`]).
fn partial(out: &mut String, partial: &[PartialStep]) {
    if partial.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nA step given only some of these CPUs is handed the devices local to them first (and, unless bind=none, \
         only those; `map-by-device plan --allowed-cpus` shows any step):"
    );
    for p in partial {
        let _ = write!(out, "  {} on CPUs {} only: {}", p.class, p.cpus, p.local.join(", "));
        if !p.elsewhere.is_empty() {
            let _ = write!(out, " (with bind=none, then {})", p.elsewhere.join(", "));
        }
        let _ = writeln!(out);
    }
}

fn gpus(out: &mut String, r: &CheckReport) {
    if r.gpus.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nGPU names (what CUDA_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES/ZE_AFFINITY_MASK get):");
    for g in &r.gpus {
        match &g.naming {
            GpuNaming::Named { id, source } => {
                let _ = writeln!(out, "  {} {:<12} {id} (from {source})", g.busid, g.name);
            }
            GpuNaming::Refused { .. } => {
                let _ = writeln!(out, "  {} {:<12} cannot be named: mapping it is refused (below)", g.busid, g.name);
            }
        }
    }
}

/// gres.conf's GPUs for this node in Slurm's index order, each with the GPU it is, and
/// whether that order is the mapping order (see [`GresReport`]).
fn gres(out: &mut String, gres: Option<&GresReport>) {
    let Some(g) = gres else { return };
    let _ = writeln!(out, "\nGPUs in {}, in Slurm's index order:", g.origin);
    if g.gpus.is_empty() {
        let _ = writeln!(out, "  none for this node (no Name=gpu line with File= names it)");
        if !g.other_nodes.is_empty() {
            let _ = writeln!(
                out,
                "  its Name=gpu lines are for NodeName={}: none names this node ({})",
                g.other_nodes.join(", NodeName="),
                g.names.join(" or ")
            );
        }
    }
    for gpu in &g.gpus {
        let what = match &gpu.matched {
            Ok((busid, name, how)) => format!("{busid} {name:<12} ({how})"),
            Err(_) => "unknown (see the notes)".to_string(),
        };
        let extra: String = [("Type", &gpu.gpu_type), ("Cores", &gpu.cores)]
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!(" {k}={v}")))
            .collect();
        let _ = writeln!(out, "  {:>2}  {:<20} {what}{extra}", gpu.index, gpu.file);
    }
    let verdict = match (g.autodetect.as_deref(), g.in_order) {
        (Some(a), Some(true)) if a != "off" => {
            format!(
                "AutoDetect={a}: Slurm numbers the GPUs itself, in PCI bus order: the order the plugin maps them in"
            )
        }
        (_, Some(true)) => "Slurm's GPU indices are the mapping order (PCI bus order)".to_string(),
        (_, Some(false)) => {
            "Slurm's GPU indices are NOT the mapping order (PCI bus order): see the problems".to_string()
        }
        (_, None) if g.gpus.is_empty() => return,
        (_, None) => "whether Slurm's GPU indices are the mapping order cannot be told (see the notes)".to_string(),
    };
    let _ = writeln!(out, "  {verdict}");
}

fn setup(out: &mut String, r: &CheckReport, input: &CheckInput<'_>) {
    let slurm: Option<&Result<NodeSlurm, super::NodeSlurmError>> = input.slurm.as_ref();
    let (entries, origin, config) = match &input.setup {
        Setup::NotExamined => {
            let _ = writeln!(out, "  not examined (give --plugstack FILE or --config FILE to check one)");
            return;
        }
        Setup::NotEnabled { files } => {
            let _ = writeln!(out, "  not enabled in {}", files.join(", "));
            return;
        }
        Setup::Configured { entries, origin, config } => (entries, origin, config),
    };
    for e in entries {
        let _ = writeln!(
            out,
            "  {}: {} {}{}{}",
            e.origin,
            if e.line.required { "required" } else { "optional" },
            e.line.path,
            match e.exists {
                Some(true) => " (present)",
                Some(false) => " (MISSING)",
                None => " (relative to Slurm's PluginDir)",
            },
            if e.line.args.is_empty() { String::new() } else { format!(" {}", e.line.args.join(" ")) }
        );
        if let Some(Ok(built)) = &e.built_for {
            let _ = writeln!(out, "    built for Slurm {} ({built})", built.series());
        }
        if let Some(Ok(library)) = &e.discover {
            let _ = writeln!(out, "    discovery library {}", library.display());
        }
    }
    match slurm {
        Some(Ok(node)) => {
            let _ = writeln!(out, "  Slurm on this node: {} ({})", node.version, node.source);
        }
        Some(Err(why)) => {
            let _ = writeln!(out, "  Slurm on this node: unknown ({why})");
        }
        None => {}
    }
    match config {
        Ok(c) => {
            let _ = writeln!(out, "  settings from {origin}:");
            settings(out, c, input.gres_types_gpu);
            cache(out, r.cache.as_ref());
        }
        Err(_) => {
            let _ = writeln!(out, "  settings from {origin}: INVALID (below)");
        }
    }
}

/// One line per setting, with what an unset one means here (`gres_types_gpu`: whether
/// slurm.conf's `GresTypes` names gpu, when it was read).
fn settings(out: &mut String, c: &Config, gres_types_gpu: Option<bool>) {
    let path = |p: &Option<PathBuf>, unset: &str| p.as_ref().map_or(unset.to_string(), |p| p.display().to_string());
    // Unset, the plugin reads the node's own driver files only when the topology is the
    // node's own (live discovery or slurmd's cache of it).
    let root = |p: &Option<PathBuf>, own: &str| match (p, &c.topology) {
        (Some(p), _) => p.display().to_string(),
        (None, None) => format!("(unset: {own}, the node's own)"),
        (None, Some(_)) => "(unset: no driver file is read with topology=)".to_string(),
    };
    let cache = match (&c.topology, c.cache) {
        (Some(_), _) => "not used: the steps read topology= instead",
        (None, Some(false)) => "false: every step discovers the node itself (about 15 ms per step)",
        (None, Some(true)) => "true: the steps read the topology slurmd discovered at its start",
        (None, None) => "true (default): the steps read the topology slurmd discovered at its start",
    };
    let require = match (c.require_step_gpus, gres_types_gpu) {
        (Some(true), _) => "true: a step without SLURM_STEP_GPUS has no GPU here (a job's GPU mapping is refused)",
        (Some(false), _) => "false: a step without SLURM_STEP_GPUS maps over every GPU of the node",
        (None, Some(true)) => {
            "(unset): slurm.conf's GresTypes names gpu, so Slurm's gres/gpu runs in every step: a step without \
             SLURM_STEP_GPUS has no GPU here (a job's GPU mapping is refused, a default steps aside)"
        }
        (None, Some(false)) => {
            "(unset): slurm.conf's GresTypes names no gpu, so Slurm does not manage GPUs: every GPU of the node is \
             a step's"
        }
        (None, None) => {
            "(unset): where Slurm's gres/gpu runs (slurm.conf's GresTypes names gpu) a step without SLURM_STEP_GPUS \
             has no GPU on the node; elsewhere every GPU of the node is a step's"
        }
    };
    let lines = [
        ("default", c.default.as_ref().map_or("(none: jobs map only when they ask)".to_string(), Spec::to_string)),
        ("topology", path(&c.topology, "(none: the node's own, from slurmd's cache or live discovery)")),
        ("proc_root", root(&c.proc_root, DEFAULT_PROC_ROOT)),
        ("sys_root", root(&c.sys_root, DEFAULT_SYS_ROOT)),
        (
            "ze_hierarchy",
            c.ze_hierarchy
                .map_or("(unset: Intel GPU mappings are refused unless the job adds :env=none)", |z| z.as_str())
                .into(),
        ),
        ("cache", cache.into()),
        (
            "cache_dir",
            format!(
                "{}{}",
                path(&c.cache_dir, &format!("{DEFAULT_CACHE_DIR} (default)")),
                if c.cache_dir().is_none() { " (not used)" } else { "" }
            ),
        ),
        ("require_step_gpus", require.into()),
        (
            "omp",
            match c.omp {
                Some(true) => "true: mapped tasks get OMP_NUM_THREADS/OMP_PLACES/OMP_PROC_BIND unless omp=false",
                Some(false) | None => "false (default): only specs with omp get OpenMP variables",
            }
            .into(),
        ),
    ];
    for (key, value) in lines {
        let _ = writeln!(out, "    {key:<17} {value}");
    }
}

fn cache(out: &mut String, cache: Option<&CacheState>) {
    match cache {
        None => {}
        Some(CacheState::Absent { path, .. }) => {
            let _ = writeln!(out, "  topology cache {}: absent (see the notes)", path.display());
        }
        Some(CacheState::Untrusted { path, .. }) => {
            let _ = writeln!(out, "  topology cache {}: not used by the steps (see the notes)", path.display());
        }
        Some(CacheState::OtherBuild { path }) => {
            let _ = writeln!(
                out,
                "  topology cache {}: written by another build of the plugin, not used by the steps until slurmd \
                 restarts (see the notes)",
                path.display()
            );
        }
        Some(CacheState::Trusted { description, .. }) => {
            let _ = writeln!(out, "  topology cache: used by the steps: {description}");
        }
    }
}

fn default(out: &mut String, default: &DefaultOutcome) {
    match default {
        DefaultOutcome::NotConfigured => {}
        DefaultOutcome::Off => {
            let _ = writeln!(out, "\nDefault: none (jobs are mapped only when they ask)");
        }
        DefaultOutcome::Maps { spec, applied, task, warnings, larger } => {
            let how = if applied == spec {
                String::new()
            } else {
                format!(
                    " (such as a launcher's daemon), applied as {applied:?}: a default never gives a task fewer \
                     devices than the step's divided by its tasks"
                )
            };
            let _ = writeln!(out, "\nDefault {spec:?} on this node, for a one-task step{how}:\n  {task}");
            for w in warnings {
                let _ = writeln!(out, "  warning: {w}");
            }
            larger_steps(out, larger);
        }
        DefaultOutcome::Aside { spec, why, larger } => {
            let _ = writeln!(out, "\nDefault {spec:?} on this node, for a one-task step: steps aside, {why}");
            larger_steps(out, larger);
        }
        DefaultOutcome::NotApplicable { spec, reason } => {
            let _ = writeln!(out, "\nDefault {spec:?} does not apply on this node (jobs run unmapped): {reason}");
        }
        DefaultOutcome::Refused { spec, .. } => {
            let _ = writeln!(out, "\nDefault {spec:?} is refused on this node (below)");
        }
    }
}

/// The default for larger steps on the whole node, one line each (see [`DefaultStep`]).
fn larger_steps(out: &mut String, larger: &[DefaultStep]) {
    if larger.is_empty() {
        return;
    }
    let _ = writeln!(out, "and for larger steps on the whole node:");
    for step in larger {
        let _ = write!(out, "  {} tasks ({}): ", step.ntasks, step.why);
        match &step.outcome {
            StepOutcome::Refused(message) => {
                let _ = writeln!(out, "refused, so such jobs run unmapped: {message}");
            }
            StepOutcome::Aside(why) => {
                let _ = writeln!(out, "steps aside, so such jobs run unmapped: {why}");
            }
            StepOutcome::Maps { tasks, warnings } => {
                let _ = writeln!(out, "{}", step_devices(tasks));
                for w in warnings {
                    let _ = writeln!(out, "    warning: {w}");
                }
            }
        }
    }
}

/// `each task its own device: cuda0, cuda1, ...`, or which devices tasks share.
fn step_devices(tasks: &[Vec<String>]) -> String {
    let mut holders: Vec<(&str, Vec<usize>)> = Vec::new();
    for (t, names) in tasks.iter().enumerate() {
        for name in names {
            match holders.iter_mut().find(|(n, _)| n == name) {
                Some((_, ts)) => ts.push(t),
                None => holders.push((name, vec![t])),
            }
        }
    }
    let shared: Vec<String> = holders
        .iter()
        .filter(|(_, ts)| ts.len() > 1)
        .map(|(n, ts)| {
            let ts: Vec<String> = ts.iter().map(usize::to_string).collect();
            format!("{n} (tasks {})", ts.join(", "))
        })
        .collect();
    if !shared.is_empty() {
        return format!("maps, tasks share devices: {}", shortened(&shared));
    }
    let each: Vec<String> = tasks.iter().map(|names| names.join("+")).collect();
    format!("maps, each task its own device: {}", shortened(&each))
}

/// A list, with its middle left out when it is long (a 64-GPU node).
fn shortened(items: &[String]) -> String {
    match items {
        [first @ .., last] if items.len() > 8 => format!("{}, ..., {last}", first[..6].join(", ")),
        _ => items.join(", "),
    }
}

fn verdict(out: &mut String, r: &CheckReport) {
    if !r.notes.is_empty() {
        let _ = writeln!(out, "\nNotes:");
        for n in &r.notes {
            let _ = writeln!(out, "  - {n}");
        }
    }
    if r.problems.is_empty() {
        let _ = writeln!(out, "\nReady: yes");
    } else {
        let n = r.problems.len();
        let _ = writeln!(out, "\nReady: no, {n} problem{}:", if n == 1 { "" } else { "s" });
        for p in &r.problems {
            let _ = writeln!(out, "  - {p}");
        }
    }
}
