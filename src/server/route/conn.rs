//! One route connection, from the first byte to its close (spec/cluster.md §2.1–2.6).
//!
//! Handshake: the acceptor sends INFO at once; the dialer sends CONNECT at once and its INFO
//! once it has read the acceptor's, because that INFO says whether the peer pools and so
//! which slot the connection claims (`route_pool_idx`, `route_account`; spec §2.1, §2.8). The
//! acceptor checks the CONNECT (a client on the wrong port, credentials, cluster name); both
//! sides register the connection when the peer's INFO arrives, then send the local interest
//! of the accounts it carries. A dialer whose first connection to a pooling peer registered
//! asks the dialer to fill the peer's other slots (`Cluster::fill_pool_of`, served by
//! `dial::fill_pool`). The first INFO each side reads
//! also settles compression (§2.12): when both want it, each direction turns into an S2
//! stream right after that INFO (`compress.rs`), and nothing but the handshake is sent before
//! it (no PINGs until registered). After that the
//! reader applies `RS+`/`RS-` to the account trees, delivers `RMSG`/`HMSG` to local
//! subscribers only, answers PINGs and acts on gossip. The writer is the client connections'
//! writer: a route is a bounded outbound queue like any connection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::cluster::{RouteUrl, MAX_POOL_SIZE};
use crate::proto::errors as perr;
use crate::proto::route::{PeerInfo, RouteConnect, RouteInfo, RouteOp, RouteParser};

use super::super::account::{Account, RemoteInterest, Subscriber, Subscription};
use super::super::client::{ClientHandle, CloseReason};
use super::super::conn::reader::backpressure_wait;
use super::super::conn::writer;
use super::super::router::{self, RouteCtx};
use super::super::{Shared, NATS_COMPAT_VERSION, RUNTIME_VERSION};
use super::compress::{self, Compressing, Decompressing, Mode, Switch};
use super::{encode_interest, unix_nanos, Admission, Cluster, Route, Slot, MAX_PING_INTERVAL};

/// Most remote subscriptions one peer may hold with us; a peer past it is disconnected.
pub(crate) const MAX_REMOTE_SUBS: usize = 4_000_000;
/// Time a peer has to complete the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A route socket: plain TCP, or TLS from its first byte (`cluster { tls {} }`).
pub(crate) enum RouteStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS, handshake done (either side).
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

/// How a connection we dialed came about.
pub(crate) struct Dialed {
    /// The URL dialed (credentials used in CONNECT).
    pub(crate) url: RouteUrl,
    /// One of our configured routes (retried for ever).
    pub(crate) configured: bool,
    /// The pool slot it is for; `None`: the first connection to the peer (slot 0 if it
    /// pools, its only connection if not).
    pub(crate) slot: Option<Slot>,
}

/// How a route connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Closed before the handshake completed.
    NoHandshake,
    /// The peer is this server.
    SelfRoute,
    /// Another connection to this peer was kept.
    Duplicate(String),
    /// Refused for a reason that will not go away by itself (name clash, cluster name).
    Refused,
    /// It was registered and has now closed.
    Closed(String),
}

