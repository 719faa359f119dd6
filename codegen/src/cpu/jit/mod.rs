//! A Cranelift JIT of IR kernels: the same program the interpreter runs, compiled to native code.
//!
//! The JIT follows the interpreter ([`super::interp`]) operation by operation so the two agree bit for bit:
//! blocks run one after another, a threads region runs its threads one after another, integers are 64-bit
//! and wrap, floats are f32 with no fused multiply-adds, casts saturate like Rust's `as`, every global access
//! is bounds-checked (an out-of-bounds index or an integer division by zero ends the run with the
//! interpreter's error), and the float functions Cranelift has no instruction for (exp, tanh, sigmoid, ...,
//! `min`/`max` with Rust's NaN rule, `ldexp`) and the narrow-float conversions (bf16/f16/e4m3 stores, f16/e4m3/
//! e8m0 loads) call the very Rust functions the interpreter uses.
//!
//! **Coverage:** every statement and expression of the IR. Scalar control flow (`Let`, `Assign`, `For`, `If`),
//! threads regions (`StoreScalar`, `SharedStore`, `Atomic`, `LetArray`, `ArraySet`), the no-op
//! synchronisation statements (`Barrier`, `AsyncCommit`, `AsyncWait`, `MmaWait`) and every expression
//! (including `SharedLoad`, `ArrayGet` and the element-context `Elem`, `RowVal`, `RowIdx`, `ColIdx`) are
//! compiled inline; `Map` and `VecMap` become loops over the elements (rows outer, columns inner, as in the
//! interpreter) with the mapped expression compiled in their body. The bulk tile statements (`Load`/`Store`
//! of global and shared places, `LoadVec`/`StoreVec`, `CopyAsync` (synchronous on the CPU), `Reduce`, `Scan`,
//! `Mma` and `MmaAsync` with register, shared and banded operands, the packed MXFP4 decode `DequantFp4`)
//! evaluate their scalar operands (shared tile indices, bounds-checked; global views) in compiled code, then
//! call the JIT's runtime (`rt`, the CPU counterpart of the CUDA prelude), which runs them over the block's
//! frame element by element in the interpreter's order with the interpreter's conversions. Register tiles, row
//! vectors, shared buffers and per-thread arrays live in a per-block frame (`rt::Layout`), zeroed before each
//! block like the interpreter's fresh block state; floats written into tiles and shared buffers have
//! signalling NaNs made quiet, as the interpreter's f64 storage does. A threads region with warp statements
//! (`WarpShuffle`, `WarpSync`, at its top level) runs in lockstep like the interpreter's: split at those
//! statements into segments, each segment runs for every thread with the thread's variables and arrays kept
//! in its record of a lane area (`rt::Layout`) between segments, then a shuffle's exchange (`rt::host_warp`)
//! gives each thread its source lane's value (or its warp's ballot mask). [`supports`] says why a kernel
//! falls back to the interpreter: kernels whose arrays are introduced with two different types or lengths,
//! float tiles moved through e2m1/e8m0 tensors, float stores into e8m0/e2m1 tensors, and any statement or
//! expression the JIT does not know (a catch-all, so IR variants added later fall back rather than fail).

mod lower;
mod rt;

use crate::cpu::cluster::Shared;
use crate::cpu::interp::{self, InterpError, InterpOptions};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use k3k_ir::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Why a kernel cannot be compiled.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JitError {
    /// The kernel uses something the JIT does not lower yet (it runs on the interpreter instead).
    #[error("not lowered by the JIT: {0}")]
    Unsupported(String),
    #[error("cranelift: {0}")]
    Cranelift(String),
}

/// A tensor argument as the compiled code sees it.
#[repr(C)]
pub(crate) struct TensorRef {
    pub(crate) ptr: *mut u8,
    pub(crate) len: i64,
}

