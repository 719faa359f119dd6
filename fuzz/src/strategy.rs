//! Proptest strategies for each operator's problems.
//!
//! A strategy draws a [`Preset`] (the operator's integer dims) from shrinkable integer strategies, so a failing
//! case shrinks toward the smallest failing shape: sizes shrink toward 1 (or 0 for group counts and sequence
//! lengths), lists of groups and sequences lose elements, flags shrink toward off and variant codes toward 0.
//! Sizes favour the edges (1, 15, 17, 63, 65, and values that are not multiples of any tile), groups may be
//! empty, varlen batches mix empty, short and long sequences, and the data modes that hold extreme gates,
//! saturating values and NaN scale bytes are drawn often. Every strategy only produces presets its operator
//! accepts (dependent dims are repaired in `prop_map`, so shrinking keeps them valid). The data seed of a case
//! does not shrink: shrinking changes the shape, never the draw of the data.
//!
//! Operators without a strategy here get [`fallback`]: their own `random_case` driven by a drawn seed (no
//! shape shrinking, but still a replayable seed).

use k3k_ops::op::{Operator, Preset};
use proptest::prelude::*;
use proptest::sample::select;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::BTreeMap;
use std::fmt;

/// One fuzz case: a problem and the seed of its input data.
#[derive(Clone, PartialEq)]
pub struct Case {
    pub preset: Preset,
    pub data_seed: u64,
}

impl Case {
    /// The dims as `K=v,...` (what `k3k check --dims` takes).
    pub fn dims(&self) -> String {
        dims_string(&self.preset.dims)
    }
}

impl fmt::Debug for Case {
    // One line: the regression files keep it after "shrinks to".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}] data_seed={}", self.preset.name, self.dims(), self.data_seed)
    }
}

