//! `MMA=fp8,F8V=4` (and 5): the weights converted E2M1 -> E4M3 by a first launch, then a plain FP8 x FP8 `wgmma`
//! GEMM (lab/2026-12-07/mx-fp8-3.md), dense or grouped. What F8V=3 does per slice and CTA in its K loop, [`build_convert`] does once per
//! weight word, as `PATH=dq_gemm` dequantizes to bf16 first:
//!
//! 1. **Convert** (one launch, two parts by block index):
//!    - weights: each thread takes one 32-wide block of a weight row (four E2M1 words, one 16-byte load, and its
//!      shift byte `u = sw - lo_n`, 0..=12: the host's per-row fold of F8V=3) and writes its eight E4M3 words
//!      ([`super::kernel::e4m3_words_lean`] then [`super::kernel::fold_word`]: the value times 2^(u-6), exact)
//!      as two 16-byte stores into the scratch `w8: [N, K/4]` u32;
//!    - activation factors: `fa[kb, m] = 2^(xs[m, kb] - 127)` (NaN for 255), f32, transposed into the scratch
//!      `[KB, MP]` (MP = M rounded up to 4, the copy engine's 16-byte row stride; rows past M are 0), so that
//!      the main kernel's copy engine moves a slice's four factor rows as one box.
//! 2. **Main** ([`build_main`]): a producer warpgroup (its lane 0 issues) fills a `STAGES`-deep ring by TMA:
//!    activation codes `[BM, 32]` words and E4M3 weights `[BN, 32]` words (both Xor16B: the wgmma operands as
//!    they land) and the factor rows `[4, BM]`, on per-slot full and empty barriers. Each consumer warpgroup
//!    (BM/64 of them, 64 token rows each) per 128-wide slice: the four factor rows of its rows into registers,
//!    then per 32-wide block one `wgmma m64nBNk32 e4m3` into a temporary (two temporaries alternate at BN <=
//!    128: block j+1's product runs during block j's promotion) and `acc += tmp * fa[m, j]`: one FFMA per
//!    accumulator element and block, no conversion and no weight factor in the loop. The slot is released (one
//!    arrival per warp) after the slice's last product and factor read. At the end `acc * 64 * 2^(lo_n - 127)`
//!    per column (`wl`), then the bf16 store. F8V=5: the next slice's first product runs during a slice's last
//!    promotion ([`Slices::slice`]). F8V=6: as 5, with the two consumer warpgroups taking turns
//!    ([`Stmt::InTurn`], the ping-pong schedule; lab/2026-12-07/mx-fp8-pp.md): `TURN=mma` issues each product in
//!    turn (the tensor cores take the warpgroups' products alternately, one warpgroup's promotion runs under the
//!    other's product), `TURN=ffma` runs each promotion in turn. The tile walk: one block per tile, or
//!    persistent (CPS=1); grouped, the tiles of each group with tokens.
//!
//! Exactness: as F8V=3 (every E4M3 product exact, each block's 32 products summed by the tensor core, then
//! scaled by a power of two; the fold's condition is checked on the host, rows that span more than 12 or hold
//! a NaN scale make a dense plan fall back to the F8V=2 kernel and a grouped one a typed error).

use super::super::matmul::{MatSpec, epilogue_expr};
use super::super::{e8m0, per_thread};
use super::kernel::{e4m3_words_lean, fold_word, packed_e4m3_word};
use super::{Fp8Cfg, Turn};
use crate::OpError;
use k3k_ir::*;

/// Threads per block of [`build_convert`].
pub const CVT_THREADS: u32 = 256;
/// Scale blocks per thread of the activation-factor part of [`build_convert`].
const CVT_KB: u32 = 4;

/// Bytes of shared memory one ring stage of [`build_main`] takes.
pub fn stage_bytes(bm: u32, bn: u32) -> u32 {
    bm * 128 + bn * 128 + 4 * 4 * bm
}

