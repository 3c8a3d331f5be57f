//! What owns one stream: its [`Worker`], served by one store thread ([`shard`](super::shard)).
//!
//! The shard serves a worker when a command arrives or the stream's next deadline
//! (redelivery, pull expiry, heartbeat, age expiry, housekeeping) is due; the worker takes
//! everything queued — consecutive publishes become one group commit — and carries out the
//! engine's effects in order ([`Worker::execute`]): the catalog writes they ask for (consumer
//! and stream configs) before the replies that follow them. Consumer state is persisted
//! here too, from the consumers' dirty flags: an ack that asked for a reply is
//! answered only after the consumer's state file is durable; other state is written at most
//! once a second and when the stream stops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tracing::{error, info, warn};

use crate::consensus::machine::{ImageSink, ImageSource};
use crate::jetstream::api::types::{StreamInfo, StreamInfoRequest};
use crate::jetstream::api::{
    body, err_reply, info_for_reply, ok_reply, optional_body, paging, request, ApiCall, ApiError,
};
use crate::jetstream::config::{parse_create_request, ConsumerConfig, StorageType, StreamConfig};
use crate::jetstream::consumer::{Consumer, SavedState};
use crate::jetstream::effects::Everyone;
use crate::jetstream::image;
use crate::jetstream::stream::{store_limits, CreateSubject, Incoming, Stream};
use crate::jetstream::{now_nanos, Effect, Effects};
use crate::store::meta::{ConsumerId, StreamCheckpoint, StreamId};
use crate::store::segment::StreamKeys;
use crate::store::{FileStore, FileStoreConfig, MemStore, OsIo, StreamStore};

use super::cmd::{cmd_size, Cmd, ResealDone, ResealPlan, ResealStep};
use super::origin_read::{self, Asking, Parked};
use super::replica::{self, Replica, ReplicaView};
use super::round::{Input, Round};
use super::shard::{Served, ShardTask, StreamQueue};
use super::sink::{AccountInterest, RouterSink};
use super::sourcing::{self, Copiers, CopyBell};
use super::table::SnapshotCell;
use super::{AccountJs, JetStream, Published, StreamRef, Usage};
use crate::server::backpressure::{Budget, STREAM_INTAKE_BYTES};
use crate::server::NATS_COMPAT_VERSION;

/// The envelope persisted in the catalog for streams and consumers.
pub(crate) fn envelope<T: serde::Serialize>(cfg: &T, created: i64) -> Vec<u8> {
    json!({"config": cfg, "created": created})
        .to_string()
        .into_bytes()
}

/// A stream's catalog envelope; a replica's names its group, which is what tells a start to
/// erase the local copy and rebuild it from the group ([`is_replica_copy`]) — every write of
/// the envelope must keep it, a config update's included.
fn stream_envelope(
    cfg: &StreamConfig,
    created: i64,
    group: Option<crate::consensus::GroupId>,
) -> Vec<u8> {
    match group {
        None => envelope(cfg, created),
        Some(g) => json!({"config": cfg, "created": created, "raft_group": g})
            .to_string()
            .into_bytes(),
    }
}

fn open_envelope(bytes: &[u8]) -> Option<(Value, i64)> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    let created = v.get("created").and_then(Value::as_i64).unwrap_or(0);
    Some((v.get("config")?.clone(), created))
}

/// Where a replica's local copy closes a segment (a stream of this server alone: the store's
/// default, 64 MiB). The copy is rebuilt from its group at every start and holds no
/// durability of its own (the Raft log and snapshots do); with smaller segments a capped
/// stream's old messages leave the disk sooner — 64 MiB segments kept ~116 MB for an R3
/// stream of 10,000 × 1 KiB (docs/PERFORMANCE.md stop 31).
const REPLICA_SEGMENT_BYTES: u64 = 16 << 20;

/// Where a stream of this server alone closes a segment when nothing smaller is called for.
const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// The smallest segment limits choose.
const MIN_SEGMENT_BYTES: u64 = 1 << 20;

/// A key-value bucket's segments (a per-subject limit and no byte cap): its old revisions
/// are removed as new ones come, and each segment leaves the disk only once all of it is.
const PER_SUBJECT_SEGMENT_BYTES: u64 = 8 << 20;

/// The segment size of a stream's store: removed messages leave the disk a whole segment at a
/// time, so a stream capped by bytes gets segments of a quarter of its cap (1–64 MiB) and one
/// capped per subject (a key-value bucket) 8 MiB; what limits removed then stays on disk for
/// at most about a quarter of the cap. Without a cap, 64 MiB (a replica's copy: 16 MiB).
/// Applies to segments opened from now on; a store's existing segments keep their size.
fn segment_bytes(cfg: &StreamConfig, deferred: bool) -> u64 {
    let most = if deferred {
        REPLICA_SEGMENT_BYTES
    } else {
        DEFAULT_SEGMENT_BYTES
    };
    let by_limits = if cfg.max_bytes > 0 {
        (cfg.max_bytes.unsigned_abs() / 4).max(MIN_SEGMENT_BYTES)
    } else if cfg.max_msgs_per_subject > 0 {
        PER_SUBJECT_SEGMENT_BYTES
    } else {
        most
    };
    by_limits.min(most)
}

/// Opens a file stream's segment log from the metadata layer (`deferred`: a replica's local
/// copy, written without an fsync per round).
pub(crate) fn open_file_store(
    js: &JetStream,
    id: StreamId,
    cfg: &StreamConfig,
    deferred: bool,
) -> Result<Box<dyn StreamStore>, String> {
    let meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
    let handle = meta.open_stream(id).map_err(|e| e.to_string())?;
    let mut keys = StreamKeys::new(
        handle.store_uuid,
        *handle.stream_id.as_bytes(),
        handle.dek_version,
        handle.dek,
    );
    for v in 1..handle.dek_version {
        if let Ok(old) = meta.stream_key(id, v) {
            keys = keys.with_previous(v, old);
        }
    }
    let checkpoint = stream_checkpoint(&meta, id);
    drop(meta);
    let mut fcfg = FileStoreConfig::new(handle.dir.clone());
    // The log must reach the mark the catalog recorded: a segment cut back (rolled back) to
    // an earlier size takes the stream offline instead of serving it shorter.
    fcfg.min_durable = checkpoint.mark;
    fcfg.limits = store_limits(cfg);
    fcfg.defer_sync = deferred || js.sync_interval.is_some();
    fcfg.max_segment_bytes = segment_bytes(cfg, deferred);
    let store = FileStore::open(Arc::new(OsIo), keys, fcfg).map_err(|e| e.to_string())?;
    if let Some(t) = &store.report().torn_tail {
        warn!(
            stream = %cfg.name,
            file = %t.file.display(),
            offset = t.offset,
            bytes = t.bytes,
            blocks = t.blocks,
            "torn tail cut at recovery (an unacknowledged final write)"
        );
    }
    Ok(Box::new(store))
}

/// The rollback checkpoint the catalog holds for a stream (empty when it has none).
fn stream_checkpoint(meta: &crate::store::meta::MetaStore, id: StreamId) -> StreamCheckpoint {
    meta.stream_checkpoint(id)
        .and_then(StreamCheckpoint::decode)
        .unwrap_or_default()
}

/// A memory stream's store.
pub(crate) fn mem_store(cfg: &StreamConfig) -> Box<dyn StreamStore> {
    Box::new(MemStore::new(store_limits(cfg)))
}

/// Loads every stream (and its consumers) of `acc` from the sealed store and starts them.
pub(crate) fn load_streams(js: &Arc<JetStream>, acc: &Arc<AccountJs>) {
    let metas = js
        .meta
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .list_streams(&acc.name);
    load(js, acc, metas);
}

/// Whether a catalog envelope is a replicated stream's local copy (see [`create_replica`]).
fn is_replica_copy(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes)
        .ok()
        .is_some_and(|v| v.get("raft_group").is_some())
}

