//! The Slurm probes of a step: what Slurm itself did, or the job asked it to do, that the
//! plan must agree with. Whether its gres/gpu plugin runs in this slurmstepd
//! ([`gres_gpu_loaded`]: then `SLURM_STEP_GPUS` is Slurm's word on the step's GPUs), whether
//! it bound GPUs to a task ([`slurm_gpu_binding`], and the refusal that names the spelling
//! agreeing with Slurm, [`gpu_binding_refusal`]), and whether the job chose a binding of its
//! own, which an admin's default leaves alone ([`job_cpu_binding`], [`job_gpu_bind_none`]).

use map_by_device::device::DeviceClass;
use map_by_device::spec::{Spec, Target};
use map_by_device::text::excerpt;
use std::collections::BTreeMap;
use std::ffi::OsStr;

/// Whether Slurm bound GPUs to this task (`--gpu-bind`, or implied by `--gpus-per-task`,
/// `--ntasks-per-gpu`, `--accel-bind=g`), judged in `task_init` by comparing the task's
/// environment (`now`) with the step's as `user_init` saw it (docs/slurm-allocation.md §3):
/// - one of `env::slurm_gpu_variables` changed: Slurm narrowed this task's GPUs (it rewrites
///   them per task after `task_init_privileged`, before `task_init`; every release);
/// - or, on a node running several of the step's tasks, `SLURMD_TRES_BIND` appeared (or
///   changed) with a GPU binding other than `none`: `gpu:closest` up to 23.02,
///   `gres/gpu:closest` from 23.11 on (`--gpu-bind` became `--tres-bind=gres/gpu:`), entries
///   separated by `;` or `+`. A node's only task is left out of this rule: 22.05 and 24.11 set
///   no `SLURMD_TRES_BIND` for it, 26.05 does, and none of them narrows its GPUs (then a
///   variable would have changed), so the same request behaves the same on every release.
///
/// A `none` binding is no binding, whatever it did to the variables (22.05 unsets them,
/// 24.11 and later keep them). Returns what gave it away, for the message.
pub fn slurm_gpu_binding(
    step_env: &BTreeMap<String, String>,
    local_tasks: u32,
    now: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    if let Some(tres) = now("SLURMD_TRES_BIND").filter(|t| step_env.get("SLURMD_TRES_BIND") != Some(t)) {
        let gpu = gpu_bind_options(&tres);
        if gpu.contains(&"none") {
            return None;
        }
        if !gpu.is_empty() && local_tasks > 1 {
            return Some(format!("SLURMD_TRES_BIND={}", excerpt(&tres)));
        }
    }
    map_by_device::env::slurm_gpu_variables().find_map(|var| {
        let (before, after) = (step_env.get(var).cloned(), now(var));
        (before != after).then(|| {
            let show = |v: Option<String>| v.map_or("unset".to_string(), |v| map_by_device::text::quoted(&v));
            format!("{var} was {} for the step and is {} for this task", show(before), show(after))
        })
    })
}

/// The CPU binding the job asked Slurm for, as srun sent it in the step's environment
/// (`user_init`'s `S_JOB_ENV`): srun sets `SLURM_CPU_BIND_TYPE` (and `SLURM_CPU_BIND`) only
/// when the job asked for a binding (`--cpu-bind`, its environment form, or an option implying
/// one: `--hint`, `--threads-per-core`, `--ntasks-per-core`, `--ntasks-per-socket`), never for
/// the site's default (`TaskPluginParam`, `CpuBind=`), which slurmd applies later (Slurm
/// 22.05 `srun.c:_setup_one_job_env`, `env.c:setup_env`). `--cpu-bind=verbose` alone binds
/// nothing and is not one. Returns what gave it away.
///
/// The job's user controls the variables, which is safe here: the answer only ever makes an
/// admin's default step aside, which a job may always have.
pub fn job_cpu_binding(step_env: &BTreeMap<String, String>) -> Option<String> {
    let binds = |word: &str| !matches!(word.trim(), "" | "quiet" | "q" | "verbose" | "v");
    for var in ["SLURM_CPU_BIND_TYPE", "SLURM_CPU_BIND"] {
        if let Some(value) = step_env.get(var).filter(|v| v.split(',').any(binds)) {
            return Some(format!("{var}={}", excerpt(value)));
        }
    }
    None
}

