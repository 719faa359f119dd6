//! `mxfp4_matmul` with `MMA=f8sync` (issue 45, 17..256 tokens): MXFP8 activations staged once per tile as E4M3
//! words, the weights converted exactly to E4M3 and multiplied by E4M3 `mma.sync`, both scales per 32-wide block.
//! Dense and grouped, with the GLU and routing-weight epilogues. The CPU interpreter against the f64 reference on
//! fresh random inputs; the kernel's shape; refusals by name.
use k3k_ir::{DType, Knobs, Operand, Stmt};
use k3k_ops::OpError;
use k3k_ops::mx::matmul::*;
use k3k_ops::op::{Operator, Preset};
use rand::{Rng, SeedableRng, rngs::StdRng};

#[path = "common/mx_run.rs"]
#[allow(dead_code)]
mod mx_run;
use mx_run::{knobs, run};

/// `MMA=f8sync` with the default knobs and `pairs` set.
fn f8(pairs: &[(&str, i64)]) -> Knobs {
    knobs(pairs).with("MMA", "f8sync")
}

fn dense(m: i64, k: i64, n: i64, rest: &[(&str, i64)]) -> Preset {
    let d: Vec<(&str, i64)> = [&[("M", m), ("K", k), ("N", n), ("act", 1)][..], rest].concat();
    Preset::new(&format!("f8 M{m} K{k} N{n} {rest:?}"), &d)
}

/// Every batch size of the brief (5, 8, 17, 32, 64, 100 tokens), both weight layouts, realistic and wide scales
/// (NaN blocks, tiny and huge factors), K splits summed in the kernel (FIN=last, the automatic choice) and by
/// the finalize launch, token tiles of 16..128 (several per problem at 100 tokens with BM 32 or 64), BK 64..256,
/// 2..4 stages, N not a multiple of BN (masked weight rows), K ranges shorter than a split's staged width: the
/// reference's values, in one launch (two with FIN=kernel): the activations are never dequantized.
#[test]
fn f8sync_matches_the_reference() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let cases: Vec<(Preset, Knobs, usize)> = vec![
        (dense(5, 256, 40, &[("packed", 1)]), f8(&[]), 1),
        (dense(8, 320, 64, &[]), f8(&[("SPLIT", 2)]), 1),
        (dense(17, 384, 72, &[("packed", 1), ("wide", 1)]), f8(&[("SPLIT", 3), ("BK", 64)]), 1),
        (dense(32, 256, 96, &[("wide", 1)]), f8(&[("SPLIT", 1), ("BK", 256), ("STAGES", 2)]), 1),
        (dense(32, 512, 48, &[("packed", 1)]), f8(&[("SPLIT", 2), ("STAGES", 3)]).with("FIN", "kernel"), 2),
        (dense(64, 448, 80, &[("packed", 1)]), f8(&[("SPLIT", 2), ("BN", 32), ("WA", 2)]), 1),
        (dense(64, 256, 64, &[]), f8(&[("BM", 64), ("WB", 2), ("SPLIT", 1)]), 1),
        (dense(100, 288, 56, &[("packed", 1), ("wide", 1)]), f8(&[("BM", 32), ("SPLIT", 2)]), 1),
        (dense(100, 256, 64, &[]), f8(&[("BM", 128), ("SPLIT", 3), ("BK", 64)]), 1),
        (dense(100, 192, 32, &[("packed", 1)]), f8(&[]), 1),
    ];
    for (p, kn, launches) in &cases {
        assert_eq!(run(p, rng.random(), kn), *launches, "{} [{kn}]", p.name);
    }
}

