//! The persistent tile walk: which (group, m-tile, n-tile) a block computes next ([`GemmKernel::search`],
//! [`GemmKernel::coords`]) and the three schedules of the walk, which call the phases (prologue, main loop,
//! epilogue) in their order:
//! - [`GemmKernel::walk_stream`] (AHEAD): the producer stream loads across tile boundaries, no prologue per tile;
//! - [`GemmKernel::walk_overlapped`] (OVERLAP=on): the next tile's search and first stages overlap the current
//!   tile's last product and epilogue;
//! - [`GemmKernel::walk_plain`]: each tile searches, fills its pipeline, computes and stores in turn.

use super::kernel::GemmKernel;
use k3k_ir::*;

/// A tile's coordinates from its group and local index.
pub(super) struct Coords {
    /// First row of x (and y) of the tile.
    pub r0: Expr,
    /// Rows of the tile inside its group (may exceed BM).
    pub rows_valid: Expr,
    /// First output column.
    pub n0: Expr,
    /// Offset of the group's weight matrix.
    pub w_base: Expr,
    /// The group (the outer coordinate of the weights' tensor map).
    pub grp: Expr,
    /// CLUSTER=2: the tile lies inside its group and the output (a sibling past the end only copies its
    /// share of the operand and takes part in the barriers).
    pub valid: Expr,
}

/// The first row of group `g` (grouped: `offs[g - 1]`, 0 for the first group).
pub(super) fn group_start_of(offs: Option<TensorId>, g: &Expr) -> Expr {
    match offs {
        Some(o) => Expr::select(g.gt(0i64), Expr::Load { tensor: o, index: Box::new(g - 1i64) }, Expr::Int(0)),
        None => Expr::Int(0),
    }
}

/// The end of group `g`'s rows (grouped: `offs[g]`; dense: `M`).
pub(super) fn group_end_of(offs: Option<TensorId>, m: &Expr, g: &Expr) -> Expr {
    match offs {
        Some(o) => Expr::Load { tensor: o, index: Box::new(g.clone()) },
        None => m.clone(),
    }
}

/// The walk's units of a group of `rows` rows (CLUSTER=2 along M: pairs of m-tiles) times the units per row of
/// tiles.
pub(super) fn units_of(rows: Expr, bm: u32, pair_m: bool, unit_n: &Expr) -> Expr {
    let mt = rows.ceil_div(bm as i64);
    (if pair_m { mt.ceil_div(2i64) } else { mt }) * unit_n.clone()
}

