//! Helpers shared by the primitive tests: a small deterministic RNG, the compile check, CPU runs.
#![allow(dead_code)]

pub mod cases;

use k3k_codegen::cpu::interp::{InterpOptions, run};
use k3k_codegen::{BuildOptions, Resources, build};
use k3k_ir::*;

/// A xorshift generator: tests stay reproducible without extra dependencies.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in [lo, hi).
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    /// Uniform in [lo, hi).
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }
    /// `n` floats in [lo, hi), rounded to `dtype`.
    pub fn vals(&mut self, dtype: DType, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        let t = HostTensor::from_f32(dtype, &[n], &(0..n).map(|_| self.f32(lo, hi)).collect::<Vec<_>>());
        t.to_f32_vec()
    }
}

/// Render, compile with NVRTC and assemble with ptxas for sm_90a; the kernel must not spill, nor have its `wgmma`
/// products serialized by ptxas.
pub fn compiles(k: &Kernel) -> Resources {
    let m = match build(k, BuildOptions { assemble: true }) {
        Ok(m) => m,
        Err(e) => panic!("{e}\n{}", k3k_codegen::render(k).unwrap_or_default()),
    };
    let r = m.resources.clone().expect("assembled");
    assert!(!r.spills(), "kernel `{}` spills: {r:?}", k.name);
    assert!(!r.wgmma_serialized, "kernel `{}`: ptxas serialized its wgmma products: {r:?}", k.name);
    r
}

/// Run on the CPU interpreter with default options.
pub fn interp(k: &Kernel, ts: &mut [HostTensor], scalars: &[(&str, SymValue)]) {
    if let Err(e) = run(k, ts, scalars, InterpOptions::default()) {
        panic!("{e}");
    }
}

/// Assert two float slices agree within `tol * (1 + |want|)`.
pub fn close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}[{i}]: got {g}, want {w}");
    }
}
