//! `hist_quantile`: the histogram quantile reduction of Quantile Balancing (SEMANTICS.md section 2.5), as IR programs.
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
//!
//! Files: this module holds the constants, the knobs and their configuration and the IR helpers the kernels
//! share; `alpha.rs`, `hist.rs` and `locate.rs` build the three kernels, `problem.rs` holds the problem, its
//! input checks and the host histograms, `plan.rs` the launch plans, `reference.rs` the inputs, the f64
//! reference and the check, and `ops.rs` the instances and the two operators.

use crate::OpError;
use crate::data;
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::*;
use k3k_reference::quantile::{
    Histogram, Located, biased_alpha, column_quantile, exact_kth_largest_per_column, qb_target,
};
use rand::Rng;
use rand::rngs::StdRng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

mod alpha;
mod hist;
mod locate;
mod ops;
mod plan;
mod problem;
mod reference;

pub use alpha::*;
pub use hist::*;
pub use locate::*;
pub use ops::*;
pub use plan::*;
pub use problem::*;
pub use reference::*;

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
        // ASEL=lean at 6 blocks per SM (40 registers) from the H200 (2026-12-01, same run, 200 ms
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
        // T65536 B4096 against 0.467 for partials (2026-12-01); the tuner picks atomic per bucket where it wins.
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
// IR helpers the kernels share.

fn neg_inf() -> Expr {
    Expr::Float(f64::NEG_INFINITY)
}

fn ival(v: VarId) -> Expr {
    Expr::Var(v)
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

/// u32 words per expert of the packed shared histogram.
fn words(bins: u32) -> u32 {
    (bins + 2).div_ceil(2)
}
