//! Routing one published message to every interested subscription of an account.
//!
//! The publisher's reader task calls [`publish`] directly: matching, queue-group selection and
//! pushing into each subscriber's outbound queue all happen on that task, with no channel hop.
//! A per-reader [`RouteCtx`] holds the match cache (validated by the account's tree generation),
//! the queues to wake at the end of the read batch, and subscriptions whose auto-unsubscribe
//! limit was reached.
//!
//! Rules (client-protocol §5, §7): every plain subscription gets a copy; each queue group (all
//! queue subscriptions sharing a name, whatever their pattern) gets exactly one copy, at a
//! random member; `echo: false` publishers skip their own subscriptions; subscribers without
//! header support get the payload only; a request nobody listens to gets the 503 status when
//! the publisher asked for no-responders.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tracing::warn;

use crate::proto::headers::no_responders_block;
use crate::subject::MatchCache;

use super::account::{
    imports, Account, Matches, RemoteInterest, SubRef, Subscriber, Subscription,
    SERVICE_QUEUE_PREFIX,
};
use super::backpressure::{self, Budget};
use super::client::outbound::{PushError, Pushed};
use super::client::{ClientHandle, CloseReason};

/// Who is publishing, as routing needs to know it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Publisher {
    /// The publishing connection.
    pub(crate) cid: u64,
    /// Deliver to the publisher's own subscriptions.
    pub(crate) echo: bool,
    /// Answer requests nobody listens to with a 503 status.
    pub(crate) no_responders: bool,
    /// The message already crossed an account boundary: it is not exported again.
    pub(crate) crossed: bool,
}

/// Per-reader routing state; lives as long as the connection.
pub(crate) struct RouteCtx {
    cache: MatchCache<SubRef>,
    /// The account the cache holds results for (its address); other accounts bypass it.
    cache_owner: Option<usize>,
    rng: u64,
    /// Outbound queues that became dirty during this batch and need a wake-up.
    pub(crate) wake: Vec<Arc<ClientHandle>>,
    expired: Vec<Arc<Subscription>>,
    /// Stream intake budgets this batch pushed over their bound (the reader waits for room).
    throttle: Vec<Arc<Budget>>,
    /// Subscribers this batch left above their high-water mark (the reader stalls briefly).
    stalled: Vec<Arc<ClientHandle>>,
    /// Copies for cluster peers collected while matching one publish (sent, one per peer, at
    /// its end).
    routed: Vec<RoutedCopy>,
    /// Messages queued to subscribers since the last [`RouteCtx::take_counts`].
    delivered_msgs: u64,
    delivered_bytes: u64,
    slow_consumers: u64,
}

impl RouteCtx {
    /// Fresh state; `seed` varies queue-member choice between connections.
    pub(crate) fn new(seed: u64) -> Self {
        RouteCtx {
            cache: MatchCache::new(),
            cache_owner: None,
            rng: seed | 1,
            wake: Vec::new(),
            expired: Vec::new(),
            throttle: Vec::new(),
            stalled: Vec::new(),
            routed: Vec::new(),
            delivered_msgs: 0,
            delivered_bytes: 0,
            slow_consumers: 0,
        }
    }

    /// xorshift64*: queue-member choice needs speed and spread, not unpredictability.
    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Takes the backpressure this batch ran into: budgets to wait for, subscribers to let
    /// drain. Only connection readers act on it; [`RouteCtx::take_counts`] drops what is left.
    pub(crate) fn take_backpressure(&mut self) -> (Vec<Arc<Budget>>, Vec<Arc<ClientHandle>>) {
        (
            std::mem::take(&mut self.throttle),
            std::mem::take(&mut self.stalled),
        )
    }

    /// Returns and resets (messages, bytes, slow consumers) counted since the last call, and
    /// forgets backpressure nobody waits for (stream threads and the system client never do).
    pub(crate) fn take_counts(&mut self) -> (u64, u64, u64) {
        self.throttle.clear();
        self.stalled.clear();
        let c = (
            self.delivered_msgs,
            self.delivered_bytes,
            self.slow_consumers,
        );
        self.delivered_msgs = 0;
        self.delivered_bytes = 0;
        self.slow_consumers = 0;
        c
    }

