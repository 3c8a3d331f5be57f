//! `sealctl stream`: create, change, inspect and empty JetStream streams.
//!
//! Everything goes through the `$JS.API.STREAM.*` JSON API so the same commands manage
//! sealstream and nats-server alike, and `--json` shows the server's own reply. Configs are
//! built only from the flags given (plus `--config FILE`), leaving every other default to the
//! server, so what the server echoes back is the truth operators see.

use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value};

use super::conn::{JsApiError, Session};
use super::util::{
    fmt_bytes, fmt_duration_ns, fmt_limit, fmt_limit_bytes, jb, ji, js, ju, parse_count,
    parse_duration_ns, parse_size, print_section, print_table,
};
use crate::ctl::args::{StreamClusterCmd, StreamCmd, StreamConfigArgs};

/// Runs a `stream` command.
///
/// # Errors
/// Server errors ([`JsApiError`]), bad flags.
pub async fn run(s: &Session, cmd: StreamCmd) -> anyhow::Result<()> {
    match cmd {
        StreamCmd::Add { name, cfg } => {
            let mut config = match &cfg.config {
                Some(p) => read_json(p)?,
                None => json!({}),
            };
            config["name"] = name.clone().into();
            apply(&mut config, &cfg)?;
            let v = s.api(&format!("STREAM.CREATE.{name}"), &config).await?;
            show_info(s, &v, &format!("Stream {name} created"))
        }
        StreamCmd::Edit { name, cfg } => {
            let mut config = match &cfg.config {
                Some(p) => read_json(p)?,
                None => {
                    let cur = s.api(&format!("STREAM.INFO.{name}"), &Value::Null).await?;
                    cur.get("config").cloned().unwrap_or_else(|| json!({}))
                }
            };
            config["name"] = name.clone().into();
            apply(&mut config, &cfg)?;
            let v = s.api(&format!("STREAM.UPDATE.{name}"), &config).await?;
            show_info(s, &v, &format!("Stream {name} updated"))
        }
        StreamCmd::Info { name } => {
            let v = s.api(&format!("STREAM.INFO.{name}"), &Value::Null).await?;
            show_info(s, &v, "")
        }
        StreamCmd::Ls => {
            let list = s.api_paged("STREAM.LIST", "streams", &Value::Null).await?;
            if s.json {
                return s.print_json(&Value::Array(list));
            }
            if list.is_empty() {
                println!("No streams defined");
                return Ok(());
            }
            let mut rows: Vec<Vec<String>> = list
                .iter()
                .map(|i| {
                    let c = &i["config"];
                    let st = &i["state"];
                    vec![
                        js(c, "name").to_owned(),
                        subjects(c).replace(", ", ","),
                        ju(st, "messages").to_string(),
                        fmt_bytes(ju(st, "bytes")),
                        ju(st, "consumer_count").to_string(),
                        js(i, "created").to_owned(),
                    ]
                })
                .collect();
            rows.sort();
            print_table(
                &[
                    "Name",
                    "Subjects",
                    "Messages",
                    "Bytes",
                    "Consumers",
                    "Created",
                ],
                &rows,
            );
            Ok(())
        }
        StreamCmd::Rm { name, .. } => {
            let v = s.api(&format!("STREAM.DELETE.{name}"), &json!({})).await?;
            if s.json {
                return s.print_json(&v);
            }
            println!("Deleted stream {name}");
            Ok(())
        }
        StreamCmd::Purge {
            name,
            subject,
            keep,
            seq,
            ..
        } => {
            let mut body = json!({});
            if let Some(f) = subject {
                body["filter"] = f.into();
            }
            if let Some(k) = keep {
                body["keep"] = k.into();
            }
            if let Some(q) = seq {
                body["seq"] = q.into();
            }
            let v = s.api(&format!("STREAM.PURGE.{name}"), &body).await?;
            if s.json {
                return s.print_json(&v);
            }
            println!("Purged {} messages from {name}", ju(&v, "purged"));
            Ok(())
        }
        StreamCmd::Get {
            name,
            seq,
            last_for,
        } => {
            let body = match (seq, last_for) {
                (_, Some(subj)) => json!({ "last_by_subj": subj }),
                (Some(q), None) => json!({ "seq": q }),
                (None, None) => bail!("give a sequence or --last-for SUBJECT"),
            };
            let v = s.api(&format!("STREAM.MSG.GET.{name}"), &body).await?;
            let m = v.get("message").cloned().unwrap_or_default();
            if s.json {
                return s.print_json(&decoded(&m));
            }
            print_stored(&name, &m);
            Ok(())
        }
        StreamCmd::Rmm { name, seq, .. } => {
            let v = s
                .api(&format!("STREAM.MSG.DELETE.{name}"), &json!({ "seq": seq }))
                .await?;
            if s.json {
                return s.print_json(&v);
            }
            println!("Deleted message {seq} from {name}");
            Ok(())
        }
        StreamCmd::View {
            name,
            count,
            since_seq,
        } => view(s, &name, count, since_seq).await,
        StreamCmd::Cluster {
            cmd: StreamClusterCmd::StepDown { name, preferred },
        } => {
            let body = match &preferred {
                Some(p) => json!({ "placement": { "preferred": p } }),
                None => Value::Null,
            };
            let v = s
                .api(&format!("STREAM.LEADER.STEPDOWN.{name}"), &body)
                .await?;
            if s.json {
                return s.print_json(&v);
            }
            println!("Requested a leader step-down of stream {name}");
            Ok(())
        }
        StreamCmd::Cluster {
            cmd: StreamClusterCmd::PeerRemove { name, peer },
        } => {
            let v = s
                .api(
                    &format!("STREAM.PEER.REMOVE.{name}"),
                    &json!({ "peer": peer }),
                )
                .await?;
            if s.json {
                return s.print_json(&v);
            }
            println!("Moving stream {name}'s replica off {peer}");
            Ok(())
        }
    }
}

