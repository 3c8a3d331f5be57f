//! `sealctl bench`: the end-to-end load tool.
//!
//! It speaks the raw NATS protocol through our own [`proto`](crate::proto) codec (so the tool's
//! own overhead is small and identical for every server it measures) and reports:
//! - throughput: one publisher → N subscribers (fan-out) or a queue group of N, messages per
//!   second published and delivered;
//! - latency: sequential request/reply round trips, p50/p90/p99;
//! - the server's CPU time per delivered message when `--server-pid` is given, read from
//!   `/proc/<pid>/stat` before and after — steadier than msgs/s on a noisy machine.
//!
//! The publisher sends a PING after every batch and keeps at most [`PONG_WINDOW`] batches
//! unacknowledged, so it never pushes a healthy subscriber into slow-consumer territory.
//!
//! `--scenario js-*` / `kv-*` measure JetStream instead (see [`js`]): the same raw connection,
//! the JetStream API spoken as JSON requests, so the numbers compare servers, not client libraries.
//!
//! Every scenario bumps a [`meter::Meter`] per completed operation: it draws the progress bar
//! (stderr, terminal only, never with `--json`) and records throughput over time, which
//! `--report FILE` plots next to the latency percentiles (see [`report`]).

pub mod connect;
pub mod js;
pub mod meter;
pub mod report;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::{Bytes, BytesMut};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::auth::creds::parse_creds;
use crate::auth::nkeys::{KeyPair, Role};
use crate::ctl::args::{BenchArgs, BenchScenario};
use crate::proto::encode::encode_client_op;
use crate::proto::parser::{Limits, Parser};
use crate::proto::{ClientOp, ServerOp};

/// Messages per publish batch (one write, one PING).
const BATCH: u64 = 1000;
/// Batches in flight before the publisher waits for a PONG.
const PONG_WINDOW: u64 = 32;
/// Give up if a run makes no progress for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Core fan-out: every this many messages a subscriber records its arrival time, for the
/// publish → delivery latency (a message's send time is its batch's write time).
const LATENCY_EVERY: u64 = 10;

/// A connection speaking the raw protocol (over TCP or TLS).
struct RawConn {
    rd: Box<dyn AsyncRead + Unpin + Send>,
    wr: Box<dyn AsyncWrite + Unpin + Send>,
    buf: BytesMut,
    /// Read buffer size: it grows by this much when less than 1/16 of it is free.
    cap: usize,
    parser: Parser,
}

/// Reads the plaintext INFO line before a TLS upgrade; returns its JSON body.
async fn read_info_line(s: &mut TcpStream) -> anyhow::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut b).await?;
        line.push(b[0]);
        if line.len() > 64 * 1024 {
            bail!("INFO line too long");
        }
    }
    match line.strip_prefix(b"INFO ") {
        Some(body) => Ok(body.to_vec()),
        None => bail!("expected INFO"),
    }
}

fn tls_connector(ca: &std::path::Path) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(ca)
        .with_context(|| format!("read {}", ca.display()))?;
    for c in certs {
        roots.add(c?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg)))
}

type Halves = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
);

/// Where and how every connection of a bench run connects: the address, TLS, and the
/// credentials (a `.creds` file is read and parsed once, its key signs each connection's
/// nonce).
pub struct Dial {
    /// `host:port`.
    pub addr: String,
    tls: Option<tokio_rustls::TlsConnector>,
    /// The user JWT and its key pair (`--creds`).
    creds: Option<(String, KeyPair)>,
    user: Option<String>,
    password: Option<String>,
}

