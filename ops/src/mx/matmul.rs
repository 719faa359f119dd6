//! `mxfp4_matmul` (SPEC 2.2): `y[M, N] = x[M, K] · dequant(w)[N, K]^T` with MXFP4 weights, bf16 activations,
//! f32 accumulation and bf16 output; dense, or grouped over ragged experts (`w: [G, N, K]`, rows of x permuted
//! by expert, `offs` as in SPEC 2.1), with the epilogues of `latent_moe_gemm` (SiTU-GLU / SwiGLU over the two
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
        .axis("CPS", "0: one CTA per tile (hardware-scheduled); n: a persistent grid of n CTAs per SM", [0i64, 4])
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
             GR 128-column quads, the warps' partials summed in shared memory, one launch; bf16 activations); dq_gemm (prefill, \
             `mx::prefill`): a bandwidth-bound kernel dequantizes all weights once into a bf16 scratch of \
             2*G*N*K bytes (44 MB at N6144 K3584; + 2*M*K with MXFP8 activations, dequantized the same way), then \
             the latent_moe_gemm kernel runs on it (BM/BN/BK/STAGES/RASTER/MMA are its knobs, WA/WB its WM/WN; \
             0 = its defaults); auto: dense with at most 16 tokens and bf16 activations: gemv (else stream for \
             BM <= 16, packed, no GLU, when explicit knobs rule gemv out); grouped decode with at most 8 tokens per \
             expert: gemv (a prediction for the register-ring kernel: the session-4 gemv lost to tile at 28 x 4); dq_gemm with every other knob automatic and at least 2 128-row token \
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
             a 16-row register ring that fits, else none",
            [0i64, 4],
        )
        .axis(
            "GR",
            "PATH=gemv register ring: slots per warp, one 128-column quad of the tile's rows each (16 bytes per lane and \
             row), loaded GR quads ahead of their use (1..=8, with BN/16 x GR <= 8); 0 = auto: 4 slots of 16 rows \
             (8 with PF=on), fewer for wider tiles; 0 on the other paths",
            [0i64, 2, 8],
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
}