/// The first launch. Tensors: `wq: [N, KW] u32` (E2M1 words, natural layout or, `packed`, the [`crate::mx::pack`]
/// layout: a block's four words -> its eight E4M3 words by [`packed_e4m3_word`], the same scratch), `ws: [N, KB] u8` (the fold's shifts
/// u, 0..=12), `xs: [M, KB] u8` (the activations' E8M0 scales), `w8: [N, KX] u32` (written: E4M3 words), `fa: [KB,
/// MP] f32` (written: activation factors, transposed); grouped, the weight tensors are `[G, N, ..]`. The launcher
/// guarantees KX = 2 KW = 8 KB, MP = M rounded up to a multiple of 4.
pub fn build_convert(knobs: Knobs, grouped: bool, packed: bool) -> Result<Kernel, OpError> {
    let t = CVT_THREADS;
    let (g_tag, p_tag) = (if grouped { "_g" } else { "" }, if packed { "_packed" } else { "" });
    let mut b = KernelBuilder::new(&format!("k3k_mxfp4_mm8_cvt{g_tag}{p_tag}_t{t}"), t);
    b.knobs(knobs);
    let n = b.dim("N");
    let kw = b.dim("KW");
    let kb = b.dim("KB");
    let kx = b.dim("KX");
    let m = b.dim("M");
    let mp = b.dim("MP");
    // Grouped: `[G, N, ..]` weights, indexed flat as the `[G*N, ..]` matrix of all groups' rows.
    let g = if grouped { b.dim("G") } else { Expr::Int(1) };
    let rows = |last: &Expr| -> Vec<Expr> {
        if grouped { vec![g.clone(), n.clone(), last.clone()] } else { vec![n.clone(), last.clone()] }
    };
    let wq = b.tensor("wq", DType::U32, &rows(&kw), Access::Read);
    let ws = b.tensor("ws", DType::U8, &rows(&kb), Access::Read);
    let xs = b.tensor("xs", DType::U8, &[m.clone(), kb.clone()], Access::Read);
    let w8 = b.tensor("w8", DType::U32, &rows(&kx), Access::Write);
    let fa = b.tensor("fa", DType::F32, &[kb.clone(), mp.clone()], Access::Write);
    // Weight blocks: one 32-wide block (4 words) per thread; G*N*KW is a multiple of 4 (KW = 4 KB).
    let words = g * n * kw;
    let wblocks = words.ceil_div((4 * t) as i64);
    let a_mt = mp.ceil_div(t as i64);
    let a_kq = kb.ceil_div(CVT_KB as i64);
    b.grid(wblocks.clone() + a_mt.clone() * a_kq, 1i64, 1i64);
    let bx = b.let_("bx", Expr::block_idx(0));
    b.if_else(
        bx.lt(wblocks.clone()),
        |b| {
            b.threads(|b| {
                let i0 = b.let_("i0", (&bx * t as i64 + Expr::thread_idx()) * 4i64);
                b.if_(i0.lt(words.clone()), |b| {
                    let q = b.let_array("q", 4, ScalarTy::Int, 0i64);
                    b.load_wide(q, 0, wq, i0.clone(), 4);
                    let u = b.let_("u", Expr::load(ws, i0.shr(2i64)));
                    let o = b.let_array("o", 8, ScalarTy::Int, 0i64);
                    if packed {
                        // Output word 2q + h (columns 8q + 4h ..) from the block's words 2h and 2h + 1.
                        let w: Vec<Expr> = (0..4).map(|l| b.let_("pw", Expr::array_get(q, l))).collect();
                        for (qi, h) in (0..4u32).flat_map(|qi| [(qi, 0usize), (qi, 1)]) {
                            let v = fold_word(b, packed_e4m3_word(&w[2 * h], &w[2 * h + 1], qi), &u);
                            b.array_set(o, (2 * qi as usize + h) as i64, v);
                        }
                    } else {
                        for l in 0..4u32 {
                            let (lo, hi) = e4m3_words_lean(Expr::array_get(q, l as i64));
                            let lo = fold_word(b, lo, &u);
                            b.array_set(o, (2 * l) as i64, lo);
                            let hi = fold_word(b, hi, &u);
                            b.array_set(o, (2 * l + 1) as i64, hi);
                        }
                    }
                    b.store_wide(w8, &i0 * 2i64, o, 0, 4);
                    b.store_wide(w8, &i0 * 2i64 + 4i64, o, 4, 4);
                });
            });
        },
        |b| {
            // Activation factors: block (mt, kq) takes rows mt*T.. of MP and scale blocks kq*4..kq*4+3; the
            // warp's stores cover consecutive rows of `fa`.
            let r = b.let_("ab", &bx - wblocks.clone());
            let mt = b.let_("mt", &r % a_mt.clone());
            let kq = b.let_("kq", &r / a_mt.clone());
            b.threads(|b| {
                let row = b.let_("row", &mt * t as i64 + Expr::thread_idx());
                b.if_(row.lt(mp.clone()), |b| {
                    b.for_unrolled("j", 0i64, CVT_KB as i64, 1i64, |b, j| {
                        let blk = b.let_("blk", &kq * CVT_KB as i64 + j);
                        b.if_(blk.lt(kb.clone()), |b| {
                            let at = &blk * mp.clone() + row.clone();
                            b.if_else(
                                row.lt(m.clone()),
                                |b| {
                                    b.store_scalar(
                                        fa,
                                        at.clone(),
                                        e8m0(Expr::load(xs, &row * kb.clone() + blk.clone())),
                                    )
                                },
                                |b| b.store_scalar(fa, at.clone(), 0.0f64),
                            );
                        });
                    });
                });
            });
        },
    );
    Ok(b.finish()?)
}

