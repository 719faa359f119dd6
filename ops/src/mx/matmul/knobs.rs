//! The knobs of `mxfp4_matmul`, declared once ([`MatKnobs`]): each knob's meaning, the tuning space, the values
//! the builders also accept, the default record, and what a record written before a knob existed means
//! (`absent`). [`MatKnobs::from_knobs`] reads a record; the resolvers (`resolve.rs`, `f8sync.rs`, `mx::fp8`,
//! `mx::prefill`) read its fields.
//!
//! Where a knob's absence means something no value says, or something that differs by kernel path, the field is
//! an `Option` (`absent: None`) and the path's reader gives the meaning, on the field's doc and in the readers
//! below: the shape knobs (BN, BM, BK, STAGES, WA, WB, SPLIT, CPS) and RASTER are required by the in-kernel paths
//! (tile, stream, gemv, f8sync: `KnobError::Missing`) and mean 0 (automatic) and `m` to `MMA=fp8` and
//! `PATH=dq_gemm`; an absent STAGES is the register ring on PATH=gemv (2, where 0 is automatic); MMA, DEC, PATH
//! and FIN see their fields.

use super::*;
use crate::typed_knobs::{AutoOr, knob_enum, knob_set};

knob_enum! {
    /// `RASTER`: the tile order inside a group.
    pub enum Raster: str {
        /// Along m: neighbouring CTAs share weights.
        M = "m",
        N = "n",
    }
}

knob_enum! {
    /// `MMA`: the tensor-core path.
    pub enum Mma: str {
        /// wgmma for BM >= 128 where the other explicit knobs allow it, else sync (`PATH=dq_gemm`: wgmma).
        Auto = "auto",
        /// `mma.sync` with the dequantized weights as register A operand.
        Sync = "sync",
        /// Weights dequantized into a shared bf16 tile, warpgroup MMA.
        Wgmma = "wgmma",
        /// MXFP8 activations on FP8 tensor cores ([`crate::mx::fp8`]).
        Fp8 = "fp8",
        /// MXFP8 activations on E4M3 `mma.sync` ([`super::f8sync`]).
        F8sync = "f8sync",
    }
}

knob_enum! {
    /// `DEC`: the weight decode.
    pub enum Dec: str {
        /// Bits where the tile allows.
        Auto = "auto",
        /// The per-element IR expression.
        Expr = "expr",
        /// `Stmt::DequantFp4`.
        Bits = "bits",
    }
}

knob_enum! {
    /// `PATH`: the weight path.
    pub enum Path: str {
        /// Chosen from the shape (see the knob's doc).
        Auto = "auto",
        /// cp.async stages of packed words in shared memory.
        Tile = "tile",
        /// `Stmt::DequantFp4Stream`: global memory straight into registers.
        Stream = "stream",
        /// Decode: `Stmt::Fp4Gemv`.
        Gemv = "gemv",
        /// Prefill: the weights dequantized first, then the `latent_moe_gemm` kernel ([`crate::mx::prefill`]).
        DqGemm = "dq_gemm",
    }
}

knob_enum! {
    /// `FIN`: the split-K reduction.
    pub enum Fin: str {
        /// `last` for MMA=sync (and on PATH=gemv's stream-K and tail split), else `kernel`.
        Auto = "auto",
        /// A second launch sums the partials.
        Kernel = "kernel",
        /// The CTA that arrives last at its tile's counter sums the partials.
        Last = "last",
    }
}

knob_enum! {
    /// `PF`: the software pipeline of PATH=stream and the doubled register ring of PATH=gemv.
    pub enum Pf: str {
        /// Off.
        Auto = "auto",
        On = "on",
        Off = "off",
    }
}

knob_enum! {
    /// `COPY`: how PATH=gemv's shared-memory ring is filled.
    pub enum CopyBy: str {
        /// Lanes.
        Auto = "auto",
        /// Every lane copies its own 16-byte blocks by cp.async.
        Lanes = "lanes",
        /// One lane copies each 16-row block whole by cp.async.bulk (tile-major weights).
        Bulk = "bulk",
    }
}

