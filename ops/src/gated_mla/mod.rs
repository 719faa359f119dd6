//! `gated_mla`: Multi-head Latent Attention with a sigmoid output gate (SEMANTICS.md section 2.4), written as IR tile programs.
//!
//! Five kernels:
//! * [`build_prefill`]: FlashAttention style prefill (MHA mode, `d_qk = 192`, `d_v = 128`). One block per
//!   (q-tile of `BM` rows, head[, sequence]); the K/V windows stream through a `STAGES`-deep `cp.async` ring
//!   (or, `LOAD=tma` with `MMA=wgmma`, a ring of bulk tensor copies on full / empty mbarriers, see
//!   [`PrefillKnobs::load`]);
//!   `S = Q K^T` and `P V` run on `mma.sync` (`MMA=sync`, FA2 style) or on the Hopper warpgroup `wgmma`
//!   (`MMA=wgmma`, FA3 style: one warpgroup per 64 query rows, Q and K from swizzled shared 64-column chunks,
//!   P from registers, V read N-contiguous; `OVERLAP` runs each tile's softmax while the previous tile's
//!   `P V` is in flight); the online softmax works in the log2 domain with `tau * log2(e)`
//!   folded into the scores; causal masking is bottom-right aligned, fully masked KV tiles are skipped by the
//!   loop bounds and only tiles crossing the diagonal (or the end of the keys) pay for the mask. The sigmoid
//!   gate is fused in the epilogue: `o = (acc / l) * sigmoid(z)`. Varlen: the grid is (q-tile, head,
//!   sequence) with `MAX_SEQLEN_Q` bounding the q-tiles; blocks past their sequence's end exit at once.
//! * [`build_decode`]: absorbed MQA decode over the paged latent cache (`d = 576`, values the first 512
//!   columns of the same cache rows). The `s_q * H` query rows of one request are packed into the M dimension
//!   (row `r` = query `r / H`, head `r % H`); the grid is (m-tile, split, request) and split `s` of a request
//!   handles a contiguous range of its KV tiles, writing a normalised f32 partial output and its log2-domain
//!   LSE to workspace tensors (`NSPLIT` is a runtime dimension bound by the workspace shape; see
//!   [`decode_num_splits`]). The `BM x 512` value accumulator is spread over `[WM, WN]` warps (as eight
//!   64-column tiles); the softmax needs whole score rows on `[WM, 1]` warps, which either every column group
//!   computes for itself (`SCORES=replicated`) or `SWN` (default all `WN`) column groups compute a column
//!   slice each of and exchange through shared memory (`SCORES=shared`; no redundant tensor-core work when
//!   `SWN = WN`, `WN / SWN` warps sharing a slice otherwise, which lets 32-key stages run on 4 warps and two
//!   92 KB blocks share an SM). `QK_ACCS` partial score tiles shorten the tensor-core dependency chains of the
//!   576-deep score product; `BT_PREFETCH` reads each tile's block-table entry one iteration early. The split
//!   count fills `SMs x` [`decode_blocks_per_sm`] block slots. [`build_decode_direct`] is the same kernel for
//!   one split and one query per request, writing the final `o` and `lse` itself (no combine). `MMA=wgmma`
//!   (the automatic choice, [`decode_knobs_for_rows`]) runs both on the Hopper warpgroup instructions instead:
//!   one warpgroup per 64 packed rows, `S = Q K^T` from the swizzled Q chunks and the stage's K chunks, the
//!   softmax on the score accumulator, `O += P V` with P in registers and V the first 512 columns of the same
//!   stage; the `BM x 512` accumulator does not fit a warpgroup, so the grid's x also splits the value columns
//!   into `DVS` slices (each recomputing the scores of its rows), or `VWG=2` puts two warpgroups on one Q tile and
//!   K/V ring, each multiplying 32 of every 64 value columns: both compute the scores (`SCORES=replicated`), or
//!   warpgroup 0 alone does (`SCORES=shared`, a [`Stmt::FirstWarpgroups`] body) and passes P and the row scale
//!   through shared memory. `OVERLAP` issues tile j's score product before tile j-1's `P V` and runs tile j's
//!   softmax while `P V` is in flight; `SOFTMAX=fast` folds the scale into the exponent (as the prefill's);
//!   `LOAD=tma` fills the K/V ring by bulk tensor copies of page rows on full / empty mbarriers.
//! * [`build_decode_combine`]: the log-sum-exp merge of the splits (trivial for one split), writing
//!   `o [B, s_q, H, 512]` bf16 and `lse [B, H, s_q]` f32 (natural log); `BC` value columns per block.
//! * [`build_gate`]: the decode-side output projection `y = sigmoid(z) * (o_latent @ W_UV[h]^T)`, a per-head
//!   GEMM with the gate fused in its epilogue.
//!
//! Conventions shared by all kernels: a query row with no visible key gets `o = 0` and `lse = +inf`; the
//! softmax scale is a float scalar argument `scale` (it must be finite and > 0).
//!
//! Files: this module holds what the kernels share (the online softmax, score masking, the knob words [`Mma`]
//! and [`Softmax`] of both attention kernels); `prefill.rs`, `decode/` (the mma.sync kernel, the K/V ring, the
//! split rule and the combine in `mod.rs`, the wgmma kernel and its tile schedules in `wgmma.rs`) and `gate.rs`
//! build the kernels, each family's knobs declared once in its `knobs.rs` (the gate's in `gate.rs`, the
//! combine's in `decode/combine.rs`); [`ops`] wraps them as the operators `gated_mla.prefill`,
//! `gated_mla.decode` and `gated_mla.gate`.

