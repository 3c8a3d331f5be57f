//! The conformance suite every [`StreamStore`] runs (openraft's `testing::log::suite` style).
//!
//! `suite(make)` calls `make` for a fresh, empty store before each case and panics with the
//! case name on the first violation. [`MemStore`](super::MemStore) and
//! [`FileStore`](super::FileStore) both run it in their tests; a new store type should too.
#![expect(
    clippy::indexing_slicing,
    reason = "a conformance suite: a panic is how it reports a failure"
)]

use std::time::Duration;

use bytes::Bytes;

use super::{
    now_nanos, AppendRejected, Discard, NewMsg, PurgeRequest, StoreError, StoreLimits, StreamStore,
};

type Make<'a> = &'a mut dyn FnMut() -> Box<dyn StreamStore>;
type Case = fn(Make<'_>);

/// Runs every conformance case against fresh stores from `make`.
///
/// # Panics
/// On the first violated expectation (the message names the case).
pub fn suite(make: Make<'_>) {
    let cases: &[(&str, Case)] = &[
        ("empty_store_state", empty_store_state),
        ("append_get_round_trip", append_get_round_trip),
        ("per_message_rejections", per_message_rejections),
        ("delete_and_state", delete_and_state),
        ("purge_variants", purge_variants),
        ("subject_lookups", subject_lookups),
        ("discard_old_limits", discard_old_limits),
        ("discard_new_limits", discard_new_limits),
        ("per_subject_limits", per_subject_limits),
        ("set_limits_trims", set_limits_trims),
        ("expire_by_age", expire_by_age),
        ("compact_keeps_everything", compact_keeps_everything),
        ("checkpoint_and_close", checkpoint_and_close),
        ("big_batch", big_batch),
        ("own_sequences_leave_gaps", own_sequences_leave_gaps),
    ];
    for (name, case) in cases {
        tracing::debug!(case = name, "store conformance");
        case(make);
    }
}

fn m(subject: &str, payload: &str) -> NewMsg {
    NewMsg::new(subject, Bytes::copy_from_slice(payload.as_bytes()))
}

fn append(s: &mut dyn StreamStore, msgs: &[NewMsg]) -> Vec<u64> {
    s.append_batch(msgs)
        .expect("append_batch")
        .into_iter()
        .map(|r| r.expect("accepted").seq)
        .collect()
}

fn empty_store_state(make: Make<'_>) {
    let s = make();
    let st = s.state();
    assert_eq!(
        (st.msgs, st.bytes, st.first_seq, st.last_seq, st.num_deleted),
        (0, 0, 1, 0, 0),
        "empty_store_state"
    );
    assert!(s.get(1).expect("get").is_none(), "empty_store_state");
    assert!(
        s.last_by_subject(">").expect("last").is_none(),
        "empty_store_state"
    );
}

fn append_get_round_trip(make: Make<'_>) {
    let mut s = make();
    let hdr = Bytes::from_static(b"NATS/1.0\r\nA: b\r\n\r\n");
    let mut with_hdr = m("a.b", "two");
    with_hdr.headers = Some(hdr.clone());
    let mut empty_hdr = m("a.c", "");
    empty_hdr.headers = Some(Bytes::new());
    let before = now_nanos();
    let res = s
        .append_batch(&[m("a.a", "one"), with_hdr, empty_hdr])
        .expect("append");
    let seqs: Vec<u64> = res.iter().map(|r| r.expect("ok").seq).collect();
    assert_eq!(seqs, vec![1, 2, 3], "append_get_round_trip: sequences");
    let ts: Vec<i64> = res.iter().map(|r| r.expect("ok").ts).collect();
    assert!(
        ts.windows(2).all(|w| w[0] <= w[1]) && ts[0] >= before - 1_000_000_000,
        "timestamps"
    );
    let g = s.get(2).expect("get").expect("stored");
    assert_eq!(
        (
            g.seq,
            g.subject.as_str(),
            &g.payload[..],
            g.headers.as_ref()
        ),
        (2, "a.b", &b"two"[..], Some(&hdr))
    );
    assert_eq!(g.ts, ts[1]);
    let g = s.get(3).expect("get").expect("stored");
    assert_eq!(
        (g.headers, g.payload.len()),
        (None, 0),
        "empty headers are stored as none"
    );
    let more = append(s.as_mut(), &[m("x", "4")]);
    assert_eq!(more, vec![4]);
    let st = s.state();
    assert_eq!(
        (st.msgs, st.first_seq, st.last_seq, st.num_subjects),
        (4, 1, 4, 4)
    );
    assert_eq!(st.first_ts, ts[0]);
    assert!(st.bytes > 0);
    assert!(s.append_batch(&[]).expect("empty batch").is_empty());
}

fn per_message_rejections(make: Make<'_>) {
    let mut s = make();
    s.set_limits(StoreLimits {
        max_msg_size: Some(4),
        ..Default::default()
    })
    .expect("limits");
    let long = "x".repeat(70_000);
    let r = s
        .append_batch(&[
            m("a", "ok"),
            m("", "x"),
            m("a", "too long"),
            m(&long, "x"),
            m("b", "fine"),
        ])
        .expect("append");
    assert_eq!(r[0].map(|a| a.seq), Ok(1));
    assert_eq!(r[1], Err(AppendRejected::InvalidSubject));
    assert_eq!(r[2], Err(AppendRejected::MaxMsgSize));
    assert_eq!(r[3], Err(AppendRejected::InvalidSubject));
    assert_eq!(r[4].map(|a| a.seq), Ok(2), "rejections take no sequence");
    let r = s.append_batch(&[m("a", "too long")]).expect("all rejected");
    assert_eq!(r, vec![Err(AppendRejected::MaxMsgSize)]);
    assert_eq!(s.state().last_seq, 2);
}

fn delete_and_state(make: Make<'_>) {
    let mut s = make();
    append(
        s.as_mut(),
        &[m("a", "1"), m("b", "2"), m("a", "3"), m("b", "4")],
    );
    assert!(s.delete(2, false).expect("delete"));
    assert!(!s.delete(2, false).expect("delete twice"));
    assert!(!s.delete(99, false).expect("delete missing"));
    assert!(s.get(2).expect("get").is_none());
    let st = s.state();
    assert_eq!(
        (st.msgs, st.first_seq, st.last_seq, st.num_deleted),
        (3, 1, 4, 1),
        "delete_and_state"
    );
    assert!(s.delete(1, true).expect("erase"));
    assert_eq!(s.state().first_seq, 3);
    assert!(s.delete(4, false).expect("delete last"));
    let st = s.state();
    assert_eq!(
        (st.msgs, st.first_seq, st.last_seq, st.num_deleted),
        (1, 3, 4, 1),
        "last_seq survives"
    );
    assert_eq!(
        append(s.as_mut(), &[m("c", "5")]),
        vec![5],
        "sequences never reused"
    );
    assert_eq!(s.subjects_state(">").len(), 2);
}

fn purge_variants(make: Make<'_>) {
    let mut s = make();
    let msgs: Vec<NewMsg> = (0..10)
        .map(|i| m(if i % 2 == 0 { "p.even" } else { "p.odd" }, &i.to_string()))
        .collect();
    append(s.as_mut(), &msgs);
    let both = PurgeRequest {
        up_to_seq: Some(3),
        keep: Some(1),
        ..Default::default()
    };
    assert!(
        matches!(s.purge(&both), Err(StoreError::InvalidArgument(_))),
        "keep with up_to_seq"
    );
    let n = s
        .purge(&PurgeRequest {
            filter: Some("p.odd".into()),
            up_to_seq: Some(6),
            ..Default::default()
        })
        .expect("purge");
    assert_eq!(n, 2, "p.odd below 6 is seqs 2 and 4");
    assert!(
        s.get(2).expect("get").is_none()
            && s.get(4).expect("get").is_none()
            && s.get(6).expect("get").is_some()
    );
    let n = s
        .purge(&PurgeRequest {
            filter: Some("p.*".into()),
            keep: Some(3),
            ..Default::default()
        })
        .expect("keep");
    assert_eq!(n, 5);
    let left: Vec<u64> = (1..=10)
        .filter(|q| s.get(*q).expect("get").is_some())
        .collect();
    assert_eq!(left, vec![8, 9, 10]);
    let n = s.purge(&PurgeRequest::default()).expect("purge all");
    assert_eq!(n, 3);
    let st = s.state();
    assert_eq!(
        (st.msgs, st.first_seq, st.last_seq, st.num_deleted),
        (0, 11, 10, 0),
        "purge all"
    );
    assert_eq!(append(s.as_mut(), &[m("z", "z")]), vec![11]);
}

fn subject_lookups(make: Make<'_>) {
    let mut s = make();
    append(
        s.as_mut(),
        &[
            m("o.1.new", "a"),
            m("o.2.new", "b"),
            m("o.1.done", "c"),
            m("x", "d"),
            m("o.1.new", "e"),
        ],
    );
    let last = |s: &dyn StreamStore, f: &str| s.last_by_subject(f).expect("last").map(|m| m.seq);
    let next = |s: &dyn StreamStore, q: u64, f: &str| {
        s.next_by_subject(q, f).expect("next").map(|m| m.seq)
    };
    assert_eq!(last(s.as_ref(), "o.1.new"), Some(5));
    assert_eq!(last(s.as_ref(), "o.*.new"), Some(5));
    assert_eq!(last(s.as_ref(), "o.>"), Some(5));
    assert_eq!(last(s.as_ref(), "o.2.*"), Some(2));
    assert_eq!(last(s.as_ref(), "nope"), None);
    assert_eq!(next(s.as_ref(), 1, "o.*.done"), Some(3));
    assert_eq!(next(s.as_ref(), 2, "o.1.new"), Some(5));
    assert_eq!(next(s.as_ref(), 6, ">"), None);
    assert_eq!(next(s.as_ref(), 0, ""), Some(1));
    assert!(s.delete(5, false).expect("delete"));
    assert_eq!(last(s.as_ref(), "o.1.new"), Some(1));
    assert_eq!(last(s.as_ref(), "o.*.*"), Some(3));
    let ss = s.subjects_state("o.>");
    assert_eq!(ss.len(), 3);
    assert_eq!(
        (
            ss["o.1.new"].msgs,
            ss["o.1.new"].first_seq,
            ss["o.1.new"].last_seq
        ),
        (1, 1, 1)
    );
    let msg = s.next_by_subject(2, "x").expect("next").expect("stored");
    assert_eq!(&msg.payload[..], b"d");
}

fn discard_old_limits(make: Make<'_>) {
    let mut s = make();
    s.set_limits(StoreLimits {
        max_msgs: Some(3),
        ..Default::default()
    })
    .expect("limits");
    append(
        s.as_mut(),
        &(0..5).map(|i| m("a", &i.to_string())).collect::<Vec<_>>(),
    );
    let st = s.state();
    assert_eq!(
        (st.msgs, st.first_seq, st.last_seq),
        (3, 3, 5),
        "max_msgs discard old"
    );
    let one = super::block::record_size(1, 0, 1);
    s.set_limits(StoreLimits {
        max_bytes: Some(2 * one),
        ..Default::default()
    })
    .expect("limits");
    assert_eq!(s.state().msgs, 2, "set_limits trims to max_bytes");
    append(s.as_mut(), &[m("a", "x")]);
    let st = s.state();
    assert_eq!((st.msgs, st.bytes, st.first_seq), (2, 2 * one, 5));
    let r = s.append_batch(&[m("a", &"y".repeat(100))]).expect("append");
    assert_eq!(
        r,
        vec![Err(AppendRejected::MaxBytes)],
        "a message above max_bytes is refused"
    );
}

fn discard_new_limits(make: Make<'_>) {
    let mut s = make();
    let one = super::block::record_size(1, 0, 1);
    s.set_limits(StoreLimits {
        max_msgs: Some(2),
        discard: Discard::New,
        ..Default::default()
    })
    .expect("limits");
    let r = s
        .append_batch(&[m("a", "1"), m("a", "2"), m("a", "3")])
        .expect("append");
    assert_eq!(r[2], Err(AppendRejected::MaxMsgs));
    assert_eq!(s.state().msgs, 2);
    s.set_limits(StoreLimits {
        max_bytes: Some(3 * one),
        discard: Discard::New,
        ..Default::default()
    })
    .expect("limits");
    let r = s.append_batch(&[m("a", "4"), m("a", "5")]).expect("append");
    assert_eq!(r[0].map(|a| a.seq), Ok(3));
    assert_eq!(r[1], Err(AppendRejected::MaxBytes));
    assert_eq!(s.state().last_seq, 3);
}

fn per_subject_limits(make: Make<'_>) {
    let mut s = make();
    s.set_limits(StoreLimits {
        max_msgs_per_subject: Some(2),
        ..Default::default()
    })
    .expect("limits");
    append(
        s.as_mut(),
        &[
            m("k.a", "1"),
            m("k.b", "1"),
            m("k.a", "2"),
            m("k.a", "3"),
            m("k.b", "2"),
        ],
    );
    let ss = s.subjects_state(">");
    assert_eq!(
        (ss["k.a"].msgs, ss["k.a"].first_seq, ss["k.a"].last_seq),
        (2, 3, 4),
        "per subject discard old"
    );
    assert_eq!(ss["k.b"].msgs, 2);
    assert!(s.get(1).expect("get").is_none());
    s.set_limits(StoreLimits {
        max_msgs_per_subject: Some(2),
        discard: Discard::New,
        discard_new_per_subject: true,
        ..Default::default()
    })
    .expect("limits");
    let r = s
        .append_batch(&[m("k.a", "4"), m("k.c", "1")])
        .expect("append");
    assert_eq!(r[0], Err(AppendRejected::MaxMsgsPerSubject));
    assert_eq!(r[1].map(|a| a.seq), Ok(6));
}

fn set_limits_trims(make: Make<'_>) {
    let mut s = make();
    append(
        s.as_mut(),
        &(0..6)
            .map(|i| m(if i < 3 { "t.a" } else { "t.b" }, "v"))
            .collect::<Vec<_>>(),
    );
    let n = s
        .set_limits(StoreLimits {
            max_msgs_per_subject: Some(1),
            ..Default::default()
        })
        .expect("limits");
    assert_eq!(n, 4);
    let kept: Vec<u64> = (1..=6)
        .filter(|q| s.get(*q).expect("get").is_some())
        .collect();
    assert_eq!(kept, vec![3, 6]);
    let n = s
        .set_limits(StoreLimits {
            max_msgs: Some(1),
            discard: Discard::New,
            ..Default::default()
        })
        .expect("limits");
    assert_eq!(n, 0, "discard new does not trim");
    assert_eq!(s.limits().max_msgs, Some(1));
}

fn expire_by_age(make: Make<'_>) {
    let mut s = make();
    append(s.as_mut(), &[m("e", "1"), m("e", "2")]);
    assert_eq!(
        s.expire(now_nanos() + 3_600_000_000_000)
            .expect("expire without max_age"),
        0
    );
    s.set_limits(StoreLimits {
        max_age: Some(Duration::from_secs(60)),
        ..Default::default()
    })
    .expect("limits");
    assert_eq!(s.expire(now_nanos()).expect("expire"), 0);
    assert_eq!(s.expire(now_nanos() + 120_000_000_000).expect("expire"), 2);
    let st = s.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (0, 3, 2));
}

