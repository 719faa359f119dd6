//! The grouped GEMM tile program, executed by the CPU interpreter, equals a plain f64 product.
use k3k_codegen::cpu::interp::{InterpOptions, run};
use k3k_ir::*;
use k3k_ops::latent_moe_gemm::*;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn bf(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

#[test]
fn grouped_gemm_small_matches_f64() {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    let (k, n) = (40usize, 70usize);
    let counts = [5usize, 0, 17, 1];
    let g = counts.len();
    let m: usize = counts.iter().sum();
    let offs: Vec<i64> = counts
        .iter()
        .scan(0i64, |s, c| {
            *s += *c as i64;
            Some(*s)
        })
        .collect();
    let x: Vec<f32> = (0..m * k).map(|_| bf(rng.random_range(-1.0..1.0))).collect();
    let w: Vec<f32> = (0..g * n * k).map(|_| bf(rng.random_range(-1.0..1.0))).collect();
    let spec = GemmSpec::for_shape(true, Epilogue::None, false, k, n);
    // The mma.sync program on a 2x2 warp grid and the wgmma program on one warpgroup.
    for knobs in [
        sync_knobs().with("BM", 64i64).with("BN", 64i64).with("WM", 2i64).with("WN", 2i64),
        default_knobs().with("BM", 64i64).with("BN", 64i64).with("WM", 4i64),
    ] {
        let kern = build_kernel(&spec, &knobs).unwrap();
        let mut ts = vec![
            HostTensor::from_f32(DType::Bf16, &[m, k], &x),
            HostTensor::from_f32(DType::Bf16, &[g, n, k], &w),
            HostTensor::from_i64(DType::I32, &[g], &offs),
            HostTensor::zeros(DType::Bf16, &[m, n]),
        ];
        ts[3].poison();
        run(&kern, &mut ts, &[], InterpOptions::default()).unwrap();
        let y = ts[3].to_f32_vec();
        let mut row = 0;
        for (gi, &c) in counts.iter().enumerate() {
            for r in row..row + c {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| x[r * k + p] as f64 * w[(gi * n + j) * k + p] as f64).sum();
                    let got = y[r * n + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-2 * (1.0 + want.abs()),
                        "seed {seed} r {r} j {j}: {got} vs {want}"
                    );
                }
            }
            row += c;
        }
    }
}
