//! Clusters of real processes on loopback (spec/cluster.md): a full mesh from one seed route,
//! core NATS across nodes (pub/sub, wildcards, headers, queue groups, request/reply,
//! no-responders, accounts), client failover, a restarted node rejoining, route handshake
//! refusals — and the same core tests on a mixed cluster of sealstream and nats-server nodes.
//!
//! With `SEALSTREAM_TEST_SERVER` pointing at nats-server every node is the reference, which
//! checks the expectations themselves.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use support::certs::{server_sans, Ca, Files};
use support::cluster::{nats_server_binary, Kind, TestCluster};
use support::Raw;

const MESH: Duration = Duration::from_secs(10);

/// Waits until a request to `subject` from `c` no longer comes back as no-responders: the
/// interest registered on another node has reached `c`'s node.
async fn wait_interest(c: &async_nats::Client, subject: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = tokio::time::timeout(
            Duration::from_millis(200),
            c.request(subject.to_owned(), Bytes::new()),
        )
        .await;
        match r {
            Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {}
            _ => return,
        }
        assert!(
            std::time::Instant::now() < deadline,
            "interest in {subject} never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Subscribes on `c` to `subject`, then to a probe subject, and waits until `from` sees the
/// probe: interest travels in order on a route, so `subject`'s has arrived too.
async fn subscribe_seen(
    c: &async_nats::Client,
    from: &async_nats::Client,
    subject: &str,
    queue: Option<&str>,
) -> async_nats::Subscriber {
    let sub = match queue {
        Some(q) => c
            .queue_subscribe(subject.to_owned(), q.to_owned())
            .await
            .unwrap(),
        None => c.subscribe(subject.to_owned()).await.unwrap(),
    };
    let probe = format!("probe.{}", c.new_inbox().replace('.', "_"));
    let mut p = c.subscribe(probe.clone()).await.unwrap();
    let responder = c.clone();
    tokio::spawn(async move {
        while let Some(m) = p.next().await {
            if let Some(r) = m.reply {
                let _ = responder.publish(r, Bytes::new()).await;
            }
        }
    });
    support::sync(c).await;
    wait_interest(from, &probe).await;
    sub
}

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("a message within 5 s")
        .expect("subscription open")
}

/// The core checks every cluster must pass: messages published on node `a` reach subscribers
/// on node `b`, once each.
async fn core_across(cl: &TestCluster, a: usize, b: usize, c3: usize) {
    let pubc = async_nats::connect(cl.url(a)).await.unwrap();
    let subc = async_nats::connect(cl.url(b)).await.unwrap();

    // Plain, wildcard and full-wildcard interest; one copy per publish however many match.
    let mut exact = subscribe_seen(&subc, &pubc, "orders.new", None).await;
    let mut star = subscribe_seen(&subc, &pubc, "orders.*", None).await;
    let mut gt = subscribe_seen(&subc, &pubc, "orders.>", None).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("K", "V");
    pubc.publish_with_headers("orders.new", headers, "o1".into())
        .await
        .unwrap();
    pubc.publish_with_reply("orders.new", "reply.here", "o2".into())
        .await
        .unwrap();
    pubc.publish("orders.deep.x", "o3".into()).await.unwrap();
    support::sync(&pubc).await;
    let m = next(&mut exact).await;
    assert_eq!(m.payload, "o1");
    assert_eq!(m.headers.as_ref().unwrap().get("K").unwrap().as_str(), "V");
    let m = next(&mut exact).await;
    assert_eq!(
        (m.payload.as_ref(), m.reply.as_deref()),
        (&b"o2"[..], Some("reply.here"))
    );
    assert_eq!(next(&mut star).await.payload, "o1");
    assert_eq!(next(&mut star).await.payload, "o2");
    for want in ["o1", "o2", "o3"] {
        assert_eq!(next(&mut gt).await.payload, want);
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), exact.next())
            .await
            .is_err(),
        "one copy per publish"
    );

    // Request/reply across nodes, and no-responders decided from cluster-wide interest.
    let responder = subc.clone();
    let mut svc = subscribe_seen(&subc, &pubc, "svc.echo", None).await;
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            let mut body = b"echo:".to_vec();
            body.extend_from_slice(&m.payload);
            let _ = responder.publish(m.reply.unwrap(), body.into()).await;
        }
    });
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        pubc.request("svc.echo", "hi".into()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r.payload, "echo:hi");
    let e = pubc.request("nobody.home", Bytes::new()).await.unwrap_err();
    assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders);

    // A queue group with members on three nodes: each message to exactly one member, and
    // members on every node get some.
    let third = async_nats::connect(cl.url(c3)).await.unwrap();
    let mut members = Vec::new();
    for c in [&pubc, &subc, &third] {
        members.push(subscribe_seen(c, &pubc, "work", Some("wq")).await);
    }
    let n = 300;
    for i in 0..n {
        pubc.publish("work", format!("{i}").into()).await.unwrap();
    }
    support::sync(&pubc).await;
    let mut seen = std::collections::HashSet::new();
    let mut counts = Vec::new();
    for m in &mut members {
        let mut k = 0;
        while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(500), m.next()).await {
            if msg.payload.is_empty() {
                continue; // the interest probe of wait_interest
            }
            assert!(seen.insert(msg.payload.clone()), "delivered twice");
            k += 1;
        }
        counts.push(k);
    }
    assert_eq!(counts.iter().sum::<usize>(), n, "{counts:?}");
    assert!(
        counts.iter().all(|k| *k > 30),
        "spread over the cluster: {counts:?}"
    );
}

