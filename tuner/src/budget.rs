//! Budget arithmetic: an equal share of the time left ([`preset_slice`]), and the ahead-of-time estimate of a
//! run that `k3k tune --plan` prints ([`allocate`] over a [`CostModel`], checked by [`simulate`]).
//!
//! A run is a pipeline: the host compiles the candidates of the next presets on its cores while the GPU lanes
//! (one worker per GPU) time the current ones. The run itself is planned as it goes by [`crate::search`] (round 1
//! over every preset, round 2 with what is left); [`allocate`] mirrors it ahead of time: every preset gets `min`
//! first, then one more candidate each in turn, tier by tier, while the simulated pipeline still fits the budget.

use std::time::Duration;

/// The time a preset may use when it starts: an equal share of `left` among the `presets_left` presets still to
/// run on `lanes` parallel lanes (never more than `left`).
pub fn preset_slice(left: Duration, lanes: usize, presets_left: usize) -> Duration {
    if presets_left == 0 {
        return left;
    }
    left.mul_f64(lanes.max(1) as f64 / presets_left as f64).min(left)
}

/// What one preset costs, as a model of the run (all in seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct PresetCost {
    /// Tier: lower tiers are planned (and run) first.
    pub tier: u8,
    /// Candidates available after structural pruning (the cap of the allocation).
    pub available: usize,
    /// Compile time of one candidate on one core (NVRTC + ptxas).
    pub compile_s: f64,
}

/// The machine a run is planned for.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    /// Host cores compiling in parallel.
    pub jobs: usize,
    /// GPUs (one worker each).
    pub lanes: usize,
    /// GPU wall time of timing one candidate (launch, warm-up, samples, L2 flushes, round trip). The default,
    /// 1.3 s, is what the H200 tune of 2026-12-02 (16 host cores) spent per timed candidate on most
    /// presets (1.0-1.6 s: fresh inputs uploaded per candidate, warm-up, the sample window, the worker round
    /// trip; kda T65536 7.5 s); the 0.3 s assumed before made `--plan` promise 40 presets where 20 fit.
    pub time_s: f64,
    /// Fixed GPU-lane cost per preset: the inputs and the reference, re-timing the leaders, the checks.
    pub fixed_s: f64,
    /// Share of a preset's candidates compiled up front; the rest are compiled on the lane once it gets there
    /// (not pipelined). `k3k tune` plans and compiles every list on its planning thread: 1.0.
    pub first_round: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        Self { jobs: 16, lanes: 1, time_s: 1.3, fixed_s: 2.5, first_round: 2.0 / 3.0 }
    }
}

/// The candidates of the first round (compiled ahead) out of `n`, as `k3k tune` splits them.
pub fn first_round(n: usize, share: f64) -> usize {
    if n == 0 { 0 } else { ((n as f64 * share - 1e-9).ceil() as usize).clamp(1, n) }
}

/// Wall time of compiling `n` candidates of `compile_s` each on `jobs` cores (whole waves of `jobs`).
pub fn compile_wall(n: usize, compile_s: f64, jobs: usize) -> f64 {
    n.div_ceil(jobs.max(1)) as f64 * compile_s
}

/// The simulated wall time (s) of a run giving `alloc[i]` candidates to preset `i` (0: not run), in order: one
/// compile stage ahead of the lanes, each lane taking the next compiled preset, timing it and compiling its
/// second round itself.
pub fn simulate(presets: &[PresetCost], alloc: &[usize], m: &CostModel) -> f64 {
    let mut compiled_at = 0.0f64;
    let mut lanes = vec![0.0f64; m.lanes.max(1)];
    for (p, &n) in presets.iter().zip(alloc) {
        if n == 0 {
            continue;
        }
        let n1 = first_round(n, m.first_round);
        compiled_at += compile_wall(n1, p.compile_s, m.jobs);
        let lane = lanes.iter_mut().min_by(|a, b| a.total_cmp(b)).expect("a lane");
        let start = lane.max(compiled_at);
        *lane = start + m.fixed_s + n as f64 * m.time_s + compile_wall(n - n1, p.compile_s, m.jobs);
    }
    lanes.into_iter().fold(0.0, f64::max)
}

