//! Exact bytes on the wire: INFO, +OK, -ERR texts, PING/PONG, split-boundary parsing.
//! These run unchanged against nats-server (`SEALSTREAM_TEST_SERVER=.../nats-server`).
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{Raw, TestServer};

const T: Duration = Duration::from_secs(5);

#[test]
fn info_carries_the_fields_clients_rely_on() {
    let s = TestServer::start();
    let r = s.raw();
    let i = &r.info;
    let id = i["server_id"].as_str().unwrap();
    assert!(
        id.starts_with('N') && id.len() == 56,
        "nkey-style server id: {id}"
    );
    let version = i["version"].as_str().unwrap();
    let parts: Vec<u64> = version.split('.').map(|p| p.parse().unwrap()).collect();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0], 2);
    assert!(parts[1] >= 11, "version {version}");
    assert_eq!(i["proto"], 1);
    // nats-server's Go version; the newer Python clients read `go` before anything else.
    assert!(!i["go"].as_str().unwrap().is_empty(), "go: {i}");
    assert_eq!(i["headers"], true);
    assert_eq!(i["max_payload"], 1048576);
    assert!(i["client_id"].as_u64().unwrap() > 0);
    assert_eq!(i["client_ip"], "127.0.0.1");
    assert_eq!(i["port"].as_u64().unwrap(), u64::from(s.port));
    assert!(i.get("auth_required").is_none(), "omit-if-false");
    assert!(i.get("nonce").is_none());
}

#[test]
fn info_line_ends_with_space_crlf() {
    let s = TestServer::start();
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    while !buf.ends_with(b"\r\n") {
        let n = c.read(&mut tmp).unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&tmp[..n]);
    }
    assert!(buf.starts_with(b"INFO {"));
    assert!(buf.ends_with(b"} \r\n"));
}

#[test]
fn first_pong_is_followed_by_connect_info() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"headers\":true}\r\nPING\r\n");
    r.expect_line("PONG");
    let line = r.read_line(T).unwrap();
    let info: serde_json::Value =
        serde_json::from_str(line.strip_prefix("INFO ").unwrap().trim()).unwrap();
    assert_eq!(info["connect_info"], true);
    assert_eq!(info["remote_account"], "$G");
    r.send(b"PING\r\n");
    r.expect_line("PONG");
    assert!(
        r.silent_for(Duration::from_millis(300)),
        "connect_info INFO is sent once"
    );
}

#[test]
fn connect_without_verbose_field_stays_verbose() {
    // Missing CONNECT fields keep their defaults, and verbose defaults to on.
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"CONNECT {\"protocol\":1}\r\n");
    r.expect_line("+OK");
    r.send(b"SUB a 1\r\n");
    r.expect_line("+OK");
}

#[test]
fn duplicate_connect_keys_take_the_last_value() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":true,\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
    r.expect_line("PONG");
}

#[test]
fn protocol_zero_clients_get_no_second_info() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":0}\r\nPING\r\n");
    r.expect_line("PONG");
    assert!(r.silent_for(Duration::from_millis(300)));
}

#[test]
fn verbose_mode_acknowledges_every_op() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":true,\"protocol\":1}\r\n");
    r.expect_line("+OK");
    r.send(b"SUB foo 1\r\n");
    r.expect_line("+OK");
    r.send(b"PUB foo 2\r\nhi\r\n");
    r.expect_line("+OK");
    r.expect_line("MSG foo 1 2");
    assert_eq!(r.read_exact_bytes(4, T).unwrap(), b"hi\r\n");
    r.send(b"UNSUB 1\r\n");
    r.expect_line("+OK");
}

#[test]
fn the_annotated_capture_replays_exactly() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.handshake("");
    r.send(b"SUB greet.* 1\r\nSUB greet.* workers 2\r\nPUB greet.joe 5\r\nhello\r\n");
    r.expect_line("MSG greet.joe 1 5");
    assert_eq!(r.read_exact_bytes(7, T).unwrap(), b"hello\r\n");
    r.expect_line("MSG greet.joe 2 5");
    assert_eq!(r.read_exact_bytes(7, T).unwrap(), b"hello\r\n");
    r.send(b"HPUB greet.ann reply.1 24 26\r\nNATS/1.0\r\nX-Trace: 1\r\n\r\nhi\r\n");
    r.expect_line("HMSG greet.ann 1 reply.1 24 26");
    assert_eq!(
        r.read_exact_bytes(28, T).unwrap(),
        b"NATS/1.0\r\nX-Trace: 1\r\n\r\nhi\r\n"
    );
    r.expect_line("HMSG greet.ann 2 reply.1 24 26");
    assert_eq!(
        r.read_exact_bytes(28, T).unwrap(),
        b"NATS/1.0\r\nX-Trace: 1\r\n\r\nhi\r\n"
    );
    // sid 2 has already received 2 messages >= 1, so it goes at once.
    r.send(b"UNSUB 1\r\nUNSUB 2 1\r\nPUB greet.bob 1\r\nx\r\nPUB greet.bob 1\r\nx\r\nPING\r\n");
    r.expect_line("PONG");
    r.send(b"SUB _INBOX.Z9 3\r\nPUB svc.none _INBOX.Z9 0\r\n\r\n");
    r.expect_line("HMSG _INBOX.Z9 3 40 40");
    assert_eq!(
        r.read_exact_bytes(42, T).unwrap(),
        b"NATS/1.0 503\r\nNats-Subject: svc.none\r\n\r\n\r\n"
    );
    r.send(b"SUB a..b 4\r\n");
    r.expect_line("-ERR 'Invalid Subject'");
    r.send(b"PING\r\n");
    r.expect_line("PONG");
}

