//! Fast, parallel, seeded generation of large random inputs (GiB-sized benchmark tensors included).

use k3k_ir::{DType, HostTensor};
use rayon::prelude::*;

const CHUNK: usize = 1 << 16;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fill `out` with `f(u)` for `u` uniform in [0, 1), in parallel, deterministic for a seed.
pub fn fill_uniform(out: &mut [f32], seed: u64, f: impl Fn(f32) -> f32 + Sync) {
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, chunk)| {
        let mut s = splitmix(seed ^ splitmix(ci as u64));
        for v in chunk.iter_mut() {
            s = splitmix(s);
            *v = f((s >> 40) as f32 * (1.0 / (1u64 << 24) as f32));
        }
    });
}

/// Uniform values in [lo, hi).
pub fn uniform(n: usize, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
    let mut v = vec![0f32; n];
    fill_uniform(&mut v, seed, |u| lo + (hi - lo) * u);
    v
}

/// Approximately normal values (a sum of 4 uniforms in [-1, 1), scaled to unit variance) times `std`.
pub fn normal(n: usize, std: f32, seed: u64) -> Vec<f32> {
    let scale = std * (3.0f32 / 4.0).sqrt();
    let mut out = vec![0f32; n];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, chunk)| {
        let mut s = splitmix(seed ^ splitmix(ci as u64 ^ 0x6e6f726d));
        for v in chunk.iter_mut() {
            let mut acc = 0f32;
            for _ in 0..4 {
                s = splitmix(s);
                acc += (s >> 40) as f32 * (2.0 / (1u64 << 24) as f32) - 1.0;
            }
            *v = acc * scale;
        }
    });
    out
}

/// A tensor from f32 values rounded to `dtype`, converted in parallel.
pub fn tensor(dtype: DType, shape: &[usize], vals: &[f32]) -> HostTensor {
    let n: usize = shape.iter().product();
    assert_eq!(n, vals.len(), "data::tensor: {} values for shape {shape:?}", vals.len());
    let data: Vec<u8> = match dtype {
        DType::Bf16 => vals.par_iter().flat_map_iter(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes()).collect(),
        DType::F16 => vals.par_iter().flat_map_iter(|v| half::f16::from_f32(*v).to_bits().to_le_bytes()).collect(),
        DType::F32 => vals.par_iter().flat_map_iter(|v| v.to_le_bytes()).collect(),
        other => return HostTensor::from_f32(other, shape, vals),
    };
    HostTensor::from_bytes(dtype, shape, data)
}

/// Round values to bf16 in place (so host copies equal what the device sees).
pub fn round_bf16(v: &mut [f32]) {
    v.par_iter_mut().for_each(|x| *x = half::bf16::from_f32(*x).to_f32());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let a = uniform(100_000, -2.0, 3.0, 7);
        assert_eq!(a, uniform(100_000, -2.0, 3.0, 7));
        assert_ne!(a, uniform(100_000, -2.0, 3.0, 8));
        assert!(a.iter().all(|v| (-2.0..3.0).contains(v)));
        let mean: f32 = a.iter().sum::<f32>() / a.len() as f32;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
        let n = normal(100_000, 2.0, 1);
        let var: f32 = n.iter().map(|v| v * v).sum::<f32>() / n.len() as f32;
        assert!((var - 4.0).abs() < 0.2, "{var}");
    }
}
