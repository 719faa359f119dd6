//! The problem of `kda`: the gate forms, the kernel variant ([`KdaSpec`]), the dims of presets, [`KdaProblem`]
//! (shapes, validation, chunk tables), the host-side gate check and the seeded inputs ([`KdaData`]).

use super::*;

/// The log-decay lower bound of the safe path and the safe gate form (SEMANTICS.md section 2.3).
pub const LOWER_BOUND: f32 = -5.0;

/// How the gate reaches the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum GateForm {
    /// `g` is the log-decay itself.
    Pre,
    /// `g = lb * sigmoid(x + bias)` (in `(lb, 0)`), `bias: [HV, K]` optional; with `a_log` (gate code 3, FlashKDA's
    /// form and FLA's `safe_gate` with `A_log`) `g = lb * sigmoid(exp(A_log[hv]) * (x + bias))`, `A_log: [HV]`.
    Safe { bias: bool, a_log: bool },
    /// `g = -exp(A_log[hv]) * softplus(x + dt_bias)`, `A_log: [HV]`, `dt_bias: [HV, K]` optional.
    Standard { bias: bool },
}

impl GateForm {
    /// True when a `[HV, K]` bias tensor is passed.
    pub fn has_bias(self) -> bool {
        matches!(self, GateForm::Safe { bias: true, .. } | GateForm::Standard { bias: true })
    }
    /// True when an `A_log: [HV]` tensor is passed (the standard form, and the safe form with its scale).
    pub fn has_a_log(self) -> bool {
        matches!(self, GateForm::Standard { .. } | GateForm::Safe { a_log: true, .. })
    }
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            GateForm::Pre => "pre",
            GateForm::Safe { bias: false, a_log: false } => "lbsig",
            GateForm::Safe { bias: true, a_log: false } => "lbsigb",
            GateForm::Safe { bias: false, a_log: true } => "lbsiga",
            GateForm::Safe { bias: true, a_log: true } => "lbsigab",
            GateForm::Standard { bias: false } => "std",
            GateForm::Standard { bias: true } => "stdb",
        }
    }
    pub(crate) fn from_code(code: i64, bias: bool) -> Result<Self, OpError> {
        match code {
            0 => Ok(GateForm::Pre),
            1 => Ok(GateForm::Safe { bias, a_log: false }),
            2 => Ok(GateForm::Standard { bias }),
            3 => Ok(GateForm::Safe { bias, a_log: true }),
            _ => Err(bad(
                "gate",
                format!("unknown gate form {code} (0 pre, 1 lb*sigmoid, 2 standard, 3 lb*sigmoid(exp(A_log)*..))"),
            )),
        }
    }
}

/// What a chunked-kernel variant computes (fixed by the problem).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KdaSpec {
    pub dk: u32,
    pub dv: u32,
    /// Safe-gate diagonal tiles (midpoint anchor) instead of the exact hierarchy.
    pub safe: bool,
    pub gate: GateForm,
    /// The raw gate input `g` is bf16 (an in-kernel gate form only; else f32), see [`KdaProblem::g_bf16`].
    pub g_bf16: bool,
    pub l2norm: bool,
    pub beta_sigmoid: bool,
    /// An initial state is given.
    pub h0: bool,
}

impl KdaSpec {
    /// No in-kernel option: precomputed gates, no L2 norms, no beta sigmoid.
    pub fn plain(&self) -> bool {
        self.gate == GateForm::Pre && !self.l2norm && !self.beta_sigmoid
    }
    /// The variant part of kernel names.
    pub fn tag(&self) -> String {
        format!(
            "k{}_v{}_{}_{}{}{}{}",
            self.dk,
            self.dv,
            if self.safe { "safe" } else { "exact" },
            self.gate.name(),
            if self.g_bf16 { "_gbf16" } else { "" },
            if self.l2norm { "_l2" } else { "" },
            if self.beta_sigmoid { "_bsig" } else { "" }
        )
    }
}

pub(crate) fn bad(arg: &str, why: String) -> OpError {
    OpError::BadInput { op: "kda", arg: arg.into(), why }
}