#[test]
fn bytes_split_at_every_boundary_parse_the_same() {
    let s = TestServer::start();
    let script: &[u8] = b"CONNECT {\"verbose\":false,\"protocol\":1,\"headers\":true}\r\nSUB s.* 7\r\nPUB s.a r 5\r\nhe\r\nl\r\nHPUB s.b 12 15\r\nNATS/1.0\r\n\r\nabc\r\nPUB s.c 0\r\n\r\nPING\r\n";
    let want: &[u8] = b"MSG s.a 7 r 5\r\nhe\r\nl\r\nHMSG s.b 7 12 15\r\nNATS/1.0\r\n\r\nabc\r\nMSG s.c 7 0\r\n\r\nPONG\r\n";
    for split in [1usize, 2, 3, 5, 7, 11] {
        let mut r = s.raw();
        for chunk in script.chunks(split) {
            r.send(chunk);
            r.s.flush().unwrap();
        }
        let mut got = Vec::new();
        while !got.ends_with(b"PONG\r\n") {
            let line = r.read_exact_bytes(1, T).expect("output");
            got.extend_from_slice(&line);
        }
        // Skip the post-PONG INFO: compare the messages and the PONG.
        assert_eq!(got, want, "split every {split} bytes");
    }
}

#[test]
fn ops_are_case_insensitive_and_blank_tolerant() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"connect {\"verbose\":false,\"protocol\":0}\r\nsub  a.b \t 5 \r\npub a.b\t3\r\nabc\r\nping\r\n");
    r.expect_line("MSG a.b 5 3");
    assert_eq!(r.read_exact_bytes(5, T).unwrap(), b"abc\r\n");
    r.expect_line("PONG");
}

#[test]
fn pedantic_rejects_wildcard_publish_but_keeps_the_connection() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.handshake("\"pedantic\":true");
    r.send(b"PUB foo.* 1\r\nx\r\n");
    r.expect_line("-ERR 'Invalid Publish Subject'");
    r.send(b"PING\r\n");
    r.expect_line("PONG");
}

#[test]
fn non_pedantic_publish_to_wildcard_subject_is_routed_literally() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.handshake("");
    r.send(b"SUB foo.* 1\r\nPUB foo.> 1\r\nx\r\nPUB foo..bar 1\r\ny\r\nPING\r\n");
    r.expect_line("MSG foo.> 1 1");
    assert_eq!(r.read_exact_bytes(3, T).unwrap(), b"x\r\n");
    r.expect_line("PONG");
}

fn expect_fatal(r: &mut Raw, err: &str) {
    r.expect_line(err);
    assert!(r.closed_within(T), "connection closed after {err}");
}

#[test]
fn unknown_op_closes_with_its_error() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"BLAH\r\n");
    expect_fatal(&mut r, "-ERR 'Unknown Protocol Operation'");
}

#[test]
fn payload_longer_than_declared_closes() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.handshake("");
    r.send(b"PUB foo 3\r\nhello\r\n");
    expect_fatal(&mut r, "-ERR 'Unknown Protocol Operation'");
}

#[test]
fn oversized_payload_is_refused_on_the_control_line() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.handshake("");
    r.send(b"PUB foo 2000000\r\n");
    expect_fatal(&mut r, "-ERR 'Maximum Payload Violation'");
}

#[test]
fn long_control_line_closes() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.handshake("");
    let long = format!("SUB {} 1\r\n", "a".repeat(5000));
    r.send(long.as_bytes());
    expect_fatal(&mut r, "-ERR 'maximum control line exceeded'");
}

#[test]
fn bad_protocol_version_closes() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"CONNECT {\"protocol\":2}\r\n");
    expect_fatal(&mut r, "-ERR 'invalid client protocol'");
}

#[test]
fn no_responders_without_headers_closes() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"CONNECT {\"protocol\":1,\"headers\":false,\"no_responders\":true}\r\n");
    expect_fatal(&mut r, "-ERR 'no responders requires headers support'");
}

