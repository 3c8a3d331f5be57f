//! One stream: its store, the publish rules in front of it, and its consumers.
//!
//! Publishes arrive in batches (everything that queued up while the previous commit was
//! being fsynced). Plain messages of a batch go to the store as **one** append — one sealed
//! block, one fsync — and their pub-acks are sent only after it returns: that is the group
//! commit. A message whose checks depend on the exact state before it (expected-sequence
//! headers, rollup, TTL) first flushes what is queued, then is checked and stored on its own.
//!
//! Retention: `limits` removes only by limits; `workqueue` removes a message once a consumer
//! acked it; `interest` once every consumer whose filter takes it has acked it (and at once
//! when no consumer takes it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use data_encoding::BASE64;
use serde_json::{json, Value};

use super::ack_subject::AckSubject;
use super::api::types::{
    ClusterInfo, ConsumerInfo, ConsumerResetReply, ConsumerResetRequest, MsgGetRequest, Paged,
    StreamInfo, StreamInfoRequest, StreamState, SUBJECTS_PAGE,
};
use super::api::ApiError;
use super::batch::{self, Batches};
use super::config::{
    parse_pull_request, resolve_consumer_name, Action, CreateConsumerRequest, DiscardPolicy,
    Retention, StreamConfig,
};
use super::consumer::{add_headers, status_block, AckEffect, Consumer};
use super::dedupe::Dedupe;
use super::fast_batch::{self, Admit, FastBatches};
use super::image::{ImageError, ImageIncoming, ImageMsg, StreamImage};
use super::schedule::{self, Pattern};
use super::source::{self, SourceBatch, SourceLink};
use super::Effects;
use crate::proto::headers::HeaderMap;
use crate::store::{
    AppendRejected, Discard, NewMsg, PurgeRequest, StoreError, StoreLimits, StreamStore,
};
use crate::subject::transform::Transform;
use crate::timefmt::{parse_msg_ttl, rfc3339_nanos};

/// A message published to one of the stream's subjects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// Subject.
    pub subject: String,
    /// Reply subject (the pub-ack goes there).
    pub reply: Option<String>,
    /// Header block.
    pub headers: Option<Bytes>,
    /// Payload.
    pub payload: Bytes,
}

impl Incoming {
    /// The bytes it holds (subject, reply, headers, payload): what it costs queued or staged.
    pub fn size(&self) -> usize {
        self.subject.len()
            + self.reply.as_ref().map_or(0, String::len)
            + self.headers.as_ref().map_or(0, Bytes::len)
            + self.payload.len()
    }
}

// A staged publish in a snapshot's image and back (here, so the image knows nothing of
// the stream: see `image.rs`).
impl From<Incoming> for ImageIncoming {
    fn from(m: Incoming) -> Self {
        ImageIncoming {
            subject: m.subject,
            reply: m.reply,
            headers: m.headers.map(|h| h.to_vec()),
            payload: m.payload.to_vec(),
        }
    }
}

impl From<ImageIncoming> for Incoming {
    fn from(m: ImageIncoming) -> Self {
        Incoming {
            subject: m.subject,
            reply: m.reply,
            headers: m.headers.map(Bytes::from),
            payload: Bytes::from(m.payload),
        }
    }
}

/// What a consumer-create request's subject names (see
/// [`resolve_consumer_name`](super::config::resolve_consumer_name)).
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateSubject<'a> {
    /// The consumer name in the subject (`CONSUMER.CREATE.<S>.<C>`), if any.
    pub consumer: Option<&'a str>,
    /// The filter tokens after it (`CONSUMER.CREATE.<S>.<C>.<filter…>`), if any.
    pub filter: Option<&'a str>,
    /// The legacy form `CONSUMER.DURABLE.CREATE.<S>.<C>`.
    pub legacy_durable: bool,
}

/// The store limits a stream config asks for.
pub fn store_limits(cfg: &StreamConfig) -> StoreLimits {
    let pos = |v: i64| u64::try_from(v).ok().filter(|v| *v > 0);
    StoreLimits {
        max_msgs: pos(cfg.max_msgs),
        max_bytes: pos(cfg.max_bytes),
        max_age: pos(cfg.max_age).map(Duration::from_nanos),
        max_msgs_per_subject: pos(cfg.max_msgs_per_subject),
        max_msg_size: pos(cfg.max_msg_size),
        discard: match cfg.discard {
            DiscardPolicy::Old => Discard::Old,
            DiscardPolicy::New => Discard::New,
        },
        discard_new_per_subject: cfg.discard_new_per_subject,
    }
}

fn pub_ack(stream: &str, seq: u64, duplicate: bool) -> Bytes {
    pub_ack_with(stream, seq, duplicate, None)
}

/// A pub-ack; `val` is a counter stream's new total.
fn pub_ack_with(stream: &str, seq: u64, duplicate: bool, val: Option<&str>) -> Bytes {
    let mut s = format!("{{\"stream\":{},\"seq\":{seq}", json!(stream));
    if duplicate {
        s.push_str(",\"duplicate\": true");
    }
    if let Some(v) = val {
        s.push_str(",\"val\":");
        s.push_str(&json!(v).to_string());
    }
    s.push('}');
    Bytes::from(s)
}

/// Most sequences one tick reads to find the subjects `max_age` removes (for delete markers).
const MARKER_SCAN: u64 = 100_000;

/// A delete marker the server placed (it carries `Nats-Marker-Reason`).
fn is_marker(m: &crate::store::StoredMsg) -> bool {
    m.headers
        .as_ref()
        .and_then(|h| HeaderMap::parse(h).ok())
        .is_some_and(|h| h.get("Nats-Marker-Reason").is_some())
}

/// A `Nats-Incr` value: a signed integer (`+5`, `-2`). Totals are 128-bit: beyond ±1.7e38
/// an increment is refused as invalid (nats-server's counters are unbounded).
fn parse_incr(v: &str) -> Option<i128> {
    v.trim().parse().ok()
}

/// A counter message's total (`{"val":"N"}`); 0 when there is none.
fn counter_value(payload: &[u8]) -> i128 {
    #[derive(serde::Deserialize)]
    struct Counter {
        val: String,
    }
    serde_json::from_slice::<Counter>(payload)
        .ok()
        .and_then(|c| c.val.parse().ok())
        .unwrap_or(0)
}

fn pub_err(stream: &str, e: &ApiError) -> Bytes {
    Bytes::from(json!({"error": e.to_json(), "stream": stream, "seq": 0}).to_string())
}

fn rejected(r: AppendRejected) -> ApiError {
    match r {
        AppendRejected::MaxMsgs => ApiError::max_msgs_exceeded(),
        AppendRejected::MaxBytes => ApiError::max_bytes_exceeded(),
        AppendRejected::MaxMsgsPerSubject => ApiError::max_msgs_per_subject_exceeded(),
        AppendRejected::MaxMsgSize => ApiError::msg_too_large(),
        AppendRejected::InvalidSubject => ApiError::bad_request(),
    }
}

/// A store failure as clients see it.
pub fn store_failed(e: &StoreError) -> ApiError {
    match e {
        StoreError::DiskFull { .. } => ApiError::insufficient_storage(),
        other => ApiError::new(503, 10077, other.to_string()),
    }
}

/// One stream.
pub struct Stream {
    /// Normalised config.
    pub cfg: StreamConfig,
    /// Creation time (unix nanos).
    pub created: i64,
    store: Box<dyn StreamStore>,
    dedupe: Dedupe,
    /// Consumers by name.
    pub consumers: BTreeMap<String, Consumer>,
    ttl: BTreeSet<(i64, u64)>,
    /// Set after a fatal store error: the stream refuses writes until restart.
    offline: Option<String>,
    server_name: String,
    /// The origins a mirror or sourcing stream copies from (see [`super::source`]).
    links: Vec<SourceLink>,
    /// The stream's own `subject_transform`, compiled.
    transform: Option<Transform>,
    /// Atomic batches being staged (`allow_atomic`).
    batches: Batches<Incoming>,
    /// Fast-ingest batches open (`allow_batched`).
    fast: FastBatches,
    /// Armed message schedules (`allow_msg_schedules`).
    schedules: schedule::Armed,
}

/// Where a fast-ingest message sits in its batch: its answer is a flow ack, a gap or an error
/// report rather than a pub-ack (see [`fast_batch`]).
#[derive(Debug, Clone)]
struct FastMark {
    batch: String,
    seq: u64,
    /// It is the batch's commit message.
    commit: bool,
}

/// What a publish carries in its headers that matters here.
#[derive(Default)]
struct PubHeaders {
    msg_id: Option<String>,
    expected_last_seq: Option<u64>,
    expected_last_subj_seq: Option<u64>,
    expected_last_subj_seq_subject: Option<String>,
    expected_last_msg_id: Option<String>,
    rollup: Option<String>,
    ttl: Option<String>,
    /// `Nats-Incr` (counter streams).
    incr: Option<String>,
    /// `Nats-Schedule`: the message is a schedule.
    schedule: bool,
    /// For a published schedule, its pattern as the checks read it (set by
    /// [`Stream::publish`] from [`Stream::precheck`], so it is parsed once).
    pattern: Option<Pattern>,
    bad: bool,
}

impl PubHeaders {
    fn parse(block: Option<&Bytes>) -> Self {
        let Some(b) = block else {
            return PubHeaders::default();
        };
        let Ok(map) = HeaderMap::parse(b) else {
            return PubHeaders {
                bad: true,
                ..PubHeaders::default()
            };
        };
        let get = |n: &str| map.get(n).map(str::to_owned);
        let num = |n: &str| map.get(n).and_then(|v| v.trim().parse::<u64>().ok());
        PubHeaders {
            msg_id: get("Nats-Msg-Id").filter(|s| !s.is_empty()),
            expected_last_seq: num("Nats-Expected-Last-Sequence"),
            expected_last_subj_seq: num("Nats-Expected-Last-Subject-Sequence"),
            expected_last_subj_seq_subject: get("Nats-Expected-Last-Subject-Sequence-Subject"),
            expected_last_msg_id: get("Nats-Expected-Last-Msg-Id"),
            rollup: get("Nats-Rollup"),
            ttl: get("Nats-TTL"),
            incr: get("Nats-Incr"),
            schedule: map.get(schedule::SCHEDULE).is_some(),
            pattern: None,
            bad: false,
        }
    }

