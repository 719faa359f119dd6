//! The mma.sync paths of a tile (PATH=tile, stream and gemv): the K loop, then the epilogue.

use super::*;

impl MainKernel<'_> {
    /// The mma.sync paths (PATH=tile, stream and gemv): the K loop, then the epilogue through `sacc`.
    pub(super) fn tile_sync(&self, b: &mut KernelBuilder, tc: &TileCtx, sync: SyncTiles) {
        let (spec, c, glu, partial, bm, bn, bk, split) =
            (self.spec, self.c, self.glu, self.partial, self.c.bm, self.c.bn, self.c.bk, self.c.split as i64);
        let (m, n, kb, kd, kq, n_out) = (&self.m, &self.n, &self.kb, &self.kd, &self.kq, &self.n_out);
        let (x, wq, ws, out, p, fin) = (self.x, self.wq, self.ws, self.out, self.p, self.fin);
        let (t, row0, ks, m0, n0, rows_valid, kbeg, kend, wrow) =
            (&tc.t, &tc.row0, &tc.ks, &tc.m0, &tc.n0, &tc.rows_valid, &tc.kbeg, &tc.kend, &tc.wrow);
        let (sacc, acc, wt, yt, pv, sums, spart) = sync;
        if let (Some(acc), Some(f8)) = (acc, &self.f8) {
            self.f8_k_loop(b, tc, acc, f8, sacc);
        } else if let (Some(acc), Some(wt)) = (acc, wt) {
            self.sync_k_loop(b, tc, acc, wt, sacc);
        } else {
            // PATH=gemv: one statement per weight half over this split's K range, reduced into `sacc`.
            let spart = spart.expect("gemv partials");
            let kw_left = (kend - kbeg.clone()) / 8i64;
            let kb_left = (kend - kbeg.clone()) / 32i64;
            let halves: Vec<(u32, Expr, Expr)> = if glu {
                vec![
                    (0, n0.clone(), n_out.clone() - n0.clone()),
                    (bn / 2, n_out + n0.clone(), n_out.clone() - n0.clone()),
                ]
            } else {
                vec![(0, n0.clone(), n.clone() - n0.clone())]
            };
            let hrows = if glu { bn / 2 } else { bn };
            // The K range's first words and scales: row-major, or, tile-major (`Stmt::Fp4Gemv` tiled), the stored
            // place of the range's first quad, 16 quads' words (256) and scales (64) per 16-row block's quad step.
            // Without stream-K a tiled range starts at K = 0 (no K split), where the two agree, so those kernels keep
            // the row-major form (and their IR).
            let (kq_at, kb_at) = if spec.tiled && tc.full.is_some() {
                (kbeg / 8i64 * 16i64, kbeg / 32i64 * 16i64)
            } else {
                (kbeg / 8i64, kbeg / 32i64)
            };
            for (r0, nrow, nvalid) in halves {
                let qv = view(
                    wq,
                    (wrow + nrow.clone()) * kq.clone() + kq_at.clone(),
                    kq.clone(),
                    nvalid.clone(),
                    kw_left.clone(),
                    4,
                );
                let sv = view(ws, (wrow + nrow) * kb.clone() + kb_at.clone(), kb.clone(), nvalid, kb_left.clone(), 1);
                let xv = view(
                    x,
                    (row0 + m0.clone()) * kd.clone() + kbeg.clone(),
                    kd.clone(),
                    rows_valid.clone(),
                    kend - kbeg.clone(),
                    8,
                );
                let out = b.window(sacc, 0i64, r0, 0, hrows, bm);
                let flags = Fp4Flags { packed: spec.packed, fold: spec.fold, finite: spec.finite };
                let ring =
                    if c.stages >= 3 { Fp4Ring::Shared(c.staging(spec.tiled)) } else { Fp4Ring::Registers(c.ring) };
                b.fp4_gemv(out, spart, qv, sv, xv, flags, bk / 128, ring);
            }
        }
        let at = |row_off: u32| Expr::shared_load(sacc, 0i64, Expr::ColIdx + row_off as i64, Expr::RowIdx);
        let rows_base = row0 + m0.clone();
        // A K split's or a split stream-K tile's partial (slot `ks`), summed by the last to arrive (FIN=last) or
        // by the finalize kernel.
        let slots = c.part_slots() as i64;
        let partial_epilogue = |b: &mut KernelBuilder| {
            let prow = (ks * m.clone() + rows_base.clone()) * n.clone();
            let pvec = if spec.out_vec == 2 { 2 } else { 1 };
            b.map(yt, at(0));
            b.store(
                yt,
                Place::Global(view(
                    out,
                    &prow + n0.clone(),
                    n.clone(),
                    rows_valid.clone(),
                    n_out.clone() - n0.clone(),
                    pvec,
                )),
            );
            if glu {
                b.map(yt, at(bn / 2));
                b.store(
                    yt,
                    Place::Global(view(
                        out,
                        &prow + n_out.clone() + n0.clone(),
                        n.clone(),
                        rows_valid.clone(),
                        n_out.clone() - n0.clone(),
                        pvec,
                    )),
                );
            }
            if let (Some((ysum, usum, arrived)), Some((sem, y))) = (sums, fin) {
                // Every thread's partial stores are done (barrier); thread 0 fences them (cumulative: the
                // barrier ordered the block's stores before its fence) and counts this split in.
                let tile_id = b.let_("tile_id", t / split);
                b.barrier();
                b.threads(|b| {
                    b.if_(Expr::thread_idx().eq(0i64), |b| {
                        b.fence();
                        let target = AtomicTarget::Global { tensor: sem, index: tile_id.clone() };
                        let before = b.atomic_fetch("before", target, AtomicOp::Add, 1i64);
                        // Acquire side: the other splits' partials are read after this.
                        b.fence();
                        b.shared_store(arrived, 0i64, 0i64, 0i64, before);
                    });
                });
                b.barrier();
                let last = Expr::shared_load(arrived, 0i64, 0i64, 0i64).eq(slots - 1);
                b.if_(last, |b| {
                    // Every split of this tile has arrived: reset its counter for the next launch, then sum
                    // the partials in split order (the finalize kernel's order and rounding).
                    b.threads(|b| b.if_(Expr::thread_idx().eq(0i64), |b| b.store_scalar(sem, tile_id, 0i64)));
                    b.map(ysum, 0.0f64);
                    if let Some(u) = usum {
                        b.map(u, 0.0f64);
                    }
                    let body = |b: &mut KernelBuilder, si: Expr| {
                        let base = (&si * m.clone() + rows_base.clone()) * n.clone();
                        let cols = n_out.clone() - n0.clone();
                        let src = view(out, &base + n0.clone(), n.clone(), rows_valid.clone(), cols.clone(), pvec);
                        b.load(yt, Place::Global(src));
                        b.map(ysum, Expr::Elem(ysum) + Expr::Elem(yt));
                        if let Some(u) = usum {
                            let off = &base + n_out.clone() + n0.clone();
                            b.load(yt, Place::Global(view(out, off, n.clone(), rows_valid.clone(), cols, pvec)));
                            b.map(u, Expr::Elem(u) + Expr::Elem(yt));
                        }
                    };
                    if slots <= FINALIZE_UNROLL as i64 {
                        b.for_unrolled("s", 0i64, slots, 1i64, body);
                    } else {
                        b.for_("s", 0i64, slots, 1i64, body);
                    }
                    if let Some(u) = usum {
                        b.map(ysum, epilogue_expr(spec.epilogue, Expr::Elem(ysum), Expr::Elem(u)));
                    }
                    if let (Some(pv), Some(p)) = (pv, p) {
                        b.load_vec(pv, vec_view(p, rows_base.clone(), 1i64, rows_valid.clone()));
                        b.map(ysum, Expr::Elem(ysum) * Expr::RowVal(pv));
                    }
                    b.store(
                        ysum,
                        Place::Global(view(
                            y,
                            &rows_base * n_out.clone() + n0.clone(),
                            n_out.clone(),
                            rows_valid.clone(),
                            n_out.clone() - n0.clone(),
                            spec.out_vec,
                        )),
                    );
                });
            }
        };
        // The finished tile: the GLU and the row scales, then bf16 into `dst`.
        let plain_epilogue = |b: &mut KernelBuilder, dst: TensorId| {
            let h = if glu { epilogue_expr(spec.epilogue, at(0), at(bn / 2)) } else { at(0) };
            b.map(yt, h);
            if let (Some(pv), Some(p)) = (pv, p) {
                b.load_vec(pv, vec_view(p, rows_base.clone(), 1i64, rows_valid.clone()));
                b.map(yt, Expr::Elem(yt) * Expr::RowVal(pv));
            }
            b.store(
                yt,
                Place::Global(view(
                    dst,
                    &rows_base * n_out.clone() + n0.clone(),
                    n_out.clone(),
                    rows_valid.clone(),
                    n_out.clone() - n0.clone(),
                    spec.out_vec,
                )),
            );
        };
        match &tc.full {
            Some(full) => {
                let y = fin.expect("stream-K sums its split tiles in the kernel").1;
                b.if_else(full.clone(), |b| plain_epilogue(b, y), partial_epilogue);
            }
            None if partial => partial_epilogue(b),
            None => plain_epilogue(b, out),
        }
    }

    /// PATH=tile and stream: the `STAGES`-deep K loop into the `[BN, BM]` accumulator, then its transpose
    /// through `sacc`.
    fn sync_k_loop(&self, b: &mut KernelBuilder, tc: &TileCtx, acc: TileId, wt: TileId, sacc: SharedId) {
        let (spec, c, threads, bm, bn, bk) = (self.spec, self.c, self.threads, self.c.bm, self.c.bn, self.c.bk);
        let (n, kb, kq) = (&self.n, &self.kb, &self.kq);
        let (wq, ws, sqs, sx, sx8) = (self.wq, self.ws, self.sqs, self.sx, self.sx8);
        let (n0, rows_valid, kbeg, kend, wrow) = (&tc.n0, &tc.rows_valid, &tc.kbeg, &tc.kend, &tc.wrow);
        b.map(acc, 0.0f64);
        self.ring_prologue(b, tc);
        self.ring_loop(b, tc, |b, kt, slot| {
            let (kt, slot) = (kt.clone(), slot.clone());
            let xslot = if let Some((sxq, sxs)) = sx8 {
                dequant_x(b, sxq, sxs, sx.expect("x tile"), &slot, &Expr::Int(0), rows_valid, bm, bk, threads);
                b.barrier();
                Expr::Int(0)
            } else {
                slot.clone()
            };
            if c.stream {
                // The slice's words and scales straight into registers, then one product over BK.
                let k0 = b.let_("k0", kbeg + kt.clone() * bk as i64);
                let nvalid = n.clone() - n0.clone();
                // The packed words and the scales of the K slice from `k` on (masked at this split's end).
                let slice = |k: &Expr| {
                    let kleft = kend - k.clone();
                    let qv = view(
                        wq,
                        (wrow + n0.clone()) * kq.clone() + k / 8i64,
                        kq.clone(),
                        nvalid.clone(),
                        &kleft / 8i64,
                        4,
                    );
                    let sv = view(
                        ws,
                        (wrow + n0.clone()) * kb.clone() + k / 32i64,
                        kb.clone(),
                        nvalid.clone(),
                        &kleft / 32i64,
                        1,
                    );
                    (qv, sv)
                };
                let (qv, sv) = slice(&k0);
                if c.prefetch {
                    // The next slice's views (past this split's K range on the last slice: all masked).
                    let (nq, ns) = slice(&(&k0 + bk as i64));
                    let pf = Fp4Prefetch { words: nq, scales: ns, first: kt.eq(0i64) };
                    b.dequant_fp4_stream_prefetch(wt, qv, sv, spec.packed, spec.fold, spec.finite, pf);
                } else {
                    b.dequant_fp4_stream(wt, qv, sv, spec.packed, spec.fold, spec.finite);
                }
                let xw = b.window(sx.expect("x tile"), xslot.clone(), 0, 0, bm, bk);
                b.mma(acc, Operand::Reg(wt), Operand::Shared { src: xw, transpose: true });
            }
            for sub in (0..bk / 32).filter(|_| !c.stream) {
                let (sq, ss) = sqs.expect("tile path");
                if c.dec_bits {
                    let q = b.window(sq, slot.clone(), 0, sub * 4, bn, 4);
                    let s = b.window(ss, slot.clone(), 0, sub, bn, 1);
                    b.dequant_fp4(wt, q, s, spec.packed, spec.fold, spec.finite);
                } else {
                    b.map(wt, decode_expr(spec, sq, ss, &slot, Expr::Int(sub as i64), Expr::ColIdx));
                }
                let sub = sub as i64;
                let xw = b.window(sx.expect("x tile"), xslot.clone(), 0, (sub * 32) as u32, bm, 32);
                b.mma(acc, Operand::Reg(wt), Operand::Shared { src: xw, transpose: true });
            }
        });
        // Epilogue: transpose the [BN, BM] accumulator through shared memory.
        let sw = b.window(sacc, 0i64, 0, 0, bn, bm);
        b.store(acc, Place::Shared(sw));
        b.barrier();
    }
}
