//! Which groups a node keeps in its Raft log, and their keys: the small sealed file beside
//! the log (`raft/groups`), read before the log is opened so that every group's records are
//! found.
//!
//! Why it is here, beside the log: it is what opens the log — the cluster layer writes it as
//! groups come, go and rotate their keys (`server/jetstream/cluster/`), and an audit reads it
//! to authenticate the log's records (`audit/`).
//!
//! Keys: the meta group's key and this file's derive from the node's group root
//! (`MetaStore::raft_secrets`); each stream group has a random key of its own from its first
//! day on the node (groups kept by earlier builds use one derived from the root), kept here
//! and removed — durably — when the group leaves, so its records open for nobody after.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::sealed_log::{Hosted, LogPosition};
use super::GroupId;
use crate::crypto::{Key32, SealKey};

/// The file beside the log that lists the groups this node keeps.
pub(crate) const DIRECTORY: &str = "groups";
/// The meta group's id (its key derives from the root; it is in every node's log).
pub(crate) const META: GroupId = 0;

pub(crate) fn group_key(root: &Key32, group: GroupId) -> SealKey {
    seal_key(&group_key_bytes(root, group))
}

/// The key of a group kept by an earlier build (none of its own), derived from the node's.
pub(crate) fn group_key_bytes(root: &Key32, group: GroupId) -> [u8; 32] {
    let mut mac = match <Hmac<Sha256> as Mac>::new_from_slice(root.expose()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC takes a key of any length"),
    };
    mac.update(b"sealstream raft group key v1");
    mac.update(&group.to_le_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(&mac.finalize().into_bytes());
    out
}

fn directory_key(root: &Key32) -> SealKey {
    group_key(root, u64::MAX)
}

const DIRECTORY_AAD: &[u8] = b"sealstream raft directory v1";

/// What the sealed directory beside the log holds: the groups this node keeps, and the port
/// its Raft transport listened on (peers' memberships name it, so a restart binds it again).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Directory {
    pub(crate) groups: BTreeSet<GroupId>,
    pub(crate) port: u16,
    /// Each stream group's own random key, from its first day on this node (groups kept by
    /// earlier builds have none and use one derived from the node's key). It leaves with the
    /// group: the group's records, still on disk until their segments go, then open for
    /// nobody, whoever holds the node's key — a deleted stream's replicated history is
    /// crypto-erased on every node that kept it.
    #[serde(default)]
    pub(crate) keys: BTreeMap<GroupId, [u8; 32]>,
    /// Groups seeded here from an R1 stream of this server whose promotion has not been
    /// applied here yet: the meta entry (the promotion, as JSON) to propose until it is
    /// (`server/jetstream/cluster/promote.rs`).
    #[serde(default)]
    pub(crate) promoting: BTreeMap<GroupId, String>,
    /// Groups whose key was rotated on this node (`server/jetstream/cluster/group_rekey.rs`); such a group has no entry
    /// in `keys` any more.
    #[serde(default)]
    pub(crate) rotated: BTreeMap<GroupId, Rotated>,
}

/// A group's keys after a rotation began.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Rotated {
    /// Its slot in the log, as it was before the first rotation (records keep their slot).
    pub(crate) slot: GroupId,
    /// Newest first: two while a rotation is under way, one once it finished.
    pub(crate) keys: Vec<[u8; 32]>,
    /// Where the records under the newest key start, once the older keys were dropped.
    pub(crate) since: Option<LogPosition>,
    /// How many rotations the group's key has had here.
    pub(crate) generation: u32,
}

pub(crate) fn seal_key(bytes: &[u8; 32]) -> SealKey {
    SealKey::new(crate::crypto::Secret::from_fn(|k| k.copy_from_slice(bytes)))
}

impl Directory {
    /// Every group the log is opened for: the stream groups listed and the meta group.
    pub(crate) fn log_groups(&self, root: &Key32) -> Vec<Hosted> {
        self.groups
            .iter()
            .map(|g| self.hosted(root, *g))
            .chain([Hosted {
                group: META,
                keys: vec![group_key(root, META)],
                since: None,
            }])
            .collect()
    }

    /// `group`'s slot, keys (newest first) and where its live records start, for opening
    /// the log.
    pub(crate) fn hosted(&self, root: &Key32, group: GroupId) -> Hosted {
        match self.rotated.get(&group) {
            Some(r) => Hosted {
                group: r.slot,
                keys: r.keys.iter().map(seal_key).collect(),
                since: r.since,
            },
            None => {
                let (slot, key) = self.slot(root, group);
                Hosted {
                    group: slot,
                    keys: vec![key],
                    since: None,
                }
            }
        }
    }

