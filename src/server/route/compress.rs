//! Route compression (spec/cluster.md §2.12): which mode two servers agree on, and the writer
//! that turns a route's outbound bytes into an S2 stream from an agreed byte on.
//!
//! The switch happens at one byte of each direction: after the dialer's INFO (dialer to
//! acceptor) and after the acceptor's first INFO (acceptor to dialer). The connection's
//! reader knows both points; it tells the writer through [`Switch`] the position, in bytes
//! queued, from which to compress. Only the reader queues bytes before the route is
//! registered, so that position is exact. Reading is the other half: `conn.rs` feeds what
//! follows the switch through a [`crate::proto::s2::Decoder`].

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::proto::s2::{Decoder, Encoder, ENCODE_BLOCK};

/// A compression mode as nats-server names it (config or INFO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// No compression.
    Off,
    /// Compress if the peer asks (the default).
    Accept,
    /// S2 framing, plain chunks.
    Uncompressed,
    /// S2 at a level (we compress the same way at every level).
    Fast,
    /// See [`Mode::Fast`].
    Better,
    /// See [`Mode::Fast`].
    Best,
    /// nats-server picks the level by round trip; we compress as at `s2_fast`.
    Auto,
}

impl Mode {
    /// The mode a config value or INFO field names; `None` for an unknown one.
    pub(crate) fn parse(s: &str) -> Option<Mode> {
        Some(match s.to_ascii_lowercase().as_str() {
            "off" | "disabled" | "false" => Mode::Off,
            "accept" => Mode::Accept,
            "s2_fast" | "fast" | "on" | "true" | "enabled" => Mode::Fast,
            "s2_better" | "better" => Mode::Better,
            "s2_best" | "best" => Mode::Best,
            "s2_uncompressed" | "uncompressed" => Mode::Uncompressed,
            "s2_auto" | "auto" => Mode::Auto,
            _ => return None,
        })
    }

    /// The name INFO and `/routez` give it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Accept => "accept",
            Mode::Uncompressed => "s2_uncompressed",
            Mode::Fast => "s2_fast",
            Mode::Better => "s2_better",
            Mode::Best => "s2_best",
            Mode::Auto => "s2_auto",
        }
    }

    /// Whether bytes are S2-framed in this mode.
    pub(crate) fn is_on(self) -> bool {
        !matches!(self, Mode::Off | Mode::Accept)
    }
}

/// What a connection uses, given our mode and the `compression` field of the peer's INFO:
/// `Err` with the `-ERR` text for a mode nobody knows.
pub(crate) fn negotiate(local: Mode, remote: Option<&str>) -> Result<Mode, String> {
    if local == Mode::Off {
        return Ok(Mode::Off);
    }
    let remote = match remote {
        None | Some("" | "not supported") => return Ok(Mode::Off),
        Some(r) => r,
    };
    let Some(r) = Mode::parse(remote) else {
        return Err(format!("unsupported route compression mode {remote:?}"));
    };
    Ok(match (local, r) {
        (_, Mode::Off) | (Mode::Accept, Mode::Accept) => Mode::Off,
        (Mode::Accept, Mode::Auto) => Mode::Fast,
        (Mode::Accept, r) => r,
        (l, _) => l,
    })
}

/// Where a connection's outbound turns into an S2 stream: a byte position in what was queued
/// (`u64::MAX`: never), and how.
#[derive(Debug)]
pub(crate) struct Switch {
    at: AtomicU64,
    plain_chunks: std::sync::atomic::AtomicBool,
}

