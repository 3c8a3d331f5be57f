//! S2 framed streams: the compression nats-server's routes negotiate (spec/cluster.md §2.12).
//!
//! The stream is the Snappy framing format with its own identifier (`S2sTwO`): chunks of a type
//! byte, a 3-byte little-endian length and, for data, the masked CRC-32C of the decoded bytes.
//! S2 blocks are Snappy blocks with two additions, both handled by [`decode_block`]: blocks up
//! to 4 MiB, and "repeat" copies (a one-byte-offset copy whose offset is zero reuses the last
//! offset, its length bits then saying how many length bytes follow).
//!
//! [`Encoder`] writes Snappy blocks (every Snappy block is a valid S2 block), or plain chunks
//! for `s2_uncompressed`; [`Decoder`] reads S2 and Snappy streams. Neither does I/O: the route
//! writer feeds the encoder what it would have written, the route reader feeds the decoder
//! what it read, a chunk at a time, so a small input that claims a large output is decoded
//! only as fast as the parser consumes it.

use bytes::{Buf, BytesMut};

/// The stream identifier chunk every S2 stream starts with.
pub const STREAM_HEADER: &[u8] = b"\xff\x06\x00\x00S2sTwO";
/// The body of a Snappy stream's identifier (also accepted).
const SNAPPY_MAGIC: &[u8] = b"sNaPpY";
/// The largest decoded block S2 allows.
pub const MAX_BLOCK: usize = 4 << 20;
/// Input bytes per chunk the encoder writes.
pub const ENCODE_BLOCK: usize = 64 * 1024;

const CHUNK_COMPRESSED: u8 = 0x00;
const CHUNK_UNCOMPRESSED: u8 = 0x01;
const CHUNK_PADDING: u8 = 0xfe;
const CHUNK_STREAM_ID: u8 = 0xff;

/// What is wrong with an S2 stream (the route is closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum S2Error {
    /// The stream does not start with an S2 or Snappy identifier.
    #[error("not an S2 stream")]
    NotS2,
    /// A chunk type reserved as unskippable.
    #[error("unsupported S2 chunk type {0:#04x}")]
    ChunkType(u8),
    /// A block's elements do not decode to its stated length.
    #[error("corrupt S2 block")]
    Corrupt,
    /// A block larger than S2 allows.
    #[error("S2 block too large")]
    TooLarge,
    /// The decoded bytes do not match the chunk's checksum.
    #[error("S2 checksum mismatch")]
    Checksum,
}

/// The masked CRC-32C of `data`, as the framing format stores it.
fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    (c.rotate_right(15)).wrapping_add(0xa282_ead8)
}

fn put_chunk_header(out: &mut Vec<u8>, kind: u8, len: usize) {
    let len = u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes();
    out.push(kind);
    out.extend_from_slice(len.get(..3).unwrap_or(&[0, 0, 0]));
}

/// Turns plain bytes into an S2 stream.
pub struct Encoder {
    compress: bool,
    started: bool,
    snappy: snap::raw::Encoder,
    scratch: Vec<u8>,
}

impl Encoder {
    /// An encoder that compresses (`compress`) or writes plain chunks (`s2_uncompressed`).
    pub fn new(compress: bool) -> Self {
        Encoder {
            compress,
            started: false,
            snappy: snap::raw::Encoder::new(),
            scratch: Vec::new(),
        }
    }

    /// Appends `input`'s chunks to `out` (the stream identifier first, once).
    pub fn encode(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if !self.started {
            out.extend_from_slice(STREAM_HEADER);
            self.started = true;
        }
        for block in input.chunks(ENCODE_BLOCK) {
            let crc = masked_crc(block).to_le_bytes();
            if self.compress {
                self.scratch
                    .resize(snap::raw::max_compress_len(block.len()), 0);
                if let Ok(n) = self.snappy.compress(block, &mut self.scratch) {
                    if n < block.len() {
                        put_chunk_header(out, CHUNK_COMPRESSED, n + 4);
                        out.extend_from_slice(&crc);
                        out.extend_from_slice(self.scratch.get(..n).unwrap_or(&[]));
                        continue;
                    }
                }
            }
            put_chunk_header(out, CHUNK_UNCOMPRESSED, block.len() + 4);
            out.extend_from_slice(&crc);
            out.extend_from_slice(block);
        }
    }
}

/// Turns an S2 (or Snappy) stream back into plain bytes, one chunk at a time.
#[derive(Default)]
pub struct Decoder {
    input: BytesMut,
    started: bool,
    block: Vec<u8>,
}

