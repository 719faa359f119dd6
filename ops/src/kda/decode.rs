//! `kda.decode`: the KDA recurrence token by token against a stored state, for decoding (T = 1) and short
//! continuations (T tokens per sequence, in order).
//!
//! One block per (sequence, value head, block of value columns); each lane holds its share of the block's state
//! columns in registers (see [`DecodeLayout`]): all of its state loads are issued before the first is used, the
//! state is read once and written once per token, and the sums over K are lane partials plus warp shuffles. Per token: `S' = Diag(exp g) S`, `pred_j = S'[:, j] . k`, `S[:, j] = S'[:, j] + beta k (v_j - pred_j)`,
//! `o_j = s S[:, j] . q`, with the optional L2 norms, gate forms and beta sigmoid of the chunked kernels. The
//! in-place variant reads and writes one `state` tensor; the other reads `h0` and writes `ht`.

use super::{GateForm, KdaData, LOWER_BOUND, bad, check_pairs};
use crate::OpError;
use crate::dims::{self, DimDecl};
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::*;
use rand::Rng;
use rand::rngs::StdRng;

/// What a decode kernel variant computes, and how it lays the state over its threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeSpec {
    pub dk: u32,
    pub dv: u32,
    pub gate: GateForm,
    /// The raw gate input is bf16 (see [`KdaProblem::g_bf16`](super::KdaProblem::g_bf16)).
    pub g_bf16: bool,
    pub l2norm: bool,
    pub beta_sigmoid: bool,
    /// Update one `state` tensor in place (else read `h0`, write `ht`).
    pub in_place: bool,
    /// The thread layout (knobs `KL`, `VPL`, `DW`).
    pub layout: DecodeLayout,
}

/// How one block's threads hold its slice of a head's `[K, V]` state: each warp owns `32 / kl * vpl` value
/// columns, its lanes split into `kl` lanes along K times `32 / kl` lanes along V (lane = `rl * (32 / kl) + cl`);
/// lane (rl, cl) holds rows `rl, rl + kl, ...` (`K / kl` of them) of columns `cl, cl + 32 / kl, ...` (`vpl` of
/// them) in registers, so every load and store instruction of the state covers `kl` rows of `32 / kl`
/// consecutive columns. The sums over K (`S^T k`, `S^T q`, the L2 norms) are each lane's partial sums over its
/// rows, then `log2 kl` xor shuffles. A block is `warps` warps side by side along V.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeLayout {
    /// Lanes along K per warp (1, 2, 4 or 8).
    pub kl: u32,
    /// Value columns per lane (1, 2 or 4).
    pub vpl: u32,
    /// Warps per block (1, 2, 4 or 8).
    pub warps: u32,
    /// Knob `SW=1`: a lane's `vpl` columns are consecutive (lane (rl, cl) holds columns `vpl cl .. vpl cl + vpl`
    /// of each of its rows) and each row's state values move as one wide access (`vpl` 2: 8 bytes, 4: 16 bytes,
    /// `ld/st.global.v2/v4`) instead of `vpl` 4-byte ones; the v loads and o stores follow the same columns.
    pub wide: bool,
}

/// Registers one lane may spend on its state values and rows: `K / KL` rows of `VPL` state values plus that
/// row's k and q (held from the prediction to the update) and, with a gate bias, about three more (ptxas hoists
/// the g and bias loads too, and keeps the gate's temporaries): `K / KL * (VPL + 2 + 3 bias)`. ptxas sm_90a
/// spills beyond it (K = 128: KL = 1, VPL = 1, 384: 255 registers and 300 bytes of spills; KL = 2, VPL = 1 with
/// the standard gate and bias, 384: 144 bytes; KL = 4, VPL = 4 with the safe gate, bias and L2 norms, 288: 108
/// bytes; KL = 2, VPL = 2 without bias, 256: 116 bytes out of place. Below it, K = 128: KL = 4, VPL = 2 with the
/// safe gate, bias and L2 norms, 224: 251 registers; KL = 4, VPL = 4 without bias, 192: 254; K = 32, KL = 1,
/// VPL = 2, standard gate with bias, 224: 238; no spills).
pub const MAX_LANE_VALUES: u32 = 240;

