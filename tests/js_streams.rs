//! JetStream streams, black-box: the `$JS.API` JSON endpoints for account info and stream
//! CRUD (create/update/info/names/list/delete/purge), the message get/delete and direct-get
//! endpoints, publishing into streams (pub-acks, de-duplication, `Nats-Expected-*` checks,
//! rollups) and stream limits (message/byte/per-subject caps, discard policies, message size,
//! age, sealed and deny flags). Expectations are the exact codes of
//! `/work/shared/spec/jetstream-api.md`, checked against nats-server 2.15
//! (`SEALSTREAM_TEST_SERVER=/path/to/nats-server`).
//!
//! Each test starts its own JetStream server, so stream names never collide.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;
use support::js::{
    api, api_err, api_ok, assert_error, b64, create_stream, header, no_responders, publish_ack,
    publish_raw, publish_seq, request_msg, stream_info,
};
use support::TestServer;

/// What async-nats 0.47 sends for `create_stream` with only name and subjects set.
const ANC_BODY: &str = r#"{"name":"ANC","max_bytes":0,"max_msgs":0,"max_msgs_per_subject":0,"discard":"old","subjects":["anc.>"],"retention":"limits","max_consumers":0,"max_age":0,"storage":"file","num_replicas":0,"consumer_limits":null}"#;

async fn client(s: &TestServer) -> async_nats::Client {
    async_nats::connect(s.url()).await.expect("connect")
}

async fn js_server() -> (TestServer, async_nats::Client) {
    let s = TestServer::start_js();
    let c = client(&s).await;
    (s, c)
}

fn state(info: &Value) -> &Value {
    &info["state"]
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("expected an unsigned integer, got {v}"))
}

