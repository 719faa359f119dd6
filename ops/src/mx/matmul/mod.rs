//! `mxfp4_matmul` (SEMANTICS.md section 2.2): `y[M, N] = x[M, K] · dequant(w)[N, K]^T` with MXFP4 weights, bf16 activations,
//! f32 accumulation and bf16 output; dense, or grouped over ragged experts (`w: [G, N, K]`, rows of x permuted
//! by expert, `offs` as in SEMANTICS.md section 2.1), with the epilogues of `latent_moe_gemm` (SiTU-GLU / SwiGLU over the two
//! halves of N, routing weight per row).
//!
//! Hopper has no fp4 tensor cores, so the kernel computes the transposed product `y^T = W · x^T` on bf16
//! tensor cores with the weights as the *register* A operand:
//! - a persistent CTA walks (group, m-tile, n-tile, k-split) tiles; per tile a `STAGES`-deep `cp.async`
//!   pipeline streams 16-byte chunks of packed nibbles (`[BN, BK/2]` bytes), their E8M0 scales (`[BN, BK/32]`)
//!   and the x tile (`[BM, BK]` bf16) into shared memory;
//! - for each 32-wide K block, a map decodes the nibbles straight into a bf16 register tile in the mma
//!   A-fragment layout (bit tricks and products with powers of two, exact: E2M1 bits -> f32 bits, times 2^126,
//!   times the scale; one multiply when every scale byte is <= 128), and `mma.sync` multiplies it with x^T
//!   read by `ldmatrix` from shared memory. No dequantized weight ever touches shared or global memory.
//! - the f32 accumulator `[BN, BM]` (weight rows x tokens) is transposed through shared memory into a
//!   `[BM, BN]` tile for the epilogue (GLU, routing weight) and the bf16 store; with `SPLIT > 1` each k-split
//!   writes an f32 partial `[SPLIT, M, N]` instead, and the partials are summed in split order (deterministic)
//!   before the epilogue: by the CTA that arrives last at its tile's counter (`FIN=last`, one launch: partial
//!   stores, a barrier, a fence and an atomic increment with fetch by one thread; the last CTA fences, sums and
//!   resets the counter) or by a second kernel (`FIN=kernel`, and always for wgmma). Decode shapes (few
//!   tokens, N = 6144) need the split to put enough weight streams in flight on every SM.
//! - `PATH=stream` (decode): the weights go global -> registers ([`Stmt::DequantFp4Stream`]), one mma per BK
//!   slice; with `PF=on` the statement is software-pipelined (the next slice's loads are issued right after
//!   this slice's decode and stay in flight during its product and the next iteration's wait).
//! - `PATH=dq_gemm` (prefill, [`super::prefill`]): the weights dequantized once into a bf16 scratch, then the
//!   `latent_moe_gemm` kernel.
//!
//! The weight bytes come in the natural layout or the [`super::pack`] layout (one 32-bit word per eight values
//! a thread needs).
//!
//! Files: this module holds the problem spec, the knob space and how knobs resolve per shape ([`resolve`]);
//! `kernels.rs` builds the kernels, `host.rs` is the host API with typed errors and the launch plan, `ops.rs` the
//! operator.

use super::*;
use crate::check::{compare, error_pattern};
use crate::data;
use crate::latent_moe_gemm::{Epilogue, ragged_counts};
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::*;
use k3k_reference::gemm as refgemm;
use k3k_reference::metrics::Tolerance;
use k3k_reference::mx as rmx;
use rand::Rng;
use rand::rngs::StdRng;
use rayon::prelude::*;

mod host;
mod kernels;
mod ops;

pub use host::*;
pub use kernels::*;
pub use ops::*;

const OP: &str = "mxfp4_matmul";

/// SMs assumed when resolving automatic knobs (an H200 has 132).
pub const ASSUMED_SMS: usize = 132;

/// What a kernel variant computes (fixed by the problem and the data, not tuned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatSpec {
    pub grouped: bool,
    pub epilogue: Epilogue,
    /// Multiply each output row by a routing weight `p[r]`.
    pub row_scale: bool,
    /// Weight bytes in the [`super::pack`] layout (u32 words) instead of the natural one.
    pub packed: bool,
    /// Packed words and scales stored tile-major (`WeightBytes::PackedTiles`): PATH=gemv's shared-memory ring only.
    pub tiled: bool,
    /// Every scale byte is <= 128 or 255: one multiply per decoded element (see [`scales_foldable`]).
    pub fold: bool,
    /// No scale byte is 255 (NaN): the NaN select is left out of the decode.
    pub finite: bool,
    /// Activations in MXFP8 (E4M3 bytes + E8M0 scales along K), dequantized on chip into the bf16 x tile.
    pub act8: bool,
    /// Largest power of two <= 16 dividing K/32 (the alignment class of scale rows).
    pub kb_align: u32,
    /// Elements per store of the output (2 when its width is even).
    pub out_vec: u32,
}

impl MatSpec {
    /// The alignment class, part of names and tuning keys.
    pub fn alignment(&self) -> String {
        format!("s{}_o{}", self.kb_align, self.out_vec)
    }
}

/// True when every scale byte is at most 128 or is 255 (NaN), so that `2^126 · 2^(s-127)` is one f32.
pub fn scales_foldable(s: &[u8]) -> bool {
    s.par_iter().all(|&b| b <= 128 || b == 255)
}

