//! The sealed block: the unit of authentication and of fsync (one group commit = one block).
//!
//! ```text
//! frame:  sync u32 = 0x5EA1B10C | len u32 (whole block) | index u64 | nonce [24]
//!         | ciphertext of the body | tag [16]
//! AAD:    "sealstream block v1" || format_version u32 || store_uuid [16] || stream_id [16]
//!         || segment_id u64 || dek_version u32 || index u64 || file_offset u64 || len u32
//! body:   header (72 B, see [`BodyHeader`]) | records | deletion ranges | zero padding
//! record: seq_delta u32 | ts i64 | subject_len u16 | header_len u32 | payload_len u32
//!         | subject | headers | payload
//! ```
//!
//! Everything here is pure: encoding into a buffer, parsing with a checked [`Reader`], sealing
//! and opening in place. Lengths are checked before any slice is taken or buffer allocated;
//! a body that fails any check is rejected whole (no partial records are ever returned).
//! Integers are fixed-width little-endian. `docs/storage-format.md` has the byte tables.

use std::ops::Range;

use crate::crypto::{SealKey, NONCE_LEN, TAG_LEN};

/// The sync marker that starts every block.
pub const SYNC_MARKER: u32 = 0x5EA1_B10C;
/// The storage format version (in segment headers and in every block's AAD).
pub const FORMAT_VERSION: u32 = 1;
/// Domain separation prefix of the block AAD.
pub const AAD_DOMAIN: &[u8] = b"sealstream block v1";
/// Bytes of the plaintext frame before the ciphertext: sync, len, index, nonce.
pub const FRAME_HEADER_LEN: usize = 4 + 4 + 8 + NONCE_LEN;
/// Bytes a block adds around its body: frame header and tag.
pub const BLOCK_OVERHEAD: usize = FRAME_HEADER_LEN + TAG_LEN;
/// Bytes of the fixed body header.
pub const BODY_HEADER_LEN: usize = 72;
/// Bytes of a record's fixed part (before subject, headers and payload).
pub const RECORD_HEADER_LEN: usize = 4 + 8 + 2 + 4 + 4;
/// Bytes of one deletion range.
pub const DEL_RANGE_LEN: usize = 16;
/// The largest block accepted (recovery refuses longer frames before allocating).
pub const MAX_BLOCK_LEN: u32 = 80 << 20;
/// The smallest well-formed block: frame, empty body header, tag.
pub const MIN_BLOCK_LEN: u32 = (BLOCK_OVERHEAD + BODY_HEADER_LEN) as u32;
/// Watermark value meaning "no block of this segment is known durable yet".
pub const NO_WATERMARK: u64 = u64::MAX;
/// Seal-block flag: this seal completes a compaction run (its `base_segment` becomes the base).
pub const FLAG_COMPACTION_COMPLETE: u8 = 0x01;

/// What a block carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    /// New messages (and possibly deletions the same commit caused, e.g. discard-old limits).
    Data = 1,
    /// Deletions only (delete, purge, expiry, limits).
    Tombstone = 2,
    /// Idle checkpoint: covers every earlier block of the segment; may raise the stream base.
    Checkpoint = 3,
    /// Last block of a closed segment: chain value, block count, last sequence.
    SegmentSeal = 4,
    /// Filler with no content (accepted by recovery, never produced today).
    Pad = 5,
}

impl BlockKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => BlockKind::Data,
            2 => BlockKind::Tombstone,
            3 => BlockKind::Checkpoint,
            4 => BlockKind::SegmentSeal,
            5 => BlockKind::Pad,
            _ => return None,
        })
    }
}