/// The route INFO this server sends: as acceptor or in updates (`slot` None) with our pool
/// size; as dialer with the slot the connection claims (none for a peer that does not pool).
/// `compression`: the mode agreed on, once it is (else our configured one).
pub(crate) fn our_info(
    shared: &Shared,
    cluster: &Cluster,
    slot: Option<&Slot>,
    compression: Option<Mode>,
) -> Vec<u8> {
    let (name, dynamic) = cluster.name();
    let listen = cluster.listen.get().copied();
    let advertise = cluster.opts.advertise.as_ref().map(|a| {
        let a = a.split_once("://").map_or(a.as_str(), |(_, r)| r);
        format!("nats-route://{}/", a.trim_end_matches('/'))
    });
    let info = RouteInfo {
        server_id: shared.server_id.clone(),
        server_name: shared.server_name.clone(),
        version: NATS_COMPAT_VERSION.to_owned(),
        proto: 2,
        go: RUNTIME_VERSION.to_owned(),
        host: listen.map_or_else(
            || cluster.opts.host.clone(),
            |a| {
                super::super::listener::as_configured(&cluster.opts.host, a)
                    .ip()
                    .to_string()
            },
        ),
        port: listen.map_or(0, |a| a.port()),
        ip: advertise,
        headers: true,
        auth_required: cluster.opts.user.is_some(),
        tls_required: cluster.tls.is_some(),
        tls_verify: cluster.tls.is_some(),
        max_payload: shared.limits.max_payload as i64,
        cluster: name,
        cluster_dynamic: dynamic,
        connect_urls: if cluster.opts.no_advertise {
            Vec::new()
        } else {
            shared.own_client_urls()
        },
        ldm: shared.lame_duck.load(Ordering::Relaxed),
        route_pool_size: match slot {
            Some(Slot::Only) => None,
            _ => cluster.pool(),
        },
        route_pool_idx: match slot {
            Some(Slot::Pool(n)) => *n,
            _ => 0,
        },
        route_account: slot.and_then(Slot::pinned).map(str::to_owned),
        compression: compression
            .unwrap_or_else(|| local_compression(cluster))
            .name()
            .to_owned(),
        sealstream_raft: cluster.raft_port.get().copied(),
        sealstream_tags: cluster.server_tags.get().cloned().unwrap_or_default(),
    };
    let mut line = b"INFO ".to_vec();
    line.extend_from_slice(
        serde_json::to_string(&info)
            .unwrap_or_else(|_| "{}".into())
            .as_bytes(),
    );
    line.extend_from_slice(b"\r\n");
    line
}

/// Our configured compression mode (the config parser admits known names only).
fn local_compression(cluster: &Cluster) -> Mode {
    Mode::parse(&cluster.opts.compression).unwrap_or(Mode::Accept)
}

fn our_connect(shared: &Shared, cluster: &Cluster, url: &RouteUrl) -> Vec<u8> {
    let (user, pass) = match (&url.user, &cluster.opts.user) {
        (Some((u, p)), _) => (Some(u.clone()), Some(p.clone())),
        (None, Some(u)) => (Some(u.clone()), cluster.opts.password.clone()),
        (None, None) => (None, None),
    };
    let c = RouteConnect {
        echo: true,
        verbose: false,
        pedantic: false,
        user,
        pass,
        tls_required: cluster.tls.is_some(),
        headers: true,
        name: shared.server_id.clone(),
        cluster: cluster.name().0,
        lang: None,
        gateway: None,
    };
    let mut line = b"CONNECT ".to_vec();
    line.extend_from_slice(
        serde_json::to_string(&c)
            .unwrap_or_else(|_| "{}".into())
            .as_bytes(),
    );
    line.extend_from_slice(b"\r\n");
    line
}

/// Remote interest one peer holds with us, keyed by (account, subject, queue).
type RemoteSubs = HashMap<(Bytes, Bytes, Option<Bytes>), (Arc<Account>, Arc<Subscription>)>;

/// State of one route connection, owned by its reader.
struct RouteConn {
    shared: Arc<Shared>,
    cluster: Arc<Cluster>,
    handle: Arc<ClientHandle>,
    peer: SocketAddr,
    dialed: Option<Dialed>,
    parser: RouteParser,
    /// Bytes queued so far (exact until the route registers: only this reader queues).
    pushed: u64,
    /// Where the writer starts compressing.
    switch: Arc<Switch>,
    /// The bytes after the op just handled are S2: the reader must switch before parsing on.
    inbound_switch: bool,
    compression: Mode,
    /// A compressed handshake waiting for the peer's INFO inside its S2 stream.
    awaiting: Option<Awaiting>,
    connect_ok: bool,
    route: Option<Arc<Route>>,
    outcome: Outcome,
    subs: RemoteSubs,
    ctx: RouteCtx,
    pings_out: u32,
    ping_sent: Option<std::time::Instant>,
    in_msgs: u64,
    in_bytes: u64,
}

/// What the handshake settled for a connection, before it is registered.
struct Agreed {
    info: PeerInfo,
    body: Vec<u8>,
    slot: Slot,
    pool: Option<u32>,
    mode: Mode,
}

