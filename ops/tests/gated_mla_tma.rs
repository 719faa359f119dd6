//! The gated-MLA prefill with `LOAD=tma` (the Q tile and the K/V ring by bulk tensor copies completing on
//! mbarriers, released through per-slot empty barriers) against the f64 reference on both CPU backends: the
//! interpreter (which checks the barrier protocol: a wait no arrival or copy can complete, more arrivals than
//! the count or more bytes than announced is an error, since it would hang the GPU) and the Cranelift JIT,
//! which must lower the kernel and agree with the interpreter bit for bit. Fresh random inputs (the seed is
//! printed on failure), outputs poisoned with NaN, ragged lengths (1, 15, 17, 63, 65, 130), cached prefixes
//! (S > T), rows without keys, several q-tiles and heads (12, and 96 at a short length), the plain and the
//! overlapped schedules at 2 and 3 stages, one and three warpgroups, and varlen with short sequences whose
//! K/V boxes run into the next sequence (which the mask must hide) or past the tensor's end (zero-filled).
//! The emitted CUDA compiles for sm_90a without spills.
use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_codegen::cpu::jit::{self, Engine};
use k3k_codegen::{BuildOptions, build};
use k3k_ir::*;
use k3k_ops::OpError;
use k3k_ops::gated_mla::*;

#[path = "common/mla_check.rs"]
mod mla_check;
use k3k_reference::mla::{mla_prefill, mla_prefill_varlen};
use k3k_reference::random::{bf16_normal, fresh_seed, seeded};
use mla_check::{BF16_TOL, TAU, bf16, check, check_lse};

fn tma(k: Knobs) -> Knobs {
    k.with(PREFILL_LOAD_KNOB, "tma")
}

/// The LOAD=tma points: the default (overlapped, 2 stages), the plain schedule at 2 and 3 stages, the
/// overlapped one at 3 stages of 64 keys, one warpgroup with the rolled score loop, three warpgroups, three
/// of them with a producer warpgroup, and four with the warpgroups taking turns (ping-pong).
fn points() -> Vec<Knobs> {
    let w = prefill_wgmma_knobs();
    // The default of 2026-12-04: the overlapped schedule without turns.
    let d = prefill_default_knobs().with(PREFILL_PINGPONG_KNOB, false);
    vec![
        tma(d.clone()).with(PREFILL_PRODUCER_KNOB, "thread"),
        tma(w.clone()),
        tma(w.clone().with("BN", 64i64).with("STAGES", 3i64)),
        tma(d.clone().with("BN", 64i64).with("STAGES", 3i64)).with(PREFILL_PRODUCER_KNOB, "thread"),
        tma(d.clone().with("BM", 64i64).with("WM", 4i64).with("QK_UNROLL", false)),
        tma(d
            .clone()
            .with("BM", 192i64)
            .with("WM", 12i64)
            .with("BN", 64i64)
            .with("STAGES", 3i64)
            .with("QORDER", "lpt")),
        // A dedicated producer warpgroup (PRODUCER=warp): overlapped and plain schedules, 3 stages of 64 keys.
        tma(d.clone()),
        tma(w.clone()).with(PREFILL_PRODUCER_KNOB, "warp"),
        tma(d.clone().with("BN", 64i64).with("STAGES", 3i64)),
        // Ping-pong (PINGPONG=true, the first KV tile peeled): the default (producer warpgroup, 2 stages), 3
        // stages of 64 keys, thread 0 producing, and three warpgroups taking turns.
        tma(prefill_default_knobs()),
        tma(prefill_default_knobs().with("BN", 64i64).with("STAGES", 3i64)),
        tma(prefill_default_knobs()).with(PREFILL_PRODUCER_KNOB, "thread"),
        tma(prefill_default_knobs().with("BM", 192i64).with("WM", 12i64).with("BN", 64i64).with("STAGES", 3i64)),
    ]
}

