//! The decode kernels of [`crate::gated_mla`]: the split-KV absorbed decode over the paged latent cache
//! ([`build_decode`], [`build_decode_direct`]; the mma.sync kernel here, the wgmma kernel in [`wgmma`]), the
//! split count ([`decode_num_splits`]) and the log-sum-exp merge of the splits ([`build_decode_combine`]).

use super::*;

mod wgmma;

use wgmma::build_decode_wgmma;

/// What a decode kernel variant computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DecodeSpec {
    /// Query / cache row width (576 = 512 latent + 64 rope for K3).
    pub d: u32,
    /// Value width: the first `dv` columns of each cache row (512).
    pub dv: u32,
    /// Rows per cache page (64, as FlashMLA).
    pub page: u32,
}

impl Default for DecodeSpec {
    fn default() -> Self {
        DecodeSpec { d: 576, dv: 512, page: 64 }
    }
}

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

struct DecodeCfg {
    bm: u32,
    bn: u32,
    wm: u32,
    wn: u32,
    stages: u32,
    /// Scores split over the WN column groups and exchanged through shared memory.
    shared_scores: bool,
    /// Warp column groups splitting the score columns (SCORES=shared; divides WN).
    swn: u32,
    /// Partial score accumulators of the score product.
    qk_accs: u32,
    /// Read each tile's block-table entry one loop iteration ahead.
    bt_prefetch: bool,
    /// Hopper warpgroup MMA (`MMA=wgmma`).
    wgmma: bool,
    /// Value-column splits (one block each; 1 for mma.sync).
    dvs: u32,
    /// MMA=wgmma: unroll the 9 score products of a tile.
    qk_unroll: bool,
    /// MMA=wgmma: `OVERLAP`, tile j's softmax under tile j-1's P V product.
    overlap: bool,
    /// MMA=wgmma: `SOFTMAX=fast`.
    fast_softmax: bool,
    /// MMA=wgmma: `VWG`, warpgroup sets sharing the block's stages, splitting the value columns (1 or 2).
    vwg: u32,
    /// MMA=wgmma: `LOAD=tma`, the K/V ring by bulk tensor copies on mbarriers.
    tma: bool,
    /// Register-tile registers per thread (the estimate the knob checks use).
    tile_regs: u32,
    /// Dynamic shared memory per block.
    smem: usize,
}

impl DecodeCfg {
    /// Shared bytes of the Q tile and the K/V ring (both kernels), with `LOAD=tma` a full and an empty mbarrier
    /// per slot after the buffers (aligned to 128 bytes).
    fn q_and_ring_bytes(&self, spec: &DecodeSpec) -> usize {
        let bars = if self.tma { 128 + 16 * self.stages as usize } else { 0 };
        2 * ((self.bm + self.stages * self.bn) * spec.d) as usize + bars
    }
}

