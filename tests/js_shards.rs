//! Many streams on a fixed pool of store threads: a stream costs a map entry, not an OS thread.
//! Hundreds of streams (file and memory, KV buckets among them) are served by the configured
//! number of store threads, each answers publishes, pulls and info, and all of it survives a
//! restart.
//!
//! sealstream only: `store_threads` is our addition (nats-server rejects the key).
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use support::js::{api_ok, create_stream, publish_seq, stream_info};
use support::TestServer;

/// Threads of a process (from /proc).
fn threads(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Threads of a process whose name starts with `prefix`.
fn threads_named(pid: u32, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

const STREAMS: usize = 300;

#[tokio::test]
async fn hundreds_of_streams_share_the_configured_store_threads() {
    let mut s = TestServer::start_js_with(&[], Some("jetstream { store_threads: 2 }"));
    if s.is_reference() {
        return;
    }
    let before = threads(s.pid());
    let c = async_nats::connect(s.url()).await.unwrap();
    for i in 0..STREAMS {
        let storage = if i % 3 == 0 { "memory" } else { "file" };
        create_stream(
            &c,
            &format!(
                r#"{{"name":"SHARDED{i:04}","subjects":["shard{i:04}.>"],"storage":"{storage}"}}"#
            ),
        )
        .await;
    }
    // Each stream answers a publish with its own sequence, twice.
    for round in 1..=2u64 {
        for i in 0..STREAMS {
            assert_eq!(publish_seq(&c, &format!("shard{i:04}.x"), "m").await, round);
        }
    }
    // The account's API thread started with the first call; it is not a store thread.
    let after = threads(s.pid()) - threads_named(s.pid(), "js-api-");
    assert!(
        after <= before + 2,
        "{STREAMS} streams took {} threads more than none",
        after - before
    );
    // A pull consumer on one of them still gets its messages (timers and pulls run on the
    // shared thread too).
    api_ok(
        &c,
        "CONSUMER.DURABLE.CREATE.SHARDED0007.D",
        r#"{"stream_name":"SHARDED0007","config":{"durable_name":"D","ack_policy":"explicit"}}"#,
    )
    .await;
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.unwrap();
    c.publish_with_reply(
        "$JS.API.CONSUMER.MSG.NEXT.SHARDED0007.D",
        inbox,
        r#"{"batch":2}"#.into(),
    )
    .await
    .unwrap();
    for _ in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut sub))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&m.payload[..], b"m");
    }
    drop(c);
    // File streams come back after a restart, with their messages.
    s.restart(true);
    let c = async_nats::connect(s.url()).await.unwrap();
    for i in (1..STREAMS).step_by(7).filter(|i| i % 3 != 0) {
        let info = stream_info(&c, &format!("SHARDED{i:04}"), "").await;
        assert_eq!(info["state"]["messages"], 2, "SHARDED{i:04}: {info}");
    }
    let names = api_ok(&c, "STREAM.NAMES", "").await;
    assert_eq!(names["total"], STREAMS - STREAMS / 3);
    assert!(threads(s.pid()) - threads_named(s.pid(), "js-api-") <= before + 2);
}

const ACCOUNTS: &str = r#"
accounts {
  A: { jetstream: enabled, users: [{user: a, password: a}] }
  B: { jetstream: enabled, users: [{user: b, password: b}] }
  C: { jetstream: enabled, users: [{user: c, password: c}] }
}
"#;

#[tokio::test]
async fn an_account_gets_an_api_thread_only_once_it_calls_the_api() {
    let s = TestServer::start_js_with(&[], Some(ACCOUNTS));
    if s.is_reference() {
        return;
    }
    assert_eq!(threads_named(s.pid(), "js-api-"), 0);
    let a = async_nats::ConnectOptions::with_user_and_password("a".into(), "a".into())
        .connect(s.url())
        .await
        .unwrap();
    create_stream(&a, r#"{"name":"S","subjects":["s.>"]}"#).await;
    assert_eq!(publish_seq(&a, "s.1", "m").await, 1);
    let info = stream_info(&a, "S", "").await;
    assert_eq!(info["state"]["messages"], 1);
    assert_eq!(threads_named(s.pid(), "js-api-"), 1);
}

#[test]
fn store_threads_out_of_range_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("bad.conf");
    std::fs::write(&conf, "jetstream { store_threads: 0 }\n").unwrap();
    let (bin, reference) = support::server_binary();
    if reference {
        return;
    }
    let out = std::process::Command::new(bin)
        .arg("-t")
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Expected store_threads between 1 and 256, got 0"),
        "{text}"
    );
}

