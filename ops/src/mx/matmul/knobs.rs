//! The knob space of `mxfp4_matmul`, its defaults, and the readers of the knobs with legacy meanings (absent
//! from knob sets written before they existed).

use super::*;

/// The tuning knobs (0 = chosen from the problem shape, see [`resolve`]).
pub fn knob_space() -> KnobSpace {
    // The tuner enumerates the product: the axes offer the values worth timing (any other value of the same
    // knobs is accepted too, e.g. BM=16 or RASTER=n; 0 means "chosen from the shape", see `resolve`).
    let space = KnobSpace::default()
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
        .axis("RASTER", "tile order inside a group: m (neighbouring CTAs share weights) or n", ["m"]);
    fp8_knobs(space)
        .accepts(
            "XDQ",
            "MXFP8 activations on PATH=tile and stream: first (a first launch dequantizes them once into a bf16 \
             scratch `[M, K]`, `mx.dequantize`'s kernel, as PATH=gemv always does, and the main kernel is the \
             bf16-activation one), tile (each CTA converts its stages' E4M3 codes on chip: every activation once per \
             weight tile, 96 times at N6144 BN64: at M64 N6144 K3584 an H100 took 0.0830 ms on 2026-12-06, bf16 \
             activations 0.0389 at the same resolved knobs in its tune records); auto (and absent): first. Refused with PATH=gemv \
             (tile), meaningless with bf16 activations (ignored)",
            ["auto", "first", "tile"],
        )
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

/// The values the FP8 paths accept (`MMA=fp8` and `MMA=f8sync`, not axes of the tuning space), in the order of the
/// knob space's listing.
fn fp8_knobs(space: KnobSpace) -> KnobSpace {
    space
        .accepts(
            "MMA",
            "fp8: MXFP8 activations on FP8 tensor cores (`mx::fp8`: weights converted exactly to E4M3 in shared \
             memory, wgmma e4m3 per 32-wide block, both scales applied exactly to the f32 accumulator; F8V \
             >= 4 also grouped, packed, GLU (BN % 16 = 0) and p; BM 64|128, BN <= 256, BK 128, STAGES)",
            ["fp8"],
        )
        .accepts(
            "MMA",
            "f8sync: MXFP8 activations on E4M3 mma.sync (m16n8k32), never dequantized (`matmul::f8sync`): per CTA BN \
             weight rows x BM tokens x one K range of SPLIT, its activation codes and scales staged once in shared \
             memory, the weights through the STAGES ring converted exactly to E4M3, both scales applied per 32-wide \
             block to the f32 accumulator, FIN=last sums the splits; dense or grouped, GLU and p, natural or packed; \
             BK 64|128|256; auto: BM the tokens rounded up to 16 (at most 128), BN 64, BK 128, STAGES 4, SPLIT about \
             two CTAs per SM with BM x K/SPLIT <= 64 KB. Not an automatic choice: 1.2-2.5x slower than it at M 8..256 \
             on an H100 (2026-12-07)",
            ["f8sync"],
        )
        .accepts(
            "MINB",
            "MMA=f8sync: 2 or 3 blocks per SM for the register cap (uncapped its kernels take 238-255 registers: two \
             128-thread CTAs per SM; 3 caps them at 168)",
            [2i64, 3],
        )
        .accepts(
            "F8V",
            "MMA=fp8 kernel generation: 1 = the first (cp.async with per-row bounds for every tile, both scale \
             factors read from shared f32 vectors per element), 2 = the code tiles by TMA on per-slot mbarriers, \
             the activation factors in registers, 3 = as 2 with the weight scales folded into the E4M3 codes \
             (rows whose scale bytes span <= 12 and hold no NaN, else 2), the promotion one FFMA per element; \
             4 = the folded weights converted to E4M3 by a first launch into a scratch `[N, K/4]` (as PATH=dq_gemm \
             dequantizes first; same fold condition and fallback to 2), then a plain FP8 x FP8 wgmma GEMM: a \
             producer warpgroup fills a TMA ring (STAGES auto: up to 6) of activation codes, E4M3 weights and \
             activation factors, the promotion one FFMA per element with the activation factor only; \
             5 = as 4, with the next slice's first product issued before a slice's last promotion (BN <= 128); \
             6 = as 5, the two consumer warpgroups (BM=128) taking turns (ping-pong, knob TURN); \
             0 = 1 (the one run on a GPU so far)",
            [0i64, 1, 2, 3, 4, 5, 6],
        )
        .accepts(
            "TURN",
            "MMA=fp8,F8V=6: what the two consumer warpgroups do in turns: mma (absent: each wgmma issue, the \
             tensor cores taking their products alternately) or ffma (each block's promotion)",
            ["mma", "ffma"],
        )
        .accepts(
            "BN",
            "MMA=fp8: 192 weight rows per tile (any multiple of 8 up to 256 is accepted there; one temporary \
             accumulator above 128)",
            [192i64],
        )
        .accepts(
            "CPS",
            "MMA=fp8,F8V=4, 5 and 6: 1 = a persistent grid, one block per SM walking every grid-th output tile (its producer \
             warp loads the next tile's first slices during the epilogue); 0 = one block per tile",
            [1i64],
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

/// `L2PF`: `None` for `auto` (or absent), else the explicit size in bytes (validated later: 0, 64, 128, 256).
pub(in crate::mx) fn l2pf_knob(knobs: &Knobs) -> Result<Option<u32>, OpError> {
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
pub(super) fn copy_bulk(knobs: &Knobs) -> Result<bool, OpError> {
    two_way(knobs, "COPY", false, &[("auto", false), ("lanes", false), ("bulk", true)])
}

/// A string knob that picks one of two ways: `absent` when the knob is not given (knob sets from before it
/// existed), else the way `choices` gives its value; any other value is refused, naming the choices in order.
pub(super) fn two_way(knobs: &Knobs, name: &str, absent: bool, choices: &[(&str, bool)]) -> Result<bool, OpError> {
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

/// `FIN`: whether the split-K partials are summed by the last-arriving CTA (`last`) rather than by a second
/// launch (`kernel`); `auto` means `auto_last`, and an absent knob (knob sets from before it existed) `kernel`.
pub(super) fn fin_last(knobs: &Knobs, auto_last: bool) -> Result<bool, OpError> {
    two_way(knobs, "FIN", false, &[("auto", auto_last), ("kernel", false), ("last", true)])
}

/// `XDQ`: whether MXFP8 activations on PATH=tile and stream are converted on chip per stage (`tile`) rather than
/// dequantized by a first launch (`first`; `auto` and an absent knob mean first).
pub(super) fn act_tile_knob(knobs: &Knobs) -> Result<bool, OpError> {
    two_way(knobs, "XDQ", false, &[("auto", false), ("first", false), ("tile", true)])
}

/// `SK` (stream-K on PATH=gemv's persistent grid): 1 on, 0 or absent off; any other value is refused.
pub(super) fn sk_knob(knobs: &Knobs) -> Result<bool, OpError> {
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
pub(super) fn prefetch_knob(knobs: &Knobs) -> Result<bool, OpError> {
    two_way(knobs, "PF", false, &[("auto", false), ("on", true), ("off", false)])
}

/// `XA`: the activations' lookahead in quads; `None` for 0 (auto) and an absent knob (from before it existed).
pub(super) fn xa_knob(knobs: &Knobs) -> Result<Option<u32>, OpError> {
    let v = super::prefill::int_or0(knobs, "XA")?;
    Ok((v != 0).then_some(v))
}

pub(super) fn pick(k: &Knobs, name: &str, auto: u32) -> Result<u32, OpError> {
    let v = k.u32(name)?;
    Ok(if v == 0 { auto } else { v })
}
