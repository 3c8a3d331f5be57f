//! `sealctl server`, `audit` and `store`: what runs on the broker host.

use super::tenant::KeysArg;
use super::ConnArgs;
use clap::{Args, Subcommand};

/// `sealctl server ...`.
#[derive(Debug, Subcommand)]
pub enum ServerCmd {
    /// Print the operator/resolver block to paste into the server config.
    Config {
        /// Use a directory resolver (accepts `sealctl account push`) instead of MEMORY.
        #[arg(long)]
        resolver_dir: Option<std::path::PathBuf>,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
    /// Show what the server announced in its INFO (name, version, JetStream, ...).
    Info(ConnArgs),
    /// Measure round-trip times (PING/PONG) to the server.
    Ping {
        /// How many round trips.
        #[arg(long, short = 'c', default_value_t = 5)]
        count: u32,
        /// Connection options.
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Health checks with Nagios-style output and exit codes (0 OK, 1 WARNING, 2 CRITICAL).
    Check {
        /// What to check.
        #[command(subcommand)]
        cmd: CheckCmd,
    },
    /// Reports gathered from every server of a cluster (needs a system account user).
    Report {
        /// Which report.
        #[command(subcommand)]
        cmd: ReportCmd,
    },
    /// The JetStream meta group's Raft (needs a system account user).
    Raft {
        /// What to do.
        #[command(subcommand)]
        cmd: RaftCmd,
    },
}

/// `sealctl server report ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum ReportCmd {
    /// Every server's JetStream usage and the meta group, as `nats server report jetstream`.
    #[command(alias = "js")]
    Jetstream(ReportJsArgs),
}

/// `sealctl server report jetstream`.
#[derive(Debug, Clone, Args)]
pub struct ReportJsArgs {
    /// Stop waiting once this many servers answered (else: `--timeout`, or half a second
    /// after the last answer).
    #[arg(long)]
    pub expect: Option<usize>,
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sealctl server raft ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum RaftCmd {
    /// The meta group's leader hands over to another member (`$JS.API.META.LEADER.STEPDOWN`).
    #[command(alias = "stepdown")]
    StepDown {
        /// The server to lead next (its name).
        #[arg(long)]
        preferred: Option<String>,
        /// Connection options.
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Removes a server from the meta group for good (`$JS.API.SERVER.REMOVE`; stop it
    /// first). Its streams keep running on their other replicas.
    PeerRemove {
        /// The server's name (or, with `--peer-id`, its peer id).
        peer: String,
        /// PEER is a peer id (as `/jsz` `meta_cluster` lists them), not a name.
        #[arg(long)]
        peer_id: bool,
        /// Connection options.
        #[command(flatten)]
        conn: ConnArgs,
    },
}

/// `sealctl server check ...`.
#[derive(Debug, Clone, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process from the command line"
)]
pub enum CheckCmd {
    /// JetStream is enabled, answers `$JS.API.INFO`, and usage is under the thresholds.
    #[command(alias = "js")]
    Jetstream(CheckJsArgs),
    /// The monitoring port's `/healthz` answers 200 (a container's health check: the image
    /// has no HTTP client of its own).
    Healthz(CheckHealthzArgs),
}

/// `sealctl server check healthz`.
#[derive(Debug, Clone, Args)]
pub struct CheckHealthzArgs {
    /// The monitoring address (`host:port` of `-m` / `http:`).
    #[arg(long, default_value = "127.0.0.1:8222")]
    pub monitor: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 5)]
    pub timeout: u64,
}

/// `sealctl server check jetstream`.
#[derive(Debug, Clone, Args)]
pub struct CheckJsArgs {
    /// WARNING when memory use reaches this percentage of the account's memory limit.
    #[arg(long, default_value_t = 75)]
    pub mem_warn: u32,
    /// CRITICAL when memory use reaches this percentage of the account's memory limit.
    #[arg(long, default_value_t = 90)]
    pub mem_crit: u32,
    /// WARNING when storage use reaches this percentage of the account's storage limit.
    #[arg(long, default_value_t = 75)]
    pub store_warn: u32,
    /// CRITICAL when storage use reaches this percentage of the account's storage limit.
    #[arg(long, default_value_t = 90)]
    pub store_crit: u32,
    /// Also check this stream (must exist; thresholds below apply to it).
    #[arg(long)]
    pub stream: Option<String>,
    /// WARNING when the stream holds at least this many messages.
    #[arg(long, requires = "stream")]
    pub msgs_warn: Option<u64>,
    /// CRITICAL when the stream holds at least this many messages.
    #[arg(long, requires = "stream")]
    pub msgs_crit: Option<u64>,
    /// Connection options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sealctl audit`.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    /// `verify`: check a signed attestation.
    #[command(subcommand)]
    pub cmd: Option<AuditCmd>,
    /// The store directory (`store_dir` or `store_dir/jetstream`); several, one per node of a
    /// cluster, to audit them all in one call (each with its own `<store>.key` unless a key
    /// is given).
    #[arg(num_args = 0..)]
    pub stores: Vec<std::path::PathBuf>,
    /// Write a signed attestation of this audit to this file (needs `--sign-with`).
    #[arg(long, requires = "sign_with")]
    pub attest: Option<std::path::PathBuf>,
    /// The nkey seed file that signs the attestation: an audit key (`sealctl audit-key init`)
    /// or the operator's.
    #[arg(long)]
    pub sign_with: Option<std::path::PathBuf>,
    /// The store passphrase (or set SEALSTREAM_STORE_KEY).
    #[arg(long, env = "SEALSTREAM_STORE_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// The store key file (default: `<store>.key` next to the store).
    #[arg(long)]
    pub key_file: Option<std::path::PathBuf>,
    /// Without a key: check structure and entropy only.
    #[arg(long)]
    pub no_key: bool,
    /// A string that must not appear in any file or path (repeatable).
    #[arg(long)]
    pub canary: Vec<String>,
    /// Audit the running servers instead (with `--server` and a system account user's
    /// `--creds`): every server of the cluster audits its own live store.
    #[arg(long)]
    pub live: bool,
    /// Live, as the system account: ask every server at once instead of one after another
    /// (the default: one node of a cluster auditing at a time slows at most one replica of
    /// each group, so a group led by another node keeps a full-speed quorum).
    #[arg(long, requires = "live")]
    pub all_at_once: bool,
    /// Live: only this account's streams.
    #[arg(long, requires = "live")]
    pub account: Option<String>,
    /// Live, as a tenant: audit your own account's streams (`$JS.API.ACCOUNT.AUDIT`) on each
    /// server of `--server` (comma-separated); one server named: every server of its cluster
    /// (from its INFO's `connect_urls`).
    #[arg(long, requires = "live", conflicts_with = "account")]
    pub tenant: bool,
    /// Live: the servers' reading pace in bytes per second (default: the server's, 32 MiB/s).
    #[arg(long, requires = "live")]
    pub bytes_per_sec: Option<u64>,
    /// Live: how long to wait for the reports, e.g. `10m`.
    #[arg(long, requires = "live", default_value = "10m")]
    pub wait: String,
    /// Connection options (live).
    #[command(flatten)]
    pub conn: super::ConnArgs,
}

