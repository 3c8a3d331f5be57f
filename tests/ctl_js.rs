//! `sealctl`'s client commands (stream, consumer, kv, pub/sub/req/reply, server, context) run
//! as a process against a JetStream server: the figures they print, `--json` that parses, the
//! server's error codes and the exit codes.
//!
//! Runs against nats-server too (`SEALSTREAM_TEST_SERVER`); every test here is meant to give
//! the same answer on both.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{spin_pause, TestServer};

/// A `sealctl` invocation environment: its own config dir (contexts), no `NATS_URL`.
struct Ctl {
    cfg: tempfile::TempDir,
    url: String,
}

struct Run {
    code: i32,
    out: String,
    err: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.out)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.out, self.err))
    }

    fn ok(self) -> Self {
        assert_eq!(self.code, 0, "stdout: {}\nstderr: {}", self.out, self.err);
        self
    }

    /// The value printed after `label:` on the first line that starts with it.
    fn field(&self, label: &str) -> String {
        let want = format!("{label}:");
        self.out
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(want.as_str()))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no {label:?} in:\n{}", self.out))
    }
}

impl Ctl {
    fn new(s: &TestServer) -> Self {
        Ctl {
            cfg: tempfile::tempdir().unwrap(),
            url: s.url(),
        }
    }

    fn cmd(&self, with_server: bool, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sealctl"));
        c.env("XDG_CONFIG_HOME", self.cfg.path())
            .env_remove("NATS_URL")
            .env_remove("SEALCTL_CONTEXT")
            .env_remove("NATS_PASSWORD");
        if with_server {
            c.args(["-s", &self.url]);
        }
        c.args(args);
        c
    }

    fn output(mut c: Command) -> Run {
        let o: Output = c.stdin(Stdio::null()).output().unwrap();
        Run {
            code: o.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&o.stdout).into_owned(),
            err: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Runs `sealctl -s <url> args...`.
    fn run(&self, args: &[&str]) -> Run {
        Self::output(self.cmd(true, args))
    }

    /// Runs without `-s` (contexts decide).
    fn run_bare(&self, args: &[&str]) -> Run {
        Self::output(self.cmd(false, args))
    }

    fn ok(&self, args: &[&str]) -> Run {
        self.run(args).ok()
    }

    /// Expects exit code 1 and the server's error text and code on stderr.
    fn fails_with(&self, args: &[&str], text: &str, code: u32) {
        let r = self.run(args);
        assert_eq!(r.code, 1, "{args:?}: stdout: {}\nstderr: {}", r.out, r.err);
        let want = format!("error: {text} ({code})");
        assert!(
            r.err.contains(&want),
            "{args:?}: want {want:?} in stderr: {}",
            r.err
        );
    }

    /// Starts a long-running command and waits until it says it is listening (stderr).
    fn spawn_listening(&self, args: &[&str]) -> Child {
        let mut c = self.cmd(true, args);
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(16);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains("Listening on") || l.contains("Watching") => return child,
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    panic!("{args:?} never started listening");
                }
            }
        }
    }
}

