//! The reader task: socket bytes → parser → per-op handling → routing.
//!
//! One [`Session`] per connection holds everything only this task touches (parser, sid table,
//! protocol flags, match cache), so none of it is locked. Output for other connections goes
//! through their outbound queues; the queues that became dirty during a read batch are woken
//! once when the batch is done.
//!
//! The same task runs the connection's timers: the authentication deadline before CONNECT and
//! the keepalive PINGs after it (`ping_interval`, `ping_max` → `Stale Connection`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;
use tracing::{debug, trace, warn};

use crate::auth::{Credentials, Permissions};
use crate::proto::connect::ConnectInfo;
use crate::proto::errors as perr;
use crate::proto::parser::{Limits, Parser, ProtoError};
use crate::proto::ClientOp;
use crate::subject::{is_valid_publish_subject, is_valid_subscribe_subject};

use super::super::account::{Account, Subscriber, Subscription};
use super::super::backpressure::{self, Budget};
use super::super::client::{ClientHandle, CloseReason};
use super::super::router::{self, Publisher, RouteCtx};
use super::super::Shared;
use super::STATS;

/// Bytes requested from the socket per read.
const READ_SIZE: usize = 64 * 1024;
/// The first keepalive PING goes out no later than this after the connection starts.
const FIRST_PING_MAX: Duration = Duration::from_secs(2);

/// Per-connection protocol state, owned by the reader task.
/// Subjects whose publish decision a connection remembers.
const PUB_PERM_CACHE: usize = 1024;

struct Session {
    client: Arc<ClientHandle>,
    shared: Arc<Shared>,
    account: Arc<Account>,
    parser: Parser,
    connected: bool,
    verbose: bool,
    pedantic: bool,
    echo: bool,
    no_responders: bool,
    headers: bool,
    protocol: i64,
    sent_connect_info: bool,
    sids: HashMap<Bytes, Arc<Subscription>>,
    live_subs: usize,
    route: RouteCtx,
    pings_out: u32,
    active: bool,
    own_dirty: bool,
    in_msgs: u64,
    in_bytes: u64,
    /// The authorization in force when the connection started.
    auth: Arc<crate::auth::Authenticator>,
    /// Nonce sent in INFO, when nkey/JWT auth is possible.
    nonce: Option<String>,
    /// The connection runs over TLS.
    tls: bool,
    /// Came in over WebSocket (connection type `WEBSOCKET`).
    websocket: bool,
    /// Identities from a verified client certificate.
    cert_identities: Vec<String>,
    permissions: Option<Arc<Permissions>>,
    /// Publish-permission decisions by subject (a connection's permissions never change, so
    /// they stay valid; emptied when it grows past [`PUB_PERM_CACHE`]).
    pub_allowed: std::collections::HashMap<Bytes, bool>,
    max_subs: usize,
    /// When the user's credentials expire.
    expires: Option<Instant>,
    /// When the account JWT expires (checked again against the current one then).
    account_expires: Option<Instant>,
    /// Counted in the bound account's connections.
    counted: bool,
    /// The user's claims set a subscription limit (0 then means none allowed).
    subs_limited: bool,
}

/// Outcome of handling one op.
enum Flow {
    Continue,
    Close,
}

