//! Reading an origin another server holds: a mirror or a sourcing stream whose origin has no
//! copy on this server (an R1 stream of another server of the cluster, or a replicated one
//! without a replica here) asks the origin's host for each batch.
//!
//! Why requests over the account's router: every host of a stream subscribes its entries in
//! the stream's queue group, advertised over routes (see [`gather`](super::gather)); one more
//! entry, `$SEALSTREAM.SOURCE.<stream>`, takes a read, which the origin's store thread
//! answers from its state ([`answer`]: a bounded batch, as a local copier would read it). The
//! copier asks with a reply under an inbox of its own, `$SEALSTREAM.SOURCED.<server>.<n>`,
//! whose subscription hands each answer to the stream's queue as [`Cmd::OriginAnswer`]; the
//! answer is stored (or, on a replicated copier's leader, proposed) like a local read.
//!
//! Bounds: one read in flight per link, asked again when unanswered after [`ANSWER_WAIT_NS`];
//! at most [`REMOTE_BATCH_BYTES`] per answer. A read that finds nothing new waits at the host
//! ([`Parked`]: up to [`PARK_NS`], at most [`MAX_PARKED`] per stream) and is answered as soon
//! as the origin stores something — what a local origin's ring does for its copiers — so a
//! remote mirror follows its origin without polling; an empty answer is asked again after
//! [`POLL_NS`].
//!
//! Trust: a read is answered in the origin's own account with that account's messages, which
//! its users can read through `$JS.API` as well; a user whose permissions do not allow
//! publishing to `$SEALSTREAM.>` cannot send one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::cmd::Cmd;
use super::round;
use super::shard::WeakStreamTx;
use super::sink::RouterSink;
use super::AccountJs;
use crate::jetstream::config::source::StreamSource;
use crate::jetstream::source::{read_batch_within, SourceBatch, SourceLink, BATCH_MSGS};
use crate::jetstream::stream::Stream;
use crate::server::account::{Service, Subscription};
use crate::server::backpressure::Budget;

/// Most bytes one answer carries (a route message, not a store thread's whole round).
pub(crate) const REMOTE_BATCH_BYTES: usize = 1 << 20;
/// A read unanswered for this long is asked again (the host may have gone).
pub(crate) const ANSWER_WAIT_NS: i64 = 3_000_000_000;
/// An origin that had nothing new (its host waited [`PARK_NS`] already) is asked again after
/// this long.
pub(crate) const POLL_NS: i64 = 50_000_000;
/// How long a host keeps a read that found nothing new before it answers it empty.
pub(crate) const PARK_NS: i64 = 1_000_000_000;
/// Reads one stream keeps waiting at most (more are answered at once).
pub(crate) const MAX_PARKED: usize = 256;

/// The subject a host's stream entry takes reads on.
pub(crate) fn read_subject(stream: &str) -> String {
    format!("$SEALSTREAM.SOURCE.{stream}")
}

/// What a copier asks: its link as it stands.
#[derive(Serialize, Deserialize)]
pub(crate) struct Question {
    source: StreamSource,
    mirror: bool,
    next_seq: u64,
    not_before: Option<i64>,
}

/// Reads of this server's streams answered for copiers (`/metrics`:
/// `sealstream_js_source_reads_total`).
pub(crate) static ANSWERED: AtomicU64 = AtomicU64::new(0);
/// Reads waiting for their stream's next message, every stream of this server
/// (`sealstream_js_source_reads_waiting`).
pub(crate) static WAITING: AtomicU64 = AtomicU64::new(0);

/// Reads that found nothing new, waiting at the origin's host for its next message:
/// (reply, question, answered empty at).
#[derive(Default)]
pub(crate) struct Parked(Vec<(String, Question, i64)>);

