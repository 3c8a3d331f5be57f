//! JetStream on the monitoring port: `/jsz` (nats-server's field names), `/accountz`,
//! `/healthz?js-enabled-only`, and Prometheus `/metrics` checked by a real exposition-format
//! parser (prometheus_client, from the test virtualenv). Tenants' names stay off the port when
//! several tenants share the server, unless `monitor_tenant_details: true`.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use futures::StreamExt;

use support::js::{api_ok, create_stream, publish_ack};
use support::{repo_path, TestServer};

async fn seeded(conf: Option<&str>) -> TestServer {
    TestServer::start_js_with(&["-m", "-1"], conf)
}

#[tokio::test]
async fn jsz_reports_totals_and_details_with_nats_server_field_names() {
    let s = seeded(None).await;
    let c = async_nats::connect(s.url()).await.unwrap();
    create_stream(
        &c,
        r#"{"name":"ORDERS","subjects":["orders.>"],"max_msgs":100}"#,
    )
    .await;
    for i in 0..3 {
        publish_ack(&c, &format!("orders.{i}"), &[], "x").await;
    }
    api_ok(
        &c,
        "CONSUMER.CREATE.ORDERS.proc",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"proc","ack_policy":"explicit"}}"#,
    )
    .await;
    let (code, body) = s.http_get("/jsz");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    for k in [
        "server_id",
        "now",
        "config",
        "memory",
        "storage",
        "accounts",
        "api",
        "streams",
        "consumers",
        "messages",
        "bytes",
    ] {
        assert!(v.get(k).is_some(), "/jsz lacks {k}: {v}");
    }
    assert_eq!(v["streams"], 1);
    assert_eq!(v["consumers"], 1);
    assert_eq!(v["messages"], 3);
    if s.is_reference() {
        return;
    }
    let (_, body) = s.http_get("/jsz?accounts=true&streams=true&consumers=true&config=true");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let acc = &v["account_details"][0];
    assert_eq!(acc["name"], "$G");
    let stream = &acc["stream_detail"][0];
    assert_eq!(stream["name"], "ORDERS");
    assert_eq!(stream["state"]["messages"], 3);
    assert_eq!(stream["config"]["max_msgs"], 100);
    assert_eq!(stream["consumer_detail"][0]["name"], "proc");
    assert_eq!(stream["consumer_detail"][0]["num_pending"], 3);
    let (code, _) = s.http_get("/healthz?js-enabled-only=true");
    assert_eq!(code, 200);
    let (_, body) = s.http_get("/accountz");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["accounts"].as_array().unwrap().iter().any(|a| a == "$G"),
        "{v}"
    );
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text() {
    let s = seeded(None).await;
    if s.is_reference() {
        return;
    }
    let c = async_nats::connect(s.url()).await.unwrap();
    create_stream(&c, r#"{"name":"M","subjects":["m.>"],"max_bytes":1000000}"#).await;
    for i in 0..5 {
        let id = format!("id-{i}");
        publish_ack(&c, &format!("m.{i}"), &[("Nats-Msg-Id", &id)], "payload").await;
    }
    api_ok(
        &c,
        "CONSUMER.CREATE.M.w",
        r#"{"stream_name":"M","config":{"durable_name":"w","ack_policy":"explicit"}}"#,
    )
    .await;
    // Five delivered and unacknowledged; the second request stays waiting for five more.
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.unwrap();
    for body in [r#"{"batch":2}"#, r#"{"batch":10,"expires":30000000000}"#] {
        c.publish_with_reply("$JS.API.CONSUMER.MSG.NEXT.M.w", inbox.clone(), body.into())
            .await
            .unwrap();
    }
    for _ in 0..5 {
        tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .unwrap()
            .unwrap();
    }
    let (code, body) = s.http_get("/metrics");
    assert_eq!(code, 200);
    let python = repo_path(".venv/bin/python");
    if !python.exists() {
        assert!(std::env::var_os("CI").is_none(), "CI must provide .venv");
        return;
    }
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(sys.stdin.read())}
def val(name, **labels):
    for s in fams[name].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()) and s.name == name:
            return s.value
    raise SystemExit(f"no sample {name} {labels}")
assert val("sealstream_jetstream_streams") == 1
assert val("sealstream_jetstream_messages") == 5
assert val("sealstream_stream_messages", stream="M") == 5
assert val("sealstream_consumer_num_pending", stream="M", consumer="w") == 0
assert val("sealstream_jetstream_ack_pending") == 5
assert val("sealstream_jetstream_pull_requests_waiting") == 1
assert val("sealstream_jetstream_dedupe_ids") == 5
assert [s.value for f in fams.values() for s in f.samples if s.name == "sealstream_jetstream_dedupe_early_evictions_total"] == [0]
assert val("sealstream_jetstream_api_pending_bytes") == 0
assert val("sealstream_jetstream_intake_pending_bytes") == 0
assert 0 < val("sealstream_stream_limit_usage_ratio", stream="M", limit="max_bytes") < 1
assert fams["sealstream_store_fsync_seconds"].type == "histogram"
count = [s.value for s in fams["sealstream_store_fsync_seconds"].samples if s.name.endswith("_count")][0]
assert count >= 5, count
print("metrics ok")
"#;
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("metrics ok"),
        "{text}\n---\n{body}"
    );
}

const TENANTS: &str = r#"
accounts {
  A: { jetstream: enabled, users: [{user: a, password: a}] }
  B: { jetstream: enabled, users: [{user: b, password: b}] }
}
"#;

#[tokio::test]
async fn tenant_names_stay_off_the_monitoring_port_unless_enabled() {
    for (conf, shown) in [
        (TENANTS.to_owned(), false),
        (format!("monitor_tenant_details: true\n{TENANTS}"), true),
    ] {
        let s = seeded(Some(&conf)).await;
        if s.is_reference() {
            return;
        }
        let a = async_nats::ConnectOptions::with_user_and_password("a".into(), "a".into())
            .name("secret-project-billing")
            .connect(s.url())
            .await
            .unwrap();
        create_stream(&a, r#"{"name":"SECRET-PROJECT","subjects":["sp.>"]}"#).await;
        publish_ack(&a, "sp.1", &[], "x").await;
        let (_, jsz) = s.http_get("/jsz?accounts=true&streams=true&consumers=true");
        let (_, metrics) = s.http_get("/metrics");
        let (_, accountz) = s.http_get("/accountz");
        let (_, connz) = s.http_get("/connz?subs=1");
        let (_, subsz) = s.http_get("/subsz?subs=1");
        let (_, varz) = s.http_get("/varz");
        let v: serde_json::Value = serde_json::from_str(&jsz).unwrap();
        assert_eq!(v["messages"], 1, "totals are always shown: {v}");
        for body in [&jsz, &metrics] {
            assert_eq!(body.contains("SECRET-PROJECT"), shown, "{body}");
        }
        // The same rule on every endpoint: connection names and accounts too.
        assert_eq!(connz.contains("secret-project-billing"), shown, "{connz}");
        let c: serde_json::Value = serde_json::from_str(&connz).unwrap();
        assert!(c["num_connections"].as_u64().unwrap() >= 1, "{c}");
        let accounts: Vec<&serde_json::Value> = c["connections"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.get("account"))
            .collect();
        assert_eq!(accounts.contains(&&serde_json::json!("A")), shown, "{c}");
        for body in [&subsz, &varz] {
            assert!(!body.contains("secret-project"), "{body}");
        }
        assert_eq!(accountz.contains("\"A\""), shown, "{accountz}");
    }
}
