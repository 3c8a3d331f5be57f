//! The writer task: drains a connection's [`Outbound`](crate::server::client::outbound::Outbound) onto the
//! socket with vectored writes.
//!
//! Each wake-up takes everything queued in one swap, so under load many messages go out in one
//! system call. A batch that cannot be written within `write_deadline` marks the connection a
//! slow consumer, as the reference server does.

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tracing::debug;

use super::super::client::{ClientHandle, CloseReason};
use super::flush_on_close;

/// Most buffers handed to one `writev`.
const MAX_IOVECS: usize = 64;

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
            match tokio::time::timeout(deadline, write_all(&mut w, batch.chunks, written)).await {
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
        let end = (start + MAX_IOVECS).min(chunks.len());
        let slices: Vec<IoSlice<'_>> = chunks
            .get(start..end)
            .unwrap_or(&[])
            .iter()
            .map(|c| IoSlice::new(c))
            .collect();
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        written(n);
        while n > 0 {
            let Some(c) = chunks.get_mut(start) else {
                break;
            };
            if n >= c.len() {
                n -= c.len();
                start += 1;
            } else {
                c.advance(n);
                n = 0;
            }
        }
        while chunks.get(start).is_some_and(Bytes::is_empty) {
            start += 1;
        }
    }
    Ok(())
}
