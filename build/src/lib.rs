//! # k3k-build: k3k kernels from `build.rs`
//!
//! A model crate chooses operators, shapes and target GPUs in its build script; [`Builder`] reads the tuned
//! knobs from `results/<gpu-slug>/<op>.json` (falling back to the operator's default knobs with a
//! `cargo:warning`), compiles each kernel with NVRTC to PTX (and with ptxas to CUBIN for sm_90a when ptxas is
//! there) into `OUT_DIR/k3k/`, and writes `OUT_DIR/k3k_kernels.rs`: one module per request with one typed
//! launcher per kernel. No GPU is needed to build.
//!
//! ```no_run
//! // build.rs
//! fn main() {
//!     k3k_build::Builder::new()
//!         .op("latent_moe_gemm")
//!         .alias("moe_up")
//!         .dims(&[("G", 8), ("mean", 128), ("K", 3584), ("N", 6144), ("epilogue", 1)])
//!         .gpu("nvidia-h200")
//!         .build_or_exit();
//! }
//! ```
//!
//! ```ignore
//! // src/main.rs: the model's own context, stream and buffers (cudarc)
//! mod kernels {
//!     include!(concat!(env!("OUT_DIR"), "/k3k_kernels.rs"));
//! }
//! use k3k_build::rt::{Bf16, I32, View, ViewMut, cudarc::driver::CudaContext};
//!
//! let stream = CudaContext::new(0)?.new_stream()?;
//! let up = kernels::moe_up::GemmGroupedSituGluIn8Out8::load(&stream)?;   // once per context
//! // x: [M, K] bf16, w: [G, N, K] bf16, offs: [G] i32, y: [M, N/2] bf16 (CudaSlices of any element type)
//! up.launch(
//!     &stream,
//!     &View::<Bf16>::of(&x, &stream, &[m, k])?,
//!     &View::<Bf16>::of(&w, &stream, &[g, n, k])?,
//!     &View::<I32>::of(&offs, &stream, &[g])?,
//!     &mut ViewMut::<Bf16>::of(&mut y, &stream, &[m, n / 2])?,
//! )?;   // dtypes in the signature, shapes checked here; nothing allocated, copied or waited for
//! ```
//!
//! ## What is generated
//!
//! For each request, `pub mod <alias>` holds:
//! - per kernel, a struct named after the kernel without what its knobs decide (`GemmGroupedSituGluIn8Out8`;
//!   [`Builder::roles`] renames) with `load(ctx)` (a cudarc context or stream, or [`rt::Gpu`]; once per
//!   context) and `launch(&self, stream, <tensors>, <scalars>)` on any [`rt::AsStream`]: parameters named
//!   after the kernel's tensor arguments, typed [`&dyn rt::In<rt::Bf16>`](rt::In) & co. (`&mut dyn rt::Out`
//!   for the ones it writes: an [`rt::View`]/[`rt::ViewMut`] of the caller's memory or an [`rt::Tensor`]),
//!   then its scalar arguments (`i64` / `f32`). Each launch checks the shapes against the kernel's symbolic
//!   dims ([`k3k_ir::bind`]) and against the dims it was built for (`PINS`: every kernel dim named like a
//!   request dim except the run-time ones of [`runtime_dims`], plus [`Builder::pin`], minus
//!   [`Builder::free_dims`]), and returns [`rt::Error`] naming the argument.
//!   The PTX, the CUBIN and the kernel's IR (JSON) are embedded with `include_str!`/`include_bytes!`; one
//!   variant per target GPU, picked at load time by the device name's slug.
//! - with [`Builder::plan`], a `Plan` (+ `Inputs`, `Outputs`) that runs the operator's whole plan for that
//!   shape: every launch with its scalars, scratch buffers, and shape-only tables (chunk tables, bin edges)
//!   embedded.
//!
//! And at the top: `TARGET_GPUS`, `ALL_KERNELS` and `verify_embedded()`, which checks without a GPU that every
//! kernel is embedded and consistent.
//!
//! ## Toolchain
//!
//! NVRTC 13.0 is found as the rest of k3k finds it (`K3K_NVRTC`, `K3K_CUDA_TOOLS`, the checkout's
//! `.tools/cuda`, `CUDA_HOME`, `/usr/local/cuda`, the system loader). Without it [`Builder::build`] fails with
//! [`BuildError::NvrtcMissing`], one message saying how to get it, unless [`Builder::runtime_nvrtc`] (or
//! `K3K_BUILD_RUNTIME_NVRTC=1`) asked to embed the CUDA C and compile it when the program loads a kernel.
//!
//! ## Features
//!
//! - `build` (default): [`Builder`]; pulls in the operators, the tuner's results store and the compilers. Use it
//!   from `[build-dependencies]`.
//! - without default features: only [`rt`], what the generated code needs at run time. Use that from
//!   `[dependencies]` (`k3k-build = { ..., default-features = false }`).
//! - `reference`: re-exports `k3k-reference` as [`reference`](crate) for checking results on the CPU.
//!
//! ## A runnable example
//!
//! Builds launchers into a temporary directory (with run-time NVRTC, so it runs without NVRTC too):
//!
//! ```
//! # #[cfg(feature = "build")] {
//! let out = tempfile::tempdir().unwrap();
//! let report = k3k_build::Builder::new()
//!     .op("latent_moe_gemm")
//!     .alias("moe_up")
//!     .dims(&[("G", 4), ("mean", 64), ("K", 256), ("N", 512), ("epilogue", 1)])
//!     .gpu("nvidia-h200")
//!     .results_dir(out.path().join("no-results"))
//!     .out_dir(out.path())
//!     .runtime_nvrtc(true)
//!     .cargo_output(false)
//!     .build()
//!     .unwrap();
//! // No tuning record in that results directory: the default knobs, with a warning.
//! assert!(report.warnings.iter().any(|w| w.contains("using the default knobs")));
//! let rust = std::fs::read_to_string(&report.rust_file).unwrap();
//! assert!(rust.contains("pub mod moe_up"));
//! assert!(rust.contains("x: &dyn rt::In<rt::Bf16>"));
//! assert!(rust.contains("y: &mut dyn rt::Out<rt::Bf16>"));
//! assert!(rust.contains(r#"("K", 256)"#)); // K is pinned to the request's value
//! # }
//! ```

