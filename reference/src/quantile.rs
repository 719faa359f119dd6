//! Histogram quantile reduction for Quantile Balancing (SEMANTICS.md section 2.5): per-token cutoffs alpha_t,
//! margins, mergeable per-expert histograms with a bin rule a GPU reproduces bit-for-bit, the
//! interpolated quantile (one or two passes), the QB bias, and the exact sort-based references.
//!
//! Layouts: scores and margins `[T, E]` row-major (token-major), bias `[E]`, alpha `[T]`.
//! Arithmetic that decides a histogram bin is f32 exactly as documented on [`Histogram::slot`], so
//! GPU counts must equal these counts exactly.

use crate::error::{RefError, check_len, check_no_nan, ensure};

/// Checks `x: [t, e]` and returns its columns' values in row order.
fn column(x: &[f32], t: usize, e: usize, col: usize) -> Vec<f32> {
    (0..t).map(|r| x[r * e + col]).collect()
}

/// The `k1`-th largest (1-based) entry of every row of `x: [t, e]` (so alpha_t of QB uses
/// `k1 = k + 1`); returns `[t]`. Errors on NaN or `k1` outside `1..=e`.
pub fn kth_largest_per_row(x: &[f32], t: usize, e: usize, k1: usize) -> Result<Vec<f64>, RefError> {
    check_len("x", x.len(), "[T, E]", &[t, e])?;
    check_no_nan("x", x)?;
    ensure((1..=e).contains(&k1), "k1", || format!("rank {k1} is outside 1..={e}"))?;
    Ok(x.chunks_exact(e.max(1))
        .take(t)
        .map(|row| {
            let mut r = row.to_vec();
            r.sort_unstable_by(|a, b| b.total_cmp(a));
            r[k1 - 1] as f64
        })
        .collect())
}

/// QB per-token cutoff: alpha_t = the (k+1)-th largest of the biased scores `s_te + b_e`, where the
/// sum is rounded to f32 (as a GPU computes it). `s: [t, e]`, `b: [e]`; returns `[t]` f32 values.
pub fn biased_alpha(s: &[f32], b: &[f32], t: usize, e: usize, k: usize) -> Result<Vec<f32>, RefError> {
    check_len("s", s.len(), "[T, E]", &[t, e])?;
    check_len("b", b.len(), "[E]", &[e])?;
    check_no_nan("s", s)?;
    check_no_nan("b", b)?;
    let biased: Vec<f32> = s.iter().enumerate().map(|(i, &v)| v + b[i % e.max(1)]).collect();
    let a = kth_largest_per_row(&biased, t, e, k + 1)?;
    Ok(a.into_iter().map(|v| v as f32).collect())
}

/// QB margins `r_te = s_te - alpha_t`, computed in f32 (one rounding, as on the GPU).
/// `s: [t, e]`, `alpha: [t]`; returns `[t, e]`.
pub fn margins(s: &[f32], t: usize, e: usize, alpha: &[f32]) -> Result<Vec<f32>, RefError> {
    check_len("s", s.len(), "[T, E]", &[t, e])?;
    check_len("alpha", alpha.len(), "[T]", &[t])?;
    check_no_nan("s", s)?;
    check_no_nan("alpha", alpha)?;
    Ok(s.iter().enumerate().map(|(i, &v)| v - alpha[i / e.max(1)]).collect())
}

/// Where a target count from the top falls in one expert's histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Located {
    /// Inside the overflow slot (values >= hi), or target <= the overflow count.
    Overflow,
    /// Inside regular bin `b` (0-based, covering `[lo + b w, lo + (b+1) w)`).
    Bin(usize),
    /// Past every regular bin (the target reaches into the underflow slot, values < lo).
    Underflow,
}

