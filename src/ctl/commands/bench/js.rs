//! JetStream and key-value scenarios of `sealctl bench`.
//!
//! Why raw protocol rather than a JetStream client library: the tool must cost the same for
//! every server it measures and must not hide server behaviour behind client retries, so the
//! JetStream API is spoken directly — JSON requests on `$JS.API.…`, PubAcks parsed from the
//! reply, pull requests on `CONSUMER.MSG.NEXT`, acks published to each message's reply subject.
//! Every scenario works unchanged against nats-server, which is how sealstream is compared.
//!
//! One engine ([`Flow`]) drives every request/reply stream: it keeps up to `window` requests
//! in flight on one connection, each with its own reply subject
//! `_INBOX.bench.<nonce>.<n>` under one wildcard subscription, so a reply is matched to its
//! send time (latency) even if replies were reordered. Window 1 is the "await every ack"
//! case. After the blocking read it drains whatever else is already buffered before writing
//! again, so one write carries many publishes when acks arrive in bursts.
//!
//! Scenarios (each recreates its stream first, so runs are independent, and deletes it after):
//! - `js-pub-sync`: `--pubs` publishers, each awaiting every PubAck (`--window` ignored);
//! - `js-pub-window`: the same with `--window` publishes in flight per publisher;
//! - `js-consume`: windowed preload, then a durable pull consumer (explicit ack) drained with
//!   `MSG.NEXT` requests of `--batch`, two requests kept outstanding, `+ACK` per message
//!   (fire-and-forget, or `--ack-sync`: one ack at a time, each awaiting the server's empty
//!   reply); the consumer's `num_ack_pending`/`num_pending` must then reach 0;
//! - `kv-put`: bucket `bench` (stream `KV_bench`, KV settings), `--msgs` puts cycling over
//!   `--keys` keys with `--window` in flight;
//! - `kv-get`: `--keys` puts, then `--msgs` `DIRECT.GET`s of random keys, `--inflight` at a time.
//!
//! A PubAck counts as an error if it carries `"error"` (or no `"seq"`), or arrives as a status
//! (e.g. 503 no responders); a get counts as an error on any status reply (404) or a payload of
//! the wrong size. Errors are counted and reported, never fatal, so a half-working server still
//! yields a number; a server without JetStream fails fast with a clear message instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::{Bytes, BytesMut};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::meter::Meter;
use super::{cpu_seconds, percentiles, BenchReport, Dial, RawConn};
use crate::ctl::args::{BenchArgs, BenchScenario, BenchStorage};
use crate::proto::encode::encode_client_op;
use crate::proto::headers::HeaderMap;
use crate::proto::{ClientOp, ServerOp};

/// How long an API request may take before the scenario fails.
const API_TIMEOUT: Duration = Duration::from_secs(10);
/// Subjects of the stream the js-* scenarios create.
const JS_SUBJECTS: &str = "bench.js.>";
/// Name of the durable pull consumer of `js-consume`.
const CONSUMER: &str = "bench";
/// Pull request expiry (ns): a request not filled by then ends with a 408.
const PULL_EXPIRES_NS: u64 = 5_000_000_000;
/// KV bucket name of the kv-* scenarios.
const BUCKET: &str = "bench";

/// A random token so that two bench processes never share inbox subjects.
fn nonce() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// A status reply (`NATS/1.0 503` …): its code, or `None` for a plain header block.
fn status_of(headers: Option<&Bytes>) -> Option<u16> {
    let h = headers?;
    // `NATS/1.0 <3 digits>`: a space right after the version means a status follows.
    if h.get(8) != Some(&b' ') {
        return None;
    }
    HeaderMap::parse(h).ok().and_then(|m| m.status)
}

/// `503 …` / `404 Message Not Found`, for error notes.
fn status_text(headers: Option<&Bytes>) -> String {
    match headers.map(|h| HeaderMap::parse(h)) {
        Some(Ok(m)) => format!(
            "status {} {}",
            m.status.unwrap_or(0),
            m.description.unwrap_or_default()
        ),
        _ => "malformed status reply".to_owned(),
    }
}

/// A connection used for JetStream API calls (stream/consumer create, info, delete).
struct Admin {
    c: RawConn,
    prefix: String,
    next: u64,
}

