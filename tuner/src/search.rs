//! The strategy of a tuning run over many presets under one wall-time budget, independent of the backend.
//!
//! - **Shared kernels, tuned once.** Presets whose [`TuneKey`]s are equal (the same kernels, e.g. problems that
//!   differ only in run-time sizes of the same shape bucket) share one record: the first is tuned, the others
//!   report its result ([`PresetResult::shared_with`]).
//! - **Round 1 over every preset first**: the defaults and the best guesses known before timing (the
//!   [`Planner`] decides: winners of stale records, of the run's earlier presets of the same operator, of other
//!   GPUs), so every preset has a baseline, a checked
//!   winner and a record before any preset goes deeper. Each round-1 job may use an equal share of the time left
//!   among the round-1 jobs still to run, and always measures its first candidate (the defaults).
//! - **Round 2 with what is left**: each preset again, in the same order, with as many candidates as its equal share
//!   of the time left affords at the cost per candidate its round 1 measured: first the winners of the run's
//!   other presets of the same operator, then the planner's search (e.g. the leader's neighbours and a sample,
//!   ordered by a cost model, [`crate::cost`]). A preset whose share affords no candidate gets no round 2.
//! - **Early stop** (through [`TuneOptions::early_stop`]): a candidate that a short screen shows clearly slower
//!   than the best of its preset so far is not measured further. The winner is still re-timed and checked against
//!   the reference ([`crate::tune`]).
//! - **Compiling overlaps timing**: a planning thread prepares (compiles) the candidate lists of the next jobs
//!   while the lanes (one per GPU) time the current ones; round-1 lists are planned several at a time so short
//!   lists still fill the host's cores.
//!
//! Every measurement goes through [`tune`], so results are stored one candidate at a time (atomically) and an
//! interrupted run resumes with [`TuneOptions::resume`]; a candidate that faults costs one candidate.

use crate::key::TuneKey;
use crate::resume::CandidateSpec;
use crate::shard::Shard;
use crate::store::ResultsStore;
use crate::tune::{Measurer, TuneEvent, TuneOptions, TuneReport, tune};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// One preset of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPreset {
    /// For messages and tables (`op / preset`).
    pub label: String,
    /// The operator: round 2 of a preset first tries the winners of the other presets of the same operator.
    pub op: String,
    pub key: TuneKey,
    /// The id of the operator's default knobs (measured first, never stopped early).
    pub default_id: String,
}

/// A candidate list made ready by a [`Planner`] (compiled, when the backend compiles).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Planned {
    pub cands: Vec<CandidateSpec>,
    /// Points dropped before timing (do not build for the shape, do not compile, spill).
    pub pruned: usize,
    /// Wall seconds the planning (compiling) took.
    pub compile_s: f64,
}

/// Makes the candidate lists; implemented by the backend (it knows the operators and compiles).
pub trait Planner: Sync {
    /// Round 1 of preset `i`: the defaults first, then at most `n - 1` best guesses known before timing; `hints`
    /// are the winners the run already has for other presets of the same operator.
    fn first(&self, i: usize, n: usize, hints: &[CandidateSpec]) -> Planned;
    /// Round 2 of preset `i`: at most `n` candidates not in `done`, `hints` first (the winners of the run's other
    /// presets of the same operator; the planner drops those that do not build here), then its own search around
    /// `leader` (the best of round 1).
    fn more(
        &self,
        i: usize,
        leader: Option<&CandidateSpec>,
        hints: &[CandidateSpec],
        done: &HashSet<String>,
        n: usize,
    ) -> Planned;
}

/// One GPU's measurer, set up for a preset (e.g. the problem sizes its worker runs).
pub trait Lane: Send {
    fn measurer(&mut self, preset: usize) -> &mut dyn Measurer;
}

/// Options of [`search`].
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOptions {
    pub budget: Duration,
    /// Candidates of round 1 per preset (the defaults included).
    pub first: usize,
    /// At most this many candidates per preset over both rounds.
    pub max: usize,
    /// Per-key options of every [`tune`] call (shard, resume, re-timing, checks, early stop, ...); the deadline,
    /// the minimum and the default candidate are set per job.
    pub tune: TuneOptions,
    /// Round-1 lists planned at once (each compiles its few candidates in parallel with the others').
    pub plan_batch: usize,
    /// Seconds one candidate is assumed to take on a lane before any was timed.
    pub assumed_candidate_s: f64,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            budget: Duration::from_secs(600),
            first: 4,
            max: 24,
            tune: TuneOptions { retime_top: 2, early_stop: 1.25, ..TuneOptions::default() },
            plan_batch: 4,
            assumed_candidate_s: 1.5,
        }
    }
}

