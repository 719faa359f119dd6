//! `mxfp4_matmul` `PATH=dq_gemm` (`mx::prefill`): the weight dequant kernel is bit-exact against
//! `reference::mx::dequantize` (both layouts, NaN / huge / tiny scale blocks, K and N tails, skipped empty
//! experts); the whole path (dequant + `latent_moe_gemm`) matches the f64 reference on the dequantized weights
//! (CPU interpreter) at edge sizes, grouped with empty groups, GLU epilogues, routing weights, MXFP8
//! activations and several GEMM knob sets; `PATH=auto` takes it above the threshold only; invalid knob sets
//! give typed errors; the preset shapes compile for sm_90a without spills.
use k3k_codegen::{BuildOptions, build};
use k3k_ir::{DType, HostTensor, Knobs};
use k3k_ops::OpError;
use k3k_ops::latent_moe_gemm::Epilogue;
use k3k_ops::mx::matmul::*;
use k3k_ops::mx::{pack, prefill};
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::{Executor, Role};
use k3k_reference::mx as rmx;
use rand::{Rng, SeedableRng, rngs::StdRng};

#[path = "common/mx_run.rs"]
mod mx_run;
use mx_run::{dense_preset, grouped_preset, knobs, run};

fn dq(pairs: &[(&str, i64)]) -> Knobs {
    knobs(pairs).with("PATH", "dq_gemm")
}

/// The first kernel's recorded PATH at these dims and knobs.
fn path(dims: &[(&str, i64)], kn: &Knobs) -> String {
    let ks = Mxfp4Matmul.kernels(&Preset::new("auto", dims), kn).unwrap();
    ks[0].knobs.str("PATH").unwrap().to_string()
}

/// `PATH=dq_gemm` with the flat 16-byte-store dequant kernel (`DQ=wide`) and `u` words per thread (0: default).
fn dqw(u: i64) -> Knobs {
    dq(&[("DQU", u)]).with("DQ", "wide")
}

/// `DQ=wide` with `u` words per thread as a persistent grid-stride loop of `p` CTAs per SM (the interpreter's
/// NUM_SMS is 4, so every CTA of a shape above a few thousand words loops).
fn dqp(u: i64, p: i64) -> Knobs {
    dqw(u).with("DQP", p)
}

/// The dequant kernel knob sets every dequant test runs: the default (`DQ=auto`: the wide kernel at 2 words per
/// thread), the register-tile kernel, and the wide kernel at every words-per-thread value, one CTA per chunk and
/// persistent.
fn dq_kernels() -> Vec<Knobs> {
    vec![dq(&[]), dq(&[]).with("DQ", "tile"), dqw(0), dqw(1), dqw(4), dqw(8), dqp(0, 1), dqp(4, 3)]
}

