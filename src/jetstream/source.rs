//! Copying from other streams — mirrors and sources — as the engine decides it.
//!
//! A stream with a `mirror` or `sources` holds one [`SourceLink`] per origin: what it copies
//! (filters and subject transforms), the next origin sequence to read, and what its stream
//! info reports (`lag`, `active`, `error`). The runtime reads a bounded [`SourceBatch`] from
//! the origin's store when the origin is idle ([`read_batch`]: the origin's thread is never
//! waited for) and hands it to [`Stream::take_sourced`](super::stream::Stream::take_sourced),
//! which stores it like a publish: one commit, fsync'd before anything reads it.
//!
//! Where a link resumes after a restart needs no state of its own: a mirror keeps its origin's
//! sequences, so its last sequence is the last one copied; a sourced message carries a
//! `Nats-Stream-Source` header (`<origin> <origin seq> <filter> <dest> <origin subject>`), and
//! [`positions`] finds the newest one of each link.

use bytes::Bytes;

use super::api::types::SourceInfo;
use super::api::ApiError;
use super::config::source::{Route, StreamSource};
use crate::proto::headers::HeaderMap;
use crate::store::{StoreError, StoredMsg, StreamStore};

/// The header a sourced message carries.
pub const SOURCE_HEADER: &str = "Nats-Stream-Source";

/// Most messages one read takes from an origin (bounds a round's latency and memory).
pub const BATCH_MSGS: usize = 1024;
/// Most bytes one read takes from an origin.
pub const BATCH_BYTES: usize = 4 << 20;

/// One origin a stream copies from.
#[derive(Debug, Clone)]
pub struct SourceLink {
    /// The configuration (`mirror`, or one of `sources`).
    pub cfg: StreamSource,
    /// Whether this is the stream's mirror.
    pub mirror: bool,
    /// A message is copied when its subject matches a route's filter.
    routes: Vec<Route>,
    /// The next origin sequence to read.
    pub next_seq: u64,
    /// The last origin sequence copied (0 none).
    pub last_copied: u64,
    /// Messages before this time are passed over (`opt_start_time`) until one is copied.
    pub not_before: Option<i64>,
    /// When the origin was last read (unix nanos).
    pub last_contact: Option<i64>,
    /// Origin messages past the last one read, as of that read.
    pub lag: u64,
    /// Why the last attempt failed.
    pub error: Option<ApiError>,
}

impl SourceLink {
    /// A link that starts where its configuration says (`opt_start_seq`, `opt_start_time`,
    /// else the origin's first message).
    pub fn new(cfg: StreamSource, mirror: bool) -> Self {
        let routes = cfg.routes().unwrap_or_default();
        SourceLink {
            next_seq: cfg.opt_start_seq.max(1),
            not_before: if cfg.opt_start_seq > 0 {
                None
            } else {
                cfg.start_time()
            },
            cfg,
            mirror,
            routes,
            last_copied: 0,
            last_contact: None,
            lag: 0,
            error: None,
        }
    }

    /// The filters this link reads by.
    pub fn filters(&self) -> impl Iterator<Item = &str> {
        self.routes.iter().map(|r| r.filter.as_str())
    }

    /// The route `subject` takes: `(filter, dest, stored subject)`, or `None` when the link
    /// does not copy it.
    fn route(&self, subject: &str) -> Option<(&Route, String)> {
        let r = self
            .routes
            .iter()
            .find(|r| crate::jetstream::config::subject_matches(subject, &r.filter))?;
        let stored = match &r.transform {
            Some(t) => t.apply(subject)?,
            None => subject.to_owned(),
        };
        Some((r, stored))
    }

    /// The message `m` of the origin as this stream stores it: `(subject, headers)`. A
    /// mirror keeps the headers; a source adds its `Nats-Stream-Source`.
    pub fn copy_of(&self, m: &StoredMsg) -> Option<(String, Option<Bytes>)> {
        let (route, subject) = self.route(&m.subject)?;
        if self.mirror {
            return Some((subject, m.headers.clone()));
        }
        let value = format!(
            "{} {} {} {} {}",
            self.cfg.name, m.seq, route.filter, route.dest, m.subject
        );
        let headers =
            crate::jetstream::consumer::add_headers(m.headers.as_ref(), &[(SOURCE_HEADER, value)]);
        Some((subject, Some(headers)))
    }

