//! Which Slurm release a plugin file was built for, and which one a node runs: a SPANK plugin
//! loads only into the release (major.minor) it was built for. Slurm reads the plugin's
//! `plugin_version` symbol and refuses any other major.minor ("Incompatible Slurm plugin ...
//! version", `src/common/plugin.c`), so every srun on a node with the wrong build fails.
//! `map-by-device check` reads the same symbol from the installed file and compares it with
//! the node's Slurm before Slurm does.
//!
//! Pure: callers hand in the file's bytes and the version text they read. The ELF reader
//! knows only what it needs (64-bit little-endian shared objects: x86-64, aarch64): the
//! dynamic symbol table, one symbol's value, and the section it lives in.

use std::fmt;

/// A Slurm version as `SLURM_VERSION_NUMBER` encodes it: `(major << 16) | (minor << 8) | micro`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlurmVersion(pub u32);

impl SlurmVersion {
    pub fn major(self) -> u32 {
        self.0 >> 16 & 0xff
    }
    pub fn minor(self) -> u32 {
        self.0 >> 8 & 0xff
    }
    pub fn micro(self) -> u32 {
        self.0 & 0xff
    }

    /// `22.05`: what Slurm compares when it loads a SPANK plugin.
    pub fn series(self) -> String {
        format!("{}.{:02}", self.major(), self.minor())
    }

    /// Whether a SPANK plugin declaring `self` loads into a Slurm of version `other`.
    pub fn same_series(self, other: SlurmVersion) -> bool {
        self.0 & 0x00ff_ff00 == other.0 & 0x00ff_ff00
    }

    /// Reads the last word of `slurmd -V` / `srun --version` output: `slurm 24.11.5`,
    /// `slurm-wlm 22.05.8` (Debian), `slurm 23.11.10-1` (a packager's suffix is ignored).
    pub fn from_version_output(text: &str) -> Option<SlurmVersion> {
        let word = text.split_whitespace().find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))?;
        let mut parts = word.split(['.', '-']).map(|p| p.parse::<u32>());
        let (major, minor, micro) = (parts.next()?.ok()?, parts.next()?.ok()?, parts.next().and_then(Result::ok));
        if major > 255 || minor > 255 {
            return None;
        }
        Some(SlurmVersion(major << 16 | minor << 8 | micro.unwrap_or(0).min(255)))
    }
}

impl fmt::Display for SlurmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}.{}", self.major(), self.minor(), self.micro())
    }
}

/// Why a symbol could not be read from a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file")]
    NotElf,
    #[error("not a 64-bit little-endian ELF file (only those are read)")]
    Unsupported,
    #[error("truncated or malformed ELF file ({0})")]
    Malformed(&'static str),
    #[error("no exported symbol {0}")]
    NoSymbol(String),
}

const SHT_DYNSYM: u32 = 11;
const SHT_NOBITS: u32 = 8;
const SHDR_SIZE: usize = 64;
const SYM_SIZE: usize = 24;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}
fn usize_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64_at(b, at)?).ok()
}

/// One section header: (type, address, file offset, size, link, entry size).
struct Section {
    kind: u32,
    addr: u64,
    offset: usize,
    size: usize,
    link: usize,
    entsize: usize,
}

fn section(b: &[u8], index: usize) -> Result<Section, ElfError> {
    let bad = ElfError::Malformed("section header");
    let shoff = usize_at(b, 0x28).ok_or(bad.clone())?;
    let shnum = usize::from(u16_at(b, 0x3c).ok_or(bad.clone())?);
    if index >= shnum || usize::from(u16_at(b, 0x3a).ok_or(bad.clone())?) != SHDR_SIZE {
        return Err(bad);
    }
    let at = index.checked_mul(SHDR_SIZE).and_then(|o| o.checked_add(shoff)).ok_or(bad.clone())?;
    Ok(Section {
        kind: u32_at(b, at + 4).ok_or(bad.clone())?,
        addr: u64_at(b, at + 0x10).ok_or(bad.clone())?,
        offset: usize_at(b, at + 0x18).ok_or(bad.clone())?,
        size: usize_at(b, at + 0x20).ok_or(bad.clone())?,
        link: usize::try_from(u32_at(b, at + 0x28).ok_or(bad.clone())?).map_err(|_| bad.clone())?,
        entsize: usize_at(b, at + 0x38).ok_or(bad)?,
    })
}

/// The value of the exported 4-byte data symbol `name` of a shared object (`plugin_version`).
pub fn exported_u32(bytes: &[u8], name: &str) -> Result<u32, ElfError> {
    match symbol_offset(bytes, name)? {
        Some(at) => u32_at(bytes, at).ok_or(ElfError::Malformed("symbol value")),
        None => Ok(0),
    }
}