/// Waits for a spawned command to finish; its stdout.
fn finish(mut child: Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut out = String::new();
            std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
            assert!(st.success(), "exit {st}: {out}");
            return out;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("command did not finish");
        }
        spin_pause(Duration::from_millis(20));
    }
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn stream_add_info_ls_rm_with_every_flag() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    let v = c
        .ok(&[
            "stream",
            "add",
            "ORDERS",
            "--subjects",
            "orders.*,audit.>",
            "--storage",
            "memory",
            "--retention",
            "limits",
            "--max-msgs",
            "1_000",
            "--max-bytes",
            "1MB",
            "--max-age",
            "1h",
            "--max-msg-size",
            "1KB",
            "--max-msgs-per-subject",
            "100",
            "--discard",
            "new",
            "--dupe-window",
            "30s",
            "--replicas",
            "1",
            "--allow-rollup",
            "--deny-delete",
            "--allow-direct",
            "--defaults",
            "--json",
        ])
        .json();
    let cfg = &v["config"];
    assert_eq!(
        cfg["subjects"],
        serde_json::json!(["orders.*", "audit.>"]),
        "{v}"
    );
    assert_eq!(cfg["storage"], "memory");
    assert_eq!(cfg["max_msgs"], 1000);
    assert_eq!(cfg["max_bytes"], 1_048_576);
    assert_eq!(cfg["max_age"], 3_600_000_000_000u64);
    assert_eq!(cfg["max_msg_size"], 1024);
    assert_eq!(cfg["max_msgs_per_subject"], 100);
    assert_eq!(cfg["discard"], "new");
    assert_eq!(cfg["duplicate_window"], 30_000_000_000u64);
    assert_eq!(cfg["allow_rollup_hdrs"], true);
    assert_eq!(cfg["deny_delete"], true);
    assert_eq!(cfg["allow_direct"], true);
    assert_eq!(cfg["deny_purge"], false);

    for i in 0..3 {
        c.ok(&["pub", "-J", "orders.new", &format!("order {i}")]);
    }
    let info = c.ok(&["stream", "info", "ORDERS"]);
    assert_eq!(info.field("Messages"), "3");
    assert_eq!(info.field("Subjects"), "orders.*, audit.>");
    assert_eq!(info.field("Storage"), "memory");
    assert_eq!(info.field("Maximum age"), "1h");
    assert_eq!(info.field("Maximum bytes"), "1.0 MiB");
    assert!(
        info.field("First sequence").starts_with("1 @ "),
        "{}",
        info.out
    );
    assert!(
        info.field("Last sequence").starts_with("3 @ "),
        "{}",
        info.out
    );
    assert_eq!(info.field("Active consumers"), "0");
    assert!(info.out.contains("3 of 1000 (0.3%)"), "{}", info.out);
    let j = c.ok(&["stream", "info", "ORDERS", "--json"]).json();
    assert_eq!(j["state"]["messages"], 3);

    let ls = c.ok(&["stream", "ls"]);
    let row = ls.out.lines().find(|l| l.starts_with("ORDERS")).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[2], "3", "{row}");
    let lj = c.ok(&["stream", "ls", "--json"]).json();
    assert_eq!(lj.as_array().unwrap().len(), 1);
    assert_eq!(lj[0]["config"]["name"], "ORDERS");

    // deny_delete → the server's refusal, code and all.
    let r = c.run(&["stream", "rmm", "ORDERS", "1"]);
    assert_eq!(r.code, 1, "{}", r.err);
    assert!(
        r.err.starts_with("error: ") && r.err.contains("(10"),
        "{}",
        r.err
    );

    c.ok(&["stream", "rm", "ORDERS", "-f"]);
    c.fails_with(&["stream", "info", "ORDERS"], "stream not found", 10059);
    c.fails_with(&["stream", "rm", "ORDERS"], "stream not found", 10059);
    assert!(c.ok(&["stream", "ls"]).out.contains("No streams"));
    // Subject collisions carry the server's code too.
    c.ok(&["stream", "add", "A", "--subjects", "x.>"]);
    c.fails_with(
        &["stream", "add", "B", "--subjects", "x.y"],
        "subjects overlap with an existing stream",
        10065,
    );
}

