//! One consumer: where it is in the stream, what it delivered and is waiting to hear back
//! about, and who is asking for messages.
//!
//! Sequences: every delivery (first or redelivery) takes the next *consumer sequence*; the
//! *stream sequence* is the message's. `next_sseq` is the next stream sequence not yet
//! delivered for the first time; `pending` holds deliveries not yet acked, keyed by stream
//! sequence, with their delivery count and redelivery deadline. The ack floor is derived: the
//! pair just below the oldest pending delivery (or the last delivery when nothing is pending).
//!
//! Time is passed in (`now`, unix nanos); nothing here reads a clock or sleeps. The stream's
//! thread calls [`Consumer::deliver`] after anything that may let messages flow (a publish, a
//! pull request, an ack, a timer) and [`Consumer::tick`] when [`Consumer::next_deadline`] is
//! reached.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ack_subject::AckSubject;
use super::api::types::PriorityGroupState;
use super::api::types::{ConsumerInfo, SequenceInfo};
use super::config::{AckPolicy, ConsumerConfig, DeliverPolicy, PriorityPolicy, PullRequest};
use super::Effects;
use crate::store::{StoredMsg, StreamStore};
use crate::timefmt::{
    format_go_duration, parse_go_duration, parse_rfc3339, rfc3339_nanos, ZERO_TIME,
};

/// The status a pull with a stale or unknown pin id gets (`pinned_client`).
const PIN_MISMATCH: &str = "Nats-Pin-Id mismatch";

/// A new pin id: derived from the consumer, group, time and count (the engine draws no
/// randomness of its own, so a replica computes the same id), 22 characters as nats-server's.
fn pin_id(consumer: &str, group: &str, now: i64, n: u64) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for part in [
        consumer.as_bytes(),
        group.as_bytes(),
        &now.to_le_bytes(),
        &n.to_le_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    let mut id = data_encoding::BASE32_NOPAD.encode(&h.finalize());
    id.truncate(22);
    id
}

/// Bytes of outstanding push deliveries after which a flow-control request is sent.
const FLOW_CONTROL_BYTES: u64 = 2 << 20;
/// How often a push consumer without interest checks again, at most.
const INTEREST_POLL_NS: i64 = 100_000_000;
/// The first check after interest is found missing: a client typically subscribes to its
/// deliver subject right after the create reply, so the checks start 1 ms apart and double up
/// to [`INTEREST_POLL_NS`]. (Polling only every 100 ms, a bucket's 100 ms `max_age` removed
/// the message the new consumer had counted as pending before it was delivered, and
/// async-nats' `kv.keys()` waited for it forever.)
const INTEREST_POLL_FIRST_NS: i64 = 1_000_000;

/// The most messages one consumer holds delivered and unacknowledged, whatever its
/// `max_ack_pending` says (`-1`, unlimited, included): each costs a pending entry (~80 bytes),
/// so a consumer's pending state stays under ~80 MiB. At the ceiling delivery waits for acks,
/// exactly as at a configured `max_ack_pending`; nothing is dropped. `/metrics` counts what
/// is pending (`sealstream_jetstream_ack_pending`).
pub const ACK_PENDING_CEILING: i64 = 1_000_000;

/// The pending limit a consumer configured with `max_ack_pending` runs under.
fn ack_pending_limit(max_ack_pending: i64) -> i64 {
    if max_ack_pending > 0 {
        max_ack_pending.min(ACK_PENDING_CEILING)
    } else {
        ACK_PENDING_CEILING
    }
}

/// One delivery waiting for its ack.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
struct Pending {
    /// Consumer sequence of the first delivery (redeliveries keep it; the ack floor is
    /// measured against it).
    cseq: u64,
    /// Stream timestamp of the message (for the ack subject).
    ts: i64,
    /// How many times it was delivered.
    deliveries: u64,
    /// When it is due for redelivery (unix nanos); `i64::MAX` while parked by max_deliver.
    #[serde(skip)]
    deadline: i64,
}

/// A pull request waiting for messages.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Waiting {
    reply: String,
    batch_left: u64,
    /// Bytes left (`None`: no byte cap).
    bytes_left: Option<u64>,
    expires_at: Option<i64>,
    no_wait: bool,
    heartbeat: i64,
    next_heartbeat: i64,
    delivered: u64,
    /// Overflow: served only while at least this many messages are pending (`0`: unset).
    min_pending: u64,
    /// Overflow: served only while at least this many acks are outstanding (`0`: unset).
    min_ack_pending: u64,
    /// Prioritized: lower goes first.
    priority: i64,
    /// The priority group it belongs to.
    group: Option<String>,
    /// `pinned_client`: the pin id it carries (sent by the client, or given when it was
    /// pinned).
    pin: Option<String>,
    /// `prioritized`: a request of priority above 0 is not served before this time (unix
    /// nanos; 0: not held), so that a better one sent with it — clients send the pulls of
    /// several consumers in the same instant — is served first ([`PRIORITY_HOLD_NS`]).
    /// Imaged beside the consumer ([`Consumer::pull_holds`]), not in it: images of earlier
    /// builds end before it.
    #[serde(skip)]
    held_until: i64,
}

/// How long a `prioritized` pull request of priority above 0 waits for a better one before
/// it may be served. nats-server serves the requests it read together by priority; ours reach
/// the stream's thread one by one, so the first would always win. Chosen: 5 ms — far above
/// the microseconds between two pulls a client writes at once, far below a pull's expiry.
pub const PRIORITY_HOLD_NS: i64 = 5_000_000;

/// The client a `pinned_client` group delivers to (ADR-42).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pin {
    /// The id sent in `Nats-Pin-Id`; the client's pulls carry it back.
    id: String,
    /// When it was pinned.
    since: i64,
    /// Its last pull request.
    last_pull: i64,
}

/// Push delivery state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PushState {
    /// Whether the last attempt found a subscriber.
    bound: bool,
    /// When to check for interest again after finding none.
    retry_at: i64,
    /// Since when there has been no interest (ephemeral clean-up).
    unbound_since: Option<i64>,
    /// The wait before the next interest check (doubles per miss, reset by interest).
    poll_ns: i64,
    /// Bytes delivered since the last flow-control request was answered.
    fc_bytes: u64,
    /// The outstanding flow-control reply subject, while stalled.
    fc_pending: Option<String>,
    fc_counter: u64,
    /// Last time anything was sent to the deliver subject.
    last_sent: i64,
}

/// What a consumer persists (sealed by the store's metadata layer).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SavedState {
    next_sseq: u64,
    cseq: u64,
    delivered_sseq: u64,
    floor_cseq: u64,
    floor_sseq: u64,
    pending: Vec<(u64, Pending)>,
    lps: Vec<u64>,
    #[serde(default)]
    redelivered: Vec<(u64, u64)>,
}

/// What an ack did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckEffect {
    /// Nothing to do for the stream (NAK, WPI, unknown or repeated ack).
    None,
    /// These stream sequences are done with (acked or terminated): retention may remove
    /// them.
    Done(Vec<u64>),
}

