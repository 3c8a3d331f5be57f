//! The account's API thread: account info, stream lifecycle (create, update, delete),
//! names and list, and answers for calls about streams that do not exist.
//!
//! Stream lifecycle runs here, on one thread per account, so two creates of overlapping
//! streams cannot race: the overlap check and the registration happen in one place.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tracing::info;

use crate::jetstream::api::{
    body, err_reply, errors::ErrorKind, info_for_reply, ok_reply, optional_body, paging, ApiCall,
    ApiError,
};
use crate::jetstream::config::{parse_stream_config, subjects_collide, StorageType, StreamConfig};
use crate::jetstream::API_LEVEL;

use super::cmd::Cmd;
use super::sink::RouterSink;
use super::{lifecycle, stream_worker};
use super::{AccountJs, JetStream, API_IDLE};
use crate::server::NATS_COMPAT_VERSION;

/// A request for the API thread.
pub(crate) struct ApiMsg {
    pub(crate) call: ApiCall,
    pub(crate) reply: String,
    pub(crate) headers: Option<Bytes>,
    pub(crate) payload: Bytes,
}

/// The receiving end of an account's API queue. A bounded tokio channel: its slots are
/// allocated as calls arrive, where a `sync_channel` of the same hard capacity would touch
/// megabytes per account up front.
pub(crate) type ApiReceiver = tokio::sync::mpsc::Receiver<ApiMsg>;

impl ApiMsg {
    /// What the call counts against the account's API budget.
    pub(crate) fn size(&self) -> usize {
        (64 + self.reply.len() + self.headers.as_ref().map_or(0, Bytes::len) + self.payload.len())
            .max(crate::server::backpressure::MIN_COMMAND_COST)
    }
}

/// Serves `rx` until the server stops (this is a plain thread: `blocking_recv` parks it).
pub(crate) fn run(js: &Arc<JetStream>, acc: &Arc<AccountJs>, mut rx: ApiReceiver) {
    let mut sink = RouterSink::new(Arc::clone(&acc.account), js.next_seed());
    loop {
        // The timer is made inside `block_on`, where the runtime's context is entered.
        let wait = js
            .runtime
            .block_on(async { tokio::time::timeout(API_IDLE, rx.recv()).await });
        let next = match wait {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(_) => match acc.retire_api_thread(&mut rx) {
                Some(m) => m,
                None => return,
            },
        };
        let size = next.size();
        handle(js, acc, &mut sink, next);
        sink.flush();
        acc.api_done(size);
    }
}

fn required_level(headers: Option<&Bytes>) -> Option<u32> {
    let h = crate::proto::headers::HeaderMap::parse(headers?).ok()?;
    h.get("Nats-Required-Api-Level")?.trim().parse().ok()
}

