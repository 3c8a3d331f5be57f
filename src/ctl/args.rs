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
    /// Server-side configuration.
    Server {
        /// What to do.
        #[command(subcommand)]
        cmd: ServerCmd,
    },
}

/// Where the operator keeps keys.
#[derive(Debug, Clone, Args)]
pub struct KeysArg {
    /// Keystore directory (created 0700).
    #[arg(long = "keys", env = "SEALCTL_KEYS", default_value = "sealstream-keys")]
    pub keys: std::path::PathBuf,
}

/// `sealctl operator ...`.
#[derive(Debug, Subcommand)]
pub enum OperatorCmd {
    /// Create the operator identity, its signing key and the system account.
    Init {
        /// Operator name.
        #[arg(long, default_value = "OP")]
        name: String,
        /// Replace an existing operator.
        #[arg(long)]
        force: bool,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
}

/// `sealctl account ...`.
#[derive(Debug, Subcommand)]
pub enum AccountCmd {
    /// Create a tenant account signed by the operator signing key.
    Add {
        /// Account name.
        name: String,
        /// Account limits policy (policies/*.conf).
        #[arg(long)]
        limits: Option<std::path::PathBuf>,
        /// Allow bearer user tokens (off by default).
        #[arg(long)]
        allow_bearer: bool,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
    /// Send the account JWT to a running server (`$SYS.REQ.ACCOUNT.<id>.CLAIMS.UPDATE`).
    Push {
        /// Account name.
        name: String,
        /// A system-account user's creds (default: the keystore's SYS user).
        #[arg(long)]
        creds: Option<std::path::PathBuf>,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
    /// Revoke every user of the account issued until now.
    Revoke {
        /// Account name.
        name: String,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
}

/// `sealctl user ...`.
#[derive(Debug, Subcommand)]
pub enum UserCmd {
    /// Issue a user and write its .creds file.
    Add {
        /// Account name.
        account: String,
        /// User name.
        name: String,
        /// User permissions policy (policies/*.conf), signed by the account key.
        #[arg(long, conflicts_with = "role")]
        policy: Option<std::path::PathBuf>,
        /// Sign with this role's scoped signing key (permissions come from its template).
        #[arg(long)]
        role: Option<String>,
        /// Validity, e.g. `30d`, `12h`.
        #[arg(long)]
        expiry: Option<String>,
        /// A bearer token (no nonce signature; accepted over TLS only).
        #[arg(long)]
        bearer: bool,
        /// Where to write the .creds file (default: in the keystore).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Replace an existing .creds file.
        #[arg(long)]
        force: bool,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
    /// Revoke a user (by name in the keystore, or by public key).
    Revoke {
        /// Account name.
        account: String,
        /// User name or `U...` public key.
        user: String,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
}

/// `sealctl signing-key ...`.
#[derive(Debug, Subcommand)]
pub enum SigningKeyCmd {
    /// Add a scoped signing key for a role; users it signs get the policy's permissions.
    Add {
        /// Account name.
        account: String,
        /// Role name.
        #[arg(long)]
        role: String,
        /// User permissions policy for the role.
        #[arg(long)]
        policy: std::path::PathBuf,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
}

/// `sealctl creds`.
#[derive(Debug, Clone, Args)]
pub struct CredsArgs {
    /// Account name.
    pub account: String,
    /// User name.
    pub user: String,
    /// Destination file.
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
    /// Keystore.
    #[command(flatten)]
    pub keys: KeysArg,
}

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
}

/// What `sealctl bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchScenario {
    /// Core pub/sub fan-out or queue group (or request/reply with `--request`).
    Core,
    /// JetStream: each publisher awaits every PubAck before the next publish.
    JsPubSync,
    /// JetStream: each publisher keeps `--window` publishes in flight.
    JsPubWindow,
    /// JetStream: preload, then drain through a durable pull consumer, acking each message.
    JsConsume,
    /// Key-value: windowed puts over `--keys` distinct keys.
    KvPut,
    /// Key-value: preload `--keys` keys, then DIRECT.GET random keys.
    KvGet,
}

/// Storage type of the stream a JetStream scenario creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchStorage {
    /// File storage (what durability costs).
    File,
    /// Memory storage.
    Memory,
}

/// `sealctl bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Subject to publish on (core scenarios; JetStream scenarios use `bench.js.>` / `$KV.bench.>`).
    #[arg(default_value = "bench.sealctl")]
    pub subject: String,
    /// What to measure.
    #[arg(long, value_enum, default_value_t = BenchScenario::Core)]
    pub scenario: BenchScenario,
    /// Number of messages (publishes, deliveries, puts or gets) to measure. Default per scenario:
    /// core 1,000,000; js-pub-sync 10,000; js-pub-window and js-consume 100,000; kv-put
    /// `--keys`; kv-get 20,000.
    #[arg(long)]
    pub msgs: Option<u64>,
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
    /// Connect over TLS, trusting this CA bundle (PEM).
    #[arg(long)]
    pub tlsca: Option<std::path::PathBuf>,
    /// JetStream publishers in parallel, one connection each (js-pub-sync, js-pub-window).
    #[arg(long, default_value_t = 1)]
    pub pubs: usize,
    /// Publishes (or KV puts) in flight per connection for windowed scenarios and preloads.
    #[arg(long, default_value_t = 256)]
    pub window: usize,
    /// Messages per pull request (js-consume).
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Ack each consumed message with a reply and wait for it before the next ack (js-consume).
    #[arg(long)]
    pub ack_sync: bool,
    /// Distinct keys (kv-put, kv-get).
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// DIRECT.GET requests in flight (kv-get); 1 = each get awaits its reply.
    #[arg(long, default_value_t = 1)]
    pub inflight: usize,
    /// Storage of the stream a JetStream scenario creates.
    #[arg(long, value_enum, default_value_t = BenchStorage::File)]
    pub storage: BenchStorage,
    /// Name of the stream the js-* scenarios create (deleted first if it exists, and at the end).
    #[arg(long, default_value = "BENCH")]
    pub stream: String,
}

impl BenchArgs {
    /// `--msgs`, or the scenario's default.
    pub fn msgs(&self) -> u64 {
        self.msgs.unwrap_or(match self.scenario {
            BenchScenario::Core => 1_000_000,
            BenchScenario::JsPubSync => 10_000,
            BenchScenario::JsPubWindow | BenchScenario::JsConsume => 100_000,
            BenchScenario::KvPut => self.keys,
            BenchScenario::KvGet => 20_000,
        })
    }
}

/// `sealctl audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// The store directory (`store_dir` or `store_dir/jetstream`).
    pub store: std::path::PathBuf,
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
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
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
}
