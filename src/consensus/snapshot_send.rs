//! Sending a group's snapshot to a follower: a chunk (one sealed frame of the file) at a time,
//! the last chunk given as long as the follower needs to install the whole image.
//!
//! Why our own loop: the follower answers the last chunk only once it has installed the image
//! (every message decrypted, checked and written into a new store), and openraft's loop gives
//! that chunk the same deadline as any other. A stream of a few GiB takes longer than that to
//! install; the leader then gives up, and its next attempt starts over from the first chunk —
//! a follower that never catches up. Here the last chunk's deadline grows with the
//! snapshot's size ([`Deadlines::last_chunk`]); every other chunk keeps the short one, so a
//! follower that stops answering is still noticed within it.
//!
//! A chunk that fails for a passing reason (no answer, the node-wide cap of snapshot sends) is
//! sent again, a few times; a follower that lost the start of the snapshot asks for it again
//! (a mismatch), and the send starts over.
//!
//! While a group's snapshot is being sent, the group takes no new snapshot ([`Sending`]):
//! building one makes openraft purge the log up to it, and the follower — once it has
//! installed the snapshot it was sent — would find the entries after that snapshot gone and
//! be sent the new one, from its first chunk. Under steady writes a follower whose install
//! takes longer than the leader takes between snapshots never caught up that way (seen once
//! even after writes stopped: a 1 GiB catch-up installed two snapshots, 14.5 s instead of
//! ~7 s).

use std::future::Future;
use std::io::{self, SeekFrom};
use std::time::Duration;

use openraft::error::{
    Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed,
    StreamingError,
};
use openraft::network::{RPCOption, RaftNetwork};
use openraft::raft::{InstallSnapshotRequest, SnapshotResponse};
use openraft::{Snapshot, Vote};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::{GroupId, NodeId, TypeConfig};

/// The groups whose snapshot this node is sending now, and how many sends of each.
#[derive(Debug, Default)]
pub struct Sending(std::sync::Mutex<std::collections::HashMap<GroupId, usize>>);

impl Sending {
    /// Counts a send of `group`'s snapshot until the returned guard is dropped.
    pub fn begin(self: &std::sync::Arc<Self>, group: GroupId) -> SendingGuard {
        *self.lock().entry(group).or_default() += 1;
        SendingGuard {
            sending: std::sync::Arc::clone(self),
            group,
        }
    }

    /// Whether a snapshot of `group` is being sent.
    pub fn any(&self, group: GroupId) -> bool {
        self.lock().contains_key(&group)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<GroupId, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One send in [`Sending`]'s count.
pub struct SendingGuard {
    sending: std::sync::Arc<Sending>,
    group: GroupId,
}

impl Drop for SendingGuard {
    fn drop(&mut self) {
        let mut m = self.sending.lock();
        if let Some(n) = m.get_mut(&self.group) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.group);
            }
        }
    }
}

/// The slowest install rate a follower is allowed before the leader gives up on it: the last
/// chunk's deadline is the chunk deadline plus the snapshot's bytes at this rate. Installs
/// run at tens of MB/s (docs/PERFORMANCE.md); this leaves a wide margin for a loaded node.
pub const INSTALL_RATE_FLOOR: u64 = 4 << 20;

/// Times a chunk is sent again after a passing failure before the send gives up.
const CHUNK_TRIES: u32 = 3;

/// Pause before a chunk is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// How long a follower may take to answer a chunk.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// Any chunk (openraft's `install_snapshot_timeout`).
    pub chunk: Duration,
    /// Bytes a second the follower installs at the least (see [`Deadlines::last_chunk`]).
    pub install_rate_floor: u64,
}

impl Deadlines {
    /// `chunk` for every chunk; the last one more by [`INSTALL_RATE_FLOOR`].
    pub fn new(chunk: Duration) -> Self {
        Deadlines {
            chunk,
            install_rate_floor: INSTALL_RATE_FLOOR,
        }
    }

    /// How long the last chunk of a snapshot of `size` bytes may take: sending it, and the
    /// follower installing the whole image.
    pub fn last_chunk(&self, size: u64) -> Duration {
        self.chunk + Duration::from_secs_f64(size as f64 / self.install_rate_floor.max(1) as f64)
    }
}

type SendError = StreamingError<TypeConfig, Fatal<NodeId>>;

fn network(e: &io::Error) -> SendError {
    StreamingError::Network(NetworkError::new(e))
}

