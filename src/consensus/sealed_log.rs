//! One node's Raft log, shared by every group it hosts, sealed at rest.
//!
//! Why one log: a node carries a group per replicated stream. A file per group would cost an
//! fsync per group per write window; here every group's records go to the same append-only
//! segment files, and one `fdatasync` completes the flush of everything written since the last
//! one — fsyncs do not grow with the number of groups (the writer thread's loop below).
//!
//! Record (little-endian): `len u32 | pseudonym [8] | nonce ‖ ciphertext ‖ tag`, `len` counting
//! what follows it. The pseudonym is HMAC-SHA256(name key, group id)[..8], so the disk shows no
//! group id, stream or account name, only which records belong together. The body is sealed
//! with the group's own key (crypto-erasing a tenant = dropping its groups' keys; their records
//! then never open again and replay skips them), with the record's segment and offset in the
//! associated data, so a record moved, copied or replayed elsewhere does not open. The body is
//! one [`Record`]: a batch of entries, a vote, a truncation or a purge.
//!
//! Files are `<segment id, 16 hex digits>.rlog`. A segment is closed at [`SEGMENT_BYTES`]; the
//! next one starts with a checkpoint of every group's vote and purge point, so older segments
//! are needed only for the entries they hold, and the oldest segment is deleted once none of
//! its entries is live (oldest first, so a truncation record is never lost while entries it
//! cut remain on disk).
//!
//! Opening replays every segment: a record cut short at the end of the newest segment is a
//! torn write of a crash (never acknowledged: the flush that would have acknowledged it did
//! not finish) and is cut off; anything else that fails — a bad length, a record that does not
//! authenticate — is [`LogError::Corrupt`], and the node must not vote or serve from this log
//! until repaired.
//!
//! A failed write or `fdatasync` fails the log for good: every flush it covered reports the
//! error and every later write is refused (after a failed fsync the page cache cannot be
//! trusted to hold what was written), so the node stops acknowledging instead of guessing.
//!
//! Lock order: `Inner` (one mutex) is never held across I/O except the writer's file rollover;
//! the writer takes it only to swap out what is pending. A group's [`KeyRing`] (a leaf) is
//! read inside it to seal a record.
//!
//! Key rotation (issue 17): a group may hold several keys ([`SealedLog::add_key`]): records
//! carry no key generation, so a record is opened with whichever of the group's keys
//! authenticates it, newest first. Once the older keys are dropped
//! ([`SealedLog::drop_older_keys`]), the group's records before the new key's first one are
//! dead and skipped at replay ([`Hosted::since`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use hmac::{Hmac, Mac};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::sync::{oneshot, Semaphore};

use super::extent::{self, Extent, ExtentFile, Recorded, Votes, EXTENT_FILE};
use super::key_ring::KeyRing;
use super::snapshot_file::{self, SnapshotFile, SNAPSHOT_DIR};
use super::{codec, GroupId, NodeId, TypeConfig};
use crate::crypto::seal::{NONCE_LEN, OVERHEAD};
use crate::crypto::{Key32, SealKey};

/// A segment is closed once it holds this many bytes.
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes accepted but not yet written; an append beyond it waits for the writer.
pub const PENDING_BYTES: usize = 32 * 1024 * 1024;
/// Written entries kept in memory, all groups together (the oldest written go first). A
/// leader sends each new entry to every follower and then applies it: without this, each of
/// those reads opened the record again from disk — the largest CPU cost of a replicated
/// publish on the leader (docs/PERFORMANCE.md "Replicated JetStream"). Entries not yet
/// written are always in memory, bounded by [`PENDING_BYTES`].
pub const CACHED_BYTES: usize = 32 * 1024 * 1024;
/// Bytes synced between two calls that drop the segments' clean pages from the page cache.
const DROP_SYNCED_EVERY: u64 = 4 * 1024 * 1024;
/// The largest record body (a batch of entries larger than this is refused).
pub const MAX_RECORD: usize = 16 * 1024 * 1024;
/// Where [`SealedLog::set_aside_damaged`] moves a log that failed authentication.
pub const DAMAGED_DIR: &str = "damaged";
const HEADER: usize = 4 + 8;
const AAD_TAG: &[u8] = b"sealstream raft log v1";

/// Why the log could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file system refused.
    #[error("raft log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A record that is not a torn tail failed its length or authentication check.
    #[error("raft log {path}: record at offset {offset} is corrupt ({why})")]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// What was wrong.
        why: &'static str,
    },
}

/// What one record says.
#[derive(Serialize, Deserialize)]
enum Record {
    Entries(Vec<Entry<TypeConfig>>),
    Vote(Vote<NodeId>),
    /// Entries from this index on are gone.
    Truncate(u64),
    /// Entries up to and including this id are gone.
    Purge(LogId<NodeId>),
    /// A group's state at the start of a segment.
    Checkpoint {
        vote: Option<Vote<NodeId>>,
        purged: Option<LogId<NodeId>>,
    },
    /// The group was erased here: its entries, vote and purge point before this are gone
    /// (written by [`SealedLog::erase_group`], so that a group that later comes back to this
    /// node does not replay its earlier incarnation's log).
    Reset,
}

/// What keeps a log's oldest segment on disk ([`SealedLog::pinning`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Pinned {
    /// The closed segments' bytes (about: each is closed at its size bound).
    pub held_bytes: u64,
    /// The groups with live entries in the oldest segment.
    pub groups: Vec<PinningGroup>,
}

/// A group with live entries in the log's oldest segment.
#[derive(Debug, PartialEq, Eq)]
pub struct PinningGroup {
    /// The group (its slot in the log).
    pub group: GroupId,
    /// Its last entry there: purging through it frees that segment of this group.
    pub through: u64,
    /// The size of its stored snapshot (0: none).
    pub snapshot_bytes: u64,
}

/// Where a record sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    segment: u64,
    offset: u64,
    len: u32,
}

#[derive(Default)]
struct GroupState {
    vote: Option<Vote<NodeId>>,
    purged: Option<LogId<NodeId>>,
    /// Every live entry: its id and the record holding it.
    entries: BTreeMap<u64, (LogId<NodeId>, Loc)>,
    /// Entries whose record is not written yet, and recently written ones (at most
    /// [`CACHED_BYTES`] of those on the node): reads are served from here.
    cached: BTreeMap<u64, Entry<TypeConfig>>,
}

struct GroupKeys {
    pseudonym: [u8; 8],
    /// The newest seals; older ones (a key rotation not finished) still open.
    ring: KeyRing,
    /// The group's records before this place were sealed with keys it no longer holds
    /// (dropped at the end of a key rotation): they are dead, skipped when replayed.
    since: Option<LogPosition>,
}

/// A place in the log: a segment and an offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LogPosition {
    /// The segment's id.
    pub segment: u64,
    /// The record's first byte in it.
    pub offset: u64,
}

impl Loc {
    fn position(&self) -> LogPosition {
        LogPosition {
            segment: self.segment,
            offset: self.offset,
        }
    }
}

/// A group whose records the log is opened for: its slot, its keys (newest first) and,
/// after a key rotation finished, where the records under those keys start.
pub struct Hosted {
    /// Its slot (the group id its records are kept under).
    pub group: GroupId,
    /// Its keys, newest first.
    pub keys: Vec<SealKey>,
    /// Its records before this place are skipped (sealed with keys it dropped).
    pub since: Option<LogPosition>,
}

struct Pending {
    segment: u64,
    bytes: Vec<u8>,
    /// (group, record, indexes) whose `cached` copies can go once written.
    written: Vec<(GroupId, Loc, Vec<u64>)>,
    flushed: Vec<LogFlushed<TypeConfig>>,
    durable: Vec<oneshot::Sender<io::Result<()>>>,
}

struct Inner {
    dir: PathBuf,
    groups: HashMap<GroupId, GroupState>,
    keys: HashMap<GroupId, GroupKeys>,
    /// segment id -> live entries it holds.
    segment_refs: BTreeMap<u64, usize>,
    segment: u64,
    end: u64,
    pending: Vec<Pending>,
    pending_bytes: usize,
    failed: Option<String>,
    closed: bool,
    segment_bytes: u64,
    /// The newest segment the writer has written and synced something to (so its head
    /// checkpoint is durable: it is the first thing queued for a segment).
    written_segment: u64,
    /// Written entries still cached, oldest first: (group, index, record, size).
    recent: VecDeque<(GroupId, u64, Loc, usize)>,
    /// Their sizes summed (entries removed since by a truncation or purge count until they
    /// reach the front).
    recent_bytes: usize,
    /// [`CACHED_BYTES`] (a test lowers it).
    cached_cap: usize,
    /// A group's vote changed since the writer last recorded the votes ([`extent`]).
    votes_changed: bool,
    /// What replaying the log at opening found (records opened, skipped, not ours).
    replayed: LogAudit,
}

/// What [`SealedLog::verify`] found in a log that authenticates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogAudit {
    /// Segment files read.
    pub segments: u64,
    /// Groups whose keys were given.
    pub groups: u64,
    /// Of those, groups holding more than one key (a key rotation under way).
    pub groups_rotating: u64,
    /// Records authenticated with their group's keys.
    pub records: u64,
    /// Records of groups whose keys were not given (erased, or gone from this node): their
    /// keys no longer exist here, so they open for nobody.
    pub other_records: u64,
    /// Records of given groups from before a finished key rotation (`since`): sealed with
    /// keys the group dropped, not opened.
    pub dropped_key_records: u64,
    /// Records authenticated, by the slot their group's records are kept under (the audit
    /// names the groups: `audit::raft_records`).
    #[serde(skip)]
    pub records_by_slot: BTreeMap<GroupId, u64>,
}

struct Shared {
    inner: Mutex<Inner>,
    wake: Condvar,
    room: Semaphore,
    name_key: Key32,
    /// `fdatasync`s made and records written, for monitoring and the benchmarks.
    syncs: AtomicU64,
    records: AtomicU64,
}

/// The node's log. Cheap to clone; the writer thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct SealedLog {
    shared: Arc<Shared>,
    _writer: Arc<WriterGuard>,
}

