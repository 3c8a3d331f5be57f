//! nkeys: Ed25519 keys in NATS's self-describing text form (security spec §1).
//!
//! ```text
//! public: base32( prefix || pub32 || crc16_le )                  56 chars, O/A/U/N/C/X...
//! seed:   base32( 144|role>>5 || (role&31)<<3 || seed32 || crc16_le )  58 chars, SO/SA/SU...
//! ```
//!
//! Decoding checks, in order: base32, length, CRC-16/XMODEM, and that the role is one the call
//! site expects — a key of the wrong role is an error, never a silent accept. Verification uses
//! Ed25519's strict variant. Seeds live in [`Secret`] and are zeroized.

use data_encoding::BASE32_NOPAD;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use zeroize::Zeroizing;

use crate::crypto::Secret;

/// The NATS roles an nkey can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `O`: operators.
    Operator,
    /// `A`: accounts.
    Account,
    /// `U`: users.
    User,
    /// `N`: servers.
    Server,
    /// `C`: clusters.
    Cluster,
}

impl Role {
    fn prefix(self) -> u8 {
        match self {
            Role::Operator => 14 << 3,
            Role::Account => 0,
            Role::User => 20 << 3,
            Role::Server => 13 << 3,
            Role::Cluster => 2 << 3,
        }
    }

    fn from_prefix(b: u8) -> Option<Role> {
        [
            Role::Operator,
            Role::Account,
            Role::User,
            Role::Server,
            Role::Cluster,
        ]
        .into_iter()
        .find(|r| r.prefix() == b)
    }
}

const SEED_PREFIX: u8 = 18 << 3;

/// Why an nkey or a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NkeyError {
    /// Not base32, or the wrong length.
    #[error("not an nkey")]
    Malformed,
    /// The checksum does not match.
    #[error("nkey checksum mismatch")]
    Checksum,
    /// A key of another role than the one expected here.
    #[error("nkey has role {found:?}, expected one of {expected:?}")]
    WrongRole {
        /// The role found.
        found: Option<Role>,
        /// The roles allowed at this call site.
        expected: Vec<Role>,
    },
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
}

/// CRC-16/XMODEM (poly 0x1021, init 0).
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn encode(raw: &[u8]) -> String {
    let mut v = raw.to_vec();
    v.extend_from_slice(&crc16(raw).to_le_bytes());
    BASE32_NOPAD.encode(&v)
}

fn decode(text: &str, len: usize) -> Result<Zeroizing<Vec<u8>>, NkeyError> {
    let raw = Zeroizing::new(
        BASE32_NOPAD
            .decode(text.as_bytes())
            .map_err(|_| NkeyError::Malformed)?,
    );
    if raw.len() != len + 2 {
        return Err(NkeyError::Malformed);
    }
    let (body, crc) = raw.split_at(len);
    let crc: [u8; 2] = crc.try_into().map_err(|_| NkeyError::Malformed)?;
    if crc16(body) != u16::from_le_bytes(crc) {
        return Err(NkeyError::Checksum);
    }
    Ok(Zeroizing::new(body.to_vec()))
}

/// Encodes a public key of `role`.
pub fn encode_public(role: Role, key: &[u8; 32]) -> String {
    let mut raw = vec![role.prefix()];
    raw.extend_from_slice(key);
    encode(&raw)
}

/// Decodes a public key, requiring one of `expected` roles.
///
/// # Errors
/// [`NkeyError`] for malformed text, a bad checksum or an unexpected role.
pub fn decode_public(text: &str, expected: &[Role]) -> Result<(Role, [u8; 32]), NkeyError> {
    let raw = decode(text, 33)?;
    let (prefix, key) = raw.split_first().ok_or(NkeyError::Malformed)?;
    let role = Role::from_prefix(*prefix);
    match role {
        Some(r) if expected.contains(&r) => {
            let key: [u8; 32] = key.try_into().map_err(|_| NkeyError::Malformed)?;
            Ok((r, key))
        }
        found => Err(NkeyError::WrongRole {
            found,
            expected: expected.to_vec(),
        }),
    }
}

/// Whether `text` is a public nkey of one of `roles`.
pub fn is_public_key(text: &str, roles: &[Role]) -> bool {
    decode_public(text, roles).is_ok()
}

