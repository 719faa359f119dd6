//! The decode knob space and its knob sets (default, wgmma, per row count).

use super::*;

/// The decode tuning knobs.
pub fn decode_knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("BM", "packed (query, head) rows per block", [16i64, 32, 48, 64])
        .axis(
            "BN",
            "keys per pipeline stage (divides the page; 16 only with replicated scores or MMA=wgmma)",
            [16i64, 32, 64],
        )
        .axis("WM", "warp rows: the score tile is on [WM, 1] warps", [1i64, 2, 3, 4])
        .axis("WN", "warp columns splitting the 512 value columns", [1i64, 2, 4])
        .axis(
            "STAGES",
            "cp.async depth of the KV ring (STAGES - 1 tiles in flight while one is used: 4 at BN = 32 keeps three \
             37 KB tiles in flight in the shared memory of two 64-key stages)",
            [2i64, 3, 4],
        )
        .axis(
            "SCORES",
            "replicated: every warp column group computes the [BM, BN] scores of its rows itself; shared: the \
             WN groups split the score columns and exchange them through shared memory (MMA=wgmma, VWG=2: \
             warpgroup 0 alone computes the scores and the softmax and shares P and the row scale through shared \
             memory; both warpgroups multiply their value columns)",
            ["replicated", "shared"],
        )
        .axis(
            "SWN",
            "SCORES=shared: warp column groups that split the score columns (0: all WN; fewer lets BN = 32 run \
             on 4 warps, each pair computing the same 16 columns, so that two blocks fit an SM)",
            [0i64, 2],
        )
        .axis(
            "BT_PREFETCH",
            "1: read the block-table entry of the next tile to load one loop iteration early (0: right before its \
             copies, which then wait for the load)",
            [0i64, 1],
        )
        .axis(
            "QK_ACCS",
            "independent partial score accumulators the 9 chunks of the 576-deep score product rotate over \
             (shorter tensor-core dependency chains; summed before the softmax)",
            [1i64, 3],
        )
        .axis(
            "MMA",
            "sync: mma.sync on [WM, WN] warps (16-row warp tiles); wgmma: the Hopper warpgroup instructions, BM / 64 \
             warpgroups of 64 packed rows on [BM / 16, 1] warps (WN=1; SCORES=shared only with VWG=2), the [BM, BN] \
             scores and a DV / DVS value slice per block, K and V from the same shared stage",
            ["sync", "wgmma"],
        )
        .axis(
            "DVS",
            "MMA=wgmma: value-column splits, one block each (the grid's x covers m-tiles times DVS; every split \
             recomputes the scores of its rows): the accumulator is BM x DV / DVS",
            [1i64, 2, 4],
        )
        .axis(
            "QK_UNROLL",
            "MMA=wgmma: 1 unrolls the 9 asynchronous score products of a tile (their shared-memory descriptors \
             become constants plus the slot offset); 0 keeps the loop rolled",
            [0i64, 1],
        )
        .axis(
            "OVERLAP",
            "MMA=wgmma: issue tile j's score product, then tile j-1's P V product, and run tile j's softmax while \
             P V is in flight (K and V share a stage, so the ring holds two tiles in use and loads STAGES - 2 ahead: \
             STAGES >= 3); with SCORES=shared, every warpgroup's tile j-1 P V runs under warpgroup 0's tile j \
             softmax",
            [false, true],
        )
        .axis(
            "VWG",
            "MMA=wgmma, BM=64: warpgroups per block sharing its Q tile and K/V stages; each computes the scores and \
             32 of every 64 value columns (DVS=1 at VWG=2 holds all 512 columns in 128 registers per thread)",
            [1i64, 2],
        )
        .axis(
            "SOFTMAX",
            "MMA=wgmma: exact (scores scaled, then exp2) or fast (max of the raw scores, the scale folded into one \
             fused multiply-add per exponent, exp2_ftz)",
            ["exact", "fast"],
        )
        .axis(
            "LOAD",
            "the K/V ring by cp.async (every thread copies 16-byte chunks; a wait and a block barrier per tile) or \
             tma (thread 0 issues one bulk tensor copy per 64-column chunk of a page, on per-slot full / empty \
             mbarriers; MMA=wgmma: no block barrier, the warpgroups only meet where they exchange data)",
            ["cp_async", "tma"],
        )
}

