//! The `tls {}` block, shared by the client port, websocket, monitoring and routes.
//!
//! Maps the options nats-server accepts (certificate files, verification, versions, Go
//! cipher-suite and curve names, pinned certificates) and checks what it can without loading
//! anything; `server::tls` turns them into rustls configurations.

use std::path::PathBuf;
use std::time::Duration;

use super::error::ConfigError;
use super::field::{self, key, Collected};
use super::parse::{Entry, ValueKind};

/// The client `tls` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM certificate chain.
    pub cert_file: Option<PathBuf>,
    /// PEM private key.
    pub key_file: Option<PathBuf>,
    /// PEM CA bundle for client certificates.
    pub ca_file: Option<PathBuf>,
    /// Require and verify client certificates.
    pub verify: bool,
    /// Verify and map the certificate identity to a user.
    pub verify_and_map: bool,
    /// Handshake timeout (seconds, float ok, or a duration string).
    pub timeout: Duration,
    /// TLS before INFO (`handshake_first`, `first`, `immediate`).
    pub handshake_first: HandshakeFirst,
    /// `"1.2"` or `"1.3"`.
    pub min_version: Option<String>,
    /// Go cipher-suite names.
    pub cipher_suites: Vec<String>,
    /// Go curve names.
    pub curve_preferences: Vec<String>,
    /// Allowed client certificate SHA-256 fingerprints (lower-case hex).
    pub pinned_certs: Vec<String>,
    /// Skip verification (client-side use).
    pub insecure: bool,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            cert_file: None,
            key_file: None,
            ca_file: None,
            verify: false,
            verify_and_map: false,
            timeout: Duration::from_secs(2),
            handshake_first: HandshakeFirst::Off,
            min_version: None,
            cipher_suites: Vec::new(),
            curve_preferences: Vec::new(),
            pinned_certs: Vec::new(),
            insecure: false,
        }
    }
}

/// Whether the TLS handshake comes before the INFO line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFirst {
    /// INFO first, then the client upgrades (the default).
    Off,
    /// TLS first, always.
    On,
    /// Wait this long for a ClientHello, then fall back to INFO first (`auto` = 50 ms).
    Fallback(Duration),
}

/// Go's cipher-suite names that nats-server accepts without `allow_insecure_cipher_suites`.
const SECURE_CIPHER_SUITES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
];

/// Go's cipher-suite names that need `allow_insecure_cipher_suites: true`.
const INSECURE_CIPHER_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// Go's curve names (case-sensitive, as in nats-server).
const CURVES: &[&str] = &[
    "CurveP256",
    "CurveP384",
    "CurveP521",
    "X25519",
    "X25519MLKEM768",
];

