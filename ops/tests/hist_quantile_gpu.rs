//! `hist_quantile` on GPU 0, only with `K3K_GPU=1` (no-ops otherwise):
//! - random and edge cases of both operators at several knob points pass the same checks as on the CPU;
//! - per-launch timing of the QB presets (each step alone on resident buffers, L2 flushed), printed with the
//!   bandwidth on score bytes, so the alpha / histogram / locate split is visible:
//!   `K3K_GPU=1 cargo test --release -p k3k-ops --test hist_quantile_gpu -- --nocapture --test-threads 1`
use k3k_ops::hist_quantile::*;
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::{Executor, GpuExec, Plan};
use k3k_runtime::{Gpu, TimingOptions, median};
use rand::{Rng, SeedableRng, rngs::StdRng};

fn gpu() -> Option<GpuExec> {
    if !std::env::var("K3K_GPU").is_ok_and(|v| v == "1") {
        eprintln!("K3K_GPU is not 1: skipped");
        return None;
    }
    Some(GpuExec::new(Gpu::open(0).unwrap_or_else(|e| panic!("K3K_GPU=1 but no GPU: {e}"))))
}

#[test]
fn gpu_cases_pass_checks() {
    let Some(g) = gpu() else { return };
    let mut ex = Executor::Gpu(Box::new(g));
    let seed: u64 = rand::rng().random();
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let d = default_knobs();
    let knob_sets = [
        d.clone(),
        d.clone().with("MERGE", "atomic"),
        d.clone().with("AW", 4i64).with("HT", 256i64).with("HU", 4i64),
        // The earlier paths (shared-memory rank alpha, expert-row histograms) and the other flush tilings.
        d.clone().with("ASEL", "rank").with("HLAYOUT", "rows").with("ABPS", 6i64),
        d.clone().with("HFX", 32i64).with("AW", 1i64),
        d.clone().with("PPACK", "packed").with("HBLOCKS", 792i64),
        d.clone().with("ATPW", 2i64).with("ABPS", 3i64),
        d.clone().with("HFX", 4i64).with("HT", 1024i64).with("HU", 4i64).with("HKB", 132i64),
        d.clone().with("ASEL", "ring").with("LU", 4i64),
        d.clone().with("ASEL", "ring").with("AW", 7i64).with("ASTAGES", 2i64).with("PPACK", "packed").with("LU", 8i64),
        d.with("ASEL", "ring").with("AW", 3i64).with("ASTAGES", 4i64).with("MERGE", "atomic"),
    ];
    let ops: [Box<dyn Operator>; 2] = [Box::new(HistQuantileQb), Box::new(HistQuantileColumn)];
    for op in &ops {
        let mut presets: Vec<Preset> = (0..30).map(|_| op.random_case(&mut rng)).collect();
        // Mid-sized problems: many blocks, several chunks, chunk tails.
        if op.name() == OP_QB {
            for (t, e, k, b, two) in [(5000, 896, 16, 1024, 1), (70001, 256, 8, 4096, 0), (3000, 1024, 32, 512, 1)] {
                presets.push(Preset::new("mid", &[("T", t), ("E", e), ("k", k), ("B", b), ("two", two)]));
            }
        } else {
            presets.push(Preset::new("mid", &[("T", 70001), ("E", 300), ("B", 1000), ("two", 1)]));
        }
        for p in &presets {
            for kn in &knob_sets {
                let inst = op.instance(p, rng.random()).unwrap();
                let plan = inst.plan(kn).unwrap();
                let out = ex.run(&plan).unwrap_or_else(|e| panic!("{}: {e}", inst.describe()));
                let r = inst.check(&out).unwrap();
                assert!(r.passed, "seed {seed} {} knobs {kn}: {} ({})", inst.describe(), r.detail, r.scope);
            }
        }
    }
}

#[test]
fn gpu_step_times() {
    let Some(mut g) = gpu() else { return };
    let opts = TimingOptions { warmup: 3, reps: 20, flush_l2: true, ..Default::default() };
    let d = default_knobs();
    // `K3K_HQ_PRESET=T262144` times only the presets whose name contains it.
    let only = std::env::var("K3K_HQ_PRESET").unwrap_or_default();
    for p in HistQuantileQb.bench_presets().into_iter().filter(|p| p.name.contains(only.as_str())) {
        let inst = HistQuantileQb.instance(&p, 1).unwrap();
        // The default of 2026-12-01 (serial locate loads) and the kernels of 2026-11-29.
        let s3 = d.clone().with("LU", 1i64);
        let old = d.clone().with("ASEL", "rank").with("HLAYOUT", "rows").with("ABPS", 6i64).with("LU", 1i64);
        let packed = d.clone().with("PPACK", "packed");
        let ring = d.clone().with("ASEL", "ring");
        let ring7 = ring.clone().with("AW", 7i64).with("ASTAGES", 2i64);
        for kn in [
            d.clone(),
            s3,
            d.clone().with("MERGE", "atomic"),
            packed.clone(),
            old,
            ring7.clone().with("ABPS", 4i64).with("MERGE", "atomic"),
            ring7.with("ABPS", 4i64).with("PPACK", "packed").with("LU", 8i64),
            ring.with("AW", 7i64).with("ASTAGES", 3i64).with("ABPS", 2i64).with("MERGE", "atomic"),
        ] {
            let plan = inst.plan(&kn).unwrap();
            let dev = g.upload(&plan).unwrap();
            g.launch_all(&plan, &dev).unwrap();
            g.gpu.sync().unwrap();
            let out = g.download(&plan, &dev).unwrap();
            let r = k3k_ops::op::Instance::check(inst.as_ref(), &out).unwrap();
            let score_bytes = inst.work().bytes;
            let total = median(&g.time(&plan, &dev, opts).unwrap());
            eprintln!(
                "{} [{kn}]: total {total:.4} ms ({:.0} GB/s of score bytes), check {}",
                p.name,
                score_bytes / total / 1e6,
                if r.passed { "ok" } else { &r.detail }
            );
            for s in &plan.steps {
                let one = Plan { buffers: vec![], steps: vec![s.clone()], ..Default::default() };
                let ms = median(&g.time(&one, &dev, opts).unwrap());
                eprintln!("  {:<56} {ms:.4} ms  ({:.0} GB/s of score bytes)", s.kernel.name, score_bytes / ms / 1e6);
            }
        }
    }
}
