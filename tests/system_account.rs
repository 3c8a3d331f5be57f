//! The system account: connect/disconnect events, server ping, `acc_is_sys`, and tenants kept
//! out of it.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use futures::StreamExt;
use support::TestServer;

const CONF: &str = r#"
accounts {
  SYS: { users: [ {user: admin, password: pw} ] }
  TENANT: { users: [ {user: app, password: pw} ] }
}
system_account: SYS
"#;

#[tokio::test]
async fn system_users_see_connect_events_and_can_ping_the_server() {
    if support::server_binary().1 {
        return; // event payload details differ; the subjects are the reference's
    }
    let s = TestServer::with_config(CONF);
    let admin = async_nats::ConnectOptions::with_user_and_password("admin".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let mut events = admin.subscribe("$SYS.ACCOUNT.*.CONNECT").await.unwrap();
    admin.flush().await.unwrap();
    let reply = admin
        .request("$SYS.REQ.SERVER.PING", "".into())
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(v["statsz"]["connections"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["server"]["id"].as_str().unwrap().starts_with('N'));
    let _app = async_nats::ConnectOptions::with_user_and_password("app".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.subject.as_str(), "$SYS.ACCOUNT.TENANT.CONNECT");
    let body: serde_json::Value = serde_json::from_slice(&e.payload).unwrap();
    assert_eq!(body["client"]["user"], "app");
    assert_eq!(body["client"]["acc"], "TENANT");
}

#[test]
fn post_connect_info_marks_system_users() {
    let s = TestServer::with_config(CONF);
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"user\":\"admin\",\"pass\":\"pw\"}\r\nPING\r\n");
    r.expect_line("PONG");
    let line = r.read_line(Duration::from_secs(5)).unwrap();
    let info: serde_json::Value =
        serde_json::from_str(line.trim_start_matches("INFO ").trim()).unwrap();
    assert_eq!(info["acc_is_sys"], true);
    assert_eq!(info["remote_account"], "SYS");
}

#[tokio::test]
async fn tenants_cannot_reach_the_system_requests() {
    let s = TestServer::with_config(CONF);
    let app = async_nats::ConnectOptions::with_user_and_password("app".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let err = app
        .request("$SYS.REQ.SERVER.PING", "".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn the_system_account_answers_every_request_not_only_the_first() {
    let s = TestServer::with_config(CONF);
    let admin = async_nats::ConnectOptions::with_user_and_password("admin".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    for i in 0..5 {
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            admin.request("$SYS.REQ.SERVER.PING", "".into()),
        )
        .await
        .unwrap_or_else(|_| panic!("request {i} unanswered"))
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
        assert!(v["server"]["id"].as_str().unwrap().starts_with('N'), "{v}");
    }
}

/// A single JetStream server asked by its system account for its monitoring documents
/// (`$SYS.REQ.SERVER.PING.<KIND>`, wrapped as `{"server", "data"}`) and for a meta leader
/// stepdown, which nobody answers without a cluster.
#[tokio::test]
async fn the_system_account_reads_monitoring_and_a_lone_server_has_no_meta_leader() {
    let s = TestServer::start_js_with(&[], Some(CONF));
    let admin = async_nats::ConnectOptions::with_user_and_password("admin".into(), "pw".into())
        .connect(s.url())
        .await
        .unwrap();
    let ask = |subject: &'static str, body: &'static str| {
        let admin = admin.clone();
        async move {
            let reply =
                tokio::time::timeout(Duration::from_secs(5), admin.request(subject, body.into()))
                    .await
                    .unwrap()
                    .unwrap();
            serde_json::from_slice::<serde_json::Value>(&reply.payload).unwrap()
        }
    };
    let jsz = ask("$SYS.REQ.SERVER.PING.JSZ", "{}").await;
    assert!(
        jsz["server"]["id"].as_str().unwrap().starts_with('N'),
        "{jsz}"
    );
    assert!(jsz["data"]["config"]["store_dir"].is_string(), "{jsz}");
    let varz = ask("$SYS.REQ.SERVER.PING.VARZ", "").await;
    assert_eq!(varz["data"]["server_id"], varz["server"]["id"], "{varz}");
    let healthz = ask("$SYS.REQ.SERVER.PING.HEALTHZ", "").await;
    assert_eq!(healthz["data"]["status"], "ok", "{healthz}");
    // Without a cluster there is no meta leader to step down: nobody answers.
    let step = tokio::time::timeout(
        Duration::from_secs(1),
        admin.request("$JS.API.META.LEADER.STEPDOWN", "".into()),
    )
    .await;
    assert!(
        !matches!(step, Ok(Ok(_))),
        "a stepdown without a cluster was answered"
    );
}
