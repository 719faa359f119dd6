//! The kernels of `mxfp4_matmul`: the main kernel of every path ([`build_main`], with the state one tile reads),
//! one tile and its stage loads (`tile`), the mma.sync and wgmma K loops and epilogues (`tile_sync`,
//! `tile_wgmma`), the weight decoders (`decode`) and the split-K finalize (`finalize`).

use super::*;

mod decode;
mod finalize;
mod tile;
mod tile_f8;
mod tile_sync;
mod tile_wgmma;

pub use decode::*;
pub use finalize::*;

/// Build the main kernel. Tensor arguments: `x: [M, K] bf16`; `wq: [G, N, KW] u32` (dense: `[N, KW]`; the
/// natural layout's bytes read as little-endian words, or the packed layout); `ws: [G, N, KB] u8`; grouped: `offs: [G] i32`; fused epilogue:
/// `p: [M] f32` (with `row_scale`) and `y: [M, NO] bf16` (NO = N, or N/2 = `NH` with a GLU epilogue);
/// `SPLIT > 1`: `part: [S, M, N] f32` instead (with FIN=last, and for stream-K with S = 2, then `sem: [T] i32`,
/// `p` and `y`). The launcher guarantees K = 8 KW = 32 KB and N = 2 NH.
pub fn build_main(spec: &MatSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let glu = spec.epilogue.is_glu();
    let partial = c.partial();
    let threads = 32 * c.wa * c.wb;
    let mut b = KernelBuilder::new(&kernel_name("mxfp4_mm", spec, c, partial), threads);
    b.knobs(c.knobs());
    b.min_blocks_per_sm(c.min_blocks);
    let m = b.dim("M");
    let n = b.dim("N");
    let kb = b.dim("KB");
    // K: bound by x's shape, or (MXFP8 activations, no [M, K] tensor) K = 32 KB.
    let kd = if spec.act8 { kb.clone() * 32i64 } else { b.dim("K") };
    // Weight elements are always moved and read as 32-bit words (eight nibbles): one shared load serves
    // several values of a thread.
    let kq = b.dim("KW");
    let qdt = DType::U32;
    // Activations: bf16 `x: [M, K]`, or MXFP8 `xq: [M, K/4]` (E4M3 bytes read as u32 words) and `xs: [M, KB]`.
    let (x, xs) = if spec.act8 {
        let kx = b.dim("KX");
        let xq = b.tensor("xq", DType::U32, &[m.clone(), kx], Access::Read);
        (xq, Some(b.tensor("xs", DType::U8, &[m.clone(), kb.clone()], Access::Read)))
    } else {
        (b.tensor("x", DType::Bf16, &[m.clone(), kd.clone()], Access::Read), None)
    };
    let (g_count, wq, ws, offs) = if spec.grouped {
        let g = b.dim("G");
        let wq = b.tensor("wq", qdt, &[g.clone(), n.clone(), kq.clone()], Access::Read);
        let ws = b.tensor("ws", DType::U8, &[g.clone(), n.clone(), kb.clone()], Access::Read);
        let offs = b.tensor("offs", DType::I32, std::slice::from_ref(&g), Access::Read);
        (g, wq, ws, Some(offs))
    } else {
        let wq = b.tensor("wq", qdt, &[n.clone(), kq.clone()], Access::Read);
        let ws = b.tensor("ws", DType::U8, &[n.clone(), kb.clone()], Access::Read);
        (Expr::Int(1), wq, ws, None)
    };
    // Output width: N, or N/2 with a GLU epilogue (bound by y's shape; the partial output binds only N).
    let fused = partial && c.fused;
    let n_out = match (glu, partial && !fused) {
        (false, _) => n.clone(),
        (true, false) => b.dim("NH"),
        (true, true) => n.clone() / 2i64,
    };
    // FIN=last: the partials, the tiles' arrival counters `sem: [T] i32` (zero before the launch, and left
    // zero: the last CTA of a tile resets its counter), then `p` and `y` as without a split.
    let (p, out, fin) = main_outputs(&mut b, spec, (partial, fused), (&m, &n, &n_out));
    let num_sms = b.int_arg(NUM_SMS);

    let (bn, bm, bk, st) = (c.bn, c.bm, c.bk, c.stages);
    let bno = if glu { bn / 2 } else { bn };
    let words_per_row = bk / 8;
    // PATH=stream: no shared weight stages (the words go global -> registers).
    let sqs = (!c.stream && !c.gemv).then(|| {
        (
            b.shared("sq", qdt, bn, words_per_row, st, Swizzle::Xor16B),
            b.shared("ss", DType::U8, bn, bk / 32, st, Swizzle::None),
        )
    });
    // The bf16 x tile: STAGES slots filled by cp.async, or (MXFP8) one slot per product in flight filled by the
    // on-chip conversion of the E4M3 words and scales staged in `sxq` / `sxs`.
    // (PATH=gemv reads the activations from global memory.)
    // (MMA=f8sync stages its activations as E4M3 words once per tile: `tile_f8.rs`.)
    let sx = (!c.gemv && !c.f8).then(|| {
        b.shared("sx", DType::Bf16, bm, bk, if spec.act8 { if c.wgmma { 2 } else { 1 } } else { st }, Swizzle::Xor16B)
    });
    let sx8 = (spec.act8 && !c.f8).then(|| {
        (
            b.shared("sxq", DType::U32, bm, bk / 4, st, Swizzle::Xor16B),
            b.shared("sxs", DType::U8, bm, bk / 32, st, Swizzle::None),
        )
    });
    let (sync, wg) = main_tiles(&mut b, spec, c, (partial, fused, bno));
    let f8 = c.f8.then(|| tile_f8::F8Bufs::declare(&mut b, c));

    let group_start = |g: &Expr| -> Expr {
        match offs {
            Some(o) => Expr::select(g.gt(0i64), Expr::load(o, g - 1i64), Expr::Int(0)),
            None => Expr::Int(0),
        }
    };
    let group_end = |g: &Expr| -> Expr {
        match offs {
            Some(o) => Expr::load(o, g.clone()),
            None => m.clone(),
        }
    };
    let n_tiles = n_out.ceil_div(bno as i64);
    let split = c.split as i64;
    // TS: the groups whose tiles are split in two along K (the last min(TS, G)).
    let ts_groups = (c.ts > 0).then(|| g_count.min(c.ts as i64));
    main_grid(&mut b, spec, c, fused, ts_groups.as_ref(), (&m, &g_count, &n_tiles, num_sms));
    // K range of one split: a multiple of BK.
    let kchunk = b.let_("kchunk", kd.ceil_div(split * bk as i64) * bk as i64);
    // One tile: group `gsel` (its rows from `row0`, `rows_g` of them), K split `ks`, token tile `mt`, weight tile
    // `nt`; `t` the tile's index in the flat order (the split-K arrival counters are per `t / SPLIT`).
    let mk = MainKernel {
        spec,
        c,
        glu,
        partial,
        threads,
        bno,
        words_per_row,
        m: m.clone(),
        n,
        kb,
        kd,
        kq,
        x,
        xs,
        wq,
        ws,
        out,
        p,
        fin,
        n_out,
        sqs,
        sx,
        sx8,
        sync,
        wg,
        f8,
        kchunk,
    };
    if let Some(gs) = ts_groups {
        // TS (PATH=gemv, grouped, CPS=0): grid rows y below `whole` = G - gs are group y's whole tiles, as below;
        // the last 2 gs rows are the last gs groups' tiles in halves along K (row whole + 2i + h: group whole + i,
        // K half h, a whole number of BK), so the CTAs launched last each stream half a tile. A tile's halves are
        // partial slots 0 and 1, summed by the second to arrive (FIN=last's counters, one per split tile:
        // `((g - whole) x ceil(M / BM) + mt) x n_tiles + nt`).
        mk.walk_split_groups(&mut b, gs, (&g_count, &n_tiles), (&group_start, &group_end));
        return Ok(b.finish()?);
    }
    if c.gemv && c.cps == 0 && !fused {
        mk.walk_gemv_groups(&mut b, split, (&group_start, &group_end));
        return Ok(b.finish()?);
    }
    let total = b.let_var("total", 0i64);
    b.for_("g", 0i64, g_count.clone(), 1i64, |b, g| {
        let rows = group_end(&g) - group_start(&g);
        b.assign(total, Expr::Var(total) + rows.ceil_div(bm as i64) * n_tiles.clone() * split);
    });
    // Tile `t` of the flat order (groups in order; in each, its token tiles x weight tiles x K splits): its group,
    // found by a walk over all groups (two loads of `offs` each), the group's rows, K split, token and weight tile.
    // With `carried` (stream-K, whose CTAs take consecutive tiles): the group, the tiles before it and its tiles
    // kept from the CTA's previous tile, and the walk run only when `t` is past that group.
    // Without `carried` the IR is exactly that of before stream-K (vars `grp`, `local`, `seen`): tuning records are
    // keyed by the hash of the default kernels' IR, and PATH=tile's FIN=last default (M64) walks this way.
    let locate = |b: &mut KernelBuilder, t: &Expr, carried: Option<(VarId, VarId, VarId)>| {
        // The walk over all groups; `hit(b, g, seen, tg)` runs in the group that holds `t`.
        let walk = |b: &mut KernelBuilder, seen: VarId, hit: &dyn Fn(&mut KernelBuilder, &Expr, VarId, &Expr)| {
            b.for_("g", 0i64, g_count.clone(), 1i64, |b, g| {
                let rows = group_end(&g) - group_start(&g);
                let tg = b.let_("tg", rows.ceil_div(bm as i64) * n_tiles.clone() * split);
                b.if_(t.ge(Expr::Var(seen)).and(t.lt(Expr::Var(seen) + tg.clone())), |b| hit(b, &g, seen, &tg));
                b.assign(seen, Expr::Var(seen) + tg);
            });
        };
        let (grp, local) = match carried {
            None => {
                let grp = b.let_var("grp", 0i64);
                let local = b.let_var("local", 0i64);
                let seen = b.let_var("seen", 0i64);
                walk(b, seen, &|b, g, seen, _| {
                    b.assign(grp, g.clone());
                    b.assign(local, t - Expr::Var(seen));
                });
                (grp, local)
            }
            Some((grp, before, in_grp)) => {
                b.if_(t.ge(Expr::Var(before) + Expr::Var(in_grp)), |b| {
                    let seen = b.let_var("seen", 0i64);
                    walk(b, seen, &|b, g, seen, tg| {
                        b.assign(grp, g.clone());
                        b.assign(before, Expr::Var(seen));
                        b.assign(in_grp, tg.clone());
                    });
                });
                (grp, b.let_var("local", t - Expr::Var(before)))
            }
        };
        let gsel = Expr::Var(grp);
        let row0 = b.let_("row0", group_start(&gsel));
        let rows_g = b.let_("rows_g", group_end(&gsel) - row0.clone());
        let m_tiles = rows_g.ceil_div(bm as i64);
        let ks = b.let_("ks", Expr::Var(local) % split);
        let rest = b.let_("rest", Expr::Var(local) / split);
        let (mt, nt) = if c.raster_m {
            (&rest % m_tiles.clone(), &rest / m_tiles)
        } else {
            (&rest / n_tiles.clone(), &rest % n_tiles.clone())
        };
        (gsel, row0, rows_g, ks, mt, nt)
    };
    mk.walk_persistent(&mut b, total, &locate);
    Ok(b.finish()?)
}

