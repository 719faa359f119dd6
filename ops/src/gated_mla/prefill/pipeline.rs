//! The prefill pipeline: ring slots and phases, barrier initialization, and the TMA and cp.async loads of Q,
//! K and V.

use super::*;

impl PrefillKernel<'_> {
    /// The ring use of K / V tile `kt` of the item (PERSIST: after the earlier items' tiles).
    pub(super) fn u(&self, kt: Expr) -> Expr {
        match &self.walk {
            Some((_, kbase, _)) => Expr::Var(*kbase) + kt,
            None => kt,
        }
    }

    /// The slot of ring use `u` and the parity of its phase (PERSIST's uses are never negative: a mask and a shift
    /// at a power-of-two STAGES).
    pub(super) fn slot_of(&self, u: Expr) -> Expr {
        self.ring.slot(u)
    }

    pub(super) fn phase_of(&self, u: Expr) -> Expr {
        self.ring.phase(u)
    }

    pub(super) fn init_barriers(&self, b: &mut KernelBuilder, m: &PrefillTma) {
        let wm = self.c.wm;
        b.mbar_init(m.q_full, 1);
        if let Some(qe) = m.q_empty {
            b.mbar_init(qe, 32 * wm);
        }
        b.mbar_init(m.k_full, 1);
        b.mbar_init(m.k_empty, 32 * wm);
        b.mbar_init(m.v_full, 1);
        b.mbar_init(m.v_empty, 32 * wm);
    }

    /// Stage `kt` of a K or V ring (`t` is `k` or `v`): the tile's 64-column chunks of a `[S, H, d]` tensor into
    /// its slot.
    pub(super) fn load_chunks(&self, b: &mut KernelBuilder, it: &PrefillItem, kt: Expr, t: TensorId) {
        let (d, n, buf) =
            if t == self.k { (self.spec.dqk, self.nqk, self.sk) } else { (self.spec.dv, self.nv, self.sv) };
        let bn = self.c.bn;
        let slot = self.slot_of(self.u(kt.clone()));
        let kv0 = kt.clone() * bn as i64;
        if let Some(m) = &self.tma {
            let (map, full, empty) =
                if t == self.k { (m.km, m.k_full, m.k_empty) } else { (m.vm, m.v_full, m.v_empty) };
            // Thread 0 waits until every thread has released the slot's previous use (tile kt - STAGES, phase
            // kt / STAGES - 1 of its empty barrier; a fresh barrier passes parity 1 at once), then announces
            // the stage's bytes (whole boxes: rows past the tensor's end arrive as zeros) and issues the copies.
            // Rows past the sequence's end come from the next sequence: masked like the cp.async zeros.
            b.mbar_wait_elected(empty, slot.clone(), self.ring.empty_parity(self.u(kt.clone())));
            b.mbar_arrive_expect_tx(full, slot.clone(), 2 * bn * d);
            for cc in 0..n {
                let dst = b.slot(buf, slot.clone() * n as i64 + cc as i64);
                let coords = vec![Expr::from((cc * KC) as i64), it.hh.clone(), self.k_start.clone() + kv0.clone()];
                b.tma_load(map, dst, coords, full, slot.clone());
            }
            return;
        }
        let h = &self.h;
        for c in 0..n {
            let src = view(
                t,
                ((self.k_start.clone() + kv0.clone()) * h.clone() + it.hh.clone()) * d as i64 + (c * KC) as i64,
                h.clone() * d as i64,
                self.s_n.clone() - kv0.clone(),
                KC as i64,
                8,
            );
            let dst = b.slot(buf, slot.clone() * n as i64 + c as i64);
            b.copy_async(dst, src);
        }
    }

    pub(super) fn load_k(&self, b: &mut KernelBuilder, it: &PrefillItem, kt: Expr) {
        self.load_chunks(b, it, kt, self.k);
    }

    pub(super) fn load_v(&self, b: &mut KernelBuilder, it: &PrefillItem, kt: Expr) {
        if self.c.wgmma {
            self.load_chunks(b, it, kt, self.v);
        } else {
            let (bn, st, dv) = (self.c.bn, self.c.stages, self.spec.dv);
            let slot = kt.clone() % st as i64;
            let kv0 = kt * bn as i64;
            let vsrc = view(
                self.v,
                ((self.k_start.clone() + kv0.clone()) * self.h.clone() + it.hh.clone()) * dv as i64,
                it.row_stride_v.clone(),
                self.s_n.clone() - kv0,
                dv as i64,
                8,
            );
            let vd = b.slot(self.sv, slot);
            b.copy_async(vd, vsrc);
        }
    }

    pub(super) fn load_stage(&self, b: &mut KernelBuilder, it: &PrefillItem, kt: Expr) {
        self.load_k(b, it, kt.clone());
        self.load_v(b, it, kt);
    }

    /// The Q tile: one box per 64-column chunk (rows past the sequence's end are never stored); PERSIST: once
    /// the consumers have released the previous item's.
    pub(super) fn load_q(&self, b: &mut KernelBuilder, it: &PrefillItem, m: &PrefillTma) {
        let (bm, dqk, nqk) = (self.c.bm, self.spec.dqk, self.nqk);
        b.producer_if(self.c.producer_warp, |b| {
            if let (Some(qe), Some((_, _, item))) = (m.q_empty, &self.walk) {
                b.mbar_wait_elected(qe, 0i64, Expr::Var(*item).bitand(1i64).bitxor(1i64));
            }
            b.mbar_arrive_expect_tx(m.q_full, 0i64, 2 * bm * dqk);
            for cc in 0..nqk {
                let dst = b.slot(self.sq, cc as i64);
                let coords = vec![Expr::from((cc * KC) as i64), it.hh.clone(), self.q_start.clone() + it.m0.clone()];
                b.tma_load(m.qm, dst, coords, m.q_full, 0i64);
            }
        });
    }
}
