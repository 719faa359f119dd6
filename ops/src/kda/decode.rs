//! `kda.decode`: the KDA recurrence token by token against a stored state, for decoding (T = 1) and short
//! continuations (T tokens per sequence, in order).
//!
//! One block per (sequence, value head, block of value columns); each thread owns one value column `j` of the
//! state, `S[:, j]` (K f32 values in registers), so every state access is a coalesced row of the `[K, V]`
//! layout. Per token: `S' = Diag(exp g) S`, `pred_j = S'[:, j] . k`, `S[:, j] = S'[:, j] + beta k (v_j - pred_j)`,
//! `o_j = s S[:, j] . q`, with the optional L2 norms, gate forms and beta sigmoid of the chunked kernels. The
//! in-place variant reads and writes one `state` tensor; the other reads `h0` and writes `ht`.

use super::{GateForm, KdaData, LOWER_BOUND, bad, check_pairs};
use crate::OpError;
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::*;
use rand::Rng;
use rand::rngs::StdRng;

/// What a decode kernel variant computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeSpec {
    pub dk: u32,
    pub dv: u32,
    pub gate: GateForm,
    pub l2norm: bool,
    pub beta_sigmoid: bool,
    /// Update one `state` tensor in place (else read `h0`, write `ht`).
    pub in_place: bool,
}

/// Value columns per block (one per thread).
pub fn decode_threads(dv: u32) -> u32 {
    dv.min(128)
}

