//! The server's options model and the mapping from a parsed [`Value`] tree onto it.
//!
//! [`ServerOptions::default`] holds nats-server's defaults. [`ServerOptions::from_value`]
//! walks the top-level map in file order (so a later key wins, also across aliases such as
//! `listen` then `port`), accepting each option under all the names nats-server accepts,
//! case-insensitively. Rules that hold everywhere:
//! - an unknown key at any level is an error, `file:line:col: unknown field "x"`, unless the
//!   key only exists to be used as a `$variable`;
//! - a value of the wrong type names the field: `invalid value for field "port": expected an
//!   integer`;
//! - options nats-server has but sealstream does not support yet (gateways, leaf
//!   nodes, websocket, MQTT, mappings and the keys marked **N** in the spec) are parsed and
//!   their dotted paths listed in [`ServerOptions::ignored`], so the server can log them;
//! - what `nats-server -t` rejects but a normal start accepts (a bare number of seconds for a
//!   duration) is recorded in [`ServerOptions::check_warnings`];
//! - like nats-server, the mapping checks that TLS files and an operator JWT file exist and
//!   that keys and JWTs are well-formed, because `-t` must fail on those;
//! - relative paths are kept as written (the server resolves them against its working
//!   directory); only `include` is relative to the including file.
//!
//! Authorization, users, permissions and accounts live in `accounts.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::accounts::{self, AccountConfig, AuthorizationOptions};
use super::error::{ConfigError, ConfigErrorKind, Location};
use super::field::{self, host_port, key, Collected};
use super::keys::{self, KeyKind};
use super::parse::{self, Entry, Map, ParseSettings, Value, ValueKind};
use super::tls::{tls, TlsOptions};

