//! What the planner is told about the step on this node: the facts Slurm (or the CLI's
//! flags) give, and the one piece of Slurm text read here, the step's GPU list.

use crate::cpuset::CpuSet;
use crate::device::DeviceClass;
use crate::node::Node;
use crate::spec::{Spec, Target};
use std::collections::BTreeMap;

/// What Slurm (or the CLI's flags) tells the planner about the step on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepFacts {
    /// Tasks of the step on this node (local ids 0..ntasks).
    pub ntasks: u32,
    /// `--cpus-per-task`, in CPUs (hardware threads) as Slurm counts them: the default `pe`
    /// of a per-core binding (divided by the step's threads per core) or per-thread one, and
    /// the fewest CPUs any task may be bound to.
    pub cpus_per_task: Option<u32>,
    /// The CPUs Slurm allocated to the step on this node; `None` = the whole node.
    pub allowed_cpus: Option<CpuSet>,
    /// Each task's existing binding (for `closest`), by local id; a missing or empty entry
    /// means unbound.
    pub task_cpus: Option<Vec<CpuSet>>,
    /// The task environment the rules read (`ZE_FLAT_DEVICE_HIERARCHY` ...).
    pub env: BTreeMap<String, String>,
    /// Slurm's global GPU indices allocated to the step (PCI-bus order of the node's GPUs);
    /// empty: Slurm manages the node's GPUs and gave the step none; `None`: the node's GPUs
    /// are not Slurm's to give, every one is the step's.
    pub step_gpus: Option<Vec<u32>>,
}

/// The longest `SLURM_STEP_GPUS` text read: Slurm writes a few bytes per GPU.
pub const MAX_STEP_GPUS_TEXT: usize = 4096;

/// The largest GPU index accepted from Slurm (no node has this many GPUs).
pub const MAX_GPU_INDEX: u32 = 4095;

/// A `SLURM_STEP_GPUS` that is not a GPU index list Slurm would write. Keeps a short,
/// printable excerpt of the text (it may be huge or hold control characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SLURM_STEP_GPUS={shown} is not a GPU index list as Slurm writes it ({why}), so the GPUs Slurm gave the step are unknown; ask your administrator to check the node's GRES")]
pub struct StepGpusError {
    pub shown: String,
    pub why: String,
}

/// Reads Slurm's step GPU list (`0,1` or `0-1`), refusing anything Slurm would not write:
/// over [`MAX_STEP_GPUS_TEXT`] bytes, an index above [`MAX_GPU_INDEX`], or not a list. Cheap
/// whatever the input (the value reaches root's process from the job where Slurm does not
/// set it).
pub fn parse_step_gpus(text: &str) -> Result<Vec<u32>, StepGpusError> {
    let shown = || {
        let head: String = text.chars().take(40).collect();
        let more = if head.len() < text.len() { format!("... ({} bytes)", text.len()) } else { String::new() };
        format!("{:?}{more}", head)
    };
    let fail = |why: String| StepGpusError { shown: shown(), why };
    if text.len() > MAX_STEP_GPUS_TEXT {
        return Err(fail(format!("longer than {MAX_STEP_GPUS_TEXT} bytes")));
    }
    let set = CpuSet::parse_list(text.trim()).map_err(|e| fail(e.reason))?;
    match set.iter().last() {
        Some(last) if last > MAX_GPU_INDEX => Err(fail(format!("index {last} is above {MAX_GPU_INDEX}"))),
        _ => Ok(set.iter().collect()),
    }
}

/// The step's GPU list from `SLURM_STEP_GPUS` (`text`), for `spec`: unreadable text refuses
/// a spec that may use GPUs and is ignored by one that cannot (the plugin and `exec` alike).
pub fn step_gpus_for(text: Option<&str>, spec: &Spec) -> Result<Option<Vec<u32>>, StepGpusError> {
    match text.map(parse_step_gpus) {
        None => Ok(None),
        Some(Ok(list)) => Ok(Some(list)),
        Some(Err(e)) if spec_may_use_gpus(spec) => Err(e),
        Some(Err(_)) => Ok(None),
    }
}

/// What a step's `CUDA_VISIBLE_DEVICES` (or `ROCR_VISIBLE_DEVICES`) says, as Slurm wrote it
/// where its gres/gpu plugin runs: indices (the usual form), GPU UUIDs (gres.conf
/// `Flags=env_uuid`, 26.05), or MIG instances (`MIG-<uuid>`, always UUIDs on 26.05).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleDevices {
    Indices,
    Uuids(Vec<String>),
    Mig(Vec<String>),
}

/// Reads a `*_VISIBLE_DEVICES` value Slurm wrote.
pub fn visible_devices(text: &str) -> VisibleDevices {
    let items: Vec<String> = text.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    if items.iter().any(|i| i.to_ascii_uppercase().starts_with("MIG-")) {
        VisibleDevices::Mig(items)
    } else if !items.is_empty() && items.iter().all(|i| i.to_ascii_uppercase().starts_with("GPU-")) {
        VisibleDevices::Uuids(items)
    } else {
        VisibleDevices::Indices
    }
}

