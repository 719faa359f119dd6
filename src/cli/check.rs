//! `k3k check`: correctness on fresh random problems.

use super::progress::Progress;
use k3k::ir::Knobs;
use k3k::ops::op::Operator;
use k3k::ops::plan::{Executor, GpuExec};
use k3k::runtime::Gpu;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Where to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The GPU when there is one, else the CPU interpreter.
    Auto,
    /// The CPU interpreter of the IR.
    Cpu,
    /// The GPU (an error when there is none).
    Cuda,
}

/// Arguments of `k3k check`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Operator (or family, or `all`).
    #[arg(long, default_value = "all")]
    pub op: String,
    /// Random problems per operator.
    #[arg(long, default_value_t = 50)]
    pub cases: usize,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// Knob overrides (default: the operator's defaults).
    #[arg(long)]
    pub knobs: Option<String>,
    /// Seed of the case generator (default: fresh; printed so a failure can be replayed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Replay only case number I of the seed's sequence (with `--seed`).
    #[arg(long)]
    pub only: Option<usize>,
    /// A fixed problem instead of random cases, e.g. `M=16,K=15,N=16` (each case draws fresh data).
    #[arg(long)]
    pub dims: Option<String>,
}

/// One operator's check summary.
pub struct Summary {
    pub op: String,
    pub backend: &'static str,
    pub cases: usize,
    pub failed: usize,
    /// Drawn cases left out because the `--knobs` given do not fit their shape (a typed `InvalidKnobs` from the
    /// plan; e.g. a 64-column block at V = 32). Never counted with the operator's default knobs.
    pub skipped: usize,
    pub max_rel_err: f64,
}

/// `K3K_EXPERIMENT` names kernel changes made in the CUDA prelude; the CPU interpreter runs the IR and
/// implements none of them, so a CPU run with an experiment set would check unmodified kernels: refused.
pub fn refuse_experiments_on_cpu(who: &str) -> anyhow::Result<()> {
    let xp = k3k::codegen::experiments()?;
    anyhow::ensure!(
        xp.is_empty(),
        "{}={} is set, but {who} runs the IR on the CPU, which implements no timing experiment (they change the \
         CUDA prelude only); unset it, or use --backend cuda",
        k3k::codegen::EXPERIMENT_ENV,
        xp.join(",")
    );
    Ok(())
}

pub fn executor(b: Backend) -> anyhow::Result<Executor> {
    Ok(match b {
        Backend::Cpu => {
            refuse_experiments_on_cpu("check --backend cpu")?;
            Executor::Cpu
        }
        Backend::Cuda => Executor::Gpu(Box::new(GpuExec::new(Gpu::open(0)?))),
        Backend::Auto => match Gpu::open(0) {
            Ok(g) => Executor::Gpu(Box::new(GpuExec::new(g))),
            Err(e) => {
                refuse_experiments_on_cpu("check --backend auto (no GPU: the CPU interpreter)")?;
                eprintln!("no GPU ({e}); checking on the CPU interpreter");
                Executor::Cpu
            }
        },
    })
}

/// Check `cases` random problems of every selected operator.
/// Which problems to check.
#[derive(Default)]
pub struct Selection<'a> {
    /// Only this case index of the random sequence.
    pub only: Option<usize>,
    /// A fixed problem instead of random ones.
    pub dims: Option<&'a str>,
}

