//! `gated_mla`: Multi-head Latent Attention with a sigmoid output gate (SPEC 2.4), written as IR tile programs.
//!
//! Five kernels:
//! * [`build_prefill`]: FlashAttention style prefill (MHA mode, `d_qk = 192`, `d_v = 128`). One block per
//!   (q-tile of `BM` rows, head[, sequence]); the K/V windows stream through a `STAGES`-deep `cp.async` ring
//!   (or, `LOAD=tma` with `MMA=wgmma`, a ring of bulk tensor copies on full / empty mbarriers, see
//!   [`PREFILL_LOAD_KNOB`]);
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

use crate::OpError;
use k3k_ir::*;
use std::f64::consts::{LN_2, LOG2_E};

const NEG_INF: f64 = f64::NEG_INFINITY;
const POS_INF: f64 = f64::INFINITY;

/// Column width of the shared chunks the score product walks (and of each value accumulator tile).
const KC: u32 = 64;

/// `s += Q K^T` over `n` KC-wide chunks: Q chunk c is tile c of `sq`, K chunk c is tile `k_base + c` of `sk`
/// (stored `[BN, KC]`, read transposed). Rolled by default: fully unrolling the 576-deep decode product lets
/// ptxas hoist so many fragment loads that it runs out of registers; the 192-deep prefill product may unroll
/// (`QK_UNROLL`, measured 5-20% faster on an H200).
fn qk_chunks(b: &mut KernelBuilder, s: TileId, sq: SharedId, sk: SharedId, k_base: Expr, n: u32, unroll: bool) {
    let chunk = |b: &mut KernelBuilder, c: Expr| {
        let qa = Operand::Shared { src: b.slot(sq, c.clone()), transpose: false };
        let kb = Operand::Shared { src: b.slot(sk, k_base + c), transpose: true };
        b.mma(s, qa, kb);
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

// =============================================================================================================
// Prefill
// =============================================================================================================

/// What a prefill kernel variant computes (fixed by the problem, not tuned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PrefillSpec {
    /// Bottom-right aligned causal mask (query i sees keys `j <= i + S - T`).
    pub causal: bool,
    /// Fuse the sigmoid output gate (`z: [T, H, DV]` logits).
    pub gate: bool,
    /// Variable length: `cu_seqlens_q / cu_seqlens_k: [N + 1] i32` split the packed rows into sequences.
    pub varlen: bool,
    /// Query/key head dim (192 for K3).
    pub dqk: u32,
    /// Value head dim (128 for K3).
    pub dv: u32,
}

impl PrefillSpec {
    /// The K3 head dims (192 / 128).
    pub fn new(causal: bool, gate: bool, varlen: bool) -> Self {
        PrefillSpec { causal, gate, varlen, dqk: 192, dv: 128 }
    }
}

/// The prefill tuning knobs.
///
/// `MMA` picks the tensor-core path: `sync` is the FlashAttention-2 style kernel on `mma.sync` (`WM` warps,
/// each owning `BM / WM` query rows), `wgmma` the FlashAttention-3 style kernel on the Hopper warpgroup
/// instructions: `BM / 64` warpgroups each owning 64 query rows (so `WM = BM / 16`), `S = Q K^T` from
/// shared memory, `O += P V` with P in registers and V read N-contiguous. `OVERLAP` (wgmma only) issues the
/// product `P V` of the previous KV tile together with the next score product and runs the softmax while it
/// is in flight (the V ring then runs one tile behind the K ring). `QORDER` (causal only) maps the block
/// index to (q-tile, head): `head` walks each head's q-tiles from the last (longest) to the first, head after
/// head; `lpt` walks all the q-tiles of a group of `HGROUP` heads longest first with the heads innermost
/// (FA3's LPT schedule), so the last wave holds only short tiles; `HGROUP` (optional, default 0) is the group
/// size, 0 meaning as many heads as keep 32 MB of K/V. `SOFTMAX=fast` (optional, default `exact`) runs the
/// online softmax on the raw scores: the row max is taken before scaling (the scale is positive), the scale
/// folds into the exponent (`exp2(s * tau log2 e - m * tau log2 e)`, one fused multiply-add), unmasked tiles
/// pay no scaling pass, and the exponentials are `exp2_ftz` (one MUFU.EX2, weights below 2^-126 flushed to 0,
/// where `exp2` adds a range test and two predicated multiplies). Knob sets without `MMA` / `OVERLAP` /
/// `QORDER` / `SOFTMAX` mean `sync` / false / `head` / `exact`. `SMGUARD=true` (`OVERLAP` only; optional, default
/// false) wraps each tile's softmax statistics and exponentials in an always-true guard (`kv0 < n_end`, which
/// holds for every tile of the loop): ptxas schedules the wait for the previous tile's `P V` at the top of the
/// basic block that holds it, which without the guard is the block of the softmax itself (so the softmax ran
/// after `P V`; SASS of the default: `WARPGROUP.DEPBAR.LE gsb0, 0x0` before the first row max), and with it is
/// the block after the softmax, so the exponentials run while `P V` is in flight.
pub fn prefill_knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("MMA", "tensor-core instructions (mma.sync or warpgroup wgmma)", ["sync", "wgmma"])
        .axis("BM", "query rows per block", [64i64, 128])
        .axis("BN", "keys per pipeline stage", [32i64, 64, 128])
        .axis("WM", "warps (each owns BM/WM query rows; wgmma: BM/16)", [4i64, 8])
        .axis("STAGES", "cp.async depth of the K/V ring", [2i64, 3])
        .axis("QK_UNROLL", "unroll the loop over the 64-column chunks of the score product", [true, false])
        .axis("OVERLAP", "wgmma: run the softmax while the previous tile's P V product is in flight", [false, true])
        .axis(
            "QORDER",
            "causal block order: per head, or longest tiles first over L2-sized head groups",
            ["head", "lpt"],
        )
        .axis(
            "SOFTMAX",
            "online softmax: scaled scores and exp2, or raw-score max with the scale in exp2_ftz",
            ["exact", "fast"],
        )
        .axis(
            "SMGUARD",
            "OVERLAP: the softmax in its own basic block, so that the P V wait stays after it",
            [false, true],
        )
        .axis(
            PREFILL_PINGPONG_KNOB,
            "OVERLAP: the warpgroups issue their products in turn (ping-pong), one's softmax under the other's \
             products",
            [false, true],
        )
        .axis(
            PREFILL_LOAD_KNOB,
            "wgmma: Q/K/V tiles by cp.async (every thread, commit groups and a block barrier per KV tile) or by TMA \
             (thread 0 issues bulk tensor copies completing on per-slot mbarriers)",
            ["cp_async", "tma"],
        )
}

/// The prefill knob `LOAD` (`cp_async` | `tma` | `auto`; absent = `cp_async`): how the Q tile and the K/V
/// ring reach shared memory. `tma` (MMA=wgmma only) has thread 0 issue one bulk tensor copy per 64-column
/// chunk (boxes `[64, 1, BM or BN]` over `[d, H, T or S]`, landing 128-byte-swizzled exactly as the wgmma
/// descriptors read them) completing on a full mbarrier per ring slot (separate ones for K and V, so the
/// overlapped schedule's V ring can run one tile behind); every thread arrives on the slot's empty mbarrier
/// once the product that read it has completed, and thread 0 waits for that before refilling the slot (no
/// block barrier in the KV loop). Rows past a sequence's end are loaded from the next sequence (or read as zero
/// past the tensor) and masked exactly like the zero rows of the cp.async path. `auto` (the default) is `tma`
/// for MMA=wgmma with at most two consumer warpgroups (BM <= 128; every such shape qualifies: the rows are
/// 384/256 bytes, the boxes at most 256 rows) and `cp_async` for MMA=sync (whose V tile has 256-byte rows) and
/// for BM=192 (whose TMA kernel spills under the 168-register cap); it is accepted but not an axis of
/// [`prefill_knob_space`] (it would duplicate points).
pub const PREFILL_LOAD_KNOB: &str = "LOAD";

/// The prefill knob `PRODUCER` (`thread` | `warp`; absent = `thread`), for the TMA kernel of at most two consumer
/// warpgroups (ignored elsewhere: cp.async, BM=192); `warp` in [`prefill_default_knobs`] since session 14 (H200, same
/// run: causal T8192 H96 3.9859 ms vs 4.3065, T32768 H12 6.9094 vs 7.5580; `results/bench/nvidia-h200/
/// session14-call2/`); not an axis of [`prefill_knob_space`] (on the cp.async points, half of the space, it would
/// duplicate kernels). Who issues the Q, K and V copies.
/// `thread`: thread 0, in the consumers' loop (its warp waits there for a slot's release). `warp`: a dedicated
/// producer warpgroup (warp specialization, [`Stmt::Producer`]) that runs the same loads ahead of the consumers as
/// far as the empty barriers let it.
pub const PREFILL_PRODUCER_KNOB: &str = "PRODUCER";

/// The prefill knob `PERSIST` (bool; absent = false): a persistent grid of one block per SM (`NUM_SMS`) that walks
/// the (q-tile, head) items head after head, each head's longest q-tile paired with its shortest, a pair per step,
/// `gridDim.x` pairs apart, instead of one block per item. The K / V ring and its barrier phases run on across items,
/// so the producer warpgroup loads the next item's first K / V tiles while the consumers finish the current one, and
/// its Q tile (a `q_empty` barrier, released once the item's last score product is complete) during the current
/// item's last softmax, P V product and epilogue, which reads the gate straight from global memory (the Q buffer may
/// already hold the next item's tile). For the overlapped wgmma kernel with `LOAD=tma`, `PRODUCER=warp` and
/// `QORDER=head` (an error elsewhere); varlen problems keep one block per item.
///
/// Measured slower, so neither a default nor an axis of [`prefill_knob_space`]: on the H200 (2026-12-04, session 15
/// call 6, same run against the defaults) causal T8192 H96 3.9228 ms vs 3.6674, T32768 H12 7.1403 vs 6.3995 (a plain
/// round robin over the longest-first order was 17% / 32% slower, call 3). The static walk leaves about 3% imbalance
/// by the arithmetic, and ncu (call 5) counted some 10% more instructions issued for the same work; where the rest
/// goes is not known. Kept as the base of a dynamic item scheduler (an atomic item counter, as in FA3), which needs
/// the item index handed from the producer to the consumers through shared memory.
pub const PREFILL_PERSIST_KNOB: &str = "PERSIST";

/// The prefill knob `PINGPONG` (bool; absent = false; `OVERLAP` with two or more consumer warpgroups): the
/// warpgroups issue each tile's products (`S = Q K^T` and the previous tile's `O += P V`) in turn
/// ([`Stmt::InTurn`], FlashAttention-3's ping-pong schedule), so that one warpgroup's products run on the tensor
/// cores while the other runs its softmax. The first KV tile is peeled off the loop (its turn holds the score
/// product only). In [`prefill_default_knobs`] since session 15 (H200, 2026-12-04, same run against the session 14
/// defaults: causal T8192 H96 3.7363 ms vs 3.9565, T32768 H12 6.5232 vs 6.9020; with the thread-0 producer 4.1346 vs
/// 4.2651; `results/bench/nvidia-h200/session15-call1/`). An error where it cannot apply (knob sets that change
/// `OVERLAP` or `WM` from the defaults say `PINGPONG=false`).
pub const PREFILL_PINGPONG_KNOB: &str = "PINGPONG";

/// The prefill knobs used when no tuning record exists: the wgmma kernel ([`prefill_wgmma_knobs`] with the
/// overlapped schedule, 0 spills at 192 registers; 4.97 ms causal T = 8192 H = 96 on an H200 against 8.73
/// for the mma.sync kernel, whose knobs are [`prefill_sync_knobs`]) with the causal blocks per head
/// (`QORDER=head`: on the H200, 2026-12-01, same run, it measured 4.933 ms at T8192 H96 and 9.229 at T32768 H12
/// against 4.977 / 9.300 for the LPT order, which stays in the knob space).
pub fn prefill_default_knobs() -> Knobs {
    // SOFTMAX=fast measured on the H200 (2026-12-01, same run): causal T8192 H96 4.825 ms against 4.983 exact,
    // T32768 H12 8.797 against 9.057 (SMGUARD=true was slower on both: 5.028 / 9.162).
    // LOAD=auto (TMA for the wgmma kernel) from the H200 (2026-12-01, session 5 call D, same run): T8192 H96 4.486
    // ms against 4.812 with cp.async, T32768 H12 7.912 against 8.663 (BN=64 STAGES=3 with TMA: 6.474 / 11.818).
    prefill_wgmma_knobs()
        .with("OVERLAP", true)
        .with("QORDER", "head")
        .with("SOFTMAX", "fast")
        .with(PREFILL_LOAD_KNOB, "auto")
        .with(PREFILL_PRODUCER_KNOB, "warp")
        .with(PREFILL_PINGPONG_KNOB, true)
}

/// The mma.sync prefill knobs (the fastest mma.sync point of a first sweep on an H200: 218 TFLOP/s causal at
/// T = 8192, H = 96; BM = 64 with 4 warps was 202).
pub fn prefill_sync_knobs() -> Knobs {
    Knobs::new()
        .with("MMA", "sync")
        .with("BM", 128i64)
        .with("BN", 64i64)
        .with("WM", 8i64)
        .with("STAGES", 2i64)
        .with("QK_UNROLL", true)
        .with("OVERLAP", false)
}

/// The plain (not overlapped) wgmma prefill knobs: two consumer warpgroups of 64 query rows, 128-key tiles in
/// a 2-deep ring.
pub fn prefill_wgmma_knobs() -> Knobs {
    Knobs::new()
        .with("MMA", "wgmma")
        .with("BM", 128i64)
        .with("BN", 128i64)
        .with("WM", 8i64)
        .with("STAGES", 2i64)
        .with("QK_UNROLL", true)
        .with("OVERLAP", false)
}

/// The `LOAD=tma` tensor maps and mbarriers of the prefill.
struct PrefillTma {
    qm: TmapId,
    km: TmapId,
    vm: TmapId,
    q_full: MbarId,
    /// PERSIST: the consumers release the Q tile after an item's last product.
    q_empty: Option<MbarId>,
    k_full: MbarId,
    k_empty: MbarId,
    v_full: MbarId,
    v_empty: MbarId,
}

struct PrefillCfg {
    bm: u32,
    bn: u32,
    wm: u32,
    stages: u32,
    qk_unroll: bool,
    wgmma: bool,
    overlap: bool,
    /// Causal only: longest-processing-time-first block order over L2-sized head groups (`QORDER=lpt`).
    qorder_lpt: bool,
    /// Heads per LPT group (`HGROUP`; 0: as many as fit [`L2_GROUP_BYTES`] of K/V).
    hgroup: u32,
    /// `SOFTMAX=fast`: max of the raw scores, scale folded into the exponent, `exp2_ftz`.
    fast_softmax: bool,
    /// `SMGUARD`: the overlapped softmax in its own basic block (see [`prefill_knob_space`]).
    smguard: bool,
    /// `LOAD=tma`: Q, K and V tiles by bulk tensor copies on mbarriers (see [`PREFILL_LOAD_KNOB`]).
    tma: bool,
    /// `PRODUCER=warp` (LOAD=tma): the copies come from a dedicated producer warpgroup (see
    /// [`PREFILL_PRODUCER_KNOB`]).
    producer_warp: bool,
    /// `PINGPONG` (OVERLAP, two or more warpgroups): the warpgroups issue their products in turn.
    pingpong: bool,
    /// `PERSIST` (fixed lengths): one block per SM walks the (q-tile, head) items (see [`PREFILL_PERSIST_KNOB`]).
    persist: bool,
}

/// The K/V bytes an LPT head group may keep in L2 (FA3's 32 MB rule).
const L2_GROUP_BYTES: i64 = 32 << 20;