fn load(js: &Arc<JetStream>, acc: &Arc<AccountJs>, metas: Vec<crate::store::meta::StreamMeta>) {
    for sm in metas {
        if is_replica_copy(&sm.config) {
            // A replica is rebuilt from its group's log (server/jetstream/cluster/): the
            // copy of the last run goes, keys first.
            let mut meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
            match meta.erase_stream(sm.stream_id) {
                Ok(()) => {
                    if let Some(dir) = meta.erased_stream_files(sm.stream_id) {
                        let _ = crate::store::meta::remove_erased_stream_files(&dir);
                    }
                    info!(account = %acc.name, stream = %sm.name, "replica's local copy erased; it is rebuilt from its group's log");
                }
                Err(e) => {
                    warn!(account = %acc.name, stream = %sm.name, error = %e, "a replica's old local copy could not be erased");
                }
            }
            continue;
        }
        let Some((cfg_v, created)) = open_envelope(&sm.config) else {
            error!(account = %acc.name, stream = %sm.name, "stream config in the catalog is unreadable; stream not served");
            continue;
        };
        let cfg: StreamConfig = match serde_json::from_value(cfg_v) {
            Ok(c) => c,
            Err(e) => {
                error!(account = %acc.name, stream = %sm.name, error = %e, "stream config in the catalog is unreadable; stream not served");
                continue;
            }
        };
        let store = match open_file_store(js, sm.stream_id, &cfg, false) {
            Ok(s) => s,
            Err(e) => {
                error!(account = %acc.name, stream = %sm.name, error = %e, "stream could not be opened; it is offline");
                continue;
            }
        };
        let checkpoint = stream_checkpoint(
            &js.meta.lock().unwrap_or_else(|p| p.into_inner()),
            sm.stream_id,
        );
        let now = now_nanos();
        let mut stream = Stream::new(cfg.clone(), created, store, &js.server_name, now);
        let mut ids = HashMap::new();
        let mut rolled_back = None;
        let consumers = js
            .meta
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .list_consumers(sm.stream_id)
            .unwrap_or_default();
        for cm in consumers {
            let Some((ccfg_v, ccreated)) = open_envelope(&cm.config) else {
                error!(stream = %sm.name, consumer = %cm.name, "consumer config unreadable; consumer not served");
                continue;
            };
            let Ok(ccfg) = serde_json::from_value::<ConsumerConfig>(ccfg_v) else {
                error!(stream = %sm.name, consumer = %cm.name, "consumer config unreadable; consumer not served");
                continue;
            };
            let mut c = Consumer::new(cm.name.clone(), ccfg, ccreated, stream.store());
            let state = js
                .meta
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .load_consumer_state(sm.stream_id, cm.consumer_id);
            // A state file older than the catalog records (or missing although the catalog
            // recorded one) is a rollback: the stream goes offline, nothing is redelivered.
            let found = match &state {
                Ok(Some(st)) => Some(st.generation),
                _ => None,
            };
            if let Err(why) = checkpoint.check_consumer(cm.consumer_id, found) {
                rolled_back = Some(format!("consumer {}: {why}", cm.name));
                break;
            }
            match state {
                Ok(Some(st)) => match serde_json::from_slice::<SavedState>(&st.bytes) {
                    Ok(saved) => {
                        c.restore(saved, now);
                        c.generation = st.generation;
                    }
                    Err(e) => {
                        error!(stream = %sm.name, consumer = %cm.name, error = %e, "consumer state unreadable; consumer not served");
                        continue;
                    }
                },
                Ok(None) => {}
                Err(e) => {
                    error!(stream = %sm.name, consumer = %cm.name, error = %e, "consumer state could not be loaded; consumer not served");
                    continue;
                }
            }
            ids.insert(cm.name.clone(), cm.consumer_id);
            stream.restore_consumer(c);
        }
        if let Some(why) = rolled_back {
            error!(account = %acc.name, stream = %sm.name, reason = %why, "stream is offline: its files are older than the catalog (rollback)");
            stream.close();
            continue;
        }
        let st = stream.store().state();
        info!(account = %acc.name, stream = %sm.name, messages = st.msgs, consumers = stream.consumers.len(), "stream restored");
        spawn(js, acc, stream, Some(sm.stream_id), ids, None);
    }
}

/// Hands `stream` to a store thread and registers it with the account.
pub(crate) fn spawn(
    js: &Arc<JetStream>,
    acc: &Arc<AccountJs>,
    stream: Stream,
    id: Option<StreamId>,
    consumer_ids: HashMap<String, ConsumerId>,
    replica: Option<Replica>,
) {
    let cfg = stream.cfg.clone();
    let replica_tx = replica.as_ref().map(|r| Arc::clone(&r.tx));
    let view = replica.as_ref().map(|r| Arc::clone(&r.view));
    let replicated = replica.is_some();
    let group = replica.as_ref().map(|r| r.group);
    let usage = Arc::new(Usage::default());
    let snapshot = Arc::new(SnapshotCell::default());
    snapshot.publish(published(&stream, now_nanos()));
    let stream = Arc::new(Mutex::new(stream));
    let budget = Budget::new(STREAM_INTAKE_BYTES);
    let erased = Arc::new(AtomicBool::new(false));
    let bell = CopyBell::new();
    let copiers = Arc::new(Copiers::default());
    let last_rung = lock(&stream).store().state().last_seq;
    let worker = Worker {
        erased: Arc::clone(&erased),
        bell: Arc::clone(&bell),
        copiers: Arc::clone(&copiers),
        last_rung,
        copy_at: None,
        asking: Asking::default(),
        parked: Parked::default(),
        js: Arc::clone(js),
        acc: Arc::clone(acc),
        sink: RouterSink::new(Arc::clone(&acc.account), js.next_seed()),
        fx: AccountInterest::effects(Arc::clone(&acc.account), js.next_seed()),
        stream: Arc::clone(&stream),
        id,
        consumer_ids,
        usage: Arc::clone(&usage),
        storage: cfg.storage,
        snapshot: Arc::clone(&snapshot),
        budget: Arc::clone(&budget),
        changed_since_snapshot: false,
        last_snapshot: now_nanos(),
        last_checkpoint: now_nanos(),
        changed_since_checkpoint: false,
        last_persist: 0,
        last_sync: now_nanos(),
        version: NATS_COMPAT_VERSION.to_owned(),
        replica,
        view,
        replicated,
        routes: true,
        away: None,
        deferred: Vec::new(),
    };
    let tx = js.shards.adopt(Box::new(worker));
    bell.connect(tx.downgrade());
    if let Some(cell) = replica_tx {
        let _ = cell.set(tx.downgrade());
    }
    let subs = acc.subscribe_stream(&cfg.name, &tx, &budget, &cfg.subjects);
    acc.streams.insert(Arc::new(StreamRef {
        tx,
        stream,
        cfg,
        id,
        subs,
        usage,
        snapshot,
        budget,
        erased,
        copiers,
        group,
    }));
}

/// Sets a stream's usage (`[bytes, msgs, consumers]`) and moves its account's and the
/// server's totals by the difference. Deltas, so that the API thread zeroing a deleted stream
/// and its worker's last round leave the totals right in either order.
pub(crate) fn set_usage(
    usage: &Usage,
    storage: StorageType,
    totals: [&super::table::UsageTotals; 2],
    [bytes, msgs, consumers]: [u64; 3],
) {
    let old_bytes = usage.bytes.swap(bytes, Ordering::Relaxed);
    let old_consumers = usage.consumers.swap(consumers, Ordering::Relaxed);
    usage.msgs.store(msgs, Ordering::Relaxed);
    let delta = bytes.wrapping_sub(old_bytes);
    if delta != 0 {
        for t in totals {
            let field = match storage {
                StorageType::File => &t.file,
                StorageType::Memory => &t.memory,
            };
            field.fetch_add(delta, Ordering::Relaxed);
        }
    }
    let delta = consumers.wrapping_sub(old_consumers);
    if delta != 0 {
        totals[0].consumers.fetch_add(delta, Ordering::Relaxed);
    }
}

/// The metadata store, unless the stream's keys were erased: the API thread sets `erased`
/// while it holds this lock, so no write for the stream reaches the metadata after its
/// deletion committed.
fn live_meta<'a>(
    js: &'a JetStream,
    erased: &AtomicBool,
) -> Option<std::sync::MutexGuard<'a, crate::store::meta::MetaStore>> {
    let meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
    (!erased.load(Ordering::Acquire)).then_some(meta)
}

/// Drops an erased stream's store unsynced and removes its files, then puts the space
/// reserve back (the files gave room for it). Idempotent: the API thread does it when the
/// stream is idle, its thread otherwise (whoever holds the stream's lock).
pub(crate) fn remove_files(js: &JetStream, st: &mut Stream, id: Option<StreamId>) {
    st.abandon();
    let Some(id) = id else { return };
    let dir = js
        .meta
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .erased_stream_files(id);
    if let Some(dir) = dir {
        if let Err(e) = crate::store::meta::remove_erased_stream_files(&dir) {
            warn!(stream = %st.cfg.name, error = %e, "a deleted stream's files were not all removed; the next start removes them");
        }
        js.restore_reserve();
    }
}

/// The stream's view for monitoring.
fn published(st: &Stream, now: i64) -> Published {
    Published {
        info: st.info(&StreamInfoRequest::default(), now),
        consumers: st
            .consumers
            .values()
            .map(|c| c.info(&st.cfg.name, st.store(), now))
            .collect(),
    }
}

/// How often a changing stream records its rollback checkpoint in the catalog.
const CHECKPOINT_EVERY_NS: i64 = 10_000_000_000;

/// How often a stream that changed republishes its snapshot unasked.
const SNAPSHOT_EVERY_NS: i64 = 1_000_000_000;

/// One stream and everything its store thread needs to serve it.
pub(crate) struct Worker {
    js: Arc<JetStream>,
    acc: Arc<AccountJs>,
    /// Routes what the engine said, after each call that may have acknowledged a publish and
    /// at the end of the round.
    sink: RouterSink,
    /// What the engine said in this round and the worker's own replies, in order.
    fx: Effects,
    /// The stream; its store thread holds the lock for a whole round. Readers on other tasks only
    /// ever `try_lock` it (see [`try_read`]).
    stream: Arc<Mutex<Stream>>,
    id: Option<StreamId>,
    consumer_ids: HashMap<String, ConsumerId>,
    usage: Arc<Usage>,
    /// The stream's storage type (which usage total its bytes count toward).
    storage: StorageType,
    snapshot: Arc<SnapshotCell>,
    /// The intake budget publishes were counted against (given back after each round).
    budget: Arc<Budget>,
    /// The stream was deleted: its keys are erased (see [`live_meta`]).
    erased: Arc<AtomicBool>,
    /// Rung by the origins this stream copies from (mirror, sources).
    bell: Arc<CopyBell>,
    /// The streams that copy from this one: rung when its last sequence moved.
    copiers: Arc<Copiers>,
    /// The last sequence the copiers were rung for.
    last_rung: u64,
    /// When a copy pass must run without a ring (a missing or busy origin).
    copy_at: Option<i64>,
    /// Reads of origins other servers hold (see [`origin_read`]).
    asking: Asking,
    /// Copiers' reads of this stream waiting for its next message.
    parked: Parked,
    changed_since_snapshot: bool,
    last_snapshot: i64,
    /// Last rollback checkpoint written to the catalog (unix nanos), and whether anything
    /// happened since.
    last_checkpoint: i64,
    changed_since_checkpoint: bool,
    last_persist: i64,
    /// Last interval-mode sync (unix nanos).
    last_sync: i64,
    version: String,
    /// A replicated stream's link to its group (taken out while a round runs).
    replica: Option<Replica>,
    /// Its view of the group, for info answers.
    view: Option<Arc<ReplicaView>>,
    /// The stream is replicated: its state is rebuilt from its group's log at start, so the
    /// catalog keeps no consumer state or checkpoints for it.
    replicated: bool,
    /// Replies are routed (false while a round of another replica runs; deliveries always are).
    routes: bool,
    /// A snapshot to install on a thread apart from the shard ([`Served::Away`]).
    away: Option<AwayInstall>,
    /// Commands taken in the round that stopped at `away`: served first when it is back.
    deferred: Vec<Cmd>,
}

