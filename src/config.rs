//! The administrator's settings: the arguments of the plugin's `plugstack.conf` line and the
//! optional TOML file that `config=` names.
//!
//! ```text
//! optional /usr/lib/x86_64-linux-gnu/slurm-wlm/map_by_device.so default=gpu topology=/etc/slurm/node.xml
//! optional /usr/lib/x86_64-linux-gnu/slurm-wlm/map_by_device.so config=/etc/slurm/map-by-device.toml
//! ```
//!
//! Arguments: `default=SPEC` (the spec used when a job gives none), `topology=PATH` (an lstopo
//! XML read instead of live discovery) and `config=PATH` (a TOML file with the keys `default`,
//! `topology`, `proc_root`, `sys_root`, `ze_hierarchy`, `cache_dir`, `cache` and
//! `require_step_gpus`). An argument on the plugstack line overrides the same key in the file;
//! the other keys exist only in the file. Everything is checked here, once, so that a typo is reported with the word that is
//! wrong and the fix, rather than silently ignored: unknown arguments and keys, a `default` that
//! [`Spec::parse`] refuses, relative paths.
//!
//! Pure apart from reading the `config=` file: no Slurm, no hwloc, no process environment.
//! Shared by the SPANK plugin and the CLI (`check` reads the plugstack line, or `--config`).

use crate::device::ZeHierarchy;
use crate::node::NodeOptions;
use crate::spec::{Spec, SpecError};
use std::path::{Path, PathBuf};

/// The plugin's settings, resolved from the plugstack arguments and the `config=` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The spec applied when a job gives none, parsed once here; an admin default is soft: a
    /// node it cannot map runs the job unmapped.
    pub default: Option<Spec>,
    /// An lstopo XML to read instead of discovering the node live (absolute).
    pub topology: Option<PathBuf>,
    /// The root of `/proc` for driver identity files (absolute; file only). Unset, the plugin
    /// reads `/proc` when it discovers the node itself (live or from slurmd's cache) and no
    /// driver file at all for a `topology=` XML, which may describe another machine.
    pub proc_root: Option<PathBuf>,
    /// The root of `/sys` for driver identity files and InfiniBand port states (absolute; file
    /// only). Unset: `/sys` for the node itself, nothing for a `topology=` XML.
    pub sys_root: Option<PathBuf>,
    /// The Level Zero hierarchy the topology was discovered under (file only).
    pub ze_hierarchy: Option<ZeHierarchy>,
    /// Where slurmd keeps the node's discovered topology for the steps (absolute; file only;
    /// `None` = [`DEFAULT_CACHE_DIR`]). See [`Config::cache_dir`].
    pub cache_dir: Option<PathBuf>,
    /// `cache = false` turns the per-node topology cache off (file only; `None` = on).
    pub cache: Option<bool>,
    /// `require_step_gpus = true`: this node's GPUs are Slurm GRES, so a step without
    /// `SLURM_STEP_GPUS` has no GPU here and a GPU mapping is refused (file only; `None` =
    /// false: a step without it maps over every GPU of the node, right where GPUs are not GRES).
    pub require_step_gpus: Option<bool>,
    /// How long live discovery may take, in seconds, before it is abandoned (file only; `None`
    /// = [`DEFAULT_DISCOVERY_TIMEOUT`]). See [`Config::discovery_timeout`].
    pub discovery_timeout: Option<u32>,
    /// `omp = true`: every mapped task is told `OMP_NUM_THREADS`, `OMP_PLACES` and
    /// `OMP_PROC_BIND` from its binding unless its spec says `omp=false` (file only).
    pub omp: Option<bool>,
}

/// How long live discovery may take when the config file says nothing: hwloc needs about
/// 10-30 ms on these nodes and a few seconds where CUDA initialises many GPUs.
pub const DEFAULT_DISCOVERY_TIMEOUT: u32 = 30;

