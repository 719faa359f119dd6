//! The gated-MLA kernels of [`crate::gated_mla`] as [`Operator`]s: `gated_mla.prefill`, `gated_mla.decode`
//! and `gated_mla.gate` (SEMANTICS.md section 2.4).
//!
//! * `gated_mla.prefill`: one [`build_prefill`] launch; presets `T`, `S` (default `T`), `H`, `causal`, `gate`
//!   (0/1, default 1) or, for varlen, `N` sequences of `q{i}` query and `k{i}` key rows. Knobs: the prefill
//!   kernel's ([`prefill_knob_space`]).
//! * `gated_mla.decode`: the split-KV [`build_decode`] launch plus the [`build_decode_combine`] merge; presets
//!   `B`, `SQ` (default 1), `H` and either `S` (every request holds `S` keys) or `l{i}` per request. Knobs: the
//!   decode kernel's ([`decode_knob_space`]), mapped as [`decode_plan_knobs`] says: the operator defaults
//!   stand for "the defaults for this row count" ([`decode_knobs_for_rows`]`(SQ * H)`), any other set is used
//!   as given; an extra integer knob `NSPLIT` (not in the space, 0 or absent = automatic) fixes the split
//!   count, otherwise [`decode_num_splits`] picks it for an H200 ([`DECODE_NUM_SMS`] multiprocessors, times
//!   [`decode_blocks_per_sm`]). The combine kernel runs at [`combine_default_knobs`]; with one split and one
//!   query per request the plan runs [`build_decode_direct`] instead (no combine) unless the plan knob
//!   `DIRECT=0` is given.
//! * `gated_mla.gate`: the decode-side output projection [`build_gate`] (`y = sigmoid(z) * o_latent W_UV^T`);
//!   presets `T` (tokens), `H`, `gate` (0/1, default 1).
//!
//! Inputs are bf16 draws (never zeros): q, k, v ~ N(0, 1), the latent cache ~ N(0, 0.5^2), gate logits
//! ~ N(0, 2^2) with one element in 50 set to +-1000 (sigmoid saturates to exactly 0 or 1). The paged cache
//! puts every request's pages at random places in a pool with two spare pages; every cache row that holds no
//! key (page tails, spare pages) is NaN and unused block-table entries are far out of range, so a read of
//! anything but a live key shows. The softmax scale is tau = 192^-1/2 (as f32, given to the reference
//! exactly).
//!
//! Checks (SEMANTICS.md section 3): o (and y) rel L2 <= 5e-3, lse rel L2 <= 1e-3 (its scale floored at 1), identical NaN/inf
//! positions, against `k3k_reference::mla`. Small problems are checked whole; benchmark-sized ones on a
//! documented sample whose reference alone is computed: prefill 2 heads x 64 query rows (stratified over the
//! rows, the last row included), decode 8 requests (the first, the last and 6 drawn; all their queries and
//! heads), gate 32 tokens (all heads).

use crate::OpError;
use crate::data;
use crate::dims::{self, DimDecl};
use crate::gated_mla::*;
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::{DType, HostTensor, Kernel, KnobSpace, Knobs, SymValue};
use k3k_reference::metrics::Tolerance;
use k3k_reference::mla as refmla;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use std::sync::Mutex;

/// Query/key head dim of prefill (192 = 128 nope + 64 rope).
const DQK: usize = 192;
/// Value head dim of prefill and of the gate projection (128).
const DV: usize = 128;
/// Latent cache row (576 = 512 latent + 64 rope) and value width (512) of decode.
const D_LAT: usize = 576;
const DV_LAT: usize = 512;
/// Rows per cache page.
const PAGE: usize = 64;
/// lse tolerance (rel L2 against the reference's RMS floored at 1: `Tolerance::LogSumExp`).
const LSE_TOL: f64 = 1e-3;
/// Problems whose full f64 reference costs more multiply-adds than this are checked on a sample.
const FULL_CHECK_MACS: usize = 1 << 28;

/// Multiprocessors assumed when the decode plan picks its split count (an H200 has 132).
pub const DECODE_NUM_SMS: usize = 132;

/// The softmax scale tau = 192^-1/2, as the f32 the kernels receive.
pub fn tau() -> f32 {
    (DQK as f64).powf(-0.5) as f32
}

fn bad(op: &'static str, arg: &str, why: String) -> OpError {
    OpError::BadInput { op, arg: arg.into(), why }
}

fn dim(p: &Preset, name: &str, op: &'static str) -> Result<usize, OpError> {
    let v = p.get(name)?;
    if v < 0 {
        return Err(bad(op, name, format!("must be >= 0, got {v}")));
    }
    Ok(v as usize)
}

fn flag(p: &Preset, name: &str, default: bool) -> bool {
    p.get_or(name, default as i64) != 0
}

fn lcg(s: &mut u64) -> usize {
    *s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*s >> 33) as usize
}

/// bf16-rounded N(0, std^2) values.
fn bf16_normal(n: usize, std: f32, seed: u64) -> Vec<f32> {
    let mut v = data::normal(n, std, seed);
    data::round_bf16(&mut v);
    v
}

/// Gate logits: N(0, 2^2), one element in 50 (at seeded places) set to +-1000.
fn gate_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut z = bf16_normal(n, 2.0, seed);
    let mut s = seed ^ 0x6761_7465;
    for _ in 0..n / 50 {
        let i = lcg(&mut s) % n;
        z[i] = if lcg(&mut s).is_multiple_of(2) { 1000.0 } else { -1000.0 };
    }
    z
}

fn i32s(shape: &[usize], v: &[i64]) -> HostTensor {
    HostTensor::from_i64(DType::I32, shape, v)
}

