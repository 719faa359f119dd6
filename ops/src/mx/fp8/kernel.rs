//! The dense MX x MX kernel on FP8 tensor cores (`MMA=fp8`, [`super`]): `y[M, N] = x[M, K] · w[N, K]^T` with
//! MXFP8 activations (E4M3 codes, E8M0 scales per 32 along K) and MXFP4 weights (E2M1 codes, natural layout).
//!
//! Per CTA a `BM x BN` output tile (BM/64 warpgroups, each its 64 token rows). A `STAGES`-deep `cp.async` ring
//! stages, per 128-wide K slice, the activation codes `[BM, 32]` words (128-byte Xor16B rows: the wgmma A operand
//! as they lie in memory), the activation scales `[BM, 4]`, the weight words `[BN, 16]` and scales `[BN, 4]`.
//! (F8V >= 2: the two code tiles by TMA on per-slot mbarriers, the scale rows by cp.async; F8V=1 copies all
//! four by every thread's cp.async.) Then per slice:
//! - a threads region converts each weight word (eight E2M1 codes) into two words of E4M3 codes in the shared
//!   B tile `[BN, 32]` words: code `s.e1e0.m` -> byte `s.0000.e1e0m.00`, which is the E2M1 value times 2^-6
//!   exactly (e = 0: the E4M3 subnormal m 2^-7 = 0.5 m 2^-6; else 2^(e-7)(1 + m/2) = 2^(e-1)(1 + m/2) 2^-6), so
//!   every product of the tensor core is exact; the 2^6 is applied once to the finished f32 accumulator;
//! - a threads region writes the slice's scale factors `2^(s - 127)` (NaN for 255) as f32 vectors (F8V >= 2:
//!   the weights' only; each thread's activation rows' factors go to row vectors in registers);
//! - per 32-wide scale block j: one `wgmma m64nBNk32 e4m3` into a temporary accumulator (two temporaries
//!   alternate, so block j+1's product runs while block j is promoted), then
//!   `acc += tmp * (fa[m, j] * fb[n, j])`: the factor is a product of two powers of two, exact in f32 wherever
//!   it is a normal or subnormal f32 (scale-byte sums 0..381; beyond that the f32 pipeline of every path
//!   overflows), and the block's 32 products summed in the tensor core are exact E4M3 x E4M3 products, so each
//!   block's term is the exact block dot product rounded once, then scaled exactly.
//!
//! Cost per 32-wide block and output element: one FMUL and one FFMA (2 FP32 ops against 32 FP8 MACs: at the
//! Hopper rates of 128 FP32 lanes and 4096 FP8 MACs per SM and clock the promotion takes twice the product's
//! time; see lab/2026-12-06/mx-fp8.md for the plan that cuts it to one op).

use super::super::{BLOCK, e8m0, per_thread};
use super::Fp8Cfg;
use crate::OpError;
use k3k_ir::*;

/// The bit masks of the E2M1 -> E4M3 x 2^-6 conversion (see the module docs).
const SIGN: i64 = 0x0808_0808;
const MAG: i64 = 0x0707_0707;

/// One E2M1 word (codes c0..c7 in nibbles 0..7) -> the E4M3 words `(c0..c3, c4..c7)`, each byte
/// `((c & 8) << 4) | ((c & 7) << 2)`.
pub fn e4m3_words(w: Expr) -> (Expr, Expr) {
    // Even codes (low nibbles) and odd codes (high nibbles) of each byte, converted in place.
    let lo = (w.bitand(SIGN).shl(4i64)).bitor(w.bitand(MAG).shl(2i64)); // bytes c0 c2 c4 c6
    let hi = w.bitand(SIGN << 4).bitor(w.shr(2i64).bitand(MAG << 2)); // bytes c1 c3 c5 c7
    // Interleave: t1 = [c0 c1 c4 c5], t2 = [c2 c3 c6 c7], then [c0 c1 c2 c3], [c4 c5 c6 c7].
    let t1 = lo.bitand(0x00ff_00ffi64).bitor(hi.shl(8i64).bitand(0xff00_ff00u32 as i64));
    let t2 = lo.shr(8i64).bitand(0x00ff_00ffi64).bitor(hi.bitand(0xff00_ff00u32 as i64));
    let out0 = t1.bitand(0xffffi64).bitor(t2.shl(16i64).bitand(0xffff_0000u32 as i64));
    let out1 = t1.shr(16i64).bitand(0xffffi64).bitor(t2.bitand(0xffff_0000u32 as i64));
    (out0, out1)
}

