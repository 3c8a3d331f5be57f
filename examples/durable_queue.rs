//! The durable order queue from the operations guides: a stream captures `orders.>`, a durable
//! pull consumer is the worker's place in it. Orders published while the worker is offline
//! wait in the stream; when the worker comes back it receives every one of them, acks each,
//! and the consumer's ack floor records that — across restarts too.
//!
//! ```sh
//! cargo run --release --bin sealstream-server -- -js &
//! cargo run --example durable_queue -- nats://127.0.0.1:4222
//! ```

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), async_nats::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    let js = jetstream::new(async_nats::connect(&url).await?);
    // Start clean so the example can run twice.
    let _ = js.delete_stream("ORDERS").await;
    let orders = js
        .create_stream(stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await?;
    // The worker's durable position exists before any order does.
    orders
        .create_consumer(pull::Config {
            durable_name: Some("fulfilment".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            ..Default::default()
        })
        .await?;
    println!("stream ORDERS and durable consumer 'fulfilment' created; the worker is offline");

    for i in 1..=10 {
        // Each publish returns only once the order is on disk (sealed and fsync'd).
        let ack = js
            .publish(format!("orders.created.{i}"), format!("order #{i}").into())
            .await?
            .await?;
        println!("published order #{i} -> stream seq {}", ack.sequence);
    }

    // The worker comes online (a fresh connection, as a restarted process would have).
    let worker = jetstream::new(async_nats::connect(&url).await?);
    let consumer: jetstream::consumer::PullConsumer = worker
        .get_stream("ORDERS")
        .await?
        .get_consumer("fulfilment")
        .await?;
    let mut received = 0;
    let mut batch = consumer
        .fetch()
        .max_messages(100)
        .expires(Duration::from_secs(2))
        .messages()
        .await?;
    while let Some(m) = batch.next().await {
        let m = m?;
        println!(
            "worker got {}: {}",
            m.subject,
            String::from_utf8_lossy(&m.payload)
        );
        m.double_ack().await?; // confirmed: never redelivered, even after a crash
        received += 1;
    }
    let mut consumer = consumer;
    let info = consumer.info().await?;
    println!(
        "received {received} orders; ack floor at stream seq {}, {} pending",
        info.ack_floor.stream_sequence, info.num_pending
    );
    if received != 10 || info.num_pending != 0 {
        return Err("the worker did not receive every order".into());
    }
    println!("ok: every order published while the worker was offline was delivered");
    Ok(())
}