/// The automatic warps per block (knob `DW=0`): side by side along V, as many as V has warp widths, at most 2.
fn auto_warps(dv: u32, warp_cols: u32) -> u32 {
    (dv / warp_cols).clamp(1, 2)
}

/// The registers one lane of layout `(kl, vpl)` spends on values at head dim `dk` (see [`MAX_LANE_VALUES`]).
pub fn lane_values(dk: u32, kl: u32, vpl: u32, gate_bias: bool) -> u32 {
    dk / kl * (vpl + 2 + 3 * gate_bias as u32)
}

impl DecodeLayout {
    /// Lanes along V per warp.
    pub fn cl(&self) -> u32 {
        32 / self.kl
    }
    /// Value columns of one warp.
    pub fn warp_cols(&self) -> u32 {
        self.cl() * self.vpl
    }
    /// Value columns of one block.
    pub fn block_cols(&self) -> u32 {
        self.warps * self.warp_cols()
    }
    /// The automatic layout: 4 lanes along K, 4 consecutive value columns per lane moved as one 16-byte access per
    /// state row (`SW=1`), 2 warps per block; where a lane would hold too many values (a gate bias at K = 128) or
    /// V is too narrow, 2 columns, then 1. Measured on the H200 (2026-12-02, the tuner's worker
    /// after the host-bound timing fix): `KL=4 VPL=4 DW=2 SW=1` 0.2027 / 0.2681 ms at N64 H96 / N256 H32 (FLA
    /// 0.2050 / 0.2748 in the same call), DW=1 and DW=4 within 3% of it, `KL=4 VPL=2 DW=1 SW=1` 0.2361 / 0.3079,
    /// the same VPL=4 with 4-byte accesses 0.2472 / 0.3278, and the previous automatic layout (`KL=4 VPL=1 DW=4`,
    /// chosen on 2026-12-01 from timings that were host-bound) 0.2621 / 0.3461.
    pub fn auto(dk: u32, dv: u32, gate_bias: bool) -> DecodeLayout {
        let kl = 4;
        let fits =
            |vpl: u32| lane_values(dk, kl, vpl, gate_bias) <= MAX_LANE_VALUES && dv.is_multiple_of(32 / kl * vpl);
        let vpl = [4, 2].into_iter().find(|&v| fits(v)).unwrap_or(1);
        DecodeLayout { kl, vpl, warps: auto_warps(dv, 32 / kl * vpl), wide: vpl > 1 }
    }
    /// Read knobs `KL`, `VPL`, `DW` (0 or missing: the automatic value of [`DecodeLayout::auto`]) and check them
    /// against the head dims and the registers of a lane (with a gate bias, see [`MAX_LANE_VALUES`]).
    pub fn resolve(knobs: &Knobs, dk: u32, dv: u32, gate_bias: bool) -> Result<DecodeLayout, OpError> {
        let invalid = |why: String| OpError::InvalidKnobs { op: "kda.decode", knobs: knobs.to_string(), why };
        let t = DecodeKnobs::from_knobs(knobs)?;
        let auto = DecodeLayout::auto(dk, dv, gate_bias);
        let kl = match t.kl {
            0 => auto.kl,
            v => v,
        };
        let vpl = match t.vpl {
            0 => auto.vpl,
            v => v,
        };
        if !matches!(kl, 1 | 2 | 4 | 8) {
            return Err(invalid(format!("KL={kl}: 0 (auto), 1, 2, 4 or 8")));
        }
        if !matches!(vpl, 1 | 2 | 4) {
            return Err(invalid(format!("VPL={vpl}: 0 (auto), 1, 2 or 4")));
        }
        let warp_cols = 32 / kl * vpl;
        let warps = match t.dw {
            0 => auto_warps(dv, warp_cols),
            v => v,
        };
        if !matches!(warps, 1 | 2 | 4 | 8) {
            return Err(invalid(format!("DW={warps}: 0 (auto), 1, 2, 4 or 8")));
        }
        let wide = match t.sw {
            0 => vpl > 1,
            1 => true,
            2 => false,
            v => {
                return Err(invalid(format!(
                    "SW={v}: 0 (auto: wide where VPL >= 2), 1 (one wide access per row) or 2 (4-byte accesses)"
                )));
            }
        };
        if wide && vpl == 1 {
            return Err(invalid("SW=1 moves a lane's VPL columns of a row as one access: VPL must be 2 or 4".into()));
        }
        let lay = DecodeLayout { kl, vpl, warps, wide };
        if !dv.is_multiple_of(lay.block_cols()) {
            return Err(invalid(format!(
                "KL={kl}, VPL={vpl}, DW={warps}: a block covers {} value columns, which must divide V = {dv}",
                lay.block_cols()
            )));
        }
        lay.check(dk, gate_bias).map_err(invalid)?;
        Ok(lay)
    }
    /// The register check of [`MAX_LANE_VALUES`].
    fn check(&self, dk: u32, gate_bias: bool) -> Result<(), String> {
        let n = lane_values(dk, self.kl, self.vpl, gate_bias);
        if n > MAX_LANE_VALUES {
            return Err(format!(
                "KL={}, VPL={} at K = {dk}{}: a lane would hold {n} state and row values (at most {MAX_LANE_VALUES}, \
                 else ptxas spills; raise KL or lower VPL)",
                self.kl,
                self.vpl,
                if gate_bias { " with a gate bias" } else { "" }
            ));
        }
        Ok(())
    }
}

