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
