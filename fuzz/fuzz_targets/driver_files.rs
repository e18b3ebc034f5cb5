//! The kernel driver-file parsers, on any text: NVIDIA's `information` file
//! (`driver_ids::parse_nvidia_information`), AMD's `unique_id` (`GpuIdentity::amd`), an
//! InfiniBand port's `state` (`driver_ids::ib_port_state`) and the refresh of a topology's
//! port states from such files (`driver_ids::refresh_ib_port_states_with`, files given as
//! text). The first byte picks the parser, the rest is the file. None panics; what they
//! accept has the grammar its variable needs; what they refuse is one printable line.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use map_by_device::device::GpuIdentity;
use map_by_device::driver_ids;
use map_by_device::topology::{LooseOsDevice, OsDevice, Topology};
use map_by_device_fuzz::{assert_message, text};

fn lower_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn nvidia(file: &str) {
    match driver_ids::parse_nvidia_information(file) {
        Ok(uuid) => {
            let groups: Vec<&str> = uuid.strip_prefix("GPU-").expect("GPU- prefix").split('-').collect();
            let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
            assert_eq!(lens, [8, 4, 4, 4, 12], "{uuid:?}");
            assert!(groups.iter().all(|g| lower_hex(g)), "{uuid:?}");
        }
        Err(e) => assert_message("NVIDIA information", &e.to_string(), 160 + 10 * file.len()),
    }
}

fn amd(file: &str) {
    match GpuIdentity::amd(file) {
        Ok(id) => {
            let GpuIdentity::Amd { unique_id } = &id else { panic!("{id:?}") };
            assert!(unique_id.len() == 16 && lower_hex(unique_id) && unique_id.bytes().any(|b| b != b'0'));
            assert_eq!(id.display_id(), format!("GPU-{unique_id}"));
        }
        Err(e) => assert_message("AMD unique_id", &e.to_string(), 1024),
    }
}

fn port_state(file: &str) {
    if let Some(s) = driver_ids::ib_port_state(file) {
        assert!(s.len() == 1 && s.as_bytes()[0].is_ascii_digit(), "{s:?}");
    }
}

/// A topology of OpenFabrics devices with fuzzed names and info keys, refreshed from fuzzed
/// `state` files: only one-component device names and decimal ports are asked for, every
/// changed value is a digit, and a second refresh from the same files changes nothing.
fn refresh(data: &[u8]) -> arbitrary::Result<()> {
    let mut u = Unstructured::new(data);
    let devices: Vec<(String, Vec<(String, String)>)> = Arbitrary::arbitrary(&mut u)?;
    let files: Vec<String> = Arbitrary::arbitrary(&mut u)?;
    let mut topology = Topology {
        loose: devices
            .into_iter()
            .map(|(name, infos)| LooseOsDevice {
                osdev: OsDevice { name, osdev_type: "OpenFabrics".into(), subtype: None, infos },
                locality: 0,
            })
            .collect(),
        ..Topology::default()
    };
    let before = topology.clone();
    let mut read = |device: &str, port: &str| -> Option<String> {
        assert!(!device.is_empty() && !device.contains('/') && device != "." && device != "..", "{device:?}");
        assert!(!port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()), "{port:?}");
        let key = device.len() + port.len();
        files.get(key % files.len().max(1)).cloned()
    };
    let changed = driver_ids::refresh_ib_port_states_with(&mut topology, &mut read);
    let mut seen = 0;
    for (a, b) in before.loose.iter().zip(&topology.loose) {
        for ((ka, va), (kb, vb)) in a.osdev.infos.iter().zip(&b.osdev.infos) {
            assert_eq!(ka, kb);
            if va != vb {
                seen += 1;
                assert!(vb.len() == 1 && vb.as_bytes()[0].is_ascii_digit(), "{ka}={vb:?}");
            }
        }
    }
    assert_eq!(changed, seen, "the count of changed values");
    assert_eq!(driver_ids::refresh_ib_port_states_with(&mut topology, &mut read), 0, "a second refresh");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let file = text(rest);
    match which % 4 {
        0 => nvidia(&file),
        1 => amd(&file),
        2 => port_state(&file),
        _ => {
            let _ = refresh(rest);
        }
    }
});
