//! The XML loader as the plugin and the CLI use it (`load::from_xml_bytes`: hwloc's own XML
//! import, in a child process) on mutated fixture XML: it never panics or crashes this
//! process (an input that crashes hwloc itself is an `XmlCrashed` error, see src/load.rs);
//! a refusal is one printable line; a topology it returns is well formed (the Machine first, parents before children, localities that are
//! objects), survives the cache's JSON round trip unchanged, and plans without breaking an
//! invariant.

#![no_main]

use libfuzzer_sys::fuzz_target;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::spec::Spec;
use map_by_device::topology::{ObjKind, Topology};
use map_by_device_fuzz::{assert_message, plan_and_check, SPECS};

fn well_formed(t: &Topology) {
    let machine = t.objects.first().expect("a topology without objects");
    assert_eq!((machine.kind, machine.parent), (ObjKind::Machine, None));
    for (i, o) in t.objects.iter().enumerate().skip(1) {
        let p = o.parent.expect("an object without a parent below the Machine");
        assert!(p < i, "object {i} comes before its parent {p}");
    }
    for f in &t.pci {
        assert!(f.locality < t.objects.len(), "PCI {} has locality {} of {}", f.busid, f.locality, t.objects.len());
    }
    for l in &t.loose {
        assert!(l.locality < t.objects.len(), "{} has locality {}", l.osdev.name, l.locality);
    }
}

fn in_process() -> bool {
    static IN_PROCESS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IN_PROCESS.get_or_init(|| std::env::var_os("MBD_FUZZ_XML_IN_PROCESS").is_some_and(|v| v == "1"))
}

fuzz_target!(|data: &[u8]| {
    // MBD_FUZZ_XML_IN_PROCESS=1: hwloc's import in this process (about 10 times faster, and
    // what looks for hwloc's own crashes; any crash then stops the run).
    let loaded = if in_process() {
        map_by_device::load::from_xml_str(&String::from_utf8_lossy(data))
    } else {
        map_by_device::load::from_xml_bytes(data, "fuzz input")
    };
    match loaded {
        Err(e) => assert_message("XML refusal", &e.to_string(), 8 * 1024),
        Ok(topology) => {
            well_formed(&topology);
            let json = serde_json::to_vec(&topology).expect("a topology serializes");
            let back: Topology = serde_json::from_slice(&json).expect("the cache's JSON reads back");
            assert_eq!(back, topology, "the cache's JSON round trip changed the topology");
            let node = Node::new(topology, NodeOptions::default());
            for spec in SPECS {
                let spec = Spec::parse(spec).expect("a valid spec");
                for ntasks in [1, 2, 5] {
                    plan_and_check(&node, &spec, ntasks);
                }
            }
        }
    }
});