impl Parked {
    /// Keeps a read until `now` + [`PARK_NS`].
    fn park(&mut self, reply: String, q: Question, now: i64) {
        self.0.push((reply, q, now.saturating_add(PARK_NS)));
        WAITING.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether another read may wait ([`MAX_PARKED`]).
    fn has_room(&self) -> bool {
        self.0.len() < MAX_PARKED
    }

    /// The reads to answer now: all of them when the origin stored something, else those
    /// whose wait is over.
    fn take(&mut self, stored: bool, now: i64) -> Vec<(String, Question)> {
        if self.0.is_empty() {
            return Vec::new();
        }
        let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|(_, _, until)| stored || *until <= now);
        self.0 = stay;
        WAITING.fetch_sub(go.len() as u64, Ordering::Relaxed);
        go.into_iter().map(|(r, q, _)| (r, q)).collect()
    }

    /// When the first wait is over.
    pub(crate) fn next_deadline(&self) -> Option<i64> {
        self.0.iter().map(|(_, _, until)| *until).min()
    }

    /// The waiting reads `st` answers now (see [`Parked::take`]): (reply, answer).
    pub(crate) fn answers(&mut self, st: &Stream, stored: bool, now: i64) -> Vec<(String, Bytes)> {
        self.take(stored, now)
            .into_iter()
            .map(|(reply, q)| (reply, answer(st, Ok(q))))
            .collect()
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        // Unanswered (the stream stopped): their copiers ask again.
        WAITING.fetch_sub(self.0.len() as u64, Ordering::Relaxed);
    }
}

/// The origin's side of a copier's read of `st`: the answer to send to `reply` now, or
/// `None` when the read found nothing new and waits in `parked`.
pub(crate) fn read(
    st: &Stream,
    parked: &mut Parked,
    reply: String,
    question: &[u8],
    now: i64,
) -> Option<(String, Bytes)> {
    let q = serde_json::from_slice::<Question>(question)
        .map_err(|e| format!("a source read that did not decode: {e}"));
    match q {
        Ok(q) if q.next_seq.max(1) > st.store().state().last_seq && parked.has_room() => {
            parked.park(reply, q, now);
            None
        }
        other => Some((reply, answer(st, other))),
    }
}

/// The answer to a read: `0` and the batch ([`round::put_batch`]), or `1` and why there is
/// none.
fn answer(st: &Stream, q: Result<Question, String>) -> Bytes {
    ANSWERED.fetch_add(1, Ordering::Relaxed);
    let read = q.and_then(|q| {
        let mut link = SourceLink::new(q.source, q.mirror);
        link.next_seq = q.next_seq.max(1);
        link.not_before = q.not_before;
        read_batch_within(st.store(), &link, BATCH_MSGS, REMOTE_BATCH_BYTES)
            .map_err(|e| e.to_string())
    });
    let mut out = Vec::new();
    match read {
        Ok(b) => {
            out.push(0);
            round::put_batch(&mut out, &b);
        }
        Err(e) => {
            out.push(1);
            out.extend_from_slice(e.as_bytes());
        }
    }
    Bytes::from(out)
}

/// The copier's side: an answer's batch, or why there is none (an empty body is the
/// router's "no responders": no server holds the origin now).
pub(crate) fn batch_of(body: &[u8]) -> Result<SourceBatch, String> {
    match body.split_first() {
        None => Err("no server holds the origin stream now".to_owned()),
        Some((0, batch)) => {
            round::batch_from(batch).ok_or_else(|| "an answer that did not decode".to_owned())
        }
        Some((_, why)) => Err(String::from_utf8_lossy(why).into_owned()),
    }
}

/// Where a link's answers arrive: the last token of the reply names the link and the read
/// (`M` for the mirror or `S` for a source, the read's nonce in [`NONCE_CHARS`] hex digits,
/// the origin's name). An answer whose nonce is not the read in flight's is dropped, so a
/// client of the account cannot pass its own batch off as the origin's.
struct Inbox {
    tx: WeakStreamTx,
}

