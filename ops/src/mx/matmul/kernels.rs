//! The kernels of `mxfp4_matmul`: the main kernel of every path ([`build_main`]), its dequantization helpers and the split-K finalize.

use super::*;

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
    let mut fin = None;
    let (p, out) = if partial {
        let s = b.dim("S");
        let access = if fused { Access::ReadWrite } else { Access::Write };
        let part = b.tensor("part", DType::F32, &[s, m.clone(), n.clone()], access);
        if fused {
            let t = b.dim("T");
            let sem = b.tensor("sem", DType::I32, &[t], Access::ReadWrite);
            let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
            let y = b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write);
            fin = Some((sem, y));
            (p, part)
        } else {
            (None, part)
        }
    } else {
        let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
        (p, b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write))
    };
    let num_sms = b.int_arg(NUM_SMS);

    let (bn, bm, bk, st) = (c.bn, c.bm, c.bk, c.stages);
    let bno = if glu { bn / 2 } else { bn };
    let warps = [c.wa, c.wb];
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
    let sx = (!c.gemv).then(|| {
        b.shared("sx", DType::Bf16, bm, bk, if spec.act8 { if c.wgmma { 2 } else { 1 } } else { st }, Swizzle::Xor16B)
    });
    let sx8 = spec.act8.then(|| {
        (
            b.shared("sxq", DType::U32, bm, bk / 4, st, Swizzle::Xor16B),
            b.shared("sxs", DType::U8, bm, bk / 32, st, Swizzle::None),
        )
    });
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
        let wt = (!c.gemv).then(|| b.tile("w", DType::Bf16, bn, if c.stream { bk } else { 32 }, [c.wa, 1]));
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
    if let Some(gs) = &ts_groups {
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
        kchunk,
    };
    if let Some(gs) = ts_groups {
        // TS (PATH=gemv, grouped, CPS=0): grid rows y below `whole` = G - gs are group y's whole tiles, as below;
        // the last 2 gs rows are the last gs groups' tiles in halves along K (row whole + 2i + h: group whole + i,
        // K half h, a whole number of BK), so the CTAs launched last each stream half a tile. A tile's halves are
        // partial slots 0 and 1, summed by the second to arrive (FIN=last's counters, one per split tile:
        // `((g - whole) x ceil(M / BM) + mt) x n_tiles + nt`).
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
        let kd = mk.kd.clone();
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
            mk.tile(b, t, gsel.clone(), row0.clone(), rows_g.clone(), half.clone(), mt, nt.clone(), Some(seg));
        });
        return Ok(b.finish()?);
    }
    if c.gemv && c.cps == 0 && !fused {
        // PATH=gemv, one CTA per (weight tile, K split) of each group (grid y): no search over the groups, two
        // loads of `offs`; the CTA walks its group's token tiles (one at decode; none for an empty group).
        let gsel = Expr::block_idx(1);
        let row0 = b.let_("row0", group_start(&gsel));
        let rows_g = b.let_("rows_g", group_end(&gsel) - row0.clone());
        let local = Expr::block_idx(0);
        let ks = b.let_("ks", &local % split);
        let nt = b.let_("nt", &local / split);
        b.for_("mt", 0i64, rows_g.ceil_div(bm as i64), 1i64, |b, mt| {
            mk.tile(b, Expr::Int(0), gsel.clone(), row0.clone(), rows_g.clone(), ks.clone(), mt, nt.clone(), None);
        });
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
        let kd = mk.kd.clone();
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
            mk.tile(b, t, gsel, row0, rows_g, slot, mt, nt, Some(seg));
        });
        return Ok(b.finish()?);
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
        mk.tile(b, t, gsel, row0, rows_g, ks, mt, nt, None);
    });
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
    /// The K range of one split.
    kchunk: Expr,
}

