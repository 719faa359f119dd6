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
//! Files: this module holds the constants and the IR helpers the kernels share; `knobs.rs` the knobs (one
//! declaration) and their configuration; `alpha.rs`, `hist.rs` and `locate.rs` build the three kernels, `problem.rs` holds the problem, its
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
mod knobs;
mod locate;
mod ops;
mod plan;
mod problem;
mod reference;

pub use alpha::*;
pub use hist::*;
pub use knobs::*;
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
