//! The problem of [`crate::hist_quantile`] (shapes, data modes, input checks) and histograms on the host.

use super::*;

/// Which quantity is located.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Kind {
    /// The QB step with `k` experts per token: target `q = T k / E` margins above.
    Qb { k: usize },
    /// The per-column quantile at `fraction`: target `(1 - f)(T - 1) + 1` values above.
    Column { fraction: f64 },
}

/// How random inputs are drawn (correctness cases cover each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataMode {
    /// QB: sigmoid(2 N(0,1)) scores, bias in [-0.1, 0.1); column: uniform over the range widened by 5%.
    Random,
    /// Values on a coarse grid: many ties, and (QB) margins on bin edges.
    Ties,
    /// Every column constant (all-equal columns).
    Constant,
    /// Values exactly on bin edges, at lo and hi and one ulp below them.
    Edges,
}

impl DataMode {
    fn from_code(c: i64) -> Result<Self, OpError> {
        Ok(match c {
            0 => DataMode::Random,
            1 => DataMode::Ties,
            2 => DataMode::Constant,
            3 => DataMode::Edges,
            _ => return Err(bad("data", format!("unknown data mode {c} (0 random, 1 ties, 2 constant, 3 edges)"))),
        })
    }
}

fn bad(arg: &str, why: String) -> OpError {
    OpError::BadInput { op: "hist_quantile", arg: arg.into(), why }
}

/// One problem: shapes, histogram geometry, pass count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    pub kind: Kind,
    /// Tokens (rows).
    pub t: usize,
    /// Experts (columns).
    pub e: usize,
    /// Regular bins B.
    pub bins: usize,
    /// Zoomed second pass.
    pub two_pass: bool,
    /// Histogram range `[lo, hi)` (f32 values).
    pub lo: f32,
    pub hi: f32,
    pub data: DataMode,
}

impl Problem {
    /// Resolve a preset of `op`: dims `T`, `E`, `B`, and `k` (QB) or `frac_ppm` (column, parts per million,
    /// default 982143 = 1 - 16/896); optional `two` (1 = two passes), `lo_milli` / `hi_milli` (range in
    /// thousandths; default [-1, 1) for QB, [0, 1) for columns) and `data` (0 random, 1 ties, 2 constant,
    /// 3 edges).
    pub fn from_preset(op: &str, p: &Preset) -> Result<Self, OpError> {
        let qb = op == OP_QB;
        let kind = if qb {
            Kind::Qb { k: nonneg("k", p.get("k")?)? }
        } else {
            Kind::Column { fraction: p.get_or("frac_ppm", 982_143) as f64 / 1e6 }
        };
        let (dlo, dhi) = if qb { (-1000, 1000) } else { (0, 1000) };
        let pb = Problem {
            kind,
            t: nonneg("T", p.get("T")?)?,
            e: nonneg("E", p.get("E")?)?,
            bins: nonneg("B", p.get("B")?)?,
            two_pass: p.get_or("two", 0) == 1,
            lo: (p.get_or("lo_milli", dlo) as f64 / 1e3) as f32,
            hi: (p.get_or("hi_milli", dhi) as f64 / 1e3) as f32,
            data: DataMode::from_code(p.get_or("data", 0))?,
        };
        pb.validate()?;
        Ok(pb)
    }

