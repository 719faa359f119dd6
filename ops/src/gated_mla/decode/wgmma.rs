//! The wgmma decode kernel (`MMA=wgmma`): [`build_decode_wgmma`] and its tile schedules.

use super::*;

/// The wgmma decode kernel ([`build_decode`] / [`build_decode_direct`] with `MMA=wgmma`): the same arguments,
/// outputs and split rule; the grid's x is `ceil(SQ*H / BM) * DVS` (m-tile `x / DVS`, value slice `x % DVS`).
/// Each warpgroup owns 64 packed rows: `S = Q K^T` is 9 asynchronous 64-deep products from the swizzled Q
/// chunks and the stage's K chunks, the online softmax runs on the score accumulator itself, and `O += P V`
/// reads P from registers and the slice's V chunks (the first 512 columns of the same stage, N-contiguous).
/// Every value slice recomputes the scores and the LSE of its rows; slice 0 writes the LSE. `OVERLAP`: iteration
/// j issues S(j), then P(j-1) V(j-1), waits for S(j) alone and runs its softmax while P V is in flight, then
/// waits for P V, rescales O and writes P(j); the last tile's P V follows the loop. Tile j-1's stage is read
/// during iteration j, so the ring loads `STAGES - 2` tiles ahead instead of `STAGES - 1`.
pub(super) fn build_decode_wgmma(
    spec: &DecodeSpec,
    knobs: &Knobs,
    c: &DecodeCfg,
    direct: bool,
) -> Result<Kernel, OpError> {
    let (bm, bn, st, dvs) = (c.bm, c.bn, c.stages, c.dvs);
    let (d, dv) = (spec.d, spec.dv);
    // VWG=2: a second set of warpgroups shares the block's Q tile and K/V stages, and the value accumulators are
    // split by columns, each warpgroup multiplying 32 of every 64 value columns. SCORES=replicated: every
    // warpgroup computes the scores of its rows (the score tile is replicated). SCORES=shared: warpgroup 0 alone
    // computes the scores and the softmax (the score tile, P and the softmax state are its own) and passes P and
    // the row scale to both through shared memory (FlashMLA's split), which saves the second warpgroup's
    // 576-deep score product: a third of the block's tensor work per tile.
    let mut b = KernelBuilder::new(&DecodeCfg::kernel_name(spec, knobs, direct), c.threads());
    b.knobs(knobs.clone());
    if c.shared_scores && c.tma {
        // Warpgroup 0 carries the critical path (the scores and the softmax); the TMA producer's waits and copies
        // go to warpgroup 1, which waits for P meanwhile.
        b.elected_warpgroup(1);
    }
    let io = decode_io(&mut b, spec, direct);
    b.grid((io.sqd.clone() * io.h.clone()).ceil_div(bm as i64) * dvs as i64, io.nsplit.clone(), io.bsz.clone());

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
    let blk = decode_block(&mut b, &io, mt, bm, bn);
    // The first value chunk of this block's slice.
    let v0 = b.let_("v0", vs.clone() * nvl as i64);
    let mut ring = KvRing::new(&mut b, spec, c, &io, &blk, skv);
    let DecodeBlock { split, bi, rows_total, m0, rows_valid, s_k, t0, count, diag, scale_log2 } = blk;
    let DecodeIo { sqd, h, nsplit, q, o_part, lse_part, .. } = io;
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
        let k_base = slot.clone() * self.nch as i64;
        qk_chunks(b, self.s, self.sq, self.skv, k_base, self.nch, self.c.qk_unroll, QkMma::Async);
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