/// The GLU epilogues (gate rows [0, N/2), up rows [N/2, N)) and the routing weight, dense and grouped (ragged
/// experts with empty groups first, between and last; a group of one row; groups over several token tiles),
/// natural and packed weights, K splits summed in the kernel (FIN=last) and by the finalize launch (FIN=kernel),
/// N/2 not a multiple of BN/2: the CPU interpreter against the f64 reference on fresh random inputs.
#[test]
fn f8sync_epilogues_and_groups_match_the_reference() {
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let grouped = |cs: &[i64], k: i64, n: i64, rest: &[(&str, i64)]| {
        let names = ["c0", "c1", "c2", "c3", "c4"];
        let mut d: Vec<(&str, i64)> = vec![("G", cs.len() as i64), ("K", k), ("N", n), ("act", 1)];
        d.extend(names.iter().zip(cs).map(|(n, &c)| (*n, c)));
        d.extend_from_slice(rest);
        Preset::new(&format!("f8 grouped {cs:?} K{k} N{n} {rest:?}"), &d)
    };
    let glu_p = [("epilogue", 1), ("p", 1)];
    let cases: Vec<(Preset, Knobs, usize)> = vec![
        (dense(17, 384, 96, &[("epilogue", 1), ("p", 1), ("packed", 1)]), f8(&[("SPLIT", 2)]), 1),
        (dense(40, 256, 136, &[("epilogue", 2)]), f8(&[("SPLIT", 1), ("BN", 32), ("WA", 2)]), 1),
        (dense(64, 512, 64, &[("p", 1), ("wide", 1)]), f8(&[("SPLIT", 2), ("STAGES", 3)]).with("FIN", "kernel"), 2),
        (
            dense(100, 288, 80, &[("epilogue", 1), ("packed", 1)]),
            f8(&[("BM", 32), ("SPLIT", 3), ("BK", 64)]).with("FIN", "kernel"),
            2,
        ),
        (grouped(&[0, 17, 0, 70], 96, 34, &[]), f8(&[]), 1),
        (grouped(&[0, 17, 0, 70], 256, 72, &glu_p), f8(&[("SPLIT", 2)]), 1),
        (
            grouped(&[5, 0, 1, 40, 0], 384, 128, &[("epilogue", 1), ("p", 1), ("packed", 1)]),
            f8(&[("BM", 16), ("SPLIT", 3)]),
            1,
        ),
        (
            grouped(&[33, 0, 64], 320, 96, &[("p", 1), ("packed", 1)]),
            f8(&[("BM", 32), ("SPLIT", 2)]).with("FIN", "kernel"),
            2,
        ),
    ];
    for (p, kn, launches) in &cases {
        assert_eq!(run(p, rng.random(), kn), *launches, "{} [{kn}]", p.name);
    }
}

/// The main kernel records `MMA=f8sync` (re-resolving its knobs gives it back), multiplies E4M3 words
/// (`Stmt::Mma` on u32 shared windows: the staged activations and the converted weights), and the plan has no
/// activation dequant launch; the automatic choice is unchanged (MMA=sync behind the dequant launch).
#[test]
fn f8sync_kernel_reads_e4m3_words() {
    let op = Mxfp4Matmul;
    let p = Preset::new("m64", &[("M", 64), ("N", 6144), ("K", 3584), ("packed", 1), ("act", 1)]);
    let ks = op.kernels(&p, &f8(&[])).unwrap();
    assert_eq!(ks.len(), 1, "one launch (FIN=last): {:?}", ks.iter().map(|k| &k.name).collect::<Vec<_>>());
    let k = &ks[0];
    assert_eq!(k.knobs.str("MMA").unwrap(), "f8sync");
    assert!(k.knobs.u32("SPLIT").unwrap() > 1, "{}", k.knobs);
    let again = op.kernels(&p, &k.knobs).unwrap();
    assert_eq!(again[0].knobs, k.knobs, "the recorded knobs resolve to themselves");
    let mut e4m3 = 0;
    k.visit_stmts(&mut |s| {
        if let Stmt::Mma { a: Operand::Shared { src: a, .. }, b: Operand::Shared { src: b, .. }, .. } = s {
            assert_eq!(k.shared[a.buf.0 as usize].dtype, DType::U32);
            assert_eq!(k.shared[b.buf.0 as usize].name, "sxq");
            e4m3 += 1;
        }
    });
    assert_eq!(e4m3, 4, "one E4M3 product per 32-wide block of BK = 128");
    let auto = op.kernels(&p, &default_knobs()).unwrap();
    assert_eq!(auto[0].knobs.str("MMA").unwrap(), "sync");
    assert!(auto.iter().any(|k| k.name.starts_with("k3k_mx_dequantize_fp8_bf16")));
}

