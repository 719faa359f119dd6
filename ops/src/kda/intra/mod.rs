//! Kernel 1 of the chunked KDA forward: everything that stays inside one chunk, one block per (chunk, value
//! head), all chunks of all sequences in parallel.
//!
//! Per block (rows `row0..row0+len` of one sequence, value head `hv`, chunk size C, tiles of 16 rows):
//! 1. `cp.async` q, k (head `hv / (HV/H)`), v into swizzled shared tiles; the gate tile into registers (from
//!    f32, or bf16 with `g_bf16`), the gate form applied there (`lb*sigmoid(x+bias)` or `-exp(A_log)*softplus(x+dt_bias)`), converted to log2 units
//!    and scanned down the rows: `G~ = cumsum(g) / ln 2` stays in shared memory (`exp2` everywhere after).
//!    beta (optionally through a sigmoid) and the optional L2-norm factors `1/sqrt(sum x^2 + 1e-6)` of the q and
//!    k rows go to a small shared table; the norms are folded into every operand built from q or k.
//! 2. `Qbar = s * Gamma . q` and `Kbar = exp2(G~_last - G~) . k` (bf16) and `gamma = exp2(G~_last)` (f32) to
//!    the scratch of kernel 2.
//! 3. The off-diagonal 16x16 tiles of L and P by hierarchical levels: at level `s` (C/2, ..., 16) the pairs
//!    with the row in the lower half and the column in the upper half of one `2s`-row block are one dense
//!    tensor-core product `(X . exp2(G~ - G~_a)) (K . exp2(G~_a - G~))^T` anchored at the block's row
//!    `a = start + s - 1`: every exponent is <= 0 (safe for any gate), the anchor of a row depends on the row
//!    only, so each level is a single [C, C] product, masked to its own pairs. At chunk 32 (`ODIAG=1`, see
//!    [`IntraOpts::midoff`]) the one off-diagonal tile instead reuses step 4's midpoint-anchored operands.
//! 4. The diagonal tiles as banded (block-diagonal) products, one 16x16 tile per warp row band:
//!    - safe path: anchored at the tile's midpoint row `min(8, valid - 1)` (exponents up to 8 |lb| nats), one
//!      dense M=16 product per tile for P and one for L;
//!    - exact path: the same hierarchy inside the tile (levels 8, 4, 2, 1, all exponents <= 0) plus P's
//!      diagonal `s q.k` by a row reduction.
//! 5. `A = (I + L)^-1` blockwise: forward substitution per 16x16 diagonal tile (one thread per column, the
//!    column in registers) gives `N_ii = (I + L_ii)^-1 - I`; then for row tiles i = 0.. in order
//!    `T_i = R_i - L_{i,<i} X_{<i}` (f32) and `X_i = T_i + N_ii bf16(T_i)` with `R = Diag(beta)[Gamma.k | v]`,
//!    so `X = [W | U]` is never formed through a rounded A. X goes to the scratch (bf16) and to shared memory
//!    for the next row tiles.
//!
//! Shared memory, live ranges (chunk C = 64, K = V = 128, 16-bit operands; KB = 1024 bytes):
//!
//! | buffer | bytes | written in | last read in |
//! |---|---|---|---|
//! | sK (bf16 C x K) | 16 KB | 1 | 5b (R = beta Gamma k) |
//! | sV (bf16 C x V) | 16 KB | 1 | 5b |
//! | sG (f32 C x K, G~) | 32 KB | 1 (scan) | 5b |
//! | sVec, sBias (not with `IMAP=gate`), sN | 0.75 + 0.5 + 2 KB | 1, 1, 4a | 5b |
//! | sQ (bf16 C x K) | 16 KB | 1 | 3 (last off-diagonal level) |
//! | sOp (3 operand slots) | 48 KB (3 x C x K), 12 KB K-chunked | 3, 4 (each level) | the same level |
//! | sD (f32 diagonal P, L tiles) | 8 KB | 4 | P to the scratch (after the levels) |
//! | sLb (L, C x C) | 8 KB | after the levels | 5b |
//! | sXW, sXU (X rows so far) | 16 + 16 KB | 5b | 5b |
//! | sTW, sTU (current T) | 4 + 4 KB | 5b | 5b |
//!
//! Peaks: through the levels sK sV sG sQ sOp sD sN sVec (139 KB with 48 KB of sOp); in the block substitution sK
//! sV sG sN sVec sLb sXW sXU sTW sTU (115 KB). Separate buffers (`ARENA=0`) need all of it at once: 191744 bytes,
//! one block per SM. `ARENA=1` (knob) cuts this to 109568 bytes (<= 113 KB: two blocks per SM in 228 KB):
//! - the level operands are built and multiplied one 32-column chunk of K at a time (sOp 12 KB; the products
//!   accumulate over the chunks, two barriers per chunk instead of one per level);
//! - each T_i is formed in the rows X_i will take in sXW / sXU (one more barrier per row tile), no sTW / sTU;
//! - sQ, sOp, sD (phase A: loads .. P to the scratch) and sXW, sLb, sXU (phase B: L store .. block substitution)
//!   are [`k3k_ir::SharedAlias`]es of one 40 KB arena: sXW over sQ, sLb over sOp only (L is stored before P reads
//!   sD), sXU over the rest of sOp and sD (first written in the block substitution). The CPU backends poison a
//!   buffer's overlapping partners on its first write, so any read across these phases would fail the tests.
//! - (`ARENA=2`, [`IntraOpts::slim`]: not the arena but the separate-buffer chunk-32 `ODIAG` kernel with sQ/sOp
//!   and sV/sXW/sTW/sXU/sTU/sLb in one 40 KB region, v loaded after the diagonal pass: 71 KB, three blocks per SM.)
//! - at <= 8 warps it asks for two blocks per SM (`__launch_bounds__(256, 2)`: 128 registers; ptxas spills
//!   8 bytes on the plain safe path, up to 48 with the in-kernel options). Registers, not only shared memory,
//!   held the old layout at one block per SM at chunk 64: 182 registers on 8 warps, 116 on 16 (512 threads).

