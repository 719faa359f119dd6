//! (`IMAP=rows` / `ops`) The row-major pass of the intra kernel: Qbar, Kbar and the L2 norms, and with `ops` the
//! diagonal tiles' operands, from 16-byte accesses of 8 consecutive columns of a row per thread.
//!
//! The tile maps (`IMAP=tiles`) hold each element of C x K as part of an MMA-fragment pair: per pair a swizzled
//! shared address (bf16 pairs of q and k, f32 pairs of G~), and per Qbar / Kbar store of a 32-column chunk a
//! 64-bit global row address and 4-byte stores; the L2 norms are a pass of their own that loads q and k again.
//! None of these maps needs the fragment layout (their results go to global memory or to shared operands that
//! `ldmatrix` reads), so here thread `t` takes the columns `8 (t % (K/8))..+8` of the rows `t / (K/8) + i rows`,
//! `rows = threads / (K/8)`: one `ld.shared.v4` per 8 bf16 of q or k, two per 8 f32 of G~, one `st.global.v4`
//! per 8 f16 of Qbar or Kbar, the swizzled addresses once per row. The same expressions in the same order as the
//! tile maps: only the norms' sums run in another order (each lane sums its 8 squares, the K/8 lanes of a row
//! then reduce by shuffles).

use super::*;

/// Lanes of a wide access: 8 columns a thread, G~ (f32) in two halves of 4.
const W: u32 = 8;

