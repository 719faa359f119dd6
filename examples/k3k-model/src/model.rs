//! The model's layers on its own stream: every k3k launcher `build.rs` generated, the engine's own kernels, and
//! the prefill of a varlen batch through 3 KDA layers, 1 gated MLA layer and 1 LatentMoE layer.
//!
//! The block (one GPU's share of K3 at TP8/EP32; norms, RoPE-free MLA and shared experts left out, as they
//! change nothing k3k runs):
//! - KDA layer: `q, k, v, g = x W^T` (`[T, 12*128]`), `beta = x W_b^T` (`[T, 12]` logits), chunked KDA with the
//!   safe gate `-5 sigmoid(g + bias)`, L2-normalised q and k and the beta sigmoid in the kernel, `x += o W_o^T`.
//! - gated MLA layer: `q = (x W_qa) W_qb`, latent `c = x W_c`, rope key `kr = x W_kr`, `k = [c W_uk | kr]`,
//!   `v = c W_uv`, gate logits `z = x W_z`, causal attention with the sigmoid output gate, `x += o W_o^T`; the
//!   latents go to the paged cache for decode.
//! - LatentMoE layer: `xl = x W_down^T` (latent 3584), router scores `sigmoid(xl W_r^T)`, the Quantile
//!   Balancing bias (hist_quantile), top-4 routing, GEMM1 with SiTU-GLU and GEMM2 with the routing weight on
//!   MXFP4 experts, the combine, `x += y W_up^T`.

use crate::check::{self, Checker, KdaCheck, KdaPair, mla_scale};
use crate::config::*;
use crate::dev::{Buf, layer_io};
use crate::engine::{Cache, Engine, Routing};
use crate::host::*;
use crate::kernels;
use crate::weights::{KdaLayer, Lin, Weights};
use k3k_build::reference::gemm::Epilogue;
use k3k_build::reference::mla as rmla;
use k3k_build::reference::quantile as rq;
use k3k_build::rt::cudarc::driver::CudaStream;
use k3k_build::rt::{self, Bf16, DType, F32, Gpu, I32, U8, U32};
use std::sync::Arc;

/// Every kernel the model launches.
pub struct Launchers {
    pub lin: kernels::linear::Linear,
    pub narrow: kernels::linear_narrow::Linear,
    pub small: kernels::linear_small::Linear,
    pub narrow_small: kernels::linear_narrow_small::Linear,
    pub qb: kernels::router_qb::Plan,
    pub up_dq: kernels::moe_up::Dequant,
    pub up: kernels::moe_up::UpGlu,
    pub down_dq: kernels::moe_down::Dequant,
    pub down: kernels::moe_down::DownP,
    pub up_dec: kernels::moe_up_decode::UpGlu,
    pub down_dec: kernels::moe_down_decode::DownP,
    pub kda: kernels::kda_varlen::Varlen,
    pub kda_step: kernels::kda_decode::StepInPlace,
    pub mla: kernels::mla_prefill::Attend,
    pub mla_dec: kernels::mla_decode::Attend,
    pub mla_comb: kernels::mla_decode::Combine,
    pub mla_gate: kernels::mla_gate::Project,
    pub absorb: kernels::mla_absorb::PerHead,
    pub eng: Engine,
}

impl Launchers {
    pub fn load(s: &Arc<CudaStream>, gpu: &Gpu) -> Res<Launchers> {
        Ok(Launchers {
            lin: kernels::linear::Linear::load(s)?,
            narrow: kernels::linear_narrow::Linear::load(s)?,
            small: kernels::linear_small::Linear::load(s)?,
            narrow_small: kernels::linear_narrow_small::Linear::load(s)?,
            qb: kernels::router_qb::Plan::load(gpu)?,
            up_dq: kernels::moe_up::Dequant::load(s)?,
            up: kernels::moe_up::UpGlu::load(s)?,
            down_dq: kernels::moe_down::Dequant::load(s)?,
            down: kernels::moe_down::DownP::load(s)?,
            up_dec: kernels::moe_up_decode::UpGlu::load(s)?,
            down_dec: kernels::moe_down_decode::DownP::load(s)?,
            kda: kernels::kda_varlen::Varlen::load(s)?,
            kda_step: kernels::kda_decode::StepInPlace::load(s)?,
            mla: kernels::mla_prefill::Attend::load(s)?,
            mla_dec: kernels::mla_decode::Attend::load(s)?,
            mla_comb: kernels::mla_decode::Combine::load(s)?,
            mla_gate: kernels::mla_gate::Project::load(s)?,
            absorb: kernels::mla_absorb::PerHead::load(s)?,
            eng: Engine::load(s)?,
        })
    }

