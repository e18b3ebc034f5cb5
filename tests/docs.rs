//! The documentation stays true: every `$ map-by-device ...` line in a ```` ```console ````
//! block of the README and `docs/*.md` is run, from the repository root, and its output
//! (standard output, then standard error) must be the lines that follow it in the block, up
//! to the next `$ ` line. A line `...` in the expected output stands for any number of lines.
//! Other commands in console blocks (`srun`, `sbatch`) are not run here: the end-to-end and
//! package suites run them on a real Slurm.
//!
//! A documented command with `--svg docs/pictures/NAME.svg` draws into a temporary file
//! instead, which must be byte for byte the committed picture: a renderer change that is not
//! regenerated fails here (rerun the command from the repository root to regenerate). Every
//! picture in `docs/pictures/` is drawn by a documented command and shown by a doc.
//!
//! Also checked: every variable the engine can write has a section in `docs/variables.md`
//! and appears in `map-by-device(8)`; every qualifier appears in both man pages' sources;
//! every subcommand and flag of the CLI appears in `map-by-device(1)`; every key of the
//! config file appears in `map-by-device(8)`, the admin guide and every example config.
//!
//! When a behaviour changes on purpose, run the command and paste its output into the doc.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a panic is the failure report.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_map-by-device");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Splits a command line like a shell would for the simple cases the docs use: blanks,
/// single and double quotes, backslash-newline continuations already joined.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// One documented command and the output shown for it.
struct Example {
    file: String,
    line: usize,
    command: String,
    expected: Vec<String>,
}

fn examples(rel: &str) -> Vec<Example> {
    let text = read(rel);
    let mut out = Vec::new();
    let mut in_console = false;
    // A block inside a list item is indented: its lines lose the fence's indentation.
    let mut indent = 0;
    let mut current: Option<Example> = None;
    let mut pending = String::new(); // a command continued with '\'
    let mut pending_line = 0;
    for (i, raw) in text.lines().enumerate() {
        if raw.trim_start().starts_with("```") {
            if in_console {
                out.extend(current.take());
            }
            in_console = raw.trim() == "```console";
            indent = raw.len() - raw.trim_start().len();
            continue;
        }
        if !in_console {
            continue;
        }
        let line = raw.get(indent..).filter(|_| raw[..indent].trim().is_empty()).unwrap_or(raw);
        if !pending.is_empty() {
            let part = line.trim();
            match part.strip_suffix('\\') {
                Some(more) => pending.push_str(more),
                None => {
                    pending.push_str(part);
                    current = Some(Example {
                        file: rel.into(),
                        line: pending_line,
                        command: std::mem::take(&mut pending),
                        expected: vec![],
                    });
                }
            }
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.extend(current.take());
            if !cmd.starts_with("map-by-device ") {
                continue; // srun, sbatch ...: not run here
            }
            match cmd.strip_suffix('\\') {
                Some(start) => {
                    pending = start.to_string();
                    pending_line = i + 1;
                }
                None => {
                    current =
                        Some(Example { file: rel.into(), line: i + 1, command: cmd.to_string(), expected: vec![] })
                }
            }
        } else if let Some(ex) = current.as_mut() {
            ex.expected.push(line.to_string());
        }
    }
    out
}

/// Whether `actual` matches `expected`, where a `...` line matches any run of lines.
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e.trim() == "..." => (0..=actual.len()).any(|k| matches(rest, &actual[k..])),
        Some((e, rest)) => actual.first().is_some_and(|a| a == e) && matches(rest, &actual[1..]),
    }
}

fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    docs.sort();
    files.extend(docs);
    files.retain(|f| Path::new(&root().join(f)).exists());
    files
}

