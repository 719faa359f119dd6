//! GEMM references (SEMANTICS.md section 2.1 / 2.2): plain `x w^T`, the ragged grouped GEMM over experts with
//! optional per-row routing weight and fused GLU epilogues, and the MX-weight matmul. All sums are
//! accumulated in f64 in k order.

use crate::error::{RefError, check_len, prod};
use crate::mx::{MxTensor, dequantize};

/// Epilogue fused after the grouped GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// Output the accumulator `[M_total, N]`.
    None,
    /// SiTU-GLU on the two column halves, output `[M_total, N/2]`: see [`situ_glu`].
    SituGlu,
    /// SwiGLU on the two column halves, output `[M_total, N/2]`: see [`swiglu`].
    SwiGlu,
}

/// Logistic sigmoid 1 / (1 + e^-x) in f64 (stable for both signs).
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// SiTU-GLU of gate `a` and up `b`: `[4 tanh(a/4) * sigmoid(a)] * [25 tanh(b/25)]` (|h| <= 100).
pub fn situ_glu(a: f64, b: f64) -> f64 {
    4.0 * (a / 4.0).tanh() * sigmoid(a) * (25.0 * (b / 25.0).tanh())
}

/// SwiGLU of gate `a` and up `b`: `silu(a) * b = a * sigmoid(a) * b`.
pub fn swiglu(a: f64, b: f64) -> f64 {
    a * sigmoid(a) * b
}

/// `y[m, n] = sum_k x[m, k] * w[n, k]` in f64; `x: [m, k]`, `w: [n, k]` row-major; returns `[m, n]`.
pub fn matmul_nt(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Result<Vec<f64>, RefError> {
    per_row_pair(x, m, k, w, n, dot)
}

/// `y[m, n] = f(x[m, :], w[n, :])` over row-major `x: [m, k]` and `w: [n, k]` (0 where k = 0).
fn per_row_pair(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    n: usize,
    f: impl Fn(&[f32], &[f32]) -> f64,
) -> Result<Vec<f64>, RefError> {
    check_len("x", x.len(), "[m, k]", &[m, k])?;
    check_len("w", w.len(), "[n, k]", &[n, k])?;
    let mut y = vec![0f64; prod("y", &[m, n])?];
    if k == 0 {
        return Ok(y);
    }
    for (xr, yr) in x.chunks_exact(k).zip(y.chunks_exact_mut(n.max(1))) {
        for (wr, yv) in w.chunks_exact(k).zip(yr.iter_mut()) {
            *yv = f(xr, wr);
        }
    }
    Ok(y)
}

/// `a[m, n] = sum_k |x[m, k] * w[n, k]|` in f64 (shapes as [`matmul_nt`]): the size of the terms behind each entry
/// of the product. A kernel that accumulates the sum in f32 lands within [`f32_sum_bound`] of the exact value; an
/// entry smaller than that bound (terms that cancel) has no determined f32 value, not even its sign.
pub fn matmul_nt_abs(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Result<Vec<f64>, RefError> {
    per_row_pair(x, m, k, w, n, |xr, wr| xr.iter().zip(wr).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum())
}

/// The worst-case error of a `k`-term sum of exact terms accumulated in f32 in any order, for terms whose absolute
/// values sum to `abs_sum`: `k * u * abs_sum` to first order (Higham, "Accuracy and Stability of Numerical
/// Algorithms", 3.1), with u = 2^-23, one f32 ulp: round-to-nearest would give 2^-24, but tensor-core accumulators
/// are not specified to round to nearest.
pub fn f32_sum_bound(k: usize, abs_sum: f64) -> f64 {
    k as f64 * f64::powi(2.0, -23) * abs_sum
}

/// f64 dot product of two equal-length f32 slices.
fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&p, &q)| p as f64 * q as f64).sum()
}

/// MX-weight matmul (SEMANTICS.md section 2.2): `y[m, n] = sum_k x[m, k] * dequant(w)[n, k]` in f64; `x: [m, k]`
/// row-major, `w` an `[n, k]` [`MxTensor`] (k must equal `w.k`); returns `[m, n]`. NaN-scale blocks
/// propagate NaN.
pub fn mx_matmul_nt(x: &[f32], m: usize, w: &MxTensor) -> Result<Vec<f64>, RefError> {
    let wd = dequantize(w)?;
    matmul_nt(x, m, w.k, &wd, w.rows)
}

/// Validates `offs` (`[G]` inclusive cumulative group ends): non-negative, non-decreasing,
/// `offs[G-1] <= m_total`. Returns the row range of each group.
pub fn group_ranges(offs: &[i32], m_total: usize) -> Result<Vec<std::ops::Range<usize>>, RefError> {
    let mut start = 0usize;
    let mut out = Vec::with_capacity(offs.len());
    for (g, &o) in offs.iter().enumerate() {
        if o < 0 || (o as usize) < start {
            return Err(RefError::Invalid {
                arg: "offs",
                reason: format!("group ends must be non-negative and non-decreasing; offs[{g}] = {o} after {start}"),
            });
        }
        let end = o as usize;
        if end > m_total {
            return Err(RefError::Invalid {
                arg: "offs",
                reason: format!("offs[{g}] = {end} exceeds m_total = {m_total}"),
            });
        }
        out.push(start..end);
        start = end;
    }
    Ok(out)
}

