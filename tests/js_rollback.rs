//! Partial rollback of the sealed store is detected: a stream segment or a consumer state
//! file replaced by an older copy of itself (each still authenticates on its own) takes the
//! stream offline with a clear report — never served shorter, never redelivering acked
//! messages — and `sealctl audit` reports it. The catalog records every stream's durable mark
//! and every consumer state's generation.
//!
//! sealstream only (the reference's store is not sealed and has no such check).
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::path::{Path, PathBuf};

use support::js::{api, create_stream, publish_ack};
use support::TestServer;

use support::audit_store as audit;

/// Every file under the store's stream directories, with `in_consumer_dir` telling state
/// files from segments.
fn stream_files(store: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    let Ok(streams) = std::fs::read_dir(store.join("jetstream").join("s")) else {
        return out;
    };
    for s in streams.flatten() {
        let mut stack = vec![(s.path(), false)];
        while let Some((dir, consumer)) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push((p, true));
                } else {
                    out.push((p, consumer));
                }
            }
        }
    }
    out
}

/// Copies of the given files, to put back later.
fn snapshot(files: &[PathBuf]) -> Vec<(PathBuf, Vec<u8>)> {
    files
        .iter()
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect()
}

fn restore(copies: &[(PathBuf, Vec<u8>)]) {
    for (p, b) in copies {
        std::fs::write(p, b).unwrap();
    }
}

async fn stream_is_offline(s: &TestServer) {
    let c = async_nats::connect(s.url()).await.unwrap();
    let v = api(&c, "STREAM.INFO.R", "").await;
    assert_eq!(
        v["error"]["err_code"], 10059,
        "the stream is still served: {v}"
    );
    let log = s.log_text();
    assert!(
        log.contains("rolled back") && log.contains("offline"),
        "no clear report in the log:\n{log}"
    );
}

/// A server with stream `R` holding 3 acknowledged messages (None against the reference).
async fn seeded() -> Option<(TestServer, PathBuf, async_nats::Client)> {
    let s = TestServer::start_js();
    if s.is_reference() {
        return None;
    }
    let store = s.store_dir().unwrap();
    let c = async_nats::connect(s.url()).await.unwrap();
    create_stream(&c, r#"{"name":"R","subjects":["r.>"]}"#).await;
    for i in 0..3 {
        publish_ack(&c, &format!("r.{i}"), &[], "acked").await;
    }
    Some((s, store, c))
}

/// Stops the server cleanly, puts the old copies back, and checks that the audit reports
/// `finding` and that the restarted server keeps the stream offline.
async fn roll_back_and_check(
    s: &mut TestServer,
    store: &Path,
    old: &[(PathBuf, Vec<u8>)],
    finding: &str,
) {
    s.stop(true);
    restore(old);
    let (code, text) = audit(store);
    assert_ne!(code, 0, "audit passed a rolled-back store:\n{text}");
    assert!(text.contains(finding), "{text}");
    s.restart(false);
    s.skip_audit();
    stream_is_offline(s).await;
}

#[tokio::test]
async fn a_segment_restored_from_an_older_copy_takes_the_stream_offline() {
    let Some((mut s, store, c)) = seeded().await else {
        return;
    };
    let segments: Vec<PathBuf> = stream_files(&store)
        .into_iter()
        .filter(|(_, consumer)| !consumer)
        .map(|(p, _)| p)
        .collect();
    assert!(!segments.is_empty());
    let old = snapshot(&segments);
    for i in 3..6 {
        publish_ack(&c, &format!("r.{i}"), &[], "acked").await;
    }
    drop(c);
    roll_back_and_check(&mut s, &store, &old, "durable mark").await;
}

#[tokio::test]
async fn a_consumer_state_restored_from_an_older_copy_takes_the_stream_offline() {
    let Some((mut s, store, c)) = seeded().await else {
        return;
    };
    let v = api(
        &c,
        "CONSUMER.CREATE.R.w",
        r#"{"stream_name":"R","config":{"durable_name":"w","ack_policy":"explicit"}}"#,
    )
    .await;
    assert!(v.get("error").is_none(), "{v}");
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.unwrap();
    let mut ack_one = async || {
        c.publish_with_reply("$JS.API.CONSUMER.MSG.NEXT.R.w", inbox.clone(), "1".into())
            .await
            .unwrap();
        let m = futures::StreamExt::next(&mut sub).await.unwrap();
        let reply = m.reply.unwrap();
        // An ack with a reply is confirmed only once the consumer state is durable.
        c.request(reply.to_string(), "".into()).await.unwrap();
    };
    ack_one().await;
    let states: Vec<PathBuf> = stream_files(&store)
        .into_iter()
        .filter(|(_, consumer)| *consumer)
        .map(|(p, _)| p)
        .collect();
    assert_eq!(states.len(), 1, "one consumer state file");
    let old = snapshot(&states);
    ack_one().await;
    ack_one().await;
    drop(c);
    roll_back_and_check(&mut s, &store, &old, "older than the catalog").await;
}
