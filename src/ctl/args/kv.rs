//! `sealctl kv`.

use super::ConnArgs;
use clap::{Args, Subcommand};

/// `sealctl kv ...`.
#[derive(Debug, Clone, Args)]
pub struct KvArgs {
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// What to do.
    #[command(subcommand)]
    pub cmd: KvCmd,
}

/// `sealctl kv ...` commands.
#[derive(Debug, Clone, Subcommand)]
pub enum KvCmd {
    /// Create a bucket.
    #[command(alias = "create", alias = "new")]
    Add {
        /// Bucket name.
        bucket: String,
        /// Values kept per key (1-64).
        #[arg(long, default_value_t = 1)]
        history: i64,
        /// Values expire after this long, e.g. `1h` (default: never).
        #[arg(long)]
        ttl: Option<String>,
        /// Largest value, e.g. `1MB`.
        #[arg(long)]
        max_value_size: Option<String>,
        /// Bucket size limit, e.g. `1GB`.
        #[arg(long)]
        max_bucket_size: Option<String>,
        /// `file` (default) or `memory`.
        #[arg(long)]
        storage: Option<String>,
        /// Description.
        #[arg(long)]
        description: Option<String>,
    },
    /// Store a value.
    Put {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
    /// Print a key's current value.
    Get {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// Print only the value.
        #[arg(long)]
        raw: bool,
    },
    /// Delete a key (keeps its history).
    #[command(alias = "rm-key")]
    Del {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// Accepted for compatibility (sealctl never prompts).
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// Every stored revision of a key.
    History {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
    },
    /// List buckets, or the keys of one bucket.
    #[command(alias = "list")]
    Ls {
        /// Bucket.
        bucket: Option<String>,
    },
    /// Bucket configuration and state.
    #[command(alias = "status")]
    Info {
        /// Bucket.
        bucket: String,
    },
    /// Print current values and then changes as they happen.
    Watch {
        /// Bucket.
        bucket: String,
        /// Key or pattern (default: every key).
        key: Option<String>,
        /// Stop after this many entries.
        #[arg(long, short = 'c')]
        count: Option<u64>,
    },
    /// Delete a bucket and all its values.
    Rm {
        /// Bucket.
        bucket: String,
        /// Accepted for compatibility (sealctl never prompts).
        #[arg(short = 'f', long)]
        force: bool,
    },
}
