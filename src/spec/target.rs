//! Where a spec's target ends. The qualifiers follow a `:`, but a device may be named by an
//! id that contains `:` itself: a PCI bus id (`0000:96:00.0`, or `96:00.0` without the
//! domain) or a PMIx device id (`gpu://turin-h200::nvml2`, `fab://9c63:c003:00fb:7458::...`,
//! `ipv4://00:11:22:33:44:55`, `blk://nvme0n1`), the very value the plugin writes into
//! `PMIX_DEVICE_ID`. Each of these forms has a fixed shape, so the target is read by its
//! shape and the qualifier list starts at the `:` after it; any other target (a class word,
//! an OS name, a `GPU-<uuid>`) holds no `:` and ends at the first one.

use super::SpecError;

/// The PMIx id schemes a target may use, and the shape of what follows `scheme://`.
const SCHEMES: [(&str, Shape); 5] = [
    ("gpu", Shape::HostName),
    ("fab", Shape::Guids),
    ("ipv4", Shape::HexGroups(6)),
    ("ipv6", Shape::HexGroups(20)),
    ("blk", Shape::Name),
];

#[derive(Clone, Copy)]
enum Shape {
    /// `HOST::NAME` (hwloc's host name, then the OS device name).
    HostName,
    /// `GUID::GUID`, each GUID hex groups joined by `:` (hwloc's NodeGUID, SysImageGUID).
    Guids,
    /// N two-digit hex groups joined by `:` (a MAC address).
    HexGroups(usize),
    /// An OS device name.
    Name,
}

