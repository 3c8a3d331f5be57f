//! Segment files: the 128-byte MAC'd header, file names, per-segment keys, and the writer that
//! appends sealed blocks to the active segment.
//!
//! ```text
//! off size field
//!   0    8 magic "SEALSEG1"
//!   8    4 format_version (1)
//!  12    4 flags (bit 0: compaction output)
//!  16   16 store_uuid
//!  32   16 stream_id
//!  48    8 segment_id
//!  56    4 dek_version
//!  60    4 reserved (0)
//!  64    8 created (unix nanos)
//!  72    8 prev_segment_id (0: first of its chain)
//!  80    8 base: normal segment: the stream base segment it asserts;
//!              compaction output: the first segment id of its compaction run
//!  88   24 nonce  } MAC-only seal: XChaCha20-Poly1305 of the empty plaintext,
//! 112   16 tag    } AAD = bytes 0..88, under the segment key
//! ```
//!
//! File names are `seg-<segment_id:016x>.log`: nothing but the id. The writer never writes a
//! header alone: a new segment's header goes out in the same write as its first block, so a
//! segment exists on disk only together with a block (or as a torn creation recovery removes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::crypto::{DataKey, NONCE_LEN, TAG_LEN};

use super::block::{
    BlockKind, BlockPlace, BodyHeader, DecodeError, FrameHeader, Reader, SealedBlock, Sealer,
    FORMAT_VERSION, FRAME_HEADER_LEN, NO_WATERMARK,
};
use super::io::{SegmentFile, SegmentIo};

/// Segment magic.
pub const SEGMENT_MAGIC: &[u8; 8] = b"SEALSEG1";
/// Segment header length.
pub const SEGMENT_HEADER_LEN: usize = 128;
/// Header bytes the MAC covers.
pub const SEGMENT_HEADER_FIELDS: usize = 88;
/// Header flag: the segment was written by a compaction run.
pub const FLAG_COMPACTION_OUTPUT: u32 = 0x1;

/// The file name of a segment.
pub fn segment_file_name(id: u64) -> String {
    format!("seg-{id:016x}.log")
}

/// The id in a segment file name, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("seg-")?.strip_suffix(".log")?;
    if hex.len() != 16
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A stream's identity and data keys: what the store-wide layer hands to a stream.
pub struct StreamKeys {
    /// Store id.
    pub store_uuid: [u8; 16],
    /// Stream id.
    pub stream_id: [u8; 16],
    current: u32,
    deks: BTreeMap<u32, DataKey>,
    #[cfg(feature = "bench-unsealed")]
    unsealed: bool,
}

impl std::fmt::Debug for StreamKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamKeys")
            .field("current", &self.current)
            .field("versions", &self.deks.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl StreamKeys {
    /// The keys of stream `stream_id` in store `store_uuid`; new segments use `dek` at
    /// `dek_version`.
    pub fn new(store_uuid: [u8; 16], stream_id: [u8; 16], dek_version: u32, dek: DataKey) -> Self {
        let mut deks = BTreeMap::new();
        deks.insert(dek_version, dek);
        StreamKeys {
            store_uuid,
            stream_id,
            current: dek_version,
            deks,
            #[cfg(feature = "bench-unsealed")]
            unsealed: false,
        }
    }

    /// Adds an older data key version, for segments written before a rotation.
    pub fn with_previous(mut self, dek_version: u32, dek: DataKey) -> Self {
        self.deks.entry(dek_version).or_insert(dek);
        self
    }

    /// Makes `dek` at `dek_version` the key of new segments (a data-key rotation); the
    /// older versions stay, to read what they sealed.
    pub fn rotate(&mut self, dek_version: u32, dek: DataKey) {
        self.deks.insert(dek_version, dek);
        self.current = dek_version;
    }

    /// Forgets every version but the current one (once nothing is sealed with them).
    pub fn keep_only_current(&mut self) {
        let current = self.current;
        self.deks.retain(|v, _| *v == current);
    }

    /// The key version new segments are sealed with.
    pub fn current_version(&self) -> u32 {
        self.current
    }

    /// The sealer for a segment sealed under `dek_version`, if that key is available.
    pub fn sealer(&self, segment_id: u64, dek_version: u32) -> Option<Sealer> {
        #[cfg(feature = "bench-unsealed")]
        if self.unsealed {
            return Some(Sealer::Null);
        }
        self.deks
            .get(&dek_version)
            .map(|k| Sealer::Key(k.segment_key(&self.stream_id, segment_id)))
    }

    /// The key versions available.
    pub fn versions(&self) -> Vec<u32> {
        self.deks.keys().copied().collect()
    }

    /// Bench only: sealing replaced by a no-op (no confidentiality, no integrity).
    #[cfg(feature = "bench-unsealed")]
    #[doc(hidden)]
    pub fn insecure_unsealed_for_bench(mut self) -> Self {
        self.unsealed = true;
        self
    }
}

/// A segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Flags ([`FLAG_COMPACTION_OUTPUT`]).
    pub flags: u32,
    /// Store id.
    pub store_uuid: [u8; 16],
    /// Stream id.
    pub stream_id: [u8; 16],
    /// Segment id.
    pub segment_id: u64,
    /// Data key version.
    pub dek_version: u32,
    /// Creation time (unix nanos).
    pub created: i64,
    /// The previous segment of the chain (0: none).
    pub prev_segment_id: u64,
    /// Asserted base (normal) or compaction run start (compaction output).
    pub base: u64,
}

