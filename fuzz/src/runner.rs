//! The differential fuzz loop: draw a case, run `instance -> plan -> run -> check`, shrink what fails.
//!
//! Each case has its own 64-bit *case seed*, derived from the run seed and the case number. The case seed
//! seeds a proptest [`TestRunner`] that draws the case from the operator's strategy ([`crate::strategy`]),
//! runs it and, when it fails, shrinks it with proptest's shrinking (bounded by iterations and time). So a
//! failure is reported with the case seed, and [`replay`] (`k3k fuzz --replay SEED`) redraws exactly that case
//! and shrinks it again.
//!
//! Failures are kept in `proptest-regressions/<op>.txt` in proptest's own file format
//! ([`FileFailurePersistence`]): one `cc <hex>` line per failing case seed (the case seed in the first eight
//! bytes, little-endian, then a fixed tag), followed by the shrunk case. Every run replays the file's seeds
//! before drawing new cases.

use crate::strategy::{Case, case_strategy};
use k3k_ir::{Kernel, Knobs};
use k3k_ops::OpError;
use k3k_ops::op::Operator;
use k3k_ops::plan::{Executor, Outputs, Plan};
use proptest::test_runner::{
    Config, FailurePersistence, FileFailurePersistence, PersistedSeed, RngAlgorithm, TestCaseError, TestError, TestRng,
    TestRunner,
};
use std::cell::RefCell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Where plans run: the CPU interpreter, a GPU, or any other backend of the IR (a JIT).
pub trait Backend {
    /// A short name for tables.
    fn name(&self) -> String;
    /// Run a plan once (outputs poisoned first) and return its outputs.
    fn run(&mut self, plan: &Plan) -> Result<Outputs, OpError>;
    /// What the backend has to say about the runs since the last call (e.g. which engine ran the kernels),
    /// then forget it.
    fn take_summary(&mut self) -> Option<String> {
        None
    }
}

impl Backend for Executor {
    fn name(&self) -> String {
        Executor::name(self).into()
    }
    fn run(&mut self, plan: &Plan) -> Result<Outputs, OpError> {
        Executor::run(self, plan)
    }
}

/// One set of knobs to fuzz with.
#[derive(Clone, Debug)]
pub struct KnobSet {
    /// Where the knobs come from (`default`, `tuned (...)`, `--knobs`).
    pub label: String,
    pub knobs: Knobs,
}

/// How much to fuzz, and how.
#[derive(Clone, Debug)]
pub struct FuzzOptions {
    /// New cases to draw (after the regression file's).
    pub cases: usize,
    /// Stop drawing new cases after this long (the case in flight and its shrinking finish).
    pub budget: Option<Duration>,
    /// The run seed: the case seeds derive from it.
    pub seed: u64,
    /// Knob sets; each case runs on one of them (drawn, shrinking toward the first). Empty: the defaults. A
    /// set other than the defaults that a drawn shape rejects (`InvalidKnobs`) skips that draw.
    pub knob_sets: Vec<KnobSet>,
    /// Directory of the regression files (`<dir>/<op>.txt`): replayed first, failures appended. `None`: off.
    pub regressions: Option<PathBuf>,
    /// Shrinking stops after this many steps ...
    pub max_shrink_iters: u32,
    /// ... or after this long.
    pub max_shrink_time: Duration,
    /// Stop after this many failing cases (each is shrunk); 0: never stop early.
    pub max_failures: usize,
}

impl Default for FuzzOptions {
    fn default() -> Self {
        FuzzOptions {
            cases: 100,
            budget: None,
            seed: 0,
            knob_sets: vec![],
            regressions: None,
            max_shrink_iters: 256,
            max_shrink_time: Duration::from_secs(60),
            max_failures: 1,
        }
    }
}

