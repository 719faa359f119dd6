//! The state pass with its K-wide chunk operands loaded by TMA and shared by the value blocks of a (sequence, value
//! head) pair (knob `SLOAD=tma`, issue 42).
//!
//! The pass computes what [`super::state`]'s two-barrier ring computes (same products, same order along K), with its
//! blocks in the `SGRID=vb` order: the `V / BV` value blocks of a pair are consecutive along x and form one
//! thread-block cluster ([`k3k_ir::cluster`]). Per chunk, W, Qbar and Kbar (C x K each, in boxes of C x 64 columns:
//! 128 bytes a row, the copy engine's 128-byte swizzle, which is the operands' `Xor16B` layout) and gamma (K f32) are
//! copied once for the cluster: box `i` of the chunk by the CTA of rank `i % (V / BV)`, multicast into every CTA of
//! the cluster, completing on each CTA's `full` barrier of the ring slot. So the L2 -> SM bytes of those operands drop
//! by `V / BV` (4 at BV = 32, V = 128); U (the block's own columns of `[W | U]`) and P (C x C, 64-byte rows, which the
//! 128-byte swizzle cannot take) stay on `cp.async`, one commit group a chunk, as before. With `SLOAD=tmau` (BV = 64:
//! U's C x 64 columns are one box) each block copies its U by a TMA box of its own onto the same `full` barrier, and
//! only P is left to `cp.async`.
//!
//! The K-wide operands sit in K/64 tiles of C x 64 per ring slot, so the state is K/64 register tiles of 64 x BV
//! (`S_h`, rows `64h..64h+64`): `W S = sum_h W_h S_h` and `Qbar S` likewise (the halves in K order, as the one product
//! over K steps through them), `S_h <- Diag(gamma_h) S_h + Kbar_h^T Vt`.
//!
//! The ring protocol (as CUTLASS's `PipelineTmaAsync`): `full[s]` (one arrival: the CTA's own thread 0 announces the
//! chunk's bytes) and `empty[s]` (one arrival per warp of every CTA of the cluster: a CTA's copy writes into its
//! peers' slots too, so it may refill a slot only once every consumer of the cluster has released it). Chunk j (use
//! j of the ring, slot j % S): wait for its cp.async group and its full phase, write S, one barrier (publishes sS and
//! the cp.async operands, retires chunk j - 1's reads of sS, sVt and the cp.async slot), then chunk j + S - 1's loads
//! (thread 0: the empty phase of the slot's previous use, expect_tx, its boxes), the Vt half and its barrier, the
//! output and state half, and every warp releases slot j % S on every CTA of the cluster.
//!
//! A chunk shorter than C (a sequence's last): the boxes copy all C rows of the chunk's scratch, whose rows past the
//! chunk's length the intra kernel does not write. Rows of W past it only reach rows of Vt past it, which are set to
//! zero (as the zero-filled cp.async rows of the old pass make them); rows of Qbar past it only reach rows of o that
//! are not stored; Kbar's rows past it would multiply Vt's zeros (0 x NaN), so the short chunk's Kbar is copied again
//! by `cp.async` with zero fill into the ring slot of chunk j - 1 (free: the short chunk is the block's last, so no
//! copy refills that slot) and read from there. The TMA copies of a slot happen-before the generic writes of the
//! short chunk's copy (the full barrier's wait), and no TMA copy follows them.

use super::state::{SeqTensors, StateGrid, StateVariant, chunk_inputs, seq_tensors};
use super::{KdaSpec, grid};
use crate::OpError;
use k3k_ir::cluster::MAX_CLUSTER;
use k3k_ir::*;

/// Columns of one box of a K-wide operand: 128 bytes of a 16-bit type, the row of the 128-byte swizzle.
const BOX_COLS: u32 = 64;