/// The fixed header at the start of every block body.
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 1 | kind |
/// | 1 | 1 | flags |
/// | 2 | 2 | reserved, 0 |
/// | 4 | 4 | record count |
/// | 8 | 8 | first_seq (first record; checkpoint/seal: the stream's first sequence) |
/// | 16 | 16 | prev_tag: tag of the previous block of the segment (zeros for block 0) |
/// | 32 | 8 | watermark: index of the last block of this segment known durable |
/// | 40 | 8 | last_seq: the stream's last assigned sequence after this block |
/// | 48 | 8 | last_ts: timestamp of that sequence (unix nanos) |
/// | 56 | 4 | deletion range count |
/// | 60 | 4 | reserved, 0 |
/// | 64 | 8 | base_segment: lowest live segment id asserted by this block (0 = no claim) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyHeader {
    /// Block kind.
    pub kind: BlockKind,
    /// Kind-specific flags.
    pub flags: u8,
    /// Number of records.
    pub count: u32,
    /// Sequence of the first record (checkpoint/seal: the stream's first sequence).
    pub first_seq: u64,
    /// Tag of the previous block in this segment (hash chain).
    pub prev_tag: [u8; TAG_LEN],
    /// Index of the last block of this segment known durable ([`NO_WATERMARK`] if none).
    pub watermark: u64,
    /// The stream's last assigned sequence once this block applies.
    pub last_seq: u64,
    /// Timestamp of `last_seq`.
    pub last_ts: i64,
    /// Number of deletion ranges.
    pub del_count: u32,
    /// Asserted stream base segment (0: no assertion).
    pub base_segment: u64,
}

/// One message inside a body, as ranges into the body plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRef {
    /// Stream sequence.
    pub seq: u64,
    /// Timestamp (unix nanos).
    pub ts: i64,
    /// Subject bytes (valid UTF-8, checked).
    pub subject: Range<usize>,
    /// Header bytes (empty: no headers).
    pub headers: Range<usize>,
    /// Payload bytes.
    pub payload: Range<usize>,
}

/// A run of deleted sequences `[start, start + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelRange {
    /// First deleted sequence.
    pub start: u64,
    /// How many.
    pub len: u64,
}

/// A parsed body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// The fixed header.
    pub header: BodyHeader,
    /// The records, in sequence order.
    pub records: Vec<RecordRef>,
    /// The deletions, applied after the records.
    pub deletions: Vec<DelRange>,
}

/// Why bytes are not a well-formed block or body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A field is out of range or the structure does not add up; names the problem.
    #[error("malformed block: {0}")]
    Malformed(&'static str),
    /// The block did not authenticate (wrong key, wrong position, edited bytes).
    #[error("block does not authenticate")]
    Unauthentic,
}

/// A checked reader over untrusted bytes (rustls `Reader` style): every take is bounded.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Bytes left.
    pub fn left(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// The remaining bytes, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }
    /// Takes `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    /// Takes `n` bytes and returns their range in the underlying buffer.
    pub fn take_range(&mut self, n: usize) -> Option<Range<usize>> {
        let start = self.pos;
        self.take(n)?;
        Some(start..self.pos)
    }
    /// Takes a fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    /// Takes a byte.
    pub fn u8(&mut self) -> Option<u8> {
        Some(u8::from_le_bytes(self.array::<1>()?))
    }
    /// Takes a little-endian u16.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.array()?))
    }
    /// Takes a little-endian u32.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.array()?))
    }
    /// Takes a little-endian u64.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.array()?))
    }
    /// Takes a little-endian i64.
    pub fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.array()?))
    }
}

/// Where a block sits: everything its AAD binds besides its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPlace {
    /// Store id.
    pub store_uuid: [u8; 16],
    /// Stream id.
    pub stream_id: [u8; 16],
    /// Segment id.
    pub segment_id: u64,
    /// Version of the stream's data key the segment is sealed with.
    pub dek_version: u32,
    /// Block index within the segment.
    pub index: u64,
    /// Byte offset of the block in the segment file.
    pub offset: u64,
}

impl BlockPlace {
    /// The AAD for a block of `len` bytes at this place.
    pub fn aad(&self, len: u32) -> Vec<u8> {
        let mut aad = Vec::with_capacity(AAD_DOMAIN.len() + 4 + 16 + 16 + 8 + 4 + 8 + 8 + 4);
        aad.extend_from_slice(AAD_DOMAIN);
        aad.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        aad.extend_from_slice(&self.store_uuid);
        aad.extend_from_slice(&self.stream_id);
        aad.extend_from_slice(&self.segment_id.to_le_bytes());
        aad.extend_from_slice(&self.dek_version.to_le_bytes());
        aad.extend_from_slice(&self.index.to_le_bytes());
        aad.extend_from_slice(&self.offset.to_le_bytes());
        aad.extend_from_slice(&len.to_le_bytes());
        aad
    }
}

