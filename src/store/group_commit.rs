//! A thread-based group committer: many writers, one store, one block and one fsync per batch.
//!
//! Writers send messages over a bounded channel ([`INGEST_CAPACITY`]); the committer thread owns
//! the store, takes the first waiting message, drains whatever else is already queued (up to
//! [`CommitPolicy::max_msgs`], [`CommitPolicy::max_bytes`], or [`CommitPolicy::max_wait`] spent
//! draining) into one [`StreamStore::append_batch`], and answers every writer once that batch is
//! durable. It never waits for more messages to arrive: batches form naturally while the
//! previous fsync runs, so a lone writer pays no extra latency.
//!
//! Other work on the store (reads, deletes, checkpoints) runs on the same thread through
//! [`CommitHandle::run`], in order with the appends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{AppendRejected, Appended, NewMsg, StoreError, StreamStore};

/// Requests the ingest channel holds. When it is full, [`CommitHandle::append`] blocks and
/// [`CommitHandle::try_append`] answers [`CommitError::Busy`] (the publisher is told to try
/// again, never queued without bound).
pub const INGEST_CAPACITY: usize = 4096;

/// When a batch closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPolicy {
    /// Most messages per batch.
    pub max_msgs: usize,
    /// Most payload + header + subject bytes per batch.
    pub max_bytes: usize,
    /// Longest time spent draining the queue into one batch.
    pub max_wait: Duration,
    /// How long to wait for stragglers when the previous batch was bigger than this one is so
    /// far (several writers are active, and their next messages are on the way). A lone writer
    /// never waits: its previous batch had one message.
    pub linger: Duration,
}

impl Default for CommitPolicy {
    fn default() -> Self {
        CommitPolicy {
            max_msgs: 512,
            max_bytes: 1 << 20,
            max_wait: Duration::from_millis(2),
            linger: Duration::from_micros(250),
        }
    }
}

/// Why an append through the committer did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommitError {
    /// The store rejected this message (limits).
    #[error("rejected: {0}")]
    Rejected(AppendRejected),
    /// The batch failed (shared by every writer in it).
    #[error("store error: {0}")]
    Store(Arc<StoreError>),
    /// The ingest queue is full: try again.
    #[error("ingest queue full")]
    Busy,
    /// The committer has stopped.
    #[error("committer stopped")]
    Stopped,
}

type Reply = SyncSender<Result<Appended, CommitError>>;
type Job = Box<dyn FnOnce(&mut dyn StreamStore) + Send>;

enum Request {
    Append(NewMsg, Reply),
    Run(Job),
    Stop,
}

/// Batches and messages committed so far.
#[derive(Debug, Default)]
pub struct CommitStats {
    batches: AtomicU64,
    msgs: AtomicU64,
}

impl CommitStats {
    /// `(batches, messages)` committed so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.batches.load(Ordering::Relaxed),
            self.msgs.load(Ordering::Relaxed),
        )
    }
}

/// A cloneable handle writers use.
#[derive(Clone)]
pub struct CommitHandle {
    tx: SyncSender<Request>,
    stats: Arc<CommitStats>,
}

impl std::fmt::Debug for CommitHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitHandle")
    }
}

impl CommitHandle {
    /// Appends one message and waits until its batch is durable.
    ///
    /// # Errors
    /// [`CommitError`].
    pub fn append(&self, msg: NewMsg) -> Result<Appended, CommitError> {
        let (rtx, rrx) = sync_channel(1);
        self.tx
            .send(Request::Append(msg, rtx))
            .map_err(|_| CommitError::Stopped)?;
        rrx.recv().map_err(|_| CommitError::Stopped)?
    }

    /// Like [`CommitHandle::append`], but answers [`CommitError::Busy`] instead of waiting
    /// for room in a full queue.
    ///
    /// # Errors
    /// [`CommitError`].
    pub fn try_append(&self, msg: NewMsg) -> Result<Appended, CommitError> {
        let (rtx, rrx) = sync_channel(1);
        match self.tx.try_send(Request::Append(msg, rtx)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(CommitError::Busy),
            Err(TrySendError::Disconnected(_)) => return Err(CommitError::Stopped),
        }
        rrx.recv().map_err(|_| CommitError::Stopped)?
    }

    /// Batches and messages committed so far.
    pub fn stats(&self) -> (u64, u64) {
        self.stats.get()
    }

    /// Runs `f` on the committer thread (in order with appends) and returns its result.
    ///
    /// # Errors
    /// [`CommitError::Stopped`].
    pub fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn StreamStore) -> R + Send + 'static,
    ) -> Result<R, CommitError> {
        let (rtx, rrx) = sync_channel(1);
        let job: Job = Box::new(move |s| {
            let _ = rtx.send(f(s));
        });
        self.tx
            .send(Request::Run(job))
            .map_err(|_| CommitError::Stopped)?;
        rrx.recv().map_err(|_| CommitError::Stopped)
    }
}

