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
//! - [`Cluster`] is the membership table: each peer's registered connections by `server_id`
//!   and [`Slot`], the peers' client URLs (for clients' `connect_urls`), and the interest sink
//!   every account reports its own subscriptions to.
//! - `conn.rs` runs one route connection: handshake, keepalive, and applying what the peer
//!   sends. `dial.rs` accepts on the route port and keeps dialing the configured seeds and the
//!   peers gossip tells us about.
//!
//! Pooling (spec §2.8), as nats-server 2.10+ does it: `pool_size` connections per peer and one
//! per pinned account (the system account is always pinned). An account's traffic, interest
//! and messages, takes one connection per peer — its pinned one, else pool slot
//! `FNV-1a(name) mod pool` — so per-account order holds and accounts do not queue behind each
//! other. Which connection that is follows from configuration alone (ours, and the pool size
//! the peer announces), never from which connections happen to be up: an account whose
//! connection is down waits for it (its interest is sent when it registers) instead of moving
//! and being delivered twice. A peer without `route_pool_size` gets one connection for every
//! account ([`Slot::Only`]), as does every peer with `pool_size: -1`. Compression is
//! negotiated per connection as nats-server does (§2.12, `compress.rs`): S2 streams both ways
//! from the byte after the handshake's INFOs.
//! JetStream stays node-local (its in-process subscriptions are not advertised) until streams
//! are replicated.
//!
//! Lock order: an account's interest-count lock, then (inside) [`Cluster`]'s route list (read),
//! then an outbound queue. The membership table is a leaf, never held while taking another
//! lock or doing I/O.

pub(crate) mod compress;
pub(crate) mod conn;
pub(crate) mod dial;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use bytes::BytesMut;

use crate::config::cluster::{ClusterOptions, RouteUrl};
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

/// Which of a peer's connections a route is (spec §2.8).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    /// The one connection to a peer that does not pool (or when we do not): every account.
    Only,
    /// Pool member `n` of `of`: the accounts that are not pinned and hash to `n`.
    Pool(u32),
    /// Dedicated to one account, whose name the connection's ops leave out.
    Pinned(Arc<str>),
}

impl Slot {
    /// The account this connection is pinned to.
    pub(crate) fn pinned(&self) -> Option<&str> {
        match self {
            Slot::Pinned(a) => Some(a),
            _ => None,
        }
    }
}

/// An account's pool slot: FNV-1a-32 of its name, modulo the pool size (the same on every
/// server, spec §2.8).
pub(crate) fn pool_slot(account: &str, pool: u32) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for b in account.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(16_777_619);
    }
    h % pool.max(1)
}

/// One registered route: a peer and one connection we talk to it on.
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
    /// Which of the peer's connections this is.
    pub(crate) slot: Slot,
    /// Pool size used with this peer: the larger of ours and its (1 without pooling).
    pub(crate) pool: u32,
    /// The compression this connection agreed on.
    pub(crate) compression: compress::Mode,
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
    /// Registered; the caller sends its interest (and gossips the peer when `first`).
    Registered {
        /// A pinned connection, or the peer's first pool (or only) connection.
        first: bool,
    },
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
    /// Registered connections by peer server id (at most one per [`Slot`]).
    routes: RwLock<HashMap<String, Vec<Arc<Route>>>>,
    /// The system account's name, pinned whenever routes are pooled (set once at start-up).
    pub(crate) system_account: std::sync::OnceLock<String>,
    /// The route listener's address, once bound.
    pub(crate) listen: std::sync::OnceLock<SocketAddr>,
    /// The port of this node's Raft transport, when it runs replicated JetStream (told to
    /// peers in route INFO).
    pub(crate) raft_port: std::sync::OnceLock<u16>,
    /// This server's `server_tags`, told to peers in route INFO (stream placement).
    pub(crate) server_tags: std::sync::OnceLock<Vec<String>>,
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
    /// Peers whose pool a dialer task of ours is filling (one task per peer).
    pub(crate) filling: Mutex<std::collections::HashSet<String>>,
    /// Pools to fill, for the dialer: a connection that registers a peer's first connection
    /// asks here instead of dialing itself (the dialer imports the connection code, not the
    /// other way round). Bounded like gossip.
    pool_tx: tokio::sync::mpsc::Sender<PoolRequest>,
    /// Its receiving end, taken once by the dialer.
    pub(crate) pool_rx: Mutex<Option<tokio::sync::mpsc::Receiver<PoolRequest>>>,
}

