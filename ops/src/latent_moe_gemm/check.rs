//! The check of an output against the f64 reference (SEMANTICS.md section 2.1): every row of a small problem,
//! a sample of rows of a big one (each group's first, middle and last included), at the bf16 tolerance.

use super::plan::GemmInstance;
use crate::OpError;
use crate::op::CheckReport;
use crate::plan::Outputs;
use k3k_reference::gemm as refgemm;
use k3k_reference::metrics::Tolerance;
use rayon::prelude::*;

/// The wanted and the computed outputs of one row.
type RowPair = (Vec<f64>, Vec<f64>);

/// Compare `y` of `out` with the f64 reference of `inst`'s problem.
pub(super) fn check(inst: &GemmInstance, out: &Outputs) -> Result<CheckReport, OpError> {
    let pb = &inst.pb;
    let y = out.get("y")?.to_f64_vec();
    let (m, k, n, no) = (pb.m(), pb.k, pb.n, pb.n_out());
    let rows = crate::check::checked_rows(&pb.counts, m * n * k <= 1 << 26, inst.seed);
    let group_of = crate::check::row_groups(&pb.counts);
    let per_row: Vec<Result<RowPair, OpError>> = rows
        .par_iter()
        .map(|&r| Ok((reference_row(inst, group_of[r], r)?, y[r * no..(r + 1) * no].to_vec())))
        .collect();
    let mut want = Vec::with_capacity(rows.len() * no);
    let mut got = Vec::with_capacity(rows.len() * no);
    for r in per_row {
        let (w, g) = r?;
        want.extend(w);
        got.extend(g);
    }
    let scope = if rows.len() == m { format!("all {m} rows") } else { format!("{} sampled rows of {m}", rows.len()) };
    let mut report = crate::check::compare("y", &got, &want, Tolerance::Bf16, scope);
    if !report.passed {
        report.detail.push_str(&crate::check::error_pattern(&got, &want, rows.len(), no));
    }
    Ok(report)
}

/// Output row `r` (of group `g`) in f64: the product with the group's weights, the epilogue, the routing weight.
fn reference_row(inst: &GemmInstance, g: usize, r: usize) -> Result<Vec<f64>, OpError> {
    let pb = &inst.pb;
    let (k, n) = (pb.k, pb.n);
    let wg = &inst.w[g * n * k..(g + 1) * n * k];
    let acc =
        refgemm::matmul_nt(&inst.x[r * k..(r + 1) * k], 1, k, wg, n).map_err(|e| OpError::Internal(e.to_string()))?;
    let scale = inst.p.as_ref().map_or(1.0, |p| p[r] as f64);
    Ok((0..pb.n_out()).map(|j| scale * pb.epilogue.reference(&acc, j)).collect())
}
