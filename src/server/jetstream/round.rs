//! A replicated stream's log entry: the inputs one replica's worker took in one round, and the
//! time it took them (see [`replica`](super::replica) for how rounds are proposed and applied).
//! A leaf: the command type carries rounds, and nothing here knows a thread or a socket.

use bytes::Bytes;

use crate::consensus::NodeId;
use crate::jetstream::api::ApiCall;
use crate::jetstream::source::SourceBatch;
use crate::jetstream::stream::Incoming;
use crate::store::StoredMsg;

/// Format version of an encoded [`Round`].
const ROUND_V1: u8 = 1;

/// One replicated input of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// A publish on one of the stream's subjects.
    Publish(Incoming),
    /// A stream-scoped API call that changes state (consumer create/delete, pull, purge ...).
    Api {
        call: ApiCall,
        reply: String,
        headers: Option<Bytes>,
        payload: Bytes,
    },
    /// An ack.
    Ack {
        subject: String,
        reply: Option<String>,
        payload: Bytes,
    },
    /// A flow-control reply.
    FlowControl { subject: String },
    /// What the leader read from an origin the stream copies (mirror or source).
    Sourced(Box<Sourced>),
}

/// A batch the leader of a mirror or sourcing stream read from one origin: every replica
/// stores it alike when the round applies (`Stream::take_sourced`), so only the leader reads
/// origins and the copy is decided once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sourced {
    /// The link's place among the stream's links when it was read.
    pub(crate) link: u32,
    /// The origin stream's name (an update between the read and the apply may move links).
    pub(crate) origin: String,
    /// Whether the link is the stream's mirror.
    pub(crate) mirror: bool,
    /// What the read found.
    pub(crate) batch: SourceBatch,
}

/// What one replica proposes and every replica applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Round {
    /// The node whose worker took these inputs: it routes the round's effects.
    pub(crate) origin: NodeId,
    /// When it took them (unix nanos): the `now` every replica runs the round at.
    pub(crate) now: i64,
    /// The inputs, in the order they arrived.
    pub(crate) inputs: Vec<Input>,
    /// Push consumers whose deliver subject the proposing leader found listened to, or not,
    /// unlike what the stream last recorded: every replica takes these answers before the
    /// round's inputs and decides the round's push deliveries by them, never by its own
    /// server's view (which differs between servers until interest has propagated, and
    /// during a partition). Encoded after the inputs, only when there are any: a round
    /// without them is the earlier format, and an earlier build stops reading before them.
    pub(crate) interest: Vec<(String, bool)>,
}

/// Whether `call` only reads (answered by the replica that got it, not replicated).
///
/// `STREAM.MSG.GET` is not among them: it must see every write acknowledged before it was
/// sent — linearizable reads, which a key-value client without direct gets relies on (a
/// replica answering from its own state may be behind: a follower applies a moment after
/// the leader, a restarted one catches up). The dispatcher answers it after a read index
/// (`AccountJs::linearizable_read`); when too many wait for one it comes here and goes
/// through the group's log like a write, answered when its round is applied. `DIRECT.GET`
/// stays the fast read any replica answers, as in nats-server, where it may be stale too.
pub(crate) fn read_only(call: &ApiCall) -> bool {
    matches!(
        call,
        ApiCall::StreamInfo(_)
            | ApiCall::DirectGet(..)
            | ApiCall::ConsumerInfo(..)
            | ApiCall::ConsumerNames(_)
            | ApiCall::ConsumerList(_)
    )
}

// The encoding: a version byte, origin and time, the input count, then each input as a tag
// byte and length-prefixed fields (u32 little-endian; u32::MAX marks an absent optional).
// Binary because rounds carry payloads (JSON would triple them); ours because nothing else
// reads it.

const NONE: u32 = u32::MAX;

fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(NONE - 1).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_opt(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => put(out, b),
        None => out.extend_from_slice(&NONE.to_le_bytes()),
    }
}