/// The mma.sync path's shared accumulator transpose, accumulator, decoded weights, output tile, row scales,
/// FIN=last sums and arrival flag, and PATH=gemv's partials (see [`build_main`]).
type SyncTiles = (
    SharedId,
    Option<TileId>,
    Option<TileId>,
    TileId,
    Option<VecId>,
    Option<(TileId, Option<TileId>, SharedId)>,
    Option<SharedId>,
);

/// The wgmma path's decoded weight tiles, accumulators (gate and up), row scales and DEC=bits register tile.
type WgmmaTiles = (SharedId, TileId, Option<TileId>, Option<VecId>, Option<TileId>);

/// A stream-K segment of a tile ([`build_main`] with `SK=1`): its K range and whether it is the whole tile.
struct SkSeg {
    kbeg: Expr,
    kend: Expr,
    full: Expr,
}

/// The coordinates and K range of one tile of the main kernel ([`MainKernel::tile`]).
struct TileCtx {
    /// The tile's index in the flat order.
    t: Expr,
    row0: Expr,
    ks: Expr,
    m0: Expr,
    n0: Expr,
    rows_valid: Expr,
    kbeg: Expr,
    kend: Expr,
    k_tiles: Expr,
    wrow: Expr,
    /// Stream-K: whether this segment is the whole tile (the plain epilogue) or a partial (slot `ks`).
    full: Option<Expr>,
}

