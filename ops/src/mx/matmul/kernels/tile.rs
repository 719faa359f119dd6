//! One tile of the main kernel ([`MainKernel::tile`]): its coordinates and K range, then the path's K loop
//! and epilogue; and the pipeline's stage loads ([`MainKernel::load_stage`]).

use super::*;

impl MainKernel<'_> {
    /// One tile: group `gsel` (its rows from `row0`, `rows_g` of them), K split `ks`, token tile `mt`, weight tile
    /// `nt`; `t` the tile's index in the flat order (the split-K arrival counters are per `t / SPLIT`). With a
    /// stream-K segment `seg`, its K range instead of split `ks`'s, and `ks` its partial slot.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tile(
        &self,
        b: &mut KernelBuilder,
        t: Expr,
        gsel: Expr,
        row0: Expr,
        rows_g: Expr,
        ks: Expr,
        mt: Expr,
        nt: Expr,
        seg: Option<SkSeg>,
    ) {
        let (c, bm, bk) = (self.c, self.c.bm, self.c.bk);
        let m0 = b.let_("m0", mt * bm as i64);
        let n0 = b.let_("n0", nt * self.bno as i64);
        // PATH=gemv: at most BM (8-token tiles keep 16-row epilogue tiles).
        let rows_valid =
            b.let_("rows_valid", if c.gemv { (rows_g - m0.clone()).min(bm as i64) } else { rows_g - m0.clone() });
        let (kbeg, kend, full) = match seg {
            Some(s) => (b.let_("kbeg", s.kbeg), b.let_("kend", s.kend), Some(b.let_("full", s.full))),
            None => {
                let kbeg = b.let_("kbeg", &ks * self.kchunk.clone());
                (kbeg.clone(), b.let_("kend", (&kbeg + self.kchunk.clone()).min(self.kd.clone())), None)
            }
        };
        let k_tiles = b.let_("k_tiles", (&kend - kbeg.clone()).max(0i64).ceil_div(bk as i64));
        let wrow = b.let_("wrow", &gsel * self.n.clone());
        let tc = TileCtx { t, row0, ks, m0, n0, rows_valid, kbeg, kend, k_tiles, wrow, full };
        if let Some(sync) = self.sync {
            self.tile_sync(b, &tc, sync);
        }
        if let Some(wg) = self.wg {
            self.tile_wgmma(b, &tc, wg);
        }
        // Every warp must be done with the shared tiles before the next tile's prologue overwrites them.
        b.barrier();
    }

    /// The ring's prologue: K tiles `0..STAGES - 1` into their slots, one commit group each (empty past the range).
    pub(super) fn ring_prologue(&self, b: &mut KernelBuilder, tc: &TileCtx) {
        for s in 0..self.c.stages - 1 {
            let s = Expr::Int(s as i64);
            b.if_(s.lt(tc.k_tiles.clone()), |b| self.load_stage(b, tc, s.clone(), s.clone()));
            b.commit();
        }
    }

    /// The K loop over the ring: per K tile `kt`, wait for its group, issue tile `kt + STAGES - 1` into the slot
    /// tile `kt - 1` used, then `body(b, kt, slot)`; the slot is kept as a wrapping counter (no 64-bit `%` by a
    /// non-power of two per iteration). Ends with every group landed.
    pub(super) fn ring_loop(
        &self,
        b: &mut KernelBuilder,
        tc: &TileCtx,
        mut body: impl FnMut(&mut KernelBuilder, &Expr, &Expr),
    ) {
        let st = self.c.stages;
        let rslot = b.let_var("rslot", 0i64);
        b.for_("kt", 0i64, tc.k_tiles.clone(), 1i64, |b, kt| {
            b.wait(st - 2);
            b.barrier();
            let next = &kt + (st - 1) as i64;
            // (kt + STAGES - 1) % STAGES
            let nslot = Expr::select(Expr::Var(rslot).eq(0i64), Expr::Int((st - 1) as i64), Expr::Var(rslot) - 1i64);
            b.if_(next.lt(tc.k_tiles.clone()), |b| self.load_stage(b, tc, next.clone(), nslot));
            b.commit();
            let slot = b.let_("slot", Expr::Var(rslot));
            body(b, &kt, &slot);
            let inc = Expr::Var(rslot) + 1i64;
            b.assign(rslot, Expr::select(inc.eq(st as i64), Expr::Int(0), inc));
        });
        b.wait(0);
    }

    /// Load K tile `kt` of the tile into pipeline slot `slot` (= kt % STAGES).
    pub(super) fn load_stage(&self, b: &mut KernelBuilder, tc: &TileCtx, kt: Expr, slot: Expr) {
        let (spec, c, glu, bn, bk, words_per_row) =
            (self.spec, self.c, self.glu, self.c.bn, self.c.bk, self.words_per_row);
        let (n, kb, kd, kq, n_out) = (&self.n, &self.kb, &self.kd, &self.kq, &self.n_out);
        let (x, xs, wq, ws, sqs, sx, sx8) = (self.x, self.xs, self.wq, self.ws, self.sqs, self.sx, self.sx8);
        let (row0, m0, n0, rows_valid, kbeg, kend, wrow) =
            (&tc.row0, &tc.m0, &tc.n0, &tc.rows_valid, &tc.kbeg, &tc.kend, &tc.wrow);
        let k0 = b.let_("k0", kbeg + kt * bk as i64);
        let kleft = kend - k0.clone();
        // Weight rows: [0, BN) from n0, or the gate half from n0 and the up half from NH + n0.
        let halves: Vec<(u32, Expr, Expr)> = if glu {
            vec![(0, n0.clone(), n_out.clone() - n0.clone()), (bn / 2, n_out + n0.clone(), n_out.clone() - n0.clone())]
        } else {
            vec![(0, n0.clone(), n.clone() - n0.clone())]
        };
        let hrows = if glu { bn / 2 } else { bn };
        for (r0, nrow, nvalid) in halves.into_iter().filter(|_| sqs.is_some()) {
            let (sq, ss) = sqs.expect("tile path");
            let (qoff, qcols, qvec) = ((wrow + nrow.clone()) * kq.clone() + &k0 / 8i64, &kleft / 8i64, 4);
            let dq = b.window(sq, slot.clone(), r0, 0, hrows, words_per_row);
            b.copy_async(dq, view(wq, qoff, kq.clone(), nvalid.clone(), qcols, qvec));
            let ds = b.window(ss, slot.clone(), r0, 0, hrows, bk / 32);
            let soff = (wrow + nrow) * kb.clone() + &k0 / 32i64;
            b.copy_async(ds, view(ws, soff, kb.clone(), nvalid, &kleft / 32i64, scale_vec(spec, c)));
        }
        if self.f8.is_some() {
            // MMA=f8sync: the activations are staged once per tile (`tile_f8.rs`), not per stage.
        } else if let (Some((sxq, sxs)), Some(xs)) = (sx8, xs) {
            let kx = kd.clone() / 4i64;
            let kb4 = kd.clone() / 32i64;
            let rows = row0 + m0.clone();
            let dq = b.slot(sxq, slot.clone());
            b.copy_async(dq, view(x, &rows * kx.clone() + &k0 / 4i64, kx, rows_valid.clone(), &kleft / 4i64, 4));
            let ds = b.slot(sxs, slot);
            let svec = scale_vec(spec, c);
            b.copy_async(
                ds,
                view(xs, &rows * kb4.clone() + &k0 / 32i64, kb4, rows_valid.clone(), &kleft / 32i64, svec),
            );
        } else {
            let dx = b.slot(sx.expect("x tile"), slot);
            b.copy_async(dx, view(x, (row0 + m0.clone()) * kd.clone() + k0, kd.clone(), rows_valid.clone(), kleft, 8));
        }
    }
}
