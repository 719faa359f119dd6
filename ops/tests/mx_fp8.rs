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
#[path = "common/plan_run.rs"]
mod plan_run;

fn fp8(pairs: &[(&str, i64)]) -> Knobs {
    let mut k = k3k_ops::mx::matmul::default_knobs();
    k.set("MMA", "fp8");
    for (n, v) in pairs {
        k.set(n, *v);
    }
    k
}

/// `TURN` given as 0 / 1 in the pair lists stands for `mma` / `ffma`.
fn turn_names(mut k: Knobs) -> Knobs {
    if let Ok(t) = k.int("TURN") {
        k.set("TURN", if t == 0 { "mma" } else { "ffma" });
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
            // F8V=4: the folded weights converted by a first launch, then the producer-warp GEMM (wide = 1: the
            // F8V=2 kernel); two temporaries, a 3-deep ring, one temporary at BN 200.
            fp8(&[("F8V", 4)]),
            fp8(&[("BM", 64), ("BN", 72), ("STAGES", 3), ("F8V", 4)]),
            fp8(&[("BM", 128), ("BN", 200), ("F8V", 4)]),
            // CPS=1: the persistent walk (4 blocks on the CPU backends: several tiles per block, the producer's
            // cursor crossing tiles when a tile has fewer slices than the ring).
            fp8(&[("F8V", 4), ("CPS", 1)]),
            fp8(&[("BM", 64), ("BN", 24), ("STAGES", 3), ("F8V", 4), ("CPS", 1)]),
            // F8V=5: the next slice's first product before a slice's last promotion (K32: one slice per tile).
            fp8(&[("F8V", 5)]),
            fp8(&[("BM", 64), ("BN", 24), ("STAGES", 3), ("F8V", 5), ("CPS", 1)]),
            // F8V=6: 5 with the two consumer warpgroups taking turns (products or promotions).
            fp8(&[("F8V", 6)]),
            fp8(&[("BN", 24), ("STAGES", 3), ("F8V", 6), ("CPS", 1), ("TURN", 0)]),
        ] {
            let kn = turn_names(kn);
            run(&dense(m, k, n, wide), rng.random(), &kn);
        }
    }
}

#[test]
fn fp8_one_temporary_and_wide_tiles() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    run(&dense(70, 384, 200, 1), rng.random(), &fp8(&[("BM", 64), ("BN", 200), ("STAGES", 3)]));
    // F8V=4 over many tiles: 3 x 9 of them, one per block or 6-7 per persistent block.
    for (v, cps) in [(4, 0), (4, 1), (5, 0), (5, 1)] {
        let kn = fp8(&[("BM", 64), ("BN", 24), ("STAGES", 4), ("F8V", v), ("CPS", cps)]);
        assert_eq!(run(&dense(130, 160, 200, 0), rng.random(), &kn), 2);
        assert_eq!(run(&dense(70, 800, 40, 0), rng.random(), &kn), 2);
    }
    // F8V=6 (BM=128): 3 x 9 tiles of 5 slices (6-7 per persistent block, the turns running on across tiles, a
    // ragged last m-tile and n-tile), 1 x 2 tiles of 25 (the ring wrapping within a tile), both turn kinds.
    for (turn, cps) in [(0, 0), (0, 1), (1, 1)] {
        let kn = turn_names(fp8(&[("BN", 24), ("STAGES", 4), ("F8V", 6), ("CPS", cps), ("TURN", turn)]));
        assert_eq!(run(&dense(300, 160, 200, 0), rng.random(), &kn), 2, "[{kn}]");
        assert_eq!(run(&dense(70, 800, 40, 0), rng.random(), &kn), 2, "[{kn}]");
    }
}

