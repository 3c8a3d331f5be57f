//! The running server: listeners, connections, accounts, monitoring and lifecycle.
//!
//! [`run`] takes validated [`ServerOptions`], binds the client listener (and the monitoring
//! port when asked), logs the lines operators and client test harnesses wait for
//! (`Listening for client connections on HOST:PORT`, `Server is ready`), and serves until
//! SIGTERM/SIGINT (graceful stop) or SIGUSR2 (lame duck: stop accepting, then close clients
//! gradually).
//!
//! State shared by every task lives in [`Shared`]: immutable limits computed once from the
//! options, the account registry, counters, and the table of live connections (for monitoring
//! and shutdown). The data path itself (reader → router → outbound → writer) is in [`conn`] and
//! [`router`].
//!
//! Lock order (the only nesting there is): an account's tree lock may be taken while holding
//! nothing; an outbound queue lock is never held while taking any other lock.

pub(crate) mod account;
mod auth_setup;
pub(crate) mod backpressure;
pub(crate) mod client;
pub(crate) mod conn;
pub(crate) mod jetstream;
mod listener;
pub mod log_format;
mod monitor;
pub(crate) mod route;
pub(crate) mod router;
mod shutdown;
pub mod signal_command;
pub(crate) mod system;
pub(crate) mod tls;
mod websocket;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tracing::{info, warn};

use crate::auth::Authenticator;
use crate::config::options::ServerOptions;
use crate::proto::info::ServerInfo;

use self::account::Registry;
use self::client::ClientHandle;

/// The NATS server version we advertise. Clients choose features by it (nats-py needs
/// `2.Y` with `Y >= 9` for name-based consumer creation), so it is a NATS-compatible semver:
/// the nats-server release whose single-node features we implement (docs/compatibility.md).
pub const NATS_COMPAT_VERSION: &str = "2.15.1";

/// What INFO's and `/varz`'s `go` field say: nats-server puts its Go version there; ours is the
/// language and this build's version. Clients read the field but do not interpret it.
pub const RUNTIME_VERSION: &str = concat!("rust/sealstream-", env!("CARGO_PKG_VERSION"));

/// Failed authentications from one address within [`AUTH_FAILURE_WINDOW`] before its new
/// connections are delayed by [`AUTH_THROTTLE_DELAY`].
pub(crate) const AUTH_FAILURE_THRESHOLD: u32 = 20;
/// The window over which failed authentications are counted.
pub(crate) const AUTH_FAILURE_WINDOW: Duration = Duration::from_secs(10);
/// Delay before serving a new connection from a throttled address. Valid users from other
/// addresses are never affected.
pub(crate) const AUTH_THROTTLE_DELAY: Duration = Duration::from_millis(500);
/// Addresses remembered before stale entries are swept.
const AUTH_FAILURE_TABLE: usize = 10_000;

/// Errors that stop the server from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The client or monitoring port could not be bound.
    #[error("error listening on port: {addr} ({what}): {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Address tried.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `-sd` names something that is not a directory.
    #[error("storage directory is not a directory: {0}")]
    StoreNotDir(PathBuf),
    /// `-sd` could not be created.
    #[error("could not create storage directory {path}: {source}")]
    StoreCreate {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The pid or ports file could not be written.
    #[error("could not write {path}: {source}")]
    WriteFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An option combination that cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The sealed store could not be opened (wrong key, corrupt header, locked...). Nothing
    /// under the store directory was changed.
    #[error("JetStream store: {0}")]
    Store(#[from] crate::store::meta::MetaError),
    /// The JetStream store threads could not be started.
    #[error("could not start the JetStream store threads: {0}")]
    Threads(#[source] std::io::Error),
}

/// Limits copied out of the options once, in the types the hot path wants.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) max_payload: usize,
    pub(crate) max_control_line: usize,
    pub(crate) max_pending: usize,
    pub(crate) max_connections: usize,
    pub(crate) max_subscriptions: usize,
    pub(crate) ping_interval: Duration,
    pub(crate) ping_max: u32,
    pub(crate) auth_timeout: Duration,
    pub(crate) write_deadline: Duration,
}

/// Server-wide counters (the `/varz` figures).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) in_msgs: AtomicU64,
    pub(crate) in_bytes: AtomicU64,
    pub(crate) out_msgs: AtomicU64,
    pub(crate) out_bytes: AtomicU64,
    pub(crate) slow_consumers: AtomicU64,
    pub(crate) stale_connections: AtomicU64,
    pub(crate) total_connections: AtomicU64,
    pub(crate) auth_failures: AtomicU64,
}

