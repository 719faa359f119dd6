//! The log-sum-exp merge of the decode splits ([`build_decode_combine`]) and its knobs ([`CombineKnobs`]).

use super::*;

knob_set! {
    /// The knobs of the split merge ([`build_decode_combine`]), read from a record by
    /// [`CombineKnobs::from_knobs`]. The default record: 128 value columns per block, so that 128 requests of 12
    /// heads make 512 blocks (one block per request, as before, left most SMs with one block of 4 warps).
    pub struct CombineKnobs for "gated_mla_decode_combine" {
        /// `BM`: heads per block.
        bm: u32 = "BM" => { axis: "heads per block" [16, 32], default: 16, },
        /// `WM`: warp rows.
        wm: u32 = "WM" => { axis: "warp rows" [1, 2], default: 1, },
        /// `WN`: warp columns over the value width.
        wn: u32 = "WN" => { axis: "warp columns over the value width" [2, 4, 8], default: 4, },
        /// `BC` (absent: `None`, every value column in one block): value columns per block.
        bc: Option<u32> = "BC" => {
            axis: "value columns per block (the grid's x covers head tiles times DV / BC)" [Some(128), Some(512)],
            default: Some(128),
            absent: None,
        },
    }
}

/// The combine tuning knobs (see [`CombineKnobs`]).
pub fn combine_knob_space() -> KnobSpace {
    CombineKnobs::space()
}

/// The combine knobs used when no tuning record exists (see [`CombineKnobs`]).
pub fn combine_default_knobs() -> Knobs {
    CombineKnobs::defaults()
}

/// The split partials, written by the split kernels ([`build_decode`]) and read by the combine: `o_part [B,
/// NSPLIT, SQ, H, DV]` f32 and `lse_part [B, NSPLIT, SQ, H]` f32, from the dims `[B, NSPLIT, SQ, H]`.
pub(super) fn split_partials(b: &mut KernelBuilder, dims: [&Expr; 4], dv: u32, access: Access) -> (TensorId, TensorId) {
    let [bsz, nsplit, sqd, h] = dims.map(Expr::clone);
    let o_part =
        b.tensor("o_part", DType::F32, &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone(), Expr::from(dv)], access);
    let lse_part = b.tensor("lse_part", DType::F32, &[bsz, nsplit, sqd, h], access);
    (o_part, lse_part)
}

/// The decode's outputs, written by the combine or by the one-split kernel ([`build_decode_direct`]): `o [B, SQ,
/// H, DV]` bf16 and `lse [B, H, SQ]` f32, from the dims `[B, SQ, H]`.
pub(super) fn decode_outputs(b: &mut KernelBuilder, dims: [&Expr; 3], dv: u32) -> (TensorId, TensorId) {
    let [bsz, sqd, h] = dims.map(Expr::clone);
    let o = b.tensor("o", DType::Bf16, &[bsz.clone(), sqd.clone(), h.clone(), Expr::from(dv)], Access::Write);
    let lse = b.tensor("lse", DType::F32, &[bsz, h, sqd], Access::Write);
    (o, lse)
}