impl Dial {
    /// The dial settings of `a` for the server at `server` (a URL or `host:port`).
    ///
    /// # Errors
    /// An unreadable or malformed `--creds` file or `--tlsca` bundle.
    pub fn new(server: &str, a: &BenchArgs) -> anyhow::Result<Self> {
        let creds = match &a.creds {
            None => None,
            Some(path) => {
                let text = zeroize::Zeroizing::new(
                    std::fs::read_to_string(path)
                        .with_context(|| format!("read {}", path.display()))?,
                );
                let (jwt, seed) =
                    parse_creds(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
                let kp = KeyPair::from_seed(&seed, &[Role::User])
                    .map_err(|e| anyhow!("{}: {e}", path.display()))?;
                Some((jwt, kp))
            }
        };
        Ok(Dial {
            addr: addr_of(server),
            tls: a.tlsca.as_deref().map(tls_connector).transpose()?,
            creds,
            user: a.user.clone(),
            password: a.password.clone(),
        })
    }

    /// The CONNECT body for a connection named `name`, answering the server's INFO `info`.
    fn connect_json(&self, name: &str, info: &[u8]) -> anyhow::Result<String> {
        let mut c = serde_json::json!({
            "verbose": false, "pedantic": false, "protocol": 1, "headers": true,
            "no_responders": true, "name": name, "lang": "sealctl",
            "version": env!("CARGO_PKG_VERSION"),
        });
        if let Some((jwt, kp)) = &self.creds {
            let info: serde_json::Value =
                serde_json::from_slice(info).context("INFO is not JSON")?;
            let Some(nonce) = info.get("nonce").and_then(|n| n.as_str()) else {
                bail!("--creds given but the server sent no nonce (is it in operator mode?)");
            };
            c["jwt"] = jwt.as_str().into();
            c["sig"] = data_encoding::BASE64URL_NOPAD
                .encode(&kp.sign(nonce.as_bytes()))
                .into();
        }
        if let Some(u) = &self.user {
            c["user"] = u.as_str().into();
        }
        if let Some(p) = &self.password {
            c["pass"] = p.as_str().into();
        }
        Ok(c.to_string())
    }
}

impl RawConn {
    /// Connects, authenticates as `dial` says and waits for the PONG that confirms it; a
    /// server `-ERR` (e.g. `Authorization Violation`) is an error.
    async fn connect(dial: &Dial, name: &str) -> anyhow::Result<Self> {
        Self::connect_buffered(dial, name, 256 * 1024).await
    }

    /// As [`RawConn::connect`], with a read buffer of `cap` bytes (the connect scenario uses a
    /// small one: its connections only read INFO and PONG).
    async fn connect_buffered(dial: &Dial, name: &str, cap: usize) -> anyhow::Result<Self> {
        let addr = dial.addr.as_str();
        let mut s = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect {addr}"))?;
        s.set_nodelay(true)?;
        let mut info = None;
        let (rd, wr): Halves = match &dial.tls {
            None => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            Some(connector) => {
                info = Some(read_info_line(&mut s).await?);
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_owned();
                let server = rustls_pki_types::ServerName::try_from(host)?;
                let tls = connector.connect(server, s).await?;
                let (r, w) = tokio::io::split(tls);
                (Box::new(r), Box::new(w))
            }
        };
        let limits = Limits {
            max_control_line: 1 << 20,
            max_payload: usize::MAX,
        };
        let mut c = RawConn {
            rd,
            wr,
            buf: BytesMut::with_capacity(cap),
            cap,
            parser: Parser::new(limits),
        };
        let info = match info {
            Some(i) => Bytes::from(i),
            None => match c.next().await? {
                ServerOp::Info(i) => i,
                other => bail!("expected INFO, got {other:?}"),
            },
        };
        let connect = dial.connect_json(name, &info)?;
        let mut out = BytesMut::new();
        encode_client_op(&mut out, &ClientOp::Connect(Bytes::from(connect)));
        out.extend_from_slice(b"PING\r\n");
        c.wr.write_all(&out).await?;
        c.until_pong().await?;
        Ok(c)
    }

    async fn next(&mut self) -> anyhow::Result<ServerOp> {
        loop {
            if let Some(op) = self.parser.next_server_op(&mut self.buf)? {
                if let ServerOp::Err(e) = &op {
                    bail!("server error: {}", String::from_utf8_lossy(e));
                }
                return Ok(op);
            }
            if self.buf.capacity() - self.buf.len() < self.cap / 16 {
                self.buf.reserve(self.cap);
            }
            let n = tokio::time::timeout(STALL_TIMEOUT, self.rd.read_buf(&mut self.buf))
                .await
                .map_err(|_| anyhow!("no data from server for {STALL_TIMEOUT:?}"))??;
            if n == 0 {
                bail!("server closed the connection");
            }
        }
    }

