//! The engine's decisions driven directly, with an injected clock: a stream over a memory
//! store, commands in (publish, pull, ack, tick at a chosen time) — each followed by the
//! round's closing tick, as the store thread runs them — and what it said through the
//! [`Effects`] recorded and checked. The store stamps messages with its own clock, so the test
//! clock drives it too. Ack wait, backoff, `max_deliver`, `max_ack_pending`,
//! `inactive_threshold`, retention, dedupe windows, TTLs, `max_age` and purge take
//! milliseconds of test time here; the black-box suites (`tests/js_*.rs`) check the same
//! rules through real clients.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::ack_subject::AckSubject;
use super::config::{parse_create_request, parse_stream_config};
use super::effects::{Effect, Effects, Everyone};
use super::stream::{store_limits, CreateSubject, Incoming, Stream};
use crate::store::{MemStore, StreamStore};

/// Test time zero (unix nanos): any fixed instant works, the engine reads no clock.
const T0: i64 = 1_800_000_000_000_000_000;
const MS: i64 = 1_000_000;
const SEC: i64 = 1_000 * MS;

/// One thing the engine said.
#[derive(Debug, Clone)]
struct Sent {
    to: String,
    subject: String,
    reply: Option<String>,
    headers: Option<Bytes>,
    payload: Bytes,
}

/// Everything the engine said, with one listener everywhere.
struct Recorder {
    fx: Effects,
    sent: Vec<Sent>,
    /// What it asked the runtime to persist or erase, in order.
    persisted: Vec<Effect>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            fx: Effects::new(Box::new(Everyone)),
            sent: Vec::new(),
            persisted: Vec::new(),
        }
    }
}

impl Recorder {
    /// The record so far, with the effects of the last commands moved in.
    fn sent(&mut self) -> &mut Vec<Sent> {
        for e in self.fx.take() {
            self.sent.push(match e {
                Effect::Deliver {
                    to,
                    subject,
                    reply,
                    headers,
                    payload,
                } => Sent {
                    to,
                    subject,
                    reply,
                    headers,
                    payload,
                },
                Effect::Reply { to, payload } => Sent {
                    subject: to.clone(),
                    to,
                    reply: None,
                    headers: None,
                    payload,
                },
                persistence => {
                    self.persisted.push(persistence);
                    continue;
                }
            });
        }
        &mut self.sent
    }

    /// Messages delivered to `inbox` (status messages left out), taken from the record.
    fn delivered(&mut self, inbox: &str) -> Vec<Sent> {
        let (mine, rest): (Vec<Sent>, Vec<Sent>) = std::mem::take(self.sent())
            .into_iter()
            .partition(|s| s.to == inbox && s.reply.is_some());
        self.sent = rest;
        mine
    }
}

struct Harness {
    st: Stream,
    out: Recorder,
    /// The store's clock (message timestamps), set to each command's `now`.
    clock: Arc<AtomicI64>,
}

impl Harness {
    fn new(config: Value) -> Self {
        let mut cfg = parse_stream_config(config.to_string().as_bytes()).unwrap();
        cfg.normalize("2.11.0").unwrap();
        let clock = Arc::new(AtomicI64::new(T0));
        let read = Arc::clone(&clock);
        let store: Box<dyn StreamStore> = Box::new(MemStore::with_clock(
            store_limits(&cfg),
            Arc::new(move || read.load(Ordering::Relaxed)),
        ));
        Harness {
            st: Stream::new(cfg, T0, store, "test", T0),
            out: Recorder::default(),
            clock,
        }
    }

    /// The store thread's round ends with a tick: timers, then delivery.
    fn end_round(&mut self, now: i64) {
        self.st.tick(&mut self.out.fx, now);
    }

    /// Publishes with a reply and returns the pub-ack (or error) body.
    fn publish(&mut self, subject: &str, headers: &[(&str, &str)], now: i64) -> Value {
        let headers = (!headers.is_empty()).then(|| {
            let mut h = String::from("NATS/1.0\r\n");
            for (k, v) in headers {
                h.push_str(&format!("{k}: {v}\r\n"));
            }
            h.push_str("\r\n");
            Bytes::from(h)
        });
        let reply = format!("_INBOX.ack.{}", self.out.sent().len());
        let m = Incoming {
            subject: subject.to_owned(),
            reply: Some(reply.clone()),
            headers,
            payload: Bytes::from_static(b"data"),
        };
        self.clock.store(now, Ordering::Relaxed);
        self.st.publish(vec![m], &mut self.out.fx, now);
        self.end_round(now);
        let i = self
            .out
            .sent()
            .iter()
            .position(|s| s.to == reply)
            .expect("a pub-ack");
        let ack = self.out.sent().remove(i);
        serde_json::from_slice(&ack.payload).unwrap()
    }

    fn consumer(&mut self, name: &str, config: Value, now: i64) {
        let body = json!({"stream_name": self.st.cfg.name, "config": config});
        let req = parse_create_request(body.to_string().as_bytes()).unwrap();
        self.st
            .create_consumer(
                req,
                CreateSubject {
                    consumer: Some(name),
                    ..CreateSubject::default()
                },
                "2.11.0",
                now,
                &mut self.out.fx,
            )
            .unwrap();
    }

    fn pull(&mut self, consumer: &str, body: Value, inbox: &str, now: i64) -> Vec<Sent> {
        self.st.pull(
            consumer,
            body.to_string().as_bytes(),
            inbox,
            &mut self.out.fx,
            now,
        );
        self.end_round(now);
        self.out.delivered(inbox)
    }

