//! [`FileStore`]: a stream's sealed segment log over any [`SegmentIo`].
//!
//! Write path (one call = one block = one `fdatasync`): decide with the shared [`Index`] logic
//! which messages are accepted and which old ones limits remove (with an undo log), seal one
//! block, reserve space for it, write it, `fdatasync`, `fsync` the directory when the block
//! created the segment, then commit. Any write or sync failure rolls the index back (nothing
//! unacknowledged becomes readable) and poisons the store; `ENOSPC` before anything became
//! visible is [`StoreError::DiskFull`] and leaves the store usable.
//!
//! Segments roll over at `max_segment_bytes`: the full segment gets its seal (its own
//! `fdatasync`) before the next block opens a new segment whose header asserts the stream
//! base. Sealed segments at the head whose messages are all gone are dropped once a later
//! header or checkpoint asserts the higher base.
//!
//! `delete(seq, erase = true)` writes a tombstone and marks the store for compaction: the
//! sealed bytes stay on disk until the next [`StreamStore::compact`] (without the key they
//! are ciphertext; crypto-shredding a whole stream is the keyring's job).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::block::{
    open_block, parse_body, BlockBuilder, BlockKind, BlockPlace, RecordRef, SealedBlock,
    FLAG_COMPACTION_COMPLETE, MAX_BLOCK_LEN,
};
use super::index::{Entry, Index};
use super::io::{SegmentFile, SegmentIo};
use super::recovery::{self, DurableMark, RecoverOptions, RecoveryReport};
use super::segment::{
    read_block, SegmentHeader, SegmentWriter, StreamKeys, WriteFail, FLAG_COMPACTION_OUTPUT,
};
use super::{
    now_nanos, BatchResult, CompactStats, NewMsg, PurgeRequest, StoreError, StoreLimits, StoredMsg,
    StreamState, StreamStore, SubjectState,
};

mod cache;
mod compact;
mod frozen;
mod open;
mod reseal;
mod write;

pub use frozen::FrozenMessages;
pub use reseal::{ResealedSegment, SegmentReseal};

use cache::BlockCache;

/// Where a message lives on disk: 16 bytes in every index entry. Segment ids, block offsets
/// and block indexes are held in 32 bits: segments roll over at `max_segment_bytes` (64 MiB;
/// at most one 80 MiB block past it), a segment id at 2^32 is refused before the segment is
/// created, and recovery refuses a file that claims more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    seg: u32,
    off: u32,
    block: u32,
    /// Record index within the block.
    pub rec: u32,
}

impl Loc {
    /// A location; `None` when a field does not fit in 32 bits.
    pub fn new(seg: u64, off: u64, block: u64, rec: u32) -> Option<Loc> {
        Some(Loc {
            seg: u32::try_from(seg).ok()?,
            off: u32::try_from(off).ok()?,
            block: u32::try_from(block).ok()?,
            rec,
        })
    }

    /// A record of a block not written yet (its place is filled in after the write).
    const fn pending(rec: u32) -> Loc {
        Loc {
            seg: u32::MAX,
            off: 0,
            block: 0,
            rec,
        }
    }

    /// Whether this is [`Loc::pending`].
    fn is_pending(&self) -> bool {
        self.seg == u32::MAX
    }

    /// Segment id.
    pub fn seg(&self) -> u64 {
        u64::from(self.seg)
    }

    /// Block offset in its segment.
    pub fn off(&self) -> u64 {
        u64::from(self.off)
    }

    /// Block index in its segment.
    pub fn block(&self) -> u64 {
        u64::from(self.block)
    }

    /// The same record position in another block.
    fn with_block(self, block: Loc) -> Loc {
        Loc {
            rec: self.rec,
            ..block
        }
    }
}

/// A clock returning unix nanoseconds (injected for tests).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// File store settings.
#[derive(Clone)]
pub struct FileStoreConfig {
    /// The stream directory (`s/<stream_id>/` in the store layout).
    pub dir: PathBuf,
    /// Segment size at which the next block rolls over to a new segment.
    pub max_segment_bytes: u64,
    /// Blocks are padded to a multiple of this many bytes (1: no padding).
    pub pad_bucket: u32,
    /// Space is reserved in chunks of this many bytes.
    pub reserve_chunk: u64,
    /// Decrypted blocks kept for reads.
    pub cache_blocks: usize,
    /// Limits.
    pub limits: StoreLimits,
    /// The durable mark recorded outside the stream (catalog checkpoint), if any.
    pub min_durable: Option<DurableMark>,
    /// Time source.
    pub clock: Clock,
    /// Interval mode (`jetstream { sync_interval: 10s }`): appends return after the write,
    /// before `fdatasync`; [`FileStore::sync_pending`] syncs later. Weaker: a power loss or
    /// OS crash can lose (or tear) what was written since the last sync. Off by default.
    pub defer_sync: bool,
}

