//! Which task gets which devices: groups of `ndev` contiguous devices, task `t` taking group
//! `t` (wrapping only with `shared`), or with `closest` the device nearest the task's
//! existing binding (seed 004).

use super::facts::StepFacts;
use super::order::Near;
use super::types::PlanError;
use crate::cpuset::CpuSet;
use crate::device::DeviceClass;
use crate::node::Node;
use crate::spec::{Spec, Target};
use crate::topology::{ObjKind, Topology};
use std::collections::HashMap;

/// Devices per task: `ndev=N`, or with `ndev=auto` the devices divided equally among the
/// tasks (seed 000's "deriving the device count from the resource manager": under a GRES
/// allocation the list is the step's GPUs). Refused when they do not divide evenly.
fn group_size(spec: &Spec, facts: &StepFacts, list: &[usize], class: &str, host: &str) -> Result<usize, PlanError> {
    if !spec.ndev_auto {
        return Ok(spec.ndev as usize);
    }
    let (have, tasks) = (list.len(), facts.ntasks as usize);
    if tasks == 0 || have % tasks != 0 || have < tasks {
        return Err(PlanError::NdevAuto { have, class: class.into(), ntasks: facts.ntasks, host: host.into() });
    }
    Ok(have / tasks)
}

/// Each task's devices (indexes into the node's devices), and warnings. `near`: devices were
/// left out for being far from the step's CPUs, so too few is [`PlanError::TooFewNear`].
pub(super) fn tasks(
    spec: &Spec,
    node: &Node,
    facts: &StepFacts,
    list: &[usize],
    class_word: &str,
    near: Option<&Near>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Vec<usize>>, PlanError> {
    let host = node.hostname().to_string();
    let ndev = group_size(spec, facts, list, class_word, &host)?;
    let too_few_near = |near: &Near| PlanError::TooFewNear {
        ntasks: facts.ntasks,
        ndev: ndev as u32,
        class: class_word.into(),
        have: list.len(),
        host: host.clone(),
        allowed: near.allowed.clone(),
        elsewhere: near.elsewhere.clone(),
    };
    if list.len() < ndev {
        if let Some(near) = near {
            return Err(too_few_near(near));
        }
        return Err(PlanError::NdevTooLarge { ndev: ndev as u32, class: class_word.into(), have: list.len(), host });
    }
    // With `compact` the list is in tree order so that each run of `ndev` is local; inside
    // a group the devices go back to PCI order (device indexes are in PCI order).
    let groups: Vec<Vec<usize>> = list
        .chunks_exact(ndev)
        .map(|g| {
            let mut g = g.to_vec();
            if spec.compact {
                g.sort_unstable();
            }
            g
        })
        .collect();
    // `ppr=N`: N consecutive tasks per group (PRRTE's ppr:N:device=); without it, one.
    let per = spec.ppr.unwrap_or(1) as usize;
    if !spec.shared && facts.ntasks as usize > groups.len() * per {
        if let Some(near) = near {
            return Err(too_few_near(near));
        }
        return Err(PlanError::TooManyTasks {
            ntasks: facts.ntasks,
            ndev: ndev as u32,
            ppr: spec.ppr.map(|n| format!(" and ppr={n}")).unwrap_or_default(),
            fix: if spec.ppr.is_some() {
                "raise ppr= or add :shared to give more tasks one device"
            } else {
                "add :shared to give several tasks one device (or :ppr=N for N consecutive tasks each)"
            },
            needed: u64::from(facts.ntasks).div_ceil(per as u64) * ndev as u64,
            class: class_word.into(),
            have: list.len(),
            host,
        });
    }
    if list.len() % ndev != 0 && facts.ntasks as usize > groups.len().saturating_sub(1) {
        warnings.push(format!(
            "{} of the {} {class_word} devices do not fill a group of ndev={ndev} and are left unused",
            list.len() % ndev,
            list.len()
        ));
    }
    if spec.closest {
        return closest_assignment(spec, node, facts, list);
    }
    let assignment: Vec<Vec<usize>> =
        (0..facts.ntasks as usize).map(|t| groups[(t / per) % groups.len()].clone()).collect();
    if list.len() % ndev == 0 {
        idle_gpus_warning(spec, node, facts, list, &assignment, warnings);
    }
    Ok(assignment)
}

/// Slurm gave the step more GPUs than the plan hands out (`ndev=1` with more GPUs than
/// tasks): the others stay idle, which is rarely meant. Said with the spec that uses them all.
fn idle_gpus_warning(
    spec: &Spec,
    node: &Node,
    facts: &StepFacts,
    list: &[usize],
    assignment: &[Vec<usize>],
    warnings: &mut Vec<String>,
) {
    if spec.ndev_auto || spec.target != Target::Class(DeviceClass::Gpu) || facts.step_gpus.is_none() {
        return;
    }
    let idle: Vec<&str> = list
        .iter()
        .filter(|d| !assignment.iter().any(|a| a.contains(d)))
        .filter_map(|&d| node.devices.get(d).map(|d| d.name.as_str()))
        .collect();
    if idle.is_empty() {
        return;
    }
    let mut auto = spec.clone();
    auto.ndev_auto = true;
    auto.ndev = 1;
    let tasks = facts.ntasks as usize;
    let fix = if list.len() % tasks == 0 {
        format!("write --map-by-device={auto} to divide them among the tasks ({} each)", list.len() / tasks)
    } else {
        format!("with a task count that divides {}, --map-by-device={auto} divides them among the tasks", list.len())
    };
    warnings.push(format!(
        "the step has {} GPUs on {}, but the plan for its {} with ndev={} uses {}; idle: {}; {fix}",
        list.len(),
        node.hostname(),
        if facts.ntasks == 1 { "1 task".to_string() } else { format!("{} tasks", facts.ntasks) },
        spec.ndev,
        list.len() - idle.len(),
        idle.join(", ")
    ));
}

/// The deepest tree object (not a NUMA node) whose CPUs include all of `cpus`.
pub(super) fn common_ancestor(topo: &Topology, cpus: &CpuSet) -> usize {
    topo.objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.kind != ObjKind::NumaNode && cpus.is_subset(&o.cpuset))
        .max_by_key(|(i, o)| (o.depth, std::cmp::Reverse(*i)))
        .map_or(0, |(i, _)| i)
}