/// Everything the server reads from its configuration file and command line.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerOptions {
    /// The configuration file the options came from, if any.
    pub config_file: Option<PathBuf>,
    /// Client listen host (`host`, `net`, or the host part of `listen`).
    pub host: String,
    /// Client port; `-1` picks a random free port.
    pub port: i32,
    /// Server name (no spaces); `None` means the server id.
    pub server_name: Option<String>,
    /// `server_tags`: what this server offers to stream placement (`placement.tags`),
    /// lowercased as nats-server compares them.
    pub server_tags: Vec<String>,
    /// URL advertised to clients in cluster INFO.
    pub client_advertise: Option<String>,
    /// Monitoring host (from `http: host:port`).
    pub http_host: String,
    /// Monitoring HTTP port (`http`, `http_port`, `monitor_port`).
    pub http_port: Option<i32>,
    /// Monitoring HTTPS port (`https`, `https_port`).
    pub https_port: Option<i32>,
    /// Prefix for monitoring URLs.
    pub http_base_path: String,
    /// sealstream extension: show tenants' account, stream and consumer names on the
    /// monitoring port (`/jsz`, `/accountz`, per-stream `/metrics`). Off by default when more
    /// than one account has JetStream.
    pub monitor_tenant_details: bool,
    /// Largest message payload in bytes.
    pub max_payload: i64,
    /// Longest protocol control line in bytes.
    pub max_control_line: i64,
    /// Per-connection outbound buffer before the slow-consumer close, in bytes.
    pub max_pending: i64,
    /// Client connection limit (`max_connections`, `max_conn`).
    pub max_connections: i64,
    /// Per-connection subscription limit; 0 = unlimited (`max_subscriptions`, `max_subs`).
    pub max_subscriptions: i64,
    /// Most tokens in a subscription subject; 0 = unlimited.
    pub max_sub_tokens: i64,
    /// Interval between server PINGs.
    pub ping_interval: Duration,
    /// Unanswered PINGs before the connection is stale.
    pub ping_max: i64,
    /// Socket write stall limit before a slow-consumer close.
    pub write_deadline: Duration,
    /// How long lame-duck mode spreads client closes over.
    pub lame_duck_duration: Duration,
    /// Wait before lame-duck mode starts closing clients.
    pub lame_duck_grace_period: Duration,
    /// Debug logging.
    pub debug: bool,
    /// Protocol tracing.
    pub trace: bool,
    /// Verbose tracing (system account too).
    pub trace_verbose: bool,
    /// Timestamps in log lines.
    pub logtime: bool,
    /// UTC timestamps.
    pub logtime_utc: bool,
    /// Log file (`logfile`, `log_file`); `None` is stderr.
    pub log_file: Option<PathBuf>,
    /// Log rotation size in bytes; 0 = no rotation (`logfile_size_limit`, `log_size_limit`).
    pub logfile_size_limit: i64,
    /// Rotated log files kept; 0 = all (`logfile_max_num`, `log_max_num`).
    pub logfile_max_num: i64,
    /// Log to syslog.
    pub syslog: bool,
    /// Remote syslog URL.
    pub remote_syslog: Option<String>,
    /// PID file (`pidfile`, `pid_file`).
    pub pid_file: Option<PathBuf>,
    /// Directory for the `<exe>_<pid>.ports` file.
    pub ports_file_dir: Option<PathBuf>,
    /// Longest traced message body; 0 = unlimited.
    pub max_traced_msg_len: i64,
    /// Sets INFO `headers:false`.
    pub no_header_support: bool,
    /// Single-account authorization (`authorization { }`).
    pub authorization: AuthorizationOptions,
    /// Time allowed to receive CONNECT (`authorization.timeout`).
    pub auth_timeout: Duration,
    /// Accounts (`accounts { }`, plus any nested inside `authorization`).
    pub accounts: Vec<AccountConfig>,
    /// User that credential-less clients log in as.
    pub no_auth_user: Option<String>,
    /// System account name or public key (`system_account`, `system`); `None` = `$SYS`.
    pub system_account: Option<String>,
    /// Run without a system account.
    pub no_system_account: bool,
    /// JetStream settings.
    pub jetstream: JetStreamOptions,
    /// Client TLS settings.
    pub tls: Option<TlsOptions>,
    /// The `websocket {}` listener, when configured.
    pub websocket: Option<WebsocketOptions>,
    /// The `cluster {}` block (routes to the other members).
    pub cluster: super::cluster::ClusterOptions,
    /// TLS optional for clients.
    pub allow_non_tls: bool,
    /// Operator JWTs, as paths or inline tokens (`operator`, `operators`, `root`, ...).
    pub operator: Vec<String>,
    /// Trusted operator public keys (`trusted`, `trusted_keys`).
    pub trusted_keys: Vec<String>,
    /// Account JWT resolver.
    pub resolver: Option<ResolverConfig>,
    /// Account public key → account JWT, for the memory resolver, in file order.
    pub resolver_preload: Vec<(String, String)>,
    /// Dotted key paths that were accepted but are not supported yet (to log and ignore).
    pub ignored: Vec<String>,
    /// Accepted at start-up but rejected by `-t` (call [`ServerOptions::check`]).
    pub check_warnings: Vec<ConfigError>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            config_file: None,
            host: "0.0.0.0".to_string(),
            port: 4222,
            server_name: None,
            server_tags: Vec::new(),
            client_advertise: None,
            http_host: "0.0.0.0".to_string(),
            http_port: None,
            https_port: None,
            http_base_path: "/".to_string(),
            monitor_tenant_details: false,
            max_payload: 1024 * 1024,
            max_control_line: 4096,
            max_pending: 64 * 1024 * 1024,
            max_connections: 64 * 1024,
            max_subscriptions: 0,
            max_sub_tokens: 0,
            ping_interval: Duration::from_secs(120),
            ping_max: 2,
            write_deadline: Duration::from_secs(10),
            lame_duck_duration: Duration::from_secs(120),
            lame_duck_grace_period: Duration::from_secs(10),
            debug: false,
            trace: false,
            trace_verbose: false,
            logtime: true,
            logtime_utc: false,
            log_file: None,
            logfile_size_limit: 0,
            logfile_max_num: 0,
            syslog: false,
            remote_syslog: None,
            pid_file: None,
            ports_file_dir: None,
            max_traced_msg_len: 0,
            no_header_support: false,
            authorization: AuthorizationOptions::default(),
            auth_timeout: Duration::from_secs(2),
            accounts: Vec::new(),
            no_auth_user: None,
            system_account: None,
            no_system_account: false,
            jetstream: JetStreamOptions::default(),
            tls: None,
            websocket: None,
            cluster: super::cluster::ClusterOptions::default(),
            allow_non_tls: false,
            operator: Vec::new(),
            trusted_keys: Vec::new(),
            resolver: None,
            resolver_preload: Vec::new(),
            ignored: Vec::new(),
            check_warnings: Vec::new(),
        }
    }
}

