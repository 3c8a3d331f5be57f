//! JetStream consumers as clients see them (spec `jetstream-api.md` §6–§8): the consumer
//! create subject forms and their errors, config defaults and info numbers, deliver policies,
//! pull requests and their 404/408/409 statuses, the 9-token ack subject, every ack body,
//! redelivery (ack wait, NAK delay, backoff, max deliver), push delivery with queue groups,
//! idle heartbeats and flow control, retention policies and ephemeral clean-up.
//!
//! API calls go through core requests with JSON bodies so the exact error codes are visible;
//! byte-exact checks (status lines, ack subjects, empty ack replies) use a raw connection.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use async_nats::{Client, Message, StatusCode};
use futures::StreamExt;
use serde_json::{json, Value};
use support::{Raw, TestServer};

// ---------------------------------------------------------------------------------------
// helpers

async fn client(s: &TestServer) -> Client {
    async_nats::connect(s.url()).await.expect("connect")
}

/// One JetStream API call: a core request with a JSON body, the reply parsed.
async fn api(c: &Client, subject: &str, body: Value) -> Value {
    let payload = if body.is_null() {
        bytes::Bytes::new()
    } else {
        serde_json::to_vec(&body).unwrap().into()
    };
    let m = tokio::time::timeout(
        Duration::from_secs(5),
        c.request(subject.to_owned(), payload),
    )
    .await
    .unwrap_or_else(|_| panic!("{subject}: no reply within 5s"))
    .unwrap_or_else(|e| panic!("{subject}: {e}"));
    serde_json::from_slice(&m.payload)
        .unwrap_or_else(|e| panic!("{subject}: reply not JSON ({e}): {:?}", m.payload))
}

/// The `err_code` of an API error reply, if it is one.
fn err_code(v: &Value) -> Option<u64> {
    v.get("error").and_then(|e| e["err_code"].as_u64())
}

fn assert_ok(v: &Value, what: &str) {
    assert!(v.get("error").is_none(), "{what}: unexpected error {v}");
}

fn assert_err(v: &Value, code: u64, err_code_want: u64, what: &str) {
    assert_eq!(err_code(v), Some(err_code_want), "{what}: {v}");
    assert_eq!(v["error"]["code"].as_u64(), Some(code), "{what}: {v}");
}

async fn add_stream(c: &Client, config: Value) -> Value {
    let name = config["name"].as_str().unwrap().to_owned();
    let v = api(c, &format!("$JS.API.STREAM.CREATE.{name}"), config).await;
    assert_ok(&v, "stream create");
    v
}

async fn stream_info(c: &Client, stream: &str) -> Value {
    let v = api(c, &format!("$JS.API.STREAM.INFO.{stream}"), Value::Null).await;
    assert_ok(&v, "stream info");
    v
}

async fn stream_msgs(c: &Client, stream: &str) -> u64 {
    stream_info(c, stream).await["state"]["messages"]
        .as_u64()
        .unwrap()
}

/// Publishes and waits for the pub-ack; returns the stream sequence.
async fn publish(c: &Client, subject: &str, payload: &[u8]) -> u64 {
    let m = tokio::time::timeout(
        Duration::from_secs(5),
        c.request(subject.to_owned(), bytes::Bytes::copy_from_slice(payload)),
    )
    .await
    .expect("pub-ack within 5s")
    .expect("pub-ack");
    let v: Value = serde_json::from_slice(&m.payload).unwrap();
    assert!(v.get("error").is_none(), "publish {subject}: {v}");
    v["seq"].as_u64().unwrap()
}

/// Creates (or updates) `name` via `CONSUMER.CREATE.<S>.<C>`.
async fn add_consumer(c: &Client, stream: &str, name: &str, config: Value) -> Value {
    let v = api(
        c,
        &format!("$JS.API.CONSUMER.CREATE.{stream}.{name}"),
        json!({"stream_name": stream, "config": config}),
    )
    .await;
    assert_ok(&v, "consumer create");
    v
}

async fn consumer_info(c: &Client, stream: &str, name: &str) -> Value {
    let v = api(
        c,
        &format!("$JS.API.CONSUMER.INFO.{stream}.{name}"),
        Value::Null,
    )
    .await;
    assert_ok(&v, "consumer info");
    v
}

/// What one pull request produced: the messages, then the status that ended it (if any).
struct Pulled {
    msgs: Vec<Message>,
    status: Option<Message>,
}

impl Pulled {
    fn status_code(&self) -> Option<u16> {
        self.status
            .as_ref()
            .and_then(|m| m.status)
            .map(|s| s.as_u16())
    }
    fn description(&self) -> String {
        self.status
            .as_ref()
            .and_then(|m| m.description.clone())
            .unwrap_or_default()
    }
    fn stream_seqs(&self) -> Vec<u64> {
        self.msgs.iter().map(|m| ack_meta(m).stream_seq).collect()
    }
}

/// Sends one `MSG.NEXT` request and collects until `want` messages arrived, a terminal status
/// came (heartbeats are skipped), or `limit` passed.
async fn pull(
    c: &Client,
    stream: &str,
    consumer: &str,
    req: Value,
    want: usize,
    limit: Duration,
) -> Pulled {
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.unwrap();
    let body = if req.is_null() {
        bytes::Bytes::new()
    } else {
        serde_json::to_vec(&req).unwrap().into()
    };
    c.publish_with_reply(
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
        inbox,
        body,
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + limit;
    let mut out = Pulled {
        msgs: Vec::new(),
        status: None,
    };
    while out.msgs.len() < want {
        let Ok(Some(m)) = tokio::time::timeout_at(deadline, sub.next()).await else {
            break;
        };
        match m.status {
            Some(s) if s.as_u16() == 100 => continue,
            Some(_) => {
                out.status = Some(m);
                break;
            }
            None => out.msgs.push(m),
        }
    }
    out
}

/// The numbers carried by a v1 ack subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AckMeta {
    delivered: u64,
    stream_seq: u64,
    consumer_seq: u64,
    pending: u64,
}

fn parse_ack(reply: &str) -> AckMeta {
    let t: Vec<&str> = reply.split('.').collect();
    assert_eq!(t.len(), 9, "v1 ack subject has 9 tokens: {reply}");
    assert_eq!((t[0], t[1]), ("$JS", "ACK"), "{reply}");
    let n = |i: usize| -> u64 {
        t[i].parse()
            .unwrap_or_else(|_| panic!("token {i} of {reply}"))
    };
    assert!(n(7) > 1_000_000_000_000_000_000, "timestamp in ns: {reply}");
    AckMeta {
        delivered: n(4),
        stream_seq: n(5),
        consumer_seq: n(6),
        pending: n(8),
    }
}

fn ack_meta(m: &Message) -> AckMeta {
    parse_ack(
        m.reply
            .as_ref()
            .expect("delivery has an ack subject")
            .as_str(),
    )
}

/// Acks (or naks, ...) and waits until the consumer took it: the server answers an ack that
/// carries a reply once the consumer applied it. A round trip (PING) alone is not enough:
/// nats-server works acks and pull requests off separate queues, so a pull sent after an
/// ack may be served before it (seen once in CI: a NAK'd message not yet redelivered).
async fn ack(c: &Client, m: &Message, body: &str) {
    ack_sync(c, m, body).await;
}

/// Ack with a reply subject: the server answers with an empty message once processed.
async fn ack_sync(c: &Client, m: &Message, body: &str) {
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        c.request(m.reply.clone().unwrap(), body.to_owned().into()),
    )
    .await
    .expect("ack reply within 5s")
    .expect("ack reply");
    assert!(r.payload.is_empty(), "ack reply is empty: {:?}", r.payload);
}

/// A raw message as delivered on the wire.
#[derive(Debug)]
struct RawMsg {
    subject: String,
    reply: Option<String>,
    headers: Option<String>,
    payload: Vec<u8>,
}

/// Reads the next MSG/HMSG (answering PINGs, skipping INFO/PONG/+OK).
fn raw_next(r: &mut Raw, limit: Duration) -> Option<RawMsg> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let line = r.read_line(left)?;
        if line == "PING" {
            r.send(b"PONG\r\n");
            continue;
        }
        if line.starts_with("INFO ") || line == "PONG" || line == "+OK" {
            continue;
        }
        let parts: Vec<&str> = line.split(' ').collect();
        let (hdr_len, total, reply) = match parts[0] {
            "MSG" => {
                let total: usize = parts.last().unwrap().parse().unwrap();
                let reply = (parts.len() == 5).then(|| parts[3].to_owned());
                (None, total, reply)
            }
            "HMSG" => {
                let total: usize = parts[parts.len() - 1].parse().unwrap();
                let hdr: usize = parts[parts.len() - 2].parse().unwrap();
                let reply = (parts.len() == 6).then(|| parts[3].to_owned());
                (Some(hdr), total, reply)
            }
            other => panic!("unexpected protocol line {other:?}: {line}"),
        };
        let body = r
            .read_exact_bytes(total + 2, Duration::from_secs(5))
            .expect("message body");
        assert_eq!(&body[total..], b"\r\n", "body followed by CRLF");
        let (headers, payload) = match hdr_len {
            Some(h) => (
                Some(String::from_utf8_lossy(&body[..h]).into_owned()),
                body[h..total].to_vec(),
            ),
            None => (None, body[..total].to_vec()),
        };
        return Some(RawMsg {
            subject: parts[1].to_owned(),
            reply,
            headers,
            payload,
        });
    }
}

/// A raw connection subscribed to `_R.>` (sid 1).
fn raw_client(s: &TestServer) -> Raw {
    let mut r = s.raw();
    r.handshake("");
    r.send(b"SUB _R.> 1\r\nPING\r\n");
    r.expect_line("PONG");
    r
}

fn raw_pub(r: &mut Raw, subject: &str, reply: &str, body: &[u8]) {
    let mut b = format!("PUB {subject} {reply} {}\r\n", body.len()).into_bytes();
    b.extend_from_slice(body);
    b.extend_from_slice(b"\r\n");
    r.send(&b);
}

// ---------------------------------------------------------------------------------------
// creating consumers

