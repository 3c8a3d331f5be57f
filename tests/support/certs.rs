//! Certificates for TLS tests, made with rcgen: a CA, leaves it signs, and a directory to put
//! the PEM files in.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    /// A self-signed CA named `name`.
    pub fn new(name: &str) -> Self {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// The CA certificate (PEM).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf certificate; returns (cert pem, key pem).
    pub fn leaf(
        &self,
        cn: &str,
        sans: Vec<SanType>,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> (String, String) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.subject_alt_names = sans;
        edit(&mut p);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// `localhost` and `127.0.0.1`.
pub fn server_sans() -> Vec<SanType> {
    vec![
        SanType::DnsName("localhost".try_into().unwrap()),
        SanType::IpAddress("127.0.0.1".parse().unwrap()),
    ]
}

/// PEM files in a temporary directory.
pub struct Files {
    /// The directory (removed on drop).
    pub dir: tempfile::TempDir,
}

impl Files {
    /// A fresh temporary directory.
    pub fn new() -> Self {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Writes `body` to `name` in the directory.
    pub fn put(&self, name: &str, body: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    }
}
