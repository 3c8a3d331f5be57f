//! Crossing accounts: stream and service exports/imports (config `accounts {}` blocks).
//!
//! Nothing crosses an account boundary unless the exporter declared an export and the importer
//! an import naming it (the config layer checks both and the `accounts` restriction).
//!
//! - **Stream import**: a message published in the exporter on a subject matching the import
//!   is also delivered in the importer, under `prefix.<subject>` or the `to` mapping.
//! - **Service import**: a request published in the importer on the local subject (`to`, or
//!   the exporter's subject) is delivered in the exporter on the exported subject, with its
//!   reply rewritten to a server-made `_R_.<random>` subject; the exporter's answer on that
//!   subject is routed back to the importer's original reply (once for singleton services).
//!
//! Cross-account deliveries take one hop: a message that crossed is not re-exported, so
//! import cycles cannot loop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;

pub(crate) use crate::subject::mapping::transform;

use super::Account;

/// How long an unanswered `_R_` reply mapping lives.
pub(crate) const RESPONSE_TTL: Duration = Duration::from_secs(120);
/// Most live reply mappings per exporter; the oldest are dropped beyond it.
const MAX_RESPONSES: usize = 100_000;

/// A stream import as seen from the exporter.
pub(crate) struct StreamRoute {
    /// Exporter subject pattern.
    pub(crate) pattern: String,
    /// The importing account.
    pub(crate) importer: Arc<Account>,
    /// Prefix added to delivered subjects.
    pub(crate) prefix: Option<String>,
    /// Or a subject mapping target.
    pub(crate) to: Option<String>,
}

impl StreamRoute {
    fn clone_route(&self) -> Self {
        StreamRoute {
            pattern: self.pattern.clone(),
            importer: Arc::clone(&self.importer),
            prefix: self.prefix.clone(),
            to: self.to.clone(),
        }
    }
}

/// A stream import as seen from the importer, for the cluster: while some local subscription
/// of the importer overlaps `target`, the exporter advertises interest in `pattern` (see
/// [`Account::add_stream_import`]).
pub(crate) struct ImportInterest {
    exporter: Weak<Account>,
    /// The imported subjects, in the exporter.
    pub(crate) pattern: Bytes,
    /// What the import delivers in the importer (wider than exact when a mapping has
    /// wildcards: advertising too much costs bandwidth, too little would lose messages).
    pub(crate) target: Bytes,
    /// The importer's interest keys overlapping `target`; changed under its count lock.
    keys: AtomicUsize,
}

impl ImportInterest {
    pub(crate) fn new(exporter: &Arc<Account>, route: &StreamRoute) -> Self {
        let target = match (&route.prefix, &route.to) {
            (Some(prefix), _) => format!("{prefix}.{}", route.pattern),
            (None, Some(to)) if to.contains('$') || to.contains("{{") => ">".to_owned(),
            (None, Some(to)) => to.clone(),
            (None, None) => route.pattern.clone(),
        };
        ImportInterest {
            exporter: Arc::downgrade(exporter),
            pattern: Bytes::from(route.pattern.clone()),
            target: Bytes::from(target),
            keys: AtomicUsize::new(0),
        }
    }

    pub(crate) fn set_keys(&self, n: usize) {
        self.keys.store(n, Ordering::Relaxed);
    }
}

/// A service import as seen from the importer.
pub(crate) struct ServiceRoute {
    /// Local subject pattern in the importer.
    pub(crate) local: String,
    /// Subject pattern in the exporter.
    pub(crate) remote: String,
    /// The exporting account.
    pub(crate) exporter: Arc<Account>,
    /// The exporter answers once per request.
    pub(crate) singleton: bool,
}

impl ServiceRoute {
    fn clone_route(&self) -> Self {
        ServiceRoute {
            local: self.local.clone(),
            remote: self.remote.clone(),
            exporter: Arc::clone(&self.exporter),
            singleton: self.singleton,
        }
    }
}

/// Where an exporter's answer on an `_R_` subject goes.
pub(crate) struct ReplyRoute {
    pub(crate) importer: Arc<Account>,
    pub(crate) reply: Bytes,
    pub(crate) singleton: bool,
    pub(crate) expires: Instant,
}

/// The cross-account routes of one account. Route lists are swapped whole (copy on write), so
/// a publisher takes a snapshot and never holds a lock while it delivers.
#[derive(Default)]
pub(crate) struct Routes {
    /// Stream imports of this account's subjects by other accounts.
    streams: RwLock<Arc<Vec<StreamRoute>>>,
    /// Service imports this account makes.
    services: RwLock<Arc<Vec<ServiceRoute>>>,
    /// Live `_R_` reply mappings for requests this account answers.
    pub(crate) responses: Mutex<HashMap<Bytes, ReplyRoute>>,
    /// `_R_.<random>.`: this server's reply prefix for the account, made on first use.
    reply_prefix: std::sync::OnceLock<String>,
    /// Whether the reply wildcard has been advertised to routes.
    pub(crate) reply_interest: std::sync::atomic::AtomicBool,
    /// Stream imports this account makes, for the interest they lend their exporters.
    imported: RwLock<Vec<Arc<ImportInterest>>>,
}

