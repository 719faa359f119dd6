//! The gated-MLA operators (`gated_mla.prefill`, `gated_mla.decode`, `gated_mla.gate`): their benchmark presets
//! build kernels that compile with NVRTC and assemble for sm_90a with 0 spills (no data generated); the decode
//! knob mapping; the work formulas; fixed edge problems on the CPU interpreter (varlen, rows without keys, a
//! forced split count); and the sampled check path of benchmark-sized problems, fed outputs made from the f64
//! reference (must pass) and perturbed ones (must fail).
use k3k_codegen::{BuildOptions, build};
use k3k_ir::{DType, HostTensor, Knobs};
use k3k_ops::gated_mla::ops::*;
use k3k_ops::gated_mla::*;
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::{Executor, Outputs, Plan};
use k3k_ops::registry;
use k3k_reference::mla as refmla;

fn op(name: &str) -> Box<dyn Operator> {
    registry::all().into_iter().find(|o| o.name() == name).unwrap_or_else(|| panic!("{name} not registered"))
}

#[test]
fn registered_with_the_spec_presets() {
    let names = registry::names();
    for n in ["gated_mla.prefill", "gated_mla.decode", "gated_mla.gate"] {
        assert!(names.contains(&n), "{names:?}");
    }
    let presets = |n: &str| op(n).bench_presets().into_iter().map(|p| p.name).collect::<Vec<_>>();
    assert_eq!(presets("gated_mla.prefill"), ["causal T8192 H96 d192/128", "causal T32768 H12"]);
    assert_eq!(presets("gated_mla.decode"), ["b128 S4096 H12", "b128 S4096 H96"]);
    assert_eq!(registry::select("gated_mla").len(), 3);
}

#[test]
fn bench_presets_compile_without_spills() {
    for name in ["gated_mla.prefill", "gated_mla.decode", "gated_mla.gate"] {
        let o = op(name);
        for p in o.bench_presets() {
            for k in o.kernels(&p, &o.default_knobs()).unwrap() {
                let m = build(&k, BuildOptions { assemble: true }).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                let r = m.resources.clone().expect("assembled");
                eprintln!(
                    "{name} {}: {}: {} registers, spill {}/{} B",
                    p.name, k.name, r.registers, r.spill_store_bytes, r.spill_load_bytes
                );
                assert!(!r.spills(), "{name} {}: {}: spills {r:?}", p.name, k.name);
                assert!(!r.wgmma_serialized, "{name} {}: {}: wgmma serialized {r:?}", p.name, k.name);
            }
        }
    }
}

