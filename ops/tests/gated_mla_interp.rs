//! The gated-MLA tile programs, executed by the CPU interpreter, against the f64 reference (k3k-reference):
//! rel L2 <= 5e-3 on the bf16 outputs, 1e-3 on the LSE, and identical inf/NaN positions. Fresh random inputs
//! every run (the seed is printed on failure), outputs poisoned with NaN before each run, ragged edge sizes
//! (1, 15, 17, 65), cached prefixes, rows without keys, empty requests and a NaN-poisoned paged cache whose
//! unused block-table entries are out of range (the interpreter reports any out-of-bounds read).
//!
//! Every case is a [`Plan`] run by [`Executor::Cpu`] (`k3k_codegen::cpu::interp::run` on each step); with
//! `K3K_GPU=1` the same plans also run on GPU 0 and must pass the same checks.
use k3k_ir::*;
use k3k_ops::OpError;
use k3k_ops::gated_mla::*;

#[path = "common/mla_check.rs"]
mod mla_check;
use mla_check::{BF16_TOL, TAU, bf16, check, check_lse};

#[path = "common/mla_knobs.rs"]
mod mla_knobs;
use k3k_ops::plan::{Executor, GpuExec, Outputs, Plan};
use k3k_reference::mla::{gate_wuv, mla_decode_paged, mla_prefill, mla_prefill_varlen};
use k3k_reference::random::{bf16_normal, block_table, fresh_seed, seeded};
use k3k_runtime::Gpu;
use mla_knobs::{bn64, prefill_bm192_points, prefill_fast_softmax_points, prefill_wgmma_points, rows32};
use rand::Rng;
use rand::rngs::StdRng;

/// Gate logits: N(0, 2^2) with a few extreme values (sigmoid saturates to exactly 0 or 1).
fn gate_logits(rng: &mut StdRng, n: usize) -> Vec<f32> {
    let mut z = bf16_normal(rng, n, 2.0);
    for _ in 0..n / 50 {
        let i = rng.random_range(0..n);
        z[i] = if rng.random_bool(0.5) { 1000.0 } else { -1000.0 };
    }
    z
}

fn i32s(shape: &[usize], v: &[i64]) -> HostTensor {
    HostTensor::from_i64(DType::I32, shape, v)
}

fn f32s(o: &Outputs, name: &str) -> Vec<f32> {
    o.get(name).unwrap().to_f32_vec()
}

/// The CPU interpreter, plus GPU 0 when `K3K_GPU=1`.
fn executors() -> Vec<Executor> {
    let mut v = vec![Executor::Cpu];
    if std::env::var("K3K_GPU").is_ok_and(|v| v == "1") {
        let gpu = Gpu::open(0).unwrap_or_else(|e| panic!("K3K_GPU=1 but no GPU: {e}"));
        v.push(Executor::Gpu(Box::new(GpuExec::new(gpu))));
    }
    v
}