/// A warp grid for a `rows x cols` tile on `warps` warps: as many 16-row bands as divide both the rows and the
/// warps, then the remaining warps over the columns while each keeps a multiple of `unit` columns (leftover
/// warps hold replicas).
pub fn grid(rows: u32, cols: u32, warps: u32, unit: u32) -> [u32; 2] {
    let wm = (1..=warps).rev().find(|w| warps.is_multiple_of(*w) && (rows / 16).is_multiple_of(*w)).unwrap_or(1);
    let rest = warps / wm;
    let wn = (1..=rest).rev().find(|w| rest.is_multiple_of(*w) && cols.is_multiple_of(unit * w)).unwrap_or(1);
    [wm, wn]
}

/// The dims of `kda` presets (see [`KdaProblem::from_preset`]).
pub const DIMS: &[DimDecl] = &[
    DimDecl::optional("B", 1, dims::MAX_GROUPS, "sequences of T tokens (instead of N)"),
    DimDecl::optional("T", 0, dims::MAX_ROWS, "tokens per sequence"),
    DimDecl::required("H", 1, dims::MAX_HEADS, "query/key heads"),
    DimDecl::optional("HV", 1, dims::MAX_HEADS, "value heads, a multiple of H (default H)"),
    DimDecl::required("K", 1, 128, "key head dim: 32, 64 or 128"),
    DimDecl::optional("V", 1, 128, "value head dim: 32, 64 or 128 (default K)"),
    DimDecl::optional("N", 1, dims::MAX_GROUPS, "varlen: the number of sequences (then B = 1)"),
    DimDecl::indexed("L", "N", 0, dims::MAX_ROWS, "varlen: tokens of sequence i"),
    DimDecl::flag("safe", "1: the safe-gate path (default), 0: the exact path"),
    DimDecl::optional("gate", 0, 3, "gate form: 0 pre-computed, 1 lb*sigmoid, 2 standard, 3 lb*sigmoid(exp(A_log)*..)"),
    DimDecl::flag("bias", "1: the gate's bias"),
    DimDecl::flag("gbf16", "1: the raw gate input in bf16 (in-kernel gate forms; default f32)"),
    DimDecl::flag("l2norm", "1: in-kernel l2norm of q and k"),
    DimDecl::flag("bsig", "1: in-kernel sigmoid of beta"),
    DimDecl::flag("h0", "1: an initial state"),
    DimDecl::flag("extreme", "1: gates of -1000 mixed in (exact path)"),
];

/// Elements of q, k, v, g, o and the per-chunk states of a `kda` problem (or, `decode`, of N sequences of T
/// tokens against their states).
pub(crate) fn kda_footprint(p: &Preset, decode: bool) -> f64 {
    let h = dims::size(p, "H", 0);
    let hv = dims::size(p, "HV", h as i64);
    let k = dims::size(p, "K", 0);
    let v = dims::size(p, "V", k as i64);
    let (seqs, tokens) = if decode {
        let n = dims::size(p, "N", 0);
        (n, n * dims::size(p, "T", 1))
    } else if p.dims.contains_key("N") {
        let n = dims::size(p, "N", 0);
        (n, dims::family_sum(p, "L", n))
    } else {
        let b = dims::size(p, "B", 0);
        (b, b * dims::size(p, "T", 0))
    };
    tokens * hv * (3.0 * k + 2.0 * v) + (tokens / 64.0 + 2.0 * seqs) * hv * k * v
}

/// One chunked-KDA problem.
#[derive(Clone, Debug, PartialEq)]
pub struct KdaProblem {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
    /// Sequence lengths (varlen, B = 1); `None`: B sequences of T tokens.
    pub lens: Option<Vec<usize>>,
    pub safe: bool,
    pub gate: GateForm,
    /// The raw gate input `g` is bf16 instead of f32 (dim `gbf16`; in-kernel gate forms only): the gate
    /// projection of a model is bf16, and FlashKDA's API takes the gate as bf16, so its comparison presets pass
    /// it so (half the gate's bytes: 201 MB less at B1 T8192 H96). The kernels and the f64 reference read the same
    /// bf16 values; the gate form is then computed in f32 (kernels) or f64 (reference) as with an f32 input.
    pub g_bf16: bool,
    pub l2norm: bool,
    pub beta_sigmoid: bool,
    pub h0: bool,
    /// Gates of -1000 mixed in (exact path tests).
    pub extreme: bool,
}

