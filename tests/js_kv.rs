//! JetStream key-value buckets through async-nats's `kv` API, black-box: bucket create
//! (checked against the `KV_<bucket>` stream it maps to), put/get/entry, optimistic
//! `update`/`create`, delete and purge markers, per-key history limits, `keys`, watchers
//! (live updates, and initial values via `watch_with_history`), bucket status, bucket delete
//! and a TTL bucket. Checked against nats-server 2.15 (`SEALSTREAM_TEST_SERVER=...`).
//!
//! Each test starts its own JetStream server.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use support::js::{api_ok, stream_info};
use support::TestServer;

async fn setup() -> (TestServer, async_nats::Client, jetstream::Context) {
    let s = TestServer::start_js();
    let c = async_nats::connect(s.url()).await.expect("connect");
    let js = jetstream::new(c.clone());
    (s, c, js)
}

async fn bucket(js: &jetstream::Context, name: &str, history: i64) -> kv::Store {
    js.create_key_value(kv::Config {
        bucket: name.into(),
        history,
        ..Default::default()
    })
    .await
    .expect("create bucket")
}

/// Everything a finite key-value stream (history, keys) yields, within 5 s.
async fn collect<T, E: std::fmt::Debug>(
    s: impl futures::Stream<Item = Result<T, E>> + Unpin,
) -> Vec<T> {
    tokio::time::timeout(Duration::from_secs(5), s.map(|r| r.unwrap()).collect())
        .await
        .expect("stream ends within 5s")
}

/// Bucket status with fresh stream info (a `Store`'s own `status()` returns the info cached
/// when it was opened).
async fn status(js: &jetstream::Context, name: &str) -> kv::bucket::Status {
    js.get_key_value(name)
        .await
        .expect("open bucket")
        .status()
        .await
        .expect("status")
}

async fn next_entry(w: &mut kv::Watch) -> kv::Entry {
    tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("watch entry within 5s")
        .expect("watch open")
        .expect("watch entry ok")
}