use crate::OpError;
use crate::typed_knobs::{knob_enum, knob_set};
use k3k_ir::*;
use std::f64::consts::{LN_2, LOG2_E};

mod decode;
mod gate;
pub mod ops;
mod prefill;

pub use decode::*;
pub use gate::*;
pub use prefill::*;

const NEG_INF: f64 = f64::NEG_INFINITY;
const POS_INF: f64 = f64::INFINITY;

/// Column width of the shared chunks the score product walks (and of each value accumulator tile).
const KC: u32 = 64;

/// The tensor-core product `qk_chunks` issues per chunk.
#[derive(Clone, Copy)]
enum QkMma {
    /// `mma.sync` into the register tile (`s += ...`).
    Sync,
    /// Asynchronous wgmma products; the first chunk starts the accumulator (`s = ...`), the rest add to it.
    Async,
}

/// `s += Q K^T` (with [`QkMma::Async`]: `s = Q K^T`) over `n` KC-wide chunks: Q chunk c is tile c of `sq`, K
/// chunk c is tile `k_base + c` of `sk` (stored `[BN, KC]`, read transposed). Rolled by default: fully unrolling
/// the 576-deep decode product lets ptxas hoist so many fragment loads that it runs out of registers; the 192-deep
/// prefill product may unroll (`QK_UNROLL`, measured 5-20% faster on an H200). Unrolled wgmma products keep their
/// operands in shared memory: their descriptors fold into constants plus the slot offset.
#[allow(clippy::too_many_arguments)]
fn qk_chunks(
    b: &mut KernelBuilder,
    s: TileId,
    sq: SharedId,
    sk: SharedId,
    k_base: Expr,
    n: u32,
    unroll: bool,
    mma: QkMma,
) {
    let chunk = |b: &mut KernelBuilder, c: Expr| {
        let qa = Operand::Shared { src: b.slot(sq, c.clone()), transpose: false };
        let kb = Operand::Shared { src: b.slot(sk, k_base.clone() + c.clone()), transpose: true };
        match mma {
            QkMma::Sync => b.mma(s, qa, kb),
            QkMma::Async => b.mma_async_init(s, qa, kb, c.gt(0i64)),
        }
    };
    if unroll {
        b.for_unrolled("chunk", 0i64, n as i64, 1i64, chunk);
    } else {
        b.for_("chunk", 0i64, n as i64, 1i64, chunk);
    }
}