/// Seals and opens block bodies: a segment key, or (bench builds only) nothing at all.
pub enum Sealer {
    /// XChaCha20-Poly1305 under a segment key.
    Key(SealKey),
    /// No encryption, no authentication: only for measuring what sealing costs.
    #[cfg(feature = "bench-unsealed")]
    #[doc(hidden)]
    Null,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

impl Sealer {
    /// Seals `buf` in place.
    pub fn seal_in_place(&self, aad: &[u8], buf: &mut [u8]) -> ([u8; NONCE_LEN], [u8; TAG_LEN]) {
        match self {
            Sealer::Key(k) => k.seal_in_place(aad, buf),
            #[cfg(feature = "bench-unsealed")]
            Sealer::Null => {
                let mut n = [0u8; NONCE_LEN];
                crate::crypto::random_bytes(&mut n);
                (n, [0u8; TAG_LEN])
            }
        }
    }

    /// Opens `buf` in place.
    ///
    /// # Errors
    /// [`DecodeError::Unauthentic`].
    pub fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), DecodeError> {
        match self {
            Sealer::Key(k) => k
                .open_in_place(nonce, aad, buf, tag)
                .map_err(|_| DecodeError::Unauthentic),
            #[cfg(feature = "bench-unsealed")]
            Sealer::Null => {
                let _ = (nonce, aad, buf);
                if tag == &[0u8; TAG_LEN] {
                    Ok(())
                } else {
                    Err(DecodeError::Unauthentic)
                }
            }
        }
    }
}

/// The plaintext frame header of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Whole block length.
    pub len: u32,
    /// Claimed block index (authenticated through the AAD).
    pub index: u64,
    /// The nonce.
    pub nonce: [u8; NONCE_LEN],
}

impl FrameHeader {
    /// Parses a frame header; `None` unless the sync marker is there and the length is sane.
    pub fn parse(bytes: &[u8]) -> Option<FrameHeader> {
        let mut r = Reader::new(bytes);
        if r.u32()? != SYNC_MARKER {
            return None;
        }
        let len = r.u32()?;
        let index = r.u64()?;
        let nonce = r.array::<NONCE_LEN>()?;
        if !(MIN_BLOCK_LEN..=MAX_BLOCK_LEN).contains(&len) {
            return None;
        }
        Some(FrameHeader { len, index, nonce })
    }
}

/// Builds one block: body header, records, deletions, padding; then seals it in place.
///
/// The buffer starts with room for the frame header so sealing needs no copy.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    header: BodyHeader,
    last_rec_seq: Option<u64>,
    deletions: Vec<DelRange>,
}

/// A sealed block ready to be written.
#[derive(Debug)]
pub struct SealedBlock {
    /// The whole block.
    pub bytes: Vec<u8>,
    /// Its tag (the next block's `prev_tag`).
    pub tag: [u8; TAG_LEN],
    /// Offset of the body within `bytes`.
    pub body_offset: usize,
    /// Body length (without frame and tag).
    pub body_len: usize,
}

impl BlockBuilder {
    /// Starts a block with `header` (its `count` and `del_count` are filled in by the builder).
    pub fn new(header: BodyHeader, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(FRAME_HEADER_LEN + BODY_HEADER_LEN + capacity + TAG_LEN);
        buf.resize(FRAME_HEADER_LEN + BODY_HEADER_LEN, 0);
        BlockBuilder {
            buf,
            header,
            last_rec_seq: None,
            deletions: Vec::new(),
        }
    }

    /// The body bytes so far, including the fixed header and records (not deletions).
    pub fn body_len(&self) -> usize {
        self.buf.len() - FRAME_HEADER_LEN + self.deletions.len() * DEL_RANGE_LEN
    }

    /// Number of records so far.
    pub fn records(&self) -> u32 {
        self.header.count
    }