impl SegmentHeader {
    /// Whether a compaction wrote this segment.
    pub fn is_compaction_output(&self) -> bool {
        self.flags & FLAG_COMPACTION_OUTPUT != 0
    }

    fn fields(&self) -> [u8; SEGMENT_HEADER_FIELDS] {
        let mut out = [0u8; SEGMENT_HEADER_FIELDS];
        let parts: [&[u8]; 11] = [
            SEGMENT_MAGIC,
            &FORMAT_VERSION.to_le_bytes(),
            &self.flags.to_le_bytes(),
            &self.store_uuid,
            &self.stream_id,
            &self.segment_id.to_le_bytes(),
            &self.dek_version.to_le_bytes(),
            &0u32.to_le_bytes(),
            &self.created.to_le_bytes(),
            &self.prev_segment_id.to_le_bytes(),
            &self.base.to_le_bytes(),
        ];
        let mut at = 0;
        for p in parts {
            if let Some(dst) = out.get_mut(at..at + p.len()) {
                dst.copy_from_slice(p);
            }
            at += p.len();
        }
        out
    }

    /// Encodes and MACs the header.
    pub fn encode(&self, sealer: &Sealer) -> [u8; SEGMENT_HEADER_LEN] {
        let fields = self.fields();
        let (nonce, tag) = sealer.seal_in_place(&fields, &mut []);
        let mut out = [0u8; SEGMENT_HEADER_LEN];
        let (a, rest) = out.split_at_mut(SEGMENT_HEADER_FIELDS);
        a.copy_from_slice(&fields);
        let (n, t) = rest.split_at_mut(NONCE_LEN);
        n.copy_from_slice(&nonce);
        t.copy_from_slice(&tag);
        out
    }

    /// Parses the fields without checking the MAC (the MAC key depends on `segment_id` and
    /// `dek_version`). Checks magic and version.
    ///
    /// # Errors
    /// [`DecodeError::Malformed`].
    pub fn parse_unverified(bytes: &[u8]) -> Result<SegmentHeader, DecodeError> {
        let m = DecodeError::Malformed("segment header truncated");
        let mut r = Reader::new(bytes);
        if r.take(8).ok_or(m)? != SEGMENT_MAGIC {
            return Err(DecodeError::Malformed("bad segment magic"));
        }
        if r.u32().ok_or(m)? != FORMAT_VERSION {
            return Err(DecodeError::Malformed("unknown segment format version"));
        }
        let flags = r.u32().ok_or(m)?;
        let store_uuid = r.array().ok_or(m)?;
        let stream_id = r.array().ok_or(m)?;
        let segment_id = r.u64().ok_or(m)?;
        let dek_version = r.u32().ok_or(m)?;
        let _reserved = r.u32().ok_or(m)?;
        let created = r.i64().ok_or(m)?;
        let prev_segment_id = r.u64().ok_or(m)?;
        let base = r.u64().ok_or(m)?;
        Ok(SegmentHeader {
            flags,
            store_uuid,
            stream_id,
            segment_id,
            dek_version,
            created,
            prev_segment_id,
            base,
        })
    }

