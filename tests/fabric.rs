//! Issue 36 on the fixtures of its shapes and on the real exports it was measured on: which
//! adapters are a fabric (Slingshot, InfiniBand rails, never a management port or a function
//! without RDMA), Slingshot's variable, every NVMe namespace its own device and never a DVD,
//! and the messages a real export needs (no I/O objects, one PCI address for several devices,
//! a list of device names).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use map_by_device::device::{DeviceClass, Fabric, HeldBack};
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{named_device, plan, Plan, PlanError, StepFacts};
use map_by_device::spec::Spec;
use std::path::PathBuf;

mod common;

fn node_at(path: PathBuf) -> Node {
    Node::new(load::from_xml_file(&path).unwrap_or_else(|e| panic!("{e}")), NodeOptions::default())
}

fn fixture(name: &str) -> Node {
    node_at(common::fixture(name))
}

/// A real export, or `None` after a `skipped:` line where `../shared/topologies` is absent.
fn real(name: &str, test: &str) -> Option<Node> {
    common::reference(name, test).map(node_at)
}

fn run(n: &Node, spec: &str, ntasks: u32) -> Result<Plan, PlanError> {
    plan(&Spec::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}")), n, &StepFacts { ntasks, ..StepFacts::default() })
}

fn ok(n: &Node, spec: &str, ntasks: u32) -> Plan {
    run(n, spec, ntasks).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// Each task's device names, joined per task with `+`.
fn names(n: &Node, p: &Plan) -> Vec<String> {
    p.tasks.iter().map(|t| t.devices.iter().map(|&d| n.devices[d].name.clone()).collect::<Vec<_>>().join("+")).collect()
}

fn var<'a>(p: &'a Plan, task: usize, name: &str) -> Option<&'a str> {
    p.tasks[task].env.get(name).map(String::as_str)
}

#[test]
fn one_slingshot_nic_per_apu_never_the_management_port() {
    for (file, nic, cxi) in [("apu-slingshot.xml", "hsi", false), ("apu-slingshot-cxi.xml", "hsn", true)] {
        let n = fixture(file);
        let p = ok(&n, "network", 4);
        let want: Vec<String> = (0..4).map(|k| format!("{nic}{k}")).collect();
        assert_eq!(names(&n, &p), want, "{file}");
        for (t, task) in p.tasks.iter().enumerate() {
            let d = &n.devices[task.devices[0]];
            assert_eq!(d.fabric, Some(Fabric::Slingshot), "{file}");
            let cpus = task.cpus.as_ref().unwrap().to_list();
            assert_eq!(cpus, format!("{}-{}", 4 * t, 4 * t + 3), "{file}: task {t} on APU {t}'s CPUs");
            // One value for the node, where hwloc names the CXI devices; never derived from hsiN.
            let want = cxi.then_some("cxi0,cxi1,cxi2,cxi3");
            assert_eq!(var(&p, t, "FI_CXI_DEVICE_NAME"), want, "{file}");
            for v in ["NCCL_IB_HCA", "UCX_NET_DEVICES", "PSM3_NIC"] {
                assert!(var(&p, t, v).is_none(), "{file}: {v}");
            }
        }
        assert!(p.warnings.is_empty(), "{file}: {:?}", p.warnings);
        assert!(matches!(run(&n, "network", 5), Err(PlanError::TooManyTasks { have: 4, .. })), "{file}");
        // Each APU is paired with its own NIC.
        let p = ok(&n, "gpu:adapters", 4);
        for (t, task) in p.tasks.iter().enumerate() {
            let paired: Vec<&str> = task.adapters.iter().map(|a| n.devices[a.device].name.as_str()).collect();
            assert_eq!(paired, [format!("{nic}{t}")], "{file}: task {t}");
            assert!(var(&p, t, "PMIX_DEVICE_ID").unwrap().contains(&format!("ipv4://02:00:00:00:36:1{t}")));
        }
        assert!(!p.warnings.iter().any(|w| w.contains("adapters:")), "{file}: {:?}", p.warnings);
        // The management port is held back, but the job may name it: no fabric variable.
        let mgmt = n.devices.iter().find(|d| d.name == "enp129s0").unwrap();
        assert_eq!(mgmt.held_back, Some(HeldBack::PlainEthernet));
        let p = ok(&n, "enp129s0", 1);
        assert_eq!(p.tasks[0].env.keys().collect::<Vec<_>>(), ["PMIX_DEVICE_ID"], "{file}");
    }
}

