//! `mxfp4_matmul`: the tile programs (CPU interpreter) match the f64 reference on the dequantized weights
//! (SEMANTICS.md section 3 bf16 tolerance) on small problems with edge sizes, empty groups, NaN scale blocks, both weight
//! layouts and K splits; bad inputs give typed errors; every preset's kernels compile for sm_90a without spills.
use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_codegen::{BuildOptions, build};
use k3k_ir::{DType, HostTensor, Kernel, Knobs};
use k3k_ops::OpError;
use k3k_ops::latent_moe_gemm::Epilogue;
use k3k_ops::mx::matmul::*;
use k3k_ops::mx::pack;
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::Executor;
use rand::{Rng, SeedableRng, rngs::StdRng};

#[path = "common/mx_run.rs"]
mod mx_run;
use mx_run::{dense_preset, grouped_preset, knobs, run};

#[test]
fn dense_edge_rows_and_k() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (m, k, n) in [(1i64, 32i64, 16i64), (15, 64, 17), (17, 96, 40), (63, 32, 8), (65, 64, 33)] {
        let p = Preset::new(&format!("M{m} K{k} N{n}"), &[("M", m), ("K", k), ("N", n)]);
        run(&p, rng.random(), &default_knobs());
    }
}

#[test]
fn grouped_empty_groups_epilogues_and_nan_scales() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (epi, pw, packed, wide, act) in
        [(0i64, 0i64, 0i64, 1i64, 0i64), (1, 1, 1, 0, 1), (2, 1, 0, 1, 1), (1, 0, 0, 0, 0)]
    {
        let p = grouped_preset("grouped", 5, (epi, pw, packed, wide, act));
        run(&p, rng.random(), &default_knobs());
    }
}

#[test]
fn empty_problems() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for kn in [default_knobs(), knobs(&[("SPLIT", 4)])] {
        let p = Preset::new("empty", &[("G", 2), ("c0", 0), ("c1", 0), ("K", 64), ("N", 16), ("epilogue", 1)]);
        run(&p, rng.random(), &kn);
    }
    // MXFP8 activations on the gemv path: no rows, no launch (not even the activation dequant).
    let p = Preset::new("empty x8", &[("G", 2), ("c0", 0), ("c1", 0), ("K", 64), ("N", 16), ("packed", 1), ("act", 1)]);
    let gemv = default_knobs().with("PATH", "gemv");
    run(&p, rng.random(), &gemv);
    assert!(Mxfp4Matmul.instance(&p, 1).unwrap().plan(&gemv).unwrap().steps.is_empty());
}

#[test]
fn k_splits_and_knob_points() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let p = Preset::new("s", &[("G", 2), ("c0", 3), ("c1", 18), ("K", 224), ("N", 48), ("epilogue", 1), ("p", 1)]);
    for kn in [
        knobs(&[("SPLIT", 3), ("BK", 64)]),
        knobs(&[("SPLIT", 2), ("BK", 32), ("STAGES", 2)]),
        knobs(&[("BN", 32), ("WA", 2), ("BM", 32), ("WB", 2), ("BK", 96), ("SPLIT", 1)]),
        knobs(&[("BN", 128), ("WA", 8), ("BM", 16), ("SPLIT", 4), ("BK", 64), ("CPS", 1)]),
    ] {
        run(&p, rng.random(), &kn);
    }
    // Warpgroup MMA from a dequantized shared tile (one and two warpgroups, GLU halves, splits).
    for kn in [
        knobs(&[("BM", 64), ("BN", 64), ("SPLIT", 1)]).with("MMA", "wgmma"),
        knobs(&[("BM", 128), ("BN", 32), ("SPLIT", 2), ("STAGES", 3)]).with("MMA", "wgmma"),
    ] {
        run(&p, rng.random(), &kn);
    }
    let p = Preset::new("w", &[("M", 70), ("K", 96), ("N", 40), ("packed", 1), ("p", 1)]);
    run(&p, rng.random(), &knobs(&[("BM", 64), ("BN", 16)]).with("MMA", "wgmma"));
    // MXFP8 activations on both paths, with splits.
    let p = Preset::new(
        "x8",
        &[("G", 3), ("c0", 17), ("c1", 0), ("c2", 66), ("K", 160), ("N", 34), ("act", 1), ("epilogue", 2)],
    );
    for kn in [
        knobs(&[("SPLIT", 2), ("BK", 64)]).with("MMA", "sync"),
        knobs(&[("BM", 64), ("BN", 32), ("SPLIT", 2)]).with("MMA", "wgmma"),
        knobs(&[("BM", 128), ("BN", 64)]).with("MMA", "wgmma"),
    ] {
        run(&p, rng.random(), &kn);
    }
    let p = Preset::new("d", &[("M", 20), ("K", 160), ("N", 24), ("packed", 1), ("wide", 1)]);
    run(&p, rng.random(), &knobs(&[("SPLIT", 5), ("BK", 32), ("RASTER", 0)]).with("RASTER", "n"));
}

#[test]
fn bit_decode_matches_the_expression_decode() {
    // DEC=bits (`Stmt::DequantFp4`) on packed and natural weights: realistic (one folded multiply, no NaN select) and wide
    // scales (two multiplies, NaN blocks), dense and grouped, with splits; bitwise equal to DEC=expr.
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (dims, extra) in [
        (vec![("M", 5), ("K", 160), ("N", 40), ("packed", 1)], vec![("SPLIT", 1)]),
        // Natural layout (16-byte block loads + prmt), with NaN blocks and a split; and MXFP8 activations.
        (vec![("M", 7), ("K", 96), ("N", 24), ("wide", 1)], vec![("SPLIT", 2), ("BK", 32)]),
        (vec![("G", 2), ("c0", 3), ("c1", 16), ("K", 128), ("N", 18), ("act", 1), ("epilogue", 1)], vec![]),
        (vec![("M", 66), ("K", 128), ("N", 32), ("wide", 1)], vec![("BM", 64), ("BN", 64)]),
        (vec![("M", 17), ("K", 96), ("N", 33), ("packed", 1), ("wide", 1)], vec![("SPLIT", 2), ("BK", 64)]),
        (
            vec![("G", 3), ("c0", 4), ("c1", 0), ("c2", 9), ("K", 128), ("N", 34), ("packed", 1), ("epilogue", 1)],
            vec![("BN", 32), ("WA", 2), ("BK", 128)],
        ),
        (vec![("M", 3), ("K", 64), ("N", 20), ("packed", 1), ("wide", 1), ("act", 1)], vec![("BK", 32)]),
        // MMA=wgmma: decoded into registers, stored to the shared bf16 tile (one and two warpgroups, GLU, split).
        (vec![("M", 70), ("K", 160), ("N", 40), ("packed", 1), ("wide", 1)], vec![("BM", 64), ("BN", 64)]),
        (
            vec![("G", 2), ("c0", 9), ("c1", 130), ("K", 96), ("N", 36), ("packed", 1), ("epilogue", 2), ("p", 1)],
            vec![("BM", 128), ("BN", 128), ("SPLIT", 2), ("STAGES", 3)],
        ),
    ] {
        let wg = extra.iter().any(|(n, _)| *n == "BM");
        let p = Preset::new("dec", &dims);
        let seed = rng.random();
        let mut outs = vec![];
        for dec in ["bits", "expr"] {
            let kn = knobs(&extra).with("DEC", dec).with("MMA", if wg { "wgmma" } else { "sync" });
            run(&p, seed, &kn);
            let inst = Mxfp4Matmul.instance(&p, seed).unwrap();
            let plan = inst.plan(&kn).unwrap();
            outs.push(Executor::Cpu.run(&plan).unwrap().get("y").unwrap().data.clone());
        }
        assert_eq!(outs[0], outs[1], "{dims:?}");
    }
    // wgmma with fewer than 16 weight rows per warp: DEC=bits is invalid, DEC=auto takes the expression path.
    let p = Preset::new("w", &[("M", 70), ("K", 96), ("N", 40), ("packed", 1)]);
    let inst = Mxfp4Matmul.instance(&p, 3).unwrap();
    let kn = knobs(&[("BM", 64), ("BN", 32)]).with("MMA", "wgmma");
    assert!(matches!(inst.plan(&kn.clone().with("DEC", "bits")), Err(OpError::InvalidKnobs { .. })));
    run(&p, 4, &kn);
}

#[test]
fn random_cases() {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..6 {
        let p = Mxfp4Matmul.random_case(&mut rng);
        run(&p, rng.random(), &default_knobs());
    }
}

#[test]
fn packed_layout_round_trips_and_gives_the_same_product() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let (rows, k) = (37usize, 160usize);
    let q: Vec<u8> = (0..rows * k / 2).map(|_| rng.random()).collect();
    let words = pack::pack(&q, rows, k).unwrap();
    assert_eq!(pack::unpack(&words, rows, k).unwrap(), q);
    assert!(matches!(pack::pack(&q[1..], rows, k), Err(OpError::BadInput { .. })));
    assert!(matches!(pack::pack(&q, rows, 48), Err(OpError::BadInput { .. })));
    // Same weights in both layouts give bitwise the same output.
    let (n, m) = (rows, 9usize);
    let s: Vec<u8> = (0..n * k / 32).map(|_| rng.random_range(110..130)).collect();
    let xv: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let x = HostTensor::from_f32(DType::Bf16, &[m, k], &xv);
    let inp = MatInputs { x: Act::Bf16(&x), offs: None, p: None, epilogue: Epilogue::None };
    let mut outs = vec![];
    for q in [WeightBytes::Natural(q.clone()), WeightBytes::Packed(words.clone())] {
        let w = Fp4Weights { groups: 1, n, k, q, s: s.clone() };
        let plan = matmul_plan(&w, &inp, &default_knobs()).unwrap();
        outs.push(Executor::Cpu.run(&plan).unwrap().get("y").unwrap().data.clone());
    }
    assert_eq!(outs[0], outs[1]);
}

