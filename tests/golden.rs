//! Golden plans, mpibind-style: for every fixture in `topologies/` and every real topology in
//! `../shared/topologies/` (reference data, where it exists next to the checkout; skipped
//! with a `skipped:` line otherwise), the device list and the plans of a fixed set of specs
//! are written as text and compared with `tests/expected/<file>.txt`. The same expected files
//! hold for every hwloc these machines run (2.9, 2.12, 2.15).
//!
//! Each expected file was read by a person when it was written; a change in any of them is a
//! behaviour change to review, not noise. To rewrite them after an intended change:
//! `MBD_BLESS=1 cargo test --test golden`, then read the diff.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use map_by_device::device::ZeHierarchy;
use map_by_device::load;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::plan::{plan, StepFacts};
use map_by_device::report;
use map_by_device::spec::Spec;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

mod common;

/// The specs every topology is planned with, and the task counts.
const CASES: [(&str, u32); 12] = [
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
];

/// The header every expected file starts with: what its records mean.
const HEADER: &str = "\
# What this file records (written by tests/golden.rs; MBD_BLESS=1 rewrites it):
# - '## devices': the node's devices in mapping order (class, then PCI bus order): class, bus id,
#   primary name, the GPU's vendor identity if it has one, [every OS device name of the function],
#   locality (the CPUs of its nearest non-I/O ancestor), and why a GPU has no identity.
# - '## -n N SPEC': the plan for N tasks of one step on the whole node: one line per task (its
#   devices; its CPU mask; the variables it is given), then the plan's warnings, or the refusal
#   ('error: ...') a user would get.
";

fn render(path: &Path) -> String {
    let topo = load::from_xml_file(path).unwrap_or_else(|e| panic!("{e}"));
    let options = NodeOptions { ze_hierarchy: Some(ZeHierarchy::Composite), ..NodeOptions::default() };
    let node = Node::new(topo, options);
    let mut out = String::from(HEADER);
    let _ = writeln!(out, "# {} (host {})", path.file_name().unwrap().to_string_lossy(), node.hostname());
    let _ = writeln!(out, "## devices");
    for d in &node.devices {
        let _ = writeln!(
            out,
            "{} {} [{}] locality {}{}{}",
            d.class,
            report::device_label(d),
            d.osnames.join(" "),
            d.locality,
            d.identity_problem().map(|p| format!(" (no identity: {p})")).unwrap_or_default(),
            report::held_back_note(d)
        );
    }
    for (spec, n) in CASES {
        let _ = writeln!(out, "## -n {n} {spec}");
        let facts = StepFacts { ntasks: n, ..StepFacts::default() };
        match plan(&Spec::parse(spec).unwrap(), &node, &facts) {
            Ok(p) => {
                for t in &p.tasks {
                    let _ = writeln!(out, "{}", report::task_line(&node, t));
                }
                for w in &p.warnings {
                    let _ = writeln!(out, "warning: {w}");
                }
            }
            Err(e) => {
                let _ = writeln!(out, "error: {e}");
            }
        }
    }
    out
}

fn xmls(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("xml"))
        .collect();
    v.sort();
    v
}

#[test]
fn golden_plans() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let expected_dir = root.join("tests/expected");
    let bless = std::env::var_os("MBD_BLESS").is_some();
    let mut files = xmls(&root.join("topologies"));
    assert!(files.len() >= 13, "fixtures found: {}", files.len());
    match common::reference_dir() {
        Some(dir) => {
            let real = xmls(&dir);
            assert!(real.len() >= 12, "real topologies found: {}", real.len());
            files.extend(real);
        }
        None => common::skipped("golden plans of the real topologies"),
    }
    let mut failures = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().replace(".xml", ".txt");
        let got = render(&path);
        let want_path = expected_dir.join(&name);
        if bless {
            std::fs::create_dir_all(&expected_dir).unwrap();
            std::fs::write(&want_path, &got).unwrap();
            continue;
        }
        match std::fs::read_to_string(&want_path) {
            Ok(want) if want == got => {}
            Ok(want) => {
                let line = want.lines().zip(got.lines()).position(|(a, b)| a != b).unwrap_or(0);
                failures.push(format!(
                    "{name}: differs at line {}\n  want: {}\n  got:  {}",
                    line + 1,
                    want.lines().nth(line).unwrap_or(""),
                    got.lines().nth(line).unwrap_or("")
                ));
            }
            Err(_) => failures.push(format!("{name}: no expected file (MBD_BLESS=1 writes it)")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
