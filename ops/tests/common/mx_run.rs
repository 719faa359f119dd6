//! The MXFP4 matmul tests' runner, shared by the decode-path and the prefill-path tests.

use k3k_ir::Knobs;
use k3k_ops::mx::matmul::{Mxfp4Matmul, default_knobs};
use k3k_ops::op::{Operator, Preset};
use k3k_ops::plan::Executor;

/// Run the plan of `knobs` for preset `p` on the CPU and check it against the reference; the plan's launches.
pub fn run(p: &Preset, seed: u64, knobs: &Knobs) -> usize {
    let op = Mxfp4Matmul;
    let inst = op.instance(p, seed).unwrap();
    let plan = inst.plan(knobs).unwrap_or_else(|e| panic!("{}: {e}", p.name));
    let out = Executor::Cpu.run(&plan).unwrap_or_else(|e| panic!("{} ({}): {e}", p.name, inst.describe()));
    let r = inst.check(&out).unwrap();
    if std::env::var("K3K_VERBOSE").is_ok() {
        eprintln!("{} -> {:.2e} ({} launches) [{knobs}]", inst.describe(), r.max_rel_err, plan.steps.len());
    }
    assert!(r.passed, "{} seed {seed} ({}) [{knobs}]: rel {:.3e} {}", p.name, inst.describe(), r.max_rel_err, r.detail);
    plan.steps.len()
}

/// The default knobs with `pairs` set.
pub fn knobs(pairs: &[(&str, i64)]) -> Knobs {
    let mut k = default_knobs();
    for (n, v) in pairs {
        k.set(n, *v);
    }
    k
}

/// A dense problem `M` x `K` x `N` (`packed`: the packed nibble layout, `wide`: MXFP8 activations), named
/// `"{what} M{m} K{k} N{n}"`.
pub fn dense_preset(what: &str, (m, k, n, packed, wide): (i64, i64, i64, i64, i64)) -> Preset {
    Preset::new(&format!("{what} M{m} K{k} N{n}"), &[("M", m), ("K", k), ("N", n), ("packed", packed), ("wide", wide)])
}

/// Four groups of 0, 17, 0 and `last` rows, K 96, N 34, with the epilogue, routing weights, weight layout, MXFP8
/// activations and activation quantization of `(epilogue, p, packed, wide, act)`.
pub fn grouped_preset(what: &str, last: i64, (epi, pw, packed, wide, act): (i64, i64, i64, i64, i64)) -> Preset {
    let dims = [("c0", 0), ("c1", 17), ("c2", 0), ("c3", last), ("K", 96), ("N", 34)];
    let flags = [("epilogue", epi), ("p", pw), ("packed", packed), ("wide", wide), ("act", act)];
    Preset::new(what, &[&[("G", 4)][..], &dims, &flags].concat())
}
