//! The `Nats-Msg-Id` window: ids seen within `duplicate_window`, with the sequence each was
//! stored at. Rebuilt at startup from the stored messages' headers, so dedupe survives a
//! restart.
//!
//! The window is bounded by count as well as by time: at most [`MAX_IDS`] ids per stream. A
//! stream that stores more distinct ids than that within its `duplicate_window` forgets its
//! oldest ones early (each one counted in [`EARLY_EVICTIONS`], `/metrics`
//! `sealstream_jetstream_dedupe_early_evictions_total`): a duplicate sent that much later is
//! stored again, which is the window working as if it were shorter — never a message lost.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most ids one stream's window holds (about 150 bytes each with 36-byte ids: ~150 MiB).
pub const MAX_IDS: usize = 1 << 20;

/// Ids dropped from a window before `duplicate_window` had passed, because it was full.
pub static EARLY_EVICTIONS: AtomicU64 = AtomicU64::new(0);

/// Ids held over every stream's window (`sealstream_jetstream_dedupe_ids`).
pub static HELD: AtomicU64 = AtomicU64::new(0);

/// Ids stored recently.
#[derive(Debug, Default)]
pub(crate) struct Dedupe {
    ids: HashMap<String, u64>,
    order: VecDeque<(i64, String)>,
}

impl Drop for Dedupe {
    fn drop(&mut self) {
        HELD.fetch_sub(self.order.len() as u64, Ordering::Relaxed);
    }
}

impl Dedupe {
    /// Forgets ids older than `window` nanoseconds before `now`.
    pub(crate) fn prune(&mut self, now: i64, window: i64) {
        let cutoff = now.saturating_sub(window);
        while let Some((ts, _)) = self.order.front() {
            if *ts >= cutoff {
                break;
            }
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((_, id)) = self.order.pop_front() {
            self.ids.remove(&id);
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The sequence `id` was stored at, if within the window.
    pub(crate) fn get(&self, id: &str) -> Option<u64> {
        self.ids.get(id).copied()
    }

    /// Records `id` stored at `seq` at time `ts`.
    pub(crate) fn insert(&mut self, id: String, seq: u64, ts: i64) {
        self.insert_bounded(id, seq, ts, MAX_IDS);
    }

    fn insert_bounded(&mut self, id: String, seq: u64, ts: i64, max: usize) {
        if self.ids.insert(id.clone(), seq).is_none() {
            self.order.push_back((ts, id));
            HELD.fetch_add(1, Ordering::Relaxed);
            while self.order.len() > max {
                self.pop_oldest();
                EARLY_EVICTIONS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Every id held, oldest first: `(time, id, sequence)` (a snapshot's image of the window).
    pub(crate) fn entries(&self) -> Vec<(i64, String, u64)> {
        self.order
            .iter()
            .filter_map(|(ts, id)| self.ids.get(id).map(|seq| (*ts, id.clone(), *seq)))
            .collect()
    }

    /// Records in timestamp order (startup rebuild walks backwards; it collects then calls
    /// this oldest first).
    pub(crate) fn clear(&mut self) {
        HELD.fetch_sub(self.order.len() as u64, Ordering::Relaxed);
        self.ids.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_prunes_old_ids() {
        let mut d = Dedupe::default();
        d.insert("a".into(), 1, 100);
        d.insert("b".into(), 2, 200);
        d.prune(250, 100);
        assert_eq!(d.get("a"), None);
        assert_eq!(d.get("b"), Some(2));
    }

    #[test]
    fn a_full_window_forgets_its_oldest_ids_first() {
        let mut d = Dedupe::default();
        let before = EARLY_EVICTIONS.load(Ordering::Relaxed);
        for (i, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
            d.insert_bounded(id.into(), i as u64 + 1, 100, 3);
        }
        assert_eq!(d.get("a"), None);
        assert_eq!(d.get("b"), Some(2));
        assert_eq!(d.get("d"), Some(4));
        assert_eq!(d.order.len(), 3);
        assert!(EARLY_EVICTIONS.load(Ordering::Relaxed) > before);
        // The same id again is not a second entry.
        d.insert_bounded("d".into(), 9, 100, 3);
        assert_eq!(d.order.len(), 3);
    }
}
