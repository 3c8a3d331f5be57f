//! # sealstream
//!
//! A message broker that speaks the NATS protocol — existing NATS clients connect unchanged —
//! built for tenants who do not trust the disk.
//!
//! ## Layout
//!
//! Follow one message: socket → [`server`] (connection reader) → [`proto`] (parser) →
//! [`server`] (account router, using [`subject`]) → subscribers' outbound queues → socket.
//!
//! - [`proto`]: the NATS wire protocol; bytes to ops and back. No I/O.
//! - [`subject`]: subject rules, the subscription tree with `*`/`>` and queue groups, the
//!   match cache.
//! - [`config`]: the nats-server configuration language and command-line flags → options.
//! - [`auth`]: who may connect, and as whom.
//! - [`store`]: the sealed store: header, keyring, catalog (and the segment log).
//! - [`jetstream`]: streams, consumers, acks and retention over the store; decisions, no I/O
//!   of its own beyond the store.
//! - [`consensus`]: Raft groups on openraft and the transport they share (replicated
//!   JetStream's foundation).
//! - [`crypto`]: keys (argon2id, HKDF, wrapped data keys) and XChaCha20-Poly1305 sealing.
//! - [`server`]: listeners, connections, routing, monitoring, lifecycle. The only place (with
//!   [`ctl`]) that knows about tokio.
//! - [`ctl`]: the `sealctl` admin and load tool; talks to a server as a NATS client.
//! - [`page_cache`]: write-once and read-once bytes (the Raft log, snapshots, a live audit's
//!   reads) kept out of the page cache.
//! - [`timefmt`]: Go durations and RFC 3339 times as nats-server and its clients write them.
//!
//! Dependencies point downwards only: `proto`, `subject` and `timefmt` use none of our other
//! modules, `config` only `timefmt`; `auth` uses `subject`; `server` uses everything.
#![forbid(unsafe_code)]
#![recursion_limit = "256"]

pub mod audit;
pub mod auth;
pub mod bytes_run;
pub mod config;
pub mod consensus;
pub mod crypto;
pub mod ctl;
pub mod jetstream;
pub mod pace;
pub mod page_cache;
pub mod proto;
pub mod server;
pub mod store;
pub mod subject;
pub mod timefmt;