// The first example is a whole build script.
#![allow(clippy::needless_doctest_main)]

#[cfg(feature = "build")]
mod builder;
#[cfg(feature = "build")]
mod compile;
#[cfg(feature = "build")]
mod emit;
#[cfg(feature = "build")]
mod ident;
#[cfg(feature = "build")]
pub mod lookup;
#[cfg(feature = "build")]
mod names;
#[cfg(feature = "build")]
mod record;
pub mod rt;
#[cfg(feature = "build")]
mod shapes;

#[cfg(feature = "build")]
pub use builder::{
    BuildError, Builder, DEFAULT_GPU, ENV_RESULTS_DIR, ENV_RUNTIME_NVRTC, EmittedKernel, Report, ResolvedRequest,
    find_nvrtc,
};
#[cfg(feature = "build")]
pub use lookup::KnobSource;
#[cfg(feature = "build")]
pub use shapes::runtime_dims;

/// The IR (to build kernels in `build.rs` for [`Builder::kernels`]).
#[cfg(feature = "build")]
pub use k3k_ir as ir;
/// The operators (their kernel builders, presets and defaults).
#[cfg(feature = "build")]
pub use k3k_ops as ops;
/// The f64 CPU reference of every operator.
#[cfg(feature = "reference")]
pub use k3k_reference as reference;

/// The README's example, compiled and run as a doctest.
#[cfg(all(doctest, feature = "build"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
