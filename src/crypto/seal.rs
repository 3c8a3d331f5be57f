//! XChaCha20-Poly1305 sealing with caller-built AAD.
//!
//! A seal is `nonce (24) || ciphertext || tag (16)`; the nonce is random for every seal (never
//! positional: after a torn tail is cut, the next block reuses the same offset with different
//! plaintext). Opening checks lengths before slicing and returns no plaintext on failure.
//! The cipher object is built per call on the stack from the [`Key32`], so no long-lived copy
//! of the key sits outside a [`Secret`].

use chacha20::cipher::consts::U10;
use chacha20::cipher::generic_array::GenericArray;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, CHACHA20_POLY1305};
use zeroize::Zeroize;

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

    /// A second handle on the same key (each is zeroized when dropped).
    pub fn duplicate(&self) -> Self {
        SealKey(Key32::from_fn(|k| k.copy_from_slice(self.0.expose())))
    }

    /// XChaCha20-Poly1305 = ChaCha20-Poly1305 under the subkey HChaCha20(key, nonce[..16])
    /// with the 12-byte nonce `0000 || nonce[16..]` (draft-irtf-cfrg-xchacha §2.3).
    fn cipher(&self, nonce: &[u8; NONCE_LEN]) -> (LessSafeKey, Nonce) {
        let (prefix, suffix) = nonce.split_at(16);
        let mut sub = chacha20::hchacha::<U10>(
            GenericArray::from_slice(self.0.expose()),
            GenericArray::from_slice(prefix),
        );
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, sub.as_slice());
        sub.as_mut_slice().zeroize();
        let key = match unbound {
            Ok(k) => LessSafeKey::new(k),
            Err(_) => unreachable!("a 32-byte key is the ChaCha20-Poly1305 key length"),
        };
        let mut n = [0u8; 12];
        if let Some(tail) = n.get_mut(4..) {
            tail.copy_from_slice(suffix);
        }
        (key, Nonce::assume_unique_for_key(n))
    }

    /// Encrypts `buf` in place with a fresh random nonce; returns (nonce, tag).
    pub fn seal_in_place(&self, aad: &[u8], buf: &mut [u8]) -> ([u8; NONCE_LEN], [u8; TAG_LEN]) {
        let mut nonce = [0u8; NONCE_LEN];
        super::random_bytes(&mut nonce);
        let (key, n) = self.cipher(&nonce);
        let tag = key
            .seal_in_place_separate_tag(n, Aad::from(aad), buf)
            .expect("ChaCha20-Poly1305 encryption cannot fail below 256 GiB per message");
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(tag.as_ref());
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
        let (key, n) = self.cipher(nonce);
        let tag = Tag::from(*tag);
        // ring decrypts before it compares tags; on failure put the ciphertext back, so a
        // failed open leaves `buf` exactly as it was (no unauthenticated plaintext, and callers
        // that look at the bytes again see what is on disk).
        let keep = buf.to_vec();
        match key.open_in_place_separate_tag(n, Aad::from(aad), tag, buf, 0..) {
            Ok(_) => Ok(()),
            Err(_) => {
                buf.copy_from_slice(&keep);
                Err(SealError::Unauthentic)
            }
        }
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

    /// Byte for byte the XChaCha20-Poly1305 of the RustCrypto crate, both ways: stores sealed
    /// before the switch to ring open, and the reverse.
    #[test]
    fn same_bytes_as_rustcrypto_xchacha20poly1305() {
        use chacha20poly1305::aead::{AeadInPlace, KeyInit};
        use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
        let raw = [7u8; 32];
        let key = SealKey::new(Secret::new(raw));
        let other = XChaCha20Poly1305::new(Key::from_slice(&raw));
        for len in [0usize, 1, 63, 64, 65, 1000, 70_000] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let aad = b"position-bound aad";
            let sealed = key.seal(aad, &plain);
            let nonce = XNonce::from_slice(&sealed[..NONCE_LEN]);
            let mut body = sealed[NONCE_LEN..sealed.len() - TAG_LEN].to_vec();
            let tag = chacha20poly1305::Tag::from_slice(&sealed[sealed.len() - TAG_LEN..]);
            other
                .decrypt_in_place_detached(nonce, aad, &mut body, tag)
                .unwrap();
            assert_eq!(body, plain);
            let mut buf = plain.clone();
            let theirs = other
                .encrypt_in_place_detached(nonce, aad, &mut buf)
                .unwrap();
            let mut blob = nonce.to_vec();
            blob.extend_from_slice(&buf);
            blob.extend_from_slice(&theirs);
            assert_eq!(key.open(aad, &blob).unwrap(), plain);
        }
    }

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