/// The `jetstream` block (or `jetstream: enabled`).
#[derive(Debug, Clone, PartialEq)]
pub struct JetStreamOptions {
    /// JetStream is on.
    pub enabled: bool,
    /// Storage root (`store_dir`, `storedir`, `store`, or top-level `store_dir`); the server
    /// appends `jetstream/`.
    pub store_dir: Option<PathBuf>,
    /// Memory-storage cap in bytes (`max_memory_store`, `max_mem_store`, `max_mem`).
    pub max_memory_store: Option<i64>,
    /// File-storage cap in bytes (`max_file_store`, `max_file`).
    pub max_file_store: Option<i64>,
    /// JetStream domain.
    pub domain: Option<String>,
    /// Background fsync policy (`sync_interval`, `sync`).
    pub sync_interval: Option<SyncInterval>,
    /// Encryption key (`key`, `ek`, `encryption_key`).
    pub key: Option<String>,
    /// Previous key for re-keying (`prev_key`, `prev_ek`, `prev_encryption_key`).
    pub prev_key: Option<String>,
    /// File holding the encryption key (sealstream addition; nats-server rejects this key).
    pub key_file: Option<PathBuf>,
    /// `chacha` or `aes`, normalized to lower case; `chachapoly` is stored as `chacha`.
    pub cipher: Option<String>,
    /// Strict API request checking.
    pub strict: bool,
    /// Store threads serving the streams (`store_threads`, 1–256; sealstream addition,
    /// nats-server rejects this key). `None`: one per core, at least two.
    pub store_threads: Option<usize>,
    /// `unique_tag`: a tag prefix (`az` for `az:1`, `az:2`, ...); the replicas of one stream
    /// go to servers with different values of it. Lowercased.
    pub unique_tag: Option<String>,
    /// `raft_segment_size`: where a node's Raft log closes a segment file (sealstream
    /// addition, 1 MiB – 1 GiB; `None`: 64 MiB). The log holds about three of them on disk
    /// plus the groups' snapshots (docs/cluster.md).
    pub raft_segment_size: Option<u64>,
}

impl Default for JetStreamOptions {
    fn default() -> Self {
        JetStreamOptions {
            enabled: false,
            store_dir: None,
            max_memory_store: None,
            max_file_store: None,
            domain: None,
            sync_interval: None,
            key: None,
            prev_key: None,
            key_file: None,
            cipher: None,
            strict: true,
            store_threads: None,
            unique_tag: None,
            raft_segment_size: None,
        }
    }
}

/// When stored data is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncInterval {
    /// After every write (`sync_interval: always`).
    Always,
    /// In the background at this period.
    Every(Duration),
}

/// The `websocket {}` block: a second client listener speaking NATS inside WebSocket frames.
#[derive(Debug, Clone, PartialEq)]
pub struct WebsocketOptions {
    /// Interface to bind (default `0.0.0.0`).
    pub host: String,
    /// Port (`-1`: any free port).
    pub port: i32,
    /// Plain `ws://` (nats-server refuses a websocket block with neither TLS nor this).
    pub no_tls: bool,
    /// TLS for `wss://`.
    pub tls: Option<TlsOptions>,
    /// `permessage-deflate` was asked for; it is not negotiated (logged at startup).
    pub compression: bool,
    /// How long the HTTP upgrade may take.
    pub handshake_timeout: Duration,
    /// Refuse an `Origin` whose host differs from the request's `Host`.
    pub same_origin: bool,
    /// When not empty, only these origins (`scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
}

impl Default for WebsocketOptions {
    fn default() -> Self {
        WebsocketOptions {
            host: "0.0.0.0".into(),
            port: 0,
            no_tls: false,
            tls: None,
            compression: false,
            handshake_timeout: Duration::from_secs(2),
            same_origin: false,
            allowed_origins: Vec::new(),
        }
    }
}

/// How account JWTs are found in operator mode.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolverConfig {
    /// Only `resolver_preload` (`MEMORY`, `MEM`).
    Memory,
    /// `URL("http://host/path/")`: fetch `<url><account>`.
    Url(String),
    /// A directory of JWTs (`{type: full|cache, dir: ...}`).
    Dir {
        /// `full` or `cache`.
        kind: String,
        /// Directory holding the JWTs.
        dir: PathBuf,
        /// Whether deletes are honoured (full).
        allow_delete: bool,
        /// Sync interval with other servers (full).
        interval: Option<Duration>,
        /// Most JWTs kept.
        limit: Option<i64>,
        /// Cache entry lifetime (cache).
        ttl: Option<Duration>,
        /// Lookup timeout.
        timeout: Option<Duration>,
    },
}

