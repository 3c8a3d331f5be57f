//! The system account: server events and the requests operators send to the server.
//!
//! An in-process client lives in the system account. Its subscriptions are ordinary ones, and
//! messages reach it through an ordinary [`Outbound`](super::client::outbound::Outbound) queue,
//! which a task here drains and parses with the client-side protocol parser — so requests take
//! exactly the path a real subscriber's messages take. It answers:
//!
//! - `$SYS.REQ.CLAIMS.UPDATE` and `$SYS.REQ.ACCOUNT.<id>.CLAIMS.UPDATE`: an account JWT pushed
//!   by an operator. It is verified completely (signature, trusted operator, validity, `sub`)
//!   **before** it is stored or persisted; connected users it revokes are disconnected with
//!   `User Authentication Revoked`.
//! - `$SYS.REQ.ACCOUNT.<id>.CLAIMS.LOOKUP`: the stored account JWT.
//! - `$SYS.REQ.SERVER.PING` (and `.STATSZ`): server statistics, with the cluster's routes
//!   and `active_servers` as nats-server gives them.
//! - `$SYS.REQ.SERVER.<id>.AUDIT` (this server) and `$SYS.REQ.SERVER.PING.AUDIT` (every
//!   server): a live audit of the store (`jetstream/audit.rs`), answered when it is done.
//! - `$SYS.REQ.SERVER.<id>.ROTATE_MASTER` and `$SYS.REQ.SERVER.PING.ROTATE_MASTER`: the store's
//!   master key rotated while serving (`jetstream/rotation.rs`).
//! - `$SYS.REQ.SERVER.<id>.REKEY` and `$SYS.REQ.SERVER.PING.REKEY`: streams' data keys rotated
//!   and their files re-sealed in the background (`jetstream/rekey.rs`), answered when done.
//!
//! It publishes `$SYS.ACCOUNT.<account>.CONNECT` / `DISCONNECT` events. Tenants cannot reach
//! any of this: `$SYS.>` in their account is their own subject space.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use tracing::{debug, info, warn};

use crate::auth::trust::Recheck;
use crate::proto::errors as perr;
use crate::proto::parser::{Limits, Parser};
use crate::proto::ServerOp;

use super::account::{Account, Subscriber, Subscription};
use super::client::{ClientHandle, CloseReason};
use super::router::{self, Publisher, RouteCtx};
use super::{Shared, NATS_COMPAT_VERSION};

/// Connection id of the internal client (real clients start at 1).
const INTERNAL_CID: u64 = 0;
/// Queue limit of the internal client: requests are small; a flood is dropped, not buffered.
const INTERNAL_MAX_PENDING: usize = 64 * 1024 * 1024;

/// The meta leader stepdown, a system-account request in nats-server (from any other account,
/// or on a server without a cluster, nobody answers it).
const META_STEPDOWN: &str = "$JS.API.META.LEADER.STEPDOWN";
/// The stepdown's answer type.
const PURGE_TYPE: &str = "io.nats.jetstream.api.v1.account_purge_response";
const META_STEPDOWN_TYPE: &str = "io.nats.jetstream.api.v1.meta_leader_stepdown_response";
/// A server's removal from the meta group, likewise a system-account request of the meta
/// leader.
const SERVER_REMOVE: &str = "$JS.API.SERVER.REMOVE";
/// Its answer type.
const SERVER_REMOVE_TYPE: &str = "io.nats.jetstream.api.v1.meta_server_remove_response";

/// A request answered later, from another thread (an audit, a re-sealing), exactly once:
/// `{"server": .., "data": ..}` or `{"server": .., "error": {"code", "description"}}`.
struct Later {
    system: Arc<System>,
    reply: String,
    server: Value,
    sent: AtomicBool,
}

impl Later {
    fn new(system: &Arc<System>, shared: &Shared, reply: String) -> Arc<Self> {
        Arc::new(Later {
            system: Arc::clone(system),
            reply,
            server: System::server_block(shared),
            sent: AtomicBool::new(false),
        })
    }

    fn answer(&self, data: Value) {
        self.send(json!({ "server": self.server, "data": data }));
    }

