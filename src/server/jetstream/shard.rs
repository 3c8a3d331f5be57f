//! The store threads: a fixed pool of shards, each owning many streams.
//!
//! Why: with a thread per stream, a stream cost an OS thread (2,000 streams were 2,004
//! threads; every KV bucket is a stream). Ownership stays single — only a stream's shard ever
//! touches its store and consumers — but a stream now costs a map entry and a queue.
//!
//! How a shard knows what to do:
//! - **Commands.** Every stream keeps its own bounded queue ([`StreamTx`]). Sending rings the
//!   stream's [`Doorbell`]: the first ring after the shard last looked puts the stream on the
//!   shard's ready list and wakes it; further rings are one atomic swap each. The shard clears
//!   the bell *before* draining the queue, so a command sent during a drain rings again.
//! - **Timers.** After serving a stream the shard asks it when it must wake on its own
//!   ([`ShardTask::next_wake`]) and keeps the answer in one heap per shard. An idle stream
//!   (no timer) costs no wake-ups at all.
//!
//! A stream is served at most [`MAX_ROUND`](ShardTask) commands at a time (its own bound); one
//! with more queued goes round again after the shard's other ready streams, so a busy stream
//! cannot starve the quiet ones of its shard.
//!
//! **Lent out.** A stream with one long piece of work (installing a replicated stream's
//! snapshot: every message decrypted, checked and written again) answers [`Served::Away`]: the
//! shard lends it to a thread of its own, which runs [`ShardTask::work_away`] and hands it
//! back. Meanwhile the shard serves its other streams; the lent stream's commands wait in its
//! queue (its bell stays rung), and it is served as soon as it is back. A stopping shard
//! waits for its lent streams to come back before it closes them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::cmd::{cmd_size, refused, Cmd};
use crate::jetstream::now_nanos;
use crate::server::backpressure::{Budget, STREAM_QUEUE_CAPACITY};

/// What a shard asks of a stream it owns.
pub(crate) trait ShardTask: Send {
    /// Takes what is queued (up to the task's own round bound) and works it; with nothing
    /// queued, runs the stream's timers.
    fn serve(&mut self, queue: &StreamQueue) -> Served;
    /// When the task must run without a command (unix nanos); `None`: only when one arrives.
    fn next_wake(&self) -> Option<i64>;
    /// The server is stopping and the stream was not stopped first: close it.
    fn close(&mut self);
    /// The long work a [`Served::Away`] announced, on a thread apart from the shard.
    fn work_away(&mut self) {}
}

/// What serving a task did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// Its queue is worked off.
    Idle,
    /// It took a full round; more may be queued.
    More,
    /// It stopped (asked to, or every sender is gone); the shard forgets it.
    Stopped,
    /// It has long work to do apart: lend it to a thread that runs
    /// [`ShardTask::work_away`], then serve it again.
    Away,
}

/// Why a command was not queued (it is dropped; nothing was acknowledged for it).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotQueued {
    /// The queue is at its hard capacity.
    Full,
    /// The stream has stopped.
    Stopped,
}

/// One stream's queue. A deque that grows with what is queued — a preallocated channel of
/// [`STREAM_QUEUE_CAPACITY`] slots would cost every stream megabytes while idle — and is
/// bounded by that capacity all the same.
struct Queue {
    items: Mutex<Pending>,
    /// Counted commands it holds at most ([`STREAM_QUEUE_CAPACITY`]).
    capacity: usize,
    key: u64,
    /// Set while the stream is on the shard's ready list (cleared by the shard before it
    /// drains the queue).
    rung: AtomicBool,
    shard: Arc<Shard>,
}

