//! `MMA=f8sync`: MXFP4 weights x MXFP8 activations on E4M3 `mma.sync` (m16n8k32, sm_89+), for the batches
//! between decode and prefill (17..256 tokens), never dequantizing the activations (the kernel:
//! `kernels/tile_f8.rs`).
//!
//! Per CTA: BN weight rows (the mma's A operand, rows = N) x BM tokens (B, padded to 16) x one K range of `XK` =
//! `ceil(K / (SPLIT x BK)) x BK` columns. The CTA's activation codes and scales for its K range are staged once in
//! shared memory (cp.async, the E4M3 words as they lie in memory, the scales turned into f32 factors once); the
//! weights stream through the `STAGES`-deep ring of the tile path and are converted exactly to E4M3 (value x 2^-6)
//! into a shared words tile with their scale factors; per 32-wide block one E4M3 product into a zeroed temporary,
//! then `acc += tmp x (fw[n, j] x fa[m, j])` (powers of two: exact wherever the product is a normal or subnormal
//! f32; NaN scale 255 -> NaN), the conversion's 2^6 folded into the activation factors. K splits are summed by
//! FIN=last (or the finalize launch).
//!
//! Dense or grouped (the tile path's group walk: ragged experts, empty groups), with the tile path's epilogues
//! (GLU: the tile's weight rows are BN/2 gate rows from n0 and BN/2 up rows from N/2 + n0, combined in the
//! mma.sync epilogue; the routing weight `p`), in the split-K finalize too.
//!
//! Not the automatic choice (yet): selected by `MMA=f8sync` only. Refused by name: bf16 activations, tile-major
//! weights, PATH other than auto/tile, CPS, the knobs of other paths.

use super::*;

/// The most activation bytes (codes) one CTA stages when SPLIT is automatic: the split grows until
/// `BM x XK` fits (64 KB: with the ring, three CTAs of 64 tokens fit an SM at SPLIT 4..7).
const X_STAGE_BYTES: usize = 64 * 1024;

/// Resolve `MMA=f8sync` knobs (0 = auto): BM the tokens rounded up to 16 (at most 128, more tokens take several
/// token tiles), BN 64, BK 128, STAGES 4, WA 4, WB 1 (2 at BM 128), SPLIT enough CTAs for about two per SM with
/// the staged activations at most [`X_STAGE_BYTES`], FIN last (auto; an absent FIN: the finalize launch). `k` is
/// record `knobs` read (the record is named in errors).
pub fn resolve(spec: &MatSpec, k: &MatKnobs, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
    let invalid = |why: String| OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why };
    if !spec.act8 {
        return Err(invalid("MMA=f8sync needs MXFP8 activations (Act::Mxfp8); bf16 activations have MMA=sync".into()));
    }
    if spec.tiled {
        return Err(invalid(format!(
            "MMA=f8sync takes row-major weights (natural or packed) only (got {} tile-major weights)",
            if spec.grouped { "grouped" } else { "dense" }
        )));
    }
    // The knobs of the other paths must be absent or at their automatic (no-op) values.
    if !matches!(k.path, None | Some(Path::Auto | Path::Tile)) {
        return Err(invalid(format!("MMA=f8sync runs on PATH=tile (got PATH={})", k.shown("PATH"))));
    }
    let foreign: Vec<String> = [
        ("CPS", k.cps.is_some_and(|c| c != 0)),
        ("DEC", k.dec == Some(Dec::Bits)),
        ("PF", k.pf == Pf::On),
        ("GR", k.gr != 0),
        ("L2PF", k.l2pf.number().is_some_and(|b| b != 0)),
        ("COPY", k.copy == CopyBy::Bulk),
        ("XA", k.xa > 1),
        ("SK", k.sk != 0),
        ("TS", k.ts != 0),
        ("XDQ", k.xdq != Xdq::Auto),
        ("F8V", k.f8v != 0),
    ]
    .into_iter()
    .filter(|&(_, bad)| bad)
    .map(|(name, _)| format!("{name}={}", k.shown(name)))
    .collect();
    if !foreign.is_empty() {
        return Err(invalid(format!("MMA=f8sync does not take {}", foreign.join(", "))));
    }
    let bm = pick(k.bm, "BM", (sh.max_rows.max(1).next_multiple_of(16)).min(128) as u32)?;
    let bn = pick(k.bn, "BN", 64)?;
    let bk = pick(k.bk, "BK", 128)?;
    let stages = pick(k.stages, "STAGES", 4)?;
    let wa = pick(k.wa, "WA", 4)?;
    let wb = pick(k.wb, "WB", if bm >= 128 { 2 } else { 1 })?;
    let k_tiles = sh.k.div_ceil(bk.max(1) as usize).max(1);
    let tiles = sh.max_rows.div_ceil(bm.max(1) as usize).max(1) * sh.n_out.div_ceil(bn.max(1) as usize);
    // About two CTAs per SM, and the staged activations within X_STAGE_BYTES.
    let fill = (2 * ASSUMED_SMS).div_ceil(tiles);
    let fit = (bm as usize * sh.k).div_ceil(X_STAGE_BYTES);
    let split_auto = fill.max(fit).clamp(1, k_tiles);
    // No empty splits: as many as the K tiles per split need.
    let split_auto = k_tiles.div_ceil(k_tiles.div_ceil(split_auto));
    let split = pick(k.split, "SPLIT", split_auto as u32)?;
    let minb = k.minb;
    let c = Cfg {
        bn,
        bm,
        bk,
        stages,
        wa,
        wb,
        split,
        cps: 0,
        raster_m: k.raster_m()?,
        wgmma: false,
        dec_bits: false,
        stream: false,
        gemv: false,
        fused: k.fin_last(true) && split > 1,
        prefetch: false,
        min_blocks: if minb <= 1 { 0 } else { minb },
        ring: 0,
        l2pf: 0,
        bulk: false,
        xa: 1,
        sk: false,
        ts: 0,
        act_tile: false,
        f8: true,
        xk: (sh.k.div_ceil(split.max(1) as usize * bk.max(1) as usize) * bk.max(1) as usize) as u32,
        pdl: k.pdl,
    };
    check(spec, &c, knobs, sh)?;
    Ok(c)
}