    /// Whether a `Nats-Stream-Source` value was written by this link; its origin sequence.
    fn wrote(&self, value: &str) -> Option<u64> {
        let mut f = value.split(' ');
        let (name, seq, filter, dest) = (f.next()?, f.next()?, f.next()?, f.next()?);
        if name != self.cfg.name {
            return None;
        }
        let ours = self
            .routes
            .iter()
            .any(|r| r.filter == filter && r.dest == dest);
        ours.then(|| seq.parse().ok()).flatten()
    }

    /// What stream info reports of this link at `now`.
    pub fn info(&self, now: i64) -> SourceInfo {
        SourceInfo {
            name: self.cfg.name.clone(),
            external: self.cfg.external.clone(),
            lag: self.lag,
            seq: if self.mirror { 0 } else { self.last_copied },
            active: self
                .last_contact
                .map_or(-1, |t| now.saturating_sub(t).max(0)),
            filter_subject: self.cfg.filter_subject.clone(),
            subject_transforms: self.cfg.subject_transforms.clone(),
            error: self.error.clone(),
        }
    }

    /// Whether `other` copies the same thing (an update keeps its position).
    pub fn same_origin(&self, other: &StreamSource) -> bool {
        self.cfg.name == other.name
            && self.cfg.filter_subject == other.filter_subject
            && self.cfg.subject_transforms == other.subject_transforms
            && self.cfg.external == other.external
    }
}

/// What one read of an origin found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SourceBatch {
    /// The messages to copy, in origin order.
    pub msgs: Vec<StoredMsg>,
    /// The origin was read up to here: the link goes on after it.
    pub scanned_to: u64,
    /// The origin's last sequence at the read.
    pub origin_last: u64,
    /// The read stopped at its bounds; more is waiting.
    pub more: bool,
}

/// Reads what `link` has not copied yet from the origin's `store`: at most [`BATCH_MSGS`]
/// messages and about [`BATCH_BYTES`].
///
/// # Errors
/// The origin's store failed to read.
pub fn read_batch(store: &dyn StreamStore, link: &SourceLink) -> Result<SourceBatch, StoreError> {
    read_batch_within(store, link, BATCH_MSGS, BATCH_BYTES)
}

/// [`read_batch`] within other bounds: at most `max_msgs` messages and about `max_bytes`.
///
/// # Errors
/// The origin's store failed to read.
pub fn read_batch_within(
    store: &dyn StreamStore,
    link: &SourceLink,
    max_msgs: usize,
    max_bytes: usize,
) -> Result<SourceBatch, StoreError> {
    let st = store.state();
    let mut batch = SourceBatch {
        origin_last: st.last_seq,
        scanned_to: link.next_seq.saturating_sub(1),
        ..SourceBatch::default()
    };
    let mut from = link.next_seq.max(st.first_seq);
    let mut bytes = 0usize;
    while from <= st.last_seq {
        let mut next: Option<StoredMsg> = None;
        for f in link.filters() {
            if let Some(m) = store.next_by_subject(from, f)? {
                if next.as_ref().is_none_or(|n| m.seq < n.seq) {
                    next = Some(m);
                }
            }
        }
        let Some(m) = next else {
            batch.scanned_to = st.last_seq;
            break;
        };
        from = m.seq + 1;
        batch.scanned_to = m.seq;
        if link
            .not_before
            .is_some_and(|t| m.ts < t && batch.msgs.is_empty())
        {
            continue;
        }
        bytes += m.payload.len() + m.headers.as_ref().map_or(0, Bytes::len) + m.subject.len();
        batch.msgs.push(m);
        if batch.msgs.len() >= max_msgs || bytes >= max_bytes {
            batch.more = batch.scanned_to < st.last_seq;
            break;
        }
    }
    Ok(batch)
}

/// Sets each source link's position from the newest message it copied into `store` (the
/// `Nats-Stream-Source` headers), and a mirror's from the store's last sequence. Links with
/// nothing copied keep their configured start.
pub fn positions(links: &mut [SourceLink], store: &dyn StreamStore) {
    let st = store.state();
    if st.msgs == 0 && st.last_seq == 0 {
        return;
    }
    for l in links.iter_mut().filter(|l| l.mirror) {
        l.next_seq = l.next_seq.max(st.last_seq + 1);
        l.last_copied = st.last_seq;
        l.not_before = None;
    }
    let mut open: Vec<usize> = (0..links.len())
        .filter(|i| links.get(*i).is_some_and(|l| !l.mirror))
        .collect();
    let mut seq = st.last_seq;
    while !open.is_empty() && seq >= st.first_seq && seq > 0 {
        if let Ok(Some(m)) = store.get(seq) {
            let value = m
                .headers
                .as_ref()
                .and_then(|h| HeaderMap::parse(h).ok())
                .and_then(|h| h.get(SOURCE_HEADER).map(str::to_owned));
            if let Some(v) = value {
                open.retain(|i| {
                    let Some(l) = links.get_mut(*i) else {
                        return false;
                    };
                    match l.wrote(&v) {
                        Some(origin_seq) => {
                            l.next_seq = origin_seq + 1;
                            l.last_copied = origin_seq;
                            l.not_before = None;
                            false
                        }
                        None => true,
                    }
                });
            }
        }
        seq -= 1;
    }
}

