//! The hwloc loader against the real topologies in `../shared/topologies` (facts from its
//! SOURCES.md; reference data next to the checkout, skipped with a `skipped:` line where it
//! is absent), against the project's fixtures (every one must load with hwloc's built-in
//! minimal XML parser too) and against this machine.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use map_by_device::cpuset::CpuSet;
use map_by_device::load::{self, LoadError};
use map_by_device::topology::{ObjKind, PciFunction, Topology};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::fixture;

/// The reference exports' directory, or `None` after saying that `test` skipped them.
fn real(test: &str) -> Option<PathBuf> {
    let dir = common::reference_dir();
    if dir.is_none() {
        common::skipped(test);
    }
    dir
}

fn load(dir: &Path, name: &str) -> Topology {
    let path = dir.join(name);
    load::from_xml_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn count(t: &Topology, kind: ObjKind) -> usize {
    t.of_kind(kind).count()
}

fn function<'a>(t: &'a Topology, busid: &str) -> &'a PciFunction {
    let busid = busid.parse().unwrap();
    t.pci.iter().find(|f| f.busid == busid).unwrap_or_else(|| panic!("no {busid} with OS devices"))
}

fn names(f: &PciFunction) -> Vec<&str> {
    f.osdevs.iter().map(|d| d.name.as_str()).collect()
}

/// What SOURCES.md says about one file.
struct Facts {
    file: &'static str,
    packages: usize,
    numa: usize,
    cores: usize,
    pus: usize,
    /// GPU vendor, and how many display/accelerator functions of it carry OS devices.
    gpu_vendor: u16,
    gpus: usize,
    hostname: Option<&'static str>,
}

#[rustfmt::skip]
const FACTS: &[Facts] = &[
    f("nvidiaDGX2.xml", 2, 2, 4, 4, 0x10de, 16, None),
    f("coral-lassen.xml", 2, 2, 40, 160, 0x10de, 4, Some("lassen28")),
    f("g4dnmetal.xml", 2, 2, 48, 96, 0x10de, 8, Some("gpu-st-g4dnmetal-1")),
    f("eas-tioga.xml", 1, 4, 64, 128, 0x1002, 8, Some("tioga29")),
    f("epyc-corona-p2.xml", 2, 2, 48, 96, 0x1002, 8, Some("corona282")),
    f("cts1-quartz-smt1.xml", 2, 2, 36, 36, 0x10de, 0, Some("quartz386")),
    f("turin-4gpu-nvml.xml", 2, 8, 128, 256, 0x10de, 4, Some("h200-1001")),
    f("turin-4gpu.xml", 2, 8, 128, 256, 0x10de, 4, Some("h200-1001")),
    f("tuo.CPX.xml", 4, 4, 96, 192, 0x1002, 4, Some("testhost-amd")),
    f("ipa20.xml", 2, 8, 112, 224, 0x10de, 4, Some("testhost-nvidia")),
    f("corona.xml", 2, 2, 48, 96, 0x1002, 8, Some("corona263")),
    f("sierra.xml", 2, 6, 44, 176, 0x10de, 4, Some("sierra3682")),
    f("elcap.xml", 4, 4, 96, 96, 0x1002, 4, Some("tuolumne1001")),
    f("tuo.SPX.xml", 4, 4, 96, 192, 0x1002, 4, Some("testhost-amd")),
    f("tuo.TPX.xml", 4, 4, 96, 192, 0x1002, 4, Some("testhost-amd")),
    f("summit-h17n08.xml", 2, 2, 42, 168, 0x10de, 6, Some("h17n08")),
    f("azure-hbv4.xml", 2, 4, 176, 176, 0x15b3, 0, Some("tst4-hbv4-1")),
    f("lyra4-amd-vega20.xml", 1, 4, 24, 48, 0x1002, 1, Some("lyra4")),
    f("chimera.xml", 1, 2, 32, 64, 0x10de, 1, Some("chimera")),
    f("nvidia-gh-200.xml", 1, 1, 72, 72, 0x10de, 0, Some("hopper1")),
];

#[allow(clippy::too_many_arguments)]
const fn f(
    file: &'static str,
    packages: usize,
    numa: usize,
    cores: usize,
    pus: usize,
    gpu_vendor: u16,
    gpus: usize,
    hostname: Option<&'static str>,
) -> Facts {
    Facts { file, packages, numa, cores, pus, gpu_vendor, gpus, hostname }
}

