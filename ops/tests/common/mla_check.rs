//! The gated-MLA tests' checks against the f64 reference, shared by the interpreter and the TMA tests: the
//! tolerances, rel L2 with the non-finite and all-zero rules, and the bf16 input tensors.

use k3k_ir::{DType, HostTensor};
use k3k_reference::metrics::{first_nonfinite_mismatch, rel_l2_floor};

pub const BF16_TOL: f64 = 5e-3;
pub const LSE_TOL: f64 = 1e-3;
/// tau = 192^-1/2.
pub const TAU: f32 = 0.072_168_78;

/// rel L2 within `tol` and identical non-finite positions (exact zeros where the reference is all zero).
pub fn check(what: &str, seed: u64, got: &[f32], want: &[f64], tol: f64) {
    check_scaled(what, seed, got, want, tol, 0.0);
}

/// lse: [`check`] against the reference's RMS floored at 1 (`Tolerance::LogSumExp`): near 0 an lse's error is
/// absolute (a single-key lse of q.k tau ~ N(0, 1) made the plain rel L2 fail on small values now and then).
pub fn check_lse(what: &str, seed: u64, got: &[f32], want: &[f64]) {
    check_scaled(what, seed, got, want, LSE_TOL, 1.0);
}

/// rel L2 (its denominator floored at `floor` per element, `rel_l2_floor`) within `tol`, and the non-finite and
/// all-zero rules of [`check`]. `K3K_VERBOSE` prints each rel L2.
pub fn check_scaled(what: &str, seed: u64, got: &[f32], want: &[f64], tol: f64, floor: f64) {
    if let Some(i) = first_nonfinite_mismatch(got, want) {
        panic!("seed {seed}: {what}: non-finite mismatch at {i}: got {} want {}", got[i], want[i]);
    }
    if want.iter().all(|w| !w.is_finite() || *w == 0.0) {
        let bad = got.iter().zip(want).position(|(g, w)| w.is_finite() && *g != 0.0);
        assert!(bad.is_none(), "seed {seed}: {what}: expected 0 at {bad:?}");
        return;
    }
    let r = rel_l2_floor(got, want, floor);
    if std::env::var("K3K_VERBOSE").is_ok() {
        eprintln!("{what}: rel L2 {r:.2e}");
    }
    assert!(r <= tol, "seed {seed}: {what}: rel L2 {r:.3e} > {tol:.0e}");
}

pub fn bf16(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(DType::Bf16, shape, v)
}