/// State every task of the server can see.
pub(crate) struct Shared {
    pub(crate) opts: ServerOptions,
    pub(crate) server_id: String,
    pub(crate) server_name: String,
    pub(crate) limits: Limits,
    pub(crate) accounts: Registry,
    auth: std::sync::RwLock<Arc<Authenticator>>,
    pub(crate) stats: Stats,
    pub(crate) seed: u64,
    pub(crate) headers_supported: bool,
    pub(crate) start: SystemTime,
    pub(crate) lame_duck: AtomicBool,
    pub(crate) client_port: AtomicU64,
    pub(crate) http_req_stats: Mutex<HashMap<String, u64>>,
    /// Failed authentications per source address (for throttling).
    auth_failures: Mutex<HashMap<std::net::IpAddr, (u32, std::time::Instant)>>,
    /// The system account's service, when a system account exists.
    pub(crate) system: Option<Arc<system::System>>,
    /// TLS for the client port, when configured.
    pub(crate) tls: Option<Arc<tls::TlsSetup>>,
    /// TLS is offered but optional (`allow_non_tls`).
    pub(crate) allow_non_tls: bool,
    /// JetStream, when enabled (set once at startup, after the store opened).
    pub(crate) jetstream: std::sync::OnceLock<Arc<jetstream::JetStream>>,
    clients: Mutex<HashMap<u64, Arc<ClientHandle>>>,
    next_cid: AtomicU64,
    /// The cluster membership table, when a route port is configured.
    pub(crate) cluster: Option<Arc<route::Cluster>>,
    /// Cancelled when the server stops: ends route connections and dialers (lame duck keeps
    /// them, so the other members hear about it).
    pub(crate) route_stop: tokio_util::sync::CancellationToken,
    /// Notified when the last client connection unregisters (shutdown waits on it).
    pub(crate) clients_gone: tokio::sync::Notify,
}

fn clamp_usize(v: i64, default: usize) -> usize {
    if v <= 0 {
        default
    } else {
        usize::try_from(v).unwrap_or(usize::MAX)
    }
}

impl Shared {
    fn new(opts: ServerOptions) -> Result<Self, ServerError> {
        let server_id = nkeys::KeyPair::new_server().public_key();
        let server_name = opts
            .server_name
            .clone()
            .unwrap_or_else(|| server_id.clone());
        let limits = Limits {
            max_payload: clamp_usize(opts.max_payload, 1024 * 1024),
            max_control_line: clamp_usize(opts.max_control_line, 4096),
            max_pending: clamp_usize(opts.max_pending, 64 * 1024 * 1024),
            max_connections: clamp_usize(opts.max_connections, 65536),
            max_subscriptions: usize::try_from(opts.max_subscriptions.max(0)).unwrap_or(0),
            ping_interval: opts.ping_interval,
            ping_max: u32::try_from(opts.ping_max.max(0)).unwrap_or(2),
            auth_timeout: opts.auth_timeout,
            write_deadline: opts.write_deadline,
        };
        if limits.max_payload > limits.max_pending {
            return Err(ServerError::Config(format!(
                "max_payload ({}) cannot be higher than max_pending ({})",
                limits.max_payload, limits.max_pending
            )));
        }
        let accounts = Registry::new();
        let cluster = if opts.cluster.enabled() {
            let route_tls = opts
                .cluster
                .tls
                .as_ref()
                .map(tls::RouteTls::load)
                .transpose()?;
            Some(Arc::new(route::Cluster::new(
                opts.cluster.clone(),
                route_tls,
                &server_id,
                &server_name,
            )))
        } else {
            None
        };
        if let Some(c) = &cluster {
            accounts.set_interest_sink(Arc::clone(c) as Arc<dyn account::InterestSink>);
        }
        let tls = match &opts.tls {
            Some(t) if t.cert_file.is_some() || t.key_file.is_some() => {
                Some(Arc::new(tls::TlsSetup::load(t)?))
            }
            _ => None,
        };
        let auth = auth_setup::build(&opts, &accounts)?
            .with_tls_map(tls.as_ref().is_some_and(|t| t.opts.verify_and_map));
        let system = if opts.no_system_account {
            None
        } else {
            let name = auth
                .trust()
                .and_then(|t| t.system_account.clone())
                .or_else(|| opts.system_account.clone())
                .unwrap_or_else(|| "$SYS".to_owned());
            Some(system::System::new(accounts.create(&name), &server_id))
        };
        if let (Some(c), Some(sys)) = (&cluster, &system) {
            let _ = c.system_account.set(sys.account.name.clone());
        }
        if let Some(c) = &cluster {
            let _ = c.server_tags.set(opts.server_tags.clone());
        }
        Ok(Shared {
            headers_supported: !opts.no_header_support,
            server_id,
            server_name,
            limits,
            accounts,
            auth: std::sync::RwLock::new(Arc::new(auth)),
            stats: Stats::default(),
            seed: rand::random(),
            start: SystemTime::now(),
            lame_duck: AtomicBool::new(false),
            client_port: AtomicU64::new(0),
            http_req_stats: Mutex::new(HashMap::new()),
            auth_failures: Mutex::new(HashMap::new()),
            system,
            allow_non_tls: opts.allow_non_tls,
            jetstream: std::sync::OnceLock::new(),
            tls,
            clients: Mutex::new(HashMap::new()),
            next_cid: AtomicU64::new(1),
            cluster,
            route_stop: tokio_util::sync::CancellationToken::new(),
            clients_gone: tokio::sync::Notify::new(),
            opts,
        })
    }

