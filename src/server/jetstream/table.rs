//! An account's stream table (name → [`StreamRef`]) and the snapshots monitoring reads.
//!
//! Why a type of its own: the table's lock is a **leaf**. It is held only to clone an `Arc`
//! out, or to insert or remove one, and no caller can keep its guard — every method returns
//! owned handles. Before this, guards were held while blocking on a stream's mutex (held
//! across fsync) or while routing a reply back into the same account, and a queued writer
//! (stream create/delete) turned that into a server-wide deadlock. See ARCHITECTURE.md, Locks.
//!
//! What a stream looks like from outside its thread is published here too:
//! [`SnapshotCell`] holds the stream's info and consumers' info as of its last publication,
//! so monitoring never touches the stream itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

use crate::jetstream::api::types::{ConsumerInfo, StreamInfo};
use crate::jetstream::config::StreamConfig;
use crate::jetstream::stream::Stream;
use crate::server::account::Subscription;
use crate::store::meta::StreamId;
use crate::subject::SubjectTree;

use super::shard::StreamTx;

/// A stream as the dispatcher, the API thread and monitoring see it. Immutable once in the
/// table: a config update inserts a new `StreamRef` sharing the stream's queue.
pub(crate) struct StreamRef {
    /// The stream's queue (its store thread is rung on every send).
    pub(crate) tx: StreamTx,
    /// The stream itself. Its store thread holds the lock for a round (fsync included); every
    /// other task may only `try_lock` it (`stream_worker::try_read`), never wait for it.
    pub(crate) stream: Arc<Mutex<Stream>>,
    pub(crate) cfg: StreamConfig,
    pub(crate) id: Option<StreamId>,
    pub(crate) subs: Vec<Arc<Subscription>>,
    pub(crate) usage: Arc<Usage>,
    pub(crate) snapshot: Arc<SnapshotCell>,
    /// What publishers have queued for the stream (bounded; see `server::backpressure`).
    pub(crate) budget: Arc<crate::server::backpressure::Budget>,
    /// Set (under the metadata lock) once the stream's keys are erased: its store thread
    /// then touches the metadata no more and removes the files (see `api::delete`).
    pub(crate) erased: Arc<AtomicBool>,
    /// The streams that copy from this one (see `sourcing`).
    pub(crate) copiers: Arc<super::sourcing::Copiers>,
    /// The Raft group whose replica this is, for a replicated stream (its replica count may
    /// be 1: a replicated stream scaled down keeps its group); `None` for a stream of this
    /// server alone.
    pub(crate) group: Option<crate::consensus::GroupId>,
}

impl StreamRef {
    /// The same stream with a new config and subscriptions (after an update).
    pub(crate) fn updated(&self, cfg: StreamConfig, subs: Vec<Arc<Subscription>>) -> Self {
        StreamRef {
            tx: self.tx.clone(),
            stream: Arc::clone(&self.stream),
            cfg,
            id: self.id,
            subs,
            usage: Arc::clone(&self.usage),
            snapshot: Arc::clone(&self.snapshot),
            budget: Arc::clone(&self.budget),
            erased: Arc::clone(&self.erased),
            copiers: Arc::clone(&self.copiers),
            group: self.group,
        }
    }
}

/// Bytes, messages and consumers a stream holds (written by its worker after each round).
#[derive(Default)]
pub(crate) struct Usage {
    pub(crate) bytes: AtomicU64,
    pub(crate) msgs: AtomicU64,
    pub(crate) consumers: AtomicU64,
}

/// Storage used by a set of streams (an account's, or the whole server's), by storage type:
/// the sum of their [`Usage`], kept up to date by each stream's worker with deltas so that a
/// quota check is two atomic loads, never a walk over other streams.
#[derive(Default)]
pub(crate) struct UsageTotals {
    pub(crate) file: AtomicU64,
    pub(crate) memory: AtomicU64,
    pub(crate) consumers: AtomicU64,
}

/// What a stream published about itself for monitoring.
#[derive(Default)]
pub(crate) struct Published {
    /// Stream info (`config`, `created`, `state`, `cluster`), as `STREAM.INFO` gives it.
    pub(crate) info: StreamInfo,
    /// Each consumer's info.
    pub(crate) consumers: Vec<ConsumerInfo>,
}

/// The last [`Published`] view of one stream. Its lock is a leaf held for one `Arc` swap.
#[derive(Default)]
pub(crate) struct SnapshotCell(Mutex<Arc<Published>>);

impl SnapshotCell {
    pub(crate) fn publish(&self, p: Published) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(p);
    }

    pub(crate) fn load(&self) -> Arc<Published> {
        Arc::clone(&self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Name → stream, with an index of the streams' subjects. Every method takes the lock for one
/// map operation and returns owned values, so no guard outlives the call.
#[derive(Default)]
pub(crate) struct StreamTable {
    inner: RwLock<Table>,
}

#[derive(Default)]
struct Table {
    map: HashMap<String, Arc<StreamRef>>,
    /// Each stream's subjects, valued by stream name: a create's collision check walks the
    /// branches its subjects reach instead of comparing against every stream (10,000 KV
    /// buckets made that check most of a create).
    subjects: SubjectTree<Arc<str>>,
}

impl Table {
    fn unindex(&mut self, s: &StreamRef) {
        let name: Arc<str> = Arc::from(s.cfg.name.as_str());
        for subject in &s.cfg.subjects {
            self.subjects.remove(subject.as_bytes(), None, &name);
        }
    }

    fn index(&mut self, s: &StreamRef) {
        let name: Arc<str> = Arc::from(s.cfg.name.as_str());
        for subject in &s.cfg.subjects {
            // A subject the config check let through is a valid filter; one that is not
            // (an older store's) cannot collide with anything anyway.
            let _ = self
                .subjects
                .insert(subject.as_bytes(), None, Arc::clone(&name));
        }
    }
}

impl StreamTable {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<StreamRef>> {
        self.read().map.get(name).cloned()
    }

    /// Every stream, in no particular order.
    pub(crate) fn all(&self) -> Vec<Arc<StreamRef>> {
        self.read().map.values().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.read().map.len()
    }

    /// Whether a stream other than `name` has a subject that overlaps one of `subjects`.
    pub(crate) fn subjects_taken(&self, name: &str, subjects: &[String]) -> bool {
        let t = self.read();
        subjects.iter().any(|s| {
            t.subjects
                .overlapping(s.as_bytes())
                .iter()
                .any(|other| &**other != name)
        })
    }

    /// Inserts or replaces the stream named `s.cfg.name`.
    pub(crate) fn insert(&self, s: Arc<StreamRef>) {
        let mut t = self.write();
        t.index(&s);
        if let Some(old) = t.map.insert(s.cfg.name.clone(), s) {
            t.unindex(&old);
        }
    }

    pub(crate) fn remove(&self, name: &str) -> Option<Arc<StreamRef>> {
        let mut t = self.write();
        let old = t.map.remove(name)?;
        t.unindex(&old);
        Some(old)
    }

    /// Removes and returns every stream.
    pub(crate) fn drain(&self) -> Vec<Arc<StreamRef>> {
        let mut t = self.write();
        t.subjects = SubjectTree::new();
        t.map.drain().map(|(_, s)| s).collect()
    }
}
