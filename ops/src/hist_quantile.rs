//! `hist_quantile`: the histogram quantile reduction of Quantile Balancing (SPEC 2.5), as IR programs.
//!
//! Two operators share the kernels:
//! - `hist_quantile.qb`: the full QB step. Scores `s: [T, E]` f32, bias `b: [E]` f32, `k`;
//!   alpha_t = the (k+1)-th largest of `f32(s_t + b)`, margins `r = f32(s - alpha_t)`, per-expert histograms of
//!   the margins on `[lo, hi) = [-1, 1)` with `B` bins plus under/overflow, the value with `q = T k / E` margins
//!   above it (linear inside the located bin; optional zoomed second pass) and `b_hat = -quantile`.
//!   Outputs `alpha [T]`, `counts [E, B+2]` u32 (mergeable by addition), `bias [E]` (and `counts2 [E, B+2]`,
//!   the zoomed histograms, with the two-pass form).
//! - `hist_quantile.column`: the plain per-column quantile of any `[T, E]` matrix at a fraction `f`, from the
//!   histogram on a given `[lo, hi)`: the value with `(1 - f)(T - 1) + 1` values above it (exactly the
//!   linear-interpolation quantile when `f (T - 1)` is integral). Outputs `counts` and `quantile [E]`.
//!
//! Kernels (all SIMT regions, no tile statements):
//! 1. **alpha** ([`build_alpha`]): one warp per token, persistent grid. Lane `l` reads elements `l + 32 j`
//!    (coalesced 128-byte rows), adds the bias (staged once per block in shared memory), keeps `s + b` in a
//!    shared row buffer and a running maximum per lane group. The (k+1)-th largest of the `32 G` group maxima
//!    (`G = ceil((k+1)/32)`, rank-counted by the lanes) is a lower bound `L` of alpha (k+1 distinct elements
//!    are >= it); the values `>= L` (about 20 of 896 for random scores) are compacted with a shared atomic
//!    counter, and the lane whose candidate has rank k (ties broken by candidate position) writes alpha. More
//!    than [`CAND_CAP`] candidates (ties, adversarial rows) fall back to ranking against the whole row. Exact:
//!    a selection, no arithmetic beyond the one f32 add the reference does. `ASEL=warp` (k < 32):
//!    [`build_alpha_warp`], the same bound and candidates with warp shuffles instead of block barriers and
//!    shared-memory rank counting (bitonic sorts across the warp, a scan for the candidate slots).
//!    `ASEL=ring` ([`build_alpha_ring`]): the warp selection fed by a `cp.async` ring of `ASTAGES` blocks of
//!    `AW` token rows in shared memory, so that the copies of the next `ASTAGES - 1` steps stay in flight while
//!    the warps select (the warp kernel has no load in flight during its ~1,500-cycle selection chain); the
//!    candidates are compacted into the warp's own ring row. `AW=7` at E = 896 makes a block's rows a whole
//!    number of 16-byte copies per thread (the copy's fast path: 7 `cp.async` per thread and step).
//!    `ASEL=lean` ([`build_alpha_lean`]): the warp selection with balanced trees for the lane maximum and
//!    count, one shared atomic per lane for its candidate slots instead of the warp scan (one sort and one
//!    broadcast less per token), compiled for the grid's `ABPS` blocks per SM (`ABPS=6`: 40 registers, 48
//!    warps per SM). The default (k < 32; the rank kernel above that).
//! 2. **histogram** ([`build_hist`]): block = (a slice of `ES` experts, a chunk of at most 65535 tokens).
//!    Two u16 counters per u32 word in shared memory (a chunk's count of one bin is <= 65535, so the low half
//!    never carries into the high half), `ES` chosen so that the block's histograms fit the `HKB` budget;
//!    thread `(row, col)` bins expert `e0 + col` of token rows `row, row + NT/ES, ...`, `HU` rows loaded ahead
//!    of their shared atomics. The bin rule is the reference's ([`Histogram::slot`]) bit for bit:
//!    `x < lo -> 0`, `x >= hi -> B + 1`, else `1 + clamp(floor((x - lo) * scale), 0, B - 1)`, f32, no FMA.
//!    The block's histograms are flushed either as plain stores to a `[P, E, B+2]` partials scratch
//!    (`MERGE=partials`, default: no atomics, deterministic) or with global atomics into `counts`
//!    (`MERGE=atomic`, after a zeroing launch). `HLAYOUT=banks` (default) stores the shared histograms
//!    word-major, `[words, ES]`, so that the expert is the bank and a warp's 32 shared atomics never conflict;
//!    its partials are one u32 per slot (`PPACK=wide`, default) or the packed u16 pairs as they are
//!    (`PPACK=packed`, `[P E, W]`, half the bytes), flushed in tiles of `HFX` experts x `32 / HFX` words
//!    (`HFX` absent: [`auto_hfx`] of the bin count), and its groups of `HU` rows run without per-row bound checks.
//!    `HBIN=select` (`slot_select`) computes the banked bin arithmetic unconditionally and selects among three
//!    floats, where the nested selects as written make ptxas branch around the arithmetic per element (26 SASS
//!    instructions per element with a `BSSY`/`BRA`/`BSYNC`, 40 registers; select: 21, no branch, 32).
//! 3. **locate** ([`build_locate`]): one block per expert. Sums the partials per bin (packed partials: per word,
//!    then unpacked; `LU` partials per iteration from independent loads, `LU=1` one dependent load per
//!    iteration) (writing `counts`), bins
//!    in shared memory, per-thread segment sums, each thread's count above its segment, then the thread
//!    whose segment holds the target (`above < ceil(q) <= above + count`, integers, exactly the reference's
//!    `Histogram::locate`) interpolates `lo + w (b + 1 - (q - above) / count)` in f32. With two passes it also
//!    writes the located bin's edges (from a host table equal to the reference's `bin_edges` rounded to f32)
//!    and scale `B / (hi2 - lo2)`; a second histogram pass bins every expert on its own zoomed range, and a
//!    second locate picks the zoomed value where the first pass located a regular bin.
//!
//! No fused alpha + histogram pass: a block that selects alpha holds whole token rows, so it would bin every
//! expert, and the `E` packed histograms of `B + 2` u16 slots (T262144 E896 B1024: 896 x 513 words = 1.8 MB)
//! are eight times a block's shared memory (227 KiB holds `E (B + 2) / 2 <= 58112` words: B <= 126 at E = 896);
//! binning into global (L2) atomics instead is one 4-byte atomic per score (235 M at the preset), far slower
//! than the second read of the scores. `ATPW` (tokens per warp) overlaps the alpha kernel's latency instead.
//!
//! Inputs are checked on the host before anything launches ([`check_inputs`]): NaN anywhere in `s` (or `b`)
//! is `OpError::BadInput` naming the argument; for QB an infinite score too (a margin would be inf - inf).
//! Histograms convert to and from [`k3k_reference::quantile::Histogram`] and to raw little-endian u32 bytes
//! (the device layout an all-reduce sums) through [`ExpertHistogram`]; [`locate_plan`] locates the quantiles
//! of an already merged histogram (the distributed flow: count per rank, all-reduce, locate once).

use crate::OpError;
use k3k_ir::*;
use serde::{Deserialize, Serialize};

/// Name of the QB operator.
pub const OP_QB: &str = "hist_quantile.qb";
/// Name of the plain column-quantile operator.
pub const OP_COLUMN: &str = "hist_quantile.column";
/// Largest expert count (columns) the alpha kernel supports.
pub const MAX_E: usize = 1024;
/// Largest k (alpha is the (k+1)-th largest).
pub const MAX_K: usize = 63;
/// Candidates per token kept in the alpha kernel's fast path.
pub const CAND_CAP: u32 = 64;
/// Most tokens one histogram block counts (packed u16 counters).
pub const MAX_CHUNK: usize = 65535;
/// Most regular bins.
pub const MAX_BINS: usize = 16384;

// ------------------------------------------------------------------------------------------------------------
// Knobs.

/// The tuning knobs and their meaning.
pub fn knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("AW", "alpha: warps per block (one token per warp)", [4i64, 8, 16])
        .axis("ABPS", "alpha: resident blocks per SM of the persistent grid", [2i64, 3, 4, 5, 6, 8])
        .axis(
            "ASEL",
            "alpha: selection by ranking in shared memory with block barriers, warp shuffles (k < 32), warp \
             shuffles fed by a cp.async ring of token rows (k < 32), or warp shuffles with shared-atomic candidate \
             slots (k < 32: one sort, no scan)",
            ["rank", "warp", "ring", "lean"],
        )
        .axis("ASTAGES", "ring alpha: row blocks in the cp.async ring (ASTAGES - 1 in flight)", [2i64, 3, 4])
        .axis(
            "LU",
            "locate: partial histograms summed per batch of independent loads (1: one load per iteration)",
            [1i64, 4, 8],
        )
        .axis("HT", "histogram: threads per block", [256i64, 512, 1024])
        .axis("HU", "histogram: token rows each thread loads ahead of its atomics", [4i64, 8])
        .axis("HKB", "histogram: shared-memory budget per block in KiB (sets experts per block)", [33i64, 66, 100, 132])
        .axis(
            "HBLOCKS",
            "histogram: blocks to spread the token chunks over (~ SMs x resident blocks)",
            [264i64, 396, 528, 792],
        )
        .axis("MERGE", "histogram flush: plain stores of per-block partials, or global atomics", ["partials", "atomic"])
        .axis(
            "HLAYOUT",
            "histogram shared layout: expert rows (bank conflicts), or word-major with the expert as the bank \
             (conflict-free atomics, packed u16 partials)",
            ["rows", "banks"],
        )
        .axis(
            "HFX",
            "banked histogram flush: experts per warp store (32: conflict-free shared reads, scattered 4-byte \
             stores; fewer: runs of 32/HFX consecutive words per expert, (32/HFX)-way bank conflicts)",
            [4i64, 8, 32],
        )
        .axis(
            "HBIN",
            "banked histogram bin rule: nested selects as written (ptxas branches around the bin arithmetic), or \
             the arithmetic computed unconditionally and two float selects (no branch per element)",
            ["branch", "select"],
        )
        .axis("ATPW", "warp alpha: tokens per warp and step (their loads and shuffle chains overlap)", [1i64, 2])
        .axis(
            "PPACK",
            "banked partials: u32 per slot as the expert-row layout writes them (the locate read measured fastest), \
             or the packed u16 pairs (half the bytes)",
            ["wide", "packed"],
        )
}

/// The knobs used when no tuning record exists (H200: 132 SMs; lean alpha at 40 registers: 6 blocks of 8 warps
/// per SM; 3 histogram blocks of 66 KiB per SM). `HFX` is left out: it then follows the bin count
/// ([`auto_hfx`]); partials are written wide (`PPACK=wide`: the locate's u32 read measured 53 us at
/// T262144 E896 B1024, the packed read 134 us, both with one dependent load per partial in flight per thread);
/// the locate sums 8 partials per iteration from independent loads (`LU=8`; `LU=1` is the old serial loop).
pub fn default_knobs() -> Knobs {
    Knobs::new()
        .with("AW", 8i64)
        // ASEL=lean at 6 blocks per SM (40 registers) from the H200 (2026-12-01, session 5 call B, same run, 200 ms
        // windows): T262144 E896 B1024 step 0.5665 ms (alpha 0.239) against 0.5723 (alpha 0.316) for the warp
        // select at ABPS=4; T65536 B4096 0.4871 against 0.5558.
        .with("ABPS", 6i64)
        .with("ASEL", "lean")
        .with("HT", 512i64)
        .with("HU", 8i64)
        .with("HKB", 66i64)
        .with("HBLOCKS", 396i64)
        // LU=1 from the H200 (2026-12-01, same run, T262144 E896 B1024, step times with K3K_BENCH_STEPS=1): the
        // batched partial loads (LU=8) made the locate slower, 0.069 ms against 0.053 at LU=1. MERGE stays
        // partials: atomic won by 1.5% at B1024 (0.729 vs 0.740 ms, within the spread) but ran 0.705 ms at
        // T65536 B4096 against 0.467 for partials (session 3); the tuner picks atomic per bucket where it wins.
        .with("MERGE", "partials")
        .with("HLAYOUT", "banks")
        .with("PPACK", "wide")
        .with("LU", 1i64)
}

/// The banked flush's `HFX` when the knob is absent (H200, 2026-11-30): 8 at B1024 (histogram pass 0.365 ms
/// vs 0.455 with 32), 32 at B4096 (QB step 0.413 ms vs 0.656 with 8).
pub fn auto_hfx(bins: usize) -> u32 {
    if bins >= 2048 { 32 } else { 8 }
}

/// Knob values read and checked.
#[derive(Clone, Debug)]
pub struct Cfg {
    pub aw: u32,
    pub abps: u32,
    pub ht: u32,
    pub hu: u32,
    pub hkb: u32,
    pub hblocks: u32,
    pub atomic: bool,
    /// `HLAYOUT=banks`: word-major shared histograms (expert = bank) and packed partials.
    pub banked: bool,
    /// `ASEL=warp`: the warp-shuffle alpha kernel where `k < 32`.
    pub warp_alpha: bool,
    /// `HFX`: experts per warp store in the banked flush (`None`: [`auto_hfx`] of the bin count).
    pub hfx: Option<u32>,
    /// `PPACK=packed`: banked partials as packed u16 pairs (else one u32 per slot).
    pub ppack: bool,
    /// `ATPW`: tokens per warp and step of the warp alpha kernel.
    pub atpw: u32,
    /// `ASEL=ring`: the ring-fed warp alpha kernel where `k < 32`.
    pub ring_alpha: bool,
    /// `ASEL=lean`: the warp alpha kernel with shared-atomic candidate slots where `k < 32`.
    pub lean_alpha: bool,
    /// `ASTAGES`: row blocks in the ring alpha kernel's cp.async ring.
    pub astages: u32,
    /// `LU`: partials per batch of independent loads in the locate merge.
    pub lu: u32,
    /// `HBIN=select`: the banked histogram's branch-free bin rule (`slot_select`).
    pub bin_select: bool,
}

impl Cfg {
    /// The banked flush's experts per warp store for `bins` bins.
    pub fn fx(&self, bins: usize) -> u32 {
        self.hfx.unwrap_or_else(|| auto_hfx(bins))
    }
    /// Whether the histogram partials are packed u16 pairs (banked layout, partials merge, `PPACK=packed`).
    pub fn packed_partials(&self) -> bool {
        self.banked && !self.atomic && self.ppack
    }
}