#[tokio::test]
async fn consumer_create_subject_forms_and_their_errors() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "CS", "subjects": ["cs.>"]})).await;
    for subj in ["cs.a", "cs.b", "cs.a"] {
        publish(&c, subj, b"x").await;
    }

    // CONSUMER.CREATE.<S>: a generated name; defaults echoed; num_pending exact.
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS",
        json!({"stream_name": "CS", "config": {"ack_policy": "explicit"}}),
    )
    .await;
    assert_ok(&v, "ephemeral create");
    assert_eq!(
        v["type"], "io.nats.jetstream.api.v1.consumer_create_response",
        "{v}"
    );
    let generated = v["name"].as_str().unwrap();
    assert!(!generated.is_empty() && !generated.contains('.'), "{v}");
    assert_eq!(v["stream_name"], "CS");
    let cfg = &v["config"];
    assert_eq!(cfg["deliver_policy"], "all", "{v}");
    assert_eq!(cfg["ack_policy"], "explicit", "{v}");
    assert_eq!(cfg["ack_wait"], 30_000_000_000u64, "{v}");
    assert_eq!(cfg["replay_policy"], "instant", "{v}");
    assert_eq!(cfg["max_waiting"], 512, "{v}");
    assert_eq!(cfg["max_ack_pending"], 1000, "{v}");
    assert_eq!(cfg["max_deliver"], -1, "{v}");
    assert_eq!(cfg["inactive_threshold"], 5_000_000_000u64, "{v}");
    assert!(cfg.get("durable_name").is_none(), "{v}");
    assert_eq!(v["num_pending"], 3, "{v}");
    assert_eq!(v["num_ack_pending"], 0, "{v}");
    assert_eq!(v["num_waiting"], 0, "{v}");
    assert_eq!(v["num_redelivered"], 0, "{v}");
    assert_eq!(v["delivered"]["consumer_seq"], 0, "{v}");
    assert_eq!(v["delivered"]["stream_seq"], 0, "{v}");
    assert_eq!(v["ack_floor"]["stream_seq"], 0, "{v}");

    // ... but a durable name there is refused.
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS",
        json!({"stream_name": "CS", "config": {"durable_name": "d", "ack_policy": "explicit"}}),
    )
    .await;
    assert_err(&v, 400, 10020, "durable on CREATE.<S>");

    // CREATE.<S>.<C>: the subject names the consumer; a different config.name is replaced.
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.c1",
        json!({"stream_name": "CS", "config": {"name": "other", "ack_policy": "explicit"}}),
    )
    .await;
    assert_ok(&v, "named create");
    assert_eq!(v["name"], "c1", "{v}");

    // CREATE.<S>.<C>.<filter>: the filter must match filter_subject.
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.c2.cs.a",
        json!({"stream_name": "CS", "config": {"name": "c2", "ack_policy": "explicit",
            "filter_subject": "cs.b"}}),
    )
    .await;
    assert_err(&v, 400, 10131, "filter mismatch");
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.c2.cs.a",
        json!({"stream_name": "CS", "config": {"name": "c2", "ack_policy": "explicit",
            "filter_subject": "cs.a"}}),
    )
    .await;
    assert_ok(&v, "filtered create");
    assert_eq!(v["name"], "c2");
    assert_eq!(v["config"]["filter_subject"], "cs.a");
    assert_eq!(v["num_pending"], 2, "two of three messages match cs.a: {v}");

    // DURABLE.CREATE.<S>.<C>: durable_name must equal <C>.
    let v = api(
        &c,
        "$JS.API.CONSUMER.DURABLE.CREATE.CS.d1",
        json!({"stream_name": "CS", "config": {"durable_name": "d2", "ack_policy": "explicit"}}),
    )
    .await;
    assert_err(&v, 400, 10017, "durable mismatch");
    let v = api(
        &c,
        "$JS.API.CONSUMER.DURABLE.CREATE.CS.d1",
        json!({"stream_name": "CS", "config": {"durable_name": "d1", "ack_policy": "explicit"}}),
    )
    .await;
    assert_ok(&v, "legacy durable create");
    assert_eq!(v["name"], "d1");
    assert_eq!(v["config"]["durable_name"], "d1");

    // durable_name and name both given: the reference checks the subject first, so a durable
    // that differs from <C> is 10017 and a differing name is replaced (10132 is not reachable
    // through these subjects on nats-server 2.15).
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS",
        json!({"stream_name": "CS", "config": {"name": "n1", "durable_name": "n2",
            "ack_policy": "explicit"}}),
    )
    .await;
    assert_err(&v, 400, 10020, "durable on CREATE.<S> even with a name");
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.n1",
        json!({"stream_name": "CS", "config": {"name": "n1", "durable_name": "n2",
            "ack_policy": "explicit"}}),
    )
    .await;
    assert_err(&v, 400, 10017, "durable_name differs from <C>");
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.n2",
        json!({"stream_name": "CS", "config": {"name": "n1", "durable_name": "n2",
            "ack_policy": "explicit"}}),
    )
    .await;
    assert_ok(&v, "name replaced by <C> = durable_name");
    assert_eq!(v["name"], "n2", "{v}");

    // action create: identical config is fine, a different one is refused.
    let body = |ack_wait: u64, action: &str| {
        json!({"stream_name": "CS", "action": action, "config": {"durable_name": "a1",
            "ack_policy": "explicit", "ack_wait": ack_wait}})
    };
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.a1",
        body(2_000_000_000, "create"),
    )
    .await;
    assert_ok(&v, "create a1");
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.a1",
        body(2_000_000_000, "create"),
    )
    .await;
    assert_ok(&v, "identical re-create");
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.a1",
        body(3_000_000_000, "create"),
    )
    .await;
    assert_err(&v, 400, 10148, "create with different config");
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.a1",
        body(3_000_000_000, "update"),
    )
    .await;
    assert_ok(&v, "update existing");
    assert_eq!(v["config"]["ack_wait"], 3_000_000_000u64);
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.CS.nope",
        json!({"stream_name": "CS", "action": "update",
            "config": {"durable_name": "nope", "ack_policy": "explicit"}}),
    )
    .await;
    assert_err(&v, 400, 10149, "update of a missing consumer");

    // Unknown stream.
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.NOSUCH.x",
        json!({"stream_name": "NOSUCH", "config": {"durable_name": "x", "ack_policy": "explicit"}}),
    )
    .await;
    assert_err(&v, 404, 10059, "unknown stream");
}

#[tokio::test]
async fn consumer_info_delete_names_and_list() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "CI", "subjects": ["ci.>"]})).await;
    publish(&c, "ci.1", b"one").await;
    for name in ["beta", "alpha"] {
        add_consumer(
            &c,
            "CI",
            name,
            json!({"durable_name": name, "ack_policy": "explicit"}),
        )
        .await;
    }

    let v = consumer_info(&c, "CI", "alpha").await;
    assert_eq!(
        v["type"], "io.nats.jetstream.api.v1.consumer_info_response",
        "{v}"
    );
    assert_eq!(v["name"], "alpha");
    assert_eq!(v["stream_name"], "CI");
    assert_eq!(v["config"]["durable_name"], "alpha");
    assert_eq!(v["num_pending"], 1);

    let v = api(&c, "$JS.API.CONSUMER.NAMES.CI", Value::Null).await;
    assert_ok(&v, "names");
    let mut names: Vec<&str> = v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["alpha", "beta"], "{v}");
    assert_eq!(v["total"], 2, "{v}");

    let v = api(&c, "$JS.API.CONSUMER.LIST.CI", json!({})).await;
    assert_ok(&v, "list");
    let list = v["consumers"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{v}");
    assert!(list
        .iter()
        .all(|i| i["stream_name"] == "CI" && i["num_pending"] == 1));

    let v = api(&c, "$JS.API.CONSUMER.DELETE.CI.beta", Value::Null).await;
    assert_ok(&v, "delete");
    assert_eq!(v["success"], true, "{v}");
    let v = api(&c, "$JS.API.CONSUMER.INFO.CI.beta", Value::Null).await;
    assert_err(&v, 404, 10014, "info after delete");
    assert_eq!(v["error"]["description"], "consumer not found");
    let v = api(&c, "$JS.API.CONSUMER.DELETE.CI.beta", Value::Null).await;
    assert_err(&v, 404, 10014, "second delete");
    let v = api(&c, "$JS.API.CONSUMER.NAMES.CI", Value::Null).await;
    assert_eq!(v["consumers"], json!(["alpha"]), "{v}");
    let v = api(&c, "$JS.API.CONSUMER.INFO.NOSUCH.alpha", Value::Null).await;
    assert_err(&v, 404, 10059, "info on unknown stream");
}

#[tokio::test]
async fn deliver_policies_choose_the_starting_message() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "DP", "subjects": ["dp.*"]})).await;
    for subj in ["dp.a", "dp.b", "dp.a", "dp.c", "dp.b"] {
        publish(&c, subj, b"x").await;
    }
    let get = api(&c, "$JS.API.STREAM.MSG.GET.DP", json!({"seq": 4})).await;
    let time4 = get["message"]["time"].as_str().unwrap().to_owned();

    // (name, extra config, num_pending, first stream seq delivered)
    let cases: Vec<(&str, Value, u64, Vec<u64>)> = vec![
        (
            "all",
            json!({"deliver_policy": "all"}),
            5,
            vec![1, 2, 3, 4, 5],
        ),
        ("last", json!({"deliver_policy": "last"}), 1, vec![5]),
        (
            "seq",
            json!({"deliver_policy": "by_start_sequence", "opt_start_seq": 3}),
            3,
            vec![3, 4, 5],
        ),
        (
            "time",
            json!({"deliver_policy": "by_start_time", "opt_start_time": time4}),
            2,
            vec![4, 5],
        ),
        (
            "lps",
            json!({"deliver_policy": "last_per_subject", "filter_subject": "dp.*"}),
            3,
            vec![3, 4, 5],
        ),
    ];
    for (name, extra, pending, seqs) in cases {
        let mut cfg = json!({"durable_name": name, "ack_policy": "explicit"});
        cfg.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let v = add_consumer(&c, "DP", name, cfg).await;
        assert_eq!(v["num_pending"], pending, "{name}: {v}");
        let got = pull(
            &c,
            "DP",
            name,
            json!({"batch": 10, "expires": 500_000_000}),
            10,
            Duration::from_secs(3),
        )
        .await;
        assert_eq!(got.stream_seqs(), seqs, "{name}");
        assert_eq!(got.status_code(), Some(408), "{name}");
    }

    let v = add_consumer(
        &c,
        "DP",
        "new",
        json!({"durable_name": "new", "ack_policy": "explicit", "deliver_policy": "new"}),
    )
    .await;
    assert_eq!(v["num_pending"], 0, "{v}");
    assert_eq!(
        v["delivered"]["stream_seq"], 5,
        "new starts after last_seq: {v}"
    );
    publish(&c, "dp.d", b"y").await;
    let got = pull(
        &c,
        "DP",
        "new",
        json!({"batch": 10, "expires": 500_000_000}),
        10,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.stream_seqs(), [6]);

    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.DP.bad",
        json!({"stream_name": "DP", "config": {"durable_name": "bad", "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence"}}),
    )
    .await;
    assert_err(&v, 400, 10094, "by_start_sequence without opt_start_seq");
    // The reference also wants a filter for last_per_subject (clients always send one).
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.DP.bad",
        json!({"stream_name": "DP", "config": {"durable_name": "bad", "ack_policy": "explicit",
            "deliver_policy": "last_per_subject"}}),
    )
    .await;
    assert_err(&v, 400, 10094, "last_per_subject without filter_subject");
}