/// A sum of terms in (up to) four interleaved chains, so that independent FMAs are in flight; each partial is
/// a variable.
fn chain_sum(b: &mut KernelBuilder, name: &str, terms: Vec<Expr>) -> Expr {
    let chains = terms.len().min(4);
    let mut acc: Vec<Expr> = Vec::with_capacity(chains);
    for (i, t) in terms.into_iter().enumerate() {
        if i < chains {
            acc.push(t);
        } else {
            let j = i % chains;
            acc[j] = b.let_(name, acc[j].clone() + t);
        }
    }
    while acc.len() > 1 {
        acc = acc.chunks(2).map(|c| if c.len() == 2 { &c[0] + c[1].clone() } else { c[0].clone() }).collect();
    }
    acc.pop().unwrap_or(Expr::Float(0.0))
}

/// The layout checks of [`build_decode`]: the values each knob takes, a block's columns dividing V, the lane's
/// registers ([`DecodeLayout::check`]), a wide layout's VPL.
fn check_layout(spec: &DecodeSpec) -> Result<(), OpError> {
    let lay = spec.layout;
    let bad_layout = |why: String| OpError::InvalidKnobs { op: "kda.decode", knobs: format!("{lay:?}"), why };
    if !matches!(lay.kl, 1 | 2 | 4 | 8) || !matches!(lay.vpl, 1 | 2 | 4) || !matches!(lay.warps, 1 | 2 | 4 | 8) {
        return Err(bad_layout("KL must be 1, 2, 4 or 8, VPL 1, 2 or 4, DW 1, 2, 4 or 8".into()));
    }
    if !spec.dv.is_multiple_of(lay.block_cols()) || !spec.dk.is_multiple_of(lay.kl) {
        return Err(bad_layout(format!("a block of {} columns must divide V = {}", lay.block_cols(), spec.dv)));
    }
    lay.check(spec.dk, spec.gate.has_bias()).map_err(bad_layout)?;
    if lay.wide && lay.vpl == 1 {
        return Err(bad_layout("a wide layout (SW=1) needs VPL 2 or 4".into()));
    }
    Ok(())
}

/// The kernel name of a decode variant.
fn decode_name(spec: &DecodeSpec) -> String {
    let lay = spec.layout;
    format!(
        "k3k_kda_decode_k{}_v{}_{}{}{}{}{}_kl{}_vpl{}_w{}{}",
        spec.dk,
        spec.dv,
        spec.gate.name(),
        if spec.g_bf16 { "_gbf16" } else { "" },
        if spec.l2norm { "_l2" } else { "" },
        if spec.beta_sigmoid { "_bsig" } else { "" },
        if spec.in_place { "_inplace" } else { "" },
        lay.kl,
        lay.vpl,
        lay.warps,
        if lay.wide { "_sw" } else { "" }
    )
}

