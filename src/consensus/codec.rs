//! How Raft messages and log records are written as bytes: one home for the transport's frames
//! ([`super::mux`]) and the sealed log's record bodies ([`super::sealed_log`]).
//!
//! Why binary: a replicated publish crosses this codec five times (the leader's record, a frame
//! to each follower, each follower's record). As JSON, a command's bytes were base64 text that
//! serde_json scanned for escapes on every pass — the largest CPU cost of an R3 publish after
//! the seal itself (perf, docs/PERFORMANCE.md "Replicated JetStream"). Postcard writes serde
//! types compactly (varints, bytes as length + raw bytes) with no schema of its own to keep.
//!
//! Every body starts with [`POSTCARD`]. A body that starts with `{` is the JSON that earlier
//! builds wrote, and still reads: an existing Raft log opens after an upgrade. (A peer running
//! such a build cannot read this build's frames: the transport is upgraded with the whole
//! cluster — docs/cluster.md.)

use std::io;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The first byte of a postcard body (never `{`, the first byte of every JSON body).
pub const POSTCARD: u8 = 0xB1;

/// Encodes `value` as a tagged postcard body.
///
/// # Errors
/// Serde's error for a value postcard cannot write (none of the Raft types here).
pub fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    encode_after(&[], value)
}

/// `prefix` followed by [`encode`] of `value`, in one buffer sized once (a batch of entries
/// is hundreds of KiB: growing the buffer as it fills would copy it again).
///
/// # Errors
/// As [`encode`].
pub fn encode_after<T: Serialize>(prefix: &[u8], value: &T) -> io::Result<Vec<u8>> {
    let size = postcard::experimental::serialized_size(value).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(prefix.len() + 1 + size);
    out.extend_from_slice(prefix);
    out.push(POSTCARD);
    postcard::to_extend(value, out).map_err(io::Error::other)
}

/// Decodes a body written by [`encode`], or the JSON of an earlier build.
///
/// # Errors
/// `InvalidData` for anything else.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> io::Result<T> {
    let bad = |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    match body.split_first() {
        Some((&POSTCARD, rest)) => postcard::from_bytes(rest).map_err(|e| bad(&e)),
        Some((b'{', _)) => serde_json::from_slice(body).map_err(|e| bad(&e)),
        _ => Err(bad(&"not a raft body")),
    }
}

/// A snapshot chunk's request ([`openraft::raft::InstallSnapshotRequest`]) with its data
/// written as one run of bytes (`crate::bytes_run`: the same bytes on the wire as openraft's
/// own derive writes, so peers of earlier builds read it alike). Use as
/// `#[serde(with = "codec::snapshot_chunk")]`.
pub mod snapshot_chunk {
    use openraft::raft::InstallSnapshotRequest;
    use openraft::{BasicNode, SnapshotMeta, Vote};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::consensus::{NodeId, TypeConfig};

    /// Fields in the order of openraft's own derive.
    #[derive(Serialize)]
    struct Out<'a> {
        vote: &'a Vote<NodeId>,
        meta: &'a SnapshotMeta<NodeId, BasicNode>,
        offset: u64,
        #[serde(serialize_with = "crate::bytes_run::serialize")]
        data: &'a [u8],
        done: bool,
    }

    #[derive(Deserialize)]
    struct In {
        vote: Vote<NodeId>,
        meta: SnapshotMeta<NodeId, BasicNode>,
        offset: u64,
        #[serde(with = "crate::bytes_run")]
        data: Vec<u8>,
        done: bool,
    }

    /// Serializes `r` with its data as bytes.
    pub fn serialize<S: Serializer>(
        r: &InstallSnapshotRequest<TypeConfig>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        Out {
            vote: &r.vote,
            meta: &r.meta,
            offset: r.offset,
            data: &r.data,
            done: r.done,
        }
        .serialize(s)
    }

    /// Reads what [`serialize`] (or openraft's own derive) wrote.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<InstallSnapshotRequest<TypeConfig>, D::Error> {
        let i = In::deserialize(d)?;
        Ok(InstallSnapshotRequest {
            vote: i.vote,
            meta: i.meta,
            offset: i.offset,
            data: i.data,
            done: i.done,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::{Command, TypeConfig};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

    fn entry(index: u64, bytes: &[u8]) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 7), index),
            payload: EntryPayload::Normal(Command(bytes.to_vec().into())),
        }
    }

    #[test]
    fn entries_round_trip_and_command_bytes_travel_raw() {
        let payload = vec![0xAB; 1024];
        let entries = vec![entry(1, &payload), entry(2, b"")];
        let body = encode(&entries).unwrap();
        assert_eq!(body[0], POSTCARD);
        // The command's bytes appear as they are, not as text.
        assert!(body.windows(1024).any(|w| w == payload.as_slice()));
        assert!(body.len() < 1024 + 64, "{} bytes", body.len());
        let back: Vec<Entry<TypeConfig>> = decode(&body).unwrap();
        assert_eq!(back, entries);
    }

    #[test]
    fn json_of_earlier_builds_still_reads_and_garbage_does_not() {
        let entries = vec![entry(5, b"abc")];
        let json = serde_json::to_vec(&entries).unwrap();
        // A bare JSON array is not a body an earlier build wrote; wrap it as records were.
        let wrapped = serde_json::to_vec(&std::collections::BTreeMap::from([("x", 1)])).unwrap();
        assert_eq!(
            decode::<std::collections::BTreeMap<String, u32>>(&wrapped).unwrap()["x"],
            1
        );
        assert!(decode::<Vec<Entry<TypeConfig>>>(&json).is_err());
        assert!(decode::<Vec<Entry<TypeConfig>>>(&[]).is_err());
        assert!(decode::<Vec<Entry<TypeConfig>>>(&[POSTCARD, 0xFF, 0xFF]).is_err());
    }

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Ours(
        #[serde(with = "snapshot_chunk")] openraft::raft::InstallSnapshotRequest<TypeConfig>,
    );

    #[test]
    fn a_snapshot_chunk_is_written_as_openrafts_own_derive_writes_it_and_read_back_either_way() {
        let req = openraft::raft::InstallSnapshotRequest::<TypeConfig> {
            vote: openraft::Vote::new_committed(4, 9),
            meta: openraft::SnapshotMeta {
                last_log_id: Some(LogId::new(CommittedLeaderId::new(4, 9), 120)),
                last_membership: openraft::StoredMembership::default(),
                snapshot_id: "120-2".into(),
            },
            offset: 1 << 20,
            data: (0..70_000u32).map(|i| (i % 256) as u8).collect(),
            done: false,
        };
        let ours = encode(&Ours(req.clone())).unwrap();
        let theirs = encode(&req).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(decode::<Ours>(&theirs).unwrap().0, req);
        // JSON (earlier builds' frames) writes the data as numbers; it reads back too.
        let json = serde_json::to_vec(&Ours(req.clone())).unwrap();
        assert_eq!(serde_json::from_slice::<Ours>(&json).unwrap().0, req);
    }
}