/// The links a configuration asks for, keeping the positions of `old` links that copy the
/// same origin the same way.
pub fn links_for(
    mirror: Option<&StreamSource>,
    sources: &[StreamSource],
    old: &[SourceLink],
) -> Vec<SourceLink> {
    let fresh = |cfg: &StreamSource, is_mirror: bool| {
        old.iter()
            .find(|l| l.mirror == is_mirror && l.same_origin(cfg))
            .map_or_else(
                || SourceLink::new(cfg.clone(), is_mirror),
                |l| SourceLink {
                    cfg: cfg.clone(),
                    ..l.clone()
                },
            )
    };
    mirror
        .map(|m| fresh(m, true))
        .into_iter()
        .chain(sources.iter().map(|s| fresh(s, false)))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::jetstream::config::source::SubjectTransformConfig;
    use crate::store::{MemStore, NewMsg, StoreLimits};

    fn origin(subjects: &[&str]) -> MemStore {
        let mut s = MemStore::new(StoreLimits::default());
        let msgs: Vec<NewMsg> = subjects.iter().map(|s| NewMsg::new(*s, "x")).collect();
        s.append_batch(&msgs).unwrap();
        s
    }

    fn source(name: &str) -> StreamSource {
        StreamSource {
            name: name.to_owned(),
            ..StreamSource::default()
        }
    }

    #[test]
    fn a_filtered_read_takes_the_matching_messages_and_goes_on_past_the_rest() {
        let o = origin(&["a.1", "b.1", "a.2", "b.2"]);
        let mut cfg = source("O");
        cfg.filter_subject = "a.*".to_owned();
        let link = SourceLink::new(cfg, false);
        let b = read_batch(&o, &link).unwrap();
        let seqs: Vec<u64> = b.msgs.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, [1, 3]);
        assert_eq!((b.scanned_to, b.origin_last, b.more), (4, 4, false));
    }

    #[test]
    fn a_source_header_names_the_origin_and_a_restart_resumes_after_it() {
        let o = origin(&["o.1", "o.2", "o.3"]);
        let mut cfg = source("O");
        cfg.subject_transforms = vec![SubjectTransformConfig {
            src: "o.*".to_owned(),
            dest: "t.$1".to_owned(),
        }];
        let link = SourceLink::new(cfg.clone(), false);
        let b = read_batch(&o, &link).unwrap();
        let mut own = MemStore::new(StoreLimits::default());
        let copies: Vec<NewMsg> = b.msgs[..2]
            .iter()
            .map(|m| {
                let (subject, headers) = link.copy_of(m).unwrap();
                NewMsg {
                    subject,
                    headers,
                    payload: m.payload.clone(),
                    ..NewMsg::default()
                }
            })
            .collect();
        assert_eq!(copies[1].subject, "t.2");
        let h = HeaderMap::parse(copies[1].headers.as_ref().unwrap()).unwrap();
        assert_eq!(h.get(SOURCE_HEADER), Some("O 2 o.* t.$1 o.2"));
        own.append_batch(&copies).unwrap();
        let mut links = vec![
            SourceLink::new(cfg, false),
            SourceLink::new(source("OTHER"), false),
        ];
        positions(&mut links, &own);
        assert_eq!((links[0].next_seq, links[0].last_copied), (3, 2));
        assert_eq!((links[1].next_seq, links[1].last_copied), (1, 0));
    }

    #[test]
    fn a_start_time_passes_over_older_messages_until_one_is_copied() {
        let mut o = MemStore::new(StoreLimits::default());
        for ts in [10, 20, 30] {
            o.append_batch(&[NewMsg {
                ts: Some(ts),
                ..NewMsg::new("s", "x")
            }])
            .unwrap();
        }
        let mut link = SourceLink::new(source("O"), true);
        link.not_before = Some(20);
        let b = read_batch(&o, &link).unwrap();
        let seqs: Vec<u64> = b.msgs.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, [2, 3]);
    }
}
