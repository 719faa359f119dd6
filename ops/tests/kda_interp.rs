//! The chunked KDA kernels and the decode kernel on the CPU interpreter against the f64 recurrence
//! (`k3k_reference::kda::kda_recurrent`, SEMANTICS.md section 3: rel L2 <= 5e-3 for o and the final state): edge lengths,
//! varlen mixes, GVA, h0, both diagonal-tile paths with their gates (-1000 on the exact path, [-5, 0) on the
//! safe path), the in-kernel options, chunk 32 and 64; the safe path's typed rejection of a gate below the
//! bound; decode in place and not; prefill/decode and split/whole consistency. With `K3K_GPU=1` every checked
//! plan also runs on GPU 0 and must pass the same checks.

use k3k_ir::{Access, DType, Expr, HostTensor, KernelBuilder, Knobs, SymValue};
use k3k_ops::OpError;
use k3k_ops::kda::decode::{self, DecodeProblem};
use k3k_ops::kda::{self, KdaData, KdaProblem};
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::{Executor, GpuExec, Outputs, Plan};
use k3k_reference::metrics::rel_l2;
use k3k_runtime::Gpu;

#[path = "common/plan_run.rs"]
mod plan_run;
use plan_run::{run_plan_jit, seed, varlen_mix};

/// The CPU interpreter, plus GPU 0 when `K3K_GPU=1`.
fn executors() -> Vec<Executor> {
    let mut v = vec![Executor::Cpu];
    if std::env::var("K3K_GPU").is_ok_and(|v| v == "1") {
        let gpu = Gpu::open(0).unwrap_or_else(|e| panic!("K3K_GPU=1 but no GPU: {e}"));
        v.push(Executor::Gpu(Box::new(GpuExec::new(gpu))));
    }
    v
}

/// Run a plan on every executor; returns each run's outputs with the executor's name.
fn run_all(plan: &Plan, what: &str) -> Vec<(&'static str, Outputs)> {
    executors()
        .into_iter()
        .map(|mut ex| {
            let out = ex.run(plan).unwrap_or_else(|e| panic!("{what} on {}: {e}", ex.name()));
            (ex.name(), out)
        })
        .collect()
}

fn knobs(chunk: i64) -> Knobs {
    kda::default_knobs().with("CHUNK", chunk)
}

fn problem(dims: &[(&str, i64)]) -> KdaProblem {
    KdaProblem::from_preset(&Preset::new("test", dims)).unwrap()
}

/// Run a chunked problem on the interpreter at `knobs` and check every (sequence, head) pair; returns the
/// relative error.
fn run_with(dims: &[(&str, i64)], knobs: &Knobs, seed: u64) -> f64 {
    let pb = problem(dims);
    let d = KdaData::generate(&pb, seed);
    let plan = kda::chunk_plan(&pb, &d, knobs).unwrap();
    let (pairs, scope) = kda::check_scope(&pb, seed);
    let mut worst = 0f64;
    for (ex, out) in run_all(&plan, &format!("{dims:?}")) {
        let r = kda::check_pairs(&pb, &d, &out, &pairs, scope.clone()).unwrap();
        eprintln!("{dims:?} [{knobs}] {ex}: rel {:.3e} ({})", r.max_rel_err, r.scope);
        assert!(r.passed, "{dims:?} [{knobs}] on {ex}, seed {seed}: {} (rel {:.3e})", r.detail, r.max_rel_err);
        worst = worst.max(r.max_rel_err);
    }
    worst
}

fn run(dims: &[(&str, i64)], chunk: i64, seed: u64) -> f64 {
    run_with(dims, &knobs(chunk), seed)
}

#[test]
fn edge_lengths_both_paths_both_chunks() {
    let s = seed();
    for safe in [1, 0] {
        for chunk in [64, 32] {
            for t in [1, 15, 17, 63, 65, 130] {
                run(&[("B", 1), ("T", t), ("H", 1), ("K", 32), ("V", 32), ("safe", safe)], chunk, s ^ t as u64);
            }
        }
    }
}

#[test]
fn head_dims_128_and_mixed() {
    let s = seed();
    run(&[("B", 1), ("T", 17), ("H", 1), ("K", 128), ("V", 128), ("safe", 1), ("h0", 1)], 64, s);
    run(&[("B", 1), ("T", 20), ("H", 1), ("K", 128), ("V", 128), ("safe", 0)], 32, s ^ 1);
    run(&[("B", 2), ("T", 40), ("H", 1), ("K", 64), ("V", 32), ("safe", 1)], 64, s ^ 2);
    run(&[("B", 1), ("T", 70), ("H", 1), ("K", 32), ("V", 64), ("safe", 0), ("h0", 1)], 64, s ^ 3);
    // The benchmark's state-pass candidates at K = V = 128: one block per value head on 16 warps (both
    // stagings) and the old value blocks of 32 on 4 warps, over 3 chunks (odd, so both slots are used and reused).
    let big = [("B", 1i64), ("T", 130), ("H", 1), ("K", 128), ("V", 128), ("safe", 1), ("h0", 1)];
    for (bv, w2, stages) in [(128i64, 16i64, 2i64), (128, 16, 1), (32, 4, 1), (32, 4, 2)] {
        run_with(&big, &knobs(64).with("BV", bv).with("W2", w2).with("STAGES", stages), s ^ 4 ^ bv as u64);
    }
}

#[test]
fn varlen_gva_and_initial_state() {
    let s = seed();
    // Sequences 1, 15, 63 (and an empty one), GVA HV = 2H, h0 per sequence.
    let dims = [
        ("N", 4i64),
        ("L0", 1),
        ("L1", 15),
        ("L2", 0),
        ("L3", 63),
        ("H", 2),
        ("HV", 4),
        ("K", 32),
        ("V", 32),
        ("h0", 1),
    ];
    for (safe, chunk) in [(1, 64), (0, 32), (0, 64), (1, 32)] {
        let mut d = dims.to_vec();
        d.push(("safe", safe));
        run(&d, chunk, s ^ chunk as u64 ^ safe as u64);
    }
    // Both state-pass stagings over the same mix (the defaults above pick 2 stages for so few blocks; empty
    // sequences: no chunk, an odd number of chunks per sequence, slots restarting per block), both chunk sizes.
    for (safe, chunk, w2, stages) in [(1, 32, 4i64, 2i64), (0, 64, 8, 2), (0, 32, 16, 2), (1, 64, 4, 1), (0, 32, 8, 1)]
    {
        let mut d = dims.to_vec();
        d.push(("safe", safe));
        let k = knobs(chunk).with("STAGES", stages).with("BV", 32i64).with("W2", w2);
        run_with(&d, &k, s ^ 0x5e ^ chunk as u64 ^ stages as u64);
    }
    // Only empty sequences: no chunk at all, the final states are the initial ones.
    run(&[("N", 2), ("L0", 0), ("L1", 0), ("H", 1), ("K", 32), ("V", 32), ("h0", 1), ("safe", 1)], 64, s);
    // A batch of equal sequences with GVA 3:1.
    run(&[("B", 3), ("T", 33), ("H", 1), ("HV", 3), ("K", 32), ("V", 64), ("safe", 1), ("h0", 1)], 64, s ^ 9);
}

#[test]
fn extreme_gates_on_the_exact_path() {
    let s = seed();
    for chunk in [64, 32] {
        run(
            &[("B", 1), ("T", 130), ("H", 1), ("HV", 2), ("K", 64), ("V", 32), ("safe", 0), ("extreme", 1), ("h0", 1)],
            chunk,
            s ^ chunk as u64,
        );
    }
}

#[test]
fn safe_path_rejects_a_gate_below_the_bound() {
    let pb = problem(&[("B", 1), ("T", 40), ("H", 1), ("K", 32), ("V", 32), ("safe", 1)]);
    let mut d = KdaData::generate(&pb, 5);
    // Every generated gate is in [-5, 0) ...
    let g = d.g.to_f32_vec();
    assert!(g.iter().all(|&x| (-5.0..0.0).contains(&x)), "generated safe gates out of range");
    kda::chunk_plan(&pb, &d, &knobs(64)).unwrap();
    // ... and one at -5.01 is refused on the host, naming `g`.
    d.g.set_f32(777, -5.01);
    match kda::chunk_plan(&pb, &d, &knobs(64)) {
        Err(OpError::BadInput { op: "kda", arg, why }) => {
            assert_eq!(arg, "g");
            assert!(why.contains("g[777]"), "{why}");
        }
        other => panic!("expected BadInput on g, got {other:?}"),
    }
    d.g.set_f32(777, f32::NAN);
    assert!(matches!(kda::chunk_plan(&pb, &d, &knobs(64)), Err(OpError::BadInput { .. })));
    // The exact path takes the same gate.
    let mut pe = pb.clone();
    pe.safe = false;
    d.g.set_f32(777, -1000.0);
    kda::chunk_plan(&pe, &d, &knobs(64)).unwrap();
    // The safe path cannot take the unbounded standard gate form.
    let r = KdaProblem::from_preset(&Preset::new(
        "t",
        &[("B", 1), ("T", 4), ("H", 1), ("K", 32), ("V", 32), ("safe", 1), ("gate", 2)],
    ));
    assert!(matches!(r, Err(OpError::BadInput { ref arg, .. }) if arg == "gate"), "{r:?}");
}

#[test]
fn in_kernel_options() {
    let s = seed();
    let base = [("B", 1i64), ("T", 70), ("H", 1), ("HV", 2), ("K", 32), ("V", 32)];
    let cases: [&[(&str, i64)]; 5] = [
        &[("safe", 1), ("l2norm", 1)],
        &[("safe", 1), ("gate", 1), ("bias", 1), ("bsig", 1)],
        &[("safe", 1), ("gate", 1), ("l2norm", 1), ("h0", 1)],
        &[("safe", 0), ("gate", 2), ("bias", 1), ("l2norm", 1), ("bsig", 1)],
        &[("safe", 0), ("gate", 2), ("h0", 1)],
    ];
    for (i, extra) in cases.iter().enumerate() {
        let dims: Vec<_> = base.iter().chain(extra.iter()).copied().collect();
        run(&dims, if i % 2 == 0 { 64 } else { 32 }, s ^ i as u64);
    }
}