fn decode_cfg(spec: &DecodeSpec, k: &Knobs) -> Result<DecodeCfg, OpError> {
    const OP: &str = "gated_mla_decode";
    let mut c = DecodeCfg {
        bm: k.u32("BM")?,
        bn: k.u32("BN")?,
        wm: k.u32("WM")?,
        wn: k.u32("WN")?,
        stages: k.u32("STAGES")?,
        shared_scores: match k.str("SCORES")? {
            "replicated" => false,
            "shared" => true,
            other => return invalid(OP, k, format!("SCORES={other}: replicated or shared")),
        },
        swn: opt_u32(k, "SWN", 0)?,
        qk_accs: opt_u32(k, "QK_ACCS", 1)?,
        bt_prefetch: match opt_u32(k, "BT_PREFETCH", 0)? {
            0 => false,
            1 => true,
            v => return invalid(OP, k, format!("BT_PREFETCH={v}: 0 or 1")),
        },
        wgmma: opt_choice(OP, k, "MMA", "sync", "wgmma")?,
        dvs: opt_u32(k, "DVS", 1)?,
        qk_unroll: match opt_u32(k, "QK_UNROLL", 0)? {
            0 => false,
            1 => true,
            v => return invalid(OP, k, format!("QK_UNROLL={v}: 0 or 1")),
        },
        overlap: opt_bool(k, "OVERLAP")?,
        fast_softmax: opt_choice(OP, k, "SOFTMAX", "exact", "fast")?,
        vwg: opt_u32(k, "VWG", 1)?,
        tma: opt_choice(OP, k, "LOAD", "cp_async", "tma")?,
        tile_regs: 0,
        smem: 0,
    };
    if c.wgmma {
        return decode_cfg_wgmma(spec, k, c);
    }
    if c.dvs != 1 {
        return invalid(OP, k, format!("DVS={} needs MMA=wgmma (mma.sync blocks hold every value column)", c.dvs));
    }
    if c.qk_unroll {
        return invalid(OP, k, "QK_UNROLL=1 needs MMA=wgmma (mma.sync keeps the 576-deep score loop rolled)".into());
    }
    if c.overlap || c.fast_softmax || c.vwg != 1 {
        return invalid(OP, k, "OVERLAP=true, SOFTMAX=fast and VWG=2 need MMA=wgmma".into());
    }
    if c.wm == 0 || c.wn == 0 || c.wm * c.wn > 16 {
        return invalid(OP, k, format!("WM*WN = {} warps must be in 1..=16", c.wm * c.wn));
    }
    if c.swn != 0 && (!c.shared_scores || c.swn >= c.wn || !c.wn.is_multiple_of(c.swn)) {
        return invalid(OP, k, format!("SWN={} needs SCORES=shared and to be a proper divisor of WN={}", c.swn, c.wn));
    }
    if c.swn == 0 {
        c.swn = if c.shared_scores { c.wn } else { 1 };
    }
    if c.shared_scores && (c.swn == 1 || !(c.bn / c.swn).is_multiple_of(16)) {
        return invalid(
            OP,
            k,
            format!("SCORES=shared needs more than one score warp column and BN/SWN={} a multiple of 16", c.bn / c.swn),
        );
    }
    if c.qk_accs == 0 || !(spec.d / KC).is_multiple_of(c.qk_accs) {
        return invalid(OP, k, format!("QK_ACCS={} must divide the {} score chunks", c.qk_accs, spec.d / KC));
    }
    if c.bm == 0 || !c.bm.is_multiple_of(16 * c.wm) {
        return invalid(OP, k, format!("BM={} must be a positive multiple of 16*WM={}", c.bm, 16 * c.wm));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(16) || !spec.page.is_multiple_of(c.bn) {
        return invalid(OP, k, format!("BN={} must be a multiple of 16 dividing the page {}", c.bn, spec.page));
    }
    if !KC.is_multiple_of(16 * c.wn) {
        return invalid(OP, k, format!("each {KC}-column value tile needs 16*WN={} to divide it", 16 * c.wn));
    }
    if !spec.d.is_multiple_of(KC) || !spec.dv.is_multiple_of(KC) || spec.dv > spec.d {
        return invalid(OP, k, format!("d={} and dv={} must be multiples of {KC} with dv <= d", spec.d, spec.dv));
    }
    if c.stages < 2 {
        return invalid(OP, k, "STAGES >= 2".into());
    }
    let threads = 32 * c.wm * c.wn;
    let acc = c.bm * spec.dv / threads;
    let srow = c.bm / c.wm * c.bn / 32;
    // The score tile and P, plus the partial score tiles the product accumulates into (the split tiles, or
    // for replicated scores the extra partials beside the score tile itself).
    let parts = if c.shared_scores { c.qk_accs * srow / c.swn } else { (c.qk_accs - 1) * srow };
    let regs = acc + srow + srow / 2 + parts;
    // Tile registers per thread (accumulators, scores, P); ptxas needs up to ~100 more for fragments and
    // addresses (measured over the whole space: <= 160 assembles without spills, 176 spills). 512-thread
    // blocks get only 128 registers per thread.
    // 384-thread blocks (WM = 3, BM = 48: 96 rows in two m-tiles) get 168 registers per thread (measured: 112
    // tile registers assemble without spills with QK_ACCS=3; 96 with QK_ACCS=1 and 3 stages spill 12 bytes).
    let budget = match threads {
        0..=256 => 160,
        257..=384 => 112,
        _ => 64,
    };
    if regs > budget {
        return invalid(OP, k, format!("{regs} tile registers per thread (max {budget} at {threads} threads)"));
    }
    let smem = c.q_and_ring_bytes(spec) + if c.shared_scores { 4 * (c.bm * c.bn) as usize } else { 0 };
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, k, format!("{smem} bytes of shared memory"));
    }
    c.tile_regs = regs;
    c.smem = smem;
    Ok(c)
}

/// The checks of the wgmma decode kernel: `BM / 64` warpgroups on `[BM / 16, 1]` warps, replicated scores (the
/// score tile is the warpgroups' own accumulator), one score accumulator, `DVS` dividing the value tiles, and
/// the accumulator registers within what one thread may hold.
fn decode_cfg_wgmma(spec: &DecodeSpec, k: &Knobs, mut c: DecodeCfg) -> Result<DecodeCfg, OpError> {
    const OP: &str = "gated_mla_decode";
    if c.bm == 0 || !c.bm.is_multiple_of(64) || c.wm != c.bm / 16 || c.wn != 1 {
        return invalid(OP, k, format!("MMA=wgmma needs BM a multiple of 64, WM = BM / 16 and WN = 1 (BM={})", c.bm));
    }
    if c.swn != 0 || c.qk_accs != 1 {
        return invalid(OP, k, "MMA=wgmma needs SWN=0 and QK_ACCS=1".into());
    }
    // SCORES=shared: warpgroup 0 computes the scores for both warpgroups.
    if c.shared_scores && c.vwg != 2 {
        return invalid(OP, k, format!("MMA=wgmma with SCORES=shared needs VWG=2 (VWG={})", c.vwg));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(16) || !spec.page.is_multiple_of(c.bn) {
        return invalid(OP, k, format!("BN={} must be a multiple of 16 dividing the page {}", c.bn, spec.page));
    }
    if !spec.d.is_multiple_of(KC) || !spec.dv.is_multiple_of(KC) || spec.dv > spec.d {
        return invalid(OP, k, format!("d={} and dv={} must be multiples of {KC} with dv <= d", spec.d, spec.dv));
    }
    let nv = spec.dv / KC;
    if c.dvs == 0 || !nv.is_multiple_of(c.dvs) {
        return invalid(OP, k, format!("DVS={} must divide the {nv} value tiles", c.dvs));
    }
    if c.stages < 2 + u32::from(c.overlap) {
        return invalid(
            OP,
            k,
            format!("STAGES={} must be >= 2 (>= 3 with OVERLAP: two stages are in use at once)", c.stages),
        );
    }
    if !(c.vwg == 1 || c.vwg == 2 && c.bm == 64) {
        return invalid(OP, k, format!("VWG={}: 1, or 2 with BM=64 (one warpgroup of rows)", c.vwg));
    }
    c.swn = 1;
    // Per thread of a warpgroup (128 threads, 64 rows): the accumulator (split over VWG warpgroups), the scores
    // and P.
    let acc = 64 * (spec.dv / c.dvs) / (128 * c.vwg);
    let regs = acc + 64 * c.bn / 128 + 64 * c.bn / 256;
    if regs > 176 {
        return invalid(OP, k, format!("{regs} tile registers per thread (max 176 for MMA=wgmma)"));
    }
    // SCORES=shared: P (bf16, [BM, BN]) and the row scale ([BM, 8] f32) beside the Q tile and the ring.
    let exchange = if c.shared_scores { (2 * c.bm * c.bn + 4 * c.bm * 8) as usize } else { 0 };
    let smem = c.q_and_ring_bytes(spec) + exchange;
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, k, format!("{smem} bytes of shared memory"));
    }
    c.tile_regs = regs;
    c.smem = smem;
    Ok(c)
}

