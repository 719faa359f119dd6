//! Command-line interface: one module per command.

mod bench;
mod check;
mod doctor;
mod emit;
mod fingerprint;
mod fuzz;
mod list;
mod progress;
mod report;
mod results;
mod run;
mod tune;
mod tune_glue;
mod worker;

use clap::{Parser, Subcommand};
use k3k::ops::op::{Operator, Preset};

/// k3k compiles the Kimi K3 operators from a tile IR to CUDA (NVRTC -> PTX), checks every kernel against an
/// f64 CPU reference, autotunes tile shapes per GPU and benchmarks against the peers a user would pick.
#[derive(Parser, Debug)]
#[command(name = "k3k", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// The main job: on a GPU, check, tune and benchmark every operator and report; without one, compile every
    /// kernel with NVRTC + ptxas and check every operator on the CPU interpreter.
    Run(run::Args),
    /// List operators, their knobs (with meaning and values), defaults and benchmark presets.
    List(list::Args),
    /// Print one stage of the pipeline for an operator's kernels: the IR, CUDA C, PTX or SASS.
    Emit(emit::Args),
    /// Print the IR and rendered-CUDA hashes of operators' kernels (default knobs, or every knob point), to
    /// check that a refactor leaves every kernel as it was: `diff` two outputs.
    Fingerprint(fingerprint::Args),
    /// Compile a CUDA C file with k3k's NVRTC options (debugging aid for hand-edited `emit --emit cuda` output).
    #[command(hide = true)]
    Nvrtc(emit::NvrtcArgs),
    /// Report what this machine offers: GPU, driver, NVRTC, ptxas, and which results files would apply.
    Doctor(doctor::Args),
    /// Run fresh random problems (edge sizes included) on the GPU or the CPU interpreter against the f64 reference.
    Check(check::Args),
    /// Differential fuzzing against the f64 reference (proptest strategies, shrinking, replayable seeds,
    /// regressions in proptest-regressions/), with a per-operator table of cases and mismatches.
    Fuzz(fuzz::Args),
    /// Time the benchmark presets on the GPU, check each run, write results/bench/<gpu>/<op>.{json,md}.
    Bench(bench::Args),
    /// Tune each operator's knobs on this GPU (child-process workers, resumable, shardable) into results/.
    Tune(tune::Args),
    /// Work with tuning results files (merge shards).
    Results(results::Args),
    /// Render the benchmark reports as results/SUMMARY.md and an SVG roofline chart.
    Report(report::Args),
    /// The measuring child process of `k3k tune` (JSON lines on stdin/stdout).
    #[command(hide = true)]
    Worker(worker::Args),
}

/// Run a parsed command; returns the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    // An unknown `K3K_EXPERIMENT` name is refused whatever the command and backend (`doctor` reports it).
    if !matches!(cli.cmd, Cmd::Doctor(_)) {
        k3k::codegen::experiments()?;
    }
    match cli.cmd {
        Cmd::Run(a) => run::run(a),
        Cmd::List(a) => list::run(a),
        Cmd::Emit(a) => emit::run(a),
        Cmd::Nvrtc(a) => emit::run_nvrtc(a),
        Cmd::Fingerprint(a) => fingerprint::run(a),
        Cmd::Doctor(a) => doctor::run(a),
        Cmd::Check(a) => check::run(a),
        Cmd::Fuzz(a) => fuzz::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Tune(a) => tune::run(a),
        Cmd::Results(a) => results::run(a),
        Cmd::Report(a) => report::run(a),
        Cmd::Worker(a) => worker::run(a),
    }
}

/// Operators selected by `--op` (see [`k3k::input::select_ops`]: an exact name, a family, or `all`).
pub fn select_ops(sel: &str) -> anyhow::Result<Vec<Box<dyn Operator>>> {
    k3k::input::select_ops(sel)
}