/// The tuning knobs (0 = chosen from the problem shape, see [`resolve`]).
pub fn knob_space() -> KnobSpace {
    // The tuner enumerates the product: the axes offer the values worth timing (any other value of the same
    // knobs is accepted too, e.g. BM=16 or RASTER=n; 0 means "chosen from the shape", see `resolve`).
    KnobSpace::default()
        .axis("BN", "weight rows per tile (gate+up together for GLU); 0 = auto", [0i64, 32, 64, 128, 256])
        .axis("BM", "tokens per tile (mma N; 16, 32, 64 or 128); 0 = auto", [0i64, 64, 128])
        .axis(
            "BK",
            "K per pipeline stage (multiple of 32; 64 for wgmma; PATH=gemv: 128 x the 128-column quads per warp batch, \
             128..1024); 0 = auto",
            [0i64, 64, 128, 256, 512],
        )
        .axis(
            "STAGES",
            "cp.async pipeline depth; PATH=gemv: 0..=2 the register ring of GR slots, 3..=8 the warps' rings in shared \
             memory of that many cp.async stages (every stage in flight: a register ring's loads share the six \
             hardware scoreboards, so ptxas waits for all of them at each slot); 0 = auto (gemv: 3 stages for \
             grouped decode with many 8-token tiles and for dense 16-token problems without a GLU epilogue, else the \
             register ring)",
            [0i64, 3, 4],
        )
        .axis("WA", "warps along weight rows (wgmma: BM/16); 0 = auto", [0i64, 4, 8])
        .axis("WB", "warps along tokens (each recomputes its rows' dequantized weights); 0 = auto", [0i64, 2])
        .axis("SPLIT", "K splits (partials summed in order by a second kernel); 0 = auto", [0i64, 1, 2, 4, 8, 16])
        .axis(
            "CPS",
            "0: one CTA per tile (hardware-scheduled); n: a persistent grid of n CTAs per SM (PATH=gemv: the tiles \
             balanced over the fewest CTAs that keep the busiest one's count, the others exit at once; at 28 x 4 on an \
             H100 1.17x slower than the hardware grid, its CTAs turning over in lockstep: 2026-12-05)",
            [0i64, 4],
        )
        .axis(
            "SK",
            "PATH=gemv with CPS > 0: 1 = stream-K, the K ranges of all tiles (in BK units) split evenly over the \
             persistent CTAs, each a contiguous run that may start and end inside a tile (such a tile's two \
             partials summed by the last to arrive, as FIN=last), so the CTAs carry equal bytes and turn over at \
             different times (at 28 x 4 on an H100 1.09x slower than the hardware grid: a prologue, and CTAs whose \
             rates differ end apart; 2026-12-05); 0 = whole tiles",
            [0i64, 1],
        )
        .axis(
            "TS",
            "PATH=gemv, grouped, hardware-scheduled grid (CPS=0): the last TS groups' tiles (the last CTAs launched) \
             split in two along K, two half-tile CTAs per tile summed by the second to arrive (as FIN=last), so the \
             grid's last CTAs drain half a tile each (at 28 x 4 on an H100 within 1% of TS=0 for TS 2-11, slower \
             packed: the SMs still work through their on-chip data after DRAM stops; 2026-12-05); 0 = none",
            [0i64, 6],
        )
        .axis("RASTER", "tile order inside a group: m (neighbouring CTAs share weights) or n", ["m"])
        .axis(
            "MMA",
            "sync: mma.sync with the dequantized weights as register A operand; wgmma: weights dequantized into a \
             shared bf16 tile, warpgroup MMA (BK=64, WA=BM/16, BM a multiple of 64); auto: wgmma for BM >= 128",
            ["auto", "sync", "wgmma"],
        )
        .axis(
            "DEC",
            "weight decode: bits (`Stmt::DequantFp4`: one prmt + 3 bit ops + one bf16x2 multiply per two values; \
             natural layout: + one 16-byte load and 3 prmt per row and block; MMA=wgmma: into registers, then one \
             4-byte shared store per pair, BN a multiple of 16*WA), expr (the per-element IR expression); auto: bits \
             where the tile allows (so the tuner times auto and expr only; bits is accepted too)",
            ["auto", "expr"],
        )
        .axis(
            "PATH",
            "weight path: tile (cp.async stages of packed words in shared memory, decoded from there), stream \
             (`Stmt::DequantFp4Stream`: words and scales loaded from global memory straight into registers, \
             a whole BK slice's loads in flight per thread; MMA=sync, no GLU epilogue; for few tokens); gemv (decode, \
             `Stmt::Fp4Gemv`: one CTA per BN weight rows, group and 8 or 16 tokens over the whole K range, split over WA \
             warps in batches of BK columns, whole 16-byte weight blocks per lane streamed through a register ring of \
             GR 128-column quads, the warps' partials summed in shared memory, one launch; MXFP8 activations are \
             dequantized to bf16 by a first launch); dq_gemm (prefill, \
             `mx::prefill`): a bandwidth-bound kernel dequantizes all weights once into a bf16 scratch of \
             2*G*N*K bytes (44 MB at N6144 K3584; + 2*M*K with MXFP8 activations, dequantized the same way), then \
             the latent_moe_gemm kernel runs on it (BM/BN/BK/STAGES/RASTER/MMA are its knobs, WA/WB its WM/WN; \
             0 = its defaults); auto: dense with at most 16 tokens: gemv (else stream for bf16 activations and \
             BM <= 16, packed, no GLU, when explicit knobs rule gemv out); grouped decode with at most 8 tokens per \
             expert: gemv (a prediction for the register-ring kernel: the gemv of 2026-12-01 lost to tile at 28 x 4); dq_gemm with every other knob automatic and at least 2 128-row token \
             tiles per expert with tokens (dense: M > 128); else tile. dq_gemm is accepted but not an axis value (the tuner reaches it through \
             auto)",
            ["auto", "tile", "stream", "gemv"],
        )
        .axis(
            "FIN",
            "split-K reduction (SPLIT > 1): kernel (a second launch sums the partials), last (one launch: each \
             CTA stores its partial, bumps its tile's arrival counter, and the CTA that arrives last sums the \
             tile's partials in split order, deterministic, and applies the epilogue; MMA=sync); auto: last for \
             MMA=sync",
            ["auto", "kernel"],
        )
        .axis(
            "PF",
            "PATH=stream software pipeline: on (each K slice's decode reads the words the previous slice's statement \
             prefetched into registers, then issues the next slice's loads, in flight during the product and the \
             next wait), off (a slice's loads, then its decode); PATH=gemv: on doubles the automatic register ring \
             (GR=0); auto: off on both paths (measured as fast or faster on the H200)",
            ["off", "on"],
        )
        .axis(
            "MINB",
            "blocks per SM ptxas compiles the main kernel for (`__launch_bounds__`: caps its registers; 1 = no cap); \
             0 = auto: 3 with PF=on for BM=16 on 128 threads (uncapped, ptxas takes 255 registers and 2 CTAs fit; 168 does not \
             spill at the presets); PATH=gemv: 5 for grouped decode with many tiles, 4 for the dense staged ring, 3 for \
             a 16-row register ring that fits, else none (the axis reaches 6: 32-row gemv tiles at MINB=6 were the \
             H100's fastest tile-major 28 x 4 shape on 2026-12-05)",
            [0i64, 4, 6],
        )
        .axis(
            "GR",
            "PATH=gemv register ring: slots per warp, one 128-column quad of the tile's rows each (16 bytes per lane and \
             row), loaded GR quads ahead of their use (1..=8, with BN/16 x GR <= 8); 0 = auto: 4 slots of 16 rows \
             (8 with PF=on), fewer for wider tiles; 0 on the other paths",
            [0i64, 2, 8],
        )
        .axis(
            "L2PF",
            "PATH=gemv with the shared-memory ring (STAGES >= 3): the L2 prefetch size of its cp.async copies in bytes \
             (`.L2::128B` / `.L2::256B`: L2 fetches the aligned bytes around each 16-byte piece of a weight row, which \
             the warp's and its CTA's next quads of the same rows copy soon after); 0 none (64 accepted too); auto: \
             128 on that ring with per-lane copies, else none",
            [KnobValue::from("auto"), 0i64.into(), 256i64.into()],
        )
        .axis(
            "COPY",
            "PATH=gemv with tile-major weights: how a warp's shared-memory ring is filled: lanes (every lane copies \
             its own 16-byte blocks and scale words by cp.async), bulk (one lane copies each 16-row block of a quad \
             whole, 1 KB of words and 64 B of scales, by cp.async.bulk completing on a barrier in the stage; no \
             L2PF); auto: lanes; other weight layouts take lanes only",
            ["auto", "bulk"],
        )
        .axis(
            "XA",
            "PATH=gemv with the shared-memory ring (STAGES >= 3): how many quads ahead of its product a warp loads a \
             quad's activations into registers (1 or 2; 2, with 8-token tiles only, keeps a second register set live \
             across each product, hiding the activations' L2 latency); 0 = auto: 2 on that ring with 8-token tiles, \
             else 1",
            [0i64, 1],
        )
}