/// How many stream directories the sealed store holds (`<store>/…/s/<id>/`).
fn stream_dirs(root: &std::path::Path) -> usize {
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if !e.path().is_dir() {
                continue;
            }
            if e.file_name() == "s" {
                return std::fs::read_dir(e.path()).unwrap().count();
            }
            todo.push(e.path());
        }
    }
    0
}

/// A stream is deleted while the only store thread is busy with another stream's publishes
/// (each fsync'd): the delete is answered, the deleted stream's waiting pull ends with 409, its
/// files go, the busy stream keeps every message, and nothing of the deleted one comes back
/// after a restart.
#[tokio::test]
async fn a_stream_deleted_while_its_store_thread_is_busy_is_gone_with_its_files() {
    let mut s = TestServer::start_js_with(&[], Some("jetstream { store_threads: 1 }"));
    if s.is_reference() {
        return;
    }
    let root = s.store_dir().unwrap();
    let c = async_nats::connect(s.url()).await.unwrap();
    create_stream(&c, r#"{"name":"BUSY","subjects":["busy"]}"#).await;
    create_stream(&c, r#"{"name":"GONE","subjects":["gone"]}"#).await;
    for _ in 0..20 {
        publish_seq(&c, "gone", "old").await;
    }
    api_ok(
        &c,
        "CONSUMER.DURABLE.CREATE.GONE.P",
        r#"{"stream_name":"GONE","config":{"durable_name":"P","ack_policy":"explicit","filter_subject":"nothing"}}"#,
    )
    .await;
    assert_eq!(stream_dirs(&root), 2);
    let inbox = c.new_inbox();
    let mut pulled = c.subscribe(inbox.clone()).await.unwrap();
    c.publish_with_reply(
        "$JS.API.CONSUMER.MSG.NEXT.GONE.P",
        inbox,
        r#"{"batch":1,"expires":30000000000}"#.into(),
    )
    .await
    .unwrap();
    c.flush().await.unwrap();
    // Keep the store thread busy: publishes with replies, each acknowledged after its fsync.
    const FLOOD: u64 = 3000;
    let flooder = c.clone();
    let flood = tokio::spawn(async move {
        let inbox = flooder.new_inbox();
        let mut acks = flooder.subscribe(inbox.clone()).await.unwrap();
        for _ in 0..FLOOD {
            flooder
                .publish_with_reply("busy", inbox.clone(), "m".into())
                .await
                .unwrap();
        }
        for _ in 0..FLOOD {
            tokio::time::timeout(Duration::from_secs(30), futures::StreamExt::next(&mut acks))
                .await
                .unwrap()
                .unwrap();
        }
    });
    let v = api_ok(&c, "STREAM.DELETE.GONE", "").await;
    assert_eq!(v["success"], true, "{v}");
    let end = tokio::time::timeout(
        Duration::from_secs(10),
        futures::StreamExt::next(&mut pulled),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        end.status,
        Some(async_nats::StatusCode::from_u16(409).unwrap())
    );
    flood.await.unwrap();
    // Deleted means unreadable at once (the keys went first); the files follow within the
    // round their store thread was in.
    let mut dirs = stream_dirs(&root);
    for _ in 0..100 {
        if dirs == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        dirs = stream_dirs(&root);
    }
    assert_eq!(dirs, 1, "the deleted stream's directory is removed");
    assert_eq!(
        stream_info(&c, "BUSY", "").await["state"]["messages"],
        FLOOD
    );
    let names = api_ok(&c, "STREAM.NAMES", "").await;
    assert_eq!(names["streams"], serde_json::json!(["BUSY"]), "{names}");
    // The name is free again, and the new stream starts empty.
    create_stream(&c, r#"{"name":"GONE","subjects":["gone"]}"#).await;
    assert_eq!(publish_seq(&c, "gone", "new").await, 1);
    drop(c);
    s.restart(true);
    let c = async_nats::connect(s.url()).await.unwrap();
    let info = stream_info(&c, "GONE", "").await;
    assert_eq!(info["state"]["messages"], 1, "{info}");
    assert_eq!(
        stream_info(&c, "BUSY", "").await["state"]["messages"],
        FLOOD
    );
    assert_eq!(stream_dirs(&root), 2);
}