struct WriterGuard {
    shared: Arc<Shared>,
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        lock(&self.shared).closed = true;
        self.shared.wake.notify_all();
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Inner> {
    shared.inner.lock().unwrap_or_else(|p| p.into_inner())
}

fn pseudonym(name_key: &Key32, group: GroupId) -> [u8; 8] {
    let mut mac = match <Hmac<Sha256> as Mac>::new_from_slice(name_key.expose()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC takes a key of any length"),
    };
    mac.update(b"sealstream raft group v1");
    mac.update(&group.to_le_bytes());
    let out = mac.finalize().into_bytes();
    let mut p = [0u8; 8];
    p.copy_from_slice(&out[..8]);
    p
}

/// Every group whose log was purged must have its snapshot, authentic and reaching at least
/// the purge point: a snapshot deleted, damaged or put back from an earlier day (rolled back)
/// leaves entries nobody holds, so the log is reported corrupt and the node repairs.
fn check_snapshots(inner: &Inner, read: &mut dyn FnMut(u64)) -> Result<(), LogError> {
    for (group, keys) in &inner.keys {
        let purged = inner.groups.get(group).and_then(|s| s.purged);
        let path = snapshot_file::path_of(&inner.dir, &keys.pseudonym);
        let corrupt = |why| LogError::Corrupt {
            path: path.clone(),
            offset: 0,
            why,
        };
        if !path.exists() {
            if purged.is_some() {
                return Err(corrupt("a purged group's snapshot is missing"));
            }
            continue;
        }
        let file = SnapshotFile::with_ring(&inner.dir, keys.pseudonym, keys.ring.clone());
        let stored = file
            .verify_counting(read)
            .map_err(|_| corrupt("a snapshot fails authentication"))?;
        let reaches = stored.and_then(|m| m.last_log_id);
        if let Some(p) = purged {
            if reaches.is_none_or(|r| r.index < p.index) {
                return Err(corrupt(
                    "a snapshot is older than the log it replaced (rolled back)",
                ));
            }
        }
    }
    Ok(())
}

fn aad(segment: u64, offset: u64, pseudonym: &[u8; 8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(AAD_TAG.len() + 24);
    aad.extend_from_slice(AAD_TAG);
    aad.extend_from_slice(&segment.to_le_bytes());
    aad.extend_from_slice(&offset.to_le_bytes());
    aad.extend_from_slice(pseudonym);
    aad
}

/// The file name of segment `segment`.
pub fn segment_file(segment: u64) -> String {
    format!("{segment:016x}.rlog")
}

fn segment_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(segment_file(segment))
}

fn io_err(path: &Path, source: io::Error) -> LogError {
    LogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl SealedLog {
    /// Opens (or creates) the log in `dir` for the groups whose keys are given, replaying what
    /// is there. Records of groups not given are skipped (erased, or not this node's any more).
    pub fn open(
        dir: &Path,
        name_key: Key32,
        groups: Vec<(GroupId, SealKey)>,
    ) -> Result<Self, LogError> {
        Self::open_sized(dir, name_key, groups, SEGMENT_BYTES)
    }

    /// [`SealedLog::open`] with another segment size (tests use small ones to roll over).
    pub fn open_sized(
        dir: &Path,
        name_key: Key32,
        groups: Vec<(GroupId, SealKey)>,
        segment_bytes: u64,
    ) -> Result<Self, LogError> {
        let hosted = groups
            .into_iter()
            .map(|(group, key)| Hosted {
                group,
                keys: vec![key],
                since: None,
            })
            .collect();
        Self::open_hosted(dir, name_key, hosted, segment_bytes)
    }

    /// [`SealedLog::open_sized`] for groups that may hold several keys (a key rotation
    /// under way) or have dropped older ones (one finished).
    pub fn open_hosted(
        dir: &Path,
        name_key: Key32,
        groups: Vec<Hosted>,
        segment_bytes: u64,
    ) -> Result<Self, LogError> {
        fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let (inner, lengths) = load(dir, &name_key, groups, segment_bytes, true, &mut |_| {})?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            wake: Condvar::new(),
            room: Semaphore::new(PENDING_BYTES),
            name_key,
            syncs: AtomicU64::new(0),
            records: AtomicU64::new(0),
        });
        let writer_shared = shared.clone();
        std::thread::Builder::new()
            .name("raft-log".into())
            .spawn(move || run_writer(writer_shared, lengths))
            .map_err(|e| io_err(dir, e))?;
        Ok(SealedLog {
            _writer: Arc::new(WriterGuard {
                shared: shared.clone(),
            }),
            shared,
        })
    }

    /// Reads the log in `dir` as [`SealedLog::open_hosted`] would, changing nothing (a torn
    /// tail is left as it is, no file is created or removed): every record of `groups`
    /// authenticated with their keys, the segments against their acknowledged extent, each
    /// purged group's snapshot. For an audit, of a stopped node's log or of a running one's
    /// (whose newest record may be half written: that reads as a torn tail).
    ///
    /// # Errors
    /// As [`SealedLog::open_hosted`]: [`LogError::Corrupt`] names the damage.
    /// `read` is told the bytes as they are read (an audit counts and paces them).
    pub fn verify(
        dir: &Path,
        name_key: &Key32,
        groups: Vec<Hosted>,
        read: &mut dyn FnMut(u64),
    ) -> Result<LogAudit, LogError> {
        let rotating = groups.iter().filter(|g| g.keys.len() > 1).count() as u64;
        let (inner, lengths) = load(dir, name_key, groups, SEGMENT_BYTES, false, read)?;
        Ok(LogAudit {
            segments: lengths.len() as u64,
            groups: inner.keys.len() as u64,
            groups_rotating: rotating,
            ..inner.replayed
        })
    }

    /// Starts keeping `group`'s log here under `key` (a new group, or one whose key arrived
    /// after opening). Returns its storage for openraft.
    /// A group the log already holds keys for (given at opening) keeps them: `key` is its
    /// newest then.
    pub fn group(&self, group: GroupId, key: SealKey) -> GroupLog {
        let mut inner = lock(&self.shared);
        let p = pseudonym(&self.shared.name_key, group);
        inner.keys.entry(group).or_insert_with(|| GroupKeys {
            pseudonym: p,
            ring: KeyRing::new(key),
            since: None,
        });
        inner.groups.entry(group).or_default();
        GroupLog {
            log: self.clone(),
            group,
        }
    }

