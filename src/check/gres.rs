//! `gres.conf` as Slurm numbers its GPUs, against the order the plugin maps them in.
//!
//! The plugin reads `SLURM_STEP_GPUS` as positions among the node's GPUs in PCI bus order
//! (docs/slurm-allocation.md, section 2). Slurm's index is that order with `AutoDetect=nvml`
//! (and, by its documentation, `rsmi` and `oneapi`); with a hand-written gres.conf it is the
//! order of the `File=` values as written, for the lines that apply to the node, each range
//! (`/dev/nvidia[0-3]`) expanded in ascending order. When the two differ a step is told GPUs
//! that are not its own, and under `ConstrainDevices` GPUs its device cgroup hides.
//!
//! Each file is matched to a GPU by bus id: `/dev/nvidiaN` through the `Device Minor: N` of
//! the NVIDIA driver's information file (the caller reads those), `/dev/dri/renderDN` and
//! `/dev/dri/cardN` through hwloc's DRM OS device of that name. [`check`] is pure; [`read_input`]
//! reads gres.conf and the driver files for `map-by-device check`.

use crate::device::{DeviceClass, Vendor};
use crate::node::Node;

/// What the caller read for the gres.conf check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresInput {
    /// The file, in words (`/etc/slurm/gres.conf`).
    pub origin: String,
    pub text: String,
    /// Where the NVIDIA driver files were read (`None`: not read, no proc root).
    pub proc_root: Option<String>,
    /// The `/dev/nvidiaN` minor of each NVIDIA GPU of the node, by bus id, or why unknown.
    pub nvidia_minors: Vec<(String, Result<u32, MinorUnknown>)>,
}

/// One GPU of gres.conf for this node, in Slurm's index order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresGpu {
    /// Slurm's index of this GPU on the node.
    pub index: usize,
    pub line: usize,
    pub file: String,
    pub gpu_type: Option<String>,
    pub cores: Option<String>,
    /// The GPU the file is (bus id, name, and how it was matched), or why it is not known.
    pub matched: Result<(String, String, String), Unmatched>,
}

/// Why an NVIDIA GPU's `/dev/nvidiaN` minor is not known ([`read_input`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MinorUnknown {
    /// The driver's information file is not there.
    #[error("no {}", .0.display())]
    NoFile(std::path::PathBuf),
    /// It is there but says no minor (the driver file error's words).
    #[error("{0}")]
    Unreadable(String),
}

/// Why a gres.conf `File=` cannot be told to be one of the node's GPUs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmatched {
    /// Not yet matched ([`parse`] leaves every file so until [`check`] matches it).
    #[error("not matched")]
    NotYet,
    /// The file was matched (`how`) to a function that is not one of the node's GPUs.
    #[error("{how}, which is not one of this node's GPUs")]
    NotAGpu { how: String },
    #[error("no NVIDIA driver files are read (give --proc-root, the node's /proc)")]
    NoProcRoot,
    #[error("no GPU's driver file under {root} says Device Minor {minor}")]
    NoMinor { root: String, minor: u32 },
    #[error("hwloc reports no {0} on this node")]
    NoDrm(String),
    #[error("neither /dev/nvidiaN nor /dev/dri/renderDN or cardN: cannot tell which GPU it is")]
    UnknownKind,
}

/// Why a hostlist expression (`/dev/nvidia[0-3]`, `node[01-04]`) cannot be expanded; each
/// keeps the item and, where one is at fault, the range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("unbalanced ']' in {item:?}")]
    UnbalancedClose { item: String },
    #[error("unclosed '[' in {item:?}")]
    Unclosed { item: String },
    #[error("{range:?} in {item:?} is not a number or a range N-M")]
    NotANumber { range: String, item: String },
    #[error("range {range:?} in {item:?} is empty or too large")]
    BadRange { range: String, item: String },
    #[error("{item:?} names more than {MAX_EXPANSION} items")]
    TooMany { item: String },
}