/// Blocks per request of a decode launch with these knobs for `rows = s_q * H` packed rows (per split): the
/// m-tiles times the value-column splits.
pub fn decode_blocks_per_request(spec: &DecodeSpec, knobs: &Knobs, rows: usize) -> Result<usize, OpError> {
    let c = decode_cfg(spec, knobs)?;
    Ok(rows.div_ceil(c.bm as usize).max(1) * c.dvs as usize)
}

/// Shared memory of one H100/H200 multiprocessor available to blocks, and what the driver reserves per block.
const SM_SHARED_BYTES: usize = 233_472;
const SM_SHARED_RESERVED: usize = 1024;

/// How many decode blocks of these knobs one multiprocessor holds at once (sm_90: 228 KB of shared memory
/// with 1 KB reserved per block, 2048 threads, 64 K registers; registers estimated as the tile registers
/// plus 64 for fragments and addresses, which is above what ptxas allocated over the knob space).
pub fn decode_blocks_per_sm(spec: &DecodeSpec, knobs: &Knobs) -> Result<usize, OpError> {
    let c = decode_cfg(spec, knobs)?;
    let threads = (32 * c.wm * c.wn * c.vwg) as usize;
    let by_smem = SM_SHARED_BYTES / (c.smem + SM_SHARED_RESERVED);
    let regs = ((c.tile_regs as usize + 64).min(255)).next_multiple_of(8);
    let by_regs = 65536 / (regs * threads);
    Ok(by_smem.min(2048 / threads).min(by_regs).clamp(1, 32))
}

/// Build the split-KV decode kernel.
///
/// Tensor arguments, in order: `q [B, SQ, H, D]` bf16, `kv [NBLK, PAGE, D]` bf16 (the paged latent cache),
/// `block_table [B, MAXB]` i32, `cache_seqlens [B]` i32, then the workspace outputs `o_part [B, NSPLIT, SQ, H,
/// DV]` f32 (each split's output normalised by its own softmax sum; 0 where it saw no key) and `lse_part [B,
/// NSPLIT, SQ, H]` f32 (log2-domain `m + log2(l)`, -inf where it saw no key). Scalar: `scale` (tau, float).
/// Grid: `(ceil(SQ*H / BM), NSPLIT, B)`. Query i of s_q sees keys `[0, S_k - SQ + i]`. Split s of a request
/// takes KV tiles `[s*c, min((s+1)*c, n))`, `c = ceil(n / NSPLIT)`, of the `n` tiles its rows can see.
pub fn build_decode(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    build_decode_impl(spec, knobs, false)
}

/// The decode kernel for one query per request and one split, writing the final outputs itself (no
/// workspace, no combine launch).
///
/// Tensor arguments, in order: `q [B, 1, H, D]` bf16, `kv [NBLK, PAGE, D]` bf16, `block_table [B, MAXB]` i32,
/// `cache_seqlens [B]` i32, then the outputs `o [B, 1, H, DV]` bf16 and `lse [B, H, 1]` f32 (natural log,
/// +inf and o = 0 for a request without keys), exactly what [`build_decode`] + [`build_decode_combine`] write
/// with `NSPLIT = 1`. Scalar: `scale`. Grid: `(ceil(H / BM), 1, B)`.
pub fn build_decode_direct(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    build_decode_impl(spec, knobs, true)
}

/// The KV stage ring both decode kernels run: the cache rows of the split's tiles `t0 + j` (through the block
/// table), `STAGES` slots of `D / KC` chunks in `skv`, copied `STAGES - 1` tiles ahead of the tile in use.
struct KvRing {
    kv: TensorId,
    bt: TensorId,
    skv: SharedId,
    bi: Expr,
    maxb: Expr,
    t0: Expr,
    s_k: Expr,
    count: Expr,
    d: u32,
    bn: u32,
    page: u32,
    st: u32,
    /// How many tiles ahead of the one in use the ring loads: `STAGES - 1`, or `STAGES - 2` when a stage stays
    /// in use one iteration longer (OVERLAP: tile j-1's values are read while tile j's scores are computed).
    ahead: u32,
    /// BT_PREFETCH: the block-table entry of the tile the next iteration loads (set by [`KvRing::prologue`]).
    blk_next: Option<VarId>,
    /// `LOAD=tma`: the stages arrive by bulk tensor copies on mbarriers instead of cp.async.
    tma: Option<KvTma>,
}

/// The decode's `LOAD=tma` ring: a map over the cache `[NBLK, page, d]` with boxes of one 64-column chunk of `bn`
/// rows of one page, and per slot a full barrier (the elected thread's expected bytes) and an empty one (every
/// thread's release once its products have read the slot).
struct KvTma {
    map: TmapId,
    full: MbarId,
    empty: MbarId,
    ring: StageRing,
    /// Threads that release a slot.
    threads: u32,
}

