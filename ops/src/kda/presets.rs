//! The presets of `kda`: the benchmark shapes, the FlashKDA comparison shapes (issue 42) and the random cases
//! of the fuzzer.

use super::*;

/// The in-kernel options of the FlashKDA comparison (issue 42), as preset dims: K = V = 128 on the safe path, L2
/// norm of q and k, the gate `lb * sigmoid(exp(A_log[h]) * (g + bias))` with a `[H, K]` bias (`gate=3`, FlashKDA's
/// form) read from a bf16 raw gate (`gbf16`: FlashKDA's API takes the gate as bf16, so both sides read the same
/// 2 bytes a gate; with an f32 gate k3k read 201 MB more at B1 T8192 H96), beta sigmoid, an f32 initial state
/// (the final state is always written).
pub const FLASHKDA_OPTIONS: [(&str, i64); 9] = [
    ("K", 128),
    ("V", 128),
    ("safe", 1),
    ("gate", 3),
    ("bias", 1),
    ("gbf16", 1),
    ("l2norm", 1),
    ("bsig", 1),
    ("h0", 1),
];

/// The suffix of the FlashKDA comparison presets' names (the options of [`FLASHKDA_OPTIONS`], named as the
/// kernel tags name them).
pub const FLASHKDA_SUFFIX: &str = "K128 safe lbsigab gbf16 l2 bsig h0";

/// The six shapes FlashKDA is compared on (issue 42), with [`FLASHKDA_OPTIONS`]: three single sequences, a batch
/// of four, and two varlen batches (8 x 1024 and six ragged lengths) at 96 heads.
pub fn flashkda_presets() -> Vec<Preset> {
    let with = |name: String, shape: Vec<(String, i64)>| {
        let dims: Vec<(String, i64)> =
            shape.into_iter().chain(FLASHKDA_OPTIONS.iter().map(|&(k, v)| (k.to_string(), v))).collect();
        Preset { name: format!("{name} {FLASHKDA_SUFFIX}"), dims: dims.into_iter().collect() }
    };
    let dense = |b: i64, t: i64, h: i64| {
        with(format!("B{b} T{t} H{h}"), vec![("B".into(), b), ("T".into(), t), ("H".into(), h)])
    };
    let varlen = |name: &str, lens: &[i64], h: i64| {
        let mut shape = vec![("N".to_string(), lens.len() as i64), ("H".to_string(), h)];
        shape.extend(lens.iter().enumerate().map(|(i, &l)| (format!("L{i}"), l)));
        with(format!("varlen {name} H{h}"), shape)
    };
    vec![
        dense(1, 8192, 96),
        dense(1, 65536, 32),
        dense(1, 8192, 64),
        dense(4, 4096, 64),
        varlen("8x1024", &[1024; 8], 96),
        varlen("[1300,547,2048,963,271,3063]", &[1300, 547, 2048, 963, 271, 3063], 96),
    ]
}

