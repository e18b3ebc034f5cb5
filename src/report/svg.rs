//! The plan and the node as a picture: `map-by-device plan ... --svg FILE` and
//! `map-by-device devices --svg FILE`. A placement is something people look at rather than
//! read (seed 000: "a placement they cannot see is a placement they will not trust"), so the
//! preview draws what `lstopo` draws — packages, NUMA domains, shared caches, cores and
//! hardware threads, each device in the box of its locality — and paints each task in its own
//! colour on its CPUs and its devices, with a legend in the same words as the text report.
//!
//! - Several tasks on one CPU or one device split its cell into stripes, one per task, and
//!   the legend says which tasks share what: one colour never hides another.
//! - The plan's warnings are written across the top; a refused plan is drawn too (the node,
//!   its devices, and the refusal in red), so the picture can go with a ticket.
//! - Plain SVG 1.1, no script, no external reference; every element a test needs carries
//!   `data-*` attributes (CPU numbers, task ids, device names, bus ids, identities, colours).
//!
//! Pure like the rest of `report`: the caller writes the file. How dense levels fold is
//! described in [`layout`].

mod layout;
mod xml;

use crate::cpuset::CpuSet;
use crate::device::{Device, DeviceClass};
use crate::node::Node;
use crate::plan::{Plan, PlanError, StepFacts};
use crate::spec::Spec;
use crate::topology::ObjKind;
use layout::{Core, Frame};
use std::collections::BTreeMap;
use xml::{char_width, fit, task_colors, wrap, Svg};

const MARGIN: i64 = 12;
const MIN_WIDTH: i64 = 760;
const TEXT_SIZE: i64 = 11;
const LINE_H: i64 = 14;

/// The plan of one step as a picture; `outcome` is the planner's answer, a refusal included.
pub fn plan_svg(node: &Node, spec: &Spec, facts: &StepFacts, outcome: Result<&Plan, &PlanError>) -> String {
    let mut caption = format!("plan -n {} {spec}", facts.ntasks);
    if let Some(c) = facts.cpus_per_task {
        caption.push_str(&format!(" --cpus-per-task {c}"));
    }
    if let Some(a) = &facts.allowed_cpus {
        caption.push_str(&format!(" --allowed-cpus {a}"));
    }
    if let Some(g) = &facts.step_gpus {
        let g: Vec<String> = g.iter().map(u32::to_string).collect();
        caption.push_str(&format!(" --step-gpus {}", g.join(",")));
    }
    if let Some(t) = &facts.task_cpus {
        let t: Vec<String> = t.iter().map(CpuSet::to_list).collect();
        caption.push_str(&format!(" --task-cpus '{}'", t.join(";")));
    }
    for (k, v) in &facts.env {
        caption.push_str(&format!(" --env {k}={v}"));
    }
    let mut view = View::new(node, "plan", caption, (0..node.devices.len()).collect());
    view.allowed.clone_from(&facts.allowed_cpus);
    match outcome {
        Ok(plan) => {
            view.tasks(plan);
            view.warnings.clone_from(&plan.warnings);
        }
        Err(e) => view.refusal = Some(e.to_string()),
    }
    view.draw()
}

/// The node and `devices` (in mapping order) as a picture, each class in its colour.
/// `filter` is the `--class` the list was made with, for the caption.
pub fn devices_svg(node: &Node, filter: Option<&str>, devices: &[&Device]) -> String {
    let shown: Vec<usize> = devices.iter().filter_map(|d| node.devices.iter().position(|x| x == *d)).collect();
    let caption = filter.map_or_else(|| "devices".to_string(), |c| format!("devices --class {c}"));
    let mut view = View::new(node, "devices", caption, shown);
    view.device_rows();
    view.draw()
}