/// A failing case: as drawn and as shrunk.
#[derive(Clone, Debug)]
pub struct Failure {
    pub op: String,
    pub backend: String,
    /// The case seed (replay it with [`replay`] / `k3k fuzz --replay`), or `None` for a regression-file line
    /// that does not hold one.
    pub case_seed: Option<u64>,
    /// The regression-file line of the case (`cc <hex>`).
    pub persisted: String,
    pub original: Case,
    pub shrunk: Case,
    /// The knobs of the shrunk case.
    pub knobs: KnobSet,
    /// What went wrong with the shrunk case.
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seed = self.case_seed.map_or_else(|| self.persisted.clone(), |s| s.to_string());
        writeln!(f, "MISMATCH {} on {} (case seed {seed})", self.op, self.backend)?;
        writeln!(f, "  drawn:     {:?}", self.original)?;
        writeln!(f, "  shrunk to: {:?}", self.shrunk)?;
        writeln!(f, "  knobs:     {} ({})", self.knobs.knobs, self.knobs.label)?;
        writeln!(f, "  failure:   {}", self.detail)?;
        if let Some(s) = self.case_seed {
            // The operator's exact name selects it alone; the run's `--knobs` are repeated (they were its only set).
            let knobs = if self.knobs.label.starts_with("--knobs") {
                format!(" --knobs {}", self.knobs.knobs)
            } else {
                String::new()
            };
            write!(f, "  replay:    k3k fuzz --op {} --replay {s}{knobs}", self.op)?;
        }
        Ok(())
    }
}

/// What fuzzing one operator found.
#[derive(Clone, Debug)]
pub struct OpReport {
    pub op: String,
    pub backend: String,
    /// Cases run and checked (regression-file cases included).
    pub cases: usize,
    /// Of those, how many came from the regression file.
    pub replayed: usize,
    /// Cases whose run or check failed.
    pub mismatches: usize,
    /// Cases drawn with knobs that do not apply to their shape (not run).
    pub skipped: usize,
    /// Largest relative error over the passing cases.
    pub max_rel_err: f64,
    /// The run seed.
    pub seed: u64,
    /// Wall time (shrinking included).
    pub elapsed: Duration,
    /// Wall time of the passing and failing first runs of cases (no shrinking), for the rate.
    pub run_time: Duration,
    pub failures: Vec<Failure>,
}

impl OpReport {
    /// Cases per second of running and checking (shrinking excluded).
    pub fn cases_per_second(&self) -> f64 {
        self.cases as f64 / self.run_time.as_secs_f64().max(1e-9)
    }
}

/// The case seed of case `i` of a run (splitmix64 of the pair).
pub fn case_seed(run_seed: u64, i: u64) -> u64 {
    let mut z = run_seed ^ i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The tag in bytes 8..32 of a persisted k3k case seed.
const SEED_TAG: &[u8; 24] = b"k3k-fuzz case seed v1...";

fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&seed.to_le_bytes());
    b[8..].copy_from_slice(SEED_TAG);
    b
}

fn seed_of_bytes(b: &[u8; 32]) -> Option<u64> {
    (&b[8..] == SEED_TAG).then(|| u64::from_le_bytes(b[..8].try_into().expect("8 bytes")))
}

