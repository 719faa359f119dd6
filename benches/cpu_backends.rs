//! The two CPU backends of the IR side by side on the same problems: the interpreter (the reference semantics,
//! every global access bounds-checked) and the Cranelift JIT (`--backend cpu-jit`, with the interpreter for any
//! kernel it does not lower). Their speed sets how many cases `k3k fuzz` and the tests check per second without a
//! GPU. Per operator: one random case of the fuzzer's distribution (fixed seed), the operator's default knobs; the
//! JIT's compile is cached by IR hash, so the timed runs are executions only (its compile is timed apart, once per
//! kernel). Before timing, both backends run the plan once and must agree bit for bit.
//!
//! `cargo bench --bench cpu_backends` (`-- kda` etc. to pick operators).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use k3k_codegen::cpu::jit;
use k3k_fuzz::runner::Backend;
use k3k_fuzz::{DiffBackend, JitBackend};
use k3k_ops::plan::{Executor, Plan};
use k3k_ops::registry;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let mut plans: Vec<(String, Plan)> = Vec::new();
    for op in registry::all() {
        let case = op.random_case(&mut StdRng::seed_from_u64(7));
        let inst = op.instance(&case, 11).expect("a random case builds");
        let plan = inst.plan(&op.default_knobs()).expect("the default knobs plan it");
        // Both backends agree bit for bit (the fuzzer's jit-diff), and the result passes the f64 check.
        let out = DiffBackend::default().run(&plan).expect("JIT == interpreter");
        let report = inst.check(&out).expect("checkable");
        assert!(report.passed, "{}: {}", op.name(), report.detail);
        plans.push((format!("{} {}", op.name(), inst.describe()), plan));
    }

    let mut g = c.benchmark_group("JIT compile (per plan, uncached)");
    g.sample_size(10);
    for (name, plan) in &plans {
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                for k in plan.kernels() {
                    // Kernels the JIT does not lower run on the interpreter; nothing to compile for them.
                    if jit::supports(k).is_ok() {
                        black_box(jit::compile(k).expect("lowers"));
                    }
                }
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("run a plan");
    g.sample_size(10);
    for (name, plan) in &plans {
        g.bench_function(BenchmarkId::new("interpreter", name), |b| {
            b.iter(|| black_box(Executor::Cpu.run(black_box(plan)).expect("runs")))
        });
        let mut jit = JitBackend::default();
        g.bench_function(BenchmarkId::new("jit", name), |b| {
            b.iter(|| black_box(jit.run(black_box(plan)).expect("runs")))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
