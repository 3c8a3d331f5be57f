//! Data-key rotation with re-sealing in the background (issue 17):
//! `$SYS.REQ.SERVER.<id>.REKEY` / `$SYS.REQ.SERVER.PING.REKEY`, body `{"account": ..,
//! "stream": .., "bytes_per_sec": ..}` (every field optional: no account means every stream).
//!
//! Each chosen stream gets a new data key and its files are rewritten under it, one stream
//! at a time, by the stream's own thread (`Cmd::Reseal`: a compaction under the new key, the
//! consumers' state files written again, the checkpoint moved); then its older key versions
//! are destroyed — the keyring no longer holds them, and an audit shows each stream with one
//! key generation. Between streams the re-sealer waits as long as the bytes it rewrote take
//! at the pace, so the disk keeps its bandwidth for the clients.
//!
//! Crash-safe and resumable: the new key is in the keyring before any byte is rewritten, and
//! the compaction is the store's (a crash leaves the old segments or the whole new run, never
//! a mix it cannot read). A stream that still holds several key versions at start — a
//! re-sealing that a crash or restart interrupted — is re-sealed again under its current key
//! in the background ([`resume`]).
//!
//! Not covered: replicated streams (their data travels in their group's Raft log, sealed with
//! the group's key, and replicas are rebuilt from it) and memory streams (nothing at rest).
//! Within one stream the rewrite is one step: that stream's publishes wait for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::jetstream::config::StorageType;

use super::cmd::Cmd;
use super::{JetStream, StreamRef};

/// The re-sealing pace unless the request names one.
pub(crate) const DEFAULT_BYTES_PER_SEC: u64 = 32 << 20;

/// How long one stream's re-sealing may take before the re-sealer reports it as not done.
const STREAM_WAIT: Duration = Duration::from_secs(600);

/// The request body.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RekeyRequest {
    /// Only this account's streams.
    pub(crate) account: Option<String>,
    /// Only this stream (of `account`).
    pub(crate) stream: Option<String>,
    /// The pace (0: the default).
    pub(crate) bytes_per_sec: u64,
}

/// The re-sealer's slot and what `/metrics` shows.
#[derive(Default)]
pub(crate) struct Resealer {
    running: AtomicBool,
    /// Streams re-sealed since start.
    pub(crate) streams: AtomicU64,
    /// Bytes rewritten since start.
    pub(crate) bytes: AtomicU64,
    /// Streams still to do in the running pass.
    pub(crate) pending: AtomicU64,
}

impl Resealer {
    /// Whether a pass runs now.
    pub(crate) fn running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }
}

/// The streams a request names: file streams of this server that are not replicated.
fn targets(
    js: &JetStream,
    request: &RekeyRequest,
) -> Result<Vec<(String, Arc<StreamRef>)>, String> {
    if request.stream.is_some() && request.account.is_none() {
        return Err("a stream is named within its account: give the account too".into());
    }
    let mut out = Vec::new();
    for acc in js.accounts() {
        if request.account.as_ref().is_some_and(|a| *a != acc.name) {
            continue;
        }
        for s in acc.streams.all() {
            if request.stream.as_ref().is_some_and(|n| *n != s.cfg.name) {
                continue;
            }
            if s.group.is_none() && s.cfg.storage == StorageType::File && s.id.is_some() {
                out.push((acc.name.clone(), s));
            }
        }
    }
    if out.is_empty() && request.stream.is_some() {
        return Err("no such file stream on this server (replicated and memory streams are not re-sealed here)".into());
    }
    Ok(out)
}

/// Starts a pass that rotates the named streams' data keys and re-seals them; `done` gets
/// one result per stream. Refused while another pass runs.
pub(crate) fn start(
    js: &Arc<JetStream>,
    request: RekeyRequest,
    done: impl FnOnce(Vec<Value>) + Send + 'static,
) -> Result<(), String> {
    let streams = targets(js, &request)?;
    let pace = match request.bytes_per_sec {
        0 => DEFAULT_BYTES_PER_SEC,
        n => n,
    };
    run_pass(js, streams, true, pace, done)
}

/// At start: streams still holding several data-key versions (a re-sealing interrupted by a
/// crash or a restart) are re-sealed under their current key, in the background.
pub(crate) fn resume(js: &Arc<JetStream>) {
    let all = match targets(js, &RekeyRequest::default()) {
        Ok(all) => all,
        Err(_) => return,
    };
    let unfinished: Vec<_> = {
        let meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
        all.into_iter()
            .filter(|(_, s)| {
                s.id.and_then(|id| meta.stream_meta(id))
                    .is_some_and(|m| m.dek_versions.len() > 1)
            })
            .collect()
    };
    if unfinished.is_empty() {
        return;
    }
    tracing::info!(
        streams = unfinished.len(),
        "re-sealing streams whose data-key rotation did not finish"
    );
    let _ = run_pass(js, unfinished, false, DEFAULT_BYTES_PER_SEC, |results| {
        tracing::info!(?results, "interrupted re-sealing finished");
    });
}

fn run_pass(
    js: &Arc<JetStream>,
    streams: Vec<(String, Arc<StreamRef>)>,
    rotate: bool,
    pace: u64,
    done: impl FnOnce(Vec<Value>) + Send + 'static,
) -> Result<(), String> {
    let r = &js.resealer;
    if r.running.swap(true, Ordering::AcqRel) {
        return Err("a data-key rotation is already running on this server".into());
    }
    r.pending.store(streams.len() as u64, Ordering::Relaxed);
    let js2 = Arc::clone(js);
    let spawned = std::thread::Builder::new()
        .name("reseal".into())
        .spawn(move || {
            let js = js2;
            let r = &js.resealer;
            let mut results = Vec::new();
            let last = streams.len();
            for (i, (account, s)) in streams.into_iter().enumerate() {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                let sent = s.tx.send(Cmd::Reseal { rotate, done: tx }).is_ok();
                let outcome = match sent.then(|| rx.recv_timeout(STREAM_WAIT)) {
                    Some(Ok(Ok(v))) => v,
                    Some(Ok(Err(e))) => json!({ "stream": s.cfg.name, "error": e }),
                    _ => json!({ "stream": s.cfg.name, "error": "the stream did not answer (stopped, or still re-sealing)" }),
                };
                r.pending.fetch_sub(1, Ordering::Relaxed);
                let rewritten = outcome["bytes_after"].as_u64().unwrap_or(0);
                if outcome.get("error").is_none() {
                    r.streams.fetch_add(1, Ordering::Relaxed);
                    r.bytes.fetch_add(rewritten, Ordering::Relaxed);
                }
                let mut outcome = outcome;
                outcome["account"] = json!(account);
                results.push(outcome);
                // The pace: as long as the rewritten bytes take at it, before the next stream
                // (a deadline, not a poll: nothing unparks this thread, and a spurious wake-up
                // only shortens it).
                if i + 1 < last {
                    std::thread::park_timeout(Duration::from_secs_f64(
                        rewritten as f64 / pace as f64,
                    ));
                }
            }
            r.running.store(false, Ordering::Release);
            done(results);
        });
    if spawned.is_err() {
        r.running.store(false, Ordering::Release);
        return Err("could not start the re-sealing thread".into());
    }
    Ok(())
}
