//! Kernel 2 of the chunked KDA forward: the sequential pass over the chunks of each sequence with the state
//! `S` (K x BV, f32) in registers, one block per (sequence, value head, value block of BV columns).
//!
//! Per chunk: `Vt = U - W bf16(S)`, `O = Qbar bf16(S) + P bf16(Vt)` (the scale is inside Qbar and P),
//! `S <- Diag(gamma) S + Kbar^T bf16(Vt)`. The chunk's operands come from kernel 1's scratch through `cp.async`
//! into single shared buffers that are refilled for the next chunk as soon as their last reader is done: W, U
//! and Qbar right after `Vt` is formed, P, Kbar and gamma at the end of the chunk, so each group of loads
//! overlaps half a chunk of tensor-core work (`stages = 1`). With `stages = 2` every operand buffer has two
//! slots: chunk j reads slot j % 2 and, at its top, issues all of chunk j+1's loads into the other slot (freed
//! by the barrier that ended chunk j-1), so the loads overlap a whole chunk; one commit group per chunk.
//! `stages = 3` is the same ring one chunk deeper: chunk j issues chunk j+2's loads into slot (j+2) % 3, so each
//! group has two chunks of work to land (for the one-block-per-SM grids, whose step time is the latency of a
//! dependent chain rather than the SM's throughput).
//!
//! Barriers per chunk (`two_bars`, knob `SYNC`; rings only): the ring pass above has four (after the wait, after
//! the S store, after Vt, at the end). With `two_bars` the wait comes first, S is written, and one barrier both
//! publishes the chunk's operands and sS and retires every read of chunk j - 1; chunk j + S - 1's loads are issued
//! after it, into the slot chunk j - 1 read; the second barrier publishes Vt; the end of the chunk writes no
//! shared memory that a later read could race with (sS is next written after chunk j's Vt barrier, sVt after
//! chunk j + 1's first barrier), so it needs none. Same loads, same products.

use super::{KdaSpec, grid};
use crate::OpError;
use k3k_ir::*;

crate::typed_knobs::knob_enum! {
    /// The order of the state pass's blocks (knob `SGRID`, not an axis of the knob space; absent: `vb`).
    pub enum StateGrid: str {
        /// Grid `(N, HV, V / BV)`: sequences fastest, value blocks slowest (`SGRID=seqs`).
        Seqs = "seqs",
        /// Grid `(V / BV, N, HV)`: the value blocks of one (sequence, value head) pair are consecutive, so they are
        /// resident together and read the pair's chunk operands from L2 once between them also when the grid takes
        /// several waves (`SGRID=vb`; kernel names end in `_gv`). With `Seqs` and more blocks than fit at once (e.g.
        /// varlen 8 x 1024 at H96: 3072 blocks, 528 resident), the value blocks of a pair run in different waves and
        /// each reads the operands from DRAM.
        ValueBlocks = "vb",
    }
}

/// A variant of the state pass (`SLOAD=cp`): its chunk, value block, warps, operand type and the knobs its kernel
/// name spells (see [`StateVariant::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateVariant {
    pub chunk: u32,
    pub bv: u32,
    pub warps: u32,
    pub op_dt: DType,
    /// Operand buffers: 1, 2 or 3 (knob `STAGES`).
    pub stages: u32,
    /// Two barriers a chunk (knob `SYNC=2`; rings only, read as false with one stage).
    pub two_bars: bool,
    pub order: StateGrid,
    /// U formed here from v and the intra kernel's factors (knob `USTATE=1`, see [`StateBufs::form_u`]).
    pub u_state: bool,
}

impl StateVariant {
    /// The kernel name of the variant for `spec`.
    pub(super) fn name(&self, spec: &KdaSpec) -> String {
        let StateVariant { chunk: c, bv, warps, op_dt, stages, two_bars, order, u_state } = *self;
        let (dk, dv) = (spec.dk, spec.dv);
        let sfx = match (stages, two_bars) {
            (1, _) => String::new(),
            (s, false) => format!("_s{s}"),
            (s, true) => format!("_s{s}b2"),
        };
        format!(
            "k3k_kda_state_k{dk}_v{dv}{}_c{c}_bv{bv}_w{warps}_{op_dt}{sfx}{}{}",
            if spec.h0 { "_h0" } else { "" },
            if order == StateGrid::ValueBlocks { "_gv" } else { "" },
            if u_state { "_us" } else { "" }
        )
    }
}