fn invalid<T>(op: &'static str, knobs: &Knobs, why: String) -> Result<T, OpError> {
    Err(OpError::InvalidKnobs { op, knobs: knobs.to_string(), why })
}

fn rv(v: VecId) -> Expr {
    Expr::RowVal(v)
}

fn el(t: TileId) -> Expr {
    Expr::Elem(t)
}

fn load(t: TensorId, index: impl Into<Expr>) -> Expr {
    Expr::Load { tensor: t, index: Box::new(index.into()) }
}

/// The row vectors of an online softmax (all on the score tile's `[WM, 1]` warps) plus, when the value
/// accumulator lives on a wider warp grid, a copy of the rescale factor on the accumulator's warps.
struct OnlineSoftmax {
    /// Running row max of the log2-domain scores.
    m: VecId,
    m_prev: VecId,
    /// The max used as the exponent base (0 while a row has seen no key, so that -inf stays -inf).
    mu: VecId,
    alpha: VecId,
    /// Running row sum of `exp2(s - mu)`.
    l: VecId,
    /// `alpha` on the accumulator's warps (when they differ from the score tile's).
    alpha_acc: Option<VecId>,
}

impl OnlineSoftmax {
    fn new(b: &mut KernelBuilder, rows: u32, s_warps: [u32; 2], acc_warps: [u32; 2]) -> Self {
        let m = b.vec("m", rows, s_warps);
        let m_prev = b.vec("m_prev", rows, s_warps);
        let mu = b.vec("mu", rows, s_warps);
        let alpha = b.vec("alpha", rows, s_warps);
        let l = b.vec("l", rows, s_warps);
        let alpha_acc = (acc_warps != s_warps).then(|| b.vec("alpha_acc", rows, acc_warps));
        OnlineSoftmax { m, m_prev, mu, alpha, l, alpha_acc }
    }

    fn init(&self, b: &mut KernelBuilder) {
        b.vec_map(self.m, NEG_INF);
        b.vec_map(self.l, 0.0f64);
    }

    /// One KV tile: `s` holds log2-domain scores (-inf where masked). Updates m and l, overwrites `s` with
    /// `exp2(s - mu)` and writes its bf16 rounding to `p`, and rescales the accumulators by `exp2(m_old - mu)`.
    fn step(&self, b: &mut KernelBuilder, s: TileId, p: TileId, accs: &[TileId]) {
        self.step_scores(b, s);
        self.step_finish(b, s, p, accs);
    }

    /// The part of [`Self::step`] that touches neither `p` nor the accumulators (it may run while a product
    /// reading `p` into the accumulators is in flight): m, l, `alpha`, and `s = exp2(s - mu)`.
    fn step_scores(&self, b: &mut KernelBuilder, s: TileId) {
        b.vec_map(self.m_prev, rv(self.m));
        b.reduce(self.m, s, ReduceOp::Max, true);
        b.vec_map(self.mu, Expr::select(rv(self.m).eq(NEG_INF), 0.0f64, rv(self.m)));
        b.vec_map(self.alpha, (rv(self.m_prev) - rv(self.mu)).exp2());
        // The softmax sum is taken over the f32 probabilities (summing their bf16 roundings, the values the
        // tensor cores see, would put a ~2^-9 relative error into l and so an absolute one into the LSE).
        b.map(s, (el(s) - rv(self.mu)).exp2());
        b.vec_map(self.l, rv(self.l) * rv(self.alpha));
        b.reduce(self.l, s, ReduceOp::Sum, true);
    }

    /// The rest of [`Self::step`]: `p = bf16(s)` and the accumulators rescaled by `alpha`.
    fn step_finish(&self, b: &mut KernelBuilder, s: TileId, p: TileId, accs: &[TileId]) {
        b.map(p, el(s));
        let a = match self.alpha_acc {
            Some(aa) => {
                b.vec_map(aa, rv(self.alpha));
                aa
            }
            None => self.alpha,
        };
        for &acc in accs {
            b.map(acc, el(acc) * rv(a));
        }
    }