pub(super) fn tls(
    e: &Entry,
    check_files: bool,
    c: &mut Collected,
) -> Result<TlsOptions, ConfigError> {
    let m = field::map(e)?;
    let mut t = TlsOptions::default();
    let mut allow_insecure = false;
    let mut suites_at: Option<&Entry> = None;
    for item in m.entries() {
        let k = key(item);
        match k.as_str() {
            "cert_file" => t.cert_file = Some(field::path(item)?),
            "key_file" => t.key_file = Some(field::path(item)?),
            "ca_file" => t.ca_file = Some(field::path(item)?),
            "verify" => t.verify = field::boolean(item)?,
            "verify_and_map" => t.verify_and_map = field::boolean(item)?,
            "insecure" => t.insecure = field::boolean(item)?,
            "timeout" => t.timeout = field::seconds(item)?,
            "handshake_first" | "first" | "immediate" => {
                t.handshake_first = match &item.value.kind {
                    ValueKind::Bool(true) => HandshakeFirst::On,
                    ValueKind::Bool(false) => HandshakeFirst::Off,
                    ValueKind::String(s) => match s.to_ascii_lowercase().as_str() {
                        "true" | "on" => HandshakeFirst::On,
                        "false" | "off" => HandshakeFirst::Off,
                        "auto" | "auto_fallback" => {
                            HandshakeFirst::Fallback(Duration::from_millis(50))
                        }
                        _ => {
                            HandshakeFirst::Fallback(field::parse_go_duration(s).map_err(|_| {
                                field::invalid(
                                    item,
                                    format!("field \"{}\"'s value \"{s}\" is invalid", item.key),
                                )
                            })?)
                        }
                    },
                    _ => return Err(field::invalid_value(item, "a boolean or a string")),
                }
            }
            "min_version" => {
                let v = field::string(item)?;
                if v != "1.2" && v != "1.3" {
                    return Err(field::invalid(
                        item,
                        format!("error parsing tls config: unsupported TLS version: {v}"),
                    ));
                }
                t.min_version = Some(v);
            }
            "cipher_suites" => {
                let list = field::string_list(item)?;
                for s in &list {
                    if !SECURE_CIPHER_SUITES.contains(&s.as_str())
                        && !INSECURE_CIPHER_SUITES.contains(&s.as_str())
                    {
                        return Err(field::invalid(item, format!("unrecognized cipher {s}")));
                    }
                }
                t.cipher_suites = list;
                suites_at = Some(item);
            }
            "allow_insecure_cipher_suites" => allow_insecure = field::boolean(item)?,
            "curve_preferences" => {
                let list = field::string_list(item)?;
                for s in &list {
                    if !CURVES.contains(&s.as_str()) {
                        return Err(field::invalid(
                            item,
                            format!("unrecognized curve preference {s}"),
                        ));
                    }
                }
                t.curve_preferences = list;
            }
            "pinned_certs" => {
                let list = field::string_list(item)?;
                let mut pins = Vec::with_capacity(list.len());
                for s in list {
                    let lower = s.to_ascii_lowercase();
                    if lower.len() != 64 || !lower.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(field::invalid(
                            item,
                            format!("error parsing tls config, 'pinned_certs' key {s} does not look like hex-encoded sha256 of DER encoded SubjectPublicKeyInfo"),
                        ));
                    }
                    pins.push(lower);
                }
                t.pinned_certs = pins;
            }
            "verify_cert_and_check_known_urls" => {
                return Err(field::invalid(
                    item,
                    "verify_cert_and_check_known_urls not supported in this context",
                ))
            }
            "ocsp_peer"
            | "cert_store"
            | "cert_match"
            | "cert_match_by"
            | "cert_match_skip_invalid"
            | "ca_certs_match"
            | "connection_rate_limit" => c.ignore(format!("tls.{k}")),
            _ => {
                return Err(field::invalid(
                    item,
                    format!("error parsing tls config, unknown field \"{}\"", item.key),
                ))
            }
        }
    }
    if let Some(item) = suites_at {
        if !allow_insecure {
            if let Some(bad) = t
                .cipher_suites
                .iter()
                .find(|s| INSECURE_CIPHER_SUITES.contains(&s.as_str()))
            {
                return Err(field::invalid(
                    item,
                    format!("insecure cipher suites configured without 'allow_insecure_cipher_suites' option set: {bad}"),
                ));
            }
        }
    }
    match (&t.cert_file, &t.key_file) {
        (Some(_), None) => {
            return Err(field::invalid(e, "missing 'key_file' in TLS configuration"))
        }
        (None, Some(_)) => {
            return Err(field::invalid(
                e,
                "missing 'cert_file' in TLS configuration",
            ))
        }
        _ => {}
    }
    if check_files {
        for (what, file) in [
            ("certificate/key pair", &t.cert_file),
            ("certificate/key pair", &t.key_file),
            ("CA file", &t.ca_file),
        ] {
            if let Some(path) = file {
                if let Err(err) = std::fs::metadata(path) {
                    return Err(field::invalid(
                        e,
                        format!("error parsing X509 {what}: open {}: {err}", path.display()),
                    ));
                }
            }
        }
    }
    Ok(t)
}
