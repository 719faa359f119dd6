//! The mma.sync decode kernel ([`build_decode`], [`build_decode_direct`]): its tensors, per-block state, mask
//! and body.

use super::*;

/// Build the split-KV decode kernel.
///
/// Tensor arguments, in order: `q [B, SQ, H, D]` bf16, `kv [NBLK, PAGE, D]` bf16 (the paged latent cache),
/// `block_table [B, MAXB]` i32, `cache_seqlens [B]` i32, then the workspace outputs `o_part [B, NSPLIT, SQ, H,
/// DV]` f32 (each split's output normalised by its own softmax sum; 0 where it saw no key) and `lse_part [B,
/// NSPLIT, SQ, H]` f32 (log2-domain `m + log2(l)`, -inf where it saw no key). Scalar: `scale` (tau, float).
/// Grid: `(ceil(SQ*H / BM), NSPLIT, B)`. Query i of s_q sees keys `[0, S_k - SQ + i]`. Split s of a request
/// takes KV tiles `[s*c, min((s+1)*c, n))`, `c = ceil(n / NSPLIT)`, of the `n` tiles its rows can see.
pub fn build_decode(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    build_decode_impl(spec, knobs, false)
}

/// The decode kernel for one query per request and one split, writing the final outputs itself (no
/// workspace, no combine launch).
///
/// Tensor arguments, in order: `q [B, 1, H, D]` bf16, `kv [NBLK, PAGE, D]` bf16, `block_table [B, MAXB]` i32,
/// `cache_seqlens [B]` i32, then the outputs `o [B, 1, H, DV]` bf16 and `lse [B, H, 1]` f32 (natural log,
/// +inf and o = 0 for a request without keys), exactly what [`build_decode`] + [`build_decode_combine`] write
/// with `NSPLIT = 1`. Scalar: `scale`. Grid: `(ceil(H / BM), 1, B)`.
pub fn build_decode_direct(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    build_decode_impl(spec, knobs, true)
}

/// The arguments both decode kernels take, declared in the order [`build_decode`] and [`build_decode_direct`]
/// document (direct: SQ and NSPLIT are 1, the outputs are o and lse).
pub(super) struct DecodeIo {
    pub(super) bsz: Expr,
    pub(super) sqd: Expr,
    pub(super) h: Expr,
    pub(super) maxb: Expr,
    pub(super) nsplit: Expr,
    pub(super) q: TensorId,
    pub(super) kv: TensorId,
    pub(super) bt: TensorId,
    pub(super) seqlens: TensorId,
    pub(super) o_part: TensorId,
    pub(super) lse_part: TensorId,
    pub(super) scale: Expr,
}

pub(super) fn decode_io(b: &mut KernelBuilder, spec: &DecodeSpec, direct: bool) -> DecodeIo {
    let (d, dv, page) = (spec.d, spec.dv, spec.page);
    let bsz = b.dim("B");
    let sqd = if direct { Expr::Int(1) } else { b.dim("SQ") };
    let h = b.dim("H");
    let nblk = b.dim("NBLK");
    let maxb = b.dim("MAXB");
    let nsplit = if direct { Expr::Int(1) } else { b.dim("NSPLIT") };
    let q = b.tensor("q", DType::Bf16, &[bsz.clone(), sqd.clone(), h.clone(), Expr::from(d)], Access::Read);
    let kv = b.tensor("kv", DType::Bf16, &[nblk, Expr::from(page), Expr::from(d)], Access::Read);
    let bt = b.tensor("block_table", DType::I32, &[bsz.clone(), maxb.clone()], Access::Read);
    let seqlens = b.tensor("cache_seqlens", DType::I32, std::slice::from_ref(&bsz), Access::Read);
    // Split-KV: normalised f32 partials and log2-domain LSEs; direct: o (bf16) and the natural-log lse.
    let (o_part, lse_part) = if direct {
        decode_outputs(b, [&bsz, &sqd, &h], dv)
    } else {
        split_partials(b, [&bsz, &nsplit, &sqd, &h], dv, Access::Write)
    };
    let scale = b.float_arg("scale");
    DecodeIo { bsz, sqd, h, maxb, nsplit, q, kv, bt, seqlens, o_part, lse_part, scale }
}

/// A decode block's coordinates (its split, request and first packed row, the request's packed rows and how many
/// lie at or past the block's first) and the KV tiles it walks: the request's cache length `s_k`, this split's first
/// tile `t0` and tile `count` (the splits partition the tiles of the keys the block's last query may see), the
/// causal diagonal of its first query and the log2-domain scale.
pub(super) struct DecodeBlock {
    pub(super) split: Expr,
    pub(super) bi: Expr,
    pub(super) rows_total: Expr,
    pub(super) m0: Expr,
    pub(super) rows_valid: Expr,
    pub(super) s_k: Expr,
    pub(super) t0: Expr,
    pub(super) count: Expr,
    pub(super) diag: Expr,
    pub(super) scale_log2: Expr,
}

