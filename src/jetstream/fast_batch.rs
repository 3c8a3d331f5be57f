//! Fast-ingest batches (`allow_batched`, nats-server 2.14+): a publisher streams many messages
//! without waiting for a pub-ack each; every message is stored as it arrives (not atomic), and
//! the server paces the publisher with flow acks.
//!
//! The batch travels in the reply subject, which the publisher subscribes to:
//! `<inbox prefix>.<batch id>.<flow>.<gap mode>.<batch seq>.<op>.$FI`, where `op` is
//! 0 start (batch seq 1), 1 append, 2 commit (store this message and end), 3 end of batch
//! (end without storing this message), 4 ping. `flow` is the ack interval the publisher asks
//! for (0: the server's default), `gap mode` `ok` or `fail`. What the server sends to the
//! reply subject, as nats-server 2.15.1 does:
//! - `{"type":"ack","seq":N,"msgs":M}` — everything up to batch seq N is stored; send the next
//!   M. On start (with N 0), then each time the stored batch seq passes a multiple of M, and
//!   in answer to a ping.
//! - `{"type":"gap","last_seq":E,"seq":S}` — S arrived where E was expected. A gap forward is
//!   reported and the batch goes on (`ok`) or ends (`fail`); a sequence going back ends it.
//! - `{"type":"err","seq":S,"error":{..}}` — message S was not stored (a limit, an
//!   expectation); the batch goes on.
//! - the final pub-ack `{"stream","seq","batch","count"}` when the batch ends.
//!
//! This module is the bookkeeping (pure); [`super::stream::Stream`] stores and replies.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::json;

use super::api::errors::ErrorKind;
use super::api::ApiError;

/// The ack interval when the publisher leaves it to the server (`flow` 0).
pub const DEFAULT_FLOW: u64 = 10;
/// The largest ack interval granted: what one batch may have unacknowledged is bounded.
pub const MAX_FLOW: u64 = 500;
/// Open fast batches per stream.
pub const MAX_OPEN: usize = 50;
/// A batch that sent nothing for this long is forgotten (nanos).
pub const IDLE_NANOS: i64 = 10_000_000_000;
/// Longest batch id.
pub const MAX_ID_LEN: usize = 64;

/// What a fast-ingest reply subject asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// First message (batch seq 1).
    Start,
    /// A message in the middle.
    Append,
    /// Last message: store it and end.
    Commit,
    /// End without storing this message.
    EndOfBatch,
    /// Ask where the server is.
    Ping,
}

/// A parsed fast-ingest reply subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastReply {
    /// Batch id.
    pub batch: String,
    /// Requested ack interval (0: default).
    pub flow: u64,
    /// Whether a gap ends the batch.
    pub gap_fail: bool,
    /// Batch sequence of this message.
    pub seq: u64,
    /// What it asks.
    pub op: Op,
}

/// `400 / 10205 batch publish is disabled` (a stream without `allow_batched`).
pub fn disabled() -> ApiError {
    ApiError::from_kind(ErrorKind::FastBatchDisabled)
}
fn pattern_invalid() -> ApiError {
    ApiError::from_kind(ErrorKind::FastBatchPatternInvalid)
}

/// Reads a reply subject: `None` when it is not a fast-ingest one (it does not end in
/// `.$FI`), `Some(Err(10206/10207))` when it is one but malformed.
pub fn parse_reply(reply: &str) -> Option<Result<FastReply, ApiError>> {
    let rest = reply.strip_suffix(".$FI")?;
    let mut t = rest.rsplitn(6, '.');
    let (Some(op), Some(seq), Some(gap), Some(flow), Some(batch), Some(prefix)) =
        (t.next(), t.next(), t.next(), t.next(), t.next(), t.next())
    else {
        return Some(Err(pattern_invalid()));
    };
    if prefix.is_empty() || batch.is_empty() {
        return Some(Err(pattern_invalid()));
    }
    if batch.len() > MAX_ID_LEN {
        return Some(Err(ApiError::from_kind(ErrorKind::FastBatchIdInvalid)));
    }
    let op = match op {
        "0" => Op::Start,
        "1" => Op::Append,
        "2" => Op::Commit,
        "3" => Op::EndOfBatch,
        "4" => Op::Ping,
        _ => return Some(Err(pattern_invalid())),
    };
    let gap_fail = match gap {
        "ok" => false,
        "fail" => true,
        _ => return Some(Err(pattern_invalid())),
    };
    let (Ok(seq), Ok(flow)) = (seq.parse::<u64>(), flow.parse::<u64>()) else {
        return Some(Err(pattern_invalid()));
    };
    // Sequence 1 is the start, and only the start.
    if seq == 0 || (seq == 1) != (op == Op::Start) && op != Op::Ping {
        return Some(Err(pattern_invalid()));
    }
    Some(Ok(FastReply {
        batch: batch.to_owned(),
        flow,
        gap_fail,
        seq,
        op,
    }))
}