/// A snapshot image the worker installs apart from its shard, and who waits for it.
struct AwayInstall {
    image: ImageSource,
    done: tokio::sync::oneshot::Sender<Result<(), String>>,
    _slot: ImageSlot,
}

/// Which parts of a round run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A stream of this node alone: everything.
    Single,
    /// A committed round of a replicated stream: the commands and the timers, at the round's
    /// time; nothing of this node's own housekeeping that changes state.
    Applied,
    /// A replicated stream's local commands (info, config updates, stop, reads): no timers.
    Local,
}

fn lock(s: &Mutex<Stream>) -> std::sync::MutexGuard<'_, Stream> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Answers a read-only call (`DIRECT.GET`, `STREAM.MSG.GET`) on the caller's task when the
/// stream is idle, saving the hop to its thread. Returns false when the stream is busy (the
/// caller queues the call for the thread instead): a read never waits behind an fsync here.
pub(crate) fn try_read(
    stream: &Mutex<Stream>,
    account: &Arc<crate::server::account::Account>,
    call: &ApiCall,
    reply: &str,
    payload: &[u8],
) -> bool {
    let Ok(st) = stream.try_lock() else {
        return false;
    };
    let mut sink = RouterSink::new(Arc::clone(account), 0x5EED);
    // A read's answer goes to its requester whether or not anybody listens: no interest
    // lookup (and no second match cache) on the KV-get path.
    let mut fx = Effects::new(Box::new(Everyone));
    match call {
        ApiCall::DirectGet(_, subject) => {
            if !st.cfg.allow_direct {
                return false;
            }
            st.direct_get(payload, subject.as_deref(), reply, &mut fx);
        }
        ApiCall::MsgGet(_) => {
            let r = optional_body(payload).and_then(|b| st.msg_get(b.as_ref()));
            let bytes = match r {
                Ok(v) => ok_reply(call, v),
                Err(e) => err_reply(call, &e),
            };
            fx.reply(reply, bytes);
        }
        _ => return false,
    }
    drop(st);
    sink.execute(&mut fx);
    true
}

/// Sends `bytes` to `reply` as an answer from `account`'s JetStream (off a stream's thread).
pub(crate) fn answer(account: &Arc<crate::server::account::Account>, reply: &str, bytes: Bytes) {
    let mut sink = RouterSink::new(Arc::clone(account), 0x5EED);
    let mut fx = Effects::new(Box::new(Everyone));
    fx.reply(reply, bytes);
    sink.execute(&mut fx);
}

/// Most commands taken in one round (bounds the latency of the first one's answer).
const MAX_ROUND: usize = 8192;
/// How often dirty consumer state is written when nobody waits for it.
const PERSIST_EVERY_NS: i64 = 1_000_000_000;

impl ShardTask for Worker {
    fn serve(&mut self, queue: &StreamQueue) -> Served {
        let shared = Arc::clone(&self.stream);
        let mut round = std::mem::take(&mut self.deferred);
        let (taken, disconnected) = queue.take(MAX_ROUND.saturating_sub(round.len()));
        round.extend(taken);
        let full = round.len() >= MAX_ROUND;
        let mut st = lock(&shared);
        if self.erased.load(Ordering::Acquire) {
            self.remove(&mut st, round);
            return Served::Stopped;
        }
        if self.round(&mut st, round) {
            return Served::Stopped;
        }
        if self.away.is_some() {
            return Served::Away;
        }
        if disconnected {
            // Every sender is gone (the stream left the table without a stop).
            self.shutdown(&mut st);
            return Served::Stopped;
        }
        if full {
            Served::More
        } else {
            Served::Idle
        }
    }

    fn next_wake(&self) -> Option<i64> {
        self.next_wake_of(&lock(&self.stream))
    }

    fn close(&mut self) {
        let shared = Arc::clone(&self.stream);
        self.shutdown(&mut lock(&shared));
    }

    fn work_away(&mut self) {
        if let Some(away) = self.away.take() {
            let shared = Arc::clone(&self.stream);
            self.install_and_answer(&mut lock(&shared), away.image, away.done);
        }
    }
}

impl Worker {
    /// When the stream must be served without a command (unix nanos), or `None` to wait until
    /// one arrives: the engine's next timer (redelivery, pull expiry, heartbeats, max_age,
    /// TTLs, inactive consumers) and housekeeping that is due only when something changed —
    /// dirty consumer state, a snapshot or checkpoint behind the stream, interval-mode syncs.
    fn next_wake_of(&self, st: &Stream) -> Option<i64> {
        if let Some(r) = &self.replica {
            let r = &r.view;
            // Timers are the leader's to propose, and never while its proposal is in flight
            // (its outcome rings the stream); a follower only publishes its snapshot.
            let mut d = None;
            let in_flight = self.replica.as_ref().is_some_and(|r| r.in_flight.is_some());
            if !in_flight && r.is_leader() {
                d = st.next_deadline();
                // The leader copies for the group (see `copy_sources`).
                if !st.source_links().is_empty() {
                    if self.bell.is_pending() {
                        d = Some(0);
                    } else if let Some(t) = self.copy_at {
                        d = Some(d.map_or(t, |x: i64| x.min(t)));
                    }
                }
            }
            if self.changed_since_snapshot {
                let t = self.last_snapshot.saturating_add(SNAPSHOT_EVERY_NS);
                d = Some(d.map_or(t, |x: i64| x.min(t)));
            }
            if let Some(t) = self.parked.next_deadline() {
                d = Some(d.map_or(t, |x: i64| x.min(t)));
            }
            return d;
        }
        let mut d = st.next_deadline();
        let mut take = |t: i64| d = Some(d.map_or(t, |x: i64| x.min(t)));
        if let Some(t) = self.parked.next_deadline() {
            take(t);
        }
        if let Some(iv) = self.js.sync_interval {
            take(
                self.last_sync
                    .saturating_add(i64::try_from(iv.as_nanos()).unwrap_or(i64::MAX)),
            );
        }
        if self.persisted(st) && st.consumers.values().any(|c| c.dirty && !c.cfg.mem_storage) {
            take(self.last_persist.saturating_add(PERSIST_EVERY_NS));
        }
        if self.changed_since_snapshot {
            take(self.last_snapshot.saturating_add(SNAPSHOT_EVERY_NS));
        }
        if self.changed_since_checkpoint {
            take(self.last_checkpoint.saturating_add(CHECKPOINT_EVERY_NS));
        }
        if !st.source_links().is_empty() {
            if self.bell.is_pending() {
                take(0);
            }
            if let Some(t) = self.copy_at {
                take(t);
            }
        }
        d
    }

    /// Processes one round; returns true when the stream stopped.
    fn round(&mut self, st: &mut Stream, cmds: Vec<Cmd>) -> bool {
        match self.replica.take() {
            None => self.run(st, cmds, now_nanos(), Mode::Single),
            Some(mut replica) => {
                let stopped = self.replicated_round(st, cmds, &mut replica);
                self.replica = Some(replica);
                stopped
            }
        }
    }

