//! The weight and activation decoders of the main kernel (MXFP4 nibbles and E8M0 scales to bf16-exact values)
//! and the epilogue expression.

use super::*;

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
pub(super) fn dequant_x(
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
    per_thread(b, words, threads, |b, idx| {
        // Row and word of `idx` (>= 0): a shift and a mask where BK/4 is a power of two, else a division (BK=96:
        // the shift by its trailing zeros read rows past the tile).
        let pow2 = (wpr as u64).is_power_of_two();
        let r = b.let_("r", if pow2 { idx.shr(wpr.trailing_zeros() as i64) } else { &idx / wpr });
        b.if_(r.lt(rows_valid.clone()).and(idx.lt(words)), |b| {
            let w = b.let_("wi", if pow2 { idx.bitand(wpr - 1) } else { &idx % wpr });
            let word = b.let_("word", Expr::shared_load(sxq, slot.clone(), r.clone(), w.clone()));
            let scale = b.let_("scale", e8m0(Expr::shared_load(sxs, slot.clone(), r.clone(), w.shr(3i64))));
            for p in 0..4i64 {
                let v = fp8_value(word.shr(8 * p).bitand(0xffi64)) * scale.clone();
                b.shared_store(dst, index.clone(), r.clone(), w.shl(2i64) + p, v);
            }
        });
    });
}

/// The folded multiplier `2^126 * 2^(e-127)` of a scale byte (without the NaN select when no byte is 255).
pub(super) fn scale_mult(spec: &MatSpec, sb: Expr) -> Expr {
    if spec.finite { (sb + 126i64).shl(23i64).from_bits() } else { e8m0_times_2_126(sb) }
}

/// Decode a stage's weight words into the bf16 shared tile `dst[index]` (`[BN, BK]`): a threads region where
/// each thread takes whole 32-bit words (eight values: eight neighbouring columns in the natural layout, so one
/// address serves eight 2-byte stores; four column pairs in the packed layout) and its row's scale.
#[allow(clippy::too_many_arguments)]
pub(super) fn dequant_words(
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
    per_thread(b, words, threads, |b, idx| {
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
}

/// The GLU activations of SEMANTICS.md section 2.1 as an expression of the gate `a` and up `u` values.
pub fn epilogue_expr(e: Epilogue, a: Expr, u: Expr) -> Expr {
    match e {
        Epilogue::SituGlu => (&a * 0.25f64).tanh() * 4.0f64 * a.sigmoid() * ((&u * 0.04f64).tanh() * 25.0f64),
        Epilogue::SwiGlu => a.silu() * u,
        Epilogue::None => a,
    }
}