/// Sends `snapshot` to the follower behind `net`, `chunk_bytes` at a time, each chunk within
/// its [`Deadlines`]; returns the follower's vote.
///
/// # Errors
/// The send was cancelled, the snapshot could not be read, or the follower did not take a
/// chunk (after [`CHUNK_TRIES`] tries, or at once when its answer says it never will).
pub async fn send<N: RaftNetwork<TypeConfig> + ?Sized>(
    net: &mut N,
    vote: Vote<NodeId>,
    mut snapshot: Snapshot<TypeConfig>,
    cancel: impl Future<Output = ReplicationClosed>,
    deadlines: Deadlines,
    chunk_bytes: usize,
) -> Result<SnapshotResponse<NodeId>, SendError> {
    let chunk_bytes = chunk_bytes.max(1);
    let data = &mut snapshot.snapshot;
    let size = data.seek(SeekFrom::End(0)).await.map_err(|e| network(&e))?;
    let mut cancel = std::pin::pin!(cancel);
    let mut offset = 0u64;
    let mut failures = 0u32;
    loop {
        data.seek(SeekFrom::Start(offset))
            .await
            .map_err(|e| network(&e))?;
        let mut chunk = Vec::with_capacity(chunk_bytes);
        (&mut **data)
            .take(chunk_bytes as u64)
            .read_to_end(&mut chunk)
            .await
            .map_err(|e| network(&e))?;
        let n = chunk.len() as u64;
        let done = offset + n >= size;
        let deadline = if done {
            deadlines.last_chunk(size)
        } else {
            deadlines.chunk
        };
        let req = InstallSnapshotRequest {
            vote,
            meta: snapshot.meta.clone(),
            offset,
            data: chunk,
            done,
        };
        let sent = tokio::select! {
            closed = cancel.as_mut() => return Err(closed.into()),
            r = tokio::time::timeout(deadline, net.install_snapshot(req, RPCOption::new(deadline))) => r,
        };
        let failed = match sent {
            Ok(Ok(answer)) => {
                if answer.vote > vote || done {
                    return Ok(SnapshotResponse::new(answer.vote));
                }
                offset += n;
                failures = 0;
                continue;
            }
            Err(_) => {
                let e = network(&io::Error::other(format!(
                    "a snapshot chunk got no answer in {deadline:?}"
                )));
                if done {
                    // The follower may still be installing, or is gone: sending the last
                    // chunk again would only start another install.
                    return Err(e);
                }
                e
            }
            Ok(Err(RPCError::RemoteError(RemoteError {
                source: RaftError::APIError(InstallSnapshotError::SnapshotMismatch(_)),
                ..
            }))) => {
                // The follower holds no start of this snapshot (it restarted, or took another).
                offset = 0;
                failures = 0;
                continue;
            }
            Ok(Err(RPCError::RemoteError(RemoteError {
                target,
                target_node,
                source: RaftError::Fatal(fatal),
            }))) => {
                return Err(RemoteError {
                    target,
                    target_node,
                    source: fatal,
                }
                .into())
            }
            Ok(Err(RPCError::Unreachable(e))) => StreamingError::Unreachable(e),
            Ok(Err(RPCError::Network(e))) => StreamingError::Network(e),
            Ok(Err(RPCError::Timeout(e))) => StreamingError::Timeout(e),
            Ok(Err(RPCError::PayloadTooLarge(e))) => {
                return Err(network(&io::Error::other(e.to_string())))
            }
        };
        failures += 1;
        if failures >= CHUNK_TRIES {
            return Err(failed);
        }
        tokio::select! {
            closed = cancel.as_mut() => return Err(closed.into()),
            () = tokio::time::sleep(RETRY_PAUSE) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::snapshot_data::SnapshotData;
    use openraft::error::{InstallSnapshotError, SnapshotMismatch, Unreachable};
    use openraft::raft::{
        AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotResponse, VoteRequest,
        VoteResponse,
    };
    use openraft::{
        BasicNode, CommittedLeaderId, LogId, SnapshotMeta, SnapshotSegmentId, StoredMembership,
    };

    const MIB: usize = 1 << 20;

    /// A follower that keeps what it is sent, as the chunks' offsets say.
    #[derive(Default)]
    struct Follower {
        received: Vec<u8>,
        /// Every chunk's offset, in the order they came.
        offsets: Vec<u64>,
        /// How long installing takes once the last chunk is in.
        install: Duration,
        /// Chunks at these offsets fail once, as from an unreachable node.
        fail_once: Vec<u64>,
        /// A chunk at this offset is answered once: "send from the start".
        mismatch_once: Option<u64>,
        /// Chunks at this offset are never answered.
        silent: Option<u64>,
        installed: bool,
    }

    impl Follower {
        /// A follower whose install of the whole image takes `install`.
        fn installing_for(install: Duration) -> Self {
            Follower {
                install,
                ..Follower::default()
            }
        }
    }

    fn io_err(what: &str) -> io::Error {
        io::Error::other(what.to_owned())
    }

    impl RaftNetwork<TypeConfig> for Follower {
        async fn append_entries(
            &mut self,
            _: AppendEntriesRequest<TypeConfig>,
            _: RPCOption,
        ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>>
        {
            Err(RPCError::Network(NetworkError::new(&io_err(
                "no appends here",
            ))))
        }

        async fn install_snapshot(
            &mut self,
            rpc: InstallSnapshotRequest<TypeConfig>,
            _: RPCOption,
        ) -> Result<
            InstallSnapshotResponse<NodeId>,
            RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
        > {
            self.offsets.push(rpc.offset);
            if let Some(i) = self.fail_once.iter().position(|&o| o == rpc.offset) {
                self.fail_once.remove(i);
                return Err(RPCError::Unreachable(Unreachable::new(&io_err("gone"))));
            }
            if self.mismatch_once == Some(rpc.offset) {
                self.mismatch_once = None;
                let id = |offset| SnapshotSegmentId {
                    id: rpc.meta.snapshot_id.clone(),
                    offset,
                };
                let mismatch = SnapshotMismatch {
                    expect: id(0),
                    got: id(rpc.offset),
                };
                return Err(RPCError::RemoteError(RemoteError::new(
                    2,
                    RaftError::APIError(InstallSnapshotError::SnapshotMismatch(mismatch)),
                )));
            }
            if self.silent == Some(rpc.offset) {
                std::future::pending::<()>().await;
            }
            let at = usize::try_from(rpc.offset).unwrap();
            if rpc.offset == 0 {
                self.received.clear();
            }
            self.received.truncate(at);
            self.received.extend_from_slice(&rpc.data);
            if rpc.done {
                tokio::time::sleep(self.install).await;
                self.installed = true;
            }
            Ok(InstallSnapshotResponse { vote: rpc.vote })
        }

        async fn vote(
            &mut self,
            _: VoteRequest<NodeId>,
            _: RPCOption,
        ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
            Err(RPCError::Network(NetworkError::new(&io_err(
                "no votes here",
            ))))
        }
    }

    fn snapshot(data: &[u8]) -> Snapshot<TypeConfig> {
        Snapshot {
            meta: SnapshotMeta {
                last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), 9)),
                last_membership: StoredMembership::default(),
                snapshot_id: "1-9".into(),
            },
            snapshot: Box::new(SnapshotData::memory(data.to_vec())),
        }
    }

    fn data() -> Vec<u8> {
        (0..3 * MIB + 7).map(|i| (i % 251) as u8).collect()
    }

    /// 10 s for a chunk; the last one 1 s more for each 256 KiB of the snapshot.
    fn deadlines() -> Deadlines {
        Deadlines {
            chunk: Duration::from_secs(10),
            install_rate_floor: 256 << 10,
        }
    }

    async fn send_to(f: &mut Follower, data: &[u8]) -> Result<SnapshotResponse<NodeId>, SendError> {
        let vote = Vote::new_committed(1, 1);
        send(
            f,
            vote,
            snapshot(data),
            std::future::pending::<ReplicationClosed>(),
            deadlines(),
            MIB,
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_chunk_may_take_as_long_as_installing_the_image_needs() {
        let data = data();
        // 20 s to install: twice a chunk's deadline, within the last chunk's (~22 s).
        let mut f = Follower::installing_for(Duration::from_secs(20));
        assert!(deadlines().last_chunk(data.len() as u64) > f.install);
        assert!(deadlines().chunk < f.install);
        send_to(&mut f, &data).await.unwrap();
        assert!(f.installed);
        assert_eq!(f.received, data);
        let m = MIB as u64;
        assert_eq!(f.offsets, [0, m, 2 * m, 3 * m]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_install_slower_than_the_floor_fails_once_without_starting_over() {
        let data = data();
        let mut f = Follower::installing_for(Duration::from_secs(1_000));
        assert!(send_to(&mut f, &data).await.is_err());
        // Given up on once: neither the last chunk nor the whole sent again by this send.
        let m = MIB as u64;
        assert_eq!(f.offsets, [0, m, 2 * m, 3 * m]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_chunk_is_sent_again_and_a_mismatch_starts_over() {
        let data = data();
        let m = MIB as u64;
        let mut f = Follower {
            fail_once: vec![m],
            mismatch_once: Some(2 * m),
            ..Follower::default()
        };
        send_to(&mut f, &data).await.unwrap();
        assert_eq!(f.received, data);
        assert_eq!(f.offsets, [0, m, m, 2 * m, 0, m, 2 * m, 3 * m]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_that_stops_answering_is_given_up_within_its_chunk_deadlines() {
        let data = data();
        let mut f = Follower {
            silent: Some(MIB as u64),
            ..Follower::default()
        };
        let start = tokio::time::Instant::now();
        assert!(send_to(&mut f, &data).await.is_err());
        let tries = u32::try_from(f.offsets.iter().filter(|&&o| o == MIB as u64).count()).unwrap();
        assert_eq!(tries, CHUNK_TRIES);
        assert!(start.elapsed() < deadlines().chunk * CHUNK_TRIES + Duration::from_secs(5));
        assert!(!f.installed);
    }

    #[test]
    fn a_group_counts_as_sending_until_its_last_send_ends() {
        let sending = std::sync::Arc::new(Sending::default());
        assert!(!sending.any(7));
        let first = sending.begin(7);
        let second = sending.begin(7);
        assert!(sending.any(7) && !sending.any(8));
        drop(first);
        assert!(sending.any(7), "one send still runs");
        drop(second);
        assert!(!sending.any(7));
    }
}