/// Run the dequant launch alone (its scratch made an output) and compare it bit for bit with the reference's
/// dequantized values (exact in bf16), NaN blocks as NaN; grouped experts without tokens are not compared.
/// Returns whether a NaN was expected somewhere.
fn check_dequant(w: &Fp4Weights, counts: &[usize], kn: &Knobs, seed: u64) -> bool {
    let (g, n, k) = (w.groups, w.n, w.k);
    let mut rng = StdRng::seed_from_u64(seed);
    let m: usize = counts.iter().sum();
    let xv: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let x = HostTensor::from_f32(DType::Bf16, &[m, k], &xv);
    let offs: Vec<i32> = counts
        .iter()
        .scan(0i32, |a, c| {
            *a += *c as i32;
            Some(*a)
        })
        .collect();
    let inp = MatInputs { x: Act::Bf16(&x), offs: (g > 1).then_some(&offs[..]), p: None, epilogue: Epilogue::None };
    let mut plan = matmul_plan(w, &inp, kn).unwrap_or_else(|e| panic!("[{kn}]: {e}"));
    assert_eq!(plan.steps.len(), 2, "dequant + GEMM");
    let name = plan.steps[0].kernel.name.clone();
    assert!(name.starts_with("k3k_mxfp4_dq_w"), "{name}");
    let is_wide = kn.0.get("DQ").is_some_and(|_| matches!(kn.str("DQ").unwrap(), "wide" | "auto"));
    assert_eq!(name.contains("_wide_"), is_wide, "{name} [{kn}]");
    assert_eq!(plan.steps[0].kernel.knobs.str("PATH").unwrap(), "dq_gemm");
    plan.steps.truncate(1);
    let wd = plan.index("wd").unwrap();
    plan.buffers[wd].role = Role::Output;
    let got = Executor::Cpu.run(&plan).unwrap().get("wd").unwrap().to_f32_vec();
    assert_eq!(got.len(), g * n * k);
    let mut nan_seen = false;
    for gi in 0..g {
        if counts[gi] == 0 && g > 1 {
            // Rows of experts without tokens are skipped (their scratch stays poisoned) unless a dequant
            // window also covers rows of an expert with tokens.
            continue;
        }
        let want = rmx::dequantize(&w.group_tensor(gi).unwrap()).unwrap();
        let mine = &got[gi * n * k..(gi + 1) * n * k];
        for (i, (a, b)) in mine.iter().zip(&want).enumerate() {
            nan_seen |= b.is_nan();
            assert!(
                (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits(),
                "{name} G{g} N{n} K{k}: group {gi} row {} col {}: {a} vs {b} [{kn}]",
                i / k,
                i % k
            );
        }
    }
    nan_seen
}

fn weights(g: usize, n: usize, k: usize, packed: bool, q: Vec<u8>, s: Vec<u8>) -> Fp4Weights {
    let qb = if packed { WeightBytes::Packed(pack::pack(&q, g * n, k).unwrap()) } else { WeightBytes::Natural(q) };
    Fp4Weights { groups: g, n, k, q: qb, s }
}

/// The dequant launch alone: bit for bit the reference's dequantized values, every dequant kernel, both layouts,
/// narrow and wide (NaN, tiny, huge) scales; with grouped empty experts, only the rows of experts with tokens.
#[test]
fn dequant_kernel_is_bit_exact() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (g, n, k, packed, wide, counts) in [
        (1usize, 70usize, 160usize, false, true, vec![3usize]),
        (1, 64, 128, true, false, vec![1]),
        (1, 17, 32, true, true, vec![5]),
        (1, 129, 416, false, false, vec![2]),
        (3, 33, 96, true, true, vec![4, 0, 9]),
        (4, 20, 288, false, true, vec![0, 2, 0, 0]),
    ] {
        let seed: u64 = rng.random();
        let (q, s) = random_weights(g, n, k, wide, seed);
        let w = weights(g, n, k, packed, q, s);
        for kn in dq_kernels() {
            let nan_seen = check_dequant(&w, &counts, &kn, seed);
            if wide && g == 1 && n * k >= 64 * 128 {
                assert!(nan_seen, "wide scales include NaN blocks");
            }
        }
    }
}

/// Edge shapes for the wide kernel's flat word stream: N 1 / 15 / 17 / 65, K 32 / 96 / 4000 (not multiples of the
/// tile kernel's 128-column window), word counts below one CTA, whole CTAs and a partial last CTA, grouped with
/// empty experts (first, middle and last), both layouts and scale ranges; every dequant kernel.
#[test]
fn dequant_kernels_at_edge_shapes() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (g, n, k, counts) in [
        (1usize, 1usize, 32usize, vec![1usize]),
        (1, 15, 96, vec![2]),
        (1, 17, 4000, vec![1]),
        (1, 65, 96, vec![3]),
        (1, 65, 4000, vec![1]),
        (1, 1, 4000, vec![1]),
        (5, 17, 96, vec![0, 3, 0, 0, 2]),
        (3, 40, 1024, vec![2, 0, 1]),
        (4, 15, 4000, vec![0, 1, 1, 0]),
    ] {
        for (packed, wide) in [(false, false), (true, true), (true, false), (false, true)] {
            let seed: u64 = rng.random();
            let (q, s) = random_weights(g, n, k, wide, seed);
            let w = weights(g, n, k, packed, q, s);
            for kn in [dq(&[]), dqw(0), dqw(8), dqp(0, 1), dqp(1, 2)] {
                check_dequant(&w, &counts, &kn, seed);
            }
        }
    }
}

