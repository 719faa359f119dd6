//! `latent_moe_gemm` with `LOAD=tma` (operand tiles by bulk tensor copies completing on per-stage mbarriers)
//! against an f64 product on the CPU backends: ragged groups with empty ones, K not a multiple of the 64-wide
//! stage (one partial stage, several stages), N tails, every epilogue, routing weights, the dense variant,
//! both tile walks and grids small enough that every block walks many tiles (the mbarrier parity runs across
//! tiles whose K-step counts are not multiples of STAGES: a wrong parity is an interpreter error). The JIT must
//! lower the kernel and agree with the interpreter bit for bit. The emitted CUDA compiles without spills.
#[path = "common/gemm_f64.rs"]
mod gemm_f64;

use gemm_f64::{Case, seeded, tma_knobs};

use k3k_ir::*;
use k3k_ops::latent_moe_gemm::*;
use rand::rngs::StdRng;

/// The shared f64 check at grids of 1 and 3 blocks; the kernel must use tensor maps and mbarriers.
fn check_case(seed: u64, rng: &mut StdRng, case: Case, knobs: &Knobs) {
    gemm_f64::check_case(seed, rng, case, knobs, &[1, 3], |kern| {
        assert!(!kern.tensor_maps.is_empty() && !kern.mbarriers.is_empty(), "{}", kern.name);
    });
}

#[test]
fn tma_loads_match_f64_on_ragged_groups_k_and_n_tails() {
    let (seed, mut rng) = seeded();
    let counts = [0usize, 17, 65, 0, 1, 130, 0, 63];
    for (k, n) in [(8usize, 130usize), (72, 70), (200, 64)] {
        for overlap in ["off", "on"] {
            for knobs in [tma_knobs(64, 64, 3), tma_knobs(64, 32, 4), tma_knobs(128, 64, 3)] {
                let knobs = knobs.with("OVERLAP", overlap);
                check_case(seed, &mut rng, Case::plain(&counts, k, n), &knobs);
            }
        }
    }
}

#[test]
fn tma_loads_match_f64_with_glu_epilogues_routing_weights_and_dense() {
    let (seed, mut rng) = seeded();
    let counts = [3usize, 0, 70, 129];
    for epilogue in [Epilogue::SwiGlu, Epilogue::SituGlu] {
        for (k, n_out) in [(136usize, 40usize), (64, 65)] {
            // GLU tiles: BN covers gate + up, so the accumulator is BN/2 wide.
            check_case(seed, &mut rng, Case(&counts, true, epilogue, true, k, n_out), &tma_knobs(64, 128, 3));
            check_case(seed, &mut rng, Case(&counts, true, epilogue, false, k, n_out), &tma_knobs(128, 64, 4));
        }
    }
    check_case(seed, &mut rng, Case(&[77], false, Epilogue::None, true, 200, 90), &tma_knobs(64, 64, 3));
    check_case(seed, &mut rng, Case(&[77], false, Epilogue::SwiGlu, false, 72, 33), &tma_knobs(64, 64, 3));
}

#[test]
fn tma_knob_is_checked() {
    let spec = GemmSpec::for_shape(true, Epilogue::None, false, 64, 64);
    let e = build_kernel(&spec, &default_knobs().with(LOAD_KNOB, "dma")).unwrap_err().to_string();
    assert!(e.contains("LOAD must be auto, cp_async or tma"), "{e}");
    let e = build_kernel(&spec, &sync_knobs().with(LOAD_KNOB, "tma")).unwrap_err().to_string();
    assert!(e.contains("LOAD=tma needs MMA=wgmma"), "{e}");
    let odd = GemmSpec::for_shape(true, Epilogue::None, false, 60, 64);
    let e = build_kernel(&odd, &default_knobs().with(LOAD_KNOB, "tma")).unwrap_err().to_string();
    assert!(e.contains("K a multiple of 8"), "{e}");
    // The default (`auto`) is the TMA kernel where the copy engine serves the shape ...
    let k = build_kernel(&spec, &default_knobs()).unwrap();
    assert!(!k.tensor_maps.is_empty() && !k.mbarriers.is_empty());
    // ... and the cp.async kernel where it cannot (K not a multiple of 8, or mma.sync), and on request.
    for (sp, knobs) in [
        (&odd, default_knobs()),
        (&spec, sync_knobs().with(LOAD_KNOB, "auto")),
        (&spec, default_knobs().with(LOAD_KNOB, "cp_async")),
    ] {
        let k = build_kernel(sp, &knobs).unwrap();
        assert!(k.tensor_maps.is_empty() && k.mbarriers.is_empty(), "{knobs}");
    }
    // A knob set without LOAD (records tuned before the knob existed) means the cp.async kernel.
    let mut old = default_knobs();
    old.0.remove(LOAD_KNOB);
    let k = build_kernel(&spec, &old).unwrap();
    assert!(k.tensor_maps.is_empty() && k.mbarriers.is_empty());
}

/// The kernels of the four bench presets' shapes and a GLU one compile for sm_90a without spills.
#[test]
fn tma_kernels_compile_without_spills() {
    for (epilogue, row_scale, k) in
        [(Epilogue::None, false, 1024usize), (Epilogue::SituGlu, true, 1024), (Epilogue::SwiGlu, false, 4096)]
    {
        let spec = GemmSpec::for_shape(true, epilogue, row_scale, k, 1024);
        let kern = build_kernel(&spec, &default_knobs().with(LOAD_KNOB, "tma")).unwrap();
        let m = k3k_codegen::build(&kern, k3k_codegen::BuildOptions { assemble: true })
            .unwrap_or_else(|e| panic!("{e}\n{}", k3k_codegen::render(&kern).unwrap_or_default()));
        let r = m.resources.clone().expect("assembled");
        eprintln!("{}: {r:?}", kern.name);
        assert!(!r.spills() && r.stack_frame_bytes == 0, "{}: {r:?}", kern.name);
    }
}