/// Build the decode kernel.
pub fn build_decode(spec: &DecodeSpec) -> Result<Kernel, OpError> {
    let (dk, dv) = (spec.dk as i64, spec.dv as i64);
    let lay = spec.layout;
    check_layout(spec)?;
    let (kl, cl, vpl) = (lay.kl as i64, lay.cl() as i64, lay.vpl as usize);
    // Column u of a lane is `c0 + u * ust`: strided by the lanes along V, or consecutive in a wide layout.
    let ust = if lay.wide { 1 } else { cl };
    let lane_cols = if lay.wide { vpl as i64 } else { 1 };
    let rows = (spec.dk / lay.kl) as usize;
    let threads = lay.warps * 32;
    let mut b = KernelBuilder::new(&decode_name(spec), threads);
    let mut knobs = Knobs::new().with("KL", lay.kl as i64).with("VPL", lay.vpl as i64).with("DW", lay.warps as i64);
    if lay.wide {
        knobs = knobs.with("SW", 1i64);
    }
    b.knobs(knobs);
    let n = b.dim("N");
    let t = b.dim("T");
    let h = b.dim("H");
    let hv = b.dim("HV");
    let q = b.tensor("q", DType::Bf16, &[n.clone(), t.clone(), h.clone(), Expr::Int(dk)], Access::Read);
    let k = b.tensor("k", DType::Bf16, &[n.clone(), t.clone(), h.clone(), Expr::Int(dk)], Access::Read);
    let v = b.tensor("v", DType::Bf16, &[n.clone(), t.clone(), hv.clone(), Expr::Int(dv)], Access::Read);
    let g_dt = if spec.g_bf16 { DType::Bf16 } else { DType::F32 };
    let g = b.tensor("g", g_dt, &[n.clone(), t.clone(), hv.clone(), Expr::Int(dk)], Access::Read);
    let beta = b.tensor("beta", DType::Bf16, &[n.clone(), t.clone(), hv.clone()], Access::Read);
    let bias = spec.gate.has_bias().then(|| b.tensor("bias", DType::F32, &[hv.clone(), Expr::Int(dk)], Access::Read));
    let a_log = spec.gate.has_a_log().then(|| b.tensor("a_log", DType::F32, std::slice::from_ref(&hv), Access::Read));
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
    // One flat grid, column blocks fastest, then value heads, then sequences: consecutive blocks walk one
    // contiguous stretch of the state. (The grid was (N, HV, column blocks): neighbouring blocks a whole
    // sequence's state apart, HV * K * V * 4 bytes = 2 MB at H32, a power-of-two stride that sends the
    // concurrently running blocks to the same HBM channels; measured under ncu, 2026-12-02, N256 H32 auto:
    // 412 us, DRAM 55% of peak, while FLA's contiguous grid ran 316 us.)
    let cbs = dv / lay.block_cols() as i64;
    b.grid(&n * hv.clone() * cbs, 1i64, 1i64);
    let bid = Expr::block_idx(0);
    let cb = b.let_("cb", &bid % cbs);
    let seq = b.let_("seq", &bid / (hv.clone() * cbs));
    let hvi = b.let_("hv", (&bid / cbs) % hv.clone());
    let hq = b.let_("hq", &hvi / (hv.clone() / h.clone()));
    // The factor A_log brings: -exp(A_log) for the standard form, exp(A_log) for the scaled safe form.
    let a_coef = a_log.map(|a| {
        let e = Expr::load(a, hvi.clone()).exp();
        b.let_("a_coef", if matches!(spec.gate, GateForm::Standard { .. }) { -e } else { e })
    });
    // One token: a threads region that loads this lane's state values (every load issued before the first is
    // used), the rows' k, q and decay, reduces S^T k over K, updates and stores the state and reduces S^T q.
    // Tokens after the first read back what the previous one stored (the same thread's addresses).
    let token = |b: &mut KernelBuilder, tok: Expr, src: TensorId| {
        b.threads(|b| {
            let tid = Expr::thread_idx();
            let lane = b.let_("lane", &tid % 32i64);
            let rl = b.let_("rl", &lane / cl);
            let c0 = b.let_(
                "c0",
                &cb * lay.block_cols() as i64 + (&tid / 32i64) * lay.warp_cols() as i64 + (&lane % cl) * lane_cols,
            );
            let row = b.let_("row", &seq * t.clone() + tok);
            let sbase = b.let_("sbase", (&seq * hv.clone() + hvi.clone()) * (dk * dv) + &rl * dv + c0.clone());
            let at = |m: usize, u: usize| &sbase + (m as i64 * kl * dv + u as i64 * ust);
            let s: Vec<Vec<Expr>> = if lay.wide {
                (0..rows)
                    .map(|m| {
                        let a = b.let_array(&format!("s{m}"), vpl as u32, ScalarTy::Float, 0.0);
                        b.load_wide(a, 0, src, at(m, 0), vpl as u32);
                        (0..vpl).map(|u| Expr::array_get(a, u as i64)).collect()
                    })
                    .collect()
            } else {
                (0..rows)
                    .map(|m| (0..vpl).map(|u| b.let_(&format!("s{m}_{u}"), Expr::load(src, at(m, u)))).collect())
                    .collect()
            };
            let qk0 = b.let_("qk0", (&row * h.clone() + hq.clone()) * dk + rl.clone());
            let g0 = b.let_("g0", (&row * hv.clone() + hvi.clone()) * dk + rl.clone());
            let vo = b.let_("vo", (&row * hv.clone() + hvi.clone()) * dv + c0.clone());
            let vv: Vec<Expr> =
                (0..vpl).map(|u| b.let_(&format!("v{u}"), Expr::load(v, &vo + u as i64 * ust))).collect();
            let raw_beta = Expr::load(beta, &row * hv.clone() + hvi.clone());
            let bt = b.let_("bt", if spec.beta_sigmoid { raw_beta.sigmoid() } else { raw_beta });
            let kv: Vec<Expr> =
                (0..rows).map(|m| b.let_(&format!("k{m}"), Expr::load(k, &qk0 + m as i64 * kl))).collect();
            let qv: Vec<Expr> =
                (0..rows).map(|m| b.let_(&format!("q{m}"), Expr::load(q, &qk0 + m as i64 * kl))).collect();
            let dec: Vec<Expr> = (0..rows)
                .map(|m| {
                    let x = Expr::load(g, &g0 + m as i64 * kl);
                    let bias_i = match bias {
                        Some(bias_t) => Expr::load(bias_t, &hvi * dk + rl.clone() + m as i64 * kl),
                        None => Expr::Float(0.0),
                    };
                    let gate = match spec.gate {
                        GateForm::Pre => x,
                        GateForm::Safe { a_log: false, .. } => lb.clone().unwrap() * (x + bias_i).sigmoid(),
                        GateForm::Safe { a_log: true, .. } => {
                            lb.clone().unwrap() * (a_coef.clone().unwrap() * (x + bias_i)).sigmoid()
                        }
                        GateForm::Standard { .. } => a_coef.clone().unwrap() * (x + bias_i).softplus(),
                    };
                    b.let_(&format!("d{m}"), gate.exp())
                })
                .collect();
            // A sum over K: this lane's rows, then the lanes along K (xor over the row bits of the lane).
            let reduce = |b: &mut KernelBuilder, name: &str, terms: Vec<Expr>| {
                let x0 = chain_sum(b, name, terms);
                let mut x = b.let_(name, x0);
                let mut mask = cl as u32;
                while mask < 32 {
                    let other = b.warp_shuffle(name, WarpOp::ShflXor(mask), x.clone());
                    x = b.let_(name, x + other);
                    mask *= 2;
                }
                x
            };
            let (nq, nk) = if spec.l2norm {
                let sq = reduce(b, "sq", qv.iter().map(|x| x * x.clone()).collect());
                let sk = reduce(b, "sk", kv.iter().map(|x| x * x.clone()).collect());
                (b.let_("nq", (sq + 1e-6).rsqrt() * scale.clone()), Some(b.let_("nk", (sk + 1e-6).rsqrt())))
            } else {
                (scale.clone(), None)
            };
            // The decayed state S' = Diag(exp g) S, then pred_j = S'[:, j] . k (times the norm of k).
            let sd: Vec<Vec<Expr>> = (0..rows)
                .map(|m| (0..vpl).map(|u| b.let_(&format!("sd{m}_{u}"), &s[m][u] * dec[m].clone())).collect())
                .collect();
            let mut dn = Vec::with_capacity(vpl);
            for u in 0..vpl {
                let pred = reduce(b, &format!("pred{u}"), (0..rows).map(|m| &sd[m][u] * kv[m].clone()).collect());
                let pred = match &nk {
                    Some(f) => pred * f.clone(),
                    None => pred,
                };
                let delta = bt.clone() * (vv[u].clone() - pred);
                // S = S' + (beta k) (v - pred)^T, with the norm of k folded into the column factor.
                dn.push(b.let_(
                    &format!("dn{u}"),
                    match &nk {
                        Some(f) => delta * f.clone(),
                        None => delta,
                    },
                ));
            }
            let mut outs = Vec::with_capacity(vpl);
            let mut terms: Vec<Vec<Expr>> = vec![Vec::with_capacity(rows); vpl];
            if lay.wide {
                // Row by row: the new values of a row into an array, stored as one wide access.
                for m in 0..rows {
                    let a = b.let_array(&format!("so{m}"), vpl as u32, ScalarTy::Float, 0.0);
                    for u in 0..vpl {
                        let sv = b.let_(&format!("sv{m}_{u}"), &sd[m][u] + &kv[m] * dn[u].clone());
                        b.array_set(a, u as i64, sv.clone());
                        terms[u].push(sv * qv[m].clone());
                    }
                    b.store_wide(s_out, at(m, 0), a, 0, vpl as u32);
                }
            } else {
                for u in 0..vpl {
                    for m in 0..rows {
                        let sv = b.let_(&format!("sv{m}_{u}"), &sd[m][u] + &kv[m] * dn[u].clone());
                        b.store_scalar(s_out, at(m, u), sv.clone());
                        terms[u].push(sv * qv[m].clone());
                    }
                }
            }
            for (u, t) in terms.into_iter().enumerate() {
                outs.push(reduce(b, &format!("out{u}"), t));
            }
            let store_o = |b: &mut KernelBuilder| {
                for (u, out) in outs.iter().enumerate() {
                    b.store_scalar(o, &vo + u as i64 * ust, out * nq.clone());
                }
            };
            if kl == 1 { store_o(b) } else { b.if_(rl.eq(0i64), store_o) }
        });
    };
    if spec.in_place {
        b.for_("tok", 0i64, t.clone(), 1i64, |b, tok| token(b, tok, s_in));
    } else {
        // Token 0 from h0 (none when T = 0), the rest from ht.
        b.if_(t.gt(0i64), |b| token(b, Expr::Int(0), s_in));
        b.for_("tok", 1i64, t.clone(), 1i64, |b, tok| token(b, tok, s_out));
    }
    Ok(b.finish()?)
}