/// Read and check the knobs.
pub fn cfg(k: &Knobs) -> Result<Cfg, OpError> {
    let merge = k.str("MERGE")?;
    let layout = k.str("HLAYOUT").unwrap_or("rows");
    let asel = k.str("ASEL").unwrap_or("rank");
    let ppack = k.str("PPACK").unwrap_or("packed");
    let hbin = k.str("HBIN").unwrap_or("branch");
    let c = Cfg {
        aw: k.u32("AW")?,
        abps: k.u32("ABPS")?,
        ht: k.u32("HT")?,
        hu: k.u32("HU")?,
        hkb: k.u32("HKB")?,
        hblocks: k.u32("HBLOCKS")?,
        atomic: merge == "atomic",
        banked: layout == "banks",
        warp_alpha: asel == "warp",
        hfx: if k.0.contains_key("HFX") { Some(k.u32("HFX")?) } else { None },
        ppack: ppack == "packed",
        atpw: if k.0.contains_key("ATPW") { k.u32("ATPW")? } else { 1 },
        ring_alpha: asel == "ring",
        lean_alpha: asel == "lean",
        astages: if k.0.contains_key("ASTAGES") { k.u32("ASTAGES")? } else { 3 },
        lu: if k.0.contains_key("LU") { k.u32("LU")? } else { 1 },
        bin_select: hbin == "select",
    };
    let invalid = |why: String| Err(OpError::InvalidKnobs { op: "hist_quantile", knobs: k.to_string(), why });
    if !matches!(merge, "partials" | "atomic") {
        return invalid(format!("MERGE must be partials or atomic, got {merge}"));
    }
    if let Some(fx) = c.hfx
        && !(fx.is_power_of_two() && fx <= 32)
    {
        return invalid(format!("HFX={fx} must be a power of two in 1..=32"));
    }
    if !(1..=4).contains(&c.atpw) {
        return invalid(format!("ATPW={} must be in 1..=4", c.atpw));
    }
    if !matches!(hbin, "branch" | "select") {
        return invalid(format!("HBIN must be branch or select, got {hbin}"));
    }
    if !matches!(ppack, "wide" | "packed") {
        return invalid(format!("PPACK must be wide or packed, got {ppack}"));
    }
    if !matches!(asel, "rank" | "warp" | "ring" | "lean") {
        return invalid(format!("ASEL must be rank, warp, ring or lean, got {asel}"));
    }
    if !(2..=8).contains(&c.astages) {
        return invalid(format!("ASTAGES={} must be in 2..=8", c.astages));
    }
    if !(1..=16).contains(&c.lu) {
        return invalid(format!("LU={} must be in 1..=16", c.lu));
    }
    if !matches!(layout, "rows" | "banks") {
        return invalid(format!("HLAYOUT must be rows or banks, got {layout}"));
    }
    if c.aw == 0 || c.aw > 32 {
        return invalid(format!("AW={} must be in 1..=32", c.aw));
    }
    if c.ht < 64 || c.ht > 1024 || !c.ht.is_power_of_two() {
        return invalid(format!("HT={} must be a power of two in 64..=1024", c.ht));
    }
    if c.hu == 0 || c.hu > 16 || c.abps == 0 || c.hblocks == 0 {
        return invalid("HU in 1..=16, ABPS >= 1 and HBLOCKS >= 1 are required".into());
    }
    if c.ht * c.hu > 4096 {
        return invalid(format!(
            "HT x HU = {} > 4096: the unrolled slots of 1024 threads must fit 64 registers",
            c.ht * c.hu
        ));
    }
    if c.hkb == 0 || c.hkb as usize * 1024 > MAX_SHARED_BYTES {
        return invalid(format!("HKB={} KiB exceeds the shared memory of a block", c.hkb));
    }
    Ok(c)
}

// ------------------------------------------------------------------------------------------------------------
// Kernel 1: alpha.

/// What the alpha kernel's program depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AlphaSpec {
    /// Elements per lane, `ceil(E / 32)`.
    pub epl: u32,
    /// alpha is the (k+1)-th largest.
    pub k: u32,
    /// `E == 32 epl` (no masking).
    pub full: bool,
}

impl AlphaSpec {
    /// The variant for `E` experts and `k`.
    pub fn for_shape(e: usize, k: usize) -> Self {
        let epl = e.div_ceil(32).max(1) as u32;
        AlphaSpec { epl, k: k as u32, full: e == 32 * epl as usize }
    }
    /// Lane groups whose maxima bound alpha from below: `ceil((k+1)/32)`.
    pub fn groups(&self) -> u32 {
        (self.k + 1).div_ceil(32)
    }
}

/// The interface every alpha kernel shares: dims T and E, the scores `s: [T, E]`, the bias `b: [E]`, the output
/// `alpha: [T]`, and a grid of one block per `rows_per_block` tokens, at most `abps` blocks per SM.
struct AlphaIo {
    t_dim: Expr,
    e_dim: Expr,
    s: TensorId,
    bias: TensorId,
    alpha: TensorId,
}

fn alpha_io(b: &mut KernelBuilder, rows_per_block: i64, abps: u32) -> AlphaIo {
    let t_dim = b.dim("T");
    let e_dim = b.dim("E");
    let s = b.tensor("s", DType::F32, &[t_dim.clone(), e_dim.clone()], Access::Read);
    let bias = b.tensor("b", DType::F32, std::slice::from_ref(&e_dim), Access::Read);
    let alpha = b.tensor("alpha", DType::F32, std::slice::from_ref(&t_dim), Access::Write);
    let nsm = b.int_arg(NUM_SMS);
    b.grid(t_dim.ceil_div(rows_per_block).min(nsm * abps as i64), 1i64, 1i64);
    AlphaIo { t_dim, e_dim, s, bias, alpha }
}

/// The bias, once per block: `sb[0, i] = b[i]` for `i < E`, 0 up to the padded width `ep`, then a barrier.
fn stage_bias(b: &mut KernelBuilder, bias: TensorId, sb: SharedId, e_dim: &Expr, ep: u32, threads: u32) {
    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), ep as i64, threads as i64, |b, i| {
            let v = Expr::select(i.lt(e_dim.clone()), Expr::load(bias, i.clone()), 0.0f64);
            b.shared_store(sb, 0i64, 0i64, i, v);
        });
    });
    b.barrier();
}

fn neg_inf() -> Expr {
    Expr::Float(f64::NEG_INFINITY)
}

fn ival(v: VarId) -> Expr {
    Expr::Var(v)
}

/// Build the alpha kernel: `s [T, E]`, `b [E]` -> `alpha [T]`.
pub fn build_alpha(spec: &AlphaSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let (w, epl, k) = (c.aw, spec.epl, spec.k);
    let g = spec.groups();
    if g > epl || g > 2 {
        return Err(OpError::Internal(format!("alpha: k = {k} needs {g} lane groups of {epl} elements")));
    }
    let ep = 32 * epl;
    let threads = 32 * w;
    let name = format!("k3k_hq_alpha_epl{epl}_k{k}{}_aw{}_abps{}", if spec.full { "_full" } else { "" }, c.aw, c.abps);
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(Knobs::new().with("AW", c.aw as i64).with("ABPS", c.abps as i64));
    let AlphaIo { t_dim, e_dim, s, bias, alpha } = alpha_io(&mut b, w as i64, c.abps);

    let sb = b.shared("bias", DType::F32, 1, ep, 1, Swizzle::None);
    let vals = b.shared("vals", DType::F32, w, ep, 1, Swizzle::None);
    let mx = b.shared("gmax", DType::F32, w, 32 * g, 1, Swizzle::None);
    let lval = b.shared("lbound", DType::F32, 1, w, 1, Swizzle::None);
    let cnt = b.shared("ncand", DType::I32, 1, w, 1, Swizzle::None);
    let cand = b.shared("cand", DType::F32, w, CAND_CAP, 1, Swizzle::None);

    let in_row = |e: &Expr| -> Expr { if spec.full { Expr::Bool(true) } else { e.lt(e_dim.clone()) } };

    stage_bias(&mut b, bias, sb, &e_dim, ep, threads);
    let step = Expr::grid_dim(0) * w as i64;
    b.for_("tok0", Expr::block_idx(0) * w as i64, t_dim.clone(), step, |b, tok0| {
        // 1: s + b into the row buffer, group maxima.
        b.threads(|b| {
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            b.if_(t.lt(t_dim.clone()), |b| {
                let base = b.let_("base", &t * e_dim.clone());
                let gm: Vec<VarId> = (0..g).map(|i| b.let_var(&format!("gmax{i}"), neg_inf())).collect();
                // All row loads first (EPL coalesced 128-byte lines in flight per warp), then bias, store, maxima.
                let raws: Vec<Expr> = (0..epl)
                    .map(|j| {
                        let e = Expr::lane_idx() + (32 * j) as i64;
                        let ld = Expr::load(s, &base + e.clone());
                        let ld = if spec.full { ld } else { Expr::select(in_row(&e), ld, 0.0f64) };
                        b.let_("raw", ld)
                    })
                    .collect();
                for (j, raw) in raws.into_iter().enumerate() {
                    let j = j as u32;
                    let e = b.let_("e", Expr::lane_idx() + (32 * j) as i64);
                    let v = raw + Expr::shared_load(sb, 0i64, 0i64, e.clone());
                    let v = if spec.full { v } else { Expr::select(in_row(&e), v, neg_inf()) };
                    let v = b.let_("v", v);
                    b.shared_store(vals, 0i64, Expr::warp_idx(), e, v.clone());
                    let gi = (j * g / epl) as usize;
                    b.assign(gm[gi], ival(gm[gi]).max(v));
                }
                for (i, m) in gm.iter().enumerate() {
                    b.shared_store(mx, 0i64, Expr::warp_idx(), Expr::lane_idx() + (32 * i) as i64, ival(*m));
                }
                b.if_(Expr::lane_idx().eq(0i64), |b| b.shared_store(cnt, 0i64, 0i64, Expr::warp_idx(), 0i64));
            });
        });
        b.barrier();
        // 2: the (k+1)-th largest group maximum (rank by counting, ties by position) is the lower bound L.
        b.threads(|b| {
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            b.if_(t.lt(t_dim.clone()), |b| {
                for gi in 0..g {
                    let me = b.let_("me", Expr::lane_idx() + (32 * gi) as i64);
                    let m = b.let_("m", Expr::shared_load(mx, 0i64, Expr::warp_idx(), me.clone()));
                    let rank = b.let_var("rank", 0i64);
                    b.for_unrolled("i", 0i64, (32 * g) as i64, 1i64, |b, i| {
                        let x = Expr::shared_load(mx, 0i64, Expr::warp_idx(), i.clone());
                        let before = x.gt(m.clone()).or(x.eq(m.clone()).and(i.lt(me.clone())));
                        b.assign(rank, ival(rank) + Expr::select(before, 1i64, 0i64));
                    });
                    b.if_(ival(rank).eq(k as i64), |b| b.shared_store(lval, 0i64, 0i64, Expr::warp_idx(), m.clone()));
                }
            });
        });
        b.barrier();
        // 3: compact the candidates >= L.
        b.threads(|b| {
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            b.if_(t.lt(t_dim.clone()), |b| {
                let l = b.let_("l", Expr::shared_load(lval, 0i64, 0i64, Expr::warp_idx()));
                for j in 0..epl {
                    let e = b.let_("e", Expr::lane_idx() + (32 * j) as i64);
                    let v = b.let_("v", Expr::shared_load(vals, 0i64, Expr::warp_idx(), e.clone()));
                    let keep = if spec.full { v.ge(l.clone()) } else { in_row(&e).and(v.ge(l.clone())) };
                    b.if_(keep, |b| {
                        let tgt = AtomicTarget::Shared {
                            buf: cnt,
                            index: Expr::Int(0),
                            row: Expr::Int(0),
                            col: Expr::warp_idx(),
                        };
                        let pos = b.atomic_fetch("pos", tgt, AtomicOp::Add, 1i64);
                        b.if_(pos.lt(CAND_CAP as i64), |b| {
                            b.shared_store(cand, 0i64, Expr::warp_idx(), pos.clone(), v.clone())
                        });
                    });
                }
            });
        });
        b.barrier();
        // 4: the candidate of rank k is alpha.
        b.threads(|b| {
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            b.if_(t.lt(t_dim.clone()), |b| {
                let n = b.let_("n", Expr::shared_load(cnt, 0i64, 0i64, Expr::warp_idx()));
                b.if_else(
                    n.le(CAND_CAP as i64),
                    |b| {
                        store_rank_k(b, "v", (cand, Expr::Int(0), Expr::warp_idx()), &n, k, alpha, &t);
                    },
                    |b| {
                        // Too many candidates (ties): rank against the whole row (values below L never count).
                        let l = b.let_("l", Expr::shared_load(lval, 0i64, 0i64, Expr::warp_idx()));
                        b.for_("i", Expr::lane_idx(), e_dim.clone(), 32i64, |b, i| {
                            let v = b.let_("v", Expr::shared_load(vals, 0i64, Expr::warp_idx(), i.clone()));
                            b.if_(v.ge(l.clone()), |b| {
                                let rank = b.let_var("rank", 0i64);
                                b.for_("j", 0i64, e_dim.clone(), 1i64, |b, j| {
                                    let x = Expr::shared_load(vals, 0i64, Expr::warp_idx(), j.clone());
                                    let before = x.gt(v.clone()).or(x.eq(v.clone()).and(j.lt(i.clone())));
                                    b.assign(rank, ival(rank) + Expr::select(before, 1i64, 0i64));
                                });
                                b.if_(ival(rank).eq(k as i64), |b| b.store_scalar(alpha, t.clone(), v.clone()));
                            });
                        });
                    },
                );
            });
        });
        b.barrier();
    });
    Ok(b.finish()?)
}

