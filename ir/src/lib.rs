//! # k3k-ir: the tile program
//!
//! Operators are written as block-level *tile programs*: register tiles spread over warps, shared-memory
//! tiles, masked global views, asynchronous copies, tensor-core products, element-wise maps, row reductions
//! and column scans, inside block-uniform loops and conditionals; plus *threads regions* of plain per-thread
//! code (scalar and shared stores, atomics, register arrays) for what tiles do not express. The same program
//! is rendered to CUDA C by `k3k-codegen` and executed on the CPU by its interpreter.
//!
//! ```
//! use k3k_ir::*;
//! let mut b = KernelBuilder::new("scale", 128);
//! let n = b.dim("N");
//! let x = b.tensor("x", DType::F32, &[n.clone()], Access::Read);
//! let y = b.tensor("y", DType::F32, &[n.clone()], Access::Write);
//! let t = b.tile("t", DType::F32, 64, 64, [4, 1]);
//! b.grid(n.ceil_div(4096i64), 1i64, 1i64);
//! let base = Expr::block_idx(0) * 4096i64;
//! let rows = (n.clone() - base.clone()).ceil_div(64i64);
//! b.load(t, Place::Global(view(x, base.clone(), 64i64, rows.clone(), n.clone() - base.clone(), 1)));
//! b.map(t, Expr::Elem(t) * 2.0);
//! b.store(t, Place::Global(view(y, base.clone(), 64i64, rows, n - base, 1)));
//! let k = b.finish().unwrap();
//! assert!(print::kernel(&k).contains("t[r,c] = (t[r,c] * 2.0)"));
//! assert_eq!(stable_hash(&k).len(), 16);
//! ```
//!
//! A histogram in shared memory: per-thread code inside [`KernelBuilder::threads`] regions, separated by
//! barriers wherever one thread reads what another wrote.
//!
//! ```
//! use k3k_ir::*;
//! let mut b = KernelBuilder::new("hist", 256);
//! let n = b.dim("N");
//! let x = b.tensor("x", DType::U8, &[n.clone()], Access::Read);
//! let h = b.tensor("h", DType::U32, &[Expr::Int(256)], Access::ReadWrite);
//! let s = b.shared("bins", DType::U32, 1, 256, 1, Swizzle::None);
//! b.grid(n.ceil_div(4096i64), 1i64, 1i64);
//! b.threads(|b| b.shared_store(s, 0i64, 0i64, Expr::thread_idx(), 0i64));
//! b.barrier();
//! b.threads(|b| {
//!     let start = Expr::block_idx(0) * 4096i64 + Expr::thread_idx();
//!     let end = (Expr::block_idx(0) + 1i64) * 4096i64;
//!     b.for_("i", start, end.min(n.clone()), 256i64, |b, i| {
//!         b.atomic_add_shared(s, 0i64, 0i64, Expr::load(x, i), 1i64);
//!     });
//! });
//! b.barrier();
//! b.threads(|b| {
//!     let t = Expr::thread_idx();
//!     b.atomic_add_global(h, t.clone(), Expr::shared_load(s, 0i64, 0i64, t));
//! });
//! let k = b.finish().unwrap();
//! assert!(print::kernel(&k).contains("atomic_add(bins[0][0, x[i%"));
//! ```

pub mod bind;
pub mod builder;
pub mod cluster;
pub mod dtype;
pub mod expr;
pub mod fp4;
pub mod fp4_gemv;
pub mod hash;
pub mod kernel;
pub mod knob;
pub mod mx;
pub mod print;
pub mod tensor;
pub mod tma;
pub mod validate;

pub use bind::{BindError, NUM_SMS, SymValue, TensorShape, bind, eval_grid, eval_int};
pub use builder::{KernelBuilder, vec_view, view};
pub use dtype::{DType, ScalarTy};
pub use expr::{ArrId, BinOp, Expr, SharedId, Special, SymId, TensorId, TileId, UnOp, VarId, VecId};
pub use fp4_gemv::{Fp4Gemv, Fp4Ring, Fp4Staging};
pub use hash::stable_hash;
pub use kernel::*;
pub use knob::{KnobAxis, KnobError, KnobSpace, KnobValue, Knobs};
pub use mx::{Fp4Flags, Fp4Prefetch};
pub use tensor::HostTensor;
pub use tma::{
    MbarDecl, MbarId, MbarRef, StageRing, TENSOR_MAP_BYTES, TMA_MAX_BOX, TensorMapDecl, TmaLoad, TmaStore, TmapId,
};
pub use validate::{IrError, IrErrorKind, MAX_ARRAY_LEN, MAX_SHARED_BYTES, validate, var_types};