/// The decode's mask of a KV tile starting at key `kv0` of an m-tile starting at packed row `m0`: whether the tile
/// reaches past `diag` (the causal diagonal of the block's first query, so that some pair may be masked), and
/// which (row, key) pairs are visible (query `(m0 + row) / H` of `SQ` sees keys `[0, S_k - SQ + query]`).
pub(super) fn decode_mask(
    kv0: &Expr,
    m0: &Expr,
    h: &Expr,
    s_k: &Expr,
    sqd: &Expr,
    diag: &Expr,
    bn: u32,
) -> (Expr, Expr) {
    let key = kv0.clone() + Expr::ColIdx;
    let query = (m0.clone() + Expr::RowIdx) / h.clone();
    let visible = key.lt(s_k.clone()).and(key.le(s_k.clone() - sqd.clone() + query));
    ((kv0.clone() + (bn as i64 - 1)).gt(diag.clone()), visible)
}

/// The coordinates and KV range of the block on m-tile `mt` (grid y: split, z: request), both decode kernels'.
pub(super) fn decode_block(b: &mut KernelBuilder, io: &DecodeIo, mt: Expr, bm: u32, bn: u32) -> DecodeBlock {
    let (sqd, h) = (&io.sqd, &io.h);
    let split = b.let_("split", Expr::block_idx(1));
    let bi = b.let_("req", Expr::block_idx(2));
    let rows_total = b.let_("rows_total", sqd.clone() * h.clone());
    let m0 = b.let_("m0", mt * bm as i64);
    let rows_valid = b.let_("rows_valid", rows_total.clone() - m0.clone());
    let s_k = b.let_("s_k", load(io.seqlens, bi.clone()));
    let i_lo = b.let_("i_lo", m0.clone() / h.clone());
    let i_hi = b.let_("i_hi", ((m0.clone() + bm as i64).min(rows_total.clone()) - 1i64) / h.clone());
    // Keys the tile's last query may see; the splits partition their tiles.
    let n_keys = b.let_("n_keys", (s_k.clone() - sqd.clone() + 1i64 + i_hi).min(s_k.clone()).max(0i64));
    let n_tiles = b.let_("n_tiles", n_keys.ceil_div(bn as i64));
    let per_split = b.let_("per_split", n_tiles.ceil_div(io.nsplit.clone()));
    let t0 = b.let_("t0", (split.clone() * per_split.clone()).min(n_tiles.clone()));
    let count = b.let_("count", (t0.clone() + per_split).min(n_tiles) - t0.clone());
    let diag = b.let_("diag", s_k.clone() - sqd.clone() + i_lo);
    let scale_log2 = b.let_("scale_log2", io.scale.clone() * LOG2_E);
    DecodeBlock { split, bi, rows_total, m0, rows_valid, s_k, t0, count, diag, scale_log2 }
}

