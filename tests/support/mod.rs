//! The black-box test harness: starts the real server binary on a random port and stops it on
//! drop.
//!
//! Set `SEALSTREAM_TEST_SERVER=/path/to/nats-server` to run the same tests against the
//! reference server — that is how we know an expectation is right. Tests that check
//! sealstream-only behaviour call [`TestServer::is_reference`] and return early.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    reason = "shared by every test crate, each using a different part; a harness may panic"
)]

pub mod certs;
pub mod cluster;
pub mod history;
pub mod js;
pub mod jwt;
pub mod netns;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The operations guide's walkthrough stream, as `sealctl` (and `nats`) arguments: the
/// guide's `stream add ORDERS ...` line, word for word.
pub const GUIDE_STREAM_ADD: &[&str] = &[
    "stream",
    "add",
    "ORDERS",
    "--subjects",
    "orders.>",
    "--storage",
    "file",
    "--retention",
    "limits",
    "--max-age",
    "24h",
    "--replicas",
    "1",
    "--defaults",
];

/// Runs `sealctl audit` (with `extra` arguments) on the stopped server store under `store`:
/// its `jetstream` directory, keyed by the `jetstream.key` file beside it.
pub fn sealctl_audit(store: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sealctl"))
        .arg("audit")
        .arg(store.join("jetstream"))
        .arg("--key-file")
        .arg(store.join("jetstream.key"))
        .args(extra)
        .env_remove("SEALSTREAM_STORE_KEY")
        .output()
        .expect("run sealctl audit")
}

