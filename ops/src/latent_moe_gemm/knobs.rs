//! The knobs of [`build_kernel`](super::build_kernel): the tuning space, the knobs the builder accepts beyond it,
//! the defaults and the measured mma.sync fallback.

use k3k_ir::{KnobSpace, Knobs};

/// The tuning knobs and their meaning.
pub fn knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("BM", "rows of x per block tile", [64i64, 128])
        .axis("BN", "columns of w per block tile (gate+up together for GLU)", [64i64, 128, 256])
        .axis("BK", "K slice per pipeline stage", [32i64, 64])
        .axis("STAGES", "cp.async pipeline depth", [2i64, 3, 4])
        .axis("WM", "warps along M", [1i64, 2, 4])
        .axis("WN", "warps along N", [1i64, 2, 4])
        .axis("RASTER", "tile order inside a group: m (neighbouring blocks share a weight tile) or n", ["m", "n"])
        .axis(
            "MMA",
            "tensor-core path: sync (mma.sync m16n8k16 from ldmatrix) or wgmma (sm_90a warpgroup MMA from 128-byte-swizzled shared tiles; BK=64, WN=1, WM=BM/16)",
            ["sync", "wgmma"],
        )
        .axis(
            LOAD_KNOB,
            "operand loads (MMA=wgmma only): cp_async (every thread copies 16-byte chunks, cp.async groups + a barrier per k-step) or tma (one thread issues bulk tensor copies per stage into the same 128-byte-swizzled tiles, completing on a per-stage mbarrier the consumers wait on)",
            ["cp_async", "tma"],
        )
        // Values the kernel builder takes that the tuner does not sample (hand-picked or older knob sets).
        .accepts(LOAD_KNOB, "`auto`: TMA where the copy engine serves the shape", ["auto"])
        .accepts(STORE_KNOB, "epilogue store: reg (from registers) or tma (bulk tensor store)", ["reg", "tma"])
        .accepts(OVERLAP_KNOB, "epilogue overlapped with the next tile's loads", ["on", "off"])
        .accepts(PRODUCER_KNOB, "TMA producer: one thread or one warp", ["thread", "warp"])
        .accepts(RELEASE_KNOB, "stage release: one thread or one warp", ["thread", "warp"])
        .accepts(EPI_TURN_KNOB, "epilogues in turns", ["off", "on"])
        .accepts(CLUSTER_KNOB, "CTAs per thread-block cluster", [1i64, 2])
        .accepts(CLUSTER_ALONG_KNOB, "cluster pairs along m or n", ["m", "n"])
        .accepts(AHEAD_KNOB, "stages loaded ahead (auto or a count)", ["auto"])
}

/// The knob `LOAD` (`auto` | `cp_async` | `tma`, absent = `cp_async`, the default `auto`): how the operand tiles
/// reach shared memory; `auto` is `tma` where the copy engine can serve the shape (MMA=wgmma, BK=64, K a multiple
/// of 8), else `cp_async`.
pub const LOAD_KNOB: &str = "LOAD";

/// The knob `OVERLAP` (`off` | `on`, absent = `off`), not an axis of [`knob_space`]; `on` in [`default_knobs`]
/// since 2026-12-04 (with the producer warpgroup, same run: mean1024 2.0620 ms vs 2.0690 off, K3072 1.0322 vs
/// 1.0399, SiTU-GLU + p 0.6702 vs 0.6861, mean256 and G56 mean64 equal): `off` is the plain tile walk (each tile
/// searches its group from group 0 and fills its pipeline
/// after the previous tile's epilogue); `on` software-pipelines the walk (the next tile's group search, starting
/// where the previous one ended, overlaps the current tile's last product, and the next tile's first stages
/// are issued before the current tile's epilogue).
pub const OVERLAP_KNOB: &str = "OVERLAP";

/// The knob `CLUSTER` (`1` | `2`, absent = `1`), not an axis of [`knob_space`] nor part of [`default_knobs`]:
/// measured on the H200 (2026-12-04, same runs as the defaults), the best pair (along n, AHEAD=2, OVERLAP=on)
/// reads 2.1394 ms at G28 mean1024 K3584 N6144 against 2.1036 for one CTA per tile, 1.0867 / 1.0596 at K3072
/// N3584, 0.6856 / 0.6620 at G56 mean64: the L2 traffic the multicast saves (ncu: L2 throughput 49% vs 70%) is
/// given back while thread 0 of consumer warp 0, the producer, waits for the peer's releases. `2` launches the
/// blocks in thread-block clusters of two (LOAD=tma only) that compute sibling tiles of one (group, k-loop) and
/// share the operand both need through `.multicast::cluster` copies: each CTA copies half of the shared tile
/// into both CTAs' shared memory, so each reads 32 instead of 48 KiB per k-step from L2 at 128x256 tiles with
/// [`CLUSTER_ALONG_KNOB`] = `m`. With
/// `LOAD=auto` on a shape the copy engine cannot serve, the cp.async kernel runs unpaired; with `LOAD=cp_async`,
/// CLUSTER=2 is an error.
pub const CLUSTER_KNOB: &str = "CLUSTER";

