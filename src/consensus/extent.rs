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
//! Layout: `count u32 | (segment u64, length u64) × count | HMAC-SHA256 [32]`, little-endian.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::crypto::Key32;

/// The file's name in the log's directory.
pub const EXTENT_FILE: &str = "extent";
const TAG: &[u8] = b"sealstream raft extent v1";
const MAC_LEN: usize = 32;

/// Segment id → its length when its last write was acknowledged.
pub type Extent = BTreeMap<u64, u64>;

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

/// The file's bytes for `extent`.
pub fn encode(name_key: &Key32, extent: &Extent) -> Vec<u8> {
    let count = u32::try_from(extent.len()).unwrap_or(u32::MAX);
    let mut b = Vec::with_capacity(4 + 16 * extent.len() + MAC_LEN);
    b.extend_from_slice(&count.to_le_bytes());
    for (segment, len) in extent.iter().take(count as usize) {
        b.extend_from_slice(&segment.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
    }
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
pub fn read(dir: &Path, name_key: &Key32) -> io::Result<Result<Option<Extent>, Unreadable>> {
    let data = match std::fs::read(dir.join(EXTENT_FILE)) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Ok(None)),
        Err(e) => return Err(e),
    };
    Ok(decode(name_key, &data).map(Some))
}

fn decode(name_key: &Key32, data: &[u8]) -> Result<Extent, Unreadable> {
    let count = data
        .get(..4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .ok_or(Unreadable("the extent file is cut short"))?;
    let body_len = count
        .checked_mul(16)
        .and_then(|n| n.checked_add(4))
        .ok_or(Unreadable("the extent file's count is impossible"))?;
    let (body, tag) = (
        data.get(..body_len)
            .ok_or(Unreadable("the extent file is cut short"))?,
        data.get(body_len..body_len + MAC_LEN)
            .ok_or(Unreadable("the extent file is cut short"))?,
    );
    let want = mac(name_key, body);
    let same = tag
        .iter()
        .zip(want.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0;
    if !same {
        return Err(Unreadable("the extent file does not authenticate"));
    }
    let mut extent = Extent::new();
    for pair in body[4..].chunks_exact(16) {
        let mut s = [0u8; 8];
        let mut l = [0u8; 8];
        s.copy_from_slice(&pair[..8]);
        l.copy_from_slice(&pair[8..]);
        extent.insert(u64::from_le_bytes(s), u64::from_le_bytes(l));
    }
    Ok(extent)
}

/// The writer's handle on the file: rewritten in place (one `pwrite`; the count says how
/// much of it is current, so a shorter extent needs no truncation).
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

    /// Records `extent`; with `sync`, durably (before segments are deleted).
    ///
    /// # Errors
    /// The file system refused.
    pub fn write(&self, name_key: &Key32, extent: &Extent, sync: bool) -> io::Result<()> {
        self.file.write_all_at(&encode(name_key, extent), 0)?;
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
        let long = Extent::from([(1, 100), (2, 4096), (3, 7)]);
        f.write(&key(1), &long, false).unwrap();
        // A shorter extent written over a longer one: the count says where it ends.
        let short = Extent::from([(3, 9)]);
        f.write(&key(1), &short, true).unwrap();
        assert_eq!(read(dir.path(), &key(1)).unwrap(), Ok(Some(short.clone())));
        assert!(read(dir.path(), &key(2)).unwrap().is_err(), "another key");
        let mut bytes = encode(&key(1), &short);
        bytes[12] ^= 1;
        std::fs::write(dir.path().join(EXTENT_FILE), &bytes).unwrap();
        assert_eq!(
            read(dir.path(), &key(1)).unwrap(),
            Err(Unreadable("the extent file does not authenticate"))
        );
        std::fs::write(dir.path().join(EXTENT_FILE), &bytes[..10]).unwrap();
        assert!(read(dir.path(), &key(1)).unwrap().is_err());
    }
}
