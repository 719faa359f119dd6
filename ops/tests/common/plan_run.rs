//! What the kda tests share: the seed of a run and a plan run step by step on the Cranelift JIT.
use k3k_codegen::cpu::interp::InterpOptions;
use k3k_codegen::cpu::jit;
use k3k_ops::plan::{Outputs, Plan};

/// A fresh seed, or `K3K_SEED` (to replay a printed one).
pub fn seed() -> u64 {
    let s =
        std::env::var("K3K_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(k3k_reference::random::fresh_seed);
    eprintln!("seed {s}");
    s
}

/// Every step of a plan by the Cranelift JIT, in plan order, outputs poisoned first.
pub fn run_plan_jit(plan: &Plan) -> Outputs {
    let bufs = plan
        .run_host(|kernel, args, scalars| {
            let jk = jit::compile(kernel).unwrap_or_else(|e| panic!("jit {}: {e}", kernel.name));
            jk.run(args, scalars, InterpOptions::default()).unwrap();
            Ok(())
        })
        .unwrap();
    plan.outputs(bufs)
}
