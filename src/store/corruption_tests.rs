//! Damage tests (reliability spec R-05 bit flips, R-06 transplant and replay): every change is
//! detected, corruption names the file, nothing wrong is ever returned, and intact blocks stay
//! readable through an inspection open.
#![expect(
    clippy::indexing_slicing,
    reason = "tests index fixtures they just built"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::io::{CrashOptions, FaultIo, SegmentIo, SimFs};
use super::recovery::{self, RecoverOptions, ScannedBlock};
use super::testing::support::{dir, keys, open, open_cfg, other_keys, small_cfg};
use super::{FileStore, NewMsg, StoreError, StreamStore};

type Content = BTreeMap<u64, (String, Bytes)>;

fn content(s: &FileStore) -> Content {
    let mut out = Content::new();
    for q in 1..=s.state().last_seq + 1 {
        if let Some(m) = s.get(q).unwrap() {
            out.insert(q, (m.subject, m.payload));
        }
    }
    out
}

fn fill(s: &mut FileStore, batches: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..batches {
        let next = s.state().last_seq + 1;
        let msgs: Vec<NewMsg> = (0..rng.gen_range(1..4))
            .map(|k| {
                NewMsg::new(
                    format!("d.{}", rng.gen_range(0..4)),
                    format!("{}-{}", next + k, "z".repeat(rng.gen_range(0..120))),
                )
            })
            .collect();
        s.append_batch(&msgs).unwrap();
    }
}

/// A store of several sealed segments plus an active one, ending in a checkpoint; the model
/// holds every message ever stored (seq 3 was deleted, an inspection may show it again when
/// the damage hit its tombstone).
fn fixture() -> (SimFs, Content) {
    let (img, mut all) = fixture_live();
    let io = FaultIo::from_image(img.clone());
    let _ = io;
    all.insert(
        3,
        DELETED
            .with(|d| d.borrow().clone())
            .expect("seq 3 recorded"),
    );
    (img, all)
}

thread_local! {
    static DELETED: std::cell::RefCell<Option<(String, Bytes)>> = const { std::cell::RefCell::new(None) };
}

fn fixture_live() -> (SimFs, Content) {
    let io = FaultIo::new();
    let mut s = open(&io).unwrap();
    fill(&mut s, 40, 1);
    let m3 = s.get(3).unwrap().unwrap();
    DELETED.with(|d| *d.borrow_mut() = Some((m3.subject, m3.payload)));
    s.delete(3, false).unwrap();
    s.sync_checkpoint().unwrap();
    assert!(s.segment_ids().len() >= 4);
    let c = content(&s);
    (io.crash_image(&CrashOptions::default()), c)
}

fn segs(img: &SimFs) -> Vec<PathBuf> {
    img.names(&dir())
        .into_iter()
        .map(|n| dir().join(n))
        .collect()
}

fn scan_blocks(img: &SimFs) -> Vec<(PathBuf, Vec<ScannedBlock>)> {
    let io = FaultIo::from_image(img.clone());
    let rec = recovery::scan(&io, &dir(), &keys(), &RecoverOptions::default()).unwrap();
    rec.live.into_iter().map(|s| (s.path, s.blocks)).collect()
}

fn reopen(img: &SimFs) -> Result<FileStore, StoreError> {
    open(&FaultIo::from_image(img.clone()))
}

fn inspect(img: &SimFs) -> FileStore {
    let io: Arc<dyn SegmentIo> = Arc::new(FaultIo::from_image(img.clone()));
    FileStore::open_inspect(io, keys(), small_cfg()).unwrap()
}

fn expect_corrupt(img: &SimFs, what: &str) -> (PathBuf, u64) {
    match reopen(img) {
        Err(StoreError::Corrupt { file, offset, .. }) => (file, offset),
        Ok(s) => panic!(
            "{what}: not detected (torn tail: {:?})",
            s.report().torn_tail
        ),
        Err(e) => panic!("{what}: wrong error {e}"),
    }
}

/// No wrong byte is ever returned: whatever the inspection open can read is exactly what was
/// stored.
fn assert_no_wrong_bytes(img: &SimFs, model: &Content, what: &str) -> usize {
    let s = inspect(img);
    let got = content(&s);
    for (q, m) in &got {
        assert_eq!(
            model.get(q),
            Some(m),
            "{what}: seq {q} differs from what was stored"
        );
    }
    model
        .keys()
        .filter(|q| **q != 3 && !got.contains_key(q))
        .count()
}

