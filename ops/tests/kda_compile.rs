//! Every KDA kernel variant renders, compiles with NVRTC and assembles for sm_90a with no spills (and no stack
//! frame), at the default knobs and at the other knob points the operator offers, but for the operator's one
//! measured exception (see [`known_spill`]).
use k3k_codegen::{BuildOptions, Resources, build, render};
use k3k_ir::{Kernel, Knobs};
use k3k_ops::kda::{self, KdaProblem, Launch, decode};
use k3k_ops::op::{Operator, Preset};
#[path = "common/plan_run.rs"]
#[allow(dead_code)] // (the knob base only)
mod plan_run;
use plan_run::kda_knobs_before_the_solve;

/// The bytes a kernel may spill: [`Operator::known_spill_bytes`] (16 for the plain intra kernels with
/// `GSWZ=pairs`, 8 for the intra kernels with the in-kernel L2 norm, each measured fastest with it; 0 for every
/// other kernel). More than this is a regression.
fn known_spill(k: &Kernel) -> u32 {
    kda::Kda.known_spill_bytes(k)
}

/// Build and assemble a kernel (a failure names it); its ptxas resources, printed.
fn assembled(k: &Kernel) -> Resources {
    let m = build(k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    let r = m.resources.clone().unwrap();
    eprintln!("{}: {:?} smem {} nvrtc {:.0} ms", k.name, r, k.shared_bytes(), m.nvrtc_ms);
    r
}

/// [`assembled`], within the kernel's spill allowance.
fn assemble(k: &Kernel) {
    let r = assembled(k);
    let cap = known_spill(k);
    assert!(!r.spills_over(cap), "{}: {r:?}", k.name);
    assert!(r.stack_frame_bytes <= cap, "{}: {r:?}", k.name);
}

/// A problem's dims, as [`Preset::new`] takes them.
type Dims = Vec<(&'static str, i64)>;

/// The two problems of the knob tests: B1 T8192 H8 with the FlashKDA options, and the plain safe path.
fn fk_and_plain() -> (Dims, Dims) {
    let fk = [("B", 1i64), ("T", 8192), ("H", 8)].into_iter().chain(kda::FLASHKDA_OPTIONS).collect();
    let plain = vec![("B", 1i64), ("T", 8192), ("H", 8), ("K", 128), ("V", 128), ("safe", 1)];
    (fk, plain)
}

fn chunk_kernels(dims: &[(&str, i64)], knobs: &Knobs) -> (Kernel, Kernel) {
    let pb = KdaProblem::from_preset(&Preset::new("t", dims)).unwrap();
    kda::chunk_kernels(&pb, &Launch::resolve(knobs, &pb).unwrap()).unwrap()
}

#[test]
fn presets_compile_at_default_knobs() {
    let op = kda::Kda;
    for p in op.bench_presets() {
        for k in op.kernels(&p, &op.default_knobs()).unwrap() {
            assemble(&k);
        }
    }
}

#[test]
fn variants_and_knob_points_compile() {
    let base = [("B", 1i64), ("T", 8192), ("H", 8), ("K", 128), ("V", 128)];
    let with = |extra: &[(&'static str, i64)]| -> Vec<(&'static str, i64)> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    let def = kda::default_knobs();
    let mut ks: Vec<Kernel> = vec![];
    let mut add = |dims: Vec<(&str, i64)>, knobs: &Knobs, which: u8| {
        let (a, b) = chunk_kernels(&dims, knobs);
        if which & 1 != 0 {
            ks.push(a);
        }
        if which & 2 != 0 {
            ks.push(b);
        }
    };
    // In-kernel options on both paths (intra kernels), an initial state (state kernel).
    add(with(&[("safe", 1), ("gate", 1), ("bias", 1), ("l2norm", 1), ("bsig", 1)]), &def, 1);
    add(with(&[("safe", 0), ("gate", 2), ("bias", 1), ("l2norm", 1), ("bsig", 1), ("h0", 1)]), &def, 3);
    // Chunk 32, 4 warps, bf16 operands.
    add(with(&[("safe", 1)]), &def.clone().with("CHUNK", 32i64).with("W1", 4i64), 3);
    add(with(&[("safe", 0)]), &def.clone().with("CHUNK", 32i64), 1);
    add(with(&[("safe", 1)]), &def.clone().with("OPDT", "bf16"), 3);
    add(with(&[("safe", 0)]), &def.clone().with("CHUNK", 32i64).with("W1", 4i64), 1);
    add(vec![("B", 1), ("T", 100), ("H", 2), ("K", 64), ("V", 64), ("safe", 0)], &def.clone().with("W1", 4i64), 1);
    // State-pass value blocks.
    for (bv, w2) in [(16i64, 4i64), (32, 8), (64, 8), (64, 16), (128, 16)] {
        add(with(&[("safe", 1)]), &def.clone().with("BV", bv).with("W2", w2), 2);
    }
    // The double-buffered state pass (both chunk sizes, with h0).
    for (bv, w2, chunk) in [(16i64, 4i64, 64i64), (32, 4, 64), (32, 8, 64), (64, 8, 64), (128, 16, 64), (32, 4, 32)] {
        let knobs = def.clone().with("BV", bv).with("W2", w2).with("STAGES", 2i64).with("CHUNK", chunk);
        add(with(&[("safe", 1), ("h0", 1)]), &knobs, 2);
    }
    // Three stages (the automatic choice where every state-pass block has an SM to itself).
    for (bv, w2, chunk) in [(32i64, 8i64, 32i64), (32, 4, 32), (64, 8, 32), (128, 16, 32), (16, 4, 32), (32, 8, 64)] {
        let knobs = def.clone().with("BV", bv).with("W2", w2).with("STAGES", 3i64).with("CHUNK", chunk);
        add(with(&[("safe", 1), ("h0", 1)]), &knobs, 2);
    }
    // The old arithmetic and barrier points (EX2=exact, ODIAG=0, SYNC=4) next to the new defaults, and the
    // chunk-32 safe off-diagonal with the in-kernel options and chunk 32 on 4 and 16 warps.
    let old = def.clone().with("EX2", "exact").with("ODIAG", 0i64).with("SYNC", 4i64);
    for stages in [2i64, 3] {
        let k = old.clone().with("CHUNK", 32i64).with("STAGES", stages).with("BV", 32i64).with("W2", 4i64);
        add(with(&[("safe", 1), ("h0", 1)]), &k, 3);
        add(with(&[("safe", 0)]), &k, 1);
    }
    add(with(&[("safe", 1)]), &def.clone().with("EX2", "exact"), 1);
    add(with(&[("safe", 1)]), &def.clone().with("ODIAG", 0i64), 1);
    add(
        with(&[("safe", 1), ("gate", 1), ("bias", 1), ("l2norm", 1), ("bsig", 1)]),
        &def.clone().with("CHUNK", 32i64),
        1,
    );
    for w1 in [4i64, 16] {
        add(with(&[("safe", 1)]), &def.clone().with("CHUNK", 32i64).with("W1", w1), 1);
    }
    // ARENA=2 (three blocks per SM at 8 warps: 80 registers): plain, with the in-kernel options, on 4 warps.
    let slim = def.clone().with("CHUNK", 32i64).with("ARENA", 2i64);
    add(with(&[("safe", 1)]), &slim, 1);
    add(with(&[("safe", 1), ("gate", 1), ("bias", 1), ("l2norm", 1), ("bsig", 1)]), &slim, 1);
    // The state pass with a pair's value blocks consecutive (SGRID=vb), at the automatic and the widest blocks.
    add(with(&[("safe", 1), ("h0", 1)]), &def.clone().with(kda::SGRID_KNOB, "vb"), 2);
    add(
        with(&[("safe", 1), ("h0", 1)]),
        &def.clone().with(kda::SGRID_KNOB, "vb").with("BV", 128i64).with("W2", 16i64),
        2,
    );
    // FlashKDA's gate form (lb * sigmoid(exp(A_log) * (x + bias))) with every in-kernel option, on both paths.
    add(with(&[("safe", 1), ("gate", 3), ("bias", 1), ("l2norm", 1), ("bsig", 1), ("h0", 1)]), &slim, 3);
    add(with(&[("safe", 0), ("gate", 3), ("bias", 1), ("l2norm", 1), ("bsig", 1)]), &def, 1);
    add(with(&[("safe", 0), ("gate", 3), ("bias", 1), ("gbf16", 1), ("l2norm", 1), ("bsig", 1)]), &def, 1);
    add(with(&[("safe", 1), ("h0", 1)]), &slim.clone().with("W1", 4i64), 1);
    // Smaller head dims.
    for (k, v) in [(64i64, 64i64), (32, 32), (64, 128), (128, 32)] {
        add(vec![("B", 1), ("T", 100), ("H", 2), ("K", k), ("V", v), ("safe", 0)], &def, 3);
    }
    add(vec![("B", 1), ("T", 100), ("H", 2), ("K", 64), ("V", 64), ("safe", 1)], &def, 1);
    // Decode, in place and not, with every gate form.
    for (gate, l2, inplace) in [(0, false, true), (1, true, false), (2, false, false), (3, true, false)] {
        let spec = decode::DecodeSpec {
            dk: 128,
            dv: 128,
            gate: match gate {
                0 => kda::GateForm::Pre,
                1 => kda::GateForm::Safe { bias: true, a_log: false },
                2 => kda::GateForm::Standard { bias: true },
                _ => kda::GateForm::Safe { bias: true, a_log: true },
            },
            // (FlashKDA's form with the bf16 raw gate of its presets.)
            g_bf16: gate == 3,
            l2norm: l2,
            beta_sigmoid: l2,
            in_place: inplace,
            layout: decode::DecodeLayout::auto(128, 128, gate != 0),
        };
        ks.push(decode::build_decode(&spec).unwrap());
        // Other layouts the knobs offer at K = V = 128 (each fits a lane's registers: no spills).
        for (kl, vpl, warps) in [(2i64, 1i64, 4i64), (2, 2, 2), (4, 1, 4), (4, 2, 8), (4, 4, 1), (8, 4, 2), (8, 1, 4)] {
            let knobs = decode::default_knobs().with("KL", kl).with("VPL", vpl).with("DW", warps);
            match decode::DecodeLayout::resolve(&knobs, 128, 128, spec.gate.has_bias()) {
                Ok(layout) => ks.push(decode::build_decode(&decode::DecodeSpec { layout, ..spec }).unwrap()),
                // 64 rows of 2 columns per lane, and with a gate bias 64 rows or 32 rows of 4 columns, spill (255
                // registers, 108 to 724 bytes): refused.
                Err(e) => assert!(
                    (kl, vpl) == (2, 2) || (spec.gate.has_bias() && (kl == 2 || (kl, vpl) == (4, 4))),
                    "KL={kl} VPL={vpl} DW={warps}: {e}"
                ),
            }
        }
        // The wide state layouts (SW=1: a row's VPL columns as one 8- or 16-byte access).
        for (kl, vpl, warps) in [(4i64, 2i64, 4i64), (4, 2, 8), (8, 4, 2), (8, 2, 4)] {
            let knobs = decode::default_knobs().with("KL", kl).with("VPL", vpl).with("DW", warps).with("SW", 1i64);
            let layout = decode::DecodeLayout::resolve(&knobs, 128, 128, spec.gate.has_bias()).unwrap();
            assert!(layout.wide);
            ks.push(decode::build_decode(&decode::DecodeSpec { layout, ..spec }).unwrap());
        }
        // A whole K = 128 column per lane would spill: refused by the knob check, and by the builder.
        assert!(decode::DecodeLayout::resolve(&decode::default_knobs().with("KL", 1i64), 128, 128, false).is_err());
        let whole = decode::DecodeLayout { kl: 1, vpl: 1, warps: 4, wide: false };
        assert!(decode::build_decode(&decode::DecodeSpec { layout: whole, ..spec }).is_err());
        // Narrower heads at their automatic layout, and a whole K = 64 column per lane.
        let whole64 = if spec.gate.has_bias() { 2 } else { 1 };
        for (dk, dv, kl) in [(64u32, 64u32, 0i64), (32, 32, 0), (64, 128, whole64), (128, 32, 0)] {
            let knobs = decode::default_knobs().with("KL", kl).with("VPL", 1i64);
            let layout = decode::DecodeLayout::resolve(&knobs, dk, dv, spec.gate.has_bias()).unwrap();
            ks.push(decode::build_decode(&decode::DecodeSpec { dk, dv, layout, ..spec }).unwrap());
        }
    }
    let mut names = std::collections::HashMap::new();
    for k in &ks {
        if let Some(prev) = names.insert(k.name.clone(), k3k_ir::stable_hash(k)) {
            assert_eq!(prev, k3k_ir::stable_hash(k), "two different kernels named {}", k.name);
        }
    }
    // `K3K_KDA_ONLY=<substring>` assembles only the matching kernels (a debugging aid).
    let only = std::env::var("K3K_KDA_ONLY").unwrap_or_default();
    use rayon::prelude::*;
    ks.par_iter().filter(|k| k.name.contains(&only)).for_each(assemble);
}

/// Writes the CUDA of the default kernels of every preset to `$K3K_KDA_DUMP` (a debugging aid).
#[test]
fn dump_cuda() {
    let Ok(dir) = std::env::var("K3K_KDA_DUMP") else { return };
    let op = kda::Kda;
    for p in &op.bench_presets() {
        for k in op.kernels(p, &op.default_knobs()).unwrap() {
            std::fs::write(format!("{dir}/{}.cu", k.name), k3k_codegen::render(&k).unwrap()).unwrap();
        }
    }
}

/// Writes the PTX of the default kernels of the first preset to `$K3K_KDA_PTX` (a debugging aid).
#[test]
fn dump_ptx() {
    let Ok(dir) = std::env::var("K3K_KDA_PTX") else { return };
    let op = kda::Kda;
    for p in &op.bench_presets()[2..4] {
        for k in op.kernels(p, &op.default_knobs()).unwrap() {
            let m = build(&k, BuildOptions { assemble: false }).unwrap();
            std::fs::write(format!("{dir}/{}.ptx", k.name), &m.ptx).unwrap();
        }
    }
}

/// The phase-aliased intra layout (`ARENA=1`) compiles on both diagonal paths, both chunk sizes, 4, 8 and 16
/// warps, both operand types and the in-kernel options: no spills except the known few bytes at chunk 64 on 8
/// warps, where `__launch_bounds__(256, 2)` holds the registers to 128 (two blocks per SM with its <= 113 KB of
/// shared memory).
#[test]
fn arena_points_compile() {
    let base = [("B", 1i64), ("T", 8192), ("H", 8), ("K", 128), ("V", 128)];
    let with = |extra: &[(&'static str, i64)]| -> Vec<(&'static str, i64)> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    let a = kda::default_knobs().with("ARENA", 1i64);
    let mut ks = vec![];
    for safe in [1i64, 0] {
        for (chunk, w1) in [(64i64, 8i64), (64, 16), (32, 8), (32, 4)] {
            ks.push(chunk_kernels(&with(&[("safe", safe)]), &a.clone().with("CHUNK", chunk).with("W1", w1)).0);
        }
        ks.push(chunk_kernels(&with(&[("safe", safe)]), &a.clone().with("W1", 8i64).with("OPDT", "bf16")).0);
    }
    let opts = [("gate", 1), ("bias", 1), ("l2norm", 1), ("bsig", 1)];
    ks.push(chunk_kernels(&with(&[("safe", 1), opts[0], opts[1], opts[2], opts[3]]), &a.clone().with("W1", 8i64)).0);
    ks.push(
        chunk_kernels(&with(&[("safe", 0), ("gate", 2), opts[1], opts[2], opts[3]]), &a.clone().with("W1", 8i64)).0,
    );
    ks.push(
        chunk_kernels(
            &[("B", 1), ("T", 100), ("H", 2), ("K", 64), ("V", 64), ("safe", 0)],
            &a.clone().with("W1", 8i64),
        )
        .0,
    );
    for k in &ks {
        let r = build(k, BuildOptions { assemble: true }).unwrap().resources.clone().unwrap();
        eprintln!("{}: {r:?} smem {} min blocks {}", k.name, k.shared_bytes(), k.min_blocks_per_sm);
        if k.name.contains("_c64_w8_") {
            // Known (not a default for this reason): at chunk 64 on 8 warps the 128-register cap of two blocks
            // per SM spills a few bytes: 8 on the plain safe path (two addresses stored once, reloaded at the top
            // of each off-diagonal level: 4 local loads a block), 24 on the exact path, 48 with the in-kernel
            // gate/l2norm/beta options. Anything more is a regression.
            let cap = if k.name.contains("_safe_pre_") {
                8
            } else if k.name.contains("_pre_") {
                24
            } else {
                48
            };
            assert!(r.spill_store_bytes <= cap && r.spill_load_bytes <= cap, "{}: {r:?}", k.name);
        } else {
            assemble(k);
        }
        if k.min_blocks_per_sm == 2 {
            assert!(r.registers <= 65536 / (2 * k.threads), "{}: {r:?}", k.name);
            assert!(k.shared_bytes() <= 113 * 1024, "{}: {}", k.name, k.shared_bytes());
        }
    }
}

/// The wide decode layout moves every state row as one vector access: KL=8 VPL=4 (16 rows of 4 columns per
/// lane) has 16 `v4` loads and 16 `v4` stores of the state in its PTX, and no scalar f32 state access.
#[test]
fn wide_decode_state_moves_as_vector_accesses() {
    let op = decode::KdaDecode;
    let p = &op.bench_presets()[0];
    let knobs = decode::default_knobs().with("KL", 8i64).with("VPL", 4i64).with("DW", 2i64).with("SW", 1i64);
    let k = op.kernels(p, &knobs).unwrap().remove(1);
    let m = build(&k, BuildOptions { assemble: false }).unwrap();
    let count = |pat: &str| m.ptx.lines().filter(|l| l.contains(pat)).count();
    let (ld, st) = (count("ld.global.v4.f32") + count("ld.global.v4.u32"), count("st.global.v4"));
    eprintln!("{}: {ld} v4 loads, {st} v4 stores", k.name);
    assert_eq!((ld, st), (16, 16), "{}", k.name);
}

/// The intra kernel's knobs of 2026-12-07 (`FULLC=1`, `GSIG=fast`, both) at the FlashKDA presets' options and on the
/// plain safe path: no more spill than the default kernels of the same variant.
#[test]
fn full_chunk_and_fast_gate_knobs_compile() {
    let (fk, plain) = fk_and_plain();
    let def = kda::default_knobs();
    for dims in [&fk, &plain] {
        for knobs in [
            def.clone().with("FULLC", 1i64),
            def.clone().with("GSIG", "fast"),
            def.clone().with("FULLC", 1i64).with("GSIG", "fast"),
        ] {
            assemble(&chunk_kernels(dims, &knobs).0);
        }
    }
    // `L2R=unrolled` spills under the 80-register cap (ptxas 13.0, 2026-12-07: 40 bytes alone, the loads of all
    // of a warp's rows in flight): a knob to time, not a default; it builds and assembles.
    for knobs in [def.clone().with("L2R", "unrolled"), def.clone().with("L2R", "unrolled").with("FULLC", 1i64)] {
        let k = chunk_kernels(&fk, &knobs).0;
        assembled(&k);
    }
}

/// `USTATE=1` (U formed in the state pass): the kernels of the six FlashKDA presets (every in-kernel option, both
/// state-pass value-block widths and rings they resolve to) and of the exact path and chunk 64 assemble with no more
/// spill than their default counterparts may have.
#[test]
fn ustate_kernels_compile() {
    let op = kda::Kda;
    let us = op.default_knobs().with(kda::USTATE_KNOB, 1i64);
    let mut names = std::collections::BTreeSet::new();
    for p in op.bench_presets().iter().filter(|p| p.name.ends_with(kda::FLASHKDA_SUFFIX)) {
        for k in op.kernels(p, &us).unwrap() {
            assert!(k.name.contains("_us"), "{}", k.name);
            if names.insert(k.name.clone()) {
                assemble(&k);
            }
        }
    }
    let base = [("B", 1i64), ("T", 8192), ("H", 8), ("K", 128), ("V", 128), ("h0", 1)];
    for (safe, chunk) in [(0i64, 32i64), (1, 64)] {
        let dims: Vec<(&str, i64)> = base.iter().copied().chain([("safe", safe)]).collect();
        let (a, b) = chunk_kernels(&dims, &us.clone().with("CHUNK", chunk));
        assemble(&a);
        assemble(&b);
    }
}

/// `IMAP=rows` (Qbar, Kbar and the L2 norms in one row-major pass) assembles within the default kernels' spill
/// allowance at the FlashKDA options and on the plain safe path, with and without the full-chunk copy (ptxas 13.0,
/// 2026-12-07: 0 bytes at the FlashKDA options, where the default kernel spills 4). `IMAP=ops` (the diagonal
/// operands in the same pass) spills 24 bytes there under the 80-register cap: a knob to time, it builds and
/// assembles.
#[test]
fn row_map_knobs_compile() {
    let (fk, plain) = fk_and_plain();
    let def = kda_knobs_before_the_solve();
    for dims in [&fk, &plain] {
        for knobs in [def.clone().with("IMAP", "rows"), def.clone().with("IMAP", "rows").with("FULLC", 0i64)] {
            let k = chunk_kernels(dims, &knobs).0;
            assert!(k.name.ends_with("_rq"), "{}", k.name);
            assemble(&k);
        }
        let k = chunk_kernels(dims, &def.clone().with("IMAP", "ops")).0;
        assert!(k.name.ends_with("_rq_ro"), "{}", k.name);
        assembled(&k);
    }
}

/// `IFOLD=1` on the default kernel (`IMAP=ops`) at the FlashKDA options and on the plain safe path, with and
/// without the full-chunk copy: at the FlashKDA options it assembles within the default kernels' spill allowance
/// (ptxas 13.0, 2026-12-07: 0 bytes, where `IMAP=ops` without the fold spills 24); on the plain safe path it is the
/// kernel without the knob. `IFOLD=2` builds and assembles at the FlashKDA options.
#[test]
fn folded_factors_compile() {
    let (fk, plain) = fk_and_plain();
    let def = kda_knobs_before_the_solve().with("IFOLD", 1i64);
    for (dims, folds) in [(&fk, true), (&plain, false)] {
        for knobs in [def.clone(), def.clone().with("FULLC", 0i64)] {
            let k = chunk_kernels(dims, &knobs).0;
            // (The plain safe path has neither the in-kernel norms nor a gate form: nothing to fold, the default
            // kernel, which spills 20 bytes on main too, 2026-12-07.)
            assert_eq!(k.name.ends_with("_if"), folds, "{}", k.name);
            if folds {
                assemble(&k);
            }
        }
    }
    // `IMAP=gate` (the gate form in the row layout) alone and with IFOLD=1: within the spill allowance.
    for knobs in [kda_knobs_before_the_solve().with("IMAP", "gate"), def.clone().with("IMAP", "gate")] {
        let k = chunk_kernels(&fk, &knobs).0;
        assert!(k.name.contains("_rg"), "{}", k.name);
        assemble(&k);
    }
    // `IFOLD=2` (R by the row pass, full chunks): builds and assembles; ptxas 13.0 spills 28 bytes at the FlashKDA
    // options under the 80-register cap (2026-12-07), a knob to time.
    let k = chunk_kernels(&fk, &def.clone().with("IFOLD", 2i64)).0;
    assert!(k.name.ends_with("_if_rr"), "{}", k.name);
    assembled(&k);
}

/// `MADDR=origin`: the intra kernel's `mma.sync` loads come from per-thread origins (`_oa`, the prelude's
/// `mma_ss_o`), and it assembles within the operator's allowance at the FlashKDA options (ptxas 13.0, 2026-12-07:
/// no spill) and on the plain safe path (4 bytes, 0 with `MADDR=load`); `MADDR=load` (the default) is the per-load
/// kernel.
#[test]
fn mma_origin_kernels_compile() {
    let (fk, plain) = fk_and_plain();
    for dims in [&fk, &plain] {
        let k = chunk_kernels(dims, &kda::default_knobs().with("MADDR", "origin")).0;
        let cu = k3k_codegen::render(&k).unwrap();
        assert!(k.mma_origins && k.name.contains("_bf16_oa_") && cu.contains("k3k::mma_ss_o<"), "{}", k.name);
        assemble(&k);
        let per_load = chunk_kernels(dims, &kda::default_knobs()).0;
        let cu = k3k_codegen::render(&per_load).unwrap();
        assert!(
            !per_load.mma_origins && !per_load.name.contains("_oa") && !cu.contains("mma_ss_o<"),
            "{}",
            per_load.name
        );
        assert_eq!(per_load.name, k.name.replace("_oa_", "_"));
    }
}

/// `IWU=wide` (the default): W and U go to the scratch by 16-byte stores at the FlashKDA options too (`_ww`, no spill
/// and no stack frame with ptxas 13.0, 2026-12-07; `auto` keeps the pair stores there); the plain variants store so
/// under either value, so their kernel does not change.
#[test]
fn wide_wu_store_kernels_compile() {
    let (fk, plain) = fk_and_plain();
    let (wide, auto) = (kda::default_knobs(), kda::default_knobs().with("IWU", "auto"));
    assert_eq!(wide.str("IWU").unwrap(), "wide");
    let k = chunk_kernels(&fk, &wide).0;
    assert!(k.name.ends_with("_ww"), "{}", k.name);
    let r = assembled(&k);
    assert!(!r.spills_over(0) && r.stack_frame_bytes == 0, "{}: {r:?}", k.name);
    assert_eq!(chunk_kernels(&fk, &auto).0.name, k.name.trim_end_matches("_ww"));
    assert_eq!(chunk_kernels(&plain, &wide), chunk_kernels(&plain, &auto), "plain: already wide");
}

/// `IWU=pinned`: `wide`, and the intra kernel's 16-byte global stores (Qbar and Kbar rows) by one `st.global.v4`
/// ([`Kernel::pinned_wide_stores`]). The IR is `wide`'s but for the flag and the name (`_pv`), the state pass does
/// not change, the CUDA calls the pinned form where `wide`'s calls the plain one, and it assembles with no spill
/// at the FlashKDA options and on the plain safe path.
#[test]
fn pinned_store_kernels_compile() {
    let (fk, plain) = fk_and_plain();
    let (wide, pinned) = (kda::default_knobs(), kda::default_knobs().with("IWU", "pinned"));
    for dims in [&fk, &plain] {
        let ((kw, sw), (kp, sp)) = (chunk_kernels(dims, &wide), chunk_kernels(dims, &pinned));
        assert_eq!(sw, sp, "{dims:?}: the state pass does not change");
        assert!(kp.pinned_wide_stores && !kw.pinned_wide_stores, "{dims:?}");
        assert_eq!(kp.name, format!("{}_pv", kw.name));
        assert_eq!(Kernel { name: kw.name.clone(), pinned_wide_stores: false, ..kp.clone() }, kw, "{dims:?}");
        let (cw, cp) = (render(&kw).unwrap(), render(&kp).unwrap());
        assert!(!cw.contains("st_wide_v"), "{}", kw.name);
        assert_eq!(cp.matches("k3k::st_wide_v<").count(), cw.matches("k3k::st_wide<8>(p_").count(), "{}", kp.name);
        let r = assembled(&kp);
        assert!(!r.spills_over(known_spill(&kp)) && r.stack_frame_bytes <= known_spill(&kp), "{}: {r:?}", kp.name);
    }
    let cp = render(&chunk_kernels(&fk, &pinned).0).unwrap();
    assert!(cp.contains("k3k::st_wide_v<8>(p_qb") && cp.contains("k3k::st_wide_v<8>(p_kb"), "FlashKDA options");
}

/// `ISOLVE=1` (the forward substitution by 16-byte rows, N stored transposed) and `IREPL=1` (the diagonal tiles and
/// the [C, C] totals solo: no replica work) assemble at the FlashKDA options with no spill when `IREPL=1` is in the
/// set (ptxas 13.0, 2026-12-07; the kernel before both spills 4 bytes there); `ISOLVE=1` alone spills 8 bytes there
/// since the bias tile went (`IMAP=gate` reads the bias from global memory; 0 before), within the operator's
/// allowance for these kernels. On the plain safe path (where the kernel before both spills 20 bytes) every set with
/// `IREPL=1` spills none, `ISOLVE=1` alone 36 bytes (printed, not asserted).
/// `IREPL=1`'s CUDA guards the solo tiles' statements by the replica test. `ISOLVE=2` (the off-diagonal products
/// moved, full chunks) builds and assembles (12 bytes spilled alone at the FlashKDA options, 0 with `IREPL=1`).
#[test]
fn solve_and_replica_knobs_compile() {
    let (fk, plain) = fk_and_plain();
    let d = kda_knobs_before_the_solve();
    for (set, suffix) in [
        (d.clone().with("ISOLVE", 1i64), "_sw"),
        (d.clone().with("IREPL", 1i64), "_so"),
        (d.clone().with("ISOLVE", 1i64).with("IREPL", 1i64), "_sw_so"),
        (d.clone().with("ISOLVE", 2i64).with("IREPL", 1i64), "_sw_se_so"),
    ] {
        let k = chunk_kernels(&fk, &set).0;
        assert!(k.name.ends_with(suffix), "{}", k.name);
        let r = assembled(&k);
        if !suffix.ends_with("_so") {
            assert!(r.stack_frame_bytes <= known_spill(&k), "{}: {r:?}", k.name);
        } else {
            assert!(r.spill_store_bytes == 0 && r.stack_frame_bytes == 0, "{}: {r:?}", k.name);
            let cu = k3k_codegen::render(&k).unwrap();
            assert!(cu.matches("::L::G::replica() == 0) {").count() >= 5, "{}: no replica guards", k.name);
        }
        let k = chunk_kernels(&plain, &set).0;
        let r = assembled(&k);
        if suffix.ends_with("_so") {
            assert!(r.spill_store_bytes == 0 && r.stack_frame_bytes == 0, "{}: {r:?}", k.name);
        }
    }
    let k = chunk_kernels(&fk, &d.with("ISOLVE", 2i64)).0;
    assert!(k.name.ends_with("_sw_se"), "{}", k.name);
    assembled(&k);
}
