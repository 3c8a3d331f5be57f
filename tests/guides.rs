//! The operations guides our users follow (`examples/configs/guide-*.conf` and the walkthroughs
//! listed in docs/OPERATIONS.md, "The operations guides, with sealctl"), followed as written:
//! each guide's config snippet starts the real server (only paths and ports adjusted), each
//! `nats ...` command runs as `sealctl ...` with the same flags, and the outcomes the guide
//! describes are asserted — counts, redelivery, rejection at a limit, persistence across a
//! restart.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{repo_path, spin_pause, TestServer};

/// `sealctl` against one server, with its own config dir (no saved contexts) and optional
/// credentials appended to every command.
struct Ctl {
    cfg: tempfile::TempDir,
    url: String,
    auth: Vec<String>,
}

struct Run {
    code: i32,
    out: String,
    err: String,
}

impl Run {
    fn ok(self) -> Self {
        assert_eq!(self.code, 0, "stdout: {}\nstderr: {}", self.out, self.err);
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.out)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.out, self.err))
    }

    /// Lines of stdout containing `word`, as `... | grep word` would print them.
    fn grep(&self, word: &str) -> Vec<&str> {
        self.out.lines().filter(|l| l.contains(word)).collect()
    }
}

impl Ctl {
    fn new(url: String) -> Self {
        Ctl {
            cfg: tempfile::tempdir().unwrap(),
            url,
            auth: Vec::new(),
        }
    }

    fn with_user(url: String, user: &str, password: &str) -> Self {
        let mut c = Self::new(url);
        c.auth = vec![
            "--user".into(),
            user.into(),
            "--password".into(),
            password.into(),
        ];
        c
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sealctl"));
        c.env("XDG_CONFIG_HOME", self.cfg.path())
            .env_remove("NATS_URL")
            .env_remove("SEALCTL_CONTEXT")
            .env_remove("NATS_PASSWORD")
            .args(["--server", &self.url])
            .args(args)
            .args(&self.auth)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `sealctl --server URL args...` to completion, killed after 15 s.
    fn run(&self, args: &[&str]) -> Run {
        self.run_for(args, Duration::from_secs(15))
    }

    fn run_for(&self, args: &[&str], limit: Duration) -> Run {
        let mut child = self.cmd(args).spawn().unwrap();
        let mut out_pipe = child.stdout.take().unwrap();
        let mut err_pipe = child.stderr.take().unwrap();
        let out_t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out_pipe.read_to_string(&mut s);
            s
        });
        let err_t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err_pipe.read_to_string(&mut s);
            s
        });
        let deadline = Instant::now() + limit;
        let code = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sealctl {args:?} did not finish within {limit:?}; stdout: {}",
                    out_t.join().unwrap()
                );
            }
            spin_pause(Duration::from_millis(10));
        };
        Run {
            code,
            out: out_t.join().unwrap(),
            err: err_t.join().unwrap(),
        }
    }

    fn ok(&self, args: &[&str]) -> Run {
        self.run(args).ok()
    }

    /// `stream info NAME --json`'s state.
    fn stream_state(&self, name: &str) -> Value {
        self.ok(&["stream", "info", name, "--json"]).json()["state"].clone()
    }

    /// `consumer info STREAM NAME --json`.
    fn consumer(&self, stream: &str, name: &str) -> Value {
        self.ok(&["consumer", "info", stream, name, "--json"])
            .json()
    }
}

/// A guide's config file from `examples/configs/`, with its absolute store directory replaced
/// by one relative to the server's working directory (its temporary directory).
fn guide_conf(file: &str, store_dir: &str, relative: &str) -> String {
    let text = std::fs::read_to_string(repo_path(&format!("examples/configs/{file}"))).unwrap();
    assert!(
        text.contains(store_dir),
        "{file} sets store_dir {store_dir}"
    );
    text.replace(store_dir, relative)
}

/// Bodies of the deliveries `sealctl consumer next` / `sealctl sub` printed, with the
/// `delivered` count of each: `(body, delivered)` (bodies here are one line).
fn deliveries(out: &str) -> Vec<(String, u64)> {
    let lines: Vec<&str> = out.lines().collect();
    let mut found = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(rest) = l.split(", delivered ").nth(1) {
            if l.starts_with("[#") {
                let n = rest
                    .split(',')
                    .next()
                    .and_then(|d| d.trim().parse().ok())
                    .unwrap();
                // Headers (`Key: value`) come first; the body is the last line of the block.
                let body = lines[i + 1..]
                    .iter()
                    .take_while(|b| !b.is_empty() && !b.starts_with("Acknowledged"))
                    .last()
                    .copied()
                    .unwrap_or("");
                found.push((body.to_owned(), n));
            }
        }
    }
    found
}

