//! `k3k fuzz`: differential fuzzing of every operator against the f64 reference, with shrinking.
//!
//! Each operator gets `--cases` new cases (or as many as `--time` allows, per operator) drawn by its proptest
//! strategy (`k3k-fuzz`), after replaying the failing cases kept in `proptest-regressions/<op>.txt`. A failing
//! case is shrunk to the smallest failing shape and printed with its case seed; `--replay SEED` redraws that
//! case. On CUDA, `--tuned` also fuzzes the tuned configs found in `results/` (each case runs on the defaults
//! or on one of them).

use super::progress::Progress;
use k3k::ops::op::Operator;
use k3k::ops::plan::{Executor, GpuExec};
use k3k::runtime::Gpu;
use k3k::tuner::{GpuKey, ResultsStore};
use k3k_fuzz::{Backend, FuzzOptions, KnobSet, OpReport};
use rand::Rng;
use std::path::PathBuf;

/// Where to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuzzBackend {
    /// The CPU interpreter of the IR (reference semantics; what CI fuzzes).
    Cpu,
    /// The Cranelift JIT of the IR (it lowers every statement; a kernel using anything it does not know runs on
    /// the interpreter, reported per operator).
    CpuJit,
    /// The interpreter and the JIT on every case, outputs compared bit for bit (then against the reference).
    JitDiff,
    /// The GPU (an error when there is none).
    Cuda,
}

/// Arguments of `k3k fuzz`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Operator (or family, or `all`).
    #[arg(long, default_value = "all")]
    pub op: String,
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: FuzzBackend,
    /// New cases per operator (after the regression file's).
    #[arg(long, default_value_t = 1000)]
    pub cases: usize,
    /// Time budget per operator (e.g. 90s, 5m), compiling included: on a GPU the kernels of the run's first cases
    /// precompile for at most half of it (the rest compile on first use); no new case starts after it.
    #[arg(long)]
    pub time: Option<String>,
    /// Run seed (default: fresh; printed so the run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Redraw, run and shrink the one case of this case seed (as printed by a failure), for `--op`.
    #[arg(long)]
    pub replay: Option<u64>,
    /// Knob overrides for every case (default: the operator's defaults).
    #[arg(long)]
    pub knobs: Option<String>,
    /// CUDA: also fuzz the tuned configs of the benchmark presets found in `--results`.
    #[arg(long)]
    pub tuned: bool,
    /// Where tuned configs are looked up (with `--tuned`).
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Directory of the regression files (replayed first; failures appended).
    #[arg(long, default_value = "proptest-regressions")]
    pub regressions: PathBuf,
    /// Neither replay nor write the regression files.
    #[arg(long)]
    pub no_persist: bool,
    /// Shrinking steps per failing case.
    #[arg(long, default_value_t = 256)]
    pub max_shrink_iters: u32,
    /// Shrinking time per failing case (e.g. 60s, 5m).
    #[arg(long, default_value = "60s")]
    pub shrink_time: String,
    /// Stop an operator after this many failing cases (0: never).
    #[arg(long, default_value_t = 3)]
    pub max_failures: usize,
}

fn backend(b: FuzzBackend) -> anyhow::Result<Box<dyn Backend>> {
    if b != FuzzBackend::Cuda {
        let name =
            clap::ValueEnum::to_possible_value(&b).map_or_else(|| format!("{b:?}"), |v| v.get_name().to_string());
        super::check::refuse_experiments_on_cpu(&format!("fuzz --backend {name}"))?;
    }
    Ok(match b {
        FuzzBackend::Cpu => Box::new(Executor::Cpu),
        FuzzBackend::CpuJit => Box::new(k3k_fuzz::JitBackend::default()),
        FuzzBackend::JitDiff => Box::new(k3k_fuzz::DiffBackend::default()),
        FuzzBackend::Cuda => Box::new(Executor::Gpu(Box::new(GpuExec::new(Gpu::open(0)?)))),
    })
}

/// The knob sets of an operator: the defaults (or `--knobs`), then on `--tuned` every distinct tuned config
/// of its benchmark presets on this GPU.
fn knob_sets(
    op: &dyn Operator,
    a: &Args,
    gpu: Option<&GpuKey>,
    store: Option<&ResultsStore>,
) -> anyhow::Result<Vec<KnobSet>> {
    let mut sets = vec![match &a.knobs {
        Some(k) => KnobSet { label: format!("--knobs {k}"), knobs: super::parse_knobs(op, Some(k))? },
        None => KnobSet { label: "default".into(), knobs: op.default_knobs() },
    }];
    if let (Some(gpu), Some(store)) = (gpu, store) {
        for p in op.bench_presets() {
            let (knobs, how) = k3k::tuning::tuned_knobs(store, op, &p, gpu);
            if !sets.iter().any(|s| s.knobs == knobs) {
                sets.push(KnobSet { label: format!("{how} for `{}`", p.name), knobs });
            }
        }
    }
    Ok(sets)
}

