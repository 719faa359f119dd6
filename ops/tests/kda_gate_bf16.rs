//! The bf16 raw-gate input of `kda` and `kda.decode` (dim `gbf16`, issue 42: FlashKDA's API takes the gate as
//! bf16): the kernels read `g` as bf16 and match the f64 recurrence on the same bf16 values (SEMANTICS.md section 3,
//! rel L2 <= 5e-3 for o and the final state) on the CPU interpreter and the Cranelift JIT (and GPU 0 with
//! `K3K_GPU=1`), for every in-kernel gate form, both diagonal paths, varlen, GVA, h0 and the TSPLIT plan; a
//! pre-computed gate in bf16 is refused; without `gbf16` the kernels are those of before (names, f32 `g`).

use k3k_ir::DType;
use k3k_ops::OpError;
use k3k_ops::kda::decode::{self, DecodeProblem, KdaDecode};
use k3k_ops::kda::{self, FLASHKDA_OPTIONS, Kda, KdaData, KdaProblem};
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::{Executor, Plan};
use k3k_reference::metrics::rel_l2;

#[path = "common/plan_run.rs"]
mod plan_run;
use plan_run::{run_everywhere, seed};

fn problem(dims: &[(&str, i64)]) -> KdaProblem {
    KdaProblem::from_preset(&Preset::new("test", dims)).unwrap_or_else(|e| panic!("{dims:?}: {e}"))
}

/// The f32 inputs of a problem as bf16 tensors `g` must be, and the kernels' `g` must be bf16 too.
fn assert_bf16_gate(plan: &Plan, d: &KdaData, what: &str) {
    assert_eq!(d.g.dtype, DType::Bf16, "{what}: the generated gate");
    let g = plan.buffers.iter().find(|b| b.name == "g").unwrap_or_else(|| panic!("{what}: no `g` input"));
    assert_eq!(g.tensor.dtype, DType::Bf16, "{what}: the plan's gate");
    for step in &plan.steps {
        if let Some(t) = step.kernel.tensors.iter().find(|t| t.name == "g") {
            assert_eq!(t.dtype, DType::Bf16, "{what}: {} declares g as {:?}", step.kernel.name, t.dtype);
            assert!(step.kernel.name.contains("_gbf16"), "{what}: {} names the bf16 gate", step.kernel.name);
        }
    }
}

/// The chunked kernels with a bf16 raw gate, every in-kernel gate form, against the f64 recurrence on the same bf16
/// values, on the interpreter and the JIT (and the one-part plan against a four-part TSPLIT plan).
#[test]
fn chunked_bf16_gate_matches_reference() {
    let s = seed();
    let cases: [(Vec<(&str, i64)>, i64); 5] = [
        // FlashKDA's options on a small varlen batch with an empty sequence, chunk 32 (the presets' kernels).
        ([("N", 3i64), ("L0", 40), ("L1", 0), ("L2", 70), ("H", 1)].into_iter().chain(FLASHKDA_OPTIONS).collect(), 0),
        // The same options, chunk 64, B = 2.
        ([("B", 2i64), ("T", 33), ("H", 1)].into_iter().chain(FLASHKDA_OPTIONS).collect(), 64),
        // gate=1 without bias, GVA, small heads.
        (
            vec![
                ("B", 1),
                ("T", 70),
                ("H", 1),
                ("HV", 2),
                ("K", 32),
                ("V", 64),
                ("safe", 1),
                ("gate", 1),
                ("gbf16", 1),
            ],
            32,
        ),
        // The standard form on the exact path with its bias, the L2 norms and h0.
        (
            vec![
                ("B", 1),
                ("T", 65),
                ("H", 2),
                ("K", 64),
                ("V", 32),
                ("safe", 0),
                ("gate", 2),
                ("bias", 1),
                ("l2norm", 1),
                ("h0", 1),
                ("gbf16", 1),
            ],
            0,
        ),
        // gate=3 on the exact path.
        (vec![("B", 1), ("T", 50), ("H", 1), ("K", 32), ("safe", 0), ("gate", 3), ("bsig", 1), ("gbf16", 1)], 32),
    ];
    for (i, (dims, chunk)) in cases.iter().enumerate() {
        let seed = s ^ i as u64;
        let pb = problem(dims);
        assert!(pb.g_bf16, "{dims:?}");
        let d = KdaData::generate(&pb, seed);
        let knobs = kda::default_knobs().with("CHUNK", *chunk);
        let plan = kda::chunk_plan(&pb, &d, &knobs).unwrap();
        assert_bf16_gate(&plan, &d, &format!("{dims:?}"));
        let (pairs, scope) = kda::check_scope(&pb, seed);
        for (ex, out) in run_everywhere(&plan, &format!("{dims:?}")) {
            let r = kda::check_pairs(&pb, &d, &out, &pairs, scope.clone()).unwrap();
            eprintln!("{dims:?} CHUNK={chunk} {ex}: rel {:.3e}", r.max_rel_err);
            assert!(r.passed, "{dims:?} on {ex}, seed {seed}: {} (rel {:.3e})", r.detail, r.max_rel_err);
        }
        if i == 0 {
            // The split plan reads the same bf16 gate in every part.
            let split = kda::chunk_plan(&pb, &d, &knobs.clone().with("TSPLIT", 4i64)).unwrap();
            assert_bf16_gate(&split, &d, "TSPLIT=4");
            let out = Executor::Cpu.run(&split).unwrap();
            let r = kda::check_pairs(&pb, &d, &out, &pairs, scope.clone()).unwrap();
            assert!(r.passed, "TSPLIT=4, seed {seed}: {}", r.detail);
        }
    }
}

