//! Checked little-endian byte reading and writing for the metadata formats.
//!
//! [`Reader`] never indexes: every take is checked and returns a short `&'static str` reason on
//! failure, which callers wrap into a precise error naming the file and offset. Integers on
//! disk are fixed-width little-endian, always.

/// A cursor over untrusted bytes; every read is bounds-checked.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Why a read failed (short, static, for error messages).
pub(crate) type CodecResult<T> = Result<T, &'static str>;

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Takes the next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> CodecResult<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or("length overflow")?;
        let out = self.buf.get(self.pos..end).ok_or("truncated")?;
        self.pos = end;
        Ok(out)
    }

    /// Takes a fixed-size array.
    pub(crate) fn array<const N: usize>(&mut self) -> CodecResult<[u8; N]> {
        let s = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    /// Reads a `u8`.
    pub(crate) fn u8(&mut self) -> CodecResult<u8> {
        Ok(u8::from_le_bytes(self.array::<1>()?))
    }

    /// Reads a little-endian `u16`.
    pub(crate) fn u16(&mut self) -> CodecResult<u16> {
        Ok(u16::from_le_bytes(self.array::<2>()?))
    }

    /// Reads a little-endian `u32`.
    pub(crate) fn u32(&mut self) -> CodecResult<u32> {
        Ok(u32::from_le_bytes(self.array::<4>()?))
    }

    /// Reads a little-endian `u64`.
    pub(crate) fn u64(&mut self) -> CodecResult<u64> {
        Ok(u64::from_le_bytes(self.array::<8>()?))
    }

    /// Reads a `u16` length prefix and that many bytes, refusing lengths above `max`.
    pub(crate) fn bytes_u16(&mut self, max: usize) -> CodecResult<&'a [u8]> {
        let n = usize::from(self.u16()?);
        if n > max {
            return Err("length above limit");
        }
        self.take(n)
    }

    /// Reads a `u32` length prefix and that many bytes, refusing lengths above `max`.
    pub(crate) fn bytes_u32(&mut self, max: usize) -> CodecResult<&'a [u8]> {
        let n = usize::try_from(self.u32()?).map_err(|_| "length overflow")?;
        if n > max {
            return Err("length above limit");
        }
        self.take(n)
    }

    /// Reads a `u32` element count, refusing counts that cannot fit in the remaining bytes
    /// when each element takes at least `min_elem` bytes (so a forged count never allocates).
    pub(crate) fn count(&mut self, min_elem: usize) -> CodecResult<usize> {
        let n = usize::try_from(self.u32()?).map_err(|_| "count overflow")?;
        let need = n.checked_mul(min_elem.max(1)).ok_or("count overflow")?;
        if need > self.remaining() {
            return Err("count larger than the data");
        }
        Ok(n)
    }

    /// The unread rest.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or(&[]);
        self.pos = self.buf.len();
        out
    }

    /// Fails unless everything was consumed.
    pub(crate) fn finish(&self) -> CodecResult<()> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err("trailing bytes")
        }
    }

    /// Fails unless the unread rest is all zero (padding).
    pub(crate) fn finish_zero_padding(&mut self) -> CodecResult<()> {
        if self.rest().iter().all(|b| *b == 0) {
            Ok(())
        } else {
            Err("non-zero padding")
        }
    }
}

/// Appends fixed-width little-endian values to a buffer.
pub(crate) trait PutLe {
    /// Appends a `u8`.
    fn put_u8(&mut self, v: u8);
    /// Appends a little-endian `u16`.
    fn put_u16(&mut self, v: u16);
    /// Appends a little-endian `u32`.
    fn put_u32(&mut self, v: u32);
    /// Appends a little-endian `u64`.
    fn put_u64(&mut self, v: u64);
    /// Appends a `u16` length prefix and the bytes (caller checked the limit).
    fn put_bytes_u16(&mut self, b: &[u8]);
    /// Appends a `u32` length prefix and the bytes (caller checked the limit).
    fn put_bytes_u32(&mut self, b: &[u8]);
}

impl PutLe for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_bytes_u16(&mut self, b: &[u8]) {
        let n = u16::try_from(b.len()).unwrap_or(u16::MAX);
        self.put_u16(n);
        self.extend_from_slice(b.get(..usize::from(n)).unwrap_or(b));
    }
    fn put_bytes_u32(&mut self, b: &[u8]) {
        let n = u32::try_from(b.len()).unwrap_or(u32::MAX);
        self.put_u32(n);
        self.extend_from_slice(
            b.get(..usize::try_from(n).unwrap_or(usize::MAX))
                .unwrap_or(b),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_round_trip_and_refuse_short_input() {
        let mut v = Vec::new();
        v.put_u8(1);
        v.put_u16(2);
        v.put_u32(3);
        v.put_u64(4);
        v.put_bytes_u16(b"ab");
        v.put_bytes_u32(b"cde");
        let mut r = Reader::new(&v);
        assert_eq!(r.u8().unwrap(), 1);
        assert_eq!(r.u16().unwrap(), 2);
        assert_eq!(r.u32().unwrap(), 3);
        assert_eq!(r.u64().unwrap(), 4);
        assert_eq!(r.bytes_u16(10).unwrap(), b"ab");
        assert_eq!(r.bytes_u32(10).unwrap(), b"cde");
        r.finish().unwrap();
        assert!(r.u8().is_err());
        assert!(Reader::new(&[5, 0, 1]).bytes_u16(10).is_err());
        assert!(Reader::new(&[5, 0, 1, 2, 3, 4, 5]).bytes_u16(4).is_err());
    }

    #[test]
    fn forged_counts_are_refused_before_allocation() {
        let mut v = Vec::new();
        v.put_u32(u32::MAX);
        assert!(Reader::new(&v).count(16).is_err());
        let mut v = Vec::new();
        v.put_u32(2);
        v.extend_from_slice(&[0; 32]);
        assert_eq!(Reader::new(&v).count(16).unwrap(), 2);
    }
}