/// Build the decode kernel.
pub fn build_decode(spec: &DecodeSpec) -> Result<Kernel, OpError> {
    let (dk, dv) = (spec.dk as i64, spec.dv as i64);
    let threads = decode_threads(spec.dv);
    let name = format!(
        "k3k_kda_decode_k{dk}_v{dv}_{}{}{}{}",
        spec.gate.name(),
        if spec.l2norm { "_l2" } else { "" },
        if spec.beta_sigmoid { "_bsig" } else { "" },
        if spec.in_place { "_inplace" } else { "" }
    );
    let mut b = KernelBuilder::new(&name, threads);
    let n = b.dim("N");
    let t = b.dim("T");
    let h = b.dim("H");
    let hv = b.dim("HV");
    let q = b.tensor("q", DType::Bf16, &[n.clone(), t.clone(), h.clone(), Expr::Int(dk)], Access::Read);
    let k = b.tensor("k", DType::Bf16, &[n.clone(), t.clone(), h.clone(), Expr::Int(dk)], Access::Read);
    let v = b.tensor("v", DType::Bf16, &[n.clone(), t.clone(), hv.clone(), Expr::Int(dv)], Access::Read);
    let g = b.tensor("g", DType::F32, &[n.clone(), t.clone(), hv.clone(), Expr::Int(dk)], Access::Read);
    let beta = b.tensor("beta", DType::Bf16, &[n.clone(), t.clone(), hv.clone()], Access::Read);
    let bias = spec.gate.has_bias().then(|| b.tensor("bias", DType::F32, &[hv.clone(), Expr::Int(dk)], Access::Read));
    let a_log = matches!(spec.gate, GateForm::Standard { .. })
        .then(|| b.tensor("a_log", DType::F32, std::slice::from_ref(&hv), Access::Read));
    let sdims = [n.clone(), hv.clone(), Expr::Int(dk), Expr::Int(dv)];
    // Out of place, token 0 reads h0 and writes ht; later tokens read back ht (hence read-write).
    let (s_in, s_out) = if spec.in_place {
        let s = b.tensor("state", DType::F32, &sdims, Access::ReadWrite);
        (s, s)
    } else {
        (b.tensor("h0", DType::F32, &sdims, Access::Read), b.tensor("ht", DType::F32, &sdims, Access::ReadWrite))
    };
    let o = b.tensor("o", DType::Bf16, &[n.clone(), t.clone(), hv.clone(), Expr::Int(dv)], Access::Write);
    let scale = b.float_arg("scale");
    let lb = matches!(spec.gate, GateForm::Safe { .. }).then(|| b.float_arg("lb"));
    b.grid(n.clone(), hv.clone(), dv / threads as i64);

    let seq = b.let_("seq", Expr::block_idx(0));
    let hvi = b.let_("hv", Expr::block_idx(1));
    let hq = b.let_("hq", &hvi / (hv.clone() / h.clone()));
    let a_coef = a_log.map(|a| b.let_("a_coef", -Expr::load(a, hvi.clone()).exp()));
    // The state column is read twice per token (once for the prediction, once for the update, which writes
    // it back): two light passes instead of K registers per thread.
    b.threads(|b| {
        let col = b.let_("col", Expr::block_idx(2) * threads as i64 + Expr::thread_idx());
        let sbase = b.let_("sbase", (&seq * hv.clone() + hvi.clone()) * (dk * dv) + col.clone());
        b.for_("tok", 0i64, t.clone(), 1i64, |b, tok| {
            let first = b.let_("first", tok.eq(0i64));
            let s_at = |i: Expr| {
                let idx = &sbase + i * dv;
                if spec.in_place {
                    Expr::load(s_in, idx)
                } else {
                    Expr::select(first.clone(), Expr::load(s_in, idx.clone()), Expr::load(s_out, idx))
                }
            };
            let row = b.let_("row", &seq * t.clone() + tok);
            let qk0 = b.let_("qk0", (&row * h.clone() + hq.clone()) * dk);
            let g0 = b.let_("g0", (&row * hv.clone() + hvi.clone()) * dk);
            let (nq, nk) = if spec.l2norm {
                let sq = b.let_var("sq", 0.0);
                let sk = b.let_var("sk", 0.0);
                b.for_("i", 0i64, dk, 1i64, |b, i| {
                    let qv = b.let_("qv", Expr::load(q, &qk0 + i.clone()));
                    let kv = b.let_("kv", Expr::load(k, &qk0 + i));
                    b.assign(sq, Expr::Var(sq) + &qv * qv.clone());
                    b.assign(sk, Expr::Var(sk) + &kv * kv.clone());
                });
                (
                    b.let_("nq", (Expr::Var(sq) + 1e-6).rsqrt() * scale.clone()),
                    Some(b.let_("nk", (Expr::Var(sk) + 1e-6).rsqrt())),
                )
            } else {
                (scale.clone(), None)
            };
            let kat = |i: Expr| match &nk {
                Some(f) => Expr::load(k, &qk0 + i) * f.clone(),
                None => Expr::load(k, &qk0 + i),
            };
            let decay = |i: Expr| {
                let x = Expr::load(g, &g0 + i.clone());
                let bias_i = match bias {
                    Some(bt) => Expr::load(bt, &hvi * dk + i),
                    None => Expr::Float(0.0),
                };
                let gate = match spec.gate {
                    GateForm::Pre => x,
                    GateForm::Safe { .. } => lb.clone().unwrap() * (x + bias_i).sigmoid(),
                    GateForm::Standard { .. } => a_coef.clone().unwrap() * (x + bias_i).softplus(),
                };
                gate.exp()
            };
            let raw_beta = Expr::load(beta, &row * hv.clone() + hvi.clone());
            let bt = b.let_("bt", if spec.beta_sigmoid { raw_beta.sigmoid() } else { raw_beta });
            let pred = b.let_var("pred", 0.0);
            b.for_("i", 0i64, dk, 1i64, |b, i| {
                b.assign(pred, Expr::Var(pred) + s_at(i.clone()) * decay(i.clone()) * kat(i));
            });
            let vo = (&row * hv.clone() + hvi.clone()) * dv + col.clone();
            let delta = b.let_("delta", bt * (Expr::load(v, vo.clone()) - Expr::Var(pred)));
            let out = b.let_var("out", 0.0);
            b.for_("i", 0i64, dk, 1i64, |b, i| {
                let sv = b.let_("sv", s_at(i.clone()) * decay(i.clone()) + kat(i.clone()) * delta.clone());
                b.store_scalar(s_out, &sbase + i.clone() * dv, sv.clone());
                b.assign(out, Expr::Var(out) + sv * Expr::load(q, &qk0 + i));
            });
            b.store_scalar(o, vo, Expr::Var(out) * nq.clone());
        });
    });
    Ok(b.finish()?)
}

// ------------------------------------------------------------------------------------------------------------
// The `kda.decode` operator.

