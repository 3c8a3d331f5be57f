//! JetStream through nats-py, the Python client: streams, publish acks, pull and durable push
//! consumers, consumer info, and Key-Value buckets (tests/python/js_nats_py.py).
//!
//! Needs the project's virtualenv (`scripts/setup-test-env`, which `scripts/test` runs). Under
//! CI its absence is a failure; on a developer machine without it the test says so and passes.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::process::Command;

use support::{repo_path, TestServer};

#[test]
fn nats_py_jetstream_and_kv_work() {
    let Some(python) = support::venv_python() else {
        return;
    };
    let s = TestServer::start_js();
    let out = Command::new(python)
        .arg(repo_path("tests/python/js_nats_py.py"))
        .arg(s.url())
        .output()
        .expect("run python");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "nats-py script failed:\n{text}");
    assert!(text.contains("nats-py jetstream: ok"), "{text}");
}
