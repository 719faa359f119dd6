//! The K loop of `MMA=f8sync` (see `f8sync.rs`): MXFP8 activations staged once per tile as E4M3 words, MXFP4
//! weights streamed through the tile path's ring and converted exactly to E4M3 (times 2^-6), one E4M3 `mma.sync`
//! per 32-wide block into a zeroed temporary, promoted into the f32 accumulator with both scales (the activation
//! factors carry the conversion's 2^6, so no partial sum is ever 2^6 smaller than its value). The epilogue
//! is the mma.sync path's (`tile_sync.rs`).

use super::*;
use crate::mx::fp8::kernel::{e4m3_words_lean, packed_e4m3_word};
use crate::mx::{e8m0, per_thread};

/// The shared buffers and the temporary accumulator of `MMA=f8sync`.
#[derive(Clone, Copy, Debug)]
pub(super) struct F8Bufs {
    /// The tile's activation codes, `[BM, BK/4]` u32 words per K tile of its range (`XK / BK` slots, Xor16B).
    sxq: SharedId,
    /// Their scale bytes, `[BM, BK/32]` per K tile.
    sxs: SharedId,
    /// Their factors times the weights' 2^6, `2^(s - 121)` (NaN for 255), `[BK/32, BM]` f32 per K tile.
    sfa: SharedId,
    /// The current stage's weights as E4M3 words (values x 2^-6), `[BN, BK/4]` (Xor16B).
    sw: SharedId,
    /// The current stage's weight factors, `[BK/32, BN]` f32.
    sfw: SharedId,
    /// One block's product, `[BN, BM]` f32 on the accumulator's warps.
    tmp: TileId,
}

impl F8Bufs {
    pub(super) fn declare(b: &mut KernelBuilder, c: &Cfg) -> F8Bufs {
        let (bm, bn, bk) = (c.bm, c.bn, c.bk);
        let xs = (c.xk / bk).max(1);
        F8Bufs {
            sxq: b.shared("sxq", DType::U32, bm, bk / 4, xs, Swizzle::Xor16B),
            sxs: b.shared("sxs", DType::U8, bm, bk / 32, xs, Swizzle::None),
            sfa: b.shared("sfa", DType::F32, bk / 32, bm, xs, Swizzle::None),
            sw: b.shared("sw", DType::U32, bn, bk / 4, 1, Swizzle::Xor16B),
            sfw: b.shared("sfw", DType::F32, bk / 32, bn, 1, Swizzle::None),
            tmp: b.tile("tmp", DType::F32, bn, bm, [c.wa, c.wb]),
        }
    }
}

impl MainKernel<'_> {
    /// MMA=f8sync: stage the tile's activations once, then per K tile convert the ring's weights to E4M3 and
    /// multiply per 32-wide block; the `[BN, BM]` accumulator ends in `sacc` for the epilogue.
    pub(super) fn f8_k_loop(&self, b: &mut KernelBuilder, tc: &TileCtx, acc: TileId, f8: &F8Bufs, sacc: SharedId) {
        let (spec, c, threads, bm, bn, bk, st) =
            (self.spec, self.c, self.threads, self.c.bm, self.c.bn, self.c.bk, self.c.stages);
        let (x, xs) = (self.x, self.xs.expect("MXFP8 activation scales"));
        let (sq, ss) = self.sqs.expect("the weight ring");
        let (row0, m0, rows_valid, kbeg, kend) = (&tc.row0, &tc.m0, &tc.rows_valid, &tc.kbeg, &tc.kend);
        let slots = (c.xk / bk).max(1);
        let blocks = bk / 32;
        b.map(acc, 0.0f64);
        // The tile's activation codes and scales for its whole K range: one commit group, before the ring's.
        let kd = self.kd.clone();
        let (kx, kb4) = (kd.clone() / 4i64, kd / 32i64);
        let rows = row0 + m0.clone();
        // Scale rows: the widest copy K/32 and BK/32 allow (as the ring's weight scales).
        let svec = scale_vec(spec, c);
        for i in 0..slots {
            let k0 = kbeg + (i * bk) as i64;
            let kleft = (kend - k0.clone()).max(0i64);
            let dq = b.slot(f8.sxq, i as i64);
            b.copy_async(
                dq,
                view(x, &rows * kx.clone() + &k0 / 4i64, kx.clone(), rows_valid.clone(), &kleft / 4i64, 4),
            );
            let ds = b.slot(f8.sxs, i as i64);
            let sv = view(xs, &rows * kb4.clone() + &k0 / 32i64, kb4.clone(), rows_valid.clone(), &kleft / 32i64, svec);
            b.copy_async(ds, sv);
        }
        b.commit();
        self.ring_prologue(b, tc);
        // The activations have landed (the ring's first STAGES - 1 groups may still be in flight): their factors.
        b.wait(st - 1);
        b.barrier();
        let per_slot = (bm * blocks) as i64;
        per_thread(b, slots as i64 * per_slot, threads, |b, idx| {
            b.if_(idx.lt(slots as i64 * per_slot), |b| {
                let s = b.let_("s", &idx / per_slot);
                let rem = b.let_("rem", &idx % per_slot);
                let r = b.let_("r", &rem / blocks as i64);
                let j = b.let_("j", &rem % blocks as i64);
                let sa = Expr::shared_load(f8.sxs, s.clone(), r.clone(), j.clone());
                // (x 2^6: the weight conversion's 2^-6, exact; activation scales stay far below 248.)
                b.shared_store(f8.sfa, s, j, r, e8m0(sa) * 64.0f64);
            });
        });
        // (The loop's first barrier orders these stores before the products.)
        self.ring_loop(b, tc, |b, kt, slot| {
            let (kt, slot) = (kt.clone(), slot.clone());
            convert_weights(b, (sq, ss), f8, &slot, (bn, bk, threads), spec.packed);
            b.barrier();
            for j in 0..blocks {
                b.map(f8.tmp, 0.0f64);
                let a = b.window(f8.sw, 0i64, 0, 8 * j, bn, 8);
                let xw = b.window(f8.sxq, kt.clone(), 0, 8 * j, bm, 8);
                b.mma(
                    f8.tmp,
                    Operand::Shared { src: a, transpose: false },
                    Operand::Shared { src: xw, transpose: true },
                );
                let fw = Expr::shared_load(f8.sfw, 0i64, j as i64, Expr::RowIdx);
                let fa = Expr::shared_load(f8.sfa, kt.clone(), j as i64, Expr::ColIdx);
                b.map(acc, Expr::Elem(acc) + Expr::Elem(f8.tmp) * (fw * fa));
            }
        });
        // The transpose through shared memory.
        let sw = b.window(sacc, 0i64, 0, 0, bn, bm);
        b.store(acc, Place::Shared(sw));
        b.barrier();
    }
}

