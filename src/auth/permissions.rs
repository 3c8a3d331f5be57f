//! Publish and subscribe permissions, from the config file or a user JWT.
//!
//! Rules (client-protocol §10): deny wins over allow; an absent or empty allow list allows
//! everything. A PUB subject is matched against the patterns as a subject. A SUB subject is
//! matched with its own wildcard tokens treated as literal tokens, so `foo.*` is allowed by
//! `foo.*` or `foo.>` but not by `foo.bar`. A subscription that is allowed but merely overlaps a
//! deny pattern (`foo.>` allowed, `foo.x` denied) is kept, and [`Permissions::delivery_denied`]
//! filters the denied subjects at delivery. Subscribe entries may name a queue (`"subject
//! queue"`), limiting that entry to the queue group.

use std::time::Duration;

use crate::subject::{filters_overlap, subject_matches_filter};

/// One pattern, optionally limited to a queue group (subscribe entries only).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    subject: String,
    queue: Option<String>,
}

impl Pattern {
    fn parse(entry: &str) -> Self {
        let mut parts = entry.split_whitespace();
        let subject = parts.next().unwrap_or("").to_owned();
        let queue = parts.next().map(str::to_owned);
        Pattern { subject, queue }
    }

    fn covers(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        let queue_ok = match (&self.queue, queue) {
            (None, _) => true,
            (Some(q), Some(given)) => q.as_bytes() == given,
            (Some(_), None) => false,
        };
        queue_ok && subject_matches_filter(subject, self.subject.as_bytes())
    }
}

/// Allow and deny lists for one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
}

impl Rules {
    /// Rules from allow and deny entries (`"subject"` or `"subject queue"`).
    pub fn new(allow: &[String], deny: &[String]) -> Self {
        Rules {
            allow: allow.iter().map(|e| Pattern::parse(e)).collect(),
            deny: deny.iter().map(|e| Pattern::parse(e)).collect(),
        }
    }

    fn permits(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        let allowed = self.allow.is_empty() || self.allow.iter().any(|p| p.covers(subject, queue));
        allowed && !self.deny.iter().any(|p| p.covers(subject, queue))
    }
}

/// A user's permissions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    /// Publish rules; `None` = everything.
    pub publish: Option<Rules>,
    /// Subscribe rules; `None` = everything.
    pub subscribe: Option<Rules>,
    /// Replies allowed to received requests: (max per request, window).
    pub responses: Option<(u32, Duration)>,
}

impl Permissions {
    /// Whether a PUB to `subject` is allowed.
    pub fn may_publish(&self, subject: &[u8]) -> bool {
        self.publish
            .as_ref()
            .is_none_or(|r| r.permits(subject, None))
    }

    /// Whether a SUB to `subject` (its wildcards taken literally) in `queue` is allowed.
    pub fn may_subscribe(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        self.subscribe
            .as_ref()
            .is_none_or(|r| r.permits(subject, queue))
    }

    /// Whether an allowed subscription on `filter` overlaps a deny pattern, so deliveries need
    /// [`Permissions::delivery_denied`].
    pub fn needs_delivery_filter(&self, filter: &[u8]) -> bool {
        self.subscribe.as_ref().is_some_and(|r| {
            r.deny
                .iter()
                .any(|p| filters_overlap(filter, p.subject.as_bytes()))
        })
    }

    /// Whether a message on `subject` must not be delivered to this user's subscriptions.
    pub fn delivery_denied(&self, subject: &[u8]) -> bool {
        self.subscribe.as_ref().is_some_and(|r| {
            r.deny
                .iter()
                .any(|p| subject_matches_filter(subject, p.subject.as_bytes()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn deny_wins_and_empty_allow_allows_all() {
        let p = Permissions {
            publish: Some(Rules::new(&s(&["foo.>", "_INBOX.>"]), &s(&["foo.secret"]))),
            subscribe: None,
            responses: None,
        };
        assert!(p.may_publish(b"foo.bar"));
        assert!(!p.may_publish(b"foo.secret"));
        assert!(!p.may_publish(b"bar"));
        assert!(p.may_subscribe(b"anything.>", None));
        let open = Permissions {
            publish: Some(Rules::new(&[], &s(&["x"]))),
            ..Default::default()
        };
        assert!(open.may_publish(b"y") && !open.may_publish(b"x"));
    }

    #[test]
    fn subscription_wildcards_are_taken_literally() {
        let p = Permissions {
            subscribe: Some(Rules::new(&s(&["foo.*"]), &[])),
            ..Default::default()
        };
        assert!(p.may_subscribe(b"foo.*", None));
        assert!(p.may_subscribe(b"foo.bar", None));
        // As in the reference: the SUB's `>` is a literal token here, which `*` matches.
        assert!(p.may_subscribe(b"foo.>", None));
        assert!(!p.may_subscribe(b"foo.a.b", None));
        let q = Permissions {
            subscribe: Some(Rules::new(&s(&["foo.bar"]), &[])),
            ..Default::default()
        };
        assert!(!q.may_subscribe(b"foo.*", None));
    }

    #[test]
    fn queue_entries_limit_to_their_group() {
        let p = Permissions {
            subscribe: Some(Rules::new(&s(&["work.* workers"]), &[])),
            ..Default::default()
        };
        assert!(p.may_subscribe(b"work.a", Some(b"workers")));
        assert!(!p.may_subscribe(b"work.a", None));
        assert!(!p.may_subscribe(b"work.a", Some(b"other")));
    }

    #[test]
    fn overlapping_deny_filters_deliveries() {
        let p = Permissions {
            subscribe: Some(Rules::new(&s(&["foo.>"]), &s(&["foo.x"]))),
            ..Default::default()
        };
        assert!(p.may_subscribe(b"foo.>", None));
        assert!(p.needs_delivery_filter(b"foo.>"));
        assert!(p.delivery_denied(b"foo.x"));
        assert!(!p.delivery_denied(b"foo.y"));
        assert!(!p.may_subscribe(b"foo.x", None));
    }
}
