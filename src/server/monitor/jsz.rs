//! `/jsz`, `/accountz` and Prometheus `/metrics`.
//!
//! Field names follow nats-server's `/jsz` and `/accountz` so dashboards built for it keep
//! working. Tenants' names (accounts, streams, consumers) are shown only when the server
//! serves a single JetStream account, or when the operator sets `monitor_tenant_details:
//! true`: the monitoring port has no authentication of its own, and a stream name can say a
//! lot about a tenant. Totals are always shown.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::jetstream::api::types::{ConsumerInfo, StreamInfo, StreamState};
use crate::jetstream::config::StorageType;
use crate::server::jetstream::{AccountJs, Cmd, JetStream, Published, StreamRef};
use crate::server::Shared;
use crate::timefmt::rfc3339_nanos;

fn now_string() -> String {
    rfc3339_nanos(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0),
    )
}

/// A per-consumer gauge: its name, how to read it off the consumer's info, its help text.
type ConsumerFigure = (&'static str, fn(&ConsumerInfo) -> u64, &'static str);

/// One stream's figures, from the snapshot it published.
struct StreamFigures {
    account: String,
    name: String,
    storage: StorageType,
    snapshot: std::sync::Arc<Published>,
    max_msgs: i64,
    max_bytes: i64,
}

impl StreamFigures {
    fn info(&self) -> &StreamInfo {
        &self.snapshot.info
    }

    fn state(&self) -> &StreamState {
        &self.snapshot.info.state
    }
}

/// How long a scrape waits for streams to publish fresh snapshots. A stream busy for longer
/// (a slow fsync) is shown as of its previous snapshot; the scrape never waits on a lock.
const FRESH_SNAPSHOT_WAIT: Duration = Duration::from_millis(500);

/// Every stream's figures. Asks each stream thread for a fresh snapshot and waits at most
/// [`FRESH_SNAPSHOT_WAIT`] for the answers; then reads the published snapshots.
fn collect(js: &JetStream) -> Vec<StreamFigures> {
    let streams: Vec<(String, std::sync::Arc<StreamRef>)> = js
        .accounts()
        .iter()
        .flat_map(|a| {
            let name = a.name.clone();
            a.streams.all().into_iter().map(move |s| (name.clone(), s))
        })
        .collect();
    let (tx, rx) = std::sync::mpsc::sync_channel(streams.len().max(1));
    let mut asked = 0usize;
    for (_, s) in &streams {
        // A stream whose queue is full is busy: it shows its last snapshot.
        if s.tx.try_send(Cmd::Snapshot(tx.clone())).is_ok() {
            asked += 1;
        }
    }
    drop(tx);
    let deadline = Instant::now() + FRESH_SNAPSHOT_WAIT;
    for _ in 0..asked {
        let left = deadline.saturating_duration_since(Instant::now());
        if rx.recv_timeout(left).is_err() {
            break;
        }
    }
    let mut out: Vec<StreamFigures> = streams
        .into_iter()
        .map(|(account, s)| StreamFigures {
            account,
            name: s.cfg.name.clone(),
            storage: s.cfg.storage,
            snapshot: s.snapshot.load(),
            max_msgs: s.cfg.max_msgs,
            max_bytes: s.cfg.max_bytes,
        })
        .collect();
    out.sort_by(|a, b| (&a.account, &a.name).cmp(&(&b.account, &b.name)));
    out
}

fn account_usage(acc: &AccountJs) -> (u64, u64, usize, u64) {
    (
        acc.used.memory.load(Ordering::Relaxed),
        acc.used.file.load(Ordering::Relaxed),
        acc.streams.len(),
        acc.used.consumers.load(Ordering::Relaxed),
    )
}

