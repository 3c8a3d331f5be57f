//! XChaCha20-Poly1305 sealing with caller-built AAD.
//!
//! A seal is `nonce (24) || ciphertext || tag (16)`; the nonce is random for every seal (never
//! positional: after a torn tail is cut, the next block reuses the same offset with different
//! plaintext). Opening checks lengths before slicing and returns no plaintext on failure.
//! The cipher object is built per call on the stack from the [`Key32`], so no long-lived copy
//! of the key sits outside a [`Secret`].

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};

use super::secret::Key32;

/// Nonce length.
pub const NONCE_LEN: usize = 24;
/// Authentication tag length.
pub const TAG_LEN: usize = 16;
/// Bytes a seal adds to its plaintext.
pub const OVERHEAD: usize = NONCE_LEN + TAG_LEN;

/// Why a sealed value did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Too short to hold a nonce and a tag.
    #[error("sealed value too short")]
    Truncated,
    /// Wrong key, wrong AAD, or edited bytes.
    #[error("authentication failed")]
    Unauthentic,
}

/// A sealing key (a segment key, a catalog key, a wrapping key).
pub struct SealKey(Key32);

impl SealKey {
    /// Wraps a 32-byte key.
    pub fn new(key: Key32) -> Self {
        SealKey(key)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(Key::from_slice(self.0.expose()))
    }

    /// Encrypts `buf` in place with a fresh random nonce; returns (nonce, tag).
    pub fn seal_in_place(&self, aad: &[u8], buf: &mut [u8]) -> ([u8; NONCE_LEN], [u8; TAG_LEN]) {
        let mut nonce = [0u8; NONCE_LEN];
        super::random_bytes(&mut nonce);
        let tag = self
            .cipher()
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), aad, buf)
            .expect("XChaCha20-Poly1305 encryption cannot fail below 256 GiB per message");
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&tag);
        (nonce, t)
    }

    /// Decrypts `buf` in place; on failure `buf` holds no plaintext.
    ///
    /// # Errors
    /// [`SealError::Unauthentic`] for a wrong key, wrong AAD or edited bytes.
    pub fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), SealError> {
        self.cipher()
            .decrypt_in_place_detached(XNonce::from_slice(nonce), aad, buf, Tag::from_slice(tag))
            .map_err(|_| SealError::Unauthentic)
    }

    /// Seals `plaintext` into `nonce || ciphertext || tag`.
    pub fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(plaintext.len() + OVERHEAD);
        out.extend_from_slice(&[0u8; NONCE_LEN]);
        out.extend_from_slice(plaintext);
        let (nonce, tag) = match out.get_mut(NONCE_LEN..) {
            Some(body) => self.seal_in_place(aad, body),
            None => unreachable!("the vector holds at least NONCE_LEN bytes"),
        };
        if let Some(n) = out.get_mut(..NONCE_LEN) {
            n.copy_from_slice(&nonce);
        }
        out.extend_from_slice(&tag);
        out
    }

    /// Opens a value made by [`SealKey::seal`].
    ///
    /// # Errors
    /// [`SealError`] when too short or not authentic.
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < OVERHEAD {
            return Err(SealError::Truncated);
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let (ct, tag) = rest.split_at(rest.len() - TAG_LEN);
        let nonce: &[u8; NONCE_LEN] = nonce.try_into().map_err(|_| SealError::Truncated)?;
        let tag: &[u8; TAG_LEN] = tag.try_into().map_err(|_| SealError::Truncated)?;
        let mut buf = ct.to_vec();
        match self.open_in_place(nonce, aad, &mut buf, tag) {
            Ok(()) => Ok(buf),
            Err(e) => {
                zeroize::Zeroize::zeroize(&mut buf);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-length values")]
mod tests {
    use super::*;
    use crate::crypto::Secret;

    #[test]
    fn seal_opens_only_with_the_same_key_and_aad() {
        let k = SealKey::new(Secret::random());
        let sealed = k.seal(b"aad-1", b"hello");
        assert_eq!(k.open(b"aad-1", &sealed).unwrap(), b"hello");
        assert_eq!(k.open(b"aad-2", &sealed), Err(SealError::Unauthentic));
        let other = SealKey::new(Secret::random());
        assert_eq!(other.open(b"aad-1", &sealed), Err(SealError::Unauthentic));
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let k = SealKey::new(Secret::random());
        let sealed = k.seal(b"x", b"some plaintext bytes");
        for i in 0..sealed.len() * 8 {
            let mut s = sealed.clone();
            s[i / 8] ^= 1 << (i % 8);
            assert!(k.open(b"x", &s).is_err(), "bit {i}");
        }
    }

    #[test]
    fn nonces_are_fresh() {
        let k = SealKey::new(Secret::random());
        assert_ne!(
            k.seal(b"", b"same")[..NONCE_LEN],
            k.seal(b"", b"same")[..NONCE_LEN]
        );
    }

    #[test]
    fn short_input_is_truncated_not_a_panic() {
        let k = SealKey::new(Secret::random());
        assert_eq!(k.open(b"", &[0u8; 10]), Err(SealError::Truncated));
    }
}