impl KvTma {
    fn new(b: &mut KernelBuilder, kv: TensorId, bn: u32, st: u32, threads: u32) -> Self {
        KvTma {
            map: b.tensor_map("kv_map", kv, &[KC, bn, 1], Swizzle::Xor16B),
            full: b.mbarriers("kv_full", st),
            empty: b.mbarriers("kv_empty", st),
            ring: StageRing::new(st, true),
            threads,
        }
    }
}

impl KvRing {
    /// The cache page of the split's KV tile `j`.
    fn blk_of(&self, j: Expr) -> Expr {
        load(self.bt, self.bi.clone() * self.maxb.clone() + (self.t0.clone() + j) * self.bn as i64 / self.page as i64)
    }

    /// Copy tile `j` (on cache page `blk`) into its slot.
    fn load_stage(&self, b: &mut KernelBuilder, j: Expr, blk: Expr) {
        let (bn, page, st, d, nch) = (self.bn, self.page, self.st, self.d, self.d / KC);
        let slot = j.clone() % st as i64;
        let kv0 = (self.t0.clone() + j.clone()) * bn as i64;
        if let Some(t) = &self.tma {
            // The elected thread waits until every thread has released the slot's previous use (a fresh barrier
            // passes at once), announces the tile's bytes (whole boxes: the page holds every row) and issues the
            // copies.
            b.mbar_wait_elected(t.empty, slot.clone(), t.ring.empty_parity(j.clone()));
            b.mbar_arrive_expect_tx(t.full, slot.clone(), 2 * bn * d);
            let row = b.let_("page_row", kv0 % page as i64);
            let blk = b.let_("page", blk);
            for c in 0..nch {
                let dst = b.slot(self.skv, slot.clone() * nch as i64 + c as i64);
                let coords = vec![Expr::from((c * KC) as i64), row.clone(), blk.clone()];
                b.tma_load(t.map, dst, coords, t.full, slot.clone());
            }
            return;
        }
        let row0 = b.let_("cache_row", blk * page as i64 + kv0.clone() % page as i64);
        let rows = b.let_("keys", self.s_k.clone() - kv0);
        for c in 0..nch {
            let src = view(self.kv, row0.clone() * d as i64 + (c * KC) as i64, d as i64, rows.clone(), KC as i64, 8);
            let dst = b.slot(self.skv, slot.clone() * nch as i64 + c as i64);
            b.copy_async(dst, src);
        }
    }

    /// Before the loop: the block's Q rows into `sq` (one chunk per slot), the first `ahead` tiles (one commit
    /// group each) and, with `bt_prefetch`, the block-table entry of the tile the first iteration loads (so that
    /// the copies do not wait for a dependent global load).
    #[allow(clippy::too_many_arguments)]
    fn prologue(
        &mut self,
        b: &mut KernelBuilder,
        q: TensorId,
        sq: SharedId,
        rows_total: &Expr,
        m0: &Expr,
        rows_valid: &Expr,
        bt_prefetch: bool,
    ) {
        let (d, ahead) = (self.d, self.ahead);
        if let Some(t) = &self.tma {
            b.mbar_init(t.full, 1);
            b.mbar_init(t.empty, t.threads);
        }
        for c in 0..d / KC {
            let qsrc = view(
                q,
                (self.bi.clone() * rows_total.clone() + m0.clone()) * d as i64 + (c * KC) as i64,
                d as i64,
                rows_valid.clone(),
                KC as i64,
                8,
            );
            let qd = b.slot(sq, c as i64);
            b.copy_async(qd, qsrc);
        }
        for i in 0..ahead {
            let j = Expr::Int(i as i64);
            b.if_(j.lt(self.count.clone()), |b| self.load_stage(b, j.clone(), self.blk_of(j.clone())));
            if self.tma.is_none() {
                b.commit();
            }
        }
        if self.tma.is_some() {
            // The Q tile (cp.async: rows past the block's are zeros) landed, fenced for the async proxy.
            b.commit();
            b.wait(0);
            b.barrier();
        }
        let blk_next = bt_prefetch.then(|| {
            let v = b.let_var("blk_next", 0i64);
            let j = Expr::Int(ahead as i64);
            b.if_(j.lt(self.count.clone()), |b| b.assign(v, self.blk_of(j.clone())));
            v
        });
        self.blk_next = blk_next;
    }

    /// The top of loop iteration `j`: tile j's copies landed and every warp finished reading the slot the next
    /// load overwrites; then tile `j + ahead` is issued (one commit group) and the prefetched entry advanced.
    /// `LOAD=tma`: tile `j + ahead` is issued first (the elected thread waits for its slot's release, see
    /// [`KvRing::release`]), then every thread waits for tile j's bytes; no block barrier.
    fn step(&self, b: &mut KernelBuilder, j: &Expr) {
        let ahead = self.ahead;
        if self.tma.is_none() {
            b.wait(ahead - 1);
            b.barrier();
        }
        let next = j + ahead as i64;
        let blk = self.blk_next.map_or_else(|| self.blk_of(next.clone()), Expr::Var);
        b.if_(next.lt(self.count.clone()), |b| self.load_stage(b, next.clone(), blk));
        if self.tma.is_none() {
            b.commit();
        }
        if let Some(v) = self.blk_next {
            let after = &next + 1i64;
            b.if_(after.lt(self.count.clone()), |b| b.assign(v, self.blk_of(after.clone())));
        }
        if let Some(t) = &self.tma {
            let slot = j % self.st as i64;
            b.mbar_wait(t.full, slot.clone(), t.ring.phase(j.clone()));
            self.zero_tail(b, j, &slot, t.threads);
        }
    }