knob_enum! {
    /// `XDQ`: where MXFP8 activations on PATH=tile and stream are converted to bf16.
    pub enum Xdq: str {
        /// First.
        Auto = "auto",
        /// A first launch dequantizes them once into a bf16 scratch.
        First = "first",
        /// Each CTA converts its stages' codes on chip.
        Tile = "tile",
    }
}

knob_enum! {
    /// `TURN`: what the two consumer warpgroups of `MMA=fp8,F8V=6` do in turns.
    pub enum Turn: str {
        /// Each `wgmma` issue, so the tensor cores take the warpgroups' products alternately and one warpgroup
        /// promotes while the other's product runs.
        Mma = "mma",
        /// Each block's promotion (one FFMA per accumulator element), so the two warpgroups' FFMA phases never
        /// share the issue slots and one waits for its product while the other promotes.
        Ffma = "ffma",
    }
}

impl Turn {
    /// The knob value.
    pub fn name(self) -> &'static str {
        match self {
            Turn::Mma => "mma",
            Turn::Ffma => "ffma",
        }
    }
}

knob_enum! {
    /// `DQ`: the weight dequant kernel of `PATH=dq_gemm` (see [`crate::mx::prefill::DQ_KNOB`]).
    pub enum Dq: str {
        /// Wide.
        Auto = "auto",
        /// The register-tile windows of `build_dequant_weights`.
        Tile = "tile",
        /// The flat 16-byte-store stream of `build_dequant_wide`.
        Wide = "wide",
    }
}

/// `L2PF`: the L2 prefetch size of PATH=gemv's shared-memory ring copies: `auto` (128 on the ring with per-lane
/// copies, else none, [`Cfg::l2pf_auto`]) or a byte count (validated with the configuration: 0, 64, 128 or 256).
pub type L2pf = AutoOr;

