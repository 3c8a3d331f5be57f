//! The running server's audit of its own store (issue 17): `$SYS.REQ.SERVER.<id>.AUDIT` and
//! `$SYS.REQ.SERVER.PING.AUDIT` for the operator (the whole store, or one account), and
//! `$JS.API.ACCOUNT.AUDIT` for a tenant (its own account only).
//!
//! The checks are [`crate::audit::audit_live`]'s, on a thread of their own, one audit at a
//! time per server (a second request is refused, not queued), paced at a byte rate so that
//! serving keeps the disk (reading waits whenever it ran ahead of the pace) and scheduled as
//! idle work so that serving keeps the CPU ([`yield_to_serving`]). The
//! progress is public in `/metrics` while it runs. Whoever asked gets the report in the reply.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::audit::{Progress, Report, Scope};

use super::JetStream;

/// The pace of a live audit unless the request names one: a quarter of what one core
/// decrypts and searches, so publishing keeps its latency (docs/PERFORMANCE.md measures it).
pub(crate) const DEFAULT_BYTES_PER_SEC: u64 = 32 << 20;

/// The request body (every field optional; an empty body audits the whole store).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct AuditRequest {
    /// Audit one account's streams only (the operator's request; a tenant's is always its
    /// own account).
    pub(crate) account: Option<String>,
    /// Strings that must not appear in any file or path.
    pub(crate) canaries: Vec<String>,
    /// The pace (0: the default).
    pub(crate) bytes_per_sec: u64,
}

impl AuditRequest {
    /// Parses a request body (empty: defaults).
    pub(crate) fn parse(body: &[u8]) -> Result<Self, String> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::default());
        }
        serde_json::from_slice(body).map_err(|e| format!("invalid audit request: {e}"))
    }
}

/// The server's one audit slot and what `/metrics` shows of it.
#[derive(Default)]
pub(crate) struct Auditor {
    /// The audit running now.
    current: Mutex<Option<Arc<Progress>>>,
    /// Audits finished since start.
    pub(crate) finished: AtomicU64,
    /// The last finished audit's exit code (0 clean; 255: none yet).
    pub(crate) last_exit_code: AtomicU64,
    /// Bytes the last finished audit read.
    pub(crate) last_bytes: AtomicU64,
}

/// What `/metrics` shows: running, phase name, bytes done and planned in the phase, bytes
/// read by the audit in all.
pub(crate) struct AuditStatus {
    pub(crate) running: bool,
    pub(crate) phase: &'static str,
    pub(crate) phase_done: u64,
    pub(crate) phase_total: u64,
    pub(crate) bytes_read: u64,
}

impl Auditor {
    /// Runs `f` with whether an audit runs, under the audit slot's lock: no audit starts
    /// until `f` returns.
    pub(crate) fn while_settled<T>(&self, f: impl FnOnce(bool) -> T) -> T {
        let slot = self.current.lock().unwrap_or_else(|p| p.into_inner());
        f(slot.is_some())
    }

    /// The audit running now, if any.
    pub(crate) fn status(&self) -> AuditStatus {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match current {
            Some(p) => {
                let (phase_done, phase_total) = p.position();
                AuditStatus {
                    running: true,
                    phase: p.phase().name(),
                    phase_done,
                    phase_total,
                    bytes_read: p.bytes_read(),
                }
            }
            None => AuditStatus {
                running: false,
                phase: "idle",
                phase_done: 0,
                phase_total: 0,
                bytes_read: 0,
            },
        }
    }
}

/// Makes the calling thread background work: on Linux, `SCHED_IDLE` — it runs only when a core
/// would otherwise idle, so the server's own threads are never delayed by it (a busy server
/// delays the audit instead). Best effort: where the policy cannot be set, the pace alone
/// bounds it.
pub(crate) fn yield_to_serving() {
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
        ThreadPriority, ThreadSchedulePolicy,
    };
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if let Err(e) = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle) {
        tracing::debug!(error = ?e, "background thread keeps the normal scheduling policy");
    }
}

/// Starts an audit of `scope` on a thread of its own; `done` gets the report. Refused while
/// another runs, or a re-sealing.
pub(crate) fn start(
    js: &Arc<JetStream>,
    scope: Scope,
    request: AuditRequest,
    done: impl FnOnce(Report) + Send + 'static,
) -> Result<(), &'static str> {
    let pace = match request.bytes_per_sec {
        0 => DEFAULT_BYTES_PER_SEC,
        n => n,
    };
    let progress = Progress::paced(pace);
    {
        let mut slot = js.auditor.current.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return Err("an audit is already running on this server");
        }
        // Decided under the audit slot's lock, as the re-sealer decides (`rekey.rs`): an audit
        // reads the store by the keys of its start, which a re-sealing changes under it.
        if js.resealer.running() {
            return Err("a data-key re-sealing is running on this server; audit once it is done");
        }
        *slot = Some(Arc::clone(&progress));
    }
    let js2 = Arc::clone(js);
    let spawned = std::thread::Builder::new()
        .name("audit".into())
        .spawn(move || {
            yield_to_serving();
            let js = js2;
            let root = js
                .meta
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .root()
                .to_path_buf();
            let opts = crate::audit::LiveOptions {
                root,
                meta: &js.meta,
                scope,
                canaries: request.canaries,
                progress: Arc::clone(&progress),
            };
            let mut report = crate::audit::audit_live(&opts);
            if let Some(cluster) = js.cluster() {
                cluster.name_raft_groups(&mut report.raft_groups);
            }
            let a = &js.auditor;
            a.finished.fetch_add(1, Ordering::Relaxed);
            a.last_exit_code
                .store(u64::from(report.exit_code()), Ordering::Relaxed);
            a.last_bytes.store(progress.bytes_read(), Ordering::Relaxed);
            *a.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
            tracing::info!(
                exit_code = report.exit_code(),
                findings = report.findings.len(),
                streams = report.streams.len(),
                account = report.account.as_deref().unwrap_or("*"),
                "live audit finished"
            );
            done(report);
        });
    if spawned.is_err() {
        *js.auditor.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
        return Err("could not start the audit thread");
    }
    Ok(())
}
