//! The vendor variables a mapped task is given: one table, one place.
//!
//! Each row says which devices it names and how (grammars and sources in
//! `docs/variables.md`). Values name devices by identity, never by an index whose meaning
//! depends on an ordering we do not control, so `CUDA_DEVICE_ORDER` is never set. Only tasks
//! mapped against a device get these; an existing value is replaced, because
//! `--map-by-device` is the more specific request.

use crate::device::{Device, DeviceClass, Fabric, GpuIdentity, Vendor, ZeHierarchy};
use crate::spec::EnvMode;
use std::collections::BTreeMap;

/// One variable: its name, the rule that computes it from a task's devices, and the grammar
/// its value must have (`docs/variables.md`). A value outside the grammar — a topology file or
/// driver file that put a newline, `=` or an escape sequence into a name — is never written:
/// the task's plan is refused instead ([`InvalidValue`]).
pub struct VendorVariable {
    pub name: &'static str,
    /// Who reads it, for docs and `--help`.
    pub reader: &'static str,
    /// Slurm's gres/gpu plugin writes it too (for the GPUs it allocated or bound).
    pub slurm_gres: bool,
    /// Slurm's gres/gpu may write it with GPU identities instead of indices (`GPU-<uuid>`
    /// with gres.conf `Flags=env_uuid`, `MIG-<uuid>` for MIG instances): the plugin reads
    /// those to check the step's GPUs ([`slurm_identity_variables`]).
    pub slurm_ids: bool,
    /// Written even with `env=none` (it names the assignment, selects nothing).
    pub always: bool,
    /// It names network adapters to a fabric library (NCCL, UCX, PSM3, libfabric's cxi
    /// provider) ([`fabric_variables`]).
    pub fabric: bool,
    value: fn(&Context) -> Computed,
    valid: fn(&str) -> bool,
}

/// A value a variable's grammar does not allow, with a printable excerpt of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable} would be {shown}, which is not a value {variable} takes (a topology or driver file gave a device a malformed name or identity); fix that file, or map other devices")]
pub struct InvalidValue {
    pub variable: &'static str,
    pub shown: String,
}

/// `[A-Za-z0-9_.-]+`: kernel device names (`mlx5_0`, `hfi1_0`, `renderD128`, `nvml0`).
fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Each comma-separated item passes `item`.
fn each(value: &str, item: fn(&str) -> bool) -> bool {
    value.split(',').all(item)
}

/// `GPU-` then hex groups separated by dashes (NVIDIA's `GPU-8-4-4-4-12`).
fn valid_cuda(v: &str) -> bool {
    each(v, |i| i.strip_prefix("GPU-").is_some_and(|u| u.len() <= 64 && u.split('-').all(is_hex)))
}

/// `GPU-` then 16 hex digits.
fn valid_rocr(v: &str) -> bool {
    each(v, |i| i.strip_prefix("GPU-").is_some_and(|u| u.len() == 16 && is_hex(u)))
}

/// `=name,name`.
fn valid_nccl(v: &str) -> bool {
    v.strip_prefix('=').is_some_and(|rest| each(rest, is_name))
}

/// The most entries UCX reads from `UCX_NET_DEVICES`: with more it aborts (an assertion on
/// its device array, `count <= 64`, in UCX 1.13 and 1.23; measured with `ucx_info`).
pub const UCX_MAX_DEVICES: usize = 64;