impl std::fmt::Debug for FileStoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStoreConfig")
            .field("dir", &self.dir)
            .field("max_segment_bytes", &self.max_segment_bytes)
            .field("pad_bucket", &self.pad_bucket)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl FileStoreConfig {
    /// Defaults: 64 MiB segments, 256-byte padding buckets, 4 MiB reservations, 64 cached
    /// blocks, no limits, the system clock.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileStoreConfig {
            dir: dir.into(),
            max_segment_bytes: 64 << 20,
            pad_bucket: 256,
            reserve_chunk: 4 << 20,
            cache_blocks: 64,
            limits: StoreLimits::default(),
            min_durable: None,
            clock: Arc::new(now_nanos),
            defer_sync: false,
        }
    }
}

struct SegInfo {
    path: PathBuf,
    header: SegmentHeader,
    /// Shared with the segment's writer while it is the active one: one descriptor each.
    file: Arc<dyn SegmentFile>,
    sealer: crate::store::block::Sealer,
    live: u64,
    len: u64,
    sealed: bool,
}

/// The file store. See the module docs.
pub struct FileStore {
    io: Arc<dyn SegmentIo>,
    keys: StreamKeys,
    cfg: FileStoreConfig,
    index: Index<Loc>,
    segments: BTreeMap<u64, SegInfo>,
    active: Option<SegmentWriter>,
    next_segment_id: u64,
    base: u64,
    uncovered: bool,
    poisoned: Option<String>,
    offline: Option<String>,
    closed: bool,
    erase_pending: bool,
    report: RecoveryReport,
    cache: Mutex<BlockCache>,
    /// Segments written since their last fdatasync (interval mode only).
    unsynced: std::collections::BTreeSet<u64>,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("dir", &self.cfg.dir)
            .field("segments", &self.segments.keys().collect::<Vec<_>>())
            .field("poisoned", &self.poisoned)
            .field("offline", &self.offline)
            .finish_non_exhaustive()
    }
}

fn io_err<'a>(file: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        file: file.to_owned(),
        op,
        source,
    }
}

impl FileStore {
    /// What recovery found when this store was opened.
    pub fn report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The last durable block (for the catalog to record as the external durable mark).
    pub fn durable_mark(&self) -> Option<DurableMark> {
        let last_seq = self.index.last().0;
        if let Some(w) = &self.active {
            if let Some(i) = w.durable {
                return Some(DurableMark {
                    segment_id: w.id,
                    block_index: i,
                    last_seq,
                });
            }
        }
        // The newest sealed segment: its seal is its last block.
        let (id, _) = self.segments.iter().rev().find(|(_, s)| s.sealed)?;
        let idx = self.last_block_index(*id)?;
        Some(DurableMark {
            segment_id: *id,
            block_index: idx,
            last_seq,
        })
    }

    fn last_block_index(&self, id: u64) -> Option<u64> {
        let s = self.segments.get(&id)?;
        // Walk the frames (cheap: headers only).
        let mut off = crate::store::segment::SEGMENT_HEADER_LEN as u64;
        let mut last = None;
        let mut fh = [0u8; crate::store::block::FRAME_HEADER_LEN];
        while off < s.len {
            s.file.read_exact_at(&mut fh, off).ok()?;
            let f = crate::store::block::FrameHeader::parse(&fh)?;
            last = Some(f.index);
            off += u64::from(f.len);
        }
        last
    }

    /// Whether an erase is waiting for [`StreamStore::compact`] to remove the bytes.
    pub fn erase_pending(&self) -> bool {
        self.erase_pending
    }

    /// Bytes in live segment files.
    pub fn disk_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.len).sum()
    }

    /// Ids of the live segments.
    pub fn segment_ids(&self) -> Vec<u64> {
        self.segments.keys().copied().collect()
    }

    /// The stream directory.
    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    fn now(&self) -> i64 {
        (self.cfg.clock)()
    }
}

impl StreamStore for FileStore {
    fn durable_mark(&self) -> Option<DurableMark> {
        FileStore::durable_mark(self)
    }