// ------------------------------------------------------------------------------------------------------------
// The `kda.decode` operator.

/// The dims of `kda.decode` presets (see [`DecodeProblem::from_preset`]).
pub const DIMS: &[DimDecl] = &[
    DimDecl::required("N", 1, dims::MAX_ROWS, "sequences (states)"),
    DimDecl::optional("T", 1, 1024, "tokens per sequence (default 1)"),
    DimDecl::required("H", 1, dims::MAX_HEADS, "query/key heads"),
    DimDecl::optional("HV", 1, dims::MAX_HEADS, "value heads, a multiple of H (default H)"),
    DimDecl::required("K", 1, 128, "key head dim: 32, 64 or 128"),
    DimDecl::optional("V", 1, 128, "value head dim: 32, 64 or 128 (default K)"),
    DimDecl::optional("gate", 0, 3, "gate form: 0 pre-computed, 1 lb*sigmoid, 2 standard, 3 lb*sigmoid(exp(A_log)*..)"),
    DimDecl::flag("bias", "1: the gate's bias"),
    DimDecl::flag("gbf16", "1: the raw gate input in bf16 (in-kernel gate forms; default f32)"),
    DimDecl::flag("l2norm", "1: in-kernel l2norm of q and k"),
    DimDecl::flag("bsig", "1: in-kernel sigmoid of beta"),
    DimDecl::flag("safe", "taken so that kda's dims serve both operators; the decode step has one path"),
];

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
    /// The raw gate input is bf16 (dim `gbf16`, see [`KdaProblem::g_bf16`](super::KdaProblem::g_bf16)).
    pub g_bf16: bool,
    pub l2norm: bool,
    pub beta_sigmoid: bool,
}

