//! One client connection: a reader task, a writer task, and the queue between them.
//!
//! ```text
//! socket ─read─> reader.rs ──parser──> ops ──> router.rs ──> other connections' Outbound
//!                    │                                  └──> this connection's Outbound
//!                    └─ PONG/+OK/-ERR ──> Outbound ──> writer.rs ─vectored write─> socket
//! ```
//!
//! What other tasks hold of a connection — [`ClientHandle`], its outbound queue and close
//! reasons — lives in `server::client`, a leaf this module builds on; nothing below the
//! server root imports `conn`.

pub(crate) mod reader;
pub(crate) mod writer;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpStream;
use tracing::{debug, Instrument};

use super::client::{ClientHandle, CloseReason};
use super::Shared;

/// Why a connection ended (the `reason` monitoring reports for closed connections).
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
    /// The client speaks through WebSocket frames (connection type `WEBSOCKET`).
    pub(crate) websocket: bool,
}

/// Serves one accepted TCP connection until it closes.
pub(crate) async fn serve(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    registered(shared, peer, |shared, client| async move {
        let nonce = shared.auth().needs_nonce().then(reader::new_nonce);
        match upgrade(&shared, &client, stream, nonce).await {
            Some(Transport::Plain(stream, start)) => {
                lend_socket(&client, &stream);
                let (r, w) = stream.into_split();
                run_halves(&shared, &client, r, w, start).await;
            }
            Some(Transport::Tls(stream, start)) => {
                let (r, w) = tokio::io::split(*stream);
                run_halves(&shared, &client, r, w, start).await;
            }
            None => client.close(CloseReason::ProtocolViolation),
        }
    })
    .await;
}

/// Gives the connection's outbound queue a second handle on its socket (a duplicated file
/// descriptor, non-blocking like the first), so that a flush can write on the flusher's thread
/// (see `server::client::outbound`). Without one the writer task does all the writing.
fn lend_socket(client: &ClientHandle, stream: &TcpStream) {
    use std::os::fd::AsFd;
    match stream.as_fd().try_clone_to_owned() {
        Ok(fd) => client.outbound.set_direct(std::net::TcpStream::from(fd)),
        Err(e) => debug!(error = %e, "no second socket handle; the writer task writes alone"),
    }
}

/// Serves one connection that arrives as a byte stream already past its transport's own
/// handshake (a WebSocket's frames, unwrapped): INFO first, no TLS negotiation at this level.
/// `tls`: the transport under it is TLS (`wss://`).
pub(crate) async fn serve_stream<S>(shared: Arc<Shared>, stream: S, peer: SocketAddr, tls: bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    registered(shared, peer, |shared, client| async move {
        let start = Start {
            info_sent: false,
            tls,
            cert_identities: vec![],
            nonce: shared.auth().needs_nonce().then(reader::new_nonce),
            websocket: true,
        };
        let (r, w) = tokio::io::split(stream);
        run_halves(&shared, &client, r, w, start).await;
    })
    .await;
}

/// A connection's life around `body`: a new client handle for `peer`, registered with the
/// server for as long as `body` runs, inside the connection's log span.
async fn registered<F, Fut>(shared: Arc<Shared>, peer: SocketAddr, body: F)
where
    F: FnOnce(Arc<Shared>, Arc<ClientHandle>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let cid = shared.next_cid();
    let client = Arc::new(ClientHandle::new(cid, peer, shared.max_pending()));
    let span = tracing::debug_span!("conn", cid, remote = %peer);
    async move {
        debug!("client connection created");
        shared.register(Arc::clone(&client));
        body(Arc::clone(&shared), Arc::clone(&client)).await;
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
    use crate::config::tls::HandshakeFirst;
    use tokio::io::AsyncWriteExt;

    let plain = |stream, info_sent, nonce| {
        Transport::Plain(
            stream,
            Start {
                info_sent,
                tls: false,
                cert_identities: vec![],
                nonce,
                websocket: false,
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
                websocket: false,
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
