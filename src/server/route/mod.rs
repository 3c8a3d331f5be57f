//! Clustering for core NATS: this server joined to its peers by routes (`spec/cluster.md`).
//!
//! ```text
//! route port ─accept─┐                      ┌─ RS+/RS- ──> account trees (Subscriber::Route)
//!                    ├─ conn.rs handshake ──┤
//! cluster.routes ─dial┘   (INFO/CONNECT)    └─ RMSG/HMSG ─> router::deliver_routed (local only)
//!
//! local SUB/UNSUB ─> Account::count_interest ─> Cluster (InterestSink) ─> RS+/RS- to every route
//! local PUB ───────> router::publish ─> one RMSG per peer whose interest matched
//! ```
//!
//! - [`Cluster`] is the membership table: one registered route per peer `server_id`, the
//!   peers' client URLs (for clients' `connect_urls`), and the interest sink every account
//!   reports its own subscriptions to.
//! - `conn.rs` runs one route connection: handshake, keepalive, and applying what the peer
//!   sends. `dial.rs` accepts on the route port and keeps dialing the configured seeds and the
//!   peers gossip tells us about.
//!
//! We speak nats-server's "no pool" route mode: one connection per peer, account names in every
//! op, no compression (spec §2.8, §2.12, §2.14), so a mixed cluster with nats-server works.
//! JetStream stays node-local (its in-process subscriptions are not advertised) until streams
//! are replicated.
//!
//! Lock order: an account's interest-count lock, then (inside) [`Cluster`]'s route list (read),
//! then an outbound queue. The membership table is a leaf, never held while taking another
//! lock or doing I/O.

pub(crate) mod conn;
pub(crate) mod dial;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use bytes::BytesMut;

use crate::config::cluster::ClusterOptions;
use crate::proto::route::{self as wire, PeerInfo};

use super::account::InterestSink;
use super::client::{ClientHandle, CloseReason};
use super::tls::RouteTls;

/// Delay between dials of a configured route, and the first retry of a gossiped one.
pub(crate) const RECONNECT_DELAY: std::time::Duration = std::time::Duration::from_secs(1);
/// How often a configured route that was up is tried again right after it drops, and for
/// how long: a peer restarting (a rolling restart) is back within that window, and its
/// routes and interest come back in about this delay instead of a whole [`RECONNECT_DELAY`].
pub(crate) const FAST_REDIAL: std::time::Duration = std::time::Duration::from_millis(100);
/// See [`FAST_REDIAL`].
pub(crate) const FAST_REDIAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(3);
/// Longest delay with `connect_backoff`.
pub(crate) const MAX_RECONNECT_DELAY: std::time::Duration = std::time::Duration::from_secs(30);
/// Dial timeout.
pub(crate) const DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);
/// Route PINGs are sent at most this far apart.
pub(crate) const MAX_PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// One registered route: a peer and the connection we talk to it on.
pub(crate) struct Route {
    /// The connection's queue (its `cid` is the route id, `rid` in `/routez`).
    pub(crate) handle: Arc<ClientHandle>,
    /// What the peer said in its INFO (updated by later INFOs from it).
    pub(crate) info: Mutex<PeerInfo>,
    /// We dialed it.
    pub(crate) did_solicit: bool,
    /// It is one of our configured routes.
    pub(crate) configured: bool,
    /// Messages and bytes received on the route.
    pub(crate) in_msgs: AtomicU64,
    /// See `in_msgs`.
    pub(crate) in_bytes: AtomicU64,
    /// Remote subscriptions the peer holds with us.
    pub(crate) subs: AtomicU64,
    /// Last time anything arrived (unix nanoseconds).
    pub(crate) last_activity: AtomicU64,
    /// Measured round trip of the last PING (nanoseconds; 0 unknown).
    pub(crate) rtt: AtomicU64,
}

impl Route {
    /// The peer's server id.
    pub(crate) fn remote_id(&self) -> String {
        self.lock_info().server_id.clone()
    }