/// `closest` (seed 004): each bound task takes the device whose locality shares the deepest
/// common ancestor with its CPUs; ties are split by the task's position among the cores of
/// that ancestor; a single device is taken at once; an unbound task takes the plain order.
fn closest_assignment(
    spec: &Spec,
    node: &Node,
    facts: &StepFacts,
    list: &[usize],
) -> Result<Vec<Vec<usize>>, PlanError> {
    let topo = &node.topology;
    let all = facts.allowed_cpus.clone().unwrap_or_else(|| topo.all_cpus());
    let mut owner: HashMap<usize, u32> = HashMap::new();
    let mut out = Vec::new();
    for t in 0..facts.ntasks {
        let bound =
            facts.task_cpus.as_ref().and_then(|v| v.get(t as usize)).filter(|c| !c.is_empty() && !all.is_subset(c));
        let pick = match bound {
            _ if list.len() == 1 => list[0],
            None => list[t as usize % list.len()],
            Some(cpus) => {
                let scored: Vec<(usize, u32, usize)> = list
                    .iter()
                    .map(|&d| {
                        let anc = common_ancestor(topo, &cpus.union(&node.devices[d].locality));
                        (d, topo.objects[anc].depth, anc)
                    })
                    .collect();
                let best = scored.iter().map(|s| s.1).max().unwrap_or(0);
                let tied: Vec<&(usize, u32, usize)> = scored.iter().filter(|s| s.1 == best).collect();
                if tied.len() == 1 {
                    tied[0].0
                } else {
                    let anc = tied[0].2;
                    let cores: Vec<&CpuSet> = topo
                        .of_kind(ObjKind::Core)
                        .filter(|c| c.cpuset.is_subset(&topo.objects[anc].cpuset))
                        .map(|c| &c.cpuset)
                        .collect();
                    let first = cpus.first().unwrap_or(0);
                    let pos = cores.iter().position(|c| c.contains(first)).unwrap_or(0);
                    tied[(pos * tied.len() / cores.len().max(1)).min(tied.len() - 1)].0
                }
            }
        };
        if !spec.shared {
            if let Some(&first) = owner.get(&pick) {
                return Err(PlanError::ClosestCollision { first, second: t, device: node.devices[pick].name.clone() });
            }
            owner.insert(pick, t);
        }
        out.push(vec![pick]);
    }
    Ok(out)
}