impl GemmKernel<'_> {
    fn group_start(&self, g: &Expr) -> Expr {
        group_start_of(self.io.offs, g)
    }

    fn group_end(&self, g: &Expr) -> Expr {
        group_end_of(self.io.offs, &self.io.m, g)
    }

    fn units(&self, rows: Expr) -> Expr {
        units_of(rows, self.c.bm, self.walk.pair_m, &self.walk.unit_n)
    }

    /// Find tile `t`'s group and its index inside the group: `grp`, `local`. With `from = (g0, seen0)` the walk
    /// starts at group `g0`, before which `seen0` tiles lie (a block's tiles only move forward), and updates both.
    pub fn search(&self, b: &mut KernelBuilder, t: Expr, grp: VarId, local: VarId, from: Option<(VarId, VarId)>) {
        let (start, seen_init) = match from {
            Some((g0, st0)) => (Expr::Var(g0), Expr::Var(st0)),
            None => (Expr::Int(0), Expr::Int(0)),
        };
        let seen = b.let_var("seen", seen_init);
        let found = from.map(|_| b.let_var("found_seen", 0i64));
        // Once the tile's group is behind (`seen > t`), the remaining groups cost a compare each: no `offs`
        // loads, no tile counts (the walk is a forward scan that finds its group within a group or two, but
        // the IR's loops run to their end; ncu, 2026-12-04: the unguarded scan ran ~830 instructions per warp
        // per tile at G28, with its dependent loads longer than the product it overlaps).
        b.for_("g", start, self.io.g_count.clone(), 1i64, |b, g| {
            b.if_(t.ge(Expr::Var(seen)), |b| {
                let rows = self.group_end(&g) - self.group_start(&g);
                let tg = b.let_("tg", self.units(rows));
                b.if_(t.lt(Expr::Var(seen) + tg.clone()), |b| {
                    b.assign(grp, g.clone());
                    b.assign(local, &t - Expr::Var(seen));
                    if let Some(f) = found {
                        b.assign(f, Expr::Var(seen));
                    }
                });
                b.assign(seen, Expr::Var(seen) + tg);
            });
        });
        if let (Some((g0, st0)), Some(f)) = (from, found) {
            b.assign(g0, Expr::Var(grp));
            b.assign(st0, Expr::Var(f));
        }
    }

    /// A tile's coordinates from its group and local index.
    pub fn coords(&self, b: &mut KernelBuilder, grp: Expr, local: Expr) -> Coords {
        let (c, bm, acc_n) = (self.c, self.c.bm, self.acc_n);
        let (pair_m, pair_n, unit_n, rank) = (self.walk.pair_m, self.walk.pair_n, &self.walk.unit_n, &self.walk.rank);
        let (n, kd, n_out) = (&self.io.n, &self.io.kd, &self.io.n_out);
        let row0 = b.let_("row0", self.group_start(&grp));
        let rows_g = b.let_("rows_g", self.group_end(&grp) - row0.clone());
        let m_tiles = rows_g.ceil_div(bm as i64);
        let unit_m = if pair_m { m_tiles.ceil_div(2i64) } else { m_tiles };
        let (mt, nt) = if c.raster_m {
            (local.clone() % unit_m.clone(), local / unit_m)
        } else {
            (local.clone() / unit_n.clone(), local % unit_n.clone())
        };
        let (mt, nt) = if pair_m {
            (mt * 2i64 + rank.clone(), nt)
        } else if pair_n {
            (mt, nt * 2i64 + rank.clone())
        } else {
            (mt, nt)
        };
        let m0 = b.let_("m0", mt * bm as i64);
        let n0 = b.let_("n0", nt * acc_n as i64);
        let rows_valid = b.let_("rows_valid", rows_g - m0.clone());
        let w_base = b.let_("w_base", grp.clone() * n.clone() * kd.clone());
        let r0 = b.let_("r0", row0 + m0);
        let valid = if pair_m {
            rows_valid.gt(0i64)
        } else if pair_n {
            n0.lt(n_out.clone())
        } else {
            Expr::Bool(true)
        };
        Coords { r0, rows_valid, n0, w_base, grp, valid }
    }

    /// `tile < total`.
    fn before_end(&self, tile: &Expr) -> Expr {
        tile.lt(Expr::Var(self.walk.total))
    }

    /// AHEAD: the producer stream runs `AHEAD` stages ahead of the consumers over the whole walk (the loads of a
    /// tile's first stages are issued during the previous tile's last k-steps), so the walk has no prologue per
    /// tile and no block barrier; the consumers find their tiles with a forward search (OVERLAP=on: the next
    /// tile's, while the current tile's last product is in flight). (PRODUCER=warp: the stream's first stages
    /// and every later one come from the producer warp.)
    pub fn walk_stream(&self, b: &mut KernelBuilder) {
        let c = self.c;
        let p = self.prod.as_ref().expect("the producer stream has a producer cursor");
        b.producer_if(c.producer_warp, |b| {
            b.if_(self.before_end(&Expr::Var(p.tile)), |b| self.locate(b, p));
            b.for_("s", 0i64, c.ahead.unwrap_or(1) as i64, 1i64, |b, _| self.produce(b, p));
        });
        let from = (b.let_var("walk_g", 0i64), b.let_var("walk_seen", 0i64));
        let (first, step, total) = (self.walk.first.clone(), self.walk.step.clone(), self.walk.total);
        if c.overlap {
            let cur_grp = b.let_var("cur_grp", 0i64);
            let cur_local = b.let_var("cur_local", 0i64);
            b.if_(self.before_end(&first), |b| self.search(b, first.clone(), cur_grp, cur_local, Some(from)));
            self.overlapped_tiles(b, from, (cur_grp, cur_local), |_, _, _, _| {});
        } else {
            b.for_("tile", first, total, step, |b, t| {
                let grp = b.let_var("grp", 0i64);
                let local = b.let_var("local", 0i64);
                self.search(b, t, grp, local, Some(from));
                let cs = self.coords(b, Expr::Var(grp), Expr::Var(local));
                self.main_loop(b, &cs, &|_: &mut KernelBuilder| {});
                self.advance(b);
                self.epilogue(b, &cs);
            });
        }
    }

    /// OVERLAP=on without the producer stream: a software-pipelined tile walk. The next tile's group search runs
    /// while the current tile's last product is in flight (and starts where the previous search ended), and its
    /// first stages are issued before the current tile's epilogue, so the refill latency is hidden behind the
    /// epilogue.
    pub fn walk_overlapped(&self, b: &mut KernelBuilder) {
        let from = (b.let_var("walk_g", 0i64), b.let_var("walk_seen", 0i64));
        let cur_grp = b.let_var("cur_grp", 0i64);
        let cur_local = b.let_var("cur_local", 0i64);
        let (first, total) = (self.walk.first.clone(), self.walk.total);
        b.if_(self.before_end(&first), |b| {
            self.search(b, first.clone(), cur_grp, cur_local, Some(from));
            let cs = self.coords(b, Expr::Var(cur_grp), Expr::Var(cur_local));
            self.prologue(b, Some(&cs));
        });
        b.if_(first.ge(Expr::Var(total)), |b| self.prologue(b, None));
        self.overlapped_tiles(b, from, (cur_grp, cur_local), |b, next, nxt_grp, nxt_local| {
            // Every warp is done reading the shared tiles before the next tile's first stages overwrite them.
            b.barrier();
            // One commit group per stage on both branches (the conditions are block-uniform).
            b.if_(self.before_end(next), |b| {
                let ns = self.coords(b, Expr::Var(nxt_grp), Expr::Var(nxt_local));
                self.prologue(b, Some(&ns));
            });
            b.if_(next.ge(Expr::Var(total)), |b| self.prologue(b, None));
        });
        if !self.c.tma {
            b.wait(0);
        }
    }

    /// The tile loop of both overlapped walks (the producer stream with OVERLAP=on, and [`Self::walk_overlapped`]):
    /// a tile's group and local index `cur` were found by the previous iteration (or before the loop); the next
    /// tile's search runs while the tile's last product is still in flight, into `nxt_grp` / `nxt_local`. `refill`
    /// runs after the main loop, before the epilogue, with the next tile's start and those two variables.
    fn overlapped_tiles(
        &self,
        b: &mut KernelBuilder,
        from: (VarId, VarId),
        (cur_grp, cur_local): (VarId, VarId),
        refill: impl Fn(&mut KernelBuilder, &Expr, VarId, VarId),
    ) {
        let (first, step, total) = (self.walk.first.clone(), self.walk.step.clone(), self.walk.total);
        b.for_("tile", first, total, step.clone(), |b, t| {
            let cs = self.coords(b, Expr::Var(cur_grp), Expr::Var(cur_local));
            let next = &t + step.clone();
            let nxt_grp = b.let_var("nxt_grp", 0i64);
            let nxt_local = b.let_var("nxt_local", 0i64);
            self.main_loop(b, &cs, &|b: &mut KernelBuilder| {
                b.if_(self.before_end(&next), |b| self.search(b, next.clone(), nxt_grp, nxt_local, Some(from)))
            });
            self.advance(b);
            refill(b, &next, nxt_grp, nxt_local);
            self.epilogue(b, &cs);
            b.assign(cur_grp, Expr::Var(nxt_grp));
            b.assign(cur_local, Expr::Var(nxt_local));
        });
    }

    /// The plain walk: each tile searches its group from group 0, fills its pipeline, computes and stores.
    pub fn walk_plain(&self, b: &mut KernelBuilder) {
        let (first, step, total) = (self.walk.first.clone(), self.walk.step.clone(), self.walk.total);
        b.for_("tile", first, total, step, |b, t| {
            let grp = b.let_var("grp", 0i64);
            let local = b.let_var("local", 0i64);
            self.search(b, t, grp, local, None);
            let cs = self.coords(b, Expr::Var(grp), Expr::Var(local));
            self.prologue(b, Some(&cs));
            self.main_loop(b, &cs, &|_: &mut KernelBuilder| {});
            if self.c.tma {
                self.advance(b);
            } else {
                b.wait(0);
            }
            self.epilogue(b, &cs);
            // Every warp must be done reading shared tiles before the next tile's prologue overwrites them.
            b.barrier();
        });
    }
}
