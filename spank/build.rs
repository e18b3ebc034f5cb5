//! Reads the installed Slurm's version from `slurm/slurm_version.h`, so that the
//! `plugin_version` the .so exports is the version of the Slurm it was built against: Slurm
//! refuses a plugin whose version is not its own ("Incompatible Slurm plugin version").
//!
//! It also tells the code which form of `slurm_kill_job_step` that Slurm has
//! (`cfg(slurm_kill_step = ...)`).
//!
//! The header is looked for in `$SLURM_INCLUDE_DIR` (default `/usr/include`); Debian's
//! `libslurm-dev` installs it. Headers elsewhere must reach the slurm-spank crate's bindgen
//! too (`BINDGEN_EXTRA_CLANG_ARGS`, see `bindings_read`).
//!
//! It also tells the plugin what its Slurm's `spank.h` offers that older ones lack, as cfgs:
//! `slurm_init_failure_mode` when it declares `slurm_spank_init_failure_mode` (25.05+: a
//! failing `slurm_spank_init` drains the node unless the plugin says `ESPANK_JOB_FAILURE`).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=BINDGEN_EXTRA_CLANG_ARGS");
    let include = std::env::var_os("SLURM_INCLUDE_DIR").map(PathBuf::from).unwrap_or_else(|| "/usr/include".into());
    bindings_read(&include);
    let header = include.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text = match std::fs::read_to_string(&header) {
        Ok(t) => t,
        Err(e) => fail(&format!(
            "cannot read {}: {e}. Install the Slurm headers (Debian: apt-get install libslurm-dev) \
             or point SLURM_INCLUDE_DIR at the directory that holds slurm/slurm_version.h",
            header.display()
        )),
    };
    let number = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#define"))
        .filter_map(|l| l.trim().strip_prefix("SLURM_VERSION_NUMBER"))
        .find_map(|v| {
            let v = v.trim();
            let v = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X"))?;
            u32::from_str_radix(v, 16).ok()
        })
        .unwrap_or_else(|| fail(&format!("no `#define SLURM_VERSION_NUMBER 0x...` in {}", header.display())));
    let (major, minor, micro) = (number >> 16 & 0xff, number >> 8 & 0xff, number & 0xff);
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_else(|| fail("cargo did not set OUT_DIR")));
    let code = format!(
        "/// `SLURM_VERSION_NUMBER` of the Slurm headers this plugin was built against ({}).\n\
         pub const SLURM_VERSION_NUMBER: u32 = {number:#08x};\n\
         /// The same version as text.\n\
         pub const SLURM_VERSION_TEXT: &str = \"{major:02}.{minor:02}.{micro}\";\n",
        header.display()
    );
    if let Err(e) = std::fs::write(out.join("slurm_version.rs"), code) {
        fail(&format!("cannot write {}: {e}", out.join("slurm_version.rs").display()));
    }
    // slurm_kill_job_step (slurm/slurm.h) changed its arguments twice: (job, step, signal)
    // up to 23.02, (job, step, signal, flags) from 23.11, (slurm_step_id_t *, signal, flags)
    // from 25.11 (spank/src/end_step.rs).
    println!("cargo:rustc-check-cfg=cfg(slurm_kill_step, values(\"ids\", \"ids_flags\", \"step_id\"))");
    let api = match (major, minor) {
        (m, n) if (m, n) < (23, 11) => "ids",
        (m, n) if (m, n) < (25, 11) => "ids_flags",
        _ => "step_id",
    };
    println!("cargo:rustc-cfg=slurm_kill_step=\"{api}\"");

    println!("cargo:rustc-check-cfg=cfg(slurm_init_failure_mode)");
    let spank_h = include.join("slurm/spank.h");
    println!("cargo:rerun-if-changed={}", spank_h.display());
    let spank = std::fs::read_to_string(&spank_h)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e} (install the Slurm headers)", spank_h.display())));
    if spank.contains("slurm_spank_init_failure_mode") {
        println!("cargo:rustc-cfg=slurm_init_failure_mode");
    }
    static_unwinder(&out);
}

/// The slurm-spank crate generates its bindings (the `spank_item` values among them) with
/// bindgen, which reads clang's include path, not `SLURM_INCLUDE_DIR`: headers under another
/// directory reach it only through `BINDGEN_EXTRA_CLANG_ARGS`. Without it, a build host that
/// also has other Slurm headers in `/usr/include` would mix two releases (the plugin's
/// version from one, the item values from the other), so that is refused here with the fix.
/// `packaging/build-deb.sh`, `build-rpm.sh` and `slurm-info.sh bindgen-args` set it.
fn bindings_read(include: &std::path::Path) {
    if include == std::path::Path::new("/usr/include") {
        return;
    }
    let want = format!("-I{}", include.display());
    let args = std::env::var("BINDGEN_EXTRA_CLANG_ARGS").unwrap_or_default();
    if !args.split_whitespace().any(|a| a == want) {
        let shim = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_default().join("shim");
        fail(&format!(
            "SLURM_INCLUDE_DIR={} but the slurm-spank crate's bindings are generated from clang's include path: \
             also set BINDGEN_EXTRA_CLANG_ARGS=\"-I{} {want}\" (packaging/slurm-info.sh bindgen-args prints it; \
             packaging/build-deb.sh and build-rpm.sh set it themselves)",
            include.display(),
            shim.display()
        ));
    }
}

/// The unwinder linked into the plugin (GCC's `libgcc_eh.a`, the same code as `libgcc_s.so.1`)
/// rather than loaded beside it. srun, sbatch and salloc do not map `libgcc_s.so.1` (slurmstepd
/// does, through its own dependencies): loading it with the plugin cost every step about
/// 0.4 ms of srun's time, 1.2% of a one-task step (Slurm 26.05, measured with
/// tests/e2e/bench.sh's trivial plugin linked to each). Rust's `panic = "unwind"`, which the
/// hooks' `catch_unwind` needs, links `-lgcc_s`, and so does the C compiler that links a
/// shared object; a `libgcc_s.so` linker script found first on the search path turns both
/// into the static archive. Its symbols stay inside the plugin: rustc exports only the
/// plugin's own C symbols from a cdylib. The test binaries of this crate get the same
/// unwinder, so the panic tests (tests/e2e/hardening.sh, "panic:") exercise it.
fn static_unwinder(out: &std::path::Path) {
    let dir = out.join("static-unwinder");
    let script = dir.join("libgcc_s.so");
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&script, "INPUT(-lgcc_eh)\n")) {
        fail(&format!("cannot write {}: {e}", script.display()));
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1)
}