/// Shape rules every loaded topology must follow, whatever the file.
fn check_shape(name: &str, t: &Topology) {
    let root = &t.objects[0];
    assert_eq!((root.kind, root.parent, root.depth), (ObjKind::Machine, None, 0), "{name}");
    let pus: CpuSet = t.of_kind(ObjKind::Pu).fold(CpuSet::new(), |a, p| a.union(&p.cpuset));
    assert_eq!(root.cpuset, pus, "{name}: Machine cpuset is the union of the PUs");
    for (i, o) in t.objects.iter().enumerate().skip(1) {
        let p = o.parent.unwrap_or_else(|| panic!("{name}: object {i} has no parent"));
        assert!(p < i, "{name}: parent {p} after child {i}");
        let parent = &t.objects[p];
        assert_ne!(parent.kind, ObjKind::NumaNode, "{name}: NUMA node {p} is a parent");
        assert!(o.cpuset.is_subset(&parent.cpuset), "{name}: {i} not inside its parent");
        let expected = if o.kind == ObjKind::NumaNode { parent.depth } else { parent.depth + 1 };
        assert_eq!(o.depth, expected, "{name}: depth of object {i} ({:?})", o.kind);
    }
    for pu in t.of_kind(ObjKind::Pu) {
        assert_eq!(pu.cpuset, CpuSet::single(pu.os_index.unwrap()), "{name}: PU cpuset");
    }
    let localities = t.pci.iter().map(|f| f.locality).chain(t.loose.iter().map(|l| l.locality));
    for l in localities {
        assert_ne!(t.objects[l].kind, ObjKind::NumaNode, "{name}: locality {l} is a NUMA node");
    }
    assert!(t.pci.iter().all(|f| !f.osdevs.is_empty()), "{name}: PCI function without osdev");
}

#[test]
fn every_topology_loads_with_the_documented_counts() {
    let Some(dir) = real("every_topology_loads_with_the_documented_counts") else { return };
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    files.sort();
    let mut known: Vec<String> = FACTS.iter().map(|f| f.file.to_string()).collect();
    known.sort();
    assert_eq!(files, known, "every XML in the directory needs a FACTS row (see SOURCES.md)");

    for facts in FACTS {
        let name = facts.file;
        let t = load(&dir, name);
        check_shape(name, &t);
        let got = (
            count(&t, ObjKind::Package),
            count(&t, ObjKind::NumaNode),
            count(&t, ObjKind::Core),
            count(&t, ObjKind::Pu),
        );
        let expected = (facts.packages, facts.numa, facts.cores, facts.pus);
        assert_eq!(got, expected, "{name}: packages, NUMA nodes, cores, PUs");
        assert_eq!(t.all_cpus().len(), facts.pus, "{name}");
        let vendor = facts.gpu_vendor;
        let gpus = t.pci.iter().filter(|f| f.vendor_id == vendor && is_gpu_class(f.class_id));
        assert_eq!(gpus.count(), facts.gpus, "{name}: GPU functions of {vendor:04x}");
        assert_eq!(t.hostname.as_deref(), facts.hostname, "{name}");
    }
}

/// Display (0x03xx) or processing accelerator (0x12xx).
fn is_gpu_class(class: u16) -> bool {
    class >> 8 == 0x03 || class >> 8 == 0x12
}

#[test]
fn turin_nvml_gpus_carry_cuda_opencl_and_nvml_devices() {
    let Some(dir) = real("turin_nvml_gpus_carry_cuda_opencl_and_nvml_devices") else { return };
    let t = load(&dir, "turin-4gpu-nvml.xml");
    let gpus: Vec<&PciFunction> = t.pci.iter().filter(|f| f.vendor_id == 0x10de).collect();
    assert_eq!(gpus.len(), 4);
    let mut uuids = Vec::new();
    for f in gpus {
        assert_eq!(f.device_id, 0x2335, "{}", f.busid);
        let names = names(f);
        for prefix in ["cuda", "opencl", "nvml"] {
            assert!(names.iter().any(|n| n.starts_with(prefix)), "{}: {names:?}", f.busid);
        }
        let nvml = f.osdevs.iter().find(|d| d.name.starts_with("nvml")).unwrap();
        assert_eq!((nvml.osdev_type.as_str(), nvml.subtype.as_deref()), ("GPU", Some("NVML")));
        assert_eq!(nvml.info("GPUModel"), Some("NVIDIA H200"));
        uuids.push(nvml.info("NVIDIAUUID").expect("NVIDIAUUID on the nvml osdev").to_string());
        let cuda = f.osdevs.iter().find(|d| d.name.starts_with("cuda")).unwrap();
        assert_eq!((cuda.osdev_type.as_str(), cuda.subtype.as_deref()), ("CoProc", Some("CUDA")));
    }
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 4, "distinct NVIDIAUUIDs");
}

