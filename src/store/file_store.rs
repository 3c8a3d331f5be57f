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

/// Where a message lives on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Segment id.
    pub seg: u64,
    /// Block offset.
    pub off: u64,
    /// Block index.
    pub block: u64,
    /// Record index within the block.
    pub rec: u32,
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
    sealer: super::block::Sealer,
    live: u64,
    len: u64,
    sealed: bool,
}

struct CachedBlock {
    body: Bytes,
    records: Vec<RecordRef>,
}

#[derive(Default)]
struct BlockCache {
    map: HashMap<(u64, u64), Arc<CachedBlock>>,
    order: VecDeque<(u64, u64)>,
}

impl BlockCache {
    fn get(&self, key: (u64, u64)) -> Option<Arc<CachedBlock>> {
        self.map.get(&key).cloned()
    }
    fn put(&mut self, key: (u64, u64), b: Arc<CachedBlock>, cap: usize) {
        if self.map.insert(key, b).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > cap.max(1) {
            if let Some(k) = self.order.pop_front() {
                self.map.remove(&k);
            }
        }
    }
    fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
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
    /// Opens (or creates) the stream in `cfg.dir`: recovers, cuts a torn tail, removes
    /// leftovers of interrupted compactions, rebuilds the indexes.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] (nothing was changed on disk), [`StoreError::KeyUnavailable`],
    /// I/O errors.
    pub fn open(
        io: Arc<dyn SegmentIo>,
        keys: StreamKeys,
        cfg: FileStoreConfig,
    ) -> Result<FileStore, StoreError> {
        Self::open_with(io, keys, cfg, false)
    }

    /// Opens a stream for inspection even when it is corrupt: every authentic block is indexed
    /// and readable, writes fail with [`StoreError::Offline`], and nothing on disk changes.
    /// [`FileStore::report`] lists the findings.
    ///
    /// # Errors
    /// I/O errors and missing key versions.
    pub fn open_inspect(
        io: Arc<dyn SegmentIo>,
        keys: StreamKeys,
        cfg: FileStoreConfig,
    ) -> Result<FileStore, StoreError> {
        Self::open_with(io, keys, cfg, true)
    }