fn compact_keeps_everything(make: Make<'_>) {
    let mut s = make();
    let msgs: Vec<NewMsg> = (0..50)
        .map(|i| m(&format!("c.{}", i % 5), &format!("payload-{i}")))
        .collect();
    append(s.as_mut(), &msgs);
    for q in (1..=50).step_by(3) {
        s.delete(q, false).expect("delete");
    }
    s.delete(50, false).expect("delete last");
    let before = s.state();
    let snapshot: Vec<_> = (1..=50).map(|q| s.get(q).expect("get")).collect();
    s.compact().expect("compact");
    assert_eq!(s.state(), before, "compact_keeps_everything: state");
    let after: Vec<_> = (1..=50).map(|q| s.get(q).expect("get")).collect();
    assert_eq!(snapshot, after, "compact_keeps_everything: content");
    assert_eq!(append(s.as_mut(), &[m("c.9", "after")]), vec![51]);
    s.compact().expect("compact again");
    assert_eq!(
        &s.get(51).expect("get").expect("stored").payload[..],
        b"after"
    );
    s.purge(&PurgeRequest::default()).expect("purge");
    s.compact().expect("compact empty");
    assert_eq!(s.state().last_seq, 51);
    assert_eq!(s.state().first_seq, 52);
}

fn checkpoint_and_close(make: Make<'_>) {
    let mut s = make();
    append(s.as_mut(), &[m("a", "1")]);
    s.sync_checkpoint().expect("checkpoint");
    s.sync_checkpoint().expect("idempotent checkpoint");
    s.close().expect("close");
    assert!(matches!(
        s.append_batch(&[m("a", "2")]),
        Err(StoreError::Closed)
    ));
    assert!(matches!(s.get(1), Err(StoreError::Closed)));
    s.close().expect("close twice");
}