    /// `y = x w^T` with the dense GEMM: the register-store variant for rows narrower than 16 bytes or not a
    /// multiple of them, the small-tile variant for decode-like token counts.
    pub fn linear(&self, s: &Arc<CudaStream>, x: &Buf, w: &Lin, y: &mut Buf) -> Res<()> {
        let m = x.shape[0];
        let (xv, wv) = (x.v_as::<Bf16>(s, &[m, w.k])?, w.d.v::<Bf16>(s)?);
        let mut yv = y.m_as::<Bf16>(s, &[m, w.n])?;
        match ((w.n * 2).is_multiple_of(16), m <= 64) {
            (true, false) => self.lin.launch(s, &xv, &wv, &mut yv)?,
            (true, true) => self.small.launch(s, &xv, &wv, &mut yv)?,
            (false, false) => self.narrow.launch(s, &xv, &wv, &mut yv)?,
            (false, true) => self.narrow_small.launch(s, &xv, &wv, &mut yv)?,
        }
        Ok(())
    }
}

/// Runs one launch of a pass: eagerly, or timed, or captured.
pub type Each<'a> = dyn FnMut(&str, &mut dyn FnMut() -> Res<()>) -> Res<()> + 'a;

fn bf(s: &Arc<CudaStream>, shape: &[usize]) -> Res<Buf> {
    Buf::alloc(s, DType::Bf16, shape)
}

/// A KDA layer's buffers for `t` tokens (the prefill's, or a decode step's): the projections of its input, the
/// gate input as f32, the output, its projection, and the recurrent state (`[N, H, 128, 128]` f32: the prefill's
/// final states, or the state a decode step updates in place).
pub struct KdaBufs {
    pub q: Buf,
    pub k: Buf,
    pub v: Buf,
    pub graw: Buf,
    pub g: Buf,
    pub beta: Buf,
    pub o: Buf,
    pub y: Buf,
    pub state: Buf,
}

impl KdaBufs {
    pub fn new(s: &Arc<CudaStream>, t: usize, n: usize) -> Res<KdaBufs> {
        let hd = HEADS * HEAD_DIM;
        Ok(KdaBufs {
            q: bf(s, &[t, hd])?,
            k: bf(s, &[t, hd])?,
            v: bf(s, &[t, hd])?,
            graw: bf(s, &[t, hd])?,
            g: Buf::alloc(s, DType::F32, &[t, hd])?,
            beta: bf(s, &[t, HEADS])?,
            o: bf(s, &[t, hd])?,
            y: bf(s, &[t, HIDDEN])?,
            state: Buf::alloc(s, DType::F32, &[n, HEADS, HEAD_DIM, HEAD_DIM])?,
        })
    }

    /// Enqueue layer `l`'s input side: the q, k, v, gate-input and beta projections of `x`, the gate's cast.
    pub fn enqueue_inputs(
        &mut self,
        l: usize,
        k: &Launchers,
        s: &Arc<CudaStream>,
        x: &Buf,
        lw: &KdaLayer,
        each: &mut Each<'_>,
    ) -> Res<()> {
        let a = self;
        for (name, wt, dst) in
            [("q", &lw.q, &mut a.q), ("k", &lw.k, &mut a.k), ("v", &lw.v, &mut a.v), ("g", &lw.g, &mut a.graw)]
        {
            each(&format!("KDA{l} linear {name}"), &mut || k.linear(s, x, wt, dst))?;
        }
        each(&format!("KDA{l} linear beta"), &mut || k.linear(s, x, &lw.beta, &mut a.beta))?;
        each(&format!("KDA{l} cast g (engine)"), &mut || k.eng.cast(s, &a.graw, &mut a.g))
    }

