//! The catalog: `catalog/cat-<gen:08>.log`, the sealed, append-only map from opaque ids to
//! names and configs.
//!
//! Records (all inside seals): accounts `AccountId ↔ name`; streams
//! `StreamId ↔ (AccountId, name, config)`; consumers `ConsumerId ↔ (StreamId, name, config)`;
//! config updates; deletions (an account deletion cascades to its streams, a stream deletion
//! to its consumers); stream checkpoints (opaque bytes for the segment engine's durability
//! watermark). Replaying the records builds [`CatalogState`]; a record that does not make sense
//! against the state so far (duplicate id, unknown id, name clash) is corruption.
//!
//! Each record is sealed with the catalog data key and chained: AAD = domain || store_uuid ||
//! generation || key version || record index || tag of the previous record (the header seal's
//! tag for the first), so records cannot be reordered, dropped from the middle, or moved to
//! another generation or store. Compaction writes the live state into a new generation under a
//! new catalog key version; dropping the old key version from the keyring crypto-erases the
//! names of deleted streams still present in the old file.
//!
//! ```text
//! file header (88 bytes)
//!      0     8  magic "SEALCATL"
//!      8     4  format version (u32 LE, = 1)
//!     12     4  reserved, zero
//!     16    16  store_uuid
//!     32     8  generation (u64 LE; equals the file name)
//!     40     4  catalog key version (u32 LE)
//!     44     4  reserved, zero
//!     48    40  header seal: nonce(24) || tag(16) over an empty plaintext,
//!               AAD = "sealstream catalog header v1" || bytes 0..48
//! record
//!      0     4  sealed length n (u32 LE)
//!      4     4  !n (bitwise complement: a damaged length is corruption, never a torn tail)
//!      8     n  nonce(24) || ciphertext || tag(16)
//! ```
//!
//! Torn tail: only an incomplete final record (or an all-zero tail from a record boundary, or
//! a final record whose tag is all zero: a zero-filled extension after a crash) is a torn
//! write; it was never acknowledged (appends are fsynced before an operation returns) and is
//! cut off at startup. Anything else that fails is corruption and stops startup.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::crypto::{SealKey, NONCE_LEN, TAG_LEN};

use super::codec::{PutLe, Reader};
use super::error::io_err;
use super::ids::{AccountId, ConsumerId, StreamId};
use super::MetaError;

/// Directory of catalog generations under `store_dir`.
pub(crate) const CATALOG_DIR: &str = "catalog";
const MAGIC: &[u8; 8] = b"SEALCATL";
const FORMAT_VERSION: u32 = 1;
const HEADER_PLAIN_LEN: usize = 48;
/// Length of the catalog file header.
pub(crate) const HEADER_LEN: usize = HEADER_PLAIN_LEN + NONCE_LEN + TAG_LEN;
const HEADER_DOMAIN: &[u8] = b"sealstream catalog header v1";
const RECORD_DOMAIN: &[u8] = b"sealstream catalog record v1";
/// Record plaintexts are zero-padded to a multiple of this (blurs name lengths).
const RECORD_BUCKET: usize = 64;
/// Longest account, stream or consumer name.
pub const MAX_NAME_LEN: usize = 1024;
/// Largest stream or consumer config.
pub const MAX_CONFIG_LEN: usize = 1 << 20;
/// Largest stream checkpoint.
pub const MAX_CHECKPOINT_LEN: usize = 64 << 10;
const MAX_SEALED_RECORD: usize = MAX_CONFIG_LEN + MAX_NAME_LEN + 256 + RECORD_BUCKET;
/// Largest catalog file read at startup.
const MAX_CATALOG_FILE: u64 = 1 << 30;

/// Path of catalog generation `gen`.
pub(crate) fn catalog_path(root: &Path, gen: u64) -> PathBuf {
    root.join(CATALOG_DIR).join(format!("cat-{gen:08}.log"))
}

/// The generation in a canonical catalog file name, if it is one.
pub(crate) fn parse_catalog_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("cat-")?.strip_suffix(".log")?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let gen: u64 = digits.parse().ok()?;
    (format!("{gen:08}") == digits).then_some(gen)
}

