//! One work item of the prefill kernel: its KV loop (in order, or overlapped on wgmma) and its epilogue.

use super::*;

impl PrefillKernel<'_> {
    /// One (q-tile, head) item: its Q tile, its K/V tiles through the ring, and its outputs.
    pub(super) fn item(&self, b: &mut KernelBuilder, m0: Expr, hh: Expr) {
        let (spec, c) = (self.spec, self.c);
        let (bm, bn) = (c.bm, c.bn);
        let rows_q = b.let_("rows_q", self.t_n.clone() - m0.clone());
        // Keys this q-tile may see: all, or up to the last row's diagonal (bottom-right aligned).
        let n_end = if spec.causal {
            let last = (m0.clone() + bm as i64).min(self.t_n.clone()) + self.s_n.clone() - self.t_n.clone();
            b.let_("n_end", last.min(self.s_n.clone()).max(0i64))
        } else {
            self.s_n.clone()
        };
        let n_tiles = b.let_("n_tiles", n_end.ceil_div(bn as i64));
        let diag = b.let_("diag", m0.clone() + self.s_n.clone() - self.t_n.clone());
        let it = PrefillItem {
            m0,
            hh,
            rows_q,
            n_end,
            n_tiles,
            diag,
            row_stride_qk: self.h.clone() * spec.dqk as i64,
            row_stride_v: self.h.clone() * spec.dv as i64,
        };
        if let Some(m) = &self.tma
            && self.walk.is_none()
        {
            self.init_barriers(b, m);
            self.load_q(b, &it, m);
        }
        // Q tile (first commit group, with KV stage 0).
        for cc in (0..self.nqk).filter(|_| self.tma.is_none()) {
            let qsrc = view(
                self.q,
                ((self.q_start.clone() + it.m0.clone()) * self.h.clone() + it.hh.clone()) * spec.dqk as i64
                    + (cc * KC) as i64,
                it.row_stride_qk.clone(),
                it.rows_q.clone(),
                KC as i64,
                8,
            );
            let qd = b.slot(self.sq, cc as i64);
            b.copy_async(qd, qsrc);
        }
        if !c.wgmma || !c.overlap {
            self.tiles_in_order(b, &it);
        } else {
            self.tiles_overlapped(b, &it);
        }
        self.epilogue(b, &it);
    }

    /// The K/V tiles one after the other: the ring prefetches STAGES - 1 tiles ahead; each tile's scores, softmax
    /// and P V (mma.sync, or wgmma without OVERLAP).
    pub(super) fn tiles_in_order(&self, b: &mut KernelBuilder, it: &PrefillItem) {
        let c = self.c;
        let (bn, st) = (c.bn, c.stages);
        for i in 0..st - 1 {
            b.producer_if(c.producer_warp, |b| {
                b.if_(Expr::Int(i as i64).lt(it.n_tiles.clone()), |b| self.load_stage(b, it, Expr::Int(i as i64)))
            });
            if self.tma.is_none() {
                b.commit();
            }
        }
        self.sm.init(b);
        for &acc in &self.accs {
            b.map(acc, 0.0f64);
        }
        if let Some(m) = &self.tma {
            b.mbar_wait(m.q_full, 0i64, 0i64);
        }
        b.for_("kt", 0i64, it.n_tiles.clone(), 1i64, |b, kt| {
            if self.tma.is_none() {
                b.wait(st - 2);
                b.barrier();
            }
            // (LOAD=tma: thread 0 waits for the refilled slot's empty barriers instead.)
            let next = &kt + (st - 1) as i64;
            b.producer_if(c.producer_warp, |b| {
                b.if_(next.lt(it.n_tiles.clone()), |b| self.load_stage(b, it, next.clone()))
            });
            if self.tma.is_none() {
                b.commit();
            }
            let slot = if c.wgmma { b.let_("slot", &kt % st as i64) } else { &kt % st as i64 };
            let parity = (&kt / st as i64) % 2i64;
            let kv0 = b.let_("kv0", &kt * bn as i64);
            if c.wgmma {
                if let Some(m) = &self.tma {
                    b.mbar_wait(m.k_full, slot.clone(), parity.clone());
                }
                self.qk_async(b, slot.clone());
                b.mma_wait(0);
                // The score product is complete: release the K slot to the producer.
                if let Some(m) = &self.tma {
                    b.mbar_arrive(m.k_empty, slot.clone());
                }
            } else {
                b.map(self.s, 0.0f64);
                let k_base = slot.clone() * self.nqk as i64;
                qk_chunks(b, self.s, self.sq, self.sk, k_base, self.nqk, c.qk_unroll, QkMma::Sync);
            }
            self.scale_mask(b, it, kv0);
            self.softmax_scores(b);
            self.sm.step_finish(b, self.s, self.p, &self.accs);
            if c.wgmma {
                if let Some(m) = &self.tma {
                    b.mbar_wait(m.v_full, slot.clone(), parity);
                }
                self.pv_async(b, slot.clone());
                b.mma_wait(0);
                if let Some(m) = &self.tma {
                    b.mbar_arrive(m.v_empty, slot);
                }
            } else {
                for (cv, &acc) in self.accs.iter().enumerate() {
                    let vb = Operand::Shared {
                        src: b.window(self.sv, slot.clone(), 0, cv as u32 * KC, bn, KC),
                        transpose: false,
                    };
                    b.mma(acc, Operand::Reg(self.p), vb);
                }
            }
        });
    }

    /// Overlapped wgmma: iteration kt issues S(kt) = Q K(kt)^T and then O += P(kt-1) V(kt-1), waits for S only,
    /// runs the softmax of tile kt while P V is in flight, then waits for it and rescales O and writes P(kt).
    /// V(kt-1) is still read during iteration kt, so the ring runs V one tile behind K: commit group j holds K(j)
    /// and V(j-1), and iteration kt loads group kt + STAGES - 1 (K into the slot of K(kt-1), read by S(kt-1); V into
    /// the slot of V(kt-2), read by P V in iteration kt-1), both finished by every thread at the top barrier.
    pub(super) fn tiles_overlapped(&self, b: &mut KernelBuilder, it: &PrefillItem) {
        let c = self.c;
        let (bn, st, nv) = (c.bn, c.stages, self.nv);
        let n_tiles = &it.n_tiles;
        // Group j >= 1 (group 0 holds K(0) and the Q tile).
        let load_group = |b: &mut KernelBuilder, j: Expr| {
            b.if_(j.clone().lt(n_tiles.clone()), |b| self.load_k(b, it, j.clone()));
            b.if_((j.clone() - 1i64).lt(n_tiles.clone()), |b| self.load_v(b, it, j.clone() - 1i64));
        };
        // LOAD=tma: the same schedule without commit groups or the block barrier: K(j) and V(j) complete on
        // the full barriers of slot j % STAGES; S(kt) waits for K(kt) and V(kt-1) (issued together), every
        // thread releases K(kt) once S(kt) is complete and V(kt-1) once P V(kt-1) is, and thread 0 waits for
        // those releases before loading K(kt + STAGES - 1) / V(kt + STAGES - 2) into the same slots.
        let commit = |b: &mut KernelBuilder| {
            if self.tma.is_none() {
                b.commit();
            }
        };
        b.producer_if(c.producer_warp, |b| {
            b.if_(Expr::Int(0).lt(n_tiles.clone()), |b| self.load_k(b, it, Expr::Int(0)))
        });
        commit(b);
        // PERSIST: the next item's first K tile may load while the consumers still read this item's Q tile.
        if let Some(m) = &self.tma
            && self.walk.is_some()
        {
            self.load_q(b, it, m);
        }
        for j in 1..st - 1 {
            b.producer_if(c.producer_warp, |b| load_group(b, Expr::Int(j as i64)));
            commit(b);
        }
        self.sm.init(b);
        for &acc in &self.accs {
            b.map(acc, 0.0f64);
        }
        // The Q tile's phase: the item's (PERSIST), else the only one.
        let q_parity = match &self.walk {
            Some((_, _, item)) => Expr::Var(*item).bitand(1i64),
            None => Expr::Int(0),
        };
        if let Some(m) = &self.tma {
            b.mbar_wait(m.q_full, 0i64, q_parity);
        }
        // One KV tile. `later`: whether kt > 0 is known statically (PINGPONG peels the first tile, so that a
        // turn holds straight-line products and the P V wait knows which it leaves in flight), or tested.
        let iteration = |b: &mut KernelBuilder, kt: Expr, later: Option<bool>| {
            let if_later = |b: &mut KernelBuilder, f: &dyn Fn(&mut KernelBuilder)| match later {
                None => b.if_(kt.clone().gt(0i64), |b| f(b)),
                Some(true) => f(b),
                Some(false) => {}
            };
            if self.tma.is_none() {
                b.wait(st - 2);
                b.barrier();
            }
            b.producer_if(c.producer_warp, |b| load_group(b, &kt + (st - 1) as i64));
            commit(b);
            let slot = b.let_("slot", self.slot_of(self.u(kt.clone())));
            let kv0 = b.let_("kv0", &kt * bn as i64);
            let prev = self.slot_of(self.u(kt.clone()) + (st - 1) as i64);
            if let Some(m) = &self.tma {
                b.mbar_wait(m.k_full, slot.clone(), self.phase_of(self.u(kt.clone())));
                if_later(b, &|b| b.mbar_wait(m.v_full, prev.clone(), self.phase_of(self.u(kt.clone()) - 1i64)));
            }
            match later {
                None => {
                    self.qk_async(b, slot.clone());
                    b.if_else(
                        kt.clone().gt(0i64),
                        |b| {
                            self.pv_async(b, prev.clone());
                            // The score product's groups were committed first: at most the P V ones remain.
                            b.mma_wait(nv);
                        },
                        |b| b.mma_wait(0),
                    );
                }
                Some(later) => {
                    b.in_turn_if(c.pingpong, |b| {
                        self.qk_flat(b, slot.clone());
                        if later {
                            self.pv_async(b, prev.clone());
                        }
                    });
                    b.mma_wait(if later { nv } else { 0 });
                }
            }
            if let Some(m) = &self.tma {
                b.mbar_arrive(m.k_empty, slot.clone());
                // PERSIST: the item's last score product is complete: release the Q tile, so that the next
                // item's Q tile loads while this one finishes.
                if let Some(qe) = m.q_empty {
                    b.if_(kt.clone().eq(n_tiles.clone() - 1i64), |b| b.mbar_arrive(qe, 0i64));
                }
            }
            if c.smguard {
                // Always true (kv0 < n_tiles * BN and n_tiles = ceil(n_end / BN)); see SMGUARD.
                self.scale_mask(b, it, kv0.clone());
                b.if_(kv0.lt(it.n_end.clone()), |b| self.softmax_scores(b));
            } else {
                self.scale_mask(b, it, kv0);
                self.softmax_scores(b);
            }
            b.mma_wait(0);
            if let Some(m) = &self.tma {
                if_later(b, &|b| b.mbar_arrive(m.v_empty, prev.clone()));
            }
            self.sm.step_finish(b, self.s, self.p, &self.accs);
        };
        if c.pingpong {
            b.if_(Expr::Int(0).lt(n_tiles.clone()), |b| iteration(b, Expr::Int(0), Some(false)));
            b.for_("kt", 1i64, n_tiles.clone(), 1i64, |b, kt| iteration(b, kt, Some(true)));
        } else {
            b.for_("kt", 0i64, n_tiles.clone(), 1i64, |b, kt| iteration(b, kt, None));
        }
        // The last tile's P V: its V is in group n_tiles, issued during the last iteration.
        b.if_(n_tiles.clone().gt(0i64), |b| {
            let last = self.slot_of(self.u(n_tiles.clone()) + (st - 1) as i64);
            match &self.tma {
                Some(m) => b.mbar_wait(m.v_full, last.clone(), self.phase_of(self.u(n_tiles.clone()) - 1i64)),
                None => {
                    b.wait(0);
                    b.barrier();
                }
            }
            self.pv_async(b, last.clone());
            b.mma_wait(0);
            // PERSIST: the ring runs on into the next item.
            if let Some(m) = self.tma.as_ref().filter(|_| self.walk.is_some()) {
                b.mbar_arrive(m.v_empty, last);
            }
        });
        // PERSIST: an item without keys releases its Q tile here.
        if let Some(qe) = self.tma.as_ref().and_then(|m| m.q_empty) {
            b.if_(n_tiles.clone().le(0i64), |b| b.mbar_arrive(qe, 0i64));
        }
    }

    /// o = acc / l (* sigmoid(z)), lse = ln(sum exp(tau q k)); PERSIST: the ring's count and the item count
    /// advance.
    pub(super) fn epilogue(&self, b: &mut KernelBuilder, it: &PrefillItem) {
        let (sm, h, dv) = (&self.sm, &self.h, self.spec.dv);
        if self.tma.is_none() {
            b.wait(0);
        }
        if self.c.fast_softmax {
            // The running max is in raw score units; the LSE wants it in the log2 domain (-inf stays -inf).
            b.vec_map(sm.m, rv(sm.m) * self.scale_log2.clone());
        }

        b.vec_map(self.inv_l, sm.inv_l());
        let out_off = ((self.q_start.clone() + it.m0.clone()) * h.clone() + it.hh.clone()) * dv as i64;
        // (PERSIST: the Q buffer may already hold the next item's tile; the gate comes from global memory.)
        if let Some(z) = self.z.filter(|_| self.walk.is_none()) {
            // Stage the gate tile through the Q chunks (no longer read) with coalesced 16-byte copies.
            b.barrier();
            for c in 0..self.nv {
                let zsrc = view(
                    z,
                    out_off.clone() + (c * KC) as i64,
                    it.row_stride_v.clone(),
                    it.rows_q.clone(),
                    KC as i64,
                    8,
                );
                let zd = b.slot(self.sq, c as i64);
                b.copy_async(zd, zsrc);
            }
            b.commit();
            b.wait(0);
            b.barrier();
        }
        for (c, &acc) in self.accs.iter().enumerate() {
            match self.zt {
                Some(zt) => {
                    let src = match (self.z, &self.walk) {
                        (Some(z), Some(_)) => Place::Global(view(
                            z,
                            out_off.clone() + (c * KC as usize) as i64,
                            it.row_stride_v.clone(),
                            it.rows_q.clone(),
                            KC as i64,
                            8,
                        )),
                        _ => Place::Shared(b.slot(self.sq, c as i64)),
                    };
                    b.load(zt, src);
                    b.map(acc, el(acc) * rv(self.inv_l) * el(zt).sigmoid());
                }
                None => b.map(acc, el(acc) * rv(self.inv_l)),
            }
            let dst = view(
                self.o,
                out_off.clone() + (c as u32 * KC) as i64,
                it.row_stride_v.clone(),
                it.rows_q.clone(),
                KC as i64,
                8,
            );
            b.store(acc, Place::Global(dst));
        }
        b.vec_map(self.lse_v, sm.lse_nat());
        b.store_vec(
            self.lse_v,
            vec_view(
                self.lse,
                it.hh.clone() * self.tq.clone() + self.q_start.clone() + it.m0.clone(),
                1i64,
                it.rows_q.clone(),
            ),
        );
        if let Some((_, kbase, item)) = &self.walk {
            b.assign(*kbase, Expr::Var(*kbase) + it.n_tiles.clone());
            b.assign(*item, Expr::Var(*item) + 1i64);
        }
    }
}
