//! `sealctl server info|ping|check`: is the server up, what is it, is JetStream healthy.
//!
//! `check jetstream` is meant for monitoring systems, so it follows the Nagios plugin
//! convention — one status line (`OK`/`WARNING`/`CRITICAL`, then `|` and perfdata) and exit
//! codes 0/1/2 — and never fails with exit code 1 for a reason that is really CRITICAL (a
//! server that cannot be reached is CRITICAL, exit 2).

use std::time::Instant;

use serde_json::{json, Value};

use super::conn::{Session, Target};
use super::util::{fmt_bytes, ji, ju};
use crate::ctl::args::{CheckJsArgs, ConnArgs};

/// `sealctl server info`: what the server announced in INFO, plus the account's JetStream
/// usage when JetStream is on.
///
/// # Errors
/// Connection errors.
pub async fn info(s: &Session) -> anyhow::Result<()> {
    let i = s.client.server_info();
    let account = if i.jetstream {
        s.api("INFO", &Value::Null).await.ok()
    } else {
        None
    };
    let v = json!({
        "server_id": i.server_id, "server_name": i.server_name, "version": i.version,
        "go": i.go, "host": i.host, "port": i.port, "proto": i.proto, "headers": i.headers,
        "max_payload": i.max_payload, "jetstream": i.jetstream, "auth_required": i.auth_required,
        "tls_required": i.tls_required, "cluster": i.cluster, "domain": i.domain,
        "client_id": i.client_id, "client_ip": i.client_ip, "connect_urls": i.connect_urls,
        "lame_duck_mode": i.lame_duck_mode, "jetstream_account": account,
    });
    if s.json {
        return s.print_json(&v);
    }
    println!(
        "Server information for {} ({})\n",
        i.server_name, i.server_id
    );
    let rows: Vec<(&str, String)> = vec![
        ("Name", i.server_name.clone()),
        ("Version", i.version.clone()),
        ("Go", i.go.clone()),
        ("Host", format!("{}:{}", i.host, i.port)),
        ("Protocol", i.proto.to_string()),
        ("Headers", i.headers.to_string()),
        ("Max payload", fmt_bytes(i.max_payload as u64)),
        ("JetStream", i.jetstream.to_string()),
        ("Auth required", i.auth_required.to_string()),
        ("TLS required", i.tls_required.to_string()),
        ("Cluster", i.cluster.clone().unwrap_or_default()),
        ("Domain", i.domain.clone().unwrap_or_default()),
        ("Client id", i.client_id.to_string()),
        ("Client IP", i.client_ip.clone()),
    ];
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    for (k, val) in &rows {
        println!("{:>w$} {val}", format!("{k}:"));
    }
    if let Some(a) = &account {
        println!();
        println!("JetStream account usage:");
        let lim = &a["limits"];
        let rows = [
            ("Memory", usage(ju(a, "memory"), ji(lim, "max_memory"))),
            ("Storage", usage(ju(a, "storage"), ji(lim, "max_storage"))),
            (
                "Streams",
                count_usage(ju(a, "streams"), ji(lim, "max_streams")),
            ),
            (
                "Consumers",
                count_usage(ju(a, "consumers"), ji(lim, "max_consumers")),
            ),
        ];
        for (k, val) in rows {
            println!("{:>w$} {val}", format!("{k}:"));
        }
    }
    Ok(())
}

fn usage(used: u64, limit: i64) -> String {
    if limit > 0 {
        format!(
            "{} of {} ({:.1}%)",
            fmt_bytes(used),
            fmt_bytes(limit.unsigned_abs()),
            used as f64 * 100.0 / limit as f64
        )
    } else {
        format!("{} (no limit)", fmt_bytes(used))
    }
}

fn count_usage(used: u64, limit: i64) -> String {
    if limit > 0 {
        format!("{used} of {limit}")
    } else {
        format!("{used} (no limit)")
    }
}

/// `sealctl server ping`: `count` PING/PONG round trips.
///
/// # Errors
/// Connection errors.
pub async fn ping(s: &Session, count: u32) -> anyhow::Result<()> {
    let name = s.client.server_info().server_name;
    let mut rtts = Vec::new();
    for _ in 0..count.max(1) {
        let start = Instant::now();
        tokio::time::timeout(s.timeout, s.client.flush())
            .await
            .map_err(|_| anyhow::anyhow!("no PONG within {:?}", s.timeout))??;
        rtts.push(start.elapsed());
    }
    let ms: Vec<f64> = rtts.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    let min = ms.iter().copied().fold(f64::MAX, f64::min);
    let max = ms.iter().copied().fold(0.0, f64::max);
    let avg = ms.iter().sum::<f64>() / ms.len() as f64;
    if s.json {
        return s.print_json(&json!({
            "server_name": name, "count": ms.len(), "rtt_ms": ms,
            "min_ms": min, "avg_ms": avg, "max_ms": max,
        }));
    }
    for (i, m) in ms.iter().enumerate() {
        println!("{name}: rtt {m:.3} ms (#{})", i + 1);
    }
    println!(
        "{} pings: min {min:.3} ms, avg {avg:.3} ms, max {max:.3} ms",
        ms.len()
    );
    Ok(())
}

