//! `sealctl kv`: Key-Value buckets from the command line.
//!
//! The bucket semantics (delete markers, history, watchers that switch from stored to live
//! values) live in the client, so these commands use async-nats' KV store rather than
//! re-implementing them; bucket listings and status come from the stream API
//! (`KV_<bucket>` streams) so `--json` shows the server's own view.

use anyhow::{anyhow, bail, Context as _};
use async_nats::jetstream::{self, kv};
use futures::StreamExt as _;
use serde_json::{json, Value};

use super::conn::Session;
use super::util::{
    fmt_bytes, fmt_duration_ns, fmt_limit_bytes, ji, js, ju, parse_duration, parse_size,
    print_section, print_table, show_payload,
};
use crate::ctl::args::KvCmd;

fn op_name(op: &kv::Operation) -> &'static str {
    match op {
        kv::Operation::Put => "PUT",
        kv::Operation::Delete => "DEL",
        kv::Operation::Purge => "PURGE",
    }
}

fn ts(t: &time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn entry_json(e: &kv::Entry) -> Value {
    json!({
        "bucket": e.bucket, "key": e.key, "revision": e.revision,
        "operation": op_name(&e.operation), "created": ts(&e.created),
        "value": show_payload(&e.value),
    })
}

async fn store(s: &Session, bucket: &str) -> anyhow::Result<kv::Store> {
    let js = jetstream::new(s.client.clone());
    js.get_key_value(bucket)
        .await
        .map_err(|e| anyhow!("bucket {bucket}: {e}"))
}

/// Runs a `kv` command.
///
/// # Errors
/// Unknown bucket or key, server errors.
pub async fn run(s: &Session, cmd: KvCmd) -> anyhow::Result<()> {
    match cmd {
        KvCmd::Add {
            bucket,
            history,
            ttl,
            max_value_size,
            max_bucket_size,
            storage,
            description,
        } => {
            let storage = match storage.as_deref().map(str::to_ascii_lowercase).as_deref() {
                None | Some("file") => jetstream::stream::StorageType::File,
                Some("memory") => jetstream::stream::StorageType::Memory,
                Some(o) => bail!("--storage {o:?}: expected file or memory"),
            };
            let cfg = kv::Config {
                bucket: bucket.clone(),
                description: description.unwrap_or_default(),
                history,
                max_age: match &ttl {
                    Some(t) => parse_duration(t).context("--ttl")?,
                    None => std::time::Duration::ZERO,
                },
                max_value_size: match &max_value_size {
                    Some(v) => i32::try_from(parse_size(v).context("--max-value-size")?)
                        .map_err(|_| anyhow!("--max-value-size too large"))?,
                    None => -1,
                },
                max_bytes: match &max_bucket_size {
                    Some(v) => parse_size(v).context("--max-bucket-size")?,
                    None => -1,
                },
                storage,
                num_replicas: 1,
                ..Default::default()
            };
            jetstream::new(s.client.clone())
                .create_key_value(cfg)
                .await
                .map_err(|e| anyhow!("create bucket {bucket}: {e}"))?;
            info(s, &bucket, &format!("Bucket {bucket} created")).await
        }
        KvCmd::Put { bucket, key, value } => {
            let st = store(s, &bucket).await?;
            let rev = st
                .put(&key, value.clone().into())
                .await
                .map_err(|e| anyhow!("put {bucket} > {key}: {e}"))?;
            if s.json {
                println!(
                    "{}",
                    json!({ "bucket": bucket, "key": key, "revision": rev })
                );
            } else {
                println!("{value}");
            }
            Ok(())
        }
        KvCmd::Get { bucket, key, raw } => {
            let st = store(s, &bucket).await?;
            let e = st
                .entry(key.clone())
                .await
                .map_err(|e| anyhow!("get {bucket} > {key}: {e}"))?;
            let Some(e) = e.filter(|e| e.operation == kv::Operation::Put) else {
                bail!("key not found: {bucket} > {key}");
            };
            if s.json {
                println!("{}", entry_json(&e));
            } else if raw {
                println!("{}", show_payload(&e.value));
            } else {
                println!(
                    "{bucket} > {key} revision: {} created @ {}\n",
                    e.revision,
                    ts(&e.created)
                );
                println!("{}", show_payload(&e.value));
            }
            Ok(())
        }
        KvCmd::Del { bucket, key, .. } => {
            let st = store(s, &bucket).await?;
            st.delete(&key)
                .await
                .map_err(|e| anyhow!("delete {bucket} > {key}: {e}"))?;
            if s.json {
                println!(
                    "{}",
                    json!({ "bucket": bucket, "key": key, "deleted": true })
                );
            } else {
                println!("Deleted {bucket} > {key}");
            }
            Ok(())
        }
        KvCmd::History { bucket, key } => {
            let st = store(s, &bucket).await?;
            let mut h = st
                .history(&key)
                .await
                .map_err(|e| anyhow!("history {bucket} > {key}: {e}"))?;
            let mut entries = Vec::new();
            while let Some(e) = h.next().await {
                entries.push(e.map_err(|e| anyhow!("history {bucket} > {key}: {e}"))?);
            }
            if entries.is_empty() {
                bail!("key not found: {bucket} > {key}");
            }
            if s.json {
                let v: Vec<Value> = entries.iter().map(entry_json).collect();
                return s.print_json(&Value::Array(v));
            }
            let rows: Vec<Vec<String>> = entries
                .iter()
                .map(|e| {
                    vec![
                        e.key.clone(),
                        e.revision.to_string(),
                        op_name(&e.operation).to_owned(),
                        ts(&e.created),
                        e.value.len().to_string(),
                        show_payload(&e.value),
                    ]
                })
                .collect();
            print_table(
                &["Key", "Revision", "Op", "Created", "Length", "Value"],
                &rows,
            );
            Ok(())
        }
        KvCmd::Ls {
            bucket: Some(bucket),
        } => {
            let st = store(s, &bucket).await?;
            let mut keys = Vec::new();
            let mut k = st
                .keys()
                .await
                .map_err(|e| anyhow!("keys of {bucket}: {e}"))?;
            while let Some(key) = k.next().await {
                keys.push(key.map_err(|e| anyhow!("keys of {bucket}: {e}"))?);
            }
            keys.sort();
            if s.json {
                return s.print_json(&json!(keys));
            }
            if keys.is_empty() {
                println!("No keys in bucket {bucket}");
            }
            for k in keys {
                println!("{k}");
            }
            Ok(())
        }
        KvCmd::Ls { bucket: None } => {
            let list = s.api_paged("STREAM.LIST", "streams", &Value::Null).await?;
            let buckets: Vec<&Value> = list
                .iter()
                .filter(|i| js(&i["config"], "name").starts_with("KV_"))
                .collect();
            if s.json {
                let v: Vec<Value> = buckets.iter().map(|i| bucket_json(i)).collect();
                return s.print_json(&Value::Array(v));
            }
            if buckets.is_empty() {
                println!("No Key-Value buckets found");
                return Ok(());
            }
            let mut rows: Vec<Vec<String>> = buckets
                .iter()
                .map(|i| {
                    let b = bucket_json(i);
                    vec![
                        js(&b, "bucket").to_owned(),
                        ju(&b, "values").to_string(),
                        fmt_bytes(ju(&b, "bytes")),
                        ji(&b, "history").to_string(),
                        ttl_text(ji(&b, "ttl")),
                    ]
                })
                .collect();
            rows.sort();
            print_table(&["Bucket", "Values", "Size", "History", "TTL"], &rows);
            Ok(())
        }
        KvCmd::Info { bucket } => info(s, &bucket, "").await,
        KvCmd::Watch { bucket, key, count } => {
            let st = store(s, &bucket).await?;
            // Current values first (last per key), then changes as they happen.
            let mut w = st
                .watch_with_history(key.as_deref().unwrap_or(">"))
                .await
                .map_err(|e| anyhow!("watch {bucket}: {e}"))?;
            eprintln!("Watching {bucket} > {}", key.as_deref().unwrap_or(">"));
            let limit = count.unwrap_or(u64::MAX);
            let mut n = 0;
            while n < limit {
                let Some(e) = w.next().await else {
                    bail!("watch ended");
                };
                let e = e.map_err(|e| anyhow!("watch {bucket}: {e}"))?;
                n += 1;
                if s.json {
                    println!("{}", entry_json(&e));
                } else {
                    println!(
                        "[{}] {} {} > {}: {}",
                        ts(&e.created),
                        op_name(&e.operation),
                        e.bucket,
                        e.key,
                        show_payload(&e.value)
                    );
                }
            }
            Ok(())
        }
        KvCmd::Rm { bucket, .. } => {
            jetstream::new(s.client.clone())
                .delete_key_value(&bucket)
                .await
                .map_err(|e| anyhow!("delete bucket {bucket}: {e}"))?;
            if s.json {
                println!("{}", json!({ "bucket": bucket, "deleted": true }));
            } else {
                println!("Deleted bucket {bucket}");
            }
            Ok(())
        }
    }
}

fn ttl_text(ns: i64) -> String {
    if ns <= 0 {
        "forever".into()
    } else {
        fmt_duration_ns(ns)
    }
}

fn bucket_json(info: &Value) -> Value {
    let c = &info["config"];
    let st = &info["state"];
    json!({
        "bucket": js(c, "name").trim_start_matches("KV_"),
        "stream": js(c, "name"),
        "values": ju(st, "messages"),
        "bytes": ju(st, "bytes"),
        "history": ji(c, "max_msgs_per_subject"),
        "ttl": ji(c, "max_age"),
        "max_value_size": ji(c, "max_msg_size"),
        "max_bytes": ji(c, "max_bytes"),
        "storage": js(c, "storage"),
        "created": js(info, "created"),
    })
}

async fn info(s: &Session, bucket: &str, headline: &str) -> anyhow::Result<()> {
    let v = s
        .api(&format!("STREAM.INFO.KV_{bucket}"), &Value::Null)
        .await?;
    let b = bucket_json(&v);
    if s.json {
        return s.print_json(&b);
    }
    if !headline.is_empty() {
        println!("{headline}\n");
    }
    print_section(
        &format!("Information for bucket {bucket}"),
        &[
            ("History", ji(&b, "history").to_string()),
            ("TTL", ttl_text(ji(&b, "ttl"))),
            ("Values", ju(&b, "values").to_string()),
            ("Size", fmt_bytes(ju(&b, "bytes"))),
            ("Maximum bucket size", fmt_limit_bytes(ji(&b, "max_bytes"))),
            (
                "Maximum value size",
                fmt_limit_bytes(ji(&b, "max_value_size")),
            ),
            ("Storage", js(&b, "storage").to_owned()),
            ("Backing stream", js(&b, "stream").to_owned()),
        ],
    );
    Ok(())
}
