//! Token rules for subjects and filters (client protocol §6), plus the brute-force reference
//! matcher and the filter algebra (subset, overlap) used by permission checks and stream
//! subject overlap.
//!
//! Everything here works on raw bytes: subjects need not be UTF-8. A token is the run of bytes
//! between dots. `*` and `>` are wildcards only as whole tokens; `foo*` and `a>b` are literals.
//!
//! Conventions shared by every function in this file (and by [`super::tree::SubjectTree`]):
//! - A *filter* is anything [`is_valid_subscribe_subject`] accepts. Functions taking a filter
//!   answer `false` when given something else, so a malformed filter never matches or grants.
//! - A *published subject* is matched literally: a `*` or `>` token in it is an ordinary token,
//!   matched only by a filter's wildcard at that position. A published subject that is empty or
//!   has an empty token (`foo..bar`, `.foo`, `foo.`) matches nothing.

/// The byte that separates tokens.
pub const TOKEN_SEPARATOR: u8 = b'.';
/// The single-token wildcard, meaningful only as a whole token of a filter.
pub const SINGLE_WILDCARD: &[u8] = b"*";
/// The trailing wildcard (one or more tokens), meaningful only as the last token of a filter.
pub const FULL_WILDCARD: &[u8] = b">";

/// Bytes that may never appear in a subject: the protocol uses them as field separators.
fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Splits `s` on `.`, yielding empty tokens where dots are doubled or at either end.
fn tokens(s: &[u8]) -> std::slice::Split<'_, u8, impl FnMut(&u8) -> bool> {
    s.split(|&b| b == TOKEN_SEPARATOR)
}

/// Whether `s` may be used as a `SUB` subject or a filter: non-empty, no empty token, no
/// whitespace byte (space, tab, CR, LF), and `>` only as the last token.
///
/// `*` is allowed as any whole token; `foo*`, `*bar` and `a>b` are ordinary literal tokens.
pub fn is_valid_subscribe_subject(s: &[u8]) -> bool {
    if s.is_empty() || s.iter().copied().any(is_whitespace) {
        return false;
    }
    let mut seen_full_wildcard = false;
    for token in tokens(s) {
        if token.is_empty() || seen_full_wildcard {
            return false;
        }
        seen_full_wildcard = token == FULL_WILDCARD;
    }
    true
}

/// The pedantic publish check: a valid subscribe subject with no wildcard token.
///
/// Non-pedantic connections skip this check entirely (client protocol §6.2): their subjects are
/// routed literally, and a malformed one simply matches nothing.
pub fn is_valid_publish_subject(s: &[u8]) -> bool {
    is_valid_subscribe_subject(s) && is_literal(s)
}

/// Whether `s` has no wildcard token (`*` or `>` as a whole token).
///
/// This only looks at tokens; it does not check that `s` is otherwise valid.
pub fn is_literal(s: &[u8]) -> bool {
    tokens(s).all(|t| t != SINGLE_WILDCARD && t != FULL_WILDCARD)
}

/// Whether a published `subject` is matched by `filter`: `*` matches exactly one token, `>`
/// one or more trailing tokens, and every other filter token must equal the subject's token.
///
/// Tokens of `subject` are always literal, so a published `foo.>` is matched by `>`, `foo.*` and
/// `foo.>` but not by `foo.bar`. Returns `false` if `filter` is not a valid filter or `subject`
/// is empty or has an empty token.
///
/// This is the reference that [`super::tree::SubjectTree`] is tested against; it is linear in
/// the lengths of its inputs and allocates nothing.
pub fn subject_matches_filter(subject: &[u8], filter: &[u8]) -> bool {
    if !is_valid_subscribe_subject(filter) || !is_routable(subject) {
        return false;
    }
    let mut subject_tokens = tokens(subject);
    for f in tokens(filter) {
        let Some(s) = subject_tokens.next() else {
            // The filter wants more tokens than the subject has.
            return false;
        };
        if f == FULL_WILDCARD {
            // `>` is last in a valid filter and has just consumed at least one token.
            return true;
        }
        if f != SINGLE_WILDCARD && f != s {
            return false;
        }
    }
    subject_tokens.next().is_none()
}

