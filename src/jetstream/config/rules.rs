//! The name and subject rules stream and consumer configs share (spec §2): what a stream or
//! consumer name may be, and the wildcard-aware subject checks (validity, matching, collision,
//! subset) — built on [`crate::subject`], whose token rules they are. A leaf: the configs
//! import it, it imports none of them.

use crate::subject::subject;

/// Longest stream or consumer name (§2).
pub const MAX_NAME_LEN: usize = 255;

/// Whether `name` is a valid stream or consumer name (§2): non-empty, at most 255 bytes, and
/// none of `.`, `*`, `>`, `/`, `\` or whitespace.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name
            .chars()
            .any(|c| matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace())
}

/// Whether `s` is a valid subject or subject pattern: non-empty, no empty token, no whitespace
/// (any Unicode whitespace, stricter than the core protocol), `>` only as the last token. `*`
/// and `>` are wildcards only as whole tokens. The token rules are [`crate::subject`]'s.
pub fn valid_subject_pattern(s: &str) -> bool {
    subject::is_valid_subscribe_subject(s.as_bytes()) && !s.chars().any(char::is_whitespace)
}

/// Whether `s` is a valid subject with no wildcard token (a publish subject).
pub fn valid_literal_subject(s: &str) -> bool {
    valid_subject_pattern(s) && s.split('.').all(|t| t != "*" && t != ">")
}

/// Whether `subject` matches `filter`: `*` matches one token, a trailing `>` one or more.
/// Tokens of `subject` are literal. An invalid filter or subject matches nothing.
pub fn subject_matches(subject: &str, filter: &str) -> bool {
    valid_subject_pattern(filter)
        && subject::subject_matches_filter(subject.as_bytes(), filter.as_bytes())
}

/// Whether some subject matches both patterns: `orders.>` and `orders.x` collide, `a.*` and
/// `a.b.c` do not. Symmetric; invalid patterns collide with nothing.
pub fn subjects_collide(a: &str, b: &str) -> bool {
    valid_subject_pattern(a)
        && valid_subject_pattern(b)
        && subject::filters_overlap(a.as_bytes(), b.as_bytes())
}

/// Whether every subject matched by `sub` is also matched by `of` (both patterns).
pub fn subject_is_subset(sub: &str, of: &str) -> bool {
    valid_subject_pattern(sub)
        && valid_subject_pattern(of)
        && subject::filter_is_subset_of(sub.as_bytes(), of.as_bytes())
}