/// The four fold / finite promise combinations with scale bytes at their limits: 0 (the subnormal 2^-127 times
/// e2m1, down to 2^-128), 1, 127, 128 (fold), 255 (NaN blocks), 129 / 200 / 254 (no fold; 254 overflows 6 x 2^127
/// to inf), every nibble value in every block; both layouts, every dequant kernel.
#[test]
fn dequant_kernels_keep_scale_edge_semantics() {
    let (g, n, k) = (1usize, 66usize, 512usize);
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (bytes, fold, finite) in [
        (vec![0u8, 1, 127, 128, 120], true, true),
        (vec![0u8, 1, 127, 128, 255], true, false),
        (vec![0u8, 1, 129, 200, 254], false, true),
        (vec![0u8, 254, 129, 255, 127], false, false),
    ] {
        let seed: u64 = rng.random();
        // Every byte holds two random nibbles; the first 8 bytes of each block hold all 16 nibble values.
        let mut q: Vec<u8> = (0..g * n * k / 2).map(|_| rng.random()).collect();
        for (i, b) in q.iter_mut().enumerate() {
            let j = i % 16;
            if j < 8 {
                *b = (2 * j as u8) | ((2 * j as u8 + 1) << 4);
            }
        }
        let s: Vec<u8> = (0..g * n * k / 32).map(|_| bytes[rng.random_range(0..bytes.len())]).collect();
        assert_eq!(scales_foldable(&s), fold);
        assert_eq!(!s.contains(&255), finite);
        for packed in [false, true] {
            let w = weights(g, n, k, packed, q.clone(), s.clone());
            for kn in [dq(&[]), dqw(0), dqw(1), dqp(0, 1)] {
                let nan_seen = check_dequant(&w, &[2], &kn, seed);
                assert_eq!(nan_seen, !finite, "{bytes:?}");
            }
        }
    }
}

#[test]
fn dense_edges_on_the_dq_gemm_path() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (m, k, n, packed, wide) in [
        (1i64, 32i64, 16i64, 0i64, 0i64),
        (15, 64, 17, 1, 1),
        (17, 96, 40, 0, 1),
        (63, 32, 8, 1, 0),
        (65, 64, 33, 0, 0),
        (130, 160, 70, 1, 1),
    ] {
        let p = dense_preset("dq", (m, k, n, packed, wide));
        for kn in [dq(&[]), dqw(0)] {
            assert_eq!(run(&p, rng.random(), &kn), 2);
        }
    }
}

#[test]
fn grouped_epilogues_activations_and_knob_points() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (epi, pw, packed, wide, act) in
        [(0i64, 0i64, 0i64, 1i64, 0i64), (1, 1, 1, 0, 1), (2, 1, 0, 1, 1), (1, 0, 0, 0, 0), (0, 1, 1, 1, 0)]
    {
        let p = grouped_preset("dq grouped", 65, (epi, pw, packed, wide, act));
        for kn in [dq(&[]), dqw(0)] {
            let launches = run(&p, rng.random(), &kn);
            assert_eq!(launches, if act == 1 { 3 } else { 2 });
        }
    }
    // GEMM knob sets: one warpgroup, narrower tiles, three stages, n raster, the mma.sync GEMM.
    let p = Preset::new(
        "dq knobs",
        &[("G", 3), ("c0", 15), ("c1", 0), ("c2", 70), ("K", 224), ("N", 48), ("epilogue", 1), ("p", 1)],
    );
    for kn in [
        dq(&[("BM", 64)]),
        dq(&[("BN", 128), ("STAGES", 3)]),
        dq(&[]).with("RASTER", "n"),
        dq(&[]).with("MMA", "sync"),
        dq(&[("BN", 128), ("BK", 64), ("WA", 4), ("WB", 2)]).with("MMA", "sync"),
    ] {
        run(&p, rng.random(), &kn);
    }
    let p = Preset::new("dq dense knobs", &[("M", 33), ("K", 160), ("N", 99), ("packed", 1), ("act", 1)]);
    for kn in [dq(&[("BM", 64), ("BN", 64)]), dq(&[]).with("MMA", "sync")] {
        run(&p, rng.random(), &kn);
    }
}