impl DecodeProblem {
    /// Dims `N`, `H`, `K`, optional `T` (1), `HV` (H), `V` (K), `gate`, `bias`, `gbf16`, `l2norm`, `bsig`.
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
            g_bf16: p.get_or("gbf16", 0) != 0,
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
        if pb.g_bf16 && pb.gate == GateForm::Pre {
            return Err(bad("gbf16", "a bf16 gate needs an in-kernel gate form (gate=1..3)".into()));
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
            g_bf16: self.g_bf16,
            l2norm: self.l2norm,
            beta_sigmoid: self.beta_sigmoid,
            h0: true,
            extreme: false,
        }
    }
    /// The kernel variant at the automatic layout.
    pub fn spec(&self, in_place: bool) -> DecodeSpec {
        self.spec_at(in_place, DecodeLayout::auto(self.dk as u32, self.dv as u32, self.gate.has_bias()))
    }
    /// The kernel variant at the layout knobs `KL`, `VPL`, `DW` (see [`DecodeLayout::resolve`]).
    pub fn spec_with(&self, in_place: bool, knobs: &Knobs) -> Result<DecodeSpec, OpError> {
        let lay = DecodeLayout::resolve(knobs, self.dk as u32, self.dv as u32, self.gate.has_bias())?;
        Ok(self.spec_at(in_place, lay))
    }
    fn spec_at(&self, in_place: bool, layout: DecodeLayout) -> DecodeSpec {
        DecodeSpec {
            dk: self.dk as u32,
            dv: self.dv as u32,
            gate: self.gate,
            g_bf16: self.g_bf16,
            l2norm: self.l2norm,
            beta_sigmoid: self.beta_sigmoid,
            in_place,
            layout,
        }
    }
}