/// The directory of the per-node topology cache when the config file names none: root's,
/// on a tmpfs that a reboot clears.
pub const DEFAULT_CACHE_DIR: &str = "/run/map-by-device";

/// Where driver identity files are read from when the topology is the node's own and the
/// config file names no root.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
pub const DEFAULT_SYS_ROOT: &str = "/sys";

/// The name of slurmd's topology cache file in the cache directory (written by the plugin,
/// inspected by `map-by-device check`).
pub const CACHE_FILE_NAME: &str = "topology.json";

/// A setting that could not be used. Every message is one line, quotes the input and says
/// how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "unknown plugstack.conf argument {arg:?} for map-by-device: expected default=SPEC, topology=PATH or config=PATH"
    )]
    UnknownArgument { arg: String },
    #[error("plugstack.conf argument {arg:?} has no value: write {name}=<{hint}>")]
    MissingValue { arg: String, name: &'static str, hint: &'static str },
    #[error("plugstack.conf argument {name}= is given twice ({first:?} and {second:?}): keep one")]
    RepeatedArgument { name: &'static str, first: String, second: String },
    #[error("bad default spec {text:?} in {origin}: {source}")]
    BadDefault {
        origin: String,
        text: String,
        #[source]
        source: Box<SpecError>,
    },
    #[error("{key} path {path:?} in {origin} is not absolute: give a full path such as {example}")]
    RelativePath { origin: String, key: &'static str, path: PathBuf, example: &'static str },
    #[error("cannot read config file {path:?} ({given}): {source}")]
    ReadFile {
        path: PathBuf,
        /// How the file was given, in words: `named by config= in plugstack.conf`, `given
        /// with --config`.
        given: &'static str,
        #[source]
        source: crate::trusted_fs::TrustError,
    },
    #[error("discovery_timeout = {value} in config file {path:?}: expected a whole number of seconds from 1 to 3600")]
    BadTimeout { path: PathBuf, value: String },
    #[error("config file {path:?} is not valid TOML (line {line}): {message}")]
    Toml { path: PathBuf, line: usize, message: String },
    #[error("unknown key {key:?} in config file {path:?}: expected one of {expected}")]
    UnknownKey { path: PathBuf, key: String, expected: String },
    #[error("key {key} in config file {path:?} must be {expected}, not {found}")]
    WrongType { path: PathBuf, key: &'static str, expected: &'static str, found: String },
    #[error("ze_hierarchy = {value:?} in config file {path:?}: expected FLAT, COMPOSITE or COMBINED")]
    BadZeHierarchy { path: PathBuf, value: String },
}

/// The keys a config file may hold, in the order they are listed to users.
const FILE_KEYS: [&str; 10] = [
    "default",
    "topology",
    "proc_root",
    "sys_root",
    "ze_hierarchy",
    "cache_dir",
    "cache",
    "require_step_gpus",
    "discovery_timeout",
    "omp",
];

/// A config file's keys as serde reads them: only [`FILE_KEYS`] (another is refused), each
/// value as TOML gave it, for [`Config::from_toml`] to check with its own messages.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKeys {
    default: Option<toml::Value>,
    topology: Option<toml::Value>,
    proc_root: Option<toml::Value>,
    sys_root: Option<toml::Value>,
    ze_hierarchy: Option<toml::Value>,
    cache_dir: Option<toml::Value>,
    cache: Option<toml::Value>,
    require_step_gpus: Option<toml::Value>,
    discovery_timeout: Option<toml::Value>,
    omp: Option<toml::Value>,
}

/// The values of one config file, checked with the messages that name the file and the key.
struct FileValues<'a> {
    path: &'a Path,
    /// `config file "PATH"`, for the messages shared with the plugstack arguments.
    origin: String,
}

