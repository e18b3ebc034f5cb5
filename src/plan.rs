//! The planner: (spec, node, step facts) -> one assignment per local task.

use crate::cpuset::CpuSet;
use crate::node::Node;
use crate::spec::Spec;
use std::collections::BTreeMap;

/// What Slurm (or the CLI's flags) tells the planner about the step on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepFacts {
    /// Tasks of the step on this node (local ids 0..ntasks).
    pub ntasks: u32,
    /// `--cpus-per-task`, the default `pe` for per-core bindings.
    pub cpus_per_task: Option<u32>,
    /// The CPUs Slurm allocated to the step on this node; `None` = the whole node.
    pub allowed_cpus: Option<CpuSet>,
    /// Each task's existing binding (for `closest`), by local id.
    pub task_cpus: Option<Vec<CpuSet>>,
    /// The task environment the rules read (`ZE_FLAT_DEVICE_HIERARCHY` ...).
    pub env: BTreeMap<String, String>,
    /// Slurm's global GPU indices allocated to the step (PCI-bus order of the node's GPUs).
    pub step_gpus: Option<Vec<u32>>,
}

/// One task's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPlan {
    /// Local task id.
    pub task: u32,
    /// Indexes into [`Node::devices`].
    pub devices: Vec<usize>,
    /// The CPU mask to apply; `None` = leave the task's mask alone (`bind=none`, `closest`).
    pub cpus: Option<CpuSet>,
    /// Variables to set in the task's environment (replacing existing values).
    pub env: BTreeMap<String, String>,
}

/// The whole node's plan for one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub tasks: Vec<TaskPlan>,
    pub warnings: Vec<String>,
}

/// Why a plan cannot be made. Messages are one line, name the device/CPUs and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Other(String),
}

/// Computes the plan. Pure: no I/O, no Slurm, no hwloc.
pub fn plan(spec: &Spec, node: &Node, facts: &StepFacts) -> Result<Plan, PlanError> {
    let _ = (spec, node, facts);
    Err(PlanError::Other("planner not written yet".into()))
}
