//! Decode steps after the prefill, as a serving engine runs them: every sequence of the batch gets one token
//! per step; the KDA states and the paged MLA cache grow on the device; the whole step (k3k's launches and the
//! engine's own kernels) is captured once as a CUDA graph and replayed for every step. The only host work per
//! step is copying the new tokens' hidden states into the step's fixed input buffer.
//!
//! Checks: at the first and last step, every op against the f64 reference from its GPU inputs (all rows: the
//! batch is small); every step's output and the final states of the graph replays equal the eager steps' bits.
//! Times: the eager step, the graph step, the sum of the step's kernels' GPU times, the host cost per launch.

use crate::check::{self, Checker, KdaPair, kda_scale, mla_scale};
use crate::config::*;
use crate::dev::{Buf, layer_io};
use crate::engine::{Cache, Routing};
use crate::host::*;
use crate::model::{Each, KdaBufs, Launchers, Prefill};
use crate::weights::Weights;
use k3k_build::reference::gemm::{self as rg, Epilogue};
use k3k_build::reference::mla as rmla;
use k3k_build::rt::cudarc::driver::CudaStream;
use k3k_build::rt::{Bf16, DType, F32, I32, U8, U32};
use std::sync::Arc;

/// Splits of the KV range in the absorbed decode (the workspace `o_part` is sized for them): 6 sequences x 16
/// splits = 96 blocks of the 132 SMs of an H100 SXM or H200.
const NSPLIT: usize = 16;
const B: usize = DECODE_BATCH;

struct MlaStep {
    qa: Buf,
    q: Buf,
    c: Buf,
    kr: Buf,
    qn: Buf,
    ql: Buf,
    qd: Buf,
    o_part: Buf,
    lse_part: Buf,
    ol: Buf,
    lse: Buf,
    z: Buf,
    yg: Buf,
    y: Buf,
    offs_h: Buf,
}

struct MoeStep {
    xl: Buf,
    logits: Buf,
    r: Routing,
    h1: Buf,
    y2: Buf,
    yl: Buf,
    y: Buf,
}

/// The step's buffers: fixed addresses, so that one captured graph serves every step.
pub struct Step {
    /// The step's input (the new tokens' hidden states), then the hidden state after each layer.
    xs: Vec<Buf>,
    kda: Vec<KdaBufs>,
    mla: MlaStep,
    moe: MoeStep,
}

fn bf(s: &Arc<CudaStream>, shape: &[usize]) -> Res<Buf> {
    Buf::alloc(s, DType::Bf16, shape)
}

fn f32b(s: &Arc<CudaStream>, shape: &[usize]) -> Res<Buf> {
    Buf::alloc(s, DType::F32, shape)
}

impl Step {
    pub fn new(s: &Arc<CudaStream>) -> Res<Step> {
        let kda = (0..KDA_LAYERS).map(|_| KdaBufs::new(s, B, B)).collect::<Res<_>>()?;
        let offs_h: Vec<i32> = (1..=HEADS).map(|h| (h * B) as i32).collect();
        let mla = MlaStep {
            qa: bf(s, &[B, MLA_Q_RANK])?,
            q: bf(s, &[B, HEADS * MLA_DQK])?,
            c: bf(s, &[B, MLA_LATENT])?,
            kr: bf(s, &[B, MLA_ROPE])?,
            qn: bf(s, &[HEADS * B, MLA_NOPE])?,
            ql: bf(s, &[HEADS * B, MLA_LATENT])?,
            qd: bf(s, &[B, 1, HEADS, MLA_ROW])?,
            o_part: f32b(s, &[B, NSPLIT, 1, HEADS, MLA_LATENT])?,
            lse_part: f32b(s, &[B, NSPLIT, 1, HEADS])?,
            ol: bf(s, &[B, 1, HEADS, MLA_LATENT])?,
            lse: f32b(s, &[B, HEADS, 1])?,
            z: bf(s, &[B, HEADS * MLA_DV])?,
            yg: bf(s, &[B, HEADS * MLA_DV])?,
            y: bf(s, &[B, HIDDEN])?,
            offs_h: Buf::upload_i32(s, &[HEADS], &offs_h)?,
        };
        let moe = MoeStep {
            xl: bf(s, &[B, LATENT])?,
            logits: bf(s, &[B, EXPERTS])?,
            r: Routing::new(s, B)?,
            h1: bf(s, &[B * TOP_K, INTER])?,
            y2: bf(s, &[B * TOP_K, LATENT])?,
            yl: bf(s, &[B, LATENT])?,
            y: bf(s, &[B, HIDDEN])?,
        };
        let xs = (0..KDA_LAYERS + 3).map(|_| bf(s, &[B, HIDDEN])).collect::<Res<_>>()?;
        Ok(Step { xs, kda, mla, moe })
    }