    fn ack(&mut self, msg: &Sent, body: &str, now: i64) {
        let subject = msg.reply.clone().unwrap();
        self.st
            .ack(&subject, body.as_bytes(), None, &mut self.out.fx, now);
        self.end_round(now);
    }

    fn tick(&mut self, now: i64) {
        self.clock.store(now, Ordering::Relaxed);
        self.end_round(now);
    }

    fn messages(&self) -> u64 {
        self.st.store().state().msgs
    }
}

/// How many times a delivered message has been delivered (from its ack subject).
fn delivery_count(m: &Sent) -> u64 {
    AckSubject::parse(m.reply.as_deref().unwrap())
        .unwrap()
        .delivered
}

fn stream_seq(m: &Sent) -> u64 {
    AckSubject::parse(m.reply.as_deref().unwrap())
        .unwrap()
        .stream_seq
}

fn long_pull(batch: u64) -> Value {
    json!({"batch": batch, "expires": 3600 * SEC})
}

#[test]
fn an_unacked_message_is_redelivered_once_ack_wait_has_passed_not_before() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit", "ack_wait": SEC}),
        T0,
    );
    h.publish("s.1", &[], T0);
    let first = h.pull("c", long_pull(1), "in.1", T0);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].subject, "s.1");
    assert!(first[0].headers.is_none());
    assert_eq!(delivery_count(&first[0]), 1);
    h.pull("c", long_pull(1), "in.2", T0);
    h.tick(T0 + SEC - MS);
    assert!(h.out.delivered("in.2").is_empty(), "redelivered early");
    h.tick(T0 + SEC + MS);
    let again = h.out.delivered("in.2");
    assert_eq!(again.len(), 1);
    assert_eq!(stream_seq(&again[0]), 1);
    assert_eq!(delivery_count(&again[0]), 2);
    // Acked: never again.
    h.ack(&again[0], "+ACK", T0 + SEC + 2 * MS);
    h.pull("c", long_pull(1), "in.3", T0 + SEC + 2 * MS);
    h.tick(T0 + 10 * SEC);
    assert!(h.out.delivered("in.3").is_empty());
}

#[test]
fn backoff_sets_each_redelivery_and_max_deliver_ends_them() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit",
               "backoff": [SEC, 5 * SEC], "max_deliver": 3}),
        T0,
    );
    h.publish("s.1", &[], T0);
    assert_eq!(h.pull("c", long_pull(1), "in", T0).len(), 1);
    // Second delivery after the first backoff step (1 s) ...
    h.pull("c", long_pull(10), "in", T0);
    h.tick(T0 + SEC - MS);
    assert!(h.out.delivered("in").is_empty());
    h.tick(T0 + SEC + MS);
    let second = h.out.delivered("in");
    assert_eq!(second.iter().map(delivery_count).collect::<Vec<_>>(), [2]);
    // ... the third after the second step (5 s after the second delivery) ...
    let t2 = T0 + SEC + MS;
    h.tick(t2 + 5 * SEC - MS);
    assert!(h.out.delivered("in").is_empty());
    h.tick(t2 + 5 * SEC + MS);
    let third = h.out.delivered("in");
    assert_eq!(third.iter().map(delivery_count).collect::<Vec<_>>(), [3]);
    // ... and max_deliver 3 means no fourth, however long we wait.
    h.tick(t2 + 600 * SEC);
    assert!(h.out.delivered("in").is_empty());
}

#[test]
fn max_ack_pending_holds_delivery_until_an_ack_makes_room() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit", "max_ack_pending": 2}),
        T0,
    );
    for i in 0..5 {
        h.publish(&format!("s.{i}"), &[], T0);
    }
    let got = h.pull("c", long_pull(5), "in", T0);
    assert_eq!(got.iter().map(stream_seq).collect::<Vec<_>>(), [1, 2]);
    h.ack(&got[0], "+ACK", T0 + MS);
    h.tick(T0 + MS);
    let more = h.out.delivered("in");
    assert_eq!(more.iter().map(stream_seq).collect::<Vec<_>>(), [3]);
}

#[test]
fn an_idle_ephemeral_consumer_is_removed_after_inactive_threshold() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.consumer(
        "eph",
        json!({"ack_policy": "explicit", "inactive_threshold": 2 * SEC}),
        T0,
    );
    assert!(h.st.consumers.contains_key("eph"));
    h.tick(T0 + 2 * SEC - MS);
    assert!(h.st.consumers.contains_key("eph"), "removed early");
    h.tick(T0 + 2 * SEC + MS);
    assert!(!h.st.consumers.contains_key("eph"));
}

#[test]
fn workqueue_retention_removes_a_message_when_it_is_acked() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"], "retention": "workqueue"}));
    h.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit"}),
        T0,
    );
    h.publish("s.1", &[], T0);
    h.publish("s.2", &[], T0);
    let got = h.pull("c", long_pull(2), "in", T0);
    assert_eq!(h.messages(), 2);
    h.ack(&got[0], "+ACK", T0 + MS);
    assert_eq!(h.messages(), 1);
    h.ack(&got[1], "+ACK", T0 + MS);
    assert_eq!(h.messages(), 0);
}