/// Loads and maps a configuration file.
///
/// # Errors
/// The first [`ConfigError`]: unreadable file, syntax, unknown key, bad value.
pub fn load_file(path: &Path) -> Result<ServerOptions, ConfigError> {
    let value = parse::parse_file(path)?;
    let mut options = ServerOptions::from_document(&value)?;
    options.config_file = Some(path.to_path_buf());
    Ok(options)
}

/// Parses configuration text; `origin` names it in messages and anchors includes.
///
/// # Errors
/// As [`load_file`].
pub fn parse_str(text: &str, origin: &Path) -> Result<ServerOptions, ConfigError> {
    let value = parse::parse_str(text, origin)?;
    ServerOptions::from_document(&value)
}

/// [`parse_str`] with explicit parse settings (environment lookup, includes).
///
/// # Errors
/// As [`load_file`].
pub fn parse_str_with(
    text: &str,
    origin: &Path,
    settings: &ParseSettings<'_>,
) -> Result<ServerOptions, ConfigError> {
    let value = parse::parse_str_with(text, origin, settings)?;
    ServerOptions::from_document(&value)
}

/// Top-level keys that are accepted and ignored (spec **N**).
const IGNORED_TOP_LEVEL: &[&str] = &[
    "mappings",
    "maps",
    "gateway",
    "leafnodes",
    "leaf",
    "mqtt",
    "server_metadata",
    "feature_flags",
    "max_closed_clients",
    "disable_sublist_cache",
    "no_sublist_cache",
    "connect_error_reports",
    "reconnect_error_reports",
    "proxy_protocol",
    "proxies",
    "ocsp",
    "ocsp_cache",
    "default_js_domain",
    "no_fast_producer_stall",
    "resolver_tls",
    "resolver_pinned_accounts",
    "prof_port",
];

impl ServerOptions {
    /// Maps a parsed document (a map) onto options, starting from the defaults.
    ///
    /// # Errors
    /// The first unknown key, wrongly typed value or broken rule, located at its key.
    pub fn from_value(value: &Value) -> Result<ServerOptions, ConfigError> {
        map_document(value, true)
    }

    /// Like [`ServerOptions::from_value`], but an empty document is an error, as it is for
    /// nats-server (`config has no values or is empty`).
    fn from_document(value: &Value) -> Result<ServerOptions, ConfigError> {
        if value.as_map().is_some_and(Map::is_empty) {
            return Err(ConfigError::new(
                Location::whole_file(value.location.file.clone()),
                ConfigErrorKind::Empty,
            ));
        }
        ServerOptions::from_value(value)
    }
}

