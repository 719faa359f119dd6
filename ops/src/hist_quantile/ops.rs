//! The instances and the operators `hist_quantile.qb` and `hist_quantile.column`.

use super::*;
use crate::dims::{self, DimDecl};

/// A problem with its inputs (checked on construction).
pub struct QbInstance {
    pub pb: Problem,
    s: Vec<f32>,
    b: Option<Vec<f32>>,
    s_t: HostTensor,
    b_t: Option<HostTensor>,
    seed: u64,
    reference: std::sync::OnceLock<Result<Reference, OpError>>,
}

impl QbInstance {
    /// An instance on given inputs; NaN (and, for QB, infinite scores) is `BadInput` naming `s` or `b`.
    pub fn new(pb: Problem, s: Vec<f32>, b: Option<Vec<f32>>, seed: u64) -> Result<Self, OpError> {
        pb.validate()?;
        check_inputs(&pb, &s, b.as_deref())?;
        let s_t = data::tensor(DType::F32, &[pb.t, pb.e], &s);
        let b_t = b.as_ref().map(|b| data::tensor(DType::F32, &[pb.e], b));
        Ok(QbInstance { pb, s, b, s_t, b_t, seed, reference: std::sync::OnceLock::new() })
    }
    /// The reference results (computed once).
    pub fn reference(&self) -> Result<&Reference, OpError> {
        self.reference.get_or_init(|| reference(&self.pb, &self.s, self.b.as_deref())).as_ref().map_err(|e| e.clone())
    }
    /// Experts compared with the exact sort: all of them for small problems, 64 spread ones otherwise.
    pub fn exact_columns(&self) -> Vec<usize> {
        let e = self.pb.e;
        if self.pb.t * e <= 1 << 22 {
            return (0..e).collect();
        }
        let mut cols: Vec<usize> = (0..64).map(|i| (i * e / 64 + (self.seed as usize % 7)) % e).collect();
        cols.extend([0, e - 1]);
        cols.sort();
        cols.dedup();
        cols
    }
}

impl Instance for QbInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        let what = match pb.kind {
            Kind::Qb { k } => format!("qb k={k}"),
            Kind::Column { fraction } => format!("column f={fraction}"),
        };
        format!(
            "{what} T={} E={} B={} [{}, {}) {} data={:?} seed={}",
            pb.t,
            pb.e,
            pb.bins,
            pb.lo,
            pb.hi,
            if pb.two_pass { "two-pass" } else { "one-pass" },
            pb.data,
            self.seed
        )
    }
    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        build_plan(&self.pb, &self.s_t, self.b_t.as_ref(), knobs)
    }
    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let r = self.reference()?;
        check_outputs(&self.pb, &self.s, r, &self.exact_columns(), out)
    }
    fn work(&self) -> Work {
        let pb = &self.pb;
        let (t, e) = (pb.t as f64, pb.e as f64);
        let alpha = if matches!(pb.kind, Kind::Qb { .. }) { 4.0 * t } else { 0.0 };
        Work { flops: 4.0 * t * e, bytes: 4.0 * t * e + alpha + 4.0 * e * (pb.bins as f64 + 2.0) }
    }
    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        let (k, fraction) = match pb.kind {
            Kind::Qb { k } => (Some(k), None),
            Kind::Column { fraction } => (None, Some(fraction)),
        };
        serde_json::json!({
            "op": pb.op(), "T": pb.t, "E": pb.e, "k": k, "fraction": fraction, "B": pb.bins,
            "two_pass": pb.two_pass, "lo": pb.lo, "hi": pb.hi, "target": pb.target(),
        })
    }
}

const EDGE: [i64; 10] = [1, 2, 15, 16, 17, 31, 33, 63, 64, 65];

fn pick(rng: &mut StdRng, max: i64) -> i64 {
    if rng.random_bool(0.5) {
        let v = EDGE[rng.random_range(0..EDGE.len())];
        if v <= max {
            return v;
        }
    }
    rng.random_range(1..=max)
}

fn pick_bins(rng: &mut StdRng) -> i64 {
    const B: [i64; 9] = [1, 2, 7, 16, 32, 64, 100, 128, 256];
    if rng.random_bool(0.1) { 1024 } else { B[rng.random_range(0..B.len())] }
}

/// `hist_quantile.qb`: the full Quantile Balancing step (alpha, margin histograms, located quantile, bias).
pub struct HistQuantileQb;

/// `hist_quantile.column`: the per-column quantile of a `[T, E]` matrix from its histograms.
pub struct HistQuantileColumn;

/// The dims of `hist_quantile.qb` presets (see [`Problem::from_preset`]).
pub const QB_DIMS: &[DimDecl] = &[
    DimDecl::required("T", 1, i32::MAX as i64, "tokens (rows)"),
    DimDecl::required("E", 1, MAX_E as i64, "experts (columns)"),
    DimDecl::required("k", 0, MAX_K as i64, "experts per token (k < E)"),
    DimDecl::required("B", 1, MAX_BINS as i64, "regular bins"),
    DimDecl::flag("two", "1: a zoomed second pass"),
    DimDecl::optional("lo_milli", -(1 << 40), 1 << 40, "histogram range start, in thousandths (default -1000)"),
    DimDecl::optional("hi_milli", -(1 << 40), 1 << 40, "histogram range end, in thousandths (default 1000)"),
    DimDecl::optional("data", 0, 3, "inputs: 0 random, 1 ties, 2 constant, 3 edges"),
];