#[test]
fn interest_retention_keeps_a_message_until_every_consumer_acked_it() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"], "retention": "interest"}));
    h.consumer(
        "a",
        json!({"durable_name": "a", "ack_policy": "explicit"}),
        T0,
    );
    h.consumer(
        "b",
        json!({"durable_name": "b", "ack_policy": "explicit"}),
        T0,
    );
    h.publish("s.1", &[], T0);
    let a = h.pull("a", long_pull(1), "in.a", T0);
    let b = h.pull("b", long_pull(1), "in.b", T0);
    h.ack(&a[0], "+ACK", T0 + MS);
    assert_eq!(h.messages(), 1, "b has not acked yet");
    h.ack(&b[0], "+ACK", T0 + MS);
    assert_eq!(h.messages(), 0);
}

#[test]
fn limits_retention_keeps_acked_messages_and_max_age_expires_them() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"], "max_age": 10 * SEC}));
    h.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit"}),
        T0,
    );
    h.publish("s.1", &[], T0);
    let got = h.pull("c", long_pull(1), "in", T0);
    h.ack(&got[0], "+ACK", T0 + MS);
    assert_eq!(h.messages(), 1);
    assert_eq!(h.st.next_deadline(), Some(T0 + 10 * SEC));
    h.tick(T0 + 10 * SEC - MS);
    assert_eq!(h.messages(), 1);
    h.tick(T0 + 10 * SEC + MS);
    assert_eq!(h.messages(), 0);
}

#[test]
fn a_msg_id_is_a_duplicate_within_the_window_and_new_after_it() {
    let mut h =
        Harness::new(json!({"name": "S", "subjects": ["s.>"], "duplicate_window": 5 * SEC}));
    let id = [("Nats-Msg-Id", "order-1")];
    assert_eq!(h.publish("s.1", &id, T0)["seq"], 1);
    let dup = h.publish("s.1", &id, T0 + 4 * SEC);
    assert_eq!(dup["seq"], 1);
    assert_eq!(dup["duplicate"], true);
    assert_eq!(h.messages(), 1);
    let later = h.publish("s.1", &id, T0 + 6 * SEC);
    assert_eq!(later["seq"], 2);
    assert!(later.get("duplicate").is_none());
}

#[test]
fn a_message_ttl_removes_it_when_due() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"], "allow_msg_ttl": true}));
    assert_eq!(h.publish("s.1", &[("Nats-TTL", "2s")], T0)["seq"], 1);
    h.publish("s.2", &[], T0);
    assert_eq!(h.st.next_deadline(), Some(T0 + 2 * SEC));
    h.tick(T0 + 2 * SEC - MS);
    assert_eq!(h.messages(), 2);
    h.tick(T0 + 2 * SEC);
    assert_eq!(h.messages(), 1);
    // A TTL on a stream that does not allow them is refused.
    let mut plain = Harness::new(json!({"name": "P", "subjects": ["p.>"]}));
    assert!(plain.publish("p.1", &[("Nats-TTL", "2s")], T0)["error"].is_object());
}

#[test]
fn an_expired_last_message_leaves_a_marker_that_expires_without_another() {
    let mut h = Harness::new(
        json!({"name": "S", "subjects": ["s.>"], "subject_delete_marker_ttl": 1_000_000_000i64}),
    );
    h.publish("s.gone", &[("Nats-TTL", "2s")], T0);
    h.publish("s.kept", &[("Nats-TTL", "2s")], T0);
    h.publish("s.kept", &[], T0);
    h.tick(T0 + 2 * SEC);
    // s.gone: its message left, a marker (seq 4) took its place; s.kept still has one.
    assert_eq!(h.messages(), 2);
    let m = h.st.store().last_by_subject("s.gone").unwrap().unwrap();
    assert_eq!(m.seq, 4);
    let hdrs = String::from_utf8(m.headers.unwrap().to_vec()).unwrap();
    assert!(hdrs.contains("Nats-Marker-Reason: MaxAge\r\n") && hdrs.contains("Nats-TTL: 1s\r\n"));
    assert!(m.payload.is_empty());
    // The marker's own TTL removes it; no marker follows a marker.
    h.tick(T0 + 3 * SEC + MS);
    assert_eq!(h.messages(), 1);
    assert!(h.st.store().last_by_subject("s.gone").unwrap().is_none());
    h.tick(T0 + 5 * SEC);
    assert_eq!(h.messages(), 1);
}

#[test]
fn max_age_leaves_a_marker_for_a_subject_it_empties() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"],
        "max_age": 2_000_000_000i64, "subject_delete_marker_ttl": 1_000_000_000i64}));
    h.publish("s.old", &[], T0);
    h.publish("s.both", &[], T0);
    h.publish("s.both", &[], T0 + SEC);
    h.tick(T0 + 2 * SEC + MS);
    // s.old emptied: a marker; s.both keeps its newer message: none.
    let m = h.st.store().last_by_subject("s.old").unwrap().unwrap();
    assert!(String::from_utf8(m.headers.unwrap().to_vec())
        .unwrap()
        .contains("Nats-Marker-Reason: MaxAge\r\n"));
    assert_eq!(
        h.st.store().last_by_subject("s.both").unwrap().unwrap().seq,
        3
    );
    assert_eq!(h.messages(), 2);
}

#[test]
fn purge_by_subject_and_keep() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    for s in ["s.a", "s.b", "s.a", "s.b", "s.a"] {
        h.publish(s, &[], T0);
    }
    let r = h.st.purge(Some(&json!({"filter": "s.b"}))).unwrap();
    assert_eq!(r["purged"], 2);
    assert_eq!(h.messages(), 3);
    let r = h.st.purge(Some(&json!({"keep": 1}))).unwrap();
    assert_eq!(r["purged"], 2);
    assert_eq!(h.messages(), 1);
    assert_eq!(h.st.store().state().last_seq, 5);
}

