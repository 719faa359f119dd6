//! A dense MXFP4 projection at decode-like token counts (speculative decoding, small-batch serving): the
//! generated `Dispatch` holds one kernel per bucket of M (1, 4, 16) and picks the bucket of each launch's M.
//! Weights with every E8M0 scale byte the quantizer gives; checked against the f64 product of the dequantized
//! weights. Then the same projection with MXFP8 activations and a K split, whose three kernels are launched
//! plainly and with programmatic dependent launch (PDL), eagerly and captured in a CUDA graph: all four runs
//! must give the same bits.

use crate::config::*;
use crate::host::*;
use crate::kernels;
use k3k_build::reference::gemm as rg;
use k3k_build::reference::mx::{self as rmx, MxFormat, ScaleRule};
use k3k_build::rt::cudarc::driver::{CudaSlice, CudaStream};
use k3k_build::rt::{Bf16, DType, F32, HostTensor, U8, U32, View, ViewMut};
use std::sync::Arc;

/// Run the bucketed projection at M = 1, 3, 11 and 16 on `stream`, check each.
pub fn run(stream: &Arc<CudaStream>, rep: &mut Report, seed: u64) -> Res<()> {
    let s = stream;
    let (k, n) = (LATENT, 2 * INTER);
    println!("\ndense MXFP4 projection by buckets of M: K = {k}, N = {n}");
    let mut rng = Rng::new(seed);
    let q = rmx::quantize(&rng.bf16_normal(n * k, (k as f64).powf(-0.5)), n, k, MxFormat::Fp4, ScaleRule::Floor)?;
    let w = rmx::dequantize(&q)?;
    let wq: CudaSlice<u8> = s.clone_htod(&q.q)?;
    let ws: CudaSlice<u8> = s.clone_htod(&q.s)?;
    let mx = kernels::mx_dense::Dispatch::load(s)?;
    for m in [1usize, 3, 11, 16] {
        let x = rng.bf16_normal(m * k, 1.0);
        let xd: CudaSlice<u8> = s.clone_htod(&HostTensor::from_f32(DType::Bf16, &[m, k], &x).data)?;
        let mut yd: CudaSlice<u8> = s.clone_htod(&vec![0xffu8; m * n * 2])?;
        mx.launch(
            s,
            &View::<Bf16>::of(&xd, s, &[m, k])?,
            &View::<U32>::of(&wq, s, &[n, k / 8])?,
            &View::<U8>::of(&ws, s, &[n, k / 32])?,
            &mut ViewMut::<Bf16>::of(&mut yd, s, &[m, n])?,
        )?;
        let y = HostTensor::from_bytes(DType::Bf16, &[m, n], s.clone_dtoh(&yd)?);
        let got: Vec<f32> = (0..m * n).map(|i| y.get_f32(i)).collect();
        let want = rg::matmul_nt(&x, m, k, &w, n)?;
        let bucket = kernels::mx_dense::Dispatch::BUCKETS
            [k3k_build::rt::pick_bucket(kernels::mx_dense::Dispatch::BUCKETS, m as i64)];
        rep.add(
            "dense",
            "mxfp4_matmul (Dispatch)",
            &format!("M{m} (bucket {bucket}) K{k} N{n}"),
            err(&got, &want),
            5e-3,
            "",
        );
    }
    split_chain(s, rep, &mut rng, (&wq, &ws, &w))
}

/// The kernels of `mx_dense_split` and `mx_dense_pdl` (build.rs): activation dequant, main, finalize.
struct Chains {
    plain: (kernels::mx_dense_split::ActDequant, kernels::mx_dense_split::Main, kernels::mx_dense_split::Finalize),
    pdl: (kernels::mx_dense_pdl::ActDequant, kernels::mx_dense_pdl::Main, kernels::mx_dense_pdl::Finalize),
}

/// The device buffers of [`split_chain`].
struct ChainBufs<'a> {
    xq: CudaSlice<u8>,
    xs: CudaSlice<u8>,
    xb: CudaSlice<u8>,
    part: CudaSlice<u8>,
    y: CudaSlice<u8>,
    wq: &'a CudaSlice<u8>,
    ws: &'a CudaSlice<u8>,
}

impl Chains {
    fn load(s: &Arc<CudaStream>) -> Res<Chains> {
        use kernels::{mx_dense_pdl as p, mx_dense_split as q};
        Ok(Chains {
            plain: (q::ActDequant::load(s)?, q::Main::load(s)?, q::Finalize::load(s)?),
            pdl: (p::ActDequant::load(s)?, p::Main::load(s)?, p::Finalize::load(s)?),
        })
    }

