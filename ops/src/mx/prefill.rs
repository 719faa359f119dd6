//! `mxfp4_matmul` `PATH=dq_gemm`: the prefill path (many tokens per expert).
//!
//! Two (or, with MXFP8 activations, three) launches instead of one:
//! 1. [`build_dequant_weights`]: every MXFP4 weight element is decoded once into a bf16 scratch matrix
//!    `wd: [G, N, K]` (dense `[N, K]`), exactly the weight layout `latent_moe_gemm` reads. Each CTA takes a
//!    `[DQ_ROWS, DQ_COLS]` window of the flattened `[G*N, K]` weights, streams its packed words and E8M0 scale
//!    bytes from global memory straight into registers ([`Stmt::DequantFp4Stream`], the bit decode of the
//!    in-kernel paths: one prmt, three bit operations and one bf16x2 multiply per two values) and stores the
//!    bf16 tile. Grouped: windows whose rows belong only to experts without tokens are skipped (the GEMM never
//!    reads them). Bandwidth-bound and independent of M: `N*K*(1/2 + 1/32)` bytes read, `2*N*K` written per
//!    expert with tokens (6144 x 3584: 11.7 MB + 44.0 MB, ~13 us at 4.3 TB/s). Measured (ncu, M4096 packed,
//!    2026-12-02): 47 us at 14% DRAM throughput: the tile's bf16 pairs leave as 4-byte stores, each warp store
//!    touching 8 rows (8 cache lines for 128 bytes), 32 per thread. `DQ=wide` selects [`build_dequant_wide`]
//!    instead (a flat word stream, 16-byte loads and stores covering contiguous bytes per warp; `DQU` words per
//!    thread, `DQP` a persistent grid); `DQ=tile` (the default until the GPU A/B) this kernel.
//! 2. MXFP8 activations only: `mx.dequantize` (E4M3 -> bf16, [`super::quant::build_dequantize`]) into a bf16
//!    scratch `xd: [M, K]` (`M*K*(1 + 1/32)` bytes read, `2*M*K` written).
//! 3. The `latent_moe_gemm` kernel ([`crate::latent_moe_gemm::build_kernel`], wgmma by default) on the bf16
//!    activations and the scratch weights, with the same epilogues (SiTU-GLU / SwiGLU over the halves of N,
//!    routing weight per row) and the same grouped tile walk.
//!
//! Scratch memory: `2*G*N*K` bytes for the weights (6144 x 3584: 44 MB per expert), plus `2*M*K` with MXFP8
//! activations. Every value is the bf16 the in-kernel paths feed the tensor cores (exact: an E2M1 value times a
//! power of two), so the results match theirs up to the order of the f32 accumulation.
//!
//! When [`auto_selects`] picks it (see there for the arithmetic): when the GEMM has at least
//! [`DQ_MTILES_PER_GROUP`] 128-row tiles of tokens per expert with tokens, on average.

use super::matmul::{CopyBy, Dec, Dq, Fin, MatInputs, MatKnobs, MatSpec, Mma, Path, Pf, Raster, ShapeFacts};
use super::*;
use crate::latent_moe_gemm::{self as lmg, GemmSpec};
use crate::plan::Plan;
use k3k_ir::*;

const OP: &str = "mxfp4_matmul";

/// The `PATH` knob value of this path.
pub const PATH_DQ_GEMM: &str = "dq_gemm";

/// Warps per CTA of the weight dequant kernel (16 weight rows each).
pub const DQ_WARPS: u32 = 4;
/// Weight rows per dequant CTA.
pub const DQ_ROWS: u32 = 16 * DQ_WARPS;
/// Weight columns (K) per dequant CTA: four 32-wide blocks, eight 32-bit words and eight scale bytes in
/// flight per thread (packed layout; natural: eight 16-byte block loads), a 32-register bf16 tile.
pub const DQ_COLS: u32 = 128;