    /// A replicated stream's round: inputs taken from the queue are proposed (after the
    /// proposal in flight), committed rounds run, local commands run at once.
    fn replicated_round(&mut self, st: &mut Stream, cmds: Vec<Cmd>, replica: &mut Replica) -> bool {
        let now = now_nanos();
        let mut local = Vec::new();
        let mut cmds = cmds.into_iter();
        while let Some(cmd) = cmds.next() {
            match cmd {
                Cmd::Apply(round, done) => {
                    if !local.is_empty()
                        && self.run(st, std::mem::take(&mut local), now, Mode::Local)
                    {
                        return true;
                    }
                    let intake = replica.applied(&round);
                    self.routes = round.origin == replica.me;
                    let now = round.now;
                    st.take_push_interest(&round.interest, now);
                    let cmds = round
                        .inputs
                        .into_iter()
                        .filter_map(|input| match input {
                            Input::Api {
                                call:
                                    call @ (ApiCall::StreamLeaderStepdown(_)
                                    | ApiCall::ConsumerLeaderStepdown(..)),
                                reply,
                                payload,
                                ..
                            } => {
                                self.step_down(st, replica, &call, &reply, &payload, now);
                                None
                            }
                            other => Some(replica::cmd_of(other)),
                        })
                        .collect();
                    // Every replica delivers a committed round to its own subscribers; the
                    // leader also to servers without a replica (clients connected there).
                    let view = Arc::clone(&replica.view);
                    self.sink
                        .set_remote_with(Box::new(move || view.members_if_leader()));
                    // Every replica must decide alike: pull requesters count as listening.
                    self.fx.assume_requesters(true);
                    // ... and push deliver subjects as recorded, by the answers the leader
                    // carries in its rounds (`Round::interest`).
                    self.fx.push_by_record(true);
                    let stopped = self.run(st, cmds, round.now, Mode::Applied);
                    self.fx.push_by_record(false);
                    self.fx.assume_requesters(false);
                    self.sink.set_remote(Some(Vec::new()));
                    self.routes = true;
                    self.budget.give_back(intake);
                    let _ = done.send(());
                    if stopped {
                        return true;
                    }
                }
                // Re-sealing is this node's own files: not proposed, taken in its turn.
                Cmd::Reseal(step) => {
                    if !local.is_empty()
                        && self.run(st, std::mem::take(&mut local), now, Mode::Local)
                    {
                        return true;
                    }
                    self.reseal(st, step, now);
                }
                Cmd::TakeImage(sink, done) => {
                    if !local.is_empty()
                        && self.run(st, std::mem::take(&mut local), now, Mode::Local)
                    {
                        return true;
                    }
                    take_image(st, sink, done);
                }
                Cmd::InstallImage(image, done) => {
                    if !local.is_empty()
                        && self.run(st, std::mem::take(&mut local), now, Mode::Local)
                    {
                        return true;
                    }
                    // A large image takes long to install: on a thread apart when one is free
                    // (the shard's other streams go on), the round's later commands after it.
                    if let Some(slot) = ImageSlot::take() {
                        self.away = Some(AwayInstall {
                            image,
                            done,
                            _slot: slot,
                        });
                        self.deferred.extend(cmds);
                        return false;
                    }
                    self.install_and_answer(st, image, done);
                }
                Cmd::LeaderElected => self.leader_elected(st, replica),
                Cmd::QuorumLost => self.quorum_lost(st, replica),
                Cmd::OriginAnswer {
                    mirror,
                    origin,
                    nonce,
                    body,
                } => self.origin_answer(st, (mirror, &origin, &nonce, &body), now, Some(replica)),
                Cmd::Proposed(r) => {
                    if let Some((round, intake)) = replica.proposed(r) {
                        self.refuse(st, round);
                        self.budget.give_back(intake);
                    }
                }
                other => match replica::input_of(other) {
                    Ok(input) => {
                        replica.pending_intake += cmd_size(&replica::cmd_of(input.clone()));
                        replica.pending.push(input);
                    }
                    Err(cmd) => local.push(*cmd),
                },
            }
        }
        if self.run(st, local, now, Mode::Local) {
            return true;
        }
        self.copy_sources(st, Some(replica), now);
        let due = st.next_deadline().is_some_and(|t| t <= now);
        let tick = due && replica.is_leader();
        let fx = &mut self.fx;
        replica.propose(now, tick, || {
            st.push_interest_changes(&mut |subject| fx.has_interest(subject))
        });
        false
    }

    /// Installs `image` and tells `done` how it went.
    fn install_and_answer(
        &mut self,
        st: &mut Stream,
        image: ImageSource,
        done: tokio::sync::oneshot::Sender<Result<(), String>>,
    ) {
        let r = self.install_image(st, image);
        if let Err(e) = &r {
            error!(stream = %st.cfg.name, error = %e, "a snapshot could not be installed");
        }
        let _ = done.send(r);
    }

    /// Replaces the stream's state by `image` (its group's snapshot), over a new empty
    /// store. The stream keeps its current config (configs come from the meta group, not the
    /// stream's log).
    fn install_image(&mut self, st: &mut Stream, source: ImageSource) -> Result<(), String> {
        let (mut head, messages) = image::read(source).map_err(|e| e.to_string())?;
        head.cfg = st.cfg.clone();
        let store = self.fresh_store(st)?;
        let now = now_nanos();
        *st = Stream::from_image_parts(head, messages, store, &self.js.server_name, now)
            .map_err(|e| e.to_string())?;
        self.changed_since_snapshot = true;
        let (bytes, msgs) = st.usage();
        self.set_usage(bytes, msgs, st.consumers.len() as u64);
        Ok(())
    }

