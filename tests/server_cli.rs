//! The binary as operators and client test harnesses drive it: flags, config checks, startup
//! errors, files, signals and the monitoring port.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::{http_get, server_binary, Raw, TestServer};

fn run(args: &[&str]) -> (i32, String, String) {
    let (bin, _) = server_binary();
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run server");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_flag_accepts_a_valid_config() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("ok.conf");
    std::fs::write(
        &conf,
        "port: 4222\nmax_payload: 2MB\nping_interval: \"45s\"\n",
    )
    .unwrap();
    let (code, _, _) = run(&["-t", "-c", conf.to_str().unwrap()]);
    assert_eq!(code, 0);
}

#[test]
fn check_flag_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("bad.conf");
    std::fs::write(&conf, "port: 4222\nbogus_key: 1\n").unwrap();
    let (code, out, err) = run(&["-t", "-c", conf.to_str().unwrap()]);
    assert_eq!(code, 1);
    let text = format!("{out}{err}");
    assert!(text.contains(&format!("{}:2:1", conf.display())), "{text}");
    assert!(text.contains("unknown field \"bogus_key\""), "{text}");
}

#[test]
fn bare_seconds_duration_fails_the_check_but_not_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("w.conf");
    std::fs::write(&conf, "port: -1\nping_interval: 60\n").unwrap();
    let (code, out, err) = run(&["-t", "-c", conf.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(format!("{out}{err}").contains("ping_interval should be converted to a duration"));
    let s = TestServer::with_config("ping_interval: 60\n");
    let mut r = s.raw();
    r.handshake("");
}

#[test]
fn syntax_errors_stop_the_start_with_parse_error() {
    if server_binary().1 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("broken.conf");
    std::fs::write(&conf, "port: 4222\nmax_payload: \"unterminated\n").unwrap();
    let (code, _, err) = run(&["-c", conf.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("Parse error"), "{err}");
    assert!(err.contains("broken.conf:"), "{err}");
}

#[test]
fn flags_override_the_config_file() {
    // The harness passes `-a 127.0.0.1 -p -1`; the file asks for port 1 (not bindable).
    let s = TestServer::with_config("listen: 127.0.0.1:1\nserver_name: from-file\n");
    let r = s.raw();
    assert_ne!(s.port, 1);
    assert_eq!(r.info["server_name"], "from-file");
}

#[test]
fn name_flag_sets_server_name() {
    let s = TestServer::start_with(&["-n", "edge-7"], None);
    assert_eq!(s.raw().info["server_name"], "edge-7");
}

#[test]
fn taken_port_is_named_in_the_error() {
    let a = TestServer::start();
    let port = a.port.to_string();
    let (code, out, err) = run(&["-a", "127.0.0.1", "-p", &port]);
    assert_ne!(code, 0);
    let text = format!("{out}{err}");
    assert!(text.contains(&port), "error names the port: {err}");
    // The clients' launchers look for the word (nats.py's `nats-server` package does).
    assert!(
        text.to_lowercase().contains("listening on port"),
        "error says it could not listen on the port: {err}"
    );
}

#[test]
fn a_json_config_file_is_read_like_nats_server_reads_it() {
    // A JSON document is a config file; the harness's `-p -1` still overrides the port.
    let s = TestServer::with_config(
        "{\n  \"server_name\": \"from-json\",\n  \"max_payload\": 4096\n}\n",
    );
    let r = s.raw();
    assert_eq!(r.info["server_name"], "from-json");
    assert_eq!(r.info["max_payload"], 4096);
}

#[test]
fn store_dir_that_is_a_file_is_refused() {
    if server_binary().1 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let (code, _, err) = run(&["-p", "-1", "-js", &format!("-sd={}", file.display())]);
    assert_ne!(code, 0);
    assert!(
        err.contains("storage directory is not a directory"),
        "{err}"
    );
    let (code, _, err) = run(&["-p", "-1", "-js", "-sd", &format!("{}/sub", file.display())]);
    assert_ne!(code, 0);
    assert!(err.contains("could not create storage directory"), "{err}");
}

#[test]
fn unknown_flag_is_refused_like_go_flags() {
    let (code, _, err) = run(&["--no-such-flag"]);
    if !server_binary().1 {
        // The reference prints the usage and exits 0; a typo in a unit file should fail.
        assert_eq!(code, 2);
    }
    assert!(
        err.contains("flag provided but not defined: -no-such-flag"),
        "{err}"
    );
}

#[test]
fn version_flag_prints_a_semver() {
    let (code, out, _) = run(&["-v"]);
    assert_eq!(code, 0);
    assert!(out.contains(": v2."), "{out}");
}

#[test]
fn pid_ports_and_log_files_are_written() {
    if server_binary().1 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("s.pid");
    let log = dir.path().join("s.log");
    let s = TestServer::start_with(
        &[
            "-P",
            pid.to_str().unwrap(),
            "--ports_file_dir",
            dir.path().to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
            "-DV",
        ],
        None,
    );
    assert_eq!(
        std::fs::read_to_string(&pid).unwrap().trim(),
        s.pid().to_string()
    );
    let ports = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(".ports"))
        .expect("ports file");
    let body = std::fs::read_to_string(ports.path()).unwrap();
    assert!(
        body.contains(&format!("nats://127.0.0.1:{}", s.port)),
        "{body}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("Listening for client connections on 127.0.0.1:"));
    assert!(logged.contains("Server is ready"));
    assert!(logged.contains("[INF]"));
}

#[test]
fn sigterm_stops_gracefully_with_exit_zero() {
    if server_binary().1 {
        return;
    }
    let mut s = TestServer::start();
    let mut r = s.raw();
    r.handshake("");
    s.signal("TERM");
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(r.closed_within(Duration::from_secs(2)));
    // The port can be bound again at once.
    let again = TestServer::start_with(&["-p", &s.port.to_string()], None);
    assert_eq!(again.port, s.port);
}

#[test]
fn signal_flag_enters_lame_duck_mode() {
    if server_binary().1 {
        return;
    }
    let s =
        TestServer::with_config("lame_duck_duration: \"30s\"\nlame_duck_grace_period: \"10s\"\n");
    let mut r = s.raw();
    r.handshake("");
    let (code, _, err) = run(&["--signal", &format!("ldm={}", s.pid())]);
    assert_eq!(code, 0, "{err}");
    let line = r.read_line(Duration::from_secs(5)).expect("async INFO");
    assert!(
        line.starts_with("INFO ") && line.contains("\"ldm\":true"),
        "{line}"
    );
    // No new clients while draining.
    assert!(std::net::TcpStream::connect(("127.0.0.1", s.port))
        .map(|c| {
            let mut c = c;
            let mut b = [0u8; 1];
            c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            std::io::Read::read(&mut c, &mut b)
                .map(|n| n == 0)
                .unwrap_or(true)
        })
        .unwrap_or(true));
}

#[test]
fn monitoring_serves_varz_healthz_and_connz() {
    let s = TestServer::start_with(&["-m", "-1"], None);
    let mut r = s.raw();
    r.handshake("\"name\":\"mon-test\"");
    r.send(b"SUB a.b 1\r\nPUB a.b 2\r\nhi\r\nPING\r\n");
    r.expect_line("MSG a.b 1 2");
    let (code, body) = s.http_get("/varz");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    for k in [
        "server_id",
        "version",
        "port",
        "max_payload",
        "connections",
        "in_msgs",
        "out_msgs",
        "uptime",
        "mem",
    ] {
        assert!(v.get(k).is_some(), "/varz has {k}");
    }
    assert_eq!(v["port"].as_u64(), Some(u64::from(s.port)));
    assert!(v["in_msgs"].as_u64().unwrap() >= 1);
    let (code, body) = s.http_get("/healthz");
    assert_eq!(code, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["status"],
        "ok"
    );
    let (code, body) = s.http_get("/connz");
    assert_eq!(code, 200);
    let c: serde_json::Value = serde_json::from_str(&body).unwrap();
    let conns = c["connections"].as_array().unwrap();
    assert!(conns.iter().any(|c| c["name"] == "mon-test"));
    let (code, _) = http_get(s.http_port.unwrap(), "/connz?limit=abc");
    assert_eq!(code, 400);
}

#[test]
fn ipv6_loopback_listens_when_available() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback on this machine; nothing to test");
        return;
    }
    let (bin, _) = server_binary();
    let mut child = Command::new(bin)
        .args(["-a", "::1", "-p", "-1"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut port = None;
    for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
        let line = line.unwrap();
        if let Some(rest) = line.split("Listening for client connections on ").nth(1) {
            port = rest
                .trim()
                .rsplit(':')
                .next()
                .and_then(|p| p.parse::<u16>().ok());
        }
        if line.contains("Server is ready") {
            break;
        }
    }
    let port = port.expect("port");
    let s = std::net::TcpStream::connect(("::1", port)).expect("connect over IPv6");
    drop(s);
    let _ = child.kill();
    let _ = child.wait();
    let _ = Raw::connect; // same harness types in use
}

#[test]
fn user_and_pass_flags_require_those_credentials() {
    let s = TestServer::start_with(&["--user", "ops", "--pass", "s3cret"], None);
    let mut bad = s.raw();
    assert_eq!(bad.info["auth_required"], true);
    bad.send(b"CONNECT {\"verbose\":false,\"user\":\"ops\",\"pass\":\"nope\",\"protocol\":1}\r\nPING\r\n");
    bad.expect_line("-ERR 'Authorization Violation'");
    let mut good = s.raw();
    good.send(b"CONNECT {\"verbose\":false,\"user\":\"ops\",\"pass\":\"s3cret\",\"protocol\":1}\r\nPING\r\n");
    good.expect_line("PONG");
}

#[test]
fn auth_flag_sets_a_token() {
    let s = TestServer::start_with(&["--auth", "tok3n"], None);
    let mut good = s.raw();
    good.send(b"CONNECT {\"verbose\":false,\"auth_token\":\"tok3n\",\"protocol\":1}\r\nPING\r\n");
    good.expect_line("PONG");
    let mut bad = s.raw();
    bad.send(b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
    bad.expect_line("-ERR 'Authorization Violation'");
}

#[test]
fn sighup_reloads_authorization_for_new_connections() {
    if server_binary().1 {
        return; // the reference also reloads, but closes removed users; ours keeps them
    }
    let s =
        TestServer::with_config("authorization { users: [ { user: alice, password: pw1 } ] }\n");
    let mut kept = s.raw();
    kept.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"user\":\"alice\",\"pass\":\"pw1\"}\r\nPING\r\n");
    kept.expect_line("PONG");
    std::fs::write(
        s.dir.path().join("server.conf"),
        "authorization { users: [ { user: bob, password: pw2 } ] }\n",
    )
    .unwrap();
    s.signal("HUP");
    let reloaded = (0..250).any(|_| {
        support::spin_pause(Duration::from_millis(20));
        s.log_text().contains("Reloaded: authorization")
    });
    assert!(reloaded, "reload logged:\n{}", s.log_text());
    let mut old = s.raw();
    old.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"user\":\"alice\",\"pass\":\"pw1\"}\r\nPING\r\n");
    old.expect_line("-ERR 'Authorization Violation'");
    let mut new = s.raw();
    new.send(
        b"CONNECT {\"verbose\":false,\"protocol\":1,\"user\":\"bob\",\"pass\":\"pw2\"}\r\nPING\r\n",
    );
    new.expect_line("PONG");
    kept.send(b"PING\r\n");
    kept.expect_line("PONG");
}