    /// The step's output: the hidden state of every sequence's new token after the block.
    fn out(&self) -> &Buf {
        &self.xs[KDA_LAYERS + 2]
    }

    /// The KDA states and the cache lengths as the prefill left them.
    fn reset(&mut self, s: &Arc<CudaStream>, p: &Prefill, cache: &mut Cache) -> Res<()> {
        for (st, ht) in self.kda.iter_mut().zip(p.states()) {
            st.state.copy_from(s, ht)?;
        }
        let lens: Vec<u8> = PREFILL_LENS.iter().flat_map(|&l| (l as i32).to_le_bytes()).collect();
        s.memcpy_htod(&lens, &mut cache.lens.d)?;
        Ok(())
    }

    /// Enqueue one step, each launch handed to `each`. `bias` is the device address of the QB bias `[E]` f32.
    pub fn enqueue(
        &mut self,
        k: &Launchers,
        s: &Arc<CudaStream>,
        w: &Weights,
        cache: &mut Cache,
        bias: u64,
        each: &mut Each<'_>,
    ) -> Res<()> {
        let qkv = [B, 1, HEADS, HEAD_DIM];
        for (l, (a, lw)) in self.kda.iter_mut().zip(&w.kda).enumerate() {
            let (x, xo) = layer_io(&mut self.xs, l);
            a.enqueue_inputs(l, k, s, x, lw, each)?;
            each(&format!("KDA{l} kda.decode step (in place)"), &mut || {
                Ok(k.kda_step.launch(
                    s,
                    &a.q.v_as::<Bf16>(s, &qkv)?,
                    &a.k.v_as::<Bf16>(s, &qkv)?,
                    &a.v.v_as::<Bf16>(s, &qkv)?,
                    &a.g.v_as::<F32>(s, &qkv)?,
                    &a.beta.v_as::<Bf16>(s, &[B, 1, HEADS])?,
                    &lw.bias.v::<F32>(s)?,
                    &mut a.state.m::<F32>(s)?,
                    &mut a.o.m_as::<Bf16>(s, &qkv)?,
                    kda_scale(),
                    KDA_LB,
                )?)
            })?;
            a.enqueue_output(l, k, s, x, lw, xo, each)?;
        }

        let (x, xo) = layer_io(&mut self.xs, KDA_LAYERS);
        let (a, mw) = (&mut self.mla, &w.mla);
        each("MLA linear q_a", &mut || k.linear(s, x, &mw.qa, &mut a.qa))?;
        each("MLA linear q_b", &mut || k.linear(s, &a.qa, &mw.qb, &mut a.q))?;
        each("MLA linear c", &mut || k.linear(s, x, &mw.c, &mut a.c))?;
        each("MLA linear k_rope", &mut || k.linear(s, x, &mw.kr, &mut a.kr))?;
        each("MLA cache append + length (engine)", &mut || k.eng.cache_append(s, &a.c, &a.kr, cache))?;
        each("MLA split q_nope by head (engine)", &mut || k.eng.split_qnope(s, &a.q, &mut a.qn))?;
        each("MLA absorb q_nope W_uk (grouped GEMM)", &mut || {
            Ok(k.absorb.launch(
                s,
                &a.qn.v::<Bf16>(s)?,
                &mw.ukt.v::<Bf16>(s)?,
                &a.offs_h.v::<I32>(s)?,
                &mut a.ql.m::<Bf16>(s)?,
            )?)
        })?;
        each("MLA assemble q (engine)", &mut || k.eng.assemble_qd(s, &a.ql, &a.q, &mut a.qd))?;
        each("MLA gated_mla.decode (paged, split KV)", &mut || {
            Ok(k.mla_dec.launch(
                s,
                &a.qd.v::<Bf16>(s)?,
                &cache.kv.v::<Bf16>(s)?,
                &cache.table.v::<I32>(s)?,
                &cache.lens.v::<I32>(s)?,
                &mut a.o_part.m::<F32>(s)?,
                &mut a.lse_part.m::<F32>(s)?,
                mla_scale(),
            )?)
        })?;
        each("MLA combine splits", &mut || {
            Ok(k.mla_comb.launch(
                s,
                &a.o_part.v::<F32>(s)?,
                &a.lse_part.v::<F32>(s)?,
                &mut a.ol.m::<Bf16>(s)?,
                &mut a.lse.m::<F32>(s)?,
            )?)
        })?;
        each("MLA linear z", &mut || k.linear(s, x, &mw.z, &mut a.z))?;
        each("MLA gate: W_uv and sigmoid gate", &mut || {
            Ok(k.mla_gate.launch(
                s,
                &a.ol.v_as::<Bf16>(s, &[B, HEADS, MLA_LATENT])?,
                &mw.uv3.v::<Bf16>(s)?,
                &a.z.v_as::<Bf16>(s, &[B, HEADS, MLA_DV])?,
                &mut a.yg.m_as::<Bf16>(s, &[B, HEADS, MLA_DV])?,
            )?)
        })?;
        each("MLA linear o", &mut || k.linear(s, &a.yg, &mw.o, &mut a.y))?;
        each("MLA residual add (engine)", &mut || k.eng.add(s, x, &a.y, xo))?;

        let (x, xo) = layer_io(&mut self.xs, KDA_LAYERS + 1);
        let (a, ew) = (&mut self.moe, &w.moe);
        each("MoE linear latent down", &mut || k.linear(s, x, &ew.down, &mut a.xl))?;
        each("MoE linear router", &mut || k.linear(s, &a.xl, &ew.router, &mut a.logits))?;
        each("MoE sigmoid (engine)", &mut || k.eng.sigmoid(s, &a.logits, &mut a.r.s))?;
        each("MoE route: top-4 (engine)", &mut || k.eng.route_topk(s, bias, &mut a.r))?;
        each("MoE route: group ends (engine)", &mut || k.eng.group_offsets(s, &mut a.r))?;
        each("MoE route: permutation (engine)", &mut || k.eng.group_place(s, &mut a.r))?;
        each("MoE route: gather rows (engine)", &mut || k.eng.gather(s, &a.xl, &mut a.r))?;
        each("MoE GEMM1 MXFP4 SiTU-GLU (gemv)", &mut || {
            let (q, sc) = (ew.up_glu.q.v::<U32>(s)?, ew.up_glu.sc.v::<U8>(s)?);
            Ok(k.up_dec.launch(s, &a.r.xp.v::<Bf16>(s)?, &q, &sc, &a.r.offs.v::<I32>(s)?, &mut a.h1.m::<Bf16>(s)?)?)
        })?;
        each("MoE GEMM2 MXFP4 x p (gemv)", &mut || {
            let (q, sc) = (ew.down_p.q.v::<U32>(s)?, ew.down_p.sc.v::<U8>(s)?);
            Ok(k.down_dec.launch(
                s,
                &a.h1.v::<Bf16>(s)?,
                &q,
                &sc,
                &a.r.offs.v::<I32>(s)?,
                &a.r.p.v::<F32>(s)?,
                &mut a.y2.m::<Bf16>(s)?,
            )?)
        })?;
        each("MoE combine (engine)", &mut || k.eng.combine(s, &a.y2, &a.r, &mut a.yl))?;
        each("MoE linear latent up", &mut || k.linear(s, &a.yl, &ew.up, &mut a.y))?;
        each("MoE residual add (engine)", &mut || k.eng.add(s, x, &a.y, xo))?;
        Ok(())
    }

