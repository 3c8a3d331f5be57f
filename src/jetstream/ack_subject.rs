//! The reply subject of a JetStream delivery — the subject an ack is published to — in one
//! place: the engine encodes it, the engine and the server parse it, and `sealctl` reads it to
//! show a delivery's sequence numbers.
//!
//! Two forms exist (ADR-15): the 9-token form this server sends,
//! `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>`,
//! and the longer form with a domain and an account hash after `ACK` (and, from 2.10 on, a
//! trailing random token), which other servers send and clients may echo back.

/// The parts of an ack subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckSubject<'a> {
    /// The stream.
    pub stream: &'a str,
    /// The consumer.
    pub consumer: &'a str,
    /// How many times this message has been delivered (1 the first time).
    pub delivered: u64,
    /// The message's stream sequence.
    pub stream_seq: u64,
    /// The consumer sequence of this delivery.
    pub consumer_seq: u64,
    /// The message's timestamp (unix nanoseconds).
    pub timestamp: i64,
    /// Messages still pending for the consumer after this one.
    pub pending: u64,
}

impl<'a> AckSubject<'a> {
    /// Parses either form; `None` for anything else (wrong prefix, token count or numbers).
    pub fn parse(subject: &'a str) -> Option<Self> {
        let t: Vec<&str> = subject.split('.').collect();
        let rest = match t.as_slice() {
            ["$JS", "ACK", rest @ ..] if rest.len() == 7 => rest,
            ["$JS", "ACK", _domain, _hash, rest @ ..] if rest.len() == 7 || rest.len() == 8 => {
                rest.get(..7)?
            }
            _ => return None,
        };
        let [stream, consumer, delivered, sseq, cseq, ts, pending] = rest else {
            return None;
        };
        Some(AckSubject {
            stream,
            consumer,
            delivered: delivered.parse().ok()?,
            stream_seq: sseq.parse().ok()?,
            consumer_seq: cseq.parse().ok()?,
            timestamp: ts.parse().ok()?,
            pending: pending.parse().ok()?,
        })
    }

    /// The 9-token form.
    pub fn encode(&self) -> String {
        format!(
            "$JS.ACK.{}.{}.{}.{}.{}.{}.{}",
            self.stream,
            self.consumer,
            self.delivered,
            self.stream_seq,
            self.consumer_seq,
            self.timestamp,
            self.pending
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_parse_and_the_short_one_round_trips() {
        let s = "$JS.ACK.ORDERS.proc.1.2.3.1795942996807618822.4";
        let a = AckSubject::parse(s).unwrap();
        assert_eq!((a.stream, a.consumer), ("ORDERS", "proc"));
        assert_eq!(
            (a.delivered, a.stream_seq, a.consumer_seq, a.pending),
            (1, 2, 3, 4)
        );
        assert_eq!(a.encode(), s);
        let long = AckSubject::parse("$JS.ACK.dom.ACCHASH.ORDERS.proc.2.5.6.179594.0.tok").unwrap();
        assert_eq!(
            (long.stream, long.stream_seq, long.delivered),
            ("ORDERS", 5, 2)
        );
        let eleven = AckSubject::parse("$JS.ACK.dom.ACCHASH.ORDERS.proc.2.5.6.179594.0").unwrap();
        assert_eq!(eleven.consumer_seq, 6);
    }

    #[test]
    fn anything_else_is_refused() {
        for s in [
            "$JS.ACK.a.b.c",
            "$JS.ACK.ORDERS.proc.x.2.3.4.5",
            "$JS.NAK.ORDERS.proc.1.2.3.4.5",
            "$JS.ACK.ORDERS.proc.1.2.3.4.5.6",
            "",
        ] {
            assert_eq!(AckSubject::parse(s), None, "{s}");
        }
    }
}