    /// Whether `seq` can follow the last record (the delta fits in a u32).
    pub fn can_take(&self, seq: u64) -> bool {
        match self.last_rec_seq {
            None => true,
            Some(prev) => seq > prev && seq - prev <= u64::from(u32::MAX),
        }
    }

    /// Appends a record; returns its index within the block.
    ///
    /// # Errors
    /// [`DecodeError::Malformed`] when a length does not fit its field or `seq` does not follow
    /// the previous record (callers check [`BlockBuilder::can_take`] and the message limits first).
    pub fn push_record(
        &mut self,
        seq: u64,
        ts: i64,
        subject: &str,
        headers: &[u8],
        payload: &[u8],
    ) -> Result<u32, DecodeError> {
        let delta = match self.last_rec_seq {
            None => {
                self.header.first_seq = seq;
                0u32
            }
            Some(prev) if seq > prev => u32::try_from(seq - prev)
                .map_err(|_| DecodeError::Malformed("sequence gap too large for one block"))?,
            Some(_) => return Err(DecodeError::Malformed("records out of order")),
        };
        let subj_len =
            u16::try_from(subject.len()).map_err(|_| DecodeError::Malformed("subject too long"))?;
        let hdr_len =
            u32::try_from(headers.len()).map_err(|_| DecodeError::Malformed("headers too long"))?;
        let pay_len =
            u32::try_from(payload.len()).map_err(|_| DecodeError::Malformed("payload too long"))?;
        self.buf.extend_from_slice(&delta.to_le_bytes());
        self.buf.extend_from_slice(&ts.to_le_bytes());
        self.buf.extend_from_slice(&subj_len.to_le_bytes());
        self.buf.extend_from_slice(&hdr_len.to_le_bytes());
        self.buf.extend_from_slice(&pay_len.to_le_bytes());
        self.buf.extend_from_slice(subject.as_bytes());
        self.buf.extend_from_slice(headers);
        self.buf.extend_from_slice(payload);
        self.last_rec_seq = Some(seq);
        let idx = self.header.count;
        self.header.count += 1;
        Ok(idx)
    }

    /// Adds a deleted sequence, merging with the previous range when adjacent.
    pub fn push_deletion(&mut self, seq: u64) {
        if let Some(last) = self.deletions.last_mut() {
            if last.start.checked_add(last.len) == Some(seq) {
                last.len += 1;
                return;
            }
        }
        self.deletions.push(DelRange { start: seq, len: 1 });
    }

    /// Number of deletion ranges so far.
    pub fn deletion_ranges(&self) -> usize {
        self.deletions.len()
    }

    /// Sets the stream's last sequence and timestamp recorded in the header.
    pub fn set_last(&mut self, last_seq: u64, last_ts: i64) {
        self.header.last_seq = last_seq;
        self.header.last_ts = last_ts;
    }

    /// Pads the body so the whole block is a multiple of `bucket` bytes, then seals it for
    /// `place` (the place's `index` goes into the frame).
    ///
    /// # Errors
    /// [`DecodeError::Malformed`] when the block would exceed [`MAX_BLOCK_LEN`] or a count
    /// does not fit its field.
    pub fn seal(
        mut self,
        sealer: &Sealer,
        place: &BlockPlace,
        bucket: u32,
    ) -> Result<SealedBlock, DecodeError> {
        self.header.del_count = u32::try_from(self.deletions.len())
            .map_err(|_| DecodeError::Malformed("too many deletion ranges"))?;
        for d in &self.deletions {
            self.buf.extend_from_slice(&d.start.to_le_bytes());
            self.buf.extend_from_slice(&d.len.to_le_bytes());
        }
        let unpadded = self.buf.len() + TAG_LEN;
        let bucket = bucket.max(1) as usize;
        let total = unpadded.div_ceil(bucket) * bucket;
        self.buf.resize(total - TAG_LEN, 0);
        let len = u32::try_from(total).map_err(|_| DecodeError::Malformed("block too long"))?;
        if len > MAX_BLOCK_LEN {
            return Err(DecodeError::Malformed("block too long"));
        }
        let h = encode_body_header(&self.header);
        if let Some(dst) = self
            .buf
            .get_mut(FRAME_HEADER_LEN..FRAME_HEADER_LEN + BODY_HEADER_LEN)
        {
            dst.copy_from_slice(&h);
        }
        let aad = place.aad(len);
        let body_len = self.buf.len() - FRAME_HEADER_LEN;
        let (nonce, tag) = match self.buf.get_mut(FRAME_HEADER_LEN..) {
            Some(body) => sealer.seal_in_place(&aad, body),
            None => return Err(DecodeError::Malformed("block buffer too short")),
        };
        let frame = frame_header(len, place.index, &nonce);
        if let Some(dst) = self.buf.get_mut(..FRAME_HEADER_LEN) {
            dst.copy_from_slice(&frame);
        }
        self.buf.extend_from_slice(&tag);
        Ok(SealedBlock {
            bytes: self.buf,
            tag,
            body_offset: FRAME_HEADER_LEN,
            body_len,
        })
    }
}

