//! `sealctl server info|ping|check|report|raft`: is the server up, what is it, is JetStream
//! healthy, what does the cluster hold; the meta leader's stepdown and a server's removal.
//!
//! `check jetstream` is meant for monitoring systems, so it follows the Nagios plugin
//! convention — one status line (`OK`/`WARNING`/`CRITICAL`, then `|` and perfdata) and exit
//! codes 0/1/2 — and never fails with exit code 1 for a reason that is really CRITICAL (a
//! server that cannot be reached is CRITICAL, exit 2).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::conn::{Session, Target};
use super::util::{fmt_bytes, ji, ju, print_table};
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

/// `sealctl server check healthz`: GET `/healthz` on the monitoring port; 0 when it answers
/// 200, 2 (CRITICAL) otherwise, with its body on one line.
pub async fn check_healthz(a: &crate::ctl::args::CheckHealthzArgs) -> i32 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = async {
        let mut s = tokio::net::TcpStream::connect(&a.monitor).await?;
        let host = a.monitor.as_str();
        s.write_all(format!("GET /healthz HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
            .await?;
        let mut answer = Vec::new();
        s.take(64 * 1024).read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = tokio::time::timeout(Duration::from_secs(a.timeout), get).await;
    let (ok, detail) = match answer {
        Ok(Ok(text)) => {
            let status = text.lines().next().unwrap_or_default().to_owned();
            let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().trim();
            (
                status.split_whitespace().nth(1) == Some("200"),
                format!("{status}: {body}"),
            )
        }
        Ok(Err(e)) => (false, format!("{}: {e}", a.monitor)),
        Err(_) => (
            false,
            format!("{}: no answer in {} s", a.monitor, a.timeout),
        ),
    };
    if ok {
        println!("OK healthz {detail}");
        0
    } else {
        println!("CRITICAL healthz {detail}");
        2
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

/// Sends `subject` once and gathers every server's answer: until `expect` arrived, or the
/// session timeout, or half a second after the last answer.
///
/// # Errors
/// Connection errors.
async fn gather(
    s: &Session,
    subject: &str,
    body: &Value,
    expect: Option<usize>,
) -> anyhow::Result<Vec<Value>> {
    use futures::StreamExt as _;
    let inbox = s.client.new_inbox();
    let mut answers = s.client.subscribe(inbox.clone()).await?;
    s.client
        .publish_with_reply(subject.to_owned(), inbox, serde_json::to_vec(body)?.into())
        .await?;
    s.client.flush().await?;
    let deadline = tokio::time::Instant::now() + s.timeout;
    let mut out = Vec::new();
    loop {
        let wait = if out.is_empty() {
            deadline
        } else {
            deadline.min(tokio::time::Instant::now() + std::time::Duration::from_millis(500))
        };
        match tokio::time::timeout_at(wait, answers.next()).await {
            Ok(Some(m)) => {
                if m.payload.is_empty() {
                    continue; // a no-responders status
                }
                out.push(serde_json::from_slice(&m.payload)?);
                if expect.is_some_and(|n| out.len() >= n) {
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    Ok(out)
}

/// `sealctl server report jetstream`: every server's JetStream usage (`$SYS.REQ.SERVER.PING.JSZ`,
/// as `nats server report jetstream` asks it) and the meta group as its leader sees it. The
/// meta leader is marked `*`.
///
/// # Errors
/// Connection errors; no server answered (not a system account user, or no JetStream).
pub async fn report_jetstream(s: &Session, expect: Option<usize>) -> anyhow::Result<()> {
    let mut answers = gather(s, "$SYS.REQ.SERVER.PING.JSZ", &json!({}), expect).await?;
    if answers.is_empty() {
        anyhow::bail!(
            "no server answered $SYS.REQ.SERVER.PING.JSZ (a system account user is needed)"
        );
    }
    answers.sort_by(|a, b| {
        let name = |v: &Value| {
            v.pointer("/server/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        name(a).cmp(&name(b))
    });
    if s.json {
        return s.print_json(&Value::from(answers));
    }
    let leader = answers
        .iter()
        .find_map(|a| {
            a.pointer("/data/meta_cluster/leader")
                .and_then(Value::as_str)
        })
        .unwrap_or("")
        .to_owned();
    let mut rows = Vec::new();
    let mut total = [0u64; 7];
    for a in &answers {
        let name = a
            .pointer("/server/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let d = a.get("data").cloned().unwrap_or(Value::Null);
        let cluster = d
            .pointer("/meta_cluster/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let api = d.get("api").cloned().unwrap_or(Value::Null);
        let figures = [
            ju(&d, "streams"),
            ju(&d, "consumers"),
            ju(&d, "messages"),
            ju(&d, "bytes"),
            ju(&d, "memory"),
            ju(&d, "storage"),
            ju(&api, "total"),
        ];
        for (t, f) in total.iter_mut().zip(figures) {
            *t += f;
        }
        let marked = if name == leader {
            format!("{name}*")
        } else {
            name.to_owned()
        };
        rows.push(vec![
            marked,
            cluster.to_owned(),
            figures[0].to_string(),
            figures[1].to_string(),
            figures[2].to_string(),
            fmt_bytes(figures[3]),
            fmt_bytes(figures[4]),
            fmt_bytes(figures[5]),
            figures[6].to_string(),
            ju(&api, "errors").to_string(),
        ]);
    }
    rows.push(vec![
        "Total".to_owned(),
        String::new(),
        total[0].to_string(),
        total[1].to_string(),
        total[2].to_string(),
        fmt_bytes(total[3]),
        fmt_bytes(total[4]),
        fmt_bytes(total[5]),
        total[6].to_string(),
        String::new(),
    ]);
    println!("JetStream Summary\n");
    print_table(
        &[
            "Server",
            "Cluster",
            "Streams",
            "Consumers",
            "Messages",
            "Bytes",
            "Memory",
            "File",
            "API Req",
            "API Err",
        ],
        &rows,
    );
    // The meta group as its leader sees it (the others know only themselves).
    let meta = answers
        .iter()
        .find(|a| a.pointer("/server/name").and_then(Value::as_str) == Some(leader.as_str()))
        .and_then(|a| a.pointer("/data/meta_cluster"))
        .cloned();
    let Some(meta) = meta else {
        println!("\nNo meta group leader answered");
        return Ok(());
    };
    println!("\nRAFT Meta Group Information\n");
    let mut rows = vec![vec![
        leader.clone(),
        meta.get("peer")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        "yes".to_owned(),
        "true".to_owned(),
        "true".to_owned(),
        "0s".to_owned(),
        "0".to_owned(),
    ]];
    for r in meta
        .get("replicas")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let active_ns = ju(r, "active");
        rows.push(vec![
            r.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            r.get("peer")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            String::new(),
            r.get("current")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
            (!r.get("offline").and_then(Value::as_bool).unwrap_or(false)).to_string(),
            format!("{:.2}s", active_ns as f64 / 1e9),
            ju(r, "lag").to_string(),
        ]);
    }
    rows.sort_by(|a, b| a[0].cmp(&b[0]));
    print_table(
        &["Name", "ID", "Leader", "Current", "Online", "Active", "Lag"],
        &rows,
    );
    Ok(())
}

/// `sealctl server raft step-down [--preferred NAME]`: the meta leader hands over.
///
/// # Errors
/// The server's refusal; no answer (not a system account user: nobody answers then).
pub async fn raft_step_down(s: &Session, preferred: Option<&str>) -> anyhow::Result<()> {
    let body = match preferred {
        Some(p) => json!({ "placement": { "preferred": p } }),
        None => Value::Null,
    };
    let v = s.api("META.LEADER.STEPDOWN", &body).await?;
    if s.json {
        return s.print_json(&v);
    }
    println!("Requested a meta group leader step-down");
    Ok(())
}

/// `sealctl server raft peer-remove PEER [--peer-id]`: the server leaves the meta group.
///
/// # Errors
/// The server's refusal (`10044` not a member); no answer (not a system account user).
pub async fn raft_peer_remove(s: &Session, peer: &str, by_id: bool) -> anyhow::Result<()> {
    let body = if by_id {
        json!({ "peer_id": peer })
    } else {
        json!({ "peer": peer })
    };
    let v = s.api("SERVER.REMOVE", &body).await?;
    if s.json {
        return s.print_json(&v);
    }
    println!("Removed {peer} from the JetStream meta group");
    Ok(())
}
