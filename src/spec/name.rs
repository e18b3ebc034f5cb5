//! Targets that no node can have, refused where the spec is read (`srun`, `sbatch`,
//! `salloc`), before anything is queued, rather than on the node after the queue wait: a near
//! miss of a class word (`gpus`, `GPU0`, `netwrok`), a separator other than `:` (`gpu,shared`,
//! `gpu;shared`, `gpu shared`), a character that no device name holds, a qualifier written
//! where the target goes (`ndev=2`), and Open MPI's `--map-by` spellings (`ppr:2:gpu`,
//! `ppr:1:package`, `device=gpu`, `package`), each with the spec or Slurm option that does it.
//!
//! What still passes is every form a device name can take: an OS name (`cuda0`, `mlx5_0`,
//! `nvme0n1`, `hsn0`: letters, digits, `_`, `.`, `-`), a UUID (`GPU-46f7...`), a PCI bus id
//! and a PMIx id (read by their shape in `target.rs`). Whether the node has it is the node's
//! to say.

use super::{suggest, SpecError, CLASS_WORDS};

/// Whether `c` may appear in an OS device name or a GPU UUID.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.-".contains(c)
}

/// Open MPI's `--map-by` objects (PRRTE's names and their older synonyms): the spec that
/// does the same with devices, what it does, and Slurm's own option for it without devices.
const OPENMPI_OBJECTS: [(&str, &str, &str, &str); 11] = [
    ("package", "gpu:interleave", "consecutive tasks on GPUs of alternate packages", "--distribution=block:cyclic"),
    ("socket", "gpu:interleave", "consecutive tasks on GPUs of alternate packages", "--distribution=block:cyclic"),
    (
        "numa",
        "gpu:interleave=numa",
        "consecutive tasks on GPUs of alternate NUMA domains",
        "--distribution=block:cyclic",
    ),
    ("l3cache", "gpu:interleave=l3cache", "consecutive tasks on GPUs of alternate L3 caches", ""),
    ("l2cache", "gpu:interleave=l2cache", "consecutive tasks on GPUs of alternate L2 caches", ""),
    ("l1cache", "gpu:interleave=l1cache", "consecutive tasks on GPUs of alternate L1 caches", ""),
    ("core", "gpu:bind=core", "each task one core next to its GPU", "--cpu-bind=cores"),
    ("hwthread", "gpu:bind=hwthread", "each task one hardware thread next to its GPU", "--cpu-bind=threads"),
    ("node", "gpu", "each task its own GPU and the CPUs near it", "--ntasks-per-node"),
    ("slot", "gpu", "each task its own GPU and the CPUs near it", ""),
    ("board", "gpu", "each task its own GPU and the CPUs near it", ""),
];

/// Checks a target that is no class word and no `none` (`text` is the whole spec, for Open
/// MPI's `ppr:N:RESOURCE`, which spans several `:` parts). `Ok` means the target has the
/// shape of a device name; the node then says whether it has one.
pub(super) fn check(text: &str, target: &str) -> Result<(), SpecError> {
    if let Some(fix) = openmpi(text, target) {
        return Err(SpecError::OpenMpi { given: text.to_string(), fix });
    }
    // An id read by its shape (a PCI bus id, a PMIx id): target.rs checked it.
    if target.contains(':') {
        return Ok(());
    }
    if let Some(names) = name_list(target) {
        return Err(SpecError::NameList { given: text.to_string(), names });
    }
    if let Some((sep, name)) = stray_separator(text) {
        return Err(separator(text, sep, name));
    }
    if let Some((word, value)) = target.split_once('=') {
        if word.trim().eq_ignore_ascii_case("device") {
            let fix = format!("the target comes first and alone: write {}", crate::text::printable(value.trim()));
            return Err(SpecError::OpenMpi { given: text.to_string(), fix });
        }
        return Err(SpecError::NotATarget { given: target.to_string(), fix: assignment_fix(word, value) });
    }
    if let Some(bad) = target.chars().find(|c| !is_name_char(*c)) {
        return Err(SpecError::BadName { given: target.to_string(), character: bad });
    }
    if let Some(word) = near_miss(target) {
        return Err(SpecError::NearMiss { given: target.to_string(), word });
    }
    Ok(())
}

/// What a name with a comma is told: a list of device names is not supported (and what to
/// use instead); a target with comma-separated qualifiers is written with ':'.
pub fn comma_fix(text: &str) -> String {
    match name_list(text) {
        Some(_) => super::LIST_FIX.to_string(),
        None => {
            let rewritten = crate::text::printable(&text.replace(',', ":"));
            format!("a comma does not separate qualifiers, write them with ':' ({rewritten})")
        }
    }
}