/// `count` distinct sampled values out of `0..n` (all of them when `n <= count`): stratified, one per stratum,
/// the last value always included.
fn stratified(n: usize, count: usize, seed: u64) -> Vec<usize> {
    if n <= count {
        return (0..n).collect();
    }
    let mut s = seed;
    let mut v: Vec<usize> = (0..count - 1)
        .map(|j| {
            let (lo, hi) = (j * n / (count - 1), (j + 1) * n / (count - 1));
            lo + lcg(&mut s) % (hi - lo).max(1)
        })
        .collect();
    v.push(n - 1);
    v.sort_unstable();
    v.dedup();
    v
}

/// Compare gathered outputs with their reference values under a tolerance.
fn compare(name: &str, got: &[f64], want: &[f64], tol: Tolerance, scope: &str) -> CheckReport {
    crate::check::compare(name, got, want, tol, scope.to_string())
}

// =============================================================================================================
// gated_mla.prefill
// =============================================================================================================

/// The `gated_mla.prefill` operator.
pub struct GatedMlaPrefill;

/// The dims of `gated_mla.prefill` presets (see [`PrefillProblem::from_preset`]).
pub const PREFILL_DIMS: &[DimDecl] = &[
    DimDecl::required("H", 1, dims::MAX_HEADS, "heads"),
    DimDecl::optional("T", 0, dims::MAX_ROWS, "query rows of the one sequence (instead of N)"),
    DimDecl::optional("S", 0, dims::MAX_ROWS, "key rows of the one sequence (default T)"),
    DimDecl::optional("N", 0, dims::MAX_GROUPS, "varlen: the number of sequences"),
    DimDecl::indexed("q", "N", 0, dims::MAX_ROWS, "varlen: query rows of sequence i"),
    DimDecl::indexed("k", "N", 0, dims::MAX_ROWS, "varlen: key rows of sequence i"),
    DimDecl::flag("causal", "1: causal mask, bottom-right aligned (default)"),
    DimDecl::flag("gate", "1: the sigmoid output gate (default)"),
];

/// q, k, v, gate and output elements of a prefill.
fn prefill_footprint(p: &Preset) -> f64 {
    let h = dims::size(p, "H", 0);
    let (tq, tk) = if p.dims.contains_key("N") {
        let n = dims::size(p, "N", 0);
        (dims::family_sum(p, "q", n), dims::family_sum(p, "k", n))
    } else {
        let t = dims::size(p, "T", 0);
        (t, dims::size(p, "S", t as i64))
    };
    h * (tq * (DQK + 2 * DV) as f64 + tk * (DQK + DV) as f64)
}

/// A concrete prefill problem: one sequence (`cu_q = [0, T]`, `cu_k = [0, S]`) or several (varlen).
#[derive(Clone, Debug, PartialEq)]
pub struct PrefillProblem {
    pub causal: bool,
    pub gate: bool,
    pub varlen: bool,
    pub h: usize,
    /// Cumulative query rows per sequence, `[N + 1]`.
    pub cu_q: Vec<usize>,
    /// Cumulative key rows per sequence, `[N + 1]`.
    pub cu_k: Vec<usize>,
}

impl PrefillProblem {
    const OP: &'static str = "gated_mla.prefill";

    /// Resolve a preset (see the module docs).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let h = dim(p, "H", Self::OP)?;
        let (causal, gate) = (flag(p, "causal", true), flag(p, "gate", true));
        let (varlen, cu_q, cu_k) = if p.dims.contains_key("N") {
            let n = dim(p, "N", Self::OP)?;
            let (mut cq, mut ck) = (vec![0usize], vec![0usize]);
            for i in 0..n {
                cq.push(cq[i] + dim(p, &format!("q{i}"), Self::OP)?);
                ck.push(ck[i] + dim(p, &format!("k{i}"), Self::OP)?);
            }
            (true, cq, ck)
        } else {
            let t = dim(p, "T", Self::OP)?;
            let s = p.get_or("S", t as i64).max(0) as usize;
            (false, vec![0, t], vec![0, s])
        };
        let pb = PrefillProblem { causal, gate, varlen, h, cu_q, cu_k };
        if h == 0 || pb.tq() == 0 || pb.max_q() == 0 {
            return Err(bad(Self::OP, "T", format!("needs H >= 1 and at least one query row ({})", p.name)));
        }
        Ok(pb)
    }
    /// Total query rows.
    pub fn tq(&self) -> usize {
        *self.cu_q.last().unwrap()
    }
    /// Total key rows.
    pub fn tk(&self) -> usize {
        *self.cu_k.last().unwrap()
    }
    /// The longest query sequence.
    pub fn max_q(&self) -> usize {
        self.cu_q.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
    }
    /// The kernel variant.
    pub fn spec(&self) -> PrefillSpec {
        PrefillSpec::new(self.causal, self.gate, self.varlen)
    }
    /// (query rows, key rows) per sequence.
    pub fn seqs(&self) -> Vec<(usize, usize)> {
        self.cu_q.windows(2).zip(self.cu_k.windows(2)).map(|(q, k)| (q[1] - q[0], k[1] - k[0])).collect()
    }
    /// (query, key) pairs that take part, per head: `T * S`, or for the causal mask (bottom-right aligned)
    /// `T * (S - T) + T^2 / 2` when `S >= T` and `S^2 / 2` otherwise (the half-square convention of SEMANTICS.md
    /// section 4, exact up to the diagonal).
    pub fn pairs(&self) -> f64 {
        self.seqs()
            .iter()
            .map(|&(t, s)| {
                let (t, s) = (t as f64, s as f64);
                match (self.causal, s >= t) {
                    (false, _) => t * s,
                    (true, true) => t * (s - t) + t * t / 2.0,
                    (true, false) => s * s / 2.0,
                }
            })
            .sum()
    }
}