/// Polls `STREAM.INFO` until the stream holds `n` messages (5 s at most).
async fn wait_messages(c: &async_nats::Client, stream: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let st = stream_info(c, stream, "").await;
        if u(&state(&st)["messages"]) == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{stream} never held {n} messages: {st}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The error description in a pub-ack, asserting its code and err_code, `stream` and `seq:0`.
fn ack_error(ack: &Value, code: u64, err_code: u64) -> String {
    let d = assert_error(ack, code, err_code);
    assert_eq!(
        ack["seq"].as_u64(),
        Some(0),
        "failed pub-ack carries seq 0: {ack}"
    );
    d
}

// ---------------------------------------------------------------------------------------
// Account info and server INFO
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn account_info_has_every_field_async_nats_needs() {
    let (_s, c) = js_server().await;
    // async-nats sends `[]`; nats-py sends an empty body.
    for body in ["[]", ""] {
        let v = api_ok(&c, "INFO", body).await;
        assert_eq!(
            v["type"].as_str(),
            Some("io.nats.jetstream.api.v1.account_info_response")
        );
        for k in [
            "memory",
            "storage",
            "reserved_memory",
            "reserved_storage",
            "streams",
            "consumers",
        ] {
            assert!(v[k].is_u64(), "{k} is a number in {v}");
        }
        assert_eq!(u(&v["streams"]), 0);
        assert_eq!(u(&v["consumers"]), 0);
        let limits = &v["limits"];
        for k in [
            "max_memory",
            "max_storage",
            "max_streams",
            "max_consumers",
            "max_ack_pending",
            "memory_max_stream_bytes",
            "storage_max_stream_bytes",
        ] {
            assert_eq!(limits[k].as_i64(), Some(-1), "limits.{k} unlimited in {v}");
        }
        assert_eq!(limits["max_bytes_required"].as_bool(), Some(false));
        assert_eq!(v["api"]["level"].as_u64(), Some(5), "api level in {v}");
        assert!(v["api"]["total"].is_u64());
        // The request being answered is not counted yet (as nats-server does).
        let again = api(&c, "INFO", "").await;
        assert_eq!(
            again["api"]["total"].as_u64(),
            v["api"]["total"].as_u64().map(|t| t + 1)
        );
        assert!(v["api"]["errors"].is_u64());
    }

    // A stream counts, and the typed async-nats account query parses the reply.
    create_stream(&c, ANC_BODY).await;
    let v = api_ok(&c, "INFO", "").await;
    assert_eq!(u(&v["streams"]), 1);
    let account = jetstream::new(c.clone()).query_account().await.unwrap();
    assert_eq!(account.streams, 1);
}

#[tokio::test]
async fn info_line_says_jetstream() {
    let s = TestServer::start_js();
    let raw = s.raw();
    assert_eq!(
        raw.info["jetstream"].as_bool(),
        Some(true),
        "INFO: {}",
        raw.info
    );
}

// ---------------------------------------------------------------------------------------
// Create
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn create_echoes_the_normalised_config() {
    let (_s, c) = js_server().await;
    let v = api_ok(&c, "STREAM.CREATE.ANC", ANC_BODY).await;
    assert_eq!(
        v["type"].as_str(),
        Some("io.nats.jetstream.api.v1.stream_create_response")
    );
    assert_eq!(v["did_create"].as_bool(), Some(true));
    let cfg = &v["config"];
    assert_eq!(cfg["name"], "ANC");
    assert_eq!(cfg["subjects"], serde_json::json!(["anc.>"]));
    assert_eq!(cfg["retention"], "limits");
    for k in [
        "max_consumers",
        "max_msgs",
        "max_bytes",
        "max_msgs_per_subject",
        "max_msg_size",
    ] {
        assert_eq!(cfg[k].as_i64(), Some(-1), "{k} normalised to -1 in {cfg}");
    }
    assert_eq!(cfg["max_age"].as_u64(), Some(0));
    assert_eq!(cfg["discard"], "old");
    assert_eq!(cfg["storage"], "file");
    assert_eq!(cfg["num_replicas"].as_u64(), Some(1));
    assert_eq!(cfg["duplicate_window"].as_u64(), Some(120_000_000_000));
    assert_eq!(cfg["allow_direct"].as_bool(), Some(false));
    assert_eq!(cfg["sealed"].as_bool(), Some(false));
    assert_eq!(cfg["deny_delete"].as_bool(), Some(false));
    assert_eq!(cfg["deny_purge"].as_bool(), Some(false));
    assert_eq!(cfg["allow_rollup_hdrs"].as_bool(), Some(false));
    assert!(v["created"].is_string());
    let st = state(&v);
    assert_eq!(u(&st["messages"]), 0);
    assert_eq!(u(&st["bytes"]), 0);
    assert_eq!(u(&st["first_seq"]), 0);
    assert_eq!(u(&st["last_seq"]), 0);
    assert_eq!(st["first_ts"], "0001-01-01T00:00:00Z");
    assert_eq!(st["last_ts"], "0001-01-01T00:00:00Z");
    assert_eq!(u(&st["consumer_count"]), 0);

    // An empty subject list defaults to the stream name.
    let v = api_ok(&c, "STREAM.CREATE.bare", r#"{"name":"bare"}"#).await;
    assert_eq!(v["config"]["subjects"], serde_json::json!(["bare"]));

    // A max_age below two minutes also caps the duplicate window.
    let v = api_ok(
        &c,
        "STREAM.CREATE.AGED",
        r#"{"name":"AGED","subjects":["aged"],"max_age":5000000000}"#,
    )
    .await;
    assert_eq!(
        v["config"]["duplicate_window"].as_u64(),
        Some(5_000_000_000)
    );
}

#[tokio::test]
async fn create_is_idempotent_but_refuses_a_different_config() {
    let (_s, c) = js_server().await;
    let first = api_ok(&c, "STREAM.CREATE.ANC", ANC_BODY).await;
    // Same config again (KV create and nats-py add_stream rely on this).
    let again = api_ok(&c, "STREAM.CREATE.ANC", ANC_BODY).await;
    assert_eq!(again["config"], first["config"]);
    assert_eq!(again["created"], first["created"]);
    // The normalised echo is the same config too.
    let echo = serde_json::to_string(&first["config"]).unwrap();
    api_ok(&c, "STREAM.CREATE.ANC", &echo).await;

    let d = api_err(
        &c,
        "STREAM.CREATE.ANC",
        r#"{"name":"ANC","subjects":["anc.>"],"max_msgs":10}"#,
        400,
        10058,
    )
    .await;
    assert_eq!(
        d,
        "stream name already in use with a different configuration"
    );
    let info = stream_info(&c, "ANC", "").await;
    assert_eq!(info["config"]["max_msgs"].as_i64(), Some(-1), "unchanged");
}

#[tokio::test]
async fn create_refuses_name_mismatch_and_overlapping_subjects() {
    let (_s, c) = js_server().await;
    let d = api_err(
        &c,
        "STREAM.CREATE.X",
        r#"{"name":"Y","subjects":["y"]}"#,
        400,
        10056,
    )
    .await;
    assert_eq!(d, "stream name in subject does not match request");

    create_stream(&c, r#"{"name":"ORDERS","subjects":["orders.>"]}"#).await;
    for subjects in [
        r#"["orders.x"]"#,
        r#"["orders.*.y"]"#,
        r#"["orders.*"]"#,
        r#"["orders.>"]"#,
    ] {
        let d = api_err(
            &c,
            "STREAM.CREATE.OTHER",
            &format!(r#"{{"name":"OTHER","subjects":{subjects}}}"#),
            400,
            10065,
        )
        .await;
        assert_eq!(d, "subjects overlap with an existing stream", "{subjects}");
    }
    // A disjoint subject is fine.
    create_stream(&c, r#"{"name":"OTHER","subjects":["order"]}"#).await;
    // A leading wildcard could capture `$JS.…` API subjects: the reference refuses any such
    // subject (`>`, but also `*.z`) with 10052 before looking at other streams.
    for (subjects, want) in [
        (
            r#"[">"]"#,
            "capturing all subjects requires no-ack to be true",
        ),
        (
            r#"["*.z"]"#,
            "subjects that overlap with jetstream api require no-ack to be true",
        ),
    ] {
        let d = api_err(
            &c,
            "STREAM.CREATE.ALL",
            &format!(r#"{{"name":"ALL","subjects":{subjects}}}"#),
            500,
            10052,
        )
        .await;
        assert_eq!(d, want, "{subjects}");
    }
}

#[tokio::test]
async fn create_refuses_invalid_configs() {
    let (_s, c) = js_server().await;
    let d = api_err(
        &c,
        "STREAM.CREATE.A",
        r#"{"name":"A","subjects":["a"],"max_age":50000000}"#,
        500,
        10052,
    )
    .await;
    assert_eq!(d, "max age needs to be >= 100ms");

    // Reference 2.15.1 (single server) refuses replicas above 1 with 10074.
    let d = api_err(
        &c,
        "STREAM.CREATE.R3",
        r#"{"name":"R3","subjects":["r3"],"num_replicas":3}"#,
        500,
        10074,
    )
    .await;
    assert_eq!(d, "replicas > 1 not supported in non-clustered mode");

    // Nothing was created.
    let v = api_ok(&c, "STREAM.NAMES", "").await;
    assert_eq!(u(&v["total"]), 0, "{v}");
}

#[tokio::test]
async fn malformed_json_body_is_10025() {
    let (_s, c) = js_server().await;
    let d = api_err(&c, "STREAM.CREATE.BAD", r#"{"name":"BAD","#, 400, 10025).await;
    assert!(d.starts_with("invalid JSON"), "{d}");
    let v = api_ok(&c, "STREAM.NAMES", "").await;
    assert_eq!(u(&v["total"]), 0);
}

// ---------------------------------------------------------------------------------------
// Update
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn update_changes_subjects_and_limits() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"U","subjects":["u.a"]}"#).await;
    publish_seq(&c, "u.a", "1").await;
    let v = api_ok(
        &c,
        "STREAM.UPDATE.U",
        r#"{"name":"U","subjects":["u.a","u.b"],"max_msgs":5}"#,
    )
    .await;
    assert_eq!(
        v["type"].as_str(),
        Some("io.nats.jetstream.api.v1.stream_update_response")
    );
    assert_eq!(v["config"]["subjects"], serde_json::json!(["u.a", "u.b"]));
    assert_eq!(v["config"]["max_msgs"].as_i64(), Some(5));
    assert_eq!(u(&state(&v)["messages"]), 1, "messages survive the update");
    // The new subject is captured now.
    assert_eq!(publish_seq(&c, "u.b", "2").await, 2);
    // Shrinking a limit applies at once.
    for i in 0..4 {
        publish_seq(&c, "u.a", &i.to_string()).await;
    }
    api_ok(
        &c,
        "STREAM.UPDATE.U",
        r#"{"name":"U","subjects":["u.a","u.b"],"max_msgs":2}"#,
    )
    .await;
    let st = stream_info(&c, "U", "").await;
    assert_eq!(u(&state(&st)["messages"]), 2);
    assert_eq!(u(&state(&st)["first_seq"]), 5);
    assert_eq!(u(&state(&st)["last_seq"]), 6);
}

/// New `consumer_limits` below what existing consumers have are refused, naming them (what
/// async-nats's `jetstream::limits` expects); limits they fit are taken.
#[tokio::test]
async fn update_refuses_consumer_limits_that_existing_consumers_exceed() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"L","subjects":["l"]}"#).await;
    api_ok(
        &c,
        "CONSUMER.DURABLE.CREATE.L.name",
        r#"{"stream_name":"L","config":{"durable_name":"name","ack_policy":"explicit"}}"#,
    )
    .await;
    let d = api_err(
        &c,
        "STREAM.UPDATE.L",
        r#"{"name":"L","subjects":["l"],"consumer_limits":{"inactive_threshold":2000000000,"max_ack_pending":10}}"#,
        500,
        10069,
    )
    .await;
    assert_eq!(d, "change to limits violates consumers: name");
    // A durable has no inactivity timer to exceed; 5,000 is above its 1,000.
    let v = api_ok(
        &c,
        "STREAM.UPDATE.L",
        r#"{"name":"L","subjects":["l"],"consumer_limits":{"inactive_threshold":2000000000,"max_ack_pending":5000}}"#,
    )
    .await;
    assert_eq!(
        v["config"]["consumer_limits"]["max_ack_pending"].as_i64(),
        Some(5000)
    );
}

#[tokio::test]
async fn update_refuses_storage_change_and_missing_stream() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"U","subjects":["u"],"storage":"file"}"#).await;
    let d = api_err(
        &c,
        "STREAM.UPDATE.U",
        r#"{"name":"U","subjects":["u"],"storage":"memory"}"#,
        500,
        10052,
    )
    .await;
    assert_eq!(d, "stream configuration update can not change storage type");
    let d = api_err(
        &c,
        "STREAM.UPDATE.NOPE",
        r#"{"name":"NOPE","subjects":["nope"]}"#,
        404,
        10059,
    )
    .await;
    assert_eq!(d, "stream not found");
    // Subjects of another stream are refused on update too.
    create_stream(&c, r#"{"name":"W","subjects":["w"]}"#).await;
    api_err(
        &c,
        "STREAM.UPDATE.W",
        r#"{"name":"W","subjects":["w","u"]}"#,
        400,
        10065,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Info, names, list, delete
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn info_reports_state_subjects_and_deleted() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"S","subjects":["s.>"]}"#).await;
    for (i, subj) in ["s.a", "s.b", "s.a", "s.c", "s.a"].iter().enumerate() {
        assert_eq!(publish_seq(&c, subj, "payload").await, i as u64 + 1);
    }
    // async-nats sends `null` or `{}`, nats-py an empty body.
    for body in ["", "null", "{}"] {
        let v = stream_info(&c, "S", body).await;
        assert_eq!(
            v["type"].as_str(),
            Some("io.nats.jetstream.api.v1.stream_info_response")
        );
        let st = state(&v);
        assert_eq!(u(&st["messages"]), 5);
        assert!(u(&st["bytes"]) > 0);
        assert_eq!(u(&st["first_seq"]), 1);
        assert_eq!(u(&st["last_seq"]), 5);
        assert_eq!(u(&st["num_subjects"]), 3);
        assert_ne!(st["first_ts"], "0001-01-01T00:00:00Z");
        assert!(
            st.get("subjects").is_none(),
            "subjects only when asked: {st}"
        );
        assert!(st.get("deleted").is_none());
        assert!(st.get("num_deleted").is_none(), "no gaps yet: {st}");
    }

    let v = stream_info(&c, "S", r#"{"subjects_filter":"s.>"}"#).await;
    assert_eq!(
        state(&v)["subjects"],
        serde_json::json!({"s.a":3,"s.b":1,"s.c":1})
    );
    let paging = |v: &Value| (u(&v["total"]), u(&v["offset"]), u(&v["limit"]));
    assert_eq!(paging(&v), (3, 0, 100_000), "the page keys: {v}");
    let v = stream_info(&c, "S", r#"{"subjects_filter":"s.a"}"#).await;
    assert_eq!(state(&v)["subjects"], serde_json::json!({"s.a":3}));
    assert_eq!(paging(&v), (1, 0, 100_000));
    // Pages: `offset` skips subjects in order (clients page through 100,000 at a time).
    let v = stream_info(&c, "S", r#"{"subjects_filter":"s.>","offset":1}"#).await;
    assert_eq!(state(&v)["subjects"], serde_json::json!({"s.b":1,"s.c":1}));
    assert_eq!(paging(&v), (3, 1, 100_000));
    // A filter that matches nothing: no `subjects` at all (not an empty map), no page.
    let v = stream_info(&c, "S", r#"{"subjects_filter":"nothing.here"}"#).await;
    assert!(state(&v).get("subjects").is_none(), "{v}");
    assert_eq!(paging(&v), (0, 0, 0));

    // Delete an interior message: a gap.
    let v = api_ok(&c, "STREAM.MSG.DELETE.S", r#"{"seq":3}"#).await;
    assert_eq!(v["success"].as_bool(), Some(true));
    let v = stream_info(&c, "S", r#"{"deleted_details":true}"#).await;
    let st = state(&v);
    assert_eq!(u(&st["messages"]), 4);
    assert_eq!(u(&st["num_deleted"]), 1);
    assert_eq!(st["deleted"], serde_json::json!([3]));
    assert_eq!(u(&st["first_seq"]), 1);
    assert_eq!(u(&st["last_seq"]), 5);
    let v = stream_info(&c, "S", "").await;
    assert!(state(&v).get("deleted").is_none());

    // Byte count goes down with the message count.
    let before = u(&state(&v)["bytes"]);
    api_ok(&c, "STREAM.MSG.DELETE.S", r#"{"seq":1}"#).await;
    let v = stream_info(&c, "S", "").await;
    assert!(u(&state(&v)["bytes"]) < before);
    assert_eq!(u(&state(&v)["first_seq"]), 2);

    api_err(&c, "STREAM.INFO.NOPE", "", 404, 10059).await;
}

#[tokio::test]
async fn names_and_list_page_and_filter_by_subject() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"LIM","subjects":["lim.*"]}"#).await;
    create_stream(&c, r#"{"name":"ALPHA","subjects":["alpha.>"]}"#).await;
    create_stream(&c, r#"{"name":"KV_b","subjects":["$KV.b.>"]}"#).await;

    let v = api_ok(&c, "STREAM.NAMES", "").await;
    assert_eq!(
        v["type"].as_str(),
        Some("io.nats.jetstream.api.v1.stream_names_response")
    );
    assert_eq!(u(&v["total"]), 3);
    assert_eq!(u(&v["offset"]), 0);
    assert_eq!(u(&v["limit"]), 1024);
    let mut names: Vec<&str> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["ALPHA", "KV_b", "LIM"]);

    for (filter, want) in [
        ("lim.x", "LIM"),
        ("lim.>", "LIM"),
        ("alpha.one.two", "ALPHA"),
        ("$KV.*.>", "KV_b"),
    ] {
        let v = api_ok(&c, "STREAM.NAMES", &format!(r#"{{"subject":"{filter}"}}"#)).await;
        assert_eq!(
            v["streams"],
            serde_json::json!([want]),
            "filter {filter}: {v}"
        );
        assert_eq!(u(&v["total"]), 1);
    }
    let v = api_ok(&c, "STREAM.NAMES", r#"{"subject":"nothing.here"}"#).await;
    assert_eq!(u(&v["total"]), 0);
    assert!(
        v["streams"].is_null() || v["streams"] == serde_json::json!([]),
        "no names: {v}"
    );

    let v = api_ok(&c, "STREAM.LIST", "").await;
    assert_eq!(
        v["type"].as_str(),
        Some("io.nats.jetstream.api.v1.stream_list_response")
    );
    assert_eq!(u(&v["total"]), 3);
    assert_eq!(u(&v["offset"]), 0);
    assert_eq!(u(&v["limit"]), 256);
    let list = v["streams"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    for info in list {
        assert!(info["config"]["name"].is_string());
        assert!(info["state"]["messages"].is_u64());
        assert!(info["created"].is_string());
    }
    let v = api_ok(&c, "STREAM.LIST", r#"{"subject":"lim.x"}"#).await;
    let list = v["streams"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["config"]["name"], "LIM");

    // Paging: an offset past the first entry.
    let v = api_ok(&c, "STREAM.NAMES", r#"{"offset":1}"#).await;
    assert_eq!(u(&v["total"]), 3);
    assert_eq!(u(&v["offset"]), 1);
    assert_eq!(v["streams"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn delete_removes_the_stream() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"D","subjects":["d"]}"#).await;
    publish_seq(&c, "d", "x").await;
    let v = api_ok(&c, "STREAM.DELETE.D", "{}").await;
    assert_eq!(
        v["type"].as_str(),
        Some("io.nats.jetstream.api.v1.stream_delete_response")
    );
    assert_eq!(v["success"].as_bool(), Some(true));
    api_err(&c, "STREAM.INFO.D", "", 404, 10059).await;
    api_err(&c, "STREAM.DELETE.D", "", 404, 10059).await;
    let v = api_ok(&c, "STREAM.NAMES", "").await;
    assert_eq!(u(&v["total"]), 0);
    // The subject is no longer captured.
    assert!(no_responders(&c, "d", "x").await);
    // And the name can be reused.
    create_stream(&c, r#"{"name":"D","subjects":["d"]}"#).await;
    assert_eq!(publish_seq(&c, "d", "y").await, 1);
}

// ---------------------------------------------------------------------------------------
// Purge
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn purge_all_filter_seq_and_keep() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"P","subjects":["p.>"]}"#).await;
    // seqs 1..=10: p.a at odd seqs, p.b at even seqs.
    for i in 1..=10u64 {
        let subj = if i % 2 == 1 { "p.a" } else { "p.b" };
        assert_eq!(publish_seq(&c, subj, &i.to_string()).await, i);
    }

    // Filter + keep: keep the newest p.a (seq 9), drop seqs 1,3,5,7.
    let v = api_ok(&c, "STREAM.PURGE.P", r#"{"filter":"p.a","keep":1}"#).await;
    assert_eq!(
        v["type"].as_str(),
        Some("io.nats.jetstream.api.v1.stream_purge_response")
    );
    assert_eq!(v["success"].as_bool(), Some(true));
    assert_eq!(u(&v["purged"]), 4);
    let st = stream_info(&c, "P", "").await;
    assert_eq!(u(&state(&st)["messages"]), 6);
    assert_eq!(u(&state(&st)["first_seq"]), 2);
    assert_eq!(u(&state(&st)["last_seq"]), 10);

    // Seq: everything below 6 (2 and 4) goes.
    let v = api_ok(&c, "STREAM.PURGE.P", r#"{"seq":6}"#).await;
    assert_eq!(u(&v["purged"]), 2);
    let st = stream_info(&c, "P", "").await;
    assert_eq!(u(&state(&st)["messages"]), 4);
    assert_eq!(u(&state(&st)["first_seq"]), 6);

    // Filter only: all remaining p.b (6, 8, 10).
    let v = api_ok(&c, "STREAM.PURGE.P", r#"{"filter":"p.b"}"#).await;
    assert_eq!(u(&v["purged"]), 3);
    let st = stream_info(&c, "P", r#"{"subjects_filter":">"}"#).await;
    assert_eq!(u(&state(&st)["messages"]), 1);
    assert_eq!(u(&state(&st)["first_seq"]), 9);
    assert_eq!(state(&st)["subjects"], serde_json::json!({"p.a":1}));

    // Keep without filter.
    for i in 11..=14u64 {
        assert_eq!(publish_seq(&c, "p.c", "x").await, i);
    }
    let v = api_ok(&c, "STREAM.PURGE.P", r#"{"keep":2}"#).await;
    assert_eq!(u(&v["purged"]), 3);
    let st = stream_info(&c, "P", "").await;
    assert_eq!(u(&state(&st)["messages"]), 2);
    assert_eq!(u(&state(&st)["first_seq"]), 13);

    // Everything: empty stream with first_seq = last_seq + 1.
    let v = api_ok(&c, "STREAM.PURGE.P", "").await;
    assert_eq!(u(&v["purged"]), 2);
    let st = stream_info(&c, "P", "").await;
    assert_eq!(u(&state(&st)["messages"]), 0);
    assert_eq!(u(&state(&st)["bytes"]), 0);
    assert_eq!(u(&state(&st)["last_seq"]), 14);
    assert_eq!(u(&state(&st)["first_seq"]), 15);
    // Sequences continue after a purge.
    assert_eq!(publish_seq(&c, "p.a", "again").await, 15);

    api_err(&c, "STREAM.PURGE.NOPE", "", 404, 10059).await;
}

// ---------------------------------------------------------------------------------------
// Message get / delete
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn msg_get_by_seq_last_and_next_by_subject() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"G","subjects":["g.>"]}"#).await;
    let ack = publish_ack(&c, "g.a", &[("Nats-Msg-Id", "m1")], "one").await;
    assert_eq!(u(&ack["seq"]), 1);
    publish_seq(&c, "g.b", "two").await;
    publish_seq(&c, "g.a", "three").await;
    publish_seq(&c, "g.b", "").await;

    let v = api_ok(&c, "STREAM.MSG.GET.G", r#"{"seq":1}"#).await;
    assert_eq!(
        v["type"].as_str(),
        Some("io.nats.jetstream.api.v1.stream_msg_get_response")
    );
    let m = &v["message"];
    assert_eq!(m["subject"], "g.a");
    assert_eq!(u(&m["seq"]), 1);
    assert_eq!(b64(m["data"].as_str().unwrap()), b"one");
    assert_eq!(
        b64(m["hdrs"].as_str().unwrap()),
        b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n"
    );
    assert!(m["time"].as_str().unwrap().ends_with('Z'));

    let v = api_ok(&c, "STREAM.MSG.GET.G", r#"{"last_by_subj":"g.a"}"#).await;
    assert_eq!(u(&v["message"]["seq"]), 3);
    assert_eq!(b64(v["message"]["data"].as_str().unwrap()), b"three");
    assert!(v["message"].get("hdrs").is_none(), "no headers stored");

    // Wildcard last_by_subj: the last on any matching subject.
    let v = api_ok(&c, "STREAM.MSG.GET.G", r#"{"last_by_subj":"g.*"}"#).await;
    assert_eq!(u(&v["message"]["seq"]), 4);
    assert!(
        v["message"].get("data").is_none(),
        "empty payload omitted: {v}"
    );

    let v = api_ok(&c, "STREAM.MSG.GET.G", r#"{"next_by_subj":"g.b","seq":1}"#).await;
    assert_eq!(u(&v["message"]["seq"]), 2);
    let v = api_ok(&c, "STREAM.MSG.GET.G", r#"{"next_by_subj":"g.b","seq":2}"#).await;
    assert_eq!(u(&v["message"]["seq"]), 2, "start seq is inclusive");
    let v = api_ok(&c, "STREAM.MSG.GET.G", r#"{"next_by_subj":"g.a","seq":2}"#).await;
    assert_eq!(u(&v["message"]["seq"]), 3);

    // Misses.
    for body in [
        r#"{"seq":99}"#,
        r#"{"last_by_subj":"g.zzz"}"#,
        r#"{"next_by_subj":"g.a","seq":4}"#,
    ] {
        let d = api_err(&c, "STREAM.MSG.GET.G", body, 404, 10037).await;
        assert_eq!(d, "no message found", "{body}");
    }
    api_err(&c, "STREAM.MSG.GET.NOPE", r#"{"seq":1}"#, 404, 10059).await;
}

#[tokio::test]
async fn msg_delete_removes_one_message() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"MD","subjects":["md"]}"#).await;
    for _ in 0..3 {
        publish_seq(&c, "md", "x").await;
    }
    let v = api_ok(&c, "STREAM.MSG.DELETE.MD", r#"{"seq":2}"#).await;
    assert_eq!(
        v["type"].as_str(),
        Some("io.nats.jetstream.api.v1.stream_msg_delete_response")
    );
    assert_eq!(v["success"].as_bool(), Some(true));
    api_err(&c, "STREAM.MSG.GET.MD", r#"{"seq":2}"#, 404, 10037).await;
    // no_erase variant.
    api_ok(&c, "STREAM.MSG.DELETE.MD", r#"{"seq":3,"no_erase":true}"#).await;
    let st = stream_info(&c, "MD", "").await;
    assert_eq!(u(&state(&st)["messages"]), 1);
    assert_eq!(u(&state(&st)["last_seq"]), 3);

    // Misses. Below the first sequence the reference answers 500/10057 "no message found".
    api_ok(&c, "STREAM.MSG.DELETE.MD", r#"{"seq":1}"#).await;
    let d = api_err(&c, "STREAM.MSG.DELETE.MD", r#"{"seq":1}"#, 500, 10057).await;
    assert_eq!(d, "no message found");
    // Other misses vary in the reference by store and position: an interior gap gives
    // 400/10043 "sequence 2 not found" (memory store: every miss does), a sequence past the
    // end on a file store gives 500/10057 "stream store EOF". Either code is accepted.
    for seq in [2, 50] {
        let v = api(&c, "STREAM.MSG.DELETE.MD", &format!(r#"{{"seq":{seq}}}"#)).await;
        let code = v["error"]["err_code"].as_u64();
        assert!(
            code == Some(10057) || code == Some(10043),
            "miss on seq {seq}: {v}"
        );
    }
    api_err(&c, "STREAM.MSG.DELETE.NOPE", r#"{"seq":1}"#, 404, 10059).await;
}

// ---------------------------------------------------------------------------------------
// Direct get
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn direct_get_both_forms() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"D","subjects":["d.>"],"allow_direct":true}"#).await;
    publish_ack(&c, "d.k1", &[("X-A", "1")], "v1").await;
    publish_seq(&c, "d.k2", "v2").await;
    publish_seq(&c, "d.k1", "v3").await;

    let m = request_msg(&c, "$JS.API.DIRECT.GET.D", r#"{"seq":1}"#).await;
    assert_eq!(m.status, None, "a found message has no status");
    assert_eq!(m.payload, "v1");
    assert_eq!(header(&m, "X-A"), Some("1"), "stored headers kept");
    assert_eq!(header(&m, "Nats-Stream"), Some("D"));
    assert_eq!(header(&m, "Nats-Subject"), Some("d.k1"));
    assert_eq!(header(&m, "Nats-Sequence"), Some("1"));
    let ts = header(&m, "Nats-Time-Stamp").expect("Nats-Time-Stamp");
    assert!(ts.ends_with('Z'), "{ts}");

    let m = request_msg(&c, "$JS.API.DIRECT.GET.D", r#"{"last_by_subj":"d.k1"}"#).await;
    assert_eq!(m.payload, "v3");
    assert_eq!(header(&m, "Nats-Sequence"), Some("3"));

    let m = request_msg(
        &c,
        "$JS.API.DIRECT.GET.D",
        r#"{"next_by_subj":"d.k2","seq":1}"#,
    )
    .await;
    assert_eq!(m.payload, "v2");
    assert_eq!(header(&m, "Nats-Subject"), Some("d.k2"));

    // Subject-in-the-request-subject form, empty body: last for that subject.
    let m = request_msg(&c, "$JS.API.DIRECT.GET.D.d.k1", "").await;
    assert_eq!(m.payload, "v3");
    assert_eq!(header(&m, "Nats-Subject"), Some("d.k1"));
    assert_eq!(header(&m, "Nats-Sequence"), Some("3"));
    assert_eq!(header(&m, "Nats-Stream"), Some("D"));
    assert!(header(&m, "Nats-Time-Stamp").is_some());

    // Misses: 404 Message Not Found, empty payload.
    for (subject, body) in [
        ("$JS.API.DIRECT.GET.D", r#"{"seq":77}"#),
        ("$JS.API.DIRECT.GET.D", r#"{"last_by_subj":"d.none"}"#),
        ("$JS.API.DIRECT.GET.D.d.none", ""),
    ] {
        let m = request_msg(&c, subject, body).await;
        assert_eq!(
            m.status,
            Some(async_nats::StatusCode::NOT_FOUND),
            "{subject} {body}"
        );
        assert_eq!(m.description.as_deref(), Some("Message Not Found"));
        assert!(m.payload.is_empty());
    }

    // The typed client API on the same stream.
    let js = jetstream::new(c.clone());
    let stream = js.get_stream("D").await.unwrap();
    let sm = stream.direct_get(2).await.unwrap();
    assert_eq!(sm.subject.as_str(), "d.k2");
    assert_eq!(sm.payload, "v2");
    let sm = stream.direct_get_last_for_subject("d.k1").await.unwrap();
    assert_eq!(sm.sequence, 3);
}

#[tokio::test]
async fn direct_get_without_allow_direct_has_no_responders() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"ND","subjects":["nd"]}"#).await;
    publish_seq(&c, "nd", "x").await;
    assert!(no_responders(&c, "$JS.API.DIRECT.GET.ND", r#"{"seq":1}"#).await);
    assert!(no_responders(&c, "$JS.API.DIRECT.GET.ND.nd", "").await);
    // Turning it on by update enables the endpoint.
    api_ok(
        &c,
        "STREAM.UPDATE.ND",
        r#"{"name":"ND","subjects":["nd"],"allow_direct":true}"#,
    )
    .await;
    let m = request_msg(&c, "$JS.API.DIRECT.GET.ND", r#"{"seq":1}"#).await;
    assert_eq!(m.payload, "x");
}

// ---------------------------------------------------------------------------------------
// Publishing
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn pub_ack_names_stream_and_seq_and_dedupes_msg_id() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"ORDERS","subjects":["orders.>"]}"#).await;
    let ack = publish_ack(&c, "orders.new", &[("Nats-Msg-Id", "m1")], "one").await;
    assert_eq!(ack["stream"], "ORDERS");
    assert_eq!(u(&ack["seq"]), 1);
    assert!(ack.get("duplicate").is_none() || ack["duplicate"] == false);
    assert!(ack.get("type").is_none(), "pub-acks carry no type: {ack}");

    let ack = publish_ack(&c, "orders.new", &[("Nats-Msg-Id", "m1")], "one again").await;
    assert_eq!(ack["stream"], "ORDERS");
    assert_eq!(u(&ack["seq"]), 1, "duplicate repeats the original seq");
    assert_eq!(ack["duplicate"].as_bool(), Some(true));

    let ack = publish_ack(&c, "orders.new", &[("Nats-Msg-Id", "m2")], "two").await;
    assert_eq!(u(&ack["seq"]), 2);
    let st = stream_info(&c, "ORDERS", "").await;
    assert_eq!(
        u(&state(&st)["messages"]),
        2,
        "the duplicate was not stored"
    );

    // async-nats typed publish: publish(..).await?.await? → PubAck.
    let js = jetstream::new(c.clone());
    let ack = js
        .publish("orders.typed", "three".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ack.stream, "ORDERS");
    assert_eq!(ack.sequence, 3);
    assert!(!ack.duplicate);
}

#[tokio::test]
async fn publish_to_a_subject_without_stream_has_no_responders() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"S","subjects":["s"]}"#).await;
    assert!(no_responders(&c, "not.a.stream", "x").await);
    // A plain publish (no reply) to a stream subject is still stored (asynchronously: the
    // reference stores it after the core round trip completes).
    c.publish("s", "quiet".into()).await.unwrap();
    support::sync(&c).await;
    wait_messages(&c, "S", 1).await;
}

#[tokio::test]
async fn expected_stream_and_last_sequence_checks() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"E","subjects":["e.>"]}"#).await;
    let ack = publish_ack(&c, "e.a", &[("Nats-Expected-Stream", "E")], "1").await;
    assert_eq!(u(&ack["seq"]), 1);
    let ack = publish_ack(&c, "e.a", &[("Nats-Expected-Stream", "OTHER")], "x").await;
    assert_eq!(
        ack_error(&ack, 400, 10060),
        "expected stream does not match"
    );

    // Expected-Last-Sequence: last_seq is 1.
    let ack = publish_ack(&c, "e.b", &[("Nats-Expected-Last-Sequence", "1")], "2").await;
    assert_eq!(u(&ack["seq"]), 2);
    let ack = publish_ack(&c, "e.b", &[("Nats-Expected-Last-Sequence", "1")], "x").await;
    assert_eq!(ack_error(&ack, 400, 10071), "wrong last sequence: 2");

    // Expected-Last-Subject-Sequence: e.a last at 1, e.b at 2, e.c never.
    let ack = publish_ack(
        &c,
        "e.a",
        &[("Nats-Expected-Last-Subject-Sequence", "1")],
        "3",
    )
    .await;
    assert_eq!(u(&ack["seq"]), 3);
    let ack = publish_ack(
        &c,
        "e.a",
        &[("Nats-Expected-Last-Subject-Sequence", "1")],
        "x",
    )
    .await;
    assert_eq!(ack_error(&ack, 400, 10071), "wrong last sequence: 3");
    let ack = publish_ack(
        &c,
        "e.c",
        &[("Nats-Expected-Last-Subject-Sequence", "0")],
        "4",
    )
    .await;
    assert_eq!(u(&ack["seq"]), 4, "0 = no message on the subject yet");
    let ack = publish_ack(
        &c,
        "e.c",
        &[("Nats-Expected-Last-Subject-Sequence", "0")],
        "x",
    )
    .await;
    assert_eq!(ack_error(&ack, 400, 10071), "wrong last sequence: 4");

    // Nothing failed was stored.
    let st = stream_info(&c, "E", "").await;
    assert_eq!(u(&state(&st)["messages"]), 4);
    assert_eq!(u(&state(&st)["last_seq"]), 4);
}

#[tokio::test]
async fn expected_last_msg_id_check() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"E","subjects":["e"]}"#).await;
    publish_ack(&c, "e", &[("Nats-Msg-Id", "a")], "1").await;
    let ack = publish_ack(
        &c,
        "e",
        &[("Nats-Msg-Id", "b"), ("Nats-Expected-Last-Msg-Id", "a")],
        "2",
    )
    .await;
    assert_eq!(u(&ack["seq"]), 2);
    let ack = publish_ack(&c, "e", &[("Nats-Expected-Last-Msg-Id", "a")], "x").await;
    assert_eq!(ack_error(&ack, 400, 10070), "wrong last msg ID: b");
    let st = stream_info(&c, "E", "").await;
    assert_eq!(u(&state(&st)["messages"]), 2);
}

#[tokio::test]
async fn rollup_sub_and_all() {
    let (_s, c) = js_server().await;
    create_stream(
        &c,
        r#"{"name":"R","subjects":["r.>"],"allow_rollup_hdrs":true}"#,
    )
    .await;
    for subj in ["r.a", "r.a", "r.b", "r.a", "r.b"] {
        publish_seq(&c, subj, "x").await;
    }
    let ack = publish_ack(&c, "r.a", &[("Nats-Rollup", "sub")], "rolled").await;
    assert_eq!(u(&ack["seq"]), 6);
    let st = stream_info(&c, "R", r#"{"subjects_filter":">"}"#).await;
    assert_eq!(u(&state(&st)["messages"]), 3, "earlier r.a gone: {st}");
    assert_eq!(state(&st)["subjects"], serde_json::json!({"r.a":1,"r.b":2}));
    let v = api_ok(&c, "STREAM.MSG.GET.R", r#"{"last_by_subj":"r.a"}"#).await;
    assert_eq!(u(&v["message"]["seq"]), 6);
    api_err(&c, "STREAM.MSG.GET.R", r#"{"seq":1}"#, 404, 10037).await;

    let ack = publish_ack(&c, "r.c", &[("Nats-Rollup", "all")], "everything").await;
    assert_eq!(u(&ack["seq"]), 7);
    let st = stream_info(&c, "R", "").await;
    assert_eq!(u(&state(&st)["messages"]), 1);
    assert_eq!(u(&state(&st)["first_seq"]), 7);
    assert_eq!(u(&state(&st)["last_seq"]), 7);
}

#[tokio::test]
async fn rollup_without_allow_rollup_hdrs_is_refused() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"NR","subjects":["nr"]}"#).await;
    publish_seq(&c, "nr", "x").await;
    for kind in ["sub", "all"] {
        let ack = publish_ack(&c, "nr", &[("Nats-Rollup", kind)], "y").await;
        assert_eq!(ack_error(&ack, 500, 10111), "rollup not permitted");
    }
    let st = stream_info(&c, "NR", "").await;
    assert_eq!(u(&state(&st)["messages"]), 1);
}

// ---------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn max_msgs_discard_old_drops_oldest() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"L","subjects":["l"],"max_msgs":3}"#).await;
    for i in 1..=5u64 {
        assert_eq!(publish_seq(&c, "l", &i.to_string()).await, i);
    }
    let st = stream_info(&c, "L", "").await;
    assert_eq!(u(&state(&st)["messages"]), 3);
    assert_eq!(u(&state(&st)["first_seq"]), 3);
    assert_eq!(u(&state(&st)["last_seq"]), 5);
    api_err(&c, "STREAM.MSG.GET.L", r#"{"seq":2}"#, 404, 10037).await;
}

#[tokio::test]
async fn max_msgs_and_max_bytes_discard_new_reject() {
    let (_s, c) = js_server().await;
    create_stream(
        &c,
        r#"{"name":"N","subjects":["n"],"max_msgs":2,"discard":"new"}"#,
    )
    .await;
    publish_seq(&c, "n", "1").await;
    publish_seq(&c, "n", "2").await;
    let ack = publish_ack(&c, "n", &[], "3").await;
    assert_eq!(ack_error(&ack, 503, 10077), "maximum messages exceeded");
    assert_eq!(ack["stream"], "N");
    let st = stream_info(&c, "N", "").await;
    assert_eq!(u(&state(&st)["messages"]), 2);
    assert_eq!(u(&state(&st)["last_seq"]), 2);

    create_stream(
        &c,
        r#"{"name":"B","subjects":["b"],"max_bytes":200,"discard":"new"}"#,
    )
    .await;
    let payload = "x".repeat(60);
    let mut stored = 0;
    let err = loop {
        let ack = publish_ack(&c, "b", &[], &payload).await;
        if ack.get("error").is_some() {
            break ack;
        }
        stored += 1;
        assert!(stored < 10, "max_bytes never enforced");
    };
    assert!(stored >= 1);
    assert_eq!(ack_error(&err, 503, 10077), "maximum bytes exceeded");
    let st = stream_info(&c, "B", "").await;
    assert_eq!(u(&state(&st)["messages"]), stored);
    assert!(u(&state(&st)["bytes"]) <= 200);
}

#[tokio::test]
async fn max_bytes_discard_old_drops_oldest() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"B","subjects":["b"],"max_bytes":300}"#).await;
    let payload = "y".repeat(60);
    for i in 1..=20u64 {
        assert_eq!(publish_seq(&c, "b", &payload).await, i);
    }
    let st = stream_info(&c, "B", "").await;
    assert!(u(&state(&st)["bytes"]) <= 300, "{st}");
    assert!(u(&state(&st)["messages"]) >= 1);
    assert!(u(&state(&st)["first_seq"]) > 1);
    assert_eq!(u(&state(&st)["last_seq"]), 20);
}

#[tokio::test]
async fn max_msgs_per_subject_keeps_newest() {
    let (_s, c) = js_server().await;
    create_stream(
        &c,
        r#"{"name":"PS","subjects":["ps.>"],"max_msgs_per_subject":2}"#,
    )
    .await;
    for (i, subj) in ["ps.a", "ps.a", "ps.b", "ps.a", "ps.a", "ps.b"]
        .iter()
        .enumerate()
    {
        assert_eq!(
            publish_seq(&c, subj, &(i + 1).to_string()).await,
            i as u64 + 1
        );
    }
    let st = stream_info(&c, "PS", r#"{"subjects_filter":">"}"#).await;
    assert_eq!(u(&state(&st)["messages"]), 4);
    assert_eq!(
        state(&st)["subjects"],
        serde_json::json!({"ps.a":2,"ps.b":2})
    );
    // ps.a kept 4 and 5.
    let v = api_ok(
        &c,
        "STREAM.MSG.GET.PS",
        r#"{"next_by_subj":"ps.a","seq":1}"#,
    )
    .await;
    assert_eq!(u(&v["message"]["seq"]), 4);

    // discard:new without discard_new_per_subject still drops the oldest (KV relies on it).
    create_stream(
        &c,
        r#"{"name":"KVL","subjects":["kvl.>"],"max_msgs_per_subject":1,"discard":"new"}"#,
    )
    .await;
    publish_seq(&c, "kvl.k", "1").await;
    assert_eq!(publish_seq(&c, "kvl.k", "2").await, 2);
    let st = stream_info(&c, "KVL", "").await;
    assert_eq!(u(&state(&st)["messages"]), 1);
    assert_eq!(u(&state(&st)["first_seq"]), 2);
}

#[tokio::test]
async fn discard_new_per_subject_rejects() {
    let (_s, c) = js_server().await;
    create_stream(
        &c,
        r#"{"name":"DN","subjects":["dn.>"],"max_msgs_per_subject":1,"discard":"new","discard_new_per_subject":true}"#,
    )
    .await;
    publish_seq(&c, "dn.a", "1").await;
    let ack = publish_ack(&c, "dn.a", &[], "2").await;
    assert_eq!(
        ack_error(&ack, 503, 10077),
        "maximum messages per subject exceeded"
    );
    // Other subjects are unaffected.
    assert_eq!(publish_seq(&c, "dn.b", "3").await, 2);
    let st = stream_info(&c, "DN", "").await;
    assert_eq!(u(&state(&st)["messages"]), 2);
}

#[tokio::test]
async fn max_msg_size_rejects_larger_messages() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"MS","subjects":["ms"],"max_msg_size":16}"#).await;
    publish_seq(&c, "ms", &"a".repeat(16)).await;
    let ack = publish_ack(&c, "ms", &[], &"a".repeat(17)).await;
    assert_eq!(
        ack_error(&ack, 400, 10054),
        "message size exceeds maximum allowed"
    );
    // Headers count towards the size.
    let ack = publish_ack(&c, "ms", &[("X-Pad", "0123456789")], "abcdefgh").await;
    ack_error(&ack, 400, 10054);
    let st = stream_info(&c, "MS", "").await;
    assert_eq!(u(&state(&st)["messages"]), 1);
}

#[tokio::test]
async fn max_age_expires_messages() {
    let (_s, c) = js_server().await;
    create_stream(
        &c,
        r#"{"name":"AGE","subjects":["age"],"max_age":1000000000}"#,
    )
    .await;
    let published = Instant::now();
    publish_seq(&c, "age", "1").await;
    publish_seq(&c, "age", "2").await;
    let st = stream_info(&c, "AGE", "").await;
    if published.elapsed() < Duration::from_millis(900) {
        assert_eq!(u(&state(&st)["messages"]), 2, "not expired yet");
    }
    // Time is the subject here: poll up to 5 s for expiry.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let st = stream_info(&c, "AGE", "").await;
        if u(&state(&st)["messages"]) == 0 {
            assert_eq!(u(&state(&st)["last_seq"]), 2);
            assert_eq!(u(&state(&st)["first_seq"]), 3);
            break;
        }
        assert!(Instant::now() < deadline, "messages never expired: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        published.elapsed() >= Duration::from_millis(900),
        "expired too early"
    );
}

#[tokio::test]
async fn sealed_stream_refuses_publish_purge_and_delete() {
    let (_s, c) = js_server().await;
    create_stream(&c, r#"{"name":"SL","subjects":["sl"]}"#).await;
    publish_seq(&c, "sl", "1").await;
    publish_seq(&c, "sl", "2").await;
    let v = api_ok(
        &c,
        "STREAM.UPDATE.SL",
        r#"{"name":"SL","subjects":["sl"],"sealed":true}"#,
    )
    .await;
    assert_eq!(v["config"]["sealed"].as_bool(), Some(true));

    let ack = publish_ack(&c, "sl", &[], "3").await;
    assert_eq!(
        ack_error(&ack, 400, 10109),
        "invalid operation on sealed stream"
    );
    let d = api_err(&c, "STREAM.PURGE.SL", "", 400, 10109).await;
    assert_eq!(d, "invalid operation on sealed stream");
    let d = api_err(&c, "STREAM.MSG.DELETE.SL", r#"{"seq":1}"#, 400, 10109).await;
    assert_eq!(d, "invalid operation on sealed stream");
    // Unsealing is refused.
    let d = api_err(
        &c,
        "STREAM.UPDATE.SL",
        r#"{"name":"SL","subjects":["sl"],"sealed":false}"#,
        500,
        10052,
    )
    .await;
    assert_eq!(
        d,
        "stream configuration update can not unseal a sealed stream"
    );
    // Reads still work.
    let st = stream_info(&c, "SL", "").await;
    assert_eq!(u(&state(&st)["messages"]), 2);
    api_ok(&c, "STREAM.MSG.GET.SL", r#"{"seq":2}"#).await;
}

#[tokio::test]
async fn deny_delete_and_deny_purge_refuse() {
    let (_s, c) = js_server().await;
    create_stream(
        &c,
        r#"{"name":"DD","subjects":["dd"],"deny_delete":true,"deny_purge":true}"#,
    )
    .await;
    publish_seq(&c, "dd", "1").await;
    publish_seq(&c, "dd", "2").await;
    // Reference: MSG.DELETE on deny_delete → 500/10057 "message delete not permitted".
    let d = api_err(&c, "STREAM.MSG.DELETE.DD", r#"{"seq":1}"#, 500, 10057).await;
    assert_eq!(d, "message delete not permitted");
    // Reference: PURGE on deny_purge → 500/10110 "stream purge not permitted".
    let d = api_err(&c, "STREAM.PURGE.DD", "", 500, 10110).await;
    assert_eq!(d, "stream purge not permitted");
    let st = stream_info(&c, "DD", "").await;
    assert_eq!(u(&state(&st)["messages"]), 2);
}

// ---------------------------------------------------------------------------------------
// Memory storage and the typed client API
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn memory_stream_works_like_file() {
    let (_s, c) = js_server().await;
    let v = create_stream(&c, r#"{"name":"M","subjects":["m.>"],"storage":"memory"}"#).await;
    assert_eq!(v["config"]["storage"], "memory");
    let ack = publish_ack(&c, "m.a", &[("Nats-Msg-Id", "x")], "mem").await;
    assert_eq!(ack["stream"], "M");
    assert_eq!(u(&ack["seq"]), 1);
    let ack = publish_ack(&c, "m.a", &[("Nats-Msg-Id", "x")], "mem").await;
    assert_eq!(ack["duplicate"].as_bool(), Some(true));
    publish_seq(&c, "m.b", "two").await;
    let v = api_ok(&c, "STREAM.MSG.GET.M", r#"{"seq":1}"#).await;
    assert_eq!(b64(v["message"]["data"].as_str().unwrap()), b"mem");
    let st = stream_info(&c, "M", "").await;
    assert_eq!(u(&state(&st)["messages"]), 2);
    assert!(u(&state(&st)["bytes"]) > 0);
    assert_eq!(u(&state(&st)["num_subjects"]), 2);
    let v = api_ok(&c, "STREAM.PURGE.M", r#"{"filter":"m.a"}"#).await;
    assert_eq!(u(&v["purged"]), 1);
    let acct = api_ok(&c, "INFO", "").await;
    assert!(u(&acct["memory"]) > 0, "memory use accounted: {acct}");
}

#[tokio::test]
async fn async_nats_stream_api_round_trip() {
    let (_s, c) = js_server().await;
    let js = jetstream::new(c.clone());
    let mut stream = js
        .create_stream(jetstream::stream::Config {
            name: "TYPED".into(),
            subjects: vec!["typed.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 0..6u64 {
        let subj = if i % 2 == 0 {
            "typed.even"
        } else {
            "typed.odd"
        };
        let ack = js
            .publish(subj, i.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.sequence, i + 1);
    }
    let info = stream.info().await.unwrap();
    assert_eq!(info.state.messages, 6);
    assert_eq!(info.config.max_messages, -1);
    assert_eq!(info.config.num_replicas, 1);

    let m = stream.get_raw_message(2).await.unwrap();
    assert_eq!(m.subject.as_str(), "typed.odd");
    assert_eq!(m.payload, "1");
    let m = stream
        .get_last_raw_message_by_subject("typed.even")
        .await
        .unwrap();
    assert_eq!(m.sequence, 5);

    assert!(stream.delete_message(1).await.unwrap());
    let r = stream.purge().filter("typed.odd").keep(1).await.unwrap();
    assert!(r.success);
    assert_eq!(r.purged, 2);
    let info = stream.info().await.unwrap();
    assert_eq!(info.state.messages, 3); // seqs 3, 5 (even) and 6 (odd)
    assert_eq!(info.state.first_sequence, 3);

    let found = js.stream_by_subject("typed.x").await.unwrap();
    assert_eq!(found, "TYPED");
    assert!(js.delete_stream("TYPED").await.unwrap().success);
    assert!(js.get_stream("TYPED").await.is_err());
}

/// Byte accounting, reservations, reply shapes and edge answers match nats-server exactly.
#[tokio::test]
async fn accounting_and_edge_answers_match_the_reference() {
    let (_s, c) = js_server().await;
    let created = create_stream(
        &c,
        r#"{"name":"ACC","subjects":["orders.>"],"max_bytes":1048576}"#,
    )
    .await;
    assert!(created.get("cluster").is_none(), "{created}");
    for _ in 0..3 {
        publish_seq(&c, "orders.new", "n1").await;
    }
    let ack = publish_ack(&c, "orders.new", &[("Nats-Msg-Id", "x")], "hi").await;
    assert!(ack.get("error").is_none(), "{ack}");
    let info = stream_info(&c, "ACC", "").await;
    assert_eq!(info["state"]["bytes"], 200, "file-store accounting: {info}");
    let acct = api_ok(&c, "INFO", "").await;
    assert_eq!(acct["reserved_storage"], 1048576, "{acct}");
    let d = api_err(&c, "STREAM.MSG.DELETE.ACC", r#"{"seq":99}"#, 500, 10057).await;
    assert_eq!(d, "stream store EOF");
    // A consumer that saw nothing moves past purged messages.
    api_ok(
        &c,
        "CONSUMER.CREATE.ACC.P",
        r#"{"stream_name":"ACC","config":{"durable_name":"P","deliver_subject":"nobody.listens","ack_policy":"explicit"}}"#,
    )
    .await;
    api_ok(&c, "STREAM.PURGE.ACC", r#"{"keep":2}"#).await;
    let ci = api_ok(&c, "CONSUMER.INFO.ACC.P", "").await;
    assert_eq!(ci["delivered"]["stream_seq"], 2, "{ci}");
    assert_eq!(ci["ack_floor"]["stream_seq"], 2, "{ci}");
    assert_eq!(ci["num_pending"], 2, "{ci}");
    assert!(ci.get("push_bound").is_none(), "{ci}");
}

#[tokio::test]
async fn republish_copies_each_stored_message_with_its_stream_headers() {
    use futures::StreamExt;
    let (_s, c) = js_server().await;
    let info = create_stream(
        &c,
        r#"{"name":"RP","subjects":["rp.>"],"republish":{"src":"rp.>","dest":"copy.>"}}"#,
    )
    .await;
    assert_eq!(info["config"]["republish"]["dest"], "copy.>");
    let mut copies = c.subscribe("copy.>").await.unwrap();
    c.flush().await.unwrap();
    assert_eq!(publish_seq(&c, "rp.a", "one").await, 1);
    assert_eq!(publish_seq(&c, "rp.b", "two").await, 2);
    assert_eq!(publish_seq(&c, "rp.a", "three").await, 3);
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = tokio::time::timeout(Duration::from_secs(5), copies.next())
            .await
            .unwrap()
            .unwrap();
        got.push((
            m.subject.to_string(),
            String::from_utf8_lossy(&m.payload).into_owned(),
            header(&m, "Nats-Stream").unwrap_or_default().to_owned(),
            header(&m, "Nats-Subject").unwrap_or_default().to_owned(),
            header(&m, "Nats-Sequence").unwrap_or_default().to_owned(),
            header(&m, "Nats-Last-Sequence")
                .unwrap_or_default()
                .to_owned(),
        ));
    }
    let row = |a: &str, b: &str, c: &str, d: &str, e: &str, f: &str| {
        (a.into(), b.into(), c.into(), d.into(), e.into(), f.into())
    };
    assert_eq!(
        got,
        vec![
            row("copy.a", "one", "RP", "rp.a", "1", "0"),
            row("copy.b", "two", "RP", "rp.b", "2", "0"),
            row("copy.a", "three", "RP", "rp.a", "3", "1"),
        ]
    );
    // Headers only: no payload, its size in Nats-Msg-Size.
    create_stream(
        &c,
        r#"{"name":"RPH","subjects":["rph.>"],"republish":{"src":"rph.>","dest":"meta.>","headers_only":true}}"#,
    )
    .await;
    let mut meta = c.subscribe("meta.>").await.unwrap();
    c.flush().await.unwrap();
    publish_seq(&c, "rph.x", "12345").await;
    let m = tokio::time::timeout(Duration::from_secs(5), meta.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "meta.x");
    assert!(m.payload.is_empty());
    assert_eq!(header(&m, "Nats-Msg-Size"), Some("5"));
    // A destination inside the stream's own subjects would loop: refused.
    let v = api(
        &c,
        "STREAM.CREATE.LOOP",
        r#"{"name":"LOOP","subjects":["loop.>"],"republish":{"src":">","dest":"loop.x.>"}}"#,
    )
    .await;
    assert_error(&v, 500, 10052);
    // A `*` in the destination is not a transform nats-server accepts (it wants `$1`).
    let v = api(
        &c,
        "STREAM.CREATE.STAR",
        r#"{"name":"STAR","subjects":["star.*"],"republish":{"src":"star.*","dest":"out.*"}}"#,
    )
    .await;
    assert_error(&v, 500, 10052);
    // The same name with a different republish is a different configuration.
    let v = api(
        &c,
        "STREAM.CREATE.RP",
        r#"{"name":"RP","subjects":["rp.>"],"republish":{"src":"rp.>","dest":"other.>"}}"#,
    )
    .await;
    assert_error(&v, 400, 10058);
}

/// ADR-56 `persist_mode`: `async` is accepted on file streams and echoed (the stream needs
/// API level 2), the default is not echoed, memory streams refuse `async`, an update may not
/// change it, and an unknown mode is invalid JSON. (sealstream still fsyncs before every
/// PubAck of an `async` stream: stronger than asked.)
#[tokio::test]
async fn persist_mode_async_is_accepted_echoed_and_fixed() {
    let s = TestServer::start_js();
    let c = async_nats::connect(s.url()).await.unwrap();
    let v = create_stream(
        &c,
        r#"{"name":"PA","subjects":["pa.>"],"persist_mode":"async"}"#,
    )
    .await;
    assert_eq!(v["config"]["persist_mode"], "async", "{v}");
    assert_eq!(v["config"]["metadata"]["_nats.req.level"], "2", "{v}");
    let info = stream_info(&c, "PA", "").await;
    assert_eq!(info["config"]["persist_mode"], "async", "{info}");
    // Still a working stream.
    assert_eq!(publish_seq(&c, "pa.x", "m").await, 1);
    let v = create_stream(
        &c,
        r#"{"name":"PD","subjects":["pd.>"],"persist_mode":"default"}"#,
    )
    .await;
    assert!(v["config"].get("persist_mode").is_none(), "{v}");
    let d = api_err(
        &c,
        "STREAM.CREATE.PM",
        r#"{"name":"PM","subjects":["pm.>"],"storage":"memory","persist_mode":"async"}"#,
        500,
        10052,
    )
    .await;
    assert_eq!(d, "async persist mode is only supported on file storage");
    for (name, body) in [
        ("PA", r#"{"name":"PA","subjects":["pa.>"]}"#),
        (
            "PD",
            r#"{"name":"PD","subjects":["pd.>"],"persist_mode":"async"}"#,
        ),
    ] {
        let d = api_err(&c, &format!("STREAM.UPDATE.{name}"), body, 500, 10052).await;
        assert_eq!(d, "stream configuration update can not change persist mode");
    }
    api_err(
        &c,
        "STREAM.CREATE.PB",
        r#"{"name":"PB","subjects":["pb.>"],"persist_mode":"sync"}"#,
        400,
        10025,
    )
    .await;
}

/// ADR-49 counter streams: each `Nats-Incr` publish stores the subject's new total as
/// `{"val":"N"}` and the PubAck carries it; publishes a counter cannot take are refused with
/// nats-server's codes; the setting is fixed at create and excludes discard new, TTLs and
/// other retentions.
#[tokio::test]
async fn counter_streams_keep_a_running_total_per_subject() {
    let s = TestServer::start_js();
    let c = async_nats::connect(s.url()).await.unwrap();
    let v = create_stream(
        &c,
        r#"{"name":"CT","subjects":["ct.>"],"allow_msg_counter":true}"#,
    )
    .await;
    assert_eq!(v["config"]["allow_msg_counter"], true, "{v}");
    assert_eq!(v["config"]["metadata"]["_nats.req.level"], "2", "{v}");
    let incr = |subject: &'static str, by: &'static str, payload: &'static str| {
        let c = c.clone();
        async move { publish_ack(&c, subject, &[("Nats-Incr", by)], payload).await }
    };
    for (subject, by, seq, total) in [
        ("ct.x", "5", 1, "5"),
        ("ct.x", "+3", 2, "8"),
        ("ct.x", "-10", 3, "-2"),
        ("ct.y", "1", 4, "1"),
        (
            "ct.y",
            "99999999999999999999999999",
            5,
            "100000000000000000000000000",
        ),
    ] {
        let ack = incr(subject, by, "").await;
        assert_eq!(ack["seq"], seq, "{ack}");
        assert_eq!(ack["val"], total, "{ack}");
    }
    let got = api_ok(&c, "STREAM.MSG.GET.CT", r#"{"last_by_subj":"ct.x"}"#).await;
    assert_eq!(
        b64(got["message"]["data"].as_str().unwrap()),
        br#"{"val":"-2"}"#
    );
    // Refusals, none of which stores anything.
    assert_error(&publish_ack(&c, "ct.x", &[], "").await, 400, 10169);
    assert_error(&incr("ct.x", "1", "data").await, 400, 10170);
    assert_error(&incr("ct.x", "1.5", "").await, 400, 10171);
    assert_error(&incr("ct.x", "abc", "").await, 400, 10171);
    let v = publish_ack(
        &c,
        "ct.x",
        &[
            ("Nats-Incr", "1"),
            ("Nats-Expected-Last-Subject-Sequence", "3"),
        ],
        "",
    )
    .await;
    assert_error(&v, 400, 10171);
    assert_eq!(stream_info(&c, "CT", "").await["state"]["messages"], 5);
    // A duplicate Nats-Msg-Id is not counted twice.
    let h = [("Nats-Incr", "1"), ("Nats-Msg-Id", "once")];
    assert_eq!(publish_ack(&c, "ct.y", &h, "").await["seq"], 6);
    let dup = publish_ack(&c, "ct.y", &h, "").await;
    assert_eq!(
        (dup["seq"].as_u64(), dup["duplicate"].as_bool()),
        (Some(6), Some(true))
    );
    // Other streams refuse Nats-Incr.
    create_stream(&c, r#"{"name":"PLAIN","subjects":["plain.>"]}"#).await;
    assert_error(&incr("plain.x", "1", "").await, 400, 10168);
    // Settings a counter stream cannot have, and updates.
    for (extra, why) in [
        (
            r#""discard":"new","max_msgs":10"#,
            "counter stream cannot use discard new",
        ),
        (
            r#""allow_msg_ttl":true"#,
            "counter stream cannot use message TTLs",
        ),
        (
            r#""retention":"workqueue""#,
            "counter stream can only use limits retention",
        ),
    ] {
        let body =
            format!(r#"{{"name":"CX","subjects":["cx.>"],"allow_msg_counter":true,{extra}}}"#);
        assert_eq!(
            api_err(&c, "STREAM.CREATE.CX", &body, 500, 10052).await,
            why
        );
    }
    for (name, body) in [
        (
            "PLAIN",
            r#"{"name":"PLAIN","subjects":["plain.>"],"allow_msg_counter":true}"#,
        ),
        ("CT", r#"{"name":"CT","subjects":["ct.>"]}"#),
    ] {
        let d = api_err(&c, &format!("STREAM.UPDATE.{name}"), body, 500, 10052).await;
        assert_eq!(
            d,
            "stream configuration update can not change message counter setting"
        );
    }
}

/// `subject_delete_marker_ttl`: a subject whose last message leaves by its `Nats-TTL` or by
/// `max_age` gets a delete marker (`Nats-Marker-Reason: MaxAge`, `Nats-TTL`, no payload),
/// which itself expires without leaving another; a subject that still has a message gets
/// none. (KV buckets with `limit_marker_ttl` rely on this: watchers see a purge.)
#[tokio::test]
async fn expiry_leaves_a_delete_marker_that_expires_in_turn() {
    let s = TestServer::start_js();
    let c = async_nats::connect(s.url()).await.unwrap();
    create_stream(
        &c,
        r#"{"name":"MK","subjects":["mk.>"],"subject_delete_marker_ttl":1000000000}"#,
    )
    .await;
    publish_ack(&c, "mk.gone", &[("Nats-TTL", "1s")], "v").await;
    publish_ack(&c, "mk.kept", &[("Nats-TTL", "1s")], "old").await;
    publish_ack(&c, "mk.kept", &[], "new").await;
    let last = |subject: &'static str| {
        let c = c.clone();
        async move {
            api(
                &c,
                "STREAM.MSG.GET.MK",
                &format!(r#"{{"last_by_subj":"{subject}"}}"#),
            )
            .await
        }
    };
    let deadline = Instant::now() + Duration::from_secs(6);
    let marker = loop {
        let v = last("mk.gone").await;
        let hdrs = v["message"]["hdrs"].as_str().map(b64).unwrap_or_default();
        if String::from_utf8_lossy(&hdrs).contains("Nats-Marker-Reason") {
            break v;
        }
        assert!(Instant::now() < deadline, "no marker for mk.gone: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let hdrs = String::from_utf8(b64(marker["message"]["hdrs"].as_str().unwrap())).unwrap();
    assert!(hdrs.contains("Nats-Marker-Reason: MaxAge\r\n"), "{hdrs:?}");
    assert!(hdrs.contains("Nats-TTL: 1s\r\n"), "{hdrs:?}");
    assert!(marker["message"].get("data").is_none(), "{marker}");
    // mk.kept still has "new": no marker, and the message stays.
    let v = last("mk.kept").await;
    assert_eq!(b64(v["message"]["data"].as_str().unwrap()), b"new", "{v}");
    // The marker leaves after its own TTL, and nothing takes its place.
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let v = last("mk.gone").await;
        if v.get("error").is_some() {
            assert_error(&v, 404, 10037);
            break;
        }
        assert!(Instant::now() < deadline, "marker never expired: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_error(&last("mk.gone").await, 404, 10037);
    assert_eq!(stream_info(&c, "MK", "").await["state"]["messages"], 1);
}

/// A stream without `allow_atomic` / `allow_msg_schedules` refuses a publish that carries
/// their headers with the codes nats-server gives — never stores it as a plain message a
/// client would take for a committed batch or an armed schedule.
#[tokio::test]
async fn batch_and_schedule_publishes_are_refused_not_stored_plain() {
    let s = TestServer::start_js();
    let c = async_nats::connect(s.url()).await.unwrap();
    create_stream(&c, r#"{"name":"NB","subjects":["nb.>"]}"#).await;
    let batch = [
        ("Nats-Batch-Id", "b1"),
        ("Nats-Batch-Sequence", "1"),
        ("Nats-Batch-Commit", "1"),
    ];
    assert_error(&publish_ack(&c, "nb.a", &batch, "x").await, 400, 10174);
    let sched = [
        ("Nats-Schedule", "@every 5s"),
        ("Nats-Schedule-Target", "nb.t"),
    ];
    assert_error(&publish_ack(&c, "nb.s", &sched, "").await, 400, 10188);
    assert_eq!(stream_info(&c, "NB", "").await["state"]["messages"], 0);
}

/// `first_seq`: a new stream starts there (info says so before anything is stored), and
/// after a restart it goes on from its last sequence.
#[tokio::test]
async fn a_stream_with_first_seq_starts_there() {
    let (mut s, c) = js_server().await;
    create_stream(&c, r#"{"name":"FS","subjects":["fs"],"first_seq":1000}"#).await;
    let st = stream_info(&c, "FS", "").await;
    assert_eq!(u(&state(&st)["first_seq"]), 1000, "{st}");
    assert_eq!(u(&state(&st)["last_seq"]), 999, "{st}");
    assert_eq!(u(&st["config"]["first_seq"]), 1000);
    assert_eq!(publish_seq(&c, "fs", "a").await, 1000);
    assert_eq!(publish_seq(&c, "fs", "b").await, 1001);
    let st = stream_info(&c, "FS", "").await;
    assert_eq!(
        (u(&state(&st)["first_seq"]), u(&state(&st)["messages"])),
        (1000, 2)
    );
    drop(c);
    s.restart(false);
    let c = client(&s).await;
    assert_eq!(publish_seq(&c, "fs", "c").await, 1002);
}

/// ADR-50 atomic batches: staged messages get an empty reply and are not visible; the commit
/// stores the whole batch and acks with `batch` and `count` (`eob`: without the commit
/// message); a gap, a duplicate id or a failed expectation stores nothing.
#[tokio::test]
async fn atomic_batches_are_stored_whole_or_not_at_all() {
    let (_s, c) = js_server().await;
    let v = create_stream(
        &c,
        r#"{"name":"AB","subjects":["ab.>"],"allow_atomic":true}"#,
    )
    .await;
    assert_eq!(v["config"]["allow_atomic"], true, "{v}");
    assert_eq!(v["config"]["metadata"]["_nats.req.level"], "2", "{v}");
    let b = |id: &'static str, seq: &'static str| {
        vec![("Nats-Batch-Id", id), ("Nats-Batch-Sequence", seq)]
    };
    let staged = publish_raw(&c, "ab.1", &b("b1", "1"), "one").await;
    assert!(staged.payload.is_empty(), "{staged:?}");
    publish_raw(&c, "ab.2", &b("b1", "2"), "two").await;
    assert_eq!(u(&state(&stream_info(&c, "AB", "").await)["messages"]), 0);
    let mut commit = b("b1", "3");
    commit.push(("Nats-Batch-Commit", "1"));
    let ack = publish_ack(&c, "ab.3", &commit, "three").await;
    assert_eq!(
        ack,
        serde_json::json!({"stream":"AB","seq":3,"batch":"b1","count":3})
    );
    // eob: the commit message is not stored.
    publish_raw(&c, "ab.4", &b("b2", "1"), "four").await;
    let mut eob = b("b2", "2");
    eob.push(("Nats-Batch-Commit", "eob"));
    let ack = publish_ack(&c, "ab.x", &eob, "").await;
    assert_eq!(
        ack,
        serde_json::json!({"stream":"AB","seq":4,"batch":"b2","count":1})
    );
    // A gap, a duplicate id, a wrong expectation: nothing of the batch is stored.
    publish_raw(&c, "ab.5", &b("g", "1"), "x").await;
    let mut gap = b("g", "3");
    gap.push(("Nats-Batch-Commit", "1"));
    assert_error(&publish_ack(&c, "ab.5", &gap, "x").await, 400, 10176);
    let mut d1 = b("d", "1");
    d1.push(("Nats-Msg-Id", "m"));
    publish_raw(&c, "ab.6", &d1, "x").await;
    let mut d2 = b("d", "2");
    d2.extend([("Nats-Msg-Id", "m"), ("Nats-Batch-Commit", "1")]);
    assert_error(&publish_ack(&c, "ab.6", &d2, "x").await, 400, 10201);
    let mut e1 = b("e", "1");
    e1.extend([
        ("Nats-Expected-Last-Sequence", "1"),
        ("Nats-Batch-Commit", "1"),
    ]);
    let ack = publish_ack(&c, "ab.7", &e1, "x").await;
    assert_eq!(ack_error(&ack, 400, 10071), "wrong last sequence: 4");
    let mut bad = b("f", "1");
    bad.push(("Nats-Batch-Commit", "yes"));
    assert_error(&publish_ack(&c, "ab.8", &bad, "x").await, 400, 10200);
    assert_error(
        &publish_ack(&c, "ab.8", &[("Nats-Batch-Id", "h")], "x").await,
        400,
        10175,
    );
    let st = stream_info(&c, "AB", "").await;
    assert_eq!(
        (u(&state(&st)["messages"]), u(&state(&st)["last_seq"])),
        (4, 4),
        "{st}"
    );
    // Staged messages keep their headers as published.
    let m = api_ok(&c, "STREAM.MSG.GET.AB", r#"{"seq":1}"#).await;
    let h = String::from_utf8(b64(m["message"]["hdrs"].as_str().unwrap())).unwrap();
    assert!(h.contains("Nats-Batch-Id: b1\r\n"), "{h}");
}

/// Bytes of every file under `dir`.
fn tree_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        total += if path.is_dir() {
            tree_bytes(&path)
        } else {
            entry.metadata().map_or(0, |m| m.len())
        };
    }
    total
}

/// What limits remove leaves the disk: a stream capped at 2 MiB that took 16 MiB keeps about
/// its cap on disk, not everything it ever took (removed messages leave a whole segment at a
/// time, and a capped stream's segments are a quarter of its cap).
#[tokio::test]
async fn a_byte_capped_stream_keeps_about_its_cap_on_disk() {
    let (s, c) = js_server().await;
    let js = jetstream::new(c.clone());
    js.create_stream(jetstream::stream::Config {
        name: "CAPPED".into(),
        subjects: vec!["capped".into()],
        max_bytes: 2 << 20,
        ..Default::default()
    })
    .await
    .unwrap();
    let payload = bytes::Bytes::from(vec![b'x'; 1024]);
    let mut acks = Vec::new();
    for _ in 0..16 * 1024 {
        acks.push(js.publish("capped", payload.clone()).await.unwrap());
        if acks.len() == 256 {
            for a in acks.drain(..) {
                a.await.unwrap();
            }
        }
    }
    for a in acks.drain(..) {
        a.await.unwrap();
    }
    let info = stream_info(&c, "CAPPED", "").await;
    assert!(u(&state(&info)["bytes"]) <= 2 << 20, "{info}");
    let on_disk = tree_bytes(&s.store_dir().unwrap().join("jetstream"));
    assert!(
        on_disk <= 6 << 20,
        "{on_disk} bytes on disk for a stream capped at 2 MiB that took 16 MiB"
    );
}
