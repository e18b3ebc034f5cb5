//! The `--map-by-device` spec: `TARGET[:QUALIFIER[=VALUE]]...`.
//!
//! Parsing is pure and happens first, on the submitting side (`srun`, `sbatch`, `salloc`),
//! so a typo is refused before anything is allocated. Words are case-insensitive and may be
//! shortened to any unique prefix; a prefix that fits two words is refused rather than
//! guessed (seed 001: "N" could be "NUMA" or "NONE"). A target that no node can have (a
//! near miss of a class word, a `,` `;` or blank where `:` belongs, Open MPI's `ppr:2:gpu`)
//! is refused here too, with the fix ([`name`]); any other target is a device name, which the
//! node matches. A device may be named by an id that contains `:` (a PCI bus id, a PMIx id):
//! [`target`] reads those by their shape.

mod name;
pub use name::comma_fix;
pub mod suggest;
mod target;

use crate::device::DeviceClass;
use std::fmt;

/// What the tasks are mapped against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Every device of a class (`gpu`; `network` = `nic` = `fabric` = `openfabrics`; `block`).
    Class(DeviceClass),
    /// One device named by OS name, identity, PCI bus id or PMIx id (`mlx5_0`, `GPU-46f7...`).
    Name(String),
    /// No mapping: turns an admin default off.
    None,
}

/// A CPU-side level for `interleave=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupLevel {
    Package,
    Numa,
    L3Cache,
    L2Cache,
    L1Cache,
}

/// What `bind=` binds each task to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindLevel {
    HwThread,
    Core,
    L1Cache,
    L2Cache,
    L3Cache,
    Numa,
    Package,
    /// All CPUs of the task's device locality.
    Locality,
    /// The locality's cores divided into equal, disjoint whole-core shares among the tasks
    /// placed on it, in task order (the default; one task alone gets the whole locality).
    Split,
    /// Leave the CPU mask alone; only set the environment.
    None,
}

/// A parsed spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Spec {
    pub target: Target,
    /// `interleave[=level]`: reorder the device list round-robin over groups of `level`.
    pub interleave: Option<GroupLevel>,
    /// `shared`: several tasks may be given the same device.
    pub shared: bool,
    /// `ndev=N`: devices per task (at least 1).
    pub ndev: u32,
    /// `ndev=auto`: the node's devices (the step's GPUs) divided equally among its tasks;
    /// the planner works out the count ([`Spec::ndev`] is then 1 until it does).
    pub ndev_auto: bool,
    /// `compact`: each task's `ndev` devices as close together in the topology as it allows.
    pub compact: bool,
    /// `omp[=true|false]`: write `OMP_NUM_THREADS`, `OMP_PLACES`, `OMP_PROC_BIND` from the
    /// task's binding; `None`: not said (the admin's `omp` setting decides).
    pub omp: Option<bool>,
    /// `pe=N`: cores per task (hardware threads with `hwtcpus`); Slurm's `--cpus-per-task` counts CPUs.
    pub pe: Option<u32>,
    /// `hwtcpus`: `pe` counts hardware threads instead of cores.
    pub hwtcpus: bool,
    /// `bind=`: `None` means not given (the default applies, see [`Spec::bind_level`]).
    pub bind: Option<BindLevel>,
    /// `closest`: pick the device nearest to the task's existing binding.
    pub closest: bool,
    /// `adapters`: also give each task the network adapters nearest its GPUs (`gpu` only).
    pub adapters: bool,
    /// `verbose`: report each task's assignment.
    pub verbose: bool,
    /// `ppr=N`: N consecutive tasks per device (or group of `ndev`); `None`: one.
    pub ppr: Option<u32>,
    /// `overload`: tasks may be bound to CPUs another task of the step has (refused otherwise).
    pub overload: bool,
    /// `env=`: which variables tasks are told.
    pub env: EnvMode,
}

/// What `env=` lets the plan write into tasks' environments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EnvMode {
    /// Every variable of the table (`env=all`, the default).
    #[default]
    All,
    /// Only `PMIX_DEVICE_ID` (`env=none`): placement and binding, no device-selection variable;
    /// a GPU that cannot be named to its runtime is then placed rather than refused.
    PmixOnly,
}

