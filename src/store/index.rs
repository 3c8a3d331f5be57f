//! In-memory indexes and the limit decisions both stores share.
//!
//! [`Index<L>`] maps sequence → entry (timestamp, subject, size and a location `L`: a block
//! position for the file store, the message itself for the memory store), keeps per-subject
//! counts with first/last bounds, and the stream counters. It is rebuilt from the log on open
//! (no index snapshot is persisted yet). The decisions (which messages a batch may add, which
//! old ones limits remove, what a purge or expiry selects) live here, without I/O, so both
//! stores behave identically; an [`Undo`] log lets the file store roll an append back when
//! its write fails.
//!
//! Per-subject `first`/`last` are kept as bounds (a lower and an upper bound) and tightened
//! lazily by scanning, as the reference's memstore does; counts are always exact.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::block::{record_size, BLOCK_OVERHEAD, BODY_HEADER_LEN, MAX_BLOCK_LEN};
use super::seq_map::SeqMap;
use super::subject::Filter;
use super::{
    AppendRejected, Appended, Discard, NewMsg, PurgeRequest, StoreLimits, StreamState, SubjectState,
};

/// One stored message's index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<L> {
    /// Timestamp (unix nanos).
    pub ts: i64,
    /// Subject, as its id in the index's subject table ([`Index::subject_name`]): 4 bytes
    /// instead of a 16-byte `Arc<str>` in every entry of a stream of millions.
    pub subject: SubjectId,
    /// Stored size ([`record_size`]).
    pub size: u32,
    /// Where the message lives.
    pub loc: L,
}

/// A subject's id in one index's subject table; valid while the subject has messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubjectId(u32);

#[derive(Debug, Clone, Copy)]
struct SubjInfo {
    /// The subject's id (its slot in `Index::names`).
    id: SubjectId,
    msgs: u64,
    /// Lower bound of the first sequence.
    first: u64,
    /// Upper bound of the last sequence.
    last: u64,
}

/// Everything an append changed, to roll it back if its write fails.
#[derive(Debug)]
pub struct Undo<L> {
    inserted: Vec<u64>,
    removed: Vec<(u64, Entry<L>)>,
    /// The subject of each `removed` entry: its id may be gone (or reused) by the time of a
    /// rollback.
    removed_subjects: Vec<Arc<str>>,
    last: (u64, i64),
}

impl<L> Undo<L> {
    /// The entries the operation removed (discard-old limits), in removal order.
    pub fn removed(&self) -> &[(u64, Entry<L>)] {
        &self.removed
    }
    /// The sequences the operation inserted.
    pub fn inserted(&self) -> &[u64] {
        &self.inserted
    }
}

/// The outcome of [`Index::apply_append`].
#[derive(Debug)]
pub struct AppendOutcome<L> {
    /// Per message.
    pub results: Vec<Result<Appended, AppendRejected>>,
    /// `(message index, seq, ts)` of the accepted messages, in order.
    pub accepted: Vec<(usize, u64, i64)>,
    /// The undo log (its `removed` are the discard-old removals).
    pub undo: Undo<L>,
}

/// The biggest record a block can hold.
pub const MAX_RECORD_SIZE: u64 =
    (MAX_BLOCK_LEN as u64) - (BLOCK_OVERHEAD + BODY_HEADER_LEN) as u64 - 4096;

/// The stream index.
#[derive(Debug, Clone)]
pub struct Index<L> {
    msgs: SeqMap<Entry<L>>,
    subjects: HashMap<Arc<str>, SubjInfo>,
    /// Subject id → name; `None` for a free slot (its subject has no messages left).
    names: Vec<Option<Arc<str>>>,
    /// Free slots of `names`, reused first.
    free: Vec<u32>,
    bytes: u64,
    last_seq: u64,
    last_ts: i64,
}

impl<L> Default for Index<L> {
    fn default() -> Self {
        Index {
            msgs: SeqMap::default(),
            subjects: HashMap::new(),
            names: Vec::new(),
            free: Vec::new(),
            bytes: 0,
            last_seq: 0,
            last_ts: 0,
        }
    }
}

