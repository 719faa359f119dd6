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
