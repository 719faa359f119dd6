//! Comparing outputs with the reference (SPEC 3): relative L2 error, NaN/inf positions, every element written.

use crate::op::CheckReport;
use k3k_reference::metrics::{Tolerance, check};

/// Compare `got` with `want` under a tolerance; `name` and `scope` describe what was compared.
pub fn compare(name: &str, got: &[f64], want: &[f64], tol: Tolerance, scope: String) -> CheckReport {
    match check(got, want, tol) {
        Ok(rel) => CheckReport { max_rel_err: rel, passed: true, scope, detail: String::new() },
        Err(m) => CheckReport {
            max_rel_err: if m.rel.is_finite() { m.rel } else { f64::INFINITY },
            passed: false,
            scope,
            detail: format!("{name}: {m}"),
        },
    }
}

/// Where a failed `[rows, cols]` output is wrong: the fraction of bad elements and which row/column residues
/// (mod 16) they fall on, which points at a fragment-layout or masking bug.
pub fn error_pattern(got: &[f64], want: &[f64], rows: usize, cols: usize) -> String {
    let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len().max(1) as f64).sqrt();
    let tol = 0.05 * rms.max(1e-30);
    let (mut bad, mut by_r, mut by_c) = (0usize, [0usize; 16], [0usize; 16]);
    let mut first_rows = vec![];
    for r in 0..rows {
        for c in 0..cols {
            let i = r * cols + c;
            let close = (got[i] - want[i]).abs() <= tol; // false for NaN too
            if !close {
                bad += 1;
                by_r[r % 16] += 1;
                by_c[c % 16] += 1;
                if first_rows.len() < 8 && !first_rows.contains(&r) {
                    first_rows.push(r);
                }
            }
        }
    }
    format!(
        "; {bad} of {} elements off by > 5% of rms; bad by row%16 {by_r:?}; by col%16 {by_c:?}; first bad rows {first_rows:?}",
        rows * cols
    )
}
