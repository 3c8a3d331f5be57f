//! [`SubjectTree`]: the routing index from filters to subscriptions, with `*`, `>` and queue
//! groups (client protocol §5.4 and §6).
//!
//! The tree is a trie with one level per token. Each node has
//! - literal children in a hash map keyed by the token's bytes (looked up by `&[u8]`, so routing
//!   never builds an owned key),
//! - a separate child for the `*` wildcard, and
//! - a separate `>` slot, which holds subscribers only: `>` is always a filter's last token.
//!
//! Subscriptions live on the node where their filter ends: plain ones in a list, queue ones in a
//! list per queue name. Queue names are opaque bytes, compared exactly and never pattern-matched.
//!
//! Invariants worth naming:
//! - The tree agrees with [`subject_matches_filter`]: a subscription is in `matches(s)` exactly
//!   when its filter matches `s` (property-tested below).
//! - Every node on the tree holds at least one subscription in its subtree: `remove` prunes
//!   nodes, `>` slots and queue groups as they empty, and shrinks oversized maps and lists, so
//!   memory follows the live subscriptions rather than their history.
//! - Results are deterministic: they depend only on the sequence of inserts and removes.
//!
//! Matching and removal recurse once per token. The depth is bounded by the longest filter in
//! the tree, and filters arrive on a protocol line capped by `max_control_line`.
//!
//! The tree has no interior locking; the server keeps it behind a `std` `RwLock` and caches
//! results per connection with [`super::cache::MatchCache`], keyed by [`SubjectTree::generation`].
//!
//! [`subject_matches_filter`]: super::subject::subject_matches_filter

use std::collections::HashMap;
use std::sync::Arc;

use super::hasher::SeededState;
use super::subject::{
    is_routable, is_valid_subscribe_subject, FULL_WILDCARD, SINGLE_WILDCARD, TOKEN_SEPARATOR,
};

/// A filter given to [`SubjectTree::insert`] was not a valid subscribe subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidSubject;

impl std::fmt::Display for InvalidSubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("invalid subject")
    }
}

impl std::error::Error for InvalidSubject {}

/// The matching members of one queue group: exactly one of them should get the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueGroup<T> {
    /// The queue name, exactly as subscribed. Shared with the tree: cloning a group into a
    /// result costs a reference count, not a copy.
    pub name: Arc<[u8]>,
    /// Every matching subscription in the group, whatever filter it used.
    pub members: Vec<T>,
}

/// The subscriptions a published subject reaches.
///
/// The order of `plain`, of `groups` and of each group's members is deterministic for a given
/// history of inserts and removes (subscriptions on one filter come in insertion order), but is
/// otherwise unspecified: callers should not rely on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchResult<T> {
    /// Plain subscriptions: each gets its own copy.
    pub plain: Vec<T>,
    /// One entry per queue name that has at least one match; names are distinct.
    pub groups: Vec<QueueGroup<T>>,
}

impl<T> Default for MatchResult<T> {
    fn default() -> Self {
        Self {
            plain: Vec::new(),
            groups: Vec::new(),
        }
    }
}

impl<T> MatchResult<T> {
    /// Whether nothing matched.
    pub fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.groups.is_empty()
    }

    /// Empties the result, keeping its allocations for reuse.
    pub fn clear(&mut self) {
        self.plain.clear();
        self.groups.clear();
    }
}

/// An index from filters (with optional queue names) to subscription values of type `T`.
///
/// `T` is whatever identifies a subscription to the router (a handle, an id pair, an `Arc`):
/// it is cloned into results and compared with `==` on removal. The tree is a multiset: the same
/// value inserted twice under the same filter and queue is matched twice and needs two removes.
#[derive(Debug)]
pub struct SubjectTree<T> {
    root: Node<T>,
    len: usize,
    generation: u64,
    hasher: SeededState,
}

impl<T> Default for SubjectTree<T> {
    fn default() -> Self {
        let hasher = SeededState::new();
        Self {
            root: Node::new(&hasher),
            len: 0,
            generation: 0,
            hasher,
        }
    }
}