/// Why `check --config FILE` cannot show the documented output from this checkout, if it
/// cannot: the plugin reads its config file only where root may trust it (root's, in
/// directories only root can write), and `check` adds a note saying so to the settings it
/// reads from the draft. A checkout under `/tmp` or owned by a user is such a place; the
/// commands run from any other.
fn untrusted_checkout() -> Option<String> {
    let file = root().join("map-by-device.toml.example");
    map_by_device::trusted_fs::read_file(&file, 1 << 20).err().map(|e| {
        format!(
            "the plugin would not read a config file from this checkout: {e}; clone it under a root-owned directory"
        )
    })
}

#[test]
fn documented_commands_print_what_the_docs_show() {
    let mut failures = Vec::new();
    let mut count = 0;
    let untrusted = untrusted_checkout();
    for file in doc_files() {
        for ex in examples(&file) {
            count += 1;
            let mut args = words(&ex.command);
            if let (Some(why), true) = (&untrusted, args.iter().any(|a| a == "--config")) {
                common::skip_line(&format!("{}:{}: `$ {}` ({why})", ex.file, ex.line, ex.command));
                continue;
            }
            // --svg PATH: draw into a temporary file, compared with the committed PATH below.
            let picture = args.iter().position(|a| a == "--svg").and_then(|i| args.get(i + 1).map(|_| i + 1));
            let drawn = std::env::temp_dir().join(format!("mbd-docs-{}-{count}.svg", std::process::id()));
            let committed = picture.map(|i| std::mem::replace(&mut args[i], drawn.display().to_string()));
            let out = Command::new(BIN)
                .args(&args[1..])
                .current_dir(root())
                .env_remove("SLURM_CONF")
                .env_remove("ZE_FLAT_DEVICE_HIERARCHY")
                .output()
                .unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let actual: Vec<&str> = text.lines().collect();
            if let Some(committed) = committed {
                let now = std::fs::read(&drawn).unwrap_or_default();
                let _ = std::fs::remove_file(&drawn);
                if std::fs::read(root().join(&committed)).ok() != Some(now) {
                    failures.push(format!(
                        "{}:{}: {committed} is not what `$ {}` draws now: run it from the repository root",
                        ex.file, ex.line, ex.command
                    ));
                }
            }
            let mut expected = ex.expected.clone();
            while expected.last().is_some_and(|l| l.trim().is_empty()) {
                expected.pop();
            }
            if !matches(&expected, &actual) {
                failures.push(format!(
                    "{}:{}: $ {}\n--- documented:\n{}\n--- actual:\n{}",
                    ex.file,
                    ex.line,
                    ex.command,
                    expected.join("\n"),
                    text.trim_end()
                ));
            }
        }
    }
    assert!(count > 0, "no documented commands found");
    assert!(
        failures.is_empty(),
        "{} of {count} documented commands differ:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_picture_is_drawn_by_a_documented_command_and_shown() {
    let mut drawn = Vec::new();
    let mut text = String::new();
    for file in doc_files() {
        text.push_str(&read(&file));
        for ex in examples(&file) {
            let args = words(&ex.command);
            if let Some(i) = args.iter().position(|a| a == "--svg") {
                drawn.push(args.get(i + 1).cloned().unwrap_or_default());
            }
        }
    }
    let mut pictures: Vec<String> = std::fs::read_dir(root().join("docs/pictures"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| format!("docs/pictures/{}", e.file_name().to_string_lossy()))
        .collect();
    pictures.sort();
    assert!(pictures.len() >= 3, "{pictures:?}");
    for p in &pictures {
        assert!(drawn.contains(p), "{p} is drawn by no documented command (a stale picture?)");
        let link = format!("]({})", p.trim_start_matches("docs/"));
        assert!(text.contains(&link), "no doc shows {p} (expected an image link {link})");
    }
    for d in &drawn {
        assert!(pictures.contains(d), "a documented command draws {d}, which is not committed");
    }
}

/// The user guide's "Coming from Open MPI" table is what the engine says: each Open MPI
/// spelling in its first column is refused naming every equivalent in its second, and each
/// equivalent spec has its preview in the section (issue 24).
#[test]
fn the_open_mpi_table_is_what_the_engine_says() {
    let guide = read("docs/user-guide.md");
    let section = guide
        .split("## Coming from Open MPI `--map-by`")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/user-guide.md has a \"Coming from Open MPI `--map-by`\" section");
    let spans = |cell: &str| cell.split('`').skip(1).step_by(2).map(str::to_string).collect::<Vec<String>>();
    let previews: Vec<String> = examples("docs/user-guide.md")
        .into_iter()
        .filter(|ex| section.contains(&ex.command))
        .filter_map(|ex| words(&ex.command).last().cloned())
        .collect();
    let mut rows = 0;
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let (open_mpi, ours) = (spans(cells[0]), spans(cells[1]));
        assert!(!open_mpi.is_empty() && !ours.is_empty(), "{row}");
        for given in &open_mpi {
            let given = given.trim_start_matches("--map-by ");
            let e = map_by_device::spec::Spec::parse(given).expect_err(given).to_string();
            assert!(e.contains("Open MPI's --map-by spelling"), "{given}: {e}");
            for want in &ours {
                assert!(e.contains(want.as_str()), "{given}: the table says {want}, the engine says {e}");
            }
            assert!(previews.iter().any(|p| p == given), "no preview of {given} in the section");
        }
        for spec in ours.iter().filter(|w| !w.starts_with('-')) {
            assert!(previews.contains(spec), "no preview of {spec} in the section");
        }
        rows += 1;
    }
    assert!(rows >= 6, "{rows} rows");
}

