//! Drives the [`jetstream`](crate::jetstream) engine: the threads and the plumbing.
//!
//! Per account there is one in-process subscriber for `$JS.API.>` and, per stream, for the
//! stream's subjects and its own entries (its API subjects, `$JS.ACK.<stream>.>`,
//! `$JS.FC.<stream>.>`). Its subscriptions are ordinary ones in the account's tree — so
//! publishes reach streams by exactly the routing any subscriber gets — but instead of an
//! outbound queue they carry a [`Service`]: the router calls [`Intake`] on the publisher's
//! own task, which decodes the subject and hands the message to a thread without blocking.
//! A stream's subscriptions are one queue group (`$SEALSTREAM.<stream>`), advertised to route
//! peers: a client on a server that does not host the stream reaches it through the cluster,
//! a local client always here (see `router::pick_service`).
//!
//!
//! - a fixed pool of **store threads** ([`shard`], one per core by default, `store_threads`
//!   in the `jetstream` block) serves every stream; each stream belongs to one of them and its
//!   [`stream_worker`] owns the stream's store and consumers: publishes (group-committed:
//!   everything queued while an fsync ran becomes the next block), stream-scoped API calls,
//!   acks, pulls and timers;
//! - one **API thread** per account ([`api`]) handles account-wide calls (`INFO`, stream
//!   create/update/delete, names, list) and calls about streams that do not exist.
//!
//! Blocking file I/O (fsync, consumer-state files) therefore never runs on a tokio worker.
//! Replies and deliveries go out through [`sink::RouterSink`].

mod api;
pub(crate) mod audit;
mod cluster;
mod cmd;
mod gather;
mod lifecycle;
pub(crate) mod origin_read;
pub(crate) mod rekey;
mod replica;
pub(crate) mod rotation;
mod round;
mod shard;
mod sink;
mod sourcing;
mod stream_worker;
mod table;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use tracing::{info, warn};

use crate::config::accounts::AccountJetStream;
use crate::jetstream::api::ApiCall;
use crate::store::meta::{KeySource, MetaStore};

use super::account::{Account, Service, Subscriber, Subscription};
use super::backpressure::{self, Budget};
use super::Shared;

pub(crate) use cmd::Cmd;
pub(crate) use table::{Published, StreamRef, StreamTable, Usage, UsageTotals};

/// Bytes of API calls an account may have queued for its API thread before publishers wait.
const API_QUEUE_BYTES: usize = 4 << 20;

/// Replicated `STREAM.MSG.GET`s this server may have waiting for a read index at once
/// (`sealstream_js_reads_waiting` in /metrics); more go through their group's log, whose
/// intake is bounded like a publish's.
pub(crate) const MAX_READS_IN_FLIGHT: usize = 4096;
/// How many wait now.
pub(crate) static READS_IN_FLIGHT: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// An account's API thread ends after this long without a call (the next call starts it
/// again).
pub(crate) const API_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// The sealed store as startup opened it.
pub(crate) struct OpenedStore {
    pub(crate) meta: MetaStore,
    /// The key source, kept to reopen the metadata after a failed update.
    pub(crate) key: KeySource,
    /// The space reserve next to the store (see [`make_reserve`]).
    pub(crate) reserve: std::path::PathBuf,
}

/// Bytes kept in reserve next to the store so that metadata updates (deleting a stream to free
/// space, persisting consumer state) can still be written when the disk is full.
const RESERVE_BYTES: usize = 2 << 20;

/// Creates the reserve file (zeros, outside the sealed store directory) if it is missing.
/// Best effort: on a full disk it stays missing until space returns.
pub(crate) fn make_reserve(path: &std::path::Path) {
    if path.exists() {
        return;
    }
    let tmp = path.with_extension("reserve.tmp");
    let r =
        std::fs::write(&tmp, vec![0u8; RESERVE_BYTES]).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        warn!(path = %path.display(), error = %e, "could not create the store's space reserve");
    }
}