    /// The stream's store emptied: its files removed and a new store opened in their place.
    fn fresh_store(&mut self, st: &mut Stream) -> Result<Box<dyn StreamStore>, String> {
        st.abandon();
        let Some(id) = self.id else {
            return Ok(mem_store(&st.cfg));
        };
        let dir = self
            .js
            .meta
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open_stream(id)
            .map_err(|e| e.to_string())?
            .dir;
        for entry in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
            let path = entry.map_err(|e| e.to_string())?.path();
            let r = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            r.map_err(|e| format!("{}: {e}", path.display()))?;
        }
        open_file_store(&self.js, id, &st.cfg, true)
    }

    /// The stream's replicas as the leader's advisories list them: the leader first.
    fn advisory_replicas(replica: &Replica) -> (String, Vec<Value>) {
        let info = replica.view.cluster_info();
        let mut replicas = vec![json!({
            "name": info.leader,
            "current": true,
            "active": 0,
            "peer": crate::consensus::peer_id(&info.leader),
        })];
        replicas.extend(info.replicas.iter().map(|p| json!(p)));
        (info.leader, replicas)
    }

    /// An advisory of this stream (`kind`: `stream_leader_elected`, ...) and one for each
    /// of its consumers (`consumer_<what>`: their state lives in the stream's group, so
    /// they share its leader and its quorum), to the stream's account (spec cluster.md 4.8).
    fn group_advisories(&mut self, st: &Stream, what: &str, subject: &str, body: &Value) {
        let id = || data_encoding::BASE64URL_NOPAD.encode(&crate::crypto::random_id());
        let now = crate::timefmt::rfc3339_nanos(now_nanos());
        let mut advisory = body.clone();
        advisory["type"] = json!(format!("io.nats.jetstream.advisory.v1.stream_{what}"));
        advisory["id"] = json!(id());
        advisory["timestamp"] = json!(now);
        advisory["stream"] = json!(st.cfg.name);
        let mut sent = vec![(
            format!("$JS.EVENT.ADVISORY.STREAM.{subject}.{}", st.cfg.name),
            advisory.clone(),
        )];
        for name in st.consumers.keys() {
            advisory["type"] = json!(format!("io.nats.jetstream.advisory.v1.consumer_{what}"));
            advisory["id"] = json!(id());
            advisory["consumer"] = json!(name);
            sent.push((
                format!(
                    "$JS.EVENT.ADVISORY.CONSUMER.{subject}.{}.{name}",
                    st.cfg.name
                ),
                advisory.clone(),
            ));
        }
        for (to, body) in &sent {
            self.fx.reply(to, Bytes::from(body.to_string()));
        }
        // The system account gets a copy of each, naming the account (spec cluster.md 4.8).
        if let Some(sys) = &self.js.system_account {
            if !Arc::ptr_eq(sys, &self.acc.account) {
                let mut sink = RouterSink::new(Arc::clone(sys), self.js.next_seed());
                for (to, mut body) in sent {
                    body["account"] = json!(self.acc.name);
                    body["id"] = json!(id());
                    sink.reply(&to, Bytes::from(body.to_string()));
                }
                sink.flush();
            }
        }
    }

    /// This node now leads the stream's group: `$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<S>`
    /// (and `CONSUMER.LEADER_ELECTED.<S>.<C>`) to the stream's account, its replicas the
    /// leader included.
    fn leader_elected(&mut self, st: &Stream, replica: &Replica) {
        if !replica.is_leader() {
            return;
        }
        // The new leader copies for the group from where the links stand.
        self.bell.ring_self();
        let (leader, replicas) = Self::advisory_replicas(replica);
        let body = json!({ "leader": leader, "replicas": replicas });
        self.group_advisories(st, "leader_elected", "LEADER_ELECTED", &body);
    }

    /// This node leads the stream's group but no quorum answers it:
    /// `$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.<S>` (and `CONSUMER.QUORUM_LOST.<S>.<C>`),
    /// repeated while it lasts (consensus/mux.rs `on_leadership`).
    fn quorum_lost(&mut self, st: &Stream, replica: &Replica) {
        warn!(account = %self.acc.name, stream = %st.cfg.name, "replicated stream has NO quorum, stalled");
        let (_, replicas) = Self::advisory_replicas(replica);
        let body = json!({ "replicas": replicas });
        self.group_advisories(st, "quorum_lost", "QUORUM_LOST", &body);
    }

    /// A committed stepdown (of the stream's group; a consumer's is its stream's, as the
    /// consumer's state lives in that group): every replica plays its part in the handover
    /// (consensus/handover.rs); the replica that proposed it answers.
    fn step_down(
        &mut self,
        st: &Stream,
        replica: &Replica,
        call: &ApiCall,
        reply: &str,
        payload: &[u8],
        now: i64,
    ) {
        let result = (|| {
            if let ApiCall::ConsumerLeaderStepdown(_, c) = call {
                if !st.consumers.contains_key(c) {
                    return Err(ApiError::consumer_not_found());
                }
            }
            let body = optional_body(payload)?;
            let preferred = body
                .as_ref()
                .and_then(|b| b.pointer("/placement/preferred"))
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty());
            let next = replica.view.step_down_target(preferred, now)?;
            let _runtime = replica.runtime.enter();
            replica.node.hand_over(replica.group, next);
            Ok(json!({"success": true}))
        })();
        let bytes = match result {
            Ok(v) => ok_reply(call, v),
            Err(e) => err_reply(call, &e),
        };
        self.fx.reply(reply, bytes);
    }

    /// Answers the senders of a round that was not acknowledged: publishes and API calls get
    /// `503 / 10008`; the round may still commit later (then its effects follow).
    fn refuse(&mut self, st: &Stream, round: Round) {
        let e = ApiError::new(503, 10008, "JetStream system temporarily unavailable");
        for input in round.inputs {
            match input {
                Input::Publish(m) => {
                    if let Some(r) = m.reply {
                        let body = json!({"error": e.to_json(), "stream": st.cfg.name, "seq": 0});
                        self.fx.reply(&r, Bytes::from(body.to_string()));
                    }
                }
                // A pull request is not an API call with an answer: it is left unfilled, to
                // expire as any pull nothing arrived for (its client pulls again).
                Input::Api {
                    call: ApiCall::MsgNext(..),
                    ..
                } => {}
                Input::Api { call, reply, .. } => self.fx.reply(&reply, err_reply(&call, &e)),
                Input::Ack { .. } | Input::FlowControl { .. } => {}
                // Not stored: the link did not move, and the leader reads it again.
                Input::Sourced(_) => self.copy_at = Some(now_nanos()),
            }
        }
        self.execute(st);
    }

    /// Runs commands as one round at `now`; returns true when the stream stopped.
    fn run(&mut self, st: &mut Stream, cmds: Vec<Cmd>, now: i64, mode: Mode) -> bool {
        let mut publishes = Vec::new();
        let mut ack_replies: Vec<String> = Vec::new();
        let mut stop: Option<Option<SyncSender<()>>> = None;
        let mut snapshot_waiters = Vec::new();
        let mut image_waiters = Vec::new();
        let mut reseal_waiters = Vec::new();
        let mut intake = 0usize;
        if !cmds.is_empty() {
            self.changed_since_snapshot = true;
            self.changed_since_checkpoint = true;
        }
        for cmd in cmds {
            if mode != Mode::Applied {
                intake += cmd_size(&cmd);
            }
            if !matches!(cmd, Cmd::Publish(_)) && !publishes.is_empty() {
                self.publish(st, std::mem::take(&mut publishes), now);
            }
            match cmd {
                Cmd::Publish(m) => publishes.push(m),
                Cmd::Api {
                    call,
                    reply,
                    headers,
                    payload,
                } => self.api(st, &call, &reply, headers.as_ref(), &payload, now),
                Cmd::Ack {
                    subject,
                    reply,
                    payload,
                } => {
                    st.ack(&subject, &payload, reply.as_deref(), &mut self.fx, now);
                    if let Some(r) = reply {
                        ack_replies.push(r);
                    }
                }
                Cmd::FlowControl { subject } => st.flow_control(&subject),
                Cmd::Read {
                    call,
                    reply,
                    payload,
                } => self.api(st, &call, &reply, None, &payload, now),
                Cmd::Info(tx) => {
                    let mut info = st.info(&StreamInfoRequest::default(), now);
                    self.cluster_info(&mut info);
                    let _ = tx.send(info);
                }
                Cmd::Update(cfg, tx) => {
                    // New sources, or a mirror dropped: the next pass sees the new links.
                    self.bell.ring_self();
                    let r = st
                        .update(*cfg, &mut self.fx)
                        .map(|()| st.info(&StreamInfoRequest::default(), now));
                    // The new config is on disk before the caller hears of it.
                    self.execute(st);
                    let _ = tx.send(r);
                }
                Cmd::Snapshot(done) => snapshot_waiters.push(done),
                Cmd::SourceReady => {}
                Cmd::Sourced(b) => sourcing::take_replicated(st, *b, &mut self.fx, now),
                Cmd::SourceRead { reply, payload } => {
                    if let Some((reply, body)) =
                        origin_read::read(st, &mut self.parked, reply, &payload, now)
                    {
                        self.fx.reply(&reply, body);
                    }
                }
                Cmd::OriginAnswer {
                    mirror,
                    origin,
                    nonce,
                    body,
                } => self.origin_answer(st, (mirror, &origin, &nonce, &body), now, None),
                Cmd::EndPullsForShutdown(done) => {
                    for c in st.consumers.values_mut() {
                        c.server_shutdown(&mut self.fx);
                    }
                    self.execute(st);
                    let _ = done.try_send(());
                }
                Cmd::EndPulls => {
                    for c in st.consumers.values_mut() {
                        c.deleted(&mut self.fx);
                    }
                }
                Cmd::Stop(done) => {
                    stop = Some(done);
                    break;
                }
                // Only replicated streams get these, and `replicated_round` takes them.
                Cmd::Apply(_, done) => drop(done),
                // A stream of this server becoming replicated: its image once this round
                // is stored and answered (a replicated stream's worker takes these itself).
                Cmd::TakeImage(sink, done) => image_waiters.push((sink, done)),
                Cmd::Reseal(step) => reseal_waiters.push(step),
                Cmd::InstallImage(_, done) => {
                    let _ = done.send(Err("the stream is not replicated".to_owned()));
                }
                Cmd::Proposed(_) | Cmd::LeaderElected | Cmd::QuorumLost => {}
            }
        }
        if !publishes.is_empty() {
            self.publish(st, publishes, now);
        }
        if mode == Mode::Single {
            self.copy_sources(st, None, now);
        }
        if mode != Mode::Local {
            st.tick(&mut self.fx, now);
        }
        if let Some(iv) = self.js.sync_interval.filter(|_| mode == Mode::Single) {
            if now.saturating_sub(self.last_sync)
                >= i64::try_from(iv.as_nanos()).unwrap_or(i64::MAX)
            {
                st.sync_pending();
                self.last_sync = now;
            }
        }
        self.execute(st);
        let must = !ack_replies.is_empty();
        if self.persist_state(st, must, now) {
            for r in ack_replies {
                self.fx.reply(&r, Bytes::new());
            }
        }
        let (bytes, msgs) = st.usage();
        self.set_usage(bytes, msgs, st.consumers.len() as u64);
        if self.changed_since_checkpoint
            && now.saturating_sub(self.last_checkpoint) >= CHECKPOINT_EVERY_NS
        {
            self.persist_checkpoint(st);
        }
        if !snapshot_waiters.is_empty()
            || (self.changed_since_snapshot
                && now.saturating_sub(self.last_snapshot) >= SNAPSHOT_EVERY_NS)
        {
            let mut fresh = published(st, now);
            // A replicated stream's monitoring view shows its group, as its info does.
            self.cluster_info(&mut fresh.info);
            self.snapshot.publish(fresh);
            self.changed_since_snapshot = false;
            self.last_snapshot = now;
            for w in snapshot_waiters {
                let _ = w.try_send(());
            }
        }
        self.execute(st);
        for (sink, done) in image_waiters {
            take_image(st, sink, done);
        }
        for step in reseal_waiters {
            self.reseal(st, step, now);
        }
        // Only now (stored, fsync'd, acked) is the intake worked off: waiting publishers read on.
        self.budget.give_back(intake);
        let last = st.store().state().last_seq;
        let stored = last != self.last_rung;
        if stored {
            self.last_rung = last;
            self.copiers.ring();
        }
        self.answer_parked(st, stored, now);
        if let Some(done) = stop {
            self.shutdown(st);
            if let Some(d) = done {
                let _ = d.send(());
            }
            return true;
        }
        false
    }

    /// Copies from the origins of a mirror or sourcing stream, when rung or due (see
    /// [`sourcing`](super::sourcing)). Over its quota a stream copies nothing (it tries again
    /// later, as a publish would be refused). A replicated stream copies on its leader while
    /// no proposal is in flight, and what it read joins the next round: the next pass waits
    /// for that round to be applied, which moves the links.
    fn copy_sources(&mut self, st: &mut Stream, mut replica: Option<&mut Replica>, now: i64) {
        if st.source_links().is_empty() {
            return;
        }
        if let Some(r) = replica.as_deref() {
            // A batch waiting to be proposed (a remote origin's answer) moves the links first.
            let waiting = r.pending.iter().any(|i| matches!(i, Input::Sourced(_)));
            if r.in_flight.is_some() || waiting || !r.is_leader() {
                return;
            }
        }
        let due = self.copy_at.is_some_and(|t| t <= now);
        if !self.bell.take() && !due {
            return;
        }
        if self.over_quota(st).is_some() {
            self.copy_at = Some(now.saturating_add(1_000_000_000));
            return;
        }
        let fx = &mut self.fx;
        let asking = &mut self.asking;
        let (js, bell) = (&self.js, &self.bell);
        let replicated = replica.is_some();
        self.copy_at = sourcing::copy(
            js,
            &self.acc,
            bell,
            st,
            now,
            |st, idx, b| match replica.as_deref_mut() {
                None => st.take_sourced(idx, b, fx, now),
                Some(r) => {
                    if let Some(p) = sourcing::proposal(st, idx, b, fx, now) {
                        r.pending.push(Input::Sourced(p));
                    }
                }
            },
            |home, link| {
                asking.ask(
                    &js.server_name,
                    js.next_seed(),
                    bell.queue(),
                    home,
                    link,
                    now,
                )
            },
        );
        if !replicated {
            self.execute(st);
        }
    }

    /// Answers the reads of remote copiers that waited for this stream's next message
    /// ([`origin_read::Parked`]): all of them once it `stored` something, else those whose
    /// wait is over. Sent on the worker's own router sink: a follower's round of another
    /// replica routes no replies, and these are this replica's own.
    fn answer_parked(&mut self, st: &Stream, stored: bool, now: i64) {
        let due = self.parked.answers(st, stored, now);
        if due.is_empty() {
            return;
        }
        for (reply, body) in due {
            self.sink.reply(&reply, body);
        }
        self.sink.flush();
    }

    /// An answer from a remote origin's host ([`origin_read`]): stored here, or — on a
    /// replicated stream's leader — proposed like a batch read here. The next read of that
    /// origin is due at once when it had something, after a poll interval when not.
    fn origin_answer(
        &mut self,
        st: &mut Stream,
        (mirror, origin, nonce, body): (bool, &str, &str, &[u8]),
        now: i64,
        replica: Option<&mut Replica>,
    ) {
        if !self.asking.answered(mirror, origin, nonce) {
            return;
        }
        let Some(idx) = st
            .source_links()
            .iter()
            .position(|l| l.mirror == mirror && l.cfg.name == origin)
        else {
            return;
        };
        let next = match origin_read::batch_of(body) {
            Ok(batch) => {
                let next = if batch.more || !batch.msgs.is_empty() {
                    now
                } else {
                    now.saturating_add(origin_read::POLL_NS)
                };
                match replica {
                    None => st.take_sourced(idx, batch, &mut self.fx, now),
                    Some(r) if r.is_leader() => {
                        if let Some(p) = sourcing::proposal(st, idx, batch, &mut self.fx, now) {
                            r.pending.push(Input::Sourced(p));
                        }
                    }
                    Some(_) => {}
                }
                next
            }
            Err(e) => {
                st.source_failed(idx, ApiError::new(404, 10059, e));
                now.saturating_add(1_000_000_000)
            }
        };
        self.copy_at = Some(self.copy_at.map_or(next, |t| t.min(next)));
    }

    /// Stores a batch of publishes unless the account or the server is out of storage.
    fn publish(&mut self, st: &mut Stream, batch: Vec<Incoming>, now: i64) {
        if let Some(e) = self.over_quota(st) {
            for m in batch {
                if let Some(r) = m.reply {
                    let body = json!({"error": e.to_json(), "stream": st.cfg.name, "seq": 0});
                    self.fx.reply(&r, Bytes::from(body.to_string()));
                }
            }
            return;
        }
        st.publish(batch, &mut self.fx, now);
        // The batch is stored and fsync'd: its pub-acks go out now, not after the rest of the
        // round (consumer state, checkpoint, snapshot).
        self.execute(st);
    }

    /// Publishes this stream's usage and moves the account's and the server's totals by the
    /// difference (wrapping adds of the delta: the totals are sums of every stream's figure).
    fn set_usage(&self, bytes: u64, msgs: u64, consumers: u64) {
        set_usage(
            &self.usage,
            self.storage,
            [&self.acc.used, &self.js.used],
            [bytes, msgs, consumers],
        );
    }

    /// The storage error publishes get when the account's (`max_file`/`max_memory`) or the
    /// server's (`max_file_store`/`max_memory_store`) limit for this stream's storage type is
    /// used up. Reads the usage totals (atomics): no other stream and no lock is touched.
    fn over_quota(&self, st: &Stream) -> Option<ApiError> {
        let storage = st.cfg.storage;
        let l = self.acc.limits().unwrap_or_default();
        let (acct_max, server_max, acct_used, server_used) = match storage {
            StorageType::File => (
                l.max_file,
                self.js.max_store,
                &self.acc.used.file,
                &self.js.used.file,
            ),
            StorageType::Memory => (
                l.max_memory,
                self.js.max_memory,
                &self.acc.used.memory,
                &self.js.used.memory,
            ),
        };
        let used = |a: &std::sync::atomic::AtomicU64| {
            i64::try_from(a.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
        };
        if acct_max > 0 && used(acct_used) >= acct_max {
            return Some(ApiError::account_resources_exceeded());
        }
        let server_full = server_max > 0 && used(server_used) >= server_max;
        server_full.then(|| match storage {
            StorageType::File => ApiError::insufficient_storage(),
            StorageType::Memory => ApiError::insufficient_memory(),
        })
    }

    /// Whether the account may have one more consumer.
    fn consumer_allowed(&self) -> bool {
        let max = self.acc.limits().map_or(-1, |l| l.max_consumers);
        if max <= 0 {
            return true;
        }
        let total = self.acc.used.consumers.load(Ordering::Relaxed);
        i64::try_from(total).unwrap_or(i64::MAX) < max
    }

    fn shutdown(&mut self, st: &mut Stream) {
        self.asking.close();
        for c in st.consumers.values_mut() {
            c.dirty = true;
        }
        let _ = self.persist_state(st, true, now_nanos());
        // The mark is taken while the log is open (and synced): it is what a clean stop
        // leaves durable.
        st.sync_pending();
        self.persist_checkpoint(st);
        st.close();
        // The stream no longer counts toward its account's and the server's totals, and
        // nobody waits for its intake any more.
        self.set_usage(0, 0, 0);
        self.budget.close();
    }

    /// Takes one step of re-sealing the stream's files (`rekey.rs` drives them; the segments
    /// are rewritten on its thread, so the stream's publishes wait only for a step).
    ///
    /// A replicated stream's replica re-seals its own store the same way: its segments are
    /// this node's, sealed with its data key like any stream's (the group's entries and
    /// snapshots are sealed with the group's key, which this does not rotate). A snapshot
    /// installed meanwhile replaces the store under the current key, and a copy of a segment
    /// it replaced is not put in place (`FileStore::reseal_install` checks the segment's key
    /// version and length).
    fn reseal(&mut self, st: &mut Stream, step: ResealStep, now: i64) {
        match step {
            ResealStep::Begin { rotate, done } => {
                let _ = done.try_send(self.reseal_begin(st, rotate));
            }
            ResealStep::Install { copy, done } => {
                let _ = done.try_send(
                    st.reseal_install(copy)
                        .map_err(|e| format!("re-sealing failed: {e}")),
                );
            }
            ResealStep::Finish { plan, done } => {
                let _ = done.try_send(self.reseal_finish(st, plan, now));
            }
        }
    }

    /// Rotates the stream's data key (`rotate`; else keeps the current one, finishing an
    /// interrupted re-sealing): new blocks are sealed with it from now on. Answers the
    /// segments older keys sealed.
    fn reseal_begin(&mut self, st: &mut Stream, rotate: bool) -> Result<ResealPlan, String> {
        let Some(id) = self.id else {
            return Err(MEMORY_RESEAL.to_owned());
        };
        let (handle, before) = {
            let Some(mut meta) = live_meta(&self.js, &self.erased) else {
                return Err("the stream was deleted".to_owned());
            };
            let before = meta
                .stream_meta(id)
                .map(|m| m.dek_versions)
                .unwrap_or_default();
            let handle = if rotate {
                meta.rotate_dek(id)
            } else {
                meta.open_stream(id)
            }
            .map_err(|e| e.to_string())?;
            (handle, before)
        };
        let version = handle.dek_version;
        let segments = st
            .reseal_begin(version, handle.dek)
            .map_err(|e| format!("re-sealing failed: {e}"))?
            .ok_or_else(|| MEMORY_RESEAL.to_owned())?;
        Ok(ResealPlan {
            version,
            before,
            segments,
        })
    }

    /// Ends a re-sealing: consumer state files are sealed again under the current key, the
    /// checkpoint moved, and the older data keys no segment depends on any more destroyed.
    fn reseal_finish(
        &mut self,
        st: &mut Stream,
        plan: ResealDone,
        now: i64,
    ) -> Result<Value, String> {
        let Some(id) = self.id else {
            return Err(MEMORY_RESEAL.to_owned());
        };
        let still_used = st.reseal_finish();
        // A replicated stream's consumers are kept in its group, not in state files.
        for c in st.consumers.values_mut().filter(|_| !self.replicated) {
            if !c.cfg.mem_storage {
                c.dirty = true;
            }
        }
        if !self.persist_state(st, true, now) {
            return Err("a consumer's state could not be re-sealed".to_owned());
        }
        self.changed_since_checkpoint = true;
        self.persist_checkpoint(st);
        let Some(mut meta) = live_meta(&self.js, &self.erased) else {
            return Err("the stream was deleted".to_owned());
        };
        let version = plan.version;
        let mut destroyed = Vec::new();
        let mut kept = Vec::new();
        for v in plan.before.into_iter().filter(|v| *v != version) {
            if still_used.contains(&v) {
                kept.push(json!({"version": v, "why": "segments are still sealed with it"}));
                continue;
            }
            match meta.drop_dek_version(id, v) {
                Ok(()) => destroyed.push(v),
                Err(e) => kept.push(json!({"version": v, "why": e.to_string()})),
            }
        }
        drop(meta);
        info!(stream = %st.cfg.name, version, destroyed = ?destroyed, segments = plan.segments, "stream re-sealed under a new data key");
        Ok(json!({
            "stream": st.cfg.name,
            "dek_version": version,
            "destroyed_versions": destroyed,
            "kept_versions": kept,
            "segments_rewritten": plan.segments,
            "bytes_rewritten": plan.bytes,
        }))
    }

    /// Records the stream's durable mark and its consumers' state generations in the
    /// catalog (see `store::meta::StreamCheckpoint`): at shutdown and at most every
    /// [`CHECKPOINT_EVERY_NS`] while it changes. Both only ever grow, so an older checkpoint
    /// is still a valid lower bound after a crash.
    fn persist_checkpoint(&mut self, st: &Stream) {
        let Some(id) = self.id.filter(|_| !self.replicated) else {
            return;
        };
        if !self.persisted(st) {
            return;
        }
        let cp = StreamCheckpoint {
            mark: st.store().durable_mark(),
            consumers: st
                .consumers
                .iter()
                .filter(|(_, c)| !c.cfg.mem_storage && c.generation > 0)
                .filter_map(|(n, c)| Some((*self.consumer_ids.get(n)?, c.generation)))
                .collect(),
        };
        let Some(mut meta) = live_meta(&self.js, &self.erased) else {
            return;
        };
        let r = meta.persist_stream_checkpoint(id, &cp.encode());
        drop(meta);
        if let Err(e) = r {
            warn!(stream = %st.cfg.name, error = %e, "could not record the stream's checkpoint");
        }
        self.last_checkpoint = now_nanos();
        self.changed_since_checkpoint = false;
    }

    /// The stream was deleted (its keys are erased already): what is still queued is
    /// answered as for a stream that does not exist — except a pull request for one of its
    /// consumers, which was sent before the delete and ends as a waiting one does —, waiting
    /// pulls end with `409 Consumer Deleted`, the store is dropped unsynced and its files
    /// removed.
    fn remove(&mut self, st: &mut Stream, queued: Vec<Cmd>) {
        for cmd in queued {
            if let Cmd::Api { call, reply, .. } | Cmd::Read { call, reply, .. } = cmd {
                if reply.is_empty() {
                    continue;
                }
                match &call {
                    ApiCall::MsgNext(_, c) if st.consumers.contains_key(c) => {
                        let block =
                            crate::jetstream::consumer::status_block(409, "Consumer Deleted", &[]);
                        self.fx.status(&reply, block);
                    }
                    _ => self
                        .fx
                        .reply(&reply, err_reply(&call, &ApiError::stream_not_found())),
                }
            }
        }
        for c in st.consumers.values_mut() {
            c.deleted(&mut self.fx);
        }
        self.execute(st);
        self.set_usage(0, 0, 0);
        self.budget.close();
        remove_files(&self.js, st, self.id);
    }

    fn persisted(&self, st: &Stream) -> bool {
        self.id.is_some() && st.cfg.storage == StorageType::File
    }

    fn persist_stream_config(&self, st: &Stream) {
        let Some(id) = self.id else { return };
        // The view stays while a round runs (the replica link is taken out meanwhile).
        let group = self.view.as_ref().map(|v| v.group);
        let bytes = stream_envelope(&st.cfg, st.created, group);
        let Some(mut meta) = live_meta(&self.js, &self.erased) else {
            return;
        };
        let r = meta.update_stream_config(id, &bytes);
        if let Err(e) = r {
            error!(stream = %st.cfg.name, error = %e, "could not persist the stream config");
        }
    }

    fn keeps_state(&self, st: &Stream, c: &Consumer) -> bool {
        self.persisted(st) && !c.cfg.mem_storage
    }

    /// Carries out the effects decided so far, in order: persistence here (so that the reply
    /// that follows it is sent only once it is on disk), deliveries and replies through the
    /// router; then wakes the queues written.
    fn execute(&mut self, st: &Stream) {
        for e in self.fx.take() {
            if !self.routes && matches!(e, Effect::Reply { .. }) {
                // Another replica's round: its requester waits at that replica, which answers.
                continue;
            }
            // A committed round's deliveries go out on every replica, each to its own
            // subscribers, and from the leader to servers without a replica (the sink's
            // `remote`): a subscriber is connected to one node, so it gets each message once,
            // whichever replica proposed the round (the leader's timer rounds included), and
            // the engine's interest question counts route interest alike on every replica.
            // Not yet: a deliver group with members on several nodes gets one copy per node.
            let Some(e) = self.sink.route(e) else {
                continue;
            };
            match e {
                Effect::PersistConsumer { name } => self.persist_consumer(st, &name),
                Effect::ForgetConsumer { name } => self.forget_consumer(st, &name),
                Effect::PersistStreamConfig => self.persist_stream_config(st),
                // Routed by the sink, never handed back.
                Effect::Deliver { .. } | Effect::Reply { .. } => {}
            }
        }
        self.sink.flush();
    }

    /// A replicated stream's consumer info shows the stream's group (its consumers live in
    /// the stream's group: docs/cluster.md), as nats-server shows the consumer's own.
    fn consumer_cluster(&self, mut info: Value) -> Value {
        if let Some(v) = &self.view {
            info["cluster"] = serde_json::json!(v.cluster_info());
        }
        info
    }

    /// A replicated stream's info tells its group's state, not this node's name.
    fn cluster_info(&self, info: &mut StreamInfo) {
        if let Some(v) = &self.view {
            info.cluster = Some(v.cluster_info());
        }
    }

    /// Persists a consumer's creation or config change.
    fn persist_consumer(&mut self, st: &Stream, name: &str) {
        let Some(sid) = self.id.filter(|_| !self.replicated) else {
            return;
        };
        let Some(c) = st.consumers.get(name) else {
            return;
        };
        if !self.keeps_state(st, c) {
            return;
        }
        let bytes = envelope(&c.cfg, c.created);
        let Some(mut meta) = live_meta(&self.js, &self.erased) else {
            return;
        };
        let r = match self.consumer_ids.get(name) {
            Some(id) => meta.update_consumer_config(*id, &bytes),
            None => meta.create_consumer(sid, name, &bytes).map(|id| {
                self.consumer_ids.insert(name.to_owned(), id);
            }),
        };
        if let Err(e) = r {
            error!(stream = %st.cfg.name, consumer = %name, error = %e, "could not persist the consumer");
            self.js.heal(&mut meta);
        }
    }

    /// Erases a deleted consumer's metadata.
    fn forget_consumer(&mut self, st: &Stream, name: &str) {
        let Some(sid) = self.id.filter(|_| !self.replicated) else {
            return;
        };
        if let Some(id) = self.consumer_ids.remove(name) {
            let Some(mut meta) = live_meta(&self.js, &self.erased) else {
                return;
            };
            let r = meta.delete_consumer(sid, id);
            if let Err(e) = r {
                error!(stream = %st.cfg.name, consumer = %name, error = %e, "could not delete the consumer's metadata");
            }
        }
    }

    /// Writes dirty consumer state: now when `must`, else at most once a second.
    /// Returns false when some consumer's state could not be written (the caller must not
    /// confirm acks then).
    fn persist_state(&mut self, st: &mut Stream, must: bool, now: i64) -> bool {
        if !must && now.saturating_sub(self.last_persist) < PERSIST_EVERY_NS {
            return true;
        }
        let Some(sid) = self.id.filter(|_| !self.replicated) else {
            return true;
        };
        let mut all_ok = true;
        let persisted = self.persisted(st);
        for (name, c) in &mut st.consumers {
            if !c.dirty || !persisted || c.cfg.mem_storage {
                continue;
            }
            let Some(id) = self.consumer_ids.get(name) else {
                continue;
            };
            let Ok(bytes) = serde_json::to_vec(&c.save()) else {
                continue;
            };
            c.generation += 1;
            let Some(mut meta) = live_meta(&self.js, &self.erased) else {
                return true;
            };
            let mut r = meta.persist_consumer_state(sid, *id, c.generation, &bytes);
            if r.is_err() && self.js.heal(&mut meta) {
                r = meta.persist_consumer_state(sid, *id, c.generation, &bytes);
            }
            drop(meta);
            match r {
                Ok(()) => c.dirty = false,
                Err(e) => {
                    all_ok = false;
                    error!(stream = %st.cfg.name, consumer = %name, error = %e, "could not persist consumer state; ack confirmations are withheld");
                }
            }
        }
        // Attempted (written, or failed and to be retried): the next try is a period away,
        // so a failing disk is not hammered in a loop.
        self.last_persist = now;
        all_ok
    }

    fn api(
        &mut self,
        st: &mut Stream,
        call: &ApiCall,
        reply: &str,
        _headers: Option<&Bytes>,
        payload: &[u8],
        now: i64,
    ) {
        if let ApiCall::DirectGet(_, subject) = call {
            if !st.cfg.allow_direct {
                let status = crate::proto::headers::no_responders_block(b"$JS.API.DIRECT.GET");
                self.fx.status(reply, status);
                return;
            }
            st.direct_get(payload, subject.as_deref(), reply, &mut self.fx);
            return;
        }
        if let ApiCall::MsgNext(_, consumer) = call {
            if self.js.is_stopping() {
                Stream::pull_at_shutdown(payload, reply, &mut self.fx);
                return;
            }
            st.pull(consumer, payload, reply, &mut self.fx, now);
            return;
        }
        let result = self.api_json(st, call, payload, now);
        let bytes = match result {
            Ok(v) => ok_reply(call, v),
            Err(e) => err_reply(call, &e),
        };
        self.fx.reply(reply, bytes);
    }

    fn api_json(
        &mut self,
        st: &mut Stream,
        call: &ApiCall,
        payload: &[u8],
        now: i64,
    ) -> Result<Value, ApiError> {
        match call {
            ApiCall::StreamInfo(_) => {
                let req: StreamInfoRequest = request(payload)?;
                let mut page = st.info_page(&req, now);
                self.cluster_info(&mut page.body);
                Ok(body(&page))
            }
            ApiCall::StreamPurge(_) => {
                let body = optional_body(payload)?;
                st.purge(body.as_ref())
            }
            ApiCall::MsgGet(_) => {
                let body = optional_body(payload)?;
                st.msg_get(body.as_ref())
            }
            ApiCall::MsgDelete(_) => {
                let body = optional_body(payload)?;
                st.msg_delete(body.as_ref())
            }
            ApiCall::ConsumerCreate {
                consumer,
                filter,
                legacy_durable,
                ..
            } => {
                let req = parse_create_request(payload)?;
                let exists = req
                    .config
                    .durable_name
                    .as_ref()
                    .or(req.config.name.as_ref())
                    .or(consumer.as_ref())
                    .is_some_and(|n| st.consumers.contains_key(n));
                if !exists && !self.consumer_allowed() {
                    return Err(ApiError::max_consumers());
                }
                let on = CreateSubject {
                    consumer: consumer.as_deref(),
                    filter: filter.as_deref(),
                    legacy_durable: *legacy_durable,
                };
                let mut info = st.create_consumer(req, on, &self.version, now, &mut self.fx)?;
                let (bytes, msgs) = st.usage();
                self.set_usage(bytes, msgs, st.consumers.len() as u64);
                info.push_bound = false;
                Ok(self.consumer_cluster(body(&info)))
            }
            ApiCall::ConsumerInfo(_, c) => st
                .consumer_info(c, now)
                .map(|i| self.consumer_cluster(body(&i))),
            ApiCall::ConsumerDelete(_, c) => st.consumer_delete(c, &mut self.fx),
            ApiCall::ConsumerPause(_, c) => {
                let body = optional_body(payload)?;
                st.consumer_pause(c, body.as_ref(), now, &mut self.fx)
            }
            ApiCall::ConsumerUnpin(_, c) => st.consumer_unpin(c, payload, &mut self.fx),
            ApiCall::ConsumerReset(_, c) => {
                let body = optional_body(payload)?;
                st.consumer_reset(c, body.as_ref(), now, &mut self.fx)
            }
            ApiCall::StreamLeaderStepdown(_) | ApiCall::ConsumerLeaderStepdown(..) => {
                // A replicated stream's stepdown is applied from its group's log
                // (`step_down`); here the stream has one replica, which stays where it is.
                if let ApiCall::ConsumerLeaderStepdown(_, c) = call {
                    if !st.consumers.contains_key(c) {
                        return Err(ApiError::consumer_not_found());
                    }
                }
                if self.js.cluster().is_none() {
                    return Err(ApiError::new(
                        503,
                        10010,
                        "JetStream clustering support required",
                    ));
                }
                Ok(json!({"success": true}))
            }
            ApiCall::ConsumerNames(_) | ApiCall::ConsumerList(_) => {
                let body = optional_body(payload)?;
                let (offset, _) = paging(body.as_ref());
                Ok(st.consumer_page(offset, matches!(call, ApiCall::ConsumerList(_)), now))
            }
            _ => Err(ApiError::bad_request()),
        }
    }
}

