//! Asking other servers: the API thread's own requests to streams this server does not host
//! (`STREAM.LIST` of the whole cluster gathers each such stream's info from its host).
//!
//! Why a request over the account's router rather than something cluster-internal: a
//! stream's API is already reachable from every server (its host's entries are a queue group
//! advertised over routes), so a `$JS.API.STREAM.INFO.<S>` published here reaches the host as
//! a client's would. The answers come back to one inbox subscription per gathering, in a
//! queue group of JetStream's services so that it too is advertised to route peers (a plain
//! service subscription stays this server's own); the interest reaches each peer on the same
//! route connection ahead of the requests, so no answer can arrive before it.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::server::account::Service;
use crate::server::backpressure::Budget;

use super::sink::RouterSink;
use super::AccountJs;

/// Where answers to one gathering arrive: `<inbox>.<index>` → slot `index`.
struct Answers {
    tx: SyncSender<(usize, Bytes)>,
}

impl Service for Answers {
    fn deliver(
        &self,
        _sid: &[u8],
        subject: &[u8],
        _reply: Option<&[u8]>,
        _headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> Option<Arc<Budget>> {
        let index = subject
            .rsplit(|b| *b == b'.')
            .next()
            .and_then(|i| std::str::from_utf8(i).ok()?.parse().ok());
        if let Some(i) = index {
            // Bounded by the number of requests: a repeated answer is dropped.
            let _ = self.tx.try_send((i, payload.clone()));
        }
        None
    }
}

impl AccountJs {
    /// Publishes each of `requests` (subject, body) in this account with a reply subject of
    /// its own and waits up to `wait` for the answers; a request unanswered by then is
    /// `None`. Called on the API thread (it blocks).
    pub(crate) fn gather(
        self: &Arc<Self>,
        server: &str,
        seed: u64,
        requests: &[(String, Bytes)],
        wait: Duration,
    ) -> Vec<Option<Bytes>> {
        let mut out = vec![None; requests.len()];
        if requests.is_empty() {
            return out;
        }
        let n = self.next_sid.fetch_add(1, Ordering::Relaxed);
        // The server's peer id: a server name may hold characters a subject cannot.
        let me = crate::consensus::peer_id(server);
        let inbox = format!("$SEALSTREAM.GATHER.{me}.{n}");
        let (tx, rx) = sync_channel(requests.len());
        let Some(sub) = self.subscribe(
            &format!("{inbox}.*"),
            Bytes::from(format!("g{n}")),
            Some(Bytes::from(format!("$SEALSTREAM.GATHER.{me}"))),
            Arc::new(Answers { tx }),
        ) else {
            return out;
        };
        let mut sink = RouterSink::new(Arc::clone(&self.account), seed);
        for (i, (subject, body)) in requests.iter().enumerate() {
            sink.request(subject, &format!("{inbox}.{i}"), body);
        }
        sink.flush();
        let deadline = Instant::now() + wait;
        let mut left = requests.len();
        while left > 0 {
            let Ok((i, answer)) =
                rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                break;
            };
            if let Some(slot) = out.get_mut(i).filter(|s| s.is_none()) {
                *slot = Some(answer);
                left -= 1;
            }
        }
        self.account.unsubscribe(&sub);
        out
    }
}
