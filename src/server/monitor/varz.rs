//! The documents behind `/varz`, `/connz`, `/subsz`, `/routez` and `/healthz`.
//!
//! Field names and units follow nats-server: durations in nanoseconds except `auth_timeout` and
//! `tls_timeout` (seconds), `uptime` as a Go-style string, times in RFC 3339.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hyper::StatusCode;
use serde_json::{json, Value};

use super::super::account::Subscription;
use super::super::{Shared, NATS_COMPAT_VERSION};

/// A Go-style duration string as nats-server prints uptimes: `1d2h3m4s`, `1m23s`, `5s`.
pub(crate) fn uptime_string(d: Duration) -> String {
    let s = d.as_secs();
    let (days, h, m, sec) = (s / 86_400, (s / 3600) % 24, (s / 60) % 60, s % 60);
    let mut out = String::new();
    if days > 0 {
        out.push_str(&format!("{days}d"));
    }
    if days > 0 || h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if days > 0 || h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{sec}s"));
    out
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Resident set size and total CPU seconds of this process, from /proc.
fn process_usage() -> (u64, f64) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .unwrap_or(0)
        * 1024;
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            let f: Vec<&str> = after.split_whitespace().collect();
            let ut: f64 = f.get(11)?.parse().ok()?;
            let st: f64 = f.get(12)?.parse().ok()?;
            Some((ut + st) / 100.0)
        })
        .unwrap_or(0.0);
    (rss, cpu)
}

/// `/varz`.
pub(crate) fn varz(s: &Shared) -> Value {
    let now = SystemTime::now();
    let up = now.duration_since(s.start).unwrap_or_default();
    let (mem, cpu_secs) = process_usage();
    let cpu = if up.as_secs_f64() > 0.0 {
        (cpu_secs / up.as_secs_f64() * 1000.0).round() / 10.0
    } else {
        0.0
    };
    let o = &s.opts;
    let st = &s.stats;
    let http_stats: HashMap<String, u64> = s
        .http_req_stats
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    json!({
        "server_id": s.server_id,
        "server_name": s.server_name,
        "version": NATS_COMPAT_VERSION,
        "proto": 1,
        "go": crate::server::RUNTIME_VERSION,
        "host": o.host,
        "port": s.client_port.load(Ordering::Relaxed),
        "auth_required": s.auth().required(),
        "max_connections": s.limits.max_connections,
        "ping_interval": nanos(s.limits.ping_interval),
        "ping_max": s.limits.ping_max,
        "http_host": if o.http_host.is_empty() { &o.host } else { &o.http_host },
        "http_port": o.http_port.unwrap_or(0),
        "http_base_path": o.http_base_path,
        "https_port": o.https_port.unwrap_or(0),
        "auth_timeout": s.limits.auth_timeout.as_secs_f64(),
        "max_control_line": s.limits.max_control_line,
        "max_payload": s.limits.max_payload,
        "max_pending": s.limits.max_pending,
        "max_subscriptions": s.limits.max_subscriptions,
        "tls_timeout": 2.0,
        "write_deadline": nanos(s.limits.write_deadline),
        "lame_duck_duration": nanos(o.lame_duck_duration),
        "lame_duck_grace_period": nanos(o.lame_duck_grace_period),
        "start": crate::timefmt::rfc3339_system(s.start),
        "now": crate::timefmt::rfc3339_system(now),
        "uptime": uptime_string(up),
        "mem": mem,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": cpu,
        "connections": s.num_clients(),
        "total_connections": st.total_connections.load(Ordering::Relaxed),
        "routes": s.cluster.as_ref().map_or(0, |c| c.routes().len()),
        "remotes": s.cluster.as_ref().map_or(0, |c| c.peers()),
        "leafnodes": 0,
        "in_msgs": st.in_msgs.load(Ordering::Relaxed),
        "out_msgs": st.out_msgs.load(Ordering::Relaxed),
        "in_bytes": st.in_bytes.load(Ordering::Relaxed),
        "out_bytes": st.out_bytes.load(Ordering::Relaxed),
        "slow_consumers": st.slow_consumers.load(Ordering::Relaxed),
        "stale_connections": st.stale_connections.load(Ordering::Relaxed),
        "subscriptions": s.accounts.subscription_count(),
        "http_req_stats": http_stats,
        "config_load_time": crate::timefmt::rfc3339_system(s.start),
        "system_account": o.system_account.clone().unwrap_or_else(|| "$SYS".to_owned()),
        "cluster": cluster_varz(s),
        "connect_urls": s.client_urls(),
        "gateway": {},
        "leaf": {},
        "mqtt": {},
        "websocket": {},
    })
}