knob_set! {
    /// The knobs of `mxfp4_matmul`, read from a record by [`MatKnobs::from_knobs`]. 0 is "chosen from the
    /// problem shape" for the tile-shape knobs, MINB, GR, XA and DQU (see each axis's doc). The tuner enumerates
    /// the product of the axes, which offer the values worth timing; the `accepts` values are checked but never
    /// walked.
    pub struct MatKnobs for "mxfp4_matmul" {
        /// `BN`: weight rows per tile (absent: required by the in-kernel paths, 0 for MMA=fp8 and dq_gemm).
        bn: Option<u32> = "BN" => {
            axis: "weight rows per tile (gate+up together for GLU); 0 = auto" [Some(0), Some(32), Some(64), Some(128), Some(256)],
            accepts: "MMA=fp8: 192 weight rows per tile (any multiple of 8 up to 256 is accepted there; one temporary \
             accumulator above 128)" [Some(192)],
            default: Some(0),
            absent: None,
        },
        /// `BM`: tokens per tile (absent: as BN).
        bm: Option<u32> = "BM" => {
            axis: "tokens per tile (mma N; 16, 32, 64 or 128); 0 = auto" [Some(0), Some(64), Some(128)],
            default: Some(0),
            absent: None,
        },
        /// `BK`: K per pipeline stage (absent: as BN).
        bk: Option<u32> = "BK" => {
            axis: "K per pipeline stage (multiple of 32; 64 for wgmma; PATH=gemv: 128 x the 128-column quads per warp batch, \
             128..1024); 0 = auto" [Some(0), Some(64), Some(128), Some(256), Some(512)],
            default: Some(0),
            absent: None,
        },
        /// `STAGES`: the pipeline depth (absent: as BN, and on PATH=gemv the register ring: 2, where 0 is
        /// automatic; tile-major weights: 3).
        stages: Option<u32> = "STAGES" => {
            axis: "cp.async pipeline depth; PATH=gemv: 0..=2 the register ring of GR slots, 3..=8 the warps' rings in shared \
             memory of that many cp.async stages (every stage in flight: a register ring's loads share the six \
             hardware scoreboards, so ptxas waits for all of them at each slot); 0 = auto (gemv: 3 stages for \
             grouped decode with many 8-token tiles and for dense 16-token problems without a GLU epilogue, else the \
             register ring)" [Some(0), Some(3), Some(4)],
            default: Some(0),
            absent: None,
        },
        /// `WA`: warps along weight rows (absent: as BN).
        wa: Option<u32> = "WA" => {
            axis: "warps along weight rows (wgmma: BM/16); 0 = auto" [Some(0), Some(4), Some(8)],
            default: Some(0),
            absent: None,
        },
        /// `WB`: warps along tokens (absent: as BN).
        wb: Option<u32> = "WB" => {
            axis: "warps along tokens (each recomputes its rows' dequantized weights); 0 = auto" [Some(0), Some(2)],
            default: Some(0),
            absent: None,
        },
        /// `SPLIT`: K splits (absent: as BN).
        split: Option<u32> = "SPLIT" => {
            axis: "K splits (partials summed in order by a second kernel); 0 = auto" [Some(0), Some(1), Some(2), Some(4), Some(8), Some(16)],
            default: Some(0),
            absent: None,
        },
        /// `CPS`: CTAs per SM of a persistent grid, 0 one CTA per tile (absent: as BN).
        cps: Option<u32> = "CPS" => {
            axis: "0: one CTA per tile (hardware-scheduled); n: a persistent grid of n CTAs per SM (PATH=gemv: the tiles \
             balanced over the fewest CTAs that keep the busiest one's count, the others exit at once; at 28 x 4 on an \
             H100 1.17x slower than the hardware grid, its CTAs turning over in lockstep: 2026-12-05)" [Some(0), Some(4)],
            accepts: "MMA=fp8,F8V=4, 5 and 6: 1 = a persistent grid, one block per SM walking every grid-th output tile (its producer \
             warp loads the next tile's first slices during the epilogue); 0 = one block per tile" [Some(1)],
            default: Some(0),
            absent: None,
        },
        /// `SK`: stream-K on PATH=gemv's persistent grid, 0 or 1 (absent: 0).
        sk: u32 = "SK" => {
            axis: "PATH=gemv with CPS > 0: 1 = stream-K, the K ranges of all tiles (in BK units) split evenly over the \
             persistent CTAs, each a contiguous run that may start and end inside a tile (such a tile's two \
             partials summed by the last to arrive, as FIN=last), so the CTAs carry equal bytes and turn over at \
             different times (at 28 x 4 on an H100 1.09x slower than the hardware grid: a prologue, and CTAs whose \
             rates differ end apart; 2026-12-05); 0 = whole tiles" [0, 1],
            default: 0,
            absent: 0,
        },
        /// `TS`: PATH=gemv's tail split, the last TS groups' tiles in two K halves (absent: 0).
        ts: u32 = "TS" => {
            axis: "PATH=gemv, grouped, hardware-scheduled grid (CPS=0): the last TS groups' tiles (the last CTAs launched) \
             split in two along K, two half-tile CTAs per tile summed by the second to arrive (as FIN=last), so the \
             grid's last CTAs drain half a tile each (at 28 x 4 on an H100 within 1% of TS=0 for TS 2-11, slower \
             packed: the SMs still work through their on-chip data after DRAM stops; 2026-12-05); 0 = none" [0, 6],
            default: 0,
            absent: 0,
        },
        /// `RASTER`: the tile order inside a group (absent: required by the in-kernel paths, `m` for dq_gemm).
        raster: Option<Raster> = "RASTER" => {
            axis: "tile order inside a group: m (neighbouring CTAs share weights) or n" [Some(Raster::M)],
            default: Some(Raster::M),
            absent: None,
        },
        /// `XDQ`: MXFP8 activations on PATH=tile and stream converted by a first launch or on chip (absent: auto,
        /// the first launch).
        xdq: Xdq = "XDQ" => {
            accepts: "MXFP8 activations on PATH=tile and stream: first (a first launch dequantizes them once into a bf16 \
             scratch `[M, K]`, `mx.dequantize`'s kernel, as PATH=gemv always does, and the main kernel is the \
             bf16-activation one), tile (each CTA converts its stages' E4M3 codes on chip: every activation once per \
             weight tile, 96 times at N6144 BN64: at M64 N6144 K3584 an H100 took 0.0830 ms on 2026-12-06, bf16 \
             activations 0.0389 at the same resolved knobs in its tune records); auto (and absent): first. Refused with PATH=gemv \
             (tile), meaningless with bf16 activations (ignored)" [Xdq::Auto, Xdq::First, Xdq::Tile],
            absent: Xdq::Auto,
        },
        /// `MMA`: the tensor-core path (absent: `sync` on the in-kernel paths, from before wgmma existed; `auto`
        /// to the choice of PATH=dq_gemm and on it).
        mma: Option<Mma> = "MMA" => {
            axis: "sync: mma.sync with the dequantized weights as register A operand; wgmma: weights dequantized into a \
             shared bf16 tile, warpgroup MMA (BK=64, WA=BM/16, BM a multiple of 64); auto: wgmma for BM >= 128" [Some(Mma::Auto), Some(Mma::Sync), Some(Mma::Wgmma)],
            accepts: "fp8: MXFP8 activations on FP8 tensor cores (`mx::fp8`: weights converted exactly to E4M3 in shared \
             memory, wgmma e4m3 per 32-wide block, both scales applied exactly to the f32 accumulator; F8V \
             >= 4 also grouped, packed, GLU (BN % 16 = 0) and p; BM 64|128, BN <= 256, BK 128, STAGES)" [Some(Mma::Fp8)],
            accepts: "f8sync: MXFP8 activations on E4M3 mma.sync (m16n8k32), never dequantized (`matmul::f8sync`): per CTA BN \
             weight rows x BM tokens x one K range of SPLIT, its activation codes and scales staged once in shared \
             memory, the weights through the STAGES ring converted exactly to E4M3, both scales applied per 32-wide \
             block to the f32 accumulator, FIN=last sums the splits; dense or grouped, GLU and p, natural or packed; \
             BK 64|128|256; auto: BM the tokens rounded up to 16 (at most 128), BN 64, BK 128, STAGES 4, SPLIT about \
             two CTAs per SM with BM x K/SPLIT <= 64 KB. Not an automatic choice: 1.2-2.5x slower than it at M 8..256 \
             on an H100 (2026-12-07)" [Some(Mma::F8sync)],
            default: Some(Mma::Auto),
            absent: None,
        },
        /// `DEC`: the weight decode (absent: `expr` on the tile path, from before the bit decode existed, but no
        /// obstacle to PATH=auto's choice of the stream path; `auto` to MMA=f8sync and dq_gemm; PATH=gemv always
        /// decodes bits).
        dec: Option<Dec> = "DEC" => {
            axis: "weight decode: bits (`Stmt::DequantFp4`: one prmt + 3 bit ops + one bf16x2 multiply per two values; \
             natural layout: + one 16-byte load and 3 prmt per row and block; MMA=wgmma: into registers, then one \
             4-byte shared store per pair, BN a multiple of 16*WA), expr (the per-element IR expression); auto: bits \
             where the tile allows (so the tuner times auto and expr only; bits is accepted too)" [Some(Dec::Auto), Some(Dec::Expr)],
            default: Some(Dec::Auto),
            absent: None,
        },
        /// `PATH`: the weight path (absent: `tile`, from before the other paths existed; with tile-major weights,
        /// which PATH=gemv alone reads, as `auto`).
        path: Option<Path> = "PATH" => {
            axis: "weight path: tile (cp.async stages of packed words in shared memory, decoded from there), stream \
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
             auto)" [Some(Path::Auto), Some(Path::Tile), Some(Path::Stream), Some(Path::Gemv)],
            default: Some(Path::Auto),
            absent: None,
        },
        /// `FIN`: the split-K reduction (absent: `kernel`, from before FIN=last existed; on PATH=gemv's stream-K
        /// and tail split, which sum in the kernel, `auto`).
        fin: Option<Fin> = "FIN" => {
            axis: "split-K reduction (SPLIT > 1): kernel (a second launch sums the partials), last (one launch: each \
             CTA stores its partial, bumps its tile's arrival counter, and the CTA that arrives last sums the \
             tile's partials in split order, deterministic, and applies the epilogue; MMA=sync); auto: last for \
             MMA=sync" [Some(Fin::Auto), Some(Fin::Kernel)],
            default: Some(Fin::Auto),
            absent: None,
        },
        /// `PF`: the register pipelines of PATH=stream and gemv (absent: auto, off).
        pf: Pf = "PF" => {
            axis: "PATH=stream software pipeline: on (each K slice's decode reads the words the previous slice's statement \
             prefetched into registers, then issues the next slice's loads, in flight during the product and the \
             next wait), off (a slice's loads, then its decode); PATH=gemv: on doubles the automatic register ring \
             (GR=0); auto: off on both paths (measured as fast or faster on the H200)" [Pf::Off, Pf::On],
            default: Pf::Auto,
            absent: Pf::Auto,
        },
        /// `MINB`: blocks per SM of `__launch_bounds__`, 0 automatic (absent: 1, no cap).
        minb: u32 = "MINB" => {
            axis: "blocks per SM ptxas compiles the main kernel for (`__launch_bounds__`: caps its registers; 1 = no cap); \
             0 = auto: 3 with PF=on for BM=16 on 128 threads (uncapped, ptxas takes 255 registers and 2 CTAs fit; 168 does not \
             spill at the presets); PATH=gemv: 5 for grouped decode with many tiles, 4 for the dense staged ring, 3 for \
             a 16-row register ring that fits, else none (the axis reaches 6: 32-row gemv tiles at MINB=6 were the \
             H100's fastest tile-major 28 x 4 shape on 2026-12-05)" [0, 4, 6],
            accepts: "MMA=f8sync: 2 or 3 blocks per SM for the register cap (uncapped its kernels take 238-255 registers: two \
             128-thread CTAs per SM; 3 caps them at 168)" [2, 3],
            default: 0,
            absent: 1,
        },
        /// `GR`: PATH=gemv's register ring slots, 0 automatic (absent: 0).
        gr: u32 = "GR" => {
            axis: "PATH=gemv register ring: slots per warp, one 128-column quad of the tile's rows each (16 bytes per lane and \
             row), loaded GR quads ahead of their use (1..=8, with BN/16 x GR <= 8); 0 = auto: 4 slots of 16 rows \
             (8 with PF=on), fewer for wider tiles; 0 on the other paths" [0, 2, 8],
            default: 0,
            absent: 0,
        },
        /// `L2PF`: the L2 prefetch size of PATH=gemv's ring copies (absent: auto).
        l2pf: L2pf = "L2PF" => {
            axis: "PATH=gemv with the shared-memory ring (STAGES >= 3): the L2 prefetch size of its cp.async copies in bytes \
             (`.L2::128B` / `.L2::256B`: L2 fetches the aligned bytes around each 16-byte piece of a weight row, which \
             the warp's and its CTA's next quads of the same rows copy soon after); 0 none (64 accepted too); auto: \
             128 on that ring with per-lane copies, else none" [L2pf::Auto, L2pf::Value(0), L2pf::Value(256)],
            default: L2pf::Auto,
            absent: L2pf::Auto,
        },
        /// `COPY`: how PATH=gemv's tile-major ring is filled (absent: auto, lanes).
        copy: CopyBy = "COPY" => {
            axis: "PATH=gemv with tile-major weights: how a warp's shared-memory ring is filled: lanes (every lane copies \
             its own 16-byte blocks and scale words by cp.async), bulk (one lane copies each 16-row block of a quad \
             whole, 1 KB of words and 64 B of scales, by cp.async.bulk completing on a barrier in the stage; no \
             L2PF); auto: lanes; other weight layouts take lanes only" [CopyBy::Auto, CopyBy::Bulk],
            default: CopyBy::Auto,
            absent: CopyBy::Auto,
        },
        /// `XA`: PATH=gemv's activation lookahead in quads, 0 automatic (absent: 0).
        xa: u32 = "XA" => {
            axis: "PATH=gemv with the shared-memory ring (STAGES >= 3): how many quads ahead of its product a warp loads a \
             quad's activations into registers (1 or 2; 2, with 8-token tiles only, keeps a second register set live \
             across each product, hiding the activations' L2 latency); 0 = auto: 2 on that ring with 8-token tiles, \
             else 1" [0, 1],
            default: 0,
            absent: 0,
        },
        /// `F8V`: the MMA=fp8 kernel generation, 0 = [`crate::mx::fp8::DEFAULT`] (absent: 0).
        f8v: u32 = "F8V" => {
            accepts: "MMA=fp8 kernel generation: 1 = the first (cp.async with per-row bounds for every tile, both scale \
             factors read from shared f32 vectors per element), 2 = the code tiles by TMA on per-slot mbarriers, \
             the activation factors in registers, 3 = as 2 with the weight scales folded into the E4M3 codes \
             (rows whose scale bytes span <= 12 and hold no NaN, else 2), the promotion one FFMA per element; \
             4 = the folded weights converted to E4M3 by a first launch into a scratch `[N, K/4]` (as PATH=dq_gemm \
             dequantizes first; same fold condition and fallback to 2), then a plain FP8 x FP8 wgmma GEMM: a \
             producer warpgroup fills a TMA ring (STAGES auto: up to 6) of activation codes, E4M3 weights and \
             activation factors, the promotion one FFMA per element with the activation factor only; \
             5 = as 4, with the next slice's first product issued before a slice's last promotion (BN <= 128); \
             6 = as 5, the two consumer warpgroups (BM=128) taking turns (ping-pong, knob TURN); \
             0 = 1 (the one run on a GPU so far)" [0, 1, 2, 3, 4, 5, 6],
            absent: 0,
        },
        /// `TURN`: what MMA=fp8,F8V=6's consumer warpgroups do in turns (absent: mma).
        turn: Turn = "TURN" => {
            accepts: "MMA=fp8,F8V=6: what the two consumer warpgroups do in turns: mma (absent: each wgmma issue, the \
             tensor cores taking their products alternately) or ffma (each block's promotion)" [Turn::Mma, Turn::Ffma],
            absent: Turn::Mma,
        },
        /// `DQ`: PATH=dq_gemm's weight dequant kernel (absent: `tile`, from before `wide` existed; `auto`, the
        /// default, is `wide`). Not in the tuning space.
        dq: Dq = "DQ" => {
            default: Dq::Auto,
            absent: Dq::Tile,
        },
        /// `PDL` (accepted, not an axis; absent: false): programmatic dependent launches between the plan's kernels
        /// ([`super::host::grid_deps`]).
        pdl: bool = "PDL" => {
            accepts: "programmatic dependent launch (Hopper): the kernel after the MXFP8 activation dequant, and a \
             split's finalize, are launched so that their blocks start while the kernel before them runs, and wait for \
             it (`griddepcontrol.wait`) before their first instruction; the kernel before lets them start at its own \
             start. Hides the launch gap between the plan's kernels. The tile, stream and gemv paths; PATH=dq_gemm and \
             MMA=fp8 launch as without it. false (and absent): plain launches" [true, false],
            absent: false,
        },
        /// `DQU`: words per thread of `DQ=wide`, 0 automatic (absent: 0). Not in the tuning space.
        dqu: u32 = "DQU" => {
            absent: 0,
        },
        /// `DQP`: CTAs per SM of `DQ=wide`'s persistent grid, 0 none (absent: 0). Not in the tuning space.
        dqp: u32 = "DQP" => {
            absent: 0,
        },
    }
}