    /// `1 / l`, or 0 for a row that saw no key (its accumulator is 0 too).
    fn inv_l(&self) -> Expr {
        Expr::select(rv(self.l).gt(0.0f64), rv(self.l).recip(), 0.0f64)
    }

    /// The natural-log LSE (`+inf` for a row with no key).
    fn lse_nat(&self) -> Expr {
        Expr::select(rv(self.l).gt(0.0f64), (rv(self.m) + rv(self.l).log2()) * LN_2, POS_INF)
    }

    /// The log2-domain LSE (`-inf` for a row with no key: it carries no weight in a merge).
    fn lse_log2(&self) -> Expr {
        Expr::select(rv(self.l).gt(0.0f64), rv(self.m) + rv(self.l).log2(), NEG_INF)
    }
}

/// [`OnlineSoftmax::step_scores`] on raw scores `s` (-inf where masked) for `SOFTMAX=fast`: `m` is the running
/// max of the raw scores (`scale_log2 > 0` commutes with the max and with its rounding), `mu` the scaled base,
/// and the scale is folded into each exponent (one fused multiply-add and one `exp2_ftz` per score).
fn fast_step_scores(b: &mut KernelBuilder, sm: &OnlineSoftmax, s: TileId, scale_log2: Expr) {
    b.vec_map(sm.m_prev, rv(sm.m));
    b.reduce(sm.m, s, ReduceOp::Max, true);
    b.vec_map(sm.mu, Expr::select(rv(sm.m).eq(NEG_INF), 0.0f64, rv(sm.m) * scale_log2.clone()));
    b.vec_map(sm.alpha, (rv(sm.m_prev) * scale_log2.clone() - rv(sm.mu)).exp2_ftz());
    b.map(s, (el(s) * scale_log2 - rv(sm.mu)).exp2_ftz());
    b.vec_map(sm.l, rv(sm.l) * rv(sm.alpha));
    b.reduce(sm.l, s, ReduceOp::Sum, true);
}

/// A score tile `s` ready for the online softmax: `-inf` outside `visible` where `need_mask` (a block-uniform
/// bool; tiles that need no mask skip the select), and scaled by `scale_log2` into the log2 domain, unless `fast`
/// (raw scores for [`fast_step_scores`], which applies the scale inside the exponent).
fn mask_scores(b: &mut KernelBuilder, s: TileId, need_mask: Expr, visible: Expr, scale_log2: &Expr, fast: bool) {
    if fast {
        b.if_(need_mask, |b| b.map(s, Expr::select(visible, el(s), NEG_INF)));
    } else {
        b.if_else(
            need_mask,
            |b| b.map(s, Expr::select(visible, el(s) * scale_log2.clone(), NEG_INF)),
            |b| b.map(s, el(s) * scale_log2.clone()),
        );
    }
}

/// [`OnlineSoftmax::step_scores`], or [`fast_step_scores`] on raw scores when `fast`.
fn step_scores(b: &mut KernelBuilder, sm: &OnlineSoftmax, s: TileId, scale_log2: &Expr, fast: bool) {
    if fast {
        fast_step_scores(b, sm, s, scale_log2.clone());
    } else {
        sm.step_scores(b, s);
    }
}

knob_enum! {
    /// `MMA` (prefill and decode): the tensor-core instructions.
    pub enum Mma: str {
        /// `mma.sync` on warp tiles.
        Sync = "sync",
        /// The Hopper warpgroup instructions (`wgmma`), one warpgroup per 64 rows.
        Wgmma = "wgmma",
    }
}

knob_enum! {
    /// `SOFTMAX` (prefill and decode's wgmma kernel): how the online softmax scales the scores.
    pub enum Softmax: str {
        /// Scores scaled, then `exp2`.
        Exact = "exact",
        /// The row max of the raw scores, the scale folded into one fused multiply-add per exponent, `exp2_ftz`.
        Fast = "fast",
    }
}
