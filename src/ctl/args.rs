//! `sealctl` arguments (clap). Commands are defined here and implemented in
//! [`super::commands`].

use clap::{Args, Parser, Subcommand};

/// sealstream admin CLI.
#[derive(Debug, Parser)]
#[command(name = "sealctl", version, about = "sealstream admin CLI")]
pub struct Cli {
    /// NATS server URL(s) to connect to.
    #[arg(
        short = 's',
        long = "server",
        global = true,
        default_value = "nats://127.0.0.1:4222",
        env = "NATS_URL"
    )]
    pub server: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure pub/sub throughput or request/reply latency against any NATS server.
    Bench(BenchArgs),
}

/// `sealctl bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Subject to publish on.
    #[arg(default_value = "bench.sealctl")]
    pub subject: String,
    /// Number of messages to publish.
    #[arg(long, default_value_t = 1_000_000)]
    pub msgs: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 128)]
    pub size: usize,
    /// Number of subscribing connections.
    #[arg(long, default_value_t = 1)]
    pub subs: usize,
    /// Put the subscribers in this queue group (each message goes to one of them).
    #[arg(long)]
    pub queue: Option<String>,
    /// Measure request/reply latency instead of throughput (one responder, sequential requests).
    #[arg(long)]
    pub request: bool,
    /// PID of the server process, to report its CPU time per message (read from /proc).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}
