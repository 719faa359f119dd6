//! A dense MXFP4 projection at decode-like token counts (speculative decoding, small-batch serving): the
//! generated `Dispatch` holds one kernel per bucket of M (1, 4, 16) and picks the bucket of each launch's M.
//! Weights with every E8M0 scale byte the quantizer gives; checked against the f64 product of the dequantized
//! weights.

use crate::config::*;
use crate::host::*;
use crate::kernels;
use k3k_build::reference::gemm as rg;
use k3k_build::reference::mx::{self as rmx, MxFormat, ScaleRule};
use k3k_build::rt::cudarc::driver::{CudaSlice, CudaStream};
use k3k_build::rt::{Bf16, DType, HostTensor, U8, U32, View, ViewMut};
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
    Ok(())
}
