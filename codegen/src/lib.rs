//! # k3k-codegen: from IR to loadable GPU code (and a CPU interpreter of the same IR)
//!
//! Stages, each a plain function with an artifact you can dump (`k3k emit --emit ir|cuda|ptx|sass`):
//! 1. [`cuda::render`]: validated IR -> self-contained CUDA C (a generic device prelude + the kernel);
//! 2. [`nvrtc::compile_ptx`]: CUDA C -> PTX through NVRTC (found by [`toolchain`], no toolkit needed);
//! 3. [`ptxas::assemble`]: PTX -> CUBIN + resource report (registers, shared memory, spills);
//! 4. [`cache`]: every stage's result keyed by source hash, arch, NVRTC version and codegen version.
//!
//! [`cpu`] executes the same IR on the host (the semantics the GPU code must match).

pub mod cache;
pub mod cpu;
pub mod cuda;
pub mod nvrtc;
pub mod ptxas;
pub mod tensor_map;
pub mod toolchain;

pub use cache::CompiledModule;
pub use cuda::render::{CODEGEN_VERSION, render};
pub use nvrtc::{ARCH, CompileError};
pub use ptxas::{PtxasError, Resources};
pub use toolchain::ToolchainError;

use k3k_ir::{IrError, Kernel};
use std::sync::Arc;

/// Anything that can go wrong between IR and a loadable module.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CodegenError {
    #[error(transparent)]
    Ir(#[from] IrError),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Ptxas(#[from] PtxasError),
    /// `K3K_EXPERIMENT` names no experiment of [`EXPERIMENTS`], or is set where it must not be.
    #[error("{EXPERIMENT_ENV}: {0}")]
    Experiment(String),
}

/// The environment variable of the timing experiments: `K3K_EXPERIMENT=NAME[,NAME...]` makes [`build`] define
/// `K3K_XP_<NAME>` at the top of every kernel it compiles, which switches on a block of the prelude that removes
/// one piece of a kernel's work on purpose, so that a timing of what is left says what bounds it (a
/// bottleneck decomposition without a profiler's replay). Such kernels compute wrong values: their checks fail,
/// and `k3k bench` keeps the time of a set that failed its check in the JSON but never reports it as a result. A bench report records the experiments it ran with and
/// `k3k bench --publish` refuses it; [`render`] (what the fingerprints hash) ignores the variable, and `k3k tune`,
/// `k3k run` and `k3k-build` refuse to run with it set.
pub const EXPERIMENT_ENV: &str = "K3K_EXPERIMENT";

/// The prelude's experiments, by name, with what each removes (all in `fp4_gemv`, the MXFP4 decode
/// kernel of `mxfp4_matmul` `PATH=gemv`, packed layout).
pub const EXPERIMENTS: [(&str, &str); 4] = [
    ("NOSCALE", "the bf16x2 multiply by the block scale (the decoded bits go to the tensor cores as they are)"),
    ("NODECODE", "the decode and the scale multiply (the raw words go to the tensor cores)"),
    ("NOMMA", "the mma.sync (its operands are still computed and summed into the output: 2 IADD3 per mma)"),
    ("NOMATH", "decode, scale and mma (the loads, the ring, the loop and the sum of NOMMA remain)"),
];

/// The experiments `K3K_EXPERIMENT` asks for (empty when unset or empty); an unknown name is an error.
pub fn experiments() -> Result<Vec<&'static str>, CodegenError> {
    std::env::var(EXPERIMENT_ENV).map_or(Ok(vec![]), |v| parse_experiments(&v))
}

/// The experiments a `K3K_EXPERIMENT` value names (comma-separated, any case); an unknown name is an error.
pub fn parse_experiments(v: &str) -> Result<Vec<&'static str>, CodegenError> {
    v.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            EXPERIMENTS.iter().map(|(name, _)| *name).find(|name| name.eq_ignore_ascii_case(n)).ok_or_else(|| {
                let known: Vec<&str> = EXPERIMENTS.iter().map(|(name, _)| *name).collect();
                CodegenError::Experiment(format!("unknown experiment `{n}` (known: {})", known.join(", ")))
            })
        })
        .collect()
}