/// [`sealctl_audit`]: the exit code and what it printed.
pub fn audit_store(store: &Path) -> (i32, String) {
    let out = sealctl_audit(store, &[]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// A running server process.
/// See [`TestServer::set_child_env`].
static CHILD_ENV: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

pub struct TestServer {
    child: Option<Child>,
    /// Address it listens on (127.0.0.1 unless started in a network namespace).
    pub host: String,
    /// Client port.
    pub port: u16,
    /// Monitoring port, when started with `-m -1`... (parsed from the log).
    pub http_port: Option<u16>,
    /// Route port, when started with a cluster listener (parsed from the log).
    pub cluster_port: Option<u16>,
    /// Everything the server logged so far.
    pub log: Arc<Mutex<String>>,
    /// Temporary directory owned by this server (config files, store).
    pub dir: tempfile::TempDir,
    reference: bool,
    audit_skipped: bool,
    /// Flags and config it was started with (for [`TestServer::restart`]).
    args: Vec<String>,
    conf: Option<String>,
}

/// The binary under test.
pub fn server_binary() -> (PathBuf, bool) {
    match std::env::var("SEALSTREAM_TEST_SERVER") {
        Ok(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (
            PathBuf::from(env!("CARGO_BIN_EXE_sealstream-server")),
            false,
        ),
    }
}

impl TestServer {
    /// Starts a server on 127.0.0.1 with a random port.
    pub fn start() -> Self {
        Self::start_with(&[], None)
    }

    /// Starts a server with a config file body (written to the temp dir).
    pub fn with_config(conf: &str) -> Self {
        Self::start_with(&[], Some(conf))
    }

    /// Starts a server with extra flags and an optional config body.
    pub fn start_with(args: &[&str], conf: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        Self::spawn(dir, args, conf.map(str::to_owned))
    }

    /// Starts a server with JetStream on, its store under `<tempdir>/store`.
    pub fn start_js() -> Self {
        Self::start_js_with(&[], None)
    }

    /// As [`TestServer::start_js`], with extra flags and an optional config body.
    pub fn start_js_with(args: &[&str], conf: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("store");
        let mut all: Vec<String> = vec!["-js".into(), "-sd".into(), store.display().to_string()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        Self::spawn(dir, all, conf.map(str::to_owned))
    }

    /// Stops the server (SIGTERM and wait when `graceful`, else SIGKILL) and starts it again
    /// with the same flags, config and directory. The client port changes.
    pub fn restart(&mut self, graceful: bool) {
        self.stop(graceful);
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
        let fresh = Self::spawn(dir, self.args.clone(), self.conf.clone());
        let mut old = std::mem::replace(self, fresh);
        old.args.clear(); // the new process owns the store now: no audit for the old one
        drop(old);
    }

    /// Stops the server: SIGTERM and wait for exit when `graceful`, else SIGKILL.
    pub fn stop(&mut self, graceful: bool) {
        if let Some(mut c) = self.child.take() {
            if graceful {
                let _ = Command::new("kill")
                    .arg("-TERM")
                    .arg(c.id().to_string())
                    .status();
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = c.try_wait() {
                        return;
                    }
                    spin_pause(Duration::from_millis(20));
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn spawn(dir: tempfile::TempDir, args: Vec<String>, conf: Option<String>) -> Self {
        let (bin, reference) = server_binary();
        Self::spawn_bin(&bin, reference, dir, args, conf)
    }

    /// Starts `bin` (sealstream or nats-server, as `reference` says) with `args` and an
    /// optional config body, in `dir`.
    pub fn spawn_bin(
        bin: &Path,
        reference: bool,
        dir: tempfile::TempDir,
        args: Vec<String>,
        conf: Option<String>,
    ) -> Self {
        Self::spawn_at(None, "127.0.0.1", bin, reference, dir, args, conf, &[])
    }

    /// Environment every server started from now on gets (for example a libfaketime
    /// preload, whose clock file is relative to the server's working directory, so each
    /// server's clock can be moved on its own).
    pub fn set_child_env(vars: Vec<(String, String)>) {
        *CHILD_ENV.lock().unwrap() = vars;
    }

    /// As [`TestServer::spawn_bin`], listening on `host`, inside the network namespace
    /// `netns` when given (`ip netns exec`, which execs the server: the child is the server),
    /// with `env` set for this server alone.
    #[allow(
        clippy::too_many_arguments,
        reason = "a test helper's plain parameter list"
    )]
    pub fn spawn_at(
        netns: Option<&str>,
        host: &str,
        bin: &Path,
        reference: bool,
        dir: tempfile::TempDir,
        args: Vec<String>,
        conf: Option<String>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.current_dir(dir.path());
        cmd.envs(CHILD_ENV.lock().unwrap().iter().cloned());
        cmd.envs(env.iter().copied());
        if let Some(c) = &conf {
            let path = dir.path().join("server.conf");
            std::fs::write(&path, c).expect("write conf");
            cmd.arg("-c").arg(&path);
        }
        cmd.args(["-a", host, "-p", "-1"]).args(&args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        let log2 = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut r = BufReader::new(stderr);
            let mut line = String::new();
            let mut ready_sent = false;
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                log2.lock().unwrap().push_str(&line);
                if !ready_sent && line.contains("Server is ready") {
                    ready_sent = true;
                    let _ = tx.send(());
                }
                line.clear();
            }
        });
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let _ = child.kill();
            panic!("server did not become ready; log:\n{}", log.lock().unwrap());
        }
        let text = log.lock().unwrap().clone();
        let port =
            find_port(&text, "Listening for client connections on ").expect("client port in log");
        let http_port = find_port(&text, "Starting http monitor on ");
        let cluster_port = find_port(&text, "Listening for route connections on ");
        TestServer {
            child: Some(child),
            host: host.to_owned(),
            port,
            http_port,
            cluster_port,
            log,
            dir,
            reference,
            audit_skipped: false,
            args,
            conf,
        }
    }

    /// True when running against the reference nats-server.
    pub fn is_reference(&self) -> bool {
        self.reference
    }

    /// `nats://<host>:<port>`.
    pub fn url(&self) -> String {
        format!("nats://{}:{}", self.host, self.port)
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Sends a signal to the server process.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Whether the process ended (however: a signal too) within `limit`.
    pub fn ended_within(&mut self, limit: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            spin_pause(Duration::from_millis(20));
        }
        false
    }

    /// Waits for the process to exit and returns its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = child.try_wait() {
                return st.code();
            }
            std::thread::yield_now();
            spin_pause(Duration::from_millis(20));
        }
        None
    }

    /// A raw protocol connection that has read the INFO line.
    pub fn raw(&self) -> Raw {
        Raw::connect(self.port)
    }

    /// GET a monitoring path; returns (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        http_get_at(&self.host, self.http_port.expect("monitoring port"), path)
    }

    /// A sample's value in `/metrics`, `name` with its labels as the server writes them
    /// (`sealstream_audit_phase_bytes{phase="raft",which="total"}`); 0 when absent.
    pub fn metric(&self, name: &str) -> u64 {
        let (_, m) = self.http_get("/metrics");
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0)
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl TestServer {
    /// The store directory (`-sd`) this server was started with, if any.
    pub fn store_dir(&self) -> Option<PathBuf> {
        let i = self
            .args
            .iter()
            .position(|a| a == "-sd" || a == "--store_dir")?;
        self.args.get(i + 1).map(PathBuf::from)
    }

    /// For tests that damage the store on purpose: no audit on drop (they run their own).
    pub fn skip_audit(&mut self) {
        self.audit_skipped = true;
    }

    /// Every store-producing test ends with an audit: after the test, the server is stopped
    /// gracefully and `sealctl audit` must find the store sealed and intact (exit 0). Skipped
    /// for the reference server, for stores keyed by passphrase (no key file), and when the
    /// test is already failing.
    fn audit_on_drop(&mut self) {
        if self.reference || self.audit_skipped || std::thread::panicking() {
            return;
        }
        let Some(sd) = self.store_dir() else { return };
        if !sd.join("jetstream.key").exists() || !sd.join("jetstream").join("STORE").exists() {
            return;
        }
        self.stop(true);
        let out = sealctl_audit(&sd, &[]);
        assert!(
            out.status.success(),
            "sealctl audit of the test's store failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.audit_on_drop();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits without `thread::sleep` (disallowed in this codebase): parks on a channel timeout.
pub fn spin_pause(d: Duration) {
    let (_tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
    let _ = rx.recv_timeout(d);
}

fn find_port(log: &str, marker: &str) -> Option<u16> {
    let line = log.lines().find(|l| l.contains(marker))?;
    let rest = line.split(marker).nth(1)?.trim();
    let rest = rest
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    rest.rsplit(':').next()?.trim().parse().ok()
}

/// Minimal HTTP GET for monitoring tests.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    http_get_at("127.0.0.1", port, path)
}

/// GET `path` from the monitoring port `port` at `host`.
pub fn http_get_at(host: &str, port: u16, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect((host, port)).expect("connect monitor");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A raw protocol connection for exact-byte tests.
pub struct Raw {
    pub s: TcpStream,
    buf: Vec<u8>,
    /// The INFO line the server sent first.
    pub info: serde_json::Value,
}

impl Raw {
    pub fn connect(port: u16) -> Self {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut r = Raw {
            s,
            buf: Vec::new(),
            info: serde_json::Value::Null,
        };
        let line = r.read_line(Duration::from_secs(5)).expect("INFO line");
        let json = line.strip_prefix("INFO ").expect("starts with INFO").trim();
        r.info = serde_json::from_str(json).expect("INFO json");
        r
    }

    /// Sends bytes.
    pub fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }

    fn fill(&mut self, deadline: Instant) -> bool {
        let mut tmp = [0u8; 65536];
        while Instant::now() < deadline {
            match self.s.read(&mut tmp) {
                Ok(0) => return false,
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return true;
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return false,
            }
        }
        false
    }

    /// Reads one CRLF-terminated line (without CRLF).
    pub fn read_line(&mut self, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Some(line);
            }
            if !self.fill(deadline) {
                return None;
            }
        }
    }

    /// Reads exactly `n` bytes.
    pub fn read_exact_bytes(&mut self, n: usize, limit: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + limit;
        while self.buf.len() < n {
            if !self.fill(deadline) {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// Reads lines until one equals `want` (skipping PINGs from the server), or panics.
    pub fn expect_line(&mut self, want: &str) {
        loop {
            let line = self
                .read_line(Duration::from_secs(5))
                .unwrap_or_else(|| panic!("expected {want:?}, got nothing"));
            if line == want {
                return;
            }
            if line == "PING" {
                self.send(b"PONG\r\n");
                continue;
            }
            if line.starts_with("INFO ") && !want.starts_with("INFO") {
                // Servers may send an async INFO at any time.
                continue;
            }
            panic!("expected {want:?}, got {line:?}");
        }
    }

    /// Sends CONNECT (with `extra` JSON fields) and PING, and waits for PONG.
    pub fn handshake(&mut self, extra: &str) {
        let body = if extra.is_empty() {
            r#"{"verbose":false,"pedantic":false,"protocol":1,"headers":true,"no_responders":true}"#
                .to_owned()
        } else {
            format!(
                r#"{{"verbose":false,"pedantic":false,"protocol":1,"headers":true,"no_responders":true,{extra}}}"#
            )
        };
        self.send(format!("CONNECT {body}\r\nPING\r\n").as_bytes());
        self.expect_line("PONG");
        // protocol 1: the server follows the first PONG with an INFO carrying connect_info.
        let info = self
            .read_line(Duration::from_secs(5))
            .expect("post-PONG INFO");
        assert!(
            info.starts_with("INFO "),
            "expected INFO after first PONG, got {info:?}"
        );
    }

    /// True when the server closed the connection (EOF) within `limit`.
    pub fn closed_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut tmp = [0u8; 4096];
        while Instant::now() < deadline {
            match self.s.read(&mut tmp) {
                Ok(0) => return true,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return true,
            }
        }
        false
    }

    /// Nothing but (optionally) PINGs arrives within `limit`.
    pub fn silent_for(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(line) = self.read_line(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ) {
                if line == "PING" {
                    continue;
                }
                return false;
            }
        }
        true
    }
}

/// Path of a file in the repository.
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The project virtualenv's Python (nats-py, nats-server), or None with a note on stderr
/// when it is missing on a developer machine; under CI its absence is a failure.
pub fn venv_python() -> Option<PathBuf> {
    let python = repo_path(".venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must provide .venv (scripts/setup-test-env)"
    );
    eprintln!("skipping: no .venv; run scripts/setup-test-env");
    None
}

/// Polls `f` until it returns true or `limit` passes.
pub async fn eventually<F: FnMut() -> bool>(limit: Duration, mut f: F) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// A full round trip through the server on `c`'s connection: everything `c` sent before
/// (SUBs included) has been processed once this returns. (async-nats's `flush` only flushes
/// the socket; a request nobody answers comes back as a no-responders status.)
pub async fn sync(c: &async_nats::Client) {
    // An `_INBOX.` subject: clients with narrow permissions may still publish there.
    let subject = format!("_INBOX.sync_{}", c.new_inbox().replace('.', "_"));
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        c.request(subject, bytes::Bytes::new()),
    )
    .await;
    assert!(r.is_ok(), "server round trip within 5s");
}

/// A free port below Linux's ephemeral range (32768–60999), for a port chosen now and bound
/// later by a server: a port from [`free_port`] can be handed meanwhile to another server's
/// own ephemeral listener (a JetStream cluster test once got its route port taken by a
/// node's client port).
pub fn reserved_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 20_000 + std::process::id().wrapping_mul(7_919) % 12_000;
    for _ in 0..12_000 {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (base - 20_000 + k) % 12_000;
        let port = u16::try_from(port).expect("below 32768");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    free_port()
}

/// A port nobody listens on right now (bound and released; a configured route needs its
/// peers' ports before they start).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Raw bytes of every file under `dir` contain none of `needles`, and no path does either.
///
/// Needles must be at least 6 bytes: a 3-byte needle turns up in a few hundred KiB of
/// ciphertext by chance (CI once found "m17" in a sealed Raft log), a 6-byte one about once
/// in 2^48 positions.
pub fn assert_no_plaintext(dir: &Path, needles: &[&str]) {
    for n in needles {
        assert!(
            n.len() >= 6,
            "needle {n:?} is too short to tell a leak from chance"
        );
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("{}: {e}", d.display()),
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = p.to_string_lossy().to_string();
            for n in needles {
                assert!(!name.contains(n), "{n:?} in path {name}");
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                // A running server's file may go between listing and reading it (a dead log
                // segment, a snapshot replaced): what is gone holds nothing.
                let bytes = match std::fs::read(&p) {
                    Ok(b) => b,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => panic!("{name}: {e}"),
                };
                for n in needles {
                    assert!(
                        !bytes.windows(n.len()).any(|w| w == n.as_bytes()),
                        "{n:?} in the bytes of {name}"
                    );
                }
            }
        }
    }
}