/// One catalog record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// A new account.
    AccountCreate { id: AccountId, name: String },
    /// An account and everything in it is gone.
    AccountDelete { id: AccountId },
    /// A new stream.
    StreamCreate {
        id: StreamId,
        account: AccountId,
        name: String,
        config: Vec<u8>,
    },
    /// A stream's new config.
    StreamConfig { id: StreamId, config: Vec<u8> },
    /// A stream and its consumers are gone.
    StreamDelete { id: StreamId },
    /// A new consumer.
    ConsumerCreate {
        id: ConsumerId,
        stream: StreamId,
        name: String,
        config: Vec<u8>,
    },
    /// A consumer's new config.
    ConsumerConfig { id: ConsumerId, config: Vec<u8> },
    /// A consumer is gone.
    ConsumerDelete { id: ConsumerId },
    /// The segment engine's latest checkpoint for a stream (opaque).
    StreamCheckpoint { id: StreamId, data: Vec<u8> },
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        match self {
            Record::AccountCreate { id, name } => {
                b.put_u8(1);
                b.extend_from_slice(&id.0);
                b.put_bytes_u16(name.as_bytes());
            }
            Record::AccountDelete { id } => {
                b.put_u8(2);
                b.extend_from_slice(&id.0);
            }
            Record::StreamCreate {
                id,
                account,
                name,
                config,
            } => {
                b.put_u8(3);
                b.extend_from_slice(&id.0);
                b.extend_from_slice(&account.0);
                b.put_bytes_u16(name.as_bytes());
                b.put_bytes_u32(config);
            }
            Record::StreamConfig { id, config } => {
                b.put_u8(4);
                b.extend_from_slice(&id.0);
                b.put_bytes_u32(config);
            }
            Record::StreamDelete { id } => {
                b.put_u8(5);
                b.extend_from_slice(&id.0);
            }
            Record::ConsumerCreate {
                id,
                stream,
                name,
                config,
            } => {
                b.put_u8(6);
                b.extend_from_slice(&id.0);
                b.extend_from_slice(&stream.0);
                b.put_bytes_u16(name.as_bytes());
                b.put_bytes_u32(config);
            }
            Record::ConsumerConfig { id, config } => {
                b.put_u8(7);
                b.extend_from_slice(&id.0);
                b.put_bytes_u32(config);
            }
            Record::ConsumerDelete { id } => {
                b.put_u8(8);
                b.extend_from_slice(&id.0);
            }
            Record::StreamCheckpoint { id, data } => {
                b.put_u8(9);
                b.extend_from_slice(&id.0);
                b.put_bytes_u32(data);
            }
        }
        let padded = b.len().div_ceil(RECORD_BUCKET) * RECORD_BUCKET;
        b.resize(padded, 0);
        b
    }

    fn decode(b: &[u8]) -> Result<Record, &'static str> {
        let mut r = Reader::new(b);
        let name = |r: &mut Reader<'_>| -> Result<String, &'static str> {
            let n = r.bytes_u16(MAX_NAME_LEN)?;
            String::from_utf8(n.to_vec()).map_err(|_| "name is not UTF-8")
        };
        let rec = match r.u8()? {
            1 => Record::AccountCreate {
                id: AccountId(r.array()?),
                name: name(&mut r)?,
            },
            2 => Record::AccountDelete {
                id: AccountId(r.array()?),
            },
            3 => Record::StreamCreate {
                id: StreamId(r.array()?),
                account: AccountId(r.array()?),
                name: name(&mut r)?,
                config: r.bytes_u32(MAX_CONFIG_LEN)?.to_vec(),
            },
            4 => Record::StreamConfig {
                id: StreamId(r.array()?),
                config: r.bytes_u32(MAX_CONFIG_LEN)?.to_vec(),
            },
            5 => Record::StreamDelete {
                id: StreamId(r.array()?),
            },
            6 => Record::ConsumerCreate {
                id: ConsumerId(r.array()?),
                stream: StreamId(r.array()?),
                name: name(&mut r)?,
                config: r.bytes_u32(MAX_CONFIG_LEN)?.to_vec(),
            },
            7 => Record::ConsumerConfig {
                id: ConsumerId(r.array()?),
                config: r.bytes_u32(MAX_CONFIG_LEN)?.to_vec(),
            },
            8 => Record::ConsumerDelete {
                id: ConsumerId(r.array()?),
            },
            9 => Record::StreamCheckpoint {
                id: StreamId(r.array()?),
                data: r.bytes_u32(MAX_CHECKPOINT_LEN)?.to_vec(),
            },
            _ => return Err("unknown record kind"),
        };
        r.finish_zero_padding()?;
        Ok(rec)
    }
}