/// An open batch.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Open {
    /// Ack interval granted.
    msgs: u64,
    gap_fail: bool,
    /// The batch sequence expected next.
    next: u64,
    /// The last batch sequence acked.
    acked: u64,
    /// The stream sequence of the last message stored for it.
    last_stored: u64,
    last_active: i64,
}

/// What to do with a fast-ingest message.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    /// Store it; `then_end`: it is the commit.
    Store {
        /// Reply first (the start's flow ack, a gap report).
        before: Vec<Bytes>,
        /// It is the commit message.
        then_end: bool,
    },
    /// Store nothing; send these.
    Reply(Vec<Bytes>),
    /// Store nothing and end the batch (end of batch, or a gap that ends it), after these.
    End {
        /// Sent before the final pub-ack.
        before: Vec<Bytes>,
        /// The batch sequence the final pub-ack counts to.
        count: u64,
    },
}

fn flow_ack(seq: u64, msgs: u64) -> Bytes {
    Bytes::from(format!(r#"{{"type":"ack","seq":{seq},"msgs":{msgs}}}"#))
}

fn gap(expected: u64, seq: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"type":"gap","last_seq":{expected},"seq":{seq}}}"#
    ))
}

/// `{"type":"err","seq":S,"error":{..}}`: message S was not stored.
pub fn message_error(seq: u64, e: &ApiError) -> Bytes {
    Bytes::from(format!(
        r#"{{"type":"err","seq":{seq},"error":{}}}"#,
        e.to_json()
    ))
}

/// The final pub-ack of a batch.
pub fn final_ack(stream: &str, last_stored: u64, batch: &str, count: u64) -> Bytes {
    Bytes::from(
        json!({"stream": stream, "seq": last_stored, "batch": batch, "count": count}).to_string(),
    )
}

/// The open fast batches of one stream.
#[derive(Debug, Default)]
pub struct FastBatches {
    open: HashMap<String, Open>,
}