#[test]
fn typed_errors_name_the_argument() {
    let x = HostTensor::from_f32(DType::Bf16, &[4, 64], &[0.5; 256]);
    let w = |n: usize, k: usize, qlen: usize, slen: usize| Fp4Weights {
        groups: 1,
        n,
        k,
        q: WeightBytes::Natural(vec![0; qlen]),
        s: vec![127; slen],
    };
    let inp = MatInputs { x: Act::Bf16(&x), offs: None, p: None, epilogue: Epilogue::None };
    let arg = |e: OpError| match e {
        OpError::BadInput { arg, why, .. } => format!("{arg}: {why}"),
        other => panic!("expected BadInput, got {other}"),
    };
    let e = arg(matmul_plan(&w(8, 48, 8 * 24, 8), &inp, &default_knobs()).unwrap_err());
    assert!(e.starts_with("K:") && e.contains("48"), "{e}");
    let e = arg(matmul_plan(&w(8, 64, 8 * 32 - 1, 16), &inp, &default_knobs()).unwrap_err());
    assert!(e.starts_with("wq:") && e.contains("[G, N, K/2]"), "{e}");
    let e = arg(matmul_plan(&w(8, 64, 8 * 32, 15), &inp, &default_knobs()).unwrap_err());
    assert!(e.starts_with("ws:") && e.contains("[G, N, K/32]"), "{e}");
    let e = arg(matmul_plan(&w(8, 32, 8 * 16, 8), &inp, &default_knobs()).unwrap_err());
    assert!(e.starts_with("x:"), "{e}");
    let wp = Fp4Weights { groups: 1, n: 8, k: 64, q: WeightBytes::Packed(vec![0; 63]), s: vec![127; 16] };
    let e = arg(matmul_plan(&wp, &inp, &default_knobs()).unwrap_err());
    assert!(e.starts_with("wq (packed words):"), "{e}");
    let good = w(8, 64, 8 * 32, 16);
    let glu = MatInputs { epilogue: Epilogue::SituGlu, ..inp.clone() };
    let odd = w(7, 64, 7 * 32, 14);
    assert!(arg(matmul_plan(&odd, &glu, &default_knobs()).unwrap_err()).starts_with("N:"));
    let p = [1.0f32; 3];
    let withp = MatInputs { p: Some(&p), ..inp.clone() };
    assert!(arg(matmul_plan(&good, &withp, &default_knobs()).unwrap_err()).starts_with("p:"));
    let g2 = Fp4Weights { groups: 2, n: 8, k: 64, q: WeightBytes::Natural(vec![0; 512]), s: vec![127; 32] };
    let offs = [3i32, 2];
    let grouped = MatInputs { offs: Some(&offs), ..inp.clone() };
    assert!(arg(matmul_plan(&g2, &grouped, &default_knobs()).unwrap_err()).starts_with("offs:"));
    let offs = [1i32, 3];
    let grouped = MatInputs { offs: Some(&offs), ..inp.clone() };
    assert!(arg(matmul_plan(&g2, &grouped, &default_knobs()).unwrap_err()).contains("must be M = 4"));
    let bad8 = k3k_reference::mx::MxTensor {
        rows: 4,
        k: 64,
        q: vec![0; 255],
        s: vec![127; 8],
        format: k3k_reference::mx::MxFormat::Fp8,
    };
    let x8 = MatInputs { x: Act::Mxfp8(&bad8), ..inp.clone() };
    let e = arg(matmul_plan(&good, &x8, &default_knobs()).unwrap_err());
    assert!(e.starts_with("xq:") && e.contains("[M, K]"), "{e}");
    let e = matmul_plan(&good, &inp, &knobs(&[("BK", 48)])).unwrap_err();
    assert!(matches!(e, OpError::InvalidKnobs { .. }), "{e}");
    let p = Preset::new("bad", &[("M", 4), ("K", 40), ("N", 8)]);
    assert!(matches!(Mxfp4Matmul.instance(&p, 1), Err(OpError::BadInput { .. })));
}