/// A decode problem: N sequences, T tokens each, against states `[N, HV, K, V]`.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeProblem {
    pub n: usize,
    pub t: usize,
    pub h: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
    pub gate: GateForm,
    pub l2norm: bool,
    pub beta_sigmoid: bool,
}

impl DecodeProblem {
    /// Dims `N`, `H`, `K`, optional `T` (1), `HV` (H), `V` (K), `gate`, `bias`, `l2norm`, `bsig`.
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let h = p.get("H")? as usize;
        let dk = p.get("K")? as usize;
        let pb = DecodeProblem {
            n: p.get("N")? as usize,
            t: p.get_or("T", 1) as usize,
            h,
            hv: p.get_or("HV", h as i64) as usize,
            dk,
            dv: p.get_or("V", dk as i64) as usize,
            gate: GateForm::from_code(p.get_or("gate", 0), p.get_or("bias", 0) != 0)?,
            l2norm: p.get_or("l2norm", 0) != 0,
            beta_sigmoid: p.get_or("bsig", 0) != 0,
        };
        for (arg, d) in [("K", pb.dk), ("V", pb.dv)] {
            if !matches!(d, 32 | 64 | 128) {
                return Err(bad(arg, format!("head dim {d}: the kernels support 32, 64 and 128")));
            }
        }
        if pb.h == 0 || pb.hv == 0 || !pb.hv.is_multiple_of(pb.h) || pb.n == 0 {
            return Err(bad(
                "HV",
                format!("HV = {} must be a positive multiple of H = {} (N = {})", pb.hv, pb.h, pb.n),
            ));
        }
        Ok(pb)
    }
    /// The equivalent chunked problem (B = N sequences of T tokens, exact gates, h0 given): its data layout
    /// and reference are the decode problem's.
    pub fn as_chunked(&self) -> super::KdaProblem {
        super::KdaProblem {
            b: self.n,
            t: self.t,
            h: self.h,
            hv: self.hv,
            dk: self.dk,
            dv: self.dv,
            lens: None,
            safe: false,
            gate: self.gate,
            l2norm: self.l2norm,
            beta_sigmoid: self.beta_sigmoid,
            h0: true,
            extreme: false,
        }
    }
    /// The kernel variant.
    pub fn spec(&self, in_place: bool) -> DecodeSpec {
        DecodeSpec {
            dk: self.dk as u32,
            dv: self.dv as u32,
            gate: self.gate,
            l2norm: self.l2norm,
            beta_sigmoid: self.beta_sigmoid,
            in_place,
        }
    }
}

/// The plan of a decode problem (out-of-place variant: `h0` in, `ht` out). Inputs are laid out as the chunked
/// problem's with B = N, reshaped to `[N, T, ...]`.
pub fn decode_plan(pb: &DecodeProblem, d: &KdaData) -> Result<Plan, OpError> {
    let k = build_decode(&pb.spec(false))?;
    let (n, t, h, hv, dk, dv) = (pb.n, pb.t, pb.h, pb.hv, pb.dk, pb.dv);
    let reshape =
        |x: &HostTensor, shape: &[usize]| HostTensor { dtype: x.dtype, shape: shape.to_vec(), data: x.data.clone() };
    let mut plan = Plan::default();
    let mut args = vec![
        plan.input("q", reshape(&d.q, &[n, t, h, dk])),
        plan.input("k", reshape(&d.k, &[n, t, h, dk])),
        plan.input("v", reshape(&d.v, &[n, t, hv, dv])),
        plan.input("g", reshape(&d.g, &[n, t, hv, dk])),
        plan.input("beta", reshape(&d.beta, &[n, t, hv])),
    ];
    if let Some(b) = &d.bias {
        args.push(plan.input("bias", b.clone()));
    }
    if let Some(a) = &d.a_log {
        args.push(plan.input("a_log", a.clone()));
    }
    let h0 = d.h0.as_ref().ok_or_else(|| OpError::Internal("decode data without a state".into()))?;
    args.push(plan.input("h0", h0.clone()));
    args.push(plan.output("ht", DType::F32, &[n, hv, dk, dv]));
    args.push(plan.output("o", DType::Bf16, &[n, t, hv, dv]));
    let mut scalars = vec![("scale", SymValue::Float((1.0 / (dk as f64).sqrt()) as f32))];
    if matches!(pb.gate, GateForm::Safe { .. }) {
        scalars.push(("lb", SymValue::Float(LOWER_BOUND)));
    }
    plan.step(k, &args, &scalars);
    Ok(plan)
}