impl<T: Clone + PartialEq> SubjectTree<T> {
    /// An empty tree at generation 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a subscription to `filter`, in queue group `queue` if given.
    ///
    /// # Errors
    /// [`InvalidSubject`] if `filter` fails [`super::subject::is_valid_subscribe_subject`]; the
    /// tree and its generation are then unchanged. Queue names are not validated.
    pub fn insert(
        &mut self,
        filter: &[u8],
        queue: Option<&[u8]>,
        value: T,
    ) -> Result<(), InvalidSubject> {
        if !is_valid_subscribe_subject(filter) {
            return Err(InvalidSubject);
        }
        self.root.insert(filter, queue, value, &self.hasher);
        self.len += 1;
        self.generation = self.generation.wrapping_add(1);
        Ok(())
    }

    /// Removes one subscription equal to `value` from exactly `filter` and `queue` (the same
    /// arguments it was inserted with). Returns whether one was found.
    ///
    /// Cost: one step per token, plus a scan of the subscriptions on that exact filter and queue
    /// (values are only `PartialEq`, so there is no index to find them faster).
    pub fn remove(&mut self, filter: &[u8], queue: Option<&[u8]>, value: &T) -> bool {
        if !is_valid_subscribe_subject(filter) {
            return false;
        }
        let removed = self.root.remove(filter, queue, value);
        if removed {
            self.len -= 1;
            self.generation = self.generation.wrapping_add(1);
        }
        removed
    }

    /// The subscriptions a message published to `subject` reaches.
    ///
    /// `subject` is matched literally: its `*` and `>` tokens are ordinary tokens, reached only
    /// by wildcard filters. A subject that is empty or has an empty token matches nothing.
    /// Allocates only the result's vectors.
    pub fn matches(&self, subject: &[u8]) -> MatchResult<T> {
        let mut out = MatchResult::default();
        self.matches_into(subject, &mut out);
        out
    }

    /// Like [`matches`](Self::matches), but fills `out` (cleared first) so that a caller can
    /// reuse its allocations across messages.
    pub fn matches_into(&self, subject: &[u8], out: &mut MatchResult<T>) {
        out.clear();
        if self.len != 0 && is_routable(subject) {
            self.root.collect(subject, out);
        }
    }

    /// Whether any subscription matches `subject`; the no-responders fast path. Allocates
    /// nothing and stops at the first match.
    pub fn has_interest(&self, subject: &[u8]) -> bool {
        self.len != 0 && is_routable(subject) && self.root.any_match(subject)
    }

    /// The subscriptions whose filter overlaps the filter `pattern`: some subject matches both
    /// (agrees with [`super::subject::filters_overlap`]; property-tested below). Queue members
    /// are listed with the plain ones. An invalid `pattern` overlaps nothing.
    ///
    /// This is how JetStream refuses a stream whose subjects collide with another stream's
    /// without comparing against every stream: the walk visits only the branches the pattern
    /// can reach (all of them below a `>`).
    pub fn overlapping(&self, pattern: &[u8]) -> Vec<T> {
        let mut out = Vec::new();
        if self.len != 0 && is_valid_subscribe_subject(pattern) {
            self.root.overlapping(pattern, &mut out);
        }
        out
    }

    /// A counter bumped by every successful insert and remove, so that cached match results can
    /// be checked for staleness. It starts at 0 and only changes through this tree's methods.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The number of subscriptions (plain and queue) in the tree.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree holds no subscription.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Counts the nodes under the root, `>` slots included; for the pruning tests.
    #[cfg(test)]
    fn node_count(&self) -> usize {
        self.root.count_below()
    }
}

/// Splits off the first token of a non-empty byte string: `(token, rest after the dot)`.
#[inline]
fn split_first_token(s: &[u8]) -> (&[u8], Option<&[u8]>) {
    let mut parts = s.splitn(2, |&b| b == TOKEN_SEPARATOR);
    let token = parts.next().unwrap_or_default();
    (token, parts.next())
}

/// Shrinks a collection whose length fell well below its capacity, so that a burst of
/// subscriptions does not pin memory after they are gone. The factor of 4 keeps the cost
/// amortised: a shrink happens only after at least 3/4 of the capacity was removed.
fn should_shrink(len: usize, capacity: usize) -> bool {
    capacity > 16 && len.saturating_mul(4) < capacity
}