struct PrefillInstance {
    pb: PrefillProblem,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    z: Option<Vec<f32>>,
    inputs: Vec<(&'static str, HostTensor)>,
    seed: u64,
}

impl Operator for GatedMlaPrefill {
    fn name(&self) -> &'static str {
        "gated_mla.prefill"
    }
    fn summary(&self) -> &'static str {
        "gated MLA prefill (MHA mode, d 192/128): FA3-style (wgmma) or FA2-style (mma.sync) causal/full attention, fused sigmoid output gate, varlen, lse"
    }
    fn knob_space(&self) -> KnobSpace {
        prefill_knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        prefill_default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new(
                "causal T8192 H96 d192/128",
                &[("T", 8192), ("S", 8192), ("H", 96), ("causal", 1), ("gate", 1)],
            ),
            Preset::new("causal T32768 H12", &[("T", 32768), ("S", 32768), ("H", 12), ("causal", 1), ("gate", 1)]),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        const EDGE: [i64; 6] = [1, 15, 17, 63, 65, 130];
        const PREFIX: [i64; 6] = [0, 0, 1, 17, 64, 130];
        let h = rng.random_range(1..=4i64);
        let causal = rng.random_bool(0.7) as i64;
        let gate = rng.random_bool(0.7) as i64;
        let mut dims = vec![("H".to_string(), h), ("causal".into(), causal), ("gate".into(), gate)];
        let desc;
        if rng.random_bool(0.2) {
            // Varlen: 1..=4 sequences, some without queries or keys; at least one query row.
            let n = rng.random_range(1..=4usize);
            let mut seqs = vec![];
            for _ in 0..n {
                let t = if rng.random_bool(0.2) { 0 } else { EDGE[rng.random_range(0..4)] };
                let s = if rng.random_bool(0.1) { 0 } else { t + PREFIX[rng.random_range(0..4)] };
                seqs.push((t, s));
            }
            if seqs.iter().all(|&(t, _)| t == 0) {
                seqs[0] = (17, 17);
            }
            dims.push(("N".into(), n as i64));
            for (i, &(t, s)) in seqs.iter().enumerate() {
                dims.push((format!("q{i}"), t));
                dims.push((format!("k{i}"), s));
            }
            desc = format!("varlen {seqs:?}");
        } else {
            let t = EDGE[rng.random_range(0..EDGE.len())];
            // S >= T (a cached prefix), sometimes S < T (causal: the first rows see no key).
            let s = if rng.random_bool(0.1) {
                rng.random_range(1..=t)
            } else {
                t + PREFIX[rng.random_range(0..PREFIX.len())].min(2 * 130 - t)
            };
            dims.push(("T".into(), t));
            dims.push(("S".into(), s));
            desc = format!("T{t} S{s}");
        }
        Preset {
            name: format!(
                "{}{} {desc} H{h}",
                if causal == 1 { "causal" } else { "full" },
                if gate == 1 { " gated" } else { "" }
            ),
            dims: dims.into_iter().collect(),
        }
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(self.name(), PREFILL_DIMS, p)?;
        dims::bound(self.name(), p, prefill_footprint(p))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = PrefillProblem::from_preset(p)?;
        let (tq, tk, h) = (pb.tq(), pb.tk(), pb.h);
        let q = bf16_normal(tq * h * DQK, 1.0, seed);
        let k = bf16_normal(tk * h * DQK, 1.0, seed ^ 0x6b6b);
        let v = bf16_normal(tk * h * DV, 1.0, seed ^ 0x7676);
        let z = pb.gate.then(|| gate_logits(tq * h * DV, seed ^ 0x7a7a));
        let mut inputs = vec![
            ("q", data::tensor(DType::Bf16, &[tq, h, DQK], &q)),
            ("k", data::tensor(DType::Bf16, &[tk, h, DQK], &k)),
            ("v", data::tensor(DType::Bf16, &[tk, h, DV], &v)),
        ];
        if pb.varlen {
            let n1 = pb.cu_q.len();
            let cq: Vec<i64> = pb.cu_q.iter().map(|&x| x as i64).collect();
            let ck: Vec<i64> = pb.cu_k.iter().map(|&x| x as i64).collect();
            inputs.push(("cu_seqlens_q", i32s(&[n1], &cq)));
            inputs.push(("cu_seqlens_k", i32s(&[n1], &ck)));
        }
        if let Some(z) = &z {
            inputs.push(("z", data::tensor(DType::Bf16, &[tq, h, DV], z)));
        }
        Ok(Box::new(PrefillInstance { pb, q, k, v, z, inputs, seed }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = PrefillProblem::from_preset(p)?;
        Ok(vec![build_prefill(&pb.spec(), knobs)?])
    }
    fn bucket_dims(&self, p: &Preset) -> Vec<(String, u64)> {
        let Ok(pb) = PrefillProblem::from_preset(p) else { return vec![] };
        vec![
            ("T".into(), pb.tq() as u64),
            ("S".into(), pb.tk() as u64),
            ("H".into(), pb.h as u64),
            ("causal".into(), pb.causal as u64),
            ("gate".into(), pb.gate as u64),
            ("varlen".into(), pb.varlen as u64),
        ]
    }
}

impl Instance for PrefillInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        let shape =
            if pb.varlen { format!("varlen (T, S) {:?}", pb.seqs()) } else { format!("T={} S={}", pb.tq(), pb.tk()) };
        format!(
            "{}{} {shape} H={} d{DQK}/{DV} seed={}",
            if pb.causal { "causal" } else { "full" },
            if pb.gate { " gated" } else { "" },
            pb.h,
            self.seed
        )
    }

    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        let pb = &self.pb;
        let kernel = build_prefill(&pb.spec(), knobs)?;
        let mut plan = Plan::default();
        let mut args: Vec<usize> = self.inputs.iter().map(|(n, t)| plan.input(n, t.clone())).collect();
        args.push(plan.output("o", DType::Bf16, &[pb.tq(), pb.h, DV]));
        args.push(plan.output("lse", DType::F32, &[pb.h, pb.tq()]));
        let mut scalars = vec![("scale", SymValue::Float(tau()))];
        if pb.varlen {
            scalars.push(("MAX_SEQLEN_Q", SymValue::Int(pb.max_q() as i64)));
        }
        plan.step(kernel, &args, &scalars);
        Ok(plan)
    }

    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let pb = &self.pb;
        let (o, lse) = (out.get("o")?, out.get("lse")?);
        let (tq, h) = (pb.tq(), pb.h);
        let macs: usize = pb.seqs().iter().map(|&(t, s)| t * s).sum::<usize>() * h * (DQK + DV);
        if macs <= FULL_CHECK_MACS {
            let z = self.z.as_deref();
            let (want_o, want_lse) = if pb.varlen {
                refmla::mla_prefill_varlen(
                    &self.q,
                    &self.k,
                    &self.v,
                    z,
                    &pb.cu_q,
                    &pb.cu_k,
                    h,
                    DQK,
                    DV,
                    tau() as f64,
                    pb.causal,
                )
            } else {
                refmla::mla_prefill(&self.q, &self.k, &self.v, z, tq, pb.tk(), h, DQK, DV, tau() as f64, pb.causal)
            }
            .map_err(|e| OpError::Internal(e.to_string()))?;
            let scope = format!("all {tq} rows x {h} heads");
            let mut r = compare("o", &o.to_f64_vec(), &want_o, Tolerance::Bf16, &scope);
            if !r.passed {
                r.detail.push_str(&crate::check::error_pattern(&o.to_f64_vec(), &want_o, tq * h, DV));
            }
            return Ok(r.merge(compare("lse", &lse.to_f64_vec(), &want_lse, Tolerance::LogSumExp(LSE_TOL), &scope)));
        }
        // Sampled: 2 heads (the last and a drawn one) x 64 query rows (stratified, the last row included);
        // each sampled (head, row) is a one-query reference over exactly the keys it may see.
        let mut s = self.seed ^ 0x5a5a;
        let mut heads = vec![h - 1, lcg(&mut s) % h];
        heads.sort_unstable();
        heads.dedup();
        let rows = stratified(tq, 64, self.seed);
        let pairs: Vec<(usize, usize)> = heads.iter().flat_map(|&hh| rows.iter().map(move |&r| (hh, r))).collect();
        type One = (Vec<f64>, f64);
        let per: Vec<Result<One, OpError>> = pairs
            .par_iter()
            .map(|&(hh, row)| {
                let n = pb.cu_q.partition_point(|&c| c <= row) - 1;
                let (q0, k0) = (pb.cu_q[n], pb.cu_k[n]);
                let (t_n, s_n) = (pb.cu_q[n + 1] - q0, pb.cu_k[n + 1] - k0);
                let nk = refmla::visible_keys(row - q0, t_n, s_n, pb.causal);
                let qi = &self.q[(row * h + hh) * DQK..(row * h + hh + 1) * DQK];
                let gather = |src: &[f32], d: usize| -> Vec<f32> {
                    (k0..k0 + nk).flat_map(|j| src[(j * h + hh) * d..(j * h + hh + 1) * d].iter().copied()).collect()
                };
                let (ks, vs) = (gather(&self.k, DQK), gather(&self.v, DV));
                let zs = self.z.as_ref().map(|z| &z[(row * h + hh) * DV..(row * h + hh + 1) * DV]);
                let (wo, wl) = refmla::mla_prefill(qi, &ks, &vs, zs, 1, nk, 1, DQK, DV, tau() as f64, false)
                    .map_err(|e| OpError::Internal(e.to_string()))?;
                Ok((wo, wl[0]))
            })
            .collect();
        let (mut want_o, mut want_l, mut got_o, mut got_l) = (vec![], vec![], vec![], vec![]);
        for (&(hh, row), r) in pairs.iter().zip(per) {
            let (wo, wl) = r?;
            want_o.extend(wo);
            want_l.push(wl);
            got_o.extend((0..DV).map(|c| o.get_f32((row * h + hh) * DV + c) as f64));
            got_l.push(lse.get_f32(hh * tq + row) as f64);
        }
        let scope = format!("{} sampled query rows x heads {heads:?} of {tq} rows x {h} heads", rows.len());
        let mut r = compare("o", &got_o, &want_o, Tolerance::Bf16, &scope);
        if !r.passed {
            r.detail.push_str(&crate::check::error_pattern(&got_o, &want_o, pairs.len(), DV));
        }
        Ok(r.merge(compare("lse", &got_l, &want_l, Tolerance::LogSumExp(LSE_TOL), &scope)))
    }

    fn work(&self) -> Work {
        let pb = &self.pb;
        let (tq, tk, h) = (pb.tq() as f64, pb.tk() as f64, pb.h as f64);
        let gate = if pb.gate { 1.0 } else { 0.0 };
        Work {
            flops: 2.0 * h * pb.pairs() * (DQK + DV) as f64,
            bytes: 2.0 * h * (tq * DQK as f64 + tk * (DQK + DV) as f64 + (1.0 + gate) * tq * DV as f64) + 4.0 * h * tq,
        }
    }

    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({
            "T": pb.tq(), "S": pb.tk(), "H": pb.h, "dqk": DQK, "dv": DV, "causal": pb.causal, "gate": pb.gate,
            "varlen": pb.varlen, "cu_seqlens_q": pb.cu_q, "cu_seqlens_k": pb.cu_k, "scale": tau(),
        })
    }
}

