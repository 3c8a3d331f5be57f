//! The same broker through nats-py, the Python client: pub/sub, request/reply, no-responders,
//! headers and queue groups (tests/python/core_nats_py.py).
//!
//! Needs the project's virtualenv (`scripts/setup-test-env`, which `scripts/test` runs). Under
//! CI its absence is a failure; on a developer machine without it the test says so and passes.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::process::Command;

use support::{repo_path, TestServer};

/// The Python tests run one at a time: nats-py's own timing is the thing most sensitive to a
/// busy machine (it loses deliveries under CPU starvation against nats-server too).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn nats_py_core_messaging_works() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(python) = support::venv_python() else {
        return;
    };
    let s = TestServer::start();
    let out = Command::new(python)
        .arg(repo_path("tests/python/core_nats_py.py"))
        .arg(s.url())
        .output()
        .expect("run python");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "nats-py script failed:\n{text}");
    assert!(text.contains("nats-py core: ok"), "{text}");
}

#[test]
fn nats_py_fails_over_to_another_member_when_its_node_is_killed() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    use support::cluster::{Kind, TestCluster};

    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(python) = support::venv_python() else {
        return;
    };
    let mut cl = TestCluster::start(&[Kind::UnderTest; 3], None);
    cl.wait_full_mesh(std::time::Duration::from_secs(10));
    let mut child = Command::new(python)
        .arg(repo_path("tests/python/failover_nats_py.py"))
        .arg(cl.url(0))
        .arg(cl.url(2))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    if line.trim() == "ready" {
        cl.stop(0, false); // kill -9 the client's node
        writeln!(child.stdin.take().unwrap(), "killed").unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "nats-py script failed: {line}\n{err}");
    assert!(line.contains("nats-py failover: ok"), "{line}\n{err}");
    eprintln!("{}", line.trim());
}
