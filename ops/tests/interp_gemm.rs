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

/// The overlapped tile walk (next tile's group search and first stages issued before the current tile's
/// epilogue) against f64, on grids small enough that every block walks many tiles across ragged and empty
/// groups; both MMA paths, K sizes around the 64-wide stage (a K=1 stage, a partial last stage, several stages).
#[test]
fn overlapped_tile_walk_matches_f64() {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    let counts = [0usize, 17, 65, 0, 1, 130, 0, 63];
    let g = counts.len();
    let m: usize = counts.iter().sum();
    let offs: Vec<i64> = counts
        .iter()
        .scan(0i64, |s, c| {
            *s += *c as i64;
            Some(*s)
        })
        .collect();
    for (k, n) in [(1usize, 130usize), (65, 70), (200, 64)] {
        let x: Vec<f32> = (0..m * k).map(|_| bf(rng.random_range(-1.0..1.0))).collect();
        let w: Vec<f32> = (0..g * n * k).map(|_| bf(rng.random_range(-1.0..1.0))).collect();
        let spec = GemmSpec::for_shape(true, Epilogue::None, false, k, n);
        for overlap in ["on", "off"] {
            for knobs in [
                sync_knobs().with("BM", 64i64).with("BN", 64i64).with("WM", 2i64).with("WN", 2i64),
                default_knobs().with("BM", 64i64).with("BN", 64i64).with("WM", 4i64),
                default_knobs().with("BM", 64i64).with("BN", 32i64).with("WM", 4i64).with("STAGES", 3i64),
            ] {
                let knobs = knobs.with("OVERLAP", overlap);
                let kern = build_kernel(&spec, &knobs).unwrap();
                for num_sms in [1i64, 3] {
                    let mut ts = vec![
                        HostTensor::from_f32(DType::Bf16, &[m, k], &x),
                        HostTensor::from_f32(DType::Bf16, &[g, n, k], &w),
                        HostTensor::from_i64(DType::I32, &[g], &offs),
                        HostTensor::zeros(DType::Bf16, &[m, n]),
                    ];
                    ts[3].poison();
                    run(&kern, &mut ts, &[], InterpOptions { num_sms }).unwrap();
                    let y = ts[3].to_f32_vec();
                    let mut row = 0;
                    for (gi, &c) in counts.iter().enumerate() {
                        for r in row..row + c {
                            for j in 0..n {
                                let want: f64 =
                                    (0..k).map(|p| x[r * k + p] as f64 * w[(gi * n + j) * k + p] as f64).sum();
                                let got = y[r * n + j] as f64;
                                assert!(
                                    (got - want).abs() <= 1e-2 * (1.0 + want.abs()),
                                    "seed {seed} {knobs} sms {num_sms} K {k} N {n} r {r} j {j}: {got} vs {want}"
                                );
                            }
                        }
                        row += c;
                    }
                }
            }
        }
    }
}

/// Knob values outside the declared ones are typed errors naming the knobs.
#[test]
fn overlap_knob_rejects_unknown_values() {
    let spec = GemmSpec::for_shape(true, Epilogue::None, false, 64, 64);
    let err = build_kernel(&spec, &default_knobs().with("OVERLAP", "maybe")).unwrap_err().to_string();
    assert!(err.contains("OVERLAP"), "{err}");
}