use super::{GateForm, KdaSpec, grid};
use crate::OpError;
use k3k_ir::*;

mod phases;
mod rows;

/// log2(e).
pub const LOG2E: f64 = std::f64::consts::LOG2_E;

/// Bound (log2 units) on `|G~_r - G~_anchor|` under which the exact path's adaptive diagonal (`xdiag`) takes the
/// midpoint-anchored tiles of the safe path: the operands then stay within 2^48 of q and k (bf16 and f32 hold
/// that with room to spare: the masked-out products reach 2^96 times K |q||k|), the same numerics as the safe
/// path, whose bound is 8 |lb| nats = 57.7.
pub const XDIAG_BOUND: f64 = 48.0;

/// Layout and arithmetic choices of kernel 1 (knobs `ARENA`, `XDIAG`, `EX2`, `ODIAG`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IntraOpts {
    /// The phase-aliased shared layout (see the module docs).
    pub arena: bool,
    /// Exact path only: per chunk, the midpoint-anchored diagonal tiles when every `|G~_r - G~_anchor|` of the
    /// chunk is within [`XDIAG_BOUND`] (one block-wide check after the scan), the level hierarchy otherwise (e.g.
    /// gates of -1000).
    pub xdiag: bool,
    /// `2^x` as one `ex2.approx.ftz` instead of `exp2f`.
    pub ex2_ftz: bool,
    /// Chunk 32, separate buffers, on the safe path and on the `xdiag` chunks within the bound: the off-diagonal
    /// tile (rows 16..31, columns 0..15) from the diagonal pass's midpoint-anchored A operands of tile 1 and one
    /// more B operand `k_c 2^(G~_a1 - G~_c)` of tile 0 (every exponent <= 0), instead of a level pass (see
    /// [`build_intra`]); `xdiag` chunks past the bound keep the level pass.
    pub midoff: bool,
    /// (`ARENA=2`; safe path with `midoff`, separate-buffer code) The phase-disjoint buffers share one 40 KB
    /// region: phase A sQ, sOp (4 slots); phase B sV (over sQ, its `cp.async` issued after the barrier that
    /// follows the sD store, the last point sQ is read, and waited for before the barrier after the sLb store),
    /// sXW, sTW, sXU, sTU and sLb (over sOp; one more barrier before the sLb store retires the off-diagonal
    /// products' reads of sOp). 71 KB instead of 106 KB: three blocks per SM at 8 warps (`__launch_bounds__(256,
    /// 3)`: 80 registers).
    pub slim: bool,
    /// The f32 buffer of G~ (`sG`) in [`Swizzle::Xor16BPairs`] instead of `Xor16B` (knob `GSWZ=pairs`).
    pub g_pairs: bool,
    /// (Knob `FULLC=1`) The phases twice behind one block-uniform branch on `len == C`: the copy of full chunks
    /// has the length the constant C, so the row masks of the maps (`r < len`), the row bounds of the tile loads
    /// and stores and the midpoint anchors (`min(8, len - 1 - t0)`) fold to constants; a sequence's partial last
    /// chunk runs the generic copy. The same arithmetic on the same values in both copies: the same bits. The
    /// code doubles, but a block runs one copy. (The SASS of the default kernel at B1 T8192 H96 is ~44% integer
    /// and address instructions with ~4,700 issued per warp against an issue floor near the measured time:
    /// `lab/2026-12-06/2340-h100-profile/findings.md`.)
    pub full_chunks: bool,
    /// (Knob `GSIG=fast`) The `lb * sigmoid(..)` gate forms' sigmoid as `rsqrt(1 + 2^(-z log2 e))^2` (one
    /// `ex2.approx.ftz`, one `rsqrt.approx`: no IEEE `expf` and division with their per-element slow-path branches)
    /// and `exp(A_log)` once per block.
    pub fast_gate_sigmoid: bool,
    /// (Knob `L2R=unrolled`) The L2 norms' column loop unrolled (K/32 independent shared loads a row and lane,
    /// all rows of a warp in straight-line code) instead of a runtime loop per row. The ncu source profile of
    /// 2026-12-06 23:54 UTC (H100, B1 T8192 H96) gave this segment 19% of the kernel's stall samples, 47% of them
    /// short scoreboard: each row's loads and shuffles waited on one another.
    pub l2_unrolled: bool,
    /// (`USTATE=1`) No v, no U half of the block substitution: the kernel writes W alone (`w`, C x K) and the
    /// factors the state pass forms U from: `nf` (N_ii, C x 16), `lf` (rows 16.. and columns ..C-16 of L with beta,
    /// the strictly lower blocks), `bf` (beta as applied, C f32). Kernel names end in `_us`.
    pub u_state: bool,
    /// (`IMAP=rows`) Qbar, Kbar and the L2 norms in one row-major pass ([`Intra::qk_rows`]): each thread takes 8
    /// consecutive columns of a row, moved by 16-byte shared loads and global stores; the norms are summed from
    /// the registers of q and k (the K/8 lanes of a row reduce by shuffles), replacing the norms' own pass. Where
    /// the shape does not split so (K/8 lanes a row dividing the warp, whole passes of rows), the tile maps run.
    pub rows_qk: bool,
    /// (`IMAP=ops`, with `rows_qk`, on the safe path with `midoff`) The diagonal tiles' operands (slots 0..3 of
    /// sOp) built in the same pass from the same registers, as 16-byte shared stores, instead of
    /// [`Intra::build_operands`]' K-chunked tile maps.
    pub rows_ops: bool,
    /// (`IMAP=gate`, with `rows_qk`) The gate form in the row layout, see [`Intra::gate_rows`].
    pub rows_gate: bool,
    /// (`IFOLD=1`) The row pass's norm factors multiplied into q and k once (every operand built from the scaled
    /// values) and, with `fast_gate_sigmoid`, the gate's `-a log2 e` and `lb log2 e` as block constants.
    pub fold: bool,
    /// (`IFOLD=2`, with `rows_ops` and `full_chunks`) The block substitution's `R = beta Gamma k n_k` built by the
    /// row pass of full chunks and written over G~ in sG (see [`Intra::qk_rows`]); partial chunks build it as before.
    pub r_rows: bool,
    /// (`ISOLVE=1`) The forward substitution loads L's rows by 16-byte shared loads and stores N transposed in sN
    /// (thread t's column of N is row t of sN: two 16-byte stores); the block substitution reads N_ii as a
    /// transposed A operand. The same values in the same order.
    pub solve_wide: bool,
    /// (`ISOLVE=2`, with `solve_wide`, on the safe path with `slim`) The off-diagonal tile's products (slots 0, 1,
    /// 3 of sOp, ready after the row pass) run in the diagonal products' segment, before the barrier after sD,
    /// which then also retires sOp's reads before sLb takes its bytes: one barrier fewer, the same values.
    pub solve_early: bool,
    /// (`IREPL=1`) The diagonal tiles (dP, dL, dSelf) and the [C, C] totals as solo register tiles: the warps past
    /// their warp grids skip their loads, maps and products instead of computing replicas. The same values.
    pub solo: bool,
    /// (`MADDR=origin`) The `mma.sync` loads addressed from per-thread origins ([`Kernel::mma_origins`]).
    pub mma_origins: bool,
    /// (`IWU=wide`) W and U to the scratch by vector stores (fragments regrouped across a quad: 8 or 16 bytes a lane,
    /// whole 32-byte sectors a quad) also where the in-kernel gate, norm or beta options run; the plain variants
    /// always store so.
    pub wide_wu: bool,
    /// (`IWU=pinned`) Every 16-byte `StoreWide` of the kernel (the Qbar and Kbar rows) by one `st.global.v4` that
    /// the compiler cannot split ([`Kernel::pinned_wide_stores`]). The same values.
    pub pinned_stores: bool,
}

