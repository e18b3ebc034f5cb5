//! The `--map-by-device` spec: `TARGET[:QUALIFIER[=VALUE]]...`.
//!
//! Parsing is pure and happens first, on the submitting side (`srun`, `sbatch`, `salloc`),
//! so a typo is refused before anything is allocated. Words are case-insensitive and may be
//! shortened to any unique prefix; a prefix that fits two words is refused rather than
//! guessed (seed 001: "N" could be "NUMA" or "NONE"). A comma is not a separator:
//! `gpu,ndev=2` is a device *name*, which then fails to match on the node.

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
    /// All CPUs of the task's device locality (the default).
    Locality,
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
    /// `pe=N`: CPUs per task.
    pub pe: Option<u32>,
    /// `hwtcpus`: `pe` counts hardware threads instead of cores.
    pub hwtcpus: bool,
    /// `bind=`: `None` means not given (the default applies, see [`Spec::bind_level`]).
    pub bind: Option<BindLevel>,
    /// `closest`: pick the device nearest to the task's existing binding.
    pub closest: bool,
    /// `verbose`: report each task's assignment.
    pub verbose: bool,
}

/// A spec that could not be read. Every variant keeps the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("empty --map-by-device spec: give a target such as gpu, network, block, a device name, or none")]
    Empty,
    #[error("empty qualifier in {spec:?}: remove the doubled or trailing ':'")]
    EmptyQualifier { spec: String },
    #[error("unknown qualifier {given:?}: expected one of {expected}")]
    UnknownQualifier { given: String, expected: String },
    #[error("ambiguous {what} {given:?}: it could be {candidates}; type more letters")]
    Ambiguous { what: &'static str, given: String, candidates: String },
    #[error("qualifier {name} takes no value, but {given:?} gives one: write just {name}")]
    UnexpectedValue { name: &'static str, given: String },
    #[error("qualifier {name} needs a value: write {name}=<{hint}>")]
    MissingValue { name: &'static str, hint: &'static str },
    #[error("bad value {value:?} for {name}: expected {expected}")]
    BadValue { name: &'static str, value: String, expected: String },
    #[error("interleave=node is not accepted: interleave orders devices within a node; each node maps its own devices, so there is nothing to interleave across nodes. Use package, numa, l3cache, l2cache or l1cache")]
    InterleaveNode,
    #[error("qualifier {name} given twice in {spec:?}: keep one")]
    Repeated { name: &'static str, spec: String },
    #[error("'none' takes no qualifiers, but {spec:?} has some: write just none")]
    NoneWithQualifiers { spec: String },
    #[error("{first} and {second} cannot be combined: {reason}")]
    Conflict { first: &'static str, second: &'static str, reason: &'static str },
}

/// The qualifiers, in the order they are listed to users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Qualifier {
    Interleave,
    Shared,
    Ndev,
    Pe,
    Hwtcpus,
    Bind,
    Closest,
    Verbose,
}

const QUALIFIERS: [(&str, Qualifier); 8] = [
    ("interleave", Qualifier::Interleave),
    ("shared", Qualifier::Shared),
    ("ndev", Qualifier::Ndev),
    ("pe", Qualifier::Pe),
    ("hwtcpus", Qualifier::Hwtcpus),
    ("bind", Qualifier::Bind),
    ("closest", Qualifier::Closest),
    ("verbose", Qualifier::Verbose),
];

impl Qualifier {
    fn name(self) -> &'static str {
        QUALIFIERS.iter().find(|(_, q)| *q == self).map_or("?", |(n, _)| n)
    }
}

const GROUP_LEVELS: [(&str, GroupLevel); 5] = [
    ("package", GroupLevel::Package),
    ("numa", GroupLevel::Numa),
    ("l3cache", GroupLevel::L3Cache),
    ("l2cache", GroupLevel::L2Cache),
    ("l1cache", GroupLevel::L1Cache),
];

const BIND_LEVELS: [(&str, BindLevel); 9] = [
    ("hwthread", BindLevel::HwThread),
    ("core", BindLevel::Core),
    ("l1cache", BindLevel::L1Cache),
    ("l2cache", BindLevel::L2Cache),
    ("l3cache", BindLevel::L3Cache),
    ("numa", BindLevel::Numa),
    ("package", BindLevel::Package),
    ("locality", BindLevel::Locality),
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
            expected: table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
        }),
        many => Err(SpecError::Ambiguous {
            what,
            given: given.to_string(),
            candidates: many.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" or "),
        }),
    }
}