/// Recurrent KDA decode (`kda.decode`).
pub struct KdaDecode;

struct DecodeInstance {
    pb: DecodeProblem,
    d: KdaData,
    seed: u64,
}

impl Operator for KdaDecode {
    fn name(&self) -> &'static str {
        "kda.decode"
    }
    fn summary(&self) -> &'static str {
        "KDA recurrent decode: T tokens per sequence against a stored f32 state [N, HV, K, V] (in place or h0 -> ht)"
    }
    fn knob_space(&self) -> KnobSpace {
        KnobSpace::default()
    }
    fn default_knobs(&self) -> Knobs {
        Knobs::new()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("N64 H96 K128 decode", &[("N", 64), ("H", 96), ("K", 128)]),
            Preset::new("N256 H32 K128 decode", &[("N", 256), ("H", 32), ("K", 128)]),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        let dk = [32i64, 64, 128][rng.random_range(0..3)];
        let dv = [32i64, 64, 128][rng.random_range(0..3)];
        let h = rng.random_range(1..=2i64);
        let hv = h * [1i64, 2][rng.random_range(0..2)];
        let n = rng.random_range(1..=3i64);
        let t = [1i64, 1, 2, 5][rng.random_range(0..4)];
        let gate = rng.random_range(0..3i64);
        let dims = [
            ("N", n),
            ("T", t),
            ("H", h),
            ("HV", hv),
            ("K", dk),
            ("V", dv),
            ("gate", gate),
            ("bias", rng.random_bool(0.5) as i64),
            ("l2norm", rng.random_bool(0.4) as i64),
            ("bsig", rng.random_bool(0.4) as i64),
        ];
        Preset::new(&format!("kda.decode N{n} T{t} H{h} HV{hv} K{dk} V{dv} gate{gate}"), &dims)
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        let pb = DecodeProblem::from_preset(p)?;
        let d = KdaData::generate(&pb.as_chunked(), seed);
        Ok(Box::new(DecodeInstance { pb, d, seed }))
    }
    fn kernels(&self, p: &Preset, _knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        let pb = DecodeProblem::from_preset(p)?;
        Ok(vec![build_decode(&pb.spec(false))?, build_decode(&pb.spec(true))?])
    }
}

impl Instance for DecodeInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        format!(
            "decode N{} T{} H{} HV{} K{} V{} gate={}{}{} seed={}",
            pb.n,
            pb.t,
            pb.h,
            pb.hv,
            pb.dk,
            pb.dv,
            pb.gate.name(),
            if pb.l2norm { " l2norm" } else { "" },
            if pb.beta_sigmoid { " beta-sigmoid" } else { "" },
            self.seed
        )
    }
    fn plan(&self, _knobs: &Knobs) -> Result<Plan, OpError> {
        decode_plan(&self.pb, &self.d)
    }
    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let cp = self.pb.as_chunked();
        let (pairs, scope) = super::check_scope(&cp, self.seed);
        // The decode outputs [N, T, ...] are the chunked problem's [N*T, ...] rows.
        check_pairs(&cp, &self.d, out, &pairs, scope)
    }
    fn work(&self) -> Work {
        let pb = &self.pb;
        let (n, t, h, hv, dk, dv) = (pb.n as f64, pb.t as f64, pb.h as f64, pb.hv as f64, pb.dk as f64, pb.dv as f64);
        Work {
            flops: n * t * hv * dk * dv * 8.0,
            bytes: 2.0 * n * hv * dk * dv * 4.0 + n * t * (2.0 * h * dk * 2.0 + hv * (2.0 * dv * 2.0 + dk * 4.0 + 2.0)),
        }
    }
    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({
            "N": pb.n, "T": pb.t, "H": pb.h, "HV": pb.hv, "K": pb.dk, "V": pb.dv, "gate": pb.gate.name(),
            "gate_bias": pb.gate.has_bias(), "l2norm": pb.l2norm, "beta_sigmoid": pb.beta_sigmoid,
            "lower_bound": LOWER_BOUND, "scale": (1.0 / (pb.dk as f64).sqrt()) as f32,
        })
    }
}
