//! Queue groups: each message to exactly one member of each group.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use futures::StreamExt;
use support::TestServer;

#[tokio::test]
async fn each_message_goes_to_one_member_and_spreads() {
    let s = TestServer::start();
    let mut members = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..4 {
        let c = async_nats::connect(s.url()).await.unwrap();
        members.push(
            c.queue_subscribe("work.items", "workers".into())
                .await
                .unwrap(),
        );
        support::sync(&c).await;
        conns.push(c);
    }
    let plain_conn = async_nats::connect(s.url()).await.unwrap();
    let mut plain = plain_conn.subscribe("work.items").await.unwrap();
    support::sync(&plain_conn).await;
    let p = async_nats::connect(s.url()).await.unwrap();
    let n = 400;
    for i in 0..n {
        p.publish("work.items", format!("{i}").into())
            .await
            .unwrap();
    }
    support::sync(&p).await;
    for _ in 0..n {
        tokio::time::timeout(Duration::from_secs(5), plain.next())
            .await
            .unwrap()
            .unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    let mut counts = Vec::new();
    for m in members.iter_mut() {
        let mut c = 0;
        while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(300), m.next()).await {
            assert!(
                seen.insert(msg.payload.clone()),
                "message delivered twice in one group"
            );
            c += 1;
        }
        counts.push(c);
    }
    assert_eq!(
        counts.iter().sum::<usize>(),
        n,
        "every message reached exactly one member"
    );
    assert!(
        counts.iter().all(|c| *c > 40),
        "roughly even spread: {counts:?}"
    );
}

#[tokio::test]
async fn different_patterns_with_one_queue_name_form_one_group() {
    let s = TestServer::start();
    let c = async_nats::connect(s.url()).await.unwrap();
    let mut a = c.queue_subscribe("jobs.*", "q".into()).await.unwrap();
    let mut b = c.queue_subscribe("jobs.>", "q".into()).await.unwrap();
    let mut other = c.queue_subscribe("jobs.run", "other".into()).await.unwrap();
    support::sync(&c).await;
    for _ in 0..50 {
        c.publish("jobs.run", "x".into()).await.unwrap();
    }
    support::sync(&c).await;
    let mut total = 0;
    for sub in [&mut a, &mut b] {
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), sub.next()).await {
            total += 1;
        }
    }
    assert_eq!(
        total, 50,
        "queue q got each message once across both patterns"
    );
    let mut o = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), other.next()).await {
        o += 1;
    }
    assert_eq!(o, 50, "an independent group gets its own copy");
}