#[test]
fn every_variable_is_documented() {
    let variables = read("docs/variables.md");
    let man8 = read("docs/man/map-by-device.8");
    for name in map_by_device::env::all_names() {
        assert!(variables.contains(&format!("\n## {name}\n")), "docs/variables.md has no section for {name}");
        assert!(man8.contains(name), "map-by-device(8) does not mention {name}");
    }
}

#[test]
fn every_qualifier_and_flag_is_in_the_man_pages() {
    let man1 = read("docs/man/map-by-device.1").replace("\\-", "-");
    let man8 = read("docs/man/map-by-device.8").replace("\\-", "-");
    // The engine's own list of qualifiers, from the message that refuses an unknown one.
    let e = map_by_device::spec::Spec::parse("gpu:no_such_qualifier").unwrap_err().to_string();
    let list = e.split("expected one of ").nth(1).unwrap_or_else(|| panic!("no qualifier list in {e:?}"));
    let qualifiers: Vec<&str> = list.split(", ").map(str::trim).collect();
    assert!(qualifiers.len() >= 11 && qualifiers.contains(&"ppr"), "{qualifiers:?}");
    for q in qualifiers {
        let b = format!(".B {q}");
        let bi = format!(".BI {q}=");
        let br = format!(".BR {q}");
        assert!(
            man8.contains(&b) || man8.contains(&bi) || man8.contains(&br),
            "map-by-device(8) does not describe the qualifier {q} in its QUALIFIERS list"
        );
    }
    for level in ["hwthread", "core", "l1cache", "l2cache", "l3cache", "numa", "package", "locality", "none"] {
        assert!(man8.contains(level), "map-by-device(8) does not mention bind={level}");
    }
    // Every subcommand and long flag the CLI's --help lists.
    for sub in ["devices", "plan", "check", "exec"] {
        assert!(man1.contains(&format!(".B {sub}")), "map-by-device(1) does not describe {sub}");
        let help = Command::new(BIN).args([sub, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in help.split_whitespace().filter(|w| w.starts_with("--")) {
            let flag = flag.trim_end_matches(',');
            assert!(man1.contains(flag), "map-by-device(1) does not mention {flag} of {sub}");
        }
    }
}

#[test]
fn every_config_key_is_documented() {
    // The engine's own list of keys, from the message that refuses an unknown one.
    let e = map_by_device::config::Config::from_toml("no_such_key = 1\n", Path::new("x.toml"))
        .expect_err("an unknown key is refused")
        .to_string();
    let list = e.split("expected one of ").nth(1).unwrap_or_else(|| panic!("no key list in {e:?}"));
    let keys: Vec<&str> = list.split(", ").map(str::trim).collect();
    assert!(keys.contains(&"require_step_gpus") && keys.len() >= 8, "{keys:?}");
    for file in [
        "docs/man/map-by-device.8",
        "docs/admin-guide.md",
        "map-by-device.toml.example",
        "plugstack.conf.example",
        "packaging/plugstack.d/map-by-device.conf.in",
    ] {
        let text = read(file).replace("\\-", "-");
        for key in &keys {
            assert!(
                text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|w| w == *key),
                "{file} does not mention the config key {key}"
            );
        }
    }
}

/// The code map names every module of each crate by its path (a file `src/x.rs` or a folder
/// `src/x/` at the top of the crate's sources) and names no path that does not exist: a map of
/// what rarely changes, not of every file (each module's own `//!` says the rest).
#[test]
fn the_code_map_names_every_module_and_nothing_else() {
    let doc = read("docs/ARCHITECTURE.md");
    let map = doc.split("## Code map").nth(1).and_then(|s| s.split("\n## ").next()).unwrap();
    let named: Vec<&str> = map.split('`').skip(1).step_by(2).collect();
    for crate_dir in ["src", "spank/src", "discover/src"] {
        for e in std::fs::read_dir(root().join(crate_dir)).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let path = match e.file_type().unwrap().is_dir() {
                true => format!("{crate_dir}/{name}/"),
                false if name.ends_with(".rs") && name != "lib.rs" => format!("{crate_dir}/{name}"),
                false => continue,
            };
            // A module in a file and a folder (`report.rs` and `report/`) may be named once; a
            // folder of targets (`bin/`) by what it holds.
            let file_too = path.strip_suffix('/').map(|p| format!("{p}.rs"));
            assert!(
                named.iter().any(|n| n.starts_with(&path)) || file_too.is_some_and(|f| named.contains(&f.as_str())),
                "{path} is not in docs/ARCHITECTURE.md's code map: add it"
            );
        }
    }
    for n in named.iter().filter(|n| n.contains('/') && !n.contains(' ') && (n.ends_with(".rs") || n.ends_with('/'))) {
        // Paths from the repository's root; the floors line's `bin/` is the engine crate's.
        let exists = root().join(n).exists() || root().join("src").join(n).exists();
        assert!(exists, "docs/ARCHITECTURE.md's code map names {n}, which does not exist: fix the map");
    }
}