/// The main kernel. Tensors: `xq: [M, KX] u32` (activation E4M3 codes, four per word), `fa: [KB, MP] f32`,
/// `w8: [N, KX] u32` (the first launch's E4M3 weights), `wl: [N] u8` (the rows' fold bases lo_n), grouped `offs:
/// [G] i32`, with the routing weight `p: [M] f32`, `y: [M, NO] bf16` (NO = N, or `NH` = N/2 with a GLU epilogue).
/// K = 4 KX = 32 KB.
///
/// A GLU epilogue (SEMANTICS.md 2.1, as the bf16 paths lay the rows out: gate rows `[0, NH)`, up rows `[NH, N)`):
/// a tile's BN weight rows are BN/2 gate rows from n0 and BN/2 up rows from NH + n0 (two TMA boxes per slice into
/// two shared tiles), each block's product two `wgmma m64n(BN/2)k32` into a gate and an up temporary, promoted
/// into the gate and up accumulators (the registers of one BN-wide accumulator); the epilogue
/// [`epilogue_expr`] of the two, then `p[r]` per row, on output columns `[n0, n0 + BN/2)`.
///
/// The grid walks the `BM x BN` output tiles in M-fastest order (neighbouring blocks share a weight tile in L2):
/// one tile per block, or (`persist`, CPS=1) one block per SM taking every grid-th tile, the producer's cursor
/// running on into the block's next tile while the consumers store the current one.
pub fn build_main(c: &Fp8Cfg, spec: &MatSpec) -> Result<Kernel, OpError> {
    let (grouped, glu) = (spec.grouped, spec.epilogue.is_glu());
    let (bm, bn, st) = (c.bm, c.bn, c.stages);
    // Output columns per tile: BN, or BN/2 with a GLU. The weight rows' parts (one product and accumulator each):
    // the whole tile, or with a GLU at BN <= 64 its gate and up halves (BNP rows each); a GLU at BN > 64 takes
    // one product over both halves and pairs the columns in shared memory ([`pairs_glu`]).
    let bno = if glu { bn / 2 } else { bn };
    let pair = pairs_glu(spec, bn);
    let parts = if glu && !pair { 2 } else { 1 };
    let bnp = bn / parts;
    let wgs = bm / 64;
    let threads = 128 * wgs;
    let mut b = KernelBuilder::new(&main_name(c, spec), threads);
    b.knobs(c.knobs());
    b.producer_warp();
    let m = b.dim("M");
    let n = b.dim("N");
    let kb = b.dim("KB");
    let kx = b.dim("KX");
    let mp = b.dim("MP");
    let xq = b.tensor("xq", DType::U32, &[m.clone(), kx.clone()], Access::Read);
    let fa = b.tensor("fa", DType::F32, &[kb, mp], Access::Read);
    let (g_count, w8, wl, offs) = if grouped {
        let g = b.dim("G");
        let w8 = b.tensor("w8", DType::U32, &[g.clone(), n.clone(), kx.clone()], Access::Read);
        let wl = b.tensor("wl", DType::U8, &[g.clone(), n.clone()], Access::Read);
        let offs = b.tensor("offs", DType::I32, std::slice::from_ref(&g), Access::Read);
        (g, w8, wl, Some(offs))
    } else {
        let w8 = b.tensor("w8", DType::U32, &[n.clone(), kx.clone()], Access::Read);
        let wl = b.tensor("wl", DType::U8, std::slice::from_ref(&n), Access::Read);
        (Expr::Int(1), w8, wl, None)
    };
    let p_rows = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
    // The output's width: N, or NH = N/2 with a GLU epilogue.
    let n_out = if glu { b.dim("NH") } else { n.clone() };
    let y = b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write);

    let sa = b.shared("sa", DType::U32, bm, 32, st, Swizzle::Xor16B);
    let sb = b.shared("sb", DType::U32, bnp, 32, st, Swizzle::Xor16B);
    let sbs: Vec<SharedId> =
        if parts == 2 { vec![sb, b.shared("sbu", DType::U32, bnp, 32, st, Swizzle::Xor16B)] } else { vec![sb] };
    // The paired GLU's accumulator tile in shared memory, and its output tile.
    let sacc = pair.then(|| b.shared("sacc", DType::F32, bm, bn, 1, Swizzle::None));
    let yt = pair.then(|| b.tile("yt", DType::F32, bm, bno, [4 * wgs, 1]));
    let sf = b.shared("sf", DType::F32, 4, bm, st, Swizzle::None);
    let swl = b.shared("swl", DType::F32, 1, bn, 1, Swizzle::None);
    let acc = b.tile("acc", DType::F32, bm, bnp, [4 * wgs, 1]);
    let accs: Vec<TileId> =
        if parts == 2 { vec![acc, b.tile("acc_up", DType::F32, bm, bnp, [4 * wgs, 1])] } else { vec![acc] };
    let tmps: Vec<Vec<TileId>> = (0..c.tmps)
        .map(|i| {
            let t = b.tile(&format!("tmp{i}"), DType::F32, bm, bnp, [4 * wgs, 1]);
            if parts == 2 { vec![t, b.tile(&format!("tmpu{i}"), DType::F32, bm, bnp, [4 * wgs, 1])] } else { vec![t] }
        })
        .collect();
    let fv: Vec<VecId> = (0..4).map(|j| b.vec(&format!("fa{j}"), bm, [4 * wgs, 1])).collect();
    let pv = spec.row_scale.then(|| b.vec("p_rows", bm, [4 * wgs, 1]));

    // Tiles: dense ceil(M/BM) x ceil(N/BN); grouped the sum over groups of ceil(rows_g/BM) x ceil(N/BN) (empty
    // groups have none), at most (ceil(M/BM) + G) x ceil(N/BN): the grid's bound.
    let n_tiles = n_out.ceil_div(bno as i64);
    let bound = (m.ceil_div(bm as i64) + if grouped { g_count.clone() } else { Expr::Int(0) }) * n_tiles.clone();
    if c.persist {
        let num_sms = b.int_arg(NUM_SMS);
        b.grid(num_sms.min(bound), 1i64, 1i64);
    } else {
        b.grid(bound, 1i64, 1i64);
    }
    let n_tiles = b.let_("n_tiles", n_tiles);
    let total = b.let_var("total", 0i64);
    b.for_("g", 0i64, g_count.clone(), 1i64, |b, g| {
        let rows = group_end(offs, &m, &g) - group_start(offs, &g);
        b.assign(total, Expr::Var(total) + rows.ceil_div(bm as i64) * n_tiles.clone());
    });
    let total = Expr::Var(total);
    let k_tiles = b.let_("k_tiles", kx.ceil_div(32i64));
    let xm = b.tensor_map("xq_map", xq, &[32, bm], Swizzle::Xor16B);
    let wm = if grouped {
        b.tensor_map("w8_map", w8, &[32, bno, 1], Swizzle::Xor16B)
    } else {
        b.tensor_map("w8_map", w8, &[32, bno], Swizzle::Xor16B)
    };
    let fm = b.tensor_map("fa_map", fa, &[bm, 4], Swizzle::None);
    let full = b.mbarriers("full", st);
    let empty = b.mbarriers("empty", st);
    b.mbar_init(full, 1);
    // One arrival per consumer warp releases a slot.
    b.mbar_init(empty, threads / 32);
    let bytes = stage_bytes(bm, bn);

    // The producer's cursor (assigned and read in producer bodies only): its tile, k-step, ring slot and phase,
    // and the tile's coordinates (found once per tile: the producer warp shares a scheduler with consumer warps).
    let pt = b.let_var("p_tile", Expr::block_idx(0));
    let pk = b.let_var("p_kt", 0i64);
    let ps = b.let_var("p_slot", 0i64);
    let pp = b.let_var("p_phase", 0i64);
    let (pr0, pn0, pg) = (b.let_var("p_r0", 0i64), b.let_var("p_n0", 0i64), b.let_var("p_g", 0i64));
    let relocate = |b: &mut KernelBuilder| {
        b.if_(Expr::Var(pt).lt(total.clone()), |b| {
            let t = locate(b, "p", Expr::Var(pt), offs, (&m, &g_count, &n_tiles), bm, bno);
            b.assign(pr0, t.r0);
            b.assign(pn0, t.n0);
            b.assign(pg, t.g);
        });
    };
    // Fill the next slice of the walk into slot p_slot, once its previous use is released (a fresh barrier
    // passes parity 1 at once); rows past M or N and K past the end read zero.
    let produce = |b: &mut KernelBuilder| {
        b.if_(Expr::Var(pt).lt(total.clone()), |b| {
            let slot = Expr::Var(ps);
            b.mbar_wait_elected(empty, slot.clone(), Expr::Var(pp).bitxor(1i64));
            b.mbar_arrive_expect_tx(full, slot.clone(), bytes);
            let k0 = b.let_("pk0", Expr::Var(pk) * 32i64);
            let xc = vec![k0.clone(), Expr::Var(pr0)];
            b.tma_load(xm, b.slot(sa, slot.clone()), xc, full, slot.clone());
            // The tile's weight rows from n0 (GLU: the gate half, then the up half from NH + n0, into their own
            // tiles or, paired, rows [BN/2, BN) of the one tile).
            let dsts: Vec<SharedRef> = if pair {
                (0..2).map(|i| b.window(sb, slot.clone(), i * bno, 0, bno, 32)).collect()
            } else {
                sbs.iter().map(|&t| b.slot(t, slot.clone())).collect()
            };
            for (i, dst) in dsts.into_iter().enumerate() {
                let row = if i == 0 { Expr::Var(pn0) } else { n_out.clone() + Expr::Var(pn0) };
                let wc = if grouped { vec![k0.clone(), row, Expr::Var(pg)] } else { vec![k0.clone(), row] };
                b.tma_load(wm, dst, wc, full, slot.clone());
            }
            let fc = vec![Expr::Var(pr0), Expr::Var(pk) * 4i64];
            b.tma_load(fm, b.slot(sf, slot.clone()), fc, full, slot);
            advance(b, ps, pp, st);
            b.assign(pk, Expr::Var(pk) + 1i64);
            b.if_(Expr::Var(pk).ge(k_tiles.clone()), |b| {
                b.assign(pk, 0i64);
                b.assign(pt, Expr::Var(pt) + Expr::grid_dim(0));
                relocate(b);
            });
        });
    };
    b.producer(|b| {
        relocate(b);
        b.for_("s", 0i64, st as i64, 1i64, |b, _| produce(b));
    });

    // The consumers' ring slot and phase.
    let cs = b.let_var("c_slot", 0i64);
    let cp = b.let_var("c_phase", 0i64);
    b.for_("tile", Expr::block_idx(0), total.clone(), Expr::grid_dim(0), |b, tile| {
        let t = locate(b, "c", tile, offs, (&m, &g_count, &n_tiles), bm, bno);
        let n0 = t.n0.clone();
        // The fold's 2^(lo_n - 127) per column (columns past N read row N - 1; never stored; GLU: the gate rows'
        // in [0, BN/2), the up rows' in [BN/2, BN)); the previous tile's epilogue read it before the barrier that
        // ends its iteration.
        per_thread(b, bn as i64, threads, |b, idx| {
            b.if_(idx.lt(bn as i64), |b| {
                let col = weight_row(&idx, &n0, (&n, &n_out), glu.then_some(bno));
                b.shared_store(swl, 0i64, 0i64, idx, e8m0(Expr::load(wl, &t.g * n.clone() + col)));
            });
        });
        for &a in &accs {
            b.map(a, 0.0f64);
        }
        let sl = Slices { sa, sbs: &sbs, sf, full, empty, accs: &accs, bm, bnp, st, turn: c.turn };
        if c.cross {
            // F8V=5: the slice's first product issued by the previous slice (or here, for the tile's first).
            sl.enter(b, Expr::Var(cs), Expr::Var(cp), &fv);
            sl.issue(b, Expr::Var(cs), 0, &tmps[0]);
            b.for_("kt", 0i64, k_tiles.clone() - 1i64, 1i64, |b, _| {
                sl.slice(b, (cs, cp), &fv, &tmps, (true, true));
                b.producer(produce);
            });
            sl.slice(b, (cs, cp), &fv, &tmps, (true, false));
            b.producer(produce);
        } else {
            b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, _| {
                sl.enter(b, Expr::Var(cs), Expr::Var(cp), &fv);
                sl.slice(b, (cs, cp), &fv, &tmps, (false, false));
                b.producer(produce);
            });
        }
        // The swl stores above are visible to every consumer (a barrier of the consumers: nested in a loop).
        b.barrier();
        store_tile(b, spec, (&accs, swl, bno, sacc.zip(yt)), pv.zip(p_rows), (y, &n_out), &t);
        // Every consumer has read swl before the next tile rewrites it.
        b.barrier();
    });
    Ok(b.finish()?)
}

