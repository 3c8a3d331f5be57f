//! The engine's [`Sink`](crate::jetstream::Sink) on top of the router: what a stream thread
//! says to clients is routed exactly like a publish from a connection, then the outbound
//! queues it touched are woken once per batch.

use std::sync::Arc;

use bytes::Bytes;

use crate::jetstream::Sink;
use crate::server::account::Account;
use crate::server::router::{self, RouteCtx};

/// Routes engine output into one account.
pub(crate) struct RouterSink {
    account: Arc<Account>,
    ctx: RouteCtx,
}

impl RouterSink {
    pub(crate) fn new(account: Arc<Account>, seed: u64) -> Self {
        RouterSink {
            account,
            ctx: RouteCtx::new(seed),
        }
    }

    /// Wakes every outbound queue written since the last call.
    pub(crate) fn flush(&mut self) {
        for c in self.ctx.wake.drain(..) {
            c.outbound.wake();
        }
        let _ = self.ctx.take_counts();
    }
}

impl Sink for RouterSink {
    fn send(
        &mut self,
        to: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> usize {
        router::deliver_as(
            &mut self.ctx,
            &self.account,
            to.as_bytes(),
            subject.as_bytes(),
            reply.map(str::as_bytes),
            headers,
            payload,
        )
    }

    fn reply(&mut self, to: &str, payload: Bytes) {
        // Replies may cross accounts (a requester behind a service import): route them as a
        // publish.
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
            None,
            None,
            &payload,
        );
    }
}