    /// Shape and parameter checks (typed errors naming the argument).
    pub fn validate(&self) -> Result<(), OpError> {
        if self.t == 0 || self.t > i32::MAX as usize {
            return Err(bad("T", format!("need 1 <= T <= 2^31 - 1 tokens, got {}", self.t)));
        }
        if self.e == 0 || self.t.saturating_mul(self.e) > (1usize << 40) {
            return Err(bad("E", format!("need E >= 1 and T E within 2^40, got E = {}", self.e)));
        }
        if let Kind::Qb { k } = self.kind {
            if self.e > MAX_E {
                return Err(bad("E", format!("the alpha kernel supports E <= {MAX_E}, got {}", self.e)));
            }
            if k >= self.e || k > MAX_K {
                return Err(bad("k", format!("need k < E = {} and k <= {MAX_K}, got k = {k}", self.e)));
            }
        }
        if let Kind::Column { fraction } = self.kind
            && !(0.0..=1.0).contains(&fraction)
        {
            return Err(bad("fraction", format!("{fraction} is outside [0, 1]")));
        }
        if self.bins == 0 || self.bins > MAX_BINS {
            return Err(bad("B", format!("need 1 <= B <= {MAX_BINS} bins, got {}", self.bins)));
        }
        Histogram::new(1, self.lo as f64, self.hi as f64, self.bins).map_err(|e| bad("lo/hi", e.to_string()))?;
        Ok(())
    }

    /// The operator this problem belongs to.
    pub fn op(&self) -> &'static str {
        match self.kind {
            Kind::Qb { .. } => OP_QB,
            Kind::Column { .. } => OP_COLUMN,
        }
    }

    /// The target count from the top.
    pub fn target(&self) -> f64 {
        match self.kind {
            Kind::Qb { k } => qb_target(self.t, self.e, k),
            Kind::Column { fraction } => (1.0 - fraction) * (self.t as f64 - 1.0) + 1.0,
        }
    }

    /// An empty histogram of this geometry (the reference's bin rule and edges).
    pub fn geometry(&self) -> Histogram {
        Histogram::new(self.e, self.lo as f64, self.hi as f64, self.bins).expect("validated geometry")
    }

    /// Token chunks (histogram blocks along T) for `HBLOCKS`: enough blocks to fill the GPU, chunks of at
    /// least [`MIN_CHUNK`] and at most [`MAX_CHUNK`] tokens. Returns (chunks, tokens per chunk).
    pub fn chunks(&self, c: &Cfg, es: u32) -> (usize, usize) {
        let slices = self.e.div_ceil(es as usize);
        let want = (c.hblocks as usize / slices).max(1).min(self.t.div_ceil(MIN_CHUNK));
        let p = want.max(self.t.div_ceil(MAX_CHUNK));
        let ch = self.t.div_ceil(p);
        (self.t.div_ceil(ch), ch)
    }
}

/// Fewest tokens per histogram block (more blocks than that only add flush work).
pub const MIN_CHUNK: usize = 2048;

fn nonneg(name: &str, v: i64) -> Result<usize, OpError> {
    usize::try_from(v).map_err(|_| bad(name, format!("must be >= 0, got {v}")))
}