fn prefill_cfg(spec: &PrefillSpec, k: &Knobs) -> Result<PrefillCfg, OpError> {
    const OP: &str = "gated_mla_prefill";
    let wgmma = opt_choice(OP, k, "MMA", "sync", "wgmma")?;
    let overlap = opt_bool(k, "OVERLAP")?;
    let c = PrefillCfg {
        bm: k.u32("BM")?,
        bn: k.u32("BN")?,
        wm: k.u32("WM")?,
        stages: k.u32("STAGES")?,
        qk_unroll: k.bool("QK_UNROLL")?,
        wgmma,
        overlap,
        qorder_lpt: opt_choice(OP, k, "QORDER", "head", "lpt")?,
        hgroup: opt_u32(k, "HGROUP", 0)?,
        fast_softmax: opt_choice(OP, k, "SOFTMAX", "exact", "fast")?,
        smguard: opt_bool(k, "SMGUARD")?,
        tma: match k.0.get(PREFILL_LOAD_KNOB) {
            None => false,
            Some(_) => match k.str(PREFILL_LOAD_KNOB)? {
                "cp_async" => false,
                "tma" => true,
                // Three consumer warpgroups (BM=192) run under the 168-register cap of 384 threads, where the
                // TMA kernel spills (92 bytes at BN=96, ptxas sm_90a): auto keeps cp.async there.
                "auto" => wgmma && k.u32("BM")? <= 128,
                other => return invalid(OP, k, format!("LOAD={other}: cp_async, tma or auto")),
            },
        },
        producer_warp: opt_choice(OP, k, PREFILL_PRODUCER_KNOB, "thread", "warp")?,
        pingpong: opt_bool(k, PREFILL_PINGPONG_KNOB)?,
        persist: opt_bool(k, PREFILL_PERSIST_KNOB)?,
    };
    // PRODUCER=warp applies to the TMA kernel of one or two consumer warpgroups: cp.async has no copies to hand to a
    // producer warp, and three consumer warpgroups (BM=192) spill under the producer's 512-thread launch (144
    // bytes at BN=64, ptxas sm_90a, even with setmaxnreg); elsewhere it is ignored, as `LOAD=auto` is.
    let c = PrefillCfg { producer_warp: c.producer_warp && c.tma && c.wm * 32 <= 256, ..c };
    if c.producer_warp && !(c.wm * 32).is_multiple_of(128) {
        return invalid(
            OP,
            k,
            format!("PRODUCER=warp needs whole consumer warpgroups (WM a multiple of 4, got {})", c.wm),
        );
    }
    if c.tma && !c.wgmma {
        return invalid(
            OP,
            k,
            "LOAD=tma needs MMA=wgmma (the copy engine writes 128-byte swizzled rows; the mma.sync V tile has 256-byte rows)"
                .into(),
        );
    }
    if c.wm == 0 || c.wm > 16 || c.bm == 0 || !c.bm.is_multiple_of(16 * c.wm) {
        return invalid(OP, k, format!("BM={} must be a positive multiple of 16*WM (WM={} in 1..=16)", c.bm, c.wm));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(16) {
        return invalid(OP, k, format!("BN={} must be a positive multiple of 16", c.bn));
    }
    if c.stages < 2 {
        return invalid(OP, k, "STAGES >= 2".into());
    }
    if !spec.dqk.is_multiple_of(KC) || !spec.dv.is_multiple_of(KC) || spec.dv > spec.dqk {
        return invalid(OP, k, format!("head dims {}/{}: multiples of {KC} with dv <= dqk", spec.dqk, spec.dv));
    }
    if c.overlap && !c.wgmma {
        return invalid(OP, k, "OVERLAP needs MMA=wgmma".into());
    }
    if c.smguard && !c.overlap {
        return invalid(OP, k, "SMGUARD needs OVERLAP=true".into());
    }
    if c.persist && !(c.tma && c.producer_warp && c.overlap && c.wgmma && !c.qorder_lpt) {
        return invalid(
            OP,
            k,
            "PERSIST needs the overlapped wgmma kernel with LOAD=tma, PRODUCER=warp and QORDER=head".into(),
        );
    }
    // Varlen items have per-sequence lengths: the block-per-item grid stays.
    let c = PrefillCfg { persist: c.persist && !spec.varlen, ..c };
    if c.pingpong && !(c.overlap && c.wm >= 8) {
        return invalid(
            OP,
            k,
            format!("PINGPONG needs OVERLAP=true and two or more warpgroups to take turns (WM >= 8, got {})", c.wm),
        );
    }
    let rows = c.bm / c.wm;
    if c.wgmma {
        // One warpgroup per 64 query rows; every warp holds 16 rows of S, P and O.
        if c.bm != 64 * (c.wm / 4) || !c.wm.is_multiple_of(4) {
            return invalid(OP, k, format!("MMA=wgmma: BM={} must be 64 rows per warpgroup (WM = BM/16)", c.bm));
        }
        if c.bn > 256 {
            return invalid(OP, k, format!("MMA=wgmma: BN={} (the score product's N) at most 256", c.bn));
        }
        // S (f32), P (bf16 pairs) and O: with one warpgroup per 64 rows ptxas needs roughly another 60 for
        // addresses, descriptors and the row statistics.
        let regs = rows * c.bn / 32 + rows * c.bn / 64 + rows * spec.dv / 32;
        if regs > 176 {
            return invalid(OP, k, format!("{regs} tile registers per thread (max 176 for wgmma)"));
        }
    } else {
        // Per-thread registers of the score tile (f32), P (bf16 pairs) and the accumulators: ptxas needs about
        // as many again for fragments and addresses (measured: 112 tile registers assemble to ~254).
        let regs = rows * c.bn / 32 + rows * c.bn / 64 + rows * spec.dv / 32;
        if regs > 128 {
            return invalid(OP, k, format!("{regs} tile registers per thread (max 128)"));
        }
    }
    // LOAD=tma adds the mbarriers: one for Q, full and empty ones per K and per V slot.
    let mbar_bytes = if c.tma { 8 * (1 + 4 * c.stages as usize) } else { 0 };
    let smem = 2 * (c.bm * spec.dqk + c.stages * c.bn * (spec.dqk + spec.dv)) as usize + mbar_bytes;
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, k, format!("{smem} bytes of shared memory"));
    }
    Ok(c)
}