/// A spec that could not be read. Every variant keeps the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("empty --map-by-device spec: give a target such as gpu, network, block, a device name, or none")]
    Empty,
    #[error("empty qualifier in {spec:?}: remove the doubled or trailing ':'")]
    EmptyQualifier { spec: String },
    /// `hint`: "" or " (did you mean ndev=2?)".
    #[error("unknown qualifier {given:?}{hint}: expected one of {expected}")]
    UnknownQualifier { given: String, hint: String, expected: String },
    #[error("ambiguous {what} {given:?}: it could be {candidates}; type more letters")]
    Ambiguous { what: &'static str, given: String, candidates: String },
    #[error("qualifier {name} takes no value, but {given:?} gives one: write just {name}")]
    UnexpectedValue { name: &'static str, given: String },
    #[error("qualifier {name} needs a value: write {name}=<{hint}>")]
    MissingValue { name: &'static str, hint: &'static str },
    /// `hint`: "" or " (did you mean core?)".
    #[error("bad value {value:?} for {name}{hint}: expected {expected}")]
    BadValue { name: &'static str, value: String, hint: String, expected: String },
    #[error("interleave=node is not accepted: interleave orders devices within a node; each node maps its own devices, so there is nothing to interleave across nodes. Use package, numa, l3cache, l2cache or l1cache")]
    InterleaveNode,
    #[error("qualifier {name} given twice in {spec:?}: keep one")]
    Repeated { name: &'static str, spec: String },
    #[error("'none' takes no qualifiers, but {spec:?} has some: write just none")]
    NoneWithQualifiers { spec: String },
    #[error("adapters gives each task the network adapters nearest its GPUs, but {class} maps no GPU: write gpu:adapters (each task its GPU and the adapter next to it), or drop adapters")]
    AdaptersNeedGpus { class: DeviceClass },
    #[error("{first} and {second} cannot be combined: {reason}")]
    Conflict { first: &'static str, second: &'static str, reason: &'static str },
    #[error("bad device id in {given:?}: expected {expected}")]
    BadId { given: String, expected: String },
    /// `separator`: "a comma", "a semicolon" or "a blank"; `fixed`: the spec written with ':'.
    #[error(
        "{given:?} is no --map-by-device spec: {separator} does not separate qualifiers, write them with ':' ({fixed})"
    )]
    Separator { given: String, separator: &'static str, fixed: String },
    /// A comma list of device names where one target goes.
    #[error("{given:?} lists {names} devices, and a spec has one target: {LIST_FIX}", LIST_FIX = LIST_FIX)]
    NameList { given: String, names: usize },
    #[error("no device is named {given:?} (did you mean {word}?): a target is gpu, network (nic, fabric, openfabrics), block, none, or a device's own name")]
    NearMiss { given: String, word: &'static str },
    #[error("no device name holds {character:?}, as {given:?} does: name a class (gpu, network, block), or one device by OS name, UUID, PCI bus id or PMIx id (cuda0, GPU-46f7..., 0000:06:00.0, gpu://HOST::nvml0)")]
    BadName { given: String, character: char },
    #[error("{given:?} is no target: {fix}")]
    NotATarget { given: String, fix: String },
    #[error("{given:?} is Open MPI's --map-by spelling, not a --map-by-device spec: {fix}")]
    OpenMpi { given: String, fix: String },
    #[error("--map-by-device spec of {len} bytes starting {head:?} is longer than {MAX_SPEC_BYTES} bytes: give a target and its qualifiers, such as gpu:interleave")]
    TooLong { len: usize, head: String },
}

/// The longest spec read (a device identity with every qualifier is under 200 bytes). Longer
/// text is refused before it is parsed, so that no message quotes a megabyte back.
pub const MAX_SPEC_BYTES: usize = 1024;

/// The qualifiers, in the order they are listed to users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Qualifier {
    Interleave,
    Shared,
    Ndev,
    Compact,
    Ppr,
    Pe,
    Hwtcpus,
    Bind,
    Overload,
    Env,
    Omp,
    Closest,
    Adapters,
    Verbose,
}

const QUALIFIERS: [(&str, Qualifier); 14] = [
    ("interleave", Qualifier::Interleave),
    ("shared", Qualifier::Shared),
    ("ndev", Qualifier::Ndev),
    ("compact", Qualifier::Compact),
    ("ppr", Qualifier::Ppr),
    ("pe", Qualifier::Pe),
    ("hwtcpus", Qualifier::Hwtcpus),
    ("bind", Qualifier::Bind),
    ("overload", Qualifier::Overload),
    ("env", Qualifier::Env),
    ("omp", Qualifier::Omp),
    ("closest", Qualifier::Closest),
    ("adapters", Qualifier::Adapters),
    ("verbose", Qualifier::Verbose),
];

/// Short forms that keep the meaning they had before a later word came to share them
/// (seed 000: a new qualifier must not silently change a working command line): `p` is
/// still `pe` (not `ppr`), `c` still `closest` (not `compact`), `o` still `overload` (not
/// `omp`); the newer words need one more letter.
const PINNED: [(&str, Qualifier); 3] = [("p", Qualifier::Pe), ("c", Qualifier::Closest), ("o", Qualifier::Overload)];

const ENV_MODES: [(&str, EnvMode); 2] = [("all", EnvMode::All), ("none", EnvMode::PmixOnly)];

impl Qualifier {
    fn name(self) -> &'static str {
        QUALIFIERS.iter().find(|(_, q)| *q == self).map_or("?", |(n, _)| n)
    }

    /// Whether `NAME=VALUE` is a form of it.
    fn takes_value(self) -> bool {
        !matches!(
            self,
            Qualifier::Compact
                | Qualifier::Hwtcpus
                | Qualifier::Overload
                | Qualifier::Closest
                | Qualifier::Adapters
                | Qualifier::Verbose
        )
    }
}

const GROUP_LEVELS: [(&str, GroupLevel); 5] = [
    ("package", GroupLevel::Package),
    ("numa", GroupLevel::Numa),
    ("l3cache", GroupLevel::L3Cache),
    ("l2cache", GroupLevel::L2Cache),
    ("l1cache", GroupLevel::L1Cache),
];

const BIND_LEVELS: [(&str, BindLevel); 10] = [
    ("hwthread", BindLevel::HwThread),
    ("core", BindLevel::Core),
    ("l1cache", BindLevel::L1Cache),
    ("l2cache", BindLevel::L2Cache),
    ("l3cache", BindLevel::L3Cache),
    ("numa", BindLevel::Numa),
    ("package", BindLevel::Package),
    ("locality", BindLevel::Locality),
    ("split", BindLevel::Split),
    ("none", BindLevel::None),
];

const CLASS_WORDS: [(&str, DeviceClass); 6] = [
    ("gpu", DeviceClass::Gpu),
    ("network", DeviceClass::Network),
    ("nic", DeviceClass::Network),
    ("fabric", DeviceClass::Network),
    ("openfabrics", DeviceClass::Network),
    ("block", DeviceClass::Block),
];

/// What to write instead of a list of device names (a spec names one class or one device).
pub const LIST_FIX: &str =
    "lists of devices are not supported; map their class (gpu, network, block) to give each task \
     its own device of it (ndev=N for N each; Slurm's --gpus chooses which GPUs a step holds), or name one device";

/// The words that name a class of devices (`gpu`, `network` and its synonyms, `block`).
pub fn class_words() -> impl Iterator<Item = &'static str> {
    CLASS_WORDS.iter().map(|(w, _)| *w)
}

/// Finds the one entry of `table` that `given` is a case-insensitive prefix of (an exact
/// match always wins). Errors name the candidates.
fn by_prefix<T: Copy>(what: &'static str, given: &str, table: &[(&'static str, T)]) -> Result<T, SpecError> {
    let lower = given.to_ascii_lowercase();
    if let Some((_, v)) = table.iter().find(|(name, _)| *name == lower) {
        return Ok(*v);
    }
    let hits: Vec<&(&str, T)> =
        table.iter().filter(|(name, _)| !lower.is_empty() && name.starts_with(&lower)).collect();
    match hits.as_slice() {
        [(_, v)] => Ok(*v),
        [] => Err(SpecError::BadValue {
            name: what,
            value: given.to_string(),
            hint: suggest::nearest(given, table.iter().map(|(n, _)| *n))
                .map(|n| format!(" (did you mean {n}?)"))
                .unwrap_or_default(),
            expected: table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
        }),
        many => Err(SpecError::Ambiguous {
            what,
            given: given.to_string(),
            candidates: many.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" or "),
        }),
    }
}

