//! The store a real JetStream workload leaves behind passes `sealctl audit`: after a graceful
//! stop and after `kill -9`, every block authenticates and no subject, payload, stream,
//! consumer or bucket name appears anywhere in the bytes or the file names under the store.
//!
//! sealstream only (the audit reads our sealed format).
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use support::TestServer;

fn audit(store: &Path) -> (i32, serde_json::Value) {
    let out = support::sealctl_audit(store, &["--json"]);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

async fn workload(url: &str, round: u32) {
    let c = async_nats::connect(url).await.unwrap();
    let js = async_nats::jetstream::new(c);
    let stream = js
        .get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "PAYROLL".into(),
            subjects: vec!["payroll.>".into()],
            max_messages_per_subject: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 0..200 {
        js.publish(
            format!("payroll.employee.{}", i % 20),
            format!("salary-record-{round}-{i}").into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    let consumer = stream
        .get_or_create_consumer(
            "auditor-consumer",
            async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("auditor-consumer".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut msgs = consumer
        .fetch()
        .max_messages(50)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    while let Some(m) = msgs.next().await {
        m.unwrap().double_ack().await.unwrap();
    }
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "secrets-bucket".into(),
            history: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    kv.put("db.password", "hunter2-very-secret".into())
        .await
        .unwrap();
    kv.delete("db.password").await.unwrap();
    kv.put("api.token", "tok-abcdef-123456".into())
        .await
        .unwrap();
    // A stream that is created and deleted leaves nothing readable.
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "EPHEMERAL-DATA".into(),
        subjects: vec!["temp.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("temp.x", "short-lived-secret".into())
        .await
        .unwrap()
        .await
        .unwrap();
    js.delete_stream("EPHEMERAL-DATA").await.unwrap();
}

#[tokio::test]
async fn a_jetstream_workload_leaves_a_sealed_store_that_audits_clean() {
    let mut s = TestServer::start_js();
    if s.is_reference() {
        return;
    }
    let store = s.dir.path().join("store");
    let needles = [
        "payroll",
        "salary-record",
        "PAYROLL",
        "auditor-consumer",
        "secrets-bucket",
        "hunter2",
        "db.password",
        "tok-abcdef",
        "EPHEMERAL-DATA",
        "short-lived-secret",
    ];
    workload(&s.url(), 1).await;
    s.stop(true);
    let (code, v) = audit(&store);
    assert_eq!(code, 0, "after a graceful stop: {v:#}");
    support::assert_no_plaintext(&store.join("jetstream"), &needles);
    s.restart(true);
    workload(&s.url(), 2).await;
    s.stop(false);
    let (code, v) = audit(&store);
    assert_eq!(code, 0, "after kill -9: {v:#}");
    support::assert_no_plaintext(&store.join("jetstream"), &needles);
    let streams = v["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "PAYROLL and KV_secrets-bucket: {v:#}");
}

const LIVE_CONF: &str = r#"
accounts {
  SYS: { users: [ {user: admin, password: pw} ] }
  ACME: { jetstream: enabled, users: [ {user: acme, password: pw} ] }
  GLOBEX: { jetstream: enabled, users: [ {user: globex, password: pw} ] }
}
system_account: SYS
"#;

/// [`sealctl`] with `args` against the server at `url` as `user` (every test user's password
/// is `pw`).
fn sealctl_as(url: &str, user: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = args.to_vec();
    all.extend(["--server", url, "--user", user, "--password", "pw"]);
    sealctl(&all)
}

/// `sealctl` with `args`: exit code, stdout, stderr.
fn sealctl(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .args(args)
        .env_remove("SEALSTREAM_STORE_KEY")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Publishes to `subject` with acks until `stop`; returns how many were acknowledged.
async fn keep_publishing(
    url: String,
    user: &'static str,
    subject: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> u64 {
    // Connected again if the first try fails (printed: one local run after a cold build saw
    // this connect fail while five servers were starting, and the error was not kept).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let c = loop {
        match async_nats::ConnectOptions::with_user_and_password(user.into(), "pw".into())
            .connect(url.clone())
            .await
        {
            Ok(c) => break c,
            Err(e) => {
                eprintln!("publisher connect failed: {e}");
                assert!(
                    std::time::Instant::now() < deadline,
                    "publisher never connected: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let js = async_nats::jetstream::new(c);
    let mut acked = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        js.publish(subject, format!("confidential-ledger-entry-{acked}").into())
            .await
            .unwrap()
            .await
            .unwrap();
        acked += 1;
    }
    acked
}

async fn add_stream(url: &str, user: &str, name: &str, subjects: &str) {
    let c = async_nats::ConnectOptions::with_user_and_password(user.into(), "pw".into())
        .connect(url)
        .await
        .unwrap();
    let js = async_nats::jetstream::new(c);
    let stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: name.into(),
            subjects: vec![subjects.into()],
            ..Default::default()
        })
        .await
        .unwrap();
    stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some(format!("{name}-reader")),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Issue 17: the operator audits the running server while a client keeps publishing, hands
/// the auditor a signed report that verifies offline, and `/metrics` counted the audit; a
/// canary planted in the store is found live; a tenant's own audit covers its streams and
/// names nothing of the other tenant's.
#[tokio::test]
async fn a_running_server_audits_its_live_store_for_the_operator_and_for_a_tenant() {
    let s = TestServer::start_js_with(&["-m", "-1"], Some(LIVE_CONF));
    if s.is_reference() {
        return; // nats-server has no audit
    }
    add_stream(&s.url(), "acme", "ACME_LEDGER", "ledger.acme.>").await;
    add_stream(&s.url(), "globex", "GLOBEX_BOOKS", "books.globex.>").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acme = tokio::spawn(keep_publishing(
        s.url(),
        "acme",
        "ledger.acme.eu",
        stop.clone(),
    ));
    let globex = tokio::spawn(keep_publishing(
        s.url(),
        "globex",
        "books.globex.us",
        stop.clone(),
    ));
    assert!(
        support::eventually(Duration::from_secs(10), || {
            let (_, m) = s.http_get("/metrics");
            m.contains("sealstream_in_msgs_total") && !m.contains("sealstream_in_msgs_total 0\n")
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The operator: the whole store, signed.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("audit.nk");
    let report = dir.path().join("live.attestation");
    let (code, public, err) = sealctl(&["audit-key", "init", "--out", key.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let url = s.url();
    let (code, out, err) = sealctl_as(
        &url,
        "admin",
        &[
            "audit",
            "--live",
            "--attest",
            report.to_str().unwrap(),
            "--sign-with",
            key.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "live audit while publishing: {out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["live"], true, "{v:#}");
    assert_eq!(v["streams"].as_array().unwrap().len(), 2, "{v:#}");
    assert!(v["streams"][0]["messages"].as_u64().unwrap() > 0, "{v:#}");
    assert!(v["needles"].as_u64().unwrap() > 0, "{v:#}");
    let (code, out, err) = sealctl(&[
        "audit",
        "verify",
        report.to_str().unwrap(),
        "--signer",
        public.trim(),
    ]);
    assert_eq!(
        code, 0,
        "the signed live report verifies offline: {out}{err}"
    );
    let (_, metrics) = s.http_get("/metrics");
    assert!(
        metrics.contains("sealstream_audits_total 1")
            && metrics.contains("sealstream_audit_running 0"),
        "{metrics}"
    );

    // A canary planted under the store is found while the server runs.
    let store = s.store_dir().unwrap().join("jetstream");
    std::fs::write(store.join("tmp").join("debug-dump"), "CANARY-live-41c7").unwrap();
    let (code, out, _) = sealctl_as(&url, "admin", &["audit", "--canary", "CANARY-live-41c7"]);
    assert_eq!(code, 2, "a leak: {out}");
    assert!(out.contains("tmp/debug-dump"), "{out}");
    std::fs::remove_file(store.join("tmp").join("debug-dump")).unwrap();

    // A tenant: its own account only, and nothing of the other tenant in the report.
    let (code, out, err) = sealctl_as(&url, "acme", &["audit", "--live", "--tenant", "--json"]);
    assert_eq!(code, 0, "tenant audit: {out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["account"], "ACME", "{v:#}");
    assert_eq!(v["streams"].as_array().unwrap().len(), 1, "{v:#}");
    assert!(!out.contains("GLOBEX") && !out.contains("globex"), "{out}");
    let globex_id = {
        let c = async_nats::ConnectOptions::with_user_and_password("admin".into(), "pw".into())
            .connect(s.url())
            .await
            .unwrap();
        let m = c
            .request(
                "$SYS.REQ.SERVER.PING.AUDIT",
                r#"{"account":"GLOBEX"}"#.into(),
            )
            .await
            .unwrap();
        let g: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!(g["data"]["account"], "GLOBEX", "{g:#}");
        g["data"]["streams"][0]["id"].as_str().unwrap().to_owned()
    };
    assert!(
        !out.contains(&globex_id),
        "the other tenant's stream id: {out}"
    );
    assert!(
        !out.contains(store.to_str().unwrap()),
        "the server's paths: {out}"
    );

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(acme.await.unwrap() > 0);
    assert!(globex.await.unwrap() > 0);
}

/// Issue 17: the operator rotates the running server's master key while a client keeps
/// publishing and a consumer keeps reading; acknowledgements never stop, the old key no longer
/// opens the store, and the server restarted with the new key holds every acknowledged
/// message.
#[tokio::test]
async fn the_master_key_is_rotated_while_clients_publish_and_consume() {
    let mut s = TestServer::start_js_with(&[], Some(LIVE_CONF));
    if s.is_reference() {
        return; // nats-server rotates only across a restart
    }
    add_stream(&s.url(), "acme", "ACME_LEDGER", "ledger.acme.>").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = tokio::spawn(keep_publishing(
        s.url(),
        "acme",
        "ledger.acme.eu",
        stop.clone(),
    ));
    let c = async_nats::ConnectOptions::with_user_and_password("acme".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(c);
    let consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_consumer_from_stream("ACME_LEDGER-reader", "ACME_LEDGER")
        .await
        .unwrap();
    let mut read = 0usize;
    let fetch = |n| {
        let consumer = consumer.clone();
        async move {
            // Until `n` arrived (the publisher may only be starting).
            let mut got = 0;
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while got < n && std::time::Instant::now() < deadline {
                let mut msgs = consumer
                    .fetch()
                    .max_messages(n - got)
                    .expires(Duration::from_secs(1))
                    .messages()
                    .await
                    .unwrap();
                while let Some(m) = msgs.next().await {
                    m.unwrap().double_ack().await.unwrap();
                    got += 1;
                }
            }
            got
        }
    };
    read += fetch(20).await;

    let store = s.store_dir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let new_key = keys.path().join("rotated.key");
    let (code, out, err) = sealctl_as(
        &s.url(),
        "admin",
        &[
            "store",
            "rotate-master-live",
            "--new-key-file",
            new_key.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("master key rotated"), "{out}");
    assert!(new_key.exists(), "the new key file was generated");
    // Clients go on: more acknowledgements and deliveries after the rotation.
    read += fetch(20).await;
    assert!(read >= 40, "{read}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = publisher.await.unwrap();
    assert!(acked > 0);

    // Offline, the old key no longer opens the store; the new one does, and it is clean.
    s.stop(true);
    let old = store.join("jetstream.key");
    let (code, out, _) = sealctl(&[
        "audit",
        store.join("jetstream").to_str().unwrap(),
        "--key-file",
        old.to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "the old key: {out}");
    let (code, out, _) = sealctl(&[
        "audit",
        store.join("jetstream").to_str().unwrap(),
        "--key-file",
        new_key.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "the new key: {out}");
    // The operator puts the new key where the server looks for it and starts it again.
    std::fs::copy(&new_key, &old).unwrap();
    s.restart(true);
    let c = async_nats::ConnectOptions::with_user_and_password("acme".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(c);
    let info = js
        .get_stream("ACME_LEDGER")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(info.state.messages, acked, "every acknowledged message");
}

/// The id of `account`'s first stream, as the server's live audit of that account reports it.
fn first_stream_id(url: &str, account: &str) -> String {
    let (_, out, _) = sealctl_as(
        url,
        "admin",
        &["audit", "--live", "--account", account, "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["streams"][0]["id"].as_str().unwrap().to_owned()
}

/// The data keys of the stream named `name` as the live audit reports them.
fn dek_versions(url: &str, name_id: &str) -> Vec<u64> {
    let (code, out, err) = sealctl_as(url, "admin", &["audit", "--live", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == name_id)
        .unwrap_or_else(|| panic!("{name_id} in {v:#}"));
    s["dek_versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// Issue 17: a stream's data key is rotated and its files re-sealed under the new key in the
/// background while a client publishes and a consumer reads; the old key is destroyed and the
/// audit shows one key generation. A rotation interrupted before the re-sealing (the new key
/// in the keyring, the files under the old) is finished at the next start.
#[tokio::test]
async fn a_stream_is_re_sealed_under_a_new_data_key_while_clients_publish() {
    let mut s = TestServer::start_js_with(&["-m", "-1"], Some(LIVE_CONF));
    if s.is_reference() {
        return; // nats-server has no data-key rotation
    }
    add_stream(&s.url(), "acme", "ACME_LEDGER", "ledger.acme.>").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = tokio::spawn(keep_publishing(
        s.url(),
        "acme",
        "ledger.acme.eu",
        stop.clone(),
    ));
    let c = async_nats::ConnectOptions::with_user_and_password("acme".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(c);
    assert!(
        support::eventually(Duration::from_secs(10), || {
            let (_, m) = s.http_get("/metrics");
            m.lines()
                .any(|l| l.starts_with("sealstream_in_msgs_total ") && !l.ends_with(" 0"))
        })
        .await
    );
    let id = first_stream_id(&s.url(), "ACME");
    assert_eq!(dek_versions(&s.url(), &id), [1]);
    let (code, out, err) = rekey_ledger(&s.url(), &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("re-sealed under data key v2"), "{out}");
    assert!(out.contains("destroyed v1"), "{out}");
    assert_eq!(dek_versions(&s.url(), &id), [2], "the old key is gone");
    let (_, metrics) = s.http_get("/metrics");
    assert!(
        metrics.contains("sealstream_resealed_streams_total 1"),
        "{metrics}"
    );
    // Clients went on: the consumer reads from the start, across the re-sealing.
    let consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_consumer_from_stream("ACME_LEDGER-reader", "ACME_LEDGER")
        .await
        .unwrap();
    let mut msgs = consumer
        .fetch()
        .max_messages(50)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    let first = msgs.next().await.unwrap().unwrap();
    assert_eq!(&first.payload[..], b"confidential-ledger-entry-0");
    first.double_ack().await.unwrap();
    drop(msgs);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = publisher.await.unwrap();

    // An interrupted rotation: the new key was written, the files were not re-sealed.
    s.stop(true);
    let store = s.store_dir().unwrap();
    {
        use sealstream::store::meta::{KeySource, MetaOptions, MetaStore, StreamId};
        let mut meta = MetaStore::open(
            &store.join("jetstream"),
            KeySource::KeyFile(store.join("jetstream.key")),
            MetaOptions::default(),
        )
        .unwrap();
        let sid = StreamId::from_hex(&id).unwrap();
        meta.rotate_dek(sid).unwrap();
    }
    s.restart(true);
    assert!(
        support::eventually(Duration::from_secs(20), || {
            let (_, m) = s.http_get("/metrics");
            m.contains("sealstream_resealed_streams_total 1")
        })
        .await,
        "the re-sealing was resumed at start"
    );
    assert_eq!(dek_versions(&s.url(), &id), [3]);
    let c = async_nats::ConnectOptions::with_user_and_password("acme".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let info = async_nats::jetstream::new(c)
        .get_stream("ACME_LEDGER")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(info.state.messages, acked, "every acknowledged message");
}

/// `sealctl store rekey-live` of ACME's ledger stream, with `extra` options.
fn rekey_ledger(url: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "store",
        "rekey-live",
        "--account",
        "ACME",
        "--stream",
        "ACME_LEDGER",
    ];
    args.extend_from_slice(extra);
    sealctl_as(url, "admin", &args)
}

/// Issue 17: a stream is re-sealed a segment at a time, off the stream's own thread: while its
/// re-sealing is part way (some of its segments rewritten, not all), the stream acknowledges
/// publishes — a rotation does not stop a stream for as long as its whole store takes to
/// rewrite. A live audit asked meanwhile is refused (it would read the store by keys the
/// re-sealing changes). Afterwards the old key is gone and every message reads.
#[tokio::test]
async fn a_stream_acknowledges_publishes_while_it_is_part_way_re_sealed() {
    let s = TestServer::start_js_with(&["-m", "-1"], Some(LIVE_CONF));
    if s.is_reference() {
        return; // nats-server has no data-key rotation
    }
    let c = async_nats::ConnectOptions::with_user_and_password("acme".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(c);
    // Capped at 8 MiB: the store's segments are 2 MiB, so 6 MiB make three sealed segments.
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ACME_LEDGER".into(),
        subjects: vec!["ledger.acme.>".into()],
        max_bytes: 8 << 20,
        ..Default::default()
    })
    .await
    .unwrap();
    let payload = |i: usize| -> bytes::Bytes {
        let mut p = format!("confidential-ledger-entry-{i}-").into_bytes();
        p.resize(64 << 10, b'x');
        p.into()
    };
    for i in 0..96 {
        js.publish("ledger.acme.eu", payload(i))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let id = first_stream_id(&s.url(), "ACME");
    let total = 6u64 << 20;
    // 1 MiB/s: the re-sealing takes about six seconds.
    let url = s.url();
    let rekey =
        tokio::task::spawn_blocking(move || rekey_ledger(&url, &["--bytes-per-sec", "1048576"]));
    // Part way: some bytes rewritten, far from all of them.
    let part_way = || {
        let b = s.metric("sealstream_resealed_bytes_total");
        b > 0 && b < total / 2
    };
    assert!(
        support::eventually(Duration::from_secs(20), part_way).await,
        "the re-sealing never showed progress part way (bytes rewritten: {})",
        s.metric("sealstream_resealed_bytes_total")
    );
    let mut during = 0;
    for i in 96..106 {
        js.publish("ledger.acme.eu", payload(i))
            .await
            .unwrap()
            .await
            .unwrap();
        during += 1;
    }
    // A live audit would read the store by keys the re-sealing changes under it: refused.
    let (code, out, err) = sealctl_as(&s.url(), "admin", &["audit", "--live"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("re-sealing is running"),
        "{out}{err}"
    );
    let rewritten = s.metric("sealstream_resealed_bytes_total");
    assert!(
        rewritten < total && s.metric("sealstream_reseal_running") == 1,
        "the publishes were acknowledged while the re-sealing was still part way \
         ({rewritten} of about {total} bytes)"
    );
    let (code, out, err) = rekey.await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("re-sealed under data key v2"), "{out}");
    assert!(out.contains("destroyed v1"), "{out}");
    assert_eq!(dek_versions(&s.url(), &id), [2], "the old key is gone");
    // Every message reads: the first and the last, and the count.
    let mut stream = js.get_stream("ACME_LEDGER").await.unwrap();
    let info = stream.info().await.unwrap().clone();
    assert_eq!(info.state.messages, 96 + during);
    for seq in [1, 50, 96 + during] {
        let m = stream.get_raw_message(seq).await.unwrap();
        assert_eq!(m.payload, payload(seq as usize - 1), "message {seq}");
    }
    let (code, out, err) = sealctl_as(&s.url(), "admin", &["audit", "--live"]);
    assert_eq!(
        code, 0,
        "the live audit after the re-sealing is clean: {out}{err}"
    );
}

/// Issue 17: a tenant's crypto-erase leaves a signed attestation naming the key ids and
/// versions the server destroyed and the keyring generation it checked holds none of them;
/// the other tenant's data stays, and the store audits clean.
#[tokio::test]
async fn a_tenant_erase_is_attested_with_the_keys_it_destroyed() {
    let s = TestServer::start_js_with(&[], Some(LIVE_CONF));
    if s.is_reference() {
        return; // the erase report is sealstream's addition
    }
    add_stream(&s.url(), "acme", "ACME_LEDGER", "ledger.acme.>").await;
    add_stream(&s.url(), "globex", "GLOBEX_BOOKS", "books.globex.>").await;
    let acme_id = first_stream_id(&s.url(), "ACME");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("audit.nk");
    let report = dir.path().join("erase.attestation");
    let (_, public, _) = sealctl(&["audit-key", "init", "--out", key.to_str().unwrap()]);
    let (code, out, err) = sealctl_as(
        &s.url(),
        "admin",
        &[
            "account",
            "purge",
            "ACME",
            "--attest",
            report.to_str().unwrap(),
            "--sign-with",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("holds none of them"), "{out}");
    let (code, out, err) = sealctl(&[
        "audit",
        "verify",
        report.to_str().unwrap(),
        "--signer",
        public.trim(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("attested erasure: account ACME"), "{out}");
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        text.contains(&acme_id),
        "the destroyed stream key's id: {text}"
    );
    // The store no longer has ACME's stream; GLOBEX's is untouched.
    let (code, out, _) = sealctl_as(&s.url(), "admin", &["audit", "--live", "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "{v:#}");
    assert_ne!(ids[0], acme_id);
}