/// A target that is a comma list of device names (`nvml0,nvml3`), not a target followed by
/// comma-separated qualifiers (`gpu,ndev=2`): the names, counted.
fn name_list(target: &str) -> Option<usize> {
    let parts: Vec<&str> = target.split(',').map(str::trim).collect();
    let qualifier = |p: &str| p.contains('=') || super::qualifier_word(p, None).is_ok();
    let names = parts.iter().filter(|p| !p.is_empty()).count();
    (parts.len() > 1 && names > 1 && !parts[1..].iter().any(|p| qualifier(p))).then_some(names)
}

/// `text` holds `sep` (`name` in words), which does not separate qualifiers: the refusal,
/// with the spec written with `:`.
pub(super) fn separator(text: &str, sep: char, name: &'static str) -> SpecError {
    let parts = text.split(|c: char| c == sep || (sep == ' ' && c.is_whitespace()));
    let fixed = parts.map(str::trim).filter(|p| !p.is_empty()).collect::<Vec<_>>().join(":");
    SpecError::Separator { given: text.to_string(), separator: name, fixed: crate::text::printable(&fixed) }
}

/// The separator other than `:` that `text` holds, if any, and its name.
pub(super) fn stray_separator(text: &str) -> Option<(char, &'static str)> {
    [(',', "a comma"), (';', "a semicolon")]
        .into_iter()
        .find(|(c, _)| text.contains(*c))
        .or_else(|| text.contains(char::is_whitespace).then_some((' ', "a blank")))
}

/// `word=value` where the target goes: a qualifier (`ndev=2` → `gpu:ndev=2`).
fn assignment_fix(word: &str, value: &str) -> String {
    let lower = word.trim().to_ascii_lowercase();
    let qualifiers = super::QUALIFIERS.iter().map(|(n, _)| *n);
    match qualifiers.clone().find(|q| *q == lower).or_else(|| suggest::nearest(&lower, qualifiers)) {
        Some(q) => format!(
            "{q}= is a qualifier, and a spec starts with its target: write gpu:{q}={}",
            crate::text::printable(value)
        ),
        None => "a spec starts with its target (gpu, network, block, a device name or none), then :qualifiers".into(),
    }
}

/// The class word (or `none`) one edit away from `target`, if it is a near miss of one: a
/// plural, a typo, a digit added (`gpu0`: no node calls a GPU so; its OS names are `cuda0`,
/// `rsmi0`...). A network word with digits added is left alone: an admin may name interfaces
/// so (`nic0`).
fn near_miss(target: &str) -> Option<&'static str> {
    let lower = target.to_ascii_lowercase();
    let words = CLASS_WORDS.iter().map(|(w, _)| *w).chain(["none"]);
    let word = suggest::nearest_within(&lower, words, 1)?;
    let network = CLASS_WORDS.iter().any(|(w, c)| *w == word && *c == crate::device::DeviceClass::Network);
    let digits_added = lower.strip_prefix(word).is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()));
    (!(network && digits_added)).then_some(word)
}

/// Open MPI's spelling of a mapping, and what does it here.
fn openmpi(text: &str, target: &str) -> Option<String> {
    let lower = text.trim().to_ascii_lowercase();
    if target.eq_ignore_ascii_case("ppr") {
        let mut parts = lower.split(':').skip(1);
        let (count, resource) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let n = count.trim().parse::<u32>().ok().filter(|n| *n >= 1).map_or_else(|| "N".to_string(), |n| n.to_string());
        return Some(ppr_fix(&n, resource.trim()));
    }
    let (_, spec, what, slurm) = OPENMPI_OBJECTS.iter().find(|(w, ..)| target.eq_ignore_ascii_case(w))?;
    let slurm = if slurm.is_empty() { String::new() } else { format!(", or Slurm's own {slurm} without devices") };
    Some(format!("--map-by-device gives each task a device: write {spec} ({what}){slurm}"))
}

