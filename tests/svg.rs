//! The pictures (`plan --svg`, `devices --svg`): parsed back and checked against the plan
//! they draw — every task on exactly its CPUs and devices, in its own colour, with stripes
//! where tasks share, the legend in the text report's words, the warnings or the refusal,
//! each device inside the box of its locality, nothing overlapping.
//!
//! - Golden pictures in `tests/expected/svg/`: what a fresh rendering *says* (cells, tasks,
//!   colours, devices, legend, warnings, the boxes' nesting) must equal what the golden file
//!   says; coordinates may change. `MBD_BLESS=1 cargo test --test svg` rewrites them; look at
//!   them (tests/browser/run.sh screenshots them) before committing.
//! - Every fixture in `topologies/` (and every real export in `../shared/topologies/` where
//!   that directory exists) is drawn for the devices view and the golden plans' specs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod picture;

use map_by_device::device::Device;
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, StepFacts};
use map_by_device::report::svg::{devices_svg, plan_svg};
use map_by_device::spec::Spec;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn node(path: &Path) -> Node {
    Node::new(load::from_xml_file(path).unwrap_or_else(|e| panic!("{e}")), NodeOptions::default())
}

/// Draws `spec` for `n` tasks and checks the picture against the plan; returns the SVG.
fn plan_picture(node: &Node, spec: &str, n: u32) -> String {
    let spec = Spec::parse(spec).unwrap();
    let facts = StepFacts { ntasks: n, ..StepFacts::default() };
    let outcome = plan(&spec, node, &facts);
    let svg = plan_svg(node, &spec, &facts, outcome.as_ref());
    let bad = picture::parse(&svg).check_plan(node, outcome.as_ref());
    assert!(bad.is_empty(), "{} -n {n} {spec}:\n{}", node.hostname(), bad.join("\n"));
    svg
}

fn devices_picture(node: &Node) -> String {
    let all: Vec<&Device> = node.devices.iter().collect();
    let svg = devices_svg(node, None, &all);
    let names: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
    let bad = picture::parse(&svg).check_devices(node, &names);
    assert!(bad.is_empty(), "{} devices:\n{}", node.hostname(), bad.join("\n"));
    svg
}

/// (golden file, fixture, spec, tasks); an empty spec is the devices view. Every fixture of
/// `topologies/` has one ([`every_fixture_has_a_golden_picture`]).
const GOLDEN: [(&str, &str, &str, u32); 26] = [
    ("e2e-2gpu-gpu-n2", "e2e-2gpu.xml", "gpu", 2),
    ("turin-h200-gpu-interleave-n4", "turin-h200.xml", "gpu:interleave:bind=core", 4),
    ("turin-h200-gpu-shared-n8", "turin-h200.xml", "gpu:shared:bind=core", 8),
    ("turin-h200-gpu-n5-refused", "turin-h200.xml", "gpu", 5),
    ("synthetic-64gpu-gpu-n64", "synthetic-64gpu.xml", "gpu", 64),
    ("degenerate-machine-gpu-n2", "degenerate-machine.xml", "gpu:bind=core", 2),
    ("omnipath-hfi1_1-shared-n4", "omnipath.xml", "hfi1_1:shared:pe=2", 4),
    ("drm-only-devices", "drm-only.xml", "", 0),
    ("dgx2-mlx5-gpu-adapters-n8", "dgx2-mlx5.xml", "gpu:adapters:bind=core", 8),
    ("amd-mi250x-gpu-bind-core-n8", "amd-mi250x.xml", "gpu:bind=core", 8),
    ("degenerate-one-complex-gpu-n2", "degenerate-one-complex.xml", "gpu:bind=core", 2),
    ("e2e-1socket-2gpu-gpu-n2", "e2e-1socket-2gpu.xml", "gpu", 2),
    ("e2e-2gpu-amd-gpu-n2", "e2e-2gpu-amd.xml", "gpu", 2),
    ("e2e-2gpu-drm-gpu-n2-refused", "e2e-2gpu-drm.xml", "gpu", 2),
    ("e2e-nogpu-network-n1", "e2e-nogpu.xml", "network", 1),
    ("far-hca-gpu-adapters-n2", "far-hca.xml", "gpu:adapters:bind=core", 2),
    ("intel-pvc-gpu-env-none-n6", "intel-pvc.xml", "gpu:env=none:bind=core", 6),
    ("no-gpu-devices", "no-gpu.xml", "", 0),
    ("uneven-3plus1-gpu-interleave-n4", "uneven-3plus1.xml", "gpu:interleave", 4),
    ("e2e-4gpu-gpu-ndev-auto-n2", "e2e-4gpu.xml", "gpu:ndev=auto", 2),
    ("gpu-omnipath-gpu-adapters-n2", "gpu-omnipath.xml", "gpu:adapters:bind=core", 2),
    ("apu-slingshot-network-n4", "apu-slingshot.xml", "network", 4),
    ("apu-slingshot-cxi-gpu-adapters-n4", "apu-slingshot-cxi.xml", "gpu:adapters", 4),
    ("rails-2socket-openfabrics-n4", "rails-2socket.xml", "openfabrics", 4),
    ("vm-ib-vf-devices", "vm-ib-vf.xml", "", 0),
    ("nvme-namespaces-block-n5", "nvme-namespaces.xml", "block:bind=none", 5),
];

