//! Getting route connections: the route port's accept loop, a supervisor per configured route
//! (dials whenever no route to that peer is up, every second, for as long as the server runs;
//! every 100 ms for the first seconds after a route that was up dropped),
//! and one-shot dials of the peers gossip names (spec/cluster.md §2.9), retried
//! `connect_retries` times. Whoever dialed a pooling peer's first connection also keeps the
//! peer's other slots up ([`fill_pool`], §2.8) for as long as any connection to it is.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::cluster::{parse_route_url, RouteUrl};
use crate::proto::route::PeerInfo;

use super::super::listener::canonical_peer;
use super::super::Shared;
use super::conn::{self, Dialed, Outcome, RouteStream};
use super::{
    Cluster, Slot, DIAL_TIMEOUT, FAST_REDIAL, FAST_REDIAL_WINDOW, MAX_RECONNECT_DELAY,
    RECONNECT_DELAY,
};

/// Accepts route connections until `stop` is cancelled.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    cluster: Arc<Cluster>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stop.cancelled() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                let peer = canonical_peer(peer);
                debug!(remote = %peer, "route connection accepted");
                let (shared, cluster, stop) =
                    (Arc::clone(&shared), Arc::clone(&cluster), stop.clone());
                tokio::spawn(async move {
                    if let Some(stream) = secure(&cluster, stream, peer, None).await {
                        conn::run(shared, cluster, stream, peer, None, stop).await;
                    }
                });
            }
            Err(e) => {
                warn!(error = %e, "route accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connect(url: &RouteUrl) -> Option<(TcpStream, SocketAddr)> {
    let host = url.host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, url.port))
        .await
        .ok()?
        .collect();
    for a in addrs {
        if let Ok(Ok(s)) = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(a)).await {
            return Some((s, a));
        }
    }
    None
}

/// Makes a route socket of an accepted (`server_name` None) or dialed TCP connection: with
/// route TLS, the handshake comes first, both sides present certificates, and a dialer checks
/// that the peer's names `server_name`. None when the handshake fails (logged).
async fn secure(
    cluster: &Cluster,
    stream: TcpStream,
    peer: SocketAddr,
    server_name: Option<&str>,
) -> Option<RouteStream> {
    let Some(tls) = &cluster.tls else {
        return Some(RouteStream::Plain(stream));
    };
    let handshake = async {
        match server_name {
            None => tls
                .acceptor()
                .accept(stream)
                .await
                .map(tokio_rustls::TlsStream::from),
            Some(name) => {
                let name = ServerName::try_from(name.to_owned()).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
                })?;
                tls.connector()
                    .connect(name, stream)
                    .await
                    .map(tokio_rustls::TlsStream::from)
            }
        }
    };
    match tokio::time::timeout(tls.opts.timeout, handshake).await {
        Ok(Ok(s)) => Some(RouteStream::Tls(Box::new(s))),
        Ok(Err(e)) => {
            warn!(remote = %peer, "TLS route handshake error: {e}");
            None
        }
        Err(_) => {
            warn!(remote = %peer, "TLS route handshake error: timeout");
            None
        }
    }
}

/// Runs a route connection we dialed to `url` until it closes.
async fn serve_dialed(
    shared: &Arc<Shared>,
    cluster: &Arc<Cluster>,
    (stream, addr): (TcpStream, SocketAddr),
    url: &RouteUrl,
    (configured, slot): (bool, Option<Slot>),
    stop: &CancellationToken,
) -> Outcome {
    let host = url.host.trim_start_matches('[').trim_end_matches(']');
    let Some(stream) = secure(cluster, stream, addr, Some(host)).await else {
        return Outcome::NoHandshake;
    };
    let dialed = Dialed {
        url: url.clone(),
        configured,
        slot,
    };
    conn::run(
        Arc::clone(shared),
        Arc::clone(cluster),
        stream,
        addr,
        Some(dialed),
        stop.clone(),
    )
    .await
}

fn jittered(d: Duration) -> Duration {
    d + Duration::from_millis(rand::random::<u64>() % 100)
}