// ---------------------------------------------------------------------------------------
// pull requests

#[test]
fn pull_batch_then_408_with_pending_headers_and_nine_token_ack_subjects() {
    let s = TestServer::start_js();
    let mut r = raw_client(&s);
    raw_pub(
        &mut r,
        "$JS.API.STREAM.CREATE.PR",
        "_R.api",
        br#"{"name":"PR","subjects":["pr.>"]}"#,
    );
    raw_next(&mut r, Duration::from_secs(5)).expect("stream create reply");
    for (i, subj) in ["pr.a", "pr.b", "pr.c"].iter().enumerate() {
        raw_pub(&mut r, subj, "_R.pa", format!("m{i}").as_bytes());
        let ack = raw_next(&mut r, Duration::from_secs(5)).expect("pub-ack");
        let v: Value = serde_json::from_slice(&ack.payload).unwrap();
        assert_eq!(v["seq"], i + 1, "{v}");
    }
    raw_pub(
        &mut r,
        "$JS.API.CONSUMER.CREATE.PR.p",
        "_R.api",
        br#"{"stream_name":"PR","config":{"durable_name":"p","ack_policy":"explicit"}}"#,
    );
    raw_next(&mut r, Duration::from_secs(5)).expect("consumer create reply");

    // batch 5 with three available: three messages, then 408 when it expires.
    let started = Instant::now();
    raw_pub(
        &mut r,
        "$JS.API.CONSUMER.MSG.NEXT.PR.p",
        "_R.f1",
        br#"{"batch":5,"expires":1000000000}"#,
    );
    for i in 0..3u64 {
        let m = raw_next(&mut r, Duration::from_secs(5)).expect("delivery");
        assert_eq!(m.subject, ["pr.a", "pr.b", "pr.c"][i as usize]);
        assert_eq!(m.payload, format!("m{i}").into_bytes());
        assert!(m.headers.is_none(), "stored without headers: {m:?}");
        let reply = m.reply.unwrap();
        assert!(reply.starts_with("$JS.ACK.PR.p."), "{reply}");
        let meta = parse_ack(&reply);
        assert_eq!(
            meta,
            AckMeta {
                delivered: 1,
                stream_seq: i + 1,
                consumer_seq: i + 1,
                pending: 2 - i
            },
            "{reply}"
        );
    }
    let st = raw_next(&mut r, Duration::from_secs(5)).expect("408 status");
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "not before expires"
    );
    assert_eq!(st.subject, "_R.f1");
    assert!(st.payload.is_empty());
    assert_eq!(
        st.headers.as_deref(),
        Some("NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 2\r\nNats-Pending-Bytes: 0\r\n\r\n")
    );

    // no_wait with nothing left: 404 straight away.
    raw_pub(
        &mut r,
        "$JS.API.CONSUMER.MSG.NEXT.PR.p",
        "_R.f2",
        br#"{"batch":1,"no_wait":true}"#,
    );
    let st = raw_next(&mut r, Duration::from_secs(2)).expect("404 status");
    assert_eq!(st.subject, "_R.f2");
    assert_eq!(
        st.headers.as_deref(),
        Some("NATS/1.0 404 No Messages\r\n\r\n")
    );

    // expires with nothing pending: 408 carrying the whole batch as pending.
    raw_pub(
        &mut r,
        "$JS.API.CONSUMER.MSG.NEXT.PR.p",
        "_R.f3",
        br#"{"batch":4,"expires":300000000,"max_bytes":1000}"#,
    );
    let st = raw_next(&mut r, Duration::from_secs(3)).expect("408 status");
    assert_eq!(st.subject, "_R.f3");
    assert_eq!(
        st.headers.as_deref(),
        Some("NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 4\r\nNats-Pending-Bytes: 1000\r\n\r\n")
    );

    // A heartbeat longer than half the expiry is refused.
    raw_pub(
        &mut r,
        "$JS.API.CONSUMER.MSG.NEXT.PR.p",
        "_R.f4",
        br#"{"batch":1,"expires":1000000000,"idle_heartbeat":800000000}"#,
    );
    let st = raw_next(&mut r, Duration::from_secs(2)).expect("400 status");
    assert_eq!(st.subject, "_R.f4");
    let h = st.headers.unwrap();
    assert!(
        h.starts_with("NATS/1.0 400 Bad Request"),
        "heartbeat too large: {h:?}"
    );

    // A consumer that does not exist has no listener: no-responders.
    raw_pub(&mut r, "$JS.API.CONSUMER.MSG.NEXT.PR.nobody", "_R.f5", b"");
    let st = raw_next(&mut r, Duration::from_secs(2)).expect("503 status");
    assert_eq!(st.subject, "_R.f5");
    assert!(
        st.headers.unwrap().starts_with("NATS/1.0 503"),
        "no responders"
    );
}

#[tokio::test]
async fn pull_no_wait_delivers_what_is_there_then_404() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "NW", "subjects": ["nw"]})).await;
    add_consumer(
        &c,
        "NW",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    let got = pull(
        &c,
        "NW",
        "p",
        json!({"batch": 3, "no_wait": true}),
        3,
        Duration::from_secs(3),
    )
    .await;
    assert!(got.msgs.is_empty());
    assert_eq!(got.status_code(), Some(404));
    assert_eq!(got.description(), "No Messages");
    publish(&c, "nw", b"1").await;
    publish(&c, "nw", b"2").await;
    let got = pull(
        &c,
        "NW",
        "p",
        json!({"batch": 5, "no_wait": true}),
        5,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.stream_seqs(), [1, 2]);
    assert_eq!(got.status_code(), Some(404), "no_wait ends early with 404");
    // A fully satisfied request ends silently.
    publish(&c, "nw", b"3").await;
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.unwrap();
    c.publish_with_reply("$JS.API.CONSUMER.MSG.NEXT.NW.p", inbox, "1".into())
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(3), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ack_meta(&m).stream_seq, 3);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), sub.next())
            .await
            .is_err(),
        "no status after a filled batch"
    );
}

#[tokio::test]
async fn pull_waits_for_messages_published_later() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PW", "subjects": ["pw"]})).await;
    add_consumer(
        &c,
        "PW",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    let c2 = c.clone();
    let waiter = tokio::spawn(async move {
        pull(
            &c2,
            "PW",
            "p",
            json!({"batch": 2, "expires": 3_000_000_000u64}),
            2,
            Duration::from_secs(5),
        )
        .await
    });
    // Wait until the request is queued, then publish.
    let mut waiting = 0;
    for _ in 0..100 {
        waiting = consumer_info(&c, "PW", "p").await["num_waiting"]
            .as_u64()
            .unwrap();
        if waiting == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(waiting, 1, "the pull request is counted in num_waiting");
    publish(&c, "pw", b"a").await;
    publish(&c, "pw", b"b").await;
    let got = waiter.await.unwrap();
    assert_eq!(got.stream_seqs(), [1, 2]);
    assert!(got.status.is_none());
}

#[tokio::test]
async fn pull_max_bytes_caps_a_batch() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "MB", "subjects": ["mb"]})).await;
    for _ in 0..3 {
        publish(&c, "mb", &[b'x'; 1000]).await;
    }
    add_consumer(
        &c,
        "MB",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    // Each message is a little over 1000 bytes; 2500 allows two.
    let got = pull(
        &c,
        "MB",
        "p",
        json!({"batch": 10, "expires": 5_000_000_000u64, "max_bytes": 2500}),
        10,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.stream_seqs(), [1, 2]);
    assert_eq!(got.status_code(), Some(409), "{}", got.description());
    assert_eq!(got.description(), "Message Size Exceeds MaxBytes");
    let h = got.status.as_ref().unwrap().headers.clone().unwrap();
    assert_eq!(h.get("Nats-Pending-Messages").unwrap().as_str(), "8");
    let left: u64 = h
        .get("Nats-Pending-Bytes")
        .unwrap()
        .as_str()
        .parse()
        .unwrap();
    assert!(
        left < 500,
        "bytes left after two 1000-byte messages: {left}"
    );
    // The third is still there for the next request.
    let got = pull(
        &c,
        "MB",
        "p",
        json!({"batch": 10, "no_wait": true}),
        10,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.stream_seqs(), [3]);
}

#[tokio::test]
async fn pull_on_a_push_consumer_is_409() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PP", "subjects": ["pp"]})).await;
    add_consumer(
        &c,
        "PP",
        "push",
        json!({"durable_name": "push", "ack_policy": "explicit", "deliver_subject": "pp.out"}),
    )
    .await;
    let got = pull(
        &c,
        "PP",
        "push",
        json!({"batch": 1, "expires": 1_000_000_000}),
        1,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.status_code(), Some(409));
    assert_eq!(got.description(), "Consumer is push based");
}

#[tokio::test]
async fn deleting_a_consumer_ends_its_waiting_pulls_with_409() {
    waiting_pull_ends_with_409_on("DEL", "$JS.API.CONSUMER.DELETE.DEL.p").await;
}

/// Deleting the stream ends its consumers' waiting pulls the same way (an ordered consumer's
/// pull loop then stops instead of waiting for its request to expire).
#[tokio::test]
async fn deleting_a_stream_ends_its_consumers_waiting_pulls_with_409() {
    waiting_pull_ends_with_409_on("SDEL", "$JS.API.STREAM.DELETE.SDEL").await;
}

/// Queues a long pull on consumer `p` of a fresh `stream`, calls `delete`, and expects the
/// pull to end at once with `409 Consumer Deleted`.
async fn waiting_pull_ends_with_409_on(stream: &'static str, delete: &str) {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(
        &c,
        json!({"name": stream, "subjects": [stream.to_lowercase()]}),
    )
    .await;
    add_consumer(
        &c,
        stream,
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    let c2 = c.clone();
    let waiter = tokio::spawn(async move {
        pull(
            &c2,
            stream,
            "p",
            json!({"batch": 1, "expires": 10_000_000_000u64}),
            1,
            Duration::from_secs(8),
        )
        .await
    });
    let mut queued = false;
    for _ in 0..100 {
        if consumer_info(&c, stream, "p").await["num_waiting"] == 1 {
            queued = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(queued, "pull request queued");
    let v = api(&c, delete, Value::Null).await;
    assert_ok(&v, "delete");
    let started = Instant::now();
    let got = waiter.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(got.status_code(), Some(409));
    assert_eq!(got.description(), "Consumer Deleted");
}

// ---------------------------------------------------------------------------------------
// acks and redelivery

#[tokio::test]
async fn ack_moves_the_floor_and_info_numbers() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "AK", "subjects": ["ak"]})).await;
    for i in 0..3 {
        publish(&c, "ak", format!("{i}").as_bytes()).await;
    }
    add_consumer(
        &c,
        "AK",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    let got = pull(
        &c,
        "AK",
        "p",
        json!({"batch": 2}),
        2,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.msgs.len(), 2);
    let v = consumer_info(&c, "AK", "p").await;
    assert_eq!(v["delivered"]["consumer_seq"], 2, "{v}");
    assert_eq!(v["delivered"]["stream_seq"], 2, "{v}");
    assert_eq!(v["ack_floor"]["stream_seq"], 0, "{v}");
    assert_eq!(v["num_ack_pending"], 2, "{v}");
    assert_eq!(v["num_pending"], 1, "{v}");

    ack(&c, &got.msgs[0], "+ACK").await;
    let v = consumer_info(&c, "AK", "p").await;
    assert_eq!(v["ack_floor"]["stream_seq"], 1, "{v}");
    assert_eq!(v["ack_floor"]["consumer_seq"], 1, "{v}");
    assert_eq!(v["num_ack_pending"], 1, "{v}");

    // An empty body is an ack too.
    ack(&c, &got.msgs[1], "").await;
    let v = consumer_info(&c, "AK", "p").await;
    assert_eq!(v["ack_floor"]["stream_seq"], 2, "{v}");
    assert_eq!(v["num_ack_pending"], 0, "{v}");
    assert_eq!(v["num_redelivered"], 0, "{v}");
    // Limits retention keeps acked messages.
    assert_eq!(stream_msgs(&c, "AK").await, 3);
}

