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
    k3k_ir::hash::hash_str(&format!("{CODEGEN_VERSION}|{CACHE_FORMAT}|{arch}|{nv}|{src}"))
}

/// Render, compile (and optionally assemble) a kernel, using the cache.
pub fn build(kernel: &Kernel, opts: BuildOptions) -> Result<Arc<CompiledModule>, CodegenError> {
    let src = render(kernel)?;
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