/// Issue 24.6: the example config changes no job as it comes (no `default`, which would map
/// every job of the cluster) and explains `require_step_gpus`, which only a node whose GPUs
/// Slurm does not manage in a `GresTypes=gpu` cluster needs (issue 41: unset, a step Slurm
/// gave no GPU has none where Slurm's gres/gpu runs); the plugstack examples say how the
/// config file comes to exist (no package step creates it) and pin no single Slurm release.
#[test]
fn the_example_config_maps_no_job_and_explains_require_step_gpus() {
    let text = read("map-by-device.toml.example");
    let config = map_by_device::config::Config::from_toml(&text, Path::new("map-by-device.toml.example")).unwrap();
    assert_eq!(
        config.default, None,
        "map-by-device.toml.example sets a default: every job of the cluster would be mapped"
    );
    assert_eq!(config.require_step_gpus, None, "require_step_gpus is the admin's choice: commented out, explained");
    let line = text.lines().position(|l| l == "#require_step_gpus = false").expect("#require_step_gpus = false");
    let above: Vec<&str> = text.lines().take(line).collect();
    let explained = above.iter().rev().take_while(|l| l.starts_with('#')).copied().collect::<Vec<_>>().join(" ");
    for word in ["GresTypes", "SLURM_STEP_GPUS", "uncomment", "ConstrainDevices", "Leave it unset"] {
        assert!(explained.contains(word), "the comment above #require_step_gpus does not say {word:?}: {explained}");
    }
    for file in ["map-by-device.toml.example", "plugstack.conf.example", "packaging/plugstack.d/map-by-device.conf.in"]
    {
        let t = read(file);
        assert!(
            t.contains("/etc/slurm/map-by-device.toml") && t.contains("install -m 0644"),
            "{file} does not say how /etc/slurm/map-by-device.toml is made from the example"
        );
    }
    let first = read("plugstack.conf.example").lines().next().unwrap_or_default().to_string();
    assert!(!first.contains("(Slurm 22.05)"), "plugstack.conf.example is for one release only: {first}");
}

