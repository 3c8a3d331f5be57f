//! Store benchmarks: group-committed appends (1, 4, 16 writers; 128 B and 1 KiB; fsync on,
//! real files in a temp dir), sequential reads, and the references they are judged against:
//! raw fsync'd appends of the same batch sizes and raw XChaCha20-Poly1305 throughput.
//!
//! `cargo bench --bench store_append --features bench-unsealed` adds the same append runs with
//! sealing replaced by a no-op, to measure what encryption costs.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use sealstream::crypto::{DataKey, SealKey, Secret};
use sealstream::store::group_commit::{CommitPolicy, GroupCommitter};
use sealstream::store::{FileStore, FileStoreConfig, NewMsg, OsIo, StreamKeys, StreamStore};

/// Builds the keys of one benchmark store.
type MakeKeys = fn() -> StreamKeys;

fn keys() -> StreamKeys {
    StreamKeys::new([1; 16], [2; 16], 1, DataKey::generate())
}

fn open(dir: &std::path::Path, keys: StreamKeys) -> FileStore {
    FileStore::open(Arc::new(OsIo), keys, FileStoreConfig::new(dir)).expect("open store")
}

fn group_commit_run(c: &mut Criterion, name: &str, make_keys: &dyn Fn() -> StreamKeys) {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.throughput(Throughput::Elements(1));
    for size in [128usize, 1024] {
        for writers in [1usize, 4, 16] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let store = open(tmp.path(), make_keys());
            let gc = GroupCommitter::spawn(Box::new(store), policy()).expect("spawn");
            let payload = Bytes::from(vec![b'x'; size]);
            g.bench_function(
                BenchmarkId::new(format!("{size}B"), format!("{writers}w")),
                |b| {
                    b.iter_custom(|iters| {
                        let per = iters.div_ceil(writers as u64);
                        let start = Instant::now();
                        std::thread::scope(|s| {
                            for w in 0..writers {
                                let h = gc.handle();
                                let p = payload.clone();
                                s.spawn(move || {
                                    for _ in 0..per {
                                        h.append(NewMsg::new(format!("bench.{w}"), p.clone()))
                                            .expect("append");
                                    }
                                });
                            }
                        });
                        start
                            .elapsed()
                            .mul_f64(iters as f64 / (per * writers as u64) as f64)
                    });
                },
            );
            let (batches, msgs) = gc.handle().stats();
            eprintln!(
                "{name}/{size}B/{writers}w: average batch {:.1} messages",
                msgs as f64 / batches.max(1) as f64
            );
            drop(gc.shutdown());
        }
    }
    g.finish();
}

fn appends(c: &mut Criterion) {
    group_commit_run(c, "append_sealed", &keys);
    #[cfg(feature = "bench-unsealed")]
    group_commit_run(c, "append_unsealed", &|| {
        keys().insecure_unsealed_for_bench()
    });
}

/// The store's CPU path without the disk (files on tmpfs, where fsync is free): 16 x 1 KiB batches,
/// sealed and (with the feature) unsealed, isolating what sealing costs per commit.
fn append_cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("append_cpu_16x1KiB");
    g.throughput(Throughput::Bytes(16 * 1024));
    let payload = Bytes::from(vec![b'c'; 1024]);
    let msgs: Vec<NewMsg> = (0..16)
        .map(|i| NewMsg::new(format!("cpu.{i}"), payload.clone()))
        .collect();
    let variants: [(&str, MakeKeys); 1] = [("sealed", keys)];
    let variants = variants.into_iter();
    #[cfg(feature = "bench-unsealed")]
    let variants = variants.chain([(
        "unsealed",
        (|| keys().insecure_unsealed_for_bench()) as fn() -> StreamKeys,
    )]);
    for (name, make) in variants {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                // A fresh store per sample keeps the tmpfs footprint (and page faults) small.
                let shm = std::path::Path::new("/dev/shm");
                let tmp = if shm.is_dir() {
                    tempfile::tempdir_in(shm)
                } else {
                    tempfile::tempdir()
                }
                .expect("tempdir");
                let mut store = open(tmp.path(), make());
                let start = Instant::now();
                for _ in 0..iters {
                    store.append_batch(&msgs).expect("append");
                }
                start.elapsed()
            });
        });
    }
    g.finish();
}

/// dd oflag=dsync-like: one write of `batch` 1 KiB records, then fdatasync, appending.
fn raw_fsync(c: &mut Criterion) {
    let mut g = c.benchmark_group("raw_fsync_append_1KiB");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for batch in [1usize, 4, 16] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut f = std::fs::File::create(tmp.path().join("raw")).expect("create");
        let buf = vec![b'r'; batch * 1024];
        g.throughput(Throughput::Bytes(buf.len() as u64));
        g.bench_function(BenchmarkId::from_parameter(format!("batch{batch}")), |b| {
            b.iter(|| {
                f.write_all(&buf).expect("write");
                f.sync_data().expect("fdatasync");
            });
        });
    }
    g.finish();
}

fn raw_aead(c: &mut Criterion) {
    let mut g = c.benchmark_group("raw_xchacha20poly1305");
    let key = SealKey::new(Secret::random());
    for len in [16usize << 10, 1 << 20] {
        let mut buf = vec![7u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::from_parameter(len), |b| {
            b.iter(|| key.seal_in_place(b"aad", std::hint::black_box(&mut buf)));
        });
    }
    g.finish();
}