/// 000 "Designing a Minimal Durable Messaging Layer": the config (JetStream limits and an ACME
/// account inside `authorization`), `server info | grep JetStream`, the operational checks
/// (`stream info`, `consumer info`: ack floor, redeliveries), the failure modes (max bytes
/// reached, AckWait redelivery, `Nats-Msg-Id` dedupe) and payload protection at rest.
#[test]
fn guide_000_minimal_durable_layer() {
    if support::server_binary().1 {
        return; // nats-server refuses `accounts` inside `authorization` (see config_files.rs)
    }
    let conf = guide_conf(
        "guide-000-jetstream-with-accounts-in-authorization.conf",
        "/var/lib/nats/jetstream",
        "jetstream-data",
    );
    // As written: the server starts, alice (account ACME) connects, JetStream is on.
    let s = TestServer::start_with(&[], Some(&conf));
    let alice = Ctl::with_user(s.url(), "alice", "secret");
    let info = alice.ok(&["server", "info"]);
    assert_eq!(
        info.grep("JetStream").first().map(|l| l.trim()),
        Some("JetStream: true"),
        "{}",
        info.out
    );
    // ...but, as with nats-server, an account without `jetstream` has no JetStream of its own.
    let r = alice.run(&["stream", "info", "MY_STREAM"]);
    assert_eq!(r.code, 1);
    assert!(
        r.err
            .contains("error: JetStream not enabled for account (10039)"),
        "{}",
        r.err
    );
    drop(s);

    // The one-line change that gives ACME JetStream, then the guide's checks.
    let conf = conf.replace("ACME: { users", "ACME: { jetstream: enabled, users");
    let mut s = TestServer::start_with(&[], Some(&conf));
    let alice = Ctl::with_user(s.url(), "alice", "secret");
    alice.ok(&[
        "stream",
        "add",
        "MY_STREAM",
        "--subjects",
        "orders.*",
        "--max-bytes",
        "1KB",
        "--discard",
        "new",
    ]);
    alice.ok(&[
        "consumer",
        "add",
        "MY_STREAM",
        "MY_CONSUMER",
        "--ack-wait",
        "1s",
    ]);
    // Dedupe via Nats-Msg-Id within the duplicate window.
    let first = alice.ok(&[
        "pub",
        "orders.new",
        "order 1",
        "-H",
        "Nats-Msg-Id:o-1",
        "-J",
    ]);
    assert!(first.out.contains("sequence 1"), "{}", first.out);
    let again = alice.ok(&[
        "pub",
        "orders.new",
        "order 1",
        "-H",
        "Nats-Msg-Id:o-1",
        "-J",
    ]);
    assert!(again.out.contains("(duplicate)"), "{}", again.out);
    assert_eq!(alice.stream_state("MY_STREAM")["messages"], 1);

    // Consumer ack timeouts: not acked within AckWait → redelivered.
    let d = alice.ok(&["consumer", "next", "MY_STREAM", "MY_CONSUMER", "--no-ack"]);
    assert_eq!(deliveries(&d.out), vec![("order 1".to_owned(), 1)]);
    let d = alice.ok(&[
        "consumer",
        "next",
        "MY_STREAM",
        "MY_CONSUMER",
        "--no-ack",
        "--timeout",
        "5s",
    ]);
    assert_eq!(deliveries(&d.out), vec![("order 1".to_owned(), 2)]);
    let ci = alice.consumer("MY_STREAM", "MY_CONSUMER");
    assert_eq!(ci["num_redelivered"], 1, "{ci}");
    assert_eq!(ci["num_ack_pending"], 1, "{ci}");
    assert_eq!(ci["ack_floor"]["stream_seq"], 0, "{ci}");
    // The human-readable form carries what the guide says to look for.
    let text = alice.ok(&["consumer", "info", "MY_STREAM", "MY_CONSUMER"]);
    assert_eq!(text.grep("Ack floor").len(), 1, "{}", text.out);
    assert!(
        text.grep("Redelivered (num_redelivered):")[0].ends_with(" 1"),
        "{}",
        text.out
    );
    let d = alice.ok(&[
        "consumer",
        "next",
        "MY_STREAM",
        "MY_CONSUMER",
        "--timeout",
        "5s",
    ]);
    assert_eq!(deliveries(&d.out), vec![("order 1".to_owned(), 3)]);
    let ci = alice.consumer("MY_STREAM", "MY_CONSUMER");
    assert_eq!(ci["ack_floor"]["stream_seq"], 1, "{ci}");
    assert_eq!(ci["num_ack_pending"], 0, "{ci}");

    // Disk exhaustion: at max_bytes (discard new) publishes are refused.
    let fill = alice.run(&[
        "pub",
        "orders.new",
        "order {{Count}}",
        "--count",
        "40",
        "-J",
    ]);
    assert_eq!(fill.code, 1, "{}", fill.out);
    assert!(fill.err.contains("maximum bytes exceeded"), "{}", fill.err);
    let st = alice.stream_state("MY_STREAM");
    let stored = st["messages"].as_u64().unwrap();
    assert!(stored > 10 && st["bytes"].as_u64().unwrap() <= 1024, "{st}");
    let usage = alice.ok(&["stream", "info", "MY_STREAM"]);
    assert!(
        usage
            .grep("Bytes:")
            .iter()
            .any(|l| l.contains("of 1.0 KiB")),
        "{}",
        usage.out
    );

    // Trust boundary: the store on disk holds no payload or name in the clear.
    s.stop(true);
    let audit = Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .arg("audit")
        .arg(s.dir.path().join("jetstream-data").join("jetstream"))
        .args(["--canary", "order 1", "--canary", "MY_STREAM"])
        .output()
        .unwrap();
    assert!(
        audit.status.success(),
        "{}{}",
        String::from_utf8_lossy(&audit.stdout),
        String::from_utf8_lossy(&audit.stderr)
    );
    s.restart(true);
    let alice = Ctl::with_user(s.url(), "alice", "secret");
    assert_eq!(alice.stream_state("MY_STREAM")["messages"], stored);
}