    /// Whether checks need the exact state right before this message.
    fn strict(&self) -> bool {
        self.expected_last_seq.is_some()
            || self.expected_last_subj_seq.is_some()
            || self.expected_last_msg_id.is_some()
            || self.rollup.is_some()
            || self.ttl.is_some()
            || self.incr.is_some()
    }
}

/// A message queued for the next group commit.
struct Queued {
    msg: NewMsg,
    reply: Option<String>,
    msg_id: Option<String>,
    /// Index of an earlier message in this batch with the same id (this one is a duplicate).
    dup_of: Option<usize>,
    /// A counter stream's new total, for the pub-ack.
    val: Option<String>,
    /// Set for a fast-ingest message.
    fast: Option<FastMark>,
}

impl Queued {
    /// `m` queued with no reply of its own (a batch member, a message the server publishes).
    fn unanswered(m: Incoming, msg_id: Option<String>) -> Self {
        Queued {
            msg: NewMsg {
                subject: m.subject,
                headers: m.headers,
                payload: m.payload,
                ..NewMsg::default()
            },
            reply: None,
            msg_id,
            dup_of: None,
            val: None,
            fast: None,
        }
    }
}

/// A stream's image taken at one moment, written later on any thread
/// ([`Stream::detached_image`]).
pub struct DetachedImage {
    head: StreamImage,
    messages: crate::store::file_store::FrozenMessages,
}

impl std::fmt::Debug for DetachedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DetachedImage")
            .field("stream", &self.head.cfg.name)
            .field("messages", &self.messages)
            .finish_non_exhaustive()
    }
}

impl DetachedImage {
    /// Writes the image (the same bytes [`Stream::write_image`] wrote at its moment).
    ///
    /// # Errors
    /// Writing, or a block of the store that does not read or authenticate.
    pub fn write(&self, w: &mut dyn std::io::Write) -> Result<(), ImageError> {
        let mut out = super::image::ImageWriter::head(w, &self.head)?;
        self.messages.for_each(|m| {
            out.message(&super::image::ImageMsgRef {
                seq: m.seq,
                ts: m.ts,
                subject: &m.subject,
                headers: m.headers.as_deref(),
                payload: &m.payload,
            })
            .map_err(ImageError::from)
        })?;
        out.end()?;
        Ok(())
    }
}

impl Stream {
    /// A stream over `store` (already opened). Rebuilds the dedupe window and TTL timers from
    /// the stored messages.
    pub fn new(
        cfg: StreamConfig,
        created: i64,
        store: Box<dyn StreamStore>,
        server_name: &str,
        now: i64,
    ) -> Self {
        let mut s = Stream {
            cfg,
            created,
            store,
            dedupe: Dedupe::default(),
            consumers: BTreeMap::new(),
            ttl: BTreeSet::new(),
            offline: None,
            server_name: server_name.to_owned(),
            links: Vec::new(),
            transform: None,
            batches: Batches::default(),
            fast: FastBatches::default(),
            schedules: schedule::Armed::default(),
        };
        s.relink();
        s.rebuild(now);
        source::positions(&mut s.links, s.store.as_ref());
        s
    }

    /// Builds the source links and the subject transform from the config, keeping the
    /// positions of links that copy the same as before.
    fn relink(&mut self) {
        self.links = source::links_for(self.cfg.mirror.as_ref(), &self.cfg.sources, &self.links);
        self.transform = self
            .cfg
            .subject_transform
            .as_ref()
            .and_then(|t| t.compile().ok());
    }

    // ------------------------------------------------------------------ sources

    /// The origins this stream copies from.
    pub fn source_links(&self) -> &[SourceLink] {
        &self.links
    }

    /// Records why link `idx` could not read its origin (its stream info shows it).
    pub fn source_failed(&mut self, idx: usize, e: ApiError) {
        if let Some(l) = self.links.get_mut(idx) {
            l.error = Some(e);
        }
    }

    /// Stores what link `idx` read from its origin, as one commit (a mirror at the origin's
    /// sequences and times, a source with its `Nats-Stream-Source` header at the next
    /// sequences), and moves the link past what was read.
    pub fn take_sourced(&mut self, idx: usize, batch: SourceBatch, out: &mut Effects, now: i64) {
        let Some(link) = self.links.get(idx) else {
            return;
        };
        let mirror = link.mirror;
        let mut queue = Vec::with_capacity(batch.msgs.len());
        let mut last_copied = link.last_copied;
        // A batch read again (a replicated stream's round applied twice over one position)
        // stores nothing twice: what is behind the link is passed over.
        let from = link.next_seq;
        for m in batch.msgs.iter().filter(|m| m.seq >= from) {
            let Some((subject, headers)) = link.copy_of(m) else {
                continue;
            };
            let msg_id = if mirror || self.cfg.duplicate_window == 0 {
                None
            } else {
                PubHeaders::parse(headers.as_ref()).msg_id
            };
            last_copied = m.seq;
            if msg_id
                .as_ref()
                .is_some_and(|id| self.dedupe.get(id).is_some())
            {
                continue;
            }
            queue.push(Queued {
                msg: NewMsg {
                    subject,
                    headers,
                    payload: m.payload.clone(),
                    seq: mirror.then_some(m.seq),
                    ts: mirror.then_some(m.ts),
                },
                reply: None,
                msg_id,
                dup_of: None,
                val: None,
                fast: None,
            });
        }
        if self.offline.is_some() {
            return;
        }
        self.flush(&mut queue, out, now);
        if self.offline.is_some() {
            return;
        }
        if let Some(l) = self.links.get_mut(idx) {
            l.next_seq = l.next_seq.max(batch.scanned_to + 1);
            l.last_copied = last_copied;
            if last_copied > 0 {
                l.not_before = None;
            }
            l.last_contact = Some(now);
            l.lag = batch.origin_last.saturating_sub(batch.scanned_to);
            l.error = None;
        }
    }

    fn rebuild(&mut self, now: i64) {
        self.dedupe.clear();
        let st = self.store.state();
        if st.msgs == 0 {
            return;
        }
        let window = self.cfg.duplicate_window;
        let mut found = Vec::new();
        let mut seq = st.last_seq;
        while seq >= st.first_seq && seq > 0 {
            if let Ok(Some(m)) = self.store.get(seq) {
                if m.ts < now.saturating_sub(window)
                    && !self.cfg.allow_msg_ttl
                    && !self.cfg.allow_msg_schedules
                {
                    break;
                }
                let h = PubHeaders::parse(m.headers.as_ref());
                if m.ts >= now.saturating_sub(window) {
                    if let Some(id) = h.msg_id {
                        found.push((id, m.seq, m.ts));
                    }
                }
                if let Some(t) = h.ttl.as_deref().and_then(parse_msg_ttl) {
                    if t > 0 {
                        self.ttl.insert((m.ts.saturating_add(t), m.seq));
                    }
                }
                // The newest schedule on a subject is the one in force (scanning backwards,
                // it is met first).
                if h.schedule && !self.schedules.contains(&m.subject) {
                    self.arm_schedule(&m.subject, m.seq, m.headers.as_ref(), now);
                }
            }
            seq -= 1;
        }
        for (id, seq, ts) in found.into_iter().rev() {
            self.dedupe.insert(id, seq, ts);
        }
    }

    /// The stream's whole engine state, its messages included, in memory (tests; a
    /// snapshot is written with [`Stream::write_image`]).
    ///
    /// # Errors
    /// A store error while reading its messages.
    pub fn image(&self) -> Result<StreamImage, ImageError> {
        let mut image = self.image_head();
        let mut messages = Vec::new();
        self.each_message(&image, |m| {
            messages.push(ImageMsg::from(&m));
            Ok(())
        })?;
        image.messages = messages;
        Ok(image)
    }