#[test]
fn ack_with_a_reply_subject_gets_an_empty_reply() {
    let s = TestServer::start_js();
    let mut r = raw_client(&s);
    raw_pub(
        &mut r,
        "$JS.API.STREAM.CREATE.AR",
        "_R.api",
        br#"{"name":"AR","subjects":["ar"]}"#,
    );
    raw_next(&mut r, Duration::from_secs(5)).unwrap();
    for _ in 0..2 {
        raw_pub(&mut r, "ar", "_R.pa", b"m");
        raw_next(&mut r, Duration::from_secs(5)).unwrap();
    }
    raw_pub(
        &mut r,
        "$JS.API.CONSUMER.CREATE.AR.p",
        "_R.api",
        br#"{"stream_name":"AR","config":{"durable_name":"p","ack_policy":"explicit"}}"#,
    );
    raw_next(&mut r, Duration::from_secs(5)).unwrap();
    raw_pub(&mut r, "$JS.API.CONSUMER.MSG.NEXT.AR.p", "_R.f", b"2");
    let a = raw_next(&mut r, Duration::from_secs(5))
        .unwrap()
        .reply
        .unwrap();
    let b = raw_next(&mut r, Duration::from_secs(5))
        .unwrap()
        .reply
        .unwrap();
    for (subject, body, inbox) in [
        (&a, &b"+ACK"[..], "_R.ack1"),
        (&a, b"+ACK", "_R.ack2"), // duplicate ack: still answered
        (&b, b"+WPI", "_R.wpi"),
        (&b, b"+TERM", "_R.term"),
    ] {
        raw_pub(&mut r, subject, inbox, body);
        let m = raw_next(&mut r, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("reply to {:?}", String::from_utf8_lossy(body)));
        assert_eq!(m.subject, inbox);
        assert!(m.headers.is_none() && m.payload.is_empty(), "{m:?}");
    }
}

#[tokio::test]
async fn nak_redelivers_with_delivered_two() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "NK", "subjects": ["nk"]})).await;
    publish(&c, "nk", b"a").await;
    publish(&c, "nk", b"b").await;
    add_consumer(
        &c,
        "NK",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    let got = pull(
        &c,
        "NK",
        "p",
        json!({"batch": 1}),
        1,
        Duration::from_secs(3),
    )
    .await;
    let first = ack_meta(&got.msgs[0]);
    assert_eq!(
        (first.delivered, first.stream_seq, first.consumer_seq),
        (1, 1, 1)
    );
    ack(&c, &got.msgs[0], "-NAK").await;
    let got = pull(
        &c,
        "NK",
        "p",
        json!({"batch": 1}),
        1,
        Duration::from_secs(3),
    )
    .await;
    let again = ack_meta(&got.msgs[0]);
    assert_eq!(
        (again.delivered, again.stream_seq, again.consumer_seq),
        (2, 1, 2),
        "same stream seq, new consumer seq, delivered 2"
    );
    assert_eq!(got.msgs[0].payload, "a");
    let v = consumer_info(&c, "NK", "p").await;
    assert_eq!(v["num_redelivered"], 1, "{v}");
    assert_eq!(v["delivered"]["consumer_seq"], 2, "{v}");
}

#[tokio::test]
async fn ack_floor_counts_from_the_first_delivery_of_a_redelivered_message() {
    // Nothing acked yet: the floor stays at 0 however often the first message is redelivered
    // (the pending entry keeps its first consumer sequence); once it is acked, the floor moves
    // past the latest delivery.
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "AF", "subjects": ["af"]})).await;
    publish(&c, "af", b"a").await;
    add_consumer(
        &c,
        "AF",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    let mut last = None;
    for delivered in 1..=3 {
        let got = pull(
            &c,
            "AF",
            "p",
            json!({"batch": 1}),
            1,
            Duration::from_secs(3),
        )
        .await;
        let m = ack_meta(&got.msgs[0]);
        assert_eq!(
            (m.delivered, m.stream_seq, m.consumer_seq),
            (delivered, 1, delivered)
        );
        let v = consumer_info(&c, "AF", "p").await;
        assert_eq!(v["ack_floor"]["consumer_seq"], 0, "{v}");
        assert_eq!(v["ack_floor"]["stream_seq"], 0, "{v}");
        if delivered < 3 {
            ack(&c, &got.msgs[0], "-NAK").await;
        }
        last = got.msgs.into_iter().next();
    }
    ack_sync(&c, &last.unwrap(), "+ACK").await;
    let v = consumer_info(&c, "AF", "p").await;
    assert_eq!(v["ack_floor"]["consumer_seq"], 3, "{v}");
    assert_eq!(v["ack_floor"]["stream_seq"], 1, "{v}");
}

#[tokio::test]
async fn nak_with_delay_holds_the_message_back() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "ND", "subjects": ["nd"]})).await;
    publish(&c, "nd", b"a").await;
    add_consumer(
        &c,
        "ND",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    let got = pull(
        &c,
        "ND",
        "p",
        json!({"batch": 1}),
        1,
        Duration::from_secs(3),
    )
    .await;
    ack(&c, &got.msgs[0], r#"-NAK {"delay":800000000}"#).await;
    let naked = Instant::now();
    let none = pull(
        &c,
        "ND",
        "p",
        json!({"batch": 1, "no_wait": true}),
        1,
        Duration::from_secs(2),
    )
    .await;
    assert!(none.msgs.is_empty(), "not redelivered before the delay");
    let got = pull(
        &c,
        "ND",
        "p",
        json!({"batch": 1, "expires": 3_000_000_000u64}),
        1,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(got.msgs.len(), 1);
    assert!(
        naked.elapsed() >= Duration::from_millis(600),
        "{:?}",
        naked.elapsed()
    );
    assert_eq!(ack_meta(&got.msgs[0]).delivered, 2);
}

#[tokio::test]
async fn nak_with_delay_through_async_nats() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    let js = jetstream::new(c.clone());
    add_stream(&c, json!({"name": "NA", "subjects": ["na"]})).await;
    js.publish("na", "a".into()).await.unwrap().await.unwrap();
    let cons: consumer::PullConsumer = js
        .create_consumer_on_stream(
            consumer::pull::Config {
                durable_name: Some("p".into()),
                ack_policy: consumer::AckPolicy::Explicit,
                ..Default::default()
            },
            "NA",
        )
        .await
        .unwrap();
    let mut batch = cons
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(1))
        .messages()
        .await
        .unwrap();
    let m = batch.next().await.unwrap().unwrap();
    assert_eq!(m.info().unwrap().delivered, 1);
    m.ack_with(jetstream::AckKind::Nak(Some(Duration::from_millis(500))))
        .await
        .unwrap();
    let naked = Instant::now();
    let mut batch = cons
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(3))
        .messages()
        .await
        .unwrap();
    let m = batch.next().await.unwrap().unwrap();
    assert!(naked.elapsed() >= Duration::from_millis(350));
    let info = m.info().unwrap();
    assert_eq!((info.delivered, info.stream_sequence), (2, 1));
    m.double_ack().await.unwrap();
    let mut cons = cons;
    let info = cons.info().await.unwrap();
    assert_eq!(info.ack_floor.stream_sequence, 1);
    assert_eq!(info.num_ack_pending, 0);
}

#[tokio::test]
async fn ack_wait_expiry_redelivers_and_wpi_extends_it() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "AW", "subjects": ["aw.*"]})).await;
    add_consumer(
        &c,
        "AW",
        "plain",
        json!({"durable_name": "plain", "ack_policy": "explicit",
            "ack_wait": 800_000_000, "filter_subject": "aw.plain"}),
    )
    .await;
    add_consumer(
        &c,
        "AW",
        "wpi",
        json!({"durable_name": "wpi", "ack_policy": "explicit",
            "ack_wait": 2_000_000_000u64, "filter_subject": "aw.wpi"}),
    )
    .await;
    publish(&c, "aw.plain", b"p").await;
    publish(&c, "aw.wpi", b"w").await;

    // Unacked: redelivered after ack_wait.
    let got = pull(
        &c,
        "AW",
        "plain",
        json!({"batch": 1}),
        1,
        Duration::from_secs(3),
    )
    .await;
    let t0 = Instant::now();
    assert_eq!(ack_meta(&got.msgs[0]).delivered, 1);
    let got = pull(
        &c,
        "AW",
        "plain",
        json!({"batch": 1, "expires": 4_000_000_000u64}),
        1,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(got.msgs.len(), 1, "redelivered");
    assert!(
        t0.elapsed() >= Duration::from_millis(600),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(ack_meta(&got.msgs[0]).delivered, 2);
    assert_eq!(ack_meta(&got.msgs[0]).stream_seq, 1);

    // +WPI restarts the timer: at 2.6s (past the original 2s) nothing is redelivered yet.
    let got = pull(
        &c,
        "AW",
        "wpi",
        json!({"batch": 1}),
        1,
        Duration::from_secs(3),
    )
    .await;
    let t0 = Instant::now();
    let m = got.msgs.into_iter().next().unwrap();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    ack(&c, &m, "+WPI").await;
    tokio::time::sleep_until((t0 + Duration::from_millis(2600)).into()).await;
    let none = pull(
        &c,
        "AW",
        "wpi",
        json!({"batch": 1, "no_wait": true}),
        1,
        Duration::from_secs(2),
    )
    .await;
    assert!(none.msgs.is_empty(), "WPI extended the ack wait");
    let got = pull(
        &c,
        "AW",
        "wpi",
        json!({"batch": 1, "expires": 4_000_000_000u64}),
        1,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(got.msgs.len(), 1, "redelivered after the extended wait");
    assert_eq!(ack_meta(&got.msgs[0]).delivered, 2);
}

#[tokio::test]
async fn term_stops_redelivery() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "TM", "subjects": ["tm"]})).await;
    publish(&c, "tm", b"a").await;
    publish(&c, "tm", b"b").await;
    add_consumer(
        &c,
        "TM",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit", "ack_wait": 500_000_000}),
    )
    .await;
    let got = pull(
        &c,
        "TM",
        "p",
        json!({"batch": 1}),
        1,
        Duration::from_secs(3),
    )
    .await;
    ack_sync(&c, &got.msgs[0], "+TERM").await;
    let got = pull(
        &c,
        "TM",
        "p",
        json!({"batch": 5, "expires": 1_500_000_000}),
        5,
        Duration::from_secs(3),
    )
    .await;
    assert!(
        !got.stream_seqs().contains(&1),
        "terminated message not redelivered"
    );
    assert_eq!(got.stream_seqs()[0], 2);
    let v = consumer_info(&c, "TM", "p").await;
    assert_eq!(v["ack_floor"]["stream_seq"], 1, "{v}");
}