/// A live stream as the catalog knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StreamEntry {
    /// Owning account.
    pub(crate) account: AccountId,
    /// Stream name.
    pub(crate) name: String,
    /// Current config bytes.
    pub(crate) config: Vec<u8>,
    /// Latest checkpoint, if any.
    pub(crate) checkpoint: Option<Vec<u8>>,
}

/// A live consumer as the catalog knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConsumerEntry {
    /// Its stream.
    pub(crate) stream: StreamId,
    /// Consumer name.
    pub(crate) name: String,
    /// Current config bytes.
    pub(crate) config: Vec<u8>,
}

/// Everything live, rebuilt by replaying the records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CatalogState {
    /// Account names by id.
    pub(crate) accounts: BTreeMap<AccountId, String>,
    /// Account ids by name.
    pub(crate) account_by_name: BTreeMap<String, AccountId>,
    /// Live streams.
    pub(crate) streams: BTreeMap<StreamId, StreamEntry>,
    /// Stream ids by (account, name).
    pub(crate) stream_by_name: BTreeMap<(AccountId, String), StreamId>,
    /// Live consumers.
    pub(crate) consumers: BTreeMap<ConsumerId, ConsumerEntry>,
    /// Consumer ids by (stream, name).
    pub(crate) consumer_by_name: BTreeMap<(StreamId, String), ConsumerId>,
    /// Live streams that have a checkpoint (kept so that counting live records is O(1)).
    checkpointed: usize,
}