    pub(crate) fn lock_info(&self) -> std::sync::MutexGuard<'_, PeerInfo> {
        self.info.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What registering a route decided.
pub(crate) enum Admission {
    /// Registered; the caller sends its interest.
    Registered,
    /// The peer is this server.
    SelfRoute,
    /// Another connection to the same peer stays; close this one quietly.
    Duplicate,
    /// Another server already uses this name.
    DuplicateName,
}

/// The cluster membership table and the interest sink.
pub(crate) struct Cluster {
    /// The `cluster {}` options.
    pub(crate) opts: ClusterOptions,
    /// Cluster name (a generated one may adopt a configured peer's, spec §2.13).
    name: RwLock<(String, bool)>,
    /// Registered routes by peer server id.
    routes: RwLock<HashMap<String, Arc<Route>>>,
    /// The route listener's address, once bound.
    pub(crate) listen: std::sync::OnceLock<SocketAddr>,
    /// Server ids and addresses being dialed because of gossip (no second dial while one runs).
    pub(crate) dialing: Mutex<std::collections::HashSet<String>>,
    /// This server's id and name.
    pub(crate) server_id: String,
    pub(crate) server_name: String,
    /// Changed whenever the set of peers' client URLs changes (clients get an async INFO).
    pub(crate) urls_changed: tokio::sync::Notify,
    /// Peers gossip told us about, for the dialer (bounded; see [`Cluster::gossip`]).
    gossip_tx: tokio::sync::mpsc::Sender<PeerInfo>,
    /// Its receiving end, taken once by the dialer.
    pub(crate) gossip_rx: Mutex<Option<tokio::sync::mpsc::Receiver<PeerInfo>>>,
    /// Route TLS, when `cluster { tls {} }` is set: every route is TLS from its first byte.
    pub(crate) tls: Option<RouteTls>,
}

/// Gossiped peers waiting for the dialer; past this, gossip is dropped (and logged): a peer we
/// miss that way dials us itself or is gossiped again when it reconnects anywhere.
pub(crate) const GOSSIP_QUEUE: usize = 1024;

impl Cluster {
    /// The table for `opts`, before any route exists.
    pub(crate) fn new(
        opts: ClusterOptions,
        tls: Option<RouteTls>,
        server_id: &str,
        server_name: &str,
    ) -> Self {
        let name = match &opts.name {
            Some(n) => (n.clone(), false),
            None => {
                let generated = nkeys::KeyPair::new_server().public_key();
                let short: String = generated.chars().skip(1).take(22).collect();
                tracing::warn!("Cluster name was dynamically generated, consider setting one");
                (short, true)
            }
        };
        let (gossip_tx, gossip_rx) = tokio::sync::mpsc::channel(GOSSIP_QUEUE);
        Cluster {
            tls,
            gossip_tx,
            gossip_rx: Mutex::new(Some(gossip_rx)),
            opts,
            name: RwLock::new(name),
            routes: RwLock::new(HashMap::new()),
            listen: std::sync::OnceLock::new(),
            dialing: Mutex::new(std::collections::HashSet::new()),
            server_id: server_id.to_owned(),
            server_name: server_name.to_owned(),
            urls_changed: tokio::sync::Notify::new(),
        }
    }