    /// `LOAD=tma`: the copy engine moves whole pages, so the rows of a request's last tile past its cache length
    /// hold whatever the page holds (unused rows may be NaN); their scores are masked, but `0 * NaN` would reach
    /// `P V`. Zero those rows (the cp.async path's zero fill), fenced for the async proxy.
    fn zero_tail(&self, b: &mut KernelBuilder, j: &Expr, slot: &Expr, threads: u32) {
        let (bn, d, nch) = (self.bn, self.d, self.d / KC);
        let keys = b.let_("tile_keys", self.s_k.clone() - (self.t0.clone() + j.clone()) * bn as i64);
        b.if_(keys.lt(bn as i64), |b| {
            b.threads(|b| {
                let n = (Expr::from(bn as i64) - keys.clone()) * d as i64;
                b.for_("z", Expr::thread_idx(), n, threads as i64, |b, z| {
                    let col = &z % d as i64;
                    let chunk = slot.clone() * nch as i64 + &col / KC as i64;
                    b.shared_store(self.skv, chunk, keys.clone() + &z / d as i64, col % KC as i64, 0.0f64);
                });
            });
            b.wait(0);
            b.barrier();
        });
    }

    /// `LOAD=tma`: every thread releases tile `j`'s slot (its products that read it have completed), so that the
    /// producer may refill it; nothing with cp.async (the next iteration's barrier orders the refill).
    fn release(&self, b: &mut KernelBuilder, j: &Expr) {
        if let Some(t) = &self.tma {
            b.mbar_arrive(t.empty, j % self.st as i64);
        }
    }
}

/// The arguments both decode kernels take, declared in the order [`build_decode`] and [`build_decode_direct`]
/// document (direct: SQ and NSPLIT are 1, the outputs are o and lse).
struct DecodeIo {
    bsz: Expr,
    sqd: Expr,
    h: Expr,
    maxb: Expr,
    nsplit: Expr,
    q: TensorId,
    kv: TensorId,
    bt: TensorId,
    seqlens: TensorId,
    o_part: TensorId,
    lse_part: TensorId,
    scale: Expr,
}

fn decode_io(b: &mut KernelBuilder, spec: &DecodeSpec, direct: bool) -> DecodeIo {
    let (d, dv, page) = (spec.d, spec.dv, spec.page);
    let bsz = b.dim("B");
    let sqd = if direct { Expr::Int(1) } else { b.dim("SQ") };
    let h = b.dim("H");
    let nblk = b.dim("NBLK");
    let maxb = b.dim("MAXB");
    let nsplit = if direct { Expr::Int(1) } else { b.dim("NSPLIT") };
    let q = b.tensor("q", DType::Bf16, &[bsz.clone(), sqd.clone(), h.clone(), Expr::from(d)], Access::Read);
    let kv = b.tensor("kv", DType::Bf16, &[nblk, Expr::from(page), Expr::from(d)], Access::Read);
    let bt = b.tensor("block_table", DType::I32, &[bsz.clone(), maxb.clone()], Access::Read);
    let seqlens = b.tensor("cache_seqlens", DType::I32, std::slice::from_ref(&bsz), Access::Read);
    // Split-KV: normalised f32 partials and log2-domain LSEs; direct: o (bf16) and the natural-log lse.
    let (o_part, lse_part) = if direct {
        let o = b.tensor("o", DType::Bf16, &[bsz.clone(), sqd.clone(), h.clone(), Expr::from(dv)], Access::Write);
        let lse = b.tensor("lse", DType::F32, &[bsz.clone(), h.clone(), sqd.clone()], Access::Write);
        (o, lse)
    } else {
        let o_part = b.tensor(
            "o_part",
            DType::F32,
            &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone(), Expr::from(dv)],
            Access::Write,
        );
        let lse_part =
            b.tensor("lse_part", DType::F32, &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone()], Access::Write);
        (o_part, lse_part)
    };
    let scale = b.float_arg("scale");
    DecodeIo { bsz, sqd, h, maxb, nsplit, q, kv, bt, seqlens, o_part, lse_part, scale }
}

/// A decode block's coordinates (its split, request and first packed row, the request's packed rows and how many
/// lie at or past the block's first) and the KV tiles it walks: the request's cache length `s_k`, this split's first
/// tile `t0` and tile `count` (the splits partition the tiles of the keys the block's last query may see), the
/// causal diagonal of its first query and the log2-domain scale.
struct DecodeBlock {
    split: Expr,
    bi: Expr,
    rows_total: Expr,
    m0: Expr,
    rows_valid: Expr,
    s_k: Expr,
    t0: Expr,
    count: Expr,
    diag: Expr,
    scale_log2: Expr,
}

/// The decode's mask of a KV tile starting at key `kv0` of an m-tile starting at packed row `m0`: whether the tile
/// reaches past `diag` (the causal diagonal of the block's first query, so that some pair may be masked), and
/// which (row, key) pairs are visible (query `(m0 + row) / H` of `SQ` sees keys `[0, S_k - SQ + query]`).
fn decode_mask(kv0: &Expr, m0: &Expr, h: &Expr, s_k: &Expr, sqd: &Expr, diag: &Expr, bn: u32) -> (Expr, Expr) {
    let key = kv0.clone() + Expr::ColIdx;
    let query = (m0.clone() + Expr::RowIdx) / h.clone();
    let visible = key.lt(s_k.clone()).and(key.le(s_k.clone() - sqd.clone() + query));
    ((kv0.clone() + (bn as i64 - 1)).gt(diag.clone()), visible)
}