/// Defaults: everything chosen from the problem shape.
pub fn default_knobs() -> Knobs {
    Knobs::new()
        .with("BN", 0i64)
        .with("BM", 0i64)
        .with("BK", 0i64)
        .with("STAGES", 0i64)
        .with("WA", 0i64)
        .with("WB", 0i64)
        .with("SPLIT", 0i64)
        .with("CPS", 0i64)
        .with("RASTER", "m")
        .with("MMA", "auto")
        .with("DEC", "auto")
        .with("PATH", "auto")
        .with("FIN", "auto")
        .with("PF", "auto")
        .with("MINB", 0i64)
        .with("GR", 0i64)
        .with("L2PF", "auto")
        .with("COPY", "auto")
        .with("XA", 0i64)
        .with("SK", 0i64)
        .with("TS", 0i64)
        .with(super::prefill::DQ_KNOB, super::prefill::DQ_AUTO)
}

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
            .with("MMA", if self.wgmma { "wgmma" } else { "sync" })
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
        if self.bulk { k.with("COPY", "bulk") } else { k }
    }
    /// Partial outputs (`part: [S, M, N]`) instead of the finished `y`: a K split, or the split tiles of stream-K or
    /// of the tail split.
    pub fn partial(&self) -> bool {
        self.split > 1 || self.sk || self.ts > 0
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
pub(super) fn gemv_scratch(c: &Cfg, tiled: bool) -> (u32, u32) {
    if c.stages < 3 {
        return (c.bn, c.wa);
    }
    // GLU halves need half of BN's rows: the bound is safe either way.
    let need = c.staging(tiled).scratch_bytes(c.wa, c.bn);
    (16, need.div_ceil(16 * c.bm as u64 * 4) as u32)
}

/// `L2PF`: `None` for `auto` (or absent), else the explicit size in bytes (validated later: 0, 64, 128, 256).
pub(super) fn l2pf_knob(knobs: &Knobs) -> Result<Option<u32>, OpError> {
    match knobs.0.get("L2PF") {
        None => Ok(None),
        Some(KnobValue::Str(s)) if s == "auto" => Ok(None),
        Some(KnobValue::Int(_)) => Ok(Some(knobs.u32("L2PF")?)),
        Some(other) => Err(OpError::InvalidKnobs {
            op: OP,
            knobs: knobs.to_string(),
            why: format!("L2PF={other}: auto, 0, 64, 128 or 256"),
        }),
    }
}

/// `COPY`: whether PATH=gemv's ring is filled by whole-block bulk copies (`bulk`) rather than per-lane copies
/// (`lanes`; `auto` and an absent knob, from before it existed, mean lanes).
fn copy_bulk(knobs: &Knobs) -> Result<bool, OpError> {
    two_way(knobs, "COPY", false, &[("auto", false), ("lanes", false), ("bulk", true)])
}

/// A string knob that picks one of two ways: `absent` when the knob is not given (knob sets from before it
/// existed), else the way `choices` gives its value; any other value is refused, naming the choices in order.
fn two_way(knobs: &Knobs, name: &str, absent: bool, choices: &[(&str, bool)]) -> Result<bool, OpError> {
    if !knobs.0.contains_key(name) {
        return Ok(absent);
    }
    let v = knobs.str(name)?;
    choices.iter().find(|(c, _)| *c == v).map(|&(_, way)| way).ok_or_else(|| {
        let names: Vec<&str> = choices.iter().map(|&(c, _)| c).collect();
        let (last, rest) = names.split_last().expect("two_way: at least one choice");
        let why = format!("{name}={v}: {} or {last}", rest.join(", "));
        OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why }
    })
}

