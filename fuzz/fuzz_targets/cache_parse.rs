//! The topology cache reader's parsing half (`cache::parse`: the bytes of `topology.json`),
//! on mutated cache files: it never panics; a refusal is one printable line of bounded
//! length (it goes to slurmd.log); a topology it accepts is one the enumerator and the
//! planner take without panicking and without breaking an invariant, and whose InfiniBand
//! port states can be refreshed. The same bytes also feed the trust and liveness decision
//! (`cache::liveness`: the lock file's kind, owner, mode, `dev:ino`, whether the writer's pid
//! runs, whether a write lock is held on the cache file): it trusts only a root-owned regular
//! lock file of mode 0600 or narrower, the one the cache names, with the writer running or its
//! write lock held, and refuses otherwise in one printable line.

#![no_main]

use libfuzzer_sys::fuzz_target;
use map_by_device::node::{Node, NodeOptions};
use map_by_device::spec::Spec;
use map_by_device_fuzz::{assert_message, plan_and_check, SPECS};

fuzz_target!(|data: &[u8]| {
    liveness(data);
    match map_by_device::cache::parse(data) {
        Err(e) => assert_message("cache refusal", &e.to_string(), 4096),
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

/// The liveness decision over metadata taken from the bytes: the first 24 bytes give the lock
/// file's kind, owner (root half the time), mode, device and inode, whether the cache names
/// that file, whether its writer was found running and whether its write lock is held.
fn liveness(data: &[u8]) {
    use map_by_device::trusted_fs::{Kind, Meta};
    if data.len() < 24 {
        return;
    }
    let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
    let kind = [Kind::File, Kind::Dir, Kind::Symlink, Kind::Other][usize::from(data[0] % 4)];
    let uid = if data[1] & 1 == 0 { 0 } else { u32::from(data[2]) << 8 | u32::from(data[3]) };
    let mode = u32::from(u16::from_le_bytes([data[4], data[5]]));
    let (dev, ino) = (word(8) & 0xffff_ffff, word(16));
    let meta = Meta { kind, uid, mode, size: 0, dev, ino };
    let named = format!("{dev}:{ino}");
    let recorded = if data[6] & 1 == 0 { named.clone() } else { format!("{dev}:{}", ino ^ 1) };
    let lock = if data[7] == 0 { None } else { Some(&meta) };
    // Whether the writer's pid and start time were found running (the reader's other proof).
    let running = data[6] & 2 != 0;
    // Whether another open file description holds a write lock on the cache file (only root
    // can), the reader's first proof.
    let locked = data[6] & 4 != 0;
    match map_by_device::cache::liveness(lock, &recorded, running, locked) {
        Ok(()) => {
            assert!(lock.is_some() && kind == Kind::File && uid == 0, "trusted {meta:?}");
            assert_eq!(mode & 0o077, 0, "trusted a lock file others can open: {meta:?}");
            assert_eq!(recorded, named, "trusted a lock file the cache does not name");
            assert!(running || locked, "trusted with neither the writer running nor its lock held");
        }
        Err(e) => assert_message("liveness refusal", &e.to_string(), 400),
    }
}
