//! Configuration: the nats-server configuration language and command line, mapped onto
//! sealstream's options.
//!
//! # Layout
//! - `error.rs`: [`ConfigError`], whose `Display` is `<file>:<line>:<col>: <reason>`.
//! - `lex.rs`: text to tokens (keys, strings, size-suffixed integers, `$VAR`, `include`).
//! - `parse.rs`: tokens to a [`parse::Value`] tree with spans; resolves variables/includes.
//! - `field.rs`: typed reads of entries (integers, sizes, Go durations, string lists).
//! - `keys.rs`: shape checks for public nkeys and JWTs named in the file.
//! - `options.rs`: the tree to [`ServerOptions`] (names, aliases, types, defaults, unknown keys).
//! - `cluster.rs`: the `cluster {}` block and route URLs.
//! - `accounts.rs`: `authorization` and `accounts` blocks (users, permissions, exports/imports).
//! - `validate.rs`: the checks `-t` adds after parsing, and start-up checks.
//! - `cli.rs`: nats-server's Go-style flags to [`cli::CliArgs`], applied over the file.
//!
//! # What this module does not do
//! No I/O beyond reading the config file and its includes and, as nats-server does while
//! parsing, checking that named TLS files and operator JWT files exist; no TLS, JWT or nkey
//! cryptography (only shape checks); no logging. It depends on no other sealstream module.
//!
//! # Known differences from nats-server 2.15.1 (checked with `nats-server -t`)
//! - Line *and* column are 1-based everywhere; nats-server prints a 0-based column on line 1.
//! - `accounts` inside `authorization` loads (merged with top-level accounts) but fails
//!   [`ServerOptions::check`]; nats-server rejects it as an unknown field.
//! - `jetstream.key_file` is a sealstream addition (nats-server: unknown field).
//! - Negative duration strings (`"-1s"`) are refused; nats-server accepts some of them.
//! - `write_timeout` is nats-server's stall *policy* (`default|close|retry`), not an alias of
//!   `write_deadline`.
//!
//! # Typical use (the server binary)
//! ```text
//! let args = config::cli::CliArgs::parse(std::env::args().skip(1))?;
//! let mut options = match &args.config_file {
//!     Some(path) => config::load_file(path)?,
//!     None => config::ServerOptions::default(),
//! };
//! if args.check_config {
//!     options.check()?; // what `-t` adds to parsing
//! }
//! options.apply_cli(&args);
//! options.validate()?; // start-up checks
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod accounts;
pub mod cli;
pub mod cluster;
pub mod error;
mod field;
pub mod keys;
pub mod lex;
pub mod options;
pub mod parse;
pub mod tls;
mod validate;

pub use accounts::{
    AccountConfig, AccountJetStream, AuthorizationOptions, ExportConfig, ExportKind, ImportConfig,
    Permissions, ResponsePermission, ResponseType, SubjectPermission, UserConfig,
};
pub use error::{ConfigError, ConfigErrorKind, Location};
pub use field::parse_go_duration;
pub use options::{
    load_file, parse_str, JetStreamOptions, ResolverConfig, ServerOptions, SyncInterval,
};
pub use tls::{HandshakeFirst, TlsOptions};