/// Build the warp-shuffle alpha kernel (`ASEL=warp`, for `k < 32`): `s [T, E]`, `b [E]` -> `alpha [T]`.
///
/// One warp per token, no block barriers in the token loop and one threads region per step: lane `l` keeps
/// its `EPL` values `s + b` in registers and their maximum; a bitonic sort of the 32 lane maxima across the
/// warp (`shfl_xor`) gives `L`, the (k+1)-th largest lane maximum, a lower bound of alpha (k+1 lanes hold a
/// value >= L). Each lane counts its values >= L, a warp scan (`shfl_up`) gives each lane its slots in the
/// warp's candidate row in shared memory (room for the whole row, so any number of ties is exact), and after
/// a `syncwarp` the candidates (all of them values >= alpha, alpha among them) are sorted across the warp
/// when there are at most 32 (alpha: the k-th largest), else ranked by the lanes (ties by slot). Exact, like
/// [`build_alpha`]: a selection, no arithmetic beyond the one f32 add the reference does.
///
/// `ATPW` tokens per warp and step (rows `u W + warp`, `u < ATPW`): every row's loads are issued before any
/// row's selection, and each stage (maxima, sorts, counts, scans, candidate stores) is emitted for all rows
/// side by side, so the rows' dependent shuffle chains overlap (the kernel is latency-bound: ~450 warp
/// instructions per token at ATPW=1, about a quarter of the SM's issue rate used) and twice the bytes are in
/// flight per warp. Each row has its own candidate row in shared memory.
// The stages loop over the element index outside the row index on purpose (rows side by side).
#[allow(clippy::needless_range_loop)]
pub fn build_alpha_warp(spec: &AlphaSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let (w, epl, k, tpw) = (c.aw, spec.epl, spec.k, c.atpw);
    if k >= 32 {
        return Err(OpError::Internal(format!("warp alpha: k = {k} needs more than the 32 lane maxima")));
    }
    let ep = 32 * epl;
    let threads = 32 * w;
    let name = format!(
        "k3k_hq_alphaw_epl{epl}_k{k}{}_aw{}_abps{}{}",
        if spec.full { "_full" } else { "" },
        c.aw,
        c.abps,
        if tpw > 1 { format!("_tpw{tpw}") } else { String::new() }
    );
    let mut b = KernelBuilder::new(&name, threads);
    let mut kn = Knobs::new().with("AW", c.aw as i64).with("ABPS", c.abps as i64).with("ASEL", "warp");
    if tpw > 1 {
        kn = kn.with("ATPW", tpw as i64);
    }
    b.knobs(kn);
    let per_block = (w * tpw) as i64;
    let AlphaIo { t_dim, e_dim, s, bias, alpha } = alpha_io(&mut b, per_block, c.abps);

    let sb = b.shared("bias", DType::F32, 1, ep, 1, Swizzle::None);
    let cand = b.shared("cand", DType::F32, w * tpw, ep, 1, Swizzle::None);
    let in_row = |e: &Expr| -> Expr { if spec.full { Expr::Bool(true) } else { e.lt(e_dim.clone()) } };

    stage_bias(&mut b, bias, sb, &e_dim, ep, threads);
    let step = Expr::grid_dim(0) * per_block;
    let rows: Vec<u32> = (0..tpw).collect();
    b.for_("tok0", Expr::block_idx(0) * per_block, t_dim.clone(), step, |b, tok0| {
        b.threads(|b| {
            // Every lane runs the warp statements: a warp past the last token works on the last one and
            // writes nothing.
            let ts: Vec<Expr> = rows.iter().map(|&u| b.let_("t", &tok0 + Expr::warp_idx() + (u * w) as i64)).collect();
            let crow: Vec<Expr> = rows.iter().map(|&u| Expr::warp_idx() + (u * w) as i64).collect();
            let bases: Vec<Expr> = ts
                .iter()
                .map(|t| {
                    let tc = b.let_("tc", t.clone().min(t_dim.clone() - 1i64));
                    b.let_("base", &tc * e_dim.clone())
                })
                .collect();
            // All rows' loads first.
            let raws: Vec<Vec<Expr>> = bases
                .iter()
                .map(|base| {
                    (0..epl)
                        .map(|j| {
                            let e = Expr::lane_idx() + (32 * j) as i64;
                            let ld = Expr::load(s, base + e.clone());
                            let ld = if spec.full { ld } else { Expr::select(in_row(&e), ld, 0.0f64) };
                            b.let_("raw", ld)
                        })
                        .collect()
                })
                .collect();
            let mut vals: Vec<Vec<Expr>> = vec![vec![]; tpw as usize];
            let ms: Vec<VarId> = rows.iter().map(|_| b.let_var("m", neg_inf())).collect();
            for j in 0..epl as usize {
                let e = Expr::lane_idx() + (32 * j) as i64;
                let bj = b.let_("bj", Expr::shared_load(sb, 0i64, 0i64, e.clone()));
                for (u, raw) in raws.iter().enumerate() {
                    let v = &raw[j] + bj.clone();
                    let v = if spec.full { v } else { Expr::select(in_row(&e), v, neg_inf()) };
                    let v = b.let_("v", v);
                    b.assign(ms[u], ival(ms[u]).max(v.clone()));
                    vals[u].push(v);
                }
            }
            let ls = warp_kth_largest_rows(b, ms.iter().map(|m| ival(*m)).collect(), k);
            // Candidates: this lane's values >= L (counted in f32: exact small integers, 32-bit shuffles);
            // slots from a warp scan of the counts.
            let cnts: Vec<VarId> = rows.iter().map(|_| b.let_var("cnt", 0.0f64)).collect();
            for j in 0..epl as usize {
                for u in 0..tpw as usize {
                    let v = &vals[u][j];
                    b.assign(cnts[u], ival(cnts[u]) + Expr::select(v.ge(ls[u].clone()), 1.0f64, 0.0f64));
                }
            }
            let mut scs: Vec<Expr> = cnts.iter().map(|c| ival(*c)).collect();
            for d in [1u32, 2, 4, 8, 16] {
                let us: Vec<Expr> = scs.iter().map(|sc| b.warp_shuffle("u", WarpOp::ShflUp(d), sc.clone())).collect();
                for (sc, u) in scs.iter_mut().zip(us) {
                    *sc = b.let_("sc", &*sc + Expr::select(Expr::lane_idx().ge(d as i64), u, 0.0f64));
                }
            }
            let ns: Vec<Expr> = scs
                .iter()
                .map(|sc| {
                    let n = b.warp_shuffle("nf", WarpOp::ShflIdx(31), sc.clone());
                    b.let_("n", n.to_int())
                })
                .collect();
            let pos: Vec<VarId> =
                scs.iter().zip(&cnts).map(|(sc, c)| b.let_var("pos", (sc - ival(*c)).to_int())).collect();
            // The previous step's ranking has read the candidate rows.
            b.warp_sync();
            for j in 0..epl as usize {
                for u in 0..tpw as usize {
                    let v = vals[u][j].clone();
                    let (p, r) = (pos[u], crow[u].clone());
                    b.if_(v.ge(ls[u].clone()), |b| {
                        b.shared_store(cand, 0i64, r, ival(p), v.clone());
                        b.assign(p, ival(p) + 1i64);
                    });
                }
            }
            b.warp_sync();
            // At most 32 candidates (the usual case): one per lane, sorted across the warp.
            let mines: Vec<Expr> = rows
                .iter()
                .enumerate()
                .map(|(u, _)| {
                    let mine = Expr::shared_load(cand, 0i64, crow[u].clone(), Expr::lane_idx());
                    b.let_("mine", Expr::select(Expr::lane_idx().lt(ns[u].clone()), mine, neg_inf()))
                })
                .collect();
            let als = warp_kth_largest_rows(b, mines, k);
            for u in 0..tpw as usize {
                let (t, n, a, r) = (ts[u].clone(), ns[u].clone(), als[u].clone(), crow[u].clone());
                b.if_(t.lt(t_dim.clone()), |b| {
                    b.if_else(
                        n.le(32i64),
                        |b| b.if_(Expr::lane_idx().eq(0i64), |b| b.store_scalar(alpha, t.clone(), a.clone())),
                        |b| {
                            // More (ties): rank every candidate (ties by slot); the one of rank k is alpha.
                            store_rank_k(b, "cv", (cand, Expr::Int(0), r.clone()), &n, k, alpha, &t);
                        },
                    );
                });
            }
        });
    });
    Ok(b.finish()?)
}

/// Build the ring alpha kernel (`ASEL=ring`, for `k < 32`): `s [T, E]`, `b [E]` -> `alpha [T]`.
///
/// The selection of [`build_alpha_warp`] (one warp per token; bound `L` from a bitonic sort of the 32 lane
/// maxima; candidates `>= L` compacted by a warp scan; a second sort; ties ranked), fed by an `ASTAGES`-deep
/// ring of `AW`-token row blocks that `cp.async` copies into shared memory ahead of use: while the warps select
/// in step `i`, the copies of steps `i + 1 .. i + ASTAGES - 1` are in flight ((`ASTAGES` - 1) x `AW` x `4 E`
/// bytes per block), whatever the selection's latency. The warp kernel only has a row's 28 loads in flight
/// while it waits for them and none while it selects (its loads are issued by the same warp that then runs
/// the ~1,500-cycle dependent chain of maxima, shuffles and compaction). The per-lane work is shorter too: the
/// maxima and counts are balanced trees (depth 5 instead of chains of 28), the bias add reads the staged bias
/// row, and the candidates go into the warp's own ring row (its values are in registers by then), so the
/// block needs no separate candidate buffer. Rows past `T` are zero-filled by the copy and write nothing.
/// Exact, like the other alpha kernels.
#[allow(clippy::needless_range_loop)]
pub fn build_alpha_ring(spec: &AlphaSpec, c: &Cfg, e: usize) -> Result<Kernel, OpError> {
    let (w, epl, k, st) = (c.aw, spec.epl, spec.k, c.astages);
    if k >= 32 {
        return Err(OpError::Internal(format!("ring alpha: k = {k} needs more than the 32 lane maxima")));
    }
    let ep = 32 * epl;
    let threads = 32 * w;
    let bytes = (st as usize * w as usize + 1) * ep as usize * 4;
    if bytes > MAX_SHARED_BYTES {
        return Err(OpError::InvalidKnobs {
            op: "hist_quantile",
            knobs: format!("ASEL=ring,AW={w},ASTAGES={st}"),
            why: format!("the ring of {st} x {w} rows of {ep} f32 and the bias need {bytes} bytes of shared memory"),
        });
    }
    // 16-byte copies when rows stay 16-byte aligned, else 8 or 4.
    let vec = if e.is_multiple_of(4) {
        4
    } else if e.is_multiple_of(2) {
        2
    } else {
        1
    };
    let name = format!(
        "k3k_hq_alphar_epl{epl}_k{k}{}_aw{}_abps{}_st{st}_v{vec}",
        if spec.full { "_full" } else { "" },
        c.aw,
        c.abps
    );
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(
        Knobs::new()
            .with("AW", c.aw as i64)
            .with("ABPS", c.abps as i64)
            .with("ASEL", "ring")
            .with("ASTAGES", st as i64),
    );
    let AlphaIo { t_dim, e_dim, s, bias, alpha } = alpha_io(&mut b, w as i64, c.abps);

    let sb = b.shared("bias", DType::F32, 1, ep, 1, Swizzle::None);
    let ring = b.shared("ring", DType::F32, w, ep, st, Swizzle::None);
    let in_row = |e: &Expr| -> Expr { if spec.full { Expr::Bool(true) } else { e.lt(e_dim.clone()) } };

    stage_bias(&mut b, bias, sb, &e_dim, ep, threads);
    let step = b.let_("step", Expr::grid_dim(0) * w as i64);
    let first = b.let_("first", Expr::block_idx(0) * w as i64);
    // Step `i` of this block: tokens `first + i step ..` into ring slot `i % ASTAGES`.
    let fetch = |b: &mut KernelBuilder, i: Expr| {
        let tok = &first + i.clone() * step.clone();
        let src = view(s, &tok * e_dim.clone(), e_dim.clone(), t_dim.clone() - tok.clone(), e_dim.clone(), vec);
        let dst = b.slot(ring, i % st as i64);
        b.copy_async(dst, src);
        b.commit();
    };
    for i in 0..st - 1 {
        fetch(&mut b, Expr::Int(i as i64));
    }
    // Steps counted from 0 (one division here, none per step); the grid has no block without a token.
    let nsteps = b.let_("nsteps", (t_dim.clone() - first.clone() + step.clone() - 1i64) / step.clone());
    b.for_("it", 0i64, nsteps, 1i64, |b, i| {
        let tok0 = b.let_("tok0", &first + i.clone() * step.clone());
        fetch(b, &i + (st - 1) as i64);
        b.wait(st - 1);
        b.barrier();
        b.threads(|b| {
            let slot = b.let_("slot", &i % st as i64);
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            let vals: Vec<Expr> = (0..epl)
                .map(|j| {
                    let e = Expr::lane_idx() + (32 * j) as i64;
                    let x = Expr::shared_load(ring, slot.clone(), Expr::warp_idx(), e.clone())
                        + Expr::shared_load(sb, 0i64, 0i64, e.clone());
                    let x = if spec.full { x } else { Expr::select(in_row(&e), x, neg_inf()) };
                    b.let_("v", x)
                })
                .collect();
            let m = b.let_("m", tree(vals.clone(), &|x, y| x.max(y)));
            let l = warp_kth_largest_rows(b, vec![m], k).remove(0);
            let l = b.let_("l", l);
            // Candidates: this lane's values >= L (counted in f32: exact small integers, 32-bit shuffles).
            let cnt = b.let_(
                "cnt",
                tree(vals.iter().map(|v| Expr::select(v.ge(l.clone()), 1.0f64, 0.0f64)).collect(), &|x, y| x + y),
            );
            let mut sc = cnt.clone();
            for d in [1u32, 2, 4, 8, 16] {
                let u = b.warp_shuffle("u", WarpOp::ShflUp(d), sc.clone());
                sc = b.let_("sc", &sc + Expr::select(Expr::lane_idx().ge(d as i64), u, 0.0f64));
            }
            let n = b.warp_shuffle("nf", WarpOp::ShflIdx(31), sc.clone());
            let n = b.let_("n", n.to_int());
            let pos = b.let_var("pos", (&sc - cnt).to_int());
            // Every lane has read its values from the row before any lane overwrites it with candidates.
            b.warp_sync();
            for v in &vals {
                b.if_(v.ge(l.clone()), |b| {
                    b.shared_store(ring, slot.clone(), Expr::warp_idx(), ival(pos), v.clone());
                    b.assign(pos, ival(pos) + 1i64);
                });
            }
            b.warp_sync();
            let mine = Expr::shared_load(ring, slot.clone(), Expr::warp_idx(), Expr::lane_idx().min((ep - 1) as i64));
            let mine = b.let_("mine", Expr::select(Expr::lane_idx().lt(n.clone()), mine, neg_inf()));
            let a = warp_kth_largest_rows(b, vec![mine], k).remove(0);
            b.if_(t.lt(t_dim.clone()), |b| {
                b.if_else(
                    n.le(32i64),
                    |b| b.if_(Expr::lane_idx().eq(0i64), |b| b.store_scalar(alpha, t.clone(), a.clone())),
                    |b| {
                        // More (ties): rank every candidate (ties by slot); the one of rank k is alpha.
                        store_rank_k(b, "cv", (ring, slot.clone(), Expr::warp_idx()), &n, k, alpha, &t);
                    },
                );
            });
        });
        // Every warp is done with slot `i % ASTAGES` before step `i + 1` copies into it.
        b.barrier();
    });
    // No copy group is left in flight at exit.
    b.wait(0);
    Ok(b.finish()?)
}