/// The knob that picks the weight dequant kernel of this path: `tile` ([`build_dequant_weights`]'s
/// `[DQ_ROWS, DQ_COLS]` register-tile windows, the default) or `wide` ([`build_dequant_wide`]: a flat SIMT stream of
/// 32-bit words, each thread's 8 values stored as one 16-byte access), or `auto` (`mxfp4_matmul`'s default):
/// `wide`. Absent (knob sets written before the knob existed): `tile`. Measured on the H200 (2026-12-02,
/// same run): M4096 N6144 K3584 packed 0.3147 ms with `tile`, 0.2889 with `wide` at DQU=2 (0.3263 at
/// DQU=4, 0.3339 persistent); the 28-expert prefill (G28 mean1024) 3.002 with `tile`, 2.389 / 2.390 at DQU=4 / 2.
pub const DQ_KNOB: &str = "DQ";
/// `DQ=auto`: the measured default, [`DQ_WIDE`].
pub const DQ_AUTO: &str = "auto";
/// `DQ=tile`: the register-tile dequant kernel.
pub const DQ_TILE: &str = "tile";
/// `DQ=wide`: the flat 16-byte-store dequant kernel.
pub const DQ_WIDE: &str = "wide";
/// `DQ=wide`: words (8 values each) per thread, `DQU=1|2|4|8`; 0 or absent: [`DQW_WORDS`].
pub const DQU_KNOB: &str = "DQU";
/// `DQ=wide`: `DQP=n` (1..=32) runs the dequant as a persistent grid-stride loop of about n CTAs per SM
/// ([`build_dequant_wide`]); 0 or absent: one CTA per chunk of words.
pub const DQP_KNOB: &str = "DQP";
/// `DQ=wide`: threads per CTA.
pub const DQW_THREADS: u32 = 256;
/// `DQ=wide`: the default words per thread (all their loads issued before the first decode): 2, measured
/// fastest (see [`DQ_KNOB`]).
pub const DQW_WORDS: u32 = 2;

/// `PATH=auto` takes this path when the GEMM's 128-row token tiles number at least this many per expert with
/// tokens (dense: M > 128). The arithmetic (H200, N6144 K3584, `lab/NOTES.md`):
/// - dequant: `N*K*(1/2 + 1/32 + 2)` = 55.8 MB per expert with tokens, ~16 us at 3.5 TB/s (82% of the measured
///   4.26 TB/s copy);
/// - the in-kernel dequant costs every 128-row token tile a decode of the whole `N x K` weight matrix: the
///   wgmma path ran M4096 (32 token tiles) in 0.585 ms where the bf16 GEMM at `latent_moe_gemm`'s measured
///   551 TFLOP/s needs 0.327 ms, i.e. ~8.1 us per token tile;
/// - many waves: the dequant pays for itself from 16 / 8.1 = 2 token tiles per expert; within one wave (at most
///   132 tiles) a CTA's tile takes ~56 us on the bf16 GEMM and ~1.8 times that with the in-kernel decode, so
///   the 16 us dequant wins from the first token tile. Two tiles per expert is where both estimates agree.
///   Below 65 rows the in-kernel paths switch to mma.sync / streaming tiles (measured 0.065 ms at M64) and are
///   not compared.
pub const DQ_MTILES_PER_GROUP: usize = 2;

fn bad_knobs(knobs: &Knobs, why: String) -> OpError {
    OpError::InvalidKnobs { op: OP, knobs: knobs.to_string(), why }
}

/// The knobs that mean nothing on this path are at their automatic (or no-op) values, or absent: SPLIT 0|1,
/// CPS 0, DEC auto, FIN auto|kernel, PF auto|off, L2PF auto|0, COPY auto|lanes, MINB 0|1, GR 0, XA 0|1, SK 0, TS 0.
/// `None` when they are, else what is not.
fn foreign_knobs(k: &MatKnobs) -> Option<String> {
    let bad: Vec<&str> = [
        (k.split.unwrap_or(0) > 1, "SPLIT > 1"),
        (k.cps.unwrap_or(0) != 0, "CPS != 0"),
        (k.dec.is_some_and(|d| d != Dec::Auto), "DEC != auto"),
        (k.fin == Some(Fin::Last), "FIN = last"),
        (k.pf == Pf::On, "PF = on"),
        (k.l2pf.number().is_some_and(|b| b != 0), "L2PF != 0"),
        (k.copy == CopyBy::Bulk, "COPY = bulk"),
        (k.minb > 1, "MINB > 1"),
        (k.gr != 0, "GR != 0"),
        (k.xa > 1, "XA > 1"),
        (k.sk != 0, "SK != 0"),
        (k.ts != 0, "TS != 0"),
    ]
    .into_iter()
    .filter_map(|(bad, what)| bad.then_some(what))
    .collect();
    (!bad.is_empty()).then(|| bad.join(", "))
}