#[tokio::test]
async fn max_deliver_stops_redelivery_after_n_attempts() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "MD", "subjects": ["md"]})).await;
    publish(&c, "md", b"a").await;
    add_consumer(
        &c,
        "MD",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit", "ack_wait": 300_000_000,
            "max_deliver": 2}),
    )
    .await;
    let mut delivered = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < deadline {
        let got = pull(
            &c,
            "MD",
            "p",
            json!({"batch": 1, "expires": 500_000_000}),
            1,
            Duration::from_secs(2),
        )
        .await;
        delivered.extend(got.msgs.iter().map(|m| ack_meta(m).delivered));
    }
    assert_eq!(delivered, [1, 2]);
    let v = consumer_info(&c, "MD", "p").await;
    assert_eq!(v["num_pending"], 0, "{v}");
    // Once its deliveries are used up and the last ack wait is over, the message no longer
    // counts as awaiting an ack (it would otherwise hold a max_ack_pending slot forever).
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let v = consumer_info(&c, "MD", "p").await;
        if v["num_ack_pending"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "still pending: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        stream_msgs(&c, "MD").await,
        1,
        "the message stays in the stream"
    );
}

#[tokio::test]
async fn backoff_spaces_out_redeliveries() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "BO", "subjects": ["bo"]})).await;
    publish(&c, "bo", b"a").await;
    let v = add_consumer(
        &c,
        "BO",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit", "max_deliver": 3,
            "backoff": [200_000_000, 600_000_000]}),
    )
    .await;
    assert_eq!(
        v["config"]["backoff"],
        json!([200_000_000, 600_000_000]),
        "{v}"
    );
    assert_eq!(
        v["config"]["ack_wait"], 200_000_000,
        "ack_wait = backoff[0]: {v}"
    );

    let bad = api(
        &c,
        "$JS.API.CONSUMER.CREATE.BO.bad",
        json!({"stream_name": "BO", "config": {"durable_name": "bad", "ack_policy": "explicit",
            "max_deliver": 1, "backoff": [200_000_000, 600_000_000]}}),
    )
    .await;
    assert_err(&bad, 400, 10116, "max_deliver below the backoff length");

    let mut times = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        let got = pull(
            &c,
            "BO",
            "p",
            json!({"batch": 1, "expires": 500_000_000}),
            1,
            Duration::from_secs(2),
        )
        .await;
        for m in &got.msgs {
            times.push((ack_meta(m).delivered, start.elapsed()));
        }
    }
    let counts: Vec<u64> = times.iter().map(|t| t.0).collect();
    assert_eq!(counts, [1, 2, 3], "{times:?}");
    let gap1 = times[1].1 - times[0].1;
    let gap2 = times[2].1 - times[1].1;
    assert!(gap1 >= Duration::from_millis(150), "{times:?}");
    assert!(gap2 >= Duration::from_millis(450), "{times:?}");
}

#[tokio::test]
async fn ack_policy_all_acks_everything_before() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "AA", "subjects": ["aa"]})).await;
    for _ in 0..4 {
        publish(&c, "aa", b"x").await;
    }
    add_consumer(
        &c,
        "AA",
        "p",
        json!({"durable_name": "p", "ack_policy": "all"}),
    )
    .await;
    let got = pull(
        &c,
        "AA",
        "p",
        json!({"batch": 3}),
        3,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.msgs.len(), 3);
    assert_eq!(consumer_info(&c, "AA", "p").await["num_ack_pending"], 3);
    ack(&c, &got.msgs[2], "+ACK").await;
    let v = consumer_info(&c, "AA", "p").await;
    assert_eq!(v["ack_floor"]["stream_seq"], 3, "{v}");
    assert_eq!(v["ack_floor"]["consumer_seq"], 3, "{v}");
    assert_eq!(v["num_ack_pending"], 0, "{v}");
    assert_eq!(v["num_pending"], 1, "{v}");
}

#[tokio::test]
async fn ack_policy_none_leaves_nothing_pending() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "AN", "subjects": ["an"]})).await;
    for _ in 0..3 {
        publish(&c, "an", b"x").await;
    }
    let v = add_consumer(
        &c,
        "AN",
        "p",
        json!({"durable_name": "p", "ack_policy": "none"}),
    )
    .await;
    assert_eq!(v["config"]["ack_policy"], "none", "{v}");
    let got = pull(
        &c,
        "AN",
        "p",
        json!({"batch": 3}),
        3,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.stream_seqs(), [1, 2, 3]);
    let v = consumer_info(&c, "AN", "p").await;
    assert_eq!(v["num_ack_pending"], 0, "{v}");
    assert_eq!(v["num_pending"], 0, "{v}");
    assert_eq!(v["ack_floor"]["stream_seq"], 3, "{v}");
    assert_eq!(v["delivered"]["stream_seq"], 3, "{v}");
}

#[tokio::test]
async fn max_ack_pending_pauses_delivery() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "MP", "subjects": ["mp"]})).await;
    for _ in 0..5 {
        publish(&c, "mp", b"x").await;
    }
    add_consumer(
        &c,
        "MP",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit", "max_ack_pending": 2}),
    )
    .await;
    let got = pull(
        &c,
        "MP",
        "p",
        json!({"batch": 5, "expires": 800_000_000}),
        5,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(
        got.stream_seqs(),
        [1, 2],
        "only max_ack_pending outstanding"
    );
    assert_eq!(got.status_code(), Some(408));
    ack(&c, &got.msgs[0], "+ACK").await;
    let next = pull(
        &c,
        "MP",
        "p",
        json!({"batch": 5, "expires": 800_000_000}),
        5,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(next.stream_seqs(), [3], "one slot freed");
}

// ---------------------------------------------------------------------------------------
// push consumers

#[tokio::test]
async fn push_consumer_delivers_to_its_deliver_subject() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PU", "subjects": ["pu.*"]})).await;
    for i in 0..3 {
        publish(&c, &format!("pu.{i}"), format!("{i}").as_bytes()).await;
    }
    let mut sub = c.subscribe("pu_out").await.unwrap();
    support::sync(&c).await;
    let v = add_consumer(
        &c,
        "PU",
        "push",
        json!({"durable_name": "push", "ack_policy": "explicit", "deliver_subject": "pu_out"}),
    )
    .await;
    assert!(v["config"].get("max_waiting").is_none(), "{v}");
    for i in 0..3u64 {
        let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.subject.as_str(), format!("pu.{i}"));
        let meta = ack_meta(&m);
        assert_eq!((meta.stream_seq, meta.pending), (i + 1, 2 - i));
        ack(&c, &m, "+ACK").await;
    }
    publish(&c, "pu.9", b"late").await;
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "late");
    ack(&c, &m, "+ACK").await;
    let v = consumer_info(&c, "PU", "push").await;
    assert_eq!(v["ack_floor"]["stream_seq"], 4, "{v}");
    assert_eq!(v["push_bound"], true, "{v}");
}

#[tokio::test]
async fn push_deliver_group_balances_between_queue_members() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PG", "subjects": ["pg"]})).await;
    let mut a = c.queue_subscribe("pg_out", "workers".into()).await.unwrap();
    let mut b = c.queue_subscribe("pg_out", "workers".into()).await.unwrap();
    support::sync(&c).await;
    add_consumer(
        &c,
        "PG",
        "grp",
        json!({"durable_name": "grp", "ack_policy": "none", "deliver_subject": "pg_out",
            "deliver_group": "workers"}),
    )
    .await;
    for i in 0..200 {
        publish(&c, "pg", format!("{i}").as_bytes()).await;
    }
    let mut seen_a = Vec::new();
    let mut seen_b = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen_a.len() + seen_b.len() < 200 {
        tokio::select! {
            m = a.next() => seen_a.push(ack_meta(&m.unwrap()).stream_seq),
            m = b.next() => seen_b.push(ack_meta(&m.unwrap()).stream_seq),
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    assert!(
        !seen_a.is_empty() && !seen_b.is_empty(),
        "both members got some"
    );
    let mut all: Vec<u64> = seen_a.iter().chain(&seen_b).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=200).collect::<Vec<u64>>(),
        "each message exactly once"
    );
}

#[test]
fn push_idle_heartbeat_arrives_on_the_deliver_subject() {
    let s = TestServer::start_js();
    let mut r = raw_client(&s);
    r.send(b"SUB hb_out 2\r\n");
    raw_pub(
        &mut r,
        "$JS.API.STREAM.CREATE.HB",
        "_R.api",
        br#"{"name":"HB","subjects":["hb"]}"#,
    );
    raw_next(&mut r, Duration::from_secs(5)).unwrap();
    raw_pub(
        &mut r,
        "$JS.API.CONSUMER.CREATE.HB.h",
        "_R.api",
        br#"{"stream_name":"HB","config":{"durable_name":"h","ack_policy":"explicit","deliver_subject":"hb_out","idle_heartbeat":300000000}}"#,
    );
    let v = raw_next(&mut r, Duration::from_secs(5)).unwrap();
    let v: Value = serde_json::from_slice(&v.payload).unwrap();
    assert_ok(&v, "push consumer with heartbeat");
    assert_eq!(v["config"]["idle_heartbeat"], 300_000_000, "{v}");
    let m = raw_next(&mut r, Duration::from_secs(3)).expect("heartbeat");
    assert_eq!(m.subject, "hb_out");
    assert!(m.payload.is_empty());
    assert_eq!(
        m.headers.as_deref(),
        Some("NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\nNats-Last-Stream: 0\r\n\r\n"),
        "{m:?}"
    );
    // After a delivery the heartbeat carries the last sequences.
    raw_pub(&mut r, "hb", "_R.pa", b"x");
    let mut saw_msg = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(Instant::now() < deadline, "heartbeat after delivery");
        let m = raw_next(&mut r, Duration::from_secs(3)).unwrap();
        if m.subject == "hb" {
            saw_msg = true;
            raw_pub(&mut r, m.reply.as_ref().unwrap(), "_R.ack", b"+ACK");
        } else if m.subject == "hb_out" && saw_msg {
            assert_eq!(
                m.headers.as_deref(),
                Some("NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\nNats-Last-Stream: 1\r\n\r\n")
            );
            break;
        }
    }
    // The idle heartbeat is refused on a pull consumer.
    raw_pub(
        &mut r,
        "$JS.API.CONSUMER.CREATE.HB.pl",
        "_R.api2",
        br#"{"stream_name":"HB","config":{"durable_name":"pl","ack_policy":"explicit","idle_heartbeat":300000000}}"#,
    );
    loop {
        let m = raw_next(&mut r, Duration::from_secs(5)).unwrap();
        if m.subject == "_R.api2" {
            let v: Value = serde_json::from_slice(&m.payload).unwrap();
            assert_err(&v, 400, 10088, "heartbeat on pull");
            break;
        }
    }
}

