//! The paged KV ring of the decode kernels: its TMA descriptors, stage loads, prologue, steps, tail zeroing and
//! release.

use super::*;

/// The KV stage ring both decode kernels run: the cache rows of the split's tiles `t0 + j` (through the block
/// table), `STAGES` slots of `D / KC` chunks in `skv`, copied `STAGES - 1` tiles ahead of the tile in use.
pub(super) struct KvRing {
    pub(super) kv: TensorId,
    pub(super) bt: TensorId,
    pub(super) skv: SharedId,
    pub(super) bi: Expr,
    pub(super) maxb: Expr,
    pub(super) t0: Expr,
    pub(super) s_k: Expr,
    pub(super) count: Expr,
    pub(super) d: u32,
    pub(super) bn: u32,
    pub(super) page: u32,
    pub(super) st: u32,
    /// How many tiles ahead of the one in use the ring loads: `STAGES - 1`, or `STAGES - 2` when a stage stays
    /// in use one iteration longer (OVERLAP: tile j-1's values are read while tile j's scores are computed).
    pub(super) ahead: u32,
    /// BT_PREFETCH: the block-table entry of the tile the next iteration loads (set by [`KvRing::prologue`]).
    pub(super) blk_next: Option<VarId>,
    /// `LOAD=tma`: the stages arrive by bulk tensor copies on mbarriers instead of cp.async.
    pub(super) tma: Option<KvTma>,
}

/// The decode's `LOAD=tma` ring: a map over the cache `[NBLK, page, d]` with boxes of one 64-column chunk of `bn`
/// rows of one page, and per slot a full barrier (the elected thread's expected bytes) and an empty one (every
/// thread's release once its products have read the slot).
pub(super) struct KvTma {
    pub(super) map: TmapId,
    pub(super) full: MbarId,
    pub(super) empty: MbarId,
    pub(super) ring: StageRing,
    /// Threads that release a slot.
    pub(super) threads: u32,
}

impl KvTma {
    pub(super) fn new(b: &mut KernelBuilder, kv: TensorId, bn: u32, st: u32, threads: u32) -> Self {
        KvTma {
            map: b.tensor_map("kv_map", kv, &[KC, bn, 1], Swizzle::Xor16B),
            full: b.mbarriers("kv_full", st),
            empty: b.mbarriers("kv_empty", st),
            ring: StageRing::new(st, true),
            threads,
        }
    }
}

impl KvRing {
    /// The ring of a decode block's KV tiles (the split `blk` of request `blk.bi`'s cache in `io.kv`, through the
    /// block table `io.bt`) in the stages `skv`: `STAGES - 1` tiles loaded ahead of the one in use, `STAGES - 2`
    /// with OVERLAP; by bulk tensor copies with `LOAD=tma`.
    pub(super) fn new(
        b: &mut KernelBuilder,
        spec: &DecodeSpec,
        c: &DecodeCfg,
        io: &DecodeIo,
        blk: &DecodeBlock,
        skv: SharedId,
    ) -> Self {
        KvRing {
            kv: io.kv,
            bt: io.bt,
            skv,
            bi: blk.bi.clone(),
            maxb: io.maxb.clone(),
            t0: blk.t0.clone(),
            s_k: blk.s_k.clone(),
            count: blk.count.clone(),
            d: spec.d,
            bn: c.bn,
            page: spec.page,
            st: c.stages,
            ahead: if c.overlap { c.stages - 2 } else { c.stages - 1 },
            blk_next: None,
            tma: c.tma.then(|| KvTma::new(b, io.kv, c.bn, c.stages, c.threads())),
        }
    }

    /// The cache page of the split's KV tile `j`.
    pub(super) fn blk_of(&self, j: Expr) -> Expr {
        load(self.bt, self.bi.clone() * self.maxb.clone() + (self.t0.clone() + j) * self.bn as i64 / self.page as i64)
    }

    /// Copy tile `j` (on cache page `blk`) into its slot.
    pub(super) fn load_stage(&self, b: &mut KernelBuilder, j: Expr, blk: Expr) {
        let (bn, page, st, d, nch) = (self.bn, self.page, self.st, self.d, self.d / KC);
        let slot = j.clone() % st as i64;
        let kv0 = (self.t0.clone() + j.clone()) * bn as i64;
        if let Some(t) = &self.tma {
            // The elected thread waits until every thread has released the slot's previous use (a fresh barrier
            // passes at once), announces the tile's bytes (whole boxes: the page holds every row) and issues the
            // copies.
            b.mbar_wait_elected(t.empty, slot.clone(), t.ring.empty_parity(j.clone()));
            b.mbar_arrive_expect_tx(t.full, slot.clone(), 2 * bn * d);
            let row = b.let_("page_row", kv0 % page as i64);
            let blk = b.let_("page", blk);
            for c in 0..nch {
                let dst = b.slot(self.skv, slot.clone() * nch as i64 + c as i64);
                let coords = vec![Expr::from((c * KC) as i64), row.clone(), blk.clone()];
                b.tma_load(t.map, dst, coords, t.full, slot.clone());
            }
            return;
        }
        let row0 = b.let_("cache_row", blk * page as i64 + kv0.clone() % page as i64);
        let rows = b.let_("keys", self.s_k.clone() - kv0);
        for c in 0..nch {
            let src = view(self.kv, row0.clone() * d as i64 + (c * KC) as i64, d as i64, rows.clone(), KC as i64, 8);
            let dst = b.slot(self.skv, slot.clone() * nch as i64 + c as i64);
            b.copy_async(dst, src);
        }
    }