/// The qualifier `word` names: a pinned short form, else a unique prefix. An unknown word
/// is refused with the nearest qualifier (`value` is what followed its `=`, if anything).
fn qualifier_word(word: &str, value: Option<&str>) -> Result<Qualifier, SpecError> {
    if let Some((_, q)) = PINNED.iter().find(|(short, _)| short.eq_ignore_ascii_case(word)) {
        return Ok(*q);
    }
    by_prefix("qualifier", word, &QUALIFIERS).map_err(|e| match e {
        SpecError::BadValue { value: given, expected, .. } => {
            let names: Vec<(&str, bool)> = QUALIFIERS.iter().map(|(n, q)| (*n, q.takes_value())).collect();
            let hint = suggest::qualifier(&given, value, &names)
                .map(|s| format!(" (did you mean {}?)", crate::text::printable(&s)))
                .unwrap_or_default();
            SpecError::UnknownQualifier { given, hint, expected }
        }
        other => other,
    })
}

/// `socket` is `package` (Slurm's and mpibind's word for it), as a whole word only, so that
/// no prefix changes meaning.
fn level_word(value: &str) -> &str {
    if value.eq_ignore_ascii_case("socket") {
        "package"
    } else {
        value
    }
}

fn positive(name: &'static str, value: &str) -> Result<u32, SpecError> {
    match value.trim().parse::<u32>() {
        Ok(n) if (1..=1 << 16).contains(&n) => Ok(n),
        parsed => Err(SpecError::BadValue {
            name,
            value: value.to_string(),
            // ndev=0 is most often "as many as there are": that is ndev=auto.
            hint: if name == "ndev" && parsed == Ok(0) { " (did you mean ndev=auto?)".into() } else { String::new() },
            expected: if name == "ndev" {
                "a whole number from 1 to 65536, or auto (the step's devices divided among its tasks)".into()
            } else {
                "a whole number from 1 to 65536".into()
            },
        }),
    }
}

