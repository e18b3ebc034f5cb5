//! The flags of each command, as clap reads them: definitions and their help, no I/O.
//! [`crate::inputs`] and [`crate::check_inputs`] resolve them into the engine's inputs.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// The spec in short, under `plan --help`; map-by-device(8) has it in full.
const SPEC_HELP: &str = "\
SPEC: TARGET[:QUALIFIER[=VALUE]]...
  TARGET     gpu, network (nic, fabric, openfabrics), block, none, or one device by name,
             UUID, PCI bus id or PMIx id (mlx5_0, GPU-46f7..., 0000:06:00.0, gpu://host::nvml2)
  QUALIFIERS interleave[=LEVEL] shared ndev=N|auto compact ppr=N pe=N hwtcpus bind=LEVEL
             overload env=all|none omp closest adapters verbose
  bind=      split (default), locality, hwthread, core, l1cache, l2cache, l3cache, numa,
             package (socket), none
  Words may be shortened to a unique prefix; ':' separates qualifiers, ',' does not.
  Examples: gpu   gpu:interleave:bind=core   gpu:ndev=auto:omp   nic:shared
  See map-by-device(8) for every rule, and the user guide for real plans.";

#[derive(Parser)]
#[command(
    name = "map-by-device",
    version,
    about = "Preview --map-by-device plans on this node or on an lstopo XML, and check a node for the plugin"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
        /// Also draw the node and these devices as an SVG picture in FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// Show the plan for one step on this node: each task's devices, CPUs and variables.
    #[command(after_help = SPEC_HELP)]
    Plan(PlanArgs),
    /// Tell whether this node is ready for the plugin (exit status 0 ready, 1 not ready).
    ///
    /// Reports the node's devices and their order, which GPUs can be named and how (hwloc
    /// backend or driver file), which would be refused and why, whether gres.conf numbers the
    /// GPUs in the order they are mapped in, the plugin's settings from
    /// plugstack.conf and its config file (with the topology cache and require_step_gpus),
    /// whether the admin's default maps here (for one task, one task per device of its class,
    /// and one task more), and, for this machine, whether slurmd's topology
    /// cache file is there and owned and protected as the steps require.
    Check(CheckArgs),
    /// Map one rank that another launcher started, as the plugin maps a task, then run PROGRAM.
    ///
    /// Put it in front of each rank: `mpirun -n 8 map-by-device exec gpu -- ./app`. The
    /// rank's local index and the node's rank count come from its launcher's variables (Open
    /// MPI/PRRTE, MPICH/Intel MPI Hydra, MVAPICH, torchrun, HPE PALS, Flux, else Slurm's);
    /// the node, the rules and the refusals are the plugin's. The spec is SPEC, else the job's
    /// --map-by-device, else the admin's default (which, where it steps aside, runs PROGRAM
    /// unmapped). It binds this process to the rank's CPUs, sets the rank's variables, and
    /// execs PROGRAM; it only narrows what the rank was given (its launcher's CPUs, the
    /// step's GPUs, the visible GPUs it inherited).
    #[command(after_help = SPEC_HELP)]
    Exec(ExecArgs),
}

#[derive(Args)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    pub(crate) source: Source,
    /// The CPUs the node's ranks share (a cpulist); default: the CPUs of the launcher that
    /// started this rank, within its cpuset cgroup (with --topology FILE, the whole node).
    #[arg(long, value_name = "CPULIST")]
    pub(crate) allowed_cpus: Option<String>,
    /// Print the rank's plan line (as `plan` prints a task) instead of running PROGRAM.
    #[arg(long)]
    pub(crate) print: bool,
    /// The --map-by-device spec (default: the job's --map-by-device, else the admin's default).
    #[arg(allow_hyphen_values = true)]
    pub(crate) spec: Option<String>,
    /// The program to run, and its arguments, after `--`.
    #[arg(last = true, value_name = "PROGRAM", required_unless_present = "print")]
    pub(crate) command: Vec<std::ffi::OsString>,
}

