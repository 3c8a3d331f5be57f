//! Live accounts: each one is an isolated subject space with its own subscription tree.
//!
//! Core NATS without configured accounts binds every client to the global account `$G`. The
//! [`Registry`] maps names to [`Account`]s so later work (config accounts, JWT accounts) only
//! adds entries; routing never looks past the publisher's account.
//!
//! The subscription tree is read-mostly: publishers take the read lock only on a match-cache
//! miss, and the tree's generation is mirrored in an atomic so a reader can validate its cache
//! without locking at all. Writers (SUB/UNSUB/close) hold the write lock for one insert or
//! remove, never across I/O or `.await`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::subject::{MatchResult, SubjectTree};

pub(crate) mod imports;

use super::client::ClientHandle;

/// Name of the default global account.
pub(crate) const GLOBAL_ACCOUNT: &str = "$G";

/// One subscription, shared between its connection's sid table and the account's tree.
pub(crate) struct Subscription {
    /// Who takes the deliveries.
    pub(crate) subscriber: Subscriber,
    /// Client-chosen id, echoed in MSG.
    pub(crate) sid: Bytes,
    /// The subject filter.
    pub(crate) subject: Bytes,
    /// Queue group, if any.
    pub(crate) queue: Option<Bytes>,
    /// Messages delivered since SUB (what `UNSUB <sid> <max>` counts).
    pub(crate) delivered: AtomicU64,
    /// Auto-unsubscribe limit; 0 = none.
    pub(crate) max: AtomicU64,
    /// Set once removed; a match that races a removal skips it.
    pub(crate) closed: AtomicBool,
    /// The subscriber's permissions when its filter overlaps a subscribe-deny pattern:
    /// deliveries on denied subjects are dropped.
    pub(crate) deny: Option<Arc<crate::auth::Permissions>>,
}

/// Who a subscription delivers to.
pub(crate) enum Subscriber {
    /// A connection (or the system account's internal client): deliveries are queued on its
    /// outbound queue and written by its writer.
    Client(Arc<ClientHandle>),
    /// An in-process service (JetStream's intake): each delivery is a call on the
    /// publisher's task. No connection stands behind it.
    Service(Arc<dyn Service>),
    /// Interest a cluster peer announced (`RS+`): deliveries become one `RMSG` per peer and
    /// publish, sent on the route connection. Never advertised back to any route.
    Route(Arc<RemoteInterest>),
}

/// One `RS+` of a route peer: the route connection to send matches to, and (for a queue
/// group) how many members the peer has in it, which weighs the member choice.
pub(crate) struct RemoteInterest {
    /// The route connection.
    pub(crate) route: Arc<ClientHandle>,
    /// Queue members behind this entry (1 for plain interest).
    pub(crate) weight: std::sync::atomic::AtomicU32,
    /// The connection is pinned to this account: its messages leave the account name out.
    pub(crate) pinned: bool,
    /// The peer's server name (JetStream deliveries skip a stream's own replicas).
    pub(crate) peer: Arc<str>,
    /// The peer is sealstream running JetStream: it reads `JMSG` deliveries.
    pub(crate) takes_deliveries: bool,
}

/// Told when this server's own interest in a subject changes, so the cluster layer can send
/// `RS+`/`RS-` to its routes. Called with the account's interest-count lock held, which keeps
/// the order of changes to one subject; implementations only queue bytes (a leaf lock).
pub(crate) trait InterestSink: Send + Sync {
    /// Local interest in (`subject`, `queue`) of `account` is now `count` subscriptions.
    fn changed(&self, account: &str, subject: &[u8], queue: Option<&[u8]>, count: u32);
}

/// Where an account's interest changes go: set once when clustering starts.
pub(crate) type SinkSlot = Arc<std::sync::OnceLock<Arc<dyn InterestSink>>>;

impl Subscriber {
    /// The connection's id; `None` for a service.
    pub(crate) fn cid(&self) -> Option<u64> {
        match self {
            Subscriber::Client(c) => Some(c.cid),
            Subscriber::Route(r) => Some(r.route.cid),
            Subscriber::Service(_) => None,
        }
    }
}

