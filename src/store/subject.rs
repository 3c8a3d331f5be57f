//! A tiny NATS subject-filter matcher for store lookups (`*` one token, `>` the rest).
//!
//! The full subject rules live in sealstream's `subject` module; the store keeps this local
//! copy so it depends on nothing but `crypto`. An empty filter matches everything.

/// A parsed filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Filter<'a> {
    /// Matches every subject (`""` or `">"`).
    All,
    /// A literal subject.
    Literal(&'a str),
    /// Has wildcards.
    Wild(&'a str),
}

impl<'a> Filter<'a> {
    pub(crate) fn parse(filter: &'a str) -> Self {
        if filter.is_empty() || filter == ">" {
            Filter::All
        } else if filter.split('.').any(|t| t == "*" || t == ">") {
            Filter::Wild(filter)
        } else {
            Filter::Literal(filter)
        }
    }

    pub(crate) fn matches(&self, subject: &str) -> bool {
        match self {
            Filter::All => true,
            Filter::Literal(l) => *l == subject,
            Filter::Wild(w) => wild_matches(w, subject),
        }
    }
}

fn wild_matches(filter: &str, subject: &str) -> bool {
    let mut s = subject.split('.');
    let mut f = filter.split('.').peekable();
    while let Some(ft) = f.next() {
        if ft == ">" {
            // `>` must be last and needs at least one token.
            return f.peek().is_none() && s.next().is_some_and(|t| !t.is_empty());
        }
        match s.next() {
            Some(st) if ft == "*" && !st.is_empty() => {}
            Some(st) if ft == st => {}
            _ => return false,
        }
    }
    s.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_like_nats() {
        let m = |f: &str, s: &str| Filter::parse(f).matches(s);
        assert!(m("", "a.b"));
        assert!(m(">", "a"));
        assert!(m("a.*", "a.b"));
        assert!(!m("a.*", "a.b.c"));
        assert!(m("a.>", "a.b.c"));
        assert!(!m("a.>", "a"));
        assert!(m("*.b", "a.b"));
        assert!(!m("a.b", "a.c"));
        assert!(m("a.b", "a.b"));
        assert!(!m("a.*.c", "a.b"));
    }
}