/// What one tile of the main kernel reads ([`build_main`]): the problem, the knobs, the tensors, the shared
/// stages and the accumulators of its path.
struct MainKernel<'a> {
    spec: &'a MatSpec,
    c: &'a Cfg,
    glu: bool,
    /// SPLIT > 1: partial outputs.
    partial: bool,
    threads: u32,
    /// Output columns of a tile (BN, or BN/2 with a GLU).
    bno: u32,
    words_per_row: u32,
    m: Expr,
    n: Expr,
    kb: Expr,
    kd: Expr,
    kq: Expr,
    x: TensorId,
    xs: Option<TensorId>,
    wq: TensorId,
    ws: TensorId,
    out: TensorId,
    p: Option<TensorId>,
    fin: Option<(TensorId, TensorId)>,
    n_out: Expr,
    sqs: Option<(SharedId, SharedId)>,
    sx: Option<SharedId>,
    sx8: Option<(SharedId, SharedId)>,
    sync: Option<SyncTiles>,
    wg: Option<WgmmaTiles>,
    /// MMA=f8sync: the staged activations, the E4M3 weight tile and the factors (`tile_f8.rs`).
    f8: Option<tile_f8::F8Bufs>,
    /// The K range of one split.
    kchunk: Expr,
}

/// The path's shared stages and register tiles: the mma.sync path's accumulator transpose, accumulator,
/// decoded weights, output tile, row scales, FIN=last sums and gemv partials, or the wgmma path's.
fn main_tiles(
    b: &mut KernelBuilder,
    spec: &MatSpec,
    c: &Cfg,
    (partial, fused, bno): (bool, bool, u32),
) -> (Option<SyncTiles>, Option<WgmmaTiles>) {
    let glu = spec.epilogue.is_glu();
    let (bn, bm, bk) = (c.bn, c.bm, c.bk);
    let warps = [c.wa, c.wb];
    // mma.sync path: the accumulator is [weight rows, tokens], transposed through `sacc` for the epilogue.
    let mut sync = None;
    // wgmma path: the accumulator is [tokens, output columns] (gate and up halves apart with a GLU epilogue).
    let mut wg = None;
    if c.wgmma {
        let sw = b.shared("sw", DType::Bf16, bn, bk, 2, Swizzle::Xor16B);
        let acc = b.tile("acc", DType::F32, bm, bno, [c.wa, 1]);
        let acc_up = glu.then(|| b.tile("acc_up", DType::F32, bm, bno, [c.wa, 1]));
        let pv = (spec.row_scale && !partial).then(|| b.vec("p_rows", bm, [c.wa, 1]));
        // DEC=bits: the stage's [BN, BK] weights decoded into registers, then stored to `sw`.
        let wreg = c.dec_bits.then(|| b.tile("wdec", DType::Bf16, bn, bk, [c.wa, 1]));
        wg = Some((sw, acc, acc_up, pv, wreg));
    } else {
        // PATH=gemv: 8-token tiles keep the 16-row epilogue tiles (their rows past 8 are never valid).
        let bmt = bm.max(16);
        let sacc = b.shared("sacc", DType::F32, bn, bmt + 1, 1, Swizzle::None);
        let acc = (!c.gemv).then(|| b.tile("acc", DType::F32, bn, bm, warps));
        // The decoded weights of one 32-wide block (PATH=stream: of the whole BK slice).
        let wt = (!c.gemv && !c.f8).then(|| b.tile("w", DType::Bf16, bn, if c.stream { bk } else { 32 }, [c.wa, 1]));
        // Output tile [BM, BNO] (tokens x output columns) on as many warps along columns as divide it.
        let yw = [1u32, 2, 4, 8, 16]
            .into_iter()
            .rev()
            .find(|w| (c.wa * c.wb).is_multiple_of(*w) && bno.is_multiple_of(8 * w))
            .unwrap_or(1);
        let yt = b.tile("y", DType::F32, bmt, bno, [1, yw]);
        let pv = (spec.row_scale && (!partial || fused)).then(|| b.vec("p_rows", bmt, [1, yw]));
        // FIN=last: the sums of the gate (or only) and up halves of the tile's partials, and the block's view of
        // its tile's arrival count.
        let sums = fused.then(|| {
            let ys = b.tile("ysum", DType::F32, bmt, bno, [1, yw]);
            let us = glu.then(|| b.tile("usum", DType::F32, bmt, bno, [1, yw]));
            (ys, us, b.shared("arrived", DType::I32, 1, 1, 1, Swizzle::None))
        });
        // PATH=gemv: the warps' partials of one `Fp4Gemv` (one per GLU half).
        let spart = c.gemv.then(|| {
            let (rows, count) = gemv_scratch(c, spec.tiled);
            b.shared("spart", DType::F32, rows, bm, count, Swizzle::None)
        });
        sync = Some((sacc, acc, wt, yt, pv, sums, spart));
    }
    (sync, wg)
}

