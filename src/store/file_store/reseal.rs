//! Re-sealing a stream under a new data key one segment at a time, in place (issue 17's
//! online data-key rotation).
//!
//! A sealed segment never changes, so it can be rewritten anywhere: [`FileStore::reseal_begin`]
//! makes the new key the key of new segments, closes the active segment if an older key
//! sealed it, and hands out one [`SegmentReseal`] per sealed segment under an older key —
//! the file, both keys and where it goes. Whoever holds one (the re-sealer's thread, not the
//! stream's) writes the segment again beside the original ([`SegmentReseal::write`]): every
//! block authenticated under the old key, its hash chain checked, and sealed again under the
//! new key at the same index and offset, with the chain linked anew. The block lengths do not
//! change, so every record stays where the index points. The stream's thread then puts the
//! copy in place of the original ([`FileStore::reseal_install`]: a rename and a directory
//! fsync), and once no segment depends on an older key [`FileStore::reseal_finish`] forgets
//! it. Publishing goes on meanwhile: new blocks go to a new segment under the new key.
//!
//! Crash-safe: the copy is `seg-<id>.reseal` until it is complete and fsync'd, and the rename
//! is atomic, so a segment is always either the original or the whole copy — both readable
//! while the keyring holds both keys, which it does until the re-sealing finished. A copy a
//! crash left behind is removed when the stream opens ([`remove_leftovers`]).

use std::path::PathBuf;
use std::sync::Arc;

use super::{io_err, FileStore, SegInfo};
use crate::crypto::TAG_LEN;
use crate::store::block::{
    block_tag, open_block, opened_prev_tag, reseal_opened, BlockPlace, Sealer,
};
use crate::store::io::{SegmentFile, SegmentIo};
use crate::store::segment::{
    parse_segment_file_name, read_block, SegmentHeader, SEGMENT_HEADER_LEN,
};
use crate::store::StoreError;

/// The file name suffix of a segment being re-sealed.
const COPY_SUFFIX: &str = ".reseal";

/// One sealed segment to rewrite under the stream's current data key: what a thread other
/// than the stream's needs to do it.
pub struct SegmentReseal {
    io: Arc<dyn SegmentIo>,
    path: PathBuf,
    file: Arc<dyn SegmentFile>,
    header: SegmentHeader,
    len: u64,
    from: Sealer,
    to: Sealer,
    to_version: u32,
}

impl std::fmt::Debug for SegmentReseal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentReseal")
            .field("segment", &self.header.segment_id)
            .field("from", &self.header.dek_version)
            .field("to", &self.to_version)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// A segment written again under the new key, beside the original, not yet in its place.
/// Dropped without [`FileStore::reseal_install`] putting it in place, its file is removed.
pub struct ResealedSegment {
    io: Arc<dyn SegmentIo>,
    copy: PathBuf,
    segment: u64,
    from_version: u32,
    to_version: u32,
    len: u64,
}

impl std::fmt::Debug for ResealedSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResealedSegment")
            .field("segment", &self.segment)
            .field("to", &self.to_version)
            .finish_non_exhaustive()
    }
}

impl Drop for ResealedSegment {
    fn drop(&mut self) {
        // After the rename there is nothing at this path; before it, the copy is not wanted.
        let _ = self.io.remove_file(&self.copy);
    }
}

