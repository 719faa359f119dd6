//! One attention block of K3's 3:1 layout: three KDA layers and one gated MLA layer on a residual stream, a
//! prefill of `TOKENS` tokens, then `DECODE_STEPS` decode steps of one token each.
//!
//! - KDA layer: q, k, v, gate and beta projections (dense GEMM), the chunked KDA plan (in-kernel L2 norm of
//!   q and k, safe gate `-5 sigmoid(x)`, beta sigmoid) whose final state seeds decode, the output projection,
//!   the residual add (host). Decode: the same projections and the recurrent `kda.decode` step on that state.
//! - Gated MLA layer: q (128 nope + 64 rope per head), the 512-wide latent c and the shared 64-wide rope key
//!   from the hidden state; prefill in MHA mode (k = [c W_UK^T | k_rope], v = c W_UV^T, causal, sigmoid gate
//!   z); the latent cache rows [c | k_rope] go into a paged cache. Decode in absorbed mode: q_latent =
//!   q_nope W_UK per head (a grouped GEMM, one group per head), split-KV attention over the paged cache with the
//!   LSE combine, then the gated W_UV projection `sigmoid(z) * (o_latent W_UV^T)`.
//!
//! The block runs twice through the same code: on the GPU (every op checked against `k3k-reference` on the
//! inputs it got, and timed) and on the CPU with the reference ops only (the reference composition); the
//! hidden states after the prefill and after every decode step are then compared.

use crate::config::*;
use crate::host::*;
use crate::kernels;
use k3k_build::reference::gemm::{self as rg, Epilogue};
use k3k_build::reference::kda::{KdaInputs, gate_safe, kda_recurrent};
use k3k_build::reference::mla;
use k3k_build::rt::{Bf16, F32, Gpu, I32, Tensor};

/// The safe-gate lower bound the KDA kernels were built with.
const LB: f32 = -5.0;

/// A bf16 tensor: its values on the host, and on the GPU backend its device copy.
pub struct V {
    pub h: Vec<f32>,
    pub shape: Vec<usize>,
    pub d: Option<Tensor<Bf16>>,
}

impl V {
    fn reshape(self, shape: &[usize]) -> Res<V> {
        let d = match self.d {
            Some(d) => Some(d.reshape(shape)?),
            None => None,
        };
        Ok(V { h: self.h, shape: shape.to_vec(), d })
    }
    fn dev(&self) -> &Tensor<Bf16> {
        self.d.as_ref().expect("device tensor on the GPU backend")
    }
}

/// A KDA state `[1, H, K, V]` f32.
pub struct State {
    h: Vec<f32>,
    d: Option<Tensor<F32>>,
}

/// The loaded launchers.
struct Kernels {
    lin: kernels::linear::Linear,
    lin_narrow: kernels::linear_narrow::Linear,
    kda: kernels::kda_prefill::Plan,
    step: kernels::kda_decode::Step,
    mla: kernels::mla_prefill::Attend,
    dec: kernels::mla_decode::Attend,
    comb: kernels::mla_decode::Combine,
    gate: kernels::mla_gate::Project,
    absorb: kernels::mla_absorb::PerHead,
}

/// The backend: a GPU (launch, time, check) or the CPU reference.
pub struct Ctx<'g> {
    gpu: Option<(&'g Gpu, Kernels)>,
    pub rep: Report,
    stage: &'static str,
}

fn scale_kda() -> f32 {
    (1.0 / (HEAD_DIM as f64).sqrt()) as f32
}

fn tau() -> f32 {
    (MLA_DQK as f64).powf(-0.5) as f32
}

impl<'g> Ctx<'g> {
    /// The GPU backend.
    pub fn gpu(gpu: &'g Gpu) -> Res<Self> {
        let k = Kernels {
            lin: kernels::linear::Linear::load(gpu)?,
            lin_narrow: kernels::linear_narrow::Linear::load(gpu)?,
            kda: kernels::kda_prefill::Plan::load(gpu)?,
            step: kernels::kda_decode::Step::load(gpu)?,
            mla: kernels::mla_prefill::Attend::load(gpu)?,
            dec: kernels::mla_decode::Attend::load(gpu)?,
            comb: kernels::mla_decode::Combine::load(gpu)?,
            gate: kernels::mla_gate::Project::load(gpu)?,
            absorb: kernels::mla_absorb::PerHead::load(gpu)?,
        };
        Ok(Ctx { gpu: Some((gpu, k)), rep: Report::default(), stage: "attn/prefill" })
    }

