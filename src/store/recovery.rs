//! Opening a stream directory: scan every segment, verify every block, decide what is live,
//! and tell damage from a torn tail.
//!
//! Rules (see `docs/storage-format.md` for the full text):
//! 1. Every block is opened at the place the scan expects (index, file offset) with the AAD that
//!    binds store, stream, segment, key version, index, offset and length, and must continue the
//!    segment's hash chain. After a block that fails, the scan resynchronises on the next sync
//!    marker whose frame authenticates *at its own position*; the bytes in between are damage.
//! 2. The stream base is the highest base asserted by any authentic segment header, checkpoint
//!    or seal (a compaction run asserts its base only in its final, completing seal). Segments
//!    below the base are obsolete; compaction outputs of a run above the base are an incomplete
//!    compaction. Both are removed once everything else verified.
//! 3. The live segments (from the base up) must form an unbroken `prev_segment_id` chain; every
//!    live segment but the last must end in an authentic seal with no damage.
//! 4. In the last live segment, damage followed by any authentic block is corruption. Damage at
//!    the very end is a torn tail unless a covering record says the block was durable (the
//!    external durable mark) or the bytes there are a block from elsewhere (a frame claiming
//!    another index, or a frame that opens at another block's place in any segment): then it is
//!    corruption too. A torn tail is cut, synced and reported. An all-zero rest of a file is
//!    space the writer reserved ahead, not damage.
//! 5. Corruption takes the stream offline: nothing is cut or removed, and the error names the
//!    file and offset. An inspection open still indexes every authentic block.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::crypto::TAG_LEN;

use super::block::record_size;
use super::block::{
    open_block, parse_body, BlockKind, BlockPlace, DelRange, FrameHeader, Sealer,
    FLAG_COMPACTION_COMPLETE, FRAME_HEADER_LEN, NO_WATERMARK, SYNC_MARKER,
};
use super::io::{SegmentFile, SegmentIo};
use super::segment::{parse_segment_file_name, SegmentHeader, StreamKeys, SEGMENT_HEADER_LEN};
use super::StoreError;

/// A durable position recorded outside the stream (the catalog's checkpoint): recovery treats
/// anything at or before it as covered, so a log cut below it is corruption, not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableMark {
    /// Segment id of the last durable block.
    pub segment_id: u64,
    /// Its block index.
    pub block_index: u64,
    /// The stream's last sequence at that point.
    pub last_seq: u64,
}

/// How to open.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecoverOptions {
    /// The externally recorded durable mark, if any.
    pub min_durable: Option<DurableMark>,
    /// Open a corrupt stream anyway (read-only inspection) instead of failing.
    pub inspect: bool,
    /// Never write (no torn-tail cut, no removals): for audits.
    pub read_only: bool,
}

/// One corruption finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// Segment file.
    pub file: PathBuf,
    /// Byte offset.
    pub offset: u64,
    /// Bytes affected (0 when unknown).
    pub len: u64,
    /// What is wrong.
    pub reason: String,
}

/// The torn tail that was (or, read-only, would be) cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Segment file.
    pub file: PathBuf,
    /// Where the cut is.
    pub offset: u64,
    /// Bytes dropped.
    pub bytes: u64,
    /// Blocks dropped (the final uncovered block; 0 when only header bytes were torn). Its
    /// message count cannot be known: the count is inside the ciphertext that did not open.
    /// None of its messages was acknowledged.
    pub blocks: u64,
}

/// Why recovery removed a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedReason {
    /// Below the stream base (an interrupted head drop or compaction cleanup).
    Obsolete,
    /// Output of a compaction that never completed.
    IncompleteCompaction,
    /// The last segment's creation was torn before any block became durable.
    TornCreation,
}

/// Everything recovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files scanned.
    pub segments_scanned: u64,
    /// Blocks that authenticated.
    pub blocks_verified: u64,
    /// Records in the live blocks.
    pub records: u64,
    /// The stream base segment.
    pub base_segment: u64,
    /// The torn tail, if one was cut.
    pub torn_tail: Option<TornTail>,
    /// Corruption (the stream is offline when non-empty).
    pub corruption: Vec<Corruption>,
    /// Segment files removed (or, read-only, to remove).
    pub removed: Vec<(PathBuf, RemovedReason)>,
}