/// One legend entry: a colour swatch, its lines, its `data-*` attributes.
struct Row {
    class: &'static str,
    color: String,
    lines: Vec<String>,
    attrs: Vec<(&'static str, String)>,
}

/// Everything a picture shows, before it is laid out.
struct View<'a> {
    node: &'a Node,
    kind: &'static str,
    caption: String,
    /// Devices drawn, as indexes into `node.devices`.
    shown: Vec<usize>,
    /// Tasks on each CPU and on each device, ascending.
    cpu_tasks: BTreeMap<u32, Vec<u32>>,
    device_tasks: BTreeMap<usize, Vec<u32>>,
    colors: BTreeMap<u32, String>,
    warnings: Vec<String>,
    refusal: Option<String>,
    rows: Vec<Row>,
    /// The step's CPUs when they are not the whole node: the others are greyed.
    allowed: Option<CpuSet>,
}

fn class_color(class: DeviceClass) -> &'static str {
    match class {
        DeviceClass::Gpu => "#9fd67a",
        DeviceClass::Network => "#9db8e8",
        DeviceClass::Block => "#f4b183",
    }
}

fn class_word(class: DeviceClass) -> &'static str {
    match class {
        DeviceClass::Gpu => "GPU",
        DeviceClass::Network => "NIC",
        DeviceClass::Block => "disk",
    }
}