    /// Why the log failed for good (a write or `fdatasync` error), if it did: from then on it
    /// refuses every write until the process starts again (see the module's doc).
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared).failed.clone()
    }

    /// `group`'s snapshot file, sealed with `key` (its log key) — with the keys the log
    /// holds for the group when it holds them (the file then follows the log's rotations).
    pub fn snapshot_file(&self, group: GroupId, key: SealKey) -> SnapshotFile {
        let inner = lock(&self.shared);
        let p = pseudonym(&self.shared.name_key, group);
        match inner.keys.get(&group) {
            Some(keys) => SnapshotFile::with_ring(&inner.dir, p, keys.ring.clone()),
            None => SnapshotFile::new(&inner.dir, p, key),
        }
    }

    /// Starts sealing `group`'s records with `key`, a new key of the group: the keys it held
    /// still open what they sealed. Writes the group's vote and purge point as the first
    /// record under the new key and returns its place once that is durable — the place
    /// [`SealedLog::drop_older_keys`] later takes. The caller has made `key` durable where
    /// the log's keys come from before (a record under a key the next opening does not know
    /// would be damage).
    ///
    /// # Errors
    /// The group is not here, or the write failed.
    pub async fn add_key(
        &self,
        group: GroupId,
        key: SealKey,
    ) -> Result<LogPosition, StorageError<NodeId>> {
        self.checkpoint_under_newest(group, Some(key)).await
    }

    /// Writes `group`'s vote and purge point under its newest key and returns the record's
    /// place once it is durable: every later record of the group is under that key. For a
    /// rotation whose key was added before a restart ([`SealedLog::add_key`]'s place is not
    /// kept across one).
    ///
    /// # Errors
    /// As [`SealedLog::add_key`].
    pub async fn mark_newest(&self, group: GroupId) -> Result<LogPosition, StorageError<NodeId>> {
        self.checkpoint_under_newest(group, None).await
    }

    async fn checkpoint_under_newest(
        &self,
        group: GroupId,
        key: Option<SealKey>,
    ) -> Result<LogPosition, StorageError<NodeId>> {
        let refused = |why: &str| -> StorageError<NodeId> {
            StorageIOError::write_logs(&io::Error::other(why.to_owned())).into()
        };
        let (tx, rx) = oneshot::channel();
        // The state read, the key added and the checkpoint queued under one lock: no vote or
        // purge of the group lands between them (records before the place may be skipped
        // once the older keys go, so the checkpoint must say the newest of both), and nothing
        // of the group's is sealed with the new key before the place.
        let at = {
            let mut inner = lock(&self.shared);
            if let Some(why) = &inner.failed {
                return Err(refused(why));
            }
            let (Some(state), Some(keys)) = (inner.groups.get(&group), inner.keys.get(&group))
            else {
                return Err(refused("raft group is not kept here"));
            };
            let record = Record::Checkpoint {
                vote: state.vote,
                purged: state.purged,
            };
            let body = codec::encode(&record).map_err(|e| StorageIOError::write_logs(&e))?;
            if let Some(key) = key {
                keys.ring.push(key);
            }
            if !enqueue(
                &mut inner,
                group,
                &record,
                &body,
                Vec::new(),
                Completion::Durable(tx),
            ) {
                return Err(refused("raft group has no key"));
            }
            // Where `enqueue` put it (after the head checkpoints of a segment it began).
            let len = (HEADER + OVERHEAD + body.len()) as u64;
            LogPosition {
                segment: inner.segment,
                offset: inner.end - len,
            }
        };
        self.shared.records.fetch_add(1, Ordering::Relaxed);
        self.shared.wake.notify_one();
        rx.await
            .map_err(|e| StorageIOError::write_logs(&io::Error::other(e)))?
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(at)
    }

    /// The last index of `group`'s live entries written before `from` (sealed with a key
    /// older than the one [`SealedLog::add_key`] added there), if any is left.
    pub fn last_entry_before(&self, group: GroupId, from: LogPosition) -> Option<u64> {
        lock(&self.shared).groups.get(&group).and_then(|s| {
            s.entries
                .iter()
                .filter(|(_, (_, loc))| loc.position() < from)
                .map(|(index, _)| *index)
                .next_back()
        })
    }

    /// The snapshot file of a group the log keeps, sharing its keys; `None` for another.
    pub fn kept_snapshot_file(&self, group: GroupId) -> Option<SnapshotFile> {
        let inner = lock(&self.shared);
        let keys = inner.keys.get(&group)?;
        Some(SnapshotFile::with_ring(
            &inner.dir,
            keys.pseudonym,
            keys.ring.clone(),
        ))
    }

    /// How many keys the log holds for `group` (more than one while a rotation is under way).
    pub fn key_count(&self, group: GroupId) -> usize {
        lock(&self.shared)
            .keys
            .get(&group)
            .map_or(0, |k| k.ring.len())
    }

    /// Drops every key of `group` but the newest: its records before `from` (where the
    /// newest key's first record is) are dead from now on. The caller has checked that no
    /// live entry is older ([`SealedLog::last_entry_before`]), that the group's snapshot is
    /// under the newest key, and has made the drop durable where the log's keys come from
    /// (the next opening gets `from` as [`Hosted::since`]).
    pub fn drop_older_keys(&self, group: GroupId, from: LogPosition) {
        let mut inner = lock(&self.shared);
        if let Some(keys) = inner.keys.get_mut(&group) {
            keys.ring.keep_newest();
            keys.since = Some(from);
        }
    }

    /// Storage for a group whose key was given at [`SealedLog::open`].
    pub fn existing_group(&self, group: GroupId) -> Option<GroupLog> {
        let mut inner = lock(&self.shared);
        if !inner.keys.contains_key(&group) {
            return None;
        }
        inner.groups.entry(group).or_default();
        Some(GroupLog {
            log: self.clone(),
            group,
        })
    }

    /// Forgets a group and its key: its records are dead and will not open again.
    pub fn erase_group(&self, group: GroupId) {
        let mut inner = lock(&self.shared);
        // Said in the log too, under the group's key while it is still here: if the group
        // comes back to this node, replaying the log must not hand it these entries and this
        // vote (the records stay on disk until their segments go). Not awaited: it is written
        // with the next flush; it is too small to count against the pending bound.
        if inner.failed.is_none() {
            if let Ok(body) = codec::encode(&Record::Reset) {
                if enqueue(
                    &mut inner,
                    group,
                    &Record::Reset,
                    &body,
                    Vec::new(),
                    Completion::None,
                ) {
                    self.shared.records.fetch_add(1, Ordering::Relaxed);
                    self.shared.wake.notify_one();
                }
            }
        }
        if let Some(keys) = inner.keys.get(&group) {
            let _ = fs::remove_file(snapshot_file::path_of(&inner.dir, &keys.pseudonym));
        }
        if let Some(state) = inner.groups.remove(&group) {
            for (_, (_, loc)) in state.entries {
                unref(&mut inner.segment_refs, loc.segment);
            }
        }
        inner.keys.remove(&group);
    }

    /// How many `fdatasync`s the writer made and how many records it wrote since opening: the
    /// ratio is how well one sync serves many groups' writes.
    pub fn io_counts(&self) -> (u64, u64) {
        (
            self.shared.syncs.load(Ordering::Relaxed),
            self.shared.records.load(Ordering::Relaxed),
        )
    }

    /// Moves every segment of the log in `dir` into `dir/damaged/` (replacing what an
    /// earlier damage left there), so that the log opens again empty. For a log that
    /// failed authentication: the node starts under repair (`super::repair`), and the
    /// damaged files stay sealed for whoever investigates. Returns how many were moved.
    ///
    /// # Errors
    /// The file system refused a removal, rename or sync.
    pub fn set_aside_damaged(dir: &Path) -> Result<usize, LogError> {
        let damaged = dir.join(DAMAGED_DIR);
        if damaged.exists() {
            fs::remove_dir_all(&damaged).map_err(|e| io_err(&damaged, e))?;
        }
        fs::create_dir_all(&damaged).map_err(|e| io_err(&damaged, e))?;
        let mut moved = 0;
        for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
            let entry = entry.map_err(|e| io_err(dir, e))?;
            if entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(".rlog") || n == EXTENT_FILE || n == SNAPSHOT_DIR)
            {
                fs::rename(entry.path(), damaged.join(entry.file_name()))
                    .map_err(|e| io_err(&entry.path(), e))?;
                moved += 1;
            }
        }
        for d in [&damaged, &dir.to_path_buf()] {
            File::open(d)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_err(d, e))?;
        }
        Ok(moved)
    }

    /// The groups' last votes as the extent file in `dir` recorded them (empty when it is
    /// missing or does not authenticate). Read before [`SealedLog::set_aside_damaged`].
    pub fn recorded_votes(dir: &Path, name_key: &Key32) -> Votes {
        match extent::read(dir, name_key) {
            Ok(Ok(Some(r))) => r.votes,
            _ => Votes::new(),
        }
    }

    /// Gives every group whose key this log holds the vote `votes` recorded for it, where
    /// that is newer than what the log holds, durably (a log set aside under repair starts
    /// empty: this way the node still knows the newest term each group reached and refuses a
    /// deposed leader's appends).
    ///
    /// # Errors
    /// The write failed.
    pub async fn seed_votes(&self, votes: &Votes) -> Result<(), StorageError<NodeId>> {
        let wanted: Vec<(GroupId, Vote<NodeId>)> = {
            let inner = lock(&self.shared);
            inner
                .keys
                .iter()
                .filter_map(|(g, k)| {
                    // Never as committed: a node whose log starts empty must not take itself
                    // for a leader of that term; the term alone refuses older leaders.
                    let seeded = Vote {
                        leader_id: votes.get(&k.pseudonym)?.leader_id,
                        committed: false,
                    };
                    let held = inner.groups.get(g).and_then(|s| s.vote);
                    held.is_none_or(|h| h < seeded).then_some((*g, seeded))
                })
                .collect()
        };
        for (group, vote) in wanted {
            let (tx, rx) = oneshot::channel();
            self.submit(
                group,
                &Record::Vote(vote),
                Vec::new(),
                Completion::Durable(tx),
            )
            .await?;
            rx.await
                .map_err(|e| StorageIOError::write_vote(&io::Error::other(e)))?
                .map_err(|e| StorageIOError::write_vote(&e))?;
        }
        Ok(())
    }

    /// What keeps the oldest segment on disk, once the log holds more than `keep_closed`
    /// closed segments (`None` while it is within that bound). Segments go oldest first only
    /// ([`dead_segments`]), so one group that never purges — idle, or keeping its whole log —
    /// would otherwise keep every later segment too.
    pub fn pinning(&self, keep_closed: usize) -> Option<Pinned> {
        let inner = lock(&self.shared);
        let closed = inner
            .segment_refs
            .keys()
            .filter(|s| **s < inner.segment)
            .count();
        if closed <= keep_closed {
            return None;
        }
        let (&oldest, _) = inner.segment_refs.iter().find(|(_, refs)| **refs > 0)?;
        if oldest >= inner.segment {
            return None;
        }
        // The snapshot files are looked at after the lock is let go: no file system call
        // while the writer may wait for it (the lock rule in the module docs).
        let mut pinning = Vec::new();
        for (group, state) in &inner.groups {
            let last_there = state
                .entries
                .iter()
                .take_while(|(_, (_, loc))| loc.segment <= oldest)
                .last()
                .map(|(index, _)| *index);
            let Some(index) = last_there else { continue };
            let snapshot = inner
                .keys
                .get(group)
                .map(|k| snapshot_file::path_of(&inner.dir, &k.pseudonym));
            pinning.push((*group, index, snapshot));
        }
        let held_bytes = closed as u64 * inner.segment_bytes;
        drop(inner);
        let mut groups: Vec<PinningGroup> = pinning
            .into_iter()
            .map(|(group, through, snapshot)| PinningGroup {
                group,
                through,
                snapshot_bytes: snapshot
                    .and_then(|p| fs::metadata(p).ok())
                    .map_or(0, |m| m.len()),
            })
            .collect();
        groups.sort_unstable_by_key(|g| g.group);
        Some(Pinned { held_bytes, groups })
    }

    /// The segment files on disk now (oldest first).
    pub fn segments(&self) -> Vec<PathBuf> {
        let inner = lock(&self.shared);
        let mut ids: Vec<u64> = inner.segment_refs.keys().copied().collect();
        if !ids.contains(&inner.segment) {
            ids.push(inner.segment);
        }
        ids.sort_unstable();
        let paths: Vec<PathBuf> = ids
            .into_iter()
            .map(|s| segment_path(&inner.dir, s))
            .collect();
        drop(inner);
        paths.into_iter().filter(|p| p.exists()).collect()
    }

    /// Queues one record of `group` and returns when it is written (not yet durable); the
    /// completion runs after the fsync that covers it.
    async fn submit(
        &self,
        group: GroupId,
        record: &Record,
        entries: Vec<Entry<TypeConfig>>,
        completion: Completion,
    ) -> Result<(), StorageError<NodeId>> {
        let body = codec::encode(record).map_err(|e| StorageIOError::write_logs(&e))?;
        self.submit_encoded(group, record, body, entries, completion)
            .await
    }

    /// [`SealedLog::submit`] of a record already encoded as `body`.
    async fn submit_encoded(
        &self,
        group: GroupId,
        record: &Record,
        body: Vec<u8>,
        entries: Vec<Entry<TypeConfig>>,
        completion: Completion,
    ) -> Result<(), StorageError<NodeId>> {
        if body.len() > MAX_RECORD {
            return Err(StorageIOError::write_logs(&io::Error::other(
                "raft record over the size limit",
            ))
            .into());
        }
        let size = body.len() + OVERHEAD + HEADER;
        let permit = self
            .shared
            .room
            .acquire_many(u32::try_from(size.min(PENDING_BYTES)).unwrap_or(u32::MAX))
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        permit.forget();
        let mut inner = lock(&self.shared);
        if let Some(why) = &inner.failed {
            let why = why.clone();
            drop(inner);
            self.shared.room.add_permits(size.min(PENDING_BYTES));
            return Err(StorageIOError::write_logs(&io::Error::other(why)).into());
        }
        if !enqueue(&mut inner, group, record, &body, entries, completion) {
            drop(inner);
            self.shared.room.add_permits(size.min(PENDING_BYTES));
            return Err(
                StorageIOError::write_logs(&io::Error::other("raft group has no key")).into(),
            );
        }
        inner.pending_bytes += size;
        drop(inner);
        self.shared.records.fetch_add(1, Ordering::Relaxed);
        self.shared.wake.notify_one();
        Ok(())
    }
}