/// Server-wide JetStream state.
pub(crate) struct JetStream {
    /// The sealed store's metadata (catalog, keys, consumer state files).
    pub(crate) meta: Mutex<MetaStore>,
    /// How the master key is obtained (taken after `meta`: a rotation replaces it).
    key: Mutex<KeySource>,
    reserve: std::path::PathBuf,
    /// Server name (stream info `cluster.leader`).
    pub(crate) server_name: String,
    /// Server-wide limits (`max_memory_store`, `max_file_store`), -1 = unlimited.
    pub(crate) max_memory: i64,
    pub(crate) max_store: i64,
    /// `sync_interval: <duration>`: interval mode (acks before fsync; weaker). `None`: fsync
    /// before every ack (the default, whatever nats-server's default is).
    pub(crate) sync_interval: Option<std::time::Duration>,
    /// The JetStream domain (`jetstream { domain }`): the API is also served under
    /// `$JS.<domain>.API.>`, as clients address a domain.
    pub(crate) domain: Option<String>,
    /// `jetstream.unique_tag`: one stream's replicas go to servers with different values of
    /// this tag prefix.
    pub(crate) unique_tag: Option<String>,
    /// `jetstream.raft_segment_size` (`None`: the log's default).
    pub(crate) raft_segment_size: Option<u64>,
    /// Accounts with JetStream state, by name.
    accounts: Mutex<HashMap<String, Arc<AccountJs>>>,
    /// Storage used by every stream of the server (server-wide quota checks).
    pub(crate) used: UsageTotals,
    /// Seed source for routing contexts.
    seed: AtomicU64,
    stopping: AtomicBool,
    /// The store threads every stream is served by.
    shards: shard::ShardPool,
    /// The server's runtime: API threads wait on it for calls (with an idle timeout).
    pub(crate) runtime: tokio::runtime::Handle,
    /// Replicated JetStream, when this server is part of a named cluster.
    cluster: std::sync::OnceLock<Arc<cluster::ClusterJs>>,
    /// The system account, which gets a copy of leader and quorum advisories.
    pub(crate) system_account: Option<Arc<Account>>,
    /// The live audit's slot and counters.
    pub(crate) auditor: audit::Auditor,
    /// The background data-key re-sealer's slot and counters.
    pub(crate) resealer: rekey::Resealer,
    /// The server's `max_payload`: the largest reply a client takes.
    pub(crate) max_payload: usize,
}

/// One account's JetStream.
pub(crate) struct AccountJs {
    pub(crate) name: String,
    pub(crate) account: Arc<Account>,
    /// `None`: JetStream is not enabled for this account (every call gets 10039). Replaced
    /// when an operator pushes new account claims.
    limits: RwLock<Option<AccountJetStream>>,
    pub(crate) streams: StreamTable,
    /// Storage and consumers used by the account's streams (account quota checks).
    pub(crate) used: UsageTotals,
    next_sid: AtomicU64,
    /// The queue into the account's API thread, `None` while no thread runs: the thread is
    /// started by the first call and ends after [`API_IDLE`] without one, so an account
    /// costs no thread while it does not use the API. Sends happen under this lock, and the
    /// thread retires under it, so no call is queued into a thread that is leaving.
    api_tx: Mutex<Option<tokio::sync::mpsc::Sender<api::ApiMsg>>>,
    /// The server's JetStream (to start the API thread on demand).
    js: std::sync::Weak<JetStream>,
    /// What is queued for the API thread (bounded; see `server::backpressure`).
    api_budget: Arc<Budget>,
    pub(crate) api_total: AtomicU64,
    pub(crate) api_errors: AtomicU64,
    /// What the router calls for the account's `$JS.API.>` subscription.
    intake: Arc<dyn Service>,
}

/// The router's entry into one stream: messages published on the stream's subjects go
/// straight to its thread's channel, with no lookup and no lock.
pub(crate) struct StreamIntake {
    pub(crate) tx: shard::StreamTx,
    /// What is queued for the stream's thread (given back after each round).
    pub(crate) budget: Arc<Budget>,
}