/// The shape facts automatic knobs depend on.
#[derive(Clone, Debug)]
pub struct ShapeFacts {
    /// Rows of the largest group (dense: M).
    pub max_rows: usize,
    /// Rows per group.
    pub counts: Vec<usize>,
    pub n_out: usize,
    pub k: usize,
    pub glu: bool,
}

/// `FIN`: whether the split-K partials are summed by the last-arriving CTA (`last`) rather than by a second
/// launch (`kernel`); `auto` means `auto_last`, and an absent knob (knob sets from before it existed) `kernel`.
fn fin_last(knobs: &Knobs, auto_last: bool) -> Result<bool, OpError> {
    two_way(knobs, "FIN", false, &[("auto", auto_last), ("kernel", false), ("last", true)])
}

/// `SK` (stream-K on PATH=gemv's persistent grid): 1 on, 0 or absent off; any other value is refused.
fn sk_knob(knobs: &Knobs) -> Result<bool, OpError> {
    match super::prefill::int_or0(knobs, "SK")? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why: format!("SK={v}: 0 or 1") }),
    }
}

/// `PF` (the stream and gemv register pipelines): `on`; `off`, `auto` and an absent knob mean off. Auto is off
/// from the H200 runs of 2026-12-01 (lab/NOTES.md): the pipelined stream lost at M1
/// (0.0355 vs 0.0310 ms) and the 28x4 decode (0.336 vs 0.295) and tied at M16 (0.068 vs 0.069), 2026-12-01;
/// gemv with PF=on took 0.0247 ms at M16 against 0.0235 off and 0.0138 vs 0.0136 at M1, later that day (the
/// second register set only raised the register count). PF=on stays in the knob space for the tuner.
fn prefetch_knob(knobs: &Knobs) -> Result<bool, OpError> {
    two_way(knobs, "PF", false, &[("auto", false), ("on", true), ("off", false)])
}

/// `XA`: the activations' lookahead in quads; `None` for 0 (auto) and an absent knob (from before it existed).
fn xa_knob(knobs: &Knobs) -> Result<Option<u32>, OpError> {
    let v = super::prefill::int_or0(knobs, "XA")?;
    Ok((v != 0).then_some(v))
}

fn pick(k: &Knobs, name: &str, auto: u32) -> Result<u32, OpError> {
    let v = k.u32(name)?;
    Ok(if v == 0 { auto } else { v })
}