    /// Check every op of the step just run eagerly, from what the device held before it.
    fn check(&self, s: &Arc<CudaStream>, w: &Weights, cache: &Cache, before: &Before<'_>, rep: &mut Report) -> Res<()> {
        let mut ck = Checker { s, rep, stage: "decode" };
        let rows: Vec<usize> = (0..B).collect();
        let cu: Vec<usize> = (0..=B).collect();
        let pairs: Vec<KdaPair> = (0..B).flat_map(|seq| (0..HEADS).map(move |head| KdaPair { seq, head })).collect();
        for (l, (a, lw)) in self.kda.iter().zip(&w.kda).enumerate() {
            let kda = ("kda.decode", &cu[..], &pairs[..], Some(&before.states[l][..]));
            a.check(&mut ck, l, &self.xs[l], lw, &self.xs[l + 1], &rows, kda)?;
        }
        self.check_mla(s, w, cache, &before.lens, rep, &rows)?;
        self.check_moe(s, w, before.bias, rep, &rows)
    }

    #[allow(clippy::too_many_arguments)]
    fn check_mla(
        &self,
        s: &Arc<CudaStream>,
        w: &Weights,
        cache: &Cache,
        lens0: &[i32],
        rep: &mut Report,
        rows: &[usize],
    ) -> Res<()> {
        let mut ck = Checker { s, rep, stage: "decode" };
        let (a, mw, x) = (&self.mla, &w.mla, &self.xs[KDA_LAYERS]);
        ck.linear("MLA q_a", x, &mw.qa, &a.qa, rows)?;
        ck.linear("MLA q_b", &a.qa, &mw.qb, &a.q, rows)?;
        ck.linear("MLA c", x, &mw.c, &a.c, rows)?;
        ck.linear("MLA k_rope", x, &mw.kr, &a.kr, rows)?;
        ck.linear("MLA z", x, &mw.z, &a.z, rows)?;
        // The cache: the new row of every sequence in place, the lengths advanced by one.
        let (kv, table, lens) = (cache.kv.fetch(s)?, cache.table.fetch_i32(s)?, cache.lens.fetch_i32(s)?);
        let maxb = cache.table.shape[1];
        let (c, kr) = (a.c.fetch(s)?, a.kr.fetch(s)?);
        let mut bad = usize::from(lens.iter().zip(lens0).any(|(a, b)| *a != b + 1));
        for b in 0..B {
            let pos = lens0[b] as usize;
            let row = table[b * maxb + pos / PAGE] as usize * PAGE + pos % PAGE;
            let want = c[b * MLA_LATENT..(b + 1) * MLA_LATENT].iter().chain(&kr[b * MLA_ROPE..(b + 1) * MLA_ROPE]);
            bad += kv[row * MLA_ROW..(row + 1) * MLA_ROW]
                .iter()
                .zip(want)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
        }
        ck.row("MLA cache append (engine)", "6 rows", bad as f64, 0.0, "values or lengths wrong");
        // The absorbed query: q_nope W_uk per head, from the q projection.
        let q = a.q.fetch(s)?;
        let mut want_ql = vec![0f64; HEADS * B * MLA_LATENT];
        for h in 0..HEADS {
            for b in 0..B {
                let qn = &q[(b * HEADS + h) * MLA_DQK..(b * HEADS + h) * MLA_DQK + MLA_NOPE];
                let out = &mut want_ql[(h * B + b) * MLA_LATENT..(h * B + b + 1) * MLA_LATENT];
                for (j, &qj) in qn.iter().enumerate() {
                    let wrow = &mw.uk.h[(h * MLA_NOPE + j) * MLA_LATENT..(h * MLA_NOPE + j + 1) * MLA_LATENT];
                    out.iter_mut().zip(wrow).for_each(|(o, &wv)| *o += qj as f64 * wv as f64);
                }
            }
        }
        let ql = a.ql.fetch(s)?;
        ck.row("MLA absorb (grouped GEMM per head)", "G12 M6 K128 N512", err(&ql, &want_ql), check::TOL, "");
        // Attention over the paged cache: the query [q_nope W_uk | q_rope] from the GPU's absorbed query.
        let mut qd = Vec::with_capacity(B * HEADS * MLA_ROW);
        for b in 0..B {
            for h in 0..HEADS {
                qd.extend_from_slice(&ql[(h * B + b) * MLA_LATENT..(h * B + b + 1) * MLA_LATENT]);
                qd.extend_from_slice(&q[(b * HEADS + h) * MLA_DQK + MLA_NOPE..(b * HEADS + h + 1) * MLA_DQK]);
            }
        }
        let (want_o, _) = rmla::mla_decode_paged(
            &qd,
            &kv,
            &table,
            &lens,
            B,
            1,
            HEADS,
            MLA_ROW,
            MLA_LATENT,
            PAGE,
            mla_scale() as f64,
        )?;
        let ol = a.ol.fetch(s)?;
        let shape = format!("B6 H12 S {}..{}", lens.iter().min().unwrap(), lens.iter().max().unwrap());
        ck.row("MLA gated_mla.decode + combine", &shape, err(&ol, &want_o), check::TOL, "");
        let z = a.z.fetch(s)?;
        let want_y = rmla::gate_wuv(&ol, &mw.uv.h, Some(&z), B, HEADS, MLA_LATENT, MLA_DV)?;
        ck.row("MLA gate (W_uv, sigmoid)", "T6 H12", err(&a.yg.fetch(s)?, &want_y), check::TOL, "");
        ck.linear("MLA o", &a.yg, &mw.o, &a.y, rows)?;
        ck.add(x, &a.y, &self.xs[KDA_LAYERS + 1], rows)
    }

