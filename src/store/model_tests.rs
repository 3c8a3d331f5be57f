//! Conformance suite runs and the property test of both stores against a `BTreeMap` model
//! through appends, deletes, purges, compactions, checkpoints and reopens.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;

use super::io::{FaultIo, OsIo, SegmentIo};
use super::testing::suite;
use super::testing::support::{self, keys, open, small_cfg};
use super::{FileStore, FileStoreConfig, MemStore, NewMsg, PurgeRequest, StreamStore};

#[test]
fn mem_store_passes_the_suite() {
    suite(&mut || Box::new(MemStore::default()));
}

#[test]
fn file_store_on_fault_io_passes_the_suite() {
    suite(&mut || Box::new(open(&FaultIo::new()).unwrap()));
}

#[test]
fn file_store_with_default_config_on_real_files_passes_the_suite() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    suite(&mut || {
        n += 1;
        let cfg = FileStoreConfig::new(tmp.path().join(format!("s{n}")));
        Box::new(FileStore::open(Arc::new(OsIo), keys(), cfg).unwrap())
    });
}

#[test]
fn the_suite_also_passes_across_a_reopen_of_each_store() {
    // Every case on a store that was closed and reopened before use.
    let io = FaultIo::new();
    let mut n = 0;
    suite(&mut || {
        n += 1;
        let mut cfg = small_cfg();
        cfg.dir = support::dir().join(format!("r{n}"));
        let mut s = support::open_cfg(&io, cfg.clone()).unwrap();
        s.close().unwrap();
        Box::new(support::open_cfg(&io, cfg).unwrap())
    });
}

#[test]
fn data_survives_reopen_on_real_files() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = FileStoreConfig {
        max_segment_bytes: 8192,
        ..FileStoreConfig::new(tmp.path().join("s"))
    };
    let open = || FileStore::open(Arc::new(OsIo), keys(), cfg.clone()).unwrap();
    let mut s = open();
    for i in 0..100 {
        let msgs: Vec<NewMsg> = (0..5)
            .map(|j| NewMsg::new(format!("r.{}", (i + j) % 3), format!("{i}-{j}")))
            .collect();
        s.append_batch(&msgs).unwrap();
    }
    s.delete(7, false).unwrap();
    s.purge(&PurgeRequest {
        filter: Some("r.0".into()),
        up_to_seq: Some(100),
        ..Default::default()
    })
    .unwrap();
    let st = s.state();
    let all: Vec<_> = (1..=500).map(|q| s.get(q).unwrap()).collect();
    drop(s);
    let s = open();
    assert_eq!(s.state(), st);
    assert_eq!(
        (1..=500).map(|q| s.get(q).unwrap()).collect::<Vec<_>>(),
        all
    );
    assert!(s.segment_ids().len() > 3, "rolled over several segments");
    let names = std::fs::read_dir(tmp.path().join("s"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap());
    for n in names {
        assert!(
            super::segment::parse_segment_file_name(&n).is_some(),
            "only segment files: {n}"
        );
    }
}

#[test]
fn dead_head_segments_are_dropped_and_ids_never_reused() {
    let io = FaultIo::new();
    let mut s = open(&io).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..30 {
        let msgs: Vec<NewMsg> = (0..8)
            .map(|j| NewMsg::new("h", format!("{round}-{j}-{}", "x".repeat(60))))
            .collect();
        s.append_batch(&msgs).unwrap();
        s.purge(&PurgeRequest {
            up_to_seq: Some(s.state().last_seq.saturating_sub(10)),
            ..Default::default()
        })
        .unwrap();
        s.sync_checkpoint().unwrap();
        if round % 7 == 6 {
            s.compact().unwrap();
        }
        for id in s.segment_ids() {
            seen.insert(id);
        }
    }
    let ids = s.segment_ids();
    assert!(ids.len() <= 4, "head segments dropped: {ids:?}");
    let on_disk = io.with_fs(|fs| fs.names(&support::dir()));
    assert_eq!(on_disk.len(), ids.len(), "{on_disk:?}");
    let st = s.state();
    drop(s);
    let s = open(&io).unwrap();
    assert_eq!(s.state(), st);
    // Ids only grow: every new segment is above every id ever seen.
    let max_seen = *seen.iter().next_back().unwrap();
    let mut s = s;
    s.compact().unwrap();
    assert!(s.segment_ids().iter().all(|id| *id > max_seen));
}

// ---------------------------------------------------------------------------------------------
// Property test against a model.

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<(u8, u16)>),
    Delete(u8),
    PurgeAll,
    PurgeSubject(u8),
    PurgeUpTo(u8),
    PurgeKeep(u8, u8),
    Compact,
    Checkpoint,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec((0u8..4, 0u16..300), 1..6).prop_map(Op::Append),
        2 => any::<u8>().prop_map(Op::Delete),
        1 => Just(Op::PurgeAll),
        1 => (0u8..4).prop_map(Op::PurgeSubject),
        1 => any::<u8>().prop_map(Op::PurgeUpTo),
        1 => (0u8..4, 0u8..4).prop_map(|(s, k)| Op::PurgeKeep(s, k)),
        1 => Just(Op::Compact),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Default)]