/// A gres.conf line slurmd would refuse, by its number, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct LineError {
    pub line: usize,
    pub problem: LineProblem,
}

/// What is wrong with a gres.conf line ([`LineError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    /// Its `NodeName=` hostlist.
    #[error(transparent)]
    NodeName(HostlistError),
    /// Its `File=` value.
    #[error("File={files}: {source}")]
    File { files: String, source: HostlistError },
}

/// What the gres.conf check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresReport {
    pub origin: String,
    /// `AutoDetect=` in force for this node (`nvml`, `off`...), if any.
    pub autodetect: Option<String>,
    pub gpus: Vec<GresGpu>,
    /// Whether Slurm's indices are the mapping order (`None`: cannot be told).
    pub in_order: Option<bool>,
    /// The names a `NodeName=` must list for a line to be this node's, as slurmd matches
    /// them ([`node_names`]).
    pub names: Vec<String>,
    /// The `NodeName=` values of the `Name=gpu` lines that are not this node's, in file order,
    /// each once: shown when none is this node's.
    pub other_nodes: Vec<String>,
}

/// `AutoDetect` values with which Slurm orders the GPUs itself.
const DETECTORS: [&str; 3] = ["nvml", "rsmi", "oneapi"];

/// Most files one expression may expand to (a node has far fewer GPUs).
const MAX_EXPANSION: usize = 4096;

/// Expands a Slurm hostlist-style expression (`/dev/nvidia[0-3]`, `node[01-04,7]`, `a,b`):
/// items separated by top-level commas, each bracket a list of numbers and ranges whose
/// width (leading zeros) the first number sets.
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                expand_item(&expr[start..i], &mut out)?;
                start = i + 1;
            }
            _ => {}
        }
    }
    expand_item(&expr[start..], &mut out)?;
    Ok(out)
}

fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), HostlistError> {
    let Some(open) = item.find('[') else {
        if item.contains(']') {
            return Err(HostlistError::UnbalancedClose { item: item.to_string() });
        }
        out.push(item.to_string());
        return Ok(());
    };
    let close =
        item[open..].find(']').map(|c| open + c).ok_or_else(|| HostlistError::Unclosed { item: item.to_string() })?;
    let (head, ranges, tail) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    for range in ranges.split(',') {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let number = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| HostlistError::NotANumber { range: range.to_string(), item: item.to_string() })
        };
        let (lo, hi) = (number(a)?, number(b)?);
        if lo > hi || hi - lo >= MAX_EXPANSION as u64 {
            return Err(HostlistError::BadRange { range: range.to_string(), item: item.to_string() });
        }
        let width = a.trim().len();
        for n in lo..=hi {
            expand_item(&format!("{head}{n:0width$}{tail}"), out)?;
            if out.len() > MAX_EXPANSION {
                return Err(HostlistError::TooMany { item: item.to_string() });
            }
        }
    }
    Ok(())
}

/// The `Key=Value` words of one logical line (keys lower-cased), without its comment.
fn words(line: &str) -> Vec<(String, String)> {
    let content = line.split('#').next().unwrap_or("");
    content
        .split_whitespace()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_ascii_lowercase(), v.to_string()),
            None => (w.to_ascii_lowercase(), String::new()),
        })
        .collect()
}

/// The names slurmd answers to in gres.conf's `NodeName=`: slurmd matches the hostlist
/// against its node name, which is its `-N` name or else the slurm.conf `NodeName` of its
/// *short* host name (`gethostname_short`). So a host that reports `node1.cluster.local` (or
/// is checked with `--hostname node1.cluster.local`) is `node1` too.
pub fn node_names(host: &str) -> Vec<String> {
    let mut names = vec![host.to_string()];
    if let Some((short, _)) = host.split_once('.').filter(|(s, _)| !s.is_empty()) {
        names.push(short.to_string());
    }
    names
}

/// Whether a line with `NodeName=names` (a hostlist) applies to a node called any of `hosts`.
fn names_host(names: &str, hosts: &[String]) -> Result<bool, HostlistError> {
    Ok(names.eq_ignore_ascii_case("all") || expand(names)?.iter().any(|n| hosts.contains(n)))
}