/// FlashKDA's gate form (`gate=3`: `lb * sigmoid(exp(A_log[hv]) * (x + bias))`) in the chunked kernels (both
/// paths, varlen, h0, every in-kernel option) and in the decode kernel, against the f64 reference of that form; and
/// the same outputs against the reference of the form without the `exp(A_log)` factor (`gate=1`) fail, so the factor
/// is applied (A_log ~ U(-1, 1) scales the sigmoid's argument by 0.37 to 2.7).
#[test]
fn kda_scaled_safe_gate_matches_reference() {
    let s = seed();
    let opts = [("gate", 3i64), ("bias", 1), ("l2norm", 1), ("bsig", 1), ("h0", 1)];
    let cases: [Vec<(&str, i64)>; 4] = [
        [("B", 1i64), ("T", 70), ("H", 2), ("K", 32), ("V", 32), ("safe", 1)].into_iter().chain(opts).collect(),
        [("B", 2i64), ("T", 33), ("H", 1), ("HV", 2), ("K", 64), ("V", 32), ("safe", 0)]
            .into_iter()
            .chain(opts)
            .collect(),
        [("N", 3i64), ("L0", 17), ("L1", 0), ("L2", 65), ("H", 2), ("K", 32), ("V", 64), ("safe", 1)]
            .into_iter()
            .chain(opts)
            .collect(),
        vec![("B", 1), ("T", 40), ("H", 1), ("K", 128), ("V", 128), ("safe", 1), ("gate", 3)],
    ];
    for (i, dims) in cases.iter().enumerate() {
        let seed = s ^ i as u64;
        let pb = problem(dims);
        assert_eq!(pb.gate, kda::GateForm::Safe { bias: i < 3, a_log: true });
        let mut d = KdaData::generate(&pb, seed);
        // A_log moved away from 0 (|A_log| in [0.5, 1], its sign kept), so that exp(A_log) is at least 1.65 or at
        // most 0.61 on every head and the check that the factor is applied can tell: a one-head draw near 0 made the
        // unscaled reference pass within 3.6e-3 (seed 8644620062186681898, 2026-12-07).
        let a = d.a_log.as_ref().expect("the scaled form passes A_log");
        let moved: Vec<f32> = (0..a.len()).map(|j| a.get_f32(j)).map(|v| v.signum() * (0.5 + 0.5 * v.abs())).collect();
        d.a_log = Some(HostTensor::from_f32(a.dtype, &a.shape, &moved));
        let plan = kda::chunk_plan(&pb, &d, &knobs(if i % 2 == 0 { 32 } else { 64 })).unwrap();
        let (pairs, scope) = kda::check_scope(&pb, seed);
        for (ex, out) in run_all(&plan, &format!("{dims:?}")) {
            let r = kda::check_pairs(&pb, &d, &out, &pairs, scope.clone()).unwrap();
            eprintln!("{dims:?} {ex}: rel {:.3e}", r.max_rel_err);
            assert!(r.passed, "{dims:?} on {ex}, seed {seed}: {} (rel {:.3e})", r.detail, r.max_rel_err);
            let unscaled = KdaProblem { gate: kda::GateForm::Safe { bias: i < 3, a_log: false }, ..pb.clone() };
            let w = kda::check_pairs(&unscaled, &d, &out, &pairs, scope.clone()).unwrap();
            // (At least twice the 5e-3 tolerance: 2e-2 was above what some draws give, 1.88e-2 on 2026-12-07.)
            assert!(
                !w.passed && w.max_rel_err > 1e-2,
                "{dims:?} on {ex}: the A_log factor changes o (rel {:.3e})",
                w.max_rel_err
            );
        }
    }
    // Decode, out of place through the operator's plan.
    let dims =
        [("N", 2i64), ("T", 3), ("H", 1), ("HV", 2), ("K", 64), ("V", 32), ("gate", 3), ("bias", 1), ("l2norm", 1)];
    let pb = decode_problem(&dims);
    let cp = pb.as_chunked();
    let d = KdaData::generate(&cp, s);
    let (pairs, scope) = kda::check_scope(&cp, s);
    for (ex, out) in run_all(&decode::decode_plan(&pb, &d).unwrap(), "decode gate=3") {
        let r = kda::check_pairs(&cp, &d, &out, &pairs, scope.clone()).unwrap();
        eprintln!("decode {dims:?} {ex}: rel {:.2e}", r.max_rel_err);
        assert!(r.passed, "decode {dims:?} on {ex}, seed {s}: {}", r.detail);
    }
}

#[test]
fn knob_points_agree() {
    let s = seed();
    let dims = [("B", 1i64), ("T", 100), ("H", 1), ("K", 64), ("V", 64), ("safe", 1), ("h0", 1)];
    let def = kda::default_knobs();
    for k in [
        def.clone().with("W1", 4i64),
        def.clone().with("W1", 8i64),
        def.clone().with("W1", 16i64).with("CHUNK", 32i64),
        def.clone().with("BV", 16i64),
        def.clone().with("BV", 32i64).with("W2", 8i64),
        def.clone().with("BV", 64i64),
        def.clone().with("OPDT", "bf16").with("LVLDT", "bf16"),
        // Double-buffered state pass, and 16 warps on it.
        def.clone().with("STAGES", 1i64),
        def.clone().with("STAGES", 2i64),
        def.clone().with("STAGES", 2i64).with("BV", 16i64).with("W2", 4i64),
        def.clone().with("STAGES", 2i64).with("BV", 64i64).with("W2", 16i64),
        def.clone().with("STAGES", 1i64).with("BV", 64i64).with("W2", 16i64),
        def.clone().with("STAGES", 2i64).with("CHUNK", 32i64).with("BV", 32i64).with("W2", 8i64),
        // Three stages (chunk j + 2's loads issued at the top of chunk j).
        def.clone().with("STAGES", 3i64),
        def.clone().with("STAGES", 3i64).with("CHUNK", 32i64).with("BV", 16i64).with("W2", 4i64),
        def.clone().with("STAGES", 3i64).with("CHUNK", 64i64).with("BV", 64i64).with("W2", 16i64),
    ] {
        run_with(&dims, &k, s);
    }
    // A knob set from before STAGES existed means one stage.
    let mut old = def.clone();
    old.0.remove("STAGES");
    let pb = problem(&dims);
    let one = kda::Launch::resolve(&def.clone().with("STAGES", 1i64), &pb).unwrap();
    assert_eq!(kda::Launch::resolve(&old, &pb).unwrap(), one);
    assert_eq!(one.stages, 1);
    assert!(kda::Launch::resolve(&def.clone().with("STAGES", 4i64), &pb).is_err());
    assert!(kda::Launch::resolve(&def.clone().with("W2", 2i64), &pb).is_err());
    // STAGES=0: the deepest ring that keeps the resident blocks the grid needs (132 SMs assumed; K = V = 128,
    // chunk 32: 38 / 67 / 96 KB for 1 / 2 / 3 stages): 3 at H32 (128 blocks, one an SM), 2 at H96 (384 blocks,
    // 3 an SM), 1 at B4 H64 (1024 blocks, 4 an SM by registers on 4 warps); the shared-memory formula is the
    // kernel's.
    let op = kda::Kda;
    for p in op.bench_presets() {
        let pb = kda::KdaProblem::from_preset(&p).unwrap();
        let l = kda::Launch::resolve(&def, &pb).unwrap();
        let blocks = pb.num_seqs() * pb.hv * pb.dv / l.bv as usize;
        // (W2 = 4 at BV = 32 everywhere now: at H32 the 128 blocks still get 3 stages, one block an SM.)
        // The FlashKDA presets: B1 H64 (256 blocks, 2 an SM: 3 stages, 2 x 97 KB). Where 64-column blocks still
        // make two a SM (B4 H64: 512, varlen 8 x 1024 H96: 1536, the ragged varlen: 1152), BV = 64 on 8 warps with 2
        // stages (128 registers; 3 would take 154).
        let want = match (blocks, l.bv, l.w2) {
            (b, 32, 4) if b <= 132 => 3,
            (256, 32, 4) => 3,
            (384, 32, 4) => 2,
            (512 | 1152 | 1536, 64, 8) => 2,
            other => panic!("{}: unexpected state-pass grid {other:?}", p.name),
        };
        assert_eq!(l.stages, want, "{}: {l:?}", p.name);
        eprintln!("{}: {l:?}, {blocks} state-pass blocks", p.name);
        for (chunk, bv, stages) in
            [(32u32, 32u32, 1u32), (32, 32, 2), (32, 32, 3), (64, 32, 3), (32, 128, 3), (64, 16, 2)]
        {
            for two_bars in [false, true] {
                let k = kda::state::build_state(&pb.spec(), chunk, bv, 8, l.op_dt, stages, two_bars).unwrap();
                assert_eq!(k.shared_bytes() as u32, kda::state_shared_bytes(128, chunk, bv, stages), "{}", k.name);
            }
        }
    }
    // Chunk 64 with BV = 128 does not fit three stages (266 KB): refused, and the automatic choice takes two.
    let wide = problem(&[("B", 1), ("T", 64), ("H", 1), ("K", 128), ("safe", 1)]);
    let k64 = def.clone().with("CHUNK", 64i64).with("BV", 128i64).with("W2", 16i64);
    assert!(kda::Launch::resolve(&k64.clone().with("STAGES", 3i64), &wide).is_err());
    assert_eq!(kda::Launch::resolve(&k64, &wide).unwrap().stages, 2);
    assert_eq!(kda::Launch::resolve(&k64.with("CHUNK", 32i64), &wide).unwrap().stages, 3);
    let mut e = dims.to_vec();
    e[5] = ("safe", 0);
    run_with(&e, &def.clone().with("LVLDT", "bf16").with("W1", 4i64), s);
}

#[test]
fn operator_random_cases() {
    // The operator's own random cases (what `k3k check --op kda` draws), at the default knobs.
    let s = seed();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(s);
    for op in [&kda::Kda as &dyn Operator, &kda::KdaDecode] {
        for _ in 0..6 {
            let p = op.random_case(&mut rng);
            let inst = op.instance(&p, s).unwrap();
            for (ex, out) in run_all(&inst.plan(&op.default_knobs()).unwrap(), &inst.describe()) {
                let r = inst.check(&out).unwrap();
                eprintln!("{} {ex}: rel {:.3e}", inst.describe(), r.max_rel_err);
                assert!(r.passed, "{} on {ex} (seed {s}): {}", inst.describe(), r.detail);
            }
        }
    }
}