    fn fail(&self, code: u16, description: String) {
        self.send(
            json!({ "server": self.server, "error": { "code": code, "description": description } }),
        );
    }

    fn send(&self, answer: Value) {
        if !self.sent.swap(true, Ordering::AcqRel) {
            self.system.publish(&self.reply, &answer);
        }
    }
}

/// The system account's in-process client.
pub(crate) struct System {
    /// The system account.
    pub(crate) account: Arc<Account>,
    client: Arc<ClientHandle>,
    route: Mutex<RouteCtx>,
}

impl System {
    /// Creates the internal client and its subscriptions in `account`.
    pub(crate) fn new(account: Arc<Account>, server_id: &str) -> Arc<Self> {
        let client = Arc::new(ClientHandle::new(
            INTERNAL_CID,
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            INTERNAL_MAX_PENDING,
        ));
        client.headers.store(true, Ordering::Relaxed);
        let audit = format!("$SYS.REQ.SERVER.{server_id}.AUDIT");
        let rotate = format!("$SYS.REQ.SERVER.{server_id}.ROTATE_MASTER");
        let rekey = format!("$SYS.REQ.SERVER.{server_id}.REKEY");
        let subjects = [
            audit.as_str(),
            rotate.as_str(),
            rekey.as_str(),
            "$SYS.REQ.CLAIMS.UPDATE",
            "$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE",
            "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP",
            "$SYS.REQ.SERVER.PING",
            "$SYS.REQ.SERVER.PING.*",
            "$JS.API.ACCOUNT.PURGE.*",
            META_STEPDOWN,
            SERVER_REMOVE,
        ];
        for (i, s) in subjects.iter().enumerate() {
            let sub = Arc::new(Subscription {
                subscriber: Subscriber::Client(Arc::clone(&client)),
                sid: Bytes::from(i.to_string()),
                subject: Bytes::copy_from_slice(s.as_bytes()),
                queue: None,
                delivered: AtomicU64::new(0),
                max: AtomicU64::new(0),
                closed: AtomicBool::new(false),
                deny: None,
            });
            if account.subscribe(&sub).is_err() {
                warn!(subject = s, "could not subscribe the system service");
            }
        }
        Arc::new(System {
            account,
            client,
            route: Mutex::new(RouteCtx::new(0x5157)),
        })
    }

    fn publish(&self, subject: &str, body: &Value) {
        let payload = Bytes::from(body.to_string());
        let mut ctx = self.route.lock().unwrap_or_else(|p| p.into_inner());
        let from = Publisher {
            cid: INTERNAL_CID,
            echo: false,
            no_responders: false,
            crossed: false,
        };
        router::publish(
            &mut ctx,
            &self.account,
            from,
            subject.as_bytes(),
            None,
            None,
            &payload,
        );
        for c in ctx.wake.drain(..) {
            c.outbound.flush();
        }
        let _ = ctx.take_counts();
    }

    fn server_block(shared: &Shared) -> Value {
        json!({
            "name": shared.server_name,
            "host": shared.opts.host,
            "id": shared.server_id,
            "ver": NATS_COMPAT_VERSION,
            "jetstream": shared.jetstream.get().is_some(),
            "time": crate::timefmt::rfc3339_system(SystemTime::now()),
        })
    }

    /// Publishes a CONNECT or DISCONNECT event for `client`.
    pub(crate) fn client_event(&self, shared: &Shared, client: &ClientHandle, connect: bool) {
        let m = client.meta();
        let kind = if connect { "CONNECT" } else { "DISCONNECT" };
        let body = json!({
            "type": if connect { "io.nats.server.advisory.v1.client_connect" } else { "io.nats.server.advisory.v1.client_disconnect" },
            "timestamp": crate::timefmt::rfc3339_system(SystemTime::now()),
            "server": Self::server_block(shared),
            "client": {
                "start": crate::timefmt::rfc3339_system(client.start),
                "host": client.peer.ip().to_string(),
                "id": client.cid,
                "acc": m.account,
                "user": m.user.unwrap_or_default(),
                "name": m.name.unwrap_or_default(),
                "lang": m.lang.unwrap_or_default(),
                "version": m.version.unwrap_or_default(),
            },
            "reason": client.close_reason().map(|r| r.as_str()).unwrap_or(""),
        });
        self.publish(&format!("$SYS.ACCOUNT.{}.{kind}", m.account), &body);
    }