    /// Enqueue layer `l`'s output side: the output projection and the residual add `xo = x + o W_o^T`.
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue_output(
        &mut self,
        l: usize,
        k: &Launchers,
        s: &Arc<CudaStream>,
        x: &Buf,
        lw: &KdaLayer,
        xo: &mut Buf,
        each: &mut Each<'_>,
    ) -> Res<()> {
        let a = self;
        each(&format!("KDA{l} linear o"), &mut || k.linear(s, &a.o, &lw.o, &mut a.y))?;
        each(&format!("KDA{l} residual add (engine)"), &mut || k.eng.add(s, x, &a.y, xo))
    }

    /// Check layer `l`'s projections, its KDA op (`h0`: the states before it, `None` for zeros; `pairs` of the
    /// sequences `cu`) and its output side.
    #[allow(clippy::too_many_arguments)]
    pub fn check(
        &self,
        ck: &mut Checker,
        l: usize,
        x: &Buf,
        lw: &KdaLayer,
        xo: &Buf,
        rows: &[usize],
        kda: (&str, &[usize], &[KdaPair], Option<&[f32]>),
    ) -> Res<()> {
        let a = self;
        for (name, wt, y) in [("q", &lw.q, &a.q), ("k", &lw.k, &a.k), ("v", &lw.v, &a.v), ("g", &lw.g, &a.graw)] {
            ck.linear(&format!("KDA{l} {name}"), x, wt, y, rows)?;
        }
        ck.linear(&format!("KDA{l} beta"), x, &lw.beta, &a.beta, rows)?;
        let (op, cu, pairs, h0) = kda;
        let kc = KdaCheck {
            q: &a.q,
            k: &a.k,
            v: &a.v,
            g: &a.graw,
            beta: &a.beta,
            bias: &lw.bias_h,
            o: &a.o,
            ht: &a.state,
            h0,
            cu,
        };
        let (eo, es) = kc.run(ck.s, pairs)?;
        let what = format!("{} (seq, head) pairs", pairs.len());
        let shape = format!("{} seqs, {} tokens, H{HEADS}", cu.len() - 1, cu[cu.len() - 1]);
        ck.row(&format!("KDA{l} {op} o"), &shape, eo, check::TOL, &what);
        ck.row(&format!("KDA{l} {op} states"), &shape_text(&a.state.shape), es, check::TOL, &what);
        ck.linear(&format!("KDA{l} o"), &a.o, &lw.o, &a.y, rows)?;
        ck.add(x, &a.y, xo, rows)
    }
}

struct MlaActs {
    qa: Buf,
    q: Buf,
    c: Buf,
    kr: Buf,
    kn: Buf,
    v: Buf,
    k: Buf,
    z: Buf,
    o: Buf,
    lse: Buf,
    y: Buf,
}

struct MoeActs {
    xl: Buf,
    logits: Buf,
    r: Routing,
    wd1: Buf,
    h1: Buf,
    wd2: Buf,
    y2: Buf,
    yl: Buf,
    y: Buf,
}

/// The prefill's buffers: every activation its own (so the pass can be re-run for timing and checked after).
pub struct Prefill {
    /// Hidden states: the input, then after each layer (3 KDA, MLA, MoE).
    xs: Vec<Buf>,
    kda: Vec<KdaBufs>,
    mla: MlaActs,
    moe: MoeActs,
    cu: Vec<usize>,
    cu_d: Buf,
    seq_of: Buf,
    pos_of: Buf,
    ws: Buf,
    b_prev: Buf,
    b_prev_h: Vec<f32>,
    pub qb: kernels::router_qb::Outputs,
}