/// Issue 24.6: the admin path on Debian 13 is one page, linked from the README and the admin
/// guide, with every step an admin needs; its smoke test, and the admin guide's, ask Slurm for
/// GPUs (a GPU mapping of a step without GPUs is refused once require_step_gpus is set).
#[test]
fn the_debian_13_page_has_the_whole_admin_path() {
    let page = read("docs/debian-13.md");
    for part in [
        "## 1. Prerequisites",
        "## 2. Build",
        "packaging/build-deb.sh",
        "## 3. Install on every node",
        "map-by-device_0.1.0-1+slurm24.11_amd64.deb",
        "## 4. The config file",
        "install -m 0644 /usr/share/doc/map-by-device/examples/map-by-device.toml.example /etc/slurm/map-by-device.toml",
        "require_step_gpus",
        "slurm-wlm-nvml-plugin",
        "contrib",
        "AutoDetect=nvml",
        "## 5. Enable it",
        "config=/etc/slurm/map-by-device.toml",
        "## 6. Check each node",
        "## 7. Smoke test",
        "## 8. Upgrading",
        "in the same\n  apt transaction",
        "Remv map-by-device",
        "## 9. Rollback",
        "apt-get purge map-by-device",
    ] {
        assert!(page.contains(part), "docs/debian-13.md lacks {part:?}");
    }
    assert!(read("README.md").contains("](docs/debian-13.md)"), "README.md does not link docs/debian-13.md");
    assert!(read("docs/admin-guide.md").contains("](debian-13.md)"), "the admin guide does not link docs/debian-13.md");
    let admin = read("docs/admin-guide.md");
    for part in ["## Upgrading", "**in one transaction**", "Remv map-by-device", "tests/package/deb-install.sh"] {
        assert!(admin.contains(part), "docs/admin-guide.md's Upgrading lacks {part:?}");
    }
    for file in ["docs/admin-guide.md", "docs/debian-13.md"] {
        let text = read(file).replace("\\\n", " ");
        for line in text.lines().filter(|l| l.contains("srun ") && l.contains(":verbose")) {
            let cmd = line.split("srun ").nth(1).unwrap_or_default();
            let cmd = cmd.split('`').next().unwrap_or_default();
            if cmd.contains("--map-by-device=gpu") {
                assert!(
                    ["--gpus", "--gres=gpu"].iter().any(|g| cmd.contains(g)),
                    "{file}: the smoke test `srun {cmd}` asks for no GPU: with require_step_gpus it is refused"
                );
            }
        }
    }
}