#[tokio::test]
async fn three_nodes_mesh_from_one_seed_and_route_core_nats() {
    let cl = TestCluster::start(&[Kind::UnderTest; 3], None);
    cl.wait_full_mesh(MESH);
    core_across(&cl, 0, 2, 1).await;
}

#[tokio::test]
async fn a_mixed_cluster_with_nats_server_routes_core_nats_both_ways() {
    if nats_server_binary().is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must provide .venv");
        eprintln!("skipping: no .venv nats-server");
        return;
    }
    // n1 is nats-server (the seed everyone dials), n2 and n3 the server under test.
    let cl = TestCluster::start(&[Kind::NatsServer, Kind::UnderTest, Kind::UnderTest], None);
    cl.wait_full_mesh(MESH);
    core_across(&cl, 0, 2, 1).await;
    core_across(&cl, 1, 0, 2).await;
    // And the other way round: the server under test is the seed.
    let cl = TestCluster::start(&[Kind::UnderTest, Kind::NatsServer, Kind::NatsServer], None);
    cl.wait_full_mesh(MESH);
    core_across(&cl, 1, 0, 2).await;
    core_across(&cl, 0, 1, 2).await;
}

const ACCOUNTS: &str = r#"
accounts {
  A: { users: [{user: a, password: a}] }
  B: { users: [{user: b, password: b}] }
}
"#;

#[tokio::test]
async fn accounts_stay_isolated_across_routes() {
    let cl = TestCluster::start(&[Kind::UnderTest; 3], Some(ACCOUNTS));
    cl.wait_full_mesh(MESH);
    let a_pub = login(&cl, 0, "a").await;
    let b_pub = login(&cl, 0, "b").await;
    let a_sub_c = login(&cl, 2, "a").await;
    let b_sub_c = login(&cl, 2, "b").await;
    let mut a_sub = subscribe_seen(&a_sub_c, &a_pub, "shared.subject", None).await;
    let mut b_sub = subscribe_seen(&b_sub_c, &b_pub, "shared.subject", None).await;
    a_pub
        .publish("shared.subject", "for-a".into())
        .await
        .unwrap();
    support::sync(&a_pub).await;
    assert_eq!(next(&mut a_sub).await.payload, "for-a");
    assert!(
        tokio::time::timeout(Duration::from_millis(400), b_sub.next())
            .await
            .is_err(),
        "account B must not see account A's message"
    );
    b_pub
        .publish("shared.subject", "for-b".into())
        .await
        .unwrap();
    assert_eq!(next(&mut b_sub).await.payload, "for-b");
    if !cl.is_reference() {
        // Two tenants share the servers: the monitoring port does not list their subjects.
        let (_, body) = cl.nodes[0].server.http_get("/routez?subs=1");
        assert!(!body.contains("shared.subject"), "{body}");
        assert!(body.contains("tenant_details"), "{body}");
    }
}

#[tokio::test]
async fn clients_learn_the_members_and_fail_over_when_a_node_is_killed() {
    let mut cl = TestCluster::start(&[Kind::UnderTest; 3], None);
    cl.wait_full_mesh(MESH);
    // The subscriber knows only n1; INFO connect_urls tell it about n2 and n3.
    let (tx, mut reconnected) = tokio::sync::mpsc::channel(4);
    let sub_client = async_nats::ConnectOptions::new()
        .event_callback(move |e| {
            let tx = tx.clone();
            async move {
                if matches!(e, async_nats::Event::Connected) {
                    let _ = tx.send(()).await;
                }
            }
        })
        .connect(cl.url(0))
        .await
        .unwrap();
    let urls = sub_client.server_info().connect_urls;
    assert_eq!(urls.len(), 3, "{urls:?}");
    assert!(
        urls[0].ends_with(&format!(":{}", cl.nodes[0].server.port)),
        "own URL first: {urls:?}"
    );
    let publisher = async_nats::connect(cl.url(2)).await.unwrap();
    let mut sub = subscribe_seen(&sub_client, &publisher, "feed", None).await;
    publisher.publish("feed", "before".into()).await.unwrap();
    assert_eq!(next(&mut sub).await.payload, "before");

    cl.stop(0, false); // kill -9
    tokio::time::timeout(Duration::from_secs(15), reconnected.recv())
        .await
        .expect("reconnected to another member")
        .unwrap();
    // Its subscription is re-sent to the new node and reaches the publisher's node.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        publisher.publish("feed", "after".into()).await.unwrap();
        match tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
            Ok(Some(m)) if m.payload == "after" => break,
            _ => assert!(
                std::time::Instant::now() < deadline,
                "no message after failover"
            ),
        }
    }
}

