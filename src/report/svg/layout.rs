//! The node as nested boxes, the way `lstopo` draws it, folded so that a 2-CPU test node and
//! a 256-CPU, 64-GPU node are both readable:
//!
//! - frames for the Machine, packages, dies, groups and shared caches; a NUMA domain names
//!   the frame it is attached to (`Package 0 · NUMA 0`; a group that only holds a NUMA domain
//!   is drawn as `NUMA 1`);
//! - a cache private to one core (L1, and L2 on most machines) is not drawn, and an object
//!   with the same CPUs as its only child shares its child's frame (`Package 0 · L3 0`);
//! - cores are cells, their hardware threads stacked halves (or thirds, quarters) of the
//!   cell, each numbered by its OS CPU number, the number `taskset` and the plan show;
//! - devices sit in a strip at the bottom of the frame of their locality object;
//! - frames of cells are laid in a grid close to 2:1, frames of frames in one row while it
//!   stays under [`MAX_ROW`] pixels, else in the grid closest to 1.6:1.

use crate::cpuset::CpuSet;
use crate::node::Node;
use crate::topology::{ObjKind, Topology};

/// Width of a core (or PU) cell, and the height of one hardware thread in it.
pub const CELL_W: i64 = 30;
pub const PU_H: i64 = 14;
/// Height of a cell whose core has one hardware thread.
pub const SINGLE_H: i64 = 20;
pub const CELL_GAP: i64 = 2;
pub const FRAME_GAP: i64 = 6;
pub const PAD: i64 = 4;
/// Height of a frame's label line, and the label's font size.
pub const HEADER: i64 = 16;
pub const LABEL_SIZE: i64 = 11;
pub const DEV_W: i64 = 96;
pub const DEV_H: i64 = 42;
pub const DEV_GAP: i64 = 4;
/// A row of frames wider than this is folded into a grid.
pub const MAX_ROW: i64 = 1600;

/// One core cell (or a PU that has no core above it).
#[derive(Debug)]
pub struct Core {
    /// Index in the topology of the Core (or PU) object.
    pub obj: usize,
    /// OS CPU numbers of its hardware threads, in logical order.
    pub pus: Vec<u32>,
    pub x: i64,
    pub y: i64,
}

impl Core {
    pub fn height(&self) -> i64 {
        if self.pus.len() <= 1 {
            SINGLE_H
        } else {
            PU_H * self.pus.len() as i64
        }
    }
}

#[derive(Debug)]
pub enum Cell {
    Frame(Frame),
    Core(Core),
}

/// A drawn box: one topology object, or several with the same CPUs.
#[derive(Debug)]
pub struct Frame {
    pub label: String,
    /// The kind of its outermost object (for colour and tests).
    pub kind: ObjKind,
    pub cpus: CpuSet,
    /// A NUMA domain is attached to one of its objects.
    pub numa: bool,
    pub children: Vec<Cell>,
    /// Indexes into `Node::devices` whose locality is this frame, in device order.
    pub devices: Vec<usize>,
    pub x: i64,
    pub y: i64,
    pub w: i64,
    pub h: i64,
    /// Columns of the children's grid and of the device strip.
    cols: usize,
    dev_cols: usize,
}

impl Cell {
    fn size(&self) -> (i64, i64) {
        match self {
            Cell::Frame(f) => (f.w, f.h),
            Cell::Core(c) => (CELL_W, c.height()),
        }
    }
}

/// The folded tree of `node`, with the devices in `shown` attached, measured (place it
/// with [`Frame::place`]).
pub fn machine(node: &Node, shown: &[usize]) -> Frame {
    let tree = Tree::new(&node.topology);
    let mut devices_at: Vec<Vec<usize>> = vec![Vec::new(); node.topology.objects.len()];
    for &d in shown {
        if let Some(dev) = node.devices.get(d) {
            if let Some(list) = devices_at.get_mut(dev.locality_obj) {
                list.push(d);
            }
        }
    }
    let (mut cells, loose) = tree.build(0, &devices_at, node.hostname());
    let mut root = match cells.pop() {
        Some(Cell::Frame(f)) if cells.is_empty() => f,
        last => {
            cells.extend(last);
            Frame::new(node.hostname().to_string(), ObjKind::Machine, node.topology.all_cpus(), cells)
        }
    };
    root.devices.extend(loose);
    root.devices.sort_unstable();
    root.measure();
    root
}

/// Children and NUMA domains of each object.
struct Tree<'a> {
    topo: &'a Topology,
    children: Vec<Vec<usize>>,
    numa: Vec<Vec<usize>>,
    /// Cores under each object (to tell private caches).
    cores: Vec<usize>,
}