    /// Where `group`'s records are in the node's log: the log's id for them and their key.
    /// A group with a key of its own is kept under an id derived from that key, so a group
    /// that comes back to this node with a new key never meets its earlier records (sealed
    /// under the old key) under the same pseudonym.
    pub(crate) fn slot(&self, root: &Key32, group: GroupId) -> (GroupId, SealKey) {
        if let Some(r) = self.rotated.get(&group) {
            if let Some(newest) = r.keys.first() {
                return (r.slot, seal_key(newest));
            }
        }
        match self.keys.get(&group) {
            Some(key) => {
                use sha2::Digest;
                let mut h = Sha256::new();
                h.update(b"sealstream raft slot v1");
                h.update(group.to_le_bytes());
                h.update(key);
                let d = h.finalize();
                let mut id = [0u8; 8];
                id.copy_from_slice(&d[..8]);
                // Never META nor the directory's own key's id.
                let id = u64::from_le_bytes(id).clamp(1, u64::MAX - 1);
                (
                    id,
                    SealKey::new(crate::crypto::Secret::from_fn(|k| k.copy_from_slice(key))),
                )
            }
            None => (group, group_key(root, group)),
        }
    }
}

pub(crate) fn read_directory(dir: &Path, root: &Key32) -> Result<Directory, String> {
    let path = dir.join(DIRECTORY);
    let sealed = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Directory::default()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let plain = directory_key(root)
        .open(DIRECTORY_AAD, &sealed)
        .map_err(|_| format!("{}: does not authenticate", path.display()))?;
    serde_json::from_slice(&plain).map_err(|e| format!("{}: {e}", path.display()))
}

pub(crate) fn write_directory(
    dir: &Path,
    root: &Key32,
    directory: &Directory,
) -> std::io::Result<()> {
    use std::io::Write;
    let plain = serde_json::to_vec(directory).map_err(std::io::Error::other)?;
    let sealed = directory_key(root).seal(DIRECTORY_AAD, &plain);
    let tmp = dir.join(format!("{DIRECTORY}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&sealed)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(DIRECTORY))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Key32 {
        crate::crypto::Secret::new([5u8; 32])
    }

    #[test]
    fn a_group_keeps_its_own_key_in_the_directory_and_loses_it_when_forgotten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut d = Directory {
            port: 7,
            ..Directory::default()
        };
        // A group of an earlier build: no key of its own, its id and the derived key.
        d.groups.insert(41);
        let (legacy_slot, legacy_key) = d.slot(&root(), 41);
        assert_eq!(legacy_slot, 41);
        // A new group: a random key, kept under an id of its own.
        d.groups.insert(42);
        d.keys.insert(42, [9u8; 32]);
        let (slot, key) = d.slot(&root(), 42);
        assert_ne!(slot, 42);
        let sealed = key.seal(b"aad", b"record");
        assert!(group_key(&root(), 42).open(b"aad", &sealed).is_err());
        // The directory keeps it across a restart (sealed, so its bytes hold no key).
        write_directory(dir.path(), &root(), &d).expect("write");
        let raw = std::fs::read(dir.path().join(DIRECTORY)).expect("read");
        assert!(!raw.windows(32).any(|w| w == [9u8; 32]));
        let back = read_directory(dir.path(), &root()).expect("read back");
        assert_eq!(back.port, 7);
        let (slot2, key2) = back.slot(&root(), 42);
        assert_eq!(slot2, slot);
        assert_eq!(key2.open(b"aad", &sealed).expect("opens"), b"record");
        assert_eq!(back.slot(&root(), 41).0, legacy_slot);
        let legacy = legacy_key.seal(b"aad", b"old");
        assert!(back.slot(&root(), 41).1.open(b"aad", &legacy).is_ok());
        // Forgotten: nothing left opens the group's records, whoever holds the node's key.
        let mut gone = back.clone();
        gone.groups.remove(&42);
        gone.keys.remove(&42);
        write_directory(dir.path(), &root(), &gone).expect("write");
        let after = read_directory(dir.path(), &root()).expect("read");
        assert!(after.keys.is_empty());
        assert!(after.slot(&root(), 42).1.open(b"aad", &sealed).is_err());
    }
}
