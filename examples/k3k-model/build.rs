//! The model's kernels, chosen here and nowhere else: operators, shapes and the target GPU. `k3k-build` looks
//! the knobs up in k3k's `results/` (default knobs with a warning where nothing is tuned), compiles every
//! kernel to PTX (+ CUBIN for sm_90a) and writes the typed launchers `src/main.rs` includes.
//!
//! The shapes are one GPU's share of Kimi K3 (see `src/config.rs`, which this file includes so both sides
//! agree). Token counts, sequence lengths and expert row counts are run-time values: each request below names
//! the shapes it is tuned for, and the launchers take any other within the kernel's limits.

include!("src/config.rs");

fn main() {
    let e = EXPERTS as i64;
    let h = HEADS as i64;
    let t = PREFILL_TOKENS as i64;
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

    // Every projection (q/k/v/gate, outputs, MLA latents, MoE latent down/up): one dense bf16 GEMM kernel,
    // shape-generic in M, K and N (K a multiple of 8 and N even: its alignment class).
    b = b
        .op("latent_moe_gemm")
        .alias("linear")
        .dims(&[("M", t), ("K", HIDDEN as i64), ("N", (HEADS * HEAD_DIM) as i64)])
        .free_dims(&["M", "K", "N"])
        .roles(&["Linear"]);
    // The same projections at decode-like token counts (M <= 64): the smallest tiles, so that a [1536, 7168]
    // weight is read by 24 blocks instead of 6 (the bf16 GEMM has no split-K; what bounds it is in the note).
    b = b
        .op("latent_moe_gemm")
        .alias("linear_small")
        .dims(&[("M", DECODE_BATCH as i64), ("K", HIDDEN as i64), ("N", (HEADS * HEAD_DIM) as i64)])
        .knobs("BM=64,BN=64,WM=4,WN=1")
        .free_dims(&["M", "K", "N"])
        .roles(&["Linear"]);
    // Projections whose output rows are narrower than 16 bytes or not a multiple of them (beta: N = 12, the
    // router: N = 28): the bulk-copy (TMA) store needs 16-byte rows, so these store from registers; again with
    // the smallest tiles for decode.
    for (alias, m, knobs) in [
        ("linear_narrow", t, "STORE=reg"),
        ("linear_narrow_small", DECODE_BATCH as i64, "STORE=reg,BM=64,BN=64,WM=4,WN=1"),
    ] {
        b = b
            .op("latent_moe_gemm")
            .alias(alias)
            .dims(&[("M", m), ("K", HIDDEN as i64), ("N", h)])
            .knobs(knobs)
            .free_dims(&["M", "K", "N"])
            .roles(&["Linear"]);
    }

    // LatentMoE: the QB step on the router scores of the prefill batch (the whole hist_quantile plan).
    b = b
        .op("hist_quantile.qb")
        .alias("router_qb")
        .dims(&[("T", t), ("E", e), ("k", TOP_K as i64), ("B", QB_BINS as i64)])
        .plan(true);

    // LatentMoE experts with MXFP4 weights: GEMM1 (gate|up, SiTU-GLU fused) and GEMM2 (routing weight fused),
    // one kernel each for prefill-like and decode-like row counts. The rows per expert change with the routing
    // at run time (they are data: the group ends `offs`).
    let (l, m) = (LATENT as i64, INTER as i64);
    let rows = (PREFILL_TOKENS * TOP_K / EXPERTS) as i64;
    let decode_rows = ((DECODE_BATCH * TOP_K).div_ceil(EXPERTS)) as i64;
    // Prefill-like row counts take the dq_gemm path: one kernel dequantizes every expert's weights into a
    // bf16 workspace, the grouped GEMM runs on it (the faster of the measured paths at ~1000 rows per expert).
    for (alias, mean, roles) in
        [("moe_up", rows, &["Dequant", "UpGlu"][..]), ("moe_up_decode", decode_rows, &["UpGlu"][..])]
    {
        b = b
            .op("mxfp4_matmul")
            .alias(alias)
            .dims(&[("G", e), ("mean", mean), ("K", l), ("N", 2 * m), ("epilogue", 1)])
            .knobs("SPLIT=1")
            .pin("KB", l / 32)
            .pin("KW", l / 8)
            .pin("NH", m)
            .roles(roles);
    }
    for (alias, mean, roles) in
        [("moe_down", rows, &["Dequant", "DownP"][..]), ("moe_down_decode", decode_rows, &["DownP"][..])]
    {
        b = b
            .op("mxfp4_matmul")
            .alias(alias)
            .dims(&[("G", e), ("mean", mean), ("K", m), ("N", l), ("p", 1)])
            .knobs("SPLIT=1")
            .pin("KB", m / 32)
            .pin("KW", m / 8)
            .roles(roles);
    }
    // A dense MXFP4 projection at decode-like token counts: one kernel per bucket of M, picked at each launch.
    b = b.op("mxfp4_matmul").alias("mx_dense").dims(&[("M", 16), ("K", l), ("N", 2 * m)]).buckets("M", &[1, 4, 16]);
    // The same projection with MXFP8 activations, split four ways: three kernels (activation dequant, main,
    // finalize), launched plainly and with programmatic dependent launch (each kernel released by the one before
    // it). `dense.rs` runs both eagerly and captured in a CUDA graph, and compares the bits.
    for (alias, pdl) in [("mx_dense_split", false), ("mx_dense_pdl", true)] {
        b = b
            .op("mxfp4_matmul")
            .alias(alias)
            .dims(&[("M", 16), ("K", l), ("N", 2 * m), ("act", 1)])
            .knobs(&format!("PDL={pdl},SPLIT=4,FIN=kernel"))
            .free_dims(&["M"])
            .roles(&["Main", "ActDequant", "Finalize"]);
    }

    // KDA with K3's in-kernel options: the safe gate lb*sigmoid(x + bias) with a [H, K] bias, L2-normalised q
    // and k, beta sigmoid. The prefill takes a varlen batch (sequence lengths at run time, cu_seqlens, up to
    // the limits); decode steps every sequence by one token against its state, in place.
    let kda = [
        ("H", h),
        ("K", HEAD_DIM as i64),
        ("V", HEAD_DIM as i64),
        ("safe", 1),
        ("gate", 1),
        ("bias", 1),
        ("l2norm", 1),
        ("bsig", 1),
    ];
    b = b.op("kda").alias("kda_varlen").dims(&kda).varlen(VARLEN_MAX_TOKENS, VARLEN_MAX_SEQS);
    b = b
        .op("kda.decode")
        .alias("kda_decode")
        .dims(&[("N", DECODE_BATCH as i64), ("T", 1)])
        .dims(&kda)
        .roles(&["Step", "StepInPlace"]);

    // Gated MLA: MHA-mode prefill over the varlen batch (cu_seqlens read on the device, so any batch), absorbed
    // paged decode (+ LSE combine; cache lengths read on the device), the gated W_UV projection, and the
    // per-head query absorption q_nope @ W_UK as a grouped GEMM (one group per head).
    let mut prefill: Vec<(String, i64)> =
        vec![("H".into(), h), ("causal".into(), 1), ("gate".into(), 1), ("N".into(), PREFILL_LENS.len() as i64)];
    for (i, len) in PREFILL_LENS.iter().enumerate() {
        prefill.push((format!("q{i}"), *len as i64));
        prefill.push((format!("k{i}"), *len as i64));
    }
    let prefill: Vec<(&str, i64)> = prefill.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    b = b.op("gated_mla.prefill").alias("mla_prefill").dims(&prefill).roles(&["Attend"]);
    b = b
        .op("gated_mla.decode")
        .alias("mla_decode")
        .dims(&[("B", DECODE_BATCH as i64), ("SQ", 1), ("H", h), ("S", MAX_SEQ as i64)])
        .roles(&["Attend", "Combine"]);
    b = b
        .op("gated_mla.gate")
        .alias("mla_gate")
        .dims(&[("T", DECODE_BATCH as i64), ("H", h), ("gate", 1)])
        .roles(&["Project"]);
    let mut absorb: Vec<(String, i64)> =
        vec![("G".into(), h), ("K".into(), MLA_NOPE as i64), ("N".into(), MLA_LATENT as i64)];
    absorb.extend((0..HEADS).map(|i| (format!("c{i}"), DECODE_BATCH as i64)));
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