impl MainKernel<'_> {
    /// TS: the whole tiles of the first groups and the K halves of the last `gs` groups' tiles (grid rows).
    fn walk_split_groups(
        &self,
        b: &mut KernelBuilder,
        gs: Expr,
        (g_count, n_tiles): (&Expr, &Expr),
        (group_start, group_end): (GroupBound<'_>, GroupBound<'_>),
    ) {
        let (m, bm, bk) = (&self.m, self.c.bm, self.c.bk);
        let gs = b.let_("gs", gs);
        let whole = b.let_("whole", g_count.clone() - gs);
        let y = Expr::block_idx(1);
        let halves = b.let_("halves", y.ge(whole.clone()));
        let r = b.let_("r", Expr::select(halves.clone(), &y - whole.clone(), 0i64));
        let gsel = b.let_("gsel", Expr::select(halves.clone(), whole.clone() + &r / 2i64, y));
        let half = b.let_("half", &r % 2i64);
        let row0 = b.let_("row0", group_start(&gsel));
        let rows_g = b.let_("rows_g", group_end(&gsel) - row0.clone());
        let nt = b.let_("nt", Expr::block_idx(0));
        let kd = self.kd.clone();
        let kc = b.let_("kc", kd.ceil_div(2 * bk as i64) * bk as i64);
        let m_max = m.ceil_div(bm as i64);
        b.for_("mt", 0i64, rows_g.ceil_div(bm as i64), 1i64, |b, mt| {
            let kbeg = Expr::select(halves.clone(), &half * kc.clone(), 0i64);
            let seg = SkSeg {
                kbeg: kbeg.clone(),
                kend: Expr::select(halves.clone(), (&kbeg + kc.clone()).min(kd.clone()), kd.clone()),
                full: halves.not(),
            };
            let t = ((&gsel - whole.clone()) * m_max.clone() + mt.clone()) * n_tiles.clone() + nt.clone();
            self.tile(b, t, gsel.clone(), row0.clone(), rows_g.clone(), half.clone(), mt, nt.clone(), Some(seg));
        });
    }
}

