//! Binding the client port and accepting connections.
//!
//! The socket is bound with `SO_REUSEADDR` so a restarted server (or a test harness that just
//! killed one) can re-bind the same port at once. The wildcard `0.0.0.0` (the default) means
//! every address, IPv6 included, as with nats-server: it is bound as one dual-stack socket, and
//! IPv4 peers are reported as IPv4 (not as `::ffff:` mapped addresses). Accept errors back off instead of spinning;
//! connections over `max_connections` get `-ERR 'maximum connections exceeded'` and are
//! closed without ever reaching the protocol code.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use crate::proto::errors as perr;

use super::{conn, ServerError, Shared};

/// Pending-connection backlog for the client listener.
const BACKLOG: u32 = 1024;

/// Resolves `host` and binds `port` (`-1` = any free port) with `SO_REUSEADDR`.
pub(crate) async fn bind(
    host: &str,
    port: i32,
    what: &'static str,
) -> Result<TcpListener, ServerError> {
    let port = if port < 0 {
        0
    } else {
        u16::try_from(port).unwrap_or(0)
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let shown = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let err = |e: std::io::Error| ServerError::Bind {
        what,
        addr: shown.clone(),
        source: e,
    };
    if host == "0.0.0.0" {
        // Where IPv6 is not available, the IPv4 wildcard below is what there is.
        if let Ok(l) = bind_dual_stack(port) {
            return Ok(l);
        }
    }
    let addr: SocketAddr = match tokio::net::lookup_host((host, port))
        .await
        .map_err(err)?
        .next()
    {
        Some(a) => a,
        None => return Err(err(std::io::ErrorKind::AddrNotAvailable.into())),
    };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(BACKLOG).map_err(err)
}

/// A listener on `[::]:port` that takes IPv4 as well (`IPV6_V6ONLY` off, whatever the
/// system default).
fn bind_dual_stack(port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    let addr = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(BACKLOG).unwrap_or(i32::MAX))?;
    TcpListener::from_std(socket.into())
}

/// The address a listener bound for `host` reports, as the operator configured it: the
/// dual-stack wildcard listener of `0.0.0.0` is shown (logs, ports file) as `0.0.0.0:<port>`.
pub(crate) fn as_configured(host: &str, a: SocketAddr) -> SocketAddr {
    if host == "0.0.0.0" && a.ip().is_unspecified() {
        SocketAddr::from(([0, 0, 0, 0], a.port()))
    } else {
        a
    }
}

/// An IPv4 peer of a dual-stack listener as IPv4 (`::ffff:1.2.3.4` → `1.2.3.4`).
pub(crate) fn canonical_peer(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => peer,
        },
        v4 => v4,
    }
}

/// Binds the client listener from the options.
pub(crate) async fn bind_clients(shared: &Shared) -> Result<TcpListener, ServerError> {
    bind(&shared.opts.host, shared.opts.port, "client connections").await
}

/// Accepts clients until `stop` is cancelled and hands each to `serve` on its own task.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    accept_with(listener, shared, stop, true, |shared, stream, peer| {
        conn::serve(shared, stream, peer)
    })
    .await;
}

/// The accept loop every client listener runs: `max_connections` is checked before anything
/// else (a refused client gets `-ERR 'maximum connections exceeded'` when `refuse_in_band`,
/// otherwise the socket is just closed — a WebSocket peer expects HTTP, not protocol text),
/// throttled addresses wait, and accept errors back off instead of spinning.
pub(crate) async fn accept_with<F, Fut>(
    listener: TcpListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
    refuse_in_band: bool,
    serve: F,
) where
    F: Fn(Arc<Shared>, TcpStream, SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((mut stream, peer)) => {
                let peer = canonical_peer(peer);
                backoff = Duration::from_millis(5);
                if shared.num_clients() >= shared.limits.max_connections {
                    warn!(remote = %peer, "maximum connections exceeded, refusing client");
                    if refuse_in_band {
                        tokio::spawn(async move {
                            let msg = format!("-ERR '{}'\r\n", perr::MAX_CONNECTIONS_EXCEEDED);
                            let _ = stream.write_all(msg.as_bytes()).await;
                            let _ = stream.shutdown().await;
                        });
                    }
                    continue;
                }
                debug!(remote = %peer, "accepted client");
                let throttled = shared.auth_throttled(peer.ip());
                let task = serve(Arc::clone(&shared), stream, peer);
                tokio::spawn(async move {
                    if throttled {
                        tokio::time::sleep(super::AUTH_THROTTLE_DELAY).await;
                    }
                    task.await;
                });
            }
            Err(e) => {
                error!(error = %e, "accept failed; backing off {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}
