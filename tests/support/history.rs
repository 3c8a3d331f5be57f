//! A history of client operations and the checker that judges a stream against it (issue 16).
//!
//! Every operation a workload performs is recorded when it is invoked and when it completes:
//! `ok` (the server acknowledged it, with the sequence it gave), `fail` (the server refused it
//! in words) or `unknown` (no answer in time). As with any NATS client, a failed or unanswered
//! publish may still have been stored — it may commit later — so only `ok` binds the server.
//!
//! The checker's rules, over the stream every server holds after the faults healed:
//! - every acknowledged publish is in the stream exactly once, at the sequence its ack gave;
//! - nothing is in the stream that no client published;
//! - sequences are dense from the first to the last and never reused;
//! - each publisher's messages are in the stream in the order it published them;
//! - every server holds the same stream.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged, at this stream sequence.
    Ok(u64),
    /// Refused (the server's words).
    Fail(String),
    /// No answer before the client gave up.
    Unknown,
}

/// One operation.
#[derive(Debug, Clone)]
pub struct Op {
    /// Which client process performed it.
    pub process: usize,
    /// What it published (unique per operation: it is also its `Nats-Msg-Id`).
    pub value: String,
    /// Milliseconds since the history began.
    pub invoked_ms: u128,
    /// When it completed.
    pub completed_ms: u128,
    /// How.
    pub outcome: Outcome,
}

/// The operations of one run, from every client, as they complete.
pub struct History {
    start: Instant,
    ops: Mutex<Vec<Op>>,
    /// Faults as they were injected: (ms, what).
    faults: Mutex<Vec<(u128, String)>>,
}

impl Default for History {
    fn default() -> Self {
        History {
            start: Instant::now(),
            ops: Mutex::default(),
            faults: Mutex::default(),
        }
    }
}

impl History {
    /// Milliseconds since the history began.
    pub fn now_ms(&self) -> u128 {
        self.start.elapsed().as_millis()
    }

    /// Records a completed operation.
    pub fn record(&self, process: usize, value: String, invoked_ms: u128, outcome: Outcome) {
        let completed_ms = self.now_ms();
        self.ops.lock().unwrap().push(Op {
            process,
            value,
            invoked_ms,
            completed_ms,
            outcome,
        });
    }

    /// Records a fault.
    pub fn fault(&self, what: String) {
        let at = self.now_ms();
        self.faults.lock().unwrap().push((at, what));
    }

    /// Every operation so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }

    /// The history as JSON lines (faults and operations, by time).
    pub fn write_jsonl(&self, path: &Path) {
        let mut lines: Vec<(u128, String)> = Vec::new();
        for (at, what) in self.faults.lock().unwrap().iter() {
            lines.push((
                *at,
                serde_json::json!({"type": "fault", "at_ms": at, "fault": what}).to_string(),
            ));
        }
        for op in self.ops.lock().unwrap().iter() {
            let (kind, seq) = match &op.outcome {
                Outcome::Ok(seq) => ("ok", Some(*seq)),
                Outcome::Fail(_) => ("fail", None),
                Outcome::Unknown => ("unknown", None),
            };
            lines.push((
                op.invoked_ms,
                serde_json::json!({
                    "type": kind, "process": op.process, "f": "publish", "value": op.value,
                    "invoke_ms": op.invoked_ms, "complete_ms": op.completed_ms, "seq": seq,
                    "error": match &op.outcome { Outcome::Fail(e) => Some(e.as_str()), _ => None },
                })
                .to_string(),
            ));
        }
        lines.sort_by_key(|(at, _)| *at);
        let mut f = std::fs::File::create(path).unwrap();
        for (_, l) in lines {
            writeln!(f, "{l}").unwrap();
        }
    }
}

/// What the checker found wrong (empty: the history holds).
pub fn check_stream(ops: &[Op], stored: &BTreeMap<u64, String>) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut at: HashMap<&str, Vec<u64>> = HashMap::new();
    for (seq, v) in stored {
        at.entry(v.as_str()).or_default().push(*seq);
    }
    for (v, seqs) in &at {
        if seqs.len() > 1 {
            wrong.push(format!("{v} stored {} times, at {seqs:?}", seqs.len()));
        }
    }
    let published: HashMap<&str, &Op> = ops.iter().map(|o| (o.value.as_str(), o)).collect();
    for (seq, v) in stored {
        if !published.contains_key(v.as_str()) {
            wrong.push(format!("sequence {seq} holds {v}, which nobody published"));
        }
    }
    for op in ops {
        if let Outcome::Ok(seq) = op.outcome {
            match stored.get(&seq) {
                Some(v) if *v == op.value => {}
                Some(v) => wrong.push(format!(
                    "{} was acknowledged at {seq}, which holds {v}",
                    op.value
                )),
                None => wrong.push(format!(
                    "{} was acknowledged at {seq} and is lost",
                    op.value
                )),
            }
        }
    }
    if let (Some(first), Some(last)) = (stored.keys().next(), stored.keys().last()) {
        let expected = last - first + 1;
        if *first != 1 || expected != stored.len() as u64 {
            wrong.push(format!(
                "sequences are not dense: {} messages between {first} and {last}",
                stored.len()
            ));
        }
    }
    let mut by_process: BTreeMap<usize, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_process.entry(op.process).or_default().push(op);
    }
    for (p, mut mine) in by_process {
        mine.sort_by_key(|o| o.invoked_ms);
        let mut last: Option<(u64, &str)> = None;
        for op in mine {
            let Some(seqs) = at.get(op.value.as_str()) else {
                continue;
            };
            let seq = seqs[0];
            if let Some((prev, pv)) = last {
                if seq < prev {
                    wrong.push(format!(
                        "publisher {p}: {} (sequence {seq}) is stored before {pv} (sequence {prev}), which it published first",
                        op.value
                    ));
                }
            }
            last = Some((seq, op.value.as_str()));
        }
    }
    wrong
}