/// The main kernel's outputs: the row scales `p` and `y`, or the split-K partials (with FIN=last, then the
/// arrival counters, `p` and `y`).
#[allow(clippy::type_complexity)]
fn main_outputs(
    b: &mut KernelBuilder,
    spec: &MatSpec,
    (partial, fused): (bool, bool),
    (m, n, n_out): (&Expr, &Expr, &Expr),
) -> (Option<TensorId>, TensorId, Option<(TensorId, TensorId)>) {
    let mut fin = None;
    let (p, out) = if partial {
        let s = b.dim("S");
        let access = if fused { Access::ReadWrite } else { Access::Write };
        let part = b.tensor("part", DType::F32, &[s, m.clone(), n.clone()], access);
        if fused {
            let t = b.dim("T");
            let sem = b.tensor("sem", DType::I32, &[t], Access::ReadWrite);
            let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(m), Access::Read));
            let y = b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write);
            fin = Some((sem, y));
            (p, part)
        } else {
            (None, part)
        }
    } else {
        let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(m), Access::Read));
        (p, b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write))
    };
    (p, out, fin)
}

/// A group's first row (or its end), from the group index.
type GroupBound<'g> = &'g dyn Fn(&Expr) -> Expr;

/// Where a tile of the flat order lies: group, its first row and row count, K split, token tile and weight tile.
type Located = (Expr, Expr, Expr, Expr, Expr, Expr);
/// [`Located`] of tile `t`, with the group walk's state carried across a CTA's tiles (stream-K) or not.
type Locate<'l> = &'l dyn Fn(&mut KernelBuilder, &Expr, Option<(VarId, VarId, VarId)>) -> Located;