/// The mapping proper. `check_files` is false only for the fuzz target, which must not read
/// files named by arbitrary input.
pub(super) fn map_document(value: &Value, check_files: bool) -> Result<ServerOptions, ConfigError> {
    let Some(map) = value.as_map() else {
        return Err(ConfigError::syntax(
            value.location.clone(),
            "a configuration must be a map of keys",
        ));
    };
    let mut o = ServerOptions::default();
    let mut c = Collected::default();
    let mut top_store_dir: Option<&Entry> = None;
    let mut js_store_dir: Option<Location> = None;
    let mut registry = accounts::Registry::default();

    for e in map.entries() {
        let k = key(e);
        match k.as_str() {
            "listen" => {
                let (host, port) = host_port(e)?;
                if let Some(host) = host {
                    o.host = host;
                }
                o.port = port;
            }
            "host" | "net" => o.host = field::string(e)?,
            "port" => o.port = field::int32(e)?,
            "server_tags" => {
                o.server_tags = field::string_list(e)?
                    .into_iter()
                    .map(|t| t.trim().to_lowercase())
                    .filter(|t| !t.is_empty())
                    .collect();
            }
            "server_name" => {
                let name = field::string(e)?;
                if name.contains(' ') {
                    return Err(field::invalid(e, "server name cannot contain spaces"));
                }
                o.server_name = Some(name);
            }
            "client_advertise" => o.client_advertise = Some(field::string(e)?),
            "http" | "http_port" | "monitor_port" => {
                let (host, port) = host_port(e)?;
                if let Some(host) = host {
                    o.http_host = host;
                }
                o.http_port = Some(port);
            }
            "https" | "https_port" => {
                let (host, port) = host_port(e)?;
                if let Some(host) = host {
                    o.http_host = host;
                }
                o.https_port = Some(port);
            }
            "http_base_path" => o.http_base_path = field::string(e)?,
            "monitor_tenant_details" => o.monitor_tenant_details = field::boolean(e)?,
            "max_payload" => o.max_payload = at_most_i32(e)?,
            "max_control_line" => o.max_control_line = at_most_i32(e)?,
            "max_pending" => o.max_pending = field::int(e)?,
            "max_connections" | "max_conn" => o.max_connections = field::int(e)?,
            "max_subscriptions" | "max_subs" => o.max_subscriptions = field::int(e)?,
            "max_sub_tokens" => o.max_sub_tokens = field::int(e)?,
            "ping_interval" => o.ping_interval = field::duration(e, true, &mut c)?,
            "ping_max" => o.ping_max = field::int(e)?,
            "write_deadline" => o.write_deadline = field::duration(e, true, &mut c)?,
            "write_timeout" => {
                // nats-server 2.15: a policy for write stalls, not an alias of write_deadline.
                let policy = field::string(e)?;
                if !matches!(
                    policy.to_ascii_lowercase().as_str(),
                    "default" | "close" | "retry"
                ) {
                    return Err(field::invalid(
                        e,
                        "write_timeout must be 'default', 'close' or 'retry'",
                    ));
                }
                c.ignore("write_timeout");
            }
            "lame_duck_duration" => {
                let d = field::duration(e, false, &mut c)?;
                if d < Duration::from_secs(30) {
                    return Err(field::invalid(
                        e,
                        format!("invalid lame_duck_duration of {d:?}, minimum is 30 seconds"),
                    ));
                }
                o.lame_duck_duration = d;
            }
            "lame_duck_grace_period" => {
                o.lame_duck_grace_period = field::duration(e, false, &mut c)?
            }
            "debug" => o.debug = field::boolean(e)?,
            "trace" => o.trace = field::boolean(e)?,
            "trace_verbose" => o.trace_verbose = field::boolean(e)?,
            "logtime" => o.logtime = field::boolean(e)?,
            "logtime_utc" => o.logtime_utc = field::boolean(e)?,
            "logfile" | "log_file" => o.log_file = Some(field::path(e)?),
            "logfile_size_limit" | "log_size_limit" => o.logfile_size_limit = field::size(e)?,
            "logfile_max_num" | "log_max_num" => o.logfile_max_num = field::int(e)?,
            "syslog" => o.syslog = field::boolean(e)?,
            "remote_syslog" => o.remote_syslog = Some(field::string(e)?),
            "pidfile" | "pid_file" => o.pid_file = Some(field::path(e)?),
            "ports_file_dir" => o.ports_file_dir = Some(field::path(e)?),
            "max_traced_msg_len" => o.max_traced_msg_len = field::int(e)?,
            "no_header_support" => o.no_header_support = field::boolean(e)?,
            "authorization" => {
                let auth = accounts::authorization(e, &mut c, &mut registry)?;
                if let Some(t) = auth.options.timeout {
                    o.auth_timeout = t;
                }
                o.authorization = auth.options;
                o.accounts.extend(auth.nested_accounts);
            }
            "accounts" => {
                o.accounts
                    .extend(accounts::accounts(e, "accounts", &mut c, &mut registry)?)
            }
            "no_auth_user" => o.no_auth_user = Some(field::string(e)?),
            "system_account" | "system" => o.system_account = Some(field::string(e)?),
            "no_system_account" => o.no_system_account = field::boolean(e)?,
            "operator" | "operators" | "root" | "roots" | "root_operator" | "root_operators" => {
                let list = field::string_list(e)?;
                if check_files {
                    for op in &list {
                        check_operator(e, op)?;
                    }
                }
                o.operator = list;
            }
            "trusted" | "trusted_keys" => {
                let list = field::string_list(e)?;
                for k in &list {
                    if !keys::is_public_key(k, KeyKind::Operator) {
                        return Err(field::invalid(
                            e,
                            format!(
                                "trust key \"{k}\" required to be a valid public operator nkey"
                            ),
                        ));
                    }
                }
                o.trusted_keys = list;
            }
            "resolver" => o.resolver = Some(resolver(e, &mut c)?),
            "resolver_preload" => {
                let m = field::map(e)?;
                let mut preload = Vec::new();
                for item in m.entries() {
                    let jwt = field::string(item)?;
                    if !keys::looks_like_jwt(&jwt) {
                        return Err(field::invalid(item, "invalid account JWT"));
                    }
                    preload.push((item.key.clone(), jwt));
                }
                o.resolver_preload = preload;
            }
            "jetstream" => jetstream(e, &mut o.jetstream, &mut js_store_dir, &mut c)?,
            "store_dir" => {
                o.jetstream.store_dir = Some(field::path(e)?);
                top_store_dir = Some(e);
            }
            "tls" => o.tls = Some(tls(e, check_files, &mut c)?),
            "websocket" | "ws" => o.websocket = Some(websocket(e, check_files, &mut c)?),
            "cluster" => o.cluster = super::cluster::cluster(e, check_files, &mut c)?,
            "allow_non_tls" => o.allow_non_tls = field::boolean(e)?,
            // Contents are not checked: sealstream does not act on these blocks, so only their
            // presence matters (the server logs them as unsupported).
            other if IGNORED_TOP_LEVEL.contains(&other) => c.ignore(other),
            _ => field::unknown_unless_variable(e)?,
        }
    }

    if let (Some(_), Some(inner)) = (top_store_dir, js_store_dir) {
        return Err(ConfigError::invalid(
            inner,
            "Duplicate 'store_dir' configuration",
        ));
    }
    accounts::check_users_and_imports(&o.accounts, &registry)?;
    o.ignored = c.ignored;
    o.check_warnings = c.warnings;
    Ok(o)
}