/// `sealctl audit verify`.
#[derive(Debug, Clone, Subcommand)]
pub enum AuditCmd {
    /// Check a signed attestation's signature and, with stores, that they still match it
    /// (exit codes: 0 valid and matching, 5 signature invalid, 6 a store differs).
    Verify {
        /// The attestation file (`sealctl audit ... --attest`).
        report: std::path::PathBuf,
        /// The public nkey that must have signed it.
        #[arg(long)]
        signer: Option<String>,
        /// The attested stores, in the same order, to audit again and compare.
        #[arg(long = "store")]
        stores: Vec<std::path::PathBuf>,
        /// The stores' passphrase (or set SEALSTREAM_STORE_KEY).
        #[arg(long, env = "SEALSTREAM_STORE_KEY", hide_env_values = true)]
        key: Option<String>,
        /// The stores' key file (default: `<store>.key` next to each store).
        #[arg(long)]
        key_file: Option<std::path::PathBuf>,
    },
}

/// `sealctl audit-key ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum AuditKeyCmd {
    /// Make a dedicated audit signing key (an nkey seed, written 0600) and print its public key.
    Init {
        /// Where to write the seed.
        #[arg(long, default_value = "audit.nk")]
        out: std::path::PathBuf,
    },
}

/// `sealctl store ...`.
#[derive(Debug, Subcommand)]
pub enum StoreCmd {
    /// Rewrap every data key under a new master key without rewriting data (crash-safe: the
    /// store opens with the old or the new key at every step).
    RotateMaster {
        /// The store directory (`store_dir/jetstream`).
        store: std::path::PathBuf,
        /// The current passphrase.
        #[arg(long, env = "SEALSTREAM_STORE_KEY", hide_env_values = true)]
        key: Option<String>,
        /// The current key file (default: `<store>.key`).
        #[arg(long)]
        key_file: Option<std::path::PathBuf>,
        /// The new passphrase.
        #[arg(long, env = "SEALSTREAM_NEW_STORE_KEY", hide_env_values = true)]
        new_key: Option<String>,
        /// The new key file (created 0600 when it does not exist).
        #[arg(long)]
        new_key_file: Option<std::path::PathBuf>,
    },
    /// Rotate the data keys of running servers' file streams and re-seal their files under
    /// the new keys in the background, then destroy the old keys (with `--server` and a system
    /// account user). Replicated and memory streams are left as they are.
    RekeyLive {
        /// Only this account's streams.
        #[arg(long)]
        account: Option<String>,
        /// Only this stream (with `--account`).
        #[arg(long, requires = "account")]
        stream: Option<String>,
        /// The re-sealing pace in bytes per second (default: the server's, 32 MiB/s).
        #[arg(long)]
        bytes_per_sec: Option<u64>,
        /// How long to wait for the servers to finish, e.g. `30m`.
        #[arg(long, default_value = "30m")]
        wait: String,
        /// Connection options.
        #[command(flatten)]
        conn: super::ConnArgs,
    },
    /// Rotate the master key of running servers' stores (with `--server` and a system account
    /// user): each server rewraps its keys under `--new-key-file`, a path on its own host
    /// (created 0600 when missing), while it keeps serving. Start them with that key file
    /// from then on.
    RotateMasterLive {
        /// The new key file's absolute path on the servers' hosts.
        #[arg(long)]
        new_key_file: std::path::PathBuf,
        /// Only the server with this name (default: every server that answers).
        #[arg(long)]
        server_name: Option<String>,
        /// Connection options.
        #[command(flatten)]
        conn: super::ConnArgs,
    },
}