/// The automatic knobs pick the tile width measured fastest on the H200 (2026-11-30 bench, see `resolve`), and
/// the streaming weight path for few tokens without a GLU epilogue.
#[test]
fn automatic_knobs_follow_the_h200_measurements() {
    let op = Mxfp4Matmul;
    let path = |dims: &[(&str, i64)], kn: &Knobs| -> String {
        let ks = op.kernels(&Preset::new("auto", dims), kn).unwrap();
        ks[0].knobs.str("PATH").unwrap().to_string()
    };
    // Dense, at most 16 tokens: PATH=gemv (both layouts, GLU too, MXFP8 activations too); 17 tokens keep the
    // tile path; the tile path keeps its measured widths below.
    for m in [1, 16] {
        assert_eq!(path(&[("M", m), ("N", 6144), ("K", 3584), ("packed", 1)], &op.default_knobs()), "gemv");
    }
    assert_eq!(path(&[("M", 17), ("N", 6144), ("K", 3584), ("packed", 1)], &op.default_knobs()), "tile");
    assert_eq!(path(&[("M", 1), ("N", 6144), ("K", 3584)], &op.default_knobs()), "gemv", "natural layout");
    // Grouped decode with at most 8 tokens per expert (28 experts x 4 tokens) takes the gemv kernel with the
    // shape measured on 2026-12-04: 32-row CTAs of 4 warps, 3-stage cp.async rings of 256-column batches, 5 CTAs
    // per SM (0.1194 ms against 0.1892 for the former one-warp register ring); 9 tokens per expert keep the tile
    // path.
    let g28 = [("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)];
    assert_eq!(path(&g28, &op.default_knobs()), "gemv");
    let ks = op.kernels(&Preset::new("g28", &g28), &op.default_knobs()).unwrap();
    let kn = &ks[0].knobs;
    let shape = ["WA", "BK", "BN", "STAGES", "MINB", "L2PF"].map(|k| kn.u32(k).unwrap());
    assert_eq!(shape, [4, 256, 32, 3, 5, 128]);
    // The same problem with tile-major weights: 64-row CTAs of 128-column batches, MINB=4 (2026-12-05).
    let tiles = [("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("tiles", 1)];
    let main = op.kernels(&Preset::new("g28 tiles", &tiles), &op.default_knobs()).unwrap().remove(0);
    let shape = ["WA", "BK", "BN", "STAGES", "MINB", "L2PF"].map(|k| main.knobs.u32(k).unwrap());
    assert_eq!(shape, [4, 128, 64, 3, 4, 128]);
    // Four such CTAs fit an SM's 228 KB of shared memory (1 KB reserved per CTA): the ring's tile-major scales are
    // copied whole and the partials alias the rings (2026-12-05; three fit before, whatever MINB asked).
    assert!(4 * (main.shared_bytes() + 1024) <= 233_472, "{} bytes of shared memory", main.shared_bytes());
    let g28x9 = [("G", 28), ("per", 9), ("N", 6144), ("K", 3584), ("packed", 1)];
    assert_eq!(path(&g28x9, &op.default_knobs()), "tile");
    let glu28 = [("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1), ("epilogue", 1), ("p", 1)];
    assert_eq!(path(&glu28, &op.default_knobs()), "gemv");
    // Dense M1 keeps the whole-K-at-once shape: 7 warps of one 4-quad batch each, 3 ring slots.
    let ks = op.kernels(&Preset::new("m1", &[("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)]), &op.default_knobs());
    let kn = ks.unwrap()[0].knobs.clone();
    assert_eq!((kn.u32("WA").unwrap(), kn.u32("BK").unwrap(), kn.u32("GR").unwrap()), (7, 512, 3));
    // MXFP8 activations take the same kernel, behind a launch that dequantizes them (the tile path ran 0.1952 ms
    // there against gemv's 0.1171 on bf16 activations); 9 tokens per expert still take the tile path.
    let act8 = [("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1), ("act", 1)];
    assert_eq!(path(&act8, &op.default_knobs()), "gemv");
    let ks = op.kernels(&Preset::new("act8", &act8), &op.default_knobs()).unwrap();
    assert_eq!(ks[0].knobs, op.kernels(&Preset::new("g28", &g28), &op.default_knobs()).unwrap()[0].knobs);
    let act8x9 = [("G", 28), ("per", 9), ("N", 6144), ("K", 3584), ("packed", 1), ("act", 1)];
    assert_eq!(path(&act8x9, &op.default_knobs()), "tile");
    // The stream path is still chosen by PATH=auto with an explicit shape gemv cannot take (MMA=sync, WB=1
    // but BN=128: more than gemv's 64 rows per statement).
    let m1 = [("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)];
    assert_eq!(path(&m1, &knobs(&[("BN", 128), ("BK", 256)])), "stream");
    let tile = op.default_knobs().with("PATH", "tile");
    let bn = |dims: &[(&str, i64)]| -> (i64, i64) {
        let ks = op.kernels(&Preset::new("auto", dims), &tile).unwrap_or_else(|e| panic!("{dims:?}: {e}"));
        let kn = &ks[0].knobs;
        (kn.u32("BN").unwrap() as i64, kn.u32("SPLIT").unwrap() as i64)
    };
    let dense = |m: i64| bn(&[("M", m), ("N", 6144), ("K", 3584), ("packed", 1)]);
    // Dense decode: 64-row tiles and a K split (one launch of main + one finalize).
    for m in [1, 4, 16] {
        let (b, s) = dense(m);
        assert_eq!(b, 64, "M{m}");
        assert!(s > 1, "M{m}: split {s}");
    }
    // 28 experts x 4 tokens: 256-row tiles fill the grid without a split; with a GLU epilogue 128.
    assert_eq!(bn(&[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)]), (256, 1));
    let glu = [("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1), ("epilogue", 1), ("p", 1)];
    assert_eq!(bn(&glu).0, 128);
    // Prefill on wgmma: 256.
    assert_eq!(dense(4096).0, 256);
    // M64 (measured best at the old choice, 64) is unchanged.
    assert_eq!(dense(64).0, 64);
    // Explicit values still win.
    let p = Preset::new("explicit", &[("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)]);
    let ks = op.kernels(&p, &knobs(&[("BN", 128)])).unwrap();
    assert_eq!(ks[0].knobs.u32("BN").unwrap(), 128);
}

/// PATH=gemv (`Stmt::Fp4Gemv`) against the f64 reference: edge token counts (1, 7, 8, 9, 15, 16 in one tile;
/// 17 and 40 over several 8- or 16-token tiles), N not a multiple of the row tile, K of one block, a K tail
/// shorter than a chunk and chunks not dividing over the warps, both layouts, NaN scale blocks, GLU epilogues with
/// routing weights, grouped with empty groups, splits with both finalizers, every chunk width (BK 128..1024),
/// register ring depths (GR 1..8, PF), shared-memory rings (STAGES 3..8) and the automatic knobs of 8 and 16
/// tokens; and its invalid knob sets.
#[test]
fn gemv_path_edges_and_layouts() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let gemv = |pairs: &[(&str, i64)]| knobs(pairs).with("PATH", "gemv");
    for (m, k, n, packed, wide) in [
        (1i64, 32i64, 16i64, 1i64, 0i64),
        (7, 288, 17, 0, 1),
        (8, 96, 40, 1, 1),
        (9, 224, 8, 1, 0),
        (15, 608, 33, 0, 0),
        (16, 160, 50, 1, 1),
        (17, 64, 20, 1, 0),
        (40, 352, 18, 0, 1),
    ] {
        let p = dense_preset("gemv", (m, k, n, packed, wide));
        run(&p, rng.random(), &gemv(&[]));
        run(&p, rng.random(), &gemv(&[("BM", 16), ("BK", 256), ("WA", 3)]).with("PF", "off"));
        run(&p, rng.random(), &gemv(&[("BN", 32), ("BK", 256), ("WA", 2), ("SPLIT", 2)]).with("PF", "on"));
        run(&p, rng.random(), &gemv(&[("BK", 512), ("WA", 5), ("SPLIT", 3)]).with("FIN", "last"));
        run(&p, rng.random(), &gemv(&[("BK", 1024), ("GR", 8), ("WA", 2)]));
        run(&p, rng.random(), &gemv(&[("BK", 128), ("GR", 1), ("BN", 64), ("WA", 3)]));
        // The shared-memory ring (STAGES >= 3).
        run(&p, rng.random(), &gemv(&[("STAGES", 3)]));
        run(&p, rng.random(), &gemv(&[("STAGES", 8), ("BK", 1024), ("WA", 1), ("SPLIT", 2)]));
        run(&p, rng.random(), &gemv(&[("STAGES", 4), ("BN", 32), ("BK", 256), ("WA", 3), ("BM", 16)]));
    }
    // The register ring's edges: K of one block, of 37 blocks (9 whole 4-block quads and a one-block tail), 65, 113
    // (a ring wrapping several times, batches not dividing over the warps), 224 (whole 1024-column batches); every
    // token count 1..=16; N tails; natural and packed layouts.
    for (i, (k, n)) in [(32i64, 16i64), (1184, 31), (2080, 17), (3616, 48), (7168, 5)].into_iter().enumerate() {
        for m in [1i64, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16] {
            if !(m as usize + i).is_multiple_of(3) && m != 1 && m != 16 {
                continue;
            }
            let packed = (m + i as i64) % 2;
            let p = Preset::new(
                &format!("gemv ring M{m} K{k} N{n}"),
                &[("M", m), ("K", k), ("N", n), ("packed", packed), ("wide", (m / 4) % 2)],
            );
            run(&p, rng.random(), &gemv(&[]));
            run(&p, rng.random(), &gemv(&[("GR", 2), ("BK", 256), ("WA", 3)]));
            run(&p, rng.random(), &gemv(&[("GR", 5), ("BK", 512), ("WA", 1)]).with("PF", "on"));
            run(&p, rng.random(), &gemv(&[("GR", 8), ("BK", 1024), ("WA", 4), ("BM", 16)]));
            run(&p, rng.random(), &gemv(&[("STAGES", 5), ("BK", 512), ("WA", 2)]));
        }
    }
    for (packed, wide, epi, pw) in [(1i64, 0i64, 0i64, 0i64), (0, 1, 1, 1), (1, 1, 2, 1), (1, 0, 0, 1)] {
        let p =
            five_groups("gemv grouped", 320, 66, &[("epilogue", epi), ("p", pw), ("packed", packed), ("wide", wide)]);
        // (Grouped problems no longer take gemv automatically; PATH=gemv keeps this its automatic knob set.)
        run(&p, rng.random(), &gemv(&[]));
        run(&p, rng.random(), &gemv(&[("SPLIT", 2), ("BK", 128), ("BN", 64), ("WA", 4)]).with("PF", "off"));
        run(&p, rng.random(), &gemv(&[("WA", 1), ("BK", 1024), ("GR", 8)]));
        run(&p, rng.random(), &gemv(&[("WA", 2), ("GR", 4), ("BN", 32)]));
        run(&p, rng.random(), &gemv(&[("WA", 1), ("BK", 1024), ("STAGES", 8)]));
        run(&p, rng.random(), &gemv(&[("WA", 2), ("STAGES", 4), ("BN", 32)]));
        run(&p, rng.random(), &gemv(&[("WA", 3), ("STAGES", 3), ("BN", 64), ("BK", 128)]));
        // Persistent grids (4 SMs on the CPU) with balanced tiles: 4 token tiles (16 tokens) x 3 or 5 weight tiles
        // on 4 CTAs, twice as many (two K splits, FIN=last's counters) on 8, and more CTAs than tiles.
        run(&p, rng.random(), &gemv(&[("CPS", 1), ("BN", 32)]));
        run(&p, rng.random(), &gemv(&[("CPS", 2), ("SPLIT", 2), ("BK", 128), ("BN", 32)]).with("FIN", "last"));
        run(&p, rng.random(), &gemv(&[("CPS", 16), ("STAGES", 3), ("BN", 32)]));
    }
    let op = Mxfp4Matmul;
    let m4 = Preset::new("m4", &[("M", 4), ("K", 64), ("N", 32)]);
    for bad in [
        gemv(&[("BK", 192)]),
        gemv(&[("BM", 32)]),
        gemv(&[("BN", 24)]),
        gemv(&[("BN", 128), ("BK", 256)]),
        gemv(&[("BK", 2048)]),
        gemv(&[("GR", 9)]),
        gemv(&[("BN", 64), ("GR", 4)]),
        gemv(&[("STAGES", 9)]),
        gemv(&[("BN", 144), ("STAGES", 4)]),
        gemv(&[("BN", 64), ("STAGES", 8), ("WA", 16), ("BK", 128)]),
        knobs(&[("GR", 2)]).with("PATH", "tile"),
        gemv(&[("WB", 2)]),
        gemv(&[]).with("MMA", "wgmma"),
    ] {
        assert!(matches!(op.kernels(&m4, &bad), Err(OpError::InvalidKnobs { .. })), "{bad}");
    }
    let glu = Preset::new("glu", &[("M", 4), ("K", 64), ("N", 32), ("epilogue", 1)]);
    assert!(matches!(op.kernels(&glu, &gemv(&[("BN", 16)])), Err(OpError::InvalidKnobs { .. })));
}

/// PATH=gemv with MXFP8 activations: two launches (the activations dequantized to a bf16 scratch, then the
/// bf16-activation gemv kernel, the very kernel bf16 activations get), against the f64 reference on the
/// dequantized activations: dense and grouped (empty groups), edge token counts, both layouts, wide scales, GLU
/// epilogues with routing weights, a K split, the register and shared-memory rings.
#[test]
fn gemv_path_takes_mxfp8_activations_through_a_dequant_launch() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let op = Mxfp4Matmul;
    let gemv = |pairs: &[(&str, i64)]| knobs(pairs).with("PATH", "gemv");
    let dense = |m: i64, k: i64, n: i64, packed: i64, wide: i64, epi: i64, act: i64| {
        let p = epi.min(1);
        let d = [("M", m), ("K", k), ("N", n), ("packed", packed), ("wide", wide), ("epilogue", epi), ("p", p)];
        Preset::new(&format!("gemv act{act} M{m} K{k} N{n}"), &[&d[..], &[("act", act)]].concat())
    };
    for (m, k, n, packed, wide, epi) in
        [(1i64, 32i64, 16i64, 1i64, 0i64, 0i64), (7, 288, 34, 0, 1, 1), (9, 224, 8, 1, 1, 0), (16, 608, 40, 1, 0, 2)]
    {
        let p = dense(m, k, n, packed, wide, epi, 1);
        for kn in [gemv(&[]), gemv(&[("BK", 256), ("WA", 2), ("SPLIT", 2)]), gemv(&[("STAGES", 3), ("BN", 32)])] {
            run(&p, rng.random(), &kn);
        }
    }
    let grouped = Preset::new(
        "gemv x8 grouped",
        &[("G", 4), ("c0", 0), ("c1", 4), ("c2", 8), ("c3", 1), ("K", 320), ("N", 66), ("packed", 1), ("act", 1)],
    );
    run(&grouped, rng.random(), &gemv(&[]));
    run(&grouped, rng.random(), &op.default_knobs());
    // The plan: the dequant launch first, writing the scratch the main kernel reads as its bf16 `x`; the main
    // kernel is the one bf16 activations get (same name and program).
    let (p, x8) = (dense(4, 64, 32, 1, 0, 0, 0), dense(4, 64, 32, 1, 0, 0, 1));
    let plan = op.instance(&x8, 1).unwrap().plan(&gemv(&[])).unwrap();
    assert_eq!(plan.steps.len(), 2);
    let xd = plan.index("xd").expect("the activation scratch");
    assert_eq!(plan.steps[0].args.last(), Some(&xd), "the dequant launch writes xd");
    assert_eq!(plan.steps[1].args[0], xd, "the gemv kernel reads xd as x");
    let bf16_main = op.kernels(&p, &gemv(&[])).unwrap().remove(0);
    assert_eq!(k3k_ir::stable_hash(&plan.steps[1].kernel), k3k_ir::stable_hash(&bf16_main));
    let ks = op.kernels(&x8, &gemv(&[])).unwrap();
    assert_eq!(ks.len(), 2, "main and the activation dequant");
    assert_eq!(k3k_ir::stable_hash(&ks[1]), k3k_ir::stable_hash(&plan.steps[0].kernel));
}

/// PATH=stream (`Stmt::DequantFp4Stream`: weights global -> registers) against the f64 reference: edge token
/// counts (1, 15, 17, 63, 65), widths and K (one block, a K tail shorter than BK, K past BK), both weight
/// layouts, NaN scale blocks, grouped with empty groups, MXFP8 activations, splits; and its invalid knob sets.
#[test]
fn stream_path_edges_and_layouts() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let stream = |pairs: &[(&str, i64)]| knobs(pairs).with("PATH", "stream");
    for (m, k, n, packed, wide) in [
        (1i64, 32i64, 16i64, 1i64, 0i64),
        (15, 288, 17, 0, 1),
        (17, 96, 40, 1, 1),
        (63, 224, 8, 1, 0),
        (65, 64, 33, 0, 0),
    ] {
        let p = dense_preset("stream", (m, k, n, packed, wide));
        run(&p, rng.random(), &stream(&[("BM", 16)]));
        run(&p, rng.random(), &stream(&[("BM", 16), ("BK", 128), ("BN", 32), ("WA", 2), ("SPLIT", 2)]));
    }
    for (m, k) in [(1i64, 3584i64), (16, 416)] {
        let p = Preset::new("stream auto", &[("M", m), ("K", k), ("N", 70), ("packed", 1)]);
        run(&p, rng.random(), &default_knobs());
    }
    for (packed, wide, act, pw) in [(1i64, 0i64, 0i64, 0i64), (0, 1, 0, 1), (1, 1, 1, 1)] {
        let p = five_groups("stream grouped", 320, 34, &[("p", pw), ("packed", packed), ("wide", wide), ("act", act)]);
        run(&p, rng.random(), &default_knobs());
        run(&p, rng.random(), &stream(&[("SPLIT", 3), ("BK", 64)]));
    }
    // Invalid: a GLU epilogue, wgmma, two token warps, the expression decode.
    let glu = Preset::new("glu", &[("M", 4), ("K", 64), ("N", 32), ("epilogue", 1)]);
    let inst = Mxfp4Matmul.instance(&glu, 1).unwrap();
    assert!(matches!(inst.plan(&stream(&[])), Err(OpError::InvalidKnobs { .. })));
    // (PATH=auto takes the GLU decode to PATH=gemv; the stream path's old automatic fallback was the tile path.)
    assert_eq!(Mxfp4Matmul.kernels(&glu, &default_knobs()).unwrap()[0].knobs.str("PATH").unwrap(), "gemv");
    let p = Preset::new("d", &[("M", 4), ("K", 64), ("N", 32)]);
    let inst = Mxfp4Matmul.instance(&p, 1).unwrap();
    for kn in [
        stream(&[("BM", 64), ("WA", 4)]).with("MMA", "wgmma"),
        stream(&[("WB", 2), ("BM", 32)]),
        stream(&[]).with("DEC", "expr"),
        knobs(&[]).with("PATH", "bogus"),
    ] {
        assert!(matches!(inst.plan(&kn), Err(OpError::InvalidKnobs { .. })), "{kn}");
    }
    // NaN scale bytes decode to NaN blocks on the stream path as on the tile path (the reference check above
    // covers `wide` scales, which include 255): the outputs of both paths agree on which elements are NaN.
    let p = Preset::new("nan", &[("M", 3), ("K", 96), ("N", 40), ("wide", 1), ("packed", 1)]);
    let inst = Mxfp4Matmul.instance(&p, 7).unwrap();
    let y = |kn: &Knobs| Executor::Cpu.run(&inst.plan(kn).unwrap()).unwrap().get("y").unwrap().to_f32_vec();
    let (a, b) = (y(&stream(&[])), y(&knobs(&[]).with("PATH", "tile")));
    assert!(a.iter().any(|v| v.is_nan()), "the wide scales of this seed include a NaN block");
    for (i, (x, z)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x.is_nan(), z.is_nan(), "element {i}: stream {x}, tile {z}");
    }
}

fn assemble_all(op: &dyn Operator, p: &Preset, kn: &Knobs) {
    for k in op.kernels(p, kn).unwrap_or_else(|e| panic!("{} [{kn}]: {e}", p.name)) {
        let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        let r = m.resources.clone().unwrap();
        eprintln!("{} / {}: {r:?} smem {}", p.name, k.name, k.shared_bytes());
        assert!(!r.spills(), "{}: {r:?}", k.name);
    }
}

#[test]
fn presets_compile_without_spills() {
    let op = Mxfp4Matmul;
    for p in op.bench_presets() {
        assemble_all(&op, &p, &op.default_knobs());
    }
    // Variants the presets do not cover: packed weights, non-foldable scales, SwiGLU, odd widths, splits.
    for (dims, kn) in [
        (vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)], default_knobs()),
        (vec![("M", 64), ("N", 6144), ("K", 3584), ("wide", 1), ("epilogue", 2), ("p", 1)], default_knobs()),
        (vec![("M", 33), ("N", 99), ("K", 96)], knobs(&[("SPLIT", 2)])),
        (vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)], knobs(&[("BK", 256), ("STAGES", 3)])),
        (vec![("M", 4096), ("N", 6144), ("K", 3584)], knobs(&[("BN", 256), ("WA", 8), ("BM", 64)]).with("MMA", "sync")),
        (
            vec![("M", 4096), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("WA", 4), ("WB", 2)]).with("MMA", "sync"),
        ),
        (vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)], knobs(&[("CPS", 4)])),
        // Persistent gemv grids: balanced whole tiles, and stream-K (tile-major and packed words).
        (vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("tiles", 1)], knobs(&[("CPS", 4), ("BK", 128)])),
        (
            vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("tiles", 1)],
            knobs(&[("CPS", 4), ("SK", 1), ("BK", 128), ("BN", 64), ("MINB", 4)]),
        ),
        (vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)], knobs(&[("CPS", 5), ("SK", 1)])),
        (vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)], knobs(&[("CPS", 4), ("BK", 256), ("STAGES", 3)])),
        (
            vec![("M", 4096), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("BN", 128), ("WA", 8), ("WB", 1)]).with("MMA", "sync"),
        ),
        (vec![("M", 4096), ("N", 6144), ("K", 3584)], knobs(&[("BN", 256)]).with("MMA", "wgmma")),
        (
            vec![("M", 4096), ("N", 6144), ("K", 3584), ("epilogue", 1), ("p", 1)],
            knobs(&[("SPLIT", 2)]).with("MMA", "wgmma"),
        ),
        (vec![("M", 64), ("N", 6144), ("K", 3584), ("wide", 1)], knobs(&[("BN", 128)]).with("MMA", "wgmma")),
        (vec![("M", 4096), ("N", 6144), ("K", 3584), ("act", 1)], default_knobs()),
        (vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("act", 1), ("packed", 1)], default_knobs()),
        (vec![("M", 1), ("N", 6144), ("K", 3584), ("act", 1), ("packed", 1)], default_knobs()),
        // PATH=stream knob points (the automatic choice at M <= 16 and for the 28x4 decode).
        (vec![("M", 16), ("N", 6144), ("K", 3584), ("packed", 1)], default_knobs()),
        (vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)], knobs(&[("BK", 128)]).with("PATH", "stream")),
        (
            vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("BN", 32), ("WA", 2)]).with("PATH", "stream"),
        ),
        (
            vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("BN", 128), ("WA", 8)]).with("PATH", "stream"),
        ),
        (
            vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("BN", 128), ("WA", 8)]).with("PATH", "stream"),
        ),
        (
            vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("BN", 32), ("WA", 2), ("BK", 128)]).with("PATH", "stream"),
        ),
        (vec![("M", 16), ("N", 6144), ("K", 3584)], default_knobs().with("PATH", "stream")),
        (vec![("M", 64), ("N", 6144), ("K", 3584), ("packed", 1)], knobs(&[("BK", 128)]).with("PATH", "stream")),
        // The bench comparison points: the unpipelined stream with the finalize launch (the previous default),
        // the pipelined one at 4 CTAs per SM, the unpipelined at 4, a one-wave split.
        (
            vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)],
            default_knobs().with("PF", "off").with("FIN", "kernel"),
        ),
        // (The stream kernels capped at four CTAs per SM, as measured on 2026-12-01.)
        (
            vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("MINB", 4)]).with("PATH", "stream"),
        ),
        (
            vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("MINB", 4)]).with("PF", "off").with("PATH", "stream"),
        ),
        (
            vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)],
            knobs(&[("MINB", 4)]).with("PF", "off").with("PATH", "stream"),
        ),
        (vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)], knobs(&[("SPLIT", 4)])),
        (vec![("M", 16), ("N", 6144), ("K", 3584), ("packed", 1)], knobs(&[("SPLIT", 4)])),
        // The tile path at the shapes the stream path now takes by default.
        (vec![("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)], default_knobs().with("PATH", "tile")),
        (vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)], default_knobs().with("PATH", "tile")),
    ] {
        let p = Preset::new("variant", &dims);
        assemble_all(&op, &p, &kn);
    }
}