    fn lookup(&mut self, account: &Account, subject: &[u8]) -> Arc<Matches> {
        let owner = std::ptr::from_ref(account) as usize;
        if *self.cache_owner.get_or_insert(owner) != owner {
            return Arc::new(account.matches(subject).0);
        }
        let generation = account.generation();
        if let Some(hit) = self.cache.get(subject, generation) {
            return hit;
        }
        let (m, at) = account.matches(subject);
        let m = Arc::new(m);
        self.cache.insert(subject, at, Arc::clone(&m));
        m
    }
}

/// One publish's copy for one route peer: the queue groups picked on that peer (none: plain
/// interest only).
struct RoutedCopy {
    route: Arc<ClientHandle>,
    queues: Vec<Arc<[u8]>>,
    /// The peer's plain subscribers take it (a JetStream delivery says so apart from the
    /// groups; an `RMSG` always reaches them).
    plain: bool,
    /// The connection is pinned to the account: no account name in the `RMSG`.
    pinned: bool,
}

/// Where a publish may go besides local subscribers.
#[derive(Clone, Copy)]
enum Reach<'a> {
    /// Local subscribers and, as `RMSG` in this account, route peers (a local publisher).
    Cluster(&'a [u8]),
    /// Local subscribers only (a stream import mapped here).
    Local,
    /// A JetStream delivery to local plain subscribers only: a replicated stream's follower,
    /// or a peer's `JMSG`. A queue group gets one copy cluster-wide, picked by the server
    /// that delivers ([`DeliveryReach`]).
    Follower,
    /// A peer's `JQMSG`: one local member of each of these queue groups (the sender picked
    /// them here), nobody else.
    Picked(&'a [Bytes]),
    /// A JetStream delivery to `to`'s subscribers here and, as `JMSG` in `account`, on the
    /// sealstream peers not named in `skip` (the stream's other replicas deliver there
    /// themselves).
    Deliver {
        account: &'a [u8],
        to: &'a [u8],
        skip: &'a [String],
    },
    /// A message that came from a route: local plain subscribers, and one local member of
    /// each of these queue groups (the sender picked them for us). In-process services take
    /// it only as a picked member: their subscriptions are queue groups when other servers
    /// may reach them, and a plain one is this server's own (its stream or API entry).
    FromRoute(&'a [Bytes]),
}

impl Reach<'_> {
    /// Whether a copy goes to the peer behind `r`.
    fn reaches(self, r: &RemoteInterest) -> bool {
        match self {
            Reach::Cluster(_) => true,
            Reach::Deliver { skip, .. } => {
                r.takes_deliveries && !skip.iter().any(|p| **p == *r.peer)
            }
            Reach::Local | Reach::Follower | Reach::Picked(_) | Reach::FromRoute(_) => false,
        }
    }

    /// Whether a queue group's member behind `r` may be picked: a JetStream delivery picks
    /// among every server's members, the stream's other replicas' included (they deliver
    /// only to their plain subscribers).
    fn reaches_member(self, r: &RemoteInterest) -> bool {
        match self {
            Reach::Deliver { .. } => r.takes_deliveries,
            other => other.reaches(r),
        }
    }
}

/// Where a JetStream delivery goes besides this server's plain subscribers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DeliveryReach<'a> {
    /// This server's plain subscribers only: a replicated stream's follower (every replica
    /// delivers a committed round to its own plain subscribers, but a queue group must get
    /// one copy, not one per replica: the leader picks its member, on any server), or a
    /// peer's `JMSG` (the peer picked the groups' members itself).
    Follower,
    /// One member here of each of these queue groups, nobody else: a peer's `JQMSG`.
    Picked(&'a [Bytes]),
    /// This server's subscribers, the other servers' except those in `skip` (replicas that
    /// deliver there themselves), and a queue group's members on any server.
    Peers(&'a [String]),
}

/// Routes one message within `account`. Returns how many subscriptions it was queued to.
pub(crate) fn publish(
    ctx: &mut RouteCtx,
    account: &Arc<Account>,
    from: Publisher,
    subject: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&Bytes>,
    payload: &Bytes,
) -> usize {
    let matches = ctx.lookup(account, subject);
    let reach = Reach::Cluster(account.name.as_bytes());
    let n = deliver_matches(ctx, &matches, from, reach, subject, reply, headers, payload);
    let crossed = cross_accounts(ctx, account, from, subject, reply, headers, payload);
    if matches.plain.is_empty() && matches.groups.is_empty() && !crossed && from.no_responders {
        if let Some(reply) = reply {
            let status = no_responders_block(subject);
            let answer = Publisher {
                cid: from.cid,
                echo: true,
                no_responders: false,
                crossed: false,
            };
            publish(
                ctx,
                account,
                answer,
                reply,
                None,
                Some(&status),
                &Bytes::new(),
            );
        }
    }
    release_expired(ctx, account);
    n
}

/// Delivers to the subscribers of `to` in `account`, showing `shown` as the subject:
/// JetStream deliveries go to a pull request's inbox or a push consumer's deliver subject but
/// keep the stream message's own subject. With `remote`, also to the subscribers on route
/// peers (sealstream ones, as `JMSG`) except the servers it names; without, here only. No
/// import/export hop, no no-responders status. Returns how many subscriptions (a peer
/// counting as one) took it (0: nobody is listening).
#[allow(clippy::too_many_arguments)]
pub(crate) fn deliver_as(
    ctx: &mut RouteCtx,
    account: &Arc<Account>,
    to: &[u8],
    shown: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&Bytes>,
    payload: &Bytes,
    reach: DeliveryReach<'_>,
) -> usize {
    let matches = ctx.lookup(account, to);
    let from = Publisher {
        cid: u64::MAX,
        echo: true,
        no_responders: false,
        crossed: true,
    };
    let reach = match reach {
        DeliveryReach::Peers(skip) => Reach::Deliver {
            account: account.name.as_bytes(),
            to,
            skip,
        },
        DeliveryReach::Follower => Reach::Follower,
        DeliveryReach::Picked(queues) => Reach::Picked(queues),
    };
    let n = deliver_matches(ctx, &matches, from, reach, shown, reply, headers, payload);
    release_expired(ctx, account);
    n
}

/// Delivers a message a route peer sent (`RMSG`): to local plain subscribers and to one local
/// member of each group in `queues`, and through this account's stream exports to local
/// importers. Never forwarded to another route (one hop), no service imports (the sender
/// applied them), no no-responders status (the requester's server decides).
#[allow(clippy::too_many_arguments)]
pub(crate) fn deliver_routed(
    ctx: &mut RouteCtx,
    account: &Arc<Account>,
    subject: &[u8],
    reply: Option<&[u8]>,
    queues: &[Bytes],
    headers: Option<&Bytes>,
    payload: &Bytes,
) -> usize {
    let matches = ctx.lookup(account, subject);
    let from = Publisher {
        cid: u64::MAX,
        echo: true,
        no_responders: false,
        crossed: true,
    };
    let reach = Reach::FromRoute(queues);
    let mut n = deliver_matches(ctx, &matches, from, reach, subject, reply, headers, payload);
    release_expired(ctx, account);
    if let Some(routes) = account.routes() {
        // An answer to a service import this server mapped (the requester is here).
        if subject.starts_with(b"_R_.") {
            if let Some((importer, back)) = routes.take_reply(subject) {
                n += 1;
                publish(ctx, &importer, from, &back, None, headers, payload);
            }
        }
        // Stream imports are mapped where the importer's subscribers are: here.
        import_streams(ctx, routes, from, subject, reply, headers, payload);
    }
    n
}

/// Whether a message to `to` inside `account` would reach any subscription now (what
/// [`deliver_as`] would find; the match is cached like a delivery's).
pub(crate) fn has_interest(ctx: &mut RouteCtx, account: &Arc<Account>, to: &[u8]) -> bool {
    !ctx.lookup(account, to).is_empty()
}

fn release_expired(ctx: &mut RouteCtx, account: &Arc<Account>) {
    for sub in std::mem::take(&mut ctx.expired) {
        if account.unsubscribe(&sub) {
            if let Subscriber::Client(c) = &sub.subscriber {
                c.subs.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// One copy to every plain subscription and one per queue group; route peers get one `RMSG`
/// each whatever matched there (with the groups picked on them), when `reach` allows.
#[allow(clippy::too_many_arguments)]
fn deliver_matches(
    ctx: &mut RouteCtx,
    matches: &Matches,
    from: Publisher,
    reach: Reach<'_>,
    subject: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&Bytes>,
    payload: &Bytes,
) -> usize {
    let from_route = matches!(reach, Reach::FromRoute(_));
    let mut n = 0;
    let plain = if matches!(reach, Reach::Picked(_)) {
        &[][..]
    } else {
        &matches.plain[..]
    };
    for s in plain {
        let sub = &s.0;
        match &sub.subscriber {
            Subscriber::Route(r) => {
                if reach.reaches(r) && add_routed(ctx, r, None) {
                    n += 1;
                }
                continue;
            }
            Subscriber::Service(_) if from_route => continue,
            _ => {}
        }
        if !from.echo && sub.subscriber.cid() == Some(from.cid) {
            continue;
        }
        if deliver(ctx, sub, subject, reply, headers, payload) {
            n += 1;
        }
    }
    for group in &matches.groups {
        let len = group.members.len();
        if len == 0 || matches!(reach, Reach::Follower) {
            continue;
        }
        if let Reach::FromRoute(picked) | Reach::Picked(picked) = reach {
            if !picked.iter().any(|q| q.as_ref() == &*group.name) {
                continue;
            }
        }
        let start = if group.name.starts_with(SERVICE_QUEUE_PREFIX) {
            pick_service(&group.members)
        } else {
            pick_member(ctx, &group.members, matches!(reach, Reach::Cluster(_)))
        };
        for i in 0..len {
            let Some(m) = group.members.get((start + i) % len) else {
                continue;
            };
            let sub = &m.0;
            if let Subscriber::Route(r) = &sub.subscriber {
                if reach.reaches_member(r) && !r.route.is_closed() {
                    add_routed(ctx, r, Some(&group.name));
                    n += 1;
                    break;
                }
                continue;
            }
            if !from.echo && sub.subscriber.cid() == Some(from.cid) {
                continue;
            }
            if deliver(ctx, sub, subject, reply, headers, payload) {
                n += 1;
                break;
            }
        }
    }
    match reach {
        Reach::Cluster(account) => send_routed(ctx, account, subject, reply, headers, payload),
        Reach::Deliver { account, to, .. } => {
            send_deliveries(ctx, account, to, subject, reply, headers, payload);
        }
        Reach::Local | Reach::Follower | Reach::Picked(_) | Reach::FromRoute(_) => {}
    }
    n
}

/// Where to start looking in a JetStream service's queue group (its stream's or API's entry
/// on each server that hosts the stream): this server's own member when it has one, so local
/// clients are served here; else always the same peer (the lowest connection id), so one
/// publisher's messages take one path and keep their order.
fn pick_service(members: &[SubRef]) -> usize {
    let mut best: Option<(usize, u64)> = None;
    for (i, m) in members.iter().enumerate() {
        match &m.0.subscriber {
            Subscriber::Service(_) => return i,
            Subscriber::Route(r) if best.is_none_or(|(_, cid)| r.route.cid < cid) => {
                best = Some((i, r.route.cid));
            }
            _ => {}
        }
    }
    best.map_or(0, |(i, _)| i)
}

/// The index to start looking for a queue member at: uniform over the cluster's members, a
/// route entry counting as many members as the peer announced (spec/cluster.md §3.3).
fn pick_member(ctx: &mut RouteCtx, members: &[SubRef], weighted: bool) -> usize {
    let r = ctx.next_rand();
    let weight = |m: &SubRef| match &m.0.subscriber {
        Subscriber::Route(ri) => u64::from(ri.weight.load(Ordering::Relaxed).max(1)),
        _ => 1,
    };
    if !weighted
        || !members
            .iter()
            .any(|m| matches!(m.0.subscriber, Subscriber::Route(_)))
    {
        return (r % members.len() as u64) as usize;
    }
    let total: u64 = members.iter().map(weight).sum();
    let mut at = r % total.max(1);
    for (i, m) in members.iter().enumerate() {
        let w = weight(m);
        if at < w {
            return i;
        }
        at -= w;
    }
    0
}

/// Notes that `r`'s peer gets this publish (with `queue` picked there). True when the peer
/// was not in the list yet.
fn add_routed(ctx: &mut RouteCtx, r: &RemoteInterest, queue: Option<&Arc<[u8]>>) -> bool {
    if let Some(c) = ctx.routed.iter_mut().find(|c| c.route.cid == r.route.cid) {
        match queue {
            Some(q) => c.queues.push(Arc::clone(q)),
            None => c.plain = true,
        }
        return false;
    }
    ctx.routed.push(RoutedCopy {
        route: Arc::clone(&r.route),
        queues: queue.map(|q| vec![Arc::clone(q)]).unwrap_or_default(),
        plain: queue.is_none(),
        pinned: r.pinned,
    });
    true
}

/// Queues the collected route copies: one `RMSG`/`HMSG` per peer. A peer that cannot keep up
/// is closed like a slow consumer (it reconnects and re-sends its interest).
fn send_routed(
    ctx: &mut RouteCtx,
    account: &[u8],
    subject: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&Bytes>,
    payload: &Bytes,
) {
    for copy in std::mem::take(&mut ctx.routed) {
        let route = &copy.route;
        let queues: Vec<&[u8]> = copy.queues.iter().map(|q| &**q).collect();
        let headers = if route.headers.load(Ordering::Relaxed) {
            headers
        } else {
            None
        };
        let account = if copy.pinned { &[][..] } else { account };
        let pushed = route
            .outbound
            .push_routed(account, subject, reply, &queues, headers, payload);
        note_route_push(
            ctx,
            route,
            pushed,
            payload.len() + headers.map_or(0, Bytes::len),
        );
    }
}

/// Queues the collected JetStream deliveries for sealstream peers: a `JMSG`/`JHMSG` to a
/// peer's plain subscribers, a `JQMSG`/`JQHMSG` to the queue groups' members picked there.
#[allow(clippy::too_many_arguments)]
fn send_deliveries(
    ctx: &mut RouteCtx,
    account: &[u8],
    to: &[u8],
    shown: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&Bytes>,
    payload: &Bytes,
) {
    for copy in std::mem::take(&mut ctx.routed) {
        let route = &copy.route;
        let account = if copy.pinned { &[][..] } else { account };
        let queues: Vec<&[u8]> = copy.queues.iter().map(|q| &**q).collect();
        let to_plain = copy.plain.then_some(&[][..]);
        let to_groups = (!queues.is_empty()).then_some(&queues[..]);
        for groups in [to_plain, to_groups].into_iter().flatten() {
            let pushed = route
                .outbound
                .push_delivery(account, to, shown, reply, groups, headers, payload);
            note_route_push(
                ctx,
                route,
                pushed,
                payload.len() + headers.map_or(0, Bytes::len),
            );
        }
    }
}

/// Counts one frame queued on a route, or closes a route that cannot keep up (it reconnects
/// and re-sends its interest).
fn note_route_push(
    ctx: &mut RouteCtx,
    route: &Arc<ClientHandle>,
    pushed: Result<Pushed, PushError>,
    size: usize,
) {
    match pushed {
        Ok(pushed) => {
            if pushed.wake {
                ctx.wake.push(Arc::clone(route));
            }
            if pushed.above_high_water {
                backpressure::note(&mut ctx.stalled, route);
            }
            ctx.delivered_msgs += 1;
            ctx.delivered_bytes += size as u64;
        }
        Err(PushError::SlowConsumer) => {
            if route.close_reason().is_none() {
                warn!(cid = route.cid, "slow route detected, closing the route");
                ctx.slow_consumers += 1;
            }
            route.close(CloseReason::SlowConsumer);
        }
        Err(PushError::Closed) => {}
    }
}

/// Queues one copy for `sub`. False when the subscription could not take it.
fn deliver(
    ctx: &mut RouteCtx,
    sub: &Arc<Subscription>,
    subject: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&Bytes>,
    payload: &Bytes,
) -> bool {
    if sub.closed.load(Ordering::Acquire) {
        return false;
    }
    if sub
        .deny
        .as_ref()
        .is_some_and(|p| p.delivery_denied(subject))
    {
        return false;
    }
    let (ok, expired) = sub.count_delivery();
    if expired {
        ctx.expired.push(Arc::clone(sub));
    }
    if !ok {
        return false;
    }
    let client = match &sub.subscriber {
        Subscriber::Route(_) => return false,
        Subscriber::Service(svc) => {
            if let Some(budget) = svc.deliver(&sub.sid, subject, reply, headers, payload) {
                backpressure::note(&mut ctx.throttle, &budget);
            }
            ctx.delivered_msgs += 1;
            ctx.delivered_bytes += (payload.len() + headers.map_or(0, Bytes::len)) as u64;
            return true;
        }
        Subscriber::Client(c) => c,
    };
    if let Some(r) = reply {
        if client.track_replies.load(Ordering::Relaxed) {
            record_reply(client, r);
        }
    }
    let headers = if client.headers.load(Ordering::Relaxed) {
        headers
    } else {
        None
    };
    match client
        .outbound
        .push_msg(subject, &sub.sid, reply, headers, payload)
    {
        Ok(pushed) => {
            if pushed.wake {
                ctx.wake.push(Arc::clone(client));
            }
            if pushed.above_high_water {
                backpressure::note(&mut ctx.stalled, client);
            }
            ctx.delivered_msgs += 1;
            ctx.delivered_bytes += (payload.len() + headers.map_or(0, Bytes::len)) as u64;
            true
        }
        Err(PushError::SlowConsumer) => {
            if client.close_reason().is_none() {
                warn!(
                    cid = client.cid,
                    "slow consumer detected, closing connection"
                );
                ctx.slow_consumers += 1;
            }
            client.close(CloseReason::SlowConsumer);
            false
        }
        Err(PushError::Closed) => false,
    }
}

/// Delivers through exports/imports (one hop). Returns whether the message was handed to
/// another account (a service import counts as interest for no-responders).
fn cross_accounts(
    ctx: &mut RouteCtx,
    account: &Arc<Account>,
    from: Publisher,
    subject: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&Bytes>,
    payload: &Bytes,
) -> bool {
    let Some(routes) = account.routes() else {
        return false;
    };
    let mut crossed = false;
    let hop = Publisher {
        cid: from.cid,
        echo: true,
        no_responders: false,
        crossed: true,
    };
    if subject.starts_with(b"_R_.") {
        if let Some((importer, back)) = routes.take_reply(subject) {
            publish(ctx, &importer, hop, &back, None, headers, payload);
            crossed = true;
        }
    }
    if from.crossed {
        return crossed;
    }
    import_streams(ctx, routes, hop, subject, reply, headers, payload);
    for svc in routes.services().iter() {
        let Some(remote) = imports::transform(subject, &svc.local, &svc.remote) else {
            continue;
        };
        let mapped_reply = reply.map(|r| {
            svc.exporter.map_reply(
                Arc::clone(account),
                Bytes::copy_from_slice(r),
                svc.singleton,
            )
        });
        publish(
            ctx,
            &svc.exporter,
            hop,
            &remote,
            mapped_reply.as_deref(),
            headers,
            payload,
        );
        crossed = true;
    }
    crossed
}

/// Delivers a message of an exporting account to the importers of its subjects, on this node
/// only: other nodes map the exporter's messages themselves (they advertise the exporter-side
/// interest, see `Account::add_stream_import`), as nats-server's do.
fn import_streams(
    ctx: &mut RouteCtx,
    routes: &imports::Routes,
    hop: Publisher,
    subject: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&Bytes>,
    payload: &Bytes,
) {
    for s in routes.streams().iter() {
        let mapped = match (&s.prefix, &s.to) {
            (Some(prefix), _)
                if crate::subject::subject_matches_filter(subject, s.pattern.as_bytes()) =>
            {
                let mut v = prefix.as_bytes().to_vec();
                v.push(b'.');
                v.extend_from_slice(subject);
                Some(v)
            }
            (None, Some(to)) => imports::transform(subject, &s.pattern, to),
            (None, None) => crate::subject::subject_matches_filter(subject, s.pattern.as_bytes())
                .then(|| subject.to_vec()),
            _ => None,
        };
        if let Some(m) = mapped {
            let matches = ctx.lookup(&s.importer, &m);
            deliver_matches(
                ctx,
                &matches,
                hop,
                Reach::Local,
                &m,
                reply,
                headers,
                payload,
            );
            release_expired(ctx, &s.importer);
        }
    }
}

/// Most reply permissions one connection holds at once; older ones are dropped.
const MAX_TRACKED_REPLIES: usize = 10_000;

/// Lets `client` (whose permissions allow responses) publish to `reply`.
fn record_reply(client: &ClientHandle, reply: &[u8]) {
    let Some((max, ttl)) = client.response_permission() else {
        return;
    };
    let mut m = client.replies.lock().unwrap_or_else(|p| p.into_inner());
    let now = std::time::Instant::now();
    if m.len() >= MAX_TRACKED_REPLIES {
        m.retain(|_, (_, deadline)| *deadline > now);
    }
    m.insert(Bytes::copy_from_slice(reply), (max, now + ttl));
}