#[tokio::test]
async fn a_restarted_node_rejoins_and_its_interest_is_restored() {
    let mut cl = TestCluster::start(&[Kind::UnderTest; 3], None);
    cl.wait_full_mesh(MESH);
    let publisher = async_nats::connect(cl.url(0)).await.unwrap();
    // A protocol-1 client of n1 past its first PONG...
    let mut raw = Raw::connect(cl.nodes[0].server.port);
    raw.send(b"CONNECT {\"protocol\":1,\"verbose\":false}\r\nPING\r\n");
    raw.expect_line("PONG");
    let n3 = format!("\"127.0.0.1:{}\"", cl.nodes[2].server.port);
    cl.stop(2, false);
    // ...hears in an async INFO that n3 left.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let line = raw
            .read_line(Duration::from_secs(5))
            .expect("an INFO without n3");
        if line.starts_with("INFO ") && line.contains("connect_urls") && !line.contains(&n3) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "n3 still advertised: {line}"
        );
    }
    cl.restart(2);
    cl.wait_full_mesh(MESH);
    let c3 = async_nats::connect(cl.url(2)).await.unwrap();
    let started = std::time::Instant::now();
    let mut sub = subscribe_seen(&c3, &publisher, "after.restart", None).await;
    let took = started.elapsed();
    publisher
        .publish("after.restart", "hello".into())
        .await
        .unwrap();
    assert_eq!(next(&mut sub).await.payload, "hello");
    eprintln!("interest from the restarted node reached n1 after {took:?}");
}

#[tokio::test]
async fn the_route_port_refuses_clients_strangers_and_other_clusters() {
    let cl = TestCluster::start(&[Kind::UnderTest], None);
    let port = cl.nodes[0].server.cluster_port.expect("route port in log");
    // A client on the route port.
    let mut raw = Raw::connect(port);
    raw.send(b"CONNECT {\"lang\":\"rust\",\"verbose\":false}\r\n");
    raw.expect_line("-ERR 'attempted to connect to route port'");
    assert!(raw.closed_within(Duration::from_secs(2)));
    // A route of another cluster.
    let mut raw = Raw::connect(port);
    raw.send(b"CONNECT {\"name\":\"NXXX\",\"cluster\":\"OTHER\",\"headers\":true}\r\n");
    raw.expect_line("-ERR 'Rejecting connection, cluster name \"OTHER\" does not match \"C1\"'");
    assert!(raw.closed_within(Duration::from_secs(2)));
}

/// A compression mode nats-server does not start with: the process exits with its words.
/// (`s2_uncompressed` is such a mode: nats-server 2.15.1's `-t` passes it, its startup refuses
/// it.)
#[tokio::test]
async fn unsupported_compression_modes_stop_the_server_with_nats_servers_words() {
    let (bin, _) = support::server_binary();
    for mode in ["bogus", "s2_uncompressed"] {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("c.conf");
        std::fs::write(
            &conf,
            format!(
                "port: -1\ncluster {{ name: C1, listen: \"127.0.0.1:-1\", compression: {mode} }}\n"
            ),
        )
        .unwrap();
        let out = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::process::Command::new(&bin)
                .arg("-c")
                .arg(&conf)
                .current_dir(dir.path())
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("the server should refuse to start")
        .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{mode}: {text}");
        assert!(
            text.contains(&format!("unsupported compression mode \"{mode}\"")),
            "{mode}: {text}"
        );
    }
}

#[tokio::test]
async fn route_authorization_is_required_when_configured() {
    let conf = "cluster { authorization { user: ruser, password: rpass, timeout: 2 } }";
    let cl = TestCluster::start(&[Kind::UnderTest], Some(conf));
    if cl.is_reference() {
        // nats-server's `--cluster <url>` flag (the harness uses it) replaces the file's route
        // credentials with the URL's, here none; sealstream keeps the file's (fail closed).
        return;
    }
    let port = cl.nodes[0].server.cluster_port.expect("route port in log");
    let mut raw = Raw::connect(port);
    raw.send(
        b"CONNECT {\"name\":\"NXXX\",\"cluster\":\"C1\",\"user\":\"ruser\",\"pass\":\"bad\"}\r\n",
    );
    raw.expect_line("-ERR 'Authorization Violation'");
    assert!(raw.closed_within(Duration::from_secs(2)));
}

/// `cluster { tls {} }` with a member certificate signed by `ca` (files kept in `files`).
fn route_tls_conf(ca: &Ca, files: &Files, tag: &str) -> String {
    let ca_path = files.put(&format!("{tag}-ca.pem"), &ca.pem());
    let (cert, key) = ca.leaf("route", server_sans(), |_| {});
    let cert = files.put(&format!("{tag}-route.pem"), &cert);
    let key = files.put(&format!("{tag}-route-key.pem"), &key);
    format!(
        "cluster {{ tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", timeout: 2 }} }}",
        cert.display(),
        key.display(),
        ca_path.display()
    )
}

/// Whether nothing arrives in plaintext on a route port and a plaintext CONNECT is dropped.
fn plaintext_refused(port: u16) -> bool {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 256];
    if let Ok(n) = s.read(&mut buf) {
        if n > 0 {
            return false; // an INFO in plaintext
        }
    }
    let _ = s.write_all(b"CONNECT {\"name\":\"NXXX\",\"cluster\":\"C1\"}\r\n");
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    !matches!(s.read(&mut buf), Ok(n) if n > 0 && buf[..n].starts_with(b"INFO"))
}