/// The default wildcard `0.0.0.0` takes IPv6 too, as nats-server's does (nats-core's
/// `test_connect_with_ipv6_localhost` connects to `[::1]`): IPv4 and IPv6 clients each see
/// their own address in INFO `client_ip`, and the log and ports file still say `0.0.0.0`.
#[test]
fn the_wildcard_listener_takes_ipv6_loopback_too() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback on this machine; nothing to check");
        return;
    }
    let s = TestServer::start_with(&["-a", "0.0.0.0"], None);
    let info_of = |addr: std::net::SocketAddr| {
        use std::io::{BufRead, BufReader};
        let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        let json = line
            .trim_end()
            .strip_prefix("INFO ")
            .unwrap_or_else(|| panic!("{line}"));
        serde_json::from_str::<serde_json::Value>(json).unwrap()
    };
    let v6 = info_of(format!("[::1]:{}", s.port).parse().unwrap());
    assert_eq!(v6["client_ip"], "::1", "{v6}");
    let v4 = info_of(format!("127.0.0.1:{}", s.port).parse().unwrap());
    assert_eq!(v4["client_ip"], "127.0.0.1", "{v4}");
    if !server_binary().1 {
        assert!(s.log_text().contains(&format!(
            "Listening for client connections on 0.0.0.0:{}",
            s.port
        )));
    }
}
