//! `mxfp4_matmul` with MXFP8 activations between decode and prefill (issue 45, M = 8..256): the activations
//! dequantized by a first launch on PATH=tile and stream (`XDQ` auto / first) or converted on chip per stage
//! (`XDQ=tile`), both against the f64 reference on the CPU interpreter; the automatic shape of dense 33..64-token
//! problems; the presets of the sweep; refused knob sets.
use k3k_ir::Knobs;
use k3k_ops::OpError;
use k3k_ops::mx::matmul::*;
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::Executor;
use rand::{Rng, SeedableRng, rngs::StdRng};

#[path = "common/mx_run.rs"]
#[allow(dead_code)]
mod mx_run;
use mx_run::{knobs, run};

/// The main kernel's resolved knobs and the kernel names of a problem at `kn`.
fn resolved(dims: &[(&str, i64)], kn: &Knobs) -> (Knobs, Vec<String>) {
    let ks = Mxfp4Matmul.kernels(&Preset::new("p", dims), kn).unwrap_or_else(|e| panic!("{dims:?} [{kn}]: {e}"));
    (ks[0].knobs.clone(), ks.iter().map(|k| k.name.clone()).collect())
}

/// Both ways of feeding MXFP8 activations to the tile and stream paths give the reference's values: dense and
/// grouped (empty groups), K splits summed in the kernel and by the finalize launch, mma.sync token tiles of
/// 16..64, wgmma, the stream path, both weight layouts, wide scales (NaN blocks), GLU epilogues with routing
/// weights. The first-launch plans have one launch more than the on-chip ones.
#[test]
fn mxfp8_activations_first_or_on_chip_match_the_reference() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let dense = |m: i64, k: i64, n: i64, rest: &[(&str, i64)]| {
        let d: Vec<(&str, i64)> = [&[("M", m), ("K", k), ("N", n), ("act", 1)][..], rest].concat();
        Preset::new(&format!("x8 M{m} K{k} N{n}"), &d)
    };
    let grouped = Preset::new(
        "x8 grouped",
        &[("G", 3), ("c0", 17), ("c1", 0), ("c2", 40), ("K", 160), ("N", 34), ("act", 1), ("epilogue", 1), ("p", 1)],
    );
    let cases: Vec<(Preset, Knobs)> = vec![
        (dense(33, 256, 40, &[("packed", 1)]), default_knobs()),
        (dense(64, 256, 72, &[]), knobs(&[("BK", 256), ("SPLIT", 1)])),
        (dense(20, 320, 48, &[("wide", 1)]), knobs(&[("SPLIT", 3), ("BK", 64)])),
        (dense(9, 192, 24, &[("packed", 1)]), knobs(&[("BM", 16), ("SPLIT", 2), ("BK", 64)]).with("FIN", "kernel")),
        (dense(70, 128, 40, &[("packed", 1)]), knobs(&[("BM", 64), ("BN", 32), ("SPLIT", 2)]).with("MMA", "wgmma")),
        (dense(5, 256, 64, &[("packed", 1)]), knobs(&[("BM", 16), ("SPLIT", 2)]).with("PATH", "stream")),
        (grouped.clone(), knobs(&[("SPLIT", 2), ("BK", 64)]).with("MMA", "sync")),
        (grouped, knobs(&[("BM", 32), ("BN", 32), ("WB", 2), ("BK", 96), ("SPLIT", 1)])),
    ];
    for (p, kn) in &cases {
        let first = run(p, rng.random(), kn);
        let first_x = run(p, rng.random(), &kn.clone().with("XDQ", "first"));
        let tile = run(p, rng.random(), &kn.clone().with("XDQ", "tile"));
        assert_eq!(first, first_x, "{}: XDQ auto is first", p.name);
        assert_eq!(first, tile + 1, "{}: the first launch dequantizes the activations", p.name);
        // The same bf16 activations reach the same K loop: the outputs are bit for bit the same.
        let inst = Mxfp4Matmul.instance(p, rng.random()).unwrap();
        let y = |kn: &Knobs| Executor::Cpu.run(&inst.plan(kn).unwrap()).unwrap().get("y").unwrap().data.clone();
        assert_eq!(y(kn), y(&kn.clone().with("XDQ", "tile")), "{} [{kn}]: first and tile differ", p.name);
    }
}

/// With the first launch the main kernel is the very kernel bf16 activations get (name and knobs), preceded by
/// the activation dequant; `XDQ=tile` keeps the on-chip kernel (`_x8`) and records the knob, so that re-resolving
/// the recorded knobs gives it back.
#[test]
fn the_first_launch_feeds_the_bf16_kernel() {
    let bf16 = [("M", 40), ("N", 512), ("K", 1024), ("packed", 1)];
    let act8 = [("M", 40), ("N", 512), ("K", 1024), ("packed", 1), ("act", 1)];
    let kn = knobs(&[("BK", 128), ("SPLIT", 2)]);
    let (k16, n16) = resolved(&bf16, &kn);
    let (k8, n8) = resolved(&act8, &kn);
    assert_eq!((&k8, &n8[0]), (&k16, &n16[0]));
    assert!(n8.iter().any(|n| n.starts_with("k3k_mx_dequantize_fp8_bf16")), "{n8:?}");
    assert_eq!(n8.len(), n16.len() + 1, "{n8:?}");
    let (kt, nt) = resolved(&act8, &kn.clone().with("XDQ", "tile"));
    assert_eq!(kt.str("XDQ").unwrap(), "tile");
    assert!(nt[0].contains("_x8"), "{}", nt[0]);
    assert_eq!(nt.len(), n16.len());
    let (again, _) = resolved(&act8, &kt);
    assert_eq!(again, kt, "the recorded knobs resolve to themselves");
    assert!(!k8.0.contains_key("XDQ"), "first is the default, not recorded: {k8}");
}