fn at_most_i32(e: &Entry) -> Result<i64, ConfigError> {
    let n = field::int(e)?;
    if n > i64::from(i32::MAX) {
        return Err(field::invalid(e, format!("{} value is too big", e.key)));
    }
    Ok(n)
}

/// `port`, `host:port`, `:port` or `[v6]:port` (used by `listen`, `http`, `https`).
/// A light version of Go's `url.Parse` acceptance: a `scheme:` prefix must be a valid
/// scheme (so `{http://x` fails, as it does for nats-server) and `%` escapes must be hex.
fn url_parses(url: &str) -> bool {
    let before_path = url.split('/').next().unwrap_or_default();
    if let Some((scheme, _)) = before_path.split_once(':') {
        let mut chars = scheme.chars();
        let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !valid {
            return false;
        }
    }
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host_port = authority.rsplit('@').next().unwrap_or_default();
        if !host_port.starts_with('[') {
            if let Some((_, port)) = host_port.rsplit_once(':') {
                if !port.bytes().all(|b| b.is_ascii_digit()) {
                    return false;
                }
            }
        }
    }
    let bytes = url.as_bytes();
    bytes.iter().enumerate().all(|(i, b)| {
        *b != b'%'
            || (bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    }) && !url.chars().any(char::is_control)
}

fn check_operator(e: &Entry, op: &str) -> Result<(), ConfigError> {
    let fail = |reason: String| field::invalid(e, format!("error parsing operator JWT: {reason}"));
    if op.trim_start().starts_with("eyJ") {
        return if keys::looks_like_jwt(op) {
            Ok(())
        } else {
            Err(fail("not a well-formed JWT".into()))
        };
    }
    let path = Path::new(op);
    let meta = std::fs::metadata(path).map_err(|err| fail(format!("open {op}: {err}")))?;
    // Bound the read: the path comes from the operator's file but may name a device.
    if !meta.is_file() || meta.len() > 1024 * 1024 {
        return Err(fail(format!("{op} is not a regular file of at most 1 MiB")));
    }
    let text = std::fs::read_to_string(path).map_err(|err| fail(format!("read {op}: {err}")))?;
    keys::find_jwt(&text)
        .map(|_| ())
        .ok_or_else(|| fail(format!("{op} does not hold a JWT")))
}

