//! The `cluster {}` block and the clustering flags: how this server finds and admits the other
//! members of its cluster (`spec/cluster.md` §1).
//!
//! Clustering is on when a cluster port is set (`listen`, `port`, or `--cluster`). Routes are
//! TCP, or TLS with `tls {}`: then both ends present certificates and verify the other's
//! against `ca_file` (verification cannot be turned off for routes, as in nats-server). Route
//! permissions are refused with an error rather than accepted and ignored, because an operator
//! who writes them expects them to hold.
//! Routes are pooled as nats-server pools them (`pool_size` connections per peer, default 3,
//! plus one per pinned account; `-1` = one connection) and compressed as it negotiates
//! (`compression`, server/route/compress.rs).

use std::time::Duration;

use super::error::ConfigError;
use super::field::{self, key, Collected};
use super::parse::{Entry, ValueKind};
use super::tls::{tls, TlsOptions};

/// What the `cluster {}` block (or the clustering flags) configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Cluster name; `None`: generated at start-up (with a warning).
    pub name: Option<String>,
    /// Route listener host.
    pub host: String,
    /// Route listener port; 0 = clustering off, -1 = any free port.
    pub port: i32,
    /// `host:port` gossiped to peers instead of the listener (`advertise`, `cluster_advertise`).
    pub advertise: Option<String>,
    /// Seed routes to dial (explicit routes: retried for as long as the server runs).
    pub routes: Vec<String>,
    /// Do not tell clients about the other members' URLs.
    pub no_advertise: bool,
    /// Retries for gossiped (implicit) routes; 0 = one attempt.
    pub connect_retries: i64,
    /// Double the retry delay per failure, up to 30 s.
    pub connect_backoff: bool,
    /// Route credentials (`authorization { user, password }`) peers must present.
    pub user: Option<String>,
    /// See `user`.
    pub password: Option<String>,
    /// Time allowed for a route's CONNECT.
    pub auth_timeout: Duration,
    /// Pooled connections per peer (default 3; negative: no pooling, one connection).
    pub pool_size: i64,
    /// Accounts with a connection of their own to each peer (`accounts`, "pinned"); the
    /// system account is pinned too whenever routes are pooled.
    pub pinned_accounts: Vec<String>,
    /// `compression` as written (default `accept`), negotiated per route connection.
    pub compression: String,
    /// Route PING interval (at most 30 s).
    pub ping_interval: Option<Duration>,
    /// Unanswered route PINGs before the route is stale.
    pub ping_max: Option<i64>,
    /// Route TLS (mutual, always verified).
    pub tls: Option<TlsOptions>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            name: None,
            host: "0.0.0.0".into(),
            port: 0,
            advertise: None,
            routes: Vec::new(),
            no_advertise: false,
            connect_retries: 0,
            connect_backoff: false,
            user: None,
            password: None,
            auth_timeout: Duration::from_secs(2),
            pool_size: 3,
            pinned_accounts: Vec::new(),
            compression: "accept".into(),
            ping_interval: None,
            ping_max: None,
            tls: None,
        }
    }
}

impl ClusterOptions {
    /// Whether clustering is on (a route listener is configured).
    pub fn enabled(&self) -> bool {
        self.port != 0
    }

    /// Pooled connections per peer; `None` when pooling is off (`pool_size` negative).
    pub fn pool(&self) -> Option<u32> {
        match self.pool_size {
            n if n < 0 => None,
            0 => Some(3),
            n => Some(u32::try_from(n).unwrap_or(u32::MAX).min(MAX_POOL_SIZE)),
        }
    }
}

/// Most pooled connections per peer we open or accept (a larger `pool_size` is cut to it).
pub const MAX_POOL_SIZE: u32 = 64;

/// The compression modes nats-server accepts (spec §1.2). Not `s2_uncompressed`/`uncompressed`:
/// nats-server 2.15.1 refuses to start with them (`unsupported compression mode`), though a
/// peer may still ask for them in its INFO (route/compress.rs).
const COMPRESSION_MODES: &[&str] = &[
    "off",
    "disabled",
    "false",
    "accept",
    "s2_fast",
    "fast",
    "on",
    "true",
    "enabled",
    "s2_better",
    "better",
    "s2_best",
    "best",
    "s2_auto",
    "auto",
];