impl Cfg {
    /// As knobs (what kernels record and results report).
    pub fn knobs(&self) -> Knobs {
        Knobs::new()
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
            .with("GR", self.ring)
    }
    /// Shared memory of the main kernel, bytes (what `Kernel::shared_bytes` will report, up to alignment).
    pub fn shared_bytes(&self, packed: bool) -> usize {
        let al = |b: usize| b.next_multiple_of(128);
        let st = self.stages as usize;
        let (bn, bm, bk) = (self.bn as usize, self.bm as usize, self.bk as usize);
        let _ = packed;
        let al1k = |b: usize| b.next_multiple_of(1024);
        if self.gemv {
            // The reduced [BN, 16 + 1] tile and one [rows per statement, BM] f32 partial per warp.
            return al(bn * (bm.max(16) + 1) * 4)
                + al((self.wa + gemv_stage_tiles(self)) as usize * bn * bm * 4)
                + if self.fused && self.split > 1 { al(4) } else { 0 };
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

/// PATH=gemv with `STAGES` >= 3 ([`Stmt::Fp4Gemv`] `staged`): the `[BN, BM]` f32 tiles of `spart` past the WA
/// partial tiles that hold the warps' cp.async stages (16 + WA x STAGES x rows/16 x 1280 bytes; one statement
/// at a time, so a GLU tile's two statements share them); 0 for the register ring.
fn gemv_stage_tiles(c: &Cfg) -> u32 {
    if !c.gemv || c.stages < 3 {
        return 0;
    }
    let rows = c.bn; // GLU halves need half of it: the bound is safe either way
    let need = 16 + c.wa * c.stages * (rows / 16).max(1) * 1280;
    need.div_ceil(c.bn * c.bm * 4)
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
    if !knobs.0.contains_key("FIN") {
        return Ok(false);
    }
    match knobs.str("FIN")? {
        "auto" => Ok(auto_last),
        "kernel" => Ok(false),
        "last" => Ok(true),
        other => Err(OpError::InvalidKnobs {
            op: OP,
            knobs: knobs.to_string(),
            why: format!("FIN={other}: auto, kernel or last"),
        }),
    }
}

/// `PF` (the stream and gemv register pipelines): `on`; `off`, `auto` and an absent knob mean off. Auto is off
/// from the H200 runs of 2026-12-01 (results/bench/nvidia-h200/NOTES.md): the pipelined stream lost at M1
/// (0.0355 vs 0.0310 ms) and the 28x4 decode (0.336 vs 0.295) and tied at M16 (0.068 vs 0.069), session 3 call
/// 3; gemv with PF=on took 0.0247 ms at M16 against 0.0235 off and 0.0138 vs 0.0136 at M1, session 4 call 4 (the
/// second register set only raised the register count). PF=on stays in the knob space for the tuner.
fn prefetch_knob(knobs: &Knobs) -> Result<bool, OpError> {
    if !knobs.0.contains_key("PF") {
        return Ok(false);
    }
    match knobs.str("PF")? {
        "auto" | "off" => Ok(false),
        "on" => Ok(true),
        other => {
            Err(OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why: format!("PF={other}: auto, on or off") })
        }
    }
}

fn pick(k: &Knobs, name: &str, auto: u32) -> Result<u32, OpError> {
    let v = k.u32(name)?;
    Ok(if v == 0 { auto } else { v })
}

/// Resolve knobs for a problem: explicit values are kept, zeros are chosen from the shape (decode: narrow
/// token tiles and a K split that gives about two waves of tiles when there are few; prefill: 128x128
/// tiles), then the combination is validated.
pub fn resolve(spec: &MatSpec, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
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
    };
    c.cps = knobs.u32("CPS")?;
    // CTAs resident per SM: the persistent count, else an estimate from shared memory (registers permitting).
    let resident =
        if c.cps > 0 { c.cps as usize } else { (200 * 1024 / c.shared_bytes(spec.packed).max(1)).clamp(1, 4) };
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

/// PATH=gemv: `Some(true)` explicit, `Some(false)` automatic (at most 16 tokens per group with bf16
/// activations when no other explicit knob asks for another path's shape: MMA=wgmma, WB > 1, a BM other than
/// 8 or 16), `None` another path.
fn gemv_wanted(spec: &MatSpec, knobs: &Knobs, sh: &ShapeFacts) -> Result<Option<bool>, OpError> {
    let Some(_) = knobs.0.get("PATH") else { return Ok(None) };
    Ok(match knobs.str("PATH")? {
        "gemv" => Some(true),
        // Grouped: at most 8 tokens per expert. The session-4 gemv kernel lost at 28 experts x 4 tokens (0.531 ms
        // against the tile path's 0.224 on the H200, 2026-12-01); the register-ring kernel with one streaming warp
        // per 16-row tile is predicted at ~0.10-0.13 ms there (SASS: ~240 instructions per 1 KB quad step, 96 KB
        // in flight per SM), a prediction until the GPU measures it.
        "auto" => (sh.max_rows <= 16
            && (!spec.grouped || sh.max_rows <= 8)
            && !spec.act8
            && knobs.0.get("MMA").is_none_or(|_| knobs.str("MMA").is_ok_and(|m| m != "wgmma"))
            && matches!(knobs.u32("WB")?, 0 | 1)
            && matches!(knobs.u32("BM")?, 0 | 8 | 16))
        .then_some(false),
        _ => None,
    })
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
    // H200 (session 17, calls 1-3, packed layout v2, one bench run each, 14 and 14 knob sets): 32-row CTAs of 4
    // warps, each warp a 3-stage cp.async ring of 256-column batches, 5 CTAs per SM (94 registers, no spill):
    // 0.1194 ms, against 0.1278 for the tuned point of call 1 (BK=512, MINB=4), 0.1458 for one-warp CTAs streaming
    // all of K, and 0.1892 for the former automatic choice (one-warp 16-row CTAs, an 8-slot register ring). With
    // the GLU epilogue (16 rows per half) the same knobs: 0.1462 ms against 0.1529 at MINB=4.
    let tiles16: usize = sh.counts.iter().map(|&r| r.div_ceil(bm as usize) * sh.n_out.div_ceil(16)).sum();
    let many = bm == 8 && tiles16 >= 12 * ASSUMED_SMS;
    let bn = pick(knobs, "BN", if many { 32 } else { unit })?;
    let rows = if glu { bn / 2 } else { bn };
    let bk = pick(
        knobs,
        "BK",
        if many {
            256
        } else if bm == 8 {
            512
        } else {
            1024
        },
    )?;
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
    let minb = if knobs.0.contains_key("MINB") { knobs.u32("MINB")? } else { 1 };
    // STAGES: 1 or 2 = the register ring of GR slots; 3..=8 = the shared-memory ring of that many cp.async stages
    // per warp (`Stmt::Fp4Gemv` staged; GR is then unused and recorded as the stage count); 0 (or none) = auto:
    // 3 stages for many tiles and for dense 16-token problems without a GLU epilogue (session 17, calls 2-3: M16
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
    // MINB auto (0): 5 CTAs per SM for many tiles (above), 4 for the automatic staged ring of dense problems; else
    // three CTAs per SM (80 registers at 7 warps, 168 at 4) for 16 rows per statement where ptxas fits the register
    // ring without spills (8 tokens: at most 3 slots on more than 4 warps; at most 4 warps: 8 slots at 8 tokens, 4
    // at 16; not with a GLU epilogue: two statements, and 24 spilled bytes at 28 x 4 under the cap), else uncapped.
    let fits3 = stages < 3 && !glu && if wa <= 4 { ring <= if bm == 8 { 8 } else { 4 } } else { bm == 8 && ring <= 3 };
    let minb = match minb {
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
        fused: fin_last && split > 1,
        prefetch,
        min_blocks: if minb <= 1 { 0 } else { minb },
        ring,
    };
    validate(spec, &c, knobs)?;
    Ok(c)
}

fn validate(spec: &MatSpec, c: &Cfg, knobs: &Knobs) -> Result<(), OpError> {
    let invalid = |why: String| Err(OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why });
    let glu = spec.epilogue.is_glu();
    if c.gemv {
        let rows = if glu { c.bn / 2 } else { c.bn };
        if spec.act8 || c.wgmma || c.wb != 1 {
            return invalid("PATH=gemv needs bf16 activations, MMA=sync and WB=1".into());
        }
        if !matches!(c.bm, 8 | 16) || !matches!(c.bk, 128 | 256 | 512 | 1024) {
            return invalid(format!(
                "PATH=gemv needs BM 8 or 16 and BK 128, 256, 512 or 1024 (got BM={}, BK={})",
                c.bm, c.bk
            ));
        }
        if rows == 0
            || !rows.is_multiple_of(16)
            || rows > 64
            || !(1..=8).contains(&c.ring)
            // (The staged ring keeps its stages in shared memory: only the register ring is capped.)
            || (c.stages < 3 && rows / 16 * c.ring > 8)
        {
            return invalid(format!(
                "PATH=gemv needs BN{} a multiple of 16, at most 64, and GR in 1..=8 with BN{}/16 x GR <= 8 ring \
                 register blocks (got BN={}, GR={})",
                if glu { "/2" } else { "" },
                if glu { "/2" } else { "" },
                c.bn,
                c.ring
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
        let smem = c.shared_bytes(spec.packed);
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
    let smem = c.shared_bytes(spec.packed);
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
        if spec.packed { "_packed" } else { "" },
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

/// Build the main kernel. Tensor arguments: `x: [M, K] bf16`; `wq: [G, N, KW] u32` (dense: `[N, KW]`; the
/// natural layout's bytes read as little-endian words, or the packed layout); `ws: [G, N, KB] u8`; grouped: `offs: [G] i32`; fused epilogue:
/// `p: [M] f32` (with `row_scale`) and `y: [M, NO] bf16` (NO = N, or N/2 = `NH` with a GLU epilogue);
/// `SPLIT > 1`: `part: [S, M, N] f32` instead. The launcher guarantees K = 8 KW = 32 KB and N = 2 NH.
pub fn build_main(spec: &MatSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let glu = spec.epilogue.is_glu();
    let partial = c.split > 1;
    let threads = 32 * c.wa * c.wb;
    let mut b = KernelBuilder::new(&kernel_name("mxfp4_mm", spec, c, partial), threads);
    b.knobs(c.knobs());
    b.min_blocks_per_sm(c.min_blocks);
    let m = b.dim("M");
    let n = b.dim("N");
    let kb = b.dim("KB");
    // K: bound by x's shape, or (MXFP8 activations, no [M, K] tensor) K = 32 KB.
    let kd = if spec.act8 { kb.clone() * 32i64 } else { b.dim("K") };
    // Weight elements are always moved and read as 32-bit words (eight nibbles): one shared load serves
    // several values of a thread.
    let kq = b.dim("KW");
    let qdt = DType::U32;
    // Activations: bf16 `x: [M, K]`, or MXFP8 `xq: [M, K/4]` (E4M3 bytes read as u32 words) and `xs: [M, KB]`.
    let (x, xs) = if spec.act8 {
        let kx = b.dim("KX");
        let xq = b.tensor("xq", DType::U32, &[m.clone(), kx], Access::Read);
        (xq, Some(b.tensor("xs", DType::U8, &[m.clone(), kb.clone()], Access::Read)))
    } else {
        (b.tensor("x", DType::Bf16, &[m.clone(), kd.clone()], Access::Read), None)
    };
    let (g_count, wq, ws, offs) = if spec.grouped {
        let g = b.dim("G");
        let wq = b.tensor("wq", qdt, &[g.clone(), n.clone(), kq.clone()], Access::Read);
        let ws = b.tensor("ws", DType::U8, &[g.clone(), n.clone(), kb.clone()], Access::Read);
        let offs = b.tensor("offs", DType::I32, std::slice::from_ref(&g), Access::Read);
        (g, wq, ws, Some(offs))
    } else {
        let wq = b.tensor("wq", qdt, &[n.clone(), kq.clone()], Access::Read);
        let ws = b.tensor("ws", DType::U8, &[n.clone(), kb.clone()], Access::Read);
        (Expr::Int(1), wq, ws, None)
    };
    // Output width: N, or N/2 with a GLU epilogue (bound by y's shape; the partial output binds only N).
    let fused = partial && c.fused;
    let n_out = match (glu, partial && !fused) {
        (false, _) => n.clone(),
        (true, false) => b.dim("NH"),
        (true, true) => n.clone() / 2i64,
    };
    // FIN=last: the partials, the tiles' arrival counters `sem: [T] i32` (zero before the launch, and left
    // zero: the last CTA of a tile resets its counter), then `p` and `y` as without a split.
    let mut fin = None;
    let (p, out) = if partial {
        let s = b.dim("S");
        let access = if fused { Access::ReadWrite } else { Access::Write };
        let part = b.tensor("part", DType::F32, &[s, m.clone(), n.clone()], access);
        if fused {
            let t = b.dim("T");
            let sem = b.tensor("sem", DType::I32, &[t], Access::ReadWrite);
            let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
            let y = b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write);
            fin = Some((sem, y));
            (p, part)
        } else {
            (None, part)
        }
    } else {
        let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
        (p, b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write))
    };
    let num_sms = b.int_arg(NUM_SMS);

    let (bn, bm, bk, st) = (c.bn, c.bm, c.bk, c.stages);
    let bno = if glu { bn / 2 } else { bn };
    let warps = [c.wa, c.wb];
    let words_per_row = bk / 8;
    // PATH=stream: no shared weight stages (the words go global -> registers).
    let sqs = (!c.stream && !c.gemv).then(|| {
        (
            b.shared("sq", qdt, bn, words_per_row, st, Swizzle::Xor16B),
            b.shared("ss", DType::U8, bn, bk / 32, st, Swizzle::None),
        )
    });
    // The bf16 x tile: STAGES slots filled by cp.async, or (MXFP8) one slot per product in flight filled by the
    // on-chip conversion of the E4M3 words and scales staged in `sxq` / `sxs`.
    // (PATH=gemv reads the activations from global memory.)
    let sx = (!c.gemv).then(|| {
        b.shared("sx", DType::Bf16, bm, bk, if spec.act8 { if c.wgmma { 2 } else { 1 } } else { st }, Swizzle::Xor16B)
    });
    let sx8 = spec.act8.then(|| {
        (
            b.shared("sxq", DType::U32, bm, bk / 4, st, Swizzle::Xor16B),
            b.shared("sxs", DType::U8, bm, bk / 32, st, Swizzle::None),
        )
    });
    // mma.sync path: the accumulator is [weight rows, tokens], transposed through `sacc` for the epilogue.
    let mut sync = None;
    // wgmma path: the accumulator is [tokens, output columns] (gate and up halves apart with a GLU epilogue).
    let mut wg = None;
    if c.wgmma {
        let sw = b.shared("sw", DType::Bf16, bn, bk, 2, Swizzle::Xor16B);
        let acc = b.tile("acc", DType::F32, bm, bno, [c.wa, 1]);
        let acc_up = glu.then(|| b.tile("acc_up", DType::F32, bm, bno, [c.wa, 1]));
        let pv = (spec.row_scale && !partial).then(|| b.vec("p_rows", bm, [c.wa, 1]));
        // DEC=bits: the stage's [BN, BK] weights decoded into registers, then stored to `sw`.
        let wreg = c.dec_bits.then(|| b.tile("wdec", DType::Bf16, bn, bk, [c.wa, 1]));
        wg = Some((sw, acc, acc_up, pv, wreg));
    } else {
        // PATH=gemv: 8-token tiles keep the 16-row epilogue tiles (their rows past 8 are never valid).
        let bmt = bm.max(16);
        let sacc = b.shared("sacc", DType::F32, bn, bmt + 1, 1, Swizzle::None);
        let acc = (!c.gemv).then(|| b.tile("acc", DType::F32, bn, bm, warps));
        // The decoded weights of one 32-wide block (PATH=stream: of the whole BK slice).
        let wt = (!c.gemv).then(|| b.tile("w", DType::Bf16, bn, if c.stream { bk } else { 32 }, [c.wa, 1]));
        // Output tile [BM, BNO] (tokens x output columns) on as many warps along columns as divide it.
        let yw = [1u32, 2, 4, 8, 16]
            .into_iter()
            .rev()
            .find(|w| (c.wa * c.wb).is_multiple_of(*w) && bno.is_multiple_of(8 * w))
            .unwrap_or(1);
        let yt = b.tile("y", DType::F32, bmt, bno, [1, yw]);
        let pv = (spec.row_scale && (!partial || fused)).then(|| b.vec("p_rows", bmt, [1, yw]));
        // FIN=last: the sums of the gate (or only) and up halves of the tile's partials, and the block's view of
        // its tile's arrival count.
        let sums = fused.then(|| {
            let ys = b.tile("ysum", DType::F32, bmt, bno, [1, yw]);
            let us = glu.then(|| b.tile("usum", DType::F32, bmt, bno, [1, yw]));
            (ys, us, b.shared("arrived", DType::I32, 1, 1, 1, Swizzle::None))
        });
        // PATH=gemv: the warps' partials of one `Fp4Gemv` (one per GLU half).
        let spart = c.gemv.then(|| b.shared("spart", DType::F32, bn, bm, c.wa + gemv_stage_tiles(c), Swizzle::None));
        sync = Some((sacc, acc, wt, yt, pv, sums, spart));
    }

    let group_start = |g: &Expr| -> Expr {
        match offs {
            Some(o) => Expr::select(g.gt(0i64), Expr::load(o, g - 1i64), Expr::Int(0)),
            None => Expr::Int(0),
        }
    };
    let group_end = |g: &Expr| -> Expr {
        match offs {
            Some(o) => Expr::load(o, g.clone()),
            None => m.clone(),
        }
    };
    let n_tiles = n_out.ceil_div(bno as i64);
    let split = c.split as i64;
    if c.gemv && c.cps == 0 && !fused {
        b.grid(n_tiles.clone() * split, g_count.clone(), 1i64);
    } else if c.cps > 0 {
        b.grid(num_sms * c.cps as i64, 1i64, 1i64);
    } else {
        // One CTA per tile: an upper bound of the tile count from the shapes (sum over groups of
        // ceil(rows/BM) <= ceil(M/BM) + G); CTAs past the real count exit at once.
        let groups_extra = if spec.grouped { g_count.clone() } else { Expr::Int(0) };
        b.grid((m.ceil_div(bm as i64) + groups_extra) * n_tiles.clone() * split, 1i64, 1i64);
    }
    // K range of one split: a multiple of BK.
    let kchunk = b.let_("kchunk", kd.ceil_div(split * bk as i64) * bk as i64);
    // One tile: group `gsel` (its rows from `row0`, `rows_g` of them), K split `ks`, token tile `mt`, weight tile
    // `nt`; `t` the tile's index in the flat order (the split-K arrival counters are per `t / SPLIT`).
    let tile_body = |b: &mut KernelBuilder,
                     t: Expr,
                     gsel: Expr,
                     row0: Expr,
                     rows_g: Expr,
                     ks: Expr,
                     mt: Expr,
                     nt: Expr| {
        let m0 = b.let_("m0", mt * bm as i64);
        let n0 = b.let_("n0", nt * bno as i64);
        // PATH=gemv: at most BM (8-token tiles keep 16-row epilogue tiles).
        let rows_valid =
            b.let_("rows_valid", if c.gemv { (rows_g - m0.clone()).min(bm as i64) } else { rows_g - m0.clone() });
        let kbeg = b.let_("kbeg", &ks * kchunk.clone());
        let kend = b.let_("kend", (&kbeg + kchunk.clone()).min(kd.clone()));
        let k_tiles = b.let_("k_tiles", (&kend - kbeg.clone()).max(0i64).ceil_div(bk as i64));
        let wrow = b.let_("wrow", &gsel * n.clone());

        // Load K tile `kt` into pipeline slot `slot` (= kt % STAGES).
        let load_stage = |b: &mut KernelBuilder, kt: Expr, slot: Expr| {
            let k0 = b.let_("k0", &kbeg + kt * bk as i64);
            let kleft = &kend - k0.clone();
            // Weight rows: [0, BN) from n0, or the gate half from n0 and the up half from NH + n0.
            let halves: Vec<(u32, Expr, Expr)> = if glu {
                vec![
                    (0, n0.clone(), n_out.clone() - n0.clone()),
                    (bn / 2, &n_out + n0.clone(), n_out.clone() - n0.clone()),
                ]
            } else {
                vec![(0, n0.clone(), n.clone() - n0.clone())]
            };
            let hrows = if glu { bn / 2 } else { bn };
            for (r0, nrow, nvalid) in halves.into_iter().filter(|_| sqs.is_some()) {
                let (sq, ss) = sqs.expect("tile path");
                let (qoff, qcols, qvec) = ((&wrow + nrow.clone()) * kq.clone() + &k0 / 8i64, &kleft / 8i64, 4);
                let dq = b.window(sq, slot.clone(), r0, 0, hrows, words_per_row);
                b.copy_async(dq, view(wq, qoff, kq.clone(), nvalid.clone(), qcols, qvec));
                let ds = b.window(ss, slot.clone(), r0, 0, hrows, bk / 32);
                let soff = (&wrow + nrow) * kb.clone() + &k0 / 32i64;
                b.copy_async(ds, view(ws, soff, kb.clone(), nvalid, &kleft / 32i64, scale_vec(spec, c)));
            }
            if let (Some((sxq, sxs)), Some(xs)) = (sx8, xs) {
                let kx = kd.clone() / 4i64;
                let kb4 = kd.clone() / 32i64;
                let rows = &row0 + m0.clone();
                let dq = b.slot(sxq, slot.clone());
                b.copy_async(dq, view(x, &rows * kx.clone() + &k0 / 4i64, kx, rows_valid.clone(), &kleft / 4i64, 4));
                let ds = b.slot(sxs, slot);
                let svec = scale_vec(spec, c);
                b.copy_async(
                    ds,
                    view(xs, &rows * kb4.clone() + &k0 / 32i64, kb4, rows_valid.clone(), &kleft / 32i64, svec),
                );
            } else {
                let dx = b.slot(sx.expect("x tile"), slot);
                b.copy_async(
                    dx,
                    view(x, (&row0 + m0.clone()) * kd.clone() + k0, kd.clone(), rows_valid.clone(), kleft, 8),
                );
            }
        };

        if let Some((sacc, acc, wt, yt, pv, sums, spart)) = sync {
            if let (Some(acc), Some(wt)) = (acc, wt) {
                b.map(acc, 0.0f64);
                for s in 0..st - 1 {
                    let s = Expr::Int(s as i64);
                    b.if_(s.lt(k_tiles.clone()), |b| load_stage(b, s.clone(), s.clone()));
                    b.commit();
                }
                // The slot of `kt` kept as a wrapping counter (no 64-bit `%` by a non-power of two per iteration).
                let rslot = b.let_var("rslot", 0i64);
                b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
                    b.wait(st - 2);
                    b.barrier();
                    let next = &kt + (st - 1) as i64;
                    // (kt + STAGES - 1) % STAGES
                    let nslot =
                        Expr::select(Expr::Var(rslot).eq(0i64), Expr::Int((st - 1) as i64), Expr::Var(rslot) - 1i64);
                    b.if_(next.lt(k_tiles.clone()), |b| load_stage(b, next.clone(), nslot));
                    b.commit();
                    let slot = b.let_("slot", Expr::Var(rslot));
                    let xslot = if let Some((sxq, sxs)) = sx8 {
                        dequant_x(b, sxq, sxs, sx.expect("x tile"), &slot, &Expr::Int(0), &rows_valid, bm, bk, threads);
                        b.barrier();
                        Expr::Int(0)
                    } else {
                        slot.clone()
                    };
                    if c.stream {
                        // The slice's words and scales straight into registers, then one product over BK.
                        let k0 = b.let_("k0", &kbeg + kt.clone() * bk as i64);
                        let nvalid = n.clone() - n0.clone();
                        // The packed words and the scales of the K slice from `k` on (masked at this split's end).
                        let slice = |k: &Expr| {
                            let kleft = &kend - k.clone();
                            let qv = view(
                                wq,
                                (&wrow + n0.clone()) * kq.clone() + k / 8i64,
                                kq.clone(),
                                nvalid.clone(),
                                &kleft / 8i64,
                                4,
                            );
                            let sv = view(
                                ws,
                                (&wrow + n0.clone()) * kb.clone() + k / 32i64,
                                kb.clone(),
                                nvalid.clone(),
                                &kleft / 32i64,
                                1,
                            );
                            (qv, sv)
                        };
                        let (qv, sv) = slice(&k0);
                        if c.prefetch {
                            // The next slice's views (past this split's K range on the last slice: all masked).
                            let (nq, ns) = slice(&(&k0 + bk as i64));
                            let pf = Fp4Prefetch { words: nq, scales: ns, first: kt.eq(0i64) };
                            b.dequant_fp4_stream_prefetch(wt, qv, sv, spec.packed, spec.fold, spec.finite, pf);
                        } else {
                            b.dequant_fp4_stream(wt, qv, sv, spec.packed, spec.fold, spec.finite);
                        }
                        let xw = b.window(sx.expect("x tile"), xslot.clone(), 0, 0, bm, bk);
                        b.mma(acc, Operand::Reg(wt), Operand::Shared { src: xw, transpose: true });
                    }
                    for sub in (0..bk / 32).filter(|_| !c.stream) {
                        let (sq, ss) = sqs.expect("tile path");
                        if c.dec_bits {
                            let q = b.window(sq, slot.clone(), 0, sub * 4, bn, 4);
                            let s = b.window(ss, slot.clone(), 0, sub, bn, 1);
                            b.dequant_fp4(wt, q, s, spec.packed, spec.fold, spec.finite);
                        } else {
                            b.map(wt, decode_expr(spec, sq, ss, &slot, Expr::Int(sub as i64), Expr::ColIdx));
                        }
                        let sub = sub as i64;
                        let xw = b.window(sx.expect("x tile"), xslot.clone(), 0, (sub * 32) as u32, bm, 32);
                        b.mma(acc, Operand::Reg(wt), Operand::Shared { src: xw, transpose: true });
                    }
                    let inc = Expr::Var(rslot) + 1i64;
                    b.assign(rslot, Expr::select(inc.eq(st as i64), Expr::Int(0), inc));
                });
                b.wait(0);
                // Epilogue: transpose the [BN, BM] accumulator through shared memory.
                let sw = b.window(sacc, 0i64, 0, 0, bn, bm);
                b.store(acc, Place::Shared(sw));
                b.barrier();
            } else {
                // PATH=gemv: one statement per weight half over this split's K range, reduced into `sacc`.
                let spart = spart.expect("gemv partials");
                let kw_left = (&kend - kbeg.clone()) / 8i64;
                let kb_left = (&kend - kbeg.clone()) / 32i64;
                let halves: Vec<(u32, Expr, Expr)> = if glu {
                    vec![
                        (0, n0.clone(), n_out.clone() - n0.clone()),
                        (bn / 2, &n_out + n0.clone(), n_out.clone() - n0.clone()),
                    ]
                } else {
                    vec![(0, n0.clone(), n.clone() - n0.clone())]
                };
                let hrows = if glu { bn / 2 } else { bn };
                for (r0, nrow, nvalid) in halves {
                    let qv = view(
                        wq,
                        (&wrow + nrow.clone()) * kq.clone() + &kbeg / 8i64,
                        kq.clone(),
                        nvalid.clone(),
                        kw_left.clone(),
                        4,
                    );
                    let sv =
                        view(ws, (&wrow + nrow) * kb.clone() + &kbeg / 32i64, kb.clone(), nvalid, kb_left.clone(), 1);
                    let xv = view(
                        x,
                        (&row0 + m0.clone()) * kd.clone() + kbeg.clone(),
                        kd.clone(),
                        rows_valid.clone(),
                        &kend - kbeg.clone(),
                        8,
                    );
                    let out = b.window(sacc, 0i64, r0, 0, hrows, bm);
                    let flags = Fp4Flags { packed: spec.packed, fold: spec.fold, finite: spec.finite };
                    if c.stages >= 3 {
                        b.fp4_gemv_staged(out, spart, qv, sv, xv, flags, bk / 128, c.stages);
                    } else {
                        b.fp4_gemv(out, spart, qv, sv, xv, flags, bk / 128, c.ring);
                    }
                }
            }
            let at = |row_off: u32| Expr::shared_load(sacc, 0i64, Expr::ColIdx + row_off as i64, Expr::RowIdx);
            let rows_base = &row0 + m0.clone();
            if partial {
                let prow = (&ks * m.clone() + rows_base.clone()) * n.clone();
                let pvec = if spec.out_vec == 2 { 2 } else { 1 };
                b.map(yt, at(0));
                b.store(
                    yt,
                    Place::Global(view(
                        out,
                        &prow + n0.clone(),
                        n.clone(),
                        rows_valid.clone(),
                        n_out.clone() - n0.clone(),
                        pvec,
                    )),
                );
                if glu {
                    b.map(yt, at(bn / 2));
                    b.store(
                        yt,
                        Place::Global(view(
                            out,
                            &prow + n_out.clone() + n0.clone(),
                            n.clone(),
                            rows_valid.clone(),
                            n_out.clone() - n0.clone(),
                            pvec,
                        )),
                    );
                }
                if let (Some((ysum, usum, arrived)), Some((sem, y))) = (sums, fin) {
                    // Every thread's partial stores are done (barrier); thread 0 fences them (cumulative: the
                    // barrier ordered the block's stores before its fence) and counts this split in.
                    let tile_id = b.let_("tile_id", &t / split);
                    b.barrier();
                    b.threads(|b| {
                        b.if_(Expr::thread_idx().eq(0i64), |b| {
                            b.fence();
                            let target = AtomicTarget::Global { tensor: sem, index: tile_id.clone() };
                            let before = b.atomic_fetch("before", target, AtomicOp::Add, 1i64);
                            // Acquire side: the other splits' partials are read after this.
                            b.fence();
                            b.shared_store(arrived, 0i64, 0i64, 0i64, before);
                        });
                    });
                    b.barrier();
                    let last = Expr::shared_load(arrived, 0i64, 0i64, 0i64).eq(split - 1);
                    b.if_(last, |b| {
                        // Every split of this tile has arrived: reset its counter for the next launch, then sum
                        // the partials in split order (the finalize kernel's order and rounding).
                        b.threads(|b| b.if_(Expr::thread_idx().eq(0i64), |b| b.store_scalar(sem, tile_id, 0i64)));
                        b.map(ysum, 0.0f64);
                        if let Some(u) = usum {
                            b.map(u, 0.0f64);
                        }
                        let body = |b: &mut KernelBuilder, si: Expr| {
                            let base = (&si * m.clone() + rows_base.clone()) * n.clone();
                            let cols = n_out.clone() - n0.clone();
                            let src = view(out, &base + n0.clone(), n.clone(), rows_valid.clone(), cols.clone(), pvec);
                            b.load(yt, Place::Global(src));
                            b.map(ysum, Expr::Elem(ysum) + Expr::Elem(yt));
                            if let Some(u) = usum {
                                let off = &base + n_out.clone() + n0.clone();
                                b.load(yt, Place::Global(view(out, off, n.clone(), rows_valid.clone(), cols, pvec)));
                                b.map(u, Expr::Elem(u) + Expr::Elem(yt));
                            }
                        };
                        if c.split <= FINALIZE_UNROLL {
                            b.for_unrolled("s", 0i64, split, 1i64, body);
                        } else {
                            b.for_("s", 0i64, split, 1i64, body);
                        }
                        if let Some(u) = usum {
                            b.map(ysum, epilogue_expr(spec.epilogue, Expr::Elem(ysum), Expr::Elem(u)));
                        }
                        if let (Some(pv), Some(p)) = (pv, p) {
                            b.load_vec(pv, vec_view(p, rows_base.clone(), 1i64, rows_valid.clone()));
                            b.map(ysum, Expr::Elem(ysum) * Expr::RowVal(pv));
                        }
                        b.store(
                            ysum,
                            Place::Global(view(
                                y,
                                &rows_base * n_out.clone() + n0.clone(),
                                n_out.clone(),
                                rows_valid.clone(),
                                n_out.clone() - n0.clone(),
                                spec.out_vec,
                            )),
                        );
                    });
                }
            } else {
                let h = if glu { epilogue_expr(spec.epilogue, at(0), at(bn / 2)) } else { at(0) };
                b.map(yt, h);
                if let (Some(pv), Some(p)) = (pv, p) {
                    b.load_vec(pv, vec_view(p, rows_base.clone(), 1i64, rows_valid.clone()));
                    b.map(yt, Expr::Elem(yt) * Expr::RowVal(pv));
                }
                b.store(
                    yt,
                    Place::Global(view(
                        out,
                        &rows_base * n_out.clone() + n0.clone(),
                        n_out.clone(),
                        rows_valid.clone(),
                        n_out.clone() - n0.clone(),
                        spec.out_vec,
                    )),
                );
            }
        }
        if let Some((sw, acc, acc_up, pv, wreg)) = wg {
            // Warpgroup MMA pipeline (as latent_moe_gemm's): a stage's x tile is refilled two iterations after
            // its product was issued, so STAGES-2 loads and one product are in flight. Each iteration decodes
            // the stage's weights (a threads region, one 32-bit word of eight values at a time) into one of two
            // shared bf16 tiles (the one the product two iterations ago read).
            for s in 0..st - 2 {
                let s = Expr::Int(s as i64);
                b.if_(s.lt(k_tiles.clone()), |b| load_stage(b, s.clone(), s.clone()));
                b.commit();
            }
            let groups = if glu { 2 } else { 1 };
            b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
                b.wait(st - 3);
                b.barrier();
                let next = &kt + (st - 2) as i64;
                b.if_(next.lt(k_tiles.clone()), |b| load_stage(b, next.clone(), &next % st as i64));
                b.commit();
                let slot = b.let_("slot", &kt % st as i64);
                let half = b.let_("half", &kt % 2i64);
                let (sq, ss) = sqs.expect("tile path (validated: PATH=stream is MMA=sync)");
                if let Some(wr) = wreg {
                    let q = b.window(sq, slot.clone(), 0, 0, bn, bk / 8);
                    let s = b.window(ss, slot.clone(), 0, 0, bn, bk / 32);
                    b.dequant_fp4(wr, q, s, spec.packed, spec.fold, spec.finite);
                    let dst = b.window(sw, half.clone(), 0, 0, bn, bk);
                    b.store(wr, Place::Shared(dst));
                } else {
                    dequant_words(b, spec, sq, ss, sw, &slot, &half, bn, bk, threads);
                }
                let xslot = if let Some((sxq, sxs)) = sx8 {
                    dequant_x(b, sxq, sxs, sx.expect("x tile"), &slot, &half, &rows_valid, bm, bk, threads);
                    half.clone()
                } else {
                    slot.clone()
                };
                // Fence the ordinary shared stores for the async proxy (the loads just issued may stay in flight).
                b.wait(st - 2);
                b.barrier();
                let a = Operand::Shared { src: b.slot(sx.expect("x tile"), xslot), transpose: false };
                // The first product of a tile overwrites the accumulators (no zeroing instructions).
                let accumulate = kt.gt(0i64);
                crate::latent_moe_gemm::weight_products(b, acc, acc_up, a, sw, half, bn, bk, Some(accumulate));
                b.mma_wait(groups);
            });
            b.mma_wait(0);
            b.wait(0);
            // K range empty (a split past K): no product ran, the result is zero.
            b.if_(k_tiles.le(0i64), |b| {
                b.map(acc, 0.0f64);
                if let Some(u) = acc_up {
                    b.map(u, 0.0f64);
                }
            });
            let rows_base = &row0 + m0.clone();
            if partial {
                let prow = (&ks * m.clone() + rows_base.clone()) * n.clone();
                let pvec = if spec.out_vec == 2 { 2 } else { 1 };
                let cols = n_out.clone() - n0.clone();
                b.store(
                    acc,
                    Place::Global(view(out, &prow + n0.clone(), n.clone(), rows_valid.clone(), cols.clone(), pvec)),
                );
                if let Some(u) = acc_up {
                    let off = &prow + n_out.clone() + n0.clone();
                    b.store(u, Place::Global(view(out, off, n.clone(), rows_valid.clone(), cols, pvec)));
                }
            } else {
                if let Some(u) = acc_up {
                    b.map(acc, epilogue_expr(spec.epilogue, Expr::Elem(acc), Expr::Elem(u)));
                }
                if let (Some(pv), Some(p)) = (pv, p) {
                    b.load_vec(pv, vec_view(p, rows_base.clone(), 1i64, rows_valid.clone()));
                    b.map(acc, Expr::Elem(acc) * Expr::RowVal(pv));
                }
                let off = &rows_base * n_out.clone() + n0.clone();
                let cols = n_out.clone() - n0.clone();
                b.store(acc, Place::Global(view(out, off, n_out.clone(), rows_valid.clone(), cols, spec.out_vec)));
            }
        }
        // Every warp must be done with the shared tiles before the next tile's prologue overwrites them.
        b.barrier();
    };
    if c.gemv && c.cps == 0 && !fused {
        // PATH=gemv, one CTA per (weight tile, K split) of each group (grid y): no search over the groups, two
        // loads of `offs`; the CTA walks its group's token tiles (one at decode; none for an empty group).
        let gsel = Expr::block_idx(1);
        let row0 = b.let_("row0", group_start(&gsel));
        let rows_g = b.let_("rows_g", group_end(&gsel) - row0.clone());
        let local = Expr::block_idx(0);
        let ks = b.let_("ks", &local % split);
        let nt = b.let_("nt", &local / split);
        b.for_("mt", 0i64, rows_g.ceil_div(bm as i64), 1i64, |b, mt| {
            tile_body(b, Expr::Int(0), gsel.clone(), row0.clone(), rows_g.clone(), ks.clone(), mt, nt.clone());
        });
        return Ok(b.finish()?);
    }
    let total = b.let_var("total", 0i64);
    b.for_("g", 0i64, g_count.clone(), 1i64, |b, g| {
        let rows = group_end(&g) - group_start(&g);
        b.assign(total, Expr::Var(total) + rows.ceil_div(bm as i64) * n_tiles.clone() * split);
    });
    b.for_("tile", Expr::block_idx(0), total, Expr::grid_dim(0), |b, t| {
        let grp = b.let_var("grp", 0i64);
        let local = b.let_var("local", 0i64);
        let seen = b.let_var("seen", 0i64);
        b.for_("g", 0i64, g_count.clone(), 1i64, |b, g| {
            let rows = group_end(&g) - group_start(&g);
            let tg = b.let_("tg", rows.ceil_div(bm as i64) * n_tiles.clone() * split);
            b.if_(t.ge(Expr::Var(seen)).and(t.lt(Expr::Var(seen) + tg.clone())), |b| {
                b.assign(grp, g.clone());
                b.assign(local, &t - Expr::Var(seen));
            });
            b.assign(seen, Expr::Var(seen) + tg);
        });
        let gsel = Expr::Var(grp);
        let row0 = b.let_("row0", group_start(&gsel));
        let rows_g = b.let_("rows_g", group_end(&gsel) - row0.clone());
        let m_tiles = rows_g.ceil_div(bm as i64);
        let ks = b.let_("ks", Expr::Var(local) % split);
        let rest = b.let_("rest", Expr::Var(local) / split);
        let (mt, nt) = if c.raster_m {
            (&rest % m_tiles.clone(), &rest / m_tiles)
        } else {
            (&rest / n_tiles.clone(), &rest % n_tiles.clone())
        };
        tile_body(b, t, gsel, row0, rows_g, ks, mt, nt);
    });
    Ok(b.finish()?)
}