/// The main kernel's name: the walk, epilogue, routing weight, output alignment, tile, ring and generation.
fn main_name(c: &Fp8Cfg, spec: &MatSpec) -> String {
    let (bm, bn, st, out_vec) = (c.bm, c.bn, c.stages, spec.out_vec);
    let p = if c.persist { "_p" } else { "" };
    let kind = if spec.grouped { "grouped" } else { "dense" };
    let x = match c.turn {
        Some(Turn::Mma) => "_pp",
        Some(Turn::Ffma) => "_ppf",
        None if c.cross => "_x",
        None => "",
    };
    let glu = if spec.epilogue.is_glu() { format!("_{}", spec.epilogue.name()) } else { String::new() };
    let epi = format!("{glu}{}", if spec.row_scale { "_p" } else { "" });
    format!("k3k_mxfp4_mm8_first_{kind}{epi}_o{out_vec}_bm{bm}_bn{bn}_st{st}_t{}{x}{p}", c.tmps)
}

/// Whether a GLU problem at BN takes one product per block over the gate and up halves (BN > 64) and pairs the
/// columns through a `[BM, BN]` f32 shared tile, rather than two half-width products into two accumulators: at BN
/// 96..128 the two in-flight products per block spill (ptxas 13.0, lab/2026-12-07/mx-fp8-epilogues.md).
pub fn pairs_glu(spec: &MatSpec, bn: u32) -> bool {
    spec.epilogue.is_glu() && bn > 64
}

