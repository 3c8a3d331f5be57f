//! Opening a file store: recovery of every segment, then the writer resumes the last one.

use super::*;

impl FileStore {
    /// Opens (or creates) the stream in `cfg.dir`: recovers, cuts a torn tail, removes
    /// leftovers of interrupted compactions, rebuilds the indexes.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] (nothing was changed on disk), [`StoreError::KeyUnavailable`],
    /// I/O errors.
    pub fn open(
        io: Arc<dyn SegmentIo>,
        keys: StreamKeys,
        cfg: FileStoreConfig,
    ) -> Result<FileStore, StoreError> {
        Self::open_with(io, keys, cfg, false)
    }

    /// Opens a stream for inspection even when it is corrupt: every authentic block is indexed
    /// and readable, writes fail with [`StoreError::Offline`], and nothing on disk changes.
    /// [`FileStore::report`] lists the findings.
    ///
    /// # Errors
    /// I/O errors and missing key versions.
    pub fn open_inspect(
        io: Arc<dyn SegmentIo>,
        keys: StreamKeys,
        cfg: FileStoreConfig,
    ) -> Result<FileStore, StoreError> {
        Self::open_with(io, keys, cfg, true)
    }

    pub(super) fn open_with(
        io: Arc<dyn SegmentIo>,
        keys: StreamKeys,
        cfg: FileStoreConfig,
        inspect: bool,
    ) -> Result<FileStore, StoreError> {
        let dir = cfg.dir.clone();
        if !inspect {
            io.create_dir_all(&dir)
                .map_err(io_err(&dir, "create dir"))?;
            reseal::remove_leftovers(io.as_ref(), &dir);
        }
        let opts = RecoverOptions {
            min_durable: cfg.min_durable,
            inspect,
            read_only: inspect,
        };
        let mut rec = recovery::scan(io.as_ref(), &dir, &keys, &opts)?;
        let offline = recovery::first_corruption(&rec.report);
        if let Some(e) = &offline {
            tracing::error!(error = %e, "stream corrupt; offline");
            if !inspect {
                return Err(recovery::first_corruption(&rec.report).unwrap_or(
                    StoreError::Offline {
                        reason: e.to_string(),
                    },
                ));
            }
        }
        if !inspect {
            recovery::repair(io.as_ref(), &mut rec)?;
        }
        let mut index: Index<Loc> = Index::new();
        let mut last_rec = 0u64;
        for (seg, b) in recovery::live_blocks(&rec.live) {
            for r in seg.records.get(b.records.clone()).unwrap_or(&[]) {
                if r.seq <= last_rec {
                    if !inspect {
                        return Err(StoreError::Corrupt {
                            file: seg.path.clone(),
                            offset: b.offset,
                            reason: format!("sequence {} goes backwards", r.seq),
                        });
                    }
                    continue;
                }
                last_rec = r.seq;
                let Some(loc) = Loc::new(seg.id, b.offset, b.index, r.rec) else {
                    return Err(StoreError::Corrupt {
                        file: seg.path.clone(),
                        offset: b.offset,
                        reason: "block position beyond 32 bits".into(),
                    });
                };
                let subject = index.intern(&r.subject);
                index.insert(
                    r.seq,
                    Entry {
                        ts: r.ts,
                        subject,
                        size: r.size,
                        loc,
                    },
                );
            }
            for d in &b.deletions {
                index.remove_range(d.start, d.len);
            }
            index.raise_last(b.last_seq, b.last_ts);
        }
        let mut live_counts: HashMap<u64, u64> = HashMap::new();
        for (_, e) in index.iter() {
            *live_counts.entry(e.loc.seg()).or_default() += 1;
        }
        let mut segments = BTreeMap::new();
        let mut active = None;
        let mut uncovered = false;
        let last_id = rec.live.last().map(|s| s.id);
        for mut s in rec.live {
            let Some(header) = s.header else { continue };
            let Some(sealer) = s.take_sealer() else {
                continue;
            };
            let writable = Some(s.id) == last_id && !s.sealed && !inspect;
            let file: Arc<dyn SegmentFile> = Arc::from(
                io.open(&s.path, writable)
                    .map_err(io_err(&s.path, "open"))?,
            );
            let len = s.valid_end();
            if writable {
                let wfile = Arc::clone(&file);
                let wsealer =
                    keys.sealer(s.id, header.dek_version)
                        .ok_or(StoreError::KeyUnavailable {
                            segment: s.id,
                            version: header.dek_version,
                        })?;
                let (next_index, last_tag) = match s.blocks.last() {
                    Some(b) => (b.index + 1, b.tag),
                    None => (0, [0u8; 16]),
                };
                uncovered = s
                    .blocks
                    .last()
                    .is_some_and(|b| matches!(b.kind, BlockKind::Data | BlockKind::Tombstone));
                active = Some(SegmentWriter::resume(
                    wfile,
                    s.path.clone(),
                    header,
                    wsealer,
                    next_index,
                    len,
                    last_tag,
                    false,
                ));
            }
            segments.insert(
                s.id,
                SegInfo {
                    path: s.path.clone(),
                    header,
                    file,
                    sealer,
                    live: live_counts.get(&s.id).copied().unwrap_or(0),
                    len,
                    sealed: s.sealed,
                },
            );
        }
        Ok(FileStore {
            io,
            keys,
            index,
            segments,
            active,
            next_segment_id: rec.next_segment_id,
            base: rec.base,
            uncovered,
            poisoned: None,
            offline: offline.map(|e| e.to_string()),
            closed: false,
            erase_pending: false,
            report: rec.report,
            cache: Mutex::new(BlockCache::default()),
            unsynced: std::collections::BTreeSet::new(),
            cfg,
        })
    }
}
