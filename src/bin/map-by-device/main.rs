//! `map-by-device`: preview what the plugin would do, on this machine or on any lstopo XML.
//!
//! Glue only: flags ([`flags`]) -> engine inputs ([`inputs`], [`check_inputs`]) -> engine ->
//! text or JSON ([`output`]). Exit status: 0 success, 2 a refusal or a usage error (one line
//! `map-by-device: error: ...` on stderr, nothing on stdout), 1 `check` found the node not ready.

mod check_inputs;
mod error;
mod exec;
mod flags;
mod inputs;
mod output;

use clap::Parser;
use error::CliError;
use flags::{Cli, Command};
use map_by_device::device::Device;
use map_by_device::plan::{plan, PlanError, RootWords};
use map_by_device::report;
use map_by_device::spec::{Spec, Target};
use std::io::Write;
use std::process::ExitCode;

/// A GPU identity refusal, in the preview's words: the plugin's fix names its config file's
/// `proc_root`/`sys_root`; a preview reads driver files under `--proc-root`/`--sys-root`.
/// (`check` keeps the plugin's words: it checks the plugin's settings.)
fn preview_fix(mut e: PlanError) -> PlanError {
    if let PlanError::NoIdentity { fix, .. } = &mut e {
        fix.roots = RootWords {
            proc_root: "give the node's /proc with --proc-root DIR",
            sys_root: "give the node's /sys with --sys-root DIR",
        };
    }
    e
}

/// Runs one command: its output, and whether it succeeded (`false`: `check` found the node
/// not ready, exit 1). `Err` is a refusal or usage error (exit 2).
fn run(cli: Cli) -> Result<(String, bool), CliError> {
    match cli.command {
        Command::Devices { source, class, json, svg } => {
            let node = inputs::node_from(&source)?;
            // An export without its I/O objects lists nothing: say so, and how to export one.
            if node.topology.pci.is_empty() && node.topology.loose.is_empty() {
                return Err(map_by_device::plan::PlanError::NoIoDevices { host: node.hostname().into() }.into());
            }
            let filter = class.as_deref().map(Spec::parse).transpose()?.map(|s| s.target);
            // A name that is no device here is a mistake to name, not an empty table.
            if let Some(Target::Name(n)) = &filter {
                map_by_device::plan::named_device(&node, n)?;
            }
            let devices: Vec<&Device> = node
                .devices
                .iter()
                .filter(|d| match &filter {
                    None | Some(Target::None) => true,
                    Some(Target::Class(c)) => d.class == *c,
                    Some(Target::Name(n)) => d.answers_to(n),
                })
                .collect();
            if let Some(path) = &svg {
                output::write_svg(path, &report::svg::devices_svg(&node, class.as_deref(), &devices))?;
            }
            let text =
                if json { format!("{}\n", report::devices_json(&devices)) } else { output::devices_table(&devices) };
            Ok((text, true))
        }
        Command::Plan(args) => run_plan(args),
        Command::Check(args) => check_inputs::run_check(&args),
        Command::Exec(args) => exec::run_exec(&args),
    }
}

/// `plan`: the step's plan on the node, as text, JSON or a short table.
fn run_plan(args: flags::PlanArgs) -> Result<(String, bool), CliError> {
    inputs::foreign_flags(&args)?;
    let spec = Spec::parse(args.spec.as_deref().unwrap_or_default())?;
    let mut facts = inputs::facts_from(&args)?;
    let node = inputs::node_from(&args.source)?;
    inputs::facts_fit(&facts, &node)?;
    if map_by_device::plan::spec_may_use_gpus(&spec) {
        // Slurm's CUDA_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES given with --env, read as the plugin does.
        facts.step_gpus = map_by_device::plan::visible_gpus(&facts.env, &node, facts.step_gpus.take())?;
    }
    // As the admin's default: the spec the plugin would apply, or why it steps aside.
    let (spec, applied) = match args.as_default {
        false => (spec, None),
        true => match map_by_device::soft::as_default(&spec, &node, &facts).map_err(preview_fix) {
            Ok(map_by_device::soft::Soft::Maps { spec: applied, .. }) => (applied.clone(), Some(applied)),
            Ok(map_by_device::soft::Soft::Aside { why }) => {
                return Ok((format!("the default {spec} steps aside, so the step runs unmapped: {why}\n"), true))
            }
            Err(e) => return Err(CliError::Plan(e)),
        },
    };
    let outcome = plan(&spec, &node, &facts).map_err(preview_fix);
    if let Some(path) = &args.svg {
        output::write_svg(path, &report::svg::plan_svg(&node, &spec, &facts, outcome.as_ref()))?;
    }
    let plan = outcome.map_err(|e| match e {
        // The preview's flags, named as such (the plugin's message names its topology=).
        PlanError::StepGpuOutOfRange { index, have, host } => CliError::Foreign(format!(
            "--step-gpus names GPU index {index}, but the topology of {host} has only {have} GPUs: give \
             indices below {have}, or the --topology of the node they belong to"
        )),
        other => CliError::Plan(other),
    })?;
    if args.json {
        return Ok((format!("{}\n", report::plan_json(&node, &plan)), true));
    }
    if args.short {
        return Ok((report::plan_short(&node, &plan), true));
    }
    let mut out = String::new();
    if let Some(applied) = applied {
        out.push_str(&format!("as the default: {applied}\n"));
    }
    for t in &plan.tasks {
        out.push_str(&report::task_line(&node, t));
        out.push('\n');
    }
    for w in &plan.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    Ok((out, true))
}

/// clap's multi-line usage error as the one line the man page promises: the error, then
/// the usage, then the hint.
fn one_line(rendered: &str) -> String {
    let mut out = String::new();
    for line in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let line = line.strip_prefix("error: ").unwrap_or(line);
        if let Some(usage) = line.strip_prefix("Usage: ") {
            out.push_str(&format!("; usage: {usage}"));
        } else if line.starts_with("For more information") {
            out.push_str("; see --help");
        } else if out.is_empty() {
            out.push_str(line);
        } else {
            out.push(' ');
            out.push_str(line);
        }
    }
    out
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version: what was asked for, on stdout.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("map-by-device: error: {}", one_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok((text, ok)) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("map-by-device: error: {e}");
            ExitCode::from(2)
        }
    }
}
