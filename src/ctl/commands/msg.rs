//! `sealctl pub`, `sub`, `req` and `reply`: plain messaging from the command line.
//!
//! These are the first tools an operator reaches for when checking that a subject flows end to
//! end. `pub --jetstream` waits for each PubAck (so "stored" means stored), and `sub --stream
//! --durable` consumes through a durable pull consumer with confirmed acks, resuming where the
//! last run stopped. `sub` and `reply` say "Listening on ..." on stderr once the server has the
//! subscription, so scripts know when to start publishing.

use std::time::Duration;

use anyhow::{anyhow, bail};
use futures::StreamExt as _;
use serde_json::{json, Value};

use super::conn::{JsApiError, Session};
use super::consumer::{ack, fetch, print_delivery};
use super::util::{headers_json, parse_headers, print_headers, render_template, show_payload};
use crate::ctl::args::{PubArgs, ReplyArgs, ReqArgs, SubArgs};

/// `sealctl pub`.
///
/// # Errors
/// Bad headers, connection errors, JetStream publish errors ([`JsApiError`]).
pub async fn publish(s: &Session, a: &PubArgs) -> anyhow::Result<()> {
    let headers = parse_headers(&a.headers)?;
    let pb = crate::ctl::progress::count_bar(a.count, "publish", s.json);
    for i in 1..=a.count {
        pb.inc(1);
        let body = render_template(&a.body, i, None);
        let len = body.len();
        if a.jetstream {
            let m = s
                .request(&a.subject, headers.clone(), bytes::Bytes::from(body))
                .await
                .map_err(|e| match e.downcast_ref::<super::conn::NoResponders>() {
                    Some(_) => anyhow!("no stream captures subject {} (no responders)", a.subject),
                    None => e,
                })?;
            let v: Value = serde_json::from_slice(&m.payload)
                .map_err(|_| anyhow!("not a PubAck: {}", show_payload(&m.payload)))?;
            if let Some(err) = JsApiError::from_reply(&v) {
                return Err(err.into());
            }
            if s.json {
                println!("{v}");
            } else {
                let dup = if v.get("duplicate").and_then(Value::as_bool) == Some(true) {
                    " (duplicate)"
                } else {
                    ""
                };
                pb.suspend(|| {
                    println!(
                        "Stored in stream {} sequence {}{dup}",
                        v.get("stream").and_then(Value::as_str).unwrap_or(""),
                        v.get("seq").and_then(Value::as_u64).unwrap_or(0)
                    )
                });
            }
        } else {
            match &headers {
                Some(h) => {
                    s.client
                        .publish_with_headers(a.subject.clone(), h.clone(), body.into())
                        .await?
                }
                None => s.client.publish(a.subject.clone(), body.into()).await?,
            }
            if s.json {
                println!(
                    "{}",
                    json!({ "subject": a.subject, "bytes": len, "count": i })
                );
            } else if a.count <= 10 || i == a.count {
                pb.finish_and_clear();
                println!("Published {len} bytes to {}", a.subject);
            }
        }
    }
    pb.finish_and_clear();
    if !a.jetstream {
        s.client.flush().await?;
        if !s.json && a.count > 10 {
            println!("Published {} messages to {}", a.count, a.subject);
        }
    }
    Ok(())
}

fn print_msg(json_out: bool, raw: bool, n: u64, m: &async_nats::Message) {
    if json_out {
        let v = json!({
            "subject": m.subject.as_str(),
            "reply": m.reply.as_ref().map(|r| r.as_str()),
            "headers": headers_json(m.headers.as_ref()),
            "data": show_payload(&m.payload),
        });
        println!("{v}");
        return;
    }
    if raw {
        println!("{}", show_payload(&m.payload));
        return;
    }
    println!("[#{n}] Received on \"{}\"", m.subject);
    print_headers(m.headers.as_ref());
    println!("{}", show_payload(&m.payload));
    println!();
}

/// `sealctl sub`.
///
/// # Errors
/// Connection errors; in JetStream mode, API errors.
pub async fn subscribe(s: &Session, a: &SubArgs) -> anyhow::Result<()> {
    if a.stream.is_some() || a.durable.is_some() {
        return subscribe_js(s, a).await;
    }
    let mut sub = match &a.queue {
        Some(q) => {
            s.client
                .queue_subscribe(a.subject.clone(), q.clone())
                .await?
        }
        None => s.client.subscribe(a.subject.clone()).await?,
    };
    s.client.flush().await?;
    eprintln!("Listening on {}", a.subject);
    let limit = a.count.unwrap_or(u64::MAX);
    let mut n = 0;
    while n < limit {
        let Some(m) = sub.next().await else {
            bail!("connection closed");
        };
        n += 1;
        print_msg(s.json, a.raw, n, &m);
    }
    Ok(())
}