/// `--gpu-bind=none` seen in a task (`SLURMD_TRES_BIND` new since `user_init`, its GPU options
/// naming `none`) on a node that runs several of the step's tasks: the job chose to keep every
/// GPU of the step in every task, which the plan of an admin's default would undo. A node's
/// only task is left out as in [`slurm_gpu_binding`].
pub fn job_gpu_bind_none(
    step_env: &BTreeMap<String, String>,
    local_tasks: u32,
    now: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let tres = now("SLURMD_TRES_BIND").filter(|t| step_env.get("SLURMD_TRES_BIND") != Some(t))?;
    (local_tasks > 1 && gpu_bind_options(&tres).contains(&"none"))
        .then(|| format!("SLURMD_TRES_BIND={}", excerpt(&tres)))
}

/// The refusal of a GPU mapping that Slurm's own GPU binding contradicts (`why`: what gave
/// it away, from [`slurm_gpu_binding`]), with the spelling that agrees with Slurm:
/// `--gpus-per-task=N` (`per_task:N`) is `ndev=auto`, which gives each task exactly Slurm's
/// N GPUs; `--ntasks-per-gpu=K` (`single:K`) is `gpu:ppr=K` with GPUs per node. Otherwise,
/// and after those: `--gpu-bind=none`, or one of the two.
pub fn gpu_binding_refusal(spec: &Spec, why: &str) -> String {
    let count =
        |key: &str| why.split(key).nth(1).map(|rest| rest.chars().take_while(char::is_ascii_digit).collect::<String>());
    let gpu_class = spec.target == Target::Class(DeviceClass::Gpu);
    let first = match (count("per_task:"), count("single:")) {
        // Slurm groups the step's GPUs in its index order; compact regroups them by the tree.
        (Some(n), _) if gpu_class && spec.compact => {
            let mut plain = spec.clone();
            plain.compact = false;
            format!(
                "--gpus-per-task={n} hands each task {n} GPUs in Slurm's index order, which compact does not keep: \
                 drop :compact (--map-by-device={plain}), or ask for --gpus-per-node with --ntasks-per-node to keep \
                 it; else "
            )
        }
        (Some(n), _) if gpu_class && !spec.ndev_auto => {
            let mut auto = spec.clone();
            auto.ndev_auto = true;
            auto.ndev = 1;
            format!(
                "add :ndev=auto (--map-by-device={auto} gives each task exactly the {n} GPUs --gpus-per-task binds \
                 to it, and their CPUs); else "
            )
        }
        (_, Some(k)) if gpu_class && k.parse::<u32>().is_ok_and(|k| k >= 1) => {
            let mut ppr = spec.clone();
            ppr.ppr = k.parse().ok();
            format!(
                "for --ntasks-per-gpu={k} write --gpus-per-node=G --ntasks-per-node={k}*G --map-by-device={ppr} \
                 ({k} consecutive tasks on each GPU); else "
            )
        }
        _ => String::new(),
    };
    format!(
        "--map-by-device={spec} cannot be combined with Slurm's GPU binding ({why}; --gpus-per-task and \
         --ntasks-per-gpu imply one): {first}drop --gpu-bind or use --gpu-bind=none, or drop --map-by-device"
    )
}

/// The GPU binding options of a `SLURMD_TRES_BIND` value: `gpu:verbose,closest` (22.05) or
/// `gres/gpu:closest` (23.11+) -> `["verbose", "closest"]`; other resources are ignored.
fn gpu_bind_options(tres: &str) -> Vec<&str> {
    tres.split([';', '+'])
        .map(str::trim)
        .filter_map(|part| part.strip_prefix("gres/").unwrap_or(part).strip_prefix("gpu:"))
        .flat_map(|opts| opts.split(','))
        .map(str::trim)
        .collect()
}