/// What [`parse`] found: the `AutoDetect=` in force, this node's GPU files in Slurm's index
/// order, whether any `Name=gpu` line is this node's (with or without `File=`), and the
/// `NodeName=` values of the `Name=gpu` lines that are not.
#[derive(Debug, Default)]
struct Parsed {
    autodetect: Option<String>,
    gpus: Vec<GresGpu>,
    own_gpu_lines: bool,
    other_nodes: Vec<String>,
}

/// The GPU files gres.conf gives the node called `hosts`, in Slurm's index order, with their
/// line, `Type=` and `Cores=`, and the `AutoDetect=` in force; `Err` names the line Slurm
/// would refuse.
fn parse(text: &str, hosts: &[String]) -> Result<Parsed, LineError> {
    let mut found = Parsed::default();
    let mut pending = String::new();
    for (i, raw) in text.lines().enumerate() {
        // A line ending in '\' goes on (Slurm's parser joins them).
        if let Some(more) = raw.strip_suffix('\\') {
            pending.push_str(more);
            pending.push(' ');
            continue;
        }
        let line = std::mem::take(&mut pending) + raw;
        let words = words(&line);
        let get = |k: &str| words.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let fail = |problem| LineError { line: i + 1, problem };
        let is_gpu = get("name").is_some_and(|n| n.eq_ignore_ascii_case("gpu"));
        if let Some(names) = get("nodename") {
            if !names_host(&names, hosts).map_err(|e| fail(LineProblem::NodeName(e)))? {
                if is_gpu && !found.other_nodes.contains(&names) {
                    found.other_nodes.push(names);
                }
                continue;
            }
        }
        if let Some(a) = get("autodetect") {
            found.autodetect = Some(a.to_ascii_lowercase());
        }
        if !is_gpu {
            continue;
        }
        found.own_gpu_lines = true;
        let Some(files) = get("file") else { continue };
        for file in expand(&files).map_err(|source| fail(LineProblem::File { files: files.clone(), source }))? {
            found.gpus.push(GresGpu {
                index: found.gpus.len(),
                line: i + 1,
                file,
                gpu_type: get("type"),
                cores: get("cores"),
                matched: Err(Unmatched::NotYet),
            });
        }
    }
    Ok(found)
}

/// The GPU `file` is on `node`: its bus id, name, and how that was found.
fn match_file(file: &str, node: &Node, input: &GresInput) -> Result<(String, String, String), Unmatched> {
    let gpus = node.class_indexes(DeviceClass::Gpu);
    let named = |busid: &str, how: String| {
        let name = gpus.iter().map(|&i| &node.devices[i]).find(|d| d.busid_text() == busid).map(|d| d.name.clone());
        name.map(|n| (busid.to_string(), n, how.clone())).ok_or_else(|| Unmatched::NotAGpu { how: how.clone() })
    };
    if let Some(minor) = file.strip_prefix("/dev/nvidia").and_then(|m| m.parse::<u32>().ok()) {
        let Some(root) = &input.proc_root else {
            return Err(Unmatched::NoProcRoot);
        };
        return match input.nvidia_minors.iter().find(|(_, m)| m.as_ref() == Ok(&minor)) {
            Some((busid, _)) => named(busid, format!("Device Minor {minor}")),
            None => Err(Unmatched::NoMinor { root: root.clone(), minor }),
        };
    }
    if let Some(drm) = file.strip_prefix("/dev/dri/") {
        let function = node.topology.pci.iter().find(|f| f.osdevs.iter().any(|o| o.name == drm));
        return match function {
            Some(f) => named(&f.busid.to_string(), format!("hwloc's {drm}")),
            None => Err(Unmatched::NoDrm(drm.to_string())),
        };
    }
    Err(Unmatched::UnknownKind)
}