fn big_batch(make: Make<'_>) {
    let mut s = make();
    let payload = "p".repeat(1024);
    let msgs: Vec<NewMsg> = (0..512)
        .map(|i| m(&format!("big.{}", i % 7), &payload))
        .collect();
    let seqs = append(s.as_mut(), &msgs);
    assert_eq!(seqs.len(), 512);
    assert_eq!(seqs[511], 512);
    let g = s.get(300).expect("get").expect("stored");
    assert_eq!((g.subject.as_str(), g.payload.len()), ("big.5", 1024));
    assert_eq!(s.state().num_subjects, 7);
}

/// A message that names its sequence (a mirror's copy of its origin's) is stored at it, the
/// sequences skipped count as deleted, and a sequence not beyond the last is ignored.
fn own_sequences_leave_gaps(make: Make<'_>) {
    let mut s = make();
    let at = |seq: u64, ts: i64| NewMsg {
        seq: Some(seq),
        ts: Some(ts),
        ..m("a", "x")
    };
    assert_eq!(append(s.as_mut(), &[at(5, 1_000)]), vec![5]);
    let st = s.state();
    assert_eq!(
        (st.msgs, st.first_seq, st.last_seq),
        (1, 5, 5),
        "first at 5"
    );
    assert_eq!(
        s.get(5).expect("get").expect("stored").ts,
        1_000,
        "its time kept"
    );
    assert_eq!(
        append(s.as_mut(), &[at(9, 2_000), at(3, 3_000)]),
        vec![9, 10]
    );
    let st = s.state();
    assert_eq!(
        (st.msgs, st.first_seq, st.last_seq, st.num_deleted),
        (3, 5, 10, 3),
        "gaps are deleted sequences"
    );
    assert_eq!(append(s.as_mut(), &[m("b", "y")]), vec![11]);
}