/// What the path does not build is refused by name: bf16 activations, tile-major weights, other paths' knobs, shapes past the shared memory or the registers, warps that do not tile.
#[test]
fn f8sync_refusals() {
    let op = Mxfp4Matmul;
    let refused = |p: &Preset, kn: &Knobs, words: &[&str]| match op.kernels(p, kn) {
        Err(OpError::InvalidKnobs { why, .. }) => {
            for w in words {
                assert!(why.contains(w), "{} [{kn}]: `{why}` lacks `{w}`", p.name);
            }
        }
        other => panic!("{} [{kn}]: expected a refusal, got {:?}", p.name, other.map(|k| k.len())),
    };
    let base = [("M", 32), ("N", 256), ("K", 512), ("packed", 1)];
    let with = |extra: &[(&str, i64)]| Preset::new("p", &[&base[..], extra].concat());
    refused(&with(&[]), &f8(&[]), &["MXFP8 activations"]);
    refused(&with(&[("act", 1), ("tiles", 1)]), &f8(&[]), &["tile-major"]);
    refused(&with(&[("act", 1)]), &f8(&[]).with("PATH", "gemv"), &["PATH=gemv"]);
    refused(&with(&[("act", 1)]), &f8(&[]).with("XDQ", "tile"), &["XDQ=tile"]);
    refused(&with(&[("act", 1)]), &f8(&[("CPS", 4)]), &["CPS=4"]);
    refused(&with(&[("act", 1)]), &f8(&[("BK", 96)]), &["BK"]);
    refused(&with(&[("act", 1)]), &f8(&[("BN", 48)]), &["BN", "16*WA"]);
    refused(&with(&[("act", 1)]), &f8(&[("BM", 24)]), &["BM"]);
    refused(&with(&[("act", 1)]), &f8(&[("BN", 256), ("BM", 128), ("WA", 4), ("WB", 1)]), &["registers"]);
    let big = Preset::new("big", &[("M", 128), ("N", 256), ("K", 3584), ("act", 1)]);
    refused(&big, &f8(&[("SPLIT", 1)]), &["shared memory", "SPLIT"]);
}

/// The shared-memory estimate that refuses knob sets (`Cfg::shared_bytes`) is never below what the kernel
/// declares: near the limit (the staged activations are BM x K/SPLIT bytes), every knob set either builds a kernel
/// within the SM's shared memory or is refused by name; and the limit is reached (some sets are refused).
#[test]
fn f8sync_shared_memory_is_checked_before_the_build() {
    let op = Mxfp4Matmul;
    let mut refusals = 0;
    for (m, bm) in [(64, 64), (128, 128), (256, 128)] {
        let p = Preset::new("p", &[("M", m), ("N", 6144), ("K", 3584), ("packed", 1), ("act", 1)]);
        for split in 1..=8 {
            for (bk, st) in [(64, 4), (128, 2), (128, 4), (256, 3)] {
                let kn = f8(&[("BM", bm), ("SPLIT", split), ("BK", bk), ("STAGES", st)]);
                match op.kernels(&p, &kn) {
                    Ok(ks) => {
                        let smem = ks[0].shared_bytes();
                        assert!(smem <= k3k_ir::MAX_SHARED_BYTES, "M{m} [{kn}]: {smem} bytes");
                    }
                    Err(OpError::InvalidKnobs { why, .. }) if why.contains("shared memory") => refusals += 1,
                    Err(e) => panic!("M{m} [{kn}]: {e}"),
                }
            }
        }
    }
    assert!(refusals > 0);
}

/// With the SiTU-GLU epilogue and the routing weight, dense at 64 and 256 tokens and grouped (28 experts of 64
/// tokens on average), the f8sync kernels compile for sm_90a (NVRTC + ptxas) without spills.
#[test]
fn f8sync_epilogue_kernels_assemble_without_spills() {
    use k3k_codegen::{BuildOptions, build};
    let op = Mxfp4Matmul;
    let shape = [("N", 6144), ("K", 3584), ("act", 1), ("epilogue", 1), ("p", 1), ("packed", 1)];
    for lead in [&[("M", 64)][..], &[("M", 256)], &[("G", 28), ("mean", 64)]] {
        let p = Preset::new("glu p", &[lead, &shape[..]].concat());
        for k in op.kernels(&p, &f8(&[])).unwrap() {
            let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            let r = m.resources.clone().unwrap();
            assert!(!r.spills(), "{lead:?} {}: {r:?}", k.name);
        }
    }
}
