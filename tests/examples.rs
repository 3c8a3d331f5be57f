//! Every runnable example in `examples/`, run to completion against a real server (the
//! binaries `cargo test` builds next to the tests, in `target/<profile>/examples/`).
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::TestServer;

/// `target/<profile>/examples/<name>`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    profile_dir.join("examples").join(name)
}

/// Runs an example; returns its output, asserting success and the closing line.
fn run(name: &str, args: &[&str], expect: &str) -> String {
    let bin = example(name);
    assert!(
        bin.exists(),
        "{} not built (cargo test builds examples)",
        bin.display()
    );
    let out = Command::new(&bin).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} failed:\n{text}");
    assert!(text.contains(expect), "{name}: {expect:?} missing:\n{text}");
    text
}

#[test]
fn pub_sub_walkthrough() {
    let s = TestServer::start();
    run("pub_sub", &[&s.url()], "queue group split 10 jobs");
}

#[test]
fn durable_order_queue() {
    let s = TestServer::start_js();
    run("durable_queue", &[&s.url()], "ok: every order");
}

#[test]
fn restart_persistence_check_survives_kill_9() {
    let mut s = TestServer::start_js();
    run(
        "restart_check",
        &["publish", &s.url()],
        "before restart: 100 messages",
    );
    s.restart(false);
    run(
        "restart_check",
        &["verify", &s.url()],
        "ok: every acknowledged message",
    );
}

#[test]
fn workqueue_worker_pool() {
    let s = TestServer::start_js();
    run(
        "workqueue_pool",
        &[&s.url()],
        "ok: every job done exactly once",
    );
}

#[test]
fn compliance_audit_of_the_sealed_store() {
    run("store_audit", &[], "");
}

/// The tenant onboarding flow, as README shows it: `sealctl operator init`, `account add`,
/// `user add`, `server config` plus a TLS block, then the tenant's client (`tls_tenant`)
/// connects over TLS with the issued `.creds`.
#[test]
fn tenant_onboarding_then_tls_client() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let sealctl = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sealctl"))
            .args(args)
            .env("SEALCTL_KEYS", &keys)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sealctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    sealctl(&["operator", "init"]);
    sealctl(&["account", "add", "TENANT"]);
    sealctl(&["user", "add", "TENANT", "app"]);
    let mut conf = sealctl(&["server", "config"]);
    // A CA and a server certificate for 127.0.0.1.
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse().unwrap())];
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf.signed_by(&leaf_key, &ca).unwrap();
    let (cert, key, ca_pem) = (
        dir.path().join("server.pem"),
        dir.path().join("server-key.pem"),
        dir.path().join("ca.pem"),
    );
    std::fs::write(&cert, leaf.pem()).unwrap();
    std::fs::write(&key, leaf_key.serialize_pem()).unwrap();
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    conf.push_str(&format!(
        "\ntls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
        cert.display(),
        key.display()
    ));
    let s = TestServer::with_config(&conf);
    if s.is_reference() {
        return;
    }
    let creds = keys.join("accounts/TENANT/users/app.creds");
    run(
        "tls_tenant",
        &[
            "--url",
            &format!("tls://127.0.0.1:{}", s.port),
            "--creds",
            creds.to_str().unwrap(),
            "--ca",
            ca_pem.to_str().unwrap(),
        ],
        "tenant.hello: sealed in transit",
    );
}