// =============================================================================================================
// gated_mla.decode
// =============================================================================================================

/// The `gated_mla.decode` operator.
pub struct GatedMlaDecode;

/// The dims of `gated_mla.decode` presets (see [`DecodeProblem::from_preset`]).
pub const DECODE_DIMS: &[DimDecl] = &[
    DimDecl::required("B", 1, dims::MAX_GROUPS, "requests"),
    DimDecl::optional("SQ", 1, 1024, "queries per request (default 1; MTP)"),
    DimDecl::required("H", 1, dims::MAX_HEADS, "heads"),
    DimDecl::optional("S", 0, dims::MAX_ROWS, "keys of every request (instead of l0..)"),
    DimDecl::indexed("l", "B", 0, dims::MAX_ROWS, "keys of request i"),
];

/// Queries, cache and output elements of a decode.
fn decode_footprint(p: &Preset) -> f64 {
    let b = dims::size(p, "B", 0);
    let keys = if p.dims.contains_key("S") { b * dims::size(p, "S", 0) } else { dims::family_sum(p, "l", b) };
    let rows = b * dims::size(p, "SQ", 1) * dims::size(p, "H", 0);
    (keys + 2.0 * PAGE as f64 * b) * D_LAT as f64 + rows * (D_LAT + DV_LAT) as f64
}

