//! Which rank of its node a process is, when a launcher other than srun started it: the
//! local rank and the number of ranks on the node, from the launcher's own variables.
//!
//! `map-by-device exec` runs in front of each rank that `mpirun`, `mpiexec.hydra`, `torchrun`
//! (or srun itself) starts, and plans the node as the plugin would for a step of that many
//! tasks: this module says which task it is. Pure: it reads a copy of the environment.
//!
//! Each row names the launcher's variables as its own documentation or source does:
//! - Open MPI and PRRTE (`mpirun`, `prterun`): `OMPI_COMM_WORLD_LOCAL_RANK` and
//!   `OMPI_COMM_WORLD_LOCAL_SIZE` (Open MPI's "Environment variables set for MPI
//!   applications"; PRRTE's `schizo/ompi` sets them for every process it starts).
//! - MPICH and Intel MPI's Hydra (`mpiexec.hydra`): `MPI_LOCALRANKID` and `MPI_LOCALNRANKS`
//!   (set by `hydra_pmi_proxy` for each process it forks, `pm/hydra/proxy/pmip_cb.c`).
//! - MVAPICH (`mpirun_rsh`): `MV2_COMM_WORLD_LOCAL_RANK` and `MV2_COMM_WORLD_LOCAL_SIZE`.
//! - PyTorch's `torchrun` (and what starts workers the way it documents: `accelerate`,
//!   `deepspeed`): `LOCAL_RANK` and `LOCAL_WORLD_SIZE` (`torch.distributed.run`).
//! - HPE PALS (`aprun`/`mpiexec` on HPE Cray EX): `PALS_LOCAL_RANKID` and `PALS_LOCAL_SIZE`.
//! - Flux (`flux run`): `FLUX_TASK_LOCAL_ID`; Flux exports no per-node task count, so the
//!   count is `FLUX_JOB_SIZE / FLUX_JOB_NNODES`, read only when it divides evenly (another
//!   shape is refused: the node's count is unknown).
//! - Slurm (`srun`), last: `SLURM_LOCALID`, and the node's entry of
//!   `SLURM_STEP_TASKS_PER_NODE` (`2(x3),1`) at `SLURM_NODEID`. Last because every other
//!   launcher under Slurm starts its ranks from a Slurm step of its own (one daemon per
//!   node), whose `SLURM_LOCALID` the ranks inherit: it names the daemon, not the rank.
//!
//! Two launchers other than Slurm that both name this process and disagree (a torchrun
//! started by mpirun leaves the outer rank's variables in its workers) are refused: which
//! one is right cannot be told from the variables.

use crate::text::excerpt;
use std::collections::BTreeMap;

/// How a launcher tells a process the number of ranks on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    /// One variable holds it.
    Var(&'static str),
    /// Flux: the job's size over its node count, when it divides evenly.
    Even { size: &'static str, nodes: &'static str },
    /// Slurm: `SLURM_STEP_TASKS_PER_NODE`'s entry for `SLURM_NODEID`.
    SlurmTasksPerNode,
}

/// A launcher, and the variables it sets in each process it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launcher {
    /// In words, for messages and `verbose`.
    pub name: &'static str,
    /// The variable holding the local rank.
    pub rank: &'static str,
    size: Size,
}

/// The launchers, in the order they are tried; Slurm last.
const LAUNCHERS: [Launcher; 7] = [
    Launcher {
        name: "Open MPI/PRRTE",
        rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        size: Size::Var("OMPI_COMM_WORLD_LOCAL_SIZE"),
    },
    Launcher { name: "MPICH/Intel MPI (Hydra)", rank: "MPI_LOCALRANKID", size: Size::Var("MPI_LOCALNRANKS") },
    Launcher { name: "MVAPICH", rank: "MV2_COMM_WORLD_LOCAL_RANK", size: Size::Var("MV2_COMM_WORLD_LOCAL_SIZE") },
    Launcher { name: "torchrun", rank: "LOCAL_RANK", size: Size::Var("LOCAL_WORLD_SIZE") },
    Launcher { name: "HPE PALS", rank: "PALS_LOCAL_RANKID", size: Size::Var("PALS_LOCAL_SIZE") },
    Launcher {
        name: "Flux",
        rank: "FLUX_TASK_LOCAL_ID",
        size: Size::Even { size: "FLUX_JOB_SIZE", nodes: "FLUX_JOB_NNODES" },
    },
    Launcher { name: "Slurm", rank: "SLURM_LOCALID", size: Size::SlurmTasksPerNode },
];

