//! `map-by-device exec`, the command a launcher starts in front of each rank: rank *i* of a
//! node gets exactly what the plugin gives local task *i* of a step of the same shape (the
//! `plan` preview, which runs the plugin's engine), on every fixture and every real export,
//! whichever launcher's variables name the rank; and it refuses as the plugin does, before
//! the program runs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a panic is the failure report.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_map-by-device");

/// A directory with a slurm.conf whose plugstack.conf does not exist: the machine's own
/// plugin settings (a default, `omp`) stay out of the comparison.
fn no_settings() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mbd-exec-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("slurm.conf"), format!("PlugStackConfig={}\n", dir.join("absent.conf").display())).unwrap();
    dir
}

/// The variables launcher `which` sets in rank `rank` of `size` on a node.
fn launcher_vars(which: usize, rank: u32, size: u32) -> Vec<(String, String)> {
    let pairs: Vec<(&str, String)> = match which % 5 {
        0 => vec![("OMPI_COMM_WORLD_LOCAL_RANK", rank.to_string()), ("OMPI_COMM_WORLD_LOCAL_SIZE", size.to_string())],
        1 => vec![("MPI_LOCALRANKID", rank.to_string()), ("MPI_LOCALNRANKS", size.to_string())],
        2 => vec![("LOCAL_RANK", rank.to_string()), ("LOCAL_WORLD_SIZE", size.to_string())],
        3 => vec![("PALS_LOCAL_RANKID", rank.to_string()), ("PALS_LOCAL_SIZE", size.to_string())],
        _ => vec![
            ("SLURM_LOCALID", rank.to_string()),
            ("SLURM_NODEID", "1".to_string()),
            ("SLURM_STEP_TASKS_PER_NODE", format!("7,{size}(x2)")),
        ],
    };
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn run(conf: &Path, args: &[&str], vars: &[(String, String)]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .env("SLURM_CONF", conf.join("slurm.conf"))
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The fixtures and, where they are next to the checkout, the real exports.
fn topologies() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies")];
    match common::reference_dir() {
        Some(d) => dirs.push(d),
        None => common::skipped("exec compared with plan on the real exports"),
    }
    let mut all = Vec::new();
    for d in dirs {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.extension().and_then(|x| x.to_str()) == Some("xml") {
                all.push(p);
            }
        }
    }
    all.sort();
    all
}

/// Compares exec's rank lines with plan's task lines (or their refusals) for one shape.
fn compare(conf: &Path, topo: &str, spec: &str, n: u32, which: usize) -> Result<(), String> {
    let ntext = n.to_string();
    let plan = run(conf, &["plan", "--topology", topo, "-n", &ntext, spec], &[]);
    let plan_out = text(&plan.stdout);
    let mut lines = plan_out.lines().filter(|l| l.starts_with("task "));
    let warnings: Vec<&str> = plan_out.lines().filter(|l| l.starts_with("warning: ")).collect();
    for rank in 0..n {
        let vars = launcher_vars(which, rank, n);
        let exec = run(conf, &["exec", spec, "--topology", topo, "--print"], &vars);
        let shape = format!("{topo} {spec} -n {n}, rank {rank} from {:?}", vars.first().map(|v| &v.0));
        if plan.status.code() != Some(0) {
            // The same refusal, in the same words.
            // The preview names its flags where the plugin names its settings (plan's preview_fix).
            let want = text(&plan.stderr)
                .replace("give the node's /proc with --proc-root DIR", "set proc_root in the plugin config")
                .replace("give the node's /sys with --sys-root DIR", "set sys_root in the plugin config");
            if exec.status.code() != Some(2) || text(&exec.stderr) != want {
                return Err(format!(
                    "{shape}: plan refused\n{}exec said ({:?})\n{}{}",
                    text(&plan.stderr),
                    exec.status.code(),
                    text(&exec.stdout),
                    text(&exec.stderr)
                ));
            }
            return Ok(());
        }
        let out = text(&exec.stdout);
        let mut got = out.lines();
        let want = lines.next().unwrap_or("(no line)");
        if exec.status.code() != Some(0) || got.next() != Some(want) {
            return Err(format!("{shape}:\nplan: {want}\nexec: {out}{}", text(&exec.stderr)));
        }
        let got_warnings: Vec<&str> = got.collect();
        if got_warnings != warnings {
            return Err(format!("{shape}: warnings differ: plan {warnings:?}, exec {got_warnings:?}"));
        }
    }
    Ok(())
}