/// Where in the file the exported data symbol `name` is stored; `None` for a zero-initialised
/// one (`.bss`, not in the file).
pub fn symbol_offset(bytes: &[u8], name: &str) -> Result<Option<usize>, ElfError> {
    if bytes.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(ElfError::NotElf);
    }
    if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err(ElfError::Unsupported);
    }
    let shnum = usize::from(u16_at(bytes, 0x3c).ok_or(ElfError::Malformed("header"))?);
    let dynsym = (0..shnum)
        .map(|i| section(bytes, i))
        .find(|s| s.as_ref().map_or(true, |s| s.kind == SHT_DYNSYM))
        .ok_or_else(|| ElfError::NoSymbol(name.to_string()))??;
    let strtab = section(bytes, dynsym.link)?;
    if dynsym.entsize != SYM_SIZE {
        return Err(ElfError::Malformed("symbol size"));
    }
    let table =
        bytes.get(dynsym.offset..dynsym.offset.saturating_add(dynsym.size)).ok_or(ElfError::Malformed("symbols"))?;
    let strings =
        bytes.get(strtab.offset..strtab.offset.saturating_add(strtab.size)).ok_or(ElfError::Malformed("strings"))?;
    for sym in table.chunks_exact(SYM_SIZE) {
        let name_at = usize::try_from(u32_at(sym, 0).unwrap_or(0)).unwrap_or(usize::MAX);
        let Some(rest) = strings.get(name_at..) else { continue };
        if rest.split(|&c| c == 0).next() != Some(name.as_bytes()) {
            continue;
        }
        let shndx = usize::from(u16_at(sym, 6).ok_or(ElfError::Malformed("symbol"))?);
        let value = u64_at(sym, 8).ok_or(ElfError::Malformed("symbol"))?;
        if shndx == 0 {
            continue; // an undefined reference, not the definition
        }
        let home = section(bytes, shndx)?;
        if home.kind == SHT_NOBITS {
            return Ok(None);
        }
        let at = value
            .checked_sub(home.addr)
            .and_then(|d| usize::try_from(d).ok())
            .and_then(|d| d.checked_add(home.offset))
            .ok_or(ElfError::Malformed("symbol address"))?;
        return Ok(Some(at));
    }
    Err(ElfError::NoSymbol(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_text() {
        let v = SlurmVersion::from_version_output("slurm-wlm 22.05.8\n").unwrap();
        assert_eq!((v, v.series(), v.to_string()), (SlurmVersion(0x160508), "22.05".into(), "22.05.8".into()));
        assert_eq!(SlurmVersion::from_version_output("slurm 24.11.5"), Some(SlurmVersion(0x180b05)));
        assert_eq!(SlurmVersion::from_version_output("slurm 26.05.5-1"), Some(SlurmVersion(0x1a0505)));
        assert_eq!(SlurmVersion::from_version_output("slurm 25.05"), Some(SlurmVersion(0x190500)));
        assert_eq!(SlurmVersion::from_version_output("slurmd: fatal: no config"), None);
        assert_eq!(SlurmVersion::from_version_output("slurm 300.1.0"), None);
    }

    #[test]
    fn series_compare_major_and_minor_only() {
        let built = SlurmVersion(0x180b05);
        assert!(built.same_series(SlurmVersion(0x180b07)));
        assert!(!built.same_series(SlurmVersion(0x1a0505)));
        assert!(!SlurmVersion(0x160508).same_series(SlurmVersion(0x170508)));
    }

    #[test]
    fn not_elf_or_not_64_bit() {
        assert_eq!(exported_u32(b"#!/bin/sh\n", "plugin_version"), Err(ElfError::NotElf));
        assert_eq!(exported_u32(b"\x7fELF\x01\x01\x01", "plugin_version"), Err(ElfError::Unsupported));
        assert!(matches!(exported_u32(b"\x7fELF\x02\x01\x01", "plugin_version"), Err(ElfError::Malformed(_))));
    }

    /// This test binary is an ELF file too: its own dynamic symbols are readable, and a name
    /// that is not among them is reported as such (no panic on any real file).
    #[test]
    fn reads_a_real_elf_file_without_panicking() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(matches!(exported_u32(&me, "no_such_symbol_here"), Err(ElfError::NoSymbol(_))));
        // Every truncation of a real file is an error, never a panic.
        for len in [0, 16, 63, 64, 200, me.len() / 2] {
            assert!(exported_u32(&me[..len], "plugin_version").is_err());
        }
    }
}