/// Build a prefill kernel.
///
/// Tensor arguments, in order: `q [T, H, DQK]`, `k [S, H, DQK]`, `v [S, H, DV]` (bf16), then for varlen
/// `cu_seqlens_q [N1]`, `cu_seqlens_k [N1]` (i32, N1 = sequences + 1; T and S are then the packed totals TQ
/// and TK), then `z [T, H, DV]` bf16 when gated, then the outputs `o [T, H, DV]` bf16 and `lse [H, T]` f32.
/// Scalars: `scale` (float, tau) and for varlen `MAX_SEQLEN_Q` (int, the longest query sequence).
/// Grid: `(ceil(T / BM), H, 1)`, or `(ceil(MAX_SEQLEN_Q / BM), H, N1 - 1)`; q-tiles are walked from the last
/// to the first so that the longest causal tiles start first (per head, or across head groups: `QORDER`).
pub fn build_prefill(spec: &PrefillSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    let c = prefill_cfg(spec, knobs)?;
    let (bm, bn, st) = (c.bm, c.bn, c.stages);
    let (dqk, dv) = (spec.dqk, spec.dv);
    let name = format!(
        "k3k_mla_prefill_{}{}{}_d{}_{}_{}",
        if spec.causal { "causal" } else { "full" },
        if spec.gate { "_gated" } else { "" },
        if spec.varlen { "_varlen" } else { "" },
        dqk,
        dv,
        knobs.id().to_lowercase()
    );
    let mut b = KernelBuilder::new(&name, 32 * c.wm);
    b.knobs(knobs.clone());
    if c.producer_warp {
        b.producer_warp();
    }
    let (tq, tk) = if spec.varlen { (b.dim("TQ"), b.dim("TK")) } else { (b.dim("T"), b.dim("S")) };
    let h = b.dim("H");
    let q = b.tensor("q", DType::Bf16, &[tq.clone(), h.clone(), Expr::from(dqk)], Access::Read);
    let k = b.tensor("k", DType::Bf16, &[tk.clone(), h.clone(), Expr::from(dqk)], Access::Read);
    let v = b.tensor("v", DType::Bf16, &[tk.clone(), h.clone(), Expr::from(dv)], Access::Read);
    let cu = if spec.varlen {
        let n1 = b.dim("N1");
        let cq = b.tensor("cu_seqlens_q", DType::I32, std::slice::from_ref(&n1), Access::Read);
        let ck = b.tensor("cu_seqlens_k", DType::I32, std::slice::from_ref(&n1), Access::Read);
        Some((cq, ck, n1))
    } else {
        None
    };
    let z = spec.gate.then(|| b.tensor("z", DType::Bf16, &[tq.clone(), h.clone(), Expr::from(dv)], Access::Read));
    let o = b.tensor("o", DType::Bf16, &[tq.clone(), h.clone(), Expr::from(dv)], Access::Write);
    let lse = b.tensor("lse", DType::F32, &[h.clone(), tq.clone()], Access::Write);
    let scale = b.float_arg("scale");
    match &cu {
        Some((_, _, n1)) => {
            let max_q = b.int_arg("MAX_SEQLEN_Q");
            b.grid(max_q.ceil_div(bm as i64), h.clone(), n1.clone() - 1i64);
        }
        None if c.persist => {
            // One block per SM (at least one, at most one per pair of items).
            let items = (tq.ceil_div(bm as i64) * h.clone()).ceil_div(2i64);
            let num_sms = b.int_arg(NUM_SMS);
            b.grid(num_sms.min(items).max(1i64), 1i64, 1i64);
        }
        None => b.grid(tq.ceil_div(bm as i64), h.clone(), 1i64),
    }

    let warps = [c.wm, 1];
    // Q and K are stored as KC-column chunks so that the score product can walk them in a rolled loop.
    let (nqk, nv) = (dqk / KC, dv / KC);
    let sq = b.shared("sQ", DType::Bf16, bm, KC, nqk, Swizzle::Xor16B);
    let sk = b.shared("sK", DType::Bf16, bn, KC, st * nqk, Swizzle::Xor16B);
    // wgmma reads V N-contiguous in 64-column slices of 128-byte rows (tile `slot * nv + c`); mma.sync reads
    // a whole [BN, DV] stage.
    let sv = if c.wgmma {
        b.shared("sV", DType::Bf16, bn, KC, st * nv, Swizzle::Xor16B)
    } else {
        b.shared("sV", DType::Bf16, bn, dv, st, Swizzle::Xor16B)
    };
    // LOAD=tma: maps over q / k / v ([d, H, T or S] innermost first) with boxes of one 64-column chunk of one
    // head's BM or BN rows, a barrier for the Q tile, and full / empty barriers per K and per V ring slot.
    let tma = c.tma.then(|| PrefillTma {
        qm: b.tensor_map("q_map", q, &[KC, 1, bm], Swizzle::Xor16B),
        km: b.tensor_map("k_map", k, &[KC, 1, bn], Swizzle::Xor16B),
        vm: b.tensor_map("v_map", v, &[KC, 1, bn], Swizzle::Xor16B),
        q_full: b.mbarriers("q_full", 1),
        q_empty: c.persist.then(|| b.mbarriers("q_empty", 1)),
        k_full: b.mbarriers("k_full", st),
        k_empty: b.mbarriers("k_empty", st),
        v_full: b.mbarriers("v_full", st),
        v_empty: b.mbarriers("v_empty", st),
    });
    let s = b.tile("s", DType::F32, bm, bn, warps);
    let p = b.tile("p", DType::Bf16, bm, bn, warps);
    let accs: Vec<TileId> = (0..nv).map(|c| b.tile(&format!("acc{c}"), DType::F32, bm, KC, warps)).collect();
    let zt = spec.gate.then(|| b.tile("zt", DType::Bf16, bm, KC, warps));
    let sm = OnlineSoftmax::new(&mut b, bm, warps, warps);
    let inv_l = b.vec("inv_l", bm, warps);
    let lse_v = b.vec("lse_rows", bm, warps);

    let (q_start, t_n, k_start, s_n) = match &cu {
        Some((cq, ck, _)) => {
            let n = Expr::block_idx(2);
            let q0 = b.let_("q_start", load(*cq, n.clone()));
            let t_n = b.let_("t_n", load(*cq, n.clone() + 1i64) - q0.clone());
            let k0 = b.let_("k_start", load(*ck, n.clone()));
            let s_n = b.let_("s_n", load(*ck, n + 1i64) - k0.clone());
            (q0, t_n, k0, s_n)
        }
        None => (Expr::Int(0), tq.clone(), Expr::Int(0), tk.clone()),
    };
    // PERSIST: the items' coordinates come inside the walk; the ring's running stage count `kbase` (K / V tiles of
    // earlier items of this block) and the item count (the Q barriers' phases) carry across items.
    let walk = c.persist.then(|| {
        let scale_log2 = b.let_("scale_log2", scale.clone() * LOG2_E);
        (scale_log2, b.let_var("kbase", 0i64), b.let_var("item", 0i64))
    });
    // One block per item (no PERSIST): the item's first query row and head from the block index.
    let block_item = walk.is_none().then(|| {
        let (mt, hh) = if spec.causal && c.qorder_lpt {
            // Longest tiles first over groups of `g` heads (FA3's LPT order): the linear block index walks the
            // q-tiles from the last to the first with the heads of a group innermost, so the tail wave holds only
            // the shortest tiles; a group's K/V (g heads of `s_n` keys) is sized to stay in L2.
            let g = if c.hgroup > 0 {
                h.clone().min(c.hgroup as i64)
            } else {
                let per_head = s_n.clone().max(1i64) * (2 * (dqk + dv)) as i64;
                (Expr::Int(L2_GROUP_BYTES) / per_head).min(h.clone()).max(1i64)
            };
            let g = b.let_("hgroup", g);
            let nq = Expr::grid_dim(0);
            let lin = b.let_("lin", Expr::block_idx(0) + nq.clone() * Expr::block_idx(1));
            let per_group = g.clone() * nq.clone();
            let h0 = b.let_("h0", lin.clone() / per_group.clone() * g.clone());
            let within = b.let_("within", lin % per_group);
            let hig = b.let_("heads_in_group", g.min(h.clone() - h0.clone()));
            let mt = b.let_("mt", nq - 1i64 - within.clone() / hig.clone());
            let hh = b.let_("head", h0 + within % hig);
            (mt, hh)
        } else {
            let mt = b.let_("mt", Expr::grid_dim(0) - 1i64 - Expr::block_idx(0));
            let hh = b.let_("head", Expr::block_idx(1));
            (mt, hh)
        };
        (b.let_("m0", mt * bm as i64), hh)
    });
    let scale_log2 = match &walk {
        Some((sl, _, _)) => sl.clone(),
        None => b.let_("scale_log2", scale * LOG2_E),
    };
    // The ring use of K / V tile `kt` of the item (PERSIST: after the earlier items' tiles), its slot and the parity
    // of its phase (PERSIST's uses are never negative: a mask and a shift at a power-of-two STAGES).
    let u = |kt: Expr| -> Expr {
        match &walk {
            Some((_, kbase, _)) => Expr::Var(*kbase) + kt,
            None => kt,
        }
    };
    let ring = StageRing::new(st, walk.is_some());
    let slot_of = |u: Expr| ring.slot(u);
    let phase_of = |u: Expr| ring.phase(u);

    let init_barriers = |b: &mut KernelBuilder, m: &PrefillTma| {
        b.mbar_init(m.q_full, 1);
        if let Some(qe) = m.q_empty {
            b.mbar_init(qe, 32 * c.wm);
        }
        b.mbar_init(m.k_full, 1);
        b.mbar_init(m.k_empty, 32 * c.wm);
        b.mbar_init(m.v_full, 1);
        b.mbar_init(m.v_empty, 32 * c.wm);
    };

    let body = |b: &mut KernelBuilder, m0: Expr, hh: Expr| {
        let rows_q = b.let_("rows_q", t_n.clone() - m0.clone());
        // Keys this q-tile may see: all, or up to the last row's diagonal (bottom-right aligned).
        let n_end = if spec.causal {
            let last = (m0.clone() + bm as i64).min(t_n.clone()) + s_n.clone() - t_n.clone();
            b.let_("n_end", last.min(s_n.clone()).max(0i64))
        } else {
            s_n.clone()
        };
        let n_tiles = b.let_("n_tiles", n_end.ceil_div(bn as i64));
        // The last key row 0 of the tile may see (causal); tiles ending after it need the mask.
        let diag = b.let_("diag", m0.clone() + s_n.clone() - t_n.clone());
        let row_stride_qk = h.clone() * dqk as i64;
        let row_stride_v = h.clone() * dv as i64;

        // Stage `kt` of a K or V ring: the tile's `n` 64-column chunks of a `[S, H, d]` tensor into its slot.
        let load_chunks = |b: &mut KernelBuilder, kt: Expr, t: TensorId, d: u32, n: u32, buf: SharedId| {
            let slot = slot_of(u(kt.clone()));
            let kv0 = kt.clone() * bn as i64;
            if let Some(m) = &tma {
                let (map, full, empty) = if t == k { (m.km, m.k_full, m.k_empty) } else { (m.vm, m.v_full, m.v_empty) };
                // Thread 0 waits until every thread has released the slot's previous use (tile kt - STAGES, phase
                // kt / STAGES - 1 of its empty barrier; a fresh barrier passes parity 1 at once), then announces
                // the stage's bytes (whole boxes: rows past the tensor's end arrive as zeros) and issues the copies.
                // Rows past the sequence's end come from the next sequence: masked like the cp.async zeros.
                b.mbar_wait_elected(empty, slot.clone(), ring.empty_parity(u(kt.clone())));
                b.mbar_arrive_expect_tx(full, slot.clone(), 2 * bn * d);
                for cc in 0..n {
                    let dst = b.slot(buf, slot.clone() * n as i64 + cc as i64);
                    let coords = vec![Expr::from((cc * KC) as i64), hh.clone(), k_start.clone() + kv0.clone()];
                    b.tma_load(map, dst, coords, full, slot.clone());
                }
                return;
            }
            for c in 0..n {
                let src = view(
                    t,
                    ((k_start.clone() + kv0.clone()) * h.clone() + hh.clone()) * d as i64 + (c * KC) as i64,
                    h.clone() * d as i64,
                    s_n.clone() - kv0.clone(),
                    KC as i64,
                    8,
                );
                let dst = b.slot(buf, slot.clone() * n as i64 + c as i64);
                b.copy_async(dst, src);
            }
        };
        let load_k = |b: &mut KernelBuilder, kt: Expr| load_chunks(b, kt, k, dqk, nqk, sk);
        let load_v = |b: &mut KernelBuilder, kt: Expr| {
            if c.wgmma {
                load_chunks(b, kt, v, dv, nv, sv);
            } else {
                let slot = kt.clone() % st as i64;
                let kv0 = kt * bn as i64;
                let vsrc = view(
                    v,
                    ((k_start.clone() + kv0.clone()) * h.clone() + hh.clone()) * dv as i64,
                    row_stride_v.clone(),
                    s_n.clone() - kv0,
                    dv as i64,
                    8,
                );
                let vd = b.slot(sv, slot);
                b.copy_async(vd, vsrc);
            }
        };
        let load_stage = |b: &mut KernelBuilder, kt: Expr| {
            load_k(b, kt.clone());
            load_v(b, kt);
        };

        // The Q tile: one box per 64-column chunk (rows past the sequence's end are never stored); PERSIST: once
        // the consumers have released the previous item's.
        let load_q = |b: &mut KernelBuilder, m: &PrefillTma| {
            b.producer_if(c.producer_warp, |b| {
                if let (Some(qe), Some((_, _, item))) = (m.q_empty, &walk) {
                    b.mbar_wait_elected(qe, 0i64, Expr::Var(*item).bitand(1i64).bitxor(1i64));
                }
                b.mbar_arrive_expect_tx(m.q_full, 0i64, 2 * bm * dqk);
                for cc in 0..nqk {
                    let dst = b.slot(sq, cc as i64);
                    let coords = vec![Expr::from((cc * KC) as i64), hh.clone(), q_start.clone() + m0.clone()];
                    b.tma_load(m.qm, dst, coords, m.q_full, 0i64);
                }
            });
        };
        // The Q tile's phase: the item's (PERSIST), else the only one.
        let q_parity = match &walk {
            Some((_, _, item)) => Expr::Var(*item).bitand(1i64),
            None => Expr::Int(0),
        };
        if let Some(m) = &tma
            && walk.is_none()
        {
            init_barriers(b, m);
            load_q(b, m);
        }
        // Q tile (first commit group, with KV stage 0).
        for c in (0..nqk).filter(|_| tma.is_none()) {
            let qsrc = view(
                q,
                ((q_start.clone() + m0.clone()) * h.clone() + hh.clone()) * dqk as i64 + (c * KC) as i64,
                row_stride_qk.clone(),
                rows_q.clone(),
                KC as i64,
                8,
            );
            let qd = b.slot(sq, c as i64);
            b.copy_async(qd, qsrc);
        }
        // Scale the raw scores into the log2 domain; mask only the tiles that cross the diagonal or the end
        // of the keys.
        let scale_mask = |b: &mut KernelBuilder, kv0: Expr| {
            let tile_end = kv0.clone() + bn as i64;
            let need_mask = if spec.causal {
                tile_end.clone().gt(s_n.clone()).or((tile_end - 1i64).gt(diag.clone()))
            } else {
                tile_end.gt(s_n.clone())
            };
            let key = kv0 + Expr::ColIdx;
            let mut visible = key.lt(s_n.clone());
            if spec.causal {
                visible = visible.and(key.le(m0.clone() + Expr::RowIdx + s_n.clone() - t_n.clone()));
            }
            mask_scores(b, s, need_mask, visible, &scale_log2, c.fast_softmax);
        };
        let softmax_scores = |b: &mut KernelBuilder| step_scores(b, &sm, s, &scale_log2, c.fast_softmax);
        // wgmma: S = Q K^T over the three 64-column chunks (the first starts the tile), and O += P V per
        // 64-column value slice (B stored [keys, values]).
        let qk_async = |b: &mut KernelBuilder, slot: Expr| {
            let chunk = |b: &mut KernelBuilder, cc: Expr| {
                let qa = Operand::Shared { src: b.slot(sq, cc.clone()), transpose: false };
                let kb = Operand::Shared { src: b.slot(sk, slot.clone() * nqk as i64 + cc.clone()), transpose: true };
                b.mma_async_init(s, qa, kb, cc.gt(0i64));
            };
            if c.qk_unroll {
                b.for_unrolled("chunk", 0i64, nqk as i64, 1i64, chunk);
            } else {
                b.for_("chunk", 0i64, nqk as i64, 1i64, chunk);
            }
        };
        // The score product as three statements (no loop): inside a turn (PINGPONG), so that the renderer sees
        // which products the following wait leaves in flight.
        let qk_flat = |b: &mut KernelBuilder, slot: Expr| {
            for cc in 0..nqk as i64 {
                let qa = Operand::Shared { src: b.slot(sq, cc), transpose: false };
                let kb = Operand::Shared { src: b.slot(sk, slot.clone() * nqk as i64 + cc), transpose: true };
                b.mma_async_init(s, qa, kb, Expr::Bool(cc > 0));
            }
        };
        let pv_async = |b: &mut KernelBuilder, slot: Expr| {
            for (cv, &acc) in accs.iter().enumerate() {
                let vb = Operand::Shared { src: b.slot(sv, slot.clone() * nv as i64 + cv as i64), transpose: false };
                b.mma_async(acc, Operand::Reg(p), vb);
            }
        };
        if !c.wgmma || !c.overlap {
            // The ring prefetches STAGES - 1 tiles ahead.
            for i in 0..st - 1 {
                b.producer_if(c.producer_warp, |b| {
                    b.if_(Expr::Int(i as i64).lt(n_tiles.clone()), |b| load_stage(b, Expr::Int(i as i64)))
                });
                if tma.is_none() {
                    b.commit();
                }
            }
            sm.init(b);
            for &acc in &accs {
                b.map(acc, 0.0f64);
            }
            if let Some(m) = &tma {
                b.mbar_wait(m.q_full, 0i64, 0i64);
            }
            b.for_("kt", 0i64, n_tiles.clone(), 1i64, |b, kt| {
                if tma.is_none() {
                    b.wait(st - 2);
                    b.barrier();
                }
                // (LOAD=tma: thread 0 waits for the refilled slot's empty barriers instead.)
                let next = &kt + (st - 1) as i64;
                b.producer_if(c.producer_warp, |b| b.if_(next.lt(n_tiles.clone()), |b| load_stage(b, next.clone())));
                if tma.is_none() {
                    b.commit();
                }
                let slot = if c.wgmma { b.let_("slot", &kt % st as i64) } else { &kt % st as i64 };
                let parity = (&kt / st as i64) % 2i64;
                let kv0 = b.let_("kv0", &kt * bn as i64);
                if c.wgmma {
                    if let Some(m) = &tma {
                        b.mbar_wait(m.k_full, slot.clone(), parity.clone());
                    }
                    qk_async(b, slot.clone());
                    b.mma_wait(0);
                    // The score product is complete: release the K slot to the producer.
                    if let Some(m) = &tma {
                        b.mbar_arrive(m.k_empty, slot.clone());
                    }
                } else {
                    b.map(s, 0.0f64);
                    qk_chunks(b, s, sq, sk, slot.clone() * nqk as i64, nqk, c.qk_unroll);
                }
                scale_mask(b, kv0);
                softmax_scores(b);
                sm.step_finish(b, s, p, &accs);
                if c.wgmma {
                    if let Some(m) = &tma {
                        b.mbar_wait(m.v_full, slot.clone(), parity);
                    }
                    pv_async(b, slot.clone());
                    b.mma_wait(0);
                    if let Some(m) = &tma {
                        b.mbar_arrive(m.v_empty, slot);
                    }
                } else {
                    for (cv, &acc) in accs.iter().enumerate() {
                        let vb = Operand::Shared {
                            src: b.window(sv, slot.clone(), 0, cv as u32 * KC, bn, KC),
                            transpose: false,
                        };
                        b.mma(acc, Operand::Reg(p), vb);
                    }
                }
            });
        } else {
            // Overlapped wgmma: iteration kt issues S(kt) = Q K(kt)^T and then O += P(kt-1) V(kt-1), waits for
            // S only, runs the softmax of tile kt while P V is in flight, then waits for it and rescales O and
            // writes P(kt). V(kt-1) is still read during iteration kt, so the ring runs V one tile behind K:
            // commit group j holds K(j) and V(j-1), and iteration kt loads group kt + STAGES - 1 (K into the slot
            // of K(kt-1), read by S(kt-1); V into the slot of V(kt-2), read by P V in iteration kt-1), both
            // finished by every thread at the top barrier.
            // Group j >= 1 (group 0 holds K(0) and the Q tile).
            let load_group = |b: &mut KernelBuilder, j: Expr| {
                b.if_(j.clone().lt(n_tiles.clone()), |b| load_k(b, j.clone()));
                b.if_((j.clone() - 1i64).lt(n_tiles.clone()), |b| load_v(b, j.clone() - 1i64));
            };
            // LOAD=tma: the same schedule without commit groups or the block barrier: K(j) and V(j) complete on
            // the full barriers of slot j % STAGES; S(kt) waits for K(kt) and V(kt-1) (issued together), every
            // thread releases K(kt) once S(kt) is complete and V(kt-1) once P V(kt-1) is, and thread 0 waits for
            // those releases before loading K(kt + STAGES - 1) / V(kt + STAGES - 2) into the same slots.
            let commit = |b: &mut KernelBuilder| {
                if tma.is_none() {
                    b.commit();
                }
            };
            b.producer_if(c.producer_warp, |b| b.if_(Expr::Int(0).lt(n_tiles.clone()), |b| load_k(b, Expr::Int(0))));
            commit(b);
            // PERSIST: the next item's first K tile may load while the consumers still read this item's Q tile.
            if let Some(m) = &tma
                && walk.is_some()
            {
                load_q(b, m);
            }
            for j in 1..st - 1 {
                b.producer_if(c.producer_warp, |b| load_group(b, Expr::Int(j as i64)));
                commit(b);
            }
            sm.init(b);
            for &acc in &accs {
                b.map(acc, 0.0f64);
            }
            if let Some(m) = &tma {
                b.mbar_wait(m.q_full, 0i64, q_parity.clone());
            }
            // One KV tile. `later`: whether kt > 0 is known statically (PINGPONG peels the first tile, so that a
            // turn holds straight-line products and the P V wait knows which it leaves in flight), or tested.
            let iteration = |b: &mut KernelBuilder, kt: Expr, later: Option<bool>| {
                let if_later = |b: &mut KernelBuilder, f: &dyn Fn(&mut KernelBuilder)| match later {
                    None => b.if_(kt.clone().gt(0i64), |b| f(b)),
                    Some(true) => f(b),
                    Some(false) => {}
                };
                if tma.is_none() {
                    b.wait(st - 2);
                    b.barrier();
                }
                b.producer_if(c.producer_warp, |b| load_group(b, &kt + (st - 1) as i64));
                commit(b);
                let slot = b.let_("slot", slot_of(u(kt.clone())));
                let kv0 = b.let_("kv0", &kt * bn as i64);
                let prev = slot_of(u(kt.clone()) + (st - 1) as i64);
                if let Some(m) = &tma {
                    b.mbar_wait(m.k_full, slot.clone(), phase_of(u(kt.clone())));
                    if_later(b, &|b| b.mbar_wait(m.v_full, prev.clone(), phase_of(u(kt.clone()) - 1i64)));
                }
                match later {
                    None => {
                        qk_async(b, slot.clone());
                        b.if_else(
                            kt.clone().gt(0i64),
                            |b| {
                                pv_async(b, prev.clone());
                                // The score product's groups were committed first: at most the P V ones remain.
                                b.mma_wait(nv);
                            },
                            |b| b.mma_wait(0),
                        );
                    }
                    Some(later) => {
                        b.in_turn_if(c.pingpong, |b| {
                            qk_flat(b, slot.clone());
                            if later {
                                pv_async(b, prev.clone());
                            }
                        });
                        b.mma_wait(if later { nv } else { 0 });
                    }
                }
                if let Some(m) = &tma {
                    b.mbar_arrive(m.k_empty, slot.clone());
                    // PERSIST: the item's last score product is complete: release the Q tile, so that the next
                    // item's Q tile loads while this one finishes.
                    if let Some(qe) = m.q_empty {
                        b.if_(kt.clone().eq(n_tiles.clone() - 1i64), |b| b.mbar_arrive(qe, 0i64));
                    }
                }
                if c.smguard {
                    // Always true (kv0 < n_tiles * BN and n_tiles = ceil(n_end / BN)); see SMGUARD.
                    scale_mask(b, kv0.clone());
                    b.if_(kv0.lt(n_end.clone()), softmax_scores);
                } else {
                    scale_mask(b, kv0);
                    softmax_scores(b);
                }
                b.mma_wait(0);
                if let Some(m) = &tma {
                    if_later(b, &|b| b.mbar_arrive(m.v_empty, prev.clone()));
                }
                sm.step_finish(b, s, p, &accs);
            };
            if c.pingpong {
                b.if_(Expr::Int(0).lt(n_tiles.clone()), |b| iteration(b, Expr::Int(0), Some(false)));
                b.for_("kt", 1i64, n_tiles.clone(), 1i64, |b, kt| iteration(b, kt, Some(true)));
            } else {
                b.for_("kt", 0i64, n_tiles.clone(), 1i64, |b, kt| iteration(b, kt, None));
            }
            // The last tile's P V: its V is in group n_tiles, issued during the last iteration.
            b.if_(n_tiles.clone().gt(0i64), |b| {
                let last = slot_of(u(n_tiles.clone()) + (st - 1) as i64);
                match &tma {
                    Some(m) => b.mbar_wait(m.v_full, last.clone(), phase_of(u(n_tiles.clone()) - 1i64)),
                    None => {
                        b.wait(0);
                        b.barrier();
                    }
                }
                pv_async(b, last.clone());
                b.mma_wait(0);
                // PERSIST: the ring runs on into the next item.
                if let Some(m) = tma.as_ref().filter(|_| walk.is_some()) {
                    b.mbar_arrive(m.v_empty, last);
                }
            });
            // PERSIST: an item without keys releases its Q tile here.
            if let Some(qe) = tma.as_ref().and_then(|m| m.q_empty) {
                b.if_(n_tiles.clone().le(0i64), |b| b.mbar_arrive(qe, 0i64));
            }
        }
        if tma.is_none() {
            b.wait(0);
        }
        if c.fast_softmax {
            // The running max is in raw score units; the LSE wants it in the log2 domain (-inf stays -inf).
            b.vec_map(sm.m, rv(sm.m) * scale_log2.clone());
        }

        // Epilogue: o = acc / l (* sigmoid(z)), lse = ln(sum exp(tau q k)).
        b.vec_map(inv_l, sm.inv_l());
        let out_off = ((q_start.clone() + m0.clone()) * h.clone() + hh.clone()) * dv as i64;
        // (PERSIST: the Q buffer may already hold the next item's tile; the gate comes from global memory.)
        if let Some(z) = z.filter(|_| walk.is_none()) {
            // Stage the gate tile through the Q chunks (no longer read) with coalesced 16-byte copies.
            b.barrier();
            for c in 0..nv {
                let zsrc =
                    view(z, out_off.clone() + (c * KC) as i64, row_stride_v.clone(), rows_q.clone(), KC as i64, 8);
                let zd = b.slot(sq, c as i64);
                b.copy_async(zd, zsrc);
            }
            b.commit();
            b.wait(0);
            b.barrier();
        }
        for (c, &acc) in accs.iter().enumerate() {
            match zt {
                Some(zt) => {
                    let src = match (z, &walk) {
                        (Some(z), Some(_)) => Place::Global(view(
                            z,
                            out_off.clone() + (c * KC as usize) as i64,
                            row_stride_v.clone(),
                            rows_q.clone(),
                            KC as i64,
                            8,
                        )),
                        _ => Place::Shared(b.slot(sq, c as i64)),
                    };
                    b.load(zt, src);
                    b.map(acc, el(acc) * rv(inv_l) * el(zt).sigmoid());
                }
                None => b.map(acc, el(acc) * rv(inv_l)),
            }
            let dst =
                view(o, out_off.clone() + (c as u32 * KC) as i64, row_stride_v.clone(), rows_q.clone(), KC as i64, 8);
            b.store(acc, Place::Global(dst));
        }
        b.vec_map(lse_v, sm.lse_nat());
        b.store_vec(lse_v, vec_view(lse, hh.clone() * tq.clone() + q_start.clone() + m0.clone(), 1i64, rows_q));
        if let Some((_, kbase, item)) = &walk {
            b.assign(*kbase, Expr::Var(*kbase) + n_tiles.clone());
            b.assign(*item, Expr::Var(*item) + 1i64);
        }
    };
    match &walk {
        Some(_) => {
            // PERSIST: the barriers are initialized once. The items, head after head, pair each head's longest
            // q-tile with its shortest (the last with the first, the next-to-last with the second, ...: items 2i
            // and 2i + 1 of a head hold about nq + 1 KV tiles together), and block b takes pairs b, b +
            // gridDim.x, ...: equal work per pair, so a static walk balances (a plain round robin over the
            // longest-first order left 17% more work on the busiest block at T32768 H12).
            if let Some(m) = &tma {
                init_barriers(&mut b, m);
            }
            let nq = b.let_("n_qtiles", tq.ceil_div(bm as i64));
            let items = b.let_("items", nq.clone() * h.clone());
            b.for_("pair", Expr::block_idx(0), items.clone().ceil_div(2i64), Expr::grid_dim(0), |b, pair| {
                b.for_("half", 0i64, 2i64, 1i64, |b, half| {
                    let w = b.let_("w", pair.clone() * 2i64 + half);
                    b.if_(w.clone().lt(items.clone()), |b| {
                        let i = b.let_("i", w.clone() % nq.clone());
                        let mt = b.let_(
                            "mt",
                            Expr::select(
                                (i.clone() % 2i64).eq(0i64),
                                nq.clone() - 1i64 - i.clone() / 2i64,
                                i.clone() / 2i64,
                            ),
                        );
                        let hh = b.let_("head", w / nq.clone());
                        let m0 = b.let_("m0", mt * bm as i64);
                        body(b, m0, hh);
                    });
                });
            });
        }
        None => {
            let (m0, hh) = block_item.expect("a block per item without PERSIST");
            if spec.varlen {
                b.if_(m0.lt(t_n.clone()), |b| body(b, m0.clone(), hh.clone()));
            } else {
                body(&mut b, m0, hh);
            }
        }
    }
    Ok(b.finish()?)
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

// =============================================================================================================
// Decode (absorbed MQA over the paged latent cache), split-KV
// =============================================================================================================

/// What a decode kernel variant computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DecodeSpec {
    /// Query / cache row width (576 = 512 latent + 64 rope for K3).
    pub d: u32,
    /// Value width: the first `dv` columns of each cache row (512).
    pub dv: u32,
    /// Rows per cache page (64, as FlashMLA).
    pub page: u32,
}

