//! Config-mode accounts: isolated subject spaces, and the two declared ways across them
//! (stream and service exports/imports). Runs unchanged against nats-server.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use futures::StreamExt;
use support::TestServer;

const CONF: &str = r#"
accounts {
  A: {
    users: [ {user: alice, password: pw} ]
    exports: [
      {stream: "pub.>"}
      {service: "svc.>"}
    ]
  }
  B: {
    users: [ {user: bob, password: pw} ]
    imports: [
      {stream: {account: A, subject: "pub.>"}, prefix: "from_a"}
      {service: {account: A, subject: "svc.>"}, to: "asvc.>"}
    ]
  }
  C: { users: [ {user: carol, password: pw} ] }
}
"#;

async fn login(s: &TestServer, user: &str) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), "pw".into())
        .connect(s.url())
        .await
        .expect("login")
}

#[tokio::test]
async fn stream_import_delivers_with_prefix_and_nowhere_else() {
    let s = TestServer::with_config(CONF);
    let (a, b, c) = (
        login(&s, "alice").await,
        login(&s, "bob").await,
        login(&s, "carol").await,
    );
    let mut b_prefixed = b.subscribe("from_a.pub.>").await.unwrap();
    let mut b_plain = b.subscribe("pub.>").await.unwrap();
    let mut c_all = c.subscribe(">").await.unwrap();
    support::sync(&b).await;
    // carol's `>` would swallow a sync request: prove her SUB is live with her own probe.
    c.publish("probe.c", "".into()).await.unwrap();
    let probe = tokio::time::timeout(Duration::from_secs(5), c_all.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(probe.subject.as_str(), "probe.c");
    a.publish("pub.x", "hello".into()).await.unwrap();
    support::sync(&a).await;
    let m = tokio::time::timeout(Duration::from_secs(5), b_prefixed.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "from_a.pub.x");
    assert_eq!(m.payload, "hello".as_bytes());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), b_plain.next())
            .await
            .is_err()
    );
    // carol's `>` never sees A's message.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), c_all.next())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn service_import_routes_requests_and_replies_across() {
    let s = TestServer::with_config(CONF);
    let (a, b, c) = (
        login(&s, "alice").await,
        login(&s, "bob").await,
        login(&s, "carol").await,
    );
    let mut svc = a.subscribe("svc.>").await.unwrap();
    support::sync(&a).await;
    let a2 = a.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            let reply = m.reply.clone().unwrap();
            assert!(reply.starts_with("_R_."), "reply rewritten: {reply}");
            let mut body = format!("{}:", m.subject).into_bytes();
            body.extend_from_slice(&m.payload);
            a2.publish(reply, body.into()).await.unwrap();
        }
    });
    let resp = b.request("asvc.echo", "ping".into()).await.unwrap();
    assert_eq!(resp.payload, "svc.echo:ping".as_bytes());
    // C has no import: nobody answers there.
    let err = c.request("asvc.echo", "ping".into()).await.unwrap_err();
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn a_mapped_service_import_reaches_exactly_the_exported_subjects() {
    let s = TestServer::with_config(
        r#"
accounts {
  A: { users: [ {user: alice, password: pw} ], exports: [ {service: "svc.*"} ] }
  B: { users: [ {user: bob, password: pw} ], imports: [ {service: {account: A, subject: "svc.*"}, to: "x.*"} ] }
}
"#,
    );
    let (a, b) = (login(&s, "alice").await, login(&s, "bob").await);
    let mut svc = a.subscribe("svc.>").await.unwrap();
    support::sync(&a).await;
    let a2 = a.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            let reply = m.reply.clone().unwrap();
            a2.publish(reply, m.subject.to_string().into())
                .await
                .unwrap();
        }
    });
    let resp = b.request("x.echo", "ping".into()).await.unwrap();
    assert_eq!(resp.payload, "svc.echo".as_bytes());
    // Two tokens where the export has one: not exported, so nobody answers.
    let err = b.request("x.admin.drop", "ping".into()).await.unwrap_err();
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}