/// Replays the log in `dir` for `groups` into a new in-memory state; gives it and each
/// segment's valid length. `writable`: a torn tail is cut and leftover snapshot files are
/// removed (opening); otherwise nothing on disk changes ([`SealedLog::verify`]).
fn load(
    dir: &Path,
    name_key: &Key32,
    groups: Vec<Hosted>,
    segment_bytes: u64,
    writable: bool,
    read: &mut dyn FnMut(u64),
) -> Result<(Inner, Extent), LogError> {
    let mut keys = HashMap::new();
    let mut by_pseudonym = HashMap::new();
    for hosted in groups {
        let Some(ring) = KeyRing::of(hosted.keys) else {
            continue;
        };
        let p = pseudonym(name_key, hosted.group);
        by_pseudonym.insert(p, hosted.group);
        keys.insert(
            hosted.group,
            GroupKeys {
                pseudonym: p,
                ring,
                since: hosted.since,
            },
        );
    }
    let mut segments: Vec<u64> = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(hex) = name.strip_suffix(".rlog") {
            if let Ok(id) = u64::from_str_radix(hex, 16) {
                segments.push(id);
            }
        }
    }
    segments.sort_unstable();
    let extent_path = dir.join(EXTENT_FILE);
    let acknowledged = match extent::read(dir, name_key).map_err(|e| io_err(&extent_path, e))? {
        Ok(Some(x)) => x.extent,
        Ok(None) => {
            if !segments.is_empty() {
                tracing::warn!(dir = %dir.display(), "the Raft log has no extent file: a log cut on a record boundary cannot be told from a clean one this time");
            }
            Extent::new()
        }
        Err(extent::Unreadable(why)) => {
            return Err(LogError::Corrupt {
                path: extent_path,
                offset: 0,
                why,
            })
        }
    };
    if let Some(missing) = acknowledged.keys().find(|s| !segments.contains(s)) {
        return Err(LogError::Corrupt {
            path: segment_path(dir, *missing),
            offset: 0,
            why: "a segment holding acknowledged writes is missing",
        });
    }
    let mut inner = Inner {
        dir: dir.to_path_buf(),
        groups: HashMap::new(),
        keys,
        segment_refs: BTreeMap::new(),
        segment: segments.last().copied().unwrap_or(1),
        end: 0,
        pending: Vec::new(),
        pending_bytes: 0,
        failed: None,
        closed: false,
        segment_bytes,
        written_segment: 0,
        recent: VecDeque::new(),
        recent_bytes: 0,
        cached_cap: CACHED_BYTES,
        votes_changed: true,
        replayed: LogAudit::default(),
    };
    inner.segment_refs.entry(inner.segment).or_default();
    inner.written_segment = segments.last().copied().unwrap_or(0);
    let mut lengths = Extent::new();
    for (i, &segment) in segments.iter().enumerate() {
        let newest = i + 1 == segments.len();
        let acked = acknowledged.get(&segment).copied().unwrap_or(0);
        let end = replay(
            &mut inner,
            &by_pseudonym,
            (segment, newest),
            writable,
            acked,
            read,
        )?;
        if end < acked {
            return Err(LogError::Corrupt {
                path: segment_path(dir, segment),
                offset: end,
                why: "the segment ends before writes it acknowledged",
            });
        }
        lengths.insert(segment, end);
        if newest {
            inner.end = end;
        }
    }
    if writable {
        snapshot_file::remove_leftovers(dir);
    }
    check_snapshots(&inner, read)?;
    Ok((inner, lengths))
}

/// Seals `record` (encoded as `body`) of `group` into the pending batch, at the log's current
/// end, and applies it to the in-memory state. False when the group has no key here.
fn enqueue(
    inner: &mut Inner,
    group: GroupId,
    record: &Record,
    body: &[u8],
    entries: Vec<Entry<TypeConfig>>,
    completion: Completion,
) -> bool {
    if inner.end >= inner.segment_bytes {
        roll_over(inner);
    }
    let Some(keys) = inner.keys.get(&group) else {
        return false;
    };
    let (segment, offset) = (inner.segment, inner.end);
    let aad = aad(segment, offset, &keys.pseudonym);
    let pseudonym = keys.pseudonym;
    let record_len = HEADER + OVERHEAD + body.len();
    let loc = Loc {
        segment,
        offset,
        len: u32::try_from(record_len).unwrap_or(u32::MAX),
    };
    inner.end += record_len as u64;
    let written = apply(inner, group, record, entries, loc);
    if inner.pending.last().is_none_or(|p| p.segment != segment) {
        inner.pending.push(Pending {
            segment,
            bytes: Vec::new(),
            written: Vec::new(),
            flushed: Vec::new(),
            durable: Vec::new(),
        });
    }
    let Inner { keys, pending, .. } = inner;
    let (Some(keys), Some(pending)) = (keys.get(&group), pending.last_mut()) else {
        unreachable!("the group's key was found above and a pending batch was just made");
    };
    let key = &keys.ring;
    // Sealed where it will be written from: the body is copied once.
    let start = pending.bytes.len();
    let len = u32::try_from(record_len - 4).unwrap_or(u32::MAX);
    pending.bytes.reserve(record_len);
    pending.bytes.extend_from_slice(&len.to_le_bytes());
    pending.bytes.extend_from_slice(&pseudonym);
    pending.bytes.extend_from_slice(&[0; NONCE_LEN]);
    pending.bytes.extend_from_slice(body);
    let sealed = start + HEADER;
    let (nonce, tag) = key.seal_in_place(&aad, &mut pending.bytes[sealed + NONCE_LEN..]);
    pending.bytes[sealed..sealed + NONCE_LEN].copy_from_slice(&nonce);
    pending.bytes.extend_from_slice(&tag);
    if !written.is_empty() {
        pending.written.push((group, loc, written));
    }
    match completion {
        Completion::Flushed(cb) => pending.flushed.push(cb),
        Completion::Durable(tx) => pending.durable.push(tx),
        Completion::None => {}
    }
    true
}

enum Completion {
    Flushed(LogFlushed<TypeConfig>),
    Durable(oneshot::Sender<io::Result<()>>),
    None,
}

fn unref(refs: &mut BTreeMap<u64, usize>, segment: u64) {
    if let Some(n) = refs.get_mut(&segment) {
        *n = n.saturating_sub(1);
    }
}

/// Applies a record to the in-memory state; returns the indexes now held cached.
fn apply(
    inner: &mut Inner,
    group: GroupId,
    record: &Record,
    entries: Vec<Entry<TypeConfig>>,
    loc: Loc,
) -> Vec<u64> {
    let Inner {
        groups,
        segment_refs,
        votes_changed,
        ..
    } = inner;
    let state = groups.entry(group).or_default();
    match record {
        Record::Entries(_) => {
            let mut indexes = Vec::with_capacity(entries.len());
            for entry in entries {
                let index = entry.log_id.index;
                if let Some((_, old)) = state.entries.insert(index, (entry.log_id, loc)) {
                    unref(segment_refs, old.segment);
                }
                *segment_refs.entry(loc.segment).or_default() += 1;
                state.cached.insert(index, entry);
                indexes.push(index);
            }
            indexes
        }
        Record::Vote(vote) => {
            state.vote = Some(*vote);
            *votes_changed = true;
            Vec::new()
        }
        Record::Truncate(from) => {
            for (_, (_, old)) in state.entries.split_off(from) {
                unref(segment_refs, old.segment);
            }
            let _gone = state.cached.split_off(from);
            Vec::new()
        }
        Record::Purge(upto) => {
            let kept = state.entries.split_off(&(upto.index + 1));
            for (_, (_, old)) in std::mem::replace(&mut state.entries, kept) {
                unref(segment_refs, old.segment);
            }
            let kept = state.cached.split_off(&(upto.index + 1));
            state.cached = kept;
            if state.purged.is_none_or(|p| p.index < upto.index) {
                state.purged = Some(*upto);
            }
            Vec::new()
        }
        Record::Reset => {
            for (_, (_, old)) in std::mem::take(&mut state.entries) {
                unref(segment_refs, old.segment);
            }
            state.cached.clear();
            state.vote = None;
            state.purged = None;
            *votes_changed = true;
            Vec::new()
        }
        Record::Checkpoint { vote, purged } => {
            if vote.is_some() {
                state.vote = *vote;
                *votes_changed = true;
            }
            if purged.is_some() {
                state.purged = *purged;
            }
            Vec::new()
        }
    }
}

/// Starts the next segment and writes every group's checkpoint at its head.
fn roll_over(inner: &mut Inner) {
    inner.segment_refs.entry(inner.segment).or_default();
    inner.segment += 1;
    inner.end = 0;
    let segment = inner.segment;
    inner.segment_refs.entry(segment).or_default();
    let mut bytes = Vec::new();
    let mut groups: Vec<GroupId> = inner.groups.keys().copied().collect();
    groups.sort_unstable();
    for group in groups {
        let (Some(state), Some(keys)) = (inner.groups.get(&group), inner.keys.get(&group)) else {
            continue;
        };
        let record = Record::Checkpoint {
            vote: state.vote,
            purged: state.purged,
        };
        let Ok(body) = codec::encode(&record) else {
            continue;
        };
        let offset = inner.end + bytes.len() as u64;
        let sealed = keys
            .ring
            .seal(&aad(segment, offset, &keys.pseudonym), &body);
        let len = u32::try_from(8 + sealed.len()).unwrap_or(u32::MAX);
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&keys.pseudonym);
        bytes.extend_from_slice(&sealed);
    }
    inner.end = bytes.len() as u64;
    inner.pending.push(Pending {
        segment,
        bytes,
        written: Vec::new(),
        flushed: Vec::new(),
        durable: Vec::new(),
    });
}