/// `/jsz`.
pub(crate) fn jsz(shared: &Shared, q: &HashMap<String, String>) -> Value {
    let flag = |k: &str| {
        q.get(k)
            .is_some_and(|v| v.is_empty() || v == "true" || v == "1")
    };
    let Some(js) = shared.jetstream.get() else {
        return json!({"server_id": shared.server_id, "now": now_string(), "disabled": true,
            "config": {}, "memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0,
            "accounts": 0, "ha_assets": 0, "api": {"total": 0, "errors": 0}});
    };
    let want_consumers = flag("consumers");
    let want_streams = flag("streams") || want_consumers;
    let want_accounts = flag("accounts") || want_streams || q.contains_key("acc");
    let figures = collect(js);
    let (mut memory, mut storage, mut messages, mut bytes, mut consumers) = (0, 0, 0, 0, 0);
    for f in &figures {
        let b = f.state().bytes;
        match f.storage {
            StorageType::Memory => memory += b,
            StorageType::File => storage += b,
        }
        messages += f.state().messages;
        bytes += b;
        consumers += f.state().consumer_count as u64;
    }
    let accounts = js.accounts();
    let enabled: Vec<_> = accounts.iter().filter(|a| a.limits().is_some()).collect();
    let (total, errors) = enabled.iter().fold((0, 0), |(t, e), a| {
        (
            t + a.api_total.load(Ordering::Relaxed),
            e + a.api_errors.load(Ordering::Relaxed),
        )
    });
    let mut v = json!({
        "server_id": shared.server_id,
        "now": now_string(),
        "config": {
            "max_memory": js.max_memory,
            "max_storage": js.max_store,
            "store_dir": shared.opts.jetstream.store_dir.as_ref().map(|d| d.join("jetstream").display().to_string()),
            "sync_interval": js.sync_interval.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            "sync_always": js.sync_interval.is_none(),
            "compress_ok": false,
        },
        "memory": memory,
        "storage": storage,
        "reserved_memory": 0,
        "reserved_storage": 0,
        "accounts": enabled.len(),
        "ha_assets": 0,
        "api": {"level": crate::jetstream::API_LEVEL, "total": total, "errors": errors},
        "streams": figures.len(),
        "consumers": consumers,
        "messages": messages,
        "bytes": bytes,
    });
    if let Some(c) = js.cluster() {
        v["meta_cluster"] = c.meta_cluster();
    }
    if !want_accounts {
        return v;
    }
    if !super::tenant_details_allowed(shared) {
        v["tenant_details"] = json!(super::TENANT_DETAILS_HIDDEN);
        return v;
    }
    let only = q.get("acc");
    let details: Vec<Value> = enabled
        .iter()
        .filter(|a| only.is_none_or(|o| *o == a.name))
        .map(|a| {
            let (mem, file, n, c) = account_usage(a);
            let mut d = json!({
                "name": a.name, "id": a.name,
                "memory": mem, "storage": file, "reserved_memory": 0, "reserved_storage": 0,
                "accounts": 1, "ha_assets": 0,
                "api": {"total": a.api_total.load(Ordering::Relaxed), "errors": a.api_errors.load(Ordering::Relaxed)},
                "streams": n, "consumers": c,
            });
            if want_streams {
                let sd: Vec<Value> = figures
                    .iter()
                    .filter(|f| f.account == a.name)
                    .map(|f| {
                        let mut s = json!({
                            "name": f.name,
                            "created": f.info().created,
                            "cluster": f.info().cluster,
                            "state": f.state(),
                        });
                        if flag("config") {
                            s["config"] = json!(f.info().config);
                        }
                        if want_consumers {
                            s["consumer_detail"] = json!(f.snapshot.consumers);
                        }
                        s
                    })
                    .collect();
                d["stream_detail"] = json!(sd);
            }
            d
        })
        .collect();
    v["account_details"] = json!(details);
    v
}