impl Intra {
    /// Qbar, Kbar (to the scratch) and the L2-norm factors (to rows 1 and 2 of sVec) in one pass over the rows;
    /// with `rows_ops` also the diagonal operands (slots 0..3 of sOp, see [`Intra::build_operands`] with the
    /// midpoint anchor). Then gamma as before, and one barrier where the norm factors or the operands are read
    /// by other threads next.
    pub(super) fn qk_rows(&self, b: &mut KernelBuilder) {
        let Intra { dk, c, threads, kk, cc, qb, kb, sk, sg, sq, sop, svec, rows_ops, .. } = *self;
        let (scale, len, last, slot_base) =
            (self.scale.clone(), self.len.clone(), self.last.clone(), self.slot_base.clone());
        let lanes_row = (dk / W) as i64;
        let rows_pass = threads as i64 / lanes_row;
        let passes = (c as i64 / rows_pass).max(1);
        let l2 = self.spec.l2norm;
        let ag = |a: ArrId, j: u32| Expr::array_get(a, j as i64);
        // gamma = 2^G~_last, as the tile path (first: fewer values live across the barrier).
        let gam = self.gam;
        b.threads(|b| {
            b.for_("i", Expr::thread_idx(), kk, threads as i64, |b, i| {
                b.store_scalar(gam, &slot_base * kk + i.clone(), self.ex2(self.gs(last.clone(), i)));
            });
        });
        b.threads(|b| {
            let t = Expr::thread_idx();
            let cg = b.let_("cg", (&t % lanes_row) * W as i64);
            let r0 = b.let_("r0", &t / lanes_row);
            let lead = b.let_("lead", (&t % lanes_row).eq(0i64));
            let f = ScalarTy::Float;
            let (xq, xk, xg) =
                (b.let_array("xq", W, f, 0.0), b.let_array("xk", W, f, 0.0), b.let_array("xg", W, f, 0.0));
            // (G~ of an anchor row or of the last row, one at a time: fewer registers live.)
            let (ga, out) = (b.let_array("ga", W, f, 0.0), b.let_array("xo", W, f, 0.0));
            let g_row = |b: &mut KernelBuilder, arr: ArrId, row: Expr| {
                b.shared_load_wide(arr, 0, sg, 0i64, row.clone(), cg.clone(), W / 2);
                b.shared_load_wide(arr, W / 2, sg, 0i64, row, &cg + (W / 2) as i64, W / 2);
            };
            for p in 0..passes {
                // (More rows a pass than the chunk has: the threads past it load row r % C and store nothing.)
                let r = b.let_("r", &r0 + p * rows_pass);
                let (rl, in_c) =
                    if rows_pass > cc { (b.let_("rl", &r % cc), r.lt(cc)) } else { (r.clone(), Expr::Bool(true)) };
                b.shared_load_wide(xq, 0, sq, 0i64, rl.clone(), cg.clone(), W);
                b.shared_load_wide(xk, 0, sk, 0i64, rl.clone(), cg.clone(), W);
                // The norm factors of the row: 8 squares a lane, then the row's lanes by shuffles.
                let (fq, fk) = if l2 {
                    let mut fs = vec![];
                    for (x, name) in [(xq, "ssq"), (xk, "ssk")] {
                        let ss = b.let_var(name, ag(x, 0) * ag(x, 0));
                        for j in 1..W {
                            b.assign(ss, Expr::Var(ss) + ag(x, j) * ag(x, j));
                        }
                        let mut m = lanes_row as u32 / 2;
                        while m >= 1 {
                            let o = b.warp_shuffle("sso", WarpOp::ShflXor(m), Expr::Var(ss));
                            b.assign(ss, Expr::Var(ss) + o);
                            m /= 2;
                        }
                        fs.push(b.let_("nf", (Expr::Var(ss) + 1e-6).rsqrt()));
                    }
                    let (fq, fk) = (fs[0].clone(), fs[1].clone());
                    b.if_(lead.clone().and(in_c.clone()), |b| {
                        b.shared_store(svec, 0i64, 1i64, rl.clone(), fq.clone());
                        b.shared_store(svec, 0i64, 2i64, rl.clone(), fk.clone());
                    });
                    if self.fold {
                        // (`IFOLD=1`) q n_q and k n_k once: every operand below is built from them.
                        for (x, f) in [(xq, &fq), (xk, &fk)] {
                            for j in 0..W {
                                b.array_set(x, j as i64, ag(x, j) * f.clone());
                            }
                        }
                        (None, None)
                    } else {
                        (Some(fq), Some(fk))
                    }
                } else {
                    (None, None)
                };
                g_row(b, xg, rl.clone());
                // (`r < len` also keeps the rows past the chunk out: len <= C.)
                let stored = r.lt(len.clone());
                let at = (&slot_base * cc + r.clone()) * kk + cg.clone();
                // Qbar = s q 2^G~ (n_q), Kbar = k 2^(G~_last - G~) (n_k): the tile maps' expressions.
                // (`IFOLD=2`: 2^G~ kept in `ga` for R.)
                let e0 = |j: u32| if self.r_rows { ag(ga, j) } else { self.ex2(ag(xg, j)) };
                if self.r_rows {
                    for j in 0..W {
                        b.array_set(ga, j as i64, self.ex2(ag(xg, j)));
                    }
                }
                for j in 0..W {
                    b.array_set(out, j as i64, times(scale.clone() * ag(xq, j) * e0(j), fq.clone()));
                }
                b.if_(stored.clone(), |b| b.store_wide(qb, at.clone(), out, 0, W));
                if self.r_rows {
                    // R = beta k n_k 2^G~ over this row's G~ in sG, except the rows other threads still read in
                    // this pass (the tiles' midpoint anchors and the last row): those after the barrier below.
                    let beta = b.let_("rb", self.beta_at(rl.clone()));
                    for j in 0..W {
                        b.array_set(out, j as i64, beta.clone() * ag(xk, j) * ag(ga, j));
                    }
                    let own = rl.bitand(15i64).ne(8i64).and(rl.ne(cc - 1)).and(in_c.clone());
                    b.if_(own, |b| self.g_store(b, rl.clone(), cg.clone(), out));
                }
                // The diagonal operands anchored at the tile's midpoint row (`build_operands` with `lower` and
                // `upper` true): slot 0 q 2^(G~ - G~_a) n_q, 1 k 2^(G~ - G~_a) n_k, 2 k 2^(G~_a - G~) n_k, 3 (rows
                // of tile 0) k 2^(G~_a1 - G~) n_k with a1 tile 1's anchor, else 0.
                let slot = |b: &mut KernelBuilder, s: i64, v: &dyn Fn(u32) -> Expr| {
                    for j in 0..W {
                        b.array_set(out, j as i64, v(j));
                    }
                    b.if_(in_c.clone(), |b| b.shared_store_wide(sop, s, rl.clone(), cg.clone(), out, 0, W));
                };
                if rows_ops {
                    g_row(b, ga, self.mid_anchor(rl.clone()));
                    let e1 = |j: u32| self.ex2(ag(xg, j) - ag(ga, j));
                    slot(b, 0, &|j| times(ag(xq, j) * e1(j), fq.clone()));
                    slot(b, 1, &|j| times(ag(xk, j) * e1(j), fk.clone()));
                    slot(b, 2, &|j| times(ag(xk, j) * self.ex2(ag(ga, j) - ag(xg, j)), fk.clone()));
                }
                g_row(b, ga, last.clone());
                for j in 0..W {
                    b.array_set(out, j as i64, times(ag(xk, j) * self.ex2(ag(ga, j) - ag(xg, j)), fk.clone()));
                }
                b.if_(stored, |b| b.store_wide(kb, at.clone(), out, 0, W));
                if rows_ops {
                    g_row(b, ga, self.mid_anchor(Expr::Int(16)));
                    let in0 = rl.lt(16i64);
                    // (Zeros for the rows of tile 1, whose products the off-diagonal mask drops: the tile maps
                    // store `(k 0) n_k`, a zero of k's sign, which reaches no output either.)
                    let e3 = |j: u32| times(ag(xk, j) * self.ex2(ag(ga, j) - ag(xg, j)), fk.clone());
                    slot(b, 3, &|j| Expr::select(in0.clone(), e3(j), 0.0));
                }
            }
        });
        if l2 || rows_ops {
            b.barrier();
        }
        if self.r_rows {
            self.r_shared_rows(b);
        }
        if let (Some(a), Some(bk), false) = (self.vnq, self.vnk, rows_ops) {
            // (The level and diagonal operands of the tile maps take the factors as row vectors.)
            b.vec_map(a, Expr::shared_load(svec, 0i64, 1i64, Expr::RowIdx));
            b.vec_map(bk, Expr::shared_load(svec, 0i64, 2i64, Expr::RowIdx));
        }
    }