/// The knob `CLUSTER_ALONG` (`m` | `n`, absent = `m`; only with CLUSTER=2): which tiles a cluster pairs. `m`:
/// two neighbouring m-tiles of one n-tile (they share the weight tile, BN rows; a group with an odd m-tile
/// count leaves the second CTA of its last pair idle: it still copies its half of the weights and takes part
/// in the barriers, but runs no products and stores nothing). `n`: two neighbouring n-tiles of one m-tile
/// (they share the x tile, BM rows; idle only when the n-tile count is odd).
pub const CLUSTER_ALONG_KNOB: &str = "CLUSTER_ALONG";

/// The knob `AHEAD` (an integer 1..=STAGES-1, or `auto`; absent = the in-loop schedule), LOAD=tma only, not an
/// axis of [`knob_space`]. The default is `auto`: STAGES-1 where the TMA ring runs without a cluster (STAGES-2
/// for a pair, below, and with a producer warp, [`PRODUCER_KNOB`]), measured on the H200 (2026-12-02,
/// same run, defaults otherwise): AHEAD=3 vs the in-loop schedule 0.6653 / 0.6739 ms at G28 mean256, 2.1839 / 2.2385 at mean1024, 1.0945 / 1.1373 at
/// K3072 N3584, 0.6683 / 0.6853 at G56 mean64 (AHEAD=2 0.6604 / 2.1819 / 1.1028 / 0.6862; RELEASE=warp was slower
/// everywhere). Absent (tuned records and knob-space points written before AHEAD): the schedule measured as the
/// default until then (at k-step `kt` thread 0 first refills the slot of `kt+STAGES-2`, whose previous use was released at
/// step `kt-1`, then the product of `kt` is issued: STAGES-2 stages in flight, and each tile's first stages are
/// issued at the tile's start). `AHEAD=a`: a continuous producer stream over the block's whole tile walk: the
/// producer (thread 0) keeps its own cursor (tile, k-step, coordinates), issues `a` stages before the walk and
/// then one per k-step, right after the step's `wgmma.wait_group` and release (the refill of use `u+a` waits for
/// the release of use `u+a-STAGES`, at `a = STAGES-1` the slot of `u-1` released in the same step), so `a`
/// stages are in flight whatever the tile boundaries: the next tile's first stages are issued during the last
/// k-steps of the current one, and no block barrier is left in the walk. With `LOAD=auto` on a shape the copy
/// engine cannot serve (the cp.async kernel) the knob is ignored; with `LOAD=cp_async` it is an error. With
/// `CLUSTER=2` each CTA of a pair runs its own stream over the pair's common walk: its producer copies its half
/// of the shared operand into both CTAs and refills a slot once both CTAs' warps released it (`auto`: STAGES-2
/// for a pair, measured best; see `Config`).
pub const AHEAD_KNOB: &str = "AHEAD";

/// `AHEAD=auto` before it is resolved (never a valid depth: depths are below STAGES <= 4).

/// The knob `RELEASE` (`thread` | `warp`, absent = `thread`), LOAD=tma only, not yet an axis of [`knob_space`]:
/// how consumers release a stage to the producer: every thread arrives on the slot's empty barrier (count =
/// threads), or lane 0 of each warp after the warp converges (count = warps; the CLUSTER=2 path always does the
/// latter, on both CTAs). Ignored where `LOAD=auto` resolves to cp.async; an error with `LOAD=cp_async`.
pub const RELEASE_KNOB: &str = "RELEASE";

/// The knob `PRODUCER` (`thread` | `warp`, absent = `thread`), with the producer stream (`AHEAD`) only, not an
/// axis of [`knob_space`]; `warp` in [`default_knobs`] since 2026-12-04 (H200, same run as the thread-0 producer,
/// both with AHEAD=auto: mean256 0.6092 vs 0.6220 ms, mean1024 2.0690 vs 2.0837, K3072 1.0399 vs 1.0449, G56 mean64
/// 0.6406 vs 0.6440, SiTU-GLU + p 0.6861 vs 0.7067; `lab/2026-12-04/1309-h200-run/`). Without the TMA
/// ring (the cp.async kernel) it is ignored. Who issues the TMA ring's copies.
/// `thread`: thread 0 of consumer warp 0, between its own k-steps (its warp waits while it waits for a slot's
/// release). `warp`: a dedicated producer warp past the consumer warps (warp specialization, [`k3k_ir::Stmt::Producer`]),
/// which runs the same stream ahead of the consumers as far as the empty barriers let it; no consumer warp ever
/// waits for a release or spends issue slots on copies.
pub const PRODUCER_KNOB: &str = "PRODUCER";