/// Build the lean warp alpha kernel (`ASEL=lean`, for `k < 32`): `s [T, E]`, `b [E]` -> `alpha [T]`.
///
/// The selection of [`build_alpha_warp`] (one warp per token; `L` = the (k+1)-th largest of the 32 lane maxima
/// from a bitonic sort across the warp, a lower bound of alpha; the values `>= L` are the candidates; a second
/// sort of at most 32 candidates, else ranking with ties by slot) with less work on the ALU pipe and shorter
/// dependent chains, where the warp kernel spends its time (~450 warp instructions per token, most of them
/// compares, min/max, selects and integer adds, at half the issue rate; ~40 dependent shuffles):
/// - the lane maximum is a balanced tree (depth 5) instead of a chain of `EPL`;
/// - compiled for the grid's residency (`__launch_bounds__(32 AW, ABPS)`, at most what leaves 40 registers): at `ABPS=6`, `AW=8` ptxas fits the kernel
///   in 40 registers without spills, 48 warps per SM instead of 32;
/// - the per-lane candidate count is a balanced tree, and a lane's first slot in the warp's candidate row comes
///   from one shared atomic per lane with candidates (`ATOMS` on the warp's counter, which then holds the
///   count `n`) instead of a warp scan (five dependent shuffles, selects and a broadcast of the total). Lanes
///   take their slot ranges in whatever order their atomics land (on the GPU) or in lane order (CPU
///   backends): the candidates are a set, and the selected *value* does not depend on their order (the
///   fallback ranking's ties by slot pick one of equal values).
///
/// Warp-local ordering of the counter and the candidate row (no block barrier in the token loop): a
/// `syncwarp` before the atomics (the previous token's reads of the row are done), one before the count and
/// the candidates are read, and one before lane 0 zeroes the counter for the next token (every lane has read
/// it). The counters start at zero with the staged bias (one block barrier before the loop). Exact, like the
/// other alpha kernels: a selection, no arithmetic beyond the one f32 add the reference does.
pub fn build_alpha_lean(spec: &AlphaSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let (w, epl, k) = (c.aw, spec.epl, spec.k);
    if k >= 32 {
        return Err(OpError::Internal(format!("lean alpha: k = {k} needs more than the 32 lane maxima")));
    }
    let ep = 32 * epl;
    let threads = 32 * w;
    let name = format!("k3k_hq_alphal_epl{epl}_k{k}{}_aw{}_abps{}", if spec.full { "_full" } else { "" }, c.aw, c.abps);
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(Knobs::new().with("AW", c.aw as i64).with("ABPS", c.abps as i64).with("ASEL", "lean"));
    // The persistent grid has ABPS blocks per SM: compile for that residency (ptxas caps the registers at what
    // ABPS blocks of AW warps leave of the SM's 64 Ki, e.g. 40 at ABPS=6, AW=8: 48 warps per SM instead of the
    // 32 that 48 registers allow).
    // Never below EPL + 12 registers rounded up to 8 (the lane's values and the sorts' temporaries: 40 at
    // E = 896, where 32 spills; 48 at E = 1024, where 40 spills).
    let min_regs = (epl + 12).next_multiple_of(8);
    b.min_blocks_per_sm(c.abps.min(65536 / (min_regs * threads)).max(1));
    let AlphaIo { t_dim, e_dim, s, bias, alpha } = alpha_io(&mut b, w as i64, c.abps);

    let sb = b.shared("bias", DType::F32, 1, ep, 1, Swizzle::None);
    let cand = b.shared("cand", DType::F32, w, ep, 1, Swizzle::None);
    let cnt = b.shared("ncand", DType::I32, 1, w, 1, Swizzle::None);
    let in_row = |e: &Expr| -> Expr { if spec.full { Expr::Bool(true) } else { e.lt(e_dim.clone()) } };

    // The counters start at zero; the bias staging's barrier orders this before the loop.
    b.threads(|b| {
        b.if_(Expr::thread_idx().lt(w as i64), |b| b.shared_store(cnt, 0i64, 0i64, Expr::thread_idx(), 0i64));
    });
    stage_bias(&mut b, bias, sb, &e_dim, ep, threads);
    let step = Expr::grid_dim(0) * w as i64;
    b.for_("tok0", Expr::block_idx(0) * w as i64, t_dim.clone(), step, |b, tok0| {
        b.threads(|b| {
            // Every lane runs the warp statements: a warp past the last token works on the last one and
            // writes nothing.
            let t = b.let_("t", &tok0 + Expr::warp_idx());
            let tc = b.let_("tc", t.clone().min(t_dim.clone() - 1i64));
            let base = b.let_("base", &tc * e_dim.clone());
            let raws: Vec<Expr> = (0..epl)
                .map(|j| {
                    let e = Expr::lane_idx() + (32 * j) as i64;
                    let ld = Expr::load(s, &base + e.clone());
                    let ld = if spec.full { ld } else { Expr::select(in_row(&e), ld, 0.0f64) };
                    b.let_("raw", ld)
                })
                .collect();
            let vals: Vec<Expr> = raws
                .into_iter()
                .enumerate()
                .map(|(j, raw)| {
                    let e = Expr::lane_idx() + (32 * j) as i64;
                    let v = raw + Expr::shared_load(sb, 0i64, 0i64, e.clone());
                    let v = if spec.full { v } else { Expr::select(in_row(&e), v, neg_inf()) };
                    b.let_("v", v)
                })
                .collect();
            let m = b.let_("m", tree(vals.clone(), &|x, y| x.max(y)));
            let l = warp_kth_largest_rows(b, vec![m], k).remove(0);
            let l = b.let_("l", l);
            // This lane's values >= L, counted in f32 (exact small integers; FSET and FADD, a tree).
            let c = b.let_(
                "cnt",
                tree(vals.iter().map(|v| Expr::select(v.ge(l.clone()), 1.0f64, 0.0f64)).collect(), &|x, y| x + y),
            );
            // The previous token's reads of the candidate row and the counter are done.
            b.warp_sync();
            // The lane's first slot: one shared atomic per lane with candidates (instead of a warp scan).
            let pos = b.let_var("pos", 0i64);
            b.if_(c.gt(0.0f64), |b| {
                let tgt =
                    AtomicTarget::Shared { buf: cnt, index: Expr::Int(0), row: Expr::Int(0), col: Expr::warp_idx() };
                let p0 = b.atomic_fetch("p0", tgt, AtomicOp::Add, c.to_int());
                b.assign(pos, p0);
            });
            for v in &vals {
                b.if_(v.ge(l.clone()), |b| {
                    b.shared_store(cand, 0i64, Expr::warp_idx(), ival(pos), v.clone());
                    b.assign(pos, ival(pos) + 1i64);
                });
            }
            b.warp_sync();
            let n = b.let_("n", Expr::shared_load(cnt, 0i64, 0i64, Expr::warp_idx()));
            let mine = Expr::shared_load(cand, 0i64, Expr::warp_idx(), Expr::lane_idx());
            let mine = b.let_("mine", Expr::select(Expr::lane_idx().lt(n.clone()), mine, neg_inf()));
            let a = warp_kth_largest_rows(b, vec![mine], k).remove(0);
            b.if_(t.lt(t_dim.clone()), |b| {
                b.if_else(
                    n.le(32i64),
                    |b| b.if_(Expr::lane_idx().eq(0i64), |b| b.store_scalar(alpha, t.clone(), a.clone())),
                    |b| {
                        // More (ties): rank every candidate (ties by slot); the one of rank k is alpha.
                        store_rank_k(b, "cv", (cand, Expr::Int(0), Expr::warp_idx()), &n, k, alpha, &t);
                    },
                );
            });
            // Every lane has read the counter: zero it for the next token.
            b.warp_sync();
            b.if_(Expr::lane_idx().eq(0i64), |b| b.shared_store(cnt, 0i64, 0i64, Expr::warp_idx(), 0i64));
        });
    });
    Ok(b.finish()?)
}

/// A balanced tree of `op` over `xs` (depth log2 of the count instead of a chain).
fn tree(mut xs: Vec<Expr>, op: &dyn Fn(Expr, Expr) -> Expr) -> Expr {
    while xs.len() > 1 {
        let mut next = Vec::with_capacity(xs.len().div_ceil(2));
        let mut it = xs.into_iter();
        while let Some(x) = it.next() {
            next.push(match it.next() {
                Some(y) => op(x, y),
                None => x,
            });
        }
        xs = next;
    }
    xs.pop().expect("at least one value")
}

/// The tie fallback of the alpha kernels: each lane ranks the candidates `lane, lane + 32, ..` (< `n`) of shared
/// row `(slot, row)` of `buf` against all `n` (larger first, equal ones by position), and the one of rank `k` is
/// stored as `alpha[t]`. `name` names the candidate's variable in the emitted code.
fn store_rank_k(
    b: &mut KernelBuilder,
    name: &str,
    (buf, slot, row): (SharedId, Expr, Expr),
    n: &Expr,
    k: u32,
    alpha: TensorId,
    t: &Expr,
) {
    b.for_("i", Expr::lane_idx(), n.clone(), 32i64, |b, i| {
        let v = b.let_(name, Expr::shared_load(buf, slot.clone(), row.clone(), i.clone()));
        let rank = b.let_var("rank", 0i64);
        b.for_("j", 0i64, n.clone(), 1i64, |b, j| {
            let x = Expr::shared_load(buf, slot.clone(), row.clone(), j.clone());
            let before = x.gt(v.clone()).or(x.eq(v.clone()).and(j.lt(i.clone())));
            b.assign(rank, ival(rank) + Expr::select(before, 1i64, 0i64));
        });
        b.if_(ival(rank).eq(k as i64), |b| b.store_scalar(alpha, t.clone(), v.clone()));
    });
}

/// The `k`-th largest (from 0) of the 32 lanes' values in each of the rows `xs`, in every lane: a bitonic sort across the warp,
/// descending (at stage `size`, lanes with bit `size` clear sort their run descending, and the lower lane of a
/// pair keeps the larger value in a descending run), then a broadcast of lane `k`. Top level of a region; the rows' stages side by side (their
/// shuffle chains overlap).
fn warp_kth_largest_rows(b: &mut KernelBuilder, xs: Vec<Expr>, k: u32) -> Vec<Expr> {
    let mut xs = xs;
    let mut size = 2u32;
    while size <= 32 {
        let mut stride = size / 2;
        while stride >= 1 {
            let os: Vec<Expr> = xs.iter().map(|x| b.warp_shuffle("o", WarpOp::ShflXor(stride), x.clone())).collect();
            let lower = Expr::lane_idx().bitand(stride as i64).eq(0i64);
            let desc = if size == 32 { Expr::Bool(true) } else { Expr::lane_idx().bitand(size as i64).eq(0i64) };
            for (x, o) in xs.iter_mut().zip(os) {
                *x = b.let_(
                    "x",
                    Expr::select(lower.clone().eq(desc.clone()), x.clone().max(o.clone()), x.clone().min(o)),
                );
            }
            stride /= 2;
        }
        size *= 2;
    }
    xs.into_iter().map(|x| b.warp_shuffle("kth", WarpOp::ShflIdx(k), x)).collect()
}

// ------------------------------------------------------------------------------------------------------------
// Kernel 2: histograms.

/// What is binned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Binned {
    /// QB margins `f32(s[t, e] - alpha[t])`.
    Margin,
    /// The matrix values themselves.
    Plain,
}

/// What the histogram kernel's program depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HistSpec {
    /// Regular bins B.
    pub bins: u32,
    pub binned: Binned,
    /// Per-expert ranges from a `zoom [4, E]` tensor (second pass) instead of the `lo`/`hi`/`scale` arguments.
    pub zoom: bool,
    /// Experts per block.
    pub es: u32,
    /// Flush with global atomics into `counts` (else plain stores into `partials`).
    pub atomic: bool,
    /// Word-major shared histograms `[words, ES]` (the expert is the bank: a warp's 32 shared atomics hit 32
    /// banks) and, with partials, the packed u16 pairs flushed as they are (`partials [P E, W]`, rows padded to
    /// `W` = [`packed_width`] words so that runs of 8 words are whole 32-byte sectors).
    pub banked: bool,
    /// Banked flush: experts per warp store (runs of `32 / fx` consecutive words of each).
    pub fx: u32,
    /// Banked partials flushed as the packed u16 pairs (else one u32 per slot, `[P E, B+2]`).
    pub packed: bool,
    /// Banked: the branch-free bin rule `slot_select` (else `slot_expr_lean`).
    pub select: bool,
}

/// Row width in u32 words of packed partials: the words of a histogram rounded up to 8 (32 bytes).
pub fn packed_width(bins: u32) -> u32 {
    words(bins).next_multiple_of(8)
}

/// u32 words per expert of the packed shared histogram.
fn words(bins: u32) -> u32 {
    (bins + 2).div_ceil(2)
}

/// Experts per histogram block: the largest power of two (at most 64, at most the threads, at most E rounded
/// up to a power of two) whose packed histograms fit the `HKB` budget; an error when one does not fit.
pub fn experts_per_block(bins: usize, e: usize, c: &Cfg) -> Result<u32, OpError> {
    let per = words(bins as u32) as usize * 4;
    let budget = c.hkb as usize * 1024;
    if per > budget {
        return Err(OpError::InvalidKnobs {
            op: "hist_quantile",
            knobs: format!("HKB={}", c.hkb),
            why: format!("one expert's {bins}-bin histogram ({per} bytes) exceeds the {budget}-byte budget"),
        });
    }
    let mut es = 1u32;
    while es < 64 && (es as usize * 2) * per <= budget && es * 2 <= c.ht && (es as usize) < e.next_power_of_two() {
        es *= 2;
    }
    Ok(es)
}

/// The f32 slot of value `x` (the reference's `Histogram::slot`, bit for bit).
fn slot_expr(x: &Expr, lo: &Expr, hi: &Expr, scale: &Expr, bins: u32) -> Expr {
    let f = ((x - lo.clone()) * scale.clone()).floor().max(0.0f64).min((bins - 1) as f64);
    // f is an integral float in [0, B-1] (< 2^23): adding 2^23 puts it in the low mantissa bits, exactly, without
    // a float -> 64-bit int conversion; 0x4B000000 + 1 is 2^23's bits minus the slot offset.
    let bin_plus_1 = (f + 8_388_608.0f64).bits() - (0x4B00_0000i64 - 1);
    Expr::select(x.lt(lo.clone()), 0i64, Expr::select(x.ge(hi.clone()), (bins + 1) as i64, bin_plus_1))
}

/// [`slot_expr`] with one operation less (the banked pass): where `x >= lo` is selected, `x - lo` is `>= +0`
/// (a rounded non-negative difference) and so is its product with the finite positive scale, whose floor needs
/// no clamp at 0. Bit for bit the same slot.
fn slot_expr_lean(x: &Expr, lo: &Expr, hi: &Expr, scale: &Expr, bins: u32) -> Expr {
    let f = ((x - lo.clone()) * scale.clone()).floor().min((bins - 1) as f64);
    let bin_plus_1 = (f + 8_388_608.0f64).bits() - (0x4B00_0000i64 - 1);
    Expr::select(x.lt(lo.clone()), 0i64, Expr::select(x.ge(hi.clone()), (bins + 1) as i64, bin_plus_1))
}

/// [`slot_expr_lean`] without a branch: ptxas compiles the nested selects of a slot whose arithmetic sits inside
/// them into a branch around that arithmetic per element (`BSSY`/`BRA`/`BSYNC`, the scale reloaded from the
/// constant bank, and divergence where lanes' values fall outside `[lo, hi)`). Here the arithmetic is a
/// statement of its own, computed for every value, and the two range tests select among three floats whose
/// bits are the slot plus 2^23: `2^23` (slot 0, `x < lo`), `2^23 + B + 1` (`x >= hi`), and
/// `min(floor((x - lo) scale), B - 1) + 2^23 + 1` (exact: a small integral float plus 2^23 + 1). Bit for bit
/// the reference's slot wherever it is selected; where it is not (values outside the range, infinite plain
/// values) the unselected float is never read.
fn slot_select(b: &mut KernelBuilder, x: &Expr, lo: &Expr, hi: &Expr, scale: &Expr, bins: u32) -> Expr {
    let f = ((x - lo.clone()) * scale.clone()).floor().min((bins - 1) as f64) + 8_388_609.0f64;
    let f = b.let_("f", f);
    let r =
        Expr::select(x.lt(lo.clone()), 8_388_608.0f64, Expr::select(x.ge(hi.clone()), (8_388_609 + bins) as f64, f));
    r.bits() - 0x4B00_0000i64
}

