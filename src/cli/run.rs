//! `k3k run`: the main job.

use super::check::{Backend, check_ops, executor, print_table};
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
    for op in registry::all() {
        for p in op.bench_presets() {
            for k in op.kernels(&p, &op.default_knobs())? {
                if !seen.insert(k3k::ir::stable_hash(&k)) {
                    continue;
                }
                match build(&k, BuildOptions { assemble: true }) {
                    Ok(m) => {
                        let r = m.resources.clone().unwrap_or_default();
                        let spill = r.spill_store_bytes + r.spill_load_bytes;
                        let known = op.known_spill_bytes(&k);
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
                        println!(
                            "{:<72} {:>5} {:>8} {:>7} {:>8.0}{note}",
                            k.name,
                            r.registers,
                            k.shared_bytes(),
                            spill,
                            m.nvrtc_ms
                        );
                    }
                    Err(e) => {
                        bad += 1;
                        println!("{:<72} FAILED: {e}", k.name);
                    }
                }
            }
        }
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
            for op in registry::all() {
                let knobs_for =
                    |p: &k3k::ops::op::Preset| vec![k3k::tuning::tuned_knobs(&store, op.as_ref(), p, &gpu_key).0];
                match k3k::bench::bench_op_into(
                    &a.results.join("bench"),
                    &mut g,
                    op.as_ref(),
                    &op.bench_presets(),
                    &knobs_for,
                    Default::default(),
                    &Default::default(),
                    &mut |l| println!("{l}"),
                ) {
                    Ok((path, note)) => {
                        println!("wrote {}", path.display());
                        if let Some(note) = note {
                            println!("  {note}");
                        }
                    }
                    Err(e) => println!("{}: benchmark failed: {e:#}", op.name()),
                }
            }
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
