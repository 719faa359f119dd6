//! The decode configuration resolved from the typed knobs ([`decode_cfg`], [`decode_cfg_wgmma`]) and the blocks per
//! request and per SM it gives.

use super::*;

pub(super) struct DecodeCfg {
    pub(super) bm: u32,
    pub(super) bn: u32,
    pub(super) wm: u32,
    pub(super) wn: u32,
    pub(super) stages: u32,
    /// Scores split over the WN column groups and exchanged through shared memory.
    pub(super) shared_scores: bool,
    /// Warp column groups splitting the score columns (SCORES=shared; divides WN).
    pub(super) swn: u32,
    /// Partial score accumulators of the score product.
    pub(super) qk_accs: u32,
    /// Read each tile's block-table entry one loop iteration ahead.
    pub(super) bt_prefetch: bool,
    /// Hopper warpgroup MMA (`MMA=wgmma`).
    pub(super) wgmma: bool,
    /// Value-column splits (one block each; 1 for mma.sync).
    pub(super) dvs: u32,
    /// MMA=wgmma: unroll the 9 score products of a tile.
    pub(super) qk_unroll: bool,
    /// MMA=wgmma: `OVERLAP`, tile j's softmax under tile j-1's P V product.
    pub(super) overlap: bool,
    /// MMA=wgmma: `SOFTMAX=fast`.
    pub(super) fast_softmax: bool,
    /// MMA=wgmma: `VWG`, warpgroup sets sharing the block's stages, splitting the value columns (1 or 2).
    pub(super) vwg: u32,
    /// MMA=wgmma: `LOAD=tma`, the K/V ring by bulk tensor copies on mbarriers.
    pub(super) tma: bool,
    /// Register-tile registers per thread (the estimate the knob checks use).
    pub(super) tile_regs: u32,
    /// Dynamic shared memory per block.
    pub(super) smem: usize,
}

impl DecodeCfg {
    /// Shared bytes of the Q tile and the K/V ring (both kernels), with `LOAD=tma` a full and an empty mbarrier
    /// per slot after the buffers (aligned to 128 bytes).
    pub(super) fn q_and_ring_bytes(&self, spec: &DecodeSpec) -> usize {
        let bars = if self.tma { 128 + 16 * self.stages as usize } else { 0 };
        2 * ((self.bm + self.stages * self.bn) * spec.d) as usize + bars
    }

    /// The block's threads: `WM x WN` warps (mma.sync, where VWG is 1) or `VWG` sets of `WM` warps (wgmma, where
    /// WN is 1).
    pub(super) fn threads(&self) -> u32 {
        32 * self.wm * self.wn * self.vwg
    }

    /// The kernel's name (both MMA paths).
    pub(super) fn kernel_name(spec: &DecodeSpec, knobs: &Knobs, direct: bool) -> String {
        let (d, dv, page) = (spec.d, spec.dv, spec.page);
        let direct = if direct { "_direct" } else { "" };
        format!("k3k_mla_decode{direct}_d{d}_{dv}_p{page}_{}", knobs.id().to_lowercase())
    }
}

/// The configuration of record `k` ([`DecodeKnobs`]) for `spec`, checked.
pub(super) fn decode_cfg(spec: &DecodeSpec, k: &Knobs) -> Result<DecodeCfg, OpError> {
    const OP: &str = DecodeKnobs::OP;
    let t = DecodeKnobs::from_knobs(k)?;
    let mut c = DecodeCfg {
        bm: t.bm,
        bn: t.bn,
        wm: t.wm,
        wn: t.wn,
        stages: t.stages,
        shared_scores: t.scores == Scores::Shared,
        swn: t.swn,
        qk_accs: t.qk_accs,
        bt_prefetch: t.bt_prefetch == Flag::On,
        wgmma: t.mma == Mma::Wgmma,
        dvs: t.dvs,
        qk_unroll: t.qk_unroll == Flag::On,
        overlap: t.overlap,
        fast_softmax: t.softmax == Softmax::Fast,
        vwg: t.vwg,
        tma: t.load == RingLoad::Tma,
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
pub(super) fn decode_cfg_wgmma(spec: &DecodeSpec, k: &Knobs, mut c: DecodeCfg) -> Result<DecodeCfg, OpError> {
    const OP: &str = DecodeKnobs::OP;
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
pub(super) const SM_SHARED_BYTES: usize = 233_472;
pub(super) const SM_SHARED_RESERVED: usize = 1024;

/// How many decode blocks of these knobs one multiprocessor holds at once (sm_90: 228 KB of shared memory
/// with 1 KB reserved per block, 2048 threads, 64 K registers; registers estimated as the tile registers
/// plus 64 for fragments and addresses, which is above what ptxas allocated over the knob space).
pub fn decode_blocks_per_sm(spec: &DecodeSpec, knobs: &Knobs) -> Result<usize, OpError> {
    let c = decode_cfg(spec, knobs)?;
    let threads = c.threads() as usize;
    let by_smem = SM_SHARED_BYTES / (c.smem + SM_SHARED_RESERVED);
    let regs = ((c.tile_regs as usize + 64).min(255)).next_multiple_of(8);
    let by_regs = 65536 / (regs * threads);
    Ok(by_smem.min(2048 / threads).min(by_regs).clamp(1, 32))
}