/// One prefill on fresh inputs: fixed length `(t, s)` when `cu` is `None`, else varlen over the cumulative
/// lengths `cu = (cu_q, cu_k)`; interpreter and JIT against the reference and each other.
fn case(causal: bool, gate: bool, knobs: &Knobs, t: usize, s: usize, h: usize, cu: Option<(&[usize], &[usize])>) {
    let seed = fresh_seed();
    let mut rng = seeded(seed);
    let (dqk, dv) = (192usize, 128usize);
    let (t, s) = match cu {
        Some((cq, ck)) => (*cq.last().unwrap(), *ck.last().unwrap()),
        None => (t, s),
    };
    let q = bf16_normal(&mut rng, t * h * dqk, 1.0);
    let k = bf16_normal(&mut rng, s * h * dqk, 1.0);
    let v = bf16_normal(&mut rng, s * h * dv, 1.0);
    let z = gate.then(|| bf16_normal(&mut rng, t * h * dv, 2.0));
    let kern = build_prefill(&PrefillSpec::new(causal, gate, cu.is_some()), knobs).unwrap();
    assert!(kern.tensor_maps.len() == 3 && !kern.mbarriers.is_empty(), "{}: no TMA", kern.name);
    let what = format!("{} T={t} S={s} H={h} cu={cu:?}", kern.name);
    let mut ts = vec![bf16(&[t, h, dqk], &q), bf16(&[s, h, dqk], &k), bf16(&[s, h, dv], &v)];
    let mut scalars = vec![("scale", SymValue::Float(TAU))];
    if let Some((cq, ck)) = cu {
        let i = |c: &[usize]| c.iter().map(|&x| x as i64).collect::<Vec<_>>();
        ts.push(HostTensor::from_i64(DType::I32, &[cq.len()], &i(cq)));
        ts.push(HostTensor::from_i64(DType::I32, &[ck.len()], &i(ck)));
        let max_q = cq.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        scalars.push(("MAX_SEQLEN_Q", SymValue::Int(max_q as i64)));
    }
    if let Some(z) = &z {
        ts.push(bf16(&[t, h, dv], z));
    }
    let (oi, li) = (ts.len(), ts.len() + 1);
    let mut o = HostTensor::zeros(DType::Bf16, &[t, h, dv]);
    o.poison();
    let mut lse = HostTensor::zeros(DType::F32, &[h, t]);
    lse.poison();
    ts.push(o);
    ts.push(lse);
    let opts = InterpOptions::default();
    let mut a = ts.clone();
    interp::run(&kern, &mut a, &scalars, opts).unwrap_or_else(|e| panic!("seed {seed}: {what}: {e}"));
    let mut j = ts;
    let engine = jit::run(&kern, &mut j, &scalars, opts).unwrap_or_else(|e| panic!("seed {seed}: {what} (JIT): {e}"));
    assert_eq!(engine, Engine::Jit, "{what}: not lowered by the JIT");
    assert!(a[oi].data == j[oi].data && a[li].data == j[li].data, "seed {seed}: {what}: JIT and interpreter differ");
    let (want_o, want_lse) = match cu {
        Some((cq, ck)) => mla_prefill_varlen(&q, &k, &v, z.as_deref(), cq, ck, h, dqk, dv, TAU as f64, causal),
        None => mla_prefill(&q, &k, &v, z.as_deref(), t, s, h, dqk, dv, TAU as f64, causal),
    }
    .unwrap();
    check(&format!("{what} o"), seed, &a[oi].to_f32_vec(), &want_o, BF16_TOL);
    check_lse(&format!("{what} lse"), seed, &a[li].to_f32_vec(), &want_lse);
}

/// Fixed lengths at every point: ragged T, single rows, cached prefixes, rows without keys, full and causal,
/// gated and not, several q-tiles per head (so blocks of one head run different KV-tile counts).
#[test]
fn tma_prefill_fixed_lengths() {
    for knobs in points() {
        for (causal, gate, t, s, h) in [
            (true, true, 65, 65, 2),
            (true, true, 17, 150, 1),
            (true, true, 1, 1, 1),
            (true, false, 15, 15, 1),
            (true, true, 63, 63, 1),
            (true, true, 130, 200, 1),
            (true, true, 20, 5, 1),
            (false, true, 17, 65, 1),
            (false, false, 1, 33, 2),
            (false, true, 3, 0, 1),
        ] {
            case(causal, gate, &knobs, t, s, h, None);
        }
    }
}

/// Varlen: short sequences (1, 15, 63 queries) whose last K/V boxes reach into the next sequence (finite
/// values the mask must hide) and, for the last one, past the packed tensor (zeros); an empty sequence, one
/// without keys, and cached prefixes.
#[test]
fn tma_prefill_varlen_short_sequences() {
    // Sequences (T, S): (1, 1), (15, 40), (63, 63), (0, 7), (1, 0), (17, 150), (15, 15).
    let cu_q = [0usize, 1, 16, 79, 79, 80, 97, 112];
    let cu_k = [0usize, 1, 41, 104, 111, 111, 261, 276];
    for knobs in points() {
        for (causal, gate) in [(true, true), (false, false), (true, false)] {
            case(causal, gate, &knobs, 0, 0, 3, Some((&cu_q, &cu_k)));
        }
    }
}

