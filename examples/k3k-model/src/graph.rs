//! A decode step as a model engine runs it: device-resident buffers the model allocated itself (cudarc slices
//! on its own stream), k3k's launchers enqueued on that stream, the whole step captured once as a CUDA graph
//! and replayed for every token.
//!
//! The step: three KDA layers, each `q, k, v, beta = x W^T` (dense GEMM, M = 1), the recurrent `kda.decode`
//! step on the layer's f32 state (in place), and the output projection, whose result is the next layer's input.
//! The per-token inputs (the token's hidden state and each layer's raw gate) are copied into the step's fixed
//! input buffers before each replay, as an engine fills its graph's inputs.
//!
//! Checks: the graph's outputs and final states equal the eager launches' exactly (same kernels, same inputs),
//! and both match the CPU reference composition in f64 (bf16 rounding of every intermediate, as the GPU
//! stores them). Times: the eager step, the graph step, the sum of the step's kernels' GPU times, and the host
//! cost of one eager launch.

use crate::config::*;
use crate::host::*;
use crate::kernels;
use k3k_build::reference::gemm as rg;
use k3k_build::reference::kda::{KdaInputs, gate_safe, kda_recurrent};
use k3k_build::rt::cudarc::driver::{CudaSlice, CudaStream, sys};
use k3k_build::rt::{Bf16, DType, F32, HostTensor, View, ViewMut};
use std::sync::Arc;

/// Decode steps replayed.
pub const STEPS: usize = 32;
/// KDA layers in the step.
const LAYERS: usize = 3;
/// The safe-gate lower bound the KDA kernels were built with.
const LB: f32 = -5.0;

fn scale_kda() -> f32 {
    (1.0 / (HEAD_DIM as f64).sqrt()) as f32
}

/// A device buffer of bf16 or f32 values, with the host copy of what was uploaded.
struct Buf {
    d: CudaSlice<u8>,
    shape: Vec<usize>,
}

fn upload(s: &Arc<CudaStream>, dtype: DType, shape: &[usize], vals: &[f32]) -> Res<Buf> {
    let t = HostTensor::from_f32(dtype, shape, vals);
    Ok(Buf { d: s.clone_htod(&t.data)?, shape: shape.to_vec() })
}

fn alloc(s: &Arc<CudaStream>, dtype: DType, shape: &[usize]) -> Res<Buf> {
    let n: usize = shape.iter().product();
    Ok(Buf { d: s.alloc_zeros::<u8>(dtype.storage_bytes(n))?, shape: shape.to_vec() })
}

fn fetch(s: &Arc<CudaStream>, dtype: DType, b: &Buf) -> Res<Vec<f32>> {
    let t = HostTensor::from_bytes(dtype, &b.shape, s.clone_dtoh(&b.d)?);
    Ok((0..t.len()).map(|i| t.get_f32(i)).collect())
}

/// One layer's weights and state.
struct Layer {
    /// q, k, v `[H*D, HIDDEN]`, beta `[H, HIDDEN]`, out `[HIDDEN, H*D]`.
    w: [Buf; 5],
    wh: [Vec<f32>; 5],
    /// The recurrent state `[1, H, K, V]` f32 (updated in place by every step).
    state: Buf,
    /// This token's raw gate `[1, 1, H, K]` f32 (an input of the step).
    g: Buf,
}

/// The step's buffers: inputs, intermediates, outputs; fixed addresses, so one captured graph serves every
/// token.
struct Step {
    x: Buf,
    layers: Vec<Layer>,
    q: Buf,
    k: Buf,
    v: Buf,
    beta: Buf,
    o: Buf,
    /// Each layer's output (the next layer's input; the last is the step's output).
    y: Vec<Buf>,
}

struct Launchers {
    lin: kernels::linear::Linear,
    /// For the beta projection (rows of HEADS bf16 values, narrower than a bulk-copy store takes).
    lin_narrow: kernels::linear_narrow::Linear,
    step: kernels::kda_decode::StepInPlace,
}

fn view<'a>(b: &'a Buf, s: &'a CudaStream, shape: &[usize]) -> Res<View<'a, Bf16>> {
    Ok(View::of(&b.d, s, shape)?)
}

/// A wrapper around each launch of a step: runs it (eagerly, or captured and timed) and may count it.
type EachLaunch<'a> = dyn FnMut(&mut dyn FnMut() -> Res<()>) -> Res<()> + 'a;