/// True when the knobs ask for this path (`PATH=dq_gemm`), or leave the choice to the shape (`PATH=auto`, every
/// other knob automatic) and the shape has at least [`DQ_MTILES_PER_GROUP`] 128-row token tiles per expert with
/// tokens (an absent PATH: the tile path).
pub fn selected(spec: &MatSpec, k: &MatKnobs, sh: &ShapeFacts) -> bool {
    match k.path {
        Some(Path::DqGemm) => true,
        Some(Path::Auto) => auto_selects(spec, k, sh),
        _ => false,
    }
}

/// The automatic choice (see [`DQ_MTILES_PER_GROUP`]). Explicit tile knobs (BN, BM, BK, STAGES, WA, WB not 0,
/// MMA not auto; absent ones count as 0 and auto) or knobs of the in-kernel paths keep `PATH=auto` on those paths,
/// so knob points chosen for them keep their meaning. The mid batches of [`super::matmul::wgmma_one_wave`] stay
/// on the tile path.
pub fn auto_selects(spec: &MatSpec, k: &MatKnobs, sh: &ShapeFacts) -> bool {
    if [k.bn, k.bm, k.bk, k.stages, k.wa, k.wb].iter().any(|v| v.unwrap_or(0) != 0) {
        return false;
    }
    if k.mma.is_some_and(|m| m != Mma::Auto) || foreign_knobs(k).is_some() {
        return false;
    }
    if super::matmul::wgmma_one_wave(spec, sh) {
        return false;
    }
    let used = sh.counts.iter().filter(|&&r| r > 0).count();
    let m_tiles: usize = sh.counts.iter().map(|r| r.div_ceil(128)).sum();
    used > 0 && m_tiles >= DQ_MTILES_PER_GROUP * used
}

/// The resolved knobs of this path: the `latent_moe_gemm` knobs of the GEMM launch, and the `mxfp4_matmul`
/// knobs recorded in the dequant kernel (re-resolving them gives the same plan).
#[derive(Clone, Debug, PartialEq)]
pub struct DqCfg {
    pub gemm: Knobs,
    pub mx: Knobs,
    /// `DQ=wide`: the words per thread of [`build_dequant_wide`]; `None`: `DQ=tile` ([`build_dequant_weights`]).
    pub wide: Option<u32>,
    /// `DQ=wide`, `DQP`: CTAs per SM of a persistent grid-stride dequant grid; 0: one CTA per chunk.
    pub persist: u32,
}

