//! The topology loader: turns an hwloc topology (this machine, or an `lstopo` XML export)
//! into the plain-data [`Topology`] that the rest of the crate reads.
//!
//! This is the only module that talks to hwloc, so hwloc's quirks stay here: I/O objects
//! must be asked for, `hwlocality` panics on some inputs, hwloc 2.9 refuses the v3 XML
//! that hwloc 3 writes, and hwloc lets the process environment replace the machine with
//! a file. Every failure becomes a one-line [`LoadError`] that names the input and the fix.
//
// --- Implementation notes ---
//
// Environment (live()): with no explicit source, `hwloc_topology_load` (hwloc 2.9) reads
// HWLOC_FSROOT, HWLOC_CPUID_PATH, HWLOC_SYNTHETIC and HWLOC_XMLFILE (first one set wins,
// unless HWLOC_COMPONENTS is set, which picks components itself); the Linux backend reads
// HWLOC_FSROOT again, HWLOC_THISSYSTEM overrides `is_this_system`, HWLOC_PCI_LOCALITY and
// HWLOC_PCI_<dom>_<bus>_LOCALCPUS rewrite device locality, HWLOC_ALLOW=all ignores
// cgroups, and HWLOC_PLUGINS_PATH makes `hwloc_topology_init` dlopen plugins from any
// directory (Debian ships hwloc's PCI and libxml support as plugins). hwloc has no API that
// turns this off: there is no "force the Linux backend" call (hwloc 2 removed
// `set_fsroot`), and measured here, blacklisting the "xml"/"synthetic" components with
// `hwloc_topology_set_components` does NOT stop HWLOC_XMLFILE or HWLOC_SYNTHETIC (they are
// force-enabled past the blacklist; it only stops HWLOC_COMPONENTS=xml). Editing the
// environment around the call is not an option either: setenv/unsetenv race with every
// other thread of slurmstepd. So `live()` refuses to load while any HWLOC_* variable is set,
// except the few that only change what hwloc prints to stderr (deny by default: hwloc
// gains variables over releases), and then checks `is_this_system()` as a second guard.
// `tests/load.rs` runs live() in a child process with HWLOC_XMLFILE set to prove it.
//
// Whole machine: every load sets INCLUDE_DISALLOWED, so the tree is the node, not the
// part of it the calling process's cgroup allows (slurmstepd runs inside the step's
// cgroup). Whoever plans intersects with the step's CPUs. This changes nothing for the
// stored XML exports (measured: same PU counts either way).
//
// XML files are read by Rust (a missing or unreadable path is an io::Error naming the path;
// `hwlocality`'s own `from_xml_file` panics on a missing path) and handed to hwloc as a
// buffer. Invalid UTF-8 is replaced (only info strings could carry it). On rejection the
// text is sniffed for its format version to explain a refusal of a newer format: hwloc 2.9
// refuses XML 3.0 (what hwloc 3 writes), 2.10 and later (trixie's 2.12, sid's 2.15) import
// 3.0 and refuse 3.1 and above. Which of the two the linked libhwloc is, is asked of it (a tiny
// 3.0 document, once, only after a refusal), not assumed from the version built against: the
// library can be upgraded under the plugin.
//
// Panics: `hwlocality` uses `expect`/`unreachable!` for "cannot happen" hwloc answers; each
// load runs inside `catch_unwind` and a panic becomes `LoadError::Panicked`.
//
// Objects are matched to indexes by address (`&TopologyObject` is a reference into the
// hwloc tree, stable while the topology lives), which needs no trust in gp_index values
// read from an XML file.