/// `K=v,...` in the preset's (sorted) dim order.
pub fn dims_string(dims: &BTreeMap<String, i64>) -> String {
    dims.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The case strategy of an operator: its preset strategy and a data seed.
pub fn case_strategy(op: &dyn Operator) -> BoxedStrategy<Case> {
    (preset_strategy(op), any::<u64>().no_shrink()).prop_map(|(preset, data_seed)| Case { preset, data_seed }).boxed()
}

/// True when the operator has a shape strategy of its own (else [`fallback`] is used).
pub fn has_strategy(name: &str) -> bool {
    by_name(name).is_some()
}

/// The preset strategy of an operator.
pub fn preset_strategy(op: &dyn Operator) -> BoxedStrategy<Preset> {
    by_name(op.name()).unwrap_or_else(|| fallback(op.name()))
}

fn by_name(name: &str) -> Option<BoxedStrategy<Preset>> {
    Some(match name {
        "latent_moe_gemm" => latent_moe_gemm(),
        "mxfp4_matmul" => mxfp4_matmul(),
        "mx.quantize" => mx_quantize(),
        "mx.dequantize" => mx_dequantize(),
        "hist_quantile.qb" => hist_qb(),
        "hist_quantile.column" => hist_column(),
        "gated_mla.prefill" => mla_prefill(),
        "gated_mla.decode" => mla_decode(),
        "gated_mla.gate" => mla_gate(),
        "kda" => kda(),
        "kda.decode" => kda_decode(),
        _ => return None,
    })
}

/// An operator's own `random_case` from a drawn seed (for operators without a strategy here).
pub fn fallback(name: &str) -> BoxedStrategy<Preset> {
    let name = name.to_string();
    any::<u64>()
        .prop_map(move |seed| {
            let op = k3k_ops::registry::all().into_iter().find(|o| o.name() == name).expect("registered operator");
            op.random_case(&mut StdRng::seed_from_u64(seed))
        })
        .boxed()
}

/// A preset from `(dim, value)` pairs, named by its dims.
fn preset(tag: &str, dims: Vec<(String, i64)>) -> Preset {
    let dims: BTreeMap<String, i64> = dims.into_iter().collect();
    Preset { name: format!("{tag} {}", dims_string(&dims)), dims }
}

fn d(k: &str, v: i64) -> (String, i64) {
    (k.to_string(), v)
}

/// A size in `1..=max`, half the time one of the edge sizes. The plain range comes first so that an edge size
/// that fails can shrink into it (a union shrinks toward its earlier alternatives), down to the exact smallest
/// failing size.
fn size(edges: &'static [i64], max: i64) -> BoxedStrategy<i64> {
    let edges: Vec<i64> = edges.iter().copied().filter(|&e| e <= max).collect();
    prop_oneof![1..=max, select(edges)].boxed()
}

/// A group or sequence length: sometimes empty.
fn count(edges: &'static [i64], max: i64, empty_weight: u32) -> BoxedStrategy<i64> {
    prop_oneof![empty_weight => Just(0i64), 3 => size(edges, max)].boxed()
}

fn flag(p_on: f64) -> BoxedStrategy<i64> {
    proptest::bool::weighted(p_on).prop_map(|b| b as i64).boxed()
}

const GEMM_EDGE: &[i64] = &[1, 15, 16, 17, 31, 63, 64, 65, 130];

/// Even `n` when a GLU epilogue halves the columns.
fn glu_even(n: i64, epilogue: i64) -> i64 {
    if epilogue != 0 && n % 2 == 1 { n + 1 } else { n }
}

/// Dense (`M`) or grouped (`G`, `c0..`) rows, groups empty now and then.
fn rows_layout(max_groups: usize, group_max: i64, dense_max: i64) -> BoxedStrategy<Vec<(String, i64)>> {
    prop_oneof![
        1 => size(GEMM_EDGE, dense_max).prop_map(|m| vec![d("M", m)]),
        4 => proptest::collection::vec(count(GEMM_EDGE, group_max, 1), 1..=max_groups).prop_map(|cs| {
            let mut v = vec![d("G", cs.len() as i64)];
            v.extend(cs.iter().enumerate().map(|(i, &c)| d(&format!("c{i}"), c)));
            v
        }),
    ]
    .boxed()
}

fn latent_moe_gemm() -> BoxedStrategy<Preset> {
    (size(GEMM_EDGE, 160), size(GEMM_EDGE, 160), 0..3i64, flag(0.5), rows_layout(6, 160, 160))
        .prop_map(|(k, n, epi, p, rows)| {
            let mut dims = vec![d("K", k), d("N", glu_even(n, epi)), d("epilogue", epi), d("p", p)];
            dims.extend(rows);
            preset("gemm", dims)
        })
        .boxed()
}

fn mxfp4_matmul() -> BoxedStrategy<Preset> {
    prop_oneof![5 => mxfp4_any(), 1 => mxfp4_tiles()].boxed()
}

/// Any shape and layout the operator takes.
fn mxfp4_any() -> BoxedStrategy<Preset> {
    let kblocks = prop_oneof![1..=3i64, 1..=10i64];
    // wide: scale bytes over a wide range with NaN (255) ones; act: MXFP8 activations.
    (kblocks, size(GEMM_EDGE, 140), 0..3i64, flag(0.5), flag(0.3), flag(0.4), flag(0.3), rows_layout(5, 70, 140))
        .prop_map(|(kb, n, epi, p, packed, wide, act, rows)| {
            let mut dims = vec![
                d("K", 32 * kb),
                d("N", glu_even(n, epi)),
                d("epilogue", epi),
                d("p", p),
                d("packed", packed),
                d("wide", wide),
                d("act", act),
            ];
            dims.extend(rows);
            preset("mxfp4", dims)
        })
        .boxed()
}

/// The tile-major layout's decode shapes (`tiles`): N a multiple of 32, K of 128, at most 8 tokens per group.
fn mxfp4_tiles() -> BoxedStrategy<Preset> {
    let rows = prop_oneof![
        1 => (1..=8i64).prop_map(|m| vec![d("M", m)]),
        3 => proptest::collection::vec(prop_oneof![1 => Just(0i64), 3 => 1..=8i64], 1..=5).prop_map(|cs| {
            let mut v = vec![d("G", cs.len() as i64)];
            v.extend(cs.iter().enumerate().map(|(i, &c)| d(&format!("c{i}"), c)));
            v
        }),
    ];
    (1..=4i64, 1..=4i64, 0..3i64, flag(0.5), flag(0.4), flag(0.3), rows)
        .prop_map(|(kq, nt, epi, p, wide, act, rows)| {
            let mut dims = vec![
                d("K", 128 * kq),
                d("N", 32 * nt),
                d("epilogue", epi),
                d("p", p),
                d("tiles", 1),
                d("wide", wide),
                d("act", act),
            ];
            dims.extend(rows);
            preset("mxfp4 tiles", dims)
        })
        .boxed()
}

const MX_ROWS: &[i64] = &[1, 15, 17, 63, 65, 130];

/// Rows and K (a multiple of the 32-element block) of an MX tensor.
fn mx_dims() -> BoxedStrategy<(i64, i64)> {
    (size(MX_ROWS, 130), prop_oneof![1..=3i64, 1..=9i64]).prop_map(|(r, kb)| (r, 32 * kb)).boxed()
}

fn mx_quantize() -> BoxedStrategy<Preset> {
    // Edge blocks (f32::MAX, subnormals, NaN/inf, rounding ties, scale boundaries) most of the time.
    (mx_dims(), 0..2i64, 0..2i64, 0..2i64, flag(0.85))
        .prop_map(|((r, k), fmt, rule, src, edge)| {
            preset(
                "mx.quantize",
                vec![d("R", r), d("K", k), d("fmt", fmt), d("rule", rule), d("src", src), d("edge", edge)],
            )
        })
        .boxed()
}

fn mx_dequantize() -> BoxedStrategy<Preset> {
    // The data always mixes NaN scale bytes (255), 0, 254 and every element code.
    (mx_dims(), 0..2i64, 0..2i64)
        .prop_map(|((r, k), fmt, out)| {
            preset("mx.dequantize", vec![d("R", r), d("K", k), d("fmt", fmt), d("out", out)])
        })
        .boxed()
}

const HIST_EDGE: &[i64] = &[1, 2, 15, 16, 17, 31, 33, 63, 64, 65];
const HIST_BINS: &[i64] = &[1, 2, 7, 16, 32, 64, 100, 128, 256, 1024];

fn hist_qb() -> BoxedStrategy<Preset> {
    // data: 0 random, 1 ties, 2 constant columns, 3 values on bin edges.
    (size(HIST_EDGE, 70), 0..34i64, size(HIST_EDGE, 160), select(HIST_BINS), flag(0.4), 0..4i64)
        .prop_map(|(e, k, t, b, two, data)| {
            preset(
                "hist.qb",
                vec![d("T", t), d("E", e), d("k", k.min(e - 1)), d("B", b), d("two", two), d("data", data)],
            )
        })
        .boxed()
}

fn hist_column() -> BoxedStrategy<Preset> {
    let frac = prop_oneof![Just(0i64), Just(1_000_000i64), 0..=1_000_000i64];
    let range = select(vec![(0i64, 1000i64), (-1000, 1000), (-3000, 5000), (250, 750)]);
    (size(HIST_EDGE, 100), size(HIST_EDGE, 200), select(HIST_BINS), flag(0.4), 0..4i64, frac, range)
        .prop_map(|(e, t, b, two, data, frac, (lo, hi))| {
            preset(
                "hist.column",
                vec![
                    d("T", t),
                    d("E", e),
                    d("B", b),
                    d("two", two),
                    d("data", data),
                    d("frac_ppm", frac),
                    d("lo_milli", lo),
                    d("hi_milli", hi),
                ],
            )
        })
        .boxed()
}

const MLA_EDGE: &[i64] = &[1, 15, 17, 63, 65, 130];
const MLA_PREFIX: &[i64] = &[0, 1, 17, 64, 130];
const MLA_HEADS: &[i64] = &[1, 3, 12, 16];

fn mla_prefill() -> BoxedStrategy<Preset> {
    // Dense: T queries against S >= T keys (a cached prefix), sometimes S < T (causal: early rows see no key).
    let dense = (size(MLA_EDGE, 130), prop_oneof![3 => select(MLA_PREFIX).prop_map(Some), 1 => Just(None)], 1..=130i64)
        .prop_map(|(t, prefix, short)| match prefix {
            Some(p) => vec![d("T", t), d("S", t + p.min(2 * 130 - t))],
            None => vec![d("T", t), d("S", short.min(t))],
        });
    // Varlen: 1..=4 sequences, some without queries or keys; at least one query row.
    let seq = (count(MLA_EDGE, 65, 1), select(MLA_PREFIX), proptest::bool::weighted(0.1));
    let varlen = proptest::collection::vec(seq, 1..=4).prop_map(|seqs| {
        let mut seqs: Vec<(i64, i64)> =
            seqs.into_iter().map(|(t, p, no_keys)| (t, if no_keys { 0 } else { t + p.min(65) })).collect();
        if seqs.iter().all(|&(t, _)| t == 0) {
            seqs[0] = (1, 1);
        }
        let mut v = vec![d("N", seqs.len() as i64)];
        for (i, (t, s)) in seqs.into_iter().enumerate() {
            v.push(d(&format!("q{i}"), t));
            v.push(d(&format!("k{i}"), s));
        }
        v
    });
    (1..=4i64, flag(0.7), flag(0.7), prop_oneof![4 => dense, 1 => varlen])
        .prop_map(|(h, causal, gate, rows)| {
            let mut dims = vec![d("H", h), d("causal", causal), d("gate", gate)];
            dims.extend(rows);
            preset("mla.prefill", dims)
        })
        .boxed()
}

fn mla_decode() -> BoxedStrategy<Preset> {
    // Cache lengths per request: empty, one key, page edges (64) and ragged long ones.
    let len = prop_oneof![Just(0i64), select(vec![1i64, 63, 64, 65, 130, 200]), 1..=260i64];
    (select(vec![1i64, 2, 4]), select(MLA_HEADS), proptest::collection::vec(len, 1..=4))
        .prop_map(|(sq, h, lens)| {
            let mut dims = vec![d("B", lens.len() as i64), d("SQ", sq), d("H", h)];
            dims.extend(lens.iter().enumerate().map(|(i, &l)| d(&format!("l{i}"), l)));
            preset("mla.decode", dims)
        })
        .boxed()
}

fn mla_gate() -> BoxedStrategy<Preset> {
    (size(MLA_EDGE, 130), select(MLA_HEADS), flag(0.8))
        .prop_map(|(t, h, gate)| preset("mla.gate", vec![d("T", t), d("H", h), d("gate", gate)]))
        .boxed()
}

const KDA_T: &[i64] = &[1, 15, 17, 63, 64, 65, 130];
const KDA_LEN: &[i64] = &[1, 15, 17, 63, 65];

fn kda() -> BoxedStrategy<Preset> {
    // Head dims 32/64 (the interpreter is slow), 128 now and then with short sequences.
    let heads = prop_oneof![
        9 => (select(vec![32i64, 64]), select(vec![32i64, 64])).prop_map(|(k, v)| (k, v, false)),
        1 => Just((128i64, 128i64, true)),
    ];
    let dense = (size(KDA_T, 130), 1..=2i64).prop_map(|(t, b)| (None, t, b));
    let varlen = proptest::collection::vec(count(KDA_LEN, 65, 1), 1..=4).prop_map(|l| (Some(l), 0, 1));
    let flags = (flag(0.5), flag(0.3), flag(0.3), flag(0.5), flag(0.6), flag(0.3));
    (heads, 1..=2i64, 1..=2i64, flag(0.5), 0..4i64, prop_oneof![7 => dense, 3 => varlen], flags)
        .prop_map(|((dk, dv, big), h, mult, safe, gate, (lens, t, b), (bias, l2, bsig, h0, extreme, gbf))| {
            // The safe path needs bounded gates (no standard form; the lb*sigmoid forms 1 and 3 are bounded) and
            // no -1000 gates.
            let gate = if safe == 1 && gate == 2 { 1 } else { gate };
            let extreme = (safe == 0 && gate == 0 && extreme == 1) as i64;
            // A bf16 raw gate only where the gate form is in the kernel (a pre-computed log-decay stays f32).
            let gbf = (gate != 0 && gbf == 1) as i64;
            let mut dims = vec![
                d("H", h),
                d("HV", h * mult),
                d("K", dk),
                d("V", dv),
                d("safe", safe),
                d("gate", gate),
                d("bias", bias),
                d("l2norm", l2),
                d("bsig", bsig),
                d("h0", h0),
                d("extreme", extreme),
                d("gbf16", gbf),
            ];
            match lens {
                Some(lens) => {
                    dims.push(d("N", lens.len() as i64));
                    let cap = if big { 17 } else { 65 };
                    dims.extend(lens.iter().enumerate().map(|(i, &l)| d(&format!("L{i}"), l.min(cap))));
                }
                None => {
                    let t = if big { t.min(17) } else { t };
                    dims.push(d("B", if t <= 65 { b } else { 1 }));
                    dims.push(d("T", t));
                }
            }
            preset("kda", dims)
        })
        .boxed()
}

fn kda_decode() -> BoxedStrategy<Preset> {
    let hd = || select(vec![32i64, 64, 128]);
    let flags = (flag(0.5), flag(0.4), flag(0.4), flag(0.3));
    (hd(), hd(), 1..=2i64, 1..=2i64, 1..=3i64, select(vec![1i64, 2, 5]), 0..4i64, flags)
        .prop_map(|(dk, dv, h, mult, n, t, gate, (bias, l2, bsig, gbf))| {
            preset(
                "kda.decode",
                vec![
                    d("N", n),
                    d("T", t),
                    d("H", h),
                    d("HV", h * mult),
                    d("K", dk),
                    d("V", dv),
                    d("gate", gate),
                    d("bias", bias),
                    d("l2norm", l2),
                    d("bsig", bsig),
                    d("gbf16", (gate != 0 && gbf == 1) as i64),
                ],
            )
        })
        .boxed()
}