#[test]
fn every_fixture_has_a_golden_picture() {
    for path in xmls(&root().join("topologies")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            GOLDEN.iter().any(|(_, fixture, _, _)| *fixture == name),
            "topologies/{name} has no golden picture: add a row to GOLDEN and run MBD_BLESS=1 cargo test --test svg"
        );
    }
    for (file, ..) in GOLDEN {
        assert!(root().join("tests/expected/svg").join(format!("{file}.svg")).is_file(), "{file}.svg is not committed");
    }
}

/// A golden picture starts with a comment saying what it records and how it is compared.
fn with_header(svg: &str, fixture: &str, spec: &str, n: u32) -> String {
    let what = if spec.is_empty() { "the devices view".to_string() } else { format!("plan -n {n} {spec}") };
    let header = format!(
        "<!-- Golden picture (tests/svg.rs; MBD_BLESS=1 rewrites it): {what} on topologies/{fixture}. \
         Compared by what it says, not by coordinates: each CPU cell's and device's tasks and stripe colours, \
         each legend entry's CPUs, devices and variables, the warnings and the refusal. -->\n"
    );
    match svg.split_once('\n') {
        Some((decl, rest)) if decl.starts_with("<?xml") => format!("{decl}\n{header}{rest}"),
        _ => format!("{header}{svg}"),
    }
}