impl MainKernel<'_> {
    /// One tile: group `gsel` (its rows from `row0`, `rows_g` of them), K split `ks`, token tile `mt`, weight tile
    /// `nt`; `t` the tile's index in the flat order (the split-K arrival counters are per `t / SPLIT`). With a
    /// stream-K segment `seg`, its K range instead of split `ks`'s, and `ks` its partial slot.
    #[allow(clippy::too_many_arguments)]
    fn tile(
        &self,
        b: &mut KernelBuilder,
        t: Expr,
        gsel: Expr,
        row0: Expr,
        rows_g: Expr,
        ks: Expr,
        mt: Expr,
        nt: Expr,
        seg: Option<SkSeg>,
    ) {
        let (c, bm, bk) = (self.c, self.c.bm, self.c.bk);
        let m0 = b.let_("m0", mt * bm as i64);
        let n0 = b.let_("n0", nt * self.bno as i64);
        // PATH=gemv: at most BM (8-token tiles keep 16-row epilogue tiles).
        let rows_valid =
            b.let_("rows_valid", if c.gemv { (rows_g - m0.clone()).min(bm as i64) } else { rows_g - m0.clone() });
        let (kbeg, kend, full) = match seg {
            Some(s) => (b.let_("kbeg", s.kbeg), b.let_("kend", s.kend), Some(b.let_("full", s.full))),
            None => {
                let kbeg = b.let_("kbeg", &ks * self.kchunk.clone());
                (kbeg.clone(), b.let_("kend", (&kbeg + self.kchunk.clone()).min(self.kd.clone())), None)
            }
        };
        let k_tiles = b.let_("k_tiles", (&kend - kbeg.clone()).max(0i64).ceil_div(bk as i64));
        let wrow = b.let_("wrow", &gsel * self.n.clone());
        let tc = TileCtx { t, row0, ks, m0, n0, rows_valid, kbeg, kend, k_tiles, wrow, full };
        if let Some(sync) = self.sync {
            self.tile_sync(b, &tc, sync);
        }
        if let Some(wg) = self.wg {
            self.tile_wgmma(b, &tc, wg);
        }
        // Every warp must be done with the shared tiles before the next tile's prologue overwrites them.
        b.barrier();
    }

    /// Load K tile `kt` of the tile into pipeline slot `slot` (= kt % STAGES).
    fn load_stage(&self, b: &mut KernelBuilder, tc: &TileCtx, kt: Expr, slot: Expr) {
        let (spec, c, glu, bn, bk, words_per_row) =
            (self.spec, self.c, self.glu, self.c.bn, self.c.bk, self.words_per_row);
        let (n, kb, kd, kq, n_out) = (&self.n, &self.kb, &self.kd, &self.kq, &self.n_out);
        let (x, xs, wq, ws, sqs, sx, sx8) = (self.x, self.xs, self.wq, self.ws, self.sqs, self.sx, self.sx8);
        let (row0, m0, n0, rows_valid, kbeg, kend, wrow) =
            (&tc.row0, &tc.m0, &tc.n0, &tc.rows_valid, &tc.kbeg, &tc.kend, &tc.wrow);
        let k0 = b.let_("k0", kbeg + kt * bk as i64);
        let kleft = kend - k0.clone();
        // Weight rows: [0, BN) from n0, or the gate half from n0 and the up half from NH + n0.
        let halves: Vec<(u32, Expr, Expr)> = if glu {
            vec![(0, n0.clone(), n_out.clone() - n0.clone()), (bn / 2, n_out + n0.clone(), n_out.clone() - n0.clone())]
        } else {
            vec![(0, n0.clone(), n.clone() - n0.clone())]
        };
        let hrows = if glu { bn / 2 } else { bn };
        for (r0, nrow, nvalid) in halves.into_iter().filter(|_| sqs.is_some()) {
            let (sq, ss) = sqs.expect("tile path");
            let (qoff, qcols, qvec) = ((wrow + nrow.clone()) * kq.clone() + &k0 / 8i64, &kleft / 8i64, 4);
            let dq = b.window(sq, slot.clone(), r0, 0, hrows, words_per_row);
            b.copy_async(dq, view(wq, qoff, kq.clone(), nvalid.clone(), qcols, qvec));
            let ds = b.window(ss, slot.clone(), r0, 0, hrows, bk / 32);
            let soff = (wrow + nrow) * kb.clone() + &k0 / 32i64;
            b.copy_async(ds, view(ws, soff, kb.clone(), nvalid, &kleft / 32i64, scale_vec(spec, c)));
        }
        if let (Some((sxq, sxs)), Some(xs)) = (sx8, xs) {
            let kx = kd.clone() / 4i64;
            let kb4 = kd.clone() / 32i64;
            let rows = row0 + m0.clone();
            let dq = b.slot(sxq, slot.clone());
            b.copy_async(dq, view(x, &rows * kx.clone() + &k0 / 4i64, kx, rows_valid.clone(), &kleft / 4i64, 4));
            let ds = b.slot(sxs, slot);
            let svec = scale_vec(spec, c);
            b.copy_async(
                ds,
                view(xs, &rows * kb4.clone() + &k0 / 32i64, kb4, rows_valid.clone(), &kleft / 32i64, svec),
            );
        } else {
            let dx = b.slot(sx.expect("x tile"), slot);
            b.copy_async(dx, view(x, (row0 + m0.clone()) * kd.clone() + k0, kd.clone(), rows_valid.clone(), kleft, 8));
        }
    }

    /// The mma.sync paths (PATH=tile, stream and gemv): the K loop, then the epilogue through `sacc`.
    fn tile_sync(&self, b: &mut KernelBuilder, tc: &TileCtx, sync: SyncTiles) {
        let (spec, c, glu, partial, threads, bm, bn, bk, st, split) = (
            self.spec,
            self.c,
            self.glu,
            self.partial,
            self.threads,
            self.c.bm,
            self.c.bn,
            self.c.bk,
            self.c.stages,
            self.c.split as i64,
        );
        let (m, n, kb, kd, kq, n_out) = (&self.m, &self.n, &self.kb, &self.kd, &self.kq, &self.n_out);
        let (x, wq, ws, out, p, fin, sqs, sx, sx8) =
            (self.x, self.wq, self.ws, self.out, self.p, self.fin, self.sqs, self.sx, self.sx8);
        let (t, row0, ks, m0, n0, rows_valid, kbeg, kend, k_tiles, wrow) =
            (&tc.t, &tc.row0, &tc.ks, &tc.m0, &tc.n0, &tc.rows_valid, &tc.kbeg, &tc.kend, &tc.k_tiles, &tc.wrow);
        let (sacc, acc, wt, yt, pv, sums, spart) = sync;
        if let (Some(acc), Some(wt)) = (acc, wt) {
            b.map(acc, 0.0f64);
            for s in 0..st - 1 {
                let s = Expr::Int(s as i64);
                b.if_(s.lt(k_tiles.clone()), |b| self.load_stage(b, tc, s.clone(), s.clone()));
                b.commit();
            }
            // The slot of `kt` kept as a wrapping counter (no 64-bit `%` by a non-power of two per iteration).
            let rslot = b.let_var("rslot", 0i64);
            b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
                b.wait(st - 2);
                b.barrier();
                let next = &kt + (st - 1) as i64;
                // (kt + STAGES - 1) % STAGES
                let nslot =
                    Expr::select(Expr::Var(rslot).eq(0i64), Expr::Int((st - 1) as i64), Expr::Var(rslot) - 1i64);
                b.if_(next.lt(k_tiles.clone()), |b| self.load_stage(b, tc, next.clone(), nslot));
                b.commit();
                let slot = b.let_("slot", Expr::Var(rslot));
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
                let inc = Expr::Var(rslot) + 1i64;
                b.assign(rslot, Expr::select(inc.eq(st as i64), Expr::Int(0), inc));
            });
            b.wait(0);
            // Epilogue: transpose the [BN, BM] accumulator through shared memory.
            let sw = b.window(sacc, 0i64, 0, 0, bn, bm);
            b.store(acc, Place::Shared(sw));
            b.barrier();
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

    /// The wgmma path: the K loop with the weights decoded into shared bf16 tiles, then the epilogue.
    fn tile_wgmma(&self, b: &mut KernelBuilder, tc: &TileCtx, wg: WgmmaTiles) {
        let (spec, glu, partial, threads, bm, bn, bk, st) =
            (self.spec, self.glu, self.partial, self.threads, self.c.bm, self.c.bn, self.c.bk, self.c.stages);
        let (m, n, n_out) = (&self.m, &self.n, &self.n_out);
        let (out, p, sqs, sx, sx8) = (self.out, self.p, self.sqs, self.sx, self.sx8);
        let (row0, ks, m0, n0, rows_valid, k_tiles) = (&tc.row0, &tc.ks, &tc.m0, &tc.n0, &tc.rows_valid, &tc.k_tiles);
        let (sw, acc, acc_up, pv, wreg) = wg;
        // Warpgroup MMA pipeline (as latent_moe_gemm's): a stage's x tile is refilled two iterations after
        // its product was issued, so STAGES-2 loads and one product are in flight. Each iteration decodes
        // the stage's weights (a threads region, one 32-bit word of eight values at a time) into one of two
        // shared bf16 tiles (the one the product two iterations ago read).
        for s in 0..st - 2 {
            let s = Expr::Int(s as i64);
            b.if_(s.lt(k_tiles.clone()), |b| self.load_stage(b, tc, s.clone(), s.clone()));
            b.commit();
        }
        let groups = if glu { 2 } else { 1 };
        b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
            b.wait(st - 3);
            b.barrier();
            let next = &kt + (st - 2) as i64;
            b.if_(next.lt(k_tiles.clone()), |b| self.load_stage(b, tc, next.clone(), &next % st as i64));
            b.commit();
            let slot = b.let_("slot", &kt % st as i64);
            let half = b.let_("half", &kt % 2i64);
            let (sq, ss) = sqs.expect("tile path (validated: PATH=stream is MMA=sync)");
            if let Some(wr) = wreg {
                let q = b.window(sq, slot.clone(), 0, 0, bn, bk / 8);
                let s = b.window(ss, slot.clone(), 0, 0, bn, bk / 32);
                b.dequant_fp4(wr, q, s, spec.packed, spec.fold, spec.finite);
                let dst = b.window(sw, half.clone(), 0, 0, bn, bk);
                b.store(wr, Place::Shared(dst));
            } else {
                dequant_words(b, spec, sq, ss, sw, &slot, &half, bn, bk, threads);
            }
            let xslot = if let Some((sxq, sxs)) = sx8 {
                dequant_x(b, sxq, sxs, sx.expect("x tile"), &slot, &half, rows_valid, bm, bk, threads);
                half.clone()
            } else {
                slot.clone()
            };
            // Fence the ordinary shared stores for the async proxy (the loads just issued may stay in flight).
            b.wait(st - 2);
            b.barrier();
            let a = Operand::Shared { src: b.slot(sx.expect("x tile"), xslot), transpose: false };
            // The first product of a tile overwrites the accumulators (no zeroing instructions).
            let accumulate = kt.gt(0i64);
            crate::latent_moe_gemm::weight_products(b, acc, acc_up, a, sw, half, bn, bk, Some(accumulate));
            b.mma_wait(groups);
        });
        b.mma_wait(0);
        b.wait(0);
        // K range empty (a split past K): no product ran, the result is zero.
        b.if_(k_tiles.le(0i64), |b| {
            b.map(acc, 0.0f64);
            if let Some(u) = acc_up {
                b.map(u, 0.0f64);
            }
        });
        let rows_base = row0 + m0.clone();
        if partial {
            let prow = (ks * m.clone() + rows_base.clone()) * n.clone();
            let pvec = if spec.out_vec == 2 { 2 } else { 1 };
            let cols = n_out.clone() - n0.clone();
            b.store(
                acc,
                Place::Global(view(out, &prow + n0.clone(), n.clone(), rows_valid.clone(), cols.clone(), pvec)),
            );
            if let Some(u) = acc_up {
                let off = &prow + n_out.clone() + n0.clone();
                b.store(u, Place::Global(view(out, off, n.clone(), rows_valid.clone(), cols, pvec)));
            }
        } else {
            if let Some(u) = acc_up {
                b.map(acc, epilogue_expr(spec.epilogue, Expr::Elem(acc), Expr::Elem(u)));
            }
            if let (Some(pv), Some(p)) = (pv, p) {
                b.load_vec(pv, vec_view(p, rows_base.clone(), 1i64, rows_valid.clone()));
                b.map(acc, Expr::Elem(acc) * Expr::RowVal(pv));
            }
            let off = &rows_base * n_out.clone() + n0.clone();
            let cols = n_out.clone() - n0.clone();
            b.store(acc, Place::Global(view(out, off, n_out.clone(), rows_valid.clone(), cols, spec.out_vec)));
        }
    }
}

