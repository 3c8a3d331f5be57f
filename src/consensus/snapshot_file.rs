//! A group's newest snapshot on disk: one sealed file per group, beside the node's log.
//!
//! Why a file of its own: a snapshot replaces the log before it — once it is durable the
//! group's entries up to it are purged — so it must survive a restart and be as sealed as the
//! log: every frame is sealed with the group's key (erasing the key erases the snapshot with
//! the group's records), its name is the group's pseudonym in the log (the disk shows which
//! file belongs to which records, never a stream or an account), and the associated data binds
//! each frame to that pseudonym, so a file copied over another group's fails to open.
//!
//! Why frames: a stream's snapshot is the whole stream (`jetstream/image.rs`), which may be
//! larger than memory. The state machine's bytes are written, sent and read
//! [`FRAME_BYTES`] at a time, each frame sealed on its own, so building, storing, sending
//! and installing a snapshot holds one frame in memory, whatever the stream's size. Layout:
//!
//! ```text
//! "SSSNAP02" | file nonce (16 random bytes)
//! frame*     = sealed length (u32 LE) | nonce (24) | ciphertext | tag (16)
//! ```
//!
//! Every frame but the last holds [`FRAME_BYTES`] of the state's bytes (the last data frame
//! fewer); the last frame holds the data's length and openraft's snapshot meta (JSON). A
//! frame's associated data names the group, the file's nonce, the frame's index and whether
//! it is the last, so frames cannot be reordered, dropped, cut or spliced in from another
//! snapshot without failing authentication.
//!
//! Written to a temporary name, fsync'd, renamed over the old one, and the directory
//! fsync'd: a crash leaves the old snapshot or the new one, never half of one (leftover
//! temporary files are removed when the log opens). Files of the earlier format (one seal
//! over the meta and the bytes) are still read, whole.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use openraft::SnapshotMeta;

use super::key_ring::KeyRing;
use super::NodeId;
use crate::crypto::{SealKey, NONCE_LEN, TAG_LEN};

/// The directory of snapshots inside the log's.
pub const SNAPSHOT_DIR: &str = "snapshots";
/// Associated data of the earlier, single-seal format.
const AAD_TAG: &[u8] = b"sealstream raft snapshot v1";
/// Associated data of a frame (followed by the pseudonym, file nonce, index and kind).
const FRAME_AAD_TAG: &[u8] = b"sealstream raft snapshot v2 frame";
const MAGIC: &[u8; 8] = b"SSSNAP02";
const FILE_NONCE_LEN: usize = 16;
const HEADER_LEN: u64 = (MAGIC.len() + FILE_NONCE_LEN) as u64;
/// What a seal adds to a frame's plaintext.
const OVERHEAD: usize = NONCE_LEN + TAG_LEN;
/// The state's bytes in every data frame but the last. Also openraft's snapshot chunk size
/// (`consensus/timing.rs`): a chunk a leader sends again starts on a frame boundary, so a
/// receiver can take it back (`SnapshotWriter::rewind_to`).
pub const FRAME_BYTES: usize = 1 << 20;
/// The longest sealed frame accepted when reading (the meta frame may exceed a data frame).
const MAX_SEALED: u32 = 16 << 20;
const KIND_DATA: u8 = 0;
const KIND_LAST: u8 = 1;

/// One group's snapshot file.
pub struct SnapshotFile {
    path: PathBuf,
    /// The group's keys: the newest seals a new snapshot, any of them opens the stored one
    /// (one sealed before the group's key was rotated).
    keys: KeyRing,
    pseudonym: [u8; 8],
}

/// Where the snapshot of the group with log pseudonym `pseudonym` is, in log directory `dir`.
pub fn path_of(dir: &Path, pseudonym: &[u8; 8]) -> PathBuf {
    dir.join(SNAPSHOT_DIR).join(format!(
        "{}.snap",
        data_encoding::HEXLOWER.encode(pseudonym)
    ))
}

/// Removes temporary files a crash left in log directory `dir`'s snapshot directory (call
/// before any group of the log runs: a writer's file is temporary until it is renamed).
pub fn remove_leftovers(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir.join(SNAPSHOT_DIR)) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().ends_with(".tmp") {
            let _ = fs::remove_file(e.path());
        }
    }
}

