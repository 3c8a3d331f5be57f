//! TLS for the client port, the HTTPS monitoring port and routes, with rustls and the ring
//! provider.
//!
//! [`TlsSetup`] turns the `tls {}` options into a rustls `ServerConfig`: certificate chain and
//! key (an expired leaf certificate refuses to start, naming the file and date), client
//! certificates required and verified against `ca_file` when `verify`/`verify_and_map`, TLS 1.3
//! only when `min_version: "1.3"`, and optional `pinned_certs`. The config sits behind a lock
//! so SIGHUP can swap in re-read certificates; connections keep the session they have.
//!
//! [`RouteTls`] is the cluster's: one certificate used both to accept and to dial, peers
//! verified both ways against the cluster `ca_file`.
//!
//! After a handshake, [`peer_identities`] lists what `verify_and_map` can map to a user: SAN
//! e-mail addresses, SAN DNS names and the subject DN (RFC 2253 order, as nats-server prints it).

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::tls::TlsOptions;

use super::ServerError;

fn err(msg: String) -> ServerError {
    ServerError::Config(msg)
}

/// The live TLS configuration.
pub(crate) struct TlsSetup {
    /// The options it was built from.
    pub(crate) opts: TlsOptions,
    acceptor: RwLock<TlsAcceptor>,
    pinned: Vec<[u8; 32]>,
}

