//! The tuning loop for one key, independent of how candidates are measured.
//!
//! 1. Keep the candidates of this shard ([`Shard::select`]); with `resume`, drop those the store has
//!    already finished ([`remaining`]).
//! 2. Measure each one and record it in the store at once (a `kill -9` loses at most the one in
//!    flight). A failure is recorded too and scores +inf.
//!    With `early_stop`, a candidate is screened first (a few samples) and not measured further when it reads
//!    clearly slower than the best of the key so far ([`Measurer::measure_or_stop`]); the defaults never are.
//! 3. Re-time the `retime_top` best of the entry that this call planned, back to back, and record the new
//!    timings (first-pass timings of the leaders are the ones most likely flattered by noise).
//! 4. Check the best unchecked candidate against the reference; if it fails, the next one; until the
//!    winner is the fastest candidate whose check passed ([`crate::TuneEntry::next_to_check`]).
//!
//! The [`Measurer`] does the GPU work; [`WorkerMeasurer`] forwards it to a worker process.

use crate::error::StoreError;
use crate::isolate::{IsolationFailure, Worker};
use crate::key::TuneKey;
use crate::protocol::{BenchSettings, MeasureRequest, MeasureResponse, Task};
use crate::record::{CandidateResult, CheckRecord, FailStage, Outcome, TuneEntry};
use crate::resume::{CandidateSpec, ResumeOptions, remaining};
use crate::shard::Shard;
use crate::stats::retime_top_k;
use crate::store::ResultsStore;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Stop the whole run (nothing is recorded for the candidate at hand): the setup is broken, not the
/// candidate (no GPU, worker binary missing, ...).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Abort(pub String);

/// Measures candidates. Candidate failures are `Ok(Outcome::Failed{..})`; `Err` aborts the run.
pub trait Measurer {
    fn measure(&mut self, key: &TuneKey, candidate: &CandidateSpec) -> Result<Outcome, Abort>;

    /// Measure with an early stop: a short screen first, and when its median is over `stop_ms` the screen's
    /// outcome with `true` (the candidate is clearly slower than the best so far; see
    /// [`crate::protocol::BenchSettings::stop_ms`]). Default: no screen, [`Measurer::measure`].
    fn measure_or_stop(
        &mut self,
        key: &TuneKey,
        candidate: &CandidateSpec,
        stop_ms: f64,
    ) -> Result<(Outcome, bool), Abort> {
        let _ = stop_ms;
        Ok((self.measure(key, candidate)?, false))
    }

    /// Time a leader again (default: the same as [`Measurer::measure`]).
    fn retime(&mut self, key: &TuneKey, candidate: &CandidateSpec) -> Result<Outcome, Abort> {
        self.measure(key, candidate)
    }

    /// Compare the candidate's output with the reference.
    fn check(&mut self, key: &TuneKey, candidate: &CandidateSpec) -> Result<CheckRecord, Abort>;
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("tuning {key} aborted: {reason}")]
    Aborted { key: String, reason: String },
    #[error("the plan for {key} lists candidate `{id}` twice")]
    DuplicateCandidate { key: String, id: String },
}

/// Options of [`tune`].
#[derive(Debug, Clone, PartialEq)]
pub struct TuneOptions {
    pub shard: Shard,
    /// Skip candidates the store has already finished for this key.
    pub resume: bool,
    /// With `resume`, measure timed-out and crashed candidates again.
    pub retry_transient: bool,
    /// How many leaders to re-time before choosing (0: none).
    pub retime_top: usize,
    /// At most this many reference checks (each failed check costs one).
    pub max_checks: usize,
    /// Id of the operator's default knobs, whose median becomes the entry's `default_ms`.
    pub default_candidate: Option<String>,
    /// Abort after this many timeouts or crashes in a row (0: never): a dead GPU looks like every
    /// candidate crashing. Those already recorded can be retried with `resume` + `retry_transient`.
    pub max_consecutive_transient: usize,
    /// Stop measuring new candidates once this instant would be passed (the preset's share of the budget,
    /// see [`crate::search`]); the re-timing and the checks still run, and time for them is
    /// kept back: measuring stops when `now + reserve` passes the deadline, where the reserve is the mean
    /// measurement so far times (`retime_top` + 1). Candidates not measured are counted in
    /// [`TuneReport::cut`]; a `resume` measures them.
    pub deadline: Option<Instant>,
    /// With a `deadline`, always measure at least this many candidates (the first ones of the list, which
    /// start with the defaults), so every preset gets a baseline and a few candidates.
    pub min_measured: usize,
    /// Early stop: a candidate (never the defaults) whose short screen reads over this factor times the best
    /// median of its key so far is not measured further ([`Measurer::measure_or_stop`]); 0: off.
    pub early_stop: f64,
}

