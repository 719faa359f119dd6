//! Correctness metrics of SEMANTICS.md section 3: relative L2 error, NaN/inf position matching, and a
//! tolerance check with named levels.

use std::fmt;

/// Element types an output may come in (f32, f64, bf16, f16), converted exactly to f64.
pub trait ToF64: Copy {
    /// The value as f64 (exact for every implementor).
    fn to_f64(self) -> f64;
}

impl ToF64 for f64 {
    fn to_f64(self) -> f64 {
        self
    }
}
impl ToF64 for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl ToF64 for half::bf16 {
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}
impl ToF64 for half::f16 {
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}

/// Converts a slice of any [`ToF64`] element type to a `Vec<f64>`.
pub fn to_f64_vec<T: ToF64>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.to_f64()).collect()
}

/// `||out - ref||_2 / ||ref||_2` over the positions where `reference` is finite (non-finite
/// reference positions are the business of [`nan_positions_match`]); `||out||_2` over those
/// positions if the reference norm there is 0. Returns +inf if the lengths differ or `out` is
/// non-finite where `reference` is finite.
pub fn rel_l2<T: ToF64>(out: &[T], reference: &[f64]) -> f64 {
    // (A zero floor keeps the reference norm as it is.)
    rel_l2_floor(out, reference, 0.0)
}

/// [`rel_l2`] with the denominator floored: `||out - ref||_2 / max(||ref||_2, floor * sqrt(n))` over the `n`
/// positions where the reference is finite (+inf where it is finite and `out` is not, or on a length mismatch).
pub fn rel_l2_floor<T: ToF64>(out: &[T], reference: &[f64], floor: f64) -> f64 {
    if out.len() != reference.len() {
        return f64::INFINITY;
    }
    let (mut num, mut den, mut n) = (0f64, 0f64, 0usize);
    for (o, &r) in out.iter().zip(reference) {
        if !r.is_finite() {
            continue;
        }
        let o = o.to_f64();
        if !o.is_finite() {
            return f64::INFINITY;
        }
        num += (o - r) * (o - r);
        den += r * r;
        n += 1;
    }
    let den = den.max(floor * floor * n as f64);
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

/// Largest |out - ref| over positions where both are finite (0 for empty input; +inf on a
/// length mismatch).
pub fn max_abs_diff<T: ToF64>(out: &[T], reference: &[f64]) -> f64 {
    if out.len() != reference.len() {
        return f64::INFINITY;
    }
    out.iter()
        .zip(reference)
        .map(|(o, &r)| (o.to_f64(), r))
        .filter(|(o, r)| o.is_finite() && r.is_finite())
        .fold(0f64, |m, (o, r)| m.max((o - r).abs()))
}

/// Index of the first position where `out` and `reference` disagree on being NaN, +inf or -inf
/// (`None` if they all agree; `Some(min len)` on a length mismatch).
pub fn first_nonfinite_mismatch<T: ToF64>(out: &[T], reference: &[f64]) -> Option<usize> {
    let class = |v: f64| {
        if v.is_nan() {
            1
        } else if v == f64::INFINITY {
            2
        } else if v == f64::NEG_INFINITY {
            3
        } else {
            0
        }
    };
    let pos = out.iter().zip(reference).position(|(o, &r)| class(o.to_f64()) != class(r));
    match pos {
        Some(i) => Some(i),
        None if out.len() != reference.len() => Some(out.len().min(reference.len())),
        None => None,
    }
}

/// True iff the lengths match and NaN, +inf and -inf occur at exactly the same positions.
pub fn nan_positions_match<T: ToF64>(out: &[T], reference: &[f64]) -> bool {
    first_nonfinite_mismatch(out, reference).is_none()
}

/// Named correctness thresholds of SEMANTICS.md section 3 (on the relative L2 error).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// Bit-for-bit equality of every finite element (mx_quantize / mx_dequantize, counts).
    Exact,
    /// f32 math: rel <= 1e-5.
    F32,
    /// bf16 inputs with f32 accumulation: rel <= 5e-3.
    Bf16,
    /// Any other relative threshold.
    Rel(f64),
    /// Log-sum-exp outputs (attention's `lse`): rel L2 against the reference's RMS floored at 1 per element
    /// ([`rel_l2_floor`]). An error in an lse is an error in the log of a softmax denominator, so near 0 it is
    /// judged absolutely: an lse of 0.004 that is off by 8e-6 is a denominator off by 8e-6 relatively, not 0.2%.
    LogSumExp(f64),
}

impl Tolerance {
    /// The relative-L2 threshold of this level (0 for `Exact`).
    pub fn threshold(self) -> f64 {
        match self {
            Tolerance::Exact => 0.0,
            Tolerance::F32 => 1e-5,
            Tolerance::Bf16 => 5e-3,
            Tolerance::Rel(t) | Tolerance::LogSumExp(t) => t,
        }
    }
}

