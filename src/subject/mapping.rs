//! Import mappings: a subject published in one account, matching `from`, re-expressed under
//! `to` in another (`x.*` → `svc.*` turns `x.echo` into `svc.echo`).
//!
//! The rule that keeps an import inside its export: `from` and `to` carry the same wildcards
//! in the same order — as many `*`, and `>` either last in both or in neither. A `*` captures
//! exactly one token and fills exactly one `*`; a `>` captures the rest and fills a `>`. So a
//! mapping `x.>` → `svc.*` is refused when it is configured ([`validate_mapping`]), and
//! [`transform`] itself never lets a multi-token capture fill a one-token slot, even if a
//! mapping slipped past validation. Token references (`$1`, `{{wildcard(1)}}`) are not
//! supported and refused.

use super::subject::{is_valid_subscribe_subject, subject_matches_filter};

/// Why a mapping was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// One side is not a valid subject.
    #[error("invalid subject")]
    InvalidSubject,
    /// The wildcards differ (count, kind or order).
    #[error("the wildcards of {from:?} and {to:?} do not correspond")]
    Wildcards {
        /// The mapped-from pattern.
        from: String,
        /// The mapped-to pattern.
        to: String,
    },
    /// A token reference or a mapping function.
    #[error("token references and mapping functions are not supported in {0:?}")]
    Function(String),
}

fn wildcards(p: &str) -> Vec<&str> {
    p.split('.').filter(|t| *t == "*" || *t == ">").collect()
}

/// Checks that `from` can be mapped onto `to` without a capture spilling over a slot.
///
/// # Errors
/// [`MappingError`] naming what is wrong.
pub fn validate_mapping(from: &str, to: &str) -> Result<(), MappingError> {
    for p in [from, to] {
        // `$1`-style references and `{{...}}` functions; a literal token such as `$KV` is a
        // plain subject token.
        let reference = |t: &str| {
            t.strip_prefix('$')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        if p.split('.').any(|t| reference(t) || t.contains("{{")) {
            return Err(MappingError::Function(p.to_owned()));
        }
        if !is_valid_subscribe_subject(p.as_bytes()) {
            return Err(MappingError::InvalidSubject);
        }
    }
    if wildcards(from) != wildcards(to) {
        // nats-server words the `>`-versus-`*` case as an invalid subject.
        let gt = |p: &str| p.ends_with(".>") || p == ">";
        if gt(from) != gt(to) {
            return Err(MappingError::InvalidSubject);
        }
        return Err(MappingError::Wildcards {
            from: from.to_owned(),
            to: to.to_owned(),
        });
    }
    Ok(())
}

/// Maps `subject` (matching `from`) onto `to`. `None` when it does not match, or when the
/// wildcards of `from` and `to` do not correspond (see the module docs).
pub fn transform(subject: &[u8], from: &str, to: &str) -> Option<Vec<u8>> {
    if !subject_matches_filter(subject, from.as_bytes()) {
        return None;
    }
    let mut captured: Vec<(bool, Vec<u8>)> = Vec::new();
    let mut tokens = subject.split(|b| *b == b'.');
    for pt in from.split('.') {
        match pt {
            "*" => captured.push((false, tokens.next()?.to_vec())),
            ">" => {
                let rest: Vec<&[u8]> = tokens.by_ref().collect();
                captured.push((true, rest.join(&b'.')));
            }
            _ => {
                tokens.next()?;
            }
        }
    }
    let mut caps = captured.into_iter();
    let mut out: Vec<Vec<u8>> = Vec::new();
    for pt in to.split('.') {
        match pt {
            "*" | ">" => {
                let (rest, tok) = caps.next()?;
                if rest != (pt == ">") {
                    return None;
                }
                out.push(tok);
            }
            lit => out.push(lit.as_bytes().to_vec()),
        }
    }
    if caps.next().is_some() {
        return None;
    }
    Some(out.join(&b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_carry_across_mappings() {
        assert_eq!(
            transform(b"asvc.a.b", "asvc.>", "svc.>").unwrap(),
            b"svc.a.b"
        );
        assert_eq!(transform(b"x.1.y", "x.*.y", "z.*").unwrap(), b"z.1");
        assert_eq!(
            transform(b"svc.echo", "svc.echo", "svc.echo").unwrap(),
            b"svc.echo"
        );
        assert!(transform(b"other", "asvc.>", "svc.>").is_none());
    }

    #[test]
    fn a_rest_capture_never_fills_a_single_token_slot() {
        assert_eq!(transform(b"x.admin.drop", "x.>", "svc.*"), None);
        assert_eq!(transform(b"x.a", "x.*", "svc.>"), None);
        assert_eq!(transform(b"x.a.b", "x.*.*", "svc.*"), None);
        assert_eq!(transform(b"x.a", "x.*", "svc.*.*"), None);
    }

    #[test]
    fn references_are_refused_and_dollar_literals_are_not() {
        assert!(matches!(
            validate_mapping("x.*", "svc.$1"),
            Err(MappingError::Function(_))
        ));
        assert!(matches!(
            validate_mapping("x.*", "svc.{{wildcard(1)}}"),
            Err(MappingError::Function(_))
        ));
        assert_eq!(validate_mapping("A.>", "$KV.test.>"), Ok(()));
        assert_eq!(
            transform(b"A.k", "A.>", "$KV.test.>").unwrap(),
            b"$KV.test.k"
        );
    }

    #[test]
    fn mappings_must_keep_their_wildcards() {
        assert_eq!(validate_mapping("x.*", "svc.*"), Ok(()));
        assert_eq!(validate_mapping("x.>", "svc.>"), Ok(()));
        assert_eq!(validate_mapping("x.*.y.>", "svc.*.>"), Ok(()));
        assert_eq!(
            validate_mapping("x.>", "svc.*"),
            Err(MappingError::InvalidSubject)
        );
        assert!(matches!(
            validate_mapping("x.*.*", "svc.*"),
            Err(MappingError::Wildcards { .. })
        ));
        assert!(matches!(
            validate_mapping("x", "svc.*"),
            Err(MappingError::Wildcards { .. })
        ));
        assert!(matches!(
            validate_mapping("x.$1", "svc.*"),
            Err(MappingError::Function(_))
        ));
        assert_eq!(
            validate_mapping("x..y", "svc"),
            Err(MappingError::InvalidSubject)
        );
    }
}
