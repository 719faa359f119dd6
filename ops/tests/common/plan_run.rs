//! What the kda tests share: the seed of a run and a plan run step by step on the Cranelift JIT.
use k3k_codegen::cpu::interp::InterpOptions;
use k3k_codegen::cpu::jit;
use k3k_ops::plan::{Executor, GpuExec, Outputs, Plan};
use k3k_runtime::Gpu;

/// A fresh seed, or `K3K_SEED` (to replay a printed one).
pub fn seed() -> u64 {
    let s =
        std::env::var("K3K_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(k3k_reference::random::fresh_seed);
    eprintln!("seed {s}");
    s
}

/// kda's default knobs with `ISOLVE` and `IREPL` as they were before they became defaults (2026-12-07 14:34 UTC),
/// and `MADDR` and `IWU` as they were then: the kernel the knob tests written against it compare with and are named after, whose
/// spills they state.
#[allow(dead_code)] // (only the kda knob tests use it)
pub fn kda_knobs_before_the_solve() -> k3k_ir::Knobs {
    k3k_ops::kda::default_knobs().with("ISOLVE", 0i64).with("IREPL", 0i64).with("MADDR", "load").with("IWU", "auto")
}

/// Varlen 17, 0, 64, 45 tokens (a partial first chunk, an empty sequence, two full chunks, a full and a partial one),
/// GVA HV = 2H, h0: the state pass's varlen mix, safe or exact path, key and value head dims `k`, `v`.
#[allow(dead_code)] // (only the state pass's tests use it)
pub fn varlen_mix(safe: i64, k: i64, v: i64) -> Vec<(&'static str, i64)> {
    vec![
        ("N", 4),
        ("L0", 17),
        ("L1", 0),
        ("L2", 64),
        ("L3", 45),
        ("H", 1),
        ("HV", 2),
        ("K", k),
        ("V", v),
        ("safe", safe),
        ("h0", 1),
    ]
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

/// The plan's outputs on the interpreter, the JIT, and GPU 0 with `K3K_GPU=1`.
#[allow(dead_code)] // (not every test that includes this module runs all three)
pub fn run_everywhere(plan: &Plan, what: &str) -> Vec<(&'static str, Outputs)> {
    let mut outs =
        vec![("cpu-interp", Executor::Cpu.run(plan).unwrap_or_else(|e| panic!("{what} on the interpreter: {e}")))];
    outs.push(("cpu-jit", run_plan_jit(plan)));
    if std::env::var("K3K_GPU").is_ok_and(|v| v == "1") {
        let gpu = Gpu::open(0).unwrap_or_else(|e| panic!("K3K_GPU=1 but no GPU: {e}"));
        let mut ex = Executor::Gpu(Box::new(GpuExec::new(gpu)));
        outs.push(("cuda", ex.run(plan).unwrap_or_else(|e| panic!("{what} on the GPU: {e}"))));
    }
    outs
}
