//! One LatentMoE layer: router scores -> Quantile Balancing bias (hist_quantile) -> top-k (host) -> grouped
//! MXFP4 GEMM1 with SiTU-GLU -> grouped MXFP4 GEMM2 with the routing weight -> combine (host). The two expert
//! GEMMs also run with bf16 weights (`latent_moe_gemm`, the same dequantized values) for comparison.
//!
//! Checks: every GPU op against `k3k-reference` on the inputs it was given (bf16 tolerance 5e-3; the QB bias
//! within one histogram bin), and the layer output against the CPU reference composition of GEMM1 -> bf16 ->
//! GEMM2 -> combine in f64 on the same routing (the routing itself is a discrete choice made from the GPU's
//! scores and bias, so both sides use one routing).

use crate::config::*;
use crate::host::*;
use crate::kernels;
use k3k_build::reference::gemm::{self as rg, Epilogue};
use k3k_build::reference::mx::{self as rmx, MxFormat, ScaleRule};
use k3k_build::reference::quantile as rq;
use k3k_build::rt::{Bf16, DType, F32, Gpu, HostTensor, I32, Tensor, U8, U32};

/// `k3k_reference::gemm::grouped_gemm`, spread over threads by expert.
#[allow(clippy::too_many_arguments)]
pub fn par_grouped(
    x: &[f32],
    k: usize,
    w: &[f32],
    g: usize,
    n: usize,
    offs: &[i32],
    p: Option<&[f32]>,
    epi: Epilogue,
) -> Res<Vec<f64>> {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(g).max(1);
    let per = g.div_ceil(threads);
    let parts: Vec<Result<Vec<f64>, String>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..g)
            .step_by(per)
            .map(|g0| {
                let g1 = (g0 + per).min(g);
                sc.spawn(move || {
                    let r0 = if g0 == 0 { 0 } else { offs[g0 - 1] as usize };
                    let r1 = offs[g1 - 1] as usize;
                    let sub: Vec<i32> = offs[g0..g1].iter().map(|&o| o - r0 as i32).collect();
                    rg::grouped_gemm(
                        &x[r0 * k..r1 * k],
                        r1 - r0,
                        k,
                        &w[g0 * n * k..g1 * n * k],
                        g1 - g0,
                        n,
                        &sub,
                        p.map(|p| &p[r0..r1]),
                        epi,
                    )
                    .map_err(|e| e.to_string())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("reference thread")).collect()
    });
    let mut out = vec![];
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

fn mx_tensors(gpu: &Gpu, q: &rmx::MxTensor, g: usize) -> Res<(Tensor<U32>, Tensor<U8>)> {
    let (n, k) = (q.rows / g, q.k);
    // The natural MXFP4 layout, its bytes read as little-endian u32 words: [G, N, K/8].
    let wq = Tensor::upload(gpu, &HostTensor::from_bytes(DType::U32, &[g, n, k / 8], q.q.clone()))?;
    let ws = Tensor::upload(gpu, &HostTensor::from_bytes(DType::U8, &[g, n, k / 32], q.s.clone()))?;
    Ok((wq, ws))
}

/// Run the layer on `gpu`, checking and timing every op.
pub fn run(gpu: &Gpu, rep: &mut Report, seed: u64) -> Res<()> {
    let (t, l, m, e, k) = (TOKENS, LATENT, INTER, EXPERTS, TOP_K);
    println!("\nLatentMoE layer: T={t} tokens, latent {l}, expert width {m}, {e} experts, top-{k}, MXFP4 experts");
    let mut rng = Rng::new(seed);
    let x = Dev::new(gpu, &[t, l], rng.bf16_normal(t * l, 1.0))?;
    let wr = Dev::new(gpu, &[e, l], rng.bf16_normal(e * l, (l as f64).powf(-0.5)))?;
    let q1 = rmx::quantize(
        &rng.bf16_normal(e * 2 * m * l, (l as f64).powf(-0.5)),
        e * 2 * m,
        l,
        MxFormat::Fp4,
        ScaleRule::Floor,
    )?;
    let q2 =
        rmx::quantize(&rng.bf16_normal(e * l * m, (m as f64).powf(-0.5)), e * l, m, MxFormat::Fp4, ScaleRule::Floor)?;
    // The MXFP4 kernels were built for "foldable" scales (every byte <= 128: one multiply per element).
    if q1.s.iter().chain(&q2.s).any(|&b| b > 128 && b != 255) {
        return Err("MXFP4 scale bytes above 128: the kernels were built for the folded-scale variant".into());
    }
    let (w1, w2) = (rmx::dequantize(&q1)?, rmx::dequantize(&q2)?);
    let b_prev: Vec<f32> = rng.bf16_normal(e, 0.02);

    // 1. Router logits (dense GEMM) on the GPU; sigmoid scores on the host.
    let lin = kernels::linear::Linear::load(gpu)?;
    let mut logits = out::<Bf16>(gpu, &[t, e])?;
    lin.launch(gpu, &x.t, &wr.t, &mut logits)?;
    let us = time_us(gpu, || lin.launch(gpu, &x.t, &wr.t, &mut logits))?;
    let logits = Dev::fetch(gpu, logits)?;
    let want = rg::matmul_nt(&x.h, t, l, &wr.h, e)?;
    rep.add("moe", "linear (router)", &format!("[{t},{l}]x[{e},{l}]"), us, err(&logits.h, &want), 5e-3, "logits");
    let s: Vec<f32> = logits.h.iter().map(|&z| rg::sigmoid(z as f64) as f32).collect();

    // 2. The Quantile Balancing step: the whole hist_quantile plan (alpha, histograms, locate).
    let qb = kernels::router_qb::Plan::load(gpu)?;
    let s_d = Tensor::<F32>::from_f32(gpu, &[t, e], &s)?;
    let b_d = Tensor::<F32>::from_f32(gpu, &[e], &b_prev)?;
    let mut qo = qb.outputs(gpu)?;
    let inputs = kernels::router_qb::Inputs { s: &s_d, b: &b_d };
    qb.run(gpu, &inputs, &mut qo)?;
    let us = time_us(gpu, || qb.run(gpu, &inputs, &mut qo))?;
    let bias = qo.bias.to_f32_vec(gpu)?;
    let want = rq::qb_bias(&s, &b_prev, t, e, k, -1.0, 1.0, QB_BINS, false)?;
    let bin = 2.0 / QB_BINS as f64;
    let worst = bias.iter().zip(&want).map(|(a, b)| (*a as f64 - b).abs()).fold(0.0, f64::max) / bin;
    rep.add(
        "moe",
        "hist_quantile.qb",
        &format!("T{t} E{e} k{k} B{QB_BINS}"),
        us,
        worst,
        1.0,
        "bias (max |err| in bins)",
    );

    // 3. Top-k on the host: the biased scores choose, the unbiased scores (normalized) weigh.
    let mut chosen: Vec<Vec<(usize, f32)>> = vec![vec![]; e];
    for ti in 0..t {
        let row = &s[ti * e..(ti + 1) * e];
        let mut idx: Vec<usize> = (0..e).collect();
        idx.sort_by(|&a, &b| (row[b] + bias[b]).total_cmp(&(row[a] + bias[a])).then(a.cmp(&b)));
        let sum: f32 = idx[..k].iter().map(|&j| row[j]).sum();
        for &j in &idx[..k] {
            chosen[j].push((ti, row[j] / sum));
        }
    }
    let mt = t * k;
    let (mut xp, mut p, mut tok, mut offs) = (Vec::with_capacity(mt * l), vec![], vec![], vec![]);
    for rows in &chosen {
        for &(ti, wgt) in rows {
            xp.extend_from_slice(&x.h[ti * l..(ti + 1) * l]);
            p.push(wgt);
            tok.push(ti);
        }
        offs.push(p.len() as i32);
    }
    let loads: Vec<usize> = chosen.iter().map(|r| r.len()).collect();
    println!(
        "  routing: {mt} rows, tokens per expert {}..{} (target {})",
        loads.iter().min().unwrap(),
        loads.iter().max().unwrap(),
        mt / e
    );
    let xp = Dev::new(gpu, &[mt, l], xp)?;
    let offs_d = Tensor::<I32>::from_i64(gpu, &[e], &offs.iter().map(|&o| o as i64).collect::<Vec<_>>())?;
    let p_d = Tensor::<F32>::from_f32(gpu, &[mt], &p)?;

    // 4. Expert GEMMs with MXFP4 weights.
    let (wq1, ws1) = mx_tensors(gpu, &q1, e)?;
    let (wq2, ws2) = mx_tensors(gpu, &q2, e)?;
    let up = kernels::moe_up_mx::UpGlu::load(gpu)?;
    let mut h1 = out::<Bf16>(gpu, &[mt, m])?;
    up.launch(gpu, &xp.t, &wq1, &ws1, &offs_d, &mut h1)?;
    let us = time_us(gpu, || up.launch(gpu, &xp.t, &wq1, &ws1, &offs_d, &mut h1))?;
    let h1 = Dev::fetch(gpu, h1)?;
    let want_h1 = par_grouped(&xp.h, l, &w1, e, 2 * m, &offs, None, Epilogue::SituGlu)?;
    let shape1 = format!("M{mt} K{l} N{} G{e}", 2 * m);
    rep.add("moe", "mxfp4_matmul (GEMM1)", &shape1, us, err(&h1.h, &want_h1), 5e-3, "SiTU-GLU out");
    let down = kernels::moe_down_mx::DownP::load(gpu)?;
    let mut y2 = out::<Bf16>(gpu, &[mt, l])?;
    down.launch(gpu, &h1.t, &wq2, &ws2, &offs_d, &p_d, &mut y2)?;
    let us = time_us(gpu, || down.launch(gpu, &h1.t, &wq2, &ws2, &offs_d, &p_d, &mut y2))?;
    let y2 = Dev::fetch(gpu, y2)?;
    let want_y2 = par_grouped(&h1.h, m, &w2, e, l, &offs, Some(&p), Epilogue::None)?;
    let shape2 = format!("M{mt} K{m} N{l} G{e}");
    rep.add("moe", "mxfp4_matmul (GEMM2)", &shape2, us, err(&y2.h, &want_y2), 5e-3, "p * out");

    // The same products with bf16 weights (the dequantized values), for comparison.
    let w1b = Dev::new(gpu, &[e, 2 * m, l], w1.clone())?;
    let w2b = Dev::new(gpu, &[e, l, m], w2.clone())?;
    let upb = kernels::moe_up_bf16::UpGlu::load(gpu)?;
    let mut h1b = out::<Bf16>(gpu, &[mt, m])?;
    upb.launch(gpu, &xp.t, &w1b.t, &offs_d, &mut h1b)?;
    let us = time_us(gpu, || upb.launch(gpu, &xp.t, &w1b.t, &offs_d, &mut h1b))?;
    let h1b = Dev::fetch(gpu, h1b)?;
    rep.add("moe", "latent_moe_gemm (GEMM1)", &shape1, us, err(&h1b.h, &want_h1), 5e-3, "bf16 weights");
    let downb = kernels::moe_down_bf16::DownP::load(gpu)?;
    let mut y2b = out::<Bf16>(gpu, &[mt, l])?;
    downb.launch(gpu, &h1b.t, &w2b.t, &offs_d, &p_d, &mut y2b)?;
    let us = time_us(gpu, || downb.launch(gpu, &h1b.t, &w2b.t, &offs_d, &p_d, &mut y2b))?;
    let y2b = Dev::fetch(gpu, y2b)?;
    let want_y2b = par_grouped(&h1b.h, m, &w2, e, l, &offs, Some(&p), Epilogue::None)?;
    rep.add("moe", "latent_moe_gemm (GEMM2)", &shape2, us, err(&y2b.h, &want_y2b), 5e-3, "bf16 weights");

    // 5. Combine on the host, and the whole layer against the CPU composition on the same routing.
    let combine = |rows: &[f32]| -> Vec<f32> {
        let mut y = vec![0f32; t * l];
        for (r, &ti) in tok.iter().enumerate() {
            for (o, v) in y[ti * l..(ti + 1) * l].iter_mut().zip(&rows[r * l..(r + 1) * l]) {
                *o += v;
            }
        }
        y
    };
    let y = combine(&y2.h);
    let y2_ref = par_grouped(&bf16(&want_h1), m, &w2, e, l, &offs, Some(&p), Epilogue::None)?;
    let mut y_ref = vec![0f64; t * l];
    for (r, &ti) in tok.iter().enumerate() {
        for (o, v) in y_ref[ti * l..(ti + 1) * l].iter_mut().zip(&y2_ref[r * l..(r + 1) * l]) {
            *o += v;
        }
    }
    rep.add("moe", "layer output", &format!("[{t},{l}]"), f64::NAN, err(&y, &y_ref), 1e-2, "vs CPU composition");
    let yb = combine(&y2b.h);
    rep.add(
        "moe",
        "layer output (bf16)",
        &format!("[{t},{l}]"),
        f64::NAN,
        err(&yb, &y_ref),
        1e-2,
        "vs CPU composition",
    );
    Ok(())
}
