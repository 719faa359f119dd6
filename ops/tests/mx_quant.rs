//! `mx.quantize` / `mx.dequantize`: the tile programs (CPU interpreter) are bit-exact with
//! `k3k_reference::mx` on random and edge-case data, reject bad inputs with typed errors, and compile for sm_90a
//! without spills.
use k3k_codegen::{BuildOptions, build};
use k3k_ir::{DType, HostTensor, Knobs};
use k3k_ops::OpError;
use k3k_ops::mx::quant::*;
use k3k_ops::mx::{MxFormat, ScaleRule};
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::Executor;
use k3k_reference::mx as rmx;
use rand::{Rng, SeedableRng, rngs::StdRng};

const FORMATS: [MxFormat; 2] = [MxFormat::Fp4, MxFormat::Fp8];
const RULES: [ScaleRule; 2] = [ScaleRule::Floor, ScaleRule::Ceil];

fn run_case(op: &dyn Operator, p: &Preset, seed: u64, knobs: &Knobs) {
    let inst = op.instance(p, seed).unwrap();
    let plan = inst.plan(knobs).unwrap();
    let out = Executor::Cpu.run(&plan).unwrap_or_else(|e| panic!("{} ({}): {e}", p.name, inst.describe()));
    let r = inst.check(&out).unwrap();
    assert!(r.passed, "{} seed {seed} ({}): {}", p.name, inst.describe(), r.detail);
}

#[test]
fn quantize_is_bit_exact_on_edge_blocks() {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    for fmt in 0..2i64 {
        for rule in 0..2i64 {
            for src in 0..2i64 {
                for (rows, k) in [(17i64, 96i64), (1, 32), (65, 64)] {
                    let p = Preset::new(
                        &format!("R{rows} K{k} fmt{fmt} rule{rule} src{src}"),
                        &[("R", rows), ("K", k), ("fmt", fmt), ("rule", rule), ("src", src)],
                    );
                    run_case(&MxQuantize, &p, rng.random(), &MxQuantize.default_knobs());
                }
            }
        }
    }
    eprintln!("seed {seed}");
}

#[test]
fn dequantize_is_bit_exact_with_nan_scales() {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    for fmt in 0..2i64 {
        for out in 0..2i64 {
            for (rows, k) in [(15i64, 64i64), (63, 32), (1, 96)] {
                let p = Preset::new("d", &[("R", rows), ("K", k), ("fmt", fmt), ("out", out)]);
                run_case(&MxDequantize, &p, rng.random(), &MxDequantize.default_knobs());
            }
        }
    }
}

#[test]
fn random_cases_and_other_knobs() {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    for knobs in [Knobs::new().with("BR", 64i64).with("W", 2i64), Knobs::new().with("BR", 32i64).with("W", 1i64)] {
        for _ in 0..3 {
            let p = MxQuantize.random_case(&mut rng);
            run_case(&MxQuantize, &p, rng.random(), &knobs);
            let p = MxDequantize.random_case(&mut rng);
            run_case(&MxDequantize, &p, rng.random(), &knobs);
        }
    }
}