#[test]
fn turin_gpu_locality_is_its_numa_group() {
    let Some(dir) = real("turin_gpu_locality_is_its_numa_group") else { return };
    for name in ["turin-4gpu.xml", "turin-4gpu-nvml.xml"] {
        let t = load(&dir, name);
        let gpu = function(&t, "0000:06:00.0");
        let local = &t.objects[gpu.locality];
        assert_eq!(local.cpuset, CpuSet::parse_list("16-31,144-159").unwrap(), "{name}");
        assert_eq!(local.kind, ObjKind::Group, "{name}: non-I/O ancestor is a Group");
        // The Group sits under a Package; the NUMA node with the same CPUs hangs off it.
        let ancestors = t.ancestors(gpu.locality);
        assert!(ancestors.iter().any(|&i| t.objects[i].kind == ObjKind::Package), "{name}");
        let numa = t.objects.iter().filter(|o| o.kind == ObjKind::NumaNode);
        assert!(numa.into_iter().any(|n| n.cpuset == local.cpuset), "{name}");
    }
}

#[test]
fn turin_drm_only_export_keeps_the_bmc_display() {
    let Some(dir) = real("turin_drm_only_export_keeps_the_bmc_display") else { return };
    let t = load(&dir, "turin-4gpu.xml");
    let bmc = function(&t, "0000:53:00.0");
    assert_eq!((bmc.vendor_id, bmc.device_id, bmc.class_id), (0x1a03, 0x2000, 0x0300));
    assert_eq!(names(bmc), ["card0"]);
    assert_eq!(bmc.osdevs[0].osdev_type, "GPU");
    for f in t.pci.iter().filter(|f| f.vendor_id == 0x10de) {
        let names = names(f);
        assert!(names.iter().any(|n| n.starts_with("renderD")), "{}: {names:?}", f.busid);
        assert!(names.iter().any(|n| n.starts_with("card")), "{}: {names:?}", f.busid);
    }
}

#[test]
fn tuolumne_cpx_has_six_rsmi_partitions_per_function() {
    let Some(dir) = real("tuolumne_cpx_has_six_rsmi_partitions_per_function") else { return };
    let t = load(&dir, "tuo.CPX.xml");
    let apus: Vec<&PciFunction> = t.pci.iter().filter(|f| f.vendor_id == 0x1002).collect();
    assert_eq!(apus.len(), 4);
    let mut all = Vec::new();
    for f in apus {
        assert_eq!((f.device_id, f.class_id), (0x74a0, 0x1200), "{}", f.busid);
        assert_eq!(f.osdevs.len(), 6, "{}", f.busid);
        for d in &f.osdevs {
            assert!(d.name.starts_with("rsmi"), "{}", d.name);
            assert_eq!((d.osdev_type.as_str(), d.subtype.as_deref()), ("GPU", Some("RSMI")));
            assert!(d.info("AMDUUID").is_some(), "{}", d.name);
            all.push(d.name.clone());
        }
    }
    all.sort();
    let mut expected: Vec<String> = (0..24).map(|i| format!("rsmi{i}")).collect();
    expected.sort();
    assert_eq!(all, expected);
}

#[test]
fn tioga_disks_are_loose_and_gpus_hang_off_l3() {
    let Some(dir) = real("tioga_disks_are_loose_and_gpus_hang_off_l3") else { return };
    let t = load(&dir, "eas-tioga.xml");
    let mut loose: Vec<(&str, &str, ObjKind)> = t
        .loose
        .iter()
        .map(|l| (l.osdev.name.as_str(), l.osdev.osdev_type.as_str(), t.objects[l.locality].kind))
        .collect();
    loose.sort();
    assert_eq!(loose, [("sda", "Block", ObjKind::Machine), ("sdb", "Block", ObjKind::Machine)]);
    for f in t.pci.iter().filter(|f| f.vendor_id == 0x1002) {
        assert_eq!(t.objects[f.locality].kind, ObjKind::L3Cache, "{}", f.busid);
        assert_eq!(names(f).len(), 1);
        assert!(f.osdevs[0].name.starts_with("rsmi"));
    }
}

#[test]
fn dgx2_nvml_devices_are_coprocessors_without_subtype() {
    let Some(dir) = real("dgx2_nvml_devices_are_coprocessors_without_subtype") else { return };
    let t = load(&dir, "nvidiaDGX2.xml");
    for f in t.pci.iter() {
        assert_eq!(f.vendor_id, 0x10de, "{}", f.busid);
        assert_eq!(names(f).len(), 1);
        let d = &f.osdevs[0];
        assert!(d.name.starts_with("nvml"), "{}", d.name);
        assert_eq!((d.osdev_type.as_str(), d.subtype.as_deref()), ("CoProc", None));
        assert_eq!(d.info("Backend"), Some("NVML"));
        assert!(d.info("NVIDIAUUID").is_some());
    }
}