#[test]
fn a_paused_consumer_delivers_nothing_until_its_pause_ends_or_it_is_resumed() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit"}),
        T0,
    );
    for i in 0..3 {
        h.publish(&format!("s.{i}"), &[], T0);
    }
    let until = crate::timefmt::rfc3339_nanos(T0 + 2 * SEC);
    let r =
        h.st.consumer_pause(
            "c",
            Some(&json!({ "pause_until": until })),
            T0,
            &mut h.out.fx,
        )
        .unwrap();
    assert_eq!(r["paused"], true);
    assert_eq!(r["pause_remaining"], 2 * SEC);
    let info = h.st.consumer_info("c", T0 + SEC).unwrap();
    assert_eq!((info.paused, info.pause_remaining), (true, Some(SEC)));
    assert_eq!(
        serde_json::to_value(&info).unwrap()["config"]["pause_until"],
        until.as_str()
    );
    // A waiting request gets nothing while paused ...
    assert!(h.pull("c", long_pull(2), "in", T0 + SEC).is_empty());
    // ... and its messages as soon as the pause is over: the pause end is a deadline.
    assert_eq!(h.st.next_deadline(), Some(T0 + 2 * SEC));
    h.tick(T0 + 2 * SEC + MS);
    let got = h.out.delivered("in");
    assert_eq!(got.iter().map(stream_seq).collect::<Vec<_>>(), [1, 2]);
    let info = h.st.consumer_info("c", T0 + 3 * SEC).unwrap();
    assert!(!info.paused);
    assert!(serde_json::to_value(&info).unwrap().get("paused").is_none());
    // Paused far ahead, then resumed with an empty body: delivery goes on at once.
    let far = crate::timefmt::rfc3339_nanos(T0 + 3600 * SEC);
    h.st.consumer_pause(
        "c",
        Some(&json!({ "pause_until": far })),
        T0 + 3 * SEC,
        &mut h.out.fx,
    )
    .unwrap();
    assert!(h.pull("c", long_pull(1), "in2", T0 + 3 * SEC).is_empty());
    let r =
        h.st.consumer_pause("c", None, T0 + 4 * SEC, &mut h.out.fx)
            .unwrap();
    assert_eq!(r["paused"], false);
    h.tick(T0 + 4 * SEC);
    assert_eq!(
        h.out
            .delivered("in2")
            .iter()
            .map(stream_seq)
            .collect::<Vec<_>>(),
        [3]
    );
    // Unknown consumer, bad time.
    assert!(h
        .st
        .consumer_pause("nope", None, T0, &mut h.out.fx)
        .is_err());
    assert!(h
        .st
        .consumer_pause(
            "c",
            Some(&json!({"pause_until": "soon"})),
            T0,
            &mut h.out.fx
        )
        .is_err());
}

#[test]
fn a_nak_takes_effect_at_once_and_its_message_goes_out_before_new_ones() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit"}),
        T0,
    );
    h.publish("s.1", &[], T0);
    h.publish("s.2", &[], T0);
    let first = h.pull("c", long_pull(1), "in.1", T0);
    assert_eq!(stream_seq(&first[0]), 1);
    // A NAK takes effect at once, not at the next timer pass: delivery right after it
    // (no consumer tick between) redelivers the NAKed message before anything new.
    let subject = first[0].reply.clone().unwrap();
    h.st.ack(&subject, b"-NAK", None, &mut h.out.fx, T0 + MS);
    h.st.pull(
        "c",
        long_pull(1).to_string().as_bytes(),
        "in.2",
        &mut h.out.fx,
        T0 + MS,
    );
    h.st.run_consumers(&mut h.out.fx, T0 + MS);
    let again = h.out.delivered("in.2");
    assert_eq!(again.len(), 1);
    assert_eq!((stream_seq(&again[0]), delivery_count(&again[0])), (1, 2));
}

/// Interest is an input: nobody listens on this one subject.
struct AllBut(&'static str);

impl super::effects::Interest for AllBut {
    fn has_interest(&mut self, subject: &str) -> bool {
        subject != self.0
    }
}

#[test]
fn a_pull_whose_requester_left_is_dropped_and_its_message_kept() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.out.fx = Effects::new(Box::new(AllBut("gone")));
    h.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit"}),
        T0,
    );
    h.publish("s.1", &[], T0);
    // Nobody listens on `gone`: nothing is said to it, nothing counts as delivered.
    assert!(h.pull("c", long_pull(1), "gone", T0).is_empty());
    assert!(h.out.sent().iter().all(|s| s.to != "gone"));
    // The message waits for the next requester, as a first delivery.
    let got = h.pull("c", long_pull(1), "in", T0 + MS);
    assert_eq!(got.len(), 1);
    assert_eq!((stream_seq(&got[0]), delivery_count(&got[0])), (1, 1));
}

