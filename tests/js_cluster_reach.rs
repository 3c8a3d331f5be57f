//! Clients connected to a server that keeps no copy of a stream (issue 15): in a NATS cluster
//! every client reaches every stream, whichever server it is connected to. A three-node
//! cluster with an R2 stream (one server without a replica) and an R1 stream (two without):
//! publishes with PubAcks, stream and consumer info, pull consumers with acks, an ordered push
//! consumer, and a key-value bucket, all from a server without the stream. Core subscribers on
//! every server watch the stream's subjects meanwhile, and no message is stored twice.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv, stream};
use bytes::Bytes;
use futures::StreamExt;
use support::cluster::TestCluster;

async fn connect(cl: &TestCluster, i: usize) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .request_timeout(Some(Duration::from_secs(4)))
        .connect(cl.url(i))
        .await
        .unwrap()
}

/// Creates `cfg` from `js`, retrying while the cluster is still forming.
async fn create(js: &jetstream::Context, cfg: stream::Config) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match js.create_stream(cfg.clone()).await {
            Ok(_) => return,
            Err(e) => {
                assert!(Instant::now() < deadline, "no stream {}: {e}", cfg.name);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The servers holding `name`, as its info from `js` names them (leader first).
async fn replicas(js: &jetstream::Context, name: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut s) = js.get_stream(name).await {
            if let Ok(info) = s.info().await {
                if let Some(c) = info.cluster.clone() {
                    if let Some(leader) = c.leader {
                        let mut v = vec![leader];
                        v.extend(c.replicas.iter().map(|r| r.name.clone()));
                        return v;
                    }
                }
            }
        }
        assert!(Instant::now() < deadline, "{name} has no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes `subject` from `js` until a PubAck comes (the stream's interest reaches this
/// server a moment after the create); the acked sequence.
async fn publish_acked(js: &jetstream::Context, subject: &str, payload: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", payload);
        if let Ok(ack) = js
            .publish_with_headers(subject.to_owned(), headers, Bytes::from(payload.to_owned()))
            .await
        {
            match tokio::time::timeout(Duration::from_secs(4), ack).await {
                Ok(Ok(a)) => return a.sequence,
                Ok(Err(e)) => eprintln!("{subject}: {e}"),
                Err(_) => eprintln!("{subject}: no PubAck"),
            }
        }
        assert!(Instant::now() < deadline, "{payload} never acknowledged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the whole walk against stream `name` (subjects `<prefix>.>`) from `js`, a client on
/// a server that keeps no copy of it.
async fn use_from_elsewhere(js: &jetstream::Context, name: &str, prefix: &str) {
    const N: u64 = 30;
    for i in 1..=N {
        let seq = publish_acked(js, &format!("{prefix}.{i}"), &format!("{name}-msg-{i}")).await;
        assert_eq!(seq, i, "{name}: publish {i} got sequence {seq}");
    }
    let mut s = js.get_stream(name).await.unwrap();
    let info = s.info().await.unwrap();
    assert_eq!(info.state.messages, N, "{name}: {:?}", info.state);
    assert_eq!(info.state.last_sequence, N);
    let m = s.get_raw_message(7).await.unwrap();
    assert_eq!(m.subject.as_str(), format!("{prefix}.7"));
    assert_eq!(&m.payload[..], format!("{name}-msg-7").as_bytes());

    // A durable pull consumer: every message once, with its own subject; acks count.
    let pull = s
        .create_consumer(consumer::pull::Config {
            durable_name: Some("WORKER".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut got = 0;
    let mut batch = pull
        .fetch()
        .max_messages(N as usize)
        .expires(Duration::from_secs(3))
        .messages()
        .await
        .unwrap();
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        got += 1;
        assert_eq!(m.subject.as_str(), format!("{prefix}.{got}"));
        m.double_ack().await.unwrap();
    }
    assert_eq!(got, N, "{name}: the pull consumer delivered {got}");
    let mut pull = s
        .get_consumer::<consumer::pull::Config>("WORKER")
        .await
        .unwrap();
    let ci = pull.info().await.unwrap();
    assert_eq!(ci.ack_floor.stream_sequence, N, "{name}: {ci:?}");
    assert_eq!(ci.num_ack_pending, 0);

    // An ordered push consumer (its deliver subject's subscriber is on this server).
    let ordered = s
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: format!("_INBOX.reach.{name}"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = ordered.messages().await.unwrap();
    for i in 1..=N {
        let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
            .await
            .unwrap_or_else(|_| panic!("{name}: push message {i} never came"))
            .unwrap()
            .unwrap();
        assert_eq!(m.subject.as_str(), format!("{prefix}.{i}"));
        assert_eq!(m.info().unwrap().stream_sequence, i);
    }
}

/// A three-server JetStream cluster, a client on each server and its JetStream context.
async fn three_servers() -> (
    TestCluster,
    Vec<async_nats::Client>,
    Vec<jetstream::Context>,
) {
    let cl = TestCluster::start_js(3);
    cl.wait_full_mesh(Duration::from_secs(10));
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(connect(&cl, i).await);
    }
    let js = clients.iter().map(|c| jetstream::new(c.clone())).collect();
    (cl, clients, js)
}

/// The index of a server that is not among `holders`.
fn outside(cl: &TestCluster, holders: &[String]) -> usize {
    cl.nodes
        .iter()
        .position(|n| !holders.contains(&n.name))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_a_server_without_the_stream_uses_it_fully() {
    let (cl, clients, js) = three_servers().await;

    // Core subscribers on every server watch both streams' subjects all along: a message
    // that crosses a route to one of them must not be stored again by a replica there.
    let mut watchers = Vec::new();
    for c in &clients {
        watchers.push(c.subscribe("rep.>").await.unwrap());
        watchers.push(c.subscribe("single.>").await.unwrap());
    }
    for c in &clients {
        c.flush().await.unwrap();
    }

    // R2, created from n1: one server keeps no replica.
    create(
        &js[0],
        stream::Config {
            name: "REP".into(),
            subjects: vec!["rep.>".into()],
            num_replicas: 2,
            ..Default::default()
        },
    )
    .await;
    let holders = replicas(&js[0], "REP").await;
    assert_eq!(holders.len(), 2, "{holders:?}");
    let outside = outside(&cl, &holders);
    use_from_elsewhere(&js[outside], "REP", "rep").await;

    // R1 on n1, used from n2.
    create(
        &js[0],
        stream::Config {
            name: "SINGLE".into(),
            subjects: vec!["single.>".into()],
            ..Default::default()
        },
    )
    .await;
    use_from_elsewhere(&js[1], "SINGLE", "single").await;

    // Every watcher saw each message once; the streams hold each once (sequences 1..=30
    // were checked as they were acked, and the counts here are exact).
    for w in &mut watchers {
        let mut seen = 0;
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), w.next()).await {
            seen += 1;
        }
        assert_eq!(seen, 30);
    }
    for (i, j) in js.iter().enumerate() {
        for name in ["REP", "SINGLE"] {
            let info = j
                .get_stream(name)
                .await
                .unwrap()
                .info()
                .await
                .unwrap()
                .clone();
            assert_eq!(info.state.messages, 30, "{name} from n{}", i + 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_value_bucket_works_from_a_server_without_a_replica() {
    let (cl, _clients, js) = three_servers().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = js[0]
            .create_key_value(kv::Config {
                bucket: "CFG".into(),
                history: 5,
                num_replicas: 2,
                ..Default::default()
            })
            .await;
        match r {
            Ok(_) => break,
            Err(e) => {
                assert!(Instant::now() < deadline, "no bucket: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let holders = replicas(&js[0], "KV_CFG").await;
    let outside = outside(&cl, &holders);
    let kv = js[outside].get_key_value("CFG").await.unwrap();
    let mut watch = kv.watch("app.>").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        match kv.put("app.mode", Bytes::from_static(b"blue")).await {
            Ok(r) => break r,
            Err(e) => {
                assert!(Instant::now() < deadline, "no put: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let second = kv
        .update("app.mode", Bytes::from_static(b"green"), first)
        .await
        .unwrap();
    assert!(second > first);
    // An update at a stale revision is refused, as on any server.
    assert!(kv
        .update("app.mode", Bytes::from_static(b"red"), first)
        .await
        .is_err());
    let e = kv.entry("app.mode").await.unwrap().unwrap();
    assert_eq!(&e.value[..], b"green");
    assert_eq!(e.revision, second);
    let mut history = kv.history("app.mode").await.unwrap();
    let mut values = Vec::new();
    while let Some(h) = history.next().await {
        values.push(h.unwrap().value);
    }
    assert_eq!(
        values,
        vec![Bytes::from_static(b"blue"), Bytes::from_static(b"green")]
    );
    for want in [&b"blue"[..], b"green"] {
        let w = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(w.key, "app.mode");
        assert_eq!(&w.value[..], want);
    }
}

/// A create's answer as JSON.
async fn raw_create(c: &async_nats::Client, body: serde_json::Value) -> serde_json::Value {
    let name = body["name"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c
            .request(
                format!("$JS.API.STREAM.CREATE.{name}"),
                Bytes::from(body.to_string()),
            )
            .await;
        // No answer or 10008: the meta group is still forming.
        if let Ok(r) = r {
            let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
            if v["error"]["err_code"] != 10008 {
                return v;
            }
        }
        assert!(Instant::now() < deadline, "no answer to creating {name}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// [`raw_create`] of a stream whose placement the cluster can meet, asked again while the
/// answer is `10005`: right after the mesh forms, the meta leader may not count every peer (or
/// know its tags) yet, and refuses as it would for a placement nobody meets (CI once: "tags
/// not matched ['disk:ssd']" on the first create). A later refusal in the same test is then a
/// real one.
async fn raw_create_placed(c: &async_nats::Client, body: serde_json::Value) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = raw_create(c, body.clone()).await;
        if v["error"]["err_code"] != 10005 || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_is_honoured_or_the_stream_is_refused() {
    let cl = TestCluster::start_js(3);
    cl.wait_full_mesh(Duration::from_secs(10));
    let c = connect(&cl, 0).await;
    let refusals = [
        (
            serde_json::json!({"name": "P1", "num_replicas": 2, "placement": {"cluster": "NOPE"}}),
            400,
            10005,
            "no suitable peers for placement",
        ),
        (
            serde_json::json!({"name": "P2", "num_replicas": 2, "placement": {"tags": ["ssd"]}}),
            400,
            10005,
            "no suitable peers for placement, tags not matched ['ssd']",
        ),
        (
            serde_json::json!({"name": "P3", "placement": {"tags": ["ssd"]}}),
            400,
            10005,
            "no suitable peers for placement, tags not matched ['ssd']",
        ),
        (
            serde_json::json!({"name": "P4", "num_replicas": 2, "placement": {"preferred": "n1"}}),
            500,
            10052,
            "preferred server not permitted in placement",
        ),
    ];
    for (body, code, err_code, description) in refusals {
        let v = raw_create(&c, body.clone()).await;
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        assert_eq!(v["error"]["err_code"], err_code, "{body}: {v}");
        assert_eq!(v["error"]["description"], description, "{body}: {v}");
    }
    // This cluster's own name is a placement every server meets.
    let ok = raw_create(
        &c,
        serde_json::json!({"name": "P5", "num_replicas": 2, "placement": {"cluster": "C1"}}),
    )
    .await;
    assert!(ok["error"].is_null(), "{ok}");
    assert_eq!(ok["config"]["placement"]["cluster"], "C1", "{ok}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_go_to_the_servers_carrying_the_placement_tags() {
    let cl = TestCluster::start_js_each(&[
        Some("server_tags: [\"disk:ssd\", \"az:1\"]\n"),
        Some("server_tags: [\"disk:ssd\", \"az:2\"]\n"),
        Some("server_tags: [\"disk:hdd\", \"az:3\"]\n"),
    ]);
    cl.wait_full_mesh(Duration::from_secs(10));
    let c = connect(&cl, 2).await;
    // Created from n3, which does not carry disk:ssd: the replicas go to n1 and n2.
    let ok = raw_create_placed(
        &c,
        serde_json::json!({"name": "FAST", "subjects": ["fast.>"], "num_replicas": 2,
            "placement": {"tags": ["disk:ssd"]}}),
    )
    .await;
    assert!(ok["error"].is_null(), "{ok}");
    assert_eq!(ok["config"]["placement"]["tags"][0], "disk:ssd", "{ok}");
    let js = jetstream::new(c.clone());
    let mut holders = replicas(&js, "FAST").await;
    holders.sort();
    assert_eq!(holders, ["n1", "n2"]);
    // Tags are matched whole and all of them: only one server has both.
    let v = raw_create(
        &c,
        serde_json::json!({"name": "AZ", "num_replicas": 2,
            "placement": {"tags": ["disk:ssd", "az:2"]}}),
    )
    .await;
    assert_eq!(v["error"]["err_code"], 10005, "{v}");
    // nats-server names the tags in no fixed order (sealstream sorts them).
    let text = v["error"]["description"].as_str().unwrap();
    assert!(
        [
            "no suitable peers for placement, tags not matched ['az:2', 'disk:ssd']",
            "no suitable peers for placement, tags not matched ['disk:ssd', 'az:2']",
        ]
        .contains(&text),
        "{v}"
    );
    // Three replicas on disk:ssd: only two servers carry it.
    let v = raw_create(
        &c,
        serde_json::json!({"name": "WIDE", "num_replicas": 3, "placement": {"tags": ["disk:ssd"]}}),
    )
    .await;
    assert_eq!(v["error"]["err_code"], 10005, "{v}");
    // And the stream stays usable from the server that holds no replica.
    let seq = publish_acked(&js, "fast.1", "fast-msg-1").await;
    assert_eq!(seq, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_tag_spreads_replicas_over_its_values() {
    let conf = |az: &str| format!("server_tags: [\"az:{az}\"]\njetstream {{ unique_tag: az }}\n");
    let (a, b, c3) = (conf("1"), conf("1"), conf("2"));
    let cl = TestCluster::start_js_each(&[Some(&a), Some(&b), Some(&c3)]);
    cl.wait_full_mesh(Duration::from_secs(10));
    let c = connect(&cl, 0).await;
    let ok = raw_create_placed(
        &c,
        serde_json::json!({"name": "SPREAD", "subjects": ["spread.>"], "num_replicas": 2}),
    )
    .await;
    assert!(ok["error"].is_null(), "{ok}");
    let js = jetstream::new(c.clone());
    let holders = replicas(&js, "SPREAD").await;
    // One replica in az:1 (n1 or n2), the other in az:2 (n3).
    assert!(holders.contains(&"n3".to_owned()), "{holders:?}");
    assert_eq!(holders.len(), 2, "{holders:?}");
    // Two values of az: three replicas cannot all differ.
    let v = raw_create(
        &c,
        serde_json::json!({"name": "TOO_WIDE", "num_replicas": 3}),
    )
    .await;
    assert_eq!(v["error"]["err_code"], 10005, "{v}");
}

/// A request's answer as JSON (no answer: `null`): a JetStream API call, or a publish to a
/// stream (its PubAck).
async fn api_call(c: &async_nats::Client, subject: &str, body: &str) -> serde_json::Value {
    match c
        .request(subject.to_owned(), Bytes::from(body.to_owned()))
        .await
    {
        Ok(r) => serde_json::from_slice(&r.payload).unwrap(),
        Err(_) => serde_json::Value::Null,
    }
}

/// `STREAM.NAMES` on the server of `c`, with an optional subject filter, once it equals
/// `want` (the meta table reaches every server a moment after a change), or the last answer.
async fn names_on(c: &async_nats::Client, subject: Option<&str>, want: &[&str]) -> Vec<String> {
    let body = subject.map_or(String::new(), |s| {
        serde_json::json!({ "subject": s }).to_string()
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = api_call(c, "$JS.API.STREAM.NAMES", &body).await;
        let names: Vec<String> = v["streams"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if names == want || Instant::now() > deadline {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_r1_stream_name_and_its_subjects_are_the_clusters() {
    let (_cl, clients, _js) = three_servers().await;
    // An R1 stream, created through the first server.
    let created = raw_create(
        &clients[0],
        serde_json::json!({"name": "SOLO", "subjects": ["solo.>"]}),
    )
    .await;
    assert!(created["error"].is_null(), "{created}");
    for c in &clients {
        // Every server names it, and finds it by subject (how clients look a stream up).
        assert_eq!(names_on(c, None, &["SOLO"]).await, ["SOLO"]);
        assert_eq!(names_on(c, Some("solo.x"), &["SOLO"]).await, ["SOLO"]);
        assert_eq!(
            names_on(c, Some("other.x"), &[]).await,
            Vec::<String>::new()
        );
        let info = api_call(c, "$JS.API.INFO", "").await;
        assert_eq!(info["streams"], 1, "{info}");
    }
    // Every server lists it with its state, gathered from the server that holds it.
    for (k, c) in clients.iter().take(2).enumerate() {
        let ack = api_call(c, &format!("solo.{k}"), "x").await;
        assert_eq!(ack["stream"], "SOLO", "{ack}");
    }
    for c in &clients {
        let list = api_call(c, "$JS.API.STREAM.LIST", "").await;
        assert_eq!(list["total"], 1, "{list}");
        assert_eq!(list["streams"][0]["config"]["name"], "SOLO", "{list}");
        assert_eq!(list["streams"][0]["state"]["messages"], 2, "{list}");
        assert!(list["missing"].is_null(), "{list}");
    }
    // The same name with another config, or another name on the same subjects, is refused
    // through any server.
    for c in &clients[1..] {
        let again = api_call(
            c,
            "$JS.API.STREAM.CREATE.SOLO",
            r#"{"name":"SOLO","subjects":["elsewhere.>"]}"#,
        )
        .await;
        assert_eq!(again["error"]["err_code"], 10058, "{again}");
        let overlap = api_call(
            c,
            "$JS.API.STREAM.CREATE.SOLO2",
            r#"{"name":"SOLO2","subjects":["solo.x"]}"#,
        )
        .await;
        assert_eq!(overlap["error"]["err_code"], 10065, "{overlap}");
    }
    // Deleted (through another server): the name is free again everywhere.
    let deleted = api_call(&clients[2], "$JS.API.STREAM.DELETE.SOLO", "").await;
    assert_eq!(deleted["success"], true, "{deleted}");
    for c in &clients {
        assert_eq!(names_on(c, None, &[]).await, Vec::<String>::new());
    }
    let reused = raw_create(
        &clients[1],
        serde_json::json!({"name": "SOLO", "subjects": ["elsewhere.>"]}),
    )
    .await;
    assert!(reused["error"].is_null(), "{reused}");
}