    /// The CPU reference backend.
    pub fn cpu() -> Self {
        Ctx { gpu: None, rep: Report::default(), stage: "attn/prefill" }
    }

    /// A tensor of bf16 values (uploaded on the GPU backend).
    pub fn v(&self, shape: &[usize], h: Vec<f32>) -> Res<V> {
        let d = match &self.gpu {
            Some((gpu, _)) => Some(Tensor::from_f32(gpu, shape, &h)?),
            None => None,
        };
        Ok(V { h, shape: shape.to_vec(), d })
    }

    /// On the GPU: fetch the output, record time and error. On the CPU: the reference, rounded to bf16.
    fn finish(&mut self, op: &str, us: f64, got: Option<Tensor<Bf16>>, want: &[f64], shape: &[usize]) -> Res<V> {
        match got {
            Some(t) => {
                let h = t.to_f32_vec(self.gpu.as_ref().unwrap().0)?;
                self.rep.add(self.stage, op, &shape_text(shape), us, err(&h, want), 5e-3, "");
                Ok(V { h, shape: shape.to_vec(), d: Some(t) })
            }
            None => Ok(V { h: bf16(want), shape: shape.to_vec(), d: None }),
        }
    }

    /// `y = x w^T`: x `[M, K]`, w `[N, K]`.
    pub fn linear(&mut self, x: &V, w: &V) -> Res<V> {
        let (m, k, n) = (x.shape[0], x.shape[1], w.shape[0]);
        let want = rg::matmul_nt(&x.h, m, k, &w.h, n)?;
        let (us, got) = match &self.gpu {
            Some((gpu, kk)) => {
                let mut y = out::<Bf16>(gpu, &[m, n])?;
                // Rows narrower than 16 bytes (beta) go through the register-store GEMM.
                let launch = |y: &mut Tensor<Bf16>| {
                    if n % 8 == 0 {
                        kk.lin.launch(gpu, x.dev(), w.dev(), y)
                    } else {
                        kk.lin_narrow.launch(gpu, x.dev(), w.dev(), y)
                    }
                };
                launch(&mut y)?;
                (time_us(gpu, || launch(&mut y))?, Some(y))
            }
            None => (f64::NAN, None),
        };
        self.finish("linear (dense GEMM)", us, got, &want, &[m, n])
    }

    /// `x + y` rounded to bf16 (the residual add, on the host).
    pub fn residual(&self, x: &V, y: &V) -> Res<V> {
        let s: Vec<f32> = x.h.iter().zip(&y.h).map(|(a, b)| a + b).collect();
        self.v(&x.shape, s.into_iter().map(k3k_build::reference::mx::bf16_round).collect())
    }

    fn kda_ref(&self, q: &V, k: &V, v: &V, graw: &V, beta: &V, h0: Option<&[f32]>) -> Res<(Vec<f64>, Vec<f64>)> {
        let t = q.h.len() / (HEADS * HEAD_DIM);
        let g: Vec<f32> = graw.h.iter().map(|&x| gate_safe(x as f64, 0.0, LB as f64) as f32).collect();
        let b: Vec<f32> = beta.h.iter().map(|&x| rg::sigmoid(x as f64) as f32).collect();
        let mut inp =
            KdaInputs::new(1, t, HEADS, HEADS, HEAD_DIM, HEAD_DIM, q.h.clone(), k.h.clone(), v.h.clone(), g, b);
        inp.h0 = h0.map(|h| h.to_vec());
        inp.use_qk_l2norm = true;
        inp.scale = Some(scale_kda() as f64);
        let r = kda_recurrent(&inp)?;
        Ok((r.o, r.final_state))
    }

