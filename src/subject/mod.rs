//! Subjects: token rules, the routing tree and the per-connection match cache.
//!
//! - [`subject`]: validation of subscribe and publish subjects, the brute-force reference
//!   matcher [`subject_matches_filter`], and the filter algebra ([`filter_is_subset_of`],
//!   [`filters_overlap`]) that permissions and stream subject overlap build on.
//! - [`tree`]: [`SubjectTree`], the trie that routes a published subject to its plain
//!   subscriptions and queue groups.
//! - [`mapping`]: import mappings between accounts and the rule that keeps them inside
//!   their export.
//! - [`transform`]: stream subject transforms (`$1`, `{{wildcard(1)}}`), which rename what
//!   one stream stores.
//! - [`cache`]: [`MatchCache`], a bounded memo of tree results keyed by subject and checked
//!   against the tree's generation.
//!
//! What this module does not do: it knows nothing about connections, accounts, sids or locking
//! (the server keeps each account's tree behind a `std` `RwLock`), and it does not pick which
//! member of a queue group receives a message; it returns the whole group.
//!
//! Invariants:
//! - Subjects are bytes, not necessarily UTF-8. `*` and `>` are wildcards only as whole tokens of
//!   a filter; in a published subject they are literal tokens.
//! - A published subject with an empty token matches nothing, everywhere in this module.
//! - [`SubjectTree::matches`] returns exactly the subscriptions whose filter satisfies
//!   [`subject_matches_filter`], with one [`QueueGroup`] per queue name.
//! - No indexing, `unwrap` or `unsafe`. Tree recursion is one frame per token, bounded by the
//!   longest filter inserted (itself bounded by `max_control_line`).

#![deny(clippy::indexing_slicing)]

pub mod cache;
mod hasher;
pub mod mapping;
#[expect(
    clippy::module_inception,
    reason = "style guide layout: subject/subject.rs holds the token rules"
)]
pub mod subject;
pub mod transform;
pub mod tree;

pub use cache::{MatchCache, MATCH_CACHE_CAPACITY, MAX_CACHED_SUBJECT_LEN};
pub use subject::{
    filter_is_subset_of, filters_overlap, is_literal, is_valid_publish_subject,
    is_valid_subscribe_subject, subject_matches_filter,
};
pub use tree::{InvalidSubject, MatchResult, QueueGroup, SubjectTree};
