//! `SLOAD=tma` (issue 42): the state pass with W, Qbar, Kbar and gamma copied once per cluster of value blocks by TMA
//! multicast. On the CPU interpreter and the Cranelift JIT (both run the CTAs of a cluster concurrently and check the
//! barrier protocol, see `k3k_ir::cluster`), with `K3K_GPU=1` also on GPU 0: against the f64 recurrence (SEMANTICS.md
//! section 3) and against `SLOAD=cp` (the same products in the same order), on varlen mixes with an empty and partial
//! sequences, h0, GVA, both paths, chunk 32 and 64, clusters of 1, 2, 4 and 8 value blocks, the 2- and 3-stage rings
//! and TSPLIT; and the points it refuses, by a typed error.

use k3k_ir::Knobs;
use k3k_ops::OpError;
use k3k_ops::kda::{self, KdaData, KdaProblem};
use k3k_ops::op::{Operator, Preset};

#[path = "common/plan_run.rs"]
mod plan_run;
use plan_run::{run_everywhere, seed, varlen_mix};

fn problem(dims: &[(&str, i64)]) -> KdaProblem {
    KdaProblem::from_preset(&Preset::new("test", dims)).unwrap()
}

fn tma(k: &Knobs) -> Knobs {
    k.clone().with(kda::SLOAD_KNOB, "tma")
}

/// Check one point: `SLOAD=tma` against f64 on every backend, and o and ht against `SLOAD=cp` on the interpreter: the
/// same bits on the CPU backends (the same products in the same order along K), within 1e-3 on the GPU.
fn check(dims: &[(&str, i64)], k: &Knobs, seed: u64) {
    check_sload(dims, &tma(k), "_mc", seed)
}

/// [`check`] for the knob set `k` (its `SLOAD` a TMA value), whose state kernels' names end in `suffix`.
fn check_sload(dims: &[(&str, i64)], k: &Knobs, suffix: &str, seed: u64) {
    let pb = problem(dims);
    let d = KdaData::generate(&pb, seed);
    let plan = kda::chunk_plan(&pb, &d, k).unwrap_or_else(|e| panic!("{dims:?} [{k}]: {e}"));
    let state: Vec<_> = plan.steps.iter().filter(|s| s.kernel.name.contains("_state_")).collect();
    assert!(!state.is_empty() && state.iter().all(|s| s.kernel.name.ends_with(suffix)), "{dims:?} [{k}]");
    let l = kda::Launch::resolve(k, &pb).unwrap();
    assert_eq!(state[0].kernel.cluster_size(), pb.dv as u32 / l.bv, "{dims:?} [{k}]: a cluster per pair");
    let (pairs, scope) = kda::check_scope(&pb, seed);
    // (`SLOAD=cp` named: the defaults' `auto` would take the clusters too where a pair has two value blocks.)
    let cp_plan = kda::chunk_plan(&pb, &d, &k.clone().with(kda::SLOAD_KNOB, "cp")).unwrap();
    assert!(cp_plan.steps.iter().all(|s| !s.kernel.name.ends_with("_mc")), "{dims:?} [{k}]: the cp pass");
    let cp = k3k_ops::plan::Executor::Cpu.run(&cp_plan).unwrap();
    for (ex, out) in run_everywhere(&plan, &format!("{dims:?} [{k}]")) {
        let r = kda::check_pairs(&pb, &d, &out, &pairs, scope.clone()).unwrap();
        eprintln!("{dims:?} [{k}] {ex}: rel {:.3e} ({})", r.max_rel_err, r.scope);
        assert!(r.passed, "{dims:?} [{k}] on {ex}, seed {seed}: {} (rel {:.3e})", r.detail, r.max_rel_err);
        for n in ["o", "ht"] {
            let (a, b) = (out.get(n).unwrap(), cp.get(n).unwrap());
            if ex.starts_with("cpu") {
                assert_eq!(a.data, b.data, "{dims:?} [{k}] {ex}: {n} differs from SLOAD=cp (seed {seed})");
                continue;
            }
            let err = k3k_reference::metrics::rel_l2(&a.to_f64_vec(), &b.to_f64_vec());
            eprintln!("  {n} vs SLOAD=cp: rel {err:.3e}");
            assert!(err <= 1e-3, "{dims:?} [{k}] {ex}: {n} rel {err:.3e} from SLOAD=cp (seed {seed})");
        }
    }
}

/// FlashKDA's options with an f32 gate on a varlen mix (70, 0, 33 tokens: an empty sequence, partial chunks), GVA.
fn presets_like() -> Vec<(&'static str, i64)> {
    let fk_f32 = kda::FLASHKDA_OPTIONS.into_iter().filter(|(k, _)| *k != "gbf16");
    [("N", 3i64), ("L0", 70), ("L1", 0), ("L2", 33), ("H", 1), ("HV", 2)].into_iter().chain(fk_f32).collect()
}

