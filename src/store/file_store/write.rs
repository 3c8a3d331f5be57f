//! The write path: reserve, seal, write and sync a block; roll segments; poison on failure.

use super::*;

impl FileStore {
    pub(super) fn check_write(&self) -> Result<(), StoreError> {
        if self.closed {
            return Err(StoreError::Closed);
        }
        if let Some(r) = &self.offline {
            return Err(StoreError::Offline { reason: r.clone() });
        }
        if let Some(c) = &self.poisoned {
            return Err(StoreError::Poisoned { cause: c.clone() });
        }
        Ok(())
    }

    pub(super) fn poison(&mut self, file: &Path, op: &str, e: &std::io::Error) -> StoreError {
        let cause = format!("{op} on {}: {e}", file.display());
        tracing::error!(%cause, "write failure; store poisoned");
        if self.poisoned.is_none() {
            self.poisoned = Some(cause.clone());
        }
        StoreError::Poisoned { cause }
    }

    pub(super) fn fail(&mut self, path: &Path, f: WriteFail) -> StoreError {
        match f {
            WriteFail::NoSpace(_) => StoreError::DiskFull {
                file: path.to_owned(),
            },
            WriteFail::Io(op, e) => self.poison(path, op, &e),
        }
    }

    /// Sealed head segments whose messages are all gone, and the base that drops them.
    pub(super) fn droppable_head(&self) -> (Vec<u64>, Option<u64>) {
        let active = self.active.as_ref().map(|w| w.id);
        let mut dead = Vec::new();
        for (id, s) in &self.segments {
            if Some(*id) == active || !s.sealed || s.live > 0 {
                return (dead, Some(*id));
            }
            dead.push(*id);
        }
        (dead, None)
    }