/// Per-expert histograms over fixed bins on `[lo, hi)` plus under/overflow, mergeable by addition.
/// `counts: [experts, bins + 2]`: slot 0 = underflow (x < lo), slots 1..=bins the regular bins,
/// slot bins + 1 = overflow (x >= hi). `lo` and `hi` are f32 values (rounded on construction).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Number of experts (columns) E.
    pub experts: usize,
    /// Number of regular bins B.
    pub bins: usize,
    /// Lower edge (an f32 value).
    pub lo: f64,
    /// Upper edge (an f32 value).
    pub hi: f64,
    /// Counts `[experts, bins + 2]`, row-major.
    pub counts: Vec<u64>,
}

/// The geometry part of a histogram (everything but the counts).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistogramGeometry {
    /// Experts E.
    pub experts: usize,
    /// Regular bins B.
    pub bins: usize,
    /// Lower edge.
    pub lo: f64,
    /// Upper edge.
    pub hi: f64,
}

impl Histogram {
    /// An empty histogram for `experts` columns, `bins` regular bins on `[lo, hi)`; `lo` and `hi`
    /// are rounded to f32 and must be finite with `lo < hi`; `1 <= bins <= 2^24`.
    pub fn new(experts: usize, lo: f64, hi: f64, bins: usize) -> Result<Self, RefError> {
        let (lo32, hi32) = (lo as f32, hi as f32);
        ensure(lo32.is_finite() && hi32.is_finite() && lo32 < hi32, "lo/hi", || {
            format!("need finite lo < hi (as f32), got lo = {lo}, hi = {hi}")
        })?;
        ensure((1..=1 << 24).contains(&bins), "bins", || format!("need 1 <= bins <= 2^24, got {bins}"))?;
        let scale = bins as f32 / (hi32 - lo32);
        ensure(scale.is_finite() && scale > 0.0, "lo/hi", || {
            format!("bins / (hi - lo) = {scale} is not a positive finite f32")
        })?;
        Ok(Histogram { experts, bins, lo: lo32 as f64, hi: hi32 as f64, counts: vec![0; experts * (bins + 2)] })
    }

    /// Builds the per-column histograms of `values: [t, e]` (see [`Histogram::slot`]); NaN is an error.
    pub fn build(values: &[f32], t: usize, e: usize, lo: f64, hi: f64, bins: usize) -> Result<Self, RefError> {
        check_len("values", values.len(), "[T, E]", &[t, e])?;
        check_no_nan("values", values)?;
        let mut h = Histogram::new(e, lo, hi, bins)?;
        for (i, &x) in values.iter().enumerate() {
            let s = h.slot(x);
            h.counts[(i % e) * (bins + 2) + s] += 1;
        }
        Ok(h)
    }

    /// Geometry (experts, bins, lo, hi).
    pub fn geometry(&self) -> HistogramGeometry {
        HistogramGeometry { experts: self.experts, bins: self.bins, lo: self.lo, hi: self.hi }
    }

    /// The f32 multiplier of the bin rule: `bins as f32 / (hi as f32 - lo as f32)`, one f32
    /// subtraction and one correctly rounded f32 division (pass this value to a GPU kernel).
    pub fn bin_scale_f32(&self) -> f32 {
        self.bins as f32 / (self.hi as f32 - self.lo as f32)
    }

    /// The slot of value `x`, all in f32 (NaN is rejected by [`Histogram::build`]; passed here
    /// it would land in slot 1): `x < lo` -> 0; `x >= hi` -> bins + 1; otherwise
    /// `1 + clamp(floor((x - lo) * scale), 0, bins - 1)` with `scale` = [`Histogram::bin_scale_f32`],
    /// the subtraction and the multiplication each rounded to nearest f32 (no FMA).
    pub fn slot(&self, x: f32) -> usize {
        let (lo, hi) = (self.lo as f32, self.hi as f32);
        if x < lo {
            0
        } else if x >= hi {
            self.bins + 1
        } else {
            let f = ((x - lo) * self.bin_scale_f32()).floor();
            1 + (f.max(0.0) as usize).min(self.bins - 1)
        }
    }