#[test]
fn split_sequence_equals_whole() {
    // Prefill of T tokens == prefill of the first part, then of the rest from its final state.
    let s = seed();
    let (t, t1) = (90usize, 37usize);
    let whole = problem(&[("B", 1), ("T", t as i64), ("H", 1), ("K", 32), ("V", 32), ("safe", 0), ("h0", 1)]);
    let d = KdaData::generate(&whole, s);
    let exec = |pb: &KdaProblem, d: &KdaData| Executor::Cpu.run(&kda::chunk_plan(pb, d, &knobs(64)).unwrap()).unwrap();
    let out = exec(&whole, &d);
    let rows = |x: &HostTensor, lo: usize, hi: usize, width: usize| {
        let mut y = x.clone();
        y.shape[0] = hi - lo;
        y.data = x.data[lo * width * x.dtype.storage_bytes(1)..hi * width * x.dtype.storage_bytes(1)].to_vec();
        y
    };
    let part = |lo: usize, hi: usize, h0: HostTensor| {
        let mut pb = whole.clone();
        pb.t = hi - lo;
        let dd = KdaData {
            q: rows(&d.q, lo, hi, 32),
            k: rows(&d.k, lo, hi, 32),
            v: rows(&d.v, lo, hi, 32),
            g: rows(&d.g, lo, hi, 32),
            beta: rows(&d.beta, lo, hi, 1),
            bias: None,
            a_log: None,
            h0: Some(h0),
        };
        exec(&pb, &dd)
    };
    let a = part(0, t1, d.h0.clone().unwrap());
    let b = part(t1, t, a.get("ht").unwrap().clone());
    let (o_whole, o_a, o_b) =
        (out.get("o").unwrap().to_f64_vec(), a.get("o").unwrap().to_f64_vec(), b.get("o").unwrap().to_f64_vec());
    let joined: Vec<f64> = o_a.iter().chain(&o_b).copied().collect();
    let ro = rel_l2(&joined, &o_whole);
    let rs = rel_l2(&b.get("ht").unwrap().to_f64_vec(), &out.get("ht").unwrap().to_f64_vec());
    eprintln!("split vs whole: o {ro:.2e} state {rs:.2e}");
    assert!(ro < 5e-3 && rs < 2e-3, "o {ro} state {rs}");
}

/// One plan step run by the interpreter and by the Cranelift JIT from the same poisoned outputs: bit for bit the
/// same results, or the test fails naming `what`.
fn jit_matches_interpreter(plan: &Plan, step: &k3k_ops::plan::Step, what: &str) {
    use k3k_codegen::cpu::interp::{self, InterpOptions};
    use k3k_codegen::cpu::jit;
    let fresh = || -> Vec<HostTensor> {
        step.args
            .iter()
            .map(|&a| {
                let mut t = plan.buffers[a].tensor.clone();
                if plan.buffers[a].role != k3k_ops::plan::Role::Input {
                    t.poison();
                }
                t
            })
            .collect()
    };
    let scalars: Vec<(&str, SymValue)> = step.scalars.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let (mut a_int, mut a_jit) = (fresh(), fresh());
    interp::run(&step.kernel, &mut a_int, &scalars, InterpOptions::default()).unwrap();
    let jk = jit::compile(&step.kernel).unwrap_or_else(|e| panic!("{what}: jit: {e}"));
    jk.run(&mut a_jit, &scalars, InterpOptions::default()).unwrap();
    for (x, y) in a_int.iter().zip(&a_jit) {
        assert_eq!(x.data, y.data, "{what}: the JIT differs from the interpreter");
    }
}

fn decode_problem(dims: &[(&str, i64)]) -> DecodeProblem {
    DecodeProblem::from_preset(&Preset::new("t", dims)).unwrap()
}

/// A plain copy `dst = src` of `[N, HV, K, V]` f32 states (to seed an in-place state inside a plan).
fn copy_kernel() -> k3k_ir::Kernel {
    let mut b = KernelBuilder::new("t_kda_copy_state", 256);
    let dims: Vec<Expr> = ["A", "B", "C", "D"].iter().map(|d| b.dim(d)).collect();
    let src = b.tensor("src", DType::F32, &dims, Access::Read);
    let dst = b.tensor("dst", DType::F32, &dims, Access::Write);
    let n = dims[0].clone() * dims[1].clone() * dims[2].clone() * dims[3].clone();
    b.grid(n.ceil_div(256i64), 1i64, 1i64);
    b.threads(|b| {
        let i = b.let_("i", Expr::block_idx(0) * 256i64 + Expr::thread_idx());
        b.if_(i.lt(n.clone()), |b| b.store_scalar(dst, i.clone(), Expr::load(src, i.clone())));
    });
    b.finish().unwrap()
}

/// The in-place plan of a decode problem: copy h0 into `state`, then update it where it lies with the in-place
/// kernel of `spec`.
fn in_place_plan(pb: &DecodeProblem, d: &KdaData, spec: &decode::DecodeSpec) -> Plan {
    let cp = pb.as_chunked();
    let (n, t, h, hv, dk, dv) = (pb.n, pb.t, pb.h, pb.hv, pb.dk, pb.dv);
    let reshape =
        |x: &HostTensor, shape: &[usize]| HostTensor { dtype: x.dtype, shape: shape.to_vec(), data: x.data.clone() };
    let mut ip = Plan::default();
    let mut args = vec![
        ip.input("q", reshape(&d.q, &[n, t, h, dk])),
        ip.input("k", reshape(&d.k, &[n, t, h, dk])),
        ip.input("v", reshape(&d.v, &[n, t, hv, dv])),
        ip.input("g", reshape(&d.g, &[n, t, hv, dk])),
        ip.input("beta", reshape(&d.beta, &[n, t, hv])),
    ];
    if let Some(b) = &d.bias {
        args.push(ip.input("bias", b.clone()));
    }
    if let Some(a) = &d.a_log {
        args.push(ip.input("a_log", a.clone()));
    }
    let h0 = ip.input("h0", d.h0.clone().unwrap());
    let state = ip.output("state", DType::F32, &[n, hv, dk, dv]);
    args.push(state);
    args.push(ip.output("o", DType::Bf16, &[n, t, hv, dv]));
    let mut scalars = vec![("scale", SymValue::Float(cp.scale()))];
    if matches!(pb.gate, kda::GateForm::Safe { .. }) {
        scalars.push(("lb", SymValue::Float(kda::LOWER_BOUND)));
    }
    ip.step(copy_kernel(), &[h0, state], &[]);
    assert!(spec.in_place);
    let k = decode::build_decode(spec).unwrap();
    ip.step(k, &args, &scalars);
    ip
}

#[test]
fn decode_matches_reference_in_place_and_not() {
    let s = seed();
    for (i, dims) in [
        vec![("N", 3i64), ("T", 1), ("H", 2), ("HV", 4), ("K", 128), ("V", 128)],
        vec![("N", 2), ("T", 5), ("H", 1), ("K", 64), ("V", 32), ("gate", 1), ("bias", 1), ("l2norm", 1)],
        vec![("N", 1), ("T", 3), ("H", 1), ("HV", 2), ("K", 32), ("V", 128), ("gate", 2), ("bsig", 1)],
    ]
    .into_iter()
    .enumerate()
    {
        let pb = decode_problem(&dims);
        let d = KdaData::generate(&pb.as_chunked(), s ^ i as u64);
        let cp = pb.as_chunked();
        let (pairs, scope) = kda::check_scope(&cp, s);
        // Out of place, through the operator's plan and check.
        let plan = decode::decode_plan(&pb, &d).unwrap();
        let outs = run_all(&plan, &format!("decode {dims:?}"));
        for (ex, out) in &outs {
            let r = kda::check_pairs(&cp, &d, out, &pairs, scope.clone()).unwrap();
            eprintln!("decode {dims:?} {ex}: rel {:.2e}", r.max_rel_err);
            assert!(r.passed, "decode {dims:?} on {ex}, seed {s}: {}", r.detail);
        }
        // In place: copy h0 into the state, then update it where it lies; o and the state equal the
        // out-of-place run's bit for bit.
        let ip = in_place_plan(&pb, &d, &pb.spec(true));
        for ((ex, out), (_, want)) in run_all(&ip, &format!("decode in place {dims:?}")).iter().zip(&outs) {
            // Bitwise on the interpreter; the GPU compiles the two variants separately (contractions may differ).
            // (o is bf16: an f32 difference in the last bit may flip a rounding.)
            let close = |a: &HostTensor, b: &HostTensor| {
                if *ex == "cpu-interp" { a.data == b.data } else { rel_l2(&a.to_f64_vec(), &b.to_f64_vec()) < 1e-3 }
            };
            assert!(close(out.get("state").unwrap(), want.get("ht").unwrap()), "{ex}: in-place state differs");
            assert!(close(out.get("o").unwrap(), want.get("o").unwrap()), "{ex}: in-place o differs");
        }
    }
}