    /// Checks the header's MAC with `sealer` (which must be the segment key of the id and key
    /// version in the header) and that the encoding is canonical.
    ///
    /// # Errors
    /// [`DecodeError`].
    pub fn verify(bytes: &[u8], sealer: &Sealer) -> Result<SegmentHeader, DecodeError> {
        let h = Self::parse_unverified(bytes)?;
        let fields = bytes
            .get(..SEGMENT_HEADER_FIELDS)
            .ok_or(DecodeError::Malformed("segment header truncated"))?;
        if fields != h.fields() {
            return Err(DecodeError::Malformed(
                "segment header reserved bytes not zero",
            ));
        }
        let mut r = Reader::new(bytes.get(SEGMENT_HEADER_FIELDS..).unwrap_or(&[]));
        let nonce: [u8; NONCE_LEN] = r
            .array()
            .ok_or(DecodeError::Malformed("segment header truncated"))?;
        let tag: [u8; TAG_LEN] = r
            .array()
            .ok_or(DecodeError::Malformed("segment header truncated"))?;
        sealer.open_in_place(&nonce, fields, &mut [], &tag)?;
        Ok(h)
    }
}

/// Why a block write did not happen or did not complete.
#[derive(Debug)]
pub enum WriteFail {
    /// No space was available; nothing is visible (any partial bytes were cut again).
    NoSpace(std::io::Error),
    /// The write or sync failed: the store must be poisoned.
    Io(&'static str, std::io::Error),
}

/// Extra space reserved beyond every block so the segment seal always fits.
pub const SEAL_RESERVE: u64 = 1024;

/// The active (writable) segment.
#[derive(Debug)]
pub struct SegmentWriter {
    /// Segment id.
    pub id: u64,
    /// File path.
    pub path: PathBuf,
    /// The segment header.
    pub header: SegmentHeader,
    file: std::sync::Arc<dyn SegmentFile>,
    sealer: Sealer,
    /// Index of the next block.
    pub next_index: u64,
    /// Offset where the next block goes.
    pub end: u64,
    reserved_end: u64,
    /// The file is written (with zeros) up to here: appends below it are overwrites.
    zeroed_end: u64,
    /// Tag of the last block (zeros before the first).
    pub last_tag: [u8; TAG_LEN],
    /// Index of the last block known durable.
    pub durable: Option<u64>,
    /// The header still has to go out with the first block.
    header_pending: Option<[u8; SEGMENT_HEADER_LEN]>,
    /// A segment seal was written.
    pub sealed: bool,
}

impl SegmentWriter {
    /// Creates a new segment file (not yet durable: its header is written with the first
    /// block, and the directory must be synced after that block's sync).
    ///
    /// # Errors
    /// The OS error from creating the file.
    pub fn create(
        io: &dyn SegmentIo,
        dir: &Path,
        header: SegmentHeader,
        sealer: Sealer,
    ) -> std::io::Result<SegmentWriter> {
        let path = dir.join(segment_file_name(header.segment_id));
        let file = std::sync::Arc::from(io.create_new(&path)?);
        let bytes = header.encode(&sealer);
        Ok(SegmentWriter {
            id: header.segment_id,
            path,
            header,
            file,
            sealer,
            next_index: 0,
            end: SEGMENT_HEADER_LEN as u64,
            reserved_end: 0,
            zeroed_end: 0,
            last_tag: [0u8; TAG_LEN],
            durable: None,
            header_pending: Some(bytes),
            sealed: false,
        })
    }

