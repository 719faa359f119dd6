//! An example model crate that uses k3k only through `k3k-build`: `build.rs` picks the operators, shapes and
//! GPU; this program includes the generated launchers and runs one GPU's share of Kimi K3 at its real widths
//! (hidden 7168, 12 heads, latent 3584, 28 MXFP4 experts): a varlen prefill of six sequences (8192 tokens)
//! through 3 KDA layers, 1 gated MLA layer and 1 LatentMoE layer, then 32 decode steps of all six sequences,
//! each step captured once as a CUDA graph and replayed.
//!
//! It runs in its own CUDA world, as an engine would: it creates the context and a stream with cudarc, owns
//! every buffer (cudarc allocations), launches its own kernels (`engine.rs`: residual adds, routing, cache
//! appends) between k3k's on the same stream, and every k3k launch goes to that stream.
//!
//! Without a GPU it checks that every kernel is embedded and exits 0. On a GPU it checks every op against the
//! f64 reference (`k3k-reference`) on sampled rows, sequences and heads, prints per-op GPU times, the decode
//! step eager and as a graph, the host cost per launch, and a bucketed dense MXFP4 projection; it exits 1 if
//! any check failed.
//!
//! ```text
//! cargo run --release -p k3k-model            # on the GPU machine: LD_LIBRARY_PATH=/usr/local/cuda/lib64
//! ```

mod check;
mod config;
mod decode;
mod dense;
mod dev;
mod engine;
mod host;
mod model;
mod weights;

/// The launchers `build.rs` generated.
mod kernels {
    include!(concat!(env!("OUT_DIR"), "/k3k_kernels.rs"));
}

use k3k_build::rt::Gpu;
use k3k_build::rt::cudarc::driver::{CudaContext, CudaStream};
use std::process::ExitCode;
use std::sync::Arc;

/// The model's CUDA world: its context on GPU 0 and its own (non-default) stream.
fn own_stream() -> Result<Arc<CudaStream>, String> {
    if Gpu::count() == 0 {
        return Err("no CUDA driver or no GPU".into());
    }
    let ctx = CudaContext::new(0).map_err(|e| format!("{e:?}"))?;
    // The model orders all its work on its one stream, so cudarc's per-buffer events are not needed (and would
    // make a graph capture wait on events recorded outside it).
    // SAFETY: every buffer of this program is used on the one stream below.
    unsafe { ctx.disable_event_tracking() };
    ctx.new_stream().map_err(|e| format!("{e:?}"))
}

fn run(s: &Arc<CudaStream>, gpu: &Gpu, rep: &mut host::Report, seed: u64) -> host::Res<()> {
    let t0 = std::time::Instant::now();
    let mut k = model::Launchers::load(s, gpu)?;
    let w = weights::Weights::new(s, seed)?;
    println!("weights generated and uploaded in {:.1} s", t0.elapsed().as_secs_f64());
    let mut p = model::Prefill::new(s, &k, gpu, seed ^ 0x9e11)?;
    let mut cache = engine::Cache::new(s, &config::PREFILL_LENS)?;
    println!(
        "\nprefill: {} sequences {:?} ({} tokens), hidden {}, {} heads, 3 KDA + 1 gated MLA + 1 LatentMoE ({} MXFP4 \
         experts, top-{})",
        config::PREFILL_LENS.len(),
        config::PREFILL_LENS,
        config::PREFILL_TOKENS,
        config::HIDDEN,
        config::HEADS,
        config::EXPERTS,
        config::TOP_K
    );
    model::run(&mut k, s, gpu, &w, &mut p, &mut cache, rep)?;
    decode::run(&k, s, &w, &p, &mut cache, rep, seed ^ 0xdec0)?;
    dense::run(s, rep, seed ^ 0xde75)
}

fn main() -> ExitCode {
    let n = match kernels::verify_embedded() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("k3k-model: an embedded kernel is broken: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "k3k-model: {n} kernels embedded as {} for {}, all verified",
        kernels::EMBEDDED_AS,
        kernels::TARGET_GPUS.join(", ")
    );
    for k in kernels::ALL_KERNELS {
        let from = k.knobs_source.split(" (").next().unwrap_or_default();
        println!("  {:<64} {:<5} {from}", k.name.chars().take(64).collect::<String>(), k.code_kind());
    }
    let stream = match own_stream() {
        Ok(s) => s,
        Err(e) => {
            println!("no GPU found ({e}); the kernels are embedded and verified, nothing to run");
            return ExitCode::SUCCESS;
        }
    };
    let gpu = match Gpu::from_stream(stream.clone()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("k3k-model: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "GPU: {} (sm_{}{}, {} SMs, driver {})",
        gpu.info.name,
        gpu.info.compute_capability.0,
        gpu.info.compute_capability.1,
        gpu.info.sm_count,
        gpu.info.driver_version
    );
    let seed = std::env::var("K3K_MODEL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(2026);
    let mut rep = host::Report::default();
    let t0 = std::time::Instant::now();
    let result = run(&stream, &gpu, &mut rep, seed);
    rep.print();
    if let Err(e) = result {
        eprintln!("k3k-model: run failed: {e}");
        return ExitCode::FAILURE;
    }
    let failed = rep.failures();
    println!("seed {seed}; {:.1} s; {} checks, {failed} failed", t0.elapsed().as_secs_f64(), rep.rows.len());
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