/// Whether every subject matched by filter `sub` is also matched by filter `of`.
///
/// `sub`'s wildcards are treated as the sets of tokens they stand for: `foo.*` is a subset of
/// `foo.*`, `foo.>` and `>` but not of `foo.bar`; `foo.>` is a subset of `foo.>` and `>` but not
/// of `foo.*`. Returns `false` if either argument is not a valid filter.
pub fn filter_is_subset_of(sub: &[u8], of: &[u8]) -> bool {
    if !is_valid_subscribe_subject(sub) || !is_valid_subscribe_subject(of) {
        return false;
    }
    let mut sub_tokens = tokens(sub);
    for o in tokens(of) {
        let Some(s) = sub_tokens.next() else {
            // `of` needs more tokens than any subject of `sub` has.
            return false;
        };
        if o == FULL_WILDCARD {
            // `>` covers whatever non-empty tail `sub` has from here, wildcards included.
            return true;
        }
        if s == FULL_WILDCARD {
            // `sub` allows tails of any length; nothing but `>` (handled above) covers that.
            return false;
        }
        if o != SINGLE_WILDCARD && (s == SINGLE_WILDCARD || s != o) {
            // A literal in `of` covers only the identical literal in `sub`.
            return false;
        }
    }
    sub_tokens.next().is_none()
}

/// Whether some published subject is matched by both filters `a` and `b`.
///
/// Symmetric. Returns `false` if either argument is not a valid filter.
pub fn filters_overlap(a: &[u8], b: &[u8]) -> bool {
    if !is_valid_subscribe_subject(a) || !is_valid_subscribe_subject(b) {
        return false;
    }
    let mut a_tokens = tokens(a);
    let mut b_tokens = tokens(b);
    loop {
        match (a_tokens.next(), b_tokens.next()) {
            (None, None) => return true,
            // Different lengths and neither side reached a `>`.
            (None, Some(_)) | (Some(_), None) => return false,
            (Some(x), Some(y)) => {
                if x == FULL_WILDCARD || y == FULL_WILDCARD {
                    // The `>` side absorbs the other side's (non-empty) remainder.
                    return true;
                }
                if x != SINGLE_WILDCARD && y != SINGLE_WILDCARD && x != y {
                    return false;
                }
            }
        }
    }
}