/// The coordinates and KV range of the block on m-tile `mt` (grid y: split, z: request), both decode kernels'.
fn decode_block(b: &mut KernelBuilder, io: &DecodeIo, mt: Expr, bm: u32, bn: u32) -> DecodeBlock {
    let (sqd, h) = (&io.sqd, &io.h);
    let split = b.let_("split", Expr::block_idx(1));
    let bi = b.let_("req", Expr::block_idx(2));
    let rows_total = b.let_("rows_total", sqd.clone() * h.clone());
    let m0 = b.let_("m0", mt * bm as i64);
    let rows_valid = b.let_("rows_valid", rows_total.clone() - m0.clone());
    let s_k = b.let_("s_k", load(io.seqlens, bi.clone()));
    let i_lo = b.let_("i_lo", m0.clone() / h.clone());
    let i_hi = b.let_("i_hi", ((m0.clone() + bm as i64).min(rows_total.clone()) - 1i64) / h.clone());
    // Keys the tile's last query may see; the splits partition their tiles.
    let n_keys = b.let_("n_keys", (s_k.clone() - sqd.clone() + 1i64 + i_hi).min(s_k.clone()).max(0i64));
    let n_tiles = b.let_("n_tiles", n_keys.ceil_div(bn as i64));
    let per_split = b.let_("per_split", n_tiles.ceil_div(io.nsplit.clone()));
    let t0 = b.let_("t0", (split.clone() * per_split.clone()).min(n_tiles.clone()));
    let count = b.let_("count", (t0.clone() + per_split).min(n_tiles) - t0.clone());
    let diag = b.let_("diag", s_k.clone() - sqd.clone() + i_lo);
    let scale_log2 = b.let_("scale_log2", io.scale.clone() * LOG2_E);
    DecodeBlock { split, bi, rows_total, m0, rows_valid, s_k, t0, count, diag, scale_log2 }
}

fn build_decode_impl(spec: &DecodeSpec, knobs: &Knobs, direct: bool) -> Result<Kernel, OpError> {
    let c = decode_cfg(spec, knobs)?;
    if c.wgmma {
        return build_decode_wgmma(spec, knobs, &c, direct);
    }
    let (bm, bn, st) = (c.bm, c.bn, c.stages);
    let (d, dv, page) = (spec.d, spec.dv, spec.page);
    let name = format!(
        "k3k_mla_decode{}_d{d}_{dv}_p{page}_{}",
        if direct { "_direct" } else { "" },
        knobs.id().to_lowercase()
    );
    let mut b = KernelBuilder::new(&name, 32 * c.wm * c.wn);
    b.knobs(knobs.clone());
    let io = decode_io(&mut b, spec, direct);
    b.grid((io.sqd.clone() * io.h.clone()).ceil_div(bm as i64), io.nsplit.clone(), io.bsz.clone());

    let s_warps = [c.wm, 1];
    let acc_warps = [c.wm, c.wn];
    // Q and the cache rows are stored as KC-column chunks: the score product walks all of them in a rolled
    // loop, the value product reads the first DV / KC of them into one accumulator tile each.
    let (nch, nv) = (d / KC, dv / KC);
    let sq = b.shared("sQ", DType::Bf16, bm, KC, nch, Swizzle::Xor16B);
    let skv = b.shared("sKV", DType::Bf16, bn, KC, st * nch, Swizzle::Xor16B);
    let s = b.tile("s", DType::F32, bm, bn, s_warps);
    let p = b.tile("p", DType::Bf16, bm, bn, s_warps);
    let accs: Vec<TileId> = (0..nv).map(|c| b.tile(&format!("acc{c}"), DType::F32, bm, KC, acc_warps)).collect();
    // With shared scores each warp computes a [BM/WM, BN/SWN] block of the scores (no redundant products
    // when SWN = WN; WN/SWN warps share a block otherwise) and the full rows are read back from shared memory
    // onto the [WM, 1] tile the softmax needs.
    let exchange = c.shared_scores.then(|| {
        let sw = b.tile("s_split", DType::F32, bm, bn, [c.wm, c.swn]);
        let ss = b.shared("sS", DType::F32, bm, bn, 1, Swizzle::Xor16B);
        (sw, ss)
    });
    let s_calc = exchange.map_or(s, |(sw, _)| sw);
    // Extra partial score accumulators (QK_ACCS > 1), on the same warps as the tile they are summed into.
    let s_parts: Vec<TileId> = (1..c.qk_accs)
        .map(|i| {
            let w = if c.shared_scores { [c.wm, c.swn] } else { s_warps };
            b.tile(&format!("s_part{i}"), DType::F32, bm, bn, w)
        })
        .collect();
    let sm = OnlineSoftmax::new(&mut b, bm, s_warps, acc_warps);
    let inv_l = b.vec("inv_l", bm, acc_warps);
    let lse_v = b.vec("lse_rows", bm, s_warps);

    let mt = Expr::block_idx(0);
    let DecodeBlock { split, bi, rows_total, m0, rows_valid, s_k, t0, count, diag, scale_log2 } =
        decode_block(&mut b, &io, mt, bm, bn);
    let DecodeIo { sqd, h, maxb, nsplit, q, kv, bt, o_part, lse_part, .. } = io;

    let mut ring = KvRing {
        kv,
        bt,
        skv,
        bi: bi.clone(),
        maxb,
        t0: t0.clone(),
        s_k: s_k.clone(),
        count: count.clone(),
        d,
        bn,
        page,
        st,
        ahead: st - 1,
        blk_next: None,
        tma: c.tma.then(|| KvTma::new(&mut b, kv, bn, st, 32 * c.wm * c.wn)),
    };
    ring.prologue(&mut b, q, sq, &rows_total, &m0, &rows_valid, c.bt_prefetch);
    sm.init(&mut b);
    for &acc in &accs {
        b.map(acc, 0.0f64);
    }
    b.for_("j", 0i64, count.clone(), 1i64, |b, j| {
        ring.step(b, &j);
        if c.tma {
            // The ring's copies need no block barrier; the score exchange below relies on one per iteration.
            b.barrier();
        }
        let slot = &j % st as i64;
        let kv0 = b.let_("kv0", (t0.clone() + j.clone()) * bn as i64);
        b.map(s_calc, 0.0f64);
        if s_parts.is_empty() {
            qk_chunks(b, s_calc, sq, skv, slot.clone() * nch as i64, nch, false);
        } else {
            // Chunk c goes to partial c % QK_ACCS: QK_ACCS independent chains of products, summed after.
            let all: Vec<TileId> = std::iter::once(s_calc).chain(s_parts.iter().copied()).collect();
            for &t in &s_parts {
                b.map(t, 0.0f64);
            }
            let na = all.len() as i64;
            b.for_("chunk", 0i64, nch as i64 / na, 1i64, |b, it| {
                for (i, &t) in all.iter().enumerate() {
                    let c = it.clone() * na + i as i64;
                    let qa = Operand::Shared { src: b.slot(sq, c.clone()), transpose: false };
                    let kb = Operand::Shared { src: b.slot(skv, slot.clone() * nch as i64 + c), transpose: true };
                    b.mma(t, qa, kb);
                }
            });
            let sum = s_parts.iter().fold(el(s_calc), |acc, &t| acc + el(t));
            b.map(s_calc, sum);
        }
        let (crosses, visible) = decode_mask(&kv0, &m0, &h, &s_k, &sqd, &diag, bn);
        mask_scores(b, s_calc, crosses, visible, &scale_log2, false);
        if let Some((sw, ss)) = exchange {
            // The previous iteration's reads of sS finished before this iteration's first barrier.
            let dst = b.slot(ss, 0i64);
            b.store(sw, Place::Shared(dst));
            b.barrier();
            let src = b.slot(ss, 0i64);
            b.load(s, Place::Shared(src));
        }
        sm.step(b, s, p, &accs);
        // Values: the first DV columns of the same cache rows.
        for (c, &acc) in accs.iter().enumerate() {
            let vb = Operand::Shared { src: b.slot(skv, slot.clone() * nch as i64 + c as i64), transpose: false };
            b.mma(acc, Operand::Reg(p), vb);
        }
        ring.release(b, &j);
    });
    b.wait(0);
    b.vec_map(inv_l, sm.inv_l());
    let part_row = b.let_("part_row", (bi * nsplit + split) * rows_total + m0);
    for (c, &acc) in accs.iter().enumerate() {
        b.map(acc, el(acc) * rv(inv_l));
        // (16-byte stores of bf16 o, 4-element groups of f32 partials: every offset is a multiple of KC.)
        let dst = view(
            o_part,
            part_row.clone() * dv as i64 + (c as u32 * KC) as i64,
            dv as i64,
            rows_valid.clone(),
            KC as i64,
            if direct { 8 } else { 4 },
        );
        b.store(acc, Place::Global(dst));
    }
    // Direct (one query, one split): row r of the tile is head m0 + r, at lse[(req * H + head) * 1 + 0].
    b.vec_map(lse_v, if direct { sm.lse_nat() } else { sm.lse_log2() });
    b.store_vec(lse_v, vec_view(lse_part, part_row, 1i64, rows_valid));
    Ok(b.finish()?)
}

