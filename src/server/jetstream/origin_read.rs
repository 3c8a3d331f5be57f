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
use super::shard::WeakStreamTx;
use super::sink::RouterSink;
use super::AccountJs;
use crate::jetstream::config::source::StreamSource;
use crate::jetstream::source::{read_batch_within, SourceBatch, SourceLink, BATCH_MSGS};
use crate::jetstream::stream::Stream;
use crate::server::account::{Service, Subscription};
use crate::server::backpressure::Budget;
use crate::store::StoredMsg;

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
struct Question {
    source: StreamSource,
    mirror: bool,
    next_seq: u64,
    not_before: Option<i64>,
}

/// One message of an answer.
#[derive(Serialize, Deserialize)]
struct WireMsg {
    seq: u64,
    ts: i64,
    subject: String,
    headers: Option<Vec<u8>>,
    payload: Vec<u8>,
}

/// A batch as it travels.
#[derive(Serialize, Deserialize)]
struct WireBatch {
    msgs: Vec<WireMsg>,
    scanned_to: u64,
    origin_last: u64,
    more: bool,
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
pub(crate) struct Parked(Vec<(String, Bytes, i64)>);

impl Parked {
    /// Keeps a read until `now` + [`PARK_NS`]; false when [`MAX_PARKED`] wait already (the
    /// caller answers it now).
    pub(crate) fn park(&mut self, reply: String, question: Bytes, now: i64) -> bool {
        if self.0.len() >= MAX_PARKED {
            return false;
        }
        self.0.push((reply, question, now.saturating_add(PARK_NS)));
        WAITING.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The reads to answer now: all of them when the origin stored something, else those
    /// whose wait is over.
    pub(crate) fn take(&mut self, stored: bool, now: i64) -> Vec<(String, Bytes)> {
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
}

impl Drop for Parked {
    fn drop(&mut self) {
        // Unanswered (the stream stopped): their copiers ask again.
        WAITING.fetch_sub(self.0.len() as u64, Ordering::Relaxed);
    }
}

/// The origin's side of a new read: its answer, or `None` when it found nothing new (the
/// read waits: [`Parked`]).
pub(crate) fn answer_if_any(st: &Stream, question: &[u8]) -> Option<Bytes> {
    let pending = serde_json::from_slice::<Question>(question)
        .ok()
        .map(|q| q.next_seq.max(1) <= st.store().state().last_seq);
    if pending == Some(false) {
        return None;
    }
    Some(answer(st, question))
}

/// The origin's side: reads what the question's link has not copied yet from `st` and
/// encodes it (or why it could not).
pub(crate) fn answer(st: &Stream, question: &[u8]) -> Bytes {
    ANSWERED.fetch_add(1, Ordering::Relaxed);
    let read = serde_json::from_slice::<Question>(question)
        .map_err(|e| format!("a source read that did not decode: {e}"))
        .and_then(|q| {
            let mut link = SourceLink::new(q.source, q.mirror);
            link.next_seq = q.next_seq.max(1);
            link.not_before = q.not_before;
            read_batch_within(st.store(), &link, BATCH_MSGS, REMOTE_BATCH_BYTES)
                .map_err(|e| e.to_string())
        })
        .map(|b| WireBatch {
            scanned_to: b.scanned_to,
            origin_last: b.origin_last,
            more: b.more,
            msgs: b
                .msgs
                .into_iter()
                .map(|m| WireMsg {
                    seq: m.seq,
                    ts: m.ts,
                    subject: m.subject,
                    headers: m.headers.map(|h| h.to_vec()),
                    payload: m.payload.to_vec(),
                })
                .collect(),
        });
    Bytes::from(postcard::to_stdvec(&read).unwrap_or_default())
}

/// The copier's side: an answer's batch, or why there is none (an empty body is the
/// router's "no responders": no server holds the origin now).
pub(crate) fn batch_of(body: &[u8]) -> Result<SourceBatch, String> {
    if body.is_empty() {
        return Err("no server holds the origin stream now".to_owned());
    }
    let read: Result<WireBatch, String> =
        postcard::from_bytes(body).map_err(|e| format!("an answer that did not decode: {e}"))?;
    let b = read?;
    Ok(SourceBatch {
        scanned_to: b.scanned_to,
        origin_last: b.origin_last,
        more: b.more,
        msgs: b
            .msgs
            .into_iter()
            .map(|m| StoredMsg {
                seq: m.seq,
                ts: m.ts,
                subject: m.subject,
                headers: m.headers.map(Bytes::from),
                payload: Bytes::from(m.payload),
            })
            .collect(),
    })
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

    #[test]
    fn an_answer_carries_the_links_next_batch_and_a_failure_says_why() {
        let st = origin();
        let b = batch_of(&answer(&st, &question("depot.eu.>", 1))).unwrap();
        let seqs: Vec<u64> = b.msgs.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![1, 3]);
        assert_eq!((b.scanned_to, b.origin_last, b.more), (3, 3, false));
        assert_eq!(b.msgs[1].subject, "depot.eu.3");
        assert_eq!(&b.msgs[1].payload[..], b"x");
        // From where the link stands: nothing left past 3.
        let b = batch_of(&answer(&st, &question("depot.eu.>", 4))).unwrap();
        assert!(b.msgs.is_empty());
        // The router's no-responders answer, and a question that did not decode.
        assert!(batch_of(b"").unwrap_err().contains("no server holds"));
        assert!(batch_of(&answer(&st, b"{"))
            .unwrap_err()
            .contains("did not decode"));
    }

    #[test]
    fn a_read_with_nothing_new_waits_until_the_origin_stores_or_its_time_is_up() {
        let st = origin();
        assert!(answer_if_any(&st, &question("depot.eu.>", 1)).is_some());
        // Past the last message: nothing to read, so it waits.
        assert!(answer_if_any(&st, &question("depot.eu.>", 4)).is_none());
        let mut parked = Parked::default();
        assert!(parked.park("r1".into(), Bytes::new(), 0));
        assert!(parked.park("r2".into(), Bytes::new(), 10));
        assert_eq!(parked.next_deadline(), Some(PARK_NS));
        assert!(parked.take(false, PARK_NS - 1).is_empty());
        let due: Vec<String> = parked
            .take(false, PARK_NS)
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(due, vec!["r1".to_owned()]);
        // The origin stored something: every waiting read is answered.
        assert_eq!(parked.take(true, 11).len(), 1);
        assert_eq!(parked.next_deadline(), None);
        for i in 0..MAX_PARKED {
            assert!(parked.park(format!("r{i}"), Bytes::new(), 0));
        }
        assert!(!parked.park("one too many".into(), Bytes::new(), 0));
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