/// Helpers shared by the store's own tests.
#[cfg(test)]
pub(crate) mod support {
    use std::path::PathBuf;
    use std::sync::{Arc, OnceLock};

    use crate::crypto::{DataKey, Kek, MasterKey, Secret, WrappedKey};
    use crate::store::file_store::FileStoreConfig;
    use crate::store::io::{FaultIo, SegmentIo};
    use crate::store::segment::StreamKeys;
    use crate::store::{FileStore, StoreError};

    pub(crate) const STORE: [u8; 16] = [0x5e; 16];
    pub(crate) const STREAM: [u8; 16] = [0xa1; 16];
    pub(crate) const OTHER_STREAM: [u8; 16] = [0xa2; 16];

    fn kek() -> Kek {
        Kek::derive(&MasterKey::from_bytes(Secret::new([7u8; 32])), &STORE)
    }

    fn wrapped(owner: [u8; 16]) -> WrappedKey {
        static A: OnceLock<WrappedKey> = OnceLock::new();
        static B: OnceLock<WrappedKey> = OnceLock::new();
        let cell = if owner == STREAM { &A } else { &B };
        *cell.get_or_init(|| kek().wrap(&DataKey::generate(), &owner, 1))
    }

    /// The same data key every time (unwrapped from a fixed wrap).
    pub(crate) fn dek(owner: [u8; 16]) -> DataKey {
        kek()
            .unwrap(&wrapped(owner), &owner, 1)
            .expect("test key unwraps")
    }

