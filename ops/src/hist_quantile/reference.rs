//! Inputs, the f64 reference and the output check of [`crate::hist_quantile`].

use super::*;

fn sigmoid_inplace(v: &mut [f32]) {
    v.par_iter_mut().for_each(|x| *x = 1.0 / (1.0 + (-*x).exp()));
}

/// Seeded inputs of a problem: `s [T, E]` and, for QB, `b [E]` (see [`DataMode`]). Never all zeros.
pub fn generate(pb: &Problem, seed: u64) -> (Vec<f32>, Option<Vec<f32>>) {
    let n = pb.t * pb.e;
    let (lo, hi) = (pb.lo, pb.hi);
    let span = hi - lo;
    let per_col = |vals: Vec<f32>| -> Vec<f32> {
        let mut s = vec![0f32; n];
        s.par_chunks_mut(pb.e.max(1)).for_each(|row| row.copy_from_slice(&vals));
        s
    };
    match pb.kind {
        Kind::Qb { .. } => {
            let u = data::uniform(n, 0.0, 1.0, seed);
            let bu = data::uniform(pb.e, 0.0, 1.0, seed ^ 0xb1a5);
            let small_bias: Vec<f32> = bu.iter().map(|v| 0.2 * v - 0.1).collect();
            match pb.data {
                DataMode::Random => {
                    let mut s = data::normal(n, 2.0, seed ^ 0x5c0e);
                    sigmoid_inplace(&mut s);
                    (s, Some(small_bias))
                }
                DataMode::Ties => {
                    let s = u.par_iter().map(|v| (v * 9.0).floor().min(8.0) / 8.0).collect();
                    (s, Some(bu.iter().map(|v| (v * 5.0).floor().min(4.0) / 16.0 - 0.125).collect()))
                }
                DataMode::Constant => {
                    let mut c = data::normal(pb.e, 2.0, seed ^ 0xc0c0);
                    sigmoid_inplace(&mut c);
                    (per_col(c), Some(small_bias))
                }
                DataMode::Edges => {
                    let s = u.par_iter().map(|v| (v * 5.0).floor().min(4.0) / 4.0).collect();
                    (s, Some(vec![0.0; pb.e]))
                }
            }
        }
        Kind::Column { .. } => {
            let s = match pb.data {
                DataMode::Random => data::uniform(n, lo - 0.05 * span, hi + 0.05 * span, seed),
                DataMode::Ties => {
                    let u = data::uniform(n, 0.0, 1.0, seed);
                    u.par_iter().map(|v| lo + span * ((v * 17.0).floor().min(16.0) / 16.0)).collect()
                }
                DataMode::Constant => per_col(data::uniform(pb.e, lo, hi, seed ^ 0xc0c0)),
                DataMode::Edges => {
                    let mut table = edge_table(&pb.geometry());
                    table.push(f32::from_bits(lo.to_bits().wrapping_add(if lo > 0.0 { u32::MAX } else { 1 })));
                    table.push(next_down(hi));
                    table.push(next_down(lo));
                    let u = data::uniform(n, 0.0, 1.0, seed);
                    u.par_iter().map(|v| table[((v * table.len() as f32) as usize).min(table.len() - 1)]).collect()
                }
            };
            (s, None)
        }
    }
}

/// The largest f32 below `x` (finite `x`).
fn next_down(x: f32) -> f32 {
    if x == 0.0 {
        -f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() - 1)
    } else {
        f32::from_bits(x.to_bits() + 1)
    }
}

/// The reference's results for a problem, computed with `k3k_reference::quantile` on row chunks in parallel
/// (histograms are mergeable, so the chunked build equals the whole build; alpha is per row).
pub struct Reference {
    pub alpha: Option<Vec<f32>>,
    /// First-pass histograms.
    pub hist: Histogram,
    /// Two-pass: per expert the histogram over its zoom range (the located bin's edges, or the first-pass
    /// range when the first pass located the under/overflow slot), `[E, B+2]`.
    pub counts2: Option<Vec<u64>>,
    /// Per expert: the reference's histogram quantile (one- or two-pass), as `hist_quantile_columns` computes it.
    pub quantile: Vec<f64>,
}

fn refe(e: k3k_reference::RefError) -> OpError {
    OpError::Internal(format!("reference: {e}"))
}

