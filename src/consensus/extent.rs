//! The acknowledged extent of a node's Raft log: how long each live segment was at the last
//! completed flush, kept beside the log (`raft/extent`) under a MAC.
//!
//! Why: the log itself cannot tell a clean end from a cut one. A segment cut exactly on a
//! record boundary, or a last record whose length field was damaged so that it looks like a
//! crash's torn write, opens as a shorter log — the node would have forgotten entries it
//! acknowledged and would vote as if it never had them, which is how a truncated minority
//! lost acknowledged writes in Jepsen's 2025 analysis of NATS. With the extent, opening finds
//! a segment shorter than it was when its writes were acknowledged (or missing) and reports
//! the log corrupt, so the node starts under repair instead (`consensus/repair.rs`).
//!
//! The writer thread rewrites the file in place after every flush, after the `fdatasync`
//! that made the flush durable, so the extent never runs ahead of what is on disk: a torn
//! tail (a write whose flush never finished) always lies beyond it. It is not synced itself
//! — after a power loss it may be older, which only narrows the check — except before old
//! segments are deleted, so that a deleted segment is never missed as if cut away. Deleting
//! the file disables the check (reported at open); forging it needs the node's name key.
//!
//! It also keeps each group's last vote (under the group's pseudonym, as in the log): a node
//! whose log failed authentication sets the log aside and starts empty, and without its
//! votes it would no longer know the newest term it took part in — a deposed leader reaching
//! it before the current one could then have appends acknowledged. Seeded from here
//! ([`super::sealed_log::SealedLog::seed_votes`]), it refuses them.
//!
//! Layout: `length u32 | body | HMAC-SHA256 [32]`, the body postcard of [`Recorded`].

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use hmac::{Hmac, Mac};
use openraft::Vote;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::NodeId;
use crate::crypto::Key32;

/// The file's name in the log's directory.
pub const EXTENT_FILE: &str = "extent";
const TAG: &[u8] = b"sealstream raft extent v1";
const MAC_LEN: usize = 32;

/// Segment id → its length when its last write was acknowledged.
pub type Extent = BTreeMap<u64, u64>;

/// Group pseudonym → its last vote.
pub type Votes = BTreeMap<[u8; 8], Vote<NodeId>>;

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// The segments' acknowledged lengths.
    pub extent: Extent,
    /// The groups' last votes.
    pub votes: Votes,
}

fn mac(name_key: &Key32, body: &[u8]) -> [u8; MAC_LEN] {
    let mut m = match <Hmac<Sha256> as Mac>::new_from_slice(name_key.expose()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes a key of any length"),
    };
    m.update(TAG);
    m.update(body);
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&m.finalize().into_bytes());
    out
}

/// The file's bytes for `recorded`.
pub fn encode(name_key: &Key32, recorded: &Recorded) -> Vec<u8> {
    let body = postcard::to_stdvec(recorded).unwrap_or_default();
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut b = Vec::with_capacity(4 + body.len() + MAC_LEN);
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&body);
    let tag = mac(name_key, &b);
    b.extend_from_slice(&tag);
    b
}

/// Why an extent file cannot be believed.
#[derive(Debug, PartialEq, Eq)]
pub struct Unreadable(pub &'static str);

/// Reads the extent in `dir`: `Ok(None)` when there is no file (a new log, or a log written
/// by a build without one).
///
/// # Errors
/// [`Unreadable`] when the file is short or fails its MAC (damaged or forged).
pub fn read(dir: &Path, name_key: &Key32) -> io::Result<Result<Option<Recorded>, Unreadable>> {
    let data = match std::fs::read(dir.join(EXTENT_FILE)) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Ok(None)),
        Err(e) => return Err(e),
    };
    Ok(decode(name_key, &data).map(Some))
}

fn decode(name_key: &Key32, data: &[u8]) -> Result<Recorded, Unreadable> {
    let len = data
        .get(..4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .ok_or(Unreadable("the extent file is cut short"))?;
    let signed = data
        .get(..4 + len)
        .ok_or(Unreadable("the extent file is cut short"))?;
    let tag = data
        .get(4 + len..4 + len + MAC_LEN)
        .ok_or(Unreadable("the extent file is cut short"))?;
    let want = mac(name_key, signed);
    let same = tag
        .iter()
        .zip(want.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0;
    if !same {
        return Err(Unreadable("the extent file does not authenticate"));
    }
    postcard::from_bytes(&signed[4..]).map_err(|_| Unreadable("the extent file does not decode"))
}

/// The writer's handle on the file: rewritten in place (one `pwrite`; the length says how
/// much of it is current, so a shorter record needs no truncation).
pub struct ExtentFile {
    file: File,
}

impl ExtentFile {
    /// Opens (or creates) the file in `dir`.
    ///
    /// # Errors
    /// The file system refused.
    pub fn open(dir: &Path) -> io::Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(EXTENT_FILE))?;
        Ok(ExtentFile { file })
    }

    /// Records `recorded`; with `sync`, durably (before segments are deleted).
    ///
    /// # Errors
    /// The file system refused.
    pub fn write(&self, name_key: &Key32, recorded: &Recorded, sync: bool) -> io::Result<()> {
        self.file.write_all_at(&encode(name_key, recorded), 0)?;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> Key32 {
        crate::crypto::secret::Secret::new([b; 32])
    }

    #[test]
    fn an_extent_reads_back_and_a_changed_or_foreign_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path(), &key(1)).unwrap(), Ok(None));
        let f = ExtentFile::open(dir.path()).unwrap();
        let long = Recorded {
            extent: Extent::from([(1, 100), (2, 4096), (3, 7)]),
            votes: Votes::from([([9; 8], Vote::new(4, 2))]),
        };
        f.write(&key(1), &long, false).unwrap();
        // A shorter record written over a longer one: the length says where it ends.
        let short = Recorded {
            extent: Extent::from([(3, 9)]),
            votes: Votes::new(),
        };
        f.write(&key(1), &short, true).unwrap();
        assert_eq!(read(dir.path(), &key(1)).unwrap(), Ok(Some(short.clone())));
        f.write(&key(1), &long, false).unwrap();
        assert_eq!(read(dir.path(), &key(1)).unwrap(), Ok(Some(long.clone())));
        assert!(read(dir.path(), &key(2)).unwrap().is_err(), "another key");
        let mut bytes = encode(&key(1), &short);
        bytes[6] ^= 1;
        std::fs::write(dir.path().join(EXTENT_FILE), &bytes).unwrap();
        assert_eq!(
            read(dir.path(), &key(1)).unwrap(),
            Err(Unreadable("the extent file does not authenticate"))
        );
        std::fs::write(dir.path().join(EXTENT_FILE), &bytes[..5]).unwrap();
        assert!(read(dir.path(), &key(1)).unwrap().is_err());
    }
}