/// The second INFO a compressed handshake waits for (spec §2.12).
enum Awaiting {
    /// We dialed: the acceptor's, after which ours goes out and the route registers.
    AcceptorInfo(Box<Agreed>),
    /// We accepted: the dialer's, which names the slot.
    DialerInfo(Mode),
}

/// Serves one route connection until it closes.
pub(crate) async fn run(
    shared: Arc<Shared>,
    cluster: Arc<Cluster>,
    stream: RouteStream,
    peer: SocketAddr,
    dialed: Option<Dialed>,
    cancel: CancellationToken,
) -> Outcome {
    let cid = shared.next_cid();
    let handle = Arc::new(ClientHandle::new(cid, peer, shared.max_pending()));
    let deadline = shared.write_deadline();
    let switch = Arc::new(Switch::default());
    let (mut r, writer): (Box<dyn AsyncRead + Unpin + Send>, _) = match stream {
        RouteStream::Plain(s) => {
            let _ = s.set_nodelay(true);
            let (r, w) = s.into_split();
            let w = Compressing::new(w, Arc::clone(&switch));
            let writer = tokio::spawn(writer::run(w, Arc::clone(&handle), deadline));
            (Box::new(r), writer)
        }
        RouteStream::Tls(s) => {
            let _ = s.get_ref().0.set_nodelay(true);
            let (r, w) = tokio::io::split(*s);
            let w = Compressing::new(w, Arc::clone(&switch));
            let writer = tokio::spawn(writer::run(w, Arc::clone(&handle), deadline));
            (Box::new(r), writer)
        }
    };
    let hello = match &dialed {
        Some(d) => our_connect(&shared, &cluster, &d.url),
        None => our_info(&shared, &cluster, None, None),
    };
    let mut c = RouteConn {
        ctx: RouteCtx::new(shared.seed ^ cid),
        shared,
        cluster,
        handle: Arc::clone(&handle),
        peer,
        dialed,
        parser: RouteParser::new(),
        pushed: 0,
        switch,
        inbound_switch: false,
        compression: Mode::Off,
        awaiting: None,
        connect_ok: false,
        route: None,
        outcome: Outcome::NoHandshake,
        subs: HashMap::new(),
        pings_out: 0,
        ping_sent: None,
        in_msgs: 0,
        in_bytes: 0,
    };
    c.connect_ok = c.dialed.is_some();
    c.push(&hello);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let ping_every = c
        .cluster
        .opts
        .ping_interval
        .unwrap_or(c.shared.limits.ping_interval)
        .min(MAX_PING_INTERVAL);
    let ping_max = c
        .cluster
        .opts
        .ping_max
        .map_or(c.shared.limits.ping_max, |m| {
            u32::try_from(m.max(1)).unwrap_or(2)
        });
    let jitter = Duration::from_millis(rand::random::<u64>() % 200);
    let mut next_ping = tokio::time::Instant::now() + Duration::from_secs(1) + jitter;
    let handshake_deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        let deadline = if c.route.is_none() {
            next_ping.min(handshake_deadline)
        } else {
            next_ping
        };
        tokio::select! {
            n = r.read_buf(&mut buf) => {
                match n {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if let Some(route) = &c.route {
                    route.last_activity.store(unix_nanos(), Ordering::Relaxed);
                }
                if !c.process(&mut buf) {
                    break;
                }
                if c.inbound_switch {
                    // What follows the handshake's INFO is S2, read already or not.
                    c.inbound_switch = false;
                    let plain: Box<dyn AsyncRead + Unpin + Send> = Box::new(tokio::io::empty());
                    let old = std::mem::replace(&mut r, plain);
                    r = Box::new(Decompressing::new(old, &buf.split()));
                }
                c.flush();
                let (throttle, stalled) = c.ctx.take_backpressure();
                if !throttle.is_empty() || !stalled.is_empty() {
                    backpressure_wait(&throttle, &stalled, c.handle.cid).await;
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                if c.route.is_none() {
                    if tokio::time::Instant::now() >= handshake_deadline {
                        debug!(remote = %peer, "route handshake timed out");
                        break;
                    }
                    // Nothing but the handshake before it completes: the peer may switch
                    // to S2 right after our INFO.
                    next_ping = tokio::time::Instant::now() + ping_every;
                    continue;
                }
                if c.pings_out >= ping_max {
                    info!(remote = %peer, "route connection is stale, closing");
                    c.handle.close(CloseReason::StaleConnection);
                    break;
                }
                c.pings_out += 1;
                c.ping_sent = Some(std::time::Instant::now());
                c.push(b"PING\r\n");
                next_ping = tokio::time::Instant::now() + ping_every;
            }
            () = handle.cancelled() => break,
            () = cancel.cancelled() => {
                c.handle.close(CloseReason::ServerShutdown);
                break;
            }
        }
    }
    c.finish();
    if !handle.is_closed() {
        handle.close(CloseReason::ClientClosed);
    }
    let _ = writer.await;
    c.outcome
}

impl RouteConn {
    fn push(&mut self, bytes: &[u8]) {
        self.pushed += bytes.len() as u64;
        if let Ok(true) = self.handle.outbound.push_raw(bytes) {
            self.handle.outbound.wake();
        }
    }

    fn fail(&mut self, text: &str) -> bool {
        let mut line = BytesMut::new();
        crate::proto::encode::encode_err(&mut line, text);
        self.push(&line);
        self.handle.close(CloseReason::ProtocolViolation);
        false
    }

    /// Wakes the queues this batch wrote to and counts the batch.
    fn flush(&mut self) {
        let (msgs, bytes, slow) = self.ctx.take_counts();
        let st = &self.shared.stats;
        st.out_msgs.fetch_add(msgs, Ordering::Relaxed);
        st.out_bytes.fetch_add(bytes, Ordering::Relaxed);
        st.slow_consumers.fetch_add(slow, Ordering::Relaxed);
        st.in_msgs.fetch_add(self.in_msgs, Ordering::Relaxed);
        st.in_bytes.fetch_add(self.in_bytes, Ordering::Relaxed);
        if let Some(r) = &self.route {
            r.in_msgs.fetch_add(self.in_msgs, Ordering::Relaxed);
            r.in_bytes.fetch_add(self.in_bytes, Ordering::Relaxed);
        }
        self.in_msgs = 0;
        self.in_bytes = 0;
        for q in self.ctx.wake.drain(..) {
            q.outbound.flush();
        }
        self.handle.outbound.flush();
    }

    /// Applies every complete op in `buf`; false when the route must close.
    fn process(&mut self, buf: &mut BytesMut) -> bool {
        loop {
            let op = match self.parser.next_op(buf) {
                Ok(Some(op)) => op,
                Ok(None) => return true,
                Err(e) => {
                    warn!(remote = %self.peer, error = %e, "route protocol error");
                    let text = e.err_text().unwrap_or(perr::UNKNOWN_PROTOCOL_OPERATION);
                    return self.fail(text);
                }
            };
            if !self.handle_op(op) {
                return false;
            }
            if self.inbound_switch {
                return true;
            }
        }
    }

    fn handle_op(&mut self, op: RouteOp) -> bool {
        match op {
            RouteOp::Ping => {
                self.push(b"PONG\r\n");
                true
            }
            RouteOp::Pong => {
                self.pings_out = 0;
                if let (Some(at), Some(r)) = (self.ping_sent.take(), &self.route) {
                    let ns = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    r.rtt.store(ns.max(1), Ordering::Relaxed);
                }
                true
            }
            RouteOp::Ok => true,
            RouteOp::Err(text) => {
                let text = String::from_utf8_lossy(&text);
                if text.contains("dedicated route") {
                    // nats-server trying a pinned-account connection to a one-connection
                    // peer: expected, and it does not retry (spec §2.8).
                    debug!(remote = %self.peer, "route error from peer: {text}");
                } else {
                    warn!(remote = %self.peer, "route error from peer: {text}");
                }
                if text.contains("cluster name") {
                    self.outcome = Outcome::Refused;
                }
                self.handle.close(CloseReason::ClientClosed);
                false
            }
            RouteOp::Connect(body) => self.on_connect(&body),
            RouteOp::Info(body) => self.on_info(&body),
            op if self.route.is_none() => {
                debug!(remote = %self.peer, ?op, "route op before the handshake");
                self.fail(perr::UNKNOWN_PROTOCOL_OPERATION)
            }
            RouteOp::Sub {
                account,
                subject,
                queue,
            } => self.on_sub(account, subject, queue),
            RouteOp::Unsub {
                account,
                subject,
                queue,
            } => {
                if let Some((acc, sub)) = self.subs.remove(&(account, subject, queue)) {
                    acc.unsubscribe(&sub);
                    if let Some(r) = &self.route {
                        r.subs.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                true
            }
            RouteOp::Msg {
                account,
                subject,
                reply,
                queues,
                shown,
                headers,
                payload,
            } => {
                self.in_msgs += 1;
                self.in_bytes += (payload.len() + headers.as_ref().map_or(0, Bytes::len)) as u64;
                let name = String::from_utf8_lossy(&account);
                let Some(acc) = self.shared.accounts.get(&name) else {
                    return true;
                };
                if let Some(shown) = shown {
                    // A JetStream delivery: this server's plain subscribers of `subject`
                    // (`JMSG`), or the members of the groups the sender picked here (`JQMSG`).
                    let reach = if queues.is_empty() {
                        router::DeliveryReach::Follower
                    } else {
                        router::DeliveryReach::Picked(&queues)
                    };
                    router::deliver_as(
                        &mut self.ctx,
                        &acc,
                        &subject,
                        &shown,
                        reply.as_deref(),
                        headers.as_ref(),
                        &payload,
                        reach,
                    );
                } else {
                    router::deliver_routed(
                        &mut self.ctx,
                        &acc,
                        &subject,
                        reply.as_deref(),
                        &queues,
                        headers.as_ref(),
                        &payload,
                    );
                }
                true
            }
        }
    }

    fn on_connect(&mut self, body: &[u8]) -> bool {
        if self.dialed.is_some() {
            return true;
        }
        let Ok(c) = serde_json::from_slice::<RouteConnect>(body) else {
            return self.fail(perr::UNKNOWN_PROTOCOL_OPERATION);
        };
        if c.lang.is_some() {
            return self.fail(perr::ROUTE_PORT_CLIENT);
        }
        if c.gateway.is_some() {
            return self.fail(perr::UNKNOWN_PROTOCOL_OPERATION);
        }
        let opts = &self.cluster.opts;
        if let Some(user) = &opts.user {
            let ok = c.user.as_deref() == Some(user.as_str())
                && c.pass.as_deref().unwrap_or("") == opts.password.as_deref().unwrap_or("");
            if !ok {
                warn!(remote = %self.peer, "route authorization failed");
                return self.fail(perr::AUTHORIZATION_VIOLATION);
            }
        }
        if !c.cluster.is_empty() && !self.cluster.accept_cluster_name(&c.cluster, false) {
            let ours = self.cluster.name().0;
            warn!(remote = %self.peer, "cluster name from remote server conflicts: {:?}", c.cluster);
            self.outcome = Outcome::Refused;
            return self.fail(&perr::cluster_name_mismatch(&c.cluster, &ours));
        }
        self.connect_ok = true;
        true
    }

    fn on_info(&mut self, body: &[u8]) -> bool {
        let Ok(info) = serde_json::from_slice::<PeerInfo>(body) else {
            return self.fail(perr::UNKNOWN_PROTOCOL_OPERATION);
        };
        debug!(remote = %self.peer, info = %String::from_utf8_lossy(body), "route INFO");
        match &self.route {
            None => match self.awaiting.take() {
                None => self.register(info, body),
                // The acceptor's INFO inside its S2 stream: ours in our stream, and done.
                Some(Awaiting::AcceptorInfo(agreed)) => {
                    let line = our_info(
                        &self.shared,
                        &self.cluster,
                        Some(&agreed.slot),
                        Some(agreed.mode),
                    );
                    self.push(&line);
                    self.admit_route(*agreed)
                }
                // The dialer's INFO inside its S2 stream, with the slot it claims.
                Some(Awaiting::DialerInfo(mode)) => {
                    let Some((slot, pool)) = self.slot_for(&info) else {
                        return false;
                    };
                    self.admit_route(Agreed {
                        info,
                        body: body.to_vec(),
                        slot,
                        pool,
                        mode,
                    })
                }
            },
            Some(r) => {
                let id = r.remote_id();
                if info.server_id == id {
                    if self.cluster.update_peer(&id, &info.connect_urls, info.ldm) {
                        self.cluster.urls_changed.notify_one();
                    }
                } else {
                    self.cluster.gossip(info);
                }
                true
            }
        }
    }

    fn register(&mut self, info: PeerInfo, body: &[u8]) -> bool {
        if !self.connect_ok {
            return self.fail(perr::AUTHORIZATION_VIOLATION);
        }
        if self.dialed.is_some()
            && !info.cluster.is_empty()
            && !self
                .cluster
                .accept_cluster_name(&info.cluster, info.cluster_dynamic)
        {
            warn!(remote = %self.peer, "cluster name from remote server conflicts: {:?}", info.cluster);
            self.outcome = Outcome::Refused;
            self.handle.close(CloseReason::ClientClosed);
            return false;
        }
        let mode = match compress::negotiate(
            local_compression(&self.cluster),
            info.compression.as_deref(),
        ) {
            Ok(m) => m,
            Err(text) => return self.fail(&text),
        };
        self.compression = mode;
        if self.dialed.is_none() && mode.is_on() {
            // A compressing dialer's INFO in clear settles compression only; its slot comes
            // in the INFO that opens its S2 stream, answered by ours opening our stream.
            self.switch.set(self.pushed, mode);
            let info_line = our_info(&self.shared, &self.cluster, None, Some(mode));
            self.push(&info_line);
            self.inbound_switch = true;
            self.awaiting = Some(Awaiting::DialerInfo(mode));
            return true;
        }
        let Some((slot, pool)) = self.slot_for(&info) else {
            return false;
        };
        if let Some(d) = &self.dialed {
            let slot_gone = d.slot.is_some() && slot == Slot::Only;
            let info_line = our_info(&self.shared, &self.cluster, Some(&slot), Some(mode));
            self.push(&info_line);
            if slot_gone {
                // A slot of a peer that no longer pools (it restarted with `pool_size: -1`).
                self.handle.close(CloseReason::ClientClosed);
                return false;
            }
            if mode.is_on() {
                // Nothing more until the acceptor's INFO arrives inside its S2 stream:
                // nats-server reads S2 only from its next read after our INFO. Then our INFO
                // again, the first thing in our stream (nats-server takes the slot from it).
                self.switch.set(self.pushed, mode);
                self.inbound_switch = true;
                self.awaiting = Some(Awaiting::AcceptorInfo(Box::new(Agreed {
                    info,
                    body: body.to_vec(),
                    slot,
                    pool,
                    mode,
                })));
                return true;
            }
        }
        self.admit_route(Agreed {
            info,
            body: body.to_vec(),
            slot,
            pool,
            mode,
        })
    }

    /// Registers the connection the handshake agreed on, sends the interest it carries,
    /// gossips a new peer and starts filling a dialed peer's pool.
    fn admit_route(&mut self, agreed: Agreed) -> bool {
        let Agreed {
            info,
            body,
            slot,
            pool,
            mode,
        } = agreed;
        let body = &body[..];
        if self.dialed.is_some() {
            // Its PONG tells the pool filler the peer has taken this connection.
            self.pings_out += 1;
            self.ping_sent = Some(std::time::Instant::now());
            self.push(b"PING\r\n");
        }
        if let Some(account) = slot.pinned() {
            self.parser.pin(account);
        }
        self.handle.headers.store(info.headers, Ordering::Relaxed);
        let id = info.server_id.clone();
        let route = Arc::new(Route {
            handle: Arc::clone(&self.handle),
            info: Mutex::new(info),
            did_solicit: self.dialed.is_some(),
            configured: self.dialed.as_ref().is_some_and(|d| d.configured),
            in_msgs: AtomicU64::new(0),
            in_bytes: AtomicU64::new(0),
            subs: AtomicU64::new(0),
            last_activity: AtomicU64::new(unix_nanos()),
            rtt: AtomicU64::new(0),
            slot,
            pool: pool.unwrap_or(1),
            compression: mode,
        });
        let first = match self.cluster.admit(&route) {
            Admission::Registered { first } => first,
            Admission::SelfRoute => {
                debug!("detected route to self, ignoring");
                self.outcome = Outcome::SelfRoute;
                self.handle.close(CloseReason::ClientClosed);
                return false;
            }
            Admission::Duplicate => {
                debug!(remote = %self.peer, "duplicate route, closing this connection");
                self.outcome = Outcome::Duplicate(id);
                self.handle.close(CloseReason::ClientClosed);
                return false;
            }
            Admission::DuplicateName => {
                let name = route.lock_info().server_name.clone();
                warn!(remote = %self.peer, "Remote server has a duplicate name: {name:?}");
                self.outcome = Outcome::Refused;
                self.handle.close(CloseReason::ClientClosed);
                return false;
            }
        };
        info!(
            remote = %self.peer,
            name = %route.lock_info().server_name,
            slot = ?route.slot,
            "Route connection created"
        );
        self.outcome = Outcome::Closed(id.clone());
        self.route = Some(Arc::clone(&route));
        self.send_interest(&route);
        if first {
            self.gossip(body, &id, route.slot.pinned());
        }
        if let (Some(d), Some(pool)) = (&self.dialed, pool) {
            self.cluster.fill_pool_of(super::PoolRequest {
                peer_id: id.clone(),
                url: d.url.clone(),
                pool,
            });
        }
        true
    }

    /// Which of the peer's connections this one is, and the pool size used with the peer
    /// (`None`: no pooling); `None` after refusing a claim.
    fn slot_for(&mut self, info: &PeerInfo) -> Option<(Slot, Option<u32>)> {
        let theirs = info
            .route_pool_size
            .filter(|n| *n > 0)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX).min(MAX_POOL_SIZE));
        let pool = match (self.cluster.pool(), theirs) {
            (Some(ours), Some(theirs)) => Some(ours.max(theirs)),
            _ => None,
        };
        let slot = match (&self.dialed, pool) {
            (Some(d), Some(_)) => d.slot.clone().unwrap_or(Slot::Pool(0)),
            (Some(_), None) => Slot::Only,
            (None, Some(n)) => match &info.route_account {
                Some(a) => Slot::Pinned(Arc::from(a.as_str())),
                None => match u32::try_from(info.route_pool_idx) {
                    Ok(i) if i < n => Slot::Pool(i),
                    _ => {
                        let text = format!("Invalid route pool index: {}", info.route_pool_idx);
                        self.fail(&text);
                        return None;
                    }
                },
            },
            (None, None) => {
                if let Some(a) = &info.route_account {
                    let text = format!(
                        "Not possible to have a dedicated route for account {a:?} between those servers"
                    );
                    self.fail(&text);
                    return None;
                }
                if info.route_pool_idx != 0 {
                    let text = format!("Invalid route pool index: {}", info.route_pool_idx);
                    self.fail(&text);
                    return None;
                }
                Slot::Only
            }
        };
        Some((slot, pool))
    }

    /// The local interest of every account `route` carries, each under its count lock.
    fn send_interest(&self, route: &Route) {
        let pinned = route.slot.pinned().is_some();
        for acc in self.shared.accounts.all() {
            if !self.cluster.carries(route, &acc.name) {
                continue;
            }
            let name = if pinned { "" } else { acc.name.as_str() };
            acc.dump_local_interest(
                |out, subject, queue, n| encode_interest(out, name, subject, queue, n),
                |bytes| {
                    if let Ok(true) = self.handle.outbound.push_raw(bytes) {
                        self.handle.outbound.wake();
                    }
                },
            );
        }
    }

    /// Tells the other members about this peer (its INFO, nonce and pool slot cleared, `ip`
    /// filled in), so they dial it and the mesh completes (spec §2.9): once for its pool (or
    /// only connection), once per pinned connection.
    fn gossip(&self, body: &[u8], peer_id: &str, pinned: Option<&str>) {
        let Ok(serde_json::Value::Object(mut m)) = serde_json::from_slice(body) else {
            return;
        };
        m.remove("nonce");
        // Gossip names the account of a pinned connection, so the receivers open theirs for
        // it too (nats-server dials a pinned route on such an INFO, a pool on one without).
        m.remove("route_pool_idx");
        match pinned {
            Some(a) => m.insert("route_account".into(), a.into()),
            None => m.remove("route_account"),
        };
        if !m.contains_key("ip") {
            let port = m
                .get("port")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            let host = match &self.dialed {
                Some(d) => d.url.host.clone(),
                None => self.peer.ip().to_string(),
            };
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            m.insert(
                "ip".into(),
                serde_json::Value::String(format!("nats-route://{host}:{port}/")),
            );
        }
        let mut line = b"INFO ".to_vec();
        line.extend_from_slice(serde_json::Value::Object(m).to_string().as_bytes());
        line.extend_from_slice(b"\r\n");
        self.cluster.broadcast(&line, Some(peer_id));
    }

    fn on_sub(&mut self, account: Bytes, subject: Bytes, queue: Option<(Bytes, u32)>) -> bool {
        let (qname, weight) = match queue {
            Some((q, w)) => (Some(q), w),
            None => (None, 1),
        };
        let key = (account.clone(), subject.clone(), qname.clone());
        if let Some((_, sub)) = self.subs.get(&key) {
            if let Subscriber::Route(ri) = &sub.subscriber {
                ri.weight.store(weight, Ordering::Relaxed);
            }
            return true;
        }
        if self.subs.len() >= MAX_REMOTE_SUBS {
            warn!(remote = %self.peer, "route peer exceeded {MAX_REMOTE_SUBS} subscriptions");
            return self.fail("Maximum Subscriptions Exceeded");
        }
        let name = String::from_utf8_lossy(&account).into_owned();
        let Some(acc) = self.account_for(&name) else {
            debug!(account = %name, "interest for an unknown account dropped");
            return true;
        };
        let (peer, takes_deliveries) = self.route.as_ref().map_or_else(
            || (Arc::from(""), false),
            |r| {
                let info = r.lock_info();
                (
                    Arc::from(info.server_name.as_str()),
                    info.sealstream_raft.is_some(),
                )
            },
        );
        let sub = Arc::new(Subscription {
            subscriber: Subscriber::Route(Arc::new(RemoteInterest {
                route: Arc::clone(&self.handle),
                weight: AtomicU32::new(weight),
                pinned: self
                    .route
                    .as_ref()
                    .is_some_and(|r| r.slot.pinned().is_some()),
                peer,
                takes_deliveries,
            })),
            sid: Bytes::new(),
            subject,
            queue: qname,
            delivered: AtomicU64::new(0),
            max: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            deny: None,
        });
        if acc.subscribe(&sub).is_err() {
            debug!(account = %name, "invalid subject in route interest dropped");
            return true;
        }
        if let Some(r) = &self.route {
            r.subs.fetch_add(1, Ordering::Relaxed);
        }
        self.subs.insert(key, (acc, sub));
        true
    }

    /// The account a peer names: one we have, or (operator mode) an account public key the
    /// trusted operator may issue, created empty so its interest is kept until a local
    /// client of it appears.
    fn account_for(&self, name: &str) -> Option<Arc<Account>> {
        if let Some(a) = self.shared.accounts.get(name) {
            return Some(a);
        }
        let operator_mode = self.shared.auth().trust().is_some();
        (operator_mode
            && crate::auth::nkeys::is_public_key(name, &[crate::auth::nkeys::Role::Account]))
        .then(|| self.shared.accounts.create(name))
    }

    /// Drops everything the peer told us (its interest goes with the connection).
    fn finish(&mut self) {
        for (_, (acc, sub)) in self.subs.drain() {
            acc.unsubscribe(&sub);
        }
        if let Some(route) = self.route.take() {
            self.cluster.remove(&route);
            info!(
                remote = %self.peer,
                name = %route.lock_info().server_name,
                "Route connection closed"
            );
        }
    }
}