impl IntraOpts {
    /// The options as they apply to a variant, chunk size and warp count (each where its path exists).
    fn resolve(self, spec: &KdaSpec, c: u32, warps: u32) -> IntraOpts {
        let o = self;
        let l2_unrolled = o.l2_unrolled && spec.l2norm;
        let fast_gate_sigmoid = o.fast_gate_sigmoid && matches!(spec.gate, GateForm::Safe { .. });
        let xdiag = o.xdiag && !spec.safe;
        let midoff = o.midoff && (spec.safe || xdiag) && c == 32 && !o.arena;
        let slim = o.slim && midoff && spec.safe;
        let rows_qk = o.rows_qk && rows_fit(spec.dk, c, warps);
        let rows_ops = o.rows_ops && rows_qk && spec.safe && midoff;
        // (`IFOLD` where it changes something: the row pass with the in-kernel norms, or the fast gate sigmoid.)
        let fold = o.fold && ((rows_qk && spec.l2norm) || fast_gate_sigmoid);
        let r_rows = o.r_rows && rows_ops && o.full_chunks && o.fold;
        let rows_gate = o.rows_gate && rows_qk;
        let solve_wide = o.solve_wide && !o.u_state;
        let solve_early = o.solve_early && solve_wide && slim && spec.safe;
        let wide_wu = o.wide_wu && !spec.plain();
        IntraOpts {
            xdiag,
            midoff,
            slim,
            fast_gate_sigmoid,
            l2_unrolled,
            rows_qk,
            rows_ops,
            rows_gate,
            fold,
            r_rows,
            solve_wide,
            solve_early,
            wide_wu,
            ..o
        }
    }

    /// The kernel-name suffix of the options (as resolved for a variant).
    fn name_suffix(&self) -> String {
        let flags = [
            (self.mma_origins, "_oa"),
            (self.arena, "_a"),
            (self.xdiag, "_xd"),
            (self.ex2_ftz, "_ftz"),
            (self.midoff, "_mo"),
            (self.slim, "_sl"),
            (self.g_pairs, "_gp"),
            (self.full_chunks, "_fc"),
            (self.fast_gate_sigmoid, "_gsf"),
            (self.l2_unrolled, "_l2u"),
            (self.u_state, "_us"),
            (self.rows_qk, "_rq"),
            (self.rows_ops, "_ro"),
            (self.rows_gate, "_rg"),
            (self.fold, "_if"),
            (self.r_rows, "_rr"),
            (self.solve_wide, "_sw"),
            (self.solve_early, "_se"),
            (self.solo, "_so"),
            (self.wide_wu, "_ww"),
            (self.pinned_stores, "_pv"),
        ];
        flags.iter().filter(|f| f.0).map(|f| f.1).collect()
    }
}

