//! JetStream helpers for black-box tests: raw JSON API requests, publishes with headers that
//! return the parsed pub-ack, and a base64 decoder for `STREAM.MSG.GET` replies.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    reason = "shared by the JetStream test crates; a harness may panic"
)]

use std::time::Duration;

use async_nats::{Client, HeaderMap, Message};
use serde_json::Value;

/// How long any single API round trip may take before the test fails.
pub const API_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `body` to `subject` as a request and returns the raw reply (panics on timeout or
/// no-responders).
pub async fn request_msg(c: &Client, subject: &str, body: &str) -> Message {
    tokio::time::timeout(
        API_TIMEOUT,
        c.request(subject.to_owned(), body.to_owned().into()),
    )
    .await
    .unwrap_or_else(|_| panic!("reply from {subject} within 5s"))
    .unwrap_or_else(|e| panic!("request to {subject}: {e}"))
}

/// A JetStream API call: `$JS.API.<api>` with a JSON (or empty) body; the reply parsed as
/// JSON.
pub async fn api(c: &Client, api: &str, body: &str) -> Value {
    let subject = format!("$JS.API.{api}");
    let m = request_msg(c, &subject, body).await;
    serde_json::from_slice(&m.payload).unwrap_or_else(|e| {
        panic!(
            "{subject}: reply is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&m.payload)
        )
    })
}

/// As [`api`], asserting the reply has no `error` key.
pub async fn api_ok(c: &Client, api_subject: &str, body: &str) -> Value {
    let v = api(c, api_subject, body).await;
    assert!(v.get("error").is_none(), "{api_subject} {body} failed: {v}");
    v
}

/// As [`api`], asserting an error with exactly this `code` and `err_code`; returns the
/// description.
pub async fn api_err(
    c: &Client,
    api_subject: &str,
    body: &str,
    code: u64,
    err_code: u64,
) -> String {
    let v = api(c, api_subject, body).await;
    assert_error(&v, code, err_code)
}

/// Asserts that `v` carries `{"error":{"code":code,"err_code":err_code,..}}`; returns the
/// description.
pub fn assert_error(v: &Value, code: u64, err_code: u64) -> String {
    let e = v
        .get("error")
        .unwrap_or_else(|| panic!("expected error {code}/{err_code}, got {v}"));
    assert_eq!(e["code"].as_u64(), Some(code), "code in {v}");
    assert_eq!(e["err_code"].as_u64(), Some(err_code), "err_code in {v}");
    e["description"].as_str().unwrap_or_default().to_owned()
}

/// Creates a stream from a raw JSON config (the name is read from it) and returns the reply.
pub async fn create_stream(c: &Client, config: &str) -> Value {
    let cfg: Value = serde_json::from_str(config).expect("config is JSON");
    let name = cfg["name"].as_str().expect("config has a name");
    api_ok(c, &format!("STREAM.CREATE.{name}"), config).await
}

/// `STREAM.INFO.<name>` with an optional body; asserts success.
pub async fn stream_info(c: &Client, name: &str, body: &str) -> Value {
    api_ok(c, &format!("STREAM.INFO.{name}"), body).await
}

/// Publishes with a reply subject and returns the parsed pub-ack (success or error).
pub async fn publish_ack(
    c: &Client,
    subject: &str,
    headers: &[(&str, &str)],
    payload: &str,
) -> Value {
    let m = publish_raw(c, subject, headers, payload).await;
    serde_json::from_slice(&m.payload).unwrap_or_else(|e| {
        panic!(
            "pub-ack on {subject} is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&m.payload)
        )
    })
}

/// Publishes with a reply subject, asserts a positive pub-ack, returns its `seq`.
pub async fn publish_seq(c: &Client, subject: &str, payload: &str) -> u64 {
    let ack = publish_ack(c, subject, &[], payload).await;
    assert!(ack.get("error").is_none(), "publish to {subject}: {ack}");
    ack["seq"].as_u64().expect("seq in pub-ack")
}

/// Publishes with a reply subject and optional headers; returns the reply message as is.
pub async fn publish_raw(
    c: &Client,
    subject: &str,
    headers: &[(&str, &str)],
    payload: &str,
) -> Message {
    let mut req = async_nats::Request::new().payload(payload.to_owned().into());
    if !headers.is_empty() {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(*k, *v);
        }
        req = req.headers(h);
    }
    let fut = c.send_request(subject.to_owned(), req);
    tokio::time::timeout(API_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| panic!("pub-ack on {subject} within 5s"))
        .unwrap_or_else(|e| panic!("publish to {subject}: {e}"))
}

/// The request gets a no-responders answer (nobody listens on `subject`).
pub async fn no_responders(c: &Client, subject: &str, body: &str) -> bool {
    let r = tokio::time::timeout(
        API_TIMEOUT,
        c.request(subject.to_owned(), body.to_owned().into()),
    )
    .await
    .expect("an answer within 5s");
    matches!(r, Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders)
}

/// A header value of a received message, if present.
pub fn header<'a>(m: &'a Message, name: &str) -> Option<&'a str> {
    m.headers.as_ref()?.get(name).map(|v| v.as_str())
}

/// Decodes standard, padded base64 (what `STREAM.MSG.GET` uses for `hdrs` and `data`).
pub fn b64(s: &str) -> Vec<u8> {
    fn val(c: u8) -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c:?}"),
        }
    }
    let bytes: Vec<u8> = s.bytes().filter(|&b| b != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c) << (18 - 6 * i);
        }
        let n = chunk.len() * 6 / 8;
        for i in 0..n {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    out
}