impl Default for DecodeSpec {
    fn default() -> Self {
        DecodeSpec { d: 576, dv: 512, page: 64 }
    }
}

/// The decode tuning knobs.
pub fn decode_knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("BM", "packed (query, head) rows per block", [16i64, 32, 48, 64])
        .axis(
            "BN",
            "keys per pipeline stage (divides the page; 16 only with replicated scores or MMA=wgmma)",
            [16i64, 32, 64],
        )
        .axis("WM", "warp rows: the score tile is on [WM, 1] warps", [1i64, 2, 3, 4])
        .axis("WN", "warp columns splitting the 512 value columns", [1i64, 2, 4])
        .axis(
            "STAGES",
            "cp.async depth of the KV ring (STAGES - 1 tiles in flight while one is used: 4 at BN = 32 keeps three \
             37 KB tiles in flight in the shared memory of two 64-key stages)",
            [2i64, 3, 4],
        )
        .axis(
            "SCORES",
            "replicated: every warp column group computes the [BM, BN] scores of its rows itself; shared: the \
             WN groups split the score columns and exchange them through shared memory (MMA=wgmma, VWG=2: \
             warpgroup 0 alone computes the scores and the softmax and shares P and the row scale through shared \
             memory; both warpgroups multiply their value columns)",
            ["replicated", "shared"],
        )
        .axis(
            "SWN",
            "SCORES=shared: warp column groups that split the score columns (0: all WN; fewer lets BN = 32 run \
             on 4 warps, each pair computing the same 16 columns, so that two blocks fit an SM)",
            [0i64, 2],
        )
        .axis(
            "BT_PREFETCH",
            "1: read the block-table entry of the next tile to load one loop iteration early (0: right before its \
             copies, which then wait for the load)",
            [0i64, 1],
        )
        .axis(
            "QK_ACCS",
            "independent partial score accumulators the 9 chunks of the 576-deep score product rotate over \
             (shorter tensor-core dependency chains; summed before the softmax)",
            [1i64, 3],
        )
        .axis(
            "MMA",
            "sync: mma.sync on [WM, WN] warps (16-row warp tiles); wgmma: the Hopper warpgroup instructions, BM / 64 \
             warpgroups of 64 packed rows on [BM / 16, 1] warps (WN=1; SCORES=shared only with VWG=2), the [BM, BN] \
             scores and a DV / DVS value slice per block, K and V from the same shared stage",
            ["sync", "wgmma"],
        )
        .axis(
            "DVS",
            "MMA=wgmma: value-column splits, one block each (the grid's x covers m-tiles times DVS; every split \
             recomputes the scores of its rows): the accumulator is BM x DV / DVS",
            [1i64, 2, 4],
        )
        .axis(
            "QK_UNROLL",
            "MMA=wgmma: 1 unrolls the 9 asynchronous score products of a tile (their shared-memory descriptors \
             become constants plus the slot offset); 0 keeps the loop rolled",
            [0i64, 1],
        )
        .axis(
            "OVERLAP",
            "MMA=wgmma: issue tile j's score product, then tile j-1's P V product, and run tile j's softmax while \
             P V is in flight (K and V share a stage, so the ring holds two tiles in use and loads STAGES - 2 ahead: \
             STAGES >= 3); with SCORES=shared, every warpgroup's tile j-1 P V runs under warpgroup 0's tile j \
             softmax",
            [false, true],
        )
        .axis(
            "VWG",
            "MMA=wgmma, BM=64: warpgroups per block sharing its Q tile and K/V stages; each computes the scores and \
             32 of every 64 value columns (DVS=1 at VWG=2 holds all 512 columns in 128 registers per thread)",
            [1i64, 2],
        )
        .axis(
            "SOFTMAX",
            "MMA=wgmma: exact (scores scaled, then exp2) or fast (max of the raw scores, the scale folded into one \
             fused multiply-add per exponent, exp2_ftz)",
            ["exact", "fast"],
        )
        .axis(
            "LOAD",
            "the K/V ring by cp.async (every thread copies 16-byte chunks; a wait and a block barrier per tile) or \
             tma (thread 0 issues one bulk tensor copy per 64-column chunk of a page, on per-slot full / empty \
             mbarriers; MMA=wgmma: no block barrier, the warpgroups only meet where they exchange data)",
            ["cp_async", "tma"],
        )
}

/// The wgmma decode knobs: one warpgroup of 64 packed rows per block, 64-key stages (72 KB each) in a 2-deep
/// ring beside the 72 KB Q tile, the value columns in `dvs` slices (128 accumulator registers per thread at
/// `dvs = 2`), the 9 score products unrolled (ptxas sm_90a: 238 registers, 0 spills at `dvs = 2`; the rolled
/// loop issues ~790 instructions per warp and tile for its 36 `wgmma`s, unrolled ~575).
pub fn decode_wgmma_knobs(dvs: i64) -> Knobs {
    Knobs::new()
        .with("MMA", "wgmma")
        .with("SCORES", "replicated")
        .with("BM", 64i64)
        .with("WM", 4i64)
        .with("WN", 1i64)
        .with("BN", 64i64)
        .with("STAGES", 2i64)
        .with("SWN", 0i64)
        .with("QK_ACCS", 1i64)
        .with("BT_PREFETCH", 0i64)
        .with("DVS", dvs)
        .with("QK_UNROLL", 1i64)
}

/// The decode knobs used when no tuning record exists: [`decode_knobs_for_rows`]`(16)`.
pub fn decode_default_knobs() -> Knobs {
    decode_knobs_for_rows(16)
}

/// The automatic decode knobs for `rows = s_q * H` packed query rows per request ([`decode_auto_wgmma_knobs`]
/// from 64 rows, one full warpgroup m-tile; below that the mma.sync kernel, [`decode_sync_knobs_for_rows`] with
/// `MMA=sync` spelled out). 2026-12-01, same run, b128 S4096: 96 heads 0.727 ms on the wgmma kernel of that day
/// against 0.838 for the sync BM=32 knobs; 12 heads 0.394 ms wgmma against 0.239 sync (a 64-row tile holds 12
/// useful rows).
pub fn decode_knobs_for_rows(rows: usize) -> Knobs {
    if rows >= 64 {
        decode_auto_wgmma_knobs()
    } else {
        decode_sync_knobs_for_rows(rows).with("MMA", "sync").with("DVS", 1i64).with("QK_UNROLL", 0i64)
    }
}

/// The automatic wgmma decode knobs: two warpgroups per block sharing its Q tile and K/V ring, each computing the
/// scores and 32 of every 64 value columns (`VWG=2`, all 512 columns in one block: `DVS=1`), the fast softmax and
/// the score loop rolled (254 registers, no spills). Measured on the H200 (2026-12-04, b128 S4096 H96, torch
/// decode path 0.760 ms; session 18): same run (call 2), VWG=2 DVS=1 **0.450 ms** against 0.578 for one
/// warpgroup per block and two value slices ([`decode_wgmma_knobs`]`(2)`, the automatic knobs before); same run
/// (call 3, these knobs, checked and fuzzed on the GPU in that call): **0.461** (0.4605 among the neighbours),
/// exact softmax rolled 0.457, fast softmax unrolled 0.441 (it spills 8 bytes in the direct kernel and 20 in the
/// split one at 255 registers: left to the tuner, as is the exact softmax unrolled, 0.450 in call 2, no spills),
/// 32-key stages 0.649.
pub fn decode_auto_wgmma_knobs() -> Knobs {
    decode_wgmma_knobs(1).with("VWG", 2i64).with("SOFTMAX", "fast").with("QK_UNROLL", 0i64)
}

/// The mma.sync decode knobs for `rows = s_q * H` packed query rows per request (the automatic knobs before
/// the wgmma kernel).
///
/// Up to 16 rows: BM = 16 on [1, 4] warps with 64-key stages (170 KB of shared memory, one block of 4 warps
/// per SM); more rows: BM = 32 on [2, 4] warps. The 32-key variant that fits two blocks per SM (`BN=32,
/// SWN=2, QK_ACCS=3, BT_PREFETCH=1`, 92 KB) was slower on the H200 (see the measurements below); it stays in the
/// knob space for the tuner.
pub fn decode_sync_knobs_for_rows(rows: usize) -> Knobs {
    // Measured on the H200 (2026-11-30, same run, b128 S4096): for 12 heads these knobs took 0.287 ms against
    // 0.432 ms for BN=32 with duplicated score warps (SWN=2), three score accumulators and the block-table
    // prefetch; for 96 heads BM=32 without those took 0.777 ms against 0.831 ms with them. The split-KV pair is
    // what was timed then; the direct kernel (no combine, the plan's default since session 6) took 0.1682 ms against
    // 0.1892 for the split pair at these knobs at 12 heads (H200, session 6 call 2).
    let k = Knobs::new()
        .with("SCORES", "shared")
        .with("BN", 64i64)
        .with("WN", 4i64)
        .with("STAGES", 2i64)
        .with("SWN", 0i64)
        .with("QK_ACCS", 1i64)
        .with("BT_PREFETCH", 0i64);
    match rows {
        0..=16 => k.with("BM", 16i64).with("WM", 1i64),
        _ => k.with("BM", 32i64).with("WM", 2i64),
    }
}

struct DecodeCfg {
    bm: u32,
    bn: u32,
    wm: u32,
    wn: u32,
    stages: u32,
    /// Scores split over the WN column groups and exchanged through shared memory.
    shared_scores: bool,
    /// Warp column groups splitting the score columns (SCORES=shared; divides WN).
    swn: u32,
    /// Partial score accumulators of the score product.
    qk_accs: u32,
    /// Read each tile's block-table entry one loop iteration ahead.
    bt_prefetch: bool,
    /// Hopper warpgroup MMA (`MMA=wgmma`).
    wgmma: bool,
    /// Value-column splits (one block each; 1 for mma.sync).
    dvs: u32,
    /// MMA=wgmma: unroll the 9 score products of a tile.
    qk_unroll: bool,
    /// MMA=wgmma: `OVERLAP`, tile j's softmax under tile j-1's P V product.
    overlap: bool,
    /// MMA=wgmma: `SOFTMAX=fast`.
    fast_softmax: bool,
    /// MMA=wgmma: `VWG`, warpgroup sets sharing the block's stages, splitting the value columns (1 or 2).
    vwg: u32,
    /// MMA=wgmma: `LOAD=tma`, the K/V ring by bulk tensor copies on mbarriers.
    tma: bool,
    /// Register-tile registers per thread (the estimate the knob checks use).
    tile_regs: u32,
    /// Dynamic shared memory per block.
    smem: usize,
}

impl DecodeCfg {
    /// Shared bytes of the Q tile and the K/V ring (both kernels), with `LOAD=tma` a full and an empty mbarrier
    /// per slot after the buffers (aligned to 128 bytes).
    fn q_and_ring_bytes(&self, spec: &DecodeSpec) -> usize {
        let bars = if self.tma { 128 + 16 * self.stages as usize } else { 0 };
        2 * ((self.bm + self.stages * self.bn) * spec.d) as usize + bars
    }
}

/// An optional integer knob (absent: `default`), so that knob sets written before it existed still parse.
fn opt_u32(k: &Knobs, name: &str, default: u32) -> Result<u32, OpError> {
    match k.0.get(name) {
        None => Ok(default),
        Some(_) => Ok(k.u32(name)?),
    }
}

/// An optional bool knob (absent: false).
fn opt_bool(k: &Knobs, name: &str) -> Result<bool, OpError> {
    match k.0.get(name) {
        None => Ok(false),
        Some(_) => Ok(k.bool(name)?),
    }
}

/// An optional two-valued string knob (absent: `off`): whether it names `on`; any other value is invalid knobs.
fn opt_choice(op: &'static str, k: &Knobs, name: &str, off: &str, on: &str) -> Result<bool, OpError> {
    match k.0.get(name) {
        None => Ok(false),
        Some(_) => match k.str(name)? {
            v if v == off => Ok(false),
            v if v == on => Ok(true),
            other => invalid(op, k, format!("{name}={other}: {off} or {on}")),
        },
    }
}