/// The plaintext frame header of a block of `len` bytes at `index`, sealed with `nonce`.
fn frame_header(len: u32, index: u64, nonce: &[u8; NONCE_LEN]) -> [u8; FRAME_HEADER_LEN] {
    let mut frame = [0u8; FRAME_HEADER_LEN];
    let mut w = Writer(&mut frame, 0);
    w.put(&SYNC_MARKER.to_le_bytes());
    w.put(&len.to_le_bytes());
    w.put(&index.to_le_bytes());
    w.put(nonce);
    frame
}

struct Writer<'a>(&'a mut [u8], usize);

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        if let Some(dst) = self.0.get_mut(self.1..self.1 + b.len()) {
            dst.copy_from_slice(b);
        }
        self.1 += b.len();
    }
}

fn encode_body_header(h: &BodyHeader) -> [u8; BODY_HEADER_LEN] {
    let mut out = [0u8; BODY_HEADER_LEN];
    let mut w = Writer(&mut out, 0);
    w.put(&[h.kind as u8, h.flags, 0, 0]);
    w.put(&h.count.to_le_bytes());
    w.put(&h.first_seq.to_le_bytes());
    w.put(&h.prev_tag);
    w.put(&h.watermark.to_le_bytes());
    w.put(&h.last_seq.to_le_bytes());
    w.put(&h.last_ts.to_le_bytes());
    w.put(&h.del_count.to_le_bytes());
    w.put(&0u32.to_le_bytes());
    w.put(&h.base_segment.to_le_bytes());
    out
}

fn parse_body_header(r: &mut Reader<'_>) -> Result<BodyHeader, DecodeError> {
    let m = DecodeError::Malformed("body header truncated");
    let kind =
        BlockKind::from_u8(r.u8().ok_or(m)?).ok_or(DecodeError::Malformed("unknown block kind"))?;
    let flags = r.u8().ok_or(m)?;
    if r.u16().ok_or(m)? != 0 {
        return Err(DecodeError::Malformed("reserved header bytes not zero"));
    }
    let count = r.u32().ok_or(m)?;
    let first_seq = r.u64().ok_or(m)?;
    let prev_tag = r.array::<TAG_LEN>().ok_or(m)?;
    let watermark = r.u64().ok_or(m)?;
    let last_seq = r.u64().ok_or(m)?;
    let last_ts = r.i64().ok_or(m)?;
    let del_count = r.u32().ok_or(m)?;
    if r.u32().ok_or(m)? != 0 {
        return Err(DecodeError::Malformed("reserved header bytes not zero"));
    }
    let base_segment = r.u64().ok_or(m)?;
    Ok(BodyHeader {
        kind,
        flags,
        count,
        first_seq,
        prev_tag,
        watermark,
        last_seq,
        last_ts,
        del_count,
        base_segment,
    })
}