fn bad(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {why}", path.display()),
    )
}

fn frame_aad(pseudonym: &[u8; 8], nonce: &[u8; FILE_NONCE_LEN], index: u64, kind: u8) -> Vec<u8> {
    let mut aad = Vec::with_capacity(FRAME_AAD_TAG.len() + 8 + FILE_NONCE_LEN + 9);
    aad.extend_from_slice(FRAME_AAD_TAG);
    aad.extend_from_slice(pseudonym);
    aad.extend_from_slice(nonce);
    aad.extend_from_slice(&index.to_le_bytes());
    aad.push(kind);
    aad
}

impl SnapshotFile {
    /// The snapshot file of the group whose log pseudonym is `pseudonym`, in the log
    /// directory `dir`, sealed with `key`.
    pub fn new(dir: &Path, pseudonym: [u8; 8], key: SealKey) -> Self {
        Self::with_ring(dir, pseudonym, KeyRing::new(key))
    }

    /// [`SnapshotFile::new`] sealed with `keys`' newest key and opened with any of them (the
    /// ring the group's log records share: `sealed_log`).
    pub fn with_ring(dir: &Path, pseudonym: [u8; 8], keys: KeyRing) -> Self {
        SnapshotFile {
            path: path_of(dir, &pseudonym),
            keys,
            pseudonym,
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A writer of a new snapshot of this node's own state: the state's bytes go to it, and
    /// [`SnapshotWriter::finish`] makes it this group's snapshot, durably. It waits for each
    /// [`SYNC_EVERY`] bytes to reach the disk ([`Writeback::Wait`]).
    ///
    /// # Errors
    /// I/O.
    pub fn writer(&self) -> io::Result<SnapshotWriter> {
        self.writer_with(Writeback::Wait)
    }

    /// A writer of a snapshot received from a leader: as [`writer`](Self::writer), but it
    /// only starts each [`SYNC_EVERY`] bytes' way to the disk and goes on
    /// ([`Writeback::Start`]).
    ///
    /// # Errors
    /// I/O.
    pub fn receiver(&self) -> io::Result<SnapshotWriter> {
        self.writer_with(Writeback::Start)
    }

    fn writer_with(&self, writeback: Writeback) -> io::Result<SnapshotWriter> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)?;
        let mut nonce = [0u8; FILE_NONCE_LEN];
        crate::crypto::random_bytes(&mut nonce);
        // A name of its own: a snapshot may be built while another is received.
        let tmp = dir.join(format!(
            "{}.{}.tmp",
            data_encoding::HEXLOWER.encode(&self.pseudonym),
            data_encoding::HEXLOWER.encode(&nonce[..4])
        ));
        let mut file = File::create(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(&nonce)?;
        Ok(SnapshotWriter {
            key: self.keys.newest(),
            pseudonym: self.pseudonym,
            nonce,
            tmp,
            dest: self.path.clone(),
            file,
            buf: Vec::with_capacity(FRAME_BYTES),
            starts: Vec::new(),
            end: HEADER_LEN,
            data_len: 0,
            unsynced: 0,
            writeback,
            finished: false,
        })
    }

    /// Replaces the stored snapshot with one of `meta` and `data`, durably.
    ///
    /// # Errors
    /// I/O.
    pub fn write(
        &self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        data: &[u8],
    ) -> io::Result<()> {
        let mut w = self.writer()?;
        w.write_all(data)?;
        w.finish(meta).map(|_| ())
    }

    /// The stored snapshot, if there is one: its meta is read and authenticated, its bytes
    /// are read (and authenticated) frame by frame as they are asked for.
    ///
    /// # Errors
    /// I/O, or a file that fails authentication or does not decode (damage, or another
    /// group's file).
    pub fn open(&self) -> io::Result<Option<SnapshotReader>> {
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        let mut head = [0u8; HEADER_LEN as usize];
        if len < HEADER_LEN || file.read_exact(&mut head).is_err() || &head[..8] != MAGIC {
            return self.open_whole(file).map(Some);
        }
        let mut nonce = [0u8; FILE_NONCE_LEN];
        nonce.copy_from_slice(&head[8..]);
        // The frames' places, from their length prefixes.
        let mut frames: Vec<FrameAt> = Vec::new();
        let mut off = HEADER_LEN;
        let mut prefix = [0u8; 4];
        while off < len {
            file.seek(SeekFrom::Start(off))?;
            file.read_exact(&mut prefix)
                .map_err(|_| bad(&self.path, "a frame is cut short"))?;
            let sealed = u32::from_le_bytes(prefix);
            if (sealed as usize) < OVERHEAD
                || sealed > MAX_SEALED
                || off + 4 + u64::from(sealed) > len
            {
                return Err(bad(&self.path, "a frame is cut short or damaged"));
            }
            frames.push(FrameAt {
                off,
                sealed,
                plain_start: 0,
            });
            off += 4 + u64::from(sealed);
        }
        let last = frames.pop().ok_or_else(|| bad(&self.path, "no frames"))?;
        let mut buf = Vec::new();
        // Whichever of the group's keys opens the last frame sealed the whole file.
        let (body, key, key_index) = open_frame(
            &mut file,
            &self.keys,
            &frame_aad(&self.pseudonym, &nonce, frames.len() as u64, KIND_LAST),
            &last,
            &mut buf,
        )
        .map_err(|_| bad(&self.path, "fails authentication"))?;
        let data_len = body
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| bad(&self.path, "too short"))?;
        let meta = serde_json::from_slice(&body[8..])
            .map_err(|_| bad(&self.path, "meta does not decode"))?;
        let mut at = 0u64;
        for f in &mut frames {
            f.plain_start = at;
            at += u64::from(f.sealed) - OVERHEAD as u64;
        }
        if at != data_len {
            return Err(bad(&self.path, "frames do not add up to the data"));
        }
        Ok(Some(SnapshotReader {
            meta,
            data_len,
            pos: 0,
            path: self.path.clone(),
            key_index,
            source: Source::Frames {
                file,
                key,
                pseudonym: self.pseudonym,
                nonce,
                frames,
                buf,
                current: None,
            },
        }))
    }

