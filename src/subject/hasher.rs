//! The hasher behind the tree's token maps and the match cache.
//!
//! Why not std's `RandomState` (SipHash-1-3)? Routing hashes every token of every published
//! subject; tokens are short (typically 2-16 bytes), where SipHash's fixed setup and finalisation
//! rounds dominate and cost several times more than the table probe itself. Why not plain
//! FxHash? Its multiply leaves the low bits of the hash depending only on the low bits of the
//! input, and hashbrown picks buckets from the low bits, so tokens sharing a prefix collide; it
//! also has no seed, so anyone allowed to subscribe could precompute colliding tokens.
//!
//! This is a folded-multiply hash (the construction foldhash and wyhash use): each 8-byte word is
//! XORed into the state and the state is replaced by the XOR of the high and low halves of its
//! 128-bit product with an odd constant, so every input bit reaches every output bit. The state
//! starts from a per-instance random seed drawn from std's `RandomState`. It is not a keyed PRF:
//! it raises the cost of hash flooding but does not rule it out; the damage is bounded by the
//! subscription limits that cap how many keys one client can add.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// An odd 64-bit constant with well-spread bits (2^64 / golden ratio).
const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// Multiplies as 128 bits and folds the halves together.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// Builds [`TokenHasher`]s that all start from one random seed.
#[derive(Clone)]
pub(super) struct SeededState {
    seed: u64,
}

impl SeededState {
    /// A state with a fresh random seed.
    pub(super) fn new() -> Self {
        // RandomState is seeded from the OS once per thread and then varied per instance.
        let seed = RandomState::new().build_hasher().finish();
        Self { seed }
    }
}

impl std::fmt::Debug for SeededState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The seed stays out of logs.
        f.write_str("SeededState")
    }
}

impl BuildHasher for SeededState {
    type Hasher = TokenHasher;

    fn build_hasher(&self) -> TokenHasher {
        TokenHasher { state: self.seed }
    }
}

/// Hashes byte strings with a folded multiply per 8 bytes; see the module docs.
pub(super) struct TokenHasher {
    state: u64,
}

impl TokenHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, MULTIPLIER);
    }

    /// Inputs over 16 bytes: whole words, then the last 8 bytes (overlapping is fine, the
    /// length was hashed first).
    #[cold]
    fn write_long(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        if !chunks.remainder().is_empty() {
            if let Some(last) = bytes.last_chunk::<8>() {
                self.mix(u64::from_le_bytes(*last));
            }
        }
    }
}

/// Reads up to 8 bytes as one word, exactly for the lengths it is given (0 to 8): callers hash
/// the length separately, so overlapping reads and zero padding cannot make two inputs alike.
#[inline]
fn read_small(bytes: &[u8]) -> u64 {
    if let (Some(first), Some(last)) = (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
        // 4 to 8 bytes: the first and last four, overlapping when shorter than 8.
        return u64::from(u32::from_le_bytes(*first))
            | (u64::from(u32::from_le_bytes(*last)) << 32);
    }
    // 0 to 3 bytes: first, middle and last byte.
    let at = |i: usize| bytes.get(i).copied().map_or(0, u64::from);
    let len = bytes.len();
    at(0) | (at(len / 2) << 8) | (at(len.wrapping_sub(1)) << 16)
}

impl Hasher for TokenHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        if bytes.len() <= 8 {
            self.mix(read_small(bytes));
        } else if bytes.len() <= 16 {
            if let (Some(first), Some(last)) = (bytes.first_chunk::<8>(), bytes.last_chunk::<8>()) {
                self.mix(u64::from_le_bytes(*first));
                self.mix(u64::from_le_bytes(*last));
            }
        } else {
            self.write_long(bytes);
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        // The length prefix of `Hash for [u8]`. It gets a full mix of its own: XORing it into
        // the state would let inputs of different lengths cancel it out ("a" vs "ba").
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(state: &SeededState, bytes: &[u8]) -> u64 {
        state.hash_one(bytes)
    }

    #[test]
    fn equal_inputs_hash_equal_under_one_seed() {
        let s = SeededState::new();
        assert_eq!(hash(&s, b"orders"), hash(&s, b"orders"));
        assert_ne!(hash(&s, b"orders"), hash(&s, b"orderz"));
    }

    #[test]
    fn short_inputs_of_different_lengths_do_not_cancel_out() {
        let s = SeededState::new();
        assert_ne!(hash(&s, b"a"), hash(&s, b"ba"));
        assert_ne!(hash(&s, b"ab"), hash(&s, b"abb"));
    }

    #[test]
    fn trailing_zero_bytes_change_the_hash() {
        let s = SeededState::new();
        assert_ne!(hash(&s, b"a"), hash(&s, b"a\0"));
        assert_ne!(hash(&s, b""), hash(&s, b"\0"));
    }

    #[test]
    fn every_length_and_byte_position_matters() {
        let s = SeededState::new();
        let mut seen = std::collections::HashSet::new();
        for len in 0..40usize {
            let base = vec![b'x'; len];
            assert!(seen.insert(hash(&s, &base)), "length {len}");
            for at in 0..len {
                let mut v = base.clone();
                if let Some(b) = v.get_mut(at) {
                    *b = b'y';
                }
                assert!(seen.insert(hash(&s, &v)), "length {len}, byte {at}");
            }
        }
    }

    #[test]
    fn tokens_sharing_a_prefix_spread_over_low_bits() {
        let s = SeededState::new();
        let mut buckets = std::collections::HashSet::new();
        for i in 0..256u32 {
            let token = format!("prefix{i:03}");
            buckets.insert(hash(&s, token.as_bytes()) & 0xff);
        }
        // 256 keys into 256 buckets: a decent hash fills well over half of them.
        assert!(buckets.len() > 128, "only {} buckets used", buckets.len());
    }
}