/// A consumer of one stream. Its serde form is a snapshot's image of it, whole (see
/// [`super::image`]); what a single server persists is [`SavedState`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Consumer {
    /// Its name.
    pub name: String,
    /// Its configuration (normalised).
    #[serde(with = "super::image::json_text")]
    pub cfg: ConsumerConfig,
    /// Creation time (unix nanos).
    pub created: i64,
    filters: Vec<String>,
    next_sseq: u64,
    cseq: u64,
    delivered_sseq: u64,
    /// The ack floor when nothing is pending.
    floor_cseq: u64,
    floor_sseq: u64,
    #[serde(with = "pending_with_deadlines")]
    pending: BTreeMap<u64, Pending>,
    /// Stream sequences due for redelivery, oldest first.
    redeliver: BTreeSet<u64>,
    /// Messages whose deliveries ran out (max_deliver) unacked: no longer pending, still
    /// counted as redelivered (as nats-server reports them).
    exhausted: BTreeSet<u64>,
    /// Last-per-subject starting set, still to deliver.
    lps: VecDeque<u64>,
    waiting: VecDeque<Waiting>,
    /// `pinned_client`: the pinned client of each group that has one.
    pins: BTreeMap<String, Pin>,
    /// How many pins were given (part of each new id).
    pins_given: u64,
    push: Option<PushState>,
    last_delivery_active: Option<i64>,
    last_ack_active: Option<i64>,
    /// Last activity (pull request, ack, delivery with interest): ephemeral clean-up.
    last_activity: i64,
    /// Changed since last persisted.
    pub dirty: bool,
    /// Persist generation (monotonic).
    pub generation: u64,
    /// Original pacing start (replay original): (first message ts, wall time then).
    replay_anchor: Option<(i64, i64)>,
    /// `cfg.pause_until` in unix nanos: nothing is delivered before it.
    pause_at: Option<i64>,
}

/// Pending deliveries with their redelivery deadlines (which [`SavedState`] leaves out: a
/// restarted server sets them anew; a snapshot's replica must keep the leader's).
mod pending_with_deadlines {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Pending;

    pub(super) fn serialize<S: Serializer>(
        p: &BTreeMap<u64, Pending>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let v: Vec<(u64, Pending, i64)> = p.iter().map(|(k, v)| (*k, *v, v.deadline)).collect();
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<u64, Pending>, D::Error> {
        let v = Vec::<(u64, Pending, i64)>::deserialize(d)?;
        Ok(v.into_iter()
            .map(|(k, mut p, deadline)| {
                p.deadline = deadline;
                (k, p)
            })
            .collect())
    }
}

fn matches_any(filters: &[String], subject: &str) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .any(|f| crate::subject::subject_matches_filter(subject.as_bytes(), f.as_bytes()))
}

/// A status header block: `NATS/1.0 <code> <text>` plus fields.
pub fn status_block(code: u16, text: &str, fields: &[(&str, String)]) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_slice(b"NATS/1.0 ");
    b.put_slice(code.to_string().as_bytes());
    if !text.is_empty() {
        b.put_u8(b' ');
        b.put_slice(text.as_bytes());
    }
    b.put_slice(b"\r\n");
    put_fields(&mut b, fields);
    b.freeze()
}

/// Appends header fields to a stored header block (or starts one).
pub fn add_headers(stored: Option<&Bytes>, fields: &[(&str, String)]) -> Bytes {
    let mut b = BytesMut::with_capacity(128);
    match stored {
        Some(h) if h.len() >= 4 && h.ends_with(b"\r\n\r\n") => {
            b.put_slice(h.get(..h.len() - 2).unwrap_or(h));
        }
        _ => b.put_slice(b"NATS/1.0\r\n"),
    }
    put_fields(&mut b, fields);
    b.freeze()
}

/// `Name: value` lines, then the blank line that ends a header block.
fn put_fields(b: &mut BytesMut, fields: &[(&str, String)]) {
    for (k, v) in fields {
        b.put_slice(k.as_bytes());
        b.put_slice(b": ");
        b.put_slice(v.as_bytes());
        b.put_slice(b"\r\n");
    }
    b.put_slice(b"\r\n");
}

impl Consumer {
    /// A new consumer positioned per its deliver policy.
    pub fn new(name: String, cfg: ConsumerConfig, created: i64, store: &dyn StreamStore) -> Self {
        let filters = cfg.filters();
        let st = store.state();
        let mut c = Consumer {
            name,
            cfg,
            created,
            filters,
            next_sseq: 1,
            cseq: 0,
            delivered_sseq: 0,
            floor_cseq: 0,
            floor_sseq: 0,
            pending: BTreeMap::new(),
            redeliver: BTreeSet::new(),
            exhausted: BTreeSet::new(),
            lps: VecDeque::new(),
            waiting: VecDeque::new(),
            pins: BTreeMap::new(),
            pins_given: 0,
            push: None,
            last_delivery_active: None,
            last_ack_active: None,
            last_activity: created,
            dirty: true,
            generation: 0,
            replay_anchor: None,
            pause_at: None,
        };
        c.pause_at = c.cfg.pause_until.as_deref().and_then(parse_rfc3339);
        if c.cfg.is_push() {
            // The first idle heartbeat is due one interval after creation, not at once (as
            // nats-server: an ordered consumer reads an early heartbeat as a gap).
            c.push = Some(PushState {
                last_sent: created,
                ..PushState::default()
            });
        }
        let first = if st.msgs == 0 {
            st.last_seq + 1
        } else {
            st.first_seq
        };
        let start = match c.cfg.deliver_policy {
            DeliverPolicy::All => first,
            DeliverPolicy::New => st.last_seq + 1,
            DeliverPolicy::Last => c
                .last_matching(store)
                .map_or(st.last_seq + 1, |s| s.max(first)),
            DeliverPolicy::ByStartSequence => c.cfg.opt_start_seq.unwrap_or(1).max(first),
            DeliverPolicy::ByStartTime => {
                let t = c
                    .cfg
                    .opt_start_time
                    .as_deref()
                    .and_then(parse_rfc3339)
                    .unwrap_or(0);
                c.first_at_or_after_time(store, t, first)
                    .unwrap_or(st.last_seq + 1)
            }
            DeliverPolicy::LastPerSubject => {
                let mut seqs = BTreeSet::new();
                let fs: Vec<String> = if c.filters.is_empty() {
                    vec![">".to_owned()]
                } else {
                    c.filters.clone()
                };
                for f in &fs {
                    for (_, s) in store.subjects_state(f) {
                        seqs.insert(s.last_seq);
                    }
                }
                c.lps = seqs.into_iter().collect();
                st.last_seq + 1
            }
        };
        c.next_sseq = start;
        c.delivered_sseq = start.saturating_sub(1);
        c.floor_sseq = c.delivered_sseq;
        if let Some(first_lps) = c.lps.front() {
            c.delivered_sseq = first_lps.saturating_sub(1);
            c.floor_sseq = c.delivered_sseq;
        }
        c
    }

    fn last_matching(&self, store: &dyn StreamStore) -> Option<u64> {
        if self.filters.is_empty() {
            return store.last_by_subject(">").ok().flatten().map(|m| m.seq);
        }
        self.filters
            .iter()
            .filter_map(|f| store.last_by_subject(f).ok().flatten().map(|m| m.seq))
            .max()
    }