#[tokio::test]
async fn create_bucket_maps_to_a_kv_stream() {
    let (_s, c, js) = setup().await;
    let kv = bucket(&js, "cfg", 3).await;
    let st = kv.status().await.unwrap();
    assert_eq!(st.bucket(), "cfg");
    assert_eq!(st.history(), 3);
    assert_eq!(st.values(), 0);

    let info = stream_info(&c, "KV_cfg", "").await;
    let cfg = &info["config"];
    assert_eq!(cfg["subjects"], serde_json::json!(["$KV.cfg.>"]));
    assert_eq!(cfg["max_msgs_per_subject"].as_i64(), Some(3));
    assert_eq!(cfg["discard"], "new");
    assert_eq!(cfg["allow_rollup_hdrs"].as_bool(), Some(true));
    assert_eq!(cfg["deny_delete"].as_bool(), Some(true));
    assert_eq!(cfg["allow_direct"].as_bool(), Some(true));

    // Creating it again with the same config is fine (idempotent stream create).
    bucket(&js, "cfg", 3).await;
    // Opening it by name works, and it is listed among the streams.
    let opened = js.get_key_value("cfg").await.unwrap();
    assert_eq!(opened.status().await.unwrap().history(), 3);
    let names = api_ok(&c, "STREAM.NAMES", r#"{"subject":"$KV.*.>"}"#).await;
    assert_eq!(names["streams"], serde_json::json!(["KV_cfg"]));
}

#[tokio::test]
async fn put_get_entry_and_revision_is_stream_seq() {
    let (_s, c, js) = setup().await;
    let kv = bucket(&js, "pg", 3).await;
    assert_eq!(kv.put("k1", "v1".into()).await.unwrap(), 1);
    assert_eq!(kv.put("k2", "v2".into()).await.unwrap(), 2);
    assert_eq!(kv.put("k1", "v3".into()).await.unwrap(), 3);
    assert_eq!(kv.get("k1").await.unwrap().unwrap(), "v3");
    assert_eq!(kv.get("k2").await.unwrap().unwrap(), "v2");
    assert_eq!(kv.get("missing").await.unwrap(), None);
    // Keys with dots, dashes, slashes, equals and underscores.
    let rev = kv.put("a.b-c/d=e_f", "odd".into()).await.unwrap();
    assert_eq!(
        kv.get("a.b-c/d=e_f").await.unwrap().unwrap(),
        "odd",
        "rev {rev}"
    );

    let e = kv.entry("k1").await.unwrap().unwrap();
    assert_eq!(e.bucket, "pg");
    assert_eq!(e.key, "k1");
    assert_eq!(e.value, "v3");
    assert_eq!(e.revision, 3);
    assert_eq!(e.operation, kv::Operation::Put);

    // The revision is the stream sequence of the underlying message.
    let m = api_ok(
        &c,
        "STREAM.MSG.GET.KV_pg",
        r#"{"last_by_subj":"$KV.pg.k1"}"#,
    )
    .await;
    assert_eq!(m["message"]["seq"].as_u64(), Some(e.revision));
    let info = stream_info(&c, "KV_pg", "").await;
    assert_eq!(info["state"]["last_seq"].as_u64(), Some(rev));
    // An older revision is still readable by revision.
    let old = kv.entry_for_revision("k1", 1).await.unwrap().unwrap();
    assert_eq!(old.value, "v1");
}

#[tokio::test]
async fn update_checks_the_revision() {
    let (_s, _c, js) = setup().await;
    let kv = bucket(&js, "up", 3).await;
    let r1 = kv.put("k", "a".into()).await.unwrap();
    let r2 = kv.update("k", "b".into(), r1).await.unwrap();
    assert!(r2 > r1);
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "b");

    let err = kv.update("k", "c".into(), r1).await.unwrap_err();
    assert_eq!(err.kind(), kv::UpdateErrorKind::WrongLastRevision, "{err}");
    assert_eq!(
        kv.get("k").await.unwrap().unwrap(),
        "b",
        "failed update stored nothing"
    );
    // Revision 0 means "no value yet": wrong for an existing key.
    assert!(kv.update("k", "d".into(), 0).await.is_err());
    // An unrelated key's revision does not count.
    let other = kv.put("other", "x".into()).await.unwrap();
    assert!(kv.update("k", "e".into(), other).await.is_err());
    assert_eq!(kv.update("k", "f".into(), r2).await.unwrap(), other + 1);
}

#[tokio::test]
async fn create_fails_on_existing_key_and_succeeds_after_delete() {
    let (_s, _c, js) = setup().await;
    let kv = bucket(&js, "cr", 3).await;
    let r1 = kv.create("k", "first".into()).await.unwrap();
    assert_eq!(r1, 1);
    let err = kv.create("k", "second".into()).await.unwrap_err();
    assert_eq!(err.kind(), kv::CreateErrorKind::AlreadyExists, "{err}");
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "first");

    kv.delete("k").await.unwrap();
    assert_eq!(kv.get("k").await.unwrap(), None);
    // The client retries over the DEL marker's revision.
    let r3 = kv.create("k", "third".into()).await.unwrap();
    assert_eq!(r3, 3);
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "third");

    // Also after a purge.
    kv.purge("k").await.unwrap();
    assert_eq!(kv.get("k").await.unwrap(), None);
    kv.create("k", "fifth".into()).await.unwrap();
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "fifth");
}

#[tokio::test]
async fn delete_leaves_a_marker_and_get_is_none() {
    let (_s, c, js) = setup().await;
    let kv = bucket(&js, "del", 5).await;
    kv.put("k", "v1".into()).await.unwrap();
    kv.put("k", "v2".into()).await.unwrap();
    kv.delete("k").await.unwrap();
    assert_eq!(kv.get("k").await.unwrap(), None);
    // `entry` returns the marker itself.
    let marker = kv.entry("k").await.unwrap().expect("delete marker entry");
    assert_eq!(marker.operation, kv::Operation::Delete);
    assert_eq!(marker.revision, 3);
    assert!(marker.value.is_empty());
    // The marker is a message in the stream: history kept, marker on top.
    let info = stream_info(&c, "KV_del", "").await;
    assert_eq!(info["state"]["messages"].as_u64(), Some(3));
    let hist = collect(kv.history("k").await.unwrap()).await;
    let ops: Vec<kv::Operation> = hist.iter().map(|e| e.operation).collect();
    assert_eq!(
        ops,
        [
            kv::Operation::Put,
            kv::Operation::Put,
            kv::Operation::Delete
        ]
    );
    // Put after delete.
    kv.put("k", "v3".into()).await.unwrap();
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "v3");
}

