//! Concrete knob values for one problem ([`Cfg`]) and what follows from them: shared-memory use, the gemv
//! scratch and the scale-row copy width.

use super::*;

/// Concrete knob values for one problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cfg {
    pub bn: u32,
    pub bm: u32,
    pub bk: u32,
    pub stages: u32,
    pub wa: u32,
    pub wb: u32,
    pub split: u32,
    pub cps: u32,
    pub raster_m: bool,
    /// Warpgroup MMA (`wgmma`) from a dequantized shared weight tile instead of `mma.sync` with the weights as
    /// register operands.
    pub wgmma: bool,
    /// Decode the weights with [`Stmt::DequantFp4`] instead of a per-element map (MMA=sync) or a threads region
    /// (MMA=wgmma).
    pub dec_bits: bool,
    /// Weights streamed from global memory into registers ([`Stmt::DequantFp4Stream`]) instead of staged in
    /// shared memory.
    pub stream: bool,
    /// PATH=gemv ([`Stmt::Fp4Gemv`]): `wa` warps split K inside the CTA, `bk` = 128 x the 16-byte blocks per
    /// lane of a chunk, `bm` 8 or 16 tokens, `prefetch` its register pipeline.
    pub gemv: bool,
    /// With `split > 1`: the last-arriving CTA of each tile sums the partials in the main kernel (one launch)
    /// instead of a second finalize kernel.
    pub fused: bool,
    /// PATH=stream: prefetch the next K slice's words into registers during this slice's product.
    pub prefetch: bool,
    /// `__launch_bounds__` minimum blocks per SM of the main kernel (0: none).
    pub min_blocks: u32,
    /// PATH=gemv: register ring slots per warp (quads in flight, [`Stmt::Fp4Gemv`]'s `ring`); 0 on other paths.
    pub ring: u32,
    /// PATH=gemv with the shared-memory ring (STAGES >= 3): the L2 prefetch size of its copies in bytes
    /// ([`Stmt::Fp4Gemv`]'s `l2_prefetch`: 0, 64, 128 or 256); 0 elsewhere (validated).
    pub l2pf: u32,
    /// PATH=gemv with tile-major weights: the ring's stages are filled by whole-block bulk copies
    /// ([`Stmt::Fp4Gemv`]'s `bulk`, knob `COPY=bulk`) instead of per-lane copies.
    pub bulk: bool,
    /// PATH=gemv with the shared-memory ring: quads ahead that the activations are loaded (1, or 2 for
    /// [`Stmt::Fp4Gemv`]'s `x_two_ahead`; knob `XA`); 1 elsewhere (validated).
    pub xa: u32,
    /// PATH=gemv with a persistent grid: stream-K (knob `SK=1`): every CTA takes an equal run of the tiles' K
    /// units; a tile split between two CTAs gets two partials (`part: [2, M, N]`) summed by the last to arrive.
    pub sk: bool,
    /// PATH=gemv's hardware-scheduled grouped grid: the last `ts` groups' tiles split in two along K (knob `TS`),
    /// their halves' partials (`part: [2, M, N]`) summed by the second to arrive; 0 none.
    pub ts: u32,
    /// MXFP8 activations converted on chip per stage into the bf16 x tile (knob `XDQ=tile`) instead of dequantized
    /// by a first launch ([`act_dequant_first`]); false with bf16 activations and on PATH=gemv.
    pub act_tile: bool,
    /// `MMA=f8sync` ([`super::f8sync`]): MXFP8 activations on E4M3 `mma.sync` (m16n8k32), never dequantized: each CTA
    /// stages its tokens' E4M3 codes and scales for its K range once, the weights stream through the ring and are
    /// converted exactly to E4M3 (times 2^-6), both scales applied per 32-wide block to the f32 accumulator.
    pub f8: bool,
    /// `MMA=f8sync`: the K range staged per CTA, `ceil(K / (SPLIT x BK)) x BK` (a multiple of BK; derived from the
    /// problem's K and SPLIT, not a knob); 0 on the other paths.
    pub xk: u32,
    /// Programmatic dependent launches between the plan's kernels (knob `PDL=true`, [`super::host::grid_deps`]).
    pub pdl: bool,
}