/// Resolve knobs for a problem: explicit values are kept, zeros are chosen from the shape (decode: narrow
/// token tiles and a K split that gives about two waves of tiles when there are few; prefill: 128x128
/// tiles), then the combination is validated.
pub fn resolve(spec: &MatSpec, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
    if spec.tiled {
        return resolve_tiled(spec, knobs, sh);
    }
    match gemv_wanted(spec, knobs, sh)? {
        Some(true) => return resolve_gemv(spec, knobs, sh),
        // Automatic: unless other explicit knobs rule it out (e.g. BN=128 at BK=256: too many registers).
        Some(false) => {
            if let Ok(c) = resolve_gemv(spec, knobs, sh) {
                return Ok(c);
            }
        }
        None => {}
    }
    let bm = pick(
        knobs,
        "BM",
        match sh.max_rows {
            0..=16 => 16,
            17..=32 => 32,
            33..=64 => 64,
            _ => 128,
        },
    )?;
    let decode = bm <= 64;
    let wgmma = match knobs.0.get("MMA") {
        None => false,
        Some(_) => match knobs.str("MMA")? {
            // wgmma for prefill tiles, unless other explicit knobs rule it out.
            "auto" => {
                bm >= 128
                    && bm.is_multiple_of(64)
                    && matches!(knobs.u32("BK")?, 0 | 64)
                    && matches!(knobs.u32("WB")?, 0 | 1)
                    && (knobs.u32("WA")? == 0 || knobs.u32("WA")? == bm / 16)
            }
            m => m == "wgmma",
        },
    };
    // DEC: Some(true) bits, Some(false) expr, None auto (bits for packed weights where the tile allows).
    let dec_req = match knobs.0.get("DEC") {
        None => Some(false),
        Some(_) => match knobs.str("DEC")? {
            "auto" => None,
            "bits" => Some(true),
            "expr" => Some(false),
            other => {
                return Err(OpError::InvalidKnobs {
                    op: OP,
                    knobs: knobs.to_string(),
                    why: format!("DEC={other}: auto, expr or bits"),
                });
            }
        },
    };
    let dec_bits = dec_req.unwrap_or(!wgmma);
    // PATH: the streaming weight path for decode tiles (see the knob's description).
    let stream = match knobs.0.get("PATH") {
        None => false,
        Some(_) => match knobs.str("PATH")? {
            // Packed weights and bf16 activations only: the natural layout's 16-byte block loads take four times
            // the registers (the grouped kernel at BK=128 spilled 40 bytes under ptxas), and the MXFP8 grouped
            // kernel at BK=256 spilled 12 (the tile path stays their default). Dense only: at 28 experts x 4 tokens
            // the tile path ran 0.224-0.234 ms against 0.30-0.88 for stream knob sets (H200, 2026-12-01).
            "auto" => {
                bm <= 16
                    && !spec.grouped
                    && spec.packed
                    && !spec.act8
                    && !wgmma
                    && !sh.glu
                    && matches!(knobs.u32("WB")?, 0 | 1)
                    && knobs.0.get("DEC").is_none_or(|_| knobs.str("DEC").is_ok_and(|d| d != "expr"))
            }
            "tile" => false,
            "stream" => true,
            other => {
                return Err(OpError::InvalidKnobs {
                    op: OP,
                    knobs: knobs.to_string(),
                    why: format!("PATH={other}: auto, tile, stream, gemv or dq_gemm"),
                });
            }
        },
    };
    // The bit decode makes a decode tile's weight rows cheap enough that 128 rows per CTA (32 per warp) pay for
    // the token tile's copies and fragment loads; three stages keep four such CTAs per SM (16-token tiles: wider
    // token tiles would need too many accumulator registers).
    let wide_rows = dec_bits && bm <= 16;
    // Measured on the H200 (results/bench/nvidia-h200/mxfp4_matmul.json, 2026-11-30, every row checked):
    // - dense M1 N6144 K3584: BN=64 0.034 ms, BN=128 (the old choice) 0.104, BN=256 0.085: few tiles, so the
    //   K split fills the SMs and narrow tiles keep more CTAs (and their loads) resident per SM;
    // - 28 experts x 4 tokens: BN=256 0.218 ms, BN=128 0.292, BN=64 0.271: a full grid of tiles without a
    //   split, and the wide tile amortises the token tile's copies over four times the weight rows;
    // - the same with the SiTU-GLU epilogue: BN=128 0.267 ms, BN=256 0.339, BN=64 0.310 (kept at 128);
    // - M4096 (wgmma): BN=256 0.614 ms, BN=128 0.688 (GLU prefill not measured: kept at 128).
    // So: 256 when the 256-row tiles alone fill about four CTAs per SM, else 64 (a split follows below).
    let tiles_at = |rows_per_tile: usize| -> usize {
        let nt = sh.n_out.div_ceil(if sh.glu { rows_per_tile / 2 } else { rows_per_tile });
        sh.counts.iter().map(|&r| r.div_ceil(bm as usize) * nt).sum()
    };
    // The stream path: 16 weight rows per warp (4 warps), a 256-wide K slice per iteration (eight blocks per
    // row in flight per thread); the split below fills the SMs.
    let bn_auto = if stream {
        64
    } else if wide_rows {
        if sh.glu {
            128
        } else if tiles_at(256) >= 4 * ASSUMED_SMS {
            256
        } else {
            64
        }
    } else if wgmma && !sh.glu && bm >= 128 {
        256
    } else if decode {
        64
    } else {
        128
    };
    let bn = pick(knobs, "BN", bn_auto)?;
    // Stream: 256 packed (eight 4-byte words per row in flight), 128 natural (its 16-byte block loads hold four
    // times the registers: at 256 ptxas spills under the 128-register cap of four CTAs per SM).
    let bk_stream = if spec.packed { 256 } else { 128 };
    let bk = pick(
        knobs,
        "BK",
        if stream {
            bk_stream
        } else if decode && !wgmma {
            128
        } else {
            64
        },
    )?;
    let stages = pick(knobs, "STAGES", if (decode && !wide_rows) || wgmma || stream { 4 } else { 3 })?;
    // The stream path keeps 16 weight rows per warp (its register tile holds a whole BK slice of them).
    let wa_auto = if wgmma {
        bm / 16
    } else if stream {
        (bn / 16).clamp(1, 16)
    } else {
        (bn / 16).min(if decode { 4 } else { 8 })
    };
    let wa = pick(knobs, "WA", wa_auto)?;
    let wb = pick(knobs, "WB", 1)?;
    // wgmma: the weight tile is decoded into registers (16 rows per warp at least) and stored to shared memory.
    let dec_bits = if wgmma { dec_req.unwrap_or(bn.is_multiple_of(16 * wa)) } else { dec_bits };
    let mut c = Cfg {
        bn,
        bm,
        bk,
        stages,
        wa,
        wb,
        split: 1,
        cps: 1,
        raster_m: knobs.str("RASTER")? == "m",
        wgmma,
        dec_bits,
        stream,
        gemv: false,
        fused: false,
        prefetch: false,
        min_blocks: 0,
        ring: 0,
        // (auto: none off the gemv ring; an explicit size is refused there.)
        l2pf: l2pf_knob(knobs)?.unwrap_or(0),
        bulk: copy_bulk(knobs)?,
        xa: xa_knob(knobs)?.unwrap_or(1),
        sk: sk_knob(knobs)?,
        ts: super::prefill::int_or0(knobs, "TS")?,
    };
    c.cps = knobs.u32("CPS")?;
    // CTAs resident per SM: the persistent count, else an estimate from shared memory (registers permitting).
    let resident =
        if c.cps > 0 { c.cps as usize } else { (200 * 1024 / c.shared_bytes(spec.tiled).max(1)).clamp(1, 4) };
    let bno = if sh.glu { bn / 2 } else { bn } as usize;
    let n_tiles = sh.n_out.div_ceil(bno.max(1));
    let tiles: usize = sh.counts.iter().map(|&r| r.div_ceil(bm as usize) * n_tiles).sum();
    let target = ASSUMED_SMS * resident;
    let k_tiles = sh.k.div_ceil(bk as usize).max(1);
    // Few tiles: split K. A persistent grid gets one wave of tiles (a partial second wave would double the
    // time); one CTA per tile gets about two waves (the hardware fills SMs as CTAs finish).
    if tiles == 0 {
        // Nothing to compute (no rows): one launch at most, never a finalize over zero rows.
        c.split = 1;
        validate(spec, &c, knobs)?;
        return Ok(c);
    }
    let split_auto = if tiles == 0 {
        1
    } else if c.cps > 0 {
        if tiles * 4 >= target * 3 { 1 } else { (target / tiles).clamp(1, k_tiles.min(32)) }
    } else if tiles >= target {
        1
    } else if wide_rows || stream {
        // Bit-decode tiles stream their weights faster than a CTA starts and drains: one wave of longer CTAs.
        target.div_ceil(tiles).clamp(1, k_tiles.min(32))
    } else {
        (2 * target).div_ceil(tiles).clamp(1, k_tiles.min(32))
    };
    // No empty splits: as many as the K tiles per split need (at most the count chosen).
    let split_auto = k_tiles.div_ceil(k_tiles.div_ceil(split_auto.max(1)));
    c.split = pick(knobs, "SPLIT", split_auto as u32)?;
    c.fused = fin_last(knobs, !c.wgmma)? && c.split > 1;
    c.prefetch = prefetch_knob(knobs)?;
    // GR is a PATH=gemv knob (validated: 0 here).
    c.ring = if knobs.0.contains_key("GR") { knobs.u32("GR")? } else { 0 };
    // MINB: ptxas gives the pipelined stream kernel 255 registers (two CTAs per SM); three CTAs fit in 168
    // without spills (ptxas, M1 and 28x4 presets), the occupancy of the unpipelined kernel (145-161 registers).
    let minb = if knobs.0.contains_key("MINB") { knobs.u32("MINB")? } else { 1 };
    // Auto: 3 CTAs (168 registers) for 16-token tiles on 128 threads, the presets' shape; others uncapped (at
    // 168 registers the 64-thread BN=32 tile spills 96 bytes and the BM=64 tile 32; at 256 threads 3 CTAs
    // leave 85).
    let auto_blocks = if c.wa * c.wb == 4 && c.bm <= 16 { 3 } else { 0 };
    c.min_blocks = match minb {
        0 if c.prefetch && auto_blocks > 1 => auto_blocks,
        0 | 1 => 0,
        v => v,
    };
    validate(spec, &c, knobs)?;
    Ok(c)
}

