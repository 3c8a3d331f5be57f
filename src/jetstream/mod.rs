//! JetStream: streams, consumers, acks and retention over the sealed store — the decisions,
//! without sockets or tasks.
//!
//! Everything here is synchronous and single-owner: one [`stream::Stream`] value owns one
//! stream's store, its dedupe window and its consumers, and is driven by exactly one thread
//! (`server::jetstream` runs that thread and feeds it publishes, API requests and acks). What
//! the engine wants to say to clients — pub-acks, deliveries, pull status messages, API
//! replies — goes out through a [`Sink`], which the server implements with its router.
//!
//! - [`config`]: stream and consumer configuration as the API carries it (parsing,
//!   normalisation, update rules).
//! - [`api`]: the `$JS.API` subject grammar and the error-code table.
//! - [`stream`]: publish checks (dedupe, expected-* headers, rollup, TTL), limits, purge, get,
//!   info, retention.
//! - [`consumer`]: delivery cursor, pending acks, redelivery, pull requests, push delivery.

use bytes::Bytes;

pub mod ack_subject;
pub mod api;
pub mod config;
pub mod consumer;
pub mod dedupe;
#[cfg(test)]
mod engine_tests;
pub mod stream;

/// The JetStream API level this server implements (INFO `api_lvl`, account info `api.level`).
pub const API_LEVEL: u32 = 5;

/// Where the engine sends messages. The server implements it with its router.
pub trait Sink {
    /// Delivers one message to the subscribers of `to`, showing `subject` in the `MSG` line.
    /// Returns how many subscriptions took it (0 = nobody is listening).
    fn send(
        &mut self,
        to: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> usize;

    /// Publishes an ordinary message (API replies, pub-acks): delivered as `subject`.
    fn reply(&mut self, to: &str, payload: Bytes) {
        self.send(to, to, None, None, &payload);
    }

    /// Publishes a header-only status message (`NATS/1.0 404 No Messages` etc.) to `to`.
    fn status(&mut self, to: &str, headers: Bytes) -> usize {
        self.send(to, to, None, Some(&headers), &Bytes::new())
    }
}

/// Current time in unix nanoseconds.
pub fn now_nanos() -> i64 {
    crate::store::now_nanos()
}