/// The decoded (bf16-exact) weight of the current element of a weight register tile: row `RowIdx` of the
/// stage's shared words `sq` and scales `ss`, column `col` (0..32) of 32-wide block `block` (a block-uniform or
/// per-warp value). Shifts and masks rather than `/` and `%`: tile coordinates are not provably non-negative,
/// and with bit operations the compiler sees which values of a thread share one word.
pub fn decode_expr(spec: &MatSpec, sq: SharedId, ss: SharedId, slot: &Expr, block: Expr, col: Expr) -> Expr {
    let bits = if spec.packed {
        // Packed: word (c%8)/2 of the block (the lane's own word), pair (c/8)%4, half c%2.
        let wi = &block * 4i64 + col.bitand(7i64).shr(1i64);
        let word = Expr::shared_load(sq, slot.clone(), Expr::RowIdx, wi);
        packed_fp4_bits(&word, col.shr(3i64).bitand(3i64), col.bitand(1i64))
    } else {
        // Natural: word c/8 of the block, nibble c%8.
        let word = Expr::shared_load(sq, slot.clone(), Expr::RowIdx, &block * 4i64 + col.shr(3i64));
        fp4_bits(word.shr(col.bitand(7i64).shl(2i64)).bitand(15i64))
    };
    let sb = Expr::shared_load(ss, slot.clone(), Expr::RowIdx, block);
    if spec.fold { bits * scale_mult(spec, sb) } else { bits * TWO_126 * e8m0(sb) }
}