#[test]
fn every_rank_gets_what_srun_gives_its_local_task_on_every_topology() {
    let conf = no_settings();
    let specs = ["gpu", "gpu:interleave:bind=core", "network", "gpu:ndev=auto:omp", "block:shared"];
    let topos = topologies();
    let mut shapes = 0;
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = topos
            .chunks(topos.len().div_ceil(4).max(1))
            .enumerate()
            .map(|(c, chunk)| {
                let conf = &conf;
                s.spawn(move || {
                    let mut bad = Vec::new();
                    let mut count = 0;
                    for (t, topo) in chunk.iter().enumerate() {
                        for (i, spec) in specs.iter().enumerate() {
                            for n in [1, 2, 3] {
                                count += 1;
                                if let Err(e) =
                                    compare(conf, &topo.display().to_string(), spec, n, c + t + i + n as usize)
                                {
                                    bad.push(e);
                                }
                            }
                        }
                    }
                    (count, bad)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                let (count, bad) = h.join().unwrap();
                shapes += count;
                bad
            })
            .collect()
    });
    let _ = std::fs::remove_dir_all(&conf);
    // Every fixture of a clone (24 and more), each with every spec and task count.
    assert!(
        topos.len() >= 20 && shapes == topos.len() * specs.len() * 3,
        "{shapes} shapes of {} topologies",
        topos.len()
    );
    assert!(failures.is_empty(), "{} of {shapes} shapes differ:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn a_refused_rank_does_not_run_the_program() {
    let conf = no_settings();
    let marker = conf.join("ran");
    let topo = common::fixture("no-gpu.xml").display().to_string();
    let vars = launcher_vars(0, 0, 1);
    let touch = format!("touch {}", marker.display());
    let o = run(&conf, &["exec", "gpu", "--topology", &topo, "--", "/bin/sh", "-c", &touch], &vars);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with("map-by-device: error: ") && err.contains("has no gpu devices"), "{err}");
    assert!(!marker.exists(), "the program ran after a refusal");
    // A bad spec in the plugin's words.
    let o = run(&conf, &["exec", "gpu:bogus", "--topology", &topo, "--", "/bin/true"], &vars);
    assert!(
        text(&o.stderr).starts_with("map-by-device: error: invalid --map-by-device=gpu:bogus: "),
        "{}",
        text(&o.stderr)
    );
    // No launcher's variables at all.
    let o = run(&conf, &["exec", "gpu", "--topology", &topo, "--", "/bin/true"], &[]);
    assert!(text(&o.stderr).contains("cannot tell which rank of this node this process is"), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&conf);
}

#[test]
fn the_program_replaces_exec_with_its_arguments_and_its_exit_status() {
    let conf = no_settings();
    let vars = launcher_vars(2, 0, 1);
    // Nothing to map (no spec, no job request, no default): the program runs as it is.
    let o = run(&conf, &["exec", "--", "/bin/sh", "-c", "echo \"$0 $1\"; exit 7", "a b", "c"], &vars);
    assert_eq!((o.status.code(), text(&o.stdout).as_str()), (Some(7), "a b c\n"), "{}", text(&o.stderr));
    let o = run(&conf, &["exec", "--print"], &vars);
    assert_eq!(text(&o.stdout), "runs unmapped: nothing to map: no spec, no --map-by-device, no default\n");
    // The job's own --map-by-device, as its tasks inherit it, is a hard request.
    let topo = common::fixture("no-gpu.xml").display().to_string();
    let mut job = vars.clone();
    job.push(("SLURM_SPANK__SLURM_SPANK_OPTION_map_by_device_map_by_device".into(), "gpu".into()));
    let o = run(&conf, &["exec", "--topology", &topo, "--", "/bin/true"], &job);
    assert!(text(&o.stderr).contains("has no gpu devices"), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&conf);
}

#[test]
fn inherited_gpus_narrow_the_rank_and_never_widen() {
    let conf = no_settings();
    let topo = common::fixture("e2e-2gpu-amd.xml").display().to_string();
    // The outer mapping gave this process GPU 1 only (by UUID, as the plugin writes it).
    let plan = run(&conf, &["plan", "--topology", &topo, "-n", "2", "gpu"], &[]);
    let second = text(&plan.stdout).lines().nth(1).unwrap().to_string();
    let uuid = second.split("ROCR_VISIBLE_DEVICES=").nth(1).unwrap().trim().to_string();
    let mut vars = launcher_vars(0, 0, 1);
    vars.push(("ROCR_VISIBLE_DEVICES".into(), uuid.clone()));
    let o = run(&conf, &["exec", "gpu", "--topology", &topo, "--print"], &vars);
    assert!(
        text(&o.stdout).contains(&format!("ROCR_VISIBLE_DEVICES={uuid}")),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    // Two ranks cannot share the one GPU they were given.
    let mut two = launcher_vars(0, 1, 2);
    two.push(("ROCR_VISIBLE_DEVICES".into(), uuid.clone()));
    let o = run(&conf, &["exec", "gpu", "--topology", &topo, "--print"], &two);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    // A UUID outside Slurm's GPUs for the step is refused, not used.
    vars.push(("SLURM_STEP_GPUS".into(), "0".into()));
    let o = run(&conf, &["exec", "gpu", "--topology", &topo, "--print"], &vars);
    assert!(text(&o.stderr).contains("exec never widens what Slurm gave the step"), "{}", text(&o.stderr));
    // An index list narrower than the step's GPUs cannot be placed: refused with the fix.
    let mut idx = launcher_vars(1, 0, 1);
    idx.push(("ROCR_VISIBLE_DEVICES".into(), "1".into()));
    let o = run(&conf, &["exec", "gpu", "--topology", &topo, "--print"], &idx);
    assert!(text(&o.stderr).contains("by index, which cannot be placed"), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&conf);
}