/// F8V=6 takes its turns where `TURN` says: every `wgmma` issue inside an `in_turn` body (`mma`), or every
/// promotion and no product (`ffma`), one turn per 32-wide block; F8V=5 takes none. (The CPU backends run a turn
/// body in program order, so only this test sees where the turns are.)
#[test]
fn pingpong_turns_are_where_the_knob_says() {
    use k3k_ir::Stmt;
    fn walk(body: &[Stmt], inside: bool, f: &mut dyn FnMut(&Stmt, bool)) {
        for s in body {
            f(s, inside);
            match s {
                Stmt::For { body, .. } | Stmt::Producer { body } | Stmt::FirstWarpgroups { body, .. } => {
                    walk(body, inside, f)
                }
                Stmt::If { then_body, else_body, .. } => {
                    walk(then_body, inside, f);
                    walk(else_body, inside, f);
                }
                Stmt::InTurn { body } => walk(body, true, f),
                _ => {}
            }
        }
    }
    let op = Mxfp4Matmul;
    let p = Preset::new("M4096", &[("M", 4096), ("N", 6144), ("K", 3584), ("act", 1)]);
    for (kn, want) in [
        (fp8(&[("F8V", 5), ("CPS", 1)]), None),
        (fp8(&[("F8V", 6), ("CPS", 1)]), Some(true)),
        (turn_names(fp8(&[("F8V", 6), ("TURN", 1)])), Some(false)),
    ] {
        let main = op.kernels(&p, &kn).unwrap().pop().unwrap();
        let (mut turns, mut mma_in, mut mma_out, mut map_in) = (0, 0, 0, 0);
        walk(&main.body, false, &mut |s, inside| match s {
            Stmt::InTurn { .. } => turns += 1,
            Stmt::MmaAsync { .. } if inside => mma_in += 1,
            Stmt::MmaAsync { .. } => mma_out += 1,
            Stmt::Map { .. } if inside => map_in += 1,
            _ => {}
        });
        match want {
            None => assert!(turns == 0, "[{kn}] {turns} turns"),
            // The issue points: the tile's first product, 3 + 1 (the next slice's) per looped slice, 3 in the
            // peeled last slice: 8 products, each in a turn.
            Some(true) => assert!(turns == 8 && mma_in == 8 && mma_out == 0, "[{kn}]"),
            // The promotions: 4 per looped slice and 4 in the last.
            Some(false) => assert!(turns == 8 && map_in == 8 && mma_in == 0, "[{kn}]"),
        }
        assert_eq!(main.name.contains("_pp"), want.is_some(), "{}", main.name);
    }
}

/// F8V=4 grouped: ragged experts with empty groups (the first, between and last), a group smaller than a tile,
/// groups spanning several m-tiles, one block per tile and the persistent walk (4 blocks on the CPU backends:
/// the producer's cursor crossing groups), K not a multiple of the slice.
#[test]
fn first_launch_grouped_matches_reference() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let cases: [&[(&str, i64)]; 3] = [
        &[("G", 4), ("c0", 0), ("c1", 17), ("c2", 0), ("c3", 70), ("K", 96), ("N", 34)],
        &[("G", 5), ("c0", 130), ("c1", 1), ("c2", 64), ("c3", 0), ("c4", 65), ("K", 160), ("N", 40)],
        &[("G", 3), ("c0", 0), ("c1", 0), ("c2", 9), ("K", 416), ("N", 8)],
    ];
    for dims in cases {
        let p = Preset::new("fp8 grouped", &[dims, &[("act", 1)]].concat());
        for kn in [
            fp8(&[("F8V", 4)]),
            fp8(&[("F8V", 4), ("BM", 64), ("BN", 16), ("STAGES", 3)]),
            fp8(&[("F8V", 4), ("BM", 64), ("BN", 24), ("STAGES", 4), ("CPS", 1)]),
            fp8(&[("F8V", 4), ("BN", 200), ("CPS", 1)]),
            fp8(&[("F8V", 5), ("BM", 64), ("BN", 24), ("STAGES", 3), ("CPS", 1)]),
            fp8(&[("F8V", 6), ("BN", 24), ("STAGES", 3), ("CPS", 1)]),
            turn_names(fp8(&[("F8V", 6), ("BN", 16), ("STAGES", 3), ("TURN", 1)])),
        ] {
            assert_eq!(run(&p, rng.random(), &kn), 2, "{dims:?} [{kn}]");
        }
    }
    // Grouped weights that do not fold: a typed error (the F8V=2 fallback is dense only).
    let op = Mxfp4Matmul;
    let wide = Preset::new("wide", &[("G", 2), ("c0", 5), ("c1", 9), ("K", 2048), ("N", 64), ("act", 1), ("wide", 1)]);
    match op.instance(&wide, 3).unwrap().plan(&fp8(&[("F8V", 4)])) {
        Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains("grouped"), "{why}"),
        other => panic!("expected a knob error, got {:?}", other.map(|_| ())),
    }
}

