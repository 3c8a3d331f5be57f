//! The store-wide metadata layer: the `STORE` header, the `LOCK`, keyring and catalog
//! generations, consumer state files and `tmp/`. Entry point: [`MetaStore::open`].
//!
//! ```text
//! <store_dir>/
//!   STORE                      header.rs    4 KiB: store_uuid, key slots A/B, active slot
//!   LOCK                       lock.rs      flock: exclusive (server) or shared (audit)
//!   keyring/kr-<gen:08>.bin    keyring.rs   sealed: every wrapped data key, grouped by account
//!   catalog/cat-<gen:08>.log   catalog.rs   sealed, append-only: ids <-> names and configs
//!   s/<stream_id>/             (segment engine) sealed segments and indexes
//!   s/<stream_id>/c/<consumer_id>.st        consumer_state.rs   sealed consumer state
//!   tmp/                       tmp.rs       in-flight files; emptied at startup
//! ```
//!
//! What it owns: which key opens the store, which data keys exist, which ids mean which
//! names, and the crash-safe order of every multi-file change. What it does not do: segment
//! and block I/O (the segment engine gets a [`StreamHandle`] with the directory and data key
//! and owns everything else in `s/<stream_id>/`), config parsing (configs are opaque bytes),
//! JetStream rules beyond name uniqueness.
//!
//! Invariants worth naming:
//! - **Nothing in plaintext.** Paths are random hex ids; every file is a fixed-format header
//!   or AEAD ciphertext. Account, stream and consumer names and configs exist only inside
//!   catalog seals.
//! - **Wrong key touches nothing.** Opening derives the KEK, checks it against the active
//!   `STORE` slot, and opens the keyring and the whole catalog before creating, renaming,
//!   truncating or deleting any file (including `tmp/` leftovers and the `LOCK` file).
//! - **One commit point per change.** `STORE`'s active slot names the keyring generation in
//!   force; the keyring names the catalog generation and its key. Every file is replaced via
//!   `tmp/` + fsync + rename + directory fsync. Anything not reachable from `STORE` after a
//!   crash is a leftover and is removed at the next startup (after key verification).
//! - **Erase keys before files.** Deleting a stream or an account commits a keyring generation
//!   without its data keys (and a compacted catalog under a new catalog key) first, shreds the
//!   previous generations, and only then removes directories.
//! - **Never treat unreadable as absent.** A stream in the catalog without a key, a catalog
//!   shorter than the keyring's watermark, or any failed seal stops startup with an error
//!   naming the file.
//!
//! Byte layouts: `docs/storage-format.md` (metadata section); key hierarchy, rotation and
//! erasure: `docs/key-hierarchy.md`.
#![deny(clippy::indexing_slicing)]
#![deny(clippy::big_endian_bytes, clippy::host_endian_bytes)]

mod catalog;
mod checkpoint;
mod codec;
mod consumer_state;
mod consumers;
mod error;
mod header;
mod ids;
mod key_source;
mod keyring;
mod lock;
mod open;
mod rotation;
mod streams;
mod tmp;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use catalog::{MAX_CHECKPOINT_LEN, MAX_CONFIG_LEN, MAX_NAME_LEN};
pub use checkpoint::StreamCheckpoint;
pub use consumer_state::{ConsumerState, MAX_CONSUMER_STATE};
pub use error::MetaError;
pub use header::KdfKind;
pub use ids::{AccountId, ConsumerId, StreamId};
pub use key_source::{KeyConfig, KeySource, ENV_KEY, ENV_KEY_FILE};
pub use open::{auto_key_path, MetaStore, RAFT_DIR};
pub use streams::{remove_erased_stream_files, ErasureInventory};

use crate::crypto::DataKey;

/// What the segment engine needs to read and write one stream. Not `Debug` (holds a key).
pub struct StreamHandle {
    /// The stream's id.
    pub stream_id: StreamId,
    /// `s/<stream_id hex>/`: the segment engine's directory (exists when returned).
    pub dir: PathBuf,
    /// The data key for new segments.
    pub dek: DataKey,
    /// Its version (record it in each segment header).
    pub dek_version: u32,
    /// The store's id (bound into every AAD).
    pub store_uuid: [u8; 16],
}