/// The reference does read the bf16 values the kernels read: the decode kernel's final state (f32 throughout, errors
/// near 1e-7) is far closer to the f64 recurrence on the rounded gate than to the recurrence on the same draws before
/// their rounding (the f32 gate of the problem without `gbf16`). (The chunked kernels' f16 scratch puts their state
/// error near 3e-4, the size of the rounding's effect, so the decode kernel shows it.)
#[test]
fn the_reference_reads_the_rounded_gate() {
    let s = seed();
    let dims = [("N", 2i64), ("T", 4), ("H", 2), ("K", 128), ("gate", 3), ("bias", 1), ("bsig", 1), ("gbf16", 1)];
    let pb = DecodeProblem::from_preset(&Preset::new("t", &dims)).unwrap();
    let cp = pb.as_chunked();
    let d = KdaData::generate(&cp, s);
    let cp32 = KdaProblem { g_bf16: false, ..cp.clone() };
    let d32 = KdaData::generate(&cp32, s);
    // The same draws: the bf16 gate is the f32 one rounded.
    let n = d.g.shape.iter().product::<usize>();
    let mut moved = 0;
    for i in 0..n {
        let (a, b) = (d32.g.get_f32(i), d.g.get_f32(i));
        assert_eq!(b, half::bf16::from_f32(a).to_f32(), "g[{i}]");
        moved += (a != b) as usize;
    }
    assert!(moved > n / 2, "most gates change when rounded ({moved} of {n})");
    let out = Executor::Cpu.run(&decode::decode_plan(&pb, &d).unwrap()).unwrap();
    let ht = out.get("ht").unwrap().to_f64_vec();
    let (dk, dv) = (cp.dk, cp.dv);
    for (seq, rows) in cp.seqs().into_iter().enumerate() {
        for hv in 0..cp.hv {
            let want = k3k_reference::kda::kda_recurrent(&d.pair_inputs(&cp, rows, seq, hv)).unwrap().final_state;
            let unrounded =
                k3k_reference::kda::kda_recurrent(&d32.pair_inputs(&cp32, rows, seq, hv)).unwrap().final_state;
            let got = &ht[(seq * cp.hv + hv) * dk * dv..][..dk * dv];
            let (e16, e32) = (rel_l2(got, &want), rel_l2(got, &unrounded));
            eprintln!("({seq}, {hv}): against the bf16 gate's recurrence {e16:.2e}, the f32 gate's {e32:.2e}");
            assert!(e16 < 1e-5, "seed {s}: {e16:.2e}");
            assert!(e32 > 10.0 * e16, "seed {s}: the reference sees the gate's rounding ({e32:.2e} vs {e16:.2e})");
        }
    }
}

/// The decode kernel with a bf16 raw gate (every in-kernel gate form), out of place through the operator's plan,
/// against the f64 recurrence; its kernel names the bf16 gate.
#[test]
fn decode_bf16_gate_matches_reference() {
    let s = seed();
    for (i, dims) in [
        vec![("N", 2i64), ("T", 3), ("H", 1), ("HV", 2), ("K", 64), ("V", 32), ("gate", 3), ("bias", 1), ("l2norm", 1)],
        vec![("N", 3), ("T", 1), ("H", 2), ("K", 128), ("gate", 1), ("bsig", 1)],
        vec![("N", 1), ("T", 2), ("H", 1), ("K", 32), ("V", 128), ("gate", 2), ("bias", 1)],
    ]
    .into_iter()
    .enumerate()
    {
        let dims: Vec<(&str, i64)> = dims.into_iter().chain([("gbf16", 1)]).collect();
        let pb = DecodeProblem::from_preset(&Preset::new("t", &dims)).unwrap();
        let cp = pb.as_chunked();
        assert!(pb.g_bf16 && cp.g_bf16);
        let d = KdaData::generate(&cp, s ^ i as u64);
        let plan = decode::decode_plan(&pb, &d).unwrap();
        assert_bf16_gate(&plan, &d, &format!("decode {dims:?}"));
        let (pairs, scope) = kda::check_scope(&cp, s);
        for (ex, out) in run_everywhere(&plan, &format!("decode {dims:?}")) {
            let r = kda::check_pairs(&cp, &d, &out, &pairs, scope.clone()).unwrap();
            eprintln!("decode {dims:?} {ex}: rel {:.2e}", r.max_rel_err);
            assert!(r.passed, "decode {dims:?} on {ex}, seed {s}: {}", r.detail);
        }
    }
}

