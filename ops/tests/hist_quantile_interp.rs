//! `hist_quantile` on the CPU interpreter against `k3k_reference::quantile`: counts exact, alpha exact, the
//! located quantile equal to the reference's histogram quantile (f32 rounding) and within one bin (two-pass:
//! bin / B) of the exact sort; ties, T < E, all-equal columns, values on bin edges and at lo / hi; NaN and
//! shape errors; shard merging; histogram conversions; the atomic flush variant.
use k3k_ir::{DType, HostTensor, Knobs};
use k3k_ops::OpError;
use k3k_ops::hist_quantile::*;
use k3k_ops::op::{Instance, Operator, Preset};
use k3k_ops::plan::{Executor, Outputs};
use k3k_reference::quantile::{Histogram, hist_quantile_columns, qb_bias};
use rand::{Rng, SeedableRng, rngs::StdRng};

fn run(inst: &dyn Instance, knobs: &Knobs) -> Outputs {
    let plan = inst.plan(knobs).unwrap();
    Executor::Cpu.run(&plan).unwrap_or_else(|e| panic!("{}: {e}", inst.describe()))
}

fn assert_ok(inst: &dyn Instance, knobs: &Knobs) -> Outputs {
    let out = run(inst, knobs);
    let r = inst.check(&out).unwrap();
    assert!(r.passed, "{}: {} ({})", inst.describe(), r.detail, r.scope);
    out
}

fn qb(t: i64, e: i64, k: i64, bins: i64, two: i64, data: i64) -> Preset {
    Preset::new("case", &[("T", t), ("E", e), ("k", k), ("B", bins), ("two", two), ("data", data)])
}

#[allow(clippy::too_many_arguments)]
fn column(t: i64, e: i64, bins: i64, two: i64, data: i64, frac_ppm: i64, lo: i64, hi: i64) -> Preset {
    Preset::new(
        "case",
        &[
            ("T", t),
            ("E", e),
            ("B", bins),
            ("two", two),
            ("data", data),
            ("frac_ppm", frac_ppm),
            ("lo_milli", lo),
            ("hi_milli", hi),
        ],
    )
}

fn seed() -> u64 {
    let s = rand::rng().random();
    eprintln!("seed {s}");
    s
}

#[test]
fn random_cases_both_operators() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let ops: [Box<dyn Operator>; 2] = [Box::new(HistQuantileQb), Box::new(HistQuantileColumn)];
    for op in &ops {
        for _ in 0..6 {
            let p = op.random_case(&mut rng);
            let inst = op.instance(&p, rng.random()).unwrap();
            assert_ok(inst.as_ref(), &op.default_knobs());
        }
    }
}