/// Why Slurm's own `CUDA_VISIBLE_DEVICES`/`ROCR_VISIBLE_DEVICES` (`var`) for the step cannot
/// be mapped ([`visible_gpus`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VisibleGpusError {
    #[error(
        "the step's GPUs are MIG instances ({var}={}): map-by-device names whole GPUs, and naming the parent GPU \
         would hide every MIG instance from CUDA; keep Slurm's assignment with --map-by-device=none, or map another \
         device class",
        crate::text::quoted(value)
    )]
    Mig { var: &'static str, value: String },
    /// A GPU UUID (`id`) the node's topology does not have.
    #[error("Slurm gave the step GPU {} ({var}), which this node's topology does not have", crate::text::excerpt(id))]
    Unknown { var: &'static str, id: String },
    /// The UUIDs name GPUs `uuids` (positions in PCI-bus order), `SLURM_STEP_GPUS` others.
    #[error(
        "Slurm's {var} names GPUs {uuids:?} in PCI-bus order, but SLURM_STEP_GPUS says {step_gpus:?}: gres.conf does \
         not list the GPUs in PCI-bus order (ask your administrator)"
    )]
    Order { var: &'static str, uuids: Vec<u32>, step_gpus: Vec<u32> },
}

/// What Slurm's own `CUDA_VISIBLE_DEVICES`/`ROCR_VISIBLE_DEVICES` for the step adds: GPU UUIDs
/// (`Flags=env_uuid`) name the step's GPUs without relying on gres.conf's order, and must
/// agree with `SLURM_STEP_GPUS`; MIG instances cannot be mapped (the plugin names whole GPUs:
/// their UUID would hide every MIG instance from CUDA), so the mapping is refused and
/// Slurm's value stays.
pub fn visible_gpus(
    env: &BTreeMap<String, String>,
    node: &Node,
    indices: Option<Vec<u32>>,
) -> Result<Option<Vec<u32>>, VisibleGpusError> {
    for var in crate::env::slurm_identity_variables() {
        let Some(value) = env.get(var) else { continue };
        match visible_devices(value) {
            VisibleDevices::Indices => {}
            VisibleDevices::Mig(_) => return Err(VisibleGpusError::Mig { var, value: value.clone() }),
            VisibleDevices::Uuids(ids) => {
                let by_uuid = node.gpu_indices_of(&ids).map_err(|id| VisibleGpusError::Unknown { var, id })?;
                let mut sorted = by_uuid.clone();
                sorted.sort_unstable();
                if let Some(list) = indices.as_ref().filter(|l| **l != sorted) {
                    return Err(VisibleGpusError::Order { var, uuids: sorted, step_gpus: list.clone() });
                }
                return Ok(Some(sorted));
            }
        }
    }
    Ok(indices)
}

/// Whether the spec can select GPUs: a GPU class, or a device named by the job (which may
/// be one).
pub fn spec_may_use_gpus(spec: &Spec) -> bool {
    !matches!(spec.target, Target::Class(DeviceClass::Network | DeviceClass::Block) | Target::None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_gpus_index_cap_refuses_above_4095_with_the_index() {
        assert_eq!(parse_step_gpus("4095"), Ok(vec![4095]));
        assert_eq!(parse_step_gpus("0,4094-4095"), Ok(vec![0, 4094, 4095]));
        for (text, index) in [("4096", 4096), ("0-4096", 4096), ("1,2,70000", 70000), ("0-1048576", 1_048_576)] {
            let e = parse_step_gpus(text).unwrap_err();
            assert_eq!(e.why, format!("index {index} is above {MAX_GPU_INDEX}"), "{text}");
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("SLURM_STEP_GPUS={text:?} is not a GPU index list")), "{msg}");
            assert!(msg.contains("ask your administrator to check the node's GRES"), "{msg}");
        }
    }

    #[test]
    fn step_gpus_of_wide_ranges_up_to_the_length_cap() {
        // The widest accepted: every index, 585 times over, in 4094 bytes.
        let wide = vec!["0-4095"; 585].join(",");
        assert!(wide.len() <= MAX_STEP_GPUS_TEXT, "{}", wide.len());
        let list = parse_step_gpus(&wide).unwrap();
        assert_eq!((list.len(), list.first(), list.last()), (4096, Some(&0), Some(&4095)));
        // As wide as CPU lists go, within the length cap: refused for the index, whole.
        let huge = vec!["0-1048576"; 409].join(",");
        assert!(huge.len() <= MAX_STEP_GPUS_TEXT, "{}", huge.len());
        let e = parse_step_gpus(&huge).unwrap_err();
        assert_eq!(e.why, "index 1048576 is above 4095");
        assert!(e.shown.ends_with(&format!("... ({} bytes)", huge.len())) && e.shown.len() < 80, "{}", e.shown);
        // One byte over the cap: refused before it is parsed.
        let over = format!("{wide},0-9");
        assert!(over.len() > MAX_STEP_GPUS_TEXT);
        assert_eq!(parse_step_gpus(&over).unwrap_err().why, format!("longer than {MAX_STEP_GPUS_TEXT} bytes"));
    }

    #[test]
    fn the_three_forms_slurm_writes() {
        assert_eq!(visible_devices("0,1"), VisibleDevices::Indices);
        assert_eq!(visible_devices(""), VisibleDevices::Indices);
        assert_eq!(visible_devices("GPU-aa,GPU-bb"), VisibleDevices::Uuids(vec!["GPU-aa".into(), "GPU-bb".into()]));
        assert!(matches!(visible_devices("MIG-1234,GPU-bb"), VisibleDevices::Mig(v) if v.len() == 2));
    }
}