/// `e` times `f` where there is one.
fn times(e: Expr, f: Option<Expr>) -> Expr {
    match f {
        Some(f) => e * f,
        None => e,
    }
}

/// (`IMAP`) Whether the row pass fits the shape: K/8 lanes a row dividing the warp (their shuffles stay inside it),
/// and the chunk's rows and a pass's rows (`threads / (K/8)`, powers of two both) dividing one another.
fn rows_fit(dk: u32, c: u32, warps: u32) -> bool {
    let lanes_row = dk / 8;
    let rows_pass = 32 * warps / lanes_row.max(1);
    dk.is_multiple_of(8)
        && lanes_row.is_power_of_two()
        && lanes_row <= 32
        && (c.is_multiple_of(rows_pass) || rows_pass.is_multiple_of(c))
}

/// The first thread of the forward substitution (see `Intra::solve_t0`): with `solve_wide` and `solo`, the last C
/// threads when their warps own neither a diagonal tile ([C/16, 1] warps) nor a band of the [C, C] totals; else 0.
fn solve_first_thread(o: &IntraOpts, c: u32, warps: u32) -> i64 {
    let ag = grid(c, c, warps, 16);
    let owners = 32 * (ag[0] * ag[1]).max(c / 16);
    if o.solve_wide && o.solo && 32 * warps >= owners + c { (32 * warps - c) as i64 } else { 0 }
}

/// The shared buffers of the intra kernel that depend on the layout (`slim`, `arena`, or separate):
/// sQ, sOp, sD, sXW, sXU, sLb, (sTW, sTU) where T has its own buffers, sV.
type SharedLayout =
    (SharedId, SharedId, SharedId, SharedId, SharedId, SharedId, Option<(SharedId, SharedId)>, SharedId);