#[test]
fn config_changes_are_effects_the_runtime_persists_in_order() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.consumer(
        "d",
        json!({"durable_name": "d", "ack_policy": "explicit"}),
        T0,
    );
    h.consumer(
        "eph",
        json!({"ack_policy": "explicit", "inactive_threshold": 2 * SEC}),
        T0,
    );
    h.st.consumer_pause("d", None, T0, &mut h.out.fx).unwrap();
    h.st.consumer_delete("d", &mut h.out.fx).unwrap();
    let mut cfg = h.st.cfg.clone();
    cfg.max_msgs = 10;
    h.st.update(cfg, &mut h.out.fx).unwrap();
    // Inactivity removes the ephemeral consumer: the runtime erases it as it would a delete.
    h.tick(T0 + 3 * SEC);
    h.out.sent();
    let names: Vec<String> = h
        .out
        .persisted
        .iter()
        .map(|e| match e {
            Effect::PersistConsumer { name } => format!("persist {name}"),
            Effect::ForgetConsumer { name } => format!("forget {name}"),
            Effect::PersistStreamConfig => "stream config".to_owned(),
            other => panic!("not a persistence effect: {other:?}"),
        })
        .collect();
    assert_eq!(
        names,
        [
            "persist d",
            "persist eph",
            "persist d",
            "forget d",
            "stream config",
            "forget eph"
        ]
    );
    // A failed call asks for nothing.
    assert!(h.st.consumer_delete("d", &mut h.out.fx).is_err());
    assert!(h.out.fx.is_empty());
}

#[test]
fn a_consumer_created_as_its_messages_expire_counts_only_what_it_will_deliver() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"], "max_age": 100 * MS}));
    h.publish("s.1", &[], T0);
    let create = |h: &mut Harness, now: i64| {
        h.clock.store(now, Ordering::Relaxed);
        let body = json!({"stream_name": "S", "config": {
            "deliver_subject": format!("in.{now}"), "deliver_policy": "last_per_subject",
            "ack_policy": "none", "filter_subject": "s.>"}});
        let req = parse_create_request(body.to_string().as_bytes()).unwrap();
        let info =
            h.st.create_consumer(req, CreateSubject::default(), "2.11.0", now, &mut h.out.fx)
                .unwrap();
        h.end_round(now);
        (
            info.num_pending,
            h.out.delivered(&format!("in.{now}")).len(),
        )
    };
    // Before max_age: counted and delivered.
    assert_eq!(create(&mut h, T0 + 50 * MS), (1, 1));
    // Created in the round that removes it: neither counted nor delivered (counted but not
    // delivered, a client reading until nothing is pending would wait forever).
    assert_eq!(create(&mut h, T0 + 100 * MS + 1), (0, 0));
}

#[test]
fn a_push_consumer_without_a_subscriber_checks_again_soon_then_less_often() {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.out.fx = Effects::new(Box::new(AllBut("late")));
    h.publish("s.1", &[], T0);
    h.consumer(
        "p",
        json!({"deliver_subject": "late", "ack_policy": "none"}),
        T0,
    );
    h.end_round(T0);
    // Checks 1 ms apart at first, doubling (the client subscribes right after the create).
    let mut at = T0;
    for wait in [1, 2, 4, 8] {
        assert_eq!(h.st.next_deadline(), Some(at + wait * MS));
        at += wait * MS;
        h.tick(at);
    }
    assert!(h.out.delivered("late").is_empty());
    // The subscriber arrives: the next check delivers.
    h.out.sent();
    h.out.fx = Effects::new(Box::new(Everyone));
    let next = h.st.next_deadline().unwrap();
    assert_eq!(next, at + 16 * MS);
    h.tick(next);
    assert_eq!(h.out.delivered("late").len(), 1);
}

impl Harness {
    /// A second stream started from this one's image (encoded and decoded, as a snapshot
    /// travels), over a memory store on the same clock.
    fn restarted_from_image(&self) -> Harness {
        let bytes = self.st.image().unwrap().encode();
        let image = super::image::StreamImage::decode(&bytes).unwrap();
        let clock = Arc::new(AtomicI64::new(self.clock.load(Ordering::Relaxed)));
        let read = Arc::clone(&clock);
        let store: Box<dyn StreamStore> = Box::new(MemStore::with_clock(
            store_limits(&self.st.cfg),
            Arc::new(move || read.load(Ordering::Relaxed)),
        ));
        let now = clock.load(Ordering::Relaxed);
        Harness {
            st: Stream::from_image(image, store, "test", now).unwrap(),
            out: Recorder::default(),
            clock,
        }
    }

    /// Stream and consumer info as JSON, for comparing two streams.
    fn infos(&self, now: i64) -> Value {
        let info = self
            .st
            .info(&super::api::types::StreamInfoRequest::default(), now);
        let consumers: Vec<Value> = self
            .st
            .consumers
            .keys()
            .map(|c| serde_json::to_value(self.st.consumer_info(c, now).unwrap()).unwrap())
            .collect();
        json!({"stream": serde_json::to_value(info).unwrap(), "consumers": consumers})
    }
}

/// What two replicas said, as comparable text.
fn said(r: &mut Recorder) -> Vec<String> {
    std::mem::take(r.sent())
        .iter()
        .map(|s| format!("{s:?}"))
        .collect()
}