    /// A file of the earlier format: one seal over the meta and the bytes.
    fn open_whole(&self, mut file: File) -> io::Result<SnapshotReader> {
        let mut sealed = Vec::new();
        file.seek(SeekFrom::Start(0))?;
        file.read_to_end(&mut sealed)?;
        let mut aad = AAD_TAG.to_vec();
        aad.extend_from_slice(&self.pseudonym);
        let (body, key_index) = self
            .keys
            .open(&aad, &sealed)
            .map_err(|_| bad(&self.path, "fails authentication"))?;
        let len = body
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| bad(&self.path, "too short"))? as usize;
        let meta = body
            .get(4..4 + len)
            .ok_or_else(|| bad(&self.path, "meta cut short"))?;
        let meta =
            serde_json::from_slice(meta).map_err(|_| bad(&self.path, "meta does not decode"))?;
        let data = body[4 + len..].to_vec();
        Ok(SnapshotReader {
            meta,
            data_len: data.len() as u64,
            pos: 0,
            path: self.path.clone(),
            key_index,
            source: Source::Whole(data),
        })
    }

    /// The stored snapshot's meta, every frame authenticated (one frame in memory at a
    /// time); `None` without a snapshot.
    ///
    /// # Errors
    /// As [`SnapshotFile::open`], and a data frame that fails authentication.
    pub fn verify(&self) -> io::Result<Option<SnapshotMeta<NodeId, openraft::BasicNode>>> {
        self.verify_counting(&mut |_| {})
    }

    /// [`SnapshotFile::verify`], telling `read` the bytes as they are read (an audit counts
    /// and paces them).
    ///
    /// # Errors
    /// As [`SnapshotFile::verify`].
    pub fn verify_counting(
        &self,
        read: &mut dyn FnMut(u64),
    ) -> io::Result<Option<SnapshotMeta<NodeId, openraft::BasicNode>>> {
        let Some(mut r) = self.open()? else {
            return Ok(None);
        };
        let mut buf = vec![0u8; FRAME_BYTES];
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            read(n as u64);
        }
        // Read once, to check it: not worth the page cache's room (`page_cache.rs`).
        if let Source::Frames { file, .. } = &r.source {
            crate::page_cache::dont_need(file, 0, 0);
        }
        Ok(Some(r.meta))
    }

    /// Removes it (the group left this node).
    pub fn remove(&self) {
        let _ = fs::remove_file(&self.path);
    }

    /// Whether the stored snapshot is sealed with the group's newest key (`true` without
    /// one: nothing depends on an older key).
    ///
    /// # Errors
    /// As [`SnapshotFile::open`].
    pub fn under_newest_key(&self) -> io::Result<bool> {
        Ok(self.open()?.is_none_or(|r| r.key_index == 0))
    }
}

