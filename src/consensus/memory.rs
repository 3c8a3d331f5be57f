//! A group's log and state machine kept in memory.
//!
//! The log is a map from index to entry behind one mutex, shared with the readers openraft's
//! replication tasks hold; the state machine counts the commands it applies and snapshots that
//! count with the membership. It is what the transport tests and the idle-cost measurement run
//! on, and openraft's storage suite checks it (the test below), so the sealed log that replaces
//! it for stored groups is held to the same contract.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};

use super::snapshot_data::{Inner, SnapshotData};
use super::{Applied, NodeId, TypeConfig};

#[derive(Default)]
struct LogInner {
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
}

/// A group's Raft log in memory. Clones share the same log (they are its readers).
#[derive(Clone, Default)]
pub struct MemLog {
    inner: Arc<Mutex<LogInner>>,
}

impl MemLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        // A panic while holding the lock leaves whole entries only (every mutation is one map
        // operation), so the data is usable after a poisoning.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .lock()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = MemLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = self.lock();
        let last = inner.entries.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: last.or(inner.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.lock().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        self.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut inner = self.lock();
            for entry in entries {
                inner.entries.insert(entry.log_id.index, entry);
            }
        }
        // In memory, written is flushed.
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        let _removed = inner.entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.lock();
        let kept = inner.entries.split_off(&(log_id.index + 1));
        inner.entries = kept;
        inner.purged = Some(log_id);
        Ok(())
    }
}

/// What a snapshot of the counting state machine holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct CountState {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    applied: u64,
}

#[derive(Default)]
struct MachineInner {
    state: CountState,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
    snapshots_built: u64,
    /// How long installing a snapshot takes (tests of a large stream's slow install).
    install_takes: std::time::Duration,
}

/// The bytes of a counting machine's snapshot that has applied `applied` commands.
#[cfg(test)]
pub(crate) fn count_snapshot(applied: u64) -> Vec<u8> {
    serde_json::to_vec(&CountState {
        applied,
        ..CountState::default()
    })
    .unwrap_or_default()
}

/// A state machine that counts the commands it applies. Clones share it.
#[derive(Clone, Default)]
pub struct CountingMachine {
    inner: Arc<Mutex<MachineInner>>,
}

impl CountingMachine {
    /// A machine that has applied nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many commands were applied.
    pub fn applied(&self) -> u64 {
        self.lock().state.applied
    }

    /// Makes every snapshot install take `d` (as a large stream's does).
    pub fn installs_take(self, d: std::time::Duration) -> Self {
        self.lock().install_takes = d;
        self
    }

    fn lock(&self) -> MutexGuard<'_, MachineInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

// StorageError is openraft's (its traits return it); its size is not ours to choose.
#[allow(clippy::result_large_err)]
fn encode(state: &CountState) -> Result<Vec<u8>, StorageError<NodeId>> {
    serde_json::to_vec(state).map_err(|e| StorageIOError::write_state_machine(&e).into())
}

impl RaftSnapshotBuilder<TypeConfig> for CountingMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let mut inner = self.lock();
        let data = encode(&inner.state)?;
        inner.snapshots_built += 1;
        let snapshot_id = match inner.state.last_applied {
            Some(id) => format!("{}-{}-{}", id.leader_id, id.index, inner.snapshots_built),
            None => format!("--{}", inner.snapshots_built),
        };
        let meta = SnapshotMeta {
            last_log_id: inner.state.last_applied,
            last_membership: inner.state.membership.clone(),
            snapshot_id,
        };
        inner.snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(SnapshotData::memory(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for CountingMachine {
    type SnapshotBuilder = CountingMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let inner = self.lock();
        Ok((inner.state.last_applied, inner.state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock();
        let mut answers = Vec::new();
        for entry in entries {
            inner.state.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(_) => inner.state.applied += 1,
                EntryPayload::Membership(m) => {
                    inner.state.membership = StoredMembership::new(Some(entry.log_id), m);
                }
            }
            answers.push(Applied {
                applied: inner.state.applied,
            });
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<SnapshotData>, StorageError<NodeId>> {
        Ok(Box::new(SnapshotData::memory(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError<NodeId>> {
        let takes = self.lock().install_takes;
        if !takes.is_zero() {
            tokio::time::sleep(takes).await;
        }
        let data = match snapshot.into_inner() {
            Inner::Memory(c) => c.into_inner(),
            _ => {
                let e = std::io::Error::other("the in-memory store takes snapshots in memory only");
                return Err(StorageIOError::read_snapshot(Some(meta.signature()), &e).into());
            }
        };
        let state: CountState = serde_json::from_slice(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut inner = self.lock();
        inner.state = CountState {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
            applied: state.applied,
        };
        inner.snapshot = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self.lock().snapshot.clone().map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(SnapshotData::memory(data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::{StoreBuilder, Suite};

    struct Builder;

    impl StoreBuilder<TypeConfig, MemLog, CountingMachine> for Builder {
        async fn build(&self) -> Result<((), MemLog, CountingMachine), StorageError<NodeId>> {
            Ok(((), MemLog::new(), CountingMachine::new()))
        }
    }

    /// openraft's own storage contract: votes, appends, truncation, purge, snapshots.
    #[test]
    #[allow(clippy::result_large_err)]
    fn openraft_storage_suite_passes() -> Result<(), StorageError<NodeId>> {
        Suite::test_all(Builder)
    }
}