    /// Before the loop: the block's Q rows into `sq` (one chunk per slot), the first `ahead` tiles (one commit
    /// group each) and, with `bt_prefetch`, the block-table entry of the tile the first iteration loads (so that
    /// the copies do not wait for a dependent global load).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prologue(
        &mut self,
        b: &mut KernelBuilder,
        q: TensorId,
        sq: SharedId,
        rows_total: &Expr,
        m0: &Expr,
        rows_valid: &Expr,
        bt_prefetch: bool,
    ) {
        let (d, ahead) = (self.d, self.ahead);
        if let Some(t) = &self.tma {
            b.mbar_init(t.full, 1);
            b.mbar_init(t.empty, t.threads);
        }
        for c in 0..d / KC {
            let qsrc = view(
                q,
                (self.bi.clone() * rows_total.clone() + m0.clone()) * d as i64 + (c * KC) as i64,
                d as i64,
                rows_valid.clone(),
                KC as i64,
                8,
            );
            let qd = b.slot(sq, c as i64);
            b.copy_async(qd, qsrc);
        }
        for i in 0..ahead {
            let j = Expr::Int(i as i64);
            b.if_(j.lt(self.count.clone()), |b| self.load_stage(b, j.clone(), self.blk_of(j.clone())));
            if self.tma.is_none() {
                b.commit();
            }
        }
        if self.tma.is_some() {
            // The Q tile (cp.async: rows past the block's are zeros) landed, fenced for the async proxy.
            b.commit();
            b.wait(0);
            b.barrier();
        }
        let blk_next = bt_prefetch.then(|| {
            let v = b.let_var("blk_next", 0i64);
            let j = Expr::Int(ahead as i64);
            b.if_(j.lt(self.count.clone()), |b| b.assign(v, self.blk_of(j.clone())));
            v
        });
        self.blk_next = blk_next;
    }

    /// The top of loop iteration `j`: tile j's copies landed and every warp finished reading the slot the next
    /// load overwrites; then tile `j + ahead` is issued (one commit group) and the prefetched entry advanced.
    /// `LOAD=tma`: tile `j + ahead` is issued first (the elected thread waits for its slot's release, see
    /// [`KvRing::release`]), then every thread waits for tile j's bytes; no block barrier.
    pub(super) fn step(&self, b: &mut KernelBuilder, j: &Expr) {
        let ahead = self.ahead;
        if self.tma.is_none() {
            b.wait(ahead - 1);
            b.barrier();
        }
        let next = j + ahead as i64;
        let blk = self.blk_next.map_or_else(|| self.blk_of(next.clone()), Expr::Var);
        b.if_(next.lt(self.count.clone()), |b| self.load_stage(b, next.clone(), blk));
        if self.tma.is_none() {
            b.commit();
        }
        if let Some(v) = self.blk_next {
            let after = &next + 1i64;
            b.if_(after.lt(self.count.clone()), |b| b.assign(v, self.blk_of(after.clone())));
        }
        if let Some(t) = &self.tma {
            let slot = j % self.st as i64;
            b.mbar_wait(t.full, slot.clone(), t.ring.phase(j.clone()));
            self.zero_tail(b, j, &slot, t.threads);
        }
    }

    /// `LOAD=tma`: the copy engine moves whole pages, so the rows of a request's last tile past its cache length
    /// hold whatever the page holds (unused rows may be NaN); their scores are masked, but `0 * NaN` would reach
    /// `P V`. Zero those rows (the cp.async path's zero fill), fenced for the async proxy.
    pub(super) fn zero_tail(&self, b: &mut KernelBuilder, j: &Expr, slot: &Expr, threads: u32) {
        let (bn, d, nch) = (self.bn, self.d, self.d / KC);
        let keys = b.let_("tile_keys", self.s_k.clone() - (self.t0.clone() + j.clone()) * bn as i64);
        b.if_(keys.lt(bn as i64), |b| {
            b.threads(|b| {
                let n = (Expr::from(bn as i64) - keys.clone()) * d as i64;
                b.for_("z", Expr::thread_idx(), n, threads as i64, |b, z| {
                    let col = &z % d as i64;
                    let chunk = slot.clone() * nch as i64 + &col / KC as i64;
                    b.shared_store(self.skv, chunk, keys.clone() + &z / d as i64, col % KC as i64, 0.0f64);
                });
            });
            b.wait(0);
            b.barrier();
        });
    }

    /// `LOAD=tma`: every thread releases tile `j`'s slot (its products that read it have completed), so that the
    /// producer may refill it; nothing with cp.async (the next iteration's barrier orders the refill).
    pub(super) fn release(&self, b: &mut KernelBuilder, j: &Expr) {
        if let Some(t) = &self.tma {
            b.mbar_arrive(t.empty, j % self.st as i64);
        }
    }
}