/// (`USTATE=1`) What the state pass forms U from: the intra kernel's factors (`nf`: N_ii, C x 16; `lf`: the strictly
/// lower blocks of L with beta, (C - 16) x (C - 16) from row 16; `bf`: beta, C f32), v, their ring buffers (sV
/// takes U's place; sLf is C x `lcols` with rows 0..16 zero, so the product with it leaves the first row tile's T
/// alone), the buffer of T (sT; the X rows that later row tiles read go to sVt) and beta as a row vector.
#[derive(Clone, Copy)]
struct UIn {
    nf: TensorId,
    lf: TensorId,
    bf: TensorId,
    v: TensorId,
    snf: SharedId,
    slf: SharedId,
    sbeta: SharedId,
    stt: SharedId,
    vbeta: VecId,
    lcols: u32,
}

/// The chunk inputs of a state pass (either `SLOAD`), as the intra kernel writes them and in this argument order:
/// W and U (`wu`, C x (K + V); with `USTATE=1` W alone, `w`, C x K), Qbar and Kbar (C x K), P (`pm`, C x C), each
/// `[HV, NCH, C, ..]` of `op_dt`, and gamma (`gam`, `[HV, NCH, K]` f32).
pub(super) fn chunk_inputs(
    b: &mut KernelBuilder,
    spec: &KdaSpec,
    c: u32,
    op_dt: DType,
    u_state: bool,
) -> [TensorId; 5] {
    let (kk, vv, cc) = (spec.dk as i64, spec.dv as i64, c as i64);
    let (hv, nch) = (b.dim("HV"), b.dim("NCH"));
    let at = |w: i64| [hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(w)];
    let (wu_name, wu_cols) = if u_state { ("w", kk) } else { ("wu", kk + vv) };
    [
        b.tensor(wu_name, op_dt, &at(wu_cols), Access::Read),
        b.tensor("qb", op_dt, &at(kk), Access::Read),
        b.tensor("kb", op_dt, &at(kk), Access::Read),
        b.tensor("pm", op_dt, &at(cc), Access::Read),
        b.tensor("gam", DType::F32, &[hv.clone(), nch.clone(), Expr::Int(kk)], Access::Read),
    ]
}

/// The chunk and sequence tables, the states and the output of a state pass (either `SLOAD`), in this argument order.
pub(super) struct SeqTensors {
    /// Each chunk's first token and length, `[NCH, 2]` i32.
    pub ctab: TensorId,
    /// Each sequence's first chunk and chunk count, `[N, 2]` i32.
    pub stab: TensorId,
    /// The initial states (with `spec.h0`) and the final ones, `[N, HV, K, V]` f32.
    pub h0: Option<TensorId>,
    /// The output, `[TT, HV, V]` bf16.
    pub o: TensorId,
    pub ht: TensorId,
}

/// Declare [`SeqTensors`] (after the chunk inputs, see [`chunk_inputs`]).
pub(super) fn seq_tensors(b: &mut KernelBuilder, spec: &KdaSpec) -> SeqTensors {
    let (kk, vv) = (spec.dk as i64, spec.dv as i64);
    let (tt, hv, nch, n) = (b.dim("TT"), b.dim("HV"), b.dim("NCH"), b.dim("N"));
    let state_dims = [n.clone(), hv.clone(), Expr::Int(kk), Expr::Int(vv)];
    SeqTensors {
        ctab: b.tensor("ctab", DType::I32, &[nch, Expr::Int(2)], Access::Read),
        stab: b.tensor("stab", DType::I32, &[n, Expr::Int(2)], Access::Read),
        h0: spec.h0.then(|| b.tensor("h0", DType::F32, &state_dims, Access::Read)),
        o: b.tensor("o", DType::Bf16, &[tt, hv, Expr::Int(vv)], Access::Write),
        ht: b.tensor("ht", DType::F32, &state_dims, Access::Write),
    }
}