#[test]
fn a_stream_started_from_its_image_runs_the_next_rounds_exactly_as_the_original() {
    let mut a = Harness::new(json!({"name": "S", "subjects": ["s.>"],
        "duplicate_window": 120 * SEC, "allow_msg_ttl": true}));
    a.consumer(
        "c",
        json!({"durable_name": "c", "ack_policy": "explicit", "ack_wait": SEC}),
        T0,
    );
    a.publish("s.1", &[("Nats-Msg-Id", "a")], T0);
    a.publish("s.2", &[], T0);
    a.publish("s.3", &[("Nats-TTL", "5s")], T0);
    a.publish("s.4", &[], T0);
    // A gap in the middle and a deleted newest message.
    a.st.msg_delete(Some(&json!({"seq": 2}))).unwrap();
    a.st.msg_delete(Some(&json!({"seq": 4}))).unwrap();
    // One delivery pending, one pull request still waiting for two more.
    assert_eq!(a.pull("c", long_pull(1), "in.1", T0 + MS).len(), 1);
    assert_eq!(a.pull("c", long_pull(3), "in.wait", T0 + 2 * MS).len(), 1);
    said(&mut a.out);

    let mut b = a.restarted_from_image();
    assert_eq!(b.st.store().state(), a.st.store().state());
    assert_eq!(b.infos(T0 + 3 * MS), a.infos(T0 + 3 * MS));

    // The same rounds on both: a duplicate (the window came along), a new message for the
    // waiting pull, redeliveries at the original deadlines, the TTL expiring, an ack.
    for h in [&mut a, &mut b] {
        let dup = h.publish("s.5", &[("Nats-Msg-Id", "a")], T0 + 10 * MS);
        assert_eq!(dup["duplicate"], json!(true));
        assert_eq!(dup["seq"], json!(1));
        h.publish("s.6", &[], T0 + 20 * MS);
        h.tick(T0 + SEC + 5 * MS);
        h.tick(T0 + 6 * SEC);
    }
    assert_eq!(said(&mut b.out), said(&mut a.out));
    assert_eq!(b.infos(T0 + 6 * SEC), a.infos(T0 + 6 * SEC));
    assert_eq!(b.st.store().state(), a.st.store().state());
    assert_eq!(
        b.st.store().state().last_seq,
        5,
        "s.6 took sequence 5 on both"
    );
}

#[test]
fn an_image_of_an_emptied_stream_keeps_its_sequences() {
    let mut a = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    for i in 0..5 {
        a.publish(&format!("s.{i}"), &[], T0);
    }
    a.st.purge(None).unwrap();
    let mut b = a.restarted_from_image();
    assert_eq!(b.st.store().state(), a.st.store().state());
    assert_eq!(b.publish("s.x", &[], T0 + MS)["seq"], json!(6));
}

#[test]
fn bytes_that_are_not_an_image_are_refused() {
    assert!(super::image::StreamImage::decode(b"\xff\xff\xff not an image").is_err());
}

/// [`prioritized_harness`] with a pull of priority 1 (batch 2) from `in.low` held at
/// `T0 + MS`.
fn held_pull_harness() -> Harness {
    let mut h = prioritized_harness();
    assert!(h
        .pull("p", prioritized_pull(2, 1), "in.low", T0 + MS)
        .is_empty());
    h
}

fn prioritized_harness() -> Harness {
    let mut h = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    h.consumer(
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit",
               "priority_policy": "prioritized", "priority_groups": ["G"]}),
        T0,
    );
    for i in 0..4 {
        h.publish(&format!("s.{i}"), &[], T0);
    }
    h
}

fn prioritized_pull(batch: u64, priority: i64) -> Value {
    json!({"batch": batch, "expires": 3600 * SEC, "group": "G", "priority": priority})
}

/// Two pulls a client sends in one instant reach the stream one after the other: the one of
/// priority 1, first, is held for `PRIORITY_HOLD_NS`, so the one of priority 0 is served first
/// (as nats-server serves requests it read together); then the held one gets the rest.
#[test]
fn a_prioritized_pull_above_zero_waits_briefly_for_a_better_one() {
    let mut h = held_pull_harness();
    assert_eq!(
        h.st.next_deadline(),
        Some(T0 + MS + super::consumer::PRIORITY_HOLD_NS)
    );
    let high = h.pull("p", prioritized_pull(2, 0), "in.high", T0 + MS + 50_000);
    assert_eq!(high.iter().map(stream_seq).collect::<Vec<_>>(), vec![1, 2]);
    h.tick(T0 + MS + super::consumer::PRIORITY_HOLD_NS - 1);
    assert!(
        h.out.delivered("in.low").is_empty(),
        "served before its hold ended"
    );
    h.tick(T0 + MS + super::consumer::PRIORITY_HOLD_NS);
    let low = h.out.delivered("in.low");
    assert_eq!(low.iter().map(stream_seq).collect::<Vec<_>>(), vec![3, 4]);
    // Priority 0 is never held.
    let mut h = prioritized_harness();
    assert_eq!(
        h.pull("p", prioritized_pull(1, 0), "in.0", T0 + MS).len(),
        1
    );
    // A worse request whose hold ends first still waits for the better one's.
    let mut h = prioritized_harness();
    let hold = super::consumer::PRIORITY_HOLD_NS;
    assert!(h.pull("p", prioritized_pull(2, 5), "in.5", T0).is_empty());
    assert!(h
        .pull("p", prioritized_pull(2, 1), "in.1", T0 + MS)
        .is_empty());
    h.tick(T0 + hold);
    assert!(
        h.out.delivered("in.5").is_empty(),
        "served ahead of a better request"
    );
    h.tick(T0 + MS + hold);
    let one = h.out.delivered("in.1");
    assert_eq!(one.iter().map(stream_seq).collect::<Vec<_>>(), vec![1, 2]);
    let five = h.out.delivered("in.5");
    assert_eq!(five.iter().map(stream_seq).collect::<Vec<_>>(), vec![3, 4]);
}