    pub(super) fn drop_segments(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(s) = self.segments.remove(id) {
                // Not synced: the asserted base already makes them obsolete for recovery.
                if let Err(e) = self.io.remove_file(&s.path) {
                    tracing::warn!(file = %s.path.display(), error = %e, "could not remove a dropped segment");
                }
            }
        }
    }

    /// Makes sure a writable segment with room exists (sealing a full one first).
    pub(super) fn prepare_active(&mut self) -> Result<(), StoreError> {
        if let Some(w) = &self.active {
            if w.end < self.cfg.max_segment_bytes || w.is_new() {
                return Ok(());
            }
            self.seal_active(0, 0)?;
        }
        if self.active.is_some() {
            return Ok(());
        }
        let id = self.next_segment_id;
        if u32::try_from(id).is_err() {
            // Index entries hold segment ids in 32 bits (`Loc`).
            return Err(StoreError::InvalidArgument("segment ids exhausted"));
        }
        // The new header asserts the base: the first sealed segment that still holds messages
        // (dead head segments are dropped once this header is durable).
        let (_, first_live) = self.droppable_head();
        let base = first_live.unwrap_or(id).max(self.base);
        let prev = self.segments.keys().next_back().copied().unwrap_or(0);
        let header = SegmentHeader {
            flags: 0,
            store_uuid: self.keys.store_uuid,
            stream_id: self.keys.stream_id,
            segment_id: id,
            dek_version: self.keys.current_version(),
            created: self.now(),
            prev_segment_id: prev,
            base,
        };
        let sealer =
            self.keys
                .sealer(id, header.dek_version)
                .ok_or(StoreError::KeyUnavailable {
                    segment: id,
                    version: header.dek_version,
                })?;
        let w = match SegmentWriter::create(self.io.as_ref(), &self.cfg.dir, header, sealer) {
            Ok(w) => w,
            Err(e) if crate::store::segment::is_enospc(&e) => {
                return Err(StoreError::DiskFull {
                    file: self
                        .cfg
                        .dir
                        .join(crate::store::segment::segment_file_name(id)),
                })
            }
            Err(e) => return Err(self.poison(&self.cfg.dir.clone(), "create segment", &e)),
        };
        self.next_segment_id = id + 1;
        self.active = Some(w);
        Ok(())
    }

    /// Seals the active segment (its own fdatasync). `flags`/`base` for compaction seals.
    /// Closes the active segment: seals it, or abandons a creation that never happened (the
    /// next block opens a new segment).
    pub(super) fn close_active(&mut self) -> Result<(), StoreError> {
        let Some(w) = &self.active else { return Ok(()) };
        if w.is_new() {
            let path = w.path.clone();
            self.active = None;
            let _ = self.io.remove_file(&path);
            Ok(())
        } else {
            self.seal_active(0, 0)
        }
    }

    pub(super) fn seal_active(&mut self, flags: u8, base: u64) -> Result<(), StoreError> {
        let Some(w) = &self.active else { return Ok(()) };
        let (last_seq, last_ts) = self.index.last();
        let mut h = w.body_header(BlockKind::SegmentSeal, last_seq, last_ts);
        h.flags = flags;
        h.first_seq = self.index.state().first_seq;
        h.base_segment = if w.header.is_compaction_output() {
            base
        } else {
            self.base.max(base)
        };
        let b = BlockBuilder::new(h, 0);
        self.write_block(b)?;
        if let Some(mut w) = self.active.take() {
            w.release_reservation();
            if let Some(s) = self.segments.get_mut(&w.id) {
                s.sealed = true;
            }
        }
        Ok(())
    }

    /// Seals, reserves, writes, syncs (and syncs the directory for a new segment) one block in
    /// the active segment, then commits it. On error nothing is committed.
    pub(super) fn write_block(
        &mut self,
        b: BlockBuilder,
    ) -> Result<(SealedBlock, Loc), StoreError> {
        let bucket = self.cfg.pad_bucket;
        let chunk = self
            .cfg
            .reserve_chunk
            .min(self.cfg.max_segment_bytes.max(1 << 16));
        let dir = self.cfg.dir.clone();
        let Some(w) = self.active.as_mut() else {
            return Err(StoreError::InvalidArgument("no active segment"));
        };
        let place: BlockPlace = w.place();
        // Index entries hold positions in 32 bits: always so (the segment id was checked at
        // creation; a segment ends within 64 MiB plus one block), checked before writing.
        let loc = Loc::new(w.id, place.offset, place.index, 0)
            .ok_or(StoreError::InvalidArgument("block position beyond 32 bits"))?;
        let path = w.path.clone();
        let sealed = b
            .seal(w.sealer(), &place, bucket)
            .map_err(|_| StoreError::InvalidArgument("batch too large for one block"))?;
        let is_new = w.is_new();
        let defer = self.cfg.defer_sync;
        let res = w
            .reserve(sealed.bytes.len() as u64, chunk)
            .and_then(|()| w.write_block(&sealed))
            .and_then(|()| if defer { Ok(()) } else { w.sync() });
        if let Err(f) = res {
            if matches!(f, WriteFail::Io(..)) {
                w.discard_uncommitted();
            }
            return Err(self.fail(&path, f));
        }
        if is_new {
            if let Err(e) = self.io.sync_dir(&dir) {
                w.discard_uncommitted();
                return Err(self.poison(&dir, "fsync dir", &e));
            }
        }
        let Some(w) = self.active.as_mut() else {
            return Err(StoreError::InvalidArgument("no active segment"));
        };
        w.commit(&sealed);
        if defer {
            self.unsynced.insert(w.id);
        }

        let end = w.end;
        if is_new {
            let header = w.header;
            let sealer = self
                .keys
                .sealer(header.segment_id, header.dek_version)
                .ok_or(StoreError::KeyUnavailable {
                    segment: header.segment_id,
                    version: header.dek_version,
                })?;
            let file = w.shared_file();
            self.segments.insert(
                w.id,
                SegInfo {
                    path: path.clone(),
                    header,
                    file,
                    sealer,
                    live: 0,
                    len: end,
                    sealed: false,
                },
            );
            // The new header asserted a base: drop the dead head segments it left behind.
            let base = header.base;
            if !header.is_compaction_output() && base > self.base {
                self.base = base;
                let dead: Vec<u64> = self.segments.range(..base).map(|(id, _)| *id).collect();
                self.drop_segments(&dead);
            }
        } else if let Some(s) = self.segments.get_mut(&loc.seg()) {
            s.len = end;
        }
        Ok((sealed, loc))
    }

    /// Persists deletions of `seqs` (sorted) in tombstone blocks, then applies them.
    pub(super) fn persist_deletions(&mut self, seqs: &[u64]) -> Result<u64, StoreError> {
        const MAX_RANGES: usize = 1 << 16;
        let mut removed = 0;
        let mut i = 0;
        while i < seqs.len() {
            self.prepare_active()?;
            let (last_seq, last_ts) = self.index.last();
            let Some(w) = &self.active else {
                return Err(StoreError::InvalidArgument("no active segment"));
            };
            let h = w.body_header(BlockKind::Tombstone, last_seq, last_ts);
            let mut b = BlockBuilder::new(h, 0);
            let start = i;
            while let Some(&s) = seqs.get(i) {
                let extends = i > start && seqs.get(i - 1).is_some_and(|p| p + 1 == s);
                if b.deletion_ranges() >= MAX_RANGES && !extends {
                    break;
                }
                b.push_deletion(s);
                i += 1;
            }
            self.write_block(b)?;
            self.uncovered = true;
            for s in seqs.get(start..i).unwrap_or(&[]) {
                if let Some(e) = self.index.remove(*s) {
                    removed += 1;
                    if let Some(seg) = self.segments.get_mut(&e.loc.seg()) {
                        seg.live = seg.live.saturating_sub(1);
                    }
                }
            }
        }
        Ok(removed)
    }
}
