//! `plugstack.conf` as Slurm reads it: the lines that load a plugin, `include` lines, and
//! lines Slurm would refuse; and what the caller found about the plugin's configuration.
//! [`parse_plugstack`] reads one text; [`read_plugstack`] reads the files, following their
//! `include` lines, for `map-by-device check`, with the order in which Slurm loads their
//! plugins ([`pyxis_order_problems`]: pyxis must come first).

use crate::config::Config;
use std::path::{Path, PathBuf};

/// One `required`/`optional` line of a `plugstack.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlugstackLine {
    /// 1-based line number in its file.
    pub line: usize,
    pub required: bool,
    /// The plugin path as written (absolute, or relative to Slurm's `PluginDir`).
    pub path: String,
    /// The plugin's arguments: the rest of the line split on blanks (Slurm honours no quotes).
    pub args: Vec<String>,
}

/// What a `plugstack.conf` line says, as Slurm reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlugstackItem {
    Plugin(PlugstackLine),
    /// `include PATTERN` (a glob; relative patterns are relative to the including file).
    Include {
        line: usize,
        pattern: String,
    },
    /// A line Slurm would refuse (it fails every srun): its number and text.
    Invalid {
        line: usize,
        text: String,
    },
}

/// Reads one `plugstack.conf` text: `#` starts a comment, blank lines are skipped, words are
/// split on blanks.
pub fn parse_plugstack(text: &str) -> Vec<PlugstackItem> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("");
        let mut words = content.split_whitespace();
        let Some(first) = words.next() else { continue };
        match first {
            "required" | "optional" => match words.next() {
                Some(path) => out.push(PlugstackItem::Plugin(PlugstackLine {
                    line,
                    required: first == "required",
                    path: path.to_string(),
                    args: words.map(str::to_string).collect(),
                })),
                None => out.push(PlugstackItem::Invalid { line, text: raw.trim().to_string() }),
            },
            "include" => match words.next() {
                Some(pattern) => out.push(PlugstackItem::Include { line, pattern: pattern.to_string() }),
                None => out.push(PlugstackItem::Invalid { line, text: raw.trim().to_string() }),
            },
            _ => out.push(PlugstackItem::Invalid { line, text: raw.trim().to_string() }),
        }
    }
    out
}

/// Whether a plugstack path names this plugin: the packaged `map_by_device.so`, or the
/// build tree's `libmap_by_device_spank.so`.
pub fn is_this_plugin(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.contains("map_by_device") || file.contains("map-by-device")
}

/// The plugin's line as found in the `plugstack.conf` files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginEntry {
    /// `FILE line N`.
    pub origin: String,
    pub line: PlugstackLine,
    /// Whether the plugin file exists; `None` when the path is relative (resolved by Slurm
    /// against its `PluginDir`, which is not checked here).
    pub exists: Option<bool>,
    /// The Slurm release the file declares (`plugin_version`), or why it could not be read;
    /// `None` when the file was not read (missing, or a relative path).
    pub built_for: Option<Result<crate::slurm_release::SlurmVersion, super::PluginVersionError>>,
    /// The discovery library beside the plugin file ([`crate::cache::discover_library`]), or
    /// why there is none to use; `None` when the plugin file was not examined.
    pub discover: Option<Result<std::path::PathBuf, crate::cache::LibraryError>>,
}

/// What the caller found about the plugin's configuration.
#[derive(Debug)]
pub enum Setup {
    /// No `plugstack.conf` or config file was examined (a preview of an XML).
    NotExamined,
    /// The plugin is configured; `config` is the result of reading its settings.
    Configured {
        /// The `plugstack.conf` line(s) that load the plugin (none when only `--config` was given).
        entries: Vec<PluginEntry>,
        /// Where the settings come from, for the report (`FILE line N`, `config file F`).
        origin: String,
        config: Result<Config, crate::config::ConfigError>,
    },
    /// The `plugstack.conf` files read do not load the plugin.
    NotEnabled {
        /// The files read (the main file and its includes).
        files: Vec<String>,
    },
}

// --- Reading the files: what `map-by-device check` hands the report ---

/// The slurm.conf Slurm reads: `SLURM_CONF`, else /etc/slurm/slurm.conf.
pub fn slurm_conf() -> PathBuf {
    std::env::var_os("SLURM_CONF").map_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"), PathBuf::from)
}

