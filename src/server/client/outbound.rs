//! The per-connection outbound queue, bounded in bytes.
//!
//! Any task may push into a connection's queue (a publisher's reader delivering a message, the
//! connection's own reader answering PING, a store thread's pub-ack). A push
//! never waits: past `max_pending` bytes the push fails with [`PushError::SlowConsumer`] and the
//! caller closes the connection, so a subscriber that cannot keep up never stalls a publisher.
//!
//! Small frames are copied into one growing tail buffer (coalescing thousands of messages into
//! one write); payloads of [`ZERO_COPY_THRESHOLD`] bytes or more are queued as their own shared
//! [`Bytes`] so large messages are never copied. The writer takes everything in one swap and
//! writes it with vectored I/O.
//!
//! Wake-ups are batched: a push marks the queue dirty and tells the caller whether it must
//! notify the writer ([`Outbound::push_msg`] returns `true` once per dirty period). Readers
//! collect those queues and flush them once at the end of each read batch.
//!
//! Flushing writes on the caller's thread when it can ([`Outbound::flush`]): a plain TCP
//! connection lends its queue a second handle on its socket, and a caller that finds nobody
//! writing and little queued writes it with one non-blocking `writev` instead of waking the
//! writer task — a request's reply, a pub-ack or a PONG then costs no thread hand-off (on this
//! project's 2-vCPU machines a hand-off is tens of microseconds: waking a halted vCPU). What
//! the socket does not take at once stays queued, in order, for the writer task, which alone
//! waits for the socket. One writer at a time: `writing` is set by whoever holds the socket.

use std::collections::VecDeque;
use std::io::{IoSlice, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::Notify;

use crate::proto::{encode, route};

/// Payloads at least this large are queued by reference instead of copied.
pub(crate) const ZERO_COPY_THRESHOLD: usize = 16 * 1024;
/// Size of each tail buffer small frames are copied into. A full tail is frozen into the chunk
/// list and a fresh one started, so a backlog costs its bytes plus at most one chunk — never
/// the doubling-and-copying of one ever-growing buffer.
const TAIL_CHUNK: usize = 64 * 1024;

/// The high-water mark is half of `max_pending`, but never more than this. A publisher that
/// outruns a reading subscriber is paced once about this much is queued for it, so the
/// backlog stays small enough to be written from cache: with the mark at half of the default
/// 64 MiB `max_pending`, 1→4 fan-out of 1 KiB messages ran at 0.6–0.75× of the rate it reaches
/// with 1 MiB, and every subscriber held 32 MiB (docs/PERFORMANCE.md, stop 13). A subscriber
/// that stops reading is still cut at `max_pending` or by `write_deadline`, as before.
pub(crate) const HIGH_WATER_MAX: usize = 1 << 20;

/// A flush writes on the caller's thread only while at most this much is queued; a larger
/// backlog (a subscriber under sustained load) is the writer task's, so a publisher's reader
/// never spends its time writing other connections' backlogs.
pub(crate) const DIRECT_FLUSH_MAX: usize = 64 * 1024;

/// Most buffers handed to one `writev`.
pub(crate) const MAX_IOVECS: usize = 64;

/// A push that was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pushed {
    /// The caller must [`Outbound::wake`] the writer (first push of a dirty period).
    pub(crate) wake: bool,
    /// The queue is now above its high-water mark (half of `max_pending`, at most
    /// [`HIGH_WATER_MAX`]): the publisher
    /// should stall briefly (see `server::backpressure`).
    pub(crate) above_high_water: bool,
}

/// Why a push was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushError {
    /// The queue would exceed `max_pending`: the connection is a slow consumer.
    SlowConsumer,
    /// The connection is closing; the data is dropped.
    Closed,
}

#[derive(Default)]
struct Inner {
    chunks: VecDeque<Bytes>,
    tail: BytesMut,
    pending: usize,
    closed: bool,
    out_msgs: u64,
    out_bytes: u64,
    /// Somebody holds the socket: the writer task between [`Outbound::take`] and
    /// [`Outbound::finished_writing`], or a caller inside [`Outbound::flush`].
    writing: bool,
    /// A handle on the connection's socket (non-blocking, plain TCP only) for
    /// [`Outbound::flush`]; dropped when the queue closes.
    direct: Option<Arc<std::net::TcpStream>>,
}