    /// Bin width `(hi - lo) / bins` (f64).
    pub fn bin_width(&self) -> f64 {
        (self.hi - self.lo) / self.bins as f64
    }

    /// Nominal edges of regular bin `b` (0-based): `(lo + b (hi - lo) / bins, lo + (b + 1) (hi - lo) / bins)`
    /// in f64; the two-pass zoom uses these (rounded to f32) as the second pass's range.
    pub fn bin_edges(&self, b: usize) -> (f64, f64) {
        let span = self.hi - self.lo;
        let n = self.bins as f64;
        (self.lo + span * b as f64 / n, self.lo + span * (b + 1) as f64 / n)
    }

    /// Count of `expert` in slot `slot` (0 = underflow, bins + 1 = overflow).
    pub fn count(&self, expert: usize, slot: usize) -> u64 {
        self.counts[expert * (self.bins + 2) + slot]
    }

    /// Adds `other`'s counts (a shard of the same tokens axis) into `self`; errors on different
    /// geometry.
    pub fn merge(&mut self, other: &Histogram) -> Result<(), RefError> {
        ensure(self.geometry() == other.geometry(), "other", || {
            format!("geometry {:?} differs from {:?}", other.geometry(), self.geometry())
        })?;
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        Ok(())
    }

    fn check_target(&self, expert: usize, target: f64) -> Result<(), RefError> {
        ensure(expert < self.experts, "expert", || format!("expert {expert} is outside 0..{}", self.experts))?;
        ensure(!target.is_nan(), "target_count", || "is NaN".into())
    }

    /// Locates `target` (a count from the top) for `expert`: with `above(b)` = overflow + counts of
    /// bins above b, the bin b with `above(b) < target <= above(b) + count(b)`; `Overflow` if
    /// `target <= overflow count` (including target <= 0), `Underflow` if no regular bin reaches it.
    pub fn locate(&self, expert: usize, target: f64) -> Result<(Located, f64), RefError> {
        self.check_target(expert, target)?;
        let mut above = self.count(expert, self.bins + 1) as f64;
        if target <= above {
            return Ok((Located::Overflow, above));
        }
        for b in (0..self.bins).rev() {
            let c = self.count(expert, b + 1) as f64;
            if above + c >= target {
                return Ok((Located::Bin(b), above));
            }
            above += c;
        }
        Ok((Located::Underflow, above))
    }

    /// The value with `target_count` values above it, from the histogram (SEMANTICS.md section 2.5 step 4): in the
    /// located bin b*, `lo + w (b* + 1 - (target - above(b*)) / count(b*))` (uniform-in-bin linear
    /// interpolation); `hi` if the target falls in the overflow slot, `lo` if in the underflow.
    /// It is within one bin width (plus f32 edge rounding) of the ceil(target)-th largest value.
    pub fn quantile_from_top(&self, expert: usize, target_count: f64) -> Result<f64, RefError> {
        let (loc, above) = self.locate(expert, target_count)?;
        Ok(match loc {
            Located::Overflow => self.hi,
            Located::Underflow => self.lo,
            Located::Bin(b) => {
                let c = self.count(expert, b + 1) as f64;
                self.lo + self.bin_width() * (b as f64 + 1.0 - (target_count - above) / c)
            }
        })
    }
}