/// Checks gres.conf's GPUs for `node`; a wrong order (or a file Slurm would refuse) is a
/// problem, a file that cannot be matched a note. A GPU node that gres.conf gives GPUs to
/// other nodes only is a problem too: its slurmd finds no GPU GRES there (a `NodeName=` that
/// does not name it, often a full name against slurmd's short one, or a typo).
pub fn check(
    input: &GresInput,
    node: &Node,
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Option<GresReport> {
    let names = node_names(node.hostname());
    let Parsed { autodetect, mut gpus, own_gpu_lines, other_nodes } = match parse(&input.text, &names) {
        Ok(found) => found,
        Err(e) => {
            problems.push(format!("{}: slurmd cannot read it: {e}", input.origin));
            return None;
        }
    };
    let detected = autodetect.as_deref().is_some_and(|a| DETECTORS.contains(&a));
    let node_gpus = node.class_indexes(DeviceClass::Gpu).len();
    if !own_gpu_lines && !other_nodes.is_empty() && !detected && node_gpus > 0 {
        problems.push(format!(
            "{} gives GPUs only to other nodes (NodeName={}), none to this node ({}: slurmd matches NodeName= \
             against its short host name): slurmd here finds no GPU GRES in it, so Slurm allocates none of this node's \
             {node_gpus} GPUs; add Name=gpu lines with NodeName={} (the short host name, or slurmd's -N name; check \
             another name with --hostname)",
            input.origin,
            other_nodes.join(", NodeName="),
            names.join(" or "),
            names.last().map_or("", String::as_str),
        ));
    }
    for g in &mut gpus {
        g.matched = match_file(&g.file, node, input);
        if let Err(why) = &g.matched {
            notes.push(format!("{} line {}: which GPU {} is cannot be told: {why}", input.origin, g.line, g.file));
        }
    }
    let in_order = if detected { Some(true) } else { order(input, node, &gpus, problems) };
    Some(GresReport { origin: input.origin.clone(), autodetect, gpus, in_order, names, other_nodes })
}

/// Whether Slurm's indices (file order) are the mapping order (PCI bus order); a mismatch is
/// a problem that says what to write instead. `None` when no file could be matched.
fn order(input: &GresInput, node: &Node, gpus: &[GresGpu], problems: &mut Vec<String>) -> Option<bool> {
    let order: Vec<String> =
        node.class_indexes(DeviceClass::Gpu).into_iter().map(|i| node.devices[i].busid_text()).collect();
    let name_of = |busid: &str| {
        node.devices.iter().find(|d| d.class == DeviceClass::Gpu && d.busid_text() == busid).map_or("", |d| &d.name)
    };
    let mut wrong = Vec::new();
    for g in gpus {
        let Ok((busid, name, _)) = &g.matched else { continue };
        match order.get(g.index) {
            Some(expected) if expected == busid => {}
            Some(expected) => wrong.push(format!(
                "Slurm's GPU {} is {} ({busid} {name}) but the mapping's GPU {} is {expected} {}",
                g.index,
                g.file,
                g.index,
                name_of(expected)
            )),
            None => wrong.push(format!(
                "Slurm's GPU {} is {} ({busid} {name}), beyond the node's {} GPUs",
                g.index,
                g.file,
                order.len()
            )),
        }
    }
    if gpus.iter().all(|g| g.matched.is_err()) {
        return None;
    }
    if wrong.is_empty() {
        return Some(true);
    }
    let shown = if wrong.len() > 4 {
        format!("{}; ... ({} GPUs in all)", wrong[..3].join("; "), wrong.len())
    } else {
        wrong.join("; ")
    };
    problems.push(format!(
        "{} numbers this node's GPUs in another order than the plugin maps them (PCI bus order): {shown}. The plugin \
         reads SLURM_STEP_GPUS as positions in PCI bus order, so a step is told GPUs that are not its own (with \
         ConstrainDevices, GPUs its device cgroup hides, which it cannot open): {}",
        input.origin,
        fix(node, gpus, &order)
    ));
    Some(false)
}

/// What to write instead: the files in PCI bus order, or a detector.
fn fix(node: &Node, gpus: &[GresGpu], order: &[String]) -> String {
    let files: Option<Vec<&str>> = order
        .iter()
        .map(|busid| gpus.iter().find(|g| g.matched.as_ref().is_ok_and(|m| &m.0 == busid)).map(|g| g.file.as_str()))
        .collect();
    let detector = match node.class_indexes(DeviceClass::Gpu).first().map(|&i| node.devices[i].vendor) {
        Some(Vendor::Nvidia) => " (or AutoDetect=nvml, with which Slurm numbers them in PCI bus order itself)",
        Some(Vendor::Amd) => {
            " (or AutoDetect=rsmi, with which Slurm numbers them itself, by its documentation in PCI \
                               bus order)"
        }
        _ => "",
    };
    match files {
        Some(files) => format!("write the files in PCI bus order, File={}{detector}", files.join(",")),
        None => format!("list every GPU of the node in PCI bus order ({}){detector}", order.join(", ")),
    }
}

// --- Reading the files: what `map-by-device check` hands the report ---

/// Reads what the gres.conf check looks at: the file at `path`, and the `Device Minor` of each
/// NVIDIA GPU's driver file under the node's proc root.
pub fn read_input(path: &std::path::Path, node: &Node) -> std::io::Result<GresInput> {
    let text = std::fs::read_to_string(path)?;
    let proc_root = node.options.proc_root.as_deref();
    let nvidia_minors = node
        .devices
        .iter()
        .filter(|d| d.class == DeviceClass::Gpu && d.vendor == Vendor::Nvidia)
        .filter_map(|d| Some((d.busid_text(), d.busid?)))
        .filter_map(|(text, busid)| {
            let root = proc_root?;
            let minor = match crate::driver_ids::nvidia_minor(root, busid) {
                Ok(Some(m)) => Ok(m),
                Ok(None) => Err(MinorUnknown::NoFile(crate::driver_ids::nvidia_path(root, busid))),
                Err(e) => Err(MinorUnknown::Unreadable(e.to_string())),
            };
            Some((text, minor))
        })
        .collect();
    Ok(GresInput {
        origin: path.display().to_string(),
        text,
        proc_root: proc_root.map(|p| p.display().to_string()),
        nvidia_minors,
    })
}

/// Whether slurm.conf's `GresTypes` names gpu: then Slurm's gres/gpu plugin is loaded in
/// every slurmstepd of the cluster and sets or removes `SLURM_STEP_GPUS` for every step. Only
/// the file itself is read (not its `Include`s), the last `GresTypes` line counting.
pub fn read_gres_types(slurm_conf: &std::path::Path) -> std::io::Result<bool> {
    Ok(gres_types_gpu(&std::fs::read_to_string(slurm_conf)?))
}

/// [`read_gres_types`] on the file's text.
fn gres_types_gpu(text: &str) -> bool {
    let mut gpu = false;
    for (key, value) in text.lines().flat_map(words) {
        if key == "grestypes" {
            gpu = value.split(',').any(|t| t.trim().eq_ignore_ascii_case("gpu"));
        }
    }
    gpu
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_types_names_gpu_or_not() {
        assert!(gres_types_gpu("ClusterName=c\nGresTypes=gpu,mps # GPUs\n"));
        assert!(gres_types_gpu("gRESTYPES=nic,GPU\n"));
        assert!(!gres_types_gpu("GresTypes=mps\n#GresTypes=gpu\n"));
        assert!(!gres_types_gpu("GresTypes=gpu\nGresTypes=nic\n"));
        assert!(!gres_types_gpu(""));
    }

    #[test]
    fn expressions_expand_as_slurm_expands_them() {
        assert_eq!(
            expand("/dev/nvidia[0-3]").unwrap(),
            ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]
        );
        assert_eq!(expand("/dev/nvidia[2,0]").unwrap(), ["/dev/nvidia2", "/dev/nvidia0"]);
        assert_eq!(expand("node[01-02,10],login").unwrap(), ["node01", "node02", "node10", "login"]);
        assert_eq!(expand("/dev/dri/renderD128").unwrap(), ["/dev/dri/renderD128"]);
        let err = |e: &str| expand(e).unwrap_err().to_string();
        assert_eq!(err("/dev/nvidia[0-"), r#"unclosed '[' in "/dev/nvidia[0-""#);
        assert_eq!(err("/dev/nvidia[3-1]"), r#"range "3-1" in "/dev/nvidia[3-1]" is empty or too large"#);
        assert_eq!(err("/dev/nvidia[a]"), r#""a" in "/dev/nvidia[a]" is not a number or a range N-M"#);
        assert!(matches!(expand("n[0-99999]"), Err(HostlistError::BadRange { .. })));
        assert_eq!(err("a]"), r#"unbalanced ']' in "a]""#);
    }

    #[test]
    fn only_this_nodes_gpu_lines_count_in_file_order() {
        let text = "AutoDetect=off\n\
                    NodeName=other[01-04] Name=gpu File=/dev/nvidia[0-7]\n\
                    # a comment\n\
                    NodeName=node[1-2] Name=gpu Type=a100 File=/dev/nvidia1 Cores=8-15\n\
                    NodeName=node[1-2] Name=gpu Type=a100 \\\n  File=/dev/nvidia0 Cores=0-7 # first core range\n\
                    NodeName=node1 Name=mps Count=100\n";
        let Parsed { autodetect: auto, gpus, own_gpu_lines, other_nodes } = parse(text, &node_names("node1")).unwrap();
        assert_eq!(auto.as_deref(), Some("off"));
        assert!(own_gpu_lines);
        assert_eq!(other_nodes, ["other[01-04]"]);
        let files: Vec<(&str, usize, Option<&str>)> =
            gpus.iter().map(|g| (g.file.as_str(), g.line, g.cores.as_deref())).collect();
        assert_eq!(files, [("/dev/nvidia1", 4, Some("8-15")), ("/dev/nvidia0", 6, Some("0-7"))]);
        assert_eq!(gpus[1].index, 1);
        let e = parse("NodeName=n[1- Name=gpu File=/dev/nvidia0\n", &node_names("n1")).unwrap_err();
        assert_eq!(e.to_string(), r#"line 1: unclosed '[' in "n[1-""#);
        let e = parse("Name=gpu File=/dev/nvidia[x]\n", &node_names("n1")).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"line 1: File=/dev/nvidia[x]: "x" in "/dev/nvidia[x]" is not a number or a range N-M"#
        );
    }

    #[test]
    fn node_name_is_matched_as_slurmd_matches_it() {
        // slurmd's name is its short host name (or -N): a host reporting its full name is
        // also its first label; a short name stays one name.
        assert_eq!(node_names("drm-only.cluster.local"), ["drm-only.cluster.local", "drm-only"]);
        assert_eq!(node_names("node1"), ["node1"]);
        assert_eq!(node_names(".odd"), [".odd"]);
        let text = "NodeName=drm-only Name=gpu File=/dev/nvidia0\nNodeName=drm-only[0-1] Name=gpu File=/dev/nvidia1\n";
        let found = parse(text, &node_names("drm-only.cluster.local")).unwrap();
        assert_eq!(found.gpus.iter().map(|g| g.file.as_str()).collect::<Vec<_>>(), ["/dev/nvidia0"]);
        let found = parse(text, &node_names("drm-only1.cluster.local")).unwrap();
        assert_eq!(found.gpus.iter().map(|g| g.file.as_str()).collect::<Vec<_>>(), ["/dev/nvidia1"]);
        assert_eq!(found.other_nodes, ["drm-only"]);
        // A line without File= (Count=) is still this node's GPU line.
        let found =
            parse("NodeName=n1 Name=gpu Count=2\nNodeName=n2 Name=gpu File=/dev/nvidia0\n", &node_names("n1")).unwrap();
        assert!(found.own_gpu_lines && found.gpus.is_empty());
    }
}