impl CatalogState {
    /// Applies one record, refusing anything inconsistent.
    pub(crate) fn apply(&mut self, rec: Record) -> Result<(), &'static str> {
        match rec {
            Record::AccountCreate { id, name } => {
                if self.accounts.contains_key(&id) || self.account_by_name.contains_key(&name) {
                    return Err("account created twice");
                }
                self.account_by_name.insert(name.clone(), id);
                self.accounts.insert(id, name);
            }
            Record::AccountDelete { id } => {
                let name = self
                    .accounts
                    .remove(&id)
                    .ok_or("deletion of an unknown account")?;
                self.account_by_name.remove(&name);
                let streams: Vec<StreamId> = self
                    .streams
                    .iter()
                    .filter(|(_, s)| s.account == id)
                    .map(|(k, _)| *k)
                    .collect();
                for s in streams {
                    self.remove_stream(s);
                }
            }
            Record::StreamCreate {
                id,
                account,
                name,
                config,
            } => {
                if !self.accounts.contains_key(&account) {
                    return Err("stream of an unknown account");
                }
                if self.streams.contains_key(&id) {
                    return Err("stream created twice");
                }
                if self
                    .stream_by_name
                    .insert((account, name.clone()), id)
                    .is_some()
                {
                    return Err("stream name used twice in an account");
                }
                self.streams.insert(
                    id,
                    StreamEntry {
                        account,
                        name,
                        config,
                        checkpoint: None,
                    },
                );
            }
            Record::StreamConfig { id, config } => {
                self.streams
                    .get_mut(&id)
                    .ok_or("config of an unknown stream")?
                    .config = config;
            }
            Record::StreamDelete { id } => {
                if !self.streams.contains_key(&id) {
                    return Err("deletion of an unknown stream");
                }
                self.remove_stream(id);
            }
            Record::ConsumerCreate {
                id,
                stream,
                name,
                config,
            } => {
                if !self.streams.contains_key(&stream) {
                    return Err("consumer of an unknown stream");
                }
                if self.consumers.contains_key(&id) {
                    return Err("consumer created twice");
                }
                if self
                    .consumer_by_name
                    .insert((stream, name.clone()), id)
                    .is_some()
                {
                    return Err("consumer name used twice on a stream");
                }
                self.consumers.insert(
                    id,
                    ConsumerEntry {
                        stream,
                        name,
                        config,
                    },
                );
            }
            Record::ConsumerConfig { id, config } => {
                self.consumers
                    .get_mut(&id)
                    .ok_or("config of an unknown consumer")?
                    .config = config;
            }
            Record::ConsumerDelete { id } => {
                let c = self
                    .consumers
                    .remove(&id)
                    .ok_or("deletion of an unknown consumer")?;
                self.consumer_by_name.remove(&(c.stream, c.name));
            }
            Record::StreamCheckpoint { id, data } => {
                let entry = self
                    .streams
                    .get_mut(&id)
                    .ok_or("checkpoint of an unknown stream")?;
                if entry.checkpoint.replace(data).is_none() {
                    self.checkpointed += 1;
                }
            }
        }
        Ok(())
    }

    /// The records a compacted generation of this state holds.
    pub(crate) fn live_records(&self) -> u64 {
        (self.accounts.len() + self.streams.len() + self.checkpointed + self.consumers.len()) as u64
    }

    fn remove_stream(&mut self, id: StreamId) {
        if let Some(s) = self.streams.remove(&id) {
            self.checkpointed -= usize::from(s.checkpoint.is_some());
            self.stream_by_name.remove(&(s.account, s.name));
        }
        let consumers: Vec<ConsumerId> = self
            .consumers
            .iter()
            .filter(|(_, c)| c.stream == id)
            .map(|(k, _)| *k)
            .collect();
        for c in consumers {
            if let Some(e) = self.consumers.remove(&c) {
                self.consumer_by_name.remove(&(e.stream, e.name));
            }
        }
    }

    /// The records that rebuild exactly this state (a compacted generation).
    pub(crate) fn snapshot(&self) -> Vec<Record> {
        let mut out = Vec::new();
        for (id, name) in &self.accounts {
            out.push(Record::AccountCreate {
                id: *id,
                name: name.clone(),
            });
        }
        for (id, s) in &self.streams {
            out.push(Record::StreamCreate {
                id: *id,
                account: s.account,
                name: s.name.clone(),
                config: s.config.clone(),
            });
            if let Some(data) = &s.checkpoint {
                out.push(Record::StreamCheckpoint {
                    id: *id,
                    data: data.clone(),
                });
            }
        }
        for (id, c) in &self.consumers {
            out.push(Record::ConsumerCreate {
                id: *id,
                stream: c.stream,
                name: c.name.clone(),
                config: c.config.clone(),
            });
        }
        out
    }
}

/// Identity of one catalog generation (what every AAD binds).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CatalogId {
    /// The store.
    pub(crate) store_uuid: [u8; 16],
    /// The generation.
    pub(crate) gen: u64,
    /// The catalog key version sealing it.
    pub(crate) key_version: u32,
}

impl CatalogId {
    fn header_plain(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(HEADER_PLAIN_LEN);
        h.extend_from_slice(MAGIC);
        h.put_u32(FORMAT_VERSION);
        h.put_u32(0);
        h.extend_from_slice(&self.store_uuid);
        h.put_u64(self.gen);
        h.put_u32(self.key_version);
        h.put_u32(0);
        h
    }

    fn record_aad(&self, index: u64, prev_tag: &[u8; TAG_LEN]) -> Vec<u8> {
        let mut a = RECORD_DOMAIN.to_vec();
        a.extend_from_slice(&self.store_uuid);
        a.put_u64(self.gen);
        a.put_u32(self.key_version);
        a.put_u64(index);
        a.extend_from_slice(prev_tag);
        a
    }
}

fn header_aad(plain: &[u8]) -> Vec<u8> {
    let mut a = HEADER_DOMAIN.to_vec();
    a.extend_from_slice(plain);
    a
}

fn tag_of(sealed: &[u8]) -> [u8; TAG_LEN] {
    let mut t = [0u8; TAG_LEN];
    if let Some(s) = sealed
        .len()
        .checked_sub(TAG_LEN)
        .and_then(|at| sealed.get(at..))
    {
        t.copy_from_slice(s);
    }
    t
}

