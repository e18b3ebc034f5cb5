//! How an admin's default applies to a step. A default is soft: it must never make a job
//! worse than no plugin would, and without the plugin every task of a step sees all of the
//! step's devices. So a default never gives a task fewer devices than the step's devices of
//! its class on the node divided by the step's tasks there:
//! - a step with more devices than tasks gets them divided among its tasks (the `ndev=auto`
//!   share): a one-task step, such as the daemon of `mpirun` or `mpiexec.hydra`, or
//!   `torchrun`'s agent, gets all of them and the CPUs of all of them (never a finer binding:
//!   a default's `bind=core` or `pe=` would crowd every rank it forks onto a core), so the
//!   ranks it forks keep what they would have had;
//! - where they do not divide evenly, or the plan would leave one of them to no task (a
//!   device far from the step's CPUs, `closest`, `ppr=`), the default steps aside.
//!
//! A job's own `--map-by-device` keeps meaning exactly what it says ([`crate::plan::plan`]). The
//! plugin, `plan --as-default` and `check` all apply a default through [`as_default`].

use crate::node::Node;
use crate::plan::{device_order, plan, Plan, PlanError, StepFacts};
use crate::spec::{BindLevel, Spec};

/// The binding levels that may give a task only part of its devices' CPUs.
const FINER_THAN_LOCALITY: [BindLevel; 5] =
    [BindLevel::HwThread, BindLevel::Core, BindLevel::L1Cache, BindLevel::L2Cache, BindLevel::L3Cache];

/// What a default does for a step.
#[derive(Debug, Clone)]
pub enum Soft {
    /// It maps, with `spec`: the default, or the default with `ndev=auto` where the step has
    /// more devices than tasks.
    Maps { spec: Spec, plan: Plan },
    /// It steps aside (the job runs unmapped): why, in words for slurmd.log and `check`.
    Aside { why: String },
}

/// The default `spec` applied to the step (see the module's rule). `Err`: the plan's refusal,
/// which makes a default step aside too (the caller says so, with the message).
pub fn as_default(spec: &Spec, node: &Node, facts: &StepFacts) -> Result<Soft, PlanError> {
    let order = device_order(spec, node, facts)?;
    let tasks = facts.ntasks as usize;
    let mut spec = spec.clone();
    let have = order.devices.len();
    if tasks > 0 && !spec.ndev_auto && have > tasks * spec.ndev as usize && have % tasks == 0 {
        // `closest` picks one device per task and `ppr=` counts tasks per device: neither
        // takes a share, so their idle devices make the default step aside below.
        if !spec.closest && spec.ppr.is_none() {
            spec.ndev_auto = true;
        }
    }
    // ... and the CPUs of all of them: one task of a node is never bound to a part of its
    // devices' CPUs (a core, `pe=`), which would crowd every rank a launcher forks onto it.
    if tasks == 1 && (spec.pe.is_some() || FINER_THAN_LOCALITY.contains(&spec.bind_level())) {
        spec.bind = Some(BindLevel::Locality);
        spec.pe = None;
        spec.hwtcpus = false;
    }
    let plan = plan(&spec, node, facts)?;
    let held = |d: &usize| plan.tasks.iter().any(|t| t.devices.contains(d));
    let idle: Vec<&str> = order
        .devices
        .iter()
        .chain(&order.elsewhere)
        .filter(|d| !held(d))
        .filter_map(|&d| node.devices.get(d).map(|d| d.name.as_str()))
        .collect();
    if idle.is_empty() {
        return Ok(Soft::Maps { spec, plan });
    }
    let total = have + order.elsewhere.len();
    let cause = if !order.elsewhere.is_empty() && idle.len() <= order.elsewhere.len() {
        "they are far from the step's CPUs".to_string()
    } else if spec.closest || spec.ppr.is_some() {
        "closest and ppr= take no share".to_string()
    } else {
        format!("{total} do not divide among {} tasks", facts.ntasks)
    };
    let why = format!(
        "it would leave {} of the step's {total} {} devices on {} to no task ({}; {cause})",
        idle.len(),
        order.word,
        node.hostname(),
        idle.join(", ")
    );
    Ok(Soft::Aside { why: format!("{why}: without the default every task sees them all") })
}
