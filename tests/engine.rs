//! The engine against whole topologies: the requester's table and the seed's deviations on
//! the Turin node, enumeration counts, and every refusal. Each Turin row is checked on both
//! the project's hand-written fixture and the real export it follows, so a fixture that
//! drifts from the machine it models fails here too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use map_by_device::cpuset::CpuSet;
use map_by_device::device::{DeviceClass, ZeHierarchy};
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, Plan, PlanError, StepFacts};
use map_by_device::spec::{BindLevel, Spec};
use std::collections::BTreeMap;
use std::path::PathBuf;

mod common;
use common::fixture;

fn node_at(path: PathBuf, options: NodeOptions) -> Node {
    let topo = load::from_xml_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Node::new(topo, options)
}

fn node(name: &str) -> Node {
    node_at(fixture(name), NodeOptions::default())
}

/// The Turin node twice: our fixture and the real NVML export (where the reference data is).
fn turins(test: &str) -> Vec<Node> {
    let mut nodes = vec![node("turin-h200.xml")];
    if let Some(real) = common::reference("turin-4gpu-nvml.xml", &format!("{test} on the real Turin export")) {
        nodes.push(node_at(real, NodeOptions::default()));
    }
    nodes
}

fn facts(n: u32) -> StepFacts {
    StepFacts { ntasks: n, ..StepFacts::default() }
}

fn run(node: &Node, spec: &str, n: u32) -> Result<Plan, PlanError> {
    plan(&Spec::parse(spec).unwrap(), node, &facts(n))
}

fn cpus(node: &Node, spec: &str, n: u32) -> Vec<String> {
    run(node, spec, n)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .tasks
        .iter()
        .map(|t| t.cpus.as_ref().map(|c| c.to_list()).unwrap_or_default())
        .collect()
}

/// PUs of Turin cores: core c has PUs c and c+128.
fn cores(list: &str) -> String {
    let c = CpuSet::parse_list(list).unwrap();
    c.union(&c.iter().map(|x| x + 128).collect()).to_list()
}

#[test]
fn turin_requesters_table() {
    for n in turins("turin_requesters_table") {
        assert_eq!(cpus(&n, "gpu:bind=core", 1), [cores("16")], "bind=core");
        assert_eq!(cpus(&n, "gpu:bind=l3cache", 1), [cores("16-23")], "l3cache");
        assert_eq!(cpus(&n, "gpu:bind=numa", 1), [cores("16-31")], "numa");
        assert_eq!(cpus(&n, "gpu:pe=2", 1), [cores("16-17")], "pe=2");
        assert_eq!(cpus(&n, "gpu:pe=2:bind=core", 1), [cores("16-17")], "pe=2 bind=core");
        assert_eq!(cpus(&n, "gpu:bind=core", 2), [cores("16"), cores("32")], "-n 2 plain");
        assert_eq!(cpus(&n, "gpu:interleave:bind=core", 2), [cores("16"), cores("96")]);
        assert_eq!(cpus(&n, "gpu:interleave:bind=core", 4), [cores("16"), cores("96"), cores("32"), cores("112")]);
        assert_eq!(cpus(&n, "gpu:interleave:bind=numa", 2), [cores("16-31"), cores("96-111")]);
        assert_eq!(
            cpus(&n, "gpu:shared:bind=core", 8),
            ["16", "32", "96", "112", "17", "33", "97", "113"].map(cores),
            "second round on the next free core"
        );
        // Default binding: the device's locality.
        assert_eq!(cpus(&n, "gpu", 1), [cores("16-31")]);
    }
}

#[test]
fn turin_bind_ceiling() {
    for n in turins("turin_bind_ceiling") {
        let e = run(&n, "gpu:bind=package", 1).unwrap_err();
        assert!(matches!(e, PlanError::BindAboveLocality { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("16-31,144-159") && text.contains("0-63,128-191"), "{text}");
        let e = run(&n, "gpu:interleave:bind=package", 2).unwrap_err();
        assert!(matches!(e, PlanError::BindAboveLocality { .. }));
        // ndev=2: each task's devices span a package, so binding to it is not above the map.
        let p = run(&n, "gpu:ndev=2:bind=package", 2).unwrap();
        assert_eq!(
            p.tasks.iter().map(|t| t.cpus.clone().unwrap().to_list()).collect::<Vec<_>>(),
            [cores("0-63"), cores("64-127")]
        );
        for t in &p.tasks {
            let v = &t.env["CUDA_VISIBLE_DEVICES"];
            assert_eq!(v.split(',').filter(|u| u.starts_with("GPU-")).count(), 2, "{v}");
        }
        // ndev=2 with interleave: one GPU per package each; binding descends from one of them.
        let p = run(&n, "gpu:ndev=2:interleave:bind=numa", 2).unwrap();
        assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), cores("16-31"));
        assert_eq!(p.tasks[1].cpus.as_ref().unwrap().to_list(), cores("32-47"));
        // One GPU per package: the task is Machine-local, so a package is finer than its
        // locality and is taken from its first device's own locality.
        assert_eq!(cpus(&n, "gpu:ndev=2:interleave:bind=package", 1), [cores("0-63")]);
    }
}