impl Service for Inbox {
    fn deliver(
        &self,
        _sid: &[u8],
        subject: &[u8],
        _reply: Option<&[u8]>,
        _headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> Option<Arc<Budget>> {
        let token = subject.rsplit(|b| *b == b'.').next()?;
        let (kind, rest) = token.split_first()?;
        let nonce = rest.get(..NONCE_CHARS)?;
        let origin = rest.get(NONCE_CHARS..)?;
        let cmd = Cmd::OriginAnswer {
            mirror: *kind == b'M',
            origin: String::from_utf8_lossy(origin).into_owned(),
            nonce: String::from_utf8_lossy(nonce).into_owned(),
            body: payload.clone(),
        };
        if let Some(tx) = self.tx.upgrade() {
            // A full queue drops the answer: the link asks again after `ANSWER_WAIT_NS`.
            let _ = tx.try_send(cmd);
        }
        None
    }
}

/// Hex digits of a read's nonce in its reply subject.
const NONCE_CHARS: usize = 16;

/// A copying stream's reads of remote origins: its inboxes (one per account it reads in)
/// and the reads in flight (when asked, and the nonce the answer must carry).
#[derive(Default)]
pub(crate) struct Asking {
    inboxes: HashMap<String, (String, Arc<AccountJs>, Arc<Subscription>)>,
    asked: HashMap<(bool, String), (i64, String)>,
}

impl Asking {
    /// Asks a host of link `link`'s origin in `home` (the origin's account) for its next
    /// batch, unless a read is in flight already. False when there is no cluster to ask.
    pub(crate) fn ask(
        &mut self,
        server: &str,
        seed: u64,
        tx: Option<WeakStreamTx>,
        home: &Arc<AccountJs>,
        link: &SourceLink,
        now: i64,
    ) -> bool {
        let key = (link.mirror, link.cfg.name.clone());
        if self
            .asked
            .get(&key)
            .is_some_and(|(at, _)| now.saturating_sub(*at) < ANSWER_WAIT_NS)
        {
            return true;
        }
        let Some(tx) = tx else { return false };
        let next = self.inboxes.len();
        if !self.inboxes.contains_key(&home.name) {
            let me = crate::consensus::peer_id(server);
            let n = home
                .next_sid
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let prefix = format!("$SEALSTREAM.SOURCED.{me}.{n}");
            let Some(sub) = home.subscribe(
                &format!("{prefix}.*"),
                Bytes::from(format!("o{n}")),
                Some(Bytes::from(format!("$SEALSTREAM.SOURCED.{me}.{next}"))),
                Arc::new(Inbox { tx }),
            ) else {
                return false;
            };
            self.inboxes
                .insert(home.name.clone(), (prefix, Arc::clone(home), sub));
        }
        let Some((prefix, _, _)) = self.inboxes.get(&home.name) else {
            return false;
        };
        let kind = if link.mirror { 'M' } else { 'S' };
        let nonce: String = crate::crypto::random_id()
            .iter()
            .take(NONCE_CHARS / 2)
            .map(|b| format!("{b:02x}"))
            .collect();
        let reply = format!("{prefix}.{kind}{nonce}{}", link.cfg.name);
        let question = Question {
            source: link.cfg.clone(),
            mirror: link.mirror,
            next_seq: link.next_seq,
            not_before: link.not_before,
        };
        let body = Bytes::from(serde_json::to_vec(&question).unwrap_or_default());
        let mut sink = RouterSink::new(Arc::clone(&home.account), seed);
        sink.request(&read_subject(&link.cfg.name), &reply, &body);
        sink.flush();
        self.asked.insert(key, (now, nonce));
        true
    }

    /// An answer for the link (`mirror`, `origin`) arrived: true when it answers the read in
    /// flight (`nonce`), which then is no longer in flight; false for anything else.
    pub(crate) fn answered(&mut self, mirror: bool, origin: &str, nonce: &str) -> bool {
        let key = (mirror, origin.to_owned());
        if self.asked.get(&key).is_none_or(|(_, n)| n != nonce) {
            return false;
        }
        self.asked.remove(&key);
        true
    }