    /// Records a failed authentication from `ip`; returns how many failures it has in the
    /// current window (callers log the first few and stay quiet after).
    pub(crate) fn record_auth_failure(&self, ip: std::net::IpAddr) -> u32 {
        self.stats.auth_failures.fetch_add(1, Ordering::Relaxed);
        let mut m = self.auth_failures.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        if m.len() > AUTH_FAILURE_TABLE {
            m.retain(|_, (_, since)| now.duration_since(*since) < AUTH_FAILURE_WINDOW);
        }
        let e = m.entry(ip).or_insert((0, now));
        if now.duration_since(e.1) >= AUTH_FAILURE_WINDOW {
            *e = (0, now);
        }
        e.0 += 1;
        e.0
    }

    /// Whether connections from `ip` are throttled after too many failed authentications.
    pub(crate) fn auth_throttled(&self, ip: std::net::IpAddr) -> bool {
        let m = self.auth_failures.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&ip).is_some_and(|(n, since)| {
            *n >= AUTH_FAILURE_THRESHOLD && since.elapsed() < AUTH_FAILURE_WINDOW
        })
    }

    /// The current authenticator (replaced as a whole by a config reload).
    pub(crate) fn auth(&self) -> Arc<Authenticator> {
        Arc::clone(&self.auth.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Re-reads the config file's authorization (SIGHUP): users, passwords, nkeys,
    /// permissions, tokens and operator trust. New connections use it; existing connections keep
    /// what they authenticated with until they reconnect. Accounts added by the new file are
    /// created; cross-account routes are fixed at startup.
    ///
    /// # Errors
    /// A parse or configuration error; the current authorization stays in place.
    pub(crate) fn reload_auth(&self) -> Result<bool, ServerError> {
        let Some(path) = &self.opts.config_file else {
            return Ok(false);
        };
        let fresh =
            crate::config::load_file(path).map_err(|e| ServerError::Config(e.to_string()))?;
        let auth = auth_setup::build(&fresh, &self.accounts)?
            .with_tls_map(self.tls.as_ref().is_some_and(|t| t.opts.verify_and_map));
        *self.auth.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(auth);
        Ok(true)
    }

    pub(crate) fn next_cid(&self) -> u64 {
        self.next_cid.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn max_pending(&self) -> usize {
        self.limits.max_pending
    }

    pub(crate) fn write_deadline(&self) -> Duration {
        self.limits.write_deadline
    }

    fn clients_lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ClientHandle>>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn register(&self, c: Arc<ClientHandle>) {
        self.stats.total_connections.fetch_add(1, Ordering::Relaxed);
        self.clients_lock().insert(c.cid, c);
    }

    pub(crate) fn unregister(&self, c: &ClientHandle) {
        let mut clients = self.clients_lock();
        clients.remove(&c.cid);
        if clients.is_empty() {
            self.clients_gone.notify_waiters();
        }
    }

    pub(crate) fn num_clients(&self) -> usize {
        self.clients_lock().len()
    }

    pub(crate) fn clients(&self) -> Vec<Arc<ClientHandle>> {
        self.clients_lock().values().cloned().collect()
    }

    /// This server's own client URLs (`host:port`) as other members and clients should use
    /// them: `client_advertise`, the configured host, or (for a wildcard host) every
    /// non-loopback interface address.
    pub(crate) fn own_client_urls(&self) -> Vec<String> {
        let port = self.client_port.load(Ordering::Relaxed);
        if let Some(a) = &self.opts.client_advertise {
            let a = a.split_once("://").map_or(a.as_str(), |(_, r)| r);
            return vec![
                if a.contains(':') && !a.starts_with('[') || a.contains("]:") {
                    a.to_owned()
                } else {
                    format!("{a}:{port}")
                },
            ];
        }
        let host = self.opts.host.trim_start_matches('[').trim_end_matches(']');
        let wildcard = host.is_empty() || host == "0.0.0.0" || host == "::";
        let hosts: Vec<String> = if wildcard {
            let mut v: Vec<String> = nix::ifaddrs::getifaddrs()
                .map(|it| {
                    it.filter_map(|i| i.address)
                        .filter_map(|a| a.as_sockaddr_in().map(|s| std::net::IpAddr::V4(s.ip())))
                        .filter(|ip| !ip.is_loopback())
                        .map(|ip| ip.to_string())
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v.dedup();
            if v.is_empty() {
                v.push("127.0.0.1".into());
            }
            v
        } else {
            vec![host.to_owned()]
        };
        hosts
            .into_iter()
            .map(|h| {
                if h.contains(':') {
                    format!("[{h}]:{port}")
                } else {
                    format!("{h}:{port}")
                }
            })
            .collect()
    }

    /// INFO's `connect_urls`: this server first, then the other members' (spec §3.1); empty
    /// when no member advertises one. In lame-duck mode only the others.
    pub(crate) fn client_urls(&self) -> Vec<String> {
        let Some(cluster) = &self.cluster else {
            return Vec::new();
        };
        let peers = cluster.peer_client_urls();
        if peers.is_empty() {
            return Vec::new();
        }
        let mut urls = if self.lame_duck.load(Ordering::Relaxed) || cluster.opts.no_advertise {
            Vec::new()
        } else {
            self.own_client_urls()
        };
        for u in peers {
            if !urls.contains(&u) {
                urls.push(u);
            }
        }
        urls
    }

    /// Sends a fresh INFO to every client that takes async INFO (membership changed).
    pub(crate) fn broadcast_client_info(&self) {
        for c in self.clients() {
            if !c.async_info.load(Ordering::Relaxed) {
                continue;
            }
            let account = c
                .meta
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .account
                .clone();
            let info = self.info_line(&c, false, Some(&account), None);
            if let Ok(true) = c.outbound.push_raw(&info) {
                c.outbound.wake();
            }
        }
    }

    /// The INFO line for `client` (`connect_info` marks the one sent after the first PONG).
    pub(crate) fn info_line(
        &self,
        client: &ClientHandle,
        connect_info: bool,
        account: Option<&str>,
        nonce: Option<&str>,
    ) -> Vec<u8> {
        let info = ServerInfo {
            server_id: self.server_id.clone(),
            server_name: self.server_name.clone(),
            version: NATS_COMPAT_VERSION.to_owned(),
            proto: 1,
            git_commit: None,
            go: RUNTIME_VERSION.to_owned(),
            host: self.opts.host.clone(),
            port: u16::try_from(self.client_port.load(Ordering::Relaxed)).unwrap_or(0),
            headers: self.headers_supported,
            max_payload: self.limits.max_payload as i64,
            jetstream: self
                .jetstream
                .get()
                .is_some_and(|js| account.is_none_or(|a| js.enabled_for(a))),
            api_lvl: self
                .jetstream
                .get()
                .map(|_| i32::try_from(crate::jetstream::API_LEVEL).unwrap_or(0)),
            client_id: client.cid,
            client_ip: client.peer.ip().to_string(),
            cluster: self.cluster.as_ref().map(|c| c.name().0),
            connect_urls: self.client_urls(),
            auth_required: self.auth().required(),
            tls_required: self.tls.is_some() && !self.allow_non_tls,
            tls_available: self.tls.is_some() && self.allow_non_tls,
            tls_verify: self.tls.as_ref().is_some_and(|t| t.verify()),
            ldm: self.lame_duck.load(Ordering::Relaxed),
            nonce: nonce.map(str::to_owned),
            connect_info,
            acc_is_sys: account
                .is_some_and(|a| self.system.as_ref().is_some_and(|s| s.account.name == a)),
            remote_account: account.map(str::to_owned),
            domain: self.jetstream.get().and_then(|js| js.domain.clone()),
        };
        let mut line = b"INFO ".to_vec();
        line.extend_from_slice(info.to_json().as_bytes());
        line.extend_from_slice(b" \r\n");
        line
    }
}

/// Raises the soft limit on open files to the hard limit, as nats-server's runtime does: every
/// connection and every file stream's active segment holds a descriptor, and the soft default
/// (often 1,024) would cap a server at that many streams. Best effort; logged.
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::debug!(from = soft, to = hard, "raised the open-file limit"),
            Err(e) => warn!(soft, hard, error = %e, "could not raise the open-file limit"),
        },
        Ok(_) => {}
        Err(e) => warn!(error = %e, "could not read the open-file limit"),
    }
}

/// Listeners a caller bound itself, handed to [`run_with`]; what is `None` is bound from the
/// options as usual.
#[derive(Debug, Default)]
pub struct Listeners {
    /// The client listener (its address wins over `host`/`port`).
    pub client: Option<std::net::TcpListener>,
}

/// Runs the server until a signal tells it to stop (SIGTERM, SIGINT, or lame duck on
/// SIGUSR2); SIGHUP reloads.
///
/// # Errors
/// [`ServerError`] when a listener cannot be bound or a startup file cannot be written.
pub async fn run(opts: ServerOptions) -> Result<(), ServerError> {
    run_inner(opts, Listeners::default(), Stop::Signals).await
}

/// Runs the server on `listeners` until `shutdown` completes, then stops it as a SIGTERM
/// would (clients closed, JetStream persisted). Signals are left to the caller: this is how a
/// test or an embedding program drives a server in its own process.
///
/// # Errors
/// As [`run`].
pub async fn run_with<F>(
    opts: ServerOptions,
    listeners: Listeners,
    shutdown: F,
) -> Result<(), ServerError>
where
    F: std::future::Future<Output = ()> + Send,
{
    run_inner(opts, listeners, Stop::When(Box::pin(shutdown))).await
}

/// What stops [`run_inner`].
enum Stop<'a> {
    Signals,
    When(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>),
}

