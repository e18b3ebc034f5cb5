//! Sets of CPUs (hwloc PU OS indexes, the numbers `sched_setaffinity` takes), and the
//! Linux cpulist text form (`0-3,8`) that Slurm, `/proc/self/status` and the CLI use.
//!
//! The engine keeps its own small bitset rather than hwloc's `Bitmap` so that everything
//! below the topology loader stays pure data: comparable, hashable, cheap to clone and
//! free of FFI.

use std::fmt;
use std::str::FromStr;

/// A set of CPU numbers. Canonical form: no trailing zero words, so `==` is set equality.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// A cpulist that could not be read; keeps the text and says what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU list {text:?}: {reason} (expected a Linux cpulist such as 0-3,8)")]
pub struct CpuListError {
    pub text: String,
    pub reason: String,
}

/// The largest CPU number accepted from text; keeps a typo like `0-99999999` from
/// allocating gigabytes.
pub const MAX_CPU: u32 = 1 << 20;

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// A set holding the one CPU `cpu`.
    pub fn single(cpu: u32) -> Self {
        let mut s = Self::new();
        s.insert(cpu);
        s
    }

    pub fn insert(&mut self, cpu: u32) {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    /// Adds `lo..=hi` a word at a time, so that a wide range (`0-1048576`) costs what its
    /// bitmap costs rather than one insert per CPU.
    pub fn insert_range(&mut self, lo: u32, hi: u32) {
        if lo > hi {
            return;
        }
        let (first, last) = ((lo / 64) as usize, (hi / 64) as usize);
        if self.words.len() <= last {
            self.words.resize(last + 1, 0);
        }
        for w in first..=last {
            let low_bit = if w == first { lo % 64 } else { 0 };
            let high_bit = if w == last { hi % 64 } else { 63 };
            let mask = (u64::MAX >> (63 - high_bit)) & (u64::MAX << low_bit);
            self.words[w] |= mask;
        }
    }

    pub fn contains(&self, cpu: u32) -> bool {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words
            .iter()
            .enumerate()
            .flat_map(|(i, &word)| (0..64u32).filter(move |b| word & (1u64 << b) != 0).map(move |b| i as u32 * 64 + b))
    }

    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words.iter().enumerate().all(|(i, w)| w & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    /// `self` contains `other` and something more.
    pub fn is_strict_superset(&self, other: &CpuSet) -> bool {
        other.is_subset(self) && self != other
    }

    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let words = self.words.iter().zip(&other.words).map(|(a, b)| a & b).collect();
        Self::trimmed(words)
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| self.words.get(i).copied().unwrap_or(0) | other.words.get(i).copied().unwrap_or(0))
            .collect();
        Self::trimmed(words)
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let words = self.words.iter().enumerate().map(|(i, a)| a & !other.words.get(i).copied().unwrap_or(0)).collect();
        Self::trimmed(words)
    }

    fn trimmed(mut words: Vec<u64>) -> CpuSet {
        while words.last() == Some(&0) {
            words.pop();
        }
        CpuSet { words }
    }

    /// Reads a Linux cpulist: comma-separated numbers and ranges `a-b`, blanks around
    /// entries tolerated, an empty string is the empty set.
    pub fn parse_list(text: &str) -> Result<CpuSet, CpuListError> {
        let err = |reason: String| CpuListError { text: text.to_string(), reason };
        let mut set = CpuSet::new();
        for part in text.trim().split(',').map(str::trim) {
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(err("empty entry".into()));
            }
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let num = |s: &str| -> Result<u32, CpuListError> {
                let n: u32 = s.parse().map_err(|_| err(format!("{s:?} is not a CPU number")))?;
                if n > MAX_CPU {
                    return Err(err(format!("CPU {n} is larger than {MAX_CPU}")));
                }
                Ok(n)
            };
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(err(format!("range {part:?} runs backwards")));
            }
            set.insert_range(lo, hi);
        }
        Ok(set)
    }

    /// The cpulist text, with ranges folded (`0-3,8`); the empty set is `""`.
    pub fn to_list(&self) -> String {
        let mut out = String::new();
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !out.is_empty() {
                out.push(',');
            }
            if start == end {
                out.push_str(&start.to_string());
            } else {
                out.push_str(&format!("{start}-{end}"));
            }
        }
        out
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for cpu in iter {
            s.insert(cpu);
        }
        s
    }
}

impl FromStr for CpuSet {
    type Err = CpuListError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse_list(s)
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list())
    }
}

/// Serializes a type as its `Display` text and reads it back with `FromStr`, so cached
/// topologies stay readable (`"0-3,8"`, `"0000:06:00.0"`).
macro_rules! serde_as_text {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use serde_as_text;

serde_as_text!(CpuSet);

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_ranges() {
        let s = CpuSet::parse_list("16-31, 144-159,3").unwrap();
        assert_eq!(s.len(), 33);
        assert_eq!(s.to_list(), "3,16-31,144-159");
        assert_eq!(CpuSet::parse_list("").unwrap(), CpuSet::new());
    }

    #[test]
    fn refuses_bad_lists_naming_them() {
        for bad in ["a", "3-1", "1,,2", "0-99999999", "-1"] {
            let e = CpuSet::parse_list(bad).unwrap_err();
            assert_eq!(e.text, bad);
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn set_algebra_is_canonical() {
        let a: CpuSet = [1, 200].into_iter().collect();
        let b: CpuSet = [1].into_iter().collect();
        assert_eq!(a.intersection(&b), b);
        assert_eq!(a.difference(&CpuSet::single(200)), b);
        assert!(a.is_strict_superset(&b));
        assert!(!b.is_strict_superset(&b));
        assert!(b.is_subset(&a));
        assert!(CpuSet::new().is_subset(&b));
    }

    #[test]
    fn serializes_as_cpulist_text() {
        let s = CpuSet::parse_list("0-3,8").unwrap();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, "\"0-3,8\"");
        assert_eq!(serde_json::from_str::<CpuSet>(&json).unwrap(), s);
        assert!(serde_json::from_str::<CpuSet>("\"3-1\"").is_err());
    }

    #[test]
    fn wide_ranges_are_cheap_and_exact() {
        let s = CpuSet::parse_list("63-65,128-191,1048576").unwrap();
        assert_eq!(s.len(), 3 + 64 + 1);
        assert_eq!(s.to_list(), "63-65,128-191,1048576");
        let mut t = CpuSet::new();
        t.insert_range(5, 5);
        assert_eq!(t, CpuSet::single(5));
        t.insert_range(9, 3);
        assert_eq!(t, CpuSet::single(5));
    }

    proptest! {
        #[test]
        fn ranges_match_single_inserts(lo in 0u32..700, len in 0u32..300) {
            let mut a = CpuSet::new();
            a.insert_range(lo, lo + len);
            let b: CpuSet = (lo..=lo + len).collect();
            prop_assert_eq!(a, b);
        }

        #[test]
        fn list_round_trips(cpus in proptest::collection::btree_set(0u32..600, 0..80)) {
            let s: CpuSet = cpus.iter().copied().collect();
            prop_assert_eq!(CpuSet::parse_list(&s.to_list()).unwrap(), s.clone());
            prop_assert_eq!(s.iter().collect::<Vec<_>>(), cpus.into_iter().collect::<Vec<_>>());
        }
    }
}
