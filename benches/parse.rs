//! Parser throughput: a read buffer full of PUBs (the publisher's hot path), split the way a
//! socket delivers it.
#![expect(
    missing_docs,
    reason = "criterion macros generate undocumented functions"
)]

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use sealstream::proto::parser::{Limits, Parser};

fn pub_stream(n: usize, size: usize) -> Vec<u8> {
    let payload = vec![b'x'; size];
    let mut out = Vec::new();
    for i in 0..n {
        out.extend_from_slice(
            format!("PUB orders.eu.{}.created _INBOX.abc.{i} {size}\r\n", i % 16).as_bytes(),
        );
        out.extend_from_slice(&payload);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    for size in [16usize, 128, 1024] {
        let wire = pub_stream(1000, size);
        g.throughput(Throughput::Elements(1000));
        g.bench_function(format!("pub_{size}B_x1000_64KiB_reads"), |b| {
            b.iter(|| {
                let mut p = Parser::new(Limits::default());
                let mut buf = BytesMut::with_capacity(64 * 1024);
                let mut n = 0;
                for chunk in wire.chunks(64 * 1024) {
                    buf.extend_from_slice(chunk);
                    while let Ok(Some(op)) = p.next_client_op(&mut buf) {
                        black_box(&op);
                        n += 1;
                    }
                }
                assert_eq!(n, 1000);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