/// Creates a brand-new stream: catalog entry and keys (file storage), store, thread.
///
/// # Errors
/// Store failures as API errors.
pub(crate) fn create(
    js: &Arc<JetStream>,
    acc: &Arc<AccountJs>,
    cfg: StreamConfig,
) -> Result<StreamInfo, ApiError> {
    create_replica(js, acc, cfg, None)
}

/// [`create`], for a replicated stream with its group's link: the local store is this
/// replica's copy, rebuilt from the group's log after a restart (its catalog entry says
/// which group, so a start can sweep it), and written without an fsync per round — the
/// group's log is what is durable.
///
/// # Errors
/// Store failures as API errors.
pub(crate) fn create_replica(
    js: &Arc<JetStream>,
    acc: &Arc<AccountJs>,
    cfg: StreamConfig,
    replica: Option<Replica>,
) -> Result<StreamInfo, ApiError> {
    let now = now_nanos();
    let group = replica.as_ref().map(|r| r.group);
    let (store, id): (Box<dyn StreamStore>, Option<StreamId>) = match cfg.storage {
        StorageType::Memory => (mem_store(&cfg), None),
        StorageType::File => {
            let bytes = stream_envelope(&cfg, now, group);
            let handle = js
                .meta
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .create_stream(&acc.name, &cfg.name, &bytes)
                .map_err(|e| ApiError::new(500, 10049, format!("stream create failed: {e}")))?;
            let id = handle.stream_id;
            drop(handle);
            let store = open_file_store(js, id, &cfg, group.is_some())
                .map_err(|e| ApiError::new(500, 10049, format!("stream create failed: {e}")))?;
            (store, Some(id))
        }
    };
    let stream = Stream::new(cfg, now, store, &js.server_name, now);
    let mut info = stream.info(&StreamInfoRequest::default(), now);
    spawn(js, acc, stream, id, HashMap::new(), replica);
    info_for_reply(&mut info, true);
    Ok(info)
}