/// Build a histogram kernel. Arguments: `s [T, E]`, (`alpha [T]`), (`zoom [4, E]`), then `partials [P E, B+2]`
/// (or `counts [E, B+2]` and the int argument `P` with `MERGE=atomic`); scalars `CH` (tokens per chunk) and,
/// without zoom, `lo`, `hi`, `scale`. Grid `(ceil(E / ES), P)`.
pub fn build_hist(spec: &HistSpec, c: &Cfg) -> Result<Kernel, OpError> {
    let (bins, es, nt, hu) = (spec.bins, spec.es, c.ht, c.hu);
    let nb = bins + 2;
    let wpe = words(bins);
    let rp = nt / es;
    let name = format!(
        "k3k_hq_hist_b{bins}_{}{}_es{es}_{}_ht{nt}_hu{hu}{}",
        match spec.binned {
            Binned::Margin => "margin",
            Binned::Plain => "plain",
        },
        if spec.zoom { "_zoom" } else { "" },
        if spec.atomic { "atomic" } else { "partials" },
        if !spec.banked {
            String::new()
        } else if spec.fx == 32 {
            "_bk".into()
        } else {
            format!("_bk_fx{}", spec.fx)
        }
    ) + if spec.banked && !spec.atomic && !spec.packed { "_wide" } else { "" }
        + if spec.select { "_sel" } else { "" };
    let mut b = KernelBuilder::new(&name, nt);
    let mut kn = Knobs::new()
        .with("HT", nt as i64)
        .with("HU", hu as i64)
        .with("HKB", c.hkb as i64)
        .with("MERGE", if spec.atomic { "atomic" } else { "partials" })
        .with("HLAYOUT", if spec.banked { "banks" } else { "rows" });
    if spec.banked {
        kn = kn.with("HFX", spec.fx as i64);
        if !spec.atomic {
            kn = kn.with("PPACK", if spec.packed { "packed" } else { "wide" });
        }
        if spec.select {
            kn = kn.with("HBIN", "select");
        }
    }
    b.knobs(kn);
    let t_dim = b.dim("T");
    let e_dim = b.dim("E");
    let s = b.tensor("s", DType::F32, &[t_dim.clone(), e_dim.clone()], Access::Read);
    let alpha = (spec.binned == Binned::Margin)
        .then(|| b.tensor("alpha", DType::F32, std::slice::from_ref(&t_dim), Access::Read));
    let zoom = spec.zoom.then(|| b.tensor("zoom", DType::F32, &[Expr::Int(4), e_dim.clone()], Access::Read));
    let (out, p_dim) = if spec.atomic {
        let o = b.tensor("counts", DType::U32, &[e_dim.clone(), Expr::Int(nb as i64)], Access::ReadWrite);
        (o, b.int_arg("P"))
    } else {
        let r = b.dim("R");
        let width = if spec.banked && spec.packed { packed_width(bins) } else { nb };
        let o = b.tensor("partials", DType::U32, &[r.clone(), Expr::Int(width as i64)], Access::Write);
        (o, r / e_dim.clone())
    };
    let ch = b.int_arg("CH");
    let geom = (!spec.zoom).then(|| (b.float_arg("lo"), b.float_arg("hi"), b.float_arg("scale")));
    b.grid(e_dim.ceil_div(es as i64), p_dim, 1i64);
    // Element (expert, word) of the block's packed histograms: `rows` layout `[ES, words]`, `banks` `[words, ES]`.
    let hist = if spec.banked {
        b.shared("hist", DType::U32, wpe, es, 1, Swizzle::None)
    } else {
        b.shared("hist", DType::U32, es, wpe, 1, Swizzle::None)
    };
    let banked = spec.banked;
    let at_hist = move |ex: Expr, wd: Expr| -> (Expr, Expr) { if banked { (wd, ex) } else { (ex, wd) } };
    let total_words = (es * wpe) as i64;

    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), total_words, nt as i64, |b, i| {
            if banked {
                b.shared_store(hist, 0i64, &i / es as i64, &i % es as i64, 0i64);
            } else {
                b.shared_store(hist, 0i64, &i / wpe as i64, &i % wpe as i64, 0i64);
            }
        });
    });
    b.barrier();
    b.threads(|b| {
        let col = b.let_("col", Expr::thread_idx() % es as i64);
        let row = b.let_("row", Expr::thread_idx() / es as i64);
        let e = b.let_("e", Expr::block_idx(0) * es as i64 + col.clone());
        b.if_(e.lt(e_dim.clone()), |b| {
            let (lo, hi, scale) = match (&geom, zoom) {
                (Some((lo, hi, sc)), _) => (lo.clone(), hi.clone(), sc.clone()),
                (None, Some(z)) => (
                    b.let_("lo", Expr::load(z, e.clone())),
                    b.let_("hi", Expr::load(z, e_dim.clone() + e.clone())),
                    b.let_("scale", Expr::load(z, e_dim.clone() * 2i64 + e.clone())),
                ),
                (None, None) => unreachable!(),
            };
            let rpe = b.let_("rpe", e_dim.clone() * rp as i64);
            let t0 = b.let_("t0", Expr::block_idx(1) * ch.clone());
            let t1 = b.let_("t1", (&t0 + ch.clone()).min(t_dim.clone()));
            let value = |t: &Expr, at: Expr| -> Expr {
                let v = Expr::load(s, at);
                match alpha {
                    Some(a) => v - Expr::load(a, t.clone()),
                    None => v,
                }
            };
            let count = |b: &mut KernelBuilder, x: Expr| {
                let sl = if spec.select {
                    let e = slot_select(b, &x, &lo, &hi, &scale, bins);
                    b.let_("slot", e)
                } else {
                    let slot = if banked { slot_expr_lean } else { slot_expr };
                    b.let_("slot", slot(&x, &lo, &hi, &scale, bins))
                };
                // The u16 half of the slot: 1 or 1 << 16.
                let inc =
                    if banked { sl.bitand(1i64) * 65535i64 + 1i64 } else { Expr::Int(1).shl(sl.bitand(1i64) * 16i64) };
                let (r, c) = at_hist(col.clone(), sl.shr(1i64));
                b.atomic_add_shared(hist, 0i64, r, c, inc);
            };
            if banked {
                // Groups of HU rows all inside the chunk, without per-row checks; then the rest one by one.
                let st = b.let_("st", &t0 + row.clone());
                let lim = b.let_("lim", &t1 - ((hu - 1) * rp) as i64);
                let g = (rp * hu) as i64;
                let nfull = b.let_("nfull", Expr::select(lim.gt(st.clone()), (&lim - st.clone() + (g - 1)) / g, 0i64));
                b.for_("t", st.clone(), lim.clone(), g, |b, t| {
                    let at0 = b.let_("at0", &t * e_dim.clone() + e.clone());
                    let xs: Vec<Expr> = (0..hu)
                        .map(|u| {
                            let tt = &t + (u * rp) as i64;
                            b.let_(&format!("x{u}"), value(&tt, &at0 + rpe.clone() * u as i64))
                        })
                        .collect();
                    for x in xs {
                        count(b, x);
                    }
                });
                b.for_("t", &st + nfull * g, t1.clone(), rp as i64, |b, t| {
                    let x = b.let_("x", value(&t, &t * e_dim.clone() + e.clone()));
                    count(b, x);
                });
            } else {
                b.for_("t", &t0 + row.clone(), t1.clone(), (rp * hu) as i64, |b, t| {
                    // Loads first (HU rows in flight), then the bins and shared atomics.
                    let xs: Vec<VarId> = (0..hu).map(|u| b.let_var(&format!("x{u}"), 0.0f64)).collect();
                    let tts: Vec<Expr> = (0..hu).map(|u| b.let_(&format!("tt{u}"), &t + (u * rp) as i64)).collect();
                    let at0 = b.let_("at0", &t * e_dim.clone() + e.clone());
                    for (u, (x, tt)) in xs.iter().zip(&tts).enumerate() {
                        b.if_(tt.lt(t1.clone()), |b| {
                            b.assign(*x, value(tt, &at0 + rpe.clone() * u as i64));
                        });
                    }
                    for (x, tt) in xs.iter().zip(&tts) {
                        b.if_(tt.lt(t1.clone()), |b| count(b, ival(*x)));
                    }
                });
            }
        });
    });
    b.barrier();
    // Banked: a warp takes `fx` experts x `32 / fx` consecutive words (tiles of the `[words, ES]` histogram;
    // (32 / fx)-way bank conflicts, runs of 32 / fx words per expert in the stores).
    let fx = spec.fx.min(es);
    let run = 32 / fx;
    let (tiles_r, tiles_w) = (es / fx, wpe.div_ceil(run));
    let flush_total = if banked { (tiles_r * tiles_w * 32) as i64 } else { total_words };
    let pw = packed_width(bins);
    b.threads(|b| {
        b.for_("i", Expr::thread_idx(), flush_total, nt as i64, |b, i| {
            let (r, wd) = if banked {
                let (l, q) = (&i % 32i64, &i / 32i64);
                (
                    b.let_("r", (&q % tiles_r as i64) * fx as i64 + &l / run as i64),
                    b.let_("wd", (&q / tiles_r as i64) * run as i64 + &l % run as i64),
                )
            } else {
                (b.let_("r", &i / wpe as i64), b.let_("wd", &i % wpe as i64))
            };
            let e = b.let_("e", Expr::block_idx(0) * es as i64 + r.clone());
            b.if_(e.lt(e_dim.clone()).and(wd.lt(wpe as i64)), |b| {
                let (hr, hc) = at_hist(r.clone(), wd.clone());
                let v = b.let_("v", Expr::shared_load(hist, 0i64, hr, hc));
                if banked && !spec.atomic && spec.packed {
                    // The packed pair as it is (a chunk's count is <= 65535): half the bytes to write and merge.
                    let at = (Expr::block_idx(1) * e_dim.clone() + e.clone()) * pw as i64 + wd.clone();
                    b.store_scalar(out, at, v.clone());
                    return;
                }
                let s0 = b.let_("s0", &wd * 2i64);
                let lo16 = v.bitand(0xffffi64);
                let hi16 = v.shr(16i64);
                if spec.atomic {
                    let at = b.let_("at", &e * nb as i64 + s0.clone());
                    b.if_(lo16.ne(0i64), |b| b.atomic_add_global(out, at.clone(), lo16.clone()));
                    b.if_((&s0 + 1i64).lt(nb as i64).and(hi16.ne(0i64)), |b| {
                        b.atomic_add_global(out, &at + 1i64, hi16.clone())
                    });
                } else {
                    let at = b.let_("at", (Expr::block_idx(1) * e_dim.clone() + e.clone()) * nb as i64 + s0.clone());
                    b.store_scalar(out, at.clone(), lo16);
                    b.if_((&s0 + 1i64).lt(nb as i64), |b| b.store_scalar(out, &at + 1i64, hi16.clone()));
                }
            });
        });
    });
    Ok(b.finish()?)
}

/// A kernel setting a u32 `[N]` tensor to zero (before atomic flushes).
pub fn build_zero() -> Result<Kernel, OpError> {
    let mut b = KernelBuilder::new("k3k_hq_zero_u32", 256);
    let rows = b.dim("R");
    let cols = b.dim("C");
    let x = b.tensor("x", DType::U32, &[rows.clone(), cols.clone()], Access::Write);
    let n = rows * cols;
    b.grid(n.ceil_div(1024i64), 1i64, 1i64);
    b.threads(|b| {
        for u in 0..4i64 {
            let i = b.let_("i", Expr::block_idx(0) * 1024i64 + Expr::thread_idx() + u * 256);
            b.if_(i.lt(n.clone()), |b| b.store_scalar(x, i.clone(), 0i64));
        }
    });
    Ok(b.finish()?)
}

// ------------------------------------------------------------------------------------------------------------
// Kernel 3: locate.

/// Which locate launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LocatePass {
    /// The only pass: writes the result.
    Single,
    /// First of two: writes the one-pass value and the zoom ranges.
    First,
    /// The zoomed second pass: writes the result.
    Zoom,
}

/// What the locate kernel's program depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocateSpec {
    pub bins: u32,
    pub pass: LocatePass,
    /// Sum `src [P, E, B+2]` into a `counts [E, B+2]` output (else `src` already is the merged histogram).
    pub write_counts: bool,
    /// Write `-quantile` (the QB bias).
    pub negate: bool,
    /// `src` holds packed u16 pairs, `[P E, words]` (the banked histogram's partials).
    pub packed: bool,
    /// Partials summed per batch of independent loads (`LU`; 1: one load per iteration).
    pub lu: u32,
}

/// Threads of a locate block for `nb` slots.
fn locate_threads(nb: u32) -> u32 {
    nb.div_ceil(8).next_power_of_two().clamp(32, 256)
}

