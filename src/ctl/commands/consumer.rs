//! `sealctl consumer`: create, inspect and drain JetStream consumers.
//!
//! Management is the `$JS.API.CONSUMER.*` JSON API (see [`super::conn`] for why); `next`
//! issues a raw pull request (`CONSUMER.MSG.NEXT`) and acknowledges each message with a
//! confirmed `+ACK`, so when it prints "Acknowledged" the server has recorded the ack — the
//! same guarantee an operator draining a stuck queue needs.

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use futures::StreamExt as _;
use serde_json::{json, Value};

use super::conn::Session;
use super::util::{
    fmt_duration_ns, fmt_limit, headers_json, ji, js, ju, parse_ack_subject, parse_duration_ns,
    print_headers, print_section, print_table, show_payload,
};
use crate::ctl::args::{ConsumerCmd, ConsumerConfigArgs};

/// Runs a `consumer` command.
///
/// # Errors
/// Server errors ([`super::conn::JsApiError`]), bad flags.
pub async fn run(s: &Session, cmd: ConsumerCmd) -> anyhow::Result<()> {
    match cmd {
        ConsumerCmd::Add { stream, name, cfg } => add(s, &stream, name, &cfg).await,
        ConsumerCmd::Info { stream, name } => {
            let v = s
                .api(&format!("CONSUMER.INFO.{stream}.{name}"), &Value::Null)
                .await?;
            show_info(s, &v, "")
        }
        ConsumerCmd::Ls { stream } => {
            let list = s
                .api_paged(
                    &format!("CONSUMER.LIST.{stream}"),
                    "consumers",
                    &Value::Null,
                )
                .await?;
            if s.json {
                return s.print_json(&Value::Array(list));
            }
            if list.is_empty() {
                println!("No consumers defined on stream {stream}");
                return Ok(());
            }
            let mut rows: Vec<Vec<String>> = list
                .iter()
                .map(|i| {
                    let c = &i["config"];
                    vec![
                        js(i, "name").to_owned(),
                        if c.get("deliver_subject").is_some() {
                            "push".into()
                        } else {
                            "pull".into()
                        },
                        ju(i, "num_pending").to_string(),
                        ju(i, "num_ack_pending").to_string(),
                        ju(i, "num_redelivered").to_string(),
                        ju(&i["delivered"], "stream_seq").to_string(),
                        ju(&i["ack_floor"], "stream_seq").to_string(),
                    ]
                })
                .collect();
            rows.sort();
            print_table(
                &[
                    "Name",
                    "Mode",
                    "Pending",
                    "Ack pending",
                    "Redelivered",
                    "Last delivered",
                    "Ack floor",
                ],
                &rows,
            );
            Ok(())
        }
        ConsumerCmd::Rm { stream, name, .. } => {
            let v = s
                .api(&format!("CONSUMER.DELETE.{stream}.{name}"), &json!({}))
                .await?;
            if s.json {
                return s.print_json(&v);
            }
            println!("Deleted consumer {stream} > {name}");
            Ok(())
        }
        ConsumerCmd::Next {
            stream,
            name,
            count,
            no_ack,
        } => next(s, &stream, &name, count, no_ack).await,
    }
}

