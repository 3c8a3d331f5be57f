//! Crash, torn-tail, I/O-error and disk-full tests (reliability spec ).
//!
//! Every test runs the real [`FileStore`] over [`FaultIo`] and reopens crash images: only what
//! completed syncs made durable, sometimes plus a torn prefix of one unsynced write.
#![expect(
    clippy::indexing_slicing,
    reason = "tests index fixtures they just built"
)]

use std::collections::BTreeMap;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::io::{CrashOptions, FaultIo, FaultKind, SimFs};
use super::recovery::{self, RecoverOptions};
use super::testing::support::{dir, keys, open, open_cfg, small_cfg};
use super::{FileStore, NewMsg, PurgeRequest, StoreError, StreamStore};

type Content = BTreeMap<u64, (String, Bytes)>;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Snap {
    msgs: Content,
    last: u64,
}

fn content(s: &FileStore) -> Snap {
    let st = s.state();
    let mut msgs = Content::new();
    for q in 1..=st.last_seq + 1 {
        if let Some(m) = s.get(q).unwrap() {
            msgs.insert(q, (m.subject, m.payload));
        }
    }
    Snap {
        msgs,
        last: st.last_seq,
    }
}

fn batch(rng: &mut StdRng, next_seq: u64) -> Vec<NewMsg> {
    let n = rng.gen_range(1..4);
    (0..n)
        .map(|k| {
            let len = rng.gen_range(0..180);
            let mut p = format!("{}:", next_seq + k).into_bytes();
            p.resize(len.max(p.len()), b'a' + (k as u8 % 26));
            NewMsg::new(format!("c.{}", rng.gen_range(0..3)), p)
        })
        .collect()
}

struct Step {
    start: u64,
    end: u64,
    before: Snap,
    after: Snap,
}

/// One random workload; returns the steps and the captured crash images.
fn workload(seed: u64, ops: usize) -> (Vec<Step>, Vec<(u64, SimFs)>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let io = FaultIo::new();
    io.capture_crash_images(seed, 2);
    let mut store = open(&io).unwrap();
    let mut steps = Vec::new();
    let mut snap = content(&store);
    for _ in 0..ops {
        let start = io.events();
        match rng.gen_range(0..100) {
            0..=59 => {
                let msgs = batch(&mut rng, snap.last + 1);
                store.append_batch(&msgs).unwrap();
            }
            60..=71 => {
                let q = rng.gen_range(1..snap.last + 2);
                store.delete(q, false).unwrap();
            }
            72..=76 => {
                let up = rng.gen_range(1..snap.last + 2);
                store
                    .purge(&PurgeRequest {
                        up_to_seq: Some(up),
                        ..Default::default()
                    })
                    .unwrap();
            }
            77..=81 => {
                store.compact().unwrap();
            }
            82..=91 => store.sync_checkpoint().unwrap(),
            _ => {
                drop(store);
                store = open(&io).unwrap();
            }
        }
        let after = content(&store);
        steps.push(Step {
            start,
            end: io.events(),
            before: snap,
            after: after.clone(),
        });
        snap = after;
    }
    (steps, io.take_crash_images())
}

fn crash_points(seeds: std::ops::Range<u64>, ops: usize) -> usize {
    let mut checked = 0;
    let mut torn_seen = 0;
    for seed in seeds {
        let (steps, images) = workload(seed, ops);
        for (event, image) in images {
            let Some(step) = steps.iter().find(|s| s.start < event && event <= s.end) else {
                continue;
            };
            let io = FaultIo::from_image(image);
            let store = open(&io)
                .unwrap_or_else(|e| panic!("seed {seed} event {event}: reopen failed: {e}"));
            if store.report().torn_tail.is_some() {
                torn_seen += 1;
            }
            let got = content(&store);
            assert!(
                got == step.before || got == step.after,
                "seed {seed} event {event}: recovered state is neither before nor after the in-flight operation\n\
                 got {:?}\nbefore {:?}\nafter {:?}",
                got.msgs.keys().collect::<Vec<_>>(),
                step.before.msgs.keys().collect::<Vec<_>>(),
                step.after.msgs.keys().collect::<Vec<_>>()
            );
            // The recovered store keeps working.
            drop(store);
            let mut again = open(&io).unwrap();
            again
                .append_batch(&[NewMsg::new("after.crash", "x")])
                .unwrap();
            checked += 1;
        }
    }
    assert!(torn_seen > 0, "some crash images had torn tails");
    checked
}

