//! The live side of a bench run: a counter the scenarios bump per completed operation, sampled
//! every [`TICK`] into a [`Timeline`] (throughput over time for `--report`) and shown as a
//! progress bar (see [`crate::ctl::progress`]).
//!
//! A scenario may have phases (js-consume preloads, then consumes; kv-get puts, then gets).
//! [`Meter::begin`] starts one: the counter, the bar and the timeline restart, so what remains
//! at the end is the measured (last) phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tokio_util::sync::CancellationToken;

/// How often the counter is sampled.
pub const TICK: Duration = Duration::from_millis(10);

/// Cumulative completions of one phase over time.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// What was counted (the phase label, e.g. `deliver`).
    pub label: String,
    /// `(seconds since the phase began, operations completed so far)`, in time order.
    pub points: Vec<(f64, u64)>,
}

impl Timeline {
    /// The samples up to the one where the count reached its final value (what follows is
    /// the scenario's cleanup, not throughput).
    fn active(&self) -> &[(f64, u64)] {
        let end = self.points.last().map_or(0, |l| l.1);
        let n = self
            .points
            .iter()
            .position(|p| p.1 >= end)
            .map_or(0, |i| i + 1);
        self.points.get(..n).unwrap_or(&[])
    }

    /// The interval [`Timeline::rates`] merges samples into: at least [`TICK`], and long enough
    /// for at most `max_points` intervals.
    pub fn step(&self, max_points: usize) -> Duration {
        let pts = self.active();
        let span = match (pts.first(), pts.last()) {
            (Some(f), Some(l)) => l.0 - f.0,
            _ => 0.0,
        };
        Duration::from_secs_f64((span / max_points.max(1) as f64).max(TICK.as_secs_f64()))
    }

    /// Throughput over time: `(mid-interval seconds, operations per second)` over intervals of
    /// [`Timeline::step`].
    pub fn rates(&self, max_points: usize) -> Vec<(f64, f64)> {
        let pts = self.active();
        let (Some(first), Some(last)) = (pts.first(), pts.last()) else {
            return vec![];
        };
        if last.0 <= first.0 {
            return vec![];
        }
        let step = self.step(max_points).as_secs_f64();
        let mut out = Vec::new();
        let mut prev = *first;
        for &(t, n) in pts {
            let dt = t - prev.0;
            if dt >= step || (t == last.0 && dt > 0.0) {
                out.push(((t + prev.0) / 2.0, n.saturating_sub(prev.1) as f64 / dt));
                prev = (t, n);
            }
        }
        out
    }
}

/// What the sampler and [`Meter::begin`] share.
#[derive(Debug)]
struct State {
    t0: Instant,
    timeline: Timeline,
}

/// Counts completed operations; see the module docs.
#[derive(Debug, Clone)]
pub struct Meter {
    done: Arc<AtomicU64>,
    state: Arc<Mutex<State>>,
    bar: ProgressBar,
    stop: CancellationToken,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Meter {
    /// A meter drawing `bar` (hidden for no bar). The sampler runs on the current tokio runtime
    /// until [`Meter::finish`].
    pub fn start(bar: ProgressBar) -> Self {
        let m = Meter {
            done: Arc::new(AtomicU64::new(0)),
            state: Arc::new(Mutex::new(State {
                t0: Instant::now(),
                timeline: Timeline::default(),
            })),
            bar,
            stop: CancellationToken::new(),
        };
        let s = m.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = s.stop.cancelled() => return,
                    _ = tick.tick() => s.sample(),
                }
            }
        });
        m
    }

    /// A meter with no sampler and no bar (tests, library callers).
    pub fn idle() -> Self {
        Meter {
            done: Arc::new(AtomicU64::new(0)),
            state: Arc::new(Mutex::new(State {
                t0: Instant::now(),
                timeline: Timeline::default(),
            })),
            bar: ProgressBar::hidden(),
            stop: CancellationToken::new(),
        }
    }

    /// Starts a phase of `total` operations: counter, bar and timeline restart.
    pub fn begin(&self, label: &str, total: u64) {
        let mut st = lock(&self.state);
        self.done.store(0, Ordering::Relaxed);
        st.t0 = Instant::now();
        st.timeline = Timeline {
            label: label.to_owned(),
            points: vec![(0.0, 0)],
        };
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_message(label.to_owned());
        self.bar.reset_eta();
    }

    /// The counter of the current phase (shared with tasks that bump it).
    pub fn counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.done)
    }

    /// One more operation completed.
    pub fn inc(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    fn sample(&self) {
        let mut st = lock(&self.state);
        let n = self.done.load(Ordering::Relaxed);
        let t = st.t0.elapsed().as_secs_f64();
        if !st.timeline.label.is_empty() {
            st.timeline.points.push((t, n));
        }
        self.bar.set_position(n);
    }

    /// Stops the sampler, clears the bar and returns the last phase's timeline.
    pub fn finish(&self) -> Timeline {
        self.stop.cancel();
        self.sample();
        self.bar.finish_and_clear();
        lock(&self.state).timeline.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_merge_samples() {
        let t = Timeline {
            label: "x".into(),
            points: (0..=100)
                .map(|i| (f64::from(i) * 0.01, i as u64 * 100))
                .collect(),
        };
        let r = t.rates(10);
        assert_eq!(r.len(), 10);
        for (_, rate) in &r {
            assert!((rate - 10_000.0).abs() < 1.0, "{rate}");
        }
        assert!(Timeline::default().rates(10).is_empty());
        // Samples after the last completion (cleanup) are not throughput.
        let mut idle = t.clone();
        idle.points.push((2.0, 10_000));
        assert_eq!(idle.rates(10), r);
    }

    #[tokio::test]
    async fn phases_restart_the_timeline() {
        let m = Meter::start(ProgressBar::hidden());
        m.begin("preload", 10);
        m.inc();
        tokio::time::sleep(TICK * 3).await;
        m.begin("measure", 5);
        for _ in 0..5 {
            m.inc();
        }
        let t = m.finish();
        assert_eq!(t.label, "measure");
        assert_eq!(t.points.last().map(|p| p.1), Some(5));
    }
}
