//! The topology cache reader's parsing half (`cache::parse`: the bytes of `topology.json`),
//! on mutated cache files: it never panics; a refusal is one printable line of bounded
//! length (it goes to slurmd.log); a topology it accepts is one the enumerator and the
//! planner take without panicking and without breaking an invariant, and whose InfiniBand
//! port states can be refreshed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::spec::Spec;
use map_by_device_fuzz::{assert_message, plan_and_check, SPECS};

fuzz_target!(|data: &[u8]| {
    match map_by_device::cache::parse(data) {
        Err(e) => assert_message("cache refusal", &e, 4096),
        Ok(cached) => {
            let mut topology = cached.topology;
            map_by_device::driver_ids::refresh_ib_port_states_with(&mut topology, |_, port| Some(format!("{port}: X")));
            let node = Node::new(topology, NodeOptions::default());
            let _ = map_by_device::report::devices_json(&node.devices.iter().collect::<Vec<_>>());
            for spec in SPECS {
                let spec = Spec::parse(spec).expect("a valid spec");
                for ntasks in [1, 2, 5] {
                    plan_and_check(&node, &spec, ntasks);
                }
            }
        }
    }
});
