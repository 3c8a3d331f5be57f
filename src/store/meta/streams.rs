//! Streams and accounts: create, look up, reconfigure, delete (crypto-erase first), and
//! catalog compaction.
//!
//! Orders (each step durable before the next; see [`super::Step`]):
//!
//! - create: a spare key of the account is taken (when none is left: keyring generation with
//!   the account's key group, new or refilled with spares → `STORE` points at it → old
//!   keyring removed) → `s/<id>/` created → catalog records appended (the
//!   commit point: the record claims the spare; before it, the spare stays a spare and
//!   startup removes the directory).
//! - delete stream / account: new catalog generation without it, under a new catalog key →
//!   keyring generation without its data keys and with only the new catalog key → `STORE`
//!   points at it (the commit point: keys and names gone together) → old keyring and old
//!   catalog shredded → directories removed.

use std::path::PathBuf;

use crate::crypto::DataKey;

use super::catalog::{Record, MAX_CHECKPOINT_LEN, MAX_CONFIG_LEN, MAX_NAME_LEN};
use super::ids::{AccountId, StreamId};
use super::keyring::{self, AccountKeys, StreamKeys};
use super::open::STREAMS_DIR;
use super::tmp;
use super::{MetaError, MetaStore, Step, StreamHandle, StreamMeta};

/// Records beyond the live set that trigger a catalog compaction.
const COMPACT_SLACK: u64 = 1024;

pub(super) fn validate_name(what: &'static str, name: &str) -> Result<(), MetaError> {
    if name.is_empty() {
        return Err(MetaError::Invalid {
            what,
            reason: "empty",
        });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(MetaError::Invalid {
            what,
            reason: "longer than MAX_NAME_LEN bytes",
        });
    }
    Ok(())
}

pub(super) fn validate_config(config: &[u8]) -> Result<(), MetaError> {
    if config.len() > MAX_CONFIG_LEN {
        return Err(MetaError::Invalid {
            what: "config",
            reason: "larger than MAX_CONFIG_LEN bytes",
        });
    }
    Ok(())
}

impl MetaStore {
    /// `s/<stream_id hex>/`.
    pub(super) fn stream_dir(&self, id: &StreamId) -> PathBuf {
        self.root.join(STREAMS_DIR).join(id.to_hex())
    }

    fn stream_keys(&self, id: &StreamId) -> Result<&StreamKeys, MetaError> {
        self.keyring
            .stream(id)
            .map(|(_, k)| k)
            .ok_or_else(|| MetaError::KeyringCorrupt {
                path: keyring::keyring_path(&self.root, self.keyring.gen),
                reason: format!("stream {id} has no data key"),
            })
    }

    fn live_stream(&self, id: &StreamId) -> Result<&super::catalog::StreamEntry, MetaError> {
        self.state
            .streams
            .get(id)
            .ok_or_else(|| MetaError::StreamNotFound(id.to_hex()))
    }

    /// Creates a stream in `account` (the account is created with its first stream).
    ///
    /// # Errors
    /// [`MetaError::StreamExists`] when the name is taken in that account,
    /// [`MetaError::Invalid`] for an empty or oversized name or config, I/O errors (fatal).
    pub fn create_stream(
        &mut self,
        account: &str,
        name: &str,
        config: &[u8],
    ) -> Result<StreamHandle, MetaError> {
        validate_name("account name", account)?;
        validate_name("stream name", name)?;
        validate_config(config)?;
        self.mutate(|s| {
            let existing = s.state.account_by_name.get(account).copied();
            if let Some(aid) = existing {
                if s.state.stream_by_name.contains_key(&(aid, name.to_owned())) {
                    return Err(MetaError::StreamExists);
                }
            }
            let aid = existing.unwrap_or_else(AccountId::random);
            // A spare key of the account, if one is left: claimed by the catalog record below,
            // so no keyring generation is written. Otherwise a generation with the account's
            // group (new) refilled with spares, one of which this create takes.
            let spare = s
                .keyring
                .accounts
                .get(&aid)
                .and_then(|g| g.spares.iter().next())
                .map(|(sid, w)| (*sid, *w));
            let (sid, wrapped) = match spare {
                Some(found) => found,
                None => {
                    let mut kr = s.next_keyring();
                    if existing.is_none() {
                        let (_, wrapped) = keyring::new_wrapped(&s.kek, &aid.0, 1);
                        kr.accounts.insert(aid, AccountKeys::new(1, wrapped));
                    }
                    let group = kr
                        .accounts
                        .get_mut(&aid)
                        .ok_or(MetaError::AccountNotFound)?;
                    group.refill_spares(&s.kek);
                    let found = group
                        .spares
                        .iter()
                        .next()
                        .map(|(sid, w)| (*sid, *w))
                        .ok_or(MetaError::AccountNotFound)?;
                    s.commit_keyring(kr)?;
                    found
                }
            };
            let dek = s
                .kek
                .unwrap(&wrapped, &sid.0, 1)
                .map_err(|_| MetaError::KeyringCorrupt {
                    path: keyring::keyring_path(&s.root, s.keyring.gen),
                    reason: format!("spare key {sid} does not unwrap"),
                })?;
            let dir = s.stream_dir(&sid);
            // `c/` waits for the first consumer state (`persist_consumer_state` creates it):
            // most streams (every KV bucket) never have one, and it is an fsync.
            tmp::create_dir_durable(&dir)?;
            s.step(Step::StreamDirCreated)?;
            let mut records = Vec::with_capacity(2);
            if existing.is_none() {
                records.push(Record::AccountCreate {
                    id: aid,
                    name: account.to_owned(),
                });
            }
            records.push(Record::StreamCreate {
                id: sid,
                account: aid,
                name: name.to_owned(),
                config: config.to_vec(),
            });
            s.append(records)?;
            s.keyring.claim_spares([(&aid, &sid)]);
            Ok(StreamHandle {
                stream_id: sid,
                dir,
                dek,
                dek_version: 1,
                store_uuid: s.header.store_uuid,
            })
        })
    }

