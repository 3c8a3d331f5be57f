//! Runs mirrors and sources (the engine's [`crate::jetstream::source`]) on the copying
//! stream's own store thread.
//!
//! A replicated copying stream reads on its group's leader only, and what it read goes
//! through the group's log as a round's input ([`Sourced`]): every replica stores the same
//! batch at the same place, and the link's position is replicated state (in the stream's
//! images too). The origin is read from this node's copy of it — the origin's replica here,
//! or the origin itself — so the leader's server must hold one.
//!
//! Each pass finds every origin in the account's stream table, reads a bounded batch from it
//! while it is idle — `try_lock` only: a store thread never waits for another stream, so two
//! streams that copy each other cannot deadlock — and stores the batch through the engine
//! (one commit, fsync'd like a publish). No consumer is made on the origin and nothing goes
//! over subjects: on one node the origin's store is right here.
//!
//! When a pass runs: an origin rings its copiers ([`Copiers::ring`]) after a round in which its
//! last sequence moved, which queues one [`Cmd::SourceReady`] per copier at most (the
//! [`CopyBell`]'s flag); a missing origin is looked for again every [`RETRY_NS`], a busy one
//! after [`BUSY_RETRY_NS`]. An idle mirror of an idle origin costs no wake-ups.
//!
//! Lock order: the copier holds its own stream's lock and only `try_lock`s the origin's; the
//! account table's and [`Copiers`]' locks are leaves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::cmd::Cmd;
use super::round::Sourced;
use super::shard::{NotQueued, WeakStreamTx};
use super::{AccountJs, JetStream};
use crate::jetstream::api::ApiError;
use crate::jetstream::config::source::StreamSource;
use crate::jetstream::config::subject_matches;
use crate::jetstream::source::{read_batch, SourceBatch, SourceLink};
use crate::jetstream::stream::{store_failed, Stream};
use crate::jetstream::Effects;
use crate::subject::mapping;

/// How long a missing or failing origin waits before it is looked for again.
const RETRY_NS: i64 = 1_000_000_000;
/// How long a busy origin (its thread is in a round) waits before it is tried again.
const BUSY_RETRY_NS: i64 = 2_000_000;

/// How a copying stream is rung: its queue (set once its store thread adopted it) and
/// whether a ring is pending.
pub(crate) struct CopyBell {
    tx: OnceLock<WeakStreamTx>,
    pending: AtomicBool,
}

impl CopyBell {
    /// A bell that is pending: the first pass runs as soon as the stream is served.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(CopyBell {
            tx: OnceLock::new(),
            pending: AtomicBool::new(true),
        })
    }

    /// Connects the bell to the stream's queue.
    pub(crate) fn connect(&self, tx: WeakStreamTx) {
        let _ = self.tx.set(tx);
    }

    /// Whether a ring came since the last call (and forgets it).
    pub(crate) fn take(&self) -> bool {
        self.pending.swap(false, Ordering::AcqRel)
    }

    /// Marks a pass as due without queueing anything (the stream is being served).
    pub(crate) fn ring_self(&self) {
        self.pending.store(true, Ordering::Release);
    }

    /// The stream's queue (once its store thread adopted it), for answers that come later.
    pub(crate) fn queue(&self) -> Option<WeakStreamTx> {
        self.tx.get().cloned()
    }

    /// Whether a ring is pending.
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Rings unless a ring is pending already. Returns false once the stream is gone.
    fn ring(&self) -> bool {
        if self.pending.swap(true, Ordering::AcqRel) {
            return true;
        }
        let Some(tx) = self.tx.get().and_then(WeakStreamTx::upgrade) else {
            return self.tx.get().is_none();
        };
        // A full queue will be served anyway, and the pass runs with it.
        !matches!(tx.try_send(Cmd::SourceReady), Err(NotQueued::Stopped))
    }
}

/// The streams that copy from one stream (its mirrors and sourcing streams).
#[derive(Default)]
pub(crate) struct Copiers(Mutex<Vec<Arc<CopyBell>>>);

impl Copiers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<CopyBell>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a copier (once).
    pub(crate) fn add(&self, bell: &Arc<CopyBell>) {
        let mut v = self.lock();
        if !v.iter().any(|b| Arc::ptr_eq(b, bell)) {
            v.push(Arc::clone(bell));
        }
    }

    /// Rings every copier; forgets the ones that are gone.
    pub(crate) fn ring(&self) {
        let bells: Vec<Arc<CopyBell>> = self.lock().clone();
        if bells.is_empty() {
            return;
        }
        let gone: Vec<Arc<CopyBell>> = bells.into_iter().filter(|b| !b.ring()).collect();
        if !gone.is_empty() {
            self.lock()
                .retain(|b| !gone.iter().any(|g| Arc::ptr_eq(g, b)));
        }
    }
}