/// A held pull travels in the image: a replica started from it serves it at the same moment
/// as the original. Images of the earlier format (no trailing part) still decode, and the
/// earlier decoder reads a new image up to its trailing part.
#[test]
fn an_image_keeps_a_held_pull_and_images_of_the_earlier_format_still_decode() {
    let mut a = held_pull_harness();
    let image = a.st.image().unwrap();
    assert_eq!(image.extras.pull_holds.len(), 1);
    let mut b = a.restarted_from_image();
    for h in [&mut a, &mut b] {
        h.tick(T0 + 2 * MS);
        assert!(h.out.delivered("in.low").is_empty());
        h.tick(T0 + MS + super::consumer::PRIORITY_HOLD_NS);
        assert_eq!(h.out.delivered("in.low").len(), 2);
    }
    let old_format = postcard::to_stdvec(&image).unwrap();
    let decoded = super::image::StreamImage::decode(&old_format).unwrap();
    assert_eq!(decoded.extras, super::image::ImageExtras::default());
    assert_eq!(decoded.last_seq, 4);
    assert_eq!(decoded.messages.len(), 4);
}

/// A snapshot is written as the store is read and installed as it is read: the streamed
/// image carries the same state as the whole one, its head is the earlier format's value
/// without messages, and an image cut anywhere is refused, never installed in part.
#[test]
fn a_streamed_image_installs_the_same_stream_and_one_cut_short_is_refused() {
    let mut a = held_pull_harness();
    let mut streamed = Vec::new();
    a.st.write_image(&mut streamed).unwrap();
    let whole = a.st.image().unwrap();
    assert_eq!(
        streamed,
        whole.encode(),
        "two writers of one image disagree"
    );
    // Read through a reader that hands out a few bytes at a time, as a snapshot file does
    // a frame at a time.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = out.len().min(self.0.len()).min(5);
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let (head, messages) = super::image::read(Trickle(&streamed)).unwrap();
    assert!(head.messages.is_empty());
    let mut bare = a.st.image().unwrap();
    bare.messages.clear();
    let mut earlier = postcard::to_stdvec(&bare).unwrap();
    earlier.extend(postcard::to_stdvec(&bare.extras).unwrap());
    earlier.extend(postcard::to_stdvec(&bare.sourcing).unwrap());
    assert_eq!(
        super::image::StreamImage::decode(&earlier)
            .unwrap()
            .encode(),
        head.encode()
    );
    let store: Box<dyn StreamStore> = Box::new(MemStore::new(store_limits(&a.st.cfg)));
    let mut b = Harness {
        st: Stream::from_image_parts(head, messages, store, "test", T0 + MS).unwrap(),
        out: Recorder::default(),
        clock: Arc::new(AtomicI64::new(T0 + MS)),
    };
    assert_eq!(a.infos(T0 + MS), b.infos(T0 + MS));
    for h in [&mut a, &mut b] {
        h.tick(T0 + MS + super::consumer::PRIORITY_HOLD_NS);
        assert_eq!(h.out.delivered("in.low").len(), 2);
    }
    for cut in [9, streamed.len() / 2, streamed.len() - 1] {
        let r = super::image::read(&streamed[..cut]).and_then(|(head, messages)| {
            let store: Box<dyn StreamStore> = Box::new(MemStore::new(store_limits(&head.cfg)));
            Stream::from_image_parts(head, messages, store, "test", T0).map(|_| ())
        });
        assert!(
            r.is_err(),
            "an image cut at {cut} of {} installed",
            streamed.len()
        );
    }
}

/// A file stream's image can be taken at one moment and written later, on another thread,
/// while the stream goes on (how a replicated stream's snapshot leaves its shard free): the
/// bytes are those the stream would have written at that moment.
#[test]
fn an_image_taken_now_and_written_later_is_the_image_of_its_moment() {
    let a = held_pull_harness();
    let mut bytes = Vec::new();
    a.st.write_image(&mut bytes).unwrap();
    let (head, messages) = super::image::read(&bytes[..]).unwrap();
    let io = crate::store::io::FaultIo::new();
    let store: Box<dyn StreamStore> = Box::new(crate::store::testing::support::open(&io).unwrap());
    let mut b = Harness {
        st: Stream::from_image_parts(head, messages, store, "test", T0 + MS).unwrap(),
        out: Recorder::default(),
        clock: Arc::new(AtomicI64::new(T0 + MS)),
    };
    for i in 0..30 {
        b.publish(&format!("s.{}", i % 4), &[("K", "v")], T0 + MS);
    }
    let mut now = Vec::new();
    b.st.write_image(&mut now).unwrap();
    let detached =
        b.st.detached_image()
            .unwrap()
            .expect("a file store reads apart");
    // The stream goes on: more messages, and a pull that changes its consumer.
    for i in 0..10 {
        b.publish(&format!("s.{i}"), &[], T0 + 2 * MS);
    }
    assert!(!b
        .pull("p", prioritized_pull(3, 0), "in.late", T0 + 2 * MS)
        .is_empty());
    let later = std::thread::spawn(move || {
        let mut out = Vec::new();
        detached.write(&mut out).unwrap();
        out
    })
    .join()
    .unwrap();
    assert_eq!(later, now, "the detached image is of its moment");
    let mut after = Vec::new();
    b.st.write_image(&mut after).unwrap();
    assert_ne!(after, now);
    // A memory store is read in place.
    assert!(a.st.detached_image().unwrap().is_none());
}