impl Admin {
    async fn connect(dial: &Dial) -> anyhow::Result<Self> {
        let mut c = RawConn::connect(dial, "bench-admin").await?;
        let prefix = format!("_INBOX.bench.{}", nonce());
        c.send(&ClientOp::Sub {
            subject: Bytes::from(format!("{prefix}.*")),
            queue: None,
            sid: Bytes::from_static(b"1"),
        })
        .await?;
        c.send(&ClientOp::Ping).await?;
        c.until_pong().await?;
        Ok(Admin { c, prefix, next: 0 })
    }

    /// One API request; the JSON reply. A status reply (no responders) is an error.
    async fn api(&mut self, subject: &str, body: &Value) -> anyhow::Result<Value> {
        self.next += 1;
        let reply = format!("{}.{}", self.prefix, self.next);
        let payload = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(serde_json::to_vec(body)?)
        };
        self.c
            .send(&ClientOp::Pub {
                subject: Bytes::from(subject.to_owned()),
                reply: Some(Bytes::from(reply.clone())),
                headers: None,
                payload,
            })
            .await?;
        let deadline = Instant::now() + API_TIMEOUT;
        loop {
            let op = tokio::time::timeout_at(deadline.into(), self.c.next())
                .await
                .map_err(|_| anyhow!("no reply to {subject} within {API_TIMEOUT:?}"))??;
            match op {
                ServerOp::Msg {
                    subject: s,
                    headers,
                    payload,
                    ..
                } if s == reply.as_bytes() => {
                    if let Some(code) = status_of(headers.as_ref()) {
                        if code == 503 {
                            bail!(
                                "{subject}: no responders (503): this server does not serve the JetStream API"
                            );
                        }
                        bail!("{subject}: {}", status_text(headers.as_ref()));
                    }
                    return serde_json::from_slice(&payload)
                        .with_context(|| format!("{subject}: reply is not JSON"));
                }
                ServerOp::Ping => self.c.wr.write_all(b"PONG\r\n").await?,
                _ => {}
            }
        }
    }

    /// An API request that must succeed.
    async fn api_ok(&mut self, subject: &str, body: &Value) -> anyhow::Result<Value> {
        let v = self.api(subject, body).await?;
        if let Some(e) = api_error(&v) {
            bail!("{subject}: {e}");
        }
        Ok(v)
    }

    /// Deletes stream `name` if it exists, then creates it with `config`.
    async fn recreate_stream(&mut self, name: &str, config: &Value) -> anyhow::Result<()> {
        let del = self
            .api(&format!("$JS.API.STREAM.DELETE.{name}"), &Value::Null)
            .await?;
        if let Some(e) = api_error(&del) {
            // 10059: stream not found — nothing to delete.
            if del["error"]["err_code"].as_u64() != Some(10059) {
                bail!("delete stream {name}: {e}");
            }
        }
        self.api_ok(&format!("$JS.API.STREAM.CREATE.{name}"), config)
            .await
            .with_context(|| format!("create stream {name}"))?;
        Ok(())
    }

    /// Best-effort cleanup at the end of a scenario.
    async fn delete_stream(&mut self, name: &str) {
        if let Err(e) = self
            .api(&format!("$JS.API.STREAM.DELETE.{name}"), &Value::Null)
            .await
        {
            eprintln!("sealctl bench: could not delete stream {name}: {e:#}");
        }
    }
}

/// `code/err_code description` of an API error reply.
fn api_error(v: &Value) -> Option<String> {
    let e = v.get("error")?;
    Some(format!(
        "{}/{} {}",
        e["code"].as_u64().unwrap_or(0),
        e["err_code"].as_u64().unwrap_or(0),
        e["description"].as_str().unwrap_or("")
    ))
}

fn storage_name(s: BenchStorage) -> &'static str {
    match s {
        BenchStorage::File => "file",
        BenchStorage::Memory => "memory",
    }
}

/// How a [`Flow`] judges a reply.
#[derive(Clone, Copy)]
enum ReplyKind {
    /// A PubAck: JSON with `"seq"` and no `"error"`.
    PubAck,
    /// A DIRECT.GET reply: the stored message (headers, no status) with a payload of this size.
    DirectGet(usize),
}