/// Map the `mxfp4_matmul` knobs onto the GEMM's: BM, BN, BK, STAGES, RASTER as they are, WA -> WM (warps
/// along tokens), WB -> WN, MMA auto -> wgmma; zeros take `latent_moe_gemm`'s defaults for the MMA kind
/// (wgmma: BM128 BN256 BK64 STAGES4 WM8 WN1; sync: its measured mma.sync set BM128 BN256 BK32 STAGES3 WM2 WN4).
/// Absent knobs: 0, MMA auto, RASTER m. `k` is record `knobs` read (the record is named in errors).
pub fn resolve(k: &MatKnobs, knobs: &Knobs) -> Result<DqCfg, OpError> {
    if let Some(why) = foreign_knobs(k) {
        return Err(bad_knobs(
            knobs,
            format!("PATH=dq_gemm takes no K split, persistent grid, decode, finalize or prefetch knobs ({why})"),
        ));
    }
    let wgmma = match k.mma {
        None | Some(Mma::Auto | Mma::Wgmma) => true,
        Some(Mma::Sync) => false,
        Some(Mma::Fp8 | Mma::F8sync) => {
            return Err(bad_knobs(knobs, format!("MMA={}: auto, sync or wgmma", k.shown("MMA"))));
        }
    };
    let base_record = if wgmma { lmg::default_knobs() } else { lmg::sync_knobs() };
    let base = lmg::GemmKnobs::from_knobs(&base_record)?;
    let pick = |v: Option<u32>, gemm: u32| match v.unwrap_or(0) {
        0 => gemm,
        v => v,
    };
    let bm = pick(k.bm, base.bm);
    let bn = pick(k.bn, base.bn);
    let bk = pick(k.bk, base.bk);
    let stages = pick(k.stages, base.stages);
    // wgmma: one warpgroup per 64 token rows (WM = BM/16), whatever BM is.
    let wm = match k.wa.unwrap_or(0) {
        0 if wgmma => bm / 16,
        0 => base.wm,
        v => v,
    };
    let wn = pick(k.wb, base.wn);
    let raster = k.raster.unwrap_or(Raster::M);
    let mma_name = if wgmma { "wgmma" } else { "sync" };
    let wide = match k.dq {
        Dq::Tile => None,
        Dq::Wide | Dq::Auto => Some(match k.dqu {
            0 => DQW_WORDS,
            u @ (1 | 2 | 4 | 8) => u,
            u => return Err(bad_knobs(knobs, format!("DQU={u}: 1, 2, 4 or 8 words per thread (0 = {DQW_WORDS})"))),
        }),
    };
    let persist = match (wide, k.dqp) {
        (_, 0) => 0,
        (Some(_), p @ 1..=32) => p,
        (None, p) => return Err(bad_knobs(knobs, format!("DQP={p}: a persistent dequant grid needs DQ={DQ_WIDE}"))),
        (_, p) => return Err(bad_knobs(knobs, format!("DQP={p}: 0 (one CTA per chunk) or 1..=32 CTAs per SM"))),
    };
    let gemm = Knobs::new()
        .with("BM", bm)
        .with("BN", bn)
        .with("BK", bk)
        .with("STAGES", stages)
        .with("WM", wm)
        .with("WN", wn)
        .with("RASTER", crate::typed_knobs::value_of(raster))
        .with("MMA", mma_name)
        // The latent GEMM's default: TMA where the copy engine serves the shape (K is a multiple of 32 here),
        // with its measured producer depth.
        .with(lmg::LOAD_KNOB, "auto")
        .with(lmg::AHEAD_KNOB, "auto");
    // The rest of the GEMM's defaults (wgmma: the producer warpgroup and the overlapped walk, 2026-12-04; the
    // bulk-store epilogue, later that day).
    let gemm = [lmg::OVERLAP_KNOB, lmg::PRODUCER_KNOB, lmg::STORE_KNOB]
        .into_iter()
        .filter_map(|name| base_record.0.get(name).map(|v| (name, v.clone())))
        .fold(gemm, |g, (name, v)| g.with(name, v));
    let mx = Knobs::new()
        .with("BN", bn)
        .with("BM", bm)
        .with("BK", bk)
        .with("STAGES", stages)
        .with("WA", wm)
        .with("WB", wn)
        .with("SPLIT", 1u32)
        .with("CPS", 0u32)
        .with("RASTER", crate::typed_knobs::value_of(raster))
        .with("MMA", mma_name)
        .with("DEC", "auto")
        .with("PATH", PATH_DQ_GEMM)
        .with("FIN", "auto")
        .with("PF", "off")
        .with("MINB", 1u32);
    let mx = match wide {
        None => mx.with(DQ_KNOB, DQ_TILE),
        Some(u) => mx.with(DQ_KNOB, DQ_WIDE).with(DQU_KNOB, u).with(DQP_KNOB, persist),
    };
    Ok(DqCfg { gemm, mx, wide, persist })
}

/// The dims and tensors both dequant kernels declare, in this order (see [`build_dequant_weights`]); `g` is the
/// expert count (1 dense).
struct DqTensors {
    n: Expr,
    kq: Expr,
    kb: Expr,
    kd: Expr,
    g: Expr,
    wq: TensorId,
    ws: TensorId,
    offs: Option<TensorId>,
    wd: TensorId,
}

fn dq_tensors(b: &mut KernelBuilder, spec: &MatSpec) -> DqTensors {
    let n = b.dim("N");
    let kq = b.dim("KW");
    let kb = b.dim("KB");
    let kd = b.dim("K");
    let (g, lead) = if spec.grouped {
        let g = b.dim("G");
        (g.clone(), vec![g, n.clone()])
    } else {
        (Expr::Int(1), vec![n.clone()])
    };
    let shape = |last: &Expr| -> Vec<Expr> { lead.iter().cloned().chain([last.clone()]).collect() };
    let wq = b.tensor("wq", DType::U32, &shape(&kq), Access::Read);
    let ws = b.tensor("ws", DType::U8, &shape(&kb), Access::Read);
    let offs = spec.grouped.then(|| b.tensor("offs", DType::I32, std::slice::from_ref(&g), Access::Read));
    let wd = b.tensor("wd", DType::Bf16, &shape(&kd), Access::Write);
    DqTensors { n, kq, kb, kd, g, wq, ws, offs, wd }
}