#[derive(Default)]
struct Pending {
    cmds: VecDeque<Cmd>,
    /// The stream stopped: nothing is queued any more.
    stopped: bool,
    /// Every sender is gone.
    abandoned: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `cmd`; a counted command only below the hard capacity, a control command always
    /// (their senders wait for the answer, so there are few).
    fn push(&self, cmd: Cmd, counted: bool) -> Result<(), NotQueued> {
        {
            let mut p = self.lock();
            if p.stopped {
                return Err(NotQueued::Stopped);
            }
            if counted && p.cmds.len() >= self.capacity {
                return Err(NotQueued::Full);
            }
            p.cmds.push_back(cmd);
        }
        if !self.rung.swap(true, Ordering::AcqRel) {
            self.shard.wake(self.key);
        }
        Ok(())
    }
}

/// The receiving side of one stream's queue (its shard holds it).
pub(crate) struct StreamQueue(Arc<Queue>);

impl StreamQueue {
    /// Takes up to `max` queued commands; the flag says every sender is gone (after these).
    pub(crate) fn take(&self, max: usize) -> (Vec<Cmd>, bool) {
        let mut p = self.0.lock();
        let n = p.cmds.len().min(max);
        let cmds: Vec<Cmd> = p.cmds.drain(..n).collect();
        if p.cmds.is_empty() && p.cmds.capacity() > 1024 {
            // A burst is over: give its memory back.
            p.cmds = VecDeque::new();
        }
        (cmds, p.abandoned && p.cmds.is_empty())
    }
}

impl Drop for StreamQueue {
    /// The stream stopped: later sends fail at once, and commands still queued are dropped
    /// (a stop waiter among them sees its answer channel close instead of waiting).
    fn drop(&mut self) {
        let left = {
            let mut p = self.0.lock();
            p.stopped = true;
            std::mem::take(&mut p.cmds)
        };
        drop(left);
    }
}

/// The sending side of one stream's queue.
#[derive(Clone)]
pub(crate) struct StreamTx {
    q: Arc<Senders>,
}

/// Shared by every clone of a [`StreamTx`]; dropping the last tells the shard.
struct Senders(Arc<Queue>);

impl Drop for Senders {
    /// The last sender is gone: the shard serves the stream once more, finds it abandoned,
    /// and stops it.
    fn drop(&mut self) {
        self.0.lock().abandoned = true;
        self.0.shard.wake(self.0.key);
    }
}

impl StreamTx {
    /// Queues `cmd`, counted against the stream's intake `budget`. Returns the budget when it
    /// is now over its bound: the connection that published the command waits for room
    /// before reading more (`server/backpressure.rs`); store and API threads ignore it.
    ///
    /// Never waits: a queue at its hard capacity ([`STREAM_QUEUE_CAPACITY`]) refuses the
    /// command (see there).
    pub(crate) fn send_counted(&self, budget: &Arc<Budget>, cmd: Cmd) -> Option<Arc<Budget>> {
        let size = cmd_size(&cmd);
        let over = budget.take(size);
        match self.try_send(cmd) {
            Ok(()) => over.then(|| Arc::clone(budget)),
            Err(NotQueued::Stopped) => {
                budget.give_back(size);
                None
            }
            Err(NotQueued::Full) => {
                budget.give_back(size);
                refused("stream");
                Some(Arc::clone(budget))
            }
        }
    }

    /// Queues `cmd` unless the queue is at its hard capacity; never waits.
    pub(crate) fn try_send(&self, cmd: Cmd) -> Result<(), NotQueued> {
        self.q.0.push(cmd, true)
    }

    /// Queues a control command (info, update, snapshot, stop), past the hard capacity if
    /// need be: its sender waits for the answer, so few are ever queued. Never waits.
    pub(crate) fn send(&self, cmd: Cmd) -> Result<(), NotQueued> {
        self.q.0.push(cmd, false)
    }

    /// A handle that does not keep the stream's queue open (a stream that another one rings
    /// must still find itself abandoned when its own senders are gone).
    pub(crate) fn downgrade(&self) -> WeakStreamTx {
        WeakStreamTx {
            q: Arc::downgrade(&self.q),
        }
    }
}

/// A [`StreamTx`] that does not count as a sender.
#[derive(Clone)]
pub(crate) struct WeakStreamTx {
    q: std::sync::Weak<Senders>,
}