/// Maps a `cluster {}` block.
pub(super) fn cluster(
    e: &Entry,
    check_files: bool,
    c: &mut Collected,
) -> Result<ClusterOptions, ConfigError> {
    let m = field::map(e)?;
    let mut o = ClusterOptions::default();
    for item in m.entries() {
        match key(item).as_str() {
            "name" => {
                let name = field::string(item)?;
                if name.contains(' ') {
                    return Err(field::invalid(item, "cluster name cannot contain spaces"));
                }
                o.name = Some(name);
            }
            "listen" => {
                let (host, port) = field::host_port(item)?;
                if let Some(h) = host {
                    o.host = h;
                }
                o.port = port;
            }
            "host" | "net" => o.host = field::string(item)?,
            "port" => o.port = field::int32(item)?,
            "advertise" | "cluster_advertise" => o.advertise = Some(field::string(item)?),
            "routes" => {
                o.routes = field::string_list(item)?;
                for r in &o.routes {
                    if parse_route_url(r).is_none() {
                        return Err(field::invalid(
                            item,
                            format!("error parsing route url [{r:?}]"),
                        ));
                    }
                }
            }
            "no_advertise" => o.no_advertise = field::boolean(item)?,
            "connect_retries" => o.connect_retries = field::int(item)?,
            "connect_backoff" => o.connect_backoff = field::boolean(item)?,
            "pool_size" => o.pool_size = field::int(item)?,
            "accounts" => {
                let names = field::string_list(item)?;
                for (i, n) in names.iter().enumerate() {
                    if names.get(..i).is_some_and(|before| before.contains(n)) {
                        let mut all = names.clone();
                        all.push("$SYS".into());
                        let listed: Vec<String> = all.iter().map(|a| format!("{a:?}")).collect();
                        return Err(field::invalid(
                            item,
                            format!(
                                "found duplicate account name {n:?} in pinned accounts list [{}]",
                                listed.join(" ")
                            ),
                        ));
                    }
                }
                o.pinned_accounts = names;
            }
            "compression" => {
                let mode = match &item.value.kind {
                    ValueKind::Bool(b) => if *b { "on" } else { "off" }.to_owned(),
                    ValueKind::Map(_) => {
                        let inner = field::map(item)?;
                        let mut mode = "s2_auto".to_owned();
                        for x in inner.entries() {
                            match key(x).as_str() {
                                "mode" => mode = field::string(x)?,
                                "rtt_thresholds" => {}
                                _ => field::unknown_unless_variable(x)?,
                            }
                        }
                        mode
                    }
                    _ => field::string(item)?,
                };
                if !COMPRESSION_MODES.contains(&mode.to_ascii_lowercase().as_str()) {
                    return Err(field::invalid(
                        item,
                        format!("unsupported compression mode {mode:?}"),
                    ));
                }
                o.compression = mode;
            }
            "authorization" => {
                let inner = field::map(item)?;
                for x in inner.entries() {
                    match key(x).as_str() {
                        "user" | "username" => o.user = Some(field::string(x)?),
                        "password" | "pass" => o.password = Some(field::string(x)?),
                        "timeout" => o.auth_timeout = field::seconds(x)?,
                        "users" => {
                            return Err(field::invalid(
                                x,
                                "Cluster authorization does not allow multiple users",
                            ))
                        }
                        "token" => {
                            return Err(field::invalid(
                                x,
                                "Cluster authorization does not support tokens",
                            ))
                        }
                        _ => field::unknown_unless_variable(x)?,
                    }
                }
            }
            "ping_interval" => {
                let d = field::duration(item, true, c)?;
                o.ping_interval = Some(d.min(Duration::from_secs(30)));
            }
            "ping_max" => o.ping_max = Some(field::int(item)?),
            "tls" => o.tls = Some(route_tls(item, check_files, c)?),
            // Refused, not ignored: an operator who asks for restricted routes must not get
            // open ones.
            "permissions" => {
                return Err(field::invalid(
                    item,
                    "cluster permissions are not supported by sealstream yet",
                ))
            }
            _ => field::unknown_unless_variable(item)?,
        }
    }
    if o.pool_size < 0 && m.entries().iter().any(|x| key(x) == "accounts") {
        return Err(field::invalid(
            e,
            "pool_size cannot be negative if pinned accounts are specified",
        ));
    }
    Ok(o)
}

/// Maps `cluster { tls {} }`: a certificate, its key and the CA that signs the members'
/// certificates are required, because a route verifies its peer both ways; `insecure` (no
/// verification) is refused.
fn route_tls(
    item: &Entry,
    check_files: bool,
    c: &mut Collected,
) -> Result<TlsOptions, ConfigError> {
    let mut t = tls(item, check_files, c)?;
    if t.insecure {
        return Err(field::invalid(
            item,
            "cluster tls: 'insecure' is not supported; routes always verify their peers",
        ));
    }
    if t.cert_file.is_none() || t.ca_file.is_none() {
        return Err(field::invalid(
            item,
            "cluster tls requires cert_file, key_file and ca_file (routes verify their peers both ways)",
        ));
    }
    t.verify = true;
    Ok(t)
}

/// A route URL's parts: optional `user:pass@` credentials, host and port. The scheme is not
/// checked (nats-server accepts `nats://` as well as `nats-route://`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteUrl {
    /// Credentials from the URL.
    pub user: Option<(String, String)>,
    /// Host name or address (brackets removed).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Parses `[scheme://][user:pass@]host:port[/]`.
pub fn parse_route_url(url: &str) -> Option<RouteUrl> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.trim_end_matches('/');
    let (creds, hostport) = match rest.rsplit_once('@') {
        Some((c, h)) => (Some(c), h),
        None => (None, rest),
    };
    let user = match creds {
        Some(c) => {
            let (u, p) = c.split_once(':').unwrap_or((c, ""));
            Some((u.to_owned(), p.to_owned()))
        }
        None => None,
    };
    let (host, port) = hostport.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() || host.contains(['[', ']', '/']) {
        return None;
    }
    Some(RouteUrl {
        user,
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_urls_parse_with_and_without_credentials() {
        let u = parse_route_url("nats-route://ruser:rpass@127.0.0.1:6222").unwrap();
        assert_eq!(u.user, Some(("ruser".into(), "rpass".into())));
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 6222));
        let u = parse_route_url("nats://[::1]:4248/").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.user), ("::1", 4248, None));
        assert!(parse_route_url("nats-route://[::1").is_none());
        assert!(parse_route_url("nats-route://host").is_none());
    }
}