/// Run a plan (outputs poisoned first) on every executor; `f` checks each run's outputs.
fn run_everywhere(seed: u64, what: &str, plan: &Plan, mut f: impl FnMut(&str, &Outputs)) {
    for mut ex in executors() {
        let outs = ex.run(plan).unwrap_or_else(|e| panic!("seed {seed}: {what} on {}: {e}", ex.name()));
        f(ex.name(), &outs);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Prefill

/// One fixed-length prefill on fresh inputs against `mla_prefill`.
fn prefill_case(spec: PrefillSpec, knobs: &Knobs, t: usize, s: usize, h: usize) {
    let seed = fresh_seed();
    let mut rng = seeded(seed);
    let (dqk, dv) = (spec.dqk as usize, spec.dv as usize);
    let q = bf16_normal(&mut rng, t * h * dqk, 1.0);
    let k = bf16_normal(&mut rng, s * h * dqk, 1.0);
    let v = bf16_normal(&mut rng, s * h * dv, 1.0);
    let z = spec.gate.then(|| gate_logits(&mut rng, t * h * dv));
    let kern = build_prefill(&spec, knobs).unwrap();
    let what = format!("{} T={t} S={s} H={h}", kern.name);
    let mut plan = Plan::default();
    let mut args = vec![
        plan.input("q", bf16(&[t, h, dqk], &q)),
        plan.input("k", bf16(&[s, h, dqk], &k)),
        plan.input("v", bf16(&[s, h, dv], &v)),
    ];
    if let Some(z) = &z {
        args.push(plan.input("z", bf16(&[t, h, dv], z)));
    }
    args.push(plan.output("o", DType::Bf16, &[t, h, dv]));
    args.push(plan.output("lse", DType::F32, &[h, t]));
    plan.step(kern, &args, &[("scale", SymValue::Float(TAU))]);
    let (want_o, want_lse) = mla_prefill(&q, &k, &v, z.as_deref(), t, s, h, dqk, dv, TAU as f64, spec.causal).unwrap();
    run_everywhere(seed, &what, &plan, |ex, outs| {
        check(&format!("{what} [{ex}] o"), seed, &f32s(outs, "o"), &want_o, BF16_TOL);
        check_lse(&format!("{what} [{ex}] lse"), seed, &f32s(outs, "lse"), &want_lse);
    });
}

#[test]
fn prefill_causal_gated_ragged_and_cached_prefix() {
    let spec = PrefillSpec::new(true, true, false);
    // T not a multiple of the tile; S > T (bottom-right aligned cached prefix); single rows.
    for knobs in [prefill_default_knobs(), prefill_sync_knobs()] {
        for (t, s) in [(65, 65), (17, 80), (1, 33), (15, 15), (1, 1), (17, 150)] {
            prefill_case(spec, &knobs, t, s, 2);
        }
    }
}

#[test]
fn prefill_rows_without_keys_give_zero_and_inf() {
    // T > S causal: query rows 0..T-S-1 see no key (o = 0, lse = +inf; the check demands identical inf
    // positions); S = 0 sees nothing at all.
    for (causal, t, s) in [(true, 20, 5), (true, 70, 3), (false, 3, 0)] {
        prefill_case(PrefillSpec::new(causal, true, false), &prefill_default_knobs(), t, s, 2);
    }
    // And o is exactly 0 there, not just small.
    let seed = fresh_seed();
    let mut rng = seeded(seed);
    let (t, s, h) = (20usize, 5usize, 1usize);
    let kern = build_prefill(&PrefillSpec::new(true, false, false), &prefill_default_knobs()).unwrap();
    let mut plan = Plan::default();
    let args = [
        plan.input("q", bf16(&[t, h, 192], &bf16_normal(&mut rng, t * h * 192, 1.0))),
        plan.input("k", bf16(&[s, h, 192], &bf16_normal(&mut rng, s * h * 192, 1.0))),
        plan.input("v", bf16(&[s, h, 128], &bf16_normal(&mut rng, s * h * 128, 1.0))),
        plan.output("o", DType::Bf16, &[t, h, 128]),
        plan.output("lse", DType::F32, &[h, t]),
    ];
    plan.step(kern, &args, &[("scale", SymValue::Float(TAU))]);
    run_everywhere(seed, "lonely rows", &plan, |ex, outs| {
        let (o, lse) = (f32s(outs, "o"), f32s(outs, "lse"));
        for i in 0..t {
            let lonely = i < t - s;
            assert_eq!(lse[i] == f32::INFINITY, lonely, "seed {seed} [{ex}] row {i}: lse {}", lse[i]);
            if lonely {
                assert!(o[i * 128..(i + 1) * 128].iter().all(|&x| x == 0.0), "seed {seed} [{ex}] row {i}");
            }
        }
    });
}

#[test]
fn prefill_full_and_ungated_12_and_16_heads() {
    for (causal, gate, h, t, s) in [(false, false, 12, 17, 65), (false, true, 16, 15, 33), (true, false, 12, 65, 65)] {
        prefill_case(PrefillSpec::new(causal, gate, false), &prefill_default_knobs(), t, s, h);
    }
}

#[test]
fn prefill_other_knob_points() {
    let spec = PrefillSpec::new(true, true, false);
    for knobs in [
        prefill_sync_knobs(),
        prefill_sync_knobs().with("BN", 32i64).with("STAGES", 3i64),
        prefill_sync_knobs().with("BM", 64i64).with("WM", 4i64),
        prefill_sync_knobs().with("BM", 64i64).with("WM", 4i64).with("BN", 32i64).with("QK_UNROLL", false),
    ] {
        for (t, s) in [(130, 200), (63, 63)] {
            prefill_case(spec, &knobs, t, s, 1);
        }
    }
}

#[test]
fn prefill_varlen() {
    prefill_varlen_case(&prefill_default_knobs());
    prefill_varlen_case(&prefill_sync_knobs());
}

/// The wgmma kernels (plain and overlapped schedules, several tile shapes) at the edge sizes: ragged T,
/// single rows, cached prefixes (S > T), rows without keys, full and causal, gated and not, and varlen.
#[test]
fn prefill_wgmma_edges_and_varlen() {
    let more = [(65, 65, 2), (63, 63, 1), (130, 200, 1)];
    edges_and_varlen(prefill_wgmma_points(), &more, &[(17, 65, 1), (1, 33, 2)]);
}

/// The causal LPT block order (`QORDER=lpt`) against the per-head order: several q-tiles and heads, the
/// automatic head group (all heads at these sizes), groups of 2 over 3 heads (a partial last group) and of
/// 1, a cached prefix and rows without keys; every block must land on its own (q-tile, head), or the
/// poisoned outputs show.
#[test]
fn prefill_lpt_block_order() {
    let lpt = prefill_default_knobs().with("QORDER", "lpt");
    for knobs in [
        lpt.clone(),
        lpt.clone().with("HGROUP", 2i64),
        lpt.clone().with("HGROUP", 1i64),
        lpt.clone().with("HGROUP", 2i64).with("BM", 64i64).with("WM", 4i64).with("PINGPONG", false),
        lpt.clone().with("QORDER", "head"),
    ] {
        for (t, s, h) in [(300, 300, 3), (130, 200, 3), (200, 70, 2)] {
            prefill_case(PrefillSpec::new(true, true, false), &knobs, t, s, h);
        }
    }
    prefill_case(PrefillSpec::new(false, true, false), &lpt.clone().with("HGROUP", 2i64), 130, 65, 3);
    prefill_varlen_case(&lpt.with("HGROUP", 2i64));
    let bad = prefill_default_knobs().with("QORDER", "zigzag");
    assert!(matches!(build_prefill(&PrefillSpec::new(true, true, false), &bad), Err(OpError::InvalidKnobs { .. })));
}

/// The three-warpgroup points (BM = 192): ragged T (one and two q-tiles), cached prefixes, single rows,
/// rows without keys, full and ungated, several heads (LPT order), and varlen.
#[test]
fn prefill_bm192_edges_and_varlen() {
    edges_and_varlen(prefill_bm192_points(), &[(65, 65, 1), (200, 260, 3)], &[(193, 63, 2), (1, 33, 1)]);
}

/// `SOFTMAX=fast` (raw-score max, scale folded into the exponent, `exp2_ftz`) and `SMGUARD=true` (the
/// overlapped softmax behind an always-true guard) at every kernel shape they change: ragged T (1, 15, 17, 63, 65), cached prefixes, rows without keys, several q-tiles and heads, full
/// and causal, gated and not, and varlen; an unknown value is a typed knob error.
#[test]
fn prefill_fast_softmax_edges_and_varlen() {
    let more = [(65, 65, 2), (63, 63, 1), (300, 300, 2)];
    edges_and_varlen(prefill_fast_softmax_points(), &more, &[(17, 65, 1), (1, 33, 2)]);
    let spec = PrefillSpec::new(true, true, false);
    for bad in [
        prefill_default_knobs().with("SOFTMAX", "approx"),
        prefill_wgmma_knobs().with("SMGUARD", true),
        prefill_sync_knobs().with("SMGUARD", true),
    ] {
        assert!(matches!(build_prefill(&spec, &bad), Err(OpError::InvalidKnobs { .. })), "{bad}");
    }
}

/// Every knob point at the edge sizes, then varlen: causal and gated at the shared `(t, s, h)` edges (single
/// rows, a cached prefix, rows without keys) and at `causal`, causal ungated at 15 x 15, and full at `full`
/// (gated at the first shape, ungated at the rest).
fn edges_and_varlen(points: Vec<Knobs>, causal: &[(usize, usize, usize)], full: &[(usize, usize, usize)]) {
    const EDGES: [(usize, usize, usize); 3] = [(17, 150, 1), (1, 1, 1), (20, 5, 1)];
    for knobs in points {
        let causal_gated = EDGES.iter().chain(causal).map(|&(t, s, h)| (true, true, t, s, h));
        let full = full.iter().enumerate().map(|(i, &(t, s, h))| (false, i == 0, t, s, h));
        for (causal, gate, t, s, h) in causal_gated.chain([(true, false, 15, 15, 1)]).chain(full) {
            prefill_case(PrefillSpec::new(causal, gate, false), &knobs, t, s, h);
        }
        prefill_varlen_case(&knobs);
    }
}

fn prefill_varlen_case(knobs: &Knobs) {
    // Sequences (T, S): (17, 30), (0, 5), (65, 65), (1, 0), (15, 100).
    let cu_q = [0i64, 17, 17, 82, 83, 98];
    let cu_k = [0i64, 30, 35, 100, 100, 200];
    let cu_q_us: Vec<usize> = cu_q.iter().map(|&x| x as usize).collect();
    let cu_k_us: Vec<usize> = cu_k.iter().map(|&x| x as usize).collect();
    let (h, dqk, dv) = (3, 192, 128);
    let (tq, tk) = (cu_q_us[cu_q.len() - 1], cu_k_us[cu_k.len() - 1]);
    let max_q = cu_q.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    for (causal, gate) in [(true, true), (false, false)] {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let q = bf16_normal(&mut rng, tq * h * dqk, 1.0);
        let k = bf16_normal(&mut rng, tk * h * dqk, 1.0);
        let v = bf16_normal(&mut rng, tk * h * dv, 1.0);
        let z = gate.then(|| gate_logits(&mut rng, tq * h * dv));
        let kern = build_prefill(&PrefillSpec::new(causal, gate, true), knobs).unwrap();
        let what = kern.name.clone();
        let mut plan = Plan::default();
        let mut args = vec![
            plan.input("q", bf16(&[tq, h, dqk], &q)),
            plan.input("k", bf16(&[tk, h, dqk], &k)),
            plan.input("v", bf16(&[tk, h, dv], &v)),
            plan.input("cu_seqlens_q", i32s(&[cu_q.len()], &cu_q)),
            plan.input("cu_seqlens_k", i32s(&[cu_k.len()], &cu_k)),
        ];
        if let Some(z) = &z {
            args.push(plan.input("z", bf16(&[tq, h, dv], z)));
        }
        args.push(plan.output("o", DType::Bf16, &[tq, h, dv]));
        args.push(plan.output("lse", DType::F32, &[h, tq]));
        plan.step(kern, &args, &[("scale", SymValue::Float(TAU)), ("MAX_SEQLEN_Q", SymValue::Int(max_q))]);
        let (want_o, want_lse) =
            mla_prefill_varlen(&q, &k, &v, z.as_deref(), &cu_q_us, &cu_k_us, h, dqk, dv, TAU as f64, causal).unwrap();
        run_everywhere(seed, &what, &plan, |ex, outs| {
            check(&format!("{what} [{ex}] o"), seed, &f32s(outs, "o"), &want_o, BF16_TOL);
            check_lse(&format!("{what} [{ex}] lse"), seed, &f32s(outs, "lse"), &want_lse);
        });
    }
}

// ---------------------------------------------------------------------------------------------------------
// Decode

/// A paged latent cache for requests of `lens` keys: pages from a shuffled pool, every row that holds no key
/// (page tails, spare pages) NaN, unused block-table entries far out of range.
struct Paged {
    cache: Vec<f32>,
    table: Vec<i32>,
    max_blocks: usize,
    num_blocks: usize,
}

fn paged_cache(rng: &mut StdRng, lens: &[usize], d: usize, page: usize) -> Paged {
    let (mut table, max_blocks, num_blocks) = block_table(rng, lens, page, 2);
    let mut cache = vec![f32::NAN; num_blocks * page * d];
    for (r, &len) in lens.iter().enumerate() {
        for j in 0..len {
            let blk = table[r * max_blocks + j / page] as usize;
            let row = (blk * page + j % page) * d;
            cache[row..row + d].copy_from_slice(&bf16_normal(rng, d, 0.5));
        }
    }
    for e in table.iter_mut().filter(|e| **e < 0) {
        *e = 2_147_480_000;
    }
    Paged { cache, table, max_blocks, num_blocks }
}

/// A random paged decode problem: `s_q` queries of `h` heads for each request of `lens` keys, the decode's four
/// inputs in a plan (q, the cache, the block table, the lengths) and the reference outputs.
struct DecodeProblem {
    seed: u64,
    spec: DecodeSpec,
    b: usize,
    dv: usize,
    plan: Plan,
    inputs: [usize; 4],
    want_o: Vec<f64>,
    want_lse: Vec<f64>,
}

impl DecodeProblem {
    fn new(lens: &[usize], s_q: usize, h: usize) -> Self {
        let seed = fresh_seed();
        let mut rng = seeded(seed);
        let spec = DecodeSpec::default();
        let (d, dv, page) = (spec.d as usize, spec.dv as usize, spec.page as usize);
        let b = lens.len();
        let paged = paged_cache(&mut rng, lens, d, page);
        let q = bf16_normal(&mut rng, b * s_q * h * d, 1.0);
        let seqlens: Vec<i64> = lens.iter().map(|&l| l as i64).collect();
        let table: Vec<i64> = paged.table.iter().map(|&x| x as i64).collect();
        let mut plan = Plan::default();
        let inputs = [
            plan.input("q", bf16(&[b, s_q, h, d], &q)),
            plan.input("kv", bf16(&[paged.num_blocks, page, d], &paged.cache)),
            plan.input("block_table", i32s(&[b, paged.max_blocks], &table)),
            plan.input("cache_seqlens", i32s(&[b], &seqlens)),
        ];
        let lens32: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
        let (want_o, want_lse) =
            mla_decode_paged(&q, &paged.cache, &paged.table, &lens32, b, s_q, h, d, dv, page, TAU as f64).unwrap();
        DecodeProblem { seed, spec, b, dv, plan, inputs, want_o, want_lse }
    }
}

/// Split-KV decode + combine against `mla_decode_paged`; returns the bf16 latent output of the first executor
/// (for chaining into the gate kernel).
fn decode_case(lens: &[usize], s_q: usize, h: usize, nsplit: usize, knobs: &Knobs) -> Vec<f32> {
    decode_case_combine(lens, s_q, h, nsplit, knobs, &combine_default_knobs())
}

/// [`decode_case`] with the combine kernel at `combine_knobs`.
fn decode_case_combine(
    lens: &[usize],
    s_q: usize,
    h: usize,
    nsplit: usize,
    knobs: &Knobs,
    combine_knobs: &Knobs,
) -> Vec<f32> {
    let DecodeProblem { seed, spec, b, dv, mut plan, inputs: [q_i, kv_i, bt_i, sl_i], want_o, want_lse } =
        DecodeProblem::new(lens, s_q, h);
    let main = build_decode(&spec, knobs).unwrap();
    let combine = build_decode_combine(&spec, combine_knobs).unwrap();
    let what = format!("{} + {} B={b} s_q={s_q} H={h} NSPLIT={nsplit} lens={lens:?}", main.name, combine.name);
    // The workspace is an output here so that the test sees every element was written.
    let op_i = plan.output("o_part", DType::F32, &[b, nsplit, s_q, h, dv]);
    let lp_i = plan.output("lse_part", DType::F32, &[b, nsplit, s_q, h]);
    let o_i = plan.output("o", DType::Bf16, &[b, s_q, h, dv]);
    let l_i = plan.output("lse", DType::F32, &[b, h, s_q]);
    plan.step(main, &[q_i, kv_i, bt_i, sl_i, op_i, lp_i], &[("scale", SymValue::Float(TAU))]);
    plan.step(combine, &[op_i, lp_i, o_i, l_i], &[]);
    let mut first = None;
    run_everywhere(seed, &what, &plan, |ex, outs| {
        // Partial outputs finite (0 where a split saw no key) and LSEs not NaN: every element was written.
        assert!(f32s(outs, "o_part").iter().all(|x| x.is_finite()), "seed {seed}: {what} [{ex}]: o_part");
        assert!(f32s(outs, "lse_part").iter().all(|x| !x.is_nan()), "seed {seed}: {what} [{ex}]: lse_part");
        let o = f32s(outs, "o");
        check(&format!("{what} [{ex}] o"), seed, &o, &want_o, BF16_TOL);
        check_lse(&format!("{what} [{ex}] lse"), seed, &f32s(outs, "lse"), &want_lse);
        first.get_or_insert(o);
    });
    first.unwrap()
}

#[test]
fn decode_paged_single_query() {
    // An empty request, a one-key request, a full page, ragged tails; 16 and 12 heads; 1 and 3 splits.
    let lens = [130usize, 0, 64, 1, 200];
    decode_case(&lens, 1, 16, 1, &decode_default_knobs());
    decode_case(&lens, 1, 12, 3, &decode_default_knobs());
    // The mma.sync kernel at its automatic knobs of 16 rows.
    decode_case(&lens, 1, 16, 1, &decode_sync_knobs_for_rows(16));
    decode_case(&lens, 1, 12, 3, &decode_sync_knobs_for_rows(12));
}

#[test]
fn decode_paged_mtp_causal() {
    // s_q > 1: bottom-right causal inside the request (query i sees keys [0, S_k - s_q + i]); more splits
    // than a short request has tiles; a request shorter than s_q (its first queries see nothing).
    let lens = [150usize, 3, 0, 65];
    decode_case(&lens, 2, 12, 4, &decode_default_knobs());
    decode_case(&lens, 4, 16, 2, &decode_knobs_for_rows(64));
    decode_case(&lens, 2, 12, 4, &decode_sync_knobs_for_rows(24));
    decode_case(&lens, 4, 16, 2, &decode_sync_knobs_for_rows(64));
}

#[test]
fn decode_other_knob_points() {
    let lens = [97usize, 0, 128];
    let replicated = bn64().with("SCORES", "replicated").with("BN", 32i64).with("STAGES", 3i64);
    decode_case(&lens, 1, 12, 2, &replicated);
    let narrow = rows32().with("BN", 32i64).with("WN", 2i64).with("STAGES", 3i64);
    decode_case(&lens, 2, 16, 3, &narrow);
    // 64 rows on [4, 1] score warps, value columns on [4, 2].
    let wide =
        rows32().with("BM", 64i64).with("BN", 32i64).with("WM", 4i64).with("WN", 2i64).with("SCORES", "replicated");
    decode_case(&lens, 4, 12, 1, &wide);
    // BN = 32 on 4 warps with the scores split over 2 warp columns (each pair computes the same 16 score
    // columns) and 3 partial score accumulators; one m-tile and (s_q = 2, 16 heads) two m-tiles.
    let paired = bn64().with("BN", 32i64).with("SWN", 2i64).with("QK_ACCS", 3i64).with("BT_PREFETCH", 1i64);
    // Block-table prefetch with 3 stages and 64-key tiles (one page per tile).
    decode_case(
        &lens,
        2,
        12,
        2,
        &bn64().with("STAGES", 3i64).with("BN", 32i64).with("SWN", 2i64).with("BT_PREFETCH", 1i64),
    );
    decode_case(&lens, 1, 12, 1, &bn64().with("BT_PREFETCH", 1i64));
    decode_case(&lens, 1, 12, 2, &paired);
    decode_case(&lens, 2, 16, 3, &paired);
    // The former 64-key default; partial score accumulators with every score column group and with
    // replicated scores.
    decode_case(&lens, 1, 12, 2, &bn64());
    decode_case(&lens, 1, 16, 1, &bn64().with("QK_ACCS", 3i64));
    // 96 rows in two m-tiles of 48 on [3, 4] warps.
    let rows48 = rows32().with("BM", 48i64).with("WM", 3i64).with("BN", 32i64).with("SWN", 2i64);
    decode_case(&lens, 1, 96, 2, &rows48);
    // The combine over the whole value width (the former default) and over 256-column blocks.
    let whole = Knobs::new().with("BM", 32i64).with("WM", 2i64).with("WN", 4i64).with("BC", 512i64);
    decode_case_combine(&lens, 2, 12, 3, &paired, &whole);
    let half = combine_default_knobs().with("WN", 8i64).with("BC", 256i64);
    decode_case_combine(&lens, 1, 16, 2, &paired, &half);
    decode_case(&lens, 2, 12, 2, &replicated.clone().with("QK_ACCS", 3i64));
}

/// The one-split, one-query decode kernel that writes o and lse itself, against `mla_decode_paged`.
fn decode_direct_case(lens: &[usize], h: usize, knobs: &Knobs) {
    let DecodeProblem { seed, spec, b, dv, mut plan, inputs: [q_i, kv_i, bt_i, sl_i], want_o, want_lse } =
        DecodeProblem::new(lens, 1, h);
    let main = build_decode_direct(&spec, knobs).unwrap();
    let what = format!("{} B={b} H={h} lens={lens:?}", main.name);
    let o_i = plan.output("o", DType::Bf16, &[b, 1, h, dv]);
    let l_i = plan.output("lse", DType::F32, &[b, h, 1]);
    plan.step(main, &[q_i, kv_i, bt_i, sl_i, o_i, l_i], &[("scale", SymValue::Float(TAU))]);
    run_everywhere(seed, &what, &plan, |ex, outs| {
        check(&format!("{what} [{ex}] o"), seed, &f32s(outs, "o"), &want_o, BF16_TOL);
        check_lse(&format!("{what} [{ex}] lse"), seed, &f32s(outs, "lse"), &want_lse);
    });
}

#[test]
fn decode_direct_writes_the_final_outputs() {
    // An empty request (o = 0, lse = +inf), one key, a full page, ragged tails.
    let lens = [130usize, 0, 64, 1, 200];
    decode_direct_case(&lens, 12, &decode_default_knobs());
    decode_direct_case(&lens, 12, &decode_sync_knobs_for_rows(12));
    decode_direct_case(&lens, 16, &bn64());
    let rows48 = rows32().with("BM", 48i64).with("WM", 3i64).with("BN", 32i64).with("SWN", 2i64);
    decode_direct_case(&lens[..3], 96, &rows48);
    decode_direct_case(&lens[..3], 96, &decode_knobs_for_rows(96));
    decode_direct_case(&lens[..3], 96, &decode_sync_knobs_for_rows(96));
}

#[test]
fn decode_wgmma_ragged_splits_and_mtp() {
    // The wgmma kernel (one warpgroup of 64 packed rows, value columns in DVS slices): lengths 1/15/17/65 and
    // page tails, an empty request; 12 heads (one partly filled m-tile), 96 heads (two m-tiles, the second
    // half empty), s_q = 2 and 4 (queries across m-tiles), 1..3 splits; DVS 2 and 4; 32-key stages, 3 stages,
    // the block-table prefetch; two warpgroups (BM = 128).
    let lens = [65usize, 1, 15, 0, 17, 130];
    decode_case(&lens, 1, 12, 1, &decode_wgmma_knobs(2));
    decode_case(&lens, 1, 12, 3, &decode_wgmma_knobs(4));
    decode_case(&lens[..3], 1, 96, 2, &decode_wgmma_knobs(2));
    decode_case(&lens, 2, 16, 2, &decode_wgmma_knobs(2).with("BN", 32i64).with("STAGES", 3i64));
    decode_case(&lens, 4, 12, 1, &decode_wgmma_knobs(2).with("BT_PREFETCH", 1i64));
    decode_case(&lens, 1, 16, 2, &decode_wgmma_knobs(2).with("QK_UNROLL", 0i64));
    let two_groups = decode_wgmma_knobs(2).with("BM", 128i64).with("WM", 8i64).with("BN", 32i64);
    decode_case(&[200usize, 64, 3], 1, 96, 1, &two_groups);
    decode_direct_case(&lens, 12, &decode_wgmma_knobs(2));
    decode_direct_case(&lens[..3], 96, &decode_wgmma_knobs(4));
}

/// 4-deep KV rings (three tiles in flight while one is used; 2026-12-01): the mma.sync kernel at 32-key stages
/// with the score columns on 2 of 4 warp columns and on 2 warps, the wgmma kernel at 32-key stages (one and two
/// warpgroups) and at 16-key stages. Lengths 1/15/17/63/65 and 200 (13 tiles of 16 keys: the ring wraps three
/// times), an empty request; 1..3 splits (a split with fewer tiles than the ring is deep), s_q 1 and 2, the
/// direct kernel.
#[test]
fn decode_deep_rings() {
    let lens = [200usize, 1, 15, 0, 17, 63, 65];
    let sync4 = bn64().with("BN", 32i64).with("SWN", 2i64).with("STAGES", 4i64);
    decode_case(&lens, 1, 12, 1, &sync4);
    decode_case(&lens, 2, 12, 3, &sync4);
    decode_direct_case(&lens, 12, &sync4.clone());
    let narrow4 = bn64().with("BN", 32i64).with("WN", 2i64).with("STAGES", 4i64);
    decode_case(&lens, 1, 16, 2, &narrow4);
    decode_direct_case(&lens, 12, &narrow4);
    let wg4 = decode_wgmma_knobs(2).with("BN", 32i64).with("STAGES", 4i64);
    decode_case(&lens[..4], 1, 96, 2, &wg4);
    decode_direct_case(&lens, 12, &wg4);
    let two_groups16 = decode_wgmma_knobs(2).with("BM", 128i64).with("WM", 8i64).with("BN", 16i64).with("STAGES", 4i64);
    decode_case(&lens[..4], 1, 96, 1, &two_groups16);
    decode_direct_case(&lens[..4], 96, &two_groups16);
    // 16-key stages on mma.sync (replicated scores; 92 KB, two blocks per SM), on 4 and 2 warp columns.
    let sync16 = bn64().with("BN", 16i64).with("SCORES", "replicated").with("STAGES", 4i64);
    decode_case(&lens, 1, 12, 2, &sync16);
    decode_direct_case(&lens, 12, &sync16.clone().with("WN", 2i64));
    // Three partial score accumulators (12-deep instead of 36-deep tensor-core chains) on the deep rings.
    let sync4_accs = sync4.with("QK_ACCS", 3i64);
    decode_case(&lens, 2, 16, 2, &sync4_accs);
    decode_direct_case(&lens, 12, &sync4_accs.with("BT_PREFETCH", 1i64));
    decode_case(&lens, 1, 12, 2, &sync16.with("QK_ACCS", 3i64));
}

/// The overlapped wgmma schedule (tile j's scores and softmax under tile j-1's P V, the ring loading STAGES - 2
/// ahead) and the fast softmax (raw-score max, the scale inside the exponent): lengths 1/15/17/63/65 and 200
/// (the 3-deep ring wraps many times), an empty request (no iteration, no final P V), a split with a single
/// tile, s_q 1 and 2 across m-tiles, 96 heads, the direct kernel.
#[test]
fn decode_wgmma_overlap_and_fast_softmax() {
    let lens = [200usize, 1, 15, 0, 17, 63, 65];
    let over3 = decode_wgmma_knobs(2).with("BN", 32i64).with("STAGES", 3i64).with("OVERLAP", true);
    decode_case(&lens, 1, 12, 1, &over3);
    decode_case(&lens, 2, 16, 3, &over3);
    decode_case(&lens[..4], 1, 96, 2, &over3);
    decode_direct_case(&lens, 12, &over3);
    let over4 = over3.clone().with("STAGES", 4i64).with("SOFTMAX", "fast");
    decode_case(&lens, 1, 16, 2, &over4);
    decode_direct_case(&lens[..4], 96, &over4);
    let fast = decode_wgmma_knobs(2).with("SOFTMAX", "fast");
    decode_case(&lens, 2, 12, 2, &fast);
    decode_direct_case(&lens, 12, &fast);
    // Three 64-key stages do not fit beside the 64-row Q tile (288 KB of shared memory).
    let over64 = decode_wgmma_knobs(4).with("OVERLAP", true).with("STAGES", 3i64);
    assert!(build_decode(&DecodeSpec::default(), &over64).is_err());
}

/// Two warpgroups per block sharing its Q tile and K/V stages (`VWG=2`): the score tile replicated on both, the
/// value accumulators split by columns (each warpgroup 32 of every 64). All 512 columns in one block (DVS=1)
/// and two slices (DVS=2); ragged lengths, an empty request, splits, s_q 2, 96 heads, the direct kernel, with
/// the overlapped schedule and the fast softmax.
#[test]
fn decode_wgmma_two_value_warpgroups() {
    let lens = [200usize, 1, 15, 0, 17, 63, 65];
    let vwg = decode_wgmma_knobs(1).with("VWG", 2i64);
    decode_case(&lens, 1, 12, 1, &vwg);
    decode_case(&lens, 2, 16, 3, &vwg);
    decode_case(&lens[..4], 1, 96, 2, &vwg);
    decode_direct_case(&lens, 12, &vwg);
    decode_direct_case(&lens[..4], 96, &vwg.clone().with("DVS", 2i64));
    let over = vwg.with("BN", 32i64).with("STAGES", 3i64).with("OVERLAP", true).with("SOFTMAX", "fast");
    decode_case(&lens, 1, 16, 2, &over);
    // Two sets of two row warpgroups (BM=128) are not built: VWG=2 takes one warpgroup of rows.
    let spec = DecodeSpec::default();
    let two_rows = decode_wgmma_knobs(1).with("VWG", 2i64).with("BM", 128i64).with("WM", 8i64).with("BN", 32i64);
    assert!(matches!(build_decode(&spec, &two_rows), Err(OpError::InvalidKnobs { .. })));
    assert!(matches!(build_decode(&spec, &decode_wgmma_knobs(2).with("VWG", 3i64)), Err(OpError::InvalidKnobs { .. })));
}

/// `SCORES=shared` on two value warpgroups: warpgroup 0 alone computes the scores and the softmax and passes P and
/// the row scale (then 1 / l) through shared memory; both multiply their value columns. Ragged lengths, an empty
/// request (the final 1 / l is 0), splits, s_q 2 across m-tiles, 96 heads, the direct kernel, both softmaxes and
/// the unrolled score loop, 32-key stages, the overlapped schedule. It needs VWG=2.
#[test]
fn decode_wgmma_shared_scores() {
    let lens = [200usize, 1, 15, 0, 17, 63, 65];
    let shared = decode_wgmma_knobs(1).with("VWG", 2i64).with("SCORES", "shared");
    decode_case(&lens, 1, 12, 1, &shared);
    decode_case(&lens, 2, 16, 3, &shared);
    decode_case(&lens[..4], 1, 96, 2, &shared);
    decode_direct_case(&lens, 12, &shared);
    let fast = shared.clone().with("SOFTMAX", "fast").with("QK_UNROLL", 0i64);
    decode_case(&lens, 2, 16, 2, &fast);
    decode_direct_case(&lens[..4], 96, &fast);
    let spec = DecodeSpec::default();
    let bad = |k: Knobs| assert!(matches!(build_decode(&spec, &k), Err(OpError::InvalidKnobs { .. })), "{k}");
    bad(decode_wgmma_knobs(2).with("SCORES", "shared"));
    // 32-key stages, three deep (P [64, 32] in 64-byte rows).
    let short = shared.with("BN", 32i64).with("STAGES", 3i64);
    decode_case(&lens, 1, 12, 2, &short);
    decode_direct_case(&lens[..4], 96, &short);
    // OVERLAP: tile j-1's P V (every warpgroup) under warpgroup 0's softmax of tile j, the last tile's P V after
    // the loop; 3- and 4-deep rings of 32-key stages.
    let over = short.with("OVERLAP", true).with("SOFTMAX", "fast");
    decode_case(&lens, 1, 12, 1, &over);
    decode_case(&lens, 2, 16, 3, &over);
    decode_direct_case(&lens[..4], 96, &over.clone().with("STAGES", 4i64));
    decode_direct_case(&lens, 12, &over.with("SOFTMAX", "exact").with("QK_UNROLL", 1i64));
}

/// `LOAD=tma`: the K/V ring by bulk tensor copies of whole page rows on full / empty mbarriers (thread 0 refills a
/// slot once every thread released it; the CPU backends check the protocol), the last tile's rows past the cache
/// length zeroed (the cache's unused rows are NaN here, so a missed row shows), with replicated and shared scores,
/// with and without OVERLAP, rings of 2-5 stages wrapping many times (200 keys), an empty request, splits, s_q 2;
/// and the mma.sync kernel.
#[test]
fn decode_wgmma_tma_ring() {
    let lens = [200usize, 1, 15, 0, 17, 63, 65];
    let tma = decode_wgmma_knobs(1).with("VWG", 2i64).with("LOAD", "tma");
    decode_case(&lens, 1, 12, 1, &tma);
    decode_case(&lens, 2, 16, 3, &tma);
    decode_direct_case(&lens[..4], 96, &tma.clone().with("SOFTMAX", "fast").with("QK_UNROLL", 0i64));
    let shared = tma.clone().with("SCORES", "shared");
    decode_case(&lens, 2, 16, 2, &shared);
    decode_direct_case(&lens, 12, &shared);
    let over = shared.with("BN", 32i64).with("STAGES", 4i64).with("OVERLAP", true);
    decode_case(&lens, 1, 12, 3, &over);
    decode_direct_case(&lens[..4], 96, &over.with("STAGES", 3i64));
    let over_rep = tma.with("BN", 32i64).with("STAGES", 3i64).with("OVERLAP", true);
    decode_case(&lens, 2, 16, 2, &over_rep);
    decode_direct_case(&lens, 12, &over_rep.with("DVS", 2i64).with("VWG", 1i64));
    // The mma.sync kernel (a block barrier per tile kept for its score exchange): 64-key stages, and a 5-deep ring
    // of 32-key stages.
    let sync = decode_knobs_for_rows(16).with("LOAD", "tma");
    decode_case(&lens, 1, 12, 2, &sync);
    decode_direct_case(&lens, 16, &sync);
    let deep = sync.with("BN", 32i64).with("SWN", 2i64).with("STAGES", 5i64);
    decode_case(&lens, 2, 12, 3, &deep);
    decode_direct_case(&lens, 12, &deep);
}

#[test]
fn decode_wgmma_knobs_are_checked() {
    let spec = DecodeSpec::default();
    let bad = |k: Knobs| assert!(matches!(build_decode(&spec, &k), Err(OpError::InvalidKnobs { .. })), "{k}");
    // The whole 512-column accumulator does not fit one warpgroup's registers; DVS must divide the 8 tiles.
    bad(decode_wgmma_knobs(1));
    bad(decode_wgmma_knobs(3));
    // 64 rows per warpgroup on [BM / 16, 1] warps, replicated scores, one score accumulator.
    bad(decode_wgmma_knobs(2).with("BM", 32i64).with("WM", 2i64));
    bad(decode_wgmma_knobs(2).with("WN", 2i64));
    bad(decode_wgmma_knobs(2).with("SCORES", "shared"));
    bad(decode_wgmma_knobs(2).with("QK_ACCS", 3i64));
    // BM = 128 with 64-key stages needs 288 KB of shared memory.
    bad(decode_wgmma_knobs(2).with("BM", 128i64).with("WM", 8i64));
    // DVS belongs to the wgmma kernel; MMA names one of the two.
    let sync = decode_sync_knobs_for_rows(16);
    bad(sync.clone().with("DVS", 2i64));
    bad(sync.clone().with("MMA", "tcgen05"));
    bad(sync.clone().with("QK_UNROLL", 1i64));
    bad(decode_wgmma_knobs(2).with("QK_UNROLL", 2i64));
    // OVERLAP keeps two stages in use, so it needs a third; both knobs belong to the wgmma kernel.
    bad(decode_wgmma_knobs(2).with("BN", 32i64).with("OVERLAP", true));
    bad(decode_wgmma_knobs(2).with("SOFTMAX", "exp"));
    bad(sync.clone().with("OVERLAP", true));
    bad(sync.clone().with("SOFTMAX", "fast"));
    assert!(build_decode(&spec, &sync.with("MMA", "sync").with("DVS", 1i64)).is_ok());
}

#[test]
fn decode_new_knobs_are_checked() {
    let spec = DecodeSpec::default();
    let bad = |k: Knobs| assert!(matches!(build_decode(&spec, &k), Err(OpError::InvalidKnobs { .. })), "{k}");
    // SWN must properly divide WN, only with shared scores, and leave 16-column score blocks.
    bad(decode_sync_knobs_for_rows(16).with("SWN", 4i64));
    bad(decode_sync_knobs_for_rows(16).with("SWN", 3i64));
    bad(decode_sync_knobs_for_rows(16).with("SCORES", "replicated").with("SWN", 2i64));
    bad(bn64().with("BN", 32i64));
    // QK_ACCS must divide the 9 chunks of the 576-wide score product.
    bad(decode_sync_knobs_for_rows(16).with("QK_ACCS", 2i64));
    bad(decode_sync_knobs_for_rows(16).with("QK_ACCS", 0i64));
    bad(decode_sync_knobs_for_rows(16).with("BT_PREFETCH", 2i64));
}

#[test]
fn decode_num_splits_fills_the_gpu() {
    // Few requests: split until the SMs are busy, but never below two KV tiles per split.
    assert_eq!(decode_num_splits(1, 1, 4096, 132, 1, 64), 32);
    assert!(decode_num_splits(4, 1, 8192, 132, 1, 64) >= 16);
    // Enough blocks already for one block per SM: one split.
    assert_eq!(decode_num_splits(128, 1, 4096, 132, 1, 64), 1);
    assert_eq!(decode_num_splits(512, 4, 4096, 132, 1, 64), 1);
    // Two blocks per SM: 128 requests take two splits each (256 blocks in 264 slots).
    assert_eq!(decode_num_splits(128, 1, 4096, 132, 2, 32), 2);
    assert_eq!(decode_num_splits(128, 3, 4096, 132, 2, 32), 2);
    // Short contexts are not split.
    assert_eq!(decode_num_splits(1, 1, 64, 132, 1, 64), 1);
}

#[test]
fn decode_blocks_per_sm_follow_shared_memory() {
    let spec = DecodeSpec::default();
    // 170 KB (Q + two 64-key stages + the score exchange): one block per SM.
    assert_eq!(decode_blocks_per_sm(&spec, &bn64()).unwrap(), 1);
    assert_eq!(decode_blocks_per_sm(&spec, &decode_sync_knobs_for_rows(16)).unwrap(), 1);
    // The wgmma default: 216 KB (the 64-row Q tile and two 64-key stages).
    assert_eq!(decode_blocks_per_sm(&spec, &decode_default_knobs()).unwrap(), 1);
    // 92 KB with 32-key stages (score columns on 2 warp columns): two.
    let paired = bn64().with("BN", 32i64).with("SWN", 2i64).with("QK_ACCS", 3i64).with("BT_PREFETCH", 1i64);
    assert_eq!(decode_blocks_per_sm(&spec, &paired).unwrap(), 2);
    // 4-deep rings of 32-key stages: 166 KB (+2 KB of score exchange), one block per SM; 3 stages: 131 KB, one.
    let sync4 = bn64().with("BN", 32i64).with("SWN", 2i64).with("STAGES", 4i64);
    assert_eq!(decode_blocks_per_sm(&spec, &sync4).unwrap(), 1);
    assert_eq!(decode_blocks_per_sm(&spec, &sync4.clone().with("STAGES", 3i64)).unwrap(), 1);
    // Five 32-key stages still fit beside the Q tile and the exchange (200 KB); six (236 KB) do not.
    assert!(build_decode(&spec, &sync4.clone().with("STAGES", 5i64)).is_ok());
    assert!(matches!(build_decode(&spec, &sync4.with("STAGES", 6i64)), Err(OpError::InvalidKnobs { .. })));
    // Invalid knobs are an error, not a guess.
    assert!(decode_blocks_per_sm(&spec, &decode_default_knobs().with("BN", 48i64)).is_err());
}

// ---------------------------------------------------------------------------------------------------------
// Gate projection

/// The gated W_UV projection against `gate_wuv`.
fn gate_case(gate: bool, t: usize, h: usize, knobs: &Knobs, o_latent: Option<Vec<f32>>) {
    let seed = fresh_seed();
    let mut rng = seeded(seed);
    let spec = GateSpec::new(gate);
    let (dl, dv) = (spec.dl as usize, spec.dv as usize);
    let ol = o_latent.unwrap_or_else(|| bf16_normal(&mut rng, t * h * dl, 1.0));
    let w = bf16_normal(&mut rng, h * dv * dl, 0.05);
    let z = gate.then(|| gate_logits(&mut rng, t * h * dv));
    let kern = build_gate(&spec, knobs).unwrap();
    let what = format!("{} T={t} H={h}", kern.name);
    let mut plan = Plan::default();
    let mut args = vec![plan.input("o_latent", bf16(&[t, h, dl], &ol)), plan.input("w_uv", bf16(&[h, dv, dl], &w))];
    if let Some(z) = &z {
        args.push(plan.input("z", bf16(&[t, h, dv], z)));
    }
    args.push(plan.output("y", DType::Bf16, &[t, h, dv]));
    plan.step(kern, &args, &[]);
    let want = gate_wuv(&ol, &w, z.as_deref(), t, h, dl, dv).unwrap();
    run_everywhere(seed, &what, &plan, |ex, outs| {
        check(&format!("{what} [{ex}]"), seed, &f32s(outs, "y"), &want, BF16_TOL);
    });
}

#[test]
fn gate_projection() {
    for (gate, t, h) in [(true, 1, 12), (true, 17, 3), (false, 65, 2), (true, 15, 16)] {
        gate_case(gate, t, h, &gate_default_knobs(), None);
    }
    for knobs in [
        gate_default_knobs().with("BM", 16i64).with("WM", 1i64).with("WN", 4i64).with("BK", 32i64),
        gate_default_knobs().with("BM", 128i64).with("WM", 4i64).with("WN", 2i64).with("STAGES", 2i64),
    ] {
        gate_case(true, 17, 2, &knobs, None);
        gate_case(true, 130, 1, &knobs, None);
    }
}

#[test]
fn decode_then_gate_chain() {
    // The latent output of decode (bf16, zeros for the empty request) feeds the gated W_UV projection.
    let (lens, s_q, h) = ([70usize, 0, 5], 2, 12);
    let o = decode_case(&lens, s_q, h, 2, &decode_default_knobs());
    gate_case(true, lens.len() * s_q, h, &gate_default_knobs(), Some(o));
}