impl FastBatches {
    /// Every open batch by id (a snapshot's image).
    pub fn export(&self) -> Vec<(String, Open)> {
        let mut v: Vec<(String, Open)> = self
            .open
            .iter()
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The batches [`FastBatches::export`] gave.
    pub fn import(open: Vec<(String, Open)>) -> Self {
        FastBatches {
            open: open.into_iter().collect(),
        }
    }

    /// Decides what message `r` of its batch does, and moves the batch on.
    ///
    /// # Errors
    /// `10208` for a batch this stream does not have open, `10211` when [`MAX_OPEN`] are.
    pub fn admit(&mut self, r: &FastReply, now: i64) -> Result<Admit, ApiError> {
        if !self.open.contains_key(&r.batch) {
            if r.op != Op::Start {
                return Err(ApiError::from_kind(ErrorKind::FastBatchUnknown));
            }
            if self.open.len() >= MAX_OPEN {
                return Err(ApiError::from_kind(ErrorKind::FastBatchTooMany));
            }
            let msgs = match r.flow {
                0 => DEFAULT_FLOW,
                f => f.min(MAX_FLOW),
            };
            self.open.insert(
                r.batch.clone(),
                Open {
                    msgs,
                    gap_fail: r.gap_fail,
                    next: 2,
                    acked: 0,
                    last_stored: 0,
                    last_active: now,
                },
            );
            return Ok(Admit::Store {
                before: vec![flow_ack(0, msgs)],
                then_end: false,
            });
        }
        let Some(b) = self.open.get_mut(&r.batch) else {
            return Err(ApiError::from_kind(ErrorKind::FastBatchUnknown));
        };
        b.last_active = now;
        if r.op == Op::Ping {
            return Ok(Admit::Reply(vec![flow_ack(b.acked, b.msgs)]));
        }
        let mut before = Vec::new();
        if r.seq < b.next {
            // Going back (a repeat): reported, and the batch ends where it was.
            return Ok(Admit::End {
                before: vec![gap(b.next, r.seq)],
                count: b.next - 1,
            });
        }
        if r.seq > b.next {
            before.push(gap(b.next, r.seq));
            if b.gap_fail {
                return Ok(Admit::End {
                    before,
                    count: b.next - 1,
                });
            }
        }
        b.next = r.seq + 1;
        if r.op == Op::EndOfBatch {
            return Ok(Admit::End {
                before,
                count: r.seq - 1,
            });
        }
        Ok(Admit::Store {
            before,
            then_end: r.op == Op::Commit,
        })
    }

    /// Message `seq` of `batch` was stored as `stream_seq`: the flow ack due, if one is.
    pub fn stored(&mut self, batch: &str, seq: u64, stream_seq: u64) -> Option<Bytes> {
        let b = self.open.get_mut(batch)?;
        b.last_stored = stream_seq;
        let mark = seq / b.msgs * b.msgs;
        (mark > b.acked).then(|| {
            b.acked = mark;
            flow_ack(mark, b.msgs)
        })
    }

    /// Ends `batch`: the stream sequence of the last message stored for it.
    pub fn end(&mut self, batch: &str) -> u64 {
        self.open.remove(batch).map_or(0, |b| b.last_stored)
    }

    /// Forgets batches idle for [`IDLE_NANOS`].
    pub fn expire(&mut self, now: i64) {
        self.open
            .retain(|_, b| now.saturating_sub(b.last_active) < IDLE_NANOS);
    }

    /// When the next idle batch is due to be forgotten.
    pub fn next_deadline(&self) -> Option<i64> {
        self.open
            .values()
            .map(|b| b.last_active.saturating_add(IDLE_NANOS))
            .min()
    }

    /// How many are open.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn r(batch: &str, flow: u64, gap: &str, seq: u64, op: u8) -> FastReply {
        parse_reply(&format!("_INBOX.{batch}.{flow}.{gap}.{seq}.{op}.$FI"))
            .unwrap()
            .unwrap()
    }

    fn text(b: &Bytes) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn reply_subjects_parse_as_nats_server_reads_them() {
        assert!(parse_reply("_INBOX.abc.def").is_none());
        assert!(parse_reply("_INBOX.B12.2.ok.1.0").is_none());
        let deep = parse_reply("_INBOX.x.B13.2.ok.1.0.$FI").unwrap().unwrap();
        assert_eq!(
            (deep.batch.as_str(), deep.flow, deep.op),
            ("B13", 2, Op::Start)
        );
        for bad in [
            "_INBOX.B5.2.bogus.1.0.$FI",
            "_INBOX.B6.2.ok.2.0.$FI",
            "_INBOX.B7.2.ok.1.1.$FI",
            "_INBOX.B.2.ok.1.9.$FI",
            "B.2.ok.1.0.$FI",
        ] {
            assert_eq!(
                parse_reply(bad).unwrap().unwrap_err().err_code,
                10206,
                "{bad}"
            );
        }
        let long = format!("_INBOX.{}.2.ok.1.0.$FI", "x".repeat(65));
        assert_eq!(parse_reply(&long).unwrap().unwrap_err().err_code, 10207);
    }