impl Inner {
    /// Everything queued, in order, leaving the queue empty (`pending` is counted down as
    /// the bytes are written).
    fn drain(&mut self) -> Vec<Bytes> {
        let mut chunks: Vec<Bytes> = self.chunks.drain(..).collect();
        if !self.tail.is_empty() {
            chunks.push(self.tail.split().freeze());
        }
        chunks
    }

    /// Ensures the tail can take `need` more bytes without reallocating: a tail that is too
    /// full is moved to the chunk list and a new one allocated.
    fn make_room(&mut self, need: usize) {
        if self.tail.capacity() - self.tail.len() >= need {
            return;
        }
        if !self.tail.is_empty() {
            let full = self.tail.split().freeze();
            self.chunks.push_back(full);
        }
        self.tail.reserve(need.max(TAIL_CHUNK));
    }
}

/// Writes `chunks` with non-blocking vectored writes until the socket takes no more; returns
/// the index of the first chunk not completely written (the chunk at that index has had its
/// written front cut off). `written` hears each system call's byte count. An error stops the
/// writing like a full socket: the writer task meets it again and closes the connection.
fn write_now(socket: &std::net::TcpStream, chunks: &mut [Bytes], written: impl Fn(usize)) -> usize {
    let mut start = 0;
    while start < chunks.len() {
        let slices = io_slices(chunks, start);
        let mut n = match (&*socket).write_vectored(&slices) {
            Ok(0) | Err(_) => return start,
            Ok(n) => n,
        };
        written(n);
        start = advance(chunks, start, &mut n);
    }
    start
}

/// The buffers one `writev` takes: at most [`MAX_IOVECS`] from `chunks[start..]`.
pub(crate) fn io_slices(chunks: &[Bytes], start: usize) -> Vec<IoSlice<'_>> {
    let end = (start + MAX_IOVECS).min(chunks.len());
    chunks
        .get(start..end)
        .unwrap_or(&[])
        .iter()
        .map(|c| IoSlice::new(c))
        .collect()
}

/// Consumes `n` written bytes from `chunks[start..]`; returns the new start (empty chunks
/// skipped).
pub(crate) fn advance(chunks: &mut [Bytes], mut start: usize, n: &mut usize) -> usize {
    use bytes::Buf;
    while *n > 0 {
        let Some(c) = chunks.get_mut(start) else {
            break;
        };
        if *n >= c.len() {
            *n -= c.len();
            start += 1;
        } else {
            c.advance(*n);
            *n = 0;
        }
    }
    while chunks.get(start).is_some_and(Bytes::is_empty) {
        start += 1;
    }
    start
}

/// What the writer takes out of the queue in one swap.
pub(crate) struct Batch {
    /// Buffers to write, in order.
    pub(crate) chunks: Vec<Bytes>,
    /// Total bytes in `chunks`.
    pub(crate) bytes: usize,
    /// The queue was closed: write this batch, then shut the socket.
    pub(crate) closed: bool,
}

/// A connection's outbound queue. Shared by `Arc` between every task that delivers to it.
pub(crate) struct Outbound {
    inner: Mutex<Inner>,
    notify: Notify,
    /// Signalled when the writer brings `pending` back under the high-water mark.
    drained: Notify,
    dirty: AtomicBool,
    max_pending: usize,
}

impl Outbound {
    /// An empty queue that holds at most `max_pending` bytes.
    pub(crate) fn new(max_pending: usize) -> Self {
        Outbound {
            inner: Mutex::new(Inner::default()),
            notify: Notify::new(),
            drained: Notify::new(),
            dirty: AtomicBool::new(false),
            max_pending,
        }
    }