#[tokio::test]
async fn push_flow_control_lets_a_large_backlog_through() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    let js = jetstream::new(c.clone());
    add_stream(&c, json!({"name": "FC", "subjects": ["fc"]})).await;
    let chunk = vec![b'z'; 64 * 1024];
    let n = 80u64; // 5 MiB, well past the reference's flow-control window
    for _ in 0..n {
        js.publish("fc", chunk.clone().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let cons: consumer::PushConsumer = js
        .create_consumer_on_stream(
            consumer::push::Config {
                durable_name: Some("fc".into()),
                deliver_subject: "fc_out".into(),
                ack_policy: consumer::AckPolicy::Explicit,
                flow_control: true,
                idle_heartbeat: Duration::from_secs(1),
                ..Default::default()
            },
            "FC",
        )
        .await
        .unwrap();
    let mut msgs = cons.messages().await.unwrap();
    // A second plain subscriber on the deliver subject sees the flow-control requests.
    let mut observer = c.subscribe("fc_out").await.unwrap();
    support::sync(&c).await;
    let mut got = 0u64;
    while got < n {
        let m = tokio::time::timeout(Duration::from_secs(10), msgs.next())
            .await
            .unwrap_or_else(|_| panic!("stalled after {got} of {n}"))
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.len(), chunk.len());
        got += 1;
        assert_eq!(m.info().unwrap().stream_sequence, got);
        m.ack().await.unwrap();
    }
    let mut saw_fc = false;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), observer.next()).await
    {
        if m.status == Some(StatusCode::from_u16(100).unwrap())
            && m.description.as_deref() == Some("FlowControl Request")
        {
            assert!(
                m.reply.as_ref().unwrap().starts_with("$JS.FC.FC.fc."),
                "{:?}",
                m.reply
            );
            saw_fc = true;
        }
    }
    assert!(saw_fc, "a flow-control request was sent");
}

// ---------------------------------------------------------------------------------------
// retention

#[tokio::test]
async fn workqueue_removes_on_ack_and_refuses_overlapping_consumers() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(
        &c,
        json!({"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"}),
    )
    .await;
    for _ in 0..3 {
        publish(&c, "wq.a", b"job").await;
    }
    add_consumer(
        &c,
        "WQ",
        "w",
        json!({"durable_name": "w", "ack_policy": "explicit"}),
    )
    .await;
    let got = pull(
        &c,
        "WQ",
        "w",
        json!({"batch": 2}),
        2,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.msgs.len(), 2);
    assert_eq!(stream_msgs(&c, "WQ").await, 3, "delivered is not removed");
    ack_sync(&c, &got.msgs[0], "+ACK").await;
    ack_sync(&c, &got.msgs[1], "+ACK").await;
    assert_eq!(stream_msgs(&c, "WQ").await, 1, "acked jobs removed");
    let info = stream_info(&c, "WQ").await;
    assert_eq!(info["state"]["first_seq"], 3, "{info}");

    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.WQ.w2",
        json!({"stream_name": "WQ", "config": {"durable_name": "w2", "ack_policy": "explicit"}}),
    )
    .await;
    assert_err(&v, 400, 10099, "second unfiltered workqueue consumer");

    add_stream(
        &c,
        json!({"name": "WF", "subjects": ["wf.>"], "retention": "workqueue"}),
    )
    .await;
    add_consumer(
        &c,
        "WF",
        "f1",
        json!({"durable_name": "f1", "ack_policy": "explicit", "filter_subject": "wf.a.*"}),
    )
    .await;
    add_consumer(
        &c,
        "WF",
        "f2",
        json!({"durable_name": "f2", "ack_policy": "explicit", "filter_subject": "wf.b"}),
    )
    .await;
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.WF.f3",
        json!({"stream_name": "WF", "config": {"durable_name": "f3", "ack_policy": "explicit",
            "filter_subject": "wf.a.x"}}),
    )
    .await;
    assert_err(&v, 400, 10100, "overlapping workqueue filter");
}

#[tokio::test]
async fn interest_retention_keeps_messages_until_every_consumer_acks() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(
        &c,
        json!({"name": "IN", "subjects": ["in"], "retention": "interest"}),
    )
    .await;
    // No consumers: the publish is acknowledged but nothing is kept.
    let seq = publish(&c, "in", b"lost").await;
    assert_eq!(seq, 1);
    assert_eq!(stream_msgs(&c, "IN").await, 0);

    for name in ["c1", "c2"] {
        add_consumer(
            &c,
            "IN",
            name,
            json!({"durable_name": name, "ack_policy": "explicit"}),
        )
        .await;
    }
    publish(&c, "in", b"a").await;
    publish(&c, "in", b"b").await;
    assert_eq!(stream_msgs(&c, "IN").await, 2);
    let g1 = pull(
        &c,
        "IN",
        "c1",
        json!({"batch": 2}),
        2,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(g1.stream_seqs(), [2, 3]);
    for m in &g1.msgs {
        ack_sync(&c, m, "+ACK").await;
    }
    assert_eq!(stream_msgs(&c, "IN").await, 2, "c2 has not acked yet");
    let g2 = pull(
        &c,
        "IN",
        "c2",
        json!({"batch": 2}),
        2,
        Duration::from_secs(3),
    )
    .await;
    ack_sync(&c, &g2.msgs[0], "+ACK").await;
    assert_eq!(stream_msgs(&c, "IN").await, 1);
    ack_sync(&c, &g2.msgs[1], "+ACK").await;
    assert_eq!(stream_msgs(&c, "IN").await, 0, "acked by every consumer");
}

#[tokio::test]
async fn limits_retention_keeps_acked_messages() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "LI", "subjects": ["li"]})).await;
    for _ in 0..3 {
        publish(&c, "li", b"x").await;
    }
    add_consumer(
        &c,
        "LI",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    let got = pull(
        &c,
        "LI",
        "p",
        json!({"batch": 3}),
        3,
        Duration::from_secs(3),
    )
    .await;
    for m in &got.msgs {
        ack_sync(&c, m, "+ACK").await;
    }
    assert_eq!(stream_msgs(&c, "LI").await, 3);
}

#[tokio::test]
async fn ephemeral_consumer_disappears_after_inactive_threshold() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "EP", "subjects": ["ep"]})).await;
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.EP",
        json!({"stream_name": "EP", "config": {"ack_policy": "explicit",
            "inactive_threshold": 1_000_000_000}}),
    )
    .await;
    assert_ok(&v, "ephemeral create");
    assert_eq!(v["config"]["inactive_threshold"], 1_000_000_000, "{v}");
    let name = v["name"].as_str().unwrap().to_owned();
    consumer_info(&c, "EP", &name).await;
    let created = Instant::now();
    let info_subject = format!("$JS.API.CONSUMER.INFO.EP.{name}");
    let mut gone = false;
    while created.elapsed() < Duration::from_secs(6) {
        let v = api(&c, &info_subject, Value::Null).await;
        if err_code(&v) == Some(10014) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "ephemeral consumer removed after inactivity");
    assert!(created.elapsed() >= Duration::from_millis(700));
    let v = api(&c, "$JS.API.CONSUMER.NAMES.EP", Value::Null).await;
    assert_eq!(v["total"], 0, "{v}");
}

#[tokio::test]
async fn tiny_pull_heartbeats_cannot_flood_the_requester() {
    let s = TestServer::start_js();
    if s.is_reference() {
        return; // nats-server sends one per millisecond for a 1 ns heartbeat
    }
    let c = client(&s).await;
    add_stream(&c, json!({"name": "HB", "subjects": ["hb.>"]})).await;
    add_consumer(
        &c,
        "HB",
        "w",
        json!({"durable_name": "w", "ack_policy": "explicit"}),
    )
    .await;
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(format!("{inbox}.>")).await.unwrap();
    let body = r#"{"batch":1,"expires":60000000000,"idle_heartbeat":1}"#;
    for i in 0..4 {
        c.publish_with_reply(
            "$JS.API.CONSUMER.MSG.NEXT.HB.w",
            format!("{inbox}.{i}"),
            body.into(),
        )
        .await
        .unwrap();
    }
    c.flush().await.unwrap();
    let window = Duration::from_secs(2);
    let end = Instant::now() + window;
    let mut heartbeats = 0u32;
    while let Ok(Some(m)) = tokio::time::timeout_at(end.into(), sub.next()).await {
        if m.status == Some(StatusCode::IDLE_HEARTBEAT) {
            heartbeats += 1;
        }
    }
    // 4 requests at one heartbeat per 100 ms at most: about 80 in 2 s (nats-server: ~8,000).
    assert!(heartbeats >= 4, "heartbeats still flow: {heartbeats}");
    assert!(heartbeats <= 100, "{heartbeats} heartbeats in {window:?}");
}