/// A record found in a live block.
#[derive(Debug, Clone)]
pub struct ScannedRecord {
    /// Sequence.
    pub seq: u64,
    /// Timestamp.
    pub ts: i64,
    /// Subject.
    pub subject: Arc<str>,
    /// Stored size.
    pub size: u32,
    /// Index within its block.
    pub rec: u32,
}

/// An authentic block.
#[derive(Debug, Clone)]
pub struct ScannedBlock {
    /// Block index.
    pub index: u64,
    /// File offset.
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// Kind.
    pub kind: BlockKind,
    /// Flags.
    pub flags: u8,
    /// Tag.
    pub tag: [u8; TAG_LEN],
    /// Watermark.
    pub watermark: u64,
    /// Stream last sequence after it.
    pub last_seq: u64,
    /// Timestamp of that sequence.
    pub last_ts: i64,
    /// Asserted base.
    pub base_segment: u64,
    /// Its records within the segment's record list.
    pub records: Range<usize>,
    /// Its deletions.
    pub deletions: Vec<DelRange>,
}

#[derive(Debug)]
struct Damage {
    offset: u64,
    len: u64,
    reason: String,
    /// Index the scan expected at the damage.
    expected_index: u64,
}

/// One scanned segment.
#[derive(Debug)]
pub struct ScannedSegment {
    /// Segment id (from the file name).
    pub id: u64,
    /// Path.
    pub path: PathBuf,
    /// The header, when it authenticated.
    pub header: Option<SegmentHeader>,
    /// File length.
    pub file_len: u64,
    /// Authentic blocks in order.
    pub blocks: Vec<ScannedBlock>,
    /// Records of those blocks.
    pub records: Vec<ScannedRecord>,
    damage: Vec<Damage>,
    /// Damage running to the end of the file with no authentic block after it.
    tail: Option<Damage>,
    /// Bytes of the tail region (kept to look for blocks copied from elsewhere).
    tail_bytes: Vec<u8>,
    /// The last authentic block is a seal.
    pub sealed: bool,
    sealer: Option<Sealer>,
    /// Key version the blocks were opened with.
    pub dek_version: u32,
}

impl ScannedSegment {
    /// The end of the last authentic block (or of the header).
    pub fn valid_end(&self) -> u64 {
        self.blocks
            .last()
            .map_or(SEGMENT_HEADER_LEN as u64, |b| b.offset + b.len)
    }

    /// Takes the sealer (the file store keeps it for reads and writes).
    pub fn take_sealer(&mut self) -> Option<Sealer> {
        self.sealer.take()
    }
}

/// The result of recovery.
#[derive(Debug)]
pub struct Recovered {
    /// Findings.
    pub report: RecoveryReport,
    /// Live segments in chain order.
    pub live: Vec<ScannedSegment>,
    /// The stream base.
    pub base: u64,
    /// The next unused segment id.
    pub next_segment_id: u64,
}

fn corrupt(file: &Path, offset: u64, len: u64, reason: impl Into<String>) -> Corruption {
    Corruption {
        file: file.to_owned(),
        offset,
        len,
        reason: reason.into(),
    }
}

fn place(keys: &StreamKeys, seg: u64, dek_version: u32, index: u64, offset: u64) -> BlockPlace {
    BlockPlace {
        store_uuid: keys.store_uuid,
        stream_id: keys.stream_id,
        segment_id: seg,
        dek_version,
        index,
        offset,
    }
}

/// Opens the block at `off` in `data` (in place) if it authenticates at (`index`, `off`).
fn try_open(
    data: &mut [u8],
    off: usize,
    sealer: &Sealer,
    p: &BlockPlace,
) -> Option<(usize, Range<usize>)> {
    let fh = FrameHeader::parse(data.get(off..)?)?;
    let end = off.checked_add(fh.len as usize)?;
    let block = data.get_mut(off..end)?;
    let body = open_block(sealer, p, block).ok()?;
    Some((fh.len as usize, (off + body.start)..(off + body.end)))
}

/// Positions of sync markers in `data` at or after `from`.
fn sync_positions(data: &[u8], from: usize) -> impl Iterator<Item = usize> + '_ {
    let marker = SYNC_MARKER.to_le_bytes();
    data.windows(4)
        .enumerate()
        .skip(from)
        .filter(move |(_, w)| *w == marker)
        .map(|(i, _)| i)
}