fn ids(tasks: &[u32]) -> String {
    tasks.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn plural(tasks: &[u32]) -> String {
    format!("{} {}", if tasks.len() == 1 { "task" } else { "tasks" }, ids(tasks))
}

impl<'a> View<'a> {
    fn new(node: &'a Node, kind: &'static str, caption: String, shown: Vec<usize>) -> View<'a> {
        View {
            node,
            kind,
            caption,
            shown,
            cpu_tasks: BTreeMap::new(),
            device_tasks: BTreeMap::new(),
            colors: BTreeMap::new(),
            warnings: Vec::new(),
            refusal: None,
            rows: Vec::new(),
            allowed: None,
        }
    }

    /// The plan's tasks: who is on which CPU and device, and a legend row each.
    fn tasks(&mut self, plan: &Plan) {
        for (t, color) in plan.tasks.iter().zip(task_colors(plan.tasks.len())) {
            self.colors.insert(t.task, color);
            for cpu in t.cpus.iter().flat_map(CpuSet::iter) {
                self.cpu_tasks.entry(cpu).or_default().push(t.task);
            }
            // A paired adapter is the task's too: drawn in its colour, shared in stripes.
            for d in t.devices.iter().copied().chain(t.adapters.iter().map(|p| p.device)) {
                let list = self.device_tasks.entry(d).or_default();
                if !list.contains(&t.task) {
                    list.push(t.task);
                }
            }
        }
        for t in &plan.tasks {
            let mut lines = vec![
                format!("task {}  cpus {}  {}", t.task, super::cpus_text(t), super::devices_text(self.node, t)),
                super::env_text(t),
            ];
            lines.extend(self.sharing(plan, t));
            let names: Vec<&str> = t
                .devices
                .iter()
                .chain(t.adapters.iter().map(|p| &p.device))
                .filter_map(|&d| self.node.devices.get(d))
                .map(|d| d.name.as_str())
                .collect();
            let color = self.colors.get(&t.task).cloned().unwrap_or_default();
            self.rows.push(Row {
                class: "task",
                attrs: vec![
                    ("data-task", t.task.to_string()),
                    ("data-color", color.clone()),
                    ("data-cpus", super::cpus_text(t)),
                    ("data-devices", names.join(",")),
                ],
                color,
                lines,
            });
        }
    }

    /// `shares CPUs 0-15 with tasks 1,2,3; shares cuda0 with task 4`, when it does.
    fn sharing(&self, plan: &Plan, t: &crate::plan::TaskPlan) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(cpus) = &t.cpus {
            let mut common = CpuSet::new();
            let mut with = Vec::new();
            for o in plan.tasks.iter().filter(|o| o.task != t.task) {
                if let Some(oc) = o.cpus.as_ref().filter(|oc| oc.intersects(cpus)) {
                    common = common.union(&oc.intersection(cpus));
                    with.push(o.task);
                }
            }
            if !with.is_empty() {
                parts.push(format!("shares CPUs {common} with {}", plural(&with)));
            }
        }
        // (A paired adapter's sharing is in the device text already: "(shared with task 1)".)
        for &d in &t.devices {
            let others: Vec<u32> =
                self.device_tasks.get(&d).into_iter().flatten().copied().filter(|&o| o != t.task).collect();
            if let (false, Some(dev)) = (others.is_empty(), self.node.devices.get(d)) {
                parts.push(format!("shares {} with {}", dev.name, plural(&others)));
            }
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// The devices view's legend: each shown device in mapping order, and why a GPU would
    /// be refused.
    fn device_rows(&mut self) {
        for &i in &self.shown {
            let Some(d) = self.node.devices.get(i) else { continue };
            let order = class_order(self.node, i);
            let id = d.gpu_id().map_or_else(|| "-".to_string(), |id| id.display_id());
            let mut lines = vec![format!(
                "{} {order}  {} {} {} {}  locality {}",
                d.class,
                d.busid_text(),
                d.name,
                d.vendor.name(),
                id,
                d.locality
            )];
            if let Some(p) = d.identity_problem() {
                lines.push(format!("no identity: {p}"));
                self.warnings.push(format!(
                    "GPU {} at {} cannot be named to its runtime ({p}): a GPU mapping here is refused",
                    d.name,
                    d.busid_text()
                ));
            }
            self.rows.push(Row {
                class: "device-row",
                color: class_color(d.class).to_string(),
                lines,
                attrs: vec![
                    ("data-device", d.name.clone()),
                    ("data-order", order.to_string()),
                    ("data-color", class_color(d.class).to_string()),
                ],
            });
        }
    }

    /// Lays everything out and writes the document.
    fn draw(&self) -> String {
        let mut machine = layout::machine(self.node, &self.shown);
        let width = (machine.w + 2 * MARGIN).max(MIN_WIDTH);
        let chars = ((width - 2 * MARGIN) / char_width(TEXT_SIZE)).max(20) as usize;
        let mut svg = Svg::default();
        let mut y = self.draw_header(&mut svg, chars);
        machine.place(MARGIN, y);
        self.draw_frame(&mut svg, &machine);
        y += machine.h + 2 * FRAME_SPACE;
        y = self.draw_legend(&mut svg, y, chars);
        let host = self.node.hostname().to_string();
        let root = [("data-view", self.kind), ("data-host", host.as_str()), ("data-caption", self.caption.as_str())];
        svg.finish(width, y + MARGIN, &root)
    }

    /// Title, what the cells mean, the refusal and the warnings; returns the next free y.
    fn draw_header(&self, svg: &mut Svg, chars: usize) -> i64 {
        let mut y = MARGIN + 15;
        let title = format!("{} — map-by-device {}", self.node.hostname(), self.caption);
        svg.text(MARGIN, y, 15, &title, &[("font-weight", "bold"), ("class", "caption")]);
        y += 6;
        let mut note = FOLD_NOTE.to_string();
        if self.kind == "plan" {
            note = format!("{note} {STRIPES_NOTE}");
        }
        if let Some(a) = &self.allowed {
            note = format!("{note} Grey cells: CPUs outside the step's CPUs ({a}).");
        }
        for line in [self.summary(), note] {
            for l in wrap(&line, chars) {
                y += LINE_H;
                svg.text(MARGIN, y, TEXT_SIZE, &l, &[("fill", "#444444")]);
            }
        }
        y += 8;
        let notes = self
            .refusal
            .iter()
            .map(|r| ("refusal", "refused: ", r))
            .chain(self.warnings.iter().map(|w| ("warning", "warning: ", w)));
        for (class, prefix, text) in notes {
            let lines = wrap(&format!("{prefix}{text}"), chars.saturating_sub(2));
            let h = lines.len() as i64 * LINE_H + 8;
            let (fill, stroke) = if class == "refusal" { ("#fbe3e4", "#c0392b") } else { ("#fff4d6", "#d39e00") };
            svg.group(&[("class", class), ("data-text", text)]);
            svg.rect(MARGIN, y, chars as i64 * char_width(TEXT_SIZE), h, &[("fill", fill), ("stroke", stroke)]);
            for (k, l) in lines.iter().enumerate() {
                svg.text(MARGIN + 6, y + 4 + LINE_H * (k as i64 + 1) - 3, TEXT_SIZE, l, &[]);
            }
            svg.end_group();
            y += h + 4;
        }
        y + 4
    }

    /// `256 CPUs: 2 packages, 8 NUMA domains, 128 cores of 2 hardware threads; 13 devices`.
    fn summary(&self) -> String {
        let topo = &self.node.topology;
        let count = |k: ObjKind| topo.of_kind(k).count();
        let cores = count(ObjKind::Core);
        let cpus = topo.all_cpus().len();
        let threads = if cores == 0 {
            String::new()
        } else if cpus % cores == 0 {
            format!(", {cores} cores of {} hardware thread{}", cpus / cores, if cpus == cores { "" } else { "s" })
        } else {
            format!(", {cores} cores")
        };
        let n = |k: usize, word: &str| format!("{k} {word}{}", if k == 1 { "" } else { "s" });
        format!(
            "{cpus} CPUs: {}, {}{threads}; {} of {} drawn",
            n(count(ObjKind::Package), "package"),
            n(count(ObjKind::NumaNode), "NUMA domain"),
            self.shown.len(),
            n(self.node.devices.len(), "device")
        )
    }
}

const FRAME_SPACE: i64 = 6;
const FOLD_NOTE: &str = "Each cell is a core and each row in it a hardware thread, numbered by OS CPU (the numbers \
    of taskset and the plan); caches private to a core are not drawn; devices sit at the bottom of the box of their \
    locality.";
/// The fill of a CPU that is not the step's.
const OUTSIDE: &str = "#c8c8c8";
const STRIPES_NOTE: &str = "Stripes: several tasks on one CPU or device.";

/// Drawing the machine: frames, cells, devices.
impl View<'_> {
    fn draw_frame(&self, svg: &mut Svg, f: &Frame) {
        let (fill, stroke) = match f.kind {
            ObjKind::Machine => ("#ffffff", "#333333"),
            ObjKind::Package => ("#e4e4e4", "#555555"),
            _ if f.numa => ("#f3e7df", "#8a6d5a"),
            ObjKind::L3Cache | ObjKind::L2Cache | ObjKind::L1Cache => ("#fafafa", "#8c8c8c"),
            _ => ("#efefef", "#777777"),
        };
        let cpus = f.cpus.to_list();
        svg.group(&[("class", "frame"), ("data-kind", &format!("{:?}", f.kind)), ("data-cpus", &cpus)]);
        svg.title(&format!("{}: CPUs {cpus}", f.label));
        svg.rect(f.x, f.y, f.w, f.h, &[("fill", fill), ("stroke", stroke)]);
        svg.text(f.x + layout::PAD, f.y + 12, layout::LABEL_SIZE, &f.label, &[("font-weight", "bold")]);
        svg.end_group();
        for cell in &f.children {
            match cell {
                layout::Cell::Frame(sub) => self.draw_frame(svg, sub),
                layout::Cell::Core(core) => self.draw_core(svg, core),
            }
        }
        for (k, &d) in f.devices.iter().enumerate() {
            let (x, y) = f.device_pos(k);
            self.draw_device(svg, d, x, y);
        }
    }

    /// A core cell: one row per hardware thread, each painted with its tasks' stripes.
    fn draw_core(&self, svg: &mut Svg, c: &Core) {
        let cpus: CpuSet = c.pus.iter().copied().collect();
        let row_h = if c.pus.len() <= 1 { layout::SINGLE_H } else { layout::PU_H };
        let core = self.node.topology.objects.get(c.obj);
        let name = core.map_or(String::new(), |o| format!("{:?} L#{}", o.kind, o.logical_index));
        svg.group(&[("class", "core"), ("data-cpus", &cpus.to_list())]);
        for (k, &cpu) in c.pus.iter().enumerate() {
            let y = c.y + row_h * k as i64;
            let tasks = self.cpu_tasks.get(&cpu).map(Vec::as_slice).unwrap_or_default();
            let outside = self.allowed.as_ref().is_some_and(|a| !a.contains(cpu));
            let (cpu_text, task_text) = (cpu.to_string(), ids(tasks));
            let mut attrs = vec![("class", "pu"), ("data-cpu", cpu_text.as_str()), ("data-tasks", task_text.as_str())];
            if outside {
                attrs.push(("data-outside-step", "true"));
            }
            svg.group(&attrs);
            let who = if tasks.is_empty() { "no task".to_string() } else { plural(tasks) };
            let step = if outside { ", not one of the step's CPUs" } else { "" };
            svg.title(&format!("CPU {cpu} ({name}{step}): {who}"));
            self.paint(svg, (c.x, y, layout::CELL_W, row_h), tasks, if outside { OUTSIDE } else { "#ffffff" });
            svg.rect(c.x, y, layout::CELL_W, row_h, &[("fill", "none"), ("stroke", "#8c8c8c")]);
            let label = cpu.to_string();
            svg.text(c.x + layout::CELL_W / 2, y + row_h / 2 + 3, 9, &label, HALO);
            svg.end_group();
        }
        svg.end_group();
    }

    /// Fills a rectangle with one stripe per task (or `empty` when there is none).
    fn paint(&self, svg: &mut Svg, (x, y, w, h): (i64, i64, i64, i64), tasks: &[u32], empty: &str) {
        if tasks.is_empty() {
            svg.rect(x, y, w, h, &[("fill", empty)]);
            return;
        }
        let k = tasks.len() as i64;
        for (j, t) in tasks.iter().enumerate() {
            let (x0, x1) = (x + w * j as i64 / k, x + w * (j as i64 + 1) / k);
            let color = self.colors.get(t).map_or("#000000", String::as_str);
            svg.rect(x0, y, x1 - x0, h, &[("class", "stripe"), ("data-task", &t.to_string()), ("fill", color)]);
        }
    }

    fn draw_device(&self, svg: &mut Svg, i: usize, x: i64, y: i64) {
        let Some(d) = self.node.devices.get(i) else { return };
        let tasks = self.device_tasks.get(&i).map(Vec::as_slice).unwrap_or_default();
        let id = d.gpu_id().map(|id| id.display_id()).unwrap_or_default();
        let busid = d.busid_text();
        svg.group(&[
            ("class", "device"),
            ("data-device", &d.name),
            ("data-class", &d.class.to_string()),
            ("data-busid", &busid),
            ("data-id", &id),
            ("data-tasks", &ids(tasks)),
        ]);
        let who = if tasks.is_empty() { String::new() } else { format!(": {}", plural(tasks)) };
        svg.title(&format!("{} {}{} locality {}{who}", d.class, super::device_label(d), "", d.locality));
        let (w, h) = (layout::DEV_W, layout::DEV_H);
        let empty = if self.kind == "devices" { class_color(d.class) } else { "#f7f7f7" };
        self.paint(svg, (x, y, w, h), tasks, empty);
        let dash: &[(&str, &str)] = if d.identity_problem().is_some() {
            &[("fill", "none"), ("stroke", "#c0392b"), ("stroke-width", "2"), ("stroke-dasharray", "4 2")]
        } else if tasks.is_empty() && self.kind == "plan" {
            &[("fill", "none"), ("stroke", "#999999"), ("stroke-dasharray", "4 2")]
        } else {
            &[("fill", "none"), ("stroke", "#222222"), ("stroke-width", "1.5")]
        };
        svg.rect(x, y, w, h, dash);
        let chars = ((w - 6) / char_width(10)) as usize;
        let short = busid.strip_prefix("0000:").unwrap_or(&busid).to_string();
        let third = match (self.kind, tasks.is_empty()) {
            ("devices", _) => {
                let order = class_order(self.node, i);
                let problem = if d.identity_problem().is_some() { " · no id" } else { "" };
                format!("{} {order}{problem}", d.class)
            }
            (_, true) => "no task".to_string(),
            (_, false) => plural(tasks),
        };
        let bold: &[(&str, &str)] =
            &[("font-weight", "bold"), ("paint-order", "stroke"), ("stroke", "#ffffff"), ("stroke-width", "3")];
        svg.text(x + 4, y + 13, 10, &fit(&format!("{} {}", class_word(d.class), d.name), chars), bold);
        svg.text(x + 4, y + 25, 9, &fit(&short, chars + 1), &HALO[1..]);
        svg.text(x + 4, y + 37, 9, &fit(&third, chars + 1), &HALO[1..]);
        svg.end_group();
    }

    /// The legend: one row per task (or device), in as many columns as the picture's width
    /// holds, each row wrapped to its column.
    fn draw_legend(&self, svg: &mut Svg, mut y: i64, chars: usize) -> i64 {
        let heading = if self.kind == "plan" { "Tasks" } else { "Devices, in mapping order" };
        svg.text(MARGIN, y + 12, 12, heading, &[("font-weight", "bold")]);
        y += 20;
        if self.rows.is_empty() {
            let none = match (&self.refusal, self.kind) {
                (Some(_), _) => "none: the plan is refused (above), so the step fails and no task starts",
                (None, "plan") => "none: no task is mapped, tasks keep the binding and environment Slurm gave them",
                (None, _) => "none",
            };
            svg.text(MARGIN, y + 10, TEXT_SIZE, none, &[("class", "empty")]);
            return y + LINE_H + 5;
        }
        let natural = self.rows.iter().flat_map(|r| &r.lines).map(|l| l.chars().count() + 6).max().unwrap_or(1);
        let col_chars = natural.min(chars);
        let cols = ((chars + 3) / (col_chars + 3)).clamp(1, self.rows.len().max(1));
        let per_col = self.rows.len().div_ceil(cols).max(1);
        let mut bottom = y;
        for (c, rows) in self.rows.chunks(per_col).enumerate() {
            let x = MARGIN + (c * (col_chars + 3)) as i64 * char_width(TEXT_SIZE);
            let mut cy = y;
            for row in rows {
                cy += draw_row(svg, row, x, cy, col_chars);
            }
            bottom = bottom.max(cy);
        }
        bottom
    }
}

