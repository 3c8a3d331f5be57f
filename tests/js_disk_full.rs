//! A full disk, for real: the store on a 16 MiB tmpfs. Publishing until the file system is
//! full ends in `insufficient storage resources available` (10047) — never a crash, never a
//! positive PubAck for something that was not stored — and every message acknowledged before
//! it is still there after a restart.
//!
//! Needs root (to mount the tmpfs); elsewhere the test says so and passes. sealstream only.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::process::Command;

use support::js::{api_ok, create_stream, publish_ack};
use support::TestServer;

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_full_file_system_refuses_publishes_and_loses_nothing() {
    if support::server_binary().1 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
        .arg(&mnt)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs here (needs root); the full-disk test did not run"
        );
        return;
    }
    let _guard = Mount(mnt.clone());
    let sd = mnt.join("data");
    let sd_arg = sd.to_str().unwrap().to_owned();
    let mut s = TestServer::start_with(&["-js", "-sd", &sd_arg], None);
    let c = async_nats::connect(s.url()).await.unwrap();
    // A second stream holding some data: deleting it later gives space back.
    create_stream(&c, r#"{"name":"SPARE","subjects":["spare.>"]}"#).await;
    let spare = "s".repeat(64 * 1024);
    for _ in 0..40 {
        let ack = publish_ack(&c, "spare.x", &[], &spare).await;
        assert!(ack.get("error").is_none(), "{ack}");
    }
    create_stream(&c, r#"{"name":"FILL","subjects":["fill.>"]}"#).await;
    let payload = "x".repeat(16 * 1024);
    let mut acked = 0u64;
    let mut refusal = None;
    for _ in 0..4000 {
        let ack = publish_ack(&c, "fill.x", &[], &payload).await;
        if ack.get("error").is_some() {
            refusal = Some(ack);
            break;
        }
        acked += 1;
    }
    let ack = refusal.expect("the 16 MiB file system fills up");
    assert_eq!(ack["error"]["err_code"], 10047, "{ack}");
    assert_eq!(
        ack["error"]["description"], "insufficient storage resources available",
        "{ack}"
    );
    assert!(acked > 100, "only {acked} messages fit");
    // The server is still up and answers; the stream still holds every acked message.
    let info = api_ok(&c, "STREAM.INFO.FILL", "").await;
    assert_eq!(info["state"]["messages"], acked, "{info}");
    drop(c);
    s.restart(true);
    let c = async_nats::connect(s.url()).await.unwrap();
    let info = api_ok(&c, "STREAM.INFO.FILL", "").await;
    assert_eq!(info["state"]["messages"], acked, "after restart: {info}");
    let m = api_ok(&c, "STREAM.MSG.GET.FILL", &format!(r#"{{"seq":{acked}}}"#)).await;
    assert_eq!(m["message"]["seq"], acked);
    // Space comes back (a stream is deleted): publishing resumes. The delete is answered once
    // the stream's keys are erased; its store thread removes the (unreadable) files right
    // after, so the space returns a moment later: a refusal until then, never a lost ack.
    api_ok(&c, "STREAM.DELETE.SPARE", "").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let ack = loop {
        let ack = publish_ack(&c, "fill.after", &[], &payload).await;
        if ack.get("error").is_none() || std::time::Instant::now() > deadline {
            break ack;
        }
        assert_eq!(ack["error"]["err_code"], 10047, "{ack}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(
        ack.get("error").is_none(),
        "publishing resumes once space returns: {ack}"
    );
    assert_eq!(
        ack["seq"],
        acked + 1,
        "refused publishes took no sequence: {ack}"
    );
}