/// The ring slot `slot`'s weights (`sq`: `[BN, BK/8]` words of eight E2M1 codes, natural or packed layout; `ss`:
/// `[BN, BK/32]` scale bytes) -> the E4M3 words of `sw` (`[BN, BK/4]`, natural K order) and the factors of `sfw`
/// (`[BK/32, BN]`).
fn convert_weights(
    b: &mut KernelBuilder,
    (sq, ss): (SharedId, SharedId),
    f8: &F8Bufs,
    slot: &Expr,
    (bn, bk, threads): (u32, u32, u32),
    packed: bool,
) {
    let wpr = (bk / 8) as i64;
    if packed {
        // One item per (row, block, half h): words 2h and 2h + 1 of the block -> its output words 2q + h.
        let halves = (bk / 16) as i64;
        let items = bn as i64 * halves;
        per_thread(b, items, threads, |b, idx| {
            b.if_(idx.lt(items), |b| {
                let r = b.let_("r", &idx / halves);
                let hb = b.let_("hb", &idx % halves);
                let (blk, h) = (&hb / 2i64, &hb % 2i64);
                let wcol = b.let_("wcol", &blk * 4i64 + &h * 2i64);
                let xw = b.let_("xw", Expr::shared_load(sq, slot.clone(), r.clone(), wcol.clone()));
                let yw = b.let_("yw", Expr::shared_load(sq, slot.clone(), r.clone(), &wcol + 1i64));
                let ocol = b.let_("ocol", &blk * 8i64 + h);
                for q in 0..4u32 {
                    let out = packed_e4m3_word(&xw, &yw, q);
                    b.shared_store(f8.sw, 0i64, r.clone(), &ocol + (2 * q) as i64, out);
                }
            });
        });
    } else {
        // One item per word: eight codes -> two output words.
        let items = bn as i64 * wpr;
        per_thread(b, items, threads, |b, idx| {
            b.if_(idx.lt(items), |b| {
                let r = b.let_("r", &idx / wpr);
                let col = b.let_("col", &idx % wpr);
                let w = b.let_("w", Expr::shared_load(sq, slot.clone(), r.clone(), col.clone()));
                let (o0, o1) = e4m3_words_lean(w);
                b.shared_store(f8.sw, 0i64, r.clone(), &col * 2i64, o0);
                b.shared_store(f8.sw, 0i64, r, &col * 2i64 + 1i64, o1);
            });
        });
    }
    let blocks = (bk / 32) as i64;
    let items = bn as i64 * blocks;
    per_thread(b, items, threads, |b, idx| {
        b.if_(idx.lt(items), |b| {
            let r = b.let_("r", &idx / blocks);
            let j = b.let_("j", &idx % blocks);
            let s = Expr::shared_load(ss, slot.clone(), r.clone(), j.clone());
            b.shared_store(f8.sfw, 0i64, j, r, e8m0(s));
        });
    });
}
