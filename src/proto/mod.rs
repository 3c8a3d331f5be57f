//! The NATS client wire protocol: bytes in, ops out, and ops back to bytes.
//!
//! This module owns the text protocol described in `shared/spec/client-protocol.md`: the
//! resumable [`parser::Parser`], the op types in [`op`], the byte encoders in [`encode`], the
//! `NATS/1.0` header block in [`headers`], and the JSON bodies of `CONNECT` ([`connect`]) and
//! `INFO` ([`info`]), and the route protocol between cluster members ([`route`], compressed as [`s2`] streams). The exact `-ERR` texts clients match on live in [`errors`].
//!
//! It deliberately does no I/O and knows nothing about tokio, accounts or routing: the server
//! feeds it buffers and acts on the ops it returns, so every rule here is testable with plain
//! `#[test]`s and fuzzable.
//!
//! Invariants worth naming:
//! - Bytes split at any boundary parse to the same ops as the whole buffer.
//! - A size on a control line is checked against `max_payload` before any payload is buffered.
//! - No input panics the parser; malformed input yields a [`parser::ProtoError`].
#![deny(clippy::indexing_slicing)]

pub mod connect;
pub mod encode;
pub mod errors;
pub mod headers;
pub mod info;
pub mod op;
pub mod parser;
pub mod route;
pub mod s2;

pub use op::{ClientOp, ServerOp};
pub use parser::{Parser, ProtoError};