/// The variables that name a local rank, in the order they are tried (for messages and docs).
pub fn rank_variables() -> impl Iterator<Item = &'static str> {
    LAUNCHERS.iter().map(|l| l.rank)
}

/// This process's place among the ranks of its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRank {
    /// 0-based, below `size`: the task id the plan is read at.
    pub rank: u32,
    /// Ranks on this node: the step's task count the node is planned for.
    pub size: u32,
    /// Which launcher said so.
    pub launcher: Launcher,
    /// The variables read, as `NAME=VALUE` (for `verbose`).
    pub read: String,
}

/// Why the local rank is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RankError {
    #[error(
        "cannot tell which rank of this node this process is: none of {} is set; start map-by-device exec from a \
         launcher, in front of each rank (mpirun ... map-by-device exec -- PROGRAM)",
        rank_variables().collect::<Vec<_>>().join(", ")
    )]
    None,
    /// A variable that is not a number, or the size is missing or zero.
    #[error(
        "{launcher} set {var}={}, which is not {what}: cannot tell which rank of this node this process is",
        excerpt(value)
    )]
    Bad { launcher: &'static str, var: &'static str, value: String, what: &'static str },
    #[error("{launcher} set {rank_var} but not {size_var}: cannot tell how many ranks share this node")]
    NoSize { launcher: &'static str, rank_var: &'static str, size_var: &'static str },
    #[error(
        "Flux runs {size} tasks on {nodes} nodes (FLUX_JOB_SIZE, FLUX_JOB_NNODES), which is not the same number on \
         every node, and Flux does not say how many run on this one: give the job the same number of tasks per node"
    )]
    FluxUneven { size: u32, nodes: u32 },
    #[error("{launcher} says local rank {rank} of {size} ({read}): a local rank is below the number of local ranks")]
    Beyond { launcher: &'static str, rank: u32, size: u32, read: String },
    #[error(
        "two launchers name this process differently: {a} says local rank {a_rank} of {a_size} ({a_read}), {b} says \
         {b_rank} of {b_size} ({b_read}); remove the outer launcher's variables from the rank's environment (env -u \
         NAME ...) so that only the launcher that started the rank speaks"
    )]
    Disagree {
        a: &'static str,
        a_rank: u32,
        a_size: u32,
        a_read: String,
        b: &'static str,
        b_rank: u32,
        b_size: u32,
        b_read: String,
    },
}

/// This process's local rank and the node's rank count, from the first launcher whose
/// variables are set; Slurm's only when no other launcher's are.
pub fn local_rank(env: &BTreeMap<String, String>) -> Result<LocalRank, RankError> {
    let mut found: Option<LocalRank> = None;
    for launcher in LAUNCHERS {
        if !env.contains_key(launcher.rank) {
            continue;
        }
        let is_slurm = launcher.size == Size::SlurmTasksPerNode;
        if is_slurm && found.is_some() {
            break;
        }
        let this = read(launcher, env)?;
        match &found {
            None => found = Some(this),
            Some(first) if first.rank == this.rank && first.size == this.size => {}
            Some(first) => {
                return Err(RankError::Disagree {
                    a: first.launcher.name,
                    a_rank: first.rank,
                    a_size: first.size,
                    a_read: first.read.clone(),
                    b: this.launcher.name,
                    b_rank: this.rank,
                    b_size: this.size,
                    b_read: this.read,
                })
            }
        }
    }
    found.ok_or(RankError::None)
}