    /// The chunked KDA prefill: o `[T, H, V]` and the final state.
    pub fn kda_prefill(&mut self, q: &V, k: &V, v: &V, graw: &V, beta: &V) -> Res<(V, State)> {
        let (want_o, want_s) = self.kda_ref(q, k, v, graw, beta, None)?;
        let shape = [TOKENS, HEADS, HEAD_DIM];
        match &self.gpu {
            Some((gpu, kk)) => {
                // The gate input goes to the kernel as f32 (converted on the host).
                let g = Tensor::<F32>::from_f32(gpu, &graw.shape, &graw.h)?;
                let inputs =
                    kernels::kda_prefill::Inputs { q: q.dev(), k: k.dev(), v: v.dev(), g: &g, beta: beta.dev() };
                let mut o = kk.kda.outputs(gpu)?;
                kk.kda.run(gpu, &inputs, &mut o)?;
                let us = time_us(gpu, || kk.kda.run(gpu, &inputs, &mut o))?;
                let sh = o.ht.to_f32_vec(gpu)?;
                let e_state = err(&sh, &want_s);
                let out = self.finish("kda (chunked prefill)", us, Some(o.o), &want_o, &shape)?;
                self.rep.add(self.stage, "kda state", "[1,4,128,128]", f64::NAN, e_state, 5e-3, "");
                Ok((out, State { h: sh, d: Some(o.ht) }))
            }
            None => {
                let out = self.finish("kda", f64::NAN, None, &want_o, &shape)?;
                Ok((out, State { h: want_s.iter().map(|&x| x as f32).collect(), d: None }))
            }
        }
    }

    /// One recurrent KDA step (one token) on `st`, which it advances.
    pub fn kda_step(&mut self, q: &V, k: &V, v: &V, graw: &V, beta: &V, st: &mut State) -> Res<V> {
        let (want_o, want_s) = self.kda_ref(q, k, v, graw, beta, Some(&st.h))?;
        let shape = [1, 1, HEADS, HEAD_DIM];
        match &self.gpu {
            Some((gpu, kk)) => {
                let r = |x: &V, s: &[usize]| -> Res<Tensor<Bf16>> { Ok(Tensor::from_f32(gpu, s, &x.h)?) };
                let (q, k, v) = (r(q, &shape)?, r(k, &shape)?, r(v, &shape)?);
                let beta = r(beta, &[1, 1, HEADS])?;
                let g = Tensor::<F32>::from_f32(gpu, &shape, &graw.h)?;
                let h0 = st.d.take().expect("state on the GPU");
                let mut ht = out::<F32>(gpu, h0.shape())?;
                let mut o = out::<Bf16>(gpu, &shape)?;
                let (sc, lb) = (scale_kda(), LB);
                kk.step.launch(gpu, &q, &k, &v, &g, &beta, &h0, &mut ht, &mut o, sc, lb)?;
                // Out of place (h0 -> ht), so repeating it for timing leaves the result unchanged.
                let us = time_us(gpu, || kk.step.launch(gpu, &q, &k, &v, &g, &beta, &h0, &mut ht, &mut o, sc, lb))?;
                st.h = ht.to_f32_vec(gpu)?;
                self.rep.add(self.stage, "kda state", "[1,4,128,128]", f64::NAN, err(&st.h, &want_s), 5e-3, "");
                st.d = Some(ht);
                self.finish("kda.decode", us, Some(o), &want_o, &shape)?.reshape(&[1, HEADS * HEAD_DIM])
            }
            None => {
                st.h = want_s.iter().map(|&x| x as f32).collect();
                self.finish("kda.decode", f64::NAN, None, &want_o, &shape)?.reshape(&[1, HEADS * HEAD_DIM])
            }
        }
    }

