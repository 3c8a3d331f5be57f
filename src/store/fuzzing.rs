//! Fuzzing entry point for recovery (`fuzz/fuzz_targets/segment_recovery.rs`).
//!
//! Builds a small sealed stream in the in-memory [`FaultIo`], applies the fuzzer's bytes as
//! edits to its segment files (overwrites at chosen offsets, optional truncation), and reopens
//! it for inspection. Invariants asserted: nothing panics, and every message the damaged store
//! still returns is byte-for-byte one that was written at that sequence (damage is detected,
//! never turned into wrong data).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use crate::crypto::{DataKey, Kek, MasterKey, Secret, WrappedKey};

use super::file_store::{FileStore, FileStoreConfig};
use super::io::{FaultIo, SegmentIo};
use super::segment::StreamKeys;
use super::{NewMsg, StreamStore};

const STORE: [u8; 16] = [0x5e; 16];
const STREAM: [u8; 16] = [0xa1; 16];

fn kek() -> Kek {
    Kek::derive(&MasterKey::from_bytes(Secret::new([7u8; 32])), &STORE)
}

fn keys(wrapped: &WrappedKey) -> Option<StreamKeys> {
    let dek = kek().unwrap(wrapped, &STREAM, 1).ok()?;
    Some(StreamKeys::new(STORE, STREAM, 1, dek))
}

fn cfg() -> FileStoreConfig {
    let mut c = FileStoreConfig::new(PathBuf::from("/fuzz/s/a1"));
    c.max_segment_bytes = 2048;
    c.pad_bucket = 64;
    c.reserve_chunk = 4096;
    c
}

/// See the module docs.
#[doc(hidden)]
pub fn fuzz_segment_recovery(data: &[u8]) {
    let wrapped = kek().wrap(&DataKey::generate(), &STREAM, 1);
    let io = FaultIo::new();
    let shared: Arc<dyn SegmentIo> = Arc::new(io.clone());
    let Some(k) = keys(&wrapped) else { return };
    let Ok(mut store) = FileStore::open(Arc::clone(&shared), k, cfg()) else {
        return;
    };
    let mut written: BTreeMap<u64, (String, Bytes)> = BTreeMap::new();
    for b in 0..8u64 {
        let msgs: Vec<NewMsg> = (0..3)
            .map(|j| {
                NewMsg::new(
                    format!("f.{}", (b + j) % 3),
                    format!("payload-{b}-{j}-{}", "x".repeat((b * 7 % 40) as usize)),
                )
            })
            .collect();
        let Ok(results) = store.append_batch(&msgs) else {
            return;
        };
        for (r, m) in results.into_iter().zip(msgs) {
            if let Ok(a) = r {
                written.insert(a.seq, (m.subject, m.payload));
            }
        }
    }
    let _ = store.close();
    drop(store);
    let dir = cfg().dir;
    let Ok(mut names) = io.list_dir(&dir) else {
        return;
    };
    names.sort();
    if names.is_empty() {
        return;
    }
    // Edits: each 4-byte group picks a file, an offset and a byte; a 0xFF marker truncates.
    for e in data.chunks(4) {
        let [f, hi, lo, v] =
            [e.first(), e.get(1), e.get(2), e.get(3)].map(|x| x.copied().unwrap_or(0));
        let Some(name) = names.get(usize::from(f) % names.len()) else {
            continue;
        };
        let path = dir.join(name);
        io.with_fs(|fs| {
            if let Some(mut d) = fs.file_data(&path) {
                if d.is_empty() {
                    return;
                }
                let off = (usize::from(hi) << 8 | usize::from(lo)) % d.len();
                if f == 0xFF {
                    d.truncate(off);
                } else if let Some(b) = d.get_mut(off) {
                    *b = v;
                }
                fs.set_file_data(&path, d);
            }
        });
    }
    let Some(k) = keys(&wrapped) else { return };
    let Ok(reopened) = FileStore::open_inspect(shared, k, cfg()) else {
        return;
    };
    let last = reopened
        .state()
        .last_seq
        .max(written.keys().last().copied().unwrap_or(0));
    for seq in 1..=last + 1 {
        if let Ok(Some(m)) = reopened.get(seq) {
            let want = written.get(&seq);
            assert!(
                want.is_some_and(|(s, p)| *s == m.subject && *p == m.payload),
                "seq {seq} returned bytes that were never written there"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fuzz_entry_point_survives_sample_edits() {
        super::fuzz_segment_recovery(&[]);
        super::fuzz_segment_recovery(&[0, 0, 200, 1, 1, 0, 10, 0xAA, 0xFF, 1, 0, 0]);
        for i in 0..64u8 {
            super::fuzz_segment_recovery(&[i, i.wrapping_mul(7), i.wrapping_mul(13), i]);
        }
    }
}