/// Replays one segment into `inner`; returns where its valid records end. `acked`: how long
/// the segment was at its last acknowledged flush ([`extent`]); a "torn" record before that is
/// damage, not a crash's unfinished write.
/// `read` is told the bytes as they are read, a MiB at a time (an audit of a running node
/// paces them).
fn replay(
    inner: &mut Inner,
    by_pseudonym: &HashMap<[u8; 8], GroupId>,
    (segment, newest): (u64, bool),
    cut_torn_tail: bool,
    acked: u64,
    read: &mut dyn FnMut(u64),
) -> Result<u64, LogError> {
    let path = segment_path(&inner.dir, segment);
    let data = read_counting(&path, read).map_err(|e| io_err(&path, e))?;
    let corrupt = |offset: usize, why| LogError::Corrupt {
        path: path.clone(),
        offset: offset as u64,
        why,
    };
    let mut at = 0usize;
    inner.segment_refs.entry(segment).or_default();
    while at < data.len() {
        let rest = &data[at..];
        let torn = rest.len() < 4
            || (u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize) > rest.len() - 4;
        if torn {
            if (at as u64) < acked {
                return Err(corrupt(at, "a record acknowledged as written is cut short"));
            }
            if newest && !cut_torn_tail {
                // Read only: a crash's torn write, or one being written now.
                return Ok(at as u64);
            }
            if newest {
                // A crash cut the last write short; it was never acknowledged.
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| io_err(&path, e))?;
                file.set_len(at as u64).map_err(|e| io_err(&path, e))?;
                file.sync_all().map_err(|e| io_err(&path, e))?;
                return Ok(at as u64);
            }
            return Err(corrupt(at, "record runs past the end of a closed segment"));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if !(8 + OVERHEAD..=MAX_RECORD + 8 + OVERHEAD).contains(&len) {
            return Err(corrupt(at, "impossible record length"));
        }
        let mut p = [0u8; 8];
        p.copy_from_slice(&rest[4..12]);
        let sealed = &rest[12..4 + len];
        let loc = Loc {
            segment,
            offset: at as u64,
            len: (4 + len) as u32,
        };
        if let Some(&group) = by_pseudonym.get(&p) {
            let Some(keys) = inner.keys.get(&group) else {
                return Err(corrupt(at, "group key missing"));
            };
            if keys.since.is_some_and(|since| loc.position() < since) {
                // Sealed with a key the group dropped at the end of a rotation: dead.
                inner.replayed.dropped_key_records += 1;
                at += 4 + len;
                continue;
            }
            inner.replayed.records += 1;
            *inner.replayed.records_by_slot.entry(group).or_default() += 1;
            let (body, _) = keys
                .ring
                .open(&aad(segment, at as u64, &p), sealed)
                .map_err(|_| corrupt(at, "record does not authenticate"))?;
            let record: Record =
                codec::decode(&body).map_err(|_| corrupt(at, "record does not decode"))?;
            let entries = match &record {
                Record::Entries(entries) => entries.clone(),
                _ => Vec::new(),
            };
            apply(inner, group, &record, entries, loc);
            // Replayed entries are on disk: nothing is cached.
            if let Some(state) = inner.groups.get_mut(&group) {
                state.cached.clear();
            }
        } else {
            inner.replayed.other_records += 1;
        }
        at += 4 + len;
    }
    Ok(at as u64)
}

/// The file at `path`, read a MiB at a time, each told to `read`.
fn read_counting(path: &Path, read: &mut dyn FnMut(u64)) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = File::open(path)?;
    let mut data = Vec::with_capacity(file.metadata().map_or(0, |m| m.len() as usize));
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut chunk)?;
        if n == 0 {
            // Read once (at open, or by an audit): the log's own memory holds what it needs
            // again (`page_cache.rs`).
            crate::page_cache::dont_need(&file, 0, 0);
            return Ok(data);
        }
        data.extend_from_slice(&chunk[..n]);
        read(n as u64);
    }
}

/// The writer thread: takes everything pending, writes it, one `fdatasync` per segment
/// touched, then completes every flush it covered.
fn run_writer(shared: Arc<Shared>, lengths: Extent) {
    let mut recorded = Recorded {
        extent: lengths,
        votes: Votes::new(),
    };
    let mut files: BTreeMap<u64, File> = BTreeMap::new();
    let mut extent_file: Option<ExtentFile> = None;
    let mut slow = SlowFlushes::default();
    let mut since_dropped = 0u64;
    loop {
        let (batch, bytes_freed, dir) = {
            let mut inner = lock(&shared);
            while inner.pending.is_empty() && !inner.closed {
                inner = shared.wake.wait(inner).unwrap_or_else(|p| p.into_inner());
            }
            if inner.pending.is_empty() && inner.closed {
                return;
            }
            let batch = std::mem::take(&mut inner.pending);
            let freed = std::mem::take(&mut inner.pending_bytes);
            (batch, freed, inner.dir.clone())
        };
        let started = std::time::Instant::now();
        let result = write_batch(&dir, &mut files, &batch);
        slow.took(started.elapsed());
        if result.is_ok() {
            // Synced pages leave the page cache a few MiB at a time (`page_cache.rs`):
            // entries are read again from memory ([`CACHED_BYTES`]) or, by a follower far
            // behind or a restart, from the disk.
            since_dropped += batch.iter().map(|p| p.bytes.len() as u64).sum::<u64>();
            if since_dropped >= DROP_SYNCED_EVERY {
                since_dropped = 0;
                for file in files.values() {
                    crate::page_cache::dont_need(file, 0, 0);
                }
            }
            let segments: std::collections::BTreeSet<u64> =
                batch.iter().map(|p| p.segment).collect();
            shared
                .syncs
                .fetch_add(segments.len() as u64, Ordering::Relaxed);
            for pending in &batch {
                *recorded.extent.entry(pending.segment).or_default() += pending.bytes.len() as u64;
            }
        }
        let mut dead = Vec::new();
        let mut flushed = Vec::new();
        let mut durable = Vec::new();
        {
            let mut inner = lock(&shared);
            let inner = &mut *inner;
            for pending in &batch {
                for (group, written, indexes) in &pending.written {
                    if let Some(state) = inner.groups.get(group) {
                        for index in indexes {
                            // Only if no later record replaced the entry meanwhile.
                            let same = state
                                .entries
                                .get(index)
                                .is_some_and(|(_, loc)| loc == written);
                            if same {
                                let size = state.cached.get(index).map_or(0, entry_size);
                                inner.recent.push_back((*group, *index, *written, size));
                                inner.recent_bytes += size;
                            }
                        }
                    }
                }
            }
            evict_cached(inner);
            if let Err(e) = &result {
                inner.failed = Some(e.to_string());
            } else {
                let newest = batch.iter().map(|p| p.segment).max().unwrap_or(0);
                inner.written_segment = inner.written_segment.max(newest);
                dead = dead_segments(inner, &mut files);
                if std::mem::take(&mut inner.votes_changed) {
                    recorded.votes = current_votes(inner);
                }
            }
        }
        if result.is_ok() {
            // The extent first (durably when segments go), then the dead segments' files.
            for segment in &dead {
                recorded.extent.remove(segment);
            }
            record_extent(&shared, &dir, &mut extent_file, &recorded, !dead.is_empty());
            for segment in dead {
                let _ = fs::remove_file(segment_path(&dir, segment));
            }
        }
        for pending in batch {
            flushed.extend(pending.flushed);
            durable.extend(pending.durable);
        }
        shared.room.add_permits(bytes_freed);
        for cb in flushed {
            cb.log_io_completed(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            });
        }
        for tx in durable {
            let _ = tx.send(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            });
        }
    }
}

/// Flushes that took longer than a leader waits for a follower's answer to an append
/// (followers answer once the entries are durable): said in the log, at most once every
/// [`SlowFlushes::EVERY`], so that an operator sees a disk too slow for the cluster's timing
/// rather than only its effect (appends timing out, publishes stalling).
#[derive(Default)]
struct SlowFlushes {
    since_said: u64,
    longest: std::time::Duration,
    said: Option<std::time::Instant>,
}

impl SlowFlushes {
    const SLOW: std::time::Duration = std::time::Duration::from_millis(super::timing::HEARTBEAT_MS);
    const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    fn took(&mut self, took: std::time::Duration) {
        if took < Self::SLOW {
            return;
        }
        self.since_said += 1;
        self.longest = self.longest.max(took);
        if self.said.is_none_or(|t| t.elapsed() >= Self::EVERY) {
            tracing::warn!(
                flushes = self.since_said,
                longest_ms = self.longest.as_millis() as u64,
                "the Raft log's flushes are slower than a leader waits for a follower's answer (250 ms): the disk is slow for the cluster's timing"
            );
            self.said = Some(std::time::Instant::now());
            self.since_said = 0;
            self.longest = std::time::Duration::ZERO;
        }
    }
}

/// The memory an entry holds, near enough.
fn entry_size(entry: &Entry<TypeConfig>) -> usize {
    64 + match &entry.payload {
        openraft::EntryPayload::Normal(c) => c.0.len(),
        _ => 0,
    }
}

/// Drops the oldest written entries from memory until at most [`CACHED_BYTES`] remain (an
/// entry whose index was written again since, by a later record, stays).
fn evict_cached(inner: &mut Inner) {
    while inner.recent_bytes > inner.cached_cap {
        let Some((group, index, loc, size)) = inner.recent.pop_front() else {
            break;
        };
        inner.recent_bytes -= size;
        if let Some(state) = inner.groups.get_mut(&group) {
            if state.entries.get(&index).is_some_and(|(_, l)| *l == loc) {
                state.cached.remove(&index);
            }
        }
    }
}

fn write_batch(dir: &Path, files: &mut BTreeMap<u64, File>, batch: &[Pending]) -> io::Result<()> {
    let mut touched = Vec::new();
    for pending in batch {
        let file = match files.entry(pending.segment) {
            std::collections::btree_map::Entry::Occupied(file) => file.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .read(true)
                    .open(segment_path(dir, pending.segment))?;
                // A new file's directory entry must be durable too.
                File::open(dir)?.sync_all()?;
                slot.insert(file)
            }
        };
        file.write_all(&pending.bytes)?;
        if !touched.contains(&pending.segment) {
            touched.push(pending.segment);
        }
    }
    for segment in touched {
        if let Some(file) = files.get(&segment) {
            file.sync_data()?;
        }
    }
    Ok(())
}

/// Every group's vote, by pseudonym.
fn current_votes(inner: &Inner) -> Votes {
    inner
        .groups
        .iter()
        .filter_map(|(g, state)| Some((inner.keys.get(g)?.pseudonym, state.vote?)))
        .collect()
}

