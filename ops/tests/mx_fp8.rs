//! `mxfp4_matmul` with `MMA=fp8` (MXFP8 activations on FP8 tensor cores, `k3k_ops::mx::fp8`): the CPU backends
//! run the kernel against the f64 reference (SEMANTICS.md section 3, with the MX matmul's rule for cancelling
//! terms) on fresh random inputs with edge sizes, realistic and wide scale bytes (0..=20, 129..=160, NaN
//! blocks); refused variants and bad K give typed errors; the kernels assemble for sm_90a without spills.
use k3k_ir::Knobs;
use k3k_ops::OpError;
use k3k_ops::mx::matmul::Mxfp4Matmul;
use k3k_ops::op::{Operator, Preset};
use rand::{Rng, SeedableRng, rngs::StdRng};

#[path = "common/mx_run.rs"]
#[allow(dead_code)]
mod mx_run;
use mx_run::run;

fn fp8(pairs: &[(&str, i64)]) -> Knobs {
    let mut k = k3k_ops::mx::matmul::default_knobs();
    k.set("MMA", "fp8");
    for (n, v) in pairs {
        k.set(n, *v);
    }
    k
}

fn dense(m: i64, k: i64, n: i64, wide: i64) -> Preset {
    Preset::new(&format!("fp8 M{m} K{k} N{n} wide{wide}"), &[("M", m), ("K", k), ("N", n), ("wide", wide), ("act", 1)])
}

#[test]
fn fp8_dense_matches_reference() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (m, k, n, wide) in [(1i64, 32i64, 8i64, 0i64), (17, 96, 40, 1), (65, 160, 72, 0), (63, 288, 17, 1)] {
        // The default generation (F8V=0 = 1: cp.async tiles, factors in shared memory) and the second (F8V=2: TMA
        // code tiles, activation factors in registers).
        for kn in [
            fp8(&[("BM", 64), ("BN", 64), ("STAGES", 3), ("F8V", 2)]),
            fp8(&[("BM", 128), ("BN", 136), ("F8V", 2)]),
            fp8(&[("BM", 64), ("BN", 72)]),
            // F8V=3: folded weight scales where the rows allow (wide = 0), else the F8V=2 kernel (wide = 1).
            fp8(&[("BM", 128), ("BN", 64), ("F8V", 3)]),
        ] {
            run(&dense(m, k, n, wide), rng.random(), &kn);
        }
    }
}

#[test]
fn fp8_one_temporary_and_wide_tiles() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    run(&dense(70, 384, 200, 1), rng.random(), &fp8(&[("BM", 64), ("BN", 200), ("STAGES", 3)]));
}

#[test]
fn fp8_refuses_what_it_does_not_cover() {
    let op = Mxfp4Matmul;
    let seed = 7;
    // bf16 activations, GLU epilogue, packed weights: typed knob errors.
    for p in [
        Preset::new("bf16 act", &[("M", 4), ("K", 64), ("N", 16)]),
        Preset::new("glu", &[("M", 4), ("K", 64), ("N", 16), ("act", 1), ("epilogue", 1)]),
        Preset::new("packed", &[("M", 4), ("K", 64), ("N", 16), ("act", 1), ("packed", 1)]),
    ] {
        let inst = op.instance(&p, seed).unwrap();
        match inst.plan(&fp8(&[])) {
            Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains("MMA=fp8 covers"), "{why}"),
            other => panic!("{}: expected a knob error, got {:?}", p.name, other.map(|_| ())),
        }
    }
    let inst = op.instance(&dense(4, 64, 16, 0), seed).unwrap();
    assert!(matches!(inst.plan(&fp8(&[("BM", 96)])), Err(OpError::InvalidKnobs { .. })));
    assert!(matches!(inst.plan(&fp8(&[("F8V", 9)])), Err(OpError::InvalidKnobs { .. })));
    // K not a multiple of 32: the operator's typed error, whatever the path.
    let bad = Preset::new("K48", &[("M", 4), ("K", 48), ("N", 16), ("act", 1)]);
    assert!(op.instance(&bad, seed).is_err() || op.instance(&bad, seed).unwrap().plan(&fp8(&[])).is_err());
}

/// The FP8 kernels at the benchmark shape compile for sm_90a (NVRTC + ptxas) without spills, at the tile shapes
/// the device script times.
#[test]
fn fp8_kernels_assemble_without_spills() {
    use k3k_codegen::{BuildOptions, build};
    let op = Mxfp4Matmul;
    let p = Preset::new("M4096", &[("M", 4096), ("N", 6144), ("K", 3584), ("act", 1)]);
    // (BN=256 with one temporary takes 255 registers and spills: 2 x 128 accumulator registers per thread.)
    for kn in [fp8(&[]), fp8(&[("BM", 64), ("BN", 128), ("F8V", 2)]), fp8(&[("F8V", 2)]), fp8(&[("F8V", 3)])] {
        for k in op.kernels(&p, &kn).unwrap() {
            let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            let r = m.resources.clone().unwrap();
            eprintln!("{}: {r:?} smem {}", k.name, k.shared_bytes());
            assert!(!r.spills(), "{}: {r:?}", k.name);
        }
    }
}