    /// Drains the internal client's queue and answers requests until the server stops.
    pub(crate) async fn run(self: Arc<Self>, shared: Arc<Shared>) {
        let mut parser = Parser::new(Limits {
            max_control_line: 1 << 20,
            max_payload: usize::MAX,
        });
        let mut buf = BytesMut::new();
        loop {
            let batch = self.client.outbound.take();
            if batch.closed {
                return;
            }
            if batch.bytes == 0 {
                self.client.outbound.wait().await;
                continue;
            }
            for c in batch.chunks {
                buf.extend_from_slice(&c);
            }
            // The batch is consumed: without this the queue would think a write is still in
            // progress and hand out nothing more (one request per server lifetime).
            self.client.outbound.written(batch.bytes);
            self.client.outbound.finished_writing();
            loop {
                match parser.next_server_op(&mut buf) {
                    Ok(Some(ServerOp::Msg {
                        subject,
                        reply,
                        payload,
                        ..
                    })) => {
                        if let Some(reply) = reply {
                            let reply = String::from_utf8_lossy(&reply).into_owned();
                            if self.answer_apart(&shared, &subject, &payload, &reply) {
                                continue;
                            }
                            let answer = self.answer(&shared, &subject, &payload);
                            self.publish(&reply, &answer);
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        warn!(error = %e, "system service could not parse its own queue");
                        buf.clear();
                        parser = Parser::new(Limits {
                            max_control_line: 1 << 20,
                            max_payload: usize::MAX,
                        });
                        break;
                    }
                }
            }
        }
    }

    /// `$JS.API.ACCOUNT.PURGE.<account>`'s answer (tenant erasure).
    fn purge_answer(shared: &Shared, account: &str) -> Value {
        match shared.jetstream.get() {
            None => {
                json!({"type": PURGE_TYPE, "error": {"code": 503, "err_code": 10076, "description": "JetStream not enabled"}})
            }
            Some(js) => match super::jetstream::purge_account(js, account) {
                // `erased`: sealstream's addition — what was destroyed, for an attestation.
                Ok((_, Some(erased))) => {
                    json!({"type": PURGE_TYPE, "initiated": true, "erased": erased})
                }
                Ok((_, None)) => json!({"type": PURGE_TYPE, "initiated": true}),
                Err(e) => {
                    json!({"type": PURGE_TYPE, "error": {"code": 500, "err_code": 10011, "description": e}})
                }
            },
        }
    }

    /// Requests that wait on something (the meta group, stream workers) are answered by a
    /// task of their own, so the service keeps serving meanwhile: the meta leader stepdown
    /// and the monitoring documents of `$SYS.REQ.SERVER.PING.<KIND>`. Returns whether the
    /// request was one of them.
    fn answer_apart(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        subject: &[u8],
        payload: &Bytes,
        reply: &str,
    ) -> bool {
        let subject = String::from_utf8_lossy(subject);
        let (me, shared, payload, reply) = (
            Arc::clone(self),
            Arc::clone(shared),
            payload.clone(),
            reply.to_owned(),
        );
        if subject == META_STEPDOWN || subject == SERVER_REMOVE {
            // Every server hears these; the meta leader answers. Nobody answers while there
            // is no leader, nor on a server without a cluster (as nats-server: the client's
            // request times out).
            let Some(cluster) = shared.jetstream.get().and_then(|js| js.cluster().cloned()) else {
                return true;
            };
            if !cluster.is_meta_leader() {
                return true;
            }
            let stepdown = subject == META_STEPDOWN;
            tokio::spawn(async move {
                let (kind, result) = if stepdown {
                    (META_STEPDOWN_TYPE, cluster.meta_step_down(&payload).await)
                } else {
                    (SERVER_REMOVE_TYPE, cluster.server_remove(&payload).await)
                };
                let answer = match result {
                    Ok(()) => json!({ "type": kind, "success": true }),
                    Err(e) => json!({ "type": kind, "error": e.to_json() }),
                };
                me.publish(&reply, &answer);
            });
            return true;
        }
        if let Some(account) = subject.strip_prefix("$JS.API.ACCOUNT.PURGE.") {
            // Waits on stream workers and, clustered, on the meta group: on a blocking thread.
            let account = account.to_owned();
            tokio::spawn(async move {
                let sh = Arc::clone(&shared);
                let answer =
                    tokio::task::spawn_blocking(move || Self::purge_answer(&sh, &account))
                        .await
                        .unwrap_or_else(|_| {
                            json!({"type": PURGE_TYPE, "error": {"code": 500, "err_code": 10011, "description": "purge failed"}})
                        });
                me.publish(&reply, &answer);
            });
            return true;
        }
        if subject == "$SYS.REQ.SERVER.PING.AUDIT"
            || (subject.starts_with("$SYS.REQ.SERVER.") && subject.ends_with(".AUDIT"))
        {
            let later = Later::new(&me, &shared, reply);
            let Some(js) = shared.jetstream.get() else {
                later.fail(409, "JetStream is not enabled on this server".into());
                return true;
            };
            let request = match super::jetstream::audit::AuditRequest::parse(&payload) {
                Ok(r) => r,
                Err(e) => {
                    later.fail(400, e);
                    return true;
                }
            };
            let scope = match &request.account {
                Some(a) => crate::audit::Scope::Account(a.clone()),
                None => crate::audit::Scope::Store,
            };
            let max_payload = usize::try_from(shared.opts.max_payload).unwrap_or(usize::MAX);
            let done = Arc::clone(&later);
            let started = super::jetstream::audit::start(js, scope, request, move |report| {
                let data = serde_json::to_value(&report).unwrap_or(Value::Null);
                // The reply must fit a message; a report too large says so.
                if data.to_string().len() + 512 > max_payload {
                    done.fail(413, format!("the audit report ({} findings, {} segments) is larger than max_payload; audit per account or offline", report.findings.len(), report.segments.len()));
                } else {
                    done.answer(data);
                }
            });
            if let Err(e) = started {
                later.fail(409, e.to_owned());
            }
            return true;
        }
        if subject.starts_with("$SYS.REQ.SERVER.") && subject.ends_with(".REKEY") {
            let later = Later::new(&me, &shared, reply);
            let Some(js) = shared.jetstream.get() else {
                later.fail(409, "JetStream is not enabled on this server".into());
                return true;
            };
            let request: super::jetstream::rekey::RekeyRequest =
                if payload.iter().all(u8::is_ascii_whitespace) {
                    Default::default()
                } else {
                    match serde_json::from_slice(&payload) {
                        Ok(r) => r,
                        Err(e) => {
                            later.fail(400, format!("invalid rekey request: {e}"));
                            return true;
                        }
                    }
                };
            let done = Arc::clone(&later);
            let started = super::jetstream::rekey::start(js, request, move |streams| {
                done.answer(json!({ "streams": streams }));
            });
            if let Err(e) = started {
                later.fail(409, e);
            }
            return true;
        }
        if subject.starts_with("$SYS.REQ.SERVER.") && subject.ends_with(".ROTATE_MASTER") {
            tokio::spawn(async move {
                let sh = Arc::clone(&shared);
                let result = tokio::task::spawn_blocking(move || match sh.jetstream.get() {
                    Some(js) => super::jetstream::rotation::rotate_master(js, &payload),
                    None => Err("JetStream is not enabled on this server".to_owned()),
                })
                .await
                .unwrap_or_else(|_| Err("the rotation failed".to_owned()));
                let server = Self::server_block(&shared);
                let answer = match result {
                    Ok(data) => json!({ "server": server, "data": data }),
                    Err(e) => {
                        json!({ "server": server, "error": { "code": 500, "description": e } })
                    }
                };
                me.publish(&reply, &answer);
            });
            return true;
        }
        let Some(kind) = subject.strip_prefix("$SYS.REQ.SERVER.PING.") else {
            return false;
        };
        if kind == "STATSZ" || kind == "IDZ" {
            return false;
        }
        let kind = kind.to_owned();
        tokio::spawn(async move {
            let sh = Arc::clone(&shared);
            let data =
                tokio::task::spawn_blocking(move || super::monitor::document(&sh, &kind, &payload))
                    .await
                    .ok()
                    .flatten();
            let server = Self::server_block(&shared);
            let answer = match data {
                Some(data) => json!({ "server": server, "data": data }),
                None => {
                    json!({ "server": server, "error": { "code": 404, "description": "unknown request" } })
                }
            };
            me.publish(&reply, &answer);
        });
        true
    }

    fn answer(&self, shared: &Shared, subject: &[u8], payload: &[u8]) -> Value {
        let subject = String::from_utf8_lossy(subject);
        let server = Self::server_block(shared);
        let tokens: Vec<&str> = subject.split('.').collect();
        match tokens.as_slice() {
            ["$SYS", "REQ", "CLAIMS", "UPDATE"] => self.claims_update(shared, payload, None),
            ["$SYS", "REQ", "ACCOUNT", id, "CLAIMS", "UPDATE"] => {
                self.claims_update(shared, payload, Some(id))
            }
            ["$SYS", "REQ", "ACCOUNT", id, "CLAIMS", "LOOKUP"] => {
                let auth = shared.auth();
                match auth.trust().and_then(|t| t.account(id)) {
                    Some(c) => json!({ "server": server, "data": { "account": id, "claims": *c } }),
                    None => {
                        json!({ "server": server, "error": { "account": id, "code": 404, "description": "account not found" } })
                    }
                }
            }
            ["$SYS", "REQ", "SERVER", "PING", "IDZ"] => {
                json!({ "name": shared.server_name, "host": shared.opts.host, "id": shared.server_id })
            }
            ["$SYS", "REQ", "SERVER", "PING", ..] => {
                let st = &shared.stats;
                let (in_msgs, out_msgs) = (
                    st.in_msgs.load(Ordering::Relaxed),
                    st.out_msgs.load(Ordering::Relaxed),
                );
                let (in_bytes, out_bytes) = (
                    st.in_bytes.load(Ordering::Relaxed),
                    st.out_bytes.load(Ordering::Relaxed),
                );
                let routes = Self::route_stats(shared);
                json!({
                    "server": server,
                    "statsz": {
                        "start": crate::timefmt::rfc3339_system(shared.start),
                        "cores": std::thread::available_parallelism().map_or(1, usize::from),
                        "connections": shared.num_clients(),
                        "total_connections": st.total_connections.load(Ordering::Relaxed),
                        "active_accounts": shared
                            .accounts
                            .all()
                            .iter()
                            .filter(|a| a.connections.load(Ordering::Relaxed) > 0)
                            .count(),
                        "subscriptions": shared.accounts.subscription_count(),
                        "sent": { "msgs": out_msgs, "bytes": out_bytes },
                        "received": { "msgs": in_msgs, "bytes": in_bytes },
                        "in_msgs": in_msgs,
                        "out_msgs": out_msgs,
                        "in_bytes": in_bytes,
                        "out_bytes": out_bytes,
                        "slow_consumers": st.slow_consumers.load(Ordering::Relaxed),
                        "active_servers": shared.cluster.as_ref().map_or(0, |c| c.peers()) + 1,
                        "routes": routes,
                    }
                })
            }
            _ => {
                json!({ "server": server, "error": { "code": 404, "description": "unknown request" } })
            }
        }
    }

    /// The `routes` of a server ping's `statsz`, as nats-server lists them: one entry per route
    /// (`rid`, peer `name`, `sent`/`received` messages and bytes, `pending` bytes).
    fn route_stats(shared: &Shared) -> Vec<Value> {
        let Some(cluster) = &shared.cluster else {
            return Vec::new();
        };
        let mut routes = cluster.routes();
        routes.sort_by_key(|r| r.handle.cid);
        routes
            .iter()
            .map(|r| {
                let (sent_msgs, sent_bytes) = r.handle.outbound.out_stats();
                json!({
                    "rid": r.handle.cid,
                    "name": r.lock_info().server_name.clone(),
                    "sent": { "msgs": sent_msgs, "bytes": sent_bytes },
                    "received": {
                        "msgs": r.in_msgs.load(Ordering::Relaxed),
                        "bytes": r.in_bytes.load(Ordering::Relaxed),
                    },
                    "pending": r.handle.outbound.pending_bytes(),
                })
            })
            .collect()
    }

    fn claims_update(&self, shared: &Shared, payload: &[u8], id: Option<&str>) -> Value {
        let server = Self::server_block(shared);
        let auth = shared.auth();
        let Some(trust) = auth.trust() else {
            return json!({ "server": server, "error": { "code": 500, "description": "the server is not in operator mode" } });
        };
        let token = String::from_utf8_lossy(payload);
        match trust.push_account(token.trim(), id) {
            Ok(account) => {
                info!(%account, "account JWT updated");
                if let (Some(a), Some(claims)) =
                    (shared.accounts.get(&account), trust.account(&account))
                {
                    shared.accounts.claims_applied(&a, &claims.nats, false);
                }
                super::auth_setup::reinstall_jwt_routes(trust, &shared.accounts);
                let revoked = recheck_connections(shared, &account);
                json!({ "server": server, "data": { "account": account, "code": 200, "message": "jwt updated", "disconnected": revoked } })
            }
            Err(e) => {
                warn!(error = %e, "account JWT update refused");
                json!({ "server": server, "error": { "account": id.unwrap_or(""), "code": 500, "description": e.to_string() } })
            }
        }
    }
}

/// After `account`'s claims changed: checks every connection of the account against them
/// and acts as nats-server does — revoked users get `User Authentication Revoked`, an expired
/// account `Account Authentication Expired`, users no longer allowed at all (their signing
/// key removed) are closed without a message; a lowered `limits.conn` closes the newest
/// connections beyond it (`maximum account active connections exceeded`). A user whose
/// permissions or limits changed (a scope's template, default permissions, subs/payload) is
/// closed too, so that it reconnects under the new grant: nothing is half-applied.
/// Returns how many connections were closed.
pub(crate) fn recheck_connections(shared: &Shared, account: &str) -> usize {
    let auth = shared.auth();
    let Some(trust) = auth.trust() else {
        return 0;
    };
    let mut n = 0;
    let mut kept = Vec::new();
    for c in shared.clients() {
        let m = c.meta();
        if m.account != account {
            continue;
        }
        let Some(grant) = &m.grant else {
            kept.push(c);
            continue;
        };
        let (jwt, identity) = &**grant;
        match trust.recheck(jwt, identity) {
            Recheck::Unchanged => {
                kept.push(c);
                continue;
            }
            Recheck::Revoked => c.send_err_and_close(
                perr::USER_AUTHENTICATION_REVOKED,
                CloseReason::AuthenticationFailure,
            ),
            Recheck::AccountExpired => c.send_err_and_close(
                perr::ACCOUNT_AUTHENTICATION_EXPIRED,
                CloseReason::AuthenticationFailure,
            ),
            Recheck::Refused | Recheck::Changed(_) => {
                c.close(CloseReason::AuthenticationFailure);
            }
        }
        debug!(cid = c.cid, "connection closed after an account update");
        n += 1;
    }
    let limit = trust
        .account(account)
        .and_then(|a| usize::try_from(a.nats.limits.conn).ok());
    if let Some(limit) = limit {
        if kept.len() > limit {
            // The oldest connections stay (as nats-server): close the newest.
            kept.sort_by_key(|c| (c.start, c.cid));
            for c in kept.iter().skip(limit) {
                c.send_err_and_close(
                    perr::MAX_ACCOUNT_CONNECTIONS_EXCEEDED,
                    CloseReason::AuthenticationFailure,
                );
                n += 1;
            }
        }
    }
    n
}