impl WeakStreamTx {
    /// The sender, while the stream still has others.
    pub(crate) fn upgrade(&self) -> Option<StreamTx> {
        self.q.upgrade().map(|q| StreamTx { q })
    }
}

#[cfg(test)]
impl StreamTx {
    /// A queue of `capacity` that no store thread serves (a unit test drains it itself).
    pub(crate) fn unserved(capacity: usize) -> (Self, StreamQueue) {
        let q = Arc::new(Queue {
            items: Mutex::new(Pending::default()),
            capacity,
            key: 0,
            rung: AtomicBool::new(false),
            shard: Arc::new(Shard::default()),
        });
        (
            StreamTx {
                q: Arc::new(Senders(Arc::clone(&q))),
            },
            StreamQueue(q),
        )
    }
}

#[derive(Default)]
struct Inbox {
    ready: Vec<u64>,
    /// New streams, and lent ones back from their work.
    adopted: Vec<Owned>,
    /// Streams lent out now.
    away: usize,
    exit: bool,
}

/// One store thread's mailbox.
#[derive(Default)]
struct Shard {
    inbox: Mutex<Inbox>,
    cv: Condvar,
}

impl Shard {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self, key: u64) {
        self.lock().ready.push(key);
        self.cv.notify_one();
    }
}

/// A stream as its shard holds it.
struct Owned {
    key: u64,
    task: Box<dyn ShardTask>,
    queue: StreamQueue,
    /// The timer this stream has in the shard's heap (entries that differ are stale).
    wake_at: Option<i64>,
}

/// The fixed pool of store threads.
pub(crate) struct ShardPool {
    shards: Vec<Arc<Shard>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    next_key: AtomicU64,
}

/// Store threads when the config names none: one per core, at least two (a shard fsyncing
/// one stream does not hold every other stream up), at most 64.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, std::num::NonZeroUsize::get)
        .clamp(2, 64)
}

impl ShardPool {
    /// Starts `n` store threads (at least one).
    ///
    /// # Errors
    /// The OS error when a thread cannot be started (the ones already started are stopped).
    pub(crate) fn start(n: usize) -> std::io::Result<Self> {
        let mut pool = ShardPool {
            shards: Vec::new(),
            threads: Mutex::new(Vec::new()),
            next_key: AtomicU64::new(1),
        };
        for i in 0..n.max(1) {
            let shard = Arc::new(Shard::default());
            let mine = Arc::clone(&shard);
            let spawned = std::thread::Builder::new()
                .name(format!("js-store-{i}"))
                .spawn(move || run(&mine));
            match spawned {
                Ok(t) => {
                    pool.threads
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(t);
                    pool.shards.push(shard);
                }
                Err(e) => {
                    pool.stop();
                    return Err(e);
                }
            }
        }
        Ok(pool)
    }

    /// How many store threads serve streams.
    pub(crate) fn len(&self) -> usize {
        self.shards.len()
    }

    /// Hands `task` to a shard (round robin) and returns the sender for its queue.
    pub(crate) fn adopt(&self, task: Box<dyn ShardTask>) -> StreamTx {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let idx = usize::try_from(key).unwrap_or(0) % self.shards.len();
        let shard = Arc::clone(&self.shards[idx]);
        let q = Arc::new(Queue {
            items: Mutex::new(Pending::default()),
            capacity: STREAM_QUEUE_CAPACITY,
            key,
            rung: AtomicBool::new(false),
            shard: Arc::clone(&shard),
        });
        shard.lock().adopted.push(Owned {
            key,
            task,
            queue: StreamQueue(Arc::clone(&q)),
            wake_at: None,
        });
        shard.cv.notify_one();
        StreamTx {
            q: Arc::new(Senders(q)),
        }
    }

