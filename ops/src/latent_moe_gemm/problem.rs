//! The problem: its dims ([`DIMS`], checked before anything is built), the concrete problem a preset resolves
//! to ([`GemmProblem`]: ragged group sizes, K, N, epilogue, routing weights) and its size bound.

use super::{Epilogue, GemmSpec};
use crate::OpError;
use crate::data;
use crate::dims::{self, DimDecl};
use crate::op::Preset;

/// The dims of `latent_moe_gemm` presets (see [`GemmProblem::from_preset`]).
pub const DIMS: &[DimDecl] = &[
    DimDecl::required("K", 1, dims::MAX_COLS, "reduction dim"),
    DimDecl::required("N", 1, dims::MAX_COLS, "output columns (a GLU epilogue halves them)"),
    DimDecl::optional("M", 0, dims::MAX_ROWS, "rows of a dense product (instead of G)"),
    DimDecl::optional("G", 1, dims::MAX_GROUPS, "groups (routed experts)"),
    DimDecl::optional("mean", 0, dims::MAX_ROWS, "mean rows per group, drawn ragged (with G)"),
    DimDecl::optional("seed", 0, i64::MAX, "seed of the ragged draw (with mean)"),
    DimDecl::indexed("c", "G", 0, dims::MAX_ROWS, "rows of group i (instead of mean)"),
    DimDecl::optional("epilogue", 0, 2, "0 none, 1 SiTU-GLU, 2 SwiGLU"),
    DimDecl::flag("p", "1: routing weights scale each row"),
];

/// The elements of a `latent_moe_gemm` or `mxfp4_matmul` problem: weights, activations and outputs (rows of a
/// ragged draw count up to twice the mean).
pub fn gemm_footprint(p: &Preset) -> f64 {
    let (k, n) = (dims::size(p, "K", 0), dims::size(p, "N", 0));
    let g = if p.dims.contains_key("M") { 1.0 } else { dims::size(p, "G", 0) };
    let m = if p.dims.contains_key("M") {
        dims::size(p, "M", 0)
    } else if p.dims.contains_key("c0") {
        dims::family_sum(p, "c", g)
    } else if p.dims.contains_key("per") {
        g * dims::size(p, "per", 0)
    } else {
        2.0 * g * dims::size(p, "mean", 0)
    };
    g * n * k + m * k + m * n
}

/// Ragged group sizes drawn around `mean` (first group empty, multiples of `align`), deterministic for a seed.
pub fn ragged_counts(g: usize, mean: usize, align: usize, seed: u64) -> Vec<usize> {
    let u = data::uniform(g, 0.0, 2.0, seed);
    u.iter()
        .enumerate()
        .map(|(i, v)| if i == 0 { 0 } else { ((v * mean as f32).round() as usize / align) * align })
        .collect()
}

/// The epilogue of a `latent_moe_gemm` or `mxfp4_matmul` preset (dim `epilogue`: 0 none, the default, 1
/// SiTU-GLU, 2 SwiGLU) for `n` weight columns, which a GLU epilogue needs even; errors name `op`.
pub fn epilogue_of(op: &'static str, p: &Preset, n: usize) -> Result<Epilogue, OpError> {
    let bad = |arg: &str, why| OpError::BadInput { op, arg: arg.into(), why };
    let epilogue = match p.get_or("epilogue", 0) {
        0 => Epilogue::None,
        1 => Epilogue::SituGlu,
        2 => Epilogue::SwiGlu,
        e => return Err(bad("epilogue", format!("0, 1 or 2, got {e}"))),
    };
    if epilogue.is_glu() && !n.is_multiple_of(2) {
        return Err(bad("N", format!("a GLU epilogue needs an even N, got {n}")));
    }
    Ok(epilogue)
}

/// The rows per group of a `latent_moe_gemm` or `mxfp4_matmul` preset, `(grouped, counts)`: `M` (a dense
/// product, one group), else `G` groups of `c0..` rows (explicit), `per` rows each (`mxfp4_matmul`) or `mean`
/// rows on average ([`ragged_counts`] with `seed`, default 1, multiples of 8).
pub fn group_counts(p: &Preset) -> Result<(bool, Vec<usize>), OpError> {
    if let Some(&m) = p.dims.get("M") {
        return Ok((false, vec![m as usize]));
    }
    let g = p.get("G")? as usize;
    let counts = if p.dims.contains_key("c0") {
        (0..g).map(|i| p.get_or(&format!("c{i}"), 0) as usize).collect()
    } else if let Some(&per) = p.dims.get("per") {
        vec![per as usize; g]
    } else {
        ragged_counts(g, p.get("mean")? as usize, 8, p.get_or("seed", 1) as u64)
    };
    Ok((true, counts))
}

/// A concrete problem.
#[derive(Clone, Debug)]
pub struct GemmProblem {
    pub grouped: bool,
    pub counts: Vec<usize>,
    pub k: usize,
    pub n: usize,
    pub epilogue: Epilogue,
    pub row_scale: bool,
}

impl GemmProblem {
    /// Resolve a preset: dims `G`, `K`, `N`, and either `mean` (+ `seed`) for drawn ragged counts or `M` for a
    /// dense product; optional `epilogue` (0 none, 1 SiTU-GLU, 2 SwiGLU) and `p` (1 = routing weights).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let k = p.get("K")? as usize;
        let n = p.get("N")? as usize;
        let epilogue = epilogue_of("latent_moe_gemm", p, n)?;
        let row_scale = p.get_or("p", 0) == 1;
        let (grouped, counts) = group_counts(p)?;
        Ok(GemmProblem { grouped, counts, k, n, epilogue, row_scale })
    }
    /// Total rows.
    pub fn m(&self) -> usize {
        self.counts.iter().sum()
    }
    /// Output columns.
    pub fn n_out(&self) -> usize {
        if self.epilogue.is_glu() { self.n / 2 } else { self.n }
    }
    /// The kernel variant.
    pub fn spec(&self) -> GemmSpec {
        GemmSpec::for_shape(self.grouped, self.epilogue, self.row_scale, self.k, self.n_out())
    }
    /// Inclusive cumulative group ends.
    pub fn offs(&self) -> Vec<i64> {
        self.counts
            .iter()
            .scan(0i64, |s, c| {
                *s += *c as i64;
                Some(*s)
            })
            .collect()
    }
    /// The tuning buckets: rows per non-empty group, K, N and the group count.
    pub fn bucket_dims(&self) -> Vec<(String, u64)> {
        let nonempty = self.counts.iter().filter(|c| **c > 0).count().max(1);
        vec![
            ("rows_per_group".into(), (self.m() / nonempty) as u64),
            ("K".into(), self.k as u64),
            ("N".into(), self.n as u64),
            ("groups".into(), self.counts.len() as u64),
        ]
    }
}