/// Where appending continues: end offset, next index and chain value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Byte offset of the end of the last good record.
    pub(crate) end: u64,
    /// Records so far (the next record's index).
    pub(crate) records: u64,
    /// Tag of the last record (or of the header seal).
    pub(crate) prev_tag: [u8; TAG_LEN],
}

fn seal_records(
    id: &CatalogId,
    key: &SealKey,
    cursor: &mut Cursor,
    records: &[Record],
    out: &mut Vec<u8>,
) {
    for rec in records {
        let plain = zeroize::Zeroizing::new(rec.encode());
        let sealed = key.seal(&id.record_aad(cursor.records, &cursor.prev_tag), &plain);
        let n = u32::try_from(sealed.len()).expect("records are bounded by MAX_SEALED_RECORD");
        out.put_u32(n);
        out.put_u32(!n);
        out.extend_from_slice(&sealed);
        cursor.prev_tag = tag_of(&sealed);
        cursor.records += 1;
        cursor.end += 8 + u64::from(n);
    }
}

/// The bytes of a new generation holding `records` (written with [`super::tmp::write_atomic`]).
pub(crate) fn build_generation(
    id: &CatalogId,
    key: &SealKey,
    records: &[Record],
) -> (Vec<u8>, Cursor) {
    let plain = id.header_plain();
    let seal = key.seal(&header_aad(&plain), &[]);
    let mut out = plain;
    out.extend_from_slice(&seal);
    let mut cursor = Cursor {
        end: out.len() as u64,
        records: 0,
        prev_tag: tag_of(&seal),
    };
    seal_records(id, key, &mut cursor, records, &mut out);
    (out, cursor)
}

/// Result of reading a catalog generation.
pub(crate) struct Loaded {
    /// Live state.
    pub(crate) state: CatalogState,
    /// Where appends continue.
    pub(crate) cursor: Cursor,
    /// Bytes after `cursor.end` that were a torn final write.
    pub(crate) torn_bytes: u64,
}

/// Reads and verifies generation `id.gen` at `path`.
///
/// # Errors
/// [`MetaError::CatalogMissing`], [`MetaError::CatalogCorrupt`] with the offset, or I/O.
pub(crate) fn load(path: &Path, id: &CatalogId, key: &SealKey) -> Result<Loaded, MetaError> {
    let corrupt = |offset: u64, reason: String| MetaError::CatalogCorrupt {
        path: path.to_owned(),
        offset,
        reason,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(MetaError::CatalogMissing(path.to_owned()))
        }
        Err(e) => return Err(io_err("stat", path)(e)),
    };
    if meta.len() > MAX_CATALOG_FILE {
        return Err(corrupt(
            0,
            format!("file of {} bytes exceeds the limit", meta.len()),
        ));
    }
    let bytes = std::fs::read(path).map_err(io_err("read", path))?;
    let mut r = Reader::new(&bytes);
    let plain = r
        .take(HEADER_PLAIN_LEN)
        .map_err(|_| corrupt(0, "shorter than its header".into()))?;
    let seal = r
        .take(NONCE_LEN + TAG_LEN)
        .map_err(|_| corrupt(0, "shorter than its header".into()))?;
    if plain != id.header_plain().as_slice() {
        let mut h = Reader::new(plain);
        let reason = if h.array::<8>().ok().as_ref() != Some(MAGIC) {
            "bad magic"
        } else if h.u32().ok() != Some(FORMAT_VERSION) {
            "unsupported format version"
        } else {
            "header does not match the keyring (store, generation or key version)"
        };
        return Err(corrupt(0, reason.into()));
    }
    key.open(&header_aad(plain), seal)
        .map_err(|_| corrupt(0, "header seal does not authenticate".into()))?;
    let mut cursor = Cursor {
        end: HEADER_LEN as u64,
        records: 0,
        prev_tag: tag_of(seal),
    };
    let mut state = CatalogState::default();
    let total = bytes.len() as u64;
    let torn_bytes = loop {
        let at = cursor.end;
        if r.remaining() == 0 {
            break 0;
        }
        if r.remaining() < 8 {
            break total - at;
        }
        let n = r.u32().map_err(|m| corrupt(at, m.into()))?;
        let inv = r.u32().map_err(|m| corrupt(at, m.into()))?;
        if n == 0 && inv == 0 {
            if r.rest().iter().all(|b| *b == 0) {
                break total - at;
            }
            return Err(corrupt(at, "zero record length".into()));
        }
        if n != !inv {
            return Err(corrupt(at, "record length check failed".into()));
        }
        let n = n as usize;
        if !(NONCE_LEN + TAG_LEN..=MAX_SEALED_RECORD).contains(&n) {
            return Err(corrupt(at, format!("record length {n} out of range")));
        }
        if n > r.remaining() {
            break total - at;
        }
        let sealed = r.take(n).map_err(|m| corrupt(at, m.into()))?;
        let is_last = r.remaining() == 0;
        let plain = match key.open(&id.record_aad(cursor.records, &cursor.prev_tag), sealed) {
            Ok(p) => zeroize::Zeroizing::new(p),
            Err(_) if is_last && tag_of(sealed) == [0u8; TAG_LEN] => break total - at,
            Err(_) => {
                return Err(corrupt(
                    at,
                    format!("record {} does not authenticate", cursor.records),
                ))
            }
        };
        let rec = Record::decode(&plain)
            .map_err(|m| corrupt(at, format!("record {}: {m}", cursor.records)))?;
        state
            .apply(rec)
            .map_err(|m| corrupt(at, format!("record {}: {m}", cursor.records)))?;
        cursor.prev_tag = tag_of(sealed);
        cursor.records += 1;
        cursor.end = at + 8 + n as u64;
    };
    Ok(Loaded {
        state,
        cursor,
        torn_bytes,
    })
}

