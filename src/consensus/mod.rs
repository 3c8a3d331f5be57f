//! Consensus: the one door to openraft.
//!
//! Replicated JetStream (issue 15) runs on a proven Raft engine instead of one we would write:
//! openraft, pinned to one exact version in `Cargo.toml`. Nothing outside this module names an
//! openraft type, so the engine can be swapped without touching JetStream.
//!
//! What is here so far:
//! - [`TypeConfig`]: the types every group shares (node ids, entries, snapshots).
//! - [`memory`]: a log store and a counting state machine kept in memory — the store of the
//!   transport tests and of the idle-cost measurement (`examples/raft_idle.rs`), checked by
//!   openraft's own storage test suite. The sealed, shared on-disk log replaces it for real
//!   groups.
//! - [`mux`]: the transport. A node hosts many groups; all their RPCs to one peer share one
//!   connection, and heartbeats (appends that carry no entries) wait up to
//!   [`mux::HEARTBEAT_LINGER`] so that every group's heartbeat to that peer leaves in one frame,
//!   while an append that carries entries, and a vote, go at once.
//! - [`sealed_log`]: the node's one Raft log for all its groups: records sealed with each
//!   group's key under an opaque pseudonym, one `fdatasync` per write window whatever the number
//!   of groups, torn tails cut, anything else that fails authentication reported as corrupt.
//! - [`extent`]: how long each log segment was at its last acknowledged flush, so a log cut
//!   on a record boundary is found at open rather than taken for a clean one.
//! - [`timing`]: election and heartbeat settings, chosen so that one failure fits inside a
//!   client's 5 s timeout (spec cluster.md 7.3).
//!
//! - [`machine`]: the state machine of real groups, handing committed commands in order to an
//!   [`machine::Applier`] (the meta group's table, a stream's worker), and a stream group's
//!   snapshots (the applier's image, taken by the log's size against the state's).
//! - [`snapshot_file`]: a group's newest snapshot, sealed with its key beside the log, a
//!   frame at a time; [`snapshot_data`]: what openraft sends and receives of it.
//! - `directory`: which groups a node keeps and their keys (the sealed file that opens the
//!   log).
//! - [`key_ring`]: a group's keys, shared by its log records and its snapshot file, so its
//!   key can be rotated while it runs.
//! - `repair`: the needs-repair gate of a node whose log failed authentication.
//!
//! Who drives it: `server/jetstream/cluster/` (the meta group, stream groups) and
//! `replica.rs` (a stream's proposals). Not here yet (named in issue 15's notes): snapshots
//! of the meta group (its log is kept whole).

pub mod codec;
pub(crate) mod directory;
pub mod extent;
pub mod handover;
pub mod key_ring;
pub mod machine;
pub mod memory;
pub mod mux;
pub(crate) mod repair;
pub mod sealed_log;
pub mod snapshot_data;
pub mod snapshot_file;
pub mod snapshot_send;
pub mod timing;

use serde::{Deserialize, Serialize};

/// A Raft group's id on the wire: one number per group, the same on every node.
pub type GroupId = u64;

/// A node's id in every group it is part of.
pub type NodeId = u64;

/// The node id of a server: the first eight bytes of SHA-256 of its name (little-endian), so
/// it is the same on every start and every peer computes it alike.
pub fn node_id(server_name: &str) -> NodeId {
    use sha2::Digest;
    let d = sha2::Sha256::digest(server_name.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

/// The 8-character peer id nats-server shows for a server name (spec cluster.md 1.1): each of
/// the first eight bytes of SHA-256 of the name, mod 62, into `0-9A-Za-z`.
pub fn peer_id(server_name: &str) -> String {
    use sha2::Digest;
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let d = sha2::Sha256::digest(server_name.as_bytes());
    d.iter()
        .take(8)
        .map(|b| char::from(DIGITS[usize::from(*b) % DIGITS.len()]))
        .collect()
}

/// One proposal: opaque bytes the group's state machine decodes. Empty bytes are a no-op
/// that the state machine skips ([`Command::nudge`]).
///
/// Written as raw bytes by the binary codec of frames and records ([`codec`]); in JSON (the
/// records of earlier builds, which still open) as one base64 string, where serde would write
/// an array of numbers — 3.6 bytes of text per byte. An array is still read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command(pub bytes::Bytes);

impl Serialize for Command {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&data_encoding::BASE64.encode(&self.0))
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = Command;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("base64 text or bytes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Command, E> {
                data_encoding::BASE64
                    .decode(v.as_bytes())
                    .map(|v| Command(v.into()))
                    .map_err(E::custom)
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Command, E> {
                Ok(Command(bytes::Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Command, E> {
                Ok(Command(v.into()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Command, A::Error> {
                let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0));
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(Command(out.into()))
            }
        }
        if d.is_human_readable() {
            d.deserialize_any(Bytes)
        } else {
            d.deserialize_byte_buf(Bytes)
        }
    }
}

impl Command {
    /// A no-op entry. A follower under repair asks its leader to append one: openraft 0.9's
    /// leader does not act on a heartbeat's conflict, only on an append's, so without a new
    /// entry it would never send the follower the log it lost.
    pub fn nudge() -> Self {
        Command(bytes::Bytes::new())
    }

    /// Whether this is [`Command::nudge`].
    pub fn is_nudge(&self) -> bool {
        self.0.is_empty()
    }
}

/// What applying one entry answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// How many commands the state machine has applied, this one included.
    pub applied: u64,
}

openraft::declare_raft_types!(
    /// The types all of sealstream's groups share.
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = snapshot_data::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A group's handle, as openraft gives it.
pub type Raft = openraft::Raft<TypeConfig>;

#[cfg(test)]
mod tests {
    use super::Command;

    #[test]
    fn commands_cross_json_as_base64_and_arrays_still_read() {
        let c = Command(vec![0, 1, 2, 250, 255].into());
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(text, "\"AAEC+v8=\"");
        assert_eq!(serde_json::from_str::<Command>(&text).unwrap(), c);
        assert_eq!(
            serde_json::from_str::<Command>("[0,1,2,250,255]").unwrap(),
            c
        );
        assert_eq!(
            serde_json::from_str::<Command>("\"\"").unwrap(),
            Command::nudge()
        );
    }
}