fn edit(img: &SimFs, path: &Path, f: impl FnOnce(&mut Vec<u8>)) -> SimFs {
    let mut img = img.clone();
    let mut d = img.file_data(path).unwrap();
    f(&mut d);
    img.set_file_data(path, d);
    img
}

/// single bit flips at random offsets of segment files: all detected, never a wrong byte.
#[test]
fn every_bit_flip_in_a_segment_is_detected_and_no_wrong_byte_is_returned() {
    let (img, model) = fixture();
    let files = segs(&img);
    // Flips land in the written blocks; the zeros the writer filled ahead are unused space
    // (a flip there is a torn tail over nothing: `zeros_ahead_of_the_writer_are_unused_space`).
    let scanned = scan_blocks(&img);
    let sizes: Vec<usize> = files
        .iter()
        .map(|p| {
            let blocks = &scanned.iter().find(|(sp, _)| sp == p).unwrap().1;
            blocks.last().map_or(0, |b| (b.offset + b.len) as usize)
        })
        .collect();
    let total: usize = sizes.iter().sum();
    let last_block = scanned.last().unwrap().1.last().unwrap().offset;
    let mut rng = StdRng::seed_from_u64(42);
    let trials = 2000;
    let (mut corrupt, mut torn) = (0, 0);
    for t in 0..trials {
        let mut at = rng.gen_range(0..total);
        let mut fi = 0;
        while at >= sizes[fi] {
            at -= sizes[fi];
            fi += 1;
        }
        let path = &files[fi];
        let bit = rng.gen_range(0..8);
        let damaged = edit(&img, path, |d| d[at] ^= 1 << bit);
        match reopen(&damaged) {
            Err(StoreError::Corrupt { file, .. }) => {
                corrupt += 1;
                let report = inspect(&damaged).report().clone();
                assert!(
                    report.corruption.iter().any(|c| &c.file == path),
                    "trial {t}: finding names {file:?}, flipped {path:?}"
                );
                let missing = assert_no_wrong_bytes(&damaged, &model, &format!("trial {t}"));
                assert!(
                    missing <= 3,
                    "trial {t}: {missing} messages unreadable: only the damaged block may be"
                );
            }
            Ok(s) => {
                // Only the final, uncovered block (the idle checkpoint) may be dropped as torn.
                torn += 1;
                assert_eq!(fi, files.len() - 1, "trial {t}");
                assert!(at as u64 >= last_block, "trial {t}: flip at {at} accepted");
                assert!(s.report().torn_tail.is_some());
                let mut live = model.clone();
                live.remove(&3);
                assert_eq!(content(&s), live, "trial {t}");
            }
            Err(e) => panic!("trial {t}: {e}"),
        }
    }
    assert_eq!(corrupt + torn, trials);
    assert!(corrupt > trials * 9 / 10);
}

/// Damage in one block leaves every later block (and segment) readable for inspection, and the
/// strict open changes nothing on disk.
#[test]
fn corruption_takes_the_stream_offline_without_truncating_anything() {
    let (img, model) = fixture();
    let blocks = scan_blocks(&img);
    let (path, b) = (&blocks[1].0, &blocks[1].1[1]);
    let damaged = edit(&img, path, |d| d[b.offset as usize + 60] ^= 4);
    let io = FaultIo::from_image(damaged.clone());
    let before: Vec<_> = segs(&damaged)
        .iter()
        .map(|p| io.with_fs(|fs| fs.file_data(p)))
        .collect();
    let (file, offset) = match open(&io) {
        Err(StoreError::Corrupt { file, offset, .. }) => (file, offset),
        other => panic!("{other:?}"),
    };
    assert_eq!((&file, offset), (path, b.offset));
    let after: Vec<_> = segs(&damaged)
        .iter()
        .map(|p| io.with_fs(|fs| fs.file_data(p)))
        .collect();
    assert_eq!(before, after, "nothing cut or removed");
    let mut s = inspect(&damaged);
    assert!(matches!(
        s.append_batch(&[NewMsg::new("a", "b")]),
        Err(StoreError::Offline { .. })
    ));
    let got = content(&s);
    let last_seq = *model.keys().next_back().unwrap();
    assert_eq!(
        got.get(&last_seq),
        model.get(&last_seq),
        "later blocks readable"
    );
    assert!(model.len() - got.len() <= 3);
}