fn handle(js: &Arc<JetStream>, acc: &Arc<AccountJs>, sink: &mut RouterSink, m: ApiMsg) {
    let call = &m.call;
    if acc.limits().is_none() {
        acc.api_errors.fetch_add(1, Ordering::Relaxed);
        sink.reply(
            &m.reply,
            err_reply(call, &ApiError::not_enabled_for_account()),
        );
        return;
    }
    if required_level(m.headers.as_ref()).is_some_and(|l| l > API_LEVEL) {
        acc.api_errors.fetch_add(1, Ordering::Relaxed);
        sink.reply(&m.reply, err_reply(call, &ApiError::required_api_level()));
        return;
    }
    // Calls about streams that do not exist (the dispatcher found no stream thread).
    match call {
        ApiCall::MsgNext(s, c) => {
            let subject = format!("$JS.API.CONSUMER.MSG.NEXT.{s}.{c}");
            sink.status(
                &m.reply,
                crate::proto::headers::no_responders_block(subject.as_bytes()),
            );
            return;
        }
        ApiCall::DirectGet(s, _) => {
            let subject = format!("$JS.API.DIRECT.GET.{s}");
            sink.status(
                &m.reply,
                crate::proto::headers::no_responders_block(subject.as_bytes()),
            );
            return;
        }
        _ => {}
    }
    if let Some(s) = call.stream_scoped() {
        // The stream may have been created between dispatch and now: forward.
        if let Some(st) = acc.streams.get(s) {
            let cmd = Cmd::Api {
                call: call.clone(),
                reply: m.reply,
                headers: m.headers,
                payload: m.payload,
            };
            let _ = st.tx.send_counted(&st.budget, cmd);
            return;
        }
        acc.api_errors.fetch_add(1, Ordering::Relaxed);
        sink.reply(&m.reply, err_reply(call, &ApiError::stream_not_found()));
        return;
    }
    if *call == ApiCall::AccountAudit {
        return audit_account(js, acc, sink, m);
    }
    let r = match call {
        ApiCall::AccountInfo => Ok(account_info(js, acc)),
        ApiCall::StreamCreate(name) => create(js, acc, name, &m.payload),
        ApiCall::StreamUpdate(name) => update(js, acc, name, &m.payload),
        ApiCall::StreamDelete(name) => delete(js, acc, name),
        ApiCall::StreamPeerRemove(name) => match js.cluster() {
            Some(cluster) => cluster.peer_remove(acc, name, &m.payload),
            None => Err(ApiError::new(
                503,
                10010,
                "JetStream clustering support required",
            )),
        },
        ApiCall::StreamNames | ApiCall::StreamList => {
            names_or_list(js, acc, &m.payload, matches!(call, ApiCall::StreamList))
        }
        _ => Err(ApiError::bad_request()),
    };
    let bytes = match r {
        Ok(v) => ok_reply(call, v),
        Err(e) => {
            acc.api_errors.fetch_add(1, Ordering::Relaxed);
            err_reply(call, &e)
        }
    };
    sink.reply(&m.reply, bytes);
}

/// `$JS.API.ACCOUNT.AUDIT`: a live audit of this account's streams in this server's store,
/// answered from the audit's thread when it is done (the API thread goes on serving).
fn audit_account(js: &Arc<JetStream>, acc: &Arc<AccountJs>, sink: &mut RouterSink, m: ApiMsg) {
    let call = ApiCall::AccountAudit;
    let fail = |sink: &mut RouterSink, e: ApiError| {
        acc.api_errors.fetch_add(1, Ordering::Relaxed);
        sink.reply(&m.reply, err_reply(&call, &e));
    };
    let mut request = match super::audit::AuditRequest::parse(&m.payload) {
        Ok(r) => r,
        Err(e) => return fail(sink, ApiError::with_detail(ErrorKind::InvalidJson, &e)),
    };
    // A tenant audits its own account, whatever the body says.
    if request.account.as_ref().is_some_and(|a| *a != acc.name) {
        return fail(sink, ApiError::bad_request());
    }
    request.account = Some(acc.name.clone());
    let (account, seed, reply) = (Arc::clone(&acc.account), js.next_seed(), m.reply.clone());
    let max_payload = js.max_payload;
    let scope = crate::audit::Scope::Account(acc.name.clone());
    let started = super::audit::start(js, scope, request, move |report| {
        let call = ApiCall::AccountAudit;
        let mut sink = RouterSink::new(account, seed);
        let body = ok_reply(&call, json!({ "report": report }));
        let body = if body.len() > max_payload {
            err_reply(
                &call,
                &ApiError::with_detail(
                    ErrorKind::AuditReportTooLarge,
                    &format!(
                        "the audit report ({} bytes) is larger than max_payload",
                        body.len()
                    ),
                ),
            )
        } else {
            body
        };
        sink.reply(&reply, body);
        sink.flush();
    });
    if let Err(e) = started {
        fail(sink, ApiError::with_detail(ErrorKind::AuditRunning, e));
    }
}

fn lim(v: i64) -> i64 {
    if v <= 0 {
        -1
    } else {
        v
    }
}

