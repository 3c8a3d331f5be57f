//! TLS through real clients: async-nats over TLS, client certificates, verify_and_map,
//! handshake_first, allow_non_tls, expired certificates, SIGHUP certificate reload.
//! Certificates are made here with rcgen.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rcgen::SanType;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use support::certs::{server_sans, Ca, Files};
use support::TestServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn tls_conf(cert: &Path, key: &Path, extra: &str) -> String {
    format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n{extra}\n}}\n",
        cert.display(),
        key.display()
    )
}

/// A raw TLS connection: reads the plaintext INFO (unless `first`), upgrades, returns the
/// stream and the peer certificate's subject CN as seen by the client.
async fn raw_tls(
    port: u16,
    ca_pem: &Path,
    client: Option<(&Path, &Path)>,
    first: bool,
) -> std::io::Result<(
    tokio_rustls::client::TlsStream<TcpStream>,
    serde_json::Value,
)> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let mut info = serde_json::Value::Null;
    if !first {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            tcp.read_exact(&mut b).await?;
            line.push(b[0]);
        }
        let text = String::from_utf8_lossy(&line);
        info = serde_json::from_str(text.trim_start_matches("INFO ").trim()).unwrap();
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca_pem).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((c, k)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(c)
                    .unwrap()
                    .map(|c| c.unwrap())
                    .collect(),
                PrivateKeyDer::from_pem_file(k).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    if first {
        let mut r = BufReader::new(&mut tls);
        let mut line = String::new();
        r.read_line(&mut line).await?;
        info = serde_json::from_str(line.trim_start_matches("INFO ").trim()).unwrap();
    }
    Ok((tls, info))
}

/// Whether a TLS client (with `client` certificate, if any) gets through CONNECT to a PONG.
async fn tls_session_works(port: u16, ca_pem: &Path, client: Option<(&Path, &Path)>) -> bool {
    match raw_tls(port, ca_pem, client, false).await {
        Err(_) => false,
        Ok((mut t, _)) => {
            let lines = tls_lines(&mut t, b"CONNECT {\"verbose\":false}\r\nPING\r\n", "PONG").await;
            lines.last().map(String::as_str) == Some("PONG")
        }
    }
}

async fn tls_lines(
    tls: &mut tokio_rustls::client::TlsStream<TcpStream>,
    send: &[u8],
    until: &str,
) -> Vec<String> {
    if tls.write_all(send).await.is_err() {
        return vec![];
    }
    let mut r = BufReader::new(tls);
    let mut out = Vec::new();
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut line))
            .await
            .unwrap();
        if !matches!(n, Ok(n) if n > 0) {
            return out;
        }
        let l = line.trim_end().to_owned();
        let done = l == until;
        out.push(l);
        if done {
            return out;
        }
    }
}

#[tokio::test]
async fn async_nats_over_tls_and_untrusted_or_plain_clients_refused() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let s = TestServer::with_config(&tls_conf(&cert, &key, ""));
    // Plain INFO says TLS is required.
    let r = s.raw();
    assert_eq!(r.info["tls_required"], true);
    drop(r);
    let c = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(ca_pem.clone())
        .connect(s.url())
        .await
        .unwrap();
    let mut sub = c.subscribe("secure.x").await.unwrap();
    c.publish("secure.x", "hello".into()).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "hello".as_bytes());
    // A client that does not trust our CA fails.
    let other = Ca::new("other-ca");
    let other_pem = f.put("other.pem", &other.pem());
    assert!(raw_tls(s.port, &other_pem, None, false).await.is_err());
    // A plaintext client on the TLS-only port is dropped.
    let mut plain = s.raw();
    plain.send(b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
    assert!(plain.closed_within(Duration::from_secs(5)));
}