/// The decoded (bf16-exact) weight of the current element of a weight register tile: row `RowIdx` of the
/// stage's shared words `sq` and scales `ss`, column `col` (0..32) of 32-wide block `block` (a block-uniform or
/// per-warp value). Shifts and masks rather than `/` and `%`: tile coordinates are not provably non-negative,
/// and with bit operations the compiler sees which values of a thread share one word.
pub fn decode_expr(spec: &MatSpec, sq: SharedId, ss: SharedId, slot: &Expr, block: Expr, col: Expr) -> Expr {
    let bits = if spec.packed {
        // Packed: word (c%8)/2 of the block (the lane's own word), pair (c/8)%4, half c%2.
        let wi = &block * 4i64 + col.bitand(7i64).shr(1i64);
        let word = Expr::shared_load(sq, slot.clone(), Expr::RowIdx, wi);
        packed_fp4_bits(&word, col.shr(3i64).bitand(3i64), col.bitand(1i64))
    } else {
        // Natural: word c/8 of the block, nibble c%8.
        let word = Expr::shared_load(sq, slot.clone(), Expr::RowIdx, &block * 4i64 + col.shr(3i64));
        fp4_bits(word.shr(col.bitand(7i64).shl(2i64)).bitand(15i64))
    };
    let sb = Expr::shared_load(ss, slot.clone(), Expr::RowIdx, block);
    if spec.fold { bits * scale_mult(spec, sb) } else { bits * TWO_126 * e8m0(sb) }
}

