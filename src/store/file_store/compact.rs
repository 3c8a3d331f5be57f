//! Compaction: rewrite the live messages into new segments, then drop the old ones.

use super::*;

impl FileStore {
    pub(super) fn compact_inner(&mut self) -> Result<CompactStats, StoreError> {
        let bytes_before = self.disk_bytes();
        // 1. Close the active segment: seal it, or abandon a creation that never happened.
        self.close_active()?;
        // 2. Write every live message into new segments of one compaction run.
        let run_start = self.next_segment_id;
        let seqs: Vec<u64> = self.index.iter().map(|(s, _)| s).collect();
        let mut new_locs: Vec<(u64, Loc)> = Vec::with_capacity(seqs.len());
        let mut written: Vec<u64> = Vec::new();
        let mut prev_out = 0u64;
        let body_target: usize = (1 << 20).min(self.cfg.max_segment_bytes as usize);
        let mut pending: Option<BlockBuilder> = None;
        let (last_seq, last_ts) = self.index.last();
        let mut k = 0usize;
        loop {
            let next = seqs.get(k).copied();
            let msg = match next {
                Some(s) => self.load(s)?,
                None => None,
            };
            // Start an output segment when needed.
            if self.active.is_none() {
                let id = self.next_segment_id;
                let header = SegmentHeader {
                    flags: FLAG_COMPACTION_OUTPUT,
                    store_uuid: self.keys.store_uuid,
                    stream_id: self.keys.stream_id,
                    segment_id: id,
                    dek_version: self.keys.current_version(),
                    created: self.now(),
                    prev_segment_id: prev_out,
                    base: run_start,
                };
                let sealer =
                    self.keys
                        .sealer(id, header.dek_version)
                        .ok_or(StoreError::KeyUnavailable {
                            segment: id,
                            version: header.dek_version,
                        })?;
                let w = SegmentWriter::create(self.io.as_ref(), &self.cfg.dir, header, sealer)
                    .map_err(|e| self.poison(&self.cfg.dir.clone(), "create segment", &e))?;
                self.next_segment_id = id + 1;
                prev_out = id;
                written.push(id);
                self.active = Some(w);
            }
            let flush = match (&pending, &msg) {
                (Some(b), Some(m)) => {
                    b.body_len() + m.payload.len() + m.subject.len() > body_target
                        || !b.can_take(m.seq)
                }
                (Some(_), None) => true,
                (None, _) => false,
            };
            if flush {
                if let Some(b) = pending.take() {
                    let (_, loc) = self.write_block(b)?;
                    for (_, l) in new_locs.iter_mut().filter(|(_, l)| l.is_pending()) {
                        *l = l.with_block(loc);
                    }
                }
                // Roll the output segment over when full (never on the last block).
                let full = self
                    .active
                    .as_ref()
                    .is_some_and(|w| w.end >= self.cfg.max_segment_bytes);
                if full && msg.is_some() {
                    self.seal_active(0, 0)?;
                    continue;
                }
            }
            let Some(m) = msg else { break };
            if pending.is_none() {
                let Some(w) = &self.active else { break };
                pending = Some(BlockBuilder::new(
                    w.body_header(BlockKind::Data, last_seq, last_ts),
                    body_target,
                ));
            }
            if let Some(b) = pending.as_mut() {
                let rec = b
                    .push_record(
                        m.seq,
                        m.ts,
                        &m.subject,
                        m.headers.as_deref().unwrap_or(&[]),
                        &m.payload,
                    )
                    .map_err(|_| StoreError::InvalidArgument("record does not fit"))?;
                new_locs.push((m.seq, Loc::pending(rec)));
            }
            k += 1;
        }
        // 3. Everything written durable, directory entries too, then the completing seal.
        if let Err(e) = self.io.sync_dir(&self.cfg.dir) {
            return Err(self.poison(&self.cfg.dir.clone(), "fsync dir", &e));
        }
        self.seal_active(FLAG_COMPACTION_COMPLETE, run_start)?;
        // 4. The run is the stream now: drop the old segments, point the index at the new ones.
        let old: Vec<u64> = self
            .segments
            .range(..run_start)
            .map(|(id, _)| *id)
            .collect();
        self.base = run_start;
        self.drop_segments(&old);
        if let Err(e) = self.io.sync_dir(&self.cfg.dir) {
            return Err(self.poison(&self.cfg.dir.clone(), "fsync dir", &e));
        }
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for (seq, loc) in new_locs {
            if let Some(e) = self.index.get_mut(seq) {
                e.loc = loc;
                *counts.entry(loc.seg()).or_default() += 1;
            }
        }
        for (id, s) in self.segments.iter_mut() {
            s.live = counts.get(id).copied().unwrap_or(0);
        }
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.erase_pending = false;
        self.uncovered = false;
        Ok(CompactStats {
            segments_removed: old.len() as u64,
            segments_written: written.len() as u64,
            bytes_before,
            bytes_after: self.disk_bytes(),
        })
    }
}