/// The split count the decode kernel should use for `batch` requests of `m_tiles` m-tiles each whose longest
/// request has `max_seqlen_k` keys, on a GPU with `num_sms` multiprocessors that each hold `blocks_per_sm`
/// decode blocks at once ([`decode_blocks_per_sm`]): the count minimising `waves * (tiles per split + 2)`
/// (waves of `num_sms * blocks_per_sm` blocks; the 2 standing for a split's prologue, epilogue and share of
/// the combine, in 64-key tiles), with at least two KV tiles of `bn` keys per split and at most 64 splits.
/// A split count that leaves block slots empty costs as much as a full wave: one block per slot is what keeps
/// enough loads in flight.
pub fn decode_num_splits(
    batch: usize,
    m_tiles: usize,
    max_seqlen_k: usize,
    num_sms: usize,
    blocks_per_sm: usize,
    bn: usize,
) -> usize {
    let blocks = (batch * m_tiles).max(1);
    let slots = num_sms.max(1) * blocks_per_sm.max(1);
    let bn = bn.max(1);
    let tiles = max_seqlen_k.div_ceil(bn);
    let cap = (tiles / 2).clamp(1, 64);
    let overhead = 2 * 64usize.div_ceil(bn);
    let cost = |s: usize| (blocks * s).div_ceil(slots) * (tiles.div_ceil(s) + overhead);
    (1..=cap).min_by_key(|&s| cost(s)).unwrap_or(1)
}

/// The combine tuning knobs.
pub fn combine_knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("BM", "heads per block", [16i64, 32])
        .axis("WM", "warp rows", [1i64, 2])
        .axis("WN", "warp columns over the value width", [2i64, 4, 8])
        .axis("BC", "value columns per block (the grid's x covers head tiles times DV / BC)", [128i64, 512])
}

/// The combine knobs used when no tuning record exists: 128 value columns per block, so that 128 requests
/// of 12 heads make 512 blocks (one block per request, as before, left most SMs with one block of 4 warps).
pub fn combine_default_knobs() -> Knobs {
    Knobs::new().with("BM", 16i64).with("WM", 1i64).with("WN", 4i64).with("BC", 128i64)
}

