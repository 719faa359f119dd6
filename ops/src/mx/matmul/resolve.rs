//! How knobs resolve per problem shape: [`resolve`] keeps explicit knobs and chooses the rest for the tile,
//! stream and gemv paths ([`resolve_gemv`]) and the tile-major weights ([`resolve_tiled`]).

use super::*;

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

/// Resolve knobs for a problem: explicit values are kept, zeros are chosen from the shape (decode: narrow
/// token tiles and a K split that gives about two waves of tiles when there are few; prefill: 128x128
/// tiles), then the combination is validated.
pub fn resolve(spec: &MatSpec, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
    resolve_read(spec, &MatKnobs::from_knobs(knobs)?, knobs, sh)
}

/// [`resolve`] of record `knobs` read as `k`.
pub(super) fn resolve_read(spec: &MatSpec, k: &MatKnobs, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
    if k.mma == Some(Mma::F8sync) {
        return super::f8sync::resolve(spec, k, knobs, sh);
    }
    if spec.tiled {
        return resolve_tiled(spec, k, knobs, sh);
    }
    match gemv_wanted(spec, k, sh)? {
        Some(true) => return resolve_gemv(spec, k, knobs, sh),
        // Automatic: unless other explicit knobs rule it out (e.g. BN=128 at BK=256: too many registers).
        Some(false) => {
            if let Ok(c) = resolve_gemv(spec, k, knobs, sh) {
                return Ok(c);
            }
        }
        None => {}
    }
    let (bm, wgmma, dec_req, stream) = tile_path(spec, k, knobs, sh)?;
    let dec_bits = dec_req.unwrap_or(!wgmma);
    // The bit decode makes a decode tile's weight rows cheap enough that 128 rows per CTA (32 per warp) pay for
    // the token tile's copies and fragment loads; three stages keep four such CTAs per SM (16-token tiles: wider
    // token tiles would need too many accumulator registers).
    let wide_rows = dec_bits && bm <= 16;
    let [bn, bk, stages, wa, wb] = tile_shape(spec, k, sh, (bm, wgmma, stream, wide_rows))?;
    // wgmma: the weight tile is decoded into registers (16 rows per warp at least) and stored to shared memory.
    let dec_bits = if wgmma { dec_req.unwrap_or(bn.is_multiple_of(16 * wa)) } else { dec_bits };
    let c = Cfg {
        bn,
        bm,
        bk,
        stages,
        wa,
        wb,
        split: 1,
        cps: 1,
        raster_m: k.raster_m()?,
        wgmma,
        dec_bits,
        stream,
        gemv: false,
        fused: false,
        prefetch: false,
        min_blocks: 0,
        ring: 0,
        // (auto: none off the gemv ring; an explicit size is refused there.)
        l2pf: k.l2pf.number().unwrap_or(0),
        bulk: k.copy_bulk(),
        xa: k.xa_quads().unwrap_or(1),
        sk: k.stream_k(knobs)?,
        ts: k.ts,
        act_tile: spec.act8 && k.act_tile(),
        f8: false,
        xk: 0,
        pdl: k.pdl,
    };
    split_tiles(spec, (k, knobs), sh, c, wide_rows)
}

/// The tile path's kind: the token tile BM, wgmma or mma.sync, the requested weight decode (`DEC`) and the
/// streaming weight path (`PATH=stream`), in that order of the knobs read.
fn tile_path(
    spec: &MatSpec,
    k: &MatKnobs,
    knobs: &Knobs,
    sh: &ShapeFacts,
) -> Result<(u32, bool, Option<bool>, bool), OpError> {
    let bm = pick(
        k.bm,
        "BM",
        match sh.max_rows {
            0..=16 => 16,
            17..=32 => 32,
            33..=64 => 64,
            _ => 128,
        },
    )?;
    // MMA absent: sync (records from before wgmma existed).
    let wgmma = match k.mma {
        None => false,
        // wgmma for prefill tiles, unless other explicit knobs rule it out.
        Some(Mma::Auto) => {
            bm >= 128
                && bm.is_multiple_of(64)
                && matches!(need(k.bk, "BK")?, 0 | 64)
                && matches!(need(k.wb, "WB")?, 0 | 1)
                && (need(k.wa, "WA")? == 0 || need(k.wa, "WA")? == bm / 16)
        }
        Some(m) => m == Mma::Wgmma,
    };
    // DEC: Some(true) bits, Some(false) expr, None auto (bits for packed weights where the tile allows); absent:
    // expr (records from before the bit decode existed).
    let dec_req = match k.dec {
        None | Some(Dec::Expr) => Some(false),
        Some(Dec::Auto) => None,
        Some(Dec::Bits) => Some(true),
    };
    // PATH: the streaming weight path for decode tiles (see the knob's description); absent: tile.
    let stream = match k.path {
        None | Some(Path::Tile) => false,
        // Packed weights and bf16 activations only: the natural layout's 16-byte block loads take four times
        // the registers (the grouped kernel at BK=128 spilled 40 bytes under ptxas), and the MXFP8 grouped
        // kernel at BK=256 spilled 12 (the tile path stays their default). Dense only: at 28 experts x 4 tokens
        // the tile path ran 0.224-0.234 ms against 0.30-0.88 for stream knob sets (H200, 2026-12-01).
        Some(Path::Auto) => {
            bm <= 16
                && !spec.grouped
                && spec.packed
                && !spec.act8
                && !wgmma
                && !sh.glu
                && matches!(need(k.wb, "WB")?, 0 | 1)
                // (An absent DEC is no obstacle here.)
                && k.dec != Some(Dec::Expr)
        }
        Some(Path::Stream) => true,
        // (PATH=gemv resolved before, dq_gemm is `mx::prefill`'s.)
        Some(Path::Gemv | Path::DqGemm) => {
            return Err(OpError::InvalidKnobs {
                op: OP,
                knobs: knobs.to_string(),
                why: format!("PATH={}: auto, tile, stream, gemv or dq_gemm", k.shown("PATH")),
            });
        }
    };
    Ok((bm, wgmma, dec_req, stream))
}