/// Picks the subject of request `n`.
type SubjectFn = Box<dyn FnMut(u64) -> Bytes + Send>;

/// Requests on one connection with up to `window` in flight (see the module docs).
struct Flow {
    c: RawConn,
    prefix: String,
    subject: SubjectFn,
    payload: Bytes,
    window: usize,
    kind: ReplyKind,
    /// Bumped per reply (the bench [`Meter`]'s counter once [`run_flows`] starts it).
    done: Arc<std::sync::atomic::AtomicU64>,
}

/// What a [`Flow`] measured.
#[derive(Default)]
struct FlowResult {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    samples: Vec<f64>,
}

impl FlowResult {
    fn merge(&mut self, o: FlowResult) {
        self.ok += o.ok;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.samples.extend(o.samples);
    }
}

impl Flow {
    async fn connect(
        dial: &Dial,
        name: &str,
        subject: SubjectFn,
        payload: Bytes,
        window: usize,
        kind: ReplyKind,
    ) -> anyhow::Result<Self> {
        let mut c = RawConn::connect(dial, name).await?;
        let prefix = format!("_INBOX.bench.{}", nonce());
        c.send(&ClientOp::Sub {
            subject: Bytes::from(format!("{prefix}.*")),
            queue: None,
            sid: Bytes::from_static(b"1"),
        })
        .await?;
        c.send(&ClientOp::Ping).await?;
        c.until_pong().await?;
        Ok(Flow {
            c,
            prefix,
            subject,
            payload,
            window: window.max(1),
            kind,
            done: Arc::default(),
        })
    }

    /// Sends `n` requests, keeping at most `window` unanswered; every reply is checked.
    async fn run(mut self, n: u64) -> anyhow::Result<FlowResult> {
        let w = self.window as u64;
        let mut sent_at = vec![Instant::now(); self.window];
        let mut r = FlowResult {
            samples: Vec::with_capacity(n.min(10_000_000) as usize),
            ..FlowResult::default()
        };
        let mut sent = 0u64;
        let mut done = 0u64;
        let mut out = BytesMut::with_capacity(64 * 1024);
        while done < n {
            out.clear();
            let now = Instant::now();
            while sent < n && sent - done < w {
                let op = ClientOp::Pub {
                    subject: (self.subject)(sent),
                    reply: Some(Bytes::from(format!("{}.{sent}", self.prefix))),
                    headers: None,
                    payload: self.payload.clone(),
                };
                encode_client_op(&mut out, &op);
                if let Some(slot) = sent_at.get_mut((sent % w) as usize) {
                    *slot = now;
                }
                sent += 1;
            }
            if !out.is_empty() {
                self.c.wr.write_all(&out).await?;
            }
            let first = self.c.next().await?;
            let mut op = Some(first);
            while let Some(o) = op {
                match o {
                    ServerOp::Msg {
                        subject,
                        headers,
                        payload,
                        ..
                    } => {
                        let Some(seq) = reply_seq(&subject, &self.prefix) else {
                            op = self.c.try_next()?;
                            continue;
                        };
                        if let Some(t0) = sent_at.get((seq % w) as usize) {
                            r.samples.push(t0.elapsed().as_secs_f64() * 1e6);
                        }
                        done += 1;
                        self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        match check_reply(self.kind, headers.as_ref(), &payload) {
                            Ok(()) => r.ok += 1,
                            Err(e) => {
                                r.errors += 1;
                                if r.first_error.is_none() {
                                    r.first_error = Some(e);
                                }
                            }
                        }
                    }
                    ServerOp::Ping => self.c.wr.write_all(b"PONG\r\n").await?,
                    _ => {}
                }
                op = self.c.try_next()?;
            }
        }
        Ok(r)
    }
}

/// `n` from `<prefix>.<n>`.
fn reply_seq(subject: &[u8], prefix: &str) -> Option<u64> {
    let rest = subject
        .strip_prefix(prefix.as_bytes())?
        .strip_prefix(b".")?;
    std::str::from_utf8(rest).ok()?.parse().ok()
}