/// The plugstack.conf Slurm reads: slurm.conf's `PlugStackConfig`, else
/// /etc/slurm/plugstack.conf.
pub fn system_plugstack() -> PathBuf {
    let slurm_conf = slurm_conf();
    let from_conf = std::fs::read_to_string(&slurm_conf).ok().and_then(|text| {
        text.lines().find_map(|l| {
            let l = l.split('#').next().unwrap_or("").trim();
            let (k, v) = l.split_once('=')?;
            k.trim().eq_ignore_ascii_case("PlugStackConfig").then(|| PathBuf::from(v.trim()))
        })
    });
    from_conf.unwrap_or_else(|| PathBuf::from("/etc/slurm/plugstack.conf"))
}

/// Matches a file name against a glob pattern with `*` and `?` (what plugstack includes use).
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob_match(&pattern[1..], name) || (!name.is_empty() && glob_match(pattern, &name[1..])),
        (Some(b'?'), Some(_)) => glob_match(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob_match(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// Why an `include` line's files could not be listed here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncludeError {
    #[error("cannot expand include {pattern:?}")]
    Unexpandable { pattern: String },
    #[error("include {pattern:?}: only * and ? in the file name are checked here")]
    Wildcards { pattern: String },
}

/// The files an `include` pattern names, sorted like glob(3); wildcards only in the last part.
fn expand_include(pattern: &str, base: &Path) -> Result<Vec<PathBuf>, IncludeError> {
    let path = base.join(pattern);
    let has_wild = |s: &str| s.contains(['*', '?', '[']);
    if !has_wild(pattern) {
        return Ok(vec![path]);
    }
    let (dir, file) = match (path.parent(), path.file_name().and_then(|f| f.to_str())) {
        (Some(d), Some(f)) => (d.to_path_buf(), f.to_string()),
        _ => return Err(IncludeError::Unexpandable { pattern: pattern.to_string() }),
    };
    if has_wild(&dir.to_string_lossy()) || file.contains('[') {
        return Err(IncludeError::Wildcards { pattern: pattern.to_string() });
    }
    let mut out: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                !name.starts_with('.') && glob_match(file.as_bytes(), name.as_bytes())
            })
            .map(|e| e.path())
            .collect(),
        Err(_) => Vec::new(), // glob(3): no match, nothing included
    };
    out.sort();
    Ok(out)
}

/// A place in the plugstack files: a file (as displayed) and a 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub file: String,
    pub line: usize,
}

/// A plugin line as Slurm reaches it, in the order Slurm loads the plugins (and so runs each
/// hook: SPANK calls the plugins of a hook one after the other, in plugstack order, an
/// `include` standing for the lines of the files it names, sorted by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedPlugin {
    /// The plugin path as written.
    pub path: String,
    /// The `include` lines that led to it (the main file's first), then its own line.
    pub chain: Vec<Place>,
}

/// What the plugstack files say about this plugin: its lines, the files read, problems.
#[derive(Default)]
pub struct PlugstackFindings {
    pub entries: Vec<PluginEntry>,
    pub files: Vec<String>,
    pub problems: Vec<String>,
    /// Every plugin line, in Slurm's load order.
    pub loaded: Vec<LoadedPlugin>,
    /// The `include` lines being followed (read_plugstack's recursion).
    including: Vec<Place>,
}

/// Whether a plugstack path names NVIDIA's pyxis (`spank_pyxis.so`, as its Makefile installs it).
pub fn is_pyxis(path: &str) -> bool {
    path.rsplit('/').next().unwrap_or(path).contains("pyxis")
}