pub(super) fn build_decode_impl(spec: &DecodeSpec, knobs: &Knobs, direct: bool) -> Result<Kernel, OpError> {
    let c = decode_cfg(spec, knobs)?;
    if c.wgmma {
        return build_decode_wgmma(spec, knobs, &c, direct);
    }
    let (bm, bn, st) = (c.bm, c.bn, c.stages);
    let (d, dv) = (spec.d, spec.dv);
    let mut b = KernelBuilder::new(&DecodeCfg::kernel_name(spec, knobs, direct), c.threads());
    b.knobs(knobs.clone());
    let io = decode_io(&mut b, spec, direct);
    b.grid((io.sqd.clone() * io.h.clone()).ceil_div(bm as i64), io.nsplit.clone(), io.bsz.clone());

    let s_warps = [c.wm, 1];
    let acc_warps = [c.wm, c.wn];
    // Q and the cache rows are stored as KC-column chunks: the score product walks all of them in a rolled
    // loop, the value product reads the first DV / KC of them into one accumulator tile each.
    let (nch, nv) = (d / KC, dv / KC);
    let sq = b.shared("sQ", DType::Bf16, bm, KC, nch, Swizzle::Xor16B);
    let skv = b.shared("sKV", DType::Bf16, bn, KC, st * nch, Swizzle::Xor16B);
    let s = b.tile("s", DType::F32, bm, bn, s_warps);
    let p = b.tile("p", DType::Bf16, bm, bn, s_warps);
    let accs: Vec<TileId> = (0..nv).map(|c| b.tile(&format!("acc{c}"), DType::F32, bm, KC, acc_warps)).collect();
    // With shared scores each warp computes a [BM/WM, BN/SWN] block of the scores (no redundant products
    // when SWN = WN; WN/SWN warps share a block otherwise) and the full rows are read back from shared memory
    // onto the [WM, 1] tile the softmax needs.
    let exchange = c.shared_scores.then(|| {
        let sw = b.tile("s_split", DType::F32, bm, bn, [c.wm, c.swn]);
        let ss = b.shared("sS", DType::F32, bm, bn, 1, Swizzle::Xor16B);
        (sw, ss)
    });
    let s_calc = exchange.map_or(s, |(sw, _)| sw);
    // Extra partial score accumulators (QK_ACCS > 1), on the same warps as the tile they are summed into.
    let s_parts: Vec<TileId> = (1..c.qk_accs)
        .map(|i| {
            let w = if c.shared_scores { [c.wm, c.swn] } else { s_warps };
            b.tile(&format!("s_part{i}"), DType::F32, bm, bn, w)
        })
        .collect();
    let sm = OnlineSoftmax::new(&mut b, bm, s_warps, acc_warps);
    let inv_l = b.vec("inv_l", bm, acc_warps);
    let lse_v = b.vec("lse_rows", bm, s_warps);

    let mt = Expr::block_idx(0);
    let blk = decode_block(&mut b, &io, mt, bm, bn);
    let mut ring = KvRing::new(&mut b, spec, &c, &io, &blk, skv);
    let DecodeBlock { split, bi, rows_total, m0, rows_valid, s_k, t0, count, diag, scale_log2 } = blk;
    let DecodeIo { sqd, h, nsplit, q, o_part, lse_part, .. } = io;
    ring.prologue(&mut b, q, sq, &rows_total, &m0, &rows_valid, c.bt_prefetch);
    sm.init(&mut b);
    for &acc in &accs {
        b.map(acc, 0.0f64);
    }
    b.for_("j", 0i64, count.clone(), 1i64, |b, j| {
        ring.step(b, &j);
        if c.tma {
            // The ring's copies need no block barrier; the score exchange below relies on one per iteration.
            b.barrier();
        }
        let slot = &j % st as i64;
        let kv0 = b.let_("kv0", (t0.clone() + j.clone()) * bn as i64);
        b.map(s_calc, 0.0f64);
        if s_parts.is_empty() {
            qk_chunks(b, s_calc, sq, skv, slot.clone() * nch as i64, nch, false, QkMma::Sync);
        } else {
            // Chunk c goes to partial c % QK_ACCS: QK_ACCS independent chains of products, summed after.
            let all: Vec<TileId> = std::iter::once(s_calc).chain(s_parts.iter().copied()).collect();
            for &t in &s_parts {
                b.map(t, 0.0f64);
            }
            let na = all.len() as i64;
            b.for_("chunk", 0i64, nch as i64 / na, 1i64, |b, it| {
                for (i, &t) in all.iter().enumerate() {
                    let c = it.clone() * na + i as i64;
                    let qa = Operand::Shared { src: b.slot(sq, c.clone()), transpose: false };
                    let kb = Operand::Shared { src: b.slot(skv, slot.clone() * nch as i64 + c), transpose: true };
                    b.mma(t, qa, kb);
                }
            });
            let sum = s_parts.iter().fold(el(s_calc), |acc, &t| acc + el(t));
            b.map(s_calc, sum);
        }
        let (crosses, visible) = decode_mask(&kv0, &m0, &h, &s_k, &sqd, &diag, bn);
        mask_scores(b, s_calc, crosses, visible, &scale_log2, false);
        if let Some((sw, ss)) = exchange {
            // The previous iteration's reads of sS finished before this iteration's first barrier.
            let dst = b.slot(ss, 0i64);
            b.store(sw, Place::Shared(dst));
            b.barrier();
            let src = b.slot(ss, 0i64);
            b.load(s, Place::Shared(src));
        }
        sm.step(b, s, p, &accs);
        // Values: the first DV columns of the same cache rows.
        for (c, &acc) in accs.iter().enumerate() {
            let vb = Operand::Shared { src: b.slot(skv, slot.clone() * nch as i64 + c as i64), transpose: false };
            b.mma(acc, Operand::Reg(p), vb);
        }
        ring.release(b, &j);
    });
    b.wait(0);
    b.vec_map(inv_l, sm.inv_l());
    let part_row = b.let_("part_row", (bi * nsplit + split) * rows_total + m0);
    for (c, &acc) in accs.iter().enumerate() {
        b.map(acc, el(acc) * rv(inv_l));
        // (16-byte stores of bf16 o, 4-element groups of f32 partials: every offset is a multiple of KC.)
        let dst = view(
            o_part,
            part_row.clone() * dv as i64 + (c as u32 * KC) as i64,
            dv as i64,
            rows_valid.clone(),
            KC as i64,
            if direct { 8 } else { 4 },
        );
        b.store(acc, Place::Global(dst));
    }
    // Direct (one query, one split): row r of the tile is head m0 + r, at lse[(req * H + head) * 1 + 0].
    b.vec_map(lse_v, if direct { sm.lse_nat() } else { sm.lse_log2() });
    b.store_vec(lse_v, vec_view(lse_part, part_row, 1i64, rows_valid));
    Ok(b.finish()?)
}