/// `--knobs k=v,...` on top of `op`'s defaults, checked against its knob space ([`k3k::input::parse_knobs`]).
pub fn parse_knobs(op: &dyn Operator, s: Option<&str>) -> anyhow::Result<k3k::ir::Knobs> {
    k3k::input::parse_knobs(op, s)
}

/// A preset by name, or from `--dims k=v,...` (checked: [`k3k::input::parse_dims`]), or the operator's first
/// benchmark preset.
pub fn pick_preset(op: &dyn Operator, name: Option<&str>, dims: Option<&str>) -> anyhow::Result<Preset> {
    if let Some(d) = dims {
        return k3k::input::parse_dims(op, d);
    }
    let presets = op.bench_presets();
    let p = match name {
        None => presets.into_iter().next().ok_or_else(|| anyhow::anyhow!("{} has no presets", op.name()))?,
        Some(n) => presets.into_iter().find(|p| p.name == n.trim()).ok_or_else(|| {
            anyhow::anyhow!(
                "{} has no preset `{n}`; presets: {}",
                op.name(),
                op.bench_presets().iter().map(|p| format!("`{}`", p.name)).collect::<Vec<_>>().join(", ")
            )
        })?,
    };
    op.check_dims(&p)?;
    Ok(p)
}

/// Compile (NVRTC, and ptxas to CUBIN where it is found; all cores) the distinct kernels among `kernels` into the module cache, so that a GPU run of
/// `op`'s cases loads them from there instead of compiling one variant per case. A kernel that fails to compile
/// here fails again, and is reported, in its case. `since`: when collecting the kernels began (for the log).
/// `deadline`: no compile starts after it (the rest compile on first use, inside the run's own budget). Returns
/// how many variants were compiled and how many were left for first use.
pub fn precompile(
    op: &str,
    kernels: Vec<k3k::ir::Kernel>,
    since: std::time::Instant,
    deadline: Option<std::time::Instant>,
) -> (usize, usize) {
    use rayon::prelude::*;
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<_> = kernels.into_iter().filter(|k| seen.insert(k3k::ir::stable_hash(k))).collect();
    let bar = progress::Progress::new(unique.len() as u64, format!("{op}: compiling"));
    let outcomes: Vec<Option<bool>> = unique
        .par_iter()
        .map(|k| {
            let late = deadline.is_some_and(|d| std::time::Instant::now() >= d);
            let built = (!late).then(|| k3k::codegen::build(k, k3k::codegen::BuildOptions::for_loading()).is_ok());
            bar.inc(1);
            built
        })
        .collect();
    drop(bar);
    let built = outcomes.iter().filter(|o| **o == Some(true)).count();
    let left = outcomes.iter().filter(|o| o.is_none()).count();
    let note =
        if left > 0 { format!(" ({left} left for first use: the precompile deadline passed)") } else { String::new() };
    eprintln!(
        "{op}: precompiled {built} of {} kernel variants in {:.1}s{note}",
        unique.len(),
        since.elapsed().as_secs_f64()
    );
    (built, left)
}

#[cfg(test)]
mod tests {
    use k3k::ir::{Access, DType, Expr, KernelBuilder};
    use std::time::Instant;

    #[test]
    fn precompile_starts_no_compile_after_its_deadline() {
        let mut b = KernelBuilder::new("precompile_probe", 32);
        let n = b.dim("N");
        let y = b.tensor("y", DType::F32, &[n], Access::Write);
        b.threads(|b| b.store_scalar(y, Expr::thread_idx(), 1.0f64));
        let k = b.finish().unwrap();
        // A deadline already behind: nothing compiles, the one distinct variant (twice listed) is left.
        let past = Instant::now();
        assert_eq!(super::precompile("probe", vec![k.clone(), k.clone()], Instant::now(), Some(past)), (0, 1));
        // No deadline: it compiles (NVRTC from `scripts/install-cuda-tools.sh`, as every compile test).
        assert_eq!(super::precompile("probe", vec![k], Instant::now(), None), (1, 0));
    }
}
