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
use std::sync::{Arc, Mutex, RwLock};
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

    /// Records a reply mapping and returns the `_R_` subject to use as the reply.
    pub(crate) fn map_reply(&self, importer: Arc<Account>, reply: Bytes, singleton: bool) -> Bytes {
        let id = crate::crypto::random_id();
        let hex: String = id.iter().take(10).map(|b| format!("{b:02x}")).collect();
        let subject = Bytes::from(format!("_R_.{}.{}", &hex[..10], &hex[10..]));
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
