//! Keys and sealing for the store: everything that turns plaintext into ciphertext that
//! authenticates and proves where it belongs.
//!
//! - [`secret`]: [`Secret`], the only type key material lives in: zeroized on drop, boxed so a
//!   move leaves no copy behind, no `Debug`/`Display`/`Serialize`.
//! - [`keys`]: the hierarchy `passphrase|key file → MK → KEK → wrapped DEKs → segment keys`
//!   (`docs/key-hierarchy.md`), key files, argon2id parameters.
//! - [`seal`]: XChaCha20-Poly1305 with a fresh random 24-byte nonce per seal and caller-built AAD.
//!
//! What it does not do: no I/O beyond reading and creating key files, no knowledge of the
//! store's layout. Callers build AAD; this module only guarantees that a seal opens with exactly
//! the key and AAD it was made with, and that a failed open returns no plaintext.
//!
//! Invariants: nonces come from the OS CSPRNG and are never derived from positions; lengths are
//! checked before any slicing; every comparison of MACs and key ids is constant-time.
#![deny(clippy::indexing_slicing)]

pub mod keys;
pub mod seal;
pub mod secret;

pub use keys::{DataKey, KdfParams, Kek, KeyError, MasterKey, WrappedKey};
pub use seal::{SealError, SealKey, NONCE_LEN, TAG_LEN};
pub use secret::{Key32, Secret};

/// Fills `buf` from the operating system's CSPRNG.
pub fn random_bytes(buf: &mut [u8]) {
    use rand::RngCore;
    rand::rngs::OsRng.fill_bytes(buf);
}

/// A random 16-byte id (store, stream and consumer ids).
pub fn random_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    random_bytes(&mut id);
    id
}

/// Turns off core dumps for this process (`RLIMIT_CORE = 0` and not dumpable), so key material
/// in memory never lands in a core file.
///
/// # Errors
/// The OS error when either call fails.
pub fn disable_core_dumps() -> Result<(), std::io::Error> {
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)
        .map_err(std::io::Error::from)?;
    nix::sys::prctl::set_dumpable(false).map_err(std::io::Error::from)
}