/// The knob `EPI_TURN` (`off` | `on`, absent = `off`), not an axis of [`knob_space`]: with the producer stream
/// on a wgmma kernel of two or more consumer warpgroups, `on` runs each tile's epilogue in turn
/// ([`k3k_ir::Stmt::InTurn`]): warpgroup 0 stores its rows while warpgroup 1 waits, then warpgroup 1 stores while
/// warpgroup 0 already issues the next tile's products. After the first tile the warpgroups stay staggered by
/// one epilogue, so each one's epilogue runs under the other's tensor-core products instead of both idling
/// the tensor cores at once (the effect FlashAttention-3 and CUTLASS's ping-pong kernels get from one output
/// tile per warpgroup, here with the cooperative tile and no extra registers; the price is ring depth: the
/// leading warpgroup runs up to one epilogue ahead of the slot releases of the other). Measured on the H200
/// (2026-12-04, same run, register stores): no gain (mean1024 2.0451 vs 2.0419 ms, K3072 1.0327 vs 1.0329,
/// mean256 0.6221 vs 0.6092, SiTU-GLU + p 0.6937 vs 0.6643): the lead eats the 4-slot ring. An error on the
/// mma.sync path, with one warpgroup or with `STORE=tma`; ignored where no producer stream runs (the cp.async
/// kernel).
pub const EPI_TURN_KNOB: &str = "EPI_TURN";

/// The knob `STORE` (`reg` | `tma`, absent = `reg`), not an axis of [`knob_space`]; `tma` in [`default_knobs`]
/// since 2026-12-04 (H200, two runs, same runs as the register stores: G28 mean1024 K3584 N6144 2.0529 / 2.0292
/// vs 2.0614 / 2.0907 ms, K3072 N3584 1.0188 / 1.0228 vs 1.0347 / 1.0384, mean256 0.6139 / 0.6208 vs 0.6143 /
/// 0.6255, G56 mean64 0.6619 / 0.6628 vs 0.6576 / 0.6596, SiTU-GLU + p 0.6782 / 0.6836 vs 0.6879 / 0.6827;
/// `lab/2026-12-04/1622-h200-run/`, `lab/2026-12-04/1626-h200-run/`). How the epilogue writes `y`.
/// `reg`: every thread stores its accumulator pairs to global memory ([`k3k_ir::Stmt::Store`]), a burst the tensor cores
/// wait behind once per tile. `tma`: tiles whose rows all lie inside their group go through two 128x64
/// shared staging buffers ([`k3k_ir::Stmt::StoreCols`]) and bulk tensor stores ([`k3k_ir::Stmt::TmaStore`]), 64 columns at a
/// time, which drain while the next tile's products run (CUTLASS's TMA-store epilogue); a group's last,
/// partial m-tile keeps the register path (a box would overwrite the next group's rows). Needs the TMA ring
/// (LOAD=tma resolved) and `y` rows of a multiple of 8 elements; elsewhere the register path runs.
pub const STORE_KNOB: &str = "STORE";

/// The knobs used when no tuning record exists.
pub fn default_knobs() -> Knobs {
    Knobs::new()
        .with("BM", 128i64)
        .with("BN", 256i64)
        .with("BK", 64i64)
        .with("STAGES", 4i64)
        .with("WM", 8i64)
        .with("WN", 1i64)
        .with("RASTER", "m")
        .with("MMA", "wgmma")
        .with(LOAD_KNOB, "auto")
        .with(AHEAD_KNOB, "auto")
        .with(OVERLAP_KNOB, "on")
        .with(PRODUCER_KNOB, "warp")
        .with(STORE_KNOB, "tma")
}

/// The best mma.sync configuration measured on the H200 (2026-11-29), kept as the portable fallback.
pub fn sync_knobs() -> Knobs {
    Knobs::new()
        .with("BM", 128i64)
        .with("BN", 256i64)
        .with("BK", 32i64)
        .with("STAGES", 3i64)
        .with("WM", 2i64)
        .with("WN", 4i64)
        .with("RASTER", "m")
        .with("MMA", "sync")
}