/// The subscriptions whose filter ends at one place in the tree.
#[derive(Debug)]
struct Subscribers<T> {
    plain: Vec<T>,
    queues: Vec<QueueGroup<T>>,
}

impl<T> Default for Subscribers<T> {
    fn default() -> Self {
        Self {
            plain: Vec::new(),
            queues: Vec::new(),
        }
    }
}

impl<T: Clone + PartialEq> Subscribers<T> {
    fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.queues.is_empty()
    }

    fn add(&mut self, queue: Option<&[u8]>, value: T) {
        let Some(name) = queue else {
            self.plain.push(value);
            return;
        };
        match self.queues.iter_mut().find(|g| *g.name == *name) {
            Some(group) => group.members.push(value),
            None => self.queues.push(QueueGroup {
                name: Arc::from(name),
                members: vec![value],
            }),
        }
    }

    fn remove(&mut self, queue: Option<&[u8]>, value: &T) -> bool {
        let Some(name) = queue else {
            return remove_first(&mut self.plain, value);
        };
        let Some(at) = self.queues.iter().position(|g| *g.name == *name) else {
            return false;
        };
        let Some(group) = self.queues.get_mut(at) else {
            return false;
        };
        let removed = remove_first(&mut group.members, value);
        if group.members.is_empty() {
            self.queues.remove(at);
        }
        removed
    }

    /// Appends every one of these subscribers, plain and queued, to `out`.
    fn append_all(&self, out: &mut Vec<T>) {
        out.extend_from_slice(&self.plain);
        for group in &self.queues {
            out.extend_from_slice(&group.members);
        }
    }

    /// Appends these subscribers to `out`, merging queue members into `out`'s group of the same
    /// name so that one queue name is one group across every filter that matched.
    fn append_to(&self, out: &mut MatchResult<T>) {
        out.plain.extend_from_slice(&self.plain);
        for group in &self.queues {
            match out.groups.iter_mut().find(|g| g.name == group.name) {
                Some(existing) => existing.members.extend_from_slice(&group.members),
                None => out.groups.push(group.clone()),
            }
        }
    }
}

/// Removes the first element equal to `value`, keeping the order of the rest.
fn remove_first<T: PartialEq>(list: &mut Vec<T>, value: &T) -> bool {
    let Some(at) = list.iter().position(|v| v == value) else {
        return false;
    };
    list.remove(at);
    if should_shrink(list.len(), list.capacity()) {
        list.shrink_to_fit();
    }
    true
}

/// One level of the trie; see the module docs.
#[derive(Debug)]
struct Node<T> {
    literals: HashMap<Box<[u8]>, Node<T>, SeededState>,
    star: Option<Box<Node<T>>>,
    full: Option<Box<Subscribers<T>>>,
    here: Subscribers<T>,
}

impl<T> Node<T> {
    fn new(hasher: &SeededState) -> Self {
        Self {
            literals: HashMap::with_hasher(hasher.clone()),
            star: None,
            full: None,
            here: Subscribers::default(),
        }
    }
}

impl<T: Clone + PartialEq> Node<T> {
    fn is_empty(&self) -> bool {
        self.literals.is_empty()
            && self.star.is_none()
            && self.full.is_none()
            && self.here.is_empty()
    }

    /// Inserts under this node; `filter` is the (valid) rest of the filter below it.
    fn insert(&mut self, filter: &[u8], queue: Option<&[u8]>, value: T, hasher: &SeededState) {
        let (token, rest) = split_first_token(filter);
        if token == FULL_WILDCARD {
            // A valid filter has nothing after `>`.
            self.full.get_or_insert_with(Box::default).add(queue, value);
            return;
        }
        let child: &mut Node<T> = if token == SINGLE_WILDCARD {
            self.star.get_or_insert_with(|| Box::new(Node::new(hasher)))
        } else if let Some(child) = self.literals.get_mut(token) {
            child
        } else {
            // Build the new branch first and insert it with one owned key: looking up first
            // keeps existing branches from paying for a key allocation.
            let mut child = Node::new(hasher);
            child.insert_at(rest, queue, value, hasher);
            self.literals.insert(token.into(), child);
            return;
        };
        child.insert_at(rest, queue, value, hasher);
    }

