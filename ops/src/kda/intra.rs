//! Kernel 1 of the chunked KDA forward: everything that stays inside one chunk, one block per (chunk, value
//! head), all chunks of all sequences in parallel.
//!
//! Per block (rows `row0..row0+len` of one sequence, value head `hv`, chunk size C, tiles of 16 rows):
//! 1. `cp.async` q, k (head `hv / (HV/H)`), v into swizzled shared tiles; the gate tile into registers, the gate
//!    form applied there (`lb*sigmoid(x+bias)` or `-exp(A_log)*softplus(x+dt_bias)`), converted to log2 units
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
//! | sVec, sBias, sN | 0.75 + 0.5 + 2 KB | 1, 1, 4a | 5b |
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
    let IntraOpts { arena, xdiag, ex2_ftz, midoff, slim, g_pairs } = o;
    let (dk, dv, c) = (spec.dk, spec.dv, chunk);
    // `2^x`: with `ex2_ftz` the single `ex2.approx.ftz` (a result below 2^-126 is 0: every such factor lands in
    // an f16 operand, whose smallest subnormal is 2^-24, or in a bf16 one next to O(1) terms, or is a decay of
    // the f32 state by less than 2^-126), else `exp2f` with its subnormal range test and two scalings.
    let ex2 = |e: Expr| if ex2_ftz { e.exp2_ftz() } else { e.exp2() };
    let nt = c / 16;
    let xdiag = xdiag && !spec.safe;
    let midoff = midoff && (spec.safe || xdiag) && c == 32 && !arena;
    let slim = slim && midoff && spec.safe;
    // The midpoint-anchored diagonal operands reach e^(8|lb|) on the safe path and 2^XDIAG_BOUND with `xdiag`:
    // bf16 there (f16 would overflow).
    let lvl_dt = if spec.safe || xdiag { DType::Bf16 } else { lvl_dt };
    let threads = 32 * warps;
    let name = format!(
        "k3k_kda_intra_{}_c{c}_w{warps}_{op_dt}_{lvl_dt}{}{}{}{}{}{}",
        spec.tag(),
        if arena { "_a" } else { "" },
        if xdiag { "_xd" } else { "" },
        if ex2_ftz { "_ftz" } else { "" },
        if midoff { "_mo" } else { "" },
        if slim { "_sl" } else { "" },
        if g_pairs { "_gp" } else { "" }
    );
    let mut b = KernelBuilder::new(&name, threads);
    let (kk, vv, cc) = (dk as i64, dv as i64, c as i64);
    let tt = b.dim("TT");
    let h = b.dim("H");
    let hv = b.dim("HV");
    let nch = b.dim("NCH");
    let q = b.tensor("q", DType::Bf16, &[tt.clone(), h.clone(), Expr::Int(kk)], Access::Read);
    let k = b.tensor("k", DType::Bf16, &[tt.clone(), h.clone(), Expr::Int(kk)], Access::Read);
    let v = b.tensor("v", DType::Bf16, &[tt.clone(), hv.clone(), Expr::Int(vv)], Access::Read);
    let g = b.tensor("g", DType::F32, &[tt.clone(), hv.clone(), Expr::Int(kk)], Access::Read);
    let beta = b.tensor("beta", DType::Bf16, &[tt.clone(), hv.clone()], Access::Read);
    let bias = spec.gate.has_bias().then(|| b.tensor("bias", DType::F32, &[hv.clone(), Expr::Int(kk)], Access::Read));
    let a_log = spec.gate.has_a_log().then(|| b.tensor("a_log", DType::F32, std::slice::from_ref(&hv), Access::Read));
    let ctab = b.tensor("ctab", DType::I32, &[nch.clone(), Expr::Int(2)], Access::Read);
    let wu = b.tensor("wu", op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(kk + vv)], Access::Write);
    let qb = b.tensor("qb", op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(kk)], Access::Write);
    let kb = b.tensor("kb", op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(kk)], Access::Write);
    let pm = b.tensor("pm", op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(cc)], Access::Write);
    let gam = b.tensor("gam", DType::F32, &[hv.clone(), nch.clone(), Expr::Int(kk)], Access::Write);
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
    let sbias = spec.gate.has_bias().then(|| b.shared("sBias", DType::F32, 1, dk, 1, Swizzle::None));
    let sn = b.shared("sN", op_dt, c, 16, 1, Swizzle::Xor16B);
    // `xdiag`: the chunk's flag (0: every |G~_r - G~_anchor| within the bound).
    let sxd = xdiag.then(|| b.shared("sXd", DType::F32, 1, 4, 1, Swizzle::None));
    let bytes = |dt: DType, rows: u32, cols: u32, count: u32| (dt.storage_bytes((rows * cols) as usize) as u32) * count;
    let (sq, sop, sd, sxw, sxu, slb, st, sv) = if slim {
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
    };
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
    let ag = grid(c, c, warps, 16);
    let tot_p = b.tile("totP", DType::F32, c, c, ag);
    let tot_l = b.tile("totL", DType::F32, c, c, ag);
    let dg = [nt, 1];
    let dp = b.tile("dP", DType::F32, c, 16, dg);
    let dl = b.tile("dL", DType::F32, c, 16, dg);
    let dself = b.tile("dSelf", DType::F32, c, 16, dg);
    let wg = grid(16, dk, warps, 16);
    let ug = grid(16, dv, warps, 16);
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

    // 1. Loads.
    if let (Some(bt), Some(sb)) = (bias, sbias) {
        let d = b.slot(sb, 0i64);
        b.copy_async(d, view(bt, &hvi * kk, kk, 1i64, kk, 4));
        b.commit();
    }
    let qk_off = (&row0 * h.clone() + hq.clone()) * kk;
    let d = b.slot(sq, 0i64);
    b.copy_async(d, view(q, qk_off.clone(), h.clone() * kk, len.clone(), kk, 8));
    let d = b.slot(sk, 0i64);
    b.copy_async(d, view(k, qk_off, h.clone() * kk, len.clone(), kk, 8));
    let v_off = (&row0 * hv.clone() + hvi.clone()) * vv;
    if !slim {
        let d = b.slot(sv, 0i64);
        b.copy_async(d, view(v, v_off.clone(), hv.clone() * vv, len.clone(), vv, 8));
    }
    b.commit();
    b.threads(|b| {
        let t = Expr::thread_idx();
        b.if_(t.lt(cc), |b| {
            let raw = Expr::load(beta, (&row0 + t.clone()) * hv.clone() + hvi.clone());
            let bv = if spec.beta_sigmoid { raw.sigmoid() } else { raw };
            b.shared_store(svec, 0i64, 0i64, t.clone(), Expr::select(t.lt(len.clone()), bv, 0.0));
        });
        if let Some(sx) = sxd {
            // (Ordered before the check by the scan's barriers.)
            b.if_(t.eq(0i64), |b| b.shared_store(sx, 0i64, 0i64, 0i64, 0.0));
        }
    });
    b.load(tg, Place::Global(view(g, (&row0 * hv.clone() + hvi.clone()) * kk, hv.clone() * kk, len.clone(), kk, 2)));
    if bias.is_some() {
        b.wait(1);
        b.barrier();
    }
    let x = Expr::Elem(tg);
    let bias_at = |col: Expr| match sbias {
        Some(sb) => Expr::shared_load(sb, 0i64, 0i64, col),
        None => Expr::Float(0.0),
    };
    let gate = match spec.gate {
        GateForm::Pre => x.clone(),
        GateForm::Safe { a_log: false, .. } => lb.clone().unwrap() * (x.clone() + bias_at(Expr::ColIdx)).sigmoid(),
        GateForm::Safe { a_log: true, .. } => {
            lb.clone().unwrap()
                * (Expr::load(a_log.unwrap(), hvi.clone()).exp() * (x.clone() + bias_at(Expr::ColIdx))).sigmoid()
        }
        GateForm::Standard { .. } => {
            -Expr::load(a_log.unwrap(), hvi.clone()).exp() * (x.clone() + bias_at(Expr::ColIdx)).softplus()
        }
    };
    // Rows past the chunk's end decay by nothing (G~ stays at the last valid row).
    b.map(tg, Expr::select(Expr::RowIdx.lt(len.clone()), gate * LOG2E, 0.0));
    b.scan_rows(tg, sg);
    // The midpoint anchor of a row's 16-row tile: min(8, valid - 1) rows into the tile.
    let mid_anchor = |r: Expr| {
        let t0 = r.bitand(-16i64);
        t0.clone() + (len.clone() - t0 - 1i64).min(8i64).max(0i64)
    };
    if let Some(sx) = sxd {
        // `xdiag`: any |G~_r - G~_anchor| above the bound (or NaN) flags the chunk for the hierarchy. The scan
        // leaves G~ complete and visible in sG; the barrier below orders the flag before its read.
        b.threads(|b| {
            b.for_("e", Expr::thread_idx(), cc * kk, threads as i64, |b, e| {
                let rr = b.let_("xr", &e / kk);
                let cl = b.let_("xc", &e % kk);
                let d = (Expr::shared_load(sg, 0i64, rr.clone(), cl.clone())
                    - Expr::shared_load(sg, 0i64, mid_anchor(rr), cl))
                .abs();
                b.if_(d.le(XDIAG_BOUND).not(), |b| b.shared_store(sx, 0i64, 0i64, 0i64, 1.0));
            });
        });
    }
    b.wait(0);
    b.barrier();

    // Helpers reading shared memory inside maps.
    let gs = |r: Expr, col: Expr| Expr::shared_load(sg, 0i64, r, col);
    let qs = |r: Expr, col: Expr| Expr::shared_load(sq, 0i64, r, col);
    let ks = |r: Expr, col: Expr| Expr::shared_load(sk, 0i64, r, col);
    let nq = |r: Expr| if spec.l2norm { Some(Expr::shared_load(svec, 0i64, 1i64, r)) } else { None };
    let nk = |r: Expr| if spec.l2norm { Some(Expr::shared_load(svec, 0i64, 2i64, r)) } else { None };
    let times = |e: Expr, f: Option<Expr>| match f {
        Some(f) => e * f,
        None => e,
    };
    let beta_at = |r: Expr| Expr::shared_load(svec, 0i64, 0i64, r);

    if spec.l2norm {
        // One warp a row (rows 0..C of q, then of k, dealt round the warps, the rows of a warp unrolled so their
        // loads are independent): each lane sums the squares of every 32nd element, a butterfly of shuffles adds
        // the lanes' sums, lane 0 stores the factor. (A thread a row walked its K elements one dependent load
        // after another while three quarters of the block waited.)
        let warps_n = threads / 32;
        b.threads(|b| {
            let t = Expr::thread_idx();
            let lane = b.let_("lane", &t % 32i64);
            let warp = b.let_("warp", &t / 32i64);
            for j in 0..(2 * c).div_ceil(warps_n) {
                let row = b.let_("row", &warp + (j * warps_n) as i64);
                let r = b.let_("r", &row % cc);
                let is_q = b.let_("is_q", row.lt(cc));
                let ss = b.let_var("ss", 0.0);
                b.if_(row.lt(2 * cc), |b| {
                    b.for_("i", lane.clone(), kk, 32i64, |b, i| {
                        let xv = b.let_("xv", Expr::select(is_q.clone(), qs(r.clone(), i.clone()), ks(r.clone(), i)));
                        b.assign(ss, Expr::Var(ss) + &xv * xv.clone());
                    });
                });
                for mask in [16u32, 8, 4, 2, 1] {
                    let other = b.warp_shuffle("ssx", WarpOp::ShflXor(mask), Expr::Var(ss));
                    b.assign(ss, Expr::Var(ss) + other);
                }
                let which = Expr::select(is_q.clone(), 1i64, 2i64);
                b.if_(lane.eq(0i64).and(row.lt(2 * cc)), |b| {
                    b.shared_store(svec, 0i64, which, r, (Expr::Var(ss) + 1e-6).rsqrt())
                });
            }
        });
        b.barrier();
    }

    // 2. Qbar, Kbar, gamma for the state pass.
    let (r, col) = (Expr::RowIdx, Expr::ColIdx);
    if let (Some(a), Some(bk)) = (vnq, vnk) {
        b.vec_map(a, Expr::shared_load(svec, 0i64, 1i64, Expr::RowIdx));
        b.vec_map(bk, Expr::shared_load(svec, 0i64, 2i64, Expr::RowIdx));
    }
    let rq = |e: Expr| match vnq {
        Some(v) => e * Expr::RowVal(v),
        None => e,
    };
    let rk = |e: Expr| match vnk {
        Some(v) => e * Expr::RowVal(v),
        None => e,
    };
    for j in 0..dk / kc {
        let cj = Expr::ColIdx + (j * kc) as i64;
        let view_j = |t: TensorId| view(t, &slot_base * (cc * kk) + (j * kc) as i64, kk, len.clone(), kc as i64, 8);
        let d = b.window(sg, 0i64, 0, j * kc, c, kc);
        b.load(tgr, Place::Shared(d));
        let d = b.window(sq, 0i64, 0, j * kc, c, kc);
        b.load(txin, Place::Shared(d));
        b.map(tx, rq(scale.clone() * Expr::Elem(txin) * ex2(Expr::Elem(tgr))));
        b.store(tx, Place::Global(view_j(qb)));
        let d = b.window(sk, 0i64, 0, j * kc, c, kc);
        b.load(txin, Place::Shared(d));
        b.map(tx, rk(Expr::Elem(txin) * ex2(gs(last.clone(), cj) - Expr::Elem(tgr))));
        b.store(tx, Place::Global(view_j(kb)));
    }
    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), kk, threads as i64, |b, i| {
            b.store_scalar(gam, &slot_base * kk + i.clone(), ex2(gs(last.clone(), i)));
        });
    });

    // 3. Diagonal tiles first (into sD), then the off-diagonal levels, so the [C, C] totals are live only there.
    let op_slot = |b: &KernelBuilder, i: i64| b.slot(sop, i);
    // Build the three operands of a level (anchored per row) into slots 0, 1, 2 of `buf` through `tile`, and
    // run `prod` (the level's products, accumulating) on them. `lower`/`upper` say which rows take part on the
    // A and B sides; `anchor` is the anchor row of a row. With the arena each column chunk of KC is built into
    // the KC-wide slots and multiplied before the next (products over K = KC, summed).
    let build_operands = |b: &mut KernelBuilder,
                          buf: SharedId,
                          tile: TileId,
                          lower: Expr,
                          upper: Expr,
                          anchor: Expr,
                          b1: bool,
                          prod: &dyn Fn(&mut KernelBuilder)| {
        for j in 0..dk / kc {
            let oc = if arena { 0 } else { j * kc };
            let cj = Expr::ColIdx + (j * kc) as i64;
            let d = b.window(sg, 0i64, 0, j * kc, c, kc);
            b.load(tgr, Place::Shared(d));
            b.map(tga, gs(anchor.clone(), cj.clone()));
            b.map(tx, Expr::select(lower.clone(), ex2(Expr::Elem(tgr) - Expr::Elem(tga)), 0.0));
            let d = b.window(sq, 0i64, 0, j * kc, c, kc);
            b.load(txin, Place::Shared(d));
            b.map(tile, rq(Expr::Elem(txin) * Expr::Elem(tx)));
            let d = b.window(buf, 0i64, 0, oc, c, kc);
            b.store(tile, Place::Shared(d));
            let d = b.window(sk, 0i64, 0, j * kc, c, kc);
            b.load(txin, Place::Shared(d));
            b.map(tile, rk(Expr::Elem(txin) * Expr::Elem(tx)));
            let d = b.window(buf, 1i64, 0, oc, c, kc);
            b.store(tile, Place::Shared(d));
            b.map(tx, Expr::select(upper.clone(), ex2(Expr::Elem(tga) - Expr::Elem(tgr)), 0.0));
            b.map(tile, rk(Expr::Elem(txin) * Expr::Elem(tx)));
            let d = b.window(buf, 2i64, 0, oc, c, kc);
            b.store(tile, Place::Shared(d));
            if b1 {
                // (`midoff`) Slot 3: the rows of tile 0 decayed to tile 1's midpoint anchor (exponents <= 0);
                // the rows of tile 1 are zero (their products are masked out anyway).
                b.map(tga, gs(mid_anchor(Expr::Int(16)), cj.clone()));
                b.map(tx, Expr::select(r.lt(16i64), ex2(Expr::Elem(tga) - Expr::Elem(tgr)), 0.0));
                b.map(tile, rk(Expr::Elem(txin) * Expr::Elem(tx)));
                let d = b.window(buf, 3i64, 0, oc, c, kc);
                b.store(tile, Place::Shared(d));
            }
            if arena {
                b.barrier();
                prod(b);
                // (The next chunk, level or phase overwrites the slots.)
                b.barrier();
            }
        }
        if !arena {
            b.barrier();
            prod(b);
        }
    };
    // Diagonal tiles, banded: band w multiplies by rows 16w.. of the B side.
    let band_b = |b: &KernelBuilder| Operand::Banded { src: b.window(sop, 2i64, 0, 0, 16, opk), transpose: true };
    let rin = r.bitand(15i64); // row inside its tile; the banded accumulators' columns are tile columns
    // Safe path (and `xdiag` chunks within the bound): anchored at the tile's midpoint row.
    let midpoint_diag = |b: &mut KernelBuilder| {
        b.map(dp, 0.0);
        b.map(dl, 0.0);
        let prod = |b: &mut KernelBuilder| {
            let bo = band_b(b);
            b.mma(dp, Operand::Shared { src: op_slot(b, 0), transpose: false }, bo.clone());
            b.mma(dl, Operand::Shared { src: op_slot(b, 1), transpose: false }, bo);
        };
        build_operands(b, sop, top, Expr::Bool(true), Expr::Bool(true), mid_anchor(r.clone()), midoff, &prod);
    };
    // Exact path: levels from fine to coarse, accumulated in place: a level's product also lands on pairs of
    // other blocks (garbage), so everything but the finished pairs is cleared before the next, coarser level
    // adds its own; the coarsest level (one block per tile) adds no garbage.
    let hierarchy_diag = |b: &mut KernelBuilder| {
        b.map(dp, 0.0);
        b.map(dl, 0.0);
        // A runtime loop (not unrolled): one copy of the code, and no per-level values live across levels.
        b.for_("lvl", 0i64, 4i64, 1i64, |b, lvl| {
            let s = b.let_("s", Expr::Int(1).shl(lvl));
            let lower = r.bitand(s.clone()).ne(0i64);
            let upper = r.bitand(s.clone()).eq(0i64);
            let anchor = r.bitand(-(&s * 2i64)) + (&s - 1i64);
            let prod = |b: &mut KernelBuilder| {
                let bo = band_b(b);
                b.mma(dp, Operand::Shared { src: op_slot(b, 0), transpose: false }, bo.clone());
                b.mma(dl, Operand::Shared { src: op_slot(b, 1), transpose: false }, bo);
            };
            build_operands(b, sop, top, lower, upper, anchor, false, &prod);
            // (After the coarsest level this keeps every pair of the tile: harmless.)
            let done = rin.bitxor(col.clone()).lt(&s * 2i64).and(col.lt(rin.clone()));
            b.map(dp, Expr::select(done.clone(), Expr::Elem(dp), 0.0));
            b.map(dl, Expr::select(done, Expr::Elem(dl), 0.0));
            b.barrier();
        });
    };
    // `xdiag`: the chunk's flag, block-uniform (written before the barrier after the scan); it also picks the
    // off-diagonal pass below when `midoff`.
    let xd_ok = sxd.map(|sx| b.let_("xd_ok", Expr::shared_load(sx, 0i64, 0i64, 0i64).eq(0.0)));
    match &xd_ok {
        _ if spec.safe => midpoint_diag(&mut b),
        Some(ok) => b.if_else(ok.clone(), midpoint_diag, hierarchy_diag),
        None => hierarchy_diag(&mut b),
    }
    // P's diagonal q_r.k_r (no decay) exactly: the bf16 inputs' products are exact in f32, so one banded
    // product of the raw q and k tiles gives it (its off-diagonal entries are not used).
    b.map(dself, 0.0);
    let kband = Operand::Banded { src: b.window(sk, 0i64, 0, 0, 16, dk), transpose: true };
    b.mma(dself, Operand::Shared { src: b.slot(sq, 0i64), transpose: false }, kband);
    let dval = times(times(Expr::Elem(dself), nq(r.clone())), nk(r.clone()));
    b.map(dp, Expr::select(col.clone().eq(rin.clone()), dval, Expr::Elem(dp)));
    // Masks: P keeps c <= r, L keeps c < r and takes beta_r.
    b.map(dp, Expr::select(col.le(rin.clone()), Expr::Elem(dp), 0.0));
    b.map(dl, Expr::select(col.lt(rin.clone()), Expr::Elem(dl) * beta_at(r.clone()), 0.0));
    let d = b.slot(sd, 0i64);
    b.store(dp, Place::Shared(d));
    let d = b.slot(sd, 1i64);
    b.store(dl, Place::Shared(d));
    b.barrier();
    if slim {
        // sQ's last reads are behind the barrier above: v lands in its bytes while the chunk's solve runs.
        let d = b.slot(sv, 0i64);
        b.copy_async(d, view(v, v_off.clone(), hv.clone() * vv, len.clone(), vv, 8));
        b.commit();
    }
    // 4a. N_ii = (I + L_ii)^-1 - I by forward substitution: thread t < C owns column t%16 of tile t/16.
    b.threads(|b| {
        let t = Expr::thread_idx();
        b.if_(t.lt(cc), |b| {
            let t0 = b.let_("t0", t.bitand(-16i64));
            let cl = b.let_("cl", t.bitand(15i64));
            let a = b.let_array("a", 16, ScalarTy::Float, 0.0);
            b.for_unrolled("ri", 0i64, 16i64, 1i64, |b, ri| {
                let acc = b.let_var("acc", 0.0);
                b.for_unrolled("m", 0i64, ri.clone(), 1i64, |b, m| {
                    let l = Expr::shared_load(sd, 1i64, &t0 + ri.clone(), m.clone());
                    b.assign(acc, Expr::Var(acc) + l * Expr::array_get(a, m));
                });
                let val = Expr::select(
                    ri.clone().eq(cl.clone()),
                    1.0,
                    Expr::select(ri.clone().lt(cl.clone()), 0.0, -Expr::Var(acc)),
                );
                b.array_set(a, ri.clone(), val);
                b.shared_store(
                    sn,
                    0i64,
                    &t0 + ri.clone(),
                    cl.clone(),
                    Expr::select(ri.gt(cl.clone()), Expr::array_get(a, ri.clone()), 0.0),
                );
            });
        });
    });
    // (Started here: warps 0-1 solve while the others begin the levels; the levels' barriers order sN.)
    // Off-diagonal tiles by levels (none when the chunk is one tile), fine to coarse, accumulated in place
    // with the same clearing as inside the tiles.
    b.map(tot_p, 0.0);
    b.map(tot_l, 0.0);
    let levels = (c / 16).trailing_zeros() as i64;
    let olvl = |b: &mut KernelBuilder, lvl: Expr| {
        let s = b.let_("s", Expr::Int(16).shl(lvl));
        let lower = r.bitand(s.clone()).ne(0i64);
        let upper = r.bitand(s.clone()).eq(0i64);
        let anchor = r.bitand(-(&s * 2i64)) + (&s - 1i64);
        let prod = |b: &mut KernelBuilder| {
            let bt = Operand::Shared { src: op_slot(b, 2), transpose: true };
            b.mma(tot_p, Operand::Shared { src: op_slot(b, 0), transpose: false }, bt.clone());
            b.mma(tot_l, Operand::Shared { src: op_slot(b, 1), transpose: false }, bt);
        };
        build_operands(b, sop, top, lower, upper, anchor, false, &prod);
        let done = r.bitxor(col.clone()).lt(&s * 2i64).and(col.lt(r.clone()));
        b.map(tot_p, Expr::select(done.clone(), Expr::Elem(tot_p), 0.0));
        b.map(tot_l, Expr::select(done, Expr::Elem(tot_l), 0.0));
        b.barrier();
    };
    // The one off-diagonal tile from the diagonal pass's operands (slots 0, 1: A sides anchored at each tile's
    // midpoint; slot 3: tile 0's keys decayed to tile 1's anchor), ordered by the barrier after sD.
    let midoff_pass = |b: &mut KernelBuilder| {
        let bt = Operand::Shared { src: op_slot(b, 3), transpose: true };
        b.mma(tot_p, Operand::Shared { src: op_slot(b, 0), transpose: false }, bt.clone());
        b.mma(tot_l, Operand::Shared { src: op_slot(b, 1), transpose: false }, bt);
        let off = r.ge(16i64).and(col.lt(16i64));
        b.map(tot_p, Expr::select(off.clone(), Expr::Elem(tot_p), 0.0));
        b.map(tot_l, Expr::select(off, Expr::Elem(tot_l), 0.0));
    };
    // (A runtime loop: unrolled, the arena's 128-register cap spills 60 bytes instead of 8.)
    let level_pass = |b: &mut KernelBuilder| b.for_("olvl", 0i64, levels, 1i64, olvl);
    match (midoff, xd_ok) {
        // `xdiag` chunks past the bound took the hierarchy (no slot 3): the level pass.
        (true, Some(ok)) => b.if_else(ok, midoff_pass, level_pass),
        (true, None) => midoff_pass(&mut b),
        (false, _) => level_pass(&mut b),
    }

    // Off-diagonal L (with beta) as the bf16 A operand of the block substitution.
    b.map(tot_l, Expr::Elem(tot_l) * beta_at(r.clone()));
    if slim {
        // sLb takes sOp's bytes: every warp is done with the off-diagonal products.
        b.barrier();
    }
    let d = b.slot(slb, 0i64);
    b.store(tot_l, Place::Shared(d));
    if slim {
        // This thread's v copies are done; the barrier below publishes them.
        b.wait(0);
    }
    b.barrier();
    // Full P (scale s included) to the scratch.
    let same_tile = r.shr(4i64).eq(col.shr(4i64));
    b.map(
        tot_p,
        scale.clone()
            * Expr::select(same_tile, Expr::shared_load(sd, 0i64, r.clone(), col.bitand(15i64)), Expr::Elem(tot_p)),
    );
    b.store(tot_p, Place::Global(view(pm, &slot_base * (cc * cc), cc, len.clone(), cc, 8)));

    if arena {
        // sXU's rows from 16 on take sD's bytes: every warp is done reading P's diagonal tiles.
        b.barrier();
    }
    // W and U go out as regrouped 8-byte stores (every offset is a multiple of K) on the plain variants, which
    // the presets run: measured on the H200 (2026-12-04, two runs, defaults otherwise), B1 T8192 H96 1.545
    // ms with them vs 1.608 with pair stores, T65536 H32 4.483 vs 4.633, in both calls against FLA chunk_kda
    // 2.42 / 6.89-6.90 ms in the same call. Under the 80-register cap their temporaries cost ptxas 8-16 spilled
    // bytes with GSWZ=pairs (see `kda_compile.rs`), which those timings include. With the in-kernel gate, norm and
    // beta options the spill would reach 36 bytes: pair stores there.
    let plain = spec.gate == GateForm::Pre && !spec.l2norm && !spec.beta_sigmoid;
    let wu_vec = if plain { 8 } else { 2 };
    // 5b. Block substitution, row tile by row tile.
    let xw = |b: &KernelBuilder, rows: u32| b.window(sxw, 0i64, 0, 0, rows, dk);
    for i in 0..nt {
        // T_i in the rows X_i will take (arena), else in its own buffers.
        let (tw, tu) = match st {
            Some((stw, stu)) => (b.slot(stw, 0i64), b.slot(stu, 0i64)),
            None => (b.window(sxw, 0i64, 16 * i, 0, 16, dk), b.window(sxu, 0i64, 16 * i, 0, 16, dv)),
        };
        let r0 = (16 * i) as i64;
        b.map(acc_w, 0.0);
        b.map(acc_u, 0.0);
        if i > 0 {
            let la = b.window(slb, 0i64, 16 * i, 0, 16, 16 * i);
            b.mma(
                acc_w,
                Operand::Shared { src: la.clone(), transpose: false },
                Operand::Shared { src: xw(&b, 16 * i), transpose: false },
            );
            let xu = b.window(sxu, 0i64, 0, 0, 16 * i, dv);
            b.mma(acc_u, Operand::Shared { src: la, transpose: false }, Operand::Shared { src: xu, transpose: false });
        }
        let rr = Expr::RowIdx + r0;
        let d = b.window(sk, 0i64, 16 * i, 0, 16, dk);
        b.load(tk16, Place::Shared(d));
        let d = b.window(sg, 0i64, 16 * i, 0, 16, dk);
        b.load(tg16, Place::Shared(d));
        let d = b.window(sv, 0i64, 16 * i, 0, 16, dv);
        b.load(tv16, Place::Shared(d));
        b.vec_map(vbw, beta_at(rr.clone()));
        b.vec_map(vbu, beta_at(rr.clone()));
        let mut rw = Expr::RowVal(vbw) * Expr::Elem(tk16) * ex2(Expr::Elem(tg16));
        if let Some(v) = vnk16 {
            b.vec_map(v, Expr::shared_load(svec, 0i64, 2i64, rr.clone()));
            rw = rw * Expr::RowVal(v);
        }
        b.map(acc_w, rw - Expr::Elem(acc_w));
        b.map(acc_u, Expr::RowVal(vbu) * Expr::Elem(tv16) - Expr::Elem(acc_u));
        b.store(acc_w, Place::Shared(tw.clone()));
        b.store(acc_u, Place::Shared(tu.clone()));
        b.barrier();
        let na = b.window(sn, 0i64, 16 * i, 0, 16, 16);
        b.mma(
            acc_w,
            Operand::Shared { src: na.clone(), transpose: false },
            Operand::Shared { src: tw.clone(), transpose: false },
        );
        b.mma(acc_u, Operand::Shared { src: na, transpose: false }, Operand::Shared { src: tu, transpose: false });
        if st.is_none() {
            // Every warp has read T_i before X_i overwrites it.
            b.barrier();
        }
        let d = b.window(sxw, 0i64, 16 * i, 0, 16, dk);
        b.store(acc_w, Place::Shared(d));
        let d = b.window(sxu, 0i64, 16 * i, 0, 16, dv);
        b.store(acc_u, Place::Shared(d));
        let rows = len.clone() - r0;
        let base = (&slot_base * cc + r0) * (kk + vv);
        b.store(acc_w, Place::Global(view(wu, base.clone(), kk + vv, rows.clone(), kk, wu_vec)));
        b.store(acc_u, Place::Global(view(wu, base + kk, kk + vv, rows, vv, wu_vec)));
        b.barrier();
    }
    Ok(b.finish()?)
}