/// Runs the reader until the connection closes.
pub(crate) async fn run<R: AsyncRead + Unpin>(
    mut r: R,
    client: Arc<ClientHandle>,
    shared: Arc<Shared>,
    start: super::Start,
) {
    let info_sent = start.info_sent;
    let limits = Limits {
        max_control_line: shared.limits.max_control_line,
        max_payload: shared.limits.max_payload,
    };
    let account = shared.accounts.global();
    let mut s = Session {
        route: RouteCtx::new(client.cid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ shared.seed),
        client,
        account,
        parser: Parser::new(limits),
        connected: false,
        // The reference treats a client as verbose until CONNECT says otherwise.
        verbose: true,
        pedantic: true,
        echo: true,
        no_responders: false,
        headers: false,
        protocol: 0,
        sent_connect_info: false,
        sids: HashMap::new(),
        live_subs: 0,
        pings_out: 0,
        active: false,
        own_dirty: false,
        in_msgs: 0,
        in_bytes: 0,
        auth: shared.auth(),
        nonce: start.nonce.clone(),
        tls: start.tls,
        websocket: start.websocket,
        cert_identities: start.cert_identities,
        permissions: None,
        pub_allowed: std::collections::HashMap::new(),
        max_subs: shared.limits.max_subscriptions,
        expires: None,
        account_expires: None,
        counted: false,
        subs_limited: false,
        shared,
    };
    if !info_sent {
        let info = s
            .shared
            .info_line(&s.client, false, None, s.nonce.as_deref());
        s.push_raw(&info);
        s.flush();
    }

    let auth_deadline = Instant::now() + s.shared.limits.auth_timeout;
    let auth_required = s.auth.required();
    let ping_every = s.shared.limits.ping_interval.max(Duration::from_millis(10));
    let mut ping =
        tokio::time::interval_at(Instant::now() + ping_every.min(FIRST_PING_MAX), ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = BytesMut::with_capacity(READ_SIZE);
    let client = Arc::clone(&s.client);
    loop {
        if buf.capacity() - buf.len() < READ_SIZE / 4 {
            buf.reserve(READ_SIZE.max(s.parser.pending_payload()));
        }
        tokio::select! {
            biased;
            _ = client.cancelled() => break,
            res = r.read_buf(&mut buf) => match res {
                Ok(0) => break,
                Ok(_) => {
                    let flow = s.process(&mut buf);
                    let (throttle, stalled) = s.route.take_backpressure();
                    s.flush();
                    if let Flow::Close = flow { break }
                    // Backpressure (server/backpressure.rs): read nothing more until the
                    // streams this batch filled have room, and give subscribers it pushed
                    // above their high-water mark a moment to drain.
                    if !throttle.is_empty() || !stalled.is_empty() {
                        tokio::select! {
                            biased;
                            _ = client.cancelled() => break,
                            _ = backpressure_wait(&throttle, &stalled, client.cid) => {}
                        }
                    }
                }
                Err(e) => {
                    debug!(error = %e, "read failed");
                    client.close(CloseReason::IoError);
                    break;
                }
            },
            _ = ping.tick(), if s.connected => {
                if let Flow::Close = s.on_ping_tick() { break }
                s.flush();
            }
            _ = tokio::time::sleep_until(s.account_expires.unwrap_or(auth_deadline)), if s.account_expires.is_some() => {
                // The account JWT may have been renewed since CONNECT: check the current one.
                let auth = s.shared.auth();
                let now_exp = auth.trust().and_then(|t| t.account_expiry(&s.account.name));
                let now_unix = unix_now();
                match now_exp {
                    Some(exp) if exp > now_unix => s.account_expires = Some(instant_at(exp)),
                    None if auth.trust().is_some_and(|t| t.account(&s.account.name).is_some()) => {
                        s.account_expires = None;
                    }
                    _ => {
                        debug!("account credentials expired");
                        client.send_err_and_close(perr::ACCOUNT_AUTHENTICATION_EXPIRED, CloseReason::AuthenticationFailure);
                        break;
                    }
                }
            }
            _ = tokio::time::sleep_until(s.expires.unwrap_or(auth_deadline)), if s.expires.is_some() => {
                debug!("user credentials expired");
                client.send_err_and_close(perr::USER_AUTHENTICATION_EXPIRED, CloseReason::AuthenticationFailure);
                break;
            }
            // Every connection, authenticated or not, must send CONNECT in time: an idle
            // pre-CONNECT socket would otherwise hold a `max_connections` slot forever.
            _ = tokio::time::sleep_until(auth_deadline), if !s.connected => {
                debug!(auth_required, "no CONNECT before the deadline");
                client.send_err_and_close(perr::AUTHENTICATION_TIMEOUT, CloseReason::AuthenticationFailure);
                break;
            }
        }
    }
    s.cleanup();
}

/// Waits until every stream intake in `throttle` has room, then up to
/// [`backpressure::STALL_MAX`] for the subscribers in `stalled` (other than the publisher
/// itself) to drain below their high-water marks.
pub(crate) async fn backpressure_wait(
    throttle: &[Arc<Budget>],
    stalled: &[Arc<ClientHandle>],
    me: u64,
) {
    for b in throttle {
        b.wait_for_room().await;
    }
    let others: Vec<&Arc<ClientHandle>> = stalled.iter().filter(|c| c.cid != me).collect();
    if others.is_empty() {
        return;
    }
    backpressure::PRODUCER_STALLS.fetch_add(1, Ordering::Relaxed);
    let _ = tokio::time::timeout(backpressure::STALL_MAX, async {
        for c in others {
            c.outbound.wait_below_high_water().await;
        }
    })
    .await;
}

/// Unix seconds now.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The instant a unix-seconds time is reached (now, if it has passed).
fn instant_at(unix_secs: i64) -> Instant {
    let left = u64::try_from(unix_secs.saturating_sub(unix_now())).unwrap_or(0);
    Instant::now() + Duration::from_secs(left)
}

impl Session {
    fn push_raw(&mut self, bytes: &[u8]) {
        if let Ok(true) = self.client.outbound.push_raw(bytes) {
            self.own_dirty = true;
        }
    }

    fn ok(&mut self) {
        if self.verbose {
            self.push_raw(b"+OK\r\n");
        }
    }

    fn err(&mut self, text: &str) {
        let mut b = BytesMut::with_capacity(text.len() + 10);
        crate::proto::encode::encode_err(&mut b, text);
        self.push_raw(&b);
    }

    fn fatal(&mut self, text: &str, reason: CloseReason) -> Flow {
        self.flush();
        self.client.send_err_and_close(text, reason);
        Flow::Close
    }

    /// Wakes every queue this batch wrote to and publishes the batch's counters.
    fn flush(&mut self) {
        // Counted before anything is flushed: a client that saw its message delivered finds
        // it in `/varz` too.
        let (msgs, bytes, slow) = self.route.take_counts();
        let st = &self.shared.stats;
        if msgs > 0 {
            st.out_msgs.fetch_add(msgs, STATS);
            st.out_bytes.fetch_add(bytes, STATS);
        }
        if slow > 0 {
            st.slow_consumers.fetch_add(slow, STATS);
        }
        if self.in_msgs > 0 {
            st.in_msgs.fetch_add(self.in_msgs, STATS);
            st.in_bytes.fetch_add(self.in_bytes, STATS);
            self.client.in_msgs.fetch_add(self.in_msgs, STATS);
            self.client.in_bytes.fetch_add(self.in_bytes, STATS);
            self.in_msgs = 0;
            self.in_bytes = 0;
        }
        if self.own_dirty {
            self.own_dirty = false;
            self.client.outbound.flush();
        }
        for c in self.route.wake.drain(..) {
            c.outbound.flush();
        }
    }

    fn process(&mut self, buf: &mut BytesMut) -> Flow {
        loop {
            let op = match self.parser.next_client_op(buf) {
                Ok(Some(op)) => op,
                Ok(None) => return Flow::Continue,
                Err(e) => return self.protocol_error(&e),
            };
            if let Flow::Close = self.handle(op) {
                return Flow::Close;
            }
        }
    }

    fn protocol_error(&mut self, e: &ProtoError) -> Flow {
        debug!(error = %e, "protocol error");
        let reason = match e {
            ProtoError::PayloadTooLarge { .. } => CloseReason::MaxPayloadExceeded,
            _ => CloseReason::ProtocolViolation,
        };
        match e.err_text() {
            Some(text) => self.fatal(text, reason),
            None => {
                self.client.close(reason);
                Flow::Close
            }
        }
    }

    fn handle(&mut self, op: ClientOp) -> Flow {
        if !self.connected && self.auth.enabled() && !matches!(op, ClientOp::Connect(_)) {
            debug!("operation before CONNECT on a server that requires auth");
            return self.fatal(
                perr::AUTHORIZATION_VIOLATION,
                CloseReason::AuthenticationFailure,
            );
        }
        match op {
            ClientOp::Pub {
                subject,
                reply,
                headers,
                payload,
            } => self.on_pub(subject, reply, headers, payload),
            ClientOp::Sub {
                subject,
                queue,
                sid,
            } => self.on_sub(subject, queue, sid),
            ClientOp::Unsub { sid, max } => self.on_unsub(&sid, max),
            ClientOp::Ping => {
                trace!("<<- PING");
                self.push_raw(b"PONG\r\n");
                if self.connected && self.protocol >= 1 && !self.sent_connect_info {
                    self.sent_connect_info = true;
                    self.client.async_info.store(true, Ordering::Relaxed);
                    let info =
                        self.shared
                            .info_line(&self.client, true, Some(&self.account.name), None);
                    self.push_raw(&info);
                }
                Flow::Continue
            }
            ClientOp::Pong => {
                self.pings_out = 0;
                Flow::Continue
            }
            ClientOp::Connect(body) => self.on_connect(&body),
            ClientOp::Info(_) => Flow::Continue,
        }
    }

    fn on_connect(&mut self, body: &[u8]) -> Flow {
        let Ok(info) = ConnectInfo::parse(body) else {
            debug!("CONNECT body is not valid JSON");
            self.client.close(CloseReason::ProtocolViolation);
            return Flow::Close;
        };
        let protocol = info.protocol.unwrap_or(0);
        if !(0..=1).contains(&protocol) {
            return self.fatal(
                perr::INVALID_CLIENT_PROTOCOL,
                CloseReason::ProtocolViolation,
            );
        }
        let headers = info.headers.unwrap_or(false) && self.shared.headers_supported;
        if info.no_responders.unwrap_or(false) && !headers {
            return self.fatal(
                perr::NO_RESPONDERS_REQUIRES_HEADERS,
                CloseReason::ProtocolViolation,
            );
        }
        if !self.connected {
            if info.account.is_some() || info.new_account.is_some() {
                debug!("legacy account fields in CONNECT");
                return self.fatal(
                    perr::AUTHORIZATION_VIOLATION,
                    CloseReason::AuthenticationFailure,
                );
            }
            let creds = Credentials {
                user: info.user.as_deref(),
                pass: info.pass.as_deref(),
                token: info.auth_token.as_deref(),
                nkey: info.nkey.as_deref(),
                jwt: info.jwt.as_deref(),
                sig: info.sig.as_deref(),
                nonce: self.nonce.as_deref().unwrap_or(""),
                tls: self.tls,
                ip: Some(self.client.peer.ip()),
                cert_identities: &self.cert_identities,
                websocket: self.websocket,
            };
            match self.auth.authenticate(&creds) {
                Ok(id) => {
                    if let Some(acc) = &id.account {
                        let bound = if let Some(trust) = self.auth.trust() {
                            let a = self.shared.accounts.create(acc);
                            super::super::auth_setup::install_jwt_routes(
                                trust,
                                &self.shared.accounts,
                                &a,
                            );
                            if let Some(claims) = trust.account(acc) {
                                self.shared.accounts.claims_applied(&a, &claims.nats, true);
                            }
                            Some(a)
                        } else {
                            self.shared.accounts.get(acc)
                        };
                        match bound {
                            Some(a) => self.account = a,
                            None => {
                                warn!(account = %acc, "user bound to an unknown account");
                                return self.fatal(
                                    perr::AUTHORIZATION_VIOLATION,
                                    CloseReason::AuthenticationFailure,
                                );
                            }
                        }
                    }
                    let n = self.account.connections.fetch_add(1, Ordering::AcqRel) + 1;
                    self.counted = true;
                    if id.account_conn_limit.is_some_and(|limit| n > limit) {
                        warn!(account = %self.account.name, "account connection limit reached");
                        return self.fatal(
                            perr::MAX_ACCOUNT_CONNECTIONS_EXCEEDED,
                            CloseReason::AuthenticationFailure,
                        );
                    }
                    if let Some(m) = id.max_subs {
                        let m = usize::try_from(m).unwrap_or(usize::MAX);
                        self.max_subs = if self.max_subs == 0 {
                            m
                        } else {
                            self.max_subs.min(m)
                        };
                        self.subs_limited = true;
                    }
                    if let Some(p) = id.max_payload {
                        let p = usize::try_from(p)
                            .unwrap_or(usize::MAX)
                            .min(self.shared.limits.max_payload);
                        self.parser.set_limits(Limits {
                            max_control_line: self.shared.limits.max_control_line,
                            max_payload: p,
                        });
                    }
                    self.expires = id.expires_at.map(instant_at);
                    self.account_expires = id.account_expires_at.map(instant_at);
                    if let Some((max, ttl)) = id.permissions.as_ref().and_then(|p| p.responses) {
                        self.client.allow_responses(max, ttl);
                    }
                    let mut m = self.client.meta.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(jwt) = info.jwt.as_deref() {
                        // Kept to check the user again when its account's claims change.
                        m.grant = Some(Arc::new((Arc::from(jwt), id.clone())));
                    }
                    self.permissions = id.permissions;
                    m.user = id.user;
                    m.user_key = id.user_key;
                }
                Err(e) => {
                    let n = self.shared.record_auth_failure(self.client.peer.ip());
                    if n <= 3 || n.is_power_of_two() {
                        warn!(cid = self.client.cid, remote = %self.client.peer, failures = n, reason = %e, "authentication failed");
                    } else {
                        debug!(cid = self.client.cid, reason = %e, "authentication failed");
                    }
                    return self.fatal(
                        perr::AUTHORIZATION_VIOLATION,
                        CloseReason::AuthenticationFailure,
                    );
                }
            }
        }
        self.connected = true;
        self.verbose = info.verbose.unwrap_or(true);
        self.pedantic = info.pedantic.unwrap_or(true);
        self.echo = info.echo.unwrap_or(true);
        self.no_responders = info.no_responders.unwrap_or(false);
        self.headers = headers;
        self.protocol = protocol;
        self.client.headers.store(headers, Ordering::Relaxed);
        {
            let mut m = self.client.meta.lock().unwrap_or_else(|p| p.into_inner());
            m.name = info.name;
            m.lang = info.lang;
            m.version = info.version;
            m.account = self.account.name.clone();
        }
        debug!(account = %self.account.name, "client connected");
        if let Some(sys) = &self.shared.system {
            sys.client_event(&self.shared, &self.client, true);
        }
        self.ok();
        Flow::Continue
    }

    fn on_pub(
        &mut self,
        subject: Bytes,
        reply: Option<Bytes>,
        headers: Option<Bytes>,
        payload: Bytes,
    ) -> Flow {
        if headers.is_some() && !self.headers {
            debug!("HPUB from a client that did not enable headers");
            self.client.close(CloseReason::ProtocolViolation);
            return Flow::Close;
        }
        if self.pedantic && !is_valid_publish_subject(&subject) {
            self.err(perr::INVALID_PUBLISH_SUBJECT);
            return Flow::Continue;
        }
        if let Some(p) = &self.permissions {
            let allowed = match self.pub_allowed.get(&subject) {
                Some(a) => *a,
                None => {
                    let a = p.may_publish(&subject);
                    if self.pub_allowed.len() >= PUB_PERM_CACHE {
                        self.pub_allowed.clear();
                    }
                    // A copy: the subject is a slice of the read buffer, which a cached
                    // key must not keep alive.
                    self.pub_allowed.insert(Bytes::copy_from_slice(&subject), a);
                    a
                }
            };
            if !allowed && !self.client.use_reply(&subject) {
                debug!("publish permission denied");
                let text = perr::publish_violation(&String::from_utf8_lossy(&subject));
                self.err(&text);
                return Flow::Continue;
            }
        }
        self.active = true;
        self.in_msgs += 1;
        self.in_bytes += (payload.len() + headers.as_ref().map_or(0, Bytes::len)) as u64;
        // +OK goes out before any copy of the message comes back to this connection.
        self.ok();
        let from = Publisher {
            cid: self.client.cid,
            echo: self.echo,
            no_responders: self.no_responders,
            crossed: false,
        };
        router::publish(
            &mut self.route,
            &self.account,
            from,
            &subject,
            reply.as_deref(),
            headers.as_ref(),
            &payload,
        );
        Flow::Continue
    }

    fn on_sub(&mut self, subject: Bytes, queue: Option<Bytes>, sid: Bytes) -> Flow {
        if !is_valid_subscribe_subject(&subject) {
            self.err(perr::INVALID_SUBJECT);
            return Flow::Continue;
        }
        if let Some(p) = &self.permissions {
            if !p.may_subscribe(&subject, queue.as_deref()) {
                debug!("subscribe permission denied");
                let q = queue
                    .as_ref()
                    .map(|q| String::from_utf8_lossy(q).into_owned());
                let text =
                    perr::subscription_violation(&String::from_utf8_lossy(&subject), q.as_deref());
                self.err(&text);
                return Flow::Continue;
            }
        }
        if let Some(existing) = self.sids.get(&sid) {
            if !existing.closed.load(Ordering::Acquire) {
                self.ok();
                return Flow::Continue;
            }
        }
        self.prune_expired();
        let max = self.max_subs;
        if (max > 0 || self.subs_limited) && self.live_subs >= max {
            self.err(perr::MAX_SUBSCRIPTIONS_EXCEEDED);
            return Flow::Continue;
        }
        let sub = Arc::new(Subscription {
            subscriber: Subscriber::Client(Arc::clone(&self.client)),
            sid: sid.clone(),
            subject: subject.clone(),
            queue,
            delivered: AtomicU64::new(0),
            max: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            deny: self
                .permissions
                .clone()
                .filter(|p| p.needs_delivery_filter(&subject)),
        });
        if self.account.subscribe(&sub).is_err() {
            self.err(perr::INVALID_SUBJECT);
            return Flow::Continue;
        }
        self.client.subs.fetch_add(1, Ordering::Relaxed);
        self.sids.insert(sid, sub);
        self.live_subs += 1;
        self.ok();
        Flow::Continue
    }

    /// Drops sid-table entries whose subscription expired through auto-unsubscribe.
    fn prune_expired(&mut self) {
        if self.sids.len() >= 64 && self.sids.len().is_power_of_two() {
            self.sids.retain(|_, s| !s.closed.load(Ordering::Acquire));
        }
        self.live_subs = self.client.subs.load(Ordering::Relaxed) as usize;
    }

    fn on_unsub(&mut self, sid: &Bytes, max: Option<u64>) -> Flow {
        if let Some(sub) = self.sids.get(sid).cloned() {
            let remove_now = match max {
                None | Some(0) => true,
                Some(m) => {
                    sub.max.store(m, Ordering::Relaxed);
                    sub.delivered.load(Ordering::Relaxed) >= m
                }
            };
            if remove_now {
                self.sids.remove(sid);
                if self.account.unsubscribe(&sub) {
                    self.client.subs.fetch_sub(1, Ordering::Relaxed);
                }
                self.live_subs = self.live_subs.saturating_sub(1);
            }
        }
        self.ok();
        Flow::Continue
    }

    fn on_ping_tick(&mut self) -> Flow {
        if self.active {
            // The client published since the last tick: it is alive (the reference skips the
            // PING in that case too; protocol chatter like PING/PONG does not count).
            self.active = false;
            self.pings_out = 0;
            return Flow::Continue;
        }
        if self.pings_out + 1 > self.shared.limits.ping_max {
            debug!("stale connection");
            self.shared.stats.stale_connections.fetch_add(1, STATS);
            return self.fatal(perr::STALE_CONNECTION, CloseReason::StaleConnection);
        }
        self.pings_out += 1;
        self.push_raw(b"PING\r\n");
        Flow::Continue
    }

    fn cleanup(&mut self) {
        self.flush();
        if self.connected {
            if let Some(sys) = &self.shared.system {
                sys.client_event(&self.shared, &self.client, false);
            }
        }
        if self.counted {
            self.account.connections.fetch_sub(1, Ordering::AcqRel);
        }
        for (_, sub) in self.sids.drain() {
            if self.account.unsubscribe(&sub) {
                self.client.subs.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// A fresh nonce for INFO: 11 random bytes, base64url without padding (15 characters).
pub(crate) fn new_nonce() -> String {
    let mut b = [0u8; 11];
    crate::crypto::random_bytes(&mut b);
    data_encoding::BASE64URL_NOPAD.encode(&b)
}
