//! Message schedules (ADR-51, `allow_msg_schedules`) and fast-ingest batches
//! (`allow_batched`), as a client sees them: the header checks and their exact errors, what a
//! firing stores (target, headers, sampling, rollup), one-shot schedules removed after they
//! fire, cancelling by purge, schedules that survive a restart, the config rules, and the
//! fast-ingest flow acks, gaps and final ack. Mirrors nats.py's
//! `test_publish_with_schedule_headers`, `test_publish_schedule_target_required`,
//! `test_stream_allow_msg_schedules(_round_trip)` and `test_stream_allow_batch_publish_round_trip`,
//! and async-nats' `allow_batch_publish_round_trip`. Runs against nats-server too
//! (`SEALSTREAM_TEST_SERVER`); every wait polls to a deadline.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::{Duration, Instant};

use async_nats::Client;
use futures::StreamExt;
use serde_json::Value;
use support::js::{api, api_ok, assert_error, b64, create_stream, publish_ack};
use support::TestServer;

async fn client(s: &TestServer) -> Client {
    async_nats::connect(s.url()).await.expect("connect")
}

const SCHED: &str = r#"{"name":"S","subjects":["sched.>","target.>","src.>"],"allow_msg_schedules":true,"allow_msg_ttl":true}"#;

/// The newest message on `subject`: `(seq, payload, header lines)`, or `None`.
async fn last(c: &Client, stream: &str, subject: &str) -> Option<(u64, String, Vec<String>)> {
    let v = api(
        c,
        &format!("STREAM.MSG.GET.{stream}"),
        &format!(r#"{{"last_by_subj":"{subject}"}}"#),
    )
    .await;
    let m = v.get("message")?;
    let hdrs = String::from_utf8(b64(m["hdrs"].as_str().unwrap_or(""))).unwrap();
    let lines = hdrs
        .split("\r\n")
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let data = String::from_utf8(b64(m["data"].as_str().unwrap_or(""))).unwrap();
    Some((m["seq"].as_u64().unwrap(), data, lines))
}

/// Polls until `subject` has a message, up to `limit`.
async fn last_within(
    c: &Client,
    stream: &str,
    subject: &str,
    limit: Duration,
) -> Option<(u64, String, Vec<String>)> {
    let deadline = Instant::now() + limit;
    loop {
        let got = last(c, stream, subject).await;
        if got.is_some() || Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn subject_count(c: &Client, stream: &str, subject: &str) -> u64 {
    let v = api_ok(
        c,
        &format!("STREAM.INFO.{stream}"),
        &format!(r#"{{"subjects_filter":"{subject}"}}"#),
    )
    .await;
    v["state"]["subjects"][subject].as_u64().unwrap_or(0)
}

/// A publish's headers.
type Headers<'a> = &'a [(&'a str, &'a str)];

#[tokio::test]
async fn schedule_headers_are_checked_with_nats_server_codes() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    create_stream(&c, SCHED).await;
    create_stream(&c, r#"{"name":"P","subjects":["p.>"]}"#).await;
    let every = ("Nats-Schedule", "@every 5s");
    let target = ("Nats-Schedule-Target", "target.a");
    let cases: &[(&str, Headers, u64)] = &[
        // nats.py test_publish_schedule_target_required
        ("sched.a", &[every], 10190),
        (
            "sched.a",
            &[every, ("Nats-Schedule-Target", "other.a")],
            10190,
        ),
        (
            "sched.a",
            &[every, ("Nats-Schedule-Target", "target.*")],
            10190,
        ),
        (
            "sched.a",
            &[every, ("Nats-Schedule-Target", "sched.a")],
            10190,
        ),
        (
            "sched.a",
            &[("Nats-Schedule", "@every 500ms"), target],
            10189,
        ),
        ("sched.a", &[("Nats-Schedule", "0 0 * *"), target], 10189),
        (
            "sched.a",
            &[("Nats-Schedule", "0 0 0 * * 7"), target],
            10189,
        ),
        (
            "sched.a",
            &[("Nats-Schedule", "@at tomorrow"), target],
            10189,
        ),
        (
            "sched.a",
            &[every, target, ("Nats-Schedule-Time-Zone", "Europe/Paris")],
            10189,
        ),
        (
            "sched.a",
            &[
                ("Nats-Schedule", "0 0 5 * * *"),
                target,
                ("Nats-Schedule-Time-Zone", "Nowhere/X"),
            ],
            10223,
        ),
        (
            "sched.a",
            &[every, target, ("Nats-Schedule-Source", "src.*")],
            10203,
        ),
        (
            "sched.a",
            &[every, target, ("Nats-Schedule-TTL", "abc")],
            10191,
        ),
        (
            "sched.a",
            &[every, target, ("Nats-Schedule-Rollup", "all")],
            10192,
        ),
        ("sched.a", &[every, target, ("Nats-Rollup", "all")], 10192),
        // Headers only the server sets, in any stream.
        ("target.x", &[("Nats-Scheduler", "sched.a")], 10212),
        ("p.x", &[("Nats-Schedule-Next", "purge")], 10212),
        // A stream without schedules refuses them rather than storing a plain message.
        ("p.a", &[every, ("Nats-Schedule-Target", "p.b")], 10188),
    ];
    for (subject, headers, code) in cases {
        let ack = publish_ack(&c, subject, headers, "x").await;
        assert_error(&ack, 400, *code);
    }
    let none = api_ok(&c, "STREAM.INFO.S", "").await;
    assert_eq!(none["state"]["messages"], 0, "{none}");
    // A cron pattern in a named zone is taken.
    let ack = publish_ack(
        &c,
        "sched.tz",
        &[
            ("Nats-Schedule", "0 0 5 * * *"),
            ("Nats-Schedule-Target", "target.tz"),
            ("Nats-Schedule-Time-Zone", "America/New_York"),
        ],
        "x",
    )
    .await;
    assert!(ack.get("error").is_none(), "{ack}");
}

/// nats.py `test_publish_with_schedule_headers`, then what the firings store.
#[tokio::test]
async fn schedules_fire_into_their_target_with_scheduler_headers() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    create_stream(&c, SCHED).await;
    publish_ack(&c, "src.temp", &[("unit", "C")], "21.5").await;
    let every = publish_ack(
        &c,
        "sched.every",
        &[
            ("Nats-Schedule", "@every 1s"),
            ("Nats-Schedule-Target", "target.every"),
            ("Nats-Schedule-TTL", "30s"),
            ("Nats-Schedule-Rollup", "sub"),
            ("Nats-Msg-Id", "m1"),
            ("foo", "bar"),
        ],
        "EV",
    )
    .await;
    let seq = every["seq"].as_u64().unwrap();
    // The schedule is stored as published, with `Nats-Rollup: sub` (one per subject).
    let (stored_seq, body, hdrs) = last(&c, "S", "sched.every").await.unwrap();
    assert_eq!((stored_seq, body.as_str()), (seq, "EV"));
    assert!(
        hdrs.contains(&"Nats-Schedule: @every 1s".to_owned()),
        "{hdrs:?}"
    );
    assert!(hdrs.contains(&"Nats-Rollup: sub".to_owned()), "{hdrs:?}");
    publish_ack(
        &c,
        "sched.sample",
        &[
            ("Nats-Schedule", "@every 1s"),
            ("Nats-Schedule-Target", "target.sample"),
            ("Nats-Schedule-Source", "src.temp"),
        ],
        "ignored",
    )
    .await;

    let (_, body, hdrs) = last_within(&c, "S", "target.every", Duration::from_secs(5))
        .await
        .expect("@every 1s fired");
    assert_eq!(body, "EV");
    assert_eq!(
        hdrs.first().map(String::as_str),
        Some("foo: bar"),
        "{hdrs:?}"
    );
    assert!(
        hdrs.contains(&"Nats-Scheduler: sched.every".to_owned()),
        "{hdrs:?}"
    );
    assert!(
        hdrs.iter().any(|h| h.starts_with("Nats-Schedule-Next: 20")),
        "{hdrs:?}"
    );
    assert!(hdrs.contains(&"Nats-TTL: 30s".to_owned()), "{hdrs:?}");
    assert!(hdrs.contains(&"Nats-Rollup: sub".to_owned()), "{hdrs:?}");
    assert!(
        !hdrs.iter().any(|h| h.starts_with("Nats-Msg-Id")),
        "{hdrs:?}"
    );
    assert!(
        !hdrs.iter().any(|h| h.starts_with("Nats-Schedule:")),
        "{hdrs:?}"
    );

    let (_, body, hdrs) = last_within(&c, "S", "target.sample", Duration::from_secs(5))
        .await
        .expect("sampling schedule fired");
    assert_eq!(body, "21.5");
    assert_eq!(
        hdrs.first().map(String::as_str),
        Some("unit: C"),
        "{hdrs:?}"
    );
    assert!(
        hdrs.contains(&"Nats-Scheduler: sched.sample".to_owned()),
        "{hdrs:?}"
    );

    // It keeps firing; with its rollup the target holds one message, without it they add up.
    let deadline = Instant::now() + Duration::from_secs(8);
    while subject_count(&c, "S", "target.sample").await < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(subject_count(&c, "S", "target.sample").await >= 2);
    assert_eq!(subject_count(&c, "S", "target.every").await, 1);

    // Purging the schedule's subject cancels it.
    api_ok(&c, "STREAM.PURGE.S", r#"{"filter":"sched.sample"}"#).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let settled = subject_count(&c, "S", "target.sample").await;
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(subject_count(&c, "S", "target.sample").await, settled);
}

#[tokio::test]
async fn at_schedules_fire_once_and_are_removed() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    create_stream(&c, SCHED).await;
    // A time in the past fires at once.
    publish_ack(
        &c,
        "sched.past",
        &[
            ("Nats-Schedule", "@at 2009-11-10T23:00:00Z"),
            ("Nats-Schedule-Target", "target.past"),
        ],
        "PAST",
    )
    .await;
    let (_, body, hdrs) = last_within(&c, "S", "target.past", Duration::from_secs(5))
        .await
        .expect("@at in the past fired");
    assert_eq!(body, "PAST");
    assert!(
        hdrs.contains(&"Nats-Schedule-Next: purge".to_owned()),
        "{hdrs:?}"
    );
    assert!(
        last(&c, "S", "sched.past").await.is_none(),
        "the schedule is removed"
    );
    // A time far ahead, given with an offset, waits.
    publish_ack(
        &c,
        "sched.later",
        &[
            ("Nats-Schedule", "@at 2099-11-10T23:00:00+02:00"),
            ("Nats-Schedule-Target", "target.later"),
        ],
        "LATER",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(last(&c, "S", "target.later").await.is_none());
    assert!(last(&c, "S", "sched.later").await.is_some());
}

#[tokio::test]
async fn schedules_survive_a_restart() {
    let mut s = TestServer::start_js();
    let c = client(&s).await;
    create_stream(&c, SCHED).await;
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(3);
    let at = at
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    publish_ack(
        &c,
        "sched.once",
        &[
            ("Nats-Schedule", &format!("@at {at}")),
            ("Nats-Schedule-Target", "target.once"),
        ],
        "ONCE",
    )
    .await;
    drop(c);
    s.restart(false);
    let c = client(&s).await;
    let (_, body, _) = last_within(&c, "S", "target.once", Duration::from_secs(10))
        .await
        .expect("the schedule fired after the restart");
    assert_eq!(body, "ONCE");
    assert_eq!(subject_count(&c, "S", "target.once").await, 1);
}

#[tokio::test]
async fn schedule_and_batch_settings_follow_nats_server_rules() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    // nats.py test_stream_allow_msg_schedules / test_stream_allow_batch_publish_round_trip
    let v = create_stream(
        &c,
        r#"{"name":"B","subjects":["b.>"],"allow_atomic":true,"allow_batched":true}"#,
    )
    .await;
    assert_eq!(v["config"]["allow_batched"], true, "{v}");
    assert_eq!(v["config"]["metadata"]["_nats.req.level"], "4", "{v}");
    let v = create_stream(&c, r#"{"name":"N","subjects":["n.>"]}"#).await;
    assert!(v["config"].get("allow_msg_schedules").is_none(), "{v}");
    let v = api_ok(
        &c,
        "STREAM.UPDATE.N",
        r#"{"name":"N","subjects":["n.>"],"allow_msg_schedules":true}"#,
    )
    .await;
    assert_eq!(v["config"]["allow_msg_schedules"], true, "{v}");
    assert_eq!(v["config"]["metadata"]["_nats.req.level"], "2", "{v}");
    let e = api(
        &c,
        "STREAM.UPDATE.N",
        r#"{"name":"N","subjects":["n.>"],"allow_msg_schedules":false}"#,
    )
    .await;
    assert_eq!(
        assert_error(&e, 500, 10052),
        "message schedules can not be disabled"
    );
    // Batches may be turned off again.
    let v = api_ok(&c, "STREAM.UPDATE.B", r#"{"name":"B","subjects":["b.>"]}"#).await;
    assert!(v["config"].get("allow_batched").is_none(), "{v}");
    for (body, code, text) in [
        (
            r#"{"name":"M","mirror":{"name":"N"},"allow_msg_schedules":true}"#,
            10186,
            "stream mirrors can not also schedule messages",
        ),
        (
            r#"{"name":"M","sources":[{"name":"N"}],"allow_msg_schedules":true}"#,
            10187,
            "stream source can not also schedule messages",
        ),
        (
            r#"{"name":"M","mirror":{"name":"N"},"allow_batched":true}"#,
            10209,
            "stream mirrors can not also use batch publishing",
        ),
    ] {
        let e = api(&c, "STREAM.CREATE.M", body).await;
        assert_eq!(assert_error(&e, 400, code), text);
    }
}

/// The fast-ingest replies arriving on a batch's inbox, in order.
struct Inbox {
    sub: async_nats::Subscriber,
}

impl Inbox {
    async fn next(&mut self) -> (String, Value) {
        let m = tokio::time::timeout(Duration::from_secs(5), self.sub.next())
            .await
            .expect("a fast-ingest reply within 5s")
            .expect("subscription open");
        (
            m.subject.to_string(),
            serde_json::from_slice(&m.payload).unwrap(),
        )
    }
}

fn fi(batch: &str, flow: u64, gap: &str, seq: u64, op: u8) -> String {
    format!("_FI.{batch}.{flow}.{gap}.{seq}.{op}.$FI")
}

#[tokio::test]
async fn fast_ingest_batches_are_paced_by_flow_acks() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    create_stream(
        &c,
        r#"{"name":"FB","subjects":["fb.>"],"allow_batched":true}"#,
    )
    .await;
    create_stream(&c, r#"{"name":"NB","subjects":["nb.>"]}"#).await;
    let mut inbox = Inbox {
        sub: c.subscribe("_FI.>").await.unwrap(),
    };
    let publish = |subject: &'static str, reply: String, body: &'static str| {
        let c = c.clone();
        async move {
            c.publish_with_reply(subject, reply, body.into())
                .await
                .unwrap();
            c.flush().await.unwrap();
        }
    };
    publish("nb.a", fi("B0", 3, "ok", 1, 0), "1").await;
    let (_, v) = inbox.next().await;
    assert_error(&v, 400, 10205);

    publish("fb.a", fi("B1", 3, "ok", 1, 0), "1").await;
    let (to, v) = inbox.next().await;
    assert_eq!(to, fi("B1", 3, "ok", 1, 0));
    assert_eq!(
        (v["type"].as_str(), v["seq"].as_u64(), v["msgs"].as_u64()),
        (Some("ack"), Some(0), Some(3))
    );
    for seq in 2..=7 {
        publish("fb.a", fi("B1", 3, "ok", seq, 1), "m").await;
    }
    for want in [3, 6] {
        let (to, v) = inbox.next().await;
        assert_eq!(to, fi("B1", 3, "ok", want, 1));
        assert_eq!(
            (v["type"].as_str(), v["seq"].as_u64()),
            (Some("ack"), Some(want)),
            "{v}"
        );
    }
    // A ping says how far the acks are.
    publish("fb.a", fi("B1", 3, "ok", 7, 4), "").await;
    let (_, v) = inbox.next().await;
    assert_eq!(v["seq"], 6, "{v}");
    // A gap forward is reported; the batch goes on.
    publish("fb.a", fi("B1", 3, "ok", 9, 1), "m").await;
    let (_, v) = inbox.next().await;
    assert_eq!(
        (
            v["type"].as_str(),
            v["last_seq"].as_u64(),
            v["seq"].as_u64()
        ),
        (Some("gap"), Some(8), Some(9)),
        "{v}"
    );
    let (_, v) = inbox.next().await;
    assert_eq!(
        (v["type"].as_str(), v["seq"].as_u64()),
        (Some("ack"), Some(9)),
        "{v}"
    );
    publish("fb.a", fi("B1", 3, "ok", 10, 2), "last").await;
    let (_, v) = inbox.next().await;
    assert_eq!(v["batch"], "B1", "{v}");
    assert_eq!(v["count"], 10, "{v}");
    assert_eq!(v["stream"], "FB", "{v}");
    assert_eq!(v["seq"], 9, "{v}");
    let info = api_ok(&c, "STREAM.INFO.FB", "").await;
    assert_eq!(info["state"]["messages"], 9, "{info}");
    // The batch is over.
    publish("fb.a", fi("B1", 3, "ok", 11, 1), "late").await;
    let (_, v) = inbox.next().await;
    assert_error(&v, 400, 10208);

    // In `fail` mode a gap ends the batch; end-of-batch ends it without storing.
    publish("fb.b", fi("B2", 2, "fail", 1, 0), "1").await;
    inbox.next().await;
    publish("fb.b", fi("B2", 2, "fail", 3, 1), "3").await;
    let (_, v) = inbox.next().await;
    assert_eq!(v["type"], "gap", "{v}");
    let (_, v) = inbox.next().await;
    assert_eq!(
        (v["batch"].as_str(), v["count"].as_u64()),
        (Some("B2"), Some(1)),
        "{v}"
    );
    publish("fb.c", fi("B3", 2, "ok", 1, 0), "1").await;
    inbox.next().await;
    publish("fb.c", fi("B3", 2, "ok", 2, 3), "").await;
    let (_, v) = inbox.next().await;
    assert_eq!(
        (v["batch"].as_str(), v["count"].as_u64()),
        (Some("B3"), Some(1)),
        "{v}"
    );
    let info = api_ok(&c, "STREAM.INFO.FB", "").await;
    assert_eq!(info["state"]["messages"], 11, "{info}");
    // Malformed batch replies.
    publish("fb.d", fi("B4", 2, "bogus", 1, 0), "1").await;
    assert_error(&inbox.next().await.1, 400, 10206);
    publish("fb.d", fi("B5", 2, "ok", 2, 0), "1").await;
    assert_error(&inbox.next().await.1, 400, 10206);
}

#[tokio::test]
async fn fast_ingest_reports_messages_a_limit_refuses() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    create_stream(
        &c,
        r#"{"name":"FL","subjects":["fl.>"],"allow_batched":true,"max_msgs":2,"discard":"new"}"#,
    )
    .await;
    let mut inbox = Inbox {
        sub: c.subscribe("_FI.>").await.unwrap(),
    };
    for seq in 1..=3u64 {
        let op = if seq == 1 { 0 } else { 1 };
        c.publish_with_reply("fl.a", fi("C1", 2, "ok", seq, op), "x".into())
            .await
            .unwrap();
    }
    c.publish_with_reply("fl.a", fi("C1", 2, "ok", 4, 2), "x".into())
        .await
        .unwrap();
    c.flush().await.unwrap();
    assert_eq!(inbox.next().await.1["seq"], 0);
    assert_eq!(inbox.next().await.1["seq"], 2);
    for seq in [3, 4] {
        let (_, v) = inbox.next().await;
        assert_eq!(
            (v["type"].as_str(), v["seq"].as_u64()),
            (Some("err"), Some(seq)),
            "{v}"
        );
        assert_eq!(v["error"]["err_code"], 10077, "{v}");
    }
    let (_, v) = inbox.next().await;
    assert_eq!(
        (v["count"].as_u64(), v["seq"].as_u64()),
        (Some(3), Some(2)),
        "{v}"
    );
}

/// A duplicate `Nats-Msg-Id` inside a fast batch counts as stored: it is acked, and a
/// duplicate commit still ends the batch with the final ack (nats-server 2.15.1 does the same).
#[tokio::test]
async fn fast_ingest_duplicates_count_as_stored() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    create_stream(
        &c,
        r#"{"name":"FD","subjects":["fd.>"],"allow_batched":true}"#,
    )
    .await;
    let mut inbox = Inbox {
        sub: c.subscribe("_FI.>").await.unwrap(),
    };
    for seq in 1..=3u64 {
        let op = match seq {
            1 => 0,
            3 => 2,
            _ => 1,
        };
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", "d1");
        c.publish_with_reply_and_headers("fd.a", fi("D", 2, "ok", seq, op), h, "x".into())
            .await
            .unwrap();
    }
    c.flush().await.unwrap();
    assert_eq!(inbox.next().await.1["seq"], 0);
    let (_, v) = inbox.next().await;
    assert_eq!(
        (v["type"].as_str(), v["seq"].as_u64()),
        (Some("ack"), Some(2)),
        "{v}"
    );
    let (_, v) = inbox.next().await;
    assert_eq!(
        (v["batch"].as_str(), v["count"].as_u64(), v["seq"].as_u64()),
        (Some("D"), Some(3), Some(1)),
        "{v}"
    );
    let info = api_ok(&c, "STREAM.INFO.FD", "").await;
    assert_eq!(info["state"]["messages"], 1, "{info}");
}