/// PATH=gemv: `Some(true)` explicit, `Some(false)` automatic (at most 16 tokens per group, 8 per expert when
/// grouped, when no other explicit knob asks for another path's shape: MMA=wgmma, WB > 1, a BM other than 8 or
/// 16), `None` another path. MXFP8 activations included (dequantized by a first launch, see
/// [`act_dequant_first`]): at 28 experts x 4 tokens the tile path, their only decode path before, ran
/// 0.1952 ms against the gemv kernel's 0.1171 on bf16 activations (H200, 2026-12-05 report, same run); the
/// dequant launch moves 1.2 MB. A prediction until the GPU times both.
fn gemv_wanted(spec: &MatSpec, knobs: &Knobs, sh: &ShapeFacts) -> Result<Option<bool>, OpError> {
    let Some(_) = knobs.0.get("PATH") else { return Ok(None) };
    Ok(match knobs.str("PATH")? {
        "gemv" => Some(true),
        // Grouped: at most 8 tokens per expert. The gemv kernel of 2026-12-01 lost at 28 experts x 4 tokens (0.531 ms
        // against the tile path's 0.224 on the H200, 2026-12-01); the register-ring kernel with one streaming warp
        // per 16-row tile is predicted at ~0.10-0.13 ms there (SASS: ~240 instructions per 1 KB quad step, 96 KB
        // in flight per SM), a prediction until the GPU measures it.
        "auto" => (sh.max_rows <= 16
            && (!spec.grouped || sh.max_rows <= 8)
            && knobs.0.get("MMA").is_none_or(|_| knobs.str("MMA").is_ok_and(|m| m != "wgmma"))
            && matches!(knobs.u32("WB")?, 0 | 1)
            && matches!(knobs.u32("BM")?, 0 | 8 | 16))
        .then_some(false),
        _ => None,
    })
}

/// Tile-major weights (`WeightBytes::PackedTiles`): PATH=gemv with the shared-memory ring (STAGES 3 when not
/// given), 8-token tiles, no K split, and weight tiles that are all full (the GPU code reads tiled words through
/// the ring's fast form only). Anything else is refused by name.
fn resolve_tiled(spec: &MatSpec, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
    let bad = |why: String| OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why };
    if knobs.0.contains_key("PATH") && !matches!(knobs.str("PATH")?, "auto" | "gemv") {
        return Err(bad(format!("tile-major weights are read by PATH=gemv only (got PATH={})", knobs.str("PATH")?)));
    }
    if sh.max_rows > 8 {
        return Err(OpError::BadInput {
            op: OP,
            arg: "wq (tile-major words)".into(),
            why: format!("tile-major weights serve decode, at most 8 tokens per group (got {})", sh.max_rows),
        });
    }
    let mut k = knobs.clone();
    if super::prefill::int_or0(knobs, "STAGES")? == 0 {
        k.set("STAGES", 3i64);
    }
    let c = resolve_gemv(spec, &k, sh)?;
    let rows = if sh.glu { c.bn / 2 } else { c.bn } as usize;
    if !sh.n_out.is_multiple_of(rows) {
        return Err(bad(format!(
            "tile-major weights need whole weight tiles: {rows} rows per tile do not divide the {} output rows",
            sh.n_out
        )));
    }
    Ok(c)
}