/// Rows per reference chunk.
fn ref_rows(e: usize) -> usize {
    ((1usize << 18) / e.max(1)).max(1)
}

/// The binned value (margin or plain value) of element `i` of `s`.
fn binned_value(s: &[f32], alpha: Option<&[f32]>, e: usize, i: usize) -> f32 {
    match alpha {
        Some(a) => s[i] - a[i / e],
        None => s[i],
    }
}

/// Column `col` of the binned values.
fn column_values(s: &[f32], alpha: Option<&[f32]>, t: usize, e: usize, col: usize) -> Vec<f32> {
    (0..t).map(|r| binned_value(s, alpha, e, r * e + col)).collect()
}

/// Compute the reference results (inputs checked by [`check_inputs`]).
pub fn reference(pb: &Problem, s: &[f32], b: Option<&[f32]>) -> Result<Reference, OpError> {
    let (t, e) = (pb.t, pb.e);
    let rows = ref_rows(e);
    let alpha = match (pb.kind, b) {
        (Kind::Qb { k }, Some(b)) => {
            let parts: Result<Vec<Vec<f32>>, _> =
                s.par_chunks(rows * e).map(|c| biased_alpha(c, b, c.len() / e, e, k)).collect();
            Some(parts.map_err(refe)?.concat())
        }
        _ => None,
    };
    let a = alpha.as_deref();
    let parts: Result<Vec<Histogram>, _> = s
        .par_chunks(rows * e)
        .enumerate()
        .map(|(ci, c)| {
            let vals: Vec<f32> = match a {
                Some(a) => k3k_reference::quantile::margins(c, c.len() / e, e, &a[ci * rows..ci * rows + c.len() / e])?,
                None => c.to_vec(),
            };
            Histogram::build(&vals, c.len() / e, e, pb.lo as f64, pb.hi as f64, pb.bins)
        })
        .collect();
    let mut hist = pb.geometry();
    for h in parts.map_err(refe)? {
        hist.merge(&h).map_err(refe)?;
    }
    let target = pb.target();
    let nb = pb.bins + 2;
    let per_col: Result<Vec<(f64, Vec<u64>)>, OpError> = (0..e)
        .into_par_iter()
        .map(|col| {
            let (loc, _) = hist.locate(col, target).map_err(refe)?;
            match (pb.two_pass, loc) {
                (true, Located::Bin(bin)) => {
                    let (l2, h2) = hist.bin_edges(bin);
                    let c = column_values(s, a, t, e, col);
                    let z = Histogram::build(&c, t, 1, l2, h2, pb.bins).map_err(refe)?;
                    Ok((z.quantile_from_top(0, target).map_err(refe)?, z.counts))
                }
                _ => Ok((
                    hist.quantile_from_top(col, target).map_err(refe)?,
                    hist.counts[col * nb..(col + 1) * nb].to_vec(),
                )),
            }
        })
        .collect();
    let per_col = per_col?;
    let quantile = per_col.iter().map(|(q, _)| *q).collect();
    let counts2 = pb.two_pass.then(|| per_col.into_iter().flat_map(|(_, c)| c).collect());
    Ok(Reference { alpha, hist, counts2, quantile })
}

/// Allowed f32 rounding of a located value (the kernel interpolates in f32, the reference in f64).
fn value_slack(pb: &Problem) -> f64 {
    16.0 * f32::EPSILON as f64 * (pb.lo.abs().max(pb.hi.abs()) as f64).max(1e-30)
}

/// The error bound against the exact sort: one bin width, or bin / B with two passes (plus f32 rounding).
pub fn exact_bound(pb: &Problem) -> f64 {
    let w = (pb.hi as f64 - pb.lo as f64) / pb.bins as f64;
    (if pb.two_pass { w / pb.bins as f64 } else { w }) + value_slack(pb)
}

/// Compare integer counts; the first mismatch as (expert, slot, got, want).
fn diff_counts(got: &HostTensor, want: &[u64], nb: usize) -> Option<(usize, usize, i64, u64)> {
    (0..want.len()).find(|&i| got.get_i64(i) as u64 != want[i]).map(|i| (i / nb, i % nb, got.get_i64(i), want[i]))
}

/// `|d| <= tol`, false for NaN.
fn within(d: f64, tol: f64) -> bool {
    d.abs() <= tol
}

fn fail(report: &mut CheckReport, detail: String) {
    if report.passed {
        report.detail = detail;
    }
    report.passed = false;
}

