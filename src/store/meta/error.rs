//! [`MetaError`]: everything the metadata layer can refuse, with what an operator needs.
//!
//! Two families: request errors (a name exists, an id is unknown; the store carries on) and
//! store-level errors (wrong key, corrupt metadata, I/O failure, poisoned: the store is not
//! usable and must be reopened after the operator acts). [`MetaError::is_fatal`] tells them
//! apart. Messages name files by their path under `store_dir`, which holds no names.

use std::path::PathBuf;

use crate::crypto::KeyError;

/// Why a metadata operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetaError {
    /// The key does not open this store. Nothing under `store_dir` was created, renamed or
    /// deleted.
    #[error("store key does not match ({detail})")]
    WrongKey {
        /// Which check failed.
        detail: &'static str,
    },
    /// The key material could not be obtained (key file unreadable, too permissive, malformed;
    /// argon2 parameters below the floor).
    #[error("store key: {0}")]
    Key(#[from] KeyError),
    /// The key settings are contradictory or unusable.
    #[error("store key configuration: {0}")]
    KeyConfig(String),
    /// A store exists but its automatically managed key file is gone: refusing to make a new key.
    #[error(
        "store {store} has data but its key file {key_file} is missing; refusing to generate a \
         new key (restore the key file or configure the key explicitly)"
    )]
    KeyFileMissing {
        /// The store directory.
        store: PathBuf,
        /// The key file that was expected.
        key_file: PathBuf,
    },
    /// `store_dir` holds files but no `STORE` header: it is not a sealstream store.
    #[error("{path} is not a sealstream store: {reason}")]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// What was found.
        reason: String,
    },
    /// Another process holds the store lock.
    #[error("store {0} is locked by another process")]
    Locked(PathBuf),
    /// The `STORE` header is damaged or from an unsupported format.
    #[error("STORE header {path} corrupt: {reason}")]
    HeaderCorrupt {
        /// The header file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The keyring generation named by `STORE` is missing.
    #[error("keyring {0} named by STORE is missing")]
    KeyringMissing(PathBuf),
    /// The keyring generation is damaged or inconsistent with `STORE` or the catalog.
    #[error("keyring {path} corrupt: {reason}")]
    KeyringCorrupt {
        /// The keyring file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The catalog generation named by the keyring is missing.
    #[error("catalog {0} named by the keyring is missing")]
    CatalogMissing(PathBuf),
    /// The catalog is damaged at `offset`.
    #[error("catalog {path} corrupt at byte {offset}: {reason}")]
    CatalogCorrupt {
        /// The catalog file.
        path: PathBuf,
        /// Byte offset of the damaged header or record.
        offset: u64,
        /// What failed.
        reason: String,
    },
    /// A consumer state file is damaged (that consumer is offline; others are unaffected).
    #[error("consumer state {path} corrupt: {reason}")]
    ConsumerStateCorrupt {
        /// The state file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The stream's directory is missing although the catalog lists the stream.
    #[error("stream directory {0} is missing")]
    StreamDirMissing(PathBuf),
    /// I/O failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A stream with this name already exists in the account.
    #[error("stream name already in use in this account")]
    StreamExists,
    /// A consumer with this name already exists on the stream.
    #[error("consumer name already in use on this stream")]
    ConsumerExists,
    /// No such stream.
    #[error("stream {0} not found")]
    StreamNotFound(String),
    /// No such consumer.
    #[error("consumer {0} not found")]
    ConsumerNotFound(String),
    /// No such account.
    #[error("account not found")]
    AccountNotFound,
    /// A name or payload is empty or above its limit.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The argument.
        what: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A data key version is unknown, current, or still used.
    #[error("stream {stream} data key version {version}: {reason}")]
    DekVersion {
        /// The stream.
        stream: String,
        /// The version.
        version: u32,
        /// Why the request was refused.
        reason: &'static str,
    },
    /// The store was opened read-only.
    #[error("store opened read-only")]
    ReadOnly,
    /// An earlier write failed part-way; the in-memory state may differ from disk.
    #[error("store poisoned by an earlier failed write; reopen it")]
    Poisoned,
    /// A test hook stopped the operation after a step (crash simulation).
    #[doc(hidden)]
    #[error("injected crash after step {0:?}")]
    InjectedCrash(super::Step),
}

impl MetaError {
    /// Whether the store must be reopened (or the operator must act) after this error, as
    /// opposed to a refused request.
    pub fn is_fatal(&self) -> bool {
        !matches!(
            self,
            MetaError::StreamExists
                | MetaError::ConsumerExists
                | MetaError::StreamNotFound(_)
                | MetaError::ConsumerNotFound(_)
                | MetaError::AccountNotFound
                | MetaError::Invalid { .. }
                | MetaError::DekVersion { .. }
                | MetaError::ReadOnly
                | MetaError::ConsumerStateCorrupt { .. }
        )
    }
}

/// Shorthand for an [`MetaError::Io`] constructor.
pub(crate) fn io_err(
    op: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> MetaError {
    let path = path.to_owned();
    move |source| MetaError::Io { op, path, source }
}