    /// The next op already in the read buffer, without waiting for the socket.
    fn try_next(&mut self) -> anyhow::Result<Option<ServerOp>> {
        let op = self.parser.next_server_op(&mut self.buf)?;
        if let Some(ServerOp::Err(e)) = &op {
            bail!("server error: {}", String::from_utf8_lossy(e));
        }
        Ok(op)
    }

    async fn until_pong(&mut self) -> anyhow::Result<()> {
        loop {
            match self.next().await? {
                ServerOp::Pong => return Ok(()),
                ServerOp::Ping => self.wr.write_all(b"PONG\r\n").await?,
                _ => {}
            }
        }
    }

    async fn send(&mut self, op: &ClientOp) -> anyhow::Result<()> {
        let mut out = BytesMut::new();
        encode_client_op(&mut out, op);
        self.wr.write_all(&out).await?;
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Scenario label, e.g. `1 pub -> 4 subs`. The connect scenario fills the message fields
    /// with connections (see [`connect`]).
    pub scenario: String,
    /// Payload size in bytes.
    pub size: usize,
    /// Messages published.
    pub msgs: u64,
    /// Messages delivered to subscribers in total.
    pub delivered: u64,
    /// Wall time from first publish to last delivery, seconds.
    pub seconds: f64,
    /// Published messages per second.
    pub pub_msgs_per_sec: f64,
    /// Delivered messages per second.
    pub delivered_msgs_per_sec: f64,
    /// Server CPU microseconds per delivered message, when `--server-pid` was given.
    pub server_cpu_us_per_msg: Option<f64>,
    /// Latency percentiles in microseconds (request mode; JetStream: publish → PubAck, get →
    /// reply).
    pub latency_us: Option<Latency>,
    /// JetStream scenarios: negative or malformed replies (error PubAcks, 404 gets, messages
    /// left pending on the consumer). `None` for core scenarios.
    pub errors: Option<u64>,
    /// JetStream scenarios: the first error seen, or a verification note.
    pub note: Option<String>,
}

/// Latency percentiles, microseconds.
#[derive(Debug, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
    /// The largest sample.
    pub max: f64,
    /// Number of samples.
    pub samples: usize,
}

/// Host:port from a NATS URL (`nats://h:p`, `h:p`, comma lists use the first).
pub fn addr_of(url: &str) -> String {
    let first = url.split(',').next().unwrap_or(url).trim();
    let no_scheme = first.split_once("://").map_or(first, |(_, r)| r);
    let host = no_scheme.rsplit_once('@').map_or(no_scheme, |(_, h)| h);
    if host.contains(':') && !host.ends_with(']') {
        host.to_owned()
    } else {
        format!("{host}:4222")
    }
}

/// CPU seconds of the server, plus the subscribers' server when it is another process.
fn servers_cpu(a: &BenchArgs) -> Option<f64> {
    let main = a.server_pid.and_then(cpu_seconds)?;
    Some(main + a.sub_server_pid.and_then(cpu_seconds).unwrap_or(0.0))
}

/// Total CPU seconds (user + system) of a process, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / 100.0)
}

