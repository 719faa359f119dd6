//! Comparing outputs with the reference (SEMANTICS.md section 3): relative L2 error, NaN/inf positions, every element written.

use crate::op::CheckReport;
use k3k_reference::metrics::{Tolerance, check};

/// The rows of a grouped `[m, *]` output a check compares (`counts`: rows per group, m their sum): all of them
/// when `all`, else each non-empty group's first, middle and last row plus 64 drawn from `seed`; sorted, each once.
pub fn checked_rows(counts: &[usize], all: bool, seed: u64) -> Vec<usize> {
    let m: usize = counts.iter().sum();
    if all {
        return (0..m).collect();
    }
    let mut rows = vec![];
    let mut start = 0;
    for &c in counts {
        if c > 0 {
            rows.extend([start, start + c / 2, start + c - 1]);
        }
        start += c;
    }
    let mut s = seed;
    for _ in 0..64 {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        rows.push((s >> 33) as usize % m.max(1));
    }
    rows.sort();
    rows.dedup();
    rows
}

/// The group of each row of a grouped output (`counts`: rows per group).
pub fn row_groups(counts: &[usize]) -> Vec<usize> {
    counts.iter().enumerate().flat_map(|(g, &c)| std::iter::repeat_n(g, c)).collect()
}

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