/// Where one frame is in the file, and where its bytes start in the data.
struct FrameAt {
    off: u64,
    sealed: u32,
    plain_start: u64,
}

/// Reads one frame into `buf`; gives its sealed parts.
fn read_frame<'a>(
    file: &mut File,
    at: &FrameAt,
    buf: &'a mut Vec<u8>,
) -> io::Result<(&'a [u8; NONCE_LEN], &'a mut [u8], &'a [u8; TAG_LEN])> {
    buf.resize(at.sealed as usize, 0);
    file.seek(SeekFrom::Start(at.off + 4))?;
    file.read_exact(buf)?;
    let (nonce, rest) = buf.split_at_mut(NONCE_LEN);
    let (ct, tag) = rest.split_at_mut(rest.len() - TAG_LEN);
    let nonce: &[u8; NONCE_LEN] = (&*nonce).try_into().map_err(io::Error::other)?;
    let tag: &[u8; TAG_LEN] = (&*tag).try_into().map_err(io::Error::other)?;
    Ok((nonce, ct, tag))
}

fn unauthentic() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "a snapshot frame fails authentication",
    )
}

/// Reads and opens one data frame into `buf` with `key`; gives its plaintext.
fn open_data_frame<'a>(
    file: &mut File,
    key: &SealKey,
    aad: &[u8],
    at: &FrameAt,
    buf: &'a mut Vec<u8>,
) -> io::Result<&'a [u8]> {
    let (nonce, ct, tag) = read_frame(file, at, buf)?;
    key.open_in_place(nonce, aad, ct, tag)
        .map_err(|_| unauthentic())?;
    Ok(&buf[NONCE_LEN..at.sealed as usize - TAG_LEN])
}

/// Reads and opens the last frame into `buf` with whichever of `keys` sealed it; gives its
/// plaintext, that key and its place in the ring.
fn open_frame<'a>(
    file: &mut File,
    keys: &KeyRing,
    aad: &[u8],
    at: &FrameAt,
    buf: &'a mut Vec<u8>,
) -> io::Result<(&'a [u8], SealKey, usize)> {
    let (nonce, ct, tag) = read_frame(file, at, buf)?;
    let (key, index) = keys
        .open_in_place(nonce, aad, ct, tag)
        .map_err(|_| unauthentic())?;
    Ok((&buf[NONCE_LEN..at.sealed as usize - TAG_LEN], key, index))
}

/// A stored snapshot being read: its meta, and its data through [`Read`] and [`Seek`]
/// (positions are in the data, not the file).
pub struct SnapshotReader {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    data_len: u64,
    pos: u64,
    path: PathBuf,
    /// Which of the group's keys sealed it (0: the newest).
    key_index: usize,
    source: Source,
}

enum Source {
    /// A file of the earlier format, read whole.
    Whole(Vec<u8>),
    Frames {
        file: File,
        key: SealKey,
        pseudonym: [u8; 8],
        nonce: [u8; FILE_NONCE_LEN],
        frames: Vec<FrameAt>,
        /// The frame last opened: its bytes are `buf[NONCE_LEN..]`.
        buf: Vec<u8>,
        current: Option<usize>,
    },
}

impl SnapshotReader {
    /// openraft's meta of this snapshot.
    pub fn meta(&self) -> &SnapshotMeta<NodeId, openraft::BasicNode> {
        &self.meta
    }

    /// The length of the state's bytes.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }
}

