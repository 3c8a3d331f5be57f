//! One stream's message log, sealed at rest.
//!
//! The store-wide layer (`STORE` header, `LOCK`, sealed keyring and catalog, consumer state,
//! key sources, rotation, crypto-erase) is [`meta`]; it hands each stream a directory, the
//! store uuid, the stream id and its data keys.
//!
//! What it owns: the [`StreamStore`] trait and its two implementations, [`FileStore`] (sealed
//! segments through a [`SegmentIo`]) and [`MemStore`]; the on-disk format ([`block`],
//! [`segment`]); recovery ([`recovery`]); the in-memory indexes ([`index`]); a thread-based
//! group committer ([`group_commit`]); and the conformance suite both stores run
//! ([`testing`]). `docs/storage-format.md` has the byte-level tables.
//!
//! What it does not do: subject validation
//! beyond what the format needs; anything async. The store is synchronous: one stream task
//! owns it and calls it (or hands it to a [`group_commit::GroupCommitter`]).
//!
//! Invariants worth naming:
//! - An append returns only after `fdatasync` of the block holding it succeeded (and a
//!   directory `fsync` when it created a segment). One `append_batch` call is one block and one
//!   `fdatasync` (the call that rolls a full segment over also seals the old one first).
//! - Every byte written to a segment is a 128-byte MAC'd header or an AEAD-sealed block whose
//!   AAD binds store, stream, segment, key version, block index, file offset and length.
//! - After any failed write or sync the store is poisoned: every later write fails with
//!   [`StoreError::Poisoned`]; fsync is never retried. `ENOSPC` before anything was written is
//!   [`StoreError::DiskFull`] and leaves the store usable.
//! - Recovery never discards a block that a later block, seal or checkpoint covers: damage
//!   there is [`StoreError::Corrupt`] naming file and offset. Only the final, uncovered block may
//!   be cut as a torn tail, and that is reported.
//! - Segment ids are never reused; compaction writes new ids with fresh random nonces.
#![deny(clippy::indexing_slicing)]
#![deny(clippy::big_endian_bytes, clippy::host_endian_bytes)]

pub mod block;
pub mod file_store;
#[cfg(any(test, feature = "fault-io"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod group_commit;
pub mod index;
pub mod io;
pub mod mem_store;
pub mod meta;
pub mod metrics;
pub mod recovery;
pub mod segment;
pub mod seq_map;
mod subject;
#[cfg(test)]
pub mod testing;

#[cfg(test)]
mod corruption_tests;
#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod model_tests;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;

pub use block::record_size;
pub use file_store::{FileStore, FileStoreConfig};
#[cfg(any(test, feature = "fault-io"))]
pub use io::FaultIo;
pub use io::{OsIo, SegmentFile, SegmentIo};
pub use mem_store::MemStore;
pub use recovery::RecoveryReport;
pub use segment::StreamKeys;

/// A message to append.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewMsg {
    /// Subject (non-empty, at most 65,535 bytes).
    pub subject: String,
    /// NATS headers block, if any (an empty block is stored as none).
    pub headers: Option<Bytes>,
    /// Payload.
    pub payload: Bytes,
    /// The sequence to store it at when that is beyond the next one (the sequences between
    /// are left out, as if deleted): a mirror keeps its origin's sequences. `None` (or a
    /// sequence not beyond the last): the next one.
    pub seq: Option<u64>,
    /// The time to record instead of now (a mirror keeps its origin's timestamps); never
    /// earlier than the last stored message's.
    pub ts: Option<i64>,
}

impl NewMsg {
    /// A message without headers.
    pub fn new(subject: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        NewMsg {
            subject: subject.into(),
            payload: payload.into(),
            ..NewMsg::default()
        }
    }
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMsg {
    /// Stream sequence.
    pub seq: u64,
    /// Time stored (unix nanoseconds).
    pub ts: i64,
    /// Subject.
    pub subject: String,
    /// Headers, if any.
    pub headers: Option<Bytes>,
    /// Payload.
    pub payload: Bytes,
}

/// Sequence and timestamp given to an appended message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Stream sequence.
    pub seq: u64,
    /// Time stored (unix nanoseconds).
    pub ts: i64,
}

/// Why one message of a batch was not stored (the others may have been).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AppendRejected {
    /// `max_msgs` reached with discard new.
    #[error("maximum messages exceeded")]
    MaxMsgs,
    /// `max_bytes` reached with discard new, or the message alone is larger than `max_bytes`.
    #[error("maximum bytes exceeded")]
    MaxBytes,
    /// `max_msgs_per_subject` reached with discard new per subject.
    #[error("maximum messages per subject exceeded")]
    MaxMsgsPerSubject,
    /// Headers plus payload above `max_msg_size` or above what one block can hold.
    #[error("message size exceeds maximum allowed")]
    MaxMsgSize,
    /// Empty subject or one longer than 65,535 bytes.
    #[error("invalid subject")]
    InvalidSubject,
}