/// The in-kernel split-K reduction (FIN=last: each CTA stores its partial, counts itself in on its tile's
/// arrival counter, the last one sums the partials in split order) against the f64 reference and bit for bit
/// against the second-launch finalize (FIN=kernel, the same order and rounding): edge token counts, K tails,
/// empty splits, grouped with empty groups, GLU epilogues with routing weights, NaN scale blocks, both weight
/// paths and a persistent grid. One launch instead of two; the counters are left at zero (a second launch on
/// the same buffers gives the same bits).
#[test]
fn split_reduction_in_kernel_matches_the_finalize_launch() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let op = Mxfp4Matmul;
    let cases: Vec<(Preset, Knobs)> = vec![
        (Preset::new("M1", &[("M", 1), ("K", 288), ("N", 40), ("packed", 1)]), knobs(&[("SPLIT", 3), ("BK", 64)])),
        (Preset::new("M15 tail", &[("M", 15), ("K", 160), ("N", 17), ("wide", 1)]), knobs(&[("SPLIT", 2), ("BK", 64)])),
        (Preset::new("M17", &[("M", 17), ("K", 96), ("N", 40), ("packed", 1)]), knobs(&[("SPLIT", 2), ("BK", 32)])),
        (Preset::new("M63", &[("M", 63), ("K", 224), ("N", 8)]), knobs(&[("SPLIT", 4), ("BK", 32)])),
        (
            Preset::new("M65 empty splits", &[("M", 65), ("K", 64), ("N", 33), ("p", 1)]),
            knobs(&[("SPLIT", 5), ("BK", 32)]),
        ),
        (
            Preset::new("stream M16", &[("M", 16), ("K", 416), ("N", 70), ("packed", 1), ("wide", 1)]),
            knobs(&[("SPLIT", 3)]).with("PATH", "stream"),
        ),
        (
            Preset::new(
                "grouped glu",
                &[
                    ("G", 4),
                    ("c0", 3),
                    ("c1", 0),
                    ("c2", 18),
                    ("c3", 1),
                    ("K", 224),
                    ("N", 48),
                    ("epilogue", 1),
                    ("p", 1),
                    ("wide", 1),
                ],
            ),
            knobs(&[("SPLIT", 3), ("BK", 64)]),
        ),
        (
            Preset::new(
                "grouped swiglu persistent",
                &[("G", 2), ("c0", 5), ("c1", 20), ("K", 128), ("N", 34), ("epilogue", 2)],
            ),
            knobs(&[("SPLIT", 2), ("BK", 32), ("CPS", 1)]),
        ),
        (
            Preset::new(
                "stream grouped",
                &[("G", 3), ("c0", 0), ("c1", 4), ("c2", 9), ("K", 320), ("N", 34), ("packed", 1)],
            ),
            knobs(&[("SPLIT", 3), ("BK", 64)]).with("PATH", "stream"),
        ),
        (
            // (The on-chip activation conversion: one launch; the first-launch form is in mx_small_m.rs.)
            Preset::new("x8", &[("G", 2), ("c0", 17), ("c1", 2), ("K", 160), ("N", 34), ("act", 1), ("packed", 1)]),
            knobs(&[("SPLIT", 2), ("BK", 64)]).with("MMA", "sync").with("XDQ", "tile"),
        ),
    ];
    for (p, kn) in &cases {
        let seed = rng.random();
        let last = kn.clone().with("FIN", "last");
        let kernel = kn.clone().with("FIN", "kernel");
        run(p, seed, &last);
        run(p, seed, &kernel);
        let inst = op.instance(p, seed).unwrap();
        let (pl, pk) = (inst.plan(&last).unwrap(), inst.plan(&kernel).unwrap());
        assert_eq!(pl.steps.len(), 1, "{}: FIN=last is one launch", p.name);
        assert_eq!(pk.steps.len(), 2, "{}: FIN=kernel is main + finalize", p.name);
        let bits =
            |pl: &k3k_ops::plan::Plan| -> Vec<u8> { Executor::Cpu.run(pl).unwrap().get("y").unwrap().data.clone() };
        assert_eq!(bits(&pl), bits(&pk), "{} [{last}]: FIN=last and FIN=kernel differ", p.name);
        // Two launches on the same buffers: the counters come back to zero and the second result is the first.
        let mut bufs: Vec<HostTensor> = pl.buffers.iter().map(|b| b.tensor.clone()).collect();
        let step = &pl.steps[0];
        let mut ys = vec![];
        for _ in 0..2 {
            let mut args: Vec<HostTensor> = step.args.iter().map(|&i| bufs[i].clone()).collect();
            interp::run(&step.kernel, &mut args, &[], InterpOptions::default()).unwrap();
            for (&i, t) in step.args.iter().zip(args) {
                bufs[i] = t;
            }
            let sem = &bufs[pl.index("sem").unwrap()];
            assert!(sem.to_f64_vec().iter().all(|&c| c == 0.0), "{}: counters left non-zero", p.name);
            ys.push(bufs[pl.index("y").unwrap()].data.clone());
        }
        assert_eq!(ys[0], ys[1], "{}: the second launch differs", p.name);
    }
    // The default at decode shapes is one launch (PATH=gemv: no split; the stream path: a split summed by the
    // last CTA); the wgmma kernel keeps its finalize and rejects FIN=last.
    let m1 = Preset::new("M1", &[("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)]);
    let ks = op.kernels(&m1, &op.default_knobs()).unwrap();
    assert_eq!(ks.len(), 1, "M1 default: one kernel");
    assert_eq!((ks[0].knobs.str("PATH").unwrap(), ks[0].knobs.u32("SPLIT").unwrap()), ("gemv", 1));
    let ks = op.kernels(&m1, &op.default_knobs().with("PATH", "stream")).unwrap();
    assert_eq!(ks.len(), 1, "M1 stream: one kernel");
    assert!(ks[0].knobs.u32("SPLIT").unwrap() > 1 && ks[0].knobs.str("FIN").unwrap() == "last");
    let tile = op.kernels(&m1, &op.default_knobs().with("PATH", "tile")).unwrap();
    assert_eq!((tile.len(), tile[0].knobs.str("FIN").unwrap()), (1, "last"));
    let w = Preset::new("w", &[("M", 130), ("K", 256), ("N", 64)]);
    let wk = knobs(&[("SPLIT", 2)]).with("MMA", "wgmma");
    assert_eq!(op.kernels(&w, &wk).unwrap().len(), 2);
    let inst = op.instance(&w, 1).unwrap();
    assert!(matches!(inst.plan(&wk.clone().with("FIN", "last")), Err(OpError::InvalidKnobs { .. })));
    assert!(matches!(inst.plan(&knobs(&[("SPLIT", 2)]).with("FIN", "bogus")), Err(OpError::InvalidKnobs { .. })));
}

/// PATH=stream with the software pipeline (PF=on: each K slice decodes the words the previous slice's
/// statement prefetched, then issues the next slice's loads) against the f64 reference and bit for bit against
/// PF=off: edge token counts, K tails shorter than BK, one-slice K ranges, splits (both reductions), grouped
/// with empty groups, a persistent grid (the pipeline restarts at every tile), both layouts, NaN scale blocks.
#[test]
fn stream_prefetch_matches_the_unpipelined_stream() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let op = Mxfp4Matmul;
    let stream = |pairs: &[(&str, i64)]| knobs(pairs).with("PATH", "stream");
    let cases: Vec<(Preset, Knobs)> = vec![
        (Preset::new("M1 tail", &[("M", 1), ("K", 608), ("N", 40), ("packed", 1)]), stream(&[])),
        (Preset::new("M15", &[("M", 15), ("K", 288), ("N", 17), ("wide", 1)]), stream(&[("BK", 64)])),
        (Preset::new("M17 one slice", &[("M", 17), ("K", 96), ("N", 40), ("packed", 1)]), stream(&[("BM", 16)])),
        (
            Preset::new("M63 split", &[("M", 63), ("K", 416), ("N", 8), ("packed", 1), ("wide", 1)]),
            stream(&[("BM", 16), ("BK", 64), ("SPLIT", 3)]),
        ),
        (
            Preset::new("M65 split kernel", &[("M", 65), ("K", 320), ("N", 33)]),
            stream(&[("BM", 16), ("BK", 64), ("SPLIT", 2)]).with("FIN", "kernel"),
        ),
        (
            Preset::new(
                "grouped",
                &[
                    ("G", 4),
                    ("c0", 0),
                    ("c1", 4),
                    ("c2", 17),
                    ("c3", 1),
                    ("K", 352),
                    ("N", 34),
                    ("p", 1),
                    ("packed", 1),
                ],
            ),
            stream(&[("BK", 64)]),
        ),
        (
            Preset::new("persistent", &[("G", 2), ("c0", 3), ("c1", 9), ("K", 480), ("N", 70), ("packed", 1)]),
            stream(&[("BK", 64), ("CPS", 1), ("SPLIT", 2)]),
        ),
    ];
    for (p, kn) in &cases {
        let seed = rng.random();
        let on = kn.clone().with("PF", "on");
        let off = kn.clone().with("PF", "off");
        run(p, seed, &on);
        let inst = op.instance(p, seed).unwrap();
        let y = |kn: &Knobs| Executor::Cpu.run(&inst.plan(kn).unwrap()).unwrap().get("y").unwrap().data.clone();
        assert_eq!(y(&on), y(&off), "{} [{on}]: PF=on and PF=off differ", p.name);
        let ks = op.kernels(p, &on).unwrap();
        assert_eq!(ks[0].knobs.str("PF").unwrap(), "on");
    }
    // (PATH=stream.) Auto: off (measured faster on the H200); PF=on compiles for 3 CTAs per SM; the tile path rejects PF=on.
    let m1 = Preset::new("M1", &[("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)]);
    let k = &op.kernels(&m1, &op.default_knobs().with("PATH", "stream")).unwrap()[0];
    assert_eq!((k.knobs.str("PF").unwrap(), k.min_blocks_per_sm), ("off", 0), "auto: the unpipelined stream");
    let k = &op.kernels(&m1, &op.default_knobs().with("PATH", "stream").with("PF", "on")).unwrap()[0];
    assert_eq!(
        (k.knobs.str("PF").unwrap(), k.min_blocks_per_sm),
        ("on", 3),
        "PF=on: pipelined, compiled for 3 CTAs per SM"
    );
    let off = &op.kernels(&m1, &op.default_knobs().with("PATH", "stream").with("PF", "off")).unwrap()[0];
    assert_eq!(off.min_blocks_per_sm, 0, "PF=off: the unpipelined kernel as before");
    let capped = &op.kernels(&m1, &knobs(&[("MINB", 4)]).with("PF", "off").with("PATH", "stream")).unwrap()[0];
    assert_eq!(capped.min_blocks_per_sm, 4);
    assert!(matches!(op.instance(&m1, 1).unwrap().plan(&knobs(&[("MINB", 17)])), Err(OpError::InvalidKnobs { .. })));
    let p = Preset::new("t", &[("M", 4), ("K", 64), ("N", 32)]);
    let inst = op.instance(&p, 1).unwrap();
    assert!(matches!(inst.plan(&knobs(&[]).with("PATH", "tile").with("PF", "on")), Err(OpError::InvalidKnobs { .. })));
    assert!(matches!(inst.plan(&stream(&[]).with("PF", "bogus")), Err(OpError::InvalidKnobs { .. })));
}

/// PATH=gemv with STAGES >= 3 renders the shared-memory ring (`Stmt::Fp4Gemv` staged) with its stages past the
/// warps' partial tiles and records the stage count; the automatic knobs keep the register ring at M1 and take the
/// 3-stage ring for grouped decode with many tiles and for dense M16.
#[test]
fn gemv_staged_ring_is_a_knob() {
    let op = Mxfp4Matmul;
    let g28 = Preset::new("g28", &[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)]);
    let m1 = Preset::new("m1", &[("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)]);
    for (p, stages) in [(&g28, 8i64), (&m1, 4), (&m1, 3)] {
        let k = knobs(&[("STAGES", stages)]).with("PATH", "gemv");
        let ks = op.kernels(p, &k).unwrap();
        let main = &ks[0];
        assert_eq!(main.knobs.u32("STAGES").unwrap(), stages as u32, "{}", p.name);
        let count = |k: &k3k_ir::Kernel, want: bool| {
            let mut n = 0;
            k.visit_stmts(&mut |s| {
                if let k3k_ir::Stmt::Fp4Gemv(g) = s
                    && g.staged == want
                    && (!want || g.ring == stages as u32)
                {
                    n += 1;
                }
            });
            n
        };
        assert_eq!(count(main, true), 1, "{}: one staged fp4_gemv", p.name);
    }
    let m16 = Preset::new("m16", &[("M", 16), ("N", 6144), ("K", 3584), ("packed", 1)]);
    for (p, staged) in [(&g28, true), (&m16, true), (&m1, false)] {
        let auto = op.kernels(p, &default_knobs()).unwrap();
        let main = &auto[0];
        let n = |want: bool| {
            let mut n = 0;
            main.visit_stmts(&mut |s| n += matches!(s, k3k_ir::Stmt::Fp4Gemv(g) if g.staged == want) as i32);
            n
        };
        assert_eq!((n(true), n(false)), if staged { (1, 0) } else { (0, 1) }, "{}", p.name);
        assert_eq!(main.knobs.u32("STAGES").unwrap(), if staged { 3 } else { 2 }, "{}", p.name);
    }
}

/// Outputs behind a product whose terms cancel below their f32 error bound are not compared, and say so; every
/// other output still is. The fuzzer's case (wide scale range, MXFP8 activations, SiTU-GLU): one up-projection
/// sums terms of 1.3e11 to -13.65, which no f32 accumulation determines (the interpreter gets exactly 0, so the
/// output is 0 against -49.8).
#[test]
fn outputs_of_products_that_cancel_below_f32_are_not_compared_and_counted() {
    let op = Mxfp4Matmul;
    let dims = [("K", 96), ("M", 7), ("N", 50), ("act", 1), ("epilogue", 1), ("p", 0), ("packed", 0), ("wide", 1)];
    let inst = op.instance(&Preset::new("cancel", &dims), 15541684834641791715).unwrap();
    let out = Executor::Cpu.run(&inst.plan(&default_knobs()).unwrap()).unwrap();
    let r = inst.check(&out).unwrap();
    assert!(r.passed, "{}", r.detail);
    assert!(r.scope.contains("1 output(s) not compared"), "{}", r.scope);
    // A wrong value in any other output still fails.
    let mut bad = out.clone();
    let y = bad.0.get_mut("y").unwrap();
    let mut v = y.to_f32_vec();
    v[3] += 40.0;
    *y = HostTensor::from_f32(DType::Bf16, &y.shape.clone(), &v);
    let r = inst.check(&bad).unwrap();
    assert!(!r.passed, "a corrupted determined output must fail: {}", r.scope);
    // Realistic scales never leave an output undetermined.
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..6 {
        let d =
            [("K", 64 * rng.random_range(1..4)), ("M", rng.random_range(1..20)), ("N", 2 * rng.random_range(4..40))];
        let epi = rng.random_range(0..3);
        let p =
            Preset::new("real", &[d[0], d[1], d[2], ("epilogue", epi), ("act", rng.random_range(0..2)), ("wide", 0)]);
        let inst = op.instance(&p, rng.random()).unwrap();
        let r = inst.check(&Executor::Cpu.run(&inst.plan(&default_knobs()).unwrap()).unwrap()).unwrap();
        assert!(r.passed && !r.scope.contains("not compared"), "{}: {} {}", inst.describe(), r.scope, r.detail);
    }
}

/// The 28 x 4 decode's FAST staged ring with the `L2PF` knob: only the copies change (the program differs, its
/// products, multiplies and copies are as many) and every copy carries the prefetch size. With tile-major weights
/// (`tiles`) the kernel keeps the fast form only (no zero-filling copies of the general form, fewer products).
/// Every variant compiles without spills.
#[test]
fn l2pf_changes_the_decode_copies_only_and_tiles_keep_the_fast_form() {
    use k3k_codegen::{ARCH, nvrtc, ptxas, render};
    let dims = [("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)];
    let ptx = |extra: &[(&str, i64)], knobs: &Knobs| {
        let d: Vec<(&str, i64)> = dims.iter().chain(extra).copied().collect();
        let main = Mxfp4Matmul.kernels(&Preset::new("g28", &d), knobs).unwrap().remove(0);
        let out = nvrtc::compile_ptx(&main.name, &render(&main).unwrap(), ARCH).unwrap().ptx;
        let spills = ptxas::assemble(&main.name, &out, ARCH).unwrap().resources.spills();
        assert!(!spills, "{} spills", main.name);
        out
    };
    let base = ptx(&[], &knobs(&[("L2PF", 0)]));
    assert!(!base.contains(".L2::"));
    // L2PF=auto (the default) is 128 on this ring.
    assert_eq!(ptx(&[], &default_knobs()), ptx(&[], &knobs(&[("L2PF", 128)])), "auto = 128 on the staged ring");
    let count = |ptx: &str, what: &str| ptx.matches(what).count();
    let copies = ["cp.async.cg.shared.global", "cp.async.ca.shared.global"];
    // (At the packed kernel's tile shape, not the tile-major default's wider one.)
    let tiles = ptx(&[("tiles", 1)], &knobs(&[("L2PF", 0), ("BN", 32), ("BK", 256), ("MINB", 5)]));
    assert!(base.contains("], 16, %r") && !tiles.contains("], 16, %r"), "tiles: no general-form copies");
    let mma = "mma.sync.aligned.m16n8k16";
    assert!(count(&tiles, mma) > 0 && count(&tiles, mma) < count(&base, mma));
    for (name, x) in
        [("L2PF=128", ptx(&[], &knobs(&[("L2PF", 128)]))), ("L2PF=256", ptx(&[], &knobs(&[("L2PF", 256)])))]
    {
        assert_ne!(base, x, "{name}: the FAST ring's copies change");
        for what in ["mma.sync.aligned.m16n8k16", "mul.rn.bf16x2", copies[0], copies[1]] {
            assert_eq!(count(&base, what), count(&x, what), "{name}: {what}");
        }
        if let Some(size) = name.strip_prefix("L2PF=") {
            for c in copies {
                assert_eq!(count(&x, &format!("{c}.L2::{size}B")), count(&x, c), "{name}: every {c} has the hint");
            }
        }
    }
}

/// `L2PF` (the staged ring's L2 prefetch size) is a hint: the values are the reference's at every size; it is
/// refused off the shared-memory ring and at other sizes.
#[test]
fn l2pf_keeps_the_values_and_is_refused_where_it_means_nothing() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let g = Preset::new(
        "gemv l2pf",
        &[("G", 3), ("c0", 4), ("c1", 0), ("c2", 7), ("K", 640), ("N", 64), ("packed", 1), ("act", 1)],
    );
    for size in [64, 128, 256] {
        run(&g, rng.random(), &knobs(&[("STAGES", 3), ("L2PF", size)]).with("PATH", "gemv"));
    }
    let d = Preset::new("dense", &[("M", 4), ("K", 256), ("N", 32), ("packed", 1)]);
    run(&d, rng.random(), &knobs(&[("STAGES", 4), ("L2PF", 256)]).with("PATH", "gemv"));
    for bad in [
        knobs(&[("STAGES", 3), ("L2PF", 100)]).with("PATH", "gemv"),
        knobs(&[("STAGES", 2), ("L2PF", 128)]).with("PATH", "gemv"),
        knobs(&[("L2PF", 128)]).with("PATH", "tile"),
        knobs(&[("L2PF", 128)]).with("PATH", "stream"),
    ] {
        match Mxfp4Matmul.kernels(&d, &bad) {
            Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains("L2PF"), "{bad}: {why}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    match Mxfp4Matmul.kernels(&d, &default_knobs().with("L2PF", "big")) {
        Err(OpError::InvalidKnobs { why, .. }) => {
            assert!(why.contains("L2PF must be auto or a number, got big"), "{why}")
        }
        other => panic!("L2PF=big: {other:?}"),
    }
    // The prefill path (dq_gemm) has no such copies.
    let big = Preset::new("prefill", &[("M", 300), ("K", 256), ("N", 64), ("packed", 1)]);
    let e = Mxfp4Matmul.kernels(&big, &knobs(&[("L2PF", 128)]).with("PATH", "dq_gemm")).unwrap_err().to_string();
    assert!(e.contains("L2PF"), "{e}");
}

/// PATH=gemv's shared-memory ring takes tiles of up to 128 weight rows (8 blocks per quad; the register ring keeps
/// 64): the reference's values on packed and tile-major weights, grouped and GLU; at 28 x 4 without spills; beyond
/// 128 rows, on the register ring, or past the shared memory, refused by name.
#[test]
fn gemv_staged_ring_takes_128_row_tiles() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let g = |extra: &[(&str, i64)]| {
        let mut d = vec![("G", 3), ("c0", 4), ("c1", 0), ("c2", 7), ("K", 384), ("N", 256)];
        d.extend_from_slice(extra);
        Preset::new("g wide", &d)
    };
    for (p, kn) in [
        (g(&[("packed", 1)]), knobs(&[("BN", 128), ("BK", 128), ("STAGES", 3)])),
        (g(&[("tiles", 1)]), knobs(&[("BN", 128), ("BK", 128)])),
        (g(&[("packed", 1), ("epilogue", 1), ("p", 1)]), knobs(&[("BN", 256), ("BK", 256), ("STAGES", 4)])),
        (g(&[("packed", 1), ("act", 1)]), knobs(&[("BN", 96), ("BK", 128), ("STAGES", 3)])),
    ] {
        let kn = kn.with("PATH", "gemv");
        let ks = Mxfp4Matmul.kernels(&p, &kn).unwrap();
        let main = ks.iter().find(|k| k.name.starts_with("k3k_mxfp4_mm")).unwrap();
        assert_eq!(main.knobs.str("PATH").unwrap(), "gemv", "{}", main.name);
        run(&p, rng.random(), &kn);
    }
    let g28 = Preset::new("g28", &[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("tiles", 1)]);
    assemble_all(&Mxfp4Matmul, &g28, &knobs(&[("BN", 128), ("BK", 128), ("MINB", 3)]));
    let p = g(&[("packed", 1)]);
    for (bad, what) in [
        (knobs(&[("BN", 144), ("STAGES", 3)]), "at most 64 (128 with STAGES >= 3)"),
        (knobs(&[("BN", 128), ("STAGES", 2), ("GR", 1)]), "at most 64 (128 with STAGES >= 3)"),
        (knobs(&[("BN", 128), ("BK", 1024), ("STAGES", 8), ("WA", 4)]), "bytes of shared memory"),
    ] {
        let bad = bad.with("PATH", "gemv");
        match Mxfp4Matmul.kernels(&p, &bad) {
            Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains(what), "{bad}: {why}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

/// `L2PF=auto` (the default): 128 on the per-lane shared-memory ring, none on the register ring, the tile path,
/// the bulk ring and the prefill path. The kernels record the value wherever auto would set it, so an explicit 0
/// re-resolves to the same kernel; elsewhere they record nothing (their names and programs as before auto).
#[test]
fn l2pf_auto_prefetches_on_the_per_lane_ring_only() {
    let first = |p: &Preset, k: &Knobs| Mxfp4Matmul.kernels(p, k).unwrap().remove(0);
    let recorded = |k: &Kernel| k.knobs.0.get("L2PF").map(|v| v.to_string());
    let g28 = Preset::new("g28", &[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1)]);
    let tiles = Preset::new("g28 tiles", &[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("tiles", 1)]);
    let m1 = Preset::new("m1", &[("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)]);
    let m64 = Preset::new("m64", &[("M", 64), ("N", 6144), ("K", 3584), ("packed", 1)]);
    for (p, k, want) in [
        (&g28, default_knobs(), Some("128")),
        (&tiles, default_knobs(), Some("128")),
        (&g28, knobs(&[("L2PF", 0)]), Some("0")),
        (&g28, knobs(&[("L2PF", 256)]), Some("256")),
        (&tiles, default_knobs().with("COPY", "bulk"), None),
        (&m1, default_knobs(), None),
        (&m64, default_knobs(), None),
    ] {
        let kernel = first(p, &k);
        assert_eq!(recorded(&kernel).as_deref(), want, "{} at {k}", p.name);
        // The recorded knobs give the same kernel back.
        assert_eq!(first(p, &kernel.knobs).name, kernel.name, "{} at {k}", p.name);
    }
    // An explicit 0 is a different kernel from auto's.
    assert_ne!(first(&g28, &knobs(&[("L2PF", 0)])).name, first(&g28, &default_knobs()).name);
}

/// Tile-major packed weights (`WeightBytes::PackedTiles`, `mx::pack::tile`): the gemv shared-memory ring against the
/// f64 reference on the untiled weights (grouped with empty groups, dense, GLU with routing weights, MXFP8
/// activations, wide scales, L2PF, deeper rings), the JIT bit for bit with the interpreter, and every shape or knob
/// set the layout cannot take refused by name.
#[test]
fn tile_major_weights_decode_on_the_gemv_ring() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let grouped = |extra: &[(&str, i64)]| {
        let mut d = vec![("G", 4), ("c0", 4), ("c1", 0), ("c2", 8), ("c3", 1), ("K", 512), ("N", 64), ("tiles", 1)];
        d.extend_from_slice(extra);
        Preset::new("tiles", &d)
    };
    let presets = [
        grouped(&[]),
        grouped(&[("epilogue", 1), ("p", 1)]),
        grouped(&[("act", 1), ("wide", 1)]),
        Preset::new("tiles dense", &[("M", 5), ("K", 384), ("N", 96), ("tiles", 1)]),
    ];
    for p in &presets {
        for kn in [
            default_knobs(),
            knobs(&[("L2PF", 256), ("STAGES", 4)]),
            knobs(&[("BN", 32), ("BK", 128), ("WA", 2)]),
            default_knobs().with("COPY", "bulk"),
            knobs(&[("STAGES", 5), ("BN", 32)]).with("COPY", "bulk"),
            // Persistent grids (4 SMs on the CPU): 6 tiles of 32 rows on 4 CTAs (3 work, 2 tiles each; one exits at
            // once) and on 16.
            knobs(&[("CPS", 1), ("BN", 32)]),
            knobs(&[("CPS", 4), ("BN", 32)]),
        ] {
            run(p, rng.random(), &kn);
        }
        let ks = Mxfp4Matmul.kernels(p, &default_knobs()).unwrap();
        assert!(ks[0].name.contains("_tiles") && ks[0].knobs.str("PATH").unwrap() == "gemv", "{}", ks[0].name);
        assert!(ks[0].knobs.u32("STAGES").unwrap() >= 3);
    }
    // The JIT reads the tiled words and scales as the interpreter does.
    let inst = Mxfp4Matmul.instance(&presets[1], rng.random()).unwrap();
    let plan = inst.plan(&default_knobs()).unwrap();
    let outs = interp_and_jit_buffers(&plan);
    let y = plan.index("y").unwrap();
    assert_eq!(outs[0][y].data, outs[1][y].data, "JIT and interpreter agree on tiled weights");
    // Refused by name: shapes the layout cannot hold, paths and knobs that cannot read it.
    for (dims, what) in [
        (vec![("G", 2), ("per", 4), ("K", 512), ("N", 48), ("tiles", 1)], "N a multiple of 32"),
        (vec![("G", 2), ("per", 4), ("K", 320), ("N", 64), ("tiles", 1)], "K of 128"),
        (vec![("G", 2), ("per", 9), ("K", 512), ("N", 64), ("tiles", 1)], "at most 8 tokens"),
    ] {
        let e = Mxfp4Matmul.kernels(&Preset::new("bad", &dims), &default_knobs()).unwrap_err().to_string();
        assert!(e.contains(what), "{dims:?}: {e}");
    }
    let p = &presets[0];
    for (kn, what) in [
        (default_knobs().with("PATH", "tile"), "PATH=gemv only"),
        (knobs(&[("STAGES", 2)]), "STAGES >= 3"),
        (knobs(&[("SPLIT", 2)]), "no K split"),
        (knobs(&[("BN", 48)]), "whole weight tiles"),
        (knobs(&[("L2PF", 128)]).with("COPY", "bulk"), "L2PF=0"),
    ] {
        match Mxfp4Matmul.kernels(p, &kn) {
            Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains(what), "[{kn}]: {why}"),
            other => panic!("[{kn}]: {other:?}"),
        }
    }
}

/// `COPY=bulk` (tile-major weights only): the 28 x 4 decode's ring is filled by whole-block `cp.async.bulk` copies
/// on stage barriers instead of per-lane `cp.async`; the products are the same (as many mma and bf16 multiplies as
/// the per-lane kernel), no spills. Refused by name on row-major weights, with L2PF, off PATH=gemv and at unknown
/// values; `COPY=lanes` and `auto` build the per-lane kernel.
#[test]
fn bulk_copies_fill_the_tiled_ring() {
    use k3k_codegen::{ARCH, nvrtc, ptxas, render};
    let tiles = Preset::new("g28", &[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("packed", 1), ("tiles", 1)]);
    let ptx = |knobs: &Knobs| {
        let main = Mxfp4Matmul.kernels(&tiles, knobs).unwrap().remove(0);
        let out = nvrtc::compile_ptx(&main.name, &render(&main).unwrap(), ARCH).unwrap().ptx;
        assert!(!ptxas::assemble(&main.name, &out, ARCH).unwrap().resources.spills(), "{} spills", main.name);
        (main.name, out)
    };
    let (lanes_name, lanes) = ptx(&default_knobs());
    let (bulk_name, bulk) = ptx(&default_knobs().with("COPY", "bulk"));
    assert!(bulk_name.contains("copybulk") && !lanes_name.contains("copy"), "{lanes_name} / {bulk_name}");
    assert_eq!(ptx(&default_knobs().with("COPY", "lanes")).1, lanes, "lanes is the per-lane kernel");
    let count = |ptx: &str, what: &str| ptx.matches(what).count();
    let bulk_copy = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes";
    assert_eq!(count(&lanes, bulk_copy), 0);
    assert!(count(&bulk, bulk_copy) > 0 && count(&bulk, "mbarrier.try_wait.parity") > 0);
    let per_lane = "cp.async.cg.shared.global";
    assert!(count(&lanes, per_lane) > 0 && count(&bulk, per_lane) == 0);
    // Tile-major scales go whole (16-byte copies of the blocks' 64 bytes), not as per-lane 4-byte words.
    let scale_words = "cp.async.ca.shared.global";
    assert_eq!((count(&lanes, scale_words), count(&bulk, scale_words)), (0, 0));
    for what in ["mma.sync.aligned.m16n8k16", "mul.rn.bf16x2"] {
        assert_eq!(count(&lanes, what), count(&bulk, what), "{what}");
    }
    let packed = Preset::new("g4", &[("G", 4), ("per", 4), ("N", 64), ("K", 512), ("packed", 1)]);
    for (p, kn, what) in [
        (&packed, default_knobs().with("COPY", "bulk").with("PATH", "gemv"), "tile-major weights"),
        (&tiles, knobs(&[("L2PF", 256)]).with("COPY", "bulk"), "L2PF=0"),
        (&packed, default_knobs().with("COPY", "bulk").with("PATH", "tile"), "COPY=bulk needs PATH=gemv"),
        (&packed, default_knobs().with("COPY", "tma"), "COPY must be auto, lanes or bulk, got tma"),
    ] {
        match Mxfp4Matmul.kernels(p, &kn) {
            Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains(what), "[{kn}]: {why}"),
            other => panic!("[{kn}]: {other:?}"),
        }
    }
    let big = Preset::new("prefill", &[("M", 300), ("K", 256), ("N", 64), ("packed", 1)]);
    let e = Mxfp4Matmul.kernels(&big, &default_knobs().with("COPY", "bulk").with("PATH", "dq_gemm")).unwrap_err();
    assert!(e.to_string().contains("COPY"), "{e}");
}

/// `XA=2` (the staged ring loads each quad's activations two quads ahead of its product): the reference's values
/// on packed and tile-major weights, grouped (empty groups, a ragged last quad), GLU with a row scale and MXFP8
/// activations; the same loads and products as XA=1 in the PTX, no spills at the 28 x 4 default; the automatic
/// choice of 8-token staged rings (recorded there at 1 and 2, so both re-resolve to themselves; not recorded for
/// 16-token tiles or the register ring); refused off the shared-memory ring, with 16-token tiles, at other values
/// and on the prefill path.
#[test]
fn xa_loads_the_activations_two_quads_ahead() {
    use k3k_codegen::{ARCH, nvrtc, ptxas, render};
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let xa2 = |k: Knobs| k.with("XA", 2i64).with("PATH", "gemv");
    let g = [("G", 3), ("c0", 4), ("c1", 0), ("c2", 7), ("K", 640), ("N", 64)];
    let with = |extra: &[(&'static str, i64)]| -> Vec<(&'static str, i64)> { g.iter().chain(extra).copied().collect() };
    run(&Preset::new("packed", &with(&[("packed", 1)])), rng.random(), &xa2(knobs(&[("STAGES", 3)])));
    run(&Preset::new("tiles", &with(&[("tiles", 1)])), rng.random(), &xa2(knobs(&[("STAGES", 4), ("BN", 32)])));
    let glu = with(&[("packed", 1), ("epilogue", 1), ("p", 1), ("act", 1)]);
    run(&Preset::new("glu", &glu), rng.random(), &xa2(knobs(&[("STAGES", 3)])));
    let dense = Preset::new("dense", &[("M", 5), ("K", 992), ("N", 48), ("packed", 1)]);
    run(&dense, rng.random(), &xa2(knobs(&[("STAGES", 3)])));

    let tiles = Preset::new("g28 tiles", &[("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("tiles", 1)]);
    let main = |k: &Knobs| Mxfp4Matmul.kernels(&tiles, k).unwrap().remove(0);
    let (auto, one, two) = (main(&default_knobs()), main(&knobs(&[("XA", 1)])), main(&knobs(&[("XA", 2)])));
    assert_eq!(auto.name, two.name, "XA=2 is the automatic kernel of 8-token staged rings");
    assert_eq!((one.knobs.u32("XA").unwrap(), two.knobs.u32("XA").unwrap()), (1, 2), "{} / {}", one.knobs, two.knobs);
    for k in [&one, &two] {
        assert_eq!(main(&k.knobs).name, k.name, "the recorded knobs give the same kernel back");
    }
    // 16-token tiles and the register ring keep 1 (not recorded).
    let m16 = Preset::new("m16", &[("M", 16), ("N", 6144), ("K", 3584), ("packed", 1)]);
    let m1 = Preset::new("m1", &[("M", 1), ("N", 6144), ("K", 3584), ("packed", 1)]);
    for p in [&m16, &m1] {
        let k = Mxfp4Matmul.kernels(p, &default_knobs()).unwrap().remove(0);
        assert!(!k.knobs.0.contains_key("XA"), "{}", k.knobs);
    }
    let ptx = |k: &Kernel| {
        let out = nvrtc::compile_ptx(&k.name, &render(k).unwrap(), ARCH).unwrap().ptx;
        assert!(!ptxas::assemble(&k.name, &out, ARCH).unwrap().resources.spills(), "{} spills", k.name);
        out
    };
    let (p1, p2) = (ptx(&one), ptx(&two));
    assert_ne!(p1, p2);
    let count = |ptx: &str, what: &str| ptx.matches(what).count();
    for what in ["mma.sync.aligned.m16n8k16", "cp.async.cg.shared.global", "ld.global.nc.v4"] {
        assert!(count(&p1, what) > 0, "{what}");
        // (XA=2 loads the second quad's activations once more, before the loop.)
        assert!(count(&p2, what) >= count(&p1, what) && count(&p2, what) <= count(&p1, what) + 4, "{what}");
    }
    for (bad, what) in [
        (knobs(&[("XA", 2), ("STAGES", 2)]).with("PATH", "gemv"), "XA=2 needs"),
        (knobs(&[("XA", 2), ("STAGES", 3), ("BM", 16)]).with("PATH", "gemv"), "BM=8"),
        (knobs(&[("XA", 3)]).with("PATH", "gemv"), "XA=3 needs 1 or 2"),
        (knobs(&[("XA", 2)]).with("PATH", "tile"), "XA=2 needs PATH=gemv"),
    ] {
        match Mxfp4Matmul.kernels(&dense, &bad) {
            Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains(what), "{bad}: {why}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    let big = Preset::new("prefill", &[("M", 300), ("K", 256), ("N", 64), ("packed", 1)]);
    let e = Mxfp4Matmul.kernels(&big, &knobs(&[("XA", 2)]).with("PATH", "dq_gemm")).unwrap_err().to_string();
    assert!(e.contains("XA"), "{e}");
}

/// A grouped problem of five groups (two empty, one of two 16-token tiles), K and N given, with `rest` (layout,
/// epilogue, row scales, activations).
fn five_groups(name: &str, k: i64, n: i64, rest: &[(&str, i64)]) -> Preset {
    let mut d = vec![("G", 5), ("c0", 0), ("c1", 4), ("c2", 0), ("c3", 17), ("c4", 1), ("K", k), ("N", n)];
    d.extend_from_slice(rest);
    Preset::new(name, &d)
}

/// A grouped problem on tile-major weights: four groups (one empty), 64 rows, K = 512.
fn four_tiled_groups(name: &str, extra: &[(&str, i64)]) -> Preset {
    let mut d = vec![("G", 4), ("c0", 4), ("c1", 0), ("c2", 8), ("c3", 1), ("K", 512), ("N", 64), ("tiles", 1)];
    d.extend_from_slice(extra);
    Preset::new(name, &d)
}

/// Every buffer of `plan` after a run on the interpreter, then after one on the JIT.
fn interp_and_jit_buffers(plan: &k3k_ops::plan::Plan) -> Vec<Vec<HostTensor>> {
    use k3k_codegen::cpu::jit;
    [false, true]
        .into_iter()
        .map(|use_jit| {
            plan.run_host(|kernel, args, scalars| {
                if use_jit {
                    jit::compile(kernel).unwrap().run(args, scalars, InterpOptions::default()).unwrap();
                } else {
                    interp::run(kernel, args, scalars, InterpOptions::default()).unwrap();
                }
                Ok(())
            })
            .unwrap()
        })
        .collect()
}

/// The plan of `p` at `kn` run on the interpreter and on the JIT: the same `y` bit for bit, every arrival counter
/// (`sem`) back at zero for the next launch, and the interpreter's output within the check.
fn interp_and_jit_agree_and_reset_counters(p: &Preset, kn: &Knobs, seed: u64) {
    let inst = Mxfp4Matmul.instance(p, seed).unwrap();
    let plan = inst.plan(kn).unwrap();
    let mut outs = interp_and_jit_buffers(&plan);
    let (y, sem) = (plan.index("y").unwrap(), plan.index("sem").unwrap());
    assert_eq!(outs[0][y].data, outs[1][y].data, "JIT and interpreter agree [{kn}]");
    for o in &outs {
        assert!(o[sem].data.iter().all(|&b| b == 0), "every split tile's counter is reset [{kn}]");
    }
    let r = inst.check(&plan.outputs(outs.remove(0))).unwrap();
    assert!(r.passed, "[{kn}] {}", r.detail);
}

/// PATH=gemv stream-K (`CPS` > 0, `SK=1`): every CTA an equal run of the tiles' BK units, a tile split between two
/// CTAs summed by the second to arrive. Against the f64 reference on the CPU's 4 SMs: runs that split tiles (grouped
/// with empty groups, GLU epilogues with routing weights, natural and packed words, two token tiles, N tails, dense),
/// tile-major weights (segments that start at K > 0: the tiled offsets), more CTAs than tiles (no split); the JIT bit
/// for bit with the interpreter; the arrival counters left at zero for the next launch; the knob sets it cannot
/// take refused by name.
#[test]
fn gemv_stream_k_splits_tiles_between_ctas() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let sk = |pairs: &[(&str, i64)]| knobs(pairs).with("PATH", "gemv").with("SK", 1i64);
    for (packed, wide, epi, pw) in [(1i64, 0i64, 0i64, 0i64), (0, 1, 1, 1), (1, 1, 2, 1)] {
        let p = five_groups("sk grouped", 640, 66, &[("epilogue", epi), ("p", pw), ("packed", packed), ("wide", wide)]);
        run(&p, rng.random(), &sk(&[("CPS", 1), ("BK", 128), ("BN", 32)]));
        run(&p, rng.random(), &sk(&[("CPS", 2), ("BK", 256), ("STAGES", 3), ("BN", 32)]));
        run(&p, rng.random(), &sk(&[("CPS", 3), ("BK", 128), ("GR", 2)]));
        run(&p, rng.random(), &sk(&[("CPS", 16)]));
    }
    // Dense: 5 weight tiles of 16 rows x 9 units on 4 CTAs (11, 11, 11 and 12 units).
    let dense = Preset::new("sk dense", &[("M", 3), ("K", 1152), ("N", 80), ("packed", 1)]);
    run(&dense, rng.random(), &sk(&[("CPS", 1), ("BK", 128), ("BN", 16)]));
    run(&dense, rng.random(), &sk(&[("CPS", 1), ("BK", 128), ("BN", 16), ("STAGES", 4)]).with("FIN", "last"));
    // Tile-major: 6 tiles of 32 rows x 4 units on 4 CTAs (6 units each: three tiles split at K = 256).
    let tiles = |extra: &[(&str, i64)]| four_tiled_groups("sk tiles", extra);
    for p in [tiles(&[]), tiles(&[("epilogue", 1), ("p", 1)])] {
        run(&p, rng.random(), &knobs(&[("CPS", 1), ("SK", 1), ("BK", 128), ("BN", 32)]));
        run(&p, rng.random(), &knobs(&[("CPS", 1), ("SK", 1), ("BK", 128), ("BN", 32)]).with("COPY", "bulk"));
    }
    let kn = knobs(&[("CPS", 1), ("SK", 1), ("BK", 128), ("BN", 32)]);
    interp_and_jit_agree_and_reset_counters(&tiles(&[("epilogue", 1), ("p", 1)]), &kn, rng.random());
    // Refused by name.
    let g = tiles(&[]);
    for (kn, what) in [
        (sk(&[]), "CPS > 0"),
        (sk(&[("CPS", 1), ("SPLIT", 2)]), "SPLIT 0 or 1"),
        (sk(&[("CPS", 1)]).with("FIN", "kernel"), "FIN auto or last"),
        (knobs(&[("CPS", 1), ("SK", 2)]).with("PATH", "gemv"), "SK=2: 0 or 1"),
        (knobs(&[("CPS", 1), ("SK", 1)]).with("PATH", "tile"), "SK=1 needs PATH=gemv"),
    ] {
        let e = Mxfp4Matmul.kernels(&Preset::new("sk dense", &[("M", 3), ("K", 1152), ("N", 80)]), &kn);
        let e = e.map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(what), "{kn}: {e}");
    }
    assert!(Mxfp4Matmul.kernels(&g, &knobs(&[("CPS", 1), ("SK", 1)])).is_ok());
}

/// PATH=gemv's tail split (`TS`: the last TS groups' tiles in two K halves on the hardware-scheduled grid, summed by
/// the second to arrive). Against the f64 reference: grouped with empty groups (split groups empty or of two token
/// tiles), GLU epilogues with routing weights, natural and packed words, TS past G, tile-major weights (the second
/// half's views start at K > 0) with per-lane and bulk copies; the JIT bit for bit with the interpreter; every
/// counter back at zero; the knob sets it cannot take refused by name.
#[test]
fn gemv_tail_split_halves_the_last_groups_tiles() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let ts = |pairs: &[(&str, i64)]| knobs(pairs).with("PATH", "gemv");
    for (packed, wide, epi, pw) in [(1i64, 0i64, 0i64, 0i64), (0, 1, 1, 1), (1, 1, 2, 1)] {
        let p = five_groups("ts grouped", 640, 66, &[("epilogue", epi), ("p", pw), ("packed", packed), ("wide", wide)]);
        run(&p, rng.random(), &ts(&[("TS", 1), ("BK", 128), ("BN", 32)]));
        run(&p, rng.random(), &ts(&[("TS", 2), ("BK", 256), ("STAGES", 3), ("BN", 32)]));
        run(&p, rng.random(), &ts(&[("TS", 3), ("BK", 128), ("GR", 2)]));
        run(&p, rng.random(), &ts(&[("TS", 9)]).with("FIN", "last"));
    }
    let tiles = |extra: &[(&str, i64)]| four_tiled_groups("ts tiles", extra);
    for p in [tiles(&[]), tiles(&[("epilogue", 1), ("p", 1)])] {
        run(&p, rng.random(), &knobs(&[("TS", 2), ("BK", 128), ("BN", 32)]));
        run(&p, rng.random(), &knobs(&[("TS", 4), ("BK", 128), ("BN", 32)]).with("COPY", "bulk"));
    }
    let kn = knobs(&[("TS", 3), ("BK", 128), ("BN", 32)]);
    interp_and_jit_agree_and_reset_counters(&tiles(&[("epilogue", 1), ("p", 1)]), &kn, rng.random());
    let dense = Preset::new("ts dense", &[("M", 3), ("K", 1152), ("N", 80)]);
    for (p, kn, what) in [
        (&dense, ts(&[("TS", 1)]), "grouped weights"),
        (&tiles(&[]), knobs(&[("TS", 2), ("CPS", 4)]), "CPS=0"),
        (&tiles(&[]), knobs(&[("TS", 2)]).with("FIN", "kernel"), "FIN auto or last"),
        (&tiles(&[]), knobs(&[("TS", 2), ("CPS", 4), ("SK", 1)]), "SK=0"),
        (&dense, knobs(&[("TS", 1)]).with("PATH", "tile"), "TS=1 needs PATH=gemv"),
    ] {
        let e = Mxfp4Matmul.kernels(p, &kn).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(what), "{kn}: {e}");
    }
}
