//! The shared face of a connection: what every other task holds.
//!
//! [`ClientHandle`] carries the outbound queue ([`outbound`]), the flags routing needs
//! (`headers`), counters for monitoring, the CONNECT metadata and a cancellation token.
//! Closing is idempotent and can come from anywhere (a publisher detecting a slow consumer,
//! shutdown, a protocol error): it records the first reason, closes the queue and cancels the
//! reader.
//!
//! Why a module of its own: accounts, the router, JetStream and the system client all hold
//! client handles; the connection loop (`conn`) that reads and writes sockets sits above them
//! and is imported by none of them. This leaf is what keeps that graph free of circles.

pub(crate) mod outbound;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use self::outbound::Outbound;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// The client closed its side.
    ClientClosed,
    /// Outbound queue over `max_pending`, or a write stalled past `write_deadline`.
    SlowConsumer,
    /// Unanswered PINGs.
    StaleConnection,
    /// Malformed protocol.
    ProtocolViolation,
    /// Failed authentication or authentication timeout.
    AuthenticationFailure,
    /// Payload over `max_payload`.
    MaxPayloadExceeded,
    /// Socket read or write failed.
    IoError,
    /// The server is shutting down or draining (lame duck).
    ServerShutdown,
}

impl CloseReason {
    /// The text nats-server monitoring uses for this reason.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CloseReason::ClientClosed => "Client Closed",
            CloseReason::SlowConsumer => "Slow Consumer (Pending Bytes)",
            CloseReason::StaleConnection => "Stale Connection",
            CloseReason::ProtocolViolation => "Protocol Violation",
            CloseReason::AuthenticationFailure => "Authentication Failure",
            CloseReason::MaxPayloadExceeded => "Maximum Payload Exceeded",
            CloseReason::IoError => "Read Error",
            CloseReason::ServerShutdown => "Server Shutdown",
        }
    }

    /// Whether queued output should still be written before the socket closes.
    pub(crate) fn flushes(self) -> bool {
        !matches!(self, CloseReason::SlowConsumer | CloseReason::IoError)
    }
}

/// What the client told us about itself, for monitoring.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnMeta {
    pub(crate) name: Option<String>,
    pub(crate) lang: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) user: Option<String>,
    pub(crate) account: String,
    /// User public key and JWT issue time (operator mode).
    pub(crate) user_key: Option<(String, i64)>,
    /// Operator mode: the user JWT and what it granted at CONNECT, checked again whenever
    /// the account's claims change (`system::recheck_connections`).
    pub(crate) grant: Option<Arc<(Arc<str>, crate::auth::Identity)>>,
}

/// The shared face of a connection.
pub(crate) struct ClientHandle {
    /// Server-unique connection id (`client_id` in INFO, `cid` in monitoring).
    pub(crate) cid: u64,
    /// Peer address.
    pub(crate) peer: SocketAddr,
    /// When the connection was accepted.
    pub(crate) start: SystemTime,
    /// Outbound queue drained by the writer task.
    pub(crate) outbound: Outbound,
    /// The client understands HMSG (set by CONNECT).
    pub(crate) headers: AtomicBool,
    /// Messages and bytes received from this client.
    pub(crate) in_msgs: AtomicU64,
    /// Payload bytes received from this client.
    pub(crate) in_bytes: AtomicU64,
    /// Live subscriptions of this client.
    pub(crate) subs: AtomicU64,
    /// The client takes async INFO (protocol 1, past its first PONG): cluster membership
    /// changes are sent to it.
    pub(crate) async_info: AtomicBool,
    /// Monitoring metadata, written at CONNECT.
    pub(crate) meta: Mutex<ConnMeta>,
    /// Set when the user's permissions include `allow_responses`: reply subjects of requests
    /// delivered to it are recorded in `replies` and may be published to.
    pub(crate) track_replies: AtomicBool,
    /// Reply subject → (replies left, deadline).
    pub(crate) replies: Mutex<std::collections::HashMap<bytes::Bytes, (u32, std::time::Instant)>>,
    response_perm: Mutex<Option<(u32, std::time::Duration)>>,
    cancel: CancellationToken,
    reason: Mutex<Option<CloseReason>>,
}

impl ClientHandle {
    pub(crate) fn new(cid: u64, peer: SocketAddr, max_pending: usize) -> Self {
        ClientHandle {
            cid,
            peer,
            start: SystemTime::now(),
            outbound: Outbound::new(max_pending),
            headers: AtomicBool::new(false),
            in_msgs: AtomicU64::new(0),
            in_bytes: AtomicU64::new(0),
            subs: AtomicU64::new(0),
            async_info: AtomicBool::new(false),
            meta: Mutex::new(ConnMeta::default()),
            track_replies: AtomicBool::new(false),
            replies: Mutex::new(std::collections::HashMap::new()),
            response_perm: Mutex::new(None),
            cancel: CancellationToken::new(),
            reason: Mutex::new(None),
        }
    }

    /// Closes the connection for `reason` (the first reason wins). Safe to call from any task,
    /// any number of times.
    pub(crate) fn close(&self, reason: CloseReason) {
        {
            let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if r.is_none() {
                *r = Some(reason);
            }
        }
        self.outbound.close();
        self.cancel.cancel();
    }

    /// Why the connection closed, if it has.
    pub(crate) fn is_closed(&self) -> bool {
        self.close_reason().is_some()
    }

    pub(crate) fn close_reason(&self) -> Option<CloseReason> {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `-ERR '<text>'` and closes after it is written.
    pub(crate) fn send_err_and_close(&self, text: &str, reason: CloseReason) {
        let mut b = bytes::BytesMut::with_capacity(text.len() + 10);
        crate::proto::encode::encode_err(&mut b, text);
        if let Ok(true) = self.outbound.push_raw(&b) {
            self.outbound.wake();
        }
        self.close(reason);
    }

    /// Resolves when the connection is being closed.
    pub(crate) fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Enables `allow_responses` for this connection.
    pub(crate) fn allow_responses(&self, max: u32, ttl: std::time::Duration) {
        *self.response_perm.lock().unwrap_or_else(|p| p.into_inner()) = Some((max, ttl));
        self.track_replies.store(true, Ordering::Relaxed);
    }

    /// The response permission (max replies, window) when `track_replies` is set.
    pub(crate) fn response_permission(&self) -> Option<(u32, std::time::Duration)> {
        *self.response_perm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Uses one reply permission for `subject`; true if the publish is allowed by it.
    pub(crate) fn use_reply(&self, subject: &[u8]) -> bool {
        let mut m = self.replies.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let Some((left, deadline)) = m.get_mut(subject) else {
            return false;
        };
        if *deadline <= now || *left == 0 {
            m.remove(subject);
            return false;
        }
        *left -= 1;
        if *left == 0 {
            m.remove(subject);
        }
        true
    }

    /// The account name recorded for monitoring.
    pub(crate) fn meta(&self) -> ConnMeta {
        self.meta.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
