//! Reading messages back: a small cache of opened blocks in front of the segment files.

use super::*;

/// One opened block: its plaintext body and where each record lies in it.
pub(super) struct CachedBlock {
    pub(super) body: Bytes,
    pub(super) records: Vec<RecordRef>,
}

/// Opened blocks by (segment, offset), oldest evicted first.
#[derive(Default)]
pub(super) struct BlockCache {
    map: HashMap<(u64, u64), Arc<CachedBlock>>,
    order: VecDeque<(u64, u64)>,
}

impl BlockCache {
    pub(super) fn get(&self, key: (u64, u64)) -> Option<Arc<CachedBlock>> {
        self.map.get(&key).cloned()
    }
    pub(super) fn put(&mut self, key: (u64, u64), b: Arc<CachedBlock>, cap: usize) {
        if self.map.insert(key, b).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > cap.max(1) {
            if let Some(k) = self.order.pop_front() {
                self.map.remove(&k);
            }
        }
    }
    pub(super) fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

impl FileStore {
    pub(super) fn read_cached(&self, loc: &Loc) -> Result<Arc<CachedBlock>, StoreError> {
        let key = (loc.seg(), loc.off());
        if let Some(b) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            return Ok(b);
        }
        let s = self
            .segments
            .get(&loc.seg())
            .ok_or_else(|| StoreError::Corrupt {
                file: self.cfg.dir.clone(),
                offset: loc.off(),
                reason: format!("segment {:016x} missing", loc.seg()),
            })?;
        let place = BlockPlace {
            store_uuid: self.keys.store_uuid,
            stream_id: self.keys.stream_id,
            segment_id: loc.seg(),
            dek_version: s.header.dek_version,
            index: loc.block(),
            offset: loc.off(),
        };
        let cb = Arc::new(open_block_at(s.file.as_ref(), &s.path, &s.sealer, &place)?);
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).put(
            key,
            Arc::clone(&cb),
            self.cfg.cache_blocks,
        );
        Ok(cb)
    }

    pub(super) fn load(&self, seq: u64) -> Result<Option<StoredMsg>, StoreError> {
        if self.closed {
            return Err(StoreError::Closed);
        }
        let Some(e) = self.index.get(seq) else {
            return Ok(None);
        };
        let loc = e.loc;
        let b = self.read_cached(&loc)?;
        record_of(&b, loc, seq, &self.cfg.dir).map(Some)
    }
}

/// Reads and opens the block at `place` of a segment file: its plaintext body and records.
pub(super) fn open_block_at(
    file: &dyn SegmentFile,
    path: &Path,
    sealer: &crate::store::block::Sealer,
    place: &BlockPlace,
) -> Result<CachedBlock, StoreError> {
    let mut buf = read_block(file, place.offset).map_err(io_err(path, "read"))?;
    let corrupt = |reason: String| StoreError::Corrupt {
        file: path.to_owned(),
        offset: place.offset,
        reason,
    };
    let range = open_block(sealer, place, &mut buf).map_err(|e| corrupt(e.to_string()))?;
    let body = Bytes::from(buf).slice(range);
    let parsed = parse_body(&body).map_err(|e| corrupt(e.to_string()))?;
    Ok(CachedBlock {
        body,
        records: parsed.records,
    })
}

/// The message record `loc.rec` of an opened block, which must be sequence `seq`.
pub(super) fn record_of(
    b: &CachedBlock,
    loc: Loc,
    seq: u64,
    dir: &Path,
) -> Result<StoredMsg, StoreError> {
    let bad = || StoreError::Corrupt {
        file: dir.to_owned(),
        offset: loc.off(),
        reason: format!("record {} of block missing", loc.rec),
    };
    let r = b.records.get(loc.rec as usize).ok_or_else(bad)?;
    if r.seq != seq {
        return Err(bad());
    }
    let subject = b
        .body
        .get(r.subject.clone())
        .and_then(|s| std::str::from_utf8(s).ok())
        .ok_or_else(bad)?
        .to_owned();
    let headers = if r.headers.is_empty() {
        None
    } else {
        Some(b.body.slice(r.headers.clone()))
    };
    Ok(StoredMsg {
        seq,
        ts: r.ts,
        subject,
        headers,
        payload: b.body.slice(r.payload.clone()),
    })
}