/// Scans one segment file.
///
/// # Errors
/// I/O errors and a missing data key version.
fn scan_segment(
    io: &dyn SegmentIo,
    dir: &Path,
    name: &str,
    id: u64,
    keys: &StreamKeys,
    interner: &mut HashMap<String, Arc<str>>,
    buf: &mut Vec<u8>,
) -> Result<ScannedSegment, StoreError> {
    let path = dir.join(name);
    let ioerr = |op, e| StoreError::Io {
        file: path.clone(),
        op,
        source: e,
    };
    let file = io.open(&path, false).map_err(|e| ioerr("open", e))?;
    let file_len = file.len().map_err(|e| ioerr("stat", e))?;
    let len = usize::try_from(file_len).map_err(|_| {
        ioerr(
            "read",
            std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        )
    })?;
    // One buffer per scanning thread, reused from segment to segment: a fresh 64 MiB
    // allocation costs a page fault and a cleared page per 4 KiB (a fifth of an audit's time).
    // Not cleared first: the read overwrites every byte, and clearing made `resize` write
    // zeros over all of it again, segment after segment.
    buf.resize(len, 0);
    let data = buf.as_mut_slice();
    file.read_exact_at(data, 0).map_err(|e| ioerr("read", e))?;
    drop(file);

    let mut seg = ScannedSegment {
        id,
        path: path.clone(),
        header: None,
        file_len,
        blocks: Vec::new(),
        records: Vec::new(),
        damage: Vec::new(),
        tail: None,
        tail_bytes: Vec::new(),
        sealed: false,
        sealer: None,
        dek_version: keys.current_version(),
    };

    // The header: its MAC key depends on the id and key version it names.
    let hdr_bytes = data.get(..SEGMENT_HEADER_LEN);
    let mut header_reason = "segment header truncated";
    if let Some(hb) = hdr_bytes {
        match SegmentHeader::parse_unverified(hb) {
            Ok(h) => {
                let Some(sealer) = keys.sealer(id, h.dek_version) else {
                    // Unverifiable: either a rotation the caller has no key for, or a damaged
                    // version field. The blocks decide below.
                    let reason = "segment header names a data key version that is not available";
                    return scan_blocks_without_header(
                        seg,
                        data,
                        reason,
                        keys,
                        interner,
                        Some(h.dek_version),
                    );
                };
                if h.segment_id != id
                    || h.store_uuid != keys.store_uuid
                    || h.stream_id != keys.stream_id
                {
                    header_reason = "segment header names another segment, stream or store";
                } else if SegmentHeader::verify(hb, &sealer).is_ok() {
                    seg.header = Some(h);
                    seg.sealer = Some(sealer);
                } else {
                    header_reason = "segment header does not authenticate";
                }
            }
            Err(super::block::DecodeError::Malformed(r)) => header_reason = r,
            Err(_) => header_reason = "segment header does not authenticate",
        }
    }
    scan_blocks_without_header(seg, data, header_reason, keys, interner, None)
}

/// Looks for evidence that tail bytes are a block from elsewhere: a frame that opens at the
/// place of some other block (any segment of this stream, by its claimed index).
fn transplant_evidence(
    tail: &[u8],
    tail_off: u64,
    tail_seg: &ScannedSegment,
    segs: &[ScannedSegment],
    keys: &StreamKeys,
) -> Option<String> {
    let positions: Vec<usize> = sync_positions(tail, 0).collect();
    for &q in &positions {
        let Some(fh) = tail.get(q..).and_then(FrameHeader::parse) else {
            continue;
        };
        let Some(bytes) = tail.get(q..q + fh.len as usize) else {
            continue;
        };
        // Moved within the tail (two blocks swapped): it opens at another frame's position.
        if let (Some(h), Some(sealer)) = (&tail_seg.header, &tail_seg.sealer) {
            for &q2 in positions
                .iter()
                .chain(std::iter::once(&0))
                .filter(|q2| **q2 != q)
            {
                let mut copy = bytes.to_vec();
                let p = place(
                    keys,
                    tail_seg.id,
                    h.dek_version,
                    fh.index,
                    tail_off + q2 as u64,
                );
                if open_block(sealer, &p, &mut copy).is_ok() {
                    return Some(format!(
                        "block {} sits at offset {} but belongs at offset {} (swapped or moved block)",
                        fh.index,
                        tail_off + q as u64,
                        tail_off + q2 as u64
                    ));
                }
            }
        }
        for s in segs {
            let (Some(h), Some(sealer)) = (&s.header, &s.sealer) else {
                continue;
            };
            for b in s
                .blocks
                .iter()
                .filter(|b| b.index == fh.index && b.len == u64::from(fh.len))
            {
                let mut copy = bytes.to_vec();
                let p = place(keys, s.id, h.dek_version, b.index, b.offset);
                if open_block(sealer, &p, &mut copy).is_ok() {
                    return Some(format!(
                        "bytes at offset {} are a copy of block {} of segment {:016x} (offset {})",
                        tail_off + q as u64,
                        b.index,
                        s.id,
                        b.offset
                    ));
                }
            }
        }
    }
    None
}

