//! WebSocket clients (`websocket {}`), black box over raw sockets: the RFC 6455 upgrade, the
//! client protocol inside masked frames, pings, protocol violations, and the
//! `allowed_connection_types` rule. The same tests pass against nats-server.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]
#![allow(
    clippy::indexing_slicing,
    reason = "test code indexes what it just read"
)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::TestServer;

/// The websocket port, from the startup log (both servers print the same line).
fn ws_port(s: &TestServer) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = s.log_text();
        if let Some(rest) = log.split("Listening for websocket clients on ws://").nth(1) {
            let addr = rest.lines().next().unwrap_or_default();
            return addr.rsplit(':').next().unwrap().trim().parse().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "no websocket listener in the log: {log}"
        );
        support::spin_pause(Duration::from_millis(20));
    }
}

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn upgrade(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // RFC 6455 §1.3's example key and its accept value.
    assert!(
        head.to_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    s
}

/// One masked client frame.
fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut f = vec![first];
    let n = payload.len();
    if n < 126 {
        f.push(0x80 | n as u8);
    } else {
        f.push(0x80 | 126);
        f.extend_from_slice(&[(n >> 8) as u8, n as u8]);
    }
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// Reads one server frame: (opcode, payload). Server frames are never masked.
fn read_frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).ok()?;
    assert_eq!(h[1] & 0x80, 0, "server frames are not masked");
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).ok()?;
            (usize::from(l[0]) << 8) | usize::from(l[1])
        }
        127 => {
            let mut l = [0u8; 8];
            s.read_exact(&mut l).ok()?;
            l.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
        }
        n => usize::from(n),
    };
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).ok()?;
    Some((h[0] & 0x0f, p))
}

/// Reads data frames until their text contains `want`.
fn read_until(s: &mut TcpStream, want: &str) -> String {
    let mut text = String::new();
    while !text.contains(want) {
        let (op, p) = read_frame(s).unwrap_or_else(|| panic!("closed before {want:?}: {text}"));
        if op == 0x1 || op == 0x2 || op == 0x0 {
            text.push_str(&String::from_utf8_lossy(&p));
        }
    }
    text
}

#[test]
fn the_client_protocol_runs_inside_frames() {
    let s = TestServer::with_config("websocket {\n  port: -1\n  no_tls: true\n}\n");
    let mut ws = upgrade(ws_port(&s));
    let info = read_until(&mut ws, "\r\n");
    assert!(info.starts_with("INFO {"), "{info}");
    // One command cut over two frames, the second a continuation.
    let cmds =
        b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nSUB a 1\r\nPUB a 2\r\nhi\r\nPING\r\n";
    let (one, two) = cmds.split_at(30);
    ws.write_all(&frame(0x02, one)).unwrap();
    ws.write_all(&frame(0x80, two)).unwrap();
    let got = read_until(&mut ws, "PONG\r\n");
    assert!(got.contains("MSG a 1 2\r\nhi\r\n"), "{got}");
    // A ping is answered with a pong carrying its payload.
    ws.write_all(&frame(0x89, b"are you there")).unwrap();
    let (op, p) = loop {
        let f = read_frame(&mut ws).unwrap();
        if f.0 == 0xA {
            break f;
        }
    };
    assert_eq!((op, p.as_slice()), (0xA, &b"are you there"[..]));
    // A payload larger than one frame of ours arrives whole.
    let big = "x".repeat(100_000);
    let mut pubs = format!("PUB a {}\r\n{big}\r\nPING\r\n", big.len()).into_bytes();
    let rest = pubs.split_off(60_000);
    ws.write_all(&frame(0x02, &pubs)).unwrap();
    ws.write_all(&frame(0x80, &rest)).unwrap();
    let got = read_until(&mut ws, "PONG\r\n");
    assert!(got.contains(&format!("MSG a 1 100000\r\n{big}\r\n")));
}

#[test]
fn an_unmasked_client_frame_ends_the_connection() {
    let s = TestServer::with_config("websocket {\n  port: -1\n  no_tls: true\n}\n");
    let mut ws = upgrade(ws_port(&s));
    read_until(&mut ws, "\r\n");
    ws.write_all(&[0x82, 6, b'P', b'I', b'N', b'G', b'\r', b'\n'])
        .unwrap();
    // Either a close frame or the socket closing; never a PONG.
    loop {
        match read_frame(&mut ws) {
            None => break,
            Some((0x8, _)) => break,
            Some((_, p)) => assert!(!String::from_utf8_lossy(&p).contains("PONG")),
        }
    }
}

#[test]
fn a_plain_http_request_is_refused() {
    let s = TestServer::with_config("websocket {\n  port: -1\n  no_tls: true\n}\n");
    let mut c = TcpStream::connect(("127.0.0.1", ws_port(&s))).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut resp = String::new();
    let _ = c.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 4"), "{resp}");
}

#[test]
fn a_user_limited_to_standard_connections_cannot_use_websocket() {
    let conf = "websocket {\n  port: -1\n  no_tls: true\n}\n\
                authorization { users: [\n\
                  { user: tcp, password: pw, allowed_connection_types: [\"STANDARD\"] }\n\
                  { user: web, password: pw, allowed_connection_types: [\"WEBSOCKET\"] }\n\
                ] }\n";
    let s = TestServer::with_config(conf);
    let connect = |user: &str| {
        let mut ws = upgrade(ws_port(&s));
        read_until(&mut ws, "\r\n");
        let line = format!(
            "CONNECT {{\"verbose\":false,\"user\":\"{user}\",\"pass\":\"pw\"}}\r\nPING\r\n"
        );
        ws.write_all(&frame(0x82, line.as_bytes())).unwrap();
        let mut text = String::new();
        while !text.contains("PONG") && !text.contains("-ERR") {
            match read_frame(&mut ws) {
                Some((0x0..=0x2, p)) => text.push_str(&String::from_utf8_lossy(&p)),
                Some(_) => {}
                None => break,
            }
        }
        text
    };
    assert!(connect("web").contains("PONG"));
    assert!(connect("tcp").contains("-ERR 'Authorization Violation'"));
    // And the other way round on the client port.
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"user\":\"web\",\"pass\":\"pw\"}\r\nPING\r\n");
    r.expect_line("-ERR 'Authorization Violation'");
}