impl MainKernel<'_> {
    /// The flat order's `total` tiles on the persistent or hardware grid: stream-K runs (SK=1), else CTA c takes
    /// tiles c, c + step, ...
    fn walk_persistent(&self, b: &mut KernelBuilder, total: VarId, locate: Locate<'_>) {
        let (c, bk) = (self.c, self.c.bk);
        if c.sk {
            // Stream-K (PATH=gemv, CPS > 0, SK=1): the `total` tiles' K ranges in BK units, `nk` per tile, split into
            // equal contiguous runs over the first `active` = min(grid, total) CTAs (the rest exit at once). A run has
            // at least `nk` units, so a tile is either one CTA's whole (the plain epilogue) or split between exactly
            // two: the CTA whose run ends inside it (partial slot 0, from K = 0) and the one whose run starts inside it
            // (slot 1); the second to arrive sums both (FIN=last's counters, slots in order). The runs start at
            // different K offsets of their first tiles, so the CTAs' tile boundaries fall at different times.
            // Measured (2026-12-05, H100, 28 x 4): 1.09x slower than the hardware grid: ~7 us pass before the
            // first byte (the tile count's walk, the divisions, the first group walk), and the CTAs, whose rates
            // differ by ~10%, end ~15 us apart, where the hardware grid's dynamic hand-out absorbs those differences.
            let kd = self.kd.clone();
            let nk = b.let_("nk", kd.ceil_div(bk as i64));
            let units = b.let_("units", Expr::Var(total) * nk.clone());
            let active = b.let_("active", Expr::Var(total).min(Expr::grid_dim(0)).max(1i64));
            let cta = Expr::block_idx(0);
            let u0 = b.let_("u0", &cta * units.clone() / active.clone());
            let u1 = b.let_("u1", (&cta + 1i64) * units.clone() / active.clone());
            let t0 = b.let_("t0", &u0 / nk.clone());
            let busy = cta.lt(active.clone()).and(u1.gt(u0.clone()));
            let t_end = Expr::select(busy, (&u1 - 1i64) / nk.clone() + 1i64, t0.clone());
            // The current group, the tiles before it and its tiles (none yet: the first tile walks).
            let carried = (b.let_var("grp", 0i64), b.let_var("before", 0i64), b.let_var("in_grp", 0i64));
            b.for_("tile", t0, t_end, 1i64, |b, t| {
                let tb = b.let_("tb", &t * nk.clone());
                let lo = b.let_("lo", u0.max(tb.clone()) - tb.clone());
                let hi = b.let_("hi", u1.min(&tb + nk.clone()) - tb.clone());
                let (gsel, row0, rows_g, _, mt, nt) = locate(b, &t, Some(carried));
                let seg = SkSeg {
                    kbeg: &lo * bk as i64,
                    kend: (&hi * bk as i64).min(kd.clone()),
                    full: lo.eq(0i64).and(hi.eq(nk.clone())),
                };
                let slot = Expr::select(lo.gt(0i64), Expr::Int(1), Expr::Int(0));
                self.tile(b, t, gsel, row0, rows_g, slot, mt, nt, Some(seg));
            });
            return;
        }
        // The persistent grid's tiles: CTA c takes tiles c, c + step, c + 2 step, ... For PATH=gemv (CPS > 0) the
        // tiles are balanced: with `per` = ceil(total / grid) tiles for the busiest CTA, only the first
        // `active` = ceil(total / per) CTAs work (the rest exit at once), so every working CTA takes `per` tiles or,
        // for a few, `per` - 1 (28 x 4 at 64 rows on 528 CTAs: 448 CTAs of 6 tiles, where the plain stride gave 48
        // CTAs a sixth tile that ran on after the other 480 had finished). The decode's tiles all stream the same
        // bytes, so balanced CTAs that start together can also end together; the hardware-scheduled grid's tail (its
        // last CTAs draining alone: ~9 us of lost DRAM time at 28 x 4 on an H100, as read off the PM samples of
        // 2026-12-05) is what this was for. Measured (2026-12-05, H100, 28 x 4): 1.17x slower than the hardware
        // grid: the CTAs turn over in lockstep (DRAM dips to 22-80% at each tile boundary), and each tile walks all G
        // groups (two loads of `offs` each; at 112 experts 1.64x slower).
        let (t_end, t_step) = if c.gemv && c.cps > 0 {
            let per = b.let_("per", Expr::Var(total).ceil_div(Expr::grid_dim(0)).max(1i64));
            let active = b.let_("active", Expr::Var(total).ceil_div(per).max(1i64));
            (Expr::select(Expr::block_idx(0).lt(active.clone()), Expr::Var(total), 0i64), active)
        } else {
            (Expr::Var(total), Expr::grid_dim(0))
        };
        b.for_("tile", Expr::block_idx(0), t_end, t_step, |b, t| {
            let (gsel, row0, rows_g, ks, mt, nt) = locate(b, &t, None);
            self.tile(b, t, gsel, row0, rows_g, ks, mt, nt, None);
        });
    }
}