impl ResealedSegment {
    /// The segment id.
    pub fn segment(&self) -> u64 {
        self.segment
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the segment holds no bytes (never: a segment has its header).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Bytes written between two fdatasyncs of a copy: the disk's dirty pages stay few, so the
/// fsyncs of publishes do not wait behind a whole segment's.
const SYNC_EVERY: u64 = 1 << 20;

impl SegmentReseal {
    /// The segment id.
    pub fn segment(&self) -> u64 {
        self.header.segment_id
    }

    /// Its length in bytes (what rewriting it reads and writes).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the segment holds no bytes (never: a segment has its header).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the segment again under the new key beside the original (`seg-<id>.reseal`,
    /// fsync'd when complete). `pace` is told the bytes of each block written, and may wait.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when a block does not authenticate under the old key or breaks
    /// the segment's hash chain (nothing is changed then); I/O errors.
    pub fn write(self, pace: &mut dyn FnMut(u64)) -> Result<ResealedSegment, StoreError> {
        let id = self.header.segment_id;
        let name = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let copy = self.path.with_file_name(format!("{name}{COPY_SUFFIX}"));
        let _ = self.io.remove_file(&copy);
        let out = self
            .io
            .create_new(&copy)
            .map_err(io_err(&copy, "create re-sealed copy"))?;
        // From here the copy is removed unless it is put in place.
        let done = ResealedSegment {
            io: Arc::clone(&self.io),
            copy: copy.clone(),
            segment: id,
            from_version: self.header.dek_version,
            to_version: self.to_version,
            len: self.len,
        };
        let corrupt = |offset: u64, reason: String| StoreError::Corrupt {
            file: self.path.clone(),
            offset,
            reason,
        };
        let mut head = [0u8; SEGMENT_HEADER_LEN];
        self.file
            .read_exact_at(&mut head, 0)
            .map_err(io_err(&self.path, "read"))?;
        let header = SegmentHeader::verify(&head, &self.from)
            .map_err(|e| corrupt(0, format!("segment header: {e}")))?;
        if header != self.header {
            return Err(corrupt(
                0,
                "segment header changed since the stream opened".into(),
            ));
        }
        let mut new_header = header;
        new_header.dek_version = self.to_version;
        out.write_all_at(&new_header.encode(&self.to), 0)
            .map_err(io_err(&copy, "write"))?;
        pace(SEGMENT_HEADER_LEN as u64);
        let mut off = SEGMENT_HEADER_LEN as u64;
        let mut index = 0u64;
        let mut old_prev = [0u8; TAG_LEN];
        let mut new_prev = [0u8; TAG_LEN];
        let mut unsynced = 0u64;
        while off < self.len {
            let mut block = read_block(self.file.as_ref(), off).map_err(|e| {
                if e.kind() == std::io::ErrorKind::InvalidData {
                    corrupt(off, "bad frame header".into())
                } else {
                    io_err(&self.path, "read")(e)
                }
            })?;
            let place = |dek_version| BlockPlace {
                store_uuid: header.store_uuid,
                stream_id: header.stream_id,
                segment_id: id,
                dek_version,
                index,
                offset: off,
            };
            let old_tag =
                block_tag(&block).ok_or_else(|| corrupt(off, "block too short".into()))?;
            open_block(&self.from, &place(header.dek_version), &mut block)
                .map_err(|e| corrupt(off, format!("block {index}: {e}")))?;
            if opened_prev_tag(&block) != Some(old_prev) {
                return Err(corrupt(
                    off,
                    format!("block {index} does not continue the segment's hash chain"),
                ));
            }
            new_prev = reseal_opened(&self.to, &place(self.to_version), &mut block, new_prev)
                .map_err(|e| corrupt(off, format!("block {index}: {e}")))?;
            out.write_all_at(&block, off)
                .map_err(io_err(&copy, "write"))?;
            old_prev = old_tag;
            let n = block.len() as u64;
            off += n;
            index += 1;
            unsynced += n;
            if unsynced >= SYNC_EVERY {
                out.sync_data().map_err(io_err(&copy, "fdatasync"))?;
                unsynced = 0;
            }
            pace(n);
        }
        if off != self.len {
            return Err(corrupt(
                off,
                "the last block runs past the segment's end".into(),
            ));
        }
        out.sync_data().map_err(io_err(&copy, "fdatasync"))?;
        Ok(done)
    }
}

/// Removes copies an interrupted re-sealing left in a stream directory (the originals are
/// whole: a copy is renamed into place only once complete).
pub(super) fn remove_leftovers(io: &dyn SegmentIo, dir: &std::path::Path) {
    let Ok(names) = io.list_dir(dir) else { return };
    for name in names {
        let is_copy = name
            .strip_suffix(COPY_SUFFIX)
            .and_then(parse_segment_file_name)
            .is_some();
        if is_copy {
            let _ = io.remove_file(&dir.join(&name));
        }
    }
}

impl FileStore {
    /// Starts re-sealing the stream under `dek` at `dek_version` (the current key already, to
    /// finish a re-sealing that was interrupted): new segments are sealed with it from now on,
    /// and the active segment is closed if an older key sealed it. Returns the sealed segments
    /// an older key sealed, to be written again ([`SegmentReseal::write`], on any thread) and
    /// put in place ([`FileStore::reseal_install`]).
    ///
    /// # Errors
    /// Write errors (closing the active segment); [`StoreError::KeyUnavailable`].
    pub fn reseal_begin(
        &mut self,
        dek_version: u32,
        dek: crate::crypto::DataKey,
    ) -> Result<Vec<SegmentReseal>, StoreError> {
        self.check_write()?;
        if dek_version != self.keys.current_version() {
            self.keys.rotate(dek_version, dek);
        }
        let current = self.keys.current_version();
        if self
            .active
            .as_ref()
            .is_some_and(|w| w.header.dek_version != current)
        {
            self.close_active()?;
        }
        let mut out = Vec::new();
        for (id, s) in &self.segments {
            if !s.sealed || s.header.dek_version == current {
                continue;
            }
            let key = |version| {
                self.keys
                    .sealer(*id, version)
                    .ok_or(StoreError::KeyUnavailable {
                        segment: *id,
                        version,
                    })
            };
            out.push(SegmentReseal {
                io: Arc::clone(&self.io),
                path: s.path.clone(),
                file: Arc::clone(&s.file),
                header: s.header,
                len: s.len,
                from: key(s.header.dek_version)?,
                to: key(current)?,
                to_version: current,
            });
        }
        Ok(out)
    }

    /// Puts a re-sealed copy in place of its original. `false` (and the copy removed) when
    /// the segment is no longer there as it was (dropped or compacted meanwhile).
    ///
    /// # Errors
    /// The rename or the directory's fsync failed (the original, or the copy, is in place:
    /// both read while both keys are kept); [`StoreError::KeyUnavailable`].
    pub fn reseal_install(&mut self, copy: ResealedSegment) -> Result<bool, StoreError> {
        self.check_write()?;
        let id = copy.segment;
        let Some(s) = self.segments.get(&id) else {
            return Ok(false);
        };
        if !s.sealed || s.header.dek_version != copy.from_version || s.len != copy.len {
            return Ok(false);
        }
        let sealer = self
            .keys
            .sealer(id, copy.to_version)
            .ok_or(StoreError::KeyUnavailable {
                segment: id,
                version: copy.to_version,
            })?;
        let path = s.path.clone();
        self.io
            .rename(&copy.copy, &path)
            .map_err(io_err(&path, "rename re-sealed copy"))?;
        let file: Arc<dyn SegmentFile> =
            Arc::from(self.io.open(&path, false).map_err(io_err(&path, "open"))?);
        // Until the directory is synced a crash may bring back the original: keep reading it
        // as the original (its key stays until `reseal_finish` finds no segment under it).
        self.io
            .sync_dir(&self.cfg.dir)
            .map_err(io_err(&self.cfg.dir, "fsync dir"))?;
        if let Some(s) = self.segments.get_mut(&id) {
            *s = SegInfo {
                header: SegmentHeader {
                    dek_version: copy.to_version,
                    ..s.header
                },
                file,
                sealer,
                path,
                live: s.live,
                len: s.len,
                sealed: true,
            };
        }
        // Cached blocks stay valid: their plaintext and their places did not change.
        Ok(true)
    }

    /// Ends a re-sealing: the key versions segments still depend on besides the current one
    /// (none: the store forgot every older key, which may now be destroyed).
    pub fn reseal_finish(&mut self) -> Vec<u32> {
        let current = self.keys.current_version();
        let mut left: Vec<u32> = self
            .segments
            .values()
            .map(|s| s.header.dek_version)
            .chain(self.active.as_ref().map(|w| w.header.dek_version))
            .filter(|v| *v != current)
            .collect();
        left.sort_unstable();
        left.dedup();
        if left.is_empty() {
            self.keys.keep_only_current();
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::Bytes;

    use super::*;
    use crate::store::io::FaultIo;
    use crate::store::segment::StreamKeys;
    use crate::store::testing::support::{dek, dek_v2, dir, keys, small_cfg, STORE, STREAM};
    use crate::store::{NewMsg, StreamStore};

    type Content = BTreeMap<u64, (String, Bytes)>;

    fn content(s: &FileStore) -> Content {
        let last = s.state().last_seq;
        (1..=last)
            .filter_map(|q| s.get(q).unwrap().map(|m| (q, (m.subject, m.payload))))
            .collect()
    }

    fn publish(s: &mut FileStore, n: usize) {
        for i in 0..n {
            let body = format!("ledger entry {i} ").repeat(1 + i % 7);
            s.append_batch(&[NewMsg::new(format!("acme.{}", i % 3), body.into_bytes())])
                .unwrap();
        }
    }

    fn keys_v2(with_v1: bool) -> StreamKeys {
        let k = StreamKeys::new(STORE, STREAM, 2, dek_v2());
        if with_v1 {
            k.with_previous(1, dek(STREAM))
        } else {
            k
        }
    }

    fn open_with(io: &FaultIo, keys: StreamKeys) -> Result<FileStore, StoreError> {
        FileStore::open(
            Arc::new(io.clone()) as Arc<dyn SegmentIo>,
            keys,
            small_cfg(),
        )
    }

    fn copies(io: &FaultIo) -> Vec<String> {
        io.with_fs(|fs| fs.names(&dir()))
            .into_iter()
            .filter(|n| n.ends_with(COPY_SUFFIX))
            .collect()
    }

    /// A stream of several sealed segments, some messages deleted.
    fn stream() -> (FaultIo, FileStore) {
        let io = FaultIo::new();
        let mut s = open_with(&io, keys()).unwrap();
        publish(&mut s, 80);
        for q in [3, 4, 17, 40] {
            s.delete(q, false).unwrap();
        }
        assert!(s.segments.len() > 3, "several segments");
        (io, s)
    }

    #[test]
    fn every_segment_is_resealed_in_place_while_appends_go_on_under_the_new_key() {
        let (io, mut s) = stream();
        let sealed = s.segments.values().filter(|g| g.sealed).count();
        let jobs = s.reseal_begin(2, dek_v2()).unwrap();
        // The active segment was closed: every segment is a job.
        assert_eq!(jobs.len(), s.segments.len());
        assert!(jobs.len() >= sealed);
        publish(&mut s, 10);
        let before = content(&s);
        for job in jobs {
            let mut paced = 0;
            let copy = job.write(&mut |n| paced += n).unwrap();
            assert_eq!(paced, copy.len(), "every byte went through the pace");
            assert!(s.reseal_install(copy).unwrap());
            // Reads go on from the same places, now under the new key.
            assert_eq!(content(&s), before);
        }
        assert!(s.segments.values().all(|g| g.header.dek_version == 2));
        assert_eq!(s.reseal_finish(), Vec::<u32>::new());
        assert_eq!(s.keys.versions(), [2]);
        assert!(copies(&io).is_empty());
        drop(s);
        // The old key is not needed any more.
        let s = open_with(&io, keys_v2(false)).unwrap();
        assert_eq!(content(&s), before);
        assert!(s.report().corruption.is_empty());
        assert!(s.report().torn_tail.is_none());
    }

    #[test]
    fn a_crash_anywhere_in_a_re_sealing_reopens_whole_and_without_copies() {
        let (io, mut s) = stream();
        let want = content(&s);
        io.capture_crash_images(11, 3);
        let jobs = s.reseal_begin(2, dek_v2()).unwrap();
        for job in jobs {
            let copy = job.write(&mut |_| {}).unwrap();
            assert!(s.reseal_install(copy).unwrap());
        }
        drop(s);
        let images = io.take_crash_images();
        assert!(images.len() > 20, "{} crash points", images.len());
        for (event, img) in images {
            let io = FaultIo::from_image(img);
            let s = open_with(&io, keys_v2(true))
                .unwrap_or_else(|e| panic!("crash after event {event}: {e}"));
            assert_eq!(content(&s), want, "crash after event {event}");
            assert!(
                s.report().corruption.is_empty(),
                "crash after event {event}"
            );
            assert!(copies(&io).is_empty(), "crash after event {event}");
        }
    }

    #[test]
    fn a_tampered_segment_is_refused_and_its_copy_removed() {
        let (io, mut s) = stream();
        let jobs = s.reseal_begin(2, dek_v2()).unwrap();
        let victim = jobs.first().unwrap().path.clone();
        io.with_fs(|fs| {
            let mut d = fs.file_data(&victim).unwrap();
            if let Some(b) = d.get_mut(SEGMENT_HEADER_LEN + 100) {
                *b ^= 0x40;
            }
            fs.set_file_data(&victim, d);
        });
        let mut jobs = jobs.into_iter();
        let err = jobs.next().unwrap().write(&mut |_| {}).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(copies(&io).is_empty());
        // The others are re-sealed; the tampered one keeps its key, which is not forgotten.
        for job in jobs {
            let copy = job.write(&mut |_| {}).unwrap();
            assert!(s.reseal_install(copy).unwrap());
        }
        assert_eq!(s.reseal_finish(), [1]);
        assert_eq!(s.keys.versions(), [1, 2]);
    }

    #[test]
    fn a_segment_compacted_away_meanwhile_is_not_put_back() {
        let (io, mut s) = stream();
        let want = content(&s);
        let jobs = s.reseal_begin(2, dek_v2()).unwrap();
        let copies_made: Vec<_> = jobs
            .into_iter()
            .map(|j| j.write(&mut |_| {}).unwrap())
            .collect();
        s.compact().unwrap();
        for copy in copies_made {
            assert!(!s.reseal_install(copy).unwrap());
        }
        assert!(copies(&io).is_empty());
        assert_eq!(content(&s), want);
        assert_eq!(s.reseal_finish(), Vec::<u32>::new());
    }

    #[test]
    fn a_copy_left_by_a_crash_is_removed_when_the_stream_opens() {
        let (io, mut s) = stream();
        let want = content(&s);
        let job = s
            .reseal_begin(2, dek_v2())
            .unwrap()
            .into_iter()
            .next()
            .unwrap();
        let copy = job.write(&mut |_| {}).unwrap();
        std::mem::forget(copy);
        drop(s);
        assert_eq!(copies(&io).len(), 1);
        let s = open_with(&io, keys_v2(true)).unwrap();
        assert!(copies(&io).is_empty());
        assert_eq!(content(&s), want);
    }
}