/// Why a point cannot run `SLOAD=tma` (`None`: it can): the ring (2 or 3 stages), K a multiple of 64 (whole boxes),
/// and at most [`MAX_CLUSTER`] value blocks a pair.
pub fn tma_unsupported(dk: usize, dv: usize, bv: u32, stages: u32) -> Option<String> {
    if !(2..=3).contains(&stages) {
        return Some(format!("STAGES={stages}: the TMA loads need the ring (2 or 3 stages)"));
    }
    if !dk.is_multiple_of(BOX_COLS as usize) {
        return Some(format!("K={dk}: the TMA boxes are 64 columns wide"));
    }
    if dv / bv as usize > MAX_CLUSTER as usize {
        return Some(format!("V/BV = {}: a cluster holds at most {MAX_CLUSTER} value blocks", dv / bv as usize));
    }
    None
}

/// Whether a block's U (its C x BV columns of `[W | U]`) is one TMA box (`SLOAD=tmau`): BV = 64, one 128-byte row of
/// the box a row of U.
pub fn u_box_fits(bv: u32) -> bool {
    bv == BOX_COLS
}

/// Shared bytes of the `SLOAD=tma` pass: [`super::state_shared_bytes`]'s buffers (the same sizes, the K-wide ones
/// split into 64-column tiles) and the `full` and `empty` barriers of each slot, after 128-byte alignment.
pub fn state_shared_bytes_tma(dk: u32, chunk: u32, bv: u32, stages: u32) -> u32 {
    super::state_shared_bytes(dk, chunk, bv, stages).next_multiple_of(128) + 16 * stages
}

/// The pass's problem constants, tensors, shared buffers, barriers, register tiles and block coordinates.
struct Pass {
    bv: u32,
    /// Value blocks a pair (the cluster's CTAs) and 64-column boxes a K-wide row.
    n: u32,
    nh: u32,
    stages: u32,
    kk: i64,
    vv: i64,
    cc: i64,
    bvv: i64,
    hv: Expr,
    nch: Expr,
    wu: TensorId,
    kb: TensorId,
    pm: TensorId,
    ctab: TensorId,
    o: TensorId,
    /// The tensor maps of W, Qbar and Kbar with their shared buffers, and gamma's map.
    maps: [(TmapId, SharedId); 3],
    gmap: TmapId,
    sw: SharedId,
    sqb: SharedId,
    skb: SharedId,
    sgam: SharedId,
    su: SharedId,
    sp: SharedId,
    ss: SharedId,
    svt: SharedId,
    full: MbarId,
    empty: MbarId,
    /// S_h (rows 64h.. of the block's K x BV state) and gamma_h.
    st: Vec<TileId>,
    vg: Vec<VecId>,
    acc_v: TileId,
    acc_o: TileId,
    tu: TileId,
    rank: Expr,
    hvi: Expr,
    v0: Expr,
    ring: StageRing,
    /// Bytes each CTA's full barrier receives a chunk (every box lands in every CTA, and its own U box).
    tx: u32,
    /// U by a TMA box of the block's own (`SLOAD=tmau`), else by `cp.async`.
    u_tma: bool,
    o_vec: u32,
}

/// The kernel's leading declarations that [`Pass`] does not keep: the sequence table, h0 and ht.
struct Edges {
    stab: TensorId,
    h0: Option<TensorId>,
    ht: TensorId,
}