fn decode_cfg(spec: &DecodeSpec, k: &Knobs) -> Result<DecodeCfg, OpError> {
    const OP: &str = "gated_mla_decode";
    let mut c = DecodeCfg {
        bm: k.u32("BM")?,
        bn: k.u32("BN")?,
        wm: k.u32("WM")?,
        wn: k.u32("WN")?,
        stages: k.u32("STAGES")?,
        shared_scores: match k.str("SCORES")? {
            "replicated" => false,
            "shared" => true,
            other => return invalid(OP, k, format!("SCORES={other}: replicated or shared")),
        },
        swn: opt_u32(k, "SWN", 0)?,
        qk_accs: opt_u32(k, "QK_ACCS", 1)?,
        bt_prefetch: match opt_u32(k, "BT_PREFETCH", 0)? {
            0 => false,
            1 => true,
            v => return invalid(OP, k, format!("BT_PREFETCH={v}: 0 or 1")),
        },
        wgmma: opt_choice(OP, k, "MMA", "sync", "wgmma")?,
        dvs: opt_u32(k, "DVS", 1)?,
        qk_unroll: match opt_u32(k, "QK_UNROLL", 0)? {
            0 => false,
            1 => true,
            v => return invalid(OP, k, format!("QK_UNROLL={v}: 0 or 1")),
        },
        overlap: opt_bool(k, "OVERLAP")?,
        fast_softmax: opt_choice(OP, k, "SOFTMAX", "exact", "fast")?,
        vwg: opt_u32(k, "VWG", 1)?,
        tma: opt_choice(OP, k, "LOAD", "cp_async", "tma")?,
        tile_regs: 0,
        smem: 0,
    };
    if c.wgmma {
        return decode_cfg_wgmma(spec, k, c);
    }
    if c.dvs != 1 {
        return invalid(OP, k, format!("DVS={} needs MMA=wgmma (mma.sync blocks hold every value column)", c.dvs));
    }
    if c.qk_unroll {
        return invalid(OP, k, "QK_UNROLL=1 needs MMA=wgmma (mma.sync keeps the 576-deep score loop rolled)".into());
    }
    if c.overlap || c.fast_softmax || c.vwg != 1 {
        return invalid(OP, k, "OVERLAP=true, SOFTMAX=fast and VWG=2 need MMA=wgmma".into());
    }
    if c.wm == 0 || c.wn == 0 || c.wm * c.wn > 16 {
        return invalid(OP, k, format!("WM*WN = {} warps must be in 1..=16", c.wm * c.wn));
    }
    if c.swn != 0 && (!c.shared_scores || c.swn >= c.wn || !c.wn.is_multiple_of(c.swn)) {
        return invalid(OP, k, format!("SWN={} needs SCORES=shared and to be a proper divisor of WN={}", c.swn, c.wn));
    }
    if c.swn == 0 {
        c.swn = if c.shared_scores { c.wn } else { 1 };
    }
    if c.shared_scores && (c.swn == 1 || !(c.bn / c.swn).is_multiple_of(16)) {
        return invalid(
            OP,
            k,
            format!("SCORES=shared needs more than one score warp column and BN/SWN={} a multiple of 16", c.bn / c.swn),
        );
    }
    if c.qk_accs == 0 || !(spec.d / KC).is_multiple_of(c.qk_accs) {
        return invalid(OP, k, format!("QK_ACCS={} must divide the {} score chunks", c.qk_accs, spec.d / KC));
    }
    if c.bm == 0 || !c.bm.is_multiple_of(16 * c.wm) {
        return invalid(OP, k, format!("BM={} must be a positive multiple of 16*WM={}", c.bm, 16 * c.wm));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(16) || !spec.page.is_multiple_of(c.bn) {
        return invalid(OP, k, format!("BN={} must be a multiple of 16 dividing the page {}", c.bn, spec.page));
    }
    if !KC.is_multiple_of(16 * c.wn) {
        return invalid(OP, k, format!("each {KC}-column value tile needs 16*WN={} to divide it", 16 * c.wn));
    }
    if !spec.d.is_multiple_of(KC) || !spec.dv.is_multiple_of(KC) || spec.dv > spec.d {
        return invalid(OP, k, format!("d={} and dv={} must be multiples of {KC} with dv <= d", spec.d, spec.dv));
    }
    if c.stages < 2 {
        return invalid(OP, k, "STAGES >= 2".into());
    }
    let threads = 32 * c.wm * c.wn;
    let acc = c.bm * spec.dv / threads;
    let srow = c.bm / c.wm * c.bn / 32;
    // The score tile and P, plus the partial score tiles the product accumulates into (the split tiles, or
    // for replicated scores the extra partials beside the score tile itself).
    let parts = if c.shared_scores { c.qk_accs * srow / c.swn } else { (c.qk_accs - 1) * srow };
    let regs = acc + srow + srow / 2 + parts;
    // Tile registers per thread (accumulators, scores, P); ptxas needs up to ~100 more for fragments and
    // addresses (measured over the whole space: <= 160 assembles without spills, 176 spills). 512-thread
    // blocks get only 128 registers per thread.
    // 384-thread blocks (WM = 3, BM = 48: 96 rows in two m-tiles) get 168 registers per thread (measured: 112
    // tile registers assemble without spills with QK_ACCS=3; 96 with QK_ACCS=1 and 3 stages spill 12 bytes).
    let budget = match threads {
        0..=256 => 160,
        257..=384 => 112,
        _ => 64,
    };
    if regs > budget {
        return invalid(OP, k, format!("{regs} tile registers per thread (max {budget} at {threads} threads)"));
    }
    let smem = c.q_and_ring_bytes(spec) + if c.shared_scores { 4 * (c.bm * c.bn) as usize } else { 0 };
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, k, format!("{smem} bytes of shared memory"));
    }
    c.tile_regs = regs;
    c.smem = smem;
    Ok(c)
}

/// The checks of the wgmma decode kernel: `BM / 64` warpgroups on `[BM / 16, 1]` warps, replicated scores (the
/// score tile is the warpgroups' own accumulator), one score accumulator, `DVS` dividing the value tiles, and
/// the accumulator registers within what one thread may hold.
fn decode_cfg_wgmma(spec: &DecodeSpec, k: &Knobs, mut c: DecodeCfg) -> Result<DecodeCfg, OpError> {
    const OP: &str = "gated_mla_decode";
    if c.bm == 0 || !c.bm.is_multiple_of(64) || c.wm != c.bm / 16 || c.wn != 1 {
        return invalid(OP, k, format!("MMA=wgmma needs BM a multiple of 64, WM = BM / 16 and WN = 1 (BM={})", c.bm));
    }
    if c.swn != 0 || c.qk_accs != 1 {
        return invalid(OP, k, "MMA=wgmma needs SWN=0 and QK_ACCS=1".into());
    }
    // SCORES=shared: warpgroup 0 computes the scores for both warpgroups.
    if c.shared_scores && c.vwg != 2 {
        return invalid(OP, k, format!("MMA=wgmma with SCORES=shared needs VWG=2 (VWG={})", c.vwg));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(16) || !spec.page.is_multiple_of(c.bn) {
        return invalid(OP, k, format!("BN={} must be a multiple of 16 dividing the page {}", c.bn, spec.page));
    }
    if !spec.d.is_multiple_of(KC) || !spec.dv.is_multiple_of(KC) || spec.dv > spec.d {
        return invalid(OP, k, format!("d={} and dv={} must be multiples of {KC} with dv <= d", spec.d, spec.dv));
    }
    let nv = spec.dv / KC;
    if c.dvs == 0 || !nv.is_multiple_of(c.dvs) {
        return invalid(OP, k, format!("DVS={} must divide the {nv} value tiles", c.dvs));
    }
    if c.stages < 2 + u32::from(c.overlap) {
        return invalid(
            OP,
            k,
            format!("STAGES={} must be >= 2 (>= 3 with OVERLAP: two stages are in use at once)", c.stages),
        );
    }
    if !(c.vwg == 1 || c.vwg == 2 && c.bm == 64) {
        return invalid(OP, k, format!("VWG={}: 1, or 2 with BM=64 (one warpgroup of rows)", c.vwg));
    }
    c.swn = 1;
    // Per thread of a warpgroup (128 threads, 64 rows): the accumulator (split over VWG warpgroups), the scores
    // and P.
    let acc = 64 * (spec.dv / c.dvs) / (128 * c.vwg);
    let regs = acc + 64 * c.bn / 128 + 64 * c.bn / 256;
    if regs > 176 {
        return invalid(OP, k, format!("{regs} tile registers per thread (max 176 for MMA=wgmma)"));
    }
    // SCORES=shared: P (bf16, [BM, BN]) and the row scale ([BM, 8] f32) beside the Q tile and the ring.
    let exchange = if c.shared_scores { (2 * c.bm * c.bn + 4 * c.bm * 8) as usize } else { 0 };
    let smem = c.q_and_ring_bytes(spec) + exchange;
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, k, format!("{smem} bytes of shared memory"));
    }
    c.tile_regs = regs;
    c.smem = smem;
    Ok(c)
}

/// Blocks per request of a decode launch with these knobs for `rows = s_q * H` packed rows (per split): the
/// m-tiles times the value-column splits.
pub fn decode_blocks_per_request(spec: &DecodeSpec, knobs: &Knobs, rows: usize) -> Result<usize, OpError> {
    let c = decode_cfg(spec, knobs)?;
    Ok(rows.div_ceil(c.bm as usize).max(1) * c.dvs as usize)
}

/// Shared memory of one H100/H200 multiprocessor available to blocks, and what the driver reserves per block.
const SM_SHARED_BYTES: usize = 233_472;
const SM_SHARED_RESERVED: usize = 1024;

/// How many decode blocks of these knobs one multiprocessor holds at once (sm_90: 228 KB of shared memory
/// with 1 KB reserved per block, 2048 threads, 64 K registers; registers estimated as the tile registers
/// plus 64 for fragments and addresses, which is above what ptxas allocated over the knob space).
pub fn decode_blocks_per_sm(spec: &DecodeSpec, knobs: &Knobs) -> Result<usize, OpError> {
    let c = decode_cfg(spec, knobs)?;
    let threads = (32 * c.wm * c.wn * c.vwg) as usize;
    let by_smem = SM_SHARED_BYTES / (c.smem + SM_SHARED_RESERVED);
    let regs = ((c.tile_regs as usize + 64).min(255)).next_multiple_of(8);
    let by_regs = 65536 / (regs * threads);
    Ok(by_smem.min(2048 / threads).min(by_regs).clamp(1, 32))
}

/// Build the split-KV decode kernel.
///
/// Tensor arguments, in order: `q [B, SQ, H, D]` bf16, `kv [NBLK, PAGE, D]` bf16 (the paged latent cache),
/// `block_table [B, MAXB]` i32, `cache_seqlens [B]` i32, then the workspace outputs `o_part [B, NSPLIT, SQ, H,
/// DV]` f32 (each split's output normalised by its own softmax sum; 0 where it saw no key) and `lse_part [B,
/// NSPLIT, SQ, H]` f32 (log2-domain `m + log2(l)`, -inf where it saw no key). Scalar: `scale` (tau, float).
/// Grid: `(ceil(SQ*H / BM), NSPLIT, B)`. Query i of s_q sees keys `[0, S_k - SQ + i]`. Split s of a request
/// takes KV tiles `[s*c, min((s+1)*c, n))`, `c = ceil(n / NSPLIT)`, of the `n` tiles its rows can see.
pub fn build_decode(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    build_decode_impl(spec, knobs, false)
}

/// The decode kernel for one query per request and one split, writing the final outputs itself (no
/// workspace, no combine launch).
///
/// Tensor arguments, in order: `q [B, 1, H, D]` bf16, `kv [NBLK, PAGE, D]` bf16, `block_table [B, MAXB]` i32,
/// `cache_seqlens [B]` i32, then the outputs `o [B, 1, H, DV]` bf16 and `lse [B, H, 1]` f32 (natural log,
/// +inf and o = 0 for a request without keys), exactly what [`build_decode`] + [`build_decode_combine`] write
/// with `NSPLIT = 1`. Scalar: `scale`. Grid: `(ceil(H / BM), 1, B)`.
pub fn build_decode_direct(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    build_decode_impl(spec, knobs, true)
}

/// The KV stage ring both decode kernels run: the cache rows of the split's tiles `t0 + j` (through the block
/// table), `STAGES` slots of `D / KC` chunks in `skv`, copied `STAGES - 1` tiles ahead of the tile in use.
struct KvRing {
    kv: TensorId,
    bt: TensorId,
    skv: SharedId,
    bi: Expr,
    maxb: Expr,
    t0: Expr,
    s_k: Expr,
    count: Expr,
    d: u32,
    bn: u32,
    page: u32,
    st: u32,
    /// How many tiles ahead of the one in use the ring loads: `STAGES - 1`, or `STAGES - 2` when a stage stays
    /// in use one iteration longer (OVERLAP: tile j-1's values are read while tile j's scores are computed).
    ahead: u32,
    /// BT_PREFETCH: the block-table entry of the tile the next iteration loads (set by [`KvRing::prologue`]).
    blk_next: Option<VarId>,
    /// `LOAD=tma`: the stages arrive by bulk tensor copies on mbarriers instead of cp.async.
    tma: Option<KvTma>,
}

/// The decode's `LOAD=tma` ring: a map over the cache `[NBLK, page, d]` with boxes of one 64-column chunk of `bn`
/// rows of one page, and per slot a full barrier (the elected thread's expected bytes) and an empty one (every
/// thread's release once its products have read the slot).
struct KvTma {
    map: TmapId,
    full: MbarId,
    empty: MbarId,
    ring: StageRing,
    /// Threads that release a slot.
    threads: u32,
}

impl KvTma {
    fn new(b: &mut KernelBuilder, kv: TensorId, bn: u32, st: u32, threads: u32) -> Self {
        KvTma {
            map: b.tensor_map("kv_map", kv, &[KC, bn, 1], Swizzle::Xor16B),
            full: b.mbarriers("kv_full", st),
            empty: b.mbarriers("kv_empty", st),
            ring: StageRing::new(st, true),
            threads,
        }
    }
}

impl KvRing {
    /// The cache page of the split's KV tile `j`.
    fn blk_of(&self, j: Expr) -> Expr {
        load(self.bt, self.bi.clone() * self.maxb.clone() + (self.t0.clone() + j) * self.bn as i64 / self.page as i64)
    }

    /// Copy tile `j` (on cache page `blk`) into its slot.
    fn load_stage(&self, b: &mut KernelBuilder, j: Expr, blk: Expr) {
        let (bn, page, st, d, nch) = (self.bn, self.page, self.st, self.d, self.d / KC);
        let slot = j.clone() % st as i64;
        let kv0 = (self.t0.clone() + j.clone()) * bn as i64;
        if let Some(t) = &self.tma {
            // The elected thread waits until every thread has released the slot's previous use (a fresh barrier
            // passes at once), announces the tile's bytes (whole boxes: the page holds every row) and issues the
            // copies.
            b.mbar_wait_elected(t.empty, slot.clone(), t.ring.empty_parity(j.clone()));
            b.mbar_arrive_expect_tx(t.full, slot.clone(), 2 * bn * d);
            let row = b.let_("page_row", kv0 % page as i64);
            let blk = b.let_("page", blk);
            for c in 0..nch {
                let dst = b.slot(self.skv, slot.clone() * nch as i64 + c as i64);
                let coords = vec![Expr::from((c * KC) as i64), row.clone(), blk.clone()];
                b.tma_load(t.map, dst, coords, t.full, slot.clone());
            }
            return;
        }
        let row0 = b.let_("cache_row", blk * page as i64 + kv0.clone() % page as i64);
        let rows = b.let_("keys", self.s_k.clone() - kv0);
        for c in 0..nch {
            let src = view(self.kv, row0.clone() * d as i64 + (c * KC) as i64, d as i64, rows.clone(), KC as i64, 8);
            let dst = b.slot(self.skv, slot.clone() * nch as i64 + c as i64);
            b.copy_async(dst, src);
        }
    }