impl Decoder {
    /// A decoder expecting the stream identifier first.
    pub fn new() -> Self {
        Decoder::default()
    }

    /// Adds bytes read from the peer.
    pub fn feed(&mut self, raw: &[u8]) {
        self.input.extend_from_slice(raw);
    }

    /// Bytes fed and not decoded yet.
    pub fn pending(&self) -> usize {
        self.input.len()
    }

    /// Decodes the next complete chunk onto `out`; `Ok(false)` when no complete chunk is
    /// buffered (feed more).
    ///
    /// # Errors
    /// An [`S2Error`] for a stream no S2 writer produces; the connection must close.
    pub fn decode_chunk(&mut self, out: &mut BytesMut) -> Result<bool, S2Error> {
        loop {
            let Some(header) = self.input.get(..4) else {
                return Ok(false);
            };
            let kind = header.first().copied().unwrap_or(0);
            let len = usize::from(header.get(1).copied().unwrap_or(0))
                | usize::from(header.get(2).copied().unwrap_or(0)) << 8
                | usize::from(header.get(3).copied().unwrap_or(0)) << 16;
            if !self.started && kind != CHUNK_STREAM_ID {
                return Err(S2Error::NotS2);
            }
            let Some(body) = self.input.get(4..4 + len) else {
                return Ok(false);
            };
            match kind {
                CHUNK_STREAM_ID => {
                    if Some(body) != STREAM_HEADER.get(4..) && body != SNAPPY_MAGIC {
                        return Err(S2Error::NotS2);
                    }
                    self.started = true;
                }
                CHUNK_COMPRESSED | CHUNK_UNCOMPRESSED => {
                    let (crc, data) = body.split_at_checked(4).ok_or(S2Error::Corrupt)?;
                    let want = u32::from_le_bytes(crc.try_into().map_err(|_| S2Error::Corrupt)?);
                    let start = out.len();
                    if kind == CHUNK_COMPRESSED {
                        decode_block(data, &mut self.block)?;
                        out.extend_from_slice(&self.block);
                    } else {
                        if data.len() > MAX_BLOCK {
                            return Err(S2Error::TooLarge);
                        }
                        out.extend_from_slice(data);
                    }
                    if masked_crc(out.get(start..).unwrap_or(&[])) != want {
                        return Err(S2Error::Checksum);
                    }
                    self.input.advance(4 + len);
                    return Ok(true);
                }
                CHUNK_PADDING | 0x80..=0xfd => {}
                other => return Err(S2Error::ChunkType(other)),
            }
            self.input.advance(4 + len);
        }
    }
}

/// Reads a little-endian base-128 length.
fn varint(src: &[u8]) -> Option<(usize, usize)> {
    let mut v: u64 = 0;
    for (i, b) in src.iter().take(10).enumerate() {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((usize::try_from(v).ok()?, i + 1));
        }
    }
    None
}

/// Little-endian integer of `bytes` (at most 4).
fn le(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rev()
        .fold(0usize, |acc, b| acc << 8 | usize::from(*b))
}