impl Default for TuneOptions {
    fn default() -> Self {
        Self {
            shard: Shard::ALL,
            resume: false,
            retry_transient: false,
            retime_top: 3,
            max_checks: 8,
            default_candidate: None,
            max_consecutive_transient: 0,
            deadline: None,
            min_measured: 0,
            early_stop: 0.0,
        }
    }
}

/// Progress, reported as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum TuneEvent<'a> {
    /// Candidates of this shard already finished in the store (`resume`).
    Skipped {
        count: usize,
    },
    Measured {
        id: &'a str,
        outcome: &'a Outcome,
    },
    Retimed {
        id: &'a str,
        outcome: &'a Outcome,
    },
    Checked {
        id: &'a str,
        check: &'a CheckRecord,
    },
}

/// What a [`tune`] run did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TuneReport {
    /// Candidates of this shard.
    pub planned: usize,
    pub skipped: usize,
    pub measured: usize,
    /// Measured with a failure.
    pub failed: usize,
    /// Measured by the early-stop screen only (clearly slower than the best so far).
    pub stopped: usize,
    pub retimed: usize,
    pub checked: usize,
    /// Left unmeasured because the deadline came.
    pub cut: usize,
    /// The entry's winner after the run (over every candidate in the store, other shards included).
    pub winner: Option<String>,
    pub winner_ms: Option<f64>,
}

