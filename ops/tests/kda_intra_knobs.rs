//! The intra kernel's instruction-cutting knobs of 2026-12-07 (issue 42), on the CPU interpreter and the Cranelift
//! JIT: `FULLC=1` (full chunks on a copy of the phases with a constant length) computes the same bits as the
//! generic kernel on sequences with full and partial chunks, both paths, every gate form; `GSIG=fast` (the gate's
//! sigmoid from `ex2.approx` and `rsqrt`) changes the outputs, stays within SEMANTICS.md section 3 of the f64
//! recurrence, and leaves the forms without that sigmoid alone; `L2R=unrolled` (the L2 norms' column loop unrolled)
//! computes the same bits; `ISOLVE` and `IREPL` (the forward substitution's wide accesses, the early off-diagonal
//! products, the solo diagonal tiles) compute the same bits.

use k3k_ir::Knobs;
use k3k_ops::kda::{self, FLASHKDA_OPTIONS, KdaData, KdaProblem, Launch};
use k3k_ops::op::Preset;
use k3k_ops::plan::{Executor, Outputs};

#[path = "common/plan_run.rs"]
mod plan_run;
use plan_run::{kda_knobs_before_the_solve, run_plan_jit, seed};

fn problem(dims: &[(&str, i64)]) -> KdaProblem {
    KdaProblem::from_preset(&Preset::new("test", dims)).unwrap_or_else(|e| panic!("{dims:?}: {e}"))
}

/// Outputs of a problem at `knobs` on the interpreter and the JIT, each checked against the f64 recurrence.
fn checked(pb: &KdaProblem, d: &KdaData, knobs: &Knobs, seed: u64) -> Vec<Outputs> {
    let plan = kda::chunk_plan(pb, d, knobs).unwrap();
    let (pairs, scope) = kda::check_scope(pb, seed);
    let outs = vec![Executor::Cpu.run(&plan).unwrap(), run_plan_jit(&plan)];
    for (ex, out) in ["cpu-interp", "cpu-jit"].iter().zip(&outs) {
        let r = kda::check_pairs(pb, d, out, &pairs, scope.clone()).unwrap();
        eprintln!("{} [{knobs}] {ex}: rel {:.3e}", pb_name(pb), r.max_rel_err);
        assert!(r.passed, "{} [{knobs}] on {ex}, seed {seed}: {} (rel {:.3e})", pb_name(pb), r.detail, r.max_rel_err);
    }
    outs
}

fn pb_name(pb: &KdaProblem) -> String {
    format!(
        "{:?} T{} H{} HV{} K{} V{} safe={} gate={}",
        pb.lens,
        pb.t,
        pb.h,
        pb.hv,
        pb.dk,
        pb.dv,
        pb.safe,
        pb.gate.name()
    )
}

fn same_bits(a: &Outputs, b: &Outputs, what: &str) {
    for name in ["o", "ht"] {
        assert_eq!(a.get(name).unwrap().data, b.get(name).unwrap().data, "{what}: {name} differs");
    }
}