/// One decode step, each launch handed to `run`: per layer the q, k, v and beta projections, the KDA step and
/// the output projection (six launches). Returns the number of launches.
fn step_launches(k: &Launchers, s: &Arc<CudaStream>, st: &mut Step, run: &mut EachLaunch<'_>) -> Res<usize> {
    let hd = HEADS * HEAD_DIM;
    let mut launches = 0;
    for l in 0..LAYERS {
        let (prev, rest) = st.y.split_at_mut(l);
        let xb = if l == 0 { &st.x } else { &prev[l - 1] };
        let lay = &mut st.layers[l];
        for (i, dst) in [&mut st.q, &mut st.k, &mut st.v].into_iter().enumerate() {
            run(&mut || {
                let w = view(&lay.w[i], s, &[hd, HIDDEN])?;
                Ok(k.lin.launch(
                    s,
                    &view(xb, s, &[1, HIDDEN])?,
                    &w,
                    &mut ViewMut::<Bf16>::of(&mut dst.d, s, &[1, hd])?,
                )?)
            })?;
        }
        run(&mut || {
            let wb = view(&lay.w[3], s, &[HEADS, HIDDEN])?;
            let mut beta = ViewMut::<Bf16>::of(&mut st.beta.d, s, &[1, HEADS])?;
            Ok(k.lin_narrow.launch(s, &view(xb, s, &[1, HIDDEN])?, &wb, &mut beta)?)
        })?;
        let qkv = [1, 1, HEADS, HEAD_DIM];
        run(&mut || {
            Ok(k.step.launch(
                s,
                &view(&st.q, s, &qkv)?,
                &view(&st.k, s, &qkv)?,
                &view(&st.v, s, &qkv)?,
                &View::<F32>::of(&lay.g.d, s, &qkv)?,
                &view(&st.beta, s, &[1, 1, HEADS])?,
                &mut ViewMut::<F32>::of(&mut lay.state.d, s, &[1, HEADS, HEAD_DIM, HEAD_DIM])?,
                &mut ViewMut::<Bf16>::of(&mut st.o.d, s, &qkv)?,
                scale_kda(),
                LB,
            )?)
        })?;
        run(&mut || {
            let wo = view(&lay.w[4], s, &[HIDDEN, hd])?;
            let mut y = ViewMut::<Bf16>::of(&mut rest[0].d, s, &[1, HIDDEN])?;
            Ok(k.lin.launch(s, &view(&st.o, s, &[1, hd])?, &wo, &mut y)?)
        })?;
        launches += 6;
    }
    Ok(launches)
}

/// Enqueue one decode step. Returns the number of launches.
fn enqueue(k: &Launchers, s: &Arc<CudaStream>, st: &mut Step) -> Res<usize> {
    step_launches(k, s, st, &mut |f| f())
}

/// The per-token inputs: the hidden state and each layer's raw gate.
struct Token {
    x: Vec<f32>,
    g: Vec<Vec<f32>>,
}

fn set_inputs(s: &Arc<CudaStream>, st: &mut Step, t: &Token) -> Res<()> {
    s.memcpy_htod(&HostTensor::from_f32(DType::Bf16, &[1, HIDDEN], &t.x).data, &mut st.x.d)?;
    for (l, g) in st.layers.iter_mut().zip(&t.g) {
        s.memcpy_htod(&HostTensor::from_f32(DType::F32, &[1, 1, HEADS, HEAD_DIM], g).data, &mut l.g.d)?;
    }
    Ok(())
}

/// The CPU reference composition of one step: bf16-rounded linears and the f64 KDA recurrence.
fn reference_step(layers: &[Layer], states: &mut [Vec<f32>], t: &Token) -> Res<Vec<f32>> {
    let hd = HEADS * HEAD_DIM;
    let lin = |x: &[f32], w: &[f32], n: usize| -> Res<Vec<f32>> { Ok(bf16(&rg::matmul_nt(x, 1, x.len(), w, n)?)) };
    let mut x = t.x.clone();
    for (l, lay) in layers.iter().enumerate() {
        let (q, k, v) = (lin(&x, &lay.wh[0], hd)?, lin(&x, &lay.wh[1], hd)?, lin(&x, &lay.wh[2], hd)?);
        let beta = lin(&x, &lay.wh[3], HEADS)?;
        let g: Vec<f32> = t.g[l].iter().map(|&z| gate_safe(z as f64, 0.0, LB as f64) as f32).collect();
        let b: Vec<f32> = beta.iter().map(|&z| rg::sigmoid(z as f64) as f32).collect();
        let mut inp = KdaInputs::new(1, 1, HEADS, HEADS, HEAD_DIM, HEAD_DIM, q, k, v, g, b);
        inp.h0 = Some(states[l].clone());
        inp.use_qk_l2norm = true;
        inp.scale = Some(scale_kda() as f64);
        let r = kda_recurrent(&inp)?;
        states[l] = r.final_state.iter().map(|&z| z as f32).collect();
        x = lin(&bf16(&r.o), &lay.wh[4], HIDDEN)?;
    }
    Ok(x)
}