/// The wgmma decode knobs: one warpgroup of 64 packed rows per block, 64-key stages (72 KB each) in a 2-deep
/// ring beside the 72 KB Q tile, the value columns in `dvs` slices (128 accumulator registers per thread at
/// `dvs = 2`), the 9 score products unrolled (ptxas sm_90a: 238 registers, 0 spills at `dvs = 2`; the rolled
/// loop issues ~790 instructions per warp and tile for its 36 `wgmma`s, unrolled ~575).
pub fn decode_wgmma_knobs(dvs: i64) -> Knobs {
    Knobs::new()
        .with("MMA", "wgmma")
        .with("SCORES", "replicated")
        .with("BM", 64i64)
        .with("WM", 4i64)
        .with("WN", 1i64)
        .with("BN", 64i64)
        .with("STAGES", 2i64)
        .with("SWN", 0i64)
        .with("QK_ACCS", 1i64)
        .with("BT_PREFETCH", 0i64)
        .with("DVS", dvs)
        .with("QK_UNROLL", 1i64)
}

/// The decode knobs used when no tuning record exists: [`decode_knobs_for_rows`]`(16)`.
pub fn decode_default_knobs() -> Knobs {
    decode_knobs_for_rows(16)
}

/// The automatic decode knobs for `rows = s_q * H` packed query rows per request ([`decode_auto_wgmma_knobs`]
/// from 64 rows, one full warpgroup m-tile; below that the mma.sync kernel, [`decode_sync_knobs_for_rows`] with
/// `MMA=sync` spelled out). 2026-12-01, same run, b128 S4096: 96 heads 0.727 ms on the wgmma kernel of that day
/// against 0.838 for the sync BM=32 knobs; 12 heads 0.394 ms wgmma against 0.239 sync (a 64-row tile holds 12
/// useful rows).
pub fn decode_knobs_for_rows(rows: usize) -> Knobs {
    if rows >= 64 {
        decode_auto_wgmma_knobs()
    } else {
        decode_sync_knobs_for_rows(rows).with("MMA", "sync").with("DVS", 1i64).with("QK_UNROLL", 0i64)
    }
}

/// The automatic wgmma decode knobs: two warpgroups per block sharing its Q tile and K/V ring (`VWG=2`, all 512
/// value columns in one block: `DVS=1`), warpgroup 0 alone computing the scores and the softmax and passing P and
/// the row scale through shared memory (`SCORES=shared`), the K/V ring by bulk tensor copies on mbarriers
/// (`LOAD=tma`, no block barrier per tile for the ring), the fast softmax and the score loop unrolled (no spills).
/// Measured on the H200 (2026-12-05, b128 S4096 H96, every set checked on the GPU in the same
/// run): same run, **0.351 ms** against 0.451 for the automatic knobs of 2026-12-04 (replicated scores, cp.async ring,
/// rolled); `SCORES=shared` alone 0.394 (rolled) / 0.391 (unrolled), `LOAD=tma` alone 0.450 / 0.406, both rolled
/// 0.376; 32-key stages 0.59-0.63 with or without `OVERLAP`. Torch's decode path 0.758 ms in the same call.
pub fn decode_auto_wgmma_knobs() -> Knobs {
    decode_wgmma_knobs(1)
        .with("VWG", 2i64)
        .with("SCORES", "shared")
        .with("LOAD", "tma")
        .with("SOFTMAX", "fast")
        .with("QK_UNROLL", 1i64)
}

/// The mma.sync decode knobs for `rows = s_q * H` packed query rows per request (the automatic knobs before
/// the wgmma kernel).
///
/// Up to 16 rows: BM = 16 on [1, 4] warps with 64-key stages (170 KB of shared memory, one block of 4 warps
/// per SM); more rows: BM = 32 on [2, 4] warps. The 32-key variant that fits two blocks per SM (`BN=32,
/// SWN=2, QK_ACCS=3, BT_PREFETCH=1`, 92 KB) was slower on the H200 (see the measurements below); it stays in the
/// knob space for the tuner.
pub fn decode_sync_knobs_for_rows(rows: usize) -> Knobs {
    // Measured on the H200 (2026-11-30, b128 S4096, same run): for 12 heads these knobs took 0.287 ms against
    // 0.432 ms for BN=32 with duplicated score warps (SWN=2), three score accumulators and the block-table
    // prefetch; for 96 heads BM=32 without those took 0.777 ms against 0.831 ms with them. The split-KV pair is
    // what was timed then; the direct kernel (no combine, the plan's default since 2026-12-01) took 0.1682 ms against
    // 0.1892 for the split pair at these knobs at 12 heads (H200, 2026-12-01).
    let k = Knobs::new()
        .with("SCORES", "shared")
        .with("BN", 64i64)
        .with("WN", 4i64)
        .with("STAGES", 2i64)
        .with("SWN", 0i64)
        .with("QK_ACCS", 1i64)
        .with("BT_PREFETCH", 0i64);
    match rows {
        0..=16 => k.with("BM", 16i64).with("WM", 1i64),
        _ => k.with("BM", 32i64).with("WM", 2i64),
    }
}