#[test]
fn stream_config_file_and_edit() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "s.json",
        r#"{"name":"IGNORED","subjects":["cfg.>"],"max_msgs":50,"storage":"file"}"#,
    );
    let v = c
        .ok(&[
            "stream",
            "add",
            "CFG",
            "--config",
            f.to_str().unwrap(),
            "--max-bytes",
            "2k",
            "--json",
        ])
        .json();
    assert_eq!(v["config"]["name"], "CFG");
    assert_eq!(v["config"]["max_msgs"], 50);
    assert_eq!(v["config"]["max_bytes"], 2048);
    let e = c
        .ok(&[
            "stream",
            "edit",
            "CFG",
            "--max-msgs",
            "5",
            "--subjects",
            "cfg.>,more.>",
            "--json",
        ])
        .json();
    assert_eq!(e["config"]["max_msgs"], 5);
    assert_eq!(
        e["config"]["max_bytes"], 2048,
        "edit keeps what was not given"
    );
    assert_eq!(
        e["config"]["subjects"],
        serde_json::json!(["cfg.>", "more.>"])
    );
    // Storage cannot change: the server's 10052.
    let r = c.run(&["stream", "edit", "CFG", "--storage", "memory"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("(10052)"), "{}", r.err);
    c.fails_with(
        &["stream", "edit", "NOPE", "--max-msgs", "1"],
        "stream not found",
        10059,
    );
    // Bad flag values never reach the server.
    let r = c.run(&["stream", "add", "X", "--max-age", "forever"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("--max-age"), "{}", r.err);
}

#[test]
fn stream_get_rmm_view_purge() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    c.ok(&["stream", "add", "P", "--subjects", "p.>"]);
    for (subj, body) in [
        ("p.a", "a1"),
        ("p.b", "b1"),
        ("p.a", "a2"),
        ("p.b", "b2"),
        ("p.a", "a3"),
    ] {
        c.ok(&["pub", "-J", subj, body]);
    }
    let g = c.ok(&["stream", "get", "P", "2"]);
    assert!(
        g.out.contains("P#2") && g.out.contains("p.b") && g.out.contains("b1"),
        "{}",
        g.out
    );
    let gj = c
        .ok(&["stream", "get", "P", "--last-for", "p.b", "--json"])
        .json();
    assert_eq!(gj["seq"], 4);
    assert_eq!(gj["data"], "b2");
    assert_eq!(gj["subject"], "p.b");

    c.ok(&["stream", "rmm", "P", "1", "-f"]);
    c.fails_with(&["stream", "get", "P", "1"], "no message found", 10037);

    let view = c.ok(&["stream", "view", "P"]);
    assert!(!view.out.contains("a1"), "{}", view.out);
    for b in ["b1", "a2", "b2", "a3"] {
        assert!(view.out.contains(b), "{}", view.out);
    }
    let vj = c
        .ok(&["stream", "view", "P", "--count", "2", "--json"])
        .json();
    let seqs: Vec<u64> = vj
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3]);

    let p = c.ok(&["stream", "purge", "P", "--subject", "p.b", "-f"]);
    assert!(p.out.contains("Purged 2 messages"), "{}", p.out);
    let p = c
        .ok(&["stream", "purge", "P", "--keep", "1", "--json"])
        .json();
    assert_eq!(p["purged"], 1, "{p}");
    let info = c.ok(&["stream", "info", "P", "--json"]).json();
    assert_eq!(info["state"]["messages"], 1);
    assert_eq!(info["state"]["first_seq"], 5);
    c.ok(&["pub", "-J", "p.c", "c1"]);
    let p = c
        .ok(&["stream", "purge", "P", "--seq", "6", "--json"])
        .json();
    assert_eq!(p["purged"], 1, "{p}");
    c.fails_with(&["stream", "purge", "NOPE"], "stream not found", 10059);
}

#[test]
fn consumer_add_next_info_ls_rm() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    c.ok(&[
        "stream",
        "add",
        "ORDERS",
        "--subjects",
        "orders.*",
        "--storage",
        "file",
    ]);
    c.ok(&["pub", "orders.new", "order {{Count}}", "--count", "5"]);
    // The guides' form: NAME plus --durable, --ack-policy.
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
            "--backoff",
            "1s,5s",
            "--filter",
            "orders.new",
            "--max-ack-pending",
            "50",
            "--defaults",
            "--json",
        ])
        .json();
    let cfg = &v["config"];
    assert_eq!(cfg["durable_name"], "WORKER1", "{v}");
    assert_eq!(cfg["ack_policy"], "explicit");
    assert_eq!(cfg["max_deliver"], 5);
    assert_eq!(
        cfg["backoff"],
        serde_json::json!([1_000_000_000u64, 5_000_000_000u64])
    );
    assert_eq!(cfg["filter_subject"], "orders.new");
    assert_eq!(cfg["max_ack_pending"], 50);
    assert_eq!(v["num_pending"], 5);

    let n = c.ok(&["consumer", "next", "ORDERS", "WORKER1", "--count", "2"]);
    assert!(
        n.out.contains("order 1") && n.out.contains("order 2"),
        "{}",
        n.out
    );
    assert!(
        n.out.contains("stream seq 1") && n.out.contains("Acknowledged"),
        "{}",
        n.out
    );
    let nj = c.ok(&[
        "consumer", "next", "ORDERS", "WORKER1", "--no-ack", "--json",
    ]);
    let m: Value = serde_json::from_str(nj.out.trim()).unwrap();
    assert_eq!(m["stream_seq"], 3);
    assert_eq!(m["data"], "order 3");
    assert_eq!(m["pending"], 2);
    assert_eq!(m["acked"], false);

    let info = c.ok(&["consumer", "info", "ORDERS", "WORKER1"]);
    assert_eq!(info.field("Ack floor"), "consumer seq 2 stream seq 2");
    assert_eq!(info.field("Last delivered"), "consumer seq 3 stream seq 3");
    assert_eq!(info.field("Unprocessed (num_pending)"), "2");
    assert_eq!(info.field("Outstanding acks (num_ack_pending)"), "1");
    assert_eq!(info.field("Redelivered (num_redelivered)"), "0");
    assert_eq!(info.field("Waiting pulls (num_waiting)"), "0");
    assert_eq!(info.field("Backoff"), "1s, 5s");
    let ij = c
        .ok(&["consumer", "info", "ORDERS", "WORKER1", "--json"])
        .json();
    assert_eq!(ij["num_ack_pending"], 1);
    assert_eq!(ij["ack_floor"]["stream_seq"], 2);

    let ls = c.ok(&["consumer", "ls", "ORDERS"]);
    let row = ls.out.lines().find(|l| l.starts_with("WORKER1")).unwrap();
    assert_eq!(row.split_whitespace().nth(2), Some("2"), "{row}");
    assert_eq!(
        c.ok(&["consumer", "ls", "ORDERS", "--json"]).json()[0]["name"],
        "WORKER1"
    );
    assert_eq!(
        c.ok(&["stream", "info", "ORDERS"])
            .field("Active consumers"),
        "1"
    );

    // Same name, different config: the server's 10148.
    c.fails_with(
        &["consumer", "add", "ORDERS", "WORKER1", "--max-deliver", "9"],
        "consumer already exists",
        10148,
    );
    c.ok(&["consumer", "rm", "ORDERS", "WORKER1", "-f"]);
    c.fails_with(
        &["consumer", "info", "ORDERS", "WORKER1"],
        "consumer not found",
        10014,
    );
    c.fails_with(
        &["consumer", "next", "ORDERS", "WORKER1"],
        "consumer not found",
        10014,
    );
    c.fails_with(&["consumer", "ls", "NOPE"], "stream not found", 10059);
    c.fails_with(
        &[
            "consumer",
            "add",
            "ORDERS",
            "B",
            "--backoff",
            "1s,2s",
            "--max-deliver",
            "1",
        ],
        "max deliver is required to be > length of backoff values",
        10116,
    );
}