#[test]
fn qb_edge_cases() {
    let s = seed();
    // Wide partials (default) and packed u16 partials: the two locate reads.
    let packed = default_knobs().with("PPACK", "packed");
    for (i, p) in [
        qb(40, 37, 3, 64, 0, 0),    // random, odd E
        qb(5, 64, 16, 32, 1, 0),    // T < E, two passes
        qb(33, 17, 16, 16, 0, 1),   // ties, k = E - 1
        qb(20, 33, 32, 64, 1, 1),   // ties, two lane groups (k + 1 = 33)
        qb(17, 8, 2, 7, 0, 2),      // all-equal columns
        qb(25, 9, 0, 8, 1, 3),      // margins on bin edges, at lo and hi; k = 0
        qb(1, 1, 0, 1, 0, 0),       // one token, one expert, one bin
        qb(64, 32, 5, 100, 1, 3),   // edges, full lanes
        qb(24, 300, 20, 64, 0, 1),  // ties in long rows: more than 32 alpha candidates (warp alpha's ranking)
        qb(12, 1000, 31, 64, 1, 1), // k = 31, the largest warp-alpha k, masked lanes
        qb(9, 896, 16, 1024, 0, 0), // the benchmark's row shape
        qb(10, 96, 0, 32, 0, 3),    // k = 0, edges
        qb(1000, 40, 4, 64, 0, 0),  // many full groups of HU rows per histogram thread, then a tail
        qb(4500, 3, 1, 16, 1, 0),   // three token chunks (P = 3 partials to merge)
        qb(6200, 5, 2, 30, 0, 1),   // four chunks, ties
    ]
    .iter()
    .enumerate()
    {
        // Two tokens per warp and step (rows past T in the second half, odd T) with the packed partials.
        // The cp.async-ring alpha (three stages of 8 rows; two stages of 7 rows) and batched locate loads.
        let ring = default_knobs().with("ASEL", "ring");
        // The lean warp alpha (atomic candidate slots) with the branch-free bin rule: 8 warps, and 3 warps with
        // 16-expert histogram blocks and the packed partials.
        let lean = default_knobs().with("ASEL", "lean").with("HBIN", "select");
        for knobs in [
            default_knobs(),
            lean.clone(),
            lean.clone().with("AW", 3i64).with("HKB", 33i64).with("PPACK", "packed").with("HBLOCKS", 528i64),
            packed.clone().with("ATPW", 2i64).with("AW", 1i64),
            ring.clone().with("LU", 4i64),
            ring.with("AW", 7i64).with("ASTAGES", 2i64).with("PPACK", "packed").with("LU", 8i64),
        ] {
            let inst = HistQuantileQb.instance(p, s + i as u64).unwrap();
            assert_ok(inst.as_ref(), &knobs);
        }
    }
}

/// Rows where far more than 32 values tie at or above the (k+1)-th largest, or lie in a few lanes: the warp alpha kernel's ranking
/// fallback (and the shared-memory ranking of `ASEL=rank`) against the reference.
#[test]
fn qb_many_tied_alpha_candidates() {
    let (t, e) = (6usize, 300usize);
    let mut sc = vec![0f32; t * e];
    for r in 0..t {
        for c in 0..e {
            sc[r * e + c] = match r {
                0 => 0.25, // the whole row equal
                1 => {
                    if c % 3 == 0 {
                        0.75
                    } else {
                        0.5
                    }
                } // 100 tied maxima
                // 40 distinct large values in 4 lanes: more than 32 candidates without ties
                2 => {
                    if c % 32 < 4 {
                        0.5 + c as f32 / 1024.0
                    } else {
                        c as f32 / 4096.0
                    }
                }
                _ => ((c * 7 + r) % 40) as f32 / 40.0, // 8 copies of every level
            };
        }
    }
    let b = vec![0f32; e];
    let two = default_knobs().with("ATPW", 2i64);
    let ring = default_knobs().with("ASEL", "ring");
    for knobs in [
        default_knobs(),
        default_knobs().with("ASEL", "rank"),
        two.clone(),
        two.with("AW", 1i64),
        ring.clone(),
        ring.with("AW", 2i64).with("ASTAGES", 4i64),
        default_knobs().with("ASEL", "lean"),
        default_knobs().with("ASEL", "lean").with("AW", 1i64),
    ] {
        for k in [0usize, 16, 31] {
            let p = qb(t as i64, e as i64, k as i64, 64, 0, 0);
            let pb = Problem::from_preset(OP_QB, &p).unwrap();
            let inst = QbInstance::new(pb, sc.clone(), Some(b.clone()), 1).unwrap();
            assert_ok(&inst, &knobs);
        }
    }
}