impl Spec {
    /// A spec for `target` with every qualifier at its default.
    pub fn new(target: Target) -> Spec {
        Spec {
            target,
            interleave: None,
            shared: false,
            ndev: 1,
            pe: None,
            hwtcpus: false,
            bind: None,
            closest: false,
            adapters: false,
            verbose: false,
            ppr: None,
            overload: false,
            env: EnvMode::All,
            ndev_auto: false,
            compact: false,
            omp: None,
        }
    }

    /// Parses `TARGET[:QUALIFIER[=VALUE]]...`.
    pub fn parse(text: &str) -> Result<Spec, SpecError> {
        if text.len() > MAX_SPEC_BYTES {
            return Err(SpecError::TooLong { len: text.len(), head: text.chars().take(40).collect() });
        }
        let text = text.trim();
        let (target_text, qualifiers) = target::split(text)?;
        let target_text = target_text.trim();
        if target_text.is_empty() {
            return Err(SpecError::Empty);
        }
        let lower = target_text.to_ascii_lowercase();
        let target = if lower == "none" {
            Target::None
        } else if let Some((_, class)) = CLASS_WORDS.iter().find(|(w, _)| *w == lower) {
            Target::Class(*class)
        } else {
            name::check(text, target_text)?;
            Target::Name(target_text.to_string())
        };
        let mut spec = Spec::new(target);
        let mut seen: Vec<Qualifier> = Vec::new();
        for part in qualifiers.into_iter().flat_map(|q| q.split(':')) {
            if spec.target == Target::None {
                return Err(SpecError::NoneWithQualifiers { spec: text.to_string() });
            }
            let part = part.trim();
            if part.is_empty() {
                return Err(SpecError::EmptyQualifier { spec: text.to_string() });
            }
            let (word, value) = match part.split_once('=') {
                Some((w, v)) => (w.trim(), Some(v.trim())),
                None => (part, None),
            };
            if let Some((sep, sep_name)) = name::stray_separator(word).or_else(|| value.and_then(name::stray_separator))
            {
                return Err(name::separator(text, sep, sep_name));
            }
            let qualifier = qualifier_word(word, value)?;
            if seen.contains(&qualifier) {
                return Err(SpecError::Repeated { name: qualifier.name(), spec: text.to_string() });
            }
            seen.push(qualifier);
            spec.set(qualifier, value, part)?;
        }
        spec.check_combinations()?;
        Ok(spec)
    }