    /// Inserts at this node if the filter ended, or below it.
    fn insert_at(&mut self, rest: Option<&[u8]>, queue: Option<&[u8]>, value: T, h: &SeededState) {
        match rest {
            None => self.here.add(queue, value),
            Some(rest) => self.insert(rest, queue, value, h),
        }
    }

    /// Removes from under this node, pruning whatever it empties.
    fn remove(&mut self, filter: &[u8], queue: Option<&[u8]>, value: &T) -> bool {
        let (token, rest) = split_first_token(filter);
        if token == FULL_WILDCARD {
            let Some(full) = self.full.as_deref_mut() else {
                return false;
            };
            let removed = full.remove(queue, value);
            if full.is_empty() {
                self.full = None;
            }
            return removed;
        }
        if token == SINGLE_WILDCARD {
            let Some(star) = self.star.as_deref_mut() else {
                return false;
            };
            let removed = star.remove_at(rest, queue, value);
            if star.is_empty() {
                self.star = None;
            }
            return removed;
        }
        let Some(child) = self.literals.get_mut(token) else {
            return false;
        };
        let removed = child.remove_at(rest, queue, value);
        if child.is_empty() {
            self.literals.remove(token);
            if should_shrink(self.literals.len(), self.literals.capacity()) {
                self.literals.shrink_to_fit();
            }
        }
        removed
    }

    /// Removes at this node if the filter ended, or below it.
    fn remove_at(&mut self, rest: Option<&[u8]>, queue: Option<&[u8]>, value: &T) -> bool {
        match rest {
            None => self.here.remove(queue, value),
            Some(rest) => self.remove(rest, queue, value),
        }
    }

    /// Appends every subscription under this node matching `subject` (routable, non-empty).
    fn collect(&self, subject: &[u8], out: &mut MatchResult<T>) {
        let mut node = self;
        let mut subject = subject;
        loop {
            let (token, rest) = split_first_token(subject);
            // `>` here consumes this token and everything after it.
            if let Some(full) = &node.full {
                full.append_to(out);
            }
            let literal = node.literals.get(token);
            let Some(rest) = rest else {
                // Last token: the filters ending at the next level match.
                if let Some(star) = &node.star {
                    star.here.append_to(out);
                }
                if let Some(child) = literal {
                    child.here.append_to(out);
                }
                return;
            };
            if let Some(star) = &node.star {
                star.collect(rest, out);
            }
            // Continue down the literal branch without recursing.
            let Some(child) = literal else {
                return;
            };
            node = child;
            subject = rest;
        }
    }

    /// Whether any subscription under this node matches `subject` (routable, non-empty).
    fn any_match(&self, subject: &[u8]) -> bool {
        let mut node = self;
        let mut subject = subject;
        loop {
            if node.full.is_some() {
                // Slots are pruned when empty, so a present `>` slot has a subscriber.
                return true;
            }
            let (token, rest) = split_first_token(subject);
            let literal = node.literals.get(token);
            let Some(rest) = rest else {
                return node.star.as_ref().is_some_and(|s| !s.here.is_empty())
                    || literal.is_some_and(|c| !c.here.is_empty());
            };
            if node.star.as_ref().is_some_and(|s| s.any_match(rest)) {
                return true;
            }
            let Some(child) = literal else {
                return false;
            };
            node = child;
            subject = rest;
        }
    }

    /// Appends every subscription under this node whose filter overlaps `pattern` (the valid
    /// rest of a filter).
    fn overlapping(&self, pattern: &[u8], out: &mut Vec<T>) {
        let (token, rest) = split_first_token(pattern);
        // A `>` filter here takes this token and any after it.
        if let Some(full) = &self.full {
            full.append_all(out);
        }
        if token == FULL_WILDCARD {
            // The pattern takes one or more tokens: every filter below this node overlaps.
            for child in self.literals.values() {
                child.append_subtree(out);
            }
            if let Some(star) = &self.star {
                star.append_subtree(out);
            }
            return;
        }
        let mut visit = |child: &Node<T>| match rest {
            None => child.here.append_all(out),
            Some(rest) => child.overlapping(rest, out),
        };
        if let Some(star) = &self.star {
            visit(star);
        }
        if token == SINGLE_WILDCARD {
            for child in self.literals.values() {
                visit(child);
            }
        } else if let Some(child) = self.literals.get(token) {
            visit(child);
        }
    }