#[test]
fn column_edge_cases() {
    let s = seed();
    for knobs in [default_knobs(), default_knobs().with("HBIN", "select")] {
        for (i, p) in [
            column(50, 7, 32, 0, 0, 500_000, 0, 1000),
            column(50, 7, 32, 1, 0, 900_000, -1000, 1000),
            column(30, 5, 16, 0, 1, 250_000, 0, 1000), // ties on a grid with hi itself (overflow)
            column(30, 5, 16, 1, 1, 1_000_000, 0, 1000),
            column(12, 3, 64, 1, 2, 0, -3000, 5000), // all-equal columns, fraction 0
            column(40, 6, 10, 0, 3, 333_333, 250, 750), // exactly on bin edges, lo, hi, one ulp below
            column(40, 6, 10, 1, 3, 666_667, 250, 750),
            column(1, 1, 1, 0, 0, 500_000, 0, 1000),
        ]
        .iter()
        .enumerate()
        {
            let inst = HistQuantileColumn.instance(p, s + i as u64).unwrap();
            assert_ok(inst.as_ref(), &knobs);
        }
    }
}

/// The branch-free bin rule (`HBIN=select`) on the values where its unconditional arithmetic is not the slot:
/// infinite plain values (the arithmetic gives inf or -inf), values just below `lo` whose scaled difference
/// underflows to -0 (a scale below 1/2 and `lo` = 0: `floor(-0) = -0` would be bin 0 without the range test),
/// `lo`, `hi`, one ulp around both, and far outside; counts exact against the reference and equal to the
/// branching rule's, with the wide, packed and atomic flushes.
#[test]
fn select_bin_rule_at_infinities_and_underflow() {
    let (t, e) = (37usize, 5usize);
    let tiny = f32::from_bits(1); // the smallest subnormal
    let levels = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -tiny,
        tiny,
        -1e-38,
        4.0,
        f32::from_bits(4.0f32.to_bits() - 1),
        f32::from_bits(4.0f32.to_bits() + 1),
        1.0,
        2.5,
        -1e30,
        1e30,
        3.999,
    ];
    let sc: Vec<f32> = (0..t * e).map(|i| levels[(i * 7 + i / e) % levels.len()]).collect();
    // [lo, hi) = [0, 4) with B = 1 (scale 0.25: -tiny * 0.25 rounds to -0) and B = 3 (scale 0.75).
    for bins in [1i64, 3] {
        let p = column(t as i64, e as i64, bins, 0, 0, 500_000, 0, 4000);
        let pb = Problem::from_preset(OP_COLUMN, &p).unwrap();
        let inst = QbInstance::new(pb, sc.clone(), None, 3).unwrap();
        let branch = assert_ok(&inst, &default_knobs());
        for knobs in [
            default_knobs().with("HBIN", "select"),
            default_knobs().with("HBIN", "select").with("MERGE", "atomic"),
            default_knobs().with("HBIN", "select").with("PPACK", "packed").with("HKB", 33i64),
        ] {
            let out = assert_ok(&inst, &knobs);
            assert_eq!(out.get("counts").unwrap(), branch.get("counts").unwrap(), "B{bins} {knobs}");
        }
    }
}