    /// Removes the inboxes (the stream stops).
    pub(crate) fn close(&mut self) {
        for (_, (_, acc, sub)) in self.inboxes.drain() {
            acc.account.unsubscribe(&sub);
        }
        self.asked.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::jetstream::config::parse_stream_config;
    use crate::store::{MemStore, NewMsg, StoreLimits, StreamStore};

    fn origin() -> Stream {
        let mut cfg = parse_stream_config(br#"{"name":"DEPOT","subjects":["depot.>"]}"#).unwrap();
        cfg.normalize("2.11.0").unwrap();
        let mut store = MemStore::new(StoreLimits::default());
        let msgs: Vec<NewMsg> = ["depot.eu.1", "depot.us.2", "depot.eu.3"]
            .iter()
            .map(|s| NewMsg::new(*s, "x"))
            .collect();
        store.append_batch(&msgs).unwrap();
        let store: Box<dyn StreamStore> = Box::new(store);
        Stream::new(cfg, 0, store, "n1", 0)
    }

    fn question(filter: &str, next_seq: u64) -> Vec<u8> {
        serde_json::to_vec(&Question {
            source: StreamSource {
                name: "DEPOT".into(),
                filter_subject: filter.into(),
                ..StreamSource::default()
            },
            mirror: false,
            next_seq,
            not_before: None,
        })
        .unwrap()
    }

    fn read_now(st: &Stream, parked: &mut Parked, q: &[u8]) -> Option<Bytes> {
        read(st, parked, "r".into(), q, 0).map(|(_, body)| body)
    }

    #[test]
    fn an_answer_carries_the_links_next_batch_and_a_failure_says_why() {
        let st = origin();
        let mut parked = Parked::default();
        let body = read_now(&st, &mut parked, &question("depot.eu.>", 1)).unwrap();
        let b = batch_of(&body).unwrap();
        let seqs: Vec<u64> = b.msgs.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![1, 3]);
        assert_eq!((b.scanned_to, b.origin_last, b.more), (3, 3, false));
        assert_eq!(b.msgs[1].subject, "depot.eu.3");
        assert_eq!(&b.msgs[1].payload[..], b"x");
        // The router's no-responders answer, a question that did not decode, a cut answer.
        assert!(batch_of(b"").unwrap_err().contains("no server holds"));
        let bad = read_now(&st, &mut parked, b"{").unwrap();
        assert!(batch_of(&bad).unwrap_err().contains("did not decode"));
        assert!(batch_of(&body[..body.len() - 1])
            .unwrap_err()
            .contains("did not decode"));
        assert_eq!(parked.next_deadline(), None);
    }

    #[test]
    fn a_read_with_nothing_new_waits_until_the_origin_stores_or_its_time_is_up() {
        let st = origin();
        let mut parked = Parked::default();
        // Past the last message: nothing to read, so it waits.
        assert!(read(&st, &mut parked, "r1".into(), &question("depot.eu.>", 4), 0).is_none());
        assert!(read(
            &st,
            &mut parked,
            "r2".into(),
            &question("depot.eu.>", 4),
            10
        )
        .is_none());
        assert_eq!(parked.next_deadline(), Some(PARK_NS));
        assert!(parked.answers(&st, false, PARK_NS - 1).is_empty());
        let due = parked.answers(&st, false, PARK_NS);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, "r1");
        assert!(batch_of(&due[0].1).unwrap().msgs.is_empty());
        // The origin stored something: every waiting read is answered.
        assert_eq!(parked.answers(&st, true, 11).len(), 1);
        assert_eq!(parked.next_deadline(), None);
        for i in 0..MAX_PARKED {
            assert!(read(
                &st,
                &mut parked,
                format!("r{i}"),
                &question("depot.eu.>", 4),
                0
            )
            .is_none());
        }
        // One too many is answered at once, empty.
        let now = read_now(&st, &mut parked, &question("depot.eu.>", 4)).unwrap();
        assert!(batch_of(&now).unwrap().msgs.is_empty());
    }

    #[test]
    fn only_the_answer_to_the_read_in_flight_is_taken() {
        let mut asking = Asking::default();
        let key = (true, "DEPOT".to_owned());
        asking
            .asked
            .insert(key.clone(), (0, "00112233aabbccdd".into()));
        assert!(!asking.answered(true, "DEPOT", "ffffffffffffffff"));
        assert!(!asking.answered(false, "DEPOT", "00112233aabbccdd"));
        assert!(asking.asked.contains_key(&key));
        assert!(asking.answered(true, "DEPOT", "00112233aabbccdd"));
        // Taken once: a second copy of the same answer is not.
        assert!(!asking.answered(true, "DEPOT", "00112233aabbccdd"));
    }
}
