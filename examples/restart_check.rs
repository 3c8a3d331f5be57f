//! The restart persistence check from the operations guides: count, restart the server, count
//! again. Run it with `publish` before the restart and `verify` after.
//!
//! ```sh
//! cargo run --release --bin sealstream-server -- -js -sd /tmp/sealstream &
//! cargo run --example restart_check -- publish nats://127.0.0.1:4222
//! kill -9 %1        # or a clean stop: kill %1
//! cargo run --release --bin sealstream-server -- -js -sd /tmp/sealstream &
//! cargo run --example restart_check -- verify nats://127.0.0.1:4222
//! ```

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use std::time::Duration;

const N: u64 = 100;

#[tokio::main]
async fn main() -> Result<(), async_nats::Error> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "verify".to_owned());
    let url = args
        .next()
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    let js = jetstream::new(async_nats::connect(&url).await?);
    match mode.as_str() {
        "publish" => {
            let _ = js.delete_stream("EVENTS").await;
            let s = js
                .create_stream(stream::Config {
                    name: "EVENTS".into(),
                    subjects: vec!["events.>".into()],
                    ..Default::default()
                })
                .await?;
            for i in 0..N {
                js.publish(format!("events.{}", i % 5), format!("event {i}").into())
                    .await?
                    .await?;
            }
            // A durable consumer that has processed (and confirmed) the first 40.
            let c = s
                .create_consumer(pull::Config {
                    durable_name: Some("auditor".into()),
                    ..Default::default()
                })
                .await?;
            let mut msgs = c
                .fetch()
                .max_messages(40)
                .expires(Duration::from_secs(2))
                .messages()
                .await?;
            while let Some(m) = msgs.next().await {
                m?.double_ack().await?;
            }
            let info = js.get_stream("EVENTS").await?.info().await?.state.clone();
            println!(
                "before restart: {} messages, last seq {}",
                info.messages, info.last_sequence
            );
            println!("consumer 'auditor': 40 acked, {} pending", N - 40);
        }
        _ => {
            let mut s = js.get_stream("EVENTS").await?;
            let state = s.info().await?.state.clone();
            let mut c: jetstream::consumer::PullConsumer = s.get_consumer("auditor").await?;
            let ci = c.info().await?;
            println!(
                "after restart: {} messages, last seq {}; consumer ack floor {}, {} pending",
                state.messages, state.last_sequence, ci.ack_floor.stream_sequence, ci.num_pending
            );
            if state.messages != N || ci.ack_floor.stream_sequence != 40 || ci.num_pending != N - 40
            {
                return Err("counts changed across the restart".into());
            }
            println!("ok: every acknowledged message and the consumer position survived");
        }
    }
    Ok(())
}
