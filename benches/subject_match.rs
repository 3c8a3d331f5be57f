//! Routing hot path: matching a literal 4-token subject against trees of 10, 1k and 100k
//! subscriptions mixing literal, `*` and `>` filters (some in queue groups), the interest check
//! used for no-responders (hit and miss), and a per-connection cache hit.
//!
//! Run: `cargo bench --bench subject_match`. Each iteration is one published subject, so the
//! reported throughput is subjects matched per second.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sealstream::subject::{MatchCache, SubjectTree};

/// The subject every benchmark publishes to.
const SUBJECT: &[u8] = b"svc1.region2.k3.created";
/// A subject with the same shape that only one `>` filter reaches.
const QUIET_SUBJECT: &[u8] = b"svc1.region2.k3.archived";
/// A subject with the same shape that nothing reaches (a request nobody serves).
const UNHEARD_SUBJECT: &[u8] = b"svc99.region2.k3.created";

/// A tiny deterministic generator (xorshift64*), so runs compare like for like.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// `size` subscriptions shaped like a service mesh: `svc.region.key.event`, 70% literal, 15%
/// with one `*`, 10% ending in `>`, 5% literal in one of four queue groups. Three filters that
/// match [`SUBJECT`] are always present.
fn build_tree(size: usize) -> SubjectTree<u64> {
    let mut tree = SubjectTree::new();
    let fixed: [(&[u8], Option<&[u8]>); 3] = [
        (SUBJECT, None),
        (b"svc1.*.k3.created", None),
        (b"svc1.region2.>", Some(b"workers")),
    ];
    let mut id = 0u64;
    for (filter, queue) in fixed {
        tree.insert(filter, queue, id)
            .expect("fixed filters are valid");
        id += 1;
    }
    let mut rng = Rng(0x5EA1_5EA1_5EA1_5EA1);
    let keys = (size as u64 / 10).max(4);
    let events = ["created", "updated", "deleted", "archived"];
    while tree.len() < size {
        let mut tokens = vec![
            format!("svc{}", rng.below(20)),
            format!("region{}", rng.below(10)),
            format!("k{}", rng.below(keys)),
            events[rng.below(3) as usize].to_string(),
        ];
        let kind = rng.below(100);
        let mut queue = None;
        if kind < 15 {
            let at = rng.below(4) as usize;
            tokens[at] = "*".to_string();
        } else if kind < 25 {
            let keep = 1 + rng.below(3) as usize;
            tokens.truncate(keep);
            tokens.push(">".to_string());
        } else if kind < 30 {
            queue = Some(format!("q{}", rng.below(4)));
        }
        let filter = tokens.join(".");
        tree.insert(filter.as_bytes(), queue.as_deref().map(str::as_bytes), id)
            .expect("generated filters are valid");
        id += 1;
    }
    tree
}

fn bench_match(c: &mut Criterion) {
    let mut group = c.benchmark_group("subject_match");
    group
        .throughput(Throughput::Elements(1))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for size in [10usize, 1_000, 100_000] {
        let tree = build_tree(size);
        let hits = tree.matches(SUBJECT);
        eprintln!(
            "tree of {size}: {} plain + {} groups match {}",
            hits.plain.len(),
            hits.groups.len(),
            String::from_utf8_lossy(SUBJECT)
        );
        group.bench_with_input(BenchmarkId::new("matches", size), &tree, |b, tree| {
            b.iter(|| tree.matches(black_box(SUBJECT)))
        });
        group.bench_with_input(BenchmarkId::new("matches_into", size), &tree, |b, tree| {
            let mut out = Default::default();
            b.iter(|| {
                tree.matches_into(black_box(SUBJECT), &mut out);
                black_box(&out);
            })
        });
        assert!(tree.has_interest(QUIET_SUBJECT) && !tree.has_interest(UNHEARD_SUBJECT));
        group.bench_with_input(BenchmarkId::new("has_interest", size), &tree, |b, tree| {
            b.iter(|| tree.has_interest(black_box(QUIET_SUBJECT)))
        });
        group.bench_with_input(BenchmarkId::new("no_interest", size), &tree, |b, tree| {
            b.iter(|| tree.has_interest(black_box(UNHEARD_SUBJECT)))
        });
        group.bench_with_input(BenchmarkId::new("cache_hit", size), &tree, |b, tree| {
            let mut cache = MatchCache::new();
            cache.get_or_match(tree, SUBJECT);
            b.iter(|| cache.get_or_match(tree, black_box(SUBJECT)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_match);
criterion_main!(benches);