/// Keeps a configured route up until `stop`.
pub(crate) async fn configured(
    shared: Arc<Shared>,
    cluster: Arc<Cluster>,
    url_text: String,
    stop: CancellationToken,
) {
    let Some(url) = parse_route_url(&url_text) else {
        return;
    };
    let mut peer_id: Option<String> = None;
    let mut delay = RECONNECT_DELAY;
    let mut failures = 0u32;
    let mut lost_at: Option<std::time::Instant> = None;
    let mut was_up = false;
    loop {
        if stop.is_cancelled() {
            return;
        }
        if !peer_id
            .as_deref()
            .is_some_and(|id| cluster.connected_to(id))
        {
            // Unknown, or gone (a restarted peer has a new id): the peer may have dialed us.
            let host = url.host.trim_start_matches('[').trim_end_matches(']');
            if let Some(id) = cluster.peer_listening_at(host, url.port) {
                peer_id = Some(id);
            }
        }
        let up = peer_id
            .as_deref()
            .is_some_and(|id| cluster.connected_to(id));
        if was_up && !up {
            // The peer's own connection to us dropped: redial it quickly too.
            lost_at = Some(std::time::Instant::now());
        }
        was_up = up;
        if !up {
            match connect(&url).await {
                Some((stream, addr)) => {
                    failures = 0;
                    delay = RECONNECT_DELAY;
                    let outcome =
                        serve_dialed(&shared, &cluster, (stream, addr), &url, (true, None), &stop)
                            .await;
                    match outcome {
                        Outcome::SelfRoute => {
                            debug!(url = %url_text, "route to self ignored");
                            return;
                        }
                        Outcome::Closed(id) => {
                            peer_id = Some(id);
                            lost_at = Some(std::time::Instant::now());
                        }
                        Outcome::Duplicate(id) => peer_id = Some(id),
                        Outcome::Refused | Outcome::NoHandshake => {}
                    }
                }
                None => {
                    failures += 1;
                    if failures == 1 || failures % 60 == 0 {
                        info!(url = %url_text, attempts = failures, "error trying to connect to route");
                    }
                    if cluster.opts.connect_backoff {
                        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
                    }
                }
            }
        }
        let pause = match lost_at {
            Some(at) if !up && at.elapsed() < FAST_REDIAL_WINDOW => {
                FAST_REDIAL + Duration::from_millis(rand::random::<u64>() % 20)
            }
            _ => jittered(delay),
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Dials the peers gossip names and fills the pools connections ask for, until the server
/// stops.
pub(crate) async fn gossip_loop(shared: Arc<Shared>, cluster: Arc<Cluster>) {
    let taken = cluster
        .gossip_rx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let Some(mut rx) = taken else {
        return;
    };
    let pools = cluster
        .pool_rx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let Some(mut pools) = pools else {
        return;
    };
    loop {
        tokio::select! {
            info = rx.recv() => match info {
                Some(info) => gossiped(&shared, &cluster, &info),
                None => return,
            },
            request = pools.recv() => match request {
                Some(r) => fill_pool(&shared, &cluster, &r.peer_id, &r.url, r.pool),
                None => return,
            },
            () = shared.route_stop.cancelled() => return,
        }
    }
}

/// Acts on a gossiped INFO: dials the peer it names unless it is us, already connected, or
/// being dialed.
fn gossiped(shared: &Arc<Shared>, cluster: &Arc<Cluster>, info: &PeerInfo) {
    let id = info.server_id.clone();
    if id.is_empty() || id == shared.server_id || cluster.connected_to(&id) {
        // A pinned connection of a peer we know needs nothing from us: whoever dialed the
        // peer opens the pinned connections of the accounts it pins (`fill_pool`).
        return;
    }
    let url = match &info.ip {
        Some(ip) => parse_route_url(ip),
        None if info.port != 0 => parse_route_url(&format!("{}:{}", info.host, info.port)),
        None => None,
    };
    let Some(url) = url else {
        return;
    };
    {
        let mut d = cluster.dialing.lock().unwrap_or_else(|p| p.into_inner());
        if !d.insert(id.clone()) {
            return;
        }
    }
    let retries = u32::try_from(cluster.opts.connect_retries.max(0)).unwrap_or(0);
    let (shared, cluster) = (Arc::clone(shared), Arc::clone(cluster));
    let stop = shared.route_stop.clone();
    tokio::spawn(async move {
        for attempt in 0..=retries {
            if stop.is_cancelled() || cluster.connected_to(&id) {
                break;
            }
            if let Some((stream, addr)) = connect(&url).await {
                let _ = serve_dialed(
                    &shared,
                    &cluster,
                    (stream, addr),
                    &url,
                    (false, None),
                    &stop,
                )
                .await;
                break;
            }
            if attempt < retries {
                tokio::time::sleep(jittered(RECONNECT_DELAY)).await;
            }
        }
        cluster
            .dialing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    });
}

/// Keeps the other slots of pooling peer `peer_id` (pinned accounts, then pool members `0..pool`)
/// connected, dialing `url` for each one missing, until no connection to the peer is left or
/// the server stops. One task per peer, one dial at a time: the next slot is dialed once the
/// last one answered its first PING, as nats-server's dialer does (its acceptor expects a
/// peer's connections one after the other). A slot that keeps failing is retried every second.
pub(crate) fn fill_pool(
    shared: &Arc<Shared>,
    cluster: &Arc<Cluster>,
    peer_id: &str,
    url: &RouteUrl,
    pool: u32,
) {
    {
        let mut f = cluster.filling.lock().unwrap_or_else(|p| p.into_inner());
        if !f.insert(peer_id.to_owned()) {
            return;
        }
    }
    let slots = cluster.slots_for(pool);
    let (shared, cluster) = (Arc::clone(shared), Arc::clone(cluster));
    let (id, url) = (peer_id.to_owned(), url.clone());
    let stop = shared.route_stop.clone();
    tokio::spawn(async move {
        let mut dialing: tokio::task::JoinSet<Slot> = tokio::task::JoinSet::new();
        let mut busy: std::collections::HashSet<Slot> = std::collections::HashSet::new();
        while !stop.is_cancelled() && cluster.connected_to(&id) {
            let settling = busy.iter().any(|s| !cluster.slot_ready(&id, s));
            let complete = slots.iter().all(|s| cluster.has_slot(&id, s));
            let pause = if settling || !complete {
                SLOT_CHECK
            } else {
                POOL_CHECK
            };
            for slot in &slots {
                if settling {
                    break;
                }
                if !busy.contains(slot) && !cluster.has_slot(&id, slot) {
                    busy.insert(slot.clone());
                    let (shared, cluster, url, stop, slot) = (
                        Arc::clone(&shared),
                        Arc::clone(&cluster),
                        url.clone(),
                        stop.clone(),
                        slot.clone(),
                    );
                    dialing.spawn(async move {
                        dial_slot(&shared, &cluster, &url, &slot, &stop).await;
                        slot
                    });
                    break;
                }
            }
            tokio::select! {
                Some(Ok(slot)) = dialing.join_next() => { busy.remove(&slot); }
                () = tokio::time::sleep(pause) => {}
                () = stop.cancelled() => break,
            }
        }
        // Connections still up end on their own (peer gone, or shutdown): never cut here.
        dialing.detach_all();
        cluster
            .filling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    });
}

/// How often the pool filler looks at its peer's slots while it is filling them.
const SLOT_CHECK: Duration = Duration::from_millis(5);
/// And once they are all up (a slot that drops is redialled within this).
const POOL_CHECK: Duration = Duration::from_millis(250);

/// One connection for `slot`, served until it closes; a dial or handshake that fails waits a
/// second before the slot is tried again.
async fn dial_slot(
    shared: &Arc<Shared>,
    cluster: &Arc<Cluster>,
    url: &RouteUrl,
    slot: &Slot,
    stop: &CancellationToken,
) {
    let outcome = match connect(url).await {
        Some(conn) => {
            serve_dialed(
                shared,
                cluster,
                conn,
                url,
                (false, Some(slot.clone())),
                stop,
            )
            .await
        }
        None => Outcome::NoHandshake,
    };
    if !matches!(outcome, Outcome::Closed(_)) {
        tokio::select! {
            () = tokio::time::sleep(jittered(RECONNECT_DELAY)) => {}
            () = stop.cancelled() => {}
        }
    }
}