    fn open_with(
        io: Arc<dyn SegmentIo>,
        keys: StreamKeys,
        cfg: FileStoreConfig,
        inspect: bool,
    ) -> Result<FileStore, StoreError> {
        let dir = cfg.dir.clone();
        if !inspect {
            io.create_dir_all(&dir)
                .map_err(io_err(&dir, "create dir"))?;
        }
        let opts = RecoverOptions {
            min_durable: cfg.min_durable,
            inspect,
            read_only: inspect,
        };
        let mut rec = recovery::scan(io.as_ref(), &dir, &keys, &opts)?;
        let offline = recovery::first_corruption(&rec.report);
        if let Some(e) = &offline {
            tracing::error!(error = %e, "stream corrupt; offline");
            if !inspect {
                return Err(recovery::first_corruption(&rec.report).unwrap_or(
                    StoreError::Offline {
                        reason: e.to_string(),
                    },
                ));
            }
        }
        if !inspect {
            recovery::repair(io.as_ref(), &mut rec)?;
        }
        let mut index: Index<Loc> = Index::new();
        let mut last_rec = 0u64;
        for (seg, b) in recovery::live_blocks(&rec.live) {
            for r in seg.records.get(b.records.clone()).unwrap_or(&[]) {
                if r.seq <= last_rec {
                    if !inspect {
                        return Err(StoreError::Corrupt {
                            file: seg.path.clone(),
                            offset: b.offset,
                            reason: format!("sequence {} goes backwards", r.seq),
                        });
                    }
                    continue;
                }
                last_rec = r.seq;
                let loc = Loc {
                    seg: seg.id,
                    off: b.offset,
                    block: b.index,
                    rec: r.rec,
                };
                index.insert(
                    r.seq,
                    Entry {
                        ts: r.ts,
                        subject: Arc::clone(&r.subject),
                        size: r.size,
                        loc,
                    },
                );
            }
            for d in &b.deletions {
                index.remove_range(d.start, d.len);
            }
            index.raise_last(b.last_seq, b.last_ts);
        }
        let mut live_counts: HashMap<u64, u64> = HashMap::new();
        for (_, e) in index.iter() {
            *live_counts.entry(e.loc.seg).or_default() += 1;
        }
        let mut segments = BTreeMap::new();
        let mut active = None;
        let mut uncovered = false;
        let last_id = rec.live.last().map(|s| s.id);
        for mut s in rec.live {
            let Some(header) = s.header else { continue };
            let Some(sealer) = s.take_sealer() else {
                continue;
            };
            let writable = Some(s.id) == last_id && !s.sealed && !inspect;
            let file: Arc<dyn SegmentFile> = Arc::from(
                io.open(&s.path, writable)
                    .map_err(io_err(&s.path, "open"))?,
            );
            let len = s.valid_end();
            if writable {
                let wfile = Arc::clone(&file);
                let wsealer =
                    keys.sealer(s.id, header.dek_version)
                        .ok_or(StoreError::KeyUnavailable {
                            segment: s.id,
                            version: header.dek_version,
                        })?;
                let (next_index, last_tag) = match s.blocks.last() {
                    Some(b) => (b.index + 1, b.tag),
                    None => (0, [0u8; 16]),
                };
                uncovered = s
                    .blocks
                    .last()
                    .is_some_and(|b| matches!(b.kind, BlockKind::Data | BlockKind::Tombstone));
                active = Some(SegmentWriter::resume(
                    wfile,
                    s.path.clone(),
                    header,
                    wsealer,
                    next_index,
                    len,
                    last_tag,
                    false,
                ));
            }
            segments.insert(
                s.id,
                SegInfo {
                    path: s.path.clone(),
                    header,
                    file,
                    sealer,
                    live: live_counts.get(&s.id).copied().unwrap_or(0),
                    len,
                    sealed: s.sealed,
                },
            );
        }
        Ok(FileStore {
            io,
            keys,
            index,
            segments,
            active,
            next_segment_id: rec.next_segment_id,
            base: rec.base,
            uncovered,
            poisoned: None,
            offline: offline.map(|e| e.to_string()),
            closed: false,
            erase_pending: false,
            report: rec.report,
            cache: Mutex::new(BlockCache::default()),
            unsynced: std::collections::BTreeSet::new(),
            cfg,
        })
    }

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
        let mut off = super::segment::SEGMENT_HEADER_LEN as u64;
        let mut last = None;
        let mut fh = [0u8; super::block::FRAME_HEADER_LEN];
        while off < s.len {
            s.file.read_exact_at(&mut fh, off).ok()?;
            let f = super::block::FrameHeader::parse(&fh)?;
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

    fn check_write(&self) -> Result<(), StoreError> {
        if self.closed {
            return Err(StoreError::Closed);
        }
        if let Some(r) = &self.offline {
            return Err(StoreError::Offline { reason: r.clone() });
        }
        if let Some(c) = &self.poisoned {
            return Err(StoreError::Poisoned { cause: c.clone() });
        }
        Ok(())
    }

    fn poison(&mut self, file: &Path, op: &str, e: &std::io::Error) -> StoreError {
        let cause = format!("{op} on {}: {e}", file.display());
        tracing::error!(%cause, "write failure; store poisoned");
        if self.poisoned.is_none() {
            self.poisoned = Some(cause.clone());
        }
        StoreError::Poisoned { cause }
    }

    fn fail(&mut self, path: &Path, f: WriteFail) -> StoreError {
        match f {
            WriteFail::NoSpace(_) => StoreError::DiskFull {
                file: path.to_owned(),
            },
            WriteFail::Io(op, e) => self.poison(path, op, &e),
        }
    }

    fn now(&self) -> i64 {
        (self.cfg.clock)()
    }

    /// Sealed head segments whose messages are all gone, and the base that drops them.
    fn droppable_head(&self) -> (Vec<u64>, Option<u64>) {
        let active = self.active.as_ref().map(|w| w.id);
        let mut dead = Vec::new();
        for (id, s) in &self.segments {
            if Some(*id) == active || !s.sealed || s.live > 0 {
                return (dead, Some(*id));
            }
            dead.push(*id);
        }
        (dead, None)
    }

    fn drop_segments(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(s) = self.segments.remove(id) {
                // Not synced: the asserted base already makes them obsolete for recovery.
                if let Err(e) = self.io.remove_file(&s.path) {
                    tracing::warn!(file = %s.path.display(), error = %e, "could not remove a dropped segment");
                }
            }
        }
    }

