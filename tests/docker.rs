//! The container image and the compose files (issue 16), as a user runs them: the image is
//! built from this build's binaries (`scripts/docker-image`), `compose.yaml` brings up one
//! server and the operations guide's walkthrough runs against it with `sealctl` (stream add,
//! pub, stream info, stream view), the container restarts and the message is still there;
//! then `compose.cluster.yaml` brings up three, an R3 stream is created, its leader's
//! container is stopped, the stream takes writes through another server, and the stopped
//! one comes back healthy and holds them all.
//!
//! Skipped (with a line saying so) where no Docker engine answers or `docker-compose` is
//! missing. Ports are chosen free on this machine; every container, volume and the image are
//! removed at the end, also when the test fails.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn docker_usable() -> Result<(), String> {
    let info = Command::new("docker").arg("info").output();
    if !info.as_ref().is_ok_and(|o| o.status.success()) {
        return Err("no Docker engine answers `docker info`".into());
    }
    let compose = Command::new("docker-compose").arg("version").output();
    if !compose.is_ok_and(|o| o.status.success()) {
        return Err("`docker-compose` is not installed".into());
    }
    Ok(())
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One compose project: its file, name and environment; `down -v` when dropped.
struct Project {
    file: &'static str,
    name: String,
    env: Vec<(String, String)>,
}

impl Project {
    fn compose(&self, args: &[&str]) -> Output {
        Command::new("docker-compose")
            .current_dir(root())
            .args(["-p", &self.name, "-f", self.file])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap()
    }

    fn container(&self, service: &str) -> String {
        format!("{}_{service}_1", self.name)
    }

    /// Waits until the image's health check (`sealctl server check healthz`) passes.
    fn wait_healthy(&self, service: &str) {
        let name = self.container(service);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let o = Command::new("docker")
                .args(["inspect", "-f", "{{.State.Health.Status}}", &name])
                .output()
                .unwrap();
            if text(&o).trim() == "healthy" {
                return;
            }
            if Instant::now() > deadline {
                let logs = Command::new("docker")
                    .args(["logs", &name])
                    .output()
                    .unwrap();
                panic!("{name} never became healthy: {}", text(&logs));
            }
            support::spin_pause(Duration::from_millis(500));
        }
    }

    fn docker(&self, args: &[&str]) -> Output {
        let o = Command::new("docker").args(args).output().unwrap();
        assert!(o.status.success(), "docker {args:?}: {}", text(&o));
        o
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = self.compose(&["down", "-v", "--remove-orphans"]);
    }
}

/// Removes the test image when dropped.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

fn sealctl(port: u16, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .args(["--no-progress", "-s", &format!("nats://127.0.0.1:{port}")])
        .args(args)
        .output()
        .unwrap()
}

fn sealctl_ok(port: u16, args: &[&str]) -> String {
    let o = sealctl(port, args);
    assert!(o.status.success(), "sealctl {args:?}: {}", text(&o));
    text(&o)
}

/// The stream's message count, from `sealctl stream info --json`.
fn messages(port: u16, stream: &str) -> Option<u64> {
    let o = sealctl(port, &["stream", "info", stream, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
    v["state"]["messages"].as_u64()
}

fn eventually_messages(port: u16, stream: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while messages(port, stream) != Some(want) {
        assert!(
            Instant::now() < deadline,
            "{stream} on port {port} never held {want} messages (holds {:?})",
            messages(port, stream)
        );
        support::spin_pause(Duration::from_millis(300));
    }
}

/// Publishes with a PubAck, retrying while a new leader is elected.
fn publish_acked(port: u16, subject: &str, body: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = sealctl(port, &["pub", "--jetstream", subject, body]);
        if o.status.success() && text(&o).contains("Stored in stream") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{body} never acknowledged: {}",
            text(&o)
        );
        support::spin_pause(Duration::from_millis(300));
    }
}

fn build_image(tag: &str) -> Image {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_sealstream-server"))
        .parent()
        .unwrap()
        .to_path_buf();
    let o = Command::new(root().join("scripts/docker-image"))
        .args(["--tag", tag, "--bin-dir"])
        .arg(&bin_dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "image build: {}", text(&o));
    Image(tag.to_owned())
}