impl Service for StreamIntake {
    fn deliver(
        &self,
        _sid: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> Option<Arc<Budget>> {
        let m = crate::jetstream::stream::Incoming {
            subject: String::from_utf8_lossy(subject).into_owned(),
            reply: reply.map(|r| String::from_utf8_lossy(r).into_owned()),
            headers: headers.cloned(),
            payload: payload.clone(),
        };
        self.tx.send_counted(&self.budget, Cmd::Publish(m))
    }
}

/// The router's entry into an account's JetStream API (and, per stream, its API, acks and
/// flow control): called on the publisher's task, it only decodes the subject and hands the
/// message to the right thread.
struct Intake {
    acc: std::sync::Weak<AccountJs>,
    /// `Some`: the entry of this stream (its queue group); `None`: the account's `$JS.API.>`.
    stream: Option<Arc<str>>,
}

impl Service for Intake {
    fn deliver(
        &self,
        sid: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> Option<Arc<Budget>> {
        let acc = self.acc.upgrade()?;
        acc.dispatch(
            self.stream.as_deref(),
            sid,
            subject,
            reply,
            headers.cloned(),
            payload.clone(),
        )
    }
}

/// The queue group of a stream's subscriptions (see the module doc).
fn entry_group(stream: &str) -> Bytes {
    let mut q = super::account::SERVICE_QUEUE_PREFIX.to_vec();
    q.extend_from_slice(stream.as_bytes());
    Bytes::from(q)
}

/// A stream's API subjects (each names the stream in a fixed place), acks, flow control and
/// reads by copiers on other servers (`origin_read`), with the sid [`AccountJs::dispatch`]
/// reads.
fn entry_subjects(stream: &str) -> [(String, &'static [u8]); 10] {
    [
        (origin_read::read_subject(stream), b"src"),
        (format!("$JS.API.STREAM.*.{stream}"), b"api"),
        (format!("$JS.API.STREAM.*.*.{stream}"), b"api"),
        (format!("$JS.API.DIRECT.GET.{stream}"), b"api"),
        (format!("$JS.API.DIRECT.GET.{stream}.>"), b"api"),
        (format!("$JS.API.CONSUMER.*.{stream}"), b"api"),
        (format!("$JS.API.CONSUMER.*.{stream}.>"), b"api"),
        (format!("$JS.API.CONSUMER.*.*.{stream}.>"), b"api"),
        (format!("$JS.ACK.{stream}.>"), b"ack"),
        (format!("$JS.FC.{stream}.>"), b"fc"),
    ]
}

impl AccountJs {
    /// Bytes of API calls queued for the API thread (bounded at `API_QUEUE_BYTES`).
    pub(crate) fn api_pending(&self) -> usize {
        self.api_budget.pending()
    }

    /// The API thread finished a call of `size` bytes.
    pub(crate) fn api_done(&self, size: usize) {
        self.api_budget.give_back(size);
    }

    /// Answers a replicated stream's `STREAM.MSG.GET` from this replica once it has applied
    /// everything the group had committed when the get arrived (a read index: the leader
    /// confirms by heartbeats that it still leads; no log entry, no fsync), so the answer
    /// sees every write acknowledged before the get was sent. Without a quorum within the
    /// proposal deadline the answer is `503 / 10008`, as for a write. False — the caller
    /// sends the get through the group's log instead — when [`MAX_READS_IN_FLIGHT`] gets of
    /// this server wait already, or clustering is not running.
    fn linearizable_read(
        &self,
        s: &table::StreamRef,
        group: crate::consensus::GroupId,
        call: &ApiCall,
        reply: &str,
        payload: &Bytes,
    ) -> bool {
        let Some(js) = self.js.upgrade() else {
            return false;
        };
        let Some(cluster) = js.cluster().cloned() else {
            return false;
        };
        if READS_IN_FLIGHT.fetch_add(1, Ordering::Relaxed) >= MAX_READS_IN_FLIGHT {
            READS_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        let stream = Arc::clone(&s.stream);
        let tx = s.tx.clone();
        let account = Arc::clone(&self.account);
        let (call, reply, payload) = (call.clone(), reply.to_owned(), payload.clone());
        js.runtime.spawn(async move {
            let ready = cluster.read_barrier(group).await;
            READS_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
            match ready {
                Ok(_) => {
                    if !stream_worker::try_read(&stream, &account, &call, &reply, &payload) {
                        // The stream is busy: its worker answers, after what it is running.
                        let _ = tx.send(Cmd::Read {
                            call,
                            reply,
                            payload,
                        });
                    }
                }
                Err(e) => {
                    tracing::debug!(group, error = %e, "a linearizable read found no quorum");
                    stream_worker::answer(
                        &account,
                        &reply,
                        crate::jetstream::api::err_reply(
                            &call,
                            &crate::jetstream::api::ApiError::new(
                                503,
                                10008,
                                "JetStream system temporarily unavailable",
                            ),
                        ),
                    );
                }
            }
        });
        true
    }

    /// The account's JetStream limits; `None` when JetStream is off for it.
    pub(crate) fn limits(&self) -> Option<AccountJetStream> {
        *self.limits.read().unwrap_or_else(|p| p.into_inner())
    }

    fn subscribe(
        &self,
        subject: &str,
        sid: Bytes,
        queue: Option<Bytes>,
        service: Arc<dyn Service>,
    ) -> Option<Arc<Subscription>> {
        let sub = Arc::new(Subscription {
            subscriber: Subscriber::Service(service),
            sid,
            subject: Bytes::copy_from_slice(subject.as_bytes()),
            queue,
            delivered: AtomicU64::new(0),
            max: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            deny: None,
        });
        match self.account.subscribe(&sub) {
            Ok(()) => Some(sub),
            Err(e) => {
                warn!(subject, error = ?e, "JetStream could not subscribe");
                None
            }
        }
    }

    /// Subscribes stream `name`'s subjects, delivering to `tx` within `budget`, and its own
    /// API, ack and flow-control entries, all in the stream's queue group; returns the
    /// subscriptions.
    pub(crate) fn subscribe_stream(
        self: &Arc<Self>,
        name: &str,
        tx: &shard::StreamTx,
        budget: &Arc<Budget>,
        subjects: &[String],
    ) -> Vec<Arc<Subscription>> {
        let intake: Arc<dyn Service> = Arc::new(StreamIntake {
            tx: tx.clone(),
            budget: Arc::clone(budget),
        });
        let group = entry_group(name);
        let mut out = Vec::new();
        for s in subjects {
            let sid = Bytes::from(format!(
                "s{}",
                self.next_sid.fetch_add(1, Ordering::Relaxed)
            ));
            if let Some(sub) = self.subscribe(s, sid, Some(group.clone()), Arc::clone(&intake)) {
                out.push(sub);
            }
        }
        let entry: Arc<dyn Service> = Arc::new(Intake {
            acc: Arc::downgrade(self),
            stream: Some(Arc::from(name)),
        });
        for (subject, sid) in entry_subjects(name) {
            let sid = Bytes::from_static(sid);
            if let Some(sub) =
                self.subscribe(&subject, sid, Some(group.clone()), Arc::clone(&entry))
            {
                out.push(sub);
            }
        }
        out
    }

    /// Removes a stream's subscriptions.
    pub(crate) fn unsubscribe_stream(&self, subs: &[Arc<Subscription>]) {
        for sub in subs {
            self.account.unsubscribe(sub);
        }
    }

    /// Queues a call for the API thread, counted against the account's API budget; returns
    /// the budget when it is over its bound (the caller's publisher waits for room).
    fn send_api(self: &Arc<Self>, msg: api::ApiMsg) -> Option<Arc<Budget>> {
        let mut line = self.api_tx.lock().unwrap_or_else(|p| p.into_inner());
        if line
            .as_ref()
            .is_none_or(tokio::sync::mpsc::Sender::is_closed)
        {
            *line = self.start_api_thread();
        }
        let tx = line.as_ref()?;
        let size = msg.size();
        let over = self.api_budget.take(size);
        match tx.try_send(msg) {
            Ok(()) => over.then(|| Arc::clone(&self.api_budget)),
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                self.api_budget.give_back(size);
                None
            }
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                self.api_budget.give_back(size);
                cmd::refused("api");
                Some(Arc::clone(&self.api_budget))
            }
        }
    }

    /// Starts the API thread (not while JetStream stops); its queue, or `None` when no thread
    /// could start.
    fn start_api_thread(self: &Arc<Self>) -> Option<tokio::sync::mpsc::Sender<api::ApiMsg>> {
        let js = self.js.upgrade()?;
        if js.stopping.load(Ordering::Relaxed) {
            return None;
        }
        // Bounded twice over, like a stream's queue: the API budget (soft), the capacity
        // (hard). The channel allocates its slots as calls arrive.
        let (tx, rx) =
            tokio::sync::mpsc::channel(API_QUEUE_BYTES / backpressure::MIN_COMMAND_COST * 2);
        let acc = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("js-api-{}", self.name))
            .spawn(move || api::run(&js, &acc, rx));
        match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                warn!(error = %e, "could not start the JetStream API thread");
                None
            }
        }
    }

    /// Called by the API thread after [`API_IDLE`] without a call: retires it (clears the
    /// queue) unless a call arrived meanwhile, which it returns to be handled.
    pub(crate) fn retire_api_thread(
        &self,
        rx: &mut tokio::sync::mpsc::Receiver<api::ApiMsg>,
    ) -> Option<api::ApiMsg> {
        let mut line = self.api_tx.lock().unwrap_or_else(|p| p.into_inner());
        match rx.try_recv() {
            Ok(m) => Some(m),
            Err(_) => {
                *line = None;
                rx.close();
                None
            }
        }
    }

    /// Routes one API call, ack or flow-control reply to the thread that owns it. Holds no
    /// lock while sending: the stream table hands out an owned handle. Returns the budget the
    /// call pushed over its bound, if any.
    /// Hands one API call, ack or flow-control reply to the thread it belongs to; `entry` is
    /// the stream whose entry (queue group) took it, `None` for the account's `$JS.API.>`.
    fn dispatch(
        self: &Arc<Self>,
        entry: Option<&str>,
        sid: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        headers: Option<Bytes>,
        payload: Bytes,
    ) -> Option<Arc<Budget>> {
        let mut subject_str = String::from_utf8_lossy(subject).into_owned();
        let reply = reply.map(|r| String::from_utf8_lossy(r).into_owned());
        let mut domain_form = false;
        if sid == b"api" && !subject_str.starts_with("$JS.API.") {
            // `$JS.<domain>.API.<call>`: the same call in this server's domain.
            if let Some(rest) = subject_str.splitn(4, '.').nth(3) {
                subject_str = format!("$JS.API.{rest}");
                domain_form = true;
            }
        }
        match sid {
            b"api" => {
                let reply = reply?;
                let call = ApiCall::parse(&subject_str)?;
                if !domain_form && !self.takes_call(entry, &call, subject) {
                    return None;
                }
                self.api_total.fetch_add(1, Ordering::Relaxed);
                if self.limits().is_some() {
                    if let Some(s) = call.stream_scoped().and_then(|n| self.streams.get(n)) {
                        // Reads answered here, on the connection's thread, when the stream is
                        // idle — except a replicated stream's MSG.GET, which must be
                        // linearizable: answered after a read index (`linearizable_read`), or
                        // through the group's log when too many wait for one.
                        if let (ApiCall::MsgGet(_), Some(group)) = (&call, s.group) {
                            if self.linearizable_read(&s, group, &call, &reply, &payload) {
                                return None;
                            }
                        }
                        let local_read = match call {
                            ApiCall::DirectGet(..) => true,
                            ApiCall::MsgGet(_) => s.group.is_none(),
                            _ => false,
                        };
                        if local_read
                            && stream_worker::try_read(
                                &s.stream,
                                &self.account,
                                &call,
                                &reply,
                                &payload,
                            )
                        {
                            return None;
                        }
                        let cmd = Cmd::Api {
                            call,
                            reply,
                            headers,
                            payload,
                        };
                        return s.tx.send_counted(&s.budget, cmd);
                    }
                }
                self.send_api(api::ApiMsg {
                    call,
                    reply,
                    headers,
                    payload,
                })
            }
            b"ack" | b"fc" => {
                let stream = if sid == b"ack" {
                    crate::jetstream::ack_subject::AckSubject::parse(&subject_str)?.stream
                } else {
                    subject_str.split('.').nth(2)?
                };
                if entry != Some(stream) {
                    return None;
                }
                let s = self.streams.get(stream)?;
                {
                    let cmd = if sid == b"ack" {
                        Cmd::Ack {
                            subject: subject_str.clone(),
                            reply,
                            payload,
                        }
                    } else {
                        Cmd::FlowControl {
                            subject: subject_str.clone(),
                        }
                    };
                    s.tx.send_counted(&s.budget, cmd)
                }
            }
            b"src" => {
                // A copier on another server reads this stream (see `origin_read`).
                let reply = reply?;
                let stream = entry?;
                if subject_str != origin_read::read_subject(stream) {
                    return None;
                }
                let s = self.streams.get(stream)?;
                s.tx.send_counted(&s.budget, Cmd::SourceRead { reply, payload })
            }
            _ => None,
        }
    }

    /// Whether the entry that got `call` handles it. A call naming an existing stream (its
    /// update, delete and peer removal included: a replica sends those to the meta group) is
    /// the stream's entry's, on this server when it hosts the stream, else on a server that
    /// does; every other call is the account entry's, as is a call naming a stream nobody
    /// hosts (answered here: not found).
    fn takes_call(&self, entry: Option<&str>, call: &ApiCall, subject: &[u8]) -> bool {
        let named = call.stream_scoped().or(match call {
            ApiCall::StreamUpdate(n) | ApiCall::StreamDelete(n) | ApiCall::StreamPeerRemove(n) => {
                Some(n.as_str())
            }
            _ => None,
        });
        match (entry, named) {
            (Some(e), Some(n)) => e == n,
            (Some(_), None) => false,
            (None, None) => true,
            (None, Some(n)) => {
                self.streams.get(n).is_none() && !self.account.served_elsewhere(subject)
            }
        }
    }
}

