//! Mirrors, sources and subject transforms, as clients see them: the config checks and their
//! exact errors, what a mirror and a sourcing stream store (sequences, subjects, the
//! `Nats-Stream-Source` header), what stream info reports, mirror promotion, and copying that
//! resumes after a kill -9 without a duplicate. Runs against nats-server too
//! (`SEALSTREAM_TEST_SERVER`), which copies asynchronously as well: every wait polls to a
//! deadline.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::{Duration, Instant};

use async_nats::Client;
use serde_json::Value;
use support::js::{api, api_err, api_ok, assert_error, b64, create_stream, publish_seq};
use support::TestServer;

async fn client(s: &TestServer) -> Client {
    async_nats::connect(s.url()).await.expect("connect")
}

/// Stream info once `ready` holds for it (polled), or the last info after `limit`.
async fn info_when(
    c: &Client,
    name: &str,
    limit: Duration,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let v = api_ok(c, &format!("STREAM.INFO.{name}"), "").await;
        if ready(&v) || Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn messages_when(c: &Client, name: &str, n: u64) -> Value {
    let v = info_when(c, name, Duration::from_secs(10), |v| {
        v["state"]["messages"].as_u64() == Some(n)
    })
    .await;
    assert_eq!(v["state"]["messages"], n, "{name}: {v}");
    v
}

/// `STREAM.MSG.GET` by sequence: `(subject, payload, headers)`.
async fn get(c: &Client, stream: &str, seq: u64) -> (String, String, String) {
    let v = api_ok(
        c,
        &format!("STREAM.MSG.GET.{stream}"),
        &format!(r#"{{"seq":{seq}}}"#),
    )
    .await;
    let m = &v["message"];
    let text = |k: &str| String::from_utf8(b64(m[k].as_str().unwrap_or(""))).unwrap();
    (
        m["subject"].as_str().unwrap().to_owned(),
        text("data"),
        text("hdrs"),
    )
}

async fn origin(c: &Client, n: usize) {
    create_stream(c, r#"{"name":"O","subjects":["o.>"]}"#).await;
    for i in 0..n {
        publish_seq(c, &format!("o.{i}"), &format!("m{i}")).await;
    }
}

#[tokio::test]
async fn mirror_and_source_configs_are_checked_as_nats_server_does() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    origin(&c, 0).await;
    let cases: &[(&str, u64, u64, &str)] = &[
        (
            r#"{"name":"X","subjects":["x"],"mirror":{"name":"O"}}"#,
            400,
            10034,
            "stream mirrors can not contain subjects",
        ),
        (
            r#"{"name":"X","mirror":{"name":"O"},"sources":[{"name":"O"}]}"#,
            400,
            10031,
            "stream mirrors can not also contain other sources",
        ),
        (
            r#"{"name":"X","mirror":{"name":"O"},"first_seq":5}"#,
            400,
            10143,
            "stream mirrors can not have first sequence configured",
        ),
        (
            r#"{"name":"X","mirror":{"name":""}}"#,
            400,
            10142,
            "mirrored stream name is invalid",
        ),
        (
            r#"{"name":"X","mirror":{"name":"a b"}}"#,
            400,
            10142,
            "mirrored stream name is invalid",
        ),
        (
            r#"{"name":"X","mirror":{"name":"X"}}"#,
            500,
            10052,
            "detected cycle",
        ),
        (
            r#"{"name":"X","mirror":{"name":"O","filter_subject":"o.1","subject_transforms":[{"src":"o.1","dest":"z"}]}}"#,
            400,
            10150,
            "mirror with multiple subject transforms cannot also have a single subject filter",
        ),
        (
            r#"{"name":"X","mirror":{"name":"O","filter_subject":"a..b"}}"#,
            500,
            10049,
            "subject filter 'a..b' for the mirror invalid subject",
        ),
        (
            r#"{"name":"X","sources":[{"name":"a.b"}]}"#,
            400,
            10141,
            "sourced stream name is invalid",
        ),
        (
            r#"{"name":"X","sources":[{"name":"X"}]}"#,
            500,
            10052,
            "detected cycle",
        ),
        (
            r#"{"name":"X","sources":[{"name":"O"},{"name":"O"}]}"#,
            400,
            10140,
            "duplicate source configuration detected",
        ),
        (
            r#"{"name":"X","sources":[{"name":"O","filter_subject":"o.1","subject_transforms":[{"src":"o.1","dest":"z"}]}]}"#,
            400,
            10144,
            "source with multiple subject transforms cannot also have a single subject filter",
        ),
        (
            r#"{"name":"X","sources":[{"name":"O","subject_transforms":[{"src":"o.*","dest":"z.$3"}]}]}"#,
            400,
            10146,
            "source transform: invalid mapping destination: wildcard index out of range in $3: [3]",
        ),
        (
            r#"{"name":"X","sources":[{"name":"O","subject_transforms":[{"src":"o.*","dest":"z.>"}]}]}"#,
            400,
            10146,
            "source transform: invalid subject",
        ),
        (
            r#"{"name":"X","sources":[{"name":"O","subject_transforms":[{"src":"o.>","dest":"z.>"},{"src":"o.1","dest":"q"}]}]}"#,
            400,
            10147,
            "source filters can not overlap",
        ),
        (
            r#"{"name":"X","sources":[{"name":"O","filter_subject":"a..b"}]}"#,
            500,
            10049,
            "subject filter 'a..b' for the source: invalid subject",
        ),
        (
            r#"{"name":"X","mirror_direct":true}"#,
            500,
            10052,
            "stream has no mirror but does have mirror direct",
        ),
        (
            r#"{"name":"X","mirror":{"name":"O","external":{"api":"$JS.API"}}}"#,
            400,
            10021,
            "stream external api prefix $JS.API must not overlap with $JS.API",
        ),
        (
            r#"{"name":"X","subjects":["a.*"],"subject_transform":{"src":"a.*","dest":"b.$2"}}"#,
            400,
            10156,
            "stream transform: invalid mapping destination: wildcard index out of range in $2: [2]",
        ),
    ];
    for (body, code, err, text) in cases {
        let got = api_err(&c, "STREAM.CREATE.X", body, *code, *err).await;
        assert_eq!(got, *text, "{body}");
    }
    // The echo: a mirror has no subjects and no duplicate window; sources keep theirs.
    let v = create_stream(
        &c,
        r#"{"name":"M","mirror":{"name":"O","opt_start_seq":2}}"#,
    )
    .await;
    let cfg = &v["config"];
    assert_eq!(
        cfg["mirror"],
        serde_json::json!({"name":"O","opt_start_seq":2}),
        "{v}"
    );
    assert!(
        cfg.get("subjects").is_none() && cfg.get("duplicate_window").is_none(),
        "{v}"
    );
    let v = create_stream(
        &c,
        r#"{"name":"S","subjects":["s"],"sources":[{"name":"O","filter_subject":"o.1"},{"name":"O","subject_transforms":[{"src":"o.2","dest":"t.2"}]}],"subject_transform":{"src":"s","dest":"t.s"}}"#,
    )
    .await;
    let cfg = &v["config"];
    assert_eq!(cfg["subjects"], serde_json::json!(["s"]), "{v}");
    assert_eq!(
        cfg["sources"][0],
        serde_json::json!({"name":"O","filter_subject":"o.1"})
    );
    assert_eq!(cfg["sources"][1]["subject_transforms"][0]["dest"], "t.2");
    assert_eq!(
        cfg["subject_transform"],
        serde_json::json!({"src":"s","dest":"t.s"})
    );
    // The mirror may be dropped, never changed or added.
    let changed = r#"{"name":"M","mirror":{"name":"O","opt_start_seq":3}}"#;
    let d = api_err(&c, "STREAM.UPDATE.M", changed, 400, 10055).await;
    assert_eq!(d, "stream mirror configuration can not be updated");
    let added = r#"{"name":"O","subjects":["o.>"],"mirror":{"name":"S"}}"#;
    let v = api(&c, "STREAM.UPDATE.O", added).await;
    assert!(v.get("error").is_some(), "{v}");
}

#[tokio::test]
async fn a_mirror_keeps_its_origins_sequences_times_and_headers() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    origin(&c, 3).await;
    create_stream(
        &c,
        r#"{"name":"M","mirror":{"name":"O","opt_start_seq":2}}"#,
    )
    .await;
    let v = messages_when(&c, "M", 2).await;
    assert_eq!(v["state"]["first_seq"], 2, "{v}");
    assert_eq!(v["state"]["last_seq"], 3, "{v}");
    assert_eq!(v["mirror"]["name"], "O", "{v}");
    assert_eq!(v["mirror"]["lag"], 0, "{v}");
    let (subject, data, hdrs) = get(&c, "M", 2).await;
    assert_eq!(
        (subject.as_str(), data.as_str(), hdrs.as_str()),
        ("o.1", "m1", "")
    );
    let o = api_ok(&c, "STREAM.MSG.GET.O", r#"{"seq":2}"#).await;
    let m = api_ok(&c, "STREAM.MSG.GET.M", r#"{"seq":2}"#).await;
    assert_eq!(
        m["message"]["time"], o["message"]["time"],
        "the origin's timestamp"
    );
    // Later publishes follow, and a mirror with a transform renames them.
    publish_seq(&c, "o.9", "late").await;
    let v = messages_when(&c, "M", 3).await;
    assert_eq!(v["state"]["last_seq"], 4, "{v}");
    create_stream(
        &c,
        r#"{"name":"MT","mirror":{"name":"O","subject_transforms":[{"src":"o.*","dest":"m.$1"}]}}"#,
    )
    .await;
    messages_when(&c, "MT", 4).await;
    assert_eq!(get(&c, "MT", 4).await.0, "m.9");
}

#[tokio::test]
async fn sources_copy_filtered_and_renamed_subjects_and_say_where_from() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    origin(&c, 3).await;
    create_stream(&c, r#"{"name":"P","subjects":["p"]}"#).await;
    publish_seq(&c, "p", "p1").await;
    create_stream(
        &c,
        r#"{"name":"S","subjects":["s"],"sources":[{"name":"O","filter_subject":"o.1"},{"name":"O","subject_transforms":[{"src":"o.2","dest":"t.2"}]},{"name":"P"}]}"#,
    )
    .await;
    publish_seq(&c, "s", "own").await;
    let v = messages_when(&c, "S", 4).await;
    let mut found = Vec::new();
    for seq in 1..=v["state"]["last_seq"].as_u64().unwrap() {
        let (subject, data, hdrs) = get(&c, "S", seq).await;
        let source = hdrs
            .lines()
            .find_map(|l| l.strip_prefix("Nats-Stream-Source: "))
            .map(|v| v.split(' ').take(5).collect::<Vec<_>>().join(" "));
        found.push((subject, data, source));
    }
    found.sort();
    let want =
        |s: &str, d: &str, src: Option<&str>| (s.to_owned(), d.to_owned(), src.map(str::to_owned));
    assert_eq!(
        found,
        vec![
            want("o.1", "m1", Some("O 2 o.1 > o.1")),
            want("p", "p1", Some("P 1 > > p")),
            want("s", "own", None),
            want("t.2", "m2", Some("O 3 o.2 t.2 o.2")),
        ]
    );
    let sources = v["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 3, "{v}");
    assert!(
        sources
            .iter()
            .all(|x| x["lag"] == 0 && x.get("error").is_none()),
        "{v}"
    );
    // Stream transform: what is published is stored renamed.
    create_stream(&c, r#"{"name":"T","subjects":["data.*"],"subject_transform":{"src":"data.>","dest":"transformed.>"}}"#).await;
    publish_seq(&c, "data.x", "d").await;
    assert_eq!(get(&c, "T", 1).await.0, "transformed.x");
}

#[tokio::test]
async fn a_missing_origin_is_reported_in_the_stream_info() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    create_stream(&c, r#"{"name":"M","mirror":{"name":"LATER"}}"#).await;
    let v = info_when(&c, "M", Duration::from_secs(10), |v| {
        v["mirror"].get("error").is_some()
    })
    .await;
    assert_error(&v["mirror"], 404, 10059);
    assert_eq!(v["mirror"]["active"], -1, "{v}");
    if s.is_reference() {
        // nats-server looks for a missing origin again only every ~10 s or more.
        return;
    }
    create_stream(&c, r#"{"name":"LATER","subjects":["later"]}"#).await;
    publish_seq(&c, "later", "x").await;
    let v = messages_when(&c, "M", 1).await;
    assert!(v["mirror"].get("error").is_none(), "{v}");
}

#[tokio::test]
async fn a_promoted_mirror_keeps_its_messages_and_takes_publishes() {
    let s = TestServer::start_js();
    let c = client(&s).await;
    origin(&c, 5).await;
    create_stream(&c, r#"{"name":"M","mirror":{"name":"O"}}"#).await;
    messages_when(&c, "M", 5).await;
    let v = api_ok(&c, "STREAM.UPDATE.M", r#"{"name":"M"}"#).await;
    assert!(v["config"].get("mirror").is_none(), "{v}");
    assert_eq!(v["config"]["subjects"], serde_json::json!(["M"]), "{v}");
    assert_eq!(v["config"]["duplicate_window"], 120_000_000_000u64, "{v}");
    assert_eq!(v["state"]["messages"], 5, "{v}");
    assert_eq!(publish_seq(&c, "M", "own").await, 6);
    publish_seq(&c, "o.7", "not copied").await;
    let v = api_ok(&c, "STREAM.INFO.M", "").await;
    assert_eq!(v["state"]["messages"], 6, "{v}");
}

#[tokio::test]
async fn copying_resumes_after_a_kill_without_duplicates_or_gaps() {
    let mut s = TestServer::start_js();
    let c = client(&s).await;
    origin(&c, 3).await;
    create_stream(&c, r#"{"name":"M","mirror":{"name":"O"}}"#).await;
    create_stream(&c, r#"{"name":"S","sources":[{"name":"O"}]}"#).await;
    messages_when(&c, "M", 3).await;
    messages_when(&c, "S", 3).await;
    drop(c);
    s.restart(false);
    let c = client(&s).await;
    for i in 3..6 {
        publish_seq(&c, &format!("o.{i}"), &format!("m{i}")).await;
    }
    let m = messages_when(&c, "M", 6).await;
    assert_eq!(m["state"]["last_seq"], 6, "{m}");
    let v = messages_when(&c, "S", 6).await;
    assert_eq!(v["state"]["last_seq"], 6, "{v}");
    for seq in 1..=6u64 {
        let (_, data, _) = get(&c, "S", seq).await;
        assert_eq!(data, format!("m{}", seq - 1));
    }
}

/// B exports its JetStream API (and, for nats-server's push consumers, a deliver prefix and
/// flow control); A imports the API under `JS.B.API`.
const TWO_ACCOUNTS: &str = r#"
accounts {
  B: {
    jetstream: enabled
    users: [{user: b, password: b}]
    exports: [
      {service: "$JS.API.>"}
      {service: "$JS.FC.>"}
      {stream: "deliver.B.>"}
    ]
  }
  A: {
    jetstream: enabled
    users: [{user: a, password: a}]
    imports: [
      {service: {account: B, subject: "$JS.API.>"}, to: "JS.B.API.>"}
      {service: {account: B, subject: "$JS.FC.>"}}
      {stream: {account: B, subject: "deliver.B.>"}}
    ]
  }
}
"#;

async fn user(s: &TestServer, name: &str) -> Client {
    async_nats::ConnectOptions::with_user_and_password(name.into(), name.into())
        .connect(s.url())
        .await
        .expect("connect")
}

#[tokio::test]
async fn a_mirror_and_a_source_copy_from_another_account_through_its_imported_api() {
    let s = TestServer::start_js_with(&[], Some(TWO_ACCOUNTS));
    let b = user(&s, "b").await;
    let a = user(&s, "a").await;
    create_stream(&b, r#"{"name":"ORDERS","subjects":["orders.>"]}"#).await;
    publish_seq(&b, "orders.1", "one").await;
    publish_seq(&b, "orders.2", "two").await;
    let ext = r#"{"api":"JS.B.API","deliver":"deliver.B"}"#;
    create_stream(
        &a,
        &format!(r#"{{"name":"AM","mirror":{{"name":"ORDERS","external":{ext}}}}}"#),
    )
    .await;
    create_stream(
        &a,
        &format!(r#"{{"name":"AS","sources":[{{"name":"ORDERS","external":{ext}}}]}}"#),
    )
    .await;
    let v = messages_when(&a, "AM", 2).await;
    assert_eq!(v["mirror"]["external"]["api"], "JS.B.API", "{v}");
    messages_when(&a, "AS", 2).await;
    assert_eq!(get(&a, "AM", 2).await.1, "two");
    publish_seq(&b, "orders.3", "three").await;
    messages_when(&a, "AM", 3).await;
    messages_when(&a, "AS", 3).await;
    // B's names are not A's: without the import there is nothing to copy.
    assert!(api(&a, "STREAM.INFO.ORDERS", "")
        .await
        .get("error")
        .is_some());
    if s.is_reference() {
        return; // nats-server reports no error for an unknown prefix; it just waits.
    }
    create_stream(
        &a,
        r#"{"name":"AX","mirror":{"name":"ORDERS","external":{"api":"JS.C.API"}}}"#,
    )
    .await;
    let v = info_when(&a, "AX", Duration::from_secs(10), |v| {
        v["mirror"].get("error").is_some()
    })
    .await;
    assert_error(&v["mirror"], 500, 10052);
    assert_eq!(v["state"]["messages"], 0, "{v}");
}