/// What the compiled function of a kernel reads and writes besides the tensors (one call per block).
#[repr(C)]
pub(crate) struct Ctx {
    pub(crate) tensors: *const TensorRef,
    /// Symbol values: ints, or the bits of f32 floats.
    pub(crate) syms: *const i64,
    pub(crate) block: [i64; 3],
    pub(crate) grid: [i64; 3],
    /// On failure: code, then up to six operands (see `lower::Fail`).
    pub(crate) err: [i64; 8],
    /// The block's frame (register tiles, row vectors, shared buffers, arrays; see `rt::Layout`).
    pub(crate) frame: *mut u8,
    /// The tensors, for the runtime functions (`rt`).
    pub(crate) hosts: *mut HostTensor,
    pub(crate) kernel: *const Kernel,
    pub(crate) layout: *const rt::Layout,
    /// The error of a failed runtime function (code `Fail::Runtime`).
    pub(crate) error: Option<InterpError>,
    /// The lane area of lockstep regions (`rt::Layout::lanes_size` bytes; see `rt::Layout`).
    pub(crate) lanes: *mut u8,
    /// The block's cluster (null without a cluster shape; see `cpu::cluster`).
    pub(crate) cluster: *const rt::ClusterRt,
    /// Bulk tensor stores whose source reads no wait has retired yet, oldest first (see `rt::retire_bulk_stores`;
    /// after the fields the compiled code reads).
    pub(crate) bulk_stores: Vec<rt::PendingStore>,
}

/// A compiled kernel.
pub struct JitKernel {
    /// The kernel compiled; the code holds pointers to its statements (heap data that never moves or changes).
    kernel: Kernel,
    layout: rt::Layout,
    // Owns the code `func` points into.
    _module: JITModule,
    func: extern "C" fn(*mut Ctx) -> i32,
}

/// Whether the JIT lowers every statement of a kernel (else the reason).
pub fn supports(k: &Kernel) -> Result<(), JitError> {
    lower::check(k)
}

/// Statements inside threads regions above which a kernel's function is register-allocated in a single pass.
/// A long straight-line per-thread body (kda.decode's state rows held in registers: 490 to 1920 statements over
/// the fuzzer's cases; no other operator's kernel has more than ~110) takes Cranelift's backtracking allocator over
/// a second; the single pass compiles it 8x faster for a ~5% slower run, which is what the fuzzer wants (a fresh
/// kernel per shape). Smaller kernels keep the backtracking allocator: there the single pass saved at most 2x of a
/// few milliseconds and ran up to 1.5x slower (`cargo bench --bench cpu_backends`, 2026-12-05).
const SINGLE_PASS_REGALLOC_STMTS: usize = 400;

/// The register allocator for a kernel's function (see [`SINGLE_PASS_REGALLOC_STMTS`]).
pub fn regalloc_for(k: &Kernel) -> &'static str {
    let mut per_thread = 0usize;
    k.visit_stmts(&mut |s| {
        if let Stmt::Threads { body } = s {
            body.iter().for_each(|t| t.visit(&mut |_| per_thread += 1));
        }
    });
    if per_thread > SINGLE_PASS_REGALLOC_STMTS { "single_pass" } else { "backtracking" }
}

/// Compile a kernel.
pub fn compile(k: &Kernel) -> Result<JitKernel, JitError> {
    validate(k).map_err(|e| JitError::Unsupported(format!("invalid kernel: {e}")))?;
    lower::check(k)?;
    let cl = |e: &dyn std::fmt::Display| JitError::Cranelift(e.to_string());
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(|e| cl(&e))?;
    flags.set("regalloc_algorithm", regalloc_for(k)).map_err(|e| cl(&e))?;
    flags.set("use_colocated_libcalls", "false").map_err(|e| cl(&e))?;
    flags.set("is_pic", "false").map_err(|e| cl(&e))?;
    let isa =
        cranelift_native::builder().map_err(|e| cl(&e))?.finish(settings::Flags::new(flags)).map_err(|e| cl(&e))?;
    let mut module = JITModule::new(JITBuilder::with_isa(isa, cranelift_module::default_libcall_names()));
    // The code embeds the addresses of this copy's statements (`rt::host_tile`): it moves into the result, and
    // its statement vectors' heap storage with it, unchanged.
    let kernel = k.clone();
    let (id, layout) = lower::define(&mut module, &kernel)?;
    module.finalize_definitions().map_err(|e| cl(&e))?;
    let ptr = module.get_finalized_function(id);
    // SAFETY: `lower::define` built this function with the signature `fn(*mut Ctx) -> i32` (C ABI).
    let func = unsafe { std::mem::transmute::<*const u8, extern "C" fn(*mut Ctx) -> i32>(ptr) };
    Ok(JitKernel { kernel, layout, _module: module, func })
}