/// What kind of failure a [`Mismatch`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchKind {
    /// `out` and `reference` have different lengths.
    Length,
    /// NaN/inf positions differ.
    NonFinitePosition,
    /// Relative L2 error above the threshold.
    RelTooLarge,
    /// `Tolerance::Exact` and some element differs.
    NotExact,
}

/// Why [`check`] failed, with the first bad index and the values there.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// The kind of failure.
    pub kind: MismatchKind,
    /// First offending index (for `RelTooLarge`: the first element whose |out - ref| exceeds
    /// threshold * rms(ref), else the element with the largest difference).
    pub index: usize,
    /// `out[index]` as f64 (NaN if out of range).
    pub out: f64,
    /// `reference[index]` (NaN if out of range).
    pub reference: f64,
    /// The relative L2 error (+inf for `Length` / `NonFinitePosition`).
    pub rel: f64,
    /// The threshold that was applied.
    pub threshold: f64,
    /// `out.len()` and `reference.len()`.
    pub lens: (usize, usize),
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            MismatchKind::Length => {
                write!(f, "length mismatch: out has {} elements, reference {}", self.lens.0, self.lens.1)
            }
            MismatchKind::NonFinitePosition => write!(
                f,
                "NaN/inf position mismatch at index {}: out = {}, reference = {}",
                self.index, self.out, self.reference
            ),
            MismatchKind::RelTooLarge => write!(
                f,
                "rel L2 error {:.3e} > threshold {:.1e}; first bad index {}: out = {}, reference = {}",
                self.rel, self.threshold, self.index, self.out, self.reference
            ),
            MismatchKind::NotExact => write!(
                f,
                "not bit-exact at index {}: out = {}, reference = {} (rel {:.3e})",
                self.index, self.out, self.reference, self.rel
            ),
        }
    }
}

impl std::error::Error for Mismatch {}