#[test]
fn lassen_keeps_pci_domains_and_nic_ports() {
    let Some(dir) = real("lassen_keeps_pci_domains_and_nic_ports") else { return };
    let t = load(&dir, "coral-lassen.xml");
    let domains: Vec<u32> = t.pci.iter().filter(|f| f.vendor_id == 0x10de).map(|f| f.busid.domain).collect();
    assert!(domains.contains(&0x0004) && domains.contains(&0x0035), "{domains:?}");
    let hcas: Vec<&str> = t.pci.iter().flat_map(|f| &f.osdevs).map(|d| d.name.as_str()).collect();
    for name in ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "hsi0", "nvme0n1"] {
        assert!(hcas.contains(&name), "{name} missing from {hcas:?}");
    }
    let mlx = t.pci.iter().flat_map(|f| &f.osdevs).find(|d| d.name == "mlx5_0").unwrap();
    assert_eq!(mlx.osdev_type, "OpenFabrics");
}

/// A function's bridge chain as text, outermost first.
fn chain(t: &Topology, busid: &str) -> Vec<String> {
    function(t, busid).bridges.iter().map(ToString::to_string).collect()
}

#[test]
fn turin_gpu_and_its_hca_share_the_switch_upstream_port() {
    let Some(dir) = real("turin_gpu_and_its_hca_share_the_switch_upstream_port") else { return };
    let t = load(&dir, "turin-4gpu-nvml.xml");
    // GPU0 sits two switch levels below the ConnectX-7's integrated switch; mlx5_0 is on its
    // first downstream port: both hang off 0000:01:00.0, the switch's upstream port.
    assert_eq!(
        chain(&t, "0000:06:00.0"),
        ["host bridge 0000:[00-07]", "0000:00:01.1", "0000:01:00.0", "0000:02:02.0", "0000:04:00.0", "0000:05:00.0"]
    );
    assert_eq!(chain(&t, "0000:03:00.0"), ["host bridge 0000:[00-07]", "0000:00:01.1", "0000:01:00.0", "0000:02:00.0"]);
    // The management port has its own root port under another host bridge.
    assert_eq!(chain(&t, "0000:51:00.0"), ["host bridge 0000:[50-54]", "0000:50:03.4"]);
    let host = function(&t, "0000:03:00.0").bridges[0];
    assert_eq!((host.busid, host.domain, host.secondary_bus, host.subordinate_bus), (None, 0, 0x00, 0x07));
}

#[test]
fn dgx2_gpu_pairs_share_their_lower_switch() {
    let Some(dir) = real("dgx2_gpu_pairs_share_their_lower_switch") else { return };
    let t = load(&dir, "nvidiaDGX2.xml");
    let (a, b) = (chain(&t, "0000:34:00.0"), chain(&t, "0000:36:00.0"));
    assert_eq!(a.len(), 6, "{a:?}");
    assert_eq!(a[..5], b[..5], "nvml0 and nvml1 share five bridges, down to 0000:32:00.0");
    assert_eq!((a[4].as_str(), a[5].as_str(), b[5].as_str()), ("0000:32:00.0", "0000:33:00.0", "0000:33:10.0"));
    // The next pair is under the same upper switch (0000:2d), not the same lower one.
    let c = chain(&t, "0000:39:00.0");
    assert_eq!(c[..3], a[..3]);
    assert_ne!(c[3], a[3]);
}

#[test]
fn v1_xml_files_load_with_their_devices() {
    let Some(dir) = real("v1_xml_files_load_with_their_devices") else { return };
    let sierra = load(&dir, "sierra.xml");
    let bmc = function(&sierra, "0002:02:00.0");
    assert_eq!(bmc.vendor_id, 0x1a03);
    assert_eq!(names(bmc), ["card4", "controlD68"]);
    let cuda = sierra.pci.iter().flat_map(|f| &f.osdevs).filter(|d| d.name.starts_with("cuda"));
    assert_eq!(cuda.count(), 4);
    // The four V100 HBM NUMA nodes (P#252..) have no CPUs.
    let empty: Vec<Option<u32>> =
        sierra.of_kind(ObjKind::NumaNode).filter(|n| n.cpuset.is_empty()).map(|n| n.os_index).collect();
    assert_eq!(empty, [Some(252), Some(253), Some(254), Some(255)]);

    let corona = load(&dir, "corona.xml");
    let rsmi = corona.pci.iter().flat_map(|f| &f.osdevs).filter(|d| d.name.starts_with("rsmi"));
    assert_eq!(rsmi.count(), 8);
    assert!(corona.loose.iter().any(|l| l.osdev.name == "sda"));
}

