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

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    a.results = k3k::paths::resolve(&a.results, "--results")?;
    let env = Environment::probe();
    println!("k3k {} (commit {})", env!("CARGO_PKG_VERSION"), k3k::bench::COMMIT);
    let mut set: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.to_string_lossy().into_owned();
            k.starts_with("K3K_").then(|| (k, v.to_string_lossy().into_owned()))
        })
        .collect();
    set.sort();
    if set.is_empty() {
        println!("  environment: no K3K_* variable set (README.md, \"Environment variables\", lists them)");
    } else {
        println!("  environment (K3K_* variables set):");
        for (k, v) in &set {
            println!("            {k}={v}");
        }
    }
    scheduler();
    if let Err(e) = k3k::codegen::experiments() {
        println!("  [error]   {e}");
    }
    if let Err(e) = k3k::codegen::ptxas::ptxas_timeout() {
        println!("  [error]   {e}");
    }
    if let Err(e) = k3k::codegen::nvrtc::nvrtc_timeout() {
        println!("  [error]   {e}");
    }
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
    let corrupt = results_files(&a.results, env.gpu.as_ref().ok().map(|g| gpu_slug(&g.name)).as_deref());
    let ok = env.nvrtc.is_ok() && env.ptxas.is_ok();
    println!(
        "{}",
        match (ok, env.gpu.is_ok()) {
            (true, true) => "ready: compile, check, tune and bench on the GPU",
            (true, false) => "no GPU found: k3k can compile, assemble and check every kernel on the CPU",
            (false, _) => "compiler tools missing: run scripts/install-cuda-tools.sh",
        }
    );
    if corrupt > 0 {
        println!("{corrupt} results file(s) cannot be read (see above): k3k would move them aside on first use");
    }
    Ok(if ok && corrupt == 0 { 0 } else { 1 })
}

/// The job scheduler variables set (a Slurm array task's, a Kubernetes Indexed Job's; `K3K_SHARD_COUNT` is listed
/// with the `K3K_*` ones) and the shard `k3k tune` would take from them without `--shard`; nothing when none is set.
fn scheduler() {
    use k3k::tuner::scheduler::{SCHEDULER_VARS, SHARD_COUNT_VAR, choose_from_process_env};
    let set: Vec<String> = SCHEDULER_VARS
        .iter()
        .filter(|k| **k != SHARD_COUNT_VAR)
        .filter_map(|k| std::env::var_os(k).map(|v| format!("{k}={}", v.to_string_lossy())))
        .collect();
    if !set.is_empty() {
        println!("  scheduler: {}", set.join(" "));
    } else if std::env::var_os(SHARD_COUNT_VAR).is_none() {
        return;
    }
    match choose_from_process_env(None, None) {
        Ok(c) => println!("  tune:     without --shard, {c}"),
        Err(e) => println!("  [error]   tune without --shard: {e}"),
    }
}

/// Parse every results file under `root` (`<gpu>/<op>.json`) and say what it holds; the folder of this GPU
/// (`slug`) is marked. Returns how many files could not be read. Nothing is moved.
fn results_files(root: &std::path::Path, slug: Option<&str>) -> usize {
    let store = k3k::tuner::ResultsStore::open_read_only(root);
    let files = match store.list() {
        Ok(f) => f,
        Err(e) => {
            println!("  [error]   results        {e}");
            return 1;
        }
    };
    if files.is_empty() {
        println!("  results:  no results files under {}", root.display());
        return 0;
    }
    println!("  results files under {}:", root.display());
    let mut bad = 0;
    for (gpu, op) in files {
        let path = root.join(&gpu).join(format!("{op}.json"));
        let mark = if slug == Some(gpu.as_str()) { " (this GPU)" } else { "" };
        match k3k::tuner::read_results_file(&path) {
            Ok(f) => {
                let winners = f.entries.iter().filter(|e| e.winner.is_some()).count();
                let current = f
                    .entries
                    .iter()
                    .filter(|e| e.winner.is_some() && e.key.codegen_version == k3k::codegen::CODEGEN_VERSION)
                    .count();
                println!(
                    "  [ok]      {:<22} {}{mark}: {} shape(s), {winners} tuned, {current} from this codegen version",
                    op,
                    path.display(),
                    f.entries.len()
                );
            }
            Err(e) => {
                bad += 1;
                println!("  [corrupt] {op:<22} {e}");
            }
        }
    }
    bad
}
