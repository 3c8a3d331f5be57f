//! Atomic batch publishes (ADR-50, `allow_atomic`): messages that carry `Nats-Batch-Id` and
//! `Nats-Batch-Sequence` are staged, not stored, until one carries `Nats-Batch-Commit` — then
//! the whole batch is checked and stored as one commit, or none of it is.
//!
//! Why a module of its own: staging is a small state machine with bounds (messages per batch,
//! batches in flight, an inactivity timeout) and answers of its own, apart from the stream's
//! ordinary publish path. Texts and codes are nats-server 2.15.1's (captured by
//! `tests/js_streams.rs` against it).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::api::ApiError;
use crate::proto::headers::HeaderMap;

/// Most messages in one batch (nats-server's default).
pub const MAX_BATCH_MSGS: usize = 1000;
/// Most bytes staged for one batch (our bound: the staged copies are held in memory).
pub const MAX_BATCH_BYTES: usize = 64 << 20;
/// Most batches staged at once on one stream (our bound; nats-server's default is 50).
pub const MAX_INFLIGHT: usize = 50;
/// A batch with no message for this long is abandoned (nats-server: 10 s).
pub const BATCH_TIMEOUT_NS: i64 = 10_000_000_000;
/// Longest batch id.
const MAX_ID_LEN: usize = 64;

/// What a message's batch headers ask for.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Not a batch message.
    None,
    /// Stage it; the commit comes later.
    Stage {
        /// The batch id.
        id: String,
        /// Its place in the batch (from 1).
        seq: u64,
    },
    /// The batch ends here: with this message (`include`), or before it (`eob`).
    Commit {
        /// The batch id.
        id: String,
        /// Its place in the batch.
        seq: u64,
        /// Whether this message is part of the batch.
        include: bool,
    },
}

/// Reads the batch headers of a publish.
///
/// # Errors
/// `10179` for a bad id, `10175` without a sequence, `10200` for a commit value other than
/// `1` and `eob`.
pub fn step(headers: Option<&Bytes>) -> Result<Step, ApiError> {
    let Some(map) = headers.and_then(|h| HeaderMap::parse(h).ok()) else {
        return Ok(Step::None);
    };
    let Some(id) = map.get("Nats-Batch-Id") else {
        return Ok(Step::None);
    };
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(ApiError::new(
            400,
            10179,
            "atomic publish batch ID is invalid",
        ));
    }
    let Some(seq) = map
        .get("Nats-Batch-Sequence")
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
    else {
        return Err(ApiError::new(
            400,
            10175,
            "atomic publish sequence is missing",
        ));
    };
    let id = id.to_owned();
    Ok(match map.get("Nats-Batch-Commit") {
        None => Step::Stage { id, seq },
        Some("1") => Step::Commit {
            id,
            seq,
            include: true,
        },
        Some("eob") => Step::Commit {
            id,
            seq,
            include: false,
        },
        Some(_) => {
            return Err(ApiError::new(
                400,
                10200,
                "atomic publish batch commit is invalid",
            ))
        }
    })
}

/// `400/10176 atomic publish batch is incomplete`.
pub fn incomplete() -> ApiError {
    ApiError::new(400, 10176, "atomic publish batch is incomplete")
}

/// `400/10201 atomic publish batch contains duplicate message id`.
pub fn duplicate_id() -> ApiError {
    ApiError::new(
        400,
        10201,
        "atomic publish batch contains duplicate message id",
    )
}

struct Staged<T> {
    msgs: Vec<T>,
    bytes: usize,
    last_active: i64,
}

/// The batches staged on one stream; `T` is a staged message (the stream's publish type).
pub struct Batches<T> {
    open: BTreeMap<String, Staged<T>>,
}

impl<T> Default for Batches<T> {
    fn default() -> Self {
        Batches {
            open: BTreeMap::new(),
        }
    }
}

impl<T: Clone> Batches<T> {
    /// Every open batch: id, staged messages, their bytes, last activity (a snapshot's image).
    pub fn export(&self) -> Vec<(String, Vec<T>, usize, i64)> {
        self.open
            .iter()
            .map(|(id, s)| (id.clone(), s.msgs.clone(), s.bytes, s.last_active))
            .collect()
    }

    /// The batches [`Batches::export`] gave.
    pub fn import(batches: Vec<(String, Vec<T>, usize, i64)>) -> Self {
        Batches {
            open: batches
                .into_iter()
                .map(|(id, msgs, bytes, last_active)| {
                    (
                        id,
                        Staged {
                            msgs,
                            bytes,
                            last_active,
                        },
                    )
                })
                .collect(),
        }
    }
}

