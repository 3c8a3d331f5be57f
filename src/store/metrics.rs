//! Process-wide store figures for `/metrics`: fsync latency (a fixed-bucket histogram),
//! fsync failures, and blocks that failed authentication when read.
//!
//! Plain atomics: recording is a few relaxed increments on the fsync path, which costs
//! milliseconds anyway.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the fsync latency buckets, in microseconds (the last bucket is +Inf).
pub const FSYNC_BUCKETS_US: [u64; 12] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
];

/// The store's counters.
#[derive(Debug)]
pub struct StoreMetrics {
    fsync_buckets: [AtomicU64; 13],
    fsync_sum_us: AtomicU64,
    fsync_failures: AtomicU64,
    auth_failures: AtomicU64,
}

/// The process's store metrics.
pub static METRICS: StoreMetrics = StoreMetrics {
    fsync_buckets: [const { AtomicU64::new(0) }; 13],
    fsync_sum_us: AtomicU64::new(0),
    fsync_failures: AtomicU64::new(0),
    auth_failures: AtomicU64::new(0),
};

/// A snapshot for exposition.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Cumulative counts per bucket of [`FSYNC_BUCKETS_US`] plus +Inf (Prometheus style).
    pub fsync_cumulative: Vec<u64>,
    /// Sum of fsync durations in seconds.
    pub fsync_sum_seconds: f64,
    /// Failed fsyncs.
    pub fsync_failures: u64,
    /// Blocks that did not authenticate when read.
    pub auth_failures: u64,
}

impl StoreMetrics {
    /// Records one fsync.
    pub fn fsync(&self, took: Duration, ok: bool) {
        if !ok {
            self.fsync_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = FSYNC_BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(FSYNC_BUCKETS_US.len());
        if let Some(b) = self.fsync_buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.fsync_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Records a block that failed to authenticate.
    pub fn auth_failure(&self) {
        self.auth_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The current figures.
    pub fn snapshot(&self) -> Snapshot {
        let mut acc = 0;
        let fsync_cumulative = self
            .fsync_buckets
            .iter()
            .map(|b| {
                acc += b.load(Ordering::Relaxed);
                acc
            })
            .collect();
        Snapshot {
            fsync_cumulative,
            fsync_sum_seconds: self.fsync_sum_us.load(Ordering::Relaxed) as f64 / 1e6,
            fsync_failures: self.fsync_failures.load(Ordering::Relaxed),
            auth_failures: self.auth_failures.load(Ordering::Relaxed),
        }
    }
}
