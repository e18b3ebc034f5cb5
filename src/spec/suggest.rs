//! "Did you mean": the nearest word of a list to a word that matched none of it, so that a
//! refusal can name the next keystroke (`ndev2` → `ndev=2`, `shard` → `shared`,
//! `gpus` → `gpu`). Only close words are offered; a guess is never applied.

/// Edit distance (insertions, deletions, substitutions, and swaps of two neighbours), ASCII
/// case-insensitive, giving up above `limit`.
fn distance(a: &str, b: &str, limit: usize) -> Option<usize> {
    let (a, b): (Vec<u8>, Vec<u8>) = (a.to_ascii_lowercase().into_bytes(), b.to_ascii_lowercase().into_bytes());
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    // Three rows of the Damerau-Levenshtein table (optimal string alignment).
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                cur[j] = cur[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut prev, cur);
    }
    let d = prev[b.len()];
    (d <= limit).then_some(d)
}

/// The one word of `candidates` nearest to `word` (at most 2 edits, and fewer than half its
/// letters), or `None` when none is that close or two are equally close.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    nearest_within(word, candidates, 2.min(word.len().saturating_sub(1) / 2).max(1))
}

/// The one word of `candidates` at most `limit` edits from `word` (fewer than any other),
/// or `None`.
pub fn nearest_within<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>, limit: usize) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    let mut tie = false;
    for c in candidates {
        let Some(d) = distance(word, c, limit) else { continue };
        match best {
            Some((bd, _)) if d > bd => {}
            Some((bd, _)) if d == bd => tie = true,
            _ => {
                best = Some((d, c));
                tie = false;
            }
        }
    }
    best.filter(|_| !tie).map(|(_, c)| c)
}

/// For a word that names no qualifier: a word that runs a qualifier into its value
/// (`ndev2`, `bind-core`, `pe_4`) becomes `name=value`; a misspelt one its nearest name
/// (with the value that was given). `takes_value` says which names take one.
pub fn qualifier(word: &str, value: Option<&str>, names: &[(&str, bool)]) -> Option<String> {
    let lower = word.to_ascii_lowercase();
    // The longest name the word starts with, followed by more text.
    let run_in = names
        .iter()
        .filter(|(n, takes)| *takes && lower.len() > n.len() && lower.starts_with(n))
        .max_by_key(|(n, _)| n.len());
    if let (Some((name, _)), None) = (run_in, value) {
        let rest = lower[name.len()..].trim_start_matches(['-', '_', ' ']);
        if !rest.is_empty() {
            return Some(format!("{name}={rest}"));
        }
    }
    let name = nearest(&lower, names.iter().map(|(n, _)| *n))?;
    let takes = names.iter().any(|(n, t)| *n == name && *t);
    Some(match value {
        Some(v) if takes => format!("{name}={v}"),
        _ => name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_words_only() {
        let words = ["interleave", "shared", "ndev", "compact", "ppr", "pe", "closest", "verbose"];
        assert_eq!(nearest("shard", words), Some("shared"));
        assert_eq!(nearest("intreleave", words), Some("interleave"));
        assert_eq!(nearest("verbos", words), Some("verbose"));
        assert_eq!(nearest("gpus", ["gpu", "network", "nic", "block"]), Some("gpu"));
        assert_eq!(nearest("blcok", ["gpu", "network", "nic", "block"]), Some("block"));
        // Far, or as near to two words: nothing.
        assert_eq!(nearest("bogus", words), None);
        assert_eq!(nearest("px", ["pe", "pr"]), None);
        assert_eq!(nearest("mlx5_0", ["gpu", "network", "nic", "block"]), None);
    }

    #[test]
    fn a_qualifier_run_into_its_value() {
        let names = [("ndev", true), ("ppr", true), ("pe", true), ("bind", true), ("verbose", false)];
        assert_eq!(qualifier("ndev2", None, &names).as_deref(), Some("ndev=2"));
        assert_eq!(qualifier("bind-core", None, &names).as_deref(), Some("bind=core"));
        assert_eq!(qualifier("ppr4", None, &names).as_deref(), Some("ppr=4"));
        assert_eq!(qualifier("nedv", Some("2"), &names).as_deref(), Some("ndev=2"));
        assert_eq!(qualifier("verbsoe", None, &names).as_deref(), Some("verbose"));
        // A value for a word that takes none is not offered back.
        assert_eq!(qualifier("verbsoe", Some("1"), &names).as_deref(), Some("verbose"));
        assert_eq!(qualifier("bogus", None, &names), None);
    }
}
