//! [`MatchCache`]: a small per-connection memo of [`SubjectTree::matches`] results.
//!
//! Publishers tend to reuse a handful of subjects, so a connection's reader task keeps the
//! results it computed, keyed by subject bytes and tagged with the tree's
//! [`generation`](SubjectTree::generation). Any subscribe or unsubscribe in the account bumps the
//! generation, which turns every tagged entry stale at once: no invalidation messages, no locks.
//!
//! The cache is owned by one task and takes `&mut self` to change; it has no interior locking.
//! It is bounded in entries ([`MATCH_CACHE_CAPACITY`]) and in key length
//! ([`MAX_CACHED_SUBJECT_LEN`]), so a client publishing to endless distinct subjects costs a
//! bounded amount of memory per connection.

use std::collections::HashMap;
use std::sync::Arc;

use super::hasher::SeededState;
use super::tree::{MatchResult, SubjectTree};

/// The default number of subjects one [`MatchCache`] remembers.
///
/// When an insert finds the cache full, entries from older generations are dropped first; if
/// that frees less than half, every other remaining entry is dropped too, so the cache is at
/// most half full afterwards. Eviction is O(capacity) but happens at most once per
/// capacity/2 inserts. The value is per connection, and a result can hold many subscriptions,
/// so it is kept modest.
pub const MATCH_CACHE_CAPACITY: usize = 1024;

/// Subjects longer than this are neither cached nor looked up: they would cost more memory
/// than recomputing their match saves, and long subjects (inboxes with payload-like tokens)
/// are rarely repeated.
pub const MAX_CACHED_SUBJECT_LEN: usize = 256;

/// A bounded map from subject bytes to shared match results, each valid for one tree
/// generation. See the module docs.
///
/// Use one cache per tree: generations of different trees are unrelated numbers, so a cache
/// shared between trees could return another tree's result.
#[derive(Debug)]
pub struct MatchCache<T> {
    entries: HashMap<Box<[u8]>, Entry<T>, SeededState>,
    capacity: usize,
}

#[derive(Debug)]
struct Entry<T> {
    generation: u64,
    result: Arc<MatchResult<T>>,
}

impl<T> Default for MatchCache<T> {
    fn default() -> Self {
        Self::with_capacity(MATCH_CACHE_CAPACITY)
    }
}

impl<T> MatchCache<T> {
    /// An empty cache holding up to [`MATCH_CACHE_CAPACITY`] subjects.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache holding up to `capacity` subjects; 0 disables caching.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: HashMap::with_hasher(SeededState::new()),
            capacity,
        }
    }

    /// The cached result for `subject` if it was computed at `current_generation`; `None` if
    /// it is missing or stale. Allocates nothing.
    pub fn get(&self, subject: &[u8], current_generation: u64) -> Option<Arc<MatchResult<T>>> {
        if subject.len() > MAX_CACHED_SUBJECT_LEN {
            return None;
        }
        let entry = self.entries.get(subject)?;
        (entry.generation == current_generation).then(|| Arc::clone(&entry.result))
    }

    /// Remembers `result` as the match of `subject` at tree generation `generation`, replacing
    /// any older entry for that subject. Ignored for subjects over [`MAX_CACHED_SUBJECT_LEN`]
    /// bytes. When the cache is full this evicts first, as [`MATCH_CACHE_CAPACITY`] describes.
    pub fn insert(&mut self, subject: &[u8], generation: u64, result: Arc<MatchResult<T>>) {
        if subject.len() > MAX_CACHED_SUBJECT_LEN || self.capacity == 0 {
            return;
        }
        if let Some(entry) = self.entries.get_mut(subject) {
            // Refreshing a stale entry in place avoids allocating a new key.
            *entry = Entry { generation, result };
            return;
        }
        if self.entries.len() >= self.capacity {
            self.evict(generation);
        }
        self.entries
            .insert(subject.into(), Entry { generation, result });
    }

    /// The number of cached subjects, stale ones included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Makes room: drops entries not from `generation`, then, if the cache is still more than
    /// half full, every other entry in table order (effectively random, as keys are hashed
    /// with a random seed).
    fn evict(&mut self, generation: u64) {
        self.entries.retain(|_, e| e.generation == generation);
        let half = self.capacity / 2;
        if self.entries.len() > half {
            let mut keep = false;
            self.entries.retain(|_, _| {
                keep = !keep;
                keep
            });
        }
    }
}