/// Convert a stage's MXFP8 activations (`sxq`: E4M3 bytes as words, `sxs`: E8M0 scales) into the bf16 x tile
/// `dst[index]` (`[BM, BK]`), rows below `rows_valid` only (the others feed output rows never stored). Exact:
/// an E4M3 value times a power of two is a bf16.
#[allow(clippy::too_many_arguments)]
fn dequant_x(
    b: &mut KernelBuilder,
    sxq: SharedId,
    sxs: SharedId,
    dst: SharedId,
    slot: &Expr,
    index: &Expr,
    rows_valid: &Expr,
    bm: u32,
    bk: u32,
    threads: u32,
) {
    let wpr = (bk / 4) as i64;
    let words = bm as i64 * wpr;
    let per_thread = (words + threads as i64 - 1) / threads as i64;
    b.threads(|b| {
        b.for_unrolled("i", 0i64, per_thread, 1i64, |b, i| {
            let idx = b.let_("idx", Expr::thread_idx() + i * threads as i64);
            let r = b.let_("r", idx.shr(wpr.trailing_zeros() as i64));
            b.if_(r.lt(rows_valid.clone()).and(idx.lt(words)), |b| {
                let w = b.let_("wi", idx.bitand(wpr - 1));
                let word = b.let_("word", Expr::shared_load(sxq, slot.clone(), r.clone(), w.clone()));
                let scale = b.let_("scale", e8m0(Expr::shared_load(sxs, slot.clone(), r.clone(), w.shr(3i64))));
                for p in 0..4i64 {
                    let v = fp8_value(word.shr(8 * p).bitand(0xffi64)) * scale.clone();
                    b.shared_store(dst, index.clone(), r.clone(), w.shl(2i64) + p, v);
                }
            });
        });
    });
}