/// Threads that scan one stream's segments at once: authenticating and decoding every block is
/// the cost of opening a stream (a server's start, an audit), and a large stream has many
/// 64 MiB segments. Each thread holds one segment's bytes while it scans it.
const SCAN_THREADS: usize = 2;

/// [`scan_segment`] of every segment in `ids` (in that order), on up to [`SCAN_THREADS`]
/// threads taking segments in turn; the first error in id order is returned.
fn scan_segments(
    io: &dyn SegmentIo,
    dir: &Path,
    ids: &[(u64, String)],
    keys: &StreamKeys,
) -> Result<Vec<ScannedSegment>, StoreError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(SCAN_THREADS)
        .min(ids.len());
    if threads <= 1 {
        let mut interner = HashMap::new();
        let mut buf = Vec::new();
        return ids
            .iter()
            .map(|(id, name)| scan_segment(io, dir, name, *id, keys, &mut interner, &mut buf))
            .collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let scan_some = || {
        // Subjects are shared within a thread's segments; the index interns them again.
        let mut interner = HashMap::new();
        let mut buf = Vec::new();
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some((id, name)) = ids.get(i) else {
                return done;
            };
            // The segment taken after this round's: read ahead while these are decrypted.
            if let Some((_, later)) = ids.get(i + threads) {
                io.will_read(&dir.join(later));
            }
            done.push((
                i,
                scan_segment(io, dir, name, *id, keys, &mut interner, &mut buf),
            ));
        }
    };
    let mut scanned: Vec<(usize, Result<ScannedSegment, StoreError>)> = std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|_| s.spawn(scan_some)).collect();
        let mut all = scan_some();
        for o in others {
            match o.join() {
                Ok(mut v) => all.append(&mut v),
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        all
    });
    scanned.sort_unstable_by_key(|(i, _)| *i);
    scanned.into_iter().map(|(_, r)| r).collect()
}