/// [`e4m3_words`] in fewer operations on 32-bit values (F8V >= 2; the same bytes): each half word's four codes
/// spread to the low nibbles of four bytes (`(x | x << 8) & 0x00ff00ff`, then `(s | s << 4) & 0x0f0f0f0f`),
/// then per byte `sign << 4 | mag << 2` as `z * 4 + (z & 0x08080808) * 12` (the sign moved from bit 5 to 7).
pub fn e4m3_words_lean(w: Expr) -> (Expr, Expr) {
    let spread = |x: Expr| {
        let s = x.clone().bitor(x.shl(8i64)).bitand(0x00ff_00ffi64);
        s.clone().bitor(s.shl(4i64)).bitand(0x0f0f_0f0fi64)
    };
    let f = |z: Expr| z.clone() * 4i64 + z.bitand(0x0808_0808i64) * 12i64;
    (f(spread(w.clone().bitand(0xffffi64))), f(spread(w.shr(16i64))))
}

/// One E4M3 word of the packed layout's block ([`crate::mx::pack`]): words `x` and `y` (the block's
/// words 2h and 2h + 1) hold, in pair q, the codes of columns 8q + 4h + {0, 1} and 8q + 4h + {2, 3}; the result is
/// output word 2q + h of the block, those four columns' E4M3 bytes (E2M1 value x 2^-6, as
/// [`e4m3_words_lean`]). Pair q < 3 rotated right by 3q puts its two codes at bits (6, 7, 8, 15) and (22, 23, 24,
/// 31) (mantissa, exponent low, exponent high, sign; the bf16 position of `Stmt::DequantFp4`); pair 3's bits (3, 4,
/// 0, 1) get there by one multiply (`fp4::PAIR3_MUL`: copies shifted by 3, 8 and 14, no carries). Then each code
/// moves to its byte as `s.000.e1e0m.00`.
pub fn packed_e4m3_word(x: &Expr, y: &Expr, q: u32) -> Expr {
    let z = |v: &Expr| -> Expr {
        match q {
            0 => v.clone(),
            1 | 2 => v.shr(3 * q as i64).bitor(v.shl(32 - 3 * q as i64)),
            _ => v.bitand(0x001b_001bi64) * (k3k_ir::fp4::PAIR3_MUL as i64),
        }
    };
    let (zx, zy) = (z(x), z(y));
    // x's two codes at (6..8, 15) and y's at (22..24, 31); then x's high code and y's high code likewise.
    let p = zx.bitand(0x81c0i64).bitor(zy.bitand(0x81c0i64).shl(16i64));
    let h = zx.shr(16i64).bitand(0x81c0i64).bitor(zy.bitand(0x81c0_0000i64));
    p.shr(4i64)
        .bitand(0x001c_001ci64)
        .bitor(p.shr(8i64).bitand(0x0080_0080i64))
        .bitor(h.shl(4i64).bitand(0x1c00_1c00i64))
        .bitor(h.bitand(0x8000_8000u32 as i64))
}

/// An E4M3 word of [`e4m3_words`] bytes `B = s.0.e1e0.m.00` (the E2M1 value v times 2^-6) -> the bytes of v times
/// 2^(u-6), exactly, for u in 0..=12: a nonzero magnitude adds u to the exponent field (`+ 8u`), except the
/// subnormal 0.5 (B = 4), which becomes the normal 2^(u-7) (`8u`, so `- 4`) when u >= 1; 6 x 2^6 = 384 <= 448,
/// no carry into the sign bit (28 + 96 < 128). Per byte, SIMD within the word.
pub fn fold_word(b: &mut KernelBuilder, w: Expr, u: &Expr) -> Expr {
    let w = b.let_("fw", w);
    let (b1, b2) = (w.shr(1i64), w.shr(2i64));
    let nz = w.clone().bitor(b1.clone()).bitor(b2.clone()).bitand(0x0404_0404i64);
    let one = w.clone().bitand(b1.bitxor(-1i64)).bitand(b2.bitxor(-1i64)).bitand(0x0404_0404i64);
    w + nz * (u.clone() * 2i64) - one * (u.clone() + 15i64).shr(4i64)
}

