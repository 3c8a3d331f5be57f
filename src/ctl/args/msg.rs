//! `sealctl pub`, `sub`, `req` and `reply`: core messaging.

use super::ConnArgs;
use clap::Args;

/// `sealctl pub`.
#[derive(Debug, Clone, Args)]
pub struct PubArgs {
    /// Subject.
    pub subject: String,
    /// Body; `{{Count}}` and `{{TimeStamp}}` are replaced per message.
    #[arg(default_value = "")]
    pub body: String,
    /// Publish this many messages.
    #[arg(long, short = 'c', default_value_t = 1)]
    pub count: u64,
    /// A header `key:value` (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Publish to JetStream: wait for each PubAck and print its stream and sequence.
    #[arg(short = 'J', long)]
    pub jetstream: bool,
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sealctl sub`.
#[derive(Debug, Clone, Args)]
pub struct SubArgs {
    /// Subject (wildcards allowed).
    pub subject: String,
    /// Stop after this many messages.
    #[arg(long, short = 'c')]
    pub count: Option<u64>,
    /// Join this queue group (core NATS only).
    #[arg(long)]
    pub queue: Option<String>,
    /// Consume from this JetStream stream (found by subject when only `--durable` is given).
    #[arg(long)]
    pub stream: Option<String>,
    /// Durable consumer name: created if missing (pull, explicit acks), resumed otherwise.
    #[arg(long)]
    pub durable: Option<String>,
    /// Print only message bodies.
    #[arg(long)]
    pub raw: bool,
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sealctl req`.
#[derive(Debug, Clone, Args)]
pub struct ReqArgs {
    /// Subject.
    pub subject: String,
    /// Body.
    #[arg(default_value = "")]
    pub body: String,
    /// A header `key:value` (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Print only the reply body.
    #[arg(long)]
    pub raw: bool,
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sealctl reply`.
#[derive(Debug, Clone, Args)]
pub struct ReplyArgs {
    /// Subject.
    pub subject: String,
    /// Reply body; `{{Count}}`, `{{TimeStamp}}` and `{{Request}}` are replaced per reply.
    #[arg(default_value = "")]
    pub body: String,
    /// Stop after this many replies.
    #[arg(long, short = 'c')]
    pub count: Option<u64>,
    /// Join this queue group.
    #[arg(long)]
    pub queue: Option<String>,
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
}