/// The state of a stream, as JetStream reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamState {
    /// Messages stored.
    pub msgs: u64,
    /// Bytes stored (sum of [`block::record_size`] of the stored messages).
    pub bytes: u64,
    /// First stored sequence (`last_seq + 1` when empty).
    pub first_seq: u64,
    /// Timestamp of the first stored message (0 when empty).
    pub first_ts: i64,
    /// Last sequence ever assigned (kept when messages are removed).
    pub last_seq: u64,
    /// Timestamp of `last_seq` when it was stored.
    pub last_ts: i64,
    /// Distinct subjects stored.
    pub num_subjects: u64,
    /// Sequences between `first_seq` and `last_seq` that are not stored.
    pub num_deleted: u64,
}

/// Per-subject state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubjectState {
    /// Messages stored on the subject.
    pub msgs: u64,
    /// First stored sequence on the subject.
    pub first_seq: u64,
    /// Last stored sequence on the subject.
    pub last_seq: u64,
}

/// What happens when a limit is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Discard {
    /// Remove the oldest messages.
    #[default]
    Old,
    /// Reject the new message.
    New,
}

/// Stream limits (the subset of stream config the store enforces).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreLimits {
    /// Most messages kept.
    pub max_msgs: Option<u64>,
    /// Most bytes kept.
    pub max_bytes: Option<u64>,
    /// Oldest message kept (enforced by [`StreamStore::expire`]).
    pub max_age: Option<Duration>,
    /// Most messages kept per subject.
    pub max_msgs_per_subject: Option<u64>,
    /// Largest headers + payload accepted.
    pub max_msg_size: Option<u64>,
    /// What happens at `max_msgs`/`max_bytes`.
    pub discard: Discard,
    /// With [`Discard::New`]: reject at `max_msgs_per_subject` instead of removing the oldest.
    pub discard_new_per_subject: bool,
}

/// What to purge (NATS `PurgeEx`): messages matching `filter` (all when `None`), either below
/// `up_to_seq`, or all but the newest `keep`, or all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeRequest {
    /// Subject filter (`*` and `>` wildcards); `None` for every subject.
    pub filter: Option<String>,
    /// Purge sequences strictly below this one.
    pub up_to_seq: Option<u64>,
    /// Keep this many of the newest matching messages.
    pub keep: Option<u64>,
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactStats {
    /// Segments removed.
    pub segments_removed: u64,
    /// Segments written.
    pub segments_written: u64,
    /// Segment bytes before.
    pub bytes_before: u64,
    /// Segment bytes after.
    pub bytes_after: u64,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Damage, a missing block or segment, or a block that is not where it claims to be.
    /// The stream goes offline; nothing was truncated or discarded.
    #[error("{} corrupt at byte {offset}: {reason}", file.display())]
    Corrupt {
        /// The segment file.
        file: PathBuf,
        /// Byte offset of the damage.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// An I/O error outside a write or sync (open, read, list).
    #[error("i/o error during {op} on {}", file.display())]
    Io {
        /// The file or directory.
        file: PathBuf,
        /// The operation.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An earlier write or sync failed: no further writes until the stream is reopened.
    #[error("store poisoned by an earlier write failure ({cause}); restart required")]
    Poisoned {
        /// The first failure.
        cause: String,
    },
    /// No space for the block; nothing was written and the store stays usable.
    #[error("disk full writing {}; nothing was stored", file.display())]
    DiskFull {
        /// The segment file.
        file: PathBuf,
    },
    /// A segment is sealed under a data key version the caller did not provide.
    #[error(
        "segment {segment:016x} is sealed with data key version {version}, which is not available"
    )]
    KeyUnavailable {
        /// Segment id.
        segment: u64,
        /// Key version.
        version: u32,
    },
    /// The store was opened for inspection of a corrupt stream and refuses writes.
    #[error("stream is offline: {reason}")]
    Offline {
        /// The corruption that took it offline.
        reason: String,
    },
    /// The store was closed.
    #[error("store is closed")]
    Closed,
    /// A request that makes no sense (for example `keep` together with `up_to_seq`).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
}

impl StoreError {
    /// Whether the stream must go offline (corruption, poisoned store, missing key), as
    /// opposed to one request failing.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            StoreError::Corrupt { .. }
                | StoreError::Poisoned { .. }
                | StoreError::KeyUnavailable { .. }
                | StoreError::Offline { .. }
        )
    }
}

/// A batch result: per message, its sequence or why it was rejected.
pub type BatchResult = Vec<Result<Appended, AppendRejected>>;

/// One stream's message store. Implemented by [`FileStore`] and [`MemStore`] with the same
/// semantics; the conformance suite in `store/testing.rs` checks both.
pub trait StreamStore: Send {
    /// Appends `msgs` as one commit. Returns per-message results once the commit is durable.
    /// Messages rejected by limits are reported per message and take no sequence.
    ///
    /// # Errors
    /// A store error means nothing of the batch was stored (and, unless `DiskFull`, that the
    /// store is now poisoned or offline).
    fn append_batch(&mut self, msgs: &[NewMsg]) -> Result<BatchResult, StoreError>;

