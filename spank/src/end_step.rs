//! Ending the whole step when a task is refused on this node.
//!
//! A task that fails `task_init` never execs, but Slurm does nothing about the step's other
//! tasks: without `--kill-on-bad-exit` (`-K`, `SLURM_KILL_BAD_EXIT`, slurm.conf
//! `KillOnBadExit`) srun waits for the tasks on every other node to finish, and an MPI job
//! waits for the missing rank until its time limit. Neither of srun's switches can be set by
//! a plugin: srun reads `SLURM_KILL_BAD_EXIT` while it parses each component's options, before
//! any plugin hook that knows about `--map-by-device` runs, and keeps the value in its own
//! option structure. A `user_init` failure does not help either: Slurm 22.05 lets srun exit 0
//! and leaves the other nodes running; from 23.11 it marks the step failed (srun exits 1) but
//! still does not stop the other nodes (slurmstepd `mgr.c:_fork_all_tasks`, Slurm bug 7573).
//!
//! So the refused task asks slurmctld to kill its step (unless the whole node's plan was
//! refused on a step of one node: every task fails then anyway), as `scancel JOB.STEP` would: the
//! request is `REQUEST_CANCEL_JOB_STEP` with SIGKILL, which slurmctld sends to every node of
//! the step; for a heterogeneous job's leader it kills every component's step. It runs in
//! the task (the job's user, after Slurm's setuid), so it is authorised as that user and can
//! end nothing but the user's own step. The call is libslurm's `slurm_kill_job_step`, which
//! every slurmstepd has loaded (it links `libslurmfull`); its arguments changed in 23.11 and
//! 25.11, and build.rs picks the form of the installed Slurm.

use std::ffi::{c_char, c_int, CStr};
use std::time::{Duration, Instant};

/// `NO_VAL` (slurm.h): no heterogeneous component in particular.
#[cfg(slurm_kill_step = "step_id")]
const NO_VAL: u32 = 0xffff_fffe;

/// `slurm_step_id_t` (slurm.h, 25.05 and later).
#[cfg(slurm_kill_step = "step_id")]
#[repr(C)]
struct SlurmStepId {
    sluid: u64,
    job_id: u32,
    step_het_comp: u32,
    step_id: u32,
}

extern "C" {
    fn slurm_strerror(errnum: c_int) -> *const c_char;
    #[cfg(slurm_kill_step = "ids")]
    fn slurm_kill_job_step(job_id: u32, step_id: u32, signal: u16) -> c_int;
    #[cfg(slurm_kill_step = "ids_flags")]
    fn slurm_kill_job_step(job_id: u32, step_id: u32, signal: u16, flags: u16) -> c_int;
    #[cfg(slurm_kill_step = "step_id")]
    fn slurm_kill_job_step(step_id: *mut SlurmStepId, signal: u16, flags: u16) -> c_int;
}

/// Whether the step has tasks beyond this node: more than one node (`S_JOB_NNODES`, unknown
/// counts as more), or a component of a heterogeneous step (`SLURM_HET_SIZE` in the task's
/// environment: each component's slurmstepd counts only its own nodes).
pub fn spans_other_nodes(nnodes: Option<u32>, env: impl Fn(&str) -> Option<String>) -> bool {
    nnodes.is_none_or(|n| n > 1) || env("SLURM_HET_SIZE").is_some()
}

/// The jobs whose step `step` is to be killed, in order: in a heterogeneous step the
/// leader's first, which makes slurmctld kill every component (`kill_job_step` in
/// slurmctld's `job_mgr.c`: SIGKILL to a leader's step goes to each component, to another
/// component's only to that one), then this component's own (`S_JOB_ID`), should the first
/// fail. The leader's id comes from the task's `SLURM_JOB_ID` (every component's tasks are
/// told the leader's), read only where `SLURM_HET_SIZE` says the job is heterogeneous. The
/// task's environment is the job user's, and so is the request: a wrong value could only end
/// another step of the same user.
pub fn jobs_of_step(job: u32, env: impl Fn(&str) -> Option<String>) -> Vec<u32> {
    let leader = env("SLURM_HET_SIZE")
        .and_then(|_| env("SLURM_JOB_ID"))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&leader| leader != job);
    leader.into_iter().chain([job]).collect()
}

/// slurmctld did not kill step `job.step`: Slurm's words for why.
#[derive(Debug, thiserror::Error)]
#[error("slurmctld did not kill step {job}.{step}: {why}")]
pub struct KillError {
    pub job: u32,
    pub step: u32,
    pub why: String,
}

/// Every job id tried for the step, and why each failed (in order).
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct KillAllError(pub Vec<KillError>);

/// Longest wait for the refusal to leave the task's stderr, and the time after that for
/// slurmstepd to forward it.
const DRAIN_LIMIT: Duration = Duration::from_millis(500);
const FORWARD_TIME: Duration = Duration::from_millis(100);