impl KdaProblem {
    /// Resolve a preset: dims `B`, `T`, `H`, `K`, and optionally `HV` (default H), `V` (default K), `safe`
    /// (default 1), `gate` (0 pre, 1 lb*sigmoid, 2 standard, 3 lb*sigmoid(exp(A_log)*..)) with `bias`, `l2norm`, `bsig`, `h0`, `extreme`,
    /// and for varlen `N` with lengths `L0..L{N-1}` (then B = 1 and T = their sum).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let flag = |d: &str| p.get_or(d, 0) != 0;
        let (b, t, lens) = if let Some(&n) = p.dims.get("N") {
            let lens: Vec<usize> = (0..n).map(|i| p.get_or(&format!("L{i}"), 0).max(0) as usize).collect();
            (1, lens.iter().sum(), Some(lens))
        } else {
            (p.get("B")? as usize, p.get("T")? as usize, None)
        };
        let h = p.get("H")? as usize;
        let dk = p.get("K")? as usize;
        let pb = KdaProblem {
            b,
            t,
            h,
            hv: p.get_or("HV", h as i64) as usize,
            dk,
            dv: p.get_or("V", dk as i64) as usize,
            lens,
            safe: p.get_or("safe", 1) != 0,
            gate: GateForm::from_code(p.get_or("gate", 0), flag("bias"))?,
            g_bf16: flag("gbf16"),
            l2norm: flag("l2norm"),
            beta_sigmoid: flag("bsig"),
            h0: flag("h0"),
            extreme: flag("extreme"),
        };
        pb.validate()?;
        Ok(pb)
    }

    /// Shapes and options the kernels support.
    pub fn validate(&self) -> Result<(), OpError> {
        for (arg, d) in [("K", self.dk), ("V", self.dv)] {
            if !matches!(d, 32 | 64 | 128) {
                return Err(bad(arg, format!("head dim {d}: the kernels support 32, 64 and 128")));
            }
        }
        if self.h == 0 || self.hv == 0 || !self.hv.is_multiple_of(self.h) {
            return Err(bad("HV", format!("HV = {} must be a positive multiple of H = {}", self.hv, self.h)));
        }
        if self.b == 0 {
            return Err(bad("B", "need at least one sequence".into()));
        }
        if self.safe && matches!(self.gate, GateForm::Standard { .. }) {
            return Err(bad(
                "gate",
                "the safe path needs gates in [lb, 0): the standard form -exp(A_log)*softplus(..) is unbounded; \
                 use the exact path (safe=0) or the lb*sigmoid form"
                    .into(),
            ));
        }
        if self.g_bf16 && self.gate == GateForm::Pre {
            return Err(bad(
                "gbf16",
                "a bf16 gate needs an in-kernel gate form (gate=1..3): a pre-computed log-decay is summed over the \
                 chunk and stays f32"
                    .into(),
            ));
        }
        if self.safe && self.extreme {
            return Err(bad("extreme", "gates of -1000 need the exact path (safe=0)".into()));
        }
        Ok(())
    }

    /// Total tokens (rows of q).
    pub fn tokens(&self) -> usize {
        self.b * self.t
    }
    /// Number of sequences N.
    pub fn num_seqs(&self) -> usize {
        self.lens.as_ref().map_or(self.b, |l| l.len())
    }
    /// Sequences as (first row, end row).
    pub fn seqs(&self) -> Vec<(usize, usize)> {
        match &self.lens {
            Some(l) => l
                .iter()
                .scan(0usize, |s, &n| {
                    let r = (*s, *s + n);
                    *s += n;
                    Some(r)
                })
                .collect(),
            None => (0..self.b).map(|i| (i * self.t, (i + 1) * self.t)).collect(),
        }
    }
    /// The chunk table `[(row0, len)]` and the per-sequence `[(first chunk, chunks)]` for a chunk size.
    pub fn chunk_tables(&self, chunk: usize) -> (Vec<i64>, Vec<i64>) {
        let (mut ctab, mut stab) = (vec![], vec![]);
        for (s, e) in self.seqs() {
            let first = ctab.len() / 2;
            let mut r = s;
            while r < e {
                let len = chunk.min(e - r);
                ctab.extend([r as i64, len as i64]);
                r += len;
            }
            stab.extend([first as i64, (ctab.len() / 2 - first) as i64]);
        }
        (ctab, stab)
    }
    /// The kernel variant.
    pub fn spec(&self) -> KdaSpec {
        KdaSpec {
            dk: self.dk as u32,
            dv: self.dv as u32,
            safe: self.safe,
            gate: self.gate,
            g_bf16: self.g_bf16,
            l2norm: self.l2norm,
            beta_sigmoid: self.beta_sigmoid,
            h0: self.h0,
        }
    }
    /// The query scale K^-1/2 (as the f32 the kernels use).
    pub fn scale(&self) -> f32 {
        (1.0 / (self.dk as f64).sqrt()) as f32
    }
    pub(crate) fn describe(&self) -> String {
        let shape = match &self.lens {
            Some(l) if l.len() <= 8 => format!("varlen {l:?}"),
            Some(l) => format!("varlen N={} T={}", l.len(), self.t),
            None => format!("B{} T{}", self.b, self.t),
        };
        format!(
            "{shape} H{} HV{} K{} V{} {}{} gate={}{}{}{}{}",
            self.h,
            self.hv,
            self.dk,
            self.dv,
            if self.safe { "safe" } else { "exact" },
            if self.extreme { "(-1000 gates)" } else { "" },
            self.gate.name(),
            if self.g_bf16 { " g-bf16" } else { "" },
            if self.l2norm { " l2norm" } else { "" },
            if self.beta_sigmoid { " beta-sigmoid" } else { "" },
            if self.h0 { " h0" } else { "" },
        )
    }
}

