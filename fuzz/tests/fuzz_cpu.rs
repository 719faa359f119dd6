//! The CPU fuzz budget CI runs, and proof that the fuzzer fails when it should.
//!
//! CI fuzzes on the Cranelift JIT of the IR (`--backend cpu-jit`), the backend the issue names for machines
//! without a GPU: it runs about ten times as many cases per second as the interpreter, and it is required to
//! lower every kernel (no interpreter fallback is allowed here). The interpreter stays the reference semantics
//! the JIT is checked against bit for bit (`codegen/tests/jit.rs`, `k3k fuzz --backend jit-diff`).
//!
//! `K3K_FUZZ_CASES` (new cases per operator, default 40) and `K3K_FUZZ_SECS` (seconds per operator, default 8)
//! bound the budget (about 90 s for every operator on a 2-core machine). The run seed is fixed so CI is
//! deterministic (`K3K_FUZZ_SEED=N` picks another, `K3K_FUZZ_SEED=random` a fresh one, printed); `k3k fuzz`
//! draws fresh seeds. Failures found here are appended to `proptest-regressions/<op>.txt`.

use k3k_fuzz::{Backend, CaseProgress, FuzzOptions, JitBackend, fuzz_op, fuzz_op_with_progress, replay};
use k3k_ir::{Kernel, KnobSpace, Knobs};
use k3k_ops::OpError;
use k3k_ops::op::{CheckReport, Instance, Operator, Preset, Work};
use k3k_ops::plan::{Executor, Outputs, Plan};
use k3k_ops::registry;
use rand::Rng;
use rand::rngs::StdRng;
use std::path::PathBuf;
use std::time::Duration;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The run seed: fixed unless `K3K_FUZZ_SEED` says otherwise.
fn run_seed() -> u64 {
    match std::env::var("K3K_FUZZ_SEED").ok().as_deref() {
        Some("random") => rand::rng().random(),
        Some(s) => s.parse().expect("K3K_FUZZ_SEED: an integer or `random`"),
        None => 20_261_130,
    }
}

fn regressions_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proptest-regressions")
}

#[test]
fn every_operator_fuzzes_clean_on_the_cpu_jit() {
    let seed = run_seed();
    let opts = FuzzOptions {
        cases: env_or("K3K_FUZZ_CASES", 40),
        budget: Some(Duration::from_secs_f64(env_or("K3K_FUZZ_SECS", 8.0))),
        seed,
        regressions: Some(regressions_dir()),
        max_shrink_iters: 64,
        max_shrink_time: Duration::from_secs(30),
        ..FuzzOptions::default()
    };
    eprintln!("fuzz seed {seed} (K3K_FUZZ_SEED={seed} repeats this run)");
    let mut bad = vec![];
    for op in registry::all() {
        let mut jit = JitBackend::default();
        let r = fuzz_op(&mut jit, op.as_ref(), &opts, &mut |l| eprintln!("{l}"));
        assert!(jit.fallbacks.is_empty(), "{}: kernels fell back to the interpreter: {:?}", r.op, jit.fallbacks);
        eprintln!(
            "{:<22} {:>4} cases ({} replayed) {:>3} mismatches  max rel err {:.2e}  {:.1} cases/s  {:.1}s",
            r.op,
            r.cases,
            r.replayed,
            r.mismatches,
            r.max_rel_err,
            r.cases_per_second(),
            r.elapsed.as_secs_f64()
        );
        assert!(r.cases > 0, "{}: no case ran", r.op);
        assert!(jit.jit_launches > 0, "{}: no kernel ran compiled", r.op);
        if r.mismatches > 0 {
            bad.push(r.failures.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n"));
        }
    }
    assert!(bad.is_empty(), "fuzz seed {seed}:\n{}", bad.join("\n"));
}

/// An operator whose check is handed corrupted outputs (one NaN) whenever the problem's `K` is at least 17:
/// the fuzzer must catch it and shrink the case to `K = 17` with one output row.
struct Mutated(Box<dyn Operator>);

struct MutatedInstance {
    inner: Box<dyn Instance>,
    bad: bool,
}

impl Instance for MutatedInstance {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        self.inner.plan(knobs)
    }
    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let mut out = out.clone();
        if self.bad {
            for t in out.0.values_mut().filter(|t| !t.is_empty()) {
                t.set_f32(0, f32::NAN);
            }
        }
        self.inner.check(&out)
    }
    fn work(&self) -> Work {
        self.inner.work()
    }
    fn problem(&self) -> serde_json::Value {
        self.inner.problem()
    }
}