impl Shape {
    fn expected(self) -> &'static str {
        match self {
            Shape::HostName => "gpu://HOST::NAME",
            Shape::Guids => "fab://GUID::GUID",
            Shape::HexGroups(6) => "ipv4://MAC (six hex pairs)",
            Shape::HexGroups(_) => "ipv6://ADDRESS (twenty hex pairs)",
            Shape::Name => "blk://NAME",
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.-".contains(c)
}

/// The length of the longest prefix of `s` made of name characters.
fn name_len(s: &str) -> usize {
    s.find(|c: char| !is_name_char(c)).unwrap_or(s.len())
}

/// The length of `n` hex groups of 1 to `width` digits joined by single `:`, if `s` starts
/// with them.
fn hex_groups(s: &str, n: usize, width: usize) -> Option<usize> {
    let mut at = 0;
    for i in 0..n {
        if i > 0 {
            at += s[at..].strip_prefix(':').map(|_| 1)?;
        }
        let digits = s[at..].find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(s.len() - at);
        if digits == 0 || digits > width {
            return None;
        }
        at += digits;
    }
    Some(at)
}

/// The length of what follows `scheme://` in `s`, by the scheme's shape.
fn shape_len(shape: Shape, s: &str) -> Option<usize> {
    match shape {
        Shape::HostName => {
            let host = name_len(s);
            let rest = s[host..].strip_prefix("::")?;
            let name = name_len(rest);
            (host > 0 && name > 0).then_some(host + 2 + name)
        }
        Shape::Guids => {
            let groups = s.split("::").next()?.split(':').count();
            let first = hex_groups(s, groups, 4)?;
            let second = hex_groups(s[first..].strip_prefix("::")?, groups, 4)?;
            Some(first + 2 + second)
        }
        Shape::HexGroups(n) => hex_groups(s, n, 2),
        Shape::Name => Some(name_len(s)).filter(|n| *n > 0),
    }
}

/// The length of a PCI bus id at the start of `s`: `D:BB:DD.F` (domain of 1 to 8 hex
/// digits) or `BB:DD.F`, followed by the end or a `:`.
fn busid_len(s: &str) -> Option<usize> {
    let fits = |n: usize| s[n..].is_empty() || s[n..].starts_with(':');
    let tail = |at: usize| -> Option<usize> {
        // BB:DD.F
        let bus = hex_groups(&s[at..], 2, 2)?;
        let after = &s[at + bus..];
        let function = after.strip_prefix('.')?.chars().take_while(char::is_ascii_hexdigit).count();
        (bus == 5 && function == 1).then_some(at + bus + 2)
    };
    let domain = s.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(s.len());
    if (1..=8).contains(&domain) && s[domain..].starts_with(':') {
        if let Some(n) = tail(domain + 1).filter(|n| fits(*n)) {
            return Some(n);
        }
    }
    tail(0).filter(|n| fits(*n))
}

/// Splits `text` into its target and the qualifier text after it (`None`: no qualifiers).
pub(super) fn split(text: &str) -> Result<(&str, Option<&str>), SpecError> {
    let end = match text.split_once("://") {
        Some((scheme, after)) if !scheme.contains(':') && !scheme.is_empty() => {
            let bad = |expected: String| SpecError::BadId { given: text.to_string(), expected };
            let shape = SCHEMES
                .iter()
                .find(|(s, _)| s.eq_ignore_ascii_case(scheme))
                .map(|(_, shape)| *shape)
                .ok_or_else(|| bad(format!("a PMIx id scheme: {}", schemes())))?;
            scheme.len() + 3 + shape_len(shape, after).ok_or_else(|| bad(shape.expected().to_string()))?
        }
        _ => busid_len(text).unwrap_or_else(|| text.find(':').unwrap_or(text.len())),
    };
    let (target, rest) = text.split_at(end);
    match rest.strip_prefix(':') {
        Some(qualifiers) => Ok((target, Some(qualifiers))),
        None if rest.is_empty() => Ok((target, None)),
        None => Err(SpecError::BadId {
            given: text.to_string(),
            expected: format!("the id {target:?}, then ':' and qualifiers"),
        }),
    }
}

fn schemes() -> String {
    SCHEMES.iter().map(|(_, s)| s.expected()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> (&str, Option<&str>) {
        split(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn every_id_form_ends_where_its_shape_ends() {
        for (text, target, rest) in [
            ("gpu", "gpu", None),
            ("gpu:shared", "gpu", Some("shared")),
            ("mlx5_0:bind=core", "mlx5_0", Some("bind=core")),
            (
                "GPU-0e18d434-10b9-d275-6665-5047cb2555fa:verbose",
                "GPU-0e18d434-10b9-d275-6665-5047cb2555fa",
                Some("verbose"),
            ),
            ("gpu://turin-h200::nvml2", "gpu://turin-h200::nvml2", None),
            ("gpu://turin-h200::nvml2:bind=core", "gpu://turin-h200::nvml2", Some("bind=core")),
            (
                "fab://9c63:c003:00fb:7458::9c63:c003:00fb:7458:shared",
                "fab://9c63:c003:00fb:7458::9c63:c003:00fb:7458",
                Some("shared"),
            ),
            ("ipv4://00:11:22:33:44:55:pe=2", "ipv4://00:11:22:33:44:55", Some("pe=2")),
            ("blk://nvme0n1:bind=l3cache", "blk://nvme0n1", Some("bind=l3cache")),
            ("0000:96:00.0", "0000:96:00.0", None),
            ("0000:96:00.0:shared", "0000:96:00.0", Some("shared")),
            ("96:00.0:shared", "96:00.0", Some("shared")),
            ("e6:00.0", "e6:00.0", None),
        ] {
            assert_eq!(parts(text), (target, rest), "{text}");
        }
        let v6 = format!("ipv6://{}", vec!["fe"; 20].join(":"));
        assert_eq!(parts(&format!("{v6}:verbose")), (v6.as_str(), Some("verbose")));
    }

    #[test]
    fn a_malformed_id_is_refused_naming_its_shape() {
        for (text, needle) in [
            ("gpu://host", "gpu://HOST::NAME"),
            ("gpu://::nvml0", "gpu://HOST::NAME"),
            ("fab://9c63:c003::", "fab://GUID::GUID"),
            ("ipv4://00:11:22", "six hex pairs"),
            ("http://x", "a PMIx id scheme"),
            ("gpu://h::n x", "then ':' and qualifiers"),
        ] {
            let e = split(text).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains(&format!("{text:?}")), "{text}: {e}");
        }
    }
}