/// The host-side gate check of the safe path: every pre-computed gate must be a number `>= lb`. Run before
/// anything is launched; the error is [`OpError::BadInput`] naming `g`.
pub fn check_gates(g: &HostTensor, lb: f32) -> Result<(), OpError> {
    let bad_at = g.data.par_chunks_exact(4).position_first(|b| {
        let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        v.is_nan() || v < lb
    });
    match bad_at {
        None => Ok(()),
        Some(i) => Err(bad(
            "g",
            format!(
                "the safe-gate path needs every gate in [{lb}, 0): g[{i}] = {} (use the exact path, safe=0, for \
                 unbounded gates)",
                g.get_f32(i)
            ),
        )),
    }
}

/// Inputs of one problem, as the kernels take them (`[B*T, ...]` rows).
#[derive(Clone, Debug)]
pub struct KdaData {
    pub q: HostTensor,
    pub k: HostTensor,
    pub v: HostTensor,
    pub g: HostTensor,
    pub beta: HostTensor,
    pub bias: Option<HostTensor>,
    pub a_log: Option<HostTensor>,
    pub h0: Option<HostTensor>,
}

/// Unit-L2 rows of `dim` (normalised in f32), rounded to bf16.
fn unit_rows(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut x = data::normal(n * dim, 1.0, seed);
    x.par_chunks_mut(dim).for_each(|r| {
        let s = r.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-20);
        r.iter_mut().for_each(|v| *v /= s);
    });
    x
}