#[test]
fn four_ib_rails_two_per_socket_never_the_ethernet_ports() {
    let n = fixture("rails-2socket.xml");
    let p = ok(&n, "openfabrics", 4);
    assert_eq!(names(&n, &p), ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
    let cpus: Vec<String> = p.tasks.iter().map(|t| t.cpus.as_ref().unwrap().to_list()).collect();
    assert_eq!(cpus, ["0-1", "2-3", "4-5", "6-7"], "two rails per socket");
    assert!(p.tasks.iter().all(|t| t.env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_2,mlx5_3"));
    assert!(matches!(run(&n, "network", 5), Err(PlanError::TooManyTasks { have: 4, .. })));
    // Two tasks on one socket's rails: the plan says so, and how to spread them.
    let p = ok(&n, "network", 2);
    assert_eq!(names(&n, &p), ["mlx5_0", "mlx5_1"]);
    assert!(p.warnings.iter().any(|w| w.contains("network:interleave=package") && w.contains("mlx5_2, mlx5_3")));
    let p = ok(&n, "network:interleave=package", 2);
    assert_eq!(names(&n, &p), ["mlx5_0", "mlx5_2"]);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    // Each GPU its socket's rail.
    let p = ok(&n, "gpu:adapters", 4);
    let paired: Vec<&str> = p.tasks.iter().map(|t| n.devices[t.adapters[0].device].name.as_str()).collect();
    assert!(paired[..2].iter().all(|a| ["mlx5_0", "mlx5_1"].contains(a)), "{paired:?}");
    assert!(paired[2..].iter().all(|a| ["mlx5_2", "mlx5_3"].contains(a)), "{paired:?}");
    // A list of names is said to be one, with what to use instead; no suggestion that fails.
    let e = Spec::parse("nvml0,nvml3").unwrap_err().to_string();
    assert!(e.contains("lists of devices are not supported") && e.contains("map their class"), "{e}");
    assert!(!e.contains("nvml0:nvml3"), "{e}");
    let e = Spec::parse("gpu,ndev=2").unwrap_err().to_string();
    assert!(e.contains("write them with ':' (gpu:ndev=2)"), "{e}");
}

#[test]
fn a_virtual_function_without_rdma_is_never_a_fabric_adapter() {
    let n = fixture("vm-ib-vf.xml");
    let an = n.devices.iter().find(|d| d.name == "mlx5_an0").unwrap();
    assert_eq!((an.fabric, an.held_back), (None, Some(HeldBack::NoRdmaAddress)));
    let p = ok(&n, "network", 1);
    assert_eq!(names(&n, &p), ["mlx5_ib0"]);
    assert_eq!(var(&p, 0, "NCCL_IB_HCA"), Some("=mlx5_ib0"));
    assert_eq!(var(&p, 0, "UCX_NET_DEVICES"), Some("mlx5_ib0:1"));
    assert!(matches!(run(&n, "network", 2), Err(PlanError::TooManyTasks { have: 1, .. })));
    // Named: the job's, but no variable tries RDMA over it.
    let p = ok(&n, "mlx5_an0", 1);
    for v in ["NCCL_IB_HCA", "UCX_NET_DEVICES"] {
        assert!(var(&p, 0, v).is_none(), "{v}");
    }
}

#[test]
fn every_namespace_is_a_device_and_a_dvd_is_never_handed_out() {
    let n = fixture("nvme-namespaces.xml");
    let p = ok(&n, "block:bind=none", 5);
    assert_eq!(names(&n, &p), ["nvme0n1", "nvme0n2", "nvme1n1", "nvme1n2", "sda"], "bus, then namespace order");
    assert!(matches!(run(&n, "block", 6), Err(PlanError::TooManyTasks { have: 5, .. })));
    let p = ok(&n, "nvme1n1", 1);
    assert_eq!(names(&n, &p), ["nvme1n1"]);
    assert_eq!(var(&p, 0, "PMIX_DEVICE_ID"), Some("blk://nvme1n1"));
    let p = ok(&n, "blk://nvme1n2", 1);
    assert_eq!(names(&n, &p), ["nvme1n2"]);
    let sr0 = n.devices.iter().find(|d| d.name == "sr0").unwrap();
    assert_eq!((sr0.class, sr0.held_back), (DeviceClass::Block, Some(HeldBack::RemovableMedia)));
    let e = run(&n, "sr0", 1).unwrap_err();
    assert!(matches!(e, PlanError::NeverHandedOut { .. }) && e.to_string().contains("removable media"), "{e}");
    // A drive's bus id names its namespaces: ambiguous, naming them.
    let e = named_device(&n, "0000:03:00.0").unwrap_err();
    assert!(matches!(e, PlanError::AmbiguousName { count: 2, .. }), "{e}");
    assert!(e.to_string().contains("(nvme1n1, nvme1n2)"), "{e}");
}

#[test]
fn the_real_exports_of_issue_36() {
    let test = "the_real_exports_of_issue_36";
    let Some(elcap) = real("elcap.xml", test) else { return };
    let p = ok(&elcap, "network", 4);
    assert_eq!(names(&elcap, &p), ["hsi0", "hsi1", "hsi2", "hsi3"]);
    let p = ok(&elcap, "gpu:adapters", 4);
    let paired: Vec<&str> = p.tasks.iter().map(|t| elcap.devices[t.adapters[0].device].name.as_str()).collect();
    assert_eq!(paired, ["hsi0", "hsi1", "hsi2", "hsi3"]);
    let p = ok(&elcap, "nvme1n1", 1);
    assert_eq!(var(&p, 0, "PMIX_DEVICE_ID"), Some("blk://nvme1n1"));
    assert_eq!(elcap.class_indexes(DeviceClass::Block).len(), 33, "32 namespaces and sda");

    let Some(summit) = real("summit-h17n08.xml", test) else { return };
    let p = ok(&summit, "openfabrics", 4);
    assert_eq!(names(&summit, &p), ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);

    let Some(azure) = real("azure-hbv4.xml", test) else { return };
    let p = ok(&azure, "network", 1);
    assert_eq!(var(&p, 0, "NCCL_IB_HCA"), Some("=mlx5_ib0"));
    assert!(azure.class_indexes(DeviceClass::Block).iter().all(|&i| azure.devices[i].name != "sr0"));

    let Some(gh200) = real("nvidia-gh-200.xml", test) else { return };
    let e = run(&gh200, "gpu", 1).unwrap_err();
    assert!(matches!(e, PlanError::NoIoDevices { .. }) && e.to_string().contains("lstopo --whole-io"), "{e}");

    let Some(tpx) = real("tuo.TPX.xml", test) else { return };
    let e = named_device(&tpx, "0000:02:00.0").unwrap_err();
    assert!(e.to_string().contains("names 3 devices") && e.to_string().contains("rsmi0, rsmi1, rsmi2"), "{e}");
}
