//! `gpu:adapters` on real machine shapes: each task's GPU and the network adapter(s) nearest
//! it in the PCI tree, named in the same variables as a `network` mapping's.
//!
//! - The project's fixtures (`topologies/`): `dgx2-mlx5` (two GPUs and one HCA per PCIe
//!   switch), `far-hca` (the HCAs on the other socket, the management port beside the GPUs),
//!   `e2e-2gpu`, `turin-h200`, `omnipath`, `amd-mi250x`, `gpu-omnipath` (a GPU and an
//!   Omni-Path HFI under each PCIe switch, the management port beside package 0's).
//! - The real exports (`../shared/topologies/`, where that directory exists; each test that
//!   needs one prints a line and returns when it is absent): `turin-4gpu-nvml` (each GPU's
//!   NUMA domain holds one mlx5 behind the same switch), `nvidiaDGX2` (GPUs under shared
//!   switches, and no network adapter in the export at all), `coral-lassen` (two GPUs and a
//!   dual-port HCA per socket, on different host bridges), `epyc-corona-p2` (the one HCA on
//!   the socket of half the GPUs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use map_by_device::device::DeviceClass;
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{nccl, plan, Plan, PlanError, StepFacts};
use map_by_device::report;
use map_by_device::spec::Spec;
use std::path::PathBuf;

mod common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn node_at(path: PathBuf) -> Node {
    let topo = load::from_xml_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Node::new(topo, NodeOptions::default())
}

fn fixture(name: &str) -> Node {
    node_at(root().join("topologies").join(name))
}

/// A real export, or `None` (with a line saying so) where `../shared/topologies` is absent.
fn shared(name: &str, test: &str) -> Option<Node> {
    let path = root().join("../shared/topologies").join(name);
    if !path.is_file() {
        common::skip_line(&format!("{test}: {} is not here (the real exports are reference data)", path.display()));
        return None;
    }
    Some(node_at(path))
}

fn run(node: &Node, spec: &str, facts: StepFacts) -> Result<Plan, PlanError> {
    plan(&Spec::parse(spec).unwrap(), node, &facts)
}

fn ok(node: &Node, spec: &str, n: u32) -> Plan {
    run(node, spec, StepFacts { ntasks: n, ..StepFacts::default() }).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// Each task's GPU names and adapter names: `cuda0>mlx5_0`.
fn pairs(node: &Node, p: &Plan) -> Vec<String> {
    p.tasks
        .iter()
        .map(|t| {
            let name = |i: usize| node.devices[i].name.clone();
            let gpus: Vec<String> = t.devices.iter().map(|&i| name(i)).collect();
            let adapters: Vec<String> = t.adapters.iter().map(|a| name(a.device)).collect();
            format!("{}>{}", gpus.join("+"), adapters.join("+"))
        })
        .collect()
}

fn var<'a>(p: &'a Plan, task: usize, name: &str) -> Option<&'a str> {
    p.tasks[task].env.get(name).map(String::as_str)
}

/// The variables a `network` mapping of adapter `name` alone gives its task.
fn network_env(node: &Node, name: &str) -> std::collections::BTreeMap<String, String> {
    (*ok(node, name, 1).tasks.remove(0).env).clone()
}