async fn add(
    s: &Session,
    stream: &str,
    name: Option<String>,
    a: &ConsumerConfigArgs,
) -> anyhow::Result<()> {
    let mut c = match &a.config {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
            let v: Value = serde_json::from_str(&text)
                .with_context(|| format!("{}: not JSON", p.display()))?;
            // Accept a bare config or a whole create request / consumer info.
            v.get("config").cloned().unwrap_or(v)
        }
        None => json!({}),
    };
    let name = name
        .or_else(|| a.durable.clone())
        .or_else(|| {
            c.get("durable_name")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .or_else(|| c.get("name").and_then(Value::as_str).map(str::to_owned))
        .ok_or_else(|| anyhow!("a consumer name is required (NAME or --durable)"))?;
    if let Some(d) = &a.durable {
        if *d != name {
            bail!("--durable {d} does not match the consumer name {name}");
        }
    }
    c["durable_name"] = name.clone().into();
    c["name"] = name.clone().into();
    let ack = a
        .ack
        .clone()
        .or_else(|| {
            c.get("ack_policy")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "explicit".into());
    let ack = ack.to_ascii_lowercase();
    if !["explicit", "all", "none"].contains(&ack.as_str()) {
        bail!("--ack {ack:?}: expected explicit, all or none");
    }
    c["ack_policy"] = ack.into();
    if let Some(subj) = &a.deliver {
        c["deliver_subject"] = subj.clone().into();
    }
    if let Some(g) = &a.deliver_group {
        c["deliver_group"] = g.clone().into();
    }
    if let Some(w) = &a.ack_wait {
        c["ack_wait"] = parse_duration_ns(w).context("--ack-wait")?.into();
    }
    if let Some(m) = a.max_deliver {
        c["max_deliver"] = m.into();
    }
    if let Some(f) = &a.filter {
        c["filter_subject"] = f.clone().into();
    }
    if let Some(p) = &a.deliver_policy {
        let p = match p.to_ascii_lowercase().replace('-', "_").as_str() {
            "start_seq" | "by_start_seq" | "sequence" => "by_start_sequence".to_owned(),
            "subject" | "last_subject" => "last_per_subject".to_owned(),
            "start_time" => "by_start_time".to_owned(),
            other => other.to_owned(),
        };
        let ok = [
            "all",
            "last",
            "new",
            "by_start_sequence",
            "by_start_time",
            "last_per_subject",
        ];
        if !ok.contains(&p.as_str()) {
            bail!("--deliver-policy {p:?}: expected one of {}", ok.join(", "));
        }
        c["deliver_policy"] = p.into();
    }
    if let Some(seq) = a.start_seq {
        c["opt_start_seq"] = seq.into();
        if a.deliver_policy.is_none() {
            c["deliver_policy"] = "by_start_sequence".into();
        }
    }
    if c.get("deliver_policy").is_none() {
        c["deliver_policy"] = "all".into();
    }
    if !a.backoff.is_empty() {
        let mut b = Vec::new();
        for d in &a.backoff {
            b.push(Value::from(parse_duration_ns(d).context("--backoff")?));
        }
        c["backoff"] = b.into();
    }
    if let Some(m) = a.max_ack_pending {
        c["max_ack_pending"] = m.into();
    }
    if let Some(d) = &a.description {
        c["description"] = d.clone().into();
    }
    let req = json!({ "stream_name": stream, "config": c, "action": "create" });
    let v = s
        .api(&format!("CONSUMER.CREATE.{stream}.{name}"), &req)
        .await?;
    show_info(s, &v, &format!("Consumer {stream} > {name} created"))
}

fn show_info(s: &Session, v: &Value, headline: &str) -> anyhow::Result<()> {
    if s.json {
        return s.print_json(v);
    }
    let c = &v["config"];
    if !headline.is_empty() {
        println!("{headline}\n");
    }
    println!(
        "Information for consumer {} > {} (created {})\n",
        js(v, "stream_name"),
        js(v, "name"),
        js(v, "created")
    );
    let mut cfg: Vec<(&str, String)> = Vec::new();
    if !js(c, "durable_name").is_empty() {
        cfg.push(("Durable name", js(c, "durable_name").to_owned()));
    }
    if !js(c, "description").is_empty() {
        cfg.push(("Description", js(c, "description").to_owned()));
    }
    match c.get("deliver_subject").and_then(Value::as_str) {
        Some(d) => {
            cfg.push(("Delivery subject", d.to_owned()));
            if !js(c, "deliver_group").is_empty() {
                cfg.push(("Deliver group", js(c, "deliver_group").to_owned()));
            }
        }
        None => cfg.push(("Pull mode", "true".into())),
    }
    if !js(c, "filter_subject").is_empty() {
        cfg.push(("Filter subject", js(c, "filter_subject").to_owned()));
    }
    let mut dp = js(c, "deliver_policy").to_owned();
    if dp == "by_start_sequence" {
        dp = format!("{dp} {}", ju(c, "opt_start_seq"));
    }
    cfg.push(("Deliver policy", dp));
    cfg.push(("Ack policy", js(c, "ack_policy").to_owned()));
    if js(c, "ack_policy") != "none" {
        cfg.push(("Ack wait", fmt_duration_ns(ji(c, "ack_wait"))));
    }
    cfg.push(("Max deliver", fmt_limit(ji(c, "max_deliver"))));
    if let Some(b) = c.get("backoff").and_then(Value::as_array) {
        let list: Vec<String> = b
            .iter()
            .map(|x| fmt_duration_ns(x.as_i64().unwrap_or(0)))
            .collect();
        cfg.push(("Backoff", list.join(", ")));
    }
    cfg.push(("Max ack pending", fmt_limit(ji(c, "max_ack_pending"))));
    if c.get("deliver_subject").is_none() {
        cfg.push(("Max waiting pulls", fmt_limit(ji(c, "max_waiting"))));
    }
    print_section("Configuration", &cfg);
    let d = &v["delivered"];
    let f = &v["ack_floor"];
    print_section(
        "State",
        &[
            (
                "Last delivered",
                format!(
                    "consumer seq {} stream seq {}",
                    ju(d, "consumer_seq"),
                    ju(d, "stream_seq")
                ),
            ),
            (
                "Ack floor",
                format!(
                    "consumer seq {} stream seq {}",
                    ju(f, "consumer_seq"),
                    ju(f, "stream_seq")
                ),
            ),
            (
                "Unprocessed (num_pending)",
                ju(v, "num_pending").to_string(),
            ),
            (
                "Outstanding acks (num_ack_pending)",
                ju(v, "num_ack_pending").to_string(),
            ),
            (
                "Redelivered (num_redelivered)",
                ju(v, "num_redelivered").to_string(),
            ),
            (
                "Waiting pulls (num_waiting)",
                ju(v, "num_waiting").to_string(),
            ),
        ],
    );
    Ok(())
}

/// Pulls up to `batch` messages: first whatever is available right now (`no_wait`), and only
/// when that is nothing, waits up to `wait` for the first ones. 409 statuses (consumer
/// deleted, push based, limits) are errors.
///
/// # Errors
/// Unknown consumer, 409 statuses, connection errors.
pub(crate) async fn fetch(
    s: &Session,
    stream: &str,
    consumer: &str,
    batch: u64,
    wait: Duration,
) -> anyhow::Result<Vec<async_nats::Message>> {
    let now = pull(
        s,
        stream,
        consumer,
        json!({ "batch": batch, "no_wait": true }),
        batch,
        Duration::from_secs(2),
    )
    .await?;
    if !now.is_empty() || wait.is_zero() {
        return Ok(now);
    }
    let expires = i64::try_from(wait.as_nanos()).unwrap_or(i64::MAX);
    pull(
        s,
        stream,
        consumer,
        json!({ "batch": batch, "expires": expires }),
        batch,
        wait + Duration::from_secs(1),
    )
    .await
}

async fn pull(
    s: &Session,
    stream: &str,
    consumer: &str,
    req: Value,
    batch: u64,
    limit: Duration,
) -> anyhow::Result<Vec<async_nats::Message>> {
    let inbox = s.client.new_inbox();
    let mut sub = s.client.subscribe(inbox.clone()).await?;
    s.client
        .publish_with_reply(
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
            inbox,
            serde_json::to_vec(&req)?.into(),
        )
        .await?;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    while (out.len() as u64) < batch {
        let m = match tokio::time::timeout_at(deadline, sub.next()).await {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) => break,
        };
        if let Some(status) = m.status {
            match status.as_u16() {
                404 | 408 => break,
                100 => continue,
                503 => bail!("no responders: consumer {stream} > {consumer} does not exist"),
                code => bail!(
                    "pull request failed: {code} {}",
                    m.description.as_deref().unwrap_or("")
                ),
            }
        }
        out.push(m);
    }
    let _ = sub.unsubscribe().await;
    Ok(out)
}

/// Acknowledges a delivery and waits for the server to confirm it.
///
/// # Errors
/// No confirmation within the timeout.
pub(crate) async fn ack(s: &Session, m: &async_nats::Message) -> anyhow::Result<()> {
    let Some(reply) = &m.reply else {
        bail!("message has no ack subject");
    };
    s.request(reply.as_str(), None, bytes::Bytes::from_static(b"+ACK"))
        .await
        .context("ack")?;
    Ok(())
}

/// Prints one JetStream delivery (or its JSON form).
pub(crate) fn print_delivery(json_out: bool, m: &async_nats::Message, acked: bool) {
    let meta = m
        .reply
        .as_ref()
        .and_then(|r| parse_ack_subject(r.as_str()))
        .unwrap_or_default();
    if json_out {
        let v = json!({
            "subject": m.subject.as_str(),
            "stream_seq": meta.stream_seq,
            "consumer_seq": meta.consumer_seq,
            "delivered": meta.delivered,
            "pending": meta.pending,
            "headers": headers_json(m.headers.as_ref()),
            "data": show_payload(&m.payload),
            "acked": acked,
        });
        println!("{v}");
        return;
    }
    println!(
        "[#{}] {} (stream seq {}, delivered {}, pending {})",
        meta.consumer_seq, m.subject, meta.stream_seq, meta.delivered, meta.pending
    );
    print_headers(m.headers.as_ref());
    println!("{}", show_payload(&m.payload));
    if acked {
        println!("Acknowledged stream seq {}", meta.stream_seq);
    }
    println!();
}

async fn next(
    s: &Session,
    stream: &str,
    name: &str,
    count: u64,
    no_ack: bool,
) -> anyhow::Result<()> {
    // Asking first gives the server's own error (10059/10014) instead of a bare no-responders,
    // and tells us whether acks are expected at all.
    let info = s
        .api(&format!("CONSUMER.INFO.{stream}.{name}"), &Value::Null)
        .await?;
    if info["config"].get("deliver_subject").is_some() {
        bail!(
            "consumer {stream} > {name} is push based; use `sealctl sub` on its delivery subject"
        );
    }
    let needs_ack = js(&info["config"], "ack_policy") != "none" && !no_ack;
    let msgs = fetch(s, stream, name, count, s.timeout).await?;
    if msgs.is_empty() {
        bail!(
            "no message available from {stream} > {name} within {:?}",
            s.timeout
        );
    }
    for m in &msgs {
        if needs_ack {
            ack(s, m).await?;
        }
        print_delivery(s.json, m, needs_ack);
    }
    Ok(())
}