    /// Calls `f` with every stored message from `head`'s first to its last sequence.
    fn each_message(
        &self,
        head: &StreamImage,
        mut f: impl FnMut(super::image::ImageMsgRef<'_>) -> Result<(), ImageError>,
    ) -> Result<(), ImageError> {
        let mut seq = head.first_seq.max(1);
        while seq <= head.last_seq {
            let Some(m) = self.store.next_by_subject(seq, ">")? else {
                break;
            };
            seq = m.seq + 1;
            f(super::image::ImageMsgRef {
                seq: m.seq,
                ts: m.ts,
                subject: &m.subject,
                headers: m.headers.as_deref(),
                payload: &m.payload,
            })?;
        }
        Ok(())
    }

    /// Writes the stream's whole engine state into `w` (a replicated stream's snapshot: see
    /// [`super::image`]): the head, then each message as the store gives it, so memory
    /// holds one message at a time whatever the stream's size.
    ///
    /// # Errors
    /// A store error while reading its messages; I/O.
    pub fn write_image(&self, w: &mut dyn std::io::Write) -> Result<(), ImageError> {
        let head = self.image_head();
        let mut out = super::image::ImageWriter::head(w, &head)?;
        self.each_message(&head, |m| Ok(out.message(&m)?))?;
        out.end()?;
        Ok(())
    }

    /// The stream's image as it is now, to be written on another thread while the stream goes
    /// on ([`DetachedImage::write`] writes what [`Stream::write_image`] would have written
    /// now). `None`: the store cannot be read apart from the stream (memory); write the image
    /// in place.
    ///
    /// # Errors
    /// The store's.
    pub fn detached_image(&self) -> Result<Option<DetachedImage>, ImageError> {
        let Some(messages) = self.store.frozen()? else {
            return Ok(None);
        };
        Ok(Some(DetachedImage {
            head: self.image_head(),
            messages,
        }))
    }

    /// Everything of the stream's engine state but its messages.
    fn image_head(&self) -> StreamImage {
        let st = self.store.state();
        StreamImage {
            cfg: self.cfg.clone(),
            created: self.created,
            first_seq: st.first_seq,
            last_seq: st.last_seq,
            last_ts: st.last_ts,
            messages: Vec::new(),
            dedupe: self.dedupe.entries(),
            ttl: self.ttl.iter().copied().collect(),
            consumers: self.consumers.values().cloned().collect(),
            batches: self
                .batches
                .export()
                .into_iter()
                .map(|(id, msgs, bytes, at)| {
                    (
                        id,
                        msgs.into_iter().map(ImageIncoming::from).collect(),
                        bytes,
                        at,
                    )
                })
                .collect(),
            fast: self.fast.export(),
            schedules: self.schedules.export(),
            offline: self.offline.clone(),
            extras: super::image::ImageExtras {
                pull_holds: self
                    .consumers
                    .values()
                    .flat_map(|c| {
                        c.pull_holds()
                            .into_iter()
                            .map(|(i, until)| (c.name.clone(), i, until))
                    })
                    .collect(),
            },
            sourcing: super::image::ImageSourcing {
                links: self
                    .links
                    .iter()
                    .map(|l| super::image::LinkPosition {
                        origin: l.cfg.name.clone(),
                        mirror: l.mirror,
                        next_seq: l.next_seq,
                        last_copied: l.last_copied,
                    })
                    .collect(),
            },
        }
    }

    /// A stream started from `image` over `store`, which must be empty: the image's messages
    /// at their sequences and times, then its state as it was.
    ///
    /// # Errors
    /// The store refused a message, or came out with other sequences than the image's.
    pub fn from_image(
        mut image: StreamImage,
        store: Box<dyn StreamStore>,
        server_name: &str,
        now: i64,
    ) -> Result<Self, ImageError> {
        let msgs = std::mem::take(&mut image.messages);
        Self::from_image_parts(image, msgs.into_iter().map(Ok), store, server_name, now)
    }

    /// [`Stream::from_image`] from an image's head and its messages as they are read
    /// ([`super::image::read`]): stored a batch at a time, never all in memory.
    ///
    /// # Errors
    /// As [`Stream::from_image`], and a message that does not read.
    pub fn from_image_parts(
        mut image: StreamImage,
        msgs: impl Iterator<Item = Result<ImageMsg, ImageError>>,
        store: Box<dyn StreamStore>,
        server_name: &str,
        now: i64,
    ) -> Result<Self, ImageError> {
        let cfg = image.cfg.clone();
        let mut s = Stream::new(cfg, image.created, store, server_name, now);
        if s.store.state().last_seq != 0 {
            return Err(ImageError::Mismatch("the store is not empty".into()));
        }
        // Stored a batch (one block) at a time: at most 1,024 messages or 1 MiB of them.
        const CHUNK: usize = 1024;
        const CHUNK_BYTES: usize = 1 << 20;
        let mut last_msg = None;
        let mut batch = Vec::with_capacity(CHUNK);
        let mut batch_bytes = 0;
        for m in msgs {
            let m = m?;
            last_msg = Some(m.seq);
            let size = m.subject.len() + m.payload.len() + m.headers.as_ref().map_or(0, Vec::len);
            if batch_bytes + size > CHUNK_BYTES {
                s.restore_batch(&mut batch)?;
                batch_bytes = 0;
            }
            batch_bytes += size;
            batch.push(NewMsg {
                subject: m.subject,
                headers: m.headers.map(Bytes::from),
                payload: Bytes::from(m.payload),
                seq: Some(m.seq),
                ts: Some(m.ts),
            });
            if batch.len() == CHUNK {
                s.restore_batch(&mut batch)?;
                batch_bytes = 0;
            }
        }
        s.restore_batch(&mut batch)?;
        if image.last_seq > last_msg.unwrap_or(0) {
            // The newest messages were deleted: the store still counts their sequences. One
            // placeholder at the last sequence, erased at once, leaves the same state.
            s.restore_batch(&mut vec![NewMsg {
                subject: "$SEALSTREAM.image".into(),
                seq: Some(image.last_seq),
                ts: Some(image.last_ts),
                ..NewMsg::default()
            }])?;
            s.store.delete(image.last_seq, true)?;
        }
        let st = s.store.state();
        if st.last_seq != image.last_seq || (st.msgs > 0 && st.first_seq != image.first_seq) {
            return Err(ImageError::Mismatch(format!(
                "sequences {}..{} where the image has {}..{}",
                st.first_seq, st.last_seq, image.first_seq, image.last_seq
            )));
        }
        s.dedupe.clear();
        for (ts, id, seq) in std::mem::take(&mut image.dedupe) {
            s.dedupe.insert(id, seq, ts);
        }
        s.ttl = image.ttl.iter().copied().collect();
        s.consumers = image.take_consumers();
        for (name, i, until) in std::mem::take(&mut image.extras.pull_holds) {
            if let Some(c) = s.consumers.get_mut(&name) {
                c.restore_pull_holds(&[(i, until)]);
            }
        }
        s.batches = Batches::import(
            std::mem::take(&mut image.batches)
                .into_iter()
                .map(|(id, msgs, bytes, at)| {
                    (
                        id,
                        msgs.into_iter().map(Incoming::from).collect(),
                        bytes,
                        at,
                    )
                })
                .collect(),
        );
        s.fast = FastBatches::import(std::mem::take(&mut image.fast));
        s.schedules = schedule::Armed::default();
        for (subject, seq, at) in &image.schedules {
            s.schedules.arm(subject, *seq, *at);
        }
        s.offline = image.offline.take();
        // Links go on where the image's stood; an image of the earlier format has no
        // positions, and the restored messages tell them as at a start.
        if image.sourcing.links.is_empty() {
            source::positions(&mut s.links, s.store.as_ref());
        }
        for p in &image.sourcing.links {
            if let Some(l) = s
                .links
                .iter_mut()
                .find(|l| l.mirror == p.mirror && l.cfg.name == p.origin)
            {
                l.next_seq = p.next_seq;
                l.last_copied = p.last_copied;
                if p.last_copied > 0 {
                    l.not_before = None;
                }
            }
        }
        Ok(s)
    }

    fn restore_batch(&mut self, batch: &mut Vec<NewMsg>) -> Result<(), ImageError> {
        if batch.is_empty() {
            return Ok(());
        }
        let results = self.store.append_batch(batch)?;
        if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
            return Err(ImageError::Mismatch(format!(
                "a message was refused: {e:?}"
            )));
        }
        batch.clear();
        Ok(())
    }

    /// The store (read-only).
    pub fn store(&self) -> &dyn StreamStore {
        self.store.as_ref()
    }

    /// Starts re-sealing the store under a new data key (see [`StreamStore::reseal_begin`]).
    ///
    /// # Errors
    /// The store's (a fatal one also takes the stream offline).
    pub fn reseal_begin(
        &mut self,
        dek_version: u32,
        dek: crate::crypto::DataKey,
    ) -> Result<Option<Vec<crate::store::file_store::SegmentReseal>>, StoreError> {
        self.store
            .reseal_begin(dek_version, dek)
            .inspect_err(|e| self.note_store_error(e))
    }

    /// Puts a re-sealed segment in place (see [`StreamStore::reseal_install`]).
    ///
    /// # Errors
    /// The store's (a fatal one also takes the stream offline).
    pub fn reseal_install(
        &mut self,
        copy: crate::store::file_store::ResealedSegment,
    ) -> Result<bool, StoreError> {
        self.store
            .reseal_install(copy)
            .inspect_err(|e| self.note_store_error(e))
    }

    /// Ends a re-sealing (see [`StreamStore::reseal_finish`]).
    pub fn reseal_finish(&mut self) -> Vec<u32> {
        self.store.reseal_finish()
    }

    /// Whether a fatal store error took the stream offline.
    pub fn offline(&self) -> Option<&str> {
        self.offline.as_deref()
    }

    fn note_store_error(&mut self, e: &StoreError) {
        if e.is_fatal() && self.offline.is_none() {
            tracing::error!(stream = %self.cfg.name, error = %e, "stream store failed; it refuses writes until restart");
            self.offline = Some(e.to_string());
        }
    }

    // ------------------------------------------------------------------ publish

    /// Stores a batch of publishes and answers each with its pub-ack.
    pub fn publish(&mut self, batch: Vec<Incoming>, out: &mut Effects, now: i64) {
        self.dedupe.prune(now, self.cfg.duplicate_window);
        let mut queue: Vec<Queued> = Vec::new();
        for mut m in batch {
            if let Some(t) = &self.transform {
                if let Some(to) = t.apply(&m.subject) {
                    m.subject = to;
                }
            }
            let fast = match m.reply.as_deref().and_then(fast_batch::parse_reply) {
                None => None,
                Some(r) => match self.admit_fast(r, &mut queue, m.reply.as_deref(), out, now) {
                    Some(mark) => Some(mark),
                    None => continue,
                },
            };
            let pattern = match self.precheck(&mut m, now) {
                Ok(p) => p,
                Err(e) => {
                    self.settle(out, m.reply.as_deref(), fast.as_ref(), Err(e), None);
                    continue;
                }
            };
            let mut h = PubHeaders::parse(m.headers.as_ref());
            h.pattern = pattern;
            if h.bad {
                let e = ApiError::bad_request();
                self.settle(out, m.reply.as_deref(), fast.as_ref(), Err(e), None);
                continue;
            }
            let atomic = if fast.is_some() {
                Ok(batch::Step::None)
            } else {
                batch::step(m.headers.as_ref())
            };
            match atomic {
                Ok(batch::Step::None) => {}
                Ok(batch::Step::Stage { id, seq }) => {
                    let reply = m.reply.clone();
                    let size = m.size();
                    match self.batches.stage(&id, seq, m, size, now) {
                        // Staged: an empty reply (the client's handshake on message 1).
                        Ok(()) => {
                            if let Some(r) = reply {
                                out.reply(&r, Bytes::new());
                            }
                        }
                        Err(e) => self.answer(out, reply.as_deref(), Err(e)),
                    }
                    continue;
                }
                Ok(batch::Step::Commit { id, seq, include }) => {
                    self.flush(&mut queue, out, now);
                    self.commit_batch(
                        &id,
                        seq,
                        include.then_some(m.clone()),
                        m.reply.as_deref(),
                        out,
                        now,
                    );
                    continue;
                }
                Err(e) => {
                    self.answer(out, m.reply.as_deref(), Err(e));
                    continue;
                }
            }
            if let Some(id) = &h.msg_id {
                if let Some(seq) = self.dedupe.get(id) {
                    if fast.is_some() {
                        self.settle(out, m.reply.as_deref(), fast.as_ref(), Ok(seq), None);
                    } else if let Some(r) = m.reply.as_deref() {
                        if !self.cfg.no_ack {
                            out.reply(r, pub_ack(&self.cfg.name, seq, true));
                        }
                    }
                    continue;
                }
            }
            if h.strict() {
                self.flush(&mut queue, out, now);
                self.publish_strict(m, &h, fast, out, now);
                continue;
            }
            let dup_of = h
                .msg_id
                .as_ref()
                .and_then(|id| queue.iter().position(|q| q.msg_id.as_ref() == Some(id)));
            queue.push(Queued {
                msg: NewMsg {
                    subject: m.subject,
                    headers: m.headers,
                    payload: m.payload,
                    ..NewMsg::default()
                },
                reply: m.reply,
                msg_id: h.msg_id,
                dup_of,
                val: None,
                fast,
            });
        }
        self.flush(&mut queue, out, now);
    }