/// The state pass's dims, tensors, grid, shared buffers and register tiles, declared in this order by
/// [`StateBufs::declare`], and its two per-chunk phases.
struct StateBufs {
    hv: Expr,
    nch: Expr,
    kk: i64,
    vv: i64,
    bvv: i64,
    wu: TensorId,
    qb: TensorId,
    kb: TensorId,
    pm: TensorId,
    gam: TensorId,
    ctab: TensorId,
    stab: TensorId,
    h0: Option<TensorId>,
    o: TensorId,
    ht: TensorId,
    sw: SharedId,
    su: SharedId,
    sqb: SharedId,
    skb: SharedId,
    sp: SharedId,
    sgam: SharedId,
    ss: SharedId,
    svt: SharedId,
    st: TileId,
    vgam: VecId,
    acc_v: TileId,
    acc_o: TileId,
    tu: TileId,
    /// (`USTATE=1`) See [`UIn`]; `su` is then v's ring (bf16).
    u: Option<UIn>,
}

impl StateBufs {
    fn declare(b: &mut KernelBuilder, spec: &KdaSpec, v: &StateVariant) -> StateBufs {
        let StateVariant { chunk: c, bv, warps, op_dt, stages, order, u_state, .. } = *v;
        let (dk, dv) = (spec.dk, spec.dv);
        let (kk, vv, bvv) = (dk as i64, dv as i64, bv as i64);
        let tt = b.dim("TT");
        let hv = b.dim("HV");
        let nch = b.dim("NCH");
        let n = b.dim("N");
        let [wu, qb, kb, pm, gam] = chunk_inputs(b, spec, c, op_dt, u_state);
        let ufac = u_state.then(|| {
            let (nf, lf, bf) = u_factor_tensors(b, op_dt, c, Access::Read);
            (nf, lf, bf, b.tensor("v", DType::Bf16, &[tt.clone(), hv.clone(), Expr::Int(vv)], Access::Read))
        });
        let SeqTensors { ctab, stab, h0, o, ht } = seq_tensors(b, spec);
        match order {
            StateGrid::Seqs => b.grid(n.clone(), hv.clone(), vv / bvv),
            StateGrid::ValueBlocks => b.grid(vv / bvv, n.clone(), hv.clone()),
        }

        let sw = b.shared("sW", op_dt, c, dk, stages, Swizzle::Xor16B);
        let su = if u_state {
            b.shared("sV", DType::Bf16, c, bv, stages, Swizzle::Xor16B)
        } else {
            b.shared("sU", op_dt, c, bv, stages, Swizzle::Xor16B)
        };
        let sqb = b.shared("sQb", op_dt, c, dk, stages, Swizzle::Xor16B);
        let skb = b.shared("sKb", op_dt, c, dk, stages, Swizzle::Xor16B);
        let sp = b.shared("sP", op_dt, c, c, stages, Swizzle::Xor16B);
        let sgam = b.shared("sGam", DType::F32, 1, dk, stages, Swizzle::None);
        let ss = b.shared("sS", op_dt, dk, bv, 1, Swizzle::Xor16B);
        let svt = b.shared("sVt", op_dt, c, bv, 1, Swizzle::Xor16B);
        // (Power-of-two columns for the swizzle: 16 at chunk 32, C at 64.)
        let lcols = (c - 16).next_power_of_two();
        let ubufs = ufac.map(|(nf, lf, bf, v)| {
            let snf = b.shared("sNf", op_dt, c, 16, stages, Swizzle::Xor16B);
            let slf = b.shared("sLf", op_dt, c, lcols, stages, Swizzle::Xor16B);
            let stt = b.shared("sT", op_dt, c, bv, 1, Swizzle::Xor16B);
            // (Last: after it no swizzled buffer needs its 1 KB alignment.)
            let sbeta = b.shared("sBeta", DType::F32, 1, c, stages, Swizzle::None);
            (nf, lf, bf, v, snf, slf, sbeta, stt)
        });

        let sgrid = grid(dk, bv, warps, 16);
        let st = b.tile("S", DType::F32, dk, bv, sgrid);
        let vgam = b.vec("gamma", dk, sgrid);
        let og = grid(c, bv, warps, 16);
        let acc_v = b.tile("accV", DType::F32, c, bv, og);
        let acc_o = b.tile("accO", DType::F32, c, bv, og);
        let tu = b.tile("tU", DType::F32, c, bv, og);
        let u = ubufs.map(|(nf, lf, bf, v, snf, slf, sbeta, stt)| UIn {
            nf,
            lf,
            bf,
            v,
            snf,
            slf,
            sbeta,
            stt,
            vbeta: b.vec("betaU", c, og),
            lcols,
        });
        StateBufs {
            hv,
            nch,
            kk,
            vv,
            bvv,
            wu,
            qb,
            kb,
            pm,
            gam,
            ctab,
            stab,
            h0,
            o,
            ht,
            sw,
            su,
            sqb,
            skb,
            sp,
            sgam,
            ss,
            svt,
            st,
            vgam,
            acc_v,
            acc_o,
            tu,
            u,
        }
    }