/// Queue groups of JetStream's in-process services start with this: a stream's entry points
/// (its subjects, its API, acks and flow control) on each server that hosts it. A local
/// member is always preferred; peers reach it through route interest.
pub(crate) const SERVICE_QUEUE_PREFIX: &[u8] = b"$SEALSTREAM.";

impl Subscription {
    /// Whether this subscription is interest routes hear about: the server's own clients and
    /// internal clients, and JetStream's services where they are queue groups (a stream other
    /// servers may reach). Route interest is never re-advertised (one hop); a plain service
    /// subscription is this server's own entry (the account's API, which every server has).
    fn advertised(&self) -> bool {
        match self.subscriber {
            Subscriber::Client(_) => true,
            Subscriber::Service(_) => self.queue.is_some(),
            Subscriber::Route(_) => false,
        }
    }
}

/// An in-process subscriber called directly by the router. It must not block: it hands the
/// message to its own thread and returns — and, when that thread's queue is over its bound,
/// returns the budget so the publishing connection can wait for room (see
/// [`crate::server::backpressure`]).
pub(crate) trait Service: Send + Sync {
    /// One delivery for the subscription `sid`.
    fn deliver(
        &self,
        sid: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> Option<Arc<crate::server::backpressure::Budget>>;
}

impl Subscription {
    /// Counts one delivery against the auto-unsubscribe limit. Returns `(deliver, expired)`:
    /// whether to deliver this message, and whether this delivery used up the limit.
    pub(crate) fn count_delivery(&self) -> (bool, bool) {
        let n = self.delivered.fetch_add(1, Ordering::Relaxed) + 1;
        let max = self.max.load(Ordering::Relaxed);
        if max == 0 {
            (true, false)
        } else {
            (n <= max, n == max)
        }
    }
}

/// A subscription as stored in the tree: compared by identity, cloned by reference.
#[derive(Clone)]
pub(crate) struct SubRef(pub(crate) Arc<Subscription>);

impl PartialEq for SubRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The match result type routing works with.
pub(crate) type Matches = MatchResult<SubRef>;

/// An account: a name and an isolated subject space.
pub(crate) struct Account {
    /// Account name (`$G`, a config name, or an account public key).
    pub(crate) name: String,
    /// Client connections bound to the account (for the account `conn` limit).
    pub(crate) connections: AtomicU64,
    tree: RwLock<SubjectTree<SubRef>>,
    generation: AtomicU64,
    /// Cross-account routes (see [`imports`]); absent for accounts that never cross.
    routes: std::sync::OnceLock<imports::Routes>,
    /// The account JWT's imports were installed (operator mode, on first login).
    jwt_routes: AtomicBool,
    /// Where interest changes go once clustering is on.
    sink: SinkSlot,
    /// Local interest per (subject, queue), counted only while a sink is set (clustered).
    local: std::sync::Mutex<HashMap<(Bytes, Option<Bytes>), Interest>>,
}

/// What makes one (subject, queue) of an account interesting to the cluster.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Interest {
    /// Local subscriptions (queue members count each).
    subs: u32,
    /// Interest lent, not subscribed: stream imports of this (exporting) account's `subject`
    /// whose importer has local subscribers, and the service-reply wildcard. Signed: an importer's changes reach here outside its lock, so a
    /// withdrawal may arrive before the grant it follows; the sum is right once both have.
    imports: i64,
}

impl Interest {
    /// A real subscription is never masked by a withdrawal that overtook its grant.
    fn present(self) -> bool {
        self.subs > 0 || self.imports > 0
    }
}

