//! JetStream for JWT tenants (operator mode): an account gets JetStream when its claims grant
//! storage, with the streams/consumers limits of its claims; tenants' streams are invisible to
//! each other; an account without JetStream claims gets 10039.
//!
//! Runs against nats-server too (`SEALSTREAM_TEST_SERVER`).
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use sealstream::auth::creds::format_creds;
use sealstream::auth::jwt::claims::AccountLimits;
use sealstream::auth::nkeys::{KeyPair, Role};
use support::js::{api, api_err, api_ok, assert_error, create_stream, publish_ack};
use support::jwt::{open_user, user_jwt, Tenant, World};
use support::TestServer;

fn js_limits(streams: i64, consumers: i64) -> AccountLimits {
    AccountLimits {
        mem_storage: -1,
        disk_storage: 10 * 1024 * 1024,
        streams,
        consumer: consumers,
        ..AccountLimits::default()
    }
}

async fn connect(s: &TestServer, t: &Tenant, name: &str) -> async_nats::Client {
    let user = KeyPair::generate(Role::User);
    let jwt = user_jwt(&t.key, &user, name, open_user(), |_| {});
    let creds = s.dir.path().join(format!("{name}.creds"));
    std::fs::write(&creds, format_creds(&jwt, &user.seed()).as_bytes()).unwrap();
    async_nats::ConnectOptions::with_credentials_file(creds)
        .await
        .unwrap()
        .connect(s.url())
        .await
        .unwrap()
}

fn server(w: &World, tenants: &[&Tenant]) -> TestServer {
    let conf = format!(
        "{}\nsystem_account: {}\n",
        w.config(tenants),
        tenants[0].key.public_key()
    );
    TestServer::start_js_with(&[], Some(&conf))
}

#[tokio::test]
async fn tenants_get_jetstream_from_their_claims() {
    let w = World::new();
    let sys = w.tenant("SYS", AccountLimits::default());
    let a = w.tenant("A", js_limits(1, 1));
    let b = w.tenant("B", js_limits(-1, -1));
    let none = w.tenant("NONE", AccountLimits::default());
    let s = server(&w, &[&sys, &a, &b, &none]);
    let ca = connect(&s, &a, "a").await;
    let cb = connect(&s, &b, "b").await;
    let cn = connect(&s, &none, "n").await;
    create_stream(&ca, r#"{"name":"ORDERS","subjects":["orders.>"]}"#).await;
    create_stream(&cb, r#"{"name":"ORDERS","subjects":["orders.>"]}"#).await;
    assert_eq!(publish_ack(&ca, "orders.1", &[], "a1").await["seq"], 1);
    let ib = api_ok(&cb, "STREAM.INFO.ORDERS", "").await;
    assert_eq!(ib["state"]["messages"], 0, "B must not see A's message");
    // A's claims: one stream, one consumer.
    api_err(
        &ca,
        "STREAM.CREATE.MORE",
        r#"{"name":"MORE","subjects":["more"]}"#,
        400,
        10027,
    )
    .await;
    api_ok(
        &ca,
        "CONSUMER.CREATE.ORDERS.c1",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"c1","ack_policy":"explicit"}}"#,
    )
    .await;
    api_err(
        &ca,
        "CONSUMER.CREATE.ORDERS.c2",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"c2","ack_policy":"explicit"}}"#,
        400,
        10026,
    )
    .await;
    let info = api_ok(&ca, "INFO", "").await;
    assert_eq!(info["limits"]["max_storage"], 10 * 1024 * 1024);
    assert_eq!(info["limits"]["max_streams"], 1);
    // No JetStream in the claims: 10039.
    let v = api(&cn, "INFO", "").await;
    assert_error(&v, 503, 10039);
}

#[tokio::test]
async fn a_tenants_streams_survive_a_restart() {
    let w = World::new();
    let sys = w.tenant("SYS", AccountLimits::default());
    let a = w.tenant("A", js_limits(-1, -1));
    let mut s = server(&w, &[&sys, &a]);
    let ca = connect(&s, &a, "a").await;
    create_stream(&ca, r#"{"name":"KEEP","subjects":["keep.>"]}"#).await;
    for i in 0..5 {
        publish_ack(&ca, &format!("keep.{i}"), &[], "x").await;
    }
    drop(ca);
    s.restart(true);
    let ca = connect(&s, &a, "a").await;
    let info = api_ok(&ca, "STREAM.INFO.KEEP", "").await;
    assert_eq!(info["state"]["messages"], 5, "{info}");
}

/// Tenant erasure: the system account's `$JS.API.ACCOUNT.PURGE.<account>` stops the tenant's
/// streams and destroys its keys and files; its streams are gone, others are untouched.
#[tokio::test]
async fn purging_a_tenant_erases_its_streams() {
    let w = World::new();
    let sys = w.tenant("SYS", AccountLimits::default());
    let a = w.tenant("A", js_limits(-1, -1));
    let b = w.tenant("B", js_limits(-1, -1));
    let s = server(&w, &[&sys, &a, &b]);
    if s.is_reference() {
        return; // nats-server answers ACCOUNT.PURGE only when clustered.
    }
    let ca = connect(&s, &a, "a").await;
    let cb = connect(&s, &b, "b").await;
    create_stream(&ca, r#"{"name":"GONE","subjects":["gone.>"]}"#).await;
    create_stream(&cb, r#"{"name":"STAYS","subjects":["stays.>"]}"#).await;
    publish_ack(&ca, "gone.1", &[], "secret").await;
    publish_ack(&cb, "stays.1", &[], "kept").await;
    let stream_dirs = || {
        std::fs::read_dir(s.dir.path().join("store/jetstream/s"))
            .unwrap()
            .count()
    };
    assert_eq!(stream_dirs(), 2);
    let admin = connect(&s, &sys, "admin").await;
    let r = support::js::request_msg(
        &admin,
        &format!("$JS.API.ACCOUNT.PURGE.{}", a.key.public_key()),
        "",
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
    assert_eq!(v["initiated"], true, "{v}");
    api_err(&ca, "STREAM.INFO.GONE", "", 404, 10059).await;
    let ib = api_ok(&cb, "STREAM.INFO.STAYS", "").await;
    assert_eq!(ib["state"]["messages"], 1);
    assert_eq!(stream_dirs(), 1, "the tenant's stream directory is gone");
}