/// What happened to one preset.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PresetResult {
    /// Rounds run (0: not tuned).
    pub rounds: u8,
    pub measured: usize,
    pub failed: usize,
    /// Stopped early (screen only).
    pub stopped: usize,
    pub pruned: usize,
    pub winner: Option<String>,
    pub winner_ms: Option<f64>,
    /// Index of the preset whose record this one shares (the same key), when it was not tuned itself.
    pub shared_with: Option<usize>,
    /// Why a round failed (the run went on with the next job).
    pub errors: Vec<String>,
    /// Lane seconds spent on this preset.
    pub lane_s: f64,
}

/// Progress, reported as it happens (from the lanes' and the planner's threads).
#[derive(Debug)]
pub enum SearchEvent<'a> {
    /// A job starts on a lane with `planned`, and may use `share_s` seconds.
    Started {
        preset: usize,
        round: u8,
        planned: &'a Planned,
        share_s: f64,
    },
    Tune {
        preset: usize,
        event: TuneEvent<'a>,
    },
    /// A job ended, after `lane_s` seconds on its lane.
    Finished {
        preset: usize,
        round: u8,
        report: &'a TuneReport,
        lane_s: f64,
    },
    /// A round 2 the budget did not afford.
    Skipped {
        preset: usize,
        round: u8,
    },
    Failed {
        preset: usize,
        round: u8,
        error: &'a str,
    },
}

/// What [`search`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchReport {
    pub presets: Vec<PresetResult>,
    pub wall_s: f64,
}