    #[test]
    fn flow_acks_at_multiples_of_the_interval_and_on_ping() {
        let mut f = FastBatches::default();
        let Admit::Store { before, .. } = f.admit(&r("B1", 3, "ok", 1, 0), 0).unwrap() else {
            panic!()
        };
        assert_eq!(text(&before[0]), r#"{"type":"ack","seq":0,"msgs":3}"#);
        assert!(f.stored("B1", 1, 1).is_none());
        for seq in 2..=8 {
            f.admit(&r("B1", 3, "ok", seq, 1), 0).unwrap();
            let ack = f.stored("B1", seq, seq);
            assert_eq!(ack.is_some(), seq % 3 == 0, "{seq}");
        }
        let Admit::Reply(p) = f.admit(&r("B1", 3, "ok", 8, 4), 0).unwrap() else {
            panic!()
        };
        assert_eq!(text(&p[0]), r#"{"type":"ack","seq":6,"msgs":3}"#);
        // A gap forward is reported and the batch goes on; the ack covers the mark it passed.
        let Admit::Store { before, .. } = f.admit(&r("B1", 3, "ok", 10, 1), 0).unwrap() else {
            panic!()
        };
        assert_eq!(text(&before[0]), r#"{"type":"gap","last_seq":9,"seq":10}"#);
        assert_eq!(
            text(&f.stored("B1", 10, 9).unwrap()),
            r#"{"type":"ack","seq":9,"msgs":3}"#
        );
        let a = f.admit(&r("B1", 3, "ok", 11, 2), 0).unwrap();
        assert_eq!(
            a,
            Admit::Store {
                before: vec![],
                then_end: true
            }
        );
        f.stored("B1", 11, 10);
        assert_eq!(f.end("B1"), 10);
        assert_eq!(
            f.admit(&r("B1", 3, "ok", 12, 1), 0).unwrap_err().err_code,
            10208
        );
    }

    #[test]
    fn gaps_end_fail_mode_batches_and_repeats_end_any() {
        let mut f = FastBatches::default();
        f.admit(&r("B2", 2, "fail", 1, 0), 0).unwrap();
        f.stored("B2", 1, 11);
        let Admit::End { count, .. } = f.admit(&r("B2", 2, "fail", 3, 1), 0).unwrap() else {
            panic!()
        };
        assert_eq!(count, 1);
        let mut f = FastBatches::default();
        f.admit(&r("B", 2, "ok", 1, 0), 0).unwrap();
        f.admit(&r("B", 2, "ok", 2, 1), 0).unwrap();
        let Admit::End { before, count } = f.admit(&r("B", 2, "ok", 2, 1), 0).unwrap() else {
            panic!()
        };
        assert_eq!(
            (text(&before[0]).as_str(), count),
            (r#"{"type":"gap","last_seq":3,"seq":2}"#, 2)
        );
        // End of batch counts what came before it.
        let mut f = FastBatches::default();
        f.admit(&r("C", 2, "ok", 1, 0), 0).unwrap();
        f.admit(&r("C", 2, "ok", 2, 1), 0).unwrap();
        let Admit::End { count, .. } = f.admit(&r("C", 2, "ok", 3, 3), 0).unwrap() else {
            panic!()
        };
        assert_eq!(count, 2);
    }

    #[test]
    fn flow_defaults_and_caps_and_idle_batches_are_forgotten() {
        let mut f = FastBatches::default();
        let Admit::Store { before, .. } = f.admit(&r("D", 0, "ok", 1, 0), 0).unwrap() else {
            panic!()
        };
        assert!(text(&before[0]).contains(r#""msgs":10"#));
        let Admit::Store { before, .. } = f.admit(&r("E", 100_000, "ok", 1, 0), 0).unwrap() else {
            panic!()
        };
        assert!(text(&before[0]).contains(r#""msgs":500"#));
        assert_eq!(f.next_deadline(), Some(IDLE_NANOS));
        f.expire(IDLE_NANOS);
        assert!(f.is_empty());
        for i in 0..MAX_OPEN {
            f.admit(&r(&format!("F{i}"), 1, "ok", 1, 0), 0).unwrap();
        }
        assert_eq!(f.len(), MAX_OPEN);
        assert_eq!(
            f.admit(&r("G", 1, "ok", 1, 0), 0).unwrap_err().err_code,
            10211
        );
    }
}