/// Scans and classifies a stream directory. Writes nothing.
///
/// # Errors
/// I/O errors and missing key versions (never corruption: that goes into the report).
pub fn scan(
    io: &dyn SegmentIo,
    dir: &Path,
    keys: &StreamKeys,
    opts: &RecoverOptions,
) -> Result<Recovered, StoreError> {
    let names = io.list_dir(dir).map_err(|e| StoreError::Io {
        file: dir.to_owned(),
        op: "list",
        source: e,
    })?;
    let mut ids: Vec<(u64, String)> = names
        .into_iter()
        .filter_map(|n| parse_segment_file_name(&n).map(|id| (id, n)))
        .collect();
    ids.sort_unstable();
    let mut report = RecoveryReport::default();
    let mut segs = scan_segments(io, dir, &ids, keys)?;
    report.segments_scanned = segs.len() as u64;
    report.blocks_verified = segs.iter().map(|s| s.blocks.len() as u64).sum();
    let next_segment_id = ids.last().map_or(1, |(id, _)| id + 1);

    // Torn creation: the highest segment lost its header and holds nothing past block 0.
    let mut torn_creation: Option<usize> = None;
    if let Some(last) = segs.last() {
        if last.header.is_none() && !last.blocks.iter().any(|b| b.index >= 1) {
            let covered = opts.min_durable.is_some_and(|m| m.segment_id >= last.id);
            if !covered {
                torn_creation = Some(segs.len() - 1);
            }
        }
    }
    for (i, s) in segs.iter().enumerate() {
        if s.header.is_none() && torn_creation != Some(i) {
            let d = s.damage.first();
            report.corruption.push(corrupt(
                &s.path,
                0,
                SEGMENT_HEADER_LEN as u64,
                d.map_or("segment header damaged".to_string(), |d| d.reason.clone()),
            ));
        }
    }

    // The stream base: the highest authentic assertion.
    let mut base = 0u64;
    for s in &segs {
        let Some(h) = &s.header else { continue };
        if !h.is_compaction_output() {
            base = base.max(h.base);
        }
        for b in &s.blocks {
            let asserts = match b.kind {
                BlockKind::Checkpoint => !h.is_compaction_output(),
                BlockKind::SegmentSeal => {
                    !h.is_compaction_output() || b.flags & FLAG_COMPACTION_COMPLETE != 0
                }
                _ => false,
            };
            if asserts {
                base = base.max(b.base_segment);
            }
        }
    }

    // Classify.
    let mut live_idx = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        if torn_creation == Some(i) {
            report
                .removed
                .push((s.path.clone(), RemovedReason::TornCreation));
            continue;
        }
        let Some(h) = &s.header else { continue };
        if s.id < base {
            report
                .removed
                .push((s.path.clone(), RemovedReason::Obsolete));
        } else if h.is_compaction_output() && h.base > base {
            report
                .removed
                .push((s.path.clone(), RemovedReason::IncompleteCompaction));
        } else {
            live_idx.push(i);
        }
    }
    // Segments with damaged headers that are not a torn creation stay in the chain check as
    // corruption above; the chain below only uses authentic headers.
    if let (Some(&first), true) = (live_idx.first(), base != 0) {
        if let Some(s) = segs.get(first) {
            if s.id != base {
                report.corruption.push(corrupt(
                    &s.path,
                    0,
                    0,
                    format!("stream base segment {base:016x} is missing"),
                ));
            }
        }
    } else if base != 0 {
        report.corruption.push(corrupt(
            &dir.join(super::segment::segment_file_name(base)),
            0,
            0,
            "stream base segment is missing",
        ));
    } else if !live_idx.is_empty() {
        if let Some(s) = live_idx.first().and_then(|i| segs.get(*i)) {
            report.corruption.push(corrupt(
                &s.path,
                0,
                0,
                "no segment establishes the stream base",
            ));
        }
    }
    for w in live_idx.windows(2) {
        let (Some(a), Some(b)) = (
            w.first().and_then(|i| segs.get(*i)),
            w.get(1).and_then(|i| segs.get(*i)),
        ) else {
            continue;
        };
        let prev = b.header.map_or(0, |h| h.prev_segment_id);
        if prev != a.id {
            report.corruption.push(corrupt(&b.path, 0, 0, format!("segment chain broken: follows {prev:016x}, but the previous segment present is {:016x} (a segment is missing)", a.id)));
        }
    }
    let last_live = live_idx.last().copied();
    for &i in &live_idx {
        let Some(s) = segs.get(i) else { continue };
        let is_last = Some(i) == last_live;
        for d in &s.damage {
            report
                .corruption
                .push(corrupt(&s.path, d.offset, d.len, d.reason.clone()));
        }
        if let Some(t) = &s.tail {
            if !is_last {
                report.corruption.push(corrupt(
                    &s.path,
                    t.offset,
                    t.len,
                    format!("{} (in a closed segment)", t.reason),
                ));
            } else if s.sealed {
                report.corruption.push(corrupt(
                    &s.path,
                    t.offset,
                    t.len,
                    "bytes after the segment seal",
                ));
            } else {
                let covered_by_mark = opts.min_durable.is_some_and(|m| {
                    m.segment_id > s.id
                        || (m.segment_id == s.id && m.block_index >= t.expected_index)
                });
                let covered_by_block = s
                    .blocks
                    .iter()
                    .any(|b| b.watermark != NO_WATERMARK && b.watermark >= t.expected_index);
                if covered_by_mark || covered_by_block {
                    report.corruption.push(corrupt(
                        &s.path,
                        t.offset,
                        t.len,
                        format!("{} (block was durable)", t.reason),
                    ));
                } else if let Some(ev) =
                    transplant_evidence(&s.tail_bytes, t.offset, s, &segs, keys)
                {
                    report
                        .corruption
                        .push(corrupt(&s.path, t.offset, t.len, ev));
                } else {
                    let blocks =
                        u64::from(t.len >= FRAME_HEADER_LEN as u64 || data_nonzero(&s.tail_bytes));
                    report.torn_tail = Some(TornTail {
                        file: s.path.clone(),
                        offset: t.offset,
                        bytes: t.len,
                        blocks,
                    });
                }
            }
        } else if !is_last && !s.sealed {
            report.corruption.push(corrupt(
                &s.path,
                s.valid_end(),
                0,
                "closed segment has no seal (truncated)",
            ));
        }
    }
    // The external durable mark must be inside what we have.
    if let Some(m) = opts.min_durable {
        let have = last_live
            .and_then(|i| segs.get(i))
            .map(|s| (s.id, s.blocks.last().map(|b| b.index)));
        let ok = match have {
            Some((id, Some(idx))) => {
                id > m.segment_id || (id == m.segment_id && idx >= m.block_index)
            }
            Some((id, None)) => id > m.segment_id,
            None => false,
        };
        if !ok {
            let file = last_live
                .and_then(|i| segs.get(i))
                .map_or(dir.to_owned(), |s| s.path.clone());
            report.corruption.push(corrupt(&file, 0, 0, format!(
                "log ends before the recorded durable mark (segment {:016x} block {}): truncated or rolled back",
                m.segment_id, m.block_index
            )));
        }
    }
    if opts.inspect {
        // Inspection reads every authentic block, also of segments whose header is damaged.
        for (i, s) in segs.iter().enumerate() {
            if s.header.is_none() && torn_creation != Some(i) && !s.blocks.is_empty() {
                live_idx.push(i);
            }
        }
        live_idx.sort_unstable();
        for &i in &live_idx {
            if let Some(s) = segs.get_mut(i) {
                if s.header.is_none() {
                    s.header = Some(SegmentHeader {
                        flags: 0,
                        store_uuid: keys.store_uuid,
                        stream_id: keys.stream_id,
                        segment_id: s.id,
                        dek_version: s.dek_version,
                        created: 0,
                        prev_segment_id: 0,
                        base: 0,
                    });
                }
            }
        }
    }
    report.base_segment = base;
    let mut live = Vec::with_capacity(live_idx.len());
    let mut keep: Vec<Option<ScannedSegment>> = segs.into_iter().map(Some).collect();
    for i in live_idx {
        if let Some(s) = keep.get_mut(i).and_then(Option::take) {
            live.push(s);
        }
    }
    report.records = live.iter().map(|s| s.records.len() as u64).sum();
    Ok(Recovered {
        report,
        live,
        base,
        next_segment_id,
    })
}

