//! `plugstack.conf` as Slurm reads it: the lines that load a plugin, `include` lines, and
//! lines Slurm would refuse; and what the caller found about the plugin's configuration.
//! Pure: following `include` lines and reading files is the caller's job.

use crate::config::Config;

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
    pub built_for: Option<Result<crate::slurm_release::SlurmVersion, String>>,
    /// The discovery library beside the plugin file ([`crate::cache::discover_library`]), or
    /// why there is none to use; `None` when the plugin file was not examined.
    pub discover: Option<Result<std::path::PathBuf, String>>,
}

/// What the caller found about the plugin's configuration.
#[derive(Debug, Clone)]
pub enum Setup {
    /// No `plugstack.conf` or config file was examined (a preview of an XML).
    NotExamined,
    /// The plugin is configured; `config` is the result of reading its settings.
    Configured {
        /// The `plugstack.conf` line(s) that load the plugin (none when only `--config` was given).
        entries: Vec<PluginEntry>,
        /// Where the settings come from, for the report (`FILE line N`, `config file F`).
        origin: String,
        config: Result<Config, String>,
    },
    /// The `plugstack.conf` files read do not load the plugin.
    NotEnabled {
        /// The files read (the main file and its includes).
        files: Vec<String>,
    },
}