/// The folded multiplier `2^126 * 2^(e-127)` of a scale byte (without the NaN select when no byte is 255).
fn scale_mult(spec: &MatSpec, sb: Expr) -> Expr {
    if spec.finite { (sb + 126i64).shl(23i64).from_bits() } else { e8m0_times_2_126(sb) }
}

/// Decode a stage's weight words into the bf16 shared tile `dst[index]` (`[BN, BK]`): a threads region where
/// each thread takes whole 32-bit words (eight values: eight neighbouring columns in the natural layout, so one
/// address serves eight 2-byte stores; four column pairs in the packed layout) and its row's scale.
#[allow(clippy::too_many_arguments)]
fn dequant_words(
    b: &mut KernelBuilder,
    spec: &MatSpec,
    sq: SharedId,
    ss: SharedId,
    dst: SharedId,
    slot: &Expr,
    index: &Expr,
    bn: u32,
    bk: u32,
    threads: u32,
) {
    let wpr = (bk / 8) as i64;
    let words = bn as i64 * wpr;
    let per_thread = (words + threads as i64 - 1) / threads as i64;
    b.threads(|b| {
        b.for_unrolled("i", 0i64, per_thread, 1i64, |b, i| {
            let idx = b.let_("idx", Expr::thread_idx() + i * threads as i64);
            let body = |b: &mut KernelBuilder| {
                let r = b.let_("r", idx.shr(wpr.trailing_zeros() as i64));
                let w = b.let_("wi", idx.bitand(wpr - 1));
                let word = b.let_("word", Expr::shared_load(sq, slot.clone(), r.clone(), w.clone()));
                let sb = Expr::shared_load(ss, slot.clone(), r.clone(), w.shr(2i64));
                // Folded: one multiplier 2^(e-1); else the value times 2^126, then times the scale (exact both
                // ways; 2^126 * 2^(e-127) overflows f32 for e > 128).
                let mult = b.let_("mult", if spec.fold { scale_mult(spec, sb) } else { e8m0(sb) });
                for p in 0..8i64 {
                    let (col, bits) = if spec.packed {
                        // Word l of block k holds columns 2l + 8 (p / 2) + p % 2 of the block: pair p / 2, half
                        // p % 2.
                        let col = w.shr(2i64).shl(5i64) + w.bitand(3i64).shl(1i64) + (8 * (p / 2) + p % 2);
                        (col, packed_fp4_bits(&word, p / 2, p % 2))
                    } else {
                        (w.shl(3i64) + p, fp4_bits(word.shr(4 * p).bitand(15i64)))
                    };
                    let v = if spec.fold { bits * mult.clone() } else { bits * TWO_126 * mult.clone() };
                    b.shared_store(dst, index.clone(), r.clone(), col, v);
                }
            };
            if words % threads as i64 == 0 {
                body(b);
            } else {
                b.if_(idx.lt(words), body);
            }
        });
    });
}

/// The GLU activations of SPEC 2.1 as an expression of the gate `a` and up `u` values.
pub fn epilogue_expr(e: Epilogue, a: Expr, u: Expr) -> Expr {
    match e {
        Epilogue::SituGlu => (&a * 0.25f64).tanh() * 4.0f64 * a.sigmoid() * ((&u * 0.04f64).tanh() * 25.0f64),
        Epilogue::SwiGlu => a.silu() * u,
        Epilogue::None => a,
    }
}

/// Rows and columns of one finalize tile (split-K runs on decode shapes: few rows, so narrow column tiles
/// give more CTAs).
const FM: u32 = 16;
const FN: u32 = 64;
/// Up to this many splits the finalize's loop over the partials is unrolled (all loads in flight at once
/// instead of one dependent round trip per partial).
const FINALIZE_UNROLL: u32 = 16;

/// The split-K finalize kernel: `part: [S, M, N] f32` (+ `p: [M] f32`) -> `y: [M, NO] bf16`, summing the S
/// partials in order, then the epilogue. With `split` <= 16 the loop over the S = `split` partials is unrolled.
pub fn build_finalize(spec: &MatSpec, split: u32) -> Result<Kernel, OpError> {
    let glu = spec.epilogue.is_glu();
    let unrolled = split <= FINALIZE_UNROLL;
    let name = format!(
        "k3k_mxfp4_mm_finalize{}_{}_o{}{}",
        if spec.row_scale { "_p" } else { "" },
        spec.epilogue.name(),
        spec.out_vec,
        if unrolled { format!("_s{split}") } else { String::new() }
    );
    let mut b = KernelBuilder::new(&name, 128);
    let s = b.dim("S");
    let m = b.dim("M");
    let n = b.dim("N");
    let part = b.tensor("part", DType::F32, &[s.clone(), m.clone(), n.clone()], Access::Read);
    let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
    let n_out = if glu { b.dim("NH") } else { n.clone() };
    let y = b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write);
    b.grid(n_out.ceil_div(FN as i64), m.ceil_div(FM as i64), 1i64);
    let warps = [1, 4];
    let t = b.tile("t", DType::F32, FM, FN, warps);
    let ga = b.tile("gate", DType::F32, FM, FN, warps);
    let ua = glu.then(|| b.tile("up", DType::F32, FM, FN, warps));
    let pv = spec.row_scale.then(|| b.vec("p_rows", FM, warps));
    let m0 = b.let_("m0", Expr::block_idx(1) * FM as i64);
    let n0 = b.let_("n0", Expr::block_idx(0) * FN as i64);
    let rows = b.let_("rows", m.clone() - m0.clone());
    let cols = b.let_("cols", n_out.clone() - n0.clone());
    let vec = if spec.out_vec == 2 { 2 } else { 1 };
    b.map(ga, 0.0f64);
    if let Some(u) = ua {
        b.map(u, 0.0f64);
    }
    let body = |b: &mut KernelBuilder, si: Expr| {
        let base = (&si * m.clone() + m0.clone()) * n.clone();
        b.load(t, Place::Global(view(part, &base + n0.clone(), n.clone(), rows.clone(), cols.clone(), vec)));
        b.map(ga, Expr::Elem(ga) + Expr::Elem(t));
        if let Some(u) = ua {
            b.load(
                t,
                Place::Global(view(
                    part,
                    &base + n_out.clone() + n0.clone(),
                    n.clone(),
                    rows.clone(),
                    cols.clone(),
                    vec,
                )),
            );
            b.map(u, Expr::Elem(u) + Expr::Elem(t));
        }
    };
    if unrolled {
        // The launcher binds S = split (the partials tensor's first dim).
        b.for_unrolled("s", 0i64, split as i64, 1i64, body);
    } else {
        b.for_("s", 0i64, s, 1i64, body);
    }
    if let Some(u) = ua {
        b.map(ga, epilogue_expr(spec.epilogue, Expr::Elem(ga), Expr::Elem(u)));
    }
    if let (Some(pv), Some(p)) = (pv, p) {
        b.load_vec(pv, vec_view(p, m0.clone(), 1i64, rows.clone()));
        b.map(ga, Expr::Elem(ga) * Expr::RowVal(pv));
    }
    b.store(ga, Place::Global(view(y, &m0 * n_out.clone() + n0, n_out, rows, cols, vec)));
    Ok(b.finish()?)
}