/// A peer whose other pool slots we should dial: its id, the URL its first connection was
/// dialed at, and the pool size agreed with it.
pub(crate) struct PoolRequest {
    pub(crate) peer_id: String,
    pub(crate) url: RouteUrl,
    pub(crate) pool: u32,
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
        let (pool_tx, pool_rx) = tokio::sync::mpsc::channel(GOSSIP_QUEUE);
        Cluster {
            tls,
            pool_tx,
            pool_rx: Mutex::new(Some(pool_rx)),
            gossip_tx,
            gossip_rx: Mutex::new(Some(gossip_rx)),
            opts,
            name: RwLock::new(name),
            routes: RwLock::new(HashMap::new()),
            listen: std::sync::OnceLock::new(),
            raft_port: std::sync::OnceLock::new(),
            server_tags: std::sync::OnceLock::new(),
            dialing: Mutex::new(std::collections::HashSet::new()),
            filling: Mutex::new(std::collections::HashSet::new()),
            server_id: server_id.to_owned(),
            server_name: server_name.to_owned(),
            urls_changed: tokio::sync::Notify::new(),
            system_account: std::sync::OnceLock::new(),
        }
    }

    /// Pooled connections per peer we ask for; `None` without pooling.
    pub(crate) fn pool(&self) -> Option<u32> {
        self.opts.pool()
    }

    /// The accounts we pin (configured ones and the system account), when pooling.
    pub(crate) fn pinned_accounts(&self) -> Vec<String> {
        if self.pool().is_none() {
            return Vec::new();
        }
        let mut v = self.opts.pinned_accounts.clone();
        if let Some(sys) = self.system_account.get() {
            if !v.contains(sys) {
                v.push(sys.clone());
            }
        }
        v
    }

    /// The slot that carries `account` to a pooled peer with pool size `pool`.
    pub(crate) fn slot_of(&self, account: &str, pool: u32) -> Slot {
        if self.opts.pinned_accounts.iter().any(|a| a == account)
            || self.system_account.get().is_some_and(|s| s == account)
        {
            Slot::Pinned(Arc::from(account))
        } else {
            Slot::Pool(pool_slot(account, pool))
        }
    }

    /// Whether `route` is the connection that carries `account` to its peer.
    pub(crate) fn carries(&self, route: &Route, account: &str) -> bool {
        match &route.slot {
            Slot::Only => true,
            slot => self.slot_of(account, route.pool) == *slot,
        }
    }

    /// Every slot a dialer fills for a pooled peer with pool size `pool`: the pinned accounts
    /// first (as nats-server does), then the pool.
    pub(crate) fn slots_for(&self, pool: u32) -> Vec<Slot> {
        let mut v: Vec<Slot> = self
            .pinned_accounts()
            .into_iter()
            .map(|a| Slot::Pinned(Arc::from(a.as_str())))
            .collect();
        v.extend((0..pool).map(Slot::Pool));
        v
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

    fn read_routes(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Vec<Arc<Route>>>> {
        self.routes.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every registered connection (a snapshot).
    pub(crate) fn routes(&self) -> Vec<Arc<Route>> {
        self.read_routes().values().flatten().cloned().collect()
    }

    /// How many peers have a connection registered.
    pub(crate) fn peers(&self) -> usize {
        self.read_routes().len()
    }

    /// Whether any connection to `server_id` is registered.
    pub(crate) fn connected_to(&self, server_id: &str) -> bool {
        self.read_routes().contains_key(server_id)
    }

    /// Whether the connection for `slot` to `server_id` is registered.
    pub(crate) fn has_slot(&self, server_id: &str, slot: &Slot) -> bool {
        self.read_routes()
            .get(server_id)
            .is_some_and(|v| v.iter().any(|r| r.slot == *slot))
    }

    /// Whether the connection for `slot` to `server_id` is up and, if we dialed it, has
    /// answered its first PING (the peer has processed our INFO: the next slot may be dialed).
    pub(crate) fn slot_ready(&self, server_id: &str, slot: &Slot) -> bool {
        self.read_routes().get(server_id).is_some_and(|v| {
            v.iter().any(|r| {
                r.slot == *slot
                    && (!r.did_solicit || r.rtt.load(std::sync::atomic::Ordering::Relaxed) > 0)
            })
        })
    }

    /// A peer's INFO update (client URLs, lame duck) applied to all its connections; true
    /// when something clients see changed.
    pub(crate) fn update_peer(&self, server_id: &str, connect_urls: &[String], ldm: bool) -> bool {
        let mut changed = false;
        if let Some(v) = self.read_routes().get(server_id) {
            for r in v {
                let mut i = r.lock_info();
                changed |= i.connect_urls != connect_urls || i.ldm != ldm;
                connect_urls.clone_into(&mut i.connect_urls);
                i.ldm = ldm;
            }
        }
        changed
    }

    /// The server id of a registered peer whose route listener is `host:port` (as its INFO
    /// gives it, or its connection's address with the INFO's port): a configured route
    /// whose peer already dialed us needs no second connection (and the churn of resolving
    /// the duplicate).
    pub(crate) fn peer_listening_at(&self, host: &str, port: u16) -> Option<String> {
        self.read_routes().iter().find_map(|(id, v)| {
            let r = v.first()?;
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

    /// Registers `route` for its peer and slot. Of two connections to one peer for one slot
    /// (both sides dialed) the one dialed by the server with the smaller id stays, on both
    /// sides alike.
    pub(crate) fn admit(&self, route: &Arc<Route>) -> Admission {
        let (id, name) = {
            let i = route.lock_info();
            (i.server_id.clone(), i.server_name.clone())
        };
        if id == self.server_id {
            return Admission::SelfRoute;
        }
        let first;
        let replaced = {
            let mut m = self.routes.write().unwrap_or_else(|p| p.into_inner());
            if name == self.server_name
                || m.iter().any(|(other, v)| {
                    *other != id && v.iter().any(|r| r.lock_info().server_name == name)
                })
            {
                return Admission::DuplicateName;
            }
            let conns = m.entry(id.clone()).or_default();
            first =
                route.slot.pinned().is_some() || conns.iter().all(|r| r.slot.pinned().is_some());
            match conns.iter().position(|r| r.slot == route.slot) {
                Some(at) => {
                    let old = &conns[at];
                    let dialer = |r: &Route| {
                        if r.did_solicit {
                            self.server_id.clone()
                        } else {
                            id.clone()
                        }
                    };
                    if dialer(route) < dialer(old) {
                        Some(std::mem::replace(&mut conns[at], Arc::clone(route)))
                    } else {
                        return Admission::Duplicate;
                    }
                }
                None => {
                    conns.push(Arc::clone(route));
                    None
                }
            }
        };
        if let Some(old) = replaced {
            old.handle.close(CloseReason::ClientClosed);
        }
        self.urls_changed.notify_one();
        Admission::Registered { first }
    }

    /// Removes `route` if it is registered.
    pub(crate) fn remove(&self, route: &Route) {
        let id = route.remote_id();
        let removed = {
            let mut m = self.routes.write().unwrap_or_else(|p| p.into_inner());
            let (removed, empty) = match m.get_mut(&id) {
                Some(v) => {
                    let before = v.len();
                    v.retain(|r| r.handle.cid != route.handle.cid);
                    (v.len() < before, v.is_empty())
                }
                None => (false, false),
            };
            if empty {
                m.remove(&id);
            }
            removed
        };
        if removed {
            self.urls_changed.notify_one();
        }
    }

    /// Every peer that runs replicated JetStream: its server name and where its Raft
    /// transport listens (the route's remote address with the port its INFO gave).
    pub(crate) fn raft_peers(&self) -> Vec<(String, SocketAddr)> {
        let mut out: Vec<(String, SocketAddr)> = Vec::new();
        for conns in self.read_routes().values() {
            let Some(r) = conns.first() else { continue };
            let info = r.lock_info();
            if let Some(port) = info.sealstream_raft {
                out.push((
                    info.server_name.clone(),
                    SocketAddr::new(r.handle.peer.ip(), port),
                ));
            }
        }
        out.sort();
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }

    /// The `server_tags` of every peer that runs replicated JetStream, by server name.
    pub(crate) fn peer_tags(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for conns in self.read_routes().values() {
            let Some(r) = conns.first() else { continue };
            let info = r.lock_info();
            if info.sealstream_raft.is_some() {
                out.push((info.server_name.clone(), info.sealstream_tags.clone()));
            }
        }
        out
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
            .filter_map(|v| v.first())
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

    /// Asks the dialer to fill a peer's pool (it dialed the peer's first connection).
    pub(crate) fn fill_pool_of(&self, request: PoolRequest) {
        if self.pool_tx.try_send(request).is_err() {
            tracing::warn!("pool queue full ({GOSSIP_QUEUE}): a peer's pool is not filled");
        }
    }

    /// Hands a gossiped peer to the dialer.
    pub(crate) fn gossip(&self, info: PeerInfo) {
        if self.gossip_tx.try_send(info).is_err() {
            tracing::warn!("gossip queue full ({GOSSIP_QUEUE}): a gossiped peer is not dialed");
        }
    }

    /// Sends `bytes` (an INFO) to every peer but `skip`, on one of its connections.
    pub(crate) fn broadcast(&self, bytes: &[u8], skip: Option<&str>) {
        for (id, v) in self.read_routes().iter() {
            if Some(id.as_str()) == skip {
                continue;
            }
            if let Some(r) = v.first() {
                if let Ok(true) = r.handle.outbound.push_raw(bytes) {
                    r.handle.outbound.wake();
                }
            }
        }
    }
}

impl InterestSink for Cluster {
    fn changed(&self, account: &str, subject: &[u8], queue: Option<&[u8]>, count: u32) {
        let (mut full, mut pinned) = (BytesMut::new(), BytesMut::new());
        for r in self.read_routes().values().flatten() {
            if !self.carries(r, account) {
                continue;
            }
            let line = if r.slot.pinned().is_some() {
                if pinned.is_empty() {
                    encode_interest(&mut pinned, "", subject, queue, count);
                }
                &pinned
            } else {
                if full.is_empty() {
                    encode_interest(&mut full, account, subject, queue, count);
                }
                &full
            };
            if let Ok(true) = r.handle.outbound.push_raw(line) {
                r.handle.outbound.wake();
            }
        }
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

#[cfg(test)]
mod tests {
    use super::pool_slot;

    #[test]
    fn accounts_land_on_nats_servers_pool_slots() {
        // Observed on nats-server 2.15.1 with pool_size 3 (spec §2.8).
        assert_eq!(pool_slot("$G", 3), 2);
        assert_eq!(pool_slot("APP", 3), 1);
        assert_eq!(pool_slot("SYS", 3), 0);
        assert_eq!(pool_slot("anything", 1), 0);
        assert_eq!(pool_slot("anything", 0), 0);
    }
}
