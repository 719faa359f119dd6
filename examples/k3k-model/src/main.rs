//! An example model crate that uses k3k only through `k3k-build`: `build.rs` picks the operators, shapes and
//! GPU; this program includes the generated launchers and composes one LatentMoE layer and one attention block
//! (3 KDA + 1 gated MLA, prefill then decode) from them.
//!
//! Without a GPU it checks that every kernel is embedded and exits 0. On a GPU it runs both, checks every op
//! and the composed outputs against the CPU reference (`k3k-reference`, f64), prints per-op GPU times, and
//! exits 1 if any check failed.
//!
//! ```text
//! cargo run --release -p k3k-model            # on the GPU machine: LD_LIBRARY_PATH=/usr/local/cuda/lib64
//! ```

mod attn;
mod config;
mod host;
mod moe;

/// The launchers `build.rs` generated.
mod kernels {
    include!(concat!(env!("OUT_DIR"), "/k3k_kernels.rs"));
}

use k3k_build::rt::Gpu;
use std::process::ExitCode;

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
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            println!("no GPU found ({e}); the kernels are embedded and verified, nothing to run");
            return ExitCode::SUCCESS;
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
    let run = moe::run(&gpu, &mut rep, seed).and_then(|()| attn::run(&gpu, &mut rep, seed ^ 0xa77e));
    rep.print();
    if let Err(e) = run {
        eprintln!("k3k-model: run failed: {e}");
        return ExitCode::FAILURE;
    }
    let failed = rep.failures();
    println!("seed {seed}; {:.1} s; {} checks, {failed} failed", t0.elapsed().as_secs_f64(), rep.rows.len());
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