#[test]
fn consumer_push_start_seq_and_empty_next() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    c.ok(&["stream", "add", "S", "--subjects", "s.>"]);
    c.ok(&["pub", "s.x", "m{{Count}}", "--count", "4"]);
    let v = c
        .ok(&[
            "consumer",
            "add",
            "S",
            "PUSH",
            "--deliver",
            "deliver.push",
            "--deliver-group",
            "g",
            "--ack",
            "all",
            "--json",
        ])
        .json();
    assert_eq!(v["config"]["deliver_subject"], "deliver.push", "{v}");
    assert_eq!(v["config"]["deliver_group"], "g");
    assert_eq!(v["config"]["ack_policy"], "all");
    let r = c.run(&["consumer", "next", "S", "PUSH"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("push based"), "{}", r.err);

    let v = c
        .ok(&[
            "consumer",
            "add",
            "S",
            "FROM3",
            "--start-seq",
            "3",
            "--json",
        ])
        .json();
    assert_eq!(v["config"]["deliver_policy"], "by_start_sequence", "{v}");
    assert_eq!(v["config"]["opt_start_seq"], 3);
    assert_eq!(v["num_pending"], 2);
    let n = c.ok(&["consumer", "next", "S", "FROM3", "--json"]);
    assert!(n.out.contains("\"stream_seq\":3"), "{}", n.out);

    let v = c
        .ok(&[
            "consumer",
            "add",
            "S",
            "NEW",
            "--deliver-policy",
            "new",
            "--json",
        ])
        .json();
    assert_eq!(v["num_pending"], 0);
    let r = c.run(&["consumer", "next", "S", "NEW", "--timeout", "300ms"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("no message"), "{}", r.err);
}

#[test]
fn pub_jetstream_templates_and_headers() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    c.ok(&["stream", "add", "T", "--subjects", "t.>"]);
    let p = c.ok(&[
        "pub",
        "-J",
        "t.1",
        "n={{Count}} at {{TimeStamp}}",
        "--count",
        "3",
    ]);
    for i in 1..=3 {
        assert!(
            p.out.contains(&format!("Stored in stream T sequence {i}")),
            "{}",
            p.out
        );
    }
    let g = c.ok(&["stream", "get", "T", "2", "--json"]).json();
    let data = g["data"].as_str().unwrap();
    assert!(data.starts_with("n=2 at 20"), "{data}");
    let ack = c
        .ok(&[
            "pub",
            "--jetstream",
            "t.2",
            "x",
            "-H",
            "Nats-Msg-Id:m1",
            "-H",
            "X-Who: me",
            "--json",
        ])
        .json();
    assert_eq!(ack["stream"], "T");
    assert_eq!(ack["seq"], 4);
    let dup = c.ok(&["pub", "-J", "t.2", "x", "-H", "Nats-Msg-Id:m1"]);
    assert!(dup.out.contains("sequence 4 (duplicate)"), "{}", dup.out);
    let g = c.ok(&["stream", "get", "T", "4", "--json"]).json();
    let hdrs = g["hdrs"].as_str().unwrap();
    assert!(
        hdrs.contains("X-Who: me") && hdrs.contains("Nats-Msg-Id: m1"),
        "{hdrs}"
    );
    // No stream on the subject: a clear error, exit 1.
    let r = c.run(&["pub", "-J", "nostream.x", "x"]);
    assert_eq!(r.code, 1);
    assert!(
        r.err.contains("no stream captures subject nostream.x"),
        "{}",
        r.err
    );
    // Core publish into the stream subject is stored too.
    let r = c.ok(&["pub", "t.3", "core", "--count", "2"]);
    assert!(r.out.contains("Published 4 bytes to t.3"), "{}", r.out);
    let info = c.ok(&["stream", "info", "T", "--json"]).json();
    assert_eq!(info["state"]["messages"], 6);
}