#[test]
fn hpub_without_headers_enabled_closes() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"headers\":false}\r\nPING\r\n");
    r.expect_line("PONG");
    r.send(b"HPUB foo 12 12\r\nNATS/1.0\r\n\r\n\r\n");
    assert!(r.closed_within(T));
}

#[test]
fn subscribers_without_headers_get_plain_msg() {
    let s = TestServer::start();
    let mut plain = s.raw();
    plain.send(
        b"CONNECT {\"verbose\":false,\"protocol\":1,\"headers\":false}\r\nSUB h 1\r\nPING\r\n",
    );
    plain.expect_line("PONG");
    let mut p = s.raw();
    p.handshake("");
    p.send(b"HPUB h 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\nPING\r\n");
    p.expect_line("PONG");
    plain.expect_line("MSG h 1 2");
    assert_eq!(plain.read_exact_bytes(4, T).unwrap(), b"hi\r\n");
}

#[test]
fn reused_sid_is_ignored() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.handshake("");
    r.send(b"SUB a 1\r\nSUB b 1\r\nPUB b 1\r\nx\r\nPUB a 1\r\ny\r\nPING\r\n");
    r.expect_line("MSG a 1 1");
    assert_eq!(r.read_exact_bytes(3, T).unwrap(), b"y\r\n");
    r.expect_line("PONG");
}

#[test]
fn max_subscriptions_keeps_the_connection() {
    let s = TestServer::with_config("max_subscriptions: 2\n");
    let mut r = s.raw();
    r.handshake("");
    r.send(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\n");
    r.expect_line("-ERR 'maximum subscriptions exceeded'");
    r.send(b"PING\r\n");
    r.expect_line("PONG");
}

#[test]
fn max_connections_refuses_the_extra_client() {
    let s = TestServer::with_config("max_connections: 1\n");
    let mut first = s.raw();
    first.handshake("");
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let mut all = String::new();
    let _ = c.read_to_string(&mut all);
    assert!(
        all.contains("-ERR 'maximum connections exceeded'\r\n"),
        "got {all:?}"
    );
}

#[test]
fn auth_required_refuses_ops_before_connect() {
    let s = TestServer::with_config("authorization { token: \"s3cr3t\" }\n");
    let mut r = s.raw();
    assert_eq!(r.info["auth_required"], true);
    r.send(b"PING\r\n");
    expect_fatal(&mut r, "-ERR 'Authorization Violation'");
}

#[test]
fn wrong_token_is_an_authorization_violation() {
    let s = TestServer::with_config("authorization { token: \"s3cr3t\" }\n");
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"auth_token\":\"nope\",\"protocol\":1}\r\nPING\r\n");
    expect_fatal(&mut r, "-ERR 'Authorization Violation'");
    let mut ok = s.raw();
    ok.send(b"CONNECT {\"verbose\":false,\"auth_token\":\"s3cr3t\",\"protocol\":1}\r\nPING\r\n");
    ok.expect_line("PONG");
}

#[test]
fn silence_before_connect_times_out() {
    let s = TestServer::with_config("authorization { token: \"s3cr3t\", timeout: 0.5 }\n");
    let mut r = s.raw();
    expect_fatal(&mut r, "-ERR 'Authentication Timeout'");
}

#[test]
fn unanswered_pings_make_a_stale_connection() {
    let s = TestServer::with_config("ping_interval: \"300ms\"\nping_max: 2\n");
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
    r.expect_line("PONG");
    let mut pings = 0;
    loop {
        let line = r.read_line(T).expect("a line");
        if line == "PING" {
            pings += 1;
            continue;
        }
        if line.starts_with("INFO") {
            continue;
        }
        assert_eq!(line, "-ERR 'Stale Connection'");
        break;
    }
    assert_eq!(pings, 2);
    assert!(r.closed_within(T));
}

#[test]
fn answered_pings_keep_the_connection() {
    let s = TestServer::with_config("ping_interval: \"200ms\"\nping_max: 1\n");
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
    r.expect_line("PONG");
    for _ in 0..4 {
        loop {
            let line = r.read_line(T).expect("a PING");
            if line == "PING" {
                break;
            }
            assert!(line.starts_with("INFO"), "unexpected {line:?}");
        }
        r.send(b"PONG\r\n");
    }
    r.send(b"PING\r\n");
    r.expect_line("PONG");
}

#[test]
fn sockets_that_never_send_connect_are_closed_even_without_auth() {
    let s = TestServer::start();
    if s.is_reference() {
        return; // nats-server leaves them to its ping timer (closed after ~3 ping intervals)
    }
    let mut idle: Vec<Raw> = (0..50).map(|_| s.raw()).collect();
    for r in &mut idle {
        r.expect_line("-ERR 'Authentication Timeout'");
        assert!(r.closed_within(Duration::from_secs(5)));
    }
    // The slots are free again: a real client still connects.
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false}\r\nPING\r\n");
    r.expect_line("PONG");
}