impl<L: Clone> Index<L> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry at `seq`.
    pub fn get(&self, seq: u64) -> Option<&Entry<L>> {
        self.msgs.get(seq)
    }

    /// Mutable entry (the file store fixes locations after a write).
    pub fn get_mut(&mut self, seq: u64) -> Option<&mut Entry<L>> {
        self.msgs.get_mut(seq)
    }

    /// All entries in sequence order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Entry<L>)> {
        self.msgs.iter()
    }

    /// Last assigned sequence and its timestamp.
    pub fn last(&self) -> (u64, i64) {
        (self.last_seq, self.last_ts)
    }

    /// Raises the last sequence (recovery: blocks record it even when the messages are gone).
    pub fn raise_last(&mut self, seq: u64, ts: i64) {
        if seq > self.last_seq {
            self.last_seq = seq;
            self.last_ts = ts;
        }
    }

    /// Number of stored messages.
    pub fn len(&self) -> u64 {
        self.msgs.len() as u64
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// The id of `subject`, entered in the subject table (with no messages yet) when it is
    /// new; the next [`Index::insert`] of an entry with it counts the message.
    pub fn intern(&mut self, subject: &str) -> SubjectId {
        if let Some(i) = self.subjects.get(subject) {
            return i.id;
        }
        let name: Arc<str> = Arc::from(subject);
        let id = match self.free.pop() {
            Some(slot) => {
                if let Some(n) = self.names.get_mut(slot as usize) {
                    *n = Some(Arc::clone(&name));
                }
                SubjectId(slot)
            }
            None => {
                // A stream with 2^32 live subjects would need hundreds of GiB of index first.
                let slot = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
                self.names.push(Some(Arc::clone(&name)));
                SubjectId(slot)
            }
        };
        self.subjects.insert(
            name,
            SubjInfo {
                id,
                msgs: 0,
                first: u64::MAX,
                last: 0,
            },
        );
        id
    }

    /// The subject an entry's id names.
    pub fn subject_name(&self, id: SubjectId) -> &str {
        self.names
            .get(id.0 as usize)
            .and_then(Option::as_deref)
            .unwrap_or("")
    }

    fn info_of(&mut self, id: SubjectId) -> Option<&mut SubjInfo> {
        let name = self.names.get(id.0 as usize)?.as_ref()?;
        self.subjects.get_mut(name)
    }

    /// Inserts an entry (sequences may leave gaps but must grow).
    /// `entry.subject` must come from [`Index::intern`] of this index.
    pub fn insert(&mut self, seq: u64, entry: Entry<L>) {
        let size = u64::from(entry.size);
        if let Some(info) = self.info_of(entry.subject) {
            info.msgs += 1;
            info.first = info.first.min(seq);
            info.last = info.last.max(seq);
        }
        if seq > self.last_seq {
            self.last_seq = seq;
            self.last_ts = entry.ts;
        }
        if let Some(old) = self.msgs.insert(seq, entry) {
            // Never happens for well-formed logs (sequences are unique); keep counts exact.
            self.bytes -= u64::from(old.size);
            if let Some(i) = self.info_of(old.subject) {
                i.msgs -= 1;
            }
        }
        self.bytes += size;
    }

    /// Removes `seq`; returns its entry if it was stored.
    pub fn remove(&mut self, seq: u64) -> Option<Entry<L>> {
        let e = self.msgs.remove(seq)?;
        self.bytes -= u64::from(e.size);
        let gone = match self.info_of(e.subject) {
            Some(info) => {
                info.msgs -= 1;
                if info.first == seq {
                    info.first = seq + 1;
                }
                if info.last == seq {
                    info.last = seq.saturating_sub(1);
                }
                info.msgs == 0
            }
            None => false,
        };
        if gone {
            if let Some(name) = self
                .names
                .get_mut(e.subject.0 as usize)
                .and_then(Option::take)
            {
                self.subjects.remove(&name);
                self.free.push(e.subject.0);
            }
        }
        Some(e)
    }

    /// Removes every stored sequence in `[start, start + len)`; returns what was removed.
    pub fn remove_range(&mut self, start: u64, len: u64) -> Vec<(u64, Entry<L>)> {
        let end = start.saturating_add(len);
        let seqs: Vec<u64> = self.msgs.range(start..end).map(|(s, _)| s).collect();
        seqs.into_iter()
            .filter_map(|s| self.remove(s).map(|e| (s, e)))
            .collect()
    }

    /// The stream state.
    pub fn state(&self) -> StreamState {
        let (first_seq, first_ts) = match self.msgs.first() {
            Some((s, e)) => (s, e.ts),
            None => (self.last_seq + 1, 0),
        };
        let msgs = self.len();
        let span = if msgs == 0 {
            0
        } else {
            self.last_seq + 1 - first_seq
        };
        StreamState {
            msgs,
            bytes: self.bytes,
            first_seq,
            first_ts,
            last_seq: self.last_seq,
            last_ts: self.last_ts,
            num_subjects: self.subjects.len() as u64,
            num_deleted: span - msgs,
        }
    }

    fn true_first(&self, info: &SubjInfo) -> Option<u64> {
        self.msgs
            .range(info.first..=info.last)
            .find(|(_, e)| e.subject == info.id)
            .map(|(s, _)| s)
    }

    fn true_last(&self, info: &SubjInfo) -> Option<u64> {
        self.msgs
            .range(info.first..=info.last)
            .rev()
            .find(|(_, e)| e.subject == info.id)
            .map(|(s, _)| s)
    }

    fn matching(&self, filter: &Filter<'_>) -> Vec<(&Arc<str>, &SubjInfo)> {
        match filter {
            Filter::Literal(l) => self.subjects.get_key_value(*l).into_iter().collect(),
            _ => self
                .subjects
                .iter()
                .filter(|(s, _)| filter.matches(s))
                .collect(),
        }
    }

    /// Sequence of the newest message matching `filter`.
    pub fn last_by_subject(&self, filter: &str) -> Option<u64> {
        let f = Filter::parse(filter);
        if f == Filter::All {
            return self.msgs.last().map(|(s, _)| s);
        }
        let m = self.matching(&f);
        if let [(_, info)] = m.as_slice() {
            return self.true_last(info);
        }
        let hi = m.iter().map(|(_, i)| i.last).max()?;
        let lo = m.iter().map(|(_, i)| i.first).min()?;
        let set: HashSet<SubjectId> = m.iter().map(|(_, i)| i.id).collect();
        self.msgs
            .range(lo..=hi)
            .rev()
            .find(|(_, e)| set.contains(&e.subject))
            .map(|(s, _)| s)
    }

    /// Sequence of the first message at or after `from` matching `filter`.
    pub fn next_by_subject(&self, from: u64, filter: &str) -> Option<u64> {
        let f = Filter::parse(filter);
        if f == Filter::All {
            return self.msgs.range(from..).next().map(|(s, _)| s);
        }
        let m = self.matching(&f);
        let hi = m.iter().map(|(_, i)| i.last).max()?;
        let lo = m.iter().map(|(_, i)| i.first).min()?.max(from);
        if lo > hi {
            return None;
        }
        if let [(_, info)] = m.as_slice() {
            return self
                .msgs
                .range(lo..=hi)
                .find(|(_, e)| e.subject == info.id)
                .map(|(q, _)| q);
        }
        let set: HashSet<SubjectId> = m.iter().map(|(_, i)| i.id).collect();
        self.msgs
            .range(lo..=hi)
            .find(|(_, e)| set.contains(&e.subject))
            .map(|(s, _)| s)
    }

    /// How many stored messages at or after `from` match `filter` (a consumer's pending
    /// count). Cheap when nothing is missing between `from` and the last sequence, or when
    /// the matching subjects lie wholly after `from`; otherwise it scans the smaller side.
    pub fn count_from(&self, from: u64, filter: &str) -> u64 {
        let f = Filter::parse(filter);
        let st = self.state();
        if st.msgs == 0 || from > st.last_seq {
            return 0;
        }
        if f == Filter::All {
            if from <= st.first_seq {
                return st.msgs;
            }
            if st.num_deleted == 0 {
                return st.last_seq + 1 - from;
            }
            let after = self.msgs.range(from..).count() as u64;
            return after;
        }
        let m = self.matching(&f);
        let mut n = 0;
        let mut scan: HashSet<SubjectId> = HashSet::new();
        let (mut lo, mut hi) = (u64::MAX, 0);
        for (_, i) in &m {
            if i.first >= from {
                n += i.msgs;
            } else if i.last >= from {
                scan.insert(i.id);
                lo = lo.min(from);
                hi = hi.max(i.last);
            }
        }
        if !scan.is_empty() && lo <= hi {
            n += self
                .msgs
                .range(lo..=hi)
                .filter(|(_, e)| scan.contains(&e.subject))
                .count() as u64;
        }
        n
    }

    /// Per-subject state of the subjects matching `filter`.
    pub fn subjects_state(&self, filter: &str) -> BTreeMap<String, SubjectState> {
        let f = Filter::parse(filter);
        self.matching(&f)
            .into_iter()
            .map(|(s, i)| {
                let first_seq = self.true_first(i).unwrap_or(i.first);
                let last_seq = self.true_last(i).unwrap_or(i.last);
                (
                    s.to_string(),
                    SubjectState {
                        msgs: i.msgs,
                        first_seq,
                        last_seq,
                    },
                )
            })
            .collect()
    }

    fn subject_count(&self, subject: &str) -> u64 {
        self.subjects.get(subject).map_or(0, |i| i.msgs)
    }

    fn oldest_of(&self, subject: &str) -> Option<u64> {
        let i = self.subjects.get(subject)?;
        self.true_first(i)
    }

    /// Applies a batch: checks each message against `limits` in order, inserts the accepted
    /// ones (sequence `last + 1` or the message's own when beyond that, timestamp `max(now or
    /// the message's own, last_ts)`, location from `loc_for(message
    /// index, seq, ts)`), and removes what discard-old limits push out. Returns the per-message
    /// results and the undo log.
    pub fn apply_append(
        &mut self,
        limits: &StoreLimits,
        msgs: &[NewMsg],
        now: i64,
        mut loc_for: impl FnMut(usize, u64, i64) -> L,
    ) -> AppendOutcome<L> {
        let mut undo = Undo {
            inserted: Vec::new(),
            removed: Vec::new(),
            removed_subjects: Vec::new(),
            last: (self.last_seq, self.last_ts),
        };
        let mut results = Vec::with_capacity(msgs.len());
        let mut accepted = Vec::with_capacity(msgs.len());
        for (i, m) in msgs.iter().enumerate() {
            let hdr_len = m.headers.as_ref().map_or(0, |h| h.len());
            if m.subject.is_empty() || m.subject.len() > usize::from(u16::MAX) {
                results.push(Err(AppendRejected::InvalidSubject));
                continue;
            }
            let body = (hdr_len + m.payload.len()) as u64;
            let size = record_size(m.subject.len(), hdr_len, m.payload.len());
            if limits.max_msg_size.is_some_and(|max| body > max) || size > MAX_RECORD_SIZE {
                results.push(Err(AppendRejected::MaxMsgSize));
                continue;
            }
            if limits.max_bytes.is_some_and(|max| size > max) {
                results.push(Err(AppendRejected::MaxBytes));
                continue;
            }
            if limits.discard == Discard::New {
                if limits.max_msgs.is_some_and(|max| self.len() + 1 > max) {
                    results.push(Err(AppendRejected::MaxMsgs));
                    continue;
                }
                if limits.max_bytes.is_some_and(|max| self.bytes + size > max) {
                    results.push(Err(AppendRejected::MaxBytes));
                    continue;
                }
                if limits.discard_new_per_subject
                    && limits
                        .max_msgs_per_subject
                        .is_some_and(|max| self.subject_count(&m.subject) + 1 > max)
                {
                    results.push(Err(AppendRejected::MaxMsgsPerSubject));
                    continue;
                }
            }
            let seq = m
                .seq
                .filter(|s| *s > self.last_seq)
                .unwrap_or(self.last_seq + 1);
            let ts = m.ts.unwrap_or(now).max(self.last_ts);
            let subject = self.intern(&m.subject);
            let size32 = u32::try_from(size).unwrap_or(u32::MAX);
            self.insert(
                seq,
                Entry {
                    ts,
                    subject,
                    size: size32,
                    loc: loc_for(i, seq, ts),
                },
            );
            undo.inserted.push(seq);
            accepted.push((i, seq, ts));
            results.push(Ok(Appended { seq, ts }));
            // Discard-old enforcement after each message, as the reference does.
            if let Some(max) = limits.max_msgs_per_subject {
                let per_new = limits.discard == Discard::New && limits.discard_new_per_subject;
                while !per_new && self.subject_count(&m.subject) > max {
                    let Some(old) = self.oldest_of(&m.subject) else {
                        break;
                    };
                    let name: Arc<str> = Arc::from(self.subject_name_of(old));
                    if let Some(e) = self.remove(old) {
                        undo.removed.push((old, e));
                        undo.removed_subjects.push(name);
                    }
                }
            }
            if limits.discard == Discard::Old {
                self.enforce_old(limits, &mut undo);
            }
        }
        AppendOutcome {
            results,
            accepted,
            undo,
        }
    }

    fn enforce_old(&mut self, limits: &StoreLimits, undo: &mut Undo<L>) {
        while limits.max_msgs.is_some_and(|max| self.len() > max)
            || limits.max_bytes.is_some_and(|max| self.bytes > max)
        {
            let Some(first) = self.msgs.first().map(|(s, _)| s) else {
                break;
            };
            let name: Arc<str> = Arc::from(self.subject_name_of(first));
            if let Some(e) = self.remove(first) {
                undo.removed.push((first, e));
                undo.removed_subjects.push(name);
            }
        }
    }

    /// The subject of the stored message `seq` (`""` when there is none).
    fn subject_name_of(&self, seq: u64) -> &str {
        self.msgs
            .get(seq)
            .map_or("", |e| self.subject_name(e.subject))
    }

    /// Rolls an append back (its write failed).
    pub fn rollback(&mut self, undo: Undo<L>) {
        for seq in undo.inserted.iter().rev() {
            self.remove(*seq);
        }
        for ((seq, mut e), name) in undo.removed.into_iter().zip(undo.removed_subjects).rev() {
            // A message of this very batch that a later one pushed out was never stored
            // before: it stays gone.
            if seq > undo.last.0 {
                continue;
            }
            e.subject = self.intern(&name);
            self.insert(seq, e);
        }
        self.last_seq = undo.last.0;
        self.last_ts = undo.last.1;
    }

    /// What new `limits` remove right away (discard-old limits and per-subject limits),
    /// without removing it.
    pub fn plan_limits(&self, limits: &StoreLimits) -> Vec<u64> {
        let mut out = Vec::new();
        let mut gone: HashSet<u64> = HashSet::new();
        if let Some(max) = limits.max_msgs_per_subject {
            let per_new = limits.discard == Discard::New && limits.discard_new_per_subject;
            if !per_new {
                for info in self.subjects.values() {
                    let mut excess = info.msgs.saturating_sub(max);
                    if excess == 0 {
                        continue;
                    }
                    for (seq, e) in self.msgs.range(info.first..=info.last) {
                        if excess == 0 {
                            break;
                        }
                        if e.subject == info.id {
                            out.push(seq);
                            gone.insert(seq);
                            excess -= 1;
                        }
                    }
                }
            }
        }
        if limits.discard == Discard::Old {
            let mut msgs = self.len() - gone.len() as u64;
            let mut bytes = self.bytes
                - gone
                    .iter()
                    .filter_map(|s| self.msgs.get(*s))
                    .map(|e| u64::from(e.size))
                    .sum::<u64>();
            for (seq, e) in self.msgs.iter() {
                let over = limits.max_msgs.is_some_and(|m| msgs > m)
                    || limits.max_bytes.is_some_and(|m| bytes > m);
                if !over {
                    break;
                }
                if gone.contains(&seq) {
                    continue;
                }
                out.push(seq);
                msgs -= 1;
                bytes -= u64::from(e.size);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// What a purge removes, without removing it.
    ///
    /// # Errors
    /// `keep` together with `up_to_seq`.
    pub fn plan_purge(&self, req: &PurgeRequest) -> Result<Vec<u64>, &'static str> {
        if req.keep.is_some() && req.up_to_seq.is_some() {
            return Err("purge takes keep or up_to_seq, not both");
        }
        let f = Filter::parse(req.filter.as_deref().unwrap_or(""));
        let up_to = req.up_to_seq.unwrap_or(u64::MAX);
        let matching: Vec<u64> = match &f {
            Filter::All => self.msgs.range(..up_to).map(|(s, _)| s).collect(),
            _ => {
                let m = self.matching(&f);
                let set: HashSet<SubjectId> = m.iter().map(|(_, i)| i.id).collect();
                let lo = m.iter().map(|(_, i)| i.first).min().unwrap_or(u64::MAX);
                let hi = m
                    .iter()
                    .map(|(_, i)| i.last)
                    .max()
                    .unwrap_or(0)
                    .min(up_to.saturating_sub(1));
                if lo > hi {
                    Vec::new()
                } else {
                    self.msgs
                        .range(lo..=hi)
                        .filter(|(_, e)| set.contains(&e.subject))
                        .map(|(s, _)| s)
                        .collect()
                }
            }
        };
        Ok(match req.keep {
            Some(k) => {
                let n = matching
                    .len()
                    .saturating_sub(usize::try_from(k).unwrap_or(usize::MAX));
                matching.into_iter().take(n).collect()
            }
            None => matching,
        })
    }

    /// What expiry at `now` removes (messages older than `max_age`), without removing it.
    pub fn plan_expire(&self, now: i64, max_age: std::time::Duration) -> Vec<u64> {
        let age = i64::try_from(max_age.as_nanos()).unwrap_or(i64::MAX);
        let cutoff = now.saturating_sub(age);
        // Timestamps never decrease along the sequence, so the expired messages are a prefix.
        self.msgs
            .iter()
            .take_while(|(_, e)| e.ts <= cutoff)
            .map(|(s, _)| s)
            .collect()
    }
}

#[cfg(test)]
#[expect(
    clippy::indexing_slicing,
    reason = "tests index fixtures they just built"
)]
mod tests {
    use super::*;

