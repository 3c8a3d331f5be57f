//! `sealctl bench`.

use clap::Args;

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
    /// Connect the subscribers (core scenarios), or the publishers and the consumer
    /// (JetStream scenarios: the stream is created through `--server`, so it lives there),
    /// to this server instead — another cluster member — so every message, PubAck and
    /// delivery crosses a route.
    #[arg(long, value_name = "URL")]
    pub sub_server: Option<String>,
    /// PID of the `--sub-server` process: its CPU time is added to `--server-pid`'s.
    #[arg(long)]
    pub sub_server_pid: Option<u32>,
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
    /// Replicas of the stream (or bucket) a JetStream scenario creates, 1–5 (a cluster's
    /// replicated streams; `nats bench --replicas`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub replicas: u8,
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