    fn first_at_or_after_time(&self, store: &dyn StreamStore, t: i64, first: u64) -> Option<u64> {
        let mut seq = first;
        loop {
            let m = self.next_matching(store, seq)?;
            if m.ts >= t {
                return Some(m.seq);
            }
            seq = m.seq + 1;
        }
    }

    fn next_matching(&self, store: &dyn StreamStore, from: u64) -> Option<StoredMsg> {
        let next = |f: &str| match store.next_by_subject(from, f) {
            Ok(m) => m,
            Err(e) => {
                // Logged: a failed read looks like "nothing new" to the caller.
                tracing::warn!(consumer = %self.name, from, error = %e, "delivery read failed");
                None
            }
        };
        if self.filters.len() <= 1 {
            return next(self.filters.first().map_or(">", String::as_str));
        }
        self.filters
            .iter()
            .filter_map(|f| next(f))
            .min_by_key(|m| m.seq)
    }

    /// Whether this consumer's filter takes `subject`.
    pub fn wants(&self, subject: &str) -> bool {
        matches_any(&self.filters, subject)
    }

    /// Whether this is a push consumer.
    pub fn is_push(&self) -> bool {
        self.push.is_some()
    }

    fn acks(&self) -> bool {
        self.cfg.ack_policy != AckPolicy::None
    }

    /// `max_ack_pending`, or [`ACK_PENDING_CEILING`] when that is lower or unlimited.
    fn ack_pending_limit(&self) -> i64 {
        ack_pending_limit(self.cfg.max_ack_pending)
    }

    /// Matching messages not yet delivered.
    pub fn num_pending(&self, store: &dyn StreamStore) -> u64 {
        let lps = self.lps.len() as u64;
        let rest = if self.filters.len() <= 1 {
            let f = self.filters.first().map_or(">", String::as_str);
            store.count_from(self.next_sseq, f)
        } else {
            self.filters
                .iter()
                .map(|f| store.count_from(self.next_sseq, f))
                .sum()
        };
        lps + rest
    }

    /// Whether the message at `seq` with `subject` is done for this consumer (interest
    /// retention): not wanted, or delivered and acked.
    pub fn is_done_with(&self, seq: u64, subject: &str) -> bool {
        if !self.wants(subject) {
            return true;
        }
        if self.lps.contains(&seq) {
            return false;
        }
        seq < self.next_sseq && !self.pending.contains_key(&seq)
    }

    fn ack_floor(&self) -> (u64, u64) {
        match self.pending.iter().next() {
            Some((sseq, p)) => (p.cseq.saturating_sub(1), sseq.saturating_sub(1)),
            None => (self.floor_cseq, self.floor_sseq),
        }
    }

    /// `CONSUMER.RESET` (ADR-60): forgets every pending delivery and moves the cursor so
    /// the next message delivered has a stream sequence of at least the one returned. `seq`
    /// 0 resumes from one above the ack floor; another `seq` sets the ack floor just below
    /// it (forward or back). Consumer sequences start again from 1. Waiting pull requests
    /// stay and are served from the new position.
    ///
    /// # Errors
    /// `10204 invalid reset`: a `seq` for a consumer that starts at the stream's end (`last`,
    /// `new`, `last_per_subject`: "not allowed"), or below a `by_start_sequence` consumer's
    /// `opt_start_seq` ("below start seq").
    pub fn reset(&mut self, seq: u64) -> Result<u64, super::api::ApiError> {
        use super::api::ApiError;
        let target = if seq == 0 {
            self.ack_floor().1.saturating_add(1)
        } else {
            match self.cfg.deliver_policy {
                DeliverPolicy::Last | DeliverPolicy::New | DeliverPolicy::LastPerSubject => {
                    return Err(ApiError::invalid_reset("not allowed"));
                }
                DeliverPolicy::ByStartSequence if seq < self.cfg.opt_start_seq.unwrap_or(0) => {
                    return Err(ApiError::invalid_reset("below start seq"));
                }
                _ => seq,
            }
        };
        self.pending.clear();
        self.redeliver.clear();
        self.exhausted.clear();
        self.lps.clear();
        self.next_sseq = target;
        self.delivered_sseq = target - 1;
        self.cseq = 0;
        self.floor_cseq = 0;
        self.floor_sseq = target - 1;
        self.replay_anchor = None;
        self.last_delivery_active = None;
        self.last_ack_active = None;
        if let Some(p) = self.push.as_mut() {
            p.fc_pending = None;
        }
        self.dirty = true;
        Ok(target)
    }

    /// The consumer info reply body (without `type`).
    pub fn info(&self, stream: &str, store: &dyn StreamStore, now: i64) -> ConsumerInfo {
        let (fc, fs) = self.ack_floor();
        let paused = self.paused(now);
        ConsumerInfo {
            stream_name: stream.to_owned(),
            name: self.name.clone(),
            created: rfc3339_nanos(self.created),
            config: self.cfg.clone(),
            delivered: SequenceInfo {
                consumer_seq: self.cseq,
                stream_seq: self.delivered_sseq,
                last_active: self.last_delivery_active.map(rfc3339_nanos),
            },
            ack_floor: SequenceInfo {
                consumer_seq: fc,
                stream_seq: fs,
                last_active: self.last_ack_active.map(rfc3339_nanos),
            },
            num_ack_pending: self.pending.len(),
            num_redelivered: self.pending.values().filter(|p| p.deliveries > 1).count()
                + self.exhausted.len(),
            num_waiting: self.waiting.len(),
            num_pending: self.num_pending(store),
            ts: rfc3339_nanos(now),
            push_bound: self.push.as_ref().is_some_and(|p| p.bound),
            paused: paused.is_some(),
            pause_remaining: paused.map(|t| t - now),
            priority_groups: self
                .cfg
                .priority_groups
                .iter()
                .map(|g| {
                    let pin = self.pins.get(g);
                    PriorityGroupState {
                        group: g.clone(),
                        pinned_client_id: pin.map(|p| p.id.clone()),
                        pinned_ts: pin
                            .map_or_else(|| ZERO_TIME.to_owned(), |p| rfc3339_nanos(p.since)),
                    }
                })
                .collect(),
        }
    }

    // ---------------------------------------------------------------- persistence

    /// The state to persist.
    pub fn save(&self) -> SavedState {
        SavedState {
            next_sseq: self.next_sseq,
            cseq: self.cseq,
            delivered_sseq: self.delivered_sseq,
            floor_cseq: self.floor_cseq,
            floor_sseq: self.floor_sseq,
            pending: self.pending.iter().map(|(s, p)| (*s, *p)).collect(),
            lps: self.lps.iter().copied().collect(),
            redelivered: Vec::new(),
        }
    }

    /// Restores persisted state; pending deliveries become due for redelivery after
    /// `ack_wait` from `now`.
    pub fn restore(&mut self, s: SavedState, now: i64) {
        self.next_sseq = s.next_sseq;
        self.cseq = s.cseq;
        self.delivered_sseq = s.delivered_sseq;
        self.floor_cseq = s.floor_cseq;
        self.floor_sseq = s.floor_sseq;
        let wait = self.ack_wait_for(1);
        self.pending = s
            .pending
            .into_iter()
            .map(|(seq, mut p)| {
                p.deadline = now.saturating_add(wait);
                (seq, p)
            })
            .collect();
        self.lps = s.lps.into_iter().collect();
        self.dirty = false;
    }