/// Build the split-merge kernel of decode.
///
/// Tensor arguments, in order: `o_part [B, NSPLIT, SQ, H, DV]` f32 and `lse_part [B, NSPLIT, SQ, H]` f32 (as
/// written by [`build_decode`]), outputs `o [B, SQ, H, DV]` bf16 and `lse [B, H, SQ]` f32 (natural log, +inf
/// for a query that saw no key, whose o is 0). Grid: `(ceil(H / BM) * DV / BC, SQ, B)` (`BC`, the value columns
/// per block, defaults to DV when absent).
pub fn build_decode_combine(spec: &DecodeSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    const OP: &str = "gated_mla_decode_combine";
    let (bm, wm, wn) = (knobs.u32("BM")?, knobs.u32("WM")?, knobs.u32("WN")?);
    let bc = opt_u32(knobs, "BC", spec.dv)?;
    if bc == 0 || !spec.dv.is_multiple_of(bc) {
        return invalid(OP, knobs, format!("BC={bc} must divide DV={}", spec.dv));
    }
    if wm == 0 || wn == 0 || wm * wn > 16 || bm == 0 || bm % (16 * wm) != 0 || !bc.is_multiple_of(8 * wn) {
        return invalid(OP, knobs, format!("BM={bm} WM={wm} WN={wn} do not tile {bm}x{bc}"));
    }
    let threads = 32 * wm * wn;
    if threads > 256 || 2 * bm * bc / threads > 128 {
        return invalid(OP, knobs, "at most 8 warps and 128 tile registers per thread".into());
    }
    let dv = spec.dv;
    let ncb = (dv / bc) as i64;
    let name = format!("k3k_mla_decode_combine_dv{dv}_{}", knobs.id().to_lowercase());
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(knobs.clone());
    let bsz = b.dim("B");
    let nsplit = b.dim("NSPLIT");
    let sqd = b.dim("SQ");
    let h = b.dim("H");
    let o_part = b.tensor(
        "o_part",
        DType::F32,
        &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone(), Expr::from(dv)],
        Access::Read,
    );
    let lse_part =
        b.tensor("lse_part", DType::F32, &[bsz.clone(), nsplit.clone(), sqd.clone(), h.clone()], Access::Read);
    let o = b.tensor("o", DType::Bf16, &[bsz.clone(), sqd.clone(), h.clone(), Expr::from(dv)], Access::Write);
    let lse = b.tensor("lse", DType::F32, &[bsz.clone(), h.clone(), sqd.clone()], Access::Write);
    b.grid(h.ceil_div(bm as i64) * ncb, sqd.clone(), bsz);

    let warps = [wm, wn];
    let acc = b.tile("acc", DType::F32, bm, bc, warps);
    let part = b.tile("o_split", DType::F32, bm, bc, warps);
    let mx = b.vec("m", bm, warps);
    let mu = b.vec("mu", bm, warps);
    let lj = b.vec("lse_split", bm, warps);
    let w = b.vec("w", bm, warps);
    let sum = b.vec("sum", bm, warps);
    let out = b.vec("out", bm, warps);

    let h0 = b.let_("h0", Expr::block_idx(0) / ncb * bm as i64);
    let c0 = b.let_("c0", Expr::block_idx(0) % ncb * bc as i64);
    let qi = b.let_("query", Expr::block_idx(1));
    let bi = b.let_("req", Expr::block_idx(2));
    let rows = b.let_("rows", h.clone() - h0.clone());
    let part_row =
        |s: &Expr| ((bi.clone() * nsplit.clone() + s.clone()) * sqd.clone() + qi.clone()) * h.clone() + h0.clone();

    b.vec_map(mx, NEG_INF);
    b.for_("split", 0i64, nsplit.clone(), 1i64, |b, s| {
        b.load_vec(lj, vec_view(lse_part, part_row(&s), 1i64, rows.clone()));
        b.vec_map(mx, rv(mx).max(rv(lj)));
    });
    b.vec_map(mu, Expr::select(rv(mx).eq(NEG_INF), 0.0f64, rv(mx)));
    b.vec_map(sum, 0.0f64);
    b.map(acc, 0.0f64);
    b.for_("split", 0i64, nsplit.clone(), 1i64, |b, s| {
        b.load_vec(lj, vec_view(lse_part, part_row(&s), 1i64, rows.clone()));
        b.vec_map(w, (rv(lj) - rv(mu)).exp2());
        b.vec_map(sum, rv(sum) + rv(w));
        let src = view(o_part, part_row(&s) * dv as i64 + c0.clone(), dv as i64, rows.clone(), bc as i64, 2);
        b.load(part, Place::Global(src));
        b.map(acc, el(acc) + rv(w) * el(part));
    });
    b.vec_map(out, Expr::select(rv(sum).gt(0.0f64), rv(sum).recip(), 0.0f64));
    b.map(acc, el(acc) * rv(out));
    let o_off = ((bi.clone() * sqd.clone() + qi.clone()) * h.clone() + h0.clone()) * dv as i64 + c0.clone();
    b.store(acc, Place::Global(view(o, o_off, dv as i64, rows.clone(), bc as i64, 8)));
    // The LSE once per head tile (by its first column block).
    b.if_(c0.eq(0i64), |b| {
        b.vec_map(out, Expr::select(rv(sum).gt(0.0f64), (rv(mu) + rv(sum).log2()) * LN_2, POS_INF));
        b.store_vec(out, vec_view(lse, (bi * h + h0) * sqd.clone() + qi, sqd, rows));
    });
    Ok(b.finish()?)
}