/// A concrete decode problem.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeProblem {
    pub b: usize,
    pub sq: usize,
    pub h: usize,
    /// Keys per request (`cache_seqlens`).
    pub lens: Vec<usize>,
}

impl DecodeProblem {
    const OP: &'static str = "gated_mla.decode";

    /// Resolve a preset (see the module docs).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let b = dim(p, "B", Self::OP)?;
        let sq = p.get_or("SQ", 1).max(0) as usize;
        let h = dim(p, "H", Self::OP)?;
        let lens = if p.dims.contains_key("S") {
            vec![dim(p, "S", Self::OP)?; b]
        } else {
            (0..b).map(|i| dim(p, &format!("l{i}"), Self::OP)).collect::<Result<_, _>>()?
        };
        if b == 0 || sq == 0 || h == 0 {
            return Err(bad(Self::OP, "B", format!("needs B, SQ, H >= 1 ({})", p.name)));
        }
        Ok(DecodeProblem { b, sq, h, lens })
    }
    /// Packed (query, head) rows per request.
    pub fn rows(&self) -> usize {
        self.sq * self.h
    }
    /// The longest request.
    pub fn max_len(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(0)
    }
    /// Keys each query row sees, summed over the requests and queries (bottom-right causal for s_q > 1).
    pub fn visible(&self) -> usize {
        self.lens.iter().map(|&l| (0..self.sq).map(|i| refmla::visible_keys(i, self.sq, l, true)).sum::<usize>()).sum()
    }
}

/// The decode-kernel knobs and split count a plan uses for `knobs`: `knobs` without its optional `NSPLIT`
/// entry, replaced by [`decode_knobs_for_rows`]`(SQ * H)` when that equals the operator defaults
/// ([`decode_default_knobs`]); the split count is `NSPLIT` when given and positive, else [`decode_num_splits`]
/// for [`DECODE_NUM_SMS`] multiprocessors.
pub fn decode_plan_knobs(pb: &DecodeProblem, knobs: &Knobs) -> Result<(Knobs, usize), OpError> {
    decode_plan(pb, knobs).map(|(k, n, _)| (k, n))
}

/// [`decode_plan_knobs`] plus whether the plan runs [`build_decode_direct`] (one query per request and one
/// split: the decode kernel writes o and lse itself and no combine runs), which the optional plan knob
/// `DIRECT` controls (default 1; `DIRECT=0` keeps the split-KV kernel + combine; not passed to the kernel). Timed on
/// the H200 (2026-12-01, b128 S4096, same run): H12 0.1682 ms direct vs 0.1892 with the combine, H96 0.6505
/// vs 0.6631.
pub fn decode_plan(pb: &DecodeProblem, knobs: &Knobs) -> Result<(Knobs, usize, bool), OpError> {
    let mut k = knobs.clone();
    let plan_int = |k: &mut Knobs, name: &str| -> Result<Option<i64>, OpError> {
        match k.0.remove(name) {
            None => Ok(None),
            Some(v) => Ok(Some(Knobs::new().with(name, v).int(name)?)),
        }
    };
    let forced = plan_int(&mut k, "NSPLIT")?.unwrap_or(0).max(0) as usize;
    let allow_direct = plan_int(&mut k, "DIRECT")?.unwrap_or(1) != 0;
    if k == decode_default_knobs() {
        k = decode_knobs_for_rows(pb.rows());
    }
    let nsplit = if forced > 0 {
        forced
    } else {
        let t = DecodeKnobs::from_knobs(&k)?;
        let (bm, bn) = (t.bm as usize, t.bn as usize);
        // Invalid knobs are reported by the kernel build; the split count does not matter for them.
        let spec = DecodeSpec::default();
        let per_sm = decode_blocks_per_sm(&spec, &k).unwrap_or(1);
        let per_req = decode_blocks_per_request(&spec, &k, pb.rows()).unwrap_or(pb.rows().div_ceil(bm.max(1)));
        decode_num_splits(pb.b, per_req, pb.max_len(), DECODE_NUM_SMS, per_sm, bn)
    };
    Ok((k, nsplit, allow_direct && nsplit == 1 && pb.sq == 1))
}

