//! The CLI's one error type: why a command could not run (exit 2).

use std::path::PathBuf;

/// Why a command could not run: the engine's refusal (its own message), or a flag or file
/// that cannot be used (the flag or path, and the fix). Printed as one line, exit 2.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    #[error(transparent)]
    Spec(#[from] map_by_device::spec::SpecError),
    #[error(transparent)]
    Load(#[from] map_by_device::load::LoadError),
    #[error(transparent)]
    Plan(#[from] map_by_device::plan::PlanError),
    #[error("{flag}: {source}")]
    CpuList { flag: &'static str, source: map_by_device::cpuset::CpuListError },
    #[error("--step-gpus: {0}")]
    StepGpus(#[from] map_by_device::plan::StepGpusError),
    #[error(transparent)]
    VisibleGpus(#[from] map_by_device::plan::VisibleGpusError),
    #[error("invalid --env {given:?}: expected NAME=VALUE with a non-empty NAME")]
    Env { given: String },
    #[error("{flag} is empty: give the step's CPUs as a cpulist such as 0-3,8")]
    EmptyCpus { flag: &'static str },
    #[error("{flag} names CPUs {cpus} that {host} does not have (its CPUs: {node}): give CPUs of this node")]
    CpusOutsideNode { flag: &'static str, cpus: String, host: String, node: String },
    #[error("--cpus-per-task 0: a task needs at least one CPU")]
    ZeroCpusPerTask,
    #[error("-n 0: a step has at least one task on the node; give -n N with the step's tasks on this node")]
    ZeroTasks,
    /// Open MPI's `--map-by`, or Slurm's `--ntasks-per-node`, given to `plan`.
    #[error("{0}")]
    Foreign(String),
    #[error("invalid --ze-hierarchy {given:?}: expected FLAT, COMPOSITE or COMBINED")]
    ZeHierarchy { given: String },
    #[error("cannot read {flag} {}: {source}", path.display())]
    Read { flag: &'static str, path: PathBuf, source: std::io::Error },
    #[error("cannot write --svg {}: {source}", path.display())]
    WriteSvg { path: PathBuf, source: std::io::Error },
}