/// Declare the layout-dependent shared buffers of the intra kernel (`sv_own`: sV where it is not aliased).
#[allow(clippy::too_many_arguments)]
fn shared_layout(
    b: &mut KernelBuilder,
    c: u32,
    dk: u32,
    dv: u32,
    op_dt: DType,
    lvl_dt: DType,
    slim: bool,
    arena: bool,
    midoff: bool,
    opk: u32,
    sv_own: Option<SharedId>,
) -> Result<SharedLayout, OpError> {
    let bytes = |dt: DType, rows: u32, cols: u32, count: u32| (dt.storage_bytes((rows * cols) as usize) as u32) * count;
    Ok(if slim {
        // Phase A: sQ @0, sOp @8 KB (4 slots); phase B: sV @0, sXW, sTW, sXU, sTU, sLb over sOp (K = V = 128).
        let q_b = bytes(DType::Bf16, c, dk, 1);
        let op_b = bytes(lvl_dt, c, dk, 4);
        let (xw_b, tw_b, xu_b, tu_b) =
            (bytes(op_dt, c, dk, 1), bytes(op_dt, 16, dk, 1), bytes(op_dt, c, dv, 1), bytes(op_dt, 16, dv, 1));
        let v_b = bytes(DType::Bf16, c, dv, 1);
        let (a_xw, a_tw) = (q_b, q_b + xw_b);
        let (a_xu, a_tu) = (a_tw + tw_b, a_tw + tw_b + xu_b);
        let a_lb = a_tu + tu_b;
        let total = q_b + op_b;
        if v_b > q_b || a_lb + bytes(op_dt, c, c, 1) > total || !total.is_multiple_of(512) {
            return Err(OpError::Internal(format!("kda intra ARENA=2: layout does not fit (K={dk}, V={dv})")));
        }
        let root = b.shared("sRegion", DType::F32, total / 512, 128, 1, Swizzle::None);
        let sq = b.shared_alias("sQ", DType::Bf16, c, dk, 1, Swizzle::Xor16B, root, 0);
        let sop = b.shared_alias("sOp", lvl_dt, c, dk, 4, Swizzle::Xor16B, root, q_b);
        let sv = b.shared_alias("sV", DType::Bf16, c, dv, 1, Swizzle::Xor16B, root, 0);
        let sxw = b.shared_alias("sXW", op_dt, c, dk, 1, Swizzle::Xor16B, root, a_xw);
        let stw = b.shared_alias("sTW", op_dt, 16, dk, 1, Swizzle::Xor16B, root, a_tw);
        let sxu = b.shared_alias("sXU", op_dt, c, dv, 1, Swizzle::Xor16B, root, a_xu);
        let stu = b.shared_alias("sTU", op_dt, 16, dv, 1, Swizzle::Xor16B, root, a_tu);
        let slb = b.shared_alias("sLb", op_dt, c, c, 1, Swizzle::Xor16B, root, a_lb);
        let sd = b.shared("sD", DType::F32, c, 16, 2, Swizzle::None);
        (sq, sop, sd, sxw, sxu, slb, Some((stw, stu)), sv)
    } else if arena {
        // Phase A (loads .. off-diagonal levels): sQ, sOp, sD; phase B (L store .. block substitution): sXW, sXU,
        // sLb, with each T in the rows its X will take. Offsets on 1 KB (swizzle atoms).
        let at = |o: u32| o.next_multiple_of(1024);
        let a_q = 0;
        let a_op = at(a_q + bytes(DType::Bf16, c, dk, 1));
        let a_d = at(a_op + bytes(lvl_dt, c, opk, 3));
        let a_end = at(a_d + bytes(DType::F32, c, 16, 2));
        // sLb over sOp only (written while sD's P tiles are still to be read), sXU over the rest.
        let b_xw = 0;
        let b_lb = at(b_xw + bytes(op_dt, c, dk, 1));
        let b_xu = at(b_lb + bytes(op_dt, c, c, 1));
        let b_end = at(b_xu + bytes(op_dt, c, dv, 1));
        debug_assert!(b_lb >= a_op && b_lb + bytes(op_dt, c, c, 1) <= a_d, "sLb must not overlap sD");
        let total = a_end.max(b_end);
        let root = b.shared("sArena", DType::F32, total / 512, 128, 1, Swizzle::None);
        let sq = b.shared_alias("sQ", DType::Bf16, c, dk, 1, Swizzle::Xor16B, root, a_q);
        let sop = b.shared_alias("sOp", lvl_dt, c, opk, 3, Swizzle::Xor16B, root, a_op);
        let sd = b.shared_alias("sD", DType::F32, c, 16, 2, Swizzle::None, root, a_d);
        let sxw = b.shared_alias("sXW", op_dt, c, dk, 1, Swizzle::Xor16B, root, b_xw);
        let sxu = b.shared_alias("sXU", op_dt, c, dv, 1, Swizzle::Xor16B, root, b_xu);
        let slb = b.shared_alias("sLb", op_dt, c, c, 1, Swizzle::Xor16B, root, b_lb);
        (sq, sop, sd, sxw, sxu, slb, None, sv_own.unwrap())
    } else {
        let sq = b.shared("sQ", DType::Bf16, c, dk, 1, Swizzle::Xor16B);
        // Operands of the level products: A side of P (0), A side of L (1), B side (2).
        // (`midoff`: a fourth, the B operand of the off-diagonal tile.)
        let sop = b.shared("sOp", lvl_dt, c, dk, if midoff { 4 } else { 3 }, Swizzle::Xor16B);
        // Block substitution: X = [W | U] rows done so far and the current T (both halves).
        let sxw = b.shared("sXW", op_dt, c, dk, 1, Swizzle::Xor16B);
        let stw = b.shared("sTW", op_dt, 16, dk, 1, Swizzle::Xor16B);
        let sxu = b.shared("sXU", op_dt, c, dv, 1, Swizzle::Xor16B);
        let stu = b.shared("sTU", op_dt, 16, dv, 1, Swizzle::Xor16B);
        // Diagonal tiles (f32, masked): P (0) and L (1, with beta).
        let sd = b.shared("sD", DType::F32, c, 16, 2, Swizzle::None);
        let slb = b.shared("sLb", op_dt, c, c, 1, Swizzle::Xor16B);
        (sq, sop, sd, sxw, sxu, slb, Some((stw, stu)), sv_own.unwrap())
    })
}

/// The intra kernel being built: its options, dims, tensors, shared buffers, register tiles and block
/// coordinates, declared by [`Intra::declare`]; each phase of [`build_intra`] is a method, called in the order
/// the kernel runs them.
#[derive(Clone)]
struct Intra {
    spec: KdaSpec,
    dk: u32,
    dv: u32,
    c: u32,
    nt: u32,
    kc: u32,
    opk: u32,
    threads: u32,
    arena: bool,
    ex2_ftz: bool,
    midoff: bool,
    slim: bool,
    fast_gate_sigmoid: bool,
    l2_unrolled: bool,
    rows_qk: bool,
    rows_ops: bool,
    rows_gate: bool,
    fold: bool,
    r_rows: bool,
    solve_wide: bool,
    solve_early: bool,
    /// W and U by vector stores also with the in-kernel options (`IWU=wide`; the plain variants always store so).
    wide_wu: bool,
    /// The first thread of the forward substitution: 0, or (`ISOLVE=1` with `IREPL=1`) the last C threads where
    /// their warps own neither a diagonal tile nor a band of the [C, C] totals (idle replicas), so the solve runs
    /// beside the off-diagonal products instead of after them on warp 0.
    solve_t0: i64,
    kk: i64,
    vv: i64,
    cc: i64,
    /// (`USTATE=1`) The factor outputs `nf`, `lf`, `bf` (see [`IntraOpts::u_state`]).
    ufac: Option<(TensorId, TensorId, TensorId)>,
    q: TensorId,
    k: TensorId,
    v: TensorId,
    g: TensorId,
    beta: TensorId,
    bias: Option<TensorId>,
    a_log: Option<TensorId>,
    wu: TensorId,
    qb: TensorId,
    kb: TensorId,
    pm: TensorId,
    gam: TensorId,
    sk: SharedId,
    sg: SharedId,
    svec: SharedId,
    sbias: Option<SharedId>,
    sn: SharedId,
    sxd: Option<SharedId>,
    sq: SharedId,
    sop: SharedId,
    sd: SharedId,
    sxw: SharedId,
    sxu: SharedId,
    slb: SharedId,
    st: Option<(SharedId, SharedId)>,
    sv: SharedId,
    tg: TileId,
    tx: TileId,
    top: TileId,
    tgr: TileId,
    tga: TileId,
    txin: TileId,
    vnq: Option<VecId>,
    vnk: Option<VecId>,
    tot_p: TileId,
    tot_l: TileId,
    dp: TileId,
    dl: TileId,
    dself: TileId,
    acc_w: TileId,
    acc_u: TileId,
    tk16: TileId,
    tg16: TileId,
    tv16: TileId,
    vbw: VecId,
    vbu: VecId,
    vnk16: Option<VecId>,
    h: Expr,
    hv: Expr,
    scale: Expr,
    lb: Option<Expr>,
    hvi: Expr,
    row0: Expr,
    len: Expr,
    last: Expr,
    hq: Expr,
    slot_base: Expr,
}