async fn run_inner(
    opts: ServerOptions,
    listeners: Listeners,
    stop: Stop<'_>,
) -> Result<(), ServerError> {
    raise_fd_limit();
    let store = open_store(&opts)?;
    for key in &opts.ignored {
        warn!("option {key:?} is not supported yet and is ignored");
    }
    let shared = Arc::new(Shared::new(opts)?);
    if let Some(opened) = store {
        let js = jetstream::start(&shared, opened).map_err(ServerError::Threads)?;
        if let Some(routes) = &shared.cluster {
            jetstream::start_replication(&js, routes, &shared.server_id).await;
        }
        let _ = shared.jetstream.set(js);
    }
    let client_listener = match listeners.client {
        Some(l) => {
            let bound = l
                .set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(l));
            bound.map_err(|e| ServerError::Bind {
                what: "client",
                addr: shared.opts.host.clone(),
                source: e,
            })?
        }
        None => listener::bind_clients(&shared).await?,
    };
    let client_addr = client_listener
        .local_addr()
        .map(|a| listener::as_configured(&shared.opts.host, a))
        .map_err(|e| ServerError::Bind {
            what: "client",
            addr: shared.opts.host.clone(),
            source: e,
        })?;
    shared
        .client_port
        .store(u64::from(client_addr.port()), Ordering::Relaxed);

    let shutdown = shutdown::Shutdown::new();
    let monitor_addr = match monitor::bind(&shared).await? {
        Some(l) => {
            let addr = l
                .local_addr()
                .ok()
                .map(|a| listener::as_configured(monitor::host(&shared), a));
            if let Some(a) = addr {
                info!("Starting http monitor on {}", display_addr(a));
            }
            tokio::spawn(monitor::serve(
                l,
                Arc::clone(&shared),
                shutdown.token(),
                None,
            ));
            addr
        }
        None => None,
    };
    if let Some(l) = monitor::bind_https(&shared).await? {
        let Some(tls) = shared.tls.clone() else {
            return Err(ServerError::Config(
                "https_port needs a tls {} block".into(),
            ));
        };
        if let Ok(a) = l.local_addr() {
            let a = listener::as_configured(monitor::host(&shared), a);
            info!("Starting https monitor on {}", display_addr(a));
        }
        tokio::spawn(monitor::serve(
            l,
            Arc::clone(&shared),
            shutdown.token(),
            Some(tls),
        ));
    }
    info!("Starting sealstream-server");
    info!(
        "  Version:  {NATS_COMPAT_VERSION} (sealstream {})",
        env!("CARGO_PKG_VERSION")
    );
    info!("  ID:       {}", shared.server_id);
    info!("  Name:     {}", shared.server_name);
    if let Some(cf) = &shared.opts.config_file {
        info!("Using configuration file: {}", cf.display());
    }
    info!(
        "Listening for client connections on {}",
        display_addr(client_addr)
    );
    let websocket = match &shared.opts.websocket {
        Some(w) => {
            let tls = match &w.tls {
                Some(t) => Some(Arc::new(tls::TlsSetup::load(t)?)),
                None => None,
            };
            let l = listener::bind(&w.host, w.port, "websocket connections").await?;
            if let Ok(a) = l.local_addr() {
                let a = listener::as_configured(&w.host, a);
                let scheme = if tls.is_some() { "wss" } else { "ws" };
                info!(
                    "Listening for websocket clients on {scheme}://{}",
                    display_addr(a)
                );
            }
            if w.compression {
                warn!("websocket compression (permessage-deflate) is not supported: websocket connections are uncompressed");
            }
            Some(tokio::spawn(websocket::accept_loop(
                l,
                Arc::clone(&shared),
                tls,
                shutdown.token(),
            )))
        }
        None => None,
    };
    let cluster_addr = start_cluster(&shared).await?;
    let files = startup_files(&shared, client_addr, monitor_addr, cluster_addr)?;
    let signals = match &stop {
        Stop::Signals => shutdown::Signals::install(),
        Stop::When(_) => None,
    };
    info!("Server is ready");

    if let Some(sys) = &shared.system {
        tokio::spawn(Arc::clone(sys).run(Arc::clone(&shared)));
    }
    let accept = tokio::spawn(listener::accept_loop(
        client_listener,
        Arc::clone(&shared),
        shutdown.token(),
    ));
    match stop {
        Stop::Signals => shutdown::wait_for_signals(&shared, &shutdown, signals).await,
        Stop::When(f) => f.await,
    }
    shutdown.cancel();
    shared.route_stop.cancel();
    let _ = accept.await;
    if let Some(ws) = websocket {
        let _ = ws.await;
    }
    if let Some(js) = shared.jetstream.get() {
        let js = Arc::clone(js);
        let _ = tokio::task::spawn_blocking(move || jetstream::end_pulls(&js)).await;
    }
    shutdown::close_clients(&shared).await;
    if let Some(js) = shared.jetstream.get() {
        let js = Arc::clone(js);
        let _ = tokio::task::spawn_blocking(move || jetstream::stop(&js)).await;
    }
    for f in files {
        let _ = std::fs::remove_file(f);
    }
    info!("Server Exiting..");
    Ok(())
}