/// Parses an opened body. Rejects anything that does not add up: truncated records,
/// sequences out of order, subjects that are not UTF-8, counts larger than the body.
///
/// # Errors
/// [`DecodeError::Malformed`].
pub fn parse_body(body: &[u8]) -> Result<Body, DecodeError> {
    let mut r = Reader::new(body);
    let header = parse_body_header(&mut r)?;
    // Each record takes at least its fixed part: bound the count before allocating.
    if (header.count as usize).saturating_mul(RECORD_HEADER_LEN) > r.left()
        || (header.del_count as usize).saturating_mul(DEL_RANGE_LEN) > r.left()
    {
        return Err(DecodeError::Malformed("count larger than the body"));
    }
    let mut records = Vec::with_capacity(header.count as usize);
    let mut seq = header.first_seq;
    let m = DecodeError::Malformed("record truncated");
    for i in 0..header.count {
        let delta = r.u32().ok_or(m)?;
        if i == 0 && delta != 0 {
            return Err(DecodeError::Malformed("first record delta not zero"));
        }
        if i > 0 && delta == 0 {
            return Err(DecodeError::Malformed("records out of order"));
        }
        seq = seq
            .checked_add(u64::from(delta))
            .ok_or(DecodeError::Malformed("sequence overflow"))?;
        let ts = r.i64().ok_or(m)?;
        let subj_len = r.u16().ok_or(m)? as usize;
        let hdr_len = r.u32().ok_or(m)? as usize;
        let pay_len = r.u32().ok_or(m)? as usize;
        let subject = r.take_range(subj_len).ok_or(m)?;
        let headers = r.take_range(hdr_len).ok_or(m)?;
        let payload = r.take_range(pay_len).ok_or(m)?;
        let subj_bytes = body.get(subject.clone()).ok_or(m)?;
        if subj_bytes.is_empty() || std::str::from_utf8(subj_bytes).is_err() {
            return Err(DecodeError::Malformed("subject empty or not UTF-8"));
        }
        records.push(RecordRef {
            seq,
            ts,
            subject,
            headers,
            payload,
        });
    }
    if header.count > 0 && seq > header.last_seq {
        return Err(DecodeError::Malformed(
            "record beyond the block's last sequence",
        ));
    }
    let mut deletions = Vec::with_capacity(header.del_count as usize);
    for _ in 0..header.del_count {
        let start = r.u64().ok_or(m)?;
        let len = r.u64().ok_or(m)?;
        if len == 0 || start.checked_add(len).is_none() {
            return Err(DecodeError::Malformed(
                "empty or overflowing deletion range",
            ));
        }
        deletions.push(DelRange { start, len });
    }
    if r.rest().iter().any(|b| *b != 0) {
        return Err(DecodeError::Malformed("padding not zero"));
    }
    Ok(Body {
        header,
        records,
        deletions,
    })
}

/// Opens a whole block read from `place` (its `index` is the one expected there): checks the
/// frame, authenticates, and returns the body range within `block` (decrypted in place).
///
/// # Errors
/// [`DecodeError::Malformed`] for a bad frame, [`DecodeError::Unauthentic`] when the seal
/// does not open. On error `block` holds no plaintext.
pub fn open_block(
    sealer: &Sealer,
    place: &BlockPlace,
    block: &mut [u8],
) -> Result<Range<usize>, DecodeError> {
    let frame = FrameHeader::parse(block).ok_or(DecodeError::Malformed("bad frame header"))?;
    if frame.len as usize != block.len() {
        return Err(DecodeError::Malformed("frame length does not match"));
    }
    if frame.index != place.index {
        return Err(DecodeError::Malformed(
            "frame index does not match its position",
        ));
    }
    let tag_at = block.len() - TAG_LEN;
    let tag: [u8; TAG_LEN] = block
        .get(tag_at..)
        .and_then(|t| t.try_into().ok())
        .ok_or(DecodeError::Malformed("block too short"))?;
    let aad = place.aad(frame.len);
    let body = block
        .get_mut(FRAME_HEADER_LEN..tag_at)
        .ok_or(DecodeError::Malformed("block too short"))?;
    if let Err(e) = sealer.open_in_place(&frame.nonce, &aad, body, &tag) {
        super::metrics::METRICS.auth_failure();
        return Err(e);
    }
    Ok(FRAME_HEADER_LEN..tag_at)
}