/// Sequential 1 KiB reads through a 2-block cache, so every block is opened (authenticated and
/// decrypted) once per pass: what sealing costs a reader. With `bench-unsealed` the same run on
/// an unsealed store gives the comparison.
fn sequential_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("sequential_read_1KiB");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    let n = 64 * 312u64;
    g.throughput(Throughput::Elements(n));
    #[cfg_attr(
        not(feature = "bench-unsealed"),
        expect(unused_mut, reason = "the unsealed variant is feature-gated")
    )]
    let mut variants: Vec<(&str, StreamKeys)> = vec![("sealed", keys())];
    #[cfg(feature = "bench-unsealed")]
    variants.push(("unsealed", keys().insecure_unsealed_for_bench()));
    for (name, k) in variants {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut cfg = FileStoreConfig::new(tmp.path());
        cfg.cache_blocks = 2;
        let mut store = FileStore::open(Arc::new(OsIo), k, cfg).expect("open store");
        let payload = Bytes::from(vec![b'y'; 1024]);
        // Blocks of 64 messages (a busy group commit), 312 blocks in all.
        for chunk in 0..n / 64 {
            let msgs: Vec<NewMsg> = (0..64)
                .map(|i| NewMsg::new(format!("r.{}", (chunk + i) % 10), payload.clone()))
                .collect();
            store.append_batch(&msgs).expect("fill");
        }
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut bytes = 0;
                for q in 1..=n {
                    bytes += store.get(q).expect("get").expect("stored").payload.len();
                }
                std::hint::black_box(bytes)
            });
        });
    }
    g.finish();
}

/// The commit policy (linger overridable with `SEALSTORE_LINGER_US` for experiments).
fn policy() -> CommitPolicy {
    let mut p = CommitPolicy::default();
    if let Some(us) = std::env::var("SEALSTORE_LINGER_US")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        p.linger = Duration::from_micros(us);
    }
    p
}

/// Interleaved A/B/C rounds on the real disk, so all three see the same fsync weather: the
/// sealed store and (with the feature) the unsealed store with 16 writers x 1 KiB through the
/// group committer, and raw `write + fdatasync` of 16 KiB batches. Prints MiB/s and ratios.
fn interleaved_16w_1kib() {
    const ROUNDS: usize = 10;
    const PER_WRITER: usize = 256;
    let payload = Bytes::from(vec![b'i'; 1024]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut variants: Vec<(&str, Option<GroupCommitter>)> = Vec::new();
    let sealed = open(&tmp.path().join("sealed"), keys());
    variants.push((
        "sealed",
        Some(GroupCommitter::spawn(Box::new(sealed), policy()).expect("spawn")),
    ));
    #[cfg(feature = "bench-unsealed")]
    {
        let unsealed = open(
            &tmp.path().join("unsealed"),
            keys().insecure_unsealed_for_bench(),
        );
        variants.push((
            "unsealed",
            Some(GroupCommitter::spawn(Box::new(unsealed), policy()).expect("spawn")),
        ));
    }
    variants.push(("raw", None));
    let mut raw = std::fs::File::create(tmp.path().join("raw")).expect("create");
    let batch = vec![b'r'; 16 * 1024];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let bytes = (16 * PER_WRITER * 1024) as f64 / (1024.0 * 1024.0);
    for _ in 0..ROUNDS {
        for (i, (_, gc)) in variants.iter().enumerate() {
            let start = Instant::now();
            match gc {
                Some(gc) => std::thread::scope(|s| {
                    for w in 0..16 {
                        let h = gc.handle();
                        let p = payload.clone();
                        s.spawn(move || {
                            for _ in 0..PER_WRITER {
                                h.append(NewMsg::new(format!("ab.{w}"), p.clone()))
                                    .expect("append");
                            }
                        });
                    }
                }),
                None => {
                    for _ in 0..PER_WRITER {
                        raw.write_all(&batch).expect("write");
                        raw.sync_data().expect("fdatasync");
                    }
                }
            }
            rates[i].push(bytes / start.elapsed().as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let meds: Vec<f64> = rates.iter_mut().map(median).collect();
    let raw_rate = meds[meds.len() - 1];
    for ((name, _), m) in variants.iter().zip(&meds) {
        eprintln!("interleaved 16 writers x 1 KiB: {name:9} median {m:7.2} MiB/s  ({:5.1}% of raw fsync'd writes)", 100.0 * m / raw_rate);
    }
    if meds.len() == 3 {
        eprintln!(
            "interleaved: sealing costs {:.1}% vs unsealed",
            100.0 * (1.0 - meds[0] / meds[1])
        );
    }
    for (_, gc) in variants {
        if let Some(gc) = gc {
            drop(gc.shutdown());
        }
    }
}

/// Every benchmark group of this file.
fn benches() {
    interleaved_16w_1kib();
    let mut c = Criterion::default().configure_from_args();
    appends(&mut c);
    append_cpu(&mut c);
    raw_fsync(&mut c);
    raw_aead(&mut c);
    sequential_read(&mut c);
}

criterion_main!(benches);
