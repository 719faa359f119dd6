//! The phases of the intra-chunk kernel, in the order [`build_intra`](super::build_intra) runs them: the loads and
//! the gate scan, the L2 norms, Qbar/Kbar/gamma, the diagonal tiles, the forward substitution of the diagonal
//! blocks, the off-diagonal pass (with the L and P stores) and the block substitution.

use super::*;

impl Intra {
    /// Phase 1, the loads (bias, q, k, v, beta) and the gate: its form, the scan into G~ (log2 units) in sG, the
    /// `xdiag` flag.
    pub(super) fn loads_and_scan(&self, b: &mut KernelBuilder) {
        let Intra {
            spec,
            threads,
            slim,
            kk,
            vv,
            cc,
            q,
            k,
            v,
            g,
            beta,
            bias,
            a_log,
            sk,
            sg,
            svec,
            sbias,
            sxd,
            sq,
            sv,
            tg,
            ..
        } = *self;
        let h = self.h.clone();
        let hv = self.hv.clone();
        let lb = self.lb.clone();
        let hvi = self.hvi.clone();
        let row0 = self.row0.clone();
        let len = self.len.clone();
        let hq = self.hq.clone();
        let mid_anchor = |x0: Expr| self.mid_anchor(x0);
        // 1. Loads.
        // (The bias tile exists only where the gate map reads it: not with `IMAP=gate`, whose row pass loads the
        // bias of its columns from global memory.)
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
        // (`USTATE=1`: no v, the state pass reads it.)
        if !slim && self.ufac.is_none() {
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
        // (`IMAP=gate`: the row pass below loads g and the bias itself.)
        if !self.rows_gate {
            b.load(
                tg,
                Place::Global(view(g, (&row0 * hv.clone() + hvi.clone()) * kk, hv.clone() * kk, len.clone(), kk, 2)),
            );
            if bias.is_some() {
                b.wait(1);
                b.barrier();
            }
        }
        let bias_at = |col: Expr| match sbias {
            Some(sb) => Expr::shared_load(sb, 0i64, 0i64, col),
            None => Expr::Float(0.0),
        };
        // (`GSIG=fast`) sigmoid(z) = rsqrt(1 + 2^(-z log2 e))^2: 2^(-z log2 e) is +inf for z below about -88
        // (rsqrt(inf) = 0) and 0 above about 88 (rsqrt(1) = 1).
        let sigmoid = |z: Expr| {
            if self.fast_gate_sigmoid {
                let r = (Expr::Float(1.0) + (z * -LOG2E).exp2_ftz()).rsqrt();
                r.clone() * r
            } else {
                z.sigmoid()
            }
        };
        // exp(A_log[hv]): once per block with `GSIG=fast`, else inside the map (as the kernels measured so far).
        let a_coef = match a_log {
            Some(a) if self.fast_gate_sigmoid => Some(b.let_("a_coef", Expr::load(a, hvi.clone()).exp())),
            Some(a) => Some(Expr::load(a, hvi.clone()).exp()),
            None => None,
        };
        // (`IFOLD=1` with the fast sigmoid) `-a log2 e` and `lb log2 e` once per block: the gate in log2 units as
        // `rsqrt(1 + 2^((x + bias) c))^2 l`, two multiplies an element fewer.
        let folded = (self.fold && self.fast_gate_sigmoid).then(|| {
            let c = b.let_("g_c", a_coef.clone().map_or(Expr::Float(-LOG2E), |a| a * -LOG2E));
            let l = b.let_("g_l", lb.clone().unwrap() * LOG2E);
            (c, l)
        });
        // The gate in log2 units of the raw gate `x` and the bias `bs` of its column.
        let form = |x: Expr, bs: Expr| {
            if let Some((c, l)) = &folded {
                let r = (Expr::Float(1.0) + ((x + bs) * c.clone()).exp2_ftz()).rsqrt();
                return r.clone() * r * l.clone();
            }
            let gate = match spec.gate {
                GateForm::Pre => x,
                GateForm::Safe { a_log: false, .. } => lb.clone().unwrap() * sigmoid(x + bs),
                GateForm::Safe { a_log: true, .. } => lb.clone().unwrap() * sigmoid(a_coef.clone().unwrap() * (x + bs)),
                GateForm::Standard { .. } => -Expr::load(a_log.unwrap(), hvi.clone()).exp() * (x + bs).softplus(),
            };
            gate * LOG2E
        };
        // Rows past the chunk's end decay by nothing (G~ stays at the last valid row).
        if self.rows_gate {
            self.gate_rows(b, &form);
        } else {
            b.map(tg, Expr::select(Expr::RowIdx.lt(len.clone()), form(Expr::Elem(tg), bias_at(Expr::ColIdx)), 0.0));
            b.scan_rows(tg, sg);
        }
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
    }

    /// The in-kernel L2 norms of q and k: their factors into rows 1 and 2 of sVec.
    pub(super) fn l2_norms(&self, b: &mut KernelBuilder) {
        let Intra { c, threads, kk, cc, svec, .. } = *self;
        let qs = |x0: Expr, x1: Expr| self.qs(x0, x1);
        let ks = |x0: Expr, x1: Expr| self.ks(x0, x1);
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
                if self.l2_unrolled {
                    // (`L2R=unrolled`) K/32 independent loads (a row past 2C reads row r of k again, unused).
                    for m in 0..kk / 32 {
                        let i = &lane + 32 * m;
                        let xv = b.let_("xv", Expr::select(is_q.clone(), qs(r.clone(), i.clone()), ks(r.clone(), i)));
                        b.assign(ss, Expr::Var(ss) + &xv * xv.clone());
                    }
                } else {
                    b.if_(row.lt(2 * cc), |b| {
                        b.for_("i", lane.clone(), kk, 32i64, |b, i| {
                            let xv =
                                b.let_("xv", Expr::select(is_q.clone(), qs(r.clone(), i.clone()), ks(r.clone(), i)));
                            b.assign(ss, Expr::Var(ss) + &xv * xv.clone());
                        });
                    });
                }
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

    /// Phase 2, Qbar, Kbar and gamma for the state pass.
    pub(super) fn qbar_kbar_gamma(&self, b: &mut KernelBuilder) {
        let Intra { dk, c, kc, threads, kk, cc, qb, kb, gam, sk, sg, svec, sq, tx, tgr, txin, vnq, vnk, .. } = *self;
        let scale = self.scale.clone();
        let len = self.len.clone();
        let last = self.last.clone();
        let slot_base = self.slot_base.clone();
        let gs = |x0: Expr, x1: Expr| self.gs(x0, x1);
        let rq = |x0: Expr| self.rq(x0);
        let rk = |x0: Expr| self.rk(x0);
        let ex2 = |x0: Expr| self.ex2(x0);
        // 2. Qbar, Kbar, gamma for the state pass.
        if let (Some(a), Some(bk)) = (vnq, vnk) {
            b.vec_map(a, Expr::shared_load(svec, 0i64, 1i64, Expr::RowIdx));
            b.vec_map(bk, Expr::shared_load(svec, 0i64, 2i64, Expr::RowIdx));
        }
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
    }

    /// Build the three operands of a level (anchored per row) into slots 0, 1, 2 of `buf` through `tile`, and
    /// run `prod` (the level's products, accumulating) on them. `lower`/`upper` say which rows take part on the
    /// A and B sides; `anchor` is the anchor row of a row. With the arena each column chunk of KC is built into
    /// the KC-wide slots and multiplied before the next (products over K = KC, summed). `b1` (`midoff`): slot 3 too.
    #[allow(clippy::too_many_arguments)]
    fn build_operands(
        &self,
        b: &mut KernelBuilder,
        buf: SharedId,
        tile: TileId,
        lower: Expr,
        upper: Expr,
        anchor: Expr,
        b1: bool,
        prod: &dyn Fn(&mut KernelBuilder),
    ) {
        let Intra { dk, c, kc, arena, sk, sg, sq, tx, tgr, tga, txin, .. } = *self;
        let gs = |x0: Expr, x1: Expr| self.gs(x0, x1);
        let rq = |x0: Expr| self.rq(x0);
        let rk = |x0: Expr| self.rk(x0);
        let ex2 = |x0: Expr| self.ex2(x0);
        let mid_anchor = |x0: Expr| self.mid_anchor(x0);
        let r = Expr::RowIdx;
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
    }

    /// Phase 3, the diagonal tiles (midpoint-anchored, or the exact hierarchy), P's exact diagonal, the masks, into sD;
    /// with `slim` the copy of v into sQ's bytes. Returns the `xdiag` flag (block-uniform) where there is one.
    pub(super) fn diagonal_tiles(&self, b: &mut KernelBuilder) -> Option<Expr> {
        let Intra { spec, dk, opk, midoff, slim, vv, v, sk, sxd, sq, sop, sd, sv, top, dp, dl, dself, .. } = *self;
        let hv = self.hv.clone();
        let hvi = self.hvi.clone();
        let row0 = self.row0.clone();
        let len = self.len.clone();
        let nq = |x0: Expr| self.nq(x0);
        let nk = |x0: Expr| self.nk(x0);
        let beta_at = |x0: Expr| self.beta_at(x0);
        let mid_anchor = |x0: Expr| self.mid_anchor(x0);
        // 3. Diagonal tiles first (into sD), then the off-diagonal levels, so the [C, C] totals are live only there.
        let op_slot = |b: &KernelBuilder, i: i64| b.slot(sop, i);
        let (r, col) = (Expr::RowIdx, Expr::ColIdx);
        let v_off = (&row0 * hv.clone() + hvi.clone()) * vv;
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
            if self.rows_ops {
                // (`IMAP=ops`) The operands were built by the row pass, behind its barrier.
                prod(b);
            } else {
                let anchor = mid_anchor(r.clone());
                self.build_operands(b, sop, top, Expr::Bool(true), Expr::Bool(true), anchor, midoff, &prod);
            }
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
                self.build_operands(b, sop, top, lower, upper, anchor, false, &prod);
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
            _ if spec.safe => midpoint_diag(b),
            Some(ok) => b.if_else(ok.clone(), midpoint_diag, hierarchy_diag),
            None => hierarchy_diag(b),
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
        if self.solve_early {
            // (`ISOLVE=2`) The off-diagonal tile's products here, on every warp, while warps 0-1 finish the
            // diagonal ones: their operands are behind the row pass's barrier, the barrier below retires their reads.
            self.midoff_products(b);
        }
        let d = b.slot(sd, 0i64);
        b.store(dp, Place::Shared(d));
        let d = b.slot(sd, 1i64);
        b.store(dl, Place::Shared(d));
        b.barrier();
        if slim && self.ufac.is_none() {
            // sQ's last reads are behind the barrier above: v lands in its bytes while the chunk's solve runs.
            let d = b.slot(sv, 0i64);
            b.copy_async(d, view(v, v_off.clone(), hv.clone() * vv, len.clone(), vv, 8));
            b.commit();
        }
        xd_ok
    }

    /// Phase 4a, N_ii = (I + L_ii)^-1 - I by forward substitution into sN.
    pub(super) fn forward_substitution(&self, b: &mut KernelBuilder) {
        if self.solve_wide {
            return self.forward_substitution_wide(b);
        }
        let Intra { cc, sn, sd, .. } = *self;
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
    }

    /// (`ISOLVE=1`) Phase 4a as [`Intra::forward_substitution`] (the same products, sums and selects in the same
    /// order) with row ri of L_ii loaded by ceil(ri/4) 16-byte shared loads (the columns it multiplies) instead of
    /// ri 4-byte ones, and the thread's column of N_ii stored as row `t` of sN (N_ii transposed) by two 16-byte
    /// stores instead of 16 2-byte ones; [`Intra::block_substitution`] reads it as a transposed A operand.
    fn forward_substitution_wide(&self, b: &mut KernelBuilder) {
        let Intra { cc, sn, sd, solve_t0, .. } = *self;
        b.threads(|b| {
            // (Thread `solve_t0 + t` takes column t % 16 of tile t / 16, see `Intra::solve_t0`.)
            let tid = Expr::thread_idx();
            let inside = if solve_t0 > 0 { tid.ge(solve_t0).and(tid.lt(solve_t0 + cc)) } else { tid.lt(cc) };
            b.if_(inside, |b| {
                let t = if solve_t0 > 0 { b.let_("ts", Expr::thread_idx() - solve_t0) } else { Expr::thread_idx() };
                let t0 = b.let_("t0", t.bitand(-16i64));
                let cl = b.let_("cl", t.bitand(15i64));
                let a = b.let_array("a", 16, ScalarTy::Float, 0.0);
                let lrow = b.let_array("lr", 16, ScalarTy::Float, 0.0);
                for ri in 0..16i64 {
                    let acc = b.let_var("acc", 0.0);
                    for q in 0..(ri as u32).div_ceil(4) {
                        b.shared_load_wide(lrow, 4 * q, sd, 1i64, &t0 + ri, Expr::Int(4 * q as i64), 4);
                    }
                    for m in 0..ri {
                        let l = Expr::array_get(lrow, Expr::Int(m));
                        b.assign(acc, Expr::Var(acc) + l * Expr::array_get(a, Expr::Int(m)));
                    }
                    // (Above the diagonal, ri < cl, this leaves -acc = -0 where the element-wise solve writes +0:
                    // every a[m] there is a zero, so acc is a sum of zeros that starts at +0, which is +0 in round to
                    // nearest whatever their signs, and stays the same value once a[cl] = 1 adds the first nonzero
                    // term; the store below masks those rows. The same N bits, one compare and select a row fewer.)
                    let val = Expr::select(Expr::Int(ri).eq(cl.clone()), 1.0, -Expr::Var(acc));
                    b.array_set(a, Expr::Int(ri), val);
                }
                // N's strictly lower part: the diagonal and above are zero (a thread's own column, so after the
                // last row has used every a[m]).
                for ri in 0..16i64 {
                    let keep = Expr::Int(ri).gt(cl.clone());
                    b.array_set(a, Expr::Int(ri), Expr::select(keep, Expr::array_get(a, Expr::Int(ri)), 0.0));
                }
                b.shared_store_wide(sn, 0i64, t.clone(), 0i64, a, 0, 8);
                b.shared_store_wide(sn, 0i64, t.clone(), 8i64, a, 8, 8);
            });
        });
    }

    /// Phase 4b, the off-diagonal tiles (the level pass, or with `midoff` the one tile from the diagonal operands),
    /// then L (with beta) into sLb and the full P to the scratch.
    pub(super) fn off_diagonal(&self, b: &mut KernelBuilder, xd_ok: Option<Expr>) {
        let Intra { c, arena, midoff, slim, cc, pm, sop, sd, slb, top, tot_p, tot_l, .. } = *self;
        let scale = self.scale.clone();
        let len = self.len.clone();
        let slot_base = self.slot_base.clone();
        let beta_at = |x0: Expr| self.beta_at(x0);
        let (r, col) = (Expr::RowIdx, Expr::ColIdx);
        let op_slot = |b: &KernelBuilder, i: i64| b.slot(sop, i);
        // (Started here: warps 0-1 solve while the others begin the levels; the levels' barriers order sN.)
        // Off-diagonal tiles by levels (none when the chunk is one tile), fine to coarse, accumulated in place
        // with the same clearing as inside the tiles. (`ISOLVE=2`: the totals are the early products already.)
        if !self.solve_early {
            b.map(tot_p, 0.0);
            b.map(tot_l, 0.0);
        }
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
            self.build_operands(b, sop, top, lower, upper, anchor, false, &prod);
            let done = r.bitxor(col.clone()).lt(&s * 2i64).and(col.lt(r.clone()));
            b.map(tot_p, Expr::select(done.clone(), Expr::Elem(tot_p), 0.0));
            b.map(tot_l, Expr::select(done, Expr::Elem(tot_l), 0.0));
            b.barrier();
        };
        // The one off-diagonal tile from the diagonal pass's operands, ordered by the barrier after sD (`ISOLVE=2`:
        // done before it, see `diagonal_tiles`).
        let midoff_pass = |b: &mut KernelBuilder| {
            if !self.solve_early {
                self.midoff_products(b);
            }
        };
        // (A runtime loop: unrolled, the arena's 128-register cap spills 60 bytes instead of 8.)
        let level_pass = |b: &mut KernelBuilder| b.for_("olvl", 0i64, levels, 1i64, olvl);
        match (midoff, xd_ok) {
            // `xdiag` chunks past the bound took the hierarchy (no slot 3): the level pass.
            (true, Some(ok)) => b.if_else(ok, midoff_pass, level_pass),
            (true, None) => midoff_pass(b),
            (false, _) => level_pass(b),
        }

        // Off-diagonal L (with beta) as the bf16 A operand of the block substitution.
        b.map(tot_l, Expr::Elem(tot_l) * beta_at(r.clone()));
        if slim && !self.solve_early {
            // sLb takes sOp's bytes: every warp is done with the off-diagonal products (`ISOLVE=2`: retired by
            // the barrier after sD).
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
    }

    /// The one off-diagonal tile (`midoff`) into the totals from the diagonal pass's operands (slots 0, 1: A sides
    /// anchored at each tile's midpoint; slot 3: tile 0's keys decayed to tile 1's anchor), masked to its pairs.
    fn midoff_products(&self, b: &mut KernelBuilder) {
        let Intra { sop, tot_p, tot_l, .. } = *self;
        let (r, col) = (Expr::RowIdx, Expr::ColIdx);
        let op_slot = |b: &KernelBuilder, i: i64| b.slot(sop, i);
        if self.solve_early {
            // (Else cleared by `off_diagonal`.)
            b.map(tot_p, 0.0);
            b.map(tot_l, 0.0);
        }
        let bt = Operand::Shared { src: op_slot(b, 3), transpose: true };
        b.mma(tot_p, Operand::Shared { src: op_slot(b, 0), transpose: false }, bt.clone());
        b.mma(tot_l, Operand::Shared { src: op_slot(b, 1), transpose: false }, bt);
        let off = r.ge(16i64).and(col.lt(16i64));
        b.map(tot_p, Expr::select(off.clone(), Expr::Elem(tot_p), 0.0));
        b.map(tot_l, Expr::select(off, Expr::Elem(tot_l), 0.0));
    }

    /// (`USTATE=1`) The factors of the U substitution to the scratch: N_ii (sN, C x 16), the strictly lower blocks of
    /// L with beta (rows 16.. and columns ..C-16 of sLb) and beta as applied (sVec row 0), every row of the chunk
    /// (rows past its end are zero: beta is, so L's and N's rows are). Coalesced 2-byte (4-byte) stores.
    fn u_factors(&self, b: &mut KernelBuilder) {
        let Some((nf, lf, bf)) = self.ufac else { return };
        let Intra { threads, cc, sn, slb, .. } = *self;
        let slot_base = self.slot_base.clone();
        let m = cc - 16;
        b.threads(|b| {
            let t = Expr::thread_idx();
            b.for_("e", t.clone(), cc * 16, threads as i64, |b, e| {
                let v = Expr::shared_load(sn, 0i64, &e / 16i64, e.bitand(15i64));
                b.store_scalar(nf, &slot_base * (cc * 16) + e, v);
            });
            b.for_("e", t.clone(), m * m, threads as i64, |b, e| {
                let v = Expr::shared_load(slb, 0i64, &e / m + 16i64, &e % m);
                b.store_scalar(lf, &slot_base * (m * m) + e, v);
            });
            b.if_(t.lt(cc), |b| b.store_scalar(bf, &slot_base * cc + t.clone(), self.beta_at(t.clone())));
        });
    }

    /// Phase 5b, the block substitution, row tile by row tile: W and U into sXW, sXU and the scratch (`USTATE=1`: W
    /// alone, and the U substitution's factors, see [`Intra::u_factors`]).
    pub(super) fn block_substitution(&self, b: &mut KernelBuilder) {
        self.u_factors(b);
        let u_half = self.ufac.is_none();
        let Intra {
            spec,
            dk,
            dv,
            nt,
            kk,
            vv,
            cc,
            wu,
            sk,
            sg,
            svec,
            sn,
            sxw,
            sxu,
            slb,
            st,
            sv,
            acc_w,
            acc_u,
            tk16,
            tg16,
            tv16,
            vbw,
            vbu,
            vnk16,
            ..
        } = *self;
        let len = self.len.clone();
        let slot_base = self.slot_base.clone();
        let beta_at = |x0: Expr| self.beta_at(x0);
        let ex2 = |x0: Expr| self.ex2(x0);
        // W and U go out as regrouped 8-byte stores (every offset is a multiple of K) on the plain variants, which
        // the presets run: measured on the H200 (2026-12-04, two runs, defaults otherwise), B1 T8192 H96 1.545
        // ms with them vs 1.608 with pair stores, T65536 H32 4.483 vs 4.633, in both calls against FLA chunk_kda
        // 2.42 / 6.89-6.90 ms in the same call. Under the 80-register cap their temporaries cost ptxas 8-16 spilled
        // bytes with GSWZ=pairs (see `kda_compile.rs`), which those timings include. With the in-kernel gate, norm and
        // beta options the spill would reach 36 bytes: pair stores there, unless `IWU=wide` (no spill at
        // FlashKDA's options with ptxas 13.0, 2026-12-07).
        let wu_vec = if spec.plain() || self.wide_wu { 8 } else { 2 };
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
            if u_half {
                b.map(acc_u, 0.0);
            }
            if i > 0 {
                let la = b.window(slb, 0i64, 16 * i, 0, 16, 16 * i);
                b.mma(
                    acc_w,
                    Operand::Shared { src: la.clone(), transpose: false },
                    Operand::Shared { src: xw(b, 16 * i), transpose: false },
                );
                if u_half {
                    let xu = b.window(sxu, 0i64, 0, 0, 16 * i, dv);
                    b.mma(
                        acc_u,
                        Operand::Shared { src: la, transpose: false },
                        Operand::Shared { src: xu, transpose: false },
                    );
                }
            }
            let rr = Expr::RowIdx + r0;
            if !self.r_rows {
                let d = b.window(sk, 0i64, 16 * i, 0, 16, dk);
                b.load(tk16, Place::Shared(d));
            }
            // (`IFOLD=2`: sG holds R, built by the row pass.)
            let d = b.window(sg, 0i64, 16 * i, 0, 16, dk);
            b.load(tg16, Place::Shared(d));
            if u_half {
                let d = b.window(sv, 0i64, 16 * i, 0, 16, dv);
                b.load(tv16, Place::Shared(d));
            }
            if !self.r_rows {
                b.vec_map(vbw, beta_at(rr.clone()));
            }
            if u_half {
                b.vec_map(vbu, beta_at(rr.clone()));
            }
            let mut rw = Expr::RowVal(vbw) * Expr::Elem(tk16) * ex2(Expr::Elem(tg16));
            if let (Some(v), false) = (vnk16, self.r_rows) {
                b.vec_map(v, Expr::shared_load(svec, 0i64, 2i64, rr.clone()));
                rw = rw * Expr::RowVal(v);
            }
            if self.r_rows {
                rw = Expr::Elem(tg16);
            }
            b.map(acc_w, rw - Expr::Elem(acc_w));
            if u_half {
                b.map(acc_u, Expr::RowVal(vbu) * Expr::Elem(tv16) - Expr::Elem(acc_u));
            }
            b.store(acc_w, Place::Shared(tw.clone()));
            if u_half {
                b.store(acc_u, Place::Shared(tu.clone()));
            }
            b.barrier();
            // (`ISOLVE=1`: sN holds N_ii transposed.)
            let na = b.window(sn, 0i64, 16 * i, 0, 16, 16);
            let nt = self.solve_wide;
            b.mma(
                acc_w,
                Operand::Shared { src: na.clone(), transpose: nt },
                Operand::Shared { src: tw.clone(), transpose: false },
            );
            if u_half {
                b.mma(acc_u, Operand::Shared { src: na, transpose: nt }, Operand::Shared { src: tu, transpose: false });
            }
            if st.is_none() {
                // Every warp has read T_i before X_i overwrites it.
                b.barrier();
            }
            let d = b.window(sxw, 0i64, 16 * i, 0, 16, dk);
            b.store(acc_w, Place::Shared(d));
            if u_half {
                let d = b.window(sxu, 0i64, 16 * i, 0, 16, dv);
                b.store(acc_u, Place::Shared(d));
            }
            let rows = len.clone() - r0;
            let stride = if u_half { kk + vv } else { kk };
            let base = (&slot_base * cc + r0) * stride;
            b.store(acc_w, Place::Global(view(wu, base.clone(), stride, rows.clone(), kk, wu_vec)));
            if u_half {
                b.store(acc_u, Place::Global(view(wu, base + kk, stride, rows, vv, wu_vec)));
            }
            b.barrier();
        }
    }
}