    fn append_batch(&mut self, msgs: &[NewMsg]) -> Result<BatchResult, StoreError> {
        self.check_write()?;
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        // The segment first: sealing a full one records the stream's last sequence, which
        // must not include this batch yet.
        self.prepare_active()?;
        let now = self.now();
        let mut rec = 0u32;
        let outcome = self
            .index
            .apply_append(&self.cfg.limits, msgs, now, |_, _, _| {
                let l = Loc::pending(rec);
                rec += 1;
                l
            });
        if outcome.accepted.is_empty() && outcome.undo.removed().is_empty() {
            return Ok(outcome.results);
        }
        let (last_seq, last_ts) = self.index.last();
        let Some(w) = &self.active else {
            self.index.rollback(outcome.undo);
            return Err(StoreError::InvalidArgument("no active segment"));
        };
        let kind = if outcome.accepted.is_empty() {
            BlockKind::Tombstone
        } else {
            BlockKind::Data
        };
        let cap: usize = outcome
            .accepted
            .iter()
            .filter_map(|(i, _, _)| msgs.get(*i))
            .map(|m| {
                22 + m.subject.len() + m.payload.len() + m.headers.as_ref().map_or(0, |h| h.len())
            })
            .sum();
        if cap > MAX_BLOCK_LEN as usize {
            self.index.rollback(outcome.undo);
            return Err(StoreError::InvalidArgument("batch too large for one block"));
        }
        let mut b = BlockBuilder::new(w.body_header(kind, last_seq, last_ts), cap);
        for (i, seq, ts) in &outcome.accepted {
            let Some(m) = msgs.get(*i) else { continue };
            let hdrs = m.headers.as_deref().unwrap_or(&[]);
            if b.push_record(*seq, *ts, &m.subject, hdrs, &m.payload)
                .is_err()
            {
                self.index.rollback(outcome.undo);
                return Err(StoreError::InvalidArgument(
                    "message does not fit the record format",
                ));
            }
        }
        let mut dels: Vec<u64> = outcome.undo.removed().iter().map(|(s, _)| *s).collect();
        dels.sort_unstable();
        for d in &dels {
            b.push_deletion(*d);
        }
        let (sealed, loc) = match self.write_block(b) {
            Ok(x) => x,
            Err(e) => {
                self.index.rollback(outcome.undo);
                return Err(e);
            }
        };
        self.uncovered = true;
        for (_, e) in outcome.undo.removed() {
            if let Some(seg) = self.segments.get_mut(&e.loc.seg()) {
                seg.live = seg.live.saturating_sub(1);
            }
        }
        let mut added = 0;
        for seq in outcome.undo.inserted() {
            if let Some(e) = self.index.get_mut(*seq) {
                e.loc = e.loc.with_block(loc);
                added += 1;
            }
        }
        if let Some(s) = self.segments.get_mut(&loc.seg()) {
            s.live += added;
        }
        drop(sealed);
        Ok(outcome.results)
    }

    fn get(&self, seq: u64) -> Result<Option<StoredMsg>, StoreError> {
        self.load(seq)
    }

    fn last_by_subject(&self, filter: &str) -> Result<Option<StoredMsg>, StoreError> {
        match self.index.last_by_subject(filter) {
            Some(s) => self.load(s),
            None => Ok(None),
        }
    }

    fn next_by_subject(
        &self,
        from_seq: u64,
        filter: &str,
    ) -> Result<Option<StoredMsg>, StoreError> {
        match self.index.next_by_subject(from_seq, filter) {
            Some(s) => self.load(s),
            None => Ok(None),
        }
    }

    fn delete(&mut self, seq: u64, erase: bool) -> Result<bool, StoreError> {
        self.check_write()?;
        if self.index.get(seq).is_none() {
            return Ok(false);
        }
        let n = self.persist_deletions(&[seq])?;
        if erase {
            self.erase_pending = true;
        }
        Ok(n == 1)
    }

    fn purge(&mut self, req: &PurgeRequest) -> Result<u64, StoreError> {
        self.check_write()?;
        let seqs = self
            .index
            .plan_purge(req)
            .map_err(StoreError::InvalidArgument)?;
        if seqs.is_empty() {
            return Ok(0);
        }
        self.persist_deletions(&seqs)
    }

    fn state(&self) -> StreamState {
        self.index.state()
    }

    fn subjects_state(&self, filter: &str) -> BTreeMap<String, SubjectState> {
        self.index.subjects_state(filter)
    }