use crate::cpuset::{CpuSet, MAX_CPU};
use crate::topology::{CpuObject, LooseOsDevice, ObjKind, OsDevice, PciBridge, PciBusId, PciFunction, Topology};
use hwlocality::object::attributes::{DownstreamAttributes, ObjectAttributes, PCIDeviceAttributes, UpstreamAttributes};
use hwlocality::object::types::{OSDeviceType, ObjectType};
use hwlocality::object::TopologyObject;
use hwlocality::topology::builder::{BuildFlags, StringInputError, TopologyBuilder, TypeFilter};
use std::collections::HashMap;
use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a topology could not be loaded. Each message is one line: what failed, on which
/// input, and what to do about it.
///
/// The errors a discovery child can send back cross its pipe as JSON ([`crate::bounded`]); the
/// two that hold an I/O error are the parent's own and never do.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum LoadError {
    #[error("cannot read topology XML {}: {source} (check the file's path)", path.display())]
    #[serde(skip)]
    Read { path: PathBuf, source: std::io::Error },

    #[error(
        "this hwloc cannot import topology XML {input}: it is XML {format}, written by a newer hwloc \
         (hwloc 2.10 and later read 3.0; re-export it there with `lstopo --export-xml-flags v2 FILE.xml`)"
    )]
    XmlV3 { input: String, format: String },

    #[error(
        "hwloc rejected topology XML {input}{detail} (is it an lstopo XML export? \
         `lstopo -i FILE.xml` shows what hwloc makes of it)"
    )]
    XmlRejected { input: String, detail: String },

    #[error(
        "refusing to read this machine's topology while {name}={value} is set: hwloc would \
         read it instead of the hardware (unset it in slurmd's environment, or set \
         topology= to an XML file)"
    )]
    Environment { name: String, value: String },

    #[error("hwloc failed to {step} for {input}: {detail}")]
    Hwloc { input: String, step: String, detail: String },

    #[error(
        "hwloc did not describe this machine when asked for it (a HWLOC_* setting or plugin?); refusing to use it"
    )]
    NotThisSystem,

    #[error("internal error in the hwloc bindings while loading {input}: {message} (please report it with the input)")]
    Panicked { input: String, message: String },

    #[error(
        "hwloc could not read topology XML {input}: {why} (the file is malformed: hwloc 2.9 crashes on some \
         damaged exports, `lstopo -i FILE.xml` shows it; export it again with lstopo)"
    )]
    XmlCrashed { input: String, why: String },

    #[error("cannot use topology={}: {source}", path.display())]
    #[serde(skip)]
    Untrusted { path: PathBuf, source: crate::trusted_fs::TrustError },

    #[error(
        "hwloc's discovery backend {backends} described part of this machine, but live discovery uses only \
         {allowed}; refusing the topology (remove that hwloc plugin from the node, or set topology= to an XML file)"
    )]
    UnexpectedBackend { backends: String, allowed: String },

    #[error("discovering this machine failed: {message}")]
    Discovery { message: String },

    /// hwloc's child could not be confined ([`crate::bounded`]): it ran nothing.
    #[error("refusing to run hwloc for {input}: {source}")]
    Unconfined { input: String, source: crate::bounded::ConfineError },

    #[error(
        "discovering this machine with hwloc failed: {source}; check the node's hardware and drivers, raise \
         discovery_timeout in the plugin's config, or set topology= to an XML file"
    )]
    Bounded { source: crate::bounded::BoundedError },
}

/// Loads an `lstopo` XML export (hwloc XML v1 or v2). Anything but a regular file (a FIFO,
/// a device such as `/dev/zero`) is refused before it is read, as is a file over the cap.
pub fn from_xml_file(path: &Path) -> Result<Topology, LoadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |source| LoadError::Read { path: path.to_path_buf(), source };
    // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then says what it is.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if !meta.is_file() {
        return Err(fail(std::io::Error::other("not a regular file")));
    }
    if meta.len() > MAX_XML_BYTES {
        return Err(fail(std::io::Error::other(format!("{} bytes, larger than any topology export", meta.len()))));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_XML_BYTES + 1).read_to_end(&mut bytes).map_err(fail)?;
    if bytes.len() as u64 > MAX_XML_BYTES {
        return Err(fail(std::io::Error::other("larger than any topology export")));
    }
    from_xml_bytes(&bytes, &path.display().to_string())
}

/// Loads the bytes of an `lstopo` XML export named `input` (for messages), as the file
/// loaders do: invalid UTF-8 replaced, and hwloc's import run in a child process so that a
/// damaged file that crashes hwloc is an error, not a crash ([`LoadError::XmlCrashed`]).
pub fn from_xml_bytes(bytes: &[u8], input: &str) -> Result<Topology, LoadError> {
    load_xml_isolated(&String::from_utf8_lossy(bytes), input.to_string())
}