/// Binds the route port, starts accepting and dialing the configured routes, and keeps
/// clients' `connect_urls` current. Returns the route listener's address.
async fn start_cluster(shared: &Arc<Shared>) -> Result<Option<SocketAddr>, ServerError> {
    let Some(cluster) = shared.cluster.clone() else {
        return Ok(None);
    };
    let o = &cluster.opts;
    let l = listener::bind(&o.host, o.port, "route connections").await?;
    let addr = l
        .local_addr()
        .map(|a| listener::as_configured(&o.host, a))
        .map_err(|e| ServerError::Bind {
            what: "route connections",
            addr: o.host.clone(),
            source: e,
        })?;
    let _ = cluster.listen.set(addr);
    info!("Cluster name is {}", cluster.name().0);
    info!("Listening for route connections on {}", display_addr(addr));
    tokio::spawn(route::dial::accept_loop(
        l,
        Arc::clone(shared),
        Arc::clone(&cluster),
        shared.route_stop.clone(),
    ));
    tokio::spawn(route::dial::gossip_loop(
        Arc::clone(shared),
        Arc::clone(&cluster),
    ));
    for url in &o.routes {
        tokio::spawn(route::dial::configured(
            Arc::clone(shared),
            Arc::clone(&cluster),
            url.clone(),
            shared.route_stop.clone(),
        ));
    }
    let watcher = Arc::clone(shared);
    tokio::spawn(async move {
        let Some(cluster) = watcher.cluster.clone() else {
            return;
        };
        let mut last = watcher.client_urls();
        loop {
            tokio::select! {
                () = cluster.urls_changed.notified() => {}
                () = watcher.route_stop.cancelled() => return,
            }
            let now = watcher.client_urls();
            if now != last {
                last = now;
                watcher.broadcast_client_info();
            }
        }
    });
    Ok(Some(addr))
}