    /// Gated MLA prefill (MHA mode, causal): o `[T, H, 128]`.
    pub fn mla_prefill(&mut self, q: &V, k: &V, v: &V, z: &V) -> Res<V> {
        let t = q.shape[0];
        let (want, _) =
            mla::mla_prefill(&q.h, &k.h, &v.h, Some(&z.h), t, t, HEADS, MLA_DQK, MLA_DV, tau() as f64, true)?;
        let (us, got) = match &self.gpu {
            Some((gpu, kk)) => {
                let mut o = out::<Bf16>(gpu, &[t, HEADS, MLA_DV])?;
                let mut lse = out::<F32>(gpu, &[HEADS, t])?;
                let (q, k, v, z) = (q.dev(), k.dev(), v.dev(), z.dev());
                kk.mla.launch(gpu, q, k, v, z, &mut o, &mut lse, tau())?;
                (time_us(gpu, || kk.mla.launch(gpu, q, k, v, z, &mut o, &mut lse, tau()))?, Some(o))
            }
            None => (f64::NAN, None),
        };
        self.finish("gated_mla.prefill", us, got, &want, &[t, HEADS, MLA_DV])
    }

    /// Per-head `q_latent[h] = q_nope[h] W_UK[h]` as a grouped GEMM (group h = row h).
    pub fn absorb(&mut self, q_nope: &V, w_t: &V) -> Res<V> {
        let offs: Vec<i32> = (1..=HEADS as i32).collect();
        let want =
            rg::grouped_gemm(&q_nope.h, HEADS, MLA_NOPE, &w_t.h, HEADS, MLA_LATENT, &offs, None, Epilogue::None)?;
        let (us, got) = match &self.gpu {
            Some((gpu, kk)) => {
                let o = Tensor::<I32>::from_i64(gpu, &[HEADS], &offs.iter().map(|&x| x as i64).collect::<Vec<_>>())?;
                let mut y = out::<Bf16>(gpu, &[HEADS, MLA_LATENT])?;
                kk.absorb.launch(gpu, q_nope.dev(), w_t.dev(), &o, &mut y)?;
                (time_us(gpu, || kk.absorb.launch(gpu, q_nope.dev(), w_t.dev(), &o, &mut y))?, Some(y))
            }
            None => (f64::NAN, None),
        };
        self.finish("latent_moe_gemm (absorb)", us, got, &want, &[HEADS, MLA_LATENT])
    }

    /// Absorbed decode over the paged latent cache: `o_latent [1, 1, H, 512]`.
    pub fn mla_decode(&mut self, q: &V, cache: &V, table: &[i32], len: usize) -> Res<V> {
        let lens = [len as i32];
        let d = MLA_LATENT + MLA_ROPE;
        let (want, _) =
            mla::mla_decode_paged(&q.h, &cache.h, table, &lens, 1, 1, HEADS, d, MLA_LATENT, PAGE, tau() as f64)?;
        let shape = [1, 1, HEADS, MLA_LATENT];
        let (us, got) = match &self.gpu {
            Some((gpu, kk)) => {
                const NSPLIT: usize = 2;
                let bt = Tensor::<I32>::from_i64(
                    gpu,
                    &[1, table.len()],
                    &table.iter().map(|&x| x as i64).collect::<Vec<_>>(),
                )?;
                let sl = Tensor::<I32>::from_i64(gpu, &[1], &[len as i64])?;
                let mut op = out::<F32>(gpu, &[1, NSPLIT, 1, HEADS, MLA_LATENT])?;
                let mut lp = out::<F32>(gpu, &[1, NSPLIT, 1, HEADS])?;
                let mut o = out::<Bf16>(gpu, &shape)?;
                let mut lse = out::<F32>(gpu, &[1, HEADS, 1])?;
                let mut both = || -> Result<(), k3k_build::rt::Error> {
                    kk.dec.launch(gpu, q.dev(), cache.dev(), &bt, &sl, &mut op, &mut lp, tau())?;
                    kk.comb.launch(gpu, &op, &lp, &mut o, &mut lse)
                };
                both()?;
                (time_us(gpu, &mut both)?, Some(o))
            }
            None => (f64::NAN, None),
        };
        self.finish("gated_mla.decode", us, got, &want, &shape)
    }

