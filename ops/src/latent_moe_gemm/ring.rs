//! The stage ring: loading one k-step of a tile into a ring slot ([`GemmKernel::load_stage_at`]) by TMA (one
//! CTA, or a cluster pair sharing one operand by multicast) or by cp.async, the slot and phase of a stage use,
//! and the release of a slot to the producer.

use super::kernel::GemmKernel;
use super::walk::Coords;
use k3k_ir::*;

impl GemmKernel<'_> {
    /// The ring use of k-step `kt` (LOAD=tma: after the block's earlier tiles' k-steps).
    pub fn use_of(&self, kt: &Expr) -> Expr {
        match self.ring.kbase {
            Some(v) => Expr::Var(v) + kt.clone(),
            None => kt.clone(),
        }
    }

    /// After a tile's K loop: its k-steps are behind the block.
    pub fn advance(&self, b: &mut KernelBuilder) {
        if let Some(v) = self.ring.kbase {
            b.assign(v, Expr::Var(v) + self.walk.k_tiles.clone());
        }
    }

    /// The ring slot of stage use `u` and the parity of its phase. AHEAD (whose uses are never negative) with a
    /// power-of-two STAGES: a mask and a shift (the measured in-loop schedule keeps its expressions).
    pub fn slot_of(&self, u: Expr) -> Expr {
        self.ring.slots.slot(u)
    }

    pub fn phase_of(&self, u: Expr) -> Expr {
        self.ring.slots.phase(u)
    }

    /// Load k-step `kt` of tile `cs` as the ring use of that k-step.
    pub fn load_stage(&self, b: &mut KernelBuilder, cs: &Coords, kt: Expr) {
        self.load_stage_at(b, cs, kt.clone(), self.use_of(&kt));
    }

    /// Release a slot to the producers: every thread (CLUSTER=1), one arrival per warp (RELEASE=warp: rank 0 of
    /// the one-CTA cluster is the block itself), or one arrival per warp on both CTAs' barrier (CLUSTER=2).
    pub fn release(&self, b: &mut KernelBuilder, empty: MbarId, slot: Expr) {
        let c = self.c;
        if c.cluster2 {
            b.mbar_arrive_cluster(empty, slot.clone(), 0i64);
            b.mbar_arrive_cluster(empty, slot, 1i64);
        } else if c.warp_release {
            b.mbar_arrive_cluster(empty, slot, 0i64);
        } else {
            b.mbar_arrive(empty, slot);
        }
    }

    /// Load k-step `kt` of tile `cs` as stage use `use_` of the ring: slot `use_ % STAGES` (LOAD=tma: waiting for
    /// that use's empty phase and completing on its full barrier; the cp.async path is called with `use_ = kt`).
    pub fn load_stage_at(&self, b: &mut KernelBuilder, cs: &Coords, kt: Expr, use_: Expr) {
        let slot = self.slot_of(use_.clone());
        let Some((_, _, full, empty)) = self.ring.tma else {
            return self.load_stage_cp_async(b, cs, kt, slot);
        };
        // The producer (thread 0) waits until every thread has released the slot's previous use (`use -
        // STAGES`: phase `use / STAGES - 1` of its empty barrier; a fresh barrier passes parity 1 at once).
        b.mbar_wait_elected(empty, slot.clone(), self.ring.slots.empty_parity(use_));
        let k0 = kt * self.c.bk as i64;
        // (CLUSTER=2: the full stage, half of the shared operand from each CTA of the pair.)
        b.mbar_arrive_expect_tx(full, slot.clone(), self.ring.stage_bytes);
        if self.c.cluster2 {
            for r in 0..2u32 {
                b.if_(self.walk.rank.eq(r as i64), |b| self.load_stage_pair(b, cs, &k0, &slot, r));
            }
        } else {
            self.load_stage_tma(b, cs, &k0, slot);
        }
    }

    /// The weights' tensor-map coordinates of row `row` at K offset `k0` (grouped: the group is the outer one).
    fn w_coords(&self, cs: &Coords, k0: &Expr, row: Expr) -> Vec<Expr> {
        if self.spec.grouped { vec![k0.clone(), row, cs.grp.clone()] } else { vec![k0.clone(), row] }
    }

    /// One CTA's TMA stage: the x tile and the weight tile (with a GLU its gate and up halves). Rows past the
    /// group's end come from the next group (or read zero past M): never stored.
    fn load_stage_tma(&self, b: &mut KernelBuilder, cs: &Coords, k0: &Expr, slot: Expr) {
        let (xm, wm, full, _) = self.ring.tma.expect("LOAD=tma");
        let (sa, sb, bn, bk, n_out) = (self.tiles.sa, self.tiles.sb, self.c.bn, self.c.bk, &self.io.n_out);
        b.tma_load(xm, b.slot(sa, slot.clone()), vec![k0.clone(), cs.r0.clone()], full, slot.clone());
        if self.glu {
            let half = bn / 2;
            let g_dst = b.window(sb, slot.clone(), 0, 0, half, bk);
            let u_dst = b.window(sb, slot.clone(), half, 0, half, bk);
            b.tma_load(wm, g_dst, self.w_coords(cs, k0, cs.n0.clone()), full, slot.clone());
            b.tma_load(wm, u_dst, self.w_coords(cs, k0, n_out.clone() + cs.n0.clone()), full, slot);
        } else {
            b.tma_load(wm, b.slot(sb, slot.clone()), self.w_coords(cs, k0, cs.n0.clone()), full, slot);
        }
    }

    /// CLUSTER=2, the CTA of rank `r`: it copies half `r` of the shared operand into both CTAs (mask 0b11); the
    /// other operand is its own. Rows past the group's end come from the next group (or read zero past M).
    fn load_stage_pair(&self, b: &mut KernelBuilder, cs: &Coords, k0: &Expr, slot: &Expr, r: u32) {
        let (xm, wm, full, _) = self.ring.tma.expect("LOAD=tma");
        let (sa, sb, bm, bn, bk) = (self.tiles.sa, self.tiles.sb, self.c.bm, self.c.bn, self.c.bk);
        let (glu, n_out) = (self.glu, &self.io.n_out);
        let wc = |row: Expr| self.w_coords(cs, k0, row);
        if self.walk.pair_m {
            b.tma_load(xm, b.slot(sa, slot.clone()), vec![k0.clone(), cs.r0.clone()], full, slot.clone());
            let half = bn / 2;
            let row = if glu {
                if r == 0 { cs.n0.clone() } else { n_out.clone() + cs.n0.clone() }
            } else {
                cs.n0.clone() + (r * half) as i64
            };
            let dst = b.window(sb, slot.clone(), r * half, 0, half, bk);
            b.tma_load_multicast(wm, dst, wc(row), full, slot.clone(), 3i64);
        } else {
            let half = bm / 2;
            let dst = b.window(sa, slot.clone(), r * half, 0, half, bk);
            let coords = vec![k0.clone(), cs.r0.clone() + (r * half) as i64];
            b.tma_load_multicast(xm, dst, coords, full, slot.clone(), 3i64);
            if glu {
                let h = bn / 2;
                let g_dst = b.window(sb, slot.clone(), 0, 0, h, bk);
                let u_dst = b.window(sb, slot.clone(), h, 0, h, bk);
                b.tma_load(wm, g_dst, wc(cs.n0.clone()), full, slot.clone());
                b.tma_load(wm, u_dst, wc(n_out.clone() + cs.n0.clone()), full, slot.clone());
            } else {
                b.tma_load(wm, b.slot(sb, slot.clone()), wc(cs.n0.clone()), full, slot.clone());
            }
        }
    }

    /// The cp.async stage: x rows `r0..` and weight rows `n0..` (with a GLU the gate rows `n0..` and up rows
    /// `NH+n0..` in the top and bottom halves of one shared tile), masked at the group's, N's and K's ends.
    fn load_stage_cp_async(&self, b: &mut KernelBuilder, cs: &Coords, kt: Expr, slot: Expr) {
        let (spec, x, w, sa, sb) = (self.spec, self.io.x, self.io.w, self.tiles.sa, self.tiles.sb);
        let (bn, bk, n, kd, n_out) = (self.c.bn, self.c.bk, &self.io.n, &self.io.kd, &self.io.n_out);
        let k0 = kt * bk as i64;
        // `rows` rows of w from row `row0` at K offset k0.
        let w_rows = |row0: Expr, rows: Expr| {
            view(
                w,
                cs.w_base.clone() + row0 * kd.clone() + k0.clone(),
                kd.clone(),
                rows,
                kd.clone() - k0.clone(),
                spec.in_vec,
            )
        };
        let a_src = view(
            x,
            cs.r0.clone() * kd.clone() + k0.clone(),
            kd.clone(),
            cs.rows_valid.clone(),
            kd.clone() - k0.clone(),
            spec.in_vec,
        );
        let a_dst = b.slot(sa, slot.clone());
        b.copy_async(a_dst, a_src);
        if self.glu {
            let half = bn / 2;
            let g_src = w_rows(cs.n0.clone(), n_out.clone() - cs.n0.clone());
            let u_src = w_rows(n_out.clone() + cs.n0.clone(), n_out.clone() - cs.n0.clone());
            let g_dst = b.window(sb, slot.clone(), 0, 0, half, bk);
            let u_dst = b.window(sb, slot, half, 0, half, bk);
            b.copy_async(g_dst, g_src);
            b.copy_async(u_dst, u_src);
        } else {
            let b_dst = b.slot(sb, slot);
            b.copy_async(b_dst, w_rows(cs.n0.clone(), n.clone() - cs.n0.clone()));
        }
    }
}