struct Model {
    msgs: BTreeMap<u64, (String, Bytes)>,
    last: u64,
}

fn subject(i: u8) -> String {
    format!("m.{i}")
}

fn payload(seq_hint: u64, len: u16) -> Bytes {
    let mut v = format!("{seq_hint}:").into_bytes();
    v.resize(usize::from(len).max(v.len()), b'a' + (seq_hint % 26) as u8);
    Bytes::from(v)
}

fn pick(model: &Model, i: u8) -> u64 {
    if model.last == 0 {
        1
    } else {
        u64::from(i) % (model.last + 2)
    }
}

fn apply(model: &mut Model, store: &mut dyn StreamStore, op: &Op) {
    match op {
        Op::Append(v) => {
            let msgs: Vec<NewMsg> = v
                .iter()
                .enumerate()
                .map(|(k, (s, l))| NewMsg::new(subject(*s), payload(model.last + 1 + k as u64, *l)))
                .collect();
            let r = store.append_batch(&msgs).unwrap();
            for (m, r) in msgs.into_iter().zip(r) {
                let seq = r.unwrap().seq;
                assert_eq!(seq, model.last + 1);
                model.last = seq;
                model.msgs.insert(seq, (m.subject, m.payload));
            }
        }
        Op::Delete(i) => {
            let seq = pick(model, *i);
            assert_eq!(
                store.delete(seq, *i % 2 == 0).unwrap(),
                model.msgs.remove(&seq).is_some()
            );
        }
        Op::PurgeAll => {
            let n = store.purge(&PurgeRequest::default()).unwrap();
            assert_eq!(n, model.msgs.len() as u64);
            model.msgs.clear();
        }
        Op::PurgeSubject(s) => {
            let subj = subject(*s);
            let n = store
                .purge(&PurgeRequest {
                    filter: Some(subj.clone()),
                    ..Default::default()
                })
                .unwrap();
            let before = model.msgs.len();
            model.msgs.retain(|_, (x, _)| *x != subj);
            assert_eq!(n as usize, before - model.msgs.len());
        }
        Op::PurgeUpTo(i) => {
            let up = pick(model, *i);
            let n = store
                .purge(&PurgeRequest {
                    up_to_seq: Some(up),
                    ..Default::default()
                })
                .unwrap();
            let before = model.msgs.len();
            model.msgs.retain(|q, _| *q >= up);
            assert_eq!(n as usize, before - model.msgs.len());
        }
        Op::PurgeKeep(s, k) => {
            let subj = subject(*s);
            let req = PurgeRequest {
                filter: Some("m.*".into()),
                keep: Some(u64::from(*k)),
                ..Default::default()
            };
            let _ = subj;
            let n = store.purge(&req).unwrap();
            let total = model.msgs.len();
            let drop = total.saturating_sub(usize::from(*k));
            let gone: Vec<u64> = model.msgs.keys().take(drop).copied().collect();
            for q in &gone {
                model.msgs.remove(q);
            }
            assert_eq!(n as usize, drop);
        }
        Op::Compact => {
            store.compact().unwrap();
        }
        Op::Checkpoint => store.sync_checkpoint().unwrap(),
        Op::Reopen => {}
    }
}

fn check(model: &Model, store: &dyn StreamStore) {
    let st = store.state();
    assert_eq!(st.msgs, model.msgs.len() as u64);
    assert_eq!(st.last_seq, model.last);
    assert_eq!(
        st.first_seq,
        model.msgs.keys().next().copied().unwrap_or(model.last + 1)
    );
    for q in 1..=model.last + 1 {
        let got = store.get(q).unwrap();
        match model.msgs.get(&q) {
            Some((s, p)) => {
                let g = got.unwrap_or_else(|| panic!("seq {q} missing"));
                assert_eq!((&g.subject, &g.payload), (s, p), "seq {q}");
            }
            None => assert!(got.is_none(), "seq {q} should be gone"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn file_store_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        let io = FaultIo::new();
        let mut store = open(&io).unwrap();
        let mut model = Model::default();
        for op in &ops {
            apply(&mut model, &mut store, op);
            if matches!(op, Op::Reopen) {
                drop(store);
                store = open(&io).unwrap();
            }
            check(&model, &store);
        }
        drop(store);
        let store = FileStore::open(Arc::new(io.clone()) as Arc<dyn SegmentIo>, keys(), small_cfg()).unwrap();
        check(&model, &store);
    }

    #[test]
    fn mem_store_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        let mut store = MemStore::default();
        let mut model = Model::default();
        for op in &ops {
            apply(&mut model, &mut store, op);
            check(&model, &store);
        }
    }
}