impl Read for SnapshotReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.data_len || out.is_empty() {
            return Ok(0);
        }
        let pos = self.pos;
        let n = match &mut self.source {
            Source::Whole(data) => {
                let start = usize::try_from(pos).map_err(io::Error::other)?;
                let from = data.get(start..).unwrap_or(&[]);
                let n = from.len().min(out.len());
                out[..n].copy_from_slice(&from[..n]);
                n
            }
            Source::Frames {
                file,
                key,
                pseudonym,
                nonce,
                frames,
                buf,
                current,
            } => {
                let i = frames.partition_point(|f| f.plain_start <= pos) - 1;
                let f = &frames[i];
                if *current != Some(i) {
                    *current = None;
                    let aad = frame_aad(pseudonym, nonce, i as u64, KIND_DATA);
                    open_data_frame(file, key, &aad, f, buf).map_err(|e| {
                        io::Error::new(e.kind(), format!("{}: {e}", self.path.display()))
                    })?;
                    *current = Some(i);
                }
                let plain = &buf[NONCE_LEN..f.sealed as usize - TAG_LEN];
                let within = usize::try_from(pos - f.plain_start).map_err(io::Error::other)?;
                let from = &plain[within..];
                let n = from.len().min(out.len());
                out[..n].copy_from_slice(&from[..n]);
                n
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for SnapshotReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.data_len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let pos = pos
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.pos = pos;
        Ok(pos)
    }
}

/// A snapshot being written (built here, or received from a leader): the state's bytes go
/// in through [`Write`], sealed a frame at a time into a temporary file;
/// [`SnapshotWriter::finish`] adds the meta and puts the file in place. Dropped unfinished,
/// its file is removed.
pub struct SnapshotWriter {
    key: SealKey,
    pseudonym: [u8; 8],
    nonce: [u8; FILE_NONCE_LEN],
    tmp: PathBuf,
    dest: PathBuf,
    file: File,
    /// The frame being filled.
    buf: Vec<u8>,
    /// Where each sealed data frame starts in the file.
    starts: Vec<u64>,
    end: u64,
    data_len: u64,
    /// Bytes written since the file was last synced (see [`SYNC_EVERY`]).
    unsynced: u64,
    writeback: Writeback,
    finished: bool,
}

/// How much of a snapshot being written may wait in the page cache: each time this much was
/// written, the file's way to the disk is started or waited for ([`Writeback`]), not only
/// at its end.
///
/// Why: the node's Raft log shares the disk, and a follower answers an append only once its
/// entries are durable — within the leader's 250 ms. One `fsync` of a whole large snapshot
/// at its end (a 256 MiB stream's) queued the log's own flushes behind hundreds of MiB for
/// a second or more, on the node writing it and on the others sharing the disk: appends
/// timed out, publishes stalled. Sent 8 MiB at a time, a log flush queues behind little.
pub const SYNC_EVERY: u64 = 8 * 1024 * 1024;

/// What a writer does each [`SYNC_EVERY`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writeback {
    /// Waits until they are on the disk (`fdatasync`). For a snapshot of the node's own
    /// state: it is built as fast as the CPU seals, faster than a disk may write, so without
    /// a wait the page cache would fill with it and the final sync would be the long one
    /// again.
    Wait,
    /// Starts their writeback and goes on (`posix_fadvise(DONTNEED)` on the range: Linux
    /// writes its dirty pages without waiting, and drops none that are dirty). For a snapshot
    /// received from a leader: it comes no faster than the network and the leader's reads,
    /// and a wait per step would stop the receiving for the disk's time — a catch-up of
    /// 256 MiB took ~1.2× as long with `Wait`. The disk writes while the next bytes come;
    /// the final sync finds little left.
    Start,
}