/// Where a body holds the tag of the block before it ([`BodyHeader::prev_tag`]).
const PREV_TAG_IN_BODY: Range<usize> = 16..32;

/// The chain link of a block [`open_block`] opened: the tag its body names as the previous
/// block's.
pub fn opened_prev_tag(block: &[u8]) -> Option<[u8; TAG_LEN]> {
    block
        .get(FRAME_HEADER_LEN..)
        .and_then(|body| body.get(PREV_TAG_IN_BODY))
        .and_then(|t| t.try_into().ok())
}

/// Seals a block [`open_block`] opened again, for `place` under `sealer` (another data key),
/// its body unchanged but for the chain link `prev_tag`; the block keeps its length, so every
/// record stays where it was. Returns the new tag.
///
/// # Errors
/// [`DecodeError::Malformed`] when `block` is not a whole block of its frame's length.
pub fn reseal_opened(
    sealer: &Sealer,
    place: &BlockPlace,
    block: &mut [u8],
    prev_tag: [u8; TAG_LEN],
) -> Result<[u8; TAG_LEN], DecodeError> {
    let len = u32::try_from(block.len()).map_err(|_| DecodeError::Malformed("block too long"))?;
    if block.len() < MIN_BLOCK_LEN as usize {
        return Err(DecodeError::Malformed("block too short"));
    }
    let tag_at = block.len() - TAG_LEN;
    let body = block
        .get_mut(FRAME_HEADER_LEN..tag_at)
        .ok_or(DecodeError::Malformed("block too short"))?;
    body.get_mut(PREV_TAG_IN_BODY)
        .ok_or(DecodeError::Malformed("block too short"))?
        .copy_from_slice(&prev_tag);
    let (nonce, tag) = sealer.seal_in_place(&place.aad(len), body);
    let frame = frame_header(len, place.index, &nonce);
    if let Some(dst) = block.get_mut(..FRAME_HEADER_LEN) {
        dst.copy_from_slice(&frame);
    }
    if let Some(dst) = block.get_mut(tag_at..) {
        dst.copy_from_slice(&tag);
    }
    Ok(tag)
}

/// The tag of a whole block (its last 16 bytes).
pub fn block_tag(block: &[u8]) -> Option<[u8; TAG_LEN]> {
    block
        .len()
        .checked_sub(TAG_LEN)
        .and_then(|at| block.get(at..))
        .and_then(|t| t.try_into().ok())
}

/// The stored size of a message, as limits and state count it: the record's bytes.
///
/// The figure is nats-server's file-store accounting (subject + payload + 30, plus headers + 4
/// when there are headers), not our record's size on disk: `max_bytes` limits and the `bytes`
/// clients see then mean the same thing on both servers.
pub fn record_size(subject_len: usize, headers_len: usize, payload_len: usize) -> u64 {
    let hdr = if headers_len > 0 { headers_len + 4 } else { 0 };
    (subject_len + payload_len + hdr + 30) as u64
}

#[cfg(test)]
#[expect(
    clippy::indexing_slicing,
    reason = "tests index fixtures they just built"
)]
mod tests {
    use super::*;
    use crate::crypto::Secret;

    fn place(index: u64, offset: u64) -> BlockPlace {
        BlockPlace {
            store_uuid: [1; 16],
            stream_id: [2; 16],
            segment_id: 3,
            dek_version: 1,
            index,
            offset,
        }
    }

    fn header(kind: BlockKind) -> BodyHeader {
        BodyHeader {
            kind,
            flags: 0,
            count: 0,
            first_seq: 0,
            prev_tag: [9; 16],
            watermark: NO_WATERMARK,
            last_seq: 0,
            last_ts: 0,
            del_count: 0,
            base_segment: 0,
        }
    }

    fn sample(sealer: &Sealer, bucket: u32) -> SealedBlock {
        let mut b = BlockBuilder::new(header(BlockKind::Data), 64);
        b.push_record(10, 111, "a.b", b"", b"hello").unwrap();
        b.push_record(11, 112, "c", b"NATS/1.0\r\n\r\n", b"")
            .unwrap();
        b.push_deletion(3);
        b.push_deletion(4);
        b.push_deletion(7);
        b.set_last(11, 112);
        b.seal(sealer, &place(5, 128), bucket).unwrap()
    }