    /// Stops every store thread (streams still held are closed) and waits for them.
    pub(crate) fn stop(&self) {
        for s in &self.shards {
            s.lock().exit = true;
            s.cv.notify_one();
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Rebuild the timer heap when stale entries outnumber live streams by this factor.
const STALE_TIMERS_FACTOR: usize = 4;

/// One store thread: waits for a ready stream, a new one, a due timer or the exit flag.
fn run(shard: &Arc<Shard>) {
    let mut owned: HashMap<u64, Owned> = HashMap::new();
    let mut timers: BinaryHeap<Reverse<(i64, u64)>> = BinaryHeap::new();
    let mut again: Vec<u64> = Vec::new();
    loop {
        let (mut ready, adopted, exit) = {
            let mut inbox = shard.lock();
            loop {
                if !inbox.ready.is_empty()
                    || !inbox.adopted.is_empty()
                    || inbox.exit
                    || !again.is_empty()
                {
                    break;
                }
                let now = now_nanos();
                match timers.peek() {
                    Some(Reverse((t, _))) if *t <= now => break,
                    Some(Reverse((t, _))) => {
                        let ns = u64::try_from(t.saturating_sub(now)).unwrap_or(0);
                        inbox = shard
                            .cv
                            .wait_timeout(inbox, Duration::from_nanos(ns))
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    None => inbox = shard.cv.wait(inbox).unwrap_or_else(|p| p.into_inner()),
                }
            }
            (
                std::mem::take(&mut inbox.ready),
                std::mem::take(&mut inbox.adopted),
                inbox.exit,
            )
        };
        for o in adopted {
            let key = o.key;
            owned.insert(key, o);
            ready.push(key);
        }
        // Streams that took a full round last time go after the newly rung ones.
        ready.append(&mut again);
        ready.sort_unstable();
        ready.dedup();
        for key in ready {
            let Some(o) = owned.get_mut(&key) else {
                continue;
            };
            o.queue.0.rung.store(false, Ordering::Release);
            serve(shard, &mut owned, key, &mut timers, &mut again);
        }
        let now = now_nanos();
        while let Some(&Reverse((t, key))) = timers.peek() {
            if t > now {
                break;
            }
            timers.pop();
            let due = owned.get_mut(&key).is_some_and(|o| {
                let mine = o.wake_at == Some(t);
                if mine {
                    o.wake_at = None;
                }
                mine
            });
            if due {
                serve(shard, &mut owned, key, &mut timers, &mut again);
            }
        }
        if timers.len() > STALE_TIMERS_FACTOR * owned.len() + 1024 {
            timers = owned
                .values()
                .filter_map(|o| o.wake_at.map(|t| Reverse((t, o.key))))
                .collect();
        }
        if exit {
            for (_, mut o) in owned.drain() {
                o.task.close();
            }
            close_when_back(shard);
            return;
        }
    }
}

/// The shard is stopping: waits for its lent streams to come back and closes them.
fn close_when_back(shard: &Shard) {
    loop {
        let back = {
            let mut inbox = shard.lock();
            while inbox.adopted.is_empty() && inbox.away > 0 {
                inbox = shard.cv.wait(inbox).unwrap_or_else(|p| p.into_inner());
            }
            if inbox.adopted.is_empty() {
                return;
            }
            std::mem::take(&mut inbox.adopted)
        };
        for mut o in back {
            o.task.close();
        }
    }
}

/// Lends `o` to a thread of its own for its [`ShardTask::work_away`]; it comes back through
/// the shard's inbox. With no thread to be had, the work is done here.
fn lend(shard: &Arc<Shard>, o: Owned) {
    shard.lock().away += 1;
    let slot = Arc::new(Mutex::new(Some(o)));
    let (back, mine) = (Arc::clone(shard), Arc::clone(&slot));
    let spawned = std::thread::Builder::new()
        .name("js-store-away".into())
        .spawn(move || {
            let taken = mine.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(o) = taken {
                work_and_return(&back, o);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread for a stream's long work: done on its shard");
        let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(o) = taken {
            work_and_return(shard, o);
        }
    }
}

fn work_and_return(shard: &Shard, mut o: Owned) {
    o.task.work_away();
    let mut inbox = shard.lock();
    inbox.away -= 1;
    inbox.adopted.push(o);
    drop(inbox);
    shard.cv.notify_one();
}

/// Serves one stream and files its next timer (or lends it out, see [`Served::Away`]).
fn serve(
    shard: &Arc<Shard>,
    owned: &mut HashMap<u64, Owned>,
    key: u64,
    timers: &mut BinaryHeap<Reverse<(i64, u64)>>,
    again: &mut Vec<u64>,
) {
    let Some(o) = owned.get_mut(&key) else {
        return;
    };
    match o.task.serve(&o.queue) {
        Served::Stopped => {
            owned.remove(&key);
            return;
        }
        Served::Away => {
            if let Some(mut o) = owned.remove(&key) {
                // Its timer is filed again when it is back (entries left in the heap are
                // skipped while it is away).
                o.wake_at = None;
                lend(shard, o);
            }
            return;
        }
        Served::More => again.push(key),
        Served::Idle => {}
    }
    let next = o.task.next_wake();
    if next != o.wake_at {
        o.wake_at = next;
        if let Some(t) = next {
            timers.push(Reverse((t, key)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{Receiver, SyncSender};

    /// Counts what it is given; wakes itself once at `wake`; reports each event. With `lend`,
    /// goes away on `LeaderElected`, and its work away waits for the test's word.
    struct Probe {
        seen: Arc<AtomicU64>,
        timer_runs: Arc<AtomicU64>,
        wake: Option<i64>,
        closed: Arc<AtomicBool>,
        events: SyncSender<()>,
        lend: Option<Lend>,
    }

    struct Lend {
        started: SyncSender<()>,
        release: Receiver<()>,
    }

    impl ShardTask for Probe {
        fn serve(&mut self, queue: &StreamQueue) -> Served {
            let (cmds, abandoned) = queue.take(usize::MAX);
            let any = !cmds.is_empty();
            for c in cmds {
                if let Cmd::Stop(done) = c {
                    if let Some(d) = done {
                        let _ = d.send(());
                    }
                    return Served::Stopped;
                }
                if self.lend.is_some() && matches!(c, Cmd::LeaderElected) {
                    return Served::Away;
                }
                self.seen.fetch_add(1, Ordering::Relaxed);
                let _ = self.events.try_send(());
            }
            if abandoned {
                self.closed.store(true, Ordering::Relaxed);
                let _ = self.events.try_send(());
                return Served::Stopped;
            }
            if !any && self.wake.is_some_and(|w| w <= now_nanos()) {
                self.timer_runs.fetch_add(1, Ordering::Relaxed);
                self.wake = None;
                let _ = self.events.try_send(());
            }
            Served::Idle
        }
        fn next_wake(&self) -> Option<i64> {
            self.wake
        }
        fn close(&mut self) {
            self.closed.store(true, Ordering::Relaxed);
        }
        fn work_away(&mut self) {
            if let Some(lend) = &self.lend {
                let _ = lend.started.try_send(());
                let _ = lend.release.recv_timeout(Duration::from_secs(10));
            }
        }
    }

    fn fc() -> Cmd {
        Cmd::FlowControl {
            subject: "$JS.FC.S.x.y".into(),
        }
    }

    struct LenderHandles {
        seen: Arc<AtomicU64>,
        timer_runs: Arc<AtomicU64>,
        closed: Arc<AtomicBool>,
        started: Receiver<()>,
        release: SyncSender<()>,
    }

    fn lender(events: &SyncSender<()>, wake: Option<i64>) -> (Box<Probe>, LenderHandles) {
        let (started_tx, started) = std::sync::mpsc::sync_channel(4);
        let (release, release_rx) = std::sync::mpsc::sync_channel(4);
        let h = LenderHandles {
            seen: Arc::new(AtomicU64::new(0)),
            timer_runs: Arc::new(AtomicU64::new(0)),
            closed: Arc::new(AtomicBool::new(false)),
            started,
            release,
        };
        let task = Probe {
            seen: Arc::clone(&h.seen),
            timer_runs: Arc::clone(&h.timer_runs),
            wake,
            closed: Arc::clone(&h.closed),
            events: events.clone(),
            lend: Some(Lend {
                started: started_tx,
                release: release_rx,
            }),
        };
        (Box::new(task), h)
    }

    #[test]
    fn a_stream_lent_out_for_long_work_holds_up_neither_its_shard_nor_its_commands() {
        let pool = ShardPool::start(1).unwrap();
        let (etx, erx) = events();
        // Its timer falls due while it is away: it must still run once it is back.
        let due = now_nanos() + 200_000_000;
        let (task, h) = lender(&etx, Some(due));
        let lent = pool.adopt(task);
        let other_seen = Arc::new(AtomicU64::new(0));
        let other = pool.adopt(Box::new(Probe {
            seen: Arc::clone(&other_seen),
            timer_runs: Arc::new(AtomicU64::new(0)),
            wake: None,
            closed: Arc::new(AtomicBool::new(false)),
            events: etx.clone(),
            lend: None,
        }));
        // Served once first: its timer is in the shard's heap when it goes.
        lent.try_send(fc()).unwrap();
        wait_for(&erx, || h.seen.load(Ordering::Relaxed) == 1);
        lent.send(Cmd::LeaderElected).unwrap();
        h.started.recv_timeout(Duration::from_secs(2)).unwrap();
        for _ in 0..3 {
            lent.try_send(fc()).unwrap();
        }
        // The shard's only thread serves the other stream while the lent one works.
        for _ in 0..5 {
            other.try_send(fc()).unwrap();
        }
        wait_for(&erx, || other_seen.load(Ordering::Relaxed) == 5);
        assert_eq!(h.seen.load(Ordering::Relaxed), 1, "served while away");
        while now_nanos() <= due {
            let _ = erx.recv_timeout(Duration::from_millis(20));
        }
        // One more turn of the shard after the timer fell due: its entry is gone from the heap.
        other.try_send(fc()).unwrap();
        wait_for(&erx, || other_seen.load(Ordering::Relaxed) == 6);
        assert_eq!(h.timer_runs.load(Ordering::Relaxed), 0);
        h.release.send(()).unwrap();
        wait_for(&erx, || {
            h.seen.load(Ordering::Relaxed) == 4 && h.timer_runs.load(Ordering::Relaxed) == 1
        });
        // Lent out again: it comes back again.
        lent.send(Cmd::LeaderElected).unwrap();
        h.started.recv_timeout(Duration::from_secs(2)).unwrap();
        h.release.send(()).unwrap();
        lent.try_send(fc()).unwrap();
        wait_for(&erx, || h.seen.load(Ordering::Relaxed) == 5);
        pool.stop();
        assert!(h.closed.load(Ordering::Relaxed));
    }

    #[test]
    fn a_stopping_shard_waits_for_its_lent_streams_and_closes_them() {
        let pool = Arc::new(ShardPool::start(1).unwrap());
        let (etx, _erx) = events();
        let (task, h) = lender(&etx, None);
        let lent = pool.adopt(task);
        lent.send(Cmd::LeaderElected).unwrap();
        h.started.recv_timeout(Duration::from_secs(2)).unwrap();
        let stopping = Arc::clone(&pool);
        let (stopped_tx, stopped) = std::sync::mpsc::sync_channel(1);
        let stopper = std::thread::spawn(move || {
            stopping.stop();
            let _ = stopped_tx.send(());
        });
        assert!(stopped.recv_timeout(Duration::from_millis(100)).is_err());
        assert!(!h.closed.load(Ordering::Relaxed), "closed while away");
        h.release.send(()).unwrap();
        stopped.recv_timeout(Duration::from_secs(2)).unwrap();
        stopper.join().unwrap();
        assert!(h.closed.load(Ordering::Relaxed));
        drop(lent);
    }

    #[test]
    fn small_commands_cost_the_minimum_and_a_full_queue_refuses_without_waiting() {
        use crate::server::backpressure::{INTAKE_REFUSED, MIN_COMMAND_COST};
        let (tx, rx) = StreamTx::unserved(1);
        let budget = Budget::new(10 * MIN_COMMAND_COST);
        assert_eq!(cmd_size(&fc()), MIN_COMMAND_COST);
        assert!(tx.send_counted(&budget, fc()).is_none());
        let before = INTAKE_REFUSED.load(Ordering::Relaxed);
        // The queue holds one: the second is refused (counted), never waited for.
        assert!(tx.send_counted(&budget, fc()).is_some());
        assert!(INTAKE_REFUSED.load(Ordering::Relaxed) > before);
        assert_eq!(budget.pending(), MIN_COMMAND_COST);
        let (got, _) = rx.take(10);
        assert_eq!(got.len(), 1);
        budget.give_back(cmd_size(&got[0]));
        assert_eq!(budget.pending(), 0);
    }

    /// Waits (events from the probes, 2 s at most in all) until `what` holds.
    fn wait_for(events: &Receiver<()>, what: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !what() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(
                events.recv_timeout(left).is_ok() || what(),
                "condition not reached in 2 s"
            );
        }
    }

    fn events() -> (SyncSender<()>, Receiver<()>) {
        std::sync::mpsc::sync_channel(100_000)
    }

    #[test]
    fn many_streams_share_few_threads_and_every_command_is_served() {
        let pool = ShardPool::start(2).unwrap();
        let seen = Arc::new(AtomicU64::new(0));
        let (etx, erx) = events();
        let mut txs = Vec::new();
        for _ in 0..500 {
            txs.push(pool.adopt(Box::new(Probe {
                seen: Arc::clone(&seen),
                timer_runs: Arc::new(AtomicU64::new(0)),
                wake: None,
                closed: Arc::new(AtomicBool::new(false)),
                events: etx.clone(),
                lend: None,
            })));
        }
        for round in 0..20 {
            for (i, tx) in txs.iter().enumerate() {
                if (i + round) % 3 == 0 {
                    tx.try_send(fc()).unwrap();
                }
            }
        }
        let expected: u64 = (0..20)
            .map(|r| (0..500).filter(|i| (i + r) % 3 == 0).count() as u64)
            .sum();
        wait_for(&erx, || seen.load(Ordering::Relaxed) == expected);
        assert_eq!(pool.len(), 2);
        pool.stop();
    }

    #[test]
    fn a_timer_wakes_its_stream_and_a_stop_is_confirmed() {
        let pool = ShardPool::start(1).unwrap();
        let runs = Arc::new(AtomicU64::new(0));
        let (etx, erx) = events();
        let tx = pool.adopt(Box::new(Probe {
            seen: Arc::new(AtomicU64::new(0)),
            timer_runs: Arc::clone(&runs),
            wake: Some(now_nanos() + 20_000_000),
            closed: Arc::new(AtomicBool::new(false)),
            events: etx,
            lend: None,
        }));
        wait_for(&erx, || runs.load(Ordering::Relaxed) == 1);
        let (done, stopped) = std::sync::mpsc::sync_channel(1);
        tx.send(Cmd::Stop(Some(done))).unwrap();
        stopped.recv_timeout(Duration::from_secs(2)).unwrap();
        pool.stop();
    }

    #[test]
    fn dropping_every_sender_stops_the_stream_and_exit_closes_the_rest() {
        let pool = ShardPool::start(1).unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        let kept = Arc::new(AtomicBool::new(false));
        let (etx, erx) = events();
        let probe = |closed: &Arc<AtomicBool>| {
            Box::new(Probe {
                seen: Arc::new(AtomicU64::new(0)),
                timer_runs: Arc::new(AtomicU64::new(0)),
                wake: None,
                closed: Arc::clone(closed),
                events: etx.clone(),
                lend: None,
            })
        };
        drop(pool.adopt(probe(&dropped)));
        let _tx = pool.adopt(probe(&kept));
        wait_for(&erx, || dropped.load(Ordering::Relaxed));
        assert!(!kept.load(Ordering::Relaxed));
        pool.stop();
        assert!(kept.load(Ordering::Relaxed));
    }
}
