//! Hopper bulk tensor copies (TMA) and the shared-memory barriers (mbarriers) they complete on.
//!
//! A [`TensorMapDecl`] describes a tensor argument to the copy engine: its dims reversed (innermost first:
//! `x [M, K]` is the 2-D map `[K, M]`, `w [G, N, K]` the 3-D map `[K, N, G]`), its row-major strides, a box (the
//! tile one copy moves) and a shared-memory swizzle. The launcher encodes one `CUtensorMap` per declaration on
//! the host (`cuTensorMapEncodeTiled`) and passes it by value as a `const __grid_constant__` kernel argument,
//! after the tensor pointers and symbols.
//!
//! An [`MbarDecl`] is `count` mbarriers in shared memory (e.g. one per pipeline stage). The statements:
//! [`crate::Stmt::MbarInit`] (arrival count; includes the init fence and a block barrier),
//! [`crate::Stmt::MbarArriveExpectTx`] (thread 0 announces the bytes the phase's copies will deliver and
//! arrives), [`crate::Stmt::MbarArrive`] (every thread arrives), [`crate::Stmt::MbarWait`] (every thread waits
//! until the phase of the given parity has completed) and [`crate::Stmt::TmaLoad`] (thread 0 starts one box
//! copy global -> shared that completes `box bytes` of transaction on a barrier).
//!
//! Barrier semantics (what the CPU backends check, since a broken protocol hangs the GPU): a barrier has a
//! phase counter (starting at 0), pending arrivals (starting at its count) and a transaction count (starting at
//! 0). An arrival decrements the pending arrivals, `expect_tx(b)` adds `b` to the transaction count, a copy's
//! completion subtracts its bytes. When both reach 0 the phase completes: the phase counter increments and the
//! pending arrivals are reset. `wait(parity)` returns once the phase of that parity has completed, i.e. when
//! `phase % 2 != parity`; on the CPU, where every statement runs to completion for the whole block, a wait
//! that cannot return is an error (the GPU would hang), as are arrivals beyond the count and transaction bytes
//! beyond those expected.
//!
//! Clusters: a `TmaLoad` may multicast its box into several CTAs of the kernel's cluster ([`crate::cluster`]).

use crate::expr::{Expr, TensorId};
use crate::kernel::{SharedRef, Swizzle};
use serde::{Deserialize, Serialize};

/// The ring arithmetic of a `stages`-deep pipeline on per-slot barriers: stage use `u` (the u-th tile through the
/// ring) goes to slot `u % stages`, and its full barrier's phase has parity `(u / stages) % 2` (`u / stages` earlier
/// uses of the slot completed a phase each). `bits` (the program promises `u >= 0`, and `stages` is a power of two):
/// a mask and a shift instead of the signed 64-bit remainder and quotient, which ptxas cannot simplify once a use
/// is a loop-carried sum.
#[derive(Clone, Copy, Debug)]
pub struct StageRing {
    pub stages: u32,
    pub bits: bool,
}

impl StageRing {
    /// The ring of `stages` slots; the mask-and-shift forms where `nonneg` uses meet a power-of-two depth.
    pub fn new(stages: u32, nonneg: bool) -> Self {
        StageRing { stages, bits: nonneg && stages.is_power_of_two() }
    }
    /// The slot of use `u`.
    pub fn slot(&self, u: Expr) -> Expr {
        let st = self.stages as i64;
        if self.bits { u.bitand(st - 1) } else { u % st }
    }
    /// The parity of use `u`'s phase of its slot's barrier.
    pub fn phase(&self, u: Expr) -> Expr {
        let st = self.stages as i64;
        if self.bits { u.shr(self.stages.trailing_zeros() as i64).bitand(1i64) } else { (u / st) % 2i64 }
    }
    /// The parity a producer waits for on the slot's empty barrier before filling use `u`: the release of use
    /// `u - stages`, phase `u / stages - 1` (a fresh barrier passes parity 1 at once).
    pub fn empty_parity(&self, u: Expr) -> Expr {
        let st = self.stages as i64;
        if self.bits { self.phase(u).bitxor(1i64) } else { (u / st + 1i64) % 2i64 }
    }
}

/// Index of a barrier declaration in [`crate::Kernel::mbarriers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MbarId(pub u32);
/// Index of a tensor map in [`crate::Kernel::tensor_maps`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TmapId(pub u32);

/// `count` mbarriers (8 bytes each) in shared memory, after the shared buffers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MbarDecl {
    pub name: String,
    pub count: u32,
}

/// One barrier of a declaration: `bar[index]`, `index` block-uniform.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MbarRef {
    pub bar: MbarId,
    pub index: Expr,
}

/// A TMA descriptor over tensor argument `tensor`: its dims reversed (innermost first), boxes of `box_dims`
/// elements (innermost first, each 1..=256; the innermost box row a multiple of 16 bytes, at most 128 bytes
/// with the 128-byte swizzle), landing in shared memory row-major (`box_dims[0]` elements per row, the outer
/// box dims flattened into rows) with `swizzle`: `Swizzle::Xor16B` with 128-byte rows is
/// `CU_TENSOR_MAP_SWIZZLE_128B`, exactly the layout of such a shared tile; `Swizzle::None` plain rows.
/// Elements outside the tensor read as zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorMapDecl {
    pub name: String,
    pub tensor: TensorId,
    pub box_dims: Vec<u32>,
    pub swizzle: Swizzle,
}

impl TensorMapDecl {
    /// Elements of one box.
    pub fn box_elems(&self) -> usize {
        self.box_dims.iter().map(|&d| d as usize).product()
    }
    /// Rows of one box in shared memory (the outer box dims flattened).
    pub fn box_rows(&self) -> u32 {
        self.box_dims[1..].iter().product()
    }
}

/// A bulk tensor copy (see [`crate::Stmt::TmaLoad`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TmaLoad {
    pub map: TmapId,
    /// Where the box lands: a window of the box's rows x `box_dims[0]` columns, starting at column 0 of a
    /// buffer whose rows are exactly one box row.
    pub dst: SharedRef,
    /// Element coordinates of the box's first element, innermost first (may lie outside the tensor).
    pub coords: Vec<Expr>,
    /// The barrier whose transaction count the copy's bytes complete.
    pub bar: MbarRef,
    /// `.multicast::cluster`: a mask (an int) of the cluster's CTA ranks the box lands in, each at the same
    /// shared offset and completing on the same barrier of that CTA (see [`crate::cluster`]); `None`: this CTA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multicast: Option<Expr>,
}

/// A bulk tensor store (see [`crate::Stmt::TmaStore`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TmaStore {
    pub map: TmapId,
    /// The box's source: a window of the box's rows x `box_dims[0]` columns, starting at column 0 of a buffer
    /// whose rows are exactly one box row, laid out with the map's swizzle.
    pub src: SharedRef,
    /// Element coordinates of the box's first element, innermost first (parts outside the tensor are skipped).
    pub coords: Vec<Expr>,
}

/// The CUDA driver's bound on box dims.
pub const TMA_MAX_BOX: u32 = 256;
/// Tensor maps are 128-byte kernel arguments.
pub const TENSOR_MAP_BYTES: usize = 128;