#[test]
fn swapped_blocks_are_corruption_in_the_middle_and_at_the_tail() {
    let (img, _) = fixture();
    let blocks = scan_blocks(&img);
    // The middle of a closed segment, and the last two blocks of the last segment.
    let cases = [
        (&blocks[1], 0usize),
        (blocks.last().unwrap(), blocks.last().unwrap().1.len() - 2),
    ];
    for ((path, bl), i) in cases {
        let (a, b) = (&bl[i], &bl[i + 1]);
        let damaged = edit(&img, path, |d| {
            let ab = d[a.offset as usize..(a.offset + a.len) as usize].to_vec();
            let bb = d[b.offset as usize..(b.offset + b.len) as usize].to_vec();
            let mut swapped = bb.clone();
            swapped.extend_from_slice(&ab);
            d.splice(a.offset as usize..(b.offset + b.len) as usize, swapped);
        });
        expect_corrupt(&damaged, &format!("swap in {path:?}"));
    }
}

#[test]
fn replayed_and_transplanted_blocks_are_corruption_never_a_torn_tail() {
    let (img, _) = fixture();
    let blocks = scan_blocks(&img);
    let (last_path, last_blocks) = blocks.last().unwrap();
    let bytes = |path: &Path, b: &ScannedBlock| {
        img.file_data(path).unwrap()[b.offset as usize..(b.offset + b.len) as usize].to_vec()
    };
    // Replay of an earlier block of the same segment, appended at the end.
    let early = bytes(last_path, &last_blocks[0]);
    expect_corrupt(
        &edit(&img, last_path, |d| d.extend_from_slice(&early)),
        "replayed block at the tail",
    );
    // A block of another segment whose index is exactly the next one expected here.
    let next = last_blocks.len() as u64;
    let (src_path, src) = blocks
        .iter()
        .find_map(|(p, bl)| {
            bl.iter()
                .find(|b| b.index == next)
                .map(|b| (p.clone(), b.clone()))
        })
        .expect("a segment with that many blocks");
    let foreign = bytes(&src_path, &src);
    expect_corrupt(
        &edit(&img, last_path, |d| d.extend_from_slice(&foreign)),
        "transplanted block at the tail",
    );
    // A block from another segment over a block in the middle.
    let (p1, b1) = (&blocks[1].0, &blocks[1].1[1]);
    let other = bytes(&blocks[2].0, &blocks[2].1[1]);
    expect_corrupt(
        &edit(&img, p1, |d| {
            d.splice(
                b1.offset as usize..(b1.offset + b1.len) as usize,
                other.clone(),
            );
        }),
        "transplant from another segment",
    );
    // A block from another stream (other key and ids) over a block in the middle.
    let io2 = FaultIo::new();
    let mut cfg = small_cfg();
    cfg.dir = dir();
    let mut s2 = FileStore::open(
        Arc::new(io2.clone()) as Arc<dyn SegmentIo>,
        other_keys(),
        cfg,
    )
    .unwrap();
    fill(&mut s2, 10, 9);
    drop(s2);
    let img2 = io2.crash_image(&CrashOptions::default());
    let io2b = FaultIo::from_image(img2.clone());
    let rec2 = recovery::scan(&io2b, &dir(), &other_keys(), &RecoverOptions::default()).unwrap();
    let s2seg = &rec2.live[0];
    let alien = img2.file_data(&s2seg.path).unwrap()[s2seg.blocks[1].offset as usize..]
        [..s2seg.blocks[1].len as usize]
        .to_vec();
    expect_corrupt(
        &edit(&img, p1, |d| {
            d.splice(
                b1.offset as usize..(b1.offset + b1.len) as usize,
                alien.clone(),
            );
        }),
        "transplant from another stream",
    );
    // A whole segment file from another stream in place of one of ours.
    let mut swapped = img.clone();
    swapped.set_file_data(&blocks[1].0, img2.file_data(&s2seg.path).unwrap());
    expect_corrupt(&swapped, "segment from another stream");
}