#[test]
fn sload_tma_matches_reference_and_cp() {
    let s = seed();
    let base = kda::default_knobs();
    let presets_like = presets_like();
    let cases: Vec<(Vec<(&str, i64)>, Knobs)> = vec![
        // K = V = 128: clusters of 4 (BV=32), 2 (BV=64 on 8 warps), 1 (BV=128) and 8 (BV=16: 7 boxes, one CTA
        // copies none).
        (presets_like.clone(), base.clone().with("BV", 32i64).with("W2", 4i64).with("STAGES", 2i64)),
        (presets_like.clone(), base.clone().with("BV", 64i64).with("W2", 8i64).with("STAGES", 2i64)),
        (presets_like.clone(), base.clone().with("BV", 128i64).with("W2", 16i64).with("STAGES", 2i64)),
        (presets_like.clone(), base.clone().with("BV", 16i64).with("W2", 4i64).with("STAGES", 3i64)),
        (presets_like.clone(), base.clone().with("BV", 32i64).with("TSPLIT", 2i64).with("STAGES", 3i64)),
        // K = 64 (one box a row), both paths, chunk 32 and 64, TSPLIT.
        (varlen_mix(1, 64, 64), base.clone().with("BV", 16i64).with("STAGES", 2i64)),
        (varlen_mix(0, 64, 32), base.clone().with("BV", 16i64).with("STAGES", 3i64)),
        (varlen_mix(1, 64, 64), base.clone().with("CHUNK", 64i64).with("BV", 32i64).with("STAGES", 2i64)),
        (varlen_mix(0, 64, 64), base.clone().with("BV", 32i64).with("STAGES", 2i64).with("TSPLIT", 4i64)),
        // The exact path with extreme gates (the hierarchy's chunks), a partial last chunk.
        (
            vec![("B", 1), ("T", 50), ("H", 1), ("K", 64), ("V", 64), ("safe", 0), ("extreme", 1)],
            base.clone().with("BV", 16i64).with("STAGES", 2i64),
        ),
    ];
    for (i, (dims, k)) in cases.iter().enumerate() {
        check(dims, k, s ^ (0x5100 + i as u64));
    }
}

/// `SLOAD=tmau` (each block's U by a TMA box of its own, BV = 64): the same bits as `SLOAD=cp` on the CPU backends
/// (the box copies all C rows of a short chunk, whose rows past its length the select that forms Vt drops), at 2 and 3
/// stages, on a varlen mix with an empty sequence and partial chunks, h0 and GVA, chunk 32 and 64; refused by name
/// at other widths.
#[test]
fn sload_tma_u_matches_reference_and_cp() {
    let s = seed();
    let base = kda::default_knobs().with(kda::SLOAD_KNOB, "tmau").with("BV", 64i64).with("W2", 8i64);
    let mix = presets_like();
    let cases = [
        (mix.clone(), base.clone().with("STAGES", 2i64)),
        (mix.clone(), base.clone().with("STAGES", 3i64)),
        (mix, base.clone().with("STAGES", 2i64).with("CHUNK", 64i64)),
    ];
    for (i, (dims, k)) in cases.iter().enumerate() {
        check_sload(dims, k, "_mcu", s ^ (0x5200 + i as u64));
    }
    let pb = problem(&cases[0].0);
    // `auto` (the default) takes U by TMA too where the pair's two value blocks are 64 wide, and `tma` elsewhere.
    let auto = kda::default_knobs().with("BV", 64i64).with("W2", 8i64);
    assert!(kda::Launch::resolve(&auto, &pb).unwrap().u_tma, "auto at BV=64");
    let k64 = problem(&varlen_mix(1, 64, 64));
    let l = kda::Launch::resolve(&kda::default_knobs().with("BV", 32i64).with("STAGES", 2i64), &k64).unwrap();
    assert!(l.tma_loads && !l.u_tma, "auto at BV=32: tma without U");
    match kda::Launch::resolve(&base.clone().with("BV", 32i64).with("W2", 4i64), &pb) {
        Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains("SLOAD=tmau") && why.contains("BV"), "{why}"),
        other => panic!("BV=32: {other:?}"),
    }
}