/// A live stream as the catalog records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamMeta {
    /// Its id.
    pub stream_id: StreamId,
    /// Account name.
    pub account: String,
    /// Stream name.
    pub name: String,
    /// Config bytes as last stored.
    pub config: Vec<u8>,
    /// Data key version for new segments.
    pub dek_version: u32,
    /// Every data key version the keyring still holds (ascending).
    pub dek_versions: Vec<u32>,
}

/// A live consumer as the catalog records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerMeta {
    /// Its id.
    pub consumer_id: ConsumerId,
    /// Its stream.
    pub stream_id: StreamId,
    /// Consumer name.
    pub name: String,
    /// Config bytes as last stored.
    pub config: Vec<u8>,
}

/// What opening the store found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// A new store was created.
    pub created: bool,
    /// A key file was generated (automatic key, brand-new store).
    pub generated_key_file: Option<PathBuf>,
    /// Leftovers removed from `tmp/`.
    pub tmp_entries_removed: usize,
    /// Bytes of a torn final catalog record cut off.
    pub catalog_torn_bytes: u64,
    /// Data keys of streams or accounts absent from the catalog (an interrupted create or
    /// delete), erased.
    pub orphan_keys_erased: usize,
    /// Keyring and catalog generations no longer in force, shredded.
    pub stale_generations_removed: usize,
    /// Stream directories and consumer state files of deleted streams and consumers, removed.
    pub orphan_paths_removed: usize,
    /// Paths that match no layout rule (left in place; `sealctl audit` reports them).
    pub unexpected_paths: Vec<PathBuf>,
}

/// How to open the store.
#[derive(Clone, Debug, Default)]
pub struct MetaOptions {
    /// Read only (`sealctl audit`): shared lock, nothing written, no startup clean-up.
    pub read_only: bool,
    kdf: KdfPolicy,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum KdfPolicy {
    /// argon2id m = 256 MiB, t = 3, p = 4 for new stores; refuse below m = 64 MiB or t = 3.
    #[default]
    Standard,
    /// Tiny argon2 parameters for new stores and no floor on open. Tests only.
    InsecureFast,
}

impl MetaOptions {
    /// Options for a read-only opener.
    pub fn read_only() -> Self {
        MetaOptions {
            read_only: true,
            ..Self::default()
        }
    }

    /// Tiny argon2 parameters (m = 64 KiB, t = 1, p = 1) for new stores and rotations, and no
    /// parameter floor when opening. Tests and benches only: a store made this way is refused
    /// by a normal open.
    #[doc(hidden)]
    pub fn insecure_fast_kdf_for_tests(mut self) -> Self {
        self.kdf = KdfPolicy::InsecureFast;
        self
    }
}

/// A step of a multi-file change, reported to the test hook ([`MetaStore::set_step_hook`])
/// right after it is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A new keyring generation is durable (not yet in force).
    KeyringWritten,
    /// `STORE`'s active slot names the new keyring generation (the commit point).
    StorePointerWritten,
    /// Master rotation: the inactive `STORE` slot holds the new KEK's id.
    InactiveSlotWritten,
    /// Master rotation: the active-slot byte now selects the new slot (the commit point).
    ActiveSlotFlipped,
    /// The previous keyring generation is removed (shredded first when it held a key the new
    /// one dropped).
    OldKeyringShredded,
    /// A new catalog generation is durable (not yet in force).
    CatalogGenerationWritten,
    /// The previous catalog generation is shredded.
    OldCatalogShredded,
    /// Records were appended to the catalog and fsynced.
    CatalogAppended,
    /// A new stream's directory exists.
    StreamDirCreated,
    /// A deleted stream's or account's directories are gone.
    StreamFilesRemoved,
    /// A consumer state file was written or removed.
    ConsumerStateWritten,
}

/// The test hook: called after each [`Step`]; returning `false` stops the operation there,
/// as a crash would (the store is poisoned and must be reopened).
#[doc(hidden)]
pub type StepHook = Box<dyn FnMut(Step) -> bool + Send>;