impl SearchReport {
    /// Presets with no record: neither tuned nor sharing one.
    pub fn not_tuned(&self) -> Vec<usize> {
        (0..self.presets.len())
            .filter(|&i| {
                let p = &self.presets[i];
                p.shared_with.is_none() && (p.rounds == 0 || p.winner.is_none())
            })
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Job {
    preset: usize,
    round: u8,
}

enum Slot {
    Pending,
    Ready(Planned),
    Skipped,
    Taken,
}

struct State {
    slots: Vec<Slot>,
    /// The next job a lane takes.
    next: usize,
    /// Round-1 jobs finished, and lane seconds they took.
    round1_done: usize,
    round1_s: f64,
    results: Vec<PresetResult>,
    /// Per preset after its round 1: ids timed, its leader, its lane seconds per candidate.
    done_ids: Vec<HashSet<String>>,
    leader: Vec<Option<CandidateSpec>>,
    per_candidate_s: Vec<Option<f64>>,
    round1_finished: Vec<bool>,
}

/// Run the strategy of the module doc over `presets` with one lane per element of `lanes`.
pub fn search(
    store: &ResultsStore,
    presets: &[SearchPreset],
    planner: &dyn Planner,
    lanes: Vec<Box<dyn Lane + '_>>,
    opts: &SearchOptions,
    on_event: &(dyn Fn(SearchEvent<'_>) + Sync),
) -> SearchReport {
    let start = Instant::now();
    let deadline = start + opts.budget;
    let n_lanes = lanes.len().max(1);
    // The first preset of each key owns it; the others share its record.
    let mut owner_of: BTreeMap<&TuneKey, usize> = BTreeMap::new();
    let mut results = vec![PresetResult::default(); presets.len()];
    let mut owners = vec![];
    for (i, p) in presets.iter().enumerate() {
        match owner_of.get(&p.key) {
            Some(&o) => results[i].shared_with = Some(o),
            None => {
                owner_of.insert(&p.key, i);
                owners.push(i);
            }
        }
    }
    let jobs: Vec<Job> = owners
        .iter()
        .map(|&p| Job { preset: p, round: 1 })
        .chain(owners.iter().map(|&p| Job { preset: p, round: 2 }))
        .collect();
    let round1_jobs = owners.len();
    let state = Mutex::new(State {
        slots: jobs.iter().map(|_| Slot::Pending).collect(),
        next: 0,
        round1_done: 0,
        round1_s: 0.0,
        results,
        done_ids: vec![HashSet::new(); presets.len()],
        leader: vec![None; presets.len()],
        per_candidate_s: vec![None; presets.len()],
        round1_finished: vec![false; presets.len()],
    });
    let cv = Condvar::new();
    let lookahead = opts.plan_batch.max(1) + n_lanes;
    std::thread::scope(|s| {
        let (state, cv, jobs) = (&state, &cv, &jobs);
        // The planning thread.
        s.spawn(move || {
            let mut j = 0;
            while j < jobs.len() {
                let round = jobs[j].round;
                let batch = if round == 1 { opts.plan_batch.max(1).min(round1_jobs - j) } else { 1 };
                {
                    let mut st = state.lock().unwrap();
                    while j >= st.next + lookahead {
                        st = cv.wait(st).unwrap();
                    }
                }
                if round == 1 {
                    // The winners the run already has for the same operator (earlier presets' round 1); none in a
                    // shard, whose winners are its own: every shard must plan the same round-1 lists.
                    let hints: Vec<Vec<CandidateSpec>> = {
                        let st = state.lock().unwrap();
                        (j..j + batch)
                            .map(|k| {
                                if opts.tune.shard == Shard::ALL {
                                    op_winners(&st, presets, jobs[k].preset, &HashSet::new())
                                } else {
                                    vec![]
                                }
                            })
                            .collect()
                    };
                    let n1 = opts.first.min(opts.max).max(1);
                    let planned: Vec<Planned> = std::thread::scope(|s2| {
                        let handles: Vec<_> = (j..j + batch)
                            .zip(&hints)
                            .map(|(k, h)| s2.spawn(move || planner.first(jobs[k].preset, n1, h)))
                            .collect();
                        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
                    });
                    let mut st = state.lock().unwrap();
                    for (k, p) in (j..j + batch).zip(planned) {
                        st.slots[k] = Slot::Ready(p);
                    }
                    cv.notify_all();
                } else {
                    let slot = plan_round2(state, cv, jobs, j, presets, planner, opts, deadline, n_lanes, round1_jobs);
                    state.lock().unwrap().slots[j] = slot;
                    cv.notify_all();
                }
                j += batch;
            }
        });
        for lane in lanes {
            s.spawn(move || {
                run_lane(lane, state, cv, jobs, presets, store, opts, deadline, n_lanes, round1_jobs, on_event)
            });
        }
    });
    let st = state.into_inner().unwrap();
    let mut results = st.results;
    for i in 0..results.len() {
        if let Some(o) = results[i].shared_with {
            let (w, ms) = (results[o].winner.clone(), results[o].winner_ms);
            results[i].winner = w;
            results[i].winner_ms = ms;
        }
    }
    SearchReport { presets: results, wall_s: start.elapsed().as_secs_f64() }
}

/// The candidate list of round 2 of job `j` (after the preset's round 1), or `Skipped` when its share of the time
/// left affords none.
#[allow(clippy::too_many_arguments)]
fn plan_round2(
    state: &Mutex<State>,
    cv: &Condvar,
    jobs: &[Job],
    j: usize,
    presets: &[SearchPreset],
    planner: &dyn Planner,
    opts: &SearchOptions,
    deadline: Instant,
    lanes: usize,
    round1_jobs: usize,
) -> Slot {
    let i = jobs[j].preset;
    let (leader, done, hints, n) = {
        let mut st = state.lock().unwrap();
        while !st.round1_finished[i] {
            st = cv.wait(st).unwrap();
        }
        let now = Instant::now();
        if now >= deadline {
            return Slot::Skipped;
        }
        // The time left for round 2: what the round-1 jobs still to run leave, at the mean they took so far.
        let mean1 = if st.round1_done > 0 { st.round1_s / st.round1_done as f64 } else { opts.assumed_candidate_s };
        let pending1 = round1_jobs.saturating_sub(st.round1_done) as f64 * mean1 / lanes as f64;
        let left = (deadline - now).as_secs_f64() - pending1;
        let round2_left = jobs.len() - j.max(round1_jobs);
        let share = left * lanes as f64 / round2_left.max(1) as f64;
        let per = st.per_candidate_s[i].unwrap_or(opts.assumed_candidate_s).max(1e-3);
        let done = st.done_ids[i].clone();
        // One candidate's time kept back for the re-time and the check of a new leader. A share that affords less
        // than two candidates still gets two while the time left does (the earlier presets, of the lower tiers,
        // first): many shares too small to use would leave the time unused.
        let mut n = ((share / per).floor() as usize).saturating_sub(1);
        if n < 2 && left >= 3.0 * per {
            n = 2;
        }
        let n = n.min(opts.max.saturating_sub(done.len()));
        let hints = op_winners(&st, presets, i, &done);
        (st.leader[i].clone(), done, hints, n)
    };
    if n == 0 {
        return Slot::Skipped;
    }
    let p = planner.more(i, leader.as_ref(), &hints, &done, n);
    if p.cands.is_empty() { Slot::Skipped } else { Slot::Ready(p) }
}

#[allow(clippy::too_many_arguments)]
fn run_lane(
    mut lane: Box<dyn Lane + '_>,
    state: &Mutex<State>,
    cv: &Condvar,
    jobs: &[Job],
    presets: &[SearchPreset],
    store: &ResultsStore,
    opts: &SearchOptions,
    deadline: Instant,
    lanes: usize,
    round1_jobs: usize,
    on_event: &(dyn Fn(SearchEvent<'_>) + Sync),
) {
    loop {
        let (j, planned) = {
            let mut st = state.lock().unwrap();
            let j = st.next;
            if j >= jobs.len() {
                break;
            }
            st.next += 1;
            cv.notify_all();
            while matches!(st.slots[j], Slot::Pending) {
                st = cv.wait(st).unwrap();
            }
            match std::mem::replace(&mut st.slots[j], Slot::Taken) {
                Slot::Ready(p) => (j, Some(p)),
                _ => (j, None),
            }
        };
        let Job { preset: i, round } = jobs[j];
        let Some(planned) = planned else {
            on_event(SearchEvent::Skipped { preset: i, round });
            if round == 1 {
                finish_round1(state, cv, i, 0.0, 0);
            }
            continue;
        };
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        // Round 1 shares the time left among the round-1 jobs still to run; a round-2 list was sized to its share
        // when planned, and runs up to the end of the budget.
        let share =
            if round == 1 { left.mul_f64(lanes as f64 / (round1_jobs - j).max(1) as f64).min(left) } else { left };
        on_event(SearchEvent::Started { preset: i, round, planned: &planned, share_s: share.as_secs_f64() });
        let p = &presets[i];
        let mut t_opts = TuneOptions {
            default_candidate: Some(p.default_id.clone()),
            deadline: Some(now + share),
            min_measured: if round == 1 { 1 } else { 0 },
            ..opts.tune.clone()
        };
        if left.is_zero() {
            // Past the budget (round 1 still owes this preset its defaults): no re-time, only the check.
            t_opts.retime_top = 0;
        }
        let m = lane.measurer(i);
        let mut fwd = |ev: TuneEvent<'_>| on_event(SearchEvent::Tune { preset: i, event: ev });
        let r = tune(store, &p.key, &planned.cands, &t_opts, m, &mut fwd);
        let lane_s = now.elapsed().as_secs_f64();
        // Every candidate of the key's entry (earlier runs included) counts as done; its winner leads.
        let entry = store.load(&p.key.gpu().slug(), &p.key.op).ok().flatten().and_then(|f| f.entry(&p.key).cloned());
        let leader = entry.as_ref().and_then(|e| {
            let c = e.candidate(e.winner.as_deref()?)?;
            Some(CandidateSpec::new(c.id.clone(), c.knobs.clone()))
        });
        let mut st = state.lock().unwrap();
        let res = &mut st.results[i];
        res.lane_s += lane_s;
        res.pruned += planned.pruned;
        let mut measured = 0;
        match &r {
            Ok(rep) => {
                res.rounds = round;
                res.measured += rep.measured;
                res.failed += rep.failed;
                res.stopped += rep.stopped;
                res.winner = rep.winner.clone();
                res.winner_ms = rep.winner_ms;
                measured = rep.measured;
                st.done_ids[i].extend(planned.cands.iter().map(|c| c.id.clone()));
                st.done_ids[i].extend(entry.iter().flat_map(|e| e.candidates.iter().map(|c| c.id.clone())));
                if leader.is_some() {
                    st.leader[i] = leader;
                }
            }
            Err(e) => res.errors.push(format!("round {round}: {e}")),
        }
        drop(st);
        match &r {
            Ok(rep) => on_event(SearchEvent::Finished { preset: i, round, report: rep, lane_s }),
            Err(e) => on_event(SearchEvent::Failed { preset: i, round, error: &e.to_string() }),
        }
        if round == 1 {
            finish_round1(state, cv, i, lane_s, measured);
        }
    }
}

/// The winners so far of the other presets of preset `i`'s operator, not in `done`, each once, in preset order.
fn op_winners(st: &State, presets: &[SearchPreset], i: usize, done: &HashSet<String>) -> Vec<CandidateSpec> {
    let mut hints: Vec<CandidateSpec> = vec![];
    for (k, p) in presets.iter().enumerate() {
        if k != i
            && p.op == presets[i].op
            && let Some(w) = st.results[k].winner.as_deref()
            && !done.contains(w)
            && !hints.iter().any(|h| h.id == w)
            && let Some(spec) = st.leader[k].as_ref().filter(|l| l.id == w)
        {
            hints.push(spec.clone());
        }
    }
    hints
}

fn finish_round1(state: &Mutex<State>, cv: &Condvar, i: usize, lane_s: f64, measured: usize) {
    let mut st = state.lock().unwrap();
    st.round1_done += 1;
    st.round1_s += lane_s;
    if measured > 0 {
        // The job's re-time and check cost about a candidate each: counted, so round 2 is not sized short.
        st.per_candidate_s[i] = Some(lane_s / (measured + 2) as f64);
    }
    st.round1_finished[i] = true;
    cv.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::key;
    use crate::record::{CheckRecord, FailStage, KnobMap, Outcome};
    use crate::stats::TimingStats;
    use crate::tune::Abort;
    use std::sync::Arc;

    fn spec(i: u64) -> CandidateSpec {
        let mut k = KnobMap::new();
        k.insert("i".into(), serde_json::json!(i));
        CandidateSpec::from_knobs(k)
    }

    fn index(c: &CandidateSpec) -> u64 {
        c.knobs["i"].as_u64().unwrap()
    }

    /// Candidate `i` of a key whose ir_hash salts it: `1 + ((i * 7 + salt) % 13)` ms, or a crash for `i` in `crash`.
    fn ms(key: &TuneKey, i: u64) -> f64 {
        let salt = crate::shard::stable_hash(&key.to_string()) % 13;
        1.0 + ((i * 7 + salt) % 13) as f64
    }

    /// Spaces of `space` candidates (i = 0.., the defaults i = 0); logs the round-1 hints of each preset.
    #[derive(Default)]
    struct Plans {
        space: u64,
        hints: Mutex<Vec<(usize, Vec<String>)>>,
    }

    impl Planner for Plans {
        fn first(&self, i: usize, n: usize, hints: &[CandidateSpec]) -> Planned {
            self.hints.lock().unwrap().push((i, hints.iter().map(|h| h.id.clone()).collect()));
            let mut cands: Vec<CandidateSpec> = vec![spec(0)];
            cands.extend(hints.iter().filter(|h| h.id != spec(0).id).cloned());
            cands.extend((1..self.space).map(spec).filter(|c| !hints.iter().any(|h| h.id == c.id)));
            cands.truncate(n);
            Planned { cands, ..Planned::default() }
        }
        fn more(
            &self,
            _: usize,
            _: Option<&CandidateSpec>,
            hints: &[CandidateSpec],
            done: &HashSet<String>,
            n: usize,
        ) -> Planned {
            let mut cands: Vec<CandidateSpec> = hints.iter().filter(|h| !done.contains(&h.id)).cloned().collect();
            for c in (0..self.space).map(spec) {
                if !done.contains(&c.id) && !cands.iter().any(|x| x.id == c.id) {
                    cands.push(c);
                }
            }
            cands.truncate(n);
            Planned { cands, ..Planned::default() }
        }
    }

    /// Every measurement sleeps `delay`; logs (key, id, stopped) of every first-pass measurement.
    #[derive(Clone)]
    struct FakeLane {
        delay: Duration,
        log: Log,
        crash: Vec<String>,
    }

    impl Lane for FakeLane {
        fn measurer(&mut self, _: usize) -> &mut dyn Measurer {
            self
        }
    }

    impl Measurer for FakeLane {
        fn measure(&mut self, key: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
            Ok(self.measure_or_stop(key, c, 0.0)?.0)
        }
        fn measure_or_stop(&mut self, key: &TuneKey, c: &CandidateSpec, stop: f64) -> Result<(Outcome, bool), Abort> {
            std::thread::sleep(self.delay);
            if self.crash.contains(&c.id) {
                self.log.lock().unwrap().push((key.clone(), c.id.clone(), false));
                return Ok((Outcome::failed(FailStage::Crash, "illegal address"), false));
            }
            let t = ms(key, index(c));
            let stopped = stop > 0.0 && t > stop;
            self.log.lock().unwrap().push((key.clone(), c.id.clone(), stopped));
            let n = if stopped { 3 } else { 10 };
            Ok((Outcome::Timed(TimingStats::from_samples(&vec![t; n]).unwrap()), stopped))
        }
        fn retime(&mut self, key: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
            std::thread::sleep(self.delay);
            Ok(Outcome::Timed(TimingStats::from_samples(&[ms(key, index(c)); 30]).unwrap()))
        }
        fn check(&mut self, _: &TuneKey, _: &CandidateSpec) -> Result<CheckRecord, Abort> {
            std::thread::sleep(self.delay);
            Ok(CheckRecord { max_rel_err: 1e-4, passed: true })
        }
    }

    fn presets(n: usize) -> Vec<SearchPreset> {
        (0..n)
            .map(|i| SearchPreset {
                label: format!("p{i}"),
                op: format!("op{}", i % 3),
                key: key(&format!("op{}", i % 3), &[("m", 1 << (i % 12)), ("n", 1 << (i / 12))]),
                default_id: spec(0).id,
            })
            .collect()
    }

    /// First-pass measurements: (key, id, stopped early).
    type Log = Arc<Mutex<Vec<(TuneKey, String, bool)>>>;

    fn lane(delay_ms: u64) -> (FakeLane, Log) {
        let log = Arc::new(Mutex::new(vec![]));
        (FakeLane { delay: Duration::from_millis(delay_ms), log: log.clone(), crash: vec![] }, log)
    }

    /// 20 presets of 40 candidates each at 20 ms a measurement (re-time and check included), in 6 s: round 1 reaches
    /// every preset, round 2 spends what is left, and the run keeps to its budget (past it by one job at most).
    #[test]
    fn a_small_budget_tunes_every_preset_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        let ps = presets(20);
        let (l, log) = lane(20);
        let opts = SearchOptions { budget: Duration::from_secs(6), ..SearchOptions::default() };
        let r = search(&store, &ps, &Plans { space: 40, ..Plans::default() }, vec![Box::new(l)], &opts, &|_| {});
        assert!(r.not_tuned().is_empty(), "{:?}", r.not_tuned());
        assert!(r.wall_s < 6.0 + 1.0, "{}", r.wall_s);
        for (i, p) in r.presets.iter().enumerate() {
            assert!(p.rounds >= 1 && p.winner.is_some(), "preset {i}: {p:?}");
            let e = store.load(&ps[i].key.gpu().slug(), &ps[i].key.op).unwrap().unwrap().entry(&ps[i].key).cloned();
            let e = e.unwrap();
            assert!(e.default_ms.is_some(), "preset {i} has its baseline");
            assert!(e.winner_check.is_some_and(|c| c.passed), "preset {i}: the winner is checked");
        }
        let log = log.lock().unwrap();
        // Round 1 came first everywhere: every preset's defaults were measured before any preset's fifth candidate.
        let fifth = log.iter().position(|(_, id, _)| id == &spec(4).id).unwrap_or(log.len());
        let before: HashSet<&TuneKey> =
            log[..fifth].iter().filter(|(_, id, _)| id == &spec(0).id).map(|(k, _, _)| k).collect();
        assert_eq!(before.len(), ps.len(), "round 1 reaches every preset before round 2 starts");
        assert!(r.presets.iter().any(|p| p.rounds == 2), "something was left for round 2");
        assert!(r.presets.iter().all(|p| p.measured < 40), "the budget cut the lists");
    }

    /// Presets with equal keys are tuned once; the others share the record.
    #[test]
    fn presets_sharing_a_key_are_tuned_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        let mut ps = presets(4);
        ps.push(SearchPreset { label: "p0 again".into(), ..ps[0].clone() });
        ps.push(SearchPreset { label: "p2 again".into(), ..ps[2].clone() });
        let (l, log) = lane(0);
        let opts = SearchOptions { budget: Duration::from_secs(30), max: 8, ..SearchOptions::default() };
        let r = search(&store, &ps, &Plans { space: 40, ..Plans::default() }, vec![Box::new(l)], &opts, &|_| {});
        assert_eq!(r.presets[4].shared_with, Some(0));
        assert_eq!(r.presets[5].shared_with, Some(2));
        assert_eq!((r.presets[4].measured, r.presets[4].rounds), (0, 0));
        assert_eq!(r.presets[4].winner, r.presets[0].winner);
        assert!(r.not_tuned().is_empty());
        let log = log.lock().unwrap();
        let mut seen = HashSet::new();
        for (k, id, _) in log.iter() {
            assert!(seen.insert((k.clone(), id.clone())), "{id} measured twice for one key");
        }
        let keys: HashSet<&TuneKey> = log.iter().map(|(k, _, _)| k).collect();
        assert_eq!(keys.len(), 4);
        assert!(r.presets[..4].iter().all(|p| p.measured == 8), "{:?}", r.presets);
    }

    /// The early stop drops candidates clearly slower than the best so far, never the fastest one, and never the
    /// defaults; a crashing candidate costs itself only.
    #[test]
    fn early_stop_drops_slow_candidates_and_never_the_winner() {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        let ps = presets(6);
        let (mut l, log) = lane(0);
        l.crash = vec![spec(3).id];
        let opts = SearchOptions { budget: Duration::from_secs(30), max: 13, ..SearchOptions::default() };
        let r = search(&store, &ps, &Plans { space: 13, ..Plans::default() }, vec![Box::new(l)], &opts, &|_| {});
        assert!(r.not_tuned().is_empty());
        let log = log.lock().unwrap();
        let mut stopped = 0;
        for (i, p) in ps.iter().enumerate() {
            // Every candidate of the space was measured (13 = max): the true fastest is known.
            let fastest = (0..13).filter(|&c| c != 3).min_by(|&a, &b| ms(&p.key, a).total_cmp(&ms(&p.key, b))).unwrap();
            assert_eq!(r.presets[i].winner.as_deref(), Some(spec(fastest).id.as_str()), "preset {i}");
            assert_eq!(r.presets[i].failed, 1, "the crash cost one candidate");
            let mut best = f64::INFINITY;
            for (k, id, st) in log.iter().filter(|(k, _, _)| *k == p.key) {
                let t = ms(k, id.trim_start_matches("i=").parse().unwrap());
                if *st {
                    stopped += 1;
                    assert!(t > 1.25 * best, "{id} stopped at {t} ms with {best} ms the best so far");
                    assert_ne!(id, &spec(0).id, "the defaults are never stopped");
                    assert_ne!(id, &spec(fastest).id);
                } else if !id.ends_with("=3") {
                    best = best.min(t);
                }
            }
            let e = store.load(&p.key.gpu().slug(), &p.key.op).unwrap().unwrap().entry(&p.key).cloned().unwrap();
            let w = e.candidate(e.winner.as_deref().unwrap()).unwrap();
            assert!(w.outcome.timing().unwrap().samples >= 10, "the winner was measured in full");
        }
        assert!(stopped > 0, "the screen stopped some candidates");
        let total: usize = r.presets.iter().map(|p| p.stopped).sum();
        assert_eq!(total, stopped);
    }

    /// Round 1 of a preset tries the winners the run already has for its operator's earlier presets.
    #[test]
    fn round_1_starts_from_the_winners_of_earlier_presets_of_the_operator() {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        let ps = presets(12);
        let (l, _) = lane(0);
        let plans = Plans { space: 13, ..Plans::default() };
        let opts = SearchOptions { budget: Duration::from_secs(30), max: 4, ..SearchOptions::default() };
        let r = search(&store, &ps, &plans, vec![Box::new(l)], &opts, &|_| {});
        assert!(r.not_tuned().is_empty());
        let hints = plans.hints.lock().unwrap();
        let mut hinted = 0;
        for (i, h) in hints.iter() {
            for id in h {
                // Each hint is the winner of another preset of the same operator.
                let from = (0..ps.len())
                    .find(|&k| k != *i && ps[k].op == ps[*i].op && r.presets[k].winner.as_deref() == Some(id));
                assert!(from.is_some(), "preset {i}: hint {id} is no winner of its operator");
            }
            hinted += usize::from(!h.is_empty());
        }
        // The planner runs a few presets ahead of the lane: the later presets get hints.
        assert!(hinted >= 4, "{hints:?}");
    }
}