/// The tuning knobs and the values the builders also accept (0 = chosen from the problem shape, see [`resolve`]).
pub fn knob_space() -> KnobSpace {
    MatKnobs::space()
}

/// Defaults: everything chosen from the problem shape.
pub fn default_knobs() -> Knobs {
    MatKnobs::defaults()
}

/// Knob `name`, required here (`KnobError::Missing` when absent), with 0 meaning `auto`.
pub(in crate::mx) fn pick(v: Option<u32>, name: &str, auto: u32) -> Result<u32, OpError> {
    match need(v, name)? {
        0 => Ok(auto),
        v => Ok(v),
    }
}

/// Knob `name`, required here.
pub(in crate::mx) fn need<T>(v: Option<T>, name: &str) -> Result<T, OpError> {
    v.ok_or_else(|| OpError::Knob(KnobError::Missing { name: name.to_string() }))
}

impl MatKnobs {
    /// `RASTER` on the in-kernel paths (required there): along m.
    pub(in crate::mx) fn raster_m(&self) -> Result<bool, OpError> {
        Ok(need(self.raster, "RASTER")? == Raster::M)
    }

    /// `COPY`: whether PATH=gemv's ring is filled by whole-block bulk copies (`bulk`) rather than per-lane copies.
    pub(super) fn copy_bulk(&self) -> bool {
        self.copy == CopyBy::Bulk
    }

