//! The state machine of a real group: openraft's side of it, with the application's side behind
//! [`Applier`].
//!
//! Why a seam here: openraft's traits are async and speak its own types; the JetStream side
//! (a stream's worker on a store thread, the meta group's assignment table) wants committed
//! commands in order and nothing else. [`ReplicatedMachine`] keeps what openraft must know —
//! the last applied log id and the last membership — and hands every committed normal entry's
//! bytes to the applier, waiting until it says they are applied.
//!
//! What is deliberately not here yet: snapshots. Groups run with openraft's snapshot policy
//! `Never` ([`super::timing::raft_config`]), so logs are never purged and a node that restarts
//! rebuilds its state by applying its group's log from the start: the applied position is kept
//! in memory only, so after a restart openraft applies every committed entry again, and the
//! appliers start from an empty state to match (see `docs/cluster.md`).

use std::future::Future;
use std::io::Cursor;
use std::pin::Pin;
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};

use super::{Applied, NodeId, TypeConfig};

/// A future an applier returns.
pub type ApplyFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The application's side of a group: committed commands, in log order, exactly once per
/// process life (after a restart, from the first entry again).
pub trait Applier: Send + Sync + 'static {
    /// Applies `commands` (each one committed entry's bytes, in log order; `index` is the
    /// log index of the first). The future resolves once they are applied.
    fn apply(&self, index: u64, commands: Vec<bytes::Bytes>) -> ApplyFuture;
}

/// openraft's state machine over an [`Applier`].
pub struct ReplicatedMachine {
    applier: Arc<dyn Applier>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    applied: u64,
}

impl ReplicatedMachine {
    /// A machine that has applied nothing and hands what commits to `applier`.
    pub fn new(applier: Arc<dyn Applier>) -> Self {
        ReplicatedMachine {
            applier,
            last_applied: None,
            membership: StoredMembership::default(),
            applied: 0,
        }
    }
}

fn no_snapshots() -> StorageError<NodeId> {
    StorageIOError::read_snapshot(
        None,
        &std::io::Error::other("this group keeps no snapshots (policy Never)"),
    )
    .into()
}

/// Snapshots are not built (see the module docs); openraft never asks with policy `Never`.
pub struct NoSnapshots;

impl RaftSnapshotBuilder<TypeConfig> for NoSnapshots {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        Err(no_snapshots())
    }
}

impl RaftStateMachine<TypeConfig> for ReplicatedMachine {
    type SnapshotBuilder = NoSnapshots;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut answers = Vec::new();
        let mut commands = Vec::new();
        let mut first = None;
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(c) if c.is_nudge() => {}
                EntryPayload::Normal(c) => {
                    first.get_or_insert(entry.log_id.index);
                    commands.push(c.0);
                    self.applied += 1;
                }
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m);
                }
            }
            answers.push(Applied {
                applied: self.applied,
            });
        }
        if let Some(index) = first {
            self.applier.apply(index, commands).await;
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        NoSnapshots
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Err(no_snapshots())
    }

    async fn install_snapshot(
        &mut self,
        _meta: &SnapshotMeta<NodeId, BasicNode>,
        _snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        Err(no_snapshots())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(None)
    }
}