/// `$JS.API.INFO`: usage and every limits field.
pub(crate) fn account_info(js: &JetStream, acc: &AccountJs) -> Value {
    let streams = acc.streams.all();
    let (mut memory, mut storage, mut consumers) = (0u64, 0u64, 0u64);
    let (mut reserved_memory, mut reserved_storage) = (0u64, 0u64);
    for s in &streams {
        let b = s.usage.bytes.load(Ordering::Relaxed);
        let reserved = u64::try_from(s.cfg.max_bytes).unwrap_or(0);
        match s.cfg.storage {
            StorageType::Memory => {
                memory += b;
                reserved_memory += reserved;
            }
            StorageType::File => {
                storage += b;
                reserved_storage += reserved;
            }
        }
        consumers += s.usage.consumers.load(Ordering::Relaxed);
    }
    let l = acc.limits().unwrap_or_default();
    let mut v = json!({
        "memory": memory,
        "storage": storage,
        "reserved_memory": reserved_memory,
        "reserved_storage": reserved_storage,
        "streams": cluster_names(js, acc, None).len().max(streams.len()),
        "consumers": consumers,
        "limits": {
            "max_memory": lim(l.max_memory),
            "max_storage": lim(l.max_file),
            "max_streams": lim(l.max_streams),
            "max_consumers": lim(l.max_consumers),
            "max_ack_pending": lim(l.max_ack_pending),
            "memory_max_stream_bytes": lim(l.memory_max_stream_bytes),
            "storage_max_stream_bytes": lim(l.store_max_stream_bytes),
            "max_bytes_required": l.max_bytes_required,
        },
        "api": {
            "level": API_LEVEL,
            // Counted before it is answered, this request is left out, as nats-server's
            // figure does (async-nats's `query_account_requests`: 0, then 1).
            "total": acc.api_total.load(Ordering::Relaxed).saturating_sub(1),
            "errors": acc.api_errors.load(Ordering::Relaxed),
        },
    });
    if let Some(d) = &js.domain {
        v["domain"] = json!(d);
    }
    v
}

fn overlap(acc: &AccountJs, name: &str, cfg: &StreamConfig) -> bool {
    acc.streams.subjects_taken(name, &cfg.subjects)
}

/// The normalised config of a create or update request on `STREAM.<op>.<name>` (a missing
/// name is taken from the subject; a different one is refused).
fn requested_config(name: &str, payload: &[u8]) -> Result<StreamConfig, ApiError> {
    let mut cfg = parse_stream_config(payload)?;
    if cfg.name.is_empty() {
        cfg.name = name.to_owned();
    }
    if cfg.name != name {
        return Err(ApiError::stream_name_mismatch());
    }
    cfg.normalize(NATS_COMPAT_VERSION)?;
    Ok(cfg)
}

fn create(
    js: &Arc<JetStream>,
    acc: &Arc<AccountJs>,
    name: &str,
    payload: &[u8],
) -> Result<Value, ApiError> {
    let cfg = requested_config(name, payload)?;
    if let Some(cur) = acc.streams.get(name) {
        if !cur.cfg.same_as(&cfg) {
            return Err(ApiError::stream_name_in_use());
        }
        let (itx, irx) = std::sync::mpsc::sync_channel(1);
        let _ = cur.tx.send(Cmd::Info(itx));
        let mut info = irx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| ApiError::new(500, 10049, "stream did not answer"))?;
        info_for_reply(&mut info, true);
        return Ok(body(&info));
    }
    if overlap(acc, name, &cfg) {
        return Err(ApiError::subjects_overlap());
    }
    let l = acc.limits().unwrap_or_default();
    // In a cluster the account's streams on every server count.
    let count = cluster_names(js, acc, None).len().max(acc.streams.len());
    if l.max_streams > 0 && count as i64 >= l.max_streams {
        return Err(ApiError::max_streams());
    }
    check_reservation(js, acc, &cfg)?;
    check_placement(js, &cfg)?;
    if cfg.num_replicas > 1 {
        let cluster = js.cluster().ok_or_else(ApiError::replicas_not_supported)?;
        return cluster.create_stream(acc, cfg);
    }
    // In a cluster, the name and subjects are claimed in the meta group first.
    let cluster = js.cluster();
    if let Some(c) = &cluster {
        c.claim(&acc.name, &cfg)?;
    }
    let info = match stream_worker::create(js, acc, cfg) {
        Ok(info) => info,
        Err(e) => {
            if let Some(c) = &cluster {
                let _ = c.release(&acc.name, name);
            }
            return Err(e);
        }
    };
    info!(account = %acc.name, stream = %name, "stream created");
    Ok(body(&info))
}

