//! The model's kernels, chosen here and nowhere else: operators, shapes and the target GPU. `k3k-build` looks
//! the knobs up in k3k's `results/` (default knobs with a warning where nothing is tuned), compiles every
//! kernel to PTX (+ CUBIN for sm_90a) and writes the typed launchers `src/main.rs` includes.
//!
//! The shapes are a scaled-down K3 (see `src/config.rs`, which this file includes so both sides agree).

include!("src/config.rs");

fn main() {
    let e = EXPERTS as i64;
    // PTX at build time when NVRTC is here; otherwise embed the CUDA C and let the program compile it with
    // NVRTC at run time, so that the crate builds anywhere (k3k-build alone would stop with a message saying
    // how to install NVRTC).
    let nvrtc_here = k3k_build::find_nvrtc().is_ok();
    if !nvrtc_here {
        println!(
            "cargo:warning=k3k-model: NVRTC not found; embedding CUDA C for run-time NVRTC (scripts/install-cuda-tools.sh \
             or K3K_NVRTC to embed PTX)"
        );
    }
    let mut b = k3k_build::Builder::new().gpu("nvidia-h200").runtime_nvrtc(!nvrtc_here);

    // Every projection (router, q/k/v/gate/beta/output, MLA latents): one dense bf16 GEMM kernel, shape-generic
    // in M, K and N (K a multiple of 8 and N even: its alignment class).
    b = b
        .op("latent_moe_gemm")
        .alias("linear")
        .dims(&[("M", TOKENS as i64), ("K", HIDDEN as i64), ("N", HIDDEN as i64)])
        .free_dims(&["M", "K", "N"])
        .roles(&["Linear"]);
    // Projections whose output rows are narrower than 16 bytes (beta, N = HEADS): the bulk-copy (TMA) store
    // needs 16-byte rows, so this one stores from registers.
    b = b
        .op("latent_moe_gemm")
        .alias("linear_narrow")
        .dims(&[("M", TOKENS as i64), ("K", HIDDEN as i64), ("N", HEADS as i64)])
        .knobs("STORE=reg")
        .roles(&["Linear"]);

    // LatentMoE: the QB step on the router scores (the whole hist_quantile plan for T x E).
    b = b
        .op("hist_quantile.qb")
        .alias("router_qb")
        .dims(&[("T", TOKENS as i64), ("E", e), ("k", TOP_K as i64), ("B", QB_BINS as i64)])
        .plan(true);

    // LatentMoE experts with MXFP4 weights: GEMM1 (gate|up, SiTU-GLU fused) and GEMM2 (routing weight fused).
    // One launch each (SPLIT=1); the row counts per expert change with the routing at run time.
    let (l, m) = (LATENT as i64, INTER as i64);
    b = b
        .op("mxfp4_matmul")
        .alias("moe_up_mx")
        .dims(&[("G", e), ("mean", 32), ("K", l), ("N", 2 * m), ("epilogue", 1)])
        .knobs("SPLIT=1")
        .pin("KB", l / 32)
        .pin("KW", l / 8)
        .pin("NH", m)
        .roles(&["UpGlu"]);
    b = b
        .op("mxfp4_matmul")
        .alias("moe_down_mx")
        .dims(&[("G", e), ("mean", 32), ("K", m), ("N", l), ("p", 1)])
        .knobs("SPLIT=1")
        .pin("KB", m / 32)
        .pin("KW", m / 8)
        .roles(&["DownP"]);
    // A dense MXFP4 projection at decode-like token counts: one kernel per bucket of M, picked at each launch.
    b = b.op("mxfp4_matmul").alias("mx_dense").dims(&[("M", 16), ("K", l), ("N", 2 * m)]).buckets("M", &[1, 4, 16]);
    // The same two products with bf16 weights (the dequantized MXFP4 values), for comparison.
    b = b
        .op("latent_moe_gemm")
        .alias("moe_up_bf16")
        .dims(&[("G", e), ("mean", 32), ("K", l), ("N", 2 * m), ("epilogue", 1)])
        .pin("NH", m)
        .roles(&["UpGlu"]);
    b = b
        .op("latent_moe_gemm")
        .alias("moe_down_bf16")
        .dims(&[("G", e), ("mean", 32), ("K", m), ("N", l), ("p", 1)])
        .roles(&["DownP"]);

    // Attention block: KDA prefill (the whole chunked plan for one sequence) and the recurrent decode step.
    let kda = [
        ("H", HEADS as i64),
        ("K", HEAD_DIM as i64),
        ("V", HEAD_DIM as i64),
        ("safe", 1),
        ("gate", 1),
        ("l2norm", 1),
        ("bsig", 1),
    ];
    b = b.op("kda").alias("kda_prefill").dims(&[("B", 1), ("T", TOKENS as i64)]).dims(&kda).plan(true);
    // KDA prefill of a varlen batch: sequence lengths come at run time (cu_seqlens), up to the limits.
    b = b.op("kda").alias("kda_varlen").dims(&kda).varlen(VARLEN_MAX_TOKENS, VARLEN_MAX_SEQS);
    b = b.op("kda.decode").alias("kda_decode").dims(&[("N", 1), ("T", 1)]).dims(&kda).roles(&["Step", "StepInPlace"]);

    // Gated MLA: MHA-mode prefill, absorbed paged decode (+ LSE combine), the gated W_UV projection, and the
    // per-head query absorption q_nope @ W_UK as a grouped GEMM (one group per head).
    let h = HEADS as i64;
    b = b
        .op("gated_mla.prefill")
        .alias("mla_prefill")
        .dims(&[("T", TOKENS as i64), ("S", TOKENS as i64), ("H", h), ("causal", 1), ("gate", 1)])
        .free_dims(&["T", "S"])
        .roles(&["Attend"]);
    b = b
        .op("gated_mla.decode")
        .alias("mla_decode")
        .dims(&[("B", 1), ("SQ", 1), ("H", h), ("S", (TOKENS + DECODE_STEPS) as i64)])
        .roles(&["Attend", "Combine"]);
    b = b.op("gated_mla.gate").alias("mla_gate").dims(&[("T", 1), ("H", h), ("gate", 1)]).roles(&["Project"]);
    let mut absorb: Vec<(String, i64)> =
        vec![("G".into(), h), ("K".into(), MLA_NOPE as i64), ("N".into(), MLA_LATENT as i64)];
    absorb.extend((0..HEADS).map(|i| (format!("c{i}"), 1)));
    let absorb: Vec<(&str, i64)> = absorb.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    b = b.op("latent_moe_gemm").alias("mla_absorb").dims(&absorb).roles(&["PerHead"]);

    let report = b.build_or_exit();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/config.rs");
    for r in &report.requests {
        // Shown with `cargo build -vv`; warnings (default knobs) are printed by the builder.
        println!("k3k-model: {} ({} at {}) on {}: {} [{}]", r.module, r.op, r.shape, r.gpu, r.knobs, r.source);
    }
}