/// `/accountz`.
pub(crate) fn accountz(shared: &Shared, q: &HashMap<String, String>) -> Value {
    let system = shared.system.as_ref().map(|s| s.account.name.clone());
    let mut names: Vec<String> = shared.accounts.names();
    names.sort();
    let allowed = super::tenant_details_allowed(shared);
    let mut v = json!({
        "server_id": shared.server_id,
        "now": now_string(),
        "system_account": system,
    });
    if !allowed {
        v["accounts_count"] = json!(names.len());
        v["tenant_details"] = json!(super::TENANT_DETAILS_HIDDEN);
        return v;
    }
    if let Some(acc) = q.get("acc") {
        let Some(a) = shared.accounts.get(acc) else {
            v["error"] = json!(format!("account {acc:?} not found"));
            return v;
        };
        let mut d = json!({
            "account_name": a.name,
            "is_system": Some(&a.name) == system.as_ref(),
            "subscriptions": a.subscription_count(),
            "jetstream_enabled": false,
        });
        if let Some(js) = shared.jetstream.get().and_then(|js| js.account(acc)) {
            if js.limits().is_some() {
                let (mem, file, n, c) = account_usage(&js);
                d["jetstream_enabled"] = json!(true);
                d["jetstream"] =
                    json!({"memory": mem, "storage": file, "streams": n, "consumers": c});
            }
        }
        v["account_detail"] = d;
        return v;
    }
    v["accounts"] = json!(names);
    v
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The live audit's progress (`$SYS.REQ.SERVER.<id>.AUDIT`, `$JS.API.ACCOUNT.AUDIT`) and the
/// data-key re-sealer's (`$SYS.REQ.SERVER.<id>.REKEY`).
fn audit_metrics(o: &mut String, js: &crate::server::jetstream::JetStream) {
    let a = &js.auditor;
    let s = a.status();
    metric(
        o,
        "sealstream_audit_running",
        "gauge",
        "1 while a live audit of the store runs.",
    );
    let _ = writeln!(o, "sealstream_audit_running {}", u8::from(s.running));
    metric(
        o,
        "sealstream_audit_phase_bytes",
        "gauge",
        "Bytes the running audit read in its current phase (done) and will read in it (total).",
    );
    for (which, v) in [("done", s.phase_done), ("total", s.phase_total)] {
        let _ = writeln!(
            o,
            "sealstream_audit_phase_bytes{{phase=\"{}\",which=\"{which}\"}} {v}",
            s.phase
        );
    }
    metric(
        o,
        "sealstream_audit_read_bytes",
        "gauge",
        "Bytes the running audit read so far, every phase (the last audit's once it finished).",
    );
    let read = if s.running {
        s.bytes_read
    } else {
        a.last_bytes.load(Ordering::Relaxed)
    };
    let _ = writeln!(o, "sealstream_audit_read_bytes {read}");
    metric(
        o,
        "sealstream_audits_total",
        "counter",
        "Live audits finished since the server started.",
    );
    let _ = writeln!(
        o,
        "sealstream_audits_total {}",
        a.finished.load(Ordering::Relaxed)
    );
    metric(
        o,
        "sealstream_audit_last_exit_code",
        "gauge",
        "The last finished live audit's exit code (0 clean, 1 integrity, 2 leak, 3 key, 4 layout; 0 before any).",
    );
    let _ = writeln!(
        o,
        "sealstream_audit_last_exit_code {}",
        a.last_exit_code.load(Ordering::Relaxed)
    );
    let r = &js.resealer;
    for (name, kind, help, v) in [
        (
            "sealstream_reseal_running",
            "gauge",
            "1 while streams are being re-sealed under new data keys.",
            u64::from(r.running()),
        ),
        (
            "sealstream_reseal_pending_streams",
            "gauge",
            "Streams the running re-sealing pass has still to do.",
            r.pending.load(Ordering::Relaxed),
        ),
        (
            "sealstream_resealed_streams_total",
            "counter",
            "Streams re-sealed under a new data key since the server started.",
            r.streams.load(Ordering::Relaxed),
        ),
        (
            "sealstream_resealed_bytes_total",
            "counter",
            "Segment bytes written re-sealing streams since the server started.",
            r.bytes.load(Ordering::Relaxed),
        ),
    ] {
        metric(o, name, kind, help);
        let _ = writeln!(o, "{name} {v}");
    }
}

/// Prometheus text exposition (`/metrics`).
pub(crate) fn metrics(shared: &Shared) -> String {
    let st = &shared.stats;
    let mut o = String::with_capacity(4096);
    let simple: [(&str, &str, &str, u64); 16] = [
        (
            "sealstream_js_source_reads_total",
            "counter",
            "Reads of this server's streams answered for mirrors and sources on other servers.",
            crate::server::jetstream::origin_read::ANSWERED.load(Ordering::Relaxed),
        ),
        (
            "sealstream_js_source_reads_waiting",
            "gauge",
            "Such reads waiting for their stream's next message (up to 1 s each, at most 256 per stream).",
            crate::server::jetstream::origin_read::WAITING.load(Ordering::Relaxed),
        ),
        (
            "sealstream_js_reads_waiting",
            "gauge",
            "Replicated STREAM.MSG.GET calls waiting for a read index (bounded at 4096; more go through the group's log).",
            crate::server::jetstream::READS_IN_FLIGHT.load(Ordering::Relaxed) as u64,
        ),
        (
            "sealstream_jetstream_dedupe_ids",
            "gauge",
            "Nats-Msg-Id values held in the streams' duplicate windows (each stream bounded at 1048576).",
            crate::jetstream::dedupe::HELD.load(Ordering::Relaxed),
        ),
        (
            "sealstream_jetstream_dedupe_early_evictions_total",
            "counter",
            "Ids a full duplicate window forgot before duplicate_window had passed.",
            crate::jetstream::dedupe::EARLY_EVICTIONS.load(Ordering::Relaxed),
        ),
        (
            "sealstream_jetstream_intake_refused_total",
            "counter",
            "Commands refused because a stream's or an API queue was at its hard capacity (publishers ignored backpressure).",
            crate::server::backpressure::INTAKE_REFUSED.load(Ordering::Relaxed),
        ),
        (
            "sealstream_jetstream_intake_waits_total",
            "counter",
            "Times a publishing connection stopped reading until a stream's intake (bounded at 16 MiB) had room.",
            crate::server::backpressure::INTAKE_WAITS.load(Ordering::Relaxed),
        ),
        (
            "sealstream_producer_stalls_total",
            "counter",
            "Read batches after which a publisher waited (at most 50 ms) for a subscriber above its high-water mark (half of max_pending, at most 1 MiB) to drain.",
            crate::server::backpressure::PRODUCER_STALLS.load(Ordering::Relaxed),
        ),
        (
            "sealstream_connections",
            "gauge",
            "Client connections open now.",
            shared.num_clients() as u64,
        ),
        (
            "sealstream_connections_total",
            "counter",
            "Client connections accepted since start.",
            st.total_connections.load(Ordering::Relaxed),
        ),
        (
            "sealstream_in_msgs_total",
            "counter",
            "Messages received from clients.",
            st.in_msgs.load(Ordering::Relaxed),
        ),
        (
            "sealstream_out_msgs_total",
            "counter",
            "Messages delivered to clients.",
            st.out_msgs.load(Ordering::Relaxed),
        ),
        (
            "sealstream_in_bytes_total",
            "counter",
            "Payload bytes received from clients.",
            st.in_bytes.load(Ordering::Relaxed),
        ),
        (
            "sealstream_out_bytes_total",
            "counter",
            "Payload bytes delivered to clients.",
            st.out_bytes.load(Ordering::Relaxed),
        ),
        (
            "sealstream_slow_consumers_total",
            "counter",
            "Connections closed as slow consumers.",
            st.slow_consumers.load(Ordering::Relaxed),
        ),
        (
            "sealstream_auth_failures_total",
            "counter",
            "Failed client authentications.",
            st.auth_failures.load(Ordering::Relaxed),
        ),
    ];
    for (name, kind, help, v) in simple {
        metric(&mut o, name, kind, help);
        let _ = writeln!(o, "{name} {v}");
    }
    metric(
        &mut o,
        "sealstream_subscriptions",
        "gauge",
        "Subscriptions over all accounts.",
    );
    let _ = writeln!(
        o,
        "sealstream_subscriptions {}",
        shared.accounts.subscription_count()
    );

    let sm = crate::store::metrics::METRICS.snapshot();
    metric(
        &mut o,
        "sealstream_store_fsync_seconds",
        "histogram",
        "Time each store fsync took.",
    );
    let buckets = crate::store::metrics::FSYNC_BUCKETS_US;
    for (i, c) in sm.fsync_cumulative.iter().enumerate() {
        let le = buckets
            .get(i)
            .map_or("+Inf".to_owned(), |us| format!("{}", *us as f64 / 1e6));
        let _ = writeln!(
            o,
            "sealstream_store_fsync_seconds_bucket{{le=\"{le}\"}} {c}"
        );
    }
    let count = sm.fsync_cumulative.last().copied().unwrap_or(0);
    let _ = writeln!(
        o,
        "sealstream_store_fsync_seconds_sum {}",
        sm.fsync_sum_seconds
    );
    let _ = writeln!(o, "sealstream_store_fsync_seconds_count {count}");
    metric(
        &mut o,
        "sealstream_store_fsync_failures_total",
        "counter",
        "Store fsyncs that failed (the stream then refuses writes).",
    );
    let _ = writeln!(
        o,
        "sealstream_store_fsync_failures_total {}",
        sm.fsync_failures
    );
    metric(
        &mut o,
        "sealstream_store_seal_failures_total",
        "counter",
        "Stored blocks that failed authentication when read (tampering or corruption).",
    );
    let _ = writeln!(
        o,
        "sealstream_store_seal_failures_total {}",
        sm.auth_failures
    );

    let Some(js) = shared.jetstream.get() else {
        metric(
            &mut o,
            "sealstream_jetstream_enabled",
            "gauge",
            "1 when JetStream is on.",
        );
        let _ = writeln!(o, "sealstream_jetstream_enabled 0");
        return o;
    };
    metric(
        &mut o,
        "sealstream_jetstream_enabled",
        "gauge",
        "1 when JetStream is on.",
    );
    let _ = writeln!(o, "sealstream_jetstream_enabled 1");
    audit_metrics(&mut o, js);
    let details = super::tenant_details_allowed(shared);
    let figures = collect(js);
    let (mut file, mut mem, mut msgs, mut consumers) = (0, 0, 0, 0);
    for f in &figures {
        let b = f.state().bytes;
        match f.storage {
            StorageType::File => file += b,
            StorageType::Memory => mem += b,
        }
        msgs += f.state().messages;
        consumers += f.state().consumer_count as u64;
    }
    metric(
        &mut o,
        "sealstream_jetstream_streams",
        "gauge",
        "Streams over all accounts.",
    );
    let _ = writeln!(o, "sealstream_jetstream_streams {}", figures.len());
    metric(
        &mut o,
        "sealstream_jetstream_intake_pending_bytes",
        "gauge",
        "Bytes queued for stream threads (each stream bounded at 16 MiB; publishers wait beyond).",
    );
    let intake: usize = js
        .accounts()
        .iter()
        .flat_map(|a| a.streams.all())
        .map(|s| s.budget.pending())
        .sum();
    let _ = writeln!(o, "sealstream_jetstream_intake_pending_bytes {intake}");
    metric(
        &mut o,
        "sealstream_jetstream_api_pending_bytes",
        "gauge",
        "Bytes of API calls queued for the accounts' API threads (each account bounded at 4 MiB; publishers wait beyond).",
    );
    let api: usize = js.accounts().iter().map(|a| a.api_pending()).sum();
    let _ = writeln!(o, "sealstream_jetstream_api_pending_bytes {api}");
    let (mut ack_pending, mut waiting) = (0, 0);
    for c in figures.iter().flat_map(|f| f.snapshot.consumers.iter()) {
        ack_pending += c.num_ack_pending;
        waiting += c.num_waiting;
    }
    metric(
        &mut o,
        "sealstream_jetstream_ack_pending",
        "gauge",
        "Messages delivered and not yet acknowledged, over all consumers (each bounded by its max_ack_pending, and by 1000000 when that is unlimited).",
    );
    let _ = writeln!(o, "sealstream_jetstream_ack_pending {ack_pending}");
    metric(
        &mut o,
        "sealstream_jetstream_pull_requests_waiting",
        "gauge",
        "Pull requests waiting for messages, over all consumers (each bounded by its max_waiting).",
    );
    let _ = writeln!(o, "sealstream_jetstream_pull_requests_waiting {waiting}");
    metric(
        &mut o,
        "sealstream_jetstream_consumers",
        "gauge",
        "Consumers over all accounts.",
    );
    let _ = writeln!(o, "sealstream_jetstream_consumers {consumers}");
    metric(
        &mut o,
        "sealstream_jetstream_messages",
        "gauge",
        "Messages stored over all streams.",
    );
    let _ = writeln!(o, "sealstream_jetstream_messages {msgs}");
    metric(
        &mut o,
        "sealstream_jetstream_storage_bytes",
        "gauge",
        "Bytes stored, by storage type.",
    );
    let _ = writeln!(
        o,
        "sealstream_jetstream_storage_bytes{{type=\"file\"}} {file}"
    );
    let _ = writeln!(
        o,
        "sealstream_jetstream_storage_bytes{{type=\"memory\"}} {mem}"
    );
    metric(
        &mut o,
        "sealstream_jetstream_storage_limit_bytes",
        "gauge",
        "Server storage limits (max_file_store, max_memory_store); -1 = none.",
    );
    let _ = writeln!(
        o,
        "sealstream_jetstream_storage_limit_bytes{{type=\"file\"}} {}",
        js.max_store
    );
    let _ = writeln!(
        o,
        "sealstream_jetstream_storage_limit_bytes{{type=\"memory\"}} {}",
        js.max_memory
    );
    if !details {
        return o;
    }
    metric(
        &mut o,
        "sealstream_stream_messages",
        "gauge",
        "Messages in the stream.",
    );
    for f in &figures {
        let _ = writeln!(
            o,
            "sealstream_stream_messages{{account=\"{}\",stream=\"{}\"}} {}",
            label(&f.account),
            label(&f.name),
            f.state().messages
        );
    }
    metric(
        &mut o,
        "sealstream_stream_bytes",
        "gauge",
        "Bytes in the stream.",
    );
    for f in &figures {
        let _ = writeln!(
            o,
            "sealstream_stream_bytes{{account=\"{}\",stream=\"{}\"}} {}",
            label(&f.account),
            label(&f.name),
            f.state().bytes
        );
    }
    metric(
        &mut o,
        "sealstream_stream_limit_usage_ratio",
        "gauge",
        "Share of a stream limit in use (streams with that limit only).",
    );
    for f in &figures {
        let (m, b) = (f.state().messages, f.state().bytes);
        if f.max_msgs > 0 {
            let _ = writeln!(o, "sealstream_stream_limit_usage_ratio{{account=\"{}\",stream=\"{}\",limit=\"max_msgs\"}} {}", label(&f.account), label(&f.name), m as f64 / f.max_msgs as f64);
        }
        if f.max_bytes > 0 {
            let _ = writeln!(o, "sealstream_stream_limit_usage_ratio{{account=\"{}\",stream=\"{}\",limit=\"max_bytes\"}} {}", label(&f.account), label(&f.name), b as f64 / f.max_bytes as f64);
        }
    }
    let figure: [ConsumerFigure; 4] = [
        (
            "sealstream_consumer_num_pending",
            |c| c.num_pending,
            "Matching messages not yet delivered.",
        ),
        (
            "sealstream_consumer_num_ack_pending",
            |c| c.num_ack_pending as u64,
            "Delivered messages waiting for an ack.",
        ),
        (
            "sealstream_consumer_num_redelivered",
            |c| c.num_redelivered as u64,
            "Pending messages delivered more than once.",
        ),
        (
            "sealstream_consumer_num_waiting",
            |c| c.num_waiting as u64,
            "Queued pull requests.",
        ),
    ];
    for (name, key, help) in figure {
        metric(&mut o, name, "gauge", help);
        for f in &figures {
            for c in &f.snapshot.consumers {
                let _ = writeln!(
                    o,
                    "{name}{{account=\"{}\",stream=\"{}\",consumer=\"{}\"}} {}",
                    label(&f.account),
                    label(&f.name),
                    label(&c.name),
                    key(c)
                );
            }
        }
    }
    o
}