impl Intra {
    /// The kernel name, its tensors, shared buffers, register tiles and block coordinates, in the builder order
    /// of the kernel.
    fn declare(
        spec: &KdaSpec,
        chunk: u32,
        warps: u32,
        op_dt: DType,
        lvl_dt: DType,
        o: IntraOpts,
    ) -> Result<(KernelBuilder, Intra), OpError> {
        let resolved = o.resolve(spec, chunk, warps);
        let IntraOpts { arena, xdiag, ex2_ftz, midoff, slim, g_pairs, fast_gate_sigmoid, l2_unrolled, u_state, .. } =
            resolved;
        let IntraOpts { rows_qk, rows_ops, rows_gate, fold, r_rows, solve_wide, solve_early, .. } = resolved;
        let (dk, dv, c) = (spec.dk, spec.dv, chunk);
        let nt = c / 16;
        // The midpoint-anchored diagonal operands reach e^(8|lb|) on the safe path and 2^XDIAG_BOUND with `xdiag`:
        // bf16 there (f16 would overflow).
        let lvl_dt = if spec.safe || xdiag { DType::Bf16 } else { lvl_dt };
        let threads = 32 * warps;
        let name = format!("k3k_kda_intra_{}_c{c}_w{warps}_{op_dt}_{lvl_dt}{}", spec.tag(), resolved.name_suffix());
        let mut b = KernelBuilder::new(&name, threads);
        let (kk, vv, cc) = (dk as i64, dv as i64, c as i64);
        let (tt, h, hv, nch) = (b.dim("TT"), b.dim("H"), b.dim("HV"), b.dim("NCH"));
        let q = b.tensor("q", DType::Bf16, &[tt.clone(), h.clone(), Expr::Int(kk)], Access::Read);
        let k = b.tensor("k", DType::Bf16, &[tt.clone(), h.clone(), Expr::Int(kk)], Access::Read);
        let v = b.tensor("v", DType::Bf16, &[tt.clone(), hv.clone(), Expr::Int(vv)], Access::Read);
        // (`g_bf16`: the raw gate input in bf16, converted to f32 on the load into the gate tile.)
        let g_dt = if spec.g_bf16 { DType::Bf16 } else { DType::F32 };
        let g = b.tensor("g", g_dt, &[tt.clone(), hv.clone(), Expr::Int(kk)], Access::Read);
        let beta = b.tensor("beta", DType::Bf16, &[tt.clone(), hv.clone()], Access::Read);
        let bias =
            spec.gate.has_bias().then(|| b.tensor("bias", DType::F32, &[hv.clone(), Expr::Int(kk)], Access::Read));
        let a_log =
            spec.gate.has_a_log().then(|| b.tensor("a_log", DType::F32, std::slice::from_ref(&hv), Access::Read));
        let ctab = b.tensor("ctab", DType::I32, &[nch.clone(), Expr::Int(2)], Access::Read);
        let (wu_name, wu_cols) = if u_state { ("w", kk) } else { ("wu", kk + vv) };
        let wu = b.tensor(wu_name, op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(wu_cols)], Access::Write);
        let qb = b.tensor("qb", op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(kk)], Access::Write);
        let kb = b.tensor("kb", op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(kk)], Access::Write);
        let pm = b.tensor("pm", op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(cc)], Access::Write);
        let gam = b.tensor("gam", DType::F32, &[hv.clone(), nch.clone(), Expr::Int(kk)], Access::Write);
        let ufac = u_state.then(|| super::state::u_factor_tensors(&mut b, op_dt, c, Access::Write));
        let scale = b.float_arg("scale");
        let lb = matches!(spec.gate, GateForm::Safe { .. }).then(|| b.float_arg("lb"));
        b.grid(nch.clone(), hv.clone(), 1i64);

        // Shared memory. Column chunks of KC for wide element-wise work (fewer values in flight per thread); with
        // the arena the level operands are built and multiplied one such chunk at a time.
        let kc = dk.min(32);
        let opk = if arena { kc } else { dk };
        let sk = b.shared("sK", DType::Bf16, c, dk, 1, Swizzle::Xor16B);
        let sv_own = (!slim).then(|| b.shared("sV", DType::Bf16, c, dv, 1, Swizzle::Xor16B));
        // (f32, moved as pairs by the scan, the operand builds and the substitution: `g_pairs` takes the pair-friendly
        // swizzle.)
        let sg = b.shared("sG", DType::F32, c, dk, 1, if g_pairs { Swizzle::Xor16BPairs } else { Swizzle::Xor16B });
        // Row table: beta (0), q norm factor (1), k norm factor (2).
        let svec = b.shared("sVec", DType::F32, 3, c, 1, Swizzle::None);
        let sbias =
            (spec.gate.has_bias() && !rows_gate).then(|| b.shared("sBias", DType::F32, 1, dk, 1, Swizzle::None));
        let sn = b.shared("sN", op_dt, c, 16, 1, Swizzle::Xor16B);
        // `xdiag`: the chunk's flag (0: every |G~_r - G~_anchor| within the bound).
        let sxd = xdiag.then(|| b.shared("sXd", DType::F32, 1, 4, 1, Swizzle::None));
        let (sq, sop, sd, sxw, sxu, slb, st, sv) =
            shared_layout(&mut b, c, dk, dv, op_dt, lvl_dt, slim, arena, midoff, opk, sv_own)?;
        if slim && threads <= 256 {
            // Three blocks per SM (71 KB each): ptxas keeps the registers within 65536 / (3 * threads).
            b.min_blocks_per_sm(3);
        } else if arena && threads <= 256 {
            // Two blocks per SM: ptxas keeps the registers within 65536 / (2 * threads).
            b.min_blocks_per_sm(2);
        }

        // Register tiles.
        let rg = grid(c, dk, warps, 8);
        let tg = b.tile("tG", DType::F32, c, dk, rg);
        let cg = grid(c, kc, warps, 8);
        let tx = b.tile("tX", DType::F32, c, kc, cg);
        let top = b.tile("tOp", lvl_dt, c, kc, cg);
        // Column chunks of G~ (its rows, its anchor rows) and of q or k, loaded as tiles (pair accesses).
        let tgr = b.tile("tGr", DType::F32, c, kc, cg);
        let tga = b.tile("tGa", DType::F32, c, kc, cg);
        let txin = b.tile("tXin", DType::F32, c, kc, cg);
        // Per-row norm factors of q and k for the chunk maps.
        let (vnq, vnk) = if spec.l2norm { (Some(b.vec("nq", c, cg)), Some(b.vec("nk", c, cg))) } else { (None, None) };
        let (ag, dg) = (grid(c, c, warps, 16), [nt, 1]);
        let (tot_p, tot_l) = (b.tile("totP", DType::F32, c, c, ag), b.tile("totL", DType::F32, c, c, ag));
        let [dp, dl, dself] = ["dP", "dL", "dSelf"].map(|n| b.tile(n, DType::F32, c, 16, dg));
        if resolved.solo {
            [tot_p, tot_l, dp, dl, dself].into_iter().for_each(|t| b.solo(t));
        }
        let solve_t0 = solve_first_thread(&resolved, c, warps);
        let (wg, ug) = (grid(16, dk, warps, 16), grid(16, dv, warps, 16));
        let acc_w = b.tile("accW", DType::F32, 16, dk, wg);
        let acc_u = b.tile("accU", DType::F32, 16, dv, ug);
        let tk16 = b.tile("tK16", DType::F32, 16, dk, wg);
        let tg16 = b.tile("tG16", DType::F32, 16, dk, wg);
        let tv16 = b.tile("tV16", DType::F32, 16, dv, ug);
        let vbw = b.vec("betaW", 16, wg);
        let vbu = b.vec("betaU", 16, ug);
        let vnk16 = spec.l2norm.then(|| b.vec("nk16", 16, wg));

        // Block coordinates.
        let ch = b.let_("ch", Expr::block_idx(0));
        let hvi = b.let_("hv", Expr::block_idx(1));
        let row0 = b.let_("row0", Expr::load(ctab, &ch * 2i64));
        let len = b.let_("len", Expr::load(ctab, &ch * 2i64 + 1i64));
        let last = b.let_("last", &len - 1i64);
        let hq = b.let_("hq", &hvi / (hv.clone() / h.clone()));
        let slot_base = b.let_("slot", &hvi * nch.clone() + ch.clone());
        let spec = *spec;
        Ok((
            b,
            Intra {
                spec,
                dk,
                dv,
                c,
                nt,
                kc,
                opk,
                threads,
                arena,
                ex2_ftz,
                midoff,
                slim,
                fast_gate_sigmoid,
                l2_unrolled,
                rows_qk,
                rows_ops,
                rows_gate,
                fold,
                r_rows,
                solve_wide,
                solve_early,
                wide_wu: resolved.wide_wu,
                solve_t0,
                kk,
                vv,
                cc,
                ufac,
                q,
                k,
                v,
                g,
                beta,
                bias,
                a_log,
                wu,
                qb,
                kb,
                pm,
                gam,
                sk,
                sg,
                svec,
                sbias,
                sn,
                sxd,
                sq,
                sop,
                sd,
                sxw,
                sxu,
                slb,
                st,
                sv,
                tg,
                tx,
                top,
                tgr,
                tga,
                txin,
                vnq,
                vnk,
                tot_p,
                tot_l,
                dp,
                dl,
                dself,
                acc_w,
                acc_u,
                tk16,
                tg16,
                tv16,
                vbw,
                vbu,
                vnk16,
                h,
                hv,
                scale,
                lb,
                hvi,
                row0,
                len,
                last,
                hq,
                slot_base,
            },
        ))
    }

    /// `2^x`: with `ex2_ftz` the single `ex2.approx.ftz` (a result below 2^-126 is 0: every such factor lands in
    /// an f16 operand, whose smallest subnormal is 2^-24, or in a bf16 one next to O(1) terms, or is a decay of
    /// the f32 state by less than 2^-126), else `exp2f` with its subnormal range test and two scalings.
    fn ex2(&self, e: Expr) -> Expr {
        if self.ex2_ftz { e.exp2_ftz() } else { e.exp2() }
    }
    /// G~ (sG) at row `r`, column `col` (inside maps).
    fn gs(&self, r: Expr, col: Expr) -> Expr {
        Expr::shared_load(self.sg, 0i64, r, col)
    }
    /// q (sQ) at row `r`, column `col`.
    fn qs(&self, r: Expr, col: Expr) -> Expr {
        Expr::shared_load(self.sq, 0i64, r, col)
    }
    /// k (sK) at row `r`, column `col`.
    fn ks(&self, r: Expr, col: Expr) -> Expr {
        Expr::shared_load(self.sk, 0i64, r, col)
    }
    /// The norm factor of q's row `r` (with `l2norm`).
    fn nq(&self, r: Expr) -> Option<Expr> {
        if self.spec.l2norm { Some(Expr::shared_load(self.svec, 0i64, 1i64, r)) } else { None }
    }
    /// The norm factor of k's row `r` (with `l2norm`).
    fn nk(&self, r: Expr) -> Option<Expr> {
        if self.spec.l2norm { Some(Expr::shared_load(self.svec, 0i64, 2i64, r)) } else { None }
    }
    /// beta of row `r`.
    fn beta_at(&self, r: Expr) -> Expr {
        Expr::shared_load(self.svec, 0i64, 0i64, r)
    }
    /// `e` times the row's q norm factor (a row vector of the chunk maps) where there is one.
    fn rq(&self, e: Expr) -> Expr {
        match self.vnq {
            Some(v) => e * Expr::RowVal(v),
            None => e,
        }
    }
    /// `e` times the row's k norm factor where there is one.
    fn rk(&self, e: Expr) -> Expr {
        match self.vnk {
            Some(v) => e * Expr::RowVal(v),
            None => e,
        }
    }
    /// The midpoint anchor of a row's 16-row tile: min(8, valid - 1) rows into the tile.
    fn mid_anchor(&self, r: Expr) -> Expr {
        let t0 = r.bitand(-16i64);
        if matches!(self.len, Expr::Int(l) if l == self.cc) {
            // (The full-chunk copy: every tile has 16 valid rows, so the anchor is row 8 of the tile, the same
            // value without the 64-bit min/max of a runtime row.)
            return t0 + 8i64;
        }
        t0.clone() + (self.len.clone() - t0 - 1i64).min(8i64).max(0i64)
    }
}