/// The knobs of PATH=gemv ([`Stmt::Fp4Gemv`]): BM 8 (at most 8 tokens per group) or 16 tokens per CTA; BN
/// weight rows per CTA (each GLU half BN/2); BK = 128 x U, U the consecutive 128-column quads of a warp's batch
/// (warps take batches round robin, so a warp's loads of a row cover 64U contiguous bytes); GR the register ring
/// (quads in flight per warp); WA warps split the K range's batches; SPLIT the K range over CTAs.
///
/// Bytes in flight (the reason for the shape): an H200 streams ~4.3 TB/s at ~0.8-1 us of loaded DRAM latency, so
/// ~4 MB must be outstanding, ~30-36 KB per SM. A warp keeps GR x BN/16 x 1 KB of weights in flight (32 lanes x
/// 2 rows x 16 B per quad and 16 rows). Auto at 8 tokens: U = 4 (512 columns) and GR = 3, so at K = 3584 (28
/// quads per row) a 16-row CTA of 7 warps has one batch of 4 quads per warp, 3 of them in flight from the start,
/// and three such CTAs per SM (80 registers, MINB=3) keep ~63 KB per SM in flight; the M1 preset's 384 CTAs are
/// all resident at once. At 16 tokens: U = 8, GR = 4, 4 warps (one batch each), three CTAs per SM.
fn resolve_gemv(spec: &MatSpec, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
    let bm = pick(knobs, "BM", if sh.max_rows <= 8 { 8 } else { 16 })?;
    let glu = sh.glu;
    // 16 rows per statement (GLU: BN = 32, two statements): wider tiles reuse each activation fragment over more
    // rows but multiply the ring's registers; they are left to the tuner, except for many tiles (below).
    let unit = if glu { 32 } else { 16 };
    // Many 8-token tiles (grouped decode; 28 experts x 4 tokens has 10752 tiles of 16 rows): measured best on the
    // H200 (2026-12-04, packed layout v2, three runs, one bench run each, 14 and 14 knob sets): 32-row CTAs of 4
    // warps, each warp a 3-stage cp.async ring of 256-column batches, 5 CTAs per SM (94 registers, no spill):
    // 0.1194 ms, against 0.1278 for the tuned point of the first run (BK=512, MINB=4), 0.1458 for one-warp CTAs streaming
    // all of K, and 0.1892 for the former automatic choice (one-warp 16-row CTAs, an 8-slot register ring). With
    // the GLU epilogue (16 rows per half) the same knobs: 0.1462 ms against 0.1529 at MINB=4.
    let tiles16: usize = sh.counts.iter().map(|&r| r.div_ceil(bm as usize) * sh.n_out.div_ceil(16)).sum();
    let many = bm == 8 && tiles16 >= 12 * ASSUMED_SMS;
    // The same with tile-major weights (`mx::pack::tile`) and no GLU: 64-row CTAs of 128-column batches, registers
    // capped for 4 CTAs per SM (2026-12-05, H200, three runs: the tune's winner, 0.1041 / 0.1040 ms at MINB 4 / 3
    // against 0.1070 with the knobs above and L2PF=128; on packed weights the same knobs read 0.1098 against 0.1087).
    // With the GLU epilogue on packed weights the same 64-row (32 per half), 128-column CTAs win as well: on the
    // H200 0.1206 ms against 0.1348 for the 32-row knobs above (2026-12-06, one bench run), on H100s
    // 0.1346-0.1378 against 0.1431-0.1460 (2026-12-05). Tile-major weights with GLU are untimed: unchanged.
    let wide_tiles = many && if glu { spec.packed && !spec.tiled } else { spec.tiled };
    // Rows and columns per tile by regime (otherwise: 16 rows per statement, 512 columns at 8 tokens, 1024 at 16).
    let (bn_auto, bk_auto) = if wide_tiles {
        (64, 128)
    } else if many {
        (32, 256)
    } else {
        (unit, if bm == 8 { 512 } else { 1024 })
    };
    let bn = pick(knobs, "BN", bn_auto)?;
    let rows = if glu { bn / 2 } else { bn };
    let bk = pick(knobs, "BK", bk_auto)?;
    let split = pick(knobs, "SPLIT", 1)?;
    let u = (bk / 128).max(1);
    let prefetch = prefetch_knob(knobs)?;
    let nb = (rows / 16).max(1);
    let ring_auto = ((if bm == 8 { 3 } else { 4 }) * if prefetch { 2 } else { 1 } / nb).clamp(1, 8);
    let ring = if knobs.0.contains_key("GR") { pick(knobs, "GR", ring_auto)? } else { ring_auto };
    let batches = (sh.k / 32).div_ceil(split.max(1) as usize).div_ceil(4 * u as usize).max(1);
    // The fewest warps (at most 8) that reach the smallest number of batches per warp.
    let least = batches.div_ceil(8);
    let wa_auto = if many { 4 } else { (1..=8u32).find(|&w| batches.div_ceil(w as usize) == least).unwrap_or(8) };
    let wa = pick(knobs, "WA", wa_auto)?;
    // FIN auto: the second launch (FIN=last measured slower on the H200 for the stream kernels).
    let fin_last = fin_last(knobs, false)?;
    let sk = sk_knob(knobs)?;
    let ts = super::prefill::int_or0(knobs, "TS")?;
    let minb = if knobs.0.contains_key("MINB") { knobs.u32("MINB")? } else { 1 };
    // STAGES: 1 or 2 = the register ring of GR slots; 3..=8 = the shared-memory ring of that many cp.async stages
    // per warp (`Stmt::Fp4Gemv` staged; GR is then unused and recorded as the stage count); 0 (or none) = auto:
    // 3 stages for many tiles and for dense 16-token problems without a GLU epilogue (2026-12-04, two runs: M16
    // 0.0153 / 0.0157 ms with 3 stages at MINB=4 against 0.0161 for the register ring), else the register ring (M1
    // read 0.0117 / 0.0118 against 0.0124 staged at MINB=4, but there the 7-warp CTAs get 72 registers and spill 8
    // bytes: left to the tuner).
    let staged_auto = many || (!spec.grouped && !glu && bm == 16);
    let stages = match knobs.0.get("STAGES") {
        None => 2,
        Some(_) => match knobs.u32("STAGES")? {
            0 if staged_auto => 3,
            0..=2 => 2,
            s => s,
        },
    };
    let ring = if stages >= 3 { stages } else { ring };
    // MINB auto (0): 5 CTAs per SM for many tiles (above; 4 with tile-major weights), 4 for the automatic staged
    // ring of dense problems; else three CTAs per SM (80 registers at 7 warps, 168 at 4) for 16 rows per statement
    // where ptxas fits the register ring without spills (8 tokens: at most 3 slots on more than 4 warps; at most 4
    // warps: 8 slots at 8 tokens, 4 at 16; not with a GLU epilogue: two statements, and 24 spilled bytes at 28 x 4
    // under the cap), else uncapped.
    let fits3 = stages < 3 && !glu && if wa <= 4 { ring <= if bm == 8 { 8 } else { 4 } } else { bm == 8 && ring <= 3 };
    let minb = match minb {
        0 if wide_tiles && stages >= 3 => 4,
        0 if many && stages >= 3 => 5,
        0 if staged_auto && stages >= 3 => 4,
        0 if rows == 16 && fits3 && wa * 32 * 3 <= 1024 => 3,
        m => m,
    };
    let c = Cfg {
        bn,
        bm,
        bk,
        stages,
        wa,
        wb: pick(knobs, "WB", 1)?,
        split,
        cps: knobs.u32("CPS")?,
        raster_m: knobs.str("RASTER")? == "m",
        // (Validated: an explicit MMA=wgmma is refused.)
        wgmma: knobs.0.get("MMA").is_some_and(|_| knobs.str("MMA").is_ok_and(|m| m == "wgmma")),
        dec_bits: true,
        stream: false,
        gemv: true,
        // (Stream-K and TS sum their split tiles in the kernel: FIN auto means last there, FIN=kernel is refused.)
        fused: if sk || ts > 0 {
            two_way(knobs, "FIN", true, &[("auto", true), ("kernel", false), ("last", true)])?
        } else {
            fin_last && split > 1
        },
        prefetch,
        min_blocks: if minb <= 1 { 0 } else { minb },
        ring,
        l2pf: 0,
        bulk: copy_bulk(knobs)?,
        xa: 1,
        sk,
        ts,
    };
    // L2PF and XA auto: see `Cfg::l2pf_auto` and `Cfg::xa_auto`.
    let c = Cfg { l2pf: l2pf_knob(knobs)?.unwrap_or(c.l2pf_auto()), xa: xa_knob(knobs)?.unwrap_or(c.xa_auto()), ..c };
    validate(spec, &c, knobs)?;
    Ok(c)
}

