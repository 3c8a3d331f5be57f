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
