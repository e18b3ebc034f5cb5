//! The `map-by-device` binary as users and scripts see it: its JSON formats, its refusals
//! (`map-by-device: error: ...`, exit 2, nothing on stdout) and `check` on every fixture,
//! with its exit status (0 ready, 1 not ready, 2 usage), its settings report and its look at
//! the topology cache of this machine.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a panic is the failure report.

mod common;

use common::contains_all;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_map-by-device");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn topo(name: &str) -> String {
    root().join("topologies").join(name).display().to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        // The CLI reads these only for the live machine; keep the runs independent of the caller.
        .env_remove("SLURM_CONF")
        .env_remove("ZE_FLAT_DEVICE_HIERARCHY")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs and expects success; returns stdout.
fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}\nstdout:\n{}\nstderr:\n{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// Runs and expects a refusal: exit 2, one `map-by-device: error:` line, empty stdout.
fn refused(args: &[&str]) -> String {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}\nstdout:\n{}\nstderr:\n{err}", stdout(&o));
    assert!(o.stdout.is_empty(), "{args:?}: stdout must be empty on a refusal, got:\n{}", stdout(&o));
    assert!(err.starts_with("map-by-device: error: "), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line: {err}");
    err
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default()
}

fn set(words: &[&'static str]) -> BTreeSet<&'static str> {
    words.iter().copied().collect()
}

/// A fresh temporary directory, removed on drop (see [`TempDir::trusted`]).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("mbd-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// A directory whose files the plugin (and so `check`) would read as config files and
    /// cache directories: root's, under directories only root can write (below the
    /// crate's target directory). `None`, with a line saying so, where that cannot be had
    /// (not root, or a checkout under a directory others can write).
    fn trusted(name: &str) -> Option<TempDir> {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("mbd-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        match map_by_device::trusted_fs::TrustedDir::open_or_create(&dir, 0o755) {
            Ok(_) => Some(TempDir(dir)),
            Err(e) => {
                common::skip_line(&format!("config files the plugin would trust cannot be made here ({e})"));
                let _ = std::fs::remove_dir_all(&dir);
                None
            }
        }
    }
    /// A copy of SRC (a file, or a directory and all below it) as NAME in this directory: a
    /// path the plugin's settings may name, wherever the checkout is (under /tmp, whose mode
    /// 1777 the trust rule refuses, the checkout's own files are not such a path).
    fn copy_in(&self, src: &Path, name: &str) -> String {
        fn copy(src: &Path, dst: &Path) {
            if src.is_dir() {
                std::fs::create_dir_all(dst).unwrap();
                for entry in std::fs::read_dir(src).unwrap() {
                    let entry = entry.unwrap();
                    copy(&entry.path(), &dst.join(entry.file_name()));
                }
            } else {
                std::fs::copy(src, dst).unwrap();
            }
        }
        let dst = self.0.join(name);
        copy(src, &dst);
        dst.display().to_string()
    }
    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

/// A copy of one of the installed Slurm's own plugins (task/affinity, part of every Slurm
/// build) as DIR/NAME: a real ELF file whose `plugin_version` is the installed release, for the
/// checks that read it. `None` (and a `skipped:` line) where no Slurm is installed.
fn slurm_plugin_copy(dir: &TempDir, name: &str, test: &str) -> Option<String> {
    let own = [
        "/usr/lib/x86_64-linux-gnu/slurm-wlm",
        "/usr/lib/aarch64-linux-gnu/slurm-wlm",
        "/usr/lib/x86_64-linux-gnu/slurm",
        "/usr/lib/aarch64-linux-gnu/slurm",
        "/usr/lib64/slurm",
    ]
    .iter()
    .map(|d| Path::new(d).join("task_affinity.so"))
    .find(|p| p.is_file());
    let Some(own) = own else {
        common::skip_line(&format!("{test} (no installed Slurm plugin to stand in for map_by_device.so)"));
        return None;
    };
    let path = dir.0.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(&own, &path).unwrap();
    // The discovery library beside it, as the packages install it (check only looks for it).
    std::fs::copy(&own, path.with_file_name("map_by_device_discover.so")).unwrap();
    Some(path.display().to_string())
}

#[test]
fn check_reports_a_plugin_without_its_discovery_library() {
    let Some(dir) = TempDir::trusted("discover-lib") else { return };
    let Some(plugin) =
        slurm_plugin_copy(&dir, "lib/map_by_device.so", "check_reports_a_plugin_without_its_discovery_library")
    else {
        return;
    };
    let library = Path::new(&plugin).with_file_name("map_by_device_discover.so");
    let conf = dir.file("plugstack.conf", &format!("required {plugin} topology={}\n", topo("e2e-2gpu.xml")));
    let out = stdout(&run(&["check", "--plugstack", &conf]));
    assert!(out.contains(&format!("    discovery library {}", library.display())), "{out}");
    std::fs::remove_file(&library).unwrap();
    let o = run(&["check", "--plugstack", &conf]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("the discovery library {} is missing: install it beside the plugin", library.display())),
        "{out}"
    );
    assert!(out.contains("slurmd cannot write the topology cache"), "{out}");
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// --- devices and plan -------------------------------------------------------------------

/// An object's keys in the order they were printed (the documented order).
fn ordered(v: &Value) -> Vec<&str> {
    v.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default()
}

#[test]
fn devices_json_format() {
    let out = ok(&["devices", "--topology", &topo("turin-h200.xml"), "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    assert_eq!(keys(&v), set(&["devices"]));
    let devices = v["devices"].as_array().unwrap();
    for d in devices {
        let mut want = vec!["class", "busid", "name", "osnames", "vendor", "id", "locality"];
        // A network device says its fabric, or why its class holds it back.
        want.extend(d["fabric"].as_str().map(|_| "fabric"));
        want.extend(d["held_back"].as_str().map(|_| "held_back"));
        assert_eq!(ordered(d), want, "{d}");
    }
    let fabric =
        |name: &str| devices.iter().find(|d| d["name"] == name).map(|d| (d["fabric"].clone(), d["held_back"].clone()));
    assert_eq!(fabric("mlx5_0"), Some((Value::from("rdma"), Value::Null)));
    assert_eq!(fabric("eno6"), Some((Value::Null, Value::from("plain Ethernet, no fabric"))));
    let count = |class: &str| devices.iter().filter(|d| d["class"] == class).count();
    assert_eq!((count("gpu"), count("network"), count("block")), (4, 7, 2));
    let g0 = &devices[0];
    assert_eq!(g0["class"], "gpu");
    assert_eq!(g0["busid"], "0000:06:00.0");
    assert_eq!(g0["name"], "cuda0");
    assert_eq!(g0["vendor"], "nvidia");
    assert_eq!(g0["locality"], "16-31,144-159");
    assert!(g0["id"].as_str().unwrap().starts_with("GPU-"));
    let osnames: Vec<&str> = g0["osnames"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(osnames.contains(&"nvml0") && osnames.contains(&"renderD128"), "{osnames:?}");
    // The BMC display adapter is not a GPU.
    assert!(devices.iter().all(|d| d["busid"] != "0000:53:00.0"));
    // Devices of other classes have no identity.
    assert!(devices.iter().filter(|d| d["class"] != "gpu").all(|d| d["id"].is_null()));
}

#[test]
fn devices_class_filter_and_every_fixture_loads() {
    let out = ok(&["devices", "--topology", &topo("turin-h200.xml"), "--class", "nic", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 7);
    let out = ok(&["devices", "--topology", &topo("turin-h200.xml"), "--class", "mlx5_0", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    for f in fixtures() {
        let out = ok(&["devices", "--topology", &f, "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{f}: not JSON ({e})"));
        assert!(v["devices"].is_array(), "{f}");
        let table = ok(&["devices", "--topology", &f]);
        assert!(table.starts_with("CLASS"), "{f}: {table}");
    }
}

#[test]
fn plan_json_format() {
    let out = ok(&["plan", "--topology", &topo("turin-h200.xml"), "-n", "2", "--json", "gpu:bind=core"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    assert_eq!(keys(&v), set(&["tasks", "warnings"]));
    assert_eq!(v["warnings"], Value::Array(vec![]));
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    for (i, t) in tasks.iter().enumerate() {
        assert_eq!(ordered(t), ["task", "devices", "cpus", "env"], "{t}");
        assert_eq!(t["task"], i);
        for d in t["devices"].as_array().unwrap() {
            assert_eq!(ordered(d), ["class", "busid", "name", "id"], "{d}");
        }
        let env = t["env"].as_object().unwrap();
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], t["devices"][0]["id"]);
        assert!(env["PMIX_DEVICE_ID"].as_str().unwrap().starts_with("gpu://turin-h200::nvml"));
        assert!(!env.contains_key("CUDA_DEVICE_ORDER"));
    }
    assert_eq!(tasks[0]["cpus"], "16,144");
    assert_eq!(tasks[1]["cpus"], "32,160");
    assert_eq!(tasks[0]["devices"][0]["busid"], "0000:06:00.0");

    // bind=none leaves the mask alone: cpus is null. Warnings are one string each.
    let out = ok(&["plan", "--topology", &topo("degenerate-machine.xml"), "-n", "2", "--json", "gpu"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["warnings"][0].as_str().unwrap().contains("share one locality"), "{v}");
    let out = ok(&["plan", "--topology", &topo("turin-h200.xml"), "-n", "1", "--json", "gpu:bind=none"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["tasks"][0]["cpus"].is_null(), "{v}");
}

#[test]
fn plan_with_adapters_names_each_tasks_adapter_and_who_shares_it() {
    let dgx = topo("dgx2-mlx5.xml");
    let out = ok(&["plan", "--topology", &dgx, "-n", "2", "gpu:adapters"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    contains_all(
        lines[0],
        &["gpu 0000:34:00.0 cuda0 GPU-", ", paired network 0000:35:00.0 mlx5_0 (shared with task 1); cpus 0-11,48-59;"],
    );
    contains_all(lines[1], &["(shared with task 0)", "NCCL_IB_HCA==mlx5_0", "UCX_NET_DEVICES=mlx5_0:1", ",fab://"]);
    let out = ok(&["plan", "--topology", &dgx, "-n", "2", "--json", "gpu:adapters"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let t = &v["tasks"][0];
    assert_eq!(ordered(t), ["task", "devices", "cpus", "env", "adapters"], "{t}");
    assert_eq!(ordered(&t["adapters"][0]), ["class", "busid", "name", "id", "shared_with"]);
    assert_eq!(
        (&t["adapters"][0]["name"], &t["adapters"][0]["shared_with"]),
        (&Value::from("mlx5_0"), &serde_json::json!([1]))
    );
    // No adapter near the GPUs: the plan runs, and says so on the table's warning line.
    let out = ok(&["plan", "--topology", &topo("far-hca.xml"), "-n", "2", "gpu:adapters"]);
    assert!(out.contains("\nwarning: adapters: no network adapter is nearer than the whole machine"), "{out}");
    assert!(!out.contains("NCCL_IB_HCA="), "{out}");
}

#[test]
fn plan_table_names_task_devices_cpus_and_variables() {
    let out = ok(&["plan", "--topology", &topo("turin-h200.xml"), "-n", "2", "gpu:interleave:bind=core"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("task 0 on turin-h200: gpu 0000:06:00.0 cuda0 GPU-"), "{out}");
    assert!(lines[0].contains("; cpus 16,144; CUDA_VISIBLE_DEVICES=GPU-"), "{out}");
    assert!(lines[1].contains("0000:96:00.0 cuda2") && lines[1].contains("cpus 96,224"), "{out}");
}

#[test]
fn refusals_exit_2_with_one_error_line_and_no_stdout() {
    let (turin, no_gpu, drm) = (topo("turin-h200.xml"), topo("no-gpu.xml"), topo("drm-only.xml"));
    let pvc = topo("intel-pvc.xml");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["plan", "--topology", &turin, "-n", "1", "gpu:bind=package"], "bind=package is above the locality"),
        (vec!["plan", "--topology", &turin, "-n", "1", "gpu:bogus"], "unknown qualifier \"bogus\""),
        (vec!["plan", "--topology", &turin, "-n", "1", "gpu:bind=n"], "ambiguous bind level \"n\""),
        (vec!["plan", "--topology", &turin, "-n", "1", "gpu,ndev=2"], "a comma does not separate qualifiers"),
        (vec!["plan", "--topology", &turin, "-n", "5", "gpu"], "add :shared"),
        (vec!["plan", "--topology", &turin, "-n", "1", "gpu:interleave=node"], "interleave=node"),
        (vec!["plan", "--topology", &turin, "-n", "1", "network:adapters"], "write gpu:adapters"),
        (vec!["plan", "--topology", &turin, "-n", "1", "mlx5_0:adapters"], "mlx5_0 is a network device"),
        (vec!["plan", "--topology", &no_gpu, "-n", "1", "gpu"], "has no gpu devices"),
        (vec!["plan", "--topology", &drm, "-n", "1", "gpu"], "cannot be named to its runtime"),
        (
            vec!["plan", "--topology", "/nonexistent/topo.xml", "-n", "1", "gpu"],
            "cannot read --topology /nonexistent/topo.xml",
        ),
        (vec!["plan", "--topology", &turin, "-n", "1", "--allowed-cpus", "x", "gpu"], "--allowed-cpus"),
        (vec!["devices", "--topology", &turin, "--class", "gpu:bogus"], "bogus"),
        (vec!["check", "--topology", &turin, "--plugstack", "/nonexistent/plugstack.conf"], "--plugstack"),
        (vec!["check", "--topology", &turin, "--config", "/nonexistent/map-by-device.toml"], "--config"),
        // The flags' own mistakes (issue 10): a spec that starts with '-' is still a spec,
        // nothing but a regular file is read as XML, and every CPU named is the node's.
        (vec!["plan", "--topology", &turin, "-n", "1", "-gpu"], "no device is named \"-gpu\" (did you mean gpu?)"),
        (vec!["plan", "--topology", "/dev/zero", "-n", "1", "gpu"], "not a regular file"),
        (vec!["plan", "--topology", &turin, "-n", "1", "--allowed-cpus", "", "gpu"], "--allowed-cpus is empty"),
        (
            vec!["plan", "--topology", &turin, "-n", "1", "--allowed-cpus", "0-300", "gpu"],
            "CPUs 256-300 that turin-h200",
        ),
        (
            vec!["plan", "--topology", &turin, "-n", "2", "--task-cpus", "0;999", "gpu:closest"],
            "--task-cpus names CPUs 999",
        ),
        (vec!["plan", "--topology", &turin, "-n", "1", "--env", "=x", "gpu"], "invalid --env \"=x\""),
        (vec!["plan", "--topology", &turin, "-n", "1", "-c", "0", "gpu:bind=core"], "--cpus-per-task 0"),
        (
            vec!["plan", "--topology", &turin, "-n", "1", "gpu:pe=20"],
            "asks for pe=20 cores, but the locality of cuda0 has 16",
        ),
        (vec!["plan", "--topology", &turin, "-n", "1", "gpu:pe=40:hwtcpus"], "asks for pe=40 hardware threads"),
        (
            vec!["plan", "--topology", &turin, "-n", "1", "-c", "99999", "gpu:bind=core"],
            "--cpus-per-task=99999 CPUs, that is 50000 cores",
        ),
        (
            vec!["plan", "--topology", &turin, "-n", "2", "-c", "64", "--step-gpus", "0-1", "gpu"],
            "task 0 would be bound to 32 CPUs near cuda0 (CPUs 16-31,144-159), fewer than the 64 it asked Slurm for",
        ),
        (vec!["plan", "--topology", &turin, "-n", "8", "gpu:shared:pe=16"], "task 4 would share CPUs"),
        (vec!["plan", "--topology", &turin, "-n", "80", "gpu:shared:bind=core"], "task 64 would share CPUs"),
        (
            vec!["plan", "--topology", &turin, "-n", "9", "gpu:ppr=2"],
            "9 tasks with ndev=1 and ppr=2 need 5 gpu devices",
        ),
        (vec!["plan", "--topology", &pvc, "-n", "1", "gpu"], "sets ze_hierarchy"),
    ];
    for (args, needle) in cases {
        let err = refused(&args);
        assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
    }
}

#[test]
fn usage_errors_exit_2() {
    for (args, needle) in [
        (vec!["plan", "gpu"], "--ntasks <N>; usage: map-by-device plan"),
        (vec!["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        (vec!["check", "--no-such-flag"], "'--no-such-flag'"),
    ] {
        // One line, as every refusal: the error, the usage, where to read more.
        let err = refused(&args);
        assert!(err.contains(needle) && err.contains("see --help"), "{args:?}: {err}");
    }
}

#[test]
fn short_plans_fit_a_terminal() {
    let turin = topo("turin-h200.xml");
    let long = ok(&["plan", "--topology", &turin, "-n", "4", "gpu:adapters"]);
    let short = ok(&["plan", "--short", "--topology", &turin, "-n", "4", "gpu:adapters"]);
    assert!(long.lines().any(|l| l.len() > 250), "{long}");
    assert!(short.lines().all(|l| l.len() <= 120), "{short}");
    let rows: Vec<&str> = short.lines().collect();
    assert!(rows[0].starts_with("TASK  DEVICES"), "{short}");
    // The same plan: task 2's GPU, adapter and CPUs; the UUID by name only.
    assert!(
        rows[3].starts_with("2 ") && rows[3].contains("cuda2,+mlx5_4") && rows[3].contains("96-111,224-239"),
        "{short}"
    );
    assert!(rows[3].contains("UCX_NET_DEVICES=mlx5_4:1") && !rows[3].contains("GPU-"), "{short}");
    // NCCL_IB_HCA, one list for the node, too long for a row: named in each, shown once.
    assert!(rows[1..5].iter().all(|r| r.contains(" NCCL_IB_HCA ")), "{short}");
    assert_eq!(rows[5], "every task: NCCL_IB_HCA==mlx5_0,mlx5_3,mlx5_4,mlx5_5", "{short}");
    assert!(long.contains("GPU-96c8418c"), "{long}");
    // Warnings stay.
    let w = ok(&["plan", "--short", "--topology", &turin, "-n", "1", "block"]);
    assert!(w.lines().last().unwrap().starts_with("warning: all 2 block devices"), "{w}");
    refused(&["plan", "--short", "--json", "--topology", &turin, "-n", "1", "gpu"]);
}

#[test]
fn refusals_name_the_next_keystroke() {
    let turin = topo("turin-h200.xml");
    for (spec, hint) in [
        ("gpu:ndev2", "(did you mean ndev=2?)"),
        ("gpu:shard", "(did you mean shared?)"),
        ("gpu:bind=cores", "(did you mean core?)"),
        ("gpus", "(did you mean gpu?)"),
        ("mlx6_0", "; did you mean mlx5_0?"),
        ("gpu,shared", "write them with ':' (gpu:shared)"),
        // Issue 24: the other separators, and ndev=0 (most often meant as "all of them").
        ("gpu;shared", "a semicolon does not separate qualifiers, write them with ':' (gpu:shared)"),
        ("gpu shared", "a blank does not separate qualifiers, write them with ':' (gpu:shared)"),
        ("gpu:ndev=0", "(did you mean ndev=auto?)"),
    ] {
        let err = refused(&["plan", "--topology", &turin, "-n", "1", spec]);
        assert!(err.contains(hint), "{spec}: {err}");
    }
    // A name that matches nothing lists the class words and the node's devices.
    let err = refused(&["plan", "--topology", &turin, "-n", "1", "bogus"]);
    assert!(err.contains("classes: gpu, network, nic, fabric, openfabrics, block; devices here: cuda0"), "{err}");
    // socket is package.
    assert_eq!(
        ok(&["plan", "--topology", &turin, "-n", "2", "gpu:ndev=2:bind=socket"]),
        ok(&["plan", "--topology", &turin, "-n", "2", "gpu:ndev=2:bind=package"])
    );
    // devices --class with a name that is no device: the same refusal, not an empty table.
    let err = refused(&["devices", "--topology", &turin, "--class", "gpus"]);
    assert!(err.contains("did you mean gpu?"), "{err}");
    // Every GPU that cannot be named is listed, not only the first.
    let err = refused(&["plan", "--topology", &topo("drm-only.xml"), "-n", "2", "gpu"]);
    assert!(
        err.contains("renderD128 at 0000:17:00.0") && err.contains("holds for renderD129 at 0000:ca:00.0"),
        "{err}"
    );
    // The preview says which of its flags reads the driver files; the plugin's words (its
    // config file's proc_root) stay for check, which checks the plugin's settings.
    contains_all(&err, &["load the NVIDIA kernel driver and give the node's /proc with --proc-root DIR so that"]);
    assert!(!err.contains("plugin config"), "{err}");
    let check = stdout(&run(&["check", "--topology", &topo("drm-only.xml")]));
    assert!(check.contains("set proc_root in the plugin config"), "{check}");
    // plan --help carries the grammar in short.
    let help = ok(&["plan", "--help"]);
    assert!(help.contains("SPEC: TARGET[:QUALIFIER[=VALUE]]...") && help.contains("map-by-device(8)"), "{help}");
}

/// Issue 24: what a user coming from Open MPI types, and the mistakes that used to pass
/// silently, each refused in one line with the spelling that does it.
#[test]
fn open_mpi_spellings_and_silent_mistakes_are_refused_with_the_fix() {
    let turin = topo("turin-h200.xml");
    for (args, needle) in [
        (
            vec!["-n", "4", "ppr:2:gpu"],
            "\"ppr:2:gpu\" is Open MPI's --map-by spelling, not a --map-by-device spec: write gpu:ppr=2",
        ),
        (vec!["-n", "2", "ppr:1:package"], "--ntasks-per-socket=1"),
        (vec!["-n", "2", "device=gpu"], "write gpu"),
        (vec!["-n", "2", "--map-by", "ppr:1:package"], "--map-by is Open MPI's option; plan previews --map-by-device"),
        (vec!["-n", "2", "--map-by", "ppr:1:package", "gpu"], "--ntasks-per-socket=1"),
        (vec!["-n", "4", "--map-by", "ppr:2:gpu"], "write gpu:ppr=2"),
        (
            vec!["--ntasks-per-node", "2", "gpu"],
            "--ntasks-per-node is Slurm's option; plan previews one node: write -n 2",
        ),
        (vec!["-n", "0", "gpu"], "-n 0: a step has at least one task on the node"),
    ] {
        let mut all = vec!["plan", "--topology", &turin];
        all.extend(args.iter().copied());
        let err = refused(&all);
        assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
    }
    // The preview names its own flag, not the plugin's topology= setting.
    let err = refused(&["plan", "--topology", "/nonexistent/topo.xml", "-n", "1", "gpu"]);
    assert!(err.contains("cannot read --topology /nonexistent/topo.xml") && !err.contains("topology="), "{err}");
    let err = refused(&["plan", "--topology", &turin, "--step-gpus", "7", "-n", "1", "gpu"]);
    assert!(err.contains("--step-gpus names GPU index 7") && !err.contains("topology="), "{err}");
}

/// Issue 24: a plan that leaves some of the step's GPUs idle says so, with the spec that
/// uses them all; one that uses them all says nothing.
#[test]
fn idle_step_gpus_and_scattered_groups_are_said_with_the_spec_that_fixes_them() {
    let turin = topo("turin-h200.xml");
    let out = ok(&["plan", "--short", "--topology", &turin, "--step-gpus", "0-3", "-n", "2", "gpu"]);
    assert!(
        out.contains("warning: the step has 4 GPUs on turin-h200, but the plan for its 2 tasks with ndev=1 uses 2; idle: cuda2, cuda3; write --map-by-device=gpu:ndev=auto"),
        "{out}"
    );
    for spec in ["gpu:ndev=auto", "gpu:ndev=2"] {
        let out = ok(&["plan", "--short", "--topology", &turin, "--step-gpus", "0-3", "-n", "2", spec]);
        assert!(!out.contains("warning"), "{spec}: {out}");
    }
    // Without a GPU allocation the node's GPUs are not the step's: no warning.
    assert!(!ok(&["plan", "--short", "--topology", &turin, "-n", "2", "gpu"]).contains("warning"));
    // 8 GCDs, 2 tasks of 4 in PCI order: NUMA domains 1 and 3; compact gives neighbours.
    let mi = topo("amd-mi250x.xml");
    let out = ok(&["plan", "--short", "--topology", &mi, "-n", "2", "gpu:ndev=4"]);
    assert!(
        out.contains("warning: task 0's 4 gpu devices lie in NUMA domains 1 and 3, which are not neighbours")
            && out.contains("--map-by-device=gpu:ndev=4:compact"),
        "{out}"
    );
    for spec in ["gpu:ndev=4:compact", "gpu:ndev=2", "gpu:ndev=auto:compact"] {
        let out = ok(&["plan", "--short", "--topology", &mi, "-n", "2", spec]);
        assert!(!out.contains("not neighbours"), "{spec}: {out}");
    }
}

/// Issue 35: `plan --as-default` applies a spec as the plugin applies the admin's default. A
/// default never gives a task fewer devices than the step's divided by its tasks: a one-task
/// step (a launcher's daemon) gets every GPU and the CPUs of all of them, an even share is
/// given with ndev=auto, and where no share can be given the default steps aside (exit 0, the
/// step runs unmapped). The same spec given as the job's own means what it says.
#[test]
fn plan_as_default_gives_every_task_its_share_or_steps_aside() {
    let turin = topo("turin-h200.xml");
    let plan = |extra: &[&str]| {
        let mut args = vec!["plan", "--topology", turin.as_str()];
        args.extend_from_slice(extra);
        ok(&args)
    };
    let gpus = |line: &str| line.split(" cuda").count() - 1;
    // One task: every GPU of the node, and the CPUs next to all of them.
    let out = plan(&["--as-default", "-n", "1", "gpu"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"as the default: gpu:ndev=auto"), "{out}");
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(gpus(lines[1]), 4, "{out}");
    assert!(lines[1].contains("; cpus 16-47,96-127,144-175,224-255; "), "{out}");
    assert_eq!(
        lines[1].split("CUDA_VISIBLE_DEVICES=").nth(1).map(|v| v.split(' ').next().unwrap_or("").split(',').count()),
        Some(4),
        "{out}"
    );
    // ... which the job's own spec does not get: it means one GPU.
    let own = plan(&["-n", "1", "gpu"]);
    assert!(!own.contains("as the default") && gpus(&own) == 1, "{own}");
    // A binding finer than the locality would crowd a launcher's ranks onto one core.
    let out = plan(&["--as-default", "-n", "1", "gpu:bind=core"]);
    assert!(out.starts_with("as the default: gpu:ndev=auto:bind=locality\n"), "{out}");
    assert!(out.contains("; cpus 0-255; ") && gpus(&out) == 4, "{out}");
    let out = plan(&["--as-default", "-n", "1", "gpu:pe=2"]);
    assert!(out.starts_with("as the default: gpu:ndev=auto:bind=locality\n") && gpus(&out) == 4, "{out}");
    // Two tasks on four GPUs: two each; four tasks: the default as written.
    let out = plan(&["--as-default", "--step-gpus", "0-3", "-n", "2", "gpu"]);
    assert!(out.starts_with("as the default: gpu:ndev=auto\n"), "{out}");
    assert!(out.lines().skip(1).all(|l| gpus(l) == 2) && out.lines().count() == 3, "{out}");
    let out = plan(&["--as-default", "-n", "4", "gpu"]);
    assert!(out.starts_with("as the default: gpu\n"), "{out}");
    assert!(out.lines().skip(1).all(|l| gpus(l) == 1) && out.lines().count() == 5, "{out}");
    // No share to give: the default steps aside, in the plugin's words.
    let aside = |extra: &[&str], want: &str| {
        let out = plan(extra);
        assert_eq!(out, format!("{want}: without the default every task sees them all\n"), "{extra:?}");
    };
    aside(
        &["--as-default", "-n", "3", "gpu"],
        "the default gpu steps aside, so the step runs unmapped: it would leave 1 of the step's 4 gpu devices on \
         turin-h200 to no task (cuda3; 4 do not divide among 3 tasks)",
    );
    aside(
        &["--as-default", "--allowed-cpus", "16-47,144-175", "-n", "1", "gpu"],
        "the default gpu steps aside, so the step runs unmapped: it would leave 2 of the step's 4 gpu devices on \
         turin-h200 to no task (cuda2, cuda3; they are far from the step's CPUs)",
    );
    aside(
        &["--as-default", "-n", "1", "gpu:closest"],
        "the default gpu:closest steps aside, so the step runs unmapped: it would leave 3 of the step's 4 gpu \
         devices on turin-h200 to no task (cuda1, cuda2, cuda3; closest and ppr= take no share)",
    );
    // A plan the engine refuses is still a refusal (the plugin logs it and runs unmapped).
    let err = refused(&["plan", "--topology", &turin, "--as-default", "-n", "5", "gpu"]);
    assert!(err.contains("5 tasks with ndev=1 need 5 gpu devices"), "{err}");
}

// --- check ------------------------------------------------------------------------------

/// Every fixture XML in `topologies/`.
#[test]
fn svg_pictures_are_written_beside_the_usual_output() {
    let dir = TempDir::new("svg");
    let file = |name: &str| dir.0.join(name).display().to_string();
    let turin = topo("turin-h200.xml");
    // plan: the table on stdout as without --svg, and the picture in the file.
    let table = ok(&["plan", "--topology", &turin, "-n", "2", "gpu"]);
    let with = ok(&["plan", "--topology", &turin, "-n", "2", "gpu", "--svg", &file("plan.svg")]);
    assert_eq!(table, with);
    let svg = std::fs::read_to_string(file("plan.svg")).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("data-view=\"plan\"") && svg.contains("data-task=\"1\""));
    // A refused plan: exit 2, the one error line, and the picture of the node with the refusal.
    let err = refused(&["plan", "--topology", &turin, "-n", "5", "gpu", "--svg", &file("refused.svg")]);
    let svg = std::fs::read_to_string(file("refused.svg")).unwrap();
    let message = err.trim_end().trim_start_matches("map-by-device: error: ");
    assert!(svg.contains("class=\"refusal\"") && svg.contains(message), "{message}");
    // devices, filtered like the table.
    ok(&["devices", "--topology", &turin, "--class", "gpu", "--svg", &file("gpus.svg")]);
    let svg = std::fs::read_to_string(file("gpus.svg")).unwrap();
    assert_eq!(svg.matches("class=\"device\"").count(), 4);
    // A file that cannot be written is a usage error naming it.
    let err = refused(&["devices", "--topology", &turin, "--svg", "/nonexistent-dir/x.svg"]);
    assert!(err.contains("cannot write --svg /nonexistent-dir/x.svg"), "{err}");
}

/// `--svg` as root writes into `/tmp` too (issue 27): a symbolic link planted at the path, a
/// dangling one, and another user's file there are refused and left as they were; a file of
/// the caller's own is replaced by a new file (rename), and no temporary file is left behind.
#[test]
fn svg_never_writes_through_a_link_or_into_someone_elses_file() {
    use std::os::unix::fs::MetadataExt;
    let dir = TempDir::new("svg-links");
    let path = |name: &str| dir.0.join(name);
    let turin = topo("turin-h200.xml");
    let svg_to = |name: &str| {
        let file = path(name).display().to_string();
        devices_svg_args(&turin, &file)
    };
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    std::fs::write(path("precious"), "precious").unwrap();
    std::os::unix::fs::symlink(path("precious"), path("link.svg")).unwrap();
    std::os::unix::fs::symlink(path("absent"), path("dangling.svg")).unwrap();
    for name in ["link.svg", "dangling.svg"] {
        let err = refused(&svg_to(name).iter().map(String::as_str).collect::<Vec<_>>());
        assert!(err.contains(&format!("cannot write --svg {}: it is a symbolic link", path(name).display())), "{err}");
        assert!(std::fs::symlink_metadata(path(name)).unwrap().file_type().is_symlink());
    }
    assert_eq!(std::fs::read_to_string(path("precious")).unwrap(), "precious");
    assert!(!path("absent").exists());
    // The caller's own file: replaced by a new one, not rewritten in place.
    std::fs::write(path("mine.svg"), "old").unwrap();
    let before = std::fs::metadata(path("mine.svg")).unwrap().ino();
    ok(&svg_to("mine.svg").iter().map(String::as_str).collect::<Vec<_>>());
    assert!(std::fs::read_to_string(path("mine.svg")).unwrap().starts_with("<?xml"));
    assert_ne!(std::fs::metadata(path("mine.svg")).unwrap().ino(), before);
    // Another user's file (only root can make one to test with).
    if root {
        std::fs::write(path("theirs.svg"), "theirs").unwrap();
        std::os::unix::fs::chown(path("theirs.svg"), Some(65534), Some(65534)).unwrap();
        let err = refused(&svg_to("theirs.svg").iter().map(String::as_str).collect::<Vec<_>>());
        assert!(err.contains("the file there belongs to user 65534: not replaced"), "{err}");
        assert_eq!(std::fs::read_to_string(path("theirs.svg")).unwrap(), "theirs");
    } else {
        common::skip_line("another user's file at --svg's path: only root can make one here");
    }
    let mut left: Vec<String> =
        std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    let mut expected = vec!["dangling.svg", "link.svg", "mine.svg", "precious"];
    if root {
        expected.push("theirs.svg");
    }
    assert_eq!(left, expected);
}

/// `devices --topology TOPOLOGY --svg FILE`, as arguments.
fn devices_svg_args(topology: &str, file: &str) -> Vec<String> {
    ["devices", "--topology", topology, "--svg", file].map(String::from).to_vec()
}

fn fixtures() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root().join("topologies"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .map(|p| p.display().to_string())
        .collect();
    v.sort();
    assert!(v.len() >= 7, "fixtures missing: {v:?}");
    v
}

/// The expected `check --topology` status of the fixtures, and why.
const CHECK_STATUS: [(&str, i32, &str); 14] = [
    ("turin-h200.xml", 0, "NVML identities"),
    ("uneven-3plus1.xml", 0, "NVML identities"),
    ("degenerate-one-complex.xml", 0, "NVML identities"),
    ("degenerate-machine.xml", 0, "NVML identities"),
    ("amd-mi250x.xml", 0, "ROCm SMI identities"),
    ("omnipath.xml", 0, "no GPU"),
    ("no-gpu.xml", 0, "no GPU"),
    ("synthetic-64gpu.xml", 0, "NVML identities"),
    ("e2e-2gpu.xml", 0, "NVML identities"),
    ("far-hca.xml", 0, "NVML identities"),
    ("dgx2-mlx5.xml", 0, "NVML identities"),
    ("intel-pvc.xml", 1, "Level Zero ordinals without a hierarchy model"),
    ("drm-only.xml", 1, "DRM-only GPUs without driver files"),
    ("e2e-2gpu-drm.xml", 1, "DRM-only GPUs without driver files"),
];

#[test]
fn check_every_fixture() {
    for f in fixtures() {
        let name = Path::new(&f).file_name().unwrap().to_string_lossy().into_owned();
        let o = run(&["check", "--topology", &f]);
        let out = stdout(&o);
        let code = o.status.code().unwrap_or(-1);
        assert!(o.stderr.is_empty(), "{name}: {}", stderr(&o));
        assert!(out.contains("Devices, in the order tasks are mapped to them"), "{name}:\n{out}");
        assert!(out.contains("Plugin configuration:\n  not examined"), "{name}:\n{out}");
        match CHECK_STATUS.iter().find(|(n, _, _)| *n == name) {
            Some((_, want, why)) => assert_eq!(code, *want, "{name} ({why}):\n{out}"),
            // A fixture added after this table: it must still give a verdict.
            None => assert!(code == 0 || code == 1, "{name}: exit {code}\n{out}"),
        }
        if code == 0 {
            assert!(out.ends_with("Ready: yes\n"), "{name}:\n{out}");
        } else {
            assert!(out.contains("\nReady: no, "), "{name}:\n{out}");
        }
    }
}

#[test]
fn check_names_gpus_and_their_source() {
    let out = ok(&["check", "--topology", &topo("turin-h200.xml")]);
    assert!(out.contains("  gpu: 4\n"), "{out}");
    assert!(out.contains("  network: 7\n"), "{out}");
    assert!(out.contains("  block: 2\n"), "{out}");
    assert!(out.contains("0000:06:00.0 cuda0        GPU-"), "{out}");
    assert!(out.contains("(from hwloc: NVIDIAUUID of nvml0)"), "{out}");
    assert!(out.contains("not a compute GPU") && out.contains("0000:53:00.0 card0"), "{out}");
    assert!(out.contains("sets NCCL_IB_HCA PMIX_DEVICE_ID UCX_NET_DEVICES"), "{out}");

    // The DRM-only node: refused with the engine's words and the fix ...
    let o = run(&["check", "--topology", &topo("drm-only.xml")]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("renderD128   cannot be named"), "{out}");
    assert!(out.contains("install an hwloc built with its NVML backend"), "{out}");
    assert!(out.contains("Ready: no, 2 problems:"), "{out}");

    // ... and named from the NVIDIA driver's files once they are there.
    let proc_root = root().join("topologies/drivers/nvidia/proc");
    let out = ok(&["check", "--topology", &topo("drm-only.xml"), "--proc-root", &proc_root.display().to_string()]);
    assert!(out.contains("(from driver file ") && out.contains("0000:17:00.0/information)"), "{out}");
    assert!(out.ends_with("Ready: yes\n"), "{out}");

    // Level Zero: ready once the hierarchy model is known.
    let o = run(&["check", "--topology", &topo("intel-pvc.xml")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("set ze_hierarchy"), "{}", stdout(&o));
    let out = ok(&["check", "--topology", &topo("intel-pvc.xml"), "--ze-hierarchy", "FLAT"]);
    assert!(out.contains("ze:0.0 (from hwloc: LevelZeroDriverDeviceIndex of ze0)"), "{out}");
}

#[test]
fn check_with_a_config_file() {
    let Some(dir) = TempDir::trusted("config") else { return };
    let turin = topo("turin-h200.xml");

    // A default that maps: shown for one task.
    let c = dir.file("good.toml", "default = \"gpu:bind=core\"\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    assert!(out.contains("settings from config file"), "{out}");
    assert!(out.contains("    default           gpu:bind=core\n"), "{out}");
    // ... every GPU and their CPUs to a one-task step (a launcher's daemon), never one core.
    assert!(
        out.contains(
            "Default \"gpu:bind=core\" on this node, for a one-task step (such as a launcher's daemon), applied as \
             \"gpu:ndev=auto:bind=locality\": a default never gives a task fewer devices than the step's divided by \
             its tasks:"
        ),
        "{out}"
    );
    assert!(out.contains("task 0 on turin-h200: gpu 0000:06:00.0 cuda0 GPU-"), "{out}");
    assert!(out.contains(" cuda3 GPU-"), "{out}");
    assert!(out.contains("cpus 0-255"), "{out}");
    // ... and for a step of one task per GPU and one more: what jobs of that size get.
    contains_all(
        &out,
        &[
            "and for larger steps on the whole node:\n",
            "  4 tasks (one per gpu device here): maps, each task its own device: cuda0, cuda1, cuda2, cuda3\n",
            "  5 tasks (one more than the gpu devices here): refused, so such jobs run unmapped: 5 tasks with ndev=1 \
             need 5 gpu devices, but turin-h200 has 4 to give: add :shared",
        ],
    );
    // A shared default: the task too many shares, and the report says with whom.
    let c = dir.file("shared.toml", "default = \"gpu:shared\"\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    contains_all(
        &out,
        &["  5 tasks (one more than the gpu devices here): maps, tasks share devices: cuda0 (tasks 0, 4)\n"],
    );
    // A named device: one task is the one-task plan; two are one more than it names.
    let c = dir.file("named.toml", "default = \"mlx5_0\"\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    contains_all(&out, &["  2 tasks (more tasks than the one device it names): refused, so such jobs run unmapped: "]);
    assert!(!out.contains("  1 tasks"), "{out}");
    // 64 GPUs: the list of devices is shortened, not 64 names long.
    let c = dir.file("wide.toml", "default = \"gpu\"\n");
    let out = ok(&["check", "--topology", &topo("synthetic-64gpu.xml"), "--config", &c]);
    contains_all(&out, &["  64 tasks (one per gpu device here): maps, each task its own device: cuda0, cuda1, cuda2, cuda3, cuda4, cuda5, ..., cuda63\n"]);

    // A default the engine refuses here: not ready, with the engine's message.
    let c = dir.file("ceiling.toml", "default = \"gpu:bind=package\"\n");
    let o = run(&["check", "--topology", &turin, "--config", &c]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(
            "the default \"gpu:bind=package\" does not map a step of 4 tasks (one per gpu device here), so such jobs \
             run unmapped: bind=package is above"
        ),
        "{}",
        stdout(&o)
    );

    // A default with no device of its class here is soft: ready, with a note.
    let c = dir.file("soft.toml", "default = \"gpu\"\n");
    let out = ok(&["check", "--topology", &topo("no-gpu.xml"), "--config", &c]);
    assert!(out.contains("does not apply on this node (jobs run unmapped)"), "{out}");
    assert!(out.contains("an admin default is soft"), "{out}");

    // default = "none" is no default.
    let c = dir.file("none.toml", "default = \"none\"\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    assert!(out.contains("Default: none"), "{out}");

    // A broken file: not ready, with the config error (the file and the key).
    let c = dir.file("bad.toml", "defualt = \"gpu\"\n");
    let o = run(&["check", "--topology", &turin, "--config", &c]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("configuration error") && out.contains("unknown key \"defualt\""), "{out}");
    assert!(out.contains(&c), "{out}");

    // The config's topology= and proc_root are used when no flag overrides them.
    let c = dir.file(
        "drm.toml",
        &format!(
            "topology = \"{}\"\nproc_root = \"{}\"\ndefault = \"gpu\"\n",
            dir.copy_in(Path::new(&topo("drm-only.xml")), "drm-only.xml"),
            dir.copy_in(&root().join("topologies/drivers/nvidia/proc"), "proc")
        ),
    );
    let out = ok(&["check", "--config", &c]);
    assert!(out.contains("drm-only.xml (topology= of the plugin's settings)"), "{out}");
    assert!(out.contains("(from driver file "), "{out}");
}

/// Issue 35: `check` applies the default as the plugin does; one that takes no share steps
/// aside for a one-task step (a launcher's daemon), and says why, while a step of one task
/// per GPU is still mapped.
#[test]
fn check_says_when_the_default_steps_aside_for_a_one_task_step() {
    let Some(dir) = TempDir::trusted("aside") else { return };
    let turin = topo("turin-h200.xml");
    let c = dir.file("closest.toml", "default = \"gpu:closest\"\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    assert!(
        out.contains(
            "Default \"gpu:closest\" on this node, for a one-task step: steps aside, it would leave 3 of the step's 4 \
             gpu devices on turin-h200 to no task (cuda1, cuda2, cuda3; closest and ppr= take no share): without the \
             default every task sees them all\n"
        ),
        "{out}"
    );
    contains_all(
        &out,
        &["  4 tasks (one per gpu device here): maps, each task its own device: cuda0, cuda1, cuda2, cuda3\n"],
    );
}

#[test]
fn check_reads_plugstack_lines_and_includes() {
    let Some(dir) = TempDir::trusted("plugstack") else { return };
    let turin = topo("turin-h200.xml");
    let Some(plugin) = slurm_plugin_copy(&dir, "lib/map_by_device.so", "check_reads_plugstack_lines_and_includes")
    else {
        return;
    };

    // The packaged layout: plugstack.conf includes plugstack.conf.d/*.conf.
    let main = dir.file("plugstack.conf", "# site plugins\ninclude plugstack.conf.d/*.conf\n");
    dir.file("plugstack.conf.d/other.conf", "optional /usr/lib/slurm/spank_other.so\n");
    dir.file("plugstack.conf.d/map-by-device.conf.disabled", &format!("required {plugin} default=bogus:x\n"));
    let o = run(&["check", "--topology", &turin, "--plugstack", &main]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("the plugin is not enabled"), "{out}");
    assert!(out.contains("plugstack.conf.d/other.conf"), "files read are listed: {out}");

    dir.file("plugstack.conf.d/map-by-device.conf", &format!("# enabled\nrequired {plugin} default=gpu:verbose\n"));
    let out = ok(&["check", "--topology", &turin, "--plugstack", &main]);
    assert!(
        out.contains("map-by-device.conf line 2: required ") && out.contains("(present) default=gpu:verbose"),
        "{out}"
    );
    assert!(out.contains("Default \"gpu:verbose\" on this node"), "{out}");

    // --config replaces the line's config= (and the line's default= still wins over the file).
    let c = dir.file("c.toml", "default = \"network\"\nze_hierarchy = \"FLAT\"\n");
    let out = ok(&["check", "--topology", &turin, "--plugstack", &main, "--config", &c]);
    assert!(out.contains("with config file ") && out.contains("    ze_hierarchy      FLAT\n"), "{out}");
    assert!(out.contains("    default           gpu:verbose\n"), "{out}");

    // A missing plugin file, a bad argument, a second line, a line Slurm cannot read.
    let bad = dir.file(
        "bad.conf",
        "optional /nonexistent/map_by_device.so topology=relative.xml\nrequired /nonexistent/map_by_device.so\nrequired\n",
    );
    let o = run(&["check", "--topology", &turin, "--plugstack", &bad]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    contains_all(
        &out,
        &[
            "/nonexistent/map_by_device.so (MISSING)",
            "which does not exist: Slurm skips it (optional)",
            "which does not exist: every srun on this node fails (required)",
            "the plugin is loaded 2 times",
            "\"relative.xml\"",
            "not absolute",
            "line 3: Slurm cannot read \"required\"",
            "bad.conf line 1 loads the plugin as optional: Slurm ignores the failures of an optional plugin",
        ],
    );
}

/// The release check reads the plugin file's plugin_version and the node's Slurm: the same
/// release is fine, another major.minor is refused with both versions and the fix, and a file
/// that is no plugin is refused too.
#[test]
fn check_names_the_release_and_refuses_another() {
    let dir = TempDir::new("release");
    let turin = topo("turin-h200.xml");
    let Some(plugin) = slurm_plugin_copy(&dir, "lib/map_by_device.so", "check_names_the_release_and_refuses_another")
    else {
        return;
    };
    let conf = dir.file("plugstack.conf", &format!("required {plugin}\n"));
    let bytes = std::fs::read(&plugin).unwrap();
    let installed = map_by_device::slurm_release::exported_u32(&bytes, "plugin_version").unwrap();
    let series = format!("{}.{:02}", installed >> 16, (installed >> 8) & 0xff);
    let out = stdout(&run(&["check", "--topology", &turin, "--plugstack", &conf]));
    assert!(out.contains(&format!("    built for Slurm {series} (")), "{out}");
    if !out.contains("  Slurm on this node: ") {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"skipped: the release mismatch check (no slurmd here)\n",
        );
        return;
    }
    assert!(!out.contains("Incompatible"), "{out}");
    // The same file declaring the release before (major.minor - 1, or 21.08): refused.
    let other = if installed & 0xff00 >= 0x100 { installed - 0x100 } else { 0x150800 };
    let at = map_by_device::slurm_release::symbol_offset(&bytes, "plugin_version").unwrap().unwrap();
    let mut patched = bytes.clone();
    patched[at..at + 4].copy_from_slice(&other.to_le_bytes());
    std::fs::write(&plugin, &patched).unwrap();
    let o = run(&["check", "--topology", &turin, "--plugstack", &conf]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    let other_series = format!("{}.{:02}", other >> 16, (other >> 8) & 0xff);
    contains_all(
        &out,
        &[
            format!("was built for Slurm {other_series}"),
            format!("but this node runs Slurm {series}."),
            "): Slurm refuses to load it (\"Incompatible Slurm plugin version\")".to_string(),
            "(slurmd -V".to_string(),
            format!("install the map-by-device package built for Slurm {series}"),
        ],
    );
    // Not an ELF file at all.
    std::fs::write(&plugin, "not really a plugin").unwrap();
    let out = stdout(&run(&["check", "--topology", &turin, "--plugstack", &conf]));
    assert!(out.contains("which is not a plugin Slurm can load (not an ELF file)"), "{out}");
}

/// `check` asks the installed Slurm's slurmd for the node's release by its path: a `slurmd`
/// earlier in root's PATH is never run (issue 27).
#[test]
fn check_runs_the_installed_slurmd_not_one_on_path() {
    let dir = TempDir::new("slurmd-path");
    let test = "check_runs_the_installed_slurmd_not_one_on_path";
    let Some(plugin) = slurm_plugin_copy(&dir, "lib/map_by_device.so", test) else { return };
    let conf = dir.file("plugstack.conf", &format!("required {plugin}\n"));
    let marker = dir.0.join("ran");
    let fake = dir.file("bin/slurmd", &format!("#!/bin/sh\ntouch '{}'\necho 'slurm 99.99.0'\n", marker.display()));
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", dir.0.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let o = Command::new(BIN)
        .args(["check", "--topology", &topo("turin-h200.xml"), "--plugstack", &conf])
        .env("PATH", path)
        .env_remove("SLURM_CONF")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(!marker.exists() && !out.contains("99.99"), "the slurmd on PATH ran:\n{out}");
}

/// On this machine `check` reads slurm.conf's GresTypes (SLURM_CONF, as Slurm's commands do)
/// and says which rule gives a step without SLURM_STEP_GPUS its GPUs; `plan --step-gpus none`
/// previews such a step.
#[test]
fn check_says_the_step_gpus_rule_from_gres_types() {
    let dir = TempDir::new("grestypes");
    let c = dir.file("c.toml", "cache = false\n");
    for (line, says) in [
        ("GresTypes=gpu", "slurm.conf's GresTypes names gpu, so Slurm's gres/gpu runs in every step"),
        ("GresTypes=mps", "slurm.conf's GresTypes names no gpu, so Slurm does not manage GPUs"),
    ] {
        let conf = dir.file("slurm.conf", &format!("ClusterName=c\n{line}\n"));
        let o = Command::new(BIN).args(["check", "--config", &c]).env("SLURM_CONF", &conf).output().unwrap();
        let out = stdout(&o);
        assert!(out.contains(&format!("    require_step_gpus (unset): {says}")), "{line}:\n{out}");
    }
    let turin = topo("turin-h200.xml");
    let e = refused(&["plan", "--topology", &turin, "-n", "1", "--step-gpus", "none", "gpu"]);
    assert!(e.contains("the step has no GPUs on turin-h200") && e.contains("--gpus-per-node=N"), "{e}");
    assert!(ok(&["plan", "--topology", &turin, "-n", "1", "--step-gpus", "none", "network"]).contains("mlx5_0"));
}

#[test]
fn check_reports_cache_and_step_gpu_settings() {
    let Some(dir) = TempDir::trusted("settings") else { return };
    let turin = topo("turin-h200.xml");

    // Defaults: the cache on in /run/map-by-device, require_step_gpus unset: the rule follows
    // slurm.conf's GresTypes, which --topology (another node) does not read, nor its cache.
    let c = dir.file("defaults.toml", "default = \"gpu\"\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    contains_all(
        &out,
        &[
            "    proc_root         (unset: /proc, the node's own)\n",
            "    sys_root          (unset: /sys, the node's own)\n",
            "    cache             true (default): the steps read the topology slurmd discovered at its start\n",
            "    cache_dir         /run/map-by-device (default)\n",
            "    require_step_gpus (unset): where Slurm's gres/gpu runs (slurm.conf's GresTypes names gpu) a step \
             without SLURM_STEP_GPUS has no GPU on the node; elsewhere every GPU of the node is a step's\n",
        ],
    );
    assert!(!out.contains("topology cache /"), "no look at this machine's cache with --topology:\n{out}");

    // Every key set: shown as set; no GRES note once require_step_gpus is on.
    let c = dir.file("set.toml", "cache = false\ncache_dir = \"/run/mbd\"\nrequire_step_gpus = true\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    contains_all(
        &out,
        &[
            "    cache             false: every step discovers the node itself (about 15 ms per step)\n",
            "    cache_dir         /run/mbd (not used)\n",
            "    require_step_gpus true: a step without SLURM_STEP_GPUS has no GPU here (a job's GPU mapping is \
             refused)\n",
        ],
    );
    let c = dir.file("unset.toml", "require_step_gpus = false\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    assert!(
        out.contains("    require_step_gpus false: a step without SLURM_STEP_GPUS maps over every GPU of the node\n"),
        "{out}"
    );

    // With topology= the steps read the XML: no cache, and no driver files unless configured.
    let xml = dir.copy_in(Path::new(&turin), "turin-h200.xml");
    let c = dir.file("xml.toml", &format!("topology = \"{xml}\"\ncache = true\n"));
    let out = ok(&["check", "--config", &c]);
    contains_all(
        &out,
        &[
            "    proc_root         (unset: no driver file is read with topology=)\n",
            "    cache             not used: the steps read topology= instead\n",
            "    cache_dir         /run/map-by-device (default) (not used)\n",
        ],
    );
    assert!(!out.contains("topology cache /"), "{out}");

    // A wrong type is a configuration error naming the key.
    let c = dir.file("type.toml", "require_step_gpus = \"yes\"\n");
    let o = run(&["check", "--topology", &turin, "--config", &c]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("key require_step_gpus in config file"), "{}", stdout(&o));
}

#[test]
fn check_looks_at_this_machines_cache_file() {
    use std::os::unix::fs::PermissionsExt;
    let Some(dir) = TempDir::trusted("cache") else { return };
    let cache_dir = dir.0.join("run");
    let c = dir.file("c.toml", &format!("cache_dir = \"{}\"\n", cache_dir.display()));
    let file = cache_dir.join("topology.json");
    let shown = format!("topology cache {}: ", file.display());
    let chmod = |p: &Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    // No --topology: this machine, and its cache, read as a step reads it. Whatever the
    // machine, the cache never changes the verdict (the steps only get slower without it).
    let check = || {
        let o = run(&["check", "--config", &c]);
        assert!(o.status.code() == Some(0) || o.status.code() == Some(1), "{}{}", stdout(&o), stderr(&o));
        (stdout(&o), o.status.code())
    };

    let (out, absent_code) = check();
    assert!(out.contains(&format!("    cache_dir         {}\n", cache_dir.display())), "{out}");
    assert!(out.contains(&format!("{shown}absent (see the notes)")), "{out}");
    assert!(out.contains(&format!("no topology cache (no cache directory {})", cache_dir.display())), "{out}");

    // What slurmd writes, with its lock held (by this test process, as root).
    let topology = map_by_device::load::from_xml_file(Path::new(&topo("e2e-2gpu.xml"))).unwrap();
    let written = map_by_device::cache::write(&cache_dir, "test", || Ok::<_, std::io::Error>(topology)).unwrap();
    let (out, code) = check();
    assert_eq!(code, absent_code, "{out}");
    assert!(out.contains("topology cache: used by the steps: slurmd's cache"), "{out}");
    assert!(!out.contains("no topology cache") && !out.contains("will not use the topology cache"), "{out}");

    chmod(&file, 0o666);
    let (out, code) = check();
    assert_eq!(code, absent_code, "{out}");
    assert!(out.contains(&format!("{shown}not used by the steps (see the notes)")), "{out}");
    assert!(out.contains("is writable by group or others (mode 0666)"), "{out}");
    chmod(&file, 0o644);
    chmod(&cache_dir, 0o777);
    let (out, _) = check();
    assert!(out.contains("the directory") && out.contains("is writable by group or others (mode 0777)"), "{out}");
    chmod(&cache_dir, 0o755);

    // slurmd stops: its lock goes, and a copy of the file left behind is not trusted.
    let saved = std::fs::read(&file).unwrap();
    assert!(written.remove().unwrap());
    std::fs::write(&file, saved).unwrap();
    let (out, _) = check();
    assert!(out.contains("no running slurmd holds it"), "{out}");

    // A symlink in place of the file is not followed.
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &file).unwrap();
    let (out, _) = check();
    assert!(out.contains("is a symbolic link"), "{out}");

    // cache = false: nothing to look at.
    let off = dir.file("off.toml", &format!("cache_dir = \"{}\"\ncache = false\n", cache_dir.display()));
    let out = stdout(&run(&["check", "--config", &off]));
    assert!(!out.contains("topology cache /") && !out.contains("no topology cache"), "{out}");
}

/// A step on part of a node: `check` lists, per locality, the devices such a step is handed,
/// and `plan --allowed-cpus` hands out exactly those (the same rule, `plan::device_order`).
#[test]
fn check_and_plan_agree_on_partial_node_steps() {
    let amd = topo("e2e-2gpu-amd.xml");
    let out = ok(&["check", "--topology", &amd]);
    assert!(out.contains("A step given only some of these CPUs is handed the devices local to them first"), "{out}");
    for (cpus, near, far) in [("0", "rsmi1", "rsmi0"), ("1", "rsmi0", "rsmi1")] {
        let line = format!("  gpu on CPUs {cpus} only: {near} (with bind=none, then {far})");
        assert!(out.contains(&line), "{line:?} missing:\n{out}");
        let plan = ok(&["plan", "--topology", &amd, "-n", "1", "--allowed-cpus", cpus, "gpu"]);
        assert!(plan.contains(&format!(" {near} GPU-")) && plan.contains(&format!("; cpus {cpus};")), "{plan}");
        let plan = ok(&["plan", "--topology", &amd, "-n", "2", "--allowed-cpus", cpus, "gpu:bind=none"]);
        let order: Vec<&str> = plan.lines().filter_map(|l| l.split_whitespace().nth(6)).collect();
        assert_eq!(order, [near, far], "{plan}");
    }
    let err = refused(&["plan", "--topology", &amd, "-n", "2", "--allowed-cpus", "0", "gpu"]);
    assert!(err.contains("outside them: rsmi0 at CPUs 1"), "{err}");
    // All devices at one locality: nothing to say.
    let out = ok(&["check", "--topology", &topo("e2e-nogpu.xml")]);
    assert!(!out.contains("A step given only some"), "{out}");
}

// --- check: gres.conf -------------------------------------------------------------------

fn gres(name: &str) -> String {
    root().join("topologies/gres").join(name).display().to_string()
}

#[test]
fn check_compares_a_hand_written_gres_conf_with_the_mapping_order() {
    let drm = topo("drm-only.xml");
    let proc_root = root().join("topologies/drivers/nvidia/proc").display().to_string();

    // NVIDIA files matched through the driver's Device Minor; the other nodes' lines ignored.
    let out = ok(&["check", "--topology", &drm, "--proc-root", &proc_root, "--gres-conf", &gres("drm-only.conf")]);
    contains_all(
        &out,
        &[
            "GPUs in ",
            "topologies/gres/drm-only.conf, in Slurm's index order:\n",
            "   0  /dev/nvidia0         0000:17:00.0 renderD128   (Device Minor 0) Type=a100 Cores=0-15\n",
            "   1  /dev/nvidia1         0000:ca:00.0 renderD129   (Device Minor 1) Type=a100 Cores=0-15\n",
            "  Slurm's GPU indices are the mapping order (PCI bus order)\n",
        ],
    );
    assert!(!out.contains("nvidia2") && !out.contains("h100"), "lines for other nodes count:\n{out}");

    // Listed in another order: not ready, and the problem says what to write.
    let o =
        run(&["check", "--topology", &drm, "--proc-root", &proc_root, "--gres-conf", &gres("drm-only-reversed.conf")]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    contains_all(
        &stdout(&o),
        &[
            "   0  /dev/nvidia1         0000:ca:00.0 renderD129   (Device Minor 1) Type=a100 Cores=8-15\n",
            "  Slurm's GPU indices are NOT the mapping order (PCI bus order): see the problems\n",
            "drm-only-reversed.conf numbers this node's GPUs in another order than the plugin maps them (PCI bus \
             order): Slurm's GPU 0 is /dev/nvidia1 (0000:ca:00.0 renderD129) but the mapping's GPU 0 is 0000:17:00.0 \
             renderD128; Slurm's GPU 1 is",
            "with ConstrainDevices, GPUs its device cgroup hides, which it cannot open): write the files in PCI bus \
             order, File=/dev/nvidia0,/dev/nvidia1 (or AutoDetect=nvml",
        ],
    );

    // Render nodes, matched through hwloc's DRM devices: right, then reversed.
    let amd = topo("e2e-2gpu-amd.xml");
    let out = ok(&["check", "--topology", &amd, "--gres-conf", &gres("e2e-2gpu-amd.conf")]);
    contains_all(
        &out,
        &[
            "   0  /dev/dri/renderD128  0000:41:00.0 rsmi0        (hwloc's renderD128) Type=mi210\n",
            "   1  /dev/dri/renderD129  0000:c1:00.0 rsmi1        (hwloc's renderD129) Type=mi210\n",
            "  Slurm's GPU indices are the mapping order (PCI bus order)\n",
        ],
    );
    let o = run(&["check", "--topology", &amd, "--gres-conf", &gres("e2e-2gpu-amd-reversed.conf")]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    contains_all(&stdout(&o), &["write the files in PCI bus order, File=/dev/dri/renderD128,/dev/dri/renderD129"]);

    // Without the driver files the NVIDIA files cannot be matched: said in a note, no problem.
    let out = stdout(&run(&["check", "--topology", &drm, "--gres-conf", &gres("drm-only-reversed.conf")]));
    contains_all(
        &out,
        &[
            "  whether Slurm's GPU indices are the mapping order cannot be told (see the notes)\n",
            "drm-only-reversed.conf line 3: which GPU /dev/nvidia1 is cannot be told: no NVIDIA driver files are read \
             (give --proc-root, the node's /proc)",
        ],
    );
    assert!(!out.contains("numbers this node's GPUs in another order"), "{out}");
}

#[test]
fn check_reads_autodetect_bad_gres_lines_and_the_default_gres_conf() {
    let dir = TempDir::new("gres");
    let amd = topo("e2e-2gpu-amd.xml");
    // AutoDetect: Slurm orders the GPUs itself, whatever order File= lists them in.
    let f = dir
        .file("auto.conf", "AutoDetect=rsmi\nName=gpu File=/dev/dri/renderD129\nName=gpu File=/dev/dri/renderD128\n");
    let out = ok(&["check", "--topology", &amd, "--gres-conf", &f]);
    contains_all(
        &out,
        &["  AutoDetect=rsmi: Slurm numbers the GPUs itself, in PCI bus order: the order the plugin maps them in\n"],
    );
    // A line slurmd cannot read: a problem naming the line.
    let f = dir.file("bad.conf", "# GPUs\nName=gpu File=/dev/nvidia[0-\n");
    let o = run(&["check", "--topology", &amd, "--gres-conf", &f]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    contains_all(&stdout(&o), &["bad.conf: slurmd cannot read it: line 2: File=/dev/nvidia[0-: unclosed '['"]);
    // --gres-conf naming no file: a usage error.
    let err = refused(&["check", "--topology", &amd, "--gres-conf", "/nonexistent/gres.conf"]);
    assert!(err.contains("cannot read --gres-conf /nonexistent/gres.conf"), "{err}");
    // On the node itself, gres.conf next to slurm.conf (SLURM_CONF) is read without a flag;
    // Slurm's fake GPUs of the e2e suite (/dev/null) are files no GPU is known by: a note.
    let conf = dir.file("etc/slurm.conf", "ClusterName=test\n");
    dir.file("etc/gres.conf", "Name=gpu File=/dev/null\n");
    let o = Command::new(BIN)
        .args(["check"])
        .env("SLURM_CONF", &conf)
        .env_remove("ZE_FLAT_DEVICE_HIERARCHY")
        .output()
        .unwrap();
    contains_all(
        &stdout(&o),
        &[
            "etc/gres.conf, in Slurm's index order:\n",
            "   0  /dev/null            unknown (see the notes)\n",
            "etc/gres.conf line 1: which GPU /dev/null is cannot be told: neither /dev/nvidiaN nor /dev/dri/renderDN or \
             cardN",
        ],
    );
}

/// Issue 24.7: gres.conf's `NodeName=` is matched as slurmd matches it, against its short
/// host name: a line for `drm-only` is the line of the host that reports
/// `drm-only.cluster.local`, so its GPU order is checked (it was skipped, and the node
/// reported ready); hostlist ranges still count; a GPU node that gres.conf gives no GPU line
/// is not ready, and the report names the `NodeName=` values it saw.
#[test]
fn check_matches_gres_node_names_as_slurmd_does() {
    let drm = topo("drm-only.xml");
    let proc_root = root().join("topologies/drivers/nvidia/proc").display().to_string();
    let check = |hostname: &str, gres_conf: &str| {
        run(&["check", "--topology", &drm, "--proc-root", &proc_root, "--hostname", hostname, "--gres-conf", gres_conf])
    };
    // The full name against NodeName=drm-only: the wrong order is found, not skipped.
    let o = check("drm-only.cluster.local", &gres("drm-only-reversed.conf"));
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    contains_all(
        &stdout(&o),
        &[
            "   0  /dev/nvidia1         0000:ca:00.0 renderD129   (Device Minor 1) Type=a100 Cores=8-15\n",
            "drm-only-reversed.conf numbers this node's GPUs in another order than the plugin maps them",
        ],
    );
    // The right order under the full name: ready, the other nodes' lines still left out.
    let out = stdout(&check("drm-only.cluster.local", &gres("drm-only.conf")));
    contains_all(&out, &["  Slurm's GPU indices are the mapping order (PCI bus order)\n", "Ready: yes\n"]);
    assert!(!out.contains("h100"), "{out}");

    let dir = TempDir::new("gres-names");
    // A range names the short name of a full one.
    let f = dir.file("range.conf", "NodeName=drm-only[0-1] Name=gpu File=/dev/nvidia[1,0]\n");
    let o = check("drm-only1.cluster.local", &f);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    contains_all(&stdout(&o), &["Slurm's GPU 0 is /dev/nvidia1"]);
    // GPU lines for other nodes only: not ready, naming the NodeName= values and this node.
    let f = dir.file(
        "others.conf",
        "NodeName=gpu[01-16] Name=gpu File=/dev/nvidia[0-3]\nNodeName=login Name=gpu File=/dev/nvidia0\n\
         NodeName=gpu[01-16] Name=gpu File=/dev/nvidia[4-7]\nNodeName=drm-only Name=mps Count=100\n",
    );
    let o = check("drm-only.cluster.local", &f);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    contains_all(
        &stdout(&o),
        &[
            "  none for this node (no Name=gpu line with File= names it)\n",
            "  its Name=gpu lines are for NodeName=gpu[01-16], NodeName=login: none names this node \
             (drm-only.cluster.local or drm-only)\n",
            "others.conf gives GPUs only to other nodes (NodeName=gpu[01-16], NodeName=login), none to this node \
             (drm-only.cluster.local or drm-only: slurmd matches NodeName= against its short host name): slurmd here \
             finds no GPU GRES in it, so Slurm allocates none of this node's 2 GPUs; add Name=gpu lines with \
             NodeName=drm-only",
        ],
    );
    // ... with AutoDetect for every node, Slurm finds the GPUs itself: no problem.
    let f = dir.file("auto.conf", "AutoDetect=nvml\nNodeName=gpu[01-16] Name=gpu File=/dev/nvidia[0-3]\n");
    assert_eq!(check("drm-only", &f).status.code(), Some(0));
    // ... and a node without GPUs is right to have none.
    let out = ok(&[
        "check",
        "--topology",
        &topo("no-gpu.xml"),
        "--gres-conf",
        &dir.0.join("others.conf").display().to_string(),
    ]);
    assert!(out.contains("its Name=gpu lines are for NodeName=gpu[01-16]") && out.ends_with("Ready: yes\n"), "{out}");
}

/// Issue 24.7: `check --config FILE` checks a draft wherever it is (here under /tmp, which the
/// plugin refuses), says so in a note, and names `--config` as how the file was given; it
/// used to refuse it as "named by config= in plugstack.conf".
#[test]
fn check_config_reads_a_draft_anywhere_and_says_where_the_plugin_would_not() {
    let dir = TempDir::new("draft");
    let turin = topo("turin-h200.xml");
    let c = dir.file("draft.toml", "default = \"gpu\"\nrequire_step_gpus = true\n");
    let out = ok(&["check", "--topology", &turin, "--config", &c]);
    contains_all(
        &out,
        &[
            &format!("  settings from config file {c}, given with --config:\n"),
            "    default           gpu\n",
            "    require_step_gpus true",
            "Default \"gpu\" on this node, for a one-task step (such as a launcher's daemon), applied as \
             \"gpu:ndev=auto\"",
            &format!("  - {c} (--config) was checked as a draft: the plugin reads its config file only from a root-owned path"),
            "would refuse this one where it is (a parent directory /tmp is writable by group or others (mode 1777)",
            &format!("install -m 0644 {c} /etc/slurm/map-by-device.toml\n"),
        ],
    );
    assert!(!out.contains("named by config="), "{out}");
    // A broken draft: its error, not the place, and how the file was given.
    let c = dir.file("bad.toml", "defualt = \"gpu\"\n");
    let o = run(&["check", "--topology", &turin, "--config", &c]);
    assert_eq!(o.status.code(), Some(1));
    contains_all(
        &stdout(&o),
        &[&format!("configuration error (config file {c}, given with --config): unknown key \"defualt\"")],
    );
    // A file that cannot be read as one: the message says --config gave it.
    std::fs::create_dir_all(dir.0.join("dir.toml")).unwrap();
    let o = run(&["check", "--topology", &turin, "--config", &dir.0.join("dir.toml").display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    contains_all(&stdout(&o), &["dir.toml\" (given with --config): cannot read "]);
    assert!(!stdout(&o).contains("named by config="), "{}", stdout(&o));
}

/// Issue 10.5: an Intel GPU whose Level Zero hierarchy model is unknown is refused, and every
/// place that describes the setting says so, with the two ways out: the admin's
/// `ze_hierarchy`, or the job's `:env=none` for placement and binding alone.
#[test]
fn intel_gpus_without_a_hierarchy_model_are_refused_and_check_says_so() {
    let pvc = topo("intel-pvc.xml");
    let err = refused(&["plan", "--topology", &pvc, "-n", "1", "gpu"]);
    contains_all(&err, &["GPU ze0 at 0000:18:00.0 on pvc-node cannot be named", "sets ze_hierarchy", ":env=none"]);
    let out = ok(&["plan", "--topology", &pvc, "-n", "1", "gpu:env=none"]);
    assert!(out.contains("PMIX_DEVICE_ID=gpu://pvc-node::ze0") && !out.contains("ZE_AFFINITY_MASK"), "{out}");
    let out = ok(&["plan", "--topology", &pvc, "--ze-hierarchy", "FLAT", "-n", "1", "gpu"]);
    assert!(out.contains("ZE_AFFINITY_MASK=0 ZE_FLAT_DEVICE_HIERARCHY=FLAT"), "{out}");

    // check: not ready, with the refusal (not "masks are not written") and both fixes.
    let o = run(&["check", "--topology", &pvc]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    contains_all(&out, &["6 Level Zero GPUs", "every GPU mapping here is refused", "set ze_hierarchy", ":env=none"]);
    assert!(!out.contains("never written"), "{out}");

    // The settings report of a config file that leaves ze_hierarchy unset says the same.
    let Some(dir) = TempDir::trusted("ze") else { return };
    let c = dir.file("c.toml", "default = \"gpu\"\n");
    let o = run(&["check", "--topology", &pvc, "--config", &c]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("    ze_hierarchy      (unset: Intel GPU mappings are refused unless the job adds :env=none)\n"),
        "{out}"
    );
    assert!(out.contains("Default \"gpu\"") && out.contains("sets ze_hierarchy"), "{out}");
}

/// Runs the binary with a deadline: `None` when it was still running (then killed).
fn run_within(args: &[&str], secs: u64) -> Option<Output> {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Issue 10.6: `--topology` names anything but a regular file (a FIFO nobody writes to, which
/// a plain open would wait on forever), or a file larger than any export: refused, with the
/// path and the reason, without waiting for a writer and without reading the file.
#[test]
fn topology_that_is_a_fifo_or_too_large_is_refused_without_reading_it() {
    let dir = TempDir::new("topology-kinds");
    let fifo = dir.0.join("topo.fifo");
    let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: a NUL-terminated path owned for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", fifo.display());
    let fifo = fifo.display().to_string();
    for sub in [&["plan", "--topology", &fifo, "-n", "1", "gpu"][..], &["devices", "--topology", &fifo]] {
        let o = run_within(sub, 30).unwrap_or_else(|| panic!("{sub:?} still waiting on the FIFO after 30 s"));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{sub:?}: {err}");
        assert!(err.starts_with("map-by-device: error: ") && err.contains(&fifo), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }

    // A sparse file of 64 GiB: over the cap by its size alone. Reading it (zeros) to the end
    // would take minutes and 64 GiB of memory; the refusal comes before the first byte.
    let big = dir.0.join("huge.xml");
    std::fs::File::create(&big).unwrap().set_len(64 << 30).unwrap();
    let big = big.display().to_string();
    let o = run_within(&["plan", "--topology", &big, "-n", "1", "gpu"], 30)
        .unwrap_or_else(|| panic!("a 64 GiB --topology is being read"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&big) && err.contains("68719476736 bytes, larger than any topology export"), "{err}");
}

/// `plan --help` lists every qualifier the parser knows, and every place the docs quote the
/// parser's "expected one of" list quotes it as it is.
#[test]
fn every_qualifier_is_in_plan_help_and_quoted_lists_are_the_real_one() {
    let err = refused(&["plan", "--topology", &topo("turin-h200.xml"), "-n", "1", "gpu:bogus"]);
    let list = err.trim_end().split("expected one of ").nth(1).unwrap().to_string();
    let help = ok(&["plan", "--help"]);
    let quals: String = help
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("QUALIFIERS"))
        .take_while(|l| !l.trim_start().starts_with("bind="))
        .collect::<Vec<_>>()
        .join(" ");
    for q in list.split(", ") {
        let listed = quals
            .split_whitespace()
            .any(|w| w == q || w.starts_with(&format!("{q}=")) || w.starts_with(&format!("{q}[")));
        assert!(listed, "plan --help does not list {q:?}:\n{quals}");
    }
    for doc in ["README.md", "docs/user-guide.md", "docs/admin-guide.md", "docs/plugin.md"] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        for quoted in text.split("expected one of ").skip(1) {
            let quoted: String =
                quoted.chars().take_while(|c| c.is_ascii_lowercase() || *c == ',' || *c == ' ').collect();
            assert_eq!(quoted.trim_end(), list, "{doc} quotes another qualifier list");
        }
    }
}

/// `plan --env` reads Slurm's `CUDA_VISIBLE_DEVICES` for the step as the plugin does: MIG
/// instances are refused with the fix, GPU UUIDs (gres.conf `Flags=env_uuid`) name the
/// step's GPUs and must agree with `--step-gpus`; a network mapping does not look at them.
#[test]
fn plan_reads_slurms_visible_devices_as_the_plugin_does() {
    let turin = topo("turin-h200.xml");
    let mig = "CUDA_VISIBLE_DEVICES=MIG-5c1f3b2a-0d7e-5b44-9a3c-2f6e8d1b7a90";
    let err = refused(&["plan", "--topology", &turin, "--step-gpus", "0", "--env", mig, "-n", "1", "gpu"]);
    contains_all(&err, &["the step's GPUs are MIG instances", "--map-by-device=none"]);
    ok(&["plan", "--topology", &turin, "--step-gpus", "0", "--env", mig, "-n", "1", "nic"]);
    let uuids =
        "CUDA_VISIBLE_DEVICES=GPU-be387809-7d0f-8622-8b7d-e8b861781bdc,GPU-96c8418c-4e47-1a38-d5cc-bf6f1363e911";
    let out = ok(&["plan", "--short", "--topology", &turin, "--env", uuids, "-n", "2", "gpu"]);
    assert!(out.contains("\n0     cuda2 ") && out.contains("\n1     cuda3 "), "{out}");
    let err = refused(&["plan", "--topology", &turin, "--step-gpus", "0,1", "--env", uuids, "-n", "2", "gpu"]);
    assert!(err.contains("SLURM_STEP_GPUS says [0, 1]"), "{err}");
}

/// `check` with a plugstack line whose `topology=` lies in a directory others can write (or is
/// itself writable by others) reports it as a problem naming the directory, as the plugin
/// refuses it in every step.
#[test]
fn check_reports_an_untrusted_topology_path_from_plugstack() {
    let Some(dir) = TempDir::trusted("untrusted-topology") else { return };
    let test = "check_reports_an_untrusted_topology_path_from_plugstack";
    let Some(plugin) = slurm_plugin_copy(&dir, "lib/map_by_device.so", test) else { return };
    let fixture = std::fs::read_to_string(topo("e2e-2gpu.xml")).unwrap();
    let open_dir = dir.0.join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let in_open_dir = dir.file("open/t.xml", &fixture);
    let writable = dir.file("writable.xml", &fixture);
    std::fs::set_permissions(&writable, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let trusted = dir.file("trusted.xml", &fixture);
    let cases = [
        (&in_open_dir, format!("the directory {} is writable by group or others (mode 0777)", open_dir.display())),
        (&writable, format!("the file {writable} is writable by group or others (mode 0666)")),
    ];
    for (path, why) in &cases {
        let conf = dir.file("plugstack.conf", &format!("required {plugin} topology={path}\n"));
        let o = run(&["check", "--plugstack", &conf]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        assert!(out.contains("Ready: no, 1 problem:"), "{out}");
        assert!(
            out.contains(&format!("  - the topology cannot be loaded: cannot use topology={path}: {why}")),
            "{out}"
        );
    }
    // The control: the same file in a root-only place is fine.
    let conf = dir.file("plugstack.conf", &format!("required {plugin} topology={trusted}\n"));
    let out = stdout(&run(&["check", "--plugstack", &conf]));
    assert!(!out.contains("cannot use topology="), "{out}");
}
