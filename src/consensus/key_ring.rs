//! A group's keys on this node: the newest seals, each one still held opens what it sealed.
//!
//! Why several: a group's key is rotated while the group runs (issue 17, `rekey-live` on a
//! replicated stream). From the rotation on, the group's new log records and snapshots are
//! sealed with the new key; records written before it stay under the older key until the log
//! is purged past them and the snapshot is rebuilt under the new one — then the older key is
//! dropped (`server/jetstream/cluster/group_rekey.rs`). The log and the group's snapshot file
//! share one ring, so both see a rotation at once.
//!
//! Lock: one `RwLock`, a leaf (nothing is locked or awaited while it is held).

use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::crypto::seal::SealError;
use crate::crypto::{SealKey, NONCE_LEN, TAG_LEN};

/// Newest first; never empty.
#[derive(Clone)]
pub struct KeyRing(Arc<RwLock<Vec<SealKey>>>);

impl KeyRing {
    /// A ring of one key.
    pub fn new(key: SealKey) -> Self {
        KeyRing(Arc::new(RwLock::new(vec![key])))
    }

    /// A ring of `keys`, newest first; `None` when empty.
    pub fn of(keys: Vec<SealKey>) -> Option<Self> {
        (!keys.is_empty()).then(|| KeyRing(Arc::new(RwLock::new(keys))))
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<SealKey>> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A handle on the newest key.
    pub fn newest(&self) -> SealKey {
        match self.read().first() {
            Some(k) => k.duplicate(),
            None => unreachable!("a key ring is never empty"),
        }
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Never: a ring holds at least one key (for clippy's `len` rule).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Makes `key` the newest: it seals from now on; the earlier keys still open.
    pub fn push(&self, key: SealKey) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(0, key);
    }

    /// Drops every key but the newest (what they sealed opens for nobody any more here).
    pub fn keep_newest(&self) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .truncate(1);
    }

    /// Seals `buf` in place with the newest key.
    pub fn seal_in_place(&self, aad: &[u8], buf: &mut [u8]) -> ([u8; NONCE_LEN], [u8; TAG_LEN]) {
        match self.read().first() {
            Some(k) => k.seal_in_place(aad, buf),
            None => unreachable!("a key ring is never empty"),
        }
    }

    /// Seals `plaintext` with the newest key ([`SealKey::seal`]).
    pub fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        match self.read().first() {
            Some(k) => k.seal(aad, plaintext),
            None => unreachable!("a key ring is never empty"),
        }
    }

    /// Opens what one of its keys sealed ([`SealKey::open`]); gives the plaintext and which
    /// key opened it (0: the newest).
    ///
    /// # Errors
    /// No key opens it.
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<(Vec<u8>, usize), SealError> {
        let keys = self.read();
        let mut last = SealError::Unauthentic;
        for (i, k) in keys.iter().enumerate() {
            match k.open(aad, sealed) {
                Ok(plain) => return Ok((plain, i)),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Opens `buf` in place with whichever key sealed it ([`SealKey::open_in_place`]); gives
    /// a handle on that key. On failure `buf` is as it was.
    ///
    /// # Errors
    /// No key opens it.
    pub fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(SealKey, usize), SealError> {
        let keys = self.read();
        for (i, k) in keys.iter().enumerate() {
            if k.open_in_place(nonce, aad, buf, tag).is_ok() {
                return Ok((k.duplicate(), i));
            }
        }
        Err(SealError::Unauthentic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Key32;

    fn key(b: u8) -> SealKey {
        SealKey::new(Key32::from_fn(|k| k.fill(b)))
    }

    #[test]
    fn the_newest_key_seals_and_every_held_key_opens_until_dropped() {
        let ring = KeyRing::new(key(1));
        let old = ring.seal(b"aad", b"under the first key");
        ring.push(key(2));
        let new = ring.seal(b"aad", b"under the second key");
        assert_eq!(ring.len(), 2);
        assert_eq!(
            ring.open(b"aad", &new).expect("opens"),
            (b"under the second key".to_vec(), 0)
        );
        assert_eq!(
            ring.open(b"aad", &old).expect("opens"),
            (b"under the first key".to_vec(), 1)
        );
        assert!(key(1).open(b"aad", &new).is_err(), "sealed with the newest");
        ring.keep_newest();
        assert_eq!(ring.len(), 1);
        assert!(
            ring.open(b"aad", &old).is_err(),
            "the dropped key's records"
        );
        assert!(ring.open(b"aad", &new).is_ok());
        assert!(ring.open(b"other aad", &new).is_err());
    }
}