    /// `y = sigmoid(z) * (o_latent W_UV^T)` per head: `[1, H, 128]`.
    pub fn mla_gate(&mut self, ol: &V, w_uv: &V, z: &V) -> Res<V> {
        let want = mla::gate_wuv(&ol.h, &w_uv.h, Some(&z.h), 1, HEADS, MLA_LATENT, MLA_DV)?;
        let (us, got) = match &self.gpu {
            Some((gpu, kk)) => {
                let mut y = out::<Bf16>(gpu, &[1, HEADS, MLA_DV])?;
                kk.gate.launch(gpu, ol.dev(), w_uv.dev(), z.dev(), &mut y)?;
                (time_us(gpu, || kk.gate.launch(gpu, ol.dev(), w_uv.dev(), z.dev(), &mut y))?, Some(y))
            }
            None => (f64::NAN, None),
        };
        self.finish("gated_mla.gate", us, got, &want, &[1, HEADS, MLA_DV])
    }
}

/// The block's weights.
pub struct Weights {
    kda: Vec<[V; 6]>,
    /// q, c, k_rope, W_UK (flat), W_UV (flat), z, o, W_UK^T per head, W_UV per head.
    mla: [V; 9],
}

/// Weights and inputs from one seed: the same values on either backend.
pub fn weights(ctx: &Ctx, seed: u64) -> Res<(Weights, V, Vec<Vec<f32>>)> {
    let mut rng = Rng::new(seed);
    let d = HIDDEN;
    let hd = HEADS * HEAD_DIM;
    let std = |k: usize| (k as f64).powf(-0.5);
    let mut w = |ctx: &Ctx, n: usize, k: usize| ctx.v(&[n, k], rng.bf16_normal(n * k, std(k)));
    let mut kda = vec![];
    for _ in 0..3 {
        kda.push([w(ctx, hd, d)?, w(ctx, hd, d)?, w(ctx, hd, d)?, w(ctx, hd, d)?, w(ctx, HEADS, d)?, w(ctx, d, hd)?]);
    }
    let (q, c, kr) = (w(ctx, HEADS * MLA_DQK, d)?, w(ctx, MLA_LATENT, d)?, w(ctx, MLA_ROPE, d)?);
    let (uk, uv) = (w(ctx, HEADS * MLA_NOPE, MLA_LATENT)?, w(ctx, HEADS * MLA_DV, MLA_LATENT)?);
    let (z, o) = (w(ctx, HEADS * MLA_DV, d)?, w(ctx, d, HEADS * MLA_DV)?);
    // W_UK[h] transposed ([512, 128] per head) for the absorbed query; W_UV as [H, 128, 512] for the gate.
    let mut ukt = vec![0f32; uk.h.len()];
    for h in 0..HEADS {
        for j in 0..MLA_NOPE {
            for c in 0..MLA_LATENT {
                ukt[(h * MLA_LATENT + c) * MLA_NOPE + j] = uk.h[(h * MLA_NOPE + j) * MLA_LATENT + c];
            }
        }
    }
    let ukt = ctx.v(&[HEADS, MLA_LATENT, MLA_NOPE], ukt)?;
    let uv3 = ctx.v(&[HEADS, MLA_DV, MLA_LATENT], uv.h.clone())?;
    let mut rng = Rng::new(seed ^ 0x5eed);
    let h0 = ctx.v(&[TOKENS, d], rng.bf16_normal(TOKENS * d, 1.0))?;
    let tokens = (0..DECODE_STEPS).map(|_| rng.bf16_normal(d, 1.0)).collect();
    Ok((Weights { kda, mla: [q, c, kr, uk, uv, z, o, ukt, uv3] }, h0, tokens))
}

/// The paged latent cache: `pages` pages in a pool with one spare, placed in reverse order.
struct Cache {
    rows: Vec<f32>,
    table: Vec<i32>,
}

