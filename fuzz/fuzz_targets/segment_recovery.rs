#![no_main]
//! Recovery of damaged segments: no panic, and never a wrong byte returned.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sealstream::store::fuzzing::fuzz_segment_recovery(data);
});