    /// (`IFOLD=2`) 8 f32 of R from `out` over G~ at row `r`, columns `cg..+8` of sG (two 16-byte stores).
    fn g_store(&self, b: &mut KernelBuilder, r: Expr, cg: Expr, out: ArrId) {
        b.shared_store_wide(self.sg, 0i64, r.clone(), cg.clone(), out, 0, W / 2);
        b.shared_store_wide(self.sg, 0i64, r, cg + (W / 2) as i64, out, W / 2, W / 2);
    }

    /// (`IFOLD=2`, full chunks) R of the rows the row pass leaves (the tiles' midpoint anchors `16 i + 8` and the
    /// last row, which other threads read during the pass), after its barrier, with the pass's expressions: k n_k
    /// (n_k from sVec, the value the pass stored) times beta times 2^G~. Ordered before the block substitution by
    /// the barriers between.
    fn r_shared_rows(&self, b: &mut KernelBuilder) {
        let Intra { dk, nt, cc, sk, sg, .. } = *self;
        let lanes_row = (dk / W) as i64;
        let scale_k = self.spec.l2norm && self.fold;
        b.threads(|b| {
            let t = Expr::thread_idx();
            b.if_(t.lt((nt as i64 + 1) * lanes_row), |b| {
                let i = b.let_("ri", &t / lanes_row);
                let r = b.let_("rr", Expr::select(i.lt(nt as i64), &i * 16i64 + 8i64, cc - 1));
                let cg = b.let_("rc", (&t % lanes_row) * W as i64);
                let f = ScalarTy::Float;
                let (xk, xg, out) =
                    (b.let_array("rk", W, f, 0.0), b.let_array("rg", W, f, 0.0), b.let_array("ro", W, f, 0.0));
                b.shared_load_wide(xk, 0, sk, 0i64, r.clone(), cg.clone(), W);
                b.shared_load_wide(xg, 0, sg, 0i64, r.clone(), cg.clone(), W / 2);
                b.shared_load_wide(xg, W / 2, sg, 0i64, r.clone(), &cg + (W / 2) as i64, W / 2);
                let nk = self.nk(r.clone());
                let beta = b.let_("rb", self.beta_at(r.clone()));
                let ag = |a: ArrId, j: u32| Expr::array_get(a, j as i64);
                for j in 0..W {
                    let kn = match (&nk, scale_k) {
                        (Some(n), true) => ag(xk, j) * n.clone(),
                        _ => ag(xk, j),
                    };
                    b.array_set(out, j as i64, beta.clone() * kn * self.ex2(ag(xg, j)));
                }
                self.g_store(b, r, cg, out);
            });
        });
    }

