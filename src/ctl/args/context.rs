//! `sealctl context`.

use super::ConnArgs;
use clap::Subcommand;

/// `sealctl context ...`.
#[derive(Debug, Clone, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process; boxing would only complicate the clap derive"
)]
pub enum ContextCmd {
    /// Save a context (server URL from `--server`, plus credentials and TLS files).
    Add {
        /// Context name.
        name: String,
        /// Description.
        #[arg(long)]
        description: Option<String>,
        /// Select it as well.
        #[arg(long)]
        select: bool,
        /// What to save.
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// List contexts (`*` marks the selected one).
    #[command(alias = "list")]
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a context the default for commands given no `--server`.
    Select {
        /// Context name.
        name: String,
    },
    /// Show a context (default: the selected one).
    #[command(alias = "show")]
    Info {
        /// Context name.
        name: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a context.
    #[command(alias = "delete", alias = "del")]
    Rm {
        /// Context name.
        name: String,
    },
}