    /// The message at `seq`, if stored.
    ///
    /// # Errors
    /// I/O or corruption while reading it.
    fn get(&self, seq: u64) -> Result<Option<StoredMsg>, StoreError>;

    /// The newest message whose subject matches `filter`.
    ///
    /// # Errors
    /// As [`StreamStore::get`].
    fn last_by_subject(&self, filter: &str) -> Result<Option<StoredMsg>, StoreError>;

    /// The first message at or after `from_seq` whose subject matches `filter`.
    ///
    /// # Errors
    /// As [`StreamStore::get`].
    fn next_by_subject(&self, from_seq: u64, filter: &str)
        -> Result<Option<StoredMsg>, StoreError>;

    /// Deletes `seq`; `erase` also asks for the bytes to be overwritten (see the file store's
    /// docs for what that means on disk). Returns whether it was stored.
    ///
    /// # Errors
    /// Write errors as for appends.
    fn delete(&mut self, seq: u64, erase: bool) -> Result<bool, StoreError>;

    /// Purges per `req`; returns how many messages were removed.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for `keep` with `up_to_seq`; write errors.
    fn purge(&mut self, req: &PurgeRequest) -> Result<u64, StoreError>;

    /// The stream state.
    fn state(&self) -> StreamState;

    /// Per-subject state of the subjects matching `filter`.
    fn subjects_state(&self, filter: &str) -> std::collections::BTreeMap<String, SubjectState>;

    /// How many stored messages at or after `from` match `filter` (`>` for all).
    fn count_from(&self, from: u64, filter: &str) -> u64;

    /// The limits in force.
    fn limits(&self) -> StoreLimits;

    /// Replaces the limits and applies them (discard-old removals are persisted). Returns how
    /// many messages were removed.
    ///
    /// # Errors
    /// Write errors.
    fn set_limits(&mut self, limits: StoreLimits) -> Result<u64, StoreError>;

    /// Removes messages older than `max_age` at `now` (unix nanos); returns how many.
    ///
    /// # Errors
    /// Write errors.
    fn expire(&mut self, now: i64) -> Result<u64, StoreError>;

    /// Rewrites live messages into new segments and removes the old ones.
    ///
    /// # Errors
    /// Write errors.
    fn compact(&mut self) -> Result<CompactStats, StoreError>;

    /// Starts re-sealing the stream under a new data key (`dek` at `dek_version`; the current
    /// key already, to finish an interrupted re-sealing): new segments are sealed with it from
    /// now on; returns the segments older keys sealed, each to be written again on any thread
    /// and put in place with [`StreamStore::reseal_install`] (see `file_store/reseal.rs`).
    /// `None`: a store without keys (memory).
    ///
    /// # Errors
    /// Write errors; a key version the store does not hold.
    fn reseal_begin(
        &mut self,
        dek_version: u32,
        dek: crate::crypto::DataKey,
    ) -> Result<Option<Vec<file_store::SegmentReseal>>, StoreError> {
        let _ = (dek_version, dek);
        Ok(None)
    }

    /// Puts a segment written again under the new key in place of its original; `false` when
    /// the segment went meanwhile (the copy is then removed).
    ///
    /// # Errors
    /// The rename or the directory's fsync failed.
    fn reseal_install(&mut self, copy: file_store::ResealedSegment) -> Result<bool, StoreError> {
        drop(copy);
        Ok(false)
    }

    /// Ends a re-sealing: the older key versions segments still depend on (none: the store
    /// forgot them, and they may be destroyed).
    fn reseal_finish(&mut self) -> Vec<u32> {
        Vec::new()
    }

    /// The live messages as they are now, to be read on another thread while the store goes
    /// on (`file_store/frozen.rs`); `None`: this store cannot (memory: read it in place).
    ///
    /// # Errors
    /// A closed store; a key it does not hold.
    fn frozen(&self) -> Result<Option<file_store::FrozenMessages>, StoreError> {
        Ok(None)
    }

    /// Writes the idle checkpoint (covers every earlier block) if anything is uncovered.
    ///
    /// # Errors
    /// Write errors.
    fn sync_checkpoint(&mut self) -> Result<(), StoreError>;

    /// Interval mode: fdatasyncs what was written since the last sync. Returns whether there
    /// was anything to sync. Stores that always sync before returning have nothing to do.
    ///
    /// # Errors
    /// A failed sync (the store is then poisoned).
    fn sync_pending(&mut self) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// The last durable block, for the catalog's rollback checkpoint (stores without files:
    /// `None`).
    fn durable_mark(&self) -> Option<recovery::DurableMark> {
        None
    }

    /// Checkpoints and closes; later calls fail with [`StoreError::Closed`].
    ///
    /// # Errors
    /// Write errors from the final checkpoint.
    fn close(&mut self) -> Result<(), StoreError>;

    /// Closes without a final checkpoint or sync: the stream was deleted (its keys are
    /// erased) and its files are about to be removed. Later calls fail with
    /// [`StoreError::Closed`].
    fn abandon(&mut self);
}

/// Current time in unix nanoseconds.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