/// An open catalog generation that records are appended to.
pub(crate) struct CatalogLog {
    path: PathBuf,
    id: CatalogId,
    key: SealKey,
    cursor: Cursor,
    file: Option<File>,
}

impl CatalogLog {
    /// Wraps a loaded generation; `writable` opens the file for appends.
    pub(crate) fn new(
        path: PathBuf,
        id: CatalogId,
        key: SealKey,
        cursor: Cursor,
        writable: bool,
    ) -> Result<Self, MetaError> {
        let file = if writable {
            Some(
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err("open", &path))?,
            )
        } else {
            None
        };
        Ok(CatalogLog {
            path,
            id,
            key,
            cursor,
            file,
        })
    }

    /// Cuts a torn tail off (after the key was verified) and makes the cut durable.
    pub(crate) fn truncate_torn_tail(&self) -> Result<(), MetaError> {
        let f = self.file.as_ref().ok_or(MetaError::ReadOnly)?;
        f.set_len(self.cursor.end)
            .map_err(io_err("truncate torn tail of", &self.path))?;
        f.sync_all().map_err(io_err("fsync", &self.path))
    }

    /// The generation.
    pub(crate) fn id(&self) -> &CatalogId {
        &self.id
    }

    /// Records in the file.
    pub(crate) fn records(&self) -> u64 {
        self.cursor.records
    }

    /// Appends records in one write and fsyncs; on error the file may hold a torn tail and
    /// the caller must poison the store.
    pub(crate) fn append(&mut self, records: &[Record]) -> Result<(), MetaError> {
        let f = self.file.as_ref().ok_or(MetaError::ReadOnly)?;
        let mut cursor = self.cursor;
        let mut buf = Vec::new();
        seal_records(&self.id, &self.key, &mut cursor, records, &mut buf);
        if cursor.end > MAX_CATALOG_FILE {
            return Err(MetaError::Invalid {
                what: "catalog",
                reason: "would exceed the catalog size limit; compact or delete streams",
            });
        }
        f.write_all_at(&buf, self.cursor.end)
            .map_err(io_err("append to", &self.path))?;
        f.sync_data().map_err(io_err("fsync", &self.path))?;
        self.cursor = cursor;
        Ok(())
    }
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-length values")]
mod tests {
    use super::*;
    use crate::crypto::Secret;

