//! `sealctl` arguments (clap), one file per noun. Commands are defined here and implemented
//! in [`super::commands`].

mod bench;
mod consumer;
mod context;
mod kv;
mod msg;
mod server;
mod stream;
mod tenant;

pub use bench::{BenchArgs, BenchScenario, BenchStorage};
pub use consumer::{ConsumerArgs, ConsumerCmd, ConsumerConfigArgs};
pub use context::ContextCmd;
pub use kv::{KvArgs, KvCmd};
pub use msg::{PubArgs, ReplyArgs, ReqArgs, SubArgs};
pub use server::{
    AuditArgs, AuditCmd, AuditKeyCmd, CheckCmd, CheckHealthzArgs, CheckJsArgs, RaftCmd, ReportCmd,
    ReportJsArgs, ServerCmd, StoreCmd,
};
pub use stream::{StreamArgs, StreamClusterCmd, StreamCmd, StreamConfigArgs};
pub use tenant::{AccountCmd, CredsArgs, KeysArg, OperatorCmd, SigningKeyCmd, UserCmd};

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
    /// Never draw progress bars (they are drawn on stderr only when it is a terminal, and
    /// never with `--json`).
    #[arg(long, global = true)]
    pub no_progress: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure pub/sub throughput or request/reply latency against any NATS server.
    Bench(BenchArgs),
    /// The operator identity (tenant onboarding starts here).
    Operator {
        /// What to do.
        #[command(subcommand)]
        cmd: OperatorCmd,
    },
    /// Tenant accounts.
    Account {
        /// What to do.
        #[command(subcommand)]
        cmd: AccountCmd,
    },
    /// Users of a tenant account.
    User {
        /// What to do.
        #[command(subcommand)]
        cmd: UserCmd,
    },
    /// Account signing keys (scoped by role).
    SigningKey {
        /// What to do.
        #[command(subcommand)]
        cmd: SigningKeyCmd,
    },
    /// Write a user's .creds file again (e.g. to hand it to a service).
    Creds(CredsArgs),
    /// Decode any NATS JWT (or .creds / .jwt file) and show its claims.
    Describe {
        /// A JWT, or a file holding one.
        token: String,
    },
    /// Offline store maintenance (the server must be stopped).
    Store {
        /// What to do.
        #[command(subcommand)]
        cmd: StoreCmd,
    },
    /// Offline, read-only proof that a store is sealed and intact (exit codes: 0 clean,
    /// 1 integrity, 2 leak, 3 key/header, 4 layout).
    Audit(AuditArgs),
    /// The key that signs audit attestations.
    AuditKey {
        /// What to do.
        #[command(subcommand)]
        cmd: AuditKeyCmd,
    },
    /// JetStream streams: add, edit, info, ls, rm, purge, get, rmm, view.
    Stream(StreamArgs),
    /// JetStream consumers: add, info, ls, rm, next.
    Consumer(ConsumerArgs),
    /// Key-Value buckets: add, put, get, del, history, ls, watch, rm.
    Kv(KvArgs),
    /// Publish messages (core NATS, or JetStream with `--jetstream`).
    Pub(PubArgs),
    /// Subscribe and print messages (core NATS, or a JetStream durable with `--stream`).
    Sub(SubArgs),
    /// Send a request and print the reply.
    Req(ReqArgs),
    /// Answer requests on a subject with a fixed body.
    Reply(ReplyArgs),
    /// Saved connection settings (`--context NAME`, or the selected one).
    Context {
        /// What to do.
        #[command(subcommand)]
        cmd: ContextCmd,
    },
    /// Server-side configuration.
    Server {
        /// What to do.
        #[command(subcommand)]
        cmd: ServerCmd,
    },
}

/// Connection and output options shared by the client commands (accepted anywhere after the
/// command name). Values given here override the context's.
#[derive(Debug, Clone, Default, Args)]
pub struct ConnArgs {
    /// A user `.creds` file (JWT + nkey seed).
    #[arg(long, global = true)]
    pub creds: Option<std::path::PathBuf>,
    /// User name.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Password.
    #[arg(long, global = true, env = "NATS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Trust this CA bundle (PEM) for the server's certificate (implies TLS).
    #[arg(long, global = true)]
    pub tlsca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for TLS client authentication.
    #[arg(long, global = true, requires = "tlskey")]
    pub tlscert: Option<std::path::PathBuf>,
    /// Client private key (PEM) for `--tlscert`.
    #[arg(long, global = true, requires = "tlscert")]
    pub tlskey: Option<std::path::PathBuf>,
    /// Use this saved context instead of the selected one.
    #[arg(long, global = true, env = "SEALCTL_CONTEXT")]
    pub context: Option<String>,
    /// How long to wait for the server (API calls, requests, connecting), e.g. `5s`.
    #[arg(long, global = true, default_value = "5s")]
    pub timeout: String,
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}