#[test]
fn sload_tma_refuses_what_it_cannot_run() {
    let pb = problem(&varlen_mix(1, 64, 64));
    let base = kda::default_knobs().with("BV", 32i64).with("STAGES", 2i64);
    assert!(kda::Launch::resolve(&tma(&base), &pb).unwrap().tma_loads);
    // Absent (a record written before the knob) and `cp`: the cp.async pass.
    let cp = kda::Launch::resolve(&base.clone().with(kda::SLOAD_KNOB, "cp"), &pb).unwrap();
    assert_eq!(
        cp,
        kda::Launch::resolve(
            &{
                let mut absent = base.clone();
                absent.0.remove(kda::SLOAD_KNOB);
                absent
            },
            &pb
        )
        .unwrap()
    );
    assert!(!cp.tma_loads);
    // `auto` (the default): tma where a pair has two value blocks and the pass allows it, else the cp pass, never
    // an error.
    assert_eq!(base.str(kda::SLOAD_KNOB).unwrap(), "auto");
    assert_eq!(kda::Launch::resolve(&base, &pb).unwrap(), kda::Launch::resolve(&tma(&base), &pb).unwrap());
    for k in
        [base.clone().with("BV", 16i64), base.clone().with("STAGES", 1i64), base.clone().with(kda::USTATE_KNOB, 1i64)]
    {
        let auto = kda::Launch::resolve(&k, &pb).unwrap();
        assert!(!auto.tma_loads, "[{k}]");
        assert_eq!(auto, kda::Launch::resolve(&k.clone().with(kda::SLOAD_KNOB, "cp"), &pb).unwrap(), "[{k}]");
    }
    let refused = [
        (base.clone().with("STAGES", 1i64), "ring"),
        (base.clone().with("SYNC", 4i64), "two-barrier"),
        (base.clone().with(kda::SGRID_KNOB, "seqs"), "SGRID=vb"),
        (base.clone().with(kda::USTATE_KNOB, 1i64), "USTATE=1"),
    ];
    for (k, what) in refused {
        match kda::Launch::resolve(&tma(&k), &pb) {
            Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains(what), "[{k}]: {why}"),
            other => panic!("[{k}]: {other:?}"),
        }
    }
    let k32 = problem(&varlen_mix(1, 32, 32));
    match kda::Launch::resolve(&tma(&kda::default_knobs()), &k32) {
        Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains("64 columns"), "{why}"),
        other => panic!("K=32: {other:?}"),
    }
    assert!(kda::Launch::resolve(&base.with(kda::SLOAD_KNOB, "bulk"), &pb).is_err());
    // Accepted by the knob check (`k3k bench --knobs SLOAD=tma`), not an axis of the knob space.
    let checked = kda::Kda.checked_knobs();
    assert!(checked.check(&Knobs::new().with(kda::SLOAD_KNOB, "tma"), &kda::default_knobs()).is_ok());
    assert!(kda::knob_space().axes.iter().all(|a| a.name != kda::SLOAD_KNOB));
}

/// The state pass of the three presets the issue times (FlashKDA's options), `SLOAD=tma` beside `SLOAD=cp` (and with
/// `STAGES=3`, and with BV=32 on 4 warps): NVRTC and ptxas for sm_90a, no spill and no stack frame.
/// `K3K_DUMP_CUBIN=dir` writes each cubin (for nvdisasm) and CUDA source there.
#[test]
fn sload_tma_kernels_compile() {
    use k3k_codegen::{BuildOptions, build};
    let fk = kda::FLASHKDA_OPTIONS;
    let shapes: [&[(&str, i64)]; 3] = [
        &[("B", 1), ("T", 8192), ("H", 96)],
        &[("B", 4), ("T", 4096), ("H", 64)],
        &[
            ("N", 8),
            ("L0", 1024),
            ("L1", 1024),
            ("L2", 1024),
            ("L3", 1024),
            ("L4", 1024),
            ("L5", 1024),
            ("L6", 1024),
            ("L7", 1024),
            ("H", 96),
        ],
    ];
    let dump = std::env::var("K3K_DUMP_CUBIN").ok();
    for dims in shapes {
        let dd: Vec<(&str, i64)> = dims.iter().copied().chain(fk).collect();
        let pb = problem(&dd);
        let deeper = tma(&kda::default_knobs()).with("STAGES", 3i64);
        let narrow = tma(&kda::default_knobs()).with("BV", 32i64).with("W2", 4i64).with("STAGES", 2i64);
        for knobs in [kda::default_knobs(), tma(&kda::default_knobs()), deeper, narrow] {
            let l = kda::Launch::resolve(&knobs, &pb).unwrap();
            let k = kda::state_kernel(&pb.spec(), &l).unwrap();
            let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
            let r = m.resources.clone().unwrap();
            eprintln!("{}: {r:?} smem {} cluster {}", k.name, k.shared_bytes(), k.cluster_size());
            assert!(!r.spills_over(0) && r.stack_frame_bytes == 0, "{}: {r:?}", k.name);
            if let (Some(dir), Some(cubin)) = (&dump, &m.cubin) {
                std::fs::write(format!("{dir}/{}.cubin", k.name), cubin).unwrap();
                std::fs::write(format!("{dir}/{}.cu", k.name), k3k_codegen::render(&k).unwrap()).unwrap();
            }
        }
    }
}
