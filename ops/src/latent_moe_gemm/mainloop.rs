//! The K loop of one tile: the prologue (the stages loaded before the first product), the main loop on the
//! warpgroup MMA ring or the `mma.sync` pipeline, and the products of one shared weight tile
//! ([`weight_products`], shared with `mxfp4_matmul`'s dequantizing path).

use super::kernel::GemmKernel;
use super::walk::Coords;
use k3k_ir::*;

/// Issue `acc += a @ w^T` for one shared weight tile of `bn` rows x `bk` (tile `slot` of `sw`). With `acc_up`
/// (a GLU epilogue) the top `bn/2` rows are the gate and feed `acc`, the bottom `bn/2` the up projection and
/// feed `acc_up`. `accumulate: None` uses `mma.sync`; `Some(flag)` the warpgroup path (`flag` false: the product
/// overwrites the accumulators).
#[allow(clippy::too_many_arguments)]
pub fn weight_products(
    b: &mut KernelBuilder,
    acc: TileId,
    acc_up: Option<TileId>,
    a: Operand,
    sw: SharedId,
    slot: Expr,
    bn: u32,
    bk: u32,
    accumulate: Option<Expr>,
) {
    let issue = |b: &mut KernelBuilder, t: TileId, a: Operand, w: Operand| match &accumulate {
        None => b.mma(t, a, w),
        Some(flag) => b.mma_async_init(t, a, w, flag.clone()),
    };
    if let Some(u) = acc_up {
        let half = bn / 2;
        let bg = Operand::Shared { src: b.window(sw, slot.clone(), 0, 0, half, bk), transpose: true };
        let bu = Operand::Shared { src: b.window(sw, slot, half, 0, half, bk), transpose: true };
        issue(b, acc, a.clone(), bg);
        issue(b, u, a, bu);
    } else {
        let bt = Operand::Shared { src: b.slot(sw, slot), transpose: true };
        issue(b, acc, a, bt);
    }
}

impl GemmKernel<'_> {
    /// The stages before the first product; one commit group per stage whether or not it loads.
    pub fn prologue(&self, b: &mut KernelBuilder, cs: Option<&Coords>) {
        let k_tiles = &self.walk.k_tiles;
        for s in 0..self.ring.ahead {
            if let Some(cs) = cs {
                b.if_(Expr::Int(s as i64).lt(k_tiles.clone()), |b| self.load_stage(b, cs, Expr::Int(s as i64)));
            }
            if !self.c.tma {
                b.commit();
            }
        }
    }

    /// The K loop of one tile; ends with every product complete (but shared tiles possibly still being read by
    /// other warps: a barrier must precede any refill). `tail` runs after the last product is issued and before it
    /// is waited for (scalar work to overlap it).
    pub fn main_loop(&self, b: &mut KernelBuilder, cs: &Coords, tail: &dyn Fn(&mut KernelBuilder)) {
        if self.c.wgmma {
            self.main_loop_wgmma(b, cs, tail);
        } else {
            self.zero_accumulators(b);
            self.main_loop_sync(b, cs, tail);
        }
    }

    fn zero_accumulators(&self, b: &mut KernelBuilder) {
        b.map(self.tiles.acc, 0.0f64);
        if let Some(u) = self.tiles.acc_up {
            b.map(u, 0.0f64);
        }
    }

    /// Warpgroup MMA pipeline: a stage's shared tile is refilled two iterations after its product was issued (by
    /// then every warpgroup has waited for it), so STAGES-2 loads and one product are in flight.
    fn main_loop_wgmma(&self, b: &mut KernelBuilder, cs: &Coords, tail: &dyn Fn(&mut KernelBuilder)) {
        let (c, k_tiles) = (self.c, &self.walk.k_tiles);
        let groups = if self.tiles.acc_up.is_some() { 2 } else { 1 };
        b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
            self.wgmma_step(b, cs, &kt);
            b.mma_wait(groups);
            // The previous k-step's products are complete: release their slot to the producer.
            if let Some((_, _, _, empty)) = self.ring.tma {
                b.if_(kt.gt(0i64), |b| self.release(b, empty, self.slot_of(self.use_of(&kt) - 1i64)));
            }
            // AHEAD: the producer's next stage, into the slot released `STAGES - AHEAD` uses ago (at AHEAD =
            // STAGES-1 the one just released: thread 0 waits for the other warps' releases while this step's
            // products run).
            if let Some(p) = &self.prod {
                b.producer_if(c.producer_warp, |b| self.produce(b, p));
            }
        });
        tail(b);
        b.mma_wait(0);
        if let Some((_, _, _, empty)) = self.ring.tma {
            let last = self.use_of(&(k_tiles.clone() - 1i64));
            b.if_(k_tiles.gt(0i64), |b| self.release(b, empty, self.slot_of(last)));
        }
        // K = 0: no product ran, the result is zero.
        b.if_(k_tiles.le(0i64), |b| self.zero_accumulators(b));
    }

    /// One k-step of the warpgroup ring up to its products: the refill (in-loop schedule), the wait for the
    /// slot's data, the products.
    fn wgmma_step(&self, b: &mut KernelBuilder, cs: &Coords, kt: &Expr) {
        let (c, st, k_tiles) = (self.c, self.c.stages, &self.walk.k_tiles);
        let (acc, acc_up, sa, sb) = (self.tiles.acc, self.tiles.acc_up, self.tiles.sa, self.tiles.sb);
        if !c.tma {
            b.wait(st - 3);
            // Every warpgroup is done with the product that last read the slot refilled here.
            b.barrier();
        }
        // (LOAD=tma: the producer waits for the slot's empty barrier instead.)
        if self.prod.is_none() {
            let next = kt + (st - 2) as i64;
            b.if_(next.lt(k_tiles.clone()), |b| self.load_stage(b, cs, next.clone()));
        }
        let slot = self.slot_of(self.use_of(kt));
        if let Some((_, _, full, _)) = self.ring.tma {
            b.mbar_wait(full, slot.clone(), self.phase_of(self.use_of(kt)));
        } else {
            b.commit();
        }
        let a = Operand::Shared { src: b.slot(sa, slot.clone()), transpose: false };
        // The first product of a tile overwrites the accumulators (no zeroing instructions).
        let accumulate = kt.gt(0i64);
        if c.cluster2 {
            // An idle sibling (past its group's end) runs no products.
            b.if_(cs.valid.clone(), |b| weight_products(b, acc, acc_up, a, sb, slot, c.bn, c.bk, Some(accumulate)));
        } else {
            weight_products(b, acc, acc_up, a, sb, slot, c.bn, c.bk, Some(accumulate));
        }
    }

    /// The mma.sync pipeline: STAGES-1 stages in flight, a block barrier before each refill.
    fn main_loop_sync(&self, b: &mut KernelBuilder, cs: &Coords, tail: &dyn Fn(&mut KernelBuilder)) {
        let (c, st, k_tiles) = (self.c, self.c.stages, &self.walk.k_tiles);
        let (acc, acc_up, sa, sb) = (self.tiles.acc, self.tiles.acc_up, self.tiles.sa, self.tiles.sb);
        b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
            b.wait(st - 2);
            b.barrier();
            let next = &kt + (st - 1) as i64;
            b.if_(next.lt(k_tiles.clone()), |b| self.load_stage(b, cs, next.clone()));
            b.commit();
            let slot = &kt % st as i64;
            let a = Operand::Shared { src: b.slot(sa, slot.clone()), transpose: false };
            weight_products(b, acc, acc_up, a, sb, slot, c.bn, c.bk, None);
        });
        tail(b);
    }
}