#[test]
fn decode_knob_mapping() {
    let o = op("gated_mla.decode");
    let h12 = DecodeProblem::from_preset(&o.bench_presets()[0]).unwrap();
    let h96 = DecodeProblem::from_preset(&o.bench_presets()[1]).unwrap();
    // The defaults stand for the row count's defaults; 128 requests of 12 heads (the mma.sync kernel, one
    // 16-row tile: 128 blocks) and of 96 heads (the wgmma kernel, two m-tiles of 64 rows, each a block of two
    // warpgroups holding all value columns: 256 blocks) fill the GPU without splitting. The automatic rule: wgmma
    // from 64 rows, mma.sync below.
    assert_eq!(decode_plan_knobs(&h12, &o.default_knobs()).unwrap(), (decode_knobs_for_rows(12), 1));
    assert_eq!(decode_plan_knobs(&h96, &o.default_knobs()).unwrap(), (decode_knobs_for_rows(96), 1));
    assert_eq!(decode_knobs_for_rows(96), decode_auto_wgmma_knobs());
    assert_eq!(decode_blocks_per_request(&DecodeSpec::default(), &decode_auto_wgmma_knobs(), 96).unwrap(), 2);
    assert_eq!(o.default_knobs(), decode_knobs_for_rows(16));
    assert_eq!(decode_knobs_for_rows(12).str("MMA").unwrap(), "sync");
    assert_eq!(decode_knobs_for_rows(63).str("MMA").unwrap(), "sync");
    assert_eq!(decode_knobs_for_rows(64), decode_auto_wgmma_knobs());
    // The mma.sync knobs, given explicitly, are used as given (3 m-tiles of 32 rows at 96 heads: one split).
    let sync96 = decode_sync_knobs_for_rows(96);
    assert_eq!(decode_plan_knobs(&h96, &sync96).unwrap(), (sync96, 1));
    assert_eq!(decode_blocks_per_request(&DecodeSpec::default(), &decode_wgmma_knobs(2), 96).unwrap(), 4);
    assert_eq!(decode_blocks_per_request(&DecodeSpec::default(), &decode_sync_knobs_for_rows(96), 96).unwrap(), 3);
    // Any other set is used as given; NSPLIT forces the split count and is not passed to the kernel.
    let other = decode_default_knobs().with("STAGES", 3i64);
    assert_eq!(decode_plan_knobs(&h96, &other).unwrap().0, other);
    let forced = o.default_knobs().with("NSPLIT", 5i64);
    assert_eq!(decode_plan_knobs(&h12, &forced).unwrap(), (decode_knobs_for_rows(12), 5));
    // Few requests: split to fill the SMs (at most half the 64 key tiles of 4096 keys).
    let one = DecodeProblem { b: 1, sq: 1, h: 12, lens: vec![4096] };
    assert_eq!(decode_plan_knobs(&one, &o.default_knobs()).unwrap().1, 32);
    // One split, one query: by default the direct kernel alone (no combine); DIRECT=0 keeps the split-KV pair.
    let ks = o.kernels(&o.bench_presets()[1], &o.default_knobs()).unwrap();
    assert_eq!(ks.len(), 1);
    assert_eq!(ks[0].name, build_decode_direct(&DecodeSpec::default(), &decode_knobs_for_rows(96)).unwrap().name);
    let ks = o.kernels(&o.bench_presets()[1], &o.default_knobs().with("DIRECT", 0i64)).unwrap();
    assert_eq!(ks.len(), 2);
    assert_eq!(ks[0].name, build_decode(&DecodeSpec::default(), &decode_knobs_for_rows(96)).unwrap().name);
    assert!(decode_plan(&h96, &o.default_knobs()).unwrap().2);
    assert!(!decode_plan(&h96, &o.default_knobs().with("DIRECT", 0i64)).unwrap().2);
    // Several splits (one request) or several queries per request: never direct.
    assert!(!decode_plan(&one, &o.default_knobs()).unwrap().2);
    let sq2 = DecodeProblem { b: 128, sq: 2, h: 12, lens: vec![4096; 128] };
    assert!(!decode_plan(&sq2, &o.default_knobs()).unwrap().2);
}

#[test]
fn work_formulas() {
    let p = op("gated_mla.prefill");
    let w = p.instance(&Preset::new("t", &[("T", 64), ("S", 64), ("H", 2)]), 1).unwrap().work();
    assert_eq!(w.flops, 2.0 * 2.0 * 64.0 * 64.0 / 2.0 * 320.0);
    assert_eq!(w.bytes, 2.0 * 2.0 * 64.0 * (192.0 + 192.0 + 128.0 + 128.0 + 128.0) + 4.0 * 2.0 * 64.0);
    // A cached prefix: only the causal square is halved.
    let w = p.instance(&Preset::new("t", &[("T", 16), ("S", 80), ("H", 1), ("gate", 0)]), 1).unwrap().work();
    assert_eq!(w.flops, 2.0 * (16.0 * 64.0 + 16.0 * 16.0 / 2.0) * 320.0);
    let d = op("gated_mla.decode");
    let w = d.instance(&Preset::new("t", &[("B", 2), ("H", 3), ("l0", 10), ("l1", 0)]), 1).unwrap().work();
    assert_eq!(w.flops, 2.0 * 3.0 * 10.0 * 1088.0);
    assert_eq!(w.bytes, 2.0 * 10.0 * 576.0 + 2.0 * 3.0 * (2.0 * 1088.0 + 4.0));
}