    /// Continues an existing segment (recovery found it intact and unsealed).
    #[expect(
        clippy::too_many_arguments,
        reason = "recovery hands over every piece of the segment's state"
    )]
    pub fn resume(
        file: std::sync::Arc<dyn SegmentFile>,
        path: PathBuf,
        header: SegmentHeader,
        sealer: Sealer,
        next_index: u64,
        end: u64,
        last_tag: [u8; TAG_LEN],
        sealed: bool,
    ) -> SegmentWriter {
        SegmentWriter {
            id: header.segment_id,
            path,
            header,
            file,
            sealer,
            next_index,
            end,
            reserved_end: end,
            zeroed_end: end,
            last_tag,
            durable: next_index.checked_sub(1),
            header_pending: None,
            sealed,
        }
    }

    /// Whether this segment's creation is not durable yet (the next write creates it).
    pub fn is_new(&self) -> bool {
        self.header_pending.is_some()
    }

    /// The sealer of this segment.
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// The file (for reads).
    pub fn file(&self) -> &dyn SegmentFile {
        self.file.as_ref()
    }

    /// The same open file, for readers that outlive the writer (one descriptor per segment).
    pub fn shared_file(&self) -> std::sync::Arc<dyn SegmentFile> {
        std::sync::Arc::clone(&self.file)
    }

    /// The place of the next block.
    pub fn place(&self) -> BlockPlace {
        BlockPlace {
            store_uuid: self.header.store_uuid,
            stream_id: self.header.stream_id,
            segment_id: self.id,
            dek_version: self.header.dek_version,
            index: self.next_index,
            offset: self.end,
        }
    }

    /// A body header for the next block (chain and watermark filled in).
    pub fn body_header(&self, kind: BlockKind, last_seq: u64, last_ts: i64) -> BodyHeader {
        BodyHeader {
            kind,
            flags: 0,
            count: 0,
            first_seq: 0,
            prev_tag: self.last_tag,
            watermark: self.durable.unwrap_or(NO_WATERMARK),
            last_seq,
            last_ts,
            del_count: 0,
            base_segment: 0,
        }
    }

    /// Reserves space for a block of `len` bytes (plus room for the seal), growing the
    /// reservation ahead by as much as the segment already holds — at least
    /// [`MIN_RESERVE_STEP`], at most `chunk` — so a quiet stream reserves kilobytes, not
    /// `chunk` (10,000 KV buckets must not hold 40 GB of reservations), and a busy one soon
    /// reserves a whole `chunk` at a time.
    ///
    /// # Errors
    /// [`WriteFail::NoSpace`] on `ENOSPC`; other errors as [`WriteFail::Io`].
    pub fn reserve(&mut self, len: u64, chunk: u64) -> Result<(), WriteFail> {
        let need = self.end + len + SEAL_RESERVE;
        self.reserve_space(need, chunk)?;
        self.zero_ahead(need)
    }

    /// Writes zeros ahead of the next blocks, from [`MIN_ZERO_STEP`] up to [`MAX_ZERO_STEP`]
    /// at a time as the segment grows. An append over written zeros changes neither the
    /// file's size nor its extents, so the `fdatasync` that makes it durable writes the data
    /// and no inode: on this project's ext4 machine p50 188 → 124 µs and p90 208 → 140 µs per
    /// 1 KiB append (space from `fallocate` alone is "unwritten" and converting it costs the
    /// same as growing the file). Recovery reads an all-zero rest of a file as unused space.
    fn zero_ahead(&mut self, need: u64) -> Result<(), WriteFail> {
        if need <= self.zeroed_end {
            return Ok(());
        }
        // A new segment's header goes out with its first block, at offset 0.
        let from = if self.header_pending.is_some() {
            self.zeroed_end
        } else {
            self.zeroed_end.max(self.end)
        };
        let step = self.end.clamp(MIN_ZERO_STEP, MAX_ZERO_STEP);
        let mut to = need.max(from + step);
        if self.reserved_end >= need {
            // Inside what was reserved, when the file system reserves.
            to = to.min(self.reserved_end).max(need);
        }
        match self.file.zero_fill(from, to - from) {
            Ok(()) => {
                self.zeroed_end = to;
                Ok(())
            }
            Err(e) if is_enospc(&e) => Err(WriteFail::NoSpace(e)),
            Err(e) => Err(WriteFail::Io("zero fill", e)),
        }
    }

    fn reserve_space(&mut self, need: u64, chunk: u64) -> Result<(), WriteFail> {
        if need <= self.reserved_end {
            return Ok(());
        }
        let step = self.end.clamp(MIN_RESERVE_STEP.min(chunk), chunk);
        let mut target = need.max(self.reserved_end + step);
        let mut res = self
            .file
            .reserve(self.reserved_end, target - self.reserved_end);
        if matches!(&res, Err(e) if is_enospc(e)) && target > need {
            // Retry just what is needed before giving up.
            target = need;
            res = self
                .file
                .reserve(self.reserved_end, target - self.reserved_end);
        }
        match res {
            Ok(true) => {
                self.reserved_end = target;
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) if is_enospc(&e) => Err(WriteFail::NoSpace(e)),
            Err(e) => Err(WriteFail::Io("reserve", e)),
        }
    }

    /// Writes a sealed block at the end (with the header, for a new segment). Not durable until
    /// [`SegmentWriter::sync`].
    ///
    /// # Errors
    /// [`WriteFail::NoSpace`] when `ENOSPC` hit and the partial bytes could be cut again;
    /// [`WriteFail::Io`] otherwise.
    pub fn write_block(&mut self, block: &SealedBlock) -> Result<(), WriteFail> {
        let res = match &self.header_pending {
            Some(h) => {
                let mut buf = Vec::with_capacity(SEGMENT_HEADER_LEN + block.bytes.len());
                buf.extend_from_slice(h);
                buf.extend_from_slice(&block.bytes);
                self.file.write_all_at(&buf, 0)
            }
            None => self.file.write_all_at(&block.bytes, self.end),
        };
        match res {
            Ok(()) => Ok(()),
            Err(e) if is_enospc(&e) => {
                // Nothing was synced or acknowledged: cut whatever part landed and carry on.
                let keep = if self.header_pending.is_some() {
                    0
                } else {
                    self.end
                };
                match self.file.set_len(keep) {
                    Ok(()) => Err(WriteFail::NoSpace(e)),
                    Err(e2) => Err(WriteFail::Io("truncate after ENOSPC", e2)),
                }
            }
            Err(e) => Err(WriteFail::Io("write", e)),
        }
    }

    /// Best effort after a failed write or sync: cut the file back to the last committed
    /// block, so a restart without power loss does not find the failed (unacknowledged) block
    /// in the page cache. Errors are ignored: the store is poisoned either way.
    pub fn discard_uncommitted(&self) {
        let keep = if self.header_pending.is_some() {
            0
        } else {
            self.end
        };
        let _ = self.file.set_len(keep);
    }

    /// Gives back the space reserved past the last block (after the seal: nothing more will
    /// be appended). Best effort and not synced: a crash leaves the zeros, which recovery
    /// reads as unused space.
    pub fn release_reservation(&mut self) {
        // Also after a restart, when the zeros predate this writer.
        if self.header_pending.is_none() {
            let _ = self.file.set_len(self.end);
        }
        self.reserved_end = self.end;
        self.zeroed_end = self.end;
    }

    /// `fdatasync`.
    ///
    /// # Errors
    /// [`WriteFail::Io`].
    pub fn sync(&self) -> Result<(), WriteFail> {
        self.file
            .sync_data()
            .map_err(|e| WriteFail::Io("fdatasync", e))
    }

    /// Records that `block` was written and synced at the next place.
    pub fn commit(&mut self, block: &SealedBlock) {
        self.header_pending = None;
        self.end += block.bytes.len() as u64;
        self.last_tag = block.tag;
        self.durable = Some(self.next_index);
        self.next_index += 1;
    }
}