/// Build the dense kernel. Tensors: `xq: [M, KX] u32` (E4M3 codes, four per word), `xs: [M, KB] u8`,
/// `wq: [N, KW] u32` (natural layout words), `ws: [N, KB] u8`, `y: [M, N] bf16`; K = 4 KX = 8 KW = 32 KB.
pub fn build(c: &Fp8Cfg, kb_align: u32, out_vec: u32) -> Result<Kernel, OpError> {
    let (bm, bn, st) = (c.bm, c.bn, c.stages);
    let bk = 128u32;
    let wgs = bm / 64;
    let threads = 128 * wgs;
    let v2 = format!(
        "{}{}{}",
        if c.tma { "_tma" } else { "" },
        if c.fa_reg { "_fr" } else { "" },
        if c.fold { "_fold" } else { "" }
    );
    let name = format!("k3k_mxfp4_mm8_dense_s{kb_align}_o{out_vec}_bm{bm}_bn{bn}_st{st}_t{}{v2}", c.tmps);
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(c.knobs());
    let m = b.dim("M");
    let n = b.dim("N");
    let kb = b.dim("KB");
    let kx = b.dim("KX");
    let kw = b.dim("KW");
    let xq = b.tensor("xq", DType::U32, &[m.clone(), kx.clone()], Access::Read);
    let xs = b.tensor("xs", DType::U8, &[m.clone(), kb.clone()], Access::Read);
    let wq = b.tensor("wq", DType::U32, &[n.clone(), kw.clone()], Access::Read);
    let ws = b.tensor("ws", DType::U8, &[n.clone(), kb.clone()], Access::Read);
    let y = b.tensor("y", DType::Bf16, &[m.clone(), n.clone()], Access::Write);
    // F8V=3 (fold): `ws` holds the shifts u = sw - lo_n (0..=12) and `wl: [N] u8` the rows' lo_n.
    let wl = c.fold.then(|| b.tensor("wl", DType::U8, std::slice::from_ref(&n), Access::Read));
    let kd = kb.clone() * BLOCK as i64;

    let sxq = b.shared("sxq", DType::U32, bm, bk / 4, st, Swizzle::Xor16B);
    let sxs = b.shared("sxs", DType::U8, bm, bk / 32, st, Swizzle::None);
    let sq = b.shared("sq", DType::U32, bn, bk / 8, st, Swizzle::None);
    let ss = b.shared("ss", DType::U8, bn, bk / 32, st, Swizzle::None);
    let sw = b.shared("sw", DType::U32, bn, bk / 4, 1, Swizzle::Xor16B);
    let sfa = b.shared("sfa", DType::F32, bk / 32, bm, 1, Swizzle::None);
    let sfb = b.shared("sfb", DType::F32, bk / 32, bn, 1, Swizzle::None);
    let acc = b.tile("acc", DType::F32, bm, bn, [4 * wgs, 1]);
    let fa_vecs: Vec<VecId> =
        (0..if c.fa_reg { bk / 32 } else { 0 }).map(|j| b.vec(&format!("fa{j}"), bm, [4 * wgs, 1])).collect();
    let tmps: Vec<TileId> = (0..c.tmps).map(|i| b.tile(&format!("tmp{i}"), DType::F32, bm, bn, [4 * wgs, 1])).collect();

    b.grid(m.ceil_div(bm as i64), n.ceil_div(bn as i64), 1i64);
    let m0 = b.let_("m0", Expr::block_idx(0) * bm as i64);
    let n0 = b.let_("n0", Expr::block_idx(1) * bn as i64);
    let rows_valid = b.let_("rows_valid", m.clone() - m0.clone());
    let cols_valid = b.let_("cols_valid", n.clone() - n0.clone());
    let k_tiles = b.let_("k_tiles", kd.ceil_div(bk as i64));
    // Scale rows: the widest cp.async the alignment of KB allows (4 bytes per row and slice at most).
    let svec = [4u32, 2, 1].into_iter().find(|v| kb_align.is_multiple_of(*v)).unwrap_or(1);

    // LOAD=tma: the code tiles by TMA (one thread, completing on per-slot mbarriers; rows and K past the
    // ends read zero), the scale rows by cp.async (4-byte rows are below TMA's 16-byte box minimum).
    let tma = c.tma.then(|| {
        let xm = b.tensor_map("xq_map", xq, &[bk / 4, bm], Swizzle::Xor16B);
        let wm = b.tensor_map("wq_map", wq, &[bk / 8, bn], Swizzle::None);
        let full = b.mbarriers("full", st);
        b.mbar_init(full, 1);
        (xm, wm, full)
    });
    let stage_bytes = bm * bk + bn * bk / 2;
    let load = |b: &mut KernelBuilder, kt: Expr, slot: Expr| {
        let k0 = b.let_("k0", kt * bk as i64);
        let kleft = kd.clone() - k0.clone();
        let xs_src = view(xs, &m0 * kb.clone() + &k0 / 32i64, kb.clone(), rows_valid.clone(), &kleft / 32i64, svec);
        let ws_src = view(ws, &n0 * kb.clone() + &k0 / 32i64, kb.clone(), cols_valid.clone(), &kleft / 32i64, svec);
        let (dxq, dxs, dq, ds) =
            (b.slot(sxq, slot.clone()), b.slot(sxs, slot.clone()), b.slot(sq, slot.clone()), b.slot(ss, slot.clone()));
        if let Some((xm, wm, full)) = tma {
            b.mbar_arrive_expect_tx(full, slot.clone(), stage_bytes);
            b.tma_load(xm, dxq, vec![&k0 / 4i64, m0.clone()], full, slot.clone());
            b.tma_load(wm, dq, vec![&k0 / 8i64, n0.clone()], full, slot);
            b.copy_async(dxs, xs_src);
            b.copy_async(ds, ws_src);
        } else {
            b.copy_async(
                dxq,
                view(xq, &m0 * kx.clone() + &k0 / 4i64, kx.clone(), rows_valid.clone(), &kleft / 4i64, 4),
            );
            b.copy_async(dxs, xs_src);
            b.copy_async(dq, view(wq, &n0 * kw.clone() + &k0 / 8i64, kw.clone(), cols_valid.clone(), &kleft / 8i64, 4));
            b.copy_async(ds, ws_src);
        }
    };

    b.map(acc, 0.0f64);
    for s in 0..st - 1 {
        let s = Expr::Int(s as i64);
        b.if_(s.lt(k_tiles.clone()), |b| load(b, s.clone(), s.clone()));
        b.commit();
    }
    b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
        // Slice kt has landed (this thread's copies; the barrier makes everyone's visible).
        b.wait(st - 2);
        if let Some((_, _, full)) = tma {
            let slot = &kt % st as i64;
            b.mbar_wait(full, slot, (&kt / st as i64) % 2i64);
        }
        b.barrier();
        let next = &kt + (st - 1) as i64;
        // Its slot was last read by slice kt - 1, whose products and conversions are complete.
        b.if_(next.lt(k_tiles.clone()), |b| load(b, next.clone(), &next % st as i64));
        b.commit();
        let slot = b.let_("slot", &kt % st as i64);
        let fold = c.fold.then_some((ss, slot.clone()));
        convert_weights(b, (sq, sw), &slot, bn, threads, c.tma, fold);
        // PROMOTE=reg: the activation factors of this thread's rows in registers (row vectors, one per block);
        // smem: both factor vectors in shared memory, read per element.
        let fa: Vec<VecId> = if c.fa_reg {
            (0..bk / 32)
                .map(|j| {
                    let v = fa_vecs[j as usize];
                    b.vec_map(v, e8m0(Expr::shared_load(sxs, slot.clone(), Expr::RowIdx, j as i64)));
                    v
                })
                .collect()
        } else {
            vec![]
        };
        if !c.fold {
            scale_factors(b, (!c.fa_reg).then_some((sxs, sfa, bm)), (ss, sfb, bn), &slot, threads);
        }
        // The ordinary shared stores above, fenced for the async proxy, then visible to every warpgroup.
        b.wait(st - 1);
        b.barrier();
        let prod = |b: &mut KernelBuilder, j: u32, t: TileId| {
            let a = Operand::Shared { src: b.window(sxq, slot.clone(), 0, 8 * j, bm, 8), transpose: false };
            let w = Operand::Shared { src: b.window(sw, 0i64, 0, 8 * j, bn, 8), transpose: true };
            b.mma_async_init(t, a, w, false);
        };
        let promote = |b: &mut KernelBuilder, j: u32, t: TileId| {
            let a = match fa.get(j as usize) {
                Some(&v) => Expr::RowVal(v),
                None => Expr::shared_load(sfa, 0i64, j as i64, Expr::RowIdx),
            };
            let f = if c.fold { a } else { a * Expr::shared_load(sfb, 0i64, j as i64, Expr::ColIdx) };
            b.map(acc, Expr::Elem(acc) + Expr::Elem(t) * f);
        };
        let blocks = bk / 32;
        if tmps.len() == 1 {
            for j in 0..blocks {
                prod(b, j, tmps[0]);
                b.mma_wait(0);
                promote(b, j, tmps[0]);
            }
        } else {
            // Block j + 1's product in flight while block j is promoted.
            prod(b, 0, tmps[0]);
            for j in 0..blocks {
                if j + 1 < blocks {
                    prod(b, j + 1, tmps[((j + 1) % 2) as usize]);
                    b.mma_wait(1);
                } else {
                    b.mma_wait(0);
                }
                promote(b, j, tmps[(j % 2) as usize]);
            }
        }
        // Every warp is done with this slice's shared tiles before the next iteration refills or rewrites them.
        b.barrier();
    });
    b.wait(0);
    // The conversion's 2^-6 per weight value.
    match wl {
        // The folded weights' 2^(lo_n - 127) per column (the last tile's columns past N read row N - 1).
        Some(wl) => {
            let swl = b.shared("swl", DType::F32, 1, bn, 1, Swizzle::None);
            per_thread(&mut b, bn as i64, threads, |b, idx| {
                b.if_(idx.lt(bn as i64), |b| {
                    let col = (n0.clone() + idx.clone()).min(n.clone() - 1i64);
                    b.shared_store(swl, 0i64, 0i64, idx, e8m0(Expr::load(wl, col)) * 64.0f64);
                });
            });
            b.barrier();
            b.map(acc, Expr::Elem(acc) * Expr::shared_load(swl, 0i64, 0i64, Expr::ColIdx));
        }
        None => b.map(acc, Expr::Elem(acc) * 64.0f64),
    }
    let off = &m0 * n.clone() + n0.clone();
    b.store(acc, Place::Global(view(y, off, n.clone(), rows_valid.clone(), cols_valid.clone(), out_vec)));
    Ok(b.finish()?)
}

