//! `k3k run`: the main job.

use super::check::{Backend, check_ops, executor, print_table};
use super::progress::Progress;
use k3k::codegen::{BuildOptions, build};
use k3k::environment::Environment;
use k3k::ops::registry;
use rand::Rng;

/// Arguments of `k3k run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Random correctness cases per operator.
    #[arg(long, default_value_t = 20)]
    pub cases: usize,
    /// Results folder (benchmark reports go to `<results>/bench`).
    #[arg(long, default_value = "results")]
    pub results: std::path::PathBuf,
}

/// Compile and assemble every kernel of every benchmark preset at default knobs; returns failures (a build error,
/// spills beyond the operator's measured allowance, `Operator::known_spill_bytes`, or `wgmma` products that ptxas
/// serialized).
fn compile_all() -> anyhow::Result<usize> {
    println!("{:<72} {:>5} {:>8} {:>7} {:>8}", "kernel", "regs", "smem B", "spills", "nvrtc ms");
    let mut bad = 0;
    let mut seen = std::collections::HashSet::new();
    let mut kernels = vec![];
    for op in registry::all() {
        for p in op.bench_presets() {
            for k in op.kernels(&p, &op.default_knobs())? {
                if seen.insert(k3k::ir::stable_hash(&k)) {
                    kernels.push((op.known_spill_bytes(&k), k));
                }
            }
        }
    }
    let bar = Progress::new(kernels.len() as u64, "compile");
    for (known, k) in kernels {
        bar.set_message(k.name.clone());
        match build(&k, BuildOptions { assemble: true }) {
            Ok(m) => {
                let r = m.resources.clone().unwrap_or_default();
                let spill = r.spill_store_bytes + r.spill_load_bytes;
                let over = r.spills_over(known);
                if over || r.wgmma_serialized {
                    bad += 1;
                }
                // A spill within the operator's measured allowance is marked, not counted.
                let note = match (r.wgmma_serialized, spill > 0 && !over) {
                    (true, _) => " (wgmma serialized by ptxas)",
                    (false, true) => " (known)",
                    (false, false) => "",
                };
                bar.println(&format!(
                    "{:<72} {:>5} {:>8} {:>7} {:>8.0}{note}",
                    k.name,
                    r.registers,
                    k.shared_bytes(),
                    spill,
                    m.nvrtc_ms
                ));
            }
            Err(e) => {
                bad += 1;
                bar.println(&format!("{:<72} FAILED: {e}", k.name));
            }
        }
        bar.inc(1);
    }
    Ok(bad)
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    a.results = k3k::paths::resolve(&a.results, "--results")?;
    k3k::codegen::refuse_experiments("the main job")?;
    if a.cases == 0 {
        anyhow::bail!("--cases: must be at least 1 (0 would check nothing)");
    }
    let env = Environment::probe();
    if let Err(e) = &env.nvrtc {
        anyhow::bail!("{e}");
    }
    let seed: u64 = rand::rng().random();
    match &env.gpu {
        Err(why) => {
            println!("NO GPU FOUND ({why}).");
            println!(
                "Compiling every kernel with NVRTC + ptxas for sm_90a and checking every operator on the CPU interpreter.\n"
            );
            let bad = compile_all()?;
            println!();
            let mut exec = executor(Backend::Cpu)?;
            let rows = check_ops(&mut exec, "all", a.cases, None, seed, &Default::default())?;
            print_table(&rows);
            let failed = rows.iter().map(|r| r.failed).sum::<usize>();
            println!(
                "\nNo GPU: compiled {} (failures, spills beyond the known allowances or serialized wgmma: {bad}); CPU check seed {seed}: {} failures. Run on a GPU to tune and benchmark.",
                if bad == 0 { "every kernel" } else { "kernels" },
                failed
            );
            Ok(if bad + failed > 0 { 1 } else { 0 })
        }
        Ok(g) => {
            println!("GPU: {} ({} SMs)", g.name, g.sm_count);
            let mut exec = executor(Backend::Cuda)?;
            let rows = check_ops(&mut exec, "all", a.cases, None, seed, &Default::default())?;
            print_table(&rows);
            let failed: usize = rows.iter().map(|r| r.failed).sum();
            let k3k::ops::plan::Executor::Gpu(g) = exec else { unreachable!() };
            let mut g = *g;
            let store = k3k::tuner::ResultsStore::open_read_only(&a.results);
            let gpu_key =
                k3k::tuner::GpuKey::new(g.gpu.info.name.clone(), g.gpu.info.compute_capability, g.gpu.info.sm_count);
            let ops = registry::all();
            let bar = Progress::new(ops.iter().map(|op| op.bench_presets().len() as u64).sum(), "bench");
            for op in ops {
                // `bench_op_into` asks once per preset, as the preset starts: the bar counts the presets started.
                let knobs_for = |p: &k3k::ops::op::Preset| {
                    bar.set_message(format!("{}: {}", op.name(), p.name));
                    bar.inc(1);
                    vec![bar.suspend(|| k3k::tuning::tuned_knobs(&store, op.as_ref(), p, &gpu_key)).0]
                };
                match k3k::bench::bench_op_into(
                    &a.results.join("bench"),
                    &mut g,
                    op.as_ref(),
                    &op.bench_presets(),
                    &knobs_for,
                    Default::default(),
                    &Default::default(),
                    &mut |l| bar.println(l),
                ) {
                    Ok((path, note)) => {
                        bar.println(&format!("wrote {}", path.display()));
                        if let Some(note) = note {
                            bar.println(&format!("  {note}"));
                        }
                    }
                    Err(e) => bar.println(&format!("{}: benchmark failed: {e:#}", op.name())),
                }
            }
            drop(bar);
            let reports = k3k::report::load_reports(&a.results.join("bench"))?;
            std::fs::write(a.results.join("SUMMARY.md"), k3k::report::markdown(&reports))?;
            k3k::report::roofline_svg(&reports, &a.results.join("roofline.svg"))?;
            println!(
                "wrote {} (time the peers with scripts/peers.py and merge them with `k3k bench --merge-peers`; tune with `k3k tune`)",
                a.results.join("SUMMARY.md").display()
            );
            Ok(if failed > 0 { 1 } else { 0 })
        }
    }
}