/// Decodes one S2 (or Snappy) block into `dst` (replacing its contents).
///
/// # Errors
/// [`S2Error::Corrupt`] or [`S2Error::TooLarge`].
pub fn decode_block(src: &[u8], dst: &mut Vec<u8>) -> Result<(), S2Error> {
    let (len, mut s) = varint(src).ok_or(S2Error::Corrupt)?;
    if len > MAX_BLOCK {
        return Err(S2Error::TooLarge);
    }
    dst.clear();
    dst.reserve(len);
    let take = |s: usize, n: usize| src.get(s..s + n).ok_or(S2Error::Corrupt);
    let mut offset = 0usize;
    while s < src.len() {
        let tag = src.get(s).copied().ok_or(S2Error::Corrupt)?;
        let length = match tag & 0x03 {
            0 => {
                let x = usize::from(tag >> 2);
                let (n, extra) = match x {
                    0..=59 => (x, 0),
                    _ => {
                        let extra = x - 59;
                        (le(take(s + 1, extra)?), extra)
                    }
                };
                s += 1 + extra;
                let lit = take(s, n + 1)?;
                if dst.len() + lit.len() > len {
                    return Err(S2Error::Corrupt);
                }
                dst.extend_from_slice(lit);
                s += n + 1;
                continue;
            }
            1 => {
                let b = take(s + 1, 1)?;
                let toffset = usize::from(tag & 0xe0) << 3 | le(b);
                let bits = usize::from(tag >> 2 & 0x07);
                s += 2;
                let length = if toffset == 0 {
                    // A repeat: the last offset again; bits 5..7 say how many bytes of
                    // length follow.
                    match bits {
                        5 => {
                            let l = le(take(s, 1)?) + 4;
                            s += 1;
                            l
                        }
                        6 => {
                            let l = le(take(s, 2)?) + (1 << 8);
                            s += 2;
                            l
                        }
                        7 => {
                            let l = le(take(s, 3)?) + (1 << 16);
                            s += 3;
                            l
                        }
                        b => b,
                    }
                } else {
                    offset = toffset;
                    bits
                };
                length + 4
            }
            2 => {
                let o = take(s + 1, 2)?;
                offset = le(o);
                s += 3;
                1 + usize::from(tag >> 2)
            }
            _ => {
                let o = take(s + 1, 4)?;
                offset = le(o);
                s += 5;
                1 + usize::from(tag >> 2)
            }
        };
        if offset == 0 || offset > dst.len() || dst.len() + length > len {
            return Err(S2Error::Corrupt);
        }
        let from = dst.len() - offset;
        if offset >= length {
            dst.extend_from_within(from..from + length);
        } else {
            for i in 0..length {
                let b = dst.get(from + i).copied().ok_or(S2Error::Corrupt)?;
                dst.push(b);
            }
        }
    }
    if dst.len() != len {
        return Err(S2Error::Corrupt);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn roundtrip(compress: bool, input: &[u8]) {
        let mut enc = Encoder::new(compress);
        let mut wire = Vec::new();
        enc.encode(input, &mut wire);
        enc.encode(input, &mut wire);
        // Fed a byte at a time, as a socket may hand it over.
        let mut dec = Decoder::new();
        let mut out = BytesMut::new();
        for b in &wire {
            dec.feed(std::slice::from_ref(b));
            while dec.decode_chunk(&mut out).unwrap() {}
        }
        assert_eq!(out.len(), input.len() * 2);
        assert_eq!(&out[..input.len()], input);
        assert_eq!(&out[input.len()..], input);
    }

    #[test]
    fn streams_round_trip_compressed_and_plain() {
        let text: Vec<u8> = b"RMSG $G orders.new 5\r\nhello\r\n"
            .iter()
            .copied()
            .cycle()
            .take(200_000)
            .collect();
        roundtrip(true, &text);
        roundtrip(false, &text);
        let noise: Vec<u8> = (0..100_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        roundtrip(true, &noise);
        roundtrip(true, b"");
        let mut enc = Encoder::new(true);
        let mut wire = Vec::new();
        enc.encode(&text, &mut wire);
        assert!(wire.len() < text.len() / 4, "{}", wire.len());
        assert!(wire.starts_with(STREAM_HEADER));
    }

    #[test]
    fn repeat_copies_decode() {
        // "abcd" literal, a copy (offset 4, length 8), then a repeat of offset 4 for 9 bytes
        // (bits 5: one length byte, 9 - 8 = 1).
        let block = [
            21u8, // varint 21
            3 << 2,
            b'a',
            b'b',
            b'c',
            b'd', // literal of 4
            0x01 | (4 << 2),
            4, // copy1: length 8, offset 4
            0x01 | (5 << 2),
            0,
            1, // repeat: length 1 + 4 + 4 = 9
        ];
        let mut dst = Vec::new();
        decode_block(&block, &mut dst).unwrap();
        assert_eq!(dst, b"abcdabcdabcdabcdabcda");
    }

    #[test]
    fn corrupt_streams_are_errors_not_panics() {
        let mut dec = Decoder::new();
        dec.feed(b"\x00\x05\x00\x00xxxxx");
        assert_eq!(dec.decode_chunk(&mut BytesMut::new()), Err(S2Error::NotS2));
        let mut enc = Encoder::new(true);
        let mut wire = Vec::new();
        enc.encode(b"some bytes some bytes some bytes", &mut wire);
        let last = wire.len() - 1;
        wire[last] ^= 0x40;
        let mut dec = Decoder::new();
        dec.feed(&wire);
        assert!(dec.decode_chunk(&mut BytesMut::new()).is_err());
        let mut dec = Decoder::new();
        dec.feed(STREAM_HEADER);
        dec.feed(b"\x02\x01\x00\x00x");
        assert_eq!(
            dec.decode_chunk(&mut BytesMut::new()),
            Err(S2Error::ChunkType(2))
        );
        for bad in [
            &[][..],
            &[5, 0x01, 0][..],
            &[0xff, 0xff, 0xff, 0xff, 0x7f][..],
            &[3, 0x0e, 1][..],
        ] {
            assert!(decode_block(bad, &mut Vec::new()).is_err(), "{bad:?}");
        }
    }
}