/// `Err` naming `who` when `K3K_EXPERIMENT` asks for any experiment: what users get (built kernels, tuned
/// records, the main job's reports) is never made from modified kernels.
pub fn refuse_experiments(who: &str) -> Result<(), CodegenError> {
    let xp = experiments()?;
    if xp.is_empty() {
        return Ok(());
    }
    Err(CodegenError::Experiment(format!(
        "{} is set: timing experiments compute wrong values; {who} refuses to run with them (use `k3k bench`)",
        xp.join(",")
    )))
}

/// A rendered kernel with the experiments' defines in front (the source unchanged when there are none).
pub fn with_experiments(src: &str, experiments: &[&str]) -> String {
    let defines: String = experiments.iter().map(|n| format!("#define K3K_XP_{n} 1\n")).collect();
    format!("{defines}{src}")
}

/// How far to take a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildOptions {
    /// Also run ptxas (CUBIN + resource report). Needs ptxas; not needed to run on a GPU (the driver JITs PTX).
    pub assemble: bool,
}

impl BuildOptions {
    /// For loading onto a GPU: assemble to CUBIN when ptxas is found (the driver then loads machine code at
    /// once instead of JIT-compiling the PTX of every new variant, which made the GPU fuzz of the large kernels
    /// spend its time box in the driver), else PTX only. `K3K_LOAD_PTX=1` forces PTX (the driver's JIT).
    pub fn for_loading() -> Self {
        static ASSEMBLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let assemble = *ASSEMBLE.get_or_init(|| {
            std::env::var_os("K3K_LOAD_PTX").is_none_or(|v| v != "1") && toolchain::find_ptxas().is_ok()
        });
        BuildOptions { assemble }
    }
}

/// The format of a cached module's metadata, part of its key: 2 since the resources record whether ptxas serialized
/// the kernel's `wgmma` products (entries from before would read as not serialized).
const CACHE_FORMAT: u32 = 2;

/// The cache key of a kernel's generated source.
pub fn module_key(src: &str, arch: &str) -> String {
    let nv = toolchain::nvrtc_version().unwrap_or_else(|_| "none".into());
    let li = if nvrtc::lineinfo() { "|lineinfo" } else { "" };
    k3k_ir::hash::hash_str(&format!("{CODEGEN_VERSION}|{CACHE_FORMAT}|{arch}|{nv}{li}|{src}"))
}

/// Render, compile (and optionally assemble) a kernel, using the cache.
pub fn build(kernel: &Kernel, opts: BuildOptions) -> Result<Arc<CompiledModule>, CodegenError> {
    let src = with_experiments(&render(kernel)?, &experiments()?);
    // A bad time limit is an error even when the cache would answer (it is not silently ignored until a compile).
    nvrtc::nvrtc_timeout().map_err(CompileError::from)?;
    if opts.assemble {
        ptxas::ptxas_timeout().map_err(PtxasError::from)?;
    }
    let key = module_key(&src, ARCH);
    if let Some(m) = cache::get(&key, opts.assemble) {
        return Ok(m);
    }
    let out = nvrtc::compile_ptx(&kernel.name, &src, ARCH)?;
    let (cubin, resources) = if opts.assemble {
        let a = ptxas::assemble(&kernel.name, &out.ptx, ARCH)?;
        (Some(a.cubin), Some(a.resources))
    } else {
        (None, None)
    };
    Ok(cache::put(CompiledModule {
        kernel: kernel.name.clone(),
        key,
        ptx: out.ptx,
        cubin,
        resources,
        nvrtc_ms: out.millis,
        cached: false,
    }))
}