/// Loads an `lstopo` XML export that root reads on the job's behalf (the plugin's
/// `topology=`): the file and every directory above it must be root's and writable only by
/// root ([`crate::trusted_fs`]), so that no user can change what the steps are told.
pub fn from_trusted_xml_file(path: &Path) -> Result<Topology, LoadError> {
    let bytes = crate::trusted_fs::read_file(path, MAX_XML_BYTES)
        .map_err(|source| LoadError::Untrusted { path: path.to_path_buf(), source })?;
    from_xml_bytes(&bytes, &path.display().to_string())
}

/// Real exports are a few MiB at most (a 2,048-PU node with its I/O); the cap keeps a wrong
/// path from eating memory.
const MAX_XML_BYTES: u64 = 64 << 20;

/// Loads XML text (the contents of an `lstopo` XML export) in this process. hwloc 2.9 can
/// crash on damaged XML (see [`load_xml_isolated`]): the file loaders, which read what an
/// admin or a user wrote, run the import in a child process instead; this one is for text the
/// caller vouches for, and for the fuzz target that looks for those crashes.
pub fn from_xml_str(xml: &str) -> Result<Topology, LoadError> {
    let _hwloc = hwloc_lock();
    load_xml(xml, format!("<XML text of {} bytes>", xml.len()))
}

/// Held around every use of hwloc in this process, and across the `fork` of a child that
/// uses it. A child forked while another thread is inside hwloc (its component list lock,
/// libxml2's) would wait for that lock forever: measured, the test harness's parallel XML
/// loads left children hung until their deadline. The children themselves never take it.
static HWLOC: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn hwloc_lock() -> std::sync::MutexGuard<'static, ()> {
    // Poisoned only by a panic in the bindings, which `guarded` has already turned into an
    // error: the lock still does its job.
    HWLOC.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Discovers this machine, with its I/O devices, in a child process that is killed if it
/// takes longer than `timeout` (see [`crate::bounded`]). Refuses while the process
/// environment holds an HWLOC_* variable that could make hwloc describe something else, and
/// uses only the hwloc components the plugin needs ([`UNNEEDED_COMPONENTS`]).
pub fn live(timeout: Duration) -> Result<Topology, LoadError> {
    // Read in the parent: the child of a multi-threaded process must not take the
    // environment's lock.
    check_environment()?;
    let pause = crate::test_hooks::pause_planned("live-discovery");
    let _hwloc = hwloc_lock();
    let discover = || {
        if let Some(p) = pause {
            p.wait();
        }
        live_here()
    };
    bounded_discovery(in_child(timeout, discover))
}

/// Runs `f`, which uses hwloc, in a [`crate::bounded`] child (in `/`, without a root it could
/// regain) whose hwloc loads no plugin of an [`UNNEEDED_COMPONENTS`] name.
///
/// Blacklisting a component ([`without`]) keeps hwloc from *running* it, but hwloc loads every
/// plugin it finds, with the libraries they link (`hwloc_opencl`: libOpenCL; `hwloc_gl`:
/// libX11, libXNVCtrl), when the process's first topology is initialised, before any
/// blacklist. hwloc (since 1.11.3) skips the plugins that `HWLOC_PLUGINS_BLACKLIST` names, read
/// from the environment at that moment: the child sets it, first in its environment (the
/// first entry of a name is the one `getenv` answers), before hwloc first runs there. The
/// entry is made in the parent; the child only builds a new `environ` array (no lock is
/// taken: `setenv`'s could be held by a thread of the parent that the child has not).
fn in_child<T, F>(timeout: Duration, f: F) -> Result<Result<T, LoadError>, crate::bounded::BoundedError>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
    F: FnOnce() -> Result<T, LoadError>,
{
    let blacklist = plugins_blacklist();
    crate::bounded::run(timeout, || {
        put_first_in_environment(&blacklist);
        f()
    })
}

