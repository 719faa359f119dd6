//! `k3k doctor`.

use k3k::environment::{Environment, gpu_slug};
use k3k::ops::registry;
use std::path::PathBuf;

/// Arguments of `k3k doctor`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The results folder to look in.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
}

fn line(what: &str, r: &Result<String, String>) {
    match r {
        Ok(v) => println!("  [ok]      {what:<14} {v}"),
        Err(e) => println!("  [missing] {what:<14} {e}"),
    }
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let env = Environment::probe();
    println!("k3k {} (commit {})", env!("CARGO_PKG_VERSION"), k3k::bench::COMMIT);
    line("NVRTC", &env.nvrtc);
    line("NVRTC version", &env.nvrtc_version);
    line("ptxas", &env.ptxas);
    match &env.gpu {
        Ok(g) => {
            println!(
                "  [ok]      GPU            {} (sm_{}{}, {} SMs, {:.0} GiB, {} KiB shared/block, driver {}), {} visible",
                g.name,
                g.compute_capability.0,
                g.compute_capability.1,
                g.sm_count,
                g.memory_bytes as f64 / (1u64 << 30) as f64,
                g.shared_optin_bytes / 1024,
                g.driver_version,
                env.gpu_count
            );
            let slug = gpu_slug(&g.name);
            for op in registry::all() {
                let p = a.results.join(&slug).join(format!("{}.json", op.name()));
                println!(
                    "            {:<22} {}",
                    op.name(),
                    if p.is_file() {
                        format!("tuned configs from {}", p.display())
                    } else {
                        format!("no {} (default knobs)", p.display())
                    }
                );
            }
        }
        Err(e) => println!("  [missing] GPU            {e}"),
    }
    let ok = env.nvrtc.is_ok() && env.ptxas.is_ok();
    println!(
        "{}",
        match (ok, env.gpu.is_ok()) {
            (true, true) => "ready: compile, check, tune and bench on the GPU",
            (true, false) => "no GPU found: k3k can compile, assemble and check every kernel on the CPU",
            (false, _) => "compiler tools missing: run scripts/install-cuda-tools.sh",
        }
    );
    Ok(if ok { 0 } else { 1 })
}