/// a few thousand crash points; every reopen succeeds and holds every acknowledged
/// operation (the state is exactly before or after the one operation in flight).
#[test]
fn every_crash_image_reopens_with_every_acknowledged_write() {
    let seeds: u64 = std::env::var("SEALSTORE_CRASH_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) { 12 } else { 60 });
    let n = crash_points(0..seeds, 60);
    assert!(n >= seeds as usize * 60, "only {n} crash points");
    println!("crash points checked: {n}");
}

fn build(batches: usize, checkpoint: bool) -> (FaultIo, Vec<Snap>) {
    let io = FaultIo::new();
    let mut cfg = small_cfg();
    cfg.pad_bucket = 16;
    cfg.max_segment_bytes = 1 << 20;
    let mut s = open_cfg(&io, cfg).unwrap();
    let mut snaps = vec![content(&s)];
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..batches {
        let msgs = batch(&mut rng, s.state().last_seq + 1);
        s.append_batch(&msgs).unwrap();
        snaps.push(content(&s));
    }
    if checkpoint {
        s.sync_checkpoint().unwrap();
    }
    (io, snaps)
}

fn seg_path(io: &FaultIo) -> std::path::PathBuf {
    let names = io.with_fs(|fs| fs.names(&dir()));
    dir().join(names.last().unwrap())
}

fn blocks(img: &SimFs) -> Vec<(u64, u64)> {
    let io = FaultIo::from_image(img.clone());
    let rec = recovery::scan(&io, &dir(), &keys(), &RecoverOptions::default()).unwrap();
    rec.live
        .last()
        .unwrap()
        .blocks
        .iter()
        .map(|b| (b.offset, b.len))
        .collect()
}

/// The segment's bytes up to the end of its last block, without the zeros the writer filled
/// ahead.
fn written(img: &SimFs, path: &std::path::Path) -> Vec<u8> {
    let mut data = img.file_data(path).unwrap();
    let (off, len) = *blocks(img).last().unwrap();
    assert!(
        data[(off + len) as usize..].iter().all(|b| *b == 0),
        "past the last block there are only zeros"
    );
    data.truncate((off + len) as usize);
    data
}

/// The zeros a writer fills ahead of its appends are unused space: a store that stopped
/// with them (as every one does) reopens clean, no torn tail, every message there; bytes
/// written over them afterwards are a torn tail again.
#[test]
fn zeros_ahead_of_the_writer_are_unused_space() {
    let (io, snaps) = build(6, false);
    let img = io.crash_image(&CrashOptions::default());
    let path = seg_path(&io);
    let data = img.file_data(&path).unwrap();
    let end = written(&img, &path).len();
    assert!(data.len() > end, "the writer filled ahead");
    let s = reopen_with(&img, &path, data.clone()).unwrap();
    assert_eq!(content(&s), snaps[6]);
    assert!(s.report().torn_tail.is_none());
    assert!(s.report().corruption.is_empty());
    let mut d = data;
    d[end + 10] = 0xA5;
    let s = reopen_with(&img, &path, d).unwrap();
    assert_eq!(content(&s), snaps[6]);
    let t = s
        .report()
        .torn_tail
        .clone()
        .expect("garbage over the zeros is a torn tail");
    assert_eq!(t.offset, end as u64);
}

fn reopen_with(
    img: &SimFs,
    path: &std::path::Path,
    data: Vec<u8>,
) -> Result<FileStore, StoreError> {
    let mut img = img.clone();
    img.set_file_data(path, data);
    let mut cfg = small_cfg();
    cfg.max_segment_bytes = 1 << 20;
    open_cfg(&FaultIo::from_image(img), cfg)
}

/// truncation at every byte offset of the last two blocks.
#[test]
fn truncation_anywhere_in_the_last_two_blocks_is_a_reported_torn_tail() {
    let (io, snaps) = build(6, false);
    let img = io.crash_image(&CrashOptions::default());
    let path = seg_path(&io);
    let data = written(&img, &path);
    let b = blocks(&img);
    assert_eq!(b.len(), 6);
    let (second_last, _) = b[4];
    let (last, last_len) = b[5];
    assert_eq!(last + last_len, data.len() as u64);
    for cut in second_last..data.len() as u64 {
        let s = reopen_with(&img, &path, data[..cut as usize].to_vec())
            .unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let kept = if cut < last { 4 } else { 5 };
        assert_eq!(content(&s), snaps[kept], "cut {cut}");
        let torn = s.report().torn_tail.clone();
        if cut == second_last || cut == last {
            assert!(torn.is_none(), "cut {cut} at a block boundary");
        } else {
            let t = torn.unwrap_or_else(|| panic!("cut {cut}: torn tail not reported"));
            assert_eq!(t.offset, if cut < last { second_last } else { last });
            assert_eq!(t.bytes, cut - t.offset);
        }
    }
}

/// zeroed or random trailing bytes (1..=4096, within the final block).
#[test]
fn zeroed_or_random_trailing_bytes_drop_only_the_final_uncovered_block() {
    let (io, snaps) = build(6, false);
    let img = io.crash_image(&CrashOptions::default());
    let path = seg_path(&io);
    let data = written(&img, &path);
    let (_, last_len) = *blocks(&img).last().unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    for n in 1..=(last_len as usize).min(4096) {
        for random in [false, true] {
            let mut d = data.clone();
            let at = d.len() - n;
            for b in &mut d[at..] {
                *b = if random { rng.gen() } else { 0 };
            }
            if d == data {
                continue;
            }
            let s = reopen_with(&img, &path, d)
                .unwrap_or_else(|e| panic!("n {n} random {random}: {e}"));
            assert_eq!(content(&s), snaps[5], "n {n}");
            // A block zeroed whole reads as space filled ahead: the log ends at a block
            // boundary, as after a cut there.
            let whole_block_zeroed = !random && n as u64 == last_len;
            assert_eq!(
                s.report().torn_tail.is_some(),
                !whole_block_zeroed,
                "n {n} random {random}"
            );
        }
    }
}

/// A covered block is never dropped: with the final checkpoint, damage in the last data block
/// is corruption, and a damaged checkpoint alone costs no message.
#[test]
fn covered_blocks_are_corruption_and_the_checkpoint_alone_may_be_torn() {
    let (io, snaps) = build(6, true);
    let img = io.crash_image(&CrashOptions::default());
    let path = seg_path(&io);
    let data = img.file_data(&path).unwrap();
    let b = blocks(&img);
    let (data_block, _) = b[5];
    let mut d = data.clone();
    d[data_block as usize + 50] ^= 1;
    match reopen_with(&img, &path, d) {
        Err(StoreError::Corrupt { file, offset, .. }) => {
            assert_eq!(file, path);
            assert_eq!(offset, data_block);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let mut d = data.clone();
    let n = d.len();
    d[n - 3] ^= 0x80;
    let s = reopen_with(&img, &path, d).unwrap();
    assert_eq!(content(&s), snaps[6]);
    assert!(s.report().torn_tail.is_some());
}

fn run_until_error(io: &FaultIo, acked: &mut Snap) -> Option<StoreError> {
    let mut s = open(io).ok()?;
    let mut rng = StdRng::seed_from_u64(11);
    for i in 0..60 {
        let r = if i % 7 == 6 {
            s.delete(rng.gen_range(1..acked.last + 2), false)
                .map(|_| ())
        } else if i % 11 == 10 {
            s.sync_checkpoint()
        } else {
            let msgs = batch(&mut rng, acked.last + 1);
            s.append_batch(&msgs).map(|_| ())
        };
        match r {
            Ok(()) => *acked = content(&s),
            Err(e) => {
                // Nothing of the failed call is visible, and the store stays poisoned.
                assert_eq!(&content(&s), acked, "failed call left traces");
                let again = s.append_batch(&[NewMsg::new("x", "y")]);
                assert!(
                    matches!(again, Err(StoreError::Poisoned { .. })),
                    "not poisoned: {again:?}"
                );
                assert!(matches!(
                    s.sync_checkpoint(),
                    Err(StoreError::Poisoned { .. })
                ));
                return Some(e);
            }
        }
    }
    None
}

/// `EIO` at the Nth write or sync, N in 1..=50.
#[test]
fn eio_on_the_nth_write_or_sync_poisons_and_recovers_to_the_last_durable_block() {
    for kind in ["write", "sync"] {
        for n in 1..=50u64 {
            let io = FaultIo::new();
            if kind == "write" {
                io.fail_nth_write(n, FaultKind::Eio);
            } else {
                io.fail_nth_sync(n, FaultKind::Eio);
            }
            let mut acked = Snap {
                msgs: Content::new(),
                last: 0,
            };
            let err = run_until_error(&io, &mut acked);
            let err = err.unwrap_or_else(|| panic!("{kind} {n}: no error surfaced"));
            assert!(
                matches!(err, StoreError::Poisoned { .. }),
                "{kind} {n}: {err:?}"
            );
            io.clear_faults();
            // Restart without power loss (page cache intact), and after a power loss.
            let s = open(&io).unwrap_or_else(|e| panic!("{kind} {n}: restart: {e}"));
            assert_eq!(content(&s), acked, "{kind} {n}: restart");
            drop(s);
            let img = FaultIo::from_image(io.crash_image(&CrashOptions::default()));
            let s = open(&img).unwrap_or_else(|e| panic!("{kind} {n}: crash reopen: {e}"));
            assert_eq!(content(&s), acked, "{kind} {n}: crash image");
        }
    }
}

/// R-07 via FaultIo: a full disk fails appends with `DiskFull` (never poisoned, nothing
/// partial), reads keep working, and appends resume once space returns, without a restart.
#[test]
fn disk_full_refuses_cleanly_and_resumes_when_space_returns() {
    let io = FaultIo::new();
    let mut s = open(&io).unwrap();
    io.set_capacity(Some(12_000));
    let mut rng = StdRng::seed_from_u64(5);
    let mut acked = content(&s);
    let mut fulls = 0;
    for _ in 0..400 {
        let msgs = batch(&mut rng, acked.last + 1);
        match s.append_batch(&msgs) {
            Ok(_) => acked = content(&s),
            Err(StoreError::DiskFull { .. }) => {
                fulls += 1;
                assert_eq!(content(&s), acked, "nothing partial visible");
                assert!(
                    s.get(acked.last).unwrap().is_some() || acked.msgs.is_empty(),
                    "reads keep working"
                );
                if fulls == 3 {
                    io.set_capacity(None);
                }
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(fulls >= 3, "the disk filled up");
    let r = s.append_batch(&[NewMsg::new("resumed", "ok")]).unwrap();
    assert!(r[0].is_ok());
    acked = content(&s);
    drop(s);
    let img = FaultIo::from_image(io.crash_image(&CrashOptions::default()));
    assert_eq!(content(&open(&img).unwrap()), acked);
}

/// `ENOSPC` from the write itself (a file system without space reservation): the partial
/// bytes are cut again and the store stays usable.
#[test]
fn enospc_on_write_is_disk_full_not_poison() {
    for n in 1..=12u64 {
        let io = FaultIo::new();
        let mut s = open(&io).unwrap();
        io.fail_nth_write(n, FaultKind::Enospc);
        let mut rng = StdRng::seed_from_u64(n);
        let mut acked = content(&s);
        let mut full = false;
        for _ in 0..15 {
            let msgs = batch(&mut rng, acked.last + 1);
            match s.append_batch(&msgs) {
                Ok(_) => acked = content(&s),
                Err(StoreError::DiskFull { .. }) => {
                    full = true;
                    assert_eq!(content(&s), acked);
                }
                Err(e) => panic!("n {n}: {e}"),
            }
        }
        assert!(full, "n {n}");
        drop(s);
        assert_eq!(content(&open(&io).unwrap()), acked, "n {n}: restart");
        let img = FaultIo::from_image(io.crash_image(&CrashOptions::default()));
        assert_eq!(content(&open(&img).unwrap()), acked, "n {n}: crash");
    }
}

/// Interval mode (`defer_sync`): appends return without an fdatasync; what was written
/// since the last sync is not in a crash image (the documented weaker guarantee), and
/// everything is once `sync_pending` returns.
#[test]
fn interval_mode_defers_fsync_until_sync_pending() {
    let io = FaultIo::new();
    let mut cfg = small_cfg();
    cfg.defer_sync = true;
    let mut s = super::testing::support::open_cfg(&io, cfg.clone()).unwrap();
    let (_, syncs_before) = io.counts();
    for i in 0..5 {
        s.append_batch(&[NewMsg::new("d.x", format!("m{i}"))])
            .unwrap();
    }
    let (_, syncs_after) = io.counts();
    assert!(
        syncs_after - syncs_before <= 1,
        "appends in interval mode must not fsync each batch ({} syncs)",
        syncs_after - syncs_before
    );
    let lost = io.crash_image(&CrashOptions::default());
    let reopened = FileStore::open(
        std::sync::Arc::new(FaultIo::from_image(lost)) as std::sync::Arc<dyn super::SegmentIo>,
        keys(),
        cfg.clone(),
    )
    .unwrap();
    assert!(
        reopened.state().msgs < 5,
        "before a sync, a crash loses unsynced appends"
    );
    assert!(s.sync_pending().unwrap());
    assert!(!s.sync_pending().unwrap(), "nothing left to sync");
    let kept = io.crash_image(&CrashOptions::default());
    let reopened = FileStore::open(
        std::sync::Arc::new(FaultIo::from_image(kept)) as std::sync::Arc<dyn super::SegmentIo>,
        keys(),
        cfg,
    )
    .unwrap();
    assert_eq!(
        reopened.state().msgs,
        5,
        "after sync_pending every append survives"
    );
}