#[tokio::test]
async fn client_certificates_are_required_when_verify_is_on() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let (cc, ck) = ca.leaf("client", vec![], |_| {});
    let (cc, ck) = (f.put("client.pem", &cc), f.put("client-key.pem", &ck));
    let rogue = Ca::new("rogue-ca");
    let (rc, rk) = rogue.leaf("client", vec![], |_| {});
    let (rc, rk) = (f.put("rogue.pem", &rc), f.put("rogue-key.pem", &rk));
    let s = TestServer::with_config(&tls_conf(
        &cert,
        &key,
        &format!("  ca_file: \"{}\"\n  verify: true", ca_pem.display()),
    ));
    assert_eq!(s.raw().info["tls_verify"], true);
    // No client certificate: the handshake (or the first read) fails.
    let no_cert = !tls_session_works(s.port, &ca_pem, None).await;
    assert!(no_cert, "no client certificate must fail");
    let rogue_fails = !tls_session_works(s.port, &ca_pem, Some((&rc, &rk))).await;
    assert!(rogue_fails, "a certificate from another CA must fail");
    let c = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(ca_pem)
        .add_client_certificate(cc, ck)
        .connect(s.url())
        .await
        .unwrap();
    c.flush().await.unwrap();
}

/// A TLS server signed by `ca` that maps verified client certificates onto `users` (the
/// entries of an `authorization { users: [...] }` list). Returns it and the CA file.
fn mapping_server(ca: &Ca, f: &Files, users: &str) -> (TestServer, PathBuf) {
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let conf = format!(
        "{}authorization {{ users: [ {users} ] }}\n",
        tls_conf(
            &cert,
            &key,
            &format!(
                "  ca_file: \"{}\"\n  verify_and_map: true",
                ca_pem.display()
            )
        )
    );
    (TestServer::with_config(&conf), ca_pem)
}

#[tokio::test]
async fn verify_and_map_picks_the_user_and_its_permissions() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (s, ca_pem) = mapping_server(
        &ca,
        &f,
        "{ user: \"alice@example.com\", permissions: { publish: [\"a.>\"] } }",
    );
    let (cc, ck) = ca.leaf(
        "alice",
        vec![SanType::Rfc822Name("alice@example.com".try_into().unwrap())],
        |_| {},
    );
    let (cc, ck) = (f.put("alice.pem", &cc), f.put("alice-key.pem", &ck));
    let (bc, bk) = ca.leaf("mallory", vec![], |_| {});
    let (bc, bk) = (f.put("mallory.pem", &bc), f.put("mallory-key.pem", &bk));
    let (mut t, _) = raw_tls(s.port, &ca_pem, Some((&cc, &ck)), false)
        .await
        .unwrap();
    let lines = tls_lines(
        &mut t,
        b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPUB b.x 1\r\nx\r\nPING\r\n",
        "PONG",
    )
    .await;
    assert!(
        lines.contains(&"-ERR 'Permissions Violation for Publish to \"b.x\"'".to_owned()),
        "{lines:?}"
    );
    assert_eq!(lines.last().map(String::as_str), Some("PONG"));
    // A valid certificate that maps to no user is refused.
    let (mut t, _) = raw_tls(s.port, &ca_pem, Some((&bc, &bk)), false)
        .await
        .unwrap();
    let lines = tls_lines(
        &mut t,
        b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n",
        "PONG",
    )
    .await;
    assert!(
        lines.contains(&"-ERR 'Authorization Violation'".to_owned()),
        "{lines:?}"
    );
}

#[tokio::test]
async fn handshake_first_works_with_a_client_that_asks_for_it() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let s = TestServer::with_config(&tls_conf(&cert, &key, "  handshake_first: true"));
    let c = async_nats::ConnectOptions::new()
        .tls_first()
        .add_root_certificates(ca_pem.clone())
        .connect(s.url())
        .await
        .unwrap();
    c.flush().await.unwrap();
    let (_, info) = raw_tls(s.port, &ca_pem, None, true).await.unwrap();
    assert_eq!(info["tls_required"], true, "INFO comes inside TLS");
}

#[tokio::test]
async fn allow_non_tls_serves_both() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let s = TestServer::with_config(&format!(
        "{}allow_non_tls: true\n",
        tls_conf(&cert, &key, "")
    ));
    let mut plain = s.raw();
    assert_eq!(plain.info["tls_available"], true);
    assert!(plain.info.get("tls_required").is_none());
    plain.handshake("");
    let (mut t, info) = raw_tls(s.port, &ca_pem, None, false).await.unwrap();
    assert_eq!(info["tls_available"], true);
    let lines = tls_lines(&mut t, b"CONNECT {\"verbose\":false}\r\nPING\r\n", "PONG").await;
    assert_eq!(lines.last().map(String::as_str), Some("PONG"));
}