/// Shared memory the main kernel takes besides its ring: the paired GLU's accumulator tile.
pub fn extra_smem(spec: &MatSpec, bm: u32, bn: u32) -> u32 {
    if pairs_glu(spec, bn) { bm * bn * 4 } else { 0 }
}

/// The weight row whose fold base column `idx` of a tile at output column `n0` takes: `n0 + idx`, or with a GLU
/// (`glu` = BN/2) the gate row `n0 + idx` for idx < BN/2 and the up row `NH + n0 + idx - BN/2` above; clamped to
/// the last row of its half (such columns are never stored).
fn weight_row(idx: &Expr, n0: &Expr, (n, n_out): (&Expr, &Expr), glu: Option<u32>) -> Expr {
    match glu {
        Some(bnp) => {
            let up = idx.ge(bnp as i64);
            let j = Expr::select(up.clone(), idx - bnp as i64, idx.clone());
            let gate = (n0 + j.clone()).min(n_out.clone() - 1i64);
            Expr::select(up, (n_out.clone() + n0.clone() + j).min(n.clone() - 1i64), gate)
        }
        None => (n0 + idx.clone()).min(n.clone() - 1i64),
    }
}

/// A tile's epilogue: the conversion's 2^-6 and the fold's 2^(lo_n - 127) per column (`swl`; GLU: the up half's
/// at column + BN/2), the GLU of the gate and up accumulators (or, `pair`, of the one accumulator's column
/// halves), the routing weight per row, the bf16 store of the tile's rows and columns.
fn store_tile(
    b: &mut KernelBuilder,
    spec: &MatSpec,
    (accs, swl, bno, pair): (&[TileId], SharedId, u32, Option<(SharedId, TileId)>),
    p: Option<(VecId, TensorId)>,
    (y, n_out): (TensorId, &Expr),
    t: &TileAt,
) {
    let mut acc = accs[0];
    b.map(acc, Expr::Elem(acc) * 64.0f64 * Expr::shared_load(swl, 0i64, 0i64, Expr::ColIdx));
    if let Some(&up) = accs.get(1) {
        let f = Expr::shared_load(swl, 0i64, 0i64, Expr::ColIdx + bno as i64);
        b.map(acc, epilogue_expr(spec.epilogue, Expr::Elem(acc), Expr::Elem(up) * 64.0f64 * f));
    }
    if let Some((sacc, yt)) = pair {
        // Paired GLU: the scaled accumulator through shared memory, then gate column j and up column j + BN/2 of
        // each row into the output tile (the caller's barrier after the store orders the next tile's rewrite).
        b.store(acc, Place::Shared(b.slot(sacc, 0i64)));
        b.barrier();
        let at = |c: u32| Expr::shared_load(sacc, 0i64, Expr::RowIdx, Expr::ColIdx + c as i64);
        b.map(yt, epilogue_expr(spec.epilogue, at(0), at(bno)));
        acc = yt;
    }
    if let Some((pv, p)) = p {
        b.load_vec(pv, vec_view(p, t.r0.clone(), 1i64, t.rows.clone()));
        b.map(acc, Expr::Elem(acc) * Expr::RowVal(pv));
    }
    let off = &t.r0 * n_out.clone() + t.n0.clone();
    let cols_valid = n_out.clone() - t.n0.clone();
    b.store(acc, Place::Global(view(y, off, n_out.clone(), t.rows.clone(), cols_valid, spec.out_vec)));
}

