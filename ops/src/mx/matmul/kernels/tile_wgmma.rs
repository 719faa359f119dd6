//! The wgmma path of a tile: the K loop with the weights decoded into shared bf16 tiles, then the epilogue.

use super::*;

impl MainKernel<'_> {
    /// The wgmma path: the K loop with the weights decoded into shared bf16 tiles, then the epilogue.
    pub(super) fn tile_wgmma(&self, b: &mut KernelBuilder, tc: &TileCtx, wg: WgmmaTiles) {
        let (spec, glu, partial, threads, bm, bn, bk, st) =
            (self.spec, self.glu, self.partial, self.threads, self.c.bm, self.c.bn, self.c.bk, self.c.stages);
        let (m, n, n_out) = (&self.m, &self.n, &self.n_out);
        let (out, p, sqs, sx, sx8) = (self.out, self.p, self.sqs, self.sx, self.sx8);
        let (row0, ks, m0, n0, rows_valid, k_tiles) = (&tc.row0, &tc.ks, &tc.m0, &tc.n0, &tc.rows_valid, &tc.k_tiles);
        let (sw, acc, acc_up, pv, wreg) = wg;
        // Warpgroup MMA pipeline (as latent_moe_gemm's): a stage's x tile is refilled two iterations after
        // its product was issued, so STAGES-2 loads and one product are in flight. Each iteration decodes
        // the stage's weights (a threads region, one 32-bit word of eight values at a time) into one of two
        // shared bf16 tiles (the one the product two iterations ago read).
        for s in 0..st - 2 {
            let s = Expr::Int(s as i64);
            b.if_(s.lt(k_tiles.clone()), |b| self.load_stage(b, tc, s.clone(), s.clone()));
            b.commit();
        }
        let groups = if glu { 2 } else { 1 };
        b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
            b.wait(st - 3);
            b.barrier();
            let next = &kt + (st - 2) as i64;
            b.if_(next.lt(k_tiles.clone()), |b| self.load_stage(b, tc, next.clone(), &next % st as i64));
            b.commit();
            let slot = b.let_("slot", &kt % st as i64);
            let half = b.let_("half", &kt % 2i64);
            let (sq, ss) = sqs.expect("tile path (validated: PATH=stream is MMA=sync)");
            if let Some(wr) = wreg {
                let q = b.window(sq, slot.clone(), 0, 0, bn, bk / 8);
                let s = b.window(ss, slot.clone(), 0, 0, bn, bk / 32);
                b.dequant_fp4(wr, q, s, spec.packed, spec.fold, spec.finite);
                let dst = b.window(sw, half.clone(), 0, 0, bn, bk);
                b.store(wr, Place::Shared(dst));
            } else {
                dequant_words(b, spec, sq, ss, sw, &slot, &half, bn, bk, threads);
            }
            let xslot = if let Some((sxq, sxs)) = sx8 {
                dequant_x(b, sxq, sxs, sx.expect("x tile"), &slot, &half, rows_valid, bm, bk, threads);
                half.clone()
            } else {
                slot.clone()
            };
            // Fence the ordinary shared stores for the async proxy (the loads just issued may stay in flight).
            b.wait(st - 2);
            b.barrier();
            let a = Operand::Shared { src: b.slot(sx.expect("x tile"), xslot), transpose: false };
            // The first product of a tile overwrites the accumulators (no zeroing instructions).
            let accumulate = kt.gt(0i64);
            crate::latent_moe_gemm::weight_products(b, acc, acc_up, a, sw, half, bn, bk, Some(accumulate));
            b.mma_wait(groups);
        });
        b.mma_wait(0);
        b.wait(0);
        // K range empty (a split past K): no product ran, the result is zero.
        b.if_(k_tiles.le(0i64), |b| {
            b.map(acc, 0.0f64);
            if let Some(u) = acc_up {
                b.map(u, 0.0f64);
            }
        });
        let rows_base = row0 + m0.clone();
        if partial {
            let prow = (ks * m.clone() + rows_base.clone()) * n.clone();
            let pvec = if spec.out_vec == 2 { 2 } else { 1 };
            let cols = n_out.clone() - n0.clone();
            b.store(
                acc,
                Place::Global(view(out, &prow + n0.clone(), n.clone(), rows_valid.clone(), cols.clone(), pvec)),
            );
            if let Some(u) = acc_up {
                let off = &prow + n_out.clone() + n0.clone();
                b.store(u, Place::Global(view(out, off, n.clone(), rows_valid.clone(), cols, pvec)));
            }
        } else {
            if let Some(u) = acc_up {
                b.map(acc, epilogue_expr(spec.epilogue, Expr::Elem(acc), Expr::Elem(u)));
            }
            if let (Some(pv), Some(p)) = (pv, p) {
                b.load_vec(pv, vec_view(p, rows_base.clone(), 1i64, rows_valid.clone()));
                b.map(acc, Expr::Elem(acc) * Expr::RowVal(pv));
            }
            let off = &rows_base * n_out.clone() + n0.clone();
            let cols = n_out.clone() - n0.clone();
            b.store(acc, Place::Global(view(out, off, n_out.clone(), rows_valid.clone(), cols, spec.out_vec)));
        }
    }
}