#[test]
fn expired_server_certificate_is_reported_at_startup() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |p| {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let (cert, key) = (f.put("server.pem", &cert), f.put("server-key.pem", &key));
    let conf = f.put("s.conf", &tls_conf(&cert, &key, ""));
    let (bin, reference) = support::server_binary();
    if reference {
        return;
    }
    let out = std::process::Command::new(bin)
        .args(["-p", "-1", "-c", conf.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not valid now") && err.contains("server.pem"),
        "{err}"
    );
}

#[tokio::test]
async fn sighup_serves_the_new_certificate_to_new_connections() {
    if support::server_binary().1 {
        return;
    }
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("first", server_sans(), |_| {});
    let (cert_p, key_p, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let s = TestServer::with_config(&tls_conf(&cert_p, &key_p, ""));
    let subject_cn = |t: &tokio_rustls::client::TlsStream<TcpStream>| {
        let der = t.get_ref().1.peer_certificates().unwrap()[0].clone();
        let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
        let cn = c
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        cn
    };
    let (old_conn, _) = raw_tls(s.port, &ca_pem, None, false).await.unwrap();
    assert_eq!(subject_cn(&old_conn), "first");
    let (cert2, key2) = ca.leaf("second", server_sans(), |_| {});
    std::fs::write(&cert_p, cert2).unwrap();
    std::fs::write(&key_p, key2).unwrap();
    s.signal("HUP");
    let ok = support::eventually(Duration::from_secs(5), || {
        s.log_text().contains("Reloaded: TLS certificate")
    })
    .await;
    assert!(ok, "reload logged");
    let (new_conn, _) = raw_tls(s.port, &ca_pem, None, false).await.unwrap();
    assert_eq!(subject_cn(&new_conn), "second");
    // The existing connection keeps working.
    let mut old_conn = old_conn;
    let lines = tls_lines(
        &mut old_conn,
        b"CONNECT {\"verbose\":false}\r\nPING\r\n",
        "PONG",
    )
    .await;
    assert_eq!(lines.last().map(String::as_str), Some("PONG"));
}

#[tokio::test]
async fn monitoring_over_https() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let s = TestServer::start_with(&["-ms", "-1"], Some(&tls_conf(&cert, &key, "")));
    let log = s.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("Starting https monitor on "))
        .expect("https monitor line");
    let port: u16 = line.rsplit(':').next().unwrap().trim().parse().unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&ca_pem).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut t = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    t.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    let _ = t.read_to_string(&mut body).await;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    let json = body.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(v["status"], "ok");
}

#[tokio::test]
async fn pinned_certs_admit_only_listed_client_certificates() {
    if support::server_binary().1 {
        return; // the reference does not implement pinned_certs
    }
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let (good_c, good_k) = ca.leaf("good", vec![], |_| {});
    let (bad_c, bad_k) = ca.leaf("bad", vec![], |_| {});
    let der = CertificateDer::from_pem_slice(good_c.as_bytes()).unwrap();
    let pin: String = {
        use sha2::Digest;
        sha2::Sha256::digest(der.as_ref())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let (good_c, good_k, bad_c, bad_k) = (
        f.put("g.pem", &good_c),
        f.put("gk.pem", &good_k),
        f.put("b.pem", &bad_c),
        f.put("bk.pem", &bad_k),
    );
    let extra = format!(
        "  ca_file: \"{}\"\n  verify: true\n  pinned_certs: [\"{pin}\"]",
        ca_pem.display()
    );
    let s = TestServer::with_config(&tls_conf(&cert, &key, &extra));
    let (mut t, _) = raw_tls(s.port, &ca_pem, Some((&good_c, &good_k)), false)
        .await
        .unwrap();
    let lines = tls_lines(&mut t, b"CONNECT {\"verbose\":false}\r\nPING\r\n", "PONG").await;
    assert_eq!(lines.last().map(String::as_str), Some("PONG"));
    let refused = !tls_session_works(s.port, &ca_pem, Some((&bad_c, &bad_k))).await;
    assert!(refused, "a valid but unpinned certificate is refused");
}

#[tokio::test]
async fn tls_flags_enable_tls_without_a_config_file() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let s = TestServer::start_with(
        &[
            "--tls",
            "--tlscert",
            cert.to_str().unwrap(),
            "--tlskey",
            key.to_str().unwrap(),
        ],
        None,
    );
    let c = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(ca_pem)
        .connect(s.url())
        .await
        .unwrap();
    c.flush().await.unwrap();
}