/// Grouped GEMM over ragged expert groups (SEMANTICS.md section 2.1, like `torch._grouped_mm`).
/// `x: [m_total, k]` rows permuted by expert; `w: [g, n, k]`; `offs: [g]` inclusive cumulative
/// group ends (group j owns rows `offs[j-1]..offs[j]`, `offs[-1] = 0`; empty groups allowed);
/// optional `row_scale: [m_total]` (routing weight p).
/// Accumulator `a[r, c] = sum_k x[r, k] w[g(r), c, k]` (f64). Output `[m_total, n]` with
/// `y = p[r] * a` for `Epilogue::None`, else `[m_total, n/2]` with `y[r, j] = p[r] * act(a[r, j], a[r, j + n/2])`
/// (gate = first half, up = second half; `n` must be even). The routing weight scales the expert's
/// *activated* output, as MoE engines apply it (project decision, stated in SEMANTICS.md section 2.1; the
/// two orders agree without an epilogue). Rows at or after `offs[g-1]` belong to no group and
/// are left 0.
#[allow(clippy::too_many_arguments)]
pub fn grouped_gemm(
    x: &[f32],
    m_total: usize,
    k: usize,
    w: &[f32],
    g: usize,
    n: usize,
    offs: &[i32],
    row_scale: Option<&[f32]>,
    epi: Epilogue,
) -> Result<Vec<f64>, RefError> {
    check_len("x", x.len(), "[m_total, k]", &[m_total, k])?;
    check_len("w", w.len(), "[g, n, k]", &[g, n, k])?;
    check_len("offs", offs.len(), "[g]", &[g])?;
    if let Some(p) = row_scale {
        check_len("row_scale", p.len(), "[m_total]", &[m_total])?;
    }
    if epi != Epilogue::None && !n.is_multiple_of(2) {
        return Err(RefError::Invalid {
            arg: "n",
            reason: format!("a GLU epilogue needs an even N (gate | up halves), got {n}"),
        });
    }
    let ranges = group_ranges(offs, m_total)?;
    let n_out = if epi == Epilogue::None { n } else { n / 2 };
    let mut y = vec![0f64; prod("y", &[m_total, n_out])?];
    let mut acc = vec![0f64; n];
    for (gi, rows) in ranges.into_iter().enumerate() {
        let wg = &w[gi * n * k..(gi + 1) * n * k];
        for r in rows {
            let xr = &x[r * k..(r + 1) * k];
            let p = row_scale.map_or(1.0, |p| p[r] as f64);
            for (c, a) in acc.iter_mut().enumerate() {
                *a = dot(xr, &wg[c * k..(c + 1) * k]);
            }
            let yr = &mut y[r * n_out..(r + 1) * n_out];
            match epi {
                Epilogue::None => yr.copy_from_slice(&acc),
                Epilogue::SituGlu => {
                    for (j, o) in yr.iter_mut().enumerate() {
                        *o = situ_glu(acc[j], acc[j + n_out]);
                    }
                }
                Epilogue::SwiGlu => {
                    for (j, o) in yr.iter_mut().enumerate() {
                        *o = swiglu(acc[j], acc[j + n_out]);
                    }
                }
            }
            for o in yr.iter_mut() {
                *o *= p;
            }
        }
    }
    Ok(y)
}

