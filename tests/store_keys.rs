//! The sealed store's keys through the real binary: an automatic key file outside the store,
//! passphrases from the config, and a wrong key refused before anything is touched.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{server_binary, TestServer};

/// Every path and file content under `dir`, hashed in order.
fn tree_digest(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
                out.push((rel, vec![]));
            } else {
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn start_fails(args: &[&str]) -> String {
    let (bin, _) = server_binary();
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "server should refuse to start");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn default_key_file_is_generated_outside_the_store_and_reused() {
    if server_binary().1 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sd = dir.path().join("data");
    let sd_arg = sd.to_str().unwrap();
    let mut s = TestServer::start_with(&["-js", "-sd", sd_arg], None);
    let key = sd.join("jetstream.key");
    assert!(key.exists(), "key file next to the store");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(sd.join("jetstream").join("STORE").exists());
    assert!(s.log_text().contains("Sealed store at"));
    s.signal("TERM");
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    let before = std::fs::read(&key).unwrap();
    let _again = TestServer::start_with(&["-js", "-sd", sd_arg], None);
    assert_eq!(
        std::fs::read(&key).unwrap(),
        before,
        "the key is reused, never regenerated"
    );
}

#[test]
fn missing_key_for_an_existing_store_is_refused_without_a_new_key() {
    if server_binary().1 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sd = dir.path().join("data");
    let sd_arg = sd.to_str().unwrap();
    drop(TestServer::start_with(&["-js", "-sd", sd_arg], None));
    std::fs::remove_file(sd.join("jetstream.key")).unwrap();
    let before = tree_digest(&sd);
    let err = start_fails(&["-a", "127.0.0.1", "-p", "-1", "-js", "-sd", sd_arg]);
    assert!(err.contains("key"), "{err}");
    assert_eq!(
        tree_digest(&sd),
        before,
        "nothing created, renamed or deleted"
    );
}

#[test]
fn wrong_passphrase_stops_the_server_and_changes_nothing() {
    if server_binary().1 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sd = dir.path().join("data");
    let conf = |key: &str| {
        let p = dir.path().join(format!("{key}.conf"));
        std::fs::write(
            &p,
            format!(
                "jetstream {{ store_dir: \"{}\", cipher: chachapoly, key: \"{key}\" }}\n",
                sd.display()
            ),
        )
        .unwrap();
        p
    };
    let right = conf("right-passphrase");
    drop(TestServer::start_with(
        &["-c", right.to_str().unwrap()],
        None,
    ));
    assert!(
        !sd.join("jetstream.key").exists(),
        "a passphrase store has no key file"
    );
    let before = tree_digest(&sd);
    let wrong = conf("wrong-passphrase");
    let err = start_fails(&["-a", "127.0.0.1", "-p", "-1", "-c", wrong.to_str().unwrap()]);
    assert!(err.contains("store key does not match"), "{err}");
    assert_eq!(tree_digest(&sd), before, "the wrong key touched nothing");
    let _ok = TestServer::start_with(&["-c", right.to_str().unwrap()], None);
}