impl<T> Batches<T> {
    /// Stages message `seq` of batch `id` (`size`: its bytes). The first message must be 1
    /// and each next one the one after; anything else abandons the batch.
    ///
    /// # Errors
    /// `10176` out of order, `10199` over [`MAX_BATCH_MSGS`] (the batch is abandoned), and
    /// our `10199` texts for the byte and in-flight bounds.
    pub fn stage(
        &mut self,
        id: &str,
        seq: u64,
        m: T,
        size: usize,
        now: i64,
    ) -> Result<(), ApiError> {
        if seq == 1 {
            if !self.open.contains_key(id) && self.open.len() >= MAX_INFLIGHT {
                return Err(ApiError::new(
                    400,
                    10199,
                    format!("atomic publish too many inflight batches: {MAX_INFLIGHT}"),
                ));
            }
            self.open.insert(
                id.to_owned(),
                Staged {
                    msgs: Vec::new(),
                    bytes: 0,
                    last_active: now,
                },
            );
        }
        let Some(b) = self.open.get_mut(id) else {
            return Err(incomplete());
        };
        if b.msgs.len() as u64 + 1 != seq {
            self.open.remove(id);
            return Err(incomplete());
        }
        if b.msgs.len() >= MAX_BATCH_MSGS {
            self.open.remove(id);
            return Err(ApiError::new(
                400,
                10199,
                format!("atomic publish batch is too large: {MAX_BATCH_MSGS}"),
            ));
        }
        if b.bytes + size > MAX_BATCH_BYTES {
            self.open.remove(id);
            return Err(ApiError::new(
                400,
                10199,
                format!("atomic publish batch is too large: {MAX_BATCH_BYTES} bytes"),
            ));
        }
        b.bytes += size;
        b.last_active = now;
        b.msgs.push(m);
        Ok(())
    }

    /// Takes batch `id` for its commit (message `seq` is the commit message, which must come
    /// right after the last staged one).
    ///
    /// # Errors
    /// `10176` when the batch is unknown or a message is missing.
    pub fn take(&mut self, id: &str, seq: u64) -> Result<Vec<T>, ApiError> {
        if seq == 1 {
            self.open.remove(id);
            return Ok(Vec::new());
        }
        let b = self.open.remove(id).ok_or_else(incomplete)?;
        if b.msgs.len() as u64 + 1 != seq {
            return Err(incomplete());
        }
        Ok(b.msgs)
    }

    /// Abandons the batches idle for [`BATCH_TIMEOUT_NS`] at `now`.
    pub fn expire(&mut self, now: i64) {
        self.open
            .retain(|_, b| now.saturating_sub(b.last_active) < BATCH_TIMEOUT_NS);
    }

    /// When the next staged batch times out.
    pub fn next_deadline(&self) -> Option<i64> {
        self.open
            .values()
            .map(|b| b.last_active.saturating_add(BATCH_TIMEOUT_NS))
            .min()
    }

    /// Abandons every staged batch (the stream stopped allowing them).
    pub fn clear(&mut self) {
        self.open.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hdrs(pairs: &[(&str, &str)]) -> Option<Bytes> {
        let mut s = String::from("NATS/1.0\r\n");
        for (k, v) in pairs {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
        s.push_str("\r\n");
        Some(Bytes::from(s))
    }

    fn msg() -> &'static str {
        "x"
    }

    #[test]
    fn batch_headers_are_read_and_checked() {
        assert_eq!(step(None).unwrap(), Step::None);
        let s = step(hdrs(&[("Nats-Batch-Id", "b"), ("Nats-Batch-Sequence", "2")]).as_ref());
        assert_eq!(
            s.unwrap(),
            Step::Stage {
                id: "b".into(),
                seq: 2
            }
        );
        let eob = [
            ("Nats-Batch-Id", "b"),
            ("Nats-Batch-Sequence", "3"),
            ("Nats-Batch-Commit", "eob"),
        ];
        assert!(matches!(
            step(hdrs(&eob).as_ref()).unwrap(),
            Step::Commit { include: false, .. }
        ));
        let long = "x".repeat(65);
        let e = step(hdrs(&[("Nats-Batch-Id", &long), ("Nats-Batch-Sequence", "1")]).as_ref());
        assert_eq!(e.unwrap_err().err_code, 10179);
        assert_eq!(
            step(hdrs(&[("Nats-Batch-Id", "b")]).as_ref())
                .unwrap_err()
                .err_code,
            10175
        );
        let bad = [
            ("Nats-Batch-Id", "b"),
            ("Nats-Batch-Sequence", "1"),
            ("Nats-Batch-Commit", "yes"),
        ];
        assert_eq!(step(hdrs(&bad).as_ref()).unwrap_err().err_code, 10200);
    }

    #[test]
    fn a_batch_is_staged_in_order_bounded_and_abandoned_when_idle() {
        let mut b: Batches<&str> = Batches::default();
        b.stage("a", 1, msg(), 1, 0).unwrap();
        b.stage("a", 2, msg(), 1, 1).unwrap();
        assert_eq!(b.take("a", 3).unwrap().len(), 2);
        assert_eq!(b.take("a", 3).unwrap_err().err_code, 10176);
        assert_eq!(b.stage("g", 2, msg(), 1, 0).unwrap_err().err_code, 10176);
        b.stage("g", 1, msg(), 1, 0).unwrap();
        assert_eq!(b.stage("g", 3, msg(), 1, 0).unwrap_err().err_code, 10176);
        assert_eq!(b.take("g", 2).unwrap_err().err_code, 10176, "abandoned");
        for i in 1..=MAX_BATCH_MSGS as u64 {
            b.stage("big", i, msg(), 1, 0).unwrap();
        }
        let e = b
            .stage("big", MAX_BATCH_MSGS as u64 + 1, msg(), 1, 0)
            .unwrap_err();
        assert_eq!(e.description, "atomic publish batch is too large: 1000");
        b.stage("t", 1, msg(), 1, 0).unwrap();
        assert_eq!(b.next_deadline(), Some(BATCH_TIMEOUT_NS));
        b.expire(BATCH_TIMEOUT_NS);
        assert_eq!(b.take("t", 2).unwrap_err().err_code, 10176);
    }
}
