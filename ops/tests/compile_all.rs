//! Every kernel variant renders, compiles with NVRTC and assembles for sm_90a with no spills.
use k3k_codegen::{BuildOptions, build};
use k3k_ops::latent_moe_gemm::*;

#[test]
fn gemm_default_compiles() {
    for epi in [Epilogue::None, Epilogue::SituGlu] {
        let spec = GemmSpec::for_shape(true, epi, epi == Epilogue::SituGlu, 3584, 6144);
        let k = build_kernel(&spec, &default_knobs()).unwrap();
        let m = match build(&k, BuildOptions { assemble: true }) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        let r = m.resources.clone().unwrap();
        eprintln!("{}: {:?} nvrtc {:.0} ms", k.name, r, m.nvrtc_ms);
        assert!(!r.spills(), "{r:?}");
    }
}

#[test]
fn gemm_overlapped_walk_compiles_without_spills() {
    // The preset shapes (K 3584 / 3072), plain and fused SiTU-GLU + routing weight, both tile walks.
    for (k, n, epi) in [(3584, 6144, Epilogue::None), (3072, 3584, Epilogue::None), (3584, 6144, Epilogue::SituGlu)] {
        for overlap in ["on", "off"] {
            let spec =
                GemmSpec::for_shape(true, epi, epi == Epilogue::SituGlu, k, if epi.is_glu() { n / 2 } else { n });
            let kern = build_kernel(&spec, &default_knobs().with("OVERLAP", overlap)).unwrap();
            let m = match build(&kern, BuildOptions { assemble: true }) {
                Ok(m) => m,
                Err(e) => panic!("{e}"),
            };
            let r = m.resources.clone().unwrap();
            eprintln!("{}: {:?}", kern.name, r);
            assert!(!r.spills(), "{r:?}");
        }
    }
}

#[test]
fn distinct_gemm_variants_have_distinct_names() {
    // Loaded-kernel caches key on the IR hash, but names show up in logs, PTX and results: two different
    // kernels must never share one.
    let mut by_name = std::collections::HashMap::new();
    for grouped in [false, true] {
        for epi in [Epilogue::None, Epilogue::SituGlu, Epilogue::SwiGlu] {
            for row_scale in [false, true] {
                for (k, n) in [(64, 64), (31, 64), (30, 63), (60, 64)] {
                    let spec = GemmSpec::for_shape(grouped, epi, row_scale, k, n);
                    let kern = build_kernel(&spec, &default_knobs()).unwrap();
                    let h = k3k_ir::stable_hash(&kern);
                    if let Some(prev) = by_name.insert(kern.name.clone(), h.clone()) {
                        assert_eq!(prev, h, "two different kernels named {}", kern.name);
                    }
                }
            }
        }
    }
    assert!(by_name.len() >= 30, "{}", by_name.len());
}