// ------------------------------------------------------------------------------------------------------------
// Host API with typed errors.

/// MXFP4 weights of `groups` experts, each `[n, k]`: element bytes (natural `[G, N, K/2]` or packed
/// `[G, N, K/8]` words) and scale bytes `[G, N, K/32]`.
#[derive(Clone, Debug)]
pub struct Fp4Weights {
    pub groups: usize,
    pub n: usize,
    pub k: usize,
    pub q: WeightBytes,
    pub s: Vec<u8>,
}

/// The element storage of [`Fp4Weights`].
#[derive(Clone, Debug)]
pub enum WeightBytes {
    /// SPEC 1 layout: `[G, N, K/2]` bytes, element 2i in the low nibble.
    Natural(Vec<u8>),
    /// The [`super::pack`] layout: `[G, N, K/8]` u32 words.
    Packed(Vec<u32>),
}

impl Fp4Weights {
    /// Check K and the buffer sizes (typed errors naming the argument and the expected shape).
    pub fn validate(&self) -> Result<(), OpError> {
        check_k(OP, "K", self.k)?;
        let (g, n, k) = (self.groups, self.n, self.k);
        if g == 0 || n == 0 {
            return Err(OpError::BadInput {
                op: OP,
                arg: "w".into(),
                why: format!("G = {g} and N = {n} must be positive"),
            });
        }
        match &self.q {
            WeightBytes::Natural(q) => check_bytes(OP, "wq", q.len(), "[G, N, K/2]", &[g, n, k / 2])?,
            WeightBytes::Packed(q) => {
                check_bytes(OP, "wq (packed words)", q.len() * 4, "[G, N, K/8] u32", &[g, n, k / 2])?
            }
        }
        check_bytes(OP, "ws", self.s.len(), "[G, N, K/32]", &[g, n, k / BLOCK])
    }
    /// Group g's weights as a reference MX tensor (natural layout).
    pub fn group_tensor(&self, g: usize) -> Result<rmx::MxTensor, OpError> {
        let (n, k) = (self.n, self.k);
        let q = match &self.q {
            WeightBytes::Natural(q) => q[g * n * k / 2..(g + 1) * n * k / 2].to_vec(),
            WeightBytes::Packed(w) => super::pack::unpack(&w[g * n * k / 8..(g + 1) * n * k / 8], n, k)?,
        };
        let s = self.s[g * n * k / BLOCK..(g + 1) * n * k / BLOCK].to_vec();
        Ok(rmx::MxTensor { rows: n, k, q, s, format: MxFormat::Fp4 })
    }
}

/// The activations of a product.
#[derive(Clone, Copy, Debug)]
pub enum Act<'a> {
    /// `[M, K]` bf16.
    Bf16(&'a HostTensor),
    /// `[M, K]` MXFP8: E4M3 bytes and E8M0 scales along K.
    Mxfp8(&'a rmx::MxTensor),
}

impl Act<'_> {
    /// Rows and columns.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Act::Bf16(x) => (x.shape.first().copied().unwrap_or(0), x.shape.get(1).copied().unwrap_or(0)),
            Act::Mxfp8(t) => (t.rows, t.k),
        }
    }
}

/// Everything a product needs besides the weights.
#[derive(Clone, Debug)]
pub struct MatInputs<'a> {
    pub x: Act<'a>,
    /// Grouped: `[G]` inclusive cumulative group ends (SPEC 2.1), the last equal to M. `None`: dense (G = 1).
    pub offs: Option<&'a [i32]>,
    /// Routing weight per row.
    pub p: Option<&'a [f32]>,
    pub epilogue: Epilogue,
}

fn bad(arg: &str, why: String) -> OpError {
    OpError::BadInput { op: OP, arg: arg.into(), why }
}

/// Validate a problem and give its variant (without knobs). Typed errors: K not a multiple of 32, wrong
/// weight or scale sizes, x of the wrong dtype or shape, `offs` not non-decreasing or not ending at M, `p` of
/// the wrong length, an odd N with a GLU epilogue.
pub fn spec_for(w: &Fp4Weights, inp: &MatInputs<'_>) -> Result<(MatSpec, Vec<usize>), OpError> {
    w.validate()?;
    let m = match inp.x {
        Act::Bf16(x) => {
            if x.dtype != DType::Bf16 || x.shape.len() != 2 || x.shape[1] != w.k {
                return Err(bad(
                    "x",
                    format!("expected a [M, K = {}] bf16 matrix, got {} {:?}", w.k, x.dtype, x.shape),
                ));
            }
            x.shape[0]
        }
        Act::Mxfp8(t) => {
            if t.format != MxFormat::Fp8 || t.k != w.k {
                return Err(bad(
                    "x",
                    format!("expected MXFP8 activations with K = {}, got {:?} K = {}", w.k, t.format, t.k),
                ));
            }
            check_bytes(OP, "xq", t.q.len(), "[M, K]", &[t.rows, t.k])?;
            check_bytes(OP, "xs", t.s.len(), "[M, K/32]", &[t.rows, t.k / BLOCK])?;
            t.rows
        }
    };
    let counts = match inp.offs {
        Some(o) => {
            if o.len() != w.groups {
                return Err(bad("offs", format!("expected G = {} group ends, got {}", w.groups, o.len())));
            }
            let mut prev = 0i64;
            let mut counts = vec![];
            for (g, &e) in o.iter().enumerate() {
                if (e as i64) < prev {
                    return Err(bad(
                        "offs",
                        format!("group ends must be non-decreasing: offs[{g}] = {e} after {prev}"),
                    ));
                }
                counts.push((e as i64 - prev) as usize);
                prev = e as i64;
            }
            if prev != m as i64 {
                return Err(bad("offs", format!("the last group end must be M = {m}, got {prev}")));
            }
            counts
        }
        None => {
            if w.groups != 1 {
                return Err(bad("offs", format!("{} weight groups need group ends", w.groups)));
            }
            vec![m]
        }
    };
    if let Some(p) = inp.p
        && p.len() != m
    {
        return Err(bad("p", format!("expected M = {m} routing weights, got {}", p.len())));
    }
    let glu = inp.epilogue.is_glu();
    if glu && !w.n.is_multiple_of(2) {
        return Err(bad("N", format!("a GLU epilogue needs an even N, got {}", w.n)));
    }
    let n_out = if glu { w.n / 2 } else { w.n };
    let kb = w.k / BLOCK;
    let spec = MatSpec {
        grouped: inp.offs.is_some(),
        epilogue: inp.epilogue,
        row_scale: inp.p.is_some(),
        packed: matches!(w.q, WeightBytes::Packed(_)),
        fold: scales_foldable(&w.s),
        finite: !w.s.par_iter().any(|&b| b == 255),
        act8: matches!(inp.x, Act::Mxfp8(_)),
        kb_align: [16u32, 8, 4, 2, 1].into_iter().find(|v| kb.is_multiple_of(*v as usize)).unwrap_or(1),
        out_vec: if n_out.is_multiple_of(2) { 2 } else { 1 },
    };
    Ok((spec, counts))
}

fn facts(w: &Fp4Weights, glu: bool, counts: &[usize]) -> ShapeFacts {
    ShapeFacts {
        max_rows: counts.iter().copied().max().unwrap_or(0),
        counts: counts.to_vec(),
        n_out: if glu { w.n / 2 } else { w.n },
        k: w.k,
        glu,
    }
}

/// The kernels of a problem at these knobs (main, plus finalize when split).
pub fn kernels_for(spec: &MatSpec, c: &Cfg) -> Result<Vec<Kernel>, OpError> {
    let mut v = vec![build_main(spec, c)?];
    if c.split > 1 && !c.fused {
        v.push(build_finalize(spec, c.split)?);
    }
    Ok(v)
}

/// Arrival counters of a FIN=last launch: one per output tile, at most `(ceil(M / BM) + G) * ceil(NO / BNO)`
/// (grouped; dense: `ceil(M / BM) * ceil(N / BN)`), the bound the kernel's tile walk stays below.
pub fn counter_count(spec: &MatSpec, c: &Cfg, m: usize, groups: usize, n_out: usize) -> usize {
    let bno = if spec.epilogue.is_glu() { c.bn / 2 } else { c.bn } as usize;
    let extra = if spec.grouped { groups } else { 0 };
    ((m.div_ceil(c.bm as usize) + extra) * n_out.div_ceil(bno)).max(1)
}