/// The consumers' side of the ring: the shared tiles, barriers and the accumulators a slice's products use (one
/// per part of the weight rows: the whole tile, or its gate and up halves; a temporary has as many parts).
struct Slices<'a> {
    sa: SharedId,
    sbs: &'a [SharedId],
    sf: SharedId,
    full: MbarId,
    empty: MbarId,
    accs: &'a [TileId],
    bm: u32,
    /// Weight rows per part.
    bnp: u32,
    st: u32,
    /// F8V=6: what the consumer warpgroups do in turns.
    turn: Option<Turn>,
}

impl Slices<'_> {
    /// Wait for the slice in ring slot `slot` (phase parity `phase`) and take its factor rows into registers.
    fn enter(&self, b: &mut KernelBuilder, slot: Expr, phase: Expr, fv: &[VecId]) {
        b.mbar_wait(self.full, slot.clone(), phase);
        for (j, &v) in fv.iter().enumerate() {
            b.vec_map(v, Expr::shared_load(self.sf, slot.clone(), j as i64, Expr::RowIdx));
        }
    }

    /// `wgmma` groups one block's product issues (one per part).
    fn groups(&self) -> u32 {
        self.sbs.len() as u32
    }

    /// Issue block `j`'s product of the slice in `slot` into the temporary `t` (scale-d 0), one `wgmma` per part.
    fn product(&self, b: &mut KernelBuilder, slot: Expr, j: u32, t: &[TileId]) {
        for (&sb, &tp) in self.sbs.iter().zip(t) {
            let a = Operand::Shared { src: b.window(self.sa, slot.clone(), 0, 8 * j, self.bm, 8), transpose: false };
            let w = Operand::Shared { src: b.window(sb, slot.clone(), 0, 8 * j, self.bnp, 8), transpose: true };
            b.mma_async_init(tp, a, w, false);
        }
    }

    /// [`Self::product`], in turn for F8V=6 with `TURN=mma`.
    fn issue(&self, b: &mut KernelBuilder, slot: Expr, j: u32, t: &[TileId]) {
        b.in_turn_if(self.turn == Some(Turn::Mma), |b| self.product(b, slot, j, t));
    }

    /// `acc += t * fa_j` per row and part: one FFMA per element (in turn for F8V=6 with `TURN=ffma`).
    fn promote(&self, b: &mut KernelBuilder, t: &[TileId], f: VecId) {
        b.in_turn_if(self.turn == Some(Turn::Ffma), |b| {
            for (&acc, &tp) in self.accs.iter().zip(t) {
                b.map(acc, Expr::Elem(acc) + Expr::Elem(tp) * Expr::RowVal(f));
            }
        });
    }

    /// The products and promotions of the slice in ring slot `cs` (entered), then its release and the ring's
    /// advance. Two temporaries: block j+1's product runs during block j's promotion. F8V=5 (`pre`): block 0's
    /// product was issued before (by the previous slice, or the tile's start: it runs during that slice's last
    /// promotion, release and bookkeeping); `next`: the next slice's block 0 is issued after waiting for that
    /// slice and before this one's last promotion, and its factors are taken after the release.
    fn slice(
        &self,
        b: &mut KernelBuilder,
        (cs, cp): (VarId, VarId),
        fv: &[VecId],
        tmps: &[Vec<TileId>],
        (pre, next): (bool, bool),
    ) {
        let groups = self.groups();
        let slot = b.let_("slot", Expr::Var(cs));
        if pre {
            // Block 0's product (issued during the previous slice's last promotion) completes here, at the top of
            // the loop body: ptxas serializes every wgmma of the kernel when one issued before the loop's back
            // edge is still in flight as the next iteration issues its products (ptxas 13.0, C7514).
            b.mma_wait(0);
        }
        if tmps.len() == 1 {
            for j in 0..4 {
                self.product(b, slot.clone(), j, &tmps[0]);
                b.mma_wait(0);
                self.promote(b, &tmps[0], fv[j as usize]);
            }
        } else {
            if !pre {
                self.issue(b, slot.clone(), 0, &tmps[0]);
            }
            for j in 0..3u32 {
                self.issue(b, slot.clone(), j + 1, &tmps[((j + 1) % 2) as usize]);
                b.mma_wait(groups);
                self.promote(b, &tmps[(j % 2) as usize], fv[j as usize]);
            }
            if next {
                let wrap = b.let_("nwrap", (Expr::Var(cs) + 1i64).eq(self.st as i64));
                let next = b.let_("nslot", Expr::select(wrap.clone(), 0i64, Expr::Var(cs) + 1i64));
                let phase = Expr::select(wrap, Expr::Var(cp).bitxor(1i64), Expr::Var(cp));
                b.mbar_wait(self.full, next.clone(), phase);
                self.issue(b, next, 0, &tmps[0]);
                b.mma_wait(groups);
            } else {
                b.mma_wait(0);
            }
            self.promote(b, &tmps[1], fv[3]);
        }
        // The slice's products are complete and its factors read: release the slot; the producer refills it with
        // the walk's slice STAGES ahead.
        b.mbar_arrive_cluster(self.empty, slot, 0i64);
        advance(b, cs, cp, self.st);
        if next {
            for (j, &v) in fv.iter().enumerate() {
                b.vec_map(v, Expr::shared_load(self.sf, Expr::Var(cs), j as i64, Expr::RowIdx));
            }
        }
    }
}

