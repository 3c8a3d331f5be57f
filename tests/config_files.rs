//! Every configuration in `examples/configs/` (the operations guides' snippets and the spec's
//! examples) through the real binary's `-t`, against what nats-server 2.15 says about the same
//! file (`examples/configs/expected.txt`). Runs unchanged against nats-server.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::process::{Command, Stdio};

use support::{repo_path, server_binary};

#[test]
fn example_configs_are_judged_like_the_reference() {
    let dir = repo_path("examples/configs");
    let expected = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let (bin, _) = server_binary();
    let cwd = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for line in expected
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let mut parts = line.split_whitespace();
        let (Some(file), Some(verdict)) = (parts.next(), parts.next()) else {
            continue;
        };
        let out = Command::new(&bin)
            .current_dir(cwd.path())
            .args(["-t", "-c"])
            .arg(dir.join(file))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let accepted = out.status.success();
        assert_eq!(
            accepted,
            verdict == "accept",
            "{file}: expected {verdict}; server said:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert!(checked >= 10, "checked {checked} configs");
}

#[test]
fn guide_config_with_accounts_inside_authorization_starts() {
    // The reference rejects this shape, but our users' guide ships it: sealstream starts with
    // it (and `-t` still reports it, as the reference does).
    if server_binary().1 {
        return;
    }
    let conf = std::fs::read_to_string(repo_path(
        "examples/configs/guide-000-jetstream-with-accounts-in-authorization.conf",
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf.replace(
        "/var/lib/nats/jetstream",
        &dir.path().join("js").display().to_string(),
    );
    let s = support::TestServer::with_config(&conf);
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"user\":\"alice\",\"pass\":\"secret\"}\r\nPING\r\n");
    r.expect_line("PONG");
}