    /// A second data key of the test stream, the same every time (version 2: a rotation).
    pub(crate) fn dek_v2() -> DataKey {
        static W: OnceLock<WrappedKey> = OnceLock::new();
        let w = W.get_or_init(|| kek().wrap(&DataKey::generate(), &STREAM, 2));
        kek().unwrap(w, &STREAM, 2).expect("test key unwraps")
    }

    pub(crate) fn keys() -> StreamKeys {
        StreamKeys::new(STORE, STREAM, 1, dek(STREAM))
    }

    pub(crate) fn other_keys() -> StreamKeys {
        StreamKeys::new(STORE, OTHER_STREAM, 1, dek(OTHER_STREAM))
    }

    pub(crate) fn dir() -> PathBuf {
        PathBuf::from("/store/s/a1a1")
    }

    /// Small segments and blocks so tests cross every boundary quickly.
    pub(crate) fn small_cfg() -> FileStoreConfig {
        let mut c = FileStoreConfig::new(dir());
        c.max_segment_bytes = 2048;
        c.pad_bucket = 64;
        c.reserve_chunk = 4096;
        c.cache_blocks = 4;
        c
    }

    pub(crate) fn open(io: &FaultIo) -> Result<FileStore, StoreError> {
        FileStore::open(
            Arc::new(io.clone()) as Arc<dyn SegmentIo>,
            keys(),
            small_cfg(),
        )
    }

    pub(crate) fn open_cfg(io: &FaultIo, cfg: FileStoreConfig) -> Result<FileStore, StoreError> {
        FileStore::open(Arc::new(io.clone()) as Arc<dyn SegmentIo>, keys(), cfg)
    }
}
