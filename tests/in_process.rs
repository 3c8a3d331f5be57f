//! A server driven in the test's own process through `server::run_with`: listeners the test
//! bound itself, and a shutdown the test triggers. The real clients talk to it as to the
//! binary.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use futures::StreamExt;
use sealstream::config::ServerOptions;
use sealstream::server::{self, Listeners};

/// Starts a server on a listener bound to a free loopback port; returns its URL, the
/// trigger that stops it, and the task that runs it.
fn start(
    mut opts: ServerOptions,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), server::ServerError>>,
) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", l.local_addr().unwrap());
    opts.host = "127.0.0.1".into();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::run_with(
        opts,
        Listeners { client: Some(l) },
        async move {
            let _ = stop_rx.await;
        },
    ));
    (url, stop_tx, task)
}

/// Connects once the server accepts; a server that stopped instead fails the test with its
/// error.
async fn connect(
    url: &str,
    task: &mut tokio::task::JoinHandle<Result<(), server::ServerError>>,
) -> async_nats::Client {
    for _ in 0..2000 {
        if task.is_finished() {
            panic!("server stopped: {:?}", task.await);
        }
        if let Ok(c) = async_nats::connect(url).await {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("server at {url} never accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_pub_sub_in_process_then_shutdown() {
    let (url, stop, mut task) = start(ServerOptions::default());
    let c = connect(&url, &mut task).await;
    let mut sub = c.subscribe("in.proc").await.unwrap();
    c.flush().await.unwrap();
    for i in 0..10 {
        c.publish("in.proc", format!("m{i}").into()).await.unwrap();
    }
    for i in 0..10 {
        let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload, format!("m{i}").as_bytes());
    }
    stop.send(()).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    assert!(r.is_ok(), "{r:?}");
    // The listener is closed: nothing accepts any more.
    let addr = url.trim_start_matches("nats://");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_in_process_keeps_what_was_acked_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = ServerOptions::default();
    opts.jetstream.enabled = true;
    opts.jetstream.store_dir = Some(dir.path().to_path_buf());
    let (url, stop, mut task) = start(opts.clone());
    let js = async_nats::jetstream::new(connect(&url, &mut task).await);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "P".into(),
        subjects: vec!["p.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 1..=3u64 {
        let ack = js.publish("p.x", "v".into()).await.unwrap().await.unwrap();
        assert_eq!(ack.sequence, i);
    }
    stop_and_join(stop, task).await;

    let (url, stop, mut task) = start(opts);
    let js = async_nats::jetstream::new(connect(&url, &mut task).await);
    let mut s = js.get_stream("P").await.unwrap();
    assert_eq!(s.info().await.unwrap().state.messages, 3);
    stop_and_join(stop, task).await;
}

/// Triggers the shutdown and waits for `run_with` to return `Ok`.
async fn stop_and_join(
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), server::ServerError>>,
) {
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
