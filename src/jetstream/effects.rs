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
        }
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
            self.list.push(Effect::Deliver {
                to: to.to_owned(),
                subject: subject.to_owned(),
                reply: reply.map(str::to_owned),
                headers: headers.cloned(),
                payload: payload.clone(),
            });
        }
        bound
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