    // ---------------------------------------------------------------- config updates

    /// Applies an updated (already validated) config.
    pub fn update_config(&mut self, cfg: ConsumerConfig) {
        self.filters = cfg.filters();
        self.pause_at = cfg.pause_until.as_deref().and_then(parse_rfc3339);
        self.cfg = cfg;
        self.dirty = true;
    }

    /// Pauses delivery until `until` (unix nanos), or resumes it (`None`, or a time already
    /// past). The config carries it, so a restart keeps the pause.
    pub fn set_pause(&mut self, until: Option<i64>, now: i64) {
        let until = until.filter(|t| *t > now);
        self.pause_at = until;
        self.cfg.pause_until = until.map(rfc3339_nanos);
        self.dirty = true;
    }

    /// Whether delivery is paused at `now`, and until when.
    pub fn paused(&self, now: i64) -> Option<i64> {
        self.pause_at.filter(|t| *t > now)
    }

    // ---------------------------------------------------------------- pull requests

    /// Takes a pull request. Refusals are answered on `reply` directly.
    pub fn pull_request(&mut self, req: PullRequest, reply: &str, out: &mut Effects, now: i64) {
        self.last_activity = now;
        if self.push.is_some() {
            out.status(reply, status_block(409, "Consumer is push based", &[]));
            return;
        }
        if let Err(text) = self.check_priority(&req) {
            out.status(reply, status_block(400, text, &[]));
            return;
        }
        // `pinned_client`: a pull carrying an id must carry the pinned one; one without an id
        // waits as a stand-by.
        if self.cfg.priority_policy == PriorityPolicy::PinnedClient {
            if let Some(id) = &req.id {
                match req.group.as_ref().and_then(|g| self.pins.get_mut(g)) {
                    Some(p) if p.id == *id => p.last_pull = now,
                    _ => {
                        out.status(reply, status_block(423, PIN_MISMATCH, &[]));
                        return;
                    }
                }
            }
        }
        if self.cfg.max_batch > 0 && req.batch > self.cfg.max_batch as u64 {
            let t = format!("Exceeded MaxRequestBatch of {}", self.cfg.max_batch);
            out.status(reply, status_block(409, &t, &[]));
            return;
        }
        if self.cfg.max_expires > 0 && (req.expires == 0 || req.expires > self.cfg.max_expires) {
            let t = format!(
                "Exceeded MaxRequestExpires of {}",
                format_go_duration(self.cfg.max_expires)
            );
            out.status(reply, status_block(409, &t, &[]));
            return;
        }
        if self.cfg.max_bytes > 0 && req.max_bytes > self.cfg.max_bytes as u64 {
            let t = format!("Exceeded MaxRequestMaxBytes of {}", self.cfg.max_bytes);
            out.status(reply, status_block(409, &t, &[]));
            return;
        }
        if req.idle_heartbeat > 0 && req.expires > 0 && req.idle_heartbeat * 2 > req.expires {
            out.status(
                reply,
                status_block(400, "Bad Request - heartbeat value too large", &[]),
            );
            return;
        }
        let max_waiting = usize::try_from(self.cfg.max_waiting.max(1)).unwrap_or(usize::MAX);
        if self.waiting.len() >= max_waiting {
            if req.idle_heartbeat == 0 {
                out.status(reply, status_block(409, "Exceeded MaxWaiting", &[]));
            }
            return;
        }
        self.waiting.push_back(Waiting {
            reply: reply.to_owned(),
            batch_left: req.batch.max(1),
            bytes_left: (req.max_bytes > 0).then_some(req.max_bytes),
            expires_at: (req.expires > 0).then(|| now.saturating_add(req.expires)),
            no_wait: req.no_wait,
            heartbeat: pull_heartbeat(req.idle_heartbeat),
            next_heartbeat: now.saturating_add(pull_heartbeat(req.idle_heartbeat)),
            delivered: 0,
            min_pending: u64::try_from(req.min_pending).unwrap_or(0),
            min_ack_pending: u64::try_from(req.min_ack_pending).unwrap_or(0),
            priority: req.priority,
            group: req.group,
            pin: req.id,
            held_until: if self.cfg.priority_policy == PriorityPolicy::Prioritized
                && req.priority > 0
                && !req.no_wait
            {
                now.saturating_add(PRIORITY_HOLD_NS)
            } else {
                0
            },
        });
    }

