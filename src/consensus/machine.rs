//! The state machine of a real group: openraft's side of it, with the application's side behind
//! [`Applier`].
//!
//! Why a seam here: openraft's traits are async and speak its own types; the JetStream side
//! (a stream's worker on a store thread, the meta group's assignment table) wants committed
//! commands in order and nothing else. [`ReplicatedMachine`] keeps what openraft must know —
//! the last applied log id and the last membership — and hands every committed normal entry's
//! bytes to the applier, waiting until it says they are applied.
//!
//! Snapshots (`issue 15`): a group whose machine has a [`Snapshots`] place asks openraft for a
//! snapshot once it has applied [`SNAPSHOT_AFTER_ENTRIES`] entries carrying at least as many
//! bytes as its last snapshot held (so writing snapshots costs at most as much again as the
//! log it replaces, whatever the state's size). The applier writes the image of its state in
//! order with its applies, straight into a new snapshot file (sealed a frame at a time: an
//! image may be larger than memory); the file is put in place before openraft purges the log
//! behind it, a follower too far behind is sent it a frame at a time and writes its own file
//! as the chunks come, and a restart installs it by reading it back (again a frame at a
//! time) and applies only the entries after it. Every group of a node has a place — the meta
//! group's image is its assignment table (`server/jetstream/cluster/meta_image.rs`) — and a
//! group may also be asked for one from outside, when its entries keep the node's log from
//! shrinking (`server/jetstream/cluster/reclaim.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};

use super::mux::MuxNode;
use super::snapshot_data::{Inner, SnapshotData};
use super::snapshot_file::{SnapshotFile, SnapshotReader, SnapshotWriter};
use super::{Applied, GroupId, NodeId, TypeConfig};

/// A future an applier returns.
pub type ApplyFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where an applier writes its image: a new snapshot file, sealed a frame at a time.
pub type ImageSink = SnapshotWriter;

/// Where an applier reads an image from: a stored snapshot, opened a frame at a time.
pub type ImageSource = SnapshotReader;

/// Where an applier's image comes: the sink it was written to, or why there is none.
pub type ImageFuture = tokio::sync::oneshot::Receiver<Result<ImageSink, String>>;

/// The future of installing an image.
pub type InstallFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Entries applied since the last snapshot before another is asked for (with at least as
/// many bytes as that snapshot held).
pub const SNAPSHOT_AFTER_ENTRIES: u64 = 1024;

/// The application's side of a group: committed commands, in log order, exactly once per
/// process life (after a restart, from the first entry again).
pub trait Applier: Send + Sync + 'static {
    /// Applies `commands` (each one committed entry's bytes, in log order; `index` is the
    /// log index of the first). The future resolves once they are applied.
    fn apply(&self, index: u64, commands: Vec<bytes::Bytes>) -> ApplyFuture;

    /// Writes the state after every command applied so far into `sink`. The request is made
    /// when this is called (in order with the applies before and after it); the future gives
    /// the sink back once the image is in it. An image may be larger than memory: write it
    /// as it is read, never whole.
    fn image(&self, sink: ImageSink) -> ImageFuture {
        drop(sink);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = tx.send(Err("this group keeps no snapshots".to_owned()));
        rx
    }

    /// Replaces the state with the image `source` reads (from [`Applier::image`], possibly
    /// another node's).
    fn install(&self, source: ImageSource) -> InstallFuture {
        drop(source);
        Box::pin(async { Err("this group keeps no snapshots".to_owned()) })
    }
}

/// Where a group's snapshots go, and how to ask its Raft for one.
pub struct Snapshots {
    file: Arc<SnapshotFile>,
    node: Weak<MuxNode>,
    group: GroupId,
}

impl Snapshots {
    /// Snapshots of `group` (hosted by `node`) kept in `file`.
    pub fn new(file: SnapshotFile, node: Weak<MuxNode>, group: GroupId) -> Self {
        Snapshots {
            file: Arc::new(file),
            node,
            group,
        }
    }

