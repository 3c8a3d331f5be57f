//! JetStream per account (config mode): each account has its own API, streams and limits;
//! an account without JetStream gets 10039 on every API call.
//!
//! Runs against nats-server too (`SEALSTREAM_TEST_SERVER`).
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use support::js::{api, api_err, api_ok, assert_error, create_stream, publish_ack, request_msg};
use support::TestServer;

const CONF: &str = r#"
accounts {
  A: { jetstream: { max_streams: 1, max_consumers: 1, max_file: 64K }, users: [{user: a, password: a}] }
  B: { jetstream: enabled, users: [{user: b, password: b}] }
  C: { users: [{user: c, password: c}] }
}
"#;

async fn connect(s: &TestServer, user: &str) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), user.into())
        .connect(s.url())
        .await
        .unwrap()
}

#[tokio::test]
async fn accounts_have_their_own_streams() {
    let s = TestServer::start_js_with(&[], Some(CONF));
    let a = connect(&s, "a").await;
    let b = connect(&s, "b").await;
    create_stream(&a, r#"{"name":"S","subjects":["s.>"]}"#).await;
    // Same name and subjects in another account: no clash.
    create_stream(&b, r#"{"name":"S","subjects":["s.>"]}"#).await;
    let ack = publish_ack(&a, "s.1", &[], "from a").await;
    assert_eq!(ack["seq"], 1, "{ack}");
    let ia = api_ok(&a, "STREAM.INFO.S", "").await;
    let ib = api_ok(&b, "STREAM.INFO.S", "").await;
    assert_eq!(ia["state"]["messages"], 1);
    assert_eq!(ib["state"]["messages"], 0);
    let names = api_ok(&b, "STREAM.NAMES", "").await;
    assert_eq!(names["total"], 1);
    let info = api_ok(&a, "INFO", "").await;
    assert_eq!(info["streams"], 1);
    assert_eq!(info["limits"]["max_streams"], 1);
    assert_eq!(info["limits"]["max_consumers"], 1);
    // `64K` in the config language is decimal (64,000); `64KB`/`64KiB` would be 65,536.
    assert_eq!(info["limits"]["max_storage"], 64_000);
}

#[tokio::test]
async fn an_account_without_jetstream_gets_10039() {
    let s = TestServer::start_js_with(&[], Some(CONF));
    let c = connect(&s, "c").await;
    let v = api(&c, "INFO", "").await;
    let d = assert_error(&v, 503, 10039);
    assert_eq!(d, "JetStream not enabled for account");
    api_err(
        &c,
        "STREAM.CREATE.X",
        r#"{"name":"X","subjects":["x"]}"#,
        503,
        10039,
    )
    .await;
}

#[tokio::test]
async fn account_limits_refuse_streams_consumers_and_storage() {
    let s = TestServer::start_js_with(&[], Some(CONF));
    let a = connect(&s, "a").await;
    create_stream(&a, r#"{"name":"S","subjects":["s.>"]}"#).await;
    let d = api_err(
        &a,
        "STREAM.CREATE.T",
        r#"{"name":"T","subjects":["t.>"]}"#,
        400,
        10027,
    )
    .await;
    assert_eq!(d, "maximum number of streams reached");
    api_ok(
        &a,
        "CONSUMER.CREATE.S.c1",
        r#"{"stream_name":"S","config":{"durable_name":"c1","ack_policy":"explicit"}}"#,
    )
    .await;
    let d = api_err(
        &a,
        "CONSUMER.CREATE.S.c2",
        r#"{"stream_name":"S","config":{"durable_name":"c2","ack_policy":"explicit"}}"#,
        400,
        10026,
    )
    .await;
    assert_eq!(d, "maximum consumers limit reached");
    // Fill the 64 KB file quota; the publish after it is refused with 10002.
    let big = "x".repeat(8 * 1024);
    let mut refused = None;
    for i in 0..40 {
        let ack = publish_ack(&a, &format!("s.{i}"), &[], &big).await;
        if ack.get("error").is_some() {
            refused = Some(ack);
            break;
        }
    }
    let ack = refused.expect("a publish beyond max_file is refused");
    assert_eq!(ack["error"]["code"], 400, "{ack}");
    assert_eq!(ack["error"]["err_code"], 10002, "{ack}");
    assert_eq!(
        ack["error"]["description"], "resource limits exceeded for account",
        "{ack}"
    );
}

/// `jetstream { domain }`: INFO and account info name the domain, and the API answers under
/// `$JS.<domain>.API` as under `$JS.API` (what `jetstream(domain=...)` clients use). The
/// account's per-stream byte limits and `max_stream_bytes: true` are enforced.
#[tokio::test]
async fn a_domain_serves_the_api_under_its_prefix_and_stream_byte_limits_hold() {
    let conf = r#"
jetstream { domain: "test-domain" }
no_auth_user: "foo"
accounts: {
  A: {
    users: [{user: "foo"}]
    jetstream: {max_mem: 64MB, max_file: 32MB, max_streams: 10, max_consumers: 20,
                store_max_stream_bytes: 4096, max_stream_bytes: true}
  }
}
"#;
    let s = TestServer::start_js_with(&[], Some(conf));
    let c = async_nats::connect(s.url()).await.unwrap();
    assert_eq!(c.server_info().domain.as_deref(), Some("test-domain"));
    let d = api_err(
        &c,
        "STREAM.CREATE.L",
        r#"{"name":"L","subjects":["l"]}"#,
        400,
        10113,
    )
    .await;
    assert_eq!(d, "account requires a stream config to have max bytes set");
    let body = r#"{"name":"L","subjects":["l"],"max_bytes":65536}"#;
    let d = api_err(&c, "STREAM.CREATE.L", body, 400, 10122).await;
    assert_eq!(d, "stream max bytes exceeds account limit max stream bytes");
    let m = request_msg(
        &c,
        "$JS.test-domain.API.STREAM.CREATE.L",
        r#"{"name":"L","subjects":["l"],"max_bytes":128}"#,
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(v["config"]["max_bytes"], 128, "{v}");
    let info = api_ok(&c, "INFO", "").await;
    assert_eq!(info["domain"], "test-domain", "{info}");
    assert_eq!(info["limits"]["max_bytes_required"], true, "{info}");
}