impl Prefill {
    pub fn new(s: &Arc<CudaStream>, k: &Launchers, gpu: &Gpu, seed: u64) -> Res<Prefill> {
        let t = PREFILL_TOKENS;
        let mut cu = vec![0usize];
        for l in PREFILL_LENS {
            cu.push(cu.last().unwrap() + l);
        }
        assert_eq!(*cu.last().unwrap(), t, "PREFILL_TOKENS is the sum of PREFILL_LENS");
        let (mut seq_of, mut pos_of) = (vec![], vec![]);
        for (b, l) in PREFILL_LENS.iter().enumerate() {
            seq_of.extend(std::iter::repeat_n(b as i32, *l));
            pos_of.extend(0..*l as i32);
        }
        let mut xs = vec![Buf::upload(s, DType::Bf16, &[t, HIDDEN], &crate::weights::normal(seed, t * HIDDEN, 1.0))?];
        for _ in 0..KDA_LAYERS + 2 {
            xs.push(bf(s, &[t, HIDDEN])?);
        }
        let n = PREFILL_LENS.len();
        type V = kernels::kda_varlen::Varlen;
        if (V::MAX_TOKENS, V::MAX_SEQS) != (VARLEN_MAX_TOKENS, VARLEN_MAX_SEQS) || t > V::MAX_TOKENS || n > V::MAX_SEQS
        {
            return Err(format!(
                "the varlen KDA launcher was built for other limits ({}, {})",
                V::MAX_TOKENS,
                V::MAX_SEQS
            )
            .into());
        }
        let kda = (0..KDA_LAYERS).map(|_| KdaBufs::new(s, t, n)).collect::<Res<_>>()?;
        let mla = MlaActs {
            qa: bf(s, &[t, MLA_Q_RANK])?,
            q: bf(s, &[t, HEADS * MLA_DQK])?,
            c: bf(s, &[t, MLA_LATENT])?,
            kr: bf(s, &[t, MLA_ROPE])?,
            kn: bf(s, &[t, HEADS * MLA_NOPE])?,
            v: bf(s, &[t, HEADS * MLA_DV])?,
            k: bf(s, &[t, HEADS, MLA_DQK])?,
            z: bf(s, &[t, HEADS * MLA_DV])?,
            o: bf(s, &[t, HEADS * MLA_DV])?,
            lse: Buf::alloc(s, DType::F32, &[HEADS, t])?,
            y: bf(s, &[t, HIDDEN])?,
        };
        let rows = t * TOP_K;
        let moe = MoeActs {
            xl: bf(s, &[t, LATENT])?,
            logits: bf(s, &[t, EXPERTS])?,
            r: Routing::new(s, t)?,
            wd1: bf(s, &[EXPERTS, 2 * INTER, LATENT])?,
            h1: bf(s, &[rows, INTER])?,
            wd2: bf(s, &[EXPERTS, LATENT, INTER])?,
            y2: bf(s, &[rows, LATENT])?,
            yl: bf(s, &[t, LATENT])?,
            y: bf(s, &[t, HIDDEN])?,
        };
        let b_prev_h = crate::weights::normal(seed ^ 0xb1a5, EXPERTS, 0.02);
        Ok(Prefill {
            xs,
            kda,
            mla,
            moe,
            cu_d: Buf::upload_i32(s, &[n + 1], &cu.iter().map(|&c| c as i32).collect::<Vec<_>>())?,
            cu,
            seq_of: Buf::upload_i32(s, &[t], &seq_of)?,
            pos_of: Buf::upload_i32(s, &[t], &pos_of)?,
            ws: Buf::alloc(s, DType::U8, &[k.kda.workspace_bytes()])?,
            b_prev: Buf::upload(s, DType::F32, &[EXPERTS], &b_prev_h)?,
            b_prev_h,
            qb: k.qb.outputs(gpu)?,
        })
    }

    /// Each KDA layer's final states `[N, H, 128, 128]` f32: the decode states.
    pub fn states(&self) -> impl Iterator<Item = &Buf> {
        self.kda.iter().map(|a| &a.state)
    }