#[test]
fn turin_enumeration() {
    for n in turins("turin_enumeration") {
        let gpus = n.class_indexes(DeviceClass::Gpu);
        assert_eq!(gpus.len(), 4, "4 GPUs, not 5 (ASPEED) or 9 (OS devices)");
        let bus: Vec<String> = gpus.iter().map(|&i| n.devices[i].busid_text()).collect();
        assert_eq!(bus, ["0000:06:00.0", "0000:16:00.0", "0000:96:00.0", "0000:e6:00.0"]);
        let loc: Vec<String> = gpus.iter().map(|&i| n.devices[i].locality.to_list()).collect();
        assert_eq!(loc, [cores("16-31"), cores("32-47"), cores("96-111"), cores("112-127")], "NUMA 1, 2, 6, 7");
        for spelling in ["network", "nic", "fabric", "openfabrics", "NIC"] {
            let p = run(&n, &format!("{spelling}:shared"), 1).unwrap();
            assert_eq!(p.tasks.len(), 1);
            let n_net = n.class_indexes(DeviceClass::Network).len();
            assert_eq!(n_net, 6, "six OpenFabrics functions, not eno6 (plain Ethernet)");
            assert!(run(&n, spelling, 6).is_ok(), "{spelling}: 6 tasks, 6 cards");
            assert!(matches!(run(&n, spelling, 7), Err(PlanError::TooManyTasks { .. })));
        }
        let p = run(&n, "mlx5_0", 1).unwrap();
        assert_eq!(n.devices[p.tasks[0].devices[0]].ofed_name.as_deref(), Some("mlx5_0"));
        assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), cores("16-31"));
        assert!(matches!(run(&n, "mlx5_99", 1), Err(PlanError::UnknownDevice { .. })));
        assert!(n.class_indexes(DeviceClass::Block).len() == 2);
    }
}

#[test]
fn turin_interleave_orders() {
    for n in turins("turin_interleave_orders") {
        let gpus = n.class_indexes(DeviceClass::Gpu);
        let order = |level| {
            map_by_device::plan::interleave(&n.topology, &n.devices, &gpus, level)
                .iter()
                .map(|i| gpus.iter().position(|g| g == i).unwrap())
                .collect::<Vec<_>>()
        };
        use map_by_device::spec::GroupLevel::*;
        assert_eq!(order(Package), [0, 2, 1, 3]);
        assert_eq!(order(Numa), [0, 1, 2, 3], "a level that does not group leaves the order");
        assert_eq!(order(L3Cache), [0, 1, 2, 3], "a locality larger than the level leaves the order");
    }
}

#[test]
fn uneven_groups_drop_out() {
    let n = node("uneven-3plus1.xml");
    let gpus = n.class_indexes(DeviceClass::Gpu);
    assert_eq!(gpus.len(), 4);
    let il = map_by_device::plan::interleave(&n.topology, &n.devices, &gpus, map_by_device::spec::GroupLevel::Package);
    let pos: Vec<usize> = il.iter().map(|i| gpus.iter().position(|g| g == i).unwrap()).collect();
    assert_eq!(pos, [0, 3, 1, 2], "G0, G3, G1, G2");
}

#[test]
fn turin_environment() {
    for n in turins("turin_environment") {
        let p = run(&n, "gpu", 4).unwrap();
        for t in &p.tasks {
            let d = &n.devices[t.devices[0]];
            let uuid = &t.env["CUDA_VISIBLE_DEVICES"];
            assert!(uuid.starts_with("GPU-") && uuid.len() == 40, "{uuid}");
            assert_eq!(d.gpu_id().unwrap().display_id(), *uuid);
            assert!(t.env["PMIX_DEVICE_ID"].starts_with("gpu://") && t.env["PMIX_DEVICE_ID"].contains("::nvml"));
            assert!(!t.env.contains_key("CUDA_DEVICE_ORDER"));
            assert!(!t.env.contains_key("ROCR_VISIBLE_DEVICES"));
        }
        let uuids: std::collections::BTreeSet<&String> =
            p.tasks.iter().map(|t| &t.env["CUDA_VISIBLE_DEVICES"]).collect();
        assert_eq!(uuids.len(), 4, "each task its own GPU");
        let p = run(&n, "network:bind=none", 1).unwrap();
        let t = &p.tasks[0];
        assert_eq!(t.cpus, None, "bind=none leaves the mask alone");
        assert_eq!(t.env["NCCL_IB_HCA"], "=mlx5_0");
        if n.topology.hostname.as_deref() == Some("h200-1001") {
            // The real export recorded mlx5_0's port 1 as DOWN (Port1State=1): UCX is not
            // pointed at a dead port, and the plan says so.
            assert!(!t.env.contains_key("UCX_NET_DEVICES"));
            assert!(
                p.warnings.iter().any(|w| w.contains("mlx5_0") && w.contains("no active port")),
                "{:?}",
                p.warnings
            );
        } else {
            assert_eq!(t.env["UCX_NET_DEVICES"], "mlx5_0:1");
        }
        assert!(t.env["PMIX_DEVICE_ID"].starts_with("fab://"));
        assert!(!t.env.contains_key("PSM3_NIC"));
        // The plain Ethernet NIC gets no fabric variable.
        let p = run(&n, "eno6", 1).unwrap();
        assert!(!p.tasks[0].env.contains_key("NCCL_IB_HCA") && !p.tasks[0].env.contains_key("UCX_NET_DEVICES"));
    }
}

