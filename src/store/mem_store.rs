//! [`MemStore`]: the same [`StreamStore`] semantics without files (JetStream memory storage
//! and the reference the conformance suite compares against). Limit and purge decisions are
//! the shared ones in [`Index`], so both stores agree by construction.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::file_store::Clock;
use super::index::Index;
use super::{
    now_nanos, BatchResult, CompactStats, NewMsg, PurgeRequest, StoreError, StoreLimits, StoredMsg,
    StreamState, StreamStore, SubjectState,
};

/// What the memory store keeps per message besides the index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemLoc {
    headers: Option<Bytes>,
    payload: Bytes,
}

/// The memory store.
pub struct MemStore {
    index: Index<MemLoc>,
    limits: StoreLimits,
    clock: Clock,
    closed: bool,
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore")
            .field("state", &self.index.state())
            .finish_non_exhaustive()
    }
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new(StoreLimits::default())
    }
}

impl MemStore {
    /// An empty store with `limits` and the system clock.
    pub fn new(limits: StoreLimits) -> Self {
        MemStore {
            index: Index::new(),
            limits,
            clock: Arc::new(now_nanos),
            closed: false,
        }
    }

    /// An empty store with an injected clock (tests).
    pub fn with_clock(limits: StoreLimits, clock: Clock) -> Self {
        MemStore {
            index: Index::new(),
            limits,
            clock,
            closed: false,
        }
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.closed {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    fn load(&self, seq: u64) -> Result<Option<StoredMsg>, StoreError> {
        self.check()?;
        Ok(self.index.get(seq).map(|e| StoredMsg {
            seq,
            ts: e.ts,
            subject: self.index.subject_name(e.subject).to_owned(),
            headers: e.loc.headers.clone(),
            payload: e.loc.payload.clone(),
        }))
    }

    fn remove_all(&mut self, seqs: &[u64]) -> u64 {
        seqs.iter()
            .filter(|s| self.index.remove(**s).is_some())
            .count() as u64
    }
}

impl StreamStore for MemStore {
    fn append_batch(&mut self, msgs: &[NewMsg]) -> Result<BatchResult, StoreError> {
        self.check()?;
        let now = (self.clock)();
        let out = self.index.apply_append(&self.limits, msgs, now, |i, _, _| {
            let m = msgs.get(i);
            MemLoc {
                headers: m.and_then(|m| m.headers.clone()).filter(|h| !h.is_empty()),
                payload: m.map(|m| m.payload.clone()).unwrap_or_default(),
            }
        });
        Ok(out.results)
    }

    fn get(&self, seq: u64) -> Result<Option<StoredMsg>, StoreError> {
        self.load(seq)
    }

    fn last_by_subject(&self, filter: &str) -> Result<Option<StoredMsg>, StoreError> {
        match self.index.last_by_subject(filter) {
            Some(s) => self.load(s),
            None => Ok(None),
        }
    }

    fn next_by_subject(
        &self,
        from_seq: u64,
        filter: &str,
    ) -> Result<Option<StoredMsg>, StoreError> {
        match self.index.next_by_subject(from_seq, filter) {
            Some(s) => self.load(s),
            None => Ok(None),
        }
    }

    fn delete(&mut self, seq: u64, _erase: bool) -> Result<bool, StoreError> {
        self.check()?;
        // Erase: the payload's last reference goes with the entry.
        Ok(self.index.remove(seq).is_some())
    }

    fn purge(&mut self, req: &PurgeRequest) -> Result<u64, StoreError> {
        self.check()?;
        let seqs = self
            .index
            .plan_purge(req)
            .map_err(StoreError::InvalidArgument)?;
        Ok(self.remove_all(&seqs))
    }

    fn state(&self) -> StreamState {
        self.index.state()
    }

    fn subjects_state(&self, filter: &str) -> BTreeMap<String, SubjectState> {
        self.index.subjects_state(filter)
    }

    fn count_from(&self, from: u64, filter: &str) -> u64 {
        self.index.count_from(from, filter)
    }

    fn limits(&self) -> StoreLimits {
        self.limits
    }

    fn set_limits(&mut self, limits: StoreLimits) -> Result<u64, StoreError> {
        self.check()?;
        self.limits = limits;
        let seqs = self.index.plan_limits(&limits);
        Ok(self.remove_all(&seqs))
    }

    fn expire(&mut self, now: i64) -> Result<u64, StoreError> {
        self.check()?;
        let Some(age) = self.limits.max_age else {
            return Ok(0);
        };
        let seqs = self.index.plan_expire(now, age);
        Ok(self.remove_all(&seqs))
    }

    fn compact(&mut self) -> Result<CompactStats, StoreError> {
        self.check()?;
        Ok(CompactStats::default())
    }

    fn sync_checkpoint(&mut self) -> Result<(), StoreError> {
        self.check()
    }

    fn close(&mut self) -> Result<(), StoreError> {
        self.closed = true;
        Ok(())
    }

    fn abandon(&mut self) {
        self.closed = true;
    }
}
