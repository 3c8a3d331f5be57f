//! [`SeqMap`]: the sequence → entry map of a stream's index, dense where the log is dense.
//!
//! Why not a `BTreeMap<u64, V>`: a stream's sequences arrive in ascending order, and a B-tree
//! filled that way leaves its nodes about half full — with 64-byte entries that was ~130 bytes
//! of index per stored message, most of the server's memory once a stream held millions of
//! messages (the issue-12 publish flood). Here sequences are grouped in chunks of 64
//! consecutive numbers: a chunk is a presence bitmap and a `Vec` of the present values in
//! sequence order, so a dense run costs its values plus ~1 byte per message, and a sparse
//! stream (a KV bucket whose old revisions are gone) still costs only what is present.
//!
//! The API is the subset of `BTreeMap` the index uses; iteration yields `(u64, &V)` in
//! ascending order (and descending via `rev`).

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

const SHIFT: u32 = 6;
const LOW: u64 = (1 << SHIFT) - 1;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Chunk<V> {
    /// Bit `i` set: sequence `base + i` is present.
    present: u64,
    /// The present values, in sequence order (one per set bit).
    vals: Vec<V>,
}

impl<V> Chunk<V> {
    /// Position in `vals` of bit `bit` (the number of present bits below it).
    fn rank(&self, bit: u64) -> usize {
        (self.present & ((1u64 << bit) - 1)).count_ones() as usize
    }

    fn has(&self, bit: u64) -> bool {
        self.present & (1u64 << bit) != 0
    }
}

/// A map from sequence numbers to values; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqMap<V> {
    chunks: BTreeMap<u64, Chunk<V>>,
    len: usize,
}