/// Verifies an Ed25519 signature by the public nkey `public` (strict verification).
///
/// # Errors
/// [`NkeyError`] when the key is not one of `roles` or the signature is wrong.
pub fn verify(
    public: &str,
    roles: &[Role],
    message: &[u8],
    signature: &[u8],
) -> Result<(), NkeyError> {
    let (_, key) = decode_public(public, roles)?;
    let vk = VerifyingKey::from_bytes(&key).map_err(|_| NkeyError::Malformed)?;
    let sig: [u8; 64] = signature.try_into().map_err(|_| NkeyError::BadSignature)?;
    vk.verify_strict(message, &Signature::from_bytes(&sig))
        .map_err(|_| NkeyError::BadSignature)
}

/// A key pair (seed) of one role.
pub struct KeyPair {
    role: Role,
    seed: Secret<[u8; 32]>,
}

impl KeyPair {
    /// A new random key pair.
    pub fn generate(role: Role) -> Self {
        KeyPair {
            role,
            seed: Secret::random(),
        }
    }

    /// Parses a seed (`SO…`, `SA…`, `SU…`), requiring one of `expected` roles.
    ///
    /// # Errors
    /// [`NkeyError`].
    pub fn from_seed(text: &str, expected: &[Role]) -> Result<Self, NkeyError> {
        let raw = decode(text.trim(), 34)?;
        let (b1, rest) = raw.split_first().ok_or(NkeyError::Malformed)?;
        let (b2, seed) = rest.split_first().ok_or(NkeyError::Malformed)?;
        if b1 & 0xF8 != SEED_PREFIX {
            return Err(NkeyError::Malformed);
        }
        let prefix = ((b1 & 7) << 5) | ((b2 & 0xF8) >> 3);
        let role = Role::from_prefix(prefix);
        match role {
            Some(r) if expected.contains(&r) => Ok(KeyPair {
                role: r,
                seed: Secret::from_fn(|s| s.copy_from_slice(seed)),
            }),
            found => Err(NkeyError::WrongRole {
                found,
                expected: expected.to_vec(),
            }),
        }
    }

    /// The role.
    pub fn role(&self) -> Role {
        self.role
    }

    fn signing(&self) -> SigningKey {
        SigningKey::from_bytes(self.seed.expose())
    }

    /// The public key text.
    pub fn public_key(&self) -> String {
        encode_public(self.role, self.signing().verifying_key().as_bytes())
    }

    /// The seed text (treat as a secret).
    pub fn seed(&self) -> Zeroizing<String> {
        let p = self.role.prefix();
        let mut raw = Zeroizing::new(vec![SEED_PREFIX | (p >> 5), (p & 31) << 3]);
        raw.extend_from_slice(self.seed.expose());
        Zeroizing::new(encode(&raw))
    }

    /// Signs `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.signing().sign(message).to_bytes()
    }
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-good values")]
mod tests {
    use super::*;

    #[test]
    fn our_encoding_matches_the_nkeys_crate() {
        let theirs = nkeys::KeyPair::new_user();
        let seed = theirs.seed().unwrap();
        let ours = KeyPair::from_seed(&seed, &[Role::User]).unwrap();
        assert_eq!(ours.public_key(), theirs.public_key());
        assert_eq!(ours.seed().as_str(), seed);
        let sig = ours.sign(b"nonce");
        theirs.verify(b"nonce", &sig).unwrap();
        let their_sig = theirs.sign(b"hello").unwrap();
        verify(&theirs.public_key(), &[Role::User], b"hello", &their_sig).unwrap();
    }

    #[test]
    fn every_role_round_trips() {
        for role in [
            Role::Operator,
            Role::Account,
            Role::User,
            Role::Server,
            Role::Cluster,
        ] {
            let kp = KeyPair::generate(role);
            let again = KeyPair::from_seed(&kp.seed(), &[role]).unwrap();
            assert_eq!(again.public_key(), kp.public_key());
            assert_eq!(decode_public(&kp.public_key(), &[role]).unwrap().0, role);
        }
        let a = KeyPair::generate(Role::Account);
        assert!(a.public_key().starts_with('A') && a.seed().starts_with("SA"));
    }

    #[test]
    fn wrong_role_checksum_and_signature_are_refused() {
        let u = KeyPair::generate(Role::User);
        assert!(matches!(
            decode_public(&u.public_key(), &[Role::Account]),
            Err(NkeyError::WrongRole { .. })
        ));
        let mut bad = u.public_key().into_bytes();
        bad[10] = if bad[10] == b'A' { b'B' } else { b'A' };
        assert!(decode_public(std::str::from_utf8(&bad).unwrap(), &[Role::User]).is_err());
        let sig = u.sign(b"a");
        assert_eq!(
            verify(&u.public_key(), &[Role::User], b"b", &sig),
            Err(NkeyError::BadSignature)
        );
        assert!(decode_public("not-a-key", &[Role::User]).is_err());
    }
}