impl JitKernel {
    /// Run on host tensors (kernel argument order), like [`interp::run`].
    pub fn run(
        &self,
        tensors: &mut [HostTensor],
        scalars: &[(&str, SymValue)],
        opts: InterpOptions,
    ) -> Result<(), InterpError> {
        let k = &self.kernel;
        let shapes: Vec<TensorShape<'_>> =
            tensors.iter().map(|t| TensorShape { dtype: t.dtype, shape: &t.shape }).collect();
        let syms = bind(k, &shapes, scalars, opts.num_sms)?;
        let Some(grid) = eval_grid(k, &syms)? else { return Ok(()) };
        // Every access is bounds-checked against `len` elements of the storage.
        for t in tensors.iter() {
            if t.data.len() < t.dtype.storage_bytes(t.len()) {
                return Err(InterpError::Arith {
                    kernel: k.name.clone(),
                    what: format!("tensor of {} bytes is short", t.data.len()),
                });
            }
        }
        let refs: Vec<TensorRef> =
            tensors.iter_mut().map(|t| TensorRef { len: t.len() as i64, ptr: t.data.as_mut_ptr() }).collect();
        let sym_bits: Vec<i64> = syms
            .iter()
            .map(|s| match s {
                SymValue::Int(v) => *v,
                SymValue::Float(f) => f.to_bits() as i64,
            })
            .collect();
        let mut frame = vec![0u64; self.layout.size.div_ceil(8)];
        let mut lanes = vec![0u64; self.layout.lanes_size.div_ceil(8)];
        let mut ctx = Ctx {
            tensors: refs.as_ptr(),
            syms: sym_bits.as_ptr(),
            block: [0; 3],
            grid: [grid[0] as i64, grid[1] as i64, grid[2] as i64],
            err: [0; 8],
            frame: frame.as_mut_ptr() as *mut u8,
            hosts: tensors.as_mut_ptr(),
            kernel: k,
            layout: &self.layout,
            error: None,
            lanes: lanes.as_mut_ptr() as *mut u8,
            cluster: std::ptr::null(),
            bulk_stores: vec![],
        };
        if k.cluster_size() > 1 {
            drop((frame, lanes));
            return self.run_clusters(ctx, grid, tensors);
        }
        for z in 0..grid[2] {
            for y in 0..grid[1] {
                for x in 0..grid[0] {
                    ctx.block = [x as i64, y as i64, z as i64];
                    // Every block starts from zeroed tiles, vectors, shared memory and no arrays.
                    if (x, y, z) != (0, 0, 0) {
                        // SAFETY: the frame holds `frame.len()` u64s.
                        unsafe { std::ptr::write_bytes(ctx.frame, 0, 8 * frame.len()) };
                    }
                    if (self.func)(&mut ctx) != 0 {
                        if let Some(e) = ctx.error.take() {
                            return Err(e);
                        }
                        return Err(lower::error(k, [x, y, z], &ctx.err, tensors));
                    }
                    // SAFETY: the block's frame and tensors, as the compiled code left them.
                    unsafe { rt::retire_bulk_stores(&mut ctx, 0) }?;
                }
            }
        }
        Ok(())
    }
}