/// `/connz` with `offset`, `limit`, `sort=cid|start|subs|pending|msgs_to|msgs_from|bytes_to|bytes_from`
/// and `subs=1`.
///
/// # Errors
/// A plain-text reason for a bad query value (HTTP 400).
pub(crate) fn connz(s: &Shared, q: &HashMap<String, String>) -> Result<Value, String> {
    let num = |k: &str, d: usize| -> Result<usize, String> {
        match q.get(k) {
            None => Ok(d),
            Some(v) => v
                .parse()
                .map_err(|_| format!("invalid value for {k}: {v:?}\n")),
        }
    };
    let offset = num("offset", 0)?;
    let limit = num("limit", 1024)?;
    let mut clients = s.clients();
    let sort = q.get("sort").map(String::as_str).unwrap_or("cid");
    let key = |c: &super::super::client::ClientHandle| -> u64 {
        let (om, ob) = c.outbound.out_stats();
        match sort {
            "subs" => c.subs.load(Ordering::Relaxed),
            "pending" => c.outbound.pending_bytes() as u64,
            "msgs_to" => om,
            "bytes_to" => ob,
            "msgs_from" => c.in_msgs.load(Ordering::Relaxed),
            "bytes_from" => c.in_bytes.load(Ordering::Relaxed),
            _ => c.cid,
        }
    };
    match sort {
        "cid" | "start" => clients.sort_by_key(|c| c.cid),
        "subs" | "pending" | "msgs_to" | "bytes_to" | "msgs_from" | "bytes_from" => {
            clients.sort_by_key(|c| std::cmp::Reverse(key(c)))
        }
        other => return Err(format!("invalid sorting option: {other:?}\n")),
    }
    let now = SystemTime::now();
    let total = clients.len();
    let details = super::tenant_details_allowed(s);
    let conns: Vec<Value> = clients
        .iter()
        .skip(offset)
        .take(limit)
        .map(|c| {
            let m = c.meta();
            let (out_msgs, out_bytes) = c.outbound.out_stats();
            let mut v = json!({
                "cid": c.cid,
                "kind": "Client",
                "type": "nats",
                "ip": c.peer.ip().to_string(),
                "port": c.peer.port(),
                "start": crate::timefmt::rfc3339_system(c.start),
                "uptime": uptime_string(now.duration_since(c.start).unwrap_or_default()),
                "pending_bytes": c.outbound.pending_bytes(),
                "in_msgs": c.in_msgs.load(Ordering::Relaxed),
                "out_msgs": out_msgs,
                "in_bytes": c.in_bytes.load(Ordering::Relaxed),
                "out_bytes": out_bytes,
                "subscriptions": c.subs.load(Ordering::Relaxed),
                "lang": m.lang.unwrap_or_default(),
                "version": m.version.unwrap_or_default(),
            });
            // A client's name often names its tenant: shown with the account or not at all.
            if details {
                v["name"] = json!(m.name.unwrap_or_default());
                v["account"] = json!(m.account);
            }
            v
        })
        .collect();
    let mut v = json!({
        "server_id": s.server_id,
        "now": crate::timefmt::rfc3339_system(now),
        "num_connections": conns.len(),
        "total": total,
        "offset": offset,
        "limit": limit,
        "connections": conns,
    });
    if !details {
        v["tenant_details"] = json!(super::TENANT_DETAILS_HIDDEN);
    }
    Ok(v)
}

/// `/subsz` (counts only).
pub(crate) fn subsz(s: &Shared) -> Value {
    json!({
        "server_id": s.server_id,
        "now": crate::timefmt::rfc3339_system(SystemTime::now()),
        "num_subscriptions": s.accounts.subscription_count(),
    })
}

/// `/varz`'s `cluster` object (empty when not clustered).
fn cluster_varz(s: &Shared) -> Value {
    let Some(c) = &s.cluster else {
        return json!({});
    };
    let addr = c.listen.get();
    json!({
        "name": c.name().0,
        "addr": addr.map(|a| a.ip().to_string()).unwrap_or_else(|| c.opts.host.clone()),
        "cluster_port": addr.map_or(0, std::net::SocketAddr::port),
        "auth_timeout": c.opts.auth_timeout.as_secs_f64(),
        "urls": c.opts.routes.iter().map(|r| {
            crate::config::cluster::parse_route_url(r)
                .map_or_else(|| r.clone(), |u| format!("{}:{}", u.host, u.port))
        }).collect::<Vec<_>>(),
        "tls_timeout": 2.0,
        "pool_size": -1,
    })
}