#[test]
fn atomic_flush_and_other_knobs() {
    let s = seed();
    let knob_sets = [
        default_knobs().with("MERGE", "atomic"),
        default_knobs().with("AW", 4i64).with("HT", 256i64).with("HU", 4i64).with("HKB", 33i64),
        default_knobs().with("HBLOCKS", 792i64).with("MERGE", "atomic"),
        default_knobs().with("HLAYOUT", "rows").with("ASEL", "rank"),
        default_knobs().with("AW", 1i64).with("ABPS", 1i64),
        default_knobs().with("HLAYOUT", "rows").with("MERGE", "atomic").with("HT", 256i64),
        default_knobs().with("HLAYOUT", "banks").with("HKB", 33i64).with("HU", 4i64).with("HFX", 32i64),
        default_knobs().with("HFX", 4i64).with("MERGE", "atomic"),
        default_knobs().with("HFX", 32i64).with("HT", 1024i64).with("HU", 4i64).with("HKB", 132i64),
        default_knobs().with("PPACK", "packed").with("HFX", 8i64).with("HBLOCKS", 792i64),
        default_knobs().with("PPACK", "packed").with("HFX", 32i64),
        default_knobs().with("ATPW", 2i64),
        default_knobs().with("ATPW", 2i64).with("AW", 4i64).with("ABPS", 3i64),
        default_knobs().with("ASEL", "ring").with("MERGE", "atomic").with("ABPS", 1i64),
        default_knobs().with("ASEL", "ring").with("AW", 3i64).with("ASTAGES", 3i64).with("LU", 4i64),
        default_knobs().with("PPACK", "packed").with("LU", 4i64).with("HBLOCKS", 792i64),
        default_knobs().with("ASEL", "lean").with("HBIN", "select").with("MERGE", "atomic").with("ABPS", 1i64),
        default_knobs()
            .with("ASEL", "lean")
            .with("AW", 2i64)
            .with("HBIN", "select")
            .with("HT", 256i64)
            .with("HU", 16i64),
        default_knobs().with("ASEL", "lean").with("ABPS", 6i64).with("HBIN", "select").with("HKB", 33i64),
        default_knobs().with("HBIN", "select").with("HLAYOUT", "rows"),
    ];
    for (i, kn) in knob_sets.iter().enumerate() {
        let inst = HistQuantileQb.instance(&qb(70, 40, 4, 64, 1, 0), s + i as u64).unwrap();
        assert_ok(inst.as_ref(), kn);
        let inst = HistQuantileColumn.instance(&column(70, 9, 48, 1, 0, 700_000, 0, 1000), s).unwrap();
        assert_ok(inst.as_ref(), kn);
    }
}

/// The chunked, parallel reference composition equals the reference's own one-call functions.
#[test]
fn reference_composition_matches_reference_functions() {
    let s = seed();
    for (i, p) in [qb(300, 24, 3, 64, 0, 0), qb(300, 24, 3, 64, 1, 0), qb(77, 10, 2, 16, 1, 1)].iter().enumerate() {
        let pb = Problem::from_preset(OP_QB, p).unwrap();
        let (sc, b) = generate(&pb, s + i as u64);
        let b = b.unwrap();
        let r = reference(&pb, &sc, Some(&b)).unwrap();
        let Kind::Qb { k } = pb.kind else { unreachable!() };
        let want = qb_bias(&sc, &b, pb.t, pb.e, k, -1.0, 1.0, pb.bins, pb.two_pass).unwrap();
        for (q, w) in r.quantile.iter().zip(&want) {
            assert_eq!(-q, *w);
        }
    }
    let pb = Problem::from_preset(OP_COLUMN, &column(200, 6, 32, 1, 0, 400_000, -1000, 1000)).unwrap();
    let (x, _) = generate(&pb, s);
    let r = reference(&pb, &x, None).unwrap();
    let want = hist_quantile_columns(&x, pb.t, pb.e, pb.target(), -1.0, 1.0, pb.bins, true).unwrap();
    assert_eq!(r.quantile, want);
}