    /// The holds of waiting `prioritized` requests: (index in line, until). They travel in a
    /// stream's image beside the consumer (see [`Waiting::held_until`]).
    pub fn pull_holds(&self) -> Vec<(u64, i64)> {
        self.waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| w.held_until > 0)
            .map(|(i, w)| (i as u64, w.held_until))
            .collect()
    }

    /// Puts back holds from [`Consumer::pull_holds`].
    pub fn restore_pull_holds(&mut self, holds: &[(u64, i64)]) {
        for (i, until) in holds {
            if let Some(w) = usize::try_from(*i)
                .ok()
                .and_then(|i| self.waiting.get_mut(i))
            {
                w.held_until = *until;
            }
        }
    }

    /// `CONSUMER.UNPIN`: the group's pinned client is dropped; its waiting pulls end with
    /// `423`, and the next delivery pins another client.
    ///
    /// # Errors
    /// `10160` when the consumer has no such group.
    pub fn unpin(&mut self, group: &str, out: &mut Effects) -> Result<(), super::api::ApiError> {
        if !self.cfg.priority_groups.iter().any(|g| g == group) {
            return Err(super::api::ApiError::new(
                400,
                10160,
                "Provided priority group does not exist for this consumer",
            ));
        }
        if self.pins.remove(group).is_some() {
            self.eject_pulls_without(group, None, out);
        }
        Ok(())
    }

    /// Ends with `423 Nats-Pin-Id mismatch` the waiting pulls of `group` that carry a pin id
    /// other than `keep`.
    fn eject_pulls_without(&mut self, group: &str, keep: Option<&str>, out: &mut Effects) {
        self.waiting.retain(|w| {
            let stale = w.group.as_deref() == Some(group)
                && w.pin.as_deref().is_some_and(|id| Some(id) != keep);
            if stale {
                out.status(&w.reply, status_block(423, PIN_MISMATCH, &[]));
            }
            !stale
        });
    }

    /// `pinned_client`: the pin id deliveries to waiting pull `serving` carry, pinning its
    /// client first when its group has nobody pinned (other clients' stale pulls are ended).
    /// Returns the id and where the request now sits in the queue.
    fn pin_for(&mut self, serving: usize, now: i64, out: &mut Effects) -> (Option<String>, usize) {
        if self.cfg.priority_policy != PriorityPolicy::PinnedClient {
            return (None, serving);
        }
        let Some(w) = self.waiting.get(serving) else {
            return (None, serving);
        };
        let group = w.group.clone().unwrap_or_default();
        if let Some(p) = self.pins.get(&group) {
            return (Some(p.id.clone()), serving);
        }
        self.pins_given += 1;
        let id = pin_id(&self.name, &group, now, self.pins_given);
        self.pins.insert(
            group.clone(),
            Pin {
                id: id.clone(),
                since: now,
                last_pull: now,
            },
        );
        let reply = w.reply.clone();
        if let Some(w) = self.waiting.get_mut(serving) {
            w.pin = Some(id.clone());
        }
        self.eject_pulls_without(&group, Some(&id), out);
        let at = self
            .waiting
            .iter()
            .position(|w| w.reply == reply && w.pin.as_deref() == Some(id.as_str()))
            .unwrap_or(serving);
        (Some(id), at)
    }

    /// Drops pins whose client has not pulled within `priority_timeout` and has no pull
    /// waiting.
    fn expire_pins(&mut self, now: i64) {
        let timeout = self.cfg.priority_timeout;
        if self.pins.is_empty() || timeout <= 0 {
            return;
        }
        let waiting = &self.waiting;
        self.pins.retain(|g, p| {
            let has_pull = waiting.iter().any(|w| {
                w.group.as_deref() == Some(g.as_str()) && w.pin.as_deref() == Some(p.id.as_str())
            });
            has_pull || now.saturating_sub(p.last_pull) < timeout
        });
    }

    /// A pull request's priority-group fields against the consumer's policy; the error is the
    /// `400` status text nats-server 2.15.1 sends.
    fn check_priority(&self, req: &PullRequest) -> Result<(), &'static str> {
        let policy = self.cfg.priority_policy;
        if policy != PriorityPolicy::None {
            match req.group.as_deref() {
                None | Some("") => return Err("Bad Request - Priority Group missing"),
                Some(g) if !self.cfg.priority_groups.iter().any(|x| x == g) => {
                    return Err("Bad Request - Invalid Priority Group")
                }
                Some(_) => {}
            }
        }
        if (req.min_pending > 0 || req.min_ack_pending > 0) && policy != PriorityPolicy::Overflow {
            return Err("Bad Request - Not a Overflow Priority consumer");
        }
        if policy == PriorityPolicy::Prioritized && !(0..=9).contains(&req.priority) {
            return Err("Bad Request - Priority must be between 0 and 9");
        }
        Ok(())
    }

    /// Which waiting request is served next: the first in line, except that `overflow` skips
    /// requests whose `min_pending` / `min_ack_pending` the consumer does not reach (either
    /// one reached suffices) and `prioritized` takes the lowest priority first (in arrival
    /// order among equals; while that one is still held nobody is served: [`PRIORITY_HOLD_NS`]).
    fn next_waiting(&self, store: &dyn StreamStore, now: i64) -> Option<usize> {
        match self.cfg.priority_policy {
            PriorityPolicy::Prioritized => {
                // The best request in line, held or not: one still held makes the worse ones
                // wait too (they are not served ahead of it just because their own hold, begun
                // earlier, ended first).
                let best = self.waiting.iter().map(|w| w.priority).min()?;
                let i = self.waiting.iter().position(|w| w.priority == best)?;
                (self.waiting[i].held_until <= now).then_some(i)
            }
            PriorityPolicy::Overflow => {
                let mut pending = None;
                let acks = self.pending.len() as u64;
                self.waiting.iter().position(|w| {
                    if w.min_pending == 0 && w.min_ack_pending == 0 {
                        return true;
                    }
                    let behind = w.min_pending > 0
                        && *pending.get_or_insert_with(|| self.num_pending(store)) >= w.min_pending;
                    behind || (w.min_ack_pending > 0 && acks >= w.min_ack_pending)
                })
            }
            // The pinned client's pulls; with nobody pinned, the first in line.
            PriorityPolicy::PinnedClient => self.waiting.iter().position(|w| {
                match w.group.as_ref().and_then(|g| self.pins.get(g)) {
                    Some(p) => w.pin.as_deref() == Some(p.id.as_str()),
                    None => w.pin.is_none(),
                }
            }),
            PriorityPolicy::None => (!self.waiting.is_empty()).then_some(0),
        }
    }

    /// Ends every waiting request with `409 Consumer Deleted` (the consumer is going away).
    pub fn deleted(&mut self, out: &mut Effects) {
        for w in self.waiting.drain(..) {
            out.status(&w.reply, status_block(409, "Consumer Deleted", &[]));
        }
    }

    /// The server is stopping: every waiting pull request ends with `409 Server Shutdown` and
    /// what it still had room for (as nats-server; a client asks again, after it reconnects).
    pub fn server_shutdown(&mut self, out: &mut Effects) {
        for w in self.waiting.drain(..) {
            let h = Self::pending_headers(&w);
            out.status(&w.reply, status_block(409, "Server Shutdown", &h));
        }
    }

    fn pending_headers(w: &Waiting) -> Vec<(&'static str, String)> {
        vec![
            ("Nats-Pending-Messages", w.batch_left.to_string()),
            ("Nats-Pending-Bytes", w.bytes_left.unwrap_or(0).to_string()),
        ]
    }

    // ---------------------------------------------------------------- acks

    /// Handles an ack published to this consumer's ack subject (`tokens` = the 9 tokens).
    /// `body` is the ack payload. Returns what it means for retention, and a pull request to
    /// start for `+NXT`.
    pub fn ack(&mut self, sseq: u64, body: &[u8], now: i64) -> (AckEffect, Option<PullRequest>) {
        self.last_activity = now;
        let text = std::str::from_utf8(body).unwrap_or("").trim();
        let (verb, rest) = match text.split_once(char::is_whitespace) {
            Some((v, r)) => (v, r.trim()),
            None => (text, ""),
        };
        match verb {
            "" | "+ACK" | "+OK" => (self.ack_one(sseq, now), None),
            "+NXT" => {
                let eff = self.ack_one(sseq, now);
                let req = if rest.is_empty() {
                    Some(PullRequest::default())
                } else {
                    super::config::parse_pull_request(rest.as_bytes()).ok()
                };
                (eff, req)
            }
            "-NAK" => {
                let delay = parse_nak_delay(rest);
                let max_deliver = self.cfg.max_deliver;
                if let Some(p) = self.pending.get_mut(&sseq) {
                    match delay {
                        Some(d) if d > 0 => p.deadline = now.saturating_add(d),
                        _ if max_deliver <= 0 || p.deliveries < max_deliver as u64 => {
                            // Redelivered next, before anything new: a pull taken in the
                            // same round as this NAK must see it (as `tick` would queue it).
                            p.deadline = i64::MAX;
                            self.redeliver.insert(sseq);
                        }
                        _ => {
                            // Deliveries used up: `tick` drops it from pending.
                            p.deadline = now;
                        }
                    }
                    self.dirty = true;
                }
                (AckEffect::None, None)
            }
            "+WPI" => {
                let wait = self.ack_wait_for(self.pending.get(&sseq).map_or(1, |p| p.deliveries));
                if let Some(p) = self.pending.get_mut(&sseq) {
                    p.deadline = now.saturating_add(wait);
                    self.redeliver.remove(&sseq);
                }
                (AckEffect::None, None)
            }
            "+TERM" => {
                if self.pending.remove(&sseq).is_some() {
                    self.redeliver.remove(&sseq);
                    self.note_floor(now);
                    (AckEffect::Done(vec![sseq]), None)
                } else {
                    (AckEffect::None, None)
                }
            }
            _ => (AckEffect::None, None),
        }
    }

    fn ack_one(&mut self, sseq: u64, now: i64) -> AckEffect {
        self.exhausted.remove(&sseq);
        match self.cfg.ack_policy {
            AckPolicy::None => AckEffect::None,
            AckPolicy::Explicit => {
                if self.pending.remove(&sseq).is_some() {
                    self.redeliver.remove(&sseq);
                    self.note_floor(now);
                    AckEffect::Done(vec![sseq])
                } else {
                    AckEffect::None
                }
            }
            AckPolicy::All => {
                let done: Vec<u64> = self.pending.range(..=sseq).map(|(s, _)| *s).collect();
                for s in &done {
                    self.pending.remove(s);
                    self.redeliver.remove(s);
                }
                if done.is_empty() {
                    AckEffect::None
                } else {
                    self.note_floor(now);
                    AckEffect::Done(done)
                }
            }
        }
    }

    fn note_floor(&mut self, now: i64) {
        if self.pending.is_empty() {
            self.floor_cseq = self.cseq;
            self.floor_sseq = self.delivered_sseq;
        }
        self.last_ack_active = Some(now);
        self.dirty = true;
    }

    /// Handles the reply to a flow-control request.
    pub fn flow_control_reply(&mut self, subject: &str) {
        if let Some(p) = &mut self.push {
            if p.fc_pending.as_deref() == Some(subject) {
                p.fc_pending = None;
                p.fc_bytes = 0;
            }
        }
    }

    fn ack_wait_for(&self, deliveries: u64) -> i64 {
        if !self.cfg.backoff.is_empty() {
            let i = usize::try_from(deliveries.saturating_sub(1)).unwrap_or(usize::MAX);
            let i = i.min(self.cfg.backoff.len() - 1);
            if let Some(b) = self.cfg.backoff.get(i) {
                return *b;
            }
        }
        if self.cfg.ack_wait > 0 {
            self.cfg.ack_wait
        } else {
            30_000_000_000
        }
    }

    // ---------------------------------------------------------------- timers

    /// The earliest time [`Consumer::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<i64> {
        let mut d: Option<i64> = None;
        let mut take = |t: i64| d = Some(d.map_or(t, |x: i64| x.min(t)));
        // The end of a pause: delivery starts again on its own.
        if let Some(t) = self.pause_at {
            take(t);
        }
        for p in self.pending.values() {
            if p.deadline != i64::MAX {
                take(p.deadline);
            }
        }
        for w in &self.waiting {
            if let Some(e) = w.expires_at {
                take(e);
            }
            if w.held_until > 0 {
                take(w.held_until);
            }
            if w.heartbeat > 0 {
                take(w.next_heartbeat);
            }
        }
        if let Some(p) = &self.push {
            if !p.bound && p.retry_at > 0 {
                take(p.retry_at);
            }
            if self.cfg.idle_heartbeat > 0 {
                take(p.last_sent.saturating_add(self.cfg.idle_heartbeat));
            }
        }
        for (g, p) in &self.pins {
            let has_pull = self.waiting.iter().any(|w| {
                w.group.as_deref() == Some(g.as_str()) && w.pin.as_deref() == Some(p.id.as_str())
            });
            if !has_pull && self.cfg.priority_timeout > 0 {
                take(p.last_pull.saturating_add(self.cfg.priority_timeout));
            }
        }
        if self.is_ephemeral() && self.cfg.inactive_threshold > 0 {
            take(
                self.last_activity
                    .saturating_add(self.cfg.inactive_threshold),
            );
        }
        d
    }

    /// Whether the consumer goes away when inactive.
    pub fn is_ephemeral(&self) -> bool {
        self.cfg.durable_name.is_none()
    }

    /// Whether the consumer has been inactive past its threshold (the stream deletes it).
    pub fn expired(&self, now: i64) -> bool {
        let thr = self.cfg.inactive_threshold;
        if thr <= 0 {
            return false;
        }
        let idle_since = match &self.push {
            Some(p) => match p.unbound_since {
                Some(t) => t,
                None => return false,
            },
            None => {
                if !self.waiting.is_empty() {
                    return false;
                }
                self.last_activity
            }
        };
        (self.is_ephemeral() || thr > 0) && now.saturating_sub(idle_since) >= thr
    }

    /// Timers: redelivery due, pull expiries and heartbeats, push heartbeats.
    pub fn tick(&mut self, out: &mut Effects, now: i64) {
        // A pause that ended is no deadline any more (the config keeps its time, as echoed).
        if self.pause_at.is_some_and(|t| t <= now) {
            self.pause_at = None;
        }
        self.expire_pins(now);
        let max_deliver = self.cfg.max_deliver;
        let mut due = Vec::new();
        let mut exhausted = Vec::new();
        for (s, p) in &mut self.pending {
            if p.deadline <= now {
                p.deadline = i64::MAX;
                if max_deliver <= 0 || p.deliveries < max_deliver as u64 {
                    due.push(*s);
                } else {
                    exhausted.push(*s);
                }
            }
        }
        for s in due {
            self.redeliver.insert(s);
        }
        // Deliveries used up (max_deliver) and the last ack wait over: no longer pending, as
        // nats-server does; the message stays in the stream (it was never acked).
        if !exhausted.is_empty() {
            for s in exhausted {
                self.pending.remove(&s);
                if max_deliver > 1 {
                    self.exhausted.insert(s);
                }
            }
            if self.pending.is_empty() {
                self.floor_cseq = self.cseq;
                self.floor_sseq = self.delivered_sseq;
            }
            self.dirty = true;
        }
        // Pull request expiry and heartbeats.
        let mut keep = VecDeque::with_capacity(self.waiting.len());
        for mut w in self.waiting.drain(..) {
            if w.held_until <= now {
                w.held_until = 0;
            }
            if w.expires_at.is_some_and(|e| e <= now) {
                out.status(
                    &w.reply,
                    status_block(408, "Request Timeout", &Self::pending_headers(&w)),
                );
                continue;
            }
            if w.heartbeat > 0 && w.next_heartbeat <= now {
                let hb = status_block(
                    100,
                    "Idle Heartbeat",
                    &[
                        ("Nats-Last-Consumer", self.cseq.to_string()),
                        ("Nats-Last-Stream", self.delivered_sseq.to_string()),
                    ],
                );
                if !out.status_requester(&w.reply, hb) {
                    continue;
                }
                w.next_heartbeat = now.saturating_add(w.heartbeat);
            }
            keep.push_back(w);
        }
        self.waiting = keep;
        // Push idle heartbeat.
        let hb_every = self.cfg.idle_heartbeat;
        let (cseq, dseq) = (self.cseq, self.delivered_sseq);
        if let (Some(p), Some(ds)) = (&mut self.push, self.cfg.deliver_subject.clone()) {
            if hb_every > 0 && p.last_sent.saturating_add(hb_every) <= now {
                let mut fields = vec![
                    ("Nats-Last-Consumer", cseq.to_string()),
                    ("Nats-Last-Stream", dseq.to_string()),
                ];
                if let Some(fc) = &p.fc_pending {
                    fields.push(("Nats-Consumer-Stalled", fc.clone()));
                }
                let hb = status_block(100, "Idle Heartbeat", &fields);
                let bound = out.status_push(p.bound, &ds, hb);
                p.last_sent = now;
                Self::note_interest(p, bound, now);
            }
        }
    }

    /// A push consumer's deliver subject and whether it is recorded as listened to (not
    /// before a delivery attempt or a replicated round found it so).
    pub fn push_interest(&self) -> Option<(&str, bool)> {
        let p = self.push.as_ref()?;
        Some((self.cfg.deliver_subject.as_deref()?, p.bound))
    }

    /// A replicated round's answer to whether the deliver subject is listened to, taken as
    /// a delivery attempt's would be (see `Stream::take_push_interest`).
    pub fn take_push_interest(&mut self, listened: bool, now: i64) {
        if let Some(p) = &mut self.push {
            Self::note_interest(p, listened, now);
        }
    }

    fn note_interest(p: &mut PushState, bound: bool, now: i64) {
        p.bound = bound;
        if bound {
            p.unbound_since = None;
            p.retry_at = 0;
            p.poll_ns = 0;
        } else {
            if p.unbound_since.is_none() {
                p.unbound_since = Some(now);
            }
            p.poll_ns = if p.poll_ns == 0 {
                INTEREST_POLL_FIRST_NS
            } else {
                (p.poll_ns * 2).min(INTEREST_POLL_NS)
            };
            p.retry_at = now.saturating_add(p.poll_ns);
        }
    }

    // ---------------------------------------------------------------- delivery

    /// Delivers whatever can be delivered now. Returns stream sequences that became done
    /// without an ack (ack policy none), for retention.
    pub fn deliver(
        &mut self,
        stream: &str,
        store: &dyn StreamStore,
        out: &mut Effects,
        now: i64,
    ) -> Vec<u64> {
        let mut done = Vec::new();
        let mut budget = 10_000usize;
        let paused = self.paused(now).is_some();
        loop {
            budget = budget.saturating_sub(1);
            if budget == 0 || paused {
                break;
            }
            // Who receives? (`serving`: the waiting pull request's index.)
            let mut serving = 0;
            let target = if let Some(p) = &self.push {
                if p.fc_pending.is_some() {
                    break;
                }
                if !p.bound && p.retry_at > now {
                    break;
                }
                match &self.cfg.deliver_subject {
                    Some(d) => d.clone(),
                    None => break,
                }
            } else {
                match self.next_waiting(store, now) {
                    Some(i) => {
                        serving = i;
                        self.waiting[i].reply.clone()
                    }
                    None => break,
                }
            };
            if self.acks()
                && self.pending.len() as i64 >= self.ack_pending_limit()
                && self.redeliver.is_empty()
            {
                break;
            }
            // What?
            let (msg, redelivery) = match self.pick(store) {
                Some(x) => x,
                None => break,
            };
            if self.cfg.replay_policy == super::config::ReplayPolicy::Original && !redelivery {
                let (t0, w0) = *self.replay_anchor.get_or_insert((msg.ts, now));
                if msg.ts.saturating_sub(t0) > now.saturating_sub(w0) {
                    break;
                }
            }
            let size = (msg.subject.len()
                + msg.headers.as_ref().map_or(0, Bytes::len)
                + msg.payload.len()) as u64;
            if let Some(w) = self.waiting.get(serving) {
                if w.bytes_left.is_some_and(|b| size > b) {
                    if let Some(w) = self.waiting.remove(serving) {
                        out.status(
                            &w.reply,
                            status_block(
                                409,
                                "Message Size Exceeds MaxBytes",
                                &Self::pending_headers(&w),
                            ),
                        );
                    }
                    continue;
                }
            }
            let deliveries = if redelivery {
                self.pending.get(&msg.seq).map_or(1, |p| p.deliveries + 1)
            } else {
                1
            };
            let cseq = self.cseq + 1;
            let pending_after = if redelivery {
                self.num_pending(store)
            } else {
                self.pending_after(store, &msg)
            };
            let ack_subject = AckSubject {
                stream,
                consumer: &self.name,
                delivered: deliveries,
                stream_seq: msg.seq,
                consumer_seq: cseq,
                timestamp: msg.ts,
                pending: pending_after,
            }
            .encode();
            let (headers, payload) = if self.cfg.headers_only {
                (
                    Some(add_headers(
                        msg.headers.as_ref(),
                        &[("Nats-Msg-Size", msg.payload.len().to_string())],
                    )),
                    Bytes::new(),
                )
            } else {
                (msg.headers.clone(), msg.payload.clone())
            };
            let headers = if self.push.is_none() {
                let (pin, at) = self.pin_for(serving, now, out);
                serving = at;
                match pin {
                    Some(id) => Some(add_headers(headers.as_ref(), &[("Nats-Pin-Id", id)])),
                    None => headers,
                }
            } else {
                headers
            };
            let bound = if let Some(p) = &self.push {
                out.send_push(
                    p.bound,
                    &target,
                    &msg.subject,
                    Some(&ack_subject),
                    headers.as_ref(),
                    &payload,
                )
            } else {
                out.send_requester(
                    &target,
                    &msg.subject,
                    Some(&ack_subject),
                    headers.as_ref(),
                    &payload,
                )
            };
            if let Some(p) = &mut self.push {
                Self::note_interest(p, bound, now);
                if !bound {
                    break;
                }
                p.last_sent = now;
                p.fc_bytes += size;
            } else if !bound {
                // The requester went away: drop its request, keep the message.
                self.waiting.remove(serving);
                continue;
            }
            // Delivered.
            self.cseq = cseq;
            self.last_delivery_active = Some(now);
            self.last_activity = now;
            self.dirty = true;
            if redelivery {
                self.redeliver.remove(&msg.seq);
            } else {
                if self.lps.front() == Some(&msg.seq) {
                    self.lps.pop_front();
                } else {
                    self.next_sseq = msg.seq + 1;
                }
                self.delivered_sseq = self.delivered_sseq.max(msg.seq);
            }
            if self.acks() {
                let wait = self.ack_wait_for(deliveries);
                // A redelivery keeps the consumer sequence of the first delivery (as
                // nats-server does): the ack floor is measured against it.
                let first_cseq = if redelivery {
                    self.pending.get(&msg.seq).map_or(cseq, |p| p.cseq)
                } else {
                    cseq
                };
                self.pending.insert(
                    msg.seq,
                    Pending {
                        cseq: first_cseq,
                        ts: msg.ts,
                        deliveries,
                        deadline: now.saturating_add(wait),
                    },
                );
            } else {
                self.floor_cseq = self.cseq;
                self.floor_sseq = self.delivered_sseq;
                done.push(msg.seq);
            }
            if let Some(w) = self.waiting.get_mut(serving) {
                w.batch_left = w.batch_left.saturating_sub(1);
                w.delivered += 1;
                if let Some(b) = &mut w.bytes_left {
                    *b = b.saturating_sub(size);
                }
                w.next_heartbeat = now.saturating_add(w.heartbeat);
                if w.batch_left == 0 {
                    self.waiting.remove(serving);
                }
            }
            let fc_due = self.push.as_ref().is_some_and(|p| {
                self.cfg.flow_control && p.fc_bytes >= FLOW_CONTROL_BYTES && p.fc_pending.is_none()
            });
            if fc_due {
                self.send_flow_control(stream, out);
            }
        }
        // no_wait requests that cannot be filled now end with 404 (or keep waiting for their
        // expiry when they have one and got nothing yet).
        if self.push.is_none() {
            let mut keep = VecDeque::with_capacity(self.waiting.len());
            for w in self.waiting.drain(..) {
                if w.no_wait && (w.delivered > 0 || w.expires_at.is_none()) {
                    out.status(&w.reply, status_block(404, "No Messages", &[]));
                } else {
                    keep.push_back(w);
                }
            }
            self.waiting = keep;
        }
        done
    }

    fn send_flow_control(&mut self, stream: &str, out: &mut Effects) {
        let Some(ds) = self.cfg.deliver_subject.clone() else {
            return;
        };
        if let Some(p) = &mut self.push {
            p.fc_counter += 1;
            let subject = format!("$JS.FC.{stream}.{}.{}", self.name, p.fc_counter);
            let hdr = status_block(100, "FlowControl Request", &[]);
            out.send(&ds, &ds, Some(&subject), Some(&hdr), &Bytes::new());
            p.fc_pending = Some(subject);
        }
    }

    /// Pending count after delivering `msg` for the first time.
    fn pending_after(&self, store: &dyn StreamStore, msg: &StoredMsg) -> u64 {
        if self.lps.front() == Some(&msg.seq) {
            let lps_left = self.lps.len().saturating_sub(1) as u64;
            return lps_left + self.count_new(store, self.next_sseq);
        }
        self.count_new(store, msg.seq + 1) + self.lps.len() as u64
    }

    fn count_new(&self, store: &dyn StreamStore, from: u64) -> u64 {
        if self.filters.len() <= 1 {
            let f = self.filters.first().map_or(">", String::as_str);
            store.count_from(from, f)
        } else {
            self.filters.iter().map(|f| store.count_from(from, f)).sum()
        }
    }

    /// The next message to deliver: a due redelivery, then the last-per-subject set, then
    /// the next new matching message.
    fn pick(&mut self, store: &dyn StreamStore) -> Option<(StoredMsg, bool)> {
        while let Some(seq) = self.redeliver.iter().next().copied() {
            match store.get(seq) {
                Ok(Some(m)) => return Some((m, true)),
                Ok(None) => {
                    // Removed from the stream meanwhile: nothing left to redeliver.
                    self.redeliver.remove(&seq);
                    self.pending.remove(&seq);
                }
                // A read that failed is not a removal: the message stays pending and is
                // tried again on the next round.
                Err(e) => {
                    tracing::warn!(consumer = %self.name, seq, error = %e, "redelivery read failed");
                    return None;
                }
            }
        }
        while let Some(seq) = self.lps.front().copied() {
            match store.get(seq) {
                Ok(Some(m)) => return Some((m, false)),
                Ok(None) => {
                    self.lps.pop_front();
                }
                Err(e) => {
                    tracing::warn!(consumer = %self.name, seq, error = %e, "delivery read failed");
                    return None;
                }
            }
        }
        let m = self.next_matching(store, self.next_sseq)?;
        Some((m, false))
    }

    /// Drops pending entries for messages the stream no longer has (purged, removed by
    /// limits) so they do not hold the ack floor down.
    pub fn forget_removed(&mut self, store: &dyn StreamStore) {
        let first = store.state().first_seq;
        self.exhausted = self.exhausted.split_off(&first);
        let gone: Vec<u64> = self.pending.range(..first).map(|(s, _)| *s).collect();
        for s in gone {
            self.pending.remove(&s);
            self.redeliver.remove(&s);
        }
        if self.next_sseq < first && self.lps.is_empty() {
            // Messages this consumer never saw were removed: it moves past them, as if they
            // had been delivered and acked (what nats-server reports).
            self.next_sseq = first;
            self.delivered_sseq = self.delivered_sseq.max(first - 1);
        }
        if self.pending.is_empty() && self.floor_sseq < self.delivered_sseq {
            self.floor_sseq = self.delivered_sseq;
            self.floor_cseq = self.cseq;
        }
    }
}