impl<V> Default for SeqMap<V> {
    fn default() -> Self {
        SeqMap {
            chunks: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<V> SeqMap<V> {
    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value at `seq`.
    pub fn get(&self, seq: u64) -> Option<&V> {
        let c = self.chunks.get(&(seq >> SHIFT))?;
        let bit = seq & LOW;
        if c.has(bit) {
            c.vals.get(c.rank(bit))
        } else {
            None
        }
    }

    /// The value at `seq`, mutably.
    pub fn get_mut(&mut self, seq: u64) -> Option<&mut V> {
        let c = self.chunks.get_mut(&(seq >> SHIFT))?;
        let bit = seq & LOW;
        if c.has(bit) {
            let at = c.rank(bit);
            c.vals.get_mut(at)
        } else {
            None
        }
    }

    /// Inserts `v` at `seq`; returns the value it replaced. Appending above every present
    /// sequence (the log's case) is a push.
    pub fn insert(&mut self, seq: u64, v: V) -> Option<V> {
        let c = self.chunks.entry(seq >> SHIFT).or_insert_with(|| Chunk {
            present: 0,
            vals: Vec::new(),
        });
        let bit = seq & LOW;
        let at = c.rank(bit);
        if c.has(bit) {
            return c.vals.get_mut(at).map(|slot| std::mem::replace(slot, v));
        }
        c.vals.insert(at, v);
        c.present |= 1u64 << bit;
        self.len += 1;
        None
    }

    /// Removes the value at `seq`.
    pub fn remove(&mut self, seq: u64) -> Option<V> {
        let key = seq >> SHIFT;
        let c = self.chunks.get_mut(&key)?;
        let bit = seq & LOW;
        if !c.has(bit) {
            return None;
        }
        let v = c.vals.remove(c.rank(bit));
        c.present &= !(1u64 << bit);
        self.len -= 1;
        if c.present == 0 {
            self.chunks.remove(&key);
        } else if c.vals.capacity() > 8 && c.vals.len() * 4 < c.vals.capacity() {
            // A chunk thinned out (old KV revisions removed): give the slack back.
            c.vals.shrink_to_fit();
        }
        Some(v)
    }

    /// The lowest sequence and its value.
    pub fn first(&self) -> Option<(u64, &V)> {
        let (base, c) = self.chunks.first_key_value()?;
        let bit = u64::from(c.present.trailing_zeros());
        Some(((base << SHIFT) | bit, c.vals.first()?))
    }

    /// The highest sequence and its value.
    pub fn last(&self) -> Option<(u64, &V)> {
        let (base, c) = self.chunks.last_key_value()?;
        let bit = 63 - u64::from(c.present.leading_zeros());
        Some(((base << SHIFT) | bit, c.vals.last()?))
    }

    /// Every value in ascending sequence order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, &V)> {
        self.range(..)
    }

    /// The values whose sequences lie in `range`, ascending (`rev` for descending).
    pub fn range(
        &self,
        range: impl RangeBounds<u64>,
    ) -> impl DoubleEndedIterator<Item = (u64, &V)> {
        let lo = match range.start_bound() {
            Bound::Included(s) => Some(*s),
            Bound::Excluded(s) => s.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        let hi = match range.end_bound() {
            Bound::Included(e) => Some(*e),
            Bound::Excluded(e) => e.checked_sub(1),
            Bound::Unbounded => Some(u64::MAX),
        };
        // An empty range walks no chunk (`BTreeMap::range` refuses start > end).
        let (lo, hi, chunks) = match (lo, hi) {
            (Some(lo), Some(hi)) if lo <= hi => (
                lo,
                hi,
                Some(self.chunks.range((lo >> SHIFT)..=(hi >> SHIFT))),
            ),
            _ => (1, 0, None),
        };
        chunks
            .into_iter()
            .flatten()
            .flat_map(|(base, c)| {
                Bits {
                    front: c.present,
                    back: c.present,
                    left: c.present.count_ones(),
                }
                .map(move |bit| (base << SHIFT) | bit)
                .zip(c.vals.iter())
            })
            .filter(move |(seq, _)| (lo..=hi).contains(seq))
    }
}

/// The set bits of a chunk's bitmap, from either end.
struct Bits {
    front: u64,
    back: u64,
    left: u32,
}

impl Iterator for Bits {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let bit = self.front.trailing_zeros();
        self.front &= self.front - 1;
        Some(u64::from(bit))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Bits {}

impl DoubleEndedIterator for Bits {
    fn next_back(&mut self) -> Option<u64> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let bit = 63 - self.back.leading_zeros();
        self.back &= !(1u64 << bit);
        Some(u64::from(bit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Small sequence space around chunk edges and far apart, so chunks fill, empty and
        // straddle ranges.
        let seq = prop_oneof![0u64..200, (u64::MAX - 70)..=u64::MAX, Just(63), Just(64)];
        prop_oneof![
            3 => (seq.clone(), any::<u32>()).prop_map(|(s, v)| Op::Insert(s, v)),
            2 => seq.prop_map(Op::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn agrees_with_btreemap(
            ops in prop::collection::vec(op(), 0..120),
            ranges in prop::collection::vec((0u64..260, 0u64..260), 1..8),
        ) {
            let mut m = SeqMap::default();
            let mut b = BTreeMap::new();
            for o in &ops {
                match *o {
                    Op::Insert(s, v) => prop_assert_eq!(m.insert(s, v), b.insert(s, v)),
                    Op::Remove(s) => prop_assert_eq!(m.remove(s), b.remove(&s)),
                }
                prop_assert_eq!(m.len(), b.len());
            }
            let all: Vec<_> = m.iter().map(|(s, v)| (s, *v)).collect();
            let want: Vec<_> = b.iter().map(|(s, v)| (*s, *v)).collect();
            prop_assert_eq!(&all, &want);
            let back: Vec<_> = m.iter().rev().map(|(s, v)| (s, *v)).collect();
            prop_assert_eq!(back, want.iter().rev().copied().collect::<Vec<_>>());
            prop_assert_eq!(m.first().map(|(s, v)| (s, *v)), b.first_key_value().map(|(s, v)| (*s, *v)));
            prop_assert_eq!(m.last().map(|(s, v)| (s, *v)), b.last_key_value().map(|(s, v)| (*s, *v)));
            for (s, _) in &want {
                prop_assert_eq!(m.get(*s), b.get(s));
            }
            for &(a, z) in &ranges {
                let got: Vec<_> = m.range(a..z).map(|(s, v)| (s, *v)).collect();
                let exp: Vec<_> = if a <= z { b.range(a..z).map(|(s, v)| (*s, *v)).collect() } else { Vec::new() };
                prop_assert_eq!(got, exp);
                let got: Vec<_> = m.range(a..=z).rev().map(|(s, v)| (s, *v)).collect();
                let exp: Vec<_> = if a <= z { b.range(a..=z).rev().map(|(s, v)| (*s, *v)).collect() } else { Vec::new() };
                prop_assert_eq!(got, exp);
                let got: Vec<_> = m.range(a..).map(|(s, _)| s).collect();
                let exp: Vec<_> = b.range(a..).map(|(s, _)| *s).collect();
                prop_assert_eq!(got, exp);
                let got: Vec<_> = m.range(..z).map(|(s, _)| s).collect();
                let exp: Vec<_> = b.range(..z).map(|(s, _)| *s).collect();
                prop_assert_eq!(got, exp);
            }
        }
    }

    #[test]
    fn mixed_iteration_from_both_ends_meets_in_the_middle() {
        let mut m = SeqMap::default();
        for s in [1u64, 5, 63, 64, 65, 200] {
            m.insert(s, s);
        }
        let mut it = m.iter();
        assert_eq!(it.next().map(|(s, _)| s), Some(1));
        assert_eq!(it.next_back().map(|(s, _)| s), Some(200));
        assert_eq!(it.next().map(|(s, _)| s), Some(5));
        assert_eq!(it.next_back().map(|(s, _)| s), Some(65));
        assert_eq!(it.next().map(|(s, _)| s), Some(63));
        assert_eq!(it.next_back().map(|(s, _)| s), Some(64));
        assert_eq!(it.next(), None);
    }

    #[test]
    fn a_dense_run_fills_whole_chunks() {
        let mut m = SeqMap::default();
        for s in 1..=640u64 {
            m.insert(s, 0u8);
        }
        assert_eq!(m.chunks.len(), 11);
        assert!(m
            .chunks
            .values()
            .skip(1)
            .take(9)
            .all(|c| c.vals.capacity() == 64));
        for s in 1..=640u64 {
            assert_eq!(m.remove(s), Some(0));
        }
        assert!(m.chunks.is_empty() && m.is_empty());
    }
}
