//! `Spec::parse` on any text: it never panics; a spec it accepts prints as canonical text that
//! parses back to the same spec; a refusal is one printable line that quotes at most a bounded
//! part of the input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use map_by_device::spec::Spec;
use map_by_device_fuzz::assert_message;

fuzz_target!(|data: &[u8]| {
    // The plugin refuses a value that is not UTF-8 before parsing (spank/src/option.rs).
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Spec::parse(text) {
        Ok(spec) => {
            let canonical = spec.to_string();
            // Full words can make the canonical text longer than the cap the input kept to.
            if canonical.len() > map_by_device::spec::MAX_SPEC_BYTES {
                assert!(matches!(Spec::parse(&canonical), Err(map_by_device::spec::SpecError::TooLong { .. })));
                return;
            }
            let again = Spec::parse(&canonical).unwrap_or_else(|e| panic!("{canonical:?} (from {text:?}): {e}"));
            assert_eq!(again, spec, "{text:?} -> {canonical:?}");
            assert_eq!(again.to_string(), canonical);
            assert!(spec.ndev >= 1 && spec.pe != Some(0));
        }
        Err(e) => assert_message("spec refusal", &e.to_string(), 16 * 1024),
    }
});