    fn check_moe(&self, s: &Arc<CudaStream>, w: &Weights, bias: &[f32], rep: &mut Report, rows: &[usize]) -> Res<()> {
        let mut ck = Checker { s, rep, stage: "decode" };
        let (a, ew, x) = (&self.moe, &w.moe, &self.xs[KDA_LAYERS + 1]);
        ck.linear("MoE latent down", x, &ew.down, &a.xl, rows)?;
        ck.linear("MoE router", &a.xl, &ew.router, &a.logits, rows)?;
        let (lg, sc) = (a.logits.fetch(s)?, a.r.s.fetch(s)?);
        let want: Vec<f64> = lg.iter().map(|&z| rg::sigmoid(z as f64)).collect();
        ck.row("MoE sigmoid (engine)", "[6,28]", err(&sc, &want), 1e-6, "");
        let bad = check::routing(s, &a.r, bias)?;
        ck.row("MoE route (engine)", "24 rows", bad as f64, 0.0, "mismatches");
        let all: Vec<usize> = (0..B * TOP_K).collect();
        check::experts(
            &mut ck,
            "MoE GEMM1 (MXFP4 gemv, SiTU-GLU)",
            &a.r.xp,
            &ew.up_glu,
            &a.r,
            false,
            Epilogue::SituGlu,
            &a.h1,
            &all,
        )?;
        check::experts(
            &mut ck,
            "MoE GEMM2 (MXFP4 gemv, x p)",
            &a.h1,
            &ew.down_p,
            &a.r,
            true,
            Epilogue::None,
            &a.y2,
            &all,
        )?;
        check::combine(&mut ck, &a.y2, &a.r, &a.yl, rows)?;
        ck.linear("MoE latent up", &a.yl, &ew.up, &a.y, rows)?;
        ck.add(x, &a.y, self.out(), rows)
    }
}

