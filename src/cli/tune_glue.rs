//! The glue between `k3k tune` and the backend-agnostic strategy of `k3k_tuner::search`: the candidate lists of
//! the operators (compiled, ranked by the cost model), one worker per GPU lane, and the rows of the final table.

use super::tune::Item;
use k3k::ops::op::Operator;
use k3k::tuner::cost::SmLimits;
use k3k::tuner::search::{Lane, Planned, Planner};
use k3k::tuner::{CandidateSpec, GpuKey, Measurer, ResultsStore, WorkerMeasurer};
use k3k::tuning::{knobs_of, other_gpu_winners, plan_first, plan_more, stale_winners};
use std::collections::HashSet;
use std::time::Instant;

/// Winners of stale records of this GPU (e.g. an older codegen version) in round 1, after the defaults.
pub const STALE_SEEDS: usize = 2;
/// Winners of other GPUs' records for the same problem in round 1, after the stale ones.
pub const OTHER_GPU_SEEDS: usize = 2;

/// The candidate lists of `k3k tune`'s presets.
pub struct OpPlanner<'a> {
    pub items: &'a [Item],
    pub ops: Vec<Box<dyn Operator>>,
    pub store: &'a ResultsStore,
    pub gpu: &'a GpuKey,
    pub compile: bool,
    pub limits: SmLimits,
}

impl OpPlanner<'_> {
    fn op(&self, i: usize) -> &dyn Operator {
        let name = self.items[i].op;
        self.ops.iter().find(|o| o.name() == name).expect("a registered operator").as_ref()
    }
}

impl Planner for OpPlanner<'_> {
    /// The defaults, then the winners of stale records of this GPU, the winners this run already has for the
    /// operator's other presets, the winners of other GPUs' records; the rest of `n` from the cost-ranked sample.
    fn first(&self, i: usize, n: usize, hints: &[CandidateSpec]) -> Planned {
        let t = Instant::now();
        let (op, preset) = (self.op(i), &self.items[i].preset);
        let mut seeds = stale_winners(self.store, op, preset, self.gpu, STALE_SEEDS);
        for k in hints.iter().filter_map(|h| knobs_of(&h.knobs).ok()) {
            if !seeds.contains(&k) {
                seeds.push(k);
            }
        }
        for k in other_gpu_winners(self.store, op, preset, self.gpu, OTHER_GPU_SEEDS) {
            if !seeds.contains(&k) {
                seeds.push(k);
            }
        }
        let (cands, pruned) = plan_first(op, preset, n, self.compile, &seeds, &self.limits);
        Planned { cands, pruned: pruned.len(), compile_s: t.elapsed().as_secs_f64() }
    }

    fn more(
        &self,
        i: usize,
        leader: Option<&CandidateSpec>,
        hints: &[CandidateSpec],
        done: &HashSet<String>,
        n: usize,
    ) -> Planned {
        let t = Instant::now();
        let (op, preset) = (self.op(i), &self.items[i].preset);
        let leader = leader.and_then(|l| knobs_of(&l.knobs).ok());
        let hints: Vec<_> = hints.iter().filter_map(|h| knobs_of(&h.knobs).ok()).collect();
        let (cands, pruned) = plan_more(op, preset, leader.as_ref(), &hints, done, n, self.compile, &self.limits);
        Planned { cands, pruned: pruned.len(), compile_s: t.elapsed().as_secs_f64() }
    }
}

/// One GPU's worker, told the exact problem sizes of each preset.
pub struct WorkerLane<'a> {
    pub m: WorkerMeasurer,
    pub items: &'a [Item],
}

impl Lane for WorkerLane<'_> {
    fn measurer(&mut self, preset: usize) -> &mut dyn Measurer {
        self.m.dims = self.items[preset].preset.dims.iter().map(|(k, v)| (k.clone(), (*v).max(0) as u64)).collect();
        &mut self.m
    }
}
