//! Data-key rotation with re-sealing in the background (issue 17):
//! `$SYS.REQ.SERVER.<id>.REKEY` / `$SYS.REQ.SERVER.PING.REKEY`, body `{"account": ..,
//! "stream": .., "bytes_per_sec": ..}` (every field optional: no account means every stream).
//!
//! Each chosen stream gets a new data key and its files are rewritten under it, one stream
//! and one segment at a time: the stream's thread rotates the key (new blocks go to a new
//! segment under it at once), this module's thread rewrites each sealed segment under the new
//! key beside the original (`store/file_store/reseal.rs`), block by block at the pace, and the
//! stream's thread puts each copy in place (a rename); finally the stream's thread writes the
//! consumers' state files again and destroys the older key versions — the keyring no longer
//! holds them, and an audit shows each stream with one key generation. The stream's
//! publishes wait only for those short steps, never for the rewriting.
//!
//! Crash-safe and resumable: the new key is in the keyring before any byte is rewritten, and
//! a segment is the original or the whole copy, never a mix; the older keys are destroyed
//! only once no segment depends on them. A stream that still holds several key versions at
//! start — a re-sealing that a crash or restart interrupted — is re-sealed again under its
//! current key in the background ([`resume`]); only the segments still under an older key
//! are rewritten.
//!
//! A replicated stream is re-sealed replica by replica: each server re-seals its own copy of
//! the stream's files under a data key of its own (a request every server hears, as
//! `sealctl store rekey-live` sends, re-seals every replica). The steps are this node's,
//! never proposed to the group. Then the node rotates the stream's group key — which seals
//! the stream's entries in its Raft log and its snapshot file — and destroys the older one
//! (`cluster/group_rekey.rs`), so no byte of the stream on this node depends on a key from
//! before the request.
//!
//! Not covered: memory streams (nothing at rest).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::jetstream::config::StorageType;
use crate::pace::Pace;

use super::cmd::{Cmd, ResealDone, ResealStep};
use super::{JetStream, StreamRef};

/// The re-sealing pace unless the request names one.
pub(crate) const DEFAULT_BYTES_PER_SEC: u64 = 32 << 20;

/// How long the re-sealer waits for the stream's thread to take one step.
const STEP_WAIT: Duration = Duration::from_secs(120);

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

/// The streams a request names: file streams of this server (a replicated stream's replica
/// here included).
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
            if s.cfg.storage == StorageType::File && s.id.is_some() {
                out.push((acc.name.clone(), s));
            }
        }
    }
    if out.is_empty() && request.stream.is_some() {
        return Err("no such file stream on this server (memory streams are not re-sealed)".into());
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
    // Decided under the audit slot's lock, as an audit decides (`audit.rs`): an audit reads
    // the store by the keys of its start, which a re-sealing changes under it.
    js.auditor.while_settled(|auditing| {
        if auditing {
            return Err("a live audit is running on this server; re-seal once it is done");
        }
        if r.running.swap(true, Ordering::AcqRel) {
            return Err("a data-key rotation is already running on this server");
        }
        Ok(())
    })?;
    r.pending.store(streams.len() as u64, Ordering::Relaxed);
    let js2 = Arc::clone(js);
    let spawned = std::thread::Builder::new()
        .name("reseal".into())
        .spawn(move || {
            let js = js2;
            let r = &js.resealer;
            let mut pacer = Pacer::new(pace, &r.bytes);
            let mut results = Vec::new();
            for (account, s) in streams {
                let mut outcome = match reseal_stream(&s, rotate, &mut pacer) {
                    Ok(v) => {
                        r.streams.fetch_add(1, Ordering::Relaxed);
                        v
                    }
                    Err(e) => json!({ "stream": s.cfg.name, "error": e }),
                };
                if let (Some(group), Some(cj), true) = (s.group, js.cluster(), rotate) {
                    if outcome.get("error").is_none() {
                        outcome["group_key"] = cj
                            .runtime_handle()
                            .block_on(cj.rotate_group_key(group))
                            .unwrap_or_else(|e| json!({ "error": e }));
                    }
                }
                r.pending.fetch_sub(1, Ordering::Relaxed);
                outcome["account"] = json!(account);
                results.push(outcome);
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

/// Re-seals one stream: the key rotated by the stream's thread, each segment rewritten here
/// at the pace and put in place by the stream's thread, then the older keys destroyed.
/// An error leaves the stream whole, with the older keys kept ([`resume`] finishes it at
/// the next start).
fn reseal_stream(s: &StreamRef, rotate: bool, pacer: &mut Pacer<'_>) -> Result<Value, String> {
    let plan = ask(s, |done| ResealStep::Begin { rotate, done })?;
    let mut segments = 0u64;
    let mut bytes = 0u64;
    for seg in plan.segments {
        let id = seg.segment();
        let copy = seg
            .write(&mut |n| pacer.spent(n))
            .map_err(|e| format!("segment {id:016x} not re-sealed: {e}"))?;
        let len = copy.len();
        if ask(s, |done| ResealStep::Install { copy, done })? {
            segments += 1;
            bytes += len;
        }
    }
    ask(s, |done| ResealStep::Finish {
        plan: ResealDone {
            version: plan.version,
            before: plan.before,
            segments,
            bytes,
        },
        done,
    })
}

/// Sends one step to the stream's thread and waits for its answer.
fn ask<T>(
    s: &StreamRef,
    step: impl FnOnce(SyncSender<Result<T, String>>) -> ResealStep,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    if s.tx.send(Cmd::Reseal(step(tx))).is_err() {
        return Err("the stream stopped".into());
    }
    rx.recv_timeout(STEP_WAIT)
        .unwrap_or_else(|_| Err("the stream did not answer (stopped, or busy)".into()))
}

/// Keeps the rewriting at a byte rate, a block at a time, across a pass's streams, and
/// shows it in `/metrics` as it goes.
struct Pacer<'a> {
    pace: Pace,
    written: u64,
    /// What `/metrics` shows as rewritten.
    shown: &'a AtomicU64,
}

impl<'a> Pacer<'a> {
    fn new(per_sec: u64, shown: &'a AtomicU64) -> Self {
        Pacer {
            pace: Pace::new(per_sec),
            written: 0,
            shown,
        }
    }

    fn spent(&mut self, bytes: u64) {
        self.written += bytes;
        self.shown.fetch_add(bytes, Ordering::Relaxed);
        self.pace.wait_until_due(self.written);
    }
}