struct DecodeInstance {
    pb: DecodeProblem,
    q: Vec<f32>,
    cache: Vec<f32>,
    /// Block table as the kernel sees it (unused entries far out of range).
    table: Vec<i32>,
    max_blocks: usize,
    inputs: Vec<(&'static str, HostTensor)>,
    seed: u64,
    /// What the last plan ran (decode knobs, split count), for the check's scope.
    last_plan: Mutex<String>,
}

impl Operator for GatedMlaDecode {
    fn name(&self) -> &'static str {
        "gated_mla.decode"
    }
    fn summary(&self) -> &'static str {
        "absorbed MLA decode (MQA over the paged 576/512 latent cache): split-KV tile program + LSE combine, MTP causal"
    }
    fn knob_space(&self) -> KnobSpace {
        decode_knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        decode_default_knobs()
    }
    fn plan_knobs(&self) -> KnobSpace {
        KnobSpace::default().axis("NSPLIT", "the split count (0: automatic, see decode_plan_knobs)", 0..=256i64).axis(
            "DIRECT",
            "0: keep the split-KV kernel and the combine for one split and one query",
            [0i64, 1],
        )
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("b128 S4096 H12", &[("B", 128), ("SQ", 1), ("H", 12), ("S", 4096)]),
            Preset::new("b128 S4096 H96", &[("B", 128), ("SQ", 1), ("H", 96), ("S", 4096)]),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        const LENS: [i64; 7] = [0, 1, 63, 64, 65, 200, 130];
        const HEADS: [i64; 4] = [1, 3, 12, 16];
        let b = rng.random_range(1..=4i64);
        let sq = [1i64, 2, 4][rng.random_range(0..3)];
        let h = HEADS[rng.random_range(0..HEADS.len())];
        let mut dims = vec![("B".to_string(), b), ("SQ".into(), sq), ("H".into(), h)];
        let mut lens = vec![];
        for i in 0..b {
            let l =
                if rng.random_bool(0.2) { rng.random_range(1..=260) } else { LENS[rng.random_range(0..LENS.len())] };
            dims.push((format!("l{i}"), l));
            lens.push(l);
        }
        Preset { name: format!("B{b} SQ{sq} H{h} lens {lens:?}"), dims: dims.into_iter().collect() }
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(self.name(), DECODE_DIMS, p)?;
        dims::bound(self.name(), p, decode_footprint(p))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = DecodeProblem::from_preset(p)?;
        let (b, sq, h) = (pb.b, pb.sq, pb.h);
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7461_626c);
        let (mut table, max_blocks, num_blocks) = k3k_reference::random::block_table(&mut rng, &pb.lens, PAGE, 2);
        // Every cache row that holds no key is NaN.
        let mut cache = bf16_normal(num_blocks * PAGE * D_LAT, 0.5, seed ^ 0x6b76);
        let mut live = vec![false; num_blocks * PAGE];
        for (r, &len) in pb.lens.iter().enumerate() {
            for j in 0..len {
                live[table[r * max_blocks + j / PAGE] as usize * PAGE + j % PAGE] = true;
            }
        }
        cache.par_chunks_mut(D_LAT).zip(live.par_iter()).filter(|(_, l)| !**l).for_each(|(row, _)| row.fill(f32::NAN));
        for e in table.iter_mut().filter(|e| **e < 0) {
            *e = 2_147_480_000;
        }
        let q = bf16_normal(b * sq * h * D_LAT, 1.0, seed);
        let t64: Vec<i64> = table.iter().map(|&x| x as i64).collect();
        let l64: Vec<i64> = pb.lens.iter().map(|&x| x as i64).collect();
        let inputs = vec![
            ("q", data::tensor(DType::Bf16, &[b, sq, h, D_LAT], &q)),
            ("kv", data::tensor(DType::Bf16, &[num_blocks, PAGE, D_LAT], &cache)),
            ("block_table", i32s(&[b, max_blocks], &t64)),
            ("cache_seqlens", i32s(&[b], &l64)),
        ];
        Ok(Box::new(DecodeInstance { pb, q, cache, table, max_blocks, inputs, seed, last_plan: Mutex::default() }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = DecodeProblem::from_preset(p)?;
        let (k, _, direct) = decode_plan(&pb, knobs)?;
        let spec = DecodeSpec::default();
        if direct {
            return Ok(vec![build_decode_direct(&spec, &k)?]);
        }
        Ok(vec![build_decode(&spec, &k)?, build_decode_combine(&spec, &combine_default_knobs())?])
    }
    fn bucket_dims(&self, p: &Preset) -> Vec<(String, u64)> {
        let Ok(pb) = DecodeProblem::from_preset(p) else { return vec![] };
        vec![("B".into(), pb.b as u64), ("rows".into(), pb.rows() as u64), ("S".into(), pb.max_len() as u64)]
    }
}