/// `name:port,name:port`, at most [`UCX_MAX_DEVICES`] of them.
fn valid_ucx(v: &str) -> bool {
    v.split(',').count() <= UCX_MAX_DEVICES
        && each(v, |i| {
            i.split_once(':').is_some_and(|(n, p)| is_name(n) && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// `name`, or `@(name|name)`.
fn valid_psm3(v: &str) -> bool {
    match v.strip_prefix("@(").and_then(|r| r.strip_suffix(')')) {
        Some(list) => list.split('|').all(is_name),
        None => is_name(v),
    }
}

/// `scheme://` then names, hex GUIDs and MACs joined by `:`; the schemes PMIx uses.
fn valid_pmix(v: &str) -> bool {
    each(v, |i| {
        i.split_once("://").is_some_and(|(scheme, rest)| {
            ["gpu", "fab", "ipv4", "ipv6", "blk"].contains(&scheme)
                && rest.len() <= 256
                && rest.split(':').filter(|p| !p.is_empty()).all(is_name)
                && !rest.is_empty()
        })
    })
}

/// `0,1.2`: Level Zero ordinals.
fn valid_ze_mask(v: &str) -> bool {
    each(v, |i| !i.is_empty() && i.split('.').all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
}

/// `cxiN`, N from 0 to 99 without a leading zero: the tokens libfabric's cxi provider
/// accepts in `FI_CXI_DEVICE_NAME` (`cxip_env_validate_device_token`, prov/cxi/src/cxip_info.c).
fn is_cxi(s: &str) -> bool {
    s.strip_prefix("cxi").is_some_and(|n| {
        (n.len() == 1 || (n.len() == 2 && !n.starts_with('0'))) && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// `cxi0,cxi1`.
fn valid_cxi(v: &str) -> bool {
    each(v, is_cxi)
}

/// What a row sees: the task's devices, the node's adapters for NCCL, the task's environment
/// (the rules read `ZE_FLAT_DEVICE_HIERARCHY`), and the Level Zero model in force where the
/// topology was discovered.
pub struct Context<'a> {
    pub devs: &'a [&'a Device],
    /// The adapters every task of the node holds or is paired with, in bus order: what the
    /// node-wide rows (`NCCL_IB_HCA`, `FI_CXI_DEVICE_NAME`) list, one value per node and step
    /// (NCCL requires the same value on every rank of a node, and picks each GPU's nearest
    /// among them itself; `docs/variables.md`); `None` = the task's own devices (a row asked
    /// about one device, as [`fabric_variables`] does).
    pub node_adapters: Option<&'a [&'a Device]>,
    pub task_env: &'a BTreeMap<String, String>,
    pub discovery_model: Option<ZeHierarchy>,
    /// `omp`: the OpenMP places of the task's binding, when it is bound and asked for them.
    pub omp: Option<Places>,
}

/// The OpenMP places a task's binding holds: how many, and of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Places {
    pub count: usize,
    /// Hardware threads (`hwtcpus`) rather than cores.
    pub threads: bool,
}

/// A row's answer: the value to write (if any) and a warning (if any).
type Computed = (Option<String>, Option<String>);

fn join(items: impl Iterator<Item = String>) -> Option<String> {
    let v: Vec<String> = items.collect();
    (!v.is_empty()).then(|| v.join(","))
}

fn cuda(c: &Context) -> Computed {
    (
        join(c.devs.iter().filter_map(|d| match d.gpu_id() {
            Some(GpuIdentity::Nvidia { uuid }) => Some(uuid.clone()),
            _ => None,
        })),
        None,
    )
}

fn rocr(c: &Context) -> Computed {
    (
        join(c.devs.iter().filter_map(|d| match d.gpu_id() {
            Some(GpuIdentity::Amd { unique_id }) => Some(format!("GPU-{unique_id}")),
            _ => None,
        })),
        None,
    )
}

/// An OpenFabrics adapter of Mellanox/NVIDIA with an RDMA address (never a function without
/// one, such as a VM's Ethernet VF: NCCL and UCX would try RDMA over it).
fn is_mellanox_ofa(d: &Device) -> bool {
    d.class == DeviceClass::Network
        && d.vendor == Vendor::Mellanox
        && d.ofed_name.is_some()
        && d.fabric == Some(Fabric::Rdma)
}

fn is_omnipath(d: &Device) -> bool {
    d.class == DeviceClass::Network && d.fabric == Some(Fabric::OmniPath) && d.ofed_name.is_some()
}

/// Whether `NCCL_IB_HCA` names `d`: an OpenFabrics adapter of Mellanox/NVIDIA with an RDMA address.
pub fn names_to_nccl(d: &Device) -> bool {
    is_mellanox_ofa(d)
}

/// NCCL matches prefixes unless the list starts with `=`: `=mlx5_0` is exactly mlx5_0. One
/// value for the whole node (`node_adapters`), the same in every task; a value the job set itself
/// is kept (it is the job's choice for every rank, which a per-node list would override).
fn nccl(c: &Context) -> Computed {
    if c.task_env.contains_key("NCCL_IB_HCA") {
        return (None, None);
    }
    let listed = c.node_adapters.unwrap_or(c.devs);
    (
        join(listed.iter().filter(|d| is_mellanox_ofa(d)).filter_map(|d| d.ofed_name.clone())).map(|v| format!("={v}")),
        None,
    )
}

/// libfabric's cxi provider restricts itself to the CXI devices `FI_CXI_DEVICE_NAME` lists
/// (a comma list, `cxi0,cxi1`; libfabric 1.21 and later). One value for the node, like
/// `NCCL_IB_HCA` and for the same reason (NCCL and RCCL reach Slingshot through this
/// provider, via the aws-ofi-nccl plugin, and need one adapter list on every rank of a
/// node): every Slingshot adapter the node's tasks hold or are paired with. Each reader then
/// picks a rank's adapter among them by locality itself (`docs/variables.md`). Written only
/// where hwloc names the CXI device (`cxiN`, hwloc 2.14 and later), never derived from the
/// interface's number; a value the job set is kept.
fn cxi(c: &Context) -> Computed {
    if c.task_env.contains_key("FI_CXI_DEVICE_NAME") {
        return (None, None);
    }
    let listed = c.node_adapters.unwrap_or(c.devs);
    (join(listed.iter().filter(|d| d.fabric == Some(Fabric::Slingshot)).filter_map(|d| d.cxi_name.clone())), None)
}

/// UCX matches `device:port` exactly and takes no glob: one entry per active port; an
/// adapter without an active port is left out, with a warning. More entries than UCX reads
/// (it aborts) are not written either: the warning says so.
fn ucx(c: &Context) -> Computed {
    let ofa: Vec<&&Device> = c.devs.iter().filter(|d| is_mellanox_ofa(d)).collect();
    let ports: Vec<String> = ofa
        .iter()
        .flat_map(|d| {
            let name = d.ofed_name.clone().unwrap_or_default();
            d.active_ports.iter().map(move |p| format!("{name}:{p}")).collect::<Vec<_>>()
        })
        .collect();
    if ports.len() > UCX_MAX_DEVICES {
        let warning = format!(
            "UCX_NET_DEVICES would name {} adapter ports, more than the {UCX_MAX_DEVICES} UCX reads (it aborts): not \
             set; give each task fewer adapters (ndev=)",
            ports.len()
        );
        return (None, Some(warning));
    }
    let value = join(ports.into_iter());
    let idle: Vec<&str> = ofa.iter().filter(|d| d.active_ports.is_empty()).map(|d| d.name.as_str()).collect();
    let warning = (!idle.is_empty()).then(|| {
        let (reports, it) = if idle.len() == 1 { ("reports", "it") } else { ("report", "them") };
        format!(
            "{} {reports} no active port, so UCX_NET_DEVICES does not name {it} (UCX needs device:port)",
            idle.join(", ")
        )
    });
    (value, warning)
}

/// PSM3 takes a device name (an fnmatch pattern with extended globs): `hfi1_0`, or
/// `@(hfi1_0|hfi1_1)` for several.
fn psm3(c: &Context) -> Computed {
    let names: Vec<String> = c.devs.iter().filter(|d| is_omnipath(d)).filter_map(|d| d.ofed_name.clone()).collect();
    let value = match names.len() {
        0 => None,
        1 => names.into_iter().next(),
        _ => Some(format!("@({})", names.join("|"))),
    };
    (value, None)
}

fn pmix(c: &Context) -> Computed {
    (join(c.devs.iter().filter_map(|d| d.pmix_id.clone())), None)
}

/// The Level Zero ordinals of the task's GPUs, with the model they belong to, or why no mask
/// can be written (`Ok(None)`: no Level Zero GPU).
fn level_zero(c: &Context) -> Result<Option<(String, ZeHierarchy)>, String> {
    let ze: Vec<(u32, u32)> = c
        .devs
        .iter()
        .filter_map(|d| match d.gpu_id() {
            Some(GpuIdentity::LevelZero { driver, device }) => Some((*driver, *device)),
            _ => None,
        })
        .collect();
    if ze.is_empty() {
        return Ok(None);
    }
    let drivers: std::collections::BTreeSet<u32> = ze.iter().map(|(d, _)| *d).collect();
    let wanted = c.task_env.get(ZE_FLAT_DEVICE_HIERARCHY);
    match (c.discovery_model, wanted) {
        _ if drivers.len() > 1 => Err(format!(
            "the assigned Level Zero GPUs belong to {} drivers, and ZE_AFFINITY_MASK is read per driver: \
             ZE_AFFINITY_MASK not set; map with ndev=1 or keep each task on one driver",
            drivers.len()
        )),
        (None, _) => Err("the Level Zero hierarchy model of the topology's discovery is unknown, so its ordinals \
                          cannot be trusted: ZE_AFFINITY_MASK not set; the admin sets ze_hierarchy in the plugin's config"
            .to_string()),
        (Some(model), Some(w)) if ZeHierarchy::parse(w) != Some(model) => Err(format!(
            "the task asks for ZE_FLAT_DEVICE_HIERARCHY={w} but the ordinals were recorded under {}: \
             ZE_AFFINITY_MASK and ZE_FLAT_DEVICE_HIERARCHY not set; unset ZE_FLAT_DEVICE_HIERARCHY or set it to {}",
            model.as_str(),
            model.as_str()
        )),
        (Some(model), _) => Ok(Some((ze.iter().map(|(_, d)| d.to_string()).collect::<Vec<_>>().join(","), model))),
    }
}

/// An OpenMP variable from the task's binding (`omp`), unless the task's environment already
/// has one: a value the user set is never replaced.
fn omp(c: &Context, name: &str, value: impl Fn(Places) -> String) -> Computed {
    match c.omp {
        Some(places) if !c.task_env.contains_key(name) => (Some(value(places)), None),
        _ => (None, None),
    }
}

fn omp_num_threads(c: &Context) -> Computed {
    omp(c, "OMP_NUM_THREADS", |p| p.count.to_string())
}

fn omp_places(c: &Context) -> Computed {
    omp(c, "OMP_PLACES", |p| if p.threads { "threads" } else { "cores" }.to_string())
}

fn omp_proc_bind(c: &Context) -> Computed {
    omp(c, "OMP_PROC_BIND", |_| "spread".to_string())
}

/// Level Zero ordinals, read under the model stated beside them (seed 001).
fn ze_mask(c: &Context) -> Computed {
    match level_zero(c) {
        Ok(found) => (found.map(|(mask, _)| mask), None),
        Err(warning) => (None, Some(warning)),
    }
}

/// The model the mask was recorded under, unless the task's environment already names it
/// (a different model refuses both, with the mask's warning).
fn ze_hierarchy(c: &Context) -> Computed {
    match (level_zero(c), c.task_env.get(ZE_FLAT_DEVICE_HIERARCHY)) {
        (Ok(Some((_, model))), None) => (Some(model.as_str().to_string()), None),
        _ => (None, None),
    }
}

/// Every variable this plugin writes, in the order they are set: one row each, with the
/// rule that computes it and the grammar its value must have (`docs/variables.md`).
#[doc(alias = "CUDA_VISIBLE_DEVICES")]
#[doc(alias = "ROCR_VISIBLE_DEVICES")]
#[doc(alias = "ZE_AFFINITY_MASK")]
#[doc(alias = "ZE_FLAT_DEVICE_HIERARCHY")]
#[doc(alias = "NCCL_IB_HCA")]
#[doc(alias = "UCX_NET_DEVICES")]
#[doc(alias = "PSM3_NIC")]
#[doc(alias = "FI_CXI_DEVICE_NAME")]
#[doc(alias = "PMIX_DEVICE_ID")]
pub const VARIABLES: [VendorVariable; 12] = [
    VendorVariable {
        name: "CUDA_VISIBLE_DEVICES",
        reader: "CUDA (NVIDIA GPUs, GPU-<uuid>)",
        slurm_gres: true,
        slurm_ids: true,
        always: false,
        fabric: false,
        value: cuda,
        valid: valid_cuda,
    },
    VendorVariable {
        name: "ROCR_VISIBLE_DEVICES",
        reader: "ROCm ROCr (AMD GPUs, GPU-<16 hex>)",
        slurm_gres: true,
        slurm_ids: true,
        always: false,
        fabric: false,
        value: rocr,
        valid: valid_rocr,
    },
    VendorVariable {
        name: ZE_AFFINITY_MASK,
        reader: "oneAPI Level Zero (Intel GPUs, ordinals under the stated hierarchy)",
        slurm_gres: true,
        slurm_ids: false,
        always: false,
        fabric: false,
        value: ze_mask,
        valid: valid_ze_mask,
    },
    VendorVariable {
        name: ZE_FLAT_DEVICE_HIERARCHY,
        reader: "oneAPI Level Zero (the model ZE_AFFINITY_MASK is read under)",
        slurm_gres: false,
        slurm_ids: false,
        always: false,
        fabric: false,
        value: ze_hierarchy,
        valid: |v| ZeHierarchy::parse(v).is_some(),
    },
    VendorVariable {
        name: "NCCL_IB_HCA",
        reader: "NCCL (InfiniBand/RoCE adapters, =name exact match)",
        slurm_gres: false,
        slurm_ids: false,
        always: false,
        fabric: true,
        value: nccl,
        valid: valid_nccl,
    },
    VendorVariable {
        name: "UCX_NET_DEVICES",
        reader: "UCX (adapter:port, exact match)",
        slurm_gres: false,
        slurm_ids: false,
        always: false,
        fabric: true,
        value: ucx,
        valid: valid_ucx,
    },
    VendorVariable {
        name: "PSM3_NIC",
        reader: "PSM3 (Intel Omni-Path adapters, by name)",
        slurm_gres: false,
        slurm_ids: false,
        always: false,
        fabric: true,
        value: psm3,
        valid: valid_psm3,
    },
    VendorVariable {
        name: "FI_CXI_DEVICE_NAME",
        reader: "libfabric's cxi provider (HPE Slingshot adapters, cxiN, one list per node)",
        slurm_gres: false,
        slurm_ids: false,
        always: false,
        fabric: true,
        value: cxi,
        valid: valid_cxi,
    },
    VendorVariable {
        name: "OMP_NUM_THREADS",
        reader: "OpenMP (omp: one thread per core of the binding, or per thread with hwtcpus)",
        slurm_gres: false,
        slurm_ids: false,
        always: false,
        fabric: false,
        value: omp_num_threads,
        valid: |v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()),
    },
    VendorVariable {
        name: "OMP_PLACES",
        reader: "OpenMP (omp: cores, or threads with hwtcpus, of the task's mask)",
        slurm_gres: false,
        slurm_ids: false,
        always: false,
        fabric: false,
        value: omp_places,
        valid: |v| v == "cores" || v == "threads",
    },
    VendorVariable {
        name: "OMP_PROC_BIND",
        reader: "OpenMP (omp: spread over the places)",
        slurm_gres: false,
        slurm_ids: false,
        always: false,
        fabric: false,
        value: omp_proc_bind,
        valid: |v| v == "spread",
    },
    VendorVariable {
        name: "PMIX_DEVICE_ID",
        reader: "PMIx device ids of every assigned device",
        slurm_gres: false,
        slurm_ids: false,
        always: true,
        fabric: false,
        value: pmix,
        valid: valid_pmix,
    },
];

pub const ZE_AFFINITY_MASK: &str = "ZE_AFFINITY_MASK";
pub const ZE_FLAT_DEVICE_HIERARCHY: &str = "ZE_FLAT_DEVICE_HIERARCHY";

/// The variables Slurm's gres/gpu plugin rewrites for each task when it binds GPUs to tasks
/// (`gres_g_task_set_env`): its own two and the rows of [`VARIABLES`] it also writes. A task
/// whose values differ from its step's was bound by Slurm.
pub fn slurm_gpu_variables() -> impl Iterator<Item = &'static str> {
    ["SLURM_STEP_GPUS", "GPU_DEVICE_ORDINAL"]
        .into_iter()
        .chain(VARIABLES.iter().filter(|v| v.slurm_gres).map(|v| v.name))
}

/// The rows Slurm's gres/gpu may write as GPU identities (`CUDA_VISIBLE_DEVICES`,
/// `ROCR_VISIBLE_DEVICES`): where a step's value names UUIDs or MIG instances.
pub fn slurm_identity_variables() -> impl Iterator<Item = &'static str> {
    VARIABLES.iter().filter(|v| v.slurm_ids).map(|v| v.name)
}

/// The fabric variables (`NCCL_IB_HCA`, `UCX_NET_DEVICES`, `PSM3_NIC`, `FI_CXI_DEVICE_NAME`)
/// that name network adapter `d` when a task holds it: the rows' own rules, so that what the
/// `network` class warns about is exactly what the rows write. A plain Ethernet port or a
/// function without RDMA gets none; so does an OpenFabrics device of a vendor no row knows
/// (AWS EFA), and a Slingshot NIC whose CXI device hwloc does not name (before 2.14).
pub fn fabric_variables(d: &Device) -> Vec<&'static str> {
    let devs = [d];
    let context =
        Context { devs: &devs, node_adapters: None, task_env: &BTreeMap::new(), discovery_model: None, omp: None };
    VARIABLES.iter().filter(|v| v.fabric && (v.value)(&context).0.is_some()).map(|v| v.name).collect()
}