fn data_nonzero(b: &[u8]) -> bool {
    b.iter().any(|x| *x != 0)
}

/// Applies the repairs a clean scan calls for: cuts the torn tail (and syncs), removes
/// obsolete, incomplete and torn-creation segments. Removals are not directory-synced here:
/// the next segment creation syncs the directory, and until then a crash merely brings the
/// files back for the next recovery to remove again (their ids stay below the next id).
///
/// # Errors
/// I/O errors.
pub fn repair(io: &dyn SegmentIo, rec: &mut Recovered) -> Result<(), StoreError> {
    if let Some(t) = &rec.report.torn_tail {
        let ioerr = |op, e| StoreError::Io {
            file: t.file.clone(),
            op,
            source: e,
        };
        let f: Box<dyn SegmentFile> = io.open(&t.file, true).map_err(|e| ioerr("open", e))?;
        f.set_len(t.offset)
            .map_err(|e| ioerr("truncate torn tail", e))?;
        f.sync_data().map_err(|e| ioerr("fdatasync", e))?;
        if let Some(s) = rec.live.iter_mut().find(|s| s.path == t.file) {
            s.file_len = t.offset;
        }
        tracing::warn!(file = %t.file.display(), offset = t.offset, bytes = t.bytes, "recovery cut a torn tail (unacknowledged)");
    }
    for (path, why) in &rec.report.removed {
        match io.remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::Io {
                    file: path.clone(),
                    op: "remove",
                    source: e,
                })
            }
        }
        tracing::info!(file = %path.display(), reason = ?why, "recovery removed a segment");
    }
    Ok(())
}