impl Instance for DecodeInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        let lens = if pb.b <= 8 {
            format!("lens {:?}", pb.lens)
        } else {
            format!("{} requests, {}..={} keys", pb.b, pb.lens.iter().min().unwrap(), pb.max_len())
        };
        format!("B={} s_q={} H={} {lens} d{D_LAT}/{DV_LAT} page {PAGE} seed={}", pb.b, pb.sq, pb.h, self.seed)
    }

    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        let pb = &self.pb;
        let (k, nsplit, direct) = decode_plan(pb, knobs)?;
        let spec = DecodeSpec::default();
        let (b, sq, h) = (pb.b, pb.sq, pb.h);
        let mut plan = Plan::default();
        let ins: Vec<usize> = self.inputs.iter().map(|(n, t)| plan.input(n, t.clone())).collect();
        if direct {
            let main = build_decode_direct(&spec, &k)?;
            *self.last_plan.lock().unwrap() = format!("ran decode {k} with NSPLIT=1, direct (no combine)");
            let o = plan.output("o", DType::Bf16, &[b, sq, h, DV_LAT]);
            let l = plan.output("lse", DType::F32, &[b, h, sq]);
            plan.step(main, &[ins[0], ins[1], ins[2], ins[3], o, l], &[("scale", SymValue::Float(tau()))]);
            return Ok(plan);
        }
        let main = build_decode(&spec, &k)?;
        let combine = build_decode_combine(&spec, &combine_default_knobs())?;
        *self.last_plan.lock().unwrap() = format!("ran decode {k} with NSPLIT={nsplit}");
        let op = plan.scratch("o_part", DType::F32, &[b, nsplit, sq, h, DV_LAT]);
        let lp = plan.scratch("lse_part", DType::F32, &[b, nsplit, sq, h]);
        let o = plan.output("o", DType::Bf16, &[b, sq, h, DV_LAT]);
        let l = plan.output("lse", DType::F32, &[b, h, sq]);
        plan.step(main, &[ins[0], ins[1], ins[2], ins[3], op, lp], &[("scale", SymValue::Float(tau()))]);
        plan.step(combine, &[op, lp, o, l], &[]);
        Ok(plan)
    }

    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let pb = &self.pb;
        let (o, lse) = (out.get("o")?, out.get("lse")?);
        let (sq, h, mb) = (pb.sq, pb.h, self.max_blocks);
        let macs = pb.visible() * h * (D_LAT + DV_LAT);
        // All requests for small problems; else the first, the last and 6 drawn ones (every query and head).
        let reqs: Vec<usize> = if macs <= FULL_CHECK_MACS || pb.b <= 8 {
            (0..pb.b).collect()
        } else {
            let mut s = self.seed ^ 0x7265;
            let mut v = vec![0, pb.b - 1];
            while v.len() < 8 {
                let r = lcg(&mut s) % pb.b;
                if !v.contains(&r) {
                    v.push(r);
                }
            }
            v.sort_unstable();
            v
        };
        type OutLse = (Vec<f64>, Vec<f64>);
        let per: Vec<Result<OutLse, OpError>> = reqs
            .par_iter()
            .map(|&r| {
                let qr = &self.q[r * sq * h * D_LAT..(r + 1) * sq * h * D_LAT];
                let table = &self.table[r * mb..(r + 1) * mb];
                refmla::mla_decode_paged(
                    qr,
                    &self.cache,
                    table,
                    &[pb.lens[r] as i32],
                    1,
                    sq,
                    h,
                    D_LAT,
                    DV_LAT,
                    PAGE,
                    tau() as f64,
                )
                .map_err(|e| OpError::Internal(e.to_string()))
            })
            .collect();
        let (mut want_o, mut want_l, mut got_o, mut got_l) = (vec![], vec![], vec![], vec![]);
        for (&r, res) in reqs.iter().zip(per) {
            let (wo, wl) = res?;
            want_o.extend(wo);
            want_l.extend(wl);
            let (no, nl) = (sq * h * DV_LAT, h * sq);
            got_o.extend((r * no..(r + 1) * no).map(|i| o.get_f32(i) as f64));
            got_l.extend((r * nl..(r + 1) * nl).map(|i| lse.get_f32(i) as f64));
        }
        let what = if reqs.len() == pb.b {
            format!("all {} requests", pb.b)
        } else {
            format!("{} sampled requests {reqs:?} of {}", reqs.len(), pb.b)
        };
        let scope = format!("{what} (every query and head); {}", self.last_plan.lock().unwrap());
        let mut r = compare("o", &got_o, &want_o, Tolerance::Bf16, &scope);
        if !r.passed {
            r.detail.push_str(&crate::check::error_pattern(&got_o, &want_o, reqs.len() * sq * h, DV_LAT));
        }
        Ok(r.merge(compare("lse", &got_l, &want_l, Tolerance::LogSumExp(LSE_TOL), &scope)))
    }

    fn work(&self) -> Work {
        let pb = &self.pb;
        let (b, rows) = (pb.b as f64, pb.rows() as f64);
        let keys: f64 = pb.lens.iter().map(|&l| l as f64).sum();
        Work {
            flops: 2.0 * pb.h as f64 * pb.visible() as f64 * (D_LAT + DV_LAT) as f64,
            bytes: 2.0 * keys * D_LAT as f64 + b * rows * (2.0 * (D_LAT + DV_LAT) as f64 + 4.0),
        }
    }

    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({
            "B": pb.b, "SQ": pb.sq, "H": pb.h, "cache_seqlens": pb.lens, "d": D_LAT, "dv": DV_LAT, "page": PAGE,
            "scale": tau(),
        })
    }
}

// =============================================================================================================
// gated_mla.gate
// =============================================================================================================

/// The `gated_mla.gate` operator: the decode-side W_UV projection with the fused sigmoid gate.
pub struct GatedMlaGate;

/// The dims of `gated_mla.gate` presets (see [`GateProblem::from_preset`]).
pub const GATE_DIMS: &[DimDecl] = &[
    DimDecl::required("T", 1, dims::MAX_ROWS, "tokens"),
    DimDecl::required("H", 1, dims::MAX_HEADS, "heads"),
    DimDecl::flag("gate", "1: the sigmoid output gate (default)"),
];

/// o_latent, gate, output and weight elements of a gate projection.
fn gate_footprint(p: &Preset) -> f64 {
    (dims::size(p, "T", 0) * (DV_LAT + 2 * DV) as f64 + (DV * DV_LAT) as f64) * dims::size(p, "H", 0)
}