/// The bench presets' head counts at short lengths: 12 heads (several q-tiles) and 96 heads.
#[test]
fn tma_prefill_12_and_96_heads() {
    let d = tma(prefill_default_knobs());
    case(true, true, &d, 130, 130, 12, None);
    case(true, true, &d, 17, 17, 96, None);
    let cu_q = [0usize, 15, 78];
    let cu_k = [0usize, 15, 80];
    case(true, true, &d, 0, 0, 12, Some((&cu_q, &cu_k)));
}

/// `LOAD` is checked: an unknown value and `tma` with mma.sync are knob errors naming the knob; `auto` is
/// `tma` for wgmma and `cp_async` for mma.sync; absent is `cp_async`.
#[test]
fn tma_load_knob_is_checked() {
    let spec = PrefillSpec::new(true, true, false);
    let e = build_prefill(&spec, &prefill_default_knobs().with(PREFILL_LOAD_KNOB, "dma")).unwrap_err();
    assert!(matches!(e, OpError::InvalidKnobs { .. }) && e.to_string().contains("LOAD=dma"), "{e}");
    let e = build_prefill(&spec, &tma(prefill_sync_knobs())).unwrap_err();
    assert!(matches!(e, OpError::InvalidKnobs { .. }) && e.to_string().contains("LOAD=tma needs MMA=wgmma"), "{e}");
    let auto = |k: Knobs| build_prefill(&spec, &k.with(PREFILL_LOAD_KNOB, "auto")).unwrap();
    assert_eq!(auto(prefill_default_knobs()).tensor_maps.len(), 3);
    assert!(auto(prefill_sync_knobs()).tensor_maps.is_empty());
    // The default is auto: TMA for the two-warpgroup wgmma kernel, cp.async for three warpgroups (BM=192).
    assert_eq!(build_prefill(&spec, &prefill_default_knobs()).unwrap().tensor_maps.len(), 3);
    let three = prefill_default_knobs().with("BM", 192i64).with("WM", 12i64).with("BN", 64i64);
    assert!(build_prefill(&spec, &three).unwrap().tensor_maps.is_empty());
    let cp = build_prefill(&spec, &prefill_default_knobs().with(PREFILL_LOAD_KNOB, "cp_async")).unwrap();
    assert!(cp.tensor_maps.is_empty() && cp.mbarriers.is_empty());
}

/// PERSIST (a block per SM walking the items, here 4 blocks as the CPU backends bind `NUM_SMS`): many items per
/// block, so the K / V ring, its phases and the Q tile's barriers run across items of different KV-tile counts
/// (causal q-tiles, cached prefixes, full attention), at 2 stages with turns and 3 without; gated and not.
#[test]
fn tma_prefill_persistent_walk() {
    let p = tma(prefill_default_knobs()).with(PREFILL_PERSIST_KNOB, true);
    for knobs in [p.clone(), p.clone().with("BN", 64i64).with("STAGES", 3i64).with(PREFILL_PINGPONG_KNOB, false)] {
        let k = build_prefill(&PrefillSpec::new(true, true, false), &knobs).unwrap();
        assert!(k.syms.iter().any(|s| s.name == k3k_ir::NUM_SMS), "a persistent grid");
        for (causal, gate, t, s, h) in [
            (true, true, 300, 300, 3),
            (true, false, 130, 200, 5),
            (true, true, 17, 150, 6),
            (false, true, 65, 100, 6),
            (true, true, 1, 1, 9),
        ] {
            case(causal, gate, &knobs, t, s, h, None);
        }
    }
    // Varlen keeps one block per item (the knob is ignored there); elsewhere it needs the TMA producer warp.
    let v = build_prefill(&PrefillSpec::new(true, true, true), &p).unwrap();
    assert!(!v.syms.iter().any(|s| s.name == k3k_ir::NUM_SMS));
    let spec = PrefillSpec::new(true, true, false);
    for bad in [p.clone().with(PREFILL_PRODUCER_KNOB, "thread"), p.clone().with("QORDER", "lpt")] {
        let e = build_prefill(&spec, &bad).unwrap_err();
        assert!(matches!(e, OpError::InvalidKnobs { .. }) && e.to_string().contains("PERSIST needs"), "{e}");
    }
}

