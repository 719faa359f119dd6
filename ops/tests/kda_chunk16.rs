//! `kda` at `CHUNK=16` (accepted, not an axis of the knob space; issue 42: FlashKDA's chunk): one 16x16 diagonal tile
//! per chunk in the intra kernel and twice the state pass's chunk steps. The kernels match the f64 recurrence
//! (SEMANTICS.md section 3, rel L2 <= 5e-3 for o and the final state) on the CPU interpreter and the Cranelift JIT
//! (and GPU 0 with `K3K_GPU=1`) on both diagonal paths, the in-kernel gate forms, varlen with an empty sequence, GVA,
//! h0, partial chunks and a TSPLIT plan; `USTATE=1` is refused by name at chunk 16.

use k3k_ops::OpError;
use k3k_ops::kda::{self, FLASHKDA_OPTIONS, KdaData, KdaProblem};
use k3k_ops::op::Preset;
use k3k_ops::plan::Executor;

#[path = "common/plan_run.rs"]
mod plan_run;
use plan_run::{run_everywhere, seed};

fn problem(dims: &[(&str, i64)]) -> KdaProblem {
    KdaProblem::from_preset(&Preset::new("test", dims)).unwrap_or_else(|e| panic!("{dims:?}: {e}"))
}

#[test]
fn chunk16_matches_reference() {
    let s = seed();
    let cases: Vec<(Vec<(&str, i64)>, &str)> = vec![
        // FlashKDA's options on a varlen batch with an empty sequence and partial chunks, at the defaults' W1 (8).
        ([("N", 3i64), ("L0", 40), ("L1", 0), ("L2", 37), ("H", 1)].into_iter().chain(FLASHKDA_OPTIONS).collect(), ""),
        // K = V = 128 with the presets' options on 4 warps (every chunk full: the full-chunk copy).
        ([("B", 1i64), ("T", 48), ("H", 1)].into_iter().chain(FLASHKDA_OPTIONS).collect(), "W1=4"),
        // The exact path, the standard gate form with its bias, GVA, small heads, h0.
        (
            vec![
                ("B", 2),
                ("T", 33),
                ("H", 1),
                ("HV", 2),
                ("K", 32),
                ("V", 64),
                ("safe", 0),
                ("gate", 2),
                ("bias", 1),
                ("l2norm", 1),
                ("h0", 1),
            ],
            "",
        ),
        // Pre-computed gates on the safe path.
        (vec![("B", 1), ("T", 70), ("H", 2), ("K", 64), ("V", 64), ("safe", 1)], ""),
    ];
    for (i, (dims, extra)) in cases.iter().enumerate() {
        let seed = s ^ i as u64;
        let pb = problem(dims);
        let d = KdaData::generate(&pb, seed);
        let mut knobs = kda::default_knobs().with("CHUNK", 16i64);
        if let Some((k, v)) = extra.split_once('=') {
            knobs = knobs.with(k, v.parse::<i64>().unwrap());
        }
        let plan = kda::chunk_plan(&pb, &d, &knobs).unwrap_or_else(|e| panic!("{dims:?}: {e}"));
        let intra = &plan.steps[0].kernel.name;
        assert!(intra.contains("_c16_"), "{dims:?}: the intra kernel {intra} is not the chunk-16 one");
        let (pairs, scope) = kda::check_scope(&pb, seed);
        for (ex, out) in run_everywhere(&plan, &format!("{dims:?}")) {
            let r = kda::check_pairs(&pb, &d, &out, &pairs, scope.clone()).unwrap();
            eprintln!("{dims:?} CHUNK=16 {extra} {ex}: rel {:.3e}", r.max_rel_err);
            assert!(r.passed, "{dims:?} on {ex}, seed {seed}: {} (rel {:.3e})", r.detail, r.max_rel_err);
        }
        if i == 0 {
            let split = kda::chunk_plan(&pb, &d, &knobs.clone().with("TSPLIT", 4i64)).unwrap();
            let out = Executor::Cpu.run(&split).unwrap();
            let r = kda::check_pairs(&pb, &d, &out, &pairs, scope.clone()).unwrap();
            assert!(r.passed, "TSPLIT=4 at chunk 16, seed {seed}: {}", r.detail);
        }
    }
}

#[test]
fn chunk16_refuses_ustate() {
    let pb = problem(&[("B", 1), ("T", 40), ("H", 1), ("K", 32), ("V", 32), ("safe", 1)]);
    let d = KdaData::generate(&pb, 1);
    let knobs = kda::default_knobs().with("CHUNK", 16i64).with("USTATE", 1i64);
    match kda::chunk_plan(&pb, &d, &knobs) {
        Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains("USTATE=1") && why.contains("CHUNK"), "{why}"),
        other => panic!("USTATE=1 at chunk 16: expected InvalidKnobs, got {:?}", other.map(|_| ())),
    }
    // Chunk 24 is no chunk size at all.
    match kda::chunk_plan(&pb, &d, &kda::default_knobs().with("CHUNK", 24i64)) {
        Err(OpError::InvalidKnobs { why, .. }) => assert!(why.contains("CHUNK"), "{why}"),
        other => panic!("CHUNK=24: expected InvalidKnobs, got {:?}", other.map(|_| ())),
    }
}