fn print_table(rows: &[OpReport]) {
    println!(
        "{:<22} {:<10} {:>7} {:>9} {:>8} {:>10} {:>12} {:>9} {:>8}  seed",
        "op", "backend", "cases", "replayed", "skipped", "mismatches", "max rel err", "cases/s", "time"
    );
    for r in rows {
        println!(
            "{:<22} {:<10} {:>7} {:>9} {:>8} {:>10} {:>12.3e} {:>9.1} {:>7.1}s  {}",
            r.op,
            r.backend,
            r.cases,
            r.replayed,
            r.skipped,
            r.mismatches,
            r.max_rel_err,
            r.cases_per_second(),
            r.elapsed.as_secs_f64(),
            r.seed
        );
    }
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    if a.tuned {
        a.results = k3k::paths::resolve(&a.results, "--results")?;
    }
    if !a.no_persist {
        a.regressions = k3k::paths::resolve(&a.regressions, "--regressions")?;
    }
    let seed = a.seed.unwrap_or_else(|| rand::rng().random());
    let ops = super::select_ops(&a.op)?;
    if a.cases == 0 && a.replay.is_none() {
        anyhow::bail!("--cases: must be at least 1 (0 would fuzz nothing)");
    }
    if a.replay.is_some() && ops.len() != 1 {
        anyhow::bail!("--replay needs --op naming one operator (a case seed belongs to one)");
    }
    // Arguments are checked before a backend (a GPU) is opened.
    for op in &ops {
        super::parse_knobs(op.as_ref(), a.knobs.as_deref())?;
    }
    let budget = a.time.as_deref().map(|t| k3k::input::parse_duration("--time", t)).transpose()?;
    let shrink_time = k3k::input::parse_duration("--shrink-time", &a.shrink_time)?;
    let mut be = backend(a.backend)?;
    let (gpu, store) = if a.tuned {
        anyhow::ensure!(a.backend == FuzzBackend::Cuda, "--tuned needs --backend cuda (tuned configs are per GPU)");
        let g = Gpu::open(0)?;
        let key = GpuKey::new(g.info.name.clone(), g.info.compute_capability, g.info.sm_count);
        (Some(key), Some(ResultsStore::open(&a.results)?))
    } else {
        (None, None)
    };
    let base = FuzzOptions {
        cases: a.cases,
        budget,
        seed,
        knob_sets: vec![],
        regressions: (!a.no_persist).then(|| a.regressions.clone()),
        max_shrink_iters: a.max_shrink_iters,
        max_shrink_time: shrink_time,
        max_failures: a.max_failures,
    };
    if let Some(case_seed) = a.replay {
        let op = &ops[0];
        let opts = FuzzOptions { knob_sets: knob_sets(op.as_ref(), &a, gpu.as_ref(), store.as_ref())?, ..base };
        let (drawn, failure) = k3k_fuzz::replay(be.as_mut(), op.as_ref(), case_seed, &opts);
        if let Some(c) = &drawn {
            println!("case seed {case_seed}: {c:?}");
        }
        return Ok(match failure {
            Some(f) => {
                println!("{f}");
                1
            }
            None => {
                println!("passed on {}", be.name());
                0
            }
        });
    }
    println!(
        "k3k fuzz: seed {seed}, {} case(s) per operator{}, backend {}",
        a.cases,
        budget.map(|b| format!(" within {:.0}s", b.as_secs_f64())).unwrap_or_default(),
        be.name()
    );
    let mut rows = vec![];
    for op in &ops {
        let sets = knob_sets(op.as_ref(), &a, gpu.as_ref(), store.as_ref())?;
        if sets.len() > 1 {
            for s in &sets {
                eprintln!("{}: knobs {} ({})", op.name(), s.knobs, s.label);
            }
        }
        let mut opts = FuzzOptions { knob_sets: sets, ..base.clone() };
        if a.backend == FuzzBackend::Cuda {
            // The budget covers the compiles too: the precompile takes at most half of it (the GEMM's ~150
            // variants took ~54 s on the H200 host's 16 cores, past a 25 s budget), the cases the rest.
            let t0 = std::time::Instant::now();
            precompile(op.as_ref(), &opts, opts.budget.map(|b| t0 + b / 2));
            opts.budget = opts.budget.map(|b| b.saturating_sub(t0.elapsed()));
        }
        let bar = Progress::new(opts.cases as u64, op.name());
        let r = k3k_fuzz::fuzz_op_with_progress(be.as_mut(), op.as_ref(), &opts, &mut |l| bar.eprintln(l), &mut |p| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
        });
        drop(bar);
        eprintln!(
            "{}: {} cases ({} replayed, {} skipped), {} mismatches in {:.1}s",
            r.op,
            r.cases,
            r.replayed,
            r.skipped,
            r.mismatches,
            r.elapsed.as_secs_f64()
        );
        if let Some(summary) = be.take_summary() {
            eprintln!("{}: {summary}", r.op);
        }
        rows.push(r);
    }
    print_table(&rows);
    for r in rows.iter().filter(|r| r.cases == 0) {
        eprintln!("{}: no case ran ({} drawn with knobs that do not apply)", r.op, r.skipped);
    }
    Ok(if rows.iter().any(|r| r.mismatches > 0 || r.cases == 0) { 1 } else { 0 })
}

/// Compile the kernels the run's cases will launch before the run (see [`super::precompile`]), none after
/// `deadline`.
fn precompile(op: &dyn Operator, opts: &FuzzOptions, deadline: Option<std::time::Instant>) {
    let t0 = std::time::Instant::now();
    super::precompile(op.name(), k3k_fuzz::kernels_of_cases(op, opts, PRECOMPILE_CASES), t0, deadline);
}

/// How many of the first new cases [`precompile`] looks at (later cases mostly reuse their variants).
const PRECOMPILE_CASES: usize = 2000;