    /// `FIN`: whether the split-K partials are summed by the last-arriving CTA (`last`) rather than by a second
    /// launch (`kernel`); `auto` means `auto_last`, and an absent knob (records from before it existed) `kernel`.
    pub(super) fn fin_last(&self, auto_last: bool) -> bool {
        match self.fin {
            None | Some(Fin::Kernel) => false,
            Some(Fin::Auto) => auto_last,
            Some(Fin::Last) => true,
        }
    }

    /// `FIN` where the kernel sums split tiles itself (PATH=gemv's stream-K and tail split): `auto` and an absent
    /// knob mean `last`, and `kernel` is refused by the validation.
    pub(super) fn fin_in_kernel(&self) -> bool {
        self.fin != Some(Fin::Kernel)
    }

    /// `XDQ`: whether MXFP8 activations on PATH=tile and stream are converted on chip per stage (`tile`) rather
    /// than dequantized by a first launch (`first`; `auto` means first).
    pub(super) fn act_tile(&self) -> bool {
        self.xdq == Xdq::Tile
    }

    /// `SK` (stream-K on PATH=gemv's persistent grid): 1 on, 0 off; any other value is refused (`given`: the
    /// record, named in the error).
    pub(super) fn stream_k(&self, given: &Knobs) -> Result<bool, OpError> {
        match self.sk {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(OpError::InvalidKnobs { op: OP, knobs: given.to_string(), why: format!("SK={v}: 0 or 1") }),
        }
    }

