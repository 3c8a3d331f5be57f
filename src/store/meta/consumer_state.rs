//! Consumer state files: `s/<stream_id>/c/<consumer_id>.st`, one whole-file seal each.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "SEALCST1"
//!      8     4  format version (u32 LE, = 1)
//!     12     4  data key version of the stream that sealed it (u32 LE)
//!     16     8  generation (u64 LE; the caller's monotonic counter)
//!     24     n  nonce(24) || ciphertext || tag(16)
//!               key  = stream DEK[version] → purpose key "consumer state" (salt = stream_id)
//!               AAD  = "sealstream consumer-state v1" || store_uuid || stream_id ||
//!                      consumer_id || generation || bytes 0..24
//! ```
//!
//! A file copied to another consumer, stream or store, or with an edited generation or
//! version, fails to open. Replacing the file with an older copy of itself opens (with its
//! older generation): the caller compares generations with what it expects.

use crate::crypto::{DataKey, SealKey};

use super::codec::{PutLe, Reader};
use super::ids::{ConsumerId, StreamId};

/// Subdirectory of a stream directory holding consumer state files.
pub(crate) const CONSUMER_DIR: &str = "c";
const MAGIC: &[u8; 8] = b"SEALCST1";
const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 24;
const DOMAIN: &[u8] = b"sealstream consumer-state v1";
/// Largest consumer state accepted (checked before reading).
pub const MAX_CONSUMER_STATE: usize = 64 << 20;

/// File name of a consumer's state.
pub(crate) fn state_file_name(consumer: &ConsumerId) -> String {
    format!("{}.st", consumer.to_hex())
}

/// The consumer id in a canonical state file name.
pub(crate) fn parse_state_file_name(name: &str) -> Option<ConsumerId> {
    ConsumerId::from_hex(name.strip_suffix(".st")?)
}

/// A decoded consumer state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerState {
    /// The generation it was persisted with.
    pub generation: u64,
    /// The state bytes.
    pub bytes: Vec<u8>,
}

/// Who a state file belongs to (everything its AAD binds besides its own header).
pub(crate) struct Owner<'a> {
    /// The store.
    pub(crate) store_uuid: &'a [u8; 16],
    /// The stream.
    pub(crate) stream: &'a StreamId,
    /// The consumer.
    pub(crate) consumer: &'a ConsumerId,
}

fn key(dek: &DataKey, stream: &StreamId) -> SealKey {
    dek.purpose_key(&stream.0, b"consumer state")
}

fn aad(owner: &Owner<'_>, generation: u64, header: &[u8]) -> Vec<u8> {
    let mut a = DOMAIN.to_vec();
    a.extend_from_slice(owner.store_uuid);
    a.extend_from_slice(&owner.stream.0);
    a.extend_from_slice(&owner.consumer.0);
    a.put_u64(generation);
    a.extend_from_slice(header);
    a
}

/// Seals a state into file bytes.
pub(crate) fn seal(
    dek: &DataKey,
    dek_version: u32,
    owner: &Owner<'_>,
    generation: u64,
    state: &[u8],
) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN + state.len() + crate::crypto::seal::OVERHEAD);
    h.extend_from_slice(MAGIC);
    h.put_u32(FORMAT_VERSION);
    h.put_u32(dek_version);
    h.put_u64(generation);
    let sealed = key(dek, owner.stream).seal(&aad(owner, generation, &h), state);
    h.extend_from_slice(&sealed);
    h
}

/// The data key version a state file claims (to pick the key before opening it).
pub(crate) fn peek_dek_version(bytes: &[u8]) -> Result<u32, &'static str> {
    let mut r = Reader::new(bytes);
    if &r.array::<8>().map_err(|_| "shorter than its header")? != MAGIC {
        return Err("bad magic");
    }
    if r.u32()? != FORMAT_VERSION {
        return Err("unsupported format version");
    }
    r.u32()
}

/// Opens state file bytes.
pub(crate) fn open(
    dek: &DataKey,
    owner: &Owner<'_>,
    bytes: &[u8],
) -> Result<ConsumerState, &'static str> {
    let mut r = Reader::new(bytes);
    let header = r.take(HEADER_LEN).map_err(|_| "shorter than its header")?;
    let mut h = Reader::new(header);
    if &h.array::<8>()? != MAGIC {
        return Err("bad magic");
    }
    if h.u32()? != FORMAT_VERSION {
        return Err("unsupported format version");
    }
    let _version = h.u32()?;
    let generation = h.u64()?;
    let plain = key(dek, owner.stream)
        .open(&aad(owner, generation, header), r.rest())
        .map_err(|_| {
            "does not authenticate (wrong stream, consumer, store, generation or edited)"
        })?;
    Ok(ConsumerState {
        generation,
        bytes: plain,
    })
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-length values")]
mod tests {
    use super::*;

    #[test]
    fn state_binds_its_owner_and_catches_every_flip() {
        let dek = DataKey::generate();
        let (s, c, c2) = (
            StreamId::random(),
            ConsumerId::random(),
            ConsumerId::random(),
        );
        let o = Owner {
            store_uuid: &[1; 16],
            stream: &s,
            consumer: &c,
        };
        let b = seal(&dek, 3, &o, 42, b"acks");
        assert_eq!(peek_dek_version(&b), Ok(3));
        assert_eq!(
            open(&dek, &o, &b).unwrap(),
            ConsumerState {
                generation: 42,
                bytes: b"acks".to_vec()
            }
        );
        let other = Owner { consumer: &c2, ..o };
        assert!(open(&dek, &other, &b).is_err());
        for bit in 0..b.len() * 8 {
            let mut x = b.clone();
            x[bit / 8] ^= 1 << (bit % 8);
            assert!(open(&dek, &o, &x).is_err(), "bit {bit}");
        }
    }
}
