//! The house rules a reviewer would otherwise check by hand, read from the sources:
//!
//! - the modules of each crate import one another one way: the graph of `crate::` references
//!   between the engine's modules (and `map_by_device::` ones, in case a module names its own
//!   crate so) has no cycle, nor the plugin crate's (`crate::` paths, and lib.rs's own uses of
//!   its modules);
//! - no step of `plan/` imports from `plan/mod.rs`, which sequences them: what they share
//!   lives below them (`plan/types.rs`);
//! - `docs/ARCHITECTURE.md`'s floors line names every module of the engine, in import order.
//!
//! (No function over 80 lines outside tests is clippy's `too_many_lines`, set in clippy.toml.)
//!
//! The sources are read as text: comments, string and character literals and `#[cfg(test)]`
//! items are blanked first (newlines kept, so line numbers stay true), then braces are matched.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a panic is the failure report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `src` with comments and the insides of string and character literals replaced by blanks
/// (newlines kept). Lifetimes and labels (`'a`) stay.
fn blank_literals(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let keep_lines = |out: &mut String, part: &[char]| {
        out.extend(part.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && is_ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            let end = (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len());
            keep_lines(&mut out, &c[i..end]);
            i = end;
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let (mut depth, mut j) = (0, i);
            while j < c.len() {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            keep_lines(&mut out, &c[i..j.min(c.len())]);
            i = j;
        } else if !prev_ident && (c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'))) && raw_start(&c, i) {
            // r"..." r#"..."# br"..."
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            let hashes = (j..c.len()).take_while(|&k| c[k] == '#').count();
            j += hashes + 1; // past the opening quote
            let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let end = (j..c.len()).find(|&k| c[k..].starts_with(&close)).map_or(c.len(), |k| k + close.len());
            out.push('"');
            keep_lines(&mut out, &c[i + 1..end.saturating_sub(1).max(i + 1)]);
            out.push('"');
            i = end;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            out.push('"');
            keep_lines(&mut out, &c[i + 1..j.min(c.len())]);
            out.push('"');
            i = j + 1;
        } else if c[i] == '\'' && (!prev_ident || (c[i - 1] == 'b' && (i < 2 || !is_ident(c[i - 2])))) {
            // A character literal ('x', '\n', '\u{7f}', '{'), or a lifetime or label ('a).
            let end = if c.get(i + 1) == Some(&'\\') {
                (i + 2..c.len()).find(|&k| c[k] == '\'').map(|k| k + 1)
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push_str("' '");
                    i = end;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Whether a raw string literal starts at `i` (`r"`, `r#"`, `br"`...).
fn raw_start(c: &[char], i: usize) -> bool {
    let mut j = i + if c[i] == 'b' { 2 } else { 1 };
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    c.get(j) == Some(&'"')
}

/// The index of the brace that closes the one at `open`.
fn closing(text: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &ch) in text.iter().enumerate().skip(open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces")
}

/// `text` (already without literals) with every `#[cfg(test)]` item blanked: the module,
/// function or impl that follows the attribute, up to its closing brace or `;`.
fn blank_test_items(text: &str) -> String {
    let mut c: Vec<char> = text.chars().collect();
    let pattern: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + pattern.len() <= c.len() {
        if c[i..i + pattern.len()] != pattern[..] {
            i += 1;
            continue;
        }
        let next = (i..c.len()).find(|&k| c[k] == '{' || c[k] == ';').unwrap_or(c.len() - 1);
        let end = if c[next] == '{' { closing(&c, next) } else { next };
        for ch in &mut c[i..=end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = end + 1;
    }
    c.into_iter().collect()
}

/// A source file as the rules read it: no literals, no comments, no test items.
fn code(path: &Path) -> String {
    let src = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    blank_test_items(&blank_literals(&src))
}

#[test]
fn the_reader_sees_through_literals_and_test_items() {
    let src = r####"
fn short() {
    let s = "}}} fn fake() {";
    let r = r#"{ "quoted" }"#;
    let c = ['{', '\'', '}'];
    // fn commented() {
    let l: &'static str = "x";
}
#[cfg(test)]
mod tests {
    fn in_tests() {
    }
}
fn after() {
    /* { nested /* } */ { */
}
"####;
    let text = blank_test_items(&blank_literals(src));
    assert_eq!(text.lines().count(), src.lines().count(), "lines are kept");
    for gone in ["fake", "quoted", "commented", "in_tests", "nested"] {
        assert!(!text.contains(gone), "{gone} is still in:\n{text}");
    }
    assert!(text.contains("fn short()") && text.contains("fn after()") && text.contains("'static"), "{text}");
}

/// A crate's modules and which others each one names: `crate::m` (and `NAME::m` for the
/// crate's own name, `map_by_device` for the engine) in a module's files, and, for the crate
/// root `lib`, `m::` paths of its own modules; a `crate::item` that is no module is the root's.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let own_name = if src.ends_with("spank/src") { "map_by_device_spank::" } else { "map_by_device::" };
    let lib = code(&src.join("lib.rs"));
    // The modules lib.rs declares outside test items (a `#[cfg(test)] mod x;` is blanked).
    let modules: BTreeSet<String> = lib
        .split(';')
        .filter_map(|s| {
            // The statement's last line: `pub mod x` after attributes and blank lines.
            let s = s.trim().lines().last()?.trim();
            s.strip_prefix("pub mod ").or_else(|| s.strip_prefix("mod ")).map(|m| m.trim().to_string())
        })
        .filter(|m| m.chars().all(is_ident))
        .collect();
    assert!(modules.len() >= 5, "{}: modules {modules:?}", src.display());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    for path in files {
        let rel = path.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        let module = rel.split(['/', '.']).next().unwrap().to_string();
        let is_root = rel == "lib.rs";
        if !is_root && !modules.contains(&module) {
            continue; // a test-only module (test_support) or another target (bin/)
        }
        let text = code(&path);
        let from = if is_root { "lib".to_string() } else { module.clone() };
        let edges = graph.entry(from.clone()).or_default();
        for prefix in ["crate::", own_name] {
            for part in text.split(prefix).skip(1) {
                let name: String = part.chars().take_while(|&ch| is_ident(ch)).collect();
                let to = if modules.contains(&name) { name } else { "lib".to_string() };
                if to != from {
                    edges.insert(to);
                }
            }
        }
        if is_root {
            // `step::Step`, not `map_by_device::step::...` nor `other_step::...`.
            let own_path = |m: &str| {
                text.match_indices(&format!("{m}::")).any(|(k, _)| {
                    let before = &text[..k];
                    !before.ends_with("::") && !before.chars().next_back().is_some_and(is_ident)
                })
            };
            edges.extend(modules.iter().filter(|m| own_path(m)).cloned());
        }
    }
    graph
}

/// A cycle of `graph`, as the modules along it, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    assert_eq!(cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    assert_eq!(
        cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn module_imports_run_one_way() {
    for src in ["src", "spank/src"] {
        let graph = import_graph(&root().join(src));
        assert!(graph.values().map(BTreeSet::len).sum::<usize>() >= 5, "{src}: too few imports found: {graph:?}");
        if let Some(found) = cycle(&graph) {
            panic!("{src}: modules import each other: {} (move what both need below them)", found.join(" -> "));
        }
    }
}

#[test]
fn the_architecture_floors_name_every_engine_module() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let floors = doc.split("Floors, bottom up:").nth(1).and_then(|s| s.split("Imports run one way").next());
    let floors = floors.expect("docs/ARCHITECTURE.md has no \"Floors, bottom up: ... Imports run one way\" line");
    let named: BTreeSet<String> =
        floors.split('`').skip(1).step_by(2).map(|n| n.trim_end_matches('/').to_string()).collect();
    let graph = import_graph(&root().join("src"));
    for module in graph.keys().filter(|m| *m != "lib") {
        assert!(named.contains(module), "docs/ARCHITECTURE.md's floors line does not name the module {module}");
    }
    for name in &named {
        assert!(
            graph.contains_key(name) || ["spank", "discover", "bin"].contains(&name.as_str()),
            "docs/ARCHITECTURE.md's floors line names {name}, which is no module of the engine"
        );
    }
    // A module imports only modules of lower floors: the line is the order.
    let mut floor_of = BTreeMap::new();
    for (k, floor) in floors.split('→').enumerate() {
        for name in floor.split('`').skip(1).step_by(2) {
            floor_of.insert(name.trim_end_matches('/').to_string(), k);
        }
    }
    for (from, tos) in graph.iter().filter(|(m, _)| *m != "lib") {
        let f = floor_of[from];
        for to in tos {
            let t = floor_of.get(to).copied().unwrap_or(usize::MAX);
            assert!(t < f, "{from} (floor {f}) imports {to} (floor {t}): fix docs/ARCHITECTURE.md's floors line");
        }
    }
}

/// The steps of `plan/` take the previous one's output and share the plan's types; none
/// imports from `mod.rs` (`super::Item`), which sequences them: only siblings (`super::m::`).
#[test]
fn no_step_of_the_plan_imports_its_sequence() {
    let dir = root().join("src/plan");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let siblings: BTreeSet<String> =
        files.iter().filter_map(|f| Some(f.file_stem()?.to_str()?.to_string())).filter(|m| m != "mod").collect();
    assert!(siblings.len() >= 5, "{siblings:?}");
    for path in files.iter().filter(|f| !f.ends_with("mod.rs")) {
        let text = code(path);
        for part in text.split("super::").skip(1) {
            // `super::m::X`, or each path of `super::{m::X, n::Y}`.
            let group = part.strip_prefix('{').map(|g| g.split('}').next().unwrap_or(""));
            for item in group.map_or(vec![part], |g| g.split(',').collect()) {
                let name: String = item.trim_start().chars().take_while(|&ch| is_ident(ch)).collect();
                assert!(
                    siblings.contains(&name),
                    "{} imports super::{name} from plan/mod.rs: move what the steps share into plan/types.rs",
                    path.display()
                );
            }
        }
    }
}
