//! Publish/subscribe, wildcards, request/reply and queue groups against a running broker.
//!
//! ```sh
//! cargo run --release --bin sealstream-server &      # or any NATS server
//! cargo run --example pub_sub -- nats://127.0.0.1:4222
//! ```

use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), async_nats::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    let client = async_nats::connect(&url).await?;
    println!(
        "connected to {} ({})",
        url,
        client.server_info().server_name
    );

    // Wildcard subscription: `orders.*` sees `orders.new` and `orders.paid`.
    let mut orders = client.subscribe("orders.*").await?;
    // A service answering requests on `prices.get`.
    let mut prices = client.subscribe("prices.get").await?;
    let responder = client.clone();
    tokio::spawn(async move {
        while let Some(req) = prices.next().await {
            if let Some(reply) = req.reply {
                let _ = responder.publish(reply, "42.00".into()).await;
            }
        }
    });
    // Two members of one queue group: each job goes to one of them.
    let mut w1 = client.queue_subscribe("jobs", "workers".into()).await?;
    let mut w2 = client.queue_subscribe("jobs", "workers".into()).await?;
    client.flush().await?;

    client.publish("orders.new", "order 1".into()).await?;
    client.publish("orders.paid", "order 1".into()).await?;
    for _ in 0..2 {
        if let Some(m) = orders.next().await {
            println!("{}: {}", m.subject, String::from_utf8_lossy(&m.payload));
        }
    }

    let price = client.request("prices.get", "widget".into()).await?;
    println!("price: {}", String::from_utf8_lossy(&price.payload));

    match client.request("nobody.home", "".into()).await {
        Err(e) => println!("request to a subject nobody serves: {e}"),
        Ok(_) => println!("unexpected answer"),
    }

    for i in 0..10 {
        client.publish("jobs", format!("job {i}").into()).await?;
    }
    client.flush().await?;
    let (mut a, mut b) = (0, 0);
    for _ in 0..10 {
        tokio::select! {
            Some(_) = w1.next() => a += 1,
            Some(_) = w2.next() => b += 1,
        }
    }
    println!("queue group split 10 jobs as {a} + {b}");
    Ok(())
}