/// The weight dequant kernel. Tensors (grouped / dense): `wq: [G, N, KW] / [N, KW] u32` (natural bytes as
/// little-endian words, or the packed layout), `ws: [G, N, KB] / [N, KB] u8`, grouped `offs: [G] i32`, and
/// `wd: [G, N, K] / [N, K] bf16` (written). The launcher guarantees K = 8 KW = 32 KB. `mx` are the knobs it
/// records.
pub fn build_dequant_weights(spec: &MatSpec, mx: &Knobs) -> Result<Kernel, OpError> {
    let name = format!("k3k_mxfp4_dq_w_{}_r{DQ_ROWS}_c{DQ_COLS}", dq_suffix(spec));
    let mut b = KernelBuilder::new(&name, 32 * DQ_WARPS);
    b.knobs(mx.clone());
    let DqTensors { n, kq, kb, kd, g, wq, ws, offs, wd } = dq_tensors(&mut b, spec);
    // Flattened rows G*N; x: column windows (neighbouring CTAs share the rows' scale bytes), y: row windows.
    let rows = g * n.clone();
    b.grid(kd.ceil_div(DQ_COLS as i64), rows.ceil_div(DQ_ROWS as i64), 1i64);
    let t = b.tile("w", DType::Bf16, DQ_ROWS, DQ_COLS, [DQ_WARPS, 1]);
    let r0 = b.let_("r0", Expr::block_idx(1) * DQ_ROWS as i64);
    let c0 = b.let_("c0", Expr::block_idx(0) * DQ_COLS as i64);
    let rows_left = b.let_("rows_left", &rows - r0.clone());
    let cols_left = b.let_("cols_left", &kd - c0.clone());
    // One window: bounded by `nr` rows and `nc` columns (constants for a full window, so the GPU code has no
    // per-access bounds tests; the remaining rows and columns at the edges).
    let window = |b: &mut KernelBuilder, nr: Expr, nc: Expr| {
        let qv = view(wq, &r0 * kq.clone() + &c0 / 8i64, kq.clone(), nr.clone(), &nc / 8i64, 4);
        let sv = view(ws, &r0 * kb.clone() + &c0 / 32i64, kb.clone(), nr.clone(), &nc / 32i64, 1);
        b.dequant_fp4_stream(t, qv, sv, spec.packed, spec.fold, spec.finite);
        b.store(t, Place::Global(view(wd, &r0 * kd.clone() + c0.clone(), kd.clone(), nr, nc, 2)));
    };
    let body = |b: &mut KernelBuilder| {
        let full = rows_left.ge(DQ_ROWS as i64).and(cols_left.ge(DQ_COLS as i64));
        b.if_else(
            full,
            |b| window(b, Expr::Int(DQ_ROWS as i64), Expr::Int(DQ_COLS as i64)),
            |b| window(b, rows_left.clone(), cols_left.clone()),
        );
    };
    if let Some(o) = offs {
        // The experts whose weight rows this window covers (first..=last): skipped when none has tokens.
        let first = b.let_("g_first", &r0 / n.clone());
        let last = b.let_("g_last", ((&r0 + DQ_ROWS as i64).min(rows.clone()) - 1i64) / n.clone());
        let start = Expr::select(first.gt(0i64), Expr::load(o, &first - 1i64), Expr::Int(0));
        let tokens = b.let_("tokens", Expr::load(o, last) - start);
        b.if_(tokens.gt(0i64), body);
    } else {
        body(&mut b);
    }
    Ok(b.finish()?)
}

/// The weight dequant kernel the knobs pick (`DQ`).
fn dequant_kernel(spec: &MatSpec, c: &DqCfg) -> Result<Kernel, OpError> {
    match c.wide {
        None => build_dequant_weights(spec, &c.mx),
        Some(u) => build_dequant_wide(spec, &c.mx, u, c.persist),
    }
}

/// The kernel name's layout and promise suffix.
fn dq_suffix(spec: &MatSpec) -> String {
    format!(
        "{}{}{}",
        if spec.grouped { "grouped" } else { "dense" },
        if spec.packed { "_packed" } else { "" },
        match (spec.fold, spec.finite) {
            (true, true) => "_foldf",
            (true, false) => "_fold",
            (false, true) => "_finite",
            (false, false) => "",
        },
    )
}