    /// (`USTATE=1`) Rows 0..16 of every sLf slot stay zero (the loads fill rows 16..), ordered before their first read
    /// by the barriers of the first chunk.
    fn zero_lf_rows(&self, b: &mut KernelBuilder, stages: u32, threads: u32) {
        let Some(u) = self.u else { return };
        let lc = u.lcols as i64;
        b.threads(|b| {
            b.for_("e", Expr::thread_idx(), stages as i64 * 16 * lc, threads as i64, |b, e| {
                let sl = b.let_("sl", &e / (16 * lc));
                let r = b.let_("r", (&e / lc) % 16i64);
                b.shared_store(u.slf, sl, r, &e % lc, 0.0);
            });
        });
    }

    /// The loads of U of chunk `ch` (scratch slot `slot`, `rows` long) into ring slot `sl`: its value block from `[W |
    /// U]` (from W's row at `base`), or with `USTATE=1` v's value block (the chunk's rows of value head `hvi` from column
    /// `v0`) and the factors of U.
    #[allow(clippy::too_many_arguments)]
    fn issue_u(
        &self,
        b: &mut KernelBuilder,
        ch: &Expr,
        slot: &Expr,
        sl: Expr,
        rows: &Expr,
        at: (&Expr, &Expr, Expr),
        cc: i64,
    ) {
        let (hv, vv, bvv) = (self.hv.clone(), self.vv, self.bvv);
        let (hvi, v0, base) = at;
        let Some(u) = self.u else {
            let (kk, d) = (self.kk, b.slot(self.su, sl));
            b.copy_async(d, view(self.wu, base + kk + v0.clone(), kk + vv, rows.clone(), bvv, 8));
            return;
        };
        let row0 = Expr::load(self.ctab, ch * 2i64);
        let d = b.slot(self.su, sl.clone());
        b.copy_async(d, view(u.v, (row0 * hv.clone() + hvi.clone()) * vv + v0.clone(), hv * vv, rows.clone(), bvv, 8));
        let d = b.slot(u.snf, sl.clone());
        b.copy_async(d, view(u.nf, slot * (cc * 16), 16i64, cc, 16i64, 8));
        let m = cc - 16;
        let d = b.window(u.slf, sl.clone(), 16, 0, m as u32, m as u32);
        b.copy_async(d, view(u.lf, slot * (m * m), m, m, m, 8));
        let d = b.slot(u.sbeta, sl);
        b.copy_async(d, view(u.bf, slot * cc, cc, 1i64, cc, 4));
    }

    /// [`StateBufs::form_u`] (`USTATE=1`), then [`StateBufs::values`].
    fn form_u_and_values(&self, b: &mut KernelBuilder, cur: &Expr, nt: u32) {
        if self.u.is_some() {
            self.form_u(b, cur, nt);
        }
        self.values(b, cur);
    }

