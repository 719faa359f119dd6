//! The grouped GEMM tile program, executed by the CPU interpreter, equals a plain f64 product.
use k3k_codegen::cpu::interp::InterpOptions;
use k3k_ops::latent_moe_gemm::*;

#[path = "common/gemm_f64.rs"]
mod gemm_f64;

use gemm_f64::{Case, check_case, seeded};

#[test]
fn grouped_gemm_small_matches_f64() {
    let (seed, mut rng) = seeded();
    let case = Case(&[5, 0, 17, 1], true, Epilogue::None, false, 40, 70);
    // The mma.sync program on a 2x2 warp grid and the wgmma program on one warpgroup.
    for knobs in [
        sync_knobs().with("BM", 64i64).with("BN", 64i64).with("WM", 2i64).with("WN", 2i64),
        default_knobs().with("BM", 64i64).with("BN", 64i64).with("WM", 4i64),
    ] {
        check_case(seed, &mut rng, case, &knobs, &[InterpOptions::default().num_sms], |_| {});
    }
}

/// The overlapped tile walk (next tile's group search and first stages issued before the current tile's
/// epilogue) against f64, on grids small enough that every block walks many tiles across ragged and empty
/// groups; both MMA paths, K sizes around the 64-wide stage (a K=1 stage, a partial last stage, several stages).
#[test]
fn overlapped_tile_walk_matches_f64() {
    let (seed, mut rng) = seeded();
    let counts = [0usize, 17, 65, 0, 1, 130, 0, 63];
    for (k, n) in [(1usize, 130usize), (65, 70), (200, 64)] {
        for overlap in ["on", "off"] {
            for knobs in [
                sync_knobs().with("BM", 64i64).with("BN", 64i64).with("WM", 2i64).with("WN", 2i64),
                default_knobs().with("BM", 64i64).with("BN", 64i64).with("WM", 4i64),
                default_knobs().with("BM", 64i64).with("BN", 32i64).with("WM", 4i64).with("STAGES", 3i64),
            ] {
                let case = Case::plain(&counts, k, n);
                check_case(seed, &mut rng, case, &knobs.with("OVERLAP", overlap), &[1, 3], |_| {});
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