/// Whether Slurm's gres/gpu plugin (`gres_gpu.so`) is loaded in this process. In slurmstepd
/// it is loaded exactly when slurm.conf's GresTypes names gpu, and then it sets or removes
/// `SLURM_STEP_GPUS` for every step before `user_init` (`gres_g_step_set_env`, Slurm 22.05 to
/// 26.05).
pub fn gres_gpu_loaded() -> bool {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, found: *mut libc::c_void) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid `info` for the duration of the call, whose
        // `dlpi_name` is NULL or a NUL-terminated string; `found` is the `bool` given below.
        unsafe {
            let name = (*info).dlpi_name;
            if name.is_null() {
                return 0;
            }
            let name = std::ffi::CStr::from_ptr(name).to_bytes();
            if name.ends_with(b"/gres_gpu.so") {
                *found.cast::<bool>() = true;
                return 1;
            }
        }
        0
    }
    let mut found = false;
    // SAFETY: `visit` only reads what the loader hands it and writes `found`, which outlives
    // the call; dl_iterate_phdr holds the loader's lock while it runs, so no object goes away.
    unsafe { libc::dl_iterate_phdr(Some(visit), std::ptr::addr_of_mut!(found).cast()) };
    found
}

/// The variable srun (this plugin, in `local_user_init`) puts in the environment of a step
/// that `srun --external-launcher` starts, for slurmstepd: Slurm marks such a step
/// (`SSF_EXT_LAUNCHER`, 23.11 and later), but no SPANK item tells a plugin, in slurmstepd or
/// in srun. A default steps aside for such a step. The job's user can set it too, which only
/// turns the admin's soft default off for their own steps, as `--map-by-device=none` does.
pub const EXTERNAL_LAUNCHER_MARK: &str = "MAP_BY_DEVICE_EXTERNAL_LAUNCHER";

