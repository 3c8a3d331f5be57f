//! What openraft holds of a snapshot while it sends or receives one: a stored snapshot read
//! a frame at a time, a snapshot being received sealed a frame at a time, or (the in-memory
//! test store) plain bytes.
//!
//! Why a type of our own: openraft sends a snapshot in chunks read from its `SnapshotData`
//! (seek, then read) and receives one by writing the chunks into the `SnapshotData` the state
//! machine gave it. With plain bytes that is the whole stream in memory on both sides; here a
//! leader reads its sealed file ([`SnapshotReader`]) and a follower writes its own
//! ([`SnapshotWriter`]), so neither holds more than a frame. The file I/O is done inside
//! the poll calls, one frame (1 MiB) at most per call: short blocking, as a stream's store
//! does on its own threads.

use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use super::snapshot_file::{SnapshotReader, SnapshotWriter};

/// A snapshot's data as openraft holds it (see the module docs).
pub struct SnapshotData {
    inner: Inner,
    /// The answer of the last `start_seek`, until `poll_complete` takes it.
    seek: Option<io::Result<u64>>,
}

/// Which kind of snapshot data.
pub enum Inner {
    /// Plain bytes (the in-memory store of the transport tests).
    Memory(Cursor<Vec<u8>>),
    /// A stored snapshot, to be sent or read.
    Stored(SnapshotReader),
    /// A snapshot being received from a leader.
    Receiving(SnapshotWriter),
}

impl SnapshotData {
    /// Plain bytes.
    pub fn memory(data: Vec<u8>) -> Self {
        Self::from(Inner::Memory(Cursor::new(data)))
    }

    /// A stored snapshot.
    pub fn stored(r: SnapshotReader) -> Self {
        Self::from(Inner::Stored(r))
    }

    /// A snapshot to be received into `w`.
    pub fn receiving(w: SnapshotWriter) -> Self {
        Self::from(Inner::Receiving(w))
    }

    /// What it is.
    pub fn into_inner(self) -> Inner {
        self.inner
    }

    fn from(inner: Inner) -> Self {
        SnapshotData { inner, seek: None }
    }
}

fn wrong(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, what.to_owned())
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let out = buf.initialize_unfilled();
        let n = match &mut self.get_mut().inner {
            Inner::Memory(c) => c.read(out),
            Inner::Stored(r) => r.read(out),
            Inner::Receiving(_) => Err(wrong("a snapshot being received is not read")),
        };
        Poll::Ready(n.map(|n| buf.advance(n)))
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(match &mut self.get_mut().inner {
            Inner::Memory(c) => c.write(data),
            Inner::Receiving(w) => w.write(data),
            Inner::Stored(_) => Err(wrong("a stored snapshot is not written")),
        })
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// The end of the received data; the snapshot is put in place when it is installed (its
    /// meta is known then).
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        let me = self.get_mut();
        let r = match &mut me.inner {
            Inner::Memory(c) => c.seek(to),
            Inner::Stored(r) => r.seek(to),
            Inner::Receiving(w) => match to {
                // openraft seeks only when a leader sends a chunk again.
                SeekFrom::Start(at) => w.rewind_to(at).map(|()| at),
                SeekFrom::End(0) | SeekFrom::Current(0) => Ok(w.data_len()),
                _ => Err(wrong(
                    "a snapshot being received seeks to a chunk's start only",
                )),
            },
        };
        me.seek = Some(r);
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let me = self.get_mut();
        Poll::Ready(match me.seek.take() {
            Some(r) => r,
            None => match &mut me.inner {
                Inner::Memory(c) => Ok(c.position()),
                Inner::Stored(r) => r.stream_position(),
                Inner::Receiving(w) => Ok(w.data_len()),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::snapshot_file::{SnapshotFile, FRAME_BYTES};
    use crate::crypto::SealKey;
    use openraft::{CommittedLeaderId, LogId, SnapshotMeta, StoredMembership};
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    fn meta() -> SnapshotMeta<crate::consensus::NodeId, openraft::BasicNode> {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), 9)),
            last_membership: StoredMembership::default(),
            snapshot_id: "1-9".into(),
        }
    }

    /// What openraft's chunked transport does: the leader seeks to each chunk and reads it,
    /// the follower writes each chunk (one sent twice) into what its machine gave it.
    #[tokio::test]
    async fn a_stored_snapshot_crosses_in_chunks_into_a_received_one() {
        let dir = tempfile::tempdir().unwrap();
        let key = || SealKey::new(crate::crypto::Secret::from_fn(|k| k.fill(3)));
        let leader = SnapshotFile::new(&dir.path().join("a"), [1; 8], key());
        let follower = SnapshotFile::new(&dir.path().join("b"), [1; 8], key());
        let data: Vec<u8> = (0..FRAME_BYTES * 2 + 777)
            .map(|i| (i % 253) as u8)
            .collect();
        leader.write(&meta(), &data).unwrap();
        let mut from = SnapshotData::stored(leader.open().unwrap().unwrap());
        let mut to = SnapshotData::receiving(follower.writer().unwrap());
        let end = from.seek(SeekFrom::End(0)).await.unwrap();
        assert_eq!(end, data.len() as u64);
        let mut offset = 0u64;
        let mut sent_again = false;
        while offset < end {
            from.seek(SeekFrom::Start(offset)).await.unwrap();
            let mut chunk = Vec::with_capacity(FRAME_BYTES);
            while chunk.len() < FRAME_BYTES {
                if from.read_buf(&mut chunk).await.unwrap() == 0 {
                    break;
                }
            }
            to.seek(SeekFrom::Start(offset)).await.unwrap();
            to.write_all(&chunk).await.unwrap();
            if offset == FRAME_BYTES as u64 && !sent_again {
                sent_again = true;
                continue;
            }
            offset += chunk.len() as u64;
        }
        to.shutdown().await.unwrap();
        let Inner::Receiving(w) = to.into_inner() else {
            panic!("not a receiver")
        };
        w.finish(&meta()).unwrap();
        let mut got = Vec::new();
        follower
            .open()
            .unwrap()
            .unwrap()
            .read_to_end(&mut got)
            .unwrap();
        assert!(got == data, "the received snapshot differs");
    }
}