#[test]
fn sub_req_reply_core() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    let sub = c.spawn_listening(&["sub", "greet.*", "--count", "2"]);
    c.ok(&[
        "pub",
        "greet.a",
        "hello {{Count}}",
        "--count",
        "2",
        "-H",
        "K:v",
    ]);
    let out = finish(sub);
    assert!(out.contains("[#1] Received on \"greet.a\""), "{out}");
    assert!(
        out.contains("hello 1") && out.contains("hello 2") && out.contains("K: v"),
        "{out}"
    );

    let sub = c.spawn_listening(&["sub", "greet.b", "--count", "1", "--json"]);
    c.ok(&["pub", "greet.b", "j"]);
    let v: Value = serde_json::from_str(finish(sub).trim()).unwrap();
    assert_eq!(v["subject"], "greet.b");
    assert_eq!(v["data"], "j");

    let rep = c.spawn_listening(&[
        "reply",
        "svc.echo",
        "re: {{Request}} #{{Count}}",
        "--count",
        "2",
    ]);
    let r = c.ok(&["req", "svc.echo", "ping"]);
    assert!(r.out.contains("re: ping #1"), "{}", r.out);
    let r = c.ok(&["req", "svc.echo", "pong", "--raw"]);
    assert_eq!(r.out.trim(), "re: pong #2");
    let out = finish(rep);
    assert!(out.contains("ping") && out.contains("pong"), "{out}");

    let r = c.run(&["req", "svc.nobody", "x", "--timeout", "1s"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("no responders"), "{}", r.err);
}

#[test]
fn sub_durable_jetstream_resumes() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    c.ok(&["stream", "add", "ORDER_EVENTS", "--subjects", "orders.>"]);
    c.ok(&["pub", "orders.created", "o{{Count}}", "--count", "3"]);
    let out = c
        .ok(&[
            "sub",
            "orders.created",
            "--durable",
            "order-processor",
            "--stream",
            "ORDER_EVENTS",
            "--count",
            "2",
        ])
        .out;
    assert!(
        out.contains("o1") && out.contains("o2") && !out.contains("o3"),
        "{out}"
    );
    // Resumes after the acknowledged ones; the stream is found by subject.
    let out = c
        .ok(&[
            "sub",
            "orders.created",
            "--durable",
            "order-processor",
            "--count",
            "1",
            "--raw",
        ])
        .out;
    assert_eq!(out.trim(), "o3");
    let info = c
        .ok(&[
            "consumer",
            "info",
            "ORDER_EVENTS",
            "order-processor",
            "--json",
        ])
        .json();
    assert_eq!(info["ack_floor"]["stream_seq"], 3, "{info}");
    assert_eq!(info["num_pending"], 0);
    assert_eq!(info["config"]["filter_subject"], "orders.created");
}

