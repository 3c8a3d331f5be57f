//! What the engine decides to say, as data: every pub-ack, delivery, status message and API
//! reply a command produces is an [`Effect`] in the command's [`Effects`], and the runtime
//! (`server::jetstream`) routes them once the engine has returned. The engine itself never
//! touches a router, a socket or a lock.
//!
//! One question about the outside world shapes the decisions: whether anybody listens on a
//! subject (a push consumer with nobody bound stops delivering and waits; a pull request whose
//! requester went away is dropped, its message kept for the next). The engine asks it through
//! [`Interest`], an input like the clock — the runtime answers from its subscription tree,
//! tests answer what the case needs, and a replica applying a committed command can answer for
//! the leader's view.

use bytes::Bytes;

/// One thing to say to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// A message to the subscribers of `to` inside the stream's account, shown as `subject`
    /// in the `MSG` line: deliveries (with their `$JS.ACK` reply) and status messages.
    Deliver {
        /// Where it is routed.
        to: String,
        /// The subject the subscriber sees.
        subject: String,
        /// The reply subject (a delivery's ack subject).
        reply: Option<String>,
        /// The header block, when there is one.
        headers: Option<Bytes>,
        /// The payload.
        payload: Bytes,
    },
    /// A reply (pub-ack, API answer), routed as an ordinary publish so that it reaches a
    /// requester behind a service import too.
    Reply {
        /// The requester's reply subject.
        to: String,
        /// The JSON body.
        payload: Bytes,
    },
    /// A consumer was created, or its config or pause state changed: the runtime persists
    /// its config before any later effect (the API reply among them) is carried out.
    PersistConsumer {
        /// The consumer.
        name: String,
    },
    /// A consumer was deleted (by the API or for inactivity): its metadata is erased.
    ForgetConsumer {
        /// The consumer.
        name: String,
    },
    /// The stream's config changed: the runtime persists it.
    PersistStreamConfig,
}

/// Whether anybody listens: answered by the runtime from its subscriptions.
pub trait Interest {
    /// Whether a message to `subject` would reach at least one subscription now.
    fn has_interest(&mut self, subject: &str) -> bool;
}

/// Everybody listens everywhere: for calls whose decisions never depend on interest (a read's
/// answer to its requester), and for tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct Everyone;

impl Interest for Everyone {
    fn has_interest(&mut self, _subject: &str) -> bool {
        true
    }
}

/// The effects of one command (or one round of commands), in the order they were decided.
pub struct Effects {
    list: Vec<Effect>,
    interest: Box<dyn Interest + Send>,
    /// Pull requesters are taken to listen whatever the subscriptions say (see
    /// [`Effects::assume_requesters`]).
    requesters_listen: bool,
    /// Push deliveries follow the consumer's recorded interest (see
    /// [`Effects::push_by_record`]).
    push_by_record: bool,
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Effects").field("list", &self.list).finish()
    }
}

impl Effects {
    /// An empty list whose interest questions go to `interest`.
    pub fn new(interest: Box<dyn Interest + Send>) -> Self {
        Effects {
            list: Vec::new(),
            interest,
            requesters_listen: false,
            push_by_record: false,
        }
    }

    /// While set, [`Effects::send_push`] goes by what the consumer recorded instead of the
    /// subscriptions: a replicated round's push deliveries are decided alike on every
    /// replica — by the answers the round carries (`Stream::take_push_interest`), never by
    /// each replica's own server — and each replica's server delivers to its own
    /// subscribers, if any.
    pub fn push_by_record(&mut self, on: bool) {
        self.push_by_record = on;
    }

