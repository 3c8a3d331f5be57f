//! Byte-rate pacing of background work: a live audit's reads, a re-sealing's writes.
//!
//! Why one type: both leave the disk's bandwidth to the clients the same way — after each
//! block they wait until the bytes handled so far are due at the pace. A deadline from the
//! start, not a sleep per block, so many short blocks do not add up to a slower rate and one
//! slow block is made up for by the next ones.

use std::time::{Duration, Instant};

/// A byte rate kept since its start.
#[derive(Debug)]
pub struct Pace {
    per_sec: u64,
    started: Instant,
}

impl Pace {
    /// `per_sec` bytes a second from now; 0: unpaced.
    #[must_use]
    pub fn new(per_sec: u64) -> Self {
        Pace {
            per_sec,
            started: Instant::now(),
        }
    }

    /// Waits until `total` bytes (counted since the start) are due at the pace.
    pub fn wait_until_due(&self, total: u64) {
        if self.per_sec == 0 {
            return;
        }
        let due = Duration::from_secs_f64(total as f64 / self.per_sec as f64);
        // Nothing unparks the caller: a spurious wake-up only goes round once more.
        while let Some(left) = due.checked_sub(self.started.elapsed()) {
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_let_through_no_sooner_than_the_pace_allows() {
        let pace = Pace::new(1_000_000);
        for total in [10_000u64, 30_000, 60_000] {
            pace.wait_until_due(total);
            assert!(pace.started.elapsed() >= Duration::from_micros(total));
        }
        // Unpaced: no wait, whatever the count.
        let start = Instant::now();
        Pace::new(0).wait_until_due(u64::MAX);
        assert!(start.elapsed() < Duration::from_secs(60));
    }
}
