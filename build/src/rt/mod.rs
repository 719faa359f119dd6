//! The run-time half: what the generated launchers in `OUT_DIR/k3k_kernels.rs` call.
//!
//! A launcher runs in the caller's CUDA world:
//! - **where**: any stream of the context the kernel was loaded in ([`AsStream`]: a cudarc [`CudaStream`], a
//!   raw `CUstream` behind [`RawStream`], or k3k's own [`Gpu`]);
//! - **on what**: device memory the caller owns ([`View`] / [`ViewMut`] over cudarc slices and views, or a raw
//!   device pointer behind an `unsafe` constructor) or k3k's own [`Tensor<T>`]. The element type is part of
//!   the Rust type ([`Bf16`], [`F32`], [`I32`], ...), so a launcher's signature says which dtype each argument
//!   has; shapes are checked at the call against the kernel's symbolic dims (the same [`k3k_ir::bind`] the CLI
//!   and the interpreter use) and against the dims the kernel was built for (its *pins*), with errors naming
//!   the argument.
//! - **loaded once per context** ([`Loaded::load`] keeps a process-wide cache of loaded modules by context and
//!   kernel image).
//!
//! A launch allocates no device memory, copies nothing between host and device and waits for nothing, so a
//! model can capture its launches into a CUDA graph and replay them.
//!
//! - [`KernelImage`]: one kernel as embedded in the binary (PTX, CUBIN for sm_90a when ptxas was there, or
//!   CUDA C for run-time NVRTC, plus the serialized IR that drives the shape checks).
//! - [`Loaded`]: a kernel loaded in one context; [`PlanRunner`]: a recorded multi-kernel plan of an operator.
//!
//! Nothing here needs NVRTC unless a kernel was embedded as CUDA C (`Builder::runtime_nvrtc(true)`).

mod assume;
mod image;
mod loaded;
mod plan;
mod stream;
mod tensor;
mod varlen;
mod view;

pub use assume::FoldedScales;
pub use image::{HasGpu, KernelImage, pick, slugify};
pub use k3k_ir::{DType, HostTensor, Kernel, SymValue};
pub use k3k_runtime::cudarc;
pub use k3k_runtime::{ArgRef, CudaContext, CudaStream, DeviceTensor, Gpu, GpuInfo, RuntimeError, TimingOptions};
pub use loaded::{Loaded, check_launch};
pub use plan::{BufRole, BufferSpec, PlanRunner, PlanSpec, StepSpec};
pub use stream::{AsContext, AsStream, RawStream};
pub use tensor::{Bf16, E2m1, E4m3, E8m0, Elem, F16, F32, I32, I64, Tensor, U8, U32, U64};
pub use varlen::{KdaVarlen, KdaVarlenSpec, VarlenLayout, chunk_tables};
pub use view::{In, MAX_RANK, Out, Shape, View, ViewMut};

/// The bucket of `value` among ascending `buckets`: the smallest at or above it, else the largest.
pub fn pick_bucket(buckets: &[i64], value: i64) -> usize {
    buckets.iter().position(|&b| value <= b).unwrap_or(buckets.len().saturating_sub(1))
}

/// Compile CUDA C of the caller's own kernels (an engine's routing, residual or cache kernels that run between
/// k3k's launches) to PTX for the architecture k3k targets, with the NVRTC k3k itself loads (`K3K_NVRTC`, the
/// installed wheel or the CUDA toolkit). `name` only labels errors. Load the PTX with cudarc
/// (`CudaContext::load_module(Ptx::from_src(..))`).
pub fn compile_cuda(name: &str, src: &str) -> Result<String, Error> {
    k3k_codegen::nvrtc::compile_ptx(name, src, k3k_codegen::ARCH)
        .map(|o| o.ptx)
        .map_err(|e| Error::Nvrtc { kernel: name.into(), why: e.to_string() })
}

/// Why a generated launcher could not load or launch a kernel.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A CUDA error, or arguments that do not fit the kernel's symbolic shapes (names the argument).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An argument has the right rank and dtype but not the size this kernel was built for.
    #[error(
        "kernel `{kernel}`: argument `{arg}` dim {dim} (`{sym}`): this kernel was built for {sym} = {expected}, got {got}"
    )]
    Pinned { kernel: String, arg: String, dim: usize, sym: String, expected: i64, got: i64 },
    /// A tensor's dtype is not the one its Rust type or a plan buffer says.
    #[error("{what}: expected a {expected} tensor, got {got}")]
    DType { what: String, expected: DType, got: DType },
    /// A plan input or output does not have the shape the plan was recorded for.
    #[error("plan `{plan}`: buffer `{buffer}`: expected shape {expected:?}, got {got:?}")]
    Shape { plan: String, buffer: String, expected: Vec<usize>, got: Vec<usize> },
    /// A view of the caller's memory cannot be made as asked (too small a buffer, strides that are not dense
    /// row-major, too many dims).
    #[error("{what}: {why}")]
    View { what: String, why: String },
    /// The data does not meet an assumption the kernels were built with (see [`FoldedScales`]).
    #[error("{what}: {why}")]
    Assumption { what: String, why: String },
    /// A varlen batch that does not fit its request (bad `cu_seqlens`, too many tokens, a small workspace).
    #[error("varlen batch: `{what}`: {why}")]
    Varlen { what: String, why: String },
    /// The embedded kernel is unusable (its IR does not parse, or no code was embedded).
    #[error("kernel `{kernel}`: {why}")]
    Embedded { kernel: String, why: String },
    /// Run-time NVRTC failed (only for kernels embedded as CUDA C).
    #[error("kernel `{kernel}`: run-time NVRTC compile failed: {why}")]
    Nvrtc { kernel: String, why: String },
}