impl Cfg {
    /// As knobs (what kernels record and results report).
    pub fn knobs(&self) -> Knobs {
        let k = Knobs::new()
            .with("BN", self.bn)
            .with("BM", self.bm)
            .with("BK", self.bk)
            .with("STAGES", self.stages)
            .with("WA", self.wa)
            .with("WB", self.wb)
            .with("SPLIT", self.split)
            .with("CPS", self.cps)
            .with("RASTER", if self.raster_m { "m" } else { "n" })
            .with(
                "MMA",
                if self.f8 {
                    "f8sync"
                } else if self.wgmma {
                    "wgmma"
                } else {
                    "sync"
                },
            )
            .with("DEC", if self.dec_bits { "bits" } else { "expr" })
            .with(
                "PATH",
                if self.gemv {
                    "gemv"
                } else if self.stream {
                    "stream"
                } else {
                    "tile"
                },
            )
            .with("FIN", if self.fused { "last" } else { "kernel" })
            .with("PF", if self.prefetch { "on" } else { "off" })
            // 1 (no cap) for none: re-resolving the recorded knobs gives the same kernel.
            .with("MINB", self.min_blocks.max(1))
            .with("GR", self.ring);
        // Recorded where it is set or where `auto` would set it (the per-lane staged ring, whose explicit 0 must
        // re-resolve to 0), so the kernels (names and IR) of every other point stay as they were.
        let k = if self.l2pf > 0 || self.l2pf_auto() > 0 { k.with("L2PF", self.l2pf) } else { k };
        // XA likewise: recorded where it is not 1 or where auto would make it 2.
        let k = if self.xa != 1 || self.xa_auto() != 1 { k.with("XA", self.xa) } else { k };
        let k = if self.sk { k.with("SK", 1i64) } else { k };
        let k = if self.ts > 0 { k.with("TS", self.ts) } else { k };
        // XDQ: recorded where the activations are converted on chip (absent means the first launch).
        let k = if self.act_tile { k.with("XDQ", "tile") } else { k };
        // PDL: recorded where set (absent means none).
        let k = if self.pdl { k.with("PDL", true) } else { k };
        if self.bulk { k.with("COPY", "bulk") } else { k }
    }
    /// Partial outputs (`part: [S, M, N]`) instead of the finished `y`: a K split, or the split tiles of stream-K or
    /// of the tail split.
    pub fn partial(&self) -> bool {
        self.split > 1 || self.sk || self.ts > 0
    }
    /// A second kernel (the finalize) sums the partials: a K split not summed in the main kernel (`FIN=kernel`;
    /// stream-K and TS always sum theirs there, validated).
    pub fn finalize_launch(&self) -> bool {
        self.partial() && !self.fused
    }
    /// The partial slots per tile, `S` (the splits, or the two contributors of a stream-K or tail-split tile).
    pub fn part_slots(&self) -> u32 {
        if self.sk || self.ts > 0 { 2 } else { self.split }
    }
    /// `L2PF=auto`: 128 bytes on PATH=gemv's shared-memory ring with per-lane copies, else none. Measured on the
    /// H200 (2026-12-05, three runs, each against the former default in the same run): 28 x 4 decode 0.1083
    /// and 0.1087 ms against 0.1161 (256: 0.1085), MXFP8 activations 0.1109 against 0.1188, SiTU-GLU + p 0.1411
    /// against 0.1450, tile-major weights 0.1070 against 0.1077, M16 0.0157 against 0.0158 (an H100 the same day: 28 x 4
    /// 0.1345 against 0.1437). One or three more 64-byte pieces of the same rows come into L2 with each copy, which
    /// the warp's next quads then find there; a deeper ring instead was slower in every run (STAGES=4: 0.1218).
    pub fn l2pf_auto(&self) -> u32 {
        if self.gemv && self.stages >= 3 && !self.bulk { 128 } else { 0 }
    }
    /// `XA=auto`: 2 (each quad's activations loaded two quads ahead of their product) on PATH=gemv's shared-memory
    /// ring with 8-token tiles, else 1. Measured on an H100 (2026-12-05; not yet timed on an H200): two
    /// bench runs, 28 x 4 tile-major 0.1282 / 0.1282 ms against 0.1311 / 0.1311, packed 0.1286 against 0.1351;
    /// another run, SiTU-GLU + p 0.1449 against 0.1581, MXFP8 activations 0.1331 against 0.1377. (That day's ncu of the
    /// tile-major kernel: 43% of the warps' cycles stalled on loads, the activations, which the ring's stages do
    /// not cover, coming from L2 one quad ahead.) No spills at the presets' register caps (127 registers at
    /// MINB=4); with 16-token tiles the two register sets spill, so it stays 1 there.
    pub fn xa_auto(&self) -> u32 {
        if self.gemv && self.stages >= 3 && self.bm == 8 { 2 } else { 1 }
    }
    /// PATH=gemv's shared-memory ring (STAGES >= 3) as [`Stmt::Fp4Gemv`] takes it, for weights stored tile-major
    /// (`tiled`) or not.
    pub fn staging(&self, tiled: bool) -> Fp4Staging {
        Fp4Staging { stages: self.stages, l2_prefetch: self.l2pf, tiled, bulk: self.bulk, x_two_ahead: self.xa == 2 }
    }
    /// Shared memory of the main kernel, bytes (what `Kernel::shared_bytes` will report, up to alignment), for
    /// weights stored tile-major (`tiled`) or not.
    pub fn shared_bytes(&self, tiled: bool) -> usize {
        let al = |b: usize| b.next_multiple_of(128);
        let st = self.stages as usize;
        let (bn, bm, bk) = (self.bn as usize, self.bm as usize, self.bk as usize);
        let al1k = |b: usize| b.next_multiple_of(1024);
        if self.gemv {
            // The reduced [BN, 16 + 1] tile and the warps' partials or rings (`gemv_scratch`).
            let (rows, count) = gemv_scratch(self, tiled);
            return al(bn * (bm.max(16) + 1) * 4)
                + al((rows * count) as usize * bm * 4)
                + if self.fused && self.partial() { al(4) } else { 0 };
        }
        let common = if self.stream { 0 } else { al(bn * bk / 2 * st) + al(bn * bk / 32 * st) }
            + if self.fused && self.split > 1 { al(4) } else { 0 };
        if self.f8 {
            // The staged activation codes, scales and factors of the K range, the E4M3 weight tile and its
            // factors, and the accumulator's transpose.
            let xk = self.xk as usize;
            return common
                + al(bm * xk)
                + al(bm * xk / 32)
                + al(bm * xk / 32 * 4)
                + al(bn * bk)
                + al(bn * bk / 32 * 4)
                + al(bn * (bm + 1) * 4);
        }
        if self.wgmma {
            common + al1k(bm * bk * 2 * st) + al1k(bn * bk * 2 * 2) + 1024
        } else {
            common + al(bm * bk * 2 * st) + al(bn * (bm + 1) * 4)
        }
    }
}

