//! The validation of a resolved configuration: every combination of knobs the kernels do not build is refused
//! with its reason.

use super::*;

pub(super) fn validate(spec: &MatSpec, c: &Cfg, knobs: &Knobs) -> Result<(), OpError> {
    let invalid = |why: String| Err(OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why });
    let glu = spec.epilogue.is_glu();
    if c.gemv {
        let rows = if glu { c.bn / 2 } else { c.bn };
        if c.wgmma || c.wb != 1 {
            return invalid("PATH=gemv needs MMA=sync and WB=1".into());
        }
        if c.act_tile {
            return invalid(
                "PATH=gemv reads bf16 activations: MXFP8 ones are dequantized first (XDQ=tile refused)".into(),
            );
        }
        if !matches!(c.bm, 8 | 16) || !matches!(c.bk, 128 | 256 | 512 | 1024) {
            return invalid(format!(
                "PATH=gemv needs BM 8 or 16 and BK 128, 256, 512 or 1024 (got BM={}, BK={})",
                c.bm, c.bk
            ));
        }
        if spec.tiled && (c.stages < 3 || c.bm != 8 || c.split != 1) {
            return invalid(format!(
                "tile-major weights need the shared-memory ring (STAGES >= 3), 8-token tiles and no K split (got \
                 STAGES={}, BM={}, SPLIT={})",
                c.stages, c.bm, c.split
            ));
        }
        if c.sk && (c.cps == 0 || c.split != 1 || !c.fused) {
            return invalid(format!(
                "SK=1 needs a persistent grid (CPS > 0), no K split (SPLIT 0 or 1) and the in-kernel sum (FIN auto or \
                 last) (got CPS={}, SPLIT={}, FIN={})",
                c.cps,
                c.split,
                if c.fused { "last" } else { "kernel" }
            ));
        }
        if c.ts > 0 && (!spec.grouped || c.cps != 0 || c.sk || c.split != 1 || !c.fused) {
            return invalid(format!(
                "TS={} needs grouped weights, the hardware-scheduled grid (CPS=0, SK=0), no K split (SPLIT 0 or 1) \
                 and the in-kernel sum (FIN auto or last) (got {}, CPS={}, SK={}, SPLIT={}, FIN={})",
                c.ts,
                if spec.grouped { "grouped" } else { "dense" },
                c.cps,
                c.sk as u32,
                c.split,
                if c.fused { "last" } else { "kernel" }
            ));
        }
        if c.bulk && !(spec.tiled && c.l2pf == 0) {
            return invalid(format!(
                "COPY=bulk needs tile-major weights (WeightBytes::PackedTiles) and L2PF=0 (got {} weights, L2PF={})",
                if spec.tiled { "tile-major" } else { "row-major" },
                c.l2pf
            ));
        }
        if !matches!(c.xa, 1 | 2) || (c.xa == 2 && (c.stages < 3 || c.bm != 8)) {
            return invalid(format!(
                "XA={} needs 1 or 2 quads, and for 2 STAGES >= 3 (the shared-memory ring) and BM=8 (16 tokens' two \
                 register sets spill) (got STAGES={}, BM={})",
                c.xa, c.stages, c.bm
            ));
        }
        if !matches!(c.l2pf, 0 | 64 | 128 | 256) || (c.l2pf > 0 && c.stages < 3) {
            return invalid(format!(
                "L2PF={} needs 0, 64, 128 or 256 bytes, and STAGES >= 3 (the shared-memory ring) when set (got \
                 STAGES={})",
                c.l2pf, c.stages
            ));
        }
        if rows == 0
            || !rows.is_multiple_of(16)
            // (128 rows on the shared-memory ring: 8 blocks per quad, 167 registers at 28 x 4 under MINB=3 and no
            // spill; the register ring keeps 64.)
            || rows > if c.stages >= 3 { 128 } else { 64 }
            || !(1..=8).contains(&c.ring)
            // (The staged ring keeps its stages in shared memory: only the register ring is capped.)
            || (c.stages < 3 && rows / 16 * c.ring > 8)
        {
            return invalid(format!(
                "PATH=gemv needs BN{} a multiple of 16, at most 64 (128 with STAGES >= 3), and GR in 1..=8 with \
                 BN{}/16 x GR <= 8 ring register blocks (got BN={}, GR={}, STAGES={})",
                if glu { "/2" } else { "" },
                if glu { "/2" } else { "" },
                c.bn,
                c.ring,
                c.stages
            ));
        }
        if c.stages > 8 || (c.stages >= 3 && c.ring != c.stages) {
            return invalid(format!("PATH=gemv needs STAGES in 0..=8 (got {})", c.stages));
        }
        if c.wa == 0 || c.wa > 16 || c.split == 0 || c.cps > 16 || c.min_blocks > 16 {
            return invalid(format!(
                "PATH=gemv needs WA in 1..=16, SPLIT >= 1, CPS in 0..=16, MINB in 0..=16 (got WA={}, SPLIT={}, CPS={}, MINB={})",
                c.wa, c.split, c.cps, c.min_blocks
            ));
        }
        let smem = c.shared_bytes(spec.tiled);
        if smem > MAX_SHARED_BYTES {
            return invalid(format!("{smem} bytes of shared memory (max {MAX_SHARED_BYTES})"));
        }
        return Ok(());
    }
    if c.stream && (c.wgmma || glu || c.wb != 1 || !c.dec_bits) {
        return invalid(format!(
            "PATH=stream needs MMA=sync, WB=1, DEC=bits and no GLU epilogue (got MMA={}, WB={}, DEC={}, epilogue {})",
            if c.wgmma { "wgmma" } else { "sync" },
            c.wb,
            if c.dec_bits { "bits" } else { "expr" },
            spec.epilogue.name()
        ));
    }
    if c.min_blocks > 16 {
        return invalid(format!("MINB={} must be in 0..=16", c.min_blocks));
    }
    if c.prefetch && !c.stream {
        return invalid("PF=on needs PATH=stream".into());
    }
    if c.ring != 0 {
        return invalid(format!("GR={} needs PATH=gemv", c.ring));
    }
    if c.l2pf != 0 {
        return invalid(format!("L2PF={} needs PATH=gemv", c.l2pf));
    }
    if c.bulk {
        return invalid("COPY=bulk needs PATH=gemv".into());
    }
    if c.sk {
        return invalid("SK=1 needs PATH=gemv".into());
    }
    if c.ts > 0 {
        return invalid(format!("TS={} needs PATH=gemv", c.ts));
    }
    if c.xa != 1 {
        return invalid(format!("XA={} needs PATH=gemv", c.xa));
    }
    if c.fused && c.wgmma {
        return invalid("FIN=last needs MMA=sync (the wgmma kernel keeps the finalize launch)".into());
    }
    if c.dec_bits && c.wgmma && (c.wa == 0 || !c.bn.is_multiple_of(16 * c.wa)) {
        return invalid(format!("DEC=bits with MMA=wgmma needs BN={} a multiple of 16*WA={}", c.bn, 16 * c.wa));
    }
    if !c.bk.is_multiple_of(32) || c.bk == 0 || c.bk > 1024 {
        return invalid(format!("BK={} must be a positive multiple of 32 (at most 1024)", c.bk));
    }
    let row_unit = if c.wgmma { 16 } else { 16 * c.wa };
    if c.bn == 0 || !c.bn.is_multiple_of(row_unit) {
        return invalid(format!("BN={} must be a multiple of {row_unit} (16*WA for MMA=sync)", c.bn));
    }
    if glu && !(c.bn / 2).is_multiple_of(8) {
        return invalid(format!("BN={} must be a multiple of 16 with a GLU epilogue", c.bn));
    }
    if c.bm == 0 || !c.bm.is_multiple_of(16 * c.wb) {
        return invalid(format!("BM={} must be a multiple of 16*WB={}", c.bm, 16 * c.wb));
    }
    if c.stages < 2 || c.split == 0 || c.cps > 16 {
        return invalid("STAGES >= 2, SPLIT >= 1 and CPS in 0..=16 are required".into());
    }
    let warps = c.wa * c.wb;
    if warps == 0 || warps > 16 {
        return invalid(format!("{warps} warps: 1..=16"));
    }
    if c.wgmma
        && (c.bk != 64 || c.wb != 1 || c.bm != 16 * c.wa || !c.bm.is_multiple_of(64) || c.stages < 3 || c.bn > 256)
    {
        return invalid(format!(
            "MMA=wgmma needs BK=64, WB=1, BM=16*WA a multiple of 64, STAGES>=3 and BN<=256 (got BK={}, WB={}, WA={}, BM={}, STAGES={}, BN={})",
            c.bk, c.wb, c.wa, c.bm, c.stages, c.bn
        ));
    }
    let acc_regs = c.bn * c.bm / (32 * warps);
    if acc_regs > 128 {
        return invalid(format!("{acc_regs} accumulator registers per thread (max 128)"));
    }
    let a_cols = if c.stream { c.bk } else { 32 };
    let a_regs = if c.wgmma { c.bn * 64 / (32 * warps) / 2 } else { c.bn * a_cols / (32 * c.wa) / 2 };
    // Measured with ptxas: beyond ~96 the decode's addresses and the B fragments push past 255 registers.
    let reg_cap = if c.wgmma { 160 } else { 96 };
    if acc_regs + a_regs > reg_cap {
        return invalid(format!(
            "{} accumulator + weight-tile registers per thread (max {reg_cap})",
            acc_regs + a_regs
        ));
    }
    let smem = c.shared_bytes(spec.tiled);
    if smem > MAX_SHARED_BYTES {
        return invalid(format!("{smem} bytes of shared memory (max {MAX_SHARED_BYTES})"));
    }
    Ok(())
}