/// Runs `sealctl bench`.
///
/// # Errors
/// Connection failures, server errors, or a run that stalls.
pub async fn run(server: &str, a: BenchArgs) -> anyhow::Result<()> {
    let dial = Arc::new(Dial::new(server, &a)?);
    let meter = meter::Meter::start(crate::ctl::progress::bar(Some(a.msgs()), "connect", a.json));
    let result = match a.scenario {
        BenchScenario::Core if a.request => latency(&dial, &a, &meter).await,
        BenchScenario::Core => throughput(&dial, &a, &meter).await,
        BenchScenario::Connect => connect::run(&dial, &a, &meter).await,
        _ => js::run(&dial, &a, &meter).await,
    };
    let timeline = meter.finish();
    let report = result?;
    if let Some(path) = &a.report {
        let page = report::html(&report, &timeline, &params(server, &a));
        std::fs::write(path, page).with_context(|| format!("write {}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// The run parameters shown in `--report`.
fn params(server: &str, a: &BenchArgs) -> Vec<(String, String)> {
    let mut p: Vec<(&str, String)> = vec![
        ("sealctl", env!("CARGO_PKG_VERSION").to_owned()),
        (
            "started (UTC)",
            time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
        ),
        ("server", server.to_owned()),
        ("scenario", format!("{:?}", a.scenario)),
        ("msgs", a.msgs().to_string()),
        ("size", a.size.to_string()),
        ("tls", a.tlsca.is_some().to_string()),
        (
            "auth",
            if a.creds.is_some() {
                "creds".to_owned()
            } else if a.user.is_some() {
                "user/password".to_owned()
            } else {
                "none".to_owned()
            },
        ),
    ];
    match a.scenario {
        BenchScenario::Connect => {
            p.push(("conns", a.conns.to_string()));
            p.push(("parallel", a.parallel.to_string()));
        }
        BenchScenario::Core => {
            p.push(("subject", a.subject.clone()));
            p.push(("request", a.request.to_string()));
            if !a.request {
                p.push(("subs", a.subs.to_string()));
                p.push(("queue", a.queue.clone().unwrap_or_else(|| "-".into())));
            }
        }
        s => {
            p.push(("storage", format!("{:?}", a.storage).to_lowercase()));
            match s {
                BenchScenario::JsPubSync => p.push(("pubs", a.pubs.to_string())),
                BenchScenario::JsPubWindow => {
                    p.push(("pubs", a.pubs.to_string()));
                    p.push(("window", a.window.to_string()));
                }
                BenchScenario::JsConsume => {
                    p.push(("window", a.window.to_string()));
                    p.push(("batch", a.batch.to_string()));
                    p.push(("ack_sync", a.ack_sync.to_string()));
                }
                BenchScenario::KvPut => {
                    p.push(("window", a.window.to_string()));
                    p.push(("keys", a.keys.to_string()));
                }
                _ => {
                    p.push(("keys", a.keys.to_string()));
                    p.push(("inflight", a.inflight.to_string()));
                }
            }
            if !matches!(s, BenchScenario::KvPut | BenchScenario::KvGet) {
                p.push(("stream", a.stream.clone()));
            }
        }
    }
    if let Some(pid) = a.server_pid {
        p.push(("server pid", pid.to_string()));
    }
    p.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn print_table(r: &BenchReport) {
    if r.scenario.starts_with(connect::LABEL) {
        return connect::print_table(r);
    }
    if r.errors.is_some() {
        return js::print_table(r);
    }
    println!(
        "{:<28} {:>8} {:>10} {:>14} {:>14} {:>12}",
        "scenario", "size", "msgs", "pub msgs/s", "recv msgs/s", "cpu µs/msg"
    );
    let cpu = r
        .server_cpu_us_per_msg
        .map_or("-".to_owned(), |c| format!("{c:.3}"));
    println!(
        "{:<28} {:>8} {:>10} {:>14.0} {:>14.0} {:>12}",
        r.scenario, r.size, r.msgs, r.pub_msgs_per_sec, r.delivered_msgs_per_sec, cpu
    );
    if let Some(l) = &r.latency_us {
        // Core fan-out samples publish → delivery while the publisher runs flat out, so the
        // figure includes queueing: say so.
        let what = if r.scenario == "request/reply" {
            "latency µs:"
        } else {
            "delivery latency at full load µs:"
        };
        println!(
            "{what} p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            l.p50, l.p90, l.p99, l.p99_9, l.max
        );
    }
}

/// One publisher, `a.subs` subscribers (or a queue group of them). Without a queue group each
/// subscriber also samples publish → delivery latency (every [`LATENCY_EVERY`]th message).
pub async fn throughput(
    dial: &Dial,
    a: &BenchArgs,
    m: &meter::Meter,
) -> anyhow::Result<BenchReport> {
    let subs = a.subs.max(1);
    let total_expected = if a.queue.is_some() {
        a.msgs()
    } else {
        a.msgs() * subs as u64
    };
    let sample_latency = a.queue.is_none();
    let received = m.counter();
    let sub_dial = match &a.sub_server {
        Some(url) => Some(Dial::new(url, a)?),
        None => None,
    };
    // Set when the last expected message arrived, so idle subscribers stop waiting at once.
    let finished = tokio_util::sync::CancellationToken::new();
    let mut handles = Vec::new();
    for i in 0..subs {
        let mut c =
            RawConn::connect(sub_dial.as_ref().unwrap_or(dial), &format!("bench-sub-{i}")).await?;
        c.send(&ClientOp::Sub {
            subject: Bytes::from(a.subject.clone()),
            queue: a.queue.clone().map(Bytes::from),
            sid: Bytes::from_static(b"1"),
        })
        .await?;
        c.send(&ClientOp::Ping).await?;
        c.until_pong().await?;
        let received = Arc::clone(&received);
        let finished = finished.clone();
        handles.push(tokio::spawn(async move {
            let mut local = 0u64;
            // (index of the message on this subscription, arrival time)
            let mut arrivals: Vec<(u64, Instant)> = Vec::new();
            loop {
                if received.load(Ordering::Relaxed) >= total_expected {
                    return Ok::<_, anyhow::Error>((local, arrivals));
                }
                let op = tokio::select! {
                    _ = finished.cancelled() => return Ok((local, arrivals)),
                    op = c.next() => op?,
                };
                match op {
                    ServerOp::Msg { .. } => {
                        if sample_latency && local % LATENCY_EVERY == 0 {
                            arrivals.push((local, Instant::now()));
                        }
                        local += 1;
                        if received.fetch_add(1, Ordering::Relaxed) + 1 >= total_expected {
                            finished.cancel();
                            return Ok((local, arrivals));
                        }
                    }
                    ServerOp::Ping => c.wr.write_all(b"PONG\r\n").await?,
                    _ => {}
                }
            }
        }));
    }
    let mut publisher = RawConn::connect(dial, "bench-pub").await?;
    if sub_dial.is_some() {
        // The subscriptions' interest has to reach the publisher's node over the route.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let payload = Bytes::from(vec![b'x'; a.size]);
    let mut frame = BytesMut::new();
    encode_client_op(
        &mut frame,
        &ClientOp::Pub {
            subject: Bytes::from(a.subject.clone()),
            reply: None,
            headers: None,
            payload,
        },
    );
    let cpu0 = servers_cpu(a);
    m.begin("deliver", total_expected);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut batches = 0u64;
    let mut pongs = 0u64;
    let mut out = BytesMut::with_capacity(frame.len() * BATCH as usize + 8);
    let mut batch_sent = Vec::with_capacity((a.msgs() / BATCH + 1) as usize);
    while sent < a.msgs() {
        let n = BATCH.min(a.msgs() - sent);
        out.clear();
        for _ in 0..n {
            out.extend_from_slice(&frame);
        }
        out.extend_from_slice(b"PING\r\n");
        batch_sent.push(Instant::now());
        publisher.wr.write_all(&out).await?;
        sent += n;
        batches += 1;
        while batches - pongs > PONG_WINDOW {
            match publisher.next().await? {
                ServerOp::Pong => pongs += 1,
                ServerOp::Ping => publisher.wr.write_all(b"PONG\r\n").await?,
                _ => {}
            }
        }
    }
    let pub_secs = start.elapsed().as_secs_f64();
    let mut delivered = 0;
    let mut samples = Vec::new();
    for h in handles {
        let (n, arrivals) = h
            .await
            .map_err(|e| anyhow!("subscriber task failed: {e}"))??;
        delivered += n;
        for (i, at) in arrivals {
            if let Some(t0) = batch_sent.get((i / BATCH) as usize) {
                samples.push(at.saturating_duration_since(*t0).as_secs_f64() * 1e6);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = servers_cpu(a);
    let cpu = match (cpu0, cpu1) {
        (Some(c0), Some(c1)) if delivered > 0 => Some((c1 - c0) * 1e6 / delivered as f64),
        _ => None,
    };
    let scenario = match &a.queue {
        Some(_) => format!("1 pub -> queue of {subs}"),
        None => format!("1 pub -> {subs} sub{}", if subs == 1 { "" } else { "s" }),
    };
    Ok(BenchReport {
        scenario,
        size: a.size,
        msgs: a.msgs(),
        delivered,
        seconds: secs,
        pub_msgs_per_sec: a.msgs() as f64 / pub_secs.max(1e-9),
        delivered_msgs_per_sec: delivered as f64 / secs.max(1e-9),
        server_cpu_us_per_msg: cpu,
        latency_us: (!samples.is_empty()).then(|| percentiles(samples)),
        errors: None,
        note: None,
    })
}

/// Sequential request/reply round trips through one responder.
pub async fn latency(dial: &Dial, a: &BenchArgs, m: &meter::Meter) -> anyhow::Result<BenchReport> {
    let mut responder = RawConn::connect(dial, "bench-responder").await?;
    responder
        .send(&ClientOp::Sub {
            subject: Bytes::from(a.subject.clone()),
            queue: None,
            sid: Bytes::from_static(b"1"),
        })
        .await?;
    responder.send(&ClientOp::Ping).await?;
    responder.until_pong().await?;
    let size = a.size;
    let serve = tokio::spawn(async move {
        let payload = Bytes::from(vec![b'r'; size]);
        loop {
            match responder.next().await {
                Ok(ServerOp::Msg {
                    reply: Some(reply), ..
                }) => {
                    let op = ClientOp::Pub {
                        subject: reply,
                        reply: None,
                        headers: None,
                        payload: payload.clone(),
                    };
                    if responder.send(&op).await.is_err() {
                        return;
                    }
                }
                Ok(ServerOp::Ping) => {
                    if responder.wr.write_all(b"PONG\r\n").await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    let mut req = RawConn::connect(dial, "bench-requester").await?;
    let inbox = Bytes::from_static(b"_INBOX.sealctl.bench");
    req.send(&ClientOp::Sub {
        subject: inbox.clone(),
        queue: None,
        sid: Bytes::from_static(b"1"),
    })
    .await?;
    req.send(&ClientOp::Ping).await?;
    req.until_pong().await?;
    let payload = Bytes::from(vec![b'q'; a.size]);
    let op = ClientOp::Pub {
        subject: Bytes::from(a.subject.clone()),
        reply: Some(inbox),
        headers: None,
        payload,
    };
    let mut frame = BytesMut::new();
    encode_client_op(&mut frame, &op);
    let mut samples = Vec::with_capacity(a.msgs() as usize);
    let cpu0 = a.server_pid.and_then(cpu_seconds);
    m.begin("request", a.msgs());
    let start = Instant::now();
    for _ in 0..a.msgs() {
        let t0 = Instant::now();
        req.wr.write_all(&frame).await?;
        loop {
            match req.next().await? {
                ServerOp::Msg { .. } => break,
                ServerOp::Ping => req.wr.write_all(b"PONG\r\n").await?,
                _ => {}
            }
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e6);
        m.inc();
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = a.server_pid.and_then(cpu_seconds);
    serve.abort();
    let cpu = match (cpu0, cpu1) {
        (Some(c0), Some(c1)) if a.msgs() > 0 => Some((c1 - c0) * 1e6 / (2 * a.msgs()) as f64),
        _ => None,
    };
    Ok(BenchReport {
        scenario: "request/reply".to_owned(),
        size: a.size,
        msgs: a.msgs(),
        delivered: a.msgs(),
        seconds: secs,
        pub_msgs_per_sec: a.msgs() as f64 / secs.max(1e-9),
        delivered_msgs_per_sec: a.msgs() as f64 / secs.max(1e-9),
        server_cpu_us_per_msg: cpu,
        latency_us: Some(percentiles(samples)),
        errors: None,
        note: None,
    })
}

/// Percentiles of latency samples in microseconds.
fn percentiles(mut samples: Vec<f64>) -> Latency {
    samples.sort_by(|x, y| x.total_cmp(y));
    let pct = |p: f64| -> f64 {
        let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples.get(i).copied().unwrap_or(0.0)
    };
    Latency {
        p50: pct(0.50),
        p90: pct(0.90),
        p99: pct(0.99),
        p99_9: pct(0.999),
        max: samples.last().copied().unwrap_or(0.0),
        samples: samples.len(),
    }
}