    fn count_from(&self, from: u64, filter: &str) -> u64 {
        self.index.count_from(from, filter)
    }

    fn limits(&self) -> StoreLimits {
        self.cfg.limits
    }

    fn set_limits(&mut self, limits: StoreLimits) -> Result<u64, StoreError> {
        self.check_write()?;
        self.cfg.limits = limits;
        let seqs = self.index.plan_limits(&limits);
        if seqs.is_empty() {
            return Ok(0);
        }
        self.persist_deletions(&seqs)
    }

    fn expire(&mut self, now: i64) -> Result<u64, StoreError> {
        self.check_write()?;
        let Some(age) = self.cfg.limits.max_age else {
            return Ok(0);
        };
        let seqs = self.index.plan_expire(now, age);
        if seqs.is_empty() {
            return Ok(0);
        }
        self.persist_deletions(&seqs)
    }

    fn reseal_begin(
        &mut self,
        dek_version: u32,
        dek: crate::crypto::DataKey,
    ) -> Result<Option<Vec<SegmentReseal>>, StoreError> {
        FileStore::reseal_begin(self, dek_version, dek).map(Some)
    }

    fn reseal_install(&mut self, copy: ResealedSegment) -> Result<bool, StoreError> {
        FileStore::reseal_install(self, copy)
    }

    fn reseal_finish(&mut self) -> Vec<u32> {
        FileStore::reseal_finish(self)
    }

    fn frozen(&self) -> Result<Option<FrozenMessages>, StoreError> {
        FileStore::frozen(self).map(Some)
    }

    fn compact(&mut self) -> Result<CompactStats, StoreError> {
        self.check_write()?;
        let run_start = self.next_segment_id;
        match self.compact_inner() {
            Ok(s) => Ok(s),
            Err(e) => {
                // An incomplete run is never part of the stream: forget its outputs (recovery
                // would discard them too) so later appends go to a fresh normal segment.
                if self.active.as_ref().is_some_and(|w| w.id >= run_start) {
                    if let Some(w) = self.active.take() {
                        let _ = self.io.remove_file(&w.path);
                    }
                }
                let outputs: Vec<u64> = self
                    .segments
                    .range(run_start..)
                    .map(|(id, _)| *id)
                    .collect();
                self.drop_segments(&outputs);
                Err(e)
            }
        }
    }

    fn sync_checkpoint(&mut self) -> Result<(), StoreError> {
        self.check_write()?;
        let (dead, first_live) = self.droppable_head();
        let Some(w) = &self.active else { return Ok(()) };
        if w.is_new() || (!self.uncovered && dead.is_empty()) {
            return Ok(());
        }
        let new_base = if dead.is_empty() {
            self.base
        } else {
            first_live.unwrap_or(w.id)
        };
        let (last_seq, last_ts) = self.index.last();
        let mut h = w.body_header(BlockKind::Checkpoint, last_seq, last_ts);
        h.first_seq = self.index.state().first_seq;
        h.base_segment = new_base.max(self.base);
        self.write_block(BlockBuilder::new(h, 0))?;
        self.uncovered = false;
        if new_base > self.base {
            self.base = new_base;
            self.drop_segments(&dead);
        }
        Ok(())
    }

    fn sync_pending(&mut self) -> Result<bool, StoreError> {
        if self.unsynced.is_empty() {
            return Ok(false);
        }
        self.check_write()?;
        for id in std::mem::take(&mut self.unsynced) {
            let r = match &self.active {
                Some(w) if w.id == id => w.sync().map_err(|f| (w.path.clone(), f)),
                _ => match self.segments.get(&id) {
                    Some(seg) => seg
                        .file
                        .sync_data()
                        .map_err(|e| (seg.path.clone(), WriteFail::Io("fdatasync", e))),
                    None => Ok(()),
                },
            };
            if let Err((path, f)) = r {
                return Err(self.fail(&path, f));
            }
        }
        Ok(true)
    }

    fn close(&mut self) -> Result<(), StoreError> {
        if self.closed {
            return Ok(());
        }
        let r = if self.poisoned.is_none() && self.offline.is_none() {
            self.sync_checkpoint()
                .and_then(|()| self.sync_pending().map(|_| ()))
        } else {
            Ok(())
        };
        self.closed = true;
        self.active = None;
        r
    }

    fn abandon(&mut self) {
        self.closed = true;
        self.active = None;
    }
}