#[test]
fn golden_pictures_say_what_they_said() {
    let dir = root().join("tests/expected/svg");
    let bless = std::env::var_os("MBD_BLESS").is_some();
    let mut failures = Vec::new();
    for (name, fixture, spec, n) in GOLDEN {
        let node = node(&root().join("topologies").join(fixture));
        let svg = if spec.is_empty() { devices_picture(&node) } else { plan_picture(&node, spec, n) };
        let path = dir.join(format!("{name}.svg"));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, with_header(&svg, fixture, spec, n)).unwrap();
            continue;
        }
        let Ok(golden) = std::fs::read_to_string(&path) else {
            failures.push(format!("{name}: no {} (MBD_BLESS=1 writes it)", path.display()));
            continue;
        };
        let (want, got) = (picture::parse(&golden).facts(), picture::parse(&svg).facts());
        if want != got {
            let line = want.lines().zip(got.lines()).position(|(a, b)| a != b).unwrap_or(0);
            failures.push(format!(
                "{name}: says something else from line {}\n  golden: {}\n  now:    {}",
                line + 1,
                want.lines().nth(line).unwrap_or("(end)"),
                got.lines().nth(line).unwrap_or("(end)")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The specs of `tests/golden.rs`, drawn on every topology.
const CASES: [(&str, u32); 13] = [
    ("gpu", 1),
    ("gpu", 4),
    ("gpu:interleave:bind=core", 4),
    ("gpu:bind=numa", 2),
    ("gpu:ndev=2:bind=package", 2),
    ("gpu:shared:pe=2", 8),
    ("network", 2),
    ("network:interleave=numa:bind=core", 4),
    ("block:bind=l3cache", 1),
    ("gpu:closest", 2),
    ("gpu:adapters", 4),
    ("gpu:ndev=2:adapters", 2),
    ("none", 4),
];

fn xmls(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("xml"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_fixture_is_drawn() {
    let fixtures = xmls(&root().join("topologies"));
    assert!(fixtures.len() >= 12, "fixtures: {}", fixtures.len());
    let shared = xmls(&root().join("../shared/topologies"));
    if shared.is_empty() {
        common::skipped("every_fixture_is_drawn over the real lstopo exports (only the project's fixtures were drawn)");
    }
    let mut drawn = 0;
    for path in fixtures.iter().chain(&shared) {
        let node = node(path);
        devices_picture(&node);
        for (spec, n) in CASES {
            plan_picture(&node, spec, n);
            drawn += 1;
        }
    }
    assert_eq!(drawn, (fixtures.len() + shared.len()) * CASES.len());
}

#[test]
fn sharing_is_striped_not_hidden() {
    // 64 tasks on 64 GPUs bound to their whole localities: four tasks on every CPU.
    let node = node(&root().join("topologies/synthetic-64gpu.xml"));
    let p = picture::parse(&plan_picture(&node, "gpu:bind=locality", 64));
    assert!(p.pus.values().all(|c| c.stripes.len() == 4), "every CPU carries its four tasks' stripes");
    let widths: Vec<i64> = p.pus.values().map(|c| c.rect.w).collect();
    assert!(widths.iter().all(|&w| w >= 24), "cells stay wide enough for four stripes: {widths:?}");
    // Eight tasks on four GPUs: two on each GPU.
    let node = self::node(&root().join("topologies/turin-h200.xml"));
    let p = picture::parse(&plan_picture(&node, "gpu:shared:bind=core", 8));
    let gpus: Vec<&picture::Painted> = p.devices.values().filter(|d| d.attrs["data-class"] == "gpu").collect();
    assert!(gpus.iter().all(|d| d.stripes.len() == 2), "{gpus:?}");
    assert!(p.tasks[&0].text.contains("shares cuda0 with task 4"), "{}", p.tasks[&0].text);
}

#[test]
fn text_from_the_topology_is_escaped() {
    let mut node = node(&root().join("topologies/e2e-2gpu.xml"));
    node.options.hostname = Some("a<b>&\"c'\u{1}".into());
    let spec = Spec::parse("gpu").unwrap();
    let facts = StepFacts { ntasks: 2, ..StepFacts::default() };
    let svg = plan_svg(&node, &spec, &facts, plan(&spec, &node, &facts).as_ref());
    assert!(svg.contains("a&lt;b&gt;&amp;&quot;c&apos;\u{FFFD}"), "host name escaped");
    // A well-formed document that says the same host name (the control character replaced).
    assert_eq!(picture::parse(&svg).host, "a<b>&\"c'\u{FFFD}");
}

#[test]
fn dense_levels_fold_into_cells() {
    // Turin: 256 CPUs in 128 core cells of two threads; L1/L2 (private) not drawn; 16 L3s.
    let node = node(&root().join("topologies/turin-h200.xml"));
    let p = picture::parse(&plan_picture(&node, "gpu", 4));
    let kinds = |k: &str| p.frames.iter().filter(|(kind, _, _)| kind == k).count();
    assert_eq!((kinds("Package"), kinds("Group"), kinds("L3Cache")), (2, 8, 16));
    assert_eq!(kinds("L2Cache") + kinds("L1Cache") + kinds("Core"), 0);
    let core_16 = (p.pus[&16].rect, p.pus[&144].rect);
    assert_eq!((core_16.0.x, core_16.0.y + core_16.0.h), (core_16.1.x, core_16.1.y), "thread 144 under 16");
    assert!(p.width <= 1700, "Turin fits a screen's width: {}", p.width);
}

#[test]
fn the_checks_catch_a_wrong_picture() {
    let node = node(&root().join("topologies/turin-h200.xml"));
    let spec = Spec::parse("gpu:interleave:bind=core").unwrap();
    let facts = StepFacts { ntasks: 4, ..StepFacts::default() };
    let good = plan(&spec, &node, &facts).unwrap();
    let svg = plan_svg(&node, &spec, &facts, Ok(&good));
    assert!(picture::parse(&svg).check_plan(&node, Ok(&good)).is_empty());
    // Another plan (PCI order instead of interleaved) is not what this picture shows.
    let other = plan(&Spec::parse("gpu:bind=core").unwrap(), &node, &facts).unwrap();
    assert!(!picture::parse(&svg).check_plan(&node, Ok(&other)).is_empty());
    // A stripe in another task's colour, a cell that forgets its task, a device moved out of
    // its locality's box: each is caught.
    let recolored = svg.replacen("data-task=\"1\" fill=\"#f28e2b\"", "data-task=\"1\" fill=\"#4e79a7\"", 1);
    let forgotten = svg.replacen("data-cpu=\"16\" data-tasks=\"0\"", "data-cpu=\"16\" data-tasks=\"\"", 1);
    assert_ne!(recolored, svg);
    assert_ne!(forgotten, svg);
    for wrong in [recolored, forgotten] {
        assert!(!picture::parse(&wrong).check_plan(&node, Ok(&good)).is_empty());
    }
    let mut moved = picture::parse(&svg);
    moved.devices.get_mut("cuda0").unwrap().rect.x = 0;
    assert!(!moved.check_geometry(&node).is_empty());
}

#[test]
fn cpus_outside_the_step_are_greyed() {
    let node = node(&root().join("topologies/turin-h200.xml"));
    let spec = Spec::parse("gpu").unwrap();
    for (allowed, ok) in [("16-31", true), ("0-15", false)] {
        let facts = StepFacts {
            ntasks: 1,
            allowed_cpus: Some(map_by_device::cpuset::CpuSet::parse_list(allowed).unwrap()),
            ..StepFacts::default()
        };
        let outcome = plan(&spec, &node, &facts);
        assert_eq!(outcome.is_ok(), ok);
        let svg = plan_svg(&node, &spec, &facts, outcome.as_ref());
        let p = picture::parse(&svg);
        assert!(p.check_plan(&node, outcome.as_ref()).is_empty());
        let step = map_by_device::cpuset::CpuSet::parse_list(allowed).unwrap();
        for (cpu, c) in &p.pus {
            let outside = c.attrs.contains_key("data-outside-step");
            assert_eq!(outside, !step.contains(*cpu), "CPU {cpu}");
        }
        assert!(svg.contains(&format!("--allowed-cpus {allowed}")));
    }
}