    /// (`USTATE=1`, after chunk `cur`'s v, beta and factors are visible; sVt and sT free) `X_u = (I + L)^-1 Diag(beta)
    /// v` for the block's BV columns into `tU`, rounded to the scratch type as the intra kernel's U store rounds it,
    /// by the intra kernel's block substitution (`T_i = R_i - L_{i,<i} X_{<i}`, `X_i = T_i + N_ii op(T_i)`, `R =
    /// Diag(beta) v`): pass p computes every row tile, the first p + 1 of them final (tiles past p read only their own
    /// T, so what they hold until their pass is never read by a final row). Each product has the intra kernel's
    /// operands, K and order (the extra terms of later passes are exact zeros), so U has the same bits. The `N_ii`
    /// products read only T rows the warp wrote itself (the row bands of `tU` are the warps' rows, its columns the
    /// warps' columns): a warp sync; the `L` products read other warps' rows of X: a barrier.
    fn form_u(&self, b: &mut KernelBuilder, cur: &Expr, nt: u32) {
        let StateBufs { su, svt, tu, acc_v, acc_o, .. } = *self;
        let UIn { snf, slf, sbeta, stt, vbeta, .. } = self.u.expect("USTATE=1");
        let (c, bv) = (16 * nt, self.bvv as u32);
        let sync_warps = |b: &mut KernelBuilder| b.threads(|b| b.warp_sync());
        b.vec_map(vbeta, Expr::shared_load(sbeta, cur.clone(), 0i64, Expr::RowIdx));
        // v (f32), kept for every pass.
        let d = b.slot(su, cur.clone());
        b.load(acc_o, Place::Shared(d));
        let rv = || Expr::RowVal(vbeta) * Expr::Elem(acc_o);
        let n_times_t = |b: &mut KernelBuilder| {
            // tU += N_ii op(T_i) on every row tile i (its band), T from sVt.
            let d = b.slot(svt, 0i64);
            b.store(tu, Place::Shared(d));
            sync_warps(b);
            let na = b.window(snf, cur.clone(), 0, 0, c, 16);
            let tb = b.window(svt, 0i64, 0, 0, 16, bv);
            b.mma(tu, Operand::Shared { src: na, transpose: false }, Operand::Banded { src: tb, transpose: false });
        };
        b.map(tu, rv());
        n_times_t(b);
        for p in 1..nt {
            if p > 1 {
                // (Chunk 64) Every warp is done with the previous pass's reads of sT.
                b.barrier();
            }
            // X (row tiles < p final) for the L products of the other warps' rows.
            let d = b.slot(stt, 0i64);
            b.store(tu, Place::Shared(d));
            b.barrier();
            b.map(acc_v, 0.0);
            let la = b.window(slf, cur.clone(), 0, 0, c, 16 * p);
            let xa = b.window(stt, 0i64, 0, 0, 16 * p, bv);
            b.mma(acc_v, Operand::Shared { src: la, transpose: false }, Operand::Shared { src: xa, transpose: false });
            b.map(tu, rv() - Expr::Elem(acc_v));
            n_times_t(b);
        }
        // The scratch type's rounding (each thread reads back the elements it wrote).
        let d = b.slot(svt, 0i64);
        b.store(tu, Place::Shared(d));
        let d = b.slot(svt, 0i64);
        b.load(tu, Place::Shared(d));
    }

    /// Phase 1 (after S and the chunk's operands in ring slot `cur` are visible): V' = U - W S and the q S part of
    /// o, V' into sVt, published by a barrier.
    fn values(&self, b: &mut KernelBuilder, cur: &Expr) {
        let StateBufs { acc_v, acc_o, ss, sw, sqb, su, tu, svt, .. } = *self;
        b.map(acc_v, 0.0);
        b.map(acc_o, 0.0);
        let s_op = Operand::Shared { src: b.slot(ss, 0i64), transpose: false };
        b.mma(acc_v, Operand::Shared { src: b.slot(sw, cur.clone()), transpose: false }, s_op.clone());
        b.mma(acc_o, Operand::Shared { src: b.slot(sqb, cur.clone()), transpose: false }, s_op);
        if self.u.is_none() {
            let d = b.slot(su, cur.clone());
            b.load(tu, Place::Shared(d));
        }
        b.map(acc_v, Expr::Elem(tu) - Expr::Elem(acc_v));
        let d = b.slot(svt, 0i64);
        b.store(acc_v, Place::Shared(d));
        b.barrier();
    }

    /// Phase 2: o += P V', its store (the chunk's `len` rows from element `o_off` of o, `o_vec`-byte groups), and
    /// the state update S = diag(gamma) S + K^T V'.
    fn output_and_state(&self, b: &mut KernelBuilder, cur: &Expr, o_off: Expr, len: &Expr, o_vec: u32) {
        let StateBufs { acc_o, svt, sp, o, vgam, sgam, st, skb, vv, bvv, .. } = *self;
        let vt = Operand::Shared { src: b.slot(svt, 0i64), transpose: false };
        b.mma(acc_o, Operand::Shared { src: b.slot(sp, cur.clone()), transpose: false }, vt.clone());
        b.store(acc_o, Place::Global(view(o, o_off, self.hv.clone() * vv, len.clone(), bvv, o_vec)));
        b.vec_map(vgam, Expr::shared_load(sgam, cur.clone(), 0i64, Expr::RowIdx));
        b.map(st, Expr::Elem(st) * Expr::RowVal(vgam));
        b.mma(st, Operand::Shared { src: b.slot(skb, cur.clone()), transpose: true }, vt);
    }
}