/// The combinations the kernel builds: BK 64, 128 or 256; BN a multiple of 16 WA, BM of 16 WB (each warp's
/// columns a multiple of 16); at most 16 warps, 128 accumulator registers per thread (the accumulator and its
/// temporary: 2 x BN x BM / threads), the shared memory of an SM, SPLIT x XK covering K.
fn check(spec: &MatSpec, c: &Cfg, knobs: &Knobs, sh: &ShapeFacts) -> Result<(), OpError> {
    let invalid = |why: String| Err(OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why });
    if !matches!(c.bk, 64 | 128 | 256) {
        return invalid(format!("MMA=f8sync needs BK 64, 128 or 256 (got {})", c.bk));
    }
    let warps = c.wa * c.wb;
    if warps == 0 || warps > 16 || c.bn == 0 || !c.bn.is_multiple_of(16 * c.wa) {
        return invalid(format!(
            "MMA=f8sync needs 1..=16 warps and BN a multiple of 16*WA (got BN={}, WA={}, WB={})",
            c.bn, c.wa, c.wb
        ));
    }
    if c.bm == 0 || !c.bm.is_multiple_of(16 * c.wb) {
        return invalid(format!("MMA=f8sync needs BM a multiple of 16*WB={} (got BM={})", 16 * c.wb, c.bm));
    }
    if c.stages < 2 || c.stages > 8 || c.split == 0 || c.min_blocks > 16 {
        return invalid(format!(
            "MMA=f8sync needs STAGES in 2..=8, SPLIT >= 1 and MINB in 0..=16 (got STAGES={}, SPLIT={}, MINB={})",
            c.stages, c.split, c.min_blocks
        ));
    }
    let regs = 2 * c.bn * c.bm / (32 * warps);
    if regs > 128 {
        return invalid(format!(
            "MMA=f8sync: {regs} accumulator registers per thread (the accumulator and its temporary; max 128)"
        ));
    }
    if (c.split as usize) * (c.xk as usize) < sh.k {
        return invalid(format!("MMA=f8sync: SPLIT={} x XK={} does not cover K={}", c.split, c.xk, sh.k));
    }
    let smem = c.shared_bytes(spec.tiled);
    if smem > MAX_SHARED_BYTES {
        return invalid(format!(
            "MMA=f8sync: {smem} bytes of shared memory (max {MAX_SHARED_BYTES}): the staged activations are BM x \
             K/SPLIT = {} x {} bytes; raise SPLIT or lower BM",
            c.bm, c.xk
        ));
    }
    Ok(())
}