#[test]
fn refusals() {
    let n = node("turin-h200.xml");
    assert!(matches!(run(&n, "gpu", 5), Err(PlanError::TooManyTasks { .. })));
    assert!(matches!(run(&n, "gpu:ndev=2", 3), Err(PlanError::TooManyTasks { .. })));
    assert!(matches!(run(&n, "gpu:ndev=5", 1), Err(PlanError::NdevTooLarge { .. })));
    // A comma is refused where the spec is read; the node still says so for a name it is given.
    let e = Spec::parse("gpu,ndev=2").unwrap_err();
    assert!(e.to_string().contains("comma"), "{e}");
    let e = map_by_device::plan::named_device(&n, "gpu,ndev=2").unwrap_err();
    assert!(e.to_string().contains("comma"), "{e}");
    let none = node("no-gpu.xml");
    assert!(matches!(run(&none, "gpu", 1), Err(PlanError::NoDevices { .. })));
    assert!(run(&none, "none", 4).unwrap().tasks.is_empty());
    // No identity, no device mapping: the DRM-only export and a distro hwloc's view.
    let drm = node("drm-only.xml");
    assert_eq!(drm.class_indexes(DeviceClass::Gpu).len(), 2, "the ASPEED decoy is not a GPU");
    let e = run(&drm, "gpu", 1).unwrap_err();
    assert!(matches!(e, PlanError::NoIdentity { .. }), "{e}");
    assert!(e.to_string().contains("NVML") && e.to_string().contains("proc_root"), "{e}");
    if let Some(path) = common::reference("turin-4gpu.xml", "refusals on the real DRM-only Turin export") {
        let real = node_at(path, NodeOptions::default());
        assert_eq!(real.class_indexes(DeviceClass::Gpu).len(), 4);
        assert!(matches!(run(&real, "gpu", 1), Err(PlanError::NoIdentity { .. })));
        // Network mapping needs no GPU identity.
        assert!(run(&real, "network", 2).is_ok());
    }
}

#[test]
fn allowed_cpus_bound_every_mask() {
    let n = node("turin-h200.xml");
    let spec = Spec::parse("gpu:bind=core").unwrap();
    let allowed = CpuSet::parse_list("20-23,148-151,32-35").unwrap();
    let f = StepFacts { ntasks: 2, allowed_cpus: Some(allowed.clone()), ..StepFacts::default() };
    let p = plan(&spec, &n, &f).unwrap();
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), "20,148", "first allowed core near GPU0");
    assert_eq!(p.tasks[1].cpus.as_ref().unwrap().to_list(), "32");
    for t in &p.tasks {
        assert!(t.cpus.as_ref().unwrap().is_subset(&allowed));
    }
    // The GPUs whose localities lie outside the step's CPUs cannot be bound: only two to give.
    let f = StepFacts { ntasks: 3, allowed_cpus: Some(allowed), ..StepFacts::default() };
    let e = plan(&spec, &n, &f).unwrap_err();
    assert!(matches!(e, PlanError::TooFewNear { have: 2, .. }), "{e}");
    assert!(e.to_string().contains("cuda2 at CPUs 96-111,224-239") && e.to_string().contains("20-23"), "{e}");
}

#[test]
fn cpus_per_task_is_the_default_pe_for_core_binding() {
    let n = node("turin-h200.xml");
    // --cpus-per-task counts CPUs: 4 CPUs on a node of two threads per core are 2 cores.
    let f = StepFacts { ntasks: 2, cpus_per_task: Some(4), ..StepFacts::default() };
    let p = plan(&Spec::parse("gpu:bind=core").unwrap(), &n, &f).unwrap();
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), cores("16-17"));
    let p = plan(&Spec::parse("gpu:hwtcpus").unwrap(), &n, &f).unwrap();
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), "16-17,144-145", "4 hardware threads");
    // An odd count rounds up to whole cores.
    let f3 = StepFacts { cpus_per_task: Some(3), ..f.clone() };
    let p = plan(&Spec::parse("gpu:bind=core").unwrap(), &n, &f3).unwrap();
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), cores("16-17"));
    // The default binding (locality) is not per core: cpus-per-task does not shrink it.
    let p = plan(&Spec::parse("gpu").unwrap(), &n, &f).unwrap();
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), cores("16-31"));
}