/// 001 "Architecting Durable Message Queues": `-js`, `stream add --subjects 'orders.*'
/// --storage file`, `pub`, a consumer that misses a message while disconnected and receives it
/// on reconnect, `stream info` / `consumer info`, a WorkQueue redelivery loop bounded by
/// max_deliver, and the rollback (`stream rm`, recreate).
#[test]
fn guide_001_durable_queue() {
    let s = TestServer::start_js();
    let c = Ctl::new(s.url());
    c.ok(&[
        "stream",
        "add",
        "MY_STREAM",
        "--subjects",
        "orders.*",
        "--storage",
        "file",
    ]);
    c.ok(&["pub", "orders.new", "Order Data"]);
    // The consumer application: receives, acknowledges, disconnects.
    let sub = [
        "sub",
        "orders.new",
        "--stream",
        "MY_STREAM",
        "--durable",
        "MY_CONSUMER",
        "--count",
        "1",
    ];
    assert_eq!(
        deliveries(&c.ok(&sub).out),
        vec![("Order Data".to_owned(), 1)]
    );
    // Published during its downtime; received (and only it) on reconnect.
    c.ok(&["pub", "orders.new", "Order Data (while away)"]);
    assert_eq!(
        deliveries(&c.ok(&sub).out),
        vec![("Order Data (while away)".to_owned(), 1)]
    );
    assert_eq!(c.stream_state("MY_STREAM")["messages"], 2);
    let ci = c.consumer("MY_STREAM", "MY_CONSUMER");
    assert_eq!(ci["ack_floor"]["stream_seq"], 2, "{ci}");
    assert_eq!(ci["num_pending"], 0, "{ci}");
    assert_eq!(ci["num_ack_pending"], 0, "{ci}");

    // Most retention settings need a recreation: the edit is refused, rm + add works.
    let edit = c.run(&["stream", "edit", "MY_STREAM", "--retention", "workqueue"]);
    assert_eq!(edit.code, 1, "{}", edit.out);
    assert!(edit.err.contains("error: "), "{}", edit.err);
    assert!(c.ok(&["stream", "rm", "MY_STREAM"]).out.contains("Deleted"));
    c.ok(&[
        "stream",
        "add",
        "MY_STREAM",
        "--subjects",
        "orders.*",
        "--storage",
        "file",
        "--retention",
        "workqueue",
    ]);
    c.ok(&[
        "consumer",
        "add",
        "MY_STREAM",
        "MY_CONSUMER",
        "--ack-wait",
        "300ms",
        "--max-deliver",
        "3",
    ]);
    // WorkQueue: an acked message leaves the stream.
    c.ok(&["pub", "orders.new", "good order"]);
    let d = c.ok(&["consumer", "next", "MY_STREAM", "MY_CONSUMER"]);
    assert_eq!(deliveries(&d.out), vec![("good order".to_owned(), 1)]);
    assert_eq!(c.stream_state("MY_STREAM")["messages"], 0);
    // The redelivery loop: never acked, redelivered after each ack_wait, max_deliver times.
    c.ok(&["pub", "orders.new", "failing order"]);
    for n in 1..=3 {
        let d = c.ok(&[
            "consumer",
            "next",
            "MY_STREAM",
            "MY_CONSUMER",
            "--no-ack",
            "--timeout",
            "3s",
        ]);
        assert_eq!(deliveries(&d.out), vec![("failing order".to_owned(), n)]);
    }
    let r = c.run(&[
        "consumer",
        "next",
        "MY_STREAM",
        "MY_CONSUMER",
        "--no-ack",
        "--timeout",
        "1s",
    ]);
    assert_eq!(r.code, 1, "a 4th delivery: {}", r.out);
    assert!(r.err.contains("no message available"), "{}", r.err);
    let ci = c.consumer("MY_STREAM", "MY_CONSUMER");
    assert_eq!(ci["num_redelivered"], 1, "{ci}");
    assert_eq!(ci["delivered"]["consumer_seq"], 4, "{ci}");
    // Rollback, as the guide says (`nats stream rm` prompts; sealctl never does, -f accepted).
    c.ok(&["stream", "rm", "MY_STREAM", "-f"]);
    let r = c.run(&["stream", "info", "MY_STREAM"]);
    assert!(
        r.err.contains("error: stream not found (10059)"),
        "{}",
        r.err
    );
}