impl MainKernel<'_> {
    /// PATH=gemv with one CTA per (weight tile, K split) of each group: the group's token tiles.
    fn walk_gemv_groups(
        &self,
        b: &mut KernelBuilder,
        split: i64,
        (group_start, group_end): (GroupBound<'_>, GroupBound<'_>),
    ) {
        let bm = self.c.bm;
        // PATH=gemv, one CTA per (weight tile, K split) of each group (grid y): no search over the groups, two
        // loads of `offs`; the CTA walks its group's token tiles (one at decode; none for an empty group).
        let gsel = Expr::block_idx(1);
        let row0 = b.let_("row0", group_start(&gsel));
        let rows_g = b.let_("rows_g", group_end(&gsel) - row0.clone());
        let local = Expr::block_idx(0);
        let ks = b.let_("ks", &local % split);
        let nt = b.let_("nt", &local / split);
        b.for_("mt", 0i64, rows_g.ceil_div(bm as i64), 1i64, |b, mt| {
            self.tile(b, Expr::Int(0), gsel.clone(), row0.clone(), rows_g.clone(), ks.clone(), mt, nt.clone(), None);
        });
    }
}

/// The main kernel's grid: TS's whole and halved groups, PATH=gemv's (weight tile, K split) x group, the
/// persistent CTAs, or one CTA per tile (an upper bound of the count).
fn main_grid(
    b: &mut KernelBuilder,
    spec: &MatSpec,
    c: &Cfg,
    fused: bool,
    ts_groups: Option<&Expr>,
    (m, g_count, n_tiles, num_sms): (&Expr, &Expr, &Expr, Expr),
) {
    let (bm, split) = (c.bm, c.split as i64);
    if let Some(gs) = ts_groups {
        b.grid(n_tiles.clone(), g_count.clone() + gs.clone(), 1i64);
    } else if c.gemv && c.cps == 0 && !fused {
        b.grid(n_tiles.clone() * split, g_count.clone(), 1i64);
    } else if c.cps > 0 {
        b.grid(num_sms * c.cps as i64, 1i64, 1i64);
    } else {
        // One CTA per tile: an upper bound of the tile count from the shapes (sum over groups of
        // ceil(rows/BM) <= ceil(M/BM) + G); CTAs past the real count exit at once.
        let groups_extra = if spec.grouped { g_count.clone() } else { Expr::Int(0) };
        b.grid((m.ceil_div(bm as i64) + groups_extra) * n_tiles.clone() * split, 1i64, 1i64);
    }
}