/// Fuzz entry point: parses arbitrary bytes (no environment, no includes, no file checks) and
/// maps the result onto options. Asserts that nothing panics and that every error points
/// inside the input.
#[doc(hidden)]
pub fn fuzz_parse(data: &[u8]) {
    let origin = std::path::Path::new("fuzz.conf");
    let settings = parse::ParseSettings {
        env: &|_| None,
        includes: false,
    };
    let lines = u32::try_from(data.iter().filter(|b| **b == b'\n').count() + 1).unwrap_or(u32::MAX);
    let located_inside = |e: &ConfigError| {
        assert!(
            e.location.line <= lines,
            "error line {} beyond input ({} lines): {e}",
            e.location.line,
            lines
        );
        assert!(!e.to_string().is_empty());
    };
    match parse::parse_bytes(data, origin, &settings) {
        Err(e) => located_inside(&e),
        Ok(value) => match options::map_document(&value, false) {
            Err(e) => located_inside(&e),
            Ok(o) => {
                let _ = o.check();
                let _ = o.validate();
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::{Path, PathBuf};

    /// The example configurations (`examples/configs` in the product tree).
    fn configs_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/configs")
    }

    fn example_texts() -> Vec<String> {
        let mut texts = Vec::new();
        for entry in std::fs::read_dir(configs_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "conf" || e == "inc") {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
        texts
    }

    #[test]
    fn every_example_config_is_accepted_exactly_when_nats_server_accepts_it() {
        let dir = configs_dir();
        let expected = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
        let mut listed = Vec::new();
        for line in expected.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(file), Some(verdict)) = (words.next(), words.next()) else {
                panic!("bad expected.txt line: {line}");
            };
            listed.push(file.to_string());
            let result = load_file(&dir.join(file)).and_then(|o| o.check());
            match (verdict, &result) {
                ("accept", Ok(())) | ("reject", Err(_)) => {}
                _ => panic!("{file}: expected {verdict}, got {result:?}"),
            }
        }
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".conf"))
            .collect();
        on_disk.sort();
        listed.sort();
        assert_eq!(on_disk, listed, "expected.txt must list every .conf file");
    }

    #[test]
    fn rejected_examples_fail_for_the_reason_nats_server_gives() {
        let dir = configs_dir();
        let reason = |file: &str| {
            load_file(&dir.join(file))
                .and_then(|o| o.check())
                .unwrap_err()
                .to_string()
        };
        assert!(reason("spec-accounts.conf")
            .ends_with("spec-accounts.conf:4:44: Not a valid public nkey for a user"));
        assert!(reason("spec-duration-bare-seconds.conf")
            .contains(":2:1: invalid use of field \"ping_interval\""));
        assert!(
            reason("guide-000-jetstream-with-accounts-in-authorization.conf")
                .contains(":9:3: invalid use of field \"accounts\"")
        );
        assert!(reason("spec-tls.conf").contains("open /etc/sealstream/server.pem"));
        assert!(reason("spec-operator-memory-resolver.conf").contains("error parsing operator JWT"));
    }

    #[test]
    fn fuzz_parse_survives_known_nasty_inputs() {
        for input in [
            &b""[..],
            b"\xff\xfe",
            b"a: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
            b"a: (",
            b"a: \"\\x",
            b"include /etc/passwd",
            b"a: $A",
            b"x: -",
            b"listen: \":\"",
            b"listen: \"[]:99999999999\"",
            b"ping_interval: \"9999999999999999999h\"",
            b"authorization { timeout: 1e400 }",
            b"authorization { timeout: 1.0e }",
            b"tls { timeout: 99999999999999999999.0 }",
            b"jetstream { max_mem: -9223372036854775808 }",
            b"a { b { c { d",
            b"}}}}",
            b"a: 2026-13-45T99:99:99Z",
            b"\r\r\r",
        ] {
            fuzz_parse(input);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn random_text_never_panics(text in "\\PC{0,200}") {
            fuzz_parse(text.as_bytes());
        }

        #[test]
        fn random_config_like_text_never_panics(
            text in "[a-z_$\"'(){}\\[\\]=:;,#/\\\\ \t\n0-9.kKmMgGbB-]{0,120}"
        ) {
            fuzz_parse(text.as_bytes());
        }

        #[test]
        fn mutated_example_configs_never_panic(
            which in any::<prop::sample::Index>(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8)
        ) {
            let texts = example_texts();
            let mut bytes = texts[which.index(texts.len())].clone().into_bytes();
            for (at, byte, op) in edits {
                let i = if bytes.is_empty() { 0 } else { at.index(bytes.len()) };
                match op {
                    0 if !bytes.is_empty() => { bytes[i] = byte; }
                    1 => bytes.insert(i, byte),
                    _ if !bytes.is_empty() => { bytes.remove(i); }
                    _ => {}
                }
            }
            fuzz_parse(&bytes);
        }

        #[test]
        fn bytes_split_anywhere_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            fuzz_parse(&bytes);
        }
    }
}