/// One pass over `st`'s links: reads what each origin has that the link has not copied yet
/// (a bounded batch each) and hands it to `take` — a stream of this server stores it at once,
/// a replicated stream's leader proposes it ([`proposal`]). An origin with no copy here is
/// handed to `elsewhere` (its account and the link), which asks a server that holds it
/// ([`origin_read`](super::origin_read)) and says whether it could. Returns when the next
/// pass must run without a ring (a missing or busy origin, a batch that stopped at its
/// bounds, a remote read to ask again), `None` when only a ring needs one.
pub(crate) fn copy(
    js: &JetStream,
    acc: &Arc<AccountJs>,
    bell: &Arc<CopyBell>,
    st: &mut Stream,
    now: i64,
    mut take: impl FnMut(&mut Stream, usize, SourceBatch),
    mut elsewhere: impl FnMut(&Arc<AccountJs>, &SourceLink) -> bool,
) -> Option<i64> {
    let mut again: Option<i64> = None;
    let mut at = |t: i64| again = Some(again.map_or(t, |a: i64| a.min(t)));
    for idx in 0..st.source_links().len() {
        let Some(link) = st.source_links().get(idx) else {
            break;
        };
        if link.cfg.consumer.is_some() {
            st.source_failed(
                idx,
                ApiError::invalid_stream_config(
                    "sourcing through a named consumer is not supported",
                ),
            );
            continue;
        }
        let home = match origin_account(js, acc, &link.cfg) {
            Ok(a) => a,
            Err(e) => {
                st.source_failed(idx, e);
                at(now.saturating_add(RETRY_NS));
                continue;
            }
        };
        let Some(origin) = home.streams.get(&link.cfg.name) else {
            if js.cluster().is_some() && elsewhere(&home, link) {
                // Asked again if no answer comes (an answer sets the next pass itself).
                at(now.saturating_add(super::origin_read::ANSWER_WAIT_NS));
                continue;
            }
            st.source_failed(idx, ApiError::stream_not_found());
            at(now.saturating_add(RETRY_NS));
            continue;
        };
        origin.copiers.add(bell);
        let read = match origin.stream.try_lock() {
            Ok(o) => read_batch(o.store(), link),
            Err(_) => {
                at(now.saturating_add(BUSY_RETRY_NS));
                continue;
            }
        };
        match read {
            Ok(batch) => {
                if batch.more {
                    at(now);
                }
                take(st, idx, batch);
            }
            Err(e) => {
                st.source_failed(idx, store_failed(&e));
                at(now.saturating_add(RETRY_NS));
            }
        }
    }
    again
}

/// What a replicated stream's leader proposes for a batch it read from link `idx`'s origin,
/// or `None` when the batch moves nothing (the link's contact and lag are noted here only:
/// they are what its info shows, not state the replicas must agree on).
pub(crate) fn proposal(
    st: &mut Stream,
    idx: usize,
    batch: SourceBatch,
    fx: &mut Effects,
    now: i64,
) -> Option<Box<Sourced>> {
    let link = st.source_links().get(idx)?;
    if batch.msgs.is_empty() && batch.scanned_to < link.next_seq {
        st.take_sourced(idx, batch, fx, now);
        return None;
    }
    Some(Box::new(Sourced {
        link: u32::try_from(idx).unwrap_or(u32::MAX),
        origin: link.cfg.name.clone(),
        mirror: link.mirror,
        batch,
    }))
}

/// Stores a batch the group's leader read (a committed round, on every replica alike). The
/// link is found by its origin when an update moved it; a link that is gone takes nothing.
pub(crate) fn take_replicated(st: &mut Stream, b: Sourced, fx: &mut Effects, now: i64) {
    let is_it = |l: &SourceLink| l.mirror == b.mirror && l.cfg.name == b.origin;
    let links = st.source_links();
    let at = usize::try_from(b.link).unwrap_or(usize::MAX);
    let idx = if links.get(at).is_some_and(is_it) {
        Some(at)
    } else {
        links.iter().position(is_it)
    };
    let Some(idx) = idx else { return };
    st.take_sourced(idx, b.batch, fx, now);
}

/// The account whose stream `cfg` names: this one, or — with `external.api` — the account
/// whose JetStream API this one imports under that prefix (a service import that maps
/// `<api>.CONSUMER.CREATE.<origin>` onto `$JS.API.CONSUMER.CREATE.<origin>` in the
/// exporter: the exporter allowed exactly that much). No cross-domain JetStream here.
fn origin_account(
    js: &JetStream,
    acc: &Arc<AccountJs>,
    cfg: &StreamSource,
) -> Result<Arc<AccountJs>, ApiError> {
    let Some(api) = cfg
        .external
        .as_ref()
        .map(|e| e.api.as_str())
        .filter(|a| !a.is_empty())
    else {
        return Ok(Arc::clone(acc));
    };
    if js
        .domain
        .as_ref()
        .is_some_and(|d| api == format!("$JS.{d}.API"))
    {
        return Ok(Arc::clone(acc));
    }
    let probe = format!("{api}.CONSUMER.CREATE.{}", cfg.name);
    let want = format!("$JS.API.CONSUMER.CREATE.{}", cfg.name);
    let exporter = acc.account.routes().and_then(|r| {
        r.services().iter().find_map(|route| {
            if !subject_matches(&probe, &route.local) {
                return None;
            }
            let remote = mapping::transform(probe.as_bytes(), &route.local, &route.remote)?;
            (remote == want.as_bytes()).then(|| route.exporter.name.clone())
        })
    });
    let missing = || {
        ApiError::invalid_stream_config(&format!(
            "no JetStream API is imported under {api} for stream {}",
            cfg.name
        ))
    };
    let name = exporter.ok_or_else(missing)?;
    js.account(&name).ok_or_else(missing)
}