/// Starts replicated JetStream on a clustered server (see [`cluster`]); before the route
/// listener starts, so that route INFO carries the Raft transport's port.
pub(crate) async fn start_replication(
    js: &Arc<JetStream>,
    routes: &Arc<super::route::Cluster>,
    server_id: &str,
) {
    if let Some(c) = cluster::start(js, routes, server_id).await {
        let _ = js.cluster.set(c);
    }
}

impl JetStream {
    /// Replicated JetStream, when it runs here.
    pub(crate) fn cluster(&self) -> Option<&Arc<cluster::ClusterJs>> {
        self.cluster.get()
    }

    /// Whether the server is stopping (see [`end_pulls`]).
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Whether JetStream is on for `account` (INFO `jetstream` flag).
    pub(crate) fn enabled_for(&self, account: &str) -> bool {
        self.accounts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(account)
            .is_some_and(|a| a.limits().is_some())
    }

    /// One account's JetStream, if it has been set up.
    pub(crate) fn account(&self, name: &str) -> Option<Arc<AccountJs>> {
        self.accounts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Every account's JetStream.
    pub(crate) fn accounts(&self) -> Vec<Arc<AccountJs>> {
        self.accounts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// After a failed metadata update (typically a full disk): gives the space reserve back
    /// to the file system and reopens the metadata (which cleans up the failed update), so
    /// the next attempt can succeed. Returns whether the metadata is usable again.
    pub(crate) fn heal(&self, meta: &mut MetaStore) -> bool {
        if !meta.is_poisoned() {
            return true;
        }
        if self.reserve.exists() {
            match std::fs::remove_file(&self.reserve) {
                Ok(()) => warn!("metadata update failed: released the space reserve"),
                Err(e) => warn!(error = %e, "could not release the space reserve"),
            }
        }
        let key = self
            .key
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .duplicate();
        match meta.reopen(key) {
            Ok(()) => {
                info!("store metadata reopened after a failed update");
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "store metadata could not be reopened; JetStream metadata updates fail until restart");
                false
            }
        }
    }

    /// The master key's source from now on (after an online rotation).
    pub(crate) fn set_key(&self, key: KeySource) {
        *self.key.lock().unwrap_or_else(|p| p.into_inner()) = key;
    }

    /// Puts the space reserve back if it was used (best effort).
    pub(crate) fn restore_reserve(&self) {
        make_reserve(&self.reserve);
    }

    pub(crate) fn next_seed(&self) -> u64 {
        self.seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
    }
}

/// Starts JetStream: loads every stream and consumer from the sealed store and sets up the
/// accounts. Returns `None` when JetStream is off.
///
/// # Errors
/// The OS error when the store threads cannot be started.
pub(crate) fn start(shared: &Arc<Shared>, opened: OpenedStore) -> std::io::Result<Arc<JetStream>> {
    let opts = &shared.opts;
    let threads = opts
        .jetstream
        .store_threads
        .unwrap_or_else(shard::default_threads);
    let shards = shard::ShardPool::start(threads)?;
    info!(threads = shards.len(), "JetStream store threads started");
    let js = Arc::new(JetStream {
        meta: Mutex::new(opened.meta),
        key: Mutex::new(opened.key),
        reserve: opened.reserve,
        server_name: shared.server_name.clone(),
        max_memory: opts.jetstream.max_memory_store.unwrap_or(-1),
        max_store: opts.jetstream.max_file_store.unwrap_or(-1),
        sync_interval: match opts.jetstream.sync_interval {
            Some(crate::config::options::SyncInterval::Every(d)) if !d.is_zero() => {
                warn!(
                    "sync_interval {:?}: PubAcks are sent before fsync; a power loss can lose up to that much acknowledged data",
                    d
                );
                Some(d)
            }
            _ => None,
        },
        domain: opts.jetstream.domain.clone().filter(|d| !d.is_empty()),
        unique_tag: opts.jetstream.unique_tag.clone(),
        raft_segment_size: opts.jetstream.raft_segment_size,
        accounts: Mutex::new(HashMap::new()),
        used: UsageTotals::default(),
        seed: AtomicU64::new(shared.seed | 1),
        stopping: AtomicBool::new(false),
        runtime: tokio::runtime::Handle::current(),
        shards,
        cluster: std::sync::OnceLock::new(),
        auditor: audit::Auditor::default(),
        resealer: rekey::Resealer::default(),
        max_payload: usize::try_from(opts.max_payload).unwrap_or(usize::MAX),
        system_account: shared.system.as_ref().map(|s| Arc::clone(&s.account)),
    });
    shared.accounts.add_claims_hook(Arc::new(JwtAccounts {
        js: Arc::downgrade(&js),
    }));
    // Which accounts have JetStream: those whose config enables it; the global account when
    // no account mentions JetStream at all.
    let mut enabled: Vec<(String, Option<AccountJetStream>)> = Vec::new();
    let any = opts.accounts.iter().any(|a| a.jetstream.is_some());
    for a in &opts.accounts {
        let lim = a.jetstream.filter(|j| j.enabled);
        enabled.push((a.name.clone(), lim));
    }
    if !any {
        enabled.push((
            super::account::GLOBAL_ACCOUNT.to_owned(),
            Some(AccountJetStream::default()),
        ));
    } else {
        enabled.push((super::account::GLOBAL_ACCOUNT.to_owned(), None));
    }
    // Accounts that hold streams in the store are enabled too (a config edit must not make
    // data unreachable silently; their limits come from the config when it has them).
    let stored: Vec<String> = js
        .meta
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .list_accounts();
    for name in stored {
        match enabled.iter_mut().find(|(n, _)| *n == name) {
            Some((_, lim)) => {
                if lim.is_none() {
                    warn!(account = %name, "account has stored streams but JetStream is not enabled for it in the config; serving them anyway");
                    *lim = Some(AccountJetStream::default());
                }
            }
            None => {
                // Operator mode: limits come from the account's JWT.
                let lim = match shared.auth().trust() {
                    Some(t) => t.account(&name).and_then(|c| jwt_limits(&c.nats.limits)),
                    None => Some(AccountJetStream::default()),
                };
                if lim.is_none() {
                    warn!(account = %name, "account has stored streams but its claims do not grant JetStream; they stay stored, unserved");
                    continue;
                }
                enabled.push((name, lim));
            }
        }
    }
    for (name, lim) in enabled {
        if shared
            .system
            .as_ref()
            .is_some_and(|s| s.account.name == name)
        {
            continue;
        }
        let account = shared.accounts.create(&name);
        let acc = setup_account(&js, &name, account, lim);
        if acc.limits().is_some() {
            stream_worker::load_streams(&js, &acc);
        }
    }
    rekey::resume(&js);
    info!("JetStream is enabled; streams and consumers are sealed at rest");
    Ok(js)
}

fn setup_account(
    js: &Arc<JetStream>,
    name: &str,
    account: Arc<Account>,
    limits: Option<AccountJetStream>,
) -> Arc<AccountJs> {
    let acc = Arc::new_cyclic(|me| AccountJs {
        intake: Arc::new(Intake {
            acc: me.clone(),
            stream: None,
        }),
        name: name.to_owned(),
        account,
        limits: RwLock::new(limits),
        streams: StreamTable::default(),
        used: UsageTotals::default(),
        next_sid: AtomicU64::new(1),
        api_tx: Mutex::new(None),
        js: Arc::downgrade(js),
        api_budget: Budget::new(API_QUEUE_BYTES),
        api_total: AtomicU64::new(0),
        api_errors: AtomicU64::new(0),
    });
    acc.subscribe(
        "$JS.API.>",
        Bytes::from_static(b"api"),
        None,
        Arc::clone(&acc.intake),
    );
    if let Some(d) = &js.domain {
        acc.subscribe(
            &format!("$JS.{d}.API.>"),
            Bytes::from_static(b"api"),
            None,
            Arc::clone(&acc.intake),
        );
    }
    js.accounts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_owned(), Arc::clone(&acc));
    acc
}