#[test]
fn missing_file_names_the_path() {
    let path = fixture("no-such-topology.xml");
    let err = load::from_xml_file(&path).unwrap_err();
    assert!(matches!(&err, LoadError::Read { path: p, .. } if *p == path), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    // The loader does not know how the path was given (the CLI's --topology says so itself).
    assert!(
        msg.contains("No such file") && msg.contains("check the file's path") && !msg.contains("topology="),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
}

/// Writes `xml` to a file of this test process's own (`map-by-device-TAG-PID.xml` in the temp
/// directory), loads it as `topology=` files are loaded (hwloc in a child process), removes it,
/// and returns the refusal with the file's path.
fn refusal_of_file(tag: &str, xml: &str) -> (LoadError, String) {
    let path = std::env::temp_dir().join(format!("map-by-device-{tag}-{}.xml", std::process::id()));
    std::fs::write(&path, xml).unwrap();
    let err = load::from_xml_file(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    (err, path.display().to_string())
}

#[test]
fn garbage_xml_is_rejected_with_its_name() {
    let err = load::from_xml_str("this is not XML <at all").unwrap_err();
    assert!(matches!(err, LoadError::XmlRejected { .. }), "{err:?}");
    let err = load::from_xml_str("<topology>\0</topology>").unwrap_err();
    assert!(matches!(err, LoadError::XmlRejected { .. }), "{err:?}");

    let (err, path) = refusal_of_file("garbage", "<?xml version=\"1.0\"?>\n<html><body>oops</body></html>\n");
    let msg = err.to_string();
    assert!(matches!(err, LoadError::XmlRejected { .. }), "{err:?}");
    assert!(msg.contains(&path) && !msg.contains('\n'), "{msg}");
}

/// Found by the XML fuzz target: hwloc imports a document whose root object is a Package
/// (lstopo shows it as such); the loader refuses it, naming the root's type. Only through the
/// file loaders' child process: in a debug build, `hwlocality` runs `hwloc_topology_check`
/// after every load, which asserts that the root is the Machine and aborts the process (the
/// child's death is then the error). The same document with its Machine loads.
#[test]
fn xml_whose_root_is_not_the_machine_is_rejected() {
    let xml = std::fs::read_to_string(fixture("e2e-2gpu.xml")).unwrap();
    assert!(load::from_xml_bytes(xml.as_bytes(), "the fixture").is_ok());
    assert!(xml.contains(r#"type="Machine""#), "the fixture has a Machine");
    let (err, path) = refusal_of_file("package-root", &xml.replacen(r#"type="Machine""#, r#"type="Package""#, 1));
    let msg = err.to_string();
    assert!(msg.contains(&path) && !msg.contains('\n'), "{msg}");
    if cfg!(debug_assertions) {
        assert!(matches!(err, LoadError::XmlCrashed { .. }) && msg.contains("signal 6"), "{err:?}");
    } else {
        assert!(matches!(err, LoadError::XmlRejected { .. }), "{err:?}");
        assert!(msg.contains("its root object is a Package, not the Machine"), "{msg}");
    }
}

/// Found by the XML fuzz target: hwloc 2.9 and 2.12 dereference NULL when an object lacks its
/// `complete_cpuset` (`lstopo -i` crashes on this file too). Loaded from a file, the crash
/// stays in a child process and comes back as an error naming the file; this process lives.
/// hwloc 2.15 refuses the file itself: then it is a plain rejection, naming the file.
#[test]
fn xml_that_crashes_hwloc_is_an_error_not_a_crash() {
    let xml = std::fs::read_to_string(fixture("omnipath.xml")).unwrap();
    let good = r#"<object type="L2Cache" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002""#;
    assert_eq!(xml.matches(good).count(), 1);
    let (err, path) = refusal_of_file("crash", &xml.replace(good, &good.replace("complete_cpuset", "bomplete_cpuset")));
    let msg = err.to_string();
    assert!(msg.contains(&path) && !msg.contains('\n'), "{msg}");
    match err {
        LoadError::XmlCrashed { .. } => assert!(msg.contains("killed by signal 11"), "{msg}"),
        // hwloc 2.15 (Debian sid) checks the attribute and refuses the file instead.
        LoadError::XmlRejected { .. } if hwloc_version() >= (2, 15) => {}
        other => panic!("hwloc {:?} should crash on this file (2.9, 2.12) in the child: {other:?}", hwloc_version()),
    }
}

/// The linked hwloc's version, as pkg-config reports it (the same library the tests link).
fn hwloc_version() -> (u32, u32) {
    let out = Command::new("pkg-config").args(["--modversion", "hwloc"]).output().expect("pkg-config runs");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// `e2e-2gpu.xml` as hwloc 3 would write it: format 3.0, where `osdev_type` is a bit mask
/// (storage 1, GPU 4, coprocessor 8, network 16, OpenFabrics 32) instead of hwloc 2's enum.
fn as_xml_v3(v2: &str, version: &str) -> String {
    let mut v3 = v2.replace("<topology version=\"2.0\">", &format!("<topology version=\"{version}\">"));
    for (v2_type, v3_type) in [("0", "1"), ("1", "4"), ("5", "8"), ("2", "16"), ("3", "32")] {
        v3 = v3.replace(&format!("osdev_type=\"{v2_type}\""), &format!("osdev_type=\"v3:{v3_type}\""));
    }
    v3.replace("osdev_type=\"v3:", "osdev_type=\"")
}

#[test]
fn xml_v3_loads_where_hwloc_reads_it_and_gets_a_re_export_hint_elsewhere() {
    let v2 = std::fs::read_to_string(fixture("e2e-2gpu.xml")).unwrap();
    assert!(v2.contains("<topology version=\"2.0\">"));
    let from_v2 = load::from_xml_str(&v2).unwrap();
    let hwloc = hwloc_version();
    let v3 = load::from_xml_str(&as_xml_v3(&v2, "3.0"));
    if hwloc >= (2, 10) {
        // trixie's hwloc 2.12, sid's 2.15: the same topology as the v2 file.
        assert_eq!(v3.unwrap(), from_v2, "hwloc {hwloc:?} imports XML 3.0");
    } else {
        // bookworm's hwloc 2.9 refuses XML 3.0: the error says why and how to re-export.
        let err = v3.unwrap_err();
        assert!(matches!(&err, LoadError::XmlV3 { format, .. } if format == "3.0"), "{err:?}");
        assert!(err.to_string().contains("--export-xml-flags v2") && err.to_string().contains("XML 3.0"), "{err}");
    }
    // No hwloc 2 reads a format newer than 3.0.
    let err = load::from_xml_str(&as_xml_v3(&v2, "3.1")).unwrap_err();
    assert!(matches!(&err, LoadError::XmlV3 { format, .. } if format == "3.1"), "{err:?}");
    // A broken 3.0 file is not called too new where 3.0 is read.
    let broken = as_xml_v3(&v2, "3.0").replace("<object type=\"PU\"", "<object type=\"NoSuchType\"");
    let err = load::from_xml_str(&broken).unwrap_err();
    if hwloc >= (2, 10) {
        assert!(matches!(err, LoadError::XmlRejected { .. }), "{err:?}");
    } else {
        assert!(matches!(err, LoadError::XmlV3 { .. }), "{err:?}");
    }
}

// --- live(): run in a child process so environment variables never touch this one ---

const CHILD: &str = "MAP_BY_DEVICE_LIVE_CHILD";

/// Runs `live_child` in a fresh copy of this test binary with `env` added and every other
/// HWLOC_* variable removed; returns its stdout.
fn run_child(env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["live_child", "--exact", "--nocapture", "--test-threads=1"]).env(CHILD, "1");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HWLOC_") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "child failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("LIVE:"), "child test did not run: {stdout}");
    stdout
}

const FIXTURES_CHILD: &str = "MAP_BY_DEVICE_FIXTURES_CHILD";

/// Loads every fixture, and a control document that only libxml2 accepts, in a child process
/// whose hwloc may not use libxml2 (hwloc reads HWLOC_LIBXML_IMPORT once per process).
#[test]
fn every_fixture_loads_with_hwlocs_minimal_xml_parser() {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["fixtures_child", "--exact", "--nocapture", "--test-threads=1"]).env(FIXTURES_CHILD, "1");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HWLOC_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd.env("HWLOC_LIBXML_IMPORT", "0").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    // (libtest may print "test fixtures_child ... " in front of the first line)
    let loaded: Vec<&str> = stdout.lines().filter_map(|l| l.split_once("LOADED: ").map(|(_, f)| f)).collect();
    let failed: Vec<&str> = stdout.lines().filter_map(|l| l.split_once("FAILED: ").map(|(_, f)| f)).collect();
    assert!(failed.is_empty(), "not loaded by the minimal parser: {failed:?}");
    assert!(loaded.len() >= 16, "fixtures loaded: {loaded:?}");
    // The control proves the parser in use is the minimal one: it refuses a comment before
    // <topology>, which libxml2 accepts.
    assert!(stdout.contains("CONTROL: rejected"), "the minimal parser was not the one used: {stdout}");
}

#[test]
fn fixtures_child() {
    if std::env::var_os(FIXTURES_CHILD).is_none() {
        return;
    }
    // The project's fixtures and the end-to-end suite's own.
    let e2e = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/fixtures");
    let mut files: Vec<PathBuf> = [fixture(""), e2e]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("xml"))
        .collect();
    files.sort();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy();
        match load::from_xml_file(path) {
            Ok(t) if !t.pci.is_empty() || name == "no-gpu.xml" || !t.loose.is_empty() => println!("LOADED: {name}"),
            Ok(_) => println!("FAILED: {name} (no devices)"),
            Err(e) => println!("FAILED: {name}: {e}"),
        }
    }
    let xml = std::fs::read_to_string(fixture("e2e-2gpu.xml")).unwrap();
    let control = xml.replacen("<topology ", "<!-- a comment -->\n<topology ", 1);
    match load::from_xml_str(&control) {
        Ok(_) => println!("CONTROL: loaded"),
        Err(e) => println!("CONTROL: rejected ({e})"),
    }
}

/// Prints what live() returned; only does something when started by `run_child`.
#[test]
fn live_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    match load::live(std::time::Duration::from_secs(30)) {
        Ok(t) => {
            check_shape("live", &t);
            let cpus = t.all_cpus();
            println!("LIVE: ok pus={} cpus={} host={:?}", cpus.len(), cpus.to_list(), t.hostname);
        }
        Err(LoadError::Environment { name, value }) => println!("LIVE: refused {name}={value}"),
        Err(e) => println!("LIVE: error {e}"),
    }
}

#[test]
fn live_reads_this_machine() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = CpuSet::parse_list(online.trim()).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let expected = format!("LIVE: ok pus={} cpus={} host={:?}", online.len(), online.to_list(), Some(host.trim()));
    assert!(run_child(&[]).contains(&expected), "expected {expected}");
    // Variables that only change hwloc's stderr are allowed.
    assert!(run_child(&[("HWLOC_HIDE_ERRORS", "1")]).contains(&expected));
}

#[test]
fn live_refuses_variables_that_replace_the_machine() {
    let xml = fixture("turin-h200.xml").display().to_string();
    for (name, value) in [
        ("HWLOC_XMLFILE", xml.as_str()),
        ("HWLOC_SYNTHETIC", "pack:4 pu:8"),
        ("HWLOC_FSROOT", "/tmp"),
        ("HWLOC_COMPONENTS", "xml"),
        ("HWLOC_THISSYSTEM", "1"),
        ("HWLOC_PLUGINS_PATH", "/tmp"),
        ("HWLOC_PCI_LOCALITY", "0000:06 0x1"),
    ] {
        let out = run_child(&[(name, value)]);
        assert!(out.contains(&format!("LIVE: refused {name}={value}")), "{name}: {out}");
    }
}

/// hwloc's `gl` component (Debian's libhwloc-plugins) connects to X displays :0 to :9, which
/// any local user can answer on an abstract socket; one that never replies made slurmd hang
/// at its start. Live discovery must not even connect (it runs in a single-threaded child
/// test process, as in slurmd: a fork of a busy multi-threaded test harness is not what the
/// plugin does).
#[test]
fn live_discovery_ignores_a_fake_x_server() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    if !load::has_component("gl") {
        common::skip_line("this hwloc has no gl component (install libhwloc-plugins to run this test)");
        return;
    }
    let addr = SocketAddr::from_abstract_name(b"/tmp/.X11-unix/X0").unwrap();
    let Ok(listener) = UnixListener::bind_addr(&addr) else {
        common::skip_line("display :0 is taken on this machine");
        return;
    };
    // The kernel queues a connection without accept(), and nothing ever answers it.
    let start = std::time::Instant::now();
    let out = run_child(&[]);
    let took = start.elapsed();
    assert!(out.contains("LIVE: ok"), "{out}");
    assert!(took < std::time::Duration::from_secs(10), "live discovery took {took:?} with a silent X server");
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "hwloc connected to the fake X server");
}