/// The committer thread and its store.
pub struct GroupCommitter {
    handle: CommitHandle,
    thread: Option<JoinHandle<Box<dyn StreamStore>>>,
}

impl std::fmt::Debug for GroupCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupCommitter")
    }
}

impl GroupCommitter {
    /// Starts the committer thread, which owns `store` until [`GroupCommitter::shutdown`].
    ///
    /// # Errors
    /// The OS error when the thread cannot be spawned.
    pub fn spawn(store: Box<dyn StreamStore>, policy: CommitPolicy) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(INGEST_CAPACITY);
        let stats = Arc::new(CommitStats::default());
        let st = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("store-commit".into())
            .spawn(move || committer(store, rx, policy, &st))?;
        Ok(GroupCommitter {
            handle: CommitHandle { tx, stats },
            thread: Some(thread),
        })
    }

    /// A handle for writers.
    pub fn handle(&self) -> CommitHandle {
        self.handle.clone()
    }

    /// Stops after the queued work and returns the store.
    pub fn shutdown(mut self) -> Option<Box<dyn StreamStore>> {
        let _ = self.handle.tx.send(Request::Stop);
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for GroupCommitter {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.handle.tx.send(Request::Stop);
            let _ = t.join();
        }
    }
}

fn msg_bytes(m: &NewMsg) -> usize {
    m.subject.len() + m.payload.len() + m.headers.as_ref().map_or(0, |h| h.len())
}

fn flush(
    store: &mut dyn StreamStore,
    batch: &mut Vec<NewMsg>,
    replies: &mut Vec<Reply>,
    stats: &CommitStats,
) {
    if batch.is_empty() {
        return;
    }
    stats.batches.fetch_add(1, Ordering::Relaxed);
    stats.msgs.fetch_add(batch.len() as u64, Ordering::Relaxed);
    match store.append_batch(batch) {
        Ok(results) => {
            for (r, reply) in results.into_iter().zip(replies.drain(..)) {
                let _ = reply.send(r.map_err(CommitError::Rejected));
            }
        }
        Err(e) => {
            let e = Arc::new(e);
            for reply in replies.drain(..) {
                let _ = reply.send(Err(CommitError::Store(Arc::clone(&e))));
            }
        }
    }
    replies.clear();
    batch.clear();
}

fn committer(
    mut store: Box<dyn StreamStore>,
    rx: Receiver<Request>,
    policy: CommitPolicy,
    stats: &CommitStats,
) -> Box<dyn StreamStore> {
    let mut batch: Vec<NewMsg> = Vec::with_capacity(policy.max_msgs);
    let mut replies: Vec<Reply> = Vec::with_capacity(policy.max_msgs);
    let mut last_batch = 0usize;
    'outer: while let Ok(first) = rx.recv() {
        let started = Instant::now();
        let mut bytes = 0usize;
        let mut next = Some(first);
        while let Some(req) = next.take() {
            match req {
                Request::Append(m, reply) => {
                    bytes += msg_bytes(&m);
                    batch.push(m);
                    replies.push(reply);
                }
                Request::Run(job) => {
                    flush(store.as_mut(), &mut batch, &mut replies, stats);
                    job(store.as_mut());
                }
                Request::Stop => {
                    flush(store.as_mut(), &mut batch, &mut replies, stats);
                    break 'outer;
                }
            }
            let elapsed = started.elapsed();
            if batch.len() >= policy.max_msgs
                || bytes >= policy.max_bytes
                || elapsed >= policy.max_wait
            {
                break;
            }
            next = match rx.try_recv() {
                Ok(r) => Some(r),
                Err(TryRecvError::Disconnected) => None,
                Err(TryRecvError::Empty) if batch.len() < last_batch => {
                    // More writers were active last time: give their next messages a moment.
                    let wait = policy.linger.min(policy.max_wait - elapsed);
                    rx.recv_timeout(wait).ok()
                }
                Err(TryRecvError::Empty) => None,
            };
        }
        if !batch.is_empty() {
            last_batch = batch.len();
        }
        flush(store.as_mut(), &mut batch, &mut replies, stats);
    }
    store
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    #[test]
    fn concurrent_writers_all_get_distinct_sequences() {
        let gc =
            GroupCommitter::spawn(Box::new(MemStore::default()), CommitPolicy::default()).unwrap();
        let mut threads = Vec::new();
        for t in 0..4 {
            let h = gc.handle();
            threads.push(std::thread::spawn(move || {
                (0..200)
                    .map(|i| {
                        h.append(NewMsg::new(format!("t.{t}"), format!("{i}")))
                            .unwrap()
                            .seq
                    })
                    .collect::<Vec<_>>()
            }));
        }
        let mut all: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (1..=800).collect::<Vec<_>>());
        let msgs = gc.handle().run(|s| s.state().msgs).unwrap();
        assert_eq!(msgs, 800);
        let store = gc.shutdown().unwrap();
        assert_eq!(store.state().last_seq, 800);
    }
}