/// Stops a stream that is being deleted: its consumers' waiting pulls end with `409 Consumer
/// Deleted` (what nats-server sends; a client's pull loop learns the consumer is gone instead
/// of waiting for its request to expire), then as [`stop_and_wait`].
pub(crate) fn delete_and_wait(s: &StreamRef) {
    let _ = s.tx.send(Cmd::EndPulls);
    stop_and_wait(s);
}

/// Stops a stream and waits until its store thread has closed it (store closed, consumers
/// persisted).
pub(crate) fn stop_and_wait(s: &StreamRef) {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    if s.tx.send(Cmd::Stop(Some(tx))).is_ok() {
        let _ = rx.recv_timeout(Duration::from_secs(30));
    }
}

/// Why a memory stream is not re-sealed.
const MEMORY_RESEAL: &str = "a memory stream keeps nothing at rest";

/// Image threads (writers and installers apart from their streams' shards) at most; past
/// it an image is written or installed in place (its shard waits for it), so a burst of
/// snapshots cannot start a thread each.
const IMAGE_THREADS: usize = 4;

/// Image threads running now.
static IMAGE_THREADS_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// A place among the [`IMAGE_THREADS`], given back when dropped.
struct ImageSlot(());

impl ImageSlot {
    fn take() -> Option<ImageSlot> {
        if IMAGE_THREADS_RUNNING.fetch_add(1, Ordering::AcqRel) < IMAGE_THREADS {
            Some(ImageSlot(()))
        } else {
            IMAGE_THREADS_RUNNING.fetch_sub(1, Ordering::AcqRel);
            None
        }
    }
}