    /// [`Effects::send`] to a push consumer's deliver subject, which it `recorded` as
    /// listened to or not.
    pub fn send_push(
        &mut self,
        recorded: bool,
        to: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> bool {
        let decided = self.push_by_record.then_some(recorded);
        self.send_decided(decided, to, subject, reply, headers, payload)
    }

    /// [`Effects::status`] to a push consumer's deliver subject (see [`Effects::send_push`]).
    pub fn status_push(&mut self, recorded: bool, to: &str, headers: Bytes) -> bool {
        self.send_push(recorded, to, to, None, Some(&headers), &Bytes::new())
    }

    /// Whether a message to `subject` would reach a subscriber now, as the runtime sees it.
    pub fn has_interest(&mut self, subject: &str) -> bool {
        self.interest.has_interest(subject)
    }

    /// While set, a pull request's inbox counts as listened to ([`Effects::send_requester`],
    /// [`Effects::status_requester`]): a replicated stream's replicas run each round alike, but
    /// each sees only its own server's view of interest — during a partition, or before
    /// interest propagated, one replica would drop a request whose requester it cannot see
    /// while another serves it, and their consumers would differ from then on (found by the
    /// fault battery: acknowledged messages delivered again after a leader change). A
    /// requester that really went away gets its messages redelivered after `ack_wait`, as
    /// any unacknowledged delivery.
    pub fn assume_requesters(&mut self, on: bool) {
        self.requesters_listen = on;
    }

    /// [`Effects::send`] to a pull request's inbox.
    pub fn send_requester(
        &mut self,
        to: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> bool {
        let decided = self.requesters_listen.then_some(true);
        self.send_decided(decided, to, subject, reply, headers, payload)
    }

    /// [`Effects::send`], unless whether `to` is listened to was `decided` already.
    fn send_decided(
        &mut self,
        decided: Option<bool>,
        to: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> bool {
        match decided {
            Some(listened) => {
                if listened {
                    self.deliver(to, subject, reply, headers, payload);
                }
                listened
            }
            None => self.send(to, subject, reply, headers, payload),
        }
    }

    /// [`Effects::status`] to a pull request's inbox.
    pub fn status_requester(&mut self, to: &str, headers: Bytes) -> bool {
        self.send_requester(to, to, None, Some(&headers), &Bytes::new())
    }

    /// Delivers one message to the subscribers of `to`, showing `subject`. Returns whether
    /// anybody listens; when nobody does, nothing is recorded (it would reach nobody).
    pub fn send(
        &mut self,
        to: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) -> bool {
        let bound = self.interest.has_interest(to);
        if bound {
            self.deliver(to, subject, reply, headers, payload);
        }
        bound
    }

    fn deliver(
        &mut self,
        to: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&Bytes>,
        payload: &Bytes,
    ) {
        self.list.push(Effect::Deliver {
            to: to.to_owned(),
            subject: subject.to_owned(),
            reply: reply.map(str::to_owned),
            headers: headers.cloned(),
            payload: payload.clone(),
        });
    }

    /// A reply (pub-ack, API answer) to `to`.
    pub fn reply(&mut self, to: &str, payload: Bytes) {
        self.list.push(Effect::Reply {
            to: to.to_owned(),
            payload,
        });
    }

    /// Asks the runtime to persist consumer `name`'s config.
    pub fn persist_consumer(&mut self, name: &str) {
        self.list.push(Effect::PersistConsumer {
            name: name.to_owned(),
        });
    }

    /// Asks the runtime to erase deleted consumer `name`'s metadata.
    pub fn forget_consumer(&mut self, name: &str) {
        self.list.push(Effect::ForgetConsumer {
            name: name.to_owned(),
        });
    }

    /// Asks the runtime to persist the stream's config.
    pub fn persist_stream_config(&mut self) {
        self.list.push(Effect::PersistStreamConfig);
    }

    /// A header-only status message (`NATS/1.0 404 No Messages` etc.) to `to`. Returns
    /// whether anybody listens.
    pub fn status(&mut self, to: &str, headers: Bytes) -> bool {
        self.send(to, to, None, Some(&headers), &Bytes::new())
    }

    /// Everything decided so far, in order, leaving the list empty.
    pub fn take(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.list)
    }

    /// How many effects are waiting.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nobody listens anywhere (a replica that cannot see the requester).
    struct Nobody;

    impl Interest for Nobody {
        fn has_interest(&mut self, _subject: &str) -> bool {
            false
        }
    }

    #[test]
    fn a_replicated_round_serves_a_requester_it_cannot_see_and_a_lone_server_does_not() {
        let body = Bytes::from_static(b"m");
        let mut fx = Effects::new(Box::new(Nobody));
        assert!(!fx.send_requester("_INBOX.a", "s", Some("ack"), None, &body));
        assert!(fx.is_empty());
        fx.assume_requesters(true);
        assert!(fx.send_requester("_INBOX.a", "s", Some("ack"), None, &body));
        assert!(fx.status_requester("_INBOX.a", Bytes::from_static(b"NATS/1.0 100\r\n\r\n")));
        assert_eq!(fx.len(), 2);
        // Push deliver subjects keep asking the subscriptions.
        assert!(!fx.send("deliver.push", "s", Some("ack"), None, &body));
        assert_eq!(fx.len(), 2);
    }
}