#[test]
fn nan_and_bad_shapes_are_rejected() {
    let pb = Problem::from_preset(OP_QB, &qb(4, 8, 2, 16, 0, 0)).unwrap();
    let (mut s, b) = generate(&pb, 1);
    s[13] = f32::NAN;
    match QbInstance::new(pb.clone(), s.clone(), b.clone(), 1) {
        Err(OpError::BadInput { arg, why, .. }) => assert!(arg == "s" && why.contains("index 13"), "{arg}: {why}"),
        other => panic!("NaN accepted: {:?}", other.err()),
    }
    s[13] = f32::INFINITY;
    assert!(
        matches!(QbInstance::new(pb.clone(), s.clone(), b.clone(), 1), Err(OpError::BadInput { arg, .. }) if arg == "s")
    );
    s[13] = 0.5;
    let mut bb = b.clone().unwrap();
    bb[3] = f32::NAN;
    assert!(
        matches!(QbInstance::new(pb.clone(), s.clone(), Some(bb), 1), Err(OpError::BadInput { arg, .. }) if arg == "b")
    );
    assert!(
        matches!(QbInstance::new(pb.clone(), s[1..].to_vec(), b.clone(), 1), Err(OpError::BadInput { arg, .. }) if arg == "s")
    );
    assert!(QbInstance::new(pb, s, b, 1).is_ok());
    // column: NaN rejected, infinities binned (under/overflow)
    let pc = Problem::from_preset(OP_COLUMN, &column(3, 2, 8, 0, 0, 500_000, 0, 1000)).unwrap();
    let mut x = vec![0.5f32; 6];
    x[5] = f32::INFINITY;
    let inst = QbInstance::new(pc.clone(), x.clone(), None, 1).unwrap();
    assert_ok(&inst, &default_knobs());
    x[2] = f32::NAN;
    assert!(matches!(QbInstance::new(pc, x, None, 1), Err(OpError::BadInput { arg, .. }) if arg == "s"));
    // shapes and parameters
    let bad = |p: Preset, op: &str, arg: &str| match Problem::from_preset(op, &p) {
        Err(OpError::BadInput { arg: a, .. }) => assert_eq!(a, arg),
        other => panic!("accepted {p:?}: {other:?}"),
    };
    bad(qb(4, 8, 8, 16, 0, 0), OP_QB, "k"); // k >= E
    bad(qb(4, 8, 9, 16, 0, 0), OP_QB, "k");
    bad(qb(0, 8, 2, 16, 0, 0), OP_QB, "T");
    bad(qb(4, 0, 0, 16, 0, 0), OP_QB, "E");
    bad(qb(4, 2000, 2, 16, 0, 0), OP_QB, "E");
    bad(qb(4, 8, 2, 0, 0, 0), OP_QB, "B");
    bad(qb(4, 8, -1, 16, 0, 0), OP_QB, "k");
    bad(column(4, 8, 16, 0, 0, 2_000_000, 0, 1000), OP_COLUMN, "fraction");
    bad(column(4, 8, 16, 0, 0, 500_000, 1000, 1000), OP_COLUMN, "lo/hi");
}

/// Counting per shard of tokens and adding the counts gives the histogram of the whole (u32 bytes, as an
/// all-reduce would sum them); locating on the merged counts gives the whole run's bias.
#[test]
fn shards_merge_to_the_whole() {
    let s = seed();
    let mut rng = StdRng::seed_from_u64(s);
    let knobs = default_knobs();
    let whole_p = Problem::from_preset(OP_QB, &qb(90, 20, 3, 32, 0, 0)).unwrap();
    let (sc, b) = generate(&whole_p, s);
    let whole = QbInstance::new(whole_p.clone(), sc.clone(), b.clone(), s).unwrap();
    let out = assert_ok(&whole, &knobs);
    let whole_h = ExpertHistogram::from_tensor(out.get("counts").unwrap(), -1.0, 1.0).unwrap();
    let mut cuts: Vec<usize> = (0..3).map(|_| rng.random_range(1..90)).collect();
    cuts.extend([0, 90]);
    cuts.sort();
    cuts.dedup();
    let mut merged: Option<Vec<u32>> = None;
    for w in cuts.windows(2) {
        let pb = Problem { t: w[1] - w[0], ..whole_p.clone() };
        let shard = QbInstance::new(pb, sc[w[0] * 20..w[1] * 20].to_vec(), b.clone(), s).unwrap();
        let o = run(&shard, &knobs);
        let bytes = &o.get("counts").unwrap().data;
        let words: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        merged = Some(match merged {
            None => words,
            Some(m) => m.iter().zip(&words).map(|(a, b)| a + b).collect(),
        });
    }
    let merged_bytes: Vec<u8> = merged.unwrap().iter().flat_map(|v| v.to_le_bytes()).collect();
    let merged_h = ExpertHistogram::from_le_bytes(20, 32, -1.0, 1.0, &merged_bytes).unwrap();
    assert_eq!(merged_h, whole_h, "seed {s}, cuts {cuts:?}");
    // Locate once on the merged counts (the distributed flow), with the global target.
    let plan = locate_plan(&merged_h, whole_p.target(), true).unwrap();
    let o = Executor::Cpu.run(&plan).unwrap();
    assert_eq!(o.get("out").unwrap().to_f32_vec(), out.get("bias").unwrap().to_f32_vec());
}