/// Takes the oldest segments out of use while none of their entries is live and a newer
/// segment's checkpoint is durable (never the current one); returns them, for the caller to
/// delete once the extent no longer names them.
fn dead_segments(inner: &mut Inner, files: &mut BTreeMap<u64, File>) -> Vec<u64> {
    let mut dead = Vec::new();
    while let Some((&segment, &refs)) = inner.segment_refs.iter().next() {
        if refs > 0 || segment >= inner.segment || segment >= inner.written_segment {
            break;
        }
        inner.segment_refs.remove(&segment);
        files.remove(&segment);
        dead.push(segment);
    }
    dead
}

/// Rewrites the extent file after a flush ([`extent`]). A failure is reported and leaves the
/// last extent in place (older, so the check at open is only narrower).
fn record_extent(
    shared: &Shared,
    dir: &Path,
    file: &mut Option<ExtentFile>,
    recorded: &Recorded,
    sync: bool,
) {
    if file.is_none() {
        match ExtentFile::open(dir) {
            Ok(f) => *file = Some(f),
            Err(e) => {
                tracing::warn!(error = %e, "the Raft log's extent file cannot be opened");
                return;
            }
        }
    }
    if let Some(f) = file {
        if let Err(e) = f.write(&shared.name_key, recorded, sync) {
            tracing::warn!(error = %e, "the Raft log's extent file cannot be written");
        }
    }
}

/// One group's view of the node's log: what openraft stores through.
#[derive(Clone)]
pub struct GroupLog {
    log: SealedLog,
    group: GroupId,
}

/// An entry a read wants: its index and id, a copy if it is not written yet, its record.
type Wanted = (u64, LogId<NodeId>, Option<Entry<TypeConfig>>, Loc);

impl GroupLog {
    // StorageError is openraft's (its traits return it); its size is not ours to choose.
    #[allow(clippy::result_large_err)]
    fn read_record(&self, loc: Loc) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let (path, keys) = {
            let inner = lock(&self.log.shared);
            let k = inner
                .keys
                .get(&self.group)
                .map(|k| (k.pseudonym, k.ring.clone()));
            (segment_path(&inner.dir, loc.segment), k)
        };
        let Some((p, ring)) = keys else {
            return Err(
                StorageIOError::read_logs(&io::Error::other("raft group has no key")).into(),
            );
        };
        let file = File::open(&path).map_err(|e| StorageIOError::read_logs(&e))?;
        let mut buf = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut buf, loc.offset)
            .map_err(|e| StorageIOError::read_logs(&e))?;
        let (body, _) = ring
            .open(
                &aad(loc.segment, loc.offset, &p),
                buf.get(HEADER..).unwrap_or(&[]),
            )
            .map_err(|e| StorageIOError::read_logs(&e))?;
        match codec::decode(&body) {
            Ok(Record::Entries(entries)) => Ok(entries),
            Ok(_) => Ok(Vec::new()),
            Err(e) => Err(StorageIOError::read_logs(&e).into()),
        }
    }
}

impl RaftLogReader<TypeConfig> for GroupLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        // Which entries, from memory or from which records.
        let mut wanted: Vec<Wanted> = Vec::new();
        {
            let inner = lock(&self.log.shared);
            let Some(state) = inner.groups.get(&self.group) else {
                return Ok(Vec::new());
            };
            for (&index, &(id, loc)) in state.entries.range(range) {
                wanted.push((index, id, state.cached.get(&index).cloned(), loc));
            }
        }
        let mut out = Vec::with_capacity(wanted.len());
        let mut cache: Option<(Loc, Vec<Entry<TypeConfig>>)> = None;
        for (index, id, memory, loc) in wanted {
            if let Some(entry) = memory {
                out.push(entry);
                continue;
            }
            if cache.as_ref().is_none_or(|(l, _)| *l != loc) {
                cache = Some((loc, self.read_record(loc)?));
            }
            let found = cache
                .as_ref()
                .and_then(|(_, entries)| entries.iter().find(|e| e.log_id.index == index))
                .filter(|e| e.log_id == id)
                .cloned();
            match found {
                Some(entry) => out.push(entry),
                None => {
                    return Err(StorageIOError::read_logs(&io::Error::other(
                        "raft log entry missing from its record",
                    ))
                    .into())
                }
            }
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for GroupLog {
    type LogReader = GroupLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = lock(&self.log.shared);
        let state = inner.groups.get(&self.group);
        let purged = state.and_then(|s| s.purged);
        let last = state
            .and_then(|s| s.entries.values().next_back())
            .map(|(id, _)| *id);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last.or(purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let (tx, rx) = oneshot::channel();
        self.log
            .submit(
                self.group,
                &Record::Vote(*vote),
                Vec::new(),
                Completion::Durable(tx),
            )
            .await?;
        // A vote counts only once it is durable: openraft may send it right after.
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StorageIOError::write_vote(&e).into()),
            Err(e) => Err(StorageIOError::write_vote(&e).into()),
        }
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(lock(&self.log.shared)
            .groups
            .get(&self.group)
            .and_then(|s| s.vote))
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
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let record = Record::Entries(entries.clone());
        let body = codec::encode(&record).map_err(|e| StorageIOError::write_logs(&e))?;
        if body.len() <= MAX_RECORD {
            return self
                .log
                .submit_encoded(
                    self.group,
                    &record,
                    body,
                    entries,
                    Completion::Flushed(callback),
                )
                .await;
        }
        // A catching-up follower gets many entries at once: more than one record holds them,
        // written in order, the flush reported with the last.
        let chunks = split_to_fit(entries, MAX_RECORD)?;
        let mut callback = Some(callback);
        let last = chunks.len().saturating_sub(1);
        for (i, chunk) in chunks.into_iter().enumerate() {
            let completion = match callback.take().filter(|_| i == last) {
                Some(cb) => Completion::Flushed(cb),
                None => Completion::None,
            };
            let record = Record::Entries(chunk.clone());
            self.log
                .submit(self.group, &record, chunk, completion)
                .await?;
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.log
            .submit(
                self.group,
                &Record::Truncate(log_id.index),
                Vec::new(),
                Completion::None,
            )
            .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.log
            .submit(
                self.group,
                &Record::Purge(log_id),
                Vec::new(),
                Completion::None,
            )
            .await
    }
}

