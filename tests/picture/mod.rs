//! Reading our own pictures back: an SVG from `report::svg` parsed with a real XML parser
//! into what it claims (which tasks are on which CPU and device, in which colour, what the
//! legend and the warnings say, where every box is), and checked against the `Plan` and the
//! `Node` it was drawn from. Shared by `tests/svg.rs` and `tests/browser.rs`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use map_by_device::node::Node;
use map_by_device::plan::{Plan, PlanError, TaskPlan};
use map_by_device::report;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: i64,
    pub y: i64,
    pub w: i64,
    pub h: i64,
}

impl Rect {
    fn inside(&self, o: &Rect) -> bool {
        self.x >= o.x && self.y >= o.y && self.x + self.w <= o.x + o.w && self.y + self.h <= o.y + o.h
    }
    fn overlaps(&self, o: &Rect) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }
}

/// A painted cell (a hardware thread) or a device box: who is on it and the stripes drawn.
#[derive(Debug, Clone)]
pub struct Painted {
    pub tasks: Vec<u32>,
    pub stripes: Vec<(u32, String)>,
    pub rect: Rect,
    pub attrs: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct LegendTask {
    pub color: String,
    pub cpus: String,
    pub devices: Vec<String>,
    pub text: String,
}

#[derive(Debug, Default)]
pub struct Picture {
    pub width: i64,
    pub height: i64,
    pub view: String,
    pub host: String,
    pub pus: BTreeMap<u32, Painted>,
    pub devices: BTreeMap<String, Painted>,
    /// (kind, cpus, rect) of every frame, outermost first.
    pub frames: Vec<(String, String, Rect)>,
    pub tasks: BTreeMap<u32, LegendTask>,
    /// The devices view's legend: (device name, order in its class, text).
    pub device_rows: Vec<(String, String, String)>,
    pub warnings: Vec<String>,
    pub refusal: Option<String>,
    /// Every colour a legend entry declares (`data-color`), in document order.
    pub colors: Vec<String>,
    /// Every rectangle and text position, for the bounds check.
    pub all_rects: Vec<Rect>,
}

fn num(n: roxmltree::Node, attr: &str) -> i64 {
    n.attribute(attr).unwrap_or_else(|| panic!("<{}> without {attr}", n.tag_name().name())).parse().unwrap()
}

fn rect_of(n: roxmltree::Node) -> Rect {
    Rect { x: num(n, "x"), y: num(n, "y"), w: num(n, "width"), h: num(n, "height") }
}

fn list(text: &str) -> Vec<u32> {
    text.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

fn attrs(n: roxmltree::Node) -> BTreeMap<String, String> {
    n.attributes().map(|a| (a.name().to_string(), a.value().to_string())).collect()
}

/// The first `<rect>` child (the cell's outline) and the stripes of a painted group.
fn painted(g: roxmltree::Node) -> Painted {
    let stripes = g
        .children()
        .filter(|c| c.attribute("class") == Some("stripe"))
        .map(|c| (c.attribute("data-task").unwrap().parse().unwrap(), c.attribute("fill").unwrap().to_string()))
        .collect();
    let outline = g.children().rfind(|c| c.has_tag_name("rect")).expect("a painted group has a rect");
    Painted { tasks: list(g.attribute("data-tasks").unwrap_or("")), stripes, rect: rect_of(outline), attrs: attrs(g) }
}

fn texts(g: roxmltree::Node) -> String {
    g.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect::<Vec<_>>().join("\n")
}

/// Parses a picture; panics (fails the test) on malformed XML or a missing attribute.
pub fn parse(svg: &str) -> Picture {
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert!(doc.descendants().all(|n| !n.has_tag_name("script")), "a picture has no script");
    let mut p = Picture {
        width: num(root, "width"),
        height: num(root, "height"),
        view: root.attribute("data-view").unwrap_or("").into(),
        host: root.attribute("data-host").unwrap_or("").into(),
        ..Picture::default()
    };
    assert_eq!(root.attribute("viewBox"), Some(format!("0 0 {} {}", p.width, p.height).as_str()));
    for n in doc.descendants() {
        if n.has_tag_name("rect") {
            p.all_rects.push(rect_of(n));
        }
        if let Some(c) = n.attribute("data-color") {
            p.colors.push(c.to_string());
        }
        match n.attribute("class") {
            Some("pu") => {
                let cpu = num(n, "data-cpu") as u32;
                assert!(p.pus.insert(cpu, painted(n)).is_none(), "CPU {cpu} drawn twice");
            }
            Some("device") => {
                let name = n.attribute("data-device").unwrap().to_string();
                assert!(p.devices.insert(name.clone(), painted(n)).is_none(), "device {name} drawn twice");
            }
            Some("frame") => {
                let r = n.children().find(|c| c.has_tag_name("rect")).map(rect_of).unwrap();
                p.frames.push((n.attribute("data-kind").unwrap().into(), n.attribute("data-cpus").unwrap().into(), r));
            }
            Some("task") => {
                let legend = LegendTask {
                    color: n.attribute("data-color").unwrap().into(),
                    cpus: n.attribute("data-cpus").unwrap().into(),
                    devices: n
                        .attribute("data-devices")
                        .unwrap()
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(Into::into)
                        .collect(),
                    text: texts(n),
                };
                p.tasks.insert(num(n, "data-task") as u32, legend);
            }
            Some("device-row") => p.device_rows.push((
                n.attribute("data-device").unwrap().into(),
                n.attribute("data-order").unwrap().into(),
                texts(n),
            )),
            Some("warning") => p.warnings.push(n.attribute("data-text").unwrap().into()),
            Some("refusal") => p.refusal = Some(n.attribute("data-text").unwrap().into()),
            _ => {}
        }
    }
    p
}

impl Picture {
    /// What the picture says, without where it says it: compared between a golden file and
    /// a fresh rendering, so a layout change passes and a change of meaning fails.
    pub fn facts(&self) -> String {
        let mut s = format!("view {} host {}\n", self.view, self.host);
        for (kind, cpus, _) in &self.frames {
            let _ = writeln!(s, "frame {kind} {cpus}");
        }
        for (cpu, c) in &self.pus {
            let _ = writeln!(s, "cpu {cpu} tasks {:?} stripes {:?}", c.tasks, c.stripes);
        }
        for (name, d) in &self.devices {
            let a = |k: &str| d.attrs.get(k).cloned().unwrap_or_default();
            let _ = writeln!(
                s,
                "device {name} {} {} {} tasks {:?} stripes {:?}",
                a("data-class"),
                a("data-busid"),
                a("data-id"),
                d.tasks,
                d.stripes
            );
        }
        for (t, l) in &self.tasks {
            let _ = writeln!(s, "task {t} {} cpus {} devices {:?}\n{}", l.color, l.cpus, l.devices, l.text);
        }
        for (name, order, text) in &self.device_rows {
            let _ = writeln!(s, "row {name} {order}\n{text}");
        }
        let _ = writeln!(s, "colours {:?}", self.colors);
        for w in &self.warnings {
            let _ = writeln!(s, "warning {w}");
        }
        if let Some(r) = &self.refusal {
            let _ = writeln!(s, "refusal {r}");
        }
        s
    }

    /// Layout checks: everything inside the canvas, no two cells or devices on top of each
    /// other, each device inside the box of its locality, each CPU inside boxes holding it.
    pub fn check_geometry(&self, node: &Node) -> Vec<String> {
        let mut bad = Vec::new();
        let canvas = Rect { x: 0, y: 0, w: self.width, h: self.height };
        if let Some(r) = self.all_rects.iter().find(|r| !r.inside(&canvas)) {
            bad.push(format!("{r:?} is outside the {}x{} canvas", self.width, self.height));
        }
        let mut boxes: Vec<(String, Rect)> = self.pus.iter().map(|(c, p)| (format!("CPU {c}"), p.rect)).collect();
        boxes.extend(self.devices.iter().map(|(n, d)| (format!("device {n}"), d.rect)));
        for (i, (a, ra)) in boxes.iter().enumerate() {
            if let Some((b, _)) = boxes[i + 1..].iter().find(|(_, rb)| ra.overlaps(rb)) {
                bad.push(format!("{a} overlaps {b}"));
            }
        }
        let innermost = |r: &Rect| {
            self.frames
                .iter()
                .filter(|(_, _, f)| r.inside(f))
                .min_by_key(|(_, _, f)| f.w * f.h)
                .map(|(_, c, _)| c.clone())
        };
        for (name, d) in &self.devices {
            let want = node.devices.iter().find(|x| &x.name == name).map(|x| x.locality.to_list());
            if innermost(&d.rect) != want {
                bad.push(format!(
                    "device {name} is drawn in the box of {:?}, its locality is {want:?}",
                    innermost(&d.rect)
                ));
            }
        }
        for (cpu, p) in &self.pus {
            let holds = innermost(&p.rect)
                .and_then(|c| map_by_device::cpuset::CpuSet::parse_list(&c).ok())
                .is_some_and(|c| c.contains(*cpu));
            if !holds {
                bad.push(format!("CPU {cpu} is not inside a box that holds it"));
            }
        }
        bad
    }

    /// The picture shows `outcome` on `node`: every task on exactly its CPUs and devices, in
    /// its colour, with its legend; the warnings or the refusal.
    pub fn check_plan(&self, node: &Node, outcome: Result<&Plan, &PlanError>) -> Vec<String> {
        let mut bad = self.check_geometry(node);
        let all: BTreeSet<u32> = node.topology.all_cpus().iter().collect();
        if self.view != "plan" || self.host != node.hostname() {
            bad.push(format!("view {:?} host {:?}", self.view, self.host));
        }
        if self.pus.keys().copied().collect::<BTreeSet<_>>() != all {
            bad.push("the cells are not the node's CPUs".into());
        }
        let names: BTreeSet<&str> = node.devices.iter().map(|d| d.name.as_str()).collect();
        if self.devices.keys().map(String::as_str).collect::<BTreeSet<_>>() != names {
            bad.push("the device boxes are not the node's devices".into());
        }
        let plan = match outcome {
            Ok(p) => p,
            Err(e) => {
                if self.refusal.as_deref() != Some(e.to_string().as_str()) {
                    bad.push(format!("refusal {:?}, want {e}", self.refusal));
                }
                if !self.tasks.is_empty() || self.pus.values().any(|p| !p.tasks.is_empty()) {
                    bad.push("a refused plan shows tasks".into());
                }
                return bad;
            }
        };
        if self.refusal.is_some() {
            bad.push("a plan shows a refusal".into());
        }
        if self.warnings != plan.warnings {
            bad.push(format!("warnings {:?}, want {:?}", self.warnings, plan.warnings));
        }
        bad.extend(self.check_tasks(node, plan));
        bad
    }

    fn check_tasks(&self, node: &Node, plan: &Plan) -> Vec<String> {
        let mut bad = Vec::new();
        let colors: BTreeSet<&str> = self.tasks.values().map(|l| l.color.as_str()).collect();
        if colors.len() != plan.tasks.len() || self.tasks.len() != plan.tasks.len() {
            bad.push(format!(
                "{} legend entries in {} colours for {} tasks",
                self.tasks.len(),
                colors.len(),
                plan.tasks.len()
            ));
        }
        let color = |t: u32| self.tasks.get(&t).map(|l| l.color.clone()).unwrap_or_default();
        let on_cpu = |cpu: u32| -> Vec<u32> {
            plan.tasks.iter().filter(|t| t.cpus.as_ref().is_some_and(|c| c.contains(cpu))).map(|t| t.task).collect()
        };
        for (cpu, p) in &self.pus {
            let want = on_cpu(*cpu);
            let stripes: Vec<(u32, String)> = want.iter().map(|&t| (t, color(t))).collect();
            if p.tasks != want || p.stripes != stripes {
                bad.push(format!("CPU {cpu}: tasks {:?} stripes {:?}, want {want:?} {stripes:?}", p.tasks, p.stripes));
            }
        }
        for (i, d) in node.devices.iter().enumerate() {
            // A paired adapter is drawn as its tasks' device too.
            let holds = |t: &&TaskPlan| t.devices.contains(&i) || t.adapters.iter().any(|p| p.device == i);
            let want: Vec<u32> = plan.tasks.iter().filter(holds).map(|t| t.task).collect();
            let stripes: Vec<(u32, String)> = want.iter().map(|&t| (t, color(t))).collect();
            let Some(p) = self.devices.get(&d.name) else { continue };
            let id = d.gpu_id().map(|i| i.display_id()).unwrap_or_default();
            let a = |k: &str| p.attrs.get(k).cloned().unwrap_or_default();
            if p.tasks != want || p.stripes != stripes || a("data-busid") != d.busid_text() || a("data-id") != id {
                bad.push(format!(
                    "device {}: {:?} {:?} {:?}, want {want:?} {}",
                    d.name, p.tasks, p.stripes, p.attrs, id
                ));
            }
        }
        for t in &plan.tasks {
            let Some(l) = self.tasks.get(&t.task) else {
                bad.push(format!("task {} has no legend entry", t.task));
                continue;
            };
            let names: Vec<String> = t
                .devices
                .iter()
                .chain(t.adapters.iter().map(|p| &p.device))
                .map(|&i| node.devices[i].name.clone())
                .collect();
            let text: String = l.text.split_whitespace().collect();
            let missing: Vec<String> = [report::cpus_text(t), report::devices_text(node, t), report::env_text(t)]
                .into_iter()
                .filter(|want| !text.contains(&want.split_whitespace().collect::<String>()))
                .collect();
            if l.cpus != report::cpus_text(t) || l.devices != names || !missing.is_empty() {
                bad.push(format!("task {} legend {l:?}, missing {missing:?}", t.task));
            }
        }
        bad
    }

    /// The devices view shows `shown` (names, in mapping order) and no task.
    pub fn check_devices(&self, node: &Node, shown: &[&str]) -> Vec<String> {
        let mut bad = self.check_geometry(node);
        if self.view != "devices" || !self.tasks.is_empty() || self.pus.values().any(|p| !p.tasks.is_empty()) {
            bad.push("a devices picture shows tasks".into());
        }
        let rows: Vec<&str> = self.device_rows.iter().map(|(n, _, _)| n.as_str()).collect();
        if rows != shown || self.devices.len() != shown.len() {
            bad.push(format!("devices {rows:?}, want {shown:?}"));
        }
        let problems =
            node.devices.iter().filter(|d| shown.contains(&d.name.as_str()) && d.identity_problem().is_some());
        if problems.count() != self.warnings.len() {
            bad.push(format!("warnings {:?}", self.warnings));
        }
        bad
    }
}