#[test]
fn turin_each_gpu_gets_the_hca_behind_its_switch_never_eno6() {
    let mut nodes = vec![fixture("turin-h200.xml")];
    nodes.extend(shared("turin-4gpu-nvml.xml", "turin_each_gpu_gets_the_hca_behind_its_switch_never_eno6"));
    for node in &nodes {
        let p = ok(node, "gpu:adapters", 4);
        assert_eq!(
            pairs(node, &p),
            ["cuda0>mlx5_0", "cuda1>mlx5_3", "cuda2>mlx5_4", "cuda3>mlx5_5"],
            "{}",
            node.hostname()
        );
        for (t, hca) in ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5"].iter().enumerate() {
            // NCCL: one list for the node, the same in every task (NCCL picks each GPU's own).
            assert_eq!(var(&p, t, "NCCL_IB_HCA"), Some("=mlx5_0,mlx5_3,mlx5_4,mlx5_5"));
            // The adapter's per-process variables are the ones a network mapping of it
            // writes, the GPU's beside them.
            let alone = network_env(node, hca);
            assert_eq!(alone["NCCL_IB_HCA"], format!("={hca}"));
            for name in ["UCX_NET_DEVICES", "PSM3_NIC"] {
                assert_eq!(p.tasks[t].env.get(name), alone.get(name), "{name} of task {t}");
            }
            let pmix = var(&p, t, "PMIX_DEVICE_ID").unwrap();
            let gpu_id = &node.devices[p.tasks[t].devices[0]].pmix_id;
            assert_eq!(pmix, format!("{},{}", gpu_id.as_deref().unwrap(), alone["PMIX_DEVICE_ID"]));
            assert!(var(&p, t, "CUDA_VISIBLE_DEVICES").unwrap().starts_with("GPU-"));
            assert!(p.tasks[t].adapters[0].shared_with(t as u32).is_empty(), "one HCA per GPU here");
        }
        // The CPUs follow the GPU, as without adapters.
        let plain = ok(node, "gpu", 4);
        assert!(p.tasks.iter().zip(&plain.tasks).all(|(a, b)| a.cpus == b.cpus));
        assert!(!p.warnings.iter().any(|w| w.contains("adapters:")), "{:?}", p.warnings);
    }
}