/// A bf16 pre-computed gate is refused (typed, naming `gbf16`) by both operators; the operators' `problem()` names
/// the gate's dtype for the peers.
#[test]
fn bf16_gate_needs_an_in_kernel_form_and_is_reported() {
    let chunked = Preset::new("t", &[("B", 1), ("T", 16), ("H", 1), ("K", 32), ("gbf16", 1)]);
    match Kda.instance(&chunked, 1) {
        Err(OpError::BadInput { arg, .. }) => assert_eq!(arg, "gbf16"),
        other => panic!("kda gate=0 gbf16=1: {:?}", other.err()),
    }
    let dec = Preset::new("t", &[("N", 1), ("H", 1), ("K", 32), ("gbf16", 1)]);
    match KdaDecode.instance(&dec, 1) {
        Err(OpError::BadInput { arg, .. }) => assert_eq!(arg, "gbf16"),
        other => panic!("kda.decode gate=0 gbf16=1: {:?}", other.err()),
    }
    let with = |g: i64| Preset::new("t", &[("B", 1), ("T", 16), ("H", 1), ("K", 32), ("gate", 1), ("gbf16", g)]);
    assert_eq!(Kda.instance(&with(1), 1).unwrap().problem()["g_dtype"], "bf16");
    assert_eq!(Kda.instance(&with(0), 1).unwrap().problem()["g_dtype"], "f32");
    let dec = Preset::new("t", &[("N", 1), ("H", 1), ("K", 32), ("gate", 3), ("gbf16", 1)]);
    assert_eq!(KdaDecode.instance(&dec, 1).unwrap().problem()["g_dtype"], "bf16");
}

/// Without `gbf16` the kernels are those of before the option: the FlashKDA options with an f32 gate build the
/// intra kernel of that name with an f32 `g` (the fingerprints of every old preset are compared in
/// `lab/2026-12-07/kda-intra.md`); with it only the intra kernel's name and `g` change, the state pass is the same.
#[test]
fn f32_gate_kernels_keep_their_names() {
    let f32_opts: Vec<(&str, i64)> = FLASHKDA_OPTIONS.iter().copied().filter(|(k, _)| *k != "gbf16").collect();
    let dims: Vec<(&str, i64)> = [("B", 1i64), ("T", 8192), ("H", 96)].into_iter().chain(f32_opts).collect();
    let ks = Kda.kernels(&Preset::new("t", &dims), &kda::default_knobs()).unwrap();
    // (`_fc_gsf_l2u`: the defaults of 2026-12-07, FULLC=1, GSIG=fast, L2R=unrolled; `_rq_ro_rg`: IMAP=gate, the
    // default since the H100 measurement of 2026-12-07 09:50 UTC; `_sw_so`: ISOLVE=1, IREPL=1, since 14:34 UTC;
    // `_ww`: IWU=wide, since 22:22 UTC.)
    assert_eq!(
        ks[0].name,
        "k3k_kda_intra_k128_v128_safe_lbsigab_l2_bsig_c32_w8_f16_bf16_ftz_mo_sl_gp_fc_gsf_l2u_rq_ro_rg_sw_so_ww"
    );
    assert_eq!(ks[0].tensors.iter().find(|t| t.name == "g").unwrap().dtype, DType::F32);
    let dims16: Vec<(&str, i64)> = [("B", 1i64), ("T", 8192), ("H", 96)].into_iter().chain(FLASHKDA_OPTIONS).collect();
    let ks16 = Kda.kernels(&Preset::new("t", &dims16), &kda::default_knobs()).unwrap();
    assert_eq!(
        ks16[0].name,
        "k3k_kda_intra_k128_v128_safe_lbsigab_gbf16_l2_bsig_c32_w8_f16_bf16_ftz_mo_sl_gp_fc_gsf_l2u_rq_ro_rg_sw_so_ww"
    );
    assert_eq!(ks16[1], ks[1], "the state pass does not read the gate");
}
