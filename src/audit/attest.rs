//! Signed audit attestations (issue 17): `sealctl audit STORE… --attest OUT --sign-with
//! SEED` writes what the audit found as a statement signed with an Ed25519 nkey, and `sealctl
//! audit verify OUT` checks the signature and, given the store again, that the store still
//! matches what was attested.
//!
//! Why the statement is carried as text: the signature covers the exact bytes of the
//! attestation's JSON, so verifying never depends on how a JSON library orders or spaces
//! fields. The file is `{"attestation": "<json text>", "signer": "<public nkey>",
//! "signature": "<base64url>"}`.
//!
//! A tenant's crypto-erase is attested the same way (`erasures`: which key ids and versions the
//! server destroyed, and the keyring generation it checked holds none of them).
//!
//! What it holds (never key material): the tool and its version, when, and per store its id,
//! cipher, how its master key is obtained, every stream's data-key generations, block,
//! message and byte counts, its durable mark, every segment's hash-chain head (its last
//! block's tag, which every earlier block of the segment feeds), and the findings.

use serde::{Deserialize, Serialize};

use super::{Erasure, Report};
use crate::auth::nkeys::{self, KeyPair, Role};

/// The statement's kind (and format version).
pub const KIND: &str = "sealstream-audit-attestation/v1";

/// Roles whose seeds may sign an attestation: a dedicated audit key (`sealctl audit-key
/// init`, a server-type nkey) or the operator's.
pub const SIGNER_ROLES: [Role; 2] = [Role::Server, Role::Operator];

/// What is attested.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attestation {
    /// [`KIND`].
    pub kind: String,
    /// When the audit ran (RFC 3339).
    pub issued: String,
    /// The tool: `sealctl <version>`.
    pub tool: String,
    /// The signer's public nkey (also outside, to pick the key before parsing).
    pub signer: String,
    /// The audit's exit code (0 clean).
    pub exit_code: u8,
    /// One report per store.
    pub stores: Vec<Report>,
    /// Tenant crypto-erases attested (`sealctl account purge --attest`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub erasures: Vec<Erasure>,
}

/// The signed file.
#[derive(Debug, Serialize, Deserialize)]
pub struct Signed {
    /// The attestation's JSON text (what the signature covers).
    pub attestation: String,
    /// The signer's public nkey.
    pub signer: String,
    /// Ed25519 signature over `attestation`'s bytes (base64url, no padding).
    pub signature: String,
}

/// Makes the signed file's text for `reports`, signed with the nkey `seed`.
///
/// # Errors
/// A seed that is not a server or operator nkey seed.
pub fn sign(
    reports: &[Report],
    erasures: &[Erasure],
    exit_code: u8,
    seed: &str,
) -> Result<String, String> {
    let key = KeyPair::from_seed(seed, &SIGNER_ROLES)
        .map_err(|e| format!("the signing key is not a server or operator nkey seed: {e}"))?;
    let attestation = Attestation {
        kind: KIND.to_owned(),
        issued: crate::timefmt::rfc3339_nanos(crate::jetstream::now_nanos()),
        tool: format!("sealctl {}", env!("CARGO_PKG_VERSION")),
        signer: key.public_key(),
        exit_code,
        stores: reports.to_vec(),
        erasures: erasures.to_vec(),
    };
    let text = serde_json::to_string_pretty(&attestation).map_err(|e| e.to_string())?;
    let signature = key.sign(text.as_bytes());
    let signed = Signed {
        attestation: text,
        signer: key.public_key(),
        signature: data_encoding::BASE64URL_NOPAD.encode(&signature),
    };
    serde_json::to_string_pretty(&signed).map_err(|e| e.to_string())
}

/// Checks a signed file's signature (and, given `expected`, that this key signed it);
/// returns the attestation.
///
/// # Errors
/// Why it does not verify: not a signed attestation, a bad signature, another signer.
pub fn verify(text: &str, expected: Option<&str>) -> Result<Attestation, String> {
    let signed: Signed =
        serde_json::from_str(text).map_err(|e| format!("not a signed attestation: {e}"))?;
    if expected.is_some_and(|e| e != signed.signer) {
        return Err(format!(
            "signed by {}, not by the expected key {}",
            signed.signer,
            expected.unwrap_or_default()
        ));
    }
    let signature = data_encoding::BASE64URL_NOPAD
        .decode(signed.signature.as_bytes())
        .map_err(|_| "the signature is not base64url".to_owned())?;
    nkeys::verify(
        &signed.signer,
        &SIGNER_ROLES,
        signed.attestation.as_bytes(),
        &signature,
    )
    .map_err(|e| format!("the signature does not verify: {e}"))?;
    let attestation: Attestation = serde_json::from_str(&signed.attestation)
        .map_err(|e| format!("the signed statement does not parse: {e}"))?;
    if attestation.kind != KIND || attestation.signer != signed.signer {
        return Err("the signed statement is not a sealstream audit attestation".into());
    }
    Ok(attestation)
}