/// Candidates per preset so that [`simulate`] stays within `budget_s`, as `k3k_tuner::search` spends a budget:
/// first every preset, whatever its tier, gets `min(min, available)` while that fits (in order: round 1), then
/// tier by tier one more each in turn up to `max` while the run still fits (round 2). A preset that could not get
/// its minimum gets 0 (not run).
pub fn allocate(presets: &[PresetCost], m: &CostModel, budget_s: f64, min: usize, max: usize) -> Vec<usize> {
    let mut alloc = vec![0; presets.len()];
    let mut tiers: Vec<u8> = presets.iter().map(|p| p.tier).collect();
    tiers.sort_unstable();
    tiers.dedup();
    for i in 0..presets.len() {
        alloc[i] = min.min(max).min(presets[i].available);
        if simulate(presets, &alloc, m) > budget_s {
            alloc[i] = 0;
        }
    }
    for tier in tiers {
        let idx: Vec<usize> = (0..presets.len()).filter(|&i| presets[i].tier == tier).collect();
        loop {
            let mut grew = false;
            for &i in &idx {
                if alloc[i] == 0 || alloc[i] >= max.min(presets[i].available) {
                    continue;
                }
                alloc[i] += 1;
                if simulate(presets, &alloc, m) > budget_s {
                    alloc[i] -= 1;
                } else {
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
    }
    alloc
}

/// How many candidates a preset can afford in `slice`, at `per_candidate` seconds each (unknown: `max`), at
/// least `min` and at most `max`.
pub fn affordable(slice: Duration, per_candidate: Option<f64>, min: usize, max: usize) -> usize {
    match per_candidate {
        Some(c) if c > 0.0 => ((slice.as_secs_f64() / c).floor() as usize).clamp(min.min(max), max),
        _ => max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presets(n: usize, tier: u8, compile_s: f64) -> Vec<PresetCost> {
        (0..n).map(|_| PresetCost { tier, available: 100, compile_s }).collect()
    }

    #[test]
    fn slices_share_what_is_left() {
        let s = preset_slice(Duration::from_secs(600), 1, 20);
        assert_eq!(s, Duration::from_secs(30));
        assert_eq!(preset_slice(Duration::from_secs(600), 2, 20), Duration::from_secs(60));
        assert_eq!(preset_slice(Duration::from_secs(10), 4, 2), Duration::from_secs(10), "never more than left");
        assert_eq!(preset_slice(Duration::from_secs(10), 1, 0), Duration::from_secs(10));
    }

    #[test]
    fn simulate_pipelines_compile_with_timing() {
        let m = CostModel { jobs: 4, lanes: 1, time_s: 1.0, fixed_s: 0.0, first_round: 1.0 };
        // 4 candidates each: compile 1 wave of 2 s, time 4 s. Compile of the second overlaps the first's timing.
        let p = presets(2, 0, 2.0);
        assert_eq!(simulate(&p, &[4, 4], &m), 2.0 + 4.0 + 4.0);
        // compile-bound: 8 candidates = 2 waves of 10 s each per preset, timing 8 s
        let p = presets(2, 0, 10.0);
        assert_eq!(simulate(&p, &[8, 8], &m), 20.0 + 20.0 + 8.0);
        // two lanes share the timing
        let m2 = CostModel { lanes: 2, ..m.clone() };
        let p = presets(2, 0, 1.0);
        assert_eq!(simulate(&p, &[4, 4], &m2), 2.0 + 4.0);
        assert_eq!(simulate(&p, &[0, 0], &m2), 0.0);
    }

    #[test]
    fn allocation_is_fair_fits_and_serves_tiers_in_order() {
        let m = CostModel { jobs: 16, lanes: 1, time_s: 0.5, fixed_s: 1.0, first_round: 2.0 / 3.0 };
        let mut p = presets(10, 0, 3.0);
        p.extend(presets(5, 1, 3.0));
        p[3].available = 2;
        let budget = 100.0;
        let a = allocate(&p, &m, budget, 4, 24);
        assert!(simulate(&p, &a, &m) <= budget, "{a:?}");
        assert_eq!(a[3], 2, "capped by what is available");
        let tier0: Vec<usize> = (0..10).filter(|&i| i != 3).map(|i| a[i]).collect();
        let (lo, hi) = (tier0.iter().min().unwrap(), tier0.iter().max().unwrap());
        assert!(*lo >= 4 && hi - lo <= 1, "round robin within a tier: {a:?}");
        // a budget too small for everyone's extras: every preset its minimum first, the extras to tier 0
        let small = allocate(&p, &m, 90.0, 4, 24);
        assert!(small.iter().enumerate().all(|(i, &n)| n >= if i == 3 { 2 } else { 4 }), "{small:?}");
        assert!(small[10..].iter().all(|&n| n == 4), "{small:?}");
        assert!(small[..10].iter().any(|&n| n > 4), "{small:?}");
        assert!(simulate(&p, &small, &m) <= 90.0);
        // smaller still: part of tier 0 runs, within the budget
        let tiny = allocate(&p, &m, 20.0, 4, 24);
        assert!(tiny[0] >= 4 && tiny[9] == 0 && tiny[10..].iter().all(|&n| n == 0), "{tiny:?}");
        assert!(simulate(&p, &tiny, &m) <= 20.0);
        // a generous budget gives everyone the max
        let big = allocate(&p, &m, 1e6, 4, 24);
        assert!(big.iter().enumerate().all(|(i, &n)| n == if i == 3 { 2 } else { 24 }), "{big:?}");
    }

    #[test]
    fn affordable_counts() {
        assert_eq!(affordable(Duration::from_secs(10), Some(1.0), 4, 24), 10);
        assert_eq!(affordable(Duration::from_secs(1), Some(1.0), 4, 24), 4);
        assert_eq!(affordable(Duration::from_secs(100), Some(1.0), 4, 24), 24);
        assert_eq!(affordable(Duration::from_secs(1), None, 4, 24), 24);
        assert_eq!(first_round(24, 2.0 / 3.0), 16);
        assert_eq!(first_round(1, 2.0 / 3.0), 1);
        assert_eq!(compile_wall(17, 2.0, 16), 4.0);
    }
}