/// The plan of one product: validated inputs, resolved knobs, one launch (or two with a K split).
pub fn matmul_plan(w: &Fp4Weights, inp: &MatInputs<'_>, knobs: &Knobs) -> Result<Plan, OpError> {
    let (spec, counts) = spec_for(w, inp)?;
    let glu = inp.epilogue.is_glu();
    let sh = facts(w, glu, &counts);
    if super::prefill::selected(knobs, &sh)? {
        return super::prefill::plan(w, inp, &spec, &sh, knobs);
    }
    let c = resolve(&spec, knobs, &sh)?;
    let (g, n, k, m) = (w.groups, w.n, w.k, inp.x.shape().0);
    let n_out = if glu { n / 2 } else { n };
    let mut plan = Plan::default();
    let mut args = match inp.x {
        Act::Bf16(x) => vec![plan.input("x", x.clone())],
        Act::Mxfp8(t) => vec![
            plan.input("xq", HostTensor::from_bytes(DType::U32, &[m, k / 4], t.q.clone())),
            plan.input("xs", HostTensor::from_bytes(DType::U8, &[m, k / BLOCK], t.s.clone())),
        ],
    };
    let lead: Vec<usize> = if spec.grouped { vec![g, n] } else { vec![n] };
    let shape = |last: usize| -> Vec<usize> { lead.iter().copied().chain([last]).collect() };
    let wq = match &w.q {
        WeightBytes::Natural(q) => HostTensor::from_bytes(DType::U32, &shape(k / 8), q.clone()),
        WeightBytes::Packed(q) => HostTensor::from_bytes(DType::U32, &shape(k / 8), super::pack::words_to_bytes(q)),
    };
    args.push(plan.input("wq", wq));
    args.push(plan.input("ws", HostTensor::from_bytes(DType::U8, &shape(k / BLOCK), w.s.clone())));
    if let Some(o) = inp.offs {
        let o: Vec<i64> = o.iter().map(|&v| v as i64).collect();
        args.push(plan.input("offs", HostTensor::from_i64(DType::I32, &[g], &o)));
    }
    let p_idx = inp.p.map(|p| plan.input("p", data::tensor(DType::F32, &[m], p)));
    let main = build_main(&spec, &c)?;
    if m == 0 {
        // No rows: an empty output and nothing to launch (a grid of zero CTAs is not a valid launch).
        plan.output("y", DType::Bf16, &[0, n_out]);
        return Ok(plan);
    }
    if c.split > 1 && c.fused {
        // One launch: partials in scratch, arrival counters that start (and are left) at zero.
        args.push(plan.scratch("part", DType::F32, &[c.split as usize, m, n]));
        args.push(plan.input("sem", HostTensor::zeros(DType::I32, &[counter_count(&spec, &c, m, g, n_out)])));
        args.extend(p_idx);
        args.push(plan.output("y", DType::Bf16, &[m, n_out]));
        plan.step(main, &args, &[]);
    } else if c.split > 1 {
        let part = plan.scratch("part", DType::F32, &[c.split as usize, m, n]);
        args.push(part);
        plan.step(main, &args, &[]);
        let mut fargs = vec![part];
        fargs.extend(p_idx);
        fargs.push(plan.output("y", DType::Bf16, &[m, n_out]));
        plan.step(build_finalize(&spec, c.split)?, &fargs, &[]);
    } else {
        args.extend(p_idx);
        args.push(plan.output("y", DType::Bf16, &[m, n_out]));
        plan.step(main, &args, &[]);
    }
    Ok(plan)
}

// ------------------------------------------------------------------------------------------------------------
// The operator.

/// `mxfp4_matmul`.
pub struct Mxfp4Matmul;

/// A concrete problem.
#[derive(Clone, Debug)]
pub struct MatProblem {
    pub grouped: bool,
    pub counts: Vec<usize>,
    pub k: usize,
    pub n: usize,
    pub epilogue: Epilogue,
    pub row_scale: bool,
    pub packed: bool,
    /// Scale bytes over a wide range (0..=20, 129..=160, NaN) instead of realistic ones.
    pub wide: bool,
    /// MXFP8 activations (quantized from the bf16 draw with the Ceil rule).
    pub act8: bool,
}