    /// Decides what a fast-ingest message does ([`fast_batch`]): `Some` to go on and store it,
    /// `None` when it has been answered (refused, a ping, the end of its batch).
    fn admit_fast(
        &mut self,
        r: Result<fast_batch::FastReply, ApiError>,
        queue: &mut Vec<Queued>,
        reply: Option<&str>,
        out: &mut Effects,
        now: i64,
    ) -> Option<FastMark> {
        let admitted = r.and_then(|r| {
            if !self.cfg.allow_batched {
                return Err(fast_batch::disabled());
            }
            self.fast.admit(&r, now).map(|a| (r, a))
        });
        let (r, admit) = match admitted {
            Ok(x) => x,
            Err(e) => {
                self.answer(out, reply, Err(e));
                return None;
            }
        };
        let to = reply?;
        match admit {
            Admit::Reply(v) => {
                for b in v {
                    out.reply(to, b);
                }
                None
            }
            Admit::End { before, count } => {
                // What is queued of the batch is stored first: the final ack counts it.
                self.flush(queue, out, now);
                for b in before {
                    out.reply(to, b);
                }
                let last = self.fast.end(&r.batch);
                let last = if last == 0 {
                    self.store.state().last_seq
                } else {
                    last
                };
                out.reply(
                    to,
                    fast_batch::final_ack(&self.cfg.name, last, &r.batch, count),
                );
                None
            }
            Admit::Store { before, then_end } => {
                for b in before {
                    out.reply(to, b);
                }
                Some(FastMark {
                    batch: r.batch,
                    seq: r.seq,
                    commit: then_end,
                })
            }
        }
    }

    /// Answers one publish: a pub-ack (or error) — or, for a fast-ingest message, the flow ack
    /// due, its error report, and the batch's final ack when it was the commit.
    fn settle(
        &mut self,
        out: &mut Effects,
        reply: Option<&str>,
        fast: Option<&FastMark>,
        r: Result<u64, ApiError>,
        val: Option<&str>,
    ) {
        let Some(f) = fast else {
            return self.answer_val(out, reply, r, val);
        };
        let Some(to) = reply else {
            return;
        };
        let stored = r.is_ok();
        match r {
            Ok(seq) => {
                if let Some(ack) = self.fast.stored(&f.batch, f.seq, seq) {
                    out.reply(to, ack);
                }
            }
            Err(e) => out.reply(to, fast_batch::message_error(f.seq, &e)),
        }
        if f.commit {
            let count = if stored { f.seq } else { f.seq - 1 };
            let last = match self.fast.end(&f.batch) {
                0 => self.store.state().last_seq,
                n => n,
            };
            out.reply(
                to,
                fast_batch::final_ack(&self.cfg.name, last, &f.batch, count),
            );
        }
    }

    /// Commits atomic batch `id`: every staged message (and `last`, the commit message, unless
    /// it was `eob`) is checked, then all are stored as one commit — or none, with the error
    /// on the commit's reply. The reply is a pub-ack with `batch` and `count`.
    fn commit_batch(
        &mut self,
        id: &str,
        seq: u64,
        last: Option<Incoming>,
        reply: Option<&str>,
        out: &mut Effects,
        now: i64,
    ) {
        let mut msgs = match self.batches.take(id, seq) {
            Ok(v) => v,
            Err(e) => return self.answer(out, reply, Err(e)),
        };
        msgs.extend(last);
        if msgs.is_empty() {
            return self.answer(out, reply, Err(batch::incomplete()));
        }
        if let Err(e) = self.check_batch(&msgs) {
            return self.answer(out, reply, Err(e));
        }
        let n = msgs.len();
        let mut queue: Vec<Queued> = msgs
            .into_iter()
            .map(|m| {
                let id = PubHeaders::parse(m.headers.as_ref()).msg_id;
                Queued::unanswered(m, id)
            })
            .collect();
        let stored = self.flush(&mut queue, out, now);
        let Some(reply) = reply else { return };
        match stored.last() {
            Some(&(last_seq, _)) if stored.len() == n => {
                if !self.cfg.no_ack {
                    let ack =
                        json!({"stream": self.cfg.name, "seq": last_seq, "batch": id, "count": n});
                    out.reply(reply, Bytes::from(ack.to_string()));
                }
            }
            _ => {
                let e = self
                    .offline
                    .as_ref()
                    .map_or_else(batch::incomplete, |r| ApiError::new(503, 10077, r.clone()));
                self.answer(out, Some(reply), Err(e));
            }
        }
    }

    /// What must hold before a batch is stored, so that the store takes all of it: message
    /// ids new and distinct, `Nats-Expected-Last-Sequence` met in order, the discard-new
    /// limits room for every message. Headers a batch cannot carry here (rollup, TTL,
    /// counters, the per-subject and msg-id expectations) are refused.
    fn check_batch(&self, msgs: &[Incoming]) -> Result<(), ApiError> {
        let st = self.store.state();
        let mut ids = std::collections::HashSet::new();
        let mut bytes = 0u64;
        for (i, m) in msgs.iter().enumerate() {
            let h = PubHeaders::parse(m.headers.as_ref());
            if h.rollup.is_some()
                || h.ttl.is_some()
                || h.incr.is_some()
                || h.expected_last_subj_seq.is_some()
                || h.expected_last_msg_id.is_some()
            {
                return Err(ApiError::new(
                    400,
                    10177,
                    "atomic publish unsupported header used",
                ));
            }
            if let Some(exp) = h.expected_last_seq {
                let last = st.last_seq + i as u64;
                if exp != last {
                    return Err(ApiError::wrong_last_sequence(last));
                }
            }
            if let Some(id) = h.msg_id {
                if self.dedupe.get(&id).is_some() || !ids.insert(id) {
                    return Err(batch::duplicate_id());
                }
            }
            bytes += crate::store::record_size(
                m.subject.len(),
                m.headers.as_ref().map_or(0, Bytes::len),
                m.payload.len(),
            );
        }
        let limits = self.store.limits();
        if limits.discard == crate::store::Discard::New {
            if limits
                .max_msgs
                .is_some_and(|max| st.msgs + msgs.len() as u64 > max)
            {
                return Err(rejected(AppendRejected::MaxMsgs));
            }
            if limits.max_bytes.is_some_and(|max| st.bytes + bytes > max) {
                return Err(rejected(AppendRejected::MaxBytes));
            }
            if limits.discard_new_per_subject && limits.max_msgs_per_subject.is_some() {
                return Err(ApiError::new(
                    400,
                    10177,
                    "atomic publish unsupported header used",
                ));
            }
        }
        Ok(())
    }

    /// Checks that need nothing but the message and the config. A schedule that passes is
    /// given the headers it is stored with ([`schedule::stored_headers`]) and its pattern is
    /// returned.
    fn precheck(&self, m: &mut Incoming, now: i64) -> Result<Option<Pattern>, ApiError> {
        if let Some(reason) = &self.offline {
            return Err(ApiError::new(503, 10077, reason.clone()));
        }
        if self.cfg.sealed {
            return Err(ApiError::stream_sealed());
        }
        let size = m.headers.as_ref().map_or(0, Bytes::len) + m.payload.len();
        if self.cfg.max_msg_size > 0 && size as i64 > self.cfg.max_msg_size {
            return Err(ApiError::msg_too_large());
        }
        self.counter_precheck(m)?;
        let mut pattern = None;
        if let Some(h) = &m.headers {
            if let Ok(map) = HeaderMap::parse(h) {
                if let Some(exp) = map.get("Nats-Expected-Stream") {
                    if exp != self.cfg.name {
                        return Err(ApiError::expected_stream_mismatch());
                    }
                }
                // Batches without `allow_atomic`, and schedules without `allow_msg_schedules`,
                // are refused, never stored as plain messages (a client would take them for
                // committed batches or armed schedules).
                if map.get("Nats-Batch-Id").is_some() && !self.cfg.allow_atomic {
                    return Err(ApiError::atomic_publish_disabled());
                }
                if schedule::has_server_headers(&map) {
                    return Err(schedule::scheduler_invalid());
                }
                if map.get(schedule::SCHEDULE).is_some() {
                    if !self.cfg.allow_msg_schedules {
                        return Err(ApiError::schedules_disabled());
                    }
                    pattern = Some(
                        schedule::parse(&map, &m.subject, &self.schedule_rules(), now)?.pattern,
                    );
                } else if map.get("Nats-Rollup").is_some() && !self.cfg.allow_rollup_hdrs {
                    return Err(ApiError::rollup_not_permitted());
                }
                if let Some(t) = map.get("Nats-TTL") {
                    if !self.cfg.allow_msg_ttl {
                        return Err(ApiError::msg_ttl_disabled());
                    }
                    if parse_msg_ttl(t).is_none() {
                        return Err(ApiError::invalid_msg_ttl());
                    }
                }
                if pattern.is_some() {
                    m.headers = Some(schedule::stored_headers(&map));
                }
            }
        }
        Ok(pattern)
    }