/// Per-column quantile by target count from the top via histograms: for every column of
/// `x: [t, e]`, [`Histogram::quantile_from_top`] with `target` on `[lo, hi)` with `bins` bins;
/// with `two_pass`, a second single-column histogram with `bins` bins over the located bin's
/// [`Histogram::bin_edges`] refines it (error within w / bins). Returns `[e]`.
#[allow(clippy::too_many_arguments)]
pub fn hist_quantile_columns(
    x: &[f32],
    t: usize,
    e: usize,
    target: f64,
    lo: f64,
    hi: f64,
    bins: usize,
    two_pass: bool,
) -> Result<Vec<f64>, RefError> {
    let h = Histogram::build(x, t, e, lo, hi, bins)?;
    let mut out = Vec::with_capacity(e);
    for col in 0..e {
        let (loc, _) = h.locate(col, target)?;
        let v = match (two_pass, loc) {
            (true, Located::Bin(b)) => {
                let (l2, h2) = h.bin_edges(b);
                let c = column(x, t, e, col);
                Histogram::build(&c, t, 1, l2, h2, bins)?.quantile_from_top(0, target)?
            }
            _ => h.quantile_from_top(col, target)?,
        };
        out.push(v);
    }
    Ok(out)
}

/// The `q`-th largest (1-based) value of every column of `x: [t, e]`, by sorting; returns `[e]`.
pub fn exact_kth_largest_per_column(x: &[f32], t: usize, e: usize, q: usize) -> Result<Vec<f64>, RefError> {
    check_len("x", x.len(), "[T, E]", &[t, e])?;
    check_no_nan("x", x)?;
    ensure((1..=t).contains(&q), "q", || format!("rank {q} is outside 1..={t}"))?;
    Ok((0..e)
        .map(|col| {
            let mut c = column(x, t, e, col);
            c.sort_unstable_by(|a, b| b.total_cmp(a));
            c[q - 1] as f64
        })
        .collect())
}

/// QB target load per expert, `q = T k / E` (may be fractional).
pub fn qb_target(t: usize, e: usize, k: usize) -> f64 {
    t as f64 * k as f64 / e as f64
}

/// The full Quantile Balancing step (SEMANTICS.md section 2.5): alpha = [`biased_alpha`] (k+1-th largest of
/// f32(s + b)), margins r = f32(s - alpha), per-expert histograms on `[lo, hi)` with `bins` bins,
/// quantile at target `q = T k / E` from the top ([`hist_quantile_columns`], optionally two-pass),
/// and the new bias `b_hat_e = -quantile_e`. `s: [t, e]`, `b: [e]`; returns `[e]`. Needs k < e.
#[allow(clippy::too_many_arguments)]
pub fn qb_bias(
    s: &[f32],
    b: &[f32],
    t: usize,
    e: usize,
    k: usize,
    lo: f64,
    hi: f64,
    bins: usize,
    two_pass: bool,
) -> Result<Vec<f64>, RefError> {
    let alpha = biased_alpha(s, b, t, e, k)?;
    let r = margins(s, t, e, &alpha)?;
    let qv = hist_quantile_columns(&r, t, e, qb_target(t, e, k), lo, hi, bins, two_pass)?;
    Ok(qv.into_iter().map(|v| -v).collect())
}

/// Exact QB bias by sorting: `b_hat_e = -(the ceil(q)-th largest margin of expert e)` with
/// `q = T k / E` (rank clamped to 1..=T) — the value [`qb_bias`] approximates within one bin width
/// (two-pass: w / bins). Same inputs and margins as [`qb_bias`]; returns `[e]`.
pub fn qb_bias_exact(s: &[f32], b: &[f32], t: usize, e: usize, k: usize) -> Result<Vec<f64>, RefError> {
    let alpha = biased_alpha(s, b, t, e, k)?;
    let r = margins(s, t, e, &alpha)?;
    ensure(t > 0, "t", || "need at least one token".into())?;
    let rank = (qb_target(t, e, k).ceil() as usize).clamp(1, t);
    Ok(exact_kth_largest_per_column(&r, t, e, rank)?.into_iter().map(|v| -v).collect())
}