/// A concrete gate-projection problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GateProblem {
    pub t: usize,
    pub h: usize,
    pub gate: bool,
}

impl GateProblem {
    const OP: &'static str = "gated_mla.gate";

    /// Resolve a preset (see the module docs).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let pb = GateProblem { t: dim(p, "T", Self::OP)?, h: dim(p, "H", Self::OP)?, gate: flag(p, "gate", true) };
        if pb.t == 0 || pb.h == 0 {
            return Err(bad(Self::OP, "T", format!("needs T, H >= 1 ({})", p.name)));
        }
        Ok(pb)
    }
}

struct GateInstance {
    pb: GateProblem,
    ol: Vec<f32>,
    w: Vec<f32>,
    z: Option<Vec<f32>>,
    inputs: Vec<(&'static str, HostTensor)>,
    seed: u64,
}

impl Operator for GatedMlaGate {
    fn name(&self) -> &'static str {
        "gated_mla.gate"
    }
    fn summary(&self) -> &'static str {
        "gated MLA decode epilogue: per-head W_UV projection 512 -> 128 with the sigmoid output gate fused"
    }
    fn knob_space(&self) -> KnobSpace {
        gate_knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        gate_default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("b128 H12", &[("T", 128), ("H", 12), ("gate", 1)]),
            Preset::new("b128 H96", &[("T", 128), ("H", 96), ("gate", 1)]),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        const EDGE: [i64; 6] = [1, 15, 17, 63, 65, 130];
        const HEADS: [i64; 4] = [1, 3, 12, 16];
        let t = EDGE[rng.random_range(0..EDGE.len())];
        let h = HEADS[rng.random_range(0..HEADS.len())];
        let gate = rng.random_bool(0.8) as i64;
        Preset::new(&format!("T{t} H{h} gate{gate}"), &[("T", t), ("H", h), ("gate", gate)])
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(self.name(), GATE_DIMS, p)?;
        dims::bound(self.name(), p, gate_footprint(p))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = GateProblem::from_preset(p)?;
        let (t, h) = (pb.t, pb.h);
        let ol = bf16_normal(t * h * DV_LAT, 1.0, seed);
        let w = bf16_normal(h * DV * DV_LAT, (DV_LAT as f32).powf(-0.5), seed ^ 0x7775);
        let z = pb.gate.then(|| gate_logits(t * h * DV, seed ^ 0x7a7a));
        let mut inputs = vec![
            ("o_latent", data::tensor(DType::Bf16, &[t, h, DV_LAT], &ol)),
            ("w_uv", data::tensor(DType::Bf16, &[h, DV, DV_LAT], &w)),
        ];
        if let Some(z) = &z {
            inputs.push(("z", data::tensor(DType::Bf16, &[t, h, DV], z)));
        }
        Ok(Box::new(GateInstance { pb, ol, w, z, inputs, seed }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = GateProblem::from_preset(p)?;
        Ok(vec![build_gate(&GateSpec::new(pb.gate), knobs)?])
    }
}

impl Instance for GateInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        format!("T={} H={} {DV_LAT}->{DV} gate={} seed={}", pb.t, pb.h, pb.gate, self.seed)
    }

    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        let pb = &self.pb;
        let kernel = build_gate(&GateSpec::new(pb.gate), knobs)?;
        let mut plan = Plan::default();
        let mut args: Vec<usize> = self.inputs.iter().map(|(n, t)| plan.input(n, t.clone())).collect();
        args.push(plan.output("y", DType::Bf16, &[pb.t, pb.h, DV]));
        plan.step(kernel, &args, &[]);
        Ok(plan)
    }

    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let pb = &self.pb;
        let y = out.get("y")?;
        let (t, h) = (pb.t, pb.h);
        let tokens =
            if t * h * DV * DV_LAT <= FULL_CHECK_MACS { (0..t).collect() } else { stratified(t, 32, self.seed) };
        let per: Vec<Result<Vec<f64>, OpError>> = tokens
            .par_iter()
            .map(|&ti| {
                let ol = &self.ol[ti * h * DV_LAT..(ti + 1) * h * DV_LAT];
                let z = self.z.as_ref().map(|z| &z[ti * h * DV..(ti + 1) * h * DV]);
                refmla::gate_wuv(ol, &self.w, z, 1, h, DV_LAT, DV).map_err(|e| OpError::Internal(e.to_string()))
            })
            .collect();
        let (mut want, mut got) = (vec![], vec![]);
        for (&ti, r) in tokens.iter().zip(per) {
            want.extend(r?);
            got.extend((ti * h * DV..(ti + 1) * h * DV).map(|i| y.get_f32(i) as f64));
        }
        let scope = if tokens.len() == t {
            format!("all {t} tokens x {h} heads")
        } else {
            format!("{} sampled tokens of {t} (all {h} heads)", tokens.len())
        };
        let mut r = compare("y", &got, &want, Tolerance::Bf16, &scope);
        if !r.passed {
            r.detail.push_str(&crate::check::error_pattern(&got, &want, tokens.len() * h, DV));
        }
        Ok(r)
    }

    fn work(&self) -> Work {
        let pb = &self.pb;
        let (t, h) = (pb.t as f64, pb.h as f64);
        let (dl, dv) = (DV_LAT as f64, DV as f64);
        let gate = if pb.gate { 1.0 } else { 0.0 };
        Work { flops: 2.0 * t * h * dv * dl, bytes: 2.0 * (t * h * dl + h * dv * dl + (1.0 + gate) * t * h * dv) }
    }

    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({ "T": pb.t, "H": pb.h, "dl": DV_LAT, "dv": DV, "gate": pb.gate })
    }
}