impl Routes {
    /// The stream routes now.
    pub(crate) fn streams(&self) -> Arc<Vec<StreamRoute>> {
        Arc::clone(&self.streams.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The service routes now.
    pub(crate) fn services(&self) -> Arc<Vec<ServiceRoute>> {
        Arc::clone(&self.services.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Adds a stream route (an importer of this account's subjects).
    pub(crate) fn add_stream(&self, r: StreamRoute) {
        let mut g = self.streams.write().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<StreamRoute> = g.iter().map(StreamRoute::clone_route).collect();
        v.push(r);
        *g = Arc::new(v);
    }

    /// Registers a stream import this account makes (under its count lock).
    pub(crate) fn add_import_interest(&self, i: Arc<ImportInterest>) {
        self.imported
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(i);
    }

    /// Takes every stream import this account makes; returns the (exporter, pattern) pairs
    /// whose interest must be withdrawn (under its count lock).
    pub(crate) fn take_import_interest(&self) -> Vec<(Arc<Account>, Bytes)> {
        let taken = std::mem::take(&mut *self.imported.write().unwrap_or_else(|p| p.into_inner()));
        taken
            .into_iter()
            .filter(|i| i.keys.load(Ordering::Relaxed) > 0)
            .filter_map(|i| Some((i.exporter.upgrade()?, i.pattern.clone())))
            .collect()
    }

    /// A local subscription key of this (importing) account on `subject` appeared
    /// (`present`) or went away: the (exporter, pattern, up) interest changes that follow
    /// (under its count lock).
    pub(crate) fn importer_interest(
        &self,
        subject: &[u8],
        present: bool,
    ) -> Vec<(Arc<Account>, Bytes, bool)> {
        let imported = self.imported.read().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for i in imported.iter() {
            if !crate::subject::filters_overlap(subject, &i.target) {
                continue;
            }
            let edge = if present {
                i.keys.fetch_add(1, Ordering::Relaxed) == 0
            } else {
                i.keys.fetch_sub(1, Ordering::Relaxed) == 1
            };
            if edge {
                if let Some(e) = i.exporter.upgrade() {
                    out.push((e, i.pattern.clone(), present));
                }
            }
        }
        out
    }

    /// Adds a service route (an import this account makes).
    pub(crate) fn add_service(&self, r: ServiceRoute) {
        let mut g = self.services.write().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<ServiceRoute> = g.iter().map(ServiceRoute::clone_route).collect();
        v.push(r);
        *g = Arc::new(v);
    }

    /// Drops every stream route whose importer is `importer`, and, when `importer` is this
    /// account, every service import it makes (before its JWT routes are installed again).
    pub(crate) fn forget_importer(&self, importer: &Arc<Account>, is_self: bool) {
        {
            let mut g = self.streams.write().unwrap_or_else(|p| p.into_inner());
            let v: Vec<StreamRoute> = g
                .iter()
                .filter(|r| !Arc::ptr_eq(&r.importer, importer))
                .map(StreamRoute::clone_route)
                .collect();
            *g = Arc::new(v);
        }
        if is_self {
            *self.services.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Vec::new());
        }
    }

    fn reply_prefix(&self) -> &str {
        self.reply_prefix.get_or_init(|| {
            let id = crate::crypto::random_id();
            let hex: String = id.iter().take(5).map(|b| format!("{b:02x}")).collect();
            format!("_R_.{hex}.")
        })
    }

    /// `_R_.<prefix>.>`: every reply subject this server maps for the account.
    pub(crate) fn reply_wildcard(&self) -> Bytes {
        Bytes::from(format!("{}>", self.reply_prefix()))
    }

    /// Records a reply mapping and returns the `_R_` subject to use as the reply (see
    /// [`Account::map_reply`], which also makes it reachable from other nodes).
    pub(crate) fn map_reply(&self, importer: Arc<Account>, reply: Bytes, singleton: bool) -> Bytes {
        let id = crate::crypto::random_id();
        let hex: String = id.iter().take(5).map(|b| format!("{b:02x}")).collect();
        let subject = Bytes::from(format!("{}{hex}", self.reply_prefix()));
        let mut m = self.responses.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_RESPONSES {
            let now = Instant::now();
            m.retain(|_, r| r.expires > now);
        }
        m.insert(
            subject.clone(),
            ReplyRoute {
                importer,
                reply,
                singleton,
                expires: Instant::now() + RESPONSE_TTL,
            },
        );
        subject
    }

    /// The importer and reply for an answer published on `subject`, if it is a live mapping.
    pub(crate) fn take_reply(&self, subject: &[u8]) -> Option<(Arc<Account>, Bytes)> {
        let mut m = self.responses.lock().unwrap_or_else(|p| p.into_inner());
        let live = m.get(subject).is_some_and(|r| r.expires > Instant::now());
        if !live {
            m.remove(subject);
            return None;
        }
        let r = m.get(subject)?;
        let out = (Arc::clone(&r.importer), r.reply.clone());
        if r.singleton {
            m.remove(subject);
        }
        Some(out)
    }
}