/// Run the decode steps eagerly and as a graph on `stream` (the model's own), check and time them.
pub fn run(stream: &Arc<CudaStream>, rep: &mut Report, seed: u64) -> Res<()> {
    println!("\ndecode step as a CUDA graph: {LAYERS} KDA layers (q, k, v, beta, decode step, out), {STEPS} tokens");
    let s = stream;
    let k = Launchers {
        lin: kernels::linear::Linear::load(s)?,
        lin_narrow: kernels::linear_narrow::Linear::load(s)?,
        step: kernels::kda_decode::StepInPlace::load(s)?,
    };
    let hd = HEADS * HEAD_DIM;
    let mut rng = Rng::new(seed);
    let mut layers = vec![];
    let mut states0 = vec![];
    for _ in 0..LAYERS {
        let shapes = [[hd, HIDDEN], [hd, HIDDEN], [hd, HIDDEN], [HEADS, HIDDEN], [HIDDEN, hd]];
        let wh: [Vec<f32>; 5] = std::array::from_fn(|i| {
            let fan_in = shapes[i][1] as f64;
            rng.bf16_normal(shapes[i][0] * shapes[i][1], fan_in.powf(-0.5))
        });
        let w: [Buf; 5] = {
            let mut v = vec![];
            for (i, h) in wh.iter().enumerate() {
                v.push(upload(s, DType::Bf16, &shapes[i], h)?);
            }
            v.try_into().map_err(|_| "five weights")?
        };
        let st: Vec<f32> = rng.bf16_normal(hd * HEAD_DIM, 0.05);
        states0.push(st.clone());
        let state = upload(s, DType::F32, &[1, HEADS, HEAD_DIM, HEAD_DIM], &st)?;
        let g = alloc(s, DType::F32, &[1, 1, HEADS, HEAD_DIM])?;
        layers.push(Layer { w, wh, state, g });
    }
    let mut step = Step {
        x: alloc(s, DType::Bf16, &[1, HIDDEN])?,
        layers,
        q: alloc(s, DType::Bf16, &[1, hd])?,
        k: alloc(s, DType::Bf16, &[1, hd])?,
        v: alloc(s, DType::Bf16, &[1, hd])?,
        beta: alloc(s, DType::Bf16, &[1, HEADS])?,
        o: alloc(s, DType::Bf16, &[1, hd])?,
        y: (0..LAYERS).map(|_| alloc(s, DType::Bf16, &[1, HIDDEN])).collect::<Res<_>>()?,
    };
    let tokens: Vec<Token> = (0..STEPS)
        .map(|_| Token {
            x: rng.bf16_normal(HIDDEN, 1.0),
            g: (0..LAYERS).map(|_| rng.bf16_normal(HEADS * HEAD_DIM, 1.0)).collect(),
        })
        .collect();
    let reset_states = |s: &Arc<CudaStream>, step: &mut Step| -> Res<()> {
        for (l, st) in step.layers.iter_mut().zip(&states0) {
            s.memcpy_htod(&HostTensor::from_f32(DType::F32, &l.state.shape, st).data, &mut l.state.d)?;
        }
        Ok(())
    };

    // Eager: every launch enqueued by the host, token after token.
    reset_states(s, &mut step)?;
    let mut eager = vec![];
    let mut eager_us = 0.0;
    let mut host_ns_per_launch = f64::INFINITY;
    let mut launches = 0;
    for t in &tokens {
        set_inputs(s, &mut step, t)?;
        poison(s, &step.y[LAYERS - 1].d)?;
        let mut host = 0.0;
        eager_us += stream_us(s, || {
            let t0 = std::time::Instant::now();
            launches = enqueue(&k, s, &mut step)?;
            host = t0.elapsed().as_nanos() as f64;
            Ok(())
        })?;
        host_ns_per_launch = host_ns_per_launch.min(host / launches as f64);
        eager.push(fetch(s, DType::Bf16, &step.y[LAYERS - 1])?);
    }
    let eager_states: Vec<Vec<f32>> = step.layers.iter().map(|l| fetch(s, DType::F32, &l.state)).collect::<Res<_>>()?;

    // The sum of the step's kernels' GPU times (each launch timed alone, on the last token's inputs).
    reset_states(s, &mut step)?;
    let kernels_us = gpu_us_each(&k, s, &mut step)?;

    // The graph: one step captured, then replayed per token.
    reset_states(s, &mut step)?;
    s.synchronize()?;
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = enqueue(&k, s, &mut step);
    let graph = s.end_capture(sys::CUgraphInstantiate_flags(0))?;
    captured?;
    let graph = graph.ok_or("the capture recorded no graph")?;
    let mut replayed = vec![];
    let mut graph_us = 0.0;
    for t in &tokens {
        set_inputs(s, &mut step, t)?;
        poison(s, &step.y[LAYERS - 1].d)?;
        graph_us += stream_us(s, || Ok(graph.launch()?))?;
        replayed.push(fetch(s, DType::Bf16, &step.y[LAYERS - 1])?);
    }
    let graph_states: Vec<Vec<f32>> = step.layers.iter().map(|l| fetch(s, DType::F32, &l.state)).collect::<Res<_>>()?;

    // Checks: graph == eager exactly; both against the CPU reference composition.
    let same = eager == replayed && eager_states == graph_states;
    let mut ref_states = states0.clone();
    let mut worst: f64 = 0.0;
    for (t, got) in tokens.iter().zip(&replayed) {
        let want = reference_step(&step.layers, &mut ref_states, t)?;
        let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
        worst = worst.max(err(got, &want));
    }
    let state_err = graph_states
        .iter()
        .zip(&ref_states)
        .map(|(g, r)| err(g, &r.iter().map(|&v| v as f64).collect::<Vec<_>>()))
        .fold(0.0, f64::max);
    let shape = format!("[1,{HIDDEN}] x {STEPS}");
    rep.add("decode graph", "graph == eager (bitwise)", &shape, f64::NAN, if same { 0.0 } else { 1.0 }, 0.0, "");
    rep.add("decode graph", "step output vs CPU", &shape, f64::NAN, worst, 2e-2, "vs CPU composition");
    rep.add("decode graph", "KDA states vs CPU", "[1,4,128,128] x 3", f64::NAN, state_err, 2e-2, "after 32 steps");
    let (eager_step, graph_step) = (eager_us / STEPS as f64, graph_us / STEPS as f64);
    println!(
        "  {launches} launches per step: eager {eager_step:.1} us/step, graph {graph_step:.1} us/step, kernels alone \
         {kernels_us:.1} us (graph / kernels = {:.2}); host {:.2} us per eager launch",
        graph_step / kernels_us,
        host_ns_per_launch / 1e3
    );
    rep.note(format!(
        "decode graph: {launches} launches/step; eager {eager_step:.1} us, graph {graph_step:.1} us, sum of kernels \
         {kernels_us:.1} us, host {:.2} us/launch",
        host_ns_per_launch / 1e3
    ));
    Ok(())
}

/// GPU time of one launch, without the host in the way: `f` (one launch) captured 20 times into a graph, the
/// graph replayed once untimed and once between events; the time per launch.
fn launch_us(s: &Arc<CudaStream>, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    const REPS: usize = 20;
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = (0..REPS).try_for_each(|_| f());
    let graph = s.end_capture(sys::CUgraphInstantiate_flags(0))?;
    captured?;
    let graph = graph.ok_or("the capture recorded no graph")?;
    graph.launch()?;
    Ok(stream_us(s, || Ok(graph.launch()?))? / REPS as f64)
}

/// Each launch of one step timed alone ([`launch_us`]), summed: what the step's kernels cost on the GPU with
/// the least launch gaps (a graph's, between repetitions of one kernel).
fn gpu_us_each(k: &Launchers, s: &Arc<CudaStream>, st: &mut Step) -> Res<f64> {
    // Warm the step once, then time each of its launches.
    enqueue(k, s, st)?;
    s.synchronize()?;
    let mut total = 0.0;
    step_launches(k, s, st, &mut |f| {
        total += launch_us(s, f)?;
        Ok(())
    })?;
    Ok(total)
}