/// `HWLOC_PLUGINS_BLACKLIST=hwloc_gl,hwloc_cuda,...`: the plugin name of every
/// [`UNNEEDED_COMPONENTS`] entry (hwloc names a plugin after its file, `hwloc_<component>`; a
/// name no plugin has is harmless).
pub fn plugins_blacklist() -> std::ffi::CString {
    let names: Vec<String> = UNNEEDED_COMPONENTS.iter().map(|c| format!("hwloc_{c}")).collect();
    // No NUL in these constant names.
    std::ffi::CString::new(format!("HWLOC_PLUGINS_BLACKLIST={}", names.join(","))).unwrap_or_default()
}

/// In a discovery child: `entry` (`NAME=value`) becomes the first entry of the process
/// environment, ahead of the existing ones. `entry` must outlive every use of the
/// environment in the child (it lives until the child exits).
fn put_first_in_environment(entry: &std::ffi::CStr) {
    extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    let mut entries: Vec<*mut libc::c_char> = vec![entry.as_ptr().cast_mut()];
    // SAFETY: the child is single-threaded, so nothing changes `environ` meanwhile; it is
    // null or a null-terminated array of NUL-terminated strings, which are only copied as
    // pointers. The new array is leaked: it is the environment until the child exits, and
    // hwloc only reads it (getenv).
    unsafe {
        let mut at = environ;
        while !at.is_null() && !(*at).is_null() {
            entries.push(*at);
            at = at.add(1);
        }
        entries.push(std::ptr::null_mut());
        environ = Box::leak(entries.into_boxed_slice()).as_mut_ptr();
    }
}

/// The discovery itself, in the calling process (the child of [`live`]).
fn live_here() -> Result<Topology, LoadError> {
    discover_here(|topo| {
        check_backends(&backends_ran(topo))?;
        Ok(convert(topo))
    })
}

/// hwloc's discovery of this machine as [`live`] runs it, in the calling process, handed to
/// `then`.
fn discover_here<T>(then: impl FnOnce(&hwlocality::Topology) -> Result<T, LoadError>) -> Result<T, LoadError> {
    let input = "this machine".to_string();
    guarded(&input, |input| {
        let mut builder = builder(input)?;
        for name in UNNEEDED_COMPONENTS {
            builder = without(builder, name, input)?;
        }
        let topo = build(builder, input)?;
        if !topo.is_this_system() {
            return Err(LoadError::NotThisSystem);
        }
        then(&topo)
    })
}

/// The discovery backends that took part in live discovery of this machine (as [`live`]
/// runs it, in a bounded child, without refusing any): what `check` shows, and what a test
/// compares with [`ALLOWED_BACKENDS`].
pub fn live_backends(timeout: Duration) -> Result<Vec<String>, LoadError> {
    check_environment()?;
    let _hwloc = hwloc_lock();
    bounded_discovery(in_child(timeout, || discover_here(|t| Ok(backends_ran(t)))))
}

/// What a bounded discovery's child answered, as [`live`] reports it: its refusal (or a panic
/// outside hwloc's guard) said as a failed discovery, a child that gave no answer as such.
fn bounded_discovery<T>(answer: Result<Result<T, LoadError>, crate::bounded::BoundedError>) -> Result<T, LoadError> {
    match answer {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => Err(LoadError::Discovery { message: e.to_string() }),
        Err(e @ crate::bounded::BoundedError::Panicked) => Err(LoadError::Discovery { message: e.to_string() }),
        Err(crate::bounded::BoundedError::Unconfined(source)) => {
            Err(LoadError::Unconfined { input: "this machine".into(), source })
        }
        Err(e) => Err(LoadError::Bounded { source: e }),
    }
}

/// The discovery backends whose results live discovery accepts, as hwloc names them in the
/// `Backend` info it adds to what a backend described (the root object for the OS backends,
/// each OS device for the GPU backends): the Linux core (its I/O part and hwloc's `pci`
/// component add no such info), hwloc's x86 CPUID backend, and the GPU backends that name GPUs.
/// [`UNNEEDED_COMPONENTS`] keeps the others from running, but hwloc can only blacklist: a
/// component this list does not know (a newer hwloc's, a site's plugin) would still run, so
/// a topology that shows any other backend's work is refused ([`check_backends`]).
pub const ALLOWED_BACKENDS: [&str; 5] = ["Linux", "x86", "NVML", "RSMI", "LevelZero"];

