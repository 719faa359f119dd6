//! A varlen KDA prefill as a serving engine runs it: a batch of sequences of different lengths (8192 tokens in
//! six sequences), their row offsets `cu_seqlens` known on the host at run time, the model's own buffers and
//! workspace (cudarc slices on its own stream), initial states for every sequence. One `Varlen::run` builds the
//! chunk tables, copies them into the workspace and runs the chunked KDA; the outputs and every sequence's final
//! state are checked against the f64 recurrence over the same batch.

use crate::config::*;
use crate::host::*;
use crate::kernels;
use k3k_build::reference::gemm as rg;
use k3k_build::reference::kda::{KdaInputs, gate_safe, kda_recurrent};
use k3k_build::rt::cudarc::driver::{CudaSlice, CudaStream};
use k3k_build::rt::{Bf16, DType, F32, HostTensor, U8, View, ViewMut};
use std::sync::Arc;

/// The safe-gate lower bound the KDA kernels were built with.
const LB: f64 = -5.0;

fn up(s: &Arc<CudaStream>, dtype: DType, shape: &[usize], vals: &[f32]) -> Res<CudaSlice<u8>> {
    Ok(s.clone_htod(&HostTensor::from_f32(dtype, shape, vals).data)?)
}

fn down(s: &Arc<CudaStream>, dtype: DType, shape: &[usize], d: &CudaSlice<u8>) -> Res<Vec<f32>> {
    let t = HostTensor::from_bytes(dtype, shape, s.clone_dtoh(d)?);
    Ok((0..t.len()).map(|i| t.get_f32(i)).collect())
}

/// Run the varlen prefill on `stream`, check and time it.
pub fn run(stream: &Arc<CudaStream>, rep: &mut Report, seed: u64) -> Res<()> {
    let s = stream;
    let (h, dk, dv) = (HEADS, HEAD_DIM, HEAD_DIM);
    let lens = VARLEN_LENS;
    let t: usize = lens.iter().sum();
    let n = lens.len();
    println!("\nvarlen KDA prefill: {n} sequences {lens:?} ({t} tokens), {h} heads, K = V = {dk}, from given states");
    let cu: Vec<i32> = std::iter::once(0)
        .chain(lens.iter().scan(0i32, |a, &l| {
            *a += l as i32;
            Some(*a)
        }))
        .collect();
    let mut rng = Rng::new(seed);
    let (q, k, v) =
        (rng.bf16_normal(t * h * dk, 1.0), rng.bf16_normal(t * h * dk, 1.0), rng.bf16_normal(t * h * dv, 1.0));
    let g = rng.bf16_normal(t * h * dk, 1.0);
    let beta = rng.bf16_normal(t * h, 1.0);
    let h0 = rng.bf16_normal(n * h * dk * dv, 0.05);
    let tok = [t, h, dk];
    let (qd, kd, vd) =
        (up(s, DType::Bf16, &tok, &q)?, up(s, DType::Bf16, &tok, &k)?, up(s, DType::Bf16, &[t, h, dv], &v)?);
    let gd = up(s, DType::F32, &tok, &g)?;
    let bd = up(s, DType::Bf16, &[t, h], &beta)?;
    let h0d = up(s, DType::F32, &[n, h, dk, dv], &h0)?;
    let mut od: CudaSlice<u8> = s.alloc_zeros(t * h * dv * 2)?;
    let mut htd: CudaSlice<u8> = s.alloc_zeros(n * h * dk * dv * 4)?;

    let mut kda = kernels::kda_varlen::Varlen::load(s)?;
    type V = kernels::kda_varlen::Varlen;
    assert_eq!((V::MAX_TOKENS, V::MAX_SEQS), (VARLEN_MAX_TOKENS, VARLEN_MAX_SEQS), "built for the config's limits");
    let ws_bytes = kda.workspace_bytes();
    let mut ws: CudaSlice<u8> = s.alloc_zeros(ws_bytes)?;
    let mut launch = |od: &mut CudaSlice<u8>, htd: &mut CudaSlice<u8>, ws: &mut CudaSlice<u8>| -> Res<()> {
        Ok(kda.run(
            s,
            &cu,
            &View::<Bf16>::of(&qd, s, &tok)?,
            &View::<Bf16>::of(&kd, s, &tok)?,
            &View::<Bf16>::of(&vd, s, &[t, h, dv])?,
            &View::<F32>::of(&gd, s, &tok)?,
            &View::<Bf16>::of(&bd, s, &[t, h])?,
            Some(&View::<F32>::of(&h0d, s, &[n, h, dk, dv])?),
            &mut ViewMut::<Bf16>::of(od, s, &[t, h, dv])?,
            &mut ViewMut::<F32>::of(htd, s, &[n, h, dk, dv])?,
            &mut ViewMut::<U8>::of(ws, s, &[ws_bytes])?,
        )?)
    };
    // Poisoned outputs, one run, then timed runs (the same inputs: each run recomputes the same outputs).
    poison(s, &od)?;
    poison(s, &htd)?;
    launch(&mut od, &mut htd, &mut ws)?;
    let got_o = down(s, DType::Bf16, &[t, h, dv], &od)?;
    let got_ht = down(s, DType::F32, &[n, h, dk, dv], &htd)?;
    let reps = 20;
    let us = stream_us(s, || (0..reps).try_for_each(|_| launch(&mut od, &mut htd, &mut ws)))? / reps as f64;

    // The f64 recurrence over the same batch (gate and beta activations as the kernel applies them).
    let gg: Vec<f32> = g.iter().map(|&x| gate_safe(x as f64, 0.0, LB) as f32).collect();
    let bb: Vec<f32> = beta.iter().map(|&x| rg::sigmoid(x as f64) as f32).collect();
    let mut inp = KdaInputs::new(1, t, h, h, dk, dv, q, k, v, gg, bb);
    inp.h0 = Some(h0);
    inp.cu_seqlens = Some(cu.iter().map(|&c| c as usize).collect());
    inp.use_qk_l2norm = true;
    inp.scale = Some(1.0 / (dk as f64).sqrt());
    let want = kda_recurrent(&inp)?;
    let shape = format!("{n} seqs, {t} tokens");
    rep.add("varlen", "kda (Varlen::run) o", &shape, us, err(&got_o, &want.o), 5e-3, "vs f64 recurrence");
    rep.add(
        "varlen",
        "kda final states",
        &format!("[{n},{h},{dk},{dv}]"),
        f64::NAN,
        err(&got_ht, &want.final_state),
        5e-3,
        "",
    );
    rep.note(format!("varlen KDA: {t} tokens in {n} sequences, {us:.1} us per batch (workspace {ws_bytes} bytes)"));
    Ok(())
}
