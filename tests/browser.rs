//! The pictures in a real browser: headless Chromium (Debian's `chromium`) screenshots each
//! SVG to PNG, and the PNG must have the SVG's own width and height, must not be blank, and
//! must show every colour the SVG's legend declares (each task's; each device class's in the
//! devices view) — so the fills were really painted, not just written.
//!
//! Pictures checked: for every fixture in `topologies/`, `devices --svg` and a two-task
//! `plan --svg` (GPUs interleaved, else network adapters, else disks; a refusal when none
//! maps) made by the real binary, the user guide's pictures in `docs/pictures/` and the
//! golden pictures in `tests/expected/svg/` (a refused plan among them).
//!
//! End-to-end tier: ignored by `cargo test`; `tests/browser/run.sh` installs Chromium (with the
//! other test packages) and runs it with `--ignored`. `MBD_CHROMIUM` names another binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod picture;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_map-by-device");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn svgs_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "svg"));
    v.sort();
    v
}

/// Makes the pictures of every fixture with the real CLI, into `dir`.
fn fixture_pictures(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(root().join("topologies"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "xml"))
        .collect();
    fixtures.sort();
    for xml in fixtures {
        let stem = xml.file_stem().unwrap().to_string_lossy().into_owned();
        let topo = xml.display().to_string();
        let devices = dir.join(format!("{stem}-devices.svg"));
        let plan = dir.join(format!("{stem}-plan.svg"));
        let cli = |args: &[&str]| {
            let o = Command::new(BIN).args(args).env_remove("ZE_FLAT_DEVICE_HIERARCHY").output().unwrap();
            assert!(matches!(o.status.code(), Some(0 | 2)), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
            o.status.success()
        };
        cli(&["devices", "--topology", &topo, "--svg", devices.to_str().unwrap()]);
        // The first of these that maps here (a node without GPUs maps its adapters); when
        // none does, the last refusal is drawn.
        for spec in ["gpu:interleave:bind=core", "network:bind=core", "block"] {
            if cli(&["plan", "--topology", &topo, "-n", "2", spec, "--svg", plan.to_str().unwrap()]) {
                break;
            }
        }
        out.extend([devices, plan]);
    }
    out
}

/// Screenshots `svg` (a file) at `w` x `h` with a fresh profile; returns the PNG path.
fn screenshot(chromium: &str, svg: &Path, w: i64, h: i64, work: &Path) -> Result<PathBuf, String> {
    let profile = work.join("profile");
    let _ = std::fs::remove_dir_all(&profile);
    let png = work.join("shot.png");
    let _ = std::fs::remove_file(&png);
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={w},{h}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.canonicalize().map_err(|e| e.to_string())?.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {chromium}: {e} (tests/browser/run.sh installs Debian's chromium)"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if start.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            return Err("chromium did not finish in 90 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = std::fs::remove_dir_all(&profile);
    if !status.success() || !png.exists() {
        return Err(format!("chromium exited with {status} and wrote no screenshot"));
    }
    Ok(png)
}

/// Decodes an RGB(A) PNG: (width, height, pixels as RGB).
fn decode(png: &Path) -> Result<(u32, u32, Vec<[u8; 3]>), String> {
    let file = std::fs::File::open(png).map_err(|e| e.to_string())?;
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
    let step = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => return Err(format!("unexpected PNG colour type {other:?}")),
    };
    let pixels = buf[..info.buffer_size()].chunks_exact(step).map(|p| [p[0], p[1], p[2]]).collect();
    Ok((info.width, info.height, pixels))
}

fn hex(c: &str) -> Option<[u8; 3]> {
    let c = c.strip_prefix('#')?;
    let v = u32::from_str_radix(c, 16).ok()?;
    Some([(v >> 16) as u8, (v >> 8) as u8, v as u8])
}

/// Screenshots one picture and checks the PNG; returns a one-line summary.
fn check(chromium: &str, svg_path: &Path, work: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(svg_path).map_err(|e| e.to_string())?;
    let pic = picture::parse(&text);
    let png = screenshot(chromium, svg_path, pic.width, pic.height, work)?;
    let (w, h, pixels) = decode(&png)?;
    if (i64::from(w), i64::from(h)) != (pic.width, pic.height) {
        return Err(format!("PNG is {w}x{h}, the SVG says {}x{}", pic.width, pic.height));
    }
    let painted = pixels.iter().filter(|p| **p != [255, 255, 255]).count();
    let dark = pixels.iter().filter(|p| p.iter().map(|&c| u32::from(c)).sum::<u32>() < 200).count();
    let share = painted as f64 / pixels.len().max(1) as f64;
    if share < 0.02 || dark < 200 {
        return Err(format!("blank: {:.1}% painted, {dark} dark (text) pixels", share * 100.0));
    }
    let mut want = pic.colors.clone();
    want.sort();
    want.dedup();
    let present: std::collections::HashSet<[u8; 3]> = pixels.iter().copied().collect();
    let missing: Vec<&String> = want.iter().filter(|c| hex(c).is_none_or(|rgb| !present.contains(&rgb))).collect();
    if !missing.is_empty() {
        return Err(format!("colours declared but not painted: {missing:?}"));
    }
    Ok(format!("{w}x{h}, {:.0}% painted, {} colours checked", share * 100.0, want.len()))
}

#[test]
#[ignore = "needs Chromium: tests/browser/run.sh installs it and runs this test"]
fn pictures_render_in_chromium() {
    let chromium = std::env::var("MBD_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let work = std::env::temp_dir().join(format!("mbd-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let mut pictures = fixture_pictures(&work);
    let docs = svgs_in(&root().join("docs/pictures"));
    assert!(docs.len() >= 3, "the user guide's pictures: {docs:?}");
    pictures.extend(docs);
    pictures.extend(svgs_in(&root().join("tests/expected/svg")));
    let mut failed = Vec::new();
    for svg in &pictures {
        let name = svg.strip_prefix(&work).or_else(|_| svg.strip_prefix(root())).unwrap_or(svg).display().to_string();
        match check(&chromium, svg, &work) {
            Ok(summary) => println!("browser: ok {name} ({summary})"),
            Err(why) => {
                println!("browser: FAIL {name}: {why}");
                failed.push(name);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    assert!(failed.is_empty(), "pictures that did not render: {failed:?}");
}