/// `ppr:N:RESOURCE`: N tasks per device is `CLASS:ppr=N`; per package, core or node, Slurm's
/// own `--ntasks-per-*`.
fn ppr_fix(n: &str, resource: &str) -> String {
    if let Some((word, _)) = CLASS_WORDS.iter().find(|(w, _)| *w == resource) {
        if n == "1" {
            return format!("write {word} (one task on each {word} device; {word}:ppr=N for N consecutive tasks)");
        }
        return format!("write {word}:ppr={n} ({n} consecutive tasks on each {word} device)");
    }
    let slurm = match resource {
        "package" | "socket" => Some("socket"),
        "core" => Some("core"),
        "node" => Some("node"),
        _ => None,
    };
    match slurm {
        Some(per) => format!(
            "Slurm's --ntasks-per-{per}={n} places that many tasks on each {resource}; --map-by-device then gives \
             each task its devices (gpu:ndev=auto:compact: an equal share of the GPUs, kept together)"
        ),
        None => format!(
            "for {n} tasks per GPU write gpu:ppr={n}; Slurm counts tasks per node, socket or core \
             (--ntasks-per-node, --ntasks-per-socket, --ntasks-per-core)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Spec;

    fn err(s: &str) -> String {
        match Spec::parse(s) {
            Ok(spec) => panic!("{s:?} was accepted as {spec:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn near_misses_of_a_class_word_are_refused_with_the_word() {
        for (given, word) in [
            ("gpus", "gpu"),
            ("GPUS", "gpu"),
            ("Gpus", "gpu"),
            ("gpu0", "gpu"),
            ("gpuu", "gpu"),
            ("gpy", "gpu"),
            ("pgu", "gpu"),
            ("networks", "network"),
            ("netwrok", "network"),
            ("nics", "nic"),
            ("blocks", "block"),
            ("fabrics", "fabric"),
            ("nonee", "none"),
            ("-gpu", "gpu"),
        ] {
            let e = err(given);
            assert!(e.contains(&format!("(did you mean {word}?)")) && e.contains(given), "{given}: {e}");
        }
    }

    #[test]
    fn separators_are_refused_with_the_spec_rewritten() {
        for (given, sep, fixed) in [
            ("gpu,shared", "a comma", "gpu:shared"),
            ("gpu,ndev=2", "a comma", "gpu:ndev=2"),
            ("gpu;shared", "a semicolon", "gpu:shared"),
            ("gpu shared", "a blank", "gpu:shared"),
            ("gpu  ndev=2 verbose", "a blank", "gpu:ndev=2:verbose"),
            ("gpu\tshared", "a blank", "gpu:shared"),
            ("gpu:shared,verbose", "a comma", "gpu:shared:verbose"),
        ] {
            let e = err(given);
            assert!(e.contains(sep) && e.contains(&format!("write them with ':' ({fixed})")), "{given:?}: {e}");
        }
    }

    #[test]
    fn characters_no_device_name_holds_are_refused() {
        for given in ["cuda0/1", "gpu*", "mlx5_0!", "cuda\u{1}0"] {
            let e = err(given);
            assert!(e.contains("no device name holds"), "{given:?}: {e}");
            assert!(!e.chars().any(char::is_control), "{e}");
        }
        let e = err("ndev=2");
        assert!(e.contains("write gpu:ndev=2"), "{e}");
        let e = err("nedv=2");
        assert!(e.contains("write gpu:ndev=2"), "{e}");
    }

    #[test]
    fn open_mpi_spellings_get_their_equivalent() {
        for (given, needle) in [
            ("ppr:2:gpu", "write gpu:ppr=2"),
            ("PPR:2:GPU", "write gpu:ppr=2"),
            ("ppr:1:nic", "write nic (one task on each nic device"),
            ("ppr:1:package", "--ntasks-per-socket=1"),
            ("ppr:1:socket", "--ntasks-per-socket=1"),
            ("ppr:4:node", "--ntasks-per-node=4"),
            ("ppr:2:core", "--ntasks-per-core=2"),
            ("ppr:2:numa", "for 2 tasks per GPU write gpu:ppr=2"),
            ("device=gpu", "write gpu"),
            ("package", "write gpu:interleave (consecutive tasks on GPUs of alternate packages)"),
            ("socket", "--distribution=block:cyclic"),
            ("numa", "gpu:interleave=numa"),
            ("core", "write gpu:bind=core"),
            ("l3cache", "gpu:interleave=l3cache"),
            ("node", "write gpu ("),
        ] {
            let e = err(given);
            assert!(e.contains("Open MPI's --map-by spelling") && e.contains(needle), "{given}: {e}");
        }
    }

    #[test]
    fn every_device_name_form_still_passes_to_the_node() {
        for given in [
            "cuda0",
            "rsmi3",
            "nvml0",
            "mlx5_0",
            "hfi1_0",
            "ib0",
            "hsn0",
            "eno6",
            "enp1s0f0",
            "renderD128",
            "card1",
            "nvme0n1",
            "ze0.1",
            "nic0",
            "network1",
            "ib",
            "GPU-0e18d434-10b9-d275-6665-5047cb2555fa",
            "GPU-ada6f007d55c8362",
            "0000:96:00.0",
            "96:00.0:shared",
            "gpu://turin-h200::nvml2",
            "fab://9c63:c003:00fb:7458::9c63:c003:00fb:7458",
            "ipv4://00:11:22:33:44:55",
            "blk://nvme0n1",
            "cuda0:verbose",
        ] {
            assert!(Spec::parse(given).is_ok(), "{given}: {:?}", Spec::parse(given));
        }
    }
}