/// Build kernel 2 for a variant, chunk size, value block and warp count (blocks in the [`StateGrid::Seqs`] order).
pub fn build_state(
    spec: &KdaSpec,
    chunk: u32,
    bv: u32,
    warps: u32,
    op_dt: DType,
    stages: u32,
    two_bars: bool,
) -> Result<Kernel, OpError> {
    build_state_in(
        spec,
        StateVariant { chunk, bv, warps, op_dt, stages, two_bars, order: StateGrid::Seqs, u_state: false },
    )
}

/// (`USTATE=1`) The factor tensors of U in the scratch, `nf` (N_ii, `[HV, NCH, C, 16]`), `lf` (the strictly lower
/// blocks of L, `[HV, NCH, (C - 16)^2]`) and `bf` (beta, `[HV, NCH, C]` f32), declared with `access`.
pub(crate) fn u_factor_tensors(
    b: &mut KernelBuilder,
    op_dt: DType,
    c: u32,
    access: Access,
) -> (TensorId, TensorId, TensorId) {
    let (hv, nch, cc) = (b.dim("HV"), b.dim("NCH"), c as i64);
    let m = cc - 16;
    let slots = |n: i64| [hv.clone(), nch.clone(), Expr::Int(n)];
    (
        b.tensor("nf", op_dt, &[hv.clone(), nch.clone(), Expr::Int(cc), Expr::Int(16)], access),
        b.tensor("lf", op_dt, &slots(m * m), access),
        b.tensor("bf", DType::F32, &slots(cc), access),
    )
}

/// (`USTATE=1`) The row bands of `form_u` are the accumulators' warp rows; at 8 warps two blocks per SM, as without
/// USTATE (ptxas, 2026-12-07: BV=64 on 8 warps with 2 stages took 157 registers unbounded, one block per SM; 127
/// under the bound, no spill).
fn u_bounds(b: &mut KernelBuilder, u_state: bool, c: u32, bv: u32, warps: u32) -> Result<(), OpError> {
    if !u_state {
        return Ok(());
    }
    if grid(c, bv, warps, 16)[0] != c / 16 {
        return Err(OpError::Internal(format!(
            "kda state pass USTATE=1: {warps} warps do not split {c} rows in 16-row bands"
        )));
    }
    if warps == 8 {
        b.min_blocks_per_sm(2);
    }
    Ok(())
}