/// One legend row at (`x`, `y`), wrapped to `chars` characters; returns its height.
fn draw_row(svg: &mut Svg, row: &Row, x: i64, y: i64, chars: usize) -> i64 {
    let attrs: Vec<(&str, &str)> =
        std::iter::once(("class", row.class)).chain(row.attrs.iter().map(|(k, v)| (*k, v.as_str()))).collect();
    svg.group(&attrs);
    svg.rect(x, y, 12, 12, &[("fill", &row.color), ("stroke", "#222222")]);
    let mut k = 0;
    for (n, line) in row.lines.iter().enumerate() {
        let indent = if n == 0 { 0 } else { 2 };
        for (m, part) in wrap(line, chars.saturating_sub(4 + indent)).iter().enumerate() {
            let dx = 18 + char_width(TEXT_SIZE) * (indent + if m > 0 { 2 } else { 0 }) as i64;
            svg.text(x + dx, y + 10 + LINE_H * k, TEXT_SIZE, part, &[]);
            k += 1;
        }
    }
    svg.end_group();
    LINE_H * k.max(1) + 5
}

/// Centered cell text with a white halo, readable on any task colour.
const HALO: &[(&str, &str)] =
    &[("text-anchor", "middle"), ("paint-order", "stroke"), ("stroke", "#ffffff"), ("stroke-width", "2.5")];

/// A device's place among the devices its class hands out (`2`), or `held back`.
fn class_order(node: &Node, i: usize) -> String {
    let Some(d) = node.devices.get(i) else { return String::new() };
    match node.class_indexes(d.class).iter().position(|&x| x == i) {
        Some(p) => p.to_string(),
        None => "held back".into(),
    }
}