#[tokio::test]
async fn purge_removes_history_and_leaves_one_marker() {
    let (_s, c, js) = setup().await;
    let kv = bucket(&js, "pu", 5).await;
    for v in ["a", "b", "c"] {
        kv.put("k", v.into()).await.unwrap();
    }
    kv.put("other", "o".into()).await.unwrap();
    kv.purge("k").await.unwrap();
    assert_eq!(kv.get("k").await.unwrap(), None);
    let hist = collect(kv.history("k").await.unwrap()).await;
    assert_eq!(hist.len(), 1, "only the purge marker remains: {hist:?}");
    assert_eq!(hist[0].operation, kv::Operation::Purge);
    assert_eq!(hist[0].revision, 5);
    // Other keys are untouched.
    assert_eq!(kv.get("other").await.unwrap().unwrap(), "o");
    let info = stream_info(&c, "KV_pu", "").await;
    assert_eq!(info["state"]["messages"].as_u64(), Some(2));
}

#[tokio::test]
async fn history_keeps_at_most_the_configured_entries() {
    let (_s, _c, js) = setup().await;
    let kv = bucket(&js, "hi", 3).await;
    for i in 1..=5u64 {
        assert_eq!(kv.put("k", i.to_string().into()).await.unwrap(), i);
    }
    kv.put("j", "x".into()).await.unwrap();
    let hist = collect(kv.history("k").await.unwrap()).await;
    let values: Vec<&[u8]> = hist.iter().map(|e| e.value.as_ref()).collect();
    assert_eq!(values, [b"3".as_ref(), b"4", b"5"]);
    let revs: Vec<u64> = hist.iter().map(|e| e.revision).collect();
    assert_eq!(revs, [3, 4, 5]);
    assert!(hist.iter().all(|e| e.key == "k"));
    assert_eq!(status(&js, "hi").await.values(), 4);
}

#[tokio::test]
async fn keys_lists_live_keys_only() {
    let (_s, _c, js) = setup().await;
    let kv = bucket(&js, "ks", 3).await;
    assert!(collect(kv.keys().await.unwrap()).await.is_empty());
    for k in ["a", "b", "c", "b", "d.e"] {
        kv.put(k, "v".into()).await.unwrap();
    }
    kv.delete("c").await.unwrap();
    let mut keys = collect(kv.keys().await.unwrap()).await;
    keys.sort();
    assert_eq!(keys, ["a", "b", "d.e"]);
}

#[tokio::test]
async fn watch_receives_live_updates() {
    let (_s, _c, js) = setup().await;
    let kv = bucket(&js, "wa", 3).await;
    kv.put("old", "before".into()).await.unwrap();
    let mut w = kv.watch_all().await.unwrap();
    kv.put("k1", "a".into()).await.unwrap();
    kv.put("k2", "b".into()).await.unwrap();
    kv.delete("k1").await.unwrap();

    let e = next_entry(&mut w).await;
    assert_eq!((e.key.as_str(), e.value.as_ref()), ("k1", b"a".as_ref()));
    assert_eq!(e.revision, 2);
    assert_eq!(e.operation, kv::Operation::Put);
    let e = next_entry(&mut w).await;
    assert_eq!((e.key.as_str(), e.revision), ("k2", 3));
    let e = next_entry(&mut w).await;
    assert_eq!((e.key.as_str(), e.operation), ("k1", kv::Operation::Delete));
    assert_eq!(e.revision, 4);

    // A watch on one key sees only that key.
    let mut w1 = kv.watch("k2").await.unwrap();
    kv.put("k1", "x".into()).await.unwrap();
    kv.put("k2", "y".into()).await.unwrap();
    let e = next_entry(&mut w1).await;
    assert_eq!((e.key.as_str(), e.value.as_ref()), ("k2", b"y".as_ref()));
    assert_eq!(e.revision, 6);
}