/// The plan of a decode problem (out-of-place variant: `h0` in, `ht` out) at the automatic layout. Inputs are
/// laid out as the chunked problem's with B = N, reshaped to `[N, T, ...]`.
pub fn decode_plan(pb: &DecodeProblem, d: &KdaData) -> Result<Plan, OpError> {
    decode_plan_with(pb, d, &default_knobs())
}

/// [`decode_plan`] at the layout knobs `KL`, `VPL`, `DW`.
pub fn decode_plan_with(pb: &DecodeProblem, d: &KdaData, knobs: &Knobs) -> Result<Plan, OpError> {
    let k = build_decode(&pb.spec_with(false, knobs)?)?;
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

crate::typed_knobs::knob_set! {
    /// The knobs of `kda.decode`: the thread layout (see [`DecodeLayout`]), each 0 (the default, and what a record
    /// without the knob means) for the automatic value of [`DecodeLayout::auto`].
    pub struct DecodeKnobs for "kda.decode" {
        /// `KL`: lanes along K per warp.
        kl: u32 = "KL" => {
            axis: "lanes along K per warp, the sums over K finished by xor shuffles (0 = auto: 4)" [0, 1, 2, 4, 8],
            default: 0,
            absent: 0,
        },
        /// `VPL`: value columns per lane.
        vpl: u32 = "VPL" => {
            axis: "value columns per lane, each in every state row the lane holds (0 = auto: 4, 2 with a gate bias at K = 128)"
                [0, 1, 2, 4],
            default: 0,
            absent: 0,
        },
        /// `DW`: warps per block.
        dw: u32 = "DW" => {
            axis: "warps per block, side by side along V (0 = auto: up to 2)" [0, 1, 2, 4, 8],
            default: 0,
            absent: 0,
        },
        /// `SW`: the state rows' access width (1 wide, 2 four bytes).
        sw: u32 = "SW" => {
            axis: "1: a lane's VPL columns consecutive, each state row moved as one 8/16-byte access (VPL 2/4); 2: 4-byte \
             accesses; 0 = auto: 1 where VPL >= 2"
                [0, 1, 2],
            default: 0,
            absent: 0,
        },
    }
}

/// The tuning knobs of `kda.decode` (the thread layout, see [`DecodeKnobs`]).
pub fn knob_space() -> KnobSpace {
    DecodeKnobs::space()
}

/// The knobs used when nothing is tuned: the automatic layout.
pub fn default_knobs() -> Knobs {
    DecodeKnobs::defaults()
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
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
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
        let gate = rng.random_range(0..4i64);
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
            // (Drawn last: the draws before it are those of the cases from before the option existed.)
            ("gbf16", (gate != 0 && rng.random_bool(0.5)) as i64),
        ];
        Preset::new(&format!("kda.decode N{n} T{t} H{h} HV{hv} K{dk} V{dv} gate{gate}"), &dims)
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(self.name(), DIMS, p)?;
        dims::bound(self.name(), p, super::kda_footprint(p, true))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = DecodeProblem::from_preset(p)?;
        let d = KdaData::generate(&pb.as_chunked(), seed);
        Ok(Box::new(DecodeInstance { pb, d, seed }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = DecodeProblem::from_preset(p)?;
        Ok(vec![build_decode(&pb.spec_with(false, knobs)?)?, build_decode(&pb.spec_with(true, knobs)?)?])
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
    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        decode_plan_with(&self.pb, &self.d, knobs)
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
        let g_bytes = if pb.g_bf16 { 2.0 } else { 4.0 };
        Work {
            flops: n * t * hv * dk * dv * 8.0,
            bytes: 2.0 * n * hv * dk * dv * 4.0
                + n * t * (2.0 * h * dk * 2.0 + hv * (2.0 * dv * 2.0 + dk * g_bytes + 2.0)),
        }
    }
    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({
            "N": pb.n, "T": pb.t, "H": pb.h, "HV": pb.hv, "K": pb.dk, "V": pb.dv, "gate": pb.gate.name(),
            "gate_bias": pb.gate.has_bias(), "g_dtype": if pb.g_bf16 { "bf16" } else { "f32" },
            "l2norm": pb.l2norm, "beta_sigmoid": pb.beta_sigmoid, "lower_bound": LOWER_BOUND, "scale": (1.0 / (pb.dk as f64).sqrt()) as f32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{DecodeLayout, MAX_LANE_VALUES, default_knobs, lane_values};

    #[test]
    fn the_automatic_layout_is_the_measured_one_and_always_fits() {
        let lay = |kl, vpl, warps, wide| DecodeLayout { kl, vpl, warps, wide };
        assert_eq!(DecodeLayout::auto(128, 128, false), lay(4, 4, 2, true), "the winner at K = V = 128 (2026-12-02)");
        // A gate bias at K = 128 would put 288 values in a lane at VPL = 4: VPL = 2.
        assert_eq!(DecodeLayout::auto(128, 128, true), lay(4, 2, 2, true));
        assert_eq!(DecodeLayout::auto(32, 32, true), lay(4, 4, 1, true), "one 32-column warp covers V = 32");
        for dk in [32, 64, 128] {
            for dv in [32, 64, 128] {
                for bias in [false, true] {
                    let a = DecodeLayout::auto(dk, dv, bias);
                    assert!(lane_values(dk, a.kl, a.vpl, bias) <= MAX_LANE_VALUES, "{dk} {dv} {bias}: {a:?}");
                    assert!(dv.is_multiple_of(a.block_cols()), "{dk} {dv} {bias}: {a:?}");
                    // The default knobs resolve to it, and SW=2 / SW=1 pick the access width explicitly.
                    assert_eq!(DecodeLayout::resolve(&default_knobs(), dk, dv, bias).unwrap(), a);
                    let narrow = DecodeLayout::resolve(&default_knobs().with("SW", 2i64), dk, dv, bias).unwrap();
                    assert_eq!(narrow, DecodeLayout { wide: false, ..a });
                }
            }
        }
        let e = DecodeLayout::resolve(&default_knobs().with("SW", 3i64), 128, 128, false).unwrap_err().to_string();
        assert!(e.contains("SW=3") && e.contains("4-byte"), "{e}");
        let e = DecodeLayout::resolve(&default_knobs().with("VPL", 1i64).with("SW", 1i64), 128, 128, false);
        assert!(e.unwrap_err().to_string().contains("VPL must be 2 or 4"));
    }
}
