//! Where the engine's [`Effects`] meet the router: [`AccountInterest`] answers the engine's
//! one question about the outside (does anybody listen on this subject?) from the account's
//! subscriptions, and [`RouterSink`] routes the effects a command produced — exactly like a
//! publish from a connection — then wakes the outbound queues it touched, once per batch.
//! The API thread uses `RouterSink` directly for its own replies.

use std::sync::Arc;

use bytes::Bytes;

use crate::jetstream::{Effect, Effects, Interest};
use crate::server::account::Account;
use crate::server::router::{self, RouteCtx};

/// Answers [`Interest`] from one account's subscription tree (through a match cache of its
/// own).
pub(crate) struct AccountInterest {
    account: Arc<Account>,
    ctx: RouteCtx,
}

impl AccountInterest {
    /// The engine's output list for a stream of `account`.
    pub(crate) fn effects(account: Arc<Account>, seed: u64) -> Effects {
        Effects::new(Box::new(AccountInterest {
            account,
            ctx: RouteCtx::new(seed),
        }))
    }
}

impl Interest for AccountInterest {
    fn has_interest(&mut self, subject: &str) -> bool {
        router::has_interest(&mut self.ctx, &self.account, subject.as_bytes())
    }
}

/// Routes engine output and the API thread's replies into one account.
pub(crate) struct RouterSink {
    account: Arc<Account>,
    ctx: RouteCtx,
    /// Where deliveries go besides this server's subscribers: `Some(skip)` to the other
    /// servers' (sealstream peers', as `JMSG`) except those named, and to a queue group's
    /// members anywhere; `None` (a replicated stream's follower) to this server's plain
    /// subscribers only (see [`router::DeliveryReach`]).
    remote: Option<Vec<String>>,
    /// Decides `remote` at the first delivery (see [`RouterSink::set_remote_with`]).
    decide: Option<RemoteRule>,
}

/// Works out where deliveries go besides this server (asked once, at the first delivery).
pub(crate) type RemoteRule = Box<dyn FnOnce() -> Option<Vec<String>> + Send>;

impl RouterSink {
    /// A sink whose deliveries reach subscribers on every server.
    pub(crate) fn new(account: Arc<Account>, seed: u64) -> Self {
        RouterSink {
            account,
            ctx: RouteCtx::new(seed),
            remote: Some(Vec::new()),
            decide: None,
        }
    }

    /// Sets where deliveries go besides this server (see [`RouterSink::remote`]): a
    /// replicated stream's committed round is delivered by every replica to its own
    /// subscribers, and by the leader alone to the servers that keep no replica.
    pub(crate) fn set_remote(&mut self, remote: Option<Vec<String>>) {
        self.remote = remote;
        self.decide = None;
    }

    /// As [`RouterSink::set_remote`], the answer worked out by `rule` only if a delivery comes
    /// (a round without one — every publish-only round — never asks).
    pub(crate) fn set_remote_with(&mut self, rule: RemoteRule) {
        self.decide = Some(rule);
    }

    /// Routes every effect recorded in `fx` (leaving it empty), in order, then wakes the
    /// queues written. For callers whose commands persist nothing (reads): a persistence
    /// effect here is a bug, logged and skipped.
    pub(crate) fn execute(&mut self, fx: &mut Effects) {
        for e in fx.take() {
            if let Some(e) = self.route(e) {
                tracing::error!(effect = ?e, "a read produced a persistence effect; skipped");
            }
        }
        self.flush();
    }

    /// Routes one delivery or reply. Any other effect (persistence, the stream worker's job)
    /// is handed back.
    pub(crate) fn route(&mut self, e: Effect) -> Option<Effect> {
        match e {
            Effect::Deliver {
                to,
                subject,
                reply,
                headers,
                payload,
            } => {
                self.send(&to, &subject, reply.as_deref(), headers.as_ref(), &payload);
                None
            }
            Effect::Reply { to, payload } => {
                self.reply(&to, payload);
                None
            }
            other => Some(other),
        }
    }

    /// Wakes every outbound queue written since the last call.
    pub(crate) fn flush(&mut self) {
        for c in self.ctx.wake.drain(..) {
            c.outbound.flush();
        }
        let _ = self.ctx.take_counts();
    }

    /// Delivers one message to the subscribers of `to` in this account, showing `subject`.
    /// Returns how many subscriptions took it.
    pub(crate) fn send(
        &mut self,
        to: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> usize {
        if let Some(rule) = self.decide.take() {
            self.remote = rule();
        }
        router::deliver_as(
            &mut self.ctx,
            &self.account,
            to.as_bytes(),
            subject.as_bytes(),
            reply.map(str::as_bytes),
            headers,
            payload,
            match self.remote.as_deref() {
                Some(skip) => router::DeliveryReach::Peers(skip),
                None => router::DeliveryReach::Follower,
            },
        )
    }

    /// A header-only status message to `to`.
    pub(crate) fn status(&mut self, to: &str, headers: Bytes) -> usize {
        self.send(to, to, None, Some(&headers), &Bytes::new())
    }

    /// A request: `payload` published on `to` with `reply` as its reply subject, routed as
    /// a client's publish (to this server's subscribers and over routes).
    pub(crate) fn request(&mut self, to: &str, reply: &str, payload: &Bytes) {
        self.publish(to, Some(reply), payload);
    }

    /// A reply, routed as a publish: it may cross accounts (a requester behind a service
    /// import).
    pub(crate) fn reply(&mut self, to: &str, payload: Bytes) {
        self.publish(to, None, &payload);
    }

    fn publish(&mut self, to: &str, reply: Option<&str>, payload: &Bytes) {
        let from = router::Publisher {
            cid: u64::MAX,
            echo: true,
            no_responders: false,
            crossed: false,
        };
        router::publish(
            &mut self.ctx,
            &self.account,
            from,
            to.as_bytes(),
            reply.map(str::as_bytes),
            None,
            payload,
        );
    }
}
