//! Host-side helpers: seeded data, bf16 rounding, device transfers, the per-op report (time and check).

use k3k_build::reference::metrics::rel_l2;
use k3k_build::reference::mx::bf16_round;
use k3k_build::rt;
use k3k_build::rt::cudarc::driver::{CudaGraph, CudaSlice, CudaStream, DevicePtr, sys};
use std::sync::Arc;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A small seeded generator (splitmix64 + Box-Muller): the model's data is reproducible from one seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// `n` draws of N(0, std^2) rounded to bf16 (as f32).
    pub fn bf16_normal(&mut self, n: usize, std: f64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let (u, v) = (self.uniform(), self.uniform());
                bf16_round(((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos() * std) as f32)
            })
            .collect()
    }
}

/// Round every value to bf16.
pub fn bf16(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| bf16_round(x as f32)).collect()
}

/// One row of the report: every check of one op in one stage.
pub struct Row {
    pub stage: String,
    pub op: String,
    /// The shape of the first check.
    pub shape: String,
    pub launches: usize,
    /// The largest error over the checks.
    pub err: f64,
    pub tol: f64,
    pub what: String,
}

impl Row {
    pub fn ok(&self) -> bool {
        self.err <= self.tol
    }
}

/// Per-op checks, and the measurements printed after them.
#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Lines printed after the table (measurements that are not per-op rows).
    pub notes: Vec<String>,
}

impl Report {
    /// Record one check of `op` in `stage`: its error against the reference and the tolerance.
    pub fn add(&mut self, stage: &str, op: &str, shape: &str, err: f64, tol: f64, what: &str) {
        match self.rows.iter_mut().find(|r| r.stage == stage && r.op == op) {
            Some(r) => {
                r.launches += 1;
                r.err = if err.is_nan() || r.err.is_nan() { f64::NAN } else { r.err.max(err) };
            }
            None => self.rows.push(Row {
                stage: stage.into(),
                op: op.into(),
                shape: shape.into(),
                launches: 1,
                err,
                tol,
                what: what.into(),
            }),
        }
    }

    /// A line for after the table.
    pub fn note(&mut self, line: String) {
        self.notes.push(line);
    }

    /// Rows whose check failed.
    pub fn failures(&self) -> usize {
        self.rows.iter().filter(|r| !r.ok()).count()
    }

    /// The table: per op and stage, launches, GPU time, the worst error and its tolerance.
    pub fn print(&self) {
        println!(
            "
{:<13} {:<38} {:<24} {:>6} {:>10} {:>7}  check",
            "stage", "op", "shape", "checks", "max err", "tol"
        );
        for r in &self.rows {
            println!(
                "{:<13} {:<38} {:<24} {:>6} {:>10.2e} {:>7.0e}  {}{}",
                r.stage,
                r.op,
                r.shape,
                r.launches,
                r.err,
                r.tol,
                if r.ok() { "ok" } else { "FAIL" },
                if r.what.is_empty() { String::new() } else { format!(" ({})", r.what) }
            );
        }
        for n in &self.notes {
            println!("{n}");
        }
    }
}

/// Relative L2 error (SPEC 3) of `got` against `want`.
pub fn err(got: &[f32], want: &[f64]) -> f64 {
    rel_l2(got, want)
}

/// `[a, b, c]` as text.
pub fn shape_text(s: &[usize]) -> String {
    format!("{s:?}")
}

/// GPU time of the work `f` enqueues on `s`, by events around it, in microseconds.
pub fn stream_us(s: &CudaStream, f: impl FnOnce() -> Res<()>) -> Res<f64> {
    let ctx = s.context();
    // Timing events (cudarc's default flags disable timing).
    let (a, b) = (
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?,
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?,
    );
    a.record(s)?;
    f()?;
    b.record(s)?;
    b.synchronize()?;
    Ok(a.elapsed_ms(&b)? as f64 * 1e3)
}

/// The work `f` enqueues on `s`, captured into a CUDA graph (not launched). `f`'s error, if any, comes after the
/// capture has ended, so the stream is never left capturing.
pub fn capture(s: &Arc<CudaStream>, f: impl FnOnce() -> Res<()>) -> Res<CudaGraph> {
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let captured = f();
    let graph = s.end_capture(sys::CUgraphInstantiate_flags(0))?;
    captured?;
    Ok(graph.ok_or("the capture recorded no graph")?)
}

/// GPU time of one launch without the host in the way: `f` captured 20 times into a graph, replayed once
/// untimed and once between events; the time per launch.
pub fn launch_us(s: &Arc<CudaStream>, f: &mut dyn FnMut() -> Res<()>) -> Res<f64> {
    const REPS: usize = 20;
    let graph = capture(s, || (0..REPS).try_for_each(|_| f()))?;
    graph.launch()?;
    Ok(stream_us(s, || Ok(graph.launch()?))? / REPS as f64)
}

/// Fill a device buffer with 0xFF bytes (NaN in every float format), ordered on `s`.
pub fn poison(s: &CudaStream, b: &CudaSlice<u8>) -> Res<()> {
    let (p, _g) = b.device_ptr(s);
    // SAFETY: the whole allocation, ordered on `s`.
    unsafe { rt::cudarc::driver::result::memset_d8_async(p, 0xff, b.len(), s.cu_stream()) }?;
    Ok(())
}