    /// Applies one qualifier (`part` is its text, for messages).
    fn set(&mut self, qualifier: Qualifier, value: Option<&str>, part: &str) -> Result<(), SpecError> {
        let name = qualifier.name();
        let flag = |flag: &mut bool| match value {
            Some(_) => Err(SpecError::UnexpectedValue { name, given: part.to_string() }),
            None => {
                *flag = true;
                Ok(())
            }
        };
        let hint = if qualifier == Qualifier::Ndev { "N|auto" } else { "N" };
        let number = || positive(name, value.ok_or(SpecError::MissingValue { name, hint })?);
        match qualifier {
            Qualifier::Interleave => {
                self.interleave = Some(match value {
                    None => GroupLevel::Package,
                    Some(v) if v.eq_ignore_ascii_case("node") => return Err(SpecError::InterleaveNode),
                    Some(v) => by_prefix("interleave level", level_word(v), &GROUP_LEVELS)?,
                })
            }
            Qualifier::Shared => {
                self.shared = match value {
                    None => true,
                    Some(v) => by_prefix("shared", v, &[("true", true), ("false", false)])?,
                }
            }
            Qualifier::Ndev if value.is_some_and(|v| v.eq_ignore_ascii_case("auto")) => self.ndev_auto = true,
            Qualifier::Ndev => self.ndev = number()?,
            Qualifier::Ppr => self.ppr = Some(number()?),
            Qualifier::Pe => self.pe = Some(number()?),
            Qualifier::Bind => {
                let v = value.ok_or(SpecError::MissingValue { name, hint: "level" })?;
                self.bind = Some(by_prefix("bind level", level_word(v), &BIND_LEVELS)?);
            }
            Qualifier::Env => {
                let v = value.ok_or(SpecError::MissingValue { name, hint: "all|none" })?;
                self.env = by_prefix("env", v, &ENV_MODES)?;
            }
            Qualifier::Omp => {
                self.omp = Some(match value {
                    None => true,
                    Some(v) => by_prefix("omp", v, &[("true", true), ("false", false)])?,
                })
            }
            Qualifier::Compact => flag(&mut self.compact)?,
            Qualifier::Hwtcpus => flag(&mut self.hwtcpus)?,
            Qualifier::Overload => flag(&mut self.overload)?,
            Qualifier::Closest => flag(&mut self.closest)?,
            Qualifier::Adapters => flag(&mut self.adapters)?,
            Qualifier::Verbose => flag(&mut self.verbose)?,
        }
        Ok(())
    }

    /// The qualifiers that cannot be combined, refused with the reason and the fix.
    fn check_combinations(&self) -> Result<(), SpecError> {
        let spec = self;
        if let (true, Target::Class(class @ (DeviceClass::Network | DeviceClass::Block))) =
            (spec.adapters, &spec.target)
        {
            return Err(SpecError::AdaptersNeedGpus { class: *class });
        }
        if spec.closest {
            if spec.bind.is_some_and(|b| b != BindLevel::None) {
                return Err(SpecError::Conflict {
                    first: "closest",
                    second: "bind",
                    reason: "closest keeps the task's existing binding (bind=none); drop bind= or drop closest",
                });
            }
            if spec.pe.is_some() {
                return Err(SpecError::Conflict {
                    first: "closest",
                    second: "pe",
                    reason: "closest does not bind, so pe= has nothing to size; drop one of them",
                });
            }
            if spec.ppr.is_some() {
                return Err(SpecError::Conflict {
                    first: "closest",
                    second: "ppr",
                    reason: "closest picks each task's device from its binding, not by counting tasks per device; \
                             drop ppr= or drop closest",
                });
            }
            if spec.ndev > 1 || spec.ndev_auto {
                return Err(SpecError::Conflict {
                    first: "closest",
                    second: "ndev",
                    reason: "closest picks the one device nearest to each task; drop ndev= or drop closest",
                });
            }
        }
        if spec.compact && spec.interleave.is_some() {
            return Err(SpecError::Conflict {
                first: "compact",
                second: "interleave",
                reason: "compact keeps each task's devices together, interleave spreads consecutive ones apart; \
                         drop one of them",
            });
        }
        if spec.pe.is_some() && spec.bind == Some(BindLevel::None) {
            return Err(SpecError::Conflict {
                first: "pe",
                second: "bind=none",
                reason: "pe= sizes a binding that bind=none turns off; drop one of them",
            });
        }
        Ok(())
    }

    /// The binding in force: `bind=` if given; `closest` implies none; `pe=` without `bind=`
    /// binds to those CPUs (cores, or threads with `hwtcpus`, which alone means one thread
    /// per task, or `--cpus-per-task` threads); otherwise the locality.
    pub fn bind_level(&self) -> BindLevel {
        match (self.bind, self.closest, self.pe) {
            (Some(b), _, _) => b,
            (None, true, _) => BindLevel::None,
            (None, false, _) if self.hwtcpus => BindLevel::HwThread,
            (None, false, Some(_)) => BindLevel::Core,
            (None, false, None) => BindLevel::Split,
        }
    }

    /// Whether this spec maps at all (`none` does not).
    pub fn is_none(&self) -> bool {
        self.target == Target::None
    }
}

impl fmt::Display for GroupLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = GROUP_LEVELS.iter().find(|(_, l)| l == self).map_or("?", |(n, _)| n);
        f.write_str(name)
    }
}