fn display_addr(a: SocketAddr) -> String {
    a.to_string()
}

/// Opens (or creates) the sealed store when JetStream is requested: `<store_dir>/jetstream`,
/// keyed by `jetstream.key` (passphrase), `jetstream.key_file`, `SEALSTREAM_STORE_KEY[_FILE]`,
/// or an automatically generated `<store_dir>/jetstream.key` next to (outside) the store. A
/// wrong key stops the server here, before anything under the store is written.
fn open_store(opts: &ServerOptions) -> Result<Option<jetstream::OpenedStore>, ServerError> {
    use crate::store::meta::{KeyConfig, KeySource, MetaOptions, MetaStore};
    if !opts.jetstream.enabled {
        return Ok(None);
    }
    let base = match &opts.jetstream.store_dir {
        Some(d) => d.clone(),
        None => {
            let d = std::env::temp_dir().join("nats");
            warn!(
                "no store_dir configured; using {} (set -sd or jetstream.store_dir)",
                d.display()
            );
            d
        }
    };
    if base.exists() && !base.is_dir() {
        return Err(ServerError::StoreNotDir(base));
    }
    std::fs::create_dir_all(&base).map_err(|e| ServerError::StoreCreate {
        path: base.clone(),
        source: e,
    })?;
    let root = base.join("jetstream");
    let cfg = KeyConfig {
        cipher: opts.jetstream.cipher.clone(),
        key: opts.jetstream.key.clone().map(zeroize::Zeroizing::new),
        key_file: opts.jetstream.key_file.clone(),
    };
    let source = KeySource::resolve_with_process_env(&cfg)?;
    let described = source.describe();
    let key = source.duplicate();
    let store = MetaStore::open(&root, source, MetaOptions::default())?;
    info!("Sealed store at {} (key: {described})", root.display());
    let reserve = base.join("jetstream.reserve");
    jetstream::make_reserve(&reserve);
    Ok(Some(jetstream::OpenedStore {
        meta: store,
        key,
        reserve,
    }))
}

