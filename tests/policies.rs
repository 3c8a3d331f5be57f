//! Every file in `policies/` loads as the kind of policy its README says it is.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use sealstream::ctl::policy;
use support::repo_path;

#[test]
fn every_policy_loads() {
    let dir = repo_path("policies");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("conf") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with('#'),
            "{} opens with a comment saying who it is for",
            path.display()
        );
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("tenant-") {
            let l = policy::load_account(&path).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert!(l.conn > 0 && l.disk_storage > 0, "{name}");
        } else {
            let u = policy::load_user(&path).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert!(!u.publish.is_empty() || !u.subscribe.is_empty(), "{name}");
        }
        n += 1;
    }
    assert!(n >= 5);
}

#[test]
fn unknown_policy_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("typo.conf");
    std::fs::write(&p, "# typo\nconns: 5\n").unwrap();
    assert!(policy::load_account(&p).is_err());
}