#[tokio::test]
async fn routes_over_tls_verify_members_both_ways() {
    let (ca, files) = (Ca::new("route CA"), Files::new());
    let conf = route_tls_conf(&ca, &files, "c1");
    let mut cl = TestCluster::start(&[Kind::UnderTest, Kind::UnderTest], Some(&conf));
    cl.wait_full_mesh(MESH);
    let port = cl.nodes[0].server.cluster_port.unwrap();
    assert!(plaintext_refused(port), "the route port spoke plaintext");
    // A third member with a certificate of the same CA joins; one of another CA does not.
    cl.join(Kind::UnderTest, Some(&conf));
    cl.wait_full_mesh(MESH);
    core_across(&cl, 0, 1, 2).await;
    let stranger = route_tls_conf(&Ca::new("other CA"), &files, "other");
    let s = cl.join(Kind::UnderTest, Some(&stranger));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cl.peers_of(0).len(),
        2,
        "a member of another CA was admitted"
    );
    assert!(cl.peers_of(s).is_empty());
    if !cl.is_reference() {
        assert!(cl.nodes[s]
            .server
            .log_text()
            .contains("TLS route handshake error"));
    }
}

#[tokio::test]
async fn a_mixed_cluster_routes_over_tls() {
    if nats_server_binary().is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must provide .venv");
        eprintln!("skipping: no .venv nats-server");
        return;
    }
    let (ca, files) = (Ca::new("route CA"), Files::new());
    let conf = route_tls_conf(&ca, &files, "c1");
    let cl = TestCluster::start(
        &[Kind::UnderTest, Kind::NatsServer, Kind::UnderTest],
        Some(&conf),
    );
    cl.wait_full_mesh(MESH);
    core_across(&cl, 0, 1, 2).await;
    core_across(&cl, 1, 2, 0).await;
}

const IMPORTS: &str = r#"
accounts {
  A: {
    users: [{user: a, password: a}]
    exports: [{service: "svc.>"}, {stream: "feed.>"}]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {service: {account: A, subject: "svc.>"}}
      {stream: {account: A, subject: "feed.>"}, prefix: "from_a"}
    ]
  }
}
"#;

async fn login(cl: &TestCluster, i: usize, user: &str) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), user.into())
        .connect(cl.url(i))
        .await
        .unwrap()
}

/// A service of account A on node `svc_at` answers account B's requesters on every node,
/// and A's stream reaches B's subscriber on node `sub_at`.
async fn imports_across(cl: &TestCluster, svc_at: usize, sub_at: usize) {
    let responder = login(cl, svc_at, "a").await;
    // Subjects of this call only (responders of earlier calls are still up).
    let tag = format!("at{}", svc_at + 1);
    let mut reqs = responder.subscribe(format!("svc.{tag}.>")).await.unwrap();
    let answering = responder.clone();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&served);
    tokio::spawn(async move {
        while let Some(m) = reqs.next().await {
            if m.subject.contains(".from.") {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            if let Some(r) = m.reply {
                let body = format!("answer to {}", m.subject);
                let _ = answering.publish(r, body.into()).await;
            }
        }
    });
    support::sync(&responder).await;
    for i in 0..cl.nodes.len() {
        // The responder's interest has reached node i when an A client there gets answers.
        wait_interest(&login(cl, i, "a").await, &format!("svc.{tag}.probe")).await;
        let requester = login(cl, i, "b").await;
        let subject = format!("svc.{tag}.from.n{}", i + 1);
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            requester.request(subject.clone(), "q".into()),
        )
        .await
        .unwrap_or_else(|_| panic!("no answer on n{} (service on n{})", i + 1, svc_at + 1))
        .unwrap();
        assert_eq!(answer.payload, format!("answer to {subject}"));
    }
    // Each request above was served once.
    assert_eq!(
        served.load(std::sync::atomic::Ordering::SeqCst),
        cl.nodes.len()
    );
    // A's stream reaches B's subscribers on another node and on its own, once each.
    let importer = login(cl, sub_at, "b").await;
    let exporter = login(cl, svc_at, "a").await;
    let b_there = login(cl, svc_at, "b").await;
    let mut far = subscribe_seen(&importer, &b_there, "from_a.feed.>", None).await;
    let mut near = b_there.subscribe("from_a.feed.>").await.unwrap();
    support::sync(&b_there).await;
    // B's interest has reached A's node when B's probe has (subscribe_seen above).
    exporter.publish("feed.news", "hot".into()).await.unwrap();
    for sub in [&mut far, &mut near] {
        let m = next(sub).await;
        assert_eq!(
            (m.subject.as_str(), &m.payload[..]),
            ("from_a.feed.news", &b"hot"[..])
        );
    }
    for sub in [&mut far, &mut near] {
        assert!(
            tokio::time::timeout(Duration::from_millis(300), sub.next())
                .await
                .is_err(),
            "a stream import delivered twice"
        );
    }
}

#[tokio::test]
async fn service_and_stream_imports_work_across_nodes() {
    let cl = TestCluster::start(&[Kind::UnderTest; 3], Some(IMPORTS));
    cl.wait_full_mesh(MESH);
    imports_across(&cl, 2, 0).await;
    imports_across(&cl, 0, 1).await;
}

#[tokio::test]
async fn service_imports_work_across_nodes_of_a_mixed_cluster() {
    if nats_server_binary().is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must provide .venv");
        eprintln!("skipping: no .venv nats-server");
        return;
    }
    let cl = TestCluster::start(
        &[Kind::UnderTest, Kind::NatsServer, Kind::UnderTest],
        Some(IMPORTS),
    );
    cl.wait_full_mesh(MESH);
    // The service on nats-server, requesters everywhere; then on sealstream.
    imports_across(&cl, 1, 0).await;
    imports_across(&cl, 2, 1).await;
}