impl fmt::Display for BindLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = BIND_LEVELS.iter().find(|(_, l)| l == self).map_or("?", |(n, _)| n);
        f.write_str(name)
    }
}

/// The canonical text of a spec: full words, defaults left out. `parse(to_string())` gives
/// the same spec back (while it is at most [`MAX_SPEC_BYTES`] long: full words can lengthen it).
impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Class(c) => write!(f, "{c}")?,
            Target::Name(n) => f.write_str(n)?,
            Target::None => return f.write_str("none"),
        }
        if let Some(level) = self.interleave {
            write!(f, ":interleave={level}")?;
        }
        if self.shared {
            f.write_str(":shared")?;
        }
        if self.ndev_auto {
            f.write_str(":ndev=auto")?;
        } else if self.ndev != 1 {
            write!(f, ":ndev={}", self.ndev)?;
        }
        if self.compact {
            f.write_str(":compact")?;
        }
        if let Some(n) = self.ppr {
            write!(f, ":ppr={n}")?;
        }
        if let Some(pe) = self.pe {
            write!(f, ":pe={pe}")?;
        }
        if self.hwtcpus {
            f.write_str(":hwtcpus")?;
        }
        if let Some(b) = self.bind {
            write!(f, ":bind={b}")?;
        }
        if self.overload {
            f.write_str(":overload")?;
        }
        if self.env == EnvMode::PmixOnly {
            f.write_str(":env=none")?;
        }
        if let Some(omp) = self.omp {
            f.write_str(if omp { ":omp" } else { ":omp=false" })?;
        }
        if self.closest {
            f.write_str(":closest")?;
        }
        if self.adapters {
            f.write_str(":adapters")?;
        }
        if self.verbose {
            f.write_str(":verbose")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Spec {
        Spec::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }
    fn err(s: &str) -> SpecError {
        Spec::parse(s).expect_err(s)
    }

    /// Found by the spec fuzz target: the suggestion carried the user's control characters.
    #[test]
    fn suggestions_are_one_printable_line() {
        let e = err("gpu:bild=c\u{1}ore\n").to_string();
        assert!(e.contains("did you mean bind=c\\u{1}ore"), "{e}");
        assert!(!e.chars().any(char::is_control), "{e}");
    }

    #[test]
    fn a_long_spec_is_refused_with_its_start_only() {
        let long = format!("gpu:{}", "v".repeat(1 << 20));
        let e = err(&long).to_string();
        assert!(e.starts_with("--map-by-device spec of 1048580 bytes starting \"gpu:vvv"), "{e}");
        assert!(e.len() < 300, "{e}");
        assert!(Spec::parse(&format!("gpu{}", " ".repeat(MAX_SPEC_BYTES - 3))).is_ok());
    }

    #[test]
    fn class_words_and_synonyms() {
        for w in ["gpu", "GPU", "Gpu"] {
            assert_eq!(ok(w).target, Target::Class(DeviceClass::Gpu));
        }
        for w in ["network", "nic", "fabric", "openfabrics", "NIC"] {
            assert_eq!(ok(w).target, Target::Class(DeviceClass::Network), "{w}");
        }
        assert_eq!(ok("block").target, Target::Class(DeviceClass::Block));
        assert_eq!(ok("none").target, Target::None);
        assert_eq!(ok("mlx5_0").target, Target::Name("mlx5_0".into()));
        // Class words are whole words, never prefixes: "gp" is not gpu, and no device is
        // named so either (a near miss of a class word, refused at once).
        assert!(matches!(err("gp"), SpecError::NearMiss { word: "gpu", .. }));
        assert_eq!(ok("ib").target, Target::Name("ib".into()));
    }

    #[test]
    fn comma_is_not_a_separator() {
        // Refused where the spec is read (srun), not on the node after the queue wait.
        let e = err("gpu,ndev=2").to_string();
        assert!(e.contains("a comma does not separate qualifiers, write them with ':' (gpu:ndev=2)"), "{e}");
    }

    #[test]
    fn ndev_zero_names_auto() {
        let e = err("gpu:ndev=0").to_string();
        assert!(e.contains("(did you mean ndev=auto?)") && e.contains("or auto"), "{e}");
        assert!(!err("gpu:pe=0").to_string().contains("auto"));
    }

    #[test]
    fn qualifiers_by_unique_prefix_any_case() {
        let s = ok("gpu:INT:s:nd=2:pe=3:b=core:v");
        assert_eq!(s.interleave, Some(GroupLevel::Package));
        assert!(s.shared && s.verbose);
        assert_eq!((s.ndev, s.pe, s.bind), (2, Some(3), Some(BindLevel::Core)));
        assert_eq!(ok("gpu:interleave=NUMA").interleave, Some(GroupLevel::Numa));
        assert_eq!(ok("gpu:i=l3").interleave, Some(GroupLevel::L3Cache));
        assert_eq!(ok("gpu:bind=hw").bind, Some(BindLevel::HwThread));
        assert_eq!(ok("gpu:bind=loc").bind, Some(BindLevel::Locality));
        assert!(!ok("gpu:shared=false").shared);
    }

    #[test]
    fn ambiguous_prefixes_are_refused_with_candidates() {
        match err("gpu:bind=n") {
            SpecError::Ambiguous { given, candidates, .. } => {
                assert_eq!(given, "n");
                assert_eq!(candidates, "numa or none");
            }
            e => panic!("{e}"),
        }
        let e = err("gpu:bind=l").to_string();
        assert!(e.contains("l1cache") && e.contains("locality"), "{e}");
        assert!(matches!(err("gpu:interleave=l"), SpecError::Ambiguous { .. }));
    }

    #[test]
    fn every_refusal_names_the_offending_text() {
        let cases = [
            ("", "empty"),
            ("gpu::shared", "doubled"),
            ("gpu:bogus", "\"bogus\""),
            ("gpu:span", "\"span\""),
            ("gpu:shared=maybe", "\"maybe\""),
            ("gpu:verbose=1", "verbose=1"),
            ("gpu:closest=yes", "closest=yes"),
            ("gpu:ndev", "ndev=<N|auto>"),
            ("gpu:ndev=0", "\"0\""),
            ("gpu:ndev=-1", "\"-1\""),
            ("gpu:pe=x", "\"x\""),
            ("gpu:bind", "bind=<level>"),
            ("gpu:bind=sockets", "\"sockets\""),
            ("gpu:ndev2", "did you mean ndev=2?"),
            ("gpu:bind=cores", "did you mean core?"),
            ("gpu:interleave=node", "node"),
            ("gpu:shared:shared", "twice"),
            ("none:verbose", "none"),
            ("gpu:closest:bind=core", "closest"),
            ("gpu:pe=2:bind=none", "bind=none"),
        ];
        for (spec, needle) in cases {
            let e = err(spec).to_string();
            assert!(e.contains(needle), "{spec:?} -> {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn adapters_pairs_gpus_only() {
        for given in ["gpu:adapters", "gpu:a", "gpu:ADAPT", "GPU-2fa8685e:adapters"] {
            assert!(ok(given).adapters, "{given}");
        }
        assert!(!ok("gpu").adapters);
        assert!(ok("gpu:adapters:ndev=2:shared").adapters);
        // A named device may be a GPU: that is known on the node, not here.
        assert!(ok("cuda0:adapters").adapters);
        for given in ["network:adapters", "nic:a", "block:adapters"] {
            let e = err(given);
            assert!(matches!(e, SpecError::AdaptersNeedGpus { .. }), "{given}: {e}");
            assert!(e.to_string().contains("gpu:adapters"), "{e}");
        }
        assert!(err("gpu:adapters=2").to_string().contains("adapters=2"));
        // A near miss is named; a word that takes no value is never read as run into one.
        assert!(err("gpu:adaptors").to_string().contains("(did you mean adapters?)"), "{}", err("gpu:adaptors"));
        assert!(!err("gpu:adaptersx").to_string().contains("adapters=x"), "{}", err("gpu:adaptersx"));
        assert!(err("gpu:adapters:adapters").to_string().contains("twice"));
        // The new word leaves every other short form as it was.
        let s = ok("gpu:i:s:n=2:p=2:h:b=core:v");
        assert!(s.interleave.is_some() && s.shared && s.hwtcpus && s.verbose && !s.adapters);
        assert_eq!((s.ndev, s.pe), (2, Some(2)));
        assert!(ok("gpu:c").closest);
    }

    #[test]
    fn bind_defaults() {
        assert_eq!(ok("gpu").bind_level(), BindLevel::Split);
        assert_eq!(ok("gpu:bind=locality").bind_level(), BindLevel::Locality);
        assert_eq!(ok("gpu:pe=2").bind_level(), BindLevel::Core);
        assert_eq!(ok("gpu:pe=2:hwtcpus").bind_level(), BindLevel::HwThread);
        assert_eq!(ok("gpu:hwtcpus").bind_level(), BindLevel::HwThread);
        assert_eq!(ok("gpu:closest").bind_level(), BindLevel::None);
        assert_eq!(ok("gpu:pe=2:bind=numa").bind_level(), BindLevel::Numa);
    }

    #[test]
    fn ids_with_colons_are_targets_and_qualifiers_still_follow() {
        let s = ok("gpu://turin-h200::nvml2:bind=core:verbose");
        assert_eq!(s.target, Target::Name("gpu://turin-h200::nvml2".into()));
        assert_eq!((s.bind, s.verbose), (Some(BindLevel::Core), true));
        assert_eq!(ok("0000:96:00.0").target, Target::Name("0000:96:00.0".into()));
        assert_eq!(ok("96:00.0:shared").target, Target::Name("96:00.0".into()));
        assert!(ok("96:00.0:shared").shared);
        let fab = "fab://9c63:c003:00fb:7458::9c63:c003:00fb:7458";
        assert_eq!(ok(&format!("{fab}:pe=2")).target, Target::Name(fab.into()));
        assert_eq!(ok("ipv4://00:11:22:33:44:55").target, Target::Name("ipv4://00:11:22:33:44:55".into()));
        assert!(err("gpu://turin-h200").to_string().contains("gpu://HOST::NAME"));
    }

    #[test]
    fn socket_is_package_as_a_whole_word() {
        assert_eq!(ok("gpu:bind=socket").bind, Some(BindLevel::Package));
        assert_eq!(ok("gpu:interleave=Socket").interleave, Some(GroupLevel::Package));
        assert_eq!(ok("gpu:bind=socket").to_string(), "gpu:bind=package");
        // Not a prefix: bind=s is still split.
        assert_eq!(ok("gpu:bind=s").bind, Some(BindLevel::Split));
    }

    #[test]
    fn ndev_auto_compact_omp_and_split() {
        let s = ok("gpu:ndev=auto:compact:omp:bind=split");
        assert!(s.ndev_auto && s.compact && s.omp == Some(true) && s.bind == Some(BindLevel::Split));
        assert_eq!(ok("gpu:omp=false").omp, Some(false));
        assert_eq!(ok("gpu").omp, None);
        assert!(err("gpu:ndev").to_string().contains("ndev=<N|auto>"));
        assert!(err("gpu:compact:interleave").to_string().contains("compact and interleave"));
        assert!(err("gpu:ndev=auto:closest").to_string().contains("closest and ndev"));
        // Pinned: c is closest, o is overload; the newer words take two letters.
        assert!(ok("gpu:c").closest && ok("gpu:co").compact && ok("gpu:o").overload && ok("gpu:om").omp == Some(true));
    }

    #[test]
    fn ppr_overload_and_env() {
        let s = ok("gpu:ppr=2:overload:env=none");
        assert_eq!((s.ppr, s.overload, s.env), (Some(2), true, EnvMode::PmixOnly));
        assert_eq!(ok("gpu:env=all").env, EnvMode::All);
        assert_eq!(ok("gpu:pp=3").ppr, Some(3));
        assert!(ok("gpu:o").overload);
        // `p` kept its meaning (pe) when ppr arrived; both are reachable.
        assert_eq!((ok("gpu:p=2").pe, ok("gpu:p=2").ppr), (Some(2), None));
        assert!(err("gpu:ppr=0").to_string().contains("\"0\""));
        assert!(err("gpu:env").to_string().contains("env=<all|none>"));
        assert!(err("gpu:overload=yes").to_string().contains("overload=yes"));
        assert!(err("gpu:closest:ppr=2").to_string().contains("closest and ppr cannot be combined"));
    }

    #[test]
    fn canonical_text_round_trips() {
        for s in [
            "gpu",
            "network:interleave=numa:shared:ndev=2:pe=4:hwtcpus:bind=l3cache:verbose",
            "gpu:ndev=2:ppr=3:bind=core:overload:env=none",
            "gpu:ndev=auto:compact:bind=split:omp",
            "gpu:omp=false",
            "gpu://node07::nvml0:verbose",
            "0000:06:00.0:shared",
            "mlx5_0:closest",
            "none",
            "gpu:ndev=2:adapters:verbose",
            "cuda0:closest:adapters",
        ] {
            let spec = ok(s);
            assert_eq!(spec.to_string(), s);
            assert_eq!(ok(&spec.to_string()), spec);
        }
        assert_eq!(ok("nic:i:s").to_string(), "network:interleave=package:shared");
    }
}