#[test]
fn histogram_conversions() {
    let mut rng = StdRng::seed_from_u64(3);
    let x: Vec<f32> = (0..600).map(|_| rng.random_range(-1.2f32..1.2)).collect();
    let h = Histogram::build(&x, 100, 6, -1.0, 1.0, 10).unwrap();
    let eh = ExpertHistogram::from_reference(&h);
    assert_eq!(eh.to_reference().unwrap(), h);
    let json = serde_json::to_string(&eh).unwrap();
    assert_eq!(serde_json::from_str::<ExpertHistogram>(&json).unwrap(), eh);
    let bytes = eh.to_le_bytes().unwrap();
    assert_eq!(bytes.len(), 6 * 12 * 4);
    assert_eq!(ExpertHistogram::from_le_bytes(6, 10, -1.0, 1.0, &bytes).unwrap(), eh);
    let t = eh.to_tensor().unwrap();
    assert_eq!((t.dtype, t.shape.clone()), (DType::U32, vec![6, 12]));
    assert_eq!(ExpertHistogram::from_tensor(&t, -1.0, 1.0).unwrap(), eh);
    let mut twice = eh.clone();
    twice.merge(&eh).unwrap();
    assert!(twice.counts.iter().zip(&eh.counts).all(|(a, b)| *a == 2 * b));
    let other = ExpertHistogram { lo: -0.5, ..eh.clone() };
    assert!(twice.merge(&other).is_err());
    assert!(ExpertHistogram::from_le_bytes(6, 10, -1.0, 1.0, &bytes[4..]).is_err());
    assert!(ExpertHistogram::from_tensor(&HostTensor::zeros(DType::F32, &[2, 5]), 0.0, 1.0).is_err());
}

/// The benchmark-size check path (parallel reference, sampled exact-sort experts) accepts the reference's
/// own results and rejects one wrong count (no GPU needed; slow on few cores, so ignored by default).
#[test]
#[ignore]
fn preset_sized_check_path() {
    let op = HistQuantileQb;
    let p = op.bench_presets().into_iter().find(|p| p.name == "T65536 E896 k16 B4096").unwrap();
    let t0 = std::time::Instant::now();
    let pb = Problem::from_preset(OP_QB, &p).unwrap();
    let (s, b) = generate(&pb, 7);
    let inst = QbInstance::new(pb.clone(), s, b, 7).unwrap();
    let r = inst.reference().unwrap();
    eprintln!("inputs + reference: {:.1} s", t0.elapsed().as_secs_f64());
    let mut out = Outputs::default();
    out.0.insert("alpha".into(), HostTensor::from_f32(DType::F32, &[pb.t], r.alpha.as_ref().unwrap()));
    let counts: Vec<i64> = r.hist.counts.iter().map(|&c| c as i64).collect();
    out.0.insert("counts".into(), HostTensor::from_i64(DType::U32, &[pb.e, pb.bins + 2], &counts));
    let bias: Vec<f32> = r.quantile.iter().map(|q| -*q as f32).collect();
    out.0.insert("bias".into(), HostTensor::from_f32(DType::F32, &[pb.e], &bias));
    let rep = inst.check(&out).unwrap();
    eprintln!("check: {:.1} s total; {}", t0.elapsed().as_secs_f64(), rep.scope);
    assert!(rep.passed, "{}", rep.detail);
    let mut bad = counts.clone();
    bad[5] += 1;
    out.0.insert("counts".into(), HostTensor::from_i64(DType::U32, &[pb.e, pb.bins + 2], &bad));
    assert!(!inst.check(&out).unwrap().passed);
}