    /// Enqueue the whole prefill, each launch handed to `each`.
    pub fn enqueue(
        &mut self,
        k: &mut Launchers,
        s: &Arc<CudaStream>,
        w: &Weights,
        cache: &mut Cache,
        each: &mut Each<'_>,
    ) -> Res<()> {
        let t = PREFILL_TOKENS;
        let cu: Vec<i32> = self.cu.iter().map(|&c| c as i32).collect();
        for (l, (a, lw)) in self.kda.iter_mut().zip(&w.kda).enumerate() {
            let (x, xo) = layer_io(&mut self.xs, l);
            a.enqueue_inputs(l, k, s, x, lw, each)?;
            let kk = &mut k.kda;
            each("kda varlen (6 seqs, 8192 tokens)", &mut || {
                let tok = [t, HEADS, HEAD_DIM];
                Ok(kk.run(
                    s,
                    &cu,
                    &a.q.v_as::<Bf16>(s, &tok)?,
                    &a.k.v_as::<Bf16>(s, &tok)?,
                    &a.v.v_as::<Bf16>(s, &tok)?,
                    &a.g.v_as::<F32>(s, &tok)?,
                    &a.beta.v::<Bf16>(s)?,
                    &lw.bias.v::<F32>(s)?,
                    None,
                    &mut a.o.m_as::<Bf16>(s, &tok)?,
                    &mut a.state.m::<F32>(s)?,
                    &mut self.ws.m::<U8>(s)?,
                )?)
            })?;
            a.enqueue_output(l, k, s, x, lw, xo, each)?;
        }

        let (x, xo) = layer_io(&mut self.xs, KDA_LAYERS);
        let (a, mw) = (&mut self.mla, &w.mla);
        each("linear q_a", &mut || k.linear(s, x, &mw.qa, &mut a.qa))?;
        each("linear q_b", &mut || k.linear(s, &a.qa, &mw.qb, &mut a.q))?;
        each("linear c (latent)", &mut || k.linear(s, x, &mw.c, &mut a.c))?;
        each("linear k_rope", &mut || k.linear(s, x, &mw.kr, &mut a.kr))?;
        each("linear k_nope = c W_uk", &mut || k.linear(s, &a.c, &mw.uk, &mut a.kn))?;
        each("linear v = c W_uv", &mut || k.linear(s, &a.c, &mw.uv, &mut a.v))?;
        each("concat k = [k_nope | k_rope] (engine)", &mut || k.eng.concat_rope(s, &a.kn, &a.kr, &mut a.k))?;
        each("linear z (gate)", &mut || k.linear(s, x, &mw.z, &mut a.z))?;
        let max_q = *PREFILL_LENS.iter().max().unwrap() as i64;
        each("gated_mla.prefill varlen (causal, gate)", &mut || {
            Ok(k.mla.launch(
                s,
                &a.q.v_as::<Bf16>(s, &[t, HEADS, MLA_DQK])?,
                &a.k.v::<Bf16>(s)?,
                &a.v.v_as::<Bf16>(s, &[t, HEADS, MLA_DV])?,
                &self.cu_d.v::<I32>(s)?,
                &self.cu_d.v::<I32>(s)?,
                &a.z.v_as::<Bf16>(s, &[t, HEADS, MLA_DV])?,
                &mut a.o.m_as::<Bf16>(s, &[t, HEADS, MLA_DV])?,
                &mut a.lse.m::<F32>(s)?,
                mla_scale(),
                max_q,
            )?)
        })?;
        each("linear o (MLA)", &mut || k.linear(s, &a.o, &mw.o, &mut a.y))?;
        each("residual add (engine)", &mut || k.eng.add(s, x, &a.y, xo))?;
        each("paged cache write (engine)", &mut || k.eng.cache_put(s, &a.c, &a.kr, cache, &self.seq_of, &self.pos_of))?;

        let (x, xo) = layer_io(&mut self.xs, KDA_LAYERS + 1);
        let (a, ew) = (&mut self.moe, &w.moe);
        let rows = t * TOP_K;
        each("linear latent down", &mut || k.linear(s, x, &ew.down, &mut a.xl))?;
        each("linear router (N=28, register store)", &mut || k.linear(s, &a.xl, &ew.router, &mut a.logits))?;
        each("sigmoid scores (engine)", &mut || k.eng.sigmoid(s, &a.logits, &mut a.r.s))?;
        let (qb, b_prev, outs) = (&k.qb, &self.b_prev, &mut self.qb);
        each("hist_quantile.qb plan (QB bias)", &mut || {
            let inputs = kernels::router_qb::Inputs { s: &a.r.s.v::<F32>(s)?, b: &b_prev.v::<F32>(s)? };
            Ok(qb.run(s, &inputs, outs)?)
        })?;
        let bias = rt::In::arg(&self.qb.bias).ptr();
        each("route: top-4 (engine)", &mut || k.eng.route_topk(s, bias, &mut a.r))?;
        each("route: group ends (engine)", &mut || k.eng.group_offsets(s, &mut a.r))?;
        each("route: permutation (engine)", &mut || k.eng.group_place(s, &mut a.r))?;
        each("route: gather rows (engine)", &mut || k.eng.gather(s, &a.xl, &mut a.r))?;
        each("mxfp4 dequant GEMM1 weights", &mut || {
            let (q, sc) = (ew.up_glu.q.v::<U32>(s)?, ew.up_glu.sc.v::<U8>(s)?);
            Ok(k.up_dq.launch(s, &q, &sc, &a.r.offs.v::<I32>(s)?, &mut a.wd1.m::<Bf16>(s)?)?)
        })?;
        each(&format!("GEMM1 SiTU-GLU ({rows} rows, G{EXPERTS})"), &mut || {
            Ok(k.up.launch(
                s,
                &a.r.xp.v::<Bf16>(s)?,
                &a.wd1.v::<Bf16>(s)?,
                &a.r.offs.v::<I32>(s)?,
                &mut a.h1.m::<Bf16>(s)?,
            )?)
        })?;
        each("mxfp4 dequant GEMM2 weights", &mut || {
            let (q, sc) = (ew.down_p.q.v::<U32>(s)?, ew.down_p.sc.v::<U8>(s)?);
            Ok(k.down_dq.launch(s, &q, &sc, &a.r.offs.v::<I32>(s)?, &mut a.wd2.m::<Bf16>(s)?)?)
        })?;
        each(&format!("GEMM2 x routing weight ({rows} rows, G{EXPERTS})"), &mut || {
            Ok(k.down.launch(
                s,
                &a.h1.v::<Bf16>(s)?,
                &a.wd2.v::<Bf16>(s)?,
                &a.r.offs.v::<I32>(s)?,
                &a.r.p.v::<F32>(s)?,
                &mut a.y2.m::<Bf16>(s)?,
            )?)
        })?;
        each("combine routed rows (engine)", &mut || k.eng.combine(s, &a.y2, &a.r, &mut a.yl))?;
        each("linear latent up", &mut || k.linear(s, &a.yl, &ew.up, &mut a.y))?;
        each("residual add (engine)", &mut || k.eng.add(s, x, &a.y, xo))?;
        Ok(())
    }