/// What a checked step reads from before it ran: the KDA states, the cache lengths, and the QB bias.
struct Before<'a> {
    states: Vec<Vec<f32>>,
    lens: Vec<i32>,
    bias: &'a [f32],
}

/// Run the decode steps after the prefill `p`: eagerly (checked at the first and last step), then as graph
/// replays of one captured step; compare, time, report.
pub fn run(
    k: &Launchers,
    s: &Arc<CudaStream>,
    w: &Weights,
    p: &Prefill,
    cache: &mut Cache,
    rep: &mut Report,
    seed: u64,
) -> Res<()> {
    println!("\ndecode: {DECODE_STEPS} steps of {B} sequences (one token each), eager then as CUDA graph replays");
    let mut st = Step::new(s)?;
    let bias_ptr = k3k_build::rt::In::arg(&p.qb.bias).ptr();
    let bias = {
        let gpu = k3k_build::rt::Gpu::from_stream(s.clone())?;
        p.qb.bias.to_f32_vec(&gpu)?
    };
    // The new tokens' hidden states (what the embedding of the sampled tokens would give).
    let tokens: Vec<Vec<f32>> =
        (0..DECODE_STEPS).map(|i| crate::weights::normal(seed ^ ((i as u64 + 1) * 0x51ed), B * HIDDEN, 1.0)).collect();
    let lens0: Vec<i32> = PREFILL_LENS.iter().map(|&l| l as i32).collect();

    // Eager: every launch enqueued by the host, step after step; checked at the first and the last step.
    st.reset(s, p, cache)?;
    let (mut eager, mut eager_us, mut host_ns, mut launches) = (vec![], 0.0, f64::INFINITY, 0usize);
    for (i, x) in tokens.iter().enumerate() {
        s.memcpy_htod(&k3k_build::rt::HostTensor::from_f32(DType::Bf16, &[B, HIDDEN], x).data, &mut st.xs[0].d)?;
        let checked = i == 0 || i == DECODE_STEPS - 1;
        let before = Before {
            states: if checked { st.kda.iter().map(|a| a.state.fetch(s)).collect::<Res<_>>()? } else { vec![] },
            lens: cache.lens.fetch_i32(s)?,
            bias: &bias,
        };
        let mut host = 0.0;
        let mut n = 0;
        eager_us += stream_us(s, || {
            let t0 = std::time::Instant::now();
            st.enqueue(k, s, w, cache, bias_ptr, &mut |_, f| {
                n += 1;
                f()
            })?;
            host = t0.elapsed().as_nanos() as f64;
            Ok(())
        })?;
        launches = n;
        host_ns = host_ns.min(host / n as f64);
        if checked {
            st.check(s, w, cache, &before, rep)?;
        }
        eager.push(st.out().fetch(s)?);
    }
    let eager_states: Vec<Vec<f32>> = st.kda.iter().map(|a| a.state.fetch(s)).collect::<Res<_>>()?;

    // Each launch of a step timed alone (on the first step's inputs), summed.
    st.reset(s, p, cache)?;
    s.synchronize()?;
    let mut each_us: Vec<(String, f64)> = vec![];
    st.enqueue(k, s, w, cache, bias_ptr, &mut |name, f| {
        each_us.push((name.to_string(), launch_us(s, f)?));
        Ok(())
    })?;
    let kernels_us: f64 = each_us.iter().map(|t| t.1).sum();

    // The graph: one step captured, replayed per step with the new tokens copied in first.
    st.reset(s, p, cache)?;
    s.synchronize()?;
    let graph = capture(s, || st.enqueue(k, s, w, cache, bias_ptr, &mut |_, f| f()))?;
    let (mut replayed, mut graph_us) = (vec![], 0.0);
    for x in &tokens {
        s.memcpy_htod(&k3k_build::rt::HostTensor::from_f32(DType::Bf16, &[B, HIDDEN], x).data, &mut st.xs[0].d)?;
        poison(s, &st.out().d)?;
        graph_us += stream_us(s, || Ok(graph.launch()?))?;
        replayed.push(st.out().fetch(s)?);
    }
    let graph_states: Vec<Vec<f32>> = st.kda.iter().map(|a| a.state.fetch(s)).collect::<Res<_>>()?;
    let lens_end = cache.lens.fetch_i32(s)?;

    let same = eager == replayed && eager_states == graph_states;
    let lens_ok = lens_end.iter().zip(&lens0).all(|(a, b)| *a == b + DECODE_STEPS as i32);
    let shape = format!("[{B},{HIDDEN}] x {DECODE_STEPS}");
    rep.add("decode graph", "graph == eager (bitwise)", &shape, f64::from(u8::from(!same)), 0.0, "outputs, states");
    rep.add("decode graph", "cache lengths after the replays", "[6]", f64::from(u8::from(!lens_ok)), 0.0, "");
    println!("\ndecode step launches ({} in all), GPU time each (timed alone, graph of 20):", each_us.len());
    for (name, us) in &each_us {
        println!("  {us:>8.1} us  {name}");
    }
    let (eager_step, graph_step) = (eager_us / DECODE_STEPS as f64, graph_us / DECODE_STEPS as f64);
    println!(
        "  {launches} launches per step: eager {eager_step:.1} us/step, graph {graph_step:.1} us/step, kernels alone \
         {kernels_us:.1} us (graph / kernels = {:.2}); host {:.2} us per eager launch",
        graph_step / kernels_us,
        host_ns / 1e3
    );
    rep.note(format!(
        "decode step ({B} sequences, 3 KDA + 1 MLA + 1 LatentMoE, {launches} launches): eager {eager_step:.1} us, \
         graph {graph_step:.1} us, sum of its kernels {kernels_us:.1} us (graph / kernels {:.2}), host {:.2} us per \
         eager launch",
        graph_step / kernels_us,
        host_ns / 1e3
    ));
    Ok(())
}