#[derive(Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) source: Source,
    /// The plugstack.conf whose map_by_device line (and its includes) to check. Default when
    /// reading this machine: slurm.conf's PlugStackConfig, else /etc/slurm/plugstack.conf.
    #[arg(long, value_name = "FILE")]
    pub(crate) plugstack: Option<PathBuf>,
    /// A TOML config file to check, as if the plugstack line said config=FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The gres.conf whose GPU order to compare with the mapping order. Default when reading
    /// this machine: gres.conf next to slurm.conf (/etc/slurm/gres.conf), if there is one.
    #[arg(long, value_name = "FILE")]
    pub(crate) gres_conf: Option<PathBuf>,
}

#[derive(Args, Clone)]
pub(crate) struct Source {
    /// Read this lstopo XML instead of the local machine.
    #[arg(long, value_name = "FILE")]
    pub(crate) topology: Option<PathBuf>,
    /// Read NVIDIA driver identity files under DIR (default /proc for the local machine only).
    #[arg(long, value_name = "DIR")]
    pub(crate) proc_root: Option<PathBuf>,
    /// Read AMD driver identity files under DIR (default /sys for the local machine only).
    #[arg(long, value_name = "DIR")]
    pub(crate) sys_root: Option<PathBuf>,
    /// The Level Zero hierarchy model the topology was discovered under (FLAT, COMPOSITE, COMBINED).
    #[arg(long, value_name = "MODEL")]
    pub(crate) ze_hierarchy: Option<String>,
    /// Host name for PMIx ids and reports (default: the topology's HostName).
    #[arg(long, value_name = "NAME")]
    pub(crate) hostname: Option<String>,
}

#[derive(Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub(crate) source: Source,
    /// Number of tasks of the step on this node.
    #[arg(long, short = 'n', value_name = "N", required_unless_present_any = ["map_by", "ntasks_per_node"])]
    pub(crate) ntasks: Option<u32>,
    /// Open MPI's option, refused with its --map-by-device spelling.
    #[arg(long = "map-by", value_name = "X", hide = true)]
    pub(crate) map_by: Option<String>,
    /// Slurm's option, refused: the preview's -n is the tasks on this node.
    #[arg(long = "ntasks-per-node", value_name = "N", hide = true)]
    pub(crate) ntasks_per_node: Option<String>,
    /// Slurm's --cpus-per-task, in CPUs (hardware threads) as Slurm counts them: the default
    /// pe for per-core bindings (N CPUs are N divided by the threads per core, rounded up),
    /// and no task is bound to fewer.
    #[arg(long, short = 'c', value_name = "N")]
    pub(crate) cpus_per_task: Option<u32>,
    /// The CPUs allocated to the step on this node (a cpulist such as 0-3,8). The devices
    /// local to them are handed out first and, unless bind=none, they are the only ones.
    #[arg(long, value_name = "CPULIST")]
    pub(crate) allowed_cpus: Option<String>,
    /// Each task's existing binding, for closest: cpulists separated by ';'.
    #[arg(long, value_name = "CPULIST[;CPULIST...]")]
    pub(crate) task_cpus: Option<String>,
    /// Slurm's global GPU indices allocated to the step (comma list, PCI-bus order); `none`:
    /// Slurm manages the node's GPUs and gave the step none. Without it every GPU of the node
    /// is the step's, as where Slurm does not manage them.
    #[arg(long, value_name = "LIST|none")]
    pub(crate) step_gpus: Option<String>,
    /// A variable of the task's environment the rules read (NAME=VALUE; repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub(crate) env: Vec<String>,
    /// Plan the spec as the admin's default= would be applied (the plugin's rule): a step
    /// with more devices than tasks gets them divided among its tasks, a one-task step all of
    /// them and their CPUs, and where a share cannot be given the default steps aside.
    #[arg(long)]
    pub(crate) as_default: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print a table that fits a terminal: each task's devices by name, its CPUs, and its
    /// variables (long values such as UUIDs by name only; a long value every task has alike,
    /// such as the node's NCCL_IB_HCA, once below the table).
    #[arg(long, conflicts_with = "json")]
    pub(crate) short: bool,
    /// Also draw the plan as an SVG picture in FILE (written for a refused plan too).
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
    /// The --map-by-device spec (one that starts with '-' is read as a spec too).
    #[arg(allow_hyphen_values = true, required_unless_present = "map_by")]
    pub(crate) spec: Option<String>,
}