    /// Before the loop: the block's Q rows into `sq` (one chunk per slot), the first `ahead` tiles (one commit
    /// group each) and, with `bt_prefetch`, the block-table entry of the tile the first iteration loads (so that
    /// the copies do not wait for a dependent global load).
    #[allow(clippy::too_many_arguments)]
    fn prologue(
        &mut self,
        b: &mut KernelBuilder,
        q: TensorId,
        sq: SharedId,
        rows_total: &Expr,
        m0: &Expr,
        rows_valid: &Expr,
        bt_prefetch: bool,
    ) {
        let (d, ahead) = (self.d, self.ahead);
        if let Some(t) = &self.tma {
            b.mbar_init(t.full, 1);
            b.mbar_init(t.empty, t.threads);
        }
        for c in 0..d / KC {
            let qsrc = view(
                q,
                (self.bi.clone() * rows_total.clone() + m0.clone()) * d as i64 + (c * KC) as i64,
                d as i64,
                rows_valid.clone(),
                KC as i64,
                8,
            );
            let qd = b.slot(sq, c as i64);
            b.copy_async(qd, qsrc);
        }
        for i in 0..ahead {
            let j = Expr::Int(i as i64);
            b.if_(j.lt(self.count.clone()), |b| self.load_stage(b, j.clone(), self.blk_of(j.clone())));
            if self.tma.is_none() {
                b.commit();
            }
        }
        if self.tma.is_some() {
            // The Q tile (cp.async: rows past the block's are zeros) landed, fenced for the async proxy.
            b.commit();
            b.wait(0);
            b.barrier();
        }
        let blk_next = bt_prefetch.then(|| {
            let v = b.let_var("blk_next", 0i64);
            let j = Expr::Int(ahead as i64);
            b.if_(j.lt(self.count.clone()), |b| b.assign(v, self.blk_of(j.clone())));
            v
        });
        self.blk_next = blk_next;
    }

    /// The top of loop iteration `j`: tile j's copies landed and every warp finished reading the slot the next
    /// load overwrites; then tile `j + ahead` is issued (one commit group) and the prefetched entry advanced.
    /// `LOAD=tma`: tile `j + ahead` is issued first (the elected thread waits for its slot's release, see
    /// [`KvRing::release`]), then every thread waits for tile j's bytes; no block barrier.
    fn step(&self, b: &mut KernelBuilder, j: &Expr) {
        let ahead = self.ahead;
        if self.tma.is_none() {
            b.wait(ahead - 1);
            b.barrier();
        }
        let next = j + ahead as i64;
        let blk = self.blk_next.map_or_else(|| self.blk_of(next.clone()), Expr::Var);
        b.if_(next.lt(self.count.clone()), |b| self.load_stage(b, next.clone(), blk));
        if self.tma.is_none() {
            b.commit();
        }
        if let Some(v) = self.blk_next {
            let after = &next + 1i64;
            b.if_(after.lt(self.count.clone()), |b| b.assign(v, self.blk_of(after.clone())));
        }
        if let Some(t) = &self.tma {
            let slot = j % self.st as i64;
            b.mbar_wait(t.full, slot.clone(), t.ring.phase(j.clone()));
            self.zero_tail(b, j, &slot, t.threads);
        }
    }

    /// `LOAD=tma`: the copy engine moves whole pages, so the rows of a request's last tile past its cache length
    /// hold whatever the page holds (unused rows may be NaN); their scores are masked, but `0 * NaN` would reach
    /// `P V`. Zero those rows (the cp.async path's zero fill), fenced for the async proxy.
    fn zero_tail(&self, b: &mut KernelBuilder, j: &Expr, slot: &Expr, threads: u32) {
        let (bn, d, nch) = (self.bn, self.d, self.d / KC);
        let keys = b.let_("tile_keys", self.s_k.clone() - (self.t0.clone() + j.clone()) * bn as i64);
        b.if_(keys.lt(bn as i64), |b| {
            b.threads(|b| {
                let n = (Expr::from(bn as i64) - keys.clone()) * d as i64;
                b.for_("z", Expr::thread_idx(), n, threads as i64, |b, z| {
                    let col = &z % d as i64;
                    let chunk = slot.clone() * nch as i64 + &col / KC as i64;
                    b.shared_store(self.skv, chunk, keys.clone() + &z / d as i64, col % KC as i64, 0.0f64);
                });
            });
            b.wait(0);
            b.barrier();
        });
    }

    /// `LOAD=tma`: every thread releases tile `j`'s slot (its products that read it have completed), so that the
    /// producer may refill it; nothing with cp.async (the next iteration's barrier orders the refill).
    fn release(&self, b: &mut KernelBuilder, j: &Expr) {
        if let Some(t) = &self.tma {
            b.mbar_arrive(t.empty, j % self.st as i64);
        }
    }
}

/// The arguments both decode kernels take, declared in the order [`build_decode`] and [`build_decode_direct`]
/// document (direct: SQ and NSPLIT are 1, the outputs are o and lse).
struct DecodeIo {
    bsz: Expr,
    sqd: Expr,
    h: Expr,
    maxb: Expr,
    nsplit: Expr,
    q: TensorId,
    kv: TensorId,
    bt: TensorId,
    seqlens: TensorId,
    o_part: TensorId,
    lse_part: TensorId,
    scale: Expr,
}

fn decode_io(b: &mut KernelBuilder, spec: &DecodeSpec, direct: bool) -> DecodeIo {
    let (d, dv, page) = (spec.d, spec.dv, spec.page);
    let bsz = b.dim("B");
    let sqd = if direct { Expr::Int(1) } else { b.dim("SQ") };
    let h = b.dim("H");
    let nblk = b.dim("NBLK");
    let maxb = b.dim("MAXB");
    let nsplit = if direct { Expr::Int(1) } else { b.dim("NSPLIT") };
    let q = b.tensor("q", DType::Bf16, &[bsz.clone(), sqd.clone(), h.clone(), Expr::from(d)], Access::Read);
    let kv = b.tensor("kv", DType::Bf16, &[nblk, Expr::from(page), Expr::from(d)], Access::Read);
    let bt = b.tensor("block_table", DType::I32, &[bsz.clone(), maxb.clone()], Access::Read);
    let seqlens = b.tensor("cache_seqlens", DType::I32, std::slice::from_ref(&bsz), Access::Read);
    // Split-KV: normalised f32 partials and log2-domain LSEs; direct: o (bf16) and the natural-log lse.
    let (o_part, lse_part) = if direct {
        let o = b.tensor("o", DType::Bf16, &[bsz.clone(), sqd.clone(), h.clone(), Expr::from(dv)], Access::Write);
        let lse = b.tensor("lse", DType::F32, &[bsz.clone(), h.clone(), sqd.clone()], Access::Write);
        (o, lse)
    } else {
        let o_part = b.tensor(
            "o_part",
            DType::F32,
            &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone(), Expr::from(dv)],
            Access::Write,
        );
        let lse_part =
            b.tensor("lse_part", DType::F32, &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone()], Access::Write);
        (o_part, lse_part)
    };
    let scale = b.float_arg("scale");
    DecodeIo { bsz, sqd, h, maxb, nsplit, q, kv, bt, seqlens, o_part, lse_part, scale }
}

/// What [`decode_range`] reads: the block's request, first packed row and split, and the problem's sizes.
struct DecodeRangeOf<'a> {
    seqlens: TensorId,
    bi: &'a Expr,
    m0: &'a Expr,
    rows_total: &'a Expr,
    sqd: &'a Expr,
    h: &'a Expr,
    nsplit: &'a Expr,
    split: &'a Expr,
    scale: &'a Expr,
}

/// The KV tiles one decode block walks: the request's cache length `s_k`, this split's first tile `t0` and
/// tile `count` (the splits partition the tiles of the keys the block's last query may see), the causal
/// diagonal of its first query and the log2-domain scale.
struct DecodeRange {
    s_k: Expr,
    t0: Expr,
    count: Expr,
    diag: Expr,
    scale_log2: Expr,
}

/// The decode's mask of a KV tile starting at key `kv0` of an m-tile starting at packed row `m0`: whether the tile
/// reaches past `diag` (the causal diagonal of the block's first query, so that some pair may be masked), and
/// which (row, key) pairs are visible (query `(m0 + row) / H` of `SQ` sees keys `[0, S_k - SQ + query]`).
fn decode_mask(kv0: &Expr, m0: &Expr, h: &Expr, s_k: &Expr, sqd: &Expr, diag: &Expr, bn: u32) -> (Expr, Expr) {
    let key = kv0.clone() + Expr::ColIdx;
    let query = (m0.clone() + Expr::RowIdx) / h.clone();
    let visible = key.lt(s_k.clone()).and(key.le(s_k.clone() - sqd.clone() + query));
    ((kv0.clone() + (bn as i64 - 1)).gt(diag.clone()), visible)
}

fn decode_range(b: &mut KernelBuilder, o: &DecodeRangeOf<'_>, bm: u32, bn: u32) -> DecodeRange {
    let (sqd, h) = (o.sqd, o.h);
    let s_k = b.let_("s_k", load(o.seqlens, o.bi.clone()));
    let i_lo = b.let_("i_lo", o.m0.clone() / h.clone());
    let i_hi = b.let_("i_hi", ((o.m0.clone() + bm as i64).min(o.rows_total.clone()) - 1i64) / h.clone());
    // Keys the tile's last query may see; the splits partition their tiles.
    let n_keys = b.let_("n_keys", (s_k.clone() - sqd.clone() + 1i64 + i_hi).min(s_k.clone()).max(0i64));
    let n_tiles = b.let_("n_tiles", n_keys.ceil_div(bn as i64));
    let per_split = b.let_("per_split", n_tiles.ceil_div(o.nsplit.clone()));
    let t0 = b.let_("t0", (o.split.clone() * per_split.clone()).min(n_tiles.clone()));
    let count = b.let_("count", (t0.clone() + per_split).min(n_tiles) - t0.clone());
    let diag = b.let_("diag", s_k.clone() - sqd.clone() + i_lo);
    let scale_log2 = b.let_("scale_log2", o.scale.clone() * LOG2_E);
    DecodeRange { s_k, t0, count, diag, scale_log2 }
}

fn build_decode_impl(spec: &DecodeSpec, knobs: &Knobs, direct: bool) -> Result<Kernel, OpError> {
    let c = decode_cfg(spec, knobs)?;
    if c.wgmma {
        return build_decode_wgmma(spec, knobs, &c, direct);
    }
    let (bm, bn, st) = (c.bm, c.bn, c.stages);
    let (d, dv, page) = (spec.d, spec.dv, spec.page);
    let name = format!(
        "k3k_mla_decode{}_d{d}_{dv}_p{page}_{}",
        if direct { "_direct" } else { "" },
        knobs.id().to_lowercase()
    );
    let mut b = KernelBuilder::new(&name, 32 * c.wm * c.wn);
    b.knobs(knobs.clone());
    let DecodeIo { bsz, sqd, h, maxb, nsplit, q, kv, bt, seqlens, o_part, lse_part, scale } =
        decode_io(&mut b, spec, direct);
    b.grid((sqd.clone() * h.clone()).ceil_div(bm as i64), nsplit.clone(), bsz);

    let s_warps = [c.wm, 1];
    let acc_warps = [c.wm, c.wn];
    // Q and the cache rows are stored as KC-column chunks: the score product walks all of them in a rolled
    // loop, the value product reads the first DV / KC of them into one accumulator tile each.
    let (nch, nv) = (d / KC, dv / KC);
    let sq = b.shared("sQ", DType::Bf16, bm, KC, nch, Swizzle::Xor16B);
    let skv = b.shared("sKV", DType::Bf16, bn, KC, st * nch, Swizzle::Xor16B);
    let s = b.tile("s", DType::F32, bm, bn, s_warps);
    let p = b.tile("p", DType::Bf16, bm, bn, s_warps);
    let accs: Vec<TileId> = (0..nv).map(|c| b.tile(&format!("acc{c}"), DType::F32, bm, KC, acc_warps)).collect();
    // With shared scores each warp computes a [BM/WM, BN/SWN] block of the scores (no redundant products
    // when SWN = WN; WN/SWN warps share a block otherwise) and the full rows are read back from shared memory
    // onto the [WM, 1] tile the softmax needs.
    let exchange = c.shared_scores.then(|| {
        let sw = b.tile("s_split", DType::F32, bm, bn, [c.wm, c.swn]);
        let ss = b.shared("sS", DType::F32, bm, bn, 1, Swizzle::Xor16B);
        (sw, ss)
    });
    let s_calc = exchange.map_or(s, |(sw, _)| sw);
    // Extra partial score accumulators (QK_ACCS > 1), on the same warps as the tile they are summed into.
    let s_parts: Vec<TileId> = (1..c.qk_accs)
        .map(|i| {
            let w = if c.shared_scores { [c.wm, c.swn] } else { s_warps };
            b.tile(&format!("s_part{i}"), DType::F32, bm, bn, w)
        })
        .collect();
    let sm = OnlineSoftmax::new(&mut b, bm, s_warps, acc_warps);
    let inv_l = b.vec("inv_l", bm, acc_warps);
    let lse_v = b.vec("lse_rows", bm, s_warps);

    let mt = Expr::block_idx(0);
    let split = b.let_("split", Expr::block_idx(1));
    let bi = b.let_("req", Expr::block_idx(2));
    let rows_total = b.let_("rows_total", sqd.clone() * h.clone());
    let m0 = b.let_("m0", mt * bm as i64);
    let rows_valid = b.let_("rows_valid", rows_total.clone() - m0.clone());
    let DecodeRange { s_k, t0, count, diag, scale_log2 } = decode_range(
        &mut b,
        &DecodeRangeOf {
            seqlens,
            bi: &bi,
            m0: &m0,
            rows_total: &rows_total,
            sqd: &sqd,
            h: &h,
            nsplit: &nsplit,
            split: &split,
            scale: &scale,
        },
        bm,
        bn,
    );

    let mut ring = KvRing {
        kv,
        bt,
        skv,
        bi: bi.clone(),
        maxb,
        t0: t0.clone(),
        s_k: s_k.clone(),
        count: count.clone(),
        d,
        bn,
        page,
        st,
        ahead: st - 1,
        blk_next: None,
        tma: c.tma.then(|| KvTma::new(&mut b, kv, bn, st, 32 * c.wm * c.wn)),
    };
    ring.prologue(&mut b, q, sq, &rows_total, &m0, &rows_valid, c.bt_prefetch);
    sm.init(&mut b);
    for &acc in &accs {
        b.map(acc, 0.0f64);
    }
    b.for_("j", 0i64, count.clone(), 1i64, |b, j| {
        ring.step(b, &j);
        if c.tma {
            // The ring's copies need no block barrier; the score exchange below relies on one per iteration.
            b.barrier();
        }
        let slot = &j % st as i64;
        let kv0 = b.let_("kv0", (t0.clone() + j.clone()) * bn as i64);
        b.map(s_calc, 0.0f64);
        if s_parts.is_empty() {
            qk_chunks(b, s_calc, sq, skv, slot.clone() * nch as i64, nch, false);
        } else {
            // Chunk c goes to partial c % QK_ACCS: QK_ACCS independent chains of products, summed after.
            let all: Vec<TileId> = std::iter::once(s_calc).chain(s_parts.iter().copied()).collect();
            for &t in &s_parts {
                b.map(t, 0.0f64);
            }
            let na = all.len() as i64;
            b.for_("chunk", 0i64, nch as i64 / na, 1i64, |b, it| {
                for (i, &t) in all.iter().enumerate() {
                    let c = it.clone() * na + i as i64;
                    let qa = Operand::Shared { src: b.slot(sq, c.clone()), transpose: false };
                    let kb = Operand::Shared { src: b.slot(skv, slot.clone() * nch as i64 + c), transpose: true };
                    b.mma(t, qa, kb);
                }
            });
            let sum = s_parts.iter().fold(el(s_calc), |acc, &t| acc + el(t));
            b.map(s_calc, sum);
        }
        let (crosses, visible) = decode_mask(&kv0, &m0, &h, &s_k, &sqd, &diag, bn);
        mask_scores(b, s_calc, crosses, visible, &scale_log2, false);
        if let Some((sw, ss)) = exchange {
            // The previous iteration's reads of sS finished before this iteration's first barrier.
            let dst = b.slot(ss, 0i64);
            b.store(sw, Place::Shared(dst));
            b.barrier();
            let src = b.slot(ss, 0i64);
            b.load(s, Place::Shared(src));
        }
        sm.step(b, s, p, &accs);
        // Values: the first DV columns of the same cache rows.
        for (c, &acc) in accs.iter().enumerate() {
            let vb = Operand::Shared { src: b.slot(skv, slot.clone() * nch as i64 + c as i64), transpose: false };
            b.mma(acc, Operand::Reg(p), vb);
        }
        ring.release(b, &j);
    });
    b.wait(0);
    b.vec_map(inv_l, sm.inv_l());
    let part_row = b.let_("part_row", (bi * nsplit + split) * rows_total + m0);
    for (c, &acc) in accs.iter().enumerate() {
        b.map(acc, el(acc) * rv(inv_l));
        // (16-byte stores of bf16 o, 4-element groups of f32 partials: every offset is a multiple of KC.)
        let dst = view(
            o_part,
            part_row.clone() * dv as i64 + (c as u32 * KC) as i64,
            dv as i64,
            rows_valid.clone(),
            KC as i64,
            if direct { 8 } else { 4 },
        );
        b.store(acc, Place::Global(dst));
    }
    // Direct (one query, one split): row r of the tile is head m0 + r, at lse[(req * H + head) * 1 + 0].
    b.vec_map(lse_v, if direct { sm.lse_nat() } else { sm.lse_log2() });
    b.store_vec(lse_v, vec_view(lse_part, part_row, 1i64, rows_valid));
    Ok(b.finish()?)
}