    /// Check every op of the pass (run once) against the f64 reference on sampled rows, sequences and heads.
    pub fn check(&self, s: &Arc<CudaStream>, gpu: &Gpu, w: &Weights, cache: &Cache, rep: &mut Report) -> Res<()> {
        let mut ck = Checker { s, rep, stage: "prefill" };
        let cu = &self.cu;
        // Rows: both ends of every sequence and a few inside.
        let mut rows: Vec<usize> = cu.windows(2).flat_map(|c| [c[0], (c[0] + c[1]) / 2, c[1] - 1]).collect();
        rows.dedup();
        // Every head of the shortest sequence, one head of the first and one of the longest.
        let mut pairs: Vec<KdaPair> = (0..HEADS).map(|head| KdaPair { seq: 4, head }).collect();
        pairs.push(KdaPair { seq: 0, head: 3 });
        pairs.push(KdaPair { seq: 5, head: HEADS - 1 });
        for (l, (a, lw)) in self.kda.iter().zip(&w.kda).enumerate() {
            a.check(&mut ck, l, &self.xs[l], lw, &self.xs[l + 1], &rows, ("kda varlen", cu, &pairs, None))?;
        }
        self.check_mla(s, w, cache, rep, &rows)?;
        self.check_moe(s, gpu, w, rep, &rows)
    }