    fn high_water(&self) -> usize {
        (self.max_pending / 2).min(HIGH_WATER_MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock can only come from an allocation failure; the queue
        // data stays consistent (plain appends), so a poisoned lock is safe to reuse.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues one MSG/HMSG frame. Returns whether the caller must [`Outbound::wake`] the writer
    /// (true the first time the queue becomes dirty).
    pub(crate) fn push_msg(
        &self,
        subject: &[u8],
        sid: &[u8],
        reply: Option<&[u8]>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> Result<Pushed, PushError> {
        let hlen = headers.map(|h| h.len());
        let total = hlen.unwrap_or(0) + payload.len();
        let line = subject.len() + sid.len() + reply.map_or(0, <[u8]>::len) + 32;
        self.push_frame(line, headers, payload, |out| {
            encode::encode_msg_line(out, subject, sid, reply, hlen, total);
        })
    }

    /// Queues one RMSG/HMSG frame for a route peer: `account`, and the queue groups picked on
    /// that peer (spec/cluster.md §2.6). Bounded like [`Outbound::push_msg`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push_routed(
        &self,
        account: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        queues: &[&[u8]],
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> Result<Pushed, PushError> {
        let hlen = headers.map(|h| h.len());
        let total = hlen.unwrap_or(0) + payload.len();
        let line = route::msg_line_len(account, subject, reply, queues);
        self.push_frame(line, headers, payload, |out| {
            route::encode_msg_line(out, account, subject, reply, queues, hlen, total);
        })
    }

    /// Queues a JetStream delivery for a sealstream route peer: to the plain subscribers of
    /// `to` there (`JMSG`/`JHMSG`), or with `queues` to one member of each of those groups
    /// there (`JQMSG`/`JQHMSG`), shown as `shown`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push_delivery(
        &self,
        account: &[u8],
        to: &[u8],
        shown: &[u8],
        reply: Option<&[u8]>,
        queues: &[&[u8]],
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> Result<Pushed, PushError> {
        let hlen = headers.map(|h| h.len());
        let total = hlen.unwrap_or(0) + payload.len();
        let line = route::msg_line_len(account, to, reply, queues) + shown.len() + 1;
        self.push_frame(line, headers, payload, |out| {
            route::encode_delivery_line(out, account, to, shown, reply, queues, hlen, total);
        })
    }

    /// Queues a control line `encode` writes (at most `line` bytes), then the body: copied
    /// behind the line when small, kept as its own shared buffers when large.
    fn push_frame(
        &self,
        line: usize,
        headers: Option<&Bytes>,
        payload: &Bytes,
        encode: impl FnOnce(&mut BytesMut),
    ) -> Result<Pushed, PushError> {
        let total = headers.map_or(0, Bytes::len) + payload.len();
        let frame = total + line;
        let above_high_water = {
            let mut g = self.lock();
            if g.closed {
                return Err(PushError::Closed);
            }
            if g.pending + frame > self.max_pending {
                return Err(PushError::SlowConsumer);
            }
            let inline = if total >= ZERO_COPY_THRESHOLD {
                0
            } else {
                total + 2
            };
            g.make_room(line + inline);
            let before = g.tail.len();
            encode(&mut g.tail);
            // Every byte this frame puts on the socket: the control line, the body, the CRLF.
            let written = g.tail.len() - before + total + 2;
            if total >= ZERO_COPY_THRESHOLD {
                let tail = g.tail.split().freeze();
                g.chunks.push_back(tail);
                if let Some(h) = headers {
                    g.chunks.push_back(h.clone());
                }
                g.chunks.push_back(payload.clone());
                g.tail.put_slice(b"\r\n");
            } else {
                if let Some(h) = headers {
                    g.tail.put_slice(h);
                }
                g.tail.put_slice(payload);
                g.tail.put_slice(b"\r\n");
            }
            g.pending += written;
            g.out_msgs += 1;
            g.out_bytes += total as u64;
            g.pending > self.high_water()
        };
        Ok(Pushed {
            wake: !self.dirty.swap(true, Ordering::AcqRel),
            above_high_water,
        })
    }

    /// Queues protocol bytes (PONG, +OK, -ERR, INFO). Control traffic is never refused for
    /// size; it is tiny and must not be lost to a slow-consumer race.
    pub(crate) fn push_raw(&self, bytes: &[u8]) -> Result<bool, PushError> {
        {
            let mut g = self.lock();
            if g.closed {
                return Err(PushError::Closed);
            }
            g.make_room(bytes.len());
            g.tail.put_slice(bytes);
            g.pending += bytes.len();
        }
        Ok(!self.dirty.swap(true, Ordering::AcqRel))
    }

    /// Wakes the writer task.
    pub(crate) fn wake(&self) {
        self.notify.notify_one();
    }

    /// Marks the queue closed: nothing more is accepted, the writer flushes what is queued and
    /// shuts the socket.
    pub(crate) fn close(&self) {
        {
            let mut g = self.lock();
            g.closed = true;
            g.direct = None;
        }
        self.notify.notify_one();
        self.drained.notify_waiters();
    }

    /// Bytes queued but not yet written.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.lock().pending
    }

    /// Messages and payload bytes queued so far (the connection's `out_msgs`/`out_bytes`).
    pub(crate) fn out_stats(&self) -> (u64, u64) {
        let g = self.lock();
        (g.out_msgs, g.out_bytes)
    }

    /// Takes everything queued (writer task only). A non-empty batch holds the socket until
    /// [`Outbound::finished_writing`]. While a [`Outbound::flush`] holds it, the batch is
    /// empty (and not closed): the flush wakes the writer when it is done.
    pub(crate) fn take(&self) -> Batch {
        let mut g = self.lock();
        if g.writing {
            return Batch {
                chunks: Vec::new(),
                bytes: 0,
                closed: false,
            };
        }
        self.dirty.store(false, Ordering::Release);
        let chunks = g.drain();
        let bytes = chunks.iter().map(Bytes::len).sum();
        g.writing = bytes > 0;
        Batch {
            chunks,
            bytes,
            closed: g.closed,
        }
    }

    /// The writer task has written (or given up on) the batch it took.
    pub(crate) fn finished_writing(&self) {
        self.lock().writing = false;
    }

    /// Lends the queue a handle on its connection's socket, so that [`Outbound::flush`] can
    /// write on the caller's thread. The socket must be in non-blocking mode.
    pub(crate) fn set_direct(&self, socket: std::net::TcpStream) {
        let mut g = self.lock();
        if !g.closed {
            g.direct = Some(Arc::new(socket));
        }
    }

    /// Gets what is queued onto the socket: written here, at once, when the queue has a
    /// socket handle, nobody else is writing and at most [`DIRECT_FLUSH_MAX`] is queued;
    /// otherwise (and for whatever the socket does not take) by the writer task, woken.
    pub(crate) fn flush(&self) {
        let (socket, mut chunks) = {
            let mut g = self.lock();
            let Some(socket) = g.direct.clone() else {
                drop(g);
                self.wake();
                return;
            };
            if g.writing || g.pending > DIRECT_FLUSH_MAX {
                drop(g);
                self.wake();
                return;
            }
            g.writing = true;
            self.dirty.store(false, Ordering::Release);
            (socket, g.drain())
        };
        let start = write_now(&socket, &mut chunks, |n| self.written(n));
        let more = {
            let mut g = self.lock();
            g.writing = false;
            for c in chunks.drain(start..).rev() {
                g.chunks.push_front(c);
            }
            g.pending > 0 || g.closed
        };
        if more {
            self.wake();
        }
    }

    /// Records that the writer put `n` bytes on the socket.
    pub(crate) fn written(&self, n: usize) {
        let mut g = self.lock();
        let before = g.pending;
        g.pending = g.pending.saturating_sub(n);
        let crossed = before > self.high_water() && g.pending <= self.high_water();
        drop(g);
        if crossed {
            self.drained.notify_waiters();
        }
    }

    /// Waits until the queue is at or below its high-water mark (or closed).
    pub(crate) async fn wait_below_high_water(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let g = self.lock();
                if g.closed || g.pending <= self.high_water() {
                    return;
                }
            }
            drained.await;
        }
    }