    /// Makes sure a writable segment with room exists (sealing a full one first).
    fn prepare_active(&mut self) -> Result<(), StoreError> {
        if let Some(w) = &self.active {
            if w.end < self.cfg.max_segment_bytes || w.is_new() {
                return Ok(());
            }
            self.seal_active(0, 0)?;
        }
        if self.active.is_some() {
            return Ok(());
        }
        let id = self.next_segment_id;
        // The new header asserts the base: the first sealed segment that still holds messages
        // (dead head segments are dropped once this header is durable).
        let (_, first_live) = self.droppable_head();
        let base = first_live.unwrap_or(id).max(self.base);
        let prev = self.segments.keys().next_back().copied().unwrap_or(0);
        let header = SegmentHeader {
            flags: 0,
            store_uuid: self.keys.store_uuid,
            stream_id: self.keys.stream_id,
            segment_id: id,
            dek_version: self.keys.current_version(),
            created: self.now(),
            prev_segment_id: prev,
            base,
        };
        let sealer =
            self.keys
                .sealer(id, header.dek_version)
                .ok_or(StoreError::KeyUnavailable {
                    segment: id,
                    version: header.dek_version,
                })?;
        let w = match SegmentWriter::create(self.io.as_ref(), &self.cfg.dir, header, sealer) {
            Ok(w) => w,
            Err(e) if super::segment::is_enospc(&e) => {
                return Err(StoreError::DiskFull {
                    file: self.cfg.dir.join(super::segment::segment_file_name(id)),
                })
            }
            Err(e) => return Err(self.poison(&self.cfg.dir.clone(), "create segment", &e)),
        };
        self.next_segment_id = id + 1;
        self.active = Some(w);
        Ok(())
    }

    /// Seals the active segment (its own fdatasync). `flags`/`base` for compaction seals.
    fn seal_active(&mut self, flags: u8, base: u64) -> Result<(), StoreError> {
        let Some(w) = &self.active else { return Ok(()) };
        let (last_seq, last_ts) = self.index.last();
        let mut h = w.body_header(BlockKind::SegmentSeal, last_seq, last_ts);
        h.flags = flags;
        h.first_seq = self.index.state().first_seq;
        h.base_segment = if w.header.is_compaction_output() {
            base
        } else {
            self.base.max(base)
        };
        let b = BlockBuilder::new(h, 0);
        self.write_block(b)?;
        if let Some(w) = self.active.take() {
            if let Some(s) = self.segments.get_mut(&w.id) {
                s.sealed = true;
            }
        }
        Ok(())
    }