impl<'a> Tree<'a> {
    fn new(topo: &'a Topology) -> Tree<'a> {
        let n = topo.objects.len();
        let mut children = vec![Vec::new(); n];
        let mut numa = vec![Vec::new(); n];
        let mut cores = vec![0usize; n];
        for (i, o) in topo.objects.iter().enumerate() {
            let Some(p) = o.parent.filter(|&p| p < n && p != i) else { continue };
            if o.kind == ObjKind::NumaNode {
                numa[p].push(i);
            } else {
                children[p].push(i);
            }
            if o.kind == ObjKind::Core {
                for a in topo.ancestors(i) {
                    if let Some(c) = cores.get_mut(a) {
                        *c += 1;
                    }
                }
            }
        }
        let first = |i: &usize| (topo.objects[*i].cpuset.first().unwrap_or(u32::MAX), topo.objects[*i].logical_index);
        for c in &mut children {
            c.sort_by_key(first);
        }
        Tree { topo, children, numa, cores }
    }

    /// Cells for object `i` (one frame, or its children's cells when it is not drawn), and
    /// the devices that must go to the enclosing frame.
    fn build(&self, i: usize, devices_at: &[Vec<usize>], host: &str) -> (Vec<Cell>, Vec<usize>) {
        let o = &self.topo.objects[i];
        let mut loose: Vec<usize> = devices_at[i].clone();
        for &m in &self.numa[i] {
            loose.extend(&devices_at[m]);
        }
        if matches!(o.kind, ObjKind::Core | ObjKind::Pu) {
            let mut pus: Vec<u32> = self.children[i]
                .iter()
                .filter(|&&c| self.topo.objects[c].kind == ObjKind::Pu)
                .filter_map(|&c| self.topo.objects[c].os_index)
                .collect();
            if pus.is_empty() {
                pus = o.cpuset.iter().collect();
            }
            for &c in &self.children[i] {
                loose.extend(&devices_at[c]);
            }
            return (vec![Cell::Core(Core { obj: i, pus, x: 0, y: 0 })], loose);
        }
        let mut cells = Vec::new();
        for &c in &self.children[i] {
            let (sub, up) = self.build(c, devices_at, host);
            cells.extend(sub);
            loose.extend(up);
        }
        let private_cache = matches!(o.kind, ObjKind::L1Cache | ObjKind::L2Cache | ObjKind::L3Cache | ObjKind::Other)
            && self.cores[i] <= 1;
        if private_cache && i != 0 {
            return (cells, loose);
        }
        let label = self.label(i, host);
        let mut frame = match cells.pop() {
            // One child frame with the same CPUs: draw both as one frame (never the Machine's).
            Some(Cell::Frame(mut only)) if i != 0 && cells.is_empty() && only.cpus == o.cpuset => {
                only.label = format!("{label} · {}", only.label);
                only.kind = o.kind;
                only
            }
            last => {
                cells.extend(last);
                Frame::new(label, o.kind, o.cpuset.clone(), cells)
            }
        };
        frame.numa |= !self.numa[i].is_empty();
        frame.devices.extend(loose);
        frame.devices.sort_unstable();
        (vec![Cell::Frame(frame)], Vec::new())
    }

    /// `Package 0 · NUMA 0`, `NUMA 1`, `L3 2`, the host name for the Machine.
    fn label(&self, i: usize, host: &str) -> String {
        let o = &self.topo.objects[i];
        let index = o.os_index.unwrap_or(o.logical_index);
        let numa: Vec<String> = self.numa[i]
            .iter()
            .map(|&m| {
                let n = &self.topo.objects[m];
                n.os_index.unwrap_or(n.logical_index).to_string()
            })
            .collect();
        let numa = (!numa.is_empty()).then(|| format!("NUMA {}", numa.join(",")));
        let own = match o.kind {
            ObjKind::Machine => host.to_string(),
            ObjKind::Package => format!("Package {index}"),
            ObjKind::Die => format!("Die {index}"),
            // A memory group: the NUMA domain is what a user knows it by.
            ObjKind::Group if numa.is_some() => return numa.unwrap_or_default(),
            ObjKind::Group => format!("Group {}", o.logical_index),
            ObjKind::L3Cache => format!("L3 {}", o.logical_index),
            ObjKind::L2Cache => format!("L2 {}", o.logical_index),
            ObjKind::L1Cache => format!("L1 {}", o.logical_index),
            _ => format!("{:?} {}", o.kind, o.logical_index),
        };
        match numa {
            Some(n) => format!("{own} · {n}"),
            None => own,
        }
    }
}

impl Frame {
    fn new(label: String, kind: ObjKind, cpus: CpuSet, children: Vec<Cell>) -> Frame {
        Frame {
            label,
            kind,
            cpus,
            numa: false,
            children,
            devices: Vec::new(),
            x: 0,
            y: 0,
            w: 0,
            h: 0,
            cols: 1,
            dev_cols: 1,
        }
    }

    fn all_cells(&self) -> bool {
        self.children.iter().all(|c| matches!(c, Cell::Core(_)))
    }

    /// Sizes every frame bottom-up and chooses its grid.
    fn measure(&mut self) {
        for c in &mut self.children {
            if let Cell::Frame(f) = c {
                f.measure();
            }
        }
        let sizes: Vec<(i64, i64)> = self.children.iter().map(Cell::size).collect();
        let gap = if self.all_cells() { CELL_GAP } else { FRAME_GAP };
        let n = sizes.len().max(1);
        let one_row = grid_size(&sizes, n, gap);
        let best = if !self.all_cells() && one_row.0 <= MAX_ROW {
            n
        } else {
            let target = if self.all_cells() { 2.0 } else { 1.6 };
            (1..=n)
                .min_by(|&a, &b| self.score(&sizes, a, gap, target).total_cmp(&self.score(&sizes, b, gap, target)))
                .unwrap_or(n)
        };
        self.cols = best;
        let (w, h, dev_cols) = self.frame_size(&sizes, best, gap);
        (self.w, self.h, self.dev_cols) = (w, h, dev_cols);
    }