#[test]
fn empty_problems_on_the_dq_gemm_path() {
    let p = Preset::new("empty", &[("G", 2), ("c0", 0), ("c1", 0), ("K", 64), ("N", 16), ("epilogue", 1)]);
    assert_eq!(run(&p, 3, &dq(&[])), 0);
}

/// `PATH=auto`: dq_gemm from 2 token tiles of 128 rows per expert with tokens (dense M > 128) with every other
/// knob automatic; the in-kernel paths below, and with explicit in-kernel knobs.
#[test]
fn automatic_choice_and_threshold() {
    let auto = default_knobs();
    let dense = |m: i64, packed: i64| vec![("M", m), ("N", 6144), ("K", 3584), ("packed", packed)];
    for packed in [0, 1] {
        assert_eq!(path(&dense(4096, packed), &auto), "dq_gemm");
        assert_eq!(path(&dense(129, packed), &auto), "dq_gemm");
        assert_eq!(path(&dense(128, packed), &auto), "tile");
        assert_eq!(path(&dense(64, packed), &auto), "tile");
    }
    assert_eq!(path(&dense(1, 1), &auto), "gemv");
    let act8 = [("M", 4096), ("N", 6144), ("K", 3584), ("packed", 1), ("act", 1)];
    assert_eq!(path(&act8, &auto), "dq_gemm");
    assert_eq!(Mxfp4Matmul.kernels(&Preset::new("a", &act8), &auto).unwrap().len(), 3);
    // Grouped: 28 experts x 4 tokens takes the register-ring gemv kernel (a prediction, see mx_matmul's
    // automatic-knob test); 28 x mean 1024 (ragged) takes dq_gemm; 28 x 200 (two tiles each) too, 28 x 128 (one)
    // not.
    assert_eq!(path(&[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)], &auto), "gemv");
    assert_eq!(path(&[("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("packed", 1)], &auto), "dq_gemm");
    assert_eq!(path(&[("G", 28), ("per", 200), ("N", 6144), ("K", 3584), ("packed", 1)], &auto), "dq_gemm");
    assert_eq!(path(&[("G", 28), ("per", 128), ("N", 6144), ("K", 3584), ("packed", 1)], &auto), "tile");
    // Explicit in-kernel knobs keep the in-kernel paths (the old wgmma path is PATH=tile).
    for kn in [
        auto.clone().with("PATH", "tile"),
        auto.clone().with("BN", 256i64),
        auto.clone().with("MMA", "wgmma"),
        auto.clone().with("SPLIT", 2i64),
    ] {
        assert_eq!(path(&dense(4096, 1), &kn), "tile", "{kn}");
    }
    let old = Mxfp4Matmul.kernels(&Preset::new("old", &dense(4096, 1)), &auto.clone().with("PATH", "tile")).unwrap();
    assert_eq!(old[0].knobs.str("MMA").unwrap(), "wgmma");
    assert_eq!(old[0].knobs.u32("BN").unwrap(), 256);
    // The automatic dq_gemm plan: the GEMM is latent_moe_gemm's default wgmma kernel.
    let ks = Mxfp4Matmul.kernels(&Preset::new("new", &dense(4096, 1)), &auto).unwrap();
    assert_eq!(ks.len(), 2);
    assert_eq!(ks[1].knobs, k3k_ops::latent_moe_gemm::default_knobs());
    // Re-resolving the recorded knobs gives the same kernels.
    let again = Mxfp4Matmul.kernels(&Preset::new("new", &dense(4096, 1)), &ks[0].knobs).unwrap();
    assert_eq!(
        again.iter().map(k3k_ir::stable_hash).collect::<Vec<_>>(),
        ks.iter().map(k3k_ir::stable_hash).collect::<Vec<_>>()
    );
    // And runs at an automatic size on the interpreter (dense M 129 with small N and K).
    let p = Preset::new("auto dq", &[("M", 129), ("K", 64), ("N", 24), ("packed", 1), ("epilogue", 2), ("p", 1)]);
    assert_eq!(path(&[("M", 129), ("K", 64), ("N", 24), ("packed", 1), ("epilogue", 2), ("p", 1)], &auto), "dq_gemm");
    assert_eq!(run(&p, 11, &auto), 2);
}

#[test]
fn invalid_knobs_are_typed_errors() {
    let p = Preset::new("d", &[("M", 4), ("K", 64), ("N", 32)]);
    let inst = Mxfp4Matmul.instance(&p, 1).unwrap();
    for kn in [
        dq(&[("SPLIT", 2)]),
        dq(&[("CPS", 4)]),
        dq(&[]).with("DEC", "bits"),
        dq(&[]).with("FIN", "last"),
        dq(&[]).with("PF", "on"),
        dq(&[("BK", 32)]).with("MMA", "wgmma"),
        dq(&[("WA", 3)]),
        dq(&[]).with("RASTER", "z"),
        dq(&[]).with("MMA", "tensor"),
        dq(&[]).with("DQ", "z"),
        dqw(3),
        dqw(16),
        dqp(0, 33),
        dq(&[("DQP", 1)]).with("DQ", "tile"),
    ] {
        match inst.plan(&kn) {
            Err(OpError::InvalidKnobs { op, .. }) => assert_eq!(op, "mxfp4_matmul", "{kn}"),
            other => panic!("{kn}: {:?}", other.map(|p| p.steps.len())),
        }
    }
    // Bad inputs are still named before any path is chosen.
    let x = HostTensor::from_f32(DType::Bf16, &[4, 64], &[0.5; 256]);
    let inp = MatInputs { x: Act::Bf16(&x), offs: None, p: None, epilogue: Epilogue::None };
    let w = Fp4Weights { groups: 1, n: 8, k: 64, q: WeightBytes::Natural(vec![0; 8 * 31]), s: vec![127; 16] };
    match matmul_plan(&w, &inp, &dq(&[])) {
        Err(OpError::BadInput { arg, .. }) => assert!(arg.starts_with("wq"), "{arg}"),
        other => panic!("{:?}", other.map(|p| p.steps.len())),
    }
}

/// The dq_gemm kernels of the prefill presets (and GEMM knob points of the bench lines) assemble for sm_90a
/// without spills.
#[test]
fn prefill_kernels_compile_without_spills() {
    let op = Mxfp4Matmul;
    let m4096 = |extra: &[(&'static str, i64)]| {
        let mut d = vec![("M", 4096i64), ("N", 6144), ("K", 3584)];
        d.extend_from_slice(extra);
        d
    };
    for (dims, kn) in [
        (m4096(&[("packed", 1)]), default_knobs()),
        (m4096(&[]), default_knobs()),
        (m4096(&[("packed", 1), ("act", 1)]), default_knobs()),
        (m4096(&[("packed", 1), ("wide", 1)]), dq(&[])),
        (m4096(&[("packed", 1)]), dq(&[("STAGES", 3)])),
        (m4096(&[("packed", 1)]), dq(&[("BN", 128)])),
        (m4096(&[("packed", 1)]), dq(&[]).with("RASTER", "n")),
        (m4096(&[("packed", 1), ("epilogue", 1), ("p", 1)]), dq(&[])),
        (vec![("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("packed", 1)], default_knobs()),
        // The wide dequant kernel (DQ=wide) at every words-per-thread value, both layouts and scale ranges.
        (m4096(&[("packed", 1)]), dqw(0)),
        (m4096(&[("packed", 1)]), dqw(1)),
        (m4096(&[("packed", 1)]), dqw(2)),
        (m4096(&[("packed", 1)]), dqw(8)),
        (m4096(&[]), dqw(0)),
        (m4096(&[]), dqw(8)),
        (m4096(&[("packed", 1), ("wide", 1)]), dqw(0)),
        (m4096(&[("wide", 1)]), dqw(8)),
        (vec![("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("packed", 1)], dqw(0)),
        (m4096(&[("packed", 1)]), dqp(0, 4)),
        (m4096(&[("packed", 1)]), dqp(2, 8)),
        (m4096(&[]), dqp(0, 8)),
        (vec![("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("packed", 1)], dqp(0, 4)),
        // The in-kernel wgmma path these shapes took by default before (the A/B baseline, PATH=tile).
        (m4096(&[("packed", 1)]), default_knobs().with("PATH", "tile")),
        (m4096(&[]), default_knobs().with("PATH", "tile")),
        (m4096(&[("packed", 1), ("act", 1)]), default_knobs().with("PATH", "tile")),
        (
            vec![("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("packed", 1)],
            default_knobs().with("PATH", "tile"),
        ),
    ] {
        let p = Preset::new("prefill", &dims);
        for k in op.kernels(&p, &kn).unwrap_or_else(|e| panic!("{dims:?} [{kn}]: {e}")) {
            let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            let r = m.resources.clone().unwrap();
            eprintln!("{dims:?} / {}: {r:?} smem {}", k.name, k.shared_bytes());
            assert!(!r.spills(), "{}: {r:?}", k.name);
        }
    }
    // The dequant tile is the documented one.
    assert_eq!((prefill::DQ_ROWS, prefill::DQ_COLS), (64, 128));
}

/// Every kernel of the path lowers to the Cranelift JIT and gives the interpreter's bits (scratch included).
#[test]
fn jit_matches_the_interpreter_bit_for_bit() {
    use k3k_codegen::cpu::interp::{self, InterpOptions};
    use k3k_codegen::cpu::jit;
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for dims in [
        vec![("M", 70i64), ("K", 160), ("N", 70), ("packed", 1), ("wide", 1)],
        vec![("G", 3), ("c0", 9), ("c1", 0), ("c2", 20), ("K", 96), ("N", 34), ("act", 1), ("epilogue", 1), ("p", 1)],
    ] {
        let p = Preset::new("jit", &dims);
        let inst = Mxfp4Matmul.instance(&p, rng.random()).unwrap();
        for kn in [dq(&[]), dqw(0), dqw(1), dqp(1, 1)] {
            let plan = inst.plan(&kn).unwrap();
            let mut outs = vec![];
            for use_jit in [false, true] {
                let bufs = plan
                    .run_host(|kernel, args, scalars| {
                        if use_jit {
                            let jk = jit::compile(kernel).unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
                            jk.run(args, scalars, InterpOptions::default()).unwrap();
                        } else {
                            interp::run(kernel, args, scalars, InterpOptions::default()).unwrap();
                        }
                        Ok(())
                    })
                    .unwrap();
                outs.push(bufs);
            }
            for (i, b) in plan.buffers.iter().enumerate() {
                assert_eq!(outs[0][i].data, outs[1][i].data, "{dims:?} [{kn}]: buffer {}", b.name);
            }
        }
    }
}