/// The state pass of any [`StateVariant`] ([`build_state`]: blocks in the [`StateGrid::Seqs`] order, U from the
/// intra kernel).
pub fn build_state_in(spec: &KdaSpec, variant: StateVariant) -> Result<Kernel, OpError> {
    let StateVariant { chunk, bv, warps, stages, two_bars, order, u_state, .. } = variant;
    let (dk, dv, c) = (spec.dk, spec.dv, chunk);
    if !(1..=3).contains(&stages) {
        return Err(OpError::Internal(format!("kda state pass: {stages} stages (1, 2 or 3)")));
    }
    // Two barriers a chunk need a ring (the single-buffer pass refills its groups between them).
    let two_bars = two_bars && stages >= 2;
    let variant = StateVariant { two_bars, ..variant };
    let mut b = KernelBuilder::new(&variant.name(spec), 32 * warps);
    let (kk, vv, cc, bvv) = (dk as i64, dv as i64, c as i64, bv as i64);
    let bufs = StateBufs::declare(&mut b, spec, &variant);
    u_bounds(&mut b, u_state, c, bv, warps)?;
    let StateBufs { wu, qb, kb, pm, gam, ctab, stab, h0, ht, sw, sqb, skb, sp, sgam, ss, st, .. } = bufs;
    let (hv, nch) = (bufs.hv.clone(), bufs.nch.clone());

    let (seq, hvi, v0) = match order {
        StateGrid::Seqs => {
            let seq = b.let_("seq", Expr::block_idx(0));
            let hvi = b.let_("hv", Expr::block_idx(1));
            (seq, hvi, b.let_("v0", Expr::block_idx(2) * bvv))
        }
        StateGrid::ValueBlocks => {
            let seq = b.let_("seq", Expr::block_idx(1));
            let hvi = b.let_("hv", Expr::block_idx(2));
            (seq, hvi, b.let_("v0", Expr::block_idx(0) * bvv))
        }
    };
    let c0 = b.let_("c0", Expr::load(stab, &seq * 2i64));
    let nc = b.let_("nc", Expr::load(stab, &seq * 2i64 + 1i64));
    let state_off = b.let_("state_off", (&seq * hv.clone() + hvi.clone()) * (kk * vv) + v0.clone());
    match h0 {
        Some(h0) => b.load(st, Place::Global(view(h0, state_off.clone(), vv, kk, bvv, 2))),
        None => b.map(st, 0.0),
    }
    bufs.zero_lf_rows(&mut b, stages, 32 * warps);

    // o's stores: 8-byte regrouped pairs (every offset is a multiple of BV >= 16) at chunk 32; at chunk 64 the
    // kernel holds 168 registers and the regrouping's temporaries spill 4 bytes (BV=32, 4 warps), so pairs.
    let o_vec = if c == 32 { 8 } else { 2 };
    let slot_of = |ch: &Expr| &hvi * nch.clone() + ch.clone();
    let len_of = |ch: &Expr| Expr::load(ctab, ch * 2i64 + 1i64);
    // Group A: W, U, Qbar (read by the first half of a chunk), into stage slot `sl`; `rows`: the chunk's length
    // when the caller has it (else it is loaded from the chunk table here).
    let issue_a = |b: &mut KernelBuilder, ch: Expr, sl: Expr, rows: Option<Expr>| {
        let slot = b.let_("slot_a", slot_of(&ch));
        let rows = b.let_("rows_a", rows.unwrap_or_else(|| len_of(&ch)));
        let wrow = if u_state { kk } else { kk + vv };
        let base = b.let_("wu_base", &slot * (cc * wrow));
        let d = b.slot(sw, sl.clone());
        b.copy_async(d, view(wu, base.clone(), wrow, rows.clone(), kk, 8));
        bufs.issue_u(b, &ch, &slot, sl.clone(), &rows, (&hvi, &v0, base), cc);
        let d = b.slot(sqb, sl);
        b.copy_async(d, view(qb, &slot * (cc * kk), kk, rows, kk, 8));
    };
    // Group B: P, Kbar, gamma (read by the second half), into stage slot `sl`.
    let issue_b = |b: &mut KernelBuilder, ch: Expr, sl: Expr, rows: Option<Expr>| {
        let slot = b.let_("slot_b", slot_of(&ch));
        let rows = b.let_("rows_b", rows.unwrap_or_else(|| len_of(&ch)));
        let d = b.slot(sp, sl.clone());
        b.copy_async(d, view(pm, &slot * (cc * cc), cc, rows.clone(), cc, 8));
        let d = b.slot(skb, sl.clone());
        b.copy_async(d, view(kb, &slot * (cc * kk), kk, rows, kk, 8));
        let d = b.slot(sgam, sl);
        b.copy_async(d, view(gam, &slot * kk, kk, 1i64, kk, 4));
    };
    let z = || Expr::Int(0);
    if stages == 1 {
        b.if_(nc.gt(0i64), |b| {
            issue_a(b, c0.clone(), z(), None);
            b.commit();
            issue_b(b, c0.clone(), z(), None);
            b.commit();
        });
    } else {
        // S stages: chunk j's whole group sits in slot j % S; chunk j + S - 1's group is issued at the top of
        // chunk j (into the slot chunk j - 1 read, released by the barrier that ends chunk j - 1), so its
        // loads overlap S - 1 chunks of work. The prologue issues chunks 0 .. S - 2, one group each.
        for p in 0..stages as i64 - 1 {
            b.if_(nc.gt(p), |b| {
                let ch = if p == 0 { c0.clone() } else { &c0 + p };
                issue_a(b, ch.clone(), Expr::Int(p), None);
                issue_b(b, ch, Expr::Int(p), None);
            });
            b.commit();
        }
    }
    // `two_bars`: the length of the next chunk to issue (j + S - 1), loaded one chunk ahead of its use and carried
    // across iterations, so the loads' bounds do not wait for a chunk-table read right after the barrier (that
    // compare was the state pass's most-sampled instruction under ncu, 3.3% of its stall samples at B1 T65536 H32,
    // 2026-12-02).
    let ahead = stages as i64 - 1;
    let rows_next = two_bars.then(|| {
        let rv = b.let_var("rows_next", 0i64);
        b.if_(nc.gt(ahead), |b| b.assign(rv, len_of(&(&c0 + ahead))));
        rv
    });
    // `two_bars` with 3 stages: the ring slot of the current chunk, carried across iterations (no 64-bit `% 3`
    // a chunk; with 2 stages `j & 1` is as cheap, and the carried slot costs ptxas 16 spilled bytes at 16 warps).
    let ring = (two_bars && stages == 3).then(|| b.let_var("ring", 0i64));
    b.for_("j", 0i64, nc.clone(), 1i64, |b, j| {
        let ch = b.let_("ch", &c0 + j.clone());
        let row0 = b.let_("row0", Expr::load(ctab, &ch * 2i64));
        let len = b.let_("len", len_of(&ch));
        let cur = match (ring, stages) {
            (Some(rv), _) => b.let_("cur", Expr::Var(rv)),
            (None, 1) => z(),
            (None, 2) => b.let_("cur", j.clone().bitand(1i64)),
            (None, _) => b.let_("cur", &j % (stages as i64)),
        };
        // Phase 1 (V' = U - W S, see `StateBufs::values`) and phase 2 (o and the state update).
        // (`USTATE=1`: U formed first, from the chunk's v and factors; it does not depend on S.)
        let values = |b: &mut KernelBuilder| bufs.form_u_and_values(b, &cur, c / 16);
        let o_off = (&row0 * hv.clone() + hvi.clone()) * vv + v0.clone();
        let output_and_state = |b: &mut KernelBuilder| bufs.output_and_state(b, &cur, o_off.clone(), &len, o_vec);
        if two_bars {
            // Two barriers a chunk. Wait for this chunk's group (the S - 2 younger ones may be in flight), write
            // S, then one barrier: the chunk's operands and sS are visible to every warp, and every warp is done
            // with chunk j - 1 (its slot, sS's phase-1 reads, sVt's phase-2 reads). Only then is chunk j + S - 1
            // issued, into the slot chunk j - 1 read. The second barrier publishes Vt; nothing is written at the
            // end of the chunk, so no third and fourth barrier.
            b.wait(stages - 2);
            let d = b.slot(ss, 0i64);
            b.store(st, Place::Shared(d));
            b.barrier();
            // Slot (j + S - 1) % S = (j - 1) % S.
            let next = if stages == 2 {
                Expr::Int(1) - cur.clone()
            } else {
                b.let_("next", Expr::select(cur.clone().eq(0i64), 2i64, &cur - 1i64))
            };
            let rn = rows_next.expect("two_bars carries the next chunk's length");
            b.if_((&j + ahead).lt(nc.clone()), |b| {
                issue_a(b, &ch + ahead, next.clone(), Some(Expr::Var(rn)));
                issue_b(b, &ch + ahead, next.clone(), Some(Expr::Var(rn)));
            });
            b.commit();
            b.if_((&j + (ahead + 1)).lt(nc.clone()), |b| b.assign(rn, len_of(&(&ch + (ahead + 1)))));
            values(b);
            output_and_state(b);
            if let Some(rv) = ring {
                b.assign(rv, Expr::select(cur.clone().eq(2i64), 0i64, &cur + 1i64));
            }
            return;
        }
        let more = b.let_("more", (&j + 1i64).lt(nc.clone()));
        if stages == 2 {
            let next = Expr::Int(1) - cur.clone();
            b.if_(more.clone(), |b| {
                issue_a(b, &ch + 1i64, next.clone(), None);
                issue_b(b, &ch + 1i64, next.clone(), None);
            });
            b.commit();
        } else if stages > 2 {
            let next = b.let_("next", (&j + ahead) % (stages as i64));
            b.if_((&j + ahead).lt(nc.clone()), |b| {
                issue_a(b, &ch + ahead, next.clone(), None);
                issue_b(b, &ch + ahead, next.clone(), None);
            });
            b.commit();
        }
        // Stage 1: group A of this chunk is done (B may still be in flight); S stages: this chunk's group (the
        // S - 1 younger groups may be in flight).
        b.wait(if stages == 1 { 1 } else { stages - 1 });
        b.barrier();
        let d = b.slot(ss, 0i64);
        b.store(st, Place::Shared(d));
        b.barrier();
        values(b);
        if stages == 1 {
            b.if_(more.clone(), |b| issue_a(b, &ch + 1i64, z(), None));
            b.commit();
            b.wait(1);
            b.barrier();
        }
        output_and_state(b);
        b.barrier();
        if stages == 1 {
            b.if_(more, |b| issue_b(b, &ch + 1i64, z(), None));
            b.commit();
        }
    });
    b.wait(0);
    b.store(st, Place::Global(view(ht, state_off, vv, kk, bvv, 2)));
    Ok(b.finish()?)
}
