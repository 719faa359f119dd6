//! An example model crate that uses k3k only through `k3k-build`: `build.rs` picks the operators, shapes and
//! GPU; this program includes the generated launchers and composes one LatentMoE layer and one attention block
//! (3 KDA + 1 gated MLA, prefill then decode) from them.
//!
//! It runs in its own CUDA world, as an engine would: it creates the context handle and a stream with cudarc,
//! and every k3k launch goes to that stream (k3k's `Gpu` is made from it, for uploads and timing only).
//!
//! Without a GPU it checks that every kernel is embedded and exits 0. On a GPU it runs both, then a decode step
//! of three KDA layers on the model's own buffers, eagerly and captured as a CUDA graph (`graph.rs`); it checks
//! every op and the composed outputs against the CPU reference (`k3k-reference`, f64), prints per-op GPU times,
//! and exits 1 if any check failed.
//!
//! ```text
//! cargo run --release -p k3k-model            # on the GPU machine: LD_LIBRARY_PATH=/usr/local/cuda/lib64
//! ```

mod attn;
mod config;
mod dense;
mod graph;
mod host;
mod moe;
mod varlen;

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
    let run = moe::run(&gpu, &mut rep, seed)
        .and_then(|()| attn::run(&gpu, &mut rep, seed ^ 0xa77e))
        .and_then(|()| varlen::run(&stream, &mut rep, seed ^ 0x7a1e))
        .and_then(|()| dense::run(&stream, &mut rep, seed ^ 0xde75))
        .and_then(|()| graph::run(&stream, &mut rep, seed ^ 0x6a4f));
    rep.print();
    if let Err(e) = run {
        eprintln!("k3k-model: run failed: {e}");
        return ExitCode::FAILURE;
    }
    let failed = rep.failures();
    println!("seed {seed}; {:.1} s; {} checks, {failed} failed", t0.elapsed().as_secs_f64(), rep.rows.len());
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