fn persisted_line(b: &[u8; 32]) -> String {
    format!("cc {}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())
}

fn bytes_of_persisted(p: &PersistedSeed) -> Option<[u8; 32]> {
    let s = p.to_string();
    let hex = s.strip_prefix("cc ")?.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut b = [0u8; 32];
    for (i, o) in b.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(b)
}

/// The regression file of an operator in `dir`.
pub fn regression_file(dir: &Path, op: &str) -> PathBuf {
    dir.join(format!("{op}.txt"))
}

fn persistence(path: &Path) -> FileFailurePersistence {
    // proptest takes a 'static path; one small leak per operator and run.
    FileFailurePersistence::Direct(Box::leak(path.to_string_lossy().into_owned().into_boxed_str()))
}

/// The case seeds (as proptest seed bytes) stored in an operator's regression file.
pub fn load_regressions(dir: &Path, op: &str) -> Vec<[u8; 32]> {
    let path = regression_file(dir, op);
    if !path.is_file() {
        return vec![];
    }
    persistence(&path).load_persisted_failures2(None).iter().filter_map(bytes_of_persisted).collect()
}

/// Append a failing case to an operator's regression file.
pub fn save_regression(dir: &Path, op: &str, seed: &[u8; 32], shrunk: &Case) {
    let line = persisted_line(seed);
    if load_regressions(dir, op).contains(seed) {
        return;
    }
    let path = regression_file(dir, op);
    let persisted = PersistedSeed::from_str(&line).expect("a valid ChaCha seed line");
    persistence(&path).save_persisted_failure2(None, persisted, shrunk);
}

/// The outcome of running one case.
enum Outcome {
    Pass(f64),
    Fail(String),
    /// The knobs do not apply to this shape.
    Skip(String),
}

/// Run one case on a backend: instance, plan at the knobs, run, check. Knobs other than the operator's
/// defaults may not apply to every shape (`default` false): a plan they cannot make skips the case.
fn run_case(backend: &mut dyn Backend, op: &dyn Operator, case: &Case, ks: &KnobSet, default: bool) -> Outcome {
    let inst = match op.instance(&case.preset, case.data_seed) {
        Ok(i) => i,
        Err(e) => return Outcome::Fail(format!("instance: {e}")),
    };
    let plan = match inst.plan(&ks.knobs) {
        Ok(p) => p,
        Err(e @ (OpError::InvalidKnobs { .. } | OpError::Knob(_))) if !default => return Outcome::Skip(e.to_string()),
        Err(e) => return Outcome::Fail(format!("plan: {e}")),
    };
    let out = match backend.run(&plan) {
        Ok(o) => o,
        Err(e) => return Outcome::Fail(format!("run ({}): {e}", inst.describe())),
    };
    match inst.check(&out) {
        Ok(r) if r.passed => Outcome::Pass(if r.max_rel_err.is_finite() { r.max_rel_err } else { 0.0 }),
        Ok(r) => Outcome::Fail(format!(
            "check ({}): {} (rel err {:.3e}; {})",
            inst.describe(),
            r.detail,
            r.max_rel_err,
            r.scope
        )),
        Err(e) => Outcome::Fail(format!("check ({}): {e}", inst.describe())),
    }
}

/// The result of one case with its shrinking.
enum CaseResult {
    Pass { rel: f64, run: Duration },
    Fail { failure: Box<Failure>, run: Duration },
    Skip,
}

fn default_sets(op: &dyn Operator, opts: &FuzzOptions) -> Vec<KnobSet> {
    if opts.knob_sets.is_empty() {
        vec![KnobSet { label: "default".into(), knobs: op.default_knobs() }]
    } else {
        opts.knob_sets.clone()
    }
}

/// The proptest configuration of one case: one case, no persistence of its own (the regression files are
/// handled here), no fork, shrinking bounded as the options say.
fn config(opts: &FuzzOptions) -> Config {
    Config {
        cases: 1,
        failure_persistence: None,
        fork: false,
        timeout: 0,
        max_shrink_iters: opts.max_shrink_iters,
        max_shrink_time: opts.max_shrink_time.as_millis().min(u32::MAX as u128) as u32,
        max_local_rejects: 64,
        max_global_rejects: 64,
        verbose: 0,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    }
}

/// Draw the case of `seed` (proptest seed bytes), run it, and shrink it when it fails.
fn one_case(
    backend: &mut dyn Backend,
    op: &dyn Operator,
    sets: &[KnobSet],
    seed: [u8; 32],
    opts: &FuzzOptions,
) -> CaseResult {
    let mut runner = TestRunner::new_with_rng(config(opts), TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let knob_index = 0..sets.len();
    let strategy = (case_strategy(op), knob_index);
    struct State {
        /// The first (unshrunk) run of the case: its outcome, value and time.
        first: Option<(Outcome, Case, Duration)>,
    }
    let state = RefCell::new(State { first: None });
    let defaults = op.default_knobs();
    let backend = RefCell::new(backend);
    let result = runner.run(&strategy, |(case, ki)| {
        let t0 = Instant::now();
        let outcome = run_case(*backend.borrow_mut(), op, &case, &sets[ki], sets[ki].knobs == defaults);
        let dt = t0.elapsed();
        let r = match &outcome {
            Outcome::Pass(_) => Ok(()),
            Outcome::Fail(why) => Err(TestCaseError::fail(why.clone())),
            Outcome::Skip(why) => Err(TestCaseError::reject(why.clone())),
        };
        let mut st = state.borrow_mut();
        if st.first.is_none() && !matches!(outcome, Outcome::Skip(_)) {
            st.first = Some((outcome, case, dt));
        }
        r
    });
    let first = state.into_inner().first;
    match (result, first) {
        (Ok(()), Some((Outcome::Pass(rel), _, run))) => CaseResult::Pass { rel, run },
        (Err(TestError::Fail(why, (shrunk, ki))), first) => {
            let (original, run) = match first {
                Some((_, c, t)) => (c, t),
                None => (shrunk.clone(), Duration::ZERO),
            };
            CaseResult::Fail {
                failure: Box::new(Failure {
                    op: op.name().into(),
                    backend: backend.borrow().name(),
                    case_seed: seed_of_bytes(&seed),
                    persisted: persisted_line(&seed),
                    original,
                    shrunk,
                    knobs: sets[ki].clone(),
                    detail: why.message().to_string(),
                }),
                run,
            }
        }
        _ => CaseResult::Skip,
    }
}

/// Fuzz one operator: replay its regression file, then draw `opts.cases` new cases (or until the budget is
/// spent), shrinking each failing one. `log` gets one block per failure as it is found.
pub fn fuzz_op(
    backend: &mut dyn Backend,
    op: &dyn Operator,
    opts: &FuzzOptions,
    log: &mut dyn FnMut(&str),
) -> OpReport {
    fuzz_op_with_progress(backend, op, opts, log, &mut |_| {})
}

/// How far [`fuzz_op_with_progress`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaseProgress {
    /// Cases done (run, or skipped because the knobs do not apply), replayed ones included.
    pub done: usize,
    /// The most cases of the run: the regression file's and `opts.cases` new ones (a budget or
    /// `opts.max_failures` may end it sooner).
    pub total: usize,
}

/// [`fuzz_op`], calling `on_case` once before the first case and after every case.
pub fn fuzz_op_with_progress(
    backend: &mut dyn Backend,
    op: &dyn Operator,
    opts: &FuzzOptions,
    log: &mut dyn FnMut(&str),
    on_case: &mut dyn FnMut(CaseProgress),
) -> OpReport {
    let start = Instant::now();
    let sets = default_sets(op, opts);
    let mut rep = OpReport {
        op: op.name().into(),
        backend: backend.name(),
        cases: 0,
        replayed: 0,
        mismatches: 0,
        skipped: 0,
        max_rel_err: 0.0,
        seed: opts.seed,
        elapsed: Duration::ZERO,
        run_time: Duration::ZERO,
        failures: vec![],
    };
    let stored = opts.regressions.as_deref().map(|d| load_regressions(d, op.name())).unwrap_or_default();
    let total = stored.len() + opts.cases;
    on_case(CaseProgress { done: 0, total });
    let fresh = (0..opts.cases as u64).map(|i| (false, seed_bytes(case_seed(opts.seed, i))));
    for (done, (from_file, seed)) in stored.into_iter().map(|s| (true, s)).chain(fresh).enumerate() {
        if !from_file && opts.budget.is_some_and(|b| start.elapsed() >= b) {
            break;
        }
        if opts.max_failures > 0 && rep.failures.len() >= opts.max_failures {
            break;
        }
        match one_case(backend, op, &sets, seed, opts) {
            CaseResult::Pass { rel, run } => {
                rep.cases += 1;
                rep.replayed += from_file as usize;
                rep.max_rel_err = rep.max_rel_err.max(rel);
                rep.run_time += run;
            }
            CaseResult::Fail { failure, run } => {
                rep.cases += 1;
                rep.replayed += from_file as usize;
                rep.mismatches += 1;
                rep.run_time += run;
                log(&failure.to_string());
                if !from_file && let Some(dir) = &opts.regressions {
                    save_regression(dir, op.name(), &seed, &failure.shrunk);
                }
                rep.failures.push(*failure);
            }
            CaseResult::Skip => rep.skipped += 1,
        }
        on_case(CaseProgress { done: done + 1, total });
    }
    rep.elapsed = start.elapsed();
    rep
}

/// Redraw the case of a case seed on a backend and shrink it if it fails (what `k3k fuzz --replay` runs).
/// Returns the case (as drawn) and its failure, if any.
pub fn replay(
    backend: &mut dyn Backend,
    op: &dyn Operator,
    case_seed: u64,
    opts: &FuzzOptions,
) -> (Option<Case>, Option<Failure>) {
    let sets = default_sets(op, opts);
    let seed = seed_bytes(case_seed);
    let drawn = draw(op, &sets, seed);
    match one_case(backend, op, &sets, seed, opts) {
        CaseResult::Fail { failure, .. } => (drawn, Some(*failure)),
        _ => (drawn, None),
    }
}

/// The case a case seed draws (without running it).
pub fn draw_case(op: &dyn Operator, case_seed: u64) -> Option<Case> {
    draw(op, &[KnobSet { label: "default".into(), knobs: op.default_knobs() }], seed_bytes(case_seed))
}

fn draw(op: &dyn Operator, sets: &[KnobSet], seed: [u8; 32]) -> Option<Case> {
    draw_with_knobs(op, sets, seed).map(|(c, _)| c)
}

/// The case a seed draws and the index of its knob set (the first draw of [`one_case`]).
fn draw_with_knobs(op: &dyn Operator, sets: &[KnobSet], seed: [u8; 32]) -> Option<(Case, usize)> {
    // The same derivation as `TestRunner::run` with one case: it draws from a seed taken from the runner's RNG.
    let opts = FuzzOptions { max_shrink_iters: 0, ..FuzzOptions::default() };
    let mut runner = TestRunner::new_with_rng(config(&opts), TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let first = RefCell::new(None);
    let _ = runner.run(&(case_strategy(op), 0..sets.len()), |(c, ki)| {
        first.borrow_mut().get_or_insert((c, ki));
        Ok(())
    });
    first.into_inner()
}

/// The kernels that the regression-file cases and the first `n` new cases of a run will launch (first draws,
/// not shrinking), deduplicated by IR hash. A compiling backend builds them all in parallel before the run
/// instead of one by one as the cases reach them (on the GPU, compilation otherwise dominates the run of the
/// operators with many kernel variants). Cases whose instance or plan fails are left out: the run reports them.
pub fn kernels_of_cases(op: &dyn Operator, opts: &FuzzOptions, n: usize) -> Vec<Kernel> {
    use rayon::prelude::*;
    let sets = default_sets(op, opts);
    let stored = opts.regressions.as_deref().map(|d| load_regressions(d, op.name())).unwrap_or_default();
    let seeds: Vec<[u8; 32]> =
        stored.into_iter().chain((0..n.min(opts.cases) as u64).map(|i| seed_bytes(case_seed(opts.seed, i)))).collect();
    let per_case: Vec<Vec<Kernel>> = seeds
        .par_iter()
        .map(|&seed| {
            let Some((case, ki)) = draw_with_knobs(op, &sets, seed) else { return vec![] };
            let Ok(inst) = op.instance(&case.preset, case.data_seed) else { return vec![] };
            inst.plan(&sets[ki].knobs).map(|p| p.kernels().into_iter().cloned().collect()).unwrap_or_default()
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    per_case.into_iter().flatten().filter(|k| seen.insert(k3k_ir::stable_hash(k))).collect()
}