/// How the store as audited now differs from what was attested (empty: it matches). Compared:
/// the store's id, each stream's counts, key generations and durable mark, each segment's
/// chain head, and the number of findings. A store that grew since shows its new segments
/// and counts; one rolled back or rewritten shows the heads that changed.
pub fn differences(attested: &Report, now: &Report) -> Vec<String> {
    let mut out = Vec::new();
    if attested.store_id != now.store_id {
        out.push(format!(
            "store id {:?}, attested {:?}",
            now.store_id, attested.store_id
        ));
    }
    for a in &attested.streams {
        match now.streams.iter().find(|s| s.id == a.id) {
            None => out.push(format!("stream {} is gone", a.id)),
            Some(s) => {
                let was = (
                    a.messages,
                    a.blocks,
                    a.bytes,
                    &a.dek_versions,
                    a.durable_mark,
                );
                let is = (
                    s.messages,
                    s.blocks,
                    s.bytes,
                    &s.dek_versions,
                    s.durable_mark,
                );
                if was != is {
                    out.push(format!(
                        "stream {}: messages/blocks/bytes/key generations/durable mark {is:?}, attested {was:?}",
                        a.id
                    ));
                }
            }
        }
    }
    for s in &now.streams {
        if !attested.streams.iter().any(|a| a.id == s.id) {
            out.push(format!("stream {} was not attested", s.id));
        }
    }
    for a in &attested.segments {
        match now.segments.iter().find(|s| s.path == a.path) {
            None => out.push(format!("segment {} is gone", a.path)),
            Some(s) if s != a => out.push(format!(
                "segment {}: {} blocks, head {}; attested {} blocks, head {}",
                a.path, s.blocks, s.head, a.blocks, a.head
            )),
            Some(_) => {}
        }
    }
    for s in &now.segments {
        if !attested.segments.iter().any(|a| a.path == s.path) {
            out.push(format!("segment {} was not attested", s.path));
        }
    }
    if attested.findings.len() != now.findings.len() {
        out.push(format!(
            "{} findings, attested {}",
            now.findings.len(),
            attested.findings.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            store: "/s".into(),
            store_id: Some("ab".into()),
            kdf: Some("key file".into()),
            cipher: super::super::CIPHER.into(),
            segments: vec![super::super::SegmentHead {
                path: "s/x/seg-1.log".into(),
                blocks: 3,
                head: "0011".into(),
            }],
            files: 1,
            bytes: 10,
            blocks_framed: 3,
            keyed: true,
            needles: 1,
            needles_too_short: 0,
            streams: vec![],
            account: None,
            live: false,
            raft: None,
            raft_groups: vec![],
            findings: vec![],
        }
    }

    #[test]
    fn a_signed_attestation_verifies_and_any_change_breaks_it() {
        let key = KeyPair::generate(Role::Server);
        let text = sign(&[report()], &[], 0, &key.seed()).expect("signed");
        let a = verify(&text, Some(&key.public_key())).expect("verifies");
        assert_eq!(a.stores.len(), 1);
        assert_eq!(a.signer, key.public_key());
        assert!(!text.contains(key.seed().as_str()), "no key material");
        // Another expected signer.
        let other = KeyPair::generate(Role::Server);
        assert!(verify(&text, Some(&other.public_key())).is_err());
        // The statement changed (a count), the signature kept.
        let mut signed: Signed = serde_json::from_str(&text).unwrap();
        signed.attestation = signed.attestation.replace("\"blocks\": 3", "\"blocks\": 4");
        let forged = serde_json::to_string(&signed).unwrap();
        assert!(verify(&forged, None)
            .unwrap_err()
            .contains("does not verify"));
        // A user key may not sign attestations.
        let user = KeyPair::generate(Role::User);
        assert!(sign(&[report()], &[], 0, &user.seed()).is_err());
    }

    #[test]
    fn differences_name_what_changed() {
        let a = report();
        assert!(differences(&a, &a).is_empty());
        let mut b = report();
        b.segments[0].head = "ffff".into();
        b.segments.push(super::super::SegmentHead {
            path: "s/x/seg-2.log".into(),
            blocks: 1,
            head: "22".into(),
        });
        let d = differences(&a, &b);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("head ffff"));
        assert!(d[1].contains("seg-2.log was not attested"));
    }
}