/// Build kernel 1 for a variant, chunk size and warp count with the options `o`.
///
/// `o.midoff` (applies at chunk 32 with separate buffers, on the safe path and on the exact path's `xdiag`
/// chunks within the bound): with a1 the midpoint anchor of tile 1, `q_r.k_c 2^(G~_r - G~_c) = (q_r 2^(G~_r -
/// G~_a1)).(k_c 2^(G~_a1 - G~_c))` for r in tile 1 and c in tile 0. The left factor is the diagonal pass's A
/// operand of row r (already in shared memory; |G~_r - G~_a1| is within 8 |lb| nats by the safe-path bound, or
/// within [`XDIAG_BOUND`] on an `xdiag` chunk), the right one has a non-positive exponent (a1 > c), so one
/// extra operand of 16 rows (built in the same column-chunk loop as the diagonal operands) and two [C, C]
/// products replace the level pass: its operand build over C x K (two `2^x` and three operands per element),
/// its per-element anchor loads and its two barriers.
pub fn build_intra(
    spec: &KdaSpec,
    chunk: u32,
    warps: u32,
    op_dt: DType,
    lvl_dt: DType,
    o: IntraOpts,
) -> Result<Kernel, OpError> {
    let (mut b, x) = Intra::declare(spec, chunk, warps, op_dt, lvl_dt, o)?;
    b.mma_origins(o.mma_origins);
    b.pinned_wide_stores(o.pinned_stores);
    if o.full_chunks {
        // (`FULLC=1`) Full chunks: the same phases with the length (and the last row) constants.
        let c = chunk as i64;
        let full = Intra { len: Expr::Int(c), last: Expr::Int(c - 1), ..x.clone() };
        let is_full = x.len.clone().eq(c);
        // (`IFOLD=2`: R by the row pass in full chunks only.)
        // (`ISOLVE=2`: the early products in full chunks only: in the generic copy ptxas spilled 64 bytes.)
        let generic = Intra { r_rows: false, solve_early: false, ..x.clone() };
        b.if_else(is_full, |b| full.phases(b), |b| generic.phases(b));
    } else {
        x.phases(&mut b);
    }
    Ok(b.finish()?)
}

impl Intra {
    /// Every phase, in the kernel's order.
    fn phases(&self, b: &mut KernelBuilder) {
        self.loads_and_scan(b);
        if self.rows_qk {
            self.qk_rows(b);
        } else {
            if self.spec.l2norm {
                self.l2_norms(b);
            }
            self.qbar_kbar_gamma(b);
        }
        let xd_ok = self.diagonal_tiles(b);
        self.forward_substitution(b);
        self.off_diagonal(b, xd_ok);
        self.block_substitution(b);
    }
}