#[test]
fn one_server_and_three_run_from_the_image_as_the_guide_and_the_readme_say() {
    if let Err(why) = docker_usable() {
        eprintln!("skipped: {why}");
        return;
    }
    let id = std::process::id();
    let tag = format!("sealstream:test-{id}");
    let _image = build_image(&tag);

    // One server: the guide's compose file, sealstream in place of nats-server.
    let (port, monitor) = (free_port(), free_port());
    let one = Project {
        file: "compose.yaml",
        name: format!("sstest{id}"),
        env: vec![
            ("SEALSTREAM_IMAGE".into(), tag.clone()),
            ("SEALSTREAM_PORT".into(), port.to_string()),
            ("SEALSTREAM_MONITOR_PORT".into(), monitor.to_string()),
        ],
    };
    let up = one.compose(&["up", "-d"]);
    assert!(up.status.success(), "{}", text(&up));
    one.wait_healthy("nats");
    let user = one.docker(&["inspect", "-f", "{{.Config.User}}", &one.container("nats")]);
    assert_eq!(
        text(&user).trim(),
        "10001:10001",
        "runs as the unprivileged user"
    );
    sealctl_ok(port, support::GUIDE_STREAM_ADD);
    sealctl_ok(
        port,
        &[
            "pub",
            "orders.created",
            r#"{"order_id":"order-123","status":"created"}"#,
        ],
    );
    eventually_messages(port, "ORDERS", 1);
    let info = sealctl_ok(port, &["stream", "info", "ORDERS"]);
    assert!(info.contains("orders.>"), "{info}");
    let view = sealctl_ok(port, &["stream", "view", "ORDERS"]);
    assert!(view.contains("order-123"), "{view}");
    // The volume keeps it across a restart of the container.
    let restart = one.compose(&["restart"]);
    assert!(restart.status.success(), "{}", text(&restart));
    one.wait_healthy("nats");
    eventually_messages(port, "ORDERS", 1);
    drop(one);

    // Three servers, the store key from the environment.
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let mut env = vec![
        ("SEALSTREAM_IMAGE".to_owned(), tag.clone()),
        (
            "SEALSTREAM_STORE_KEY".to_owned(),
            format!("compose test passphrase {id}"),
        ),
    ];
    for (i, suffix) in ["", "_2", "_3"].iter().enumerate() {
        env.push((format!("SEALSTREAM_PORT{suffix}"), ports[i].to_string()));
        env.push((
            format!("SEALSTREAM_MONITOR_PORT{suffix}"),
            ports[i + 3].to_string(),
        ));
    }
    let three = Project {
        file: "compose.cluster.yaml",
        name: format!("sscluster{id}"),
        env,
    };
    let up = three.compose(&["up", "-d"]);
    assert!(up.status.success(), "{}", text(&up));
    for n in ["n1", "n2", "n3"] {
        three.wait_healthy(n);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = sealctl(
            ports[0],
            &[
                "stream",
                "add",
                "ORDERS",
                "--subjects",
                "orders.>",
                "--replicas",
                "3",
                "--defaults",
            ],
        );
        if o.status.success() {
            break;
        }
        // The meta group forms a moment after the servers are up.
        assert!(Instant::now() < deadline, "no R3 stream: {}", text(&o));
        support::spin_pause(Duration::from_millis(500));
    }
    for i in 0..3 {
        publish_acked(ports[0], "orders.created", &format!("before-{i}"));
    }
    // One server's container stops (n1: it formed the meta group and, by placement, leads
    // the stream it was asked for); the stream takes writes through the others.
    three.docker(&["stop", &three.container("n1")]);
    for i in 0..3 {
        publish_acked(ports[1], "orders.created", &format!("during-{i}"));
    }
    eventually_messages(ports[2], "ORDERS", 6);
    // It comes back healthy (reaching its peers again, whatever address it named itself by)
    // and holds every message.
    three.docker(&["start", &three.container("n1")]);
    three.wait_healthy("n1");
    eventually_messages(ports[0], "ORDERS", 6);
}