/// The wgmma decode kernel ([`build_decode`] / [`build_decode_direct`] with `MMA=wgmma`): the same arguments,
/// outputs and split rule; the grid's x is `ceil(SQ*H / BM) * DVS` (m-tile `x / DVS`, value slice `x % DVS`).
/// Each warpgroup owns 64 packed rows: `S = Q K^T` is 9 asynchronous 64-deep products from the swizzled Q
/// chunks and the stage's K chunks, the online softmax runs on the score accumulator itself, and `O += P V`
/// reads P from registers and the slice's V chunks (the first 512 columns of the same stage, N-contiguous).
/// Every value slice recomputes the scores and the LSE of its rows; slice 0 writes the LSE. `OVERLAP`: iteration
/// j issues S(j), then P(j-1) V(j-1), waits for S(j) alone and runs its softmax while P V is in flight, then
/// waits for P V, rescales O and writes P(j); the last tile's P V follows the loop. Tile j-1's stage is read
/// during iteration j, so the ring loads `STAGES - 2` tiles ahead instead of `STAGES - 1`.
fn build_decode_wgmma(spec: &DecodeSpec, knobs: &Knobs, c: &DecodeCfg, direct: bool) -> Result<Kernel, OpError> {
    let (bm, bn, st, dvs) = (c.bm, c.bn, c.stages, c.dvs);
    let (d, dv, page) = (spec.d, spec.dv, spec.page);
    let name = format!(
        "k3k_mla_decode{}_d{d}_{dv}_p{page}_{}",
        if direct { "_direct" } else { "" },
        knobs.id().to_lowercase()
    );
    // VWG=2: a second set of warpgroups shares the block's Q tile and K/V stages, and the value accumulators are
    // split by columns, each warpgroup multiplying 32 of every 64 value columns. SCORES=replicated: every
    // warpgroup computes the scores of its rows (the score tile is replicated). SCORES=shared: warpgroup 0 alone
    // computes the scores and the softmax (the score tile, P and the softmax state are its own) and passes P and
    // the row scale to both through shared memory (FlashMLA's split), which saves the second warpgroup's
    // 576-deep score product: a third of the block's tensor work per tile.
    let mut b = KernelBuilder::new(&name, 32 * c.wm * c.vwg);
    b.knobs(knobs.clone());
    if c.shared_scores && c.tma {
        // Warpgroup 0 carries the critical path (the scores and the softmax); the TMA producer's waits and copies
        // go to warpgroup 1, which waits for P meanwhile.
        b.elected_warpgroup(1);
    }
    let DecodeIo { bsz, sqd, h, maxb, nsplit, q, kv, bt, seqlens, o_part, lse_part, scale } =
        decode_io(&mut b, spec, direct);
    b.grid((sqd.clone() * h.clone()).ceil_div(bm as i64) * dvs as i64, nsplit.clone(), bsz);

    let warps = [c.wm, 1];
    let acc_warps = [c.wm, c.vwg];
    let (nch, nv) = (d / KC, dv / KC);
    let nvl = nv / dvs;
    let sq = b.shared("sQ", DType::Bf16, bm, KC, nch, Swizzle::Xor16B);
    let skv = b.shared("sKV", DType::Bf16, bn, KC, st * nch, Swizzle::Xor16B);
    let s = b.tile("s", DType::F32, bm, bn, warps);
    let p = b.tile("p", DType::Bf16, bm, bn, warps);
    let accs: Vec<TileId> = (0..nvl).map(|c| b.tile(&format!("acc{c}"), DType::F32, bm, KC, acc_warps)).collect();
    let sm = OnlineSoftmax::new(&mut b, bm, warps, acc_warps);
    let inv_l = b.vec("inv_l", bm, acc_warps);
    let lse_v = b.vec("lse_rows", bm, warps);
    let shared = c.shared_scores.then(|| SharedP {
        sp: b.shared("sP", DType::Bf16, bm, bn, 1, Swizzle::Xor16B),
        ssc: b.shared("sScale", DType::F32, bm, 8, 1, Swizzle::None),
        row_scale: b.tile("row_scale", DType::F32, bm, 8, warps),
        p_all: b.tile("p_all", DType::Bf16, bm, bn, warps),
    });

    let mt = b.let_("mt", Expr::block_idx(0) / dvs as i64);
    let vs = b.let_("vslice", Expr::block_idx(0) % dvs as i64);
    let split = b.let_("split", Expr::block_idx(1));
    let bi = b.let_("req", Expr::block_idx(2));
    let rows_total = b.let_("rows_total", sqd.clone() * h.clone());
    let m0 = b.let_("m0", mt * bm as i64);
    let rows_valid = b.let_("rows_valid", rows_total.clone() - m0.clone());
    let DecodeRange { s_k, t0, count, diag, scale_log2 } = decode_range(
        &mut b,
        &DecodeRangeOf {
            seqlens,
            bi: &bi,
            m0: &m0,
            rows_total: &rows_total,
            sqd: &sqd,
            h: &h,
            nsplit: &nsplit,
            split: &split,
            scale: &scale,
        },
        bm,
        bn,
    );
    // The first value chunk of this block's slice.
    let v0 = b.let_("v0", vs.clone() * nvl as i64);

    let mut ring = KvRing {
        kv,
        bt,
        skv,
        bi: bi.clone(),
        maxb,
        t0: t0.clone(),
        s_k: s_k.clone(),
        count: count.clone(),
        d,
        bn,
        page,
        st,
        ahead: if c.overlap { st - 2 } else { st - 1 },
        blk_next: None,
        tma: c.tma.then(|| KvTma::new(&mut b, kv, bn, st, 32 * c.wm * c.vwg)),
    };
    ring.prologue(&mut b, q, sq, &rows_total, &m0, &rows_valid, c.bt_prefetch);
    let w = WgmmaDecode { c, sq, skv, nch, s, p, accs, sm, shared, v0, m0, h, s_k, sqd, diag, scale_log2 };
    b.first_warpgroups_if(c.shared_scores, 1, |b| w.sm.init(b));
    for &acc in &w.accs {
        b.map(acc, 0.0f64);
    }
    b.for_("j", 0i64, count.clone(), 1i64, |b, j| {
        // The copies of tile j landed (and were fenced for the async proxy); every warpgroup finished reading
        // the slot the next load overwrites (its products were waited for at the end of an earlier iteration).
        ring.step(b, &j);
        let slot = b.let_("slot", &j % st as i64);
        let kv0 = b.let_("kv0", (t0.clone() + j.clone()) * bn as i64);
        match &w.shared {
            Some(sh) => w.tile_shared(b, sh, &ring, &j, &slot, &kv0),
            None => w.tile_replicated(b, &ring, &j, &slot, &kv0),
        }
    });
    if c.overlap {
        // The last tile's P V (its stage was not refilled: no tile follows it; SCORES=shared: once its P is
        // published).
        if w.shared.is_some() {
            b.barrier();
        }
        b.if_(count.clone().gt(0i64), |b| {
            let last = (count.clone() - 1i64) % st as i64;
            match &w.shared {
                Some(sh) => w.pv_shared(b, sh, &last),
                None => w.pv_async(b, &last),
            }
            b.mma_wait(0);
        });
    }
    // The running max is in raw score units with SOFTMAX=fast; the LSE wants it in the log2 domain (-inf stays
    // -inf).
    let log2_max = |b: &mut KernelBuilder| {
        if c.fast_softmax {
            b.vec_map(w.sm.m, rv(w.sm.m) * w.scale_log2.clone());
        }
    };
    if w.shared.is_none() {
        log2_max(&mut b);
    }
    b.wait(0);
    if w.shared.is_none() {
        b.vec_map(inv_l, w.sm.inv_l());
    }
    let part_row = b.let_("part_row", (bi * nsplit + split) * rows_total + w.m0.clone());
    let lse = |b: &mut KernelBuilder| {
        b.if_(vs.clone().eq(0i64), |b| {
            b.vec_map(lse_v, if direct { w.sm.lse_nat() } else { w.sm.lse_log2() });
            b.store_vec(lse_v, vec_view(lse_part, part_row.clone(), 1i64, rows_valid.clone()));
        });
    };
    if let Some(sh) = &w.shared {
        // Warpgroup 0 stores the LSE and passes 1 / l (once the other warpgroup has read the last row scale).
        b.barrier();
        b.first_warpgroups(1, |b| {
            log2_max(b);
            lse(b);
            b.map(sh.row_scale, w.sm.inv_l());
            let dst = b.slot(sh.ssc, 0i64);
            b.store(sh.row_scale, Place::Shared(dst));
        });
        b.barrier();
        b.vec_map(inv_l, Expr::shared_load(sh.ssc, 0i64, Expr::RowIdx, 0i64));
    }
    for (cv, &acc) in w.accs.iter().enumerate() {
        b.map(acc, el(acc) * rv(inv_l));
        let dst = view(
            o_part,
            part_row.clone() * dv as i64 + (w.v0.clone() + cv as i64) * KC as i64,
            dv as i64,
            rows_valid.clone(),
            KC as i64,
            if direct { 8 } else { 4 },
        );
        b.store(acc, Place::Global(dst));
    }
    if w.shared.is_none() {
        lse(&mut b);
    }
    Ok(b.finish()?)
}

/// `SCORES=shared` of the wgmma decode: P in `sp`, read back by every warpgroup into `p_all` (its register A
/// operand: a shared A would be re-read from shared memory by each of the 32 k16 steps of both warpgroups, 2 KB
/// each beside 1 KB of V, more bytes per step than the tensor cores take cycles at N = 32), and one f32 per row
/// (the tile's row scale, then 1 / l) in column 0 of `ssc`, written through the [BM, 8] tile `row_scale`.
struct SharedP {
    sp: SharedId,
    ssc: SharedId,
    row_scale: TileId,
    p_all: TileId,
}

/// What the wgmma decode's tile schedules share ([`build_decode_wgmma`]): its knobs, the Q tile and K/V stages,
/// the score, P and value tiles, the online softmax, and what its masks are computed from.
struct WgmmaDecode<'a> {
    c: &'a DecodeCfg,
    sq: SharedId,
    skv: SharedId,
    /// 64-column chunks of a cache row.
    nch: u32,
    s: TileId,
    p: TileId,
    accs: Vec<TileId>,
    sm: OnlineSoftmax,
    shared: Option<SharedP>,
    /// The first value chunk of this block's slice.
    v0: Expr,
    m0: Expr,
    h: Expr,
    s_k: Expr,
    sqd: Expr,
    diag: Expr,
    scale_log2: Expr,
}

impl WgmmaDecode<'_> {
    /// S = Q K^T of the tile in `slot`: 9 asynchronous 64-deep products from the swizzled Q chunks and the slot's
    /// K chunks. Unrolled, their shared-memory descriptors fold into constants plus the slot offset (the operands
    /// stay in shared memory, so no fragments are hoisted into registers).
    fn qk_async(&self, b: &mut KernelBuilder, slot: &Expr) {
        let nch = self.nch;
        let chunk = |b: &mut KernelBuilder, cc: Expr| {
            let qa = Operand::Shared { src: b.slot(self.sq, cc.clone()), transpose: false };
            let kb = Operand::Shared { src: b.slot(self.skv, slot.clone() * nch as i64 + cc.clone()), transpose: true };
            b.mma_async_init(self.s, qa, kb, cc.gt(0i64));
        };
        if self.c.qk_unroll {
            b.for_unrolled("chunk", 0i64, nch as i64, 1i64, chunk);
        } else {
            b.for_("chunk", 0i64, nch as i64, 1i64, chunk);
        }
    }

    /// O += P V: this slice's chunks of the first DV columns of the slot's cache rows, stored [keys, values]; P
    /// from the registers (SCORES=shared: as every warpgroup read it back).
    fn pv_async(&self, b: &mut KernelBuilder, slot: &Expr) {
        let pa = self.shared.as_ref().map_or(self.p, |sh| sh.p_all);
        for (cv, &acc) in self.accs.iter().enumerate() {
            let vb = Operand::Shared {
                src: b.slot(self.skv, slot.clone() * self.nch as i64 + self.v0.clone() + cv as i64),
                transpose: false,
            };
            b.mma_async(acc, Operand::Reg(pa), vb);
        }
    }

    /// The scores of the tile starting at key `kv0` in the log2 domain, -inf where masked; SOFTMAX=fast keeps them
    /// raw (the scale is applied inside the exponent) and masks only the tiles that need it.
    fn softmax(&self, b: &mut KernelBuilder, kv0: &Expr) {
        let (crosses, visible) = decode_mask(kv0, &self.m0, &self.h, &self.s_k, &self.sqd, &self.diag, self.c.bn);
        mask_scores(b, self.s, crosses, visible, &self.scale_log2, self.c.fast_softmax);
        step_scores(b, &self.sm, self.s, &self.scale_log2, self.c.fast_softmax);
    }

    /// SCORES=shared, warpgroup 0 (inside its body): P and the row scale of the tile just scored into shared
    /// memory.
    fn publish(&self, b: &mut KernelBuilder, sh: &SharedP) {
        b.map(self.p, el(self.s));
        let dst = b.slot(sh.sp, 0i64);
        b.store(self.p, Place::Shared(dst));
        b.map(sh.row_scale, rv(self.sm.alpha));
        let dst = b.slot(sh.ssc, 0i64);
        b.store(sh.row_scale, Place::Shared(dst));
    }

    /// SCORES=shared, every warpgroup: P and the row scale read back, the accumulators rescaled, P V issued from
    /// the stage `slot`.
    fn pv_shared(&self, b: &mut KernelBuilder, sh: &SharedP, slot: &Expr) {
        let alpha = self.sm.alpha_acc.expect("VWG=2: the accumulators' warps differ from the scores'");
        let src = b.slot(sh.sp, 0i64);
        b.load(sh.p_all, Place::Shared(src));
        b.vec_map(alpha, Expr::shared_load(sh.ssc, 0i64, Expr::RowIdx, 0i64));
        for &acc in &self.accs {
            b.map(acc, el(acc) * rv(alpha));
        }
        self.pv_async(b, slot);
    }

    /// LOAD=tma: the slot of tile `j - 1` is released once the products that read it completed.
    fn release_prev(&self, b: &mut KernelBuilder, ring: &KvRing, j: &Expr) {
        if self.c.tma {
            b.if_(j.clone().gt(0i64), |b| ring.release(b, &(j - 1i64)));
        }
    }

    /// Tile `j` (in `slot`, first key `kv0`) with SCORES=shared.
    fn tile_shared(&self, b: &mut KernelBuilder, sh: &SharedP, ring: &KvRing, j: &Expr, slot: &Expr, kv0: &Expr) {
        if self.c.tma {
            // The ring's copies need no block barrier; the exchange does: the previous tile's P is published and
            // read by all before warpgroup 0 overwrites it.
            b.barrier();
        }
        if self.c.overlap {
            // Warpgroup 0 computes tile j's scores; every warpgroup reads tile j-1's P and row scale and issues its
            // P V (warpgroup 1 at once, warpgroup 0 once its scores are in: the tensor cores run them one after the
            // other anyway; tile j-1's stage is refilled only after its release below); once all have read P (the
            // barrier), warpgroup 0 runs tile j's softmax while the P V products are in flight, then publishes tile
            // j's P. (A score product left in flight across the body's end, to be waited for in the next body,
            // makes ptxas serialize every wgmma of the kernel: C7518.)
            let st = self.c.stages;
            let prev = (j + (st - 1) as i64) % st as i64;
            b.first_warpgroups(1, |b| {
                self.qk_async(b, slot);
                b.mma_wait(0);
            });
            b.if_(j.clone().gt(0i64), |b| self.pv_shared(b, sh, &prev));
            b.barrier();
            b.first_warpgroups(1, |b| {
                self.softmax(b, kv0);
                self.publish(b, sh);
            });
            b.mma_wait(0);
            self.release_prev(b, ring, j);
        } else {
            // Warpgroup 0: the scores, the softmax, and P and the row scale into shared memory (their previous
            // readers finished before the ring's barrier above); then every warpgroup's P V.
            b.first_warpgroups(1, |b| {
                self.qk_async(b, slot);
                b.mma_wait(0);
                self.softmax(b, kv0);
                self.publish(b, sh);
            });
            b.barrier();
            self.pv_shared(b, sh, slot);
            b.mma_wait(0);
            ring.release(b, j);
        }
    }

    /// Tile `j` (in `slot`, first key `kv0`) with SCORES=replicated: every warpgroup computes the scores of its
    /// rows.
    fn tile_replicated(&self, b: &mut KernelBuilder, ring: &KvRing, j: &Expr, slot: &Expr, kv0: &Expr) {
        self.qk_async(b, slot);
        if self.c.overlap {
            // Tile j-1's P V after tile j's scores (their groups complete in order): the scores are waited for
            // alone, and tile j's softmax runs while P V is in flight. Its stage (`prev`) is refilled only after
            // the next iteration's barrier.
            let st = self.c.stages;
            let prev = (j + (st - 1) as i64) % st as i64;
            b.if_else(
                j.clone().gt(0i64),
                |b| {
                    self.pv_async(b, &prev);
                    b.mma_wait(self.accs.len() as u32);
                },
                |b| b.mma_wait(0),
            );
            self.softmax(b, kv0);
            b.mma_wait(0);
            self.release_prev(b, ring, j);
            self.sm.step_finish(b, self.s, self.p, &self.accs);
        } else {
            b.mma_wait(0);
            self.softmax(b, kv0);
            self.sm.step_finish(b, self.s, self.p, &self.accs);
            self.pv_async(b, slot);
            b.mma_wait(0);
            ring.release(b, j);
        }
    }
}

