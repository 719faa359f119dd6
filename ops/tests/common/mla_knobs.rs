//! Gated-MLA decode knob points shared by the compile and interpreter tests.

use k3k_ir::Knobs;

/// The decode knobs for more than 16 rows before the partial score accumulators and the block-table prefetch.
pub fn rows32() -> Knobs {
    Knobs::new()
        .with("SCORES", "shared")
        .with("BM", 32i64)
        .with("BN", 64i64)
        .with("WM", 2i64)
        .with("WN", 4i64)
        .with("STAGES", 2i64)
}

/// The 64-key decode knobs for up to 16 rows (one block per SM), without the later optional knobs.
pub fn bn64() -> Knobs {
    Knobs::new()
        .with("SCORES", "shared")
        .with("BM", 16i64)
        .with("BN", 64i64)
        .with("WM", 1i64)
        .with("WN", 4i64)
        .with("STAGES", 2i64)
}

/// The wgmma prefill knob points the compile and interpreter tests cover: the plain schedule at 128- and
/// 64-key tiles, one warpgroup, the rolled score loop, and the overlapped schedule at 2 and 3 stages.
pub fn prefill_wgmma_points() -> Vec<Knobs> {
    let w = k3k_ops::gated_mla::prefill_wgmma_knobs();
    vec![
        w.clone(),
        w.clone().with("BN", 64i64).with("STAGES", 3i64),
        w.clone().with("BM", 64i64).with("WM", 4i64).with("QK_UNROLL", false),
        w.clone().with("OVERLAP", true),
        w.clone().with("OVERLAP", true).with("BN", 64i64).with("STAGES", 3i64),
    ]
}

/// The three-warpgroup wgmma prefill points (BM = 192 on 12 warps, the default's other knobs, causal blocks in
/// LPT order as they were timed): 64-key tiles in a 3-deep ring, and 96- or 80-key tiles in a 2-deep ring
/// (BN = 128 does not fit the shared memory). These sit at the 168-register cap of 384 threads: with the
/// per-head order the varlen BN = 96 kernel spills 4 bytes (ptxas 13.0), so the points keep `QORDER=lpt`, and
/// `PINGPONG=false`.
pub fn prefill_bm192_points() -> Vec<Knobs> {
    // Without turns: PINGPONG=true spills 8-16 bytes here at BN = 96 and 80 (ptxas 13.0, 2026-12-04).
    let d = k3k_ops::gated_mla::prefill_default_knobs()
        .with("BM", 192i64)
        .with("WM", 12i64)
        .with("QORDER", "lpt")
        .with("PINGPONG", false);
    vec![
        d.clone().with("BN", 64i64).with("STAGES", 3i64),
        d.clone().with("BN", 96i64).with("STAGES", 2i64),
        d.with("BN", 80i64).with("STAGES", 2i64),
    ]
}

/// The `SOFTMAX=fast` and `SMGUARD=true` prefill points: the default (overlapped wgmma, BM = 128) with either
/// or both, the plain wgmma schedule, one warpgroup overlapped at 64-key tiles in a 3-deep ring, three
/// warpgroups (BM = 192, BN = 96, LPT), and the mma.sync kernel.
pub fn prefill_fast_softmax_points() -> Vec<Knobs> {
    use k3k_ops::gated_mla::{prefill_default_knobs, prefill_sync_knobs, prefill_wgmma_knobs};
    let d = prefill_default_knobs().with("SOFTMAX", "fast");
    let g = d.clone().with("SMGUARD", true);
    vec![
        d.clone(),
        g.clone(),
        prefill_default_knobs().with("SMGUARD", true),
        prefill_wgmma_knobs().with("SOFTMAX", "fast"),
        g.clone().with("BM", 64i64).with("WM", 4i64).with("BN", 64i64).with("STAGES", 3i64).with("PINGPONG", false),
        g.with("BM", 192i64).with("WM", 12i64).with("BN", 96i64).with("QORDER", "lpt").with("PINGPONG", false),
        prefill_sync_knobs().with("SOFTMAX", "fast"),
    ]
}