impl JitKernel {
    /// Run a kernel with a cluster shape like the interpreter: clusters one after another, the CTAs of each
    /// on their own threads with their own frames, scheduled by `cpu::cluster`. `proto` is the context of
    /// the run (tensors, symbols, grid).
    fn run_clusters(&self, proto: Ctx, grid: [u32; 3], tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        use crate::cpu::cluster::{Sched, clusters, run_cluster};
        let k = &self.kernel;
        let n = k.cluster_size() as usize;
        let hosts = Shared((tensors.as_mut_ptr(), tensors.len()));
        for (id, ids) in clusters(k, grid)? {
            let sched = Sched::new(n);
            let mut frames: Vec<Vec<u64>> = (0..n).map(|_| vec![0u64; self.layout.size.div_ceil(8)]).collect();
            let mut lanes: Vec<Vec<u64>> = (0..n).map(|_| vec![0u64; self.layout.lanes_size.div_ceil(8)]).collect();
            let crt = rt::ClusterRt {
                sched: &sched,
                frames: frames.iter_mut().map(|f| f.as_mut_ptr() as *mut u8).collect(),
                n,
                id,
            };
            let mut ctxs: Vec<Ctx> = ids
                .iter()
                .enumerate()
                .map(|(r, b)| Ctx {
                    tensors: proto.tensors,
                    syms: proto.syms,
                    block: [b[0] as i64, b[1] as i64, b[2] as i64],
                    grid: proto.grid,
                    err: [0; 8],
                    frame: crt.frames[r],
                    hosts: proto.hosts,
                    kernel: proto.kernel,
                    layout: proto.layout,
                    error: None,
                    lanes: lanes[r].as_mut_ptr() as *mut u8,
                    cluster: &crt,
                    bulk_stores: vec![],
                })
                .collect();
            let ptrs = &Shared(ctxs.iter_mut().map(|c| c as *mut Ctx).collect::<Vec<_>>());
            let hosts = &hosts;
            let func = self.func;
            run_cluster(k, id, &sched, |r| {
                let p: *mut Ctx = ptrs.get()[r];
                // SAFETY: CTA `r`'s thread alone uses its context; shared state is touched by the
                // one running CTA only (see `cpu::cluster`).
                let ctx = unsafe { &mut *p };
                if func(ctx) != 0 {
                    if let Some(e) = ctx.error.take() {
                        return Err(e);
                    }
                    let (tp, tn) = *hosts.get();
                    let ts = unsafe { std::slice::from_raw_parts(tp, tn) };
                    let b = [ctx.block[0] as u32, ctx.block[1] as u32, ctx.block[2] as u32];
                    return Err(lower::error(k, b, &ctx.err, ts));
                }
                // SAFETY: this CTA's frame and the tensors, while it runs alone.
                unsafe { rt::retire_bulk_stores(ctx, 0) }
            })?;
            drop((ctxs, frames, lanes));
        }
        Ok(())
    }
}

/// Which engine ran a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Jit,
    Interpreter,
}

thread_local! {
    /// Compiled kernels by the stable hash of their IR (`None`: not lowered, runs on the interpreter).
    static CACHE: RefCell<HashMap<String, Option<Rc<JitKernel>>>> = RefCell::new(HashMap::new());
}

/// Run a kernel with the JIT when it lowers every statement of it, else on the interpreter (compiled kernels are
/// cached per thread by IR hash). Returns which engine ran it.
pub fn run(
    k: &Kernel,
    tensors: &mut [HostTensor],
    scalars: &[(&str, SymValue)],
    opts: InterpOptions,
) -> Result<Engine, InterpError> {
    let key = stable_hash(k);
    let jk = CACHE.with(|c| {
        c.borrow_mut()
            .entry(key)
            .or_insert_with(|| match compile(k) {
                Ok(j) => Some(Rc::new(j)),
                Err(JitError::Unsupported(why)) => {
                    tracing::debug!("kernel `{}` runs on the interpreter: {why}", k.name);
                    None
                }
                Err(e) => {
                    tracing::warn!("kernel `{}`: JIT failed ({e}); running it on the interpreter", k.name);
                    None
                }
            })
            .clone()
    });
    match jk {
        Some(j) => j.run(tensors, scalars, opts).map(|_| Engine::Jit),
        None => interp::run(k, tensors, scalars, opts).map(|_| Engine::Interpreter),
    }
}