/// The weight words of slot `slot` (`[BN, 16]`, eight E2M1 codes each) -> the E4M3 words of `sw` (`[BN, 32]`).
/// `lean` (F8V >= 2): [`e4m3_words_lean`], and no bounds test where the threads divide the words.
/// `fold` (F8V=3): the weight scales folded into the codes: each word of block j of row r times 2^u with u =
/// `ss[slot][r][j]` in 0..=12 ([`fold_word`]).
fn convert_weights(
    b: &mut KernelBuilder,
    (sq, sw): (SharedId, SharedId),
    slot: &Expr,
    bn: u32,
    threads: u32,
    lean: bool,
    fold: Option<(SharedId, Expr)>,
) {
    let words = (bn * 16) as i64;
    let body = |b: &mut KernelBuilder, idx: Expr| {
        let r = b.let_("r", idx.shr(4i64));
        let col = b.let_("col", idx.bitand(15i64));
        let w = b.let_("w", Expr::shared_load(sq, slot.clone(), r.clone(), col.clone()));
        let (mut o0, mut o1) = if lean { e4m3_words_lean(w) } else { e4m3_words(w) };
        if let Some((ss, sslot)) = &fold {
            let u = b.let_("u", Expr::shared_load(*ss, sslot.clone(), r.clone(), col.shr(2i64)));
            o0 = fold_word(b, o0, &u);
            o1 = fold_word(b, o1, &u);
        }
        b.shared_store(sw, 0i64, r.clone(), col.shl(1i64), o0);
        b.shared_store(sw, 0i64, r, col.shl(1i64) + 1i64, o1);
    };
    per_thread(b, words, threads, |b, idx| {
        if lean && words % threads as i64 == 0 {
            body(b, idx);
        } else {
            b.if_(idx.lt(words), |b| body(b, idx.clone()));
        }
    });
}

/// The scale factors `2^(s - 127)` (NaN for 255) of slot `slot`'s activation rows and weight rows, as f32
/// vectors `fa: [4, BM]` and `fb: [4, BN]` (one row per 32-wide block of the slice).
fn scale_factors(
    b: &mut KernelBuilder,
    act: Option<(SharedId, SharedId, u32)>,
    wgt: (SharedId, SharedId, u32),
    slot: &Expr,
    threads: u32,
) {
    for (src, dst, rows) in act.into_iter().chain([wgt]) {
        let total = (rows * 4) as i64;
        per_thread(b, total, threads, |b, idx| {
            b.if_(idx.lt(total), |b| {
                let r = b.let_("r", idx.shr(2i64));
                let j = b.let_("j", idx.bitand(3i64));
                let s = Expr::shared_load(src, slot.clone(), r.clone(), j.clone());
                b.shared_store(dst, 0i64, j, r, e8m0(s));
            });
        });
    }
}
