//! GPU identity from kernel driver files, for nodes whose hwloc has no vendor backend:
//! present, absent and malformed files, for NVIDIA and AMD, read from the fixture trees in
//! `topologies/drivers/`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use map_by_device::cpuset::CpuSet;
use map_by_device::device::{DeviceClass, GpuIdentity, IdentitySource};
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, PlanError, StepFacts};
use map_by_device::spec::Spec;
use map_by_device::topology::{CpuObject, ObjKind, OsDevice, PciFunction, Topology};
use std::path::PathBuf;

fn root(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies").join(rel)
}

fn drm_node(xml: &str, proc_root: Option<&str>) -> Node {
    let topo = load::from_xml_file(&root(xml)).unwrap();
    Node::new(topo, NodeOptions { proc_root: proc_root.map(root), ..NodeOptions::default() })
}

fn gpu_plan(node: &Node, n: u32) -> Result<map_by_device::plan::Plan, PlanError> {
    plan(&Spec::parse("gpu").unwrap(), node, &StepFacts { ntasks: n, ..StepFacts::default() })
}

#[test]
fn nvidia_information_files_name_drm_only_gpus() {
    let with = drm_node("e2e-2gpu-drm.xml", Some("drivers/nvidia/proc"));
    let nvml = Node::new(load::from_xml_file(&root("e2e-2gpu.xml")).unwrap(), NodeOptions::default());
    let a = gpu_plan(&with, 2).unwrap();
    let b = gpu_plan(&nvml, 2).unwrap();
    for (x, y) in a.tasks.iter().zip(&b.tasks) {
        assert_eq!(x.env["CUDA_VISIBLE_DEVICES"], y.env["CUDA_VISIBLE_DEVICES"], "driver file and NVML agree");
        assert_eq!(x.cpus, y.cpus);
    }
    let d = &with.devices[a.tasks[0].devices[0]];
    match d.identity_source() {
        Some(IdentitySource::DriverFile { path }) => assert!(path.ends_with("gpus/0000:17:00.0/information"), "{path}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn without_driver_files_the_refusal_names_both_fixes() {
    for proc_root in [None, Some("drivers/amd/sys")] {
        let node = drm_node("e2e-2gpu-drm.xml", proc_root);
        let e = gpu_plan(&node, 1).unwrap_err();
        assert!(matches!(e, PlanError::NoIdentity { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("NVML") && text.contains("/proc/driver/nvidia/gpus"), "{text}");
        assert!(text.contains("DRM devices"), "{text}");
    }
}

/// Hot-unplug: the topology (topology=, or slurmd's cache) still lists a GPU whose driver file
/// is gone. A plan that needs it is refused naming the file and the likely cause; a plan that
/// does not, maps; and the file back makes it whole again.
#[test]
fn a_gpu_whose_driver_file_vanished_is_refused_naming_the_file() {
    let tree = std::env::temp_dir().join(format!("mbd-unplug-{}", std::process::id()));
    let gpus = tree.join("driver/nvidia/gpus");
    std::fs::create_dir_all(&gpus).unwrap();
    for busid in ["0000:17:00.0", "0000:65:00.0"] {
        let from = root("drivers/nvidia/proc/driver/nvidia/gpus").join(busid).join("information");
        std::fs::create_dir_all(gpus.join(busid)).unwrap();
        std::fs::copy(from, gpus.join(busid).join("information")).unwrap();
    }
    let topo = load::from_xml_file(&root("e2e-2gpu-drm.xml")).unwrap();
    let node =
        |t: &Topology| Node::new(t.clone(), NodeOptions { proc_root: Some(tree.clone()), ..NodeOptions::default() });
    assert!(gpu_plan(&node(&topo), 2).is_ok());
    let gone = gpus.join("0000:65:00.0/information");
    std::fs::remove_file(&gone).unwrap();
    let e = gpu_plan(&node(&topo), 2).unwrap_err().to_string();
    assert!(e.starts_with("GPU renderD129 at 0000:65:00.0 on "), "{e}");
    assert!(e.contains(&format!("its driver file {} is gone", gone.display())), "{e}");
    assert!(
        e.contains("the GPU was removed since the topology was taken: export topology= again, or restart slurmd"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    // One task: the GPU that is still there.
    let one = gpu_plan(&node(&topo), 1).unwrap();
    assert_eq!(node(&topo).devices[one.tasks[0].devices[0]].busid_text(), "0000:17:00.0");
    std::fs::copy(root("drivers/nvidia/proc/driver/nvidia/gpus/0000:65:00.0/information"), &gone).unwrap();
    assert!(gpu_plan(&node(&topo), 2).is_ok());
    std::fs::remove_dir_all(&tree).unwrap();
}

#[test]
fn malformed_nvidia_files_are_refused_naming_the_file() {
    let node = drm_node("drm-only.xml", Some("drivers/nvidia-broken/proc"));
    let gpus = node.class_indexes(DeviceClass::Gpu);
    let problems: Vec<String> = gpus.iter().map(|&i| node.devices[i].identity_problem().unwrap().to_string()).collect();
    assert!(
        problems[0].contains("0000:17:00.0/information") && problems[0].contains("no 'GPU UUID:'"),
        "{}",
        problems[0]
    );
    assert!(problems[1].contains("0000:ca:00.0/information") && problems[1].contains("GPU-1234"), "{}", problems[1]);
    assert!(matches!(gpu_plan(&node, 1), Err(PlanError::NoIdentity { .. })));
    // The good tree names both GPUs of the same topology.
    let node = drm_node("drm-only.xml", Some("drivers/nvidia/proc"));
    assert_eq!(gpu_plan(&node, 2).unwrap().tasks.len(), 2);
}

/// An AMD node as a distribution's hwloc sees it: two MI250X GCDs with DRM devices only.
fn amd_drm_topology() -> Topology {
    let cpus = |l: &str| CpuSet::parse_list(l).unwrap();
    let obj = |kind, li, parent, c: &str, depth| CpuObject {
        kind,
        logical_index: li,
        os_index: Some(li),
        depth,
        parent,
        cpuset: cpus(c),
    };
    let drm = |name: &str| OsDevice { name: name.into(), osdev_type: "GPU".into(), subtype: None, infos: vec![] };
    let gcd = |bus: &str, loc, n: u32| PciFunction {
        busid: bus.parse().unwrap(),
        vendor_id: 0x1002,
        device_id: 0x7408,
        class_id: 0x0380,
        locality: loc,
        osdevs: vec![drm(&format!("card{n}")), drm(&format!("renderD{}", 128 + n))],
        bridges: Vec::new(),
    };
    Topology {
        hostname: Some("amd-drm".into()),
        objects: vec![
            obj(ObjKind::Machine, 0, None, "0-15", 0),
            obj(ObjKind::Package, 0, Some(0), "0-15", 1),
            obj(ObjKind::L3Cache, 0, Some(1), "0-7", 2),
            obj(ObjKind::L3Cache, 1, Some(1), "8-15", 2),
        ],
        pci: vec![gcd("0000:c1:00.0", 2, 0), gcd("0000:c6:00.0", 3, 1)],
        loose: vec![],
    }
}

#[test]
fn amd_unique_id_names_drm_only_gcds() {
    let opts = |sys: Option<&str>| NodeOptions { sys_root: sys.map(root), ..NodeOptions::default() };
    let node = Node::new(amd_drm_topology(), opts(Some("drivers/amd/sys")));
    let p = gpu_plan(&node, 2).unwrap();
    assert_eq!(p.tasks[0].env["ROCR_VISIBLE_DEVICES"], "GPU-0a5b1c2d3e4f5061");
    assert_eq!(p.tasks[1].env["ROCR_VISIBLE_DEVICES"], "GPU-7e1d2c3b4a596877");
    assert_eq!(p.tasks[1].cpus.as_ref().unwrap().to_list(), "8-15");
    assert!(matches!(node.devices[0].gpu_id(), Some(GpuIdentity::Amd { .. })));
    // Absent tree: refused, naming RSMI and the sysfs file.
    let node = Node::new(amd_drm_topology(), opts(None));
    let e = gpu_plan(&node, 1).unwrap_err().to_string();
    assert!(e.contains("RSMI") && e.contains("unique_id"), "{e}");
    // Malformed and zero ids: refused, naming the file.
    let node = Node::new(amd_drm_topology(), opts(Some("drivers/amd-broken/sys")));
    let gpus = node.class_indexes(DeviceClass::Gpu);
    assert!(node.devices[gpus[0]].identity_problem().unwrap().contains("c1:00.0/unique_id"));
    assert!(node.devices[gpus[1]].identity_problem().unwrap().contains("zero"));
    assert!(matches!(gpu_plan(&node, 1), Err(PlanError::NoIdentity { .. })));
}

/// A compute node whose `nvidia` driver runs without `nvidia-drm`, under an hwloc without
/// NVIDIA's backend (Debian's): hwloc shows each GPU as its PCI function and nothing below it
/// (measured on an H200 node, `tests/device/`). The GPUs are still the node's, named by the
/// driver file: `nvidia<minor>` (its `/dev/nvidiaN`) and its UUID, mapped as with NVML.
#[test]
fn nvidia_gpus_without_any_os_device_are_found_and_named_by_the_driver_file() {
    // The DRM-only fixture without its DRM devices: the GPUs' PCIDev objects, nothing below.
    let xml = std::fs::read_to_string(root("e2e-2gpu-drm.xml")).unwrap();
    let bare_xml: String =
        xml.lines().filter(|l| !l.contains(r#"osdev_type="1"/>"#)).map(|l| format!("{l}\n")).collect();
    assert_eq!(xml.lines().count() - bare_xml.lines().count(), 4, "the two cards and two render nodes");
    let topo = load::from_xml_str(&bare_xml).unwrap();
    assert!(topo.pci.iter().any(|f| f.vendor_id == 0x10de && f.osdevs.is_empty()), "the loader keeps them");
    let bare =
        Node::new(topo.clone(), NodeOptions { proc_root: Some(root("drivers/nvidia/proc")), ..NodeOptions::default() });
    let gpus: Vec<(&str, String)> = bare
        .devices
        .iter()
        .filter(|d| d.class == DeviceClass::Gpu)
        .map(|d| (d.name.as_str(), d.busid_text()))
        .collect();
    assert_eq!(gpus, [("nvidia0", "0000:17:00.0".to_string()), ("nvidia1", "0000:65:00.0".to_string())]);
    let nvml = Node::new(load::from_xml_file(&root("e2e-2gpu.xml")).unwrap(), NodeOptions::default());
    let (a, b) = (gpu_plan(&bare, 2).unwrap(), gpu_plan(&nvml, 2).unwrap());
    for (x, y) in a.tasks.iter().zip(&b.tasks) {
        assert_eq!(x.env["CUDA_VISIBLE_DEVICES"], y.env["CUDA_VISIBLE_DEVICES"], "driver file and NVML agree");
        assert_eq!(x.cpus, y.cpus);
    }
    // No driver file to read: found, but refused with both fixes and why hwloc shows nothing.
    let blind = Node::new(topo, NodeOptions::default());
    let e = gpu_plan(&blind, 1).unwrap_err().to_string();
    assert!(e.contains("GPU 0000:17:00.0 at 0000:17:00.0") && e.contains("nvidia-drm"), "{e}");
    assert!(e.contains("NVML") && e.contains("/proc/driver/nvidia/gpus"), "{e}");
}
