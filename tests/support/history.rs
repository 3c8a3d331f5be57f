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

/// A core request as it ended: (invoked ms, completed ms, request, answer or why none).
pub type Request = (u128, u128, String, Result<String, String>);

/// The operations of one run, from every client, as they complete.
pub struct History {
    start: Instant,
    ops: Mutex<Vec<Op>>,
    /// Faults as they were injected: (ms, what).
    faults: Mutex<Vec<(u128, String)>>,
    /// Core requests (see [`History::requests`]).
    requests: Mutex<Vec<Request>>,
}

impl Default for History {
    fn default() -> Self {
        History {
            start: Instant::now(),
            ops: Mutex::default(),
            faults: Mutex::default(),
            requests: Mutex::default(),
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

    /// Records core requests as they ended — (invoked ms, completed ms, request, answer or
    /// why none) — for the JSON-lines history (`f`: `request`; not judged by
    /// [`check_stream`]).
    pub fn requests(&self, requests: &[Request]) {
        self.requests
            .lock()
            .unwrap()
            .extend(requests.iter().cloned());
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
        for (invoked, completed, request, answer) in self.requests.lock().unwrap().iter() {
            let (kind, answer, error) = match answer {
                Ok(a) => ("ok", Some(a.as_str()), None),
                Err(e) if e.contains("timed out") => ("unknown", None, Some(e.as_str())),
                Err(e) => ("fail", None, Some(e.as_str())),
            };
            lines.push((
                *invoked,
                serde_json::json!({
                    "type": kind, "process": 99, "f": "request", "value": request,
                    "answer": answer, "error": error,
                    "invoke_ms": invoked, "complete_ms": completed,
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

/// What a key-value operation was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvCall {
    /// A read of the key's latest entry.
    Read,
    /// A write of `value` that expects the key's revision to be `expected` (0: the key must
    /// not exist) — `update`, or `create` for 0. Values are unique across the history.
    Write { value: String, expected: u64 },
}

/// How a key-value operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvOutcome {
    /// A read's answer: the entry's revision and value, or `None` (no entry).
    Read(Option<(u64, String)>),
    /// A write acknowledged at this revision.
    Written(u64),
    /// A write refused because the key's revision was not the expected one.
    Refused,
    /// No answer, or another error: it may or may not have happened.
    Unknown,
}

/// One key-value operation.
#[derive(Debug, Clone)]
pub struct KvOp {
    pub process: usize,
    pub key: String,
    pub call: KvCall,
    pub invoked_ms: u128,
    pub completed_ms: u128,
    pub outcome: KvOutcome,
}

/// Key-value operations from every client.
#[derive(Default)]
pub struct KvHistory {
    ops: Mutex<Vec<KvOp>>,
}

impl KvHistory {
    /// Records a completed operation.
    pub fn record(&self, op: KvOp) {
        self.ops.lock().unwrap().push(op);
    }

    /// Every operation so far.
    pub fn ops(&self) -> Vec<KvOp> {
        self.ops.lock().unwrap().clone()
    }

    /// Appends the operations to a JSON-lines history (`f`: `kv-read` or `kv-write`).
    pub fn append_jsonl(&self, path: &Path) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        for op in self.ops.lock().unwrap().iter() {
            let (f_name, value, expected) = match &op.call {
                KvCall::Read => ("kv-read", None, None),
                KvCall::Write { value, expected } => {
                    ("kv-write", Some(value.as_str()), Some(*expected))
                }
            };
            let (kind, rev, read) = match &op.outcome {
                KvOutcome::Read(r) => (
                    "ok",
                    r.as_ref().map(|(r, _)| *r),
                    r.as_ref().map(|(_, v)| v.as_str()),
                ),
                KvOutcome::Written(r) => ("ok", Some(*r), None),
                KvOutcome::Refused => ("fail", None, None),
                KvOutcome::Unknown => ("unknown", None, None),
            };
            let line = serde_json::json!({
                "type": kind, "process": op.process, "f": f_name, "key": op.key,
                "value": value, "expected": expected, "read": read, "seq": rev,
                "invoke_ms": op.invoked_ms, "complete_ms": op.completed_ms,
            });
            writeln!(f, "{line}").unwrap();
        }
    }
}

/// Whether the key-value history is linearizable, key by key, given every revision the
/// bucket holds afterwards (`stored`: revision → (key, value); the bucket keeps enough history
/// that no revision was dropped).
///
/// Every written value is unique, so `stored` says which writes took effect and where — the
/// unknown ones included — and the revisions order them: a register whose write order is
/// known is linearizable exactly when
/// - every acknowledged write is stored at its revision, and nothing is stored that no one
///   wrote;
/// - each stored write expected the revision of the key's write before it (0 for the
///   first): compare-and-set held;
/// - a write that completed before another write of the key was invoked has the lower
///   revision (real-time order);
/// - a refused write had, somewhere within its time, a revision other than the expected one
///   (not refused while the key stood at exactly that revision throughout);
/// - a read returned a write that was invoked before the read completed, and no write of the
///   key with a higher revision had completed before the read was invoked (no stale read).
///
/// Returns what is wrong (empty: linearizable).
pub fn check_kv(ops: &[KvOp], stored: &BTreeMap<u64, (String, String)>) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut writes: HashMap<&str, &KvOp> = HashMap::new();
    for op in ops {
        if let KvCall::Write { value, .. } = &op.call {
            writes.insert(value.as_str(), op);
        }
    }
    // Each key's stored writes in revision order: (revision, op).
    let mut order: BTreeMap<&str, Vec<(u64, &KvOp)>> = BTreeMap::new();
    for (rev, (key, value)) in stored {
        match writes.get(value.as_str()) {
            Some(op) if op.key == *key => order.entry(key.as_str()).or_default().push((*rev, op)),
            _ => wrong.push(format!(
                "revision {rev} holds {key}={value}, which nobody wrote"
            )),
        }
    }
    let rev_of: HashMap<&str, u64> = stored
        .iter()
        .map(|(rev, (_, v))| (v.as_str(), *rev))
        .collect();
    for op in ops {
        if let (KvCall::Write { value, .. }, KvOutcome::Written(rev)) = (&op.call, &op.outcome) {
            match rev_of.get(value.as_str()) {
                Some(r) if r == rev => {}
                Some(r) => wrong.push(format!(
                    "{}={value} was acknowledged at revision {rev} but is stored at {r}",
                    op.key
                )),
                None => wrong.push(format!(
                    "{}={value} was acknowledged at revision {rev} and is lost",
                    op.key
                )),
            }
        }
        if let (KvCall::Write { value, .. }, KvOutcome::Refused) = (&op.call, &op.outcome) {
            if rev_of.contains_key(value.as_str()) {
                wrong.push(format!("{}={value} was refused but is stored", op.key));
            }
        }
    }
    for (key, revs) in &order {
        let mut prev = 0;
        for (rev, op) in revs {
            if let KvCall::Write { value, expected } = &op.call {
                if *expected != prev {
                    wrong.push(format!(
                        "{key}={value} expected revision {expected} but was stored after revision {prev}"
                    ));
                }
            }
            prev = *rev;
        }
        // Real-time order: no write stored later completed (known) before an earlier one
        // was invoked.
        for (i, (ra, a)) in revs.iter().enumerate() {
            for (rb, b) in &revs[i + 1..] {
                let b_done = matches!(b.outcome, KvOutcome::Written(_));
                if b_done && b.completed_ms < a.invoked_ms {
                    wrong.push(format!(
                        "{key}: revision {rb} completed at {} ms, before revision {ra} was invoked at {} ms",
                        b.completed_ms, a.invoked_ms
                    ));
                }
            }
        }
    }
    let empty = Vec::new();
    for op in ops {
        let revs = order.get(op.key.as_str()).unwrap_or(&empty);
        // When the key's value `rev` was in place: from its write's invocation (earliest)
        // until the next write's completion (latest; unknown: never).
        let span = |rev: u64| -> (u128, u128) {
            let at = revs.iter().position(|(r, _)| *r == rev);
            let from = at.map_or(0, |i| revs[i].1.invoked_ms);
            let until = at
                .and_then(|i| revs.get(i + 1))
                .or(if rev == 0 { revs.first() } else { None })
                .map_or(u128::MAX, |(_, next)| match next.outcome {
                    KvOutcome::Written(_) => next.completed_ms,
                    _ => u128::MAX,
                });
            (from, until)
        };
        match (&op.call, &op.outcome) {
            (KvCall::Read, KvOutcome::Read(got)) => {
                let rev = got.as_ref().map_or(0, |(r, _)| *r);
                if let Some((r, v)) = got {
                    if stored.get(r).is_none_or(|(k, sv)| *k != op.key || sv != v) {
                        wrong.push(format!(
                            "a read of {} returned revision {r} = {v}, which the bucket does not hold",
                            op.key
                        ));
                        continue;
                    }
                }
                let (from, until) = span(rev);
                if from > op.completed_ms {
                    wrong.push(format!(
                        "a read of {} at {}–{} ms returned revision {rev}, written only from {from} ms",
                        op.key, op.invoked_ms, op.completed_ms
                    ));
                }
                if until < op.invoked_ms {
                    wrong.push(format!(
                        "a stale read of {} at {}–{} ms: revision {rev} was replaced by {until} ms",
                        op.key, op.invoked_ms, op.completed_ms
                    ));
                }
            }
            (KvCall::Write { value, expected }, KvOutcome::Refused) => {
                // Refused while the key stood at `expected` for the whole call: wrong.
                let stood = *expected == 0 && revs.is_empty()
                    || revs.iter().any(|(r, w)| {
                        *r == *expected && matches!(w.outcome, KvOutcome::Written(_))
                    });
                // The earliest the key could have moved on: the next write's invocation.
                let at = revs.iter().position(|(r, _)| *r == *expected);
                let next = match at {
                    Some(i) => revs.get(i + 1),
                    None if *expected == 0 => revs.first(),
                    None => None,
                };
                let until = next.map_or(u128::MAX, |(_, w)| w.invoked_ms);
                let set_by = revs.iter().find(|(r, _)| *r == *expected);
                let settled_before = set_by.is_none_or(|(_, w)| w.completed_ms < op.invoked_ms);
                if stood && settled_before && until > op.completed_ms {
                    wrong.push(format!(
                        "{}={value} was refused at {}–{} ms though the key stood at revision {expected} throughout",
                        op.key, op.invoked_ms, op.completed_ms
                    ));
                }
            }
            _ => {}
        }
    }
    wrong
}
