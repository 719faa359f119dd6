//! The split-K finalize kernel: the partials summed in split order, then the epilogue and the bf16 store.

use super::*;

/// Rows and columns of one finalize tile (split-K runs on decode shapes: few rows, so narrow column tiles
/// give more CTAs).
pub(super) const FM: u32 = 16;
pub(super) const FN: u32 = 64;
/// Up to this many splits the finalize's loop over the partials is unrolled (all loads in flight at once
/// instead of one dependent round trip per partial).
pub(super) const FINALIZE_UNROLL: u32 = 16;

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
