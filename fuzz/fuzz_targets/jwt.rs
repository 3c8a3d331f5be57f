#![no_main]
//! JWTs from unauthenticated peers: decoding arbitrary bytes never panics, and a signed token
//! with any one byte changed never verifies.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sealstream::auth::jwt::fuzz_decode(data);
});