    /// Appends every subscription of this node and below it.
    fn append_subtree(&self, out: &mut Vec<T>) {
        self.here.append_all(out);
        if let Some(full) = &self.full {
            full.append_all(out);
        }
        for child in self.literals.values() {
            child.append_subtree(out);
        }
        if let Some(star) = &self.star {
            star.append_subtree(out);
        }
    }

    #[cfg(test)]
    fn count_below(&self) -> usize {
        let literals: usize = self.literals.values().map(|c| 1 + c.count_below()).sum();
        let star = self.star.as_ref().map_or(0, |s| 1 + s.count_below());
        literals + star + usize::from(self.full.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::super::subject::subject_matches_filter;
    use super::*;

    fn sorted<T: Ord + Clone>(v: &[T]) -> Vec<T> {
        let mut v = v.to_vec();
        v.sort();
        v
    }

    fn group<'a, T>(r: &'a MatchResult<T>, name: &[u8]) -> Option<&'a QueueGroup<T>> {
        r.groups.iter().find(|g| *g.name == *name)
    }

    #[test]
    fn literal_star_and_gt_filters_all_match() {
        let mut t = SubjectTree::new();
        t.insert(b"foo.bar", None, 1).unwrap();
        t.insert(b"foo.*", None, 2).unwrap();
        t.insert(b"foo.>", None, 3).unwrap();
        t.insert(b">", None, 4).unwrap();
        t.insert(b"*.bar", None, 5).unwrap();
        t.insert(b"foo.baz", None, 6).unwrap();
        assert_eq!(sorted(&t.matches(b"foo.bar").plain), vec![1, 2, 3, 4, 5]);
        assert_eq!(sorted(&t.matches(b"foo.bar.baz").plain), vec![3, 4]);
        assert_eq!(sorted(&t.matches(b"foo").plain), vec![4]);
        assert!(t.matches(b"foo.bar").groups.is_empty());
    }

    #[test]
    fn gt_wildcard_needs_at_least_one_token() {
        let mut t = SubjectTree::new();
        t.insert(b"foo.>", None, 1).unwrap();
        assert!(t.matches(b"foo").is_empty());
        assert!(!t.has_interest(b"foo"));
        assert_eq!(t.matches(b"foo.a").plain, vec![1]);
        assert_eq!(t.matches(b"foo.a.b.c").plain, vec![1]);
    }

    #[test]
    fn queue_group_spans_patterns() {
        let mut t = SubjectTree::new();
        t.insert(b"foo.*", Some(b"q"), 1).unwrap();
        t.insert(b"foo.>", Some(b"q"), 2).unwrap();
        t.insert(b"foo.bar", Some(b"q"), 3).unwrap();
        t.insert(b"foo.bar", Some(b"other"), 4).unwrap();
        t.insert(b"foo.bar", None, 5).unwrap();
        let r = t.matches(b"foo.bar");
        assert_eq!(r.plain, vec![5]);
        assert_eq!(r.groups.len(), 2);
        assert_eq!(sorted(&group(&r, b"q").unwrap().members), vec![1, 2, 3]);
        assert_eq!(group(&r, b"other").unwrap().members, vec![4]);
    }

    #[test]
    fn queue_names_are_never_pattern_matched() {
        let mut t = SubjectTree::new();
        t.insert(b"foo", Some(b"*"), 1).unwrap();
        t.insert(b"foo", Some(b"q.>"), 2).unwrap();
        t.insert(b"foo", Some(b"q.x"), 3).unwrap();
        let r = t.matches(b"foo");
        assert_eq!(r.groups.len(), 3);
        assert_eq!(group(&r, b"*").unwrap().members, vec![1]);
        assert!(!t.remove(b"foo", Some(b"q.*"), &3));
        assert!(t.remove(b"foo", Some(b"q.x"), &3));
    }