/// RFC 3339 for now + `d`.
fn rfc3339_in(d: Duration) -> String {
    let t = time::OffsetDateTime::now_utc() + d;
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

#[tokio::test]
async fn a_paused_consumer_delivers_after_its_pause_or_when_resumed() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PZ", "subjects": ["pz"]})).await;
    add_consumer(
        &c,
        "PZ",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit"}),
    )
    .await;
    for i in 0..3 {
        publish(&c, "pz", format!("{i}").as_bytes()).await;
    }
    let v = api(
        &c,
        "$JS.API.CONSUMER.PAUSE.PZ.p",
        json!({"pause_until": rfc3339_in(Duration::from_millis(1500))}),
    )
    .await;
    assert_eq!(
        v["type"],
        "io.nats.jetstream.api.v1.consumer_pause_response"
    );
    assert_eq!(v["paused"], true, "{v}");
    assert!(v["pause_remaining"].as_i64().unwrap() > 0, "{v}");
    let info = consumer_info(&c, "PZ", "p").await;
    assert_eq!(info["paused"], true, "{info}");
    assert!(info["config"]["pause_until"].is_string(), "{info}");
    // Nothing while paused: the request expires empty.
    let got = pull(
        &c,
        "PZ",
        "p",
        json!({"batch": 3, "expires": 300_000_000}),
        3,
        Duration::from_secs(2),
    )
    .await;
    assert!(got.msgs.is_empty());
    // After the pause, delivery resumes on its own.
    let deadline = Instant::now() + Duration::from_secs(5);
    while consumer_info(&c, "PZ", "p").await["paused"] == true {
        assert!(Instant::now() < deadline, "still paused");
        support::spin_pause(Duration::from_millis(50));
    }
    let got = pull(
        &c,
        "PZ",
        "p",
        json!({"batch": 3, "expires": 2_000_000_000}),
        3,
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(got.stream_seqs(), [1, 2, 3]);
    // Paused for an hour, then resumed by a pause request without a time.
    let v = api(
        &c,
        "$JS.API.CONSUMER.PAUSE.PZ.p",
        json!({"pause_until": rfc3339_in(Duration::from_secs(3600))}),
    )
    .await;
    assert_eq!(v["paused"], true);
    let v = api(&c, "$JS.API.CONSUMER.PAUSE.PZ.p", json!({})).await;
    assert_eq!(v["paused"], false, "{v}");
    assert_ne!(consumer_info(&c, "PZ", "p").await["paused"], true);
    // An unknown consumer is an error.
    let v = api(&c, "$JS.API.CONSUMER.PAUSE.PZ.nope", json!({})).await;
    assert_eq!(v["error"]["err_code"], 10014, "{v}");
}

#[tokio::test]
async fn a_durable_can_be_updated_by_name_alone() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "UPD", "subjects": ["upd"]})).await;
    add_consumer(
        &c,
        "UPD",
        "d",
        json!({"durable_name": "d", "name": "d", "ack_policy": "explicit", "max_deliver": 10}),
    )
    .await;
    // The newer clients' update: `name` only, `action: update`.
    let v = api(
        &c,
        "$JS.API.CONSUMER.CREATE.UPD.d",
        json!({"stream_name": "UPD", "action": "update",
               "config": {"name": "d", "ack_policy": "explicit", "max_deliver": 20}}),
    )
    .await;
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["config"]["max_deliver"], 20);
    // (nats-server then echoes no durable_name; sealstream keeps the consumer durable and says
    // so: docs/compatibility.md.)
    assert_eq!(
        consumer_info(&c, "UPD", "d").await["config"]["max_deliver"],
        20
    );
}

/// `CONSUMER.RESET` (ADR-60, API level 2.14): pending deliveries are forgotten and the
/// consumer resumes from one above its ack floor, or from a given sequence (the ack floor
/// moves just below it); a waiting pull request is served from the new position.
#[tokio::test]
async fn reset_moves_a_consumer_to_its_ack_floor_or_a_sequence() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "RS", "subjects": ["rs.*"]})).await;
    for i in 0..5 {
        publish(&c, &format!("rs.{i}"), format!("m{i}").as_bytes()).await;
    }
    add_consumer(
        &c,
        "RS",
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit"}),
    )
    .await;
    // Three delivered, two acked: the floor is at 2, one pending.
    let got = pull(
        &c,
        "RS",
        "c",
        json!({"batch": 3}),
        3,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(got.stream_seqs(), [1, 2, 3]);
    for m in &got.msgs[..2] {
        ack_sync(&c, m, "+ACK").await;
    }
    let reset = |body: Value| api(&c, "$JS.API.CONSUMER.RESET.RS.c", body);
    let v = reset(Value::Null).await;
    assert_ok(&v, "reset to the ack floor");
    assert_eq!(
        v["type"],
        "io.nats.jetstream.api.v1.consumer_reset_response"
    );
    assert_eq!(v["reset_seq"], 3, "{v}");
    assert_eq!(v["name"], "c");
    assert_eq!(v["num_ack_pending"], 0, "{v}");
    assert_eq!(v["num_pending"], 3, "{v}");
    assert_eq!(v["ack_floor"]["stream_seq"], 2, "{v}");
    assert_eq!(v["delivered"]["consumer_seq"], 0, "{v}");
    // The unacked message 3 comes again, as a first delivery of a fresh consumer sequence.
    let got = pull(
        &c,
        "RS",
        "c",
        json!({"batch": 1}),
        1,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(got.stream_seqs(), [3]);
    let meta = ack_meta(&got.msgs[0]);
    assert_eq!((meta.delivered, meta.consumer_seq), (1, 1), "{meta:?}");

    // Forward past the end: nothing to deliver, a pull waits ...
    let v = reset(json!({"seq": 6})).await;
    assert_eq!(
        (v["reset_seq"].as_u64(), v["num_pending"].as_u64()),
        (Some(6), Some(0)),
        "{v}"
    );
    let waiting = tokio::spawn({
        let c = c.clone();
        async move {
            let req = json!({"batch": 1, "expires": 5_000_000_000u64});
            pull(&c, "RS", "c", req, 1, Duration::from_secs(5))
                .await
                .stream_seqs()
        }
    });
    tokio::time::timeout(Duration::from_secs(5), async {
        while consumer_info(&c, "RS", "c").await["num_waiting"] != 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the pull request is waiting");
    // ... and back to 2 (the floor just below): the waiting pull is served from there.
    let v = reset(json!({"seq": 2})).await;
    assert_eq!(v["reset_seq"], 2, "{v}");
    assert_eq!(v["ack_floor"]["stream_seq"], 1, "{v}");
    assert_eq!(waiting.await.unwrap(), [2]);
    add_consumer(
        &c,
        "RS",
        "w",
        json!({"durable_name": "w", "ack_policy": "explicit", "deliver_policy": "new"}),
    )
    .await;
    // A deliver-new consumer may only go back to its floor, not to a sequence.
    let v = api(&c, "$JS.API.CONSUMER.RESET.RS.w", json!({"seq": 1})).await;
    assert_err(
        &v,
        400,
        10204,
        "reset of a deliver-new consumer to a sequence",
    );
    assert_eq!(v["error"]["description"], "invalid reset: not allowed");
    assert_eq!(v["reset_seq"], 0, "{v}");
    let v = api(&c, "$JS.API.CONSUMER.RESET.RS.w", Value::Null).await;
    assert_eq!(v["reset_seq"], 6, "{v}");

    // Below a by_start_sequence consumer's start: refused.
    add_consumer(
        &c,
        "RS",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit",
               "deliver_policy": "by_start_sequence", "opt_start_seq": 3}),
    )
    .await;
    let v = api(&c, "$JS.API.CONSUMER.RESET.RS.p", json!({"seq": 1})).await;
    assert_err(&v, 400, 10204, "reset below the start sequence");
    assert_eq!(v["error"]["description"], "invalid reset: below start seq");
    let v = api(&c, "$JS.API.CONSUMER.RESET.RS.p", json!({"seq": 3})).await;
    assert_eq!(v["reset_seq"], 3, "{v}");
    // A sequence that is not an unsigned integer is invalid JSON for the request type.
    let v = api(&c, "$JS.API.CONSUMER.RESET.RS.p", json!({"seq": -1})).await;
    assert_err(&v, 400, 10025, "negative reset sequence");
}

/// A filter outside the stream's subjects is accepted (nats-server 2.15 does, single and
/// multiple filters alike): async-nats's `update_consumer` creates `one`/`two` filters on a
/// stream of `events`.
#[tokio::test]
async fn filters_outside_the_stream_subjects_are_accepted() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    assert_ok(
        &add_stream(&c, json!({"name": "EV", "subjects": ["events"]})).await,
        "stream",
    );
    let v = add_consumer(
        &c,
        "EV",
        "one",
        json!({"name": "one", "filter_subject": "one"}),
    )
    .await;
    assert_ok(&v, "single filter");
    let v = add_consumer(
        &c,
        "EV",
        "many",
        json!({"name": "many", "filter_subjects": ["one", "two"]}),
    )
    .await;
    assert_ok(&v, "filter_subjects");
    assert_eq!(v["config"]["filter_subjects"], json!(["one", "two"]));
}

// ---------------------------------------------------------------------------------------
// priority groups (ADR-42): overflow and prioritized

/// A consumer create that must fail with `code`/`err_code`.
async fn consumer_refused(c: &Client, name: &str, config: Value, code: u64, want: u64) {
    let v = api(
        c,
        &format!("$JS.API.CONSUMER.CREATE.PG.{name}"),
        json!({"stream_name": "PG", "config": config}),
    )
    .await;
    assert_err(&v, code, want, name);
}