/// A clustered server honours a stream's `placement` or refuses the stream with
/// nats-server's answers (spec cluster.md 4.4): `preferred` is for stepdowns only
/// (`500/10052`); the cluster must be this one (`400/10005`); the tags must be carried by
/// every replica's server (`server_tags`): a replicated stream's are chosen among the servers
/// that carry them, an R1 stream stays on this server, which must (`400/10005 … tags not
/// matched`). A server without a cluster has nowhere else to put a stream and takes it as
/// it is.
fn check_placement(js: &JetStream, cfg: &StreamConfig) -> Result<(), ApiError> {
    let (Some(p), Some(cluster)) = (&cfg.placement, js.cluster()) else {
        return Ok(());
    };
    if p.preferred.is_some() {
        return Err(ApiError::new(
            500,
            10052,
            "preferred server not permitted in placement",
        ));
    }
    if p.cluster
        .as_ref()
        .is_some_and(|c| c != cluster.cluster_name())
    {
        return Err(ApiError::new(400, 10005, "no suitable peers for placement"));
    }
    if cfg.num_replicas <= 1 && !cluster.fits(&js.server_name, cfg) {
        return Err(super::cluster::no_suitable_peers(cfg));
    }
    Ok(())
}

/// Refuses a stream whose `max_bytes` cannot fit the account's or the server's storage
/// limit, and streams without `max_bytes` when the account requires it.
fn check_reservation(js: &JetStream, acc: &AccountJs, cfg: &StreamConfig) -> Result<(), ApiError> {
    let l = acc.limits().unwrap_or_default();
    let (acct_max, server_max, per_stream) = match cfg.storage {
        StorageType::File => (l.max_file, js.max_store, l.store_max_stream_bytes),
        StorageType::Memory => (l.max_memory, js.max_memory, l.memory_max_stream_bytes),
    };
    let insufficient = || match cfg.storage {
        StorageType::File => ApiError::insufficient_storage(),
        StorageType::Memory => ApiError::insufficient_memory(),
    };
    if l.max_bytes_required && cfg.max_bytes <= 0 {
        return Err(ApiError::from_kind(ErrorKind::MaxBytesRequired));
    }
    if cfg.max_bytes > 0 {
        if per_stream > 0 && cfg.max_bytes > per_stream {
            return Err(ApiError::from_kind(ErrorKind::StreamMaxBytesOverAccount));
        }
        if (acct_max > 0 && cfg.max_bytes > acct_max)
            || (server_max > 0 && cfg.max_bytes > server_max)
        {
            return Err(insufficient());
        }
    }
    Ok(())
}

/// `STREAM.UPDATE`: a replicated stream's update goes through the meta group (every replica
/// applies it), any other is this node's.
fn update(
    js: &Arc<JetStream>,
    acc: &Arc<AccountJs>,
    name: &str,
    payload: &[u8],
) -> Result<Value, ApiError> {
    let cfg = requested_config(name, payload)?;
    check_placement(js, &cfg)?;
    let cur = acc.streams.get(name);
    let replicated = cur
        .as_ref()
        .map_or(cfg.num_replicas > 1, |c| c.group.is_some());
    if !replicated {
        if cfg.num_replicas > 1 {
            // This server's R1 stream becomes replicated (see cluster::promote).
            let cluster = js.cluster().ok_or_else(ApiError::replicas_not_supported)?;
            let cur = cur.ok_or_else(ApiError::stream_not_found)?;
            cur.cfg.check_update(&cfg)?;
            if overlap(acc, name, &cfg) {
                return Err(ApiError::subjects_overlap());
            }
            return cluster.promote(acc, cfg);
        }
        if let (Some(c), true) = (js.cluster(), cur.is_some()) {
            c.claim(&acc.name, &cfg)?;
        }
        return lifecycle::update(acc, name, cfg);
    }
    let cluster = js.cluster().ok_or_else(ApiError::replicas_not_supported)?;
    let cur = cur.ok_or_else(ApiError::stream_not_found)?;
    cur.cfg.check_update(&cfg)?;
    if overlap(acc, name, &cfg) {
        return Err(ApiError::subjects_overlap());
    }
    if cfg.num_replicas != cur.cfg.num_replicas {
        // Down to 1 too: the stream keeps its group, now of one member (docs/cluster.md).
        return cluster.rescale(acc, cfg);
    }
    cluster.update_stream(acc, cfg)
}