impl Round {
    /// The bytes proposed for this round.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let size: usize = self.inputs.iter().map(input_size).sum();
        let mut out = Vec::with_capacity(32 + size);
        out.push(ROUND_V1);
        out.extend_from_slice(&self.origin.to_le_bytes());
        out.extend_from_slice(&self.now.to_le_bytes());
        out.extend_from_slice(
            &u32::try_from(self.inputs.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for i in &self.inputs {
            match i {
                Input::Publish(m) => {
                    out.push(1);
                    put(&mut out, m.subject.as_bytes());
                    put_opt(&mut out, m.reply.as_deref().map(str::as_bytes));
                    put_opt(&mut out, m.headers.as_deref());
                    put(&mut out, &m.payload);
                }
                Input::Api {
                    call,
                    reply,
                    headers,
                    payload,
                } => {
                    out.push(2);
                    put(&mut out, &serde_json::to_vec(call).unwrap_or_default());
                    put(&mut out, reply.as_bytes());
                    put_opt(&mut out, headers.as_deref());
                    put(&mut out, payload);
                }
                Input::Ack {
                    subject,
                    reply,
                    payload,
                } => {
                    out.push(3);
                    put(&mut out, subject.as_bytes());
                    put_opt(&mut out, reply.as_deref().map(str::as_bytes));
                    put(&mut out, payload);
                }
                Input::FlowControl { subject } => {
                    out.push(4);
                    put(&mut out, subject.as_bytes());
                }
                Input::Sourced(b) => {
                    out.push(5);
                    out.extend_from_slice(&b.link.to_le_bytes());
                    put(&mut out, b.origin.as_bytes());
                    out.push(u8::from(b.mirror));
                    put_batch(&mut out, &b.batch);
                }
            }
        }
        if !self.interest.is_empty() {
            out.extend_from_slice(
                &u32::try_from(self.interest.len())
                    .unwrap_or(u32::MAX)
                    .to_le_bytes(),
            );
            for (consumer, listened) in &self.interest {
                put(&mut out, consumer.as_bytes());
                out.push(u8::from(*listened));
            }
        }
        out
    }

    /// Decodes a round; `None` for bytes no replica of ours wrote (the entry is skipped).
    pub(crate) fn decode(bytes: &[u8]) -> Option<Round> {
        let mut r = Reader { b: bytes };
        if r.take(1)?.first() != Some(&ROUND_V1) {
            return None;
        }
        let origin = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let now = i64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let n = r.u32()?;
        let mut inputs = Vec::with_capacity(n.min(65_536) as usize);
        for _ in 0..n {
            let tag = *r.take(1)?.first()?;
            let input = match tag {
                1 => Input::Publish(Incoming {
                    subject: r.string()?,
                    reply: r.opt()?.map(|b| String::from_utf8_lossy(&b).into_owned()),
                    headers: r.opt()?,
                    payload: r.bytes()?,
                }),
                2 => {
                    let call = serde_json::from_slice(&r.bytes()?).ok()?;
                    Input::Api {
                        call,
                        reply: r.string()?,
                        headers: r.opt()?,
                        payload: r.bytes()?,
                    }
                }
                3 => Input::Ack {
                    subject: r.string()?,
                    reply: r.opt()?.map(|b| String::from_utf8_lossy(&b).into_owned()),
                    payload: r.bytes()?,
                },
                4 => Input::FlowControl {
                    subject: r.string()?,
                },
                5 => {
                    let link = r.u32()?;
                    let origin = r.string()?;
                    let mirror = *r.take(1)?.first()? != 0;
                    let batch = r.batch()?;
                    Input::Sourced(Box::new(Sourced {
                        link,
                        origin,
                        mirror,
                        batch,
                    }))
                }
                _ => return None,
            };
            inputs.push(input);
        }
        let mut interest = Vec::new();
        if !r.b.is_empty() {
            let n = r.u32()?;
            for _ in 0..n {
                let consumer = r.string()?;
                let listened = *r.take(1)?.first()? != 0;
                interest.push((consumer, listened));
            }
        }
        Some(Round {
            origin,
            now,
            inputs,
            interest,
        })
    }
}

fn input_size(i: &Input) -> usize {
    match i {
        Input::Publish(m) => 32 + m.size(),
        Input::Api {
            reply,
            headers,
            payload,
            ..
        } => 96 + reply.len() + headers.as_ref().map_or(0, Bytes::len) + payload.len(),
        Input::Ack {
            subject,
            reply,
            payload,
        } => 16 + subject.len() + reply.as_ref().map_or(0, String::len) + payload.len(),
        Input::FlowControl { subject } => 8 + subject.len(),
        Input::Sourced(b) => {
            48 + b.origin.len()
                + b.batch
                    .msgs
                    .iter()
                    .map(|m| {
                        32 + m.subject.len()
                            + m.headers.as_ref().map_or(0, Bytes::len)
                            + m.payload.len()
                    })
                    .sum::<usize>()
        }
    }
}

/// Appends a batch read from an origin: how far it was read, the origin's last sequence,
/// whether more waits, and the messages. A round's `Sourced` input and a remote origin's
/// answer (`origin_read`) both carry one.
pub(crate) fn put_batch(out: &mut Vec<u8>, b: &SourceBatch) {
    out.extend_from_slice(&b.scanned_to.to_le_bytes());
    out.extend_from_slice(&b.origin_last.to_le_bytes());
    out.push(u8::from(b.more));
    out.extend_from_slice(
        &u32::try_from(b.msgs.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for m in &b.msgs {
        out.extend_from_slice(&m.seq.to_le_bytes());
        out.extend_from_slice(&m.ts.to_le_bytes());
        put(out, m.subject.as_bytes());
        put_opt(out, m.headers.as_deref());
        put(out, &m.payload);
    }
}

/// A batch [`put_batch`] wrote, and nothing after it; `None` for anything else.
pub(crate) fn batch_from(bytes: &[u8]) -> Option<SourceBatch> {
    let mut r = Reader { b: bytes };
    let batch = r.batch()?;
    r.b.is_empty().then_some(batch)
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn batch(&mut self) -> Option<SourceBatch> {
        let scanned_to = self.u64()?;
        let origin_last = self.u64()?;
        let more = *self.take(1)?.first()? != 0;
        let n = self.u32()?;
        let mut msgs = Vec::with_capacity(n.min(4096) as usize);
        for _ in 0..n {
            msgs.push(StoredMsg {
                seq: self.u64()?,
                ts: i64::from_le_bytes(self.take(8)?.try_into().ok()?),
                subject: self.string()?,
                headers: self.opt()?,
                payload: self.bytes()?,
            });
        }
        Some(SourceBatch {
            msgs,
            scanned_to,
            origin_last,
            more,
        })
    }

    fn opt(&mut self) -> Option<Option<Bytes>> {
        let n = self.u32()?;
        if n == NONE {
            return Some(None);
        }
        Some(Some(Bytes::copy_from_slice(self.take(n as usize)?)))
    }

    fn bytes(&mut self) -> Option<Bytes> {
        self.opt()?
    }

    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_survives_its_encoding() {
        let round = Round {
            origin: 7,
            now: 1_700_000_000_000_000_000,
            inputs: vec![
                Input::Publish(Incoming {
                    subject: "orders.1".into(),
                    reply: Some("_INBOX.x".into()),
                    headers: Some(Bytes::from_static(b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n")),
                    payload: Bytes::from_static(b"hello"),
                }),
                Input::Publish(Incoming {
                    subject: "orders.2".into(),
                    reply: None,
                    headers: None,
                    payload: Bytes::new(),
                }),
                Input::Api {
                    call: ApiCall::parse("$JS.API.CONSUMER.MSG.NEXT.ORDERS.C1").unwrap(),
                    reply: "_INBOX.y".into(),
                    headers: None,
                    payload: Bytes::from_static(b"{\"batch\":1}"),
                },
                Input::Ack {
                    subject: "$JS.ACK.ORDERS.C1.1.1.1.0.0".into(),
                    reply: None,
                    payload: Bytes::from_static(b"+ACK"),
                },
                Input::FlowControl {
                    subject: "$JS.FC.ORDERS.x.1".into(),
                },
                Input::Sourced(Box::new(Sourced {
                    link: 1,
                    origin: "ORIGIN".into(),
                    mirror: false,
                    batch: SourceBatch {
                        scanned_to: 12,
                        origin_last: 40,
                        more: true,
                        msgs: vec![
                            StoredMsg {
                                seq: 9,
                                ts: 1_700_000_000_000_000_001,
                                subject: "orders.eu.1".into(),
                                headers: Some(Bytes::from_static(b"NATS/1.0\r\nA: b\r\n\r\n")),
                                payload: Bytes::from_static(b"x"),
                            },
                            StoredMsg {
                                seq: 12,
                                ts: -1,
                                subject: "orders.eu.2".into(),
                                headers: None,
                                payload: Bytes::new(),
                            },
                        ],
                    },
                })),
            ],
            interest: vec![("PUSH".into(), true), ("GONE".into(), false)],
        };
        assert_eq!(Round::decode(&round.encode()), Some(round));
    }

    #[test]
    fn a_cut_or_foreign_round_does_not_decode() {
        let round = Round {
            origin: 1,
            now: 2,
            inputs: vec![Input::FlowControl {
                subject: "$JS.FC.S.x.1".into(),
            }],
            interest: Vec::new(),
        };
        let bytes = round.encode();
        for cut in 0..bytes.len() {
            assert_eq!(Round::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        assert_eq!(Round::decode(b"{\"json\":true}"), None);
        // With interest answers: a cut inside them does not decode either (a cut at their
        // start is the earlier format, a round without any).
        let with = Round {
            interest: vec![("C".into(), true)],
            ..round
        };
        let full = with.encode();
        for cut in bytes.len() + 1..full.len() {
            assert_eq!(Round::decode(&full[..cut]), None, "cut at {cut}");
        }
        assert_eq!(Round::decode(&full), Some(with));
    }

    #[test]
    fn reads_stay_local_and_changes_replicate() {
        for (subject, local) in [
            ("$JS.API.STREAM.INFO.S", true),
            ("$JS.API.DIRECT.GET.S", true),
            ("$JS.API.CONSUMER.INFO.S.C", true),
            ("$JS.API.CONSUMER.CREATE.S.C", false),
            ("$JS.API.CONSUMER.MSG.NEXT.S.C", false),
            ("$JS.API.STREAM.PURGE.S", false),
            // Linearizable: answered when its round is applied.
            ("$JS.API.STREAM.MSG.GET.S", false),
        ] {
            let call = ApiCall::parse(subject).unwrap();
            assert_eq!(read_only(&call), local, "{subject}");
        }
    }
}