    /// Enqueue the three launches of one chain (`pdl`: the PDL one) on `s` for `m` tokens.
    fn launch(&self, s: &Arc<CudaStream>, pdl: bool, b: &mut ChainBufs, m: usize) -> Res<()> {
        let (k, n) = (LATENT, 2 * INTER);
        macro_rules! go {
            ($c:expr) => {{
                let (l, mm, f) = $c;
                l.launch(
                    s,
                    &View::<U8>::of(&b.xq, s, &[m, k])?,
                    &View::<U8>::of(&b.xs, s, &[m, k / 32])?,
                    &mut ViewMut::<Bf16>::of(&mut b.xb, s, &[m, k])?,
                )?;
                mm.launch(
                    s,
                    &View::<Bf16>::of(&b.xb, s, &[m, k])?,
                    &View::<U32>::of(b.wq, s, &[n, k / 8])?,
                    &View::<U8>::of(b.ws, s, &[n, k / 32])?,
                    &mut ViewMut::<F32>::of(&mut b.part, s, &[4, m, n])?,
                )?;
                f.launch(
                    s,
                    &View::<F32>::of(&b.part, s, &[4, m, n])?,
                    &mut ViewMut::<Bf16>::of(&mut b.y, s, &[m, n])?,
                )?;
            }};
        }
        if pdl {
            go!(&self.pdl)
        } else {
            go!(&self.plain)
        }
        Ok(())
    }
}

/// `mx_dense_split` and `mx_dense_pdl` (build.rs) at M = 11 and 16: each eagerly and as a replayed CUDA graph (the
/// outputs poisoned first), checked against the f64 product of the dequantized operands; all four outputs must be
/// the same bits. Then the GPU time of 20 chains captured in one graph, plain and with PDL.
fn split_chain(
    s: &Arc<CudaStream>,
    rep: &mut Report,
    rng: &mut Rng,
    (wq, ws, w): (&CudaSlice<u8>, &CudaSlice<u8>, &[f32]),
) -> Res<()> {
    let (k, n) = (LATENT, 2 * INTER);
    println!("\nthe same projection with MXFP8 activations, SPLIT=4: plain and PDL launches, eager and in a graph");
    let ch = Chains::load(s)?;
    for m in [11usize, 16] {
        let x = rng.bf16_normal(m * k, 1.0);
        let qx = rmx::quantize(&x, m, k, MxFormat::Fp8, ScaleRule::Floor)?;
        let want = rg::matmul_nt(&rmx::dequantize(&qx)?, m, k, w, n)?;
        let mut b = ChainBufs {
            xq: s.clone_htod(&qx.q)?,
            xs: s.clone_htod(&qx.s)?,
            xb: s.alloc_zeros(m * k * 2)?,
            part: s.alloc_zeros(4 * m * n * 4)?,
            y: s.alloc_zeros(m * n * 2)?,
            wq,
            ws,
        };
        let mut runs: Vec<(String, Vec<u8>)> = vec![];
        let mut times = vec![];
        for (name, pdl) in [("plain", false), ("PDL", true)] {
            for graph in [false, true] {
                for buf in [&b.xb, &b.part, &b.y] {
                    poison(s, buf)?;
                }
                // (The graph lives until its output has been copied back.)
                let _graph = if graph {
                    let g = capture(s, || ch.launch(s, pdl, &mut b, m))?;
                    g.launch()?;
                    Some(g)
                } else {
                    ch.launch(s, pdl, &mut b, m)?;
                    None
                };
                let bytes = s.clone_dtoh(&b.y)?;
                let y = HostTensor::from_bytes(DType::Bf16, &[m, n], bytes.clone());
                let got: Vec<f32> = (0..m * n).map(|i| y.get_f32(i)).collect();
                let how = format!("{name}, {}", if graph { "graph" } else { "eager" });
                rep.add(
                    "dense",
                    "mxfp4_matmul MXFP8 SPLIT=4",
                    &format!("M{m} K{k} N{n} ({how})"),
                    err(&got, &want),
                    5e-3,
                    "",
                );
                runs.push((how, bytes));
            }
            times.push(launch_us(s, &mut || ch.launch(s, pdl, &mut b, m))?);
        }
        let differ: Vec<&str> = runs.iter().filter(|r| r.1 != runs[0].1).map(|r| r.0.as_str()).collect();
        rep.add(
            "dense",
            "plain, PDL, eager, graph: the same bits",
            &format!("M{m}"),
            f64::from(u8::from(!differ.is_empty())),
            0.0,
            &if differ.is_empty() { String::new() } else { format!("differ from plain eager: {differ:?}") },
        );
        rep.note(format!(
            "dense MXFP8 M{m} SPLIT=4, 20 chains in a graph: plain {:.2} us, PDL {:.2} us per chain",
            times[0], times[1]
        ));
    }
    Ok(())
}