/// `/routez`: one entry per route connection (one per peer: routes are not pooled).
/// `subs=1` adds each route's `subscriptions_list` (subjects), `subs=detail` its
/// `subscriptions_list_detail`, as nats-server does.
pub(crate) fn routez(s: &Shared, q: &HashMap<String, String>) -> Value {
    let subs = q.get("subs").map(String::as_str);
    // Subjects and account names are tenants' details (super::tenant_details_allowed).
    let allowed = super::tenant_details_allowed(s);
    let (list, detail) = (
        allowed && matches!(subs, Some("1" | "true")),
        allowed && subs == Some("detail"),
    );
    let now = SystemTime::now();
    let now_ns = super::super::route::unix_nanos();
    let mut routes: Vec<Value> = Vec::new();
    if let Some(c) = &s.cluster {
        let mut all = c.routes();
        all.sort_by_key(|r| r.handle.cid);
        for r in all {
            let info = r.lock_info().clone();
            let (out_msgs, out_bytes) = r.handle.outbound.out_stats();
            let up = now.duration_since(r.handle.start).unwrap_or_default();
            let idle_ns = now_ns.saturating_sub(r.last_activity.load(Ordering::Relaxed));
            let last = SystemTime::UNIX_EPOCH
                + std::time::Duration::from_nanos(r.last_activity.load(Ordering::Relaxed));
            let rtt = r.rtt.load(Ordering::Relaxed);
            let mut entry = json!({
                "rid": r.handle.cid,
                "remote_id": info.server_id,
                "remote_name": info.server_name,
                "did_solicit": r.did_solicit,
                "is_configured": r.configured,
                "ip": r.handle.peer.ip().to_string(),
                "port": r.handle.peer.port(),
                "start": crate::timefmt::rfc3339_system(r.handle.start),
                "last_activity": crate::timefmt::rfc3339_system(last),
                "rtt": crate::timefmt::format_go_duration(i64::try_from(rtt).unwrap_or(0)),
                "uptime": uptime_string(up),
                "idle": uptime_string(std::time::Duration::from_nanos(idle_ns)),
                "pending_size": r.handle.outbound.pending_bytes(),
                "in_msgs": r.in_msgs.load(Ordering::Relaxed),
                "out_msgs": out_msgs,
                "in_bytes": r.in_bytes.load(Ordering::Relaxed),
                "out_bytes": out_bytes,
                "subscriptions": r.subs.load(Ordering::Relaxed),
                "compression": r.compression.name(),
            });
            // The system account is no tenant's; other pinned names are tenants' details.
            let system = c.system_account.get().map(String::as_str);
            if let Some(account) = r.slot.pinned().filter(|a| allowed || Some(*a) == system) {
                entry["account"] = Value::from(account);
            }
            if list || detail {
                let held: Vec<(String, Arc<Subscription>)> = s
                    .accounts
                    .all()
                    .iter()
                    .flat_map(|a| {
                        a.remote_subscriptions(&r.handle)
                            .into_iter()
                            .map(|sub| (a.name.clone(), sub))
                    })
                    .collect();
                if !held.is_empty() && list {
                    entry["subscriptions_list"] = held
                        .iter()
                        .map(|(_, sub)| Value::from(String::from_utf8_lossy(&sub.subject)))
                        .collect();
                }
                if !held.is_empty() && detail {
                    entry["subscriptions_list_detail"] = held
                        .iter()
                        .map(|(acc, sub)| route_sub_detail(acc, sub, r.handle.cid))
                        .collect();
                }
            }
            routes.push(entry);
        }
    }
    let mut v = json!({
        "server_id": s.server_id,
        "server_name": s.server_name,
        "now": crate::timefmt::rfc3339_system(now),
        "num_routes": routes.len(),
        "routes": routes,
    });
    if subs.is_some() && !allowed {
        v["tenant_details"] = json!(super::TENANT_DETAILS_HIDDEN);
    }
    v
}

/// One remote subscription as `subscriptions_list_detail` shows it.
fn route_sub_detail(account: &str, sub: &Subscription, cid: u64) -> Value {
    let subject = String::from_utf8_lossy(&sub.subject);
    let mut sid = format!("R {account} {subject}");
    let mut v = json!({ "subject": subject });
    if let Some(q) = &sub.queue {
        let q = String::from_utf8_lossy(q);
        sid.push(' ');
        sid.push_str(&q);
        v["qgroup"] = Value::from(q);
    }
    v["sid"] = Value::from(sid);
    v["msgs"] = Value::from(sub.delivered.load(Ordering::Relaxed));
    v["cid"] = Value::from(cid);
    v
}

/// `/healthz`: ok while the server runs; 503 with `js-enabled-only` when JetStream is off, and
/// on a clustered JetStream server while it has no meta leader (nats-server's words) or its
/// Raft log is under repair (it casts no vote yet).
pub(crate) fn healthz(s: &Shared, q: &HashMap<String, String>) -> (StatusCode, Value) {
    let js_only = q.contains_key("js-enabled-only") || q.contains_key("js-enabled");
    let unavailable = |e: &str| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "unavailable", "status_code": 503, "error": e }),
        )
    };
    let Some(js) = s.jetstream.get() else {
        if js_only {
            return unavailable("JetStream is not enabled");
        }
        return (StatusCode::OK, json!({ "status": "ok" }));
    };
    if let Some(e) = js.cluster().and_then(|c| c.health_error()) {
        return unavailable(&e);
    }
    (StatusCode::OK, json!({ "status": "ok" }))
}