/// JetStream limits from account JWT claims: on when memory or disk storage is granted
/// (`-1` = unlimited), off otherwise.
pub(crate) fn jwt_limits(l: &crate::auth::jwt::claims::AccountLimits) -> Option<AccountJetStream> {
    if l.mem_storage == 0 && l.disk_storage == 0 {
        return None;
    }
    Some(AccountJetStream {
        enabled: true,
        max_memory: l.mem_storage,
        max_file: l.disk_storage,
        max_streams: l.streams,
        max_consumers: l.consumer,
        max_bytes_required: l.max_bytes_required,
        memory_max_stream_bytes: l.mem_max_stream_bytes,
        store_max_stream_bytes: l.disk_max_stream_bytes,
        max_ack_pending: l.max_ack_pending,
    })
}

/// JetStream's side of account claims (registered with the account registry at startup):
/// a first login sets the account up per its JWT, a claims update applies new limits.
struct JwtAccounts {
    js: std::sync::Weak<JetStream>,
}

impl super::account::ClaimsHook for JwtAccounts {
    fn claims_applied(
        &self,
        account: &Arc<Account>,
        claims: &crate::auth::jwt::claims::AccountClaims,
        first_login: bool,
    ) {
        let Some(js) = self.js.upgrade() else {
            return;
        };
        let limits = jwt_limits(&claims.limits);
        if first_login {
            ensure_jwt_account(&js, account, limits);
        } else if let Some(acc) = js.account(&account.name) {
            set_limits(&acc, limits);
        }
    }
}