impl Cache {
    fn new(pages: usize) -> Self {
        let d = MLA_LATENT + MLA_ROPE;
        Cache { rows: vec![f32::NAN; (pages + 1) * PAGE * d], table: (0..pages as i32).rev().map(|p| p + 1).collect() }
    }
    fn put(&mut self, pos: usize, c: &[f32], kr: &[f32]) {
        let d = MLA_LATENT + MLA_ROPE;
        let row = self.table[pos / PAGE] as usize * PAGE + pos % PAGE;
        self.rows[row * d..row * d + MLA_LATENT].copy_from_slice(c);
        self.rows[row * d + MLA_LATENT..(row + 1) * d].copy_from_slice(kr);
    }
}

/// Per-head concatenation `[a_h | b]` (b shared by every head) of `a: [T, H*da]` and `b: [T, db]`.
fn per_head_concat(a: &[f32], da: usize, b: &[f32], db: usize, t: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(t * HEADS * (da + db));
    for ti in 0..t {
        for h in 0..HEADS {
            out.extend_from_slice(&a[(ti * HEADS + h) * da..(ti * HEADS + h + 1) * da]);
            out.extend_from_slice(&b[ti * db..(ti + 1) * db]);
        }
    }
    out
}

/// Run the block on `ctx`: the hidden state after the prefill, then after every decode step.
pub fn block(ctx: &mut Ctx, w: &Weights, h: V, tokens: &[Vec<f32>]) -> Res<Vec<Vec<f32>>> {
    let (t, hd) = (TOKENS, HEADS * HEAD_DIM);
    let mut outs = vec![];
    let mut states = vec![];
    let mut cache = Cache::new((TOKENS + DECODE_STEPS).div_ceil(PAGE));
    ctx.stage = "attn/prefill";
    let mut h = h;
    for lw in &w.kda {
        let qkv = |ctx: &mut Ctx, i: usize| -> Res<V> { ctx.linear(&h, &lw[i])?.reshape(&[t, HEADS, HEAD_DIM]) };
        let (q, k, v, g) = (qkv(ctx, 0)?, qkv(ctx, 1)?, qkv(ctx, 2)?, qkv(ctx, 3)?);
        let beta = ctx.linear(&h, &lw[4])?;
        let (o, st) = ctx.kda_prefill(&q, &k, &v, &g, &beta)?;
        let y = ctx.linear(&o.reshape(&[t, hd])?, &lw[5])?;
        h = ctx.residual(&h, &y)?;
        states.push(st);
    }
    let [wq, wc, wkr, wuk, wuv, wz, wo, wukt, wuv3] = &w.mla;
    let q = ctx.linear(&h, wq)?.reshape(&[t, HEADS, MLA_DQK])?;
    let (c, kr) = (ctx.linear(&h, wc)?, ctx.linear(&h, wkr)?);
    let kn = ctx.linear(&c, wuk)?;
    let v = ctx.linear(&c, wuv)?.reshape(&[t, HEADS, MLA_DV])?;
    let k = ctx.v(&[t, HEADS, MLA_DQK], per_head_concat(&kn.h, MLA_NOPE, &kr.h, MLA_ROPE, t))?;
    let z = ctx.linear(&h, wz)?.reshape(&[t, HEADS, MLA_DV])?;
    let o = ctx.mla_prefill(&q, &k, &v, &z)?;
    let y = ctx.linear(&o.reshape(&[t, HEADS * MLA_DV])?, wo)?;
    h = ctx.residual(&h, &y)?;
    for ti in 0..t {
        cache.put(ti, &c.h[ti * MLA_LATENT..(ti + 1) * MLA_LATENT], &kr.h[ti * MLA_ROPE..(ti + 1) * MLA_ROPE]);
    }
    outs.push(h.h.clone());

    ctx.stage = "attn/decode";
    for (step, x) in tokens.iter().enumerate() {
        let pos = t + step;
        let mut h = ctx.v(&[1, HIDDEN], x.clone())?;
        for (lw, st) in w.kda.iter().zip(states.iter_mut()) {
            let (q, k, v, g) =
                (ctx.linear(&h, &lw[0])?, ctx.linear(&h, &lw[1])?, ctx.linear(&h, &lw[2])?, ctx.linear(&h, &lw[3])?);
            let beta = ctx.linear(&h, &lw[4])?;
            let o = ctx.kda_step(&q, &k, &v, &g, &beta, st)?;
            let y = ctx.linear(&o, &lw[5])?;
            h = ctx.residual(&h, &y)?;
        }
        let q = ctx.linear(&h, wq)?;
        let (c, kr) = (ctx.linear(&h, wc)?, ctx.linear(&h, wkr)?);
        cache.put(pos, &c.h, &kr.h);
        let kv = ctx.v(
            &[cache.rows.len() / (PAGE * (MLA_LATENT + MLA_ROPE)), PAGE, MLA_LATENT + MLA_ROPE],
            cache.rows.clone(),
        )?;
        let q_nope: Vec<f32> = (0..HEADS).flat_map(|hh| q.h[hh * MLA_DQK..hh * MLA_DQK + MLA_NOPE].to_vec()).collect();
        let q_rope: Vec<f32> =
            (0..HEADS).flat_map(|hh| q.h[hh * MLA_DQK + MLA_NOPE..(hh + 1) * MLA_DQK].to_vec()).collect();
        let ql = ctx.absorb(&ctx.v(&[HEADS, MLA_NOPE], q_nope)?, wukt)?;
        let mut qd = Vec::with_capacity(HEADS * (MLA_LATENT + MLA_ROPE));
        for hh in 0..HEADS {
            qd.extend_from_slice(&ql.h[hh * MLA_LATENT..(hh + 1) * MLA_LATENT]);
            qd.extend_from_slice(&q_rope[hh * MLA_ROPE..(hh + 1) * MLA_ROPE]);
        }
        let qd = ctx.v(&[1, 1, HEADS, MLA_LATENT + MLA_ROPE], qd)?;
        let ol = ctx.mla_decode(&qd, &kv, &cache.table, pos + 1)?.reshape(&[1, HEADS, MLA_LATENT])?;
        let z = ctx.linear(&h, wz)?.reshape(&[1, HEADS, MLA_DV])?;
        let y = ctx.mla_gate(&ol, wuv3, &z)?;
        let y = ctx.linear(&y.reshape(&[1, HEADS * MLA_DV])?, wo)?;
        h = ctx.residual(&h, &y)?;
        outs.push(h.h.clone());
    }
    Ok(outs)
}

