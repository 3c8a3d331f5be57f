//! The sealed store (see `docs/storage-format.md`, `docs/key-hierarchy.md`).
//!
//! - [`meta`]: the store-wide layer: `STORE` header (A/B slots), `LOCK`, sealed keyring
//!   generations, the sealed name catalog, consumer state files, key sources, rotation and
//!   crypto-erasure.
#![deny(clippy::indexing_slicing)]

pub mod meta;
