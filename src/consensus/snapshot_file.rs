//! A group's newest snapshot on disk: one sealed file per group, beside the node's log.
//!
//! Why a file of its own: a snapshot replaces the log before it — once it is durable the
//! group's entries up to it are purged — so it must survive a restart and be as sealed as the
//! log: the body is sealed with the group's key (erasing the key erases the snapshot with the
//! group's records), its name is the group's pseudonym in the log (the disk shows which file
//! belongs to which records, never a stream or an account), and the associated data binds
//! it to that pseudonym, so a file copied over another group's fails to open.
//!
//! Written whole to a temporary name, fsync'd, renamed over the old one, and the directory
//! fsync'd: a crash leaves the old snapshot or the new one, never half of one. The body holds
//! openraft's snapshot meta (JSON) and the state machine's bytes, one AEAD over both; the
//! whole snapshot is in memory while it is written or read (a stream's snapshot is its
//! image: see `jetstream/image.rs`).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use openraft::SnapshotMeta;

use super::NodeId;
use crate::crypto::SealKey;

/// The directory of snapshots inside the log's.
pub const SNAPSHOT_DIR: &str = "snapshots";
const AAD_TAG: &[u8] = b"sealstream raft snapshot v1";

/// One group's snapshot file.
pub struct SnapshotFile {
    path: PathBuf,
    key: SealKey,
    aad: Vec<u8>,
}

/// A snapshot as stored: openraft's meta and the state machine's bytes.
pub type Stored = (SnapshotMeta<NodeId, openraft::BasicNode>, Vec<u8>);

/// Where the snapshot of the group with log pseudonym `pseudonym` is, in log directory `dir`.
pub fn path_of(dir: &Path, pseudonym: &[u8; 8]) -> PathBuf {
    dir.join(SNAPSHOT_DIR).join(format!(
        "{}.snap",
        data_encoding::HEXLOWER.encode(pseudonym)
    ))
}

impl SnapshotFile {
    /// The snapshot file of the group whose log pseudonym is `pseudonym`, in the log
    /// directory `dir`, sealed with `key`.
    pub fn new(dir: &Path, pseudonym: [u8; 8], key: SealKey) -> Self {
        let mut aad = AAD_TAG.to_vec();
        aad.extend_from_slice(&pseudonym);
        SnapshotFile {
            path: path_of(dir, &pseudonym),
            key,
            aad,
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the stored snapshot with this one, durably.
    ///
    /// # Errors
    /// I/O.
    pub fn write(
        &self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        data: &[u8],
    ) -> io::Result<()> {
        let meta = serde_json::to_vec(meta).map_err(io::Error::other)?;
        let mut body = Vec::with_capacity(4 + meta.len() + data.len());
        let len = u32::try_from(meta.len()).map_err(io::Error::other)?;
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(&meta);
        body.extend_from_slice(data);
        let sealed = self.key.seal(&self.aad, &body);
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)?;
        let tmp = self.path.with_extension("tmp");
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&sealed)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &self.path)?;
        File::open(dir)?.sync_all()
    }

    /// The stored snapshot, if there is one.
    ///
    /// # Errors
    /// I/O, or a file that fails authentication or does not decode (damage, or another
    /// group's file).
    pub fn read(&self) -> io::Result<Option<Stored>> {
        let sealed = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {why}", self.path.display()),
            )
        };
        let body = self
            .key
            .open(&self.aad, &sealed)
            .map_err(|_| bad("fails authentication"))?;
        let len = body
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| bad("too short"))? as usize;
        let meta = body.get(4..4 + len).ok_or_else(|| bad("meta cut short"))?;
        let meta = serde_json::from_slice(meta).map_err(|_| bad("meta does not decode"))?;
        Ok(Some((meta, body[4 + len..].to_vec())))
    }

    /// Removes it (the group left this node).
    pub fn remove(&self) {
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId, StoredMembership};

    fn key(b: u8) -> SealKey {
        SealKey::new(crate::crypto::Secret::from_fn(|k| k.fill(b)))
    }

    fn meta(index: u64) -> SnapshotMeta<NodeId, openraft::BasicNode> {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(3, 1), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: format!("3-{index}"),
        }
    }

    #[test]
    fn a_snapshot_is_stored_sealed_and_read_back_and_a_newer_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
        assert!(f.read().unwrap().is_none());
        f.write(&meta(10), b"the stream's secret image").unwrap();
        let raw = fs::read(f.path()).unwrap();
        assert!(
            !raw.windows(6).any(|w| w == b"secret"),
            "stored in the clear"
        );
        f.write(&meta(20), b"newer").unwrap();
        let (m, data) = f.read().unwrap().unwrap();
        assert_eq!(m.last_log_id.unwrap().index, 20);
        assert_eq!(data, b"newer");
        assert!(!f.path().with_extension("tmp").exists());
    }

    #[test]
    fn a_flipped_bit_another_key_or_another_groups_file_fails_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
        f.write(&meta(10), b"image").unwrap();
        assert!(SnapshotFile::new(dir.path(), [7; 8], key(2))
            .read()
            .is_err());
        let other = SnapshotFile::new(dir.path(), [8; 8], key(1));
        fs::copy(f.path(), other.path()).unwrap();
        assert!(
            other.read().is_err(),
            "a file moved to another group opened"
        );
        let mut raw = fs::read(f.path()).unwrap();
        raw[40] ^= 1;
        fs::write(f.path(), raw).unwrap();
        assert!(f.read().is_err());
    }
}
