//! CPU cost of the offline MXFP4 re-layout (`mx::pack`, which users run at weight-load time) and of its inverse, on
//! one K3 expert matrix (N6144 x K3584: 11 MB of natural bytes), with the per-column form of the layout's definition
//! (`k3k_ir::fp4::place` per value, what `pack` did before its byte tables) timed beside it.
//! `cargo bench -p k3k-ops --bench pack`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k3k_ir::fp4;
use k3k_ops::mx::pack::{pack, unpack};
use rayon::prelude::*;
use std::hint::black_box;

/// Pack by the definition: every column's code placed on its own (one block per parallel item).
fn pack_per_column(q: &[u8], rows: usize, k: usize) -> Vec<u32> {
    let mut out = vec![0u32; rows * k / 8];
    out.par_chunks_mut(4).zip(q.par_chunks(16)).for_each(|(words, bytes)| {
        for c in 0..32 {
            let (w, p) = fp4::slot(c, true);
            words[w] |= fp4::place(u32::from((bytes[c / 2] >> (4 * (c % 2))) & 15), p, true);
        }
    });
    out
}

fn bench(c: &mut Criterion) {
    let (rows, k) = (6144, 3584);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let q: Vec<u8> = (0..rows * k / 2)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let words = pack(&q, rows, k).unwrap();
    assert_eq!(pack_per_column(&q, rows, k), words, "the two forms agree");
    let mut g = c.benchmark_group("mx_pack N6144 K3584");
    g.throughput(Throughput::Bytes(q.len() as u64));
    g.sample_size(20);
    g.bench_function("pack", |b| b.iter(|| pack(black_box(&q), rows, k).unwrap()));
    g.bench_function("pack, per-column definition", |b| b.iter(|| pack_per_column(black_box(&q), rows, k)));
    g.bench_function("unpack", |b| b.iter(|| unpack(black_box(&words), rows, k).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