    /// Appends records, applies them, reports the step, compacts when due.
    pub(super) fn append(&mut self, records: Vec<Record>) -> Result<(), MetaError> {
        self.catalog.append(&records)?;
        for r in records {
            self.state
                .apply(r)
                .map_err(|reason| MetaError::CatalogCorrupt {
                    path: super::catalog::catalog_path(&self.root, self.catalog.id().gen),
                    offset: 0,
                    reason: format!("in-memory replay refused an appended record: {reason}"),
                })?;
        }
        self.step(Step::CatalogAppended)?;
        let live = self.state.live_records();
        if self.catalog.records() > live.saturating_mul(2).saturating_add(COMPACT_SLACK) {
            let state = self.state.clone();
            self.commit_catalog_and_keyring(state, |_| {})?;
        }
        Ok(())
    }

    /// The handle of an existing stream (current data key).
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`], [`MetaError::StreamDirMissing`] (never treated as an
    /// empty stream), [`MetaError::KeyringCorrupt`] when its key does not unwrap.
    pub fn open_stream(&self, stream_id: StreamId) -> Result<StreamHandle, MetaError> {
        self.live_stream(&stream_id)?;
        let version = self.stream_keys(&stream_id)?.current;
        let dek = self.stream_key(stream_id, version)?;
        let dir = self.stream_dir(&stream_id);
        if !dir.is_dir() {
            return Err(MetaError::StreamDirMissing(dir));
        }
        Ok(StreamHandle {
            stream_id,
            dir,
            dek,
            dek_version: version,
            store_uuid: self.header.store_uuid,
        })
    }

    /// A stream's data key of `version` (to read segments sealed before a DEK rotation).
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`], [`MetaError::DekVersion`] when the version was dropped.
    pub fn stream_key(&self, stream_id: StreamId, version: u32) -> Result<DataKey, MetaError> {
        self.live_stream(&stream_id)?;
        let wrapped =
            self.stream_keys(&stream_id)?
                .keys
                .get(&version)
                .ok_or(MetaError::DekVersion {
                    stream: stream_id.to_hex(),
                    version,
                    reason: "not in the keyring",
                })?;
        self.kek
            .unwrap(wrapped, &stream_id.0, version)
            .map_err(|_| MetaError::KeyringCorrupt {
                path: keyring::keyring_path(&self.root, self.keyring.gen),
                reason: format!("stream {stream_id} key v{version} does not unwrap"),
            })
    }

    fn meta_of(&self, id: &StreamId) -> Option<StreamMeta> {
        let s = self.state.streams.get(id)?;
        let keys = self.keyring.stream(id).map(|(_, k)| k);
        Some(StreamMeta {
            stream_id: *id,
            account: self
                .state
                .accounts
                .get(&s.account)
                .cloned()
                .unwrap_or_default(),
            name: s.name.clone(),
            config: s.config.clone(),
            dek_version: keys.map_or(0, |k| k.current),
            dek_versions: keys
                .map(|k| k.keys.keys().copied().collect())
                .unwrap_or_default(),
        })
    }

    /// A live stream's catalog entry.
    pub fn stream_meta(&self, stream_id: StreamId) -> Option<StreamMeta> {
        self.meta_of(&stream_id)
    }

    /// The streams of `account`, ordered by name.
    pub fn list_streams(&self, account: &str) -> Vec<StreamMeta> {
        let Some(aid) = self.state.account_by_name.get(account) else {
            return Vec::new();
        };
        self.state
            .stream_by_name
            .range((*aid, String::new())..)
            .take_while(|((a, _), _)| a == aid)
            .filter_map(|(_, id)| self.meta_of(id))
            .collect()
    }

    /// Looks a stream up by (account, name).
    pub fn stream_by_name(&self, account: &str, name: &str) -> Option<StreamMeta> {
        let aid = self.state.account_by_name.get(account)?;
        let id = self.state.stream_by_name.get(&(*aid, name.to_owned()))?;
        self.meta_of(id)
    }

    /// Every account with at least one stream, or created and not deleted.
    pub fn list_accounts(&self) -> Vec<String> {
        self.state.account_by_name.keys().cloned().collect()
    }

    /// The account's own data key (owner = its opaque [`AccountId`]), for account-scoped
    /// sealed data; it is erased together with the account's streams by
    /// [`MetaStore::delete_account`].
    ///
    /// # Errors
    /// [`MetaError::AccountNotFound`], [`MetaError::KeyringCorrupt`] when it does not unwrap.
    pub fn account_key(&self, account: &str) -> Result<(AccountId, DataKey), MetaError> {
        let aid = *self
            .state
            .account_by_name
            .get(account)
            .ok_or(MetaError::AccountNotFound)?;
        let bad = |reason: &str| MetaError::KeyringCorrupt {
            path: keyring::keyring_path(&self.root, self.keyring.gen),
            reason: reason.into(),
        };
        let g = self
            .keyring
            .accounts
            .get(&aid)
            .ok_or_else(|| bad("account has no key group"))?;
        let dek = self
            .kek
            .unwrap(&g.key, &aid.0, g.version)
            .map_err(|_| bad("an account key does not unwrap"))?;
        Ok((aid, dek))
    }

    /// Replaces a stream's config.
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`], [`MetaError::Invalid`], I/O (fatal).
    pub fn update_stream_config(
        &mut self,
        stream_id: StreamId,
        config: &[u8],
    ) -> Result<(), MetaError> {
        validate_config(config)?;
        self.live_stream(&stream_id)?;
        self.mutate(|s| {
            s.append(vec![Record::StreamConfig {
                id: stream_id,
                config: config.to_vec(),
            }])
        })
    }

    /// Records the segment engine's latest checkpoint for a stream (opaque bytes, e.g. the
    /// last durable block per segment), durable when this returns.
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`], [`MetaError::Invalid`] above [`MAX_CHECKPOINT_LEN`].
    pub fn persist_stream_checkpoint(
        &mut self,
        stream_id: StreamId,
        data: &[u8],
    ) -> Result<(), MetaError> {
        if data.len() > MAX_CHECKPOINT_LEN {
            return Err(MetaError::Invalid {
                what: "checkpoint",
                reason: "larger than MAX_CHECKPOINT_LEN",
            });
        }
        self.live_stream(&stream_id)?;
        self.mutate(|s| {
            s.append(vec![Record::StreamCheckpoint {
                id: stream_id,
                data: data.to_vec(),
            }])
        })
    }

    /// The latest checkpoint of a stream.
    pub fn stream_checkpoint(&self, stream_id: StreamId) -> Option<&[u8]> {
        self.state.streams.get(&stream_id)?.checkpoint.as_deref()
    }

    /// Deletes a stream: [`erase_stream`](Self::erase_stream), then its files go.
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`], I/O (fatal; a restart finishes the deletion if the
    /// commit point was reached).
    pub fn delete_stream(&mut self, stream_id: StreamId) -> Result<(), MetaError> {
        self.erase_stream(stream_id)?;
        self.mutate(|s| {
            tmp::remove_dir_durable(&s.stream_dir(&stream_id))?;
            s.step(Step::StreamFilesRemoved)
        })
    }

    /// Erases a stream: its data keys (and its name, via a new catalog key) go in one committed
    /// keyring generation. From here its files are ciphertext nobody can read; they are removed
    /// by [`remove_stream_files`](Self::remove_stream_files) once nothing writes them any more,
    /// or by the next open's sweep if the process stops first.
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`], I/O (fatal).
    pub fn erase_stream(&mut self, stream_id: StreamId) -> Result<(), MetaError> {
        self.live_stream(&stream_id)?;
        self.mutate(|s| {
            let mut state = s.state.clone();
            state
                .apply(Record::StreamDelete { id: stream_id })
                .map_err(|_| MetaError::StreamNotFound(stream_id.to_hex()))?;
            s.commit_catalog_and_keyring(state, |kr| {
                kr.remove_stream(&stream_id);
            })
        })
    }

    /// Where an erased stream's files are, for its own store thread to remove them with
    /// [`remove_erased_stream_files`] after closing them (no lock held while they go).
    /// `None` while the stream is live: its files are never removed then.
    pub fn erased_stream_files(&self, stream_id: StreamId) -> Option<PathBuf> {
        (!self.state.streams.contains_key(&stream_id)).then(|| self.stream_dir(&stream_id))
    }

    /// Deletes an account (tenant erasure): every stream's data keys, the account's key group
    /// and every name are erased in one committed keyring generation, then the files go.
    /// Returns how many streams were deleted.
    ///
    /// # Errors
    /// [`MetaError::AccountNotFound`], I/O (fatal).
    pub fn delete_account(&mut self, account: &str) -> Result<usize, MetaError> {
        let aid = *self
            .state
            .account_by_name
            .get(account)
            .ok_or(MetaError::AccountNotFound)?;
        self.mutate(|s| {
            let streams: Vec<StreamId> = s
                .state
                .streams
                .iter()
                .filter(|(_, e)| e.account == aid)
                .map(|(id, _)| *id)
                .collect();
            let mut state = s.state.clone();
            state
                .apply(Record::AccountDelete { id: aid })
                .map_err(|_| MetaError::AccountNotFound)?;
            s.commit_catalog_and_keyring(state, |kr| {
                kr.accounts.remove(&aid);
            })?;
            for id in &streams {
                tmp::remove_dir_durable(&s.stream_dir(id))?;
            }
            s.step(Step::StreamFilesRemoved)?;
            Ok(streams.len())
        })
    }

    /// What erasing `account` destroys, by key id (never key material): the account key's id
    /// and version, each stream's id and data-key versions, how many spare stream keys it
    /// holds. `None`: no such account.
    pub fn erasure_inventory(&self, account: &str) -> Option<ErasureInventory> {
        let aid = *self.state.account_by_name.get(account)?;
        let group = self.keyring.accounts.get(&aid)?;
        Some(ErasureInventory {
            account_id: aid,
            account_key_version: group.version,
            streams: group
                .streams
                .iter()
                .map(|(id, k)| (*id, k.keys.keys().copied().collect()))
                .collect(),
            spares: group.spares.len(),
        })
    }

    /// Whether the keyring in force still holds any key `inventory` names.
    pub fn holds_any_key_of(&self, inventory: &ErasureInventory) -> bool {
        self.keyring.accounts.contains_key(&inventory.account_id)
            || inventory
                .streams
                .iter()
                .any(|(id, _)| self.keyring.holds(id))
    }

    /// The keyring generation in force.
    pub fn keyring_generation(&self) -> u64 {
        self.keyring.gen
    }

    /// Rewrites the catalog as its live records into a new generation under a new catalog
    /// key (names of deleted consumers and old configs are erased with the old key).
    ///
    /// # Errors
    /// I/O (fatal).
    pub fn compact_catalog(&mut self) -> Result<(), MetaError> {
        self.mutate(|s| {
            let state = s.state.clone();
            s.commit_catalog_and_keyring(state, |_| {})
        })
    }
}

/// Removes an erased stream's files, found with [`MetaStore::erased_stream_files`] (no-op when
/// they are gone already). Needs no lock: nothing else writes an erased stream's directory.
/// Not made durable (no directory fsync): a crash can bring back only ciphertext under an
/// erased key, in a directory the catalog no longer names, which the next open sweeps.
///
/// # Errors
/// I/O; the next open's sweep removes what is left.
pub fn remove_erased_stream_files(dir: &std::path::Path) -> Result<(), MetaError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(super::error::io_err("remove directory", dir)(e)),
    }
}

/// The keys an account's erasure destroys ([`MetaStore::erasure_inventory`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErasureInventory {
    /// The account's random id (its key's owner).
    pub account_id: super::AccountId,
    /// The account key's version.
    pub account_key_version: u32,
    /// Each stream's id and data-key versions.
    pub streams: Vec<(StreamId, Vec<u32>)>,
    /// Spare stream keys made ahead of need (never used).
    pub spares: usize,
}