/// Issue 41: the user guide's "exact variables" of a `gpu:adapters` task are the plan's, line
/// for line: `NCCL_IB_HCA` is the node's list, the same in every task (a per-rank value copied
/// from the guide is the hang NCCL warns about).
#[test]
fn the_nccl_example_is_what_the_plan_writes() {
    use map_by_device::node::{Node, NodeOptions};
    let guide = read("docs/user-guide.md");
    let after = guide
        .split("The exact variables, for a task whose GPU is paired with `mlx5_0`")
        .nth(1)
        .expect("docs/user-guide.md has the exact variables of a gpu:adapters task");
    let block: Vec<&str> = after
        .split("```")
        .nth(1)
        .expect("a code block after it")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let topology = map_by_device::load::from_xml_file(&root().join("topologies/turin-h200.xml")).unwrap();
    let node = Node::new(topology, NodeOptions::default());
    let facts = map_by_device::plan::StepFacts { ntasks: 4, ..Default::default() };
    let plan =
        map_by_device::plan::plan(&map_by_device::spec::Spec::parse("gpu:adapters").unwrap(), &node, &facts).unwrap();
    let task0: Vec<String> = plan.tasks[0].env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(block, task0, "the guide's variables are not task 0's of -n 4 gpu:adapters on turin-h200");
    let hca = plan.tasks[0].env.get("NCCL_IB_HCA").cloned().unwrap_or_default();
    assert!(hca.contains(','), "NCCL_IB_HCA names the node's adapters: {hca}");
    assert!(plan.tasks.iter().all(|t| t.env.get("NCCL_IB_HCA") == Some(&hca)), "one NCCL_IB_HCA per node");
    let table = guide.lines().find(|l| l.starts_with("| `NCCL_IB_HCA")).expect("the variables table's NCCL row");
    assert!(!table.contains("only that adapter"), "{table}");
}

/// Issue 41: every step a doc shows mapping GPUs asks Slurm for them (`--gpus-per-node`,
/// `--gpus-per-task`, `--gpus`, `--gres=gpu`), in its own line or in its code block (a job
/// script's `#SBATCH` header): where Slurm manages the GPUs, a step that asked for none has
/// none. Shown refusals of such a step (a line that says it fails) are the exception.
#[test]
fn every_gpu_example_asks_slurm_for_its_gpus() {
    let asks = |text: &str| ["--gpus", "--gres=gpu", "--gpus-per-"].iter().any(|g| text.contains(g));
    let maps_gpus = |line: &str| {
        (line.contains("srun ") || line.contains("sbatch ") || line.contains("#SBATCH"))
            && line.split("--map-by-device=").skip(1).any(|spec| spec.starts_with("gpu") || spec.starts_with("cuda"))
    };
    // The docs users copy from (plugin.md and slurm-allocation.md record measurements).
    let mut files: Vec<(String, String)> =
        ["README.md", "docs/user-guide.md", "docs/admin-guide.md", "docs/debian-13.md"]
            .into_iter()
            .map(|f| (f.to_string(), read(f)))
            .collect();
    for man in ["docs/man/map-by-device.1", "docs/man/map-by-device.8"] {
        files.push((man.to_string(), read(man).replace("\\-", "-")));
    }
    let mut bad = Vec::new();
    let mut seen = 0;
    for (file, text) in files {
        // Code blocks (```...``` in Markdown, .EX/.EE in man pages), and inline `srun ...` spans.
        let mut blocks: Vec<String> = Vec::new();
        let (mut current, mut inside) = (String::new(), false);
        for line in text.lines() {
            let fence = line.trim_start().starts_with("```") || line.starts_with(".EX") || line.starts_with(".EE");
            if fence {
                if inside {
                    blocks.push(std::mem::take(&mut current));
                }
                inside = !inside;
            } else if inside {
                current.push_str(line);
                current.push('\n');
            } else {
                blocks
                    .extend(line.split('`').skip(1).step_by(2).filter(|s| s.starts_with("srun ")).map(str::to_string));
            }
        }
        for block in blocks {
            for line in block.replace("\\\n", " ").lines().filter(|l| maps_gpus(l)) {
                seen += 1;
                if !asks(line) && !asks(&block) && !line.contains("fails") {
                    bad.push(format!("{file}: {}", line.trim()));
                }
            }
        }
    }
    assert!(seen >= 20, "only {seen} GPU steps found in the docs");
    assert!(bad.is_empty(), "GPU steps that ask Slurm for no GPU:\n{}", bad.join("\n"));
}