/// The tile path's shape: BN, BK, STAGES, WA and WB (explicit, or chosen from the shape and the path).
fn tile_shape(
    spec: &MatSpec,
    k: &MatKnobs,
    sh: &ShapeFacts,
    (bm, wgmma, stream, wide_rows): (u32, bool, bool, bool),
) -> Result<[u32; 5], OpError> {
    let decode = bm <= 64;
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
        if wgmma_one_wave(spec, sh) { 128 } else { 256 }
    } else if decode {
        64
    } else {
        128
    };
    let bn = pick(k.bn, "BN", bn_auto)?;
    // Stream: 256 packed (eight 4-byte words per row in flight), 128 natural (its 16-byte block loads hold four
    // times the registers: at 256 ptxas spills under the 128-register cap of four CTAs per SM).
    let bk_stream = if spec.packed { 256 } else { 128 };
    let bk = pick(
        k.bk,
        "BK",
        if stream {
            bk_stream
        } else if mid_batch(spec, sh, bm, wgmma, k) {
            256
        } else if decode && !wgmma {
            128
        } else {
            64
        },
    )?;
    let stages = pick(k.stages, "STAGES", if (decode && !wide_rows) || wgmma || stream { 4 } else { 3 })?;
    // The stream path keeps 16 weight rows per warp (its register tile holds a whole BK slice of them).
    let wa_auto = if wgmma {
        bm / 16
    } else if stream {
        (bn / 16).clamp(1, 16)
    } else {
        (bn / 16).min(if decode { 4 } else { 8 })
    };
    let wa = pick(k.wa, "WA", wa_auto)?;
    let wb = pick(k.wb, "WB", 1)?;
    Ok([bn, bk, stages, wa, wb])
}