impl Pass {
    fn declare(b: &mut KernelBuilder, spec: &KdaSpec, variant: &StateVariant, u_tma: bool) -> (Pass, Edges) {
        let StateVariant { chunk: c, bv, warps, op_dt, stages, .. } = *variant;
        let (dk, dv) = (spec.dk, spec.dv);
        let (kk, vv, cc, bvv) = (dk as i64, dv as i64, c as i64, bv as i64);
        let (n, nh) = (dv / bv, dk / BOX_COLS);
        b.dim("TT"); // (the kernel's first dim, as in the `SLOAD=cp` pass; `o` reads it)
        let hv = b.dim("HV");
        let nch = b.dim("NCH");
        let nseq = b.dim("N");
        let [wu, qb, kb, pm, gam] = chunk_inputs(b, spec, c, op_dt, false);
        let SeqTensors { ctab, stab, h0, o, ht } = seq_tensors(b, spec);
        b.grid(vv / bvv, nseq, hv.clone());
        if n > 1 {
            b.cluster([n, 1, 1]);
        }

        // The TMA destinations first (their tiles on 1 KB), then the cp.async buffers. (U is one of the former
        // with `SLOAD=tmau`: before gamma, whose 4 * K bytes a slot would leave it off the 1 KB grid.)
        let sw = b.shared("sW", op_dt, c, BOX_COLS, stages * nh, Swizzle::Xor16B);
        let sqb = b.shared("sQb", op_dt, c, BOX_COLS, stages * nh, Swizzle::Xor16B);
        let skb = b.shared("sKb", op_dt, c, BOX_COLS, stages * nh, Swizzle::Xor16B);
        let su_first = u_tma.then(|| b.shared("sU", op_dt, c, bv, stages, Swizzle::Xor16B));
        let sgam = b.shared("sGam", DType::F32, 1, dk, stages, Swizzle::None);
        let su = su_first.unwrap_or_else(|| b.shared("sU", op_dt, c, bv, stages, Swizzle::Xor16B));
        let sp = b.shared("sP", op_dt, c, c, stages, Swizzle::Xor16B);
        let ss = b.shared("sS", op_dt, dk, bv, 1, Swizzle::Xor16B);
        let svt = b.shared("sVt", op_dt, c, bv, 1, Swizzle::Xor16B);
        let box4 = [BOX_COLS, c, 1, 1];
        let maps = [
            (b.tensor_map("w_map", wu, &box4, Swizzle::Xor16B), sw),
            (b.tensor_map("qb_map", qb, &box4, Swizzle::Xor16B), sqb),
            (b.tensor_map("kb_map", kb, &box4, Swizzle::Xor16B), skb),
        ];
        let gmap = b.tensor_map("gam_map", gam, &[dk, 1, 1], Swizzle::None);
        let full = b.mbarriers("full", stages);
        let empty = b.mbarriers("empty", stages);

        let sg = grid(BOX_COLS, bv, warps, 16);
        let st = (0..nh).map(|h| b.tile(&format!("S{h}"), DType::F32, BOX_COLS, bv, sg)).collect();
        let vg = (0..nh).map(|h| b.vec(&format!("gamma{h}"), BOX_COLS, sg)).collect();
        let og = grid(c, bv, warps, 16);
        let acc_v = b.tile("accV", DType::F32, c, bv, og);
        let acc_o = b.tile("accO", DType::F32, c, bv, og);
        let tu = b.tile("tU", DType::F32, c, bv, og);

        b.mbar_init(full, 1);
        b.mbar_init(empty, n * warps);
        if n > 1 {
            // Every CTA's barriers are initialized before a peer arrives on them or copies into its slots.
            b.cluster_sync();
        }
        let rank = b.let_("rank", b.cluster_rank());
        let hvi = b.let_("hv", Expr::block_idx(2));
        let v0 = b.let_("v0", Expr::block_idx(0) * bvv);
        let pass = Pass {
            bv,
            n,
            nh,
            stages,
            kk,
            vv,
            cc,
            bvv,
            hv,
            nch,
            wu,
            kb,
            pm,
            ctab,
            o,
            maps,
            gmap,
            sw,
            sqb,
            skb,
            sgam,
            su,
            sp,
            ss,
            svt,
            full,
            empty,
            st,
            vg,
            acc_v,
            acc_o,
            tu,
            rank,
            hvi,
            v0,
            ring: StageRing::new(stages, true),
            tx: 3 * nh * c * BOX_COLS * op_dt.bits() / 8 + 4 * dk + if u_tma { c * bv * op_dt.bits() / 8 } else { 0 },
            u_tma,
            // o's stores as the cp.async pass makes them (8-byte regrouped pairs at chunk 32, pairs at 64).
            o_vec: if c == 32 { 8 } else { 2 },
        };
        (pass, Edges { stab, h0, ht })
    }

    fn len_of(&self, ch: &Expr) -> Expr {
        Expr::load(self.ctab, ch * 2i64 + 1i64)
    }

