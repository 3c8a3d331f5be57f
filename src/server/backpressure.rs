//! Backpressure: how a publisher is slowed down instead of memory growing or data being
//! dropped.
//!
//! Two rules, both applied by the publishing connection's reader **between read batches**
//! (routing itself never waits — it runs on the publisher's task and on stream threads, which
//! must never block on one another):
//!
//! - **Stream intake.** Everything queued for a stream's thread counts against that stream's
//!   [`Budget`] (bytes of subject, reply, headers and payload). Routing a message into a stream
//!   over its budget still queues it, and reports the budget back; the reader then stops
//!   reading its socket until the stream has worked the queue down below the bound (TCP
//!   backpressure: the client's own buffers fill and its publish calls wait). A publisher
//!   waiting for PubAcks simply gets them later. Overshoot is bounded by one read batch per
//!   connection. Stream threads and the API thread route into streams too (a PubAck sent to a
//!   subject that is itself a stream's): they never wait, so no thread waits on itself.
//! - **Core fan-out (producer stall).** A delivery that leaves a subscriber's outbound queue
//!   above its high-water mark (half of `max_pending`, at most 1 MiB) reports the subscriber;
//!   the reader waits up to [`STALL_MAX`] for that queue to drain below the mark before
//!   reading on (the writer reports progress per system call, so it resumes as soon as the
//!   queue dips below the mark). A receiver
//!   that keeps reading paces the publisher; one that stops reading fills to `max_pending` and
//!   is cut as a slow consumer, as before.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// Bytes a stream may have queued for its thread before publishers wait.
pub(crate) const STREAM_INTAKE_BYTES: usize = 16 << 20;

/// The least a queued command counts against a budget (its cost function applies it per
/// command), however small it is: with it, a budget bounds the number of queued commands too (16 MiB / 256 B = 65,536 at the soft bound).
pub(crate) const MIN_COMMAND_COST: usize = 256;

/// Hard capacity (in commands) of a stream's queue: twice what its budget allows, room for the
/// overshoot of one read batch per publishing connection. Reached only if publishers ignored
/// the budget; a command that finds the queue full is refused (logged, counted in
/// `sealstream_jetstream_intake_refused_total`, and — having no PubAck — never reported as
/// stored), never queued without bound and never waited for by a thread that must not wait.
pub(crate) const STREAM_QUEUE_CAPACITY: usize = 2 * STREAM_INTAKE_BYTES / MIN_COMMAND_COST;

/// Commands refused because a queue was at its hard capacity.
pub(crate) static INTAKE_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Longest a publisher's reader waits, per read batch, for a subscriber above its high-water
/// mark to drain.
pub(crate) const STALL_MAX: Duration = Duration::from_millis(50);

/// Counters for `/metrics`.
pub(crate) static INTAKE_WAITS: AtomicU64 = AtomicU64::new(0);
/// Producer stalls (a reader waited for a subscriber to drain).
pub(crate) static PRODUCER_STALLS: AtomicU64 = AtomicU64::new(0);

/// A bound on what is queued for one consumer of messages (a stream's thread).
pub(crate) struct Budget {
    pending: AtomicUsize,
    limit: usize,
    closed: AtomicBool,
    room: Notify,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Budget {
            pending: AtomicUsize::new(0),
            limit,
            closed: AtomicBool::new(false),
            room: Notify::new(),
        })
    }

    /// Counts `n` more queued bytes; true when the budget is now exceeded.
    pub(crate) fn take(&self, n: usize) -> bool {
        self.pending.fetch_add(n, Ordering::AcqRel) + n > self.limit
    }

    /// `n` queued bytes were worked off; wakes waiting publishers when there is room again.
    pub(crate) fn give_back(&self, n: usize) {
        let before = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                Some(p.saturating_sub(n))
            })
            .unwrap_or(0);
        if before > self.limit && before.saturating_sub(n) <= self.limit {
            self.room.notify_waiters();
        }
    }

    /// Bytes queued now.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// The consumer is gone (stream deleted or stopped): nobody waits for it any more.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.room.notify_waiters();
    }

    fn has_room(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.pending() <= self.limit
    }

    /// Waits until the budget has room (or is closed).
    pub(crate) async fn wait_for_room(&self) {
        if self.has_room() {
            return;
        }
        INTAKE_WAITS.fetch_add(1, Ordering::Relaxed);
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_room() {
                return;
            }
            notified.await;
        }
    }
}

/// Most distinct budgets or subscribers one read batch remembers (a bound, so a route context
/// that is never drained cannot grow).
pub(crate) const MAX_REPORTED: usize = 64;

/// Adds `item` to `list` unless it is already there (by pointer) or the list is full.
pub(crate) fn note<T>(list: &mut Vec<Arc<T>>, item: &Arc<T>) {
    if list.len() < MAX_REPORTED && !list.iter().any(|x| Arc::ptr_eq(x, item)) {
        list.push(Arc::clone(item));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_resumes_once_the_budget_has_room() {
        let b = Budget::new(10);
        assert!(!b.take(10));
        assert!(b.take(5));
        let waiter = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.wait_for_room().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        b.give_back(5);
        waiter.await.unwrap();
        assert_eq!(b.pending(), 10);
    }

    #[tokio::test]
    async fn closing_releases_waiters() {
        let b = Budget::new(1);
        b.take(5);
        let waiter = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.wait_for_room().await })
        };
        tokio::task::yield_now().await;
        b.close();
        waiter.await.unwrap();
    }

    #[test]
    fn notes_are_deduplicated_and_bounded() {
        let a = Arc::new(1);
        let mut v = Vec::new();
        note(&mut v, &a);
        note(&mut v, &a);
        assert_eq!(v.len(), 1);
        for i in 0..100 {
            note(&mut v, &Arc::new(i));
        }
        assert_eq!(v.len(), MAX_REPORTED);
    }
}