/// `Ok` for a positive reply of `kind`, else why not.
fn check_reply(kind: ReplyKind, headers: Option<&Bytes>, payload: &[u8]) -> Result<(), String> {
    if status_of(headers).is_some() {
        return Err(status_text(headers));
    }
    match kind {
        ReplyKind::PubAck => {
            let has = |needle: &[u8]| memchr::memmem::find(payload, needle).is_some();
            if has(b"\"error\"") || !has(b"\"seq\"") {
                Err(String::from_utf8_lossy(payload).into_owned())
            } else {
                Ok(())
            }
        }
        ReplyKind::DirectGet(size) => {
            if headers.is_none() {
                Err("direct get reply without headers".to_owned())
            } else if payload.len() != size {
                Err(format!(
                    "direct get returned {} bytes, expected {size}",
                    payload.len()
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Server CPU seconds now, if `--server-pid` was given.
fn cpu_now(a: &BenchArgs) -> Option<f64> {
    a.server_pid.and_then(cpu_seconds)
}

/// Server CPU µs per operation between two readings.
fn cpu_per_op(c0: Option<f64>, c1: Option<f64>, ops: u64) -> Option<f64> {
    match (c0, c1) {
        (Some(c0), Some(c1)) if ops > 0 => Some((c1 - c0) * 1e6 / ops as f64),
        _ => None,
    }
}

/// Runs a JetStream scenario.
///
/// # Errors
/// Connection failures, a server without JetStream, failed API calls, or a stalled run.
pub async fn run(dial: &Dial, a: &BenchArgs, m: &Meter) -> anyhow::Result<BenchReport> {
    match a.scenario {
        BenchScenario::JsPubSync | BenchScenario::JsPubWindow => js_pub(dial, a, m).await,
        BenchScenario::JsConsume => js_consume(dial, a, m).await,
        BenchScenario::KvPut | BenchScenario::KvGet => kv(dial, a, m).await,
        BenchScenario::Core | BenchScenario::Connect => {
            bail!("core and connect scenarios are not JetStream scenarios")
        }
    }
}

fn js_stream_config(a: &BenchArgs) -> Value {
    json!({
        "name": a.stream,
        "subjects": [JS_SUBJECTS],
        "retention": "limits",
        "storage": storage_name(a.storage),
        "discard": "old",
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "num_replicas": a.replicas,
    })
}

/// One flow per publisher, all connected before the clock starts; their merged result and
/// the wall time from the first publish to the last ack. Starts a `label` phase of `m`.
async fn run_flows(
    flows: Vec<Flow>,
    per_flow: u64,
    m: &Meter,
    label: &str,
) -> anyhow::Result<(FlowResult, f64)> {
    m.begin(label, per_flow * flows.len() as u64);
    let start = Instant::now();
    let handles: Vec<_> = flows
        .into_iter()
        .map(|mut f| {
            f.done = m.counter();
            tokio::spawn(f.run(per_flow))
        })
        .collect();
    let mut total = FlowResult::default();
    for h in handles {
        total.merge(
            h.await
                .map_err(|e| anyhow!("publisher task failed: {e}"))??,
        );
    }
    Ok((total, start.elapsed().as_secs_f64()))
}

/// A publisher of `size`-byte messages on one fixed subject.
async fn js_publisher(
    dial: &Dial,
    a: &BenchArgs,
    name: &str,
    subject: String,
    window: usize,
) -> anyhow::Result<Flow> {
    let subject = Bytes::from(subject);
    Flow::connect(
        dial,
        name,
        Box::new(move |_| subject.clone()),
        Bytes::from(vec![b'x'; a.size]),
        window,
        ReplyKind::PubAck,
    )
    .await
}

/// Where the JetStream scenarios' publishers and consumer connect instead of `--server`:
/// `--sub-server` when given (another cluster member), once it reaches the stream.
async fn traffic_dial(a: &BenchArgs) -> anyhow::Result<Option<Dial>> {
    let Some(url) = &a.sub_server else {
        return Ok(None);
    };
    let via = Dial::new(url, a)?;
    let mut admin = Admin::connect(&via).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let info = format!("$JS.API.STREAM.INFO.{}", a.stream);
    while let Err(e) = admin.api_ok(&info, &Value::Null).await {
        if Instant::now() > deadline {
            bail!("{url} does not reach stream {}: {e}", a.stream);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Some(via))
}

async fn js_pub(dial: &Dial, a: &BenchArgs, m: &Meter) -> anyhow::Result<BenchReport> {
    let sync = a.scenario == BenchScenario::JsPubSync;
    let window = if sync { 1 } else { a.window.max(1) };
    let pubs = a.pubs.max(1);
    let per_pub = a.msgs() / pubs as u64;
    let total = per_pub * pubs as u64;
    let mut admin = Admin::connect(dial).await?;
    admin
        .recreate_stream(&a.stream, &js_stream_config(a))
        .await?;
    let via = traffic_dial(a).await?;
    let mut flows = Vec::with_capacity(pubs);
    for i in 0..pubs {
        flows.push(
            js_publisher(
                via.as_ref().unwrap_or(dial),
                a,
                &format!("bench-js-pub-{i}"),
                format!("bench.js.p{i}"),
                window,
            )
            .await?,
        );
    }
    let c0 = cpu_now(a);
    let (r, secs) = run_flows(flows, per_pub, m, "publish").await?;
    let c1 = cpu_now(a);
    let stored = stream_msgs(&mut admin, &a.stream).await;
    admin.delete_stream(&a.stream).await;
    let rate = r.ok as f64 / secs.max(1e-9);
    let mut note = r.first_error.clone();
    if let Ok(n) = stored {
        if n != r.ok {
            note.get_or_insert_with(|| format!("stream holds {n} messages, {} acked", r.ok));
        }
    }
    let label = if sync {
        format!("js-pub-sync, {pubs} pub{}", plural(pubs))
    } else {
        format!("js-pub-window {window}, {pubs} pub{}", plural(pubs))
    };
    Ok(BenchReport {
        scenario: label,
        size: a.size,
        msgs: total,
        delivered: r.ok,
        seconds: secs,
        pub_msgs_per_sec: rate,
        delivered_msgs_per_sec: rate,
        server_cpu_us_per_msg: cpu_per_op(c0, c1, total),
        latency_us: Some(percentiles(r.samples)),
        errors: Some(r.errors),
        note,
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `state.messages` of a stream.
async fn stream_msgs(admin: &mut Admin, stream: &str) -> anyhow::Result<u64> {
    let info = admin
        .api_ok(&format!("$JS.API.STREAM.INFO.{stream}"), &Value::Null)
        .await?;
    info["state"]["messages"]
        .as_u64()
        .ok_or_else(|| anyhow!("stream info without state.messages"))
}

async fn js_consume(dial: &Dial, a: &BenchArgs, m: &Meter) -> anyhow::Result<BenchReport> {
    let n = a.msgs();
    let mut admin = Admin::connect(dial).await?;
    admin
        .recreate_stream(&a.stream, &js_stream_config(a))
        .await?;
    let via = traffic_dial(a).await?;
    let dial = via.as_ref().unwrap_or(dial);
    let preload = js_publisher(
        dial,
        a,
        "bench-js-preload",
        "bench.js.c".to_owned(),
        a.window,
    )
    .await?;
    let (pre, pre_secs) = run_flows(vec![preload], n, m, "preload").await?;
    if pre.errors > 0 {
        bail!(
            "preload: {} of {n} publishes failed ({})",
            pre.errors,
            pre.first_error.unwrap_or_default()
        );
    }
    let max_ack_pending = (a.batch as u64 * 4).max(20_000);
    let create = json!({
        "stream_name": a.stream,
        "config": {
            "durable_name": CONSUMER,
            "name": CONSUMER,
            "deliver_policy": "all",
            "ack_policy": "explicit",
            // Generous, so a slow run never sees redeliveries that would skew the count.
            "ack_wait": 120_000_000_000u64,
            "max_deliver": -1,
            "max_ack_pending": max_ack_pending,
            "max_waiting": 512,
            "replay_policy": "instant",
        },
        "action": "create",
    });
    admin
        .api_ok(
            &format!("$JS.API.CONSUMER.CREATE.{}.{CONSUMER}", a.stream),
            &create,
        )
        .await
        .context("create pull consumer")?;

    let mut c = RawConn::connect(dial, "bench-js-consumer").await?;
    let prefix = format!("_INBOX.bench.{}", nonce());
    let pull_prefix = format!("{prefix}.pull");
    let ack_inbox = Bytes::from(format!("{prefix}.ack"));
    c.send(&ClientOp::Sub {
        subject: Bytes::from(format!("{pull_prefix}.*")),
        queue: None,
        sid: Bytes::from_static(b"1"),
    })
    .await?;
    c.send(&ClientOp::Sub {
        subject: ack_inbox.clone(),
        queue: None,
        sid: Bytes::from_static(b"2"),
    })
    .await?;
    c.send(&ClientOp::Ping).await?;
    c.until_pong().await?;

    let next_subject = Bytes::from(format!("$JS.API.CONSUMER.MSG.NEXT.{}.{CONSUMER}", a.stream));
    let batch = a.batch.max(1) as u64;
    let ack_body = Bytes::from_static(b"+ACK");
    let mut asked = 0u64; // messages asked for by live requests, plus those delivered
    let mut requests = 0u64;
    let mut received = 0u64;
    let mut acked = 0u64;
    let mut errors = 0u64;
    let mut note: Option<String> = None;
    let mut to_ack: std::collections::VecDeque<Bytes> = std::collections::VecDeque::new();
    let mut awaiting_ack = false;
    let mut out = BytesMut::with_capacity(64 * 1024);

    let c0 = cpu_now(a);
    m.begin("consume", n);
    let start = Instant::now();
    while acked < n {
        // Keep two requests' worth outstanding so the server never idles between batches.
        while asked < n && asked - received < 2 * batch {
            let b = batch.min(n - asked);
            requests += 1;
            let body = format!("{{\"batch\":{b},\"expires\":{PULL_EXPIRES_NS}}}");
            encode_client_op(
                &mut out,
                &ClientOp::Pub {
                    subject: next_subject.clone(),
                    reply: Some(Bytes::from(format!("{pull_prefix}.{requests}"))),
                    headers: None,
                    payload: Bytes::from(body),
                },
            );
            asked += b;
        }
        if a.ack_sync && !awaiting_ack {
            if let Some(reply) = to_ack.pop_front() {
                encode_client_op(
                    &mut out,
                    &ClientOp::Pub {
                        subject: reply,
                        reply: Some(ack_inbox.clone()),
                        headers: None,
                        payload: ack_body.clone(),
                    },
                );
                awaiting_ack = true;
            }
        }
        if !out.is_empty() {
            c.wr.write_all(&out).await?;
            out.clear();
        }
        let mut op = Some(c.next().await?);
        while let Some(o) = op {
            match o {
                ServerOp::Msg { sid, .. } if sid.as_ref() == b"2" => {
                    awaiting_ack = false;
                    acked += 1;
                }
                ServerOp::Msg {
                    headers,
                    reply,
                    payload,
                    ..
                } => {
                    if let Some(code) = status_of(headers.as_ref()) {
                        match code {
                            // Request ended short: what it did not deliver is no longer asked for.
                            404 | 408 => {
                                let left = headers
                                    .as_ref()
                                    .and_then(|h| HeaderMap::parse(h).ok())
                                    .and_then(|m| m.get("Nats-Pending-Messages")?.parse().ok())
                                    .unwrap_or(0u64);
                                asked = asked.saturating_sub(left).max(received);
                            }
                            100 => {}
                            _ => bail!("pull request failed: {}", status_text(headers.as_ref())),
                        }
                    } else if let Some(reply) = reply {
                        received += 1;
                        m.inc();
                        if payload.len() != a.size {
                            errors += 1;
                            note.get_or_insert_with(|| {
                                format!("delivered {} bytes, expected {}", payload.len(), a.size)
                            });
                        }
                        if a.ack_sync {
                            to_ack.push_back(reply);
                        } else {
                            encode_client_op(
                                &mut out,
                                &ClientOp::Pub {
                                    subject: reply,
                                    reply: None,
                                    headers: None,
                                    payload: ack_body.clone(),
                                },
                            );
                            acked += 1;
                        }
                    } else {
                        errors += 1;
                        note.get_or_insert_with(|| {
                            "delivered message without an ack subject".to_owned()
                        });
                    }
                }
                ServerOp::Ping => out.extend_from_slice(b"PONG\r\n"),
                _ => {}
            }
            op = c.try_next()?;
        }
    }
    if !out.is_empty() {
        c.wr.write_all(&out).await?;
        out.clear();
    }
    // The server has read every ack once it answers this PING.
    c.send(&ClientOp::Ping).await?;
    c.until_pong().await?;
    let secs = start.elapsed().as_secs_f64();
    let c1 = cpu_now(a);

    // Acks are applied asynchronously: give the consumer a moment to settle, then check it.
    let info_subject = format!("$JS.API.CONSUMER.INFO.{}.{CONSUMER}", a.stream);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (ack_pending, pending) = loop {
        let info = admin.api_ok(&info_subject, &Value::Null).await?;
        let ap = info["num_ack_pending"].as_u64().unwrap_or(u64::MAX);
        let p = info["num_pending"].as_u64().unwrap_or(u64::MAX);
        if (ap == 0 && p == 0) || Instant::now() > deadline {
            break (ap, p);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if ack_pending != 0 || pending != 0 {
        errors += ack_pending.saturating_add(pending).min(n);
        note.get_or_insert_with(|| {
            format!("consumer left num_ack_pending {ack_pending}, num_pending {pending}")
        });
    }
    admin.delete_stream(&a.stream).await;
    let rate = received as f64 / secs.max(1e-9);
    Ok(BenchReport {
        scenario: format!(
            "js-consume batch {batch}{}",
            if a.ack_sync { ", ack-sync" } else { "" }
        ),
        size: a.size,
        msgs: n,
        delivered: received,
        seconds: secs,
        pub_msgs_per_sec: pre.ok as f64 / pre_secs.max(1e-9),
        delivered_msgs_per_sec: rate,
        server_cpu_us_per_msg: cpu_per_op(c0, c1, received),
        latency_us: None,
        errors: Some(errors),
        note,
    })
}

async fn kv(dial: &Dial, a: &BenchArgs, m: &Meter) -> anyhow::Result<BenchReport> {
    let keys = a.keys.max(1);
    let stream = format!("KV_{BUCKET}");
    let config = json!({
        "name": stream,
        "subjects": [format!("$KV.{BUCKET}.>")],
        "retention": "limits",
        "storage": storage_name(a.storage),
        "max_msgs_per_subject": 1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msg_size": -1,
        "discard": "new",
        "allow_direct": true,
        "allow_rollup_hdrs": true,
        "deny_delete": true,
        "num_replicas": a.replicas,
    });
    let mut admin = Admin::connect(dial).await?;
    admin.recreate_stream(&stream, &config).await?;
    let key_subjects: Arc<Vec<Bytes>> = Arc::new(
        (0..keys)
            .map(|i| Bytes::from(format!("$KV.{BUCKET}.k{i}")))
            .collect(),
    );
    let puts = if a.scenario == BenchScenario::KvPut {
        a.msgs()
    } else {
        keys
    };
    let ks = Arc::clone(&key_subjects);
    let putter = Flow::connect(
        dial,
        "bench-kv-put",
        Box::new(move |i| ks.get((i % keys) as usize).cloned().unwrap_or_default()),
        Bytes::from(vec![b'v'; a.size]),
        a.window,
        ReplyKind::PubAck,
    )
    .await?;
    let c0 = cpu_now(a);
    let put_label = if a.scenario == BenchScenario::KvPut {
        "put"
    } else {
        "preload"
    };
    let (put, put_secs) = run_flows(vec![putter], puts, m, put_label).await?;
    let c1 = cpu_now(a);
    let put_rate = put.ok as f64 / put_secs.max(1e-9);
    if a.scenario == BenchScenario::KvPut {
        admin.delete_stream(&stream).await;
        return Ok(BenchReport {
            scenario: format!("kv-put window {}, {keys} keys", a.window.max(1)),
            size: a.size,
            msgs: puts,
            delivered: put.ok,
            seconds: put_secs,
            pub_msgs_per_sec: put_rate,
            delivered_msgs_per_sec: put_rate,
            server_cpu_us_per_msg: cpu_per_op(c0, c1, puts),
            latency_us: Some(percentiles(put.samples)),
            errors: Some(put.errors),
            note: put.first_error,
        });
    }
    if put.errors > 0 {
        bail!(
            "kv preload: {} of {keys} puts failed ({})",
            put.errors,
            put.first_error.unwrap_or_default()
        );
    }
    let gets = a.msgs();
    let get_prefix = format!("$JS.API.DIRECT.GET.{stream}.$KV.{BUCKET}.k");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5ea1);
    let getter = Flow::connect(
        dial,
        "bench-kv-get",
        Box::new(move |_| Bytes::from(format!("{get_prefix}{}", rng.gen_range(0..keys)))),
        Bytes::new(),
        a.inflight,
        ReplyKind::DirectGet(a.size),
    )
    .await?;
    let c0 = cpu_now(a);
    let (get, get_secs) = run_flows(vec![getter], gets, m, "get").await?;
    let c1 = cpu_now(a);
    admin.delete_stream(&stream).await;
    let rate = get.ok as f64 / get_secs.max(1e-9);
    Ok(BenchReport {
        scenario: format!("kv-get inflight {}, {keys} keys", a.inflight.max(1)),
        size: a.size,
        msgs: gets,
        delivered: get.ok,
        seconds: get_secs,
        pub_msgs_per_sec: put_rate,
        delivered_msgs_per_sec: rate,
        server_cpu_us_per_msg: cpu_per_op(c0, c1, gets),
        latency_us: Some(percentiles(get.samples)),
        errors: Some(get.errors),
        note: get.first_error,
    })
}

/// The table for a JetStream report: the measured rate, errors, and (consume, kv-get) the
/// rate of the publishing phase that prepared it.
pub(super) fn print_table(r: &BenchReport) {
    println!(
        "{:<36} {:>8} {:>10} {:>12} {:>14} {:>8} {:>12}",
        "scenario", "size", "msgs", "msgs/s", "preload msgs/s", "errors", "cpu µs/msg"
    );
    let cpu = r
        .server_cpu_us_per_msg
        .map_or("-".to_owned(), |c| format!("{c:.2}"));
    let pre = if (r.pub_msgs_per_sec - r.delivered_msgs_per_sec).abs() > f64::EPSILON {
        format!("{:.0}", r.pub_msgs_per_sec)
    } else {
        "-".to_owned()
    };
    println!(
        "{:<36} {:>8} {:>10} {:>12.0} {:>14} {:>8} {:>12}",
        r.scenario,
        r.size,
        r.msgs,
        r.delivered_msgs_per_sec,
        pre,
        r.errors.unwrap_or(0),
        cpu
    );
    if let Some(l) = &r.latency_us {
        println!(
            "latency µs: p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            l.p50, l.p90, l.p99, l.p99_9, l.max
        );
    }
    if let Some(n) = &r.note {
        println!("note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_seq_parses_the_last_token() {
        assert_eq!(
            reply_seq(b"_INBOX.bench.ab.17", "_INBOX.bench.ab"),
            Some(17)
        );
        assert_eq!(reply_seq(b"_INBOX.bench.ab", "_INBOX.bench.ab"), None);
        assert_eq!(reply_seq(b"_INBOX.other.1", "_INBOX.bench.ab"), None);
    }

    #[test]
    fn puback_checks() {
        assert!(check_reply(ReplyKind::PubAck, None, br#"{"stream":"S","seq":3}"#).is_ok());
        let err = br#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}"#;
        assert!(check_reply(ReplyKind::PubAck, None, err).is_err());
        let no_resp = Bytes::from_static(b"NATS/1.0 503\r\n\r\n");
        assert!(check_reply(ReplyKind::PubAck, Some(&no_resp), b"").is_err());
    }

    #[test]
    fn direct_get_checks() {
        let ok = Bytes::from_static(b"NATS/1.0\r\nNats-Sequence: 1\r\n\r\n");
        assert!(check_reply(ReplyKind::DirectGet(2), Some(&ok), b"v1").is_ok());
        assert!(check_reply(ReplyKind::DirectGet(3), Some(&ok), b"v1").is_err());
        let nf = Bytes::from_static(b"NATS/1.0 404 Message Not Found\r\n\r\n");
        assert!(check_reply(ReplyKind::DirectGet(0), Some(&nf), b"").is_err());
        assert_eq!(status_of(Some(&nf)), Some(404));
        assert_eq!(status_of(Some(&ok)), None);
    }
}