/// The order rule for pyxis (NVIDIA's SPANK plugin for enroot containers), read in its source
/// (pyxis 0.24.0, pyxis_slurmstepd.c): in `slurm_spank_task_init` the first task of the node
/// starts the container with that task's environment, and then every task copies the
/// container's `/proc/PID/environ` into its own environment, overwriting (only the names of
/// `--container-env` are kept). A plugin whose `task_init` runs before pyxis's has its
/// variables replaced by task 0's: every task of the step would name task 0's GPU. So
/// map-by-device must be loaded after pyxis. One problem per line of this plugin that some
/// pyxis line follows, with the line to move.
pub fn pyxis_order_problems(loaded: &[LoadedPlugin]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, ours) in loaded.iter().enumerate().filter(|(_, p)| is_this_plugin(&p.path)) {
        let Some(pyxis) = loaded[i + 1..].iter().find(|p| is_pyxis(&p.path)) else { continue };
        let (Some(ours_at), Some(pyxis_at)) = (ours.chain.last(), pyxis.chain.last()) else { continue };
        out.push(format!(
            "pyxis ({} line {}) is loaded after map-by-device ({} line {}): pyxis's task_init copies its \
             container's environment into every task, overwriting, so in a step with --container-image every \
             task would get task 0's CUDA_VISIBLE_DEVICES and other device variables (pyxis 0.24.0, \
             pyxis_slurmstepd.c); {}",
            pyxis_at.file,
            pyxis_at.line,
            ours_at.file,
            ours_at.line,
            order_fix(&ours.chain, &pyxis.chain)
        ));
    }
    out
}

/// How to put the plugin's line (`ours`) after pyxis's (`pyxis`): where their chains part, the
/// line to move, or the included file to rename.
fn order_fix(ours: &[Place], pyxis: &[Place]) -> String {
    let split = ours.iter().zip(pyxis).take_while(|(a, b)| a == b).count();
    let (Some(a), Some(b)) = (ours.get(split), pyxis.get(split)) else {
        return "load map_by_device.so after pyxis".to_string();
    };
    let what = |chain: &[Place], name: &str| {
        if split + 1 == chain.len() {
            format!("the line that loads {name}")
        } else {
            format!("the include that brings {name} in")
        }
    };
    if a.file == b.file {
        format!(
            "move {} line {} ({}) after line {} ({})",
            a.file,
            a.line,
            what(ours, "map-by-device"),
            b.line,
            what(pyxis, "pyxis")
        )
    } else {
        let include = split.checked_sub(1).and_then(|k| ours.get(k));
        let by = include.map_or(String::new(), |p| {
            format!(" (the include at {} line {} reads them in name order)", p.file, p.line)
        });
        format!("rename {} so that it sorts after {}{by}", a.file, b.file)
    }
}

/// Reads the plugstack.conf at `path` and the files it includes (`depth` deep already) into
/// `found`: this plugin's lines (with what its file declares), the files read, the problems.
pub fn read_plugstack(path: &Path, depth: usize, found: &mut PlugstackFindings) {
    if depth > 8 {
        found.problems.push(format!("{}: includes nested too deeply (a cycle?)", path.display()));
        return;
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            found.problems.push(format!("cannot read {}: {e}", path.display()));
            return;
        }
    };
    found.files.push(path.display().to_string());
    let base = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let place = |line: usize| Place { file: path.display().to_string(), line };
    for item in parse_plugstack(&text) {
        if let PlugstackItem::Plugin(l) = &item {
            let mut chain = found.including.clone();
            chain.push(place(l.line));
            found.loaded.push(LoadedPlugin { path: l.path.clone(), chain });
        }
        match item {
            PlugstackItem::Plugin(line) if is_this_plugin(&line.path) => {
                let exists = Path::new(&line.path).is_absolute().then(|| Path::new(&line.path).is_file());
                let built_for = (exists == Some(true)).then(|| super::release::plugin_version(Path::new(&line.path)));
                let discover = (exists == Some(true)).then(|| crate::cache::discover_library(Path::new(&line.path)));
                found.entries.push(PluginEntry {
                    origin: format!("{} line {}", path.display(), line.line),
                    line,
                    exists,
                    built_for,
                    discover,
                });
            }
            PlugstackItem::Plugin(_) => {}
            PlugstackItem::Include { line, pattern } => match expand_include(&pattern, &base) {
                Ok(files) => {
                    found.including.push(place(line));
                    for f in files {
                        read_plugstack(&f, depth + 1, found);
                    }
                    found.including.pop();
                }
                Err(e) => found.problems.push(format!("{} line {line}: {e}", path.display())),
            },
            PlugstackItem::Invalid { line, text } => found.problems.push(format!(
                "{} line {line}: Slurm cannot read {text:?} (expected required|optional PATH [ARGS] or include PATTERN): every srun fails",
                path.display()
            )),
        }
    }
    if depth == 0 {
        let order = pyxis_order_problems(&found.loaded);
        found.problems.extend(order);
    }
}