/// The dims of `hist_quantile.column` presets (see [`Problem::from_preset`]).
pub const COLUMN_DIMS: &[DimDecl] = &[
    DimDecl::required("T", 1, i32::MAX as i64, "tokens (rows)"),
    DimDecl::required("E", 1, dims::MAX_COLS, "columns"),
    DimDecl::required("B", 1, MAX_BINS as i64, "regular bins"),
    DimDecl::optional("frac_ppm", 0, 1_000_000, "the quantile's fraction, parts per million (default 982143)"),
    DimDecl::flag("two", "1: a zoomed second pass"),
    DimDecl::optional("lo_milli", -(1 << 40), 1 << 40, "histogram range start, in thousandths (default 0)"),
    DimDecl::optional("hi_milli", -(1 << 40), 1 << 40, "histogram range end, in thousandths (default 1000)"),
    DimDecl::optional("data", 0, 3, "inputs: 0 random, 1 ties, 2 constant, 3 edges"),
];

fn check_dims_of(op: &'static str, decls: &[DimDecl], p: &Preset) -> Result<(), OpError> {
    dims::check(op, decls, p)?;
    dims::bound(op, p, dims::size(p, "T", 0) * (dims::size(p, "E", 0) + 2.0))
}

fn instance_of(op: &str, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
    let pb = Problem::from_preset(op, p)?;
    let (s, b) = generate(&pb, seed);
    Ok(Box::new(QbInstance::new(pb, s, b, seed)?))
}

fn kernels_of(op: &str, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
    Ok(kernel_set(&Problem::from_preset(op, p)?, knobs)?.all())
}

impl Operator for HistQuantileQb {
    fn name(&self) -> &'static str {
        OP_QB
    }
    fn summary(&self) -> &'static str {
        "Quantile Balancing step: per-token (k+1)-th largest biased score, per-expert margin histograms (mergeable u32 counts), located quantile (one or two passes), bias = -quantile"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("T262144 E896 k16 B1024", &[("T", 262144), ("E", 896), ("k", 16), ("B", 1024)]),
            Preset::new("T65536 E896 k16 B4096", &[("T", 65536), ("E", 896), ("k", 16), ("B", 4096)]),
            Preset::new(
                "T262144 E896 k16 B1024 two-pass",
                &[("T", 262144), ("E", 896), ("k", 16), ("B", 1024), ("two", 1)],
            ),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        let e = pick(rng, 70).max(1);
        let k = rng.random_range(0..e.min(34));
        let t = pick(rng, 160);
        let bins = pick_bins(rng);
        let two = rng.random_bool(0.4) as i64;
        let data = rng.random_range(0..4i64);
        Preset::new(
            &format!("T{t} E{e} k{k} B{bins} two{two} data{data}"),
            &[("T", t), ("E", e), ("k", k), ("B", bins), ("two", two), ("data", data)],
        )
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        check_dims_of(self.name(), QB_DIMS, p)
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        instance_of(OP_QB, p, seed)
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        kernels_of(OP_QB, p, knobs)
    }
}

impl Operator for HistQuantileColumn {
    fn name(&self) -> &'static str {
        OP_COLUMN
    }
    fn summary(&self) -> &'static str {
        "per-column quantile of a [T, E] f32 matrix at a fraction, from per-column histograms on [lo, hi) (one or two passes)"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("T262144 E896 B1024 f0.982", &[("T", 262144), ("E", 896), ("B", 1024)]),
            Preset::new("T262144 E896 B1024 f0.982 two-pass", &[("T", 262144), ("E", 896), ("B", 1024), ("two", 1)]),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        let e = pick(rng, 100);
        let t = pick(rng, 200);
        let bins = pick_bins(rng);
        let two = rng.random_bool(0.4) as i64;
        let data = rng.random_range(0..4i64);
        let frac = match rng.random_range(0..4) {
            0 => 0,
            1 => 1_000_000,
            _ => rng.random_range(0..=1_000_000i64),
        };
        let (lo, hi) = [(0, 1000), (-1000, 1000), (-3000, 5000), (250, 750)][rng.random_range(0..4)];
        Preset::new(
            &format!("T{t} E{e} B{bins} f{frac}ppm [{lo},{hi}]m two{two} data{data}"),
            &[
                ("T", t),
                ("E", e),
                ("B", bins),
                ("two", two),
                ("data", data),
                ("frac_ppm", frac),
                ("lo_milli", lo),
                ("hi_milli", hi),
            ],
        )
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        check_dims_of(self.name(), COLUMN_DIMS, p)
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        instance_of(OP_COLUMN, p, seed)
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        kernels_of(OP_COLUMN, p, knobs)
    }
}
