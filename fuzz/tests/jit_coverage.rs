//! The Cranelift JIT lowers every kernel of every operator, not only the default configuration's: for each
//! operator, its default knobs and an evenly spaced sample of its knob space, on its benchmark presets and a
//! few random cases, every kernel compiles (no interpreter fallback, no Cranelift error). `k3k fuzz --backend
//! jit-diff` then checks JIT == interpreter bit for bit on the default knobs (and `--knobs` variants).

use k3k_codegen::cpu::jit;
use k3k_ops::registry;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::HashSet;

#[test]
fn the_jit_compiles_every_kernel_of_every_operator_across_its_knob_space() {
    let mut rng = StdRng::seed_from_u64(9);
    let mut bad = vec![];
    for op in registry::all() {
        let mut knob_sets = vec![op.default_knobs()];
        knob_sets.extend(op.knob_space().strided(48));
        let mut presets = op.bench_presets();
        presets.extend((0..3).map(|_| op.random_case(&mut rng)));
        let (mut seen, mut configs) = (HashSet::new(), 0);
        for p in &presets {
            for knobs in &knob_sets {
                let Ok(kernels) = op.kernels(p, knobs) else { continue };
                configs += 1;
                for k in kernels {
                    if !seen.insert(k3k_ir::stable_hash(&k)) {
                        continue;
                    }
                    if let Err(e) = jit::compile(&k) {
                        bad.push(format!("{}: kernel `{}` (knobs {knobs}): {e}", op.name(), k.name));
                    }
                }
            }
        }
        eprintln!("{}: {} distinct kernels of {configs} configurations compiled", op.name(), seen.len());
        assert!(!seen.is_empty(), "{}: no kernel built", op.name());
    }
    assert!(bad.is_empty(), "{} kernel(s) not compiled:\n{}", bad.len(), bad.join("\n"));
}

/// JIT == interpreter bit for bit (and both within the reference's tolerances) on random cases of every
/// operator, each case on the default knobs or one of a sample of the knob space, with every launch compiled.
#[test]
fn the_jit_matches_the_interpreter_bit_for_bit_across_knob_sets() {
    use k3k_fuzz::{DiffBackend, FuzzOptions, KnobSet, fuzz_op};
    use std::time::Duration;
    let mut bad = vec![];
    for op in registry::all() {
        let mut knob_sets = vec![KnobSet { label: "default".into(), knobs: op.default_knobs() }];
        knob_sets.extend(
            op.knob_space().strided(8).into_iter().map(|k| KnobSet { label: format!("sampled {k}"), knobs: k }),
        );
        let opts = FuzzOptions {
            cases: 12,
            budget: Some(Duration::from_secs(6)),
            seed: 20_261_130,
            knob_sets,
            max_shrink_iters: 16,
            max_shrink_time: Duration::from_secs(20),
            ..FuzzOptions::default()
        };
        let mut be = DiffBackend::default();
        let r = fuzz_op(&mut be, op.as_ref(), &opts, &mut |l| eprintln!("{l}"));
        eprintln!(
            "{}: {} cases ({} skipped), {} mismatches; {} launches compiled, {} on the interpreter",
            r.op, r.cases, r.skipped, r.mismatches, be.jit.jit_launches, be.jit.interp_launches
        );
        assert!(r.cases > 0, "{}: no case ran", r.op);
        if r.mismatches > 0 {
            bad.push(r.failures.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n"));
        }
        // The JIT lowers every statement: no kernel may run on the interpreter.
        if !be.jit.fallbacks.is_empty() || be.jit.interp_launches > 0 {
            bad.push(format!(
                "{}: {} launch(es) ran on the interpreter: {:?}",
                r.op, be.jit.interp_launches, be.jit.fallbacks
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