/// The benchmark presets: five K = V = 128 shapes of the safe and exact paths, then [`flashkda_presets`].
pub fn bench_presets() -> Vec<Preset> {
    let p = |name: &str, b: i64, t: i64, h: i64, safe: i64| {
        Preset::new(name, &[("B", b), ("T", t), ("H", h), ("K", 128), ("V", 128), ("safe", safe)])
    };
    let mut v = vec![
        p("B1 T8192 H96 K128 safe", 1, 8192, 96, 1),
        p("B1 T65536 H32 K128 safe", 1, 65536, 32, 1),
        p("B1 T16384 H32 K128 safe", 1, 16384, 32, 1),
        p("B1 T16384 H32 K128 exact", 1, 16384, 32, 0),
        p("B4 T4096 H64 K128 safe", 4, 4096, 64, 1),
    ];
    v.extend(flashkda_presets());
    v
}
/// A random small case of the fuzzer: edge lengths, varlen, GVA, both paths, every gate form and option.
pub fn random_case(rng: &mut StdRng) -> Preset {
    const T_EDGE: [i64; 7] = [1, 15, 17, 63, 64, 65, 130];
    let safe = rng.random_bool(0.5);
    // Small head dims keep the interpreter fast; K = V = 128 now and then with a tiny T.
    let big = rng.random_bool(0.1);
    let (dk, dv) =
        if big { (128, 128) } else { ([32i64, 64][rng.random_range(0..2)], [32i64, 64][rng.random_range(0..2)]) };
    let h = rng.random_range(1..=2i64);
    let hv = h * [1i64, 2][rng.random_range(0..2)];
    let mut dims: Vec<(String, i64)> =
        vec![("H".into(), h), ("HV".into(), hv), ("K".into(), dk), ("V".into(), dv), ("safe".into(), safe as i64)];
    let mut desc = String::new();
    if rng.random_bool(0.3) {
        let n = rng.random_range(1..=4i64);
        dims.push(("N".into(), n));
        for i in 0..n {
            let l = [0i64, 1, 15, 63, 17, 65][rng.random_range(0..6)];
            dims.push((format!("L{i}"), if big { l.min(17) } else { l }));
            desc.push_str(&format!("{l},"));
        }
    } else {
        let t = if big { [1i64, 17][rng.random_range(0..2)] } else { T_EDGE[rng.random_range(0..T_EDGE.len())] };
        dims.push(("B".into(), if t <= 65 { rng.random_range(1..=2) } else { 1 }));
        dims.push(("T".into(), t));
        desc = format!("T{t}");
    }
    let gate = if safe { [0i64, 0, 1, 3][rng.random_range(0..4)] } else { [0i64, 0, 2, 3][rng.random_range(0..4)] };
    dims.push(("gate".into(), gate));
    dims.push(("bias".into(), rng.random_bool(0.5) as i64));
    dims.push(("l2norm".into(), rng.random_bool(0.3) as i64));
    dims.push(("bsig".into(), rng.random_bool(0.3) as i64));
    dims.push(("h0".into(), rng.random_bool(0.5) as i64));
    dims.push(("extreme".into(), (!safe && gate == 0 && rng.random_bool(0.5)) as i64));
    // (Drawn last: the draws before it are those of the cases from before the option existed.)
    dims.push(("gbf16".into(), (gate != 0 && rng.random_bool(0.5)) as i64));
    Preset {
        name: format!("kda [{desc}] H{h} HV{hv} K{dk} V{dv} {}", if safe { "safe" } else { "exact" }),
        dims: dims.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The six FlashKDA comparison presets: their shapes (tokens, sequences, heads, varlen lengths) and every
    /// option of issue 42 (the scaled safe gate with its bias, L2 norm, beta sigmoid, h0), as the peer reads them
    /// from `problem()`.
    #[test]
    fn kda_flashkda_presets_resolve() {
        let op = Kda;
        let all = op.bench_presets();
        let fk: Vec<_> = all.iter().filter(|p| p.name.ends_with(FLASHKDA_SUFFIX)).collect();
        assert_eq!(fk.len(), 6, "{:?}", all.iter().map(|p| &p.name).collect::<Vec<_>>());
        let want = [(8192, 1, 96), (65536, 1, 32), (8192, 1, 64), (16384, 4, 64), (8192, 8, 96), (8192, 6, 96)];
        for (p, (tokens, seqs, heads)) in fk.iter().zip(want) {
            op.check_dims(p).unwrap_or_else(|e| panic!("{}: {e}", p.name));
            let pb = KdaProblem::from_preset(p).unwrap();
            assert_eq!((pb.tokens(), pb.num_seqs(), pb.hv, pb.h), (tokens, seqs, heads, heads), "{}", p.name);
            assert_eq!((pb.dk, pb.dv, pb.safe), (128, 128, true), "{}", p.name);
            assert_eq!(pb.gate, GateForm::Safe { bias: true, a_log: true }, "{}", p.name);
            assert!(pb.l2norm && pb.beta_sigmoid && pb.h0 && pb.g_bf16 && !pb.extreme, "{}", p.name);
        }
        let ragged = KdaProblem::from_preset(fk[5]).unwrap();
        assert_eq!(ragged.lens.as_deref(), Some(&[1300, 547, 2048, 963, 271, 3063][..]));
        let inst = op
            .instance(
                &Preset::new(
                    "small",
                    &[("N", 2), ("L0", 5), ("L1", 7), ("H", 2)].into_iter().chain(FLASHKDA_OPTIONS).collect::<Vec<_>>(),
                ),
                1,
            )
            .unwrap();
        let j = inst.problem();
        assert_eq!(j["cu_seqlens"], serde_json::json!([0, 5, 12]));
        assert_eq!(
            (j["gate"].as_str(), j["gate_bias"].as_bool(), j["gate_a_log"].as_bool()),
            (Some("lbsigab"), Some(true), Some(true))
        );
        assert_eq!(j["g_dtype"].as_str(), Some("bf16"));
        assert_eq!(
            (j["l2norm"].as_bool(), j["beta_sigmoid"].as_bool(), j["h0"].as_bool()),
            (Some(true), Some(true), Some(true))
        );
    }
}