/// Convert a stage's MXFP8 activations (`sxq`: E4M3 bytes as words, `sxs`: E8M0 scales) into the bf16 x tile
/// `dst[index]` (`[BM, BK]`), rows below `rows_valid` only (the others feed output rows never stored). Exact:
/// an E4M3 value times a power of two is a bf16.
#[allow(clippy::too_many_arguments)]
fn dequant_x(
    b: &mut KernelBuilder,
    sxq: SharedId,
    sxs: SharedId,
    dst: SharedId,
    slot: &Expr,
    index: &Expr,
    rows_valid: &Expr,
    bm: u32,
    bk: u32,
    threads: u32,
) {
    let wpr = (bk / 4) as i64;
    let words = bm as i64 * wpr;
    let per_thread = (words + threads as i64 - 1) / threads as i64;
    b.threads(|b| {
        b.for_unrolled("i", 0i64, per_thread, 1i64, |b, i| {
            let idx = b.let_("idx", Expr::thread_idx() + i * threads as i64);
            let r = b.let_("r", idx.shr(wpr.trailing_zeros() as i64));
            b.if_(r.lt(rows_valid.clone()).and(idx.lt(words)), |b| {
                let w = b.let_("wi", idx.bitand(wpr - 1));
                let word = b.let_("word", Expr::shared_load(sxq, slot.clone(), r.clone(), w.clone()));
                let scale = b.let_("scale", e8m0(Expr::shared_load(sxs, slot.clone(), r.clone(), w.shr(3i64))));
                for p in 0..4i64 {
                    let v = fp8_value(word.shr(8 * p).bitand(0xffi64)) * scale.clone();
                    b.shared_store(dst, index.clone(), r.clone(), w.shl(2i64) + p, v);
                }
            });
        });
    });
}