impl MatProblem {
    /// Dims `K`, `N` and either `M` (dense) or `G` with `c0..` (explicit counts), `per` (every group that
    /// many rows) or `mean` (+ `seed`, ragged as `latent_moe_gemm`); optional `epilogue` (0 none, 1 SiTU-GLU,
    /// 2 SwiGLU), `p` (1: routing weights), `packed` (1: packed weight layout), `wide` (1: wide scale range),
    /// `act` (1: MXFP8 activations).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let k = p.get("K")? as usize;
        let n = p.get("N")? as usize;
        check_k(OP, "K", k)?;
        let epilogue = match p.get_or("epilogue", 0) {
            0 => Epilogue::None,
            1 => Epilogue::SituGlu,
            2 => Epilogue::SwiGlu,
            e => return Err(bad("epilogue", format!("0, 1 or 2, got {e}"))),
        };
        let (grouped, counts) = if let Some(&m) = p.dims.get("M") {
            (false, vec![m as usize])
        } else {
            let g = p.get("G")? as usize;
            let counts = if p.dims.contains_key("c0") {
                (0..g).map(|i| p.get_or(&format!("c{i}"), 0) as usize).collect()
            } else if let Some(&per) = p.dims.get("per") {
                vec![per as usize; g]
            } else {
                ragged_counts(g, p.get("mean")? as usize, 8, p.get_or("seed", 1) as u64)
            };
            (true, counts)
        };
        if epilogue.is_glu() && !n.is_multiple_of(2) {
            return Err(bad("N", format!("a GLU epilogue needs an even N, got {n}")));
        }
        Ok(MatProblem {
            grouped,
            counts,
            k,
            n,
            epilogue,
            row_scale: p.get_or("p", 0) == 1,
            packed: p.get_or("packed", 0) == 1,
            wide: p.get_or("wide", 0) == 1,
            act8: p.get_or("act", 0) == 1,
        })
    }
    pub fn m(&self) -> usize {
        self.counts.iter().sum()
    }
    pub fn n_out(&self) -> usize {
        if self.epilogue.is_glu() { self.n / 2 } else { self.n }
    }
    pub fn offs(&self) -> Vec<i32> {
        self.counts
            .iter()
            .scan(0i32, |s, c| {
                *s += *c as i32;
                Some(*s)
            })
            .collect()
    }
    /// The variant for realistic data (scales foldable), for compile-only checks.
    pub fn spec(&self) -> MatSpec {
        let kb = self.k / BLOCK;
        MatSpec {
            grouped: self.grouped,
            epilogue: self.epilogue,
            row_scale: self.row_scale,
            packed: self.packed,
            fold: !self.wide,
            finite: !self.wide,
            act8: self.act8,
            kb_align: [16u32, 8, 4, 2, 1].into_iter().find(|v| kb.is_multiple_of(*v as usize)).unwrap_or(1),
            out_vec: if self.n_out().is_multiple_of(2) { 2 } else { 1 },
        }
    }
    pub fn facts(&self) -> ShapeFacts {
        ShapeFacts {
            max_rows: self.counts.iter().copied().max().unwrap_or(0),
            counts: self.counts.clone(),
            n_out: self.n_out(),
            k: self.k,
            glu: self.epilogue.is_glu(),
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Random MXFP4 weights: uniform codes; scale bytes 117..=122 (weights of magnitude ~K^-1/2 for K in the
/// thousands), or with `wide` also 0..=20, 129..=160 and 255 (NaN blocks).
pub fn random_weights(groups: usize, n: usize, k: usize, wide: bool, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let nq = groups * n * k / 2;
    let ns = groups * n * k / BLOCK;
    let mut q = vec![0u8; nq];
    q.par_chunks_mut(1 << 16).enumerate().for_each(|(ci, ch)| {
        let mut s = mix(seed ^ mix(ci as u64));
        for (i, b) in ch.iter_mut().enumerate() {
            if i % 8 == 0 {
                s = mix(s);
            }
            *b = (s >> (8 * (i % 8))) as u8;
        }
    });
    let s: Vec<u8> = (0..ns)
        .into_par_iter()
        .map(|i| {
            let h = mix(seed ^ 0x5ca1e5 ^ mix(i as u64));
            if wide {
                match h % 32 {
                    0 => 255,
                    1 | 2 => (h >> 8) as u8 % 21,
                    3..=6 => 129 + ((h >> 8) % 32) as u8,
                    _ => 110 + ((h >> 8) % 19) as u8,
                }
            } else {
                117 + ((h >> 8) % 6) as u8
            }
        })
        .collect();
    (q, s)
}

struct MatInstance {
    pb: MatProblem,
    x: HostTensor,
    /// MXFP8 activations (`act8`).
    x8: Option<rmx::MxTensor>,
    /// The activations' values as the kernel sees them (bf16, or dequantized MXFP8).
    xv: Vec<f32>,
    w: Fp4Weights,
    p: Option<Vec<f32>>,
    seed: u64,
}

impl Operator for Mxfp4Matmul {
    fn name(&self) -> &'static str {
        OP
    }
    fn summary(&self) -> &'static str {
        "y = x · dequant(w)^T, MXFP4 weights dequantized on chip into bf16 mma operands, dense or grouped over ragged experts, GLU epilogues, split-K for decode"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        // The SPEC 4 rows use weights in the offline packed layout (`mx::pack`, like every Hopper MXFP4
        // kernel's re-layout); the `natural` rows read the SPEC 1 layout as stored.
        let rows: [(&str, Vec<(&str, i64)>); 6] = [
            ("MXFP4 linear M1 N6144 K3584", vec![("M", 1), ("N", 6144), ("K", 3584)]),
            ("MXFP4 linear M64 N6144 K3584", vec![("M", 64), ("N", 6144), ("K", 3584)]),
            ("MXFP4 linear M4096 N6144 K3584", vec![("M", 4096), ("N", 6144), ("K", 3584)]),
            ("MXFP4 decode 28 experts x 4 tokens N6144 K3584", vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584)]),
            (
                "MXFP4 decode 28 experts x 4 tokens N6144 K3584 situ_glu+p",
                vec![("G", 28), ("per", 4), ("N", 6144), ("K", 3584), ("epilogue", 1), ("p", 1)],
            ),
            // The largest decode batch of the M <= 16 target (the stream path's widest token tile).
            ("MXFP4 linear M16 N6144 K3584", vec![("M", 16), ("N", 6144), ("K", 3584)]),
        ];
        let mut out = vec![];
        for (name, dims) in &rows {
            let mut d = dims.clone();
            d.push(("packed", 1));
            out.push(Preset::new(name, &d));
        }
        for (name, dims) in rows.iter().take(4) {
            out.push(Preset::new(&format!("{name} natural"), dims));
        }
        // K3's expert inputs are MXFP8: the decode and prefill rows with MXFP8 activations.
        for (name, dims) in [&rows[3], &rows[2]] {
            let mut d = dims.clone();
            d.extend([("packed", 1), ("act", 1)]);
            out.push(Preset::new(&format!("{name} mxfp8-act"), &d));
        }
        // Prefill over 28 ragged experts (latent_moe_gemm's G28 mean1024 shape; PATH=dq_gemm by default).
        out.push(Preset::new(
            "MXFP4 prefill 28 experts mean1024 N6144 K3584",
            &[("G", 28), ("mean", 1024), ("N", 6144), ("K", 3584), ("packed", 1)],
        ));
        out
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        const EDGE: [i64; 7] = [1, 15, 16, 17, 63, 65, 130];
        let pick = |rng: &mut StdRng| -> i64 {
            if rng.random_bool(0.5) { EDGE[rng.random_range(0..EDGE.len())] } else { rng.random_range(1..=140) }
        };
        let k = 32 * if rng.random_bool(0.5) { [1i64, 2, 3][rng.random_range(0..3)] } else { rng.random_range(1..=10) };
        let epilogue = rng.random_range(0..3i64);
        let mut n = pick(rng);
        if epilogue != 0 && n % 2 == 1 {
            n += 1;
        }
        let p = rng.random_bool(0.5) as i64;
        let packed = rng.random_bool(0.3) as i64;
        let wide = rng.random_bool(0.3) as i64;
        let act = rng.random_bool(0.3) as i64;
        let tail =
            [("K", k), ("N", n), ("epilogue", epilogue), ("p", p), ("packed", packed), ("wide", wide), ("act", act)];
        let tag = format!("K{k} N{n} epi{epilogue} p{p} packed{packed} wide{wide} act{act}");
        if rng.random_bool(0.3) {
            let m = pick(rng);
            let mut dims = vec![("M", m)];
            dims.extend(tail);
            return Preset::new(&format!("dense M{m} {tag}"), &dims);
        }
        let g = rng.random_range(1..=5i64);
        let mut dims: Vec<(String, i64)> = tail.iter().map(|(a, b)| (a.to_string(), *b)).collect();
        dims.push(("G".into(), g));
        let mut desc = String::new();
        for i in 0..g {
            let c = if rng.random_bool(0.25) { 0 } else { pick(rng).min(70) };
            dims.push((format!("c{i}"), c));
            desc.push_str(&format!("{c},"));
        }
        Preset { name: format!("G{g} [{desc}] {tag}"), dims: dims.into_iter().collect() }
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        let pb = MatProblem::from_preset(p)?;
        let (m, k, n, g) = (pb.m(), pb.k, pb.n, pb.counts.len());
        let mut xv = data::normal(m * k, 1.0, seed);
        data::round_bf16(&mut xv);
        let x = data::tensor(DType::Bf16, &[m, k], &xv);
        let x8 = if pb.act8 {
            let t = rmx::quantize(&xv, m, k, MxFormat::Fp8, ScaleRule::Ceil)
                .map_err(|e| OpError::Internal(format!("reference quantize: {e}")))?;
            xv = rmx::dequantize(&t).map_err(|e| OpError::Internal(format!("reference dequantize: {e}")))?;
            Some(t)
        } else {
            None
        };
        let (q, s) = random_weights(g, n, k, pb.wide, seed ^ 0x77);
        let q = if pb.packed { WeightBytes::Packed(super::pack::pack(&q, g * n, k)?) } else { WeightBytes::Natural(q) };
        let w = Fp4Weights { groups: g, n, k, q, s };
        let p = pb.row_scale.then(|| data::uniform(m, 0.1, 1.0, seed ^ 0x7a7a));
        Ok(Box::new(MatInstance { pb, x, x8, xv, w, p, seed }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        let pb = MatProblem::from_preset(p)?;
        let spec = pb.spec();
        if super::prefill::selected(knobs, &pb.facts())? {
            return super::prefill::kernels(&spec, &pb.facts(), knobs);
        }
        let c = resolve(&spec, knobs, &pb.facts())?;
        kernels_for(&spec, &c)
    }
    fn bucket_dims(&self, p: &Preset) -> Vec<(String, u64)> {
        let Ok(pb) = MatProblem::from_preset(p) else { return vec![] };
        let nonempty = pb.counts.iter().filter(|c| **c > 0).count().max(1);
        vec![
            ("rows_per_group".into(), (pb.m() / nonempty) as u64),
            ("K".into(), pb.k as u64),
            ("N".into(), pb.n as u64),
            ("groups".into(), pb.counts.len() as u64),
        ]
    }
}

impl MatInstance {
    fn inputs(&self) -> (Vec<i32>, MatInputs<'_>) {
        let offs = self.pb.offs();
        let x = match &self.x8 {
            Some(t) => Act::Mxfp8(t),
            None => Act::Bf16(&self.x),
        };
        let inp = MatInputs { x, offs: None, p: self.p.as_deref(), epilogue: self.pb.epilogue };
        (offs, inp)
    }
}

impl Instance for MatInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        format!(
            "{} M={} K={} N={} groups={} epilogue={} p={} packed={} wide={} act={} seed={}",
            if pb.grouped { "grouped" } else { "dense" },
            pb.m(),
            pb.k,
            pb.n,
            if pb.counts.len() <= 8 { format!("{:?}", pb.counts) } else { format!("{} groups", pb.counts.len()) },
            pb.epilogue.name(),
            pb.row_scale,
            pb.packed,
            pb.wide,
            if pb.act8 { "mxfp8" } else { "bf16" },
            self.seed
        )
    }

    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        let (offs, mut inp) = self.inputs();
        if self.pb.grouped {
            inp.offs = Some(&offs);
        }
        matmul_plan(&self.w, &inp, knobs)
    }

    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let pb = &self.pb;
        let y = out.get("y")?.to_f64_vec();
        let (m, k, n, no) = (pb.m(), pb.k, pb.n, pb.n_out());
        let g = pb.counts.len();
        let ierr = |e: k3k_reference::error::RefError| OpError::Internal(format!("reference: {e}"));
        if m * n * k <= 1 << 24 {
            // Small: the whole product through the reference's grouped MX GEMM.
            let mut all = self.w.group_tensor(0)?;
            for gi in 1..g {
                let t = self.w.group_tensor(gi)?;
                all.q.extend(t.q);
                all.s.extend(t.s);
            }
            all.rows = g * n;
            let epi = match pb.epilogue {
                Epilogue::None => refgemm::Epilogue::None,
                Epilogue::SituGlu => refgemm::Epilogue::SituGlu,
                Epilogue::SwiGlu => refgemm::Epilogue::SwiGlu,
            };
            let want =
                refgemm::grouped_gemm_mx(&self.xv, m, &all, g, &pb.offs(), self.p.as_deref(), epi).map_err(ierr)?;
            let mut r = compare("y", &y, &want, Tolerance::Bf16, format!("all {m} rows"));
            if !r.passed {
                r.detail.push_str(&error_pattern(&y, &want, m, no));
            }
            return Ok(r);
        }
        // Large: sampled rows (each group's first, middle and last, plus 64 random), per group on its
        // dequantized weights (reference::mx::dequantize), rows in parallel.
        let mut rows = vec![];
        let mut start = 0;
        for &c in &pb.counts {
            if c > 0 {
                rows.extend([start, start + c / 2, start + c - 1]);
            }
            start += c;
        }
        let mut s = self.seed;
        for _ in 0..64 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            rows.push((s >> 33) as usize % m.max(1));
        }
        rows.sort();
        rows.dedup();
        let mut group_of = vec![0usize; m];
        let mut start = 0;
        for (gi, &c) in pb.counts.iter().enumerate() {
            group_of[start..start + c].fill(gi);
            start += c;
        }
        let mut want = vec![0f64; rows.len() * no];
        let mut got = vec![0f64; rows.len() * no];
        for gi in 0..g {
            let mine: Vec<usize> = (0..rows.len()).filter(|&i| group_of[rows[i]] == gi).collect();
            if mine.is_empty() {
                continue;
            }
            let wd = rmx::dequantize(&self.w.group_tensor(gi)?).map_err(ierr)?;
            let res: Vec<Result<Vec<f64>, OpError>> = mine
                .par_iter()
                .map(|&i| {
                    let r = rows[i];
                    let acc = refgemm::matmul_nt(&self.xv[r * k..(r + 1) * k], 1, k, &wd, n).map_err(ierr)?;
                    let scale = self.p.as_ref().map_or(1.0, |p| p[r] as f64);
                    Ok((0..no)
                        .map(|j| {
                            scale
                                * match pb.epilogue {
                                    Epilogue::None => acc[j],
                                    Epilogue::SituGlu => refgemm::situ_glu(acc[j], acc[j + no]),
                                    Epilogue::SwiGlu => refgemm::swiglu(acc[j], acc[j + no]),
                                }
                        })
                        .collect())
                })
                .collect();
            for (&i, r) in mine.iter().zip(res) {
                want[i * no..(i + 1) * no].copy_from_slice(&r?);
                got[i * no..(i + 1) * no].copy_from_slice(&y[rows[i] * no..(rows[i] + 1) * no]);
            }
        }
        let mut r = compare("y", &got, &want, Tolerance::Bf16, format!("{} sampled rows of {m}", rows.len()));
        if !r.passed {
            r.detail.push_str(&error_pattern(&got, &want, rows.len(), no));
        }
        Ok(r)
    }

    fn work(&self) -> Work {
        let pb = &self.pb;
        let (m, k, n) = (pb.m() as f64, pb.k as f64, pb.n as f64);
        let used = pb.counts.iter().filter(|c| **c > 0).count() as f64;
        Work {
            flops: 2.0 * m * n * k,
            bytes: if pb.act8 { m * k * (1.0 + 1.0 / 32.0) } else { 2.0 * m * k }
                + used * n * (k / 2.0 + k / 32.0)
                + 2.0 * m * pb.n_out() as f64
                + if pb.row_scale { 4.0 * m } else { 0.0 },
        }
    }

    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({
            "grouped": pb.grouped, "counts": pb.counts, "K": pb.k, "N": pb.n, "M": pb.m(),
            "epilogue": pb.epilogue.name(), "p": pb.row_scale, "packed": pb.packed,
            "act": if pb.act8 { "mxfp8" } else { "bf16" },
        })
    }
}