impl<T: Clone + PartialEq> MatchCache<T> {
    /// The match of `subject` in `tree`: from the cache when it holds a result from the tree's
    /// current generation, otherwise computed and cached.
    pub fn get_or_match(&mut self, tree: &SubjectTree<T>, subject: &[u8]) -> Arc<MatchResult<T>> {
        let generation = tree.generation();
        if let Some(hit) = self.get(subject, generation) {
            return hit;
        }
        let result = Arc::new(tree.matches(subject));
        self.insert(subject, generation, Arc::clone(&result));
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(ids: &[u32]) -> Arc<MatchResult<u32>> {
        Arc::new(MatchResult {
            plain: ids.to_vec(),
            groups: Vec::new(),
        })
    }

    #[test]
    fn a_hit_needs_the_same_generation() {
        let mut c = MatchCache::new();
        c.insert(b"foo", 3, result(&[1]));
        assert_eq!(c.get(b"foo", 3).unwrap().plain, vec![1]);
        assert!(c.get(b"foo", 4).is_none());
        assert!(c.get(b"bar", 3).is_none());
    }

    #[test]
    fn reinserting_a_subject_replaces_its_entry() {
        let mut c = MatchCache::new();
        c.insert(b"foo", 1, result(&[1]));
        c.insert(b"foo", 2, result(&[2]));
        assert_eq!(c.len(), 1);
        assert!(c.get(b"foo", 1).is_none());
        assert_eq!(c.get(b"foo", 2).unwrap().plain, vec![2]);
    }

    #[test]
    fn a_full_cache_drops_stale_entries_first() {
        let mut c = MatchCache::with_capacity(8);
        for i in 0..4u32 {
            c.insert(format!("old.{i}").as_bytes(), 1, result(&[i]));
        }
        for i in 0..4u32 {
            c.insert(format!("new.{i}").as_bytes(), 2, result(&[i]));
        }
        c.insert(b"newest", 2, result(&[9]));
        assert_eq!(c.len(), 5);
        for i in 0..4u32 {
            assert!(c.get(format!("new.{i}").as_bytes(), 2).is_some());
        }
    }

    #[test]
    fn the_cache_never_exceeds_its_capacity() {
        let mut c = MatchCache::with_capacity(64);
        for i in 0..10_000u32 {
            c.insert(format!("s.{i}").as_bytes(), 7, result(&[i]));
            assert!(c.len() <= 64);
        }
        assert!(c.len() > 32);
    }

    #[test]
    fn long_subjects_are_not_cached() {
        let mut c = MatchCache::new();
        let long = vec![b'a'; MAX_CACHED_SUBJECT_LEN + 1];
        c.insert(&long, 1, result(&[1]));
        assert!(c.is_empty());
        assert!(c.get(&long, 1).is_none());
    }

    #[test]
    fn zero_capacity_disables_caching() {
        let mut c = MatchCache::with_capacity(0);
        c.insert(b"foo", 1, result(&[1]));
        assert!(c.is_empty());
    }

    #[test]
    fn get_or_match_recomputes_after_the_tree_changes() {
        let mut tree = SubjectTree::new();
        let mut c = MatchCache::new();
        tree.insert(b"foo.*", None, 1u32).unwrap();
        let first = c.get_or_match(&tree, b"foo.bar");
        assert_eq!(first.plain, vec![1]);
        assert!(Arc::ptr_eq(&first, &c.get_or_match(&tree, b"foo.bar")));
        tree.insert(b"foo.bar", None, 2).unwrap();
        let second = c.get_or_match(&tree, b"foo.bar");
        assert_eq!(second.plain.len(), 2);
        assert_eq!(c.len(), 1);
    }
}
