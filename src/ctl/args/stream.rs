//! `sealctl stream`.

use super::ConnArgs;
use clap::{Args, Subcommand};

/// `sealctl stream ...`.
#[derive(Debug, Clone, Args)]
pub struct StreamArgs {
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub cmd: StreamCmd,
}

/// Stream configuration flags for `stream add` and `stream edit`; unset flags keep the
/// server's default (add) or the current value (edit).
#[derive(Debug, Clone, Default, Args)]
pub struct StreamConfigArgs {
    /// Subjects the stream captures (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    pub subjects: Vec<String>,
    /// `file` or `memory`.
    #[arg(long)]
    pub storage: Option<String>,
    /// `limits`, `interest` or `workqueue`.
    #[arg(long)]
    pub retention: Option<String>,
    /// Message limit (`-1` unlimited; `1_000_000` accepted).
    #[arg(long, allow_hyphen_values = true)]
    pub max_msgs: Option<String>,
    /// Size limit, e.g. `1GB` (`-1` unlimited).
    #[arg(long, allow_hyphen_values = true)]
    pub max_bytes: Option<String>,
    /// Age limit, e.g. `72h`, `7d` (`0` forever).
    #[arg(long)]
    pub max_age: Option<String>,
    /// Largest message accepted, e.g. `1MB` (`-1` unlimited).
    #[arg(long, allow_hyphen_values = true)]
    pub max_msg_size: Option<String>,
    /// Messages kept per subject (`-1` unlimited).
    #[arg(long, allow_hyphen_values = true)]
    pub max_msgs_per_subject: Option<String>,
    /// What to do at a limit: `old` (drop oldest) or `new` (refuse).
    #[arg(long)]
    pub discard: Option<String>,
    /// Duplicate-detection window, e.g. `2m`.
    #[arg(long)]
    pub dupe_window: Option<String>,
    /// Replicas.
    #[arg(long)]
    pub replicas: Option<i64>,
    /// Honour `Nats-Rollup` headers.
    #[arg(long)]
    pub allow_rollup: bool,
    /// Refuse message deletes.
    #[arg(long)]
    pub deny_delete: bool,
    /// Refuse purges.
    #[arg(long)]
    pub deny_purge: bool,
    /// Enable direct gets (`$JS.API.DIRECT.GET`).
    #[arg(long)]
    pub allow_direct: bool,
    /// Description.
    #[arg(long)]
    pub description: Option<String>,
    /// Accept defaults for everything not given (sealctl never prompts; kept for scripts).
    #[arg(long)]
    pub defaults: bool,
    /// Start from this JSON stream configuration; flags override it.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
}

/// `sealctl stream ...` commands.
#[derive(Debug, Clone, Subcommand)]
pub enum StreamCmd {
    /// Create a stream.
    #[command(alias = "create", alias = "new")]
    Add {
        /// Stream name.
        name: String,
        /// Configuration.
        #[command(flatten)]
        cfg: StreamConfigArgs,
    },
    /// Change a stream's configuration.
    #[command(alias = "update")]
    Edit {
        /// Stream name.
        name: String,
        /// Configuration changes.
        #[command(flatten)]
        cfg: StreamConfigArgs,
    },
    /// Configuration, state and limit usage of a stream.
    Info {
        /// Stream name.
        name: String,
    },
    /// List streams.
    #[command(alias = "list")]
    Ls,
    /// Delete a stream and all its messages.
    #[command(alias = "delete", alias = "del")]
    Rm {
        /// Stream name.
        name: String,
        /// Accepted for compatibility (sealctl never prompts).
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// Remove messages from a stream.
    Purge {
        /// Stream name.
        name: String,
        /// Only messages on this subject.
        #[arg(long)]
        subject: Option<String>,
        /// Keep this many of the newest messages.
        #[arg(long)]
        keep: Option<u64>,
        /// Remove messages below this sequence.
        #[arg(long)]
        seq: Option<u64>,
        /// Accepted for compatibility (sealctl never prompts).
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// Print one message by sequence, or the last one on a subject.
    Get {
        /// Stream name.
        name: String,
        /// Sequence.
        #[arg(required_unless_present = "last_for")]
        seq: Option<u64>,
        /// The last message on this subject instead.
        #[arg(long, conflicts_with = "seq")]
        last_for: Option<String>,
    },
    /// Delete one message by sequence.
    Rmm {
        /// Stream name.
        name: String,
        /// Sequence.
        seq: u64,
        /// Accepted for compatibility (sealctl never prompts).
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// Print the stream's messages, oldest first.
    View {
        /// Stream name.
        name: String,
        /// At most this many messages.
        #[arg(long, short = 'c')]
        count: Option<u64>,
        /// Start at this sequence.
        #[arg(long)]
        since_seq: Option<u64>,
    },
    /// A replicated stream's group (as `nats stream cluster`).
    Cluster {
        #[command(subcommand)]
        /// What to do with the group.
        cmd: StreamClusterCmd,
    },
}

/// `sealctl stream cluster …`.
#[derive(Debug, Clone, Subcommand)]
pub enum StreamClusterCmd {
    /// Ask the stream's leader to step down; another replica leads after an election.
    #[command(name = "step-down", alias = "stepdown")]
    StepDown {
        /// Stream name.
        name: String,
        /// The server (name) to lead next.
        #[arg(long)]
        preferred: Option<String>,
    },
    /// Move the stream's replica off a server: a server holding none takes it
    /// (`$JS.API.STREAM.PEER.REMOVE`).
    #[command(name = "peer-remove")]
    PeerRemove {
        /// Stream name.
        name: String,
        /// The server (name or peer id) whose replica moves.
        peer: String,
    },
}