#[tokio::test]
async fn priority_group_configs_are_checked_and_echoed() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PG", "subjects": ["pg.>"]})).await;
    let base = |extra: Value| {
        let mut v = json!({"durable_name": "x", "ack_policy": "explicit"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    consumer_refused(
        &c,
        "x",
        base(json!({"priority_policy": "overflow"})),
        400,
        10159,
    )
    .await;
    consumer_refused(&c, "x", base(json!({"priority_groups": ["A"]})), 400, 10196).await;
    for bad in ["a b", "seventeen-chars-x"] {
        let cfg = base(json!({"priority_policy": "overflow", "priority_groups": [bad]}));
        consumer_refused(&c, "x", cfg, 400, 10162).await;
    }
    let cfg = base(json!({"priority_policy": "overflow", "priority_groups": [""]}));
    consumer_refused(&c, "x", cfg, 400, 10161).await;
    let v = add_consumer(
        &c,
        "PG",
        "x",
        base(json!({"priority_policy": "overflow", "priority_groups": ["A", "B"]})),
    )
    .await;
    assert_eq!(v["config"]["priority_policy"], "overflow", "{v}");
    assert_eq!(v["config"]["priority_groups"], json!(["A", "B"]), "{v}");
    assert_eq!(v["config"]["metadata"]["_nats.req.level"], "1", "{v}");
    let info = consumer_info(&c, "PG", "x").await;
    // nats-server 2.15.1 reports the first group's state only; sealstream reports each.
    assert_eq!(info["priority_groups"][0]["group"], "A", "{info}");
}

#[tokio::test]
async fn overflow_pulls_are_served_only_while_the_consumer_is_behind() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PG", "subjects": ["pg.>"]})).await;
    for i in 0..5 {
        publish(&c, "pg.1", format!("{i}").as_bytes()).await;
    }
    add_consumer(
        &c,
        "PG",
        "o",
        json!({"durable_name": "o", "ack_policy": "explicit",
               "priority_policy": "overflow", "priority_groups": ["A"]}),
    )
    .await;
    let wait = Duration::from_secs(5);
    let p = pull(
        &c,
        "PG",
        "o",
        json!({"batch": 1, "expires": 300_000_000}),
        1,
        wait,
    )
    .await;
    assert_eq!(p.status_code(), Some(400));
    assert_eq!(p.description(), "Bad Request - Priority Group missing");
    let req = json!({"batch": 1, "expires": 300_000_000, "group": "Z"});
    let p = pull(&c, "PG", "o", req, 1, wait).await;
    assert_eq!(p.description(), "Bad Request - Invalid Priority Group");
    // 5 pending: a request for at least 10 gets nothing.
    let req = json!({"batch": 1, "no_wait": true, "group": "A", "min_pending": 10});
    let p = pull(&c, "PG", "o", req, 1, wait).await;
    assert!(p.msgs.is_empty());
    assert_eq!(p.status_code(), Some(404));
    let req = json!({"batch": 2, "expires": 300_000_000, "group": "A", "min_pending": 10});
    let p = pull(&c, "PG", "o", req, 2, wait).await;
    assert!(p.msgs.is_empty());
    assert_eq!(p.status_code(), Some(408));
    // At least 5: one message, then 4 pending is too few for the second.
    let req = json!({"batch": 2, "expires": 300_000_000, "group": "A", "min_pending": 5});
    let p = pull(&c, "PG", "o", req, 2, wait).await;
    assert_eq!(p.stream_seqs(), [1]);
    assert_eq!(p.status_code(), Some(408));
    // One ack outstanding: at least 2 gets nothing, at least 1 is served.
    let req = json!({"batch": 1, "expires": 300_000_000, "group": "A", "min_ack_pending": 2});
    let p = pull(&c, "PG", "o", req, 1, wait).await;
    assert!(p.msgs.is_empty());
    let req = json!({"batch": 1, "expires": 300_000_000, "group": "A", "min_ack_pending": 1});
    let p = pull(&c, "PG", "o", req, 1, wait).await;
    assert_eq!(p.stream_seqs(), [2]);
    // Without a threshold the group is served as usual.
    let req = json!({"batch": 1, "expires": 300_000_000, "group": "A"});
    assert_eq!(pull(&c, "PG", "o", req, 1, wait).await.stream_seqs(), [3]);
    // Thresholds belong to overflow consumers only.
    add_consumer(
        &c,
        "PG",
        "plain",
        json!({"durable_name": "plain", "ack_policy": "explicit"}),
    )
    .await;
    let req = json!({"batch": 1, "expires": 300_000_000, "min_pending": 1});
    let p = pull(&c, "PG", "plain", req, 1, wait).await;
    assert_eq!(p.status_code(), Some(400));
    assert_eq!(
        p.description(),
        "Bad Request - Not a Overflow Priority consumer"
    );
}

#[tokio::test]
async fn prioritized_pulls_are_served_lowest_priority_first() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PG", "subjects": ["pg.>"]})).await;
    add_consumer(
        &c,
        "PG",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit",
               "priority_policy": "prioritized", "priority_groups": ["A"]}),
    )
    .await;
    let wait = Duration::from_secs(5);
    let req = json!({"batch": 1, "expires": 300_000_000, "group": "A", "priority": 10});
    let p = pull(&c, "PG", "p", req, 1, wait).await;
    assert_eq!(
        p.description(),
        "Bad Request - Priority must be between 0 and 9"
    );
    // Three waiting requests, in the order 5, 1, 0; five messages arrive.
    let mut subs = Vec::new();
    for priority in [5, 1, 0] {
        let inbox = c.new_inbox();
        let sub = c.subscribe(inbox.clone()).await.unwrap();
        let req =
            json!({"batch": 2, "expires": 3_000_000_000u64, "group": "A", "priority": priority});
        c.publish_with_reply(
            "$JS.API.CONSUMER.MSG.NEXT.PG.p",
            inbox,
            serde_json::to_vec(&req).unwrap().into(),
        )
        .await
        .unwrap();
        subs.push(sub);
    }
    let mut queued = false;
    for _ in 0..100 {
        if consumer_info(&c, "PG", "p").await["num_waiting"] == 3 {
            queued = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(queued, "three pull requests waiting");
    for i in 0..5 {
        publish(&c, "pg.1", format!("{i}").as_bytes()).await;
    }
    let mut got = Vec::new();
    for sub in &mut subs {
        let mut seqs = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
            if m.status.is_none() {
                seqs.push(ack_meta(&m).stream_seq);
            }
            if seqs.len() == 2 {
                break;
            }
        }
        got.push(seqs);
    }
    // Priority 0 first, then 1, then 5 gets what is left.
    assert_eq!(got, [vec![5], vec![3, 4], vec![1, 2]]);
}

/// The `Nats-Pin-Id` a delivery carries.
fn pin_of(m: &Message) -> Option<String> {
    m.headers
        .as_ref()
        .and_then(|h| h.get("Nats-Pin-Id"))
        .map(|v| v.as_str().to_owned())
}

/// One message pulled from group `A` of consumer `PG/pin` without a pin id.
async fn pull_a(c: &Client) -> Pulled {
    let req = json!({"batch": 1, "expires": 1_000_000_000, "group": "A"});
    pull(c, "PG", "pin", req, 1, Duration::from_secs(5)).await
}

/// `pinned_client` (ADR-42): the first puller is pinned and its deliveries carry
/// `Nats-Pin-Id`; a pull with another id gets `423`; a pull without an id waits as a stand-by
/// and takes over after `CONSUMER.UNPIN` (or the pinned client's `priority_timeout`).
#[tokio::test]
async fn pinned_client_groups_deliver_to_one_client_until_unpinned() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "PG", "subjects": ["pg.>"]})).await;
    for i in 0..4 {
        publish(&c, "pg.1", format!("{i}").as_bytes()).await;
    }
    let v = add_consumer(
        &c,
        "PG",
        "pin",
        json!({"durable_name": "pin", "ack_policy": "explicit",
               "priority_policy": "pinned_client", "priority_groups": ["A"],
               "priority_timeout": 2_000_000_000u64}),
    )
    .await;
    assert_eq!(v["config"]["priority_policy"], "pinned_client", "{v}");
    let dflt = add_consumer(
        &c,
        "PG",
        "dflt",
        json!({"durable_name": "dflt", "ack_policy": "explicit",
               "priority_policy": "pinned_client", "priority_groups": ["A"]}),
    )
    .await;
    assert_eq!(
        dflt["config"]["priority_timeout"], 120_000_000_000u64,
        "{dflt}"
    );
    let wait = Duration::from_secs(5);
    let first = pull_a(&c).await;
    assert_eq!(first.stream_seqs(), [1]);
    let id = pin_of(&first.msgs[0]).expect("the pinned client's delivery carries Nats-Pin-Id");
    let info = consumer_info(&c, "PG", "pin").await;
    assert_eq!(
        info["priority_groups"][0]["pinned_client_id"],
        id.as_str(),
        "{info}"
    );
    // Another id is refused at once.
    let req = json!({"batch": 1, "expires": 1_000_000_000, "group": "A", "id": "not-the-pin"});
    let p = pull(&c, "PG", "pin", req, 1, wait).await;
    assert_eq!(p.status_code(), Some(423));
    assert_eq!(p.description(), "Nats-Pin-Id mismatch");
    // Without an id: a stand-by, served nothing while the pin holds.
    let req = json!({"batch": 1, "expires": 300_000_000, "group": "A"});
    let p = pull(&c, "PG", "pin", req, 1, wait).await;
    assert!(p.msgs.is_empty(), "stand-by got {:?}", p.stream_seqs());
    // The pinned client, with its id, goes on.
    let req = json!({"batch": 1, "expires": 1_000_000_000, "group": "A", "id": id});
    assert_eq!(pull(&c, "PG", "pin", req, 1, wait).await.stream_seqs(), [2]);
    // UNPIN: errors as nats-server words them, then the next puller gets a new pin.
    let e = api(&c, "$JS.API.CONSUMER.UNPIN.PG.pin", json!({})).await;
    assert_err(&e, 400, 10025, "unpin without a group");
    let e = api(&c, "$JS.API.CONSUMER.UNPIN.PG.pin", json!({"group": "B"})).await;
    assert_err(&e, 400, 10160, "unpin of an unknown group");
    let e = api(&c, "$JS.API.CONSUMER.UNPIN.PG.nope", json!({"group": "A"})).await;
    assert_err(&e, 404, 10014, "unpin of an unknown consumer");
    let ok = api(&c, "$JS.API.CONSUMER.UNPIN.PG.pin", json!({"group": "A"})).await;
    assert!(ok.get("error").is_none(), "{ok}");
    let req = json!({"batch": 1, "expires": 1_000_000_000, "group": "A", "id": id});
    let p = pull(&c, "PG", "pin", req, 1, wait).await;
    assert_eq!(p.status_code(), Some(423), "the old pin is gone");
    let next = pull_a(&c).await;
    assert_eq!(next.stream_seqs(), [3]);
    let id2 = pin_of(&next.msgs[0]);
    assert!(
        id2.is_some() && id2.as_deref() != Some(id.as_str()),
        "a new pin: {id2:?}"
    );
    // The pinned client goes quiet past priority_timeout (2 s): nobody is pinned.
    let mut unpinned = false;
    for _ in 0..80 {
        let info = consumer_info(&c, "PG", "pin").await;
        if info["priority_groups"][0].get("pinned_client_id").is_none() {
            unpinned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(unpinned, "the pin expires after priority_timeout");
    let last = pull_a(&c).await;
    assert_eq!(last.stream_seqs(), [4]);
}

/// A graceful stop ends every waiting pull request with `409 Server Shutdown` and what it
/// still had room for, before the connection closes (clients ask again after reconnecting).
#[tokio::test]
async fn a_graceful_stop_ends_waiting_pulls_with_409_server_shutdown() {
    let mut s = TestServer::start_js();
    let c = client(&s).await;
    add_stream(&c, json!({"name": "SD", "subjects": ["sd"]})).await;
    add_consumer(
        &c,
        "SD",
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit"}),
    )
    .await;
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.unwrap();
    let body = serde_json::to_vec(&json!({"batch": 10, "expires": 30_000_000_000u64})).unwrap();
    c.publish_with_reply("$JS.API.CONSUMER.MSG.NEXT.SD.c", inbox, body.into())
        .await
        .unwrap();
    support::sync(&c).await;
    let stopper = std::thread::spawn(move || s.stop(true));
    let m = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("a status before the connection closes")
        .expect("a message");
    stopper.join().unwrap();
    assert_eq!(m.status, Some(StatusCode::from_u16(409).unwrap()));
    assert_eq!(m.description.as_deref(), Some("Server Shutdown"));
    let h = m.headers.unwrap();
    assert_eq!(
        h.get("Nats-Pending-Messages").map(|v| v.as_str()),
        Some("10")
    );
}