    fn msg(s: &str) -> NewMsg {
        NewMsg::new(s, &b"x"[..])
    }

    #[test]
    fn discard_old_removes_oldest_and_rollback_restores() {
        let mut ix: Index<()> = Index::new();
        let lim = StoreLimits {
            max_msgs: Some(2),
            ..Default::default()
        };
        let out = ix.apply_append(&lim, &[msg("a"), msg("b"), msg("c")], 5, |_, _, _| ());
        assert_eq!(out.undo.removed().len(), 1);
        assert_eq!(ix.state().first_seq, 2);
        let out = ix.apply_append(&lim, &[msg("d")], 6, |_, _, _| ());
        ix.rollback(out.undo);
        let st = ix.state();
        assert_eq!((st.msgs, st.first_seq, st.last_seq), (2, 2, 3));
    }

    #[test]
    fn a_file_store_entry_is_32_bytes() {
        // The index is most of the memory of a stream of millions (the issue-12 flood).
        assert_eq!(
            std::mem::size_of::<Entry<crate::store::file_store::Loc>>(),
            32
        );
    }

    #[test]
    fn subject_ids_are_reused_and_a_rollback_restores_the_removed_subjects() {
        let mut ix: Index<u32> = Index::new();
        let limits = StoreLimits {
            max_msgs: Some(1),
            ..StoreLimits::default()
        };
        let m = |s: &str| NewMsg::new(s, bytes::Bytes::from_static(b"x"));
        ix.apply_append(&limits, &[m("a")], 1, |_, _, _| 0);
        // "b" pushes "a" out (max_msgs 1): "a"'s id is free and "c" may take it.
        let out = ix.apply_append(&limits, &[m("b"), m("c")], 2, |_, _, _| 0);
        assert_eq!(ix.subjects_state(">").keys().collect::<Vec<_>>(), ["c"]);
        ix.rollback(out.undo);
        let st = ix.subjects_state(">");
        assert_eq!(st.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(ix.subject_name(ix.get(1).unwrap().subject), "a");
        assert_eq!(ix.state().num_subjects, 1);
    }

    #[test]
    fn subject_bounds_stay_correct_after_deletes() {
        let mut ix: Index<()> = Index::new();
        let lim = StoreLimits::default();
        let batch: Vec<NewMsg> = ["a", "b", "a", "b", "a"].iter().map(|s| msg(s)).collect();
        ix.apply_append(&lim, &batch, 1, |_, _, _| ());
        ix.remove(1);
        ix.remove(5);
        assert_eq!(ix.next_by_subject(1, "a"), Some(3));
        assert_eq!(ix.last_by_subject("a"), Some(3));
        assert_eq!(ix.last_by_subject("*"), Some(4));
        let ss = ix.subjects_state(">");
        assert_eq!(
            ss["a"],
            SubjectState {
                msgs: 1,
                first_seq: 3,
                last_seq: 3
            }
        );
        assert_eq!(
            ss["b"],
            SubjectState {
                msgs: 2,
                first_seq: 2,
                last_seq: 4
            }
        );
    }
}
