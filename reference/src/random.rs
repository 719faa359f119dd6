//! Seeded random tensor helpers for tests (here and in the other crates). Draw a fresh seed with
//! [`fresh_seed`], build the generator with [`seeded`], and print the seed in assertion messages.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::StandardNormal;

use crate::mx::bf16_round;

/// A fresh random seed from the thread-local generator (`rand::rng()`).
pub fn fresh_seed() -> u64 {
    rand::rng().random()
}

/// A deterministic generator from `seed`.
pub fn seeded(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `n` draws of N(0, std^2), rounded to f32.
pub fn normal_f32<R: Rng + ?Sized>(rng: &mut R, n: usize, std: f64) -> Vec<f32> {
    (0..n).map(|_| (rng.sample::<f64, _>(StandardNormal) * std) as f32).collect()
}

/// `n` draws of N(0, std^2), rounded to bf16 (returned as f32 holding bf16 values).
pub fn bf16_normal<R: Rng + ?Sized>(rng: &mut R, n: usize, std: f64) -> Vec<f32> {
    normal_f32(rng, n, std).into_iter().map(bf16_round).collect()
}

/// `n` uniform draws in `[lo, hi)`, rounded to f32 (and clamped into `[lo, hi]`).
pub fn uniform_f32<R: Rng + ?Sized>(rng: &mut R, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u: f64 = rng.random();
            ((lo + (hi - lo) * u) as f32).clamp(lo as f32, hi as f32)
        })
        .collect()
}

/// `n` uniform draws in `[lo, hi)`, rounded to bf16 (returned as f32).
pub fn bf16_uniform<R: Rng + ?Sized>(rng: &mut R, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    uniform_f32(rng, n, lo, hi).into_iter().map(bf16_round).collect()
}

/// `rows` random unit-L2 rows of length `dim` (`[rows, dim]` row-major, normal draws normalised
/// in f64, then rounded to bf16).
pub fn bf16_unit_rows<R: Rng + ?Sized>(rng: &mut R, rows: usize, dim: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * dim);
    for _ in 0..rows {
        let v: Vec<f64> = (0..dim).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
        let nrm = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-300);
        out.extend(v.iter().map(|x| bf16_round((x / nrm) as f32)));
    }
    out
}

/// `n` router scores `sigmoid(N(0, std^2))` in f32 (values in [0, 1]).
pub fn sigmoid_scores<R: Rng + ?Sized>(rng: &mut R, n: usize, std: f64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let z: f64 = rng.sample::<f64, _>(StandardNormal) * std;
            (1.0 / (1.0 + (-z).exp())) as f32
        })
        .collect()
}

/// `n` KDA log-decay gates `logsigmoid(N(0,1)) / normalizer` (as the fla tests draw them), f32, <= 0.
pub fn logsigmoid_gates<R: Rng + ?Sized>(rng: &mut R, n: usize, normalizer: f64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let z: f64 = rng.sample(StandardNormal);
            let ls = -((-z).max(0.0) + (-(z.abs())).exp().ln_1p());
            (ls / normalizer) as f32
        })
        .collect()
}

/// Ragged group ends for a grouped GEMM: `g` groups whose sizes are uniform in
/// `[0, 2 * mean]`, each group forced empty with probability `empty_prob`. Returns the inclusive
/// cumulative ends (`offs: [g]`, i32) and their total (`m_total = offs[g-1]`).
pub fn ragged_offsets<R: Rng + ?Sized>(rng: &mut R, g: usize, mean: usize, empty_prob: f64) -> (Vec<i32>, usize) {
    let mut total = 0usize;
    let offs = (0..g)
        .map(|_| {
            let size = if rng.random_bool(empty_prob.clamp(0.0, 1.0)) { 0 } else { rng.random_range(0..=2 * mean) };
            total += size;
            total as i32
        })
        .collect();
    (offs, total)
}

/// Random varlen boundaries `cu_seqlens: [n + 1]` (starts at 0, ends at `total`, non-decreasing;
/// sequences may be empty).
pub fn cu_seqlens<R: Rng + ?Sized>(rng: &mut R, total: usize, n: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = (0..n.saturating_sub(1)).map(|_| rng.random_range(0..=total)).collect();
    cuts.sort_unstable();
    let mut cu = Vec::with_capacity(n + 1);
    cu.push(0);
    cu.extend(cuts);
    if n > 0 {
        cu.push(total);
    }
    cu
}

/// A random paged-KV block table for requests of lengths `seqlens`: every request gets
/// `ceil(len / block_size)` distinct physical blocks out of a shuffled pool, padded with -1 up to
/// `max_blocks` (the largest need). Returns `(block_table [b, max_blocks] i32, max_blocks,
/// num_blocks)`, where `num_blocks` is the pool size (all blocks used, plus `spare` unused ones).
pub fn block_table<R: Rng + ?Sized>(
    rng: &mut R,
    seqlens: &[usize],
    block_size: usize,
    spare: usize,
) -> (Vec<i32>, usize, usize) {
    let bs = block_size.max(1);
    let need: Vec<usize> = seqlens.iter().map(|&l| l.div_ceil(bs)).collect();
    let max_blocks = need.iter().copied().max().unwrap_or(0).max(1);
    let num_blocks = need.iter().sum::<usize>() + spare;
    let mut pool: Vec<i32> = (0..num_blocks as i32).collect();
    pool.shuffle(rng);
    let mut table = vec![-1i32; seqlens.len() * max_blocks];
    let mut next = 0;
    for (b, &nb) in need.iter().enumerate() {
        for j in 0..nb {
            table[b * max_blocks + j] = pool[next];
            next += 1;
        }
    }
    (table, max_blocks, num_blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_have_the_promised_shapes() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let x = bf16_normal(&mut rng, 1000, 2.0);
        assert!(x.iter().all(|&v| bf16_round(v) == v), "seed {seed}");
        let sd = (x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / 1000.0).sqrt();
        assert!((sd - 2.0).abs() < 0.3, "seed {seed} sd {sd}");
        let u = uniform_f32(&mut rng, 1000, -5.0, 0.0);
        assert!(u.iter().all(|&v| (-5.0..=0.0).contains(&v)));
        let g = logsigmoid_gates(&mut rng, 1000, 16.0);
        assert!(g.iter().all(|&v| v <= 0.0 && v.is_finite()));
        let s = sigmoid_scores(&mut rng, 1000, 1.0);
        assert!(s.iter().all(|&v| (0.0..=1.0).contains(&v)));
        let r = bf16_unit_rows(&mut rng, 3, 64);
        for row in r.chunks(64) {
            let n: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum();
            assert!((n - 1.0).abs() < 1e-2);
        }
        let (offs, total) = ragged_offsets(&mut rng, 20, 5, 0.3);
        assert_eq!(offs.len(), 20);
        assert_eq!(*offs.last().unwrap() as usize, total);
        assert!(offs.windows(2).all(|w| w[0] <= w[1]));
        let cu = cu_seqlens(&mut rng, 100, 4);
        assert_eq!((cu.len(), cu[0], cu[4]), (5, 0, 100));
        assert!(cu.windows(2).all(|w| w[0] <= w[1]));
        let (t, mb, nb) = block_table(&mut rng, &[0, 65, 128], 64, 2);
        assert_eq!((mb, nb, t.len()), (2, 6, 6));
        let mut used: Vec<i32> = t.iter().copied().filter(|&v| v >= 0).collect();
        used.sort();
        used.dedup();
        assert_eq!(used.len(), 4);
    }
}
