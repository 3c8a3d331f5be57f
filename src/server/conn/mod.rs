//! One client connection: a reader task, a writer task, and the queue between them.
//!
//! ```text
//! socket ─read─> reader.rs ──parser──> ops ──> router.rs ──> other connections' Outbound
//!                    │                                  └──> this connection's Outbound
//!                    └─ PONG/+OK/-ERR ──> Outbound ──> writer.rs ─vectored write─> socket
//! ```
//!
//! [`ClientHandle`] is what other tasks hold: the outbound queue, the flags routing needs
//! (`headers`), counters for monitoring, and a cancellation token. Closing is idempotent and
//! can come from anywhere (a publisher detecting a slow consumer, shutdown, a protocol error):
//! it records the first reason, closes the queue and cancels the reader.

pub(crate) mod outbound;
pub(crate) mod reader;
pub(crate) mod writer;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, Instrument};

use self::outbound::Outbound;
use super::Shared;

/// Why a connection ended (the `reason` monitoring reports for closed connections).
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
    fn flushes(self) -> bool {
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

/// How the connection started, for the reader.
pub(crate) struct Start {
    /// INFO was already written (in plaintext, before a TLS upgrade).
    pub(crate) info_sent: bool,
    /// The connection runs over TLS.
    pub(crate) tls: bool,
    /// Identities from a verified client certificate.
    pub(crate) cert_identities: Vec<String>,
    /// The nonce INFO carries, when nkey/JWT auth is possible.
    pub(crate) nonce: Option<String>,
}

/// Serves one accepted TCP connection until it closes.
pub(crate) async fn serve(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let cid = shared.next_cid();
    let client = Arc::new(ClientHandle::new(cid, peer, shared.max_pending()));
    let span = tracing::debug_span!("conn", cid, remote = %peer);
    async move {
        debug!("client connection created");
        shared.register(Arc::clone(&client));
        let nonce = shared.auth().needs_nonce().then(reader::new_nonce);
        match upgrade(&shared, &client, stream, nonce).await {
            Some(Transport::Plain(stream, start)) => {
                let (r, w) = stream.into_split();
                run_halves(&shared, &client, r, w, start).await;
            }
            Some(Transport::Tls(stream, start)) => {
                let (r, w) = tokio::io::split(*stream);
                run_halves(&shared, &client, r, w, start).await;
            }
            None => client.close(CloseReason::ProtocolViolation),
        }
        shared.unregister(&client);
        debug!(
            reason = client.close_reason().map_or("", CloseReason::as_str),
            "client connection closed"
        );
    }
    .instrument(span)
    .await;
}

enum Transport {
    Plain(TcpStream, Start),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>, Start),
}

async fn run_halves<R, W>(
    shared: &Arc<Shared>,
    client: &Arc<ClientHandle>,
    r: R,
    w: W,
    start: Start,
) where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let writer = tokio::spawn(writer::run(w, Arc::clone(client), shared.write_deadline()));
    reader::run(r, Arc::clone(client), Arc::clone(shared), start).await;
    if client.close_reason().is_none() {
        client.close(CloseReason::ClientClosed);
    }
    let _ = writer.await;
}

/// Whether the first byte the client sends (within `wait`) starts a TLS handshake.
async fn peek_is_tls(stream: &TcpStream, wait: std::time::Duration) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(wait, stream.peek(&mut b)).await,
        Ok(Ok(1))
    ) && b == [0x16]
}

/// Runs the TLS modes (client-protocol §9): classic (INFO in plaintext, then the handshake),
/// handshake first (optionally with a fallback delay), and optional TLS (`allow_non_tls`).
async fn upgrade(
    shared: &Arc<Shared>,
    client: &Arc<ClientHandle>,
    mut stream: TcpStream,
    nonce: Option<String>,
) -> Option<Transport> {
    use crate::config::options::HandshakeFirst;
    use tokio::io::AsyncWriteExt;

    let plain = |stream, info_sent, nonce| {
        Transport::Plain(
            stream,
            Start {
                info_sent,
                tls: false,
                cert_identities: vec![],
                nonce,
            },
        )
    };
    let Some(tls) = shared.tls.clone() else {
        return Some(plain(stream, false, nonce));
    };
    let first = match tls.opts.handshake_first {
        HandshakeFirst::On => true,
        HandshakeFirst::Fallback(d) => peek_is_tls(&stream, d).await,
        HandshakeFirst::Off => false,
    };
    if !first {
        let info = shared.info_line(client, false, None, nonce.as_deref());
        if stream.write_all(&info).await.is_err() {
            return None;
        }
        if shared.allow_non_tls && !peek_is_tls(&stream, shared.limits.auth_timeout).await {
            return Some(plain(stream, true, nonce));
        }
    }
    match tokio::time::timeout(tls.opts.timeout, tls.acceptor().accept(stream)).await {
        Ok(Ok(s)) => {
            let leaf = s
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first().cloned());
            if !tls.pinned_ok(leaf.as_ref()) {
                tracing::warn!(
                    cid = client.cid,
                    "client certificate is not in pinned_certs"
                );
                return None;
            }
            let cert_identities = leaf
                .as_ref()
                .map(super::tls::peer_identities)
                .unwrap_or_default();
            let start = Start {
                info_sent: !first,
                tls: true,
                cert_identities,
                nonce,
            };
            Some(Transport::Tls(Box::new(s), start))
        }
        Ok(Err(e)) => {
            debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            debug!("TLS handshake timed out");
            None
        }
    }
}

/// Whether queued data should be flushed for this close reason.
pub(crate) fn flush_on_close(client: &ClientHandle) -> bool {
    client.close_reason().is_none_or(CloseReason::flushes)
}

/// Orders counters for monitoring; relaxed is enough for statistics.
pub(crate) const STATS: Ordering = Ordering::Relaxed;