    /// Waits until a push or close wakes the writer.
    pub(crate) async fn wait(&self) {
        self.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_beyond_max_pending_is_a_slow_consumer() {
        let q = Outbound::new(100);
        let p = Bytes::from_static(&[0u8; 40]);
        assert!(q.push_msg(b"a", b"1", None, None, &p).is_ok());
        assert_eq!(
            q.push_msg(b"a", b"1", None, None, &p),
            Err(PushError::SlowConsumer)
        );
    }

    #[test]
    fn only_first_push_of_a_dirty_period_asks_for_a_wake() {
        let q = Outbound::new(1 << 20);
        let p = Bytes::from_static(b"hi");
        let wake = |r: Result<Pushed, PushError>| r.map(|p| p.wake);
        assert_eq!(wake(q.push_msg(b"a", b"1", None, None, &p)), Ok(true));
        assert_eq!(wake(q.push_msg(b"a", b"1", None, None, &p)), Ok(false));
        let b = q.take();
        assert_eq!(
            b.chunks.concat(),
            b"MSG a 1 2\r\nhi\r\nMSG a 1 2\r\nhi\r\n".to_vec()
        );
        assert_eq!(wake(q.push_msg(b"a", b"1", None, None, &p)), Ok(true));
    }

    #[test]
    fn pushes_past_half_of_max_pending_report_the_high_water_mark() {
        let q = Outbound::new(200);
        let p = Bytes::from_static(&[0u8; 40]);
        assert!(
            !q.push_msg(b"a", b"1", None, None, &p)
                .unwrap()
                .above_high_water
        );
        assert!(
            q.push_msg(b"a", b"1", None, None, &p)
                .unwrap()
                .above_high_water
        );
        let b = q.take();
        q.written(b.bytes);
        assert_eq!(q.pending_bytes(), 0);
    }

    #[test]
    fn large_payloads_are_queued_without_copy_and_in_order() {
        let q = Outbound::new(1 << 22);
        let big = Bytes::from(vec![7u8; ZERO_COPY_THRESHOLD]);
        q.push_raw(b"PONG\r\n").unwrap();
        q.push_msg(b"s", b"9", Some(b"r"), None, &big).unwrap();
        let b = q.take();
        assert!(b.chunks.iter().any(|c| c.as_ptr() == big.as_ptr()));
        let all = b.chunks.concat();
        assert!(all.starts_with(b"PONG\r\nMSG s 9 r 16384\r\n"));
        assert!(all.ends_with(b"\x07\r\n"));
        assert_eq!(all.len(), b.bytes);
    }

    #[test]
    fn pending_bytes_are_exactly_what_the_writer_takes() {
        // Counted too high, `pending` would creep up with every large message until a
        // subscriber that reads everything looked above its high-water mark for good.
        let q = Outbound::new(1 << 30);
        let big = Bytes::from(vec![1u8; ZERO_COPY_THRESHOLD]);
        let small = Bytes::from_static(b"hello");
        let h = Bytes::from_static(b"NATS/1.0\r\nA: b\r\n\r\n");
        for _ in 0..1000 {
            q.push_msg(b"subject.x", b"12", Some(b"_INBOX.r"), None, &big)
                .unwrap();
            q.push_msg(b"s", b"1", None, Some(&h), &big).unwrap();
            q.push_msg(b"s", b"1", None, Some(&h), &small).unwrap();
            q.push_msg(b"s", b"1", None, None, &small).unwrap();
            let b = q.take();
            assert_eq!(q.pending_bytes(), b.bytes);
            q.written(b.bytes);
            q.finished_writing();
            assert_eq!(q.pending_bytes(), 0);
        }
    }

    #[test]
    fn closed_queue_refuses_pushes() {
        let q = Outbound::new(1000);
        q.close();
        assert_eq!(q.push_raw(b"x"), Err(PushError::Closed));
        assert!(q.take().closed);
    }
}