/// Grouped GEMM with MX weights: dequantizes `w` (an `[g * n, k]` [`MxTensor`], i.e. `[g, n, k]`)
/// and runs [`grouped_gemm`] with the same conventions.
pub fn grouped_gemm_mx(
    x: &[f32],
    m_total: usize,
    w: &MxTensor,
    g: usize,
    offs: &[i32],
    row_scale: Option<&[f32]>,
    epi: Epilogue,
) -> Result<Vec<f64>, RefError> {
    if g == 0 || !w.rows.is_multiple_of(g) {
        return Err(RefError::Shape {
            arg: "w",
            expected: format!("rows a positive multiple of g = {g} ([g * n, k])"),
            got: format!("{} rows", w.rows),
        });
    }
    let wd = dequantize(w)?;
    grouped_gemm(x, m_total, w.k, &wd, g, w.rows / g, offs, row_scale, epi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mx::{MxFormat, ScaleRule, quantize};
    use crate::random::{bf16_normal, fresh_seed, seeded};

    #[test]
    fn activations() {
        assert_eq!(situ_glu(0.0, 5.0), 0.0);
        assert!((situ_glu(1e3, 1e3) - 100.0).abs() < 1e-9);
        assert!(situ_glu(-1e3, 1e3).abs() < 1e-9);
        let (a, b) = (0.3f64, -1.7f64);
        let want = 4.0 * (a / 4.0).tanh() / (1.0 + (-a).exp()) * 25.0 * (b / 25.0).tanh();
        assert!((situ_glu(a, b) - want).abs() < 1e-15);
        assert!((swiglu(a, b) - a / (1.0 + (-a).exp()) * b).abs() < 1e-15);
        assert_eq!(sigmoid(-800.0), 0.0);
        assert_eq!(sigmoid(800.0), 1.0);
    }

    #[test]
    fn matmul_small() {
        // [[1,2],[3,4]] x [[1,0],[1,1],[0,2]]^T
        let y = matmul_nt(&[1.0, 2.0, 3.0, 4.0], 2, 2, &[1.0, 0.0, 1.0, 1.0, 0.0, 2.0], 3).unwrap();
        assert_eq!(y, vec![1.0, 3.0, 4.0, 3.0, 7.0, 8.0]);
        assert!(matmul_nt(&[1.0; 3], 2, 2, &[1.0; 4], 2).is_err());
        assert_eq!(matmul_nt(&[], 2, 0, &[], 3).unwrap(), vec![0.0; 6]);
    }

    #[test]
    fn grouped_equals_per_group_matmul() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let (k, n, g) = (17, 6, 4);
        // groups: 3 rows, empty, 5 rows, 1 row; 2 trailing rows belong to no group
        let offs = [3, 3, 8, 9];
        let m = 11;
        let x = bf16_normal(&mut rng, m * k, 1.0);
        let w = bf16_normal(&mut rng, g * n * k, 1.0);
        let p = bf16_normal(&mut rng, m, 1.0);
        for epi in [Epilogue::None, Epilogue::SituGlu, Epilogue::SwiGlu] {
            let y = grouped_gemm(&x, m, k, &w, g, n, &offs, Some(&p), epi).unwrap();
            let no = if epi == Epilogue::None { n } else { n / 2 };
            assert_eq!(y.len(), m * no);
            let mut start = 0;
            for (gi, &end) in offs.iter().enumerate() {
                let end = end as usize;
                let ws = &w[gi * n * k..(gi + 1) * n * k];
                let yy = matmul_nt(&x[start * k..end * k], end - start, k, ws, n).unwrap();
                for r in start..end {
                    for j in 0..no {
                        let acc = |c: usize| yy[(r - start) * n + c];
                        let want = p[r] as f64
                            * match epi {
                                Epilogue::None => acc(j),
                                Epilogue::SituGlu => situ_glu(acc(j), acc(j + no)),
                                Epilogue::SwiGlu => swiglu(acc(j), acc(j + no)),
                            };
                        assert!((y[r * no + j] - want).abs() <= 1e-12 * want.abs().max(1.0), "seed {seed}");
                    }
                }
                start = end;
            }
            assert!(y[9 * no..].iter().all(|&v| v == 0.0), "rows past offs[G-1] stay 0");
        }
    }

    #[test]
    fn grouped_validation() {
        let x = vec![0f32; 4 * 2];
        let w = vec![0f32; 2 * 4 * 2];
        let run = |offs: &[i32], n: usize, epi| grouped_gemm(&x, 4, 2, &w[..2 * n * 2], 2, n, offs, None, epi);
        assert!(run(&[2, 4], 4, Epilogue::SituGlu).is_ok());
        assert!(matches!(run(&[3, 2], 4, Epilogue::None), Err(RefError::Invalid { arg: "offs", .. })));
        assert!(matches!(run(&[-1, 2], 4, Epilogue::None), Err(RefError::Invalid { arg: "offs", .. })));
        assert!(matches!(run(&[2, 5], 4, Epilogue::None), Err(RefError::Invalid { arg: "offs", .. })));
        assert!(matches!(run(&[2], 4, Epilogue::None), Err(RefError::Shape { arg: "offs", .. })));
        assert!(matches!(run(&[1, 2], 3, Epilogue::SwiGlu), Err(RefError::Invalid { arg: "n", .. })));
        assert!(grouped_gemm(&x, 4, 2, &w, 2, 4, &[1, 2], Some(&[1.0; 3]), Epilogue::None).is_err());
    }

    #[test]
    fn mx_weights() {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let (m, n, k) = (3, 4, 64);
        let x = bf16_normal(&mut rng, m * k, 1.0);
        let w = bf16_normal(&mut rng, 2 * n * k, 1.0);
        let wq = quantize(&w, 2 * n, k, MxFormat::Fp4, ScaleRule::Floor).unwrap();
        let wd = dequantize(&wq).unwrap();
        assert_eq!(mx_matmul_nt(&x, m, &wq).unwrap(), matmul_nt(&x, m, k, &wd, 2 * n).unwrap());
        let offs = [1, 3];
        let a = grouped_gemm_mx(&x, m, &wq, 2, &offs, None, Epilogue::SituGlu).unwrap();
        let b = grouped_gemm(&x, m, k, &wd, 2, n, &offs, None, Epilogue::SituGlu).unwrap();
        assert_eq!(a, b, "seed {seed}");
        assert!(grouped_gemm_mx(&x, m, &wq, 3, &[1, 2, 3], None, Epilogue::None).is_err());
    }
}
