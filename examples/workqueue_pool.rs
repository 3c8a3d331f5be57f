//! A worker pool on a work-queue stream: three workers share one durable pull consumer; each
//! job goes to one worker and leaves the stream when acked. One worker "crashes" on its first
//! job (never acks it): after `ack_wait` the job is redelivered to a healthy worker, and
//! `max_deliver` bounds how often that can happen.
//!
//! ```sh
//! cargo run --release --bin sealstream-server -- -js &
//! cargo run --example workqueue_pool -- nats://127.0.0.1:4222
//! ```

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;

const JOBS: usize = 30;

#[tokio::main]
async fn main() -> Result<(), async_nats::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    let js = jetstream::new(async_nats::connect(&url).await?);
    let _ = js.delete_stream("JOBS").await;
    let s = js
        .create_stream(stream::Config {
            name: "JOBS".into(),
            subjects: vec!["jobs.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await?;
    s.create_consumer(pull::Config {
        durable_name: Some("pool".into()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(1),
        max_deliver: 3,
        ..Default::default()
    })
    .await?;
    for i in 0..JOBS {
        js.publish(format!("jobs.resize.{i}"), format!("job {i}").into())
            .await?
            .await?;
    }
    println!("{JOBS} jobs queued");

    let done = Arc::new(Mutex::new(BTreeSet::new()));
    let mut workers = Vec::new();
    for w in 0..3 {
        let url = url.clone();
        let done = Arc::clone(&done);
        workers.push(tokio::spawn(async move {
            let js = jetstream::new(async_nats::connect(&url).await?);
            let c: jetstream::consumer::PullConsumer =
                js.get_stream("JOBS").await?.get_consumer("pool").await?;
            let mut handled = 0;
            let mut crashed = false;
            loop {
                if done.lock().map(|d| d.len()).unwrap_or(0) >= JOBS {
                    break;
                }
                let mut batch = c
                    .fetch()
                    .max_messages(5)
                    .expires(Duration::from_millis(500))
                    .messages()
                    .await?;
                while let Some(m) = batch.next().await {
                    let m = m?;
                    if w == 0 && !crashed {
                        crashed = true;
                        println!("worker {w} crashes while handling {} (no ack)", m.subject);
                        continue;
                    }
                    m.double_ack().await?;
                    handled += 1;
                    if let Ok(mut d) = done.lock() {
                        d.insert(m.subject.to_string());
                    }
                }
            }
            Ok::<usize, async_nats::Error>(handled)
        }));
    }
    let mut total = 0;
    for (w, h) in workers.into_iter().enumerate() {
        let n = h.await??;
        println!("worker {w} completed {n} jobs");
        total += n;
    }
    let left = js.get_stream("JOBS").await?.info().await?.state.messages;
    println!("{total} completions, {left} jobs left in the stream");
    if total != JOBS || left != 0 {
        return Err("some job was lost or done twice".into());
    }
    println!("ok: every job done exactly once, including the one a crashed worker dropped");
    Ok(())
}