fn read_json(p: &std::path::Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?;
    if !v.is_object() {
        bail!("{}: expected a JSON object", p.display());
    }
    Ok(v)
}

fn one_of(flag: &str, v: &str, allowed: &[&str]) -> anyhow::Result<Value> {
    let low = v.to_ascii_lowercase();
    if allowed.contains(&low.as_str()) {
        Ok(low.into())
    } else {
        Err(anyhow!(
            "--{flag} {v:?}: expected one of {}",
            allowed.join(", ")
        ))
    }
}

/// Writes the given flags into a stream config (leaving everything else as it is).
fn apply(c: &mut Value, a: &StreamConfigArgs) -> anyhow::Result<()> {
    if !a.subjects.is_empty() {
        let subs: Vec<Value> = a
            .subjects
            .iter()
            .map(|x| x.trim())
            .filter(|x| !x.is_empty())
            .map(Value::from)
            .collect();
        c["subjects"] = subs.into();
    }
    if let Some(v) = &a.storage {
        c["storage"] = one_of("storage", v, &["file", "memory"])?;
    }
    if let Some(v) = &a.retention {
        let v = match v.to_ascii_lowercase().as_str() {
            "work" | "work_queue" => "workqueue".to_owned(),
            other => other.to_owned(),
        };
        c["retention"] = one_of("retention", &v, &["limits", "interest", "workqueue"])?;
    }
    if let Some(v) = &a.max_msgs {
        c["max_msgs"] = parse_count(v).context("--max-msgs")?.into();
    }
    if let Some(v) = &a.max_bytes {
        c["max_bytes"] = parse_size(v).context("--max-bytes")?.into();
    }
    if let Some(v) = &a.max_age {
        c["max_age"] = parse_duration_ns(v).context("--max-age")?.into();
    }
    if let Some(v) = &a.max_msg_size {
        c["max_msg_size"] = parse_size(v).context("--max-msg-size")?.into();
    }
    if let Some(v) = &a.max_msgs_per_subject {
        c["max_msgs_per_subject"] = parse_count(v).context("--max-msgs-per-subject")?.into();
    }
    if let Some(v) = &a.discard {
        c["discard"] = one_of("discard", v, &["old", "new"])?;
    }
    if let Some(v) = &a.dupe_window {
        c["duplicate_window"] = parse_duration_ns(v).context("--dupe-window")?.into();
    }
    if let Some(r) = a.replicas {
        c["num_replicas"] = r.into();
    }
    if let Some(d) = &a.description {
        c["description"] = d.clone().into();
    }
    for (on, key) in [
        (a.allow_rollup, "allow_rollup_hdrs"),
        (a.deny_delete, "deny_delete"),
        (a.deny_purge, "deny_purge"),
        (a.allow_direct, "allow_direct"),
    ] {
        if on {
            c[key] = true.into();
        }
    }
    Ok(())
}