/// Nagios states, ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum State {
    Ok = 0,
    Warning = 1,
    Critical = 2,
}

impl State {
    fn label(self) -> &'static str {
        match self {
            State::Ok => "OK",
            State::Warning => "WARNING",
            State::Critical => "CRITICAL",
        }
    }
}

/// `sealctl server check jetstream`; returns the exit code (0 OK, 1 WARNING, 2 CRITICAL)
/// after printing the status line.
pub async fn check_jetstream(target: &Target, conn: &ConnArgs, a: &CheckJsArgs) -> i32 {
    let mut state = State::Ok;
    let mut notes: Vec<String> = Vec::new();
    let mut perf: Vec<String> = Vec::new();
    let mut raise = |state: &mut State, to: State, note: String| {
        if to > *state {
            *state = to;
        }
        notes.push(note);
    };
    let s = match Session::open(target, conn).await {
        Ok(s) => Some(s),
        Err(e) => {
            raise(
                &mut state,
                State::Critical,
                format!("connection failed: {e:#}"),
            );
            None
        }
    };
    let mut account = Value::Null;
    if let Some(s) = &s {
        if !s.client.server_info().jetstream {
            raise(
                &mut state,
                State::Critical,
                "JetStream is not enabled on the server".into(),
            );
        } else {
            match s.api("INFO", &Value::Null).await {
                Err(e) => raise(
                    &mut state,
                    State::Critical,
                    format!("JetStream account info failed: {e:#}"),
                ),
                Ok(v) => account = v,
            }
        }
    }
    if account.is_object() {
        let lim = &account["limits"];
        for (what, used, limit, warn, crit) in [
            (
                "memory",
                ju(&account, "memory"),
                ji(lim, "max_memory"),
                a.mem_warn,
                a.mem_crit,
            ),
            (
                "storage",
                ju(&account, "storage"),
                ji(lim, "max_storage"),
                a.store_warn,
                a.store_crit,
            ),
        ] {
            perf.push(format!("{what}={used}B"));
            if limit > 0 {
                let pct = used as f64 * 100.0 / limit as f64;
                perf.push(format!("{what}_pct={pct:.1}%;{warn};{crit}"));
                if pct >= f64::from(crit) {
                    raise(
                        &mut state,
                        State::Critical,
                        format!("{what} {pct:.1}% of limit >= {crit}%"),
                    );
                } else if pct >= f64::from(warn) {
                    raise(
                        &mut state,
                        State::Warning,
                        format!("{what} {pct:.1}% of limit >= {warn}%"),
                    );
                }
            }
        }
        perf.push(format!("streams={}", ju(&account, "streams")));
        perf.push(format!("consumers={}", ju(&account, "consumers")));
        if let (Some(s), Some(stream)) = (&s, &a.stream) {
            match s.api(&format!("STREAM.INFO.{stream}"), &Value::Null).await {
                Err(e) => raise(
                    &mut state,
                    State::Critical,
                    format!("stream {stream}: {e:#}"),
                ),
                Ok(v) => {
                    let msgs = ju(&v["state"], "messages");
                    perf.push(format!("{stream}_msgs={msgs}"));
                    if a.msgs_crit.is_some_and(|c| msgs >= c) {
                        raise(
                            &mut state,
                            State::Critical,
                            format!("stream {stream} has {msgs} messages"),
                        );
                    } else if a.msgs_warn.is_some_and(|w| msgs >= w) {
                        raise(
                            &mut state,
                            State::Warning,
                            format!("stream {stream} has {msgs} messages"),
                        );
                    }
                }
            }
        }
    }
    let summary = if notes.is_empty() {
        format!(
            "JetStream {}: {} streams, {} consumers",
            state.label(),
            ju(&account, "streams"),
            ju(&account, "consumers")
        )
    } else {
        format!("JetStream {}: {}", state.label(), notes.join("; "))
    };
    if conn.json {
        let v = json!({
            "status": state.label(), "exit_code": state as i32, "messages": notes,
            "perfdata": perf, "account": account,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else if perf.is_empty() {
        println!("{summary}");
    } else {
        println!("{summary} | {}", perf.join(" "));
    }
    state as i32
}