#[test]
fn kv_commands() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    let add = c.ok(&["kv", "add", "cfg", "--history", "5", "--ttl", "1h"]);
    assert_eq!(add.field("History"), "5");
    assert_eq!(add.field("TTL"), "1h");
    let info = c.ok(&["kv", "info", "cfg", "--json"]).json();
    assert_eq!(info["history"], 5);
    assert_eq!(info["ttl"], 3_600_000_000_000u64);

    assert_eq!(
        c.ok(&["kv", "put", "cfg", "feature.x", "on"]).out.trim(),
        "on"
    );
    let p = c
        .ok(&["kv", "put", "cfg", "feature.x", "off", "--json"])
        .json();
    assert_eq!(p["revision"], 2);
    c.ok(&["kv", "put", "cfg", "other", "1"]);

    let g = c.ok(&["kv", "get", "cfg", "feature.x"]);
    assert!(g.out.contains("cfg > feature.x revision: 2"), "{}", g.out);
    assert!(g.out.trim_end().ends_with("off"), "{}", g.out);
    assert_eq!(
        c.ok(&["kv", "get", "cfg", "feature.x", "--raw"]).out.trim(),
        "off"
    );
    let gj = c.ok(&["kv", "get", "cfg", "other", "--json"]).json();
    assert_eq!(gj["value"], "1");
    assert_eq!(gj["revision"], 3);

    let h = c
        .ok(&["kv", "history", "cfg", "feature.x", "--json"])
        .json();
    let vals: Vec<&str> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["value"].as_str().unwrap())
        .collect();
    assert_eq!(vals, ["on", "off"]);
    let h = c.ok(&["kv", "history", "cfg", "feature.x"]);
    assert!(
        h.out
            .lines()
            .any(|l| l.starts_with("feature.x") && l.contains("PUT") && l.ends_with("on")),
        "{}",
        h.out
    );

    let keys = c.ok(&["kv", "ls", "cfg"]);
    assert_eq!(keys.out.lines().collect::<Vec<_>>(), ["feature.x", "other"]);
    let buckets = c.ok(&["kv", "ls"]);
    let row = buckets.out.lines().find(|l| l.starts_with("cfg")).unwrap();
    assert_eq!(row.split_whitespace().nth(1), Some("3"), "{row}");
    assert_eq!(c.ok(&["kv", "ls", "--json"]).json()[0]["bucket"], "cfg");

    let w = c.ok(&["kv", "watch", "cfg", "--count", "2", "--json"]);
    let seen: Vec<Value> = w
        .out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .any(|e| e["key"] == "feature.x" && e["value"] == "off"),
        "{}",
        w.out
    );
    let watch = c.spawn_listening(&["kv", "watch", "cfg", "feature.x", "--count", "2"]);
    c.ok(&["kv", "put", "cfg", "feature.x", "live"]);
    let out = finish(watch);
    assert!(
        out.contains("PUT cfg > feature.x: off") && out.contains("PUT cfg > feature.x: live"),
        "{out}"
    );

    c.ok(&["kv", "del", "cfg", "feature.x"]);
    let r = c.run(&["kv", "get", "cfg", "feature.x"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("key not found"), "{}", r.err);
    assert_eq!(c.ok(&["kv", "ls", "cfg"]).out.trim(), "other");

    c.ok(&["kv", "rm", "cfg", "-f"]);
    assert!(c.ok(&["kv", "ls"]).out.contains("No Key-Value buckets"));
    let r = c.run(&["kv", "get", "cfg", "x"]);
    assert_eq!(r.code, 1, "{}", r.out);
}

#[test]
fn server_info_ping_check() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    let info = c.ok(&["server", "info"]);
    assert_eq!(info.field("JetStream"), "true");
    let ij = c.ok(&["server", "info", "--json"]).json();
    assert_eq!(ij["jetstream"], true);
    assert_eq!(ij["headers"], true);
    assert!(ij["jetstream_account"]["limits"].is_object(), "{ij}");
    let p = c.ok(&["server", "ping", "--count", "2"]);
    assert_eq!(
        p.out.lines().filter(|l| l.contains("rtt")).count(),
        2,
        "{}",
        p.out
    );

    let ok = c.ok(&["server", "check", "jetstream"]);
    assert!(ok.out.starts_with("JetStream OK"), "{}", ok.out);
    assert!(ok.out.contains("streams=0"), "{}", ok.out);
    c.ok(&["stream", "add", "Q", "--subjects", "q"]);
    c.ok(&["pub", "-J", "q", "x", "--count", "3"]);
    let r = c.run(&[
        "server",
        "check",
        "jetstream",
        "--stream",
        "Q",
        "--msgs-warn",
        "2",
        "--msgs-crit",
        "10",
    ]);
    assert_eq!(r.code, 1, "{}", r.out);
    assert!(
        r.out.starts_with("JetStream WARNING") && r.out.contains("Q_msgs=3"),
        "{}",
        r.out
    );
    let r = c.run(&[
        "server",
        "check",
        "jetstream",
        "--stream",
        "Q",
        "--msgs-crit",
        "3",
        "--json",
    ]);
    assert_eq!(r.code, 2, "{}", r.out);
    assert_eq!(r.json()["status"], "CRITICAL");
    let r = c.run(&["server", "check", "jetstream", "--stream", "NOPE"]);
    assert_eq!(r.code, 2, "{}", r.out);
    assert!(r.out.contains("stream not found (10059)"), "{}", r.out);
}