async fn subscribe_js(s: &Session, a: &SubArgs) -> anyhow::Result<()> {
    let stream = match &a.stream {
        Some(st) => st.clone(),
        None => {
            let v = s
                .api("STREAM.NAMES", &json!({ "subject": a.subject }))
                .await?;
            let names: Vec<String> = v
                .get("streams")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            match names.as_slice() {
                [one] => one.clone(),
                [] => bail!("no stream captures {}; give --stream", a.subject),
                _ => bail!("several streams match {}; give --stream", a.subject),
            }
        }
    };
    let durable = a
        .durable
        .clone()
        .ok_or_else(|| anyhow!("--stream needs --durable NAME"))?;
    match s
        .api(&format!("CONSUMER.INFO.{stream}.{durable}"), &Value::Null)
        .await
    {
        Ok(_) => {}
        Err(e)
            if e.downcast_ref::<JsApiError>()
                .is_some_and(|j| j.err_code == 10014) =>
        {
            let mut cfg = json!({
                "durable_name": durable, "name": durable,
                "ack_policy": "explicit", "deliver_policy": "all",
            });
            if a.subject != ">" {
                cfg["filter_subject"] = a.subject.clone().into();
            }
            let req = json!({ "stream_name": stream, "config": cfg, "action": "create" });
            s.api(&format!("CONSUMER.CREATE.{stream}.{durable}"), &req)
                .await?;
        }
        Err(e) => return Err(e),
    }
    eprintln!("Listening on {} via {stream} > {durable}", a.subject);
    let limit = a.count.unwrap_or(u64::MAX);
    let mut n = 0u64;
    while n < limit {
        let batch = (limit - n).min(100);
        let msgs = fetch(s, &stream, &durable, batch, Duration::from_secs(5)).await?;
        for m in &msgs {
            ack(s, m).await?;
            n += 1;
            if a.raw && !s.json {
                println!("{}", show_payload(&m.payload));
            } else {
                print_delivery(s.json, m, true);
            }
        }
    }
    Ok(())
}

/// `sealctl req`.
///
/// # Errors
/// No responders, timeout.
pub async fn request(s: &Session, a: &ReqArgs) -> anyhow::Result<()> {
    let headers = parse_headers(&a.headers)?;
    let body = render_template(&a.body, 1, None);
    let start = std::time::Instant::now();
    let m = s
        .request(&a.subject, headers, bytes::Bytes::from(body))
        .await?;
    let rtt = start.elapsed();
    if s.json {
        let v = json!({
            "subject": m.subject.as_str(),
            "headers": headers_json(m.headers.as_ref()),
            "data": show_payload(&m.payload),
            "rtt_ms": rtt.as_secs_f64() * 1000.0,
        });
        println!("{v}");
        return Ok(());
    }
    if a.raw {
        println!("{}", show_payload(&m.payload));
        return Ok(());
    }
    println!("Received reply in {rtt:.2?}");
    print_headers(m.headers.as_ref());
    println!("{}", show_payload(&m.payload));
    Ok(())
}

/// `sealctl reply`.
///
/// # Errors
/// Connection errors.
pub async fn reply(s: &Session, a: &ReplyArgs) -> anyhow::Result<()> {
    let mut sub = match &a.queue {
        Some(q) => {
            s.client
                .queue_subscribe(a.subject.clone(), q.clone())
                .await?
        }
        None => s.client.subscribe(a.subject.clone()).await?,
    };
    s.client.flush().await?;
    eprintln!("Listening on {}", a.subject);
    let limit = a.count.unwrap_or(u64::MAX);
    let mut n = 0;
    while n < limit {
        let Some(m) = sub.next().await else {
            bail!("connection closed");
        };
        let Some(reply) = m.reply.clone() else {
            continue;
        };
        n += 1;
        let req = show_payload(&m.payload);
        let body = render_template(&a.body, n, Some(&req));
        s.client.publish(reply, body.into()).await?;
        if s.json {
            println!(
                "{}",
                json!({ "subject": m.subject.as_str(), "request": req, "count": n })
            );
        } else {
            println!("[#{n}] Received on \"{}\": {req}", m.subject);
        }
    }
    s.client.flush().await?;
    Ok(())
}