pub fn check_ops(
    exec: &mut Executor,
    sel: &str,
    cases: usize,
    knobs: Option<&str>,
    seed: u64,
    which: &Selection<'_>,
) -> anyhow::Result<Vec<Summary>> {
    let mut out = vec![];
    let ops = super::select_ops(sel)?;
    let per_op = if which.only.is_some() { 1 } else { cases };
    let bar = Progress::new((ops.len() * per_op) as u64, "check");
    for op in ops {
        let explicit = knobs.is_some();
        let knobs = super::parse_knobs(op.as_ref(), knobs)?;
        let fixed = which.dims.map(|d| super::pick_preset(op.as_ref(), None, Some(d))).transpose()?;
        if matches!(exec, Executor::Gpu(_)) {
            bar.set_message(format!("{}: compiling", op.name()));
            bar.suspend(|| precompile(op.as_ref(), cases, &knobs, seed, which));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut s =
            Summary { op: op.name().into(), backend: exec.name(), cases: 0, failed: 0, skipped: 0, max_rel_err: 0.0 };
        for i in 0..cases {
            let mut preset = op.random_case(&mut rng);
            let data_seed: u64 = rng.random();
            if which.only.is_some_and(|o| i > o) {
                break;
            }
            if which.only.is_some_and(|o| o != i) {
                continue;
            }
            if let Some(p) = &fixed {
                preset = p.clone();
            }
            bar.set_message(format!("{} case {i}", op.name()));
            let inst = op.instance(&preset, data_seed)?;
            let plan = match inst.plan(&knobs) {
                Ok(plan) => plan,
                // Knobs given on the command line may not fit every drawn shape: that case is left out (and
                // counted); with the defaults a refusal is an error of the operator.
                Err(e @ k3k::ops::OpError::InvalidKnobs { .. }) if explicit => {
                    s.skipped += 1;
                    if std::env::var_os("K3K_VERBOSE").is_some() {
                        bar.eprintln(&format!("case {i}: {} skipped: {e}", inst.describe()));
                    }
                    bar.inc(1);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            s.cases += 1;
            if std::env::var_os("K3K_VERBOSE").is_some() {
                bar.eprintln(&format!("case {i}: {}", inst.describe()));
            }
            match exec.run(&plan).map_err(anyhow::Error::from).and_then(|o| Ok(inst.check(&o)?)) {
                Ok(r) if r.passed => s.max_rel_err = s.max_rel_err.max(r.max_rel_err),
                Ok(r) => {
                    s.failed += 1;
                    bar.eprintln(&format!(
                        "FAIL {} case {i} (--seed {seed}): {}: {} ({})",
                        op.name(),
                        inst.describe(),
                        r.detail,
                        r.scope
                    ));
                }
                Err(e) => {
                    s.failed += 1;
                    bar.eprintln(&format!("FAIL {} case {i} (--seed {seed}): {}: {e:#}", op.name(), inst.describe()));
                }
            }
            bar.inc(1);
        }
        if s.skipped > 0 {
            bar.eprintln(&format!(
                "{}: {} cases, {} failed, {} drawn cases skipped (the knobs do not fit their shape)",
                s.op, s.cases, s.failed, s.skipped
            ));
        } else {
            bar.eprintln(&format!("{}: {} cases, {} failed", s.op, s.cases, s.failed));
        }
        if s.cases == 0 && s.skipped > 0 {
            anyhow::bail!(
                "{}: the knobs `{knobs}` fit none of the {} drawn cases (each plan refused them); nothing was checked: \
                 draw more cases, pick a fitting shape with --dims, or other knobs",
                s.op,
                s.skipped
            );
        }
        out.push(s);
    }
    Ok(out)
}

/// Compile the kernels of the cases [`check_ops`] is about to run, drawn from the same random sequence, before
/// the run (see [`super::precompile`]). Cases whose instance or plan fails are left out here; the run reports
/// them.
fn precompile(op: &dyn Operator, cases: usize, knobs: &Knobs, seed: u64, which: &Selection<'_>) {
    use rayon::prelude::*;
    let t0 = std::time::Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut drawn = vec![];
    for i in 0..cases {
        if which.only.is_some_and(|o| i > o) {
            break;
        }
        let preset = op.random_case(&mut rng);
        let data_seed: u64 = rng.random();
        if which.only.is_none_or(|o| o == i) && which.dims.is_none() {
            drawn.push((preset, data_seed));
        }
    }
    let kernels = drawn
        .par_iter()
        .flat_map_iter(|(p, ds)| {
            op.instance(p, *ds)
                .ok()
                .and_then(|inst| inst.plan(knobs).ok())
                .map(|plan| plan.kernels().into_iter().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect();
    super::precompile(op.name(), kernels, t0, None);
}

pub fn print_table(rows: &[Summary]) {
    println!("{:<24} {:<10} {:>6} {:>8} {:>8} {:>12}", "op", "backend", "cases", "failed", "skipped", "max rel err");
    for r in rows {
        println!(
            "{:<24} {:<10} {:>6} {:>8} {:>8} {:>12.3e}",
            r.op, r.backend, r.cases, r.failed, r.skipped, r.max_rel_err
        );
    }
}

/// The most cases `check` draws per operator.
pub const MAX_CASES: usize = 1_000_000;

/// Refuse arguments that cannot run before anything opens the GPU: no cases, an unknown operator, knobs or dims
/// the operators refuse.
pub fn validate(sel: &str, cases: usize, knobs: Option<&str>, dims: Option<&str>) -> anyhow::Result<()> {
    if cases == 0 {
        anyhow::bail!("--cases: must be at least 1 (0 would check nothing)");
    }
    if cases > MAX_CASES {
        anyhow::bail!("--cases: at most {MAX_CASES} per operator");
    }
    for op in super::select_ops(sel)? {
        super::parse_knobs(op.as_ref(), knobs)?;
        if let Some(d) = dims {
            super::pick_preset(op.as_ref(), None, Some(d))?;
        }
    }
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    validate(&a.op, a.cases, a.knobs.as_deref(), a.dims.as_deref())?;
    if let Some(o) = a.only
        && o >= a.cases
    {
        anyhow::bail!("--only {o}: past the {} case(s) of --cases", a.cases);
    }
    let seed = a.seed.unwrap_or_else(|| rand::rng().random());
    println!("k3k check: seed {seed}");
    let mut exec = executor(a.backend)?;
    let which = Selection { only: a.only, dims: a.dims.as_deref() };
    let rows = check_ops(&mut exec, &a.op, a.cases, a.knobs.as_deref(), seed, &which)?;
    print_table(&rows);
    Ok(if rows.iter().any(|r| r.failed > 0) { 1 } else { 0 })
}
