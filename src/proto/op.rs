//! Protocol operations as values.
//!
//! Every byte field is a [`Bytes`] slice of the buffer it was read from, so parsing copies
//! nothing: a payload travels from the socket to every subscriber's outbound queue as the same
//! allocation.

use bytes::Bytes;

/// An operation a client sends to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOp {
    /// `CONNECT <json>`: the raw JSON body; see [`super::connect::ConnectInfo`].
    Connect(Bytes),
    /// `PUB` (no headers) or `HPUB` (headers present).
    Pub {
        /// Subject published to.
        subject: Bytes,
        /// Optional reply subject.
        reply: Option<Bytes>,
        /// The `NATS/1.0` header block, present only for HPUB.
        headers: Option<Bytes>,
        /// The message body.
        payload: Bytes,
    },
    /// `SUB <subject> [queue] <sid>`.
    Sub {
        /// Subject filter, possibly with wildcards.
        subject: Bytes,
        /// Queue group name, if any.
        queue: Option<Bytes>,
        /// Client-chosen subscription id (opaque; `0` is valid).
        sid: Bytes,
    },
    /// `UNSUB <sid> [max]`.
    Unsub {
        /// The subscription id.
        sid: Bytes,
        /// Remove after this many messages in total since SUB.
        max: Option<u64>,
    },
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
    /// `INFO <json>` sent by a client: accepted and ignored, as the reference server does.
    Info(Bytes),
}

/// An operation the server sends to a client (parsed by the load tool and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOp {
    /// `INFO <json>`.
    Info(Bytes),
    /// `MSG` or `HMSG`.
    Msg {
        /// Subject the message was published on.
        subject: Bytes,
        /// The receiving subscription's id.
        sid: Bytes,
        /// Reply subject, if any.
        reply: Option<Bytes>,
        /// Header block for HMSG.
        headers: Option<Bytes>,
        /// Body.
        payload: Bytes,
    },
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
    /// `+OK`.
    Ok,
    /// `-ERR '<text>'`, quotes removed.
    Err(Bytes),
}