#[test]
fn environment_error_names_the_variable_and_the_fix() {
    let err = LoadError::Environment { name: "HWLOC_XMLFILE".into(), value: "/x.xml".into() };
    let msg = err.to_string();
    assert!(msg.contains("HWLOC_XMLFILE=/x.xml") && msg.contains("unset"), "{msg}");
}

#[test]
fn xml_path_and_text_give_the_same_topology() {
    let path = fixture("omnipath.xml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(load::from_xml_file(&path).unwrap(), load::from_xml_str(&text).unwrap());
}

#[test]
fn loading_turin_is_fast_enough_for_every_step() {
    let path = fixture("turin-h200.xml");
    let start = std::time::Instant::now();
    for _ in 0..5 {
        load::from_xml_file(&path).unwrap();
    }
    let each = start.elapsed() / 5;
    println!("turin-h200.xml: {each:?} per load");
    assert!(each < std::time::Duration::from_millis(500), "{each:?}");
}

/// A topology survives a JSON round trip unchanged (the plugin's per-node cache relies on it).
#[test]
fn topology_json_round_trip() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/turin-h200.xml");
    let topo = map_by_device::load::from_xml_file(&path).unwrap();
    let json = serde_json::to_string(&topo).unwrap();
    let back: map_by_device::topology::Topology = serde_json::from_str(&json).unwrap();
    assert_eq!(back, topo);
    assert!(json.contains("\"0000:06:00.0\""), "bus ids as text");
    assert!(topo.pci.iter().all(|f| !f.bridges.is_empty()), "every Turin fixture function has its bridges");
}