/// Host checks of the inputs before any launch: `s` has `T E` values, `b` (QB) has `E`; NaN in `s` or `b` is
/// `BadInput` naming it (with the first index); for QB an infinite score too (a margin would be inf - inf).
pub fn check_inputs(pb: &Problem, s: &[f32], b: Option<&[f32]>) -> Result<(), OpError> {
    let op = pb.op();
    let err = |arg: &str, why: String| OpError::BadInput { op, arg: arg.into(), why };
    if s.len() != pb.t * pb.e {
        return Err(err("s", format!("has {} values, [T, E] = [{}, {}] needs {}", s.len(), pb.t, pb.e, pb.t * pb.e)));
    }
    let qb = matches!(pb.kind, Kind::Qb { .. });
    if let Some(i) = s.par_iter().position_first(|v| v.is_nan() || (qb && v.is_infinite())) {
        let what = if s[i].is_nan() { "NaN" } else { "an infinite score" };
        return Err(err("s", format!("{what} at index {i} (token {}, column {})", i / pb.e, i % pb.e)));
    }
    match (qb, b) {
        (true, Some(b)) => {
            if b.len() != pb.e {
                return Err(err("b", format!("has {} values, E = {} needed", b.len(), pb.e)));
            }
            if let Some(i) = b.iter().position(|v| v.is_nan()) {
                return Err(err("b", format!("NaN at expert {i}")));
            }
        }
        (true, None) => return Err(err("b", "the QB step needs a bias".into())),
        (false, Some(_)) => return Err(err("b", "the column quantile takes no bias".into())),
        (false, None) => {}
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------------------
// Histograms on the host.

/// Per-expert histograms as the kernels produce them (`counts [E, B+2]`, slot 0 underflow, slots 1..=B the
/// bins, B+1 overflow), convertible to the reference's [`Histogram`], to JSON (serde) and to the raw
/// little-endian u32 bytes of the device buffer (what ranks all-reduce). Merging is plain addition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExpertHistogram {
    pub experts: usize,
    pub bins: usize,
    pub lo: f32,
    pub hi: f32,
    /// `[experts, bins + 2]`, row-major.
    pub counts: Vec<u64>,
}

impl ExpertHistogram {
    /// From a `counts [E, B+2]` u32 (or u64) output.
    pub fn from_tensor(t: &HostTensor, lo: f32, hi: f32) -> Result<Self, OpError> {
        if t.shape.len() != 2 || t.shape[1] < 3 || !matches!(t.dtype, DType::U32 | DType::U64) {
            return Err(bad("counts", format!("need a u32/u64 [E, B+2] tensor, got {} {:?}", t.dtype, t.shape)));
        }
        let counts = (0..t.len()).map(|i| t.get_i64(i) as u64).collect();
        Ok(ExpertHistogram { experts: t.shape[0], bins: t.shape[1] - 2, lo, hi, counts })
    }
    /// The counts as a u32 `[E, B+2]` tensor (the device layout); errors when a count exceeds u32.
    pub fn to_tensor(&self) -> Result<HostTensor, OpError> {
        Ok(HostTensor::from_bytes(DType::U32, &[self.experts, self.bins + 2], self.to_le_bytes()?))
    }
    /// Raw little-endian u32 counts, `[E, B+2]` row-major (what a device all-reduce sums).
    pub fn to_le_bytes(&self) -> Result<Vec<u8>, OpError> {
        let mut out = Vec::with_capacity(self.counts.len() * 4);
        for &c in &self.counts {
            let c = u32::try_from(c).map_err(|_| bad("counts", format!("count {c} exceeds u32")))?;
            out.extend(c.to_le_bytes());
        }
        Ok(out)
    }
    /// From raw little-endian u32 counts.
    pub fn from_le_bytes(experts: usize, bins: usize, lo: f32, hi: f32, bytes: &[u8]) -> Result<Self, OpError> {
        if bytes.len() != experts * (bins + 2) * 4 {
            return Err(bad("bytes", format!("{} bytes for [{experts}, {}] u32 counts", bytes.len(), bins + 2)));
        }
        let counts = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64).collect();
        Ok(ExpertHistogram { experts, bins, lo, hi, counts })
    }
    /// The reference's histogram (same geometry, same counts).
    pub fn to_reference(&self) -> Result<Histogram, OpError> {
        let mut h = Histogram::new(self.experts, self.lo as f64, self.hi as f64, self.bins)
            .map_err(|e| bad("lo/hi", e.to_string()))?;
        if self.counts.len() != h.counts.len() {
            return Err(bad("counts", format!("{} counts for {} slots", self.counts.len(), h.counts.len())));
        }
        h.counts.copy_from_slice(&self.counts);
        Ok(h)
    }
    /// From the reference's histogram.
    pub fn from_reference(h: &Histogram) -> Self {
        ExpertHistogram { experts: h.experts, bins: h.bins, lo: h.lo as f32, hi: h.hi as f32, counts: h.counts.clone() }
    }
    /// Add a shard's counts (same geometry).
    pub fn merge(&mut self, other: &ExpertHistogram) -> Result<(), OpError> {
        if (self.experts, self.bins, self.lo.to_bits(), self.hi.to_bits())
            != (other.experts, other.bins, other.lo.to_bits(), other.hi.to_bits())
        {
            return Err(bad("other", "histograms of different geometry".into()));
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        Ok(())
    }
}