/// PATH=gemv's `spart` scratch ([`Stmt::Fp4Gemv`]), as `(rows, count)` of `[rows, BM]` f32 tiles: the register
/// ring's WA `[BN, BM]` partial tiles, or, with `STAGES` >= 3 (`staged`), the warps' cp.async rings
/// ([`Fp4Staging::scratch_bytes`]: 16 + WA x STAGES x rows/16 x 1088 bytes with tile-major weights, 1280 otherwise;
/// the partials alias them) in 16-row tiles, so that no more than 16 x BM x 4 bytes are wasted (four 28 x 4 decode
/// CTAs of 64 rows fit an SM's 228 KB with 1 KB to spare). One statement at a time, so a GLU tile's two
/// statements share it.
pub(in crate::mx) fn gemv_scratch(c: &Cfg, tiled: bool) -> (u32, u32) {
    if c.stages < 3 {
        return (c.bn, c.wa);
    }
    // GLU halves need half of BN's rows: the bound is safe either way.
    let need = c.staging(tiled).scratch_bytes(c.wa, c.bn);
    (16, need.div_ceil(16 * c.bm as u64 * 4) as u32)
}

/// Scale-row cp.async width: the widest access K/32 and BK/32 allow.
pub(super) fn scale_vec(spec: &MatSpec, c: &Cfg) -> u32 {
    let per_stage = c.bk / 32;
    [16u32, 8, 4, 2, 1]
        .into_iter()
        .find(|v| spec.kb_align.is_multiple_of(*v) && per_stage.is_multiple_of(*v))
        .unwrap_or(1)
}
