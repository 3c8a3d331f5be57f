//! A stream's messages as they are at one moment, read from any thread while the store goes
//! on ([`FileStore::frozen`]).
//!
//! A block never changes once written: appends go after it, deletions are later tombstones,
//! compaction and re-sealing write new files and unlink the old ones (an open descriptor keeps
//! reading them). So the moment's live messages are fully described by where their records lie
//! — kept as runs of consecutive records of one block, a few per block, not an entry per
//! message — plus each segment's descriptor and key. The stream's thread takes the moment (an
//! index walk, no I/O); another thread then reads, authenticates and decrypts the blocks. This
//! is how a replicated stream's snapshot image is written without holding up its shard.

use std::path::PathBuf;
use std::sync::Arc;

use super::cache::{open_block_at, record_of, CachedBlock};
use super::{FileStore, Loc};
use crate::store::block::{BlockPlace, Sealer};
use crate::store::io::SegmentFile;
use crate::store::{StoreError, StoredMsg};

/// Consecutive live records of one block: `count` records from `first` on, sequences from
/// `seq` on (in a block, records of consecutive sequences are consecutive).
#[derive(Debug, Clone, Copy)]
struct Run {
    first: Loc,
    seq: u64,
    count: u32,
}

struct Segment {
    path: PathBuf,
    file: Arc<dyn SegmentFile>,
    sealer: Sealer,
    dek_version: u32,
}

/// The live messages of a file store at one moment (see the module docs).
pub struct FrozenMessages {
    runs: Vec<Run>,
    segments: std::collections::HashMap<u64, Segment>,
    store_uuid: [u8; 16],
    stream_id: [u8; 16],
    dir: PathBuf,
}

impl std::fmt::Debug for FrozenMessages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrozenMessages")
            .field("runs", &self.runs.len())
            .field("segments", &self.segments.len())
            .finish_non_exhaustive()
    }
}

impl FrozenMessages {
    /// Calls `f` with every message of the moment, in sequence order; stops at `f`'s first
    /// error.
    ///
    /// # Errors
    /// A block that does not read or authenticate; `f`'s.
    pub fn for_each<E: From<StoreError>>(
        &self,
        mut f: impl FnMut(StoredMsg) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut open: Option<((u64, u64), CachedBlock)> = None;
        for run in &self.runs {
            let key = (run.first.seg(), run.first.off());
            let block = match open.take() {
                Some((k, b)) if k == key => b,
                _ => self.open(run.first)?,
            };
            for i in 0..run.count {
                let mut loc = run.first;
                loc.rec += i;
                f(record_of(&block, loc, run.seq + u64::from(i), &self.dir)?)?;
            }
            open = Some((key, block));
        }
        Ok(())
    }

    /// How many messages.
    pub fn len(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.count)).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    fn open(&self, loc: Loc) -> Result<CachedBlock, StoreError> {
        let s = self
            .segments
            .get(&loc.seg())
            .ok_or_else(|| StoreError::Corrupt {
                file: self.dir.clone(),
                offset: loc.off(),
                reason: format!("segment {:016x} missing", loc.seg()),
            })?;
        let place = BlockPlace {
            store_uuid: self.store_uuid,
            stream_id: self.stream_id,
            segment_id: loc.seg(),
            dek_version: s.dek_version,
            index: loc.block(),
            offset: loc.off(),
        };
        open_block_at(s.file.as_ref(), &s.path, &s.sealer, &place)
    }
}

impl FileStore {
    /// The live messages as they are now, to be read on any thread (see the module docs).
    ///
    /// # Errors
    /// [`StoreError::Closed`]; [`StoreError::KeyUnavailable`] for a segment whose key the
    /// store does not hold.
    pub fn frozen(&self) -> Result<FrozenMessages, StoreError> {
        if self.closed {
            return Err(StoreError::Closed);
        }
        let mut runs: Vec<Run> = Vec::new();
        for (seq, e) in self.index.iter() {
            let loc = e.loc;
            if let Some(r) = runs.last_mut() {
                let same_block = r.first.seg() == loc.seg() && r.first.off() == loc.off();
                if same_block
                    && r.first.rec + r.count == loc.rec
                    && r.seq + u64::from(r.count) == seq
                {
                    r.count += 1;
                    continue;
                }
            }
            runs.push(Run {
                first: loc,
                seq,
                count: 1,
            });
        }
        let mut segments = std::collections::HashMap::new();
        for r in &runs {
            let id = r.first.seg();
            if segments.contains_key(&id) {
                continue;
            }
            let Some(s) = self.segments.get(&id) else {
                continue; // reported when read
            };
            let version = s.header.dek_version;
            let sealer = self
                .keys
                .sealer(id, version)
                .ok_or(StoreError::KeyUnavailable {
                    segment: id,
                    version,
                })?;
            segments.insert(
                id,
                Segment {
                    path: s.path.clone(),
                    file: Arc::clone(&s.file),
                    sealer,
                    dek_version: version,
                },
            );
        }
        Ok(FrozenMessages {
            runs,
            segments,
            store_uuid: self.keys.store_uuid,
            stream_id: self.keys.stream_id,
            dir: self.cfg.dir.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::io::FaultIo;
    use crate::store::testing::support::{open, small_cfg};
    use crate::store::{NewMsg, PurgeRequest, StreamStore};

    fn all(f: &FrozenMessages) -> Vec<StoredMsg> {
        let mut out = Vec::new();
        f.for_each(|m| {
            out.push(m);
            Ok::<_, StoreError>(())
        })
        .unwrap();
        out
    }

    fn now(s: &FileStore) -> Vec<StoredMsg> {
        let mut out = Vec::new();
        let mut seq = 1;
        while let Some(m) = s.next_by_subject(seq, ">").unwrap() {
            seq = m.seq + 1;
            out.push(m);
        }
        out
    }

    #[test]
    fn the_moment_reads_alike_while_the_store_appends_deletes_and_compacts() {
        let io = FaultIo::new();
        let mut s = open(&io).unwrap();
        assert!(small_cfg().max_segment_bytes < 4096);
        for i in 0..120u32 {
            let batch: Vec<NewMsg> = (0..(1 + i % 5))
                .map(|k| {
                    let h =
                        (k == 1).then(|| bytes::Bytes::from_static(b"NATS/1.0\r\nA: b\r\n\r\n"));
                    let mut m = NewMsg::new(format!("s.{}", i % 5), format!("payload {i}/{k}"));
                    m.headers = h;
                    m
                })
                .collect();
            s.append_batch(&batch).unwrap();
        }
        for q in [1, 2, 7, 30, 31, 32, 100] {
            s.delete(q, false).unwrap();
        }
        let want = now(&s);
        let frozen = s.frozen().unwrap();
        assert_eq!(frozen.len(), want.len() as u64);
        assert!(
            (frozen.runs.len() as u64) < frozen.len() / 2,
            "runs, not entries"
        );
        // The store goes on: more messages, deletions, a purge with compaction.
        for i in 0..40 {
            s.append_batch(&[NewMsg::new("s.new", format!("later {i}"))])
                .unwrap();
        }
        s.delete(50, true).unwrap();
        s.purge(&PurgeRequest {
            keep: Some(10),
            ..Default::default()
        })
        .unwrap();
        s.compact().unwrap();
        assert_ne!(now(&s).len(), want.len());
        assert_eq!(all(&frozen), want);
    }
}