/// The per-segment records and deletions of the live segments, in log order.
pub fn live_blocks(
    live: &[ScannedSegment],
) -> impl Iterator<Item = (&ScannedSegment, &ScannedBlock)> {
    live.iter()
        .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
}

/// First corruption as a [`StoreError`].
pub fn first_corruption(report: &RecoveryReport) -> Option<StoreError> {
    report.corruption.first().map(|c| StoreError::Corrupt {
        file: c.file.clone(),
        offset: c.offset,
        reason: c.reason.clone(),
    })
}

/// Scans the blocks of a segment (named `scan_blocks_without_header` because it also copes
/// with a missing or unverifiable header, when every available key version is tried).
fn scan_blocks_without_header(
    mut seg: ScannedSegment,
    data: &mut [u8],
    header_reason: &str,
    keys: &StreamKeys,
    interner: &mut HashMap<String, Arc<str>>,
    missing_version: Option<u32>,
) -> Result<ScannedSegment, StoreError> {
    let id = seg.id;
    let len = data.len();
    // Without a header, try every key version with the name's id: blocks bind the id in their
    // AAD, so authentic blocks after a damaged header prove the damage is not a torn creation.
    let candidates: Vec<(u32, Sealer)> = match (&seg.header, seg.sealer.take()) {
        (Some(h), Some(s)) => vec![(h.dek_version, s)],
        _ => {
            seg.damage.push(Damage {
                offset: 0,
                len: SEGMENT_HEADER_LEN as u64,
                reason: header_reason.into(),
                expected_index: 0,
            });
            keys.versions()
                .into_iter()
                .filter_map(|v| keys.sealer(id, v).map(|s| (v, s)))
                .collect()
        }
    };
    // With a damaged header, pick the key version under which some block authenticates.
    let mut chosen: Option<(u32, Sealer)> = None;
    let several = candidates.len() > 1;
    for (v, s) in candidates {
        let fits = !several
            || sync_positions(data, SEGMENT_HEADER_LEN).any(|q| {
                let Some(fh) = data.get(q..).and_then(FrameHeader::parse) else {
                    return false;
                };
                let Some(bytes) = data.get(q..q + fh.len as usize) else {
                    return false;
                };
                let mut copy = bytes.to_vec();
                open_block(&s, &place(keys, id, v, fh.index, q as u64), &mut copy).is_ok()
            });
        if fits || chosen.is_none() {
            let done = fits;
            chosen = Some((v, s));
            if done {
                break;
            }
        }
    }
    let Some((dek_version, sealer)) = chosen else {
        return Ok(seg);
    };
    seg.dek_version = dek_version;
    let mut off = SEGMENT_HEADER_LEN;
    let mut expected: u64 = 0;
    let mut prev_tag: Option<[u8; TAG_LEN]> = Some([0u8; TAG_LEN]);
    if seg.header.is_none() {
        prev_tag = None;
    }
    while off < len {
        // Space reserved ahead by the writer (`SegmentFile::reserve` extends the file with
        // zeros): an all-zero rest of the file holds nothing, it is not damage. A block never
        // starts with a zero byte (the sync marker), so this costs one byte per block.
        if data.get(off..).is_some_and(|rest| !data_nonzero(rest)) {
            break;
        }
        if seg.sealed {
            seg.damage.push(Damage {
                offset: off as u64,
                len: (len - off) as u64,
                reason: "bytes after the segment seal".into(),
                expected_index: expected,
            });
            break;
        }
        let p = place(keys, id, dek_version, expected, off as u64);
        let opened = try_open(data, off, &sealer, &p);
        let (blen, body_range, at, index) = match opened {
            Some((blen, body)) => (blen, body, off, expected),
            None => {
                // Resynchronise: the next sync marker whose frame authenticates where it is.
                let mut found = None;
                let positions: Vec<usize> = sync_positions(data, off + 1).collect();
                for q in positions {
                    let Some(fh) = data.get(q..).and_then(FrameHeader::parse) else {
                        continue;
                    };
                    let p = place(keys, id, dek_version, fh.index, q as u64);
                    if let Some((blen, body)) = try_open(data, q, &sealer, &p) {
                        found = Some((blen, body, q, fh.index));
                        break;
                    }
                }
                let reason = match data.get(off..).and_then(FrameHeader::parse) {
                    Some(fh) if fh.index != expected => {
                        format!("block at this offset claims index {} where index {expected} belongs (moved or replayed block)", fh.index)
                    }
                    Some(_) => format!("block {expected} does not authenticate"),
                    None => format!("no valid block frame where block {expected} belongs"),
                };
                match found {
                    Some((blen, body, q, index)) => {
                        seg.damage.push(Damage {
                            offset: off as u64,
                            len: (q - off) as u64,
                            reason,
                            expected_index: expected,
                        });
                        prev_tag = None;
                        (blen, body, q, index)
                    }
                    None => {
                        seg.tail = Some(Damage {
                            offset: off as u64,
                            len: (len - off) as u64,
                            reason,
                            expected_index: expected,
                        });
                        seg.tail_bytes = data.get(off..).unwrap_or(&[]).to_vec();
                        break;
                    }
                }
            }
        };
        let tag: [u8; TAG_LEN] = data
            .get(at + blen - TAG_LEN..at + blen)
            .and_then(|t| t.try_into().ok())
            .unwrap_or([0u8; TAG_LEN]);
        let body_bytes = data.get(body_range.clone()).unwrap_or(&[]);
        let body = match parse_body(body_bytes) {
            Ok(b) => b,
            Err(e) => {
                seg.damage.push(Damage {
                    offset: at as u64,
                    len: blen as u64,
                    reason: format!("authentic block with a malformed body: {e}"),
                    expected_index: index,
                });
                prev_tag = None;
                off = at + blen;
                expected = index + 1;
                continue;
            }
        };
        if let Some(pt) = prev_tag {
            if body.header.prev_tag != pt {
                seg.damage.push(Damage {
                    offset: at as u64,
                    len: blen as u64,
                    reason: format!("block {index} does not continue the segment's hash chain (from another history)"),
                    expected_index: index,
                    });
            }
        }
        if body.header.watermark != NO_WATERMARK && body.header.watermark >= index {
            seg.damage.push(Damage {
                offset: at as u64,
                len: blen as u64,
                reason: "watermark ahead of its own block".into(),
                expected_index: index,
            });
        }
        let rec_start = seg.records.len();
        for (i, r) in body.records.iter().enumerate() {
            let subj = body_bytes
                .get(r.subject.clone())
                .and_then(|s| std::str::from_utf8(s).ok())
                .unwrap_or("");
            let subject = match interner.get(subj) {
                Some(a) => Arc::clone(a),
                None => {
                    let a: Arc<str> = Arc::from(subj);
                    interner.insert(subj.to_owned(), Arc::clone(&a));
                    a
                }
            };
            let size = record_size(r.subject.len(), r.headers.len(), r.payload.len());
            seg.records.push(ScannedRecord {
                seq: r.seq,
                ts: r.ts,
                subject,
                size: u32::try_from(size).unwrap_or(u32::MAX),
                rec: u32::try_from(i).unwrap_or(u32::MAX),
            });
        }
        seg.blocks.push(ScannedBlock {
            index,
            offset: at as u64,
            len: blen as u64,
            kind: body.header.kind,
            flags: body.header.flags,
            tag,
            watermark: body.header.watermark,
            last_seq: body.header.last_seq,
            last_ts: body.header.last_ts,
            base_segment: body.header.base_segment,
            records: rec_start..seg.records.len(),
            deletions: body.deletions,
        });
        if body.header.kind == BlockKind::SegmentSeal {
            seg.sealed = true;
        }
        prev_tag = Some(tag);
        off = at + blen;
        expected = index + 1;
    }
    if let (None, Some(version), true) = (&seg.header, missing_version, seg.blocks.is_empty()) {
        return Err(StoreError::KeyUnavailable {
            segment: id,
            version,
        });
    }
    seg.sealer = Some(sealer);
    Ok(seg)
}