    fn recs() -> Vec<Record> {
        let a = AccountId::random();
        let s = StreamId::random();
        vec![
            Record::AccountCreate {
                id: a,
                name: "ACC".into(),
            },
            Record::StreamCreate {
                id: s,
                account: a,
                name: "ORDERS".into(),
                config: b"{}".to_vec(),
            },
            Record::ConsumerCreate {
                id: ConsumerId::random(),
                stream: s,
                name: "C".into(),
                config: vec![],
            },
            Record::StreamCheckpoint {
                id: s,
                data: vec![1, 2, 3],
            },
        ]
    }

    #[test]
    fn records_round_trip() {
        for r in recs() {
            assert_eq!(Record::decode(&r.encode()).unwrap(), r);
            assert_eq!(r.encode().len() % RECORD_BUCKET, 0);
        }
    }

    #[test]
    fn replay_refuses_inconsistent_records() {
        let mut st = CatalogState::default();
        let r = recs();
        assert!(st.apply(r[1].clone()).is_err(), "stream before its account");
        for x in r.iter().cloned() {
            st.apply(x).unwrap();
        }
        assert!(st.apply(r[0].clone()).is_err());
        let id = *st.accounts.keys().next().unwrap();
        st.apply(Record::AccountDelete { id }).unwrap();
        assert!(st.streams.is_empty() && st.consumers.is_empty() && st.stream_by_name.is_empty());
    }

    #[test]
    fn every_bit_flip_is_corruption_and_truncation_is_a_torn_tail() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cat");
        let key = SealKey::new(Secret::random());
        let id = CatalogId {
            store_uuid: [1; 16],
            gen: 3,
            key_version: 2,
        };
        let (bytes, cursor) = build_generation(&id, &key, &recs());
        std::fs::write(&p, &bytes).unwrap();
        let l = load(&p, &id, &key).unwrap();
        assert_eq!(
            (l.cursor, l.torn_bytes, l.state.streams.len()),
            (cursor, 0, 1)
        );
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        for bit in 0..bytes.len() * 8 {
            let at = (bit / 8) as u64;
            let byte = |b: u8| f.write_all_at(&[b], at).unwrap();
            byte(bytes[bit / 8] ^ (1 << (bit % 8)));
            assert!(
                matches!(load(&p, &id, &key), Err(MetaError::CatalogCorrupt { .. })),
                "bit {bit}"
            );
            byte(bytes[bit / 8]);
        }
        for cut in (HEADER_LEN..bytes.len()).rev() {
            f.set_len(cut as u64).unwrap();
            let l = load(&p, &id, &key).unwrap();
            assert_eq!(l.cursor.end + l.torn_bytes, cut as u64);
            assert!(l.cursor.records < 4);
        }
        let mut zero_tail = bytes.clone();
        zero_tail.extend_from_slice(&[0u8; 100]);
        std::fs::write(&p, &zero_tail).unwrap();
        assert_eq!(load(&p, &id, &key).unwrap().torn_bytes, 100);
        let other = CatalogId { gen: 4, ..id };
        std::fs::write(&p, &bytes).unwrap();
        assert!(matches!(
            load(&p, &other, &key),
            Err(MetaError::CatalogCorrupt { offset: 0, .. })
        ));
    }

    #[test]
    fn appends_continue_the_chain() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cat");
        let key = || SealKey::new(Secret::new([7u8; 32]));
        let id = CatalogId {
            store_uuid: [1; 16],
            gen: 1,
            key_version: 1,
        };
        let all = recs();
        let (bytes, cursor) = build_generation(&id, &key(), &all[..1]);
        std::fs::write(&p, &bytes).unwrap();
        let mut log = CatalogLog::new(p.clone(), id, key(), cursor, true).unwrap();
        log.append(&all[1..3]).unwrap();
        log.append(&all[3..]).unwrap();
        let l = load(&p, &id, &key()).unwrap();
        assert_eq!(l.cursor, log.cursor);
        assert_eq!(l.state.consumers.len(), 1);
    }

    #[test]
    fn only_canonical_names_parse() {
        assert_eq!(parse_catalog_name("cat-00000001.log"), Some(1));
        assert_eq!(parse_catalog_name("cat-1.log"), None);
    }
}