impl Account {
    /// A new, empty account whose interest changes go to `sink` once it is set.
    pub(crate) fn with_sink(name: &str, sink: SinkSlot) -> Self {
        Account {
            name: name.to_owned(),
            connections: AtomicU64::new(0),
            tree: RwLock::new(SubjectTree::new()),
            generation: AtomicU64::new(0),
            routes: std::sync::OnceLock::new(),
            jwt_routes: AtomicBool::new(false),
            sink,
            local: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Counts one more (`up`) or one less local subscription on (`subject`, `queue`) and tells
    /// the sink, under the count lock so changes to one key reach routes in order.
    fn count_interest(&self, sub: &Subscription, up: bool) {
        if sub.advertised() {
            self.count_key(&sub.subject, sub.queue.as_ref(), up, false);
        }
    }

    /// One more or one less local subscription (`import` false) or importer with subscribers
    /// (`import` true, plain keys only) on a key. Plain interest is announced when the key
    /// becomes present or absent, queue interest on every change of its weight. A local
    /// subscription appearing or going away also updates the stream imports it overlaps.
    fn count_key(&self, subject: &Bytes, queue: Option<&Bytes>, up: bool, import: bool) {
        let Some(sink) = self.sink.get() else {
            return;
        };
        let imports_changed = {
            let mut m = self.local.lock().unwrap_or_else(|p| p.into_inner());
            let key = (subject.clone(), queue.cloned());
            let before = m.get(&key).copied().unwrap_or_default();
            let mut after = before;
            if import {
                after.imports += if up { 1 } else { -1 };
            } else if up {
                after.subs += 1;
            } else {
                after.subs = after.subs.saturating_sub(1);
            }
            if after == Interest::default() {
                m.remove(&key);
            } else {
                m.insert(key, after);
            }
            let weight = |i: Interest| if i.present() { i.subs.max(1) } else { 0 };
            let announce = if queue.is_some() {
                before.subs != after.subs
            } else {
                before.present() != after.present()
            };
            if announce {
                sink.changed(&self.name, subject, queue.map(|q| &q[..]), weight(after));
            }
            if !import && (before.subs == 0) != (after.subs == 0) {
                self.routes()
                    .map(|r| r.importer_interest(subject, after.subs > 0))
                    .unwrap_or_default()
            } else {
                Vec::new()
            }
        };
        for (exporter, pattern, up) in imports_changed {
            exporter.count_key(&pattern, None, up, true);
        }
    }

    /// Installs a stream import (`route.importer` takes `exporter`'s messages). In a cluster,
    /// while the importer has local subscribers overlapping what the import delivers, the
    /// exporter advertises interest in the imported subjects: other nodes then send the
    /// exporter's messages here, and they are mapped into the importer on this node (as
    /// nats-server does; a mapped message is never routed on).
    pub(crate) fn add_stream_import(exporter: &Arc<Account>, route: imports::StreamRoute) {
        let importer = Arc::clone(&route.importer);
        let interest = Arc::new(imports::ImportInterest::new(exporter, &route));
        exporter.routes_init().add_stream(route);
        let present = {
            let m = importer.local.lock().unwrap_or_else(|p| p.into_inner());
            let overlapping = m
                .iter()
                .filter(|((s, _), i)| {
                    i.subs > 0 && crate::subject::filters_overlap(s, &interest.target)
                })
                .count();
            interest.set_keys(overlapping);
            importer
                .routes_init()
                .add_import_interest(Arc::clone(&interest));
            overlapping > 0
        };
        if present {
            exporter.count_key(&interest.pattern, None, true, true);
        }
    }

    /// Removes every stream import this account (the importer) makes from the interest it
    /// lends its exporters (before its JWT imports are installed again).
    pub(crate) fn forget_stream_imports(&self) {
        let Some(routes) = self.routes() else {
            return;
        };
        let withdrawn = {
            let _m = self.local.lock().unwrap_or_else(|p| p.into_inner());
            routes.take_import_interest()
        };
        for (exporter, pattern) in withdrawn {
            exporter.count_key(&pattern, None, false, true);
        }
    }

    /// Maps a service-import reply to a fresh `_R_` subject of this (the exporting) account.
    /// In a cluster the account's reply wildcard (`_R_.<prefix>.>`, one per account and
    /// server) is advertised to the routes on first use, so an answer published on another
    /// node is routed back here, where the mapping lives.
    pub(crate) fn map_reply(&self, importer: Arc<Account>, reply: Bytes, singleton: bool) -> Bytes {
        let routes = self.routes_init();
        if !routes.reply_interest.swap(true, Ordering::AcqRel) {
            self.count_key(&routes.reply_wildcard(), None, true, true);
        }
        routes.map_reply(importer, reply, singleton)
    }

    /// Encodes every (subject, queue, count) of local interest with `encode` and hands the
    /// result to `send`, all under the count lock, so no change can overtake the dump (a new
    /// route's full interest).
    pub(crate) fn dump_local_interest(
        &self,
        mut encode: impl FnMut(&mut bytes::BytesMut, &[u8], Option<&[u8]>, u32),
        send: impl FnOnce(&[u8]),
    ) {
        let m = self.local.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = bytes::BytesMut::new();
        for ((subject, queue), i) in m.iter().filter(|(_, i)| i.present()) {
            encode(&mut out, subject, queue.as_deref(), i.subs.max(1));
        }
        if !out.is_empty() {
            send(&out);
        }
    }

    /// The account's cross-account routes, if it has any.
    pub(crate) fn routes(&self) -> Option<&imports::Routes> {
        self.routes.get()
    }

    /// The account's routes, created empty on first use.
    pub(crate) fn routes_init(&self) -> &imports::Routes {
        self.routes.get_or_init(imports::Routes::default)
    }

    /// Whether the JWT-declared imports have been installed.
    pub(crate) fn has_jwt_routes(&self) -> bool {
        self.jwt_routes.load(Ordering::Acquire)
    }

    /// Marks the JWT-declared imports as installed; true the first time only.
    pub(crate) fn claim_jwt_routes(&self) -> bool {
        !self.jwt_routes.swap(true, Ordering::AcqRel)
    }

    /// The tree's generation, readable without a lock; changes on every insert or remove.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Adds a subscription.
    ///
    /// # Errors
    /// When the subject is not a valid subscription subject.
    pub(crate) fn subscribe(
        &self,
        sub: &Arc<Subscription>,
    ) -> Result<(), crate::subject::InvalidSubject> {
        let mut t = self.tree.write().unwrap_or_else(|p| p.into_inner());
        t.insert(&sub.subject, sub.queue.as_deref(), SubRef(Arc::clone(sub)))?;
        self.generation.store(t.generation(), Ordering::Release);
        drop(t);
        self.count_interest(sub, true);
        Ok(())
    }

    /// Removes a subscription; true if it was present.
    pub(crate) fn unsubscribe(&self, sub: &Arc<Subscription>) -> bool {
        sub.closed.store(true, Ordering::Release);
        let mut t = self.tree.write().unwrap_or_else(|p| p.into_inner());
        let removed = t.remove(&sub.subject, sub.queue.as_deref(), &SubRef(Arc::clone(sub)));
        self.generation.store(t.generation(), Ordering::Release);
        drop(t);
        if removed {
            self.count_interest(sub, false);
        }
        removed
    }

    /// Every subscription matching `subject`, with the generation it was computed at.
    pub(crate) fn matches(&self, subject: &[u8]) -> (Matches, u64) {
        let t = self.tree.read().unwrap_or_else(|p| p.into_inner());
        (t.matches(subject), t.generation())
    }

    /// Whether a JetStream service on another server takes `subject` (a peer advertises its
    /// stream's entry group for it).
    pub(crate) fn served_elsewhere(&self, subject: &[u8]) -> bool {
        self.matches(subject).0.groups.iter().any(|g| {
            g.name.starts_with(SERVICE_QUEUE_PREFIX)
                && g.members
                    .iter()
                    .any(|m| matches!(m.0.subscriber, Subscriber::Route(_)))
        })
    }

    /// Number of subscriptions in the account.
    pub(crate) fn subscription_count(&self) -> usize {
        self.tree.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The interest the route connection `route` holds in this account (monitoring:
    /// `/routez?subs=1`); walks every subscription.
    pub(crate) fn remote_subscriptions(&self, route: &ClientHandle) -> Vec<Arc<Subscription>> {
        let t = self.tree.read().unwrap_or_else(|p| p.into_inner());
        t.overlapping(b">")
            .into_iter()
            .filter(|s| matches!(&s.0.subscriber, Subscriber::Route(r) if r.route.cid == route.cid))
            .map(|s| s.0)
            .collect()
    }
}

/// Told when an account's JWT claims take effect: at the first login of one of its users
/// (`first_login`) and after a claims update. JetStream registers one at startup, so that the
/// connection code binds accounts without knowing JetStream exists.
pub(crate) trait ClaimsHook: Send + Sync {
    /// `account`'s claims are now `claims`.
    fn claims_applied(
        &self,
        account: &Arc<Account>,
        claims: &crate::auth::jwt::claims::AccountClaims,
        first_login: bool,
    );
}

/// All accounts known to the server.
pub(crate) struct Registry {
    accounts: RwLock<HashMap<String, Arc<Account>>>,
    claims_hooks: RwLock<Vec<Arc<dyn ClaimsHook>>>,
    /// Shared by every account: where interest changes go when clustered.
    sink: SinkSlot,
}

impl Registry {
    /// A registry holding only the global account.
    pub(crate) fn new() -> Self {
        let sink = SinkSlot::default();
        let mut m = HashMap::new();
        m.insert(
            GLOBAL_ACCOUNT.to_owned(),
            Arc::new(Account::with_sink(GLOBAL_ACCOUNT, Arc::clone(&sink))),
        );
        Registry {
            accounts: RwLock::new(m),
            claims_hooks: RwLock::new(Vec::new()),
            sink,
        }
    }

    /// Sends every account's interest changes to `sink` from now on (clustering). Set before
    /// anything subscribes: counts start at the moment it is set.
    pub(crate) fn set_interest_sink(&self, sink: Arc<dyn InterestSink>) {
        let _ = self.sink.set(sink);
    }

    /// Every account (a snapshot).
    pub(crate) fn all(&self) -> Vec<Arc<Account>> {
        self.accounts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Registers a hook told of every account's claims (startup).
    pub(crate) fn add_claims_hook(&self, hook: Arc<dyn ClaimsHook>) {
        self.claims_hooks
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(hook);
    }

    /// Tells every hook that `account`'s claims took effect.
    pub(crate) fn claims_applied(
        &self,
        account: &Arc<Account>,
        claims: &crate::auth::jwt::claims::AccountClaims,
        first_login: bool,
    ) {
        let hooks = self
            .claims_hooks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for h in hooks {
            h.claims_applied(account, claims, first_login);
        }
    }

    /// Looks up an account by name.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Account>> {
        self.accounts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// The global account `$G`.
    pub(crate) fn global(&self) -> Arc<Account> {
        self.get(GLOBAL_ACCOUNT).unwrap_or_else(|| {
            let acc = Arc::new(Account::with_sink(GLOBAL_ACCOUNT, Arc::clone(&self.sink)));
            self.accounts
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(GLOBAL_ACCOUNT.to_owned(), Arc::clone(&acc));
            acc
        })
    }

    /// Names of every account.
    pub(crate) fn names(&self) -> Vec<String> {
        self.accounts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Total subscriptions over all accounts.
    pub(crate) fn subscription_count(&self) -> usize {
        self.accounts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|a| a.subscription_count())
            .sum()
    }
}

impl Registry {
    /// Creates the named account if it does not exist yet.
    pub(crate) fn create(&self, name: &str) -> Arc<Account> {
        let mut m = self.accounts.write().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            m.entry(name.to_owned())
                .or_insert_with(|| Arc::new(Account::with_sink(name, Arc::clone(&self.sink)))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (account, subject, queue, count) as the cluster would be told it.
    type Told = (String, String, Option<String>, u32);

    /// Records what the cluster would be told.
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<Told>>);

    impl InterestSink for Recorder {
        fn changed(&self, account: &str, subject: &[u8], queue: Option<&[u8]>, count: u32) {
            self.0.lock().unwrap().push((
                account.to_owned(),
                String::from_utf8_lossy(subject).into_owned(),
                queue.map(|q| String::from_utf8_lossy(q).into_owned()),
                count,
            ));
        }
    }

    fn clustered() -> (Registry, Arc<Recorder>) {
        let r = Registry::new();
        let rec = Arc::new(Recorder::default());
        r.set_interest_sink(Arc::clone(&rec) as Arc<dyn InterestSink>);
        (r, rec)
    }

    fn taken(rec: &Recorder) -> Vec<Told> {
        std::mem::take(&mut *rec.0.lock().unwrap())
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// `importer` imports `exporter`'s `feed.>` (under `prefix`).
    fn import_feed(exporter: &Arc<Account>, importer: &Arc<Account>, prefix: Option<&str>) {
        Account::add_stream_import(
            exporter,
            imports::StreamRoute {
                pattern: "feed.>".into(),
                importer: Arc::clone(importer),
                prefix: prefix.map(str::to_owned),
                to: None,
            },
        );
    }

    #[test]
    fn plain_interest_is_told_on_presence_queue_interest_on_every_weight() {
        let (r, rec) = clustered();
        let a = r.create("A");
        a.count_key(&b("x"), None, true, false);
        a.count_key(&b("x"), None, true, false);
        a.count_key(&b("x"), None, false, false);
        a.count_key(&b("x"), None, false, false);
        assert_eq!(
            taken(&rec),
            vec![
                ("A".into(), "x".into(), None, 1),
                ("A".into(), "x".into(), None, 0)
            ]
        );
        a.count_key(&b("q"), Some(&b("g")), true, false);
        a.count_key(&b("q"), Some(&b("g")), true, false);
        a.count_key(&b("q"), Some(&b("g")), false, false);
        let weights: Vec<u32> = taken(&rec).iter().map(|t| t.3).collect();
        assert_eq!(weights, vec![1, 2, 1]);
    }

    #[test]
    fn an_importer_with_subscribers_lends_interest_to_its_exporter() {
        let (r, rec) = clustered();
        let (a, bb) = (r.create("A"), r.create("B"));
        import_feed(&a, &bb, Some("from_a"));
        assert!(taken(&rec).is_empty(), "no importer subscriber yet");
        bb.count_key(&b("unrelated"), None, true, false);
        bb.count_key(&b("from_a.feed.news"), None, true, false);
        bb.count_key(&b("from_a.>"), None, true, false);
        let told = taken(&rec);
        assert!(
            told.contains(&("A".into(), "feed.>".into(), None, 1)),
            "{told:?}"
        );
        assert_eq!(told.iter().filter(|t| t.0 == "A").count(), 1, "{told:?}");
        bb.count_key(&b("from_a.feed.news"), None, false, false);
        assert!(
            !taken(&rec).iter().any(|t| t.0 == "A"),
            "one overlapping sub is left"
        );
        bb.count_key(&b("from_a.>"), None, false, false);
        assert!(taken(&rec).contains(&("A".into(), "feed.>".into(), None, 0)));
        // A local subscriber of A on the same subject keeps it present across the lending.
        a.count_key(&b("feed.>"), None, true, false);
        bb.count_key(&b("from_a.feed.x"), None, true, false);
        bb.count_key(&b("from_a.feed.x"), None, false, false);
        a.count_key(&b("feed.>"), None, false, false);
        let told = taken(&rec);
        let a_told: Vec<u32> = told.iter().filter(|t| t.0 == "A").map(|t| t.3).collect();
        assert_eq!(a_told, vec![1, 0], "{told:?}");
    }

    #[test]
    fn a_withdrawal_arriving_before_its_grant_leaves_nothing() {
        let (r, rec) = clustered();
        let a = r.create("A");
        a.count_key(&b("feed.>"), None, false, true);
        a.count_key(&b("feed.>"), None, true, true);
        assert!(taken(&rec).is_empty());
        let mut dumped = 0;
        a.dump_local_interest(|_, _, _, _| dumped += 1, |_| {});
        assert_eq!(dumped, 0);
    }

    #[test]
    fn an_early_withdrawal_never_hides_a_real_subscription() {
        let (r, rec) = clustered();
        let a = r.create("A");
        a.count_key(&b("feed.>"), None, true, false);
        a.count_key(&b("feed.>"), None, false, true);
        a.count_key(&b("feed.>"), None, true, true);
        assert_eq!(taken(&rec), vec![("A".into(), "feed.>".into(), None, 1)]);
    }

    #[test]
    fn forgetting_imports_withdraws_the_lent_interest() {
        let (r, rec) = clustered();
        let (a, bb) = (r.create("A"), r.create("B"));
        import_feed(&a, &bb, None);
        bb.count_key(&b("feed.a"), None, true, false);
        assert!(taken(&rec).contains(&("A".into(), "feed.>".into(), None, 1)));
        bb.forget_stream_imports();
        assert!(taken(&rec).contains(&("A".into(), "feed.>".into(), None, 0)));
    }
}