/// Run the block on the GPU and on the CPU, and compare.
pub fn run(gpu: &Gpu, rep: &mut Report, seed: u64) -> Res<()> {
    println!(
        "\nattention block: 3 KDA + 1 gated MLA, hidden {HIDDEN}, {HEADS} heads, prefill {TOKENS} tokens, {DECODE_STEPS} decode steps"
    );
    let mut g = Ctx::gpu(gpu)?;
    let (w, h0, tokens) = weights(&g, seed)?;
    let got = block(&mut g, &w, h0, &tokens)?;
    let mut c = Ctx::cpu();
    let (w, h0, tokens) = weights(&c, seed)?;
    let want = block(&mut c, &w, h0, &tokens)?;
    rep.merge(g.rep);
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        let b: Vec<f64> = b.iter().map(|&x| x as f64).collect();
        let op = if i == 0 { "hidden after prefill".to_string() } else { format!("hidden after decode {i}") };
        let shape = if i == 0 { format!("[{TOKENS},{HIDDEN}]") } else { format!("[1,{HIDDEN}]") };
        rep.add("attn/block", &op, &shape, f64::NAN, err(a, &b), 2e-2, "vs CPU composition");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU reference composition runs end to end: every shape the block passes between ops fits, and the
    /// outputs are finite.
    #[test]
    fn reference_composition_runs() {
        let mut c = Ctx::cpu();
        let (w, h0, tokens) = weights(&c, 7).unwrap();
        let outs = block(&mut c, &w, h0, &tokens).unwrap();
        assert_eq!(outs.len(), 1 + DECODE_STEPS);
        assert_eq!(outs[0].len(), TOKENS * HIDDEN);
        for o in &outs[1..] {
            assert_eq!(o.len(), HIDDEN);
        }
        assert!(outs.iter().flatten().all(|v| v.is_finite()));
    }
}
