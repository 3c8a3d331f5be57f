//! `sealctl bench` as a process: `--report FILE` writes the HTML page with both plots, `--json`
//! still parses, and neither draws a progress bar when stderr is not a terminal.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::process::Command;

use serde_json::Value;
use support::TestServer;

fn bench(server: &TestServer, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .arg("--server")
        .arg(server.url())
        .arg("bench")
        .args(args)
        .env_remove("NATS_URL")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    (stdout, stderr)
}

/// The `points` of the throughput polyline.
fn throughput_points(page: &str) -> usize {
    let pts = page
        .split(r#"class="series throughput""#)
        .nth(1)
        .and_then(|r| r.split(r#"points=""#).nth(1))
        .and_then(|r| r.split('"').next())
        .unwrap_or("");
    pts.split_whitespace().count()
}

#[test]
fn report_has_both_plots_and_json_still_parses() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.html");
    let (stdout, stderr) = bench(
        &server,
        &["--report", out.to_str().unwrap(), "--msgs", "20000"],
    );
    assert!(stdout.contains("msgs/s"), "{stdout}");
    assert!(
        stderr.is_empty(),
        "no progress bar off a terminal: {stderr}"
    );
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains(r#"<svg id="throughput""#), "{page}");
    assert!(page.contains(r#"<svg id="latency""#), "{page}");
    assert!(throughput_points(&page) >= 1, "{page}");
    for p in ["p50", "p90", "p99", "p99.9", "max"] {
        assert!(page.contains(&format!(r#"data-p="{p}""#)), "{p}: {page}");
    }
    assert!(page.contains("1 pub -&gt; 1 sub"));
    assert!(!page.contains("<script"));

    let (stdout, stderr) = bench(&server, &["--json", "--msgs", "20000", "--no-progress"]);
    assert!(stderr.is_empty(), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["msgs"], 20000);
    assert_eq!(v["delivered"], 20000);
    assert!(v["latency_us"]["p99_9"].as_f64().unwrap() > 0.0, "{v}");
}

#[test]
fn report_for_a_jetstream_scenario() {
    let server = TestServer::start_js();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("js.html");
    let (stdout, _) = bench(
        &server,
        &[
            "--scenario",
            "js-pub-window",
            "--msgs",
            "5000",
            "--storage",
            "memory",
            "--report",
            out.to_str().unwrap(),
        ],
    );
    assert!(stdout.contains("js-pub-window"), "{stdout}");
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains(r#"<svg id="throughput""#));
    assert!(page.contains(r#"data-p="p99.9""#));
    assert!(page.contains("publish / s"), "{page}");
}