fn subjects(c: &Value) -> String {
    c.get("subjects")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn pct(used: u64, limit: i64) -> String {
    if limit <= 0 {
        return String::new();
    }
    format!(" ({:.1}%)", used as f64 * 100.0 / limit as f64)
}

/// A replicated stream's `cluster` block: the leader, then each other replica (`current`,
/// when it was last heard, its lag, `OFFLINE`), as the leader sees them.
fn print_cluster(c: &Value) {
    let leader = js(c, "leader");
    let replicas = c.get("replicas").and_then(Value::as_array);
    if leader.is_empty() && replicas.is_none_or(Vec::is_empty) {
        return;
    }
    let mut rows: Vec<(&str, String)> = vec![
        ("Name", js(c, "name").to_owned()),
        (
            "Leader",
            if leader.is_empty() {
                "none (no quorum)".to_owned()
            } else {
                leader.to_owned()
            },
        ),
    ];
    for r in replicas.into_iter().flatten() {
        let state = if jb(r, "offline") {
            "OFFLINE".to_owned()
        } else if jb(r, "current") {
            "current".to_owned()
        } else {
            "outdated".to_owned()
        };
        rows.push((
            "Replica",
            format!(
                "{}, {state}, seen {:.2}s ago, {} operations behind",
                js(r, "name"),
                ju(r, "active") as f64 / 1e9,
                ju(r, "lag")
            ),
        ));
    }
    print_section("Cluster Information", &rows);
}

fn show_info(s: &Session, v: &Value, headline: &str) -> anyhow::Result<()> {
    if s.json {
        return s.print_json(v);
    }
    let c = &v["config"];
    let st = &v["state"];
    if !headline.is_empty() {
        println!("{headline}\n");
    }
    println!(
        "Information for stream {} (created {})\n",
        js(c, "name"),
        js(v, "created")
    );
    let mut cfg = vec![("Subjects", subjects(c))];
    if !js(c, "description").is_empty() {
        cfg.push(("Description", js(c, "description").to_owned()));
    }
    let age = ji(c, "max_age");
    cfg.extend([
        ("Storage", js(c, "storage").to_owned()),
        ("Retention", js(c, "retention").to_owned()),
        ("Replicas", ji(c, "num_replicas").to_string()),
        ("Discard policy", js(c, "discard").to_owned()),
        (
            "Duplicate window",
            fmt_duration_ns(ji(c, "duplicate_window")),
        ),
        ("Maximum messages", fmt_limit(ji(c, "max_msgs"))),
        (
            "Maximum per subject",
            fmt_limit(ji(c, "max_msgs_per_subject")),
        ),
        ("Maximum bytes", fmt_limit_bytes(ji(c, "max_bytes"))),
        (
            "Maximum age",
            if age <= 0 {
                "unlimited".to_owned()
            } else {
                fmt_duration_ns(age)
            },
        ),
        (
            "Maximum message size",
            fmt_limit_bytes(ji(c, "max_msg_size")),
        ),
        ("Maximum consumers", fmt_limit(ji(c, "max_consumers"))),
        ("Allow rollup", jb(c, "allow_rollup_hdrs").to_string()),
        ("Deny delete", jb(c, "deny_delete").to_string()),
        ("Deny purge", jb(c, "deny_purge").to_string()),
        ("Allow direct", jb(c, "allow_direct").to_string()),
        ("Sealed", jb(c, "sealed").to_string()),
    ]);
    print_section("Configuration", &cfg);
    print_cluster(&v["cluster"]);
    let msgs = ju(st, "messages");
    let bytes = ju(st, "bytes");
    let seq_line = |seq: &str, ts: &str| {
        let n = ju(st, seq);
        if n == 0 {
            "0".to_owned()
        } else {
            format!("{n} @ {}", js(st, ts))
        }
    };
    print_section(
        "State",
        &[
            ("Messages", msgs.to_string()),
            ("Bytes", fmt_bytes(bytes)),
            ("First sequence", seq_line("first_seq", "first_ts")),
            ("Last sequence", seq_line("last_seq", "last_ts")),
            ("Deleted messages", ju(st, "num_deleted").to_string()),
            ("Active consumers", ju(st, "consumer_count").to_string()),
            ("Number of subjects", ju(st, "num_subjects").to_string()),
        ],
    );
    let max_msgs = ji(c, "max_msgs");
    let max_bytes = ji(c, "max_bytes");
    print_section(
        "Limits usage",
        &[
            (
                "Messages",
                format!("{msgs} of {}{}", fmt_limit(max_msgs), pct(msgs, max_msgs)),
            ),
            (
                "Bytes",
                format!(
                    "{} of {}{}",
                    fmt_bytes(bytes),
                    fmt_limit_bytes(max_bytes),
                    pct(bytes, max_bytes)
                ),
            ),
        ],
    );
    Ok(())
}

fn b64(s: &str) -> Vec<u8> {
    data_encoding::BASE64
        .decode(s.as_bytes())
        .unwrap_or_else(|_| s.as_bytes().to_vec())
}

/// A stored message (`STREAM.MSG.GET` reply) with `data`/`hdrs` decoded for `--json`.
fn decoded(m: &Value) -> Value {
    let mut out = m.clone();
    out["data"] = String::from_utf8_lossy(&b64(js(m, "data")))
        .into_owned()
        .into();
    if let Some(h) = m.get("hdrs").and_then(Value::as_str) {
        out["hdrs"] = String::from_utf8_lossy(&b64(h)).into_owned().into();
    }
    out
}

fn print_stored(stream: &str, m: &Value) {
    println!(
        "Item: {stream}#{} received {} on subject {}",
        ju(m, "seq"),
        js(m, "time"),
        js(m, "subject")
    );
    if let Some(h) = m.get("hdrs").and_then(Value::as_str) {
        let text = String::from_utf8_lossy(&b64(h)).into_owned();
        println!();
        println!("Headers:");
        for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            println!("  {line}");
        }
    }
    println!();
    println!("{}", String::from_utf8_lossy(&b64(js(m, "data"))));
    println!();
}