impl FileValues<'_> {
    fn wrong_type(&self, key: &'static str, expected: &'static str, v: &toml::Value) -> ConfigError {
        let found = format!("{} {v}", v.type_str());
        ConfigError::WrongType { path: self.path.to_path_buf(), key, expected, found }
    }

    /// `true` or `false`.
    fn flag(&self, key: &'static str, value: Option<toml::Value>) -> Result<Option<bool>, ConfigError> {
        value.map(|v| v.as_bool().ok_or_else(|| self.wrong_type(key, "true or false", &v))).transpose()
    }

    /// A string (a spec, a model's name, a path).
    fn string(&self, key: &'static str, value: Option<toml::Value>) -> Result<Option<String>, ConfigError> {
        let expected = if key == "default" || key == "ze_hierarchy" { "a string" } else { "a string (a path)" };
        value
            .map(|v| match v {
                toml::Value::String(text) => Ok(text),
                v => Err(self.wrong_type(key, expected, &v)),
            })
            .transpose()
    }

    /// An absolute path (`example` in the fix).
    fn path(
        &self,
        key: &'static str,
        value: Option<toml::Value>,
        example: &'static str,
    ) -> Result<Option<PathBuf>, ConfigError> {
        self.string(key, value)?.map(|text| absolute(key, text.into(), &self.origin, example)).transpose()
    }

    /// `discovery_timeout`: whole seconds from 1 to 3600.
    fn timeout(&self, value: Option<toml::Value>) -> Result<Option<u32>, ConfigError> {
        value
            .map(|v| {
                let bad = || ConfigError::BadTimeout { path: self.path.to_path_buf(), value: v.to_string() };
                let n = v.as_integer().ok_or_else(bad)?;
                u32::try_from(n).ok().filter(|n| (1..=3600).contains(n)).ok_or_else(bad)
            })
            .transpose()
    }

    /// `ze_hierarchy`: FLAT, COMPOSITE or COMBINED.
    fn ze_hierarchy(&self, value: Option<toml::Value>) -> Result<Option<ZeHierarchy>, ConfigError> {
        self.string("ze_hierarchy", value)?
            .map(|text| {
                ZeHierarchy::parse(&text)
                    .ok_or(ConfigError::BadZeHierarchy { path: self.path.to_path_buf(), value: text })
            })
            .transpose()
    }
}

/// The key serde's `deny_unknown_fields` refused (``unknown field `KEY`, expected ...``).
fn unknown_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.rsplit_once("`, expected").map(|(key, _)| key.to_string())
}

/// The largest config file read (real ones are a few hundred bytes).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// How the plugin is given its config file, for [`ConfigError::ReadFile`].
pub const GIVEN_BY_PLUGSTACK: &str = "named by config= in plugstack.conf";

impl Config {
    /// The node options these settings give. Driver files (GPU identities, InfiniBand port
    /// states) describe this machine: read by default only when the topology is `own_node`'s
    /// (live discovery or slurmd's cache of it); for an XML, only where the file says.
    pub fn node_options(&self, own_node: bool, hostname: Option<String>) -> NodeOptions {
        let root =
            |set: &Option<PathBuf>, default: &str| set.clone().or_else(|| own_node.then(|| PathBuf::from(default)));
        NodeOptions {
            hostname,
            proc_root: root(&self.proc_root, DEFAULT_PROC_ROOT),
            sys_root: root(&self.sys_root, DEFAULT_SYS_ROOT),
            ze_hierarchy: self.ze_hierarchy,
        }
    }

    /// Reads the plugstack.conf arguments (`default=SPEC`, `topology=PATH`, `config=PATH`),
    /// then the `config=` file if any; the arguments override the file. The file is read as
    /// root may trust it (root's, in directories only root can write: see
    /// [`crate::trusted_fs`]), since it names what root reads.
    pub fn from_plugin_args(args: &[String]) -> Result<Config, ConfigError> {
        Self::from_plugin_args_reading(args, Config::from_file)
    }