/// F8V >= 4 with the GLU epilogues (gate rows [0, N/2), up rows [N/2, N); BN <= 64 two half-width products, BN >
/// 64 one product and the columns paired in shared memory) and the routing weight `p`, dense and grouped (empty groups first, between and last; a group smaller than a tile; N/2 not a multiple of the tile's
/// half, so the last tile's gate box reads up rows into columns never stored), one block per tile and
/// persistent, both turn kinds, SiTU-GLU and SwiGLU, `p` with and without a GLU, natural and packed weights (the
/// first launch reads the packed layout into the same E4M3 scratch): the CPU interpreter against the f64
/// reference on fresh random inputs.
#[test]
fn first_launch_epilogues_match_reference() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let sets = [
        fp8(&[("F8V", 4), ("BM", 64), ("BN", 32), ("STAGES", 3)]),
        fp8(&[("F8V", 4), ("BN", 48), ("CPS", 1)]),
        fp8(&[("F8V", 5), ("BM", 64), ("BN", 16), ("STAGES", 3), ("CPS", 1)]),
        fp8(&[("F8V", 6), ("BN", 32), ("STAGES", 3), ("CPS", 1)]),
        turn_names(fp8(&[("F8V", 6), ("BN", 48), ("STAGES", 4), ("TURN", 1)])),
        // BN > 64: a GLU takes one product over both halves and pairs the columns in shared memory.
        fp8(&[("F8V", 4)]),
        fp8(&[("F8V", 5), ("BM", 64), ("BN", 96), ("STAGES", 3), ("CPS", 1)]),
        turn_names(fp8(&[("F8V", 6), ("BN", 80), ("STAGES", 3), ("CPS", 1), ("TURN", 1)])),
    ];
    for (epi, pw, packed) in [(1i64, 1i64, 0i64), (1, 0, 1), (2, 1, 0), (0, 1, 1), (0, 0, 1), (1, 1, 1)] {
        let flags = [("epilogue", epi), ("p", pw), ("packed", packed), ("act", 1)];
        let cases: [&[(&str, i64)]; 3] = [
            &[("M", 70), ("K", 160), ("N", 68)],
            &[("G", 4), ("c0", 0), ("c1", 17), ("c2", 0), ("c3", 70), ("K", 96), ("N", 34)],
            &[("G", 5), ("c0", 130), ("c1", 1), ("c2", 64), ("c3", 0), ("c4", 0), ("K", 288), ("N", 80)],
        ];
        for dims in cases {
            let p = Preset::new("fp8 epilogue", &[dims, &flags].concat());
            for kn in &sets {
                assert_eq!(run(&p, rng.random(), kn), 2, "{dims:?} epilogue {epi} p {pw} packed {packed} [{kn}]");
            }
        }
    }
}