impl Drop for ImageSlot {
    fn drop(&mut self) {
        IMAGE_THREADS_RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Writes the stream's image as it is now into `sink` (its group's snapshot file, or the seed
/// of a promotion) and answers `done` with the sink. A file stream's image is taken here (an
/// index walk) and written on a thread of its own, so the shard's streams go on meanwhile —
/// a large stream's image reads, decrypts and seals every message; others are written here.
fn take_image(
    st: &Stream,
    sink: ImageSink,
    done: tokio::sync::oneshot::Sender<Result<ImageSink, String>>,
) {
    let Some(slot) = ImageSlot::take() else {
        let _ = done.send(write_image(st, sink));
        return;
    };
    let image = match st.detached_image() {
        Ok(Some(image)) => image,
        Ok(None) => {
            drop(slot);
            let _ = done.send(write_image(st, sink));
            return;
        }
        Err(e) => {
            let _ = done.send(Err(e.to_string()));
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("stream-image".into())
        .spawn(move || {
            let mut sink = sink;
            let written = image.write(&mut sink).map(|()| sink);
            drop(slot);
            let _ = done.send(written.map_err(|e| e.to_string()));
        });
    if let Err(e) = spawned {
        // The closure, and with it `done` and the slot, is gone: the builder hears the image
        // failed.
        error!(stream = %st.cfg.name, error = %e, "no thread for a stream's image");
    }
}

/// Writes the stream's image into `sink` in place, as the store is read; gives the sink back.
fn write_image(st: &Stream, mut sink: ImageSink) -> Result<ImageSink, String> {
    st.write_image(&mut sink).map_err(|e| e.to_string())?;
    Ok(sink)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::config::parse_stream_config;

    fn config(json: &str) -> StreamConfig {
        let mut cfg = parse_stream_config(json.as_bytes()).unwrap();
        cfg.normalize("2.11.0").unwrap();
        cfg
    }

    #[test]
    fn segments_follow_the_streams_caps() {
        let mib = 1u64 << 20;
        let plain = config(r#"{"name":"S","subjects":["s"]}"#);
        assert_eq!(segment_bytes(&plain, false), 64 * mib);
        assert_eq!(segment_bytes(&plain, true), 16 * mib);
        let capped = config(r#"{"name":"S","subjects":["s"],"max_bytes":40000000}"#);
        assert_eq!(segment_bytes(&capped, false), 10_000_000);
        let tiny = config(r#"{"name":"S","subjects":["s"],"max_bytes":1000}"#);
        assert_eq!(segment_bytes(&tiny, false), mib);
        let huge = config(r#"{"name":"S","subjects":["s"],"max_bytes":10000000000}"#);
        assert_eq!(segment_bytes(&huge, false), 64 * mib);
        assert_eq!(segment_bytes(&huge, true), 16 * mib);
        let bucket = config(r#"{"name":"KV_B","subjects":["$KV.B.>"],"max_msgs_per_subject":1}"#);
        assert_eq!(segment_bytes(&bucket, false), 8 * mib);
    }
}