    fn check_mla(&self, s: &Arc<CudaStream>, w: &Weights, cache: &Cache, rep: &mut Report, rows: &[usize]) -> Res<()> {
        let mut ck = Checker { s, rep, stage: "prefill" };
        let (a, mw, x) = (&self.mla, &w.mla, &self.xs[KDA_LAYERS]);
        ck.linear("MLA q_a", x, &mw.qa, &a.qa, rows)?;
        ck.linear("MLA q_b", &a.qa, &mw.qb, &a.q, rows)?;
        ck.linear("MLA c", x, &mw.c, &a.c, rows)?;
        ck.linear("MLA k_rope", x, &mw.kr, &a.kr, rows)?;
        ck.linear("MLA k_nope", &a.c, &mw.uk, &a.kn, rows)?;
        ck.linear("MLA v", &a.c, &mw.uv, &a.v, rows)?;
        ck.linear("MLA z", x, &mw.z, &a.z, rows)?;
        // Attention: the two shortest sequences whole, and the last 8 queries of the longest.
        let (mut got, mut want) = (vec![], vec![]);
        for (seq, last) in [(4usize, None), (1, None), (5, Some(8usize))] {
            let (k0, k1) = (self.cu[seq], self.cu[seq + 1]);
            let q0 = last.map_or(k0, |n| k1 - n);
            let q = a.q.fetch_rows(s, q0..k1)?;
            let z = a.z.fetch_rows(s, q0..k1)?;
            let (kn, kr, v) = (a.kn.fetch_rows(s, k0..k1)?, a.kr.fetch_rows(s, k0..k1)?, a.v.fetch_rows(s, k0..k1)?);
            let mut k = vec![];
            for r in 0..k1 - k0 {
                for h in 0..HEADS {
                    k.extend_from_slice(&kn[(r * HEADS + h) * MLA_NOPE..(r * HEADS + h + 1) * MLA_NOPE]);
                    k.extend_from_slice(&kr[r * MLA_ROPE..(r + 1) * MLA_ROPE]);
                }
            }
            let (o, _) = rmla::mla_prefill(
                &q,
                &k,
                &v,
                Some(&z),
                k1 - q0,
                k1 - k0,
                HEADS,
                MLA_DQK,
                MLA_DV,
                mla_scale() as f64,
                true,
            )?;
            want.extend(o);
            got.extend(a.o.fetch_rows(s, q0..k1)?);
        }
        ck.row("MLA gated_mla.prefill o", "varlen 6 seqs, H12", err(&got, &want), check::TOL, "3 seqs");
        ck.linear("MLA o", &a.o, &mw.o, &a.y, rows)?;
        ck.add(x, &a.y, &self.xs[KDA_LAYERS + 1], rows)?;
        // The paged cache holds every token's [c | kr] at its place.
        let (kv, table) = (cache.kv.fetch(s)?, cache.table.fetch_i32(s)?);
        let maxb = cache.table.shape[1];
        let (c, kr) = (a.c.fetch(s)?, a.kr.fetch(s)?);
        let mut bad = 0usize;
        for (b, cw) in self.cu.windows(2).enumerate() {
            for pos in 0..cw[1] - cw[0] {
                let r = cw[0] + pos;
                let row = table[b * maxb + pos / PAGE] as usize * PAGE + pos % PAGE;
                let cached = &kv[row * MLA_ROW..(row + 1) * MLA_ROW];
                let want = c[r * MLA_LATENT..(r + 1) * MLA_LATENT].iter().chain(&kr[r * MLA_ROPE..(r + 1) * MLA_ROPE]);
                bad += cached.iter().zip(want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            }
        }
        ck.row("paged cache write (engine)", "8192 rows", bad as f64, 0.0, "values not in place");
        Ok(())
    }

    fn check_moe(&self, s: &Arc<CudaStream>, gpu: &Gpu, w: &Weights, rep: &mut Report, rows: &[usize]) -> Res<()> {
        let mut ck = Checker { s, rep, stage: "prefill" };
        let (a, ew, x) = (&self.moe, &w.moe, &self.xs[KDA_LAYERS + 1]);
        let t = PREFILL_TOKENS;
        ck.linear("MoE latent down", x, &ew.down, &a.xl, rows)?;
        ck.linear("MoE router", &a.xl, &ew.router, &a.logits, rows)?;
        let (lg, sc) = (a.logits.fetch(s)?, a.r.s.fetch(s)?);
        let want: Vec<f64> = lg.iter().map(|&z| k3k_build::reference::gemm::sigmoid(z as f64)).collect();
        ck.row("sigmoid scores (engine)", "[8192,28]", err(&sc, &want), 1e-6, "");
        let bias = self.qb.bias.to_f32_vec(gpu)?;
        let want = rq::qb_bias(&sc, &self.b_prev_h, t, EXPERTS, TOP_K, -1.0, 1.0, QB_BINS, false)?;
        let bin = 2.0 / QB_BINS as f64;
        let worst = bias.iter().zip(&want).map(|(a, b)| (*a as f64 - b).abs()).fold(0.0, f64::max) / bin;
        ck.row("hist_quantile.qb bias", "T8192 E28 k4 B1024", worst, 1.0, "max |err| in bins");
        let bad = check::routing(s, &a.r, &bias)?;
        ck.row("route: top-4, group, permute (engine)", "32768 rows", bad as f64, 0.0, "mismatches");
        let offs = a.r.offs.fetch_i32(s)?;
        let loads: Vec<i32> = offs.iter().scan(0, |p, &o| Some(o - std::mem::replace(p, o))).collect();
        ck.rep.note(format!(
            "prefill routing: {} rows, rows per expert {}..{} (mean {})",
            t * TOP_K,
            loads.iter().min().unwrap(),
            loads.iter().max().unwrap(),
            t * TOP_K / EXPERTS
        ));
        // The first and last row of every expert with rows, and the gathered rows they read.
        let erows: Vec<usize> = (0..EXPERTS)
            .flat_map(|e| {
                let (r0, r1) = (if e == 0 { 0 } else { offs[e - 1] as usize }, offs[e] as usize);
                if r1 > r0 { vec![r0, r1 - 1] } else { vec![] }
            })
            .collect();
        let tok = a.r.tok_of.fetch_i32(s)?;
        let xp = check::rows_of(s, &a.r.xp, &erows)?;
        let xt = check::rows_of(s, &a.xl, &erows.iter().map(|&r| tok[r] as usize).collect::<Vec<_>>())?;
        let gathered = xp.iter().zip(&xt).all(|(a, b)| a.to_bits() == b.to_bits());
        ck.row("gather routed rows (engine)", "", f64::from(u8::from(!gathered)), 0.0, "");
        check::experts(
            &mut ck,
            "GEMM1 (MXFP4, SiTU-GLU)",
            &a.r.xp,
            &ew.up_glu,
            &a.r,
            false,
            Epilogue::SituGlu,
            &a.h1,
            &erows,
        )?;
        check::experts(&mut ck, "GEMM2 (MXFP4, x p)", &a.h1, &ew.down_p, &a.r, true, Epilogue::None, &a.y2, &erows)?;
        check::combine(&mut ck, &a.y2, &a.r, &a.yl, rows)?;
        ck.linear("MoE latent up", &a.yl, &ew.up, &a.y, rows)?;
        ck.add(x, &a.y, &self.xs[KDA_LAYERS + 2], rows)
    }
}

/// Run the prefill: once (poisoned outputs), checked; then again with each launch timed alone, and once more
/// as a whole.
pub fn run(
    k: &mut Launchers,
    s: &Arc<CudaStream>,
    gpu: &Gpu,
    w: &Weights,
    p: &mut Prefill,
    cache: &mut Cache,
    rep: &mut Report,
) -> Res<()> {
    p.enqueue(k, s, w, cache, &mut |_, f| f())?;
    s.synchronize()?;
    p.check(s, gpu, w, cache, rep)?;
    let mut times: Vec<(String, f64)> = vec![];
    p.enqueue(k, s, w, cache, &mut |name, f| {
        let us = stream_us(s, f)?;
        times.push((name.to_string(), us));
        Ok(())
    })?;
    let whole = stream_us(s, || p.enqueue(k, s, w, cache, &mut |_, f| f()))?;
    println!("\nprefill launches ({} in all), GPU time each:", times.len());
    for (name, us) in &times {
        println!("  {us:>10.1} us  {name}");
    }
    let sum: f64 = times.iter().map(|t| t.1).sum();
    rep.note(format!(
        "prefill of {PREFILL_TOKENS} tokens in {} sequences (3 KDA + 1 MLA + 1 LatentMoE, {} launches): {:.2} ms \
         (sum of the launches timed alone {:.2} ms)",
        PREFILL_LENS.len(),
        times.len(),
        whole / 1e3,
        sum / 1e3
    ));
    Ok(())
}
