//! CPU cost of k3k's compile pipeline per operator, the work in front of every kernel a tune times, a
//! `build.rs` embeds or `k3k fingerprint` hashes: the operator's builder (IR tile program at its default knobs and
//! first benchmark preset), validation + the stable hash, and rendering to CUDA C; then NVRTC on the same source
//! (the step these are measured against: a tuner candidate or a build pays it once per kernel), where libnvrtc is
//! found (`scripts/install-cuda-tools.sh`), else that group is skipped with a note. Also the tuner's planning of a
//! preset's candidates (the knob-space walk and the structural pruning, before compiling).
//!
//! `cargo bench --bench compile` (`-- 'render'` etc. to pick a group).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use k3k_codegen::{ARCH, nvrtc, render, toolchain};
use k3k_ir::{Kernel, stable_hash, validate};
use k3k_ops::registry;
use std::hint::black_box;

/// An operator's name, a closure that builds its kernels again, and the kernels it built.
type Case = (String, Box<dyn Fn() -> Vec<Kernel>>, Vec<Kernel>);

/// Each operator with its first benchmark preset and its kernels at the default knobs.
fn cases() -> Vec<Case> {
    registry::all()
        .into_iter()
        .filter_map(|op| {
            let preset = op.bench_presets().into_iter().next()?;
            let knobs = op.default_knobs();
            let kernels = op.kernels(&preset, &knobs).ok()?;
            let name = op.name().to_string();
            let build: Box<dyn Fn() -> Vec<Kernel>> =
                Box::new(move || op.kernels(&preset, &knobs).expect("built once already"));
            Some((name, build, kernels))
        })
        .collect()
}

/// A group timing `f` on every kernel of each case (one sample: all of a case's kernels).
fn each_kernel(c: &mut Criterion, group: &str, cases: &[Case], f: impl Fn(&Kernel)) {
    let mut g = c.benchmark_group(group);
    g.sample_size(20);
    for (name, _, kernels) in cases {
        g.throughput(Throughput::Elements(kernels.len() as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| kernels.iter().for_each(|k| f(black_box(k))))
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    let cases = cases();
    assert!(!cases.is_empty(), "every operator has a benchmark preset");

    let mut g = c.benchmark_group("build IR");
    g.sample_size(20);
    for (name, build, kernels) in &cases {
        g.throughput(Throughput::Elements(kernels.len() as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| b.iter(|| black_box(build())));
    }
    g.finish();

    each_kernel(c, "validate + hash", &cases, |k| {
        validate(k).expect("the operator's kernels validate");
        black_box(stable_hash(k));
    });
    each_kernel(c, "render CUDA", &cases, |k| {
        black_box(render(k).expect("the operator's kernels render"));
    });

    // The tuner's planning before any compile: walk the knob space in its fixed order and keep the first 60 points
    // whose kernels build for the preset (`k3k tune` then compiles those in parallel).
    let mut g = c.benchmark_group("tune: plan 60 candidates (no compile)");
    g.sample_size(10);
    for op in registry::all() {
        let Some(preset) = op.bench_presets().into_iter().next() else { continue };
        g.bench_function(BenchmarkId::from_parameter(op.name()), |b| {
            b.iter(|| black_box(k3k::tuning::plan_candidates(op.as_ref(), &preset, 60, false, &[])))
        });
    }
    g.finish();

    // NVRTC on the first kernel of each operator (one compile per sample: seconds each, so few samples).
    if let Err(e) = toolchain::load_nvrtc() {
        eprintln!("NVRTC group skipped: {e}");
        return;
    }
    let mut g = c.benchmark_group("NVRTC to PTX");
    g.sample_size(10);
    for (name, _, kernels) in &cases {
        let k = &kernels[0];
        let src = render(k).expect("renders");
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| black_box(nvrtc::compile_ptx(&k.name, black_box(&src), ARCH).expect("compiles")))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
