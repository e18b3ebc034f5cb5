//! `plugstack.conf` as Slurm reads it: the lines that load a plugin, `include` lines, and
//! lines Slurm would refuse; and what the caller found about the plugin's configuration.
//! [`parse_plugstack`] reads one text; [`read_plugstack`] reads the files, following their
//! `include` lines, for `map-by-device check`.

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

/// What the plugstack files say about this plugin: its lines, the files read, problems.
#[derive(Default)]
pub struct PlugstackFindings {
    pub entries: Vec<PluginEntry>,
    pub files: Vec<String>,
    pub problems: Vec<String>,
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
    for item in parse_plugstack(&text) {
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
                    for f in files {
                        read_plugstack(&f, depth + 1, found);
                    }
                }
                Err(e) => found.problems.push(format!("{} line {line}: {e}", path.display())),
            },
            PlugstackItem::Invalid { line, text } => found.problems.push(format!(
                "{} line {line}: Slurm cannot read {text:?} (expected required|optional PATH [ARGS] or include PATTERN): every srun fails",
                path.display()
            )),
        }
    }
}