/// The next line that is not an INFO or a server PING.
fn next_line(r: &mut Raw) -> Option<String> {
    loop {
        let l = r.read_line(Duration::from_secs(5))?;
        if l.starts_with("INFO") || l == "PING" {
            continue;
        }
        return Some(l);
    }
}

#[tokio::test]
async fn account_claims_pushed_to_one_node_reach_every_node() {
    use sealstream::auth::jwt::claims::AccountLimits;
    use sealstream::auth::nkeys::{KeyPair, Role};
    use support::jwt::{connect_jwt, now, open_user, user_jwt, World};

    let w = World::new();
    let mut acme = w.tenant("ACME", AccountLimits::default());
    let sys = w.tenant("SYS", AccountLimits::default());
    // Each node runs in a directory of its own: ./jwt is per node.
    let conf = w.full_resolver_config(&[&acme], &sys);
    let n = 3;
    let cl = TestCluster::start(&[Kind::UnderTest; 3], Some(&conf));
    cl.wait_full_mesh(MESH);
    let login = |i: usize, t: &support::jwt::Tenant, user: &KeyPair| {
        let token = user_jwt(&t.key, user, "u", open_user(), |_| {});
        let mut r = cl.nodes[i].server.raw();
        connect_jwt(&mut r, &token, user);
        r
    };
    let victim = KeyPair::generate(Role::User);
    let mut on_n3 = login(n - 1, &acme, &victim);
    assert_eq!(next_line(&mut on_n3).as_deref(), Some("PONG"));
    // Let the system account's interest settle everywhere: a server ping from n1 is answered
    // by all three servers.
    let admin = KeyPair::generate(Role::User);
    let mut op = login(0, &sys, &admin);
    assert_eq!(next_line(&mut op).as_deref(), Some("PONG"));
    op.send(b"SUB _INBOX.ping 1\r\n");
    let deadline = std::time::Instant::now() + MESH;
    loop {
        op.send(b"PUB $SYS.REQ.SERVER.PING _INBOX.ping 0\r\n\r\nPING\r\n");
        let mut answers = 0;
        loop {
            let l = next_line(&mut op).expect("ping answers");
            if l == "PONG" {
                break;
            }
            if l.starts_with("MSG _INBOX.ping") {
                answers += 1;
                let _ = op.read_line(Duration::from_secs(5));
            }
        }
        // Late answers arrive after the PONG; collect them too.
        while let Some(l) = op.read_line(Duration::from_millis(300)) {
            if l.starts_with("MSG _INBOX.ping") {
                answers += 1;
                let _ = op.read_line(Duration::from_secs(5));
            }
        }
        if answers == n {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{answers} of 3 servers answered"
        );
    }
    // Revoke the victim with a claims update pushed to n1 only.
    acme.claims
        .nats
        .revocations
        .insert(victim.public_key(), now() + 5);
    let jwt = w.account_jwt(&acme);
    op.send(
        format!(
            "SUB _INBOX.up 2\r\nPUB $SYS.REQ.CLAIMS.UPDATE _INBOX.up {}\r\n{jwt}\r\n",
            jwt.len()
        )
        .as_bytes(),
    );
    // The user on n3 is cut, and n2 refuses it from now on.
    let cut = next_line(&mut on_n3);
    if cut.is_none() {
        for (i, n) in cl.nodes.iter().enumerate() {
            eprintln!("--- n{} log:\n{}", i + 1, n.server.log_text());
        }
    }
    assert_eq!(cut.as_deref(), Some("-ERR 'User Authentication Revoked'"));
    assert!(on_n3.closed_within(Duration::from_secs(5)));
    let mut on_n2 = login(1, &acme, &victim);
    assert_eq!(
        next_line(&mut on_n2).as_deref(),
        Some("-ERR 'Authorization Violation'")
    );
    // Other users of the account still get in everywhere.
    for i in 0..3 {
        let mut ok = login(i, &acme, &KeyPair::generate(Role::User));
        assert_eq!(next_line(&mut ok).as_deref(), Some("PONG"), "n{}", i + 1);
    }
}

/// Payloads `sub` receives until it has been quiet for `quiet`.
async fn drain(sub: &mut async_nats::Subscriber, quiet: Duration) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(quiet, sub.next()).await {
        got.push(String::from_utf8_lossy(&m.payload).into_owned());
    }
    got
}

/// Publishes `tag.0 .. tag.<n-1>` from `p` and flushes.
async fn publish_numbered(p: &async_nats::Client, tag: &str, n: usize) -> Vec<String> {
    let sent: Vec<String> = (0..n).map(|i| format!("{tag}.{i}")).collect();
    for s in &sent {
        p.publish("part.msgs", s.clone().into()).await.unwrap();
    }
    p.flush().await.unwrap();
    sent
}