    fn trigger(&self) {
        let Some(node) = self.node.upgrade() else {
            return;
        };
        // Not while a follower is being sent the current one (`snapshot_send.rs`): asked
        // again later by the caller's count.
        if node.sending_snapshot(self.group) {
            return;
        }
        let Some(raft) = node.group(self.group) else {
            return;
        };
        tokio::spawn(async move {
            let _ = raft.trigger().snapshot().await;
        });
    }
}

fn storage_err(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string())).into()
}

/// Runs blocking snapshot file work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, StorageError<NodeId>> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(storage_err)?
        .map_err(storage_err)
}

/// Opens a group's stored snapshot (its meta read and authenticated; its bytes are read as
/// they are asked for).
async fn open_stored(
    file: &Arc<SnapshotFile>,
) -> Result<Option<SnapshotReader>, StorageError<NodeId>> {
    let file = Arc::clone(file);
    blocking(move || file.open()).await
}

/// The meta of the snapshot a new group starts from when it takes over a state that already
/// exists (an R1 stream becoming replicated): as if the group had been formed with `members`
/// by `first` and compacted at once — its log purged through index 0.
fn seed_meta(first: NodeId, members: &[(NodeId, String)]) -> SnapshotMeta<NodeId, BasicNode> {
    let at = LogId::new(openraft::CommittedLeaderId::new(0, first), 0);
    let voters: std::collections::BTreeSet<NodeId> = members.iter().map(|(id, _)| *id).collect();
    let nodes: std::collections::BTreeMap<NodeId, BasicNode> = members
        .iter()
        .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
        .collect();
    let membership = openraft::Membership::new(vec![voters], nodes);
    SnapshotMeta {
        last_log_id: Some(at),
        last_membership: StoredMembership::new(Some(at), membership),
        snapshot_id: "0-seed".to_owned(),
    }
}

/// Puts the image written into `image` in place as the snapshot a new group starts from when
/// it takes over a state that already exists (see `seed_meta`). The node that writes it
/// starts the group with that membership and this state (openraft purges the log up to a
/// stored snapshot at start); the other members start empty, vote, and are sent the snapshot
/// by the leader, as a follower too far behind is. Durable when this returns.
///
/// # Errors
/// I/O.
pub fn write_seed(
    image: SnapshotWriter,
    first: NodeId,
    members: &[(NodeId, String)],
) -> std::io::Result<()> {
    image.finish(&seed_meta(first, members)).map(|_| ())
}

/// openraft's state machine over an [`Applier`].
pub struct ReplicatedMachine {
    applier: Arc<dyn Applier>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    applied: u64,
    snapshots: Option<Snapshots>,
    /// The stored snapshot was looked for (at the first `applied_state`).
    loaded: bool,
    /// Entries and bytes applied since the last snapshot, and that snapshot's size (the
    /// state's bytes in it: set by the builder once a snapshot it built is stored — before,
    /// it stayed at the size known at start, 0 for a new group, so a group of a large state
    /// took a snapshot of all of it every [`SNAPSHOT_AFTER_ENTRIES`] entries, however small).
    since_entries: u64,
    since_bytes: u64,
    last_size: Arc<AtomicU64>,
    /// Entries since the last snapshot at which to ask for one (again).
    ask_at: u64,
    snapshots_taken: u64,
    /// Snapshots asked for by the counts.
    snapshots_asked: u64,
}

impl ReplicatedMachine {
    /// A machine that has applied nothing and hands what commits to `applier`.
    pub fn new(applier: Arc<dyn Applier>) -> Self {
        ReplicatedMachine {
            applier,
            last_applied: None,
            membership: StoredMembership::default(),
            applied: 0,
            snapshots: None,
            loaded: false,
            since_entries: 0,
            since_bytes: 0,
            last_size: Arc::new(AtomicU64::new(0)),
            ask_at: SNAPSHOT_AFTER_ENTRIES,
            snapshots_taken: 0,
            snapshots_asked: 0,
        }
    }

    /// The machine takes snapshots into `snapshots` and starts from the one stored there.
    pub fn with_snapshots(mut self, snapshots: Snapshots) -> Self {
        self.snapshots = Some(snapshots);
        self
    }