/// Tune one key (see the module doc). Every result is in `store` before this returns, and before the
/// next candidate starts.
pub fn tune(
    store: &ResultsStore,
    key: &TuneKey,
    candidates: &[CandidateSpec],
    opts: &TuneOptions,
    measurer: &mut dyn Measurer,
    on_event: &mut dyn FnMut(TuneEvent<'_>),
) -> Result<TuneReport, TuneError> {
    let mut seen = BTreeSet::new();
    if let Some(dup) = candidates.iter().find(|c| !seen.insert(c.id.as_str())) {
        return Err(TuneError::DuplicateCandidate { key: key.to_string(), id: dup.id.clone() });
    }
    let aborted = |a: Abort| TuneError::Aborted { key: key.to_string(), reason: a.0 };
    let mine: Vec<CandidateSpec> = opts.shard.select(candidates, |c| &c.id).into_iter().cloned().collect();
    let specs: BTreeMap<&str, &CandidateSpec> = mine.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut report = TuneReport { planned: mine.len(), ..TuneReport::default() };

    // 1-2: measure what is left, persisting each result.
    let todo: Vec<&CandidateSpec> = if opts.resume {
        let entry = load_entry(store, key)?;
        remaining(&mine, entry.as_ref(), ResumeOptions { retry_transient: opts.retry_transient })
    } else {
        mine.iter().collect()
    };
    report.skipped = mine.len() - todo.len();
    if report.skipped > 0 {
        on_event(TuneEvent::Skipped { count: report.skipped });
    }
    let mut transient_in_a_row = 0;
    // The best median of the key so far (earlier rounds and runs included): the early stop's reference.
    let mut best: Option<f64> =
        if opts.early_stop > 0.0 { load_entry(store, key)?.and_then(|e| best_ms(&e)) } else { None };
    let started = Instant::now();
    let todo_len = todo.len();
    for (n, spec) in todo.into_iter().enumerate() {
        if let Some(deadline) = opts.deadline
            && n >= opts.min_measured
        {
            let mean = if n == 0 { Duration::ZERO } else { started.elapsed() / n as u32 };
            if Instant::now() + mean * (opts.retime_top as u32 + 1) > deadline {
                report.cut = todo_len - n;
                break;
            }
        }
        let is_default = opts.default_candidate.as_deref() == Some(spec.id.as_str());
        let stop_ms = match best {
            Some(b) if opts.early_stop > 0.0 && !is_default => b * opts.early_stop,
            _ => 0.0,
        };
        let (outcome, stopped) = if stop_ms > 0.0 {
            measurer.measure_or_stop(key, spec, stop_ms).map_err(aborted)?
        } else {
            (measurer.measure(key, spec).map_err(aborted)?, false)
        };
        store.record_candidate(key, CandidateResult::new(&spec.id, spec.knobs.clone(), outcome.clone()))?;
        report.measured += 1;
        if stopped {
            report.stopped += 1;
        } else if let Some(t) = outcome.timing() {
            best = Some(best.map_or(t.median_ms, |b| b.min(t.median_ms)));
        }
        match &outcome {
            Outcome::Failed { stage, .. } => {
                report.failed += 1;
                if stage.is_transient() {
                    transient_in_a_row += 1;
                }
            }
            Outcome::Timed(_) => transient_in_a_row = 0,
        }
        on_event(TuneEvent::Measured { id: &spec.id, outcome: &outcome });
        if opts.max_consecutive_transient > 0 && transient_in_a_row >= opts.max_consecutive_transient {
            return Err(aborted(Abort(format!(
                "{transient_in_a_row} candidates in a row timed out or crashed; is the GPU healthy? \
                 (finished results are stored; retry with --resume --retry-transient)"
            ))));
        }
    }

    // 3: re-time the leaders of this shard.
    if opts.retime_top > 0
        && let Some(entry) = load_entry(store, key)?
    {
        // The leaders of the whole entry (earlier rounds included) that this call planned: a later round whose
        // candidates all trail an earlier round's leaders re-times none of them.
        let leaders: Vec<String> = retime_top_k(
            entry
                .candidates
                .iter()
                .filter(|c| opts.shard == Shard::ALL || specs.contains_key(c.id.as_str()))
                .filter_map(|c| c.outcome.timing().map(|t| (c.id.as_str(), t))),
            opts.retime_top,
        )
        .into_iter()
        .filter(|id| specs.contains_key(id))
        .map(String::from)
        .collect();
        for id in &leaders {
            let spec = specs[id.as_str()];
            let outcome = measurer.retime(key, spec).map_err(aborted)?;
            store.record_candidate(key, CandidateResult::new(id, spec.knobs.clone(), outcome.clone()))?;
            report.retimed += 1;
            on_event(TuneEvent::Retimed { id, outcome: &outcome });
        }
    }

    if let Some(default_id) = &opts.default_candidate
        && let Some(entry) = load_entry(store, key)?
        && let Some(t) = entry.candidate(default_id).and_then(|c| c.outcome.timing())
    {
        store.record_default_ms(key, t.median_ms)?;
    }

    // 4: check until the fastest checked candidate of this shard is the winner.
    while report.checked < opts.max_checks {
        let Some(entry) = load_entry(store, key)? else { break };
        let Some(next) = entry.next_to_check_among(|id| specs.contains_key(id)) else {
            break;
        };
        let spec = specs[next.id.as_str()];
        let check = measurer.check(key, spec).map_err(aborted)?;
        store.record_check(key, &spec.id, check)?;
        report.checked += 1;
        on_event(TuneEvent::Checked { id: &spec.id, check: &check });
    }

    if let Some(entry) = load_entry(store, key)? {
        report.winner_ms = entry
            .winner
            .as_deref()
            .and_then(|w| entry.candidate(w))
            .and_then(|c| c.outcome.timing())
            .map(|t| t.median_ms);
        report.winner = entry.winner;
    }
    Ok(report)
}

/// The best median of an entry's timed candidates.
pub fn best_ms(e: &TuneEntry) -> Option<f64> {
    e.candidates.iter().filter_map(|c| c.outcome.timing()).map(|t| t.median_ms).min_by(f64::total_cmp)
}

fn load_entry(store: &ResultsStore, key: &TuneKey) -> Result<Option<TuneEntry>, StoreError> {
    Ok(store.load(&key.gpu().slug(), &key.op)?.and_then(|f| f.entry(key).cloned()))
}

/// A [`Measurer`] that sends [`MeasureRequest`]s to a worker process (see [`crate::protocol`]).
/// A worker crash or timeout becomes the candidate's `Failed` outcome (or a failed check); a worker
/// that cannot be started aborts the run.
pub struct WorkerMeasurer {
    pub worker: Worker,
    /// The exact problem sizes sent with every request.
    pub dims: BTreeMap<String, u64>,
    pub bench: BenchSettings,
    /// Settings for re-timing the leaders (typically more samples).
    pub retime_bench: BenchSettings,
    /// A first-pass candidate whose first run is this many times slower than the best median of its key so
    /// far (and over 1 ms) gets only a few samples ([`BenchSettings::slow_ms`]; 0: off).
    pub slow_factor: f64,
    best: Option<(String, f64)>,
}

impl WorkerMeasurer {
    pub fn new(worker: Worker, dims: BTreeMap<String, u64>) -> Self {
        let bench = BenchSettings::default();
        Self {
            worker,
            dims,
            bench,
            retime_bench: BenchSettings { rep_ms: bench.rep_ms * 3.0, cap_ms: bench.cap_ms * 3.0, ..bench },
            slow_factor: 3.0,
            best: None,
        }
    }

    /// The first-pass settings for `key`: [`WorkerMeasurer::bench`] with `slow_ms` from the best so far.
    fn first_pass(&self, key: &TuneKey) -> BenchSettings {
        let mut b = self.bench;
        if self.slow_factor > 0.0
            && let Some((k, best)) = &self.best
            && *k == key.to_string()
        {
            b.slow_ms = (best * self.slow_factor).max(1.0);
        }
        b
    }

    fn note(&mut self, key: &TuneKey, o: &Outcome) {
        let Some(t) = o.timing() else { return };
        let k = key.to_string();
        match &mut self.best {
            Some((bk, best)) if *bk == k => *best = best.min(t.median_ms),
            _ => self.best = Some((k, t.median_ms)),
        }
    }

    fn call(
        &mut self,
        task: Task,
        key: &TuneKey,
        candidate: &CandidateSpec,
        bench: BenchSettings,
    ) -> Result<Result<MeasureResponse, IsolationFailure>, Abort> {
        let req =
            MeasureRequest { task, key: key.clone(), candidate: candidate.clone(), dims: self.dims.clone(), bench };
        match self.worker.call::<_, MeasureResponse>(&req) {
            Err(f) if f.is_setup_error() => Err(Abort(f.to_string())),
            other => Ok(other),
        }
    }

    fn timed(&mut self, key: &TuneKey, c: &CandidateSpec, bench: BenchSettings) -> Result<Outcome, Abort> {
        Ok(self.timed_or_stopped(key, c, bench)?.0)
    }

    fn timed_or_stopped(
        &mut self,
        key: &TuneKey,
        c: &CandidateSpec,
        bench: BenchSettings,
    ) -> Result<(Outcome, bool), Abort> {
        Ok(match self.call(Task::Time, key, c, bench)? {
            Ok(MeasureResponse { outcome: Some(o), stopped, .. }) => (o, stopped),
            Ok(_) => {
                (Outcome::failed(FailStage::Crash, "the worker answered a time request without an outcome"), false)
            }
            Err(f) => (f.to_outcome(), false),
        })
    }
}

impl Measurer for WorkerMeasurer {
    fn measure(&mut self, key: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
        let bench = self.first_pass(key);
        let o = self.timed(key, c, bench)?;
        self.note(key, &o);
        Ok(o)
    }

    fn measure_or_stop(&mut self, key: &TuneKey, c: &CandidateSpec, stop_ms: f64) -> Result<(Outcome, bool), Abort> {
        let bench = BenchSettings { stop_ms, ..self.first_pass(key) };
        let (o, stopped) = self.timed_or_stopped(key, c, bench)?;
        if !stopped {
            self.note(key, &o);
        }
        Ok((o, stopped))
    }

    fn retime(&mut self, key: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
        let bench = self.retime_bench;
        let o = self.timed(key, c, bench)?;
        self.note(key, &o);
        Ok(o)
    }

    fn check(&mut self, key: &TuneKey, c: &CandidateSpec) -> Result<CheckRecord, Abort> {
        let bench = self.bench;
        Ok(match self.call(Task::Check, key, c, bench)? {
            Ok(MeasureResponse { check: Some(ch), .. }) => ch,
            // A crash while checking is a failed check.
            _ => CheckRecord { max_rel_err: f64::INFINITY, passed: false },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::key;
    use crate::record::KnobMap;
    use crate::stats::TimingStats;

    /// Candidate `i` takes `1 + (i * 7 % 10)` ms; ids listed in `wrong` fail their check; ids in
    /// `crash` fail with a crash.
    struct Fake {
        measured: Vec<String>,
        retimed: Vec<String>,
        checked: Vec<String>,
        wrong: Vec<String>,
        crash: Vec<String>,
        /// Wall time of one measurement.
        delay: Duration,
    }

    impl Fake {
        fn new() -> Self {
            Self {
                measured: vec![],
                retimed: vec![],
                checked: vec![],
                wrong: vec![],
                crash: vec![],
                delay: Duration::ZERO,
            }
        }
        fn ms(c: &CandidateSpec) -> f64 {
            let i = c.knobs["i"].as_u64().unwrap();
            1.0 + (i * 7 % 10) as f64
        }
    }

    impl Measurer for Fake {
        fn measure(&mut self, _: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
            self.measured.push(c.id.clone());
            std::thread::sleep(self.delay);
            if self.crash.contains(&c.id) {
                return Ok(Outcome::failed(FailStage::Crash, "illegal address"));
            }
            Ok(Outcome::Timed(TimingStats::from_samples(&[Self::ms(c)]).unwrap()))
        }
        fn retime(&mut self, _: &TuneKey, c: &CandidateSpec) -> Result<Outcome, Abort> {
            self.retimed.push(c.id.clone());
            Ok(Outcome::Timed(TimingStats::from_samples(&[Self::ms(c); 3]).unwrap()))
        }
        fn check(&mut self, _: &TuneKey, c: &CandidateSpec) -> Result<CheckRecord, Abort> {
            self.checked.push(c.id.clone());
            let passed = !self.wrong.contains(&c.id);
            Ok(CheckRecord { max_rel_err: if passed { 1e-4 } else { 0.5 }, passed })
        }
    }

    /// A store in a fresh folder (gone with the `TempDir`), the key of a `gemm` at m=64 and a fresh fake.
    fn gemm_store() -> (tempfile::TempDir, ResultsStore, TuneKey, Fake) {
        let dir = tempfile::tempdir().unwrap();
        let store = ResultsStore::open(dir.path()).unwrap();
        (dir, store, key("gemm", &[("m", 64)]), Fake::new())
    }

    fn plan(n: u64) -> Vec<CandidateSpec> {
        (0..n)
            .map(|i| {
                let mut k = KnobMap::new();
                k.insert("i".into(), serde_json::json!(i));
                CandidateSpec::from_knobs(k)
            })
            .collect()
    }

    #[test]
    fn tune_measures_retimes_checks_and_picks_the_fastest_correct() {
        let (_dir, store, k, mut m) = gemm_store();
        // i=0 and i=10 take 1 ms, i=3 takes 2 ms
        m.wrong = vec!["i=0".into()];
        m.crash = vec!["i=10".into()];
        let mut events = 0;
        let r = tune(&store, &k, &plan(12), &TuneOptions::default(), &mut m, &mut |_| events += 1).unwrap();
        assert_eq!((r.planned, r.measured, r.failed, r.retimed), (12, 12, 1, 3));
        assert_eq!(m.retimed, ["i=0", "i=3", "i=6"]);
        assert_eq!(m.checked, ["i=0", "i=3"]);
        assert_eq!(r.winner.as_deref(), Some("i=3"));
        assert_eq!(r.winner_ms, Some(2.0));
        assert_eq!(events, 12 + 3 + 2);
        let f = store.load("nvidia-h200", "gemm").unwrap().unwrap();
        let e = f.entry(&k).unwrap();
        assert_eq!(e.candidates.len(), 12);
        assert_eq!(e.candidate("i=3").unwrap().outcome.timing().unwrap().samples, 3);

        // resume: nothing left to measure, nothing new to check
        let mut again = Fake::new();
        let opts = TuneOptions { resume: true, ..TuneOptions::default() };
        let r = tune(&store, &k, &plan(12), &opts, &mut again, &mut |_| {}).unwrap();
        assert_eq!((r.skipped, r.measured, r.checked), (12, 0, 0));
        assert!(again.measured.is_empty());
        // retrying transient failures re-measures only the crashed one
        let opts = TuneOptions { resume: true, retry_transient: true, retime_top: 0, ..TuneOptions::default() };
        let mut retry = Fake::new();
        tune(&store, &k, &plan(12), &opts, &mut retry, &mut |_| {}).unwrap();
        assert_eq!(retry.measured, ["i=10"]);
        // now i=10 (1 ms) beats the winner and gets checked
        assert_eq!(retry.checked, ["i=10"]);
    }

    #[test]
    fn shards_split_the_work_and_merge_to_the_unsharded_result() {
        let k = key("gemm", &[("m", 64)]);
        let n = 3;
        let mut files = vec![];
        let mut total = 0;
        for i in 0..n {
            let dir = tempfile::tempdir().unwrap();
            let store = ResultsStore::open(dir.path()).unwrap();
            let opts = TuneOptions { shard: Shard::new(i, n).unwrap(), retime_top: 0, ..TuneOptions::default() };
            let r = tune(&store, &k, &plan(30), &opts, &mut Fake::new(), &mut |_| {}).unwrap();
            total += r.measured;
            files.push(store.load("nvidia-h200", "gemm").unwrap().unwrap());
        }
        assert_eq!(total, 30);
        let merged = crate::merge::merge(&files).unwrap();
        let e = merged.entry(&k).unwrap();
        assert_eq!(e.candidates.len(), 30);
        // the 1 ms candidates are i=0,10,20; ties break by id
        assert_eq!(e.winner.as_deref(), Some("i=0"));
    }

    #[test]
    fn a_deadline_stops_measuring_after_the_minimum_and_still_checks_a_winner() {
        let (_dir, store, k, mut m) = gemm_store();
        m.delay = Duration::from_millis(20);
        let start = Instant::now();
        let opts = TuneOptions {
            deadline: Some(start + Duration::from_millis(300)),
            min_measured: 3,
            retime_top: 1,
            ..TuneOptions::default()
        };
        let r = tune(&store, &k, &plan(100), &opts, &mut m, &mut |_| {}).unwrap();
        assert!(r.measured >= 3 && r.measured < 100, "{r:?}");
        assert_eq!(r.cut, 100 - r.measured);
        assert_eq!(m.measured[..3], ["i=0", "i=1", "i=2"], "the first of the list (the defaults) come first");
        // 20 ms each, 2 measurements kept back for the re-time and the check: stops well before the deadline
        assert!(start.elapsed() < Duration::from_millis(300 + 100), "{:?}", start.elapsed());
        assert!(r.winner.is_some());
        let e = store.load("nvidia-h200", "gemm").unwrap().unwrap().entry(&k).cloned().unwrap();
        assert_eq!(e.candidates.len(), r.measured);

        // a deadline already passed: exactly the minimum; resume measures the rest later
        let k2 = key("gemm", &[("m", 128)]);
        let opts2 = TuneOptions { deadline: Some(Instant::now()), min_measured: 3, ..TuneOptions::default() };
        let r = tune(&store, &k2, &plan(10), &opts2, &mut Fake::new(), &mut |_| {}).unwrap();
        assert_eq!((r.measured, r.cut), (3, 7));
        let resume = TuneOptions { resume: true, ..TuneOptions::default() };
        let r = tune(&store, &k2, &plan(10), &resume, &mut Fake::new(), &mut |_| {}).unwrap();
        assert_eq!((r.skipped, r.measured, r.cut), (3, 7, 0));
    }

    #[test]
    fn consecutive_crashes_abort_and_duplicates_are_refused() {
        let (_dir, store, k, mut m) = gemm_store();
        m.crash = plan(10).into_iter().map(|c| c.id).collect();
        let opts = TuneOptions { max_consecutive_transient: 3, ..TuneOptions::default() };
        let err = tune(&store, &k, &plan(10), &opts, &mut m, &mut |_| {}).unwrap_err();
        assert!(matches!(err, TuneError::Aborted { .. }), "{err}");
        assert_eq!(m.measured.len(), 3);
        let mut dup = plan(3);
        dup.push(dup[0].clone());
        assert!(matches!(
            tune(&store, &k, &dup, &TuneOptions::default(), &mut Fake::new(), &mut |_| {}),
            Err(TuneError::DuplicateCandidate { .. })
        ));
    }
}
