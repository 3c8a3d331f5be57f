//! The `Nats-Msg-Id` window: ids seen within `duplicate_window`, with the sequence each was
//! stored at. Rebuilt at startup from the stored messages' headers, so dedupe survives a
//! restart.

use std::collections::{HashMap, VecDeque};

/// Ids stored recently.
#[derive(Debug, Default)]
pub(crate) struct Dedupe {
    ids: HashMap<String, u64>,
    order: VecDeque<(i64, String)>,
}

impl Dedupe {
    /// Forgets ids older than `window` nanoseconds before `now`.
    pub(crate) fn prune(&mut self, now: i64, window: i64) {
        let cutoff = now.saturating_sub(window);
        while let Some((ts, _)) = self.order.front() {
            if *ts >= cutoff {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                self.ids.remove(&id);
            }
        }
    }

    /// The sequence `id` was stored at, if within the window.
    pub(crate) fn get(&self, id: &str) -> Option<u64> {
        self.ids.get(id).copied()
    }

    /// Records `id` stored at `seq` at time `ts`.
    pub(crate) fn insert(&mut self, id: String, seq: u64, ts: i64) {
        if self.ids.insert(id.clone(), seq).is_none() {
            self.order.push_back((ts, id));
        }
    }

    /// Records in timestamp order (startup rebuild walks backwards; it collects then calls
    /// this oldest first).
    pub(crate) fn clear(&mut self) {
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
}