    fn count(&mut self, entries: u64, bytes: u64) {
        let Some(s) = &self.snapshots else { return };
        self.since_entries += entries;
        self.since_bytes += bytes;
        let last_size = self.last_size.load(Ordering::Relaxed);
        if self.since_entries >= self.ask_at && self.since_bytes >= last_size {
            // Asked again every so many entries until one is built (a request can be
            // dropped, say while the group is still starting).
            self.ask_at = self.since_entries + SNAPSHOT_AFTER_ENTRIES;
            self.snapshots_asked += 1;
            s.trigger();
        }
    }

    /// Counts from zero again; `size`: the state's bytes in the snapshot now stored, when
    /// known (`None`: one being built, whose builder tells its size).
    fn reset_counts(&mut self, size: Option<u64>) {
        self.since_entries = 0;
        self.since_bytes = 0;
        if let Some(size) = size {
            self.last_size.store(size, Ordering::Relaxed);
        }
        self.ask_at = SNAPSHOT_AFTER_ENTRIES;
    }
}

/// Builds one snapshot: the applier's image, asked for when the builder was made.
pub struct ImageBuilder {
    image: Result<ImageFuture, String>,
    meta: SnapshotMeta<NodeId, BasicNode>,
    file: Option<Arc<SnapshotFile>>,
    /// Where the machine keeps its last snapshot's size (the state's bytes).
    built_size: Arc<AtomicU64>,
}