/// Hand-picked blocks: huge values saturate, tiny ones clamp the exponent, zeros keep their sign, a NaN or an
/// infinity gives scale 255 and zero codes, which dequantize to a NaN block.
#[test]
fn special_blocks_round_trip() {
    let p = |e: i32| 2f32.powi(e);
    let blocks: Vec<Vec<f32>> = vec![
        vec![f32::MAX, -f32::MAX, 1.0],
        vec![p(-149), -p(-149), p(-140)],
        vec![-0.0, 0.0, -0.0],
        vec![1.0, f32::NAN, 2.0],
        vec![-f32::INFINITY, 3.0],
        vec![6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.1],
        vec![448.0, 17.0, 19.0, 464.0, 3.0 * p(-10)],
        vec![7.9 * 8.0, -8.0],
    ];
    let k = 32;
    let mut x = vec![0f32; blocks.len() * k];
    for (i, b) in blocks.iter().enumerate() {
        x[i * k..i * k + b.len()].copy_from_slice(b);
    }
    let rows = blocks.len();
    for fmt in FORMATS {
        for rule in RULES {
            let t = HostTensor::from_f32(DType::F32, &[rows, k], &x);
            let plan = quantize_plan(&t, fmt, rule, &default_knobs()).unwrap();
            let out = Executor::Cpu.run(&plan).unwrap();
            let want = rmx::quantize(&x, rows, k, fmt, rule).unwrap();
            assert_eq!(out.get("s").unwrap().data, want.s, "{fmt:?} {rule:?} scales");
            assert_eq!(out.get("q").unwrap().data, want.q, "{fmt:?} {rule:?} codes");
            assert_eq!(want.s[3], 255);
            let plan = dequantize_plan(&want.q, &want.s, rows, k, fmt, DType::F32, &default_knobs()).unwrap();
            let y = Executor::Cpu.run(&plan).unwrap().get("y").unwrap().to_f32_vec();
            let ref_y = rmx::dequantize(&want).unwrap();
            assert!(y[3 * k..4 * k].iter().all(|v| v.is_nan()), "NaN scale byte -> NaN block");
            assert!(y[4 * k..5 * k].iter().all(|v| v.is_nan()), "NaN scale byte -> NaN block");
            for (i, (a, b)) in y.iter().zip(&ref_y).enumerate() {
                assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{fmt:?} {rule:?} y[{i}] {a} {b}");
            }
            // Signed zeros survive both ways.
            assert!(y[2 * k].is_sign_negative() && y[2 * k] == 0.0);
        }
    }
}

#[test]
fn typed_errors_name_the_argument() {
    let x = HostTensor::from_f32(DType::F32, &[2, 48], &[0.5; 96]);
    let e = quantize_plan(&x, MxFormat::Fp4, ScaleRule::Floor, &default_knobs()).unwrap_err();
    assert!(matches!(&e, OpError::BadInput { arg, .. } if arg == "K"), "{e}");
    assert!(e.to_string().contains("48"), "{e}");
    let e = dequantize_plan(&[0; 32], &[0; 2], 2, 40, MxFormat::Fp4, DType::F32, &default_knobs()).unwrap_err();
    assert!(matches!(&e, OpError::BadInput { arg, .. } if arg == "K"), "{e}");
    let e = dequantize_plan(&[0; 31], &[0; 2], 2, 32, MxFormat::Fp4, DType::F32, &default_knobs()).unwrap_err();
    assert!(matches!(&e, OpError::BadInput { arg, .. } if arg == "q"), "{e}");
    assert!(e.to_string().contains("[R, K/2]"), "{e}");
    let e = dequantize_plan(&[0; 64], &[0; 3], 2, 32, MxFormat::Fp8, DType::F32, &default_knobs()).unwrap_err();
    assert!(matches!(&e, OpError::BadInput { arg, .. } if arg == "s"), "{e}");
    let p = Preset::new("bad", &[("R", 4), ("K", 33)]);
    assert!(matches!(MxQuantize.instance(&p, 1), Err(OpError::BadInput { .. })));
    assert!(matches!(MxDequantize.instance(&p, 1), Err(OpError::BadInput { .. })));
    let bad = Knobs::new().with("BR", 48i64).with("W", 2i64);
    assert!(matches!(quantize_plan(&x, MxFormat::Fp4, ScaleRule::Floor, &bad), Err(OpError::BadInput { .. })));
    let x = HostTensor::from_f32(DType::F32, &[2, 64], &[0.5; 128]);
    assert!(matches!(quantize_plan(&x, MxFormat::Fp4, ScaleRule::Floor, &bad), Err(OpError::InvalidKnobs { .. })));
}

#[test]
fn every_variant_compiles_without_spills() {
    let knobs = [default_knobs(), Knobs::new().with("BR", 256i64).with("W", 8i64)];
    for kn in &knobs {
        for fmt in FORMATS {
            for rule in RULES {
                for src in [DType::F32, DType::Bf16] {
                    let k = build_quantize(&QuantSpec { fmt, rule, src }, kn).unwrap();
                    let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                    let r = m.resources.clone().unwrap();
                    eprintln!("{}: {r:?}", k.name);
                    assert!(!r.spills(), "{}: {r:?}", k.name);
                }
            }
            for out in [DType::F32, DType::Bf16] {
                let k = build_dequantize(&DequantSpec { fmt, out }, kn).unwrap();
                let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                let r = m.resources.clone().unwrap();
                eprintln!("{}: {r:?}", k.name);
                assert!(!r.spills(), "{}: {r:?}", k.name);
            }
        }
    }
}