    /// (`IMAP=gate`) The gate form in the row layout of [`Intra::qk_rows`]: thread `t` loads 8 consecutive raw gate
    /// values of a row (one 16-byte global load of bf16, two of f32) and the bias of its 8 columns (from global
    /// memory, once), forms the gate (`form`: the tile map's expression of each element) and stores it to sG with
    /// two 16-byte stores; after a barrier, one thread a column sums down the rows in place (the order of the
    /// tile scan: the same bits). Replaces the tile load (a 4-byte load and a swizzled address per pair), the
    /// tile's store to sG and its reload, and two of the scan's three barriers.
    pub(super) fn gate_rows(&self, b: &mut KernelBuilder, form: &dyn Fn(Expr, Expr) -> Expr) {
        let Intra { dk, c, threads, kk, cc, g, bias, sg, .. } = *self;
        let (hv, hvi, row0, len) = (self.hv.clone(), self.hvi.clone(), self.row0.clone(), self.len.clone());
        let lanes_row = (dk / W) as i64;
        let rows_pass = threads as i64 / lanes_row;
        let passes = (c as i64 / rows_pass).max(1);
        let g_lanes = if self.spec.g_bf16 { W } else { W / 2 };
        let ag = |a: ArrId, j: u32| Expr::array_get(a, j as i64);
        b.threads(|b| {
            let t = Expr::thread_idx();
            let cg = b.let_("gcg", (&t % lanes_row) * W as i64);
            let r0 = b.let_("gr0", &t / lanes_row);
            let f = ScalarTy::Float;
            let (xg, xb, out) =
                (b.let_array("gx", W, f, 0.0), b.let_array("gb", W, f, 0.0), b.let_array("go", W, f, 0.0));
            if let Some(bt) = bias {
                b.load_wide(xb, 0, bt, &hvi * kk + cg.clone(), W / 2);
                b.load_wide(xb, W / 2, bt, &hvi * kk + &cg + (W / 2) as i64, W / 2);
            }
            for p in 0..passes {
                let r = b.let_("gr", &r0 + p * rows_pass);
                let in_c = if rows_pass > cc { r.lt(cc) } else { Expr::Bool(true) };
                // (Rows past the chunk's end: 0, G~ stays at the last valid row. In the full-chunk copy every row of
                // a pass is valid when a pass has at most C rows.)
                let valid = match len {
                    Expr::Int(l) if l == cc && rows_pass <= cc => Expr::Bool(true),
                    _ => r.lt(len.clone()),
                };
                let gate = |b: &mut KernelBuilder| {
                    let at = (&row0 + r.clone()) * hv.clone() * kk + &hvi * kk + cg.clone();
                    for h in 0..W / g_lanes {
                        b.load_wide(xg, h * g_lanes, g, at.clone() + (h * g_lanes) as i64, g_lanes);
                    }
                    for j in 0..W {
                        let bs = if bias.is_some() { ag(xb, j) } else { Expr::Float(0.0) };
                        b.array_set(out, j as i64, form(ag(xg, j), bs));
                    }
                };
                let zero = |b: &mut KernelBuilder| {
                    for j in 0..W {
                        b.array_set(out, j as i64, 0.0);
                    }
                };
                b.if_else(valid, gate, zero);
                b.if_(in_c, |b| {
                    b.shared_store_wide(sg, 0i64, r.clone(), cg.clone(), out, 0, W / 2);
                    b.shared_store_wide(sg, 0i64, r.clone(), &cg + (W / 2) as i64, out, W / 2, W / 2);
                });
            }
        });
        b.barrier();
        b.threads(|b| {
            b.for_("gc", Expr::thread_idx(), kk, threads as i64, |b, col| {
                let acc = b.let_var("gs", Expr::shared_load(sg, 0i64, 0i64, col.clone()));
                for r in 1..cc {
                    b.assign(acc, Expr::Var(acc) + Expr::shared_load(sg, 0i64, r, col.clone()));
                    b.shared_store(sg, 0i64, r, col.clone(), Expr::Var(acc));
                }
            });
        });
    }
}