/// The tile path's K split (few tiles: enough CTAs for the SMs), the split-K finalize, the register pipeline and
/// the occupancy cap, then the validation of the whole configuration.
fn split_tiles(
    spec: &MatSpec,
    (k, knobs): (&MatKnobs, &Knobs),
    sh: &ShapeFacts,
    mut c: Cfg,
    wide_rows: bool,
) -> Result<Cfg, OpError> {
    let (bm, bn, bk, stream) = (c.bm, c.bn, c.bk, c.stream);
    c.cps = need(k.cps, "CPS")?;
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
    // The mid batches of `mid_batch`: one CTA per weight tile over the whole K range.
    let split_auto = if !stream && mid_batch(spec, sh, bm, c.wgmma, k) { 1 } else { split_auto };
    // The wgmma mid batches of `wgmma_one_wave`: the K split that keeps the 128 x 128 tiles within one wave.
    let split_auto = if c.wgmma && c.cps == 0 && bm == 128 && bn == 128 && wgmma_one_wave(spec, sh) {
        (ASSUMED_SMS / tiles).max(1)
    } else {
        split_auto
    };
    // No empty splits: as many as the K tiles per split need (at most the count chosen).
    let split_auto = k_tiles.div_ceil(k_tiles.div_ceil(split_auto.max(1)));
    c.split = pick(k.split, "SPLIT", split_auto as u32)?;
    c.fused = k.fin_last(!c.wgmma) && c.split > 1;
    c.prefetch = k.prefetch();
    // GR is a PATH=gemv knob (validated: 0 here).
    c.ring = k.gr;
    // MINB: ptxas gives the pipelined stream kernel 255 registers (two CTAs per SM); three CTAs fit in 168
    // without spills (ptxas, M1 and 28x4 presets), the occupancy of the unpipelined kernel (145-161 registers).
    let minb = k.minb;
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

/// Dense MXFP8 activations dequantized first (`XDQ` auto), 33..=64 tokens on 64-token mma.sync tiles, no GLU: the
/// main kernel is the bf16-activation one, whose best measured shape at M64 N6144 K3584 is BK=256 with no K split
/// (96 CTAs of 64 rows, the whole K range each; one per SM at 4 stages): on the H200 0.0250-0.0256 ms against
/// 0.0380-0.0402 for the automatic split of 6 at BK=128, on an H100 0.0252 against 0.0389; a split of 2 read
/// 0.0320, 4 0.0382, 8 0.0539 (H200; the tune records in `results/`). Automatic BK and SPLIT follow it there.
/// (bf16 activations keep the automatic shape: their tune records, keyed by the default kernels, select it.)
fn mid_batch(spec: &MatSpec, sh: &ShapeFacts, bm: u32, wgmma: bool, k: &MatKnobs) -> bool {
    spec.act8 && !k.act_tile() && !spec.grouped && !sh.glu && !wgmma && bm == 64 && (33..=64).contains(&sh.max_rows)
}

/// Dense MXFP8 activations, 65..=256 tokens, no GLU, whose 128 x 128 output tiles fit in one wave of the SMs: the
/// tile path on wgmma at 128 x 128 with the K split that keeps one wave (automatic BN and SPLIT), and not
/// `PATH=dq_gemm` (see [`super::super::prefill::auto_selects`]). Measured on an H100 at N6144 K3584, packed weights,
/// 2026-12-07 (`lab/2026-12-07/0850-h100-mx-mid/`, every row checked, the same run): M128 0.0404 ms at SPLIT=2
/// against 0.0547 for the earlier choice (BN=256 with a split of 10 and a finalize launch), M256 0.0596 at
/// SPLIT=1 against 0.0685 for dq_gemm (the whole weight matrix dequantized to bf16 first); at M512, 192 tiles, dq_gemm
/// stays ahead (0.0704 against 0.1052 at best), and at M 32..64 the mma.sync tiles (0.0298 against 0.0314 at best).
pub fn wgmma_one_wave(spec: &MatSpec, sh: &ShapeFacts) -> bool {
    spec.act8
        && !spec.grouped
        && !sh.glu
        && (65..=256).contains(&sh.max_rows)
        && sh.max_rows.div_ceil(128) * sh.n_out.div_ceil(128) <= ASSUMED_SMS
}

/// PATH=gemv: `Some(true)` explicit, `Some(false)` automatic (at most 16 tokens per group, 8 per expert when
/// grouped, when no other explicit knob asks for another path's shape: MMA=wgmma, WB > 1, a BM other than 8 or
/// 16), `None` another path. MXFP8 activations included (dequantized by a first launch, see
/// [`act_dequant_first`]): at 28 experts x 4 tokens the tile path, their only decode path before, ran
/// 0.1952 ms against the gemv kernel's 0.1171 on bf16 activations (H200, 2026-12-05 report, same run); the
/// dequant launch moves 1.2 MB. A prediction until the GPU times both.
pub(super) fn gemv_wanted(spec: &MatSpec, k: &MatKnobs, sh: &ShapeFacts) -> Result<Option<bool>, OpError> {
    let Some(path) = k.path else { return Ok(None) };
    Ok(match path {
        Path::Gemv => Some(true),
        // Grouped: at most 8 tokens per expert. The gemv kernel of 2026-12-01 lost at 28 experts x 4 tokens (0.531 ms
        // against the tile path's 0.224 on the H200, 2026-12-01); the register-ring kernel with one streaming warp
        // per 16-row tile is predicted at ~0.10-0.13 ms there (SASS: ~240 instructions per 1 KB quad step, 96 KB
        // in flight per SM), a prediction until the GPU measures it.
        Path::Auto => (sh.max_rows <= 16
            && (!spec.grouped || sh.max_rows <= 8)
            && k.mma != Some(Mma::Wgmma)
            && matches!(need(k.wb, "WB")?, 0 | 1)
            && matches!(need(k.bm, "BM")?, 0 | 8 | 16))
        .then_some(false),
        _ => None,
    })
}

/// Tile-major weights (`WeightBytes::PackedTiles`): PATH=gemv with the shared-memory ring (STAGES 3 when not
/// given), 8-token tiles, no K split, and weight tiles that are all full (the GPU code reads tiled words through
/// the ring's fast form only). Anything else is refused by name.
pub(super) fn resolve_tiled(spec: &MatSpec, k: &MatKnobs, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
    let bad = |why: String| OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why };
    // (An absent PATH reads as auto here.)
    if k.path.is_some_and(|p| !matches!(p, Path::Auto | Path::Gemv)) {
        return Err(bad(format!("tile-major weights are read by PATH=gemv only (got PATH={})", k.shown("PATH"))));
    }
    if sh.max_rows > 8 {
        return Err(OpError::BadInput {
            op: OP,
            arg: "wq (tile-major words)".into(),
            why: format!("tile-major weights serve decode, at most 8 tokens per group (got {})", sh.max_rows),
        });
    }
    // STAGES absent or 0: 3 (the record named in errors says so too).
    let (mut k, mut knobs) = (*k, knobs.clone());
    if k.stages.unwrap_or(0) == 0 {
        k.stages = Some(3);
        knobs.set("STAGES", 3i64);
    }
    let c = resolve_gemv(spec, &k, &knobs, sh)?;
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
pub(super) fn resolve_gemv(spec: &MatSpec, k: &MatKnobs, knobs: &Knobs, sh: &ShapeFacts) -> Result<Cfg, OpError> {
    let bm = pick(k.bm, "BM", if sh.max_rows <= 8 { 8 } else { 16 })?;
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
    let bn = pick(k.bn, "BN", bn_auto)?;
    let rows = if glu { bn / 2 } else { bn };
    let bk = pick(k.bk, "BK", bk_auto)?;
    let split = pick(k.split, "SPLIT", 1)?;
    let u = (bk / 128).max(1);
    let prefetch = k.prefetch();
    let nb = (rows / 16).max(1);
    let ring_auto = ((if bm == 8 { 3 } else { 4 }) * if prefetch { 2 } else { 1 } / nb).clamp(1, 8);
    let ring = if k.gr == 0 { ring_auto } else { k.gr };
    let batches = (sh.k / 32).div_ceil(split.max(1) as usize).div_ceil(4 * u as usize).max(1);
    // The fewest warps (at most 8) that reach the smallest number of batches per warp.
    let least = batches.div_ceil(8);
    let wa_auto = if many { 4 } else { (1..=8u32).find(|&w| batches.div_ceil(w as usize) == least).unwrap_or(8) };
    let wa = pick(k.wa, "WA", wa_auto)?;
    // FIN auto: the second launch (FIN=last measured slower on the H200 for the stream kernels).
    let fin_last = k.fin_last(false);
    let sk = k.stream_k(knobs)?;
    let ts = k.ts;
    let minb = k.minb;
    // STAGES: 1 or 2 = the register ring of GR slots; 3..=8 = the shared-memory ring of that many cp.async stages
    // per warp (`Stmt::Fp4Gemv` staged; GR is then unused and recorded as the stage count); 0 (or none) = auto:
    // 3 stages for many tiles and for dense 16-token problems without a GLU epilogue (2026-12-04, two runs: M16
    // 0.0153 / 0.0157 ms with 3 stages at MINB=4 against 0.0161 for the register ring), else the register ring (M1
    // read 0.0117 / 0.0118 against 0.0124 staged at MINB=4, but there the 7-warp CTAs get 72 registers and spill 8
    // bytes: left to the tuner).
    let staged_auto = many || (!spec.grouped && !glu && bm == 16);
    // (STAGES absent: the register ring, from before the shared-memory ring existed.)
    let stages = match k.stages {
        None => 2,
        Some(0) if staged_auto => 3,
        Some(0..=2) => 2,
        Some(s) => s,
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
        wb: pick(k.wb, "WB", 1)?,
        split,
        cps: need(k.cps, "CPS")?,
        raster_m: k.raster_m()?,
        // (Validated: an explicit MMA=wgmma is refused.)
        wgmma: k.mma == Some(Mma::Wgmma),
        dec_bits: true,
        stream: false,
        gemv: true,
        // (Stream-K and TS sum their split tiles in the kernel: FIN auto means last there, FIN=kernel is refused.)
        fused: if sk || ts > 0 { k.fin_in_kernel() } else { fin_last && split > 1 },
        prefetch,
        min_blocks: if minb <= 1 { 0 } else { minb },
        ring,
        l2pf: 0,
        bulk: k.copy_bulk(),
        xa: 1,
        sk,
        ts,
        // (Validated: an explicit XDQ=tile is refused, the gemv statement reads bf16 activations only.)
        act_tile: spec.act8 && k.act_tile(),
        f8: false,
        xk: 0,
        pdl: k.pdl,
    };
    // L2PF and XA auto: see `Cfg::l2pf_auto` and `Cfg::xa_auto`.
    let c = Cfg { l2pf: k.l2pf.number().unwrap_or(c.l2pf_auto()), xa: k.xa_quads().unwrap_or(c.xa_auto()), ..c };
    validate(spec, &c, knobs)?;
    Ok(c)
}