/// Splits `entries` into runs whose record is at most `limit` bytes (halving until each is).
///
/// # Errors
/// One entry alone is over the limit.
#[expect(
    clippy::result_large_err,
    reason = "openraft's StorageError is what the log store returns; its size is not ours"
)]
fn split_to_fit(
    entries: Vec<Entry<TypeConfig>>,
    limit: usize,
) -> Result<Vec<Vec<Entry<TypeConfig>>>, StorageError<NodeId>> {
    let mut out = Vec::new();
    let mut todo = vec![entries];
    while let Some(run) = todo.pop() {
        let size = codec::encode(&Record::Entries(run.clone()))
            .map_err(|e| StorageIOError::write_logs(&e))?
            .len();
        if size <= limit {
            out.push(run);
        } else if run.len() == 1 {
            return Err(StorageIOError::write_logs(&io::Error::other(
                "raft entry over the record size limit",
            ))
            .into());
        } else {
            let mut first = run;
            let second = first.split_off(first.len() / 2);
            // Popped last-in first-out: the first half is taken first.
            todo.push(second);
            todo.push(first);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::memory::CountingMachine;
    use crate::consensus::Command;
    use crate::crypto::Secret;
    use openraft::testing::{StoreBuilder, Suite};
    use openraft::{CommittedLeaderId, EntryPayload};

    fn key(seed: u8) -> SealKey {
        SealKey::new(Secret::new([seed; 32]))
    }

    fn name_key() -> Key32 {
        Secret::new([7u8; 32])
    }

    fn entry(term: u64, index: u64, payload: &[u8]) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Command(payload.to_vec().into())),
        }
    }

    async fn durable(log: &SealedLog, group: GroupId, record: Record) {
        let entries = match &record {
            Record::Entries(e) => e.clone(),
            _ => Vec::new(),
        };
        let (tx, rx) = oneshot::channel();
        log.submit(group, &record, entries, Completion::Durable(tx))
            .await
            .expect("submitted");
        rx.await.expect("writer answers").expect("durable");
    }

    struct Builder;

    impl StoreBuilder<TypeConfig, GroupLog, CountingMachine, tempfile::TempDir> for Builder {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, GroupLog, CountingMachine), StorageError<NodeId>> {
            let dir = tempfile::tempdir().map_err(|e| StorageIOError::write_logs(&e))?;
            let log = SealedLog::open_sized(dir.path(), name_key(), Vec::new(), 4096)
                .map_err(|e| StorageIOError::write_logs(&io::Error::other(e.to_string())))?;
            let group = log.group(9, key(9));
            Ok((dir, group, CountingMachine::new()))
        }
    }

    #[test]
    fn a_batch_over_the_record_limit_is_split_in_order_and_one_huge_entry_is_refused() {
        let entries: Vec<_> = (1..=10).map(|i| entry(1, i, &[i as u8; 400])).collect();
        let runs = split_to_fit(entries.clone(), 1_500).unwrap();
        assert!(runs.len() > 1);
        for run in &runs {
            let size = codec::encode(&Record::Entries(run.clone())).unwrap().len();
            assert!(size <= 1_500, "{size}");
        }
        assert_eq!(runs.concat(), entries, "every entry once, in order");
        assert!(split_to_fit(vec![entry(1, 1, &[0; 2_000])], 1_500).is_err());
    }

    /// openraft's own storage contract, on the sealed log (small segments, so it rolls over).
    #[test]
    #[allow(clippy::result_large_err)]
    fn openraft_storage_suite_passes() -> Result<(), StorageError<NodeId>> {
        Suite::test_all(Builder)
    }

    #[tokio::test]
    async fn reopening_restores_every_groups_entries_and_vote() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            let _a = log.group(1, key(1));
            let _b = log.group(2, key(2));
            durable(
                &log,
                1,
                Record::Entries(vec![entry(1, 1, b"a1"), entry(1, 2, b"a2")]),
            )
            .await;
            durable(&log, 2, Record::Entries(vec![entry(1, 1, b"b1")])).await;
            durable(&log, 1, Record::Vote(Vote::new(3, 1))).await;
            durable(&log, 1, Record::Truncate(2)).await;
            durable(&log, 1, Record::Entries(vec![entry(3, 2, b"a2'")])).await;
        }
        let log = SealedLog::open(dir.path(), name_key(), vec![(1, key(1)), (2, key(2))])
            .expect("reopen");
        let mut a = log.existing_group(1).expect("group 1");
        let mut b = log.existing_group(2).expect("group 2");
        assert_eq!(a.read_vote().await.expect("vote"), Some(Vote::new(3, 1)));
        let got = a.try_get_log_entries(0..10).await.expect("read");
        let payloads: Vec<_> = got
            .iter()
            .map(|e| match &e.payload {
                EntryPayload::Normal(c) => c.0.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(payloads, vec![b"a1".to_vec(), b"a2'".to_vec()]);
        assert_eq!(got[1].log_id.leader_id.term, 3);
        assert_eq!(b.try_get_log_entries(0..10).await.expect("read").len(), 1);
        assert_eq!(b.read_vote().await.expect("vote"), None);
    }

    /// One idle group's first entry keeps every later segment on disk until it purges; the
    /// log names it (and how far to purge) once more than the allowed segments are closed.
    #[tokio::test]
    async fn an_idle_group_that_pins_the_oldest_segment_is_named_and_its_purge_frees_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SealedLog::open_sized(dir.path(), name_key(), Vec::new(), 4096).expect("open");
        let _idle = log.group(1, key(1));
        let _busy = log.group(2, key(2));
        durable(&log, 1, Record::Entries(vec![entry(1, 1, b"idle")])).await;
        assert_eq!(log.pinning(2), None, "one segment: nothing to reclaim");
        for i in 1..=40u64 {
            durable(&log, 2, Record::Entries(vec![entry(1, i, &[7; 500])])).await;
        }
        // The busy group's own snapshot would purge its entries; the idle one never does.
        durable(
            &log,
            2,
            Record::Purge(LogId::new(CommittedLeaderId::new(1, 1), 40)),
        )
        .await;
        durable(&log, 2, Record::Entries(vec![entry(1, 41, b"x")])).await;
        let before = log.segments().len();
        assert!(before > 3, "{before} segments");
        let pinned = log.pinning(2).expect("over the bound");
        assert_eq!(
            pinned.groups,
            vec![PinningGroup {
                group: 1,
                through: 1,
                snapshot_bytes: 0
            }]
        );
        assert_eq!(pinned.held_bytes, (before as u64 - 1) * 4096);
        durable(
            &log,
            1,
            Record::Purge(LogId::new(CommittedLeaderId::new(1, 1), 1)),
        )
        .await;
        durable(&log, 2, Record::Entries(vec![entry(1, 42, b"y")])).await;
        let after = log.segments().len();
        assert!(after < before, "{before} -> {after} segments");
        assert_eq!(log.pinning(2), None);
    }

    #[tokio::test]
    async fn written_entries_are_read_from_memory_until_the_cache_is_full() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
        let mut g = log.group(1, key(1));
        durable(&log, 1, Record::Entries(vec![entry(1, 1, b"kept")])).await;
        // The segment's bytes are gone (zeroed): a read that went to disk would fail.
        let wipe = |dir: &Path| {
            for seg in fs::read_dir(dir).expect("dir") {
                let path = seg.expect("entry").path();
                let len = fs::metadata(&path).expect("meta").len();
                fs::write(&path, vec![0u8; usize::try_from(len).expect("len")]).expect("wipe");
            }
        };
        wipe(dir.path());
        let got = g
            .try_get_log_entries(1..2)
            .await
            .expect("served from memory");
        assert_eq!(got, vec![entry(1, 1, b"kept")]);
        // With no room for written entries, the next one is read back from disk.
        lock(&log.shared).cached_cap = 0;
        durable(&log, 1, Record::Entries(vec![entry(1, 2, b"on disk")])).await;
        assert_eq!(
            g.try_get_log_entries(2..3).await.expect("read from disk"),
            vec![entry(1, 2, b"on disk")]
        );
        assert!(lock(&log.shared).recent.is_empty());
        wipe(dir.path());
        assert!(g.try_get_log_entries(2..3).await.is_err(), "went to disk");
    }

    #[tokio::test]
    async fn nothing_on_disk_is_plaintext() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
        let _g = log.group(0x5EA1_5EA1, key(3));
        durable(
            &log,
            0x5EA1_5EA1,
            Record::Entries(vec![entry(1, 1, b"TOP-SECRET-PAYLOAD")]),
        )
        .await;
        for path in log.segments() {
            let bytes = fs::read(&path).expect("read");
            for needle in [
                &b"TOP-SECRET"[..],
                b"Entries",
                b"payload",
                &0x5EA1_5EA1u64.to_le_bytes()[..],
            ] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "{needle:?} in {path:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_torn_tail_is_cut_and_an_edited_record_is_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            let _g = log.group(1, key(1));
            durable(&log, 1, Record::Entries(vec![entry(1, 1, b"one")])).await;
            durable(&log, 1, Record::Entries(vec![entry(1, 2, b"two")])).await;
        }
        let path = segment_path(dir.path(), 1);
        let whole = fs::read(&path).expect("read");
        // A crash in the middle of a third write: a length and a few bytes of it.
        let mut torn = whole.clone();
        torn.extend_from_slice(&200u32.to_le_bytes());
        torn.extend_from_slice(b"partial");
        fs::write(&path, &torn).expect("write");
        {
            let log = SealedLog::open(dir.path(), name_key(), vec![(1, key(1))]).expect("reopen");
            let mut g = log.existing_group(1).expect("group");
            assert_eq!(g.try_get_log_entries(0..10).await.expect("read").len(), 2);
        }
        assert_eq!(
            fs::read(&path).expect("read").len(),
            whole.len(),
            "tail cut"
        );
        // One flipped bit inside the first record's ciphertext.
        let mut edited = whole;
        edited[HEADER + 30] ^= 0x01;
        fs::write(&path, &edited).expect("write");
        match SealedLog::open(dir.path(), name_key(), vec![(1, key(1))]) {
            Err(LogError::Corrupt { offset, why, .. }) => {
                assert_eq!(offset, 0);
                assert_eq!(why, "record does not authenticate");
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("an edited record opened"),
        }
    }

    #[tokio::test]
    async fn a_log_cut_before_writes_it_acknowledged_is_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = segment_path(dir.path(), 1);
        let after_one = {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            let _g = log.group(1, key(1));
            durable(&log, 1, Record::Entries(vec![entry(1, 1, b"one")])).await;
            let after_one = fs::metadata(&path).expect("segment").len();
            durable(&log, 1, Record::Entries(vec![entry(1, 2, b"two")])).await;
            after_one
        };
        let whole = fs::read(&path).expect("read");
        let reopen = || SealedLog::open(dir.path(), name_key(), vec![(1, key(1))]);
        let why = |r: Result<SealedLog, LogError>| match r {
            Err(LogError::Corrupt { why, .. }) => why,
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("a cut log opened"),
        };
        // Cut exactly on the record boundary: the log alone would look clean.
        fs::write(&path, &whole[..usize::try_from(after_one).expect("small")]).expect("cut");
        assert_eq!(
            why(reopen()),
            "the segment ends before writes it acknowledged"
        );
        // The last record's length made to run past the end: a torn write to the log alone,
        // but it was acknowledged.
        let mut longer = whole.clone();
        let at = usize::try_from(after_one).expect("small");
        longer[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        fs::write(&path, &longer).expect("write");
        assert_eq!(
            why(reopen()),
            "a record acknowledged as written is cut short"
        );
        // The segment gone altogether.
        fs::remove_file(&path).expect("remove");
        assert_eq!(
            why(reopen()),
            "a segment holding acknowledged writes is missing"
        );
        // Put back whole: it opens, and a crash's torn write after it is still cut off.
        let mut torn = whole.clone();
        torn.extend_from_slice(&200u32.to_le_bytes());
        fs::write(&path, &torn).expect("write");
        {
            let log = reopen().expect("reopen");
            let mut g = log.existing_group(1).expect("group");
            assert_eq!(g.try_get_log_entries(0..10).await.expect("read").len(), 2);
        }
        // Without its extent file the log opens as before (the check needs the file).
        fs::write(&path, &whole[..at]).expect("cut");
        fs::remove_file(dir.path().join(EXTENT_FILE)).expect("remove extent");
        let log = reopen().expect("opens without an extent");
        let mut g = log.existing_group(1).expect("group");
        assert_eq!(g.try_get_log_entries(0..10).await.expect("read").len(), 1);
    }

    #[tokio::test]
    async fn a_log_set_aside_under_repair_keeps_each_groups_term() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            let _g1 = log.group(1, key(1));
            let _g2 = log.group(2, key(2));
            let mut committed = Vote::new(7, 3);
            committed.commit();
            durable(&log, 1, Record::Vote(committed)).await;
            durable(&log, 2, Record::Vote(Vote::new(4, 9))).await;
            durable(&log, 1, Record::Entries(vec![entry(7, 1, b"one")])).await;
        }
        // The log is damaged; the votes recorded beside it are read, the log set aside.
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).expect("read");
        bytes[HEADER + 30] ^= 0x01;
        fs::write(&path, &bytes).expect("write");
        let groups = || vec![(1, key(1)), (2, key(2))];
        assert!(SealedLog::open(dir.path(), name_key(), groups()).is_err());
        let votes = SealedLog::recorded_votes(dir.path(), &name_key());
        assert_eq!(votes.len(), 2, "{votes:?}");
        SealedLog::set_aside_damaged(dir.path()).expect("set aside");
        {
            let log = SealedLog::open(dir.path(), name_key(), groups()).expect("empty log");
            log.seed_votes(&votes).await.expect("seeded");
        }
        // Reopened: each group starts at its term, never as a committed leader.
        let log = SealedLog::open(dir.path(), name_key(), groups()).expect("reopen");
        let mut g1 = log.existing_group(1).expect("group 1");
        let mut g2 = log.existing_group(2).expect("group 2");
        assert_eq!(g1.read_vote().await.expect("vote"), Some(Vote::new(7, 3)));
        assert_eq!(g2.read_vote().await.expect("vote"), Some(Vote::new(4, 9)));
        assert!(g1
            .try_get_log_entries(0..10)
            .await
            .expect("read")
            .is_empty());
    }

    #[tokio::test]
    async fn a_group_that_comes_back_does_not_replay_its_earlier_incarnation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let groups = || vec![(1, key(1)), (2, key(2))];
        {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            let _g1 = log.group(1, key(1));
            let _g2 = log.group(2, key(2));
            durable(&log, 1, Record::Vote(Vote::new(9, 1))).await;
            let old: Vec<_> = (1..=5).map(|i| entry(9, i, b"old")).collect();
            durable(&log, 1, Record::Entries(old)).await;
            durable(&log, 2, Record::Entries(vec![entry(1, 1, b"other")])).await;
            // The replica moves away, then back (a replica count lowered, then raised).
            log.erase_group(1);
            let _again = log.group(1, key(1));
            let new: Vec<_> = (1..=2).map(|i| entry(1, i, b"new")).collect();
            durable(&log, 1, Record::Entries(new)).await;
        }
        let log = SealedLog::open(dir.path(), name_key(), groups()).expect("reopen");
        let mut g1 = log.existing_group(1).expect("group 1");
        let entries = g1.try_get_log_entries(0..10).await.expect("read");
        assert_eq!(
            entries.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
            vec![1, 2],
            "only the new incarnation's entries"
        );
        assert!(entries.iter().all(|e| e.log_id.leader_id.term == 1));
        assert_eq!(g1.read_vote().await.expect("vote"), None, "no earlier vote");
        let mut g2 = log.existing_group(2).expect("group 2");
        assert_eq!(g2.try_get_log_entries(0..10).await.expect("read").len(), 1);
    }

    #[tokio::test]
    async fn an_erased_group_is_skipped_and_the_others_survive() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            let _a = log.group(1, key(1));
            let _b = log.group(2, key(2));
            durable(&log, 1, Record::Entries(vec![entry(1, 1, b"a")])).await;
            durable(&log, 2, Record::Entries(vec![entry(1, 1, b"b")])).await;
        }
        // Group 2's key is gone (its tenant was crypto-erased): its records never open.
        let log = SealedLog::open(dir.path(), name_key(), vec![(1, key(1))]).expect("reopen");
        assert!(log.existing_group(2).is_none());
        let mut a = log.existing_group(1).expect("group 1");
        assert_eq!(a.try_get_log_entries(0..10).await.expect("read").len(), 1);
    }

    /// Group 1's snapshot, up to `index`.
    fn snapshot_at(log: &SealedLog, index: u64) {
        let meta = openraft::SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), index)),
            last_membership: openraft::StoredMembership::default(),
            snapshot_id: format!("1-{index}"),
        };
        log.snapshot_file(1, key(1))
            .write(&meta, b"state")
            .expect("snapshot");
    }

    #[tokio::test]
    async fn a_purged_group_whose_snapshot_is_missing_damaged_or_older_opens_as_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            let _g = log.group(1, key(1));
            for index in 1..=10 {
                durable(&log, 1, Record::Entries(vec![entry(1, index, b"e")])).await;
            }
            durable(
                &log,
                1,
                Record::Purge(LogId::new(CommittedLeaderId::new(1, 1), 8)),
            )
            .await;
        }
        let open = || SealedLog::open(dir.path(), name_key(), vec![(1, key(1))]);
        let why = |r: Result<SealedLog, LogError>| match r {
            Err(LogError::Corrupt { why, .. }) => why,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("opened"),
        };
        assert_eq!(why(open()), "a purged group's snapshot is missing");
        {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            snapshot_at(&log, 7);
        }
        assert!(why(open()).contains("rolled back"));
        let path = {
            let log = SealedLog::open(dir.path(), name_key(), Vec::new()).expect("open");
            snapshot_at(&log, 9);
            log.snapshot_file(1, key(1)).path().to_path_buf()
        };
        open().expect("a snapshot past the purge point opens");
        let mut raw = fs::read(&path).expect("read");
        raw[30] ^= 4;
        fs::write(&path, raw).expect("write");
        assert_eq!(why(open()), "a snapshot fails authentication");
        // Set aside with the damaged log, still sealed.
        SealedLog::set_aside_damaged(dir.path()).expect("set aside");
        assert!(dir.path().join("damaged").join(SNAPSHOT_DIR).is_dir());
        open().expect("an empty log opens");
    }

    #[tokio::test]
    async fn old_segments_go_once_their_entries_are_purged_and_state_survives_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let payload = vec![b'x'; 300];
        {
            let log =
                SealedLog::open_sized(dir.path(), name_key(), Vec::new(), 1024).expect("open");
            let _g = log.group(1, key(1));
            durable(&log, 1, Record::Vote(Vote::new(1, 1))).await;
            for index in 1..=20 {
                durable(&log, 1, Record::Entries(vec![entry(1, index, &payload)])).await;
            }
            assert!(log.segments().len() > 3, "rolled over");
            durable(
                &log,
                1,
                Record::Purge(LogId::new(CommittedLeaderId::new(1, 1), 18)),
            )
            .await;
            // One more write lets the writer see the dead segments.
            durable(&log, 1, Record::Entries(vec![entry(1, 21, &payload)])).await;
            assert!(log.segments().len() <= 3, "{:?}", log.segments());
            // A purge follows a snapshot, which the next open looks for.
            snapshot_at(&log, 18);
        }
        let log =
            SealedLog::open_sized(dir.path(), name_key(), vec![(1, key(1))], 1024).expect("reopen");
        let mut g = log.existing_group(1).expect("group");
        // The vote was written in a deleted segment; the checkpoints carried it.
        assert_eq!(g.read_vote().await.expect("vote"), Some(Vote::new(1, 1)));
        let state = g.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(18));
        assert_eq!(state.last_log_id.map(|l| l.index), Some(21));
        let got = g.try_get_log_entries(19..22).await.expect("read");
        assert_eq!(got.len(), 3);
    }

    /// A group's key rotated while it runs: records after the rotation's checkpoint are
    /// under the new key, both keys open the log until the older is dropped, and afterwards
    /// the log opens with the new key alone, skipping the dead records before the place —
    /// which the older key alone sealed, so without the place they would be damage. The
    /// vote written only before the rotation survives through the checkpoint.
    #[tokio::test]
    async fn a_rotated_group_key_seals_from_its_checkpoint_and_the_older_key_can_be_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hosted = |keys: Vec<SealKey>, since| {
            vec![Hosted {
                group: 1,
                keys,
                since,
            }]
        };
        let open = |keys: Vec<SealKey>, since| {
            SealedLog::open_hosted(dir.path(), name_key(), hosted(keys, since), 4096)
        };
        let payloads = |got: Vec<Entry<TypeConfig>>| -> Vec<u64> {
            got.iter().map(|e| e.log_id.index).collect()
        };
        let since = {
            let log = open(vec![key(1)], None).expect("open");
            let _g = log.group(1, key(1));
            for index in 1..=5 {
                durable(&log, 1, Record::Entries(vec![entry(1, index, &[1; 300])])).await;
            }
            durable(&log, 1, Record::Vote(Vote::new(2, 1))).await;
            let since = log.add_key(1, key(2)).await.expect("new key");
            assert_eq!(log.key_count(1), 2);
            for index in 6..=20 {
                durable(&log, 1, Record::Entries(vec![entry(2, index, &[2; 300])])).await;
            }
            assert!(log.segments().len() > 1, "rolled over under the new key");
            assert_eq!(log.last_entry_before(1, since), Some(5));
            since
        };
        // Both keys: everything opens (a rotation a crash interrupted).
        {
            let log = open(vec![key(2), key(1)], None).expect("both keys");
            let mut g = log.existing_group(1).expect("group");
            assert_eq!(
                payloads(g.try_get_log_entries(0..30).await.expect("read")).len(),
                20
            );
            // The snapshot and the purge past the older entries, then the older key goes.
            snapshot_at_with(&log, 5, key(2));
            assert!(log
                .kept_snapshot_file(1)
                .expect("kept")
                .under_newest_key()
                .expect("opens"));
            durable(
                &log,
                1,
                Record::Purge(LogId::new(CommittedLeaderId::new(1, 1), 5)),
            )
            .await;
            assert_eq!(log.last_entry_before(1, since), None);
            log.drop_older_keys(1, since);
            assert_eq!(log.key_count(1), 1);
            assert_eq!(
                payloads(g.try_get_log_entries(0..30).await.expect("read")),
                (6..=20).collect::<Vec<_>>()
            );
        }
        // The new key and the place: the older records are skipped, the vote kept.
        let log = open(vec![key(2)], Some(since)).expect("new key alone");
        let mut g = log.existing_group(1).expect("group");
        assert_eq!(g.read_vote().await.expect("vote"), Some(Vote::new(2, 1)));
        let state = g.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(5));
        assert_eq!(
            payloads(g.try_get_log_entries(0..30).await.expect("read")),
            (6..=20).collect::<Vec<_>>()
        );
        drop(g);
        drop(log);
        // The audit reads it the same way, changing nothing: a half-written record at the
        // end stays as it is.
        let newest = log_segments(dir.path()).pop().expect("a segment");
        let mut torn = fs::read(&newest).expect("read");
        torn.extend_from_slice(&[0xff, 0, 0, 0, 1, 2]);
        fs::write(&newest, &torn).expect("write");
        let audit = SealedLog::verify(
            dir.path(),
            &name_key(),
            hosted(vec![key(2)], Some(since)),
            &mut |_| {},
        )
        .expect("authenticates");
        assert_eq!(fs::read(&newest).expect("read"), torn, "nothing cut");
        assert_eq!((audit.groups, audit.groups_rotating), (1, 0));
        assert!(
            audit.records > 0 && audit.dropped_key_records > 0,
            "{audit:?}"
        );
        assert!(SealedLog::verify(
            dir.path(),
            &name_key(),
            hosted(vec![key(2)], None),
            &mut |_| {}
        )
        .is_err());
        // (The first segment stays: it holds live entries after the place.)
        // Without the place, the dead records are records no held key opens: damage.
        match open(vec![key(2)], None) {
            Err(LogError::Corrupt { why, .. }) => assert_eq!(why, "record does not authenticate"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("opened"),
        }
    }

    /// The log's segment files, oldest first.
    fn log_segments(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(dir)
            .expect("read dir")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "rlog"))
            .collect();
        v.sort();
        v
    }

    /// Group 1's snapshot up to `index`, sealed with `key` (the log's keys when it keeps
    /// the group).
    fn snapshot_at_with(log: &SealedLog, index: u64, key: SealKey) {
        let meta = openraft::SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), index)),
            last_membership: openraft::StoredMembership::default(),
            snapshot_id: format!("2-{index}"),
        };
        log.snapshot_file(1, key)
            .write(&meta, b"state")
            .expect("snapshot");
    }
}