/// Build a locate kernel, one block per expert. Arguments: `src [P E, B+2]` u32 (P stacked histograms), (`counts [E, B+2]`),
/// then per pass: Single `out [E]`; First `edges [B+1]`, `zoom [4, E]`, `zbin [E]` (written); Zoom `zoom`,
/// `zbin` (read), `out [E]`. Scalars: `tceil` = ceil(target), `delta` = tceil - target (f32), and `lo`, `hi`
/// (not for Zoom).
pub fn build_locate(spec: &LocateSpec) -> Result<Kernel, OpError> {
    // Only a merge of several partials reads `src` in a loop.
    let (bins, lu) = (spec.bins, if spec.write_counts { spec.lu.max(1) } else { 1 });
    let nb = bins + 2;
    let nt = locate_threads(nb);
    let bpt = nb.div_ceil(nt);
    let name = format!(
        "k3k_hq_locate_b{bins}_{}{}{}",
        match spec.pass {
            LocatePass::Single => "single",
            LocatePass::First => "first",
            LocatePass::Zoom => "zoom",
        },
        if spec.write_counts { "_counts" } else { "" },
        if spec.negate { "_neg" } else { "" },
    ) + if spec.packed { "_packed" } else { "" }
        + &if lu > 1 { format!("_lu{lu}") } else { String::new() };
    let mut b = KernelBuilder::new(&name, nt);
    let r_dim = b.dim("R");
    let e_dim = b.dim("E");
    let nbx = Expr::Int(nb as i64);
    let wpe = words(bins);
    let pw = packed_width(bins);
    let src_w = Expr::Int(if spec.packed { pw } else { nb } as i64);
    let src = b.tensor("src", DType::U32, &[r_dim.clone(), src_w], Access::Read);
    let p_dim = r_dim / e_dim.clone();
    let counts =
        spec.write_counts.then(|| b.tensor("counts", DType::U32, &[e_dim.clone(), nbx.clone()], Access::Write));
    let (edges, zoom, zbin, out) = match spec.pass {
        LocatePass::Single => {
            (None, None, None, Some(b.tensor("out", DType::F32, std::slice::from_ref(&e_dim), Access::Write)))
        }
        LocatePass::First => (
            Some(b.tensor("edges", DType::F32, &[Expr::Int(bins as i64 + 1)], Access::Read)),
            Some(b.tensor("zoom", DType::F32, &[Expr::Int(4), e_dim.clone()], Access::Write)),
            Some(b.tensor("zbin", DType::I32, std::slice::from_ref(&e_dim), Access::Write)),
            None,
        ),
        LocatePass::Zoom => (
            None,
            Some(b.tensor("zoom", DType::F32, &[Expr::Int(4), e_dim.clone()], Access::Read)),
            Some(b.tensor("zbin", DType::I32, std::slice::from_ref(&e_dim), Access::Read)),
            Some(b.tensor("out", DType::F32, std::slice::from_ref(&e_dim), Access::Write)),
        ),
    };
    let tceil = b.int_arg("tceil");
    let delta = b.float_arg("delta");
    let geom = (spec.pass != LocatePass::Zoom).then(|| (b.float_arg("lo"), b.float_arg("hi")));
    b.grid(e_dim.clone(), 1i64, 1i64);
    let cnt = b.shared("cnt", DType::U32, 1, nb, 1, Swizzle::None);
    let seg = b.shared("seg", DType::U32, 1, nt, 1, Swizzle::None);

    // 1: merge the partials.
    if spec.packed {
        // The unpacked read's shape on half the words: each thread sums its words over the P partials (one load
        // per partial, the loop bound the only condition), then unpacks the two u16 halves (the low half is the
        // even slot).
        b.threads(|b| {
            let e = Expr::block_idx(0);
            let np = b.let_("np", p_dim.clone());
            b.for_("wd", Expr::thread_idx(), wpe as i64, nt as i64, |b, wd| {
                let lo = b.let_var("lo", 0i64);
                let hi = b.let_var("hi", 0i64);
                if lu > 1 {
                    // `LU` partials per iteration: independent loads (indices clamped to the last partial,
                    // values past it dropped), then their sums.
                    let at0 = b.let_("at0", &e * pw as i64 + wd.clone());
                    let pst = b.let_("pst", e_dim.clone() * pw as i64);
                    b.for_("p", 0i64, np.clone(), lu as i64, |b, p| {
                        let vs: Vec<Expr> = (0..lu as i64)
                            .map(|u| {
                                let pu = (&p + u).min(&np - 1i64);
                                let v = Expr::load(src, &at0 + pu * pst.clone());
                                b.let_("v", Expr::select((&p + u).lt(np.clone()), v, 0i64))
                            })
                            .collect();
                        let los = tree(vs.iter().map(|v| v.bitand(0xffffi64)).collect(), &|x, y| x + y);
                        let his = tree(vs.iter().map(|v| v.shr(16i64)).collect(), &|x, y| x + y);
                        b.assign(lo, ival(lo) + los);
                        b.assign(hi, ival(hi) + his);
                    });
                } else {
                    let at = b.let_var("at", &e * pw as i64 + wd.clone());
                    b.for_("p", 0i64, np.clone(), 1i64, |b, _p| {
                        let v = b.let_("v", Expr::load(src, ival(at)));
                        b.assign(lo, ival(lo) + v.bitand(0xffffi64));
                        b.assign(hi, ival(hi) + v.shr(16i64));
                        b.assign(at, ival(at) + e_dim.clone() * pw as i64);
                    });
                }
                for (half, v) in [(0i64, lo), (1, hi)] {
                    let sl = &wd * 2i64 + half;
                    b.if_(sl.lt(nb as i64), |b| {
                        if let Some(cn) = counts {
                            b.store_scalar(cn, &e * nb as i64 + sl.clone(), ival(v));
                        }
                        b.shared_store(cnt, 0i64, 0i64, sl.clone(), ival(v));
                    });
                }
            });
        });
    } else {
        b.threads(|b| {
            let e = Expr::block_idx(0);
            b.for_("sl", Expr::thread_idx(), nb as i64, nt as i64, |b, sl| {
                let tot = b.let_var("tot", 0i64);
                if lu > 1 {
                    let np = b.let_("np", p_dim.clone());
                    b.for_("p", 0i64, np.clone(), lu as i64, |b, p| {
                        let vs: Vec<Expr> = (0..lu as i64)
                            .map(|u| {
                                let pu = (&p + u).min(&np - 1i64);
                                let at = (pu * e_dim.clone() + e.clone()) * nb as i64 + sl.clone();
                                b.let_("v", Expr::select((&p + u).lt(np.clone()), Expr::load(src, at), 0i64))
                            })
                            .collect();
                        b.assign(tot, ival(tot) + tree(vs, &|x, y| x + y));
                    });
                } else {
                    b.for_("p", 0i64, p_dim.clone(), 1i64, |b, p| {
                        let at = (p * e_dim.clone() + e.clone()) * nb as i64 + sl.clone();
                        b.assign(tot, ival(tot) + Expr::load(src, at));
                    });
                }
                if let Some(cn) = counts {
                    b.store_scalar(cn, &e * nb as i64 + sl.clone(), ival(tot));
                }
                b.shared_store(cnt, 0i64, 0i64, sl.clone(), ival(tot));
            });
        });
    }
    b.barrier();
    // 2: segment sums.
    b.threads(|b| {
        let lo_s = b.let_("lo_s", Expr::thread_idx() * bpt as i64);
        let hi_s = b.let_("hi_s", (&lo_s + bpt as i64).min(nb as i64));
        let sum = b.let_var("sum", 0i64);
        b.for_("sl", lo_s, hi_s, 1i64, |b, sl| {
            b.assign(sum, ival(sum) + Expr::shared_load(cnt, 0i64, 0i64, sl));
        });
        b.shared_store(seg, 0i64, 0i64, Expr::thread_idx(), ival(sum));
    });
    b.barrier();
    // 3: the thread whose segment holds the target writes the result.
    b.threads(|b| {
        let e = Expr::block_idx(0);
        let (lo_g, hi_g) = match (&geom, zoom) {
            (Some((lo, hi)), _) => (lo.clone(), hi.clone()),
            (None, Some(z)) => {
                (b.let_("lo_g", Expr::load(z, e.clone())), b.let_("hi_g", Expr::load(z, &e_dim + e.clone())))
            }
            (None, None) => unreachable!(),
        };
        let above = b.let_var("above", 0i64);
        if spec.packed {
            // Four segments per iteration (independent loads).
            b.for_("j", Expr::thread_idx() + 1i64, nt as i64, 4i64, |b, j| {
                for u in 0..4i64 {
                    let ju = &j + u;
                    let v = Expr::select(
                        ju.lt(nt as i64),
                        Expr::shared_load(seg, 0i64, 0i64, ju.clone().min((nt - 1) as i64)),
                        0i64,
                    );
                    b.assign(above, ival(above) + v);
                }
            });
        } else {
            b.for_("j", Expr::thread_idx() + 1i64, nt as i64, 1i64, |b, j| {
                b.assign(above, ival(above) + Expr::shared_load(seg, 0i64, 0i64, j));
            });
        }
        // Writes the result for slot `sl` with `ab` values above it and `c` in it.
        let emit = |b: &mut KernelBuilder, sl: Expr, ab: Expr, c: Expr| {
            let frac = ((tceil.clone() - ab).to_float() - delta.clone()) / c.to_float();
            let w = (&hi_g - lo_g.clone()) / bins as f64;
            let interp = &lo_g + (sl.to_float() - frac) * w;
            let q = Expr::select(sl.eq((nb - 1) as i64), hi_g.clone(), Expr::select(sl.eq(0i64), lo_g.clone(), interp));
            let q = b.let_("q", q);
            let zb = Expr::select(sl.ge(1i64).and(sl.le(bins as i64)), &sl - 1i64, -1i64);
            match spec.pass {
                LocatePass::Single => {
                    let v = if spec.negate { -q } else { q };
                    b.store_scalar(out.unwrap(), e.clone(), v);
                }
                LocatePass::First => {
                    let (z, zbn, ed) = (zoom.unwrap(), zbin.unwrap(), edges.unwrap());
                    let zb = b.let_("zb", zb);
                    b.store_scalar(zbn, e.clone(), zb.clone());
                    b.store_scalar(z, &e_dim * 3i64 + e.clone(), q);
                    b.if_else(
                        zb.ge(0i64),
                        |b| {
                            let l2 = b.let_("l2", Expr::load(ed, zb.clone()));
                            let h2 = b.let_("h2", Expr::load(ed, &zb + 1i64));
                            b.store_scalar(z, e.clone(), l2.clone());
                            b.store_scalar(z, &e_dim + e.clone(), h2.clone());
                            b.store_scalar(z, &e_dim * 2i64 + e.clone(), Expr::Float(bins as f64) / (h2 - l2));
                        },
                        |b| {
                            let (lo, hi) = geom.clone().unwrap();
                            b.store_scalar(z, e.clone(), lo.clone());
                            b.store_scalar(z, &e_dim + e.clone(), hi.clone());
                            b.store_scalar(z, &e_dim * 2i64 + e.clone(), Expr::Float(bins as f64) / (hi - lo));
                        },
                    );
                }
                LocatePass::Zoom => {
                    let first = Expr::load(zoom.unwrap(), &e_dim * 3i64 + e.clone());
                    let v = Expr::select(Expr::load(zbin.unwrap(), e.clone()).ge(0i64), q, first);
                    let v = if spec.negate { -v } else { v };
                    b.store_scalar(out.unwrap(), e.clone(), v);
                }
            }
        };
        let lo_s = b.let_("lo_s", Expr::thread_idx() * bpt as i64);
        let hi_s = b.let_("hi_s", (&lo_s + bpt as i64).min(nb as i64));
        let found = b.let_var("found", -1i64);
        let f_above = b.let_var("f_above", 0i64);
        let f_count = b.let_var("f_count", 1i64);
        b.for_("jj", 0i64, (&hi_s - lo_s.clone()).max(0i64), 1i64, |b, jj| {
            let sl = b.let_("sl", &hi_s - 1i64 - jj);
            let c = b.let_("c", Expr::shared_load(cnt, 0i64, 0i64, sl.clone()));
            b.if_(ival(above).lt(tceil.clone()).and(tceil.le(ival(above) + c.clone())), |b| {
                b.assign(found, sl.clone());
                b.assign(f_above, ival(above));
                b.assign(f_count, c.clone());
            });
            b.assign(above, ival(above) + c);
        });
        // No slot holds the target: at or below zero (overflow value hi) or past every value (underflow, lo).
        b.if_(Expr::thread_idx().eq(0i64), |b| {
            b.if_(tceil.le(0i64), |b| b.assign(found, (nb - 1) as i64));
            b.if_(tceil.gt(ival(above)), |b| b.assign(found, 0i64));
        });
        b.if_(ival(found).ge(0i64), |b| emit(b, ival(found), ival(f_above), ival(f_count)));
    });
    Ok(b.finish()?)
}

// ------------------------------------------------------------------------------------------------------------
// Problems.

use crate::data;
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_reference::quantile::{
    Histogram, Located, biased_alpha, column_quantile, exact_kth_largest_per_column, qb_target,
};
use rand::Rng;
use rand::rngs::StdRng;
use rayon::prelude::*;

/// Which quantity is located.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Kind {
    /// The QB step with `k` experts per token: target `q = T k / E` margins above.
    Qb { k: usize },
    /// The per-column quantile at `fraction`: target `(1 - f)(T - 1) + 1` values above.
    Column { fraction: f64 },
}

/// How random inputs are drawn (correctness cases cover each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataMode {
    /// QB: sigmoid(2 N(0,1)) scores, bias in [-0.1, 0.1); column: uniform over the range widened by 5%.
    Random,
    /// Values on a coarse grid: many ties, and (QB) margins on bin edges.
    Ties,
    /// Every column constant (all-equal columns).
    Constant,
    /// Values exactly on bin edges, at lo and hi and one ulp below them.
    Edges,
}

impl DataMode {
    fn from_code(c: i64) -> Result<Self, OpError> {
        Ok(match c {
            0 => DataMode::Random,
            1 => DataMode::Ties,
            2 => DataMode::Constant,
            3 => DataMode::Edges,
            _ => return Err(bad("data", format!("unknown data mode {c} (0 random, 1 ties, 2 constant, 3 edges)"))),
        })
    }
}

fn bad(arg: &str, why: String) -> OpError {
    OpError::BadInput { op: "hist_quantile", arg: arg.into(), why }
}

/// One problem: shapes, histogram geometry, pass count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    pub kind: Kind,
    /// Tokens (rows).
    pub t: usize,
    /// Experts (columns).
    pub e: usize,
    /// Regular bins B.
    pub bins: usize,
    /// Zoomed second pass.
    pub two_pass: bool,
    /// Histogram range `[lo, hi)` (f32 values).
    pub lo: f32,
    pub hi: f32,
    pub data: DataMode,
}

impl Problem {
    /// Resolve a preset of `op`: dims `T`, `E`, `B`, and `k` (QB) or `frac_ppm` (column, parts per million,
    /// default 982143 = 1 - 16/896); optional `two` (1 = two passes), `lo_milli` / `hi_milli` (range in
    /// thousandths; default [-1, 1) for QB, [0, 1) for columns) and `data` (0 random, 1 ties, 2 constant,
    /// 3 edges).
    pub fn from_preset(op: &str, p: &Preset) -> Result<Self, OpError> {
        let qb = op == OP_QB;
        let kind = if qb {
            Kind::Qb { k: nonneg("k", p.get("k")?)? }
        } else {
            Kind::Column { fraction: p.get_or("frac_ppm", 982_143) as f64 / 1e6 }
        };
        let (dlo, dhi) = if qb { (-1000, 1000) } else { (0, 1000) };
        let pb = Problem {
            kind,
            t: nonneg("T", p.get("T")?)?,
            e: nonneg("E", p.get("E")?)?,
            bins: nonneg("B", p.get("B")?)?,
            two_pass: p.get_or("two", 0) == 1,
            lo: (p.get_or("lo_milli", dlo) as f64 / 1e3) as f32,
            hi: (p.get_or("hi_milli", dhi) as f64 / 1e3) as f32,
            data: DataMode::from_code(p.get_or("data", 0))?,
        };
        pb.validate()?;
        Ok(pb)
    }

    /// Shape and parameter checks (typed errors naming the argument).
    pub fn validate(&self) -> Result<(), OpError> {
        if self.t == 0 || self.t > i32::MAX as usize {
            return Err(bad("T", format!("need 1 <= T <= 2^31 - 1 tokens, got {}", self.t)));
        }
        if self.e == 0 || self.t.saturating_mul(self.e) > (1usize << 40) {
            return Err(bad("E", format!("need E >= 1 and T E within 2^40, got E = {}", self.e)));
        }
        if let Kind::Qb { k } = self.kind {
            if self.e > MAX_E {
                return Err(bad("E", format!("the alpha kernel supports E <= {MAX_E}, got {}", self.e)));
            }
            if k >= self.e || k > MAX_K {
                return Err(bad("k", format!("need k < E = {} and k <= {MAX_K}, got k = {k}", self.e)));
            }
        }
        if let Kind::Column { fraction } = self.kind
            && !(0.0..=1.0).contains(&fraction)
        {
            return Err(bad("fraction", format!("{fraction} is outside [0, 1]")));
        }
        if self.bins == 0 || self.bins > MAX_BINS {
            return Err(bad("B", format!("need 1 <= B <= {MAX_BINS} bins, got {}", self.bins)));
        }
        Histogram::new(1, self.lo as f64, self.hi as f64, self.bins).map_err(|e| bad("lo/hi", e.to_string()))?;
        Ok(())
    }

    /// The operator this problem belongs to.
    pub fn op(&self) -> &'static str {
        match self.kind {
            Kind::Qb { .. } => OP_QB,
            Kind::Column { .. } => OP_COLUMN,
        }
    }

    /// The target count from the top.
    pub fn target(&self) -> f64 {
        match self.kind {
            Kind::Qb { k } => qb_target(self.t, self.e, k),
            Kind::Column { fraction } => (1.0 - fraction) * (self.t as f64 - 1.0) + 1.0,
        }
    }

    /// An empty histogram of this geometry (the reference's bin rule and edges).
    pub fn geometry(&self) -> Histogram {
        Histogram::new(self.e, self.lo as f64, self.hi as f64, self.bins).expect("validated geometry")
    }

    /// Token chunks (histogram blocks along T) for `HBLOCKS`: enough blocks to fill the GPU, chunks of at
    /// least [`MIN_CHUNK`] and at most [`MAX_CHUNK`] tokens. Returns (chunks, tokens per chunk).
    pub fn chunks(&self, c: &Cfg, es: u32) -> (usize, usize) {
        let slices = self.e.div_ceil(es as usize);
        let want = (c.hblocks as usize / slices).max(1).min(self.t.div_ceil(MIN_CHUNK));
        let p = want.max(self.t.div_ceil(MAX_CHUNK));
        let ch = self.t.div_ceil(p);
        (self.t.div_ceil(ch), ch)
    }
}

/// Fewest tokens per histogram block (more blocks than that only add flush work).
pub const MIN_CHUNK: usize = 2048;

fn nonneg(name: &str, v: i64) -> Result<usize, OpError> {
    usize::try_from(v).map_err(|_| bad(name, format!("must be >= 0, got {v}")))
}