#[test]
fn turin_network_mapping_never_hands_out_the_management_port() {
    let node = fixture("turin-h200.xml");
    let p = ok(&node, "nic:bind=core", 4);
    let names: Vec<&str> = p.tasks.iter().map(|t| node.devices[t.devices[0]].name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_3", "mlx5_1", "mlx5_2"], "bus order, eno6 left out");
    // NCCL's list for the node, in bus order, the same in every task.
    assert!(p.tasks.iter().all(|t| t.env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3,mlx5_1,mlx5_2"), "{:?}", p.tasks);
    assert!(!p.warnings.iter().any(|w| w.contains("eno6")), "{:?}", p.warnings);
    assert!(!pairs(&node, &ok(&node, "gpu:adapters:shared", 32)).iter().any(|p| p.contains("eno6")));
}

#[test]
fn dgx2_export_has_no_adapter_so_none_is_paired_and_the_plan_says_so() {
    let Some(node) = shared("nvidiaDGX2.xml", "dgx2_export_has_no_adapter_so_none_is_paired_and_the_plan_says_so")
    else {
        return;
    };
    // (The export keeps only 4 cores of the machine: no binding, 16 tasks would overload them.)
    let p = ok(&node, "gpu:adapters:bind=none", 16);
    assert!(p.tasks.iter().all(|t| t.adapters.is_empty()));
    assert!(p.tasks.iter().all(|t| !t.env.contains_key("NCCL_IB_HCA") && t.env.contains_key("CUDA_VISIBLE_DEVICES")));
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    assert!(p.warnings[0].contains("has no fabric adapter"), "{}", p.warnings[0]);
}

#[test]
fn lassen_gpus_split_the_sockets_two_hca_ports_in_bus_order() {
    let Some(node) = shared("coral-lassen.xml", "lassen_gpus_split_the_sockets_two_hca_ports_in_bus_order") else {
        return;
    };
    // cuda0/cuda1 and mlx5_0/mlx5_1 share only their socket (different host bridges): a tie,
    // split in bus order. The Broadcom Ethernet ports of socket 0 are never paired.
    let p = ok(&node, "gpu:adapters", 4);
    assert_eq!(pairs(&node, &p), ["cuda0>mlx5_0", "cuda1>mlx5_1", "cuda2>mlx5_2", "cuda3>mlx5_3"]);
    // NCCL sees the same tie (PHB: through the CPU) and breaks it by device index, not
    // necessarily as the pairing did: one warning per socket says so.
    assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
    for (w, gpus) in p.warnings.iter().zip([["cuda0", "cuda1"], ["cuda2", "cuda3"]]) {
        assert!(w.starts_with("NCCL_IB_HCA lists the node's adapters") && w.contains("(PHB: through the CPU)"), "{w}");
        assert!(gpus.iter().all(|g| w.contains(&format!("GPU {g} at"))), "{w}");
    }
    // Node-wide: the step's GPUs do not change a GPU's adapter (two jobs, one GPU each, stay
    // on their own adapters).
    let facts = StepFacts { ntasks: 1, step_gpus: Some(vec![1]), ..StepFacts::default() };
    let p = run(&node, "gpu:adapters", facts).unwrap();
    assert_eq!(pairs(&node, &p), ["cuda1>mlx5_1"]);
    // Shared GPUs share their adapter too.
    let p = ok(&node, "gpu:shared:adapters", 8);
    assert_eq!(p.tasks[0].adapters[0].shared_with(0), [4]);
}

#[test]
fn hcas_on_the_other_socket_are_no_gpus_adapters() {
    let node = fixture("far-hca.xml");
    let p = ok(&node, "gpu:adapters", 2);
    assert_eq!(pairs(&node, &p), ["cuda0>", "cuda1>"]);
    for t in &p.tasks {
        assert!(t.env.contains_key("CUDA_VISIBLE_DEVICES"));
        for name in ["NCCL_IB_HCA", "UCX_NET_DEVICES", "PSM3_NIC"] {
            assert!(!t.env.contains_key(name), "{name}");
        }
        assert!(!t.env["PMIX_DEVICE_ID"].contains("ipv4://"), "eno1 is never paired");
    }
    let w: Vec<&String> = p.warnings.iter().filter(|w| w.starts_with("adapters:")).collect();
    assert_eq!(w.len(), 1, "{:?}", p.warnings);
    for needle in
        ["cuda0 at 0000:13:00.0 (task 0)", "cuda1 at 0000:14:00.0 (task 1)", "mlx5_0, mlx5_1", "whole machine"]
    {
        assert!(w[0].contains(needle), "{needle}: {}", w[0]);
    }
    // The HCAs themselves are still a network mapping's; the management port, first in bus
    // order, is not (plain Ethernet is no fabric adapter): two tasks, two HCAs, a third refused.
    let net = ok(&node, "network", 2);
    let names: Vec<&str> = net.tasks.iter().map(|t| node.devices[t.devices[0]].name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);
    assert_eq!(net.tasks[0].env["NCCL_IB_HCA"], "=mlx5_0,mlx5_1");
    assert_eq!(net.tasks[0].env["UCX_NET_DEVICES"], "mlx5_0:1");
    assert!(matches!(
        run(&node, "network", StepFacts { ntasks: 3, ..StepFacts::default() }),
        Err(PlanError::TooManyTasks { .. })
    ));
    // Named, the port is still the job's to have, with no fabric variable.
    let eno1 = ok(&node, "eno1", 1);
    assert_eq!(eno1.tasks[0].env.keys().collect::<Vec<_>>(), ["PMIX_DEVICE_ID"]);
}

#[test]
fn corona_half_the_gpus_share_the_one_hca_the_others_get_none() {
    let Some(node) = shared("epyc-corona-p2.xml", "corona_half_the_gpus_share_the_one_hca_the_others_get_none") else {
        return;
    };
    let p = ok(&node, "gpu:adapters", 8);
    let far: Vec<u32> = p.tasks.iter().filter(|t| t.adapters.is_empty()).map(|t| t.task).collect();
    assert_eq!(far, [0, 1, 2, 3], "{:?}", pairs(&node, &p));
    for t in &p.tasks[4..] {
        assert_eq!(node.devices[t.adapters[0].device].name, "mlx5_0");
        assert_eq!(t.adapters[0].shared_with(t.task).len(), 3);
    }
    assert_eq!(p.warnings.iter().filter(|w| w.starts_with("adapters:")).count(), 1, "{:?}", p.warnings);
}

#[test]
fn e2e_node_pairs_across_its_host_bridges() {
    let node = fixture("e2e-2gpu.xml");
    let p = ok(&node, "gpu:adapters", 2);
    assert_eq!(pairs(&node, &p), ["cuda0>mlx5_0", "cuda1>mlx5_1"]);
    assert_eq!((var(&p, 0, "UCX_NET_DEVICES"), var(&p, 1, "NCCL_IB_HCA")), (Some("mlx5_0:1"), Some("=mlx5_0,mlx5_1")));
    // Each GPU shares a host bridge with its own HCA, on its own package: NCCL's nearest (PHB)
    // is that one alone, so nothing to warn about.
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    // JSON: the adapter beside the task's devices, with who shares it.
    let json = report::plan_json(&node, &p);
    assert_eq!(json["tasks"][1]["adapters"][0]["name"], "mlx5_1");
    assert_eq!(json["tasks"][1]["adapters"][0]["shared_with"], serde_json::json!([]));
    assert!(report::plan_json(&node, &ok(&node, "gpu", 2))["tasks"][0].get("adapters").is_none());
}

#[test]
fn adapters_needs_a_gpu_mapping() {
    let node = fixture("e2e-2gpu.xml");
    let e = run(&node, "mlx5_0:adapters", StepFacts { ntasks: 1, ..StepFacts::default() }).unwrap_err();
    assert!(matches!(e, PlanError::AdaptersWithoutGpu { .. }), "{e}");
    assert!(e.to_string().contains("mlx5_0 is a network device"), "{e}");
    // A GPU by name pairs like the class.
    let p = ok(&node, "cuda1:adapters", 1);
    assert_eq!(pairs(&node, &p), ["cuda1>mlx5_1"]);
    // Omni-Path: no GPU here at all.
    let omni = fixture("omnipath.xml");
    assert!(matches!(
        run(&omni, "gpu:adapters", StepFacts { ntasks: 1, ..StepFacts::default() }),
        Err(PlanError::NoDevices { .. })
    ));
}

#[test]
fn omnipath_hfi_beside_each_gpu_is_named_in_psm3_nic() {
    let node = fixture("gpu-omnipath.xml");
    let p = ok(&node, "gpu:adapters", 2);
    // The HFI under the GPU's own switch, never the management port eno1 beside package 0's.
    assert_eq!(pairs(&node, &p), ["cuda0>hfi1_0", "cuda1>hfi1_1"]);
    for (t, hfi) in ["hfi1_0", "hfi1_1"].iter().enumerate() {
        assert_eq!(var(&p, t, "PSM3_NIC"), Some(*hfi));
        // Omni-Path is PSM3's: no mlx5 variable, and the same value a network mapping writes.
        assert_eq!((var(&p, t, "NCCL_IB_HCA"), var(&p, t, "UCX_NET_DEVICES")), (None, None));
        let alone = network_env(&node, hfi);
        assert_eq!(var(&p, t, "PSM3_NIC"), alone.get("PSM3_NIC").map(String::as_str));
        let gpu_id = node.devices[p.tasks[t].devices[0]].pmix_id.clone().unwrap();
        assert_eq!(var(&p, t, "PMIX_DEVICE_ID").unwrap(), format!("{gpu_id},{}", alone["PMIX_DEVICE_ID"]));
        assert!(var(&p, t, "CUDA_VISIBLE_DEVICES").unwrap().starts_with("GPU-"));
    }
    assert!(!p.warnings.iter().any(|w| w.contains("adapters:")), "{:?}", p.warnings);
    // Two GPUs per task: both HFIs, in PSM3's pattern form.
    let p = ok(&node, "gpu:ndev=2:adapters", 1);
    assert_eq!(pairs(&node, &p), ["cuda0+cuda1>hfi1_0+hfi1_1"]);
    assert_eq!(var(&p, 0, "PSM3_NIC"), Some("@(hfi1_0|hfi1_1)"));
    // Tasks sharing a GPU share its HFI, without needing more than `shared` for the GPU.
    let p = ok(&node, "gpu:shared:adapters:bind=core", 4);
    assert_eq!(pairs(&node, &p), ["cuda0>hfi1_0", "cuda1>hfi1_1", "cuda0>hfi1_0", "cuda1>hfi1_1"]);
    assert_eq!(p.tasks[0].adapters[0].shared_with(0), [2]);
}

/// Every fixture and real export with an adapter NCCL takes, under every spec that writes
/// `NCCL_IB_HCA`: one value on every task of the node (NCCL requires it), listing exactly the
/// adapters the node's tasks hold or are paired with, in bus order; and for each GPU, NCCL's
/// own nearest adapters among that list (its PCI path classes: `plan::nccl`) are the ones
/// `adapters` paired with it, or a warning names the GPU.
#[test]
fn nccl_gets_one_list_per_node_and_each_gpu_its_pair_or_a_warning() {
    let mut paths: Vec<PathBuf> = xml_files(&root().join("topologies"));
    match common::reference_dir() {
        Some(dir) => paths.extend(xml_files(&dir)),
        None => common::skipped("NCCL's choice on the real exports"),
    }
    let (mut nodes, mut plans, mut agreed, mut warned) = (0, 0, 0, 0);
    for path in paths {
        let node = node_at(path.clone());
        let nccl_named = |i: &usize| node.devices.get(*i).is_some_and(map_by_device::env::names_to_nccl);
        if !(0..node.devices.len()).any(|i| nccl_named(&i)) {
            continue;
        }
        nodes += 1;
        let gpus = node.class_indexes(DeviceClass::Gpu).len() as u32;
        let nets = node.class_indexes(DeviceClass::Network).len() as u32;
        let specs = [
            ("gpu:adapters:bind=none", gpus),
            ("gpu:ndev=2:adapters:bind=none", gpus / 2),
            ("gpu:shared:adapters:bind=none", 2 * gpus),
            ("network:bind=none", nets),
            ("network:bind=none", 1),
        ];
        for (spec, n) in specs {
            // Refusals (GPUs without identity, too few devices) are other tests' business.
            let Ok(p) = run(&node, spec, StepFacts { ntasks: n, ..StepFacts::default() }) else { continue };
            let what = format!("{} {spec} -n {n}", path.display());
            let mut held: Vec<usize> = p
                .tasks
                .iter()
                .flat_map(|t| t.devices.iter().copied().chain(t.adapters.iter().map(|a| a.device)))
                .collect();
            held.retain(nccl_named);
            held.sort_unstable();
            held.dedup();
            let want = (!held.is_empty()).then(|| {
                let names: Vec<&str> = held.iter().filter_map(|&i| node.devices[i].ofed_name.as_deref()).collect();
                format!("={}", names.join(","))
            });
            for t in &p.tasks {
                assert_eq!(t.env.get("NCCL_IB_HCA"), want.as_ref(), "{what}: task {}", t.task);
            }
            plans += 1;
            for t in p.tasks.iter().filter(|_| spec.contains("adapters")) {
                let paired: Vec<usize> = t.adapters.iter().map(|a| a.device).filter(|a| held.contains(a)).collect();
                for &g in t.devices.iter().filter(|_| !paired.is_empty()) {
                    let (class, best) = nccl::nearest(&node, g, &held).expect("the list is not empty");
                    if best == paired {
                        agreed += 1;
                        continue;
                    }
                    let gpu = &node.devices[g];
                    let named = format!("GPU {} at {}", gpu.name, gpu.busid_text());
                    assert!(
                        p.warnings.iter().any(|w| w.starts_with("NCCL_IB_HCA") && w.contains(&named)),
                        "{what}: NCCL's nearest for {named} are {best:?} ({class}), paired {paired:?}, and no warning \
                         says so: {:?}",
                        p.warnings
                    );
                    warned += 1;
                }
            }
        }
    }
    assert!(nodes >= 5 && plans >= 15, "{nodes} nodes, {plans} plans");
    let note = format!(
        "note: NCCL_IB_HCA on {nodes} nodes with adapters, {plans} plans: NCCL's nearest adapter is the paired one for \
         {agreed} GPU placements, warned for {warned}\n"
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), note.as_bytes());
}

/// The `.xml` files of `dir`, sorted.
fn xml_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.sort();
    files
}

/// A job that sets `NCCL_IB_HCA` itself keeps it: it is the job's choice for every rank of
/// every node, which a per-node list would override. Its other variables are the plan's.
#[test]
fn a_jobs_own_nccl_ib_hca_is_kept() {
    let node = fixture("turin-h200.xml");
    let env = [("NCCL_IB_HCA".to_string(), "^mlx5_1".to_string())].into_iter().collect();
    let p = run(&node, "gpu:adapters", StepFacts { ntasks: 4, env, ..StepFacts::default() }).unwrap();
    assert!(p.tasks.iter().all(|t| !t.env.contains_key("NCCL_IB_HCA") && t.env.contains_key("UCX_NET_DEVICES")));
    assert!(!p.warnings.iter().any(|w| w.starts_with("NCCL_IB_HCA")), "{:?}", p.warnings);
}
