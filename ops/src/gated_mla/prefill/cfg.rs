//! The prefill configuration resolved from the typed knobs ([`prefill_cfg`]) and its TMA descriptors.

use super::*;

/// The `LOAD=tma` tensor maps and mbarriers of the prefill.
pub(super) struct PrefillTma {
    pub(super) qm: TmapId,
    pub(super) km: TmapId,
    pub(super) vm: TmapId,
    pub(super) q_full: MbarId,
    /// PERSIST: the consumers release the Q tile after an item's last product.
    pub(super) q_empty: Option<MbarId>,
    pub(super) k_full: MbarId,
    pub(super) k_empty: MbarId,
    pub(super) v_full: MbarId,
    pub(super) v_empty: MbarId,
}

pub(super) struct PrefillCfg {
    pub(super) bm: u32,
    pub(super) bn: u32,
    pub(super) wm: u32,
    pub(super) stages: u32,
    pub(super) qk_unroll: bool,
    pub(super) wgmma: bool,
    pub(super) overlap: bool,
    /// Causal only: longest-processing-time-first block order over L2-sized head groups (`QORDER=lpt`).
    pub(super) qorder_lpt: bool,
    /// Heads per LPT group (`HGROUP`; 0: as many as fit [`L2_GROUP_BYTES`] of K/V).
    pub(super) hgroup: u32,
    /// `SOFTMAX=fast`: max of the raw scores, scale folded into the exponent, `exp2_ftz`.
    pub(super) fast_softmax: bool,
    /// `SMGUARD`: the overlapped softmax in its own basic block (see [`PrefillKnobs::smguard`]).
    pub(super) smguard: bool,
    /// `LOAD=tma`: Q, K and V tiles by bulk tensor copies on mbarriers (see [`PrefillKnobs::load`]).
    pub(super) tma: bool,
    /// `PRODUCER=warp` (LOAD=tma): the copies come from a dedicated producer warpgroup (see
    /// [`PrefillKnobs::producer`]).
    pub(super) producer_warp: bool,
    /// `PINGPONG` (OVERLAP, two or more warpgroups): the warpgroups issue their products in turn.
    pub(super) pingpong: bool,
    /// `PERSIST` (fixed lengths): one block per SM walks the (q-tile, head) items (see [`PrefillKnobs::persist`]).
    pub(super) persist: bool,
}

/// The K/V bytes an LPT head group may keep in L2 (FA3's 32 MB rule).
pub(super) const L2_GROUP_BYTES: i64 = 32 << 20;