/// A ring position one slot on: `slot + 1`, wrapping to 0 with the phase flipped.
fn advance(b: &mut KernelBuilder, slot: VarId, phase: VarId, st: u32) {
    let wrap = b.let_("wrap", (Expr::Var(slot) + 1i64).eq(st as i64));
    b.assign(phase, Expr::select(wrap.clone(), Expr::Var(phase).bitxor(1i64), Expr::Var(phase)));
    b.assign(slot, Expr::select(wrap, 0i64, Expr::Var(slot) + 1i64));
}

/// Where a tile of the walk lies: its group, first row of x and y, rows left in its group from there, and first
/// output column.
struct TileAt {
    g: Expr,
    r0: Expr,
    rows: Expr,
    n0: Expr,
}

/// The first row of group `g` (grouped: `offs[g - 1]`, 0 for the first group).
fn group_start(offs: Option<TensorId>, g: &Expr) -> Expr {
    match offs {
        Some(o) => Expr::select(g.gt(0i64), Expr::load(o, g - 1i64), Expr::Int(0)),
        None => Expr::Int(0),
    }
}

/// The end of group `g`'s rows (grouped: `offs[g]`; dense: M).
fn group_end(offs: Option<TensorId>, m: &Expr, g: &Expr) -> Expr {
    match offs {
        Some(o) => Expr::load(o, g.clone()),
        None => m.clone(),
    }
}