#[test]
fn fp8_refuses_what_it_does_not_cover() {
    let op = Mxfp4Matmul;
    let seed = 7;
    // bf16 activations, and at the default F8V (< 4) a GLU epilogue and packed weights: typed knob errors.
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
    // F8V=4: CPS 0 or 1; a ring that does not fit the shared memory.
    assert!(matches!(inst.plan(&fp8(&[("F8V", 4), ("CPS", 4)])), Err(OpError::InvalidKnobs { .. })));
    assert!(matches!(inst.plan(&fp8(&[("F8V", 5), ("BN", 192)])), Err(OpError::InvalidKnobs { .. })));
    // F8V=6: two consumer warpgroups (BM=128), two temporaries (BN <= 128), TURN mma or ffma.
    assert!(matches!(inst.plan(&fp8(&[("F8V", 6), ("BN", 192)])), Err(OpError::InvalidKnobs { .. })));
    let bm64 = inst.plan(&fp8(&[("F8V", 6), ("BM", 64)]));
    assert!(matches!(bm64, Err(OpError::InvalidKnobs { why, .. }) if why.contains("BM=128")));
    let mut bad_turn = fp8(&[("F8V", 6)]);
    bad_turn.set("TURN", "both");
    assert!(matches!(inst.plan(&bad_turn), Err(OpError::InvalidKnobs { why, .. }) if why.contains("TURN")));
    // A GLU epilogue: BN a multiple of 16 (F8V >= 4; F8V < 4 refuses the epilogues, above).
    let glu = op.instance(&Preset::new("glu", &[("M", 4), ("K", 64), ("N", 16), ("act", 1), ("epilogue", 1)]), seed);
    let odd = glu.unwrap().plan(&fp8(&[("F8V", 4), ("BN", 24)]));
    assert!(matches!(odd, Err(OpError::InvalidKnobs { why, .. }) if why.contains("multiple of 16")));
    let big = fp8(&[("F8V", 4), ("BN", 256), ("STAGES", 6)]);
    assert!(matches!(inst.plan(&big), Err(OpError::InvalidKnobs { why, .. }) if why.contains("shared memory")));
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
    for kn in [
        fp8(&[]),
        fp8(&[("BM", 64), ("BN", 128), ("F8V", 2)]),
        fp8(&[("F8V", 2)]),
        fp8(&[("F8V", 3)]),
        // F8V=4: the first launch and the main kernel at the device script's tile shapes.
        fp8(&[("F8V", 4)]),
        fp8(&[("F8V", 4), ("BN", 192)]),
        fp8(&[("F8V", 4), ("BM", 64), ("BN", 128)]),
        fp8(&[("F8V", 4), ("BN", 64)]),
        fp8(&[("F8V", 4), ("CPS", 1)]),
        fp8(&[("F8V", 4), ("CPS", 1), ("BN", 192)]),
        fp8(&[("F8V", 5)]),
        fp8(&[("F8V", 5), ("CPS", 1)]),
        fp8(&[("F8V", 6)]),
        fp8(&[("F8V", 6), ("CPS", 1)]),
        fp8(&[("F8V", 6), ("CPS", 1), ("BN", 64)]),
        turn_names(fp8(&[("F8V", 6), ("CPS", 1), ("TURN", 1)])),
    ] {
        for k in op.kernels(&p, &kn).unwrap() {
            let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            let r = m.resources.clone().unwrap();
            eprintln!("{}: {r:?} smem {}", k.name, k.shared_bytes());
            assert!(!r.spills() && !r.wgmma_serialized, "{}: {r:?}", k.name);
        }
    }
    // F8V=4 grouped at the 28-expert prefill shape.
    let g = Preset::new("G28", &[("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("act", 1)]);
    // ... and with the SiTU-GLU epilogue and the routing weight (the MoE's first GEMM), grouped and dense, at the
    // automatic BN (128: one product per block, the columns paired in shared memory, 4 stages) and at BN=64 (two
    // half-width products: at 96..128 those spill, `first::pairs_glu`).
    let glu = [("epilogue", 1), ("p", 1)];
    let g_glu = Preset::new(
        "G28 GLU",
        &[&[("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("act", 1)][..], &glu].concat(),
    );
    let d_glu = Preset::new("M4096 GLU", &[&[("M", 4096), ("N", 6144), ("K", 3584), ("act", 1)][..], &glu].concat());
    let sets = [fp8(&[("F8V", 4)]), fp8(&[("F8V", 4), ("CPS", 1)]), fp8(&[("F8V", 6), ("CPS", 1)])];
    let glu_sets = [
        fp8(&[("F8V", 5), ("CPS", 1)]),
        fp8(&[("F8V", 6), ("CPS", 1)]),
        turn_names(fp8(&[("F8V", 6), ("CPS", 1), ("TURN", 1)])),
        fp8(&[("F8V", 5), ("CPS", 1), ("BN", 64)]),
        fp8(&[("F8V", 6), ("CPS", 1), ("BN", 64)]),
    ];
    for (pr, kn) in sets.iter().map(|k| (&g, k)).chain(glu_sets.iter().flat_map(|k| [(&g_glu, k), (&d_glu, k)])) {
        for k in op.kernels(pr, kn).unwrap() {
            let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            let r = m.resources.clone().unwrap();
            eprintln!("{} {}: {r:?} smem {}", pr.name, k.name, k.shared_bytes());
            assert!(!r.spills() && !r.wgmma_serialized, "{}: {r:?}", k.name);
        }
    }
}

/// F8V=4 on hand-made weight scales at the fold's edges, against an f64 reference per output column (each column
/// is one weight row, so a wrong shift shows in its own column): rows spanning exactly 12 (u = 0 and 12 both
/// present; a row whose only u = 12 block has zero codes, so its whole product sits at u = 0, the E4M3
/// subnormals; a row at u = 12 but for one zero block: E4M3 up to 384), activation scales with a NaN block. The
/// plan has the first launch (two steps); one row spanning 13, or one NaN weight block, makes it the F8V=2
/// kernel (one step) with the same check.
#[test]
fn first_launch_fold_edges_match_the_reference() {
    use k3k_ops::mx::matmul::{Act, Fp4Weights, MatInputs, WeightBytes, matmul_plan};
    use k3k_ops::plan::Executor;
    use k3k_reference::mx::{MxFormat, MxTensor, dequantize};
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let (m, n, k) = (70usize, 40usize, 416usize);
    let kb = k / 32;
    let codes = |rng: &mut StdRng, len: usize| -> Vec<u8> { (0..len).map(|_| rng.random()).collect() };
    let xq: Vec<u8> = (0..m * k).map(|_| rng.random::<u8>()).map(|c| if c & 0x7f == 0x7f { 0x38 } else { c }).collect();
    let mut xs: Vec<u8> = (0..m * kb).map(|_| rng.random_range(112u8..=140)).collect();
    xs[5 * kb + 3] = 255;
    let x = MxTensor { rows: m, k, q: xq, s: xs, format: MxFormat::Fp8 };
    for case in ["fold", "span13", "nan"] {
        let mut q = codes(&mut rng, n * k / 2);
        let mut s = vec![0u8; n * kb];
        for r in 0..n {
            let lo = rng.random_range(90u8..=130);
            let row = &mut s[r * kb..(r + 1) * kb];
            match r % 3 {
                0 => row.iter_mut().for_each(|b| *b = lo + rng.random_range(0u8..=12)),
                1 => row.iter_mut().for_each(|b| *b = lo),
                _ => row.iter_mut().for_each(|b| *b = lo + 12),
            }
            let (edge, other) = (rng.random_range(0..kb), rng.random_range(0..kb));
            let other = if other == edge { (edge + 1) % kb } else { other };
            row[edge] = if r % 3 == 1 { lo + 12 } else { lo };
            row[other] = if r % 3 == 1 { lo } else { lo + 12 };
            if r % 3 != 0 {
                // The odd block's codes are zero: the row's whole product sits at the other shift.
                q[r * k / 2 + edge * 16..r * k / 2 + edge * 16 + 16].fill(0);
            }
        }
        match case {
            "span13" => s[7 * kb + 2] = s[7 * kb..8 * kb].iter().copied().min().unwrap() + 13,
            "nan" => s[11 * kb + 5] = 255,
            _ => {}
        }
        let w = Fp4Weights { groups: 1, n, k, q: WeightBytes::Natural(q.clone()), s: s.clone() };
        let inp =
            MatInputs { x: Act::Mxfp8(&x), offs: None, p: None, epilogue: k3k_ops::latent_moe_gemm::Epilogue::None };
        for kn in [
            fp8(&[("F8V", 4)]),
            fp8(&[("F8V", 4), ("BM", 64), ("BN", 24), ("STAGES", 3)]),
            fp8(&[("F8V", 4), ("BM", 64), ("BN", 16), ("STAGES", 3), ("CPS", 1)]),
            fp8(&[("F8V", 5), ("BM", 64), ("BN", 16), ("STAGES", 3)]),
            fp8(&[("F8V", 6), ("BN", 16), ("STAGES", 3), ("CPS", 1)]),
        ] {
            let plan = matmul_plan(&w, &inp, &kn).unwrap();
            assert_eq!(plan.steps.len(), if case == "fold" { 2 } else { 1 }, "{case} [{kn}]");
            let out = Executor::Cpu.run(&plan).unwrap();
            let got = out.get("y").unwrap().to_f64_vec();
            let xv = dequantize(&x).unwrap();
            let wv = dequantize(&MxTensor { rows: n, k, q: q.clone(), s: s.clone(), format: MxFormat::Fp4 }).unwrap();
            for c in 0..n {
                let want: Vec<f64> =
                    (0..m).map(|r| (0..k).map(|i| xv[r * k + i] as f64 * wv[c * k + i] as f64).sum::<f64>()).collect();
                let col: Vec<f64> = (0..m).map(|r| got[r * n + c]).collect();
                k3k_reference::metrics::check(&col, &want, k3k_reference::metrics::Tolerance::Bf16).unwrap_or_else(
                    |e| panic!("{case} column {c} (row scales {:?}) [{kn}]: {e}", &s[c * kb..(c + 1) * kb]),
                );
            }
        }
    }
}

/// The Cranelift JIT (the second CPU backend) runs the first launch and the producer-warp GEMM, dense and grouped
/// (also with SiTU-GLU, p and packed weights), one block per tile and persistent, F8V 4 to 6, against the same
/// f64 check.
#[test]
fn first_launch_runs_on_the_jit() {
    let op = Mxfp4Matmul;
    let seed = plan_run::seed();
    let grouped = Preset::new("g", &[("G", 3), ("c0", 40), ("c1", 0), ("c2", 77), ("K", 288), ("N", 40), ("act", 1)]);
    // Grouped with the SiTU-GLU epilogue, the routing weight and packed weights.
    let glu = Preset::new(
        "g glu p packed",
        &[
            ("G", 3),
            ("c0", 40),
            ("c1", 0),
            ("c2", 77),
            ("K", 288),
            ("N", 96),
            ("act", 1),
            ("epilogue", 1),
            ("p", 1),
            ("packed", 1),
        ],
    );
    for p in [dense(70, 416, 56, 0), grouped, glu] {
        let inst = op.instance(&p, seed).unwrap();
        // (A GLU takes BN a multiple of 16: 32 for 24.)
        let bn24 = if p.dims.get("epilogue").is_some_and(|&e| e > 0) { 32 } else { 24 };
        for kn in [
            fp8(&[("F8V", 4), ("BM", 64), ("BN", bn24), ("STAGES", 3)]),
            fp8(&[("F8V", 5), ("BM", 64), ("BN", 16), ("STAGES", 3), ("CPS", 1)]),
            fp8(&[("F8V", 6), ("BN", 16), ("STAGES", 3), ("CPS", 1)]),
            turn_names(fp8(&[("F8V", 6), ("BN", bn24), ("STAGES", 4), ("TURN", 1)])),
            // (With a GLU: one product per block, the columns paired in shared memory.)
            fp8(&[("F8V", 6), ("BN", 96), ("STAGES", 3), ("CPS", 1)]),
        ] {
            let plan = inst.plan(&kn).unwrap();
            assert_eq!(plan.steps.len(), 2);
            let r = inst.check(&plan_run::run_plan_jit(&plan)).unwrap();
            assert!(r.passed, "{} [{kn}]: rel {:.3e} {}", p.name, r.max_rel_err, r.detail);
        }
    }
}