/// The configuration of record `k` ([`PrefillKnobs`]) for `spec`, checked.
pub(super) fn prefill_cfg(spec: &PrefillSpec, k: &Knobs) -> Result<PrefillCfg, OpError> {
    const OP: &str = PrefillKnobs::OP;
    let t = PrefillKnobs::from_knobs(k)?;
    let wgmma = t.mma == Mma::Wgmma;
    let c = PrefillCfg {
        bm: t.bm,
        bn: t.bn,
        wm: t.wm,
        stages: t.stages,
        qk_unroll: t.qk_unroll,
        wgmma,
        overlap: t.overlap,
        qorder_lpt: t.qorder == QOrder::Lpt,
        hgroup: t.hgroup,
        fast_softmax: t.softmax == Softmax::Fast,
        smguard: t.smguard,
        tma: match t.load {
            PrefillLoad::CpAsync => false,
            PrefillLoad::Tma => true,
            // Three consumer warpgroups (BM=192) run under the 168-register cap of 384 threads, where the TMA
            // kernel spills (92 bytes at BN=96, ptxas sm_90a): auto keeps cp.async there.
            PrefillLoad::Auto => wgmma && t.bm <= 128,
        },
        producer_warp: t.producer == Producer::Warp,
        pingpong: t.pingpong,
        persist: t.persist,
    };
    // PRODUCER=warp applies to the TMA kernel of one or two consumer warpgroups: cp.async has no copies to hand to a
    // producer warp, and three consumer warpgroups (BM=192) spill under the producer's 512-thread launch (144
    // bytes at BN=64, ptxas sm_90a, even with setmaxnreg); elsewhere it is ignored, as `LOAD=auto` is.
    let c = PrefillCfg { producer_warp: c.producer_warp && c.tma && c.wm * 32 <= 256, ..c };
    if c.producer_warp && !(c.wm * 32).is_multiple_of(128) {
        return invalid(
            OP,
            k,
            format!("PRODUCER=warp needs whole consumer warpgroups (WM a multiple of 4, got {})", c.wm),
        );
    }
    if c.tma && !c.wgmma {
        return invalid(
            OP,
            k,
            "LOAD=tma needs MMA=wgmma (the copy engine writes 128-byte swizzled rows; the mma.sync V tile has 256-byte rows)"
                .into(),
        );
    }
    if c.wm == 0 || c.wm > 16 || c.bm == 0 || !c.bm.is_multiple_of(16 * c.wm) {
        return invalid(OP, k, format!("BM={} must be a positive multiple of 16*WM (WM={} in 1..=16)", c.bm, c.wm));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(16) {
        return invalid(OP, k, format!("BN={} must be a positive multiple of 16", c.bn));
    }
    if c.stages < 2 {
        return invalid(OP, k, "STAGES >= 2".into());
    }
    if !spec.dqk.is_multiple_of(KC) || !spec.dv.is_multiple_of(KC) || spec.dv > spec.dqk {
        return invalid(OP, k, format!("head dims {}/{}: multiples of {KC} with dv <= dqk", spec.dqk, spec.dv));
    }
    if c.overlap && !c.wgmma {
        return invalid(OP, k, "OVERLAP needs MMA=wgmma".into());
    }
    if c.smguard && !c.overlap {
        return invalid(OP, k, "SMGUARD needs OVERLAP=true".into());
    }
    if c.persist && !(c.tma && c.producer_warp && c.overlap && c.wgmma && !c.qorder_lpt) {
        return invalid(
            OP,
            k,
            "PERSIST needs the overlapped wgmma kernel with LOAD=tma, PRODUCER=warp and QORDER=head".into(),
        );
    }
    // Varlen items have per-sequence lengths: the block-per-item grid stays.
    let c = PrefillCfg { persist: c.persist && !spec.varlen, ..c };
    if c.pingpong && !(c.overlap && c.wm >= 8) {
        return invalid(
            OP,
            k,
            format!("PINGPONG needs OVERLAP=true and two or more warpgroups to take turns (WM >= 8, got {})", c.wm),
        );
    }
    let rows = c.bm / c.wm;
    if c.wgmma {
        // One warpgroup per 64 query rows; every warp holds 16 rows of S, P and O.
        if c.bm != 64 * (c.wm / 4) || !c.wm.is_multiple_of(4) {
            return invalid(OP, k, format!("MMA=wgmma: BM={} must be 64 rows per warpgroup (WM = BM/16)", c.bm));
        }
        if c.bn > 256 {
            return invalid(OP, k, format!("MMA=wgmma: BN={} (the score product's N) at most 256", c.bn));
        }
        // S (f32), P (bf16 pairs) and O: with one warpgroup per 64 rows ptxas needs roughly another 60 for
        // addresses, descriptors and the row statistics.
        let regs = rows * c.bn / 32 + rows * c.bn / 64 + rows * spec.dv / 32;
        if regs > 176 {
            return invalid(OP, k, format!("{regs} tile registers per thread (max 176 for wgmma)"));
        }
    } else {
        // Per-thread registers of the score tile (f32), P (bf16 pairs) and the accumulators: ptxas needs about
        // as many again for fragments and addresses (measured: 112 tile registers assemble to ~254).
        let regs = rows * c.bn / 32 + rows * c.bn / 64 + rows * spec.dv / 32;
        if regs > 128 {
            return invalid(OP, k, format!("{regs} tile registers per thread (max 128)"));
        }
    }
    // LOAD=tma adds the mbarriers: one for Q, full and empty ones per K and per V slot.
    let mbar_bytes = if c.tma { 8 * (1 + 4 * c.stages as usize) } else { 0 };
    let smem = 2 * (c.bm * spec.dqk + c.stages * c.bn * (spec.dqk + spec.dv)) as usize + mbar_bytes;
    if smem > MAX_SHARED_BYTES {
        return invalid(OP, k, format!("{smem} bytes of shared memory"));
    }
    Ok(c)
}
