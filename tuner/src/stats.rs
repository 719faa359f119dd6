//! Summaries of repeated timings, and the deterministic order in which candidates win.
//!
//! The GPU side (CUDA events, L2 flush, warm-up) lives in the runtime crate; it hands the per-run
//! samples here. Medians, not means: one preempted run must not move the result. Ties are broken by a
//! fixed order (median, then p80, then candidate id) so that the same timings always give the same
//! winner; a plain `argmin` over near-equal floats is how Triton picked different winners in 42 of 60
//! processes.

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Summary of one candidate's timed runs, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimingStats {
    pub median_ms: f64,
    pub p20_ms: f64,
    pub p80_ms: f64,
    pub min_ms: f64,
    /// How many timed runs the summary is made of.
    pub samples: u32,
}

/// Why samples could not be summarized.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    #[error("no timing samples")]
    Empty,
    #[error("timing sample #{index} is {value}, expected a finite number >= 0")]
    BadSample { index: usize, value: f64 },
}

impl TimingStats {
    /// Quantiles with linear interpolation between order statistics (numpy's default, which Triton's
    /// `do_bench(quantiles=(0.5, 0.2, 0.8))` uses).
    pub fn from_samples(samples_ms: &[f64]) -> Result<Self, StatsError> {
        if samples_ms.is_empty() {
            return Err(StatsError::Empty);
        }
        if let Some((index, &value)) = samples_ms.iter().enumerate().find(|(_, v)| !v.is_finite() || **v < 0.0) {
            return Err(StatsError::BadSample { index, value });
        }
        let mut sorted = samples_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        Ok(Self {
            median_ms: quantile_sorted(&sorted, 0.5),
            p20_ms: quantile_sorted(&sorted, 0.2),
            p80_ms: quantile_sorted(&sorted, 0.8),
            min_ms: sorted[0],
            samples: u32::try_from(sorted.len()).unwrap_or(u32::MAX),
        })
    }

    /// True when every number is finite and non-negative (what the store requires before writing).
    pub fn is_valid(&self) -> bool {
        [self.median_ms, self.p20_ms, self.p80_ms, self.min_ms].iter().all(|v| v.is_finite() && *v >= 0.0)
    }
}

/// The `q`-quantile (0 <= q <= 1) of already sorted, non-empty samples, interpolating linearly.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of no samples");
    let q = q.clamp(0.0, 1.0);
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// The order in which candidates win: smaller median first, then smaller p80 (less tail), then the
/// candidate id as a string. A total order, so winners do not depend on the order candidates were
/// listed or measured in.
pub fn winner_order(a: (&str, &TimingStats), b: (&str, &TimingStats)) -> Ordering {
    a.1.median_ms.total_cmp(&b.1.median_ms).then(a.1.p80_ms.total_cmp(&b.1.p80_ms)).then_with(|| a.0.cmp(b.0))
}

/// The best candidate by [`winner_order`], or `None` when there is none.
pub fn pick_winner<'a, I>(candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = (&'a str, &'a TimingStats)>,
{
    candidates.into_iter().min_by(|a, b| winner_order(*a, *b)).map(|(id, _)| id)
}

/// The ids of the `k` best candidates by [`winner_order`], best first: those worth timing again,
/// back to back, before a winner is chosen (first-pass timings of the leaders are the ones most
/// likely to be flattered by noise).
pub fn retime_top_k<'a, I>(candidates: I, k: usize) -> Vec<&'a str>
where
    I: IntoIterator<Item = (&'a str, &'a TimingStats)>,
{
    let mut all: Vec<(&'a str, &'a TimingStats)> = candidates.into_iter().collect();
    all.sort_by(|a, b| winner_order(*a, *b));
    all.into_iter().take(k).map(|(id, _)| id).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn stats(median: f64) -> TimingStats {
        TimingStats { median_ms: median, p20_ms: median * 0.9, p80_ms: median * 1.1, min_ms: median * 0.8, samples: 10 }
    }

    #[test]
    fn quantiles_interpolate_like_numpy() {
        // numpy.quantile([1,2,3,4,5,6,7,8,9,10], [0.5, 0.2, 0.8]) == [5.5, 2.8, 8.2]
        let s: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let t = TimingStats::from_samples(&s).unwrap();
        assert!((t.median_ms - 5.5).abs() < 1e-12);
        assert!((t.p20_ms - 2.8).abs() < 1e-12);
        assert!((t.p80_ms - 8.2).abs() < 1e-12);
        assert_eq!(t.min_ms, 1.0);
        assert_eq!(t.samples, 10);
    }

    #[test]
    fn one_outlier_does_not_move_the_median() {
        let t = TimingStats::from_samples(&[1.0, 1.0, 1.0, 1.0, 500.0]).unwrap();
        assert_eq!(t.median_ms, 1.0);
        let single = TimingStats::from_samples(&[0.25]).unwrap();
        assert_eq!((single.median_ms, single.p20_ms, single.p80_ms, single.min_ms), (0.25, 0.25, 0.25, 0.25));
    }

    #[test]
    fn bad_samples_are_rejected() {
        assert_eq!(TimingStats::from_samples(&[]), Err(StatsError::Empty));
        assert!(matches!(TimingStats::from_samples(&[1.0, f64::NAN]), Err(StatsError::BadSample { index: 1, .. })));
        assert!(TimingStats::from_samples(&[f64::INFINITY]).is_err());
        assert!(TimingStats::from_samples(&[-1.0]).is_err());
    }

    #[test]
    fn winner_breaks_ties_by_p80_then_id_and_ignores_input_order() {
        let a = stats(1.0);
        let mut b = stats(1.0);
        b.p80_ms = 1.05; // same median, tighter tail
        let c = stats(1.0);
        let cands = [("zz", &a), ("yy", &b), ("aa", &c)];
        assert_eq!(pick_winner(cands.iter().copied()), Some("yy"));
        let mut rev = cands;
        rev.reverse();
        assert_eq!(pick_winner(rev.iter().copied()), Some("yy"));
        // exact tie: the smaller id wins
        assert_eq!(pick_winner([("b", &a), ("a", &c)]), Some("a"));
        assert_eq!(pick_winner(std::iter::empty()), None);
    }

    #[test]
    fn retime_picks_the_k_best_in_order() {
        let s: Vec<(String, TimingStats)> =
            [5.0, 1.0, 3.0, 2.0, 4.0].iter().enumerate().map(|(i, m)| (format!("c{i}"), stats(*m))).collect();
        let it = || s.iter().map(|(id, st)| (id.as_str(), st));
        assert_eq!(retime_top_k(it(), 3), vec!["c1", "c3", "c2"]);
        assert_eq!(retime_top_k(it(), 0), Vec::<&str>::new());
        assert_eq!(retime_top_k(it(), 99).len(), 5);
    }
}