impl KdaData {
    /// Seeded inputs: q, k unit rows (plain normal draws when the kernel normalises them), v ~ N(0, 1), beta
    /// uniform in (0, 1) (or N(0, 1) logits), h0 ~ N(0, 1); gates `lb*sigmoid(N(0,1))` on the safe path,
    /// `log(sigmoid(N(0,1)))` on the exact path with about 2% set to -1000 when `extreme`; raw gate inputs
    /// N(0, 1) (rounded to bf16 with `g_bf16`), biases N(0, 0.5^2) and `A_log` uniform in (-1, 1) for the
    /// in-kernel gate forms.
    pub fn generate(pb: &KdaProblem, seed: u64) -> KdaData {
        let (tt, h, hv, dk, dv) = (pb.tokens(), pb.h, pb.hv, pb.dk, pb.dv);
        let qk = |s: u64| {
            if pb.l2norm { data::normal(tt * h * dk, 1.0, s) } else { unit_rows(tt * h, dk, s) }
        };
        let q = data::tensor(DType::Bf16, &[tt, h, dk], &qk(seed ^ 0x71));
        let k = data::tensor(DType::Bf16, &[tt, h, dk], &qk(seed ^ 0x6b));
        let v = data::tensor(DType::Bf16, &[tt, hv, dv], &data::normal(tt * hv * dv, 1.0, seed ^ 0x76));
        let ng = tt * hv * dk;
        let mut g = data::normal(ng, 1.0, seed ^ 0x67);
        match pb.gate {
            GateForm::Pre if pb.safe => g.par_iter_mut().for_each(|x| *x = LOWER_BOUND / (1.0 + (-*x).exp())),
            GateForm::Pre => {
                let u = data::uniform(ng, 0.0, 1.0, seed ^ 0x65);
                g.par_iter_mut().zip(u).for_each(|(x, u)| {
                    *x = if pb.extreme && u < 0.02 { -1000.0 } else { -(1.0 + (-*x).exp()).ln() };
                });
            }
            _ => {}
        }
        // (`g_bf16`: the same draws rounded to bf16; the reference reads them back from the tensor.)
        let g = data::tensor(if pb.g_bf16 { DType::Bf16 } else { DType::F32 }, &[tt, hv, dk], &g);
        let beta = if pb.beta_sigmoid {
            data::normal(tt * hv, 1.0, seed ^ 0x62)
        } else {
            data::uniform(tt * hv, 0.02, 1.0, seed ^ 0x62)
        };
        let beta = data::tensor(DType::Bf16, &[tt, hv], &beta);
        let bias =
            pb.gate.has_bias().then(|| data::tensor(DType::F32, &[hv, dk], &data::normal(hv * dk, 0.5, seed ^ 0x31)));
        let a_log =
            pb.gate.has_a_log().then(|| data::tensor(DType::F32, &[hv], &data::uniform(hv, -1.0, 1.0, seed ^ 0x41)));
        let n = pb.num_seqs();
        let h0 = pb
            .h0
            .then(|| data::tensor(DType::F32, &[n, hv, dk, dv], &data::normal(n * hv * dk * dv, 1.0, seed ^ 0x68)));
        KdaData { q, k, v, g, beta, bias, a_log, h0 }
    }

    /// The reference inputs of one (sequence, value head) pair: rows `rows` of q/k head `hv / (HV/H)` and of
    /// v, g (the effective log-decay, from the gate form in f64), beta (after the sigmoid when asked) and h0.
    pub fn pair_inputs(&self, pb: &KdaProblem, rows: (usize, usize), seq: usize, hv: usize) -> rk::KdaInputs {
        let (dk, dv) = (pb.dk, pb.dv);
        let hq = hv / (pb.hv / pb.h);
        let t = rows.1 - rows.0;
        let mut x = rk::KdaInputs::new(1, t, 1, 1, dk, dv, vec![], vec![], vec![], vec![], vec![]);
        for r in rows.0..rows.1 {
            let qo = (r * pb.h + hq) * dk;
            x.q.extend((0..dk).map(|i| self.q.get_f32(qo + i)));
            x.k.extend((0..dk).map(|i| self.k.get_f32(qo + i)));
            let vo = (r * pb.hv + hv) * dv;
            x.v.extend((0..dv).map(|j| self.v.get_f32(vo + j)));
            let go = (r * pb.hv + hv) * dk;
            x.g.extend((0..dk).map(|i| {
                let raw = self.g.get_f32(go + i) as f64;
                let bias = self.bias.as_ref().map_or(0.0, |b| b.get_f32(hv * dk + i) as f64);
                let a_log = || self.a_log.as_ref().expect("A_log of the gate form").get_f32(hv) as f64;
                (match pb.gate {
                    GateForm::Pre => raw,
                    GateForm::Safe { a_log: false, .. } => rk::gate_safe(raw, bias, LOWER_BOUND as f64),
                    GateForm::Safe { a_log: true, .. } => rk::gate_safe_scaled(raw, a_log(), bias, LOWER_BOUND as f64),
                    GateForm::Standard { .. } => rk::gate_standard(raw, a_log(), bias),
                }) as f32
            }));
            let bv = self.beta.get_f32(r * pb.hv + hv) as f64;
            x.beta.push(if pb.beta_sigmoid { (1.0 / (1.0 + (-bv).exp())) as f32 } else { bv as f32 });
        }
        x.h0 = self.h0.as_ref().map(|h0| {
            let o = (seq * pb.hv + hv) * dk * dv;
            (0..dk * dv).map(|i| h0.get_f32(o + i)).collect()
        });
        x.scale = Some(pb.scale() as f64);
        x.use_qk_l2norm = pb.l2norm;
        x
    }
}