/// The folded multiplier `2^126 * 2^(e-127)` of a scale byte (without the NaN select when no byte is 255).
fn scale_mult(spec: &MatSpec, sb: Expr) -> Expr {
    if spec.finite { (sb + 126i64).shl(23i64).from_bits() } else { e8m0_times_2_126(sb) }
}

/// Decode a stage's weight words into the bf16 shared tile `dst[index]` (`[BN, BK]`): a threads region where
/// each thread takes whole 32-bit words (eight values: eight neighbouring columns in the natural layout, so one
/// address serves eight 2-byte stores; four column pairs in the packed layout) and its row's scale.
#[allow(clippy::too_many_arguments)]
fn dequant_words(
    b: &mut KernelBuilder,
    spec: &MatSpec,
    sq: SharedId,
    ss: SharedId,
    dst: SharedId,
    slot: &Expr,
    index: &Expr,
    bn: u32,
    bk: u32,
    threads: u32,
) {
    let wpr = (bk / 8) as i64;
    let words = bn as i64 * wpr;
    let per_thread = (words + threads as i64 - 1) / threads as i64;
    b.threads(|b| {
        b.for_unrolled("i", 0i64, per_thread, 1i64, |b, i| {
            let idx = b.let_("idx", Expr::thread_idx() + i * threads as i64);
            let body = |b: &mut KernelBuilder| {
                let r = b.let_("r", idx.shr(wpr.trailing_zeros() as i64));
                let w = b.let_("wi", idx.bitand(wpr - 1));
                let word = b.let_("word", Expr::shared_load(sq, slot.clone(), r.clone(), w.clone()));
                let sb = Expr::shared_load(ss, slot.clone(), r.clone(), w.shr(2i64));
                // Folded: one multiplier 2^(e-1); else the value times 2^126, then times the scale (exact both
                // ways; 2^126 * 2^(e-127) overflows f32 for e > 128).
                let mult = b.let_("mult", if spec.fold { scale_mult(spec, sb) } else { e8m0(sb) });
                for p in 0..8i64 {
                    let (col, bits) = if spec.packed {
                        // Word l of block k holds columns 2l + 8 (p / 2) + p % 2 of the block: pair p / 2, half
                        // p % 2.
                        let col = w.shr(2i64).shl(5i64) + w.bitand(3i64).shl(1i64) + (8 * (p / 2) + p % 2);
                        (col, packed_fp4_bits(&word, p / 2, p % 2))
                    } else {
                        (w.shl(3i64) + p, fp4_bits(word.shr(4 * p).bitand(15i64)))
                    };
                    let v = if spec.fold { bits * mult.clone() } else { bits * TWO_126 * mult.clone() };
                    b.shared_store(dst, index.clone(), r.clone(), col, v);
                }
            };
            if words % threads as i64 == 0 {
                body(b);
            } else {
                b.if_(idx.lt(words), body);
            }
        });
    });
}

