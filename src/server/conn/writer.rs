//! The writer task: drains a connection's [`Outbound`](crate::server::client::outbound::Outbound) onto the
//! socket with vectored writes.
//!
//! Each wake-up takes everything queued in one swap, so under load many messages go out in one
//! system call. A batch that cannot be written within `write_deadline` marks the connection a
//! slow consumer, as the reference server does. A flush that finds the socket free may write a
//! small backlog on its own thread instead (`Outbound::flush`); whatever it cannot write at
//! once is left here, and only this task ever waits for the socket.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tracing::debug;

use super::super::client::outbound::{advance, io_slices};
use super::super::client::{ClientHandle, CloseReason};
use super::flush_on_close;

/// Runs until the connection closes.
pub(crate) async fn run<W: AsyncWrite + Unpin>(
    mut w: W,
    client: Arc<ClientHandle>,
    deadline: Duration,
) {
    loop {
        let batch = client.outbound.take();
        if batch.bytes > 0 && (!batch.closed || flush_on_close(&client)) {
            // Progress is reported per system call, not per batch: a publisher stalled on this
            // queue's high-water mark (server/backpressure.rs) resumes as soon as the queue
            // drains below it, not only after the whole batch is on the socket.
            let written = |n| client.outbound.written(n);
            // The flush is free on a plain socket; a compressing route writer
            // (server/route/compress.rs) puts out the rest of its last frame there.
            let write = async {
                write_all(&mut w, batch.chunks, written).await?;
                w.flush().await
            };
            let r = tokio::time::timeout(deadline, write).await;
            client.outbound.finished_writing();
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    debug!(error = %e, "write failed");
                    client.close(CloseReason::IoError);
                    break;
                }
                Err(_) => {
                    debug!("write deadline exceeded");
                    client.close(CloseReason::SlowConsumer);
                    break;
                }
            }
        } else if batch.bytes > 0 {
            client.outbound.finished_writing();
        }
        if batch.closed {
            break;
        }
        if batch.bytes == 0 {
            client.outbound.wait().await;
        }
    }
    let _ = tokio::time::timeout(deadline, w.shutdown()).await;
}

/// Writes every chunk, coping with partial vectored writes; `written` hears each system
/// call's byte count.
async fn write_all<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut chunks: Vec<Bytes>,
    written: impl Fn(usize),
) -> std::io::Result<()> {
    let mut start = 0;
    while start < chunks.len() {
        let slices = io_slices(&chunks, start);
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        written(n);
        start = advance(&mut chunks, start, &mut n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// Frames `MSG s 1 <n>\r\n<payload>\r\n` parsed off the front of `buf`.
    fn frames(buf: &mut Vec<u8>, out: &mut Vec<String>) {
        loop {
            let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let line = String::from_utf8(buf[..eol].to_vec()).unwrap();
            let n: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
            if buf.len() < eol + 2 + n + 2 {
                return;
            }
            out.push(String::from_utf8(buf[eol + 2..eol + 2 + n].to_vec()).unwrap());
            assert_eq!(&buf[eol + 2 + n..eol + 4 + n], b"\r\n");
            buf.drain(..eol + 4 + n);
        }
    }

    /// Threads that push and flush on their own — writing on their thread when nobody else
    /// is — and the writer task share one socket: every frame arrives exactly once and each
    /// thread's in order, with a slow reader at first so that the queue backs up and the
    /// writer task takes over.
    #[test]
    fn flushers_and_the_writer_task_deliver_every_frame_once_in_order() {
        const THREADS: usize = 4;
        const FRAMES: usize = 3000;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut reader = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, peer) = listener.accept().unwrap();
        server_side.set_nonblocking(true).unwrap();
        let handle = Arc::new(ClientHandle::new(1, peer, 256 << 20));
        handle.outbound.set_direct(server_side.try_clone().unwrap());
        let writer = rt.spawn({
            let handle = Arc::clone(&handle);
            async move {
                let s = tokio::net::TcpStream::from_std(server_side).unwrap();
                run(s, handle, Duration::from_secs(30)).await;
            }
        });
        let pushers: Vec<_> = (0..THREADS)
            .map(|t| {
                let h = Arc::clone(&handle);
                std::thread::spawn(move || {
                    for i in 0..FRAMES {
                        let body = format!("{t}:{i}:{}", "x".repeat(i * 7 % 20_000));
                        let pushed = h
                            .outbound
                            .push_msg(b"s", b"1", None, None, &Bytes::from(body))
                            .unwrap();
                        if pushed.wake || i % 5 == 0 {
                            h.outbound.flush();
                        }
                    }
                    h.outbound.flush();
                })
            })
            .collect();
        reader
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let (mut buf, mut got) = (Vec::new(), Vec::new());
        let mut chunk = vec![0u8; 64 * 1024];
        while got.len() < THREADS * FRAMES {
            // Small reads for the first frames: a slow reader, so writes come up short.
            let want = if got.len() < FRAMES { 512 } else { 8192 };
            let n = reader.read(&mut chunk[..want]).unwrap();
            assert!(
                n > 0,
                "socket closed after {} frames: {:?}",
                got.len(),
                handle.close_reason()
            );
            buf.extend_from_slice(&chunk[..n]);
            frames(&mut buf, &mut got);
        }
        for p in pushers {
            p.join().unwrap();
        }
        let mut next = [0usize; THREADS];
        for f in &got {
            let mut parts = f.splitn(3, ':');
            let t: usize = parts.next().unwrap().parse().unwrap();
            let i: usize = parts.next().unwrap().parse().unwrap();
            assert_eq!(i, next[t], "thread {t}: frame {i} out of order");
            assert_eq!(parts.next().unwrap().len(), i * 7 % 20_000);
            next[t] += 1;
        }
        assert_eq!(next, [FRAMES; THREADS]);
        assert_eq!(handle.outbound.pending_bytes(), 0);
        handle.close(CloseReason::ClientClosed);
        rt.block_on(writer).unwrap();
    }
}