#[test]
fn server_check_critical_without_jetstream_or_server() {
    let s = TestServer::start();
    let c = Ctl::new(&s);
    assert_eq!(c.ok(&["server", "info"]).field("JetStream"), "false");
    let r = c.run(&["server", "check", "jetstream"]);
    assert_eq!(r.code, 2, "{}", r.out);
    assert!(r.out.starts_with("JetStream CRITICAL"), "{}", r.out);
    let r = c.run(&["stream", "ls"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("JetStream not enabled"), "{}", r.err);
    drop(s);
    let r = c.run(&["server", "check", "jetstream", "--timeout", "1s"]);
    assert_eq!(r.code, 2, "{}", r.out);
    assert!(r.out.contains("connection failed"), "{}", r.out);
}

#[test]
fn check_thresholds_against_account_limits_with_user_password() {
    let conf = r#"
accounts {
  A: { jetstream: { max_file: 10K, max_mem: 10K }, users: [{user: a, password: pw}] }
}
"#;
    let s = TestServer::start_js_with(&[], Some(conf));
    let c = Ctl::new(&s);
    let auth = ["--user", "a", "--password", "pw"];
    let with = |extra: &[&str]| -> Vec<String> {
        extra
            .iter()
            .chain(auth.iter())
            .map(|x| (*x).to_owned())
            .collect()
    };
    let run = |extra: &[&str]| {
        let args = with(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        c.run(&refs)
    };
    assert_eq!(
        run(&["stream", "add", "F", "--subjects", "f", "--max-bytes", "8K"]).code,
        0
    );
    let body = "x".repeat(1000);
    assert_eq!(run(&["pub", "-J", "f", &body, "--count", "5"]).code, 0);
    let r = run(&["server", "check", "jetstream", "--json"]);
    assert_eq!(r.code, 0, "{}", r.out);
    let used = r.json()["account"]["storage"].as_u64().unwrap();
    assert!(used > 5000 && used < 8000, "{used}");
    let r = run(&[
        "server",
        "check",
        "jetstream",
        "--store-warn",
        "30",
        "--store-crit",
        "95",
    ]);
    assert_eq!(r.code, 1, "{}", r.out);
    assert!(r.out.starts_with("JetStream WARNING: storage"), "{}", r.out);
    let r = run(&[
        "server",
        "check",
        "jetstream",
        "--store-warn",
        "10",
        "--store-crit",
        "40",
    ]);
    assert_eq!(r.code, 2, "{}", r.out);
    assert!(r.out.contains("storage_pct="), "{}", r.out);
    // Wrong password: connection refused, exit 1.
    let r = c.run(&["stream", "ls", "--user", "a", "--password", "nope"]);
    assert_eq!(r.code, 1);
}

#[test]
fn contexts_select_the_server() {
    let s = TestServer::start_js();
    let c = Ctl::new(&s);
    let url = s.url();
    c.ok(&["stream", "add", "CTX", "--subjects", "ctx"]);
    // The first context saved is selected.
    let add = Ctl::output(c.cmd(
        false,
        &[
            "context",
            "add",
            "dev",
            "--server",
            &url,
            "--description",
            "test server",
        ],
    ));
    assert_eq!(add.code, 0, "{}", add.err);
    c.run_bare(&["context", "add", "other", "--server", "nats://127.0.0.1:1"])
        .ok();
    let ls = c.run_bare(&["context", "ls"]).ok();
    assert!(
        ls.out
            .lines()
            .any(|l| l.starts_with("dev*") && l.contains(&url)),
        "{}",
        ls.out
    );
    let lj = c.run_bare(&["context", "ls", "--json"]).ok().json();
    assert_eq!(lj.as_array().unwrap().len(), 2);
    // The selected context is used when no --server is given.
    let r = c.run_bare(&["stream", "ls"]).ok();
    assert!(r.out.contains("CTX"), "{}", r.out);
    // --context picks another; --server overrides the context.
    let r = c.run_bare(&["stream", "ls", "--context", "other", "--timeout", "1s"]);
    assert_eq!(r.code, 1, "{}", r.out);
    c.run_bare(&["context", "select", "other"]).ok();
    assert_eq!(c.run_bare(&["stream", "ls", "--timeout", "1s"]).code, 1);
    assert!(c
        .run_bare(&["-s", &url, "stream", "ls"])
        .ok()
        .out
        .contains("CTX"));
    c.run_bare(&["context", "rm", "other"]).ok();
    c.run_bare(&["context", "select", "dev"]).ok();
    let info = c.run_bare(&["context", "info", "--json"]).ok().json();
    assert_eq!(info["url"], url.as_str());
    let r = c.run_bare(&["context", "select", "missing"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("unknown context"), "{}", r.err);
    // Context files are private.
    let f = c.cfg.path().join("sealctl/contexts/dev.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(f).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn creds_file_and_context_with_creds() {
    use sealstream::auth::jwt::claims::AccountLimits;
    use sealstream::auth::nkeys::{KeyPair, Role};
    use support::jwt::{open_user, user_jwt, World};
    let w = World::new();
    let t = w.tenant("ACME", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&t]));
    let c = Ctl::new(&s);
    let user = KeyPair::generate(Role::User);
    let token = user_jwt(&t.key, &user, "svc", open_user(), |_| {});
    let dir = tempfile::tempdir().unwrap();
    let creds = write(
        dir.path(),
        "svc.creds",
        &sealstream::auth::creds::format_creds(&token, &user.seed()),
    );
    let creds = creds.to_str().unwrap();
    // Without credentials the server refuses; with them it answers.
    assert_eq!(c.run(&["server", "ping", "--count", "1"]).code, 1);
    let info = c.ok(&["server", "info", "--creds", creds]);
    assert_eq!(info.field("Auth required"), "true");
    let rep = c.spawn_listening(&["reply", "svc.x", "ok", "--count", "1", "--creds", creds]);
    let add = Ctl::output(c.cmd(true, &["context", "add", "acme", "--creds", creds]));
    assert_eq!(add.code, 0, "{}", add.err);
    assert_eq!(
        c.run_bare(&["req", "svc.x", "q", "--raw"]).ok().out.trim(),
        "ok"
    );
    finish(rep);
}

#[test]
fn tls_with_client_certificates() {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType,
    };
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, "ctl test CA");
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    let leaf = |cn: &str, sans: Vec<SanType>| {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.subject_alt_names = sans;
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (scert, skey) = leaf(
        "server",
        vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress("127.0.0.1".parse().unwrap()),
        ],
    );
    let (ccert, ckey) = leaf("client", vec![]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca_f = write(d, "ca.pem", &ca.pem());
    let sc = write(d, "server.pem", &scert);
    let sk = write(d, "server-key.pem", &skey);
    let cc = write(d, "client.pem", &ccert);
    let ck = write(d, "client-key.pem", &ckey);
    let conf = format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}\n",
        sc.display(),
        sk.display(),
        ca_f.display()
    );
    let s = TestServer::start_js_with(&[], Some(&conf));
    let c = Ctl::new(&s);
    let (ca_s, cc_s, ck_s) = (
        ca_f.to_str().unwrap(),
        cc.to_str().unwrap(),
        ck.to_str().unwrap(),
    );
    let tls = ["--tlsca", ca_s, "--tlscert", cc_s, "--tlskey", ck_s];
    let mut args = vec!["server", "info"];
    args.extend(tls);
    let info = c.ok(&args);
    assert_eq!(info.field("TLS required"), "true");
    let mut args = vec!["stream", "add", "TLS", "--subjects", "tls.>"];
    args.extend(tls);
    c.ok(&args);
    // No client certificate: refused.
    let r = c.run(&["server", "info", "--tlsca", ca_s, "--timeout", "2s"]);
    assert_eq!(r.code, 1, "{}", r.out);
}