#[test]
fn step_gpus_narrow_the_list() {
    let n = node("turin-h200.xml");
    let f = StepFacts { ntasks: 2, step_gpus: Some(vec![1, 3]), ..StepFacts::default() };
    let p = plan(&Spec::parse("gpu").unwrap(), &n, &f).unwrap();
    let bus: Vec<String> = p.tasks.iter().map(|t| n.devices[t.devices[0]].busid_text()).collect();
    assert_eq!(bus, ["0000:16:00.0", "0000:e6:00.0"]);
    let f = StepFacts { ntasks: 3, step_gpus: Some(vec![1, 3]), ..StepFacts::default() };
    assert!(matches!(plan(&Spec::parse("gpu").unwrap(), &n, &f), Err(PlanError::TooManyTasks { .. })));
    let f = StepFacts { ntasks: 1, step_gpus: Some(vec![7]), ..StepFacts::default() };
    assert!(matches!(plan(&Spec::parse("gpu").unwrap(), &n, &f), Err(PlanError::StepGpuOutOfRange { .. })));
}

#[test]
fn closest_follows_the_existing_binding() {
    let n = node("turin-h200.xml");
    let spec = Spec::parse("gpu:closest").unwrap();
    let bound = |lists: &[&str]| StepFacts {
        ntasks: lists.len() as u32,
        task_cpus: Some(lists.iter().map(|l| CpuSet::parse_list(l).unwrap()).collect()),
        ..StepFacts::default()
    };
    let bus = |p: &Plan| p.tasks.iter().map(|t| n.devices[t.devices[0]].busid_text()).collect::<Vec<_>>();
    // Core 100 sits in GPU2's NUMA; core 40 in GPU1's.
    let p = plan(&spec, &n, &bound(&["100", "40"])).unwrap();
    assert_eq!(bus(&p), ["0000:96:00.0", "0000:16:00.0"]);
    assert!(p.tasks.iter().all(|t| t.cpus.is_none()), "closest implies bind=none");
    // Core 0 (NUMA 0, no GPU): ties at the package, split by core order -> GPU0; core 63 -> GPU1.
    let p = plan(&spec, &n, &bound(&["0", "63"])).unwrap();
    assert_eq!(bus(&p), ["0000:06:00.0", "0000:16:00.0"]);
    // Two tasks nearest one GPU need shared.
    assert!(matches!(plan(&spec, &n, &bound(&["16", "17"])), Err(PlanError::ClosestCollision { .. })));
    assert!(plan(&Spec::parse("gpu:closest:shared").unwrap(), &n, &bound(&["16", "17"])).is_ok());
    // Unbound tasks take the plain order.
    let all = n.topology.all_cpus().to_list();
    let p = plan(&spec, &n, &bound(&[&all, &all])).unwrap();
    assert_eq!(bus(&p), ["0000:06:00.0", "0000:16:00.0"]);
}

#[test]
fn degenerate_topologies_warn_and_proceed() {
    for name in ["degenerate-one-complex.xml", "degenerate-machine.xml"] {
        let n = node(name);
        let p = run(&n, "gpu", 4).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ids: std::collections::BTreeSet<_> =
            p.tasks.iter().map(|t| t.env["CUDA_VISIBLE_DEVICES"].clone()).collect();
        assert_eq!(ids.len(), 4, "{name}: each task its own GPU");
        if name == "degenerate-machine.xml" {
            // The default split gives each task its own share, none nearer its GPU than another.
            assert!(
                p.warnings.iter().any(|w| w.contains("binding could not be made more specific")),
                "{:?}",
                p.warnings
            );
            let shares: Vec<String> = p.tasks.iter().map(|t| t.cpus.as_ref().unwrap().to_list()).collect();
            assert_eq!(shares, ["0-3", "4-7", "8-11", "12-15"], "{name}");
            let whole = run(&n, "gpu:bind=locality", 4).unwrap();
            assert!(
                whole.warnings.iter().any(|w| w.contains("binding could not be made more specific")),
                "{name}: {:?}",
                whole.warnings
            );
            // Package binding is finer than a Machine locality: tasks spread over packages.
            let c = cpus(&n, "gpu:bind=package", 2);
            assert_ne!(c[0], c[1]);
        } else {
            // Package-local GPUs: bind=package is exactly the locality, so it is accepted.
            assert!(run(&n, "gpu:bind=package", 4).is_ok());
        }
    }
}