/// `-NAK` delay: `{"delay": ns}` or a Go duration. `None`: redeliver now.
fn parse_nak_delay(rest: &str) -> Option<i64> {
    if rest.is_empty() {
        return None;
    }
    if rest.starts_with('{') {
        let v: Value = serde_json::from_str(rest).ok()?;
        return v.get("delay").and_then(Value::as_i64);
    }
    parse_go_duration(rest)
}

/// The shortest interval between a pull request's idle heartbeats (the push consumers'
/// minimum, `100ms`). nats-server has none and sends one per millisecond for a 1 ns request;
/// without this floor a handful of such requests kept a stream thread busy sending heartbeats
/// (862 MB in 5 s). Clients use heartbeats to detect a dead server, in seconds.
pub const MIN_PULL_HEARTBEAT_NS: i64 = 100_000_000;

/// A pull request's heartbeat interval with the floor applied (0: none).
fn pull_heartbeat(requested: i64) -> i64 {
    if requested > 0 {
        requested.max(MIN_PULL_HEARTBEAT_NS)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn pull_heartbeats_have_a_floor() {
        assert_eq!(pull_heartbeat(0), 0);
        assert_eq!(pull_heartbeat(1), MIN_PULL_HEARTBEAT_NS);
        assert_eq!(pull_heartbeat(5_000_000_000), 5_000_000_000);
    }

    #[test]
    fn unlimited_ack_pending_runs_under_the_ceiling() {
        assert_eq!(ack_pending_limit(-1), ACK_PENDING_CEILING);
        assert_eq!(ack_pending_limit(0), ACK_PENDING_CEILING);
        assert_eq!(ack_pending_limit(20), 20);
        assert_eq!(ack_pending_limit(i64::MAX), ACK_PENDING_CEILING);
    }

    #[test]
    fn nak_delay_forms() {
        assert_eq!(parse_nak_delay(""), None);
        assert_eq!(parse_nak_delay(r#"{"delay":200000000}"#), Some(200_000_000));
        assert_eq!(parse_nak_delay("2s"), Some(2_000_000_000));
    }

    #[test]
    fn status_and_extra_headers() {
        let b = status_block(404, "No Messages", &[]);
        assert_eq!(&b[..], b"NATS/1.0 404 No Messages\r\n\r\n");
        let stored = Bytes::from_static(b"NATS/1.0\r\nX-A: 1\r\n\r\n");
        let h = add_headers(Some(&stored), &[("Nats-Stream", "D".into())]);
        assert_eq!(&h[..], b"NATS/1.0\r\nX-A: 1\r\nNats-Stream: D\r\n\r\n");
        let h = add_headers(None, &[("Nats-Msg-Size", "0".into())]);
        assert_eq!(&h[..], b"NATS/1.0\r\nNats-Msg-Size: 0\r\n\r\n");
    }
}