/// Check a run's outputs against the reference: alpha (QB) and counts exactly, the located values within f32
/// rounding of the reference's histogram quantile, and within one bin (two-pass: bin / B) of the exact
/// sort on `cols` (experts whose exact value lies inside `[lo, hi)`).
pub fn check_outputs(
    pb: &Problem,
    s: &[f32],
    r: &Reference,
    cols: &[usize],
    out: &Outputs,
) -> Result<CheckReport, OpError> {
    let (t, e, nb) = (pb.t, pb.e, pb.bins + 2);
    let mut rep = CheckReport { max_rel_err: 0.0, passed: true, scope: String::new(), detail: String::new() };
    let mut scope = vec![];
    if let Some(want) = &r.alpha {
        let got = out.get("alpha")?;
        let bad_tok = (0..t).find(|&i| got.get_f32(i) != want[i]);
        if let Some(i) = bad_tok {
            fail(&mut rep, format!("alpha[{i}] = {} but the reference has {}", got.get_f32(i), want[i]));
        }
        scope.push(format!("alpha of all {t} tokens exact"));
    }
    if let Some((ex, sl, g, w)) = diff_counts(out.get("counts")?, &r.hist.counts, nb) {
        fail(&mut rep, format!("counts[{ex}, slot {sl}] = {g} but the reference has {w}"));
    }
    scope.push(format!("counts [{e}, {nb}] exact"));
    if let Some(want2) = &r.counts2 {
        if let Some((ex, sl, g, w)) = diff_counts(out.get("counts2")?, want2, nb) {
            fail(&mut rep, format!("counts2[{ex}, slot {sl}] = {g} but the reference has {w}"));
        }
        scope.push("zoomed counts2 exact".into());
    }
    let (name, sign) = match pb.kind {
        Kind::Qb { .. } => ("bias", -1.0),
        Kind::Column { .. } => ("quantile", 1.0),
    };
    let got: Vec<f64> = out.get(name)?.to_f64_vec().iter().map(|v| v * sign).collect();
    let slack = value_slack(pb);
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (col, (&g, &w)) in got.iter().zip(&r.quantile).enumerate() {
        num += (g - w) * (g - w);
        den += w * w;
        if !within(g - w, slack) {
            fail(&mut rep, format!("{name}[{col}]: quantile {g} but the reference histogram gives {w}"));
        }
    }
    rep.max_rel_err = if den > 0.0 { (num / den).sqrt() } else { num.sqrt() };
    scope.push(format!("{name} of all {e} experts vs the reference histogram quantile"));
    // Exact sort on the sampled columns.
    let target = pb.target();
    let rank = (target.ceil().max(1.0) as usize).min(t);
    let bound = exact_bound(pb);
    let alpha = r.alpha.as_deref();
    let checks: Vec<Result<Option<String>, OpError>> = cols
        .par_iter()
        .map(|&col| {
            let c = column_values(s, alpha, t, e, col);
            let exact = exact_kth_largest_per_column(&c, t, 1, rank).map_err(refe)?[0];
            if !(exact >= pb.lo as f64 && exact < pb.hi as f64) || target <= 0.0 || target > t as f64 {
                return Ok(None);
            }
            let g = got[col];
            if !within(g - exact, bound) {
                return Ok(Some(format!(
                    "{name}[{col}]: {g} is {:.3e} from the exact {exact} (bound {bound:.3e})",
                    (g - exact).abs()
                )));
            }
            if let Kind::Column { fraction } = pb.kind {
                // The linear-interpolation quantile lies between the neighbouring order statistics.
                let lin = column_quantile(&c, t, 1, fraction).map_err(refe)?[0];
                let pos = fraction * (t as f64 - 1.0);
                let up = exact_kth_largest_per_column(&c, t, 1, t - pos.ceil() as usize).map_err(refe)?[0];
                if !within(g - lin, bound + (up - exact)) {
                    return Ok(Some(format!("{name}[{col}]: {g} vs the linear quantile {lin} (gap {})", up - exact)));
                }
            }
            Ok(None)
        })
        .collect();
    for c in checks {
        if let Some(d) = c? {
            fail(&mut rep, d);
        }
    }
    scope.push(format!("exact sort on {} experts (bound {bound:.2e})", cols.len()));
    rep.scope = scope.join("; ");
    Ok(rep)
}