#[test]
fn amd_node_pads_rocm_smi_ids() {
    let n = node("amd-mi250x.xml");
    let gpus = n.class_indexes(DeviceClass::Gpu);
    assert_eq!(gpus.len(), 8);
    let p = run(&n, "gpu", 8).unwrap();
    for t in &p.tasks {
        let v = &t.env["ROCR_VISIBLE_DEVICES"];
        assert!(v.starts_with("GPU-") && v.len() == 20, "GPU- + 16 hex digits: {v}");
        assert!(!t.env.contains_key("CUDA_VISIBLE_DEVICES"));
    }
    assert!(p.tasks.iter().any(|t| t.env["ROCR_VISIBLE_DEVICES"].starts_with("GPU-0")), "a zero-padded id");
}

#[test]
fn intel_level_zero_mask_and_model() {
    let opts = |m| NodeOptions { ze_hierarchy: m, ..NodeOptions::default() };
    let n = node_at(fixture("intel-pvc.xml"), opts(Some(ZeHierarchy::Composite)));
    let p = run(&n, "gpu", 2).unwrap();
    assert_eq!(p.tasks[0].env["ZE_AFFINITY_MASK"], "0");
    assert_eq!(p.tasks[1].env["ZE_AFFINITY_MASK"], "1");
    assert_eq!(p.tasks[0].env["ZE_FLAT_DEVICE_HIERARCHY"], "COMPOSITE");
    // The task already names the same model: only the mask.
    let mut env = BTreeMap::new();
    env.insert("ZE_FLAT_DEVICE_HIERARCHY".to_string(), "composite".to_string());
    let f = StepFacts { ntasks: 1, env: env.clone(), ..StepFacts::default() };
    let p = plan(&Spec::parse("gpu").unwrap(), &n, &f).unwrap();
    assert!(
        p.tasks[0].env.contains_key("ZE_AFFINITY_MASK") && !p.tasks[0].env.contains_key("ZE_FLAT_DEVICE_HIERARCHY")
    );
    // A different model: set neither, and say so.
    env.insert("ZE_FLAT_DEVICE_HIERARCHY".to_string(), "FLAT".to_string());
    let f = StepFacts { ntasks: 1, env, ..StepFacts::default() };
    let p = plan(&Spec::parse("gpu").unwrap(), &n, &f).unwrap();
    assert!(
        !p.tasks[0].env.contains_key("ZE_AFFINITY_MASK") && !p.tasks[0].env.contains_key("ZE_FLAT_DEVICE_HIERARCHY")
    );
    assert!(p.warnings.iter().any(|w| w.contains("FLAT") && w.contains("COMPOSITE")), "{:?}", p.warnings);
    // Unknown discovery model: the GPU cannot be named, so the mapping is refused with the
    // admin's fix (seed 000: a mapping that then declines to act looks like a working run)...
    let n = node_at(fixture("intel-pvc.xml"), opts(None));
    let e = run(&n, "gpu", 1).unwrap_err();
    assert!(matches!(e, PlanError::NoIdentity { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("ze0") && text.contains("hierarchy model") && text.contains("sets ze_hierarchy"), "{text}");
    assert!(text.contains(":env=none") && !text.contains('\n'), "{text}");
    // ... unless the job says it wants placement only: bound, told PMIX_DEVICE_ID only.
    let p = run(&n, "gpu:env=none", 2).unwrap();
    assert!(p.tasks.iter().all(|t| t.env.keys().eq(["PMIX_DEVICE_ID"].iter())), "{:?}", p.tasks);
    assert!(p.tasks.iter().all(|t| t.cpus.is_some()));
    assert!(p.warnings.iter().any(|w| w.contains("env=none") && w.contains("every device")), "{:?}", p.warnings);
}

#[test]
fn omnipath_gets_psm3_only() {
    let n = node("omnipath.xml");
    // openfabrics is a synonym of network, and neither holds the Ethernet NIC at 03:00.0.
    let p = run(&n, "openfabrics", 2).unwrap();
    let hfis: Vec<Option<&String>> = p.tasks.iter().map(|t| t.env.get("PSM3_NIC")).collect();
    assert_eq!(hfis, [Some(&"hfi1_0".to_string()), Some(&"hfi1_1".to_string())]);
    assert!(matches!(run(&n, "openfabrics", 3), Err(PlanError::TooManyTasks { .. })));
    let p = run(&n, "hfi1_1", 1).unwrap();
    assert_eq!(p.tasks[0].env["PSM3_NIC"], "hfi1_1");
    assert_eq!(p.tasks[0].cpus.as_ref().unwrap().to_list(), "8-15");
    for t in &p.tasks {
        for never in ["HFI_UNIT", "FI_OPX_HFI_SELECT", "NCCL_IB_HCA", "UCX_NET_DEVICES"] {
            assert!(!t.env.contains_key(never), "{never}");
        }
    }
}

#[test]
fn every_real_topology_maps_or_refuses_clearly() {
    let Some(dir) = common::reference_dir() else {
        common::skipped("every_real_topology_maps_or_refuses_clearly");
        return;
    };
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("the reference directory is readable") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("xml") {
            continue;
        }
        seen += 1;
        let n = node_at(path.clone(), NodeOptions::default());
        for spec in ["gpu", "network", "block", "gpu:interleave:bind=core", "network:ndev=2:shared"] {
            match run(&n, spec, 2) {
                Ok(p) => {
                    assert_eq!(p.tasks.len(), 2);
                    for t in &p.tasks {
                        let c = t.cpus.as_ref().unwrap();
                        assert!(!c.is_empty() && c.is_subset(&n.topology.all_cpus()), "{}: {spec}", path.display());
                        assert!(
                            t.env.contains_key("PMIX_DEVICE_ID") || spec.starts_with("block"),
                            "{}: {spec}",
                            path.display()
                        );
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    assert!(!text.contains('\n') && text.len() > 40, "{}: {spec}: {text}", path.display());
                }
            }
        }
    }
    assert!(seen >= 12, "all real topologies read ({seen})");
}

/// Found by the planner's fuzz target: the comma hint quoted the device name raw, control
/// characters included.
#[test]
fn an_unknown_device_is_named_on_one_printable_line() {
    let n = node("e2e-2gpu.xml");
    let e = map_by_device::plan::named_device(&n, "x\u{1f},ndev=2").unwrap_err().to_string();
    assert!(e.contains("write them with ':' (x\\u{1f}:ndev=2") && !e.chars().any(char::is_control), "{e}");
    // A list of names is said to be one, printably too.
    let e = map_by_device::plan::named_device(&n, "x\u{1f},y").unwrap_err().to_string();
    assert!(e.contains("lists of devices are not supported") && !e.chars().any(char::is_control), "{e}");
    // The spec itself is refused first, where it is read, on one printable line too.
    let e = Spec::parse("x\u{1f},y\r").unwrap_err().to_string();
    assert!(e.contains("x\\u{1f},y") && e.contains("lists of devices") && !e.chars().any(char::is_control), "{e}");
    let e = Spec::parse("x\u{1f},ndev=2\r").unwrap_err().to_string();
    assert!(e.contains("write them with ':' (x\\u{1f}:ndev=2") && !e.chars().any(char::is_control), "{e}");
}

/// Found by the planner's fuzz target (fuzz/fuzz_targets/plan.rs): `pe=` under a cache level
/// the topology does not record (the synthetic node has no L1/L2 objects) made an empty CPU
/// set, which the kernel refuses at the task's start; it is refused with the fix instead.
#[test]
fn pe_under_a_level_the_node_lacks_is_refused_not_empty() {
    let n = node("synthetic-64gpu.xml");
    for spec in ["gpu:pe=6:bind=l1cache", "gpu:pe=2:bind=l2cache"] {
        match plan(&Spec::parse(spec).unwrap(), &n, &facts(4)) {
            Err(e @ PlanError::NoBindObject { .. }) => {
                assert!(e.to_string().contains("choose a finer bind level"), "{spec}: {e}")
            }
            other => panic!("{spec}: {other:?}"),
        }
    }
    // The levels it has still bind.
    let p = plan(&Spec::parse("gpu:pe=2:bind=l3cache").unwrap(), &n, &facts(4)).unwrap();
    assert!(p.tasks.iter().all(|t| !t.cpus.as_ref().unwrap().is_empty()));
}

/// The CPU rule's edges (the user guide, "How many tasks a CPU holds"): split shares stay
/// disjoint when one task's devices span another's locality; pe=N under bind=split is a
/// core binding; under bind=locality each task's N cores count against the locality; and a
/// region holds as many tasks as it has cores among the step's CPUs, not among all of its own.
#[test]
fn cpu_rule_edges() {
    let pvc = node_at(
        fixture("intel-pvc.xml"),
        NodeOptions { ze_hierarchy: Some(ZeHierarchy::Flat), ..NodeOptions::default() },
    );
    // Task 1's GPUs are ze2 (package 0) and ze3 (package 1): package 0 is shared out.
    assert_eq!(cpus(&pvc, "gpu:ndev=2", 2), ["0-3,16-19", "4-15,20-31"]);
    // With overload, PRRTE's binding: each task its devices' whole localities.
    assert_eq!(cpus(&pvc, "gpu:ndev=2:overload", 2), ["0-7,16-23", "0-31"]);

    let n = node("turin-h200.xml");
    assert_eq!(cpus(&n, "gpu:bind=split:pe=4", 2), cpus(&n, "gpu:pe=4", 2));
    assert_eq!(cpus(&n, "gpu:bind=split:pe=4", 2), ["16-19,144-147", "32-35,160-163"]);
    // bind=locality:pe=8: the whole locality, two tasks' 8 cores each fill its 16 ...
    let p = cpus(&n, "gpu:shared:bind=locality:pe=8", 8);
    assert_eq!(p[0], "16-31,144-159");
    assert_eq!(p[4], "16-31,144-159");
    // ... and a third task's would not fit.
    let e = run(&n, "gpu:shared:bind=locality:pe=6", 12).unwrap_err();
    assert!(matches!(e, PlanError::Overloaded { task: 8, .. }), "{e}");

    // A step holding two cores of cuda0's first L3: bind=l3cache holds two tasks there.
    let step = |ntasks| StepFacts {
        ntasks,
        allowed_cpus: Some(CpuSet::parse_list("16-17,144-145").unwrap()),
        ..StepFacts::default()
    };
    let spec = Spec::parse("gpu:shared:bind=l3cache").unwrap();
    let p = plan(&spec, &n, &step(2)).unwrap();
    assert!(p.tasks.iter().all(|t| t.cpus.as_ref().unwrap().to_list() == "16-17,144-145"));
    let e = plan(&spec, &n, &step(3)).unwrap_err();
    assert!(matches!(e, PlanError::Overloaded { task: 2, .. }), "{e}");
    let spec = Spec::parse("gpu:shared:bind=l3cache:overload").unwrap();
    assert_eq!(plan(&spec, &n, &step(3)).unwrap().tasks.len(), 3);
}

mod invariants {
    use super::*;
    use map_by_device::topology::ObjKind;
    use proptest::prelude::*;

    /// Every fixture of `topologies/`, loaded once. The Intel node is given its hierarchy
    /// model, so that its GPUs map (without it every GPU plan there is refused).
    fn fixtures() -> &'static Vec<(String, Node)> {
        static NODES: std::sync::OnceLock<Vec<(String, Node)>> = std::sync::OnceLock::new();
        NODES.get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies");
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".xml"))
                .collect();
            names.sort();
            assert!(names.len() >= 17, "the fixtures of topologies/: {names:?}");
            // The end-to-end suite's own fixture too (one package, two sub-NUMA clusters).
            names.push("../tests/e2e/fixtures/e2e-snc-2gpu.xml".into());
            names
                .into_iter()
                .map(|name| {
                    let ze_hierarchy = (name == "intel-pvc.xml").then_some(ZeHierarchy::Flat);
                    // DRM-only GPUs are named from the NVIDIA driver's files kept beside them.
                    let proc_root = name.contains("drm").then(|| dir.join("drivers/nvidia/proc"));
                    let options = NodeOptions { ze_hierarchy, proc_root, ..NodeOptions::default() };
                    let n = node_at(dir.join(&name), options);
                    (name, n)
                })
                .collect()
        })
    }

    const SPECS: [&str; 30] = [
        "gpu",
        "gpu:bind=core",
        "gpu:interleave:bind=core",
        "gpu:pe=3",
        "gpu:bind=hwthread",
        "network:bind=l3cache",
        "gpu:ndev=2:bind=numa",
        "network:interleave=numa:pe=2:hwtcpus",
        "gpu:shared:pe=5",
        "gpu:ppr=3:bind=core",
        "gpu:shared:bind=core:overload",
        "gpu:ppr=2:pe=4:hwtcpus",
        "gpu:shared",
        "gpu:ppr=3:hwtcpus",
        "gpu:ndev=auto",
        "gpu:ndev=2:compact:omp",
        "network:shared:omp",
        "gpu:shared:bind=locality",
        "gpu:shared:bind=numa",
        "gpu:shared:bind=l3cache",
        "gpu:shared:bind=l3cache:hwtcpus",
        "gpu:shared:bind=locality:pe=2",
        "gpu:shared:bind=split:pe=2",
        "gpu:shared:bind=numa:pe=3",
        "gpu:shared:ndev=2",
        "gpu:shared:bind=locality:overload",
        "gpu:adapters:ndev=auto:compact",
        "block:shared",
        "gpu:shared:bind=package",
        "network:ppr=2:bind=l2cache",
    ];

    /// The cores (hardware threads with `hwtcpus`) that hold any of `cpus`: a step may hold
    /// only some threads of a core, which then still counts as one.
    fn units(n: &Node, cpus: &CpuSet, hwtcpus: bool) -> usize {
        let kind = if hwtcpus { ObjKind::Pu } else { ObjKind::Core };
        let count = n.topology.of_kind(kind).filter(|o| o.cpuset.intersects(cpus)).count();
        if count == 0 {
            cpus.len()
        } else {
            count
        }
    }

    /// The step's CPUs: `None` (the whole node) or the node's CPUs at the positions picked.
    fn step_cpus(n: &Node, whole: bool, picks: &[usize]) -> Option<CpuSet> {
        let all: Vec<u32> = n.topology.all_cpus().iter().collect();
        (!whole).then(|| picks.iter().map(|p| all[p % all.len()]).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1500))]
        /// On every fixture, whatever the step's CPUs, the engine's CPU rule (the user guide,
        /// "How many tasks a CPU holds"):
        /// - every mask is non-empty and inside the step's CPUs;
        /// - core, hwthread and split bindings (pe=N alone is a core binding): no two tasks'
        ///   CPU sets overlap unless `overload`; a split share lies inside its devices' own
        ///   localities;
        /// - wider bindings (locality, numa, l1/l2/l3cache, package): no region (one CPU set
        ///   handed to several tasks) holds more tasks than it has cores, hardware threads with
        ///   `hwtcpus`, unless `overload`; with pe=N each of its tasks counts N;
        /// - with pe=N at a core, hwthread or split binding every task has exactly N cores
        ///   (threads with `hwtcpus`);
        /// - the only refusals are the documented ones, and `overload` is never refused for
        ///   sharing CPUs.
        #[test]
        fn masks_follow_the_cpu_rule_on_every_fixture(
            fixture in 0usize..64,
            spec in 0..SPECS.len(),
            ntasks in 1u32..13,
            whole in proptest::bool::weighted(0.25),
            picks in proptest::collection::vec(0usize..4096, 1..200),
        ) {
            let (name, n) = &fixtures()[fixture % fixtures().len()];
            let allowed = step_cpus(n, whole, &picks);
            let step = allowed.clone().unwrap_or_else(|| n.topology.all_cpus());
            let facts = StepFacts { ntasks, allowed_cpus: allowed, ..StepFacts::default() };
            let spec = Spec::parse(SPECS[spec]).unwrap();
            let level = spec.bind_level();
            let per_core = matches!(level, BindLevel::Core | BindLevel::HwThread | BindLevel::Split);
            match plan(&spec, n, &facts) {
                Ok(p) => {
                    prop_assert_eq!(p.tasks.len(), ntasks as usize);
                    let masks: Vec<&CpuSet> = p.tasks.iter().map(|t| t.cpus.as_ref().unwrap()).collect();
                    for (t, c) in p.tasks.iter().zip(&masks) {
                        prop_assert!(!c.is_empty() && c.is_subset(&step), "{}: task {} got {}", name, t.task, c);
                        if let (Some(pe), true) = (spec.pe, per_core) {
                            prop_assert_eq!(units(n, c, spec.hwtcpus), pe as usize, "{}: task {} got {}", name, t.task, c);
                        }
                    }
                    if level == BindLevel::Split && spec.pe.is_none() {
                        for (t, c) in p.tasks.iter().zip(&masks) {
                            let near = t.devices.iter().fold(CpuSet::new(), |a, &d| a.union(&n.devices[d].locality));
                            prop_assert!(c.is_subset(&near), "{}: task {} got {} outside {}", name, t.task, c, near);
                        }
                    }
                    if spec.overload {
                        return Ok(());
                    }
                    if per_core {
                        for (i, a) in masks.iter().enumerate() {
                            for (j, b) in masks.iter().enumerate().skip(i + 1) {
                                prop_assert!(!a.intersects(b), "{}: tasks {} and {} overlap: {} {}", name, i, j, a, b);
                            }
                        }
                    } else {
                        let hwtcpus = spec.hwtcpus;
                        for m in &masks {
                            let k = masks.iter().filter(|x| *x == m).count() * spec.pe.unwrap_or(1) as usize;
                            prop_assert!(k <= units(n, m, hwtcpus),
                                "{}: CPUs {} hold {} tasks' worth but have {} units", name, m, k, units(n, m, hwtcpus));
                        }
                    }
                }
                Err(e) => {
                    let allowed_ok = matches!(e, PlanError::OutsideAllocation { .. } | PlanError::NoBindObject { .. }
                        | PlanError::TooManyTasks { .. } | PlanError::PeTooLarge { .. } | PlanError::Overloaded { .. }
                        | PlanError::SplitTooMany { .. } | PlanError::NdevAuto { .. } | PlanError::NoDevices { .. }
                        | PlanError::NoLocalDevice { .. } | PlanError::NdevTooLarge { .. } | PlanError::TooFewNear { .. }
                        | PlanError::BindAboveLocality { .. } | PlanError::NoIdentity { .. });
                    prop_assert!(allowed_ok, "{}: unexpected refusal: {}", name, e);
                    if let PlanError::NoIdentity { .. } = e {
                        // Only where a GPU has no name its runtime takes (DRM-only GPUs whose
                        // driver file is not among those kept beside the fixtures).
                        prop_assert!(name.contains("drm"), "{}: {}", name, e);
                    }
                    let overloaded = matches!(e, PlanError::Overloaded { .. } | PlanError::SplitTooMany { .. });
                    prop_assert!(!(spec.overload && overloaded), "{}: overload was asked: {}", name, e);
                }
            }
        }
    }
}
