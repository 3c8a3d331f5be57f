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
    /// Connection rate: `--conns` connections, `--parallel` at a time, each one TCP connect →
    /// INFO → CONNECT (signed nonce with `--creds`) → PING/PONG → close.
    Connect,
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
    /// Also write a self-contained HTML report (summary, parameters, throughput over time,
    /// latency percentiles as inline SVG) to this file.
    #[arg(long, value_name = "FILE")]
    pub report: Option<std::path::PathBuf>,
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
    /// Connections to open and close (connect scenario).
    #[arg(long, default_value_t = 1000)]
    pub conns: u64,
    /// Connections being set up at the same time (connect scenario).
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// Authenticate every connection with this user `.creds` file (JWT + nkey seed: the
    /// server's INFO nonce is signed per connection).
    #[arg(long, conflicts_with_all = ["user", "password"])]
    pub creds: Option<std::path::PathBuf>,
    /// Authenticate every connection with this user name (with `--password`).
    #[arg(long)]
    pub user: Option<String>,
    /// Password for `--user`.
    #[arg(long, env = "NATS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
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
            BenchScenario::Connect => self.conns,
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
}

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

/// `sealctl server check ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum CheckCmd {
    /// JetStream is enabled, answers `$JS.API.INFO`, and usage is under the thresholds.
    #[command(alias = "js")]
    Jetstream(CheckJsArgs),
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
