#![no_main]
//! Client-protocol parser: no panic, and split parsing equals whole parsing.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(1, |b| usize::from(*b % 31) + 1);
    sealstream::proto::parser::fuzz_client_ops(data, split);
});