#[tokio::test]
async fn watch_with_history_starts_with_current_values() {
    let (_s, _c, js) = setup().await;
    let kv = bucket(&js, "wh", 3).await;
    kv.put("a", "1".into()).await.unwrap();
    kv.put("b", "2".into()).await.unwrap();
    kv.put("a", "3".into()).await.unwrap();
    kv.put("c", "4".into()).await.unwrap();
    kv.delete("c").await.unwrap();

    let mut w = kv.watch_with_history(">").await.unwrap();
    // The latest entry per key, in stream order: b@2, a@3, c (DEL)@5.
    let mut initial = Vec::new();
    for _ in 0..3 {
        let e = next_entry(&mut w).await;
        initial.push((e.key.clone(), e.revision, e.operation, e.delta));
    }
    assert_eq!(
        initial,
        [
            ("b".to_owned(), 2, kv::Operation::Put, 2),
            ("a".to_owned(), 3, kv::Operation::Put, 1),
            ("c".to_owned(), 5, kv::Operation::Delete, 0),
        ]
    );
    // Then live updates.
    kv.put("b", "new".into()).await.unwrap();
    let e = next_entry(&mut w).await;
    assert_eq!((e.key.as_str(), e.value.as_ref()), ("b", b"new".as_ref()));
    assert_eq!(e.revision, 6);
    assert!(e.seen_current);

    // Single-key watch with history: its current value first.
    let mut wa = kv.watch_with_history("a").await.unwrap();
    let e = next_entry(&mut wa).await;
    assert_eq!((e.key.as_str(), e.value.as_ref()), ("a", b"3".as_ref()));
}

#[tokio::test]
async fn status_counts_values_and_delete_bucket_removes_it() {
    let (_s, c, js) = setup().await;
    let kv = bucket(&js, "st", 2).await;
    for i in 0..3 {
        kv.put("k", i.to_string().into()).await.unwrap();
    }
    kv.put("j", "x".into()).await.unwrap();
    let st = status(&js, "st").await;
    assert_eq!(st.values(), 3, "history 2 for k plus j");
    assert_eq!(st.history(), 2);

    js.delete_key_value("st").await.unwrap();
    assert!(js.get_key_value("st").await.is_err());
    let names = api_ok(&c, "STREAM.NAMES", "").await;
    assert_eq!(names["total"].as_u64(), Some(0));
    // A new bucket of the same name starts empty.
    let kv = bucket(&js, "st", 2).await;
    assert_eq!(kv.get("k").await.unwrap(), None);
    assert_eq!(kv.put("k", "again".into()).await.unwrap(), 1);
}

#[tokio::test]
async fn ttl_bucket_expires_values() {
    let (_s, c, js) = setup().await;
    let kv = js
        .create_key_value(kv::Config {
            bucket: "ttl".into(),
            history: 1,
            max_age: Duration::from_secs(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let info = stream_info(&c, "KV_ttl", "").await;
    assert_eq!(info["config"]["max_age"].as_u64(), Some(1_000_000_000));
    assert_eq!(
        info["config"]["duplicate_window"].as_u64(),
        Some(1_000_000_000),
        "duplicate window capped by the TTL"
    );
    let put_at = Instant::now();
    kv.put("k", "short-lived".into()).await.unwrap();
    // Time is the subject here: poll up to 5 s for expiry.
    let deadline = Instant::now() + Duration::from_secs(5);
    while kv.get("k").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "value never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        put_at.elapsed() >= Duration::from_millis(900),
        "expired too early"
    );
    assert_eq!(status(&js, "ttl").await.values(), 0);
}