fn jetstream(
    e: &Entry,
    js: &mut JetStreamOptions,
    store_dir_at: &mut Option<Location>,
    c: &mut Collected,
) -> Result<(), ConfigError> {
    match &e.value.kind {
        ValueKind::Bool(b) => {
            js.enabled = *b;
            Ok(())
        }
        ValueKind::String(s) => match s.to_ascii_lowercase().as_str() {
            "enabled" | "enable" => {
                js.enabled = true;
                Ok(())
            }
            "disabled" | "disable" => {
                js.enabled = false;
                Ok(())
            }
            _ => Err(field::invalid(
                e,
                format!("Expected 'enabled' or 'disabled' for string value, got '{s}'"),
            )),
        },
        ValueKind::Map(m) => {
            js.enabled = true;
            for item in m.entries() {
                let k = key(item);
                match k.as_str() {
                    "enabled" | "enable" => js.enabled = field::boolean(item)?,
                    "store_dir" | "storedir" | "store" => {
                        js.store_dir = Some(field::path(item)?);
                        *store_dir_at = Some(item.key_location.clone());
                    }
                    "max_memory_store" | "max_mem_store" | "max_mem" => {
                        js.max_memory_store = Some(field::size(item)?)
                    }
                    "max_file_store" | "max_file" => js.max_file_store = Some(field::size(item)?),
                    "domain" => js.domain = Some(field::string(item)?),
                    "sync_interval" | "sync" => {
                        js.sync_interval = Some(match &item.value.kind {
                            ValueKind::String(s) if s.eq_ignore_ascii_case("always") => {
                                SyncInterval::Always
                            }
                            _ => SyncInterval::Every(field::duration(item, true, c)?),
                        })
                    }
                    "key" | "ek" | "encryption_key" => js.key = Some(field::string(item)?),
                    "prev_key" | "prev_ek" | "prev_encryption_key" => {
                        js.prev_key = Some(field::string(item)?)
                    }
                    "key_file" => js.key_file = Some(field::path(item)?),
                    "cipher" => {
                        let s = field::string(item)?;
                        let normalized = match s.to_ascii_lowercase().as_str() {
                            "chacha" | "chachapoly" => "chacha",
                            "aes" => "aes",
                            _ => {
                                return Err(field::invalid(
                                    item,
                                    format!("Unknown cipher type: \"{s}\""),
                                ))
                            }
                        };
                        js.cipher = Some(normalized.to_string());
                    }
                    "strict" => js.strict = field::boolean(item)?,
                    "unique_tag" => {
                        let t = field::string(item)?.trim().to_lowercase();
                        js.unique_tag = (!t.is_empty()).then_some(t);
                    }
                    "raft_segment_size" => {
                        let n = field::size(item)?;
                        if !(1 << 20..=1 << 30).contains(&n) {
                            return Err(field::invalid(
                                item,
                                format!("Expected raft_segment_size between 1MB and 1GB, got {n}"),
                            ));
                        }
                        js.raft_segment_size = u64::try_from(n).ok();
                    }
                    "store_threads" => {
                        let n = field::int(item)?;
                        if !(1..=256).contains(&n) {
                            return Err(field::invalid(
                                item,
                                format!("Expected store_threads between 1 and 256, got {n}"),
                            ));
                        }
                        js.store_threads = usize::try_from(n).ok();
                    }
                    "limits" => {
                        let limits = field::map(item)?;
                        for l in limits.entries() {
                            match key(l).as_str() {
                                "max_ack_pending"
                                | "max_ha_assets"
                                | "max_request_batch"
                                | "duplicate_window"
                                | "batch"
                                | "max_batch_inflight_per_stream"
                                | "max_batch_inflight_total"
                                | "max_batch_size"
                                | "max_batch_timeout" => {}
                                _ => field::unknown_unless_variable(l)?,
                            }
                        }
                        c.ignore("jetstream.limits");
                    }
                    "max_concurrent_io" => {
                        let n = field::int(item)?;
                        if !(4..=8192).contains(&n) {
                            return Err(field::invalid(
                                item,
                                format!("Expected an absolute size for \"{}\" between 4 and 8192, got {n}", item.key),
                            ));
                        }
                        c.ignore("jetstream.max_concurrent_io");
                    }
                    "max_outstanding_catchup"
                    | "max_buffered_size"
                    | "max_buffered_msgs"
                    | "request_queue_limit"
                    | "info_queue_limit"
                    | "meta_compact"
                    | "meta_compact_size"
                    | "meta_compact_sync"
                    | "extension_hint"
                    | "tpm" => c.ignore(format!("jetstream.{k}")),
                    _ => field::unknown_unless_variable(item)?,
                }
            }
            Ok(())
        }
        _ => Err(field::invalid(
            e,
            format!(
                "Expected map, bool or string to define JetStream, got {}",
                e.value.type_name()
            ),
        )),
    }
}