    /// What a schedule on this stream is checked against.
    fn schedule_rules(&self) -> schedule::StreamRules<'_> {
        schedule::StreamRules {
            subjects: &self.cfg.subjects,
            allow_msg_ttl: self.cfg.allow_msg_ttl,
        }
    }

    /// A counter stream takes only `Nats-Incr` publishes without a payload (and without the
    /// headers that would make the total ambiguous); other streams refuse `Nats-Incr`.
    fn counter_precheck(&self, m: &Incoming) -> Result<(), ApiError> {
        let map = m.headers.as_ref().and_then(|h| HeaderMap::parse(h).ok());
        let incr = map.as_ref().and_then(|h| h.get("Nats-Incr"));
        if !self.cfg.allow_msg_counter {
            return match incr {
                Some(_) => Err(ApiError::counters_disabled()),
                None => Ok(()),
            };
        }
        let Some(incr) = incr else {
            return Err(ApiError::counter_incr_missing());
        };
        if !m.payload.is_empty() {
            return Err(ApiError::counter_has_payload());
        }
        let conflicting = map.as_ref().is_some_and(|h| {
            h.get("Nats-Expected-Last-Subject-Sequence").is_some() || h.get("Nats-Rollup").is_some()
        });
        if parse_incr(incr).is_none() || conflicting {
            return Err(ApiError::counter_incr_invalid());
        }
        Ok(())
    }

    fn answer(&self, out: &mut Effects, reply: Option<&str>, r: Result<u64, ApiError>) {
        self.answer_val(out, reply, r, None);
    }

    fn answer_val(
        &self,
        out: &mut Effects,
        reply: Option<&str>,
        r: Result<u64, ApiError>,
        val: Option<&str>,
    ) {
        let Some(reply) = reply else {
            return;
        };
        match r {
            Ok(seq) => {
                if !self.cfg.no_ack {
                    out.reply(reply, pub_ack_with(&self.cfg.name, seq, false, val));
                }
            }
            Err(e) => out.reply(reply, pub_err(&self.cfg.name, &e)),
        }
    }

    /// The checks that need the stream's state right before the message: expected last
    /// sequence, subject sequence and message id. For a counter increment, the payload and
    /// total it is stored with.
    fn strict_checks(
        &self,
        m: &Incoming,
        h: &PubHeaders,
    ) -> Result<Option<(Bytes, String)>, ApiError> {
        let st = self.store.state();
        if let Some(exp) = h.expected_last_seq {
            if exp != st.last_seq {
                return Err(ApiError::wrong_last_sequence(st.last_seq));
            }
        }
        if let Some(exp) = h.expected_last_subj_seq {
            let filter = h
                .expected_last_subj_seq_subject
                .as_deref()
                .unwrap_or(&m.subject);
            let last = self
                .store
                .last_by_subject(filter)
                .map_err(|e| store_failed(&e))?
                .map_or(0, |x| x.seq);
            if exp != last {
                return Err(ApiError::wrong_last_sequence(last));
            }
        }
        if let Some(exp) = &h.expected_last_msg_id {
            let last_id = self
                .store
                .get(st.last_seq)
                .ok()
                .flatten()
                .and_then(|m| PubHeaders::parse(m.headers.as_ref()).msg_id)
                .unwrap_or_default();
            if *exp != last_id {
                return Err(ApiError::wrong_last_msg_id(&last_id));
            }
        }
        let Some(incr) = h.incr.as_deref().and_then(parse_incr) else {
            return Ok(None);
        };
        let prev = self
            .store
            .last_by_subject(&m.subject)
            .map_err(|e| store_failed(&e))?
            .map_or(0, |x| counter_value(&x.payload));
        let total = prev
            .checked_add(incr)
            .ok_or_else(ApiError::counter_incr_invalid)?;
        let text = total.to_string();
        Ok(Some((
            Bytes::from(json!({ "val": text }).to_string()),
            text,
        )))
    }

    fn publish_strict(
        &mut self,
        m: Incoming,
        h: &PubHeaders,
        fast: Option<FastMark>,
        out: &mut Effects,
        now: i64,
    ) {
        let (payload, val) = match self.strict_checks(&m, h) {
            Ok(counted) => counted.map_or((m.payload, None), |(p, v)| (p, Some(v))),
            Err(e) => {
                return self.settle(out, m.reply.as_deref(), fast.as_ref(), Err(e), None);
            }
        };
        let subject = m.subject.clone();
        let mut q = vec![Queued {
            msg: NewMsg {
                subject: m.subject,
                headers: m.headers,
                payload,
                ..NewMsg::default()
            },
            reply: m.reply,
            msg_id: h.msg_id.clone(),
            dup_of: None,
            val,
            fast,
        }];
        let stored = self.flush(&mut q, out, now);
        let Some(&(seq, ts)) = stored.first() else {
            return;
        };
        if let Some(t) = h.ttl.as_deref().and_then(parse_msg_ttl) {
            if t > 0 {
                self.ttl.insert((ts.saturating_add(t), seq));
            }
        }
        if let Some(r) = h.rollup.as_deref() {
            let req = match r {
                "sub" => Some(PurgeRequest {
                    filter: Some(subject.clone()),
                    up_to_seq: Some(seq),
                    keep: None,
                }),
                "all" => Some(PurgeRequest {
                    filter: None,
                    up_to_seq: Some(seq),
                    keep: None,
                }),
                _ => None,
            };
            if let Some(req) = req {
                if let Err(e) = self.store.purge(&req) {
                    self.note_store_error(&e);
                }
                self.after_removal();
            }
        }
        if let Some(at) = h.pattern.as_ref().and_then(|p| p.next_after(now)) {
            self.schedules.arm(&subject, seq, at);
        }
    }

    /// Arms the schedule stored as `seq` on `subject` (its headers were checked when it was
    /// published; one that no longer reads is left unarmed).
    fn arm_schedule(&mut self, subject: &str, seq: u64, headers: Option<&Bytes>, now: i64) {
        let Some(map) = headers.and_then(|h| HeaderMap::parse(h).ok()) else {
            return;
        };
        let Ok(s) = schedule::parse(&map, subject, &self.schedule_rules(), now) else {
            return;
        };
        if let Some(at) = s.pattern.next_after(now) {
            self.schedules.arm(subject, seq, at);
        }
    }

    /// Fires the schedules due by `now`: each publishes into the stream (a copy of itself, or
    /// of its source subject's newest message, on its target); an `@at` schedule is then
    /// removed, the others re-armed. A schedule whose message is gone (deleted, purged,
    /// replaced, expired) is dropped here.
    fn fire_schedules(&mut self, out: &mut Effects, now: i64) {
        while let Some((subject, seq)) = self.schedules.pop_due(now) {
            if self.offline.is_some() {
                return;
            }
            let Ok(Some(msg)) = self.store.get(seq) else {
                continue;
            };
            let Some(map) = msg.headers.as_ref().and_then(|h| HeaderMap::parse(h).ok()) else {
                continue;
            };
            if msg.subject != subject {
                continue;
            }
            let Ok(s) = schedule::parse(&map, &subject, &self.schedule_rules(), now) else {
                continue;
            };
            let next = match s.pattern {
                Pattern::At(_) => None,
                _ => s.pattern.next_after(now),
            };
            // Subject sampling: the source's newest message, or the schedule's own when the
            // source subject has none.
            let sampled = s
                .source
                .as_deref()
                .and_then(|src| self.store.last_by_subject(src).ok().flatten());
            let (base, payload) = match &sampled {
                Some(x) => (x.headers.as_ref(), x.payload.clone()),
                None => (msg.headers.as_ref(), msg.payload.clone()),
            };
            let headers = schedule::fired_headers(base, &subject, &s, next);
            self.publish_internal(
                Incoming {
                    subject: s.target.clone(),
                    reply: None,
                    headers: Some(headers),
                    payload,
                },
                out,
                now,
            );
            match next {
                Some(at) => self.schedules.arm(&subject, seq, at),
                None => {
                    if let Err(e) = self.store.delete(seq, false) {
                        self.note_store_error(&e);
                    }
                    self.after_removal();
                }
            }
        }
    }

    /// Stores a message the server itself publishes into the stream (a fired schedule): the
    /// stream's limits and retention apply, not the client-header rules.
    fn publish_internal(&mut self, m: Incoming, out: &mut Effects, now: i64) {
        let h = PubHeaders::parse(m.headers.as_ref());
        if h.strict() {
            return self.publish_strict(m, &h, None, out, now);
        }
        let mut q = vec![Queued::unanswered(m, None)];
        self.flush(&mut q, out, now);
    }

    /// Sends the copy `republish` asks for of a message just stored as `seq` (`last`: the
    /// subject's previous sequence, 0 for none). It goes out with the batch's pub-acks, after
    /// the commit, like them.
    fn republish(&self, out: &mut Effects, m: &NewMsg, seq: u64, ts: i64, last: u64) {
        let Some(rp) = &self.cfg.republish else {
            return;
        };
        let Some(to) = crate::subject::mapping::transform(m.subject.as_bytes(), &rp.src, &rp.dest)
        else {
            return;
        };
        let to = String::from_utf8_lossy(&to).into_owned();
        let mut fields = vec![
            ("Nats-Stream", self.cfg.name.clone()),
            ("Nats-Subject", m.subject.clone()),
            ("Nats-Sequence", seq.to_string()),
            ("Nats-Time-Stamp", rfc3339_nanos(ts)),
            ("Nats-Last-Sequence", last.to_string()),
        ];
        let payload = if rp.headers_only {
            fields.push(("Nats-Msg-Size", m.payload.len().to_string()));
            Bytes::new()
        } else {
            m.payload.clone()
        };
        let h = add_headers(m.headers.as_ref(), &fields);
        out.send(&to, &to, None, Some(&h), &payload);
    }

    /// Appends the queued messages as one commit and answers them. Returns the (seq, ts) of
    /// each stored message.
    fn flush(&mut self, queue: &mut Vec<Queued>, out: &mut Effects, now: i64) -> Vec<(u64, i64)> {
        if queue.is_empty() {
            return Vec::new();
        }
        let items = std::mem::take(queue);
        // Republishing needs each subject's last sequence before this batch.
        let mut last_of_subject: BTreeMap<String, u64> = BTreeMap::new();
        if self.cfg.republish.is_some() {
            for q in items.iter().filter(|q| q.dup_of.is_none()) {
                if !last_of_subject.contains_key(&q.msg.subject) {
                    let last = self
                        .store
                        .last_by_subject(&q.msg.subject)
                        .ok()
                        .flatten()
                        .map_or(0, |m| m.seq);
                    last_of_subject.insert(q.msg.subject.clone(), last);
                }
            }
        }
        let (fresh_idx, mut msgs): (Vec<usize>, Vec<NewMsg>) = items
            .iter()
            .enumerate()
            .filter(|(_, q)| q.dup_of.is_none())
            .map(|(i, q)| (i, q.msg.clone()))
            .unzip();
        // `first_seq`: a stream that never stored anything starts there.
        if let (Some(first), Some(m)) = (self.cfg.first_seq, msgs.first_mut()) {
            if self.store.state().last_seq == 0 && m.seq.is_none() {
                m.seq = Some(first);
            }
        }
        let results = match self.store.append_batch(&msgs) {
            Ok(r) => r,
            Err(e) => {
                self.note_store_error(&e);
                let err = store_failed(&e);
                for q in &items {
                    self.settle(
                        out,
                        q.reply.as_deref(),
                        q.fast.as_ref(),
                        Err(err.clone()),
                        None,
                    );
                }
                return Vec::new();
            }
        };
        let mut seq_of: Vec<Option<u64>> = vec![None; items.len()];
        let mut stored = Vec::new();
        for (k, r) in results.into_iter().enumerate() {
            let Some(&i) = fresh_idx.get(k) else { continue };
            let Some(q) = items.get(i) else { continue };
            match r {
                Ok(a) => {
                    if let Some(slot) = seq_of.get_mut(i) {
                        *slot = Some(a.seq);
                    }
                    if let Some(id) = &q.msg_id {
                        self.dedupe.insert(id.clone(), a.seq, a.ts);
                    }
                    stored.push((a.seq, a.ts));
                    self.settle(
                        out,
                        q.reply.as_deref(),
                        q.fast.as_ref(),
                        Ok(a.seq),
                        q.val.as_deref(),
                    );
                    if let Some(last) = last_of_subject.get_mut(&q.msg.subject) {
                        self.republish(out, &q.msg, a.seq, a.ts, *last);
                        *last = a.seq;
                    }
                }
                Err(rej) => self.settle(
                    out,
                    q.reply.as_deref(),
                    q.fast.as_ref(),
                    Err(rejected(rej)),
                    None,
                ),
            }
        }
        for q in &items {
            if let Some(orig) = q.dup_of {
                if let (Some(Some(seq)), Some(r)) = (seq_of.get(orig), q.reply.as_deref()) {
                    if q.fast.is_some() {
                        // A fast-ingest duplicate counts as stored (its flow ack, its batch's
                        // final ack when it was the commit).
                        self.settle(out, Some(r), q.fast.as_ref(), Ok(*seq), None);
                    } else if !self.cfg.no_ack {
                        out.reply(r, pub_ack(&self.cfg.name, *seq, true));
                    }
                }
            }
        }
        if self.cfg.retention == Retention::Interest {
            let mut drop = Vec::new();
            for (seq, _) in &stored {
                if let Some(Some(i)) = seq_of.iter().position(|s| *s == Some(*seq)).map(Some) {
                    if let Some(q) = items.get(i) {
                        if !self.consumers.values().any(|c| c.wants(&q.msg.subject)) {
                            drop.push(*seq);
                        }
                    }
                }
            }
            for seq in drop {
                if let Err(e) = self.store.delete(seq, false) {
                    self.note_store_error(&e);
                }
            }
        }
        let _ = now;
        stored
    }

    // ------------------------------------------------------------------ timers

    /// The earliest time [`Stream::tick`] has work.
    pub fn next_deadline(&self) -> Option<i64> {
        let mut d: Option<i64> = None;
        let mut take = |t: i64| d = Some(d.map_or(t, |x: i64| x.min(t)));
        if self.cfg.max_age > 0 {
            let st = self.store.state();
            if st.msgs > 0 {
                take(st.first_ts.saturating_add(self.cfg.max_age));
            }
        }
        if let Some((t, _)) = self.ttl.iter().next() {
            take(*t);
        }
        if let Some(t) = self.batches.next_deadline() {
            take(t);
        }
        if let Some(t) = self.fast.next_deadline() {
            take(t);
        }
        if let Some(t) = self.schedules.next_deadline() {
            take(t);
        }
        for c in self.consumers.values() {
            if let Some(t) = c.next_deadline() {
                take(t);
            }
        }
        d
    }

    /// Expiry by age and TTL, consumer timers, inactive consumer clean-up, then delivery.
    pub fn tick(&mut self, out: &mut Effects, now: i64) {
        self.remove_expired(out, now);
        self.fire_schedules(out, now);
        self.batches.expire(now);
        self.fast.expire(now);
        for c in self.consumers.values_mut() {
            c.tick(out, now);
        }
        let gone: Vec<String> = self
            .consumers
            .iter()
            .filter(|(_, c)| c.expired(now))
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            if let Some(mut c) = self.consumers.remove(&n) {
                c.deleted(out);
                out.forget_consumer(&n);
            }
        }
        self.run_consumers(out, now);
    }

    /// Removes what `max_age` and per-message TTLs have expired by `now` (placing delete
    /// markers when the stream asks for them). Run by every tick, and before a consumer is
    /// created: its info (`num_pending`) must count only messages it will be delivered —
    /// a client that reads until nothing is pending (async-nats' `keys()`) would otherwise
    /// wait for a message the same round removes.
    fn remove_expired(&mut self, out: &mut Effects, now: i64) {
        let mut removed = false;
        // Subjects whose messages age or TTL removes: each left with no message gets a
        // delete marker when the stream asks for them (`subject_delete_marker_ttl`).
        let markers = self.cfg.subject_delete_marker_ttl.is_some();
        let mut emptied: Vec<String> = Vec::new();
        if self.cfg.max_age > 0 && self.offline.is_none() {
            if markers {
                emptied.extend(self.aging_subjects(now));
            }
            match self.store.expire(now) {
                Ok(n) => removed |= n > 0,
                Err(e) => self.note_store_error(&e),
            }
        }
        while let Some(&(t, seq)) = self.ttl.iter().next() {
            if t > now {
                break;
            }
            self.ttl.remove(&(t, seq));
            if markers {
                if let Ok(Some(m)) = self.store.get(seq) {
                    if !is_marker(&m) {
                        emptied.push(m.subject);
                    }
                }
            }
            match self.store.delete(seq, false) {
                Ok(d) => removed |= d,
                Err(e) => self.note_store_error(&e),
            }
        }
        if removed {
            self.after_removal();
        }
        if removed && markers {
            self.place_markers(emptied, out, now);
        }
    }

    /// Subjects of the (non-marker) messages `max_age` is about to remove, oldest first; at
    /// most [`MARKER_SCAN`] sequences are looked at per tick.
    fn aging_subjects(&self, now: i64) -> Vec<String> {
        let st = self.store.state();
        let cutoff = now.saturating_sub(self.cfg.max_age);
        let mut out = Vec::new();
        // Nothing is due (the common tick): no message is read.
        if st.msgs == 0 || st.first_ts > cutoff {
            return out;
        }
        let last = st.last_seq.min(st.first_seq.saturating_add(MARKER_SCAN));
        for seq in st.first_seq..=last {
            match self.store.get(seq) {
                Ok(Some(m)) if m.ts > cutoff => break,
                Ok(Some(m)) if !is_marker(&m) => out.push(m.subject),
                _ => {}
            }
        }
        out
    }

    /// Stores a delete marker (`Nats-Marker-Reason: MaxAge`, `Nats-TTL`, `Nats-Rollup: sub`,
    /// no payload) for each of `subjects` that has no message left, as nats-server does for
    /// messages removed by age or by their TTL. Markers expire by their own TTL and leave no
    /// marker behind.
    fn place_markers(&mut self, mut subjects: Vec<String>, out: &mut Effects, now: i64) {
        let Some(ttl) = self.cfg.subject_delete_marker_ttl else {
            return;
        };
        subjects.sort();
        subjects.dedup();
        let headers = Bytes::from(format!(
            "NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: {}\r\nNats-Rollup: sub\r\n\r\n",
            crate::timefmt::format_go_duration(ttl)
        ));
        let batch: Vec<Incoming> = subjects
            .into_iter()
            .filter(|s| matches!(self.store.last_by_subject(s), Ok(None)))
            .map(|subject| Incoming {
                subject,
                reply: None,
                headers: Some(headers.clone()),
                payload: Bytes::new(),
            })
            .collect();
        self.publish(batch, out, now);
    }

    fn after_removal(&mut self) {
        let store = self.store.as_ref();
        for c in self.consumers.values_mut() {
            c.forget_removed(store);
        }
    }

    /// Lets every consumer deliver what it can; applies retention to what became done.
    pub fn run_consumers(&mut self, out: &mut Effects, now: i64) {
        let name = self.cfg.name.clone();
        let mut done = Vec::new();
        for c in self.consumers.values_mut() {
            done.extend(c.deliver(&name, self.store.as_ref(), out, now));
        }
        if !done.is_empty() {
            self.retire(&done);
        }
    }

    /// Retention: removes messages that are done for every consumer that wants them.
    fn retire(&mut self, seqs: &[u64]) {
        if self.cfg.retention == Retention::Limits || self.offline.is_some() {
            return;
        }
        for &seq in seqs {
            let remove = match self.cfg.retention {
                Retention::Workqueue => true,
                Retention::Interest => match self.store.get(seq) {
                    Ok(Some(m)) => self
                        .consumers
                        .values()
                        .all(|c| c.is_done_with(seq, &m.subject)),
                    _ => false,
                },
                Retention::Limits => false,
            };
            if remove {
                if let Err(e) = self.store.delete(seq, false) {
                    self.note_store_error(&e);
                    return;
                }
            }
        }
    }

    // ------------------------------------------------------------------ acks and pulls

    /// An ack on `$JS.ACK.<stream>.<consumer>...`. Returns whether a reply is owed after the
    /// consumer's state is durable (the driver sends it).
    pub fn ack(
        &mut self,
        subject: &str,
        body: &[u8],
        reply: Option<&str>,
        out: &mut Effects,
        now: i64,
    ) {
        let Some(AckSubject {
            consumer,
            stream_seq: sseq,
            ..
        }) = AckSubject::parse(subject)
        else {
            return;
        };
        let Some(c) = self.consumers.get_mut(consumer) else {
            return;
        };
        let (effect, next) = c.ack(sseq, body, now);
        if let (Some(req), Some(r)) = (next, reply) {
            c.pull_request(req, r, out, now);
        }
        if let AckEffect::Done(seqs) = effect {
            self.retire(&seqs);
        }
    }

    /// A pull request (`CONSUMER.MSG.NEXT`). Unknown consumers get the 503 status, as when
    /// nobody listens.
    pub fn pull(&mut self, consumer: &str, body: &[u8], reply: &str, out: &mut Effects, now: i64) {
        let Some(c) = self.consumers.get_mut(consumer) else {
            let subject = format!("$JS.API.CONSUMER.MSG.NEXT.{}.{consumer}", self.cfg.name);
            out.status(
                reply,
                crate::proto::headers::no_responders_block(subject.as_bytes()),
            );
            return;
        };
        match parse_pull_request(body) {
            Ok(req) => c.pull_request(req, reply, out, now),
            Err(reason) => {
                out.status(
                    reply,
                    status_block(400, &format!("Bad Request - {reason}"), &[]),
                );
            }
        }
    }

    /// Push consumers whose deliver subject `listening` answers differently from what the
    /// stream last recorded: what a replicated stream's leader carries in the round it
    /// proposes, so that every replica decides push deliveries by one answer.
    pub fn push_interest_changes(
        &self,
        listening: &mut dyn FnMut(&str) -> bool,
    ) -> Vec<(String, bool)> {
        let mut asked: HashMap<&str, bool> = HashMap::new();
        let mut changes = Vec::new();
        for (name, c) in &self.consumers {
            let Some((subject, recorded)) = c.push_interest() else {
                continue;
            };
            let now_listened = *asked.entry(subject).or_insert_with(|| listening(subject));
            if recorded != now_listened {
                changes.push((name.clone(), now_listened));
            }
        }
        changes
    }

    /// Takes a replicated round's interest answers (see [`Stream::push_interest_changes`]),
    /// before its inputs: push deliveries then follow the record
    /// ([`Effects::push_by_record`]).
    pub fn take_push_interest(&mut self, answers: &[(String, bool)], now: i64) {
        for (name, listened) in answers {
            if let Some(c) = self.consumers.get_mut(name) {
                c.take_push_interest(*listened, now);
            }
        }
    }

    /// A pull request that reached the stream after the server began a graceful stop: it
    /// ends as a waiting request does then (`409 Server Shutdown`), with what it asked for
    /// still pending — it was sent before the stop and got nothing.
    pub fn pull_at_shutdown(body: &[u8], reply: &str, out: &mut Effects) {
        let req = parse_pull_request(body).unwrap_or_default();
        let h = [
            ("Nats-Pending-Messages", req.batch.max(1).to_string()),
            ("Nats-Pending-Bytes", req.max_bytes.to_string()),
        ];
        out.status(reply, status_block(409, "Server Shutdown", &h));
    }

    /// Flow-control reply on `$JS.FC.<stream>.<consumer>.<n>`.
    pub fn flow_control(&mut self, subject: &str) {
        let consumer = subject.split('.').nth(3).unwrap_or("");
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.flow_control_reply(subject);
        }
    }

    // ------------------------------------------------------------------ stream API

    /// The stream info body (`config`, `created`, `state`, ...). `req` may ask for
    /// `subjects_filter` and `deleted_details`. `cluster` is set: `STREAM.INFO` sends it, the
    /// other replies clear it.
    pub fn info(&self, req: &StreamInfoRequest, now: i64) -> StreamInfo {
        self.info_page(req, now).body
    }

    /// [`Stream::info`] with the paging keys of a `STREAM.INFO` reply: `total` subjects
    /// matched `subjects_filter`, this page lists at most [`SUBJECTS_PAGE`] of them (in
    /// subject order) from `offset`; all three are 0 when no subject matched.
    pub fn info_page(&self, req: &StreamInfoRequest, now: i64) -> Paged<StreamInfo> {
        let mut st = self.store.state();
        if let (Some(first), 0) = (self.cfg.first_seq, st.last_seq) {
            // Nothing stored yet: the stream starts at `first_seq`.
            st.first_seq = first;
            st.last_seq = first - 1;
        }
        let first_seq = if st.msgs == 0 && st.last_seq == 0 {
            0
        } else {
            st.first_seq
        };
        let mut total = 0;
        let subjects = req
            .subjects_filter
            .as_deref()
            .filter(|f| !f.is_empty())
            .map(|f| -> BTreeMap<String, u64> {
                let all = self.store.subjects_state(f);
                total = all.len();
                all.into_iter()
                    .skip(req.offset)
                    .take(SUBJECTS_PAGE)
                    .map(|(s, ss)| (s, ss.msgs))
                    .collect()
            })
            // A filter that matches nothing leaves `subjects` out, as nats-server does.
            .filter(|m| !m.is_empty());
        let deleted = (req.deleted_details && st.num_deleted > 0).then(|| self.deleted_seqs());
        let info = StreamInfo {
            config: self.cfg.clone(),
            created: rfc3339_nanos(self.created),
            state: StreamState {
                messages: st.msgs,
                bytes: st.bytes,
                first_seq,
                first_ts: rfc3339_nanos(if st.msgs == 0 { 0 } else { st.first_ts }),
                last_seq: st.last_seq,
                last_ts: rfc3339_nanos(st.last_ts),
                consumer_count: self.consumers.len(),
                num_subjects: st.num_subjects,
                num_deleted: st.num_deleted,
                subjects,
                deleted,
            },
            cluster: Some(ClusterInfo {
                leader: self.server_name.clone(),
                ..ClusterInfo::default()
            }),
            mirror: self.links.iter().find(|l| l.mirror).map(|l| l.info(now)),
            sources: self
                .links
                .iter()
                .filter(|l| !l.mirror)
                .map(|l| l.info(now))
                .collect(),
            ts: rfc3339_nanos(now),
            did_create: false,
        };
        let (offset, limit) = if total == 0 {
            (0, 0)
        } else {
            (req.offset, SUBJECTS_PAGE)
        };
        Paged {
            total,
            offset,
            limit,
            body: info,
        }
    }

    fn deleted_seqs(&self) -> Vec<u64> {
        let st = self.store.state();
        let mut out = Vec::new();
        let mut expect = st.first_seq;
        let mut seq = st.first_seq;
        while let Ok(Some(m)) = self.store.next_by_subject(seq, ">") {
            out.extend(expect..m.seq);
            expect = m.seq + 1;
            seq = m.seq + 1;
            if out.len() > 100_000 {
                break;
            }
        }
        out
    }

    /// Purge per the request body; returns the reply body.
    ///
    /// # Errors
    /// Sealed stream, deny_purge, bad request, store failures.
    pub fn purge(&mut self, body: Option<&Value>) -> Result<Value, ApiError> {
        if self.cfg.sealed {
            return Err(ApiError::stream_sealed());
        }
        if self.cfg.deny_purge {
            return Err(ApiError::purge_denied());
        }
        let get_u = |k: &str| body.and_then(|b| b.get(k)).and_then(Value::as_u64);
        let filter = body
            .and_then(|b| b.get("filter"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let seq = get_u("seq").filter(|s| *s > 0);
        let keep = get_u("keep").filter(|k| *k > 0);
        if seq.is_some() && keep.is_some() {
            return Err(ApiError::bad_request());
        }
        let req = PurgeRequest {
            filter,
            up_to_seq: seq,
            keep,
        };
        let n = self.store.purge(&req).map_err(|e| {
            self.note_store_error(&e);
            store_failed(&e)
        })?;
        self.after_removal();
        Ok(json!({"success": true, "purged": n}))
    }

    fn find(&self, body: Option<&Value>) -> Result<crate::store::StoredMsg, ApiError> {
        let req: MsgGetRequest = body
            .map(|b| serde_json::from_value(b.clone()))
            .transpose()
            .map_err(|_| ApiError::bad_request())?
            .ok_or_else(ApiError::bad_request)?;
        let r = match (
            req.seq,
            req.last_by_subj.filter(|s| !s.is_empty()),
            req.next_by_subj.filter(|s| !s.is_empty()),
        ) {
            (_, Some(s), None) => self.store.last_by_subject(&s),
            (from, None, Some(s)) => self.store.next_by_subject(from.unwrap_or(0).max(1), &s),
            (Some(seq), None, None) => self.store.get(seq),
            _ => return Err(ApiError::bad_request()),
        };
        r.map_err(|e| store_failed(&e))?
            .ok_or_else(ApiError::no_message_found)
    }

    /// `STREAM.MSG.GET`.
    ///
    /// # Errors
    /// Bad request, no message found.
    pub fn msg_get(&self, body: Option<&Value>) -> Result<Value, ApiError> {
        let m = self.find(body)?;
        let mut msg = json!({"subject": m.subject, "seq": m.seq, "time": rfc3339_nanos(m.ts)});
        if let Some(h) = &m.headers {
            msg["hdrs"] = json!(BASE64.encode(h));
        }
        if !m.payload.is_empty() {
            msg["data"] = json!(BASE64.encode(&m.payload));
        }
        Ok(json!({ "message": msg }))
    }

    /// `DIRECT.GET`: answers with the message itself (or a status) on `reply`.
    pub fn direct_get(
        &self,
        payload: &[u8],
        subject: Option<&str>,
        reply: &str,
        out: &mut Effects,
    ) {
        let found = match subject {
            Some(s) => self
                .store
                .last_by_subject(s)
                .map_err(|e| store_failed(&e))
                .and_then(|m| m.ok_or_else(ApiError::no_message_found)),
            None => match super::api::optional_body(payload) {
                Ok(b) => self.find(b.as_ref()),
                Err(_) => {
                    out.status(reply, status_block(408, "Malformed Request", &[]));
                    return;
                }
            },
        };
        match found {
            Ok(m) => {
                let h = add_headers(
                    m.headers.as_ref(),
                    &[
                        ("Nats-Stream", self.cfg.name.clone()),
                        ("Nats-Subject", m.subject.clone()),
                        ("Nats-Sequence", m.seq.to_string()),
                        ("Nats-Time-Stamp", rfc3339_nanos(m.ts)),
                    ],
                );
                out.send(reply, reply, None, Some(&h), &m.payload);
            }
            Err(e) if e.err_code == ApiError::bad_request().err_code => {
                out.status(reply, status_block(408, "Malformed Request", &[]));
            }
            Err(_) => {
                out.status(reply, status_block(404, "Message Not Found", &[]));
            }
        }
    }

    /// `STREAM.MSG.DELETE`.
    ///
    /// # Errors
    /// Sealed, deny_delete, bad request, not found.
    pub fn msg_delete(&mut self, body: Option<&Value>) -> Result<Value, ApiError> {
        if self.cfg.sealed {
            return Err(ApiError::stream_sealed());
        }
        if self.cfg.deny_delete {
            return Err(ApiError::deny_delete());
        }
        let seq = body
            .and_then(|b| b.get("seq"))
            .and_then(Value::as_u64)
            .ok_or_else(ApiError::bad_request)?;
        let no_erase = body
            .and_then(|b| b.get("no_erase"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if seq > self.store.state().last_seq {
            return Err(ApiError::new(500, 10057, "stream store EOF"));
        }
        let found = self.store.delete(seq, !no_erase).map_err(|e| {
            self.note_store_error(&e);
            store_failed(&e)
        })?;
        if !found {
            return Err(ApiError::msg_delete_not_found());
        }
        self.after_removal();
        Ok(json!({"success": true}))
    }

    /// Applies a validated config update (limits take effect at once).
    ///
    /// # Errors
    /// Store failures applying the new limits.
    pub fn update(&mut self, cfg: StreamConfig, out: &mut Effects) -> Result<(), ApiError> {
        // New consumer limits may not be below what existing consumers already have (as
        // nats-server: `500/10069`, naming them). A durable without an inactivity timer has
        // none to exceed; an unlimited `max_ack_pending` exceeds any cap.
        let lim = &cfg.consumer_limits;
        let over: Vec<&str> = self
            .consumers
            .iter()
            .filter(|(_, c)| {
                let pending = lim
                    .max_ack_pending
                    .is_some_and(|max| c.cfg.max_ack_pending < 0 || c.cfg.max_ack_pending > max);
                let inactive = lim.inactive_threshold.is_some_and(|max| {
                    c.cfg.inactive_threshold > 0 && c.cfg.inactive_threshold > max
                });
                pending || inactive
            })
            .map(|(name, _)| name.as_str())
            .collect();
        if !over.is_empty() {
            return Err(ApiError::consumer_limits_violated(&over));
        }
        let limits = store_limits(&cfg);
        if !cfg.allow_atomic {
            self.batches.clear();
        }
        self.cfg = cfg;
        self.relink();
        let n = self.store.set_limits(limits).map_err(|e| {
            self.note_store_error(&e);
            store_failed(&e)
        })?;
        if n > 0 {
            self.after_removal();
        }
        out.persist_stream_config();
        Ok(())
    }

    /// Interval mode: syncs what was written since the last sync. A failure takes the stream
    /// offline like any write failure.
    pub fn sync_pending(&mut self) {
        if let Err(e) = self.store.sync_pending() {
            self.note_store_error(&e);
        }
    }

    /// Drops the store unsynced: the stream was deleted and its keys are erased.
    pub fn abandon(&mut self) {
        self.store.abandon();
    }

    /// Closes the store (checkpoint) — at shutdown or before deletion.
    pub fn close(&mut self) {
        if let Err(e) = self.store.close() {
            tracing::warn!(stream = %self.cfg.name, error = %e, "closing the stream store failed");
        }
    }

    // ------------------------------------------------------------------ consumer API

    /// Creates or updates a consumer per a create request that arrived on the subject form
    /// `on` names. Returns the consumer info body.
    ///
    /// # Errors
    /// The create/update rules of the consumer API.
    pub fn create_consumer(
        &mut self,
        mut req: CreateConsumerRequest,
        on: CreateSubject<'_>,
        version: &str,
        now: i64,
        out: &mut Effects,
    ) -> Result<ConsumerInfo, ApiError> {
        if !req.stream_name.is_empty() && req.stream_name != self.cfg.name {
            return Err(ApiError::stream_not_found());
        }
        self.remove_expired(out, now);
        let name =
            resolve_consumer_name(&mut req.config, on.consumer, on.filter, on.legacy_durable)?;
        let mut cfg = req.config;
        // An update of a durable that names it only by `name` (the newer clients' update
        // call) is the same durable, as nats-server takes it.
        if cfg.durable_name.is_none() {
            if let Some(existing) = self.consumers.get(&name) {
                if existing.cfg.durable_name.as_deref() == Some(name.as_str()) {
                    cfg.durable_name = Some(name.clone());
                }
            }
        }
        cfg.normalize(&self.cfg, version)?;
        if let Some(existing) = self.consumers.get_mut(&name) {
            if req.action == Action::Create && !existing.cfg.same_as(&cfg) {
                return Err(ApiError::consumer_exists());
            }
            if !existing.cfg.same_as(&cfg) {
                existing.cfg.check_update(&cfg)?;
                existing.update_config(cfg);
                out.persist_consumer(&name);
            }
            let c = &self.consumers[&name];
            return Ok(c.info(&self.cfg.name, self.store.as_ref(), now));
        }
        if req.action == Action::Update {
            return Err(ApiError::consumer_does_not_exist());
        }
        if self.cfg.max_consumers > 0 && self.consumers.len() as i64 >= self.cfg.max_consumers {
            return Err(ApiError::max_consumers());
        }
        if self.cfg.retention == Retention::Workqueue {
            if !cfg.is_push() && cfg.ack_policy != super::config::AckPolicy::Explicit {
                return Err(ApiError::wq_pull_needs_explicit_ack());
            }
            let mine = cfg.filters();
            for other in self.consumers.values() {
                let theirs = other.cfg.filters();
                if mine.is_empty() || theirs.is_empty() {
                    return Err(ApiError::wq_multiple_unfiltered());
                }
                if mine
                    .iter()
                    .any(|a| theirs.iter().any(|b| super::config::subjects_collide(a, b)))
                {
                    return Err(ApiError::wq_filter_not_unique());
                }
            }
        }
        let c = Consumer::new(name.clone(), cfg, now, self.store.as_ref());
        let info = c.info(&self.cfg.name, self.store.as_ref(), now);
        self.consumers.insert(name.clone(), c);
        out.persist_consumer(&name);
        Ok(info)
    }

    /// Adds a consumer restored from the store at startup.
    pub fn restore_consumer(&mut self, c: Consumer) {
        self.consumers.insert(c.name.clone(), c);
    }

    /// `CONSUMER.INFO`.
    ///
    /// # Errors
    /// Consumer not found.
    pub fn consumer_info(&self, name: &str, now: i64) -> Result<ConsumerInfo, ApiError> {
        self.consumers
            .get(name)
            .map(|c| c.info(&self.cfg.name, self.store.as_ref(), now))
            .ok_or_else(ApiError::consumer_not_found)
    }

    /// `CONSUMER.PAUSE`: `{"pause_until": "<RFC 3339>"}` pauses delivery until then; no
    /// body, no `pause_until`, or a time already past resumes it.
    ///
    /// # Errors
    /// Consumer not found; a body that is not JSON, or a `pause_until` that is not RFC 3339.
    pub fn consumer_pause(
        &mut self,
        name: &str,
        body: Option<&Value>,
        now: i64,
        out: &mut Effects,
    ) -> Result<Value, ApiError> {
        let until = match body.and_then(|b| b.get("pause_until")) {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) if t.is_empty() => None,
            Some(Value::String(t)) => match crate::timefmt::parse_rfc3339(t) {
                Some(n) => Some(n),
                None => return Err(ApiError::bad_request()),
            },
            Some(_) => return Err(ApiError::bad_request()),
        };
        let c = self
            .consumers
            .get_mut(name)
            .ok_or_else(ApiError::consumer_not_found)?;
        c.set_pause(until, now);
        let paused = c.paused(now);
        out.persist_consumer(name);
        let mut v = json!({
            "paused": paused.is_some(),
            // nats-server sends Go's zero time when not paused.
            "pause_until": paused.map_or_else(|| "0001-01-01T00:00:00Z".to_owned(), rfc3339_nanos),
        });
        if let Some(t) = paused {
            v["pause_remaining"] = json!(t - now);
        }
        Ok(v)
    }

    /// `CONSUMER.UNPIN`: `{"group": G}` drops the group's pinned client (`pinned_client`);
    /// the reply is an empty success.
    ///
    /// # Errors
    /// `10025` for a body that is not JSON or names no group (nats-server's texts), `10014`
    /// consumer not found, `10160` no such group.
    pub fn consumer_unpin(
        &mut self,
        name: &str,
        body: &[u8],
        out: &mut Effects,
    ) -> Result<Value, ApiError> {
        #[derive(serde::Deserialize)]
        struct Unpin {
            #[serde(default)]
            group: String,
        }
        let req: Unpin = if body.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::invalid_json("unexpected end of JSON input"));
        } else {
            serde_json::from_slice(body).map_err(|e| ApiError::invalid_json(&e.to_string()))?
        };
        if req.group.is_empty() {
            return Err(ApiError::invalid_json("consumer group not specified"));
        }
        let c = self
            .consumers
            .get_mut(name)
            .ok_or_else(ApiError::consumer_not_found)?;
        c.unpin(&req.group, out)?;
        Ok(json!({}))
    }

    /// `CONSUMER.RESET`: the consumer's info after the reset, with `reset_seq`. The request
    /// is empty or `{"seq": N}`.
    ///
    /// # Errors
    /// Consumer not found, invalid JSON (a `seq` that is not an unsigned integer), invalid
    /// reset.
    pub fn consumer_reset(
        &mut self,
        name: &str,
        body: Option<&Value>,
        now: i64,
        out: &mut Effects,
    ) -> Result<Value, ApiError> {
        // Unlike most requests, a `seq` of the wrong type is refused (10025), as nats-server
        // does, rather than read as the default.
        let req: ConsumerResetRequest = match body {
            None => ConsumerResetRequest::default(),
            Some(b) => serde_json::from_value(b.clone())
                .map_err(|e| ApiError::invalid_json(&e.to_string()))?,
        };
        let c = self
            .consumers
            .get_mut(name)
            .ok_or_else(ApiError::consumer_not_found)?;
        let reset_seq = c.reset(req.seq)?;
        out.persist_consumer(name);
        let info = self.consumers[name].info(&self.cfg.name, self.store.as_ref(), now);
        Ok(super::api::body(&ConsumerResetReply { info, reset_seq }))
    }

    /// `CONSUMER.DELETE`.
    ///
    /// # Errors
    /// Consumer not found.
    pub fn consumer_delete(&mut self, name: &str, out: &mut Effects) -> Result<Value, ApiError> {
        let mut c = self
            .consumers
            .remove(name)
            .ok_or_else(ApiError::consumer_not_found)?;
        c.deleted(out);
        out.forget_consumer(name);
        Ok(json!({"success": true}))
    }

    /// `CONSUMER.NAMES` / `CONSUMER.LIST`.
    pub fn consumer_page(&self, offset: usize, list: bool, now: i64) -> Value {
        let total = self.consumers.len();
        let limit = if list { 256 } else { 1024 };
        let page = self.consumers.values().skip(offset).take(limit);
        let consumers: Value = if list {
            let infos: Vec<ConsumerInfo> = page
                .map(|c| c.info(&self.cfg.name, self.store.as_ref(), now))
                .collect();
            serde_json::to_value(infos).unwrap_or(Value::Null)
        } else {
            page.map(|c| Value::String(c.name.clone())).collect()
        };
        json!({"total": total, "offset": offset, "limit": limit, "consumers": consumers})
    }

    /// Bytes and messages stored (account usage).
    pub fn usage(&self) -> (u64, u64) {
        let st = self.store.state();
        (st.bytes, st.msgs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pub_ack_bytes_match_the_reference() {
        assert_eq!(
            &pub_ack("ORDERS", 1, false)[..],
            br#"{"stream":"ORDERS","seq":1}"#
        );
        assert_eq!(
            &pub_ack("ORDERS", 1, true)[..],
            br#"{"stream":"ORDERS","seq":1,"duplicate": true}"#
        );
    }
}