/// Dense MXFP8 activations at 33..64 tokens take the bf16 kernel's measured best M64 shape (BK=256, no K split);
/// the other batch sizes and bf16 activations keep their automatic shapes, decode keeps PATH=gemv, M > 128 the
/// prefill path.
#[test]
fn automatic_shapes_by_batch_size() {
    let dims = |m: i64, act: i64| vec![("M", m), ("N", 6144), ("K", 3584), ("packed", 1), ("act", act)];
    let shape = |m: i64, act: i64, kn: &Knobs| {
        let (k, _) = resolved(&dims(m, act), kn);
        (k.str("PATH").unwrap().to_string(), k.u32("BK").unwrap(), k.u32("SPLIT").unwrap())
    };
    let d = default_knobs();
    for m in [33, 48, 64] {
        assert_eq!(shape(m, 1, &d), ("tile".into(), 256, 1), "M{m}");
    }
    // bf16 activations and the on-chip conversion: the split of before.
    let (path, bk, split) = shape(64, 0, &d);
    assert_eq!((path.as_str(), bk), ("tile", 128));
    assert!(split > 1, "{split}");
    assert_eq!(shape(64, 1, &d.clone().with("XDQ", "tile")), shape(64, 0, &d));
    // Explicit values win.
    assert_eq!(shape(64, 1, &knobs(&[("SPLIT", 4)])).2, 4);
    assert_eq!(shape(64, 1, &knobs(&[("BK", 128)])).1, 128);
    // 17..32 tokens: 32-token tiles, the automatic split; at most 16: gemv.
    let (path, bk, split) = shape(32, 1, &d);
    assert_eq!((path.as_str(), bk), ("tile", 128));
    assert!(split > 1);
    for m in [8, 16] {
        assert_eq!(shape(m, 1, &d).0, "gemv", "M{m}");
    }
    // 65..=256 tokens whose 128 x 128 tiles fit in one wave: wgmma at 128 x 128 with the K split that keeps one
    // wave (48 tiles at M128: 2; 96 at M256: 1); more tiles (M512), bf16 activations and GLU: the prefill path
    // (the dequantized weights' GEMM) above 128 tokens, as before.
    let mid = |m: i64, act: i64, glu: bool| {
        let mut dm = dims(m, act);
        if glu {
            dm.push(("epilogue", 1));
        }
        let (k, _) = resolved(&dm, &d);
        let path = k.str("PATH").unwrap().to_string();
        let tile = (path == "tile")
            .then(|| (k.str("MMA").unwrap().to_string(), k.u32("BN").unwrap(), k.u32("SPLIT").unwrap()));
        (path, tile)
    };
    assert_eq!(mid(128, 1, false), ("tile".into(), Some(("wgmma".into(), 128, 2))));
    assert_eq!(mid(96, 1, false), ("tile".into(), Some(("wgmma".into(), 128, 2))));
    assert_eq!(mid(256, 1, false), ("tile".into(), Some(("wgmma".into(), 128, 1))));
    assert_eq!(mid(257, 1, false).0, "dq_gemm");
    assert_eq!(mid(512, 1, false).0, "dq_gemm");
    assert_eq!(mid(256, 0, false).0, "dq_gemm");
    assert_eq!(mid(256, 1, true).0, "dq_gemm");
    let (_, bf16_128) = mid(128, 0, false);
    assert_eq!(bf16_128.map(|t| t.1), Some(256), "bf16 activations keep BN=256 at M128");
}

/// The M sweep of issue 45 is in the presets (MXFP8 activations, packed weights) and every one resolves.
#[test]
fn the_small_batch_sweep_is_in_the_presets() {
    let op = Mxfp4Matmul;
    let presets = op.bench_presets();
    for m in [8, 16, 32, 64, 128, 256] {
        let name = format!("MXFP4 linear M{m} N6144 K3584 mxfp8-act");
        let p = presets.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((p.get("M").unwrap(), p.get("act").unwrap(), p.get("packed").unwrap()), (m, 1, 1));
        op.kernels(p, &op.default_knobs()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// `XDQ=tile` on PATH=gemv (which reads bf16 activations only) and unknown values are refused by name; at most
/// 16 tokens with `XDQ=tile` and the path automatic, the tile path takes the problem.
#[test]
fn xdq_refusals() {
    let op = Mxfp4Matmul;
    let p = Preset::new("m8", &[("M", 8), ("N", 256), ("K", 256), ("packed", 1), ("act", 1)]);
    let gemv_tile = default_knobs().with("PATH", "gemv").with("XDQ", "tile");
    match op.kernels(&p, &gemv_tile) {
        Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains("XDQ=tile"), "{why}"),
        other => panic!("expected a refusal, got {:?}", other.map(|k| k.len())),
    }
    match op.kernels(&p, &default_knobs().with("XDQ", "later")) {
        Err(OpError::InvalidKnobs { why, .. }) => {
            assert!(why.contains("XDQ must be auto, first or tile, got later"), "{why}")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|k| k.len())),
    }
    let m8 = [("M", 8), ("N", 256), ("K", 256), ("packed", 1), ("act", 1)];
    let (k, _) = resolved(&m8, &default_knobs().with("XDQ", "tile"));
    assert_eq!(k.str("PATH").unwrap(), "tile");
}