/// One launcher's rank and size.
fn read(launcher: Launcher, env: &BTreeMap<String, String>) -> Result<LocalRank, RankError> {
    let number = |var: &'static str, what: &'static str| -> Result<Option<u32>, RankError> {
        match env.get(var) {
            None => Ok(None),
            Some(v) => v.trim().parse::<u32>().map(Some).map_err(|_| RankError::Bad {
                launcher: launcher.name,
                var,
                value: v.clone(),
                what,
            }),
        }
    };
    let rank = number(launcher.rank, "a local rank (a number from 0)")?.unwrap_or_default();
    let mut read = vec![format!("{}={rank}", launcher.rank)];
    let size = match launcher.size {
        Size::Var(var) => {
            let size = number(var, "a number of ranks")?.ok_or(RankError::NoSize {
                launcher: launcher.name,
                rank_var: launcher.rank,
                size_var: var,
            })?;
            read.push(format!("{var}={size}"));
            size
        }
        Size::Even { size: size_var, nodes: nodes_var } => {
            let no_size = |v| RankError::NoSize { launcher: launcher.name, rank_var: launcher.rank, size_var: v };
            let size = number(size_var, "a number of tasks")?.ok_or(no_size(size_var))?;
            let nodes = number(nodes_var, "a number of nodes")?.ok_or(no_size(nodes_var))?;
            if nodes == 0 || size % nodes != 0 {
                return Err(RankError::FluxUneven { size, nodes });
            }
            read.push(format!("{size_var}={size}"));
            read.push(format!("{nodes_var}={nodes}"));
            size / nodes
        }
        Size::SlurmTasksPerNode => {
            let node = number("SLURM_NODEID", "a node index")?.unwrap_or_default();
            let var = "SLURM_STEP_TASKS_PER_NODE";
            let text = env.get(var).ok_or(RankError::NoSize {
                launcher: launcher.name,
                rank_var: launcher.rank,
                size_var: var,
            })?;
            let size = tasks_on_node(text, node).ok_or_else(|| RankError::Bad {
                launcher: launcher.name,
                var,
                value: text.clone(),
                what: "a task count per node as Slurm writes it (2(x3),1) with an entry for SLURM_NODEID",
            })?;
            read.push(format!("SLURM_NODEID={node}"));
            read.push(format!("{var}={}", excerpt(text)));
            size
        }
    };
    let read = read.join(" ");
    if size == 0 {
        return Err(RankError::Bad {
            launcher: launcher.name,
            var: launcher.rank,
            value: read,
            what: "a rank count above 0",
        });
    }
    if rank >= size {
        return Err(RankError::Beyond { launcher: launcher.name, rank, size, read });
    }
    Ok(LocalRank { rank, size, launcher, read })
}