/// Operator mode: gives an account JetStream per its JWT the first time one of its users
/// logs in (and loads its stored streams), or applies new limits to one that has it.
fn ensure_jwt_account(
    js: &Arc<JetStream>,
    account: &Arc<Account>,
    limits: Option<AccountJetStream>,
) {
    let existing = js
        .accounts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&account.name)
        .cloned();
    match existing {
        Some(acc) => set_limits(&acc, limits),
        None => {
            let acc = setup_account(js, &account.name, Arc::clone(account), limits);
            if acc.limits().is_some() {
                stream_worker::load_streams(js, &acc);
            }
        }
    }
}

/// Replaces an account's limits (claims update). Existing streams stay; new creates and
/// publishes are checked against the new limits.
pub(crate) fn set_limits(acc: &AccountJs, limits: Option<AccountJetStream>) {
    let mut l = acc.limits.write().unwrap_or_else(|p| p.into_inner());
    if *l != limits {
        info!(account = %acc.name, enabled = limits.is_some(), "JetStream limits updated from account claims");
        *l = limits;
    }
}

/// Tenant erasure (`$JS.API.ACCOUNT.PURGE.<account>` from the system account): stops every
/// stream of the account, then destroys the account's keys and files in the sealed store
/// (keys first: crypto-erase). Returns how many streams were erased.
///
/// # Errors
/// The store's error text when the erase could not be committed.
pub(crate) fn purge_account(
    js: &JetStream,
    name: &str,
) -> Result<(usize, Option<crate::audit::Erasure>), String> {
    // What the erase will destroy, by key id, read before anything goes.
    let inventory = js
        .meta
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .erasure_inventory(name);
    let n = purge_account_data(js, name)?;
    let Some(inv) = inventory else {
        return Ok((n, None));
    };
    let meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
    let erasure = crate::audit::Erasure {
        server: js.server_name.clone(),
        store_id: data_encoding::HEXLOWER.encode(&meta.store_uuid()),
        account: name.to_owned(),
        account_key: format!("{} v{}", inv.account_id.to_hex(), inv.account_key_version),
        stream_keys: inv
            .streams
            .iter()
            .map(|(id, versions)| {
                let v: Vec<String> = versions.iter().map(|v| format!("v{v}")).collect();
                format!("{} {}", id.to_hex(), v.join(","))
            })
            .collect(),
        spare_keys: inv.spares,
        streams_deleted: n,
        keyring_generation: meta.keyring_generation(),
        verified_absent: !meta.holds_any_key_of(&inv),
    };
    Ok((n, Some(erasure)))
}