/// The cases: FlashKDA's options on a varlen batch whose sequences end in full and partial chunks (chunk 32: 64
/// tokens, 40, 0, 96 + 5), gate 1 with GVA at small heads, the exact path with the standard gate and extreme
/// pre-computed gates, the plain safe path with pre-computed gates at chunk 64.
fn cases() -> Vec<(Vec<(&'static str, i64)>, i64)> {
    let fk: Vec<(&str, i64)> = [("N", 4i64), ("L0", 64), ("L1", 40), ("L2", 0), ("L3", 101), ("H", 1)]
        .into_iter()
        .chain(FLASHKDA_OPTIONS)
        .collect();
    vec![
        (fk, 0),
        (
            vec![("B", 2), ("T", 80), ("H", 1), ("HV", 2), ("K", 32), ("V", 32), ("safe", 1), ("gate", 1), ("bias", 1)],
            32,
        ),
        (
            vec![
                ("B", 1),
                ("T", 70),
                ("H", 1),
                ("K", 64),
                ("V", 32),
                ("safe", 0),
                ("gate", 2),
                ("bias", 1),
                ("l2norm", 1),
            ],
            32,
        ),
        (vec![("B", 1), ("T", 96), ("H", 2), ("K", 32), ("V", 64), ("safe", 0), ("extreme", 1)], 32),
        (vec![("B", 1), ("T", 130), ("H", 1), ("K", 32), ("V", 32), ("safe", 1)], 64),
    ]
}

/// The default knobs with the intra kernel's four options of before 2026-12-07 (generic chunks, the exact
/// sigmoid, the norms' loop, the tile maps): the base each option is compared against.
fn generic() -> Knobs {
    kda_knobs_before_the_solve().with("FULLC", 0i64).with("GSIG", "exact").with("L2R", "loop").with("IMAP", "tiles")
}

/// `FULLC=1`: the same bits as the generic kernel (interpreter and JIT), within the reference's tolerance; its
/// intra kernel is named `_fc`, the state pass is unchanged.
#[test]
fn full_chunk_copy_is_bit_identical() {
    let s = seed();
    for (i, (dims, chunk)) in cases().into_iter().enumerate() {
        let pb = problem(&dims);
        let d = KdaData::generate(&pb, s ^ i as u64);
        let base = generic().with("CHUNK", chunk);
        let fc = base.clone().with("FULLC", 1i64);
        let (k0, k1) = (
            kda::chunk_kernels(&pb, &Launch::resolve(&base, &pb).unwrap()).unwrap(),
            kda::chunk_kernels(&pb, &Launch::resolve(&fc, &pb).unwrap()).unwrap(),
        );
        assert_eq!(k1.0.name, format!("{}_fc", k0.0.name));
        assert_eq!(k0.1, k1.1, "the state pass does not change");
        let (a, b) = (checked(&pb, &d, &base, s), checked(&pb, &d, &fc, s));
        for (x, y) in a.iter().zip(&b) {
            same_bits(x, y, &format!("{dims:?} FULLC=1"));
        }
        // `L2R=unrolled`: the same sums in the same order (a new kernel only with the in-kernel L2 norms).
        let l2u = base.clone().with("L2R", "unrolled");
        let k2 = kda::chunk_kernels(&pb, &Launch::resolve(&l2u, &pb).unwrap()).unwrap().0;
        if pb.l2norm {
            assert_eq!(k2.name, format!("{}_l2u", k0.0.name));
            for knobs in [l2u.clone(), l2u.clone().with("FULLC", 1i64)] {
                let c = checked(&pb, &d, &knobs, s);
                for (x, y) in a.iter().zip(&c) {
                    same_bits(x, y, &format!("{dims:?} [{knobs}]"));
                }
            }
        } else {
            assert_eq!(k2, k0.0, "L2R without the in-kernel norms");
        }
    }
}

/// `GSIG=fast`: the lb*sigmoid forms' outputs change (the kernel differs) and stay within the tolerance of the f64
/// recurrence; with `FULLC=1` too; the standard form and pre-computed gates get the same kernel as without it.
#[test]
fn fast_gate_sigmoid_matches_reference() {
    let s = seed();
    // Whether any output bit moved: on a small problem the sigmoid's ~1e-7 difference can round away in every
    // output (f16 scratch, bf16 o), so the effect is asserted over all the cases, not per case.
    let mut changed = false;
    for (i, (dims, chunk)) in cases().into_iter().enumerate() {
        let pb = problem(&dims);
        let d = KdaData::generate(&pb, s ^ i as u64);
        let base = generic().with("CHUNK", chunk);
        let fast = base.clone().with("GSIG", "fast");
        let k0 = kda::chunk_kernels(&pb, &Launch::resolve(&base, &pb).unwrap()).unwrap().0;
        let k1 = kda::chunk_kernels(&pb, &Launch::resolve(&fast, &pb).unwrap()).unwrap().0;
        if !matches!(pb.gate, kda::GateForm::Safe { .. }) {
            assert_eq!(k0, k1, "{dims:?}: GSIG applies to the lb*sigmoid forms only");
            continue;
        }
        assert_eq!(k1.name, format!("{}_gsf", k0.name));
        let a = checked(&pb, &d, &base, s);
        let b = checked(&pb, &d, &fast, s);
        changed |= ["ht", "o"].iter().any(|t| a[0].get(t).unwrap().data != b[0].get(t).unwrap().data);
        let both = checked(&pb, &d, &fast.clone().with("FULLC", 1i64), s);
        same_bits(&both[0], &b[0], &format!("{dims:?} GSIG=fast FULLC=1"));
    }
    assert!(changed, "GSIG=fast left every output of every case bit-identical (seed {s}): is the knob applied?");
}

/// `IMAP=rows` / `ops` / `gate` (Qbar, Kbar, the L2 norms and, with `ops` on the safe path at chunk 32, the diagonal
/// operands in one row-major pass of wide accesses; `gate` also the gate form, the same bits as `ops`, with and
/// without `IFOLD=1`): every case is within the tolerance of the f64 recurrence on the
/// interpreter and the JIT, which agree bit for bit; without the in-kernel norms the pass computes the tile maps'
/// expressions (the same bits as `IMAP=tiles`), with them only the norms' sums run in another order. Both with
/// the full-chunk copy (the defaults) and without it; the state pass does not change.
#[test]
fn row_maps_match_reference() {
    let s = seed();
    for (i, (dims, chunk)) in cases().into_iter().enumerate() {
        let pb = problem(&dims);
        let d = KdaData::generate(&pb, s ^ i as u64);
        // (The base takes the tile maps: `IMAP=ops` is the default since 2026-12-07 09:05 UTC.)
        let tiles = kda_knobs_before_the_solve().with("CHUNK", chunk).with("IMAP", "tiles");
        // (The full-chunk copy's outputs per IMAP value, compared with the generic copy's: the same bits, e.g. the
        // folded midpoint anchor `t0 + 8` of the full copy.)
        let mut full: Vec<Outputs> = vec![];
        for (fi, base) in [tiles.clone(), tiles.with("FULLC", 0i64)].into_iter().enumerate() {
            let k0 = kda::chunk_kernels(&pb, &Launch::resolve(&base, &pb).unwrap()).unwrap();
            let a = checked(&pb, &d, &base, s);
            for (mi, m) in ["rows", "ops", "gate"].into_iter().enumerate() {
                let knobs = base.clone().with("IMAP", m);
                let l = Launch::resolve(&knobs, &pb).unwrap();
                let k1 = kda::chunk_kernels(&pb, &l).unwrap();
                assert_eq!(k0.1, k1.1, "{dims:?} IMAP={m}: the state pass does not change");
                let ops = m != "rows" && pb.safe && l.midoff;
                // (`gate` with a precomputed gate is `ops`: no gate form to move.)
                let gate = if m == "gate" && pb.gate != kda::GateForm::Pre { "_rg" } else { "" };
                let want = format!("{}_rq{}{gate}", k0.0.name, if ops { "_ro" } else { "" });
                assert_eq!(k1.0.name, want, "{dims:?} IMAP={m}: every case's shape takes the row pass");
                let b = checked(&pb, &d, &knobs, s);
                same_bits(&b[0], &b[1], &format!("{dims:?} [{knobs}] interpreter vs JIT"));
                if fi == 0 {
                    full.push(b[0].clone());
                } else {
                    same_bits(&full[mi], &b[0], &format!("{dims:?} IMAP={m}: FULLC=1 vs FULLC=0"));
                }
                if m == "gate" {
                    // The gate form in the row layout: the same expressions and scan order as IMAP=ops' tile map.
                    let ops_out = checked(&pb, &d, &base.clone().with("IMAP", "ops"), s);
                    same_bits(&ops_out[0], &b[0], &format!("{dims:?} [{knobs}] vs IMAP=ops"));
                    let f1 = |k: &Knobs| k.clone().with("IFOLD", 1i64);
                    let (x, y) =
                        (checked(&pb, &d, &f1(&knobs), s), checked(&pb, &d, &f1(&base.clone().with("IMAP", "ops")), s));
                    same_bits(&x[0], &y[0], &format!("{dims:?} [{knobs}] IFOLD=1 vs IMAP=ops IFOLD=1"));
                    same_bits(&x[0], &x[1], &format!("{dims:?} [{knobs}] IFOLD=1 interpreter vs JIT"));
                }
                if !pb.l2norm {
                    same_bits(&a[0], &b[0], &format!("{dims:?} [{knobs}] vs IMAP=tiles"));
                }
            }
        }
    }
}

/// `IFOLD=1` (the row pass's norm factors folded into q and k once, the fast gate sigmoid's constants once per
/// block): every case within the tolerance of the f64 recurrence on the interpreter and the JIT, which agree bit for
/// bit, with and without the full-chunk copy; the kernel is named `_if` where the fold applies (the lb*sigmoid gate
/// forms with `GSIG=fast`, or the row pass with the in-kernel norms), elsewhere it is the kernel without the knob;
/// the state pass does not change; some output bit moves over the cases (the knob is applied). `IFOLD=2` (R built by
/// the row pass in full chunks, `IMAP=ops`): the same checks, named `_if_rr`. (Its R differs from `IFOLD=1`'s by an
/// f32 rounding, `(beta (k n_k)) 2^G~` against `((beta k) 2^G~) n_k`, which the f16 scratch usually absorbs: no
/// bit-difference assertion; a wrong R, or a row the pass left, fails the f64 check.)
#[test]
fn folded_factors_match_reference() {
    let s = seed();
    let mut changed = false;
    for (i, (dims, chunk)) in cases().into_iter().enumerate() {
        let pb = problem(&dims);
        let d = KdaData::generate(&pb, s ^ i as u64);
        for base in [
            kda_knobs_before_the_solve().with("CHUNK", chunk),
            kda_knobs_before_the_solve().with("CHUNK", chunk).with("FULLC", 0i64),
        ] {
            let l0 = Launch::resolve(&base, &pb).unwrap();
            let k0 = kda::chunk_kernels(&pb, &l0).unwrap();
            let knobs = base.clone().with("IFOLD", 1i64);
            let k1 = kda::chunk_kernels(&pb, &Launch::resolve(&knobs, &pb).unwrap()).unwrap();
            assert_eq!(k0.1, k1.1, "{dims:?} IFOLD=1: the state pass does not change");
            let safe_gate = matches!(pb.gate, kda::GateForm::Safe { .. });
            let applies = (safe_gate && l0.fast_gate_sigmoid) || (pb.l2norm && k0.0.name.contains("_rq"));
            if !applies {
                assert_eq!(k0.0, k1.0, "{dims:?}: IFOLD=1 has nothing to fold here");
                continue;
            }
            assert_eq!(k1.0.name, format!("{}_if", k0.0.name), "{dims:?}");
            let a = checked(&pb, &d, &base, s);
            let b = checked(&pb, &d, &knobs, s);
            same_bits(&b[0], &b[1], &format!("{dims:?} [{knobs}] interpreter vs JIT"));
            changed |= ["ht", "o"].iter().any(|t| a[0].get(t).unwrap().data != b[0].get(t).unwrap().data);
            // `IFOLD=2`: R by the row pass where the diagonal operands are built there too (`_ro`), in the full-chunk
            // copy (`_fc`); the partial chunks of the varlen case take the generic copy in the same kernel.
            let knobs2 = base.clone().with("IFOLD", 2i64);
            let k2 = kda::chunk_kernels(&pb, &Launch::resolve(&knobs2, &pb).unwrap()).unwrap();
            assert_eq!(k1.1, k2.1, "{dims:?} IFOLD=2: the state pass does not change");
            if !(k0.0.name.contains("_ro") && k0.0.name.contains("_fc")) {
                assert_eq!(k1.0, k2.0, "{dims:?}: IFOLD=2 is IFOLD=1 here");
                continue;
            }
            assert_eq!(k2.0.name, format!("{}_rr", k1.0.name), "{dims:?}");
            let c = checked(&pb, &d, &knobs2, s);
            same_bits(&c[0], &c[1], &format!("{dims:?} [{knobs2}] interpreter vs JIT"));
        }
    }
    assert!(changed, "IFOLD=1 left every output of every case bit-identical (seed {s}): is the knob applied?");
}

/// `ISOLVE=1` (the forward substitution by 16-byte rows of L, N_ii stored transposed and read as a transposed A
/// operand) and `ISOLVE=2` (also the off-diagonal tile's products in the diagonal products' segment, one barrier
/// fewer, on the safe path with `ARENA=2`'s `_sl` kernel, full chunks only): the same values in the same order, so
/// the same bits as the kernel without the knob, on the interpreter and the JIT, every case (varlen partial chunks,
/// GVA, the exact path with its extreme gates, chunk 64), with and without the full-chunk copy, with the tile maps,
/// and beside `IFOLD=2`; each within the tolerance of the f64 recurrence. Names `_sw` / `_sw_se`; `USTATE=1` keeps
/// its kernel (its factor output reads N row by row); the state pass does not change. `IREPL=1` (the diagonal tiles
/// and the [C, C] totals solo, `_so`: on the GPU their replica warps skip them; the CPU backends hold whole tiles)
/// alone and with both: the validator accepts every case's kernel (the solo tiles' reads), the same bits.
#[test]
fn wide_solve_is_bit_identical() {
    let s = seed();
    let mut early = 0;
    for (i, (dims, chunk)) in cases().into_iter().enumerate() {
        let pb = problem(&dims);
        let d = KdaData::generate(&pb, s ^ i as u64);
        let dflt = kda_knobs_before_the_solve().with("CHUNK", chunk);
        for base in [
            dflt.clone(),
            dflt.clone().with("FULLC", 0i64),
            dflt.clone().with("IMAP", "tiles"),
            dflt.clone().with("IFOLD", 2i64),
        ] {
            let l0 = Launch::resolve(&base, &pb).unwrap();
            let k0 = kda::chunk_kernels(&pb, &l0).unwrap();
            let a = checked(&pb, &d, &base, s);
            for (v, repl) in [(1i64, 0i64), (2, 0), (0, 1), (1, 1), (2, 1)] {
                let knobs = base.clone().with("ISOLVE", v).with("IREPL", repl);
                let k1 = kda::chunk_kernels(&pb, &Launch::resolve(&knobs, &pb).unwrap()).unwrap();
                assert_eq!(k0.1, k1.1, "{dims:?} [{knobs}]: the state pass does not change");
                let se = v == 2 && pb.safe && k0.0.name.contains("_sl");
                early += se as usize;
                let want = format!(
                    "{}{}{}{}",
                    k0.0.name,
                    if v > 0 { "_sw" } else { "" },
                    if se { "_se" } else { "" },
                    if repl > 0 { "_so" } else { "" }
                );
                assert_eq!(k1.0.name, want, "{dims:?} [{knobs}]");
                let b = checked(&pb, &d, &knobs, s);
                same_bits(&b[0], &b[1], &format!("{dims:?} [{knobs}] interpreter vs JIT"));
                same_bits(&a[0], &b[0], &format!("{dims:?} [{knobs}] vs without ISOLVE"));
            }
        }
        // `USTATE=1`: the element-wise solve (its factor output reads sN by rows).
        let us = dflt.clone().with("USTATE", 1i64);
        let ku = kda::chunk_kernels(&pb, &Launch::resolve(&us, &pb).unwrap()).unwrap();
        let ku1 = kda::chunk_kernels(&pb, &Launch::resolve(&us.clone().with("ISOLVE", 2i64), &pb).unwrap()).unwrap();
        assert_eq!(ku, ku1, "{dims:?}: ISOLVE beside USTATE=1");
    }
    assert!(early > 0, "no case took ISOLVE=2's early products");
}

/// `IWU=wide` (W and U to the scratch by 16-byte stores, fragments regrouped across a quad, also with the in-kernel
/// options): the same values to the same places, so the same bits as `auto` on the interpreter and the JIT, every
/// case (varlen partial chunks, whose rows past the length are not stored, GVA, the exact path, chunk 64); the
/// kernel is named `_ww` where it changes (not on the plain variants, which store so already); the state pass does
/// not change.
#[test]
fn wide_wu_stores_are_bit_identical() {
    let s = seed();
    let mut changed = 0;
    for (i, (dims, chunk)) in cases().into_iter().enumerate() {
        let pb = problem(&dims);
        let d = KdaData::generate(&pb, s ^ (0x1e0 + i as u64));
        let base = kda::default_knobs().with("CHUNK", chunk).with("IWU", "auto");
        let wide = base.clone().with("IWU", "wide");
        let [k0, k1] = [&base, &wide].map(|k| kda::chunk_kernels(&pb, &Launch::resolve(k, &pb).unwrap()).unwrap());
        assert_eq!(k0.1, k1.1, "{dims:?}: the state pass does not change");
        if pb.spec().plain() {
            assert_eq!(k0.0, k1.0, "{dims:?}: the plain variant stores W and U wide already");
            continue;
        }
        changed += 1;
        assert_eq!(k1.0.name, format!("{}_ww", k0.0.name), "{dims:?}");
        let (a, b) = (checked(&pb, &d, &base, s), checked(&pb, &d, &wide, s));
        same_bits(&b[0], &b[1], &format!("{dims:?} IWU=wide interpreter vs JIT"));
        same_bits(&a[0], &b[0], &format!("{dims:?} IWU=wide vs auto"));
    }
    assert!(changed >= 3, "only {changed} cases had pair stores to widen");
}
