//! `sealctl bench` with authentication: the connect scenario against a server run from the
//! onboarding config (`sealctl operator init` → `account add` → `user add` → `server config`),
//! and core pub/sub as a user with permissions.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::TestServer;

fn sealctl(keys: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .args(args)
        .env("SEALCTL_KEYS", keys)
        .env_remove("NATS_URL")
        .env_remove("NATS_PASSWORD")
        .output()
        .expect("run sealctl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sealctl {args:?} failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn bench_json(keys: &Path, server: &TestServer, args: &[&str]) -> Value {
    let url = server.url();
    let mut all = vec!["--server", url.as_str(), "bench"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = sealctl(keys, &all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn connect_scenario_with_creds_against_the_onboarding_config() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    sealctl(&keys, &["operator", "init", "--name", "BENCH-OP"]);
    sealctl(&keys, &["account", "add", "TENANT"]);
    let creds = dir.path().join("svc.creds");
    let creds_s = creds.to_str().unwrap();
    sealctl(&keys, &["user", "add", "TENANT", "svc", "--out", creds_s]);
    let conf = sealctl(&keys, &["server", "config"]);
    let s = TestServer::with_config(&conf);

    let pid = s.pid().to_string();
    let v = bench_json(
        &keys,
        &s,
        &[
            "--scenario",
            "connect",
            "--creds",
            creds_s,
            "--conns",
            "50",
            "--parallel",
            "4",
            "--server-pid",
            &pid,
        ],
    );
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["msgs"], 50, "{v}");
    assert_eq!(v["delivered"], 50, "{v}");
    assert!(v["delivered_msgs_per_sec"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["latency_us"]["samples"], 50, "{v}");
    assert!(v["latency_us"]["p99"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["scenario"]
        .as_str()
        .unwrap()
        .starts_with("connect (creds)"));

    // Without credentials every connection is refused: counted, not fatal.
    let v = bench_json(&keys, &s, &["--scenario", "connect", "--conns", "10"]);
    assert_eq!(v["errors"], 10, "{v}");
    assert_eq!(v["delivered"], 0, "{v}");
    assert!(
        v["note"]
            .as_str()
            .unwrap()
            .contains("Authorization Violation"),
        "{v}"
    );

    // Core pub/sub as the JWT user.
    let v = bench_json(
        &keys,
        &s,
        &["--creds", creds_s, "--msgs", "20000", "--subs", "2"],
    );
    assert_eq!(v["delivered"], 40000, "{v}");
}

#[test]
fn core_scenario_as_a_user_with_permissions() {
    let conf = r#"
authorization {
  users = [
    { user: limited, password: s3cret,
      permissions: {
        publish: { allow: ["bench.>", "_INBOX.>"], deny: ["bench.secret.>"] }
        subscribe: { allow: ["bench.>", "_INBOX.>"], deny: ["bench.secret.>"] }
      } }
  ]
}
"#;
    let s = TestServer::with_config(conf);
    let keys = tempfile::tempdir().unwrap();
    let auth = ["--user", "limited", "--password", "s3cret"];
    let mut args = vec!["bench.load", "--msgs", "20000"];
    args.extend_from_slice(&auth);
    let v = bench_json(keys.path(), &s, &args);
    assert_eq!(v["delivered"], 20000, "{v}");

    let mut args = vec!["--scenario", "connect", "--conns", "20"];
    args.extend_from_slice(&auth);
    let v = bench_json(keys.path(), &s, &args);
    assert_eq!(v["errors"], 0, "{v}");
    assert!(v["scenario"]
        .as_str()
        .unwrap()
        .starts_with("connect (user/password)"));

    // A denied subject fails the run with the server's permissions error.
    let out = Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .args([
            "--server",
            &s.url(),
            "bench",
            "bench.secret.x",
            "--msgs",
            "1000",
        ])
        .args(auth)
        .env_remove("NATS_URL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Permissions Violation"), "{err}");
}