/// 002 "Ensuring Message Survival": `jetstream: { store_dir: ... }`, `server info`, `stream add
/// ORDER_EVENTS --subjects "orders.>"`, `pub`, `sub --durable order-processor --stream
/// ORDER_EVENTS`, and the persistence check: publish several, stop the server entirely,
/// restart, the durable subscriber receives them.
#[test]
fn guide_002_durable_event_log() {
    let conf = guide_conf(
        "guide-002-jetstream-store-dir-inline.conf",
        "/path/to/data",
        "data",
    );
    let mut s = TestServer::start_with(&[], Some(&conf));
    let c = Ctl::new(s.url());
    let info = c.ok(&["server", "info"]);
    assert!(
        info.grep("JetStream")
            .iter()
            .any(|l| l.trim() == "JetStream: true"),
        "{}",
        info.out
    );
    c.ok(&["stream", "add", "ORDER_EVENTS", "--subjects", "orders.>"]);
    c.ok(&[
        "pub",
        "orders.created",
        r#"{"order_id":"12345", "status":"pending"}"#,
    ]);
    c.ok(&["pub", "orders.shipped", r#"{"order_id":"12345"}"#]);
    c.ok(&["pub", "orders.cancelled", r#"{"order_id":"12346"}"#]);
    // One durable log for every orders.* subject.
    let st = c.stream_state("ORDER_EVENTS");
    assert_eq!(st["messages"], 3, "{st}");
    assert_eq!(st["num_subjects"], 3, "{st}");

    let sub = |c: &Ctl, n: &str| {
        c.ok(&[
            "sub",
            "orders.created",
            "--durable",
            "order-processor",
            "--stream",
            "ORDER_EVENTS",
            "--count",
            n,
        ])
    };
    assert_eq!(
        deliveries(&sub(&c, "1").out),
        vec![(r#"{"order_id":"12345", "status":"pending"}"#.to_owned(), 1)]
    );
    // The persistence check: several messages, the server stopped entirely, restart. sealstream
    // is killed (-9): its confirmed acks are on disk. nats-server writes consumer state
    // asynchronously, so it gets a graceful stop (a kill would redeliver the acked message).
    c.ok(&["pub", "orders.created", "order {{Count}}", "--count", "3"]);
    // Core publishes carry no PubAck: wait until the stream holds them before the kill (what
    // must survive the kill is the confirmed ack, which is what this step checks).
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.stream_state("ORDER_EVENTS")["messages"] != 6 && Instant::now() < deadline {
        support::spin_pause(Duration::from_millis(20));
    }
    s.restart(s.is_reference());
    let c = Ctl::new(s.url());
    let got = deliveries(&sub(&c, "3").out);
    assert_eq!(
        got,
        vec![
            ("order 1".to_owned(), 1),
            ("order 2".to_owned(), 1),
            ("order 3".to_owned(), 1)
        ]
    );
    let ci = c.consumer("ORDER_EVENTS", "order-processor");
    assert_eq!(ci["num_pending"], 0, "{ci}");
    assert_eq!(ci["num_ack_pending"], 0, "{ci}");
    let info = c.ok(&["stream", "info", "ORDER_EVENTS"]);
    assert!(
        info.grep("Messages:")
            .iter()
            .any(|l| l.trim() == "Messages:           6"),
        "{}",
        info.out
    );
}

/// 003 "Configure NATS JetStream for Durable Message Persistence": the config with
/// max_memory_store / max_file_store, `server check jetstream`, `stream add ORDERS ...
/// --max-msgs 1_000_000 --max-age 72h`, `consumer add ORDERS WORKER1 --durable WORKER1
/// --ack-policy explicit --ack-wait 30s --max-deliver 5`, explicit acks, redelivery bounded by
/// max-deliver, and the restart check (count unchanged, the durable resumes).
#[test]
fn guide_003_durable_persistence() {
    let conf = guide_conf(
        "guide-003-jetstream-memory-and-file-limits.conf",
        "/var/lib/nats/jetstream",
        "jetstream-data",
    );
    let mut s = TestServer::start_with(&[], Some(&conf));
    let c = Ctl::new(s.url());
    let check = c.ok(&["server", "check", "jetstream"]);
    assert!(check.out.starts_with("JetStream OK"), "{}", check.out);
    let v = c
        .ok(&[
            "stream",
            "add",
            "ORDERS",
            "--subjects",
            "orders.*",
            "--retention",
            "limits",
            "--max-msgs",
            "1_000_000",
            "--max-age",
            "72h",
            "--storage",
            "file",
            "--json",
        ])
        .json();
    let cfg = &v["config"];
    assert_eq!(cfg["max_msgs"], 1_000_000);
    assert_eq!(cfg["max_age"], 72 * 3600 * 1_000_000_000_u64);
    assert_eq!(cfg["storage"], "file");
    assert_eq!(cfg["retention"], "limits");
    let v = c
        .ok(&[
            "consumer",
            "add",
            "ORDERS",
            "WORKER1",
            "--durable",
            "WORKER1",
            "--ack-policy",
            "explicit",
            "--ack-wait",
            "30s",
            "--max-deliver",
            "5",
            "--json",
        ])
        .json();
    let cfg = &v["config"];
    assert_eq!(cfg["durable_name"], "WORKER1");
    assert_eq!(cfg["ack_policy"], "explicit");
    assert_eq!(cfg["ack_wait"], 30_000_000_000_u64);
    assert_eq!(cfg["max_deliver"], 5);

    c.ok(&["pub", "orders.created", r#"{"id":"123"}"#]);
    c.ok(&[
        "pub",
        "orders.created",
        r#"{"id":"{{Count}}"}"#,
        "--count",
        "3",
    ]);
    // Consume with explicit ack.
    let d = c.ok(&["consumer", "next", "ORDERS", "WORKER1", "--count", "2"]);
    assert_eq!(
        deliveries(&d.out),
        vec![
            (r#"{"id":"123"}"#.to_owned(), 1),
            (r#"{"id":"1"}"#.to_owned(), 1)
        ]
    );
    // Not acked within ack-wait → redelivered, up to max-deliver times (ack-wait shortened
    // from 30s so the test does not wait minutes).
    c.ok(&[
        "consumer",
        "add",
        "ORDERS",
        "SLOW",
        "--durable",
        "SLOW",
        "--ack-policy",
        "explicit",
        "--ack-wait",
        "200ms",
        "--max-deliver",
        "5",
        "--filter",
        "orders.created",
        "--deliver-policy",
        "last",
    ]);
    for n in 1..=5 {
        let d = c.ok(&[
            "consumer",
            "next",
            "ORDERS",
            "SLOW",
            "--no-ack",
            "--timeout",
            "3s",
        ]);
        assert_eq!(deliveries(&d.out), vec![(r#"{"id":"3"}"#.to_owned(), n)]);
    }
    let r = c.run(&[
        "consumer",
        "next",
        "ORDERS",
        "SLOW",
        "--no-ack",
        "--timeout",
        "1s",
    ]);
    assert_eq!(r.code, 1, "a 6th delivery: {}", r.out);

    // Verify durability: note the count, restart gracefully, the count is unchanged.
    let ls = c.ok(&["stream", "ls", "--json"]).json();
    let before = c.stream_state("ORDERS");
    assert_eq!(before["messages"], 4, "{ls}");
    s.restart(true);
    let c = Ctl::new(s.url());
    let after = c.stream_state("ORDERS");
    assert_eq!(after["messages"], before["messages"]);
    assert_eq!(after["bytes"], before["bytes"]);
    assert_eq!(after["last_seq"], before["last_seq"]);
    // WORKER1 resumes from where it left off.
    let d = c.ok(&["consumer", "next", "ORDERS", "WORKER1"]);
    assert_eq!(deliveries(&d.out), vec![(r#"{"id":"2"}"#.to_owned(), 1)]);
}

/// 004 "NATS JetStream Durable Messaging Architecture": the compose command line (`-js -sd
/// /data -m 8222`), `nats --server nats://localhost:4222 stream add ORDERS ... --defaults`,
/// `pub`, `stream info`, `stream view`, then a durable explicit-ack consumer, pull and push.
#[test]
fn guide_004_local_jetstream_server() {
    let s = TestServer::start_with(&["-js", "-sd", "data", "-m", "-1"], None);
    let (status, _) = s.http_get("/healthz?js-enabled-only=true");
    assert_eq!(status, 200);
    // `localhost`, as the guide writes it.
    let c = Ctl::new(format!("nats://localhost:{}", s.port));
    c.ok(support::GUIDE_STREAM_ADD);
    let body = r#"{"order_id":"order-123","status":"created"}"#;
    c.ok(&["pub", "orders.created", body]);
    let info = c.ok(&["stream", "info", "ORDERS"]);
    assert!(
        info.out.contains("Subjects:             orders.>"),
        "{}",
        info.out
    );
    assert!(
        info.grep("Messages:")
            .iter()
            .any(|l| l.trim() == "Messages:           1"),
        "{}",
        info.out
    );
    let view = c.ok(&["stream", "view", "ORDERS"]);
    assert!(view.out.contains("ORDERS#1"), "{}", view.out);
    assert!(view.out.contains("orders.created"), "{}", view.out);
    assert!(view.out.lines().any(|l| l == body), "{}", view.out);
    // The store is on disk under -sd.
    assert!(s.dir.path().join("data").join("jetstream").is_dir());

    // A durable consumer with explicit acks: pull...
    c.ok(&[
        "consumer", "add", "ORDERS", "WORKER", "--pull", "--ack", "explicit",
    ]);
    let d = c.ok(&["consumer", "next", "ORDERS", "WORKER"]);
    assert_eq!(deliveries(&d.out), vec![(body.to_owned(), 1)]);
    assert_eq!(c.consumer("ORDERS", "WORKER")["ack_floor"]["stream_seq"], 1);
    // ...or push, to a delivery subject.
    let v = c
        .ok(&[
            "consumer",
            "add",
            "ORDERS",
            "NOTIFY",
            "--deliver",
            "deliver.notify",
            "--ack",
            "explicit",
            "--json",
        ])
        .json();
    assert_eq!(v["config"]["deliver_subject"], "deliver.notify");
    let got = c.ok(&["sub", "deliver.notify", "--count", "1", "--raw"]);
    assert_eq!(got.out.trim(), body);
}

/// The guides pipe `sealctl` output into other tools (`nats server info | grep JetStream`). A
/// reader that stops early (`| head`) ends sealctl quietly with the SIGPIPE status, 141, as the
/// Go CLI ends — not with a panic and a backtrace.
#[test]
fn piping_into_a_reader_that_stops_early_is_quiet() {
    let s = TestServer::start_js();
    let c = Ctl::new(s.url());
    c.ok(&["stream", "add", "BIG", "--subjects", "big"]);
    // More than a pipe buffer (64 KiB) of output, so sealctl is still writing when we stop.
    let body = "x".repeat(1000);
    c.ok(&["pub", "big", &body, "--count", "150"]);
    let mut child = c.cmd(&["stream", "view", "BIG"]).spawn().unwrap();
    let mut head = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // The read end is dropped here, as `head -c 16` exits.
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(141), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
}