/// Checks `out` against `reference` (same flat layout): lengths equal, NaN/inf positions equal,
/// then the relative L2 error (see [`rel_l2`]) at most `tol`'s threshold (for `Exact`: every
/// finite element equal). The reference norm is floored ([`rel_l2_floor`]) at 1 per element for
/// `LogSumExp` and at f32's smallest normal per element for the other relative levels (an f32 or
/// bf16 result cannot resolve smaller magnitudes). Returns the relative L2 error on success.
pub fn check<T: ToF64>(out: &[T], reference: &[f64], tol: Tolerance) -> Result<f64, Mismatch> {
    let thr = tol.threshold();
    let at = |i: usize| (out.get(i).map_or(f64::NAN, |v| v.to_f64()), reference.get(i).copied().unwrap_or(f64::NAN));
    let mk = |kind, index: usize, rel| {
        let (o, r) = at(index);
        Mismatch { kind, index, out: o, reference: r, rel, threshold: thr, lens: (out.len(), reference.len()) }
    };
    if out.len() != reference.len() {
        return Err(mk(MismatchKind::Length, 0, f64::INFINITY));
    }
    if let Some(i) = first_nonfinite_mismatch(out, reference) {
        return Err(mk(MismatchKind::NonFinitePosition, i, f64::INFINITY));
    }
    // The scale below which the relative error is not judged: outputs computed in f32 (or stored as bf16, which
    // has f32's exponent range) cannot resolve a reference whose RMS lies under f32's smallest normal, so such a
    // reference is judged absolutely at that scale (a SiTU-GLU of a gate near -128 is ~1e-55 in f64 and -0 in any
    // f32 kernel; fuzz seed 2750244568383250106 of mxfp4_matmul). Every real output's RMS is far above it.
    let floor = match tol {
        Tolerance::LogSumExp(_) => 1.0,
        Tolerance::Exact => 0.0,
        _ => f32::MIN_POSITIVE as f64,
    };
    let rel = if floor > 0.0 { rel_l2_floor(out, reference, floor) } else { rel_l2(out, reference) };
    if tol == Tolerance::Exact {
        let bad = out.iter().zip(reference).position(|(o, &r)| r.is_finite() && o.to_f64() != r);
        return match bad {
            Some(i) => Err(mk(MismatchKind::NotExact, i, rel)),
            None => Ok(rel),
        };
    }
    if rel <= thr {
        return Ok(rel);
    }
    let finite: Vec<usize> = (0..reference.len()).filter(|&i| reference[i].is_finite()).collect();
    let rms = (finite.iter().map(|&i| reference[i] * reference[i]).sum::<f64>() / finite.len().max(1) as f64).sqrt();
    let diff = |i: usize| (out[i].to_f64() - reference[i]).abs();
    let index = finite
        .iter()
        .copied()
        .find(|&i| diff(i) > thr * rms.max(floor).max(f64::MIN_POSITIVE))
        .or_else(|| finite.iter().copied().max_by(|&a, &b| diff(a).total_cmp(&diff(b))))
        .unwrap_or(0);
    Err(mk(MismatchKind::RelTooLarge, index, rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reference under f32's normal range (a GLU of a gate near -128: ~1e-55) is met by the zero an f32 or bf16
    /// kernel computes; the same error at a representable scale still fails, and `Exact` keeps no floor.
    #[test]
    fn references_below_f32_range_are_judged_at_f32_scale() {
        let want = [0.0, -7.2e-56, 0.0];
        let got = [0.0, -0.0, 0.0];
        for tol in [Tolerance::Bf16, Tolerance::F32, Tolerance::Rel(1e-2)] {
            assert!(check(&got, &want, tol).is_ok(), "{tol:?}");
            assert!(check(&[0.0, 1e-30, 0.0], &want, tol).is_err(), "{tol:?}: off by far more than f32's range");
            assert!(check(&[0.0, -0.0, 0.0], &[0.0, -7.2e-36, 0.0], tol).is_err(), "{tol:?}: representable");
        }
        assert!(check(&got, &want, Tolerance::Exact).is_err());
    }

    /// lse outputs near 0 are judged against a floor of 1: a small absolute error passes, a large one fails, and
    /// large values are judged relatively as before.
    #[test]
    fn log_sum_exp_tolerance_floors_the_scale_at_one() {
        let want = [0.004, -0.002];
        let got = [0.004 + 8e-6, -0.002];
        assert!(check(&got, &want, Tolerance::Rel(1e-3)).is_err(), "relative to a tiny lse: fails");
        assert!(check(&got, &want, Tolerance::LogSumExp(1e-3)).is_ok());
        assert!(check(&[0.004 + 0.01, -0.002], &want, Tolerance::LogSumExp(1e-3)).is_err());
        let big = [100.0, 200.0];
        assert!(check(&[100.1, 200.0], &big, Tolerance::LogSumExp(1e-3)).is_ok());
        assert!(check(&[101.0, 200.0], &big, Tolerance::LogSumExp(1e-3)).is_err());
        assert_eq!(rel_l2_floor(&[3.0f64, 4.5], &[3.0, 4.0], 1.0), rel_l2(&[3.0f64, 4.5], &[3.0, 4.0]));
    }

    #[test]
    fn rel_l2_basics() {
        let r = [3.0, 4.0];
        assert_eq!(rel_l2(&[3.0f32, 4.0], &r), 0.0);
        assert!((rel_l2(&[3.0f64, 4.5], &r) - 0.1).abs() < 1e-15);
        assert_eq!(rel_l2(&[0.0f64, 2.0], &[0.0, 0.0]), 2.0);
        assert_eq!(rel_l2(&[1.0f32], &r), f64::INFINITY);
        assert_eq!(rel_l2(&[f32::NAN, 4.0], &r), f64::INFINITY);
        // non-finite reference positions are skipped
        assert_eq!(rel_l2(&[f64::NAN, 4.0], &[f64::NAN, 4.0]), 0.0);
        let b = [half::bf16::from_f32(3.0), half::bf16::from_f32(4.0)];
        assert_eq!(rel_l2(&b, &r), 0.0);
        assert_eq!(max_abs_diff(&[3.0f32, 4.5], &r), 0.5);
    }

    #[test]
    fn nan_positions() {
        let r = [1.0, f64::NAN, f64::INFINITY];
        assert!(nan_positions_match(&[2.0f32, f32::NAN, f32::INFINITY], &r));
        assert!(!nan_positions_match(&[2.0f32, 1.0, f32::INFINITY], &r));
        assert!(!nan_positions_match(&[2.0f32, f32::NAN, f32::NEG_INFINITY], &r));
        assert!(!nan_positions_match(&[2.0f32, f32::NAN], &r));
    }

    #[test]
    fn check_levels() {
        let r: Vec<f64> = (1..=100).map(|i| i as f64).collect();
        let mut o: Vec<f32> = r.iter().map(|&v| v as f32).collect();
        assert_eq!(check(&o, &r, Tolerance::Exact), Ok(0.0));
        o[41] += 1e-3;
        let e = check(&o, &r, Tolerance::Exact).unwrap_err();
        assert_eq!((e.kind, e.index), (MismatchKind::NotExact, 41));
        assert!(check(&o, &r, Tolerance::F32).is_ok());
        o[7] += 1.0;
        assert!(check(&o, &r, Tolerance::Bf16).is_ok());
        let e = check(&o, &r, Tolerance::F32).unwrap_err();
        assert_eq!((e.kind, e.index), (MismatchKind::RelTooLarge, 7));
        assert!(e.to_string().contains("index 7"), "{e}");
        o[3] = f32::NAN;
        let e = check(&o, &r, Tolerance::Bf16).unwrap_err();
        assert_eq!((e.kind, e.index), (MismatchKind::NonFinitePosition, 3));
        let e = check(&o[..5], &r, Tolerance::Bf16).unwrap_err();
        assert_eq!(e.kind, MismatchKind::Length);
        assert!(check(&[0.0f64; 3], &[0.0; 3], Tolerance::Rel(0.0)).is_ok());
    }
}