/// A replicated copying stream stores each batch its leader read when the round applies; a
/// batch applied again over one position (read twice before the first was applied) stores
/// nothing twice. The links' positions travel in the image: here the origin's last message
/// is not copied (filtered), which the copies alone cannot tell, so the earlier format — no
/// positions — reads it again.
#[test]
fn a_sourced_batch_applied_twice_stores_once_and_an_image_keeps_where_its_links_stand() {
    use crate::store::NewMsg;
    let mut origin = MemStore::new(crate::store::StoreLimits::default());
    let msgs: Vec<NewMsg> = ["orders.eu.1", "orders.eu.2", "orders.us.3"]
        .iter()
        .map(|s| NewMsg::new(*s, "x"))
        .collect();
    origin.append_batch(&msgs).unwrap();
    let mut h = Harness::new(json!({"name": "EU", "sources": [
        {"name": "ORDERS", "filter_subject": "orders.eu.>"}]}));
    let link = h.st.source_links()[0].clone();
    let read = super::source::read_batch(&origin, &link).unwrap();
    let again = super::source::read_batch(&origin, &link).unwrap();
    h.st.take_sourced(0, read, &mut h.out.fx, T0);
    h.st.take_sourced(0, again, &mut h.out.fx, T0);
    h.end_round(T0);
    assert_eq!(h.st.store().state().msgs, 2);
    assert_eq!(h.st.source_links()[0].next_seq, 4);

    let image = h.st.image().unwrap();
    assert_eq!(image.sourcing.links.len(), 1);
    let b = h.restarted_from_image();
    assert_eq!(b.st.source_links()[0].next_seq, 4);
    assert_eq!(b.st.source_links()[0].last_copied, 2);

    // The earlier format (main part and the first trailing block only) still decodes.
    let mut earlier = postcard::to_stdvec(&image).unwrap();
    earlier.extend(postcard::to_stdvec(&image.extras).unwrap());
    let decoded = super::image::StreamImage::decode(&earlier).unwrap();
    assert!(decoded.sourcing.links.is_empty());
    assert_eq!(decoded.last_seq, 2);
}

#[test]
fn a_pull_that_arrives_during_a_graceful_stop_ends_with_what_it_asked_for_pending() {
    let mut out = Recorder::default();
    let body = br#"{"batch": 10, "max_bytes": 4096, "expires": 30000000000}"#;
    Stream::pull_at_shutdown(body, "_INBOX.p", &mut out.fx);
    let sent = out.sent();
    assert_eq!(sent.len(), 1);
    let h = String::from_utf8_lossy(sent[0].headers.as_ref().unwrap()).into_owned();
    assert!(h.starts_with("NATS/1.0 409 Server Shutdown\r\n"), "{h}");
    assert!(h.contains("Nats-Pending-Messages: 10\r\n"), "{h}");
    assert!(h.contains("Nats-Pending-Bytes: 4096\r\n"), "{h}");
    // An empty request asks for one message.
    Stream::pull_at_shutdown(b"", "_INBOX.q", &mut out.fx);
    let h = String::from_utf8_lossy(out.sent()[1].headers.as_ref().unwrap()).into_owned();
    assert!(h.contains("Nats-Pending-Messages: 1\r\n"), "{h}");
}

/// One replicated round as every replica runs it: the leader's interest answers taken,
/// push deliveries decided by the record, then a publish and the closing tick.
fn replicated_publish(h: &mut Harness, answers: &[(String, bool)], subject: &str, now: i64) {
    h.st.take_push_interest(answers, now);
    h.out.fx.push_by_record(true);
    h.publish(subject, &[], now);
    h.out.fx.push_by_record(false);
}

#[test]
fn replicas_decide_push_deliveries_by_the_leaders_interest_answers_not_their_own() {
    // Two replicas of one stream: the leader's server sees the subscriber of `d`, the
    // follower's does not yet (interest still propagating).
    let mut leader = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    let mut follower = Harness::new(json!({"name": "S", "subjects": ["s.>"]}));
    follower.out.fx = Effects::new(Box::new(AllBut("d")));
    for h in [&mut leader, &mut follower] {
        h.consumer(
            "p",
            json!({"deliver_subject": "d", "ack_policy": "explicit"}),
            T0,
        );
    }
    // A round a follower proposed carries no answers: never found listened to, the new
    // consumer delivers nothing on either replica, and checks again soon.
    for h in [&mut leader, &mut follower] {
        replicated_publish(h, &[], "s.1", T0 + MS);
        assert!(h.out.delivered("d").is_empty());
        assert_eq!(h.st.next_deadline(), Some(T0 + 2 * MS));
    }
    // The leader's server sees the subscriber: its next round says so, and both deliver.
    let mut listening = |s: &str| s == "d";
    let answers = leader.st.push_interest_changes(&mut listening);
    assert_eq!(answers, vec![("p".to_owned(), true)]);
    for h in [&mut leader, &mut follower] {
        replicated_publish(h, &answers, "s.2", T0 + 2 * MS);
        let seqs: Vec<u64> = h.out.delivered("d").iter().map(stream_seq).collect();
        assert_eq!(seqs, vec![1, 2]);
    }
    // Recorded now: nothing more to say while that holds.
    assert!(leader.st.push_interest_changes(&mut listening).is_empty());
    // The subscriber leaves: the leader's answer stops delivery on both.
    let mut gone = |_: &str| false;
    let answers = leader.st.push_interest_changes(&mut gone);
    assert_eq!(answers, vec![("p".to_owned(), false)]);
    follower.out.fx = Effects::new(Box::new(Everyone));
    for h in [&mut leader, &mut follower] {
        replicated_publish(h, &answers, "s.3", T0 + 3 * MS);
        assert!(h.out.delivered("d").is_empty());
    }
    assert_eq!(leader.infos(T0 + 3 * MS), follower.infos(T0 + 3 * MS));
}