fn purge_account_data(js: &JetStream, name: &str) -> Result<usize, String> {
    // Clustered, the account's replicated streams go through the meta group first (every
    // replica erases its copy and its group's key); without a meta quorum nothing is purged.
    if let Some(cluster) = js.cluster() {
        cluster
            .purge_replicated(name)
            .map_err(|e| e.to_json().to_string())?;
    }
    if let Some(acc) = js.account(name) {
        for s in acc.streams.drain() {
            acc.unsubscribe_stream(&s.subs);
            stream_worker::delete_and_wait(&s);
        }
    }
    let mut meta = js.meta.lock().unwrap_or_else(|p| p.into_inner());
    let mut r = meta.delete_account(name);
    if matches!(&r, Err(e) if e.is_fatal()) && js.heal(&mut meta) {
        r = meta.delete_account(name);
    }
    if r.is_ok() {
        js.restore_reserve();
    }
    match r {
        Ok(n) => {
            info!(account = %name, streams = n, "account's JetStream data erased (keys destroyed first)");
            Ok(n)
        }
        Err(crate::store::meta::MetaError::AccountNotFound) => Ok(0),
        Err(e) => Err(e.to_string()),
    }
}

/// Before the clients' connections close: every waiting pull request ends with
/// `409 Server Shutdown`, and from now on a new one is answered so at once. Waits (at most
/// 2 s) until each stream has routed those answers.
pub(crate) fn end_pulls(js: &JetStream) {
    js.stopping.store(true, Ordering::Relaxed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut waiting = Vec::new();
    for acc in js.accounts() {
        for s in acc.streams.all() {
            let (tx, rx) = mpsc::sync_channel(1);
            if s.tx.send(Cmd::EndPullsForShutdown(tx)).is_ok() {
                waiting.push(rx);
            }
        }
    }
    for rx in waiting {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let _ = rx.recv_timeout(left);
    }
}

/// Stops every stream (each closes its store and persists its consumers), waits for them,
/// then stops the store threads.
pub(crate) fn stop(js: &JetStream) {
    js.stopping.store(true, Ordering::Relaxed);
    for acc in js.accounts() {
        let mut waiting = Vec::new();
        for s in acc.streams.all() {
            let (tx, rx) = mpsc::sync_channel(1);
            if s.tx.send(Cmd::Stop(Some(tx))).is_ok() {
                waiting.push(rx);
            }
        }
        for rx in waiting {
            let _ = rx.recv_timeout(std::time::Duration::from_secs(30));
        }
        *acc.api_tx.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
    js.shards.stop();
    // Release the store: what still holds `js` (a task not yet gone) can no longer write,
    // and the store can be opened again at once (a server restarted in the same process).
    js.meta.lock().unwrap_or_else(|p| p.into_inner()).close();
}
