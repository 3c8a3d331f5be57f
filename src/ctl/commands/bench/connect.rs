//! `sealctl bench --scenario connect`: how fast a server accepts and authenticates new
//! connections.
//!
//! `--conns` connections are made, `--parallel` at a time. Each one is a fresh TCP connection
//! that reads the server's INFO, sends CONNECT (with `--creds`: the user JWT and the INFO nonce
//! signed by the user's nkey; with `--user/--password`: those) and a PING, waits for the PONG
//! and closes. A `-ERR` (e.g. `Authorization Violation`), a closed socket or a stall counts as
//! an error; the first one is kept as the report's note.
//!
//! The report reuses [`BenchReport`]: `msgs` is connections attempted, `delivered` the ones
//! that got their PONG, `delivered_msgs_per_sec` established connections per second,
//! `server_cpu_us_per_msg` the server's CPU per attempted connection and `latency_us` the
//! time from TCP connect to PONG.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;
use tokio::io::AsyncWriteExt;

use super::meter::Meter;
use super::{cpu_seconds, percentiles, BenchReport, Dial, RawConn, STALL_TIMEOUT};
use crate::ctl::args::BenchArgs;

/// Every connect report's scenario label starts with this.
pub const LABEL: &str = "connect";

/// Read buffer per connection: INFO (with a nonce) and PONG fit many times over.
const CONN_BUF: usize = 8 * 1024;

/// What one worker saw.
#[derive(Default)]
struct Worker {
    /// Connect → PONG, microseconds, of each established connection.
    samples: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
}

/// One connection: connect, authenticate, PING/PONG, close.
async fn one(dial: &Dial, i: u64) -> anyhow::Result<()> {
    let mut c = tokio::time::timeout(
        STALL_TIMEOUT,
        RawConn::connect_buffered(dial, &format!("bench-conn-{i}"), CONN_BUF),
    )
    .await
    .map_err(|_| anyhow!("no PONG within {STALL_TIMEOUT:?}"))??;
    // A clean close (FIN), as a client library does.
    let _ = c.wr.shutdown().await;
    Ok(())
}

/// Runs the connect scenario.
///
/// # Errors
/// Only a worker task failing; connection failures are counted in the report.
pub async fn run(dial: &Arc<Dial>, a: &BenchArgs, m: &Meter) -> anyhow::Result<BenchReport> {
    let conns = a.conns.max(1);
    let parallel = a.parallel.max(1).min(conns as usize);
    let next = Arc::new(AtomicU64::new(0));
    let done = m.counter();
    let cpu0 = a.server_pid.and_then(cpu_seconds);
    m.begin("connect", conns);
    let start = Instant::now();
    let mut handles = Vec::with_capacity(parallel);
    for _ in 0..parallel {
        let (dial, next, done) = (Arc::clone(dial), Arc::clone(&next), Arc::clone(&done));
        handles.push(tokio::spawn(async move {
            let mut w = Worker::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= conns {
                    return w;
                }
                let t0 = Instant::now();
                match one(&dial, i).await {
                    Ok(()) => w.samples.push(t0.elapsed().as_secs_f64() * 1e6),
                    Err(e) => {
                        w.errors += 1;
                        if w.first_error.is_none() {
                            w.first_error = Some(format!("{e:#}"));
                        }
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut samples = Vec::with_capacity(conns as usize);
    let (mut errors, mut note) = (0, None);
    for h in handles {
        let w = h.await.map_err(|e| anyhow!("connect worker failed: {e}"))?;
        samples.extend(w.samples);
        errors += w.errors;
        note = note.or(w.first_error);
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = a.server_pid.and_then(cpu_seconds);
    let ok = samples.len() as u64;
    let auth = if a.creds.is_some() {
        "creds"
    } else if a.user.is_some() {
        "user/password"
    } else {
        "no auth"
    };
    Ok(BenchReport {
        scenario: format!("{LABEL} ({auth}), {parallel} parallel"),
        size: 0,
        msgs: conns,
        delivered: ok,
        seconds: secs,
        pub_msgs_per_sec: conns as f64 / secs.max(1e-9),
        delivered_msgs_per_sec: ok as f64 / secs.max(1e-9),
        server_cpu_us_per_msg: match (cpu0, cpu1) {
            (Some(c0), Some(c1)) => Some((c1 - c0) * 1e6 / conns as f64),
            _ => None,
        },
        latency_us: (!samples.is_empty()).then(|| percentiles(samples)),
        errors: Some(errors),
        note,
    })
}

/// The terminal table for a connect report.
pub(super) fn print_table(r: &BenchReport) {
    println!(
        "{:<36} {:>8} {:>10} {:>8} {:>12} {:>14}",
        "scenario", "conns", "ok", "errors", "conns/s", "cpu µs/conn"
    );
    let cpu = r
        .server_cpu_us_per_msg
        .map_or("-".to_owned(), |c| format!("{c:.1}"));
    println!(
        "{:<36} {:>8} {:>10} {:>8} {:>12.0} {:>14}",
        r.scenario,
        r.msgs,
        r.delivered,
        r.errors.unwrap_or(0),
        r.delivered_msgs_per_sec,
        cpu
    );
    if let Some(l) = &r.latency_us {
        println!(
            "connect → PONG µs: p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            l.p50, l.p90, l.p99, l.p99_9, l.max
        );
    }
    if let Some(n) = &r.note {
        println!("first error: {n}");
    }
}