/// `DQ=wide`: the weight dequant kernel as a flat stream (same tensors, result and grouped skip as
/// [`build_dequant_weights`]). Since K = 8 KW = 32 KB, the 32-bit word `i` of an expert's `wq` (`N * KW` words)
/// holds exactly the 8 values `wd[8 i .. 8 i + 8]` of its `wd` rows, of scale byte `ws[i / 4]` (word `i % 4` of
/// its 32-value block): natural layout, nibble `j` of word `i` is value `8 i + j`; packed, value `8 i + j` is
/// half `j % 2` of pair `i % 4` of word `j / 2` of the block (`mx::pack`, [`k3k_ir::fp4`]), so a thread loads
/// its whole 16-byte block (the four threads of a block share it) and decodes its pair of each word. No K or N
/// edges: only the expert's word count bounds the last CTA.
///
/// Grid `(ceil(N KW / (T U)), G)`, `T` = [`DQW_THREADS`] threads of `words` = U words each, thread `t` of CTA `x`
/// taking words `x T U + t + u T` (`u < U`: every warp access covers consecutive words; a warp's 16-byte stores
/// cover 512 contiguous bytes). Each thread first issues all its loads (U words or U 16-byte blocks, U scale
/// bytes), then per word decodes 8 values in f32 (sign and exponent/mantissa bits moved into an f32 that is
/// `e2m1 * 2^-126`, times `2^(s-1)`, or with scale bytes above 128 times `2^126` then `2^(s-127)`; `s = 0` is the
/// subnormal `2^-127`; exact, as the bf16 it is stored as) and stores them as one 16-byte `StoreWide`.
/// Grouped: CTAs of experts without tokens return at once.
///
/// With `persist` > 0 (`DQP`), a grid-stride loop instead: `max(1, NUM_SMS * persist / G)` CTAs per expert (at
/// most its chunk count) each take the chunks `x, x + gridDim.x, ...` of `T U` words, so the grid is about
/// `persist` CTAs per SM and no partial last wave is left.
pub fn build_dequant_wide(spec: &MatSpec, mx: &Knobs, words: u32, persist: u32) -> Result<Kernel, OpError> {
    let threads = DQW_THREADS;
    let per_cta = (threads * words) as i64;
    let pname = if persist > 0 { format!("_p{persist}") } else { String::new() };
    let name = format!("k3k_mxfp4_dq_w_{}_wide_t{threads}_u{words}{pname}", dq_suffix(spec));
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(mx.clone());
    let DqTensors { n, kq, g, wq, ws, offs, wd, .. } = dq_tensors(&mut b, spec);
    let nw_expr = n.clone() * kq.clone();
    let chunks = nw_expr.ceil_div(per_cta);
    if persist > 0 {
        let num_sms = b.int_arg(k3k_ir::NUM_SMS);
        let per_group = (num_sms * persist as i64 / g.clone()).max(1i64);
        b.grid(per_group.min(chunks.clone()), g, 1i64);
    } else {
        b.grid(chunks.clone(), g, 1i64);
    }
    let nw = b.let_("nw", nw_expr);
    let gi = if spec.grouped { Expr::block_idx(1) } else { Expr::Int(0) };
    let gbase = b.let_("gbase", &gi * nw.clone());
    let (packed, fold, finite) = (spec.packed, spec.fold, spec.finite);
    // One chunk of T U words from word c0 of the expert (bounded: the expert's last, partial chunk).
    let region = |b: &mut KernelBuilder, c0: &Expr, bounded: bool| {
        b.threads(|b| {
            let tid = Expr::thread_idx();
            let wlen = if packed { 4 * words } else { words };
            let q = b.let_array("q", wlen, ScalarTy::Int, 0i64);
            let s = b.let_array("s", words, ScalarTy::Int, 0i64);
            let loc = |u: u32| c0 + &tid + (u * threads) as i64;
            let guarded = |b: &mut KernelBuilder, u: u32, f: &dyn Fn(&mut KernelBuilder)| {
                if bounded { b.if_(loc(u).lt(nw.clone()), f) } else { f(b) }
            };
            // Every load first.
            for u in 0..words {
                let flat = &gbase + loc(u);
                guarded(b, u, &|b| {
                    if packed {
                        // The block's four words (gbase, c0 and u T are multiples of 4: the block starts at
                        // flat - tid % 4).
                        b.load_wide(q, 4 * u, wq, &flat - tid.bitand(3i64), 4);
                    } else {
                        b.array_set(q, u, Expr::load(wq, flat.clone()));
                    }
                    b.array_set(s, u, Expr::load(ws, flat.shr(2i64)));
                });
            }
            // This thread's pair of each word of its block (packed): tid % 4.
            let pair = if packed { Some(b.let_("pair", tid.bitand(3i64))) } else { None };
            for u in 0..words {
                let flat = &gbase + loc(u);
                guarded(b, u, &|b| {
                    let sv = b.let_(&format!("s{u}"), Expr::array_get(s, u as i64));
                    let nan = Expr::Int(0x7FC0_0000).from_bits();
                    let scale = if fold {
                        // 2^(s-1): s <= 128 (or 255).
                        (&sv + 126i64).shl(23i64).from_bits()
                    } else {
                        // 2^(s-127); s = 0: the subnormal 2^-127.
                        Expr::select(sv.eq(0i64), Expr::Int(0x0040_0000), sv.shl(23i64)).from_bits()
                    };
                    let scale = if finite { scale } else { Expr::select(sv.eq(255i64), nan, scale) };
                    let sf = b.let_(&format!("sf{u}"), scale);
                    // Natural: the word and the word shifted down by 24 (values 6 and 7 at bits 0 and 4).
                    let src: Vec<Expr> = if packed {
                        (0..4).map(|l| b.let_(&format!("x{u}_{l}"), Expr::array_get(q, (4 * u + l) as i64))).collect()
                    } else {
                        let w = b.let_(&format!("x{u}"), Expr::array_get(q, u as i64));
                        let hi = b.let_(&format!("x{u}_hi"), w.shr(24i64));
                        vec![w, hi]
                    };
                    let o = b.let_array(&format!("o{u}"), 8, ScalarTy::Float, 0.0);
                    for j in 0..8u32 {
                        // e2m1 * 2^-126 as f32 bits. Packed: value j is half j % 2 of the thread's pair of word
                        // j / 2 (`fp4_pair`: a funnel shift or a multiply, and a mask, per word). Natural: the sign
                        // (nibble bit 3) to bit 31, exponent and mantissa (bits 0..2) to bits 22..24; with the
                        // nibble n in place (`word & 15 << at`), one multiply adds n << 22 and n << 28 (disjoint
                        // bits) and a mask keeps bits 31 and 22..24: three integer instructions per value.
                        let bits = match &pair {
                            Some(f) => packed_fp4_bits(&src[(j / 2) as usize], f.clone(), (j % 2) as i64),
                            None => {
                                let (word, at) = if j < 6 { (&src[0], 4 * j) } else { (&src[1], 4 * (j - 6)) };
                                let mult = (1i64 << (22 - at)) + (1i64 << (28 - at));
                                (word.bitand(15i64 << at) * mult).bitand(0x81C0_0000i64).from_bits()
                            }
                        };
                        let v = if fold {
                            bits * sf.clone()
                        } else {
                            (bits * Expr::Int(0x7E80_0000).from_bits()) * sf.clone()
                        };
                        b.array_set(o, j as i64, v);
                    }
                    b.store_wide(wd, flat.clone() * 8i64, o, 0, 8);
                });
            }
        });
    };
    let chunk = |b: &mut KernelBuilder, c0: Expr| {
        b.if_else((&c0 + per_cta).le(nw.clone()), |b| region(b, &c0, false), |b| region(b, &c0, true));
    };
    let body = |b: &mut KernelBuilder| {
        if persist > 0 {
            b.for_("chunk", Expr::block_idx(0), chunks.clone(), Expr::grid_dim(0), |b, ch| {
                let c0 = b.let_("c0", ch * per_cta);
                chunk(b, c0);
            });
        } else {
            let c0 = b.let_("c0", Expr::block_idx(0) * per_cta);
            chunk(b, c0);
        }
    };
    if let Some(o) = offs {
        let start = Expr::select(gi.gt(0i64), Expr::load(o, &gi - 1i64), Expr::Int(0));
        let tokens = b.let_("tokens", Expr::load(o, gi.clone()) - start);
        b.if_(tokens.gt(0i64), body);
    } else {
        body(&mut b);
    }
    Ok(b.finish()?)
}