    /// The chunk's slot in the scratch.
    fn slot_of(&self, ch: &Expr) -> Expr {
        &self.hvi * self.nch.clone() + ch.clone()
    }

    /// The loads of chunk `ch` (use `u` of the ring, slot `sl`, `rows` long): thread 0 waits for the slot's release
    /// by the whole cluster, announces the chunk's bytes and copies its share of the boxes (box `i` by rank `i % n`:
    /// the K-wide operands' 64-column boxes, then gamma) and, with `SLOAD=tmau`, its block's U box; every thread
    /// copies P, and U without `tmau`.
    fn issue(&self, b: &mut KernelBuilder, ch: Expr, u: Expr, sl: Expr, rows: Expr) {
        let (n, nh, full) = (self.n, self.nh, self.full);
        b.mbar_wait_elected(self.empty, sl.clone(), self.ring.empty_parity(u));
        b.mbar_arrive_expect_tx(full, sl.clone(), self.tx);
        let boxes = (0..3 * nh).map(Some).chain([None]).collect::<Vec<_>>();
        for r in 0..n.min(boxes.len() as u32) {
            b.if_(self.rank.clone().eq(r as i64), |b| {
                for bx in boxes.iter().skip(r as usize).step_by(n as usize) {
                    let (map, dst, coords) = match *bx {
                        Some(i) => {
                            let ((map, buf), h) = (self.maps[(i / nh) as usize], i % nh);
                            let col = Expr::Int((h * BOX_COLS) as i64);
                            (
                                map,
                                b.slot(buf, &sl * nh as i64 + h as i64),
                                vec![col, Expr::Int(0), ch.clone(), self.hvi.clone()],
                            )
                        }
                        None => {
                            (self.gmap, b.slot(self.sgam, sl.clone()), vec![Expr::Int(0), ch.clone(), self.hvi.clone()])
                        }
                    };
                    if n > 1 {
                        b.tma_load_multicast(map, dst, coords, full, sl.clone(), (1i64 << n) - 1);
                    } else {
                        b.tma_load(map, dst, coords, full, sl.clone());
                    }
                }
            });
        }
        let (kk, vv, cc) = (self.kk, self.vv, self.cc);
        let d = b.slot(self.su, sl.clone());
        if self.u_tma {
            // Columns K + v0.. of `[W | U]`: all C rows (a short chunk's rows past its length are masked where Vt is
            // formed, by a select, so what the scratch holds there never reaches a product).
            let coords = vec![self.v0.clone() + kk, Expr::Int(0), ch.clone(), self.hvi.clone()];
            b.tma_load(self.maps[0].0, d.clone(), coords, self.full, sl.clone());
        }
        let slot = b.let_("slot", self.slot_of(&ch));
        if !self.u_tma {
            b.copy_async(
                d,
                view(self.wu, &slot * (cc * (kk + vv)) + kk + self.v0.clone(), kk + vv, rows.clone(), self.bvv, 8),
            );
        }
        let d = b.slot(self.sp, sl);
        b.copy_async(d, view(self.pm, &slot * (cc * cc), cc, rows, cc, 8));
    }