    /// Seals, reserves, writes, syncs (and syncs the directory for a new segment) one block in
    /// the active segment, then commits it. On error nothing is committed.
    fn write_block(&mut self, b: BlockBuilder) -> Result<(SealedBlock, Loc), StoreError> {
        let bucket = self.cfg.pad_bucket;
        let chunk = self
            .cfg
            .reserve_chunk
            .min(self.cfg.max_segment_bytes.max(1 << 16));
        let dir = self.cfg.dir.clone();
        let Some(w) = self.active.as_mut() else {
            return Err(StoreError::InvalidArgument("no active segment"));
        };
        let place: BlockPlace = w.place();
        let path = w.path.clone();
        let sealed = b
            .seal(w.sealer(), &place, bucket)
            .map_err(|_| StoreError::InvalidArgument("batch too large for one block"))?;
        let is_new = w.is_new();
        let defer = self.cfg.defer_sync;
        let res = w
            .reserve(sealed.bytes.len() as u64, chunk)
            .and_then(|()| w.write_block(&sealed))
            .and_then(|()| if defer { Ok(()) } else { w.sync() });
        if let Err(f) = res {
            if matches!(f, WriteFail::Io(..)) {
                w.discard_uncommitted();
            }
            return Err(self.fail(&path, f));
        }
        if is_new {
            if let Err(e) = self.io.sync_dir(&dir) {
                w.discard_uncommitted();
                return Err(self.poison(&dir, "fsync dir", &e));
            }
        }
        let Some(w) = self.active.as_mut() else {
            return Err(StoreError::InvalidArgument("no active segment"));
        };
        w.commit(&sealed);
        if defer {
            self.unsynced.insert(w.id);
        }
        let loc = Loc {
            seg: w.id,
            off: place.offset,
            block: place.index,
            rec: 0,
        };
        let end = w.end;
        if is_new {
            let header = w.header;
            let sealer = self
                .keys
                .sealer(header.segment_id, header.dek_version)
                .ok_or(StoreError::KeyUnavailable {
                    segment: header.segment_id,
                    version: header.dek_version,
                })?;
            let file = w.shared_file();
            self.segments.insert(
                w.id,
                SegInfo {
                    path: path.clone(),
                    header,
                    file,
                    sealer,
                    live: 0,
                    len: end,
                    sealed: false,
                },
            );
            // The new header asserted a base: drop the dead head segments it left behind.
            let base = header.base;
            if !header.is_compaction_output() && base > self.base {
                self.base = base;
                let dead: Vec<u64> = self.segments.range(..base).map(|(id, _)| *id).collect();
                self.drop_segments(&dead);
            }
        } else if let Some(s) = self.segments.get_mut(&loc.seg) {
            s.len = end;
        }
        Ok((sealed, loc))
    }

    /// Persists deletions of `seqs` (sorted) in tombstone blocks, then applies them.
    fn persist_deletions(&mut self, seqs: &[u64]) -> Result<u64, StoreError> {
        const MAX_RANGES: usize = 1 << 16;
        let mut removed = 0;
        let mut i = 0;
        while i < seqs.len() {
            self.prepare_active()?;
            let (last_seq, last_ts) = self.index.last();
            let Some(w) = &self.active else {
                return Err(StoreError::InvalidArgument("no active segment"));
            };
            let h = w.body_header(BlockKind::Tombstone, last_seq, last_ts);
            let mut b = BlockBuilder::new(h, 0);
            let start = i;
            while let Some(&s) = seqs.get(i) {
                let extends = i > start && seqs.get(i - 1).is_some_and(|p| p + 1 == s);
                if b.deletion_ranges() >= MAX_RANGES && !extends {
                    break;
                }
                b.push_deletion(s);
                i += 1;
            }
            self.write_block(b)?;
            self.uncovered = true;
            for s in seqs.get(start..i).unwrap_or(&[]) {
                if let Some(e) = self.index.remove(*s) {
                    removed += 1;
                    if let Some(seg) = self.segments.get_mut(&e.loc.seg) {
                        seg.live = seg.live.saturating_sub(1);
                    }
                }
            }
        }
        Ok(removed)
    }