/// The GEMM variant for the problem.
pub fn gemm_spec(spec: &MatSpec, sh: &ShapeFacts) -> GemmSpec {
    GemmSpec::for_shape(spec.grouped, spec.epilogue, spec.row_scale, sh.k, sh.n_out)
}

fn gemm_kernel(spec: &MatSpec, sh: &ShapeFacts, c: &DqCfg) -> Result<Kernel, OpError> {
    lmg::build_kernel(&gemm_spec(spec, sh), &c.gemm).map_err(|e| match e {
        OpError::InvalidKnobs { why, .. } => bad_knobs(&c.mx, format!("PATH=dq_gemm GEMM ({}): {why}", c.gemm)),
        e => e,
    })
}

/// The MXFP8 activation dequant kernel (`mx.dequantize` to bf16).
pub(super) fn act_kernel() -> Result<Kernel, OpError> {
    super::quant::build_dequantize(
        &super::quant::DequantSpec { fmt: MxFormat::Fp8, out: DType::Bf16 },
        &super::quant::default_knobs(),
    )
}

/// The kernels of this path, in launch order: weight dequant, (MXFP8) activation dequant, GEMM.
pub fn kernels(spec: &MatSpec, sh: &ShapeFacts, (k, knobs): (&MatKnobs, &Knobs)) -> Result<Vec<Kernel>, OpError> {
    let c = resolve(k, knobs)?;
    let mut v = vec![dequant_kernel(spec, &c)?];
    if spec.act8 {
        v.push(act_kernel()?);
    }
    v.push(gemm_kernel(spec, sh, &c)?);
    Ok(v)
}