    #[test]
    fn published_wildcard_tokens_are_matched_literally() {
        let mut t = SubjectTree::new();
        t.insert(b">", None, 1).unwrap();
        t.insert(b"foo.*", None, 2).unwrap();
        t.insert(b"foo.>", None, 3).unwrap();
        t.insert(b"foo.bar", None, 4).unwrap();
        assert_eq!(sorted(&t.matches(b"foo.>").plain), vec![1, 2, 3]);
        assert_eq!(sorted(&t.matches(b"foo.*").plain), vec![1, 2, 3]);
    }

    #[test]
    fn malformed_published_subjects_match_nothing() {
        let mut t = SubjectTree::new();
        t.insert(b">", None, 1).unwrap();
        t.insert(b"foo.*.bar", None, 2).unwrap();
        for bad in [&b""[..], b"foo..bar", b".foo", b"foo.", b"."] {
            assert!(t.matches(bad).is_empty(), "{bad:?}");
            assert!(!t.has_interest(bad), "{bad:?}");
        }
    }

    #[test]
    fn invalid_filters_are_rejected_without_a_generation_bump() {
        let mut t = SubjectTree::new();
        for bad in [&b""[..], b"foo..bar", b">.foo", b"foo bar", b"."] {
            assert_eq!(t.insert(bad, None, 1), Err(InvalidSubject), "{bad:?}");
        }
        assert_eq!(t.generation(), 0);
        assert!(t.is_empty());
        assert!(!t.remove(b"foo..bar", None, &1));
    }