/// The GLU activations of SEMANTICS.md section 2.1 as an expression of the gate `a` and up `u` values.
pub fn epilogue_expr(e: Epilogue, a: Expr, u: Expr) -> Expr {
    match e {
        Epilogue::SituGlu => (&a * 0.25f64).tanh() * 4.0f64 * a.sigmoid() * ((&u * 0.04f64).tanh() * 25.0f64),
        Epilogue::SwiGlu => a.silu() * u,
        Epilogue::None => a,
    }
}

/// Rows and columns of one finalize tile (split-K runs on decode shapes: few rows, so narrow column tiles
/// give more CTAs).
const FM: u32 = 16;
const FN: u32 = 64;
/// Up to this many splits the finalize's loop over the partials is unrolled (all loads in flight at once
/// instead of one dependent round trip per partial).
const FINALIZE_UNROLL: u32 = 16;

/// The split-K finalize kernel: `part: [S, M, N] f32` (+ `p: [M] f32`) -> `y: [M, NO] bf16`, summing the S
/// partials in order, then the epilogue. With `split` <= 16 the loop over the S = `split` partials is unrolled.
pub fn build_finalize(spec: &MatSpec, split: u32) -> Result<Kernel, OpError> {
    let glu = spec.epilogue.is_glu();
    let unrolled = split <= FINALIZE_UNROLL;
    let name = format!(
        "k3k_mxfp4_mm_finalize{}_{}_o{}{}",
        if spec.row_scale { "_p" } else { "" },
        spec.epilogue.name(),
        spec.out_vec,
        if unrolled { format!("_s{split}") } else { String::new() }
    );
    let mut b = KernelBuilder::new(&name, 128);
    let s = b.dim("S");
    let m = b.dim("M");
    let n = b.dim("N");
    let part = b.tensor("part", DType::F32, &[s.clone(), m.clone(), n.clone()], Access::Read);
    let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
    let n_out = if glu { b.dim("NH") } else { n.clone() };
    let y = b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write);
    b.grid(n_out.ceil_div(FN as i64), m.ceil_div(FM as i64), 1i64);
    let warps = [1, 4];
    let t = b.tile("t", DType::F32, FM, FN, warps);
    let ga = b.tile("gate", DType::F32, FM, FN, warps);
    let ua = glu.then(|| b.tile("up", DType::F32, FM, FN, warps));
    let pv = spec.row_scale.then(|| b.vec("p_rows", FM, warps));
    let m0 = b.let_("m0", Expr::block_idx(1) * FM as i64);
    let n0 = b.let_("n0", Expr::block_idx(0) * FN as i64);
    let rows = b.let_("rows", m.clone() - m0.clone());
    let cols = b.let_("cols", n_out.clone() - n0.clone());
    let vec = if spec.out_vec == 2 { 2 } else { 1 };
    b.map(ga, 0.0f64);
    if let Some(u) = ua {
        b.map(u, 0.0f64);
    }
    let body = |b: &mut KernelBuilder, si: Expr| {
        let base = (&si * m.clone() + m0.clone()) * n.clone();
        b.load(t, Place::Global(view(part, &base + n0.clone(), n.clone(), rows.clone(), cols.clone(), vec)));
        b.map(ga, Expr::Elem(ga) + Expr::Elem(t));
        if let Some(u) = ua {
            b.load(
                t,
                Place::Global(view(
                    part,
                    &base + n_out.clone() + n0.clone(),
                    n.clone(),
                    rows.clone(),
                    cols.clone(),
                    vec,
                )),
            );
            b.map(u, Expr::Elem(u) + Expr::Elem(t));
        }
    };
    if unrolled {
        // The launcher binds S = split (the partials tensor's first dim).
        b.for_unrolled("s", 0i64, split as i64, 1i64, body);
    } else {
        b.for_("s", 0i64, s, 1i64, body);
    }
    if let Some(u) = ua {
        b.map(ga, epilogue_expr(spec.epilogue, Expr::Elem(ga), Expr::Elem(u)));
    }
    if let (Some(pv), Some(p)) = (pv, p) {
        b.load_vec(pv, vec_view(p, m0.clone(), 1i64, rows.clone()));
        b.map(ga, Expr::Elem(ga) * Expr::RowVal(pv));
    }
    b.store(ga, Place::Global(view(y, &m0 * n_out.clone() + n0, n_out, rows, cols, vec)));
    Ok(b.finish()?)
}