    #[test]
    fn blocks_round_trip_and_pad_to_the_bucket() {
        let sealer = Sealer::Key(SealKey::new(Secret::random()));
        let sb = sample(&sealer, 256);
        assert_eq!(sb.bytes.len() % 256, 0);
        let mut bytes = sb.bytes.clone();
        let r = open_block(&sealer, &place(5, 128), &mut bytes).unwrap();
        let body = parse_body(&bytes[r.clone()]).unwrap();
        assert_eq!(body.header.count, 2);
        assert_eq!(body.header.last_seq, 11);
        assert_eq!(body.header.prev_tag, [9; 16]);
        assert_eq!(body.records[1].seq, 11);
        let b = &bytes[r];
        assert_eq!(&b[body.records[0].payload.clone()], b"hello");
        assert_eq!(&b[body.records[1].subject.clone()], b"c");
        assert_eq!(
            body.deletions,
            vec![DelRange { start: 3, len: 2 }, DelRange { start: 7, len: 1 }]
        );
        assert_eq!(block_tag(&sb.bytes), Some(sb.tag));
    }

    #[test]
    fn a_block_opens_only_at_its_own_place() {
        let sealer = Sealer::Key(SealKey::new(Secret::random()));
        let sb = sample(&sealer, 1);
        let moves = [
            BlockPlace {
                offset: 129,
                ..place(5, 128)
            },
            BlockPlace {
                segment_id: 4,
                ..place(5, 128)
            },
            BlockPlace {
                stream_id: [3; 16],
                ..place(5, 128)
            },
            BlockPlace {
                store_uuid: [3; 16],
                ..place(5, 128)
            },
            BlockPlace {
                dek_version: 2,
                ..place(5, 128)
            },
        ];
        for p in moves {
            let mut bytes = sb.bytes.clone();
            assert!(open_block(&sealer, &p, &mut bytes).is_err(), "{p:?}");
        }
        let mut bytes = sb.bytes.clone();
        assert!(open_block(&sealer, &place(6, 128), &mut bytes).is_err());
    }

    #[test]
    fn every_bit_flip_is_rejected() {
        let sealer = Sealer::Key(SealKey::new(Secret::random()));
        let sb = sample(&sealer, 1);
        for bit in 0..sb.bytes.len() * 8 {
            let mut bytes = sb.bytes.clone();
            bytes[bit / 8] ^= 1 << (bit % 8);
            assert!(
                open_block(&sealer, &place(5, 128), &mut bytes).is_err(),
                "bit {bit}"
            );
        }
    }

    #[test]
    fn malformed_bodies_are_rejected_without_panics() {
        // Random bytes, truncations and oversized counts: never a panic.
        let sealer = Sealer::Key(SealKey::new(Secret::random()));
        let sb = sample(&sealer, 1);
        let mut bytes = sb.bytes.clone();
        let r = open_block(&sealer, &place(5, 128), &mut bytes).unwrap();
        let body = bytes[r].to_vec();
        for cut in 0..body.len() {
            let _ = parse_body(&body[..cut]);
        }
        let mut big = body.clone();
        big[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_body(&big).is_err());
        let mut pad = body.clone();
        pad.push(1);
        assert!(parse_body(&pad).is_err());
    }

    #[test]
    fn frame_lengths_outside_the_bounds_are_refused() {
        let mut f = [0u8; FRAME_HEADER_LEN];
        f[..4].copy_from_slice(&SYNC_MARKER.to_le_bytes());
        f[4..8].copy_from_slice(&(MAX_BLOCK_LEN + 1).to_le_bytes());
        assert!(FrameHeader::parse(&f).is_none());
        f[4..8].copy_from_slice(&3u32.to_le_bytes());
        assert!(FrameHeader::parse(&f).is_none());
        f[4..8].copy_from_slice(&MIN_BLOCK_LEN.to_le_bytes());
        assert!(FrameHeader::parse(&f).is_some());
    }
}