/// Waits, at most [`DRAIN_LIMIT`], until slurmstepd has read what the task wrote to its
/// stderr (the refusal, just logged: `FIONREAD` on fd 2, a pipe to slurmstepd's I/O), then
/// [`FORWARD_TIME`] for it to reach srun. srun stops reading the tasks' output once slurmctld
/// tells it the step was aborted, so a kill sent at once lost the refusal's line about one
/// time in four (a two-node step, multinode suite, December 2026): the user saw only "Exited
/// with exit code 1". Costs a refused step about 0.1 s.
fn let_the_refusal_reach_srun() {
    let start = Instant::now();
    while start.elapsed() < DRAIN_LIMIT {
        let mut unread: c_int = 0;
        // SAFETY: FIONREAD writes one int through the pointer, valid for the whole call; fd 2
        // is whatever Slurm gave the task (a pipe, a file, a tty): an error ends the wait.
        let rc = unsafe { libc::ioctl(2, libc::FIONREAD, &mut unread) };
        if rc != 0 || unread <= 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(FORWARD_TIME);
}

/// [`kill`] for the first of `jobs` (see [`jobs_of_step`]) that slurmctld accepts. The first
/// success also kills this task, so nothing after it runs.
pub fn kill_all(jobs: &[u32], step: u32) -> Result<(), KillAllError> {
    let_the_refusal_reach_srun();
    let mut failures = Vec::new();
    for &job in jobs {
        match kill(job, step) {
            Ok(()) => return Ok(()),
            Err(e) => failures.push(e),
        }
    }
    Err(KillAllError(failures))
}

/// Asks slurmctld to kill step `job.step` on every node. Blocks until slurmctld answers
/// (at most Slurm's MessageTimeout).
pub fn kill(job: u32, step: u32) -> Result<(), KillError> {
    let signal = libc::SIGKILL as u16;
    #[cfg(slurm_kill_step = "ids")]
    // SAFETY:
    // - the symbol is libslurm's, loaded in every slurmstepd (and so in its tasks), with
    //   this signature in the Slurm this plugin was built for (build.rs, slurm.h);
    // - it takes plain integers and keeps nothing after it returns.
    let rc = unsafe { slurm_kill_job_step(job, step, signal) };
    #[cfg(slurm_kill_step = "ids_flags")]
    // SAFETY: as above; flags 0 asks for nothing but the signal.
    let rc = unsafe { slurm_kill_job_step(job, step, signal, 0) };
    #[cfg(slurm_kill_step = "step_id")]
    let rc = {
        let mut id = SlurmStepId { sluid: 0, job_id: job, step_het_comp: NO_VAL, step_id: step };
        // SAFETY: as above; `id` is a live, writable slurm_step_id_t for the whole call, and
        // slurm_kill_job_step only copies it into its request.
        unsafe { slurm_kill_job_step(&mut id, signal, 0) }
    };
    if rc == 0 {
        return Ok(());
    }
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: slurm_strerror returns a pointer to a static NUL-terminated string (or NULL),
    // for any errno value, Slurm's own or the system's.
    let text = unsafe { slurm_strerror(errno) };
    let why = if text.is_null() {
        format!("error {errno}")
    } else {
        // SAFETY: non-NULL: a static NUL-terminated string that outlives this call.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    };
    Err(KillError { job, step, why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_of_one_node_is_not_killed_for_a_node_wide_refusal() {
        let none = |_: &str| None;
        assert!(!spans_other_nodes(Some(1), none));
        assert!(spans_other_nodes(Some(2), none));
        assert!(spans_other_nodes(None, none));
        assert!(spans_other_nodes(Some(1), |k: &str| (k == "SLURM_HET_SIZE").then(|| "2".to_string())));
    }

    #[test]
    fn every_failed_kill_is_said_in_order() {
        let e = |job| KillError { job, step: 0, why: "Invalid job id specified".into() };
        assert_eq!(
            KillAllError(vec![e(7), e(8)]).to_string(),
            "slurmctld did not kill step 7.0: Invalid job id specified; slurmctld did not kill step 8.0: Invalid job id \
             specified"
        );
    }

    #[test]
    fn a_heterogeneous_step_is_killed_through_its_leader_too() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(jobs_of_step(7, env(&[("SLURM_JOB_ID", "7")])), [7]);
        // Not heterogeneous: SLURM_JOB_ID is not even looked at.
        assert_eq!(jobs_of_step(7, env(&[("SLURM_JOB_ID", "3")])), [7]);
        assert_eq!(jobs_of_step(8, env(&[("SLURM_HET_SIZE", "2"), ("SLURM_JOB_ID", "7")])), [7, 8]);
        assert_eq!(jobs_of_step(7, env(&[("SLURM_HET_SIZE", "2"), ("SLURM_JOB_ID", "7")])), [7]);
        assert_eq!(jobs_of_step(8, env(&[("SLURM_HET_SIZE", "2"), ("SLURM_JOB_ID", "x")])), [8]);
    }
}
