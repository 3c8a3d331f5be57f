//! Key rotation: the master key ([`MetaStore::rotate_master`]) and a stream's data key
//! ([`MetaStore::rotate_dek`], [`MetaStore::drop_dek_version`]). No data is rewritten.
//!
//! Master rotation, each step durable before the next:
//!
//! 1. derive the new KEK (nothing on disk);
//! 2. write keyring generation g+1 with every data key rewrapped under the new KEK;
//! 3. write `STORE` with the **inactive** slot = {new kdf, params, salt, new kek_id, g+1};
//! 4. write `STORE` with the active-slot byte flipped (the commit point);
//! 5. shred keyring generation g.
//!
//! A crash before 4 leaves the old slot active and generation g intact: the old key opens
//! (and startup shreds the unused g+1). From 4 on the new slot is active and g+1 is complete:
//! the new key opens (and startup shreds g if step 5 did not finish). Every `STORE` write is a
//! whole-file atomic replacement, so no state mixes the two.

use super::header::Slot;
use super::keyring;
use super::open::new_key;
use super::tmp;
use super::{KeySource, MetaError, MetaStore, Step, StreamHandle, StreamId};

impl MetaStore {
    /// Replaces the master key: rewraps every data key under the new KEK and switches the
    /// `STORE` slot, crash-safely (old or new key opens at every step). `new` must be a
    /// passphrase or a key file (not [`KeySource::Auto`]) outside `store_dir`.
    ///
    /// # Errors
    /// [`MetaError::KeyConfig`] for `Auto` or when the new key equals the current one;
    /// [`MetaError::Key`] for an unusable key file; I/O (fatal).
    pub fn rotate_master(&mut self, new: KeySource) -> Result<(), MetaError> {
        self.writable()?;
        if let KeySource::Auto = new {
            return Err(MetaError::KeyConfig(
                "master key rotation needs an explicit new passphrase or key file".into(),
            ));
        }
        let nk = new_key(&self.root, &new, self.kdf)?;
        let uuid = self.header.store_uuid;
        let new_kek = crate::crypto::Kek::derive(&nk.mk, &uuid);
        drop(nk.mk);
        if new_kek.id_matches(&self.kek.id()) {
            return Err(MetaError::KeyConfig(
                "the new master key is the current one".into(),
            ));
        }
        self.mutate(|s| {
            let old_gen = s.keyring.gen;
            let mut kr = s.next_keyring().rewrap(&s.kek, &new_kek).map_err(|_| {
                MetaError::KeyringCorrupt {
                    path: keyring::keyring_path(&s.root, old_gen),
                    reason: "a key did not unwrap during rotation".into(),
                }
            })?;
            kr.gen = old_gen.saturating_add(1);
            let bytes = keyring::seal_within_limit(&kr, &new_kek, &uuid)?;
            tmp::write_atomic(&s.root, &keyring::keyring_path(&s.root, kr.gen), &bytes)?;
            s.step(Step::KeyringWritten)?;
            let inactive = s.header.active.other();
            let mut h = s.header.clone();
            h.set_slot(
                inactive,
                Slot::new(&new_kek, &uuid, inactive, nk.kind, nk.params, kr.gen),
            );
            s.write_header(h.clone())?;
            s.step(Step::InactiveSlotWritten)?;
            h.active = inactive;
            s.write_header(h)?;
            s.kek = new_kek;
            s.keyring = kr;
            s.step(Step::ActiveSlotFlipped)?;
            tmp::shred_and_remove(&keyring::keyring_path(&s.root, old_gen))?;
            s.step(Step::OldKeyringShredded)?;
            tracing::info!(store = %s.root.display(), "master key rotated");
            Ok(())
        })
    }

    /// Adds a new data key version for a stream's new segments; older versions stay in the
    /// keyring (to read old segments) until [`MetaStore::drop_dek_version`]. Returns the handle
    /// with the new key.
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`], I/O (fatal).
    pub fn rotate_dek(&mut self, stream_id: StreamId) -> Result<StreamHandle, MetaError> {
        if !self.state.streams.contains_key(&stream_id) {
            return Err(MetaError::StreamNotFound(stream_id.to_hex()));
        }
        self.mutate(|s| {
            let mut kr = s.next_keyring();
            let keys = kr
                .stream_mut(&stream_id)
                .ok_or_else(|| MetaError::StreamNotFound(stream_id.to_hex()))?;
            let version = keys
                .keys
                .keys()
                .next_back()
                .and_then(|v| v.checked_add(1))
                .ok_or(MetaError::DekVersion {
                    stream: stream_id.to_hex(),
                    version: u32::MAX,
                    reason: "versions exhausted",
                })?;
            let (_, wrapped) = keyring::new_wrapped(&s.kek, &stream_id.0, version);
            keys.keys.insert(version, wrapped);
            keys.current = version;
            s.commit_keyring(kr)?;
            s.open_stream(stream_id)
        })
    }

    /// Drops an old data key version once nothing uses it any more (the segment engine has
    /// rewritten or deleted every segment sealed with it). Consumer state files still sealed
    /// with it make this refuse.
    ///
    /// # Errors
    /// [`MetaError::DekVersion`] for the current, an unknown, or a still-used version;
    /// [`MetaError::StreamNotFound`]; I/O (fatal).
    pub fn drop_dek_version(&mut self, stream_id: StreamId, version: u32) -> Result<(), MetaError> {
        let refuse = |reason| MetaError::DekVersion {
            stream: stream_id.to_hex(),
            version,
            reason,
        };
        if !self.state.streams.contains_key(&stream_id) {
            return Err(MetaError::StreamNotFound(stream_id.to_hex()));
        }
        let keys = self
            .keyring
            .stream(&stream_id)
            .map(|(_, k)| k)
            .ok_or(refuse("not in the keyring"))?;
        if keys.current == version {
            return Err(refuse("is the current version"));
        }
        if !keys.keys.contains_key(&version) {
            return Err(refuse("not in the keyring"));
        }
        if self
            .consumer_state_versions(&stream_id)?
            .iter()
            .any(|v| v.is_none_or(|v| v == version))
        {
            return Err(refuse("still seals a consumer state file"));
        }
        self.mutate(|s| {
            let mut kr = s.next_keyring();
            if let Some(k) = kr.stream_mut(&stream_id) {
                k.keys.remove(&version);
            }
            s.commit_keyring(kr)
        })
    }
}