async fn view(
    s: &Session,
    name: &str,
    count: Option<u64>,
    since: Option<u64>,
) -> anyhow::Result<()> {
    let info = s.api(&format!("STREAM.INFO.{name}"), &Value::Null).await?;
    let st = &info["state"];
    let first = since.unwrap_or(0).max(ju(st, "first_seq"));
    let last = ju(st, "last_seq");
    let limit = count.unwrap_or(u64::MAX);
    let mut shown = 0u64;
    let mut all = Vec::new();
    let mut seq = first.max(1);
    let total = limit.min((last + 1).saturating_sub(seq));
    let pb = crate::ctl::progress::count_bar(total, "view", s.json);
    while seq <= last && shown < limit {
        pb.set_position(shown);
        match s
            .api(&format!("STREAM.MSG.GET.{name}"), &json!({ "seq": seq }))
            .await
        {
            Ok(v) => {
                let m = v.get("message").cloned().unwrap_or_default();
                if s.json {
                    all.push(decoded(&m));
                } else {
                    pb.suspend(|| print_stored(name, &m));
                }
                shown += 1;
            }
            // A deleted or expired sequence: skip it.
            Err(e)
                if e.downcast_ref::<JsApiError>()
                    .is_some_and(|j| j.err_code == 10037) => {}
            Err(e) => return Err(e),
        }
        seq += 1;
    }
    pb.finish_and_clear();
    if s.json {
        return s.print_json(&Value::Array(all));
    }
    if shown == 0 {
        println!("No messages in stream {name}");
    }
    Ok(())
}