/// `STREAM.DELETE`: a replicated stream is deleted through the meta group (every replica
/// erases its copy), any other here.
fn delete(js: &Arc<JetStream>, acc: &Arc<AccountJs>, name: &str) -> Result<Value, ApiError> {
    let s = acc
        .streams
        .get(name)
        .ok_or_else(ApiError::stream_not_found)?;
    if let Some(cluster) = js.cluster() {
        if s.group.is_some() {
            return cluster.delete_stream(acc, name);
        }
        // The name is released in the cluster first: without a quorum, nothing is deleted.
        cluster.release(&acc.name, name)?;
    }
    lifecycle::delete(js, acc, name)
}

/// The names of every stream of the account in the cluster: this server's, and those the
/// meta table knows (replicated streams, other servers' R1 streams).
fn cluster_names(js: &JetStream, acc: &AccountJs, subject: Option<&str>) -> Vec<String> {
    let takes = |cfg: &StreamConfig| {
        subject.is_none_or(|f| cfg.subjects.iter().any(|x| subjects_collide(x, f)))
    };
    let mut names: std::collections::BTreeSet<String> = acc
        .streams
        .all()
        .into_iter()
        .filter(|s| takes(&s.cfg))
        .map(|s| s.cfg.name.clone())
        .collect();
    if let Some(c) = js.cluster() {
        names.extend(
            c.known_streams(&acc.name)
                .into_iter()
                .filter(|cfg| takes(cfg))
                .map(|cfg| cfg.name),
        );
    }
    names.into_iter().collect()
}

/// How long `STREAM.LIST` waits for the infos of streams other servers host.
const REMOTE_INFO_WAIT: Duration = Duration::from_secs(2);

fn names_or_list(
    js: &JetStream,
    acc: &Arc<AccountJs>,
    payload: &[u8],
    list: bool,
) -> Result<Value, ApiError> {
    let body = optional_body(payload)?;
    let (offset, subject) = paging(body.as_ref());
    if !list {
        let names = cluster_names(js, acc, subject.as_deref());
        let total = names.len();
        let limit = 1024;
        let v: Vec<String> = names.into_iter().skip(offset).take(limit).collect();
        return Ok(json!({"total": total, "offset": offset, "limit": limit, "streams": v}));
    }
    let names = cluster_names(js, acc, subject.as_deref());
    let total = names.len();
    let limit = 256;
    let page: Vec<String> = names.into_iter().skip(offset).take(limit).collect();
    // Ask every stream of the page first, then collect: the streams here answer from their
    // own store threads at once, so the page waits for its slowest stream rather than the
    // sum of all their rounds (one of which may be another stream's fsync); the streams
    // other servers host are asked over routes meanwhile.
    let asked: Vec<_> = page
        .iter()
        .map(|name| {
            acc.streams.get(name).map(|s| {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                let _ = s.tx.send(Cmd::Info(tx));
                rx
            })
        })
        .collect();
    let remote: Vec<(String, Bytes)> = page
        .iter()
        .zip(&asked)
        .filter(|(_, here)| here.is_none())
        .map(|(name, _)| (format!("$JS.API.STREAM.INFO.{name}"), Bytes::new()))
        .collect();
    let mut answers = acc
        .gather(&js.server_name, js.next_seed(), &remote, REMOTE_INFO_WAIT)
        .into_iter();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut infos = Vec::new();
    let mut missing = Vec::new();
    for (name, here) in page.into_iter().zip(asked) {
        match here {
            Some(rx) => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if let Ok(mut v) = rx.recv_timeout(left) {
                    info_for_reply(&mut v, false);
                    infos.push(serde_json::to_value(&v).unwrap_or_default());
                }
            }
            None => {
                let info = answers
                    .next()
                    .flatten()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .filter(|v| v.get("error").is_none());
                match info {
                    Some(mut v) => {
                        if let Some(o) = v.as_object_mut() {
                            o.remove("type");
                        }
                        infos.push(v);
                    }
                    None => missing.push(name),
                }
            }
        }
    }
    let mut v = json!({"total": total, "offset": offset, "limit": limit, "streams": infos});
    if !missing.is_empty() {
        // nats-server's field for streams whose info did not arrive in time.
        v["missing"] = json!(missing);
    }
    Ok(v)
}