/// Every variable name this plugin may write (for docs and the CLI).
pub fn all_names() -> Vec<&'static str> {
    VARIABLES.iter().map(|v| v.name).collect()
}

/// What a task's variables are computed from besides its devices: the node's adapters for
/// the node-wide rows (`None`: the devices' own), its environment, the Level Zero model in force where the
/// topology was discovered, the spec's `env=`, and the OpenMP places of its binding when
/// `omp` asks for them.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    pub node_adapters: Option<&'a [&'a Device]>,
    pub task_env: &'a BTreeMap<String, String>,
    pub discovery_model: Option<ZeHierarchy>,
    pub mode: EnvMode,
    pub omp: Option<Places>,
}

/// The variables for a task holding `devs`, given `inputs`. Returns the variables and any
/// warnings (one line each), or the first value its variable's grammar refuses.
pub fn task_env(devs: &[&Device], inputs: &Inputs) -> Result<(BTreeMap<String, String>, Vec<String>), InvalidValue> {
    let Inputs { node_adapters, task_env, discovery_model, mode, omp } = *inputs;
    let context = Context { devs, node_adapters, task_env, discovery_model, omp };
    let mut out = BTreeMap::new();
    let mut warnings = Vec::new();
    for var in VARIABLES.iter().filter(|v| mode == EnvMode::All || v.always) {
        let (value, warning) = (var.value)(&context);
        warnings.extend(warning);
        if let Some(v) = value {
            if !(var.valid)(&v) {
                return Err(InvalidValue { variable: var.name, shown: crate::text::quoted(&v) });
            }
            out.insert(var.name.to_string(), v);
        }
    }
    Ok((out, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurms_identity_forms_are_read_from_cuda_and_rocr() {
        let ids: Vec<&str> = slurm_identity_variables().collect();
        assert_eq!(ids, ["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"]);
        // Only variables Slurm's gres/gpu writes at all.
        assert!(ids.iter().all(|v| slurm_gpu_variables().any(|s| s == *v)));
    }

    /// More ports than UCX reads (it aborts past 64): no UCX_NET_DEVICES, and a warning that
    /// says why; NCCL_IB_HCA, which has no such bound, still names them.
    #[test]
    fn ucx_gets_no_more_ports_than_it_reads() {
        use crate::test_support::pci::{br, hca, node};
        let n = node((1..=65).map(|b| hca(b, 1, vec![br(None, b)])).collect());
        let devs: Vec<&Device> = n.devices.iter().collect();
        let inputs = Inputs {
            node_adapters: None,
            task_env: &BTreeMap::new(),
            discovery_model: None,
            mode: EnvMode::All,
            omp: None,
        };
        let (vars, warnings) = task_env(&devs, &inputs).unwrap_or_else(|e| panic!("{e}"));
        assert!(!vars.contains_key("UCX_NET_DEVICES") && vars.contains_key("NCCL_IB_HCA"), "{vars:?}");
        assert!(warnings.iter().any(|w| w.contains("65 adapter ports, more than the 64 UCX reads")), "{warnings:?}");
        let (vars, _) = task_env(&devs[..64], &inputs).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(vars["UCX_NET_DEVICES"].split(',').count(), 64);
    }

    #[test]
    fn grammars_take_what_runtimes_take_and_nothing_else() {
        assert!(valid_cuda("GPU-0e18d434-10b9-d275-6665-5047cb2555fa,GPU-96c8418c"));
        assert!(!valid_cuda("GPU-0e18d434\nLD_PRELOAD=/tmp/x") && !valid_cuda("0") && !valid_cuda("GPU-"));
        assert!(valid_rocr("GPU-0123456789abcdef") && !valid_rocr("GPU-0123") && !valid_rocr("GPU-0123456789abcdeg"));
        assert!(valid_nccl("=mlx5_0,mlx5_1") && !valid_nccl("mlx5_0") && !valid_nccl("=mlx5_0=x"));
        assert!(valid_ucx("mlx5_0:1,mlx5_1:2") && !valid_ucx("mlx5_0") && !valid_ucx("mlx5_0:1 x"));
        let ports = |n: usize| (0..n).map(|i| format!("mlx5_{i}:1")).collect::<Vec<_>>().join(",");
        assert!(valid_ucx(&ports(UCX_MAX_DEVICES)) && !valid_ucx(&ports(UCX_MAX_DEVICES + 1)));
        assert!(valid_psm3("hfi1_0") && valid_psm3("@(hfi1_0|hfi1_1)") && !valid_psm3("hfi1_0;rm"));
        assert!(valid_cxi("cxi0") && valid_cxi("cxi0,cxi12") && valid_cxi("cxi99"));
        assert!(
            !valid_cxi("cxi")
                && !valid_cxi("cxi01")
                && !valid_cxi("cxi100")
                && !valid_cxi("hsn0")
                && !valid_cxi("cxi0,")
        );
        assert!(valid_pmix("gpu://node07::nvml0,fab://9c63:c003:00fb:7458::9c63:c003:00fb:7458"));
        assert!(valid_pmix("ipv4://00:11:22:33:44:55,blk://nvme0n1"));
        assert!(!valid_pmix("gpu://node\u{1b}[2J::nvml0") && !valid_pmix("http://x") && !valid_pmix("gpu://"));
        assert!(valid_ze_mask("0,1.2") && !valid_ze_mask("0,,1") && !valid_ze_mask("a"));
    }
}
