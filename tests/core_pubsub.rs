//! Core pub/sub through a real client (async-nats) against the real binary.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use async_nats::HeaderMap;
use futures::StreamExt;
use support::{eventually, TestServer};

async fn client(s: &TestServer) -> async_nats::Client {
    async_nats::connect(s.url()).await.expect("connect")
}

async fn next_msg(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("message within 5s")
        .expect("stream open")
}

async fn nothing_more(sub: &mut async_nats::Subscriber) -> bool {
    tokio::time::timeout(Duration::from_millis(300), sub.next())
        .await
        .is_err()
}

#[tokio::test]
async fn messages_arrive_in_order_and_complete() {
    let s = TestServer::start();
    let c = client(&s).await;
    let mut sub = c.subscribe("orders.new").await.unwrap();
    support::sync(&c).await;
    for i in 0..1000u32 {
        c.publish("orders.new", i.to_string().into()).await.unwrap();
    }
    support::sync(&c).await;
    for i in 0..1000u32 {
        let m = next_msg(&mut sub).await;
        assert_eq!(m.subject.as_str(), "orders.new");
        assert_eq!(m.payload, i.to_string().as_bytes());
    }
    assert!(nothing_more(&mut sub).await);
}

#[tokio::test]
async fn wildcards_match_by_token() {
    let s = TestServer::start();
    let c = client(&s).await;
    let mut star = c.subscribe("a.*.c").await.unwrap();
    let mut gt = c.subscribe("a.>").await.unwrap();
    let mut all = c.subscribe(">").await.unwrap();
    c.flush().await.unwrap();
    for subj in ["a.b.c", "a.b", "a.b.c.d", "x.y"] {
        c.publish(subj, "x".into()).await.unwrap();
    }
    c.flush().await.unwrap();
    assert_eq!(next_msg(&mut star).await.subject.as_str(), "a.b.c");
    assert!(nothing_more(&mut star).await);
    let got: Vec<String> = vec![
        next_msg(&mut gt).await.subject.to_string(),
        next_msg(&mut gt).await.subject.to_string(),
        next_msg(&mut gt).await.subject.to_string(),
    ];
    assert_eq!(got, ["a.b.c", "a.b", "a.b.c.d"]);
    assert!(nothing_more(&mut gt).await);
    for want in ["a.b.c", "a.b", "a.b.c.d", "x.y"] {
        assert_eq!(next_msg(&mut all).await.subject.as_str(), want);
    }
}

#[tokio::test]
async fn request_reply_round_trips() {
    let s = TestServer::start();
    let responder = client(&s).await;
    let mut svc = responder.subscribe("svc.echo").await.unwrap();
    support::sync(&responder).await;
    let r2 = responder.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(reply) = m.reply {
                let mut body = b"echo:".to_vec();
                body.extend_from_slice(&m.payload);
                r2.publish(reply, body.into()).await.unwrap();
            }
        }
    });
    let c = client(&s).await;
    for i in 0..20 {
        let resp = c.request("svc.echo", format!("{i}").into()).await.unwrap();
        assert_eq!(resp.payload, format!("echo:{i}").as_bytes());
    }
}

#[tokio::test]
async fn request_without_responders_fails_fast() {
    let s = TestServer::start();
    let c = client(&s).await;
    let started = std::time::Instant::now();
    let err = c.request("svc.nobody", "x".into()).await.unwrap_err();
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no-responders must not wait for a timeout"
    );
}

#[tokio::test]
async fn headers_keep_repeats_and_case() {
    let s = TestServer::start();
    let c = client(&s).await;
    let mut sub = c.subscribe("h.test").await.unwrap();
    support::sync(&c).await;
    let mut h = HeaderMap::new();
    h.append("X-Trace", "1");
    h.append("X-Trace", "2");
    h.insert("mixed-Case-Key", "Value");
    c.publish_with_headers("h.test", h, "body".into())
        .await
        .unwrap();
    let m = next_msg(&mut sub).await;
    let got = m.headers.expect("headers");
    let traces: Vec<String> = got.get_all("X-Trace").map(|v| v.to_string()).collect();
    assert_eq!(traces, ["1", "2"]);
    assert_eq!(
        got.get("mixed-Case-Key").map(|v| v.to_string()).as_deref(),
        Some("Value")
    );
    assert_eq!(m.payload, "body".as_bytes());
}