/// Whether srun was asked to start an external launcher's step (Slurm 23.11 and later): its
/// own options (`srun_args`: srun's argv without its program and that program's arguments)
/// hold `--external-launcher` (any value; getopt also takes an unambiguous prefix, from
/// `--exte`), or its environment sets `SLURM_EXTERNAL_LAUNCHER` (srun's `opt.c` reads it as
/// the option, whatever its value: 24.11 `slurm_opt.c`, `COMMON_SRUN_BOOL_OPTION`).
pub fn external_launcher(srun_args: &[&OsStr], env_value: Option<&OsStr>) -> bool {
    const NAME: &str = "--external-launcher";
    env_value.is_some()
        || srun_args.iter().any(|a| {
            let a = a.to_string_lossy();
            let name = a.split('=').next().unwrap_or("");
            name.len() >= "--exte".len() && NAME.starts_with(name)
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_gpu_binding_refusal_names_the_spec_that_agrees_with_slurm() {
        let spec = |s: &str| Spec::parse(s).unwrap();
        // --gpus-per-task=2 with ndev=1: ndev=auto takes exactly Slurm's two GPUs per task.
        let m = gpu_binding_refusal(&spec("gpu:verbose"), "SLURMD_TRES_BIND=gres/gpu:per_task:2");
        assert!(
            m.contains("add :ndev=auto (--map-by-device=gpu:ndev=auto:verbose gives each task exactly the 2 GPUs"),
            "{m}"
        );
        assert!(m.ends_with("drop --gpu-bind or use --gpu-bind=none, or drop --map-by-device"), "{m}");
        // --ntasks-per-gpu=3: gpu:ppr=3 with GPUs per node.
        let m = gpu_binding_refusal(&spec("gpu"), "SLURMD_TRES_BIND=gpu:single:3");
        assert!(m.contains("--ntasks-per-node=3*G --map-by-device=gpu:ppr=3"), "{m}");
        // compact regroups the GPUs that --gpus-per-task gave in index order.
        let m = gpu_binding_refusal(&spec("gpu:ndev=auto:compact"), "SLURMD_TRES_BIND=gres/gpu:per_task:4");
        assert!(m.contains("drop :compact (--map-by-device=gpu:ndev=auto)"), "{m}");
        // --gpu-bind=closest, a named device, or ndev=auto already: --gpu-bind=none.
        for (s, why) in [
            ("gpu", "SLURMD_TRES_BIND=gres/gpu:closest"),
            ("65:00.0:shared", "SLURMD_TRES_BIND=gres/gpu:per_task:1"),
            ("gpu:ndev=auto", "SLURMD_TRES_BIND=gres/gpu:per_task:1"),
        ] {
            let m = gpu_binding_refusal(&spec(s), why);
            assert!(!m.contains("ndev=auto (") && !m.contains("ppr="), "{s}: {m}");
            assert!(m.contains(&format!("({why};")) && m.contains("use --gpu-bind=none"), "{s}: {m}");
        }
    }

    #[test]
    fn slurm_gpu_binding_is_seen_in_the_task() {
        let step = env(&[("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")]);
        let task = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        // Nothing changed: no binding.
        let same: &[(&str, &str)] = &[("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")];
        assert_eq!(slurm_gpu_binding(&step, 2, task(same)), None);
        // --gpu-bind=closest on a node that runs several tasks: 22.05's spelling, then 23.11's.
        let closest: &[(&str, &str)] =
            &[("SLURMD_TRES_BIND", "gpu:closest"), ("SLURM_STEP_GPUS", "0"), ("CUDA_VISIBLE_DEVICES", "0")];
        assert_eq!(slurm_gpu_binding(&step, 2, task(closest)).as_deref(), Some("SLURMD_TRES_BIND=gpu:closest"));
        let gres: &[(&str, &str)] = &[("SLURMD_TRES_BIND", "gres/gpu:closest"), ("SLURM_STEP_GPUS", "0,1")];
        assert_eq!(slurm_gpu_binding(&step, 2, task(gres)).as_deref(), Some("SLURMD_TRES_BIND=gres/gpu:closest"));
        let per_task: &[(&str, &str)] = &[("SLURMD_TRES_BIND", "gres/gpu:per_task:1")];
        assert!(slurm_gpu_binding(&step, 4, task(per_task)).is_some_and(|w| w.contains("per_task:1")));
        // --gpu-bind=none (also with verbose): no binding, whether Slurm unset the variables
        // (22.05) or kept them (24.11+).
        let none: &[(&str, &str)] = &[("SLURMD_TRES_BIND", "gpu:verbose,none")];
        assert_eq!(slurm_gpu_binding(&step, 2, task(none)), None);
        let kept: &[(&str, &str)] =
            &[("SLURMD_TRES_BIND", "gres/gpu:none"), ("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")];
        assert_eq!(slurm_gpu_binding(&step, 2, task(kept)), None);
        // A node's only task: 26.05 sets SLURMD_TRES_BIND for it too, but its GPUs are the
        // step's, so there is nothing to refuse; had Slurm narrowed them, that would show.
        let only: &[(&str, &str)] =
            &[("SLURMD_TRES_BIND", "gres/gpu:closest"), ("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")];
        assert_eq!(slurm_gpu_binding(&step, 1, task(only)), None);
        let narrowed: &[(&str, &str)] =
            &[("SLURMD_TRES_BIND", "gres/gpu:per_task:1"), ("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0")];
        assert!(slurm_gpu_binding(&step, 1, task(narrowed)).is_some_and(|w| w.contains("CUDA_VISIBLE_DEVICES")));
        // --accel-bind=g: no SLURMD_TRES_BIND, but the task's GPUs changed.
        let accel: &[(&str, &str)] = &[("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "1")];
        let why = slurm_gpu_binding(&step, 2, task(accel)).unwrap();
        assert!(why.contains("CUDA_VISIBLE_DEVICES was \"0,1\" for the step and is \"1\""), "{why}");
        // A SLURMD_TRES_BIND inherited by a nested srun (already in the step) is not this step's.
        let nested = env(&[("SLURMD_TRES_BIND", "gpu:closest")]);
        let inherited: &[(&str, &str)] = &[("SLURMD_TRES_BIND", "gpu:closest")];
        assert_eq!(slurm_gpu_binding(&nested, 2, task(inherited)), None);
    }

    #[test]
    fn the_jobs_own_cpu_binding_is_what_srun_sent() {
        // srun's variables for --cpu-bind=cores, map_cpu:1,0, none (Slurm 22.05 env.c).
        for (ty, bind) in [("cores", "quiet,cores"), ("map_cpu:", "quiet,map_cpu:1,0"), ("none", "quiet,none")] {
            let e = env(&[("SLURM_CPU_BIND_TYPE", ty), ("SLURM_CPU_BIND", bind), ("SLURM_CPU_BIND_VERBOSE", "quiet")]);
            assert_eq!(job_cpu_binding(&e), Some(format!("SLURM_CPU_BIND_TYPE={}", map_by_device::text::excerpt(ty))));
        }
        // --cpu-bind=verbose alone: TYPE is empty, nothing bound.
        let verbose = env(&[("SLURM_CPU_BIND_TYPE", ""), ("SLURM_CPU_BIND", "verbose"), ("SLURM_CPU_BIND_LIST", "")]);
        assert_eq!(job_cpu_binding(&verbose), None);
        // No request: srun sends none of them (the site's default is slurmd's, applied later).
        assert_eq!(job_cpu_binding(&env(&[("SLURM_STEP_GPUS", "0")])), None);
        // Only the environment form, as a job might set it: still the job's own.
        assert!(job_cpu_binding(&env(&[("SLURM_CPU_BIND", "v,sockets")])).is_some_and(|w| w.contains("sockets")));
    }

    #[test]
    fn gpu_bind_none_is_the_jobs_choice_on_a_node_of_several_tasks() {
        let step = env(&[("SLURM_STEP_GPUS", "0,1")]);
        let none = |k: &str| (k == "SLURMD_TRES_BIND").then(|| "gres/gpu:none".to_string());
        assert_eq!(job_gpu_bind_none(&step, 2, none).as_deref(), Some("SLURMD_TRES_BIND=gres/gpu:none"));
        assert_eq!(job_gpu_bind_none(&step, 1, none), None);
        let closest = |k: &str| (k == "SLURMD_TRES_BIND").then(|| "gpu:closest".to_string());
        assert_eq!(job_gpu_bind_none(&step, 2, closest), None);
        // Inherited from an enclosing step: not this step's.
        let nested = env(&[("SLURMD_TRES_BIND", "gres/gpu:none")]);
        assert_eq!(job_gpu_bind_none(&nested, 2, none), None);
    }

    #[test]
    fn gpu_bind_options_of_every_release() {
        assert_eq!(gpu_bind_options("gpu:verbose,closest"), ["verbose", "closest"]);
        assert_eq!(gpu_bind_options("gres/gpu:closest"), ["closest"]);
        assert_eq!(gpu_bind_options("gres/gpu:per_task:1"), ["per_task:1"]);
        assert_eq!(gpu_bind_options("gres/nic:closest+gres/gpu:none"), ["none"]);
        assert!(gpu_bind_options("gres/nic:closest").is_empty());
    }

    #[test]
    fn no_gres_plugin_in_a_test_binary() {
        assert!(!gres_gpu_loaded());
    }
}

#[cfg(test)]
mod ext_tests {
    use super::*;

    #[test]
    fn the_external_launcher_option_is_found_in_any_spelling_srun_takes() {
        fn args(list: &[&'static str]) -> Vec<&'static OsStr> {
            list.iter().map(|s| OsStr::new(*s)).collect()
        }
        for yes in [&["--external-launcher"][..], &["-N1", "--external-launcher=1"], &["--exte"], &["--external"]] {
            assert!(external_launcher(&args(yes), None), "{yes:?}");
        }
        for no in [&[][..], &["--extra=x"], &["--exclusive"], &["--ext"], &["--export=ALL"], &["external-launcher"]] {
            assert!(!external_launcher(&args(no), None), "{no:?}");
        }
        assert!(external_launcher(&[], Some(OsStr::new(""))));
    }
}