/// The `Backend` infos of every object of `topo`, each once, in the order found.
fn backends_ran(topo: &hwlocality::Topology) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for obj in topo.objects() {
        for info in obj.infos().iter().filter(|i| i.name().to_bytes() == b"Backend") {
            let name = info.value().to_string_lossy().into_owned();
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// Refuses a live topology that a backend outside [`ALLOWED_BACKENDS`] contributed to.
pub fn check_backends(ran: &[String]) -> Result<(), LoadError> {
    let unexpected: Vec<&str> = ran.iter().map(String::as_str).filter(|b| !ALLOWED_BACKENDS.contains(b)).collect();
    if unexpected.is_empty() {
        return Ok(());
    }
    Err(LoadError::UnexpectedBackend {
        backends: unexpected.iter().map(|b| crate::text::excerpt(b)).collect::<Vec<_>>().join(", "),
        allowed: ALLOWED_BACKENDS.join(", "),
    })
}

/// hwloc discovery components live discovery never uses: only the OS core (`linux`, with
/// `x86` and `no_os`), the PCI bus (`pci`) and the GPU backends that name GPUs (`nvml`,
/// `rsmi`, `levelzero`) may run. `gl` is the reason this list exists: Debian's
/// libhwloc-plugins ships it, and it connects to X displays `:0` to `:9` (abstract sockets
/// any local user can bind), so a user who answers never made slurmd hang at its start and
/// made root parse that user's replies. `cuda` is the same pattern (issue 27): its `cuInit`
/// makes root a client of an MPS server at the default pipe directory (`/tmp/nvidia-mps`),
/// which any user can start; NVML gives the same GPU UUIDs without a CUDA context. `opencl`
/// loads every OpenCL ICD on the node and gives no identity; `xml`, `synthetic` and `fake`
/// describe something other than the machine; the rest belong to other operating systems.
/// hwloc's API can only blacklist, so the list names every component hwloc 2.9 to 2.15 have
/// that is not needed (a name this hwloc lacks is skipped).
pub const UNNEEDED_COMPONENTS: [&str; 14] = [
    "gl",
    "cuda",
    "opencl",
    "xml",
    "synthetic",
    "fake",
    "aix",
    "bgq",
    "darwin",
    "freebsd",
    "hpux",
    "netbsd",
    "solaris",
    "windows",
];

/// Blacklists one component; a component this hwloc does not have (EINVAL) is fine.
fn without(builder: TopologyBuilder, name: &str, input: &str) -> Result<TopologyBuilder, LoadError> {
    // hwlocality consumes the builder even when hwloc refuses the name, so ask on a probe
    // first: hwloc answers EINVAL for a name it does not know.
    if !component_exists(name) {
        return Ok(builder);
    }
    builder.without_component(name).map_err(|e| LoadError::Hwloc {
        input: input.to_string(),
        step: "leave out an unneeded discovery component".into(),
        detail: format!("{name}: {e}"),
    })
}

/// Whether this hwloc has discovery component `name` (built in, or a plugin it loaded).
pub fn has_component(name: &str) -> bool {
    let _hwloc = hwloc_lock();
    component_exists(name)
}

/// Whether this hwloc knows discovery component `name` (blacklisting it on a throwaway
/// builder succeeds).
fn component_exists(name: &str) -> bool {
    hwlocality::Topology::builder().without_component(name).is_ok()
}

/// HWLOC_* variables that only change hwloc's diagnostics on stderr.
fn harmless(name: &str) -> bool {
    name == "HWLOC_HIDE_ERRORS" || name.ends_with("_VERBOSE")
}

fn check_environment() -> Result<(), LoadError> {
    for (name, value) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("HWLOC_") && !harmless(&name) {
            return Err(LoadError::Environment {
                name: name.into_owned(),
                value: value.to_string_lossy().into_owned(),
            });
        }
    }
    Ok(())
}

fn load_xml(xml: &str, input: String) -> Result<Topology, LoadError> {
    guarded(&input, |input| {
        let rejected = |detail: &str| match xml_format(xml) {
            Some((major, minor)) if format_too_new(major, minor) => {
                LoadError::XmlV3 { input: input.to_string(), format: format!("{major}.{minor}") }
            }
            _ => LoadError::XmlRejected { input: input.to_string(), detail: detail.to_string() },
        };
        let builder = builder(input)?.from_xml(xml).map_err(|e| match e {
            StringInputError::ContainsNul => rejected(": it contains a NUL byte"),
            StringInputError::Invalid => rejected(""),
        })?;
        let topo = build(builder, input).map_err(|_| rejected(""))?;
        // hwloc 2.9 to 2.15 import a document whose root object is not the Machine (found by
        // the XML fuzz target: a root of type Package loads); no lstopo export has one, and
        // the rest of the crate takes the first object for the whole node.
        let root = topo.root_object().object_type();
        if root != ObjectType::Machine {
            return Err(rejected(&format!(": its root object is a {root}, not the Machine")));
        }
        Ok(convert(&topo))
    })
}

/// How long an XML import may take in its child (a 200 kB export takes a few ms).
const XML_TIMEOUT: Duration = Duration::from_secs(60);

/// [`load_xml`] in a child process ([`crate::bounded`]). hwloc 2.9's XML import dereferences
/// NULL on some damaged files (an object without `complete_cpuset` crashes it, and
/// `lstopo -i` alike; found by `fuzz/fuzz_targets/xml_load.rs`): in slurmd or slurmstepd that
/// would be a crashed daemon, here it is a [`LoadError::XmlCrashed`] that names the file.
fn load_xml_isolated(xml: &str, input: String) -> Result<Topology, LoadError> {
    let _hwloc = hwloc_lock();
    match in_child(XML_TIMEOUT, || load_xml(xml, input.clone())) {
        // The refusals load_xml makes (XmlV3, XmlRejected, Hwloc, Panicked), as they were.
        Ok(result) => result,
        Err(crate::bounded::BoundedError::Unconfined(source)) => Err(LoadError::Unconfined { input, source }),
        Err(e) => Err(LoadError::XmlCrashed { input, why: e.to_string() }),
    }
}

/// The format version the `<topology ...>` start tag declares (`version="3.0"` -> (3, 0)).
fn xml_format(xml: &str) -> Option<(u32, u32)> {
    let tag = &xml[xml.find("<topology")?..];
    let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
    let value = tag.split_once("version=")?.1;
    let quote = value.chars().next().filter(|q| *q == '"' || *q == '\'')?;
    let value = &value[1..];
    let value = &value[..value.find(quote)?];
    let (major, minor) = value.split_once('.').unwrap_or((value, "0"));
    Some((major.trim().parse().ok()?, minor.trim().parse().ok()?))
}

/// Whether the linked hwloc refuses XML of this format version for being too new: every hwloc 2
/// refuses 3.1 and above; 3.0 is refused by hwloc before 2.10 only.
fn format_too_new(major: u32, minor: u32) -> bool {
    match (major, minor) {
        (0..=2, _) => false,
        (3, 0) => !reads_xml_3_0(),
        _ => true,
    }
}

/// Whether the linked hwloc imports XML 3.0: asked once, with the smallest such document.
fn reads_xml_3_0() -> bool {
    static READS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READS.get_or_init(|| {
        const TINY_V3: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<topology version=\"3.0\">\n\
             <object type=\"Machine\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" \
             allowed_cpuset=\"0x00000001\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" \
             allowed_nodeset=\"0x00000001\" gp_index=\"1\">\n\
             <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" \
             nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"2\"/>\n\
             <object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" \
             nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" gp_index=\"3\"/>\n\
             </object>\n</topology>\n";
        catch_unwind(AssertUnwindSafe(|| {
            hwlocality::Topology::builder().from_xml(TINY_V3).ok().is_some_and(|b| b.build().is_ok())
        }))
        .unwrap_or(false)
    })
}

/// Runs `f`, turning a panic in the hwloc bindings into an error.
fn guarded<T>(input: &str, f: impl FnOnce(&str) -> Result<T, LoadError>) -> Result<T, LoadError> {
    catch_unwind(AssertUnwindSafe(|| f(input))).unwrap_or_else(|payload| {
        Err(LoadError::Panicked { input: input.to_string(), message: crate::panics::text(payload.as_ref()) })
    })
}

fn builder(input: &str) -> Result<TopologyBuilder, LoadError> {
    let fail = |step: &str, detail: String| LoadError::Hwloc { input: input.to_string(), step: step.into(), detail };
    hwlocality::Topology::builder()
        .with_io_type_filter(TypeFilter::KeepImportant)
        .map_err(|e| fail("keep I/O objects", e.to_string()))?
        .with_flags(BuildFlags::INCLUDE_DISALLOWED)
        .map_err(|e| fail("set the build flags", e.to_string()))
}

fn build(builder: TopologyBuilder, input: &str) -> Result<hwlocality::Topology, LoadError> {
    builder.build().map_err(|e| LoadError::Hwloc {
        input: input.to_string(),
        step: "load the topology".into(),
        detail: e.to_string(),
    })
}

/// Object address -> index into `Topology::objects`.
type Index = HashMap<*const TopologyObject, usize>;

fn convert(topo: &hwlocality::Topology) -> Topology {
    let root = topo.root_object();
    let mut out =
        Topology { hostname: root.info("HostName").map(|v| v.to_string_lossy().into_owned()), ..Topology::default() };
    let mut index = Index::new();
    add_cpu_tree(root, None, 0, &mut out.objects, &mut index);

    let locality = |obj: &TopologyObject| {
        obj.first_non_io_ancestor().and_then(|a| index.get(&std::ptr::from_ref(a)).copied()).unwrap_or(0)
    };
    for pci in topo.pci_devices() {
        let Some(ObjectAttributes::PCIDevice(attr)) = pci.attributes() else {
            continue;
        };
        let osdevs: Vec<OsDevice> =
            pci.io_children().filter(|c| c.object_type() == ObjectType::OSDevice).map(os_device).collect();
        // A function with no OS device names nothing, except an NVIDIA GPU whose driver runs
        // without nvidia-drm under an hwloc without NVML: its driver file names it
        // (`enumerate`).
        if osdevs.is_empty() && !(attr.class_id() >> 8 == 0x03 && attr.vendor_id() == 0x10de) {
            continue;
        }
        out.pci.push(PciFunction {
            busid: busid(attr),
            vendor_id: attr.vendor_id(),
            device_id: attr.device_id(),
            class_id: attr.class_id(),
            locality: locality(pci),
            osdevs,
            bridges: bridges(pci),
        });
    }
    for dev in topo.os_devices() {
        if dev.parent().map(TopologyObject::object_type) != Some(ObjectType::PCIDevice) {
            out.loose.push(LooseOsDevice { osdev: os_device(dev), locality: locality(dev) });
        }
    }
    out
}

/// The I/O ancestors of a PCI function up to its locality, outermost first: hwloc's
/// `Bridge` objects (kept by the `KeepImportant` filter when they lead to a device it keeps),
/// and a PCI function above another (rare; kept as a bridge with its own bus as the range).
fn bridges(pci: &TopologyObject) -> Vec<PciBridge> {
    let mut out = Vec::new();
    for obj in pci.ancestors() {
        let bridge = match (obj.object_type(), obj.attributes()) {
            (ObjectType::Bridge, Some(ObjectAttributes::Bridge(attr))) => {
                let busid = attr.upstream_attributes().map(|UpstreamAttributes::PCI(up)| busid(up));
                match attr.downstream_attributes() {
                    Some(DownstreamAttributes::PCI(down)) => PciBridge {
                        busid,
                        domain: u32::from(down.domain()),
                        secondary_bus: down.secondary_bus(),
                        subordinate_bus: down.subordinate_bus(),
                    },
                    None => {
                        PciBridge { busid, domain: busid.map_or(0, |b| b.domain), secondary_bus: 0, subordinate_bus: 0 }
                    }
                }
            }
            (ObjectType::PCIDevice, Some(ObjectAttributes::PCIDevice(attr))) => {
                let own = busid(attr);
                PciBridge { busid: Some(own), domain: own.domain, secondary_bus: own.bus, subordinate_bus: own.bus }
            }
            (ObjectType::Bridge | ObjectType::PCIDevice, _) => continue,
            _ => break, // the locality: the chain ends here
        };
        out.push(bridge);
    }
    out.reverse();
    out
}

fn busid(attr: &PCIDeviceAttributes) -> PciBusId {
    PciBusId {
        domain: u32::from(attr.domain()),
        bus: attr.bus_id(),
        device: attr.bus_device(),
        function: attr.function(),
    }
}

/// Appends `obj`, its memory children (NUMA nodes) and then its normal children, depth
/// first, so parents come before children.
fn add_cpu_tree(
    obj: &TopologyObject,
    parent: Option<usize>,
    depth: u32,
    objects: &mut Vec<CpuObject>,
    index: &mut Index,
) {
    let me = objects.len();
    objects.push(cpu_object(obj, parent, depth));
    index.insert(std::ptr::from_ref(obj), me);
    add_memory(obj, me, depth, objects, index);
    for child in obj.normal_children() {
        add_cpu_tree(child, Some(me), depth + 1, objects, index);
    }
}

/// Memory children hang off the normal object `owner`; a NUMA node behind a memory-side
/// cache (MemCache, kept as `Other`) is still attached to `owner`.
fn add_memory(obj: &TopologyObject, owner: usize, depth: u32, objects: &mut Vec<CpuObject>, index: &mut Index) {
    for child in obj.memory_children() {
        index.insert(std::ptr::from_ref(child), objects.len());
        objects.push(cpu_object(child, Some(owner), depth));
        add_memory(child, owner, depth, objects, index);
    }
}

fn cpu_object(obj: &TopologyObject, parent: Option<usize>, depth: u32) -> CpuObject {
    let kind = match obj.object_type() {
        ObjectType::Machine => ObjKind::Machine,
        ObjectType::Package => ObjKind::Package,
        ObjectType::Die => ObjKind::Die,
        ObjectType::Group => ObjKind::Group,
        ObjectType::NUMANode => ObjKind::NumaNode,
        ObjectType::L3Cache => ObjKind::L3Cache,
        ObjectType::L2Cache => ObjKind::L2Cache,
        ObjectType::L1Cache => ObjKind::L1Cache,
        ObjectType::Core => ObjKind::Core,
        ObjectType::PU => ObjKind::Pu,
        _ => ObjKind::Other,
    };
    let mut cpuset = CpuSet::new();
    if let Some(set) = obj.cpuset() {
        for cpu in set.iter_set().map(usize::from) {
            match u32::try_from(cpu) {
                Ok(cpu) if cpu <= MAX_CPU => cpuset.insert(cpu),
                _ => break, // an infinite or absurd set; the ascending walk can stop
            }
        }
    }
    CpuObject {
        kind,
        logical_index: u32::try_from(obj.logical_index()).unwrap_or(u32::MAX),
        os_index: obj.os_index().and_then(|i| u32::try_from(i).ok()),
        depth,
        parent,
        cpuset,
    }
}

fn os_device(obj: &TopologyObject) -> OsDevice {
    let osdev_type = match obj.attributes() {
        Some(ObjectAttributes::OSDevice(attr)) => match attr.device_type() {
            OSDeviceType::Storage => "Block".to_string(),
            OSDeviceType::GPU => "GPU".to_string(),
            OSDeviceType::Network => "Network".to_string(),
            OSDeviceType::OpenFabrics => "OpenFabrics".to_string(),
            OSDeviceType::DMA => "DMA".to_string(),
            OSDeviceType::CoProcessor => "CoProc".to_string(),
            other => format!("{other:?}"),
        },
        _ => "Unknown".to_string(),
    };
    let text = |s: &std::ffi::CStr| s.to_string_lossy().into_owned();
    OsDevice {
        name: obj.name().map(text).unwrap_or_default(),
        osdev_type,
        subtype: obj.subtype().map(text),
        infos: obj.infos().iter().map(|i| (text(i.name()), text(i.value()))).collect(),
    }
}