/// The split count the decode kernel should use for `batch` requests of `m_tiles` m-tiles each whose longest
/// request has `max_seqlen_k` keys, on a GPU with `num_sms` multiprocessors that each hold `blocks_per_sm`
/// decode blocks at once ([`decode_blocks_per_sm`]): the count minimising `waves * (tiles per split + 2)`
/// (waves of `num_sms * blocks_per_sm` blocks; the 2 standing for a split's prologue, epilogue and share of
/// the combine, in 64-key tiles), with at least two KV tiles of `bn` keys per split and at most 64 splits.
/// A split count that leaves block slots empty costs as much as a full wave: one block per slot is what keeps
/// enough loads in flight.
pub fn decode_num_splits(
    batch: usize,
    m_tiles: usize,
    max_seqlen_k: usize,
    num_sms: usize,
    blocks_per_sm: usize,
    bn: usize,
) -> usize {
    let blocks = (batch * m_tiles).max(1);
    let slots = num_sms.max(1) * blocks_per_sm.max(1);
    let bn = bn.max(1);
    let tiles = max_seqlen_k.div_ceil(bn);
    let cap = (tiles / 2).clamp(1, 64);
    let overhead = 2 * 64usize.div_ceil(bn);
    let cost = |s: usize| (blocks * s).div_ceil(slots) * (tiles.div_ceil(s) + overhead);
    (1..=cap).min_by_key(|&s| cost(s)).unwrap_or(1)
}

/// The combine tuning knobs.
pub fn combine_knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("BM", "heads per block", [16i64, 32])
        .axis("WM", "warp rows", [1i64, 2])
        .axis("WN", "warp columns over the value width", [2i64, 4, 8])
        .axis("BC", "value columns per block (the grid's x covers head tiles times DV / BC)", [128i64, 512])
}

/// The combine knobs used when no tuning record exists: 128 value columns per block, so that 128 requests
/// of 12 heads make 512 blocks (one block per request, as before, left most SMs with one block of 4 warps).
pub fn combine_default_knobs() -> Knobs {
    Knobs::new().with("BM", 16i64).with("WM", 1i64).with("WN", 4i64).with("BC", 128i64)
}

/// Build the split-merge kernel of decode.
///
/// Tensor arguments, in order: `o_part [B, NSPLIT, SQ, H, DV]` f32 and `lse_part [B, NSPLIT, SQ, H]` f32 (as
/// written by [`build_decode`]), outputs `o [B, SQ, H, DV]` bf16 and `lse [B, H, SQ]` f32 (natural log, +inf
/// for a query that saw no key, whose o is 0). Grid: `(ceil(H / BM) * DV / BC, SQ, B)` (`BC`, the value columns
/// per block, defaults to DV when absent).
pub fn build_decode_combine(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    const OP: &str = "gated_mla_decode_combine";
    let (bm, wm, wn) = (knobs.u32("BM")?, knobs.u32("WM")?, knobs.u32("WN")?);
    let bc = opt_u32(knobs, "BC", spec.dv)?;
    if bc == 0 || !spec.dv.is_multiple_of(bc) {
        return invalid(OP, knobs, format!("BC={bc} must divide DV={}", spec.dv));
    }
    if wm == 0 || wn == 0 || wm * wn > 16 || bm == 0 || bm % (16 * wm) != 0 || !bc.is_multiple_of(8 * wn) {
        return invalid(OP, knobs, format!("BM={bm} WM={wm} WN={wn} do not tile {bm}x{bc}"));
    }
    let threads = 32 * wm * wn;
    if threads > 256 || 2 * bm * bc / threads > 128 {
        return invalid(OP, knobs, "at most 8 warps and 128 tile registers per thread".into());
    }
    let dv = spec.dv;
    let ncb = (dv / bc) as i64;
    let name = format!("k3k_mla_decode_combine_dv{dv}_{}", knobs.id().to_lowercase());
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(knobs.clone());
    let bsz = b.dim("B");
    let nsplit = b.dim("NSPLIT");
    let sqd = b.dim("SQ");
    let h = b.dim("H");
    let o_part = b.tensor(
        "o_part",
        DType::F32,
        &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone(), Expr::from(dv)],
        Access::Read,
    );
    let lse_part =
        b.tensor("lse_part", DType::F32, &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone()], Access::Read);
    let o = b.tensor("o", DType::Bf16, &[bsz.clone(), sqd.clone(), h.clone(), Expr::from(dv)], Access::Write);
    let lse = b.tensor("lse", DType::F32, &[bsz.clone(), h.clone(), sqd.clone()], Access::Write);
    b.grid(h.ceil_div(bm as i64) * ncb, sqd.clone(), bsz);

    let warps = [wm, wn];
    let acc = b.tile("acc", DType::F32, bm, bc, warps);
    let part = b.tile("o_split", DType::F32, bm, bc, warps);
    let mx = b.vec("m", bm, warps);
    let mu = b.vec("mu", bm, warps);
    let lj = b.vec("lse_split", bm, warps);
    let w = b.vec("w", bm, warps);
    let sum = b.vec("sum", bm, warps);
    let out = b.vec("out", bm, warps);

    let h0 = b.let_("h0", Expr::block_idx(0) / ncb * bm as i64);
    let c0 = b.let_("c0", Expr::block_idx(0) % ncb * bc as i64);
    let qi = b.let_("query", Expr::block_idx(1));
    let bi = b.let_("req", Expr::block_idx(2));
    let rows = b.let_("rows", h.clone() - h0.clone());
    let part_row =
        |s: &Expr| ((bi.clone() * nsplit.clone() + s.clone()) * sqd.clone() + qi.clone()) * h.clone() + h0.clone();

    b.vec_map(mx, NEG_INF);
    b.for_("split", 0i64, nsplit.clone(), 1i64, |b, s| {
        b.load_vec(lj, vec_view(lse_part, part_row(&s), 1i64, rows.clone()));
        b.vec_map(mx, rv(mx).max(rv(lj)));
    });
    b.vec_map(mu, Expr::select(rv(mx).eq(NEG_INF), 0.0f64, rv(mx)));
    b.vec_map(sum, 0.0f64);
    b.map(acc, 0.0f64);
    b.for_("split", 0i64, nsplit.clone(), 1i64, |b, s| {
        b.load_vec(lj, vec_view(lse_part, part_row(&s), 1i64, rows.clone()));
        b.vec_map(w, (rv(lj) - rv(mu)).exp2());
        b.vec_map(sum, rv(sum) + rv(w));
        let src = view(o_part, part_row(&s) * dv as i64 + c0.clone(), dv as i64, rows.clone(), bc as i64, 2);
        b.load(part, Place::Global(src));
        b.map(acc, el(acc) + rv(w) * el(part));
    });
    b.vec_map(out, Expr::select(rv(sum).gt(0.0f64), rv(sum).recip(), 0.0f64));
    b.map(acc, el(acc) * rv(out));
    let o_off = ((bi.clone() * sqd.clone() + qi.clone()) * h.clone() + h0.clone()) * dv as i64 + c0.clone();
    b.store(acc, Place::Global(view(o, o_off, dv as i64, rows.clone(), bc as i64, 8)));
    // The LSE once per head tile (by its first column block).
    b.if_(c0.eq(0i64), |b| {
        b.vec_map(out, Expr::select(rv(sum).gt(0.0f64), (rv(mu) + rv(sum).log2()) * LN_2, POS_INF));
        b.store_vec(out, vec_view(lse, (bi * h + h0) * sqd.clone() + qi, sqd, rows));
    });
    Ok(b.finish()?)
}

// =============================================================================================================
// Decode-side output projection with the fused gate
// =============================================================================================================

/// What a gate kernel variant computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GateSpec {
    /// Multiply by `sigmoid(z)` (false: the plain W_UV projection).
    pub gate: bool,
    /// Latent width (512).
    pub dl: u32,
    /// Output head dim (128).
    pub dv: u32,
}

impl GateSpec {
    /// The K3 dims (512 -> 128).
    pub fn new(gate: bool) -> Self {
        GateSpec { gate, dl: 512, dv: 128 }
    }
}

/// The gate-projection tuning knobs.
pub fn gate_knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("BM", "tokens per block", [16i64, 32, 64, 128])
        .axis("BK", "latent slice per pipeline stage", [32i64, 64])
        .axis("STAGES", "cp.async pipeline depth", [2i64, 3, 4])
        .axis("WM", "warps along tokens", [1i64, 2, 4])
        .axis("WN", "warps along the 128 outputs", [2i64, 4])
}

/// The gate-projection knobs used when no tuning record exists.
pub fn gate_default_knobs() -> Knobs {
    Knobs::new().with("BM", 64i64).with("BK", 64i64).with("STAGES", 3i64).with("WM", 2i64).with("WN", 2i64)
}

/// Build the decode-side output projection `y[t, h, :] = sigmoid(z[t, h, :]) * (o_latent[t, h, :] @
/// W_UV[h]^T)`.
///
/// Tensor arguments, in order: `o_latent [T, H, DL]` bf16, `w_uv [H, DV, DL]` bf16, `z [T, H, DV]` bf16 (when
/// gated), output `y [T, H, DV]` bf16. Grid: `(ceil(T / BM), H, 1)`.
pub fn build_gate(spec: &GateSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    const OP: &str = "gated_mla_gate";
    let (bm, bk, st, wm, wn) =
        (knobs.u32("BM")?, knobs.u32("BK")?, knobs.u32("STAGES")?, knobs.u32("WM")?, knobs.u32("WN")?);
    let (dl, dv) = (spec.dl, spec.dv);
    if wm == 0 || wn == 0 || wm * wn > 16 || bm == 0 || bm % (16 * wm) != 0 || dv % (16 * wn) != 0 {
        return invalid(OP, knobs, format!("BM={bm} WM={wm} WN={wn} do not tile {bm}x{dv}"));
    }
    if bk == 0 || bk % 16 != 0 || dl % bk != 0 || st < 2 {
        return invalid(OP, knobs, format!("BK={bk} must be a multiple of 16 dividing {dl}, STAGES >= 2"));
    }
    let threads = 32 * wm * wn;
    // Measured over the space: 4+ warps, warp column bands of at most 64 and at most 64 accumulator
    // registers per thread assemble without spills at BK <= 64.
    if threads < 128 || dv / wn > 64 || bm * dv / threads > 64 || bk > 64 {
        return invalid(OP, knobs, "needs >= 4 warps, WN >= DV/64, <= 64 accumulator registers, BK <= 64".into());
    }
    let smem = 2 * (st * (bm + dv) * bk + if spec.gate { bm * dv } else { 0 }) as usize;
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, knobs, format!("{smem} bytes of shared memory"));
    }
    let name = format!(
        "k3k_mla_gate_wuv{}_{}x{}_{}",
        if spec.gate { "_sigmoid" } else { "" },
        dl,
        dv,
        knobs.id().to_lowercase()
    );
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(knobs.clone());
    let t = b.dim("T");
    let h = b.dim("H");
    let ol = b.tensor("o_latent", DType::Bf16, &[t.clone(), h.clone(), Expr::from(dl)], Access::Read);
    let w = b.tensor("w_uv", DType::Bf16, &[h.clone(), Expr::from(dv), Expr::from(dl)], Access::Read);
    let z = spec.gate.then(|| b.tensor("z", DType::Bf16, &[t.clone(), h.clone(), Expr::from(dv)], Access::Read));
    let y = b.tensor("y", DType::Bf16, &[t.clone(), h.clone(), Expr::from(dv)], Access::Write);
    b.grid(t.ceil_div(bm as i64), h.clone(), 1i64);

    let warps = [wm, wn];
    let sa = b.shared("sA", DType::Bf16, bm, bk, st, Swizzle::Xor16B);
    let sb = b.shared("sB", DType::Bf16, dv, bk, st, Swizzle::Xor16B);
    let sz = spec.gate.then(|| b.shared("sZ", DType::Bf16, bm, dv, 1, Swizzle::Xor16B));
    let acc = b.tile("acc", DType::F32, bm, dv, warps);
    let zt = spec.gate.then(|| b.tile("zt", DType::Bf16, bm, dv, warps));

    let t0 = b.let_("t0", Expr::block_idx(0) * bm as i64);
    let hh = b.let_("head", Expr::block_idx(1));
    let rows = b.let_("rows", t.clone() - t0.clone());
    let k_tiles = (dl / bk) as i64;
    let load_stage = |b: &mut KernelBuilder, kt: Expr| {
        let slot = kt.clone() % st as i64;
        let k0 = kt * bk as i64;
        let asrc = view(
            ol,
            (t0.clone() * h.clone() + hh.clone()) * dl as i64 + k0.clone(),
            h.clone() * dl as i64,
            rows.clone(),
            bk as i64,
            8,
        );
        let bsrc = view(w, hh.clone() * (dv * dl) as i64 + k0, dl as i64, dv as i64, bk as i64, 8);
        let (ad, bd) = (b.slot(sa, slot.clone()), b.slot(sb, slot));
        b.copy_async(ad, asrc);
        b.copy_async(bd, bsrc);
    };
    let out_off = (t0.clone() * h.clone() + hh.clone()) * dv as i64;
    if let (Some(z), Some(sz)) = (z, sz) {
        // Prefetch the gate tile with the first stage; it is read only in the epilogue.
        let zd = b.slot(sz, 0i64);
        b.copy_async(zd, view(z, out_off.clone(), h.clone() * dv as i64, rows.clone(), dv as i64, 8));
    }
    for i in 0..st - 1 {
        if (i as i64) < k_tiles {
            load_stage(&mut b, Expr::Int(i as i64));
        }
        b.commit();
    }
    b.map(acc, 0.0f64);
    b.for_("kt", 0i64, k_tiles, 1i64, |b, kt| {
        b.wait(st - 2);
        b.barrier();
        let next = &kt + (st - 1) as i64;
        b.if_(next.lt(k_tiles), |b| load_stage(b, next.clone()));
        b.commit();
        let slot = &kt % st as i64;
        let a = Operand::Shared { src: b.slot(sa, slot.clone()), transpose: false };
        let bt = Operand::Shared { src: b.slot(sb, slot), transpose: true };
        b.mma(acc, a, bt);
    });
    b.wait(0);
    if let (Some(zt), Some(sz)) = (zt, sz) {
        b.barrier();
        let zs = b.slot(sz, 0i64);
        b.load(zt, Place::Shared(zs));
        b.map(acc, el(acc) * el(zt).sigmoid());
    }
    b.store(acc, Place::Global(view(y, out_off, h * dv as i64, rows, dv as i64, 8)));
    Ok(b.finish()?)
}