#[test]
fn decode_layouts_match_reference() {
    // Every layout knob (KL lanes along K, VPL value columns per lane, DW warps per block, SW wide state
    // accesses) against the f64
    // recurrence from a random N(0, 1) h0: GVA (HV = 2H), every gate form with and without bias, the beta
    // sigmoid, the L2 norms, N = 1 and 3, T = 1 and 3 (later tokens read back the state the previous one
    // stored). In place equals out of place bit for bit on the interpreter, and the Cranelift JIT runs the
    // out-of-place kernel bit for bit like the interpreter.
    let s = seed();
    type Case = (Vec<(&'static str, i64)>, &'static [(i64, i64, i64)]);
    let cases: [Case; 4] = [
        (
            vec![("N", 3i64), ("T", 1), ("H", 2), ("HV", 4), ("K", 128), ("V", 128)],
            &[(0, 0, 0), (2, 1, 4), (4, 1, 4), (8, 4, 2), (4, 2, 8), (4, 4, 1), (8, 1, 4)],
        ),
        (
            vec![
                ("N", 1),
                ("T", 3),
                ("H", 1),
                ("HV", 2),
                ("K", 64),
                ("V", 64),
                ("gate", 1),
                ("bias", 1),
                ("l2norm", 1),
                ("bsig", 1),
            ],
            &[(0, 0, 0), (2, 1, 2), (2, 2, 1), (8, 4, 1), (4, 1, 1)],
        ),
        (
            vec![("N", 3), ("T", 1), ("H", 1), ("HV", 2), ("K", 32), ("V", 128), ("gate", 2), ("bias", 1), ("bsig", 1)],
            &[(0, 0, 0), (1, 2, 2), (8, 1, 4), (4, 4, 2)],
        ),
        (
            vec![("N", 3), ("T", 3), ("H", 2), ("HV", 4), ("K", 128), ("V", 32), ("gate", 2), ("l2norm", 1)],
            &[(0, 0, 0), (2, 1, 1), (4, 2, 2)],
        ),
    ];
    for (i, (dims, layouts)) in cases.iter().enumerate() {
        let pb = decode_problem(dims);
        let d = KdaData::generate(&pb.as_chunked(), s ^ (i as u64 + 1));
        let h0 = d.h0.as_ref().unwrap().to_f64_vec();
        assert!(h0.iter().filter(|x| **x == 0.0).count() < h0.len() / 100, "h0 should be random, not zeros");
        let cp = pb.as_chunked();
        let (pairs, scope) = kda::check_scope(&cp, s);
        // Both access widths (SW=1: one wide state access per row; SW=2: 4-byte accesses) wherever VPL is 2 or 4.
        let with_sw = layouts.iter().flat_map(|&(kl, vpl, dw)| {
            let sws: &[i64] = if vpl >= 2 { &[2, 1] } else { &[0] };
            sws.iter().map(move |&sw| (kl, vpl, dw, sw))
        });
        for (kl, vpl, dw, sw) in with_sw {
            let knobs = decode::default_knobs().with("KL", kl).with("VPL", vpl).with("DW", dw).with("SW", sw);
            let what = format!("decode {dims:?} KL={kl} VPL={vpl} DW={dw} SW={sw}");
            let plan = decode::decode_plan_with(&pb, &d, &knobs).unwrap();
            let outs = run_all(&plan, &what);
            for (ex, out) in &outs {
                let r = kda::check_pairs(&cp, &d, out, &pairs, scope.clone()).unwrap();
                eprintln!("{what} {ex}: rel {:.2e}", r.max_rel_err);
                assert!(r.passed, "{what} on {ex}, seed {s}: {}", r.detail);
            }
            let ip = in_place_plan(&pb, &d, &pb.spec_with(true, &knobs).unwrap());
            let ins = run_all(&ip, &format!("{what} in place"));
            let (cpu_in, cpu_out) = (&ins[0].1, &outs[0].1);
            assert_eq!(cpu_in.get("state").unwrap().data, cpu_out.get("ht").unwrap().data, "{what}: in-place state");
            assert_eq!(cpu_in.get("o").unwrap().data, cpu_out.get("o").unwrap().data, "{what}: in-place o");
            // The JIT: the plan's one step, from the same poisoned outputs.
            assert_eq!(plan.steps.len(), 1);
            let step = &plan.steps[0];
            jit_matches_interpreter(&plan, step, &what);
        }
    }
}

#[test]
fn decode_continues_a_prefill() {
    // The state after a chunked prefill of T tokens, advanced by one decode step, equals the prefill of T + 1.
    let s = seed();
    let t = 70usize;
    let dims = |t: usize| vec![("B", 1i64), ("T", t as i64), ("H", 1), ("K", 64), ("V", 64), ("safe", 0), ("h0", 1)];
    let full = problem(&dims(t + 1));
    let d = KdaData::generate(&full, s);
    let out_full = Executor::Cpu.run(&kda::chunk_plan(&full, &d, &knobs(64)).unwrap()).unwrap();
    let cut = |x: &HostTensor, lo: usize, hi: usize, width: usize| {
        let b = x.dtype.storage_bytes(1) * width;
        let mut y = x.clone();
        y.shape[0] = hi - lo;
        y.data = x.data[lo * b..hi * b].to_vec();
        y
    };
    let pre = problem(&dims(t));
    let dp = KdaData {
        q: cut(&d.q, 0, t, 64),
        k: cut(&d.k, 0, t, 64),
        v: cut(&d.v, 0, t, 64),
        g: cut(&d.g, 0, t, 64),
        beta: cut(&d.beta, 0, t, 1),
        bias: None,
        a_log: None,
        h0: d.h0.clone(),
    };
    let out_pre = Executor::Cpu.run(&kda::chunk_plan(&pre, &dp, &knobs(64)).unwrap()).unwrap();
    let pb = decode_problem(&[("N", 1), ("T", 1), ("H", 1), ("K", 64), ("V", 64)]);
    let dd = KdaData {
        q: cut(&d.q, t, t + 1, 64),
        k: cut(&d.k, t, t + 1, 64),
        v: cut(&d.v, t, t + 1, 64),
        g: cut(&d.g, t, t + 1, 64),
        beta: cut(&d.beta, t, t + 1, 1),
        bias: None,
        a_log: None,
        h0: Some(out_pre.get("ht").unwrap().clone()),
    };
    let out_dec = Executor::Cpu.run(&decode::decode_plan(&pb, &dd).unwrap()).unwrap();
    let (dec_s, dec_o) = (out_dec.get("ht").unwrap().to_f64_vec(), out_dec.get("o").unwrap().to_f64_vec());
    // Against the f64 recurrence over all T + 1 tokens (SEMANTICS.md section 3: 5e-3 for o and the state) ...
    let truth = k3k_reference::kda::kda_recurrent(&d.pair_inputs(&full, (0, t + 1), 0, 0)).unwrap();
    let (ts, to) = (rel_l2(&dec_s, &truth.final_state), rel_l2(&dec_o, &truth.o[t * 64..]));
    // ... and against the whole prefill, itself within 5e-3 of the truth: two approximations of one value, so
    // within the sum of their tolerances (a one-token o of 64 bf16 values differs by up to ~6e-3 between two
    // correct paths on some seeds: o rounded to bf16 twice, the exact path's XDIAG tiles).
    // The o row is compared on the scale the prefill's own tolerance uses (SEMANTICS.md section 3 takes the
    // relative L2 error over the whole output): the row's difference over the root-mean-square row norm of the
    // whole prefill. Relative to its own norm, one row can be ~1.5e-2 off on the prefill side while the output
    // as a whole is within 5e-3 (seed 8719203468528236522: the row is small against the terms that cancel in it).
    let rs = rel_l2(&dec_s, &out_full.get("ht").unwrap().to_f64_vec());
    let o_full = out_full.get("o").unwrap().to_f64_vec();
    let rms_row = (o_full.iter().map(|x| x * x).sum::<f64>() / (t + 1) as f64).sqrt();
    let diff = dec_o.iter().zip(&o_full[t * 64..]).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
    let ro = diff / rms_row;
    eprintln!(
        "prefill + decode vs f64: state {ts:.2e} o {to:.2e}; vs the whole prefill: state {rs:.2e} o {ro:.2e} (of the rms row)"
    );
    assert!(ts < 5e-3 && to < 5e-3, "prefill + decode vs the f64 recurrence: state {ts} o {to} (seed {s})");
    assert!(rs < 2e-3 && ro < 1e-2, "prefill + decode vs the whole prefill: state {rs} o {ro} (seed {s})");
}

/// A longer sequence at the benchmark head dims (K = V = 128, 16 chunks): the error must not grow along the
/// sequence. `K3K_KDA_LONG=<T>` sets the length (default 1024).
#[test]
fn long_sequence_k128() {
    let t: i64 = std::env::var("K3K_KDA_LONG").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let s = seed();
    for safe in [1, 0] {
        run(&[("B", 1), ("T", t), ("H", 1), ("K", 128), ("V", 128), ("safe", safe)], 64, s);
    }
}

/// The phase-aliased intra-chunk layout (`ARENA=1`: sQ/sOp/sD and sXW/sXU/sLb share one arena, the level
/// operands K-chunked, each T in its X rows) against the f64 reference: edge lengths on both diagonal paths
/// and both chunk sizes, K = V = 128 (the benchmark shape, on 8 and 16 warps), varlen with GVA and h0, extreme
/// gates on the exact path; and its footprint (two blocks per SM at chunk 64, K = V = 128).
#[test]
fn arena_layout_matches_the_reference() {
    let s = seed();
    let a = |chunk: i64| knobs(chunk).with("ARENA", 1i64);
    for safe in [1, 0] {
        for chunk in [64, 32] {
            for t in [1, 15, 17, 63, 65, 130] {
                let dims = [("B", 1), ("T", t), ("H", 1), ("K", 32), ("V", 32), ("safe", safe)];
                run_with(&dims, &a(chunk), s ^ t as u64 ^ 0xa7);
            }
        }
    }
    let big = [("B", 1i64), ("T", 130), ("H", 1), ("K", 128), ("V", 128), ("h0", 1)];
    for (safe, w1, chunk) in [(1i64, 8i64, 64i64), (0, 8, 64), (1, 16, 64), (1, 8, 32)] {
        let mut d = big.to_vec();
        d.push(("safe", safe));
        run_with(&d, &a(chunk).with("W1", w1), s ^ 0xb1 ^ safe as u64 ^ w1 as u64);
    }
    let dims = [("N", 4i64), ("L0", 1), ("L1", 15), ("L2", 0), ("L3", 63), ("H", 2), ("HV", 4), ("K", 64), ("V", 32)];
    for (safe, chunk) in [(1, 64), (0, 32), (0, 64), (1, 32)] {
        let mut d = dims.to_vec();
        d.extend([("safe", safe), ("h0", 1)]);
        run_with(&d, &a(chunk).with("W1", 8i64), s ^ 0xc3 ^ chunk as u64 ^ safe as u64);
    }
    for chunk in [64, 32] {
        let d =
            [("B", 1), ("T", 130), ("H", 1), ("HV", 2), ("K", 64), ("V", 32), ("safe", 0), ("extreme", 1), ("h0", 1)];
        run_with(&d, &a(chunk), s ^ 0xd5 ^ chunk as u64);
    }
    // Footprint at the benchmark shape: <= 113 KB (two blocks in 228 KB with 1 KB reserved each), and the
    // 8-warp kernel asks ptxas for two blocks per SM; the old layout is kept at ARENA=0.
    let pb = problem(&[("B", 1), ("T", 8192), ("H", 96), ("K", 128), ("V", 128), ("safe", 1)]);
    for (w1, chunk) in [(8i64, 64i64), (16, 64), (8, 32)] {
        let l = kda::Launch::resolve(&a(chunk).with("W1", w1), &pb).unwrap();
        let (k1, _) = kda::chunk_kernels(&pb, &l).unwrap();
        eprintln!("{}: {} shared bytes, min blocks {}", k1.name, k1.shared_bytes(), k1.min_blocks_per_sm);
        assert!(k1.shared_bytes() <= 113 * 1024, "{}: {}", k1.name, k1.shared_bytes());
        assert_eq!(k1.min_blocks_per_sm, if w1 <= 8 { 2 } else { 0 });
        let old = kda::Launch::resolve(&a(chunk).with("W1", w1).with("ARENA", 0i64), &pb).unwrap();
        let (k0, _) = kda::chunk_kernels(&pb, &old).unwrap();
        assert!(k0.shared_bytes() > k1.shared_bytes() && k0.min_blocks_per_sm == 0, "{}", k0.name);
    }
    // (ARENA=2 is the chunk-32 slim layout, see `slim_intra_layout`; at chunk 64 it means ARENA=0.)
    assert!(kda::Launch::resolve(&a(64).with("ARENA", 3i64), &pb).is_err());
}

/// The exact path's adaptive diagonal (`XDIAG=1`): chunks whose gates keep every |G~_r - G~_anchor| within the
/// bound take the midpoint-anchored tiles (the outputs then differ from the hierarchy's in the last bits, and
/// both match the f64 recurrence); chunks with gates of -1000 fall back to the hierarchy, bit for bit the same
/// kernel arithmetic as `XDIAG=0` with the same (bf16) tile operands; a mix of both in one problem passes too.
#[test]
fn exact_adaptive_diagonal() {
    let s = seed();
    let def = kda::default_knobs();
    let hier = def.clone().with("XDIAG", 0i64).with("LVLDT", "bf16");
    let adapt = def.clone().with("XDIAG", 1i64);
    let outputs = |pb: &KdaProblem, d: &KdaData, k: &Knobs| -> Outputs {
        let plan = kda::chunk_plan(pb, d, k).unwrap();
        let out = Executor::Cpu.run(&plan).unwrap();
        let (pairs, scope) = kda::check_scope(pb, s);
        let r = kda::check_pairs(pb, d, &out, &pairs, scope).unwrap();
        eprintln!("{} [{k}]: rel {:.3e}", pb.hv, r.max_rel_err);
        assert!(r.passed, "[{k}] seed {s}: {} (rel {:.3e})", r.detail, r.max_rel_err);
        out
    };
    let same = |a: &Outputs, b: &Outputs| ["o", "ht"].iter().all(|n| a.get(n).unwrap().data == b.get(n).unwrap().data);
    for chunk in [32i64, 64] {
        let (h, a) = (hier.clone().with("CHUNK", chunk), adapt.clone().with("CHUNK", chunk));
        // Ordinary gates: every chunk within the bound.
        let dims = [("B", 1i64), ("T", 130), ("H", 1), ("HV", 2), ("K", 64), ("V", 32), ("safe", 0), ("h0", 1)];
        let pb = problem(&dims);
        let d = KdaData::generate(&pb, s ^ chunk as u64);
        assert!(!same(&outputs(&pb, &d, &h), &outputs(&pb, &d, &a)), "chunk {chunk}: the midpoint tiles never ran");
        // One gate of -1000 in the middle of a tile (row 37, value head 1): that chunk falls back, the others
        // keep the midpoint tiles.
        let mut dm = d.clone();
        dm.g.set_f32((37 * pb.hv + 1) * pb.dk + 5, -1000.0);
        outputs(&pb, &dm, &a);
        outputs(&pb, &dm, &h);
        // About 2% of the gates at -1000: every chunk of 32 or 64 full rows falls back (T = 128).
        let mut e = dims.to_vec();
        e[1] = ("T", 128);
        e.push(("extreme", 1));
        let pe = problem(&e);
        let de = KdaData::generate(&pe, s ^ 0x5e ^ chunk as u64);
        assert!(
            same(&outputs(&pe, &de, &h), &outputs(&pe, &de, &a)),
            "chunk {chunk}: the fallback is not the hierarchy"
        );
    }
    let pb = problem(&[("B", 1), ("T", 8), ("H", 1), ("K", 32), ("safe", 0)]);
    assert!(kda::Launch::resolve(&def.clone().with("XDIAG", 2i64), &pb).is_err());
    // A knob set from before XDIAG existed means the hierarchy.
    let mut old = def.clone();
    old.0.remove("XDIAG");
    assert!(!kda::Launch::resolve(&old, &pb).unwrap().xdiag);
    assert!(kda::Launch::resolve(&def, &pb).unwrap().xdiag);
}

/// `ODIAG=1` (chunk 32, safe path and the exact path's XDIAG chunks: the off-diagonal tile from the
/// midpoint-anchored operands, no level pass) against `ODIAG=0` and the f64 recurrence: ragged chunks (1, 15,
/// 16, 17, 31 valid rows: tile 1 empty, one row, full), K = V = 128, the in-kernel options (L2 norm factors in
/// the extra key operand, the safe gate form with a bias, beta sigmoid), GVA, varlen, h0; exact-path chunks
/// within and past the XDIAG bound (gates of -1000) alone and mixed; it applies only where documented.
#[test]
fn midpoint_off_diagonal() {
    let s = seed();
    let def = kda::default_knobs().with("CHUNK", 32i64);
    for (i, k) in [def.clone().with("ODIAG", 1i64), def.clone().with("ODIAG", 0i64)].iter().enumerate() {
        for t in [1i64, 15, 16, 17, 31, 32, 33, 95] {
            let d = [("B", 1), ("T", t), ("H", 1), ("K", 32), ("V", 32), ("safe", 1), ("h0", 1)];
            run_with(&d, k, s ^ 0xf1 ^ t as u64 ^ i as u64);
        }
        let big = [("B", 1i64), ("T", 75), ("H", 1), ("HV", 2), ("K", 128), ("V", 128), ("safe", 1), ("h0", 1)];
        run_with(&big, k, s ^ 0xf2 ^ i as u64);
        let opts = [
            ("N", 3i64),
            ("L0", 17),
            ("L1", 1),
            ("L2", 63),
            ("H", 2),
            ("HV", 4),
            ("K", 64),
            ("V", 32),
            ("safe", 1),
            ("gate", 1),
            ("bias", 1),
            ("l2norm", 1),
            ("bsig", 1),
            ("h0", 1),
        ];
        run_with(&opts, k, s ^ 0xf3 ^ i as u64);
        // The exact path's XDIAG chunks: within the bound (midpoint tiles and this off-diagonal), past it (gates
        // of -1000: the hierarchy and the level pass), and both in one problem.
        for t in [15i64, 17, 32, 95] {
            let d = [("B", 1), ("T", t), ("H", 1), ("HV", 2), ("K", 32), ("V", 32), ("safe", 0), ("h0", 1)];
            run_with(&d, k, s ^ 0xf4 ^ t as u64 ^ i as u64);
        }
        let ext = [("B", 1), ("T", 130), ("H", 1), ("HV", 2), ("K", 64), ("V", 32), ("safe", 0), ("extreme", 1)];
        run_with(&ext, k, s ^ 0xf5 ^ i as u64);
        let pe = problem(&[("B", 1), ("T", 96), ("H", 1), ("K", 64), ("V", 64), ("safe", 0), ("h0", 1)]);
        let mut de = KdaData::generate(&pe, s ^ 0xf6 ^ i as u64);
        de.g.set_f32(40 * 64 + 3, -1000.0);
        let plan = kda::chunk_plan(&pe, &de, k).unwrap();
        let out = Executor::Cpu.run(&plan).unwrap();
        let (pairs, scope) = kda::check_scope(&pe, s);
        let r = kda::check_pairs(&pe, &de, &out, &pairs, scope).unwrap();
        assert!(r.passed, "[{k}] seed {s}: one -1000 gate in chunk 1: {} (rel {:.3e})", r.detail, r.max_rel_err);
    }
    // Where it applies: safe path, chunk 32, separate buffers; the kernel name says so.
    let pb = problem(&[("B", 1), ("T", 64), ("H", 1), ("K", 128), ("V", 128), ("safe", 1)]);
    let on = kda::Launch::resolve(&def, &pb).unwrap();
    assert!(on.midoff, "{on:?}");
    // The default ARENA=2 adds the slim layout's suffix; ARENA=0 is the plain separate-buffer kernel (both then
    // `_gp`: the default GSWZ=pairs).
    assert!(kda::chunk_kernels(&pb, &on).unwrap().0.name.contains("_mo_sl"));
    let plain = kda::Launch::resolve(&def.clone().with("ARENA", 0i64), &pb).unwrap();
    assert!(kda::chunk_kernels(&pb, &plain).unwrap().0.name.contains("_mo_gp"));
    assert!(!kda::Launch::resolve(&def.clone().with("CHUNK", 64i64), &pb).unwrap().midoff);
    assert!(!kda::Launch::resolve(&def.clone().with("ARENA", 1i64), &pb).unwrap().midoff);
    let exact = problem(&[("B", 1), ("T", 64), ("H", 1), ("K", 128), ("V", 128), ("safe", 0)]);
    assert!(kda::Launch::resolve(&def, &exact).unwrap().midoff);
    assert!(!kda::Launch::resolve(&def.clone().with("XDIAG", 0i64), &exact).unwrap().midoff);
    let mut old = def.clone();
    old.0.remove("ODIAG");
    assert!(!kda::Launch::resolve(&old, &pb).unwrap().midoff);
    assert!(kda::Launch::resolve(&def.clone().with("ODIAG", 2i64), &pb).is_err());
}

/// `EX2` (the intra kernel's 2^x as one `ex2.approx.ftz` or as `exp2f`) and `SYNC` (two or four barriers per
/// state-pass chunk, rings of 2 and 3 stages) against the f64 recurrence: both diagonal paths, chunk 64 and 32,
/// GVA, varlen with sequences of 1, 15, 63 tokens (and an empty one), an initial state, gates of -1000 on the
/// exact path (where 2^x underflows: flushed and exact must both give 0 there), K = V = 128 over several chunks
/// so every ring slot is used and reused. Knob sets from before the knobs existed mean `exp2f` and four
/// barriers; `SYNC` has no effect on the single-buffer pass. (The CPU backends run the block's warps in step,
/// so they cannot see a missing barrier: `SYNC=2` is the same arithmetic as `SYNC=4` and must give the same
/// bits here; its barrier placement is argued in `state.rs` and checked on the GPU by `k3k check --backend
/// cuda` and `K3K_GPU=1`.)
#[test]
fn ex2_and_sync_knobs() {
    let s = seed();
    let def = kda::default_knobs();
    let sets = |chunk: i64| -> Vec<Knobs> {
        let k = def.clone().with("CHUNK", chunk);
        vec![
            k.clone().with("EX2", "ftz").with("SYNC", 2i64).with("STAGES", 3i64),
            k.clone().with("EX2", "ftz").with("SYNC", 2i64).with("STAGES", 2i64),
            k.clone().with("EX2", "exact").with("SYNC", 4i64).with("STAGES", 3i64),
            k.clone().with("EX2", "exact").with("SYNC", 2i64).with("STAGES", 2i64),
            k.clone().with("EX2", "ftz").with("SYNC", 4i64).with("STAGES", 2i64).with("ODIAG", 0i64),
            k.with("EX2", "ftz").with("SYNC", 2i64).with("STAGES", 1i64),
        ]
    };
    let varlen = [("N", 4i64), ("L0", 1), ("L1", 15), ("L2", 0), ("L3", 63), ("H", 2), ("HV", 4), ("K", 32), ("V", 32)];
    for (safe, chunk) in [(1i64, 64i64), (0, 32), (0, 64), (1, 32)] {
        for (i, k) in sets(chunk).iter().enumerate() {
            let mut d = varlen.to_vec();
            d.extend([("safe", safe), ("h0", 1)]);
            run_with(&d, &k.clone().with("BV", 16i64).with("W2", 4i64), s ^ 0xe1 ^ (chunk << 4) as u64 ^ i as u64);
        }
    }
    for chunk in [64i64, 32] {
        let d =
            [("B", 1), ("T", 130), ("H", 1), ("HV", 2), ("K", 64), ("V", 32), ("safe", 0), ("extreme", 1), ("h0", 1)];
        for k in sets(chunk) {
            run_with(&d, &k, s ^ 0xe2 ^ chunk as u64);
        }
    }
    // The benchmark shape over 5 chunks of 32 (3 chunks of 64): 32 x 4 state-pass blocks as at H32.
    let big = [("B", 1i64), ("T", 150), ("H", 1), ("K", 128), ("V", 128), ("h0", 1)];
    for (safe, chunk) in [(1i64, 32i64), (0, 32), (1, 64)] {
        let mut d = big.to_vec();
        d.push(("safe", safe));
        for k in [&sets(chunk)[0], &sets(chunk)[2]] {
            run_with(&d, &k.clone().with("BV", 32i64).with("W2", 4i64), s ^ 0xe3 ^ safe as u64 ^ chunk as u64);
        }
    }
    // SYNC changes no arithmetic: the same bits on the interpreter; EX2 changes only results below 2^-126.
    let pb = problem(&[("B", 1), ("T", 100), ("H", 1), ("HV", 2), ("K", 32), ("V", 32), ("safe", 1), ("h0", 1)]);
    let d = KdaData::generate(&pb, s ^ 0xe4);
    let run_cpu = |k: &Knobs| Executor::Cpu.run(&kda::chunk_plan(&pb, &d, k).unwrap()).unwrap();
    let base = def.clone().with("CHUNK", 32i64).with("STAGES", 3i64);
    let (a, b) = (run_cpu(&base.clone().with("SYNC", 2i64)), run_cpu(&base.clone().with("SYNC", 4i64)));
    for n in ["o", "ht"] {
        assert_eq!(a.get(n).unwrap().data, b.get(n).unwrap().data, "{n}: SYNC=2 and SYNC=4 differ");
    }
    // Resolution: defaults ftz and two barriers; missing knobs mean the old kernels; bad values are refused;
    // the kernel names tell the variants apart (they are cache keys).
    let l = kda::Launch::resolve(&base, &pb).unwrap();
    assert!(l.ex2_ftz && l.two_bars, "{l:?}");
    let mut old = base.clone();
    old.0.remove("EX2");
    old.0.remove("SYNC");
    let lo = kda::Launch::resolve(&old, &pb).unwrap();
    assert!(!lo.ex2_ftz && !lo.two_bars, "{lo:?}");
    assert!(!kda::Launch::resolve(&base.clone().with("STAGES", 1i64), &pb).unwrap().two_bars);
    assert!(kda::Launch::resolve(&base.clone().with("SYNC", 3i64), &pb).is_err());
    assert!(kda::Launch::resolve(&base.clone().with("EX2", "fast"), &pb).is_err());
    let (i1, st1) = kda::chunk_kernels(&pb, &l).unwrap();
    let (i0, st0) = kda::chunk_kernels(&pb, &lo).unwrap();
    assert_ne!(i1.name, i0.name);
    assert_ne!(st1.name, st0.name);
    // Barriers in the state kernel's chunk loop: 2 against 4.
    let bars = |k: &k3k_ir::Kernel| format!("{k:?}").matches("Barrier").count();
    assert_eq!(bars(&st0) - bars(&st1), 2, "{} vs {}", st0.name, st1.name);
}

/// `ARENA=2` (safe path, chunk 32, ODIAG=1: the separate-buffer kernel with sQ/sOp and sV/sXW/sTW/sXU/sTU/sLb
/// in one 40 KB region, v loaded after the diagonal pass; 71 KB, three blocks per SM) against the f64
/// recurrence and bit for bit against `ARENA=0` (the same arithmetic; the CPU backends poison a region buffer's
/// partners on its first write, so a read across the phases would fail): ragged chunks (1 .. 33, 95 tokens),
/// K = V = 128 on 8 and 4 warps, varlen with an empty sequence, GVA, the in-kernel options (gate form with a
/// bias, L2 norm, beta sigmoid), with and without h0; and where the layout applies.
#[test]
fn slim_intra_layout() {
    let s = seed();
    let slim = kda::default_knobs().with("CHUNK", 32i64).with("ARENA", 2i64).with("W1", 8i64);
    for t in [1i64, 15, 16, 17, 31, 32, 33, 95] {
        let d = [("B", 1), ("T", t), ("H", 1), ("K", 32), ("V", 32), ("safe", 1), ("h0", 1)];
        run_with(&d, &slim, s ^ 0x51 ^ t as u64);
    }
    for (w1, t) in [(8i64, 75i64), (4, 70)] {
        let big = [("B", 1i64), ("T", t), ("H", 1), ("HV", 2), ("K", 128), ("V", 128), ("safe", 1), ("h0", 1)];
        run_with(&big, &slim.clone().with("W1", w1), s ^ 0x52 ^ w1 as u64);
    }
    let opts = [
        ("N", 4i64),
        ("L0", 17),
        ("L1", 1),
        ("L2", 0),
        ("L3", 63),
        ("H", 2),
        ("HV", 4),
        ("K", 64),
        ("V", 32),
        ("safe", 1),
        ("gate", 1),
        ("bias", 1),
        ("l2norm", 1),
        ("bsig", 1),
        ("h0", 1),
    ];
    run_with(&opts, &slim, s ^ 0x53);
    let no_h0 =
        [("N", 3i64), ("L0", 33), ("L1", 15), ("L2", 64), ("H", 1), ("HV", 2), ("K", 128), ("V", 64), ("safe", 1)];
    run_with(&no_h0, &slim, s ^ 0x54);
    // V > K: the phase-B buffers do not fit the region; ARENA=2 means the separate buffers there.
    run_with(&[("B", 1), ("T", 40), ("H", 1), ("K", 32), ("V", 64), ("safe", 1)], &slim, s ^ 0x56);
    // The same bits as the separate buffers (o and the final state).
    let pb = problem(&[("B", 1), ("T", 77), ("H", 1), ("HV", 2), ("K", 128), ("V", 128), ("safe", 1), ("h0", 1)]);
    let d = KdaData::generate(&pb, s ^ 0x55);
    let run_cpu = |k: &Knobs| Executor::Cpu.run(&kda::chunk_plan(&pb, &d, k).unwrap()).unwrap();
    let (a, b) = (run_cpu(&slim), run_cpu(&slim.clone().with("ARENA", 0i64)));
    for n in ["o", "ht"] {
        assert_eq!(a.get(n).unwrap().data, b.get(n).unwrap().data, "{n}: ARENA=2 and ARENA=0 differ");
    }
    // The Cranelift JIT runs the slim intra kernel bit for bit like the interpreter (from poisoned scratch).
    let plan = kda::chunk_plan(&pb, &d, &slim).unwrap();
    let step = plan.steps.iter().find(|st| st.kernel.name.contains("_sl")).expect("the slim intra step");
    jit_matches_interpreter(&plan, step, &step.kernel.name);
    // Footprint at the benchmark shape: three blocks per SM (<= 75 KB each with 1 KB reserved), asked of ptxas.
    let pb = problem(&[("B", 1), ("T", 8192), ("H", 96), ("K", 128), ("V", 128), ("safe", 1)]);
    let l = kda::Launch::resolve(&slim, &pb).unwrap();
    assert!(l.slim && l.midoff && !l.arena, "{l:?}");
    let (k1, _) = kda::chunk_kernels(&pb, &l).unwrap();
    eprintln!("{}: {} shared bytes, min blocks {}", k1.name, k1.shared_bytes(), k1.min_blocks_per_sm);
    assert!(k1.shared_bytes() <= 75 * 1024, "{}: {}", k1.name, k1.shared_bytes());
    assert_eq!(k1.min_blocks_per_sm, 3);
    assert!(k1.name.contains("_mo_sl"), "{}", k1.name);
    let l0 = kda::Launch::resolve(&slim.clone().with("ARENA", 0i64), &pb).unwrap();
    let (k0, _) = kda::chunk_kernels(&pb, &l0).unwrap();
    assert!(!l0.slim && k0.shared_bytes() > 100 * 1024, "{}: {}", k0.name, k0.shared_bytes());
    // Where it applies: not on the exact path, at chunk 64, with ODIAG=0 or on 16 warps (there: ARENA=0).
    let exact = problem(&[("B", 1), ("T", 64), ("H", 1), ("K", 128), ("V", 128), ("safe", 0)]);
    for (k, p) in [
        (slim.clone(), &exact),
        (slim.clone().with("CHUNK", 64i64), &pb),
        (slim.clone().with("ODIAG", 0i64), &pb),
        (slim.clone().with("W1", 16i64), &pb),
        (slim.clone(), &problem(&[("B", 1), ("T", 40), ("H", 1), ("K", 32), ("V", 64), ("safe", 1)])),
    ] {
        let l = kda::Launch::resolve(&k, p).unwrap();
        let l0 = kda::Launch::resolve(&k.clone().with("ARENA", 0i64), p).unwrap();
        assert!(!l.slim && l == l0, "[{k}] {l:?}");
    }
    assert!(kda::Launch::resolve(&slim.clone().with("ARENA", 3i64), &pb).is_err());
}

// ------------------------------------------------------------------------------------------------------------
// TSPLIT: the chunk sequence cut along time into parts (intra(p) on the main stream, state(p) on the side stream).

/// Varlen sequences 1, 15, 200, 63, 0 and 130 tokens (16 chunks of 32: 1 + 1 + 7 + 2 + 0 + 5), GVA HV = 2H: at
/// TSPLIT=4 the first two sequences have no chunk in parts 1-3, the 200-token one spans three parts, the last two.
fn split_varlen(h0: i64, safe: i64) -> Vec<(&'static str, i64)> {
    vec![
        ("N", 6),
        ("L0", 1),
        ("L1", 15),
        ("L2", 200),
        ("L3", 63),
        ("L4", 0),
        ("L5", 130),
        ("H", 2),
        ("HV", 4),
        ("K", 32),
        ("V", 32),
        ("h0", h0),
        ("safe", safe),
    ]
}

#[test]
fn tsplit_matches_reference() {
    let s = seed();
    for p in [2i64, 4, 8] {
        let kn = knobs(32).with("TSPLIT", p);
        // T not a multiple of the chunk (5 and 4 chunks: TSPLIT=8 clamps), with and without h0, both paths.
        run_with(&[("B", 1), ("T", 130), ("H", 1), ("K", 32), ("V", 32), ("safe", 1)], &kn, s ^ p as u64);
        run_with(&[("B", 2), ("T", 100), ("H", 1), ("K", 32), ("V", 64), ("safe", 0), ("h0", 1)], &kn, s ^ 7);
        for h0 in [0, 1] {
            run_with(&split_varlen(h0, 1), &kn, s ^ (p as u64 * 11 + h0 as u64));
            run_with(&split_varlen(h0, 0), &kn.clone().with("CHUNK", 64i64), s ^ (p as u64 * 13 + h0 as u64));
        }
    }
    // K = V = 128 at the default chunk (32) with the 3-stage ring of the one-block-per-SM grids.
    let big = [("B", 1i64), ("T", 140), ("H", 1), ("K", 128), ("V", 128), ("safe", 1)];
    run_with(&big, &kda::default_knobs().with("TSPLIT", 4i64).with("STAGES", 3i64), s ^ 99);
    // The operator's random cases (what `k3k check --op kda --knobs TSPLIT=4` draws).
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(s);
    let op = kda::Kda;
    for _ in 0..6 {
        let p = op.random_case(&mut rng);
        let inst = op.instance(&p, s).unwrap();
        for (ex, out) in run_all(&inst.plan(&kda::default_knobs().with("TSPLIT", 4i64)).unwrap(), &inst.describe()) {
            let r = inst.check(&out).unwrap();
            assert!(r.passed, "{} TSPLIT=4 on {ex} (seed {s}): {}", inst.describe(), r.detail);
        }
    }
}

#[test]
fn tsplit_is_bit_identical_to_one_part() {
    // Each chunk step does the arithmetic of the one-part plan in the same order (the state pass is sequential per
    // sequence; a part boundary only stores the f32 state and loads it back), so o and ht are the same bits: on the
    // interpreter at TSPLIT = 2, 4, 8 and on the JIT at TSPLIT = 4.
    let s = seed();
    for (h0, safe) in [(0, 1), (1, 1), (1, 0)] {
        let pb = problem(&split_varlen(h0, safe));
        let d = KdaData::generate(&pb, s ^ h0 as u64);
        let one = Executor::Cpu.run(&kda::chunk_plan(&pb, &d, &knobs(32)).unwrap()).unwrap();
        for p in [2i64, 4, 8] {
            let plan = kda::chunk_plan(&pb, &d, &knobs(32).with("TSPLIT", p)).unwrap();
            assert_eq!(plan.steps.len(), 2 * p as usize, "TSPLIT={p}: one intra and one state step per part");
            let split = Executor::Cpu.run(&plan).unwrap();
            for name in ["o", "ht"] {
                assert_eq!(
                    one.get(name).unwrap().data,
                    split.get(name).unwrap().data,
                    "h0={h0} safe={safe} TSPLIT={p}: {name} differs from the one-part plan (seed {s})"
                );
            }
            if p == 4 {
                let jit = run_plan_jit(&plan);
                for name in ["o", "ht"] {
                    assert_eq!(one.get(name).unwrap().data, jit.get(name).unwrap().data, "JIT TSPLIT=4: {name}");
                }
            }
        }
    }
}

#[test]
fn tsplit_plan_structure() {
    use k3k_ops::plan::{Role, Sched};
    let pb = problem(&split_varlen(0, 1));
    let d = KdaData::generate(&pb, 5);
    let one = kda::chunk_plan(&pb, &d, &knobs(32)).unwrap();
    assert!(one.schedule.is_empty() && !one.uses_side_stream(), "TSPLIT=1 is the one-stream plan");
    assert_eq!(one.steps.len(), 2);
    // The default knobs and TSPLIT=1 are the same plan (same kernels, buffers and steps).
    let def = kda::chunk_plan(&pb, &d, &knobs(32).with("TSPLIT", 1i64)).unwrap();
    assert_eq!(
        def.steps.iter().map(|s| &s.kernel.name).collect::<Vec<_>>(),
        one.steps.iter().map(|s| &s.kernel.name).collect::<Vec<_>>()
    );
    assert_eq!(
        def.steps.iter().map(|s| s.args.clone()).collect::<Vec<_>>(),
        one.steps.iter().map(|s| s.args.clone()).collect::<Vec<_>>()
    );
    let plan = kda::chunk_plan(&pb, &d, &knobs(32).with("TSPLIT", 4i64)).unwrap();
    plan.check_schedule().unwrap();
    assert!(plan.uses_side_stream());
    assert_eq!(plan.steps.len(), 8);
    for p in 0..4 {
        let (i, s) = (2 * p, 2 * p + 1);
        assert_eq!(plan.sched(i), Sched { stream: 0, waits: vec![] }, "intra({p})");
        assert_eq!(plan.sched(s), Sched { stream: 1, waits: vec![i] }, "state({p})");
        assert!(plan.steps[i].kernel.name.starts_with("k3k_kda_intra"), "{}", plan.steps[i].kernel.name);
        let name = &plan.steps[s].kernel.name;
        assert!(name.starts_with("k3k_kda_state"), "{name}");
        assert_eq!(name.contains("_h0"), p > 0, "state({p}) {name}: parts after the first start from a given state");
        let bname = |j: usize| plan.buffers[*plan.steps[s].args.get(j).unwrap()].name.clone();
        let args: Vec<String> = (0..plan.steps[s].args.len()).map(bname).collect();
        let out_state = args.last().unwrap();
        assert_eq!(out_state, &if p == 3 { "ht".to_string() } else { format!("h@{p}") }, "{args:?}");
        if p > 0 {
            assert!(args.contains(&format!("h@{}", p - 1)), "state({p}) reads the previous part's state: {args:?}");
        }
    }
    // The part tables: 16 chunks in four parts of four; each sequence's chunks inside the part.
    let ctab = |p: usize| plan.buffers[plan.index(&format!("ctab@{p}")).unwrap()].tensor.to_f64_vec();
    let stab = |p: usize| plan.buffers[plan.index(&format!("stab@{p}")).unwrap()].tensor.to_f64_vec();
    assert_eq!(ctab(0), vec![0.0, 1.0, 1.0, 15.0, 16.0, 32.0, 48.0, 32.0]);
    assert_eq!(stab(0), vec![0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(stab(1), vec![0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(stab(2), vec![0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 2.0, 0.0, 0.0, 3.0, 1.0]);
    assert_eq!(stab(3), vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0]);
    assert_eq!(ctab(3)[0], (1 + 15 + 200 + 63 + 32) as f64, "absolute token rows");
    // Scratch grows only by the P - 1 intermediate states.
    let scratch = |pl: &Plan| -> usize {
        pl.buffers.iter().filter(|b| b.role == Role::Scratch).map(|b| b.tensor.data.len()).sum()
    };
    assert_eq!(scratch(&plan), scratch(&one) + 3 * 6 * 4 * 32 * 32 * 4);
    // P larger than the chunk count clamps; one chunk is the one-part plan.
    let short = problem(&[("B", 1), ("T", 40), ("H", 1), ("K", 32), ("V", 32)]);
    let ds = KdaData::generate(&short, 1);
    assert_eq!(kda::chunk_plan(&short, &ds, &knobs(32).with("TSPLIT", 8i64)).unwrap().steps.len(), 4);
    let tiny = problem(&[("B", 1), ("T", 17), ("H", 1), ("K", 32), ("V", 32)]);
    let dt = KdaData::generate(&tiny, 1);
    let p1 = kda::chunk_plan(&tiny, &dt, &knobs(32).with("TSPLIT", 8i64)).unwrap();
    assert!(p1.steps.len() == 2 && p1.schedule.is_empty());
    assert_eq!(kda::time_parts(0, 4), vec![]);
    assert_eq!(kda::time_parts(10, 4), vec![(0, 2), (2, 5), (5, 7), (7, 10)]);
    // TSPLIT=0 is the automatic choice: one part for a short problem, and for many (sequence, head) pairs.
    let auto = kda::chunk_plan(&pb, &d, &knobs(32).with("TSPLIT", 0i64)).unwrap();
    assert_eq!(auto.steps.len(), one.steps.len());
    let long = |b: i64, t: i64, h: i64| problem(&[("B", b), ("T", t), ("H", h), ("K", 128), ("V", 128)]);
    // The anchor presets (SEMANTICS.md section 4) at chunk 32 (K = V = 128): one part per 128 chunks, a power of two, at most 8.
    assert_eq!(kda::auto_tsplit(&long(1, 65536, 32), 32), 8, "2048 chunks clamp to 8 parts");
    assert_eq!(kda::auto_tsplit(&long(1, 16384, 32), 32), 4, "512 chunks");
    assert_eq!(kda::auto_tsplit(&long(1, 12288, 32), 32), 2, "384 chunks: 3 parts round down to 2");
    assert_eq!(kda::auto_tsplit(&long(1, 4096, 32), 32), 1, "128 chunks");
    assert_eq!(kda::auto_tsplit(&long(1, 8192, 96), 32), 1, "96 pairs: the intra kernel is the long pole");
    assert_eq!(kda::auto_tsplit(&long(4, 4096, 64), 32), 1, "256 pairs");
    assert_eq!(kda::auto_tsplit(&long(4, 16384, 8), 32), 8, "32 pairs over 2048 chunks");
    // Knob values outside the list are refused.
    for bad in [3i64, 32] {
        let e = kda::chunk_plan(&pb, &d, &knobs(32).with("TSPLIT", bad)).unwrap_err();
        assert!(matches!(e, OpError::InvalidKnobs { .. }) && e.to_string().contains("TSPLIT"), "{e}");
    }
    // The schedule check: a missing wait leaves state(1) reading wu@1 while intra(1) may still write it.
    let mut broken = plan.clone();
    broken.schedule[3].waits.clear();
    let e = broken.check_schedule().unwrap_err();
    assert!(matches!(e, OpError::Schedule { step: 3, .. }) && e.to_string().contains("wu@1"), "{e}");
    assert!(Executor::Cpu.run(&broken).is_err(), "the CPU executor checks the schedule too");
    let mut later = plan.clone();
    later.schedule[1].waits = vec![2];
    assert!(matches!(later.check_schedule(), Err(OpError::Schedule { step: 1, .. })));
    let mut stream2 = plan.clone();
    stream2.schedule[1].stream = 2;
    assert!(matches!(stream2.check_schedule(), Err(OpError::Schedule { step: 1, .. })));
    let mut short_sched = plan.clone();
    short_sched.schedule.pop();
    assert!(short_sched.check_schedule().is_err());
    // All on one stream: ordered by the stream whatever the waits.
    let mut serial = plan.clone();
    serial.schedule.iter_mut().for_each(|s| *s = Sched::default());
    serial.check_schedule().unwrap();
}

/// `SGRID=vb` (the state pass's value blocks consecutive) only renumbers the blocks: o and ht are the same bits as
/// with the default order (varlen with an empty sequence, h0, four value blocks of 16 columns), and it passes the
/// reference; the kernels differ in their grid and name. `BV=128` (one block per pair, accepted beyond the tuning
/// space) passes the reference too, given on the command line's path (`checked_knobs`).
#[test]
fn kda_state_grid_orders_are_bit_identical() {
    let s = seed();
    let pb = problem(&split_varlen(1, 1));
    let d = KdaData::generate(&pb, s);
    let base = knobs(32).with("BV", 16i64).with("W2", 4i64).with(kda::SGRID_KNOB, "seqs");
    let vb = base.clone().with(kda::SGRID_KNOB, "vb");
    // An absent SGRID is the vb order.
    let absent = Knobs(
        base.0.iter().filter(|(k, _)| k.as_str() != kda::SGRID_KNOB).map(|(k, v)| (k.clone(), v.clone())).collect(),
    );
    assert_eq!(kda::Launch::resolve(&absent, &pb).unwrap(), kda::Launch::resolve(&vb, &pb).unwrap());
    let one = Executor::Cpu.run(&kda::chunk_plan(&pb, &d, &base).unwrap()).unwrap();
    let other = Executor::Cpu.run(&kda::chunk_plan(&pb, &d, &vb).unwrap()).unwrap();
    for name in ["o", "ht"] {
        assert_eq!(one.get(name).unwrap().data, other.get(name).unwrap().data, "SGRID=vb: {name} (seed {s})");
    }
    run_with(&split_varlen(1, 1), &vb, s ^ 5);
    let (_, k_seqs) = kda::chunk_kernels(&pb, &kda::Launch::resolve(&base, &pb).unwrap()).unwrap();
    let (_, k_vb) = kda::chunk_kernels(&pb, &kda::Launch::resolve(&vb, &pb).unwrap()).unwrap();
    assert!(k_vb.name.ends_with("_gv") && !k_seqs.name.ends_with("_gv"), "{} / {}", k_seqs.name, k_vb.name);
    assert_eq!(k_seqs.grid[0], k_vb.grid[1], "the sequences move from x to y");
    assert_ne!(k_seqs.grid, k_vb.grid);
    // BV=128 with 16 warps, as `k3k bench --knobs BV=128,W2=16` gives it.
    let given = Knobs::new().with("BV", 128i64).with("W2", 16i64).with(kda::SGRID_KNOB, "vb");
    let checked = kda::Kda.checked_knobs().check(&given, &kda::default_knobs()).unwrap();
    let mut wide = kda::default_knobs();
    for (k, v) in checked.0 {
        wide.set(&k, v);
    }
    run_with(&[("N", 2), ("L0", 40), ("L1", 33), ("H", 1), ("K", 128), ("V", 128), ("safe", 1), ("h0", 1)], &wide, s);
    assert!(
        kda::Kda.checked_knobs().check(&Knobs::new().with(kda::SGRID_KNOB, "rows"), &kda::default_knobs()).is_err()
    );
}

/// `USTATE=1` (issue 42: U = (I + L)^-1 Diag(beta) v formed in the state pass from v and the factors the intra kernel
/// writes instead of U) against the f64 recurrence, and bit for bit against the default (the same substitution with
/// the same operands, K and order): varlen with a partial and an empty sequence, h0, GVA, both paths, chunk 32 and
/// 64, the intra layouts (ARENA=0/1/2), the state pass's rings (STAGES=1/2/3, SYNC=4 and 2) and TSPLIT; K = V = 128 at
/// the FlashKDA presets' knobs and smaller head dims.
#[test]
fn ustate_matches_reference_and_the_default_bit_for_bit() {
    let s = seed();
    let us = |k: &Knobs| k.clone().with(kda::USTATE_KNOB, 1i64);
    // FlashKDA's options with the f32 raw gate (the state pass does not read the gate).
    let fk_f32 = || kda::FLASHKDA_OPTIONS.into_iter().filter(|(k, _)| *k != "gbf16");
    let presets_like: Vec<(&str, i64)> =
        [("N", 3i64), ("L0", 70), ("L1", 0), ("L2", 33), ("H", 1), ("HV", 2)].into_iter().chain(fk_f32()).collect();
    let mut cases: Vec<(Vec<(&str, i64)>, Knobs)> = vec![
        (presets_like.to_vec(), kda::default_knobs()),
        (presets_like.to_vec(), kda::default_knobs().with("BV", 64i64).with("W2", 8i64).with("STAGES", 2i64)),
        (presets_like.to_vec(), kda::default_knobs().with("TSPLIT", 2i64).with("STAGES", 3i64)),
        (presets_like.to_vec(), kda::default_knobs().with("BV", 128i64).with("W2", 16i64)),
        (varlen_mix(1, 32, 32), knobs(32)),
        (varlen_mix(0, 32, 32), knobs(32)),
        (varlen_mix(1, 64, 32), knobs(64)),
        (varlen_mix(0, 32, 64), knobs(64).with("STAGES", 1i64)),
        (varlen_mix(1, 64, 64), knobs(32).with("ARENA", 1i64).with("STAGES", 2i64).with("SYNC", 4i64)),
        (varlen_mix(0, 64, 64), knobs(32).with("ARENA", 0i64).with("STAGES", 3i64)),
        (varlen_mix(1, 32, 32), knobs(64).with("ARENA", 1i64).with("TSPLIT", 4i64)),
    ];
    // An extreme-gate exact case (the hierarchy's chunks) at chunk 32.
    cases.push((
        vec![("B", 1), ("T", 50), ("H", 1), ("K", 32), ("V", 32), ("safe", 0), ("extreme", 1)],
        knobs(32).with("STAGES", 1i64),
    ));
    for (i, (dims, k)) in cases.iter().enumerate() {
        let seed = s ^ (0x4200 + i as u64);
        run_with(dims, &us(k), seed);
        let pb = problem(dims);
        let d = KdaData::generate(&pb, seed);
        // USTATE=1 runs the exact gate sigmoid and the tile maps (`Launch::resolve`: the row maps spill beside it),
        // so its bits are those of GSIG=exact, IMAP=tiles. (The row maps round differently on rare inputs: against
        // the defaults' IMAP=gate or IMAP=ops, o differed at seed 8710077169452929096 of the preset-like case.)
        let k0 = k.clone().with("GSIG", "exact").with("IMAP", "tiles");
        let (pu, p0) = (kda::chunk_plan(&pb, &d, &us(k)).unwrap(), kda::chunk_plan(&pb, &d, &k0).unwrap());
        // (`_us` then the row maps' `_rq_ro` where IMAP=ops applies, the default since c28550b.)
        assert!(pu.steps.iter().all(|st| st.kernel.name.contains("_us")), "{dims:?} [{k}]");
        let (a, b) = (Executor::Cpu.run(&pu).unwrap(), Executor::Cpu.run(&p0).unwrap());
        for n in ["o", "ht"] {
            assert_eq!(a.get(n).unwrap().data, b.get(n).unwrap().data, "{dims:?} [{k}]: {n} differs (seed {seed})");
        }
    }
    // The Cranelift JIT runs both kernels like the interpreter (the preset-like case).
    let pb = problem(&presets_like);
    let d = KdaData::generate(&pb, s);
    let plan = kda::chunk_plan(&pb, &d, &us(&kda::default_knobs())).unwrap();
    let jit = run_plan_jit(&plan);
    let interp = Executor::Cpu.run(&plan).unwrap();
    for n in ["o", "ht"] {
        assert_eq!(jit.get(n).unwrap().data, interp.get(n).unwrap().data, "JIT USTATE=1: {n}");
    }
    // The scratch: W alone (C x K) and the factors instead of [W | U]; the intra kernel no longer reads v.
    let bytes = |pl: &Plan| -> usize {
        pl.buffers.iter().filter(|b| b.role == k3k_ops::plan::Role::Scratch).map(|b| b.tensor.data.len()).sum()
    };
    let plain = kda::chunk_plan(&pb, &d, &kda::default_knobs()).unwrap();
    let (nch, hv) = (pb.chunk_tables(32).0.len() / 2, pb.hv);
    // Per chunk and value head: U (32 x 128 f16) out; N (32 x 16 f16), L (16 x 16 f16), beta (32 f32) in.
    assert_eq!(bytes(&plain) - bytes(&plan), nch * hv * (8192 - 1024 - 512 - 128));
    // The default knobs and USTATE=0 are today's kernels.
    let l0 = kda::Launch::resolve(&kda::default_knobs().with(kda::USTATE_KNOB, 0i64), &pb).unwrap();
    assert_eq!(l0, kda::Launch::resolve(&kda::default_knobs(), &pb).unwrap());
    assert!(!l0.u_state);
    assert!(kda::Launch::resolve(&kda::default_knobs().with(kda::USTATE_KNOB, 2i64), &pb).is_err());
    // At the FlashKDA presets' shapes the state pass keeps its rings and blocks per SM.
    for (dims, stages) in [(&[("B", 1i64), ("T", 8192), ("H", 96)][..], 2u32), (&[("B", 4), ("T", 4096), ("H", 64)], 2)]
    {
        let mut dd = dims.to_vec();
        dd.extend(fk_f32());
        let pb = problem(&dd);
        let l = kda::Launch::resolve(&us(&kda::default_knobs()), &pb).unwrap();
        let (_, k2) = kda::chunk_kernels(&pb, &l).unwrap();
        assert_eq!(l.stages, stages, "{dd:?}");
        assert_eq!(k2.shared_bytes() as u32, kda::state_shared_bytes_u(128, 32, l.bv, l.stages), "{}", k2.name);
    }
}
