#![no_main]
//! Config language: no panic, errors point inside the input.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sealstream::config::fuzz_parse(data);
});