#[tokio::test]
async fn auto_unsubscribe_stops_after_max() {
    let s = TestServer::start();
    let c = client(&s).await;
    let mut sub = c.subscribe("auto.x").await.unwrap();
    sub.unsubscribe_after(3).await.unwrap();
    support::sync(&c).await;
    for _ in 0..10 {
        c.publish("auto.x", "m".into()).await.unwrap();
    }
    support::sync(&c).await;
    for _ in 0..3 {
        next_msg(&mut sub).await;
    }
    let rest = tokio::time::timeout(Duration::from_millis(500), sub.next()).await;
    assert!(matches!(rest, Ok(None) | Err(_)), "no fourth message");
}

#[tokio::test]
async fn echo_off_skips_own_messages() {
    let s = TestServer::start();
    let me = async_nats::ConnectOptions::new()
        .no_echo()
        .connect(s.url())
        .await
        .unwrap();
    let other = client(&s).await;
    let mut mine = me.subscribe("echo.t").await.unwrap();
    let mut theirs = other.subscribe("echo.t").await.unwrap();
    support::sync(&me).await;
    support::sync(&other).await;
    me.publish("echo.t", "from-me".into()).await.unwrap();
    support::sync(&me).await;
    assert_eq!(next_msg(&mut theirs).await.payload, "from-me".as_bytes());
    assert!(nothing_more(&mut mine).await);
    other.publish("echo.t", "from-other".into()).await.unwrap();
    support::sync(&other).await;
    assert_eq!(next_msg(&mut mine).await.payload, "from-other".as_bytes());
}

#[tokio::test]
async fn max_payload_boundary_is_exact() {
    let s = TestServer::with_config("max_payload: 1KB\n");
    let c = client(&s).await;
    assert_eq!(c.server_info().max_payload, 1024);
    let mut sub = c.subscribe("big").await.unwrap();
    support::sync(&c).await;
    c.publish("big", vec![7u8; 1024].into()).await.unwrap();
    assert_eq!(next_msg(&mut sub).await.payload.len(), 1024);
    let err = c.publish("big", vec![7u8; 1025].into()).await;
    assert!(err.is_err(), "client refuses to send above max_payload");
}

#[tokio::test]
async fn fifty_concurrent_connections_all_deliver() {
    let s = TestServer::start();
    let sink = client(&s).await;
    let mut sub = sink.subscribe("conc.>").await.unwrap();
    support::sync(&sink).await;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let url = s.url();
        tasks.push(tokio::spawn(async move {
            let c = async_nats::connect(url).await.unwrap();
            for j in 0..20 {
                c.publish(format!("conc.{i}"), format!("{j}").into())
                    .await
                    .unwrap();
            }
            support::sync(&c).await;
            c
        }));
    }
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await.unwrap());
    }
    let mut per_conn = [0u32; 50];
    for _ in 0..1000 {
        let m = next_msg(&mut sub).await;
        let i: usize = m
            .subject
            .as_str()
            .trim_start_matches("conc.")
            .parse()
            .unwrap();
        // Order is kept per publisher.
        assert_eq!(m.payload, per_conn[i].to_string().as_bytes());
        per_conn[i] += 1;
    }
    assert!(per_conn.iter().all(|n| *n == 20));
    assert!(nothing_more(&mut sub).await);
}

#[tokio::test]
async fn slow_consumer_is_cut_off_and_publisher_never_blocks() {
    let s = TestServer::start_with(
        &["-m", "-1"],
        Some("max_pending: 256KB\nmax_payload: 4KB\n"),
    );
    // A subscriber that never reads its socket.
    let mut stuck = s.raw();
    stuck.handshake("");
    stuck.send(b"SUB slow.> 1\r\nPING\r\n");
    stuck.expect_line("PONG");
    let healthy = client(&s).await;
    let mut ok_sub = healthy.subscribe("slow.x").await.unwrap();
    support::sync(&healthy).await;
    let publisher = client(&s).await;
    let started = std::time::Instant::now();
    // Publish in rounds the healthy subscriber keeps up with; the stuck one falls behind.
    let rounds = 400u32;
    for _ in 0..rounds {
        for _ in 0..50 {
            publisher
                .publish("slow.x", vec![1u8; 1024].into())
                .await
                .unwrap();
        }
        support::sync(&publisher).await;
        for _ in 0..50 {
            next_msg(&mut ok_sub).await;
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "publisher was not blocked"
    );
    assert!(
        stuck.closed_within(Duration::from_secs(10)),
        "stuck subscriber disconnected"
    );
    let counted = eventually(Duration::from_secs(5), || {
        let (_, body) = s.http_get("/varz");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["slow_consumers"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    assert!(counted, "slow consumer counted in /varz");
}
