//! Backpressure into streams: a client flooding a file stream with core PUBs (no reply, so
//! nothing paces it) is slowed down by TCP backpressure — the server stops reading it while
//! the stream's bounded intake is full — instead of queueing without limit. Every message is
//! stored (nothing dropped) and the server's peak memory stays bounded.
//!
//! sealstream only: nats-server drops what it cannot keep up with (issue 12 measured 43 %).
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::js::{create_stream, stream_info};
use support::TestServer;

/// Peak resident memory of a process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[tokio::test]
async fn a_core_publish_flood_into_a_stream_is_slowed_not_queued_or_dropped() {
    let s = TestServer::start_js();
    if s.is_reference() {
        return;
    }
    let c = async_nats::connect(s.url()).await.unwrap();
    create_stream(&c, r#"{"name":"FLOOD","subjects":["flood.>"]}"#).await;
    const N: usize = 100_000;
    let payload = vec![b'x'; 1024];
    let port = s.port;
    let writer = std::thread::spawn(move || {
        let mut w = TcpStream::connect(("127.0.0.1", port)).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut info = [0u8; 4096];
        let _ = w.read(&mut info).unwrap();
        w.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\n")
            .unwrap();
        let mut batch = Vec::with_capacity(64 * 1100);
        for i in 0..N {
            batch.extend_from_slice(b"PUB flood.x 1024\r\n");
            batch.extend_from_slice(&payload);
            batch.extend_from_slice(b"\r\n");
            if i % 64 == 63 {
                w.write_all(&batch).unwrap();
                batch.clear();
            }
        }
        batch.extend_from_slice(b"PING\r\n");
        w.write_all(&batch).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(6).any(|x| x == b"PONG\r\n") {
            let n = w.read(&mut buf).unwrap();
            assert!(n > 0, "server closed the publisher");
            got.extend_from_slice(&buf[..n]);
        }
        w
    });
    let _conn = writer.join().unwrap();
    // Everything the server read is in the stream once its thread catches up.
    let mut msgs = 0;
    for _ in 0..600 {
        let v = stream_info(&c, "FLOOD", "").await;
        msgs = v["state"]["messages"].as_u64().unwrap_or(0);
        if msgs == N as u64 {
            break;
        }
        support::spin_pause(Duration::from_millis(100));
    }
    assert_eq!(msgs, N as u64, "every message is stored");
    let peak = peak_rss(s.pid());
    assert!(
        peak < 256 << 20,
        "peak RSS {} MiB while 100 MiB were published",
        peak >> 20
    );
}