#[test]
fn renamed_removed_and_truncated_segments_are_corruption() {
    let (img, _) = fixture();
    let files = segs(&img);
    // Renamed: the header names another id.
    let mut renamed = img.clone();
    let data = renamed.file_data(&files[1]).unwrap();
    renamed.remove_durably(&files[1]);
    renamed.put_durably(&dir().join(super::segment::segment_file_name(0x77)), data);
    expect_corrupt(&renamed, "renamed segment");
    // A segment missing from the middle, and the base segment missing.
    for i in [0, 1] {
        let mut gone = img.clone();
        gone.remove_durably(&files[i]);
        expect_corrupt(&gone, &format!("segment {i} removed"));
    }
    // A closed segment cut at a block boundary (its seal gone).
    let blocks = scan_blocks(&img);
    let cut = blocks[1].1.last().unwrap().offset as usize;
    expect_corrupt(
        &edit(&img, &blocks[1].0, |d| d.truncate(cut)),
        "closed segment truncated",
    );
}

#[test]
fn an_older_copy_of_a_segment_is_corruption() {
    let io = FaultIo::new();
    let mut s = open(&io).unwrap();
    fill(&mut s, 3, 2);
    let old = io.crash_image(&CrashOptions::default());
    let first = segs(&old)[0].clone();
    fill(&mut s, 40, 3);
    s.sync_checkpoint().unwrap();
    let now = io.crash_image(&CrashOptions::default());
    let mut rolled = now.clone();
    rolled.set_file_data(&first, old.file_data(&first).unwrap());
    expect_corrupt(&rolled, "older copy of the first segment");
}

#[test]
fn truncation_below_the_external_durable_mark_is_corruption() {
    let io = FaultIo::new();
    let mut s = open(&io).unwrap();
    fill(&mut s, 12, 4);
    s.sync_checkpoint().unwrap();
    let mark = s.durable_mark().unwrap();
    drop(s);
    let img = io.crash_image(&CrashOptions::default());
    let blocks = scan_blocks(&img);
    let (path, bl) = blocks.last().unwrap();
    let cut = (bl[bl.len() - 2].offset + 10) as usize;
    let truncated = edit(&img, path, |d| d.truncate(cut));
    // Without outside state a clean cut looks like a crash (documented limit) ...
    assert!(reopen(&truncated).unwrap().report().torn_tail.is_some());
    // ... with the catalog's durable mark it is corruption.
    let mut cfg = small_cfg();
    cfg.min_durable = Some(mark);
    match open_cfg(&FaultIo::from_image(truncated), cfg) {
        Err(StoreError::Corrupt { .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_wrong_data_key_is_an_error_and_changes_nothing() {
    let (img, _) = fixture();
    let io = FaultIo::from_image(img.clone());
    let wrong = super::segment::StreamKeys::new(
        super::testing::support::STORE,
        super::testing::support::STREAM,
        1,
        crate::crypto::DataKey::generate(),
    );
    let r = FileStore::open(
        Arc::new(io.clone()) as Arc<dyn SegmentIo>,
        wrong,
        small_cfg(),
    );
    assert!(matches!(r, Err(StoreError::Corrupt { .. })), "{r:?}");
    for p in segs(&img) {
        assert_eq!(io.with_fs(|fs| fs.file_data(&p)), img.file_data(&p));
    }
    let missing = super::segment::StreamKeys::new(
        super::testing::support::STORE,
        super::testing::support::STREAM,
        2,
        crate::crypto::DataKey::generate(),
    );
    let r = FileStore::open(Arc::new(io) as Arc<dyn SegmentIo>, missing, small_cfg());
    assert!(
        matches!(r, Err(StoreError::KeyUnavailable { version: 1, .. })),
        "{r:?}"
    );
}

#[test]
fn messages_stored_at_their_own_sequences_reopen_with_the_gaps() {
    let io = FaultIo::new();
    let mut s = open(&io).unwrap();
    let at = |seq: u64| NewMsg {
        seq: Some(seq),
        ts: Some(i64::try_from(seq).unwrap() * 1_000),
        ..NewMsg::new("m.x", format!("{seq}"))
    };
    s.append_batch(&[at(2), at(3)]).unwrap();
    s.append_batch(&[at(7)]).unwrap();
    s.close().unwrap();
    let s = reopen(&io.crash_image(&CrashOptions::default())).unwrap();
    let st = s.state();
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (3, 2, 7));
    assert_eq!(s.get(7).unwrap().unwrap().ts, 7_000);
    assert!(s.get(5).unwrap().is_none());
}