impl TlsSetup {
    /// Loads certificates and builds the acceptor.
    ///
    /// # Errors
    /// A message naming the file or option at fault.
    pub(crate) fn load(opts: &TlsOptions) -> Result<Self, ServerError> {
        let pinned = opts
            .pinned_certs
            .iter()
            .map(|h| {
                let bytes = data_encoding::HEXLOWER_PERMISSIVE
                    .decode(h.trim().as_bytes())
                    .map_err(|_| {
                        err(format!(
                            "pinned_certs entry {h:?} is not a SHA-256 hex digest"
                        ))
                    })?;
                <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
                    err(format!(
                        "pinned_certs entry {h:?} is not a SHA-256 hex digest"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cfg = build_config(opts)?;
        Ok(TlsSetup {
            opts: opts.clone(),
            acceptor: RwLock::new(TlsAcceptor::from(Arc::new(cfg))),
            pinned,
        })
    }

    /// Re-reads the certificate files (SIGHUP). New connections get the new certificate.
    ///
    /// # Errors
    /// As [`TlsSetup::load`]; the old configuration stays in place.
    pub(crate) fn reload(&self) -> Result<(), ServerError> {
        let cfg = build_config(&self.opts)?;
        *self.acceptor.write().unwrap_or_else(|p| p.into_inner()) =
            TlsAcceptor::from(Arc::new(cfg));
        Ok(())
    }

    /// The acceptor for a new connection.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        self.acceptor
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Client certificates are requested and verified.
    pub(crate) fn verify(&self) -> bool {
        self.opts.verify || self.opts.verify_and_map
    }

    /// Whether the client's leaf certificate passes `pinned_certs` (always, when none are set).
    pub(crate) fn pinned_ok(&self, leaf: Option<&CertificateDer<'_>>) -> bool {
        if self.pinned.is_empty() {
            return true;
        }
        leaf.is_some_and(|c| {
            let h: [u8; 32] = Sha256::digest(c.as_ref()).into();
            self.pinned.contains(&h)
        })
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ServerError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(format!("tls certificate file {}: {e}", path.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(format!("tls certificate file {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(err(format!(
            "tls certificate file {} holds no certificate",
            path.display()
        )));
    }
    Ok(certs)
}

fn check_not_expired(cert: &CertificateDer<'_>, path: &Path) -> Result<(), ServerError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| err(format!("tls certificate file {}: {e}", path.display())))?;
    let validity = parsed.validity();
    if !validity.is_valid() {
        return Err(err(format!(
            "tls certificate {} is not valid now (valid from {} until {}): expired or not yet valid",
            path.display(),
            validity.not_before,
            validity.not_after
        )));
    }
    Ok(())
}

/// The certificate chain and key of `opts` (the leaf must be valid now).
fn cert_and_key(
    opts: &TlsOptions,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServerError> {
    let cert_file = opts
        .cert_file
        .as_deref()
        .ok_or_else(|| err("tls: cert_file is required".into()))?;
    let key_file = opts
        .key_file
        .as_deref()
        .ok_or_else(|| err("tls: key_file is required".into()))?;
    let certs = read_certs(cert_file)?;
    if let Some(leaf) = certs.first() {
        check_not_expired(leaf, cert_file)?;
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| err(format!("tls key file {}: {e}", key_file.display())))?;
    Ok((certs, key))
}

/// The ring provider, limited to `cipher_suites` when given.
fn provider(opts: &TlsOptions) -> Result<Arc<CryptoProvider>, ServerError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !opts.cipher_suites.is_empty() {
        let wanted: Vec<String> = opts
            .cipher_suites
            .iter()
            .map(|s| s.to_ascii_uppercase())
            .collect();
        for w in &wanted {
            if !provider
                .cipher_suites
                .iter()
                .any(|cs| format!("{:?}", cs.suite()) == *w)
            {
                return Err(err(format!(
                    "tls: cipher suite {w} is not supported by this build"
                )));
            }
        }
        provider
            .cipher_suites
            .retain(|cs| wanted.contains(&format!("{:?}", cs.suite())));
    }
    Ok(Arc::new(provider))
}

/// The protocol versions `min_version` allows.
fn versions(
    opts: &TlsOptions,
) -> Result<&'static [&'static rustls::SupportedProtocolVersion], ServerError> {
    static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    static TLS12_UP: [&rustls::SupportedProtocolVersion; 2] =
        [&rustls::version::TLS13, &rustls::version::TLS12];
    match opts.min_version.as_deref() {
        Some("1.3") => Ok(&TLS13_ONLY),
        Some("1.2") | None => Ok(&TLS12_UP),
        Some(v) => Err(err(format!(
            "tls: min_version {v:?} (use \"1.2\" or \"1.3\")"
        ))),
    }
}

/// The certificates of `ca_file`, as trust anchors.
fn roots(opts: &TlsOptions) -> Result<Arc<RootCertStore>, ServerError> {
    let ca = opts
        .ca_file
        .as_deref()
        .ok_or_else(|| err("tls: verify needs ca_file".into()))?;
    let mut roots = RootCertStore::empty();
    for c in read_certs(ca)? {
        roots
            .add(c)
            .map_err(|e| err(format!("tls ca_file {}: {e}", ca.display())))?;
    }
    Ok(Arc::new(roots))
}

fn build_config(opts: &TlsOptions) -> Result<ServerConfig, ServerError> {
    let (certs, key) = cert_and_key(opts)?;
    let provider = provider(opts)?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions(opts)?)
        .map_err(|e| err(format!("tls: {e}")))?;
    let builder = if opts.verify || opts.verify_and_map {
        let verifier = WebPkiClientVerifier::builder_with_provider(roots(opts)?, provider)
            .build()
            .map_err(|e| err(format!("tls: {e}")))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|e| err(format!("tls: certificate and key do not match: {e}")))
}

/// The client side of route TLS: trusts `ca_file` only and presents our certificate.
fn build_route_client_config(opts: &TlsOptions) -> Result<ClientConfig, ServerError> {
    let (certs, key) = cert_and_key(opts)?;
    ClientConfig::builder_with_provider(provider(opts)?)
        .with_protocol_versions(versions(opts)?)
        .map_err(|e| err(format!("tls: {e}")))?
        .with_root_certificates(roots(opts)?)
        .with_client_auth_cert(certs, key)
        .map_err(|e| err(format!("tls: certificate and key do not match: {e}")))
}

/// Route TLS (`cluster { tls {} }`): mutual and always verified. A member presents its
/// certificate both when it accepts and when it dials, and checks the other side's against
/// `ca_file`; a dialer also checks that the certificate names the host it dialed.
pub(crate) struct RouteTls {
    /// The options it was built from.
    pub(crate) opts: TlsOptions,
    ends: RwLock<(TlsAcceptor, TlsConnector)>,
}

impl RouteTls {
    /// Loads the certificates.
    ///
    /// # Errors
    /// A message naming the file or option at fault.
    pub(crate) fn load(opts: &TlsOptions) -> Result<Self, ServerError> {
        let ends = Self::build(opts)?;
        Ok(RouteTls {
            opts: opts.clone(),
            ends: RwLock::new(ends),
        })
    }

    fn build(opts: &TlsOptions) -> Result<(TlsAcceptor, TlsConnector), ServerError> {
        let mut verified = opts.clone();
        verified.verify = true;
        let server = build_config(&verified)?;
        let client = build_route_client_config(&verified)?;
        Ok((
            TlsAcceptor::from(Arc::new(server)),
            TlsConnector::from(Arc::new(client)),
        ))
    }

    /// Re-reads the files (SIGHUP); routes already up keep their session.
    ///
    /// # Errors
    /// As [`RouteTls::load`]; the old configuration stays in place.
    pub(crate) fn reload(&self) -> Result<(), ServerError> {
        let ends = Self::build(&self.opts)?;
        *self.ends.write().unwrap_or_else(|p| p.into_inner()) = ends;
        Ok(())
    }

    /// The accepting end, for a connection on the route port.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        self.ends
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// The dialing end.
    pub(crate) fn connector(&self) -> TlsConnector {
        self.ends
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }
}

/// Escapes one attribute value for a DN string (RFC 2253 §2.4, as nats-server renders it):
/// a backslash before `,` `+` `"` `\` `<` `>` `;` anywhere, before `#` at the start and
/// before a space at the start or the end. Without it a CN of `admin,O=Acme` would read as two
/// attributes and map to the user `CN=admin,O=Acme`.
pub(crate) fn escape_dn_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 4);
    let last = v.chars().count().saturating_sub(1);
    for (i, ch) in v.chars().enumerate() {
        let special = matches!(ch, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (ch == '#' && i == 0)
            || (ch == ' ' && (i == 0 || i == last));
        if special {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// What a verified client certificate can be mapped to: SAN e-mails, SAN DNS names, and the
/// subject DN in RFC 2253 order (`CN=alice,O=Acme`).
pub(crate) fn peer_identities(leaf: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
        return vec![];
    };
    let mut out = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::RFC822Name(e) => out.push((*e).to_owned()),
                x509_parser::extensions::GeneralName::DNSName(d) => out.push((*d).to_owned()),
                _ => {}
            }
        }
    }
    // A value that is not a string cannot be rendered faithfully: then the subject DN is not
    // offered for mapping at all (fail closed), rather than rendered with a gap.
    let rdns: Option<Vec<String>> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let key = x509_parser::objects::oid2abbrev(
                        atv.attr_type(),
                        x509_parser::objects::oid_registry(),
                    )
                    .map(str::to_owned)
                    .unwrap_or_else(|_| atv.attr_type().to_id_string());
                    Some(format!("{key}={}", escape_dn_value(atv.as_str().ok()?)))
                })
                .collect::<Option<Vec<_>>>()
                .map(|v| v.join("+"))
        })
        .collect();
    let rdns = rdns.unwrap_or_default();
    if !rdns.is_empty() {
        out.push(rdns.iter().rev().cloned().collect::<Vec<_>>().join(","));
        out.push(rdns.join(","));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape_dn_value;

    #[test]
    fn dn_values_escape_rfc2253_specials() {
        assert_eq!(escape_dn_value("admin,O=Acme"), "admin\\,O=Acme");
        assert_eq!(
            escape_dn_value("a,b+c\"d\\e<f>g;h=i"),
            "a\\,b\\+c\\\"d\\\\e\\<f\\>g\\;h=i"
        );
        assert_eq!(escape_dn_value("#lead"), "\\#lead");
        assert_eq!(escape_dn_value("mid#dle"), "mid#dle");
        assert_eq!(escape_dn_value(" sp "), "\\ sp\\ ");
        assert_eq!(escape_dn_value("alice"), "alice");
    }
}