    /// The cluster name and whether it was generated.
    pub(crate) fn name(&self) -> (String, bool) {
        self.name.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether a peer naming cluster `theirs` (generated or not) may join, adopting a
    /// configured name when ours was generated (spec §2.13).
    pub(crate) fn accept_cluster_name(&self, theirs: &str, theirs_dynamic: bool) -> bool {
        let mut g = self.name.write().unwrap_or_else(|p| p.into_inner());
        if g.0 == theirs {
            return true;
        }
        match (g.1, theirs_dynamic) {
            (false, false) => false,
            (false, true) => true,
            (true, false) => {
                *g = (theirs.to_owned(), false);
                true
            }
            (true, true) => {
                if theirs > g.0.as_str() {
                    g.0 = theirs.to_owned();
                }
                true
            }
        }
    }

    fn read_routes(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Route>>> {
        self.routes.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every registered route (a snapshot).
    pub(crate) fn routes(&self) -> Vec<Arc<Route>> {
        self.read_routes().values().cloned().collect()
    }

    /// Whether a route to `server_id` is registered.
    pub(crate) fn connected_to(&self, server_id: &str) -> bool {
        self.read_routes().contains_key(server_id)
    }

    /// The server id of a registered peer whose route listener is `host:port` (as its INFO
    /// gives it, or its connection's address with the INFO's port): a configured route
    /// whose peer already dialed us needs no second connection (and the churn of resolving
    /// the duplicate).
    pub(crate) fn peer_listening_at(&self, host: &str, port: u16) -> Option<String> {
        self.read_routes().iter().find_map(|(id, r)| {
            let i = r.lock_info();
            let advertised =
                i.ip.as_deref()
                    .and_then(crate::config::cluster::parse_route_url)
                    .is_some_and(|u| u.host == host && u.port == port);
            let listening =
                i.port == port && (i.host == host || r.handle.peer.ip().to_string() == host);
            (advertised || listening).then(|| id.clone())
        })
    }

    /// Registers `route` for its peer. Of two connections to one peer (both sides dialed) the
    /// one dialed by the server with the smaller id stays, on both sides alike.
    pub(crate) fn admit(&self, route: &Arc<Route>) -> Admission {
        let (id, name) = {
            let i = route.lock_info();
            (i.server_id.clone(), i.server_name.clone())
        };
        if id == self.server_id {
            return Admission::SelfRoute;
        }
        let replaced = {
            let mut m = self.routes.write().unwrap_or_else(|p| p.into_inner());
            if name == self.server_name
                || m.values()
                    .any(|r| r.remote_id() != id && r.lock_info().server_name == name)
            {
                return Admission::DuplicateName;
            }
            match m.get(&id) {
                Some(old) => {
                    let dialer = |r: &Route| {
                        if r.did_solicit {
                            self.server_id.clone()
                        } else {
                            id.clone()
                        }
                    };
                    if dialer(route) < dialer(old) {
                        let old = Arc::clone(old);
                        m.insert(id.clone(), Arc::clone(route));
                        Some(old)
                    } else {
                        return Admission::Duplicate;
                    }
                }
                None => {
                    m.insert(id, Arc::clone(route));
                    None
                }
            }
        };
        if let Some(old) = replaced {
            old.handle.close(CloseReason::ClientClosed);
        }
        self.urls_changed.notify_one();
        Admission::Registered
    }

    /// Removes `route` if it is the registered one for its peer.
    pub(crate) fn remove(&self, route: &Route) {
        let id = route.remote_id();
        let removed = {
            let mut m = self.routes.write().unwrap_or_else(|p| p.into_inner());
            match m.get(&id) {
                Some(r) if r.handle.cid == route.handle.cid => m.remove(&id).is_some(),
                _ => false,
            }
        };
        if removed {
            self.urls_changed.notify_one();
        }
    }

    /// The other members' client URLs, in a stable order (none with `no_advertise`, none of
    /// a peer in lame-duck mode).
    pub(crate) fn peer_client_urls(&self) -> Vec<String> {
        if self.opts.no_advertise {
            return Vec::new();
        }
        let mut peers: Vec<(String, Vec<String>)> = self
            .read_routes()
            .values()
            .map(|r| {
                let i = r.lock_info();
                let urls = if i.ldm {
                    Vec::new()
                } else {
                    i.connect_urls.clone()
                };
                (i.server_name.clone(), urls)
            })
            .collect();
        peers.sort();
        peers.into_iter().flat_map(|(_, u)| u).collect()
    }

    /// Hands a gossiped peer to the dialer.
    pub(crate) fn gossip(&self, info: PeerInfo) {
        if self.gossip_tx.try_send(info).is_err() {
            tracing::warn!("gossip queue full ({GOSSIP_QUEUE}): a gossiped peer is not dialed");
        }
    }

    /// Sends `bytes` to every registered route except `skip`.
    pub(crate) fn broadcast(&self, bytes: &[u8], skip: Option<u64>) {
        for r in self.read_routes().values() {
            if Some(r.handle.cid) == skip {
                continue;
            }
            if let Ok(true) = r.handle.outbound.push_raw(bytes) {
                r.handle.outbound.wake();
            }
        }
    }
}

impl InterestSink for Cluster {
    fn changed(&self, account: &str, subject: &[u8], queue: Option<&[u8]>, count: u32) {
        let mut line = BytesMut::new();
        encode_interest(&mut line, account, subject, queue, count);
        self.broadcast(&line, None);
    }
}

/// `RS+` (with the weight for a queue) while `count > 0`, else `RS-`.
pub(crate) fn encode_interest(
    out: &mut BytesMut,
    account: &str,
    subject: &[u8],
    queue: Option<&[u8]>,
    count: u32,
) {
    if count > 0 {
        wire::encode_sub(out, account.as_bytes(), subject, queue.map(|q| (q, count)));
    } else {
        wire::encode_unsub(out, account.as_bytes(), subject, queue);
    }
}

/// Unix nanoseconds now.
pub(crate) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