/// Whether an I/O error is `ENOSPC`.
pub fn is_enospc(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(nix::libc::ENOSPC) || e.kind() == std::io::ErrorKind::StorageFull
}

/// The least a segment's reservation grows by (see [`SegmentWriter::reserve`]).
pub const MIN_RESERVE_STEP: u64 = 64 << 10;
/// Zeros written ahead at a time by a new segment (one page: a quiet stream writes little).
pub const MIN_ZERO_STEP: u64 = 4 << 10;
/// Zeros written ahead at a time by a busy segment (its next sync flushes them too).
pub const MAX_ZERO_STEP: u64 = 256 << 10;

/// Reads one whole block at `offset` of `file` (frame length checked before allocating).
///
/// # Errors
/// The I/O error, or `InvalidData` for a bad frame header.
pub fn read_block(file: &dyn SegmentFile, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut fh = [0u8; FRAME_HEADER_LEN];
    file.read_exact_at(&mut fh, offset)?;
    let frame = FrameHeader::parse(&fh)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
    let mut buf = vec![0u8; frame.len as usize];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

#[cfg(test)]
#[expect(
    clippy::indexing_slicing,
    reason = "tests index fixtures they just built"
)]
mod tests {
    use super::*;
    use crate::crypto::{SealKey, Secret};

    fn header() -> SegmentHeader {
        SegmentHeader {
            flags: 0,
            store_uuid: [1; 16],
            stream_id: [2; 16],
            segment_id: 7,
            dek_version: 1,
            created: 123,
            prev_segment_id: 6,
            base: 1,
        }
    }

    #[test]
    fn headers_round_trip_and_every_bit_is_authenticated() {
        let s = Sealer::Key(SealKey::new(Secret::random()));
        let bytes = header().encode(&s);
        assert_eq!(SegmentHeader::verify(&bytes, &s).unwrap(), header());
        for bit in 0..SEGMENT_HEADER_LEN * 8 {
            let mut b = bytes;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(SegmentHeader::verify(&b, &s).is_err(), "bit {bit}");
        }
        let other = Sealer::Key(SealKey::new(Secret::random()));
        assert!(SegmentHeader::verify(&bytes, &other).is_err());
    }

    #[test]
    fn file_names_carry_only_the_id() {
        assert_eq!(segment_file_name(0x1f), "seg-000000000000001f.log");
        assert_eq!(
            parse_segment_file_name("seg-000000000000001f.log"),
            Some(0x1f)
        );
        assert_eq!(parse_segment_file_name("seg-000000000000001F.log"), None);
        assert_eq!(parse_segment_file_name("seg-1f.log"), None);
        assert_eq!(parse_segment_file_name("x"), None);
    }
}