    fn read_cached(&self, loc: &Loc) -> Result<Arc<CachedBlock>, StoreError> {
        let key = (loc.seg, loc.off);
        if let Some(b) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            return Ok(b);
        }
        let s = self
            .segments
            .get(&loc.seg)
            .ok_or_else(|| StoreError::Corrupt {
                file: self.cfg.dir.clone(),
                offset: loc.off,
                reason: format!("segment {:016x} missing", loc.seg),
            })?;
        let mut buf = read_block(s.file.as_ref(), loc.off).map_err(io_err(&s.path, "read"))?;
        let place = BlockPlace {
            store_uuid: self.keys.store_uuid,
            stream_id: self.keys.stream_id,
            segment_id: loc.seg,
            dek_version: s.header.dek_version,
            index: loc.block,
            offset: loc.off,
        };
        let corrupt = |reason: String| StoreError::Corrupt {
            file: s.path.clone(),
            offset: loc.off,
            reason,
        };
        let range = open_block(&s.sealer, &place, &mut buf).map_err(|e| corrupt(e.to_string()))?;
        let body = Bytes::from(buf).slice(range);
        let parsed = parse_body(&body).map_err(|e| corrupt(e.to_string()))?;
        let cb = Arc::new(CachedBlock {
            body,
            records: parsed.records,
        });
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).put(
            key,
            Arc::clone(&cb),
            self.cfg.cache_blocks,
        );
        Ok(cb)
    }

    fn load(&self, seq: u64) -> Result<Option<StoredMsg>, StoreError> {
        if self.closed {
            return Err(StoreError::Closed);
        }
        let Some(e) = self.index.get(seq) else {
            return Ok(None);
        };
        let loc = e.loc;
        let b = self.read_cached(&loc)?;
        let bad = || StoreError::Corrupt {
            file: self.cfg.dir.clone(),
            offset: loc.off,
            reason: format!("record {} of block missing", loc.rec),
        };
        let r = b.records.get(loc.rec as usize).ok_or_else(bad)?;
        if r.seq != seq {
            return Err(bad());
        }
        let subject = b
            .body
            .get(r.subject.clone())
            .and_then(|s| std::str::from_utf8(s).ok())
            .ok_or_else(bad)?
            .to_owned();
        let headers = if r.headers.is_empty() {
            None
        } else {
            Some(b.body.slice(r.headers.clone()))
        };
        Ok(Some(StoredMsg {
            seq,
            ts: r.ts,
            subject,
            headers,
            payload: b.body.slice(r.payload.clone()),
        }))
    }

    fn compact_inner(&mut self) -> Result<CompactStats, StoreError> {
        let bytes_before = self.disk_bytes();
        // 1. Close the active segment: seal it, or abandon a creation that never happened.
        if let Some(w) = &self.active {
            if w.is_new() {
                let path = w.path.clone();
                self.active = None;
                let _ = self.io.remove_file(&path);
            } else {
                self.seal_active(0, 0)?;
            }
        }
        // 2. Write every live message into new segments of one compaction run.
        let run_start = self.next_segment_id;
        let seqs: Vec<u64> = self.index.iter().map(|(s, _)| s).collect();
        let mut new_locs: Vec<(u64, Loc)> = Vec::with_capacity(seqs.len());
        let mut written: Vec<u64> = Vec::new();
        let mut prev_out = 0u64;
        let body_target: usize = (1 << 20).min(self.cfg.max_segment_bytes as usize);
        let mut pending: Option<BlockBuilder> = None;
        let (last_seq, last_ts) = self.index.last();
        let mut k = 0usize;
        loop {
            let next = seqs.get(k).copied();
            let msg = match next {
                Some(s) => self.load(s)?,
                None => None,
            };
            // Start an output segment when needed.
            if self.active.is_none() {
                let id = self.next_segment_id;
                let header = SegmentHeader {
                    flags: FLAG_COMPACTION_OUTPUT,
                    store_uuid: self.keys.store_uuid,
                    stream_id: self.keys.stream_id,
                    segment_id: id,
                    dek_version: self.keys.current_version(),
                    created: self.now(),
                    prev_segment_id: prev_out,
                    base: run_start,
                };
                let sealer =
                    self.keys
                        .sealer(id, header.dek_version)
                        .ok_or(StoreError::KeyUnavailable {
                            segment: id,
                            version: header.dek_version,
                        })?;
                let w = SegmentWriter::create(self.io.as_ref(), &self.cfg.dir, header, sealer)
                    .map_err(|e| self.poison(&self.cfg.dir.clone(), "create segment", &e))?;
                self.next_segment_id = id + 1;
                prev_out = id;
                written.push(id);
                self.active = Some(w);
            }
            let flush = match (&pending, &msg) {
                (Some(b), Some(m)) => {
                    b.body_len() + m.payload.len() + m.subject.len() > body_target
                        || !b.can_take(m.seq)
                }
                (Some(_), None) => true,
                (None, _) => false,
            };
            if flush {
                if let Some(b) = pending.take() {
                    let (_, loc) = self.write_block(b)?;
                    for (_, l) in new_locs.iter_mut().filter(|(_, l)| l.seg == u64::MAX) {
                        *l = Loc { rec: l.rec, ..loc };
                    }
                }
                // Roll the output segment over when full (never on the last block).
                let full = self
                    .active
                    .as_ref()
                    .is_some_and(|w| w.end >= self.cfg.max_segment_bytes);
                if full && msg.is_some() {
                    self.seal_active(0, 0)?;
                    continue;
                }
            }
            let Some(m) = msg else { break };
            if pending.is_none() {
                let Some(w) = &self.active else { break };
                pending = Some(BlockBuilder::new(
                    w.body_header(BlockKind::Data, last_seq, last_ts),
                    body_target,
                ));
            }
            if let Some(b) = pending.as_mut() {
                let rec = b
                    .push_record(
                        m.seq,
                        m.ts,
                        &m.subject,
                        m.headers.as_deref().unwrap_or(&[]),
                        &m.payload,
                    )
                    .map_err(|_| StoreError::InvalidArgument("record does not fit"))?;
                new_locs.push((
                    m.seq,
                    Loc {
                        seg: u64::MAX,
                        off: 0,
                        block: 0,
                        rec,
                    },
                ));
            }
            k += 1;
        }
        // 3. Everything written durable, directory entries too, then the completing seal.
        if let Err(e) = self.io.sync_dir(&self.cfg.dir) {
            return Err(self.poison(&self.cfg.dir.clone(), "fsync dir", &e));
        }
        self.seal_active(FLAG_COMPACTION_COMPLETE, run_start)?;
        // 4. The run is the stream now: drop the old segments, point the index at the new ones.
        let old: Vec<u64> = self
            .segments
            .range(..run_start)
            .map(|(id, _)| *id)
            .collect();
        self.base = run_start;
        self.drop_segments(&old);
        if let Err(e) = self.io.sync_dir(&self.cfg.dir) {
            return Err(self.poison(&self.cfg.dir.clone(), "fsync dir", &e));
        }
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for (seq, loc) in new_locs {
            if let Some(e) = self.index.get_mut(seq) {
                e.loc = loc;
                *counts.entry(loc.seg).or_default() += 1;
            }
        }
        for (id, s) in self.segments.iter_mut() {
            s.live = counts.get(id).copied().unwrap_or(0);
        }
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.erase_pending = false;
        self.uncovered = false;
        Ok(CompactStats {
            segments_removed: old.len() as u64,
            segments_written: written.len() as u64,
            bytes_before,
            bytes_after: self.disk_bytes(),
        })
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
                let l = Loc {
                    seg: 0,
                    off: 0,
                    block: 0,
                    rec,
                };
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
            if let Some(seg) = self.segments.get_mut(&e.loc.seg) {
                seg.live = seg.live.saturating_sub(1);
            }
        }
        let mut added = 0;
        for seq in outcome.undo.inserted() {
            if let Some(e) = self.index.get_mut(*seq) {
                e.loc = Loc {
                    rec: e.loc.rec,
                    ..loc
                };
                added += 1;
            }
        }
        if let Some(s) = self.segments.get_mut(&loc.seg) {
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
}
