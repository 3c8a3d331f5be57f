//! JetStream: streams, consumers, acks and retention over the sealed store — the decisions,
//! without sockets or tasks.
//!
//! Everything here is synchronous and single-owner: one [`stream::Stream`] value owns one
//! stream's store, its dedupe window and its consumers, and is driven by exactly one thread
//! (`server::jetstream` runs that thread and feeds it publishes, API requests and acks). What
//! the engine wants to say to clients — pub-acks, deliveries, pull status messages, API
//! replies — it records as [`Effect`]s in the caller's [`Effects`]; the server routes them
//! after the call ([`effects`]).
//!
//! - [`config`]: stream and consumer configuration as the API carries it (parsing,
//!   normalisation, update rules).
//! - [`api`]: the `$JS.API` subject grammar and the error-code table.
//! - [`stream`]: publish checks (dedupe, expected-* headers, rollup, TTL), limits, purge, get,
//!   info, retention.
//! - [`consumer`]: delivery cursor, pending acks, redelivery, pull requests, push delivery.
//! - [`batch`]: atomic batch publishes (staged until their commit, stored all or nothing).
//! - [`source`]: mirrors and sources: what a stream copies from other streams, and where
//!   each copy resumes.
//! - [`schedule`]: message schedules (`Nats-Schedule`): patterns, fire times, what a firing
//!   publishes.
//! - [`fast_batch`]: fast-ingest batches (`allow_batched`): stored as they arrive, paced by
//!   flow acks.

pub use effects::{Effect, Effects, Interest};

pub mod ack_subject;
pub mod api;
pub mod batch;
pub mod config;
pub mod consumer;
pub mod dedupe;
pub mod effects;
#[cfg(test)]
mod engine_tests;
pub mod fast_batch;
pub mod image;
pub mod schedule;
pub mod source;
pub mod stream;

/// The JetStream API level this server implements (INFO `api_lvl`, account info `api.level`).
pub const API_LEVEL: u32 = 5;

/// Current time in unix nanoseconds.
pub fn now_nanos() -> i64 {
    crate::store::now_nanos()
}
