//! Stream subject transforms (ADR-36): a stream's `subject_transform` and the
//! `subject_transforms` of its mirror or sources rewrite the subject a message is stored under.
//!
//! Why not [`mapping`](super::mapping): import mappings keep an export's wildcards and refuse
//! token references, because an import must stay inside what was exported. A stream transform
//! only renames what one stream stores, and the clients write references there (`$1`,
//! `{{wildcard(1)}}`), so this one accepts them. Supported destination tokens: literals,
//! `$N` and `{{wildcard(N)}}` (the N-th `*` of the source pattern, from 1), a bare `*` (the
//! next `*` of the source in order) and a last `>` (what the source's `>` captured). Other
//! mapping functions (`partition`, `split`, ...) are refused, not guessed at.

use super::subject::{is_valid_subscribe_subject, subject_matches_filter};

/// Why a transform was refused; the text is what nats-server puts after `stream transform: `
/// or `source transform: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransformError {
    /// A pattern that is not a valid subject, or a destination `>` the source does not have.
    #[error("invalid subject")]
    InvalidSubject,
    /// `$N` or `{{wildcard(N)}}` beyond the source's `*` tokens.
    #[error("invalid mapping destination: wildcard index out of range in {token}: [{index}]")]
    IndexOutOfRange {
        /// The destination token.
        token: String,
        /// The index it names.
        index: usize,
    },
    /// A mapping function this server does not implement.
    #[error("invalid mapping destination: function {0} is not supported")]
    Unsupported(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    /// The `*` capture at this index (0-based).
    Wildcard(usize),
    /// What the source's `>` captured.
    Rest,
}

/// A validated transform from `src` to `dest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    src: String,
    dest: Vec<Token>,
}

/// `$N` or `{{wildcard(N)}}` / `{{ wildcard( N ) }}` → `Some(Ok(N))`; another `{{...}}` →
/// `Some(Err(name))`; a plain token → `None`.
fn reference(token: &str) -> Option<Result<usize, String>> {
    if let Some(n) = token.strip_prefix('$') {
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
            return Some(n.parse().map_err(|_| token.to_owned()));
        }
        return None;
    }
    let inner = token.strip_prefix("{{")?.strip_suffix("}}")?.trim();
    let Some(args) = inner
        .strip_prefix("wildcard")
        .map(str::trim_start)
        .and_then(|a| a.strip_prefix('('))
        .and_then(|a| a.strip_suffix(')'))
    else {
        let name = inner.split('(').next().unwrap_or(inner).trim();
        return Some(Err(name.to_owned()));
    };
    Some(args.trim().parse().map_err(|_| token.to_owned()))
}

impl Transform {
    /// Validates `src` → `dest`. An empty `src` means `>`.
    ///
    /// # Errors
    /// [`TransformError`] naming what is wrong.
    pub fn new(src: &str, dest: &str) -> Result<Self, TransformError> {
        let src = if src.is_empty() { ">" } else { src };
        if !is_valid_subscribe_subject(src.as_bytes()) || dest.is_empty() {
            return Err(TransformError::InvalidSubject);
        }
        let stars = src.split('.').filter(|t| *t == "*").count();
        let has_rest = src == ">" || src.ends_with(".>");
        let parts: Vec<&str> = dest.split('.').collect();
        let mut next_star = 0usize;
        let mut out = Vec::with_capacity(parts.len());
        for (i, t) in parts.iter().enumerate() {
            let tok = match *t {
                "" => return Err(TransformError::InvalidSubject),
                ">" => {
                    if !has_rest || i + 1 != parts.len() {
                        return Err(TransformError::InvalidSubject);
                    }
                    Token::Rest
                }
                "*" => {
                    if next_star >= stars {
                        return Err(TransformError::InvalidSubject);
                    }
                    next_star += 1;
                    Token::Wildcard(next_star - 1)
                }
                lit => match reference(lit) {
                    Some(Ok(n)) if (1..=stars).contains(&n) => Token::Wildcard(n - 1),
                    Some(Ok(n)) => {
                        return Err(TransformError::IndexOutOfRange {
                            token: lit.to_owned(),
                            index: n,
                        })
                    }
                    Some(Err(name)) => return Err(TransformError::Unsupported(name)),
                    None => {
                        if lit.chars().any(char::is_whitespace) || lit.contains(['*', '>']) {
                            return Err(TransformError::InvalidSubject);
                        }
                        Token::Literal(lit.to_owned())
                    }
                },
            };
            out.push(tok);
        }
        Ok(Transform {
            src: src.to_owned(),
            dest: out,
        })
    }

    /// The source pattern (what the transform applies to).
    pub fn src(&self) -> &str {
        &self.src
    }

    /// `subject` rewritten, or `None` when it does not match the source pattern.
    pub fn apply(&self, subject: &str) -> Option<String> {
        if !subject_matches_filter(subject.as_bytes(), self.src.as_bytes()) {
            return None;
        }
        let mut stars: Vec<&str> = Vec::new();
        let mut rest = "";
        let mut tokens = subject.split('.');
        let mut consumed = 0usize;
        for pt in self.src.split('.') {
            match pt {
                ">" => {
                    rest = subject.get(consumed..).unwrap_or("");
                    break;
                }
                _ => {
                    let t = tokens.next()?;
                    consumed += t.len() + 1;
                    if pt == "*" {
                        stars.push(t);
                    }
                }
            }
        }
        let mut out: Vec<&str> = Vec::with_capacity(self.dest.len());
        for t in &self.dest {
            out.push(match t {
                Token::Literal(l) => l,
                Token::Wildcard(i) => stars.get(*i)?,
                Token::Rest => rest,
            });
        }
        Some(out.join("."))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(src: &str, dest: &str, subject: &str) -> Option<String> {
        Transform::new(src, dest).unwrap().apply(subject)
    }

    #[test]
    fn references_wildcards_and_the_rest_fill_the_destination() {
        assert_eq!(t("a.*", "b.$1", "a.x").unwrap(), "b.x");
        assert_eq!(t("o.*", "t.{{wildcard(1)}}", "o.0").unwrap(), "t.0");
        assert_eq!(
            t("o.*.*", "t.{{ wildcard( 2 ) }}.$1", "o.a.b").unwrap(),
            "t.b.a"
        );
        assert_eq!(
            t("data.>", "transformed.>", "data.x.y").unwrap(),
            "transformed.x.y"
        );
        assert_eq!(t(">", "transformed.>", "test").unwrap(), "transformed.test");
        assert_eq!(t("", "p.>", "q.r").unwrap(), "p.q.r");
        assert_eq!(t("foo", "bar", "foo").unwrap(), "bar");
        assert_eq!(t("x.*.y", "z.*", "x.1.y").unwrap(), "z.1");
        assert_eq!(t("foo", "bar", "food"), None);
        assert_eq!(t("a.*", "b.$1", "a.x.y"), None);
    }

    #[test]
    fn bad_destinations_are_refused_with_nats_server_texts() {
        let e = Transform::new("a.*", "b.$2").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid mapping destination: wildcard index out of range in $2: [2]"
        );
        assert_eq!(
            Transform::new("o.*", "z.>").unwrap_err(),
            TransformError::InvalidSubject
        );
        assert_eq!(
            Transform::new("a..b", "c").unwrap_err(),
            TransformError::InvalidSubject
        );
        assert!(matches!(
            Transform::new("a.*", "b.{{partition(3,1)}}").unwrap_err(),
            TransformError::Unsupported(n) if n == "partition"
        ));
        assert_eq!(
            Transform::new("a", "b.*").unwrap_err(),
            TransformError::InvalidSubject
        );
    }
}