    /// [`Config::from_plugin_args`] with another way of reading the `config=` file (tests).
    pub fn from_plugin_args_reading(
        args: &[String],
        read: impl FnOnce(&Path) -> Result<Config, ConfigError>,
    ) -> Result<Config, ConfigError> {
        let mut default: Option<String> = None;
        let mut topology: Option<String> = None;
        let mut file: Option<String> = None;
        for arg in args {
            let (name, value) = match arg.split_once('=') {
                Some((n, v)) => (n, v),
                None => (arg.as_str(), ""),
            };
            let (slot, name, hint): (&mut Option<String>, &'static str, &'static str) = match name {
                "default" => (&mut default, "default", "SPEC"),
                "topology" => (&mut topology, "topology", "PATH"),
                "config" => (&mut file, "config", "PATH"),
                _ => return Err(ConfigError::UnknownArgument { arg: arg.clone() }),
            };
            if value.is_empty() {
                return Err(ConfigError::MissingValue { arg: arg.clone(), name, hint });
            }
            if let Some(first) = slot.replace(value.to_string()) {
                return Err(ConfigError::RepeatedArgument { name, first, second: value.to_string() });
            }
        }

        let mut config = match &file {
            Some(path) => {
                let path = absolute("config", PathBuf::from(path), "plugstack.conf", "/etc/slurm/map-by-device.toml")?;
                read(&path)?
            }
            None => Config::default(),
        };
        if let Some(text) = default {
            config.default = Some(checked_default(text, "plugstack.conf")?);
        }
        if let Some(path) = topology {
            config.topology =
                Some(absolute("topology", PathBuf::from(path), "plugstack.conf", "/etc/slurm/topology.xml")?);
        }
        Ok(config)
    }

    /// Reads a config file (TOML, every key optional) that root may trust.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let bytes = crate::trusted_fs::read_file(path, MAX_FILE_BYTES).map_err(|source| ConfigError::ReadFile {
            path: path.to_path_buf(),
            given: GIVEN_BY_PLUGSTACK,
            source,
        })?;
        Config::from_toml(&String::from_utf8_lossy(&bytes), path)
    }

    /// Reads a draft of a config file wherever it is (`map-by-device check --config FILE`, a
    /// file in a home directory or /tmp): its settings as the plugin would take them, without
    /// the plugin's rule on where the file may live (the caller says that separately, with
    /// [`crate::trusted_fs::read_file`]). `given` says how the file was named, for messages.
    pub fn from_draft(path: &Path, given: &'static str) -> Result<Config, ConfigError> {
        use std::io::Read;
        let fail = |source| ConfigError::ReadFile { path: path.to_path_buf(), given, source };
        let io = |op, e| fail(crate::trusted_fs::TrustError::Io { op, path: path.to_path_buf(), source: e });
        let file = std::fs::File::open(path).map_err(|e| io("open", e))?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| io("read", e))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(fail(crate::trusted_fs::TrustError::TooLarge {
                path: path.to_path_buf(),
                max: MAX_FILE_BYTES,
            }));
        }
        Config::from_toml(&String::from_utf8_lossy(&bytes), path)
    }

    /// Parses a config file's text; `path` is only used in messages. serde reads the keys
    /// ([`FileKeys`]: an unknown one is refused), then each value is checked here, in the
    /// keys' alphabetical order, with the message that names the key and the fix.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let keys: FileKeys = toml::from_str(text).map_err(|e| match unknown_field(e.message()) {
            Some(key) => ConfigError::UnknownKey { path: path.to_path_buf(), key, expected: FILE_KEYS.join(", ") },
            None => ConfigError::Toml {
                path: path.to_path_buf(),
                line: e.span().map_or(0, |s| text[..s.start.min(text.len())].matches('\n').count() + 1),
                message: e.message().replace('\n', " "),
            },
        })?;
        let file = FileValues { path, origin: format!("config file {path:?}") };
        // In the keys' alphabetical order: of several bad values, the first so named is the one
        // reported (an unknown key is refused before any, by serde).
        let cache = file.flag("cache", keys.cache)?;
        let cache_dir = file.path("cache_dir", keys.cache_dir, DEFAULT_CACHE_DIR)?;
        let default =
            file.string("default", keys.default)?.map(|text| checked_default(text, &file.origin)).transpose()?;
        let discovery_timeout = file.timeout(keys.discovery_timeout)?;
        let omp = file.flag("omp", keys.omp)?;
        let proc_root = file.path("proc_root", keys.proc_root, "/proc")?;
        let require_step_gpus = file.flag("require_step_gpus", keys.require_step_gpus)?;
        let sys_root = file.path("sys_root", keys.sys_root, "/sys")?;
        let topology = file.path("topology", keys.topology, "/etc/slurm/topology.xml")?;
        let ze_hierarchy = file.ze_hierarchy(keys.ze_hierarchy)?;
        Ok(Config {
            default,
            topology,
            proc_root,
            sys_root,
            ze_hierarchy,
            cache_dir,
            cache,
            require_step_gpus,
            discovery_timeout,
            omp,
        })
    }

    /// The directory of the per-node topology cache, or `None` when there is none: with
    /// `topology=` (the admin's XML is read instead of discovering the node) or `cache = false`.
    pub fn cache_dir(&self) -> Option<PathBuf> {
        if self.topology.is_some() || self.cache == Some(false) {
            return None;
        }
        Some(self.cache_dir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE_DIR)))
    }

    /// How long live discovery may take before it is abandoned.
    pub fn discovery_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(self.discovery_timeout.unwrap_or(DEFAULT_DISCOVERY_TIMEOUT)))
    }
}

