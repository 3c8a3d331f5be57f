//! `sealctl consumer`.

use super::ConnArgs;
use clap::{Args, Subcommand};

/// `sealctl consumer ...`.
#[derive(Debug, Clone, Args)]
pub struct ConsumerArgs {
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub cmd: ConsumerCmd,
}

/// Consumer configuration flags for `consumer add`.
#[derive(Debug, Clone, Default, Args)]
pub struct ConsumerConfigArgs {
    /// Durable name (same as the NAME argument; either may be given).
    #[arg(long)]
    pub durable: Option<String>,
    /// A pull consumer (the default).
    #[arg(long, conflicts_with = "deliver")]
    pub pull: bool,
    /// A push consumer delivering to this subject.
    #[arg(long, alias = "target")]
    pub deliver: Option<String>,
    /// Queue group for a push consumer's subscribers.
    #[arg(long, requires = "deliver")]
    pub deliver_group: Option<String>,
    /// `explicit` (default), `all` or `none`.
    #[arg(long, alias = "ack-policy")]
    pub ack: Option<String>,
    /// Redeliver unacknowledged messages after this long, e.g. `30s`.
    #[arg(long)]
    pub ack_wait: Option<String>,
    /// Deliveries per message before giving up (`-1` unlimited).
    #[arg(long, allow_hyphen_values = true)]
    pub max_deliver: Option<i64>,
    /// Only messages on this subject.
    #[arg(long)]
    pub filter: Option<String>,
    /// `all`, `last`, `new`, `last_per_subject`, `by_start_sequence` (with `--start-seq`).
    #[arg(long)]
    pub deliver_policy: Option<String>,
    /// Start at this stream sequence (implies `--deliver-policy by_start_sequence`).
    #[arg(long)]
    pub start_seq: Option<u64>,
    /// Redelivery delays, e.g. `1s,5s` (max deliver must exceed their count).
    #[arg(long, value_delimiter = ',')]
    pub backoff: Vec<String>,
    /// Unacknowledged messages allowed in flight.
    #[arg(long, allow_hyphen_values = true)]
    pub max_ack_pending: Option<i64>,
    /// Description.
    #[arg(long)]
    pub description: Option<String>,
    /// Accept defaults for everything not given (sealctl never prompts; kept for scripts).
    #[arg(long)]
    pub defaults: bool,
    /// Start from this JSON consumer configuration; flags override it.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
}

/// `sealctl consumer ...` commands.
#[derive(Debug, Clone, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process; boxing would only complicate the clap derive"
)]
pub enum ConsumerCmd {
    /// Create a durable consumer.
    #[command(alias = "create", alias = "new")]
    Add {
        /// Stream name.
        stream: String,
        /// Consumer name (or `--durable`).
        name: Option<String>,
        /// Configuration.
        #[command(flatten)]
        cfg: ConsumerConfigArgs,
    },
    /// Configuration and delivery state of a consumer.
    Info {
        /// Stream name.
        stream: String,
        /// Consumer name.
        name: String,
    },
    /// List a stream's consumers.
    #[command(alias = "list")]
    Ls {
        /// Stream name.
        stream: String,
    },
    /// Delete a consumer.
    #[command(alias = "delete", alias = "del")]
    Rm {
        /// Stream name.
        stream: String,
        /// Consumer name.
        name: String,
        /// Accepted for compatibility (sealctl never prompts).
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// Fetch messages from a pull consumer, print and acknowledge them.
    Next {
        /// Stream name.
        stream: String,
        /// Consumer name.
        name: String,
        /// How many messages.
        #[arg(long, short = 'c', default_value_t = 1)]
        count: u64,
        /// Do not acknowledge them.
        #[arg(long)]
        no_ack: bool,
    },
}
