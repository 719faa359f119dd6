//! Without NVRTC the builder fails with one message that says how to get it, unless run-time NVRTC was asked
//! for. (A test binary of its own: it hides NVRTC through the process environment.)

use k3k_build::{BuildError, Builder};

#[test]
fn missing_nvrtc_is_one_clear_error_unless_runtime_nvrtc() {
    // SAFETY: the only test in this binary; nothing else reads the environment concurrently.
    unsafe {
        std::env::set_var("K3K_NVRTC", "/nonexistent/libnvrtc.so.13");
        std::env::remove_var(k3k_build::ENV_RUNTIME_NVRTC);
    }
    let out = tempfile::tempdir().unwrap();
    let request = || {
        Builder::new()
            .op("latent_moe_gemm")
            .alias("moe_up")
            .dims(&[("G", 2), ("mean", 16), ("K", 64), ("N", 128), ("epilogue", 1)])
            .results_dir(out.path().join("none"))
            .out_dir(out.path())
            .cargo_output(false)
    };
    let err = request().build().unwrap_err();
    assert!(matches!(err, BuildError::NvrtcMissing { .. }), "{err}");
    let msg = err.to_string();
    for needle in
        ["libnvrtc.so.13", "scripts/install-cuda-tools.sh", "K3K_NVRTC=", "/nonexistent", "runtime_nvrtc(true)"]
    {
        assert!(msg.contains(needle), "message lacks `{needle}`:\n{msg}");
    }
    assert!(!out.path().join("k3k_kernels.rs").exists(), "nothing is written on failure");

    // Asked for run-time NVRTC: builds without NVRTC and embeds CUDA C instead of PTX.
    let report = request().runtime_nvrtc(true).build().unwrap();
    let src = std::fs::read_to_string(&report.rust_file).unwrap();
    assert!(src.contains("ptx: None,"), "{src}");
    assert!(src.contains("cuda: Some(include_str!("));
    assert!(src.contains(r#"pub const EMBEDDED_AS: &str = "nvrtc";"#));
    let k = &report.kernels[0];
    assert!(k.ptx.is_none() && k.cubin.is_none());
    let cu = std::fs::read_to_string(&k.cuda).unwrap();
    assert!(cu.contains(&k.name) && !cu.contains("#include <cuda"), "self-contained CUDA C");
}
