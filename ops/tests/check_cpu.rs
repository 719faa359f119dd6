//! Every operator's tile programs, run by the CPU interpreter on fresh random small problems (edge sizes and
//! empty groups included), match the f64 reference (SEMANTICS.md section 3 tolerances).
use k3k_ops::plan::Executor;
use k3k_ops::registry;
use rand::{Rng, SeedableRng, rngs::StdRng};

#[test]
fn random_cases_match_reference_on_cpu() {
    let cases: usize = std::env::var("K3K_CPU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    for op in registry::all() {
        let seed: u64 = rand::rng().random();
        let mut rng = StdRng::seed_from_u64(seed);
        for i in 0..cases {
            let preset = op.random_case(&mut rng);
            let inst = op.instance(&preset, rng.random()).unwrap();
            let plan = inst.plan(&op.default_knobs()).unwrap();
            let out = Executor::Cpu
                .run(&plan)
                .unwrap_or_else(|e| panic!("{} case {i} ({}): {e}", op.name(), inst.describe()));
            let r = inst.check(&out).unwrap();
            if std::env::var("K3K_VERBOSE").is_ok() {
                eprintln!("{} {} -> {:.2e} {}", op.name(), inst.describe(), r.max_rel_err, r.scope);
            }
            assert!(
                r.passed,
                "{} case {i} (seed {seed}) {}: {} rel {:.3e} {}",
                op.name(),
                inst.describe(),
                r.scope,
                r.max_rel_err,
                r.detail
            );
        }
    }
}