/// Writes the pid file and the ports file; returns the paths to remove on exit.
fn startup_files(
    shared: &Shared,
    client: SocketAddr,
    monitor: Option<SocketAddr>,
    cluster: Option<SocketAddr>,
) -> Result<Vec<PathBuf>, ServerError> {
    let mut files = Vec::new();
    let pid = std::process::id();
    if let Some(p) = &shared.opts.pid_file {
        std::fs::write(p, pid.to_string()).map_err(|e| ServerError::WriteFile {
            path: p.clone(),
            source: e,
        })?;
        files.push(p.clone());
    }
    if let Some(dir) = &shared.opts.ports_file_dir {
        let exe = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "sealstream-server".to_owned());
        let path = dir.join(format!("{exe}_{pid}.ports"));
        let mut ports = serde_json::json!({ "client": [format!("nats://{client}")] });
        if let Some(m) = monitor {
            ports["monitoring"] = serde_json::json!([format!("http://{m}")]);
        }
        if let Some(c) = cluster {
            ports["cluster"] = serde_json::json!([format!("nats://{c}")]);
        }
        std::fs::write(&path, ports.to_string()).map_err(|e| ServerError::WriteFile {
            path: path.clone(),
            source: e,
        })?;
        files.push(path);
    }
    Ok(files)
}