    /// Chunk `j` of the block (global chunk `c0 + j` of `nc`; `rn`: the length of chunk j + S - 1, carried).
    fn step(&self, b: &mut KernelBuilder, j: Expr, c0: &Expr, nc: &Expr, rn: VarId) {
        let (nh, cc, bv, ahead) = (self.nh, self.cc, self.bv, self.stages as i64 - 1);
        let ch = b.let_("ch", c0 + j.clone());
        let row0 = b.let_("row0", Expr::load(self.ctab, &ch * 2i64));
        let len = b.let_("len", self.len_of(&ch));
        let cur = b.let_("cur", self.ring.slot(j.clone()));
        let next = b.let_("next", self.ring.slot(&j + ahead));
        let short = len.lt(cc);
        b.wait(self.stages - 2);
        b.mbar_wait(self.full, cur.clone(), self.ring.phase(j.clone()));
        for (h, &t) in self.st.iter().enumerate() {
            let d = b.window(self.ss, 0i64, h as u32 * BOX_COLS, 0, BOX_COLS, bv);
            b.store(t, Place::Shared(d));
        }
        b.barrier();
        b.if_((&j + ahead).lt(nc.clone()), |b| self.issue(b, &ch + ahead, &j + ahead, next.clone(), Expr::Var(rn)));
        // The short chunk's Kbar, zero-filled, into the slot chunk j - 1 read (see the module docs).
        b.if_(short.clone(), |b| {
            let base = b.let_("kb_base", self.slot_of(&ch) * (cc * self.kk));
            for h in 0..nh {
                let d = b.slot(self.skb, &next * nh as i64 + h as i64);
                let src = view(self.kb, &base + (h * BOX_COLS) as i64, self.kk, len.clone(), BOX_COLS as i64, 8);
                b.copy_async(d, src);
            }
        });
        b.commit();
        b.if_((&j + (ahead + 1)).lt(nc.clone()), |b| b.assign(rn, self.len_of(&(&ch + (ahead + 1)))));
        self.values(b, &cur, &len, &short);
        self.output_and_state(b, &cur, &next, &short, (&row0, &len));
        // This warp is done with slot `cur`: release it on every CTA of the cluster.
        for r in 0..self.n {
            b.mbar_arrive_cluster(self.empty, cur.clone(), r as i64);
        }
    }

    /// Vt = U - W S (rows past a short chunk's `len` zero) into sVt, and the q S part of o; a barrier publishes Vt.
    fn values(&self, b: &mut KernelBuilder, cur: &Expr, len: &Expr, short: &Expr) {
        let (acc_v, acc_o, tu, nh) = (self.acc_v, self.acc_o, self.tu, self.nh);
        b.map(acc_v, 0.0);
        b.map(acc_o, 0.0);
        for (acc, buf) in [(acc_v, self.sw), (acc_o, self.sqb)] {
            for h in 0..nh {
                let a = Operand::Shared { src: b.slot(buf, cur * nh as i64 + h as i64), transpose: false };
                let src = b.window(self.ss, 0i64, h * BOX_COLS, 0, BOX_COLS, self.bv);
                b.mma(acc, a, Operand::Shared { src, transpose: false });
            }
        }
        let d = b.slot(self.su, cur.clone());
        b.load(tu, Place::Shared(d));
        b.if_else(
            short.clone(),
            |b| b.map(acc_v, Expr::select(Expr::RowIdx.lt(len.clone()), Expr::Elem(tu) - Expr::Elem(acc_v), 0.0)),
            |b| b.map(acc_v, Expr::Elem(tu) - Expr::Elem(acc_v)),
        );
        let d = b.slot(self.svt, 0i64);
        b.store(acc_v, Place::Shared(d));
        // (The short chunk's Kbar copy lands before the barrier that publishes Vt.)
        b.if_(short.clone(), |b| b.wait(0));
        b.barrier();
    }

    /// o += P Vt, its store (`at`: the chunk's first row and length), S_h = Diag(gamma_h) S_h + Kbar_h^T Vt (Kbar
    /// from slot `next` for a short chunk).
    fn output_and_state(&self, b: &mut KernelBuilder, cur: &Expr, next: &Expr, short: &Expr, at: (&Expr, &Expr)) {
        let (acc_o, vv, nh) = (self.acc_o, self.vv, self.nh);
        let vt = Operand::Shared { src: b.slot(self.svt, 0i64), transpose: false };
        b.mma(acc_o, Operand::Shared { src: b.slot(self.sp, cur.clone()), transpose: false }, vt.clone());
        let o_off = (at.0 * self.hv.clone() + self.hvi.clone()) * vv + self.v0.clone();
        b.store(acc_o, Place::Global(view(self.o, o_off, self.hv.clone() * vv, at.1.clone(), self.bvv, self.o_vec)));
        let kslot = b.let_("kslot", Expr::select(short.clone(), next.clone(), cur.clone()));
        for (h, (&t, &g)) in self.st.iter().zip(&self.vg).enumerate() {
            let row = Expr::RowIdx + (h as u32 * BOX_COLS) as i64;
            b.vec_map(g, Expr::shared_load(self.sgam, cur.clone(), 0i64, row));
            b.map(t, Expr::Elem(t) * Expr::RowVal(g));
            let a = Operand::Shared { src: b.slot(self.skb, &kslot * nh as i64 + h as i64), transpose: true };
            b.mma(t, a, vt.clone());
        }
    }
}