impl Default for Switch {
    fn default() -> Self {
        Switch {
            at: AtomicU64::new(u64::MAX),
            plain_chunks: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Switch {
    /// Compress from byte `at` of the queued stream on, in `mode`.
    pub(crate) fn set(&self, at: u64, mode: Mode) {
        self.plain_chunks
            .store(mode == Mode::Uncompressed, Ordering::Relaxed);
        self.at.store(at, Ordering::Release);
    }
}

/// A route socket's write half that compresses from the [`Switch`] point on; before it (and
/// when compression is off) bytes pass straight through.
pub(crate) struct Compressing<W> {
    inner: W,
    switch: Arc<Switch>,
    /// Bytes accepted from the writer so far.
    pos: u64,
    encoder: Option<Encoder>,
    /// Encoded bytes not yet on the socket, and how far they got.
    out: Vec<u8>,
    out_at: usize,
    gather: Vec<u8>,
}

impl<W> Compressing<W> {
    pub(crate) fn new(inner: W, switch: Arc<Switch>) -> Self {
        Compressing {
            inner,
            switch,
            pos: 0,
            encoder: None,
            out: Vec::new(),
            out_at: 0,
            gather: Vec::new(),
        }
    }
}

impl<W: AsyncWrite + Unpin> Compressing<W> {
    /// Writes out what was encoded; Ready once all of it is on the socket.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.out_at < self.out.len() {
            let rest = self.out.get(self.out_at..).unwrap_or(&[]);
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.out_at += n;
        }
        self.out.clear();
        self.out_at = 0;
        Poll::Ready(Ok(()))
    }

    fn write_slices(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        ready!(self.drain(cx))?;
        let at = self.switch.at.load(Ordering::Acquire);
        if self.pos < at {
            // Plain: pass through, never past the switch point.
            let room = usize::try_from(at - self.pos).unwrap_or(usize::MAX);
            let total: usize = bufs.iter().map(|b| b.len()).sum();
            let n = if total <= room {
                ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, bufs))?
            } else {
                let first = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &**b);
                let cut = first.get(..room.min(first.len())).unwrap_or(&[]);
                ready!(Pin::new(&mut self.inner).poll_write(cx, cut))?
            };
            self.pos += n as u64;
            return Poll::Ready(Ok(n));
        }
        let encoder = self
            .encoder
            .get_or_insert_with(|| Encoder::new(!self.switch.plain_chunks.load(Ordering::Relaxed)));
        self.gather.clear();
        for b in bufs {
            let room = ENCODE_BLOCK.saturating_sub(self.gather.len());
            if room == 0 {
                break;
            }
            self.gather
                .extend_from_slice(b.get(..room.min(b.len())).unwrap_or(&[]));
        }
        encoder.encode(&self.gather, &mut self.out);
        let n = self.gather.len();
        self.pos += n as u64;
        // Best effort now; the rest goes out on the next write or flush.
        if let Poll::Ready(Err(e)) = self.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Compressing<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut()
            .write_slices(cx, &[std::io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().write_slices(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// A route socket's read half from the switch point on: S2 in, plain bytes out. `leftover` is
/// what was read past the switch point before it was known.
pub(crate) struct Decompressing<R> {
    inner: R,
    decoder: Decoder,
    plain: BytesMut,
    raw: Vec<u8>,
}

impl<R> Decompressing<R> {
    pub(crate) fn new(inner: R, leftover: &[u8]) -> Self {
        let mut decoder = Decoder::new();
        decoder.feed(leftover);
        Decompressing {
            inner,
            decoder,
            plain: BytesMut::new(),
            raw: vec![0; 64 * 1024],
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Decompressing<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.plain.is_empty() {
                let n = buf.remaining().min(this.plain.len());
                buf.put_slice(this.plain.get(..n).unwrap_or(&[]));
                this.plain.advance(n);
                return Poll::Ready(Ok(()));
            }
            match this.decoder.decode_chunk(&mut this.plain) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        e,
                    )))
                }
            }
            let mut rb = ReadBuf::new(&mut this.raw);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                return Poll::Ready(Ok(()));
            }
            this.decoder.feed(rb.filled());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_negotiate_as_nats_server_does() {
        use Mode::*;
        let cases = [
            (Accept, None, Off),
            (Fast, Some("not supported"), Off),
            (Fast, Some(""), Off),
            (Accept, Some("off"), Off),
            (Fast, Some("off"), Off),
            (Accept, Some("accept"), Off),
            (Best, Some("accept"), Best),
            (Accept, Some("s2_auto"), Fast),
            (Accept, Some("s2_better"), Better),
            (Fast, Some("s2_best"), Fast),
            (Off, Some("s2_fast"), Off),
        ];
        for (l, r, want) in cases {
            assert_eq!(negotiate(l, r), Ok(want), "{l:?} {r:?}");
        }
        assert_eq!(
            negotiate(Accept, Some("bogus")),
            Err("unsupported route compression mode \"bogus\"".to_owned())
        );
        assert_eq!(Mode::parse("ON"), Some(Fast));
        assert_eq!(
            Mode::parse("s2_uncompressed").map(Mode::name),
            Some("s2_uncompressed")
        );
    }

    #[tokio::test]
    async fn the_writer_compresses_from_the_switch_point_on() {
        use tokio::io::AsyncWriteExt;
        let switch = Arc::new(Switch::default());
        let mut w = Compressing::new(Vec::new(), Arc::clone(&switch));
        w.write_all(b"INFO {}\r\n").await.unwrap();
        switch.set(9 + 6, Mode::Fast);
        let body = b"RMSG $G a 1\r\nx\r\n".repeat(100);
        w.write_all(b"PING\r\n").await.unwrap();
        w.write_all(&body).await.unwrap();
        w.flush().await.unwrap();
        let wire = w.inner;
        assert!(wire.starts_with(b"INFO {}\r\nPING\r\n"));
        let mut dec = crate::proto::s2::Decoder::new();
        dec.feed(&wire[15..]);
        let mut out = bytes::BytesMut::new();
        while dec.decode_chunk(&mut out).unwrap() {}
        assert_eq!(&out[..], &body[..]);
        assert!(wire.len() < 15 + body.len() / 4);
    }
}