fn run_and_check(o: &dyn Operator, p: &Preset, knobs: &Knobs, seed: u64) {
    let inst = o.instance(p, seed).unwrap();
    let out = Executor::Cpu.run(&inst.plan(knobs).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", inst.describe()));
    let r = inst.check(&out).unwrap();
    eprintln!("{}: {} rel {:.2e} ({})", o.name(), inst.describe(), r.max_rel_err, r.scope);
    assert!(r.passed, "{} (seed {seed}): {} rel {:.3e} {}", inst.describe(), r.scope, r.max_rel_err, r.detail);
}

#[test]
fn edge_problems_on_the_interpreter() {
    let seed: u64 = rand::random();
    let p = op("gated_mla.prefill");
    // Varlen with an empty sequence, a sequence without keys and a cached prefix.
    let varlen = Preset::new(
        "varlen",
        &[
            ("N", 4),
            ("H", 2),
            ("q0", 17),
            ("k0", 30),
            ("q1", 0),
            ("k1", 5),
            ("q2", 3),
            ("k2", 0),
            ("q3", 65),
            ("k3", 65),
        ],
    );
    run_and_check(p.as_ref(), &varlen, &p.default_knobs(), seed);
    // Causal with S < T: the first rows see no key (o = 0, lse = +inf).
    run_and_check(p.as_ref(), &Preset::new("lonely", &[("T", 20), ("S", 5), ("H", 1)]), &p.default_knobs(), seed);
    let d = op("gated_mla.decode");
    let dp = Preset::new("mtp", &[("B", 3), ("SQ", 2), ("H", 12), ("l0", 150), ("l1", 0), ("l2", 1)]);
    run_and_check(d.as_ref(), &dp, &d.default_knobs(), seed);
    run_and_check(d.as_ref(), &dp, &d.default_knobs().with("NSPLIT", 3i64), seed);
}

/// Outputs made from the f64 reference (rounded as the kernels round), so the sampled check can be exercised
/// on benchmark-sized shapes without running the kernels.
fn outputs(plan: &Plan, tensors: &[(&str, DType, &[usize], &[f64])]) -> Outputs {
    let _ = plan;
    let mut o = Outputs::default();
    for (n, dt, shape, v) in tensors {
        let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        o.0.insert(n.to_string(), HostTensor::from_f32(*dt, shape, &f));
    }
    o
}

fn input_f32(plan: &Plan, name: &str) -> Vec<f32> {
    plan.buffers[plan.index(name).unwrap()].tensor.to_f32_vec()
}

#[test]
fn sampled_checks_pass_on_the_reference_and_catch_errors() {
    // Prefill, non-causal T = S = 1040, one head: above the full-check budget, so rows are sampled.
    let p = op("gated_mla.prefill");
    let (t, h) = (1040usize, 1usize);
    let inst = p.instance(&Preset::new("big", &[("T", t as i64), ("H", 1), ("causal", 0)]), 7).unwrap();
    let plan = inst.plan(&p.default_knobs()).unwrap();
    let (q, k, v, z) = (input_f32(&plan, "q"), input_f32(&plan, "k"), input_f32(&plan, "v"), input_f32(&plan, "z"));
    let (wo, wl) = refmla::mla_prefill(&q, &k, &v, Some(&z), t, t, h, 192, 128, tau() as f64, false).unwrap();
    let good = outputs(&plan, &[("o", DType::Bf16, &[t, h, 128], &wo), ("lse", DType::F32, &[h, t], &wl)]);
    let r = inst.check(&good).unwrap();
    assert!(r.passed && r.scope.contains("sampled"), "{r:?}");
    let off: Vec<f64> = wo.iter().map(|x| x * 1.02).collect();
    let bad = outputs(&plan, &[("o", DType::Bf16, &[t, h, 128], &off), ("lse", DType::F32, &[h, t], &wl)]);
    assert!(!inst.check(&bad).unwrap().passed);
    let off: Vec<f64> = wl.iter().map(|x| x + 0.05).collect();
    let bad = outputs(&plan, &[("o", DType::Bf16, &[t, h, 128], &wo), ("lse", DType::F32, &[h, t], &off)]);
    assert!(!inst.check(&bad).unwrap().passed);

    // Decode, 16 requests of 1100 keys, 16 heads: 8 requests sampled.
    let d = op("gated_mla.decode");
    let (b, hh, s) = (16usize, 16usize, 1100usize);
    let inst = d.instance(&Preset::new("big", &[("B", b as i64), ("H", hh as i64), ("S", s as i64)]), 9).unwrap();
    let plan = inst.plan(&d.default_knobs()).unwrap();
    let (q, kv) = (input_f32(&plan, "q"), input_f32(&plan, "kv"));
    let table: Vec<i32> = input_f32(&plan, "block_table").iter().map(|&x| x as i32).collect();
    let lens = vec![s as i32; b];
    let (wo, wl) = refmla::mla_decode_paged(&q, &kv, &table, &lens, b, 1, hh, 576, 512, 64, tau() as f64).unwrap();
    let good = outputs(&plan, &[("o", DType::Bf16, &[b, 1, hh, 512], &wo), ("lse", DType::F32, &[b, hh, 1], &wl)]);
    let r = inst.check(&good).unwrap();
    assert!(r.passed && r.scope.contains("8 sampled requests"), "{r:?}");
    // Every request is either sampled or not: corrupt them all.
    let off: Vec<f64> = wo.iter().map(|x| -x).collect();
    let bad = outputs(&plan, &[("o", DType::Bf16, &[b, 1, hh, 512], &off), ("lse", DType::F32, &[b, hh, 1], &wl)]);
    assert!(!inst.check(&bad).unwrap().passed);
}