/// Waits until node `a` has (`up`) or has not a route to node `b`.
async fn wait_route(cl: &TestCluster, a: usize, b: usize, up: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let name = cl.nodes[b].name.clone();
    while cl.peers_of(a).contains(&name) != up {
        assert!(
            std::time::Instant::now() < deadline,
            "n{} route to {name} still {}",
            a + 1,
            if up { "down" } else { "up" }
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_partition_heals_without_duplicate_or_looping_delivery() {
    let Some(hosts) = support::netns::Hosts::new(3) else {
        eprintln!("skipping: network namespaces need root and `ip`");
        return;
    };
    // Routes notice a dead peer after two unanswered 1 s pings.
    let conf = "cluster { ping_interval: \"1s\", ping_max: 2 }";
    let cl = TestCluster::start_on(&hosts, &[Kind::UnderTest; 3], Some(conf));
    cl.wait_full_mesh(MESH);
    let connect = |i: usize| async_nats::connect(cl.url(i));
    let (p, c2, c3) = (
        connect(0).await.unwrap(),
        connect(1).await.unwrap(),
        connect(2).await.unwrap(),
    );
    let mut s2 = subscribe_seen(&c2, &p, "part.msgs", None).await;
    let mut s3 = subscribe_seen(&c3, &p, "part.msgs", None).await;
    let quiet = Duration::from_millis(500);
    let sent = publish_numbered(&p, "before", 100).await;
    assert_eq!(drain(&mut s2, quiet).await, sent);
    assert_eq!(drain(&mut s3, quiet).await, sent);

    // n1 and n3 lose each other; n2 still reaches both.
    hosts.cut(0, 2);
    wait_route(&cl, 0, 2, false).await;
    wait_route(&cl, 2, 0, false).await;
    let sent = publish_numbered(&p, "during", 100).await;
    assert_eq!(drain(&mut s2, quiet).await, sent, "n2 gets each once");
    // One hop: n2 does not relay n1's messages to n3 (nor back), so n3 misses them, as it
    // does behind nats-server, and nothing loops.
    assert_eq!(drain(&mut s3, quiet).await, Vec::<String>::new());

    hosts.heal(0, 2);
    wait_route(&cl, 0, 2, true).await;
    wait_route(&cl, 2, 0, true).await;
    cl.wait_full_mesh(MESH);
    // n3's interest is back on n1 once a probe from n3 answers n1.
    let _probe = subscribe_seen(&c3, &p, "part.probe", None).await;
    let sent = publish_numbered(&p, "after", 200).await;
    assert_eq!(drain(&mut s2, quiet).await, sent, "n2: once each, in order");
    assert_eq!(drain(&mut s3, quiet).await, sent, "n3: once each, in order");
    for (i, n) in cl.nodes.iter().enumerate() {
        assert!(
            !n.server.log_text().contains("panicked"),
            "n{} panicked",
            i + 1
        );
    }
}

#[tokio::test]
async fn routez_lists_the_interest_each_route_holds() {
    let cl = TestCluster::start(&[Kind::UnderTest; 2], None);
    cl.wait_full_mesh(MESH);
    let (c1, c2) = (
        async_nats::connect(cl.url(0)).await.unwrap(),
        async_nats::connect(cl.url(1)).await.unwrap(),
    );
    let _plain = subscribe_seen(&c2, &c1, "rz.plain", None).await;
    let _queued = subscribe_seen(&c2, &c1, "rz.q", Some("g")).await;
    let get = |q: &str| -> Vec<serde_json::Value> {
        let (code, body) = cl.nodes[0].server.http_get(&format!("/routez?subs={q}"));
        assert_eq!(code, 200);
        let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["routes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["remote_name"] == "n2")
            .cloned()
            .collect()
    };
    let subjects: Vec<String> = get("1")
        .iter()
        .flat_map(|r| {
            r["subscriptions_list"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect();
    assert!(subjects.contains(&"rz.plain".to_owned()), "{subjects:?}");
    assert!(subjects.contains(&"rz.q".to_owned()), "{subjects:?}");
    let detail: Vec<serde_json::Value> = get("detail")
        .iter()
        .flat_map(|r| {
            r["subscriptions_list_detail"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    let q = detail
        .iter()
        .find(|d| d["subject"] == "rz.q")
        .unwrap_or_else(|| panic!("{detail:?}"));
    assert_eq!(q["qgroup"], "g");
    assert_eq!(q["sid"], "R $G rz.q g");
}

const PERMISSIONS: &str = r#"
authorization {
  users: [
    { user: pub, password: pub, permissions: { publish: { deny: ["secret.>"] } } }
    { user: sub, password: sub, permissions: { subscribe: { allow: ["probe.>", "secret.>", "_INBOX.>"], deny: ["secret.hidden"] } } }
    { user: all, password: all }
  ]
}
"#;

#[tokio::test]
async fn permissions_hold_on_the_node_the_client_is_on() {
    let cl = TestCluster::start(&[Kind::UnderTest; 2], Some(PERMISSIONS));
    cl.wait_full_mesh(MESH);
    // The subscriber on n2 may subscribe to secret.> but not receive secret.hidden.
    let sub = login(&cl, 1, "sub").await;
    let all = login(&cl, 0, "all").await;
    let mut secret = subscribe_seen(&sub, &all, "secret.>", None).await;
    all.publish("secret.hidden", "no".into()).await.unwrap();
    all.publish("secret.open", "yes".into()).await.unwrap();
    let m = next(&mut secret).await;
    assert_eq!(
        m.subject.as_str(),
        "secret.open",
        "secret.hidden was delivered across the route"
    );
    // The publisher on n1 may not publish to secret.>: nothing reaches n2.
    let (tx, mut errors) = tokio::sync::mpsc::channel(4);
    let publisher = async_nats::ConnectOptions::with_user_and_password("pub".into(), "pub".into())
        .event_callback(move |e| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = e {
                    let _ = tx.send(e.to_string()).await;
                }
            }
        })
        .connect(cl.url(0))
        .await
        .unwrap();
    publisher
        .publish("secret.open", "denied".into())
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), errors.recv())
        .await
        .expect("a permissions error")
        .unwrap();
    assert!(
        err.to_lowercase().contains("permissions violation"),
        "{err}"
    );
    all.publish("secret.open", "after".into()).await.unwrap();
    assert_eq!(
        next(&mut secret).await.payload,
        "after",
        "the denied publish got through"
    );
}

#[tokio::test]
async fn a_server_ping_is_answered_by_every_member_with_its_routes() {
    let conf = "accounts { SYS: { users: [{user: sys, password: sys}] } }\nsystem_account: SYS\n";
    let cl = TestCluster::start(&[Kind::UnderTest; 3], Some(conf));
    cl.wait_full_mesh(MESH);
    let sys = login(&cl, 0, "sys").await;
    let deadline = std::time::Instant::now() + MESH;
    loop {
        let inbox = sys.new_inbox();
        let mut answers = sys.subscribe(inbox.clone()).await.unwrap();
        sys.publish_with_reply("$SYS.REQ.SERVER.PING", inbox, "".into())
            .await
            .unwrap();
        let mut seen = Vec::new();
        while let Ok(Some(m)) =
            tokio::time::timeout(Duration::from_millis(500), answers.next()).await
        {
            seen.push(serde_json::from_slice::<serde_json::Value>(&m.payload).unwrap());
        }
        if seen.len() == 3 {
            for v in &seen {
                let s = &v["statsz"];
                // nats-server counts servers it has heard from on the system account, which
                // lags the routes (1 right after start); sealstream counts its routes.
                let active = s["active_servers"].as_u64().unwrap();
                assert!(cl.is_reference() || active == 3, "{v}");
                let mut peers: Vec<&str> = s["routes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["name"].as_str())
                    .collect();
                peers.sort_unstable();
                peers.dedup();
                assert_eq!(peers.len(), 2, "{v}");
                assert!(
                    !peers.contains(&v["server"]["name"].as_str().unwrap()),
                    "{v}"
                );
                assert!(
                    s["sent"]["msgs"].is_u64() && s["received"]["bytes"].is_u64(),
                    "{v}"
                );
            }
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of 3 servers answered",
            seen.len()
        );
    }
}

/// Node `i`'s route connections by peer name: the `account` each is pinned to ("" for pool
/// members), sorted.
fn connections_of(cl: &TestCluster, i: usize) -> std::collections::BTreeMap<String, Vec<String>> {
    let (code, body) = cl.nodes[i].server.http_get("/routez");
    assert_eq!(code, 200, "{body}");
    let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut by_peer = std::collections::BTreeMap::<String, Vec<String>>::new();
    for r in v["routes"].as_array().unwrap() {
        let peer = r["remote_name"].as_str().unwrap().to_owned();
        let account = r["account"].as_str().unwrap_or("").to_owned();
        by_peer.entry(peer).or_default().push(account);
    }
    for v in by_peer.values_mut() {
        v.sort();
    }
    by_peer
}

/// Waits until every node has `per_peer` connections to each other node.
fn wait_pools(cl: &TestCluster, per_peer: usize) {
    let deadline = std::time::Instant::now() + MESH;
    let n = cl.nodes.len();
    loop {
        let all: Vec<_> = (0..n).map(|i| connections_of(cl, i)).collect();
        if all
            .iter()
            .all(|m| m.len() == n - 1 && m.values().all(|v| v.len() == per_peer))
        {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "pools: {all:?}");
        support::spin_pause(Duration::from_millis(50));
    }
}

/// Account traffic between every pair of nodes: plain subscriptions and request/reply, each
/// message delivered once.
async fn accounts_between_all(cl: &TestCluster, users: &[&str]) {
    let n = cl.nodes.len();
    for user in users {
        for a in 0..n {
            for b in 0..n {
                if a == b {
                    continue;
                }
                let (pubc, subc) = (login(cl, a, user).await, login(cl, b, user).await);
                let subject = format!("pool.{user}.{a}.{b}");
                let mut sub = subscribe_seen(&subc, &pubc, &subject, None).await;
                pubc.publish(subject.clone(), "m".into()).await.unwrap();
                support::sync(&pubc).await;
                assert_eq!(next(&mut sub).await.payload, "m");
                assert!(
                    tokio::time::timeout(Duration::from_millis(200), sub.next())
                        .await
                        .is_err(),
                    "{user} {a}->{b}: one copy"
                );
                let svc = format!("poolsvc.{user}.{a}.{b}");
                let mut reqs = subscribe_seen(&subc, &pubc, &svc, None).await;
                let responder = subc.clone();
                tokio::spawn(async move {
                    if let Some(m) = reqs.next().await {
                        let _ = responder.publish(m.reply.unwrap(), "pong".into()).await;
                        let _ = responder.flush().await;
                    }
                });
                let r = tokio::time::timeout(Duration::from_secs(5), pubc.request(svc, "".into()))
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(r.payload, "pong", "{user} {a}->{b}");
            }
        }
    }
}

const POOLED: &str = r#"
accounts {
  A: { users: [{user: a, password: a}] }
  B: { users: [{user: b, password: b}] }
}
cluster { pool_size: 3, accounts: [A] }
"#;

#[tokio::test]
async fn routes_are_pooled_by_account_with_pinned_accounts() {
    // Per peer: 3 pool members, one for the pinned A and one for the system account.
    let layouts: &[&[Kind]] = if nats_server_binary().is_some() {
        &[
            &[Kind::UnderTest; 3],
            &[Kind::NatsServer, Kind::UnderTest, Kind::UnderTest],
            &[Kind::UnderTest, Kind::NatsServer, Kind::NatsServer],
        ]
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI must provide .venv");
        &[&[Kind::UnderTest; 3]]
    };
    for kinds in layouts {
        let cl = TestCluster::start(kinds, Some(POOLED));
        cl.wait_full_mesh(MESH);
        wait_pools(&cl, 5);
        for i in 0..3 {
            for (peer, accounts) in connections_of(&cl, i) {
                // Pinned names are shown for the system account (ours hides tenants' names
                // from /routez of a multi-tenant server; nats-server shows them).
                assert!(
                    accounts.contains(&"$SYS".to_owned()),
                    "n{} -> {peer}: {accounts:?}",
                    i + 1
                );
                let pool = accounts.iter().filter(|a| a.is_empty()).count();
                assert!(pool >= 3, "n{} -> {peer}: {accounts:?}", i + 1);
            }
        }
        accounts_between_all(&cl, &["a", "b"]).await;
    }
}

#[tokio::test]
async fn unequal_pool_sizes_use_the_larger_and_pool_size_minus_one_is_one_connection() {
    if nats_server_binary().is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must provide .venv");
        eprintln!("skipping: no .venv nats-server");
        return;
    }
    let accounts = "accounts {\n  A: { users: [{user: a, password: a}] }\n  B: { users: [{user: b, password: b}] }\n}\n";
    // nats-server pools 3, the server under test 5: both sides open 5 and the system one.
    let mut cl = TestCluster::start(&[Kind::NatsServer], Some(accounts));
    cl.join(
        Kind::UnderTest,
        Some(&format!("{accounts}cluster {{ pool_size: 5 }}\n")),
    );
    cl.wait_full_mesh(MESH);
    wait_pools(&cl, 6);
    accounts_between_all(&cl, &["a", "b"]).await;
    // No pooling on one side: one connection, every account on it.
    let mut cl = TestCluster::start(&[Kind::NatsServer], Some(accounts));
    cl.join(
        Kind::UnderTest,
        Some(&format!("{accounts}cluster {{ pool_size: -1 }}\n")),
    );
    cl.wait_full_mesh(MESH);
    wait_pools(&cl, 1);
    accounts_between_all(&cl, &["a", "b"]).await;
}

/// The `compression` of each of node `i`'s route connections.
fn compressions_of(cl: &TestCluster, i: usize) -> Vec<String> {
    let (_, body) = cl.nodes[i].server.http_get("/routez");
    let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["compression"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn compressed_routes_carry_every_kind_of_traffic() {
    let accounts = "accounts {\n  A: { users: [{user: a, password: a}] }\n  B: { users: [{user: b, password: b}] }\n}\n";
    let mut layouts = vec![(Kind::UnderTest, "s2_fast", Kind::UnderTest, "accept")];
    if nats_server_binary().is_some() {
        layouts.extend([
            (Kind::NatsServer, "s2_fast", Kind::UnderTest, "accept"),
            (Kind::UnderTest, "s2_best", Kind::NatsServer, "accept"),
            (Kind::NatsServer, "accept", Kind::UnderTest, "s2_better"),
        ]);
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI must provide .venv");
    }
    for (k1, m1, k2, m2) in layouts {
        let mut cl = TestCluster::start(
            &[k1],
            Some(&format!("{accounts}cluster {{ compression: {m1} }}\n")),
        );
        cl.join(
            k2,
            Some(&format!("{accounts}cluster {{ compression: {m2} }}\n")),
        );
        cl.wait_full_mesh(MESH);
        wait_pools(&cl, 4);
        for i in 0..2 {
            let modes = compressions_of(&cl, i);
            assert!(
                modes.iter().all(|m| m.starts_with("s2_")),
                "{m1}/{m2} n{}: {modes:?}",
                i + 1
            );
        }
        accounts_between_all(&cl, &["a", "b"]).await;
        // Large messages (several S2 blocks) with headers, both ways.
        let payload: Bytes = (0..600_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into();
        for (a, b) in [(0, 1), (1, 0)] {
            let (pubc, subc) = (login(&cl, a, "a").await, login(&cl, b, "a").await);
            let mut sub = subscribe_seen(&subc, &pubc, "big.one", None).await;
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("K", "V");
            pubc.publish_with_headers("big.one", headers, payload.clone())
                .await
                .unwrap();
            support::sync(&pubc).await;
            let m = next(&mut sub).await;
            assert_eq!(m.payload, payload, "{m1}/{m2} {a}->{b}");
            assert_eq!(m.headers.unwrap().get("K").unwrap().as_str(), "V");
        }
    }
}