    #[test]
    fn duplicates_are_kept_and_removed_one_at_a_time() {
        let mut t = SubjectTree::new();
        t.insert(b"a", None, 7).unwrap();
        t.insert(b"a", None, 7).unwrap();
        assert_eq!(t.matches(b"a").plain, vec![7, 7]);
        assert!(t.remove(b"a", None, &7));
        assert_eq!(t.matches(b"a").plain, vec![7]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn remove_needs_the_same_filter_and_queue() {
        let mut t = SubjectTree::new();
        t.insert(b"foo.*", Some(b"q"), 1).unwrap();
        assert!(!t.remove(b"foo.bar", Some(b"q"), &1));
        assert!(!t.remove(b"foo.*", None, &1));
        assert!(!t.remove(b"foo.*", Some(b"q"), &2));
        assert!(!t.remove(b"foo.>", Some(b"q"), &1));
        assert_eq!(t.generation(), 1);
        assert!(t.remove(b"foo.*", Some(b"q"), &1));
        assert_eq!(t.generation(), 2);
        assert!(t.is_empty());
    }

    #[test]
    fn removing_everything_prunes_every_node() {
        let mut t = SubjectTree::new();
        let filters: [&[u8]; 6] = [b"a.b.c", b"a.*.c", b"a.>", b">", b"*.*.*.*", b"a.b"];
        for (i, f) in filters.iter().enumerate() {
            t.insert(f, None, i).unwrap();
            t.insert(f, Some(b"q"), i).unwrap();
        }
        assert!(t.node_count() > 0);
        for (i, f) in filters.iter().enumerate() {
            assert!(t.remove(f, None, &i));
            assert!(t.remove(f, Some(b"q"), &i));
        }
        assert_eq!(t.node_count(), 0);
        assert!(t.root.is_empty());
        assert!(t.is_empty());
    }

    #[test]
    fn churn_does_not_grow_the_tree() {
        let mut t = SubjectTree::new();
        t.insert(b"_INBOX.keep.*", None, 0u64).unwrap();
        for i in 1..2_000u64 {
            let inbox = format!("_INBOX.{i}.*");
            t.insert(inbox.as_bytes(), None, i).unwrap();
            assert!(t.remove(inbox.as_bytes(), None, &i));
        }
        // `_INBOX`, `keep`, `*`.
        assert_eq!(t.node_count(), 3);
        let inbox = t.root.literals.get(&b"_INBOX"[..]).unwrap();
        assert!(inbox.literals.capacity() <= 16);
    }

    #[test]
    fn results_are_deterministic_across_identical_trees() {
        let build = || {
            let mut t = SubjectTree::new();
            for (i, f) in [&b"a.*"[..], b"a.b", b">", b"a.>", b"*.b"]
                .iter()
                .enumerate()
            {
                t.insert(f, None, i).unwrap();
                t.insert(f, Some(b"q"), i + 10).unwrap();
            }
            t
        };
        assert_eq!(build().matches(b"a.b"), build().matches(b"a.b"));
    }

    #[test]
    fn matches_into_reuses_and_clears_the_buffer() {
        let mut t = SubjectTree::new();
        t.insert(b"a", None, 1).unwrap();
        let mut out = MatchResult::default();
        t.matches_into(b"a", &mut out);
        assert_eq!(out.plain, vec![1]);
        t.matches_into(b"b", &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn wildcard_bytes_inside_tokens_are_literal() {
        let mut t = SubjectTree::new();
        t.insert(b"foo*.a>b", None, 1).unwrap();
        assert_eq!(t.matches(b"foo*.a>b").plain, vec![1]);
        assert!(t.matches(b"fooX.a>b").is_empty());
        assert!(t.matches(b"foo*.aXb").is_empty());
    }

    #[test]
    fn brute_force_agrees_on_a_hand_picked_case() {
        let mut t = SubjectTree::new();
        let filters: [&[u8]; 4] = [b"*.*", b"*.>", b"a.*", b"b"];
        for (i, f) in filters.iter().enumerate() {
            t.insert(f, None, i).unwrap();
        }
        for s in [&b"a.b"[..], b"a", b"b", b"a.b.c", b"*.>"] {
            let expected: Vec<usize> = (0..filters.len())
                .filter(|&i| filters.get(i).is_some_and(|f| subject_matches_filter(s, f)))
                .collect();
            assert_eq!(sorted(&t.matches(s).plain), expected, "{s:?}");
        }
    }

    mod props {
        use super::super::super::subject::subject_matches_filter;
        use super::super::*;
        use proptest::prelude::*;
        use std::collections::BTreeMap;

        #[derive(Debug, Clone)]
        enum Op {
            Insert {
                filter: Vec<u8>,
                queue: Option<Vec<u8>>,
            },
            /// Removes the live subscription at this index (modulo the live count).
            Remove(usize),
            /// A remove that names a subscription the tree does not have.
            RemoveMissing {
                filter: Vec<u8>,
                queue: Option<Vec<u8>>,
            },
        }

        /// Filters from a small alphabet, including some invalid ones (empty tokens, `>`
        /// not last) that insert must reject.
        fn filter() -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec(prop::sample::select(vec!["a", "b", "*", ">", ""]), 1..5)
                .prop_map(|tokens| tokens.join(".").into_bytes())
        }

        fn queue() -> impl Strategy<Value = Option<Vec<u8>>> {
            prop::sample::select(vec![None, None, Some(&b"q1"[..]), Some(b"q2"), Some(b"*")])
                .prop_map(|q| q.map(<[u8]>::to_vec))
        }

        /// Published subjects, wildcard tokens and malformed ones included.
        fn subject() -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec(
                prop::sample::select(vec!["a", "b", "c", "*", ">", ""]),
                1..6,
            )
            .prop_map(|tokens| tokens.join(".").into_bytes())
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (filter(), queue()).prop_map(|(filter, queue)| Op::Insert { filter, queue }),
                2 => any::<usize>().prop_map(Op::Remove),
                1 => (filter(), queue()).prop_map(|(filter, queue)| Op::RemoveMissing { filter, queue }),
            ]
        }

        /// A live subscription in the model: (id, filter, queue).
        type Live = Vec<(u32, Vec<u8>, Option<Vec<u8>>)>;

        /// Applies `ops` to a tree and to a plain list, checking the generation as it goes.
        fn apply(ops: &[Op]) -> Result<(SubjectTree<u32>, Live), TestCaseError> {
            let mut tree = SubjectTree::new();
            let mut live: Live = Vec::new();
            let mut next_id = 0u32;
            for op in ops {
                let before = tree.generation();
                let changed = match op {
                    Op::Insert { filter, queue } => {
                        next_id += 1;
                        let ok = tree.insert(filter, queue.as_deref(), next_id).is_ok();
                        prop_assert_eq!(ok, is_valid_subscribe_subject(filter));
                        if ok {
                            live.push((next_id, filter.clone(), queue.clone()));
                        }
                        ok
                    }
                    Op::Remove(i) => {
                        if live.is_empty() {
                            false
                        } else {
                            let (id, f, q) = live.remove(i % live.len());
                            prop_assert!(tree.remove(&f, q.as_deref(), &id));
                            true
                        }
                    }
                    Op::RemoveMissing { filter, queue } => {
                        // Id 0 is never inserted.
                        prop_assert!(!tree.remove(filter, queue.as_deref(), &0));
                        false
                    }
                };
                let expected = if changed { before + 1 } else { before };
                prop_assert_eq!(tree.generation(), expected);
                prop_assert_eq!(tree.len(), live.len());
            }
            Ok((tree, live))
        }

        /// What the tree should answer for `subject`, as sorted plain ids and per-queue ids.
        fn brute(live: &Live, subject: &[u8]) -> (Vec<u32>, BTreeMap<Vec<u8>, Vec<u32>>) {
            let mut plain = Vec::new();
            let mut groups: BTreeMap<Vec<u8>, Vec<u32>> = BTreeMap::new();
            for (id, f, q) in live {
                if !subject_matches_filter(subject, f) {
                    continue;
                }
                match q {
                    None => plain.push(*id),
                    Some(q) => groups.entry(q.clone()).or_default().push(*id),
                }
            }
            plain.sort_unstable();
            groups.values_mut().for_each(|v| v.sort_unstable());
            (plain, groups)
        }

        fn normalise(r: &MatchResult<u32>) -> (Vec<u32>, BTreeMap<Vec<u8>, Vec<u32>>) {
            let mut plain = r.plain.clone();
            plain.sort_unstable();
            let mut groups = BTreeMap::new();
            for g in &r.groups {
                let mut m = g.members.clone();
                m.sort_unstable();
                // Names must be distinct: one group per queue name.
                assert!(groups.insert(g.name.to_vec(), m).is_none());
            }
            (plain, groups)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn tree_agrees_with_brute_force(
                ops in prop::collection::vec(op(), 0..40),
                subjects in prop::collection::vec(subject(), 1..12),
            ) {
                let (tree, live) = apply(&ops)?;
                for s in &subjects {
                    let got = tree.matches(s);
                    prop_assert_eq!(normalise(&got), brute(&live, s), "subject {:?}", s);
                    prop_assert_eq!(tree.has_interest(s), !got.is_empty(), "subject {:?}", s);
                }
            }

            #[test]
            fn overlapping_agrees_with_filters_overlap(
                ops in prop::collection::vec(op(), 0..40),
                patterns in prop::collection::vec(filter(), 1..12),
            ) {
                let (tree, live) = apply(&ops)?;
                for p in &patterns {
                    let mut got = tree.overlapping(p);
                    got.sort_unstable();
                    let mut want: Vec<u32> = if is_valid_subscribe_subject(p) {
                        live.iter()
                            .filter(|(_, f, _)| super::super::super::subject::filters_overlap(f, p))
                            .map(|(id, _, _)| *id)
                            .collect()
                    } else {
                        Vec::new()
                    };
                    want.sort_unstable();
                    prop_assert_eq!(got, want, "pattern {:?}", p);
                }
            }

            #[test]
            fn removing_all_live_subscriptions_empties_the_tree(
                ops in prop::collection::vec(op(), 0..40),
            ) {
                let (mut tree, live) = apply(&ops)?;
                let start = tree.generation();
                for (done, (id, f, q)) in (1u64..).zip(live.iter().rev()) {
                    prop_assert!(tree.remove(f, q.as_deref(), id));
                    prop_assert_eq!(tree.generation(), start + done);
                }
                prop_assert!(tree.is_empty());
                prop_assert_eq!(tree.node_count(), 0);
            }
        }
    }
}