#[tokio::test]
async fn bearer_tokens_need_tls() {
    use sealstream::auth::jwt::claims::{AccountLimits, UserPermissionsLimits};
    use sealstream::auth::nkeys::{KeyPair as NKey, Role};
    use support::jwt::{user_jwt, World};
    if support::server_binary().1 {
        return; // the reference accepts bearer tokens on plain connections
    }
    let w = World::new();
    let t = w.tenant("ACME", AccountLimits::default());
    let user = NKey::generate(Role::User);
    let perms = UserPermissionsLimits {
        subs: -1,
        data: -1,
        payload: -1,
        bearer_token: true,
        ..Default::default()
    };
    let token = user_jwt(&t.key, &user, "bearer", perms, |_| {});
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let conf = format!(
        "{}{}allow_non_tls: true\n",
        w.config(&[&t]),
        tls_conf(&cert, &key, "")
    );
    let s = TestServer::with_config(&conf);
    let connect =
        format!("CONNECT {{\"verbose\":false,\"protocol\":1,\"jwt\":\"{token}\"}}\r\nPING\r\n");
    let mut plain = s.raw();
    plain.send(connect.as_bytes());
    plain.expect_line("-ERR 'Authorization Violation'");
    let (mut t, _) = raw_tls(s.port, &ca_pem, None, false).await.unwrap();
    let lines = tls_lines(&mut t, connect.as_bytes(), "PONG").await;
    assert_eq!(lines.last().map(String::as_str), Some("PONG"), "{lines:?}");
}

/// JetStream over TLS: stream create, a PubAck'd publish, a pull fetch with an ack and KV, all
/// on a TLS-only port.
#[tokio::test]
async fn jetstream_works_over_tls() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (cert, key) = ca.leaf("localhost", server_sans(), |_| {});
    let (cert, key, ca_pem) = (
        f.put("server.pem", &cert),
        f.put("server-key.pem", &key),
        f.put("ca.pem", &ca.pem()),
    );
    let s = TestServer::start_js_with(&[], Some(&tls_conf(&cert, &key, "")));
    let c = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(ca_pem)
        .connect(s.url())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(c);
    let stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: "SECURE".into(),
            subjects: vec!["secure.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let ack = js
        .publish("secure.order", "over tls".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ack.sequence, 1);
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("w".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    let m = batch.next().await.unwrap().unwrap();
    assert_eq!(m.payload, "over tls".as_bytes());
    m.double_ack().await.unwrap();
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "tlskv".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    kv.put("k", "v".into()).await.unwrap();
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "v".as_bytes());
}

#[tokio::test]
async fn verify_and_map_escapes_the_subject_dn() {
    let ca = Ca::new("test-ca");
    let f = Files::new();
    let (s, ca_pem) = mapping_server(
        &ca,
        &f,
        "{ user: \"CN=admin,O=Acme\" }, { user: \"CN=admin\\\\,O=Acme\", permissions: { publish: [\"only.this\"] } }",
    );
    // One CN whose value is `admin,O=Acme`: it must not pass for the user `CN=admin,O=Acme`.
    let (ec, ek) = ca.leaf("admin,O=Acme", vec![], |_| {});
    let (ec, ek) = (f.put("evil.pem", &ec), f.put("evil-key.pem", &ek));
    let (mut t, _) = raw_tls(s.port, &ca_pem, Some((&ec, &ek)), false)
        .await
        .unwrap();
    let lines = tls_lines(
        &mut t,
        b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPUB admin.x 1\r\nx\r\nPING\r\n",
        "PONG",
    )
    .await;
    // It maps to the escaped name (whose permissions apply), never to the plain one.
    assert!(
        lines.contains(&"-ERR 'Permissions Violation for Publish to \"admin.x\"'".to_owned()),
        "{lines:?}"
    );
}