fn validate(spec: &MatSpec, c: &Cfg, knobs: &Knobs) -> Result<(), OpError> {
    let invalid = |why: String| Err(OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why });
    let glu = spec.epilogue.is_glu();
    if c.gemv {
        let rows = if glu { c.bn / 2 } else { c.bn };
        if c.wgmma || c.wb != 1 {
            return invalid("PATH=gemv needs MMA=sync and WB=1".into());
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

/// Scale-row cp.async width: the widest access K/32 and BK/32 allow.
fn scale_vec(spec: &MatSpec, c: &Cfg) -> u32 {
    let per_stage = c.bk / 32;
    [16u32, 8, 4, 2, 1]
        .into_iter()
        .find(|v| spec.kb_align.is_multiple_of(*v) && per_stage.is_multiple_of(*v))
        .unwrap_or(1)
}

fn kernel_name(prefix: &str, spec: &MatSpec, c: &Cfg, partial: bool) -> String {
    format!(
        "k3k_{prefix}_{}{}_{}{}{}{}{}_{}_{}",
        if spec.grouped { "grouped" } else { "dense" },
        if spec.row_scale { "_p" } else { "" },
        spec.epilogue.name(),
        if spec.act8 { "_x8" } else { "" },
        if spec.tiled {
            "_tiles"
        } else if spec.packed {
            "_packed"
        } else {
            ""
        },
        match (spec.fold, spec.finite) {
            (true, true) => "_foldf",
            (true, false) => "_fold",
            _ => "",
        },
        if partial { "_partial" } else { "" },
        spec.alignment(),
        c.knobs().id().to_lowercase()
    )
}

fn bad(arg: &str, why: String) -> OpError {
    OpError::BadInput { op: OP, arg: arg.into(), why }
}