/// The plan: inputs as the in-kernel paths take them (MXFP8 activation bytes as `u8 [M, K]` here), the bf16
/// weight scratch `wd` (and activation scratch `xd`), the output `y`.
pub fn plan(
    w: &super::matmul::Fp4Weights,
    inp: &MatInputs<'_>,
    spec: &MatSpec,
    sh: &ShapeFacts,
    (mk, knobs): (&MatKnobs, &Knobs),
) -> Result<Plan, OpError> {
    use super::matmul::{Act, WeightBytes};
    let c = resolve(mk, knobs)?;
    let (g, n, k) = (w.groups, w.n, w.k);
    let m = inp.x.shape().0;
    let mut plan = Plan::default();
    let dq = dequant_kernel(spec, &c)?;
    let gemm = gemm_kernel(spec, sh, &c)?;
    let act = if spec.act8 { Some(act_kernel()?) } else { None };
    if m == 0 {
        // No rows: an empty output and nothing to launch.
        plan.output("y", DType::Bf16, &[0, sh.n_out]);
        return Ok(plan);
    }
    let lead: Vec<usize> = if spec.grouped { vec![g, n] } else { vec![n] };
    let shape = |last: usize| -> Vec<usize> { lead.iter().copied().chain([last]).collect() };
    let words = match &w.q {
        WeightBytes::Natural(q) => q.clone(),
        WeightBytes::Packed(q) => super::pack::words_to_bytes(q),
        WeightBytes::PackedTiles(_) => {
            return Err(OpError::Internal("PATH=dq_gemm does not read tile-major weights (resolved before)".into()));
        }
    };
    let wq = plan.input("wq", HostTensor::from_bytes(DType::U32, &shape(k / 8), words));
    let ws = plan.input("ws", HostTensor::from_bytes(DType::U8, &shape(k / BLOCK), w.s.clone()));
    let offs = inp.offs.map(|o| {
        let o: Vec<i64> = o.iter().map(|&v| v as i64).collect();
        plan.input("offs", HostTensor::from_i64(DType::I32, &[g], &o))
    });
    let x = match inp.x {
        Act::Bf16(x) => plan.input("x", x.clone()),
        Act::Mxfp8(t) => {
            let xq = plan.input("xq", HostTensor::from_bytes(DType::U8, &[m, k], t.q.clone()));
            let xs = plan.input("xs", HostTensor::from_bytes(DType::U8, &[m, k / BLOCK], t.s.clone()));
            let xd = plan.scratch("xd", DType::Bf16, &[m, k]);
            plan.step(act.expect("act8 kernel"), &[xq, xs, xd], &[]);
            xd
        }
    };
    let wd = plan.scratch("wd", DType::Bf16, &shape(k));
    let mut dargs = vec![wq, ws];
    dargs.extend(offs);
    dargs.push(wd);
    // The weights first (the activation dequant, when any, was pushed above: move it after).
    plan.steps.insert(0, Step { kernel: dq, args: dargs, scalars: vec![] });
    let p = inp.p.map(|p| plan.input("p", crate::data::tensor(DType::F32, &[m], p)));
    let y = plan.output("y", DType::Bf16, &[m, sh.n_out]);
    let mut gargs = vec![x, wd];
    gargs.extend(offs);
    gargs.extend(p);
    gargs.push(y);
    plan.step(gemm, &gargs, &[]);
    Ok(plan)
}

use crate::plan::Step;