impl Operator for Mutated {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn summary(&self) -> &'static str {
        "mutated"
    }
    fn knob_space(&self) -> KnobSpace {
        self.0.knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        self.0.default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        self.0.bench_presets()
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        self.0.random_case(rng)
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        Ok(Box::new(MutatedInstance { inner: self.0.instance(p, seed)?, bad: p.get_or("K", 0) >= 17 }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.0.kernels(p, knobs)
    }
}

fn rows(p: &Preset) -> i64 {
    p.dims.get("M").copied().unwrap_or_else(|| p.dims.iter().filter(|(k, _)| k.starts_with('c')).map(|(_, v)| v).sum())
}

#[test]
fn a_mutated_check_is_caught_shrunk_persisted_and_replayed() {
    let op = Mutated(registry::select("latent_moe_gemm").remove(0));
    let dir = tempfile::tempdir().unwrap();
    let opts = FuzzOptions {
        cases: 40,
        seed: 11,
        regressions: Some(dir.path().to_path_buf()),
        max_shrink_iters: 200,
        ..FuzzOptions::default()
    };
    let mut log = vec![];
    let r = fuzz_op(&mut Executor::Cpu, &op, &opts, &mut |l| log.push(l.to_string()));
    assert_eq!(r.mismatches, 1, "the fuzzer stops at the first failure: {r:?}");
    let f = &r.failures[0];
    eprintln!("{f}");
    assert!(log[0].contains("--replay") && log[0].contains(&f.case_seed.unwrap().to_string()));
    // Shrunk to the smallest failing shape: K exactly 17, one output row, one column, no epilogue.
    let s = &f.shrunk.preset;
    assert!(f.original.preset.get("K").unwrap() >= 17);
    assert_eq!(s.get("K").unwrap(), 17, "shrunk: {s:?}");
    assert_eq!(rows(s), 1, "shrunk: {s:?}");
    assert_eq!((s.get("N").unwrap(), s.get("epilogue").unwrap(), s.get("p").unwrap()), (1, 0, 0), "shrunk: {s:?}");

    // The failure was kept in proptest's format and a new run replays it first.
    let file = std::fs::read_to_string(dir.path().join("latent_moe_gemm.txt")).unwrap();
    assert!(file.lines().any(|l| l.starts_with("cc ") && l.contains("shrinks to")), "{file}");
    let again = fuzz_op(&mut Executor::Cpu, &op, &FuzzOptions { cases: 0, ..opts.clone() }, &mut |_| {});
    assert_eq!((again.replayed, again.mismatches), (1, 1));

    // The printed case seed replays the same case.
    let (drawn, failure) = replay(&mut Executor::Cpu, &op, f.case_seed.unwrap(), &opts);
    assert_eq!(drawn.as_ref(), Some(&f.original));
    assert_eq!(failure.unwrap().shrunk, f.shrunk);
}

/// A backend that poisons one output element of every plan whose output has at least 64 elements.
struct Poisoning(Executor);

impl Backend for Poisoning {
    fn name(&self) -> String {
        "poisoning".into()
    }
    fn run(&mut self, plan: &Plan) -> Result<Outputs, OpError> {
        let mut out = self.0.run(plan)?;
        for t in out.0.values_mut().filter(|t| t.len() >= 64) {
            t.set_f32(t.len() - 1, 1e30);
        }
        Ok(out)
    }
}

#[test]
fn a_poisoned_output_is_caught_and_shrunk_to_the_threshold() {
    let op = registry::select("mx.dequantize").remove(0);
    let opts = FuzzOptions { cases: 30, seed: 5, max_shrink_iters: 200, ..FuzzOptions::default() };
    let r = fuzz_op(&mut Poisoning(Executor::Cpu), op.as_ref(), &opts, &mut |_| {});
    assert_eq!(r.mismatches, 1);
    let f = &r.failures[0];
    eprintln!("{f}");
    let s = &f.shrunk.preset;
    // y is [R, K] with K a multiple of 32: the smallest poisoned shapes hold exactly 64 elements.
    assert_eq!(s.get("R").unwrap() * s.get("K").unwrap(), 64, "shrunk: {s:?}");
    // The same cases pass on the honest interpreter.
    let clean = fuzz_op(&mut Executor::Cpu, op.as_ref(), &FuzzOptions { cases: 5, ..opts }, &mut |_| {});
    assert_eq!(clean.mismatches, 0);
}

/// The progress of a run counts every case it takes, the regression file's first, out of all it may draw.
#[test]
fn progress_counts_the_replayed_and_the_new_cases() {
    let op = registry::select("mx.dequantize").remove(0);
    let dir = tempfile::tempdir().unwrap();
    let opts = FuzzOptions {
        cases: 30,
        seed: 5,
        max_shrink_iters: 50,
        max_failures: 1,
        regressions: Some(dir.path().to_path_buf()),
        ..FuzzOptions::default()
    };
    let mut seen = vec![];
    let r =
        fuzz_op_with_progress(&mut Poisoning(Executor::Cpu), op.as_ref(), &opts, &mut |_| {}, &mut |p| seen.push(p));
    assert_eq!(r.mismatches, 1);
    // Stopped at its first failure: the last call says how far it got, out of the 30 it could draw.
    assert_eq!(seen.first(), Some(&CaseProgress { done: 0, total: 30 }));
    assert_eq!(seen.last().map(|p| p.done), Some(r.cases + r.skipped));
    assert!(seen.windows(2).all(|w| w[1].done == w[0].done + 1 && w[1].total == 30), "{seen:?}");
    // The next run replays the kept failure first, and counts it.
    let mut seen = vec![];
    let again = FuzzOptions { cases: 3, ..opts };
    let r = fuzz_op_with_progress(&mut Executor::Cpu, op.as_ref(), &again, &mut |_| {}, &mut |p| seen.push(p));
    assert_eq!(r.replayed, 1);
    assert_eq!(seen, (0..=4).map(|done| CaseProgress { done, total: 4 }).collect::<Vec<_>>());
}

/// Dim names with their index suffix dropped (`c3` -> `c`), so ragged lists compare by kind.
fn dim_kinds(p: &Preset) -> std::collections::BTreeSet<String> {
    p.dims.keys().map(|k| k.trim_end_matches(|c: char| c.is_ascii_digit()).to_string()).collect()
}

/// Every dim an operator's own `random_case` sets is drawn by its fuzz strategy too, so a variant added to an
/// operator (a new flag, a new layout) is not silently left out of the fuzzing: extend `fuzz/src/strategy.rs`.
#[test]
fn strategies_cover_every_dim_of_random_case() {
    use proptest::strategy::{Strategy, ValueTree};
    use rand::SeedableRng;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for op in registry::all() {
        if !k3k_fuzz::strategy::has_strategy(op.name()) {
            eprintln!(
                "{}: no strategy of its own (fuzzed through its random_case, without shape shrinking)",
                op.name()
            );
            continue;
        }
        let mut rng = StdRng::seed_from_u64(3);
        let mut want = std::collections::BTreeSet::new();
        for _ in 0..300 {
            want.extend(dim_kinds(&op.random_case(&mut rng)));
        }
        let strat = k3k_fuzz::preset_strategy(op.as_ref());
        let mut got = std::collections::BTreeSet::new();
        for _ in 0..300 {
            let p = strat.new_tree(&mut runner).unwrap().current();
            op.kernels(&p, &op.default_knobs()).unwrap_or_else(|e| panic!("{}: strategy drew {p:?}: {e}", op.name()));
            got.extend(dim_kinds(&p));
        }
        let missing: Vec<_> = want.difference(&got).collect();
        assert!(
            missing.is_empty(),
            "{}: the fuzz strategy never sets {missing:?}; extend fuzz/src/strategy.rs",
            op.name()
        );
    }
}

/// The JIT backend agrees with the interpreter bit for bit on random cases of every operator (kernels the JIT
/// does not lower yet take the interpreter fallback), and so with the reference.
#[test]
fn the_jit_matches_the_interpreter_on_random_operator_cases() {
    let opts = FuzzOptions {
        cases: env_or("K3K_FUZZ_JIT_CASES", 4),
        budget: Some(Duration::from_secs_f64(env_or("K3K_FUZZ_SECS", 8.0) / 2.0)),
        seed: run_seed(),
        max_shrink_iters: 32,
        ..FuzzOptions::default()
    };
    let mut be = k3k_fuzz::DiffBackend::default();
    for op in registry::all() {
        let r = fuzz_op(&mut be, op.as_ref(), &opts, &mut |l| eprintln!("{l}"));
        assert_eq!(r.mismatches, 0, "{}: seed {}", r.op, opts.seed);
    }
    eprintln!("launches: {} compiled, {} on the interpreter", be.jit.jit_launches, be.jit.interp_launches);
}

/// A backend that runs on the interpreter and records the IR hash of every kernel it is given.
struct Recording(std::collections::BTreeSet<String>);

impl Backend for Recording {
    fn name(&self) -> String {
        "recording".into()
    }
    fn run(&mut self, plan: &Plan) -> Result<Outputs, OpError> {
        self.0.extend(plan.kernels().into_iter().map(k3k_ir::stable_hash));
        Executor::Cpu.run(plan)
    }
}

#[test]
fn precompiled_kernels_are_exactly_those_the_run_launches() {
    for name in ["latent_moe_gemm", "kda"] {
        let op = registry::all().into_iter().find(|o| o.name() == name).expect("registered");
        let opts = FuzzOptions { cases: 12, seed: 7, ..FuzzOptions::default() };
        let predicted: std::collections::BTreeSet<String> =
            k3k_fuzz::kernels_of_cases(op.as_ref(), &opts, opts.cases).iter().map(k3k_ir::stable_hash).collect();
        let mut rec = Recording(Default::default());
        let r = fuzz_op(&mut rec, op.as_ref(), &opts, &mut |l| eprintln!("{l}"));
        assert_eq!((r.cases, r.mismatches), (12, 0), "{name}");
        assert!(!predicted.is_empty(), "{name}: no kernels predicted");
        assert_eq!(predicted, rec.0, "{name}: the precompiled set differs from the launched set");
    }
}