/// Tile `t` of the walk: dense, m-tile `t % ceil(M/BM)` of n-tile `t / ceil(M/BM)` (M fastest: neighbouring
/// blocks share a weight tile); grouped, the group whose tiles hold `t` (a scan over the groups, G loads per
/// tile), then the same order inside it. `tag` prefixes the variables (one walk per role).
fn locate(
    b: &mut KernelBuilder,
    tag: &str,
    t: Expr,
    offs: Option<TensorId>,
    (m, g_count, n_tiles): (&Expr, &Expr, &Expr),
    bm: u32,
    bn: u32,
) -> TileAt {
    let (g, local) = if offs.is_some() {
        let seen = b.let_var(&format!("{tag}_seen"), 0i64);
        let grp = b.let_var(&format!("{tag}_grp"), 0i64);
        let local = b.let_var(&format!("{tag}_local"), 0i64);
        b.for_(&format!("{tag}_g"), 0i64, g_count.clone(), 1i64, |b, g| {
            let rows = group_end(offs, m, &g) - group_start(offs, &g);
            let tg = b.let_(&format!("{tag}_tg"), rows.ceil_div(bm as i64) * n_tiles.clone());
            b.if_(t.ge(Expr::Var(seen)).and(t.lt(Expr::Var(seen) + tg.clone())), |b| {
                b.assign(grp, g.clone());
                b.assign(local, &t - Expr::Var(seen));
            });
            b.assign(seen, Expr::Var(seen) + tg);
        });
        (Expr::Var(grp), Expr::Var(local))
    } else {
        (Expr::Int(0), t)
    };
    let start = b.let_(&format!("{tag}_start"), group_start(offs, &g));
    let rows_g = b.let_(&format!("{tag}_rows_g"), group_end(offs, m, &g) - start.clone());
    let mt_count = rows_g.ceil_div(bm as i64);
    let mt = b.let_(&format!("{tag}_mt"), &local % mt_count.clone());
    let n0 = b.let_(&format!("{tag}_n0"), (&local / mt_count) * bn as i64);
    let r0 = b.let_(&format!("{tag}_r0"), start + &mt * bm as i64);
    let rows = b.let_(&format!("{tag}_rows"), rows_g - &mt * bm as i64);
    TileAt { g, r0, rows, n0 }
}