/// Exact per-column quantile of `x: [t, e]` at `fraction` in [0, 1], with linear interpolation
/// between order statistics (the numpy / `torch.quantile` "linear" convention): sort the column
/// ascending into a, `pos = fraction * (t - 1)`, result
/// `a[floor pos] + (a[ceil pos] - a[floor pos]) * (pos - floor pos)`. Returns `[e]`.
pub fn column_quantile(x: &[f32], t: usize, e: usize, fraction: f64) -> Result<Vec<f64>, RefError> {
    check_len("x", x.len(), "[T, E]", &[t, e])?;
    check_no_nan("x", x)?;
    ensure(t > 0, "t", || "need at least one row".into())?;
    ensure((0.0..=1.0).contains(&fraction), "fraction", || format!("{fraction} is outside [0, 1]"))?;
    Ok((0..e)
        .map(|col| {
            let mut c = column(x, t, e, col);
            c.sort_unstable_by(|a, b| a.total_cmp(b));
            let pos = fraction * (t - 1) as f64;
            let (i0, i1) = (pos.floor() as usize, pos.ceil() as usize);
            let (a0, a1) = (c[i0] as f64, c[i1] as f64);
            a0 + (a1 - a0) * (pos - i0 as f64)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::{fresh_seed, seeded, sigmoid_scores, uniform_f32};
    use rand::Rng;

    #[test]
    fn kth_largest_and_margins_by_hand() {
        let x = [0.1f32, 0.9, 0.5, 0.7, 0.3, 0.3];
        assert_eq!(kth_largest_per_row(&x, 2, 3, 1).unwrap(), vec![0.9f32 as f64, 0.7f32 as f64]);
        assert_eq!(kth_largest_per_row(&x, 2, 3, 2).unwrap(), vec![0.5f32 as f64, 0.3f32 as f64]);
        assert!(kth_largest_per_row(&x, 2, 3, 0).is_err());
        assert!(kth_largest_per_row(&x, 2, 3, 4).is_err());
        assert!(matches!(kth_largest_per_row(&[0.0, f32::NAN], 1, 2, 1), Err(RefError::Nan { arg: "x", index: 1 })));
        // biased: row 0 + b = [0.6, 0.9, 0.5] -> 2nd largest (k = 1) = 0.6
        let b = [0.5f32, 0.0, 0.0];
        let a = biased_alpha(&x, &b, 2, 3, 1).unwrap();
        assert_eq!(a[0], 0.1f32 + 0.5f32);
        let r = margins(&x, 2, 3, &a).unwrap();
        assert_eq!(r[1], 0.9f32 - a[0]);
        assert!(matches!(margins(&x, 2, 3, &[0.0]), Err(RefError::Shape { arg: "alpha", .. })));
        assert!(matches!(biased_alpha(&x, &b, 2, 3, 3), Err(RefError::Invalid { .. })));
    }

    #[test]
    fn bin_rule_edges() {
        let h = Histogram::new(1, -1.0, 1.0, 4).unwrap();
        assert_eq!(h.slot(-1.0), 1);
        assert_eq!(h.slot(-1.0000001), 0);
        assert_eq!(h.slot(f32::NEG_INFINITY), 0);
        assert_eq!(h.slot(-0.5), 2);
        assert_eq!(h.slot(-0.50000006), 1);
        assert_eq!(h.slot(0.0), 3);
        assert_eq!(h.slot(0.99999994), 4);
        assert_eq!(h.slot(1.0), 5);
        assert_eq!(h.slot(f32::INFINITY), 5);
        assert_eq!(h.bin_scale_f32(), 2.0);
        assert_eq!(h.bin_edges(1), (-0.5, 0.0));
        // lo / hi are stored as f32 values
        let h = Histogram::new(1, 0.1, 0.7, 3).unwrap();
        assert_eq!((h.lo, h.hi), (0.1f32 as f64, 0.7f32 as f64));
        assert!(Histogram::new(1, 1.0, 1.0, 3).is_err());
        assert!(Histogram::new(1, 0.0, f64::NAN, 3).is_err());
        assert!(Histogram::new(1, 0.0, 1.0, 0).is_err());
        // a dense sweep: slots stay regular inside [lo, hi) and never decrease
        let h = Histogram::new(1, -0.3, 0.7, 7).unwrap();
        let (mut x, mut last) = (h.lo as f32, 1);
        while x < h.hi as f32 {
            let sl = h.slot(x);
            assert!((1..=7).contains(&sl) && sl >= last, "x = {x}");
            last = sl;
            x = f32::from_bits(if x >= 0.0 { x.to_bits() + 1 } else { x.to_bits() - 1 }).max(x + 3e-5);
        }
        let below_hi = f32::from_bits((h.hi as f32).to_bits() - 1);
        assert_eq!(h.slot(below_hi), 7);
    }

    #[test]
    fn merge_of_shards_equals_whole() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let (t, e, bins) = (1000, 7, 50);
        let x = uniform_f32(&mut rng, t * e, -1.2, 1.2);
        let whole = Histogram::build(&x, t, e, -1.0, 1.0, bins).unwrap();
        assert_eq!(whole.counts.iter().sum::<u64>(), (t * e) as u64);
        let mut cuts: Vec<usize> = (0..3).map(|_| rng.random_range(0..=t)).collect();
        cuts.extend([0, t]);
        cuts.sort();
        let mut merged = Histogram::new(e, -1.0, 1.0, bins).unwrap();
        for w in cuts.windows(2) {
            let shard = Histogram::build(&x[w[0] * e..w[1] * e], w[1] - w[0], e, -1.0, 1.0, bins).unwrap();
            merged.merge(&shard).unwrap();
        }
        assert_eq!(merged, whole, "seed {seed}");
        let other = Histogram::new(e, -1.0, 1.0, bins + 1).unwrap();
        assert!(merged.merge(&other).is_err());
        let other = Histogram::new(e, -1.0, 0.5, bins).unwrap();
        assert!(merged.merge(&other).is_err());
    }

    #[test]
    fn quantile_from_top_by_hand() {
        // values 0.05, 0.15, 0.15, 0.35, 0.95 (overflow at hi = 0.9) on [0, 1) with 10 bins... use
        // hi 0.9 and 9 bins of width 0.1
        let v = [0.05f32, 0.15, 0.15, 0.35, 0.95];
        let h = Histogram::build(&v, 5, 1, 0.0, 0.9, 9).unwrap();
        let w = h.bin_width();
        assert_eq!(h.quantile_from_top(0, 1.0).unwrap(), h.hi); // in the overflow slot
        // target 2: bin 3 (count 1) reached exactly -> its lower edge
        assert!((h.quantile_from_top(0, 2.0).unwrap() - 3.0 * w).abs() < 1e-7);
        // target 3: bin 1 holds 2 values, 1 needed -> halfway
        assert!((h.quantile_from_top(0, 3.0).unwrap() - 1.5 * w).abs() < 1e-7);
        assert!((h.quantile_from_top(0, 4.0).unwrap() - 1.0 * w).abs() < 1e-7);
        assert_eq!(h.quantile_from_top(0, 6.0).unwrap(), h.lo); // past everything
        assert_eq!(h.locate(0, 3.0).unwrap(), (Located::Bin(1), 2.0));
        assert!(h.quantile_from_top(1, 1.0).is_err());
        assert!(h.quantile_from_top(0, f64::NAN).is_err());
    }

    /// Checks the histogram quantile against the exact ceil(target)-th largest.
    fn check_columns(seed: u64, x: &[f32], t: usize, e: usize, target: f64, bins: usize) {
        let (lo, hi) = (-1.0, 1.0);
        let w = (hi - lo) / bins as f64;
        let rank = (target.ceil() as usize).clamp(1, t);
        let exact = exact_kth_largest_per_column(x, t, e, rank).unwrap();
        let one = hist_quantile_columns(x, t, e, target, lo, hi, bins, false).unwrap();
        let two = hist_quantile_columns(x, t, e, target, lo, hi, bins, true).unwrap();
        for c in 0..e {
            let slack = 1e-6;
            assert!((one[c] - exact[c]).abs() <= w + slack, "seed {seed} col {c}: {} vs {}", one[c], exact[c]);
            assert!(
                (two[c] - exact[c]).abs() <= w / bins as f64 + slack,
                "seed {seed} col {c}: two-pass {} vs {}",
                two[c],
                exact[c]
            );
        }
    }

    #[test]
    fn histogram_quantile_within_bin_of_exact() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        for (t, e, bins) in [(500, 6, 64), (37, 9, 16), (3, 5, 128), (1, 2, 8)] {
            let x = uniform_f32(&mut rng, t * e, -0.99, 0.99);
            for target in [1.0, 1.5, t as f64 / 3.0, t as f64 - 0.5, t as f64] {
                if target > t as f64 {
                    continue; // past every value: quantile_from_top returns lo by definition
                }
                check_columns(seed, &x, t, e, target, bins);
            }
        }
        // ties: values on a coarse grid that straddles bin edges
        let x: Vec<f32> = (0..400).map(|_| rng.random_range(-4..4) as f32 / 8.0).collect();
        check_columns(seed, &x, 100, 4, 17.0, 32);
        check_columns(seed, &x, 100, 4, 50.0, 7);
        // all-equal columns
        let x = vec![0.3f32; 50 * 3];
        check_columns(seed, &x, 50, 3, 10.0, 64);
        let x = vec![-0.5f32; 10 * 2]; // exactly on a bin edge
        check_columns(seed, &x, 10, 2, 3.0, 64);
    }

    #[test]
    fn qb_bias_matches_exact_sort() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        for (t, e, k, bins) in [(400, 16, 2, 256), (5, 16, 2, 64), (64, 8, 1, 1024)] {
            let s = sigmoid_scores(&mut rng, t * e, 2.0);
            let b = uniform_f32(&mut rng, e, -0.1, 0.1);
            let exact = qb_bias_exact(&s, &b, t, e, k).unwrap();
            let w = 2.0 / bins as f64;
            let one = qb_bias(&s, &b, t, e, k, -1.0, 1.0, bins, false).unwrap();
            let two = qb_bias(&s, &b, t, e, k, -1.0, 1.0, bins, true).unwrap();
            for c in 0..e {
                assert!((one[c] - exact[c]).abs() <= w + 1e-6, "seed {seed} T {t} expert {c}");
                assert!((two[c] - exact[c]).abs() <= w / bins as f64 + 1e-6, "seed {seed} T {t} expert {c}");
            }
        }
        let mut s = sigmoid_scores(&mut rng, 4 * 8, 1.0);
        s[5] = f32::NAN;
        assert!(matches!(
            qb_bias(&s, &[0.0; 8], 4, 8, 2, -1.0, 1.0, 64, false),
            Err(RefError::Nan { arg: "s", index: 5 })
        ));
    }

    #[test]
    fn exact_quantiles_by_hand() {
        // columns: [4, 1, 3, 2] and [0, 0, 0, 0]
        let x = [4.0f32, 0.0, 1.0, 0.0, 3.0, 0.0, 2.0, 0.0];
        assert_eq!(column_quantile(&x, 4, 2, 0.5).unwrap(), vec![2.5, 0.0]);
        assert_eq!(column_quantile(&x, 4, 2, 0.0).unwrap(), vec![1.0, 0.0]);
        assert_eq!(column_quantile(&x, 4, 2, 1.0).unwrap(), vec![4.0, 0.0]);
        assert!((column_quantile(&x, 4, 2, 0.25).unwrap()[0] - 1.75).abs() < 1e-15);
        assert!(column_quantile(&x, 4, 2, 1.5).is_err());
        assert_eq!(exact_kth_largest_per_column(&x, 4, 2, 2).unwrap(), vec![3.0, 0.0]);
        assert!(exact_kth_largest_per_column(&x, 4, 2, 5).is_err());
    }
}