    /// How far `cols` columns are from the target aspect ratio (log scale), with a penalty
    /// for a ragged last row. Cells are judged by their own grid (so that every cache of a
    /// node shows its cores alike, whatever its label and devices), frames by the whole frame.
    fn score(&self, sizes: &[(i64, i64)], cols: usize, gap: i64, target: f64) -> f64 {
        let (w, h) = if self.all_cells() {
            grid_size(sizes, cols, gap)
        } else {
            let (w, h, _) = self.frame_size(sizes, cols, gap);
            (w, h)
        };
        let ragged = if sizes.len() % cols == 0 { 0.0 } else { 0.3 };
        ((w as f64 / h.max(1) as f64) / target).ln().abs() + ragged
    }

    /// The frame's width, height and device columns with `cols` columns of children.
    fn frame_size(&self, sizes: &[(i64, i64)], cols: usize, gap: i64) -> (i64, i64, usize) {
        let (gw, gh) = grid_size(sizes, cols, gap);
        let ndev = self.devices.len();
        let fit = ((gw + DEV_GAP) / (DEV_W + DEV_GAP)).max(0) as usize;
        let dev_cols = fit.max(4).min(ndev).max(1);
        let strip_w = dev_cols as i64 * (DEV_W + DEV_GAP) - DEV_GAP;
        let content_w = if ndev == 0 { gw } else { gw.max(strip_w) };
        let label_w = self.label.chars().count() as i64 * super::xml::char_width(LABEL_SIZE);
        let w = content_w.max(label_w) + 2 * PAD;
        let grid_h = if sizes.is_empty() { 0 } else { gh + PAD };
        let strip_h = if ndev == 0 { 0 } else { strip_height(ndev, dev_cols) + PAD };
        (w, HEADER + grid_h + strip_h + if grid_h + strip_h == 0 { PAD } else { 0 }, dev_cols)
    }

    /// Positions this frame at (`x`, `y`) and everything inside it.
    pub fn place(&mut self, x: i64, y: i64) {
        (self.x, self.y) = (x, y);
        let gap = if self.all_cells() { CELL_GAP } else { FRAME_GAP };
        let sizes: Vec<(i64, i64)> = self.children.iter().map(Cell::size).collect();
        let (col_w, row_h) = tracks(&sizes, self.cols);
        let top = y + HEADER;
        for (k, child) in self.children.iter_mut().enumerate() {
            let (col, row) = (k % self.cols, k / self.cols);
            let cx = x + PAD + col_w[..col].iter().map(|w| w + gap).sum::<i64>();
            let cy = top + row_h[..row].iter().map(|h| h + gap).sum::<i64>();
            match child {
                Cell::Frame(f) => f.place(cx, cy),
                Cell::Core(c) => (c.x, c.y) = (cx, cy),
            }
        }
    }

    /// Where device `k` of this frame's strip goes.
    pub fn device_pos(&self, k: usize) -> (i64, i64) {
        let cols = self.dev_cols.max(1);
        let strip_top = self.y + self.h - PAD - strip_height(self.devices.len(), cols);
        let (col, row) = ((k % cols) as i64, (k / cols) as i64);
        (self.x + PAD + col * (DEV_W + DEV_GAP), strip_top + row * (DEV_H + DEV_GAP))
    }
}

/// Height of a strip of `ndev` devices in `cols` columns.
fn strip_height(ndev: usize, cols: usize) -> i64 {
    let rows = ndev.div_ceil(cols.max(1)) as i64;
    rows * DEV_H + (rows - 1).max(0) * DEV_GAP
}

/// Column widths and row heights of a grid of `cols` columns.
fn tracks(sizes: &[(i64, i64)], cols: usize) -> (Vec<i64>, Vec<i64>) {
    let cols = cols.max(1);
    let rows = sizes.len().div_ceil(cols);
    let mut col_w = vec![0; cols.min(sizes.len().max(1))];
    let mut row_h = vec![0; rows];
    for (k, &(w, h)) in sizes.iter().enumerate() {
        col_w[k % cols] = col_w[k % cols].max(w);
        row_h[k / cols] = row_h[k / cols].max(h);
    }
    (col_w, row_h)
}

fn grid_size(sizes: &[(i64, i64)], cols: usize, gap: i64) -> (i64, i64) {
    if sizes.is_empty() {
        return (0, 0);
    }
    let (col_w, row_h) = tracks(sizes, cols);
    let w = col_w.iter().sum::<i64>() + gap * (col_w.len() as i64 - 1);
    let h = row_h.iter().sum::<i64>() + gap * (row_h.len() as i64 - 1);
    (w, h)
}