fn websocket(
    e: &Entry,
    check_files: bool,
    c: &mut Collected,
) -> Result<WebsocketOptions, ConfigError> {
    let m = field::map(e)?;
    let mut w = WebsocketOptions::default();
    for item in m.entries() {
        match key(item).as_str() {
            "listen" => {
                let (host, port) = host_port(item)?;
                if let Some(host) = host {
                    w.host = host;
                }
                w.port = port;
            }
            "host" | "net" => w.host = field::string(item)?,
            "port" => w.port = field::int32(item)?,
            "no_tls" => w.no_tls = field::boolean(item)?,
            "tls" => w.tls = Some(tls(item, check_files, c)?),
            "compression" => w.compression = field::boolean(item)?,
            "handshake_timeout" => w.handshake_timeout = field::seconds(item)?,
            "same_origin" => w.same_origin = field::boolean(item)?,
            "allowed_origins" => w.allowed_origins = field::string_list(item)?,
            "advertise" => c.ignore("websocket.advertise"),
            // Authentication of its own (cookies, a separate users list, no_auth_user) would
            // change who may connect: refused until built, never ignored.
            "authorization" | "no_auth_user" | "jwt_cookie" | "user_cookie" | "pass_cookie"
            | "token_cookie" | "headers" | "no_masking" => {
                return Err(field::invalid(
                    item,
                    format!("websocket option \"{}\" is not supported", item.key),
                ))
            }
            _ => field::unknown_unless_variable(item)?,
        }
    }
    if w.tls.is_none() && !w.no_tls {
        return Err(field::invalid(
            e,
            "websocket requires TLS configuration (or no_tls: true)",
        ));
    }
    Ok(w)
}

fn resolver(e: &Entry, c: &mut Collected) -> Result<ResolverConfig, ConfigError> {
    let bad = || {
        field::invalid(
            e,
            "error parsing account resolver, should be MEM or URL(\"url\") or a map containing dir and type state=[FULL|CACHE])",
        )
    };
    match &e.value.kind {
        ValueKind::String(s) => {
            // nats-server looks for `URL(` and `MEM` anywhere in the value.
            let upper = s.to_ascii_uppercase();
            if let Some(start) = upper.find("URL") {
                let inner = s.get(start + 3..).unwrap_or_default();
                let inner = inner.strip_prefix('(').unwrap_or(inner);
                let inner = inner.strip_suffix(')').unwrap_or(inner).trim();
                let url = inner.trim_matches('"');
                if !url_parses(url) {
                    return Err(field::invalid(
                        e,
                        format!("error parsing account resolver url [\"{url}\"]"),
                    ));
                }
                return Ok(ResolverConfig::Url(url.to_string()));
            }
            if upper.contains("MEM") {
                return Ok(ResolverConfig::Memory);
            }
            Err(bad())
        }
        ValueKind::Map(m) => {
            let mut kind = None;
            let mut dir = None;
            let mut allow_delete = false;
            let mut interval = None;
            let mut limit = None;
            let mut ttl = None;
            let mut timeout = None;
            for item in m.entries() {
                let k = key(item);
                match k.as_str() {
                    "type" => {
                        let t = field::string(item)?.to_ascii_lowercase();
                        if t != "full" && t != "cache" {
                            return Err(bad());
                        }
                        kind = Some(t);
                    }
                    "dir" => dir = Some(field::path(item)?),
                    "allow_delete" => allow_delete = field::boolean(item)?,
                    "interval" => interval = Some(field::duration(item, false, c)?),
                    "limit" => limit = Some(field::int(item)?),
                    "ttl" => ttl = Some(field::duration(item, false, c)?),
                    "timeout" => timeout = Some(field::duration(item, false, c)?),
                    // nats-server does not check other keys of this map; accept and list
                    // them so the server can log them.
                    _ => c.ignore(format!("resolver.{k}")),
                }
            }
            match (kind, dir) {
                (Some(_), None) => Err(field::invalid(
                    e,
                    "mkdir : no such file or directory (the resolver needs a dir)",
                )),
                (Some(kind), Some(dir)) => Ok(ResolverConfig::Dir {
                    kind,
                    dir,
                    allow_delete,
                    interval,
                    limit,
                    ttl,
                    timeout,
                }),
                _ => Err(bad()),
            }
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests;