/// `PINGPONG` needs the overlapped schedule and two warpgroups to take turns; with it, the kernel issues every
/// product inside a turn (the first tile's score product in one, then per tile the score and P V products in
/// one), and without it there is no turn.
#[test]
fn pingpong_knob_is_checked() {
    let spec = PrefillSpec::new(true, true, false);
    let pp = |k: Knobs| build_prefill(&spec, &k.with(PREFILL_PINGPONG_KNOB, true));
    for k in [prefill_wgmma_knobs(), prefill_default_knobs().with("BM", 64i64).with("WM", 4i64)] {
        // (The default has PINGPONG=true.)
        let e = pp(k).unwrap_err();
        assert!(matches!(e, OpError::InvalidKnobs { .. }) && e.to_string().contains("PINGPONG needs"), "{e}");
    }
    let turns = |k: &Kernel| {
        let (mut turns, mut in_turn, mut mmas) = (0, 0, 0);
        fn walk(b: &[Stmt], inside: bool, t: &mut usize, i: &mut usize, m: &mut usize) {
            for s in b {
                match s {
                    Stmt::InTurn { body } => {
                        *t += 1;
                        walk(body, true, t, i, m)
                    }
                    Stmt::MmaAsync { .. } => {
                        *m += 1;
                        *i += inside as usize
                    }
                    Stmt::For { body, .. } | Stmt::Producer { body } => walk(body, inside, t, i, m),
                    Stmt::If { then_body, else_body, .. } => {
                        walk(then_body, inside, t, i, m);
                        walk(else_body, inside, t, i, m)
                    }
                    _ => {}
                }
            }
        }
        walk(&k.body, false, &mut turns, &mut in_turn, &mut mmas);
        (turns, in_turn, mmas)
    };
    let on = build_prefill(&spec, &prefill_default_knobs()).unwrap();
    // Turns: the peeled first tile's (3 score chunks) and the loop's (3 + 2); the last tile's P V after the loop
    // needs no turn.
    assert_eq!(turns(&on), (2, 3 + 5, 3 + 5 + 2));
    let off = build_prefill(&spec, &prefill_default_knobs().with(PREFILL_PINGPONG_KNOB, false)).unwrap();
    assert_eq!(turns(&off).0, 0);
    // The CUDA: warpgroup 0 takes the first turn once; the consumer slice takes and passes each turn of the two
    // warpgroups, the producer warpgroup's slice (before `} else {  // the consumer warpgroups`) none.
    let cuda = k3k_codegen::render(&on).unwrap();
    let (producer, consumer) = cuda.split_once("// the consumer warpgroups").expect("two role slices");
    assert_eq!(cuda.matches("k3k::turn_start();").count(), 1);
    assert_eq!(consumer.matches("k3k::turn_take<2>();").count(), 2);
    assert_eq!(consumer.matches("k3k::turn_pass<2>();").count(), 2);
    assert!(!producer.contains("turn_take<") && !producer.contains("turn_start();"));
    assert!(!k3k_codegen::render(&off).unwrap().contains("turn_start();"));
}

/// Every variant of the spec at the default + LOAD=tma, and the other points (causal gated), assemble for
/// sm_90a without spills (three warpgroups under the 168-register cap of 384 threads).
#[test]
fn tma_prefill_kernels_compile_without_spills() {
    let assemble = |k: &Kernel| {
        let m = build(k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        let r = m.resources.clone().expect("assembled");
        eprintln!("{}: {} registers, {} B dynamic smem, {r:?}", k.name, r.registers, k.shared_bytes());
        assert!(!r.spills() && r.stack_frame_bytes == 0, "{}: {r:?}", k.name);
        assert!(r.registers <= if k.threads > 256 { 168 } else { 255 }, "{}: {r:?}", k.name);
    };
    let d = tma(prefill_default_knobs());
    for causal in [true, false] {
        for gate in [true, false] {
            for varlen in [false, true] {
                assemble(&build_prefill(&PrefillSpec::new(causal, gate, varlen), &d).unwrap());
            }
        }
    }
    for k in points().into_iter().skip(1) {
        assemble(&build_prefill(&PrefillSpec::new(true, true, false), &k).unwrap());
    }
}