/// Host checks of the inputs before any launch: `s` has `T E` values, `b` (QB) has `E`; NaN in `s` or `b` is
/// `BadInput` naming it (with the first index); for QB an infinite score too (a margin would be inf - inf).
pub fn check_inputs(pb: &Problem, s: &[f32], b: Option<&[f32]>) -> Result<(), OpError> {
    let op = pb.op();
    let err = |arg: &str, why: String| OpError::BadInput { op, arg: arg.into(), why };
    if s.len() != pb.t * pb.e {
        return Err(err("s", format!("has {} values, [T, E] = [{}, {}] needs {}", s.len(), pb.t, pb.e, pb.t * pb.e)));
    }
    let qb = matches!(pb.kind, Kind::Qb { .. });
    if let Some(i) = s.par_iter().position_first(|v| v.is_nan() || (qb && v.is_infinite())) {
        let what = if s[i].is_nan() { "NaN" } else { "an infinite score" };
        return Err(err("s", format!("{what} at index {i} (token {}, column {})", i / pb.e, i % pb.e)));
    }
    match (qb, b) {
        (true, Some(b)) => {
            if b.len() != pb.e {
                return Err(err("b", format!("has {} values, E = {} needed", b.len(), pb.e)));
            }
            if let Some(i) = b.iter().position(|v| v.is_nan()) {
                return Err(err("b", format!("NaN at expert {i}")));
            }
        }
        (true, None) => return Err(err("b", "the QB step needs a bias".into())),
        (false, Some(_)) => return Err(err("b", "the column quantile takes no bias".into())),
        (false, None) => {}
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------------------
// Histograms on the host.

/// Per-expert histograms as the kernels produce them (`counts [E, B+2]`, slot 0 underflow, slots 1..=B the
/// bins, B+1 overflow), convertible to the reference's [`Histogram`], to JSON (serde) and to the raw
/// little-endian u32 bytes of the device buffer (what ranks all-reduce). Merging is plain addition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExpertHistogram {
    pub experts: usize,
    pub bins: usize,
    pub lo: f32,
    pub hi: f32,
    /// `[experts, bins + 2]`, row-major.
    pub counts: Vec<u64>,
}

impl ExpertHistogram {
    /// From a `counts [E, B+2]` u32 (or u64) output.
    pub fn from_tensor(t: &HostTensor, lo: f32, hi: f32) -> Result<Self, OpError> {
        if t.shape.len() != 2 || t.shape[1] < 3 || !matches!(t.dtype, DType::U32 | DType::U64) {
            return Err(bad("counts", format!("need a u32/u64 [E, B+2] tensor, got {} {:?}", t.dtype, t.shape)));
        }
        let counts = (0..t.len()).map(|i| t.get_i64(i) as u64).collect();
        Ok(ExpertHistogram { experts: t.shape[0], bins: t.shape[1] - 2, lo, hi, counts })
    }
    /// The counts as a u32 `[E, B+2]` tensor (the device layout); errors when a count exceeds u32.
    pub fn to_tensor(&self) -> Result<HostTensor, OpError> {
        Ok(HostTensor::from_bytes(DType::U32, &[self.experts, self.bins + 2], self.to_le_bytes()?))
    }
    /// Raw little-endian u32 counts, `[E, B+2]` row-major (what a device all-reduce sums).
    pub fn to_le_bytes(&self) -> Result<Vec<u8>, OpError> {
        let mut out = Vec::with_capacity(self.counts.len() * 4);
        for &c in &self.counts {
            let c = u32::try_from(c).map_err(|_| bad("counts", format!("count {c} exceeds u32")))?;
            out.extend(c.to_le_bytes());
        }
        Ok(out)
    }
    /// From raw little-endian u32 counts.
    pub fn from_le_bytes(experts: usize, bins: usize, lo: f32, hi: f32, bytes: &[u8]) -> Result<Self, OpError> {
        if bytes.len() != experts * (bins + 2) * 4 {
            return Err(bad("bytes", format!("{} bytes for [{experts}, {}] u32 counts", bytes.len(), bins + 2)));
        }
        let counts = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64).collect();
        Ok(ExpertHistogram { experts, bins, lo, hi, counts })
    }
    /// The reference's histogram (same geometry, same counts).
    pub fn to_reference(&self) -> Result<Histogram, OpError> {
        let mut h = Histogram::new(self.experts, self.lo as f64, self.hi as f64, self.bins)
            .map_err(|e| bad("lo/hi", e.to_string()))?;
        if self.counts.len() != h.counts.len() {
            return Err(bad("counts", format!("{} counts for {} slots", self.counts.len(), h.counts.len())));
        }
        h.counts.copy_from_slice(&self.counts);
        Ok(h)
    }
    /// From the reference's histogram.
    pub fn from_reference(h: &Histogram) -> Self {
        ExpertHistogram { experts: h.experts, bins: h.bins, lo: h.lo as f32, hi: h.hi as f32, counts: h.counts.clone() }
    }
    /// Add a shard's counts (same geometry).
    pub fn merge(&mut self, other: &ExpertHistogram) -> Result<(), OpError> {
        if (self.experts, self.bins, self.lo.to_bits(), self.hi.to_bits())
            != (other.experts, other.bins, other.lo.to_bits(), other.hi.to_bits())
        {
            return Err(bad("other", "histograms of different geometry".into()));
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------------------
// Plans.

/// The kernels of one problem at one knob set.
pub struct KernelSet {
    pub alpha: Option<Kernel>,
    pub zero: Option<Kernel>,
    pub hist: Kernel,
    pub locate: Kernel,
    /// Two-pass: the zoomed histogram and its locate.
    pub zoom: Option<(Kernel, Kernel)>,
    pub es: u32,
}

impl KernelSet {
    /// Every kernel, in launch order (the zeroing kernel once).
    pub fn all(&self) -> Vec<Kernel> {
        let mut v: Vec<Kernel> = self.alpha.iter().chain(self.zero.iter()).cloned().collect();
        v.push(self.hist.clone());
        v.push(self.locate.clone());
        if let Some((h, l)) = &self.zoom {
            v.push(h.clone());
            v.push(l.clone());
        }
        v
    }
}

/// Build the kernels of a problem.
pub fn kernel_set(pb: &Problem, knobs: &Knobs) -> Result<KernelSet, OpError> {
    pb.validate()?;
    let c = cfg(knobs)?;
    let es = experts_per_block(pb.bins, pb.e, &c)?;
    let bins = pb.bins as u32;
    let (binned, negate, alpha) = match pb.kind {
        Kind::Qb { k } => {
            let spec = AlphaSpec::for_shape(pb.e, k);
            let a = if c.lean_alpha && k < 32 {
                build_alpha_lean(&spec, &c)?
            } else if c.ring_alpha && k < 32 {
                build_alpha_ring(&spec, &c, pb.e)?
            } else if c.warp_alpha && k < 32 {
                build_alpha_warp(&spec, &c)?
            } else {
                build_alpha(&spec, &c)?
            };
            (Binned::Margin, true, Some(a))
        }
        Kind::Column { .. } => (Binned::Plain, false, None),
    };
    let packed = c.packed_partials();
    let hs = HistSpec {
        bins,
        binned,
        zoom: false,
        es,
        atomic: c.atomic,
        banked: c.banked,
        fx: c.fx(pb.bins),
        packed,
        select: c.banked && c.bin_select,
    };
    let first = if pb.two_pass { LocatePass::First } else { LocatePass::Single };
    let lu = c.lu;
    let locate = build_locate(&LocateSpec { bins, pass: first, write_counts: !c.atomic, negate, packed, lu })?;
    let zoom = if pb.two_pass {
        let h = build_hist(&HistSpec { zoom: true, ..hs }, &c)?;
        let l =
            build_locate(&LocateSpec { bins, pass: LocatePass::Zoom, write_counts: !c.atomic, negate, packed, lu })?;
        Some((h, l))
    } else {
        None
    };
    Ok(KernelSet { alpha, zero: c.atomic.then(build_zero).transpose()?, hist: build_hist(&hs, &c)?, locate, zoom, es })
}

/// The host table of zoom edges: `edges[i]` = the reference's nominal edge `lo + i (hi - lo) / B` (f64)
/// rounded to f32, `i = 0..=B` (so a zoomed range is exactly the reference's `bin_edges(b)`).
pub fn edge_table(h: &Histogram) -> Vec<f32> {
    (0..=h.bins).map(|i| if i < h.bins { h.bin_edges(i).0 as f32 } else { h.bin_edges(h.bins - 1).1 as f32 }).collect()
}

fn target_scalars(target: f64) -> (i64, f32) {
    let tceil = target.ceil();
    (tceil as i64, (tceil - target) as f32)
}

/// The plan of a problem on given inputs (`s [T, E]` f32; `b [E]` f32 for QB), checked first
/// ([`check_inputs`] is the caller's: [`QbInstance`] runs it). Buffers: inputs `s`, `b`, (`edges`); outputs
/// `alpha` (QB), `counts`, (`counts2`), `bias` (QB) or `quantile`; scratch `partials`, `zoom`, `zbin`.
pub fn build_plan(pb: &Problem, s: &HostTensor, b: Option<&HostTensor>, knobs: &Knobs) -> Result<Plan, OpError> {
    let ks = kernel_set(pb, knobs)?;
    let c = cfg(knobs)?;
    let (t, e, nb) = (pb.t, pb.e, pb.bins + 2);
    let h = pb.geometry();
    let (lo, hi, scale) = (SymValue::Float(pb.lo), SymValue::Float(pb.hi), SymValue::Float(h.bin_scale_f32()));
    let (tceil, delta) = target_scalars(pb.target());
    let (p, ch) = pb.chunks(&c, ks.es);
    let mut plan = Plan::default();
    let s_i = plan.input("s", s.clone());
    let b_i = b.map(|b| plan.input("b", b.clone()));
    let edges_i =
        pb.two_pass.then(|| plan.input("edges", HostTensor::from_f32(DType::F32, &[pb.bins + 1], &edge_table(&h))));
    let alpha_i = ks.alpha.is_some().then(|| plan.output("alpha", DType::F32, &[t]));
    let counts_i = plan.output("counts", DType::U32, &[e, nb]);
    let counts2_i = pb.two_pass.then(|| plan.output("counts2", DType::U32, &[e, nb]));
    let out_name = if matches!(pb.kind, Kind::Qb { .. }) { "bias" } else { "quantile" };
    let out_i = plan.output(out_name, DType::F32, &[e]);
    let part_w = if c.packed_partials() { packed_width(pb.bins as u32) as usize } else { nb };
    let part_i = (!c.atomic).then(|| plan.scratch("partials", DType::U32, &[p * e, part_w]));
    let zoom_i =
        pb.two_pass.then(|| (plan.scratch("zoom", DType::F32, &[4, e]), plan.scratch("zbin", DType::I32, &[e])));

    if let (Some(k), Some(bi), Some(ai)) = (&ks.alpha, b_i, alpha_i) {
        plan.step(k.clone(), &[s_i, bi, ai], &[]);
    }
    let chs = ("CH", SymValue::Int(ch as i64));
    let ps = ("P", SymValue::Int(p as i64));
    let targets = [("tceil", SymValue::Int(tceil)), ("delta", SymValue::Float(delta))];
    // One histogram pass + its locate: `dst` receives the merged counts.
    let pass = |plan: &mut Plan, hist: &Kernel, loc: &Kernel, zoomed: bool, dst: usize, tail: &[usize]| {
        let mut args = vec![s_i];
        args.extend(alpha_i);
        if zoomed {
            args.push(zoom_i.unwrap().0);
        }
        let mut scal = vec![chs];
        if !zoomed {
            scal.extend([("lo", lo), ("hi", hi), ("scale", scale)]);
        }
        let src = match part_i {
            Some(pi) => pi,
            None => {
                plan.step(ks.zero.clone().unwrap(), &[dst], &[]);
                scal.push(ps);
                dst
            }
        };
        args.push(src);
        plan.step(hist.clone(), &args, &scal);
        let mut largs = vec![src];
        if part_i.is_some() {
            largs.push(dst);
        }
        largs.extend(tail);
        let mut lscal = targets.to_vec();
        if !zoomed {
            lscal.extend([("lo", lo), ("hi", hi)]);
        }
        plan.step(loc.clone(), &largs, &lscal);
    };
    match (&ks.zoom, zoom_i) {
        (Some((zh, zl)), Some((zi, zb))) => {
            pass(&mut plan, &ks.hist, &ks.locate, false, counts_i, &[edges_i.unwrap(), zi, zb]);
            pass(&mut plan, zh, zl, true, counts2_i.unwrap(), &[zi, zb, out_i]);
        }
        _ => pass(&mut plan, &ks.hist, &ks.locate, false, counts_i, &[out_i]),
    }
    Ok(plan)
}

/// A plan that locates the quantile of an already merged histogram (e.g. after an all-reduce of every rank's
/// `counts`): input `counts`, output `out [E]` (`-quantile` when `negate`, the QB bias).
pub fn locate_plan(h: &ExpertHistogram, target: f64, negate: bool) -> Result<Plan, OpError> {
    let k = build_locate(&LocateSpec {
        bins: h.bins as u32,
        pass: LocatePass::Single,
        write_counts: false,
        negate,
        packed: false,
        lu: 1,
    })?;
    let mut plan = Plan::default();
    let c = plan.input("counts", h.to_tensor()?);
    let o = plan.output("out", DType::F32, &[h.experts]);
    let (tceil, delta) = target_scalars(target);
    plan.step(
        k,
        &[c, o],
        &[
            ("tceil", SymValue::Int(tceil)),
            ("delta", SymValue::Float(delta)),
            ("lo", SymValue::Float(h.lo)),
            ("hi", SymValue::Float(h.hi)),
        ],
    );
    Ok(plan)
}

// ------------------------------------------------------------------------------------------------------------
// Inputs and the reference.

fn sigmoid_inplace(v: &mut [f32]) {
    v.par_iter_mut().for_each(|x| *x = 1.0 / (1.0 + (-*x).exp()));
}

/// Seeded inputs of a problem: `s [T, E]` and, for QB, `b [E]` (see [`DataMode`]). Never all zeros.
pub fn generate(pb: &Problem, seed: u64) -> (Vec<f32>, Option<Vec<f32>>) {
    let n = pb.t * pb.e;
    let (lo, hi) = (pb.lo, pb.hi);
    let span = hi - lo;
    let per_col = |vals: Vec<f32>| -> Vec<f32> {
        let mut s = vec![0f32; n];
        s.par_chunks_mut(pb.e.max(1)).for_each(|row| row.copy_from_slice(&vals));
        s
    };
    match pb.kind {
        Kind::Qb { .. } => {
            let u = data::uniform(n, 0.0, 1.0, seed);
            let bu = data::uniform(pb.e, 0.0, 1.0, seed ^ 0xb1a5);
            let small_bias: Vec<f32> = bu.iter().map(|v| 0.2 * v - 0.1).collect();
            match pb.data {
                DataMode::Random => {
                    let mut s = data::normal(n, 2.0, seed ^ 0x5c0e);
                    sigmoid_inplace(&mut s);
                    (s, Some(small_bias))
                }
                DataMode::Ties => {
                    let s = u.par_iter().map(|v| (v * 9.0).floor().min(8.0) / 8.0).collect();
                    (s, Some(bu.iter().map(|v| (v * 5.0).floor().min(4.0) / 16.0 - 0.125).collect()))
                }
                DataMode::Constant => {
                    let mut c = data::normal(pb.e, 2.0, seed ^ 0xc0c0);
                    sigmoid_inplace(&mut c);
                    (per_col(c), Some(small_bias))
                }
                DataMode::Edges => {
                    let s = u.par_iter().map(|v| (v * 5.0).floor().min(4.0) / 4.0).collect();
                    (s, Some(vec![0.0; pb.e]))
                }
            }
        }
        Kind::Column { .. } => {
            let s = match pb.data {
                DataMode::Random => data::uniform(n, lo - 0.05 * span, hi + 0.05 * span, seed),
                DataMode::Ties => {
                    let u = data::uniform(n, 0.0, 1.0, seed);
                    u.par_iter().map(|v| lo + span * ((v * 17.0).floor().min(16.0) / 16.0)).collect()
                }
                DataMode::Constant => per_col(data::uniform(pb.e, lo, hi, seed ^ 0xc0c0)),
                DataMode::Edges => {
                    let mut table = edge_table(&pb.geometry());
                    table.push(f32::from_bits(lo.to_bits().wrapping_add(if lo > 0.0 { u32::MAX } else { 1 })));
                    table.push(next_down(hi));
                    table.push(next_down(lo));
                    let u = data::uniform(n, 0.0, 1.0, seed);
                    u.par_iter().map(|v| table[((v * table.len() as f32) as usize).min(table.len() - 1)]).collect()
                }
            };
            (s, None)
        }
    }
}

/// The largest f32 below `x` (finite `x`).
fn next_down(x: f32) -> f32 {
    if x == 0.0 {
        -f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() - 1)
    } else {
        f32::from_bits(x.to_bits() + 1)
    }
}

/// The reference's results for a problem, computed with `k3k_reference::quantile` on row chunks in parallel
/// (histograms are mergeable, so the chunked build equals the whole build; alpha is per row).
pub struct Reference {
    pub alpha: Option<Vec<f32>>,
    /// First-pass histograms.
    pub hist: Histogram,
    /// Two-pass: per expert the histogram over its zoom range (the located bin's edges, or the first-pass
    /// range when the first pass located the under/overflow slot), `[E, B+2]`.
    pub counts2: Option<Vec<u64>>,
    /// Per expert: the reference's histogram quantile (one- or two-pass), as `hist_quantile_columns` computes it.
    pub quantile: Vec<f64>,
}

fn refe(e: k3k_reference::RefError) -> OpError {
    OpError::Internal(format!("reference: {e}"))
}

/// Rows per reference chunk.
fn ref_rows(e: usize) -> usize {
    ((1usize << 18) / e.max(1)).max(1)
}

/// The binned value (margin or plain value) of element `i` of `s`.
fn binned_value(s: &[f32], alpha: Option<&[f32]>, e: usize, i: usize) -> f32 {
    match alpha {
        Some(a) => s[i] - a[i / e],
        None => s[i],
    }
}

/// Column `col` of the binned values.
fn column_values(s: &[f32], alpha: Option<&[f32]>, t: usize, e: usize, col: usize) -> Vec<f32> {
    (0..t).map(|r| binned_value(s, alpha, e, r * e + col)).collect()
}

/// Compute the reference results (inputs checked by [`check_inputs`]).
pub fn reference(pb: &Problem, s: &[f32], b: Option<&[f32]>) -> Result<Reference, OpError> {
    let (t, e) = (pb.t, pb.e);
    let rows = ref_rows(e);
    let alpha = match (pb.kind, b) {
        (Kind::Qb { k }, Some(b)) => {
            let parts: Result<Vec<Vec<f32>>, _> =
                s.par_chunks(rows * e).map(|c| biased_alpha(c, b, c.len() / e, e, k)).collect();
            Some(parts.map_err(refe)?.concat())
        }
        _ => None,
    };
    let a = alpha.as_deref();
    let parts: Result<Vec<Histogram>, _> = s
        .par_chunks(rows * e)
        .enumerate()
        .map(|(ci, c)| {
            let vals: Vec<f32> = match a {
                Some(a) => k3k_reference::quantile::margins(c, c.len() / e, e, &a[ci * rows..ci * rows + c.len() / e])?,
                None => c.to_vec(),
            };
            Histogram::build(&vals, c.len() / e, e, pb.lo as f64, pb.hi as f64, pb.bins)
        })
        .collect();
    let mut hist = pb.geometry();
    for h in parts.map_err(refe)? {
        hist.merge(&h).map_err(refe)?;
    }
    let target = pb.target();
    let nb = pb.bins + 2;
    let per_col: Result<Vec<(f64, Vec<u64>)>, OpError> = (0..e)
        .into_par_iter()
        .map(|col| {
            let (loc, _) = hist.locate(col, target).map_err(refe)?;
            match (pb.two_pass, loc) {
                (true, Located::Bin(bin)) => {
                    let (l2, h2) = hist.bin_edges(bin);
                    let c = column_values(s, a, t, e, col);
                    let z = Histogram::build(&c, t, 1, l2, h2, pb.bins).map_err(refe)?;
                    Ok((z.quantile_from_top(0, target).map_err(refe)?, z.counts))
                }
                _ => Ok((
                    hist.quantile_from_top(col, target).map_err(refe)?,
                    hist.counts[col * nb..(col + 1) * nb].to_vec(),
                )),
            }
        })
        .collect();
    let per_col = per_col?;
    let quantile = per_col.iter().map(|(q, _)| *q).collect();
    let counts2 = pb.two_pass.then(|| per_col.into_iter().flat_map(|(_, c)| c).collect());
    Ok(Reference { alpha, hist, counts2, quantile })
}

/// Allowed f32 rounding of a located value (the kernel interpolates in f32, the reference in f64).
fn value_slack(pb: &Problem) -> f64 {
    16.0 * f32::EPSILON as f64 * (pb.lo.abs().max(pb.hi.abs()) as f64).max(1e-30)
}

/// The error bound against the exact sort: one bin width, or bin / B with two passes (plus f32 rounding).
pub fn exact_bound(pb: &Problem) -> f64 {
    let w = (pb.hi as f64 - pb.lo as f64) / pb.bins as f64;
    (if pb.two_pass { w / pb.bins as f64 } else { w }) + value_slack(pb)
}

/// Compare integer counts; the first mismatch as (expert, slot, got, want).
fn diff_counts(got: &HostTensor, want: &[u64], nb: usize) -> Option<(usize, usize, i64, u64)> {
    (0..want.len()).find(|&i| got.get_i64(i) as u64 != want[i]).map(|i| (i / nb, i % nb, got.get_i64(i), want[i]))
}

/// `|d| <= tol`, false for NaN.
fn within(d: f64, tol: f64) -> bool {
    d.abs() <= tol
}

fn fail(report: &mut CheckReport, detail: String) {
    if report.passed {
        report.detail = detail;
    }
    report.passed = false;
}

/// Check a run's outputs against the reference: alpha (QB) and counts exactly, the located values within f32
/// rounding of the reference's histogram quantile, and within one bin (two-pass: bin / B) of the exact
/// sort on `cols` (experts whose exact value lies inside `[lo, hi)`).
pub fn check_outputs(
    pb: &Problem,
    s: &[f32],
    r: &Reference,
    cols: &[usize],
    out: &Outputs,
) -> Result<CheckReport, OpError> {
    let (t, e, nb) = (pb.t, pb.e, pb.bins + 2);
    let mut rep = CheckReport { max_rel_err: 0.0, passed: true, scope: String::new(), detail: String::new() };
    let mut scope = vec![];
    if let Some(want) = &r.alpha {
        let got = out.get("alpha")?;
        let bad_tok = (0..t).find(|&i| got.get_f32(i) != want[i]);
        if let Some(i) = bad_tok {
            fail(&mut rep, format!("alpha[{i}] = {} but the reference has {}", got.get_f32(i), want[i]));
        }
        scope.push(format!("alpha of all {t} tokens exact"));
    }
    if let Some((ex, sl, g, w)) = diff_counts(out.get("counts")?, &r.hist.counts, nb) {
        fail(&mut rep, format!("counts[{ex}, slot {sl}] = {g} but the reference has {w}"));
    }
    scope.push(format!("counts [{e}, {nb}] exact"));
    if let Some(want2) = &r.counts2 {
        if let Some((ex, sl, g, w)) = diff_counts(out.get("counts2")?, want2, nb) {
            fail(&mut rep, format!("counts2[{ex}, slot {sl}] = {g} but the reference has {w}"));
        }
        scope.push("zoomed counts2 exact".into());
    }
    let (name, sign) = match pb.kind {
        Kind::Qb { .. } => ("bias", -1.0),
        Kind::Column { .. } => ("quantile", 1.0),
    };
    let got: Vec<f64> = out.get(name)?.to_f64_vec().iter().map(|v| v * sign).collect();
    let slack = value_slack(pb);
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (col, (&g, &w)) in got.iter().zip(&r.quantile).enumerate() {
        num += (g - w) * (g - w);
        den += w * w;
        if !within(g - w, slack) {
            fail(&mut rep, format!("{name}[{col}]: quantile {g} but the reference histogram gives {w}"));
        }
    }
    rep.max_rel_err = if den > 0.0 { (num / den).sqrt() } else { num.sqrt() };
    scope.push(format!("{name} of all {e} experts vs the reference histogram quantile"));
    // Exact sort on the sampled columns.
    let target = pb.target();
    let rank = (target.ceil().max(1.0) as usize).min(t);
    let bound = exact_bound(pb);
    let alpha = r.alpha.as_deref();
    let checks: Vec<Result<Option<String>, OpError>> = cols
        .par_iter()
        .map(|&col| {
            let c = column_values(s, alpha, t, e, col);
            let exact = exact_kth_largest_per_column(&c, t, 1, rank).map_err(refe)?[0];
            if !(exact >= pb.lo as f64 && exact < pb.hi as f64) || target <= 0.0 || target > t as f64 {
                return Ok(None);
            }
            let g = got[col];
            if !within(g - exact, bound) {
                return Ok(Some(format!(
                    "{name}[{col}]: {g} is {:.3e} from the exact {exact} (bound {bound:.3e})",
                    (g - exact).abs()
                )));
            }
            if let Kind::Column { fraction } = pb.kind {
                // The linear-interpolation quantile lies between the neighbouring order statistics.
                let lin = column_quantile(&c, t, 1, fraction).map_err(refe)?[0];
                let pos = fraction * (t as f64 - 1.0);
                let up = exact_kth_largest_per_column(&c, t, 1, t - pos.ceil() as usize).map_err(refe)?[0];
                if !within(g - lin, bound + (up - exact)) {
                    return Ok(Some(format!("{name}[{col}]: {g} vs the linear quantile {lin} (gap {})", up - exact)));
                }
            }
            Ok(None)
        })
        .collect();
    for c in checks {
        if let Some(d) = c? {
            fail(&mut rep, d);
        }
    }
    scope.push(format!("exact sort on {} experts (bound {bound:.2e})", cols.len()));
    rep.scope = scope.join("; ");
    Ok(rep)
}

// ------------------------------------------------------------------------------------------------------------
// Instances and operators.

/// A problem with its inputs (checked on construction).
pub struct QbInstance {
    pub pb: Problem,
    s: Vec<f32>,
    b: Option<Vec<f32>>,
    s_t: HostTensor,
    b_t: Option<HostTensor>,
    seed: u64,
    reference: std::sync::OnceLock<Result<Reference, OpError>>,
}

impl QbInstance {
    /// An instance on given inputs; NaN (and, for QB, infinite scores) is `BadInput` naming `s` or `b`.
    pub fn new(pb: Problem, s: Vec<f32>, b: Option<Vec<f32>>, seed: u64) -> Result<Self, OpError> {
        pb.validate()?;
        check_inputs(&pb, &s, b.as_deref())?;
        let s_t = data::tensor(DType::F32, &[pb.t, pb.e], &s);
        let b_t = b.as_ref().map(|b| data::tensor(DType::F32, &[pb.e], b));
        Ok(QbInstance { pb, s, b, s_t, b_t, seed, reference: std::sync::OnceLock::new() })
    }
    /// The reference results (computed once).
    pub fn reference(&self) -> Result<&Reference, OpError> {
        self.reference.get_or_init(|| reference(&self.pb, &self.s, self.b.as_deref())).as_ref().map_err(|e| e.clone())
    }
    /// Experts compared with the exact sort: all of them for small problems, 64 spread ones otherwise.
    pub fn exact_columns(&self) -> Vec<usize> {
        let e = self.pb.e;
        if self.pb.t * e <= 1 << 22 {
            return (0..e).collect();
        }
        let mut cols: Vec<usize> = (0..64).map(|i| (i * e / 64 + (self.seed as usize % 7)) % e).collect();
        cols.extend([0, e - 1]);
        cols.sort();
        cols.dedup();
        cols
    }
}

impl Instance for QbInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        let what = match pb.kind {
            Kind::Qb { k } => format!("qb k={k}"),
            Kind::Column { fraction } => format!("column f={fraction}"),
        };
        format!(
            "{what} T={} E={} B={} [{}, {}) {} data={:?} seed={}",
            pb.t,
            pb.e,
            pb.bins,
            pb.lo,
            pb.hi,
            if pb.two_pass { "two-pass" } else { "one-pass" },
            pb.data,
            self.seed
        )
    }
    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        build_plan(&self.pb, &self.s_t, self.b_t.as_ref(), knobs)
    }
    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let r = self.reference()?;
        check_outputs(&self.pb, &self.s, r, &self.exact_columns(), out)
    }
    fn work(&self) -> Work {
        let pb = &self.pb;
        let (t, e) = (pb.t as f64, pb.e as f64);
        let alpha = if matches!(pb.kind, Kind::Qb { .. }) { 4.0 * t } else { 0.0 };
        Work { flops: 4.0 * t * e, bytes: 4.0 * t * e + alpha + 4.0 * e * (pb.bins as f64 + 2.0) }
    }
    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        let (k, fraction) = match pb.kind {
            Kind::Qb { k } => (Some(k), None),
            Kind::Column { fraction } => (None, Some(fraction)),
        };
        serde_json::json!({
            "op": pb.op(), "T": pb.t, "E": pb.e, "k": k, "fraction": fraction, "B": pb.bins,
            "two_pass": pb.two_pass, "lo": pb.lo, "hi": pb.hi, "target": pb.target(),
        })
    }
}