/// Build the split-merge kernel of decode.
///
/// Tensor arguments, in order: `o_part [B, NSPLIT, SQ, H, DV]` f32 and `lse_part [B, NSPLIT, SQ, H]` f32 (as
/// written by [`build_decode`]), outputs `o [B, SQ, H, DV]` bf16 and `lse [B, H, SQ]` f32 (natural log, +inf
/// for a query that saw no key, whose o is 0). Grid: `(ceil(H / BM) * DV / BC, SQ, B)` (`BC`, the value columns
/// per block, defaults to DV when absent).
pub fn build_decode_combine(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    const OP: &str = CombineKnobs::OP;
    let t = CombineKnobs::from_knobs(knobs)?;
    let (bm, wm, wn, bc) = (t.bm, t.wm, t.wn, t.bc.unwrap_or(spec.dv));
    if bc == 0 || !spec.dv.is_multiple_of(bc) {
        return invalid(OP, knobs, format!("BC={bc} must divide DV={}", spec.dv));
    }
    if wm == 0 || wn == 0 || wm * wn > 16 || bm == 0 || bm % (16 * wm) != 0 || !bc.is_multiple_of(8 * wn) {
        return invalid(OP, knobs, format!("BM={bm} WM={wm} WN={wn} do not tile {bm}x{bc}"));
    }
    let threads = 32 * wm * wn;
    if threads > 256 || 2 * bm * bc / threads > 128 {
        return invalid(OP, knobs, "at most 8 warps and 128 tile registers per thread".into());
    }
    let dv = spec.dv;
    let ncb = (dv / bc) as i64;
    let name = format!("k3k_mla_decode_combine_dv{dv}_{}", knobs.id().to_lowercase());
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(knobs.clone());
    let bsz = b.dim("B");
    let nsplit = b.dim("NSPLIT");
    let sqd = b.dim("SQ");
    let h = b.dim("H");
    let (o_part, lse_part) = split_partials(&mut b, [&bsz, &nsplit, &sqd, &h], dv, Access::Read);
    let (o, lse) = decode_outputs(&mut b, [&bsz, &sqd, &h], dv);
    b.grid(h.ceil_div(bm as i64) * ncb, sqd.clone(), bsz);

    let warps = [wm, wn];
    let acc = b.tile("acc", DType::F32, bm, bc, warps);
    let part = b.tile("o_split", DType::F32, bm, bc, warps);
    let mx = b.vec("m", bm, warps);
    let mu = b.vec("mu", bm, warps);
    let lj = b.vec("lse_split", bm, warps);
    let w = b.vec("w", bm, warps);
    let sum = b.vec("sum", bm, warps);
    let out = b.vec("out", bm, warps);

    let h0 = b.let_("h0", Expr::block_idx(0) / ncb * bm as i64);
    let c0 = b.let_("c0", Expr::block_idx(0) % ncb * bc as i64);
    let qi = b.let_("query", Expr::block_idx(1));
    let bi = b.let_("req", Expr::block_idx(2));
    let rows = b.let_("rows", h.clone() - h0.clone());
    let part_row =
        |s: &Expr| ((bi.clone() * nsplit.clone() + s.clone()) * sqd.clone() + qi.clone()) * h.clone() + h0.clone();

    b.vec_map(mx, NEG_INF);
    b.for_("split", 0i64, nsplit.clone(), 1i64, |b, s| {
        b.load_vec(lj, vec_view(lse_part, part_row(&s), 1i64, rows.clone()));
        b.vec_map(mx, rv(mx).max(rv(lj)));
    });
    b.vec_map(mu, Expr::select(rv(mx).eq(NEG_INF), 0.0f64, rv(mx)));
    b.vec_map(sum, 0.0f64);
    b.map(acc, 0.0f64);
    b.for_("split", 0i64, nsplit.clone(), 1i64, |b, s| {
        b.load_vec(lj, vec_view(lse_part, part_row(&s), 1i64, rows.clone()));
        b.vec_map(w, (rv(lj) - rv(mu)).exp2());
        b.vec_map(sum, rv(sum) + rv(w));
        let src = view(o_part, part_row(&s) * dv as i64 + c0.clone(), dv as i64, rows.clone(), bc as i64, 2);
        b.load(part, Place::Global(src));
        b.map(acc, el(acc) + rv(w) * el(part));
    });
    b.vec_map(out, Expr::select(rv(sum).gt(0.0f64), rv(sum).recip(), 0.0f64));
    b.map(acc, el(acc) * rv(out));
    let o_off = ((bi.clone() * sqd.clone() + qi.clone()) * h.clone() + h0.clone()) * dv as i64 + c0.clone();
    b.store(acc, Place::Global(view(o, o_off, dv as i64, rows.clone(), bc as i64, 8)));
    // The LSE once per head tile (by its first column block).
    b.if_(c0.eq(0i64), |b| {
        b.vec_map(out, Expr::select(rv(sum).gt(0.0f64), (rv(mu) + rv(sum).log2()) * LN_2, POS_INF));
        b.store_vec(out, vec_view(lse, (bi * h + h0) * sqd.clone() + qi, sqd, rows));
    });
    Ok(b.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_combine_record_reads_as_declared_and_bc_absent_is_every_column() {
        let written = Knobs::new().with("BM", 16i64).with("WM", 1i64).with("WN", 4i64).with("BC", 128i64);
        assert_eq!(combine_default_knobs(), written);
        let mut all = written;
        all.0.remove("BC");
        assert_eq!(CombineKnobs::from_knobs(&all).unwrap(), CombineKnobs { bm: 16, wm: 1, wn: 4, bc: None });
        let spec = DecodeSpec::default();
        // Without BC a block covers all DV columns: the grid's x is the head tiles alone.
        let one = build_decode_combine(&spec, &all.clone().with("WN", 8i64)).unwrap();
        let split = build_decode_combine(&spec, &all.with("WN", 8i64).with("BC", spec.dv as i64)).unwrap();
        assert_eq!(format!("{:?}", one.grid), format!("{:?}", split.grid));
        let e = build_decode_combine(&spec, &combine_default_knobs().with("BC", "all")).unwrap_err().to_string();
        assert!(e.contains("`BC` has value `all`, expected an integer"), "{e}");
    }
}