fn positive(name: &'static str, value: &str) -> Result<u32, SpecError> {
    match value.trim().parse::<u32>() {
        Ok(n) if (1..=1 << 16).contains(&n) => Ok(n),
        _ => Err(SpecError::BadValue {
            name,
            value: value.to_string(),
            expected: "a whole number from 1 to 65536".into(),
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
            verbose: false,
        }
    }

    /// Parses `TARGET[:QUALIFIER[=VALUE]]...`.
    pub fn parse(text: &str) -> Result<Spec, SpecError> {
        let text = text.trim();
        let mut parts = text.split(':');
        let target_text = parts.next().unwrap_or("").trim();
        if target_text.is_empty() {
            return Err(SpecError::Empty);
        }
        let lower = target_text.to_ascii_lowercase();
        let target = if lower == "none" {
            Target::None
        } else if let Some((_, class)) = CLASS_WORDS.iter().find(|(w, _)| *w == lower) {
            Target::Class(*class)
        } else {
            Target::Name(target_text.to_string())
        };
        let mut spec = Spec::new(target);
        let mut seen: Vec<Qualifier> = Vec::new();
        for part in parts {
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
            let qualifier = by_prefix("qualifier", word, &QUALIFIERS).map_err(|e| match e {
                SpecError::BadValue { value, expected, .. } => SpecError::UnknownQualifier { given: value, expected },
                other => other,
            })?;
            let name = qualifier.name();
            if seen.contains(&qualifier) {
                return Err(SpecError::Repeated { name, spec: text.to_string() });
            }
            seen.push(qualifier);
            let no_value = |flag: &mut bool| -> Result<(), SpecError> {
                match value {
                    Some(_) => Err(SpecError::UnexpectedValue { name, given: part.to_string() }),
                    None => {
                        *flag = true;
                        Ok(())
                    }
                }
            };
            match qualifier {
                Qualifier::Interleave => {
                    spec.interleave = Some(match value {
                        None => GroupLevel::Package,
                        Some(v) if v.eq_ignore_ascii_case("node") => return Err(SpecError::InterleaveNode),
                        Some(v) => by_prefix("interleave level", v, &GROUP_LEVELS)?,
                    })
                }
                Qualifier::Shared => {
                    spec.shared = match value {
                        None => true,
                        Some(v) => by_prefix("shared", v, &[("true", true), ("false", false)])?,
                    }
                }
                Qualifier::Ndev => {
                    spec.ndev = positive("ndev", value.ok_or(SpecError::MissingValue { name, hint: "N" })?)?
                }
                Qualifier::Pe => {
                    spec.pe = Some(positive("pe", value.ok_or(SpecError::MissingValue { name, hint: "N" })?)?)
                }
                Qualifier::Bind => {
                    let v = value.ok_or(SpecError::MissingValue { name, hint: "level" })?;
                    spec.bind = Some(by_prefix("bind level", v, &BIND_LEVELS)?);
                }
                Qualifier::Hwtcpus => no_value(&mut spec.hwtcpus)?,
                Qualifier::Closest => no_value(&mut spec.closest)?,
                Qualifier::Verbose => no_value(&mut spec.verbose)?,
            }
        }
        spec.check_combinations()?;
        Ok(spec)
    }

    /// The qualifiers that cannot be combined, refused with the reason and the fix.
    fn check_combinations(&self) -> Result<(), SpecError> {
        let spec = self;
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
            if spec.ndev > 1 {
                return Err(SpecError::Conflict {
                    first: "closest",
                    second: "ndev",
                    reason: "closest picks the one device nearest to each task; drop ndev= or drop closest",
                });
            }
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
            (None, false, None) => BindLevel::Locality,
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
/// the same spec back.
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
        if self.ndev != 1 {
            write!(f, ":ndev={}", self.ndev)?;
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
        if self.closest {
            f.write_str(":closest")?;
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
        // Class words are whole words, never prefixes: "gp" is a device name.
        assert_eq!(ok("gp").target, Target::Name("gp".into()));
    }

    #[test]
    fn comma_is_not_a_separator() {
        assert_eq!(ok("gpu,ndev=2").target, Target::Name("gpu,ndev=2".into()));
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
            ("gpu:ndev", "ndev=<N>"),
            ("gpu:ndev=0", "\"0\""),
            ("gpu:ndev=-1", "\"-1\""),
            ("gpu:pe=x", "\"x\""),
            ("gpu:bind", "bind=<level>"),
            ("gpu:bind=socket", "\"socket\""),
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
    fn bind_defaults() {
        assert_eq!(ok("gpu").bind_level(), BindLevel::Locality);
        assert_eq!(ok("gpu:pe=2").bind_level(), BindLevel::Core);
        assert_eq!(ok("gpu:pe=2:hwtcpus").bind_level(), BindLevel::HwThread);
        assert_eq!(ok("gpu:hwtcpus").bind_level(), BindLevel::HwThread);
        assert_eq!(ok("gpu:closest").bind_level(), BindLevel::None);
        assert_eq!(ok("gpu:pe=2:bind=numa").bind_level(), BindLevel::Numa);
    }

    #[test]
    fn canonical_text_round_trips() {
        for s in
            ["gpu", "network:interleave=numa:shared:ndev=2:pe=4:hwtcpus:bind=l3cache:verbose", "mlx5_0:closest", "none"]
        {
            let spec = ok(s);
            assert_eq!(spec.to_string(), s);
            assert_eq!(ok(&spec.to_string()), spec);
        }
        assert_eq!(ok("nic:i:s").to_string(), "network:interleave=package:shared");
    }
}