/// Live discovery's backends on this machine are all in the allowed set (the set is not too
/// narrow for a real node: the Linux core at least ran), and an unexpected one is refused by
/// name (hwloc can only blacklist components, so the check after the load is what fails
/// closed).
#[test]
fn live_backends_are_the_allowed_ones_and_others_are_refused() {
    let ran = load::live_backends(std::time::Duration::from_secs(60)).unwrap();
    println!("live discovery backends here: {ran:?}");
    assert!(ran.iter().any(|b| b == "Linux"), "{ran:?}");
    for b in &ran {
        assert!(load::ALLOWED_BACKENDS.contains(&b.as_str()), "backend {b} ran but is not allowed: {ran:?}");
    }
    load::check_backends(&ran).unwrap();
    let with = |extra: &str| {
        let mut r = ran.clone();
        r.push(extra.to_string());
        load::check_backends(&r).unwrap_err().to_string()
    };
    // CUDA among them: its cuInit would talk to any user's MPS server (issue 27).
    assert!(load::UNNEEDED_COMPONENTS.contains(&"cuda"));
    for unexpected in ["GL", "CUDA", "OpenCL", "XML", "Synthetic", "SomeNewPlugin"] {
        let msg = with(unexpected);
        assert!(msg.contains(&format!("backend {unexpected} described part of this machine")), "{msg}");
        assert!(msg.contains("refusing the topology") && msg.contains("set topology= to an XML file"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
    let msg = with("GL\ninjected");
    assert!(!msg.contains('\n') && msg.contains(r#""GL\ninjected""#), "{msg}");
}

/// What slurmd's log and a step's user read when discovery does not finish in time.
#[test]
fn a_discovery_past_its_deadline_says_so_and_the_fixes() {
    let err = LoadError::Bounded { source: map_by_device::bounded::BoundedError::TimedOut { seconds: 2.0 } };
    let msg = err.to_string();
    assert!(msg.contains("discovering this machine with hwloc failed: it did not finish within 2 s (killed)"), "{msg}");
    assert!(msg.contains("raise discovery_timeout") && msg.contains("set topology= to an XML file"), "{msg}");
}

const PLUGINS_CHILD: &str = "MAP_BY_DEVICE_PLUGINS_CHILD";

/// hwloc loads every plugin it finds, and the libraries each links, when a process's first
/// topology is initialised, before any component blacklist applies: a step's discovery child
/// loaded hwloc's OpenCL plugin, and with it a `libOpenCL.so.1` the job's user had built
/// (issue 38). Live discovery and the XML loader keep the plugins of the unneeded components
/// out altogether (hwloc says so with HWLOC_PLUGINS_VERBOSE, which the loader allows), and
/// still load the ones they need. The control: this process, whose hwloc has no such
/// blacklist, has the plugins.
#[test]
fn the_unneeded_hwloc_plugins_are_never_loaded() {
    let present: Vec<&str> = ["gl", "opencl"].into_iter().filter(|c| load::has_component(c)).collect();
    if present.is_empty() {
        common::skip_line("this hwloc has no gl or opencl plugin (install libhwloc-plugins to run this test)");
        return;
    }
    assert!(load::plugins_blacklist().to_str().unwrap().starts_with("HWLOC_PLUGINS_BLACKLIST=hwloc_gl,hwloc_cuda,"));
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["plugins_child", "--exact", "--nocapture", "--test-threads=1"]).env(PLUGINS_CHILD, "1");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HWLOC_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd.env("HWLOC_PLUGINS_VERBOSE", "1").output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed: {stdout}{stderr}");
    assert!(stdout.contains("PLUGINS: live ok, xml ok"), "{stdout}{stderr}");
    for c in present {
        // Once by the live discovery's child, once by the XML loader's.
        let kept_out = stderr.matches(&format!("Plugin `hwloc_{c}' is blacklisted in the environment")).count();
        assert_eq!(kept_out, 2, "hwloc_{c}: {stderr}");
        assert!(!stderr.contains(&format!("Plugin descriptor `hwloc_{c}' ready")), "hwloc_{c} was loaded: {stderr}");
    }
    // Where hwloc's PCI support is a plugin (Debian's), it is still loaded: it is needed.
    if stderr.contains("/hwloc_pci'") {
        assert!(stderr.contains("Plugin descriptor `hwloc_pci' ready"), "the PCI plugin is needed: {stderr}");
    }
}

/// Live discovery and an XML load; only does something when started by the test above.
#[test]
fn plugins_child() {
    if std::env::var_os(PLUGINS_CHILD).is_none() {
        return;
    }
    let live = load::live(std::time::Duration::from_secs(30)).map(|_| "ok").unwrap_or_else(|e| panic!("{e}"));
    let xml = load::from_xml_file(&fixture("e2e-2gpu.xml")).map(|_| "ok").unwrap_or_else(|e| panic!("{e}"));
    println!("PLUGINS: live {live}, xml {xml}");
}