/// Node `node`'s task count in Slurm's compressed list (`2(x3),1`: nodes 0-2 run 2, node 3
/// runs 1). `None` when the text is not such a list or has no entry for the node.
fn tasks_on_node(text: &str, node: u32) -> Option<u32> {
    let mut first = 0u64;
    for item in text.trim().split(',') {
        let (count, repeat) = match item.split_once("(x") {
            Some((c, r)) => (c, r.strip_suffix(')')?.parse::<u64>().ok()?),
            None => (item, 1),
        };
        let count = count.trim().parse::<u32>().ok()?;
        if repeat == 0 {
            return None;
        }
        if u64::from(node) < first + repeat {
            return Some(count);
        }
        first += repeat;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// A launcher's variables, and the launcher, rank and size they say.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, u32, u32);

    #[test]
    fn each_launcher_is_read_from_its_own_variables() {
        let cases: [Case; 7] = [
            (&[("OMPI_COMM_WORLD_LOCAL_RANK", "1"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "4")], "Open MPI/PRRTE", 1, 4),
            (&[("MPI_LOCALRANKID", "2"), ("MPI_LOCALNRANKS", "3")], "MPICH/Intel MPI (Hydra)", 2, 3),
            (&[("MV2_COMM_WORLD_LOCAL_RANK", "0"), ("MV2_COMM_WORLD_LOCAL_SIZE", "2")], "MVAPICH", 0, 2),
            (&[("LOCAL_RANK", "7"), ("LOCAL_WORLD_SIZE", "8")], "torchrun", 7, 8),
            (&[("PALS_LOCAL_RANKID", "3"), ("PALS_LOCAL_SIZE", "4")], "HPE PALS", 3, 4),
            (&[("FLUX_TASK_LOCAL_ID", "1"), ("FLUX_JOB_SIZE", "8"), ("FLUX_JOB_NNODES", "4")], "Flux", 1, 2),
            (&[("SLURM_LOCALID", "1"), ("SLURM_NODEID", "3"), ("SLURM_STEP_TASKS_PER_NODE", "4(x3),2")], "Slurm", 1, 2),
        ];
        for (pairs, name, rank, size) in cases {
            let r = local_rank(&env(pairs)).unwrap();
            assert_eq!((r.launcher.name, r.rank, r.size), (name, rank, size), "{pairs:?}");
        }
    }

    #[test]
    fn slurm_is_the_last_word_under_another_launcher() {
        // mpirun's ranks inherit the daemon's one-task Slurm step.
        let e = env(&[
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "0"),
            ("SLURM_STEP_TASKS_PER_NODE", "1"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ]);
        let r = local_rank(&e).unwrap();
        assert_eq!((r.launcher.name, r.rank, r.size), ("Open MPI/PRRTE", 1, 2));
        assert_eq!(r.read, "OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2");
    }

    #[test]
    fn launchers_that_disagree_are_refused_naming_both() {
        let e = env(&[
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
            ("LOCAL_RANK", "3"),
            ("LOCAL_WORLD_SIZE", "4"),
        ]);
        let msg = local_rank(&e).unwrap_err().to_string();
        assert!(msg.contains("Open MPI/PRRTE says local rank 0 of 1"), "{msg}");
        assert!(msg.contains("torchrun says 3 of 4 (LOCAL_RANK=3 LOCAL_WORLD_SIZE=4)"), "{msg}");
        // Agreeing launchers are fine.
        let e =
            env(&[("MPI_LOCALRANKID", "1"), ("MPI_LOCALNRANKS", "2"), ("LOCAL_RANK", "1"), ("LOCAL_WORLD_SIZE", "2")]);
        assert_eq!(local_rank(&e).unwrap().launcher.name, "MPICH/Intel MPI (Hydra)");
    }

    #[test]
    fn missing_bad_and_impossible_values_are_refused() {
        assert_eq!(local_rank(&env(&[])), Err(RankError::None));
        assert!(local_rank(&env(&[])).unwrap_err().to_string().contains("OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID"));
        let msg = local_rank(&env(&[("LOCAL_RANK", "1")])).unwrap_err().to_string();
        assert_eq!(msg, "torchrun set LOCAL_RANK but not LOCAL_WORLD_SIZE: cannot tell how many ranks share this node");
        let msg = local_rank(&env(&[("LOCAL_RANK", "x\n"), ("LOCAL_WORLD_SIZE", "2")])).unwrap_err().to_string();
        assert!(msg.starts_with("torchrun set LOCAL_RANK=\"x\\n\", which is not a local rank"), "{msg}");
        let msg = local_rank(&env(&[("LOCAL_RANK", "2"), ("LOCAL_WORLD_SIZE", "2")])).unwrap_err().to_string();
        assert!(msg.contains("says local rank 2 of 2"), "{msg}");
        let e = env(&[("FLUX_TASK_LOCAL_ID", "0"), ("FLUX_JOB_SIZE", "5"), ("FLUX_JOB_NNODES", "2")]);
        assert_eq!(local_rank(&e), Err(RankError::FluxUneven { size: 5, nodes: 2 }));
        let e = env(&[("SLURM_LOCALID", "0"), ("SLURM_NODEID", "4"), ("SLURM_STEP_TASKS_PER_NODE", "4(x3),2")]);
        assert!(local_rank(&e).unwrap_err().to_string().contains("SLURM_STEP_TASKS_PER_NODE"));
    }

    #[test]
    fn slurms_task_counts_expand_per_node() {
        assert_eq!(tasks_on_node("2", 0), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 2), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 3), Some(1));
        assert_eq!(tasks_on_node("2(x3),1", 4), None);
        assert_eq!(tasks_on_node("2(x0)", 0), None);
        assert_eq!(tasks_on_node("a", 0), None);
    }
}