/// Build the `SLOAD=tma` state pass of `variant` (see the module docs): `stages` 2 or 3, two barriers a chunk
/// (`SYNC=2`), grid `(V / BV, N, HV)` (`SGRID=vb`) in clusters of `V / BV` along x, U from the intra kernel
/// (`USTATE=0`); `u_tma` (`SLOAD=tmau`, BV = 64) copies each block's U by a TMA box of its own. Its kernel name is
/// the `SLOAD=cp` variant's with `_mc` (`_mcu` with `u_tma`).
pub fn build_state_tma(spec: &KdaSpec, variant: StateVariant, u_tma: bool) -> Result<Kernel, OpError> {
    let StateVariant { bv, warps, stages, two_bars, order, u_state, .. } = variant;
    let why = if !two_bars || order != StateGrid::ValueBlocks || u_state {
        Some(format!("SYNC=2, SGRID=vb and USTATE=0 only, got {variant:?}"))
    } else {
        tma_unsupported(spec.dk as usize, spec.dv as usize, bv, stages)
    };
    let why = why.or_else(|| (u_tma && !u_box_fits(bv)).then(|| format!("SLOAD=tmau needs BV={BOX_COLS}, got {bv}")));
    if let Some(why) = why {
        return Err(OpError::Internal(format!("kda state pass SLOAD=tma: {why}")));
    }
    let name = format!("{}_mc{}", variant.name(spec), if u_tma { "u" } else { "" });
    let mut b = KernelBuilder::new(&name, 32 * warps);
    let (p, e) = Pass::declare(&mut b, spec, &variant, u_tma);
    let (kk, vv) = (p.kk, p.vv);
    let seq = b.let_("seq", Expr::block_idx(1));
    let c0 = b.let_("c0", Expr::load(e.stab, &seq * 2i64));
    let nc = b.let_("nc", Expr::load(e.stab, &seq * 2i64 + 1i64));
    let state_off = b.let_("state_off", (&seq * p.hv.clone() + p.hvi.clone()) * (kk * vv) + p.v0.clone());
    let half_view = |t: TensorId, h: u32| view(t, state_off.clone() + (h * BOX_COLS) as i64 * vv, vv, 64i64, p.bvv, 2);
    for (h, &t) in p.st.iter().enumerate() {
        match e.h0 {
            Some(h0) => b.load(t, Place::Global(half_view(h0, h as u32))),
            None => b.map(t, 0.0),
        }
    }
    let ahead = stages as i64 - 1;
    for u in 0..ahead {
        b.if_(nc.gt(u), |b| {
            let ch = b.let_("ch_p", &c0 + u);
            p.issue(b, ch.clone(), Expr::Int(u), Expr::Int(u), p.len_of(&ch));
        });
        b.commit();
    }
    // The length of chunk j + S - 1, loaded a chunk ahead (as the two-barrier ring does).
    let rn = b.let_var("rows_next", 0i64);
    b.if_(nc.gt(ahead), |b| b.assign(rn, p.len_of(&(&c0 + ahead))));
    b.for_("j", 0i64, nc.clone(), 1i64, |b, j| p.step(b, j, &c0, &nc, rn));
    b.wait(0);
    for (h, &t) in p.st.iter().enumerate() {
        b.store(t, Place::Global(half_view(e.ht, h as u32)));
    }
    if p.n > 1 {
        // No CTA leaves while a peer may still arrive on its barriers.
        b.cluster_sync();
    }
    Ok(b.finish()?)
}