    /// `PF` (the stream and gemv register pipelines): `on`; `off` and `auto` mean off. Auto is off from the H200
    /// runs of 2026-12-01 (lab/NOTES.md): the pipelined stream lost at M1 (0.0355 vs 0.0310 ms) and the 28x4
    /// decode (0.336 vs 0.295) and tied at M16 (0.068 vs 0.069), 2026-12-01; gemv with PF=on took 0.0247 ms at
    /// M16 against 0.0235 off and 0.0138 vs 0.0136 at M1, later that day (the second register set only raised
    /// the register count). PF=on stays in the knob space for the tuner.
    pub(super) fn prefetch(&self) -> bool {
        self.pf == Pf::On
    }

    /// `XA`: the activations' lookahead in quads; `None` for 0 (auto).
    pub(super) fn xa_quads(&self) -> Option<u32> {
        (self.xa != 0).then_some(self.xa)
    }

    /// The record's value of knob `name` as a record holds it (for the messages that name knob values).
    pub(in crate::mx) fn shown(&self, name: &str) -> String {
        self.to_knobs().0.get(name).map(|v| v.to_string()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The declaration gives the space, the accepted values and the default record of the string-knob code it
    /// replaced (axes in the same order: the tuner's and `k3k fingerprint --sample`'s points depend on it).
    #[test]
    fn the_declaration_keeps_the_space_and_defaults() {
        let s = knob_space();
        let axes: Vec<&str> = s.axes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            axes,
            [
                "BN", "BM", "BK", "STAGES", "WA", "WB", "SPLIT", "CPS", "SK", "TS", "RASTER", "MMA", "DEC", "PATH",
                "FIN", "PF", "MINB", "GR", "L2PF", "COPY", "XA"
            ]
        );
        assert_eq!(s.size(), 5 * 3 * 5 * 3 * 3 * 2 * 6 * 2 * 2 * 2 * 3 * 2 * 4 * 2 * 2 * 3 * 3 * 3 * 2 * 2);
        let accepted: Vec<String> = s.accepted.iter().map(|a| format!("{}={:?}", a.name, a.values)).collect();
        // (The ninth, PDL, came after the string-knob code.)
        assert_eq!(accepted.len(), 9, "{accepted:?}");
        let d = default_knobs();
        assert_eq!(
            d.to_string(),
            "BK=0,BM=0,BN=0,COPY=auto,CPS=0,DEC=auto,DQ=auto,FIN=auto,GR=0,L2PF=auto,MINB=0,MMA=auto,PATH=auto,\
             PF=auto,RASTER=m,SK=0,SPLIT=0,STAGES=0,TS=0,WA=0,WB=0,XA=0"
        );
        // Written back: the default record plus the absent meanings of the knobs it leaves out.
        let back = MatKnobs::from_knobs(&d).unwrap().to_knobs();
        let extra = d.clone().with("DQP", 0u32).with("DQU", 0u32).with("F8V", 0u32).with("TURN", "mma");
        assert_eq!(back, extra.with("XDQ", "auto").with("PDL", false));
    }

    /// An older record (no PATH, FIN, PF, MINB, GR, ...) reads with their legacy meanings; one without the shape
    /// knobs reads too (the in-kernel paths refuse it, MMA=fp8 takes 0).
    #[test]
    fn absent_knobs_take_their_legacy_meanings() {
        let old = Knobs::new()
            .with("BN", 64i64)
            .with("BM", 16i64)
            .with("BK", 128i64)
            .with("STAGES", 4i64)
            .with("WA", 4i64)
            .with("WB", 1i64)
            .with("SPLIT", 0i64)
            .with("CPS", 0i64)
            .with("RASTER", "m")
            .with("MMA", "auto")
            .with("DEC", "auto");
        let k = MatKnobs::from_knobs(&old).unwrap();
        assert_eq!((k.path, k.fin, k.pf, k.minb, k.gr, k.l2pf), (None, None, Pf::Auto, 1, 0, L2pf::Auto));
        assert!(!k.fin_last(true) && k.fin_in_kernel() && !k.prefetch() && !k.copy_bulk() && !k.act_tile());
        assert_eq!((k.dq, k.turn, k.f8v), (Dq::Tile, Turn::Mma, 0));
        let fp8 = MatKnobs::from_knobs(&Knobs::new().with("MMA", "fp8").with("F8V", 6i64)).unwrap();
        assert_eq!((fp8.bn, fp8.raster, fp8.mma), (None, None, Some(Mma::Fp8)));
        assert!(matches!(fp8.raster_m(), Err(OpError::Knob(KnobError::Missing { .. }))));
        assert!(matches!(pick(fp8.bm, "BM", 16), Err(OpError::Knob(KnobError::Missing { .. }))));
        assert_eq!(pick(Some(0), "BM", 16).unwrap(), 16);
    }

    /// Every record of the tuning results (older ones lack PATH, FIN, PF, MINB, GR, L2PF, ...) reads, and the
    /// record written back from it holds every knob it held, at the same value.
    #[test]
    fn the_tuned_records_read() {
        let mut n = 0;
        for gpu in ["nvidia-h200", "nvidia-h100-80gb-hbm3"] {
            let path = format!("{}/../results/{gpu}/mxfp4_matmul.json", env!("CARGO_MANIFEST_DIR"));
            let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            for entry in file["entries"].as_array().unwrap() {
                for cand in entry["candidates"].as_array().unwrap() {
                    let rec: Knobs = serde_json::from_value(cand["knobs"].clone()).unwrap();
                    let back = MatKnobs::from_knobs(&rec).unwrap_or_else(|e| panic!("{rec}: {e}")).to_knobs();
                    for (name, v) in &rec.0 {
                        assert_eq!(back.0.get(name), Some(v), "{rec}: {name}");
                    }
                    n += 1;
                }
            }
        }
        assert!(n > 1000, "{n} records");
    }

    /// A bad value is refused naming the knob and the values it takes.
    #[test]
    fn bad_values_name_the_knob_and_the_values() {
        let bad = |name: &str, v: &str| MatKnobs::from_knobs(&default_knobs().with(name, v)).unwrap_err().to_string();
        assert!(bad("PATH", "fast").contains("PATH must be auto, tile, stream, gemv or dq_gemm, got fast"));
        assert!(bad("DEC", "nibbles").contains("DEC must be auto, expr or bits, got nibbles"));
        assert!(bad("TURN", "both").contains("TURN must be mma or ffma, got both"));
        assert!(bad("L2PF", "big").contains("L2PF must be auto or a number, got big"));
        let e = MatKnobs::from_knobs(&default_knobs().with("SK", 2i64)).unwrap().stream_k(&Knobs::new());
        assert!(e.unwrap_err().to_string().contains("SK=2: 0 or 1"));
    }
}