const EDGE: [i64; 10] = [1, 2, 15, 16, 17, 31, 33, 63, 64, 65];

fn pick(rng: &mut StdRng, max: i64) -> i64 {
    if rng.random_bool(0.5) {
        let v = EDGE[rng.random_range(0..EDGE.len())];
        if v <= max {
            return v;
        }
    }
    rng.random_range(1..=max)
}

fn pick_bins(rng: &mut StdRng) -> i64 {
    const B: [i64; 9] = [1, 2, 7, 16, 32, 64, 100, 128, 256];
    if rng.random_bool(0.1) { 1024 } else { B[rng.random_range(0..B.len())] }
}

/// `hist_quantile.qb`: the full Quantile Balancing step (alpha, margin histograms, located quantile, bias).
pub struct HistQuantileQb;

/// `hist_quantile.column`: the per-column quantile of a `[T, E]` matrix from its histograms.
pub struct HistQuantileColumn;

fn instance_of(op: &str, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
    let pb = Problem::from_preset(op, p)?;
    let (s, b) = generate(&pb, seed);
    Ok(Box::new(QbInstance::new(pb, s, b, seed)?))
}

fn kernels_of(op: &str, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
    Ok(kernel_set(&Problem::from_preset(op, p)?, knobs)?.all())
}

impl Operator for HistQuantileQb {
    fn name(&self) -> &'static str {
        OP_QB
    }
    fn summary(&self) -> &'static str {
        "Quantile Balancing step: per-token (k+1)-th largest biased score, per-expert margin histograms (mergeable u32 counts), located quantile (one or two passes), bias = -quantile"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("T262144 E896 k16 B1024", &[("T", 262144), ("E", 896), ("k", 16), ("B", 1024)]),
            Preset::new("T65536 E896 k16 B4096", &[("T", 65536), ("E", 896), ("k", 16), ("B", 4096)]),
            Preset::new(
                "T262144 E896 k16 B1024 two-pass",
                &[("T", 262144), ("E", 896), ("k", 16), ("B", 1024), ("two", 1)],
            ),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        let e = pick(rng, 70).max(1);
        let k = rng.random_range(0..e.min(34));
        let t = pick(rng, 160);
        let bins = pick_bins(rng);
        let two = rng.random_bool(0.4) as i64;
        let data = rng.random_range(0..4i64);
        Preset::new(
            &format!("T{t} E{e} k{k} B{bins} two{two} data{data}"),
            &[("T", t), ("E", e), ("k", k), ("B", bins), ("two", two), ("data", data)],
        )
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        instance_of(OP_QB, p, seed)
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        kernels_of(OP_QB, p, knobs)
    }
}

impl Operator for HistQuantileColumn {
    fn name(&self) -> &'static str {
        OP_COLUMN
    }
    fn summary(&self) -> &'static str {
        "per-column quantile of a [T, E] f32 matrix at a fraction, from per-column histograms on [lo, hi) (one or two passes)"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("T262144 E896 B1024 f0.982", &[("T", 262144), ("E", 896), ("B", 1024)]),
            Preset::new("T262144 E896 B1024 f0.982 two-pass", &[("T", 262144), ("E", 896), ("B", 1024), ("two", 1)]),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        let e = pick(rng, 100);
        let t = pick(rng, 200);
        let bins = pick_bins(rng);
        let two = rng.random_bool(0.4) as i64;
        let data = rng.random_range(0..4i64);
        let frac = match rng.random_range(0..4) {
            0 => 0,
            1 => 1_000_000,
            _ => rng.random_range(0..=1_000_000i64),
        };
        let (lo, hi) = [(0, 1000), (-1000, 1000), (-3000, 5000), (250, 750)][rng.random_range(0..4)];
        Preset::new(
            &format!("T{t} E{e} B{bins} f{frac}ppm [{lo},{hi}]m two{two} data{data}"),
            &[
                ("T", t),
                ("E", e),
                ("B", bins),
                ("two", two),
                ("data", data),
                ("frac_ppm", frac),
                ("lo_milli", lo),
                ("hi_milli", hi),
            ],
        )
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        instance_of(OP_COLUMN, p, seed)
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        kernels_of(OP_COLUMN, p, knobs)
    }
}