impl SnapshotWriter {
    /// The state's bytes taken so far.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    fn seal_frame(&mut self, kind: u8) -> io::Result<()> {
        let index = self.starts.len() as u64;
        let aad = frame_aad(&self.pseudonym, &self.nonce, index, kind);
        let (nonce, tag) = self.key.seal_in_place(&aad, &mut self.buf);
        let sealed = u32::try_from(self.buf.len() + OVERHEAD).map_err(io::Error::other)?;
        self.file.write_all(&sealed.to_le_bytes())?;
        self.file.write_all(&nonce)?;
        self.file.write_all(&self.buf)?;
        self.file.write_all(&tag)?;
        if kind == KIND_DATA {
            self.starts.push(self.end);
        }
        self.end += 4 + u64::from(sealed);
        self.buf.clear();
        self.unsynced += 4 + u64::from(sealed);
        if self.unsynced >= SYNC_EVERY {
            match self.writeback {
                Writeback::Wait => {
                    self.file.sync_data()?;
                    // Synced: its pages are clean and go back to the cache's free pages.
                    crate::page_cache::dont_need(
                        &self.file,
                        self.end - self.unsynced,
                        self.unsynced,
                    );
                }
                Writeback::Start => crate::page_cache::dont_need(
                    &self.file,
                    self.end - self.unsynced,
                    self.unsynced,
                ),
            }
            self.unsynced = 0;
        }
        Ok(())
    }

    /// Takes the data back to `offset`, to be written again from there: what a receiver does
    /// when its leader sends a chunk again (its answer to the first send was lost). `offset`
    /// must be within the frame being filled or on a frame boundary.
    ///
    /// # Errors
    /// `InvalidInput` for an offset past the data or inside a frame already sealed; I/O.
    pub fn rewind_to(&mut self, offset: u64) -> io::Result<()> {
        let sealed = self.starts.len() as u64 * FRAME_BYTES as u64;
        if offset > self.data_len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a snapshot chunk beyond what was received",
            ));
        }
        if offset >= sealed {
            self.buf
                .truncate(usize::try_from(offset - sealed).map_err(io::Error::other)?);
        } else if offset % FRAME_BYTES as u64 == 0 {
            let k = usize::try_from(offset / FRAME_BYTES as u64).map_err(io::Error::other)?;
            self.end = self.starts[k];
            self.starts.truncate(k);
            self.buf.clear();
            self.file.set_len(self.end)?;
            self.file.seek(SeekFrom::Start(self.end))?;
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a snapshot chunk that does not start on a frame",
            ));
        }
        self.data_len = offset;
        Ok(())
    }

    /// Seals what is left and the meta, syncs the file and puts it in place of the group's
    /// snapshot, durably. Gives the data's length.
    ///
    /// # Errors
    /// I/O (the temporary file is removed).
    pub fn finish(mut self, meta: &SnapshotMeta<NodeId, openraft::BasicNode>) -> io::Result<u64> {
        if !self.buf.is_empty() {
            self.seal_frame(KIND_DATA)?;
        }
        let meta = serde_json::to_vec(meta).map_err(io::Error::other)?;
        self.buf.extend_from_slice(&self.data_len.to_le_bytes());
        self.buf.extend_from_slice(&meta);
        self.seal_frame(KIND_LAST)?;
        self.file.sync_all()?;
        crate::page_cache::dont_need(&self.file, 0, 0);
        fs::rename(&self.tmp, &self.dest)?;
        self.finished = true;
        let dir = self.dest.parent().unwrap_or(Path::new("."));
        File::open(dir)?.sync_all()?;
        Ok(self.data_len)
    }
}

impl Write for SnapshotWriter {
    fn write(&mut self, mut data: &[u8]) -> io::Result<usize> {
        let n = data.len();
        while !data.is_empty() {
            let take = (FRAME_BYTES - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buf.len() == FRAME_BYTES {
                self.seal_frame(KIND_DATA)?;
            }
        }
        self.data_len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId, StoredMembership};

    fn key(b: u8) -> SealKey {
        SealKey::new(crate::crypto::Secret::from_fn(|k| k.fill(b)))
    }

    fn meta(index: u64) -> SnapshotMeta<NodeId, openraft::BasicNode> {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(3, 1), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: format!("3-{index}"),
        }
    }

    fn read_all(f: &SnapshotFile) -> (u64, Vec<u8>) {
        let mut r = f.open().unwrap().unwrap();
        let mut data = Vec::new();
        r.read_to_end(&mut data).unwrap();
        (r.meta().last_log_id.unwrap().index, data)
    }