impl RaftSnapshotBuilder<TypeConfig> for ImageBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let Some(file) = self.file.clone() else {
            return Err(storage_err("this group keeps no snapshots"));
        };
        let image = std::mem::replace(&mut self.image, Err("built already".to_owned()));
        let sink = image
            .map_err(storage_err)?
            .await
            .map_err(|_| storage_err("the state machine stopped"))?
            .map_err(storage_err)?;
        let meta = self.meta.clone();
        let bytes = blocking(move || sink.finish(&meta)).await?;
        tracing::debug!(
            index = self.meta.last_log_id.map(|l| l.index),
            bytes,
            "a group's snapshot is stored"
        );
        let stored = open_stored(&file)
            .await?
            .ok_or_else(|| storage_err("the snapshot just stored is gone"))?;
        self.built_size.store(stored.data_len(), Ordering::Relaxed);
        Ok(Snapshot {
            meta: self.meta.clone(),
            snapshot: Box::new(SnapshotData::stored(stored)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for ReplicatedMachine {
    type SnapshotBuilder = ImageBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        if !self.loaded {
            // A start: the stored snapshot (checked when the log opened) is the state to
            // begin from; openraft then applies what the log holds after it.
            self.loaded = true;
            if let Some(s) = &self.snapshots {
                if let Some(stored) = open_stored(&s.file).await? {
                    let meta = stored.meta().clone();
                    let size = stored.data_len();
                    self.applier.install(stored).await.map_err(storage_err)?;
                    self.last_applied = meta.last_log_id;
                    self.membership = meta.last_membership;
                    self.reset_counts(Some(size));
                }
            }
        }
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
        let (mut entries_seen, mut bytes) = (0u64, 0u64);
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            entries_seen += 1;
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(c) if c.is_nudge() => {}
                EntryPayload::Normal(c) => {
                    first.get_or_insert(entry.log_id.index);
                    bytes += c.0.len() as u64;
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
        self.count(entries_seen, bytes);
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshots_taken += 1;
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id: format!(
                "{}-{}",
                self.last_applied.map_or(0, |l| l.index),
                self.snapshots_taken
            ),
        };
        let file = self.snapshots.as_ref().map(|s| Arc::clone(&s.file));
        // Asked now, so the image is of exactly what was applied up to `last_applied`.
        let image = match &file {
            Some(f) => f
                .writer()
                .map(|sink| self.applier.image(sink))
                .map_err(|e| e.to_string()),
            None => Err("this group keeps no snapshots".to_owned()),
        };
        // The next request waits for as much log again as this snapshot will hold: the
        // builder tells its size once it is stored (until then, the last one's rules).
        self.reset_counts(None);
        ImageBuilder {
            image,
            meta,
            file,
            built_size: Arc::clone(&self.last_size),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<SnapshotData>, StorageError<NodeId>> {
        let Some(s) = &self.snapshots else {
            return Err(storage_err("this group keeps no snapshots"));
        };
        let file = Arc::clone(&s.file);
        let writer = blocking(move || file.receiver()).await?;
        Ok(Box::new(SnapshotData::receiving(writer)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError<NodeId>> {
        let Some(s) = &self.snapshots else {
            return Err(storage_err("this group keeps no snapshots"));
        };
        // Stored first: once the state is replaced, a restart must find this snapshot.
        let file = Arc::clone(&s.file);
        let m = meta.clone();
        blocking(move || {
            // What openraft received into; anything else (its storage tests hand over
            // another snapshot's data) is copied into a new file first.
            let w = match snapshot.into_inner() {
                Inner::Receiving(w) => w,
                Inner::Memory(c) => {
                    let mut w = file.receiver()?;
                    std::io::Write::write_all(&mut w, c.get_ref())?;
                    w
                }
                Inner::Stored(mut r) => {
                    let mut w = file.receiver()?;
                    std::io::copy(&mut r, &mut w)?;
                    w
                }
            };
            w.finish(&m)
        })
        .await?;
        let stored = open_stored(&s.file)
            .await?
            .ok_or_else(|| storage_err("the snapshot just stored is gone"))?;
        let size = stored.data_len();
        self.applier.install(stored).await.map_err(storage_err)?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.reset_counts(Some(size));
        tracing::info!(
            index = meta.last_log_id.map(|l| l.index),
            bytes = size,
            "a group's state was replaced by its leader's snapshot"
        );
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let Some(s) = &self.snapshots else {
            return Ok(None);
        };
        Ok(open_stored(&s.file).await?.map(|stored| Snapshot {
            meta: stored.meta().clone(),
            snapshot: Box::new(SnapshotData::stored(stored)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::crypto::{Key32, SealKey};

    /// A state of `size` bytes.
    struct SizedState(usize);

    impl Applier for SizedState {
        fn apply(&self, _index: u64, _commands: Vec<bytes::Bytes>) -> ApplyFuture {
            Box::pin(async {})
        }

        fn image(&self, mut sink: ImageSink) -> ImageFuture {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let written = sink
                .write_all(&vec![7u8; self.0])
                .map(|()| sink)
                .map_err(|e| e.to_string());
            let _ = tx.send(written);
            rx
        }
    }

    /// A group's snapshots follow its state's size: before the first, the entry count alone
    /// asks; once one of a large state is stored, small entries do not ask again until they
    /// carry as many bytes as it held (before, the builder never told the size, and a group
    /// of a large state snapshotted all of it every 1,024 entries).
    #[tokio::test]
    async fn a_snapshot_is_asked_for_again_only_after_as_many_bytes_as_the_last_one_held() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = SealKey::new(Key32::from_fn(|k| k.fill(3)));
        let file = SnapshotFile::new(dir.path(), [1; 8], key);
        let mut m = ReplicatedMachine::new(Arc::new(SizedState(300_000)))
            .with_snapshots(Snapshots::new(file, Weak::new(), 1));
        m.count(SNAPSHOT_AFTER_ENTRIES, 100);
        assert_eq!(m.snapshots_asked, 1, "nothing stored yet: the count asks");
        let mut builder = m.get_snapshot_builder().await;
        let built = builder.build_snapshot().await.expect("built");
        assert_eq!(built.meta.snapshot_id, "0-1");
        m.count(SNAPSHOT_AFTER_ENTRIES * 8, 8 * 100);
        assert_eq!(m.snapshots_asked, 1, "small entries: not yet");
        m.count(1, 300_000);
        assert_eq!(m.snapshots_asked, 2, "as many bytes as the snapshot held");
    }
}