/// Whether a published subject can match anything: non-empty with no empty token.
///
/// Whitespace and wildcard bytes are not checked: they are ordinary bytes of a literal subject.
/// This runs on every published subject, so it looks at 8 bytes per step (SWAR).
#[inline]
pub(super) fn is_routable(subject: &[u8]) -> bool {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const DOTS: u64 = 0x0101_0101_0101_0101 * TOKEN_SEPARATOR as u64;
    /// The high bit of each byte of `word` that is a dot, and no other bit. Exact: the masked
    /// add cannot carry between bytes.
    fn dot_mask(word: u64) -> u64 {
        let x = word ^ DOTS;
        !(((x & LOW7).wrapping_add(LOW7)) | x) & HIGH
    }

    if subject.last().is_none_or(|&b| b == TOKEN_SEPARATOR) {
        return false;
    }
    // A dot "before" the first byte, so that a leading dot counts as an empty token.
    let mut carry = 0x80;
    let mut chunks = subject.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let dots = dot_mask(u64::from_le_bytes(word));
        // A dot whose previous byte (in this word, or the last of the previous) is a dot.
        if dots & ((dots << 8) | carry) != 0 {
            return false;
        }
        carry = dots >> 56;
    }
    let mut word = [0u8; 8];
    word.iter_mut()
        .zip(chunks.remainder())
        .for_each(|(d, s)| *d = *s);
    // Zero padding holds no dots, and a trailing dot was ruled out above.
    let dots = dot_mask(u64::from_le_bytes(word));
    dots & ((dots << 8) | carry) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_subject_needs_non_empty_tokens() {
        for bad in [&b""[..], b".", b"foo.", b".foo", b"foo..bar", b".."] {
            assert!(!is_valid_subscribe_subject(bad), "{bad:?}");
        }
        for good in [
            &b"foo"[..],
            b"foo.bar",
            b"a.b.c.d.e",
            b"$JS.API.INFO",
            b"_INBOX.x.*",
        ] {
            assert!(is_valid_subscribe_subject(good), "{good:?}");
        }
    }

    #[test]
    fn whitespace_is_never_allowed() {
        for bad in [
            &b"foo bar"[..],
            b"foo\tbar",
            b"foo\r",
            b"\nfoo",
            b"foo. .bar",
        ] {
            assert!(!is_valid_subscribe_subject(bad), "{bad:?}");
            assert!(!is_valid_publish_subject(bad), "{bad:?}");
        }
    }

    #[test]
    fn gt_wildcard_must_be_the_last_token() {
        assert!(is_valid_subscribe_subject(b">"));
        assert!(is_valid_subscribe_subject(b"foo.>"));
        assert!(is_valid_subscribe_subject(b"*.*.>"));
        assert!(!is_valid_subscribe_subject(b">.foo"));
        assert!(!is_valid_subscribe_subject(b"foo.>.bar"));
        assert!(!is_valid_subscribe_subject(b">.>"));
    }

    #[test]
    fn wildcards_inside_a_token_are_literal() {
        for lit in [&b"foo*"[..], b"*bar", b"a>b", b"foo.>bar", b"**", b">>"] {
            assert!(is_valid_subscribe_subject(lit), "{lit:?}");
            assert!(is_literal(lit), "{lit:?}");
            assert!(is_valid_publish_subject(lit), "{lit:?}");
        }
        assert!(is_valid_subscribe_subject(b"a>b.c"));
    }

    #[test]
    fn publish_subject_rejects_wildcard_tokens() {
        assert!(is_valid_publish_subject(b"foo.bar"));
        assert!(!is_valid_publish_subject(b"foo.*"));
        assert!(!is_valid_publish_subject(b"foo.>"));
        assert!(!is_valid_publish_subject(b"*"));
        assert!(!is_valid_publish_subject(b"foo..bar"));
    }

    #[test]
    fn non_utf8_bytes_are_ordinary_token_bytes() {
        let s = b"caf\xc3\xa9.\xff\xfe";
        assert!(is_valid_publish_subject(s));
        assert!(subject_matches_filter(s, b"*.\xff\xfe"));
        assert!(!subject_matches_filter(s, b"*.\xff"));
    }

    #[test]
    fn star_matches_exactly_one_token() {
        assert!(subject_matches_filter(b"foo.bar", b"foo.*"));
        assert!(!subject_matches_filter(b"foo", b"foo.*"));
        assert!(!subject_matches_filter(b"foo.bar.baz", b"foo.*"));
        assert!(subject_matches_filter(b"a.b.c", b"*.b.*"));
        assert!(!subject_matches_filter(b"a.x.c", b"*.b.*"));
    }

    #[test]
    fn gt_wildcard_needs_at_least_one_token() {
        assert!(subject_matches_filter(b"foo.bar", b"foo.>"));
        assert!(subject_matches_filter(b"foo.bar.baz", b"foo.>"));
        assert!(!subject_matches_filter(b"foo", b"foo.>"));
        assert!(subject_matches_filter(b"foo", b">"));
        assert!(subject_matches_filter(b"$JS.API.INFO", b">"));
    }

    #[test]
    fn literal_filters_match_only_themselves() {
        assert!(subject_matches_filter(b"foo.bar", b"foo.bar"));
        assert!(!subject_matches_filter(b"foo.bar", b"foo.baz"));
        assert!(!subject_matches_filter(b"foo.bar", b"foo"));
        assert!(!subject_matches_filter(b"Foo.bar", b"foo.bar"));
        assert!(!subject_matches_filter(b"foo*", b"foo.*"));
    }

    #[test]
    fn published_wildcard_tokens_are_matched_literally() {
        assert!(subject_matches_filter(b"foo.>", b">"));
        assert!(subject_matches_filter(b"foo.>", b"foo.*"));
        assert!(subject_matches_filter(b"foo.>", b"foo.>"));
        assert!(!subject_matches_filter(b"foo.>", b"foo.bar"));
        assert!(subject_matches_filter(b"foo.*", b"foo.*"));
        assert!(!subject_matches_filter(b"foo.*", b"foo.bar"));
        assert!(subject_matches_filter(
            b"$JS.API.CONSUMER.CREATE.PY.pyd.py.>",
            b"$JS.API.CONSUMER.CREATE.*.>"
        ));
    }

    #[test]
    fn malformed_published_subjects_match_nothing() {
        for bad in [&b""[..], b"foo..bar", b".foo", b"foo.", b"."] {
            assert!(!subject_matches_filter(bad, b">"), "{bad:?}");
            assert!(!subject_matches_filter(bad, b"*.>"), "{bad:?}");
        }
    }

    #[test]
    fn routable_means_no_empty_token_at_any_offset() {
        // Exercise the word-at-a-time scan at every alignment.
        for len in 1..30usize {
            let base: Vec<u8> = (0..len)
                .map(|i| if i % 3 == 2 { b'.' } else { b'x' })
                .collect();
            let expected =
                |s: &[u8]| !s.is_empty() && s.split(|&b| b == b'.').all(|t| !t.is_empty());
            assert_eq!(is_routable(&base), expected(&base), "{base:?}");
            for at in 0..len {
                let mut v = base.clone();
                if let Some(b) = v.get_mut(at) {
                    *b = b'.';
                }
                assert_eq!(is_routable(&v), expected(&v), "{v:?}");
            }
        }
        assert!(!is_routable(b""));
        assert!(is_routable(b"\x80\xae.\xff"));
    }

    #[test]
    fn invalid_filters_match_nothing() {
        assert!(!subject_matches_filter(b"foo.bar", b"foo..bar"));
        assert!(!subject_matches_filter(b"foo.bar", b">.bar"));
        assert!(!subject_matches_filter(b"foo.bar", b""));
        assert!(!subject_matches_filter(b"foo bar", b"foo bar"));
    }

    #[test]
    fn subset_treats_wildcards_as_token_sets() {
        assert!(filter_is_subset_of(b"foo.*", b"foo.*"));
        assert!(filter_is_subset_of(b"foo.*", b"foo.>"));
        assert!(filter_is_subset_of(b"foo.*", b">"));
        assert!(!filter_is_subset_of(b"foo.*", b"foo.bar"));
        assert!(filter_is_subset_of(b"foo.>", b">"));
        assert!(filter_is_subset_of(b"foo.>", b"foo.>"));
        assert!(!filter_is_subset_of(b"foo.>", b"foo.*"));
        assert!(filter_is_subset_of(b"foo.bar", b"foo.*"));
        assert!(filter_is_subset_of(b"foo.bar", b"*.bar"));
        assert!(!filter_is_subset_of(b"foo", b"foo.>"));
        assert!(!filter_is_subset_of(b">", b"foo.>"));
        assert!(filter_is_subset_of(b"a.*.>", b"*.>"));
        assert!(!filter_is_subset_of(b"a.>", b"a.*.>"));
    }

    #[test]
    fn subset_is_false_for_invalid_filters() {
        assert!(!filter_is_subset_of(b"foo..bar", b">"));
        assert!(!filter_is_subset_of(b"foo", b""));
    }

    #[test]
    fn overlap_needs_a_common_subject() {
        assert!(filters_overlap(b"foo.*", b"*.bar"));
        assert!(filters_overlap(b"foo.>", b"*.bar.baz"));
        assert!(filters_overlap(b">", b"a"));
        assert!(!filters_overlap(b"foo.*", b"foo"));
        assert!(!filters_overlap(b"foo.>", b"foo"));
        assert!(!filters_overlap(b"foo.*", b"bar.*"));
        assert!(!filters_overlap(b"foo.*", b"foo.*.*"));
        assert!(filters_overlap(b"foo.*.>", b"foo.a.b"));
        assert!(!filters_overlap(b"foo", b"foo..x"));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        /// Filter tokens drawn from a small alphabet so that collisions are common.
        fn filter_strategy() -> impl Strategy<Value = Vec<u8>> {
            (
                prop::collection::vec(prop::sample::select(vec!["a", "b", "*"]), 0..3),
                prop::sample::select(vec!["a", "b", "*", ">"]),
            )
                .prop_map(|(head, last)| {
                    let mut tokens = head;
                    tokens.push(last);
                    tokens.join(".").into_bytes()
                })
        }

        /// Every published subject of 1..=4 tokens over `{a, b, c}`: `c` stands for any token
        /// the filters don't name, and 4 tokens exceed the longest filter, so two filters that
        /// differ on some subject differ on one of these.
        fn universe() -> Vec<Vec<u8>> {
            let mut all: Vec<Vec<u8>> = Vec::new();
            let mut layer: Vec<Vec<u8>> = vec![Vec::new()];
            for _ in 0..4 {
                let mut next = Vec::new();
                for prefix in &layer {
                    for t in [b'a', b'b', b'c'] {
                        let mut s = prefix.clone();
                        if !s.is_empty() {
                            s.push(b'.');
                        }
                        s.push(t);
                        next.push(s);
                    }
                }
                all.extend(next.iter().cloned());
                layer = next;
            }
            all
        }

        proptest! {
            #[test]
            fn subset_agrees_with_enumeration(a in filter_strategy(), b in filter_strategy()) {
                let brute = universe()
                    .iter()
                    .all(|s| !subject_matches_filter(s, &a) || subject_matches_filter(s, &b));
                prop_assert_eq!(filter_is_subset_of(&a, &b), brute);
            }

            #[test]
            fn overlap_agrees_with_enumeration(a in filter_strategy(), b in filter_strategy()) {
                let brute = universe()
                    .iter()
                    .any(|s| subject_matches_filter(s, &a) && subject_matches_filter(s, &b));
                prop_assert_eq!(filters_overlap(&a, &b), brute);
                prop_assert_eq!(filters_overlap(&b, &a), brute);
            }

            #[test]
            fn a_filter_matches_itself_when_published(f in filter_strategy()) {
                prop_assert!(subject_matches_filter(&f, &f));
                prop_assert!(filter_is_subset_of(&f, &f));
                prop_assert!(filters_overlap(&f, &f));
            }
        }
    }
}