    /// Bytes of `n` that repeat no frame (so a frame moved elsewhere reads differently).
    fn pattern(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i % 251) as u8 ^ (i / 65_536) as u8)
            .collect()
    }

    #[test]
    fn a_snapshot_is_stored_sealed_and_read_back_and_a_newer_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
        assert!(f.open().unwrap().is_none());
        f.write(&meta(10), b"the stream's secret image").unwrap();
        let raw = fs::read(f.path()).unwrap();
        assert!(
            !raw.windows(6).any(|w| w == b"secret"),
            "stored in the clear"
        );
        f.write(&meta(20), b"newer").unwrap();
        assert_eq!(read_all(&f), (20, b"newer".to_vec()));
        assert_eq!(f.verify().unwrap().unwrap().last_log_id.unwrap().index, 20);
        let left: Vec<_> = fs::read_dir(f.path().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "temporary files left: {left:?}");
    }

    #[test]
    fn a_large_snapshot_is_written_and_read_a_frame_at_a_time_from_any_position() {
        let dir = tempfile::tempdir().unwrap();
        let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
        let data = pattern(FRAME_BYTES * 3 + 12_345);
        let mut w = f.writer().unwrap();
        // Written in odd pieces, as an image is.
        for piece in data.chunks(77_777) {
            w.write_all(piece).unwrap();
        }
        assert_eq!(w.finish(&meta(5)).unwrap(), data.len() as u64);
        let mut r = f.open().unwrap().unwrap();
        assert_eq!(r.data_len(), data.len() as u64);
        assert_eq!(r.seek(SeekFrom::End(0)).unwrap(), data.len() as u64);
        for at in [
            0,
            1,
            FRAME_BYTES - 1,
            FRAME_BYTES,
            2 * FRAME_BYTES + 9,
            data.len() - 3,
        ] {
            r.seek(SeekFrom::Start(at as u64)).unwrap();
            let mut got = Vec::new();
            r.by_ref()
                .take(FRAME_BYTES as u64 + 10)
                .read_to_end(&mut got)
                .unwrap();
            let want = &data[at..(at + FRAME_BYTES + 10).min(data.len())];
            assert!(got == want, "read from {at} differs");
        }
        assert_eq!(read_all(&f).1, data);
        // Only the frames are on disk: no frame of plaintext, and frames of the stated size.
        let raw = fs::read(f.path()).unwrap();
        assert!(!raw.windows(64).any(|w| w == &data[1000..1064]));
        assert_eq!(
            raw.len(),
            HEADER_LEN as usize
                + data.len()
                + 5 * (4 + OVERHEAD)
                + 8
                + serde_json::to_vec(&meta(5)).unwrap().len()
        );
    }

    #[test]
    fn a_snapshot_past_the_sync_step_reads_back_whole_whether_it_waits_or_only_starts_writeback() {
        let data = pattern(SYNC_EVERY as usize * 2 + FRAME_BYTES / 3);
        for writeback in [Writeback::Wait, Writeback::Start] {
            let dir = tempfile::tempdir().unwrap();
            let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
            let mut w = f.writer_with(writeback).unwrap();
            for piece in data.chunks(300_001) {
                w.write_all(piece).unwrap();
            }
            w.finish(&meta(9)).unwrap();
            assert!(read_all(&f) == (9, data.clone()), "{writeback:?}: differs");
        }
    }

    #[test]
    fn a_flipped_bit_another_key_or_another_groups_file_fails_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
        f.write(&meta(10), &pattern(FRAME_BYTES + 100)).unwrap();
        assert!(SnapshotFile::new(dir.path(), [7; 8], key(2))
            .open()
            .is_err());
        let other = SnapshotFile::new(dir.path(), [8; 8], key(1));
        fs::copy(f.path(), other.path()).unwrap();
        assert!(
            other.open().is_err(),
            "a file moved to another group opened"
        );
        // A bit in the first data frame: found when that frame is read, and by verify.
        let mut raw = fs::read(f.path()).unwrap();
        raw[HEADER_LEN as usize + 4 + 100] ^= 1;
        fs::write(f.path(), &raw).unwrap();
        assert!(f.verify().is_err());
        let mut r = f.open().unwrap().unwrap();
        assert!(r.read_to_end(&mut Vec::new()).is_err());
    }

    #[test]
    fn frames_cut_dropped_or_spliced_from_another_snapshot_fail_authentication() {
        let dir = tempfile::tempdir().unwrap();
        let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
        let data = pattern(FRAME_BYTES * 2 + 10);
        f.write(&meta(10), &data).unwrap();
        let old = fs::read(f.path()).unwrap();
        f.write(&meta(11), &data).unwrap();
        let new = fs::read(f.path()).unwrap();
        let frame = 4 + FRAME_BYTES + OVERHEAD;
        let h = HEADER_LEN as usize;
        // The second data frame dropped.
        let mut cut = new[..h + frame].to_vec();
        cut.extend_from_slice(&new[h + 2 * frame..]);
        fs::write(f.path(), &cut).unwrap();
        assert!(f.verify().is_err(), "a dropped frame went unnoticed");
        // The last frame (the meta) cut off.
        fs::write(f.path(), &new[..new.len() - 30]).unwrap();
        assert!(f.open().is_err());
        // A frame of the older snapshot (same group, same key) in the newer one's place.
        let mut spliced = new.clone();
        spliced[h..h + frame].copy_from_slice(&old[h..h + frame]);
        fs::write(f.path(), &spliced).unwrap();
        assert!(f.verify().is_err(), "a spliced frame went unnoticed");
        fs::write(f.path(), &new).unwrap();
        assert_eq!(read_all(&f), (11, data));
    }

    #[test]
    fn a_snapshot_of_the_earlier_single_seal_format_still_opens() {
        let dir = tempfile::tempdir().unwrap();
        let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
        let m = serde_json::to_vec(&meta(4)).unwrap();
        let mut body = (m.len() as u32).to_le_bytes().to_vec();
        body.extend_from_slice(&m);
        body.extend_from_slice(b"old image");
        let mut aad = AAD_TAG.to_vec();
        aad.extend_from_slice(&[7; 8]);
        fs::create_dir_all(f.path().parent().unwrap()).unwrap();
        fs::write(f.path(), key(1).seal(&aad, &body)).unwrap();
        assert_eq!(read_all(&f), (4, b"old image".to_vec()));
        assert!(SnapshotFile::new(dir.path(), [7; 8], key(2))
            .open()
            .is_err());
    }

    #[test]
    fn a_receiver_takes_back_a_chunk_sent_again_and_an_unfinished_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let f = SnapshotFile::new(dir.path(), [7; 8], key(1));
        let data = pattern(FRAME_BYTES * 3);
        let mut w = f.writer().unwrap();
        w.write_all(&data[..FRAME_BYTES * 2 + 5]).unwrap();
        // The chunk at 1 frame sent again, then inside the frame being filled.
        w.rewind_to(FRAME_BYTES as u64).unwrap();
        w.write_all(&data[FRAME_BYTES..FRAME_BYTES * 2 + 3])
            .unwrap();
        w.rewind_to(FRAME_BYTES as u64 * 2 + 1).unwrap();
        assert!(w.rewind_to(5).is_err(), "inside a sealed frame");
        assert!(
            w.rewind_to(FRAME_BYTES as u64 * 9).is_err(),
            "past the data"
        );
        w.write_all(&data[FRAME_BYTES * 2 + 1..]).unwrap();
        w.finish(&meta(1)).unwrap();
        assert_eq!(read_all(&f).1, data);
        let w = f.writer().unwrap();
        w.data_len();
        drop(w);
        let mut stray = f.writer().unwrap();
        stray.write_all(b"x").unwrap();
        std::mem::forget(stray); // as a crash would leave it
        remove_leftovers(dir.path());
        let names: Vec<_> = fs::read_dir(f.path().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names,
            vec![f.path().file_name().unwrap().to_string_lossy().into_owned()]
        );
    }

    /// A file that shares a group's key ring: a snapshot stored before the ring's key was
    /// rotated still opens (and says so), the next is sealed with the new key, and once the
    /// older key is dropped only the newer snapshot opens.
    #[test]
    fn a_snapshot_follows_its_groups_key_ring() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ring = KeyRing::new(key(1));
        let f = SnapshotFile::with_ring(dir.path(), [3; 8], ring.clone());
        assert!(f.under_newest_key().expect("none stored"));
        f.write(&meta(5), &pattern(3 * FRAME_BYTES / 2))
            .expect("write");
        ring.push(key(2));
        assert!(!f.under_newest_key().expect("opens with the older key"));
        assert_eq!(read_all(&f).1, pattern(3 * FRAME_BYTES / 2));
        let older = std::fs::read(f.path()).expect("read");
        f.write(&meta(9), b"newer").expect("write");
        assert!(f.under_newest_key().expect("opens"));
        ring.keep_newest();
        assert_eq!(read_all(&f), (9, b"newer".to_vec()));
        std::fs::write(f.path(), older).expect("put the older back");
        assert!(f.open().is_err(), "sealed with a dropped key");
    }
}