fn checked_default(text: String, origin: &str) -> Result<Spec, ConfigError> {
    Spec::parse(&text).map_err(|source| ConfigError::BadDefault {
        origin: origin.to_string(),
        text,
        source: Box::new(source),
    })
}

fn absolute(key: &'static str, path: PathBuf, origin: &str, example: &'static str) -> Result<PathBuf, ConfigError> {
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(ConfigError::RelativePath { origin: origin.to_string(), key, path, example })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::Write;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// Reads the arguments with the config file read plainly: the test files live in /tmp,
    /// which the trusted read refuses (tested on its own below).
    fn parse(list: &[String]) -> Result<Config, ConfigError> {
        Config::from_plugin_args_reading(list, |p| {
            let text = std::fs::read_to_string(p).map_err(|source| ConfigError::ReadFile {
                path: p.to_path_buf(),
                given: GIVEN_BY_PLUGSTACK,
                source: crate::trusted_fs::TrustError::Io { op: "read", path: p.to_path_buf(), source },
            })?;
            Config::from_toml(&text, p)
        })
    }

    fn err(list: &[&str]) -> String {
        let e = parse(&args(list)).expect_err("should fail").to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        e
    }

    /// A config file in a fresh temporary directory (removed with the guard).
    struct TempFile(PathBuf);
    impl TempFile {
        fn new(name: &str, text: &str) -> TempFile {
            let dir = std::env::temp_dir().join(format!("mbd-config-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("map-by-device.toml");
            std::fs::File::create(&path).unwrap().write_all(text.as_bytes()).unwrap();
            TempFile(path)
        }
        fn arg(&self) -> String {
            format!("config={}", self.0.display())
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    #[test]
    fn no_arguments_is_no_setting() {
        assert_eq!(Config::from_plugin_args(&[]).unwrap(), Config::default());
    }

    #[test]
    fn plugstack_arguments() {
        let c = Config::from_plugin_args(&args(&["default=gpu:verbose", "topology=/etc/slurm/t.xml"])).unwrap();
        assert_eq!(c.default.as_ref().map(Spec::to_string).as_deref(), Some("gpu:verbose"));
        assert_eq!(c.topology.as_deref(), Some(Path::new("/etc/slurm/t.xml")));
        assert!(Config::from_plugin_args(&args(&["default=none"])).unwrap().default.unwrap().is_none());
        assert_eq!(Config::default().discovery_timeout().as_secs(), u64::from(DEFAULT_DISCOVERY_TIMEOUT));
    }

    #[test]
    fn bad_arguments_name_the_input_and_the_fix() {
        assert!(err(&["defualt=gpu"]).contains("\"defualt=gpu\""));
        assert!(err(&["verbose"]).contains("\"verbose\""));
        let e = err(&["default"]);
        assert!(e.contains("default=<SPEC>"), "{e}");
        assert!(err(&["topology="]).contains("topology=<PATH>"));
        let e = err(&["default=gpu:bogus"]);
        assert!(e.contains("\"gpu:bogus\"") && e.contains("\"bogus\"") && e.contains("plugstack.conf"), "{e}");
        let e = err(&["topology=topo.xml"]);
        assert!(e.contains("\"topo.xml\"") && e.contains("not absolute"), "{e}");
        assert!(err(&["config=etc/x.toml"]).contains("not absolute"));
        let e = err(&["default=gpu", "default=nic"]);
        assert!(e.contains("twice") && e.contains("\"nic\""), "{e}");
    }

    #[test]
    fn missing_file_names_it() {
        let e = err(&["config=/nonexistent/map-by-device.toml"]);
        assert!(e.contains("/nonexistent/map-by-device.toml") && e.contains("config="), "{e}");
    }

    #[test]
    fn file_keys_and_overrides() {
        let f = TempFile::new(
            "keys",
            "default = \"network\"\ntopology = \"/etc/a.xml\"\nproc_root = \"/host/proc\"\n\
             sys_root = \"/host/sys\"\nze_hierarchy = \"flat\"\ncache_dir = \"/run/mbd\"\ncache = false\n\
             require_step_gpus = true\ndiscovery_timeout = 5\nomp = true\n",
        );
        let c = parse(&[f.arg()]).unwrap();
        assert_eq!(
            c,
            Config {
                default: Some(Spec::parse("network").unwrap()),
                topology: Some("/etc/a.xml".into()),
                proc_root: Some("/host/proc".into()),
                sys_root: Some("/host/sys".into()),
                ze_hierarchy: Some(ZeHierarchy::Flat),
                cache_dir: Some("/run/mbd".into()),
                cache: Some(false),
                require_step_gpus: Some(true),
                discovery_timeout: Some(5),
                omp: Some(true),
            }
        );
        // The plugstack line wins over the file, whatever the order of the arguments.
        let arg = f.arg();
        let c = parse(&args(&["default=gpu", arg.as_str(), "topology=/etc/b.xml"])).unwrap();
        assert_eq!(c.default.as_ref().map(Spec::to_string).as_deref(), Some("gpu"));
        assert_eq!(c.topology.as_deref(), Some(Path::new("/etc/b.xml")));
        assert_eq!(c.proc_root.as_deref(), Some(Path::new("/host/proc")));
    }

    #[test]
    fn the_plugin_reads_only_a_config_file_root_can_trust() {
        // A file under /tmp (world-writable, sticky): someone else could have put it there.
        let f = TempFile::new("untrusted", "default = \"gpu\"\n");
        let e = Config::from_plugin_args(&[f.arg()]).unwrap_err().to_string();
        assert!(e.contains("a parent directory /tmp is writable by group or others (mode 1777)"), "{e}");
        assert!(e.contains(&f.0.display().to_string()) && !e.contains('\n'), "{e}");
        let Some(dir) = crate::test_support::trusted_scratch("config-trusted") else { return };
        let path = dir.join("map-by-device.toml");
        std::fs::write(&path, "default = \"gpu\"\ndiscovery_timeout = 7\n").unwrap();
        let c = Config::from_plugin_args(&[format!("config={}", path.display())]).unwrap();
        assert_eq!((c.default.as_ref().map(Spec::to_string), c.discovery_timeout().as_secs()), (Some("gpu".into()), 7));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_draft_is_read_wherever_it_is_and_errors_say_how_it_was_given() {
        // `check --config` reads a draft in /tmp for its settings; the plugin would not.
        let f = TempFile::new("draft", "default = \"gpu\"\nrequire_step_gpus = true\n");
        let c = Config::from_draft(&f.0, "given with --config").unwrap();
        assert_eq!((c.default.as_ref().map(Spec::to_string), c.require_step_gpus), (Some("gpu".into()), Some(true)));
        let missing = f.0.with_file_name("missing.toml");
        let e = Config::from_draft(&missing, "given with --config").unwrap_err().to_string();
        assert!(e.contains("(given with --config)") && !e.contains("plugstack"), "{e}");
        let f = TempFile::new("draft-big", &"#".repeat(MAX_FILE_BYTES as usize + 1));
        let e = Config::from_draft(&f.0, "given with --config").unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
        // The plugin's own reading still says config= named it.
        let e = Config::from_plugin_args(&[format!("config={}", missing.display())]).unwrap_err().to_string();
        assert!(e.contains("(named by config= in plugstack.conf)"), "{e}");
    }

    #[test]
    fn cache_dir_defaults_and_switches_off() {
        let c = Config::default();
        assert_eq!(c.cache_dir().as_deref(), Some(Path::new(DEFAULT_CACHE_DIR)));
        let c = Config { cache_dir: Some("/var/cache/mbd".into()), ..Config::default() };
        assert_eq!(c.cache_dir().as_deref(), Some(Path::new("/var/cache/mbd")));
        assert_eq!(Config { cache: Some(false), ..Config::default() }.cache_dir(), None);
        assert!(Config { cache: Some(true), ..Config::default() }.cache_dir().is_some());
        // An admin XML is read instead of discovering the node: nothing to cache.
        assert_eq!(Config { topology: Some("/etc/t.xml".into()), ..Config::default() }.cache_dir(), None);
    }

    #[test]
    fn bad_files_name_the_key_and_the_file() {
        let cases = [
            ("unknown", "defualt = \"gpu\"\n", vec!["\"defualt\"", "proc_root"]),
            ("cli_only", "config = \"/x.toml\"\n", vec!["\"config\""]),
            ("type", "topology = 3\n", vec!["topology", "a string (a path)", "integer 3"]),
            ("spec", "default = \"gpu:ndev=0\"\n", vec!["\"gpu:ndev=0\"", "config file", "\"0\""]),
            ("relative", "sys_root = \"sys\"\n", vec!["sys_root", "\"sys\"", "not absolute"]),
            ("ze", "ze_hierarchy = \"deep\"\n", vec!["\"deep\"", "FLAT, COMPOSITE or COMBINED"]),
            ("cache", "cache = \"no\"\n", vec!["cache", "true or false", "string \"no\""]),
            ("require", "require_step_gpus = 1\n", vec!["require_step_gpus", "true or false", "integer 1"]),
            ("cache_dir", "cache_dir = \"run/x\"\n", vec!["cache_dir", "not absolute"]),
            ("timeout", "discovery_timeout = 0\n", vec!["discovery_timeout = 0", "1 to 3600"]),
            ("timeout_type", "discovery_timeout = \"5\"\n", vec!["discovery_timeout", "1 to 3600"]),
            ("syntax", "default = \"gpu\"\ntopology = \n", vec!["not valid TOML", "line 2"]),
        ];
        for (name, text, needles) in cases {
            let f = TempFile::new(name, text);
            let arg = f.arg();
            let e = err(&[arg.as_str()]);
            assert!(e.contains(&f.0.display().to_string()), "{name}: {e}");
            crate::test_support::contains_all(&e, &needles);
        }
    }
}
