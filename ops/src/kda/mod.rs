//! `kda` and `kda.decode`: the Kimi Delta Attention forward of SEMANTICS.md section 2.3 as IR tile programs.
//!
//! Layouts (time-major, row-major): `q, k: [B, T, H, K]` bf16, `v: [B, T, HV, V]` bf16, `g: [B, T, HV, K]` f32
//! (the log-decay, or the raw gate input for the in-kernel gate forms), `beta: [B, T, HV]` bf16 (post-sigmoid,
//! or logits with the in-kernel sigmoid), optional `h0: [N, HV, K, V]` f32; outputs `o: [B, T, HV, V]` bf16 and
//! the final state `ht: [N, HV, K, V]` f32. Value head `hv` reads q/k head `hv / (HV/H)` (GVA). Varlen: B = 1
//! and sequence lengths (`cu_seqlens`); chunks never cross a sequence and T need not be a multiple of the chunk.
//!
//! `kda` (chunked prefill) runs two kernels: [`intra`] (everything inside a chunk, parallel over chunks and
//! heads) writes `[W | U]`, `Qbar = s Gamma.q`, `Kbar = exp(G_last - G).k`, `P` (bf16) and `gamma_last` (f32)
//! to scratch; [`state`] walks the chunks of each sequence with the f32 state in registers, parallel over
//! sequences, value heads and value blocks, and writes `o` and the final state.
//!
//! Diagonal-tile paths (a problem dim, `safe`):
//! - **safe** (`safe=1`): the gate must lie in `[lb, 0)` with `lb >= -5`; each 16x16 diagonal tile is one dense
//!   tensor-core product anchored at the tile's midpoint row. A pre-computed gate below `lb` (or NaN) is
//!   rejected on the host before anything is launched with [`OpError::BadInput`] naming `g` (see
//!   [`check_gates`]); the in-kernel safe gate form `lb*sigmoid(x+bias)` is in range by construction, and the
//!   standard form cannot be bounded, so `safe=1` with it is a `BadInput` on `gate`.
//! - **exact** (`safe=0`): any gate (e.g. -1000); the diagonal tiles are split hierarchically so every exponent
//!   is <= 0.
//!
//! In-kernel options: L2 normalisation of q and k (`l2norm=1`), the gate forms (`gate=1`: `lb*sigmoid(x+bias)`,
//! `gate=2`: `-exp(A_log)*softplus(x+dt_bias)`, `gate=3`: `lb*sigmoid(exp(A_log)*(x+bias))`, FlashKDA's form and
//! FLA's `safe_gate` with `A_log`; `bias=1` for a `[HV, K]` bias), beta sigmoid (`bsig=1`).
//! Head dims K, V in {32, 64, 128}; chunk 64 or 32 (knob `CHUNK`).
//!
//! Precision (knobs `OPDT`, `LVLDT`): the scratch between the kernels and the tensor-core operands of the state
//! pass and of the block solve are f16 by default (3 more mantissa bits than bf16), so the o error stays near
//! the bf16 rounding of the output itself (~1.7e-3 rel L2 against the f64 recurrence, vs ~3e-3 with bf16);
//! the price is f16's range: v, U, Vt and the state must stay below 65504 in magnitude (`OPDT=bf16` lifts that).
//! The exact path's tile operands are f16 too (`LVLDT`; every exponent <= 0, so their magnitude is that of q
//! and k); the safe path's midpoint-anchored operands reach e^(8|lb|) and are always bf16. P's diagonal
//! `s q_r.k_r` is taken exactly (a banded product of the raw bf16 q and k tiles), which removes the largest
//! single rounding term of the safe path.
//!
//! `kda.decode` ([`decode`]): the recurrent form, T (usually 1) tokens per sequence against a stored state
//! `[N, HV, K, V]`; its kernel updates the state in place (the operator's plan uses the out-of-place variant
//! `h0 -> ht`, which moves the same bytes, so every run starts from the same state).
//!
//! Performance status: the first version (commit 3023aa8: 8 warps, per-element shared loads in the chunk maps,
//! sequential-latency scan) measured 3.77 ms at B1 T8192 H96 (FLA chunk_kda 2.42 ms, 0.64x) and 10.4 ms at B1
//! T65536 H32 on an H200; the two points fit ~0.29 us of device time per (chunk, head) in [`intra`] and ~1 us
//! per chunk step in [`state`], i.e. the intra-chunk kernel dominated. Since then (not yet measured): 16 warps
//! (it ran one 191 KB block of 8 warps per SM), ~35% fewer instructions (tile loads with pair accesses instead
//! of per-element shared loads, packed conversions, one copy of each level loop), a scan whose loads overlap,
//! and the diagonal solve overlapped with the levels. `CHUNK=32` fits two blocks per SM (97 KB); measured on
//! the H200 (2026-12-01) it is the fastest point with 8 warps and the default now (see [`default_knobs`]). State pass (not yet measured): `STAGES=2` double-buffers the chunk operands
//! (chunk j+1's loads overlap all of chunk j instead of half of it) and is picked by default where each block
//! has an SM to itself anyway (H32: 128 blocks of BV=32 on 8 warps, one per SM by registers, 136 KB); `BV=128,
//! W2=16` (one block per value head, 16 warps, 128 registers) reads each chunk's W/Qbar/Kbar/P once per head
//! instead of once per value block (3.3x fewer L2->SM bytes at H96: 0.91 vs 3.05 GB) at the price of 96
//! instead of 132 busy SMs; both are knob points to time against the old `STAGES=1`. Intra kernel (not yet
//! measured): `ARENA=1` aliases the phase-disjoint shared buffers (191744 -> 109568 bytes at chunk 64, see
//! [`intra`]) and with `W1=8` asks for two blocks per SM (128 registers, 8 bytes spilled); the old layout was held
//! to one block per SM by both shared memory and registers (182 at 8 warps, 116 x 512 threads at 16).
//!
//! 2026-12-01 (not yet measured then): the exact path's diagonal hierarchy (4 levels, each a full pass of operand
//! building over C x K plus two banded products) was the 0.50 ms between the exact and safe H32 T16384 runs;
//! `XDIAG=1` (default) runs the safe path's single midpoint-anchored pass on every chunk whose gates allow it
//! (a block-wide check of `|G~_r - G~_anchor| <= 48` after the scan) and keeps the hierarchy for the others
//! (e.g. gates of -1000). The H32 state pass (128 blocks, one per SM, 512-2048 sequential chunk steps) is a
//! latency chain per step; `STAGES=3` issues each chunk's loads two chunks ahead, and `STAGES=0` now takes the
//! deepest ring that keeps the resident blocks the grid needs (3 at H32, 2 at H96, 1 at B4 H64).
//!
//! 2026-12-01, later (not yet measured then; analysis in `lab/2026-12-01/1948-profile-kda-floors-and-sass.md`): both kernels
//! are far from their byte floors (intra 5.0 GB, state 2.85 GB at B1 T65536 H32) and bound by instruction issue
//! and per-step latency. `EX2=ftz` (default) makes every intra 2^x one `ex2.approx.ftz` (-15% SASS);
//! `ODIAG=1` (default, chunk 32, safe path and XDIAG chunks) takes the off-diagonal tile from the midpoint-anchored operands
//! instead of a level pass (-4% more, 2 barriers, 122 -> 76 registers); `SYNC=2` (default for rings) runs the
//! state pass with two barriers per chunk instead of four.
//!
//! 2026-12-02: `TSPLIT=P` (default 0 = [`auto_tsplit`]; 1 = the two-launch plan) cuts the chunk table along time
//! into P parts and runs intra(p) on the main stream and the state pass of part p on a second, higher-priority
//! stream after intra(p), chaining the parts' states through `[N, HV, K, V]` f32 scratch (see [`chunk_plan`]):
//! the latency-bound state pass of part p can then overlap intra(p+1). Same bits as `TSPLIT=1` (tested on the
//! CPU backends). Measured (H200, 2026-12-02): B1 T65536 H32 5.746 -> 4.910 ms at 8 parts (4.772 with STAGES=2),
//! T16384 H32 1.450 -> 1.353 at 4; shapes with many (sequence, head) pairs lose, hence the automatic choice.
//!
//! Checks compare with `k3k_reference::kda::kda_recurrent` (f64) per (sequence, value head) pair: every pair for
//! small problems, a documented sample of pairs (first, last and seeded others; every o row and state element of
//! each) for the benchmark sizes, whose full f64 recurrence would take minutes on a CPU.

pub mod decode;
pub mod intra;
pub mod state;
pub mod varlen;

use crate::OpError;
use crate::data;
use crate::dims::{self, DimDecl};
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::*;
use k3k_reference::kda as rk;
use k3k_reference::metrics::Tolerance;
use rand::Rng;
use rand::rngs::StdRng;
use rayon::prelude::*;

/// The knob `GSWZ` (`pairs` | `rows`, absent = `pairs`, the default), not an axis of the knob space (so the
/// tuner's samples, which lack it, take the default): see [`Launch::g_pairs`].
pub const GSWZ_KNOB: &str = "GSWZ";

/// The knob `SGRID` (`vb` | `seqs`, absent = `vb`), accepted but not an axis of the knob space: the order of the
/// state pass's blocks, see [`state::StateGrid`]. `vb` is as fast or faster everywhere it was timed (H100,
/// 2026-12-06, same run, ms: B1 T8192 H96 with every in-kernel option 2.035 vs 2.066 `seqs`, B4 T4096 H64 2.742 vs
/// 2.997, varlen 8 x 1024 H96 2.087 vs 2.581): with more state blocks than fit on the GPU at once, `seqs` puts a
/// pair's value blocks in different waves and each reads the pair's scratch from DRAM. Records written before it
/// (codegen 8 or earlier) no longer match their keys, so an absent knob need not mean the old grid.
pub const SGRID_KNOB: &str = "SGRID";

/// The log-decay lower bound of the safe path and the safe gate form (SEMANTICS.md section 2.3).
pub const LOWER_BOUND: f32 = -5.0;

/// How the gate reaches the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum GateForm {
    /// `g` is the log-decay itself.
    Pre,
    /// `g = lb * sigmoid(x + bias)` (in `(lb, 0)`), `bias: [HV, K]` optional; with `a_log` (gate code 3, FlashKDA's
    /// form and FLA's `safe_gate` with `A_log`) `g = lb * sigmoid(exp(A_log[hv]) * (x + bias))`, `A_log: [HV]`.
    Safe { bias: bool, a_log: bool },
    /// `g = -exp(A_log[hv]) * softplus(x + dt_bias)`, `A_log: [HV]`, `dt_bias: [HV, K]` optional.
    Standard { bias: bool },
}

impl GateForm {
    /// True when a `[HV, K]` bias tensor is passed.
    pub fn has_bias(self) -> bool {
        matches!(self, GateForm::Safe { bias: true, .. } | GateForm::Standard { bias: true })
    }
    /// True when an `A_log: [HV]` tensor is passed (the standard form, and the safe form with its scale).
    pub fn has_a_log(self) -> bool {
        matches!(self, GateForm::Standard { .. } | GateForm::Safe { a_log: true, .. })
    }
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            GateForm::Pre => "pre",
            GateForm::Safe { bias: false, a_log: false } => "lbsig",
            GateForm::Safe { bias: true, a_log: false } => "lbsigb",
            GateForm::Safe { bias: false, a_log: true } => "lbsiga",
            GateForm::Safe { bias: true, a_log: true } => "lbsigab",
            GateForm::Standard { bias: false } => "std",
            GateForm::Standard { bias: true } => "stdb",
        }
    }
    fn from_code(code: i64, bias: bool) -> Result<Self, OpError> {
        match code {
            0 => Ok(GateForm::Pre),
            1 => Ok(GateForm::Safe { bias, a_log: false }),
            2 => Ok(GateForm::Standard { bias }),
            3 => Ok(GateForm::Safe { bias, a_log: true }),
            _ => Err(bad(
                "gate",
                format!("unknown gate form {code} (0 pre, 1 lb*sigmoid, 2 standard, 3 lb*sigmoid(exp(A_log)*..))"),
            )),
        }
    }
}

/// What a chunked-kernel variant computes (fixed by the problem).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KdaSpec {
    pub dk: u32,
    pub dv: u32,
    /// Safe-gate diagonal tiles (midpoint anchor) instead of the exact hierarchy.
    pub safe: bool,
    pub gate: GateForm,
    pub l2norm: bool,
    pub beta_sigmoid: bool,
    /// An initial state is given.
    pub h0: bool,
}

impl KdaSpec {
    /// The variant part of kernel names.
    pub fn tag(&self) -> String {
        format!(
            "k{}_v{}_{}_{}{}{}",
            self.dk,
            self.dv,
            if self.safe { "safe" } else { "exact" },
            self.gate.name(),
            if self.l2norm { "_l2" } else { "" },
            if self.beta_sigmoid { "_bsig" } else { "" }
        )
    }
}

fn bad(arg: &str, why: String) -> OpError {
    OpError::BadInput { op: "kda", arg: arg.into(), why }
}

/// A warp grid for a `rows x cols` tile on `warps` warps: as many 16-row bands as divide both the rows and the
/// warps, then the remaining warps over the columns while each keeps a multiple of `unit` columns (leftover
/// warps hold replicas).
pub fn grid(rows: u32, cols: u32, warps: u32, unit: u32) -> [u32; 2] {
    let wm = (1..=warps).rev().find(|w| warps.is_multiple_of(*w) && (rows / 16).is_multiple_of(*w)).unwrap_or(1);
    let rest = warps / wm;
    let wn = (1..=rest).rev().find(|w| rest.is_multiple_of(*w) && cols.is_multiple_of(unit * w)).unwrap_or(1);
    [wm, wn]
}

// ------------------------------------------------------------------------------------------------------------
// Knobs.

/// The tuning knobs of `kda`.
pub fn knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis(
            "CHUNK",
            "chunk size (tokens per chunk); 0 = auto: 32 at K = V = 128 (measured fastest), else 64",
            [0i64, 64, 32],
        )
        .axis(
            "W1",
            "warps of the intra-chunk kernel; 0 = auto: 8 at chunk 32 with K = V = 128, else 16",
            [0i64, 16, 8, 4],
        )
        .axis(
            "ARENA",
            "intra-chunk shared layout: 0 separate buffers (191 KB at chunk 64, K = V = 128), 1 phase-aliased arena \
             with K-chunked level operands (108 KB; two blocks per SM at W1 <= 8), 2 the separate-buffer kernel with \
             its phase-disjoint buffers aliased (safe path, chunk 32, ODIAG=1, W1 <= 8, V <= K: 71 KB, three blocks per SM; \
             elsewhere as 0)",
            [0i64, 1, 2],
        )
        .axis(
            "XDIAG",
            "exact path's diagonal tiles: 1 per chunk the safe path's midpoint anchor when every |G~_r - G~_anchor| is \
             within 48 (log2 units), else the level hierarchy, all tile operands bf16; 0 always the hierarchy with \
             LVLDT operands (the old path)",
            [1i64, 0],
        )
        .axis("BV", "value columns per state-pass block (0: chosen from the problem)", [0i64, 16, 32, 64])
        .axis("W2", "warps of the state-pass kernel (0: chosen from the problem)", [0i64, 4, 8, 16])
        .axis(
            "STAGES",
            "state-pass operand buffers: 1 (two load groups, each refilled after its last reader), 2 (double-buffered \
             chunks), 3 (a ring of three: loads two chunks ahead), 0 (the deepest that keeps the resident blocks the \
             grid needs, see Launch::resolve)",
            [0i64, 1, 2, 3],
        )
        .axis(
            "ODIAG",
            "chunk 32 with ARENA=0, safe path and XDIAG chunks within the bound: 1 the off-diagonal 16x16 tile from the \
             diagonal pass's midpoint-anchored operands plus one 16-row key operand (no level pass), 0 the level pass",
            [1i64, 0],
        )
        .axis(
            "EX2",
            "intra-chunk 2^x: ftz (one ex2.approx.ftz, results below 2^-126 flushed to 0) or exact (exp2f: range test \
             and two scalings for subnormal results)",
            ["ftz", "exact"],
        )
        .axis(
            "SYNC",
            "state-pass barriers per chunk with a ring (STAGES >= 2): 2 (wait, S store, one barrier, loads of chunk j + \
             S - 1; Vt barrier) or 4 (the old order: barriers after the wait, the S store, Vt and at the end)",
            [2i64, 4],
        )
        .axis("OPDT", "16-bit type of the scratch and of the tensor-core operands built from it", ["f16", "bf16"])
        .axis("LVLDT", "16-bit type of the off-diagonal and exact-diagonal tile operands", ["f16", "bf16"])
        .accepts(
            "BV",
            "128: one state-pass block per (sequence, value head), reading each chunk's operands once (with W2=16)",
            [128i64],
        )
        .accepts(
            SGRID_KNOB,
            "state-pass block order: vb (absent: grid V/BV x N x HV, a pair's value blocks consecutive, so they \
             share its chunk operands in L2 also when the grid takes several waves) or seqs (N x HV x V/BV)",
            ["vb", "seqs"],
        )
}

/// The knobs used when nothing is tuned: chunk and intra warps automatic (see [`Launch::resolve`]). `ARENA=2`
/// (the slim intra layout, three blocks per SM where it applies, else the separate buffers) measured faster on
/// every safe preset of the H200 (2026-12-01, same run: T8192 H96 1.685 vs 1.790 ms, T65536 H32 5.795 vs
/// 6.111, T16384 H32 1.461 vs 1.543, B4 T4096 H64 2.329 vs 2.477).
pub fn default_knobs() -> Knobs {
    Knobs::new()
        .with("ARENA", 2i64)
        .with("CHUNK", 0i64)
        .with("W1", 0i64)
        .with("BV", 0i64)
        .with("W2", 0i64)
        .with("STAGES", 0i64)
        .with("XDIAG", 1i64)
        .with(GSWZ_KNOB, "pairs")
        .with("ODIAG", 1i64)
        .with("EX2", "ftz")
        .with("SYNC", 2i64)
        .with("OPDT", "f16")
        .with("LVLDT", "f16")
        .with("TSPLIT", 0i64)
}

/// Knobs resolved for one problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub chunk: u32,
    pub w1: u32,
    /// The intra-chunk kernel's phase-aliased shared layout (knob `ARENA`).
    pub arena: bool,
    /// The separate-buffer intra kernel with its phase-disjoint buffers aliased (knob `ARENA=2`).
    pub slim: bool,
    /// The exact path's adaptive diagonal tiles (knob `XDIAG`).
    pub xdiag: bool,
    /// The intra kernel's `2^x` as one `ex2.approx.ftz` (knob `EX2=ftz`).
    pub ex2_ftz: bool,
    /// The chunk-32 off-diagonal tile from the midpoint-anchored operands (knob `ODIAG=1`; safe path or
    /// `XDIAG=1`, `ARENA=0` only).
    pub midoff: bool,
    /// Two barriers per state-pass chunk instead of four (knob `SYNC=2`; rings only).
    pub two_bars: bool,
    /// The intra kernel's f32 gate-cumsum buffer in the pair-friendly swizzle (knob `GSWZ=pairs`).
    pub g_pairs: bool,
    pub bv: u32,
    pub w2: u32,
    /// Operand buffers of the state pass (1 or 2).
    pub stages: u32,
    pub op_dt: DType,
    pub lvl_dt: DType,
    /// Parts of the chunk sequence along time (knob `TSPLIT`; 1 = one intra launch and one state pass), see
    /// [`chunk_plan`].
    pub tsplit: u32,
    /// The state pass's block order (knob `SGRID`).
    pub state_grid: state::StateGrid,
}

/// `TSPLIT=0`: the parts along time for a problem. The overlap pays where the state pass is the long pole, i.e.
/// few (sequence, value head) pairs over many chunks: measured on the H200 (2026-12-02, same
/// run), B1 H32 gains at T16384 (1.450 -> 1.353 ms at 4 parts; 8 parts 1.636) and T65536 (5.746 -> 4.958 at 4,
/// 4.910 at 8), while B1 H96 T8192 (1.669 -> 1.686 at 4) and B4 H64 T4096 (2.317 -> 2.544) lose: their intra
/// kernel is the long pole and their state pass already fills the GPU. So: one part per 128 chunks (a power of
/// two, at most 8) when there are at most 32 pairs, else one part.
pub fn auto_tsplit(pb: &KdaProblem, chunk: u32) -> u32 {
    if pb.num_seqs() * pb.hv > 32 {
        return 1;
    }
    let nch = pb.chunk_tables(chunk as usize).0.len() / 2;
    let parts = (nch / 128).clamp(1, 8) as u32;
    1 << parts.ilog2()
}

/// The values knob `TSPLIT` takes.
pub const TSPLIT_VALUES: [u32; 5] = [1, 2, 4, 8, 16];

/// Streaming multiprocessors assumed by the automatic value-block choice (H100/H200).
const ASSUMED_SMS: usize = 132;

/// Dynamic shared memory one block may use (sm_90: 227 KB).
const MAX_SHARED_BYTES: u32 = 232448;

/// Shared memory of one SM (sm_90: 228 KB, of which each resident block reserves 1 KB).
const SM_SHARED_BYTES: u32 = 233472;

/// Shared bytes of the state pass (16-bit operands): per stage W, Qbar, Kbar (C x K), U (C x BV), P (C x C) and
/// gamma (K f32); once S (K x BV) and Vt (C x BV).
pub fn state_shared_bytes(dk: u32, chunk: u32, bv: u32, stages: u32) -> u32 {
    stages * (2 * chunk * (3 * dk + bv + chunk) + 4 * dk) + 2 * (dk + chunk) * bv
}

impl Launch {
    /// Read and check the knobs for a problem. `STAGES = 0` picks the deepest operand ring (3, 2 or 1 chunks)
    /// with which the resident blocks the grid needs still fit on an SM (a knob set without `STAGES`, from
    /// before it existed, means 1). `XDIAG` (exact path; missing: 0) picks the adaptive diagonal tiles.
    /// `BV = 0` picks 32 value columns per state-pass block, 16 when
    /// that would leave more than half the SMs idle (fewer than ~66 blocks), 64 when 64 still makes two blocks per
    /// SM; every value block re-reads the chunk's W, Qbar, Kbar and P, so narrower blocks cost L2 bandwidth. `W2 = 0` picks 8 warps for BV > 32,
    /// else 4.
    pub fn resolve(knobs: &Knobs, pb: &KdaProblem) -> Result<Launch, OpError> {
        let invalid = |why: String| OpError::InvalidKnobs { op: "kda", knobs: knobs.to_string(), why };
        // CHUNK = 0 / W1 = 0: chunk 32 on 8 warps at K = V = 128, the fastest point of the H200 run of
        // 2026-12-01 on every preset it timed (B1 T8192 H96 safe 2.045 ms vs 2.687 at chunk 64 on 16 warps; B1
        // T16384 H32 exact 2.396 vs 2.708; B4 T4096 H64 safe 2.854 vs 3.900; FLA chunk_kda 2.417 / 1.955 /
        // 3.105 in the same lease); chunk 64 on 16 warps for other head dims (not timed; chunk 32 on 8 warps
        // spills 4 bytes at K = 64, V = 128 on the exact path).
        let wide = pb.dk == 128 && pb.dv == 128;
        let chunk = match knobs.u32("CHUNK")? {
            0 if wide => 32,
            0 => 64,
            c => c,
        };
        let w1 = match knobs.u32("W1")? {
            0 if chunk == 32 && wide => 8,
            0 => 16,
            w => w,
        };
        let mut bv = knobs.u32("BV")?;
        let mut w2 = knobs.u32("W2")?;
        // Knob sets written before STAGES existed mean the single-buffer pass.
        let mut stages = if knobs.0.contains_key("STAGES") { knobs.u32("STAGES")? } else { 1 };
        if stages > 3 {
            return Err(invalid(format!("STAGES={stages}: 0, 1, 2 or 3")));
        }
        if chunk != 32 && chunk != 64 {
            return Err(invalid(format!("CHUNK={chunk}: 0 (auto), 32 or 64")));
        }
        if !matches!(w1, 4 | 8 | 16) {
            return Err(invalid(format!("W1={w1}: 0 (auto), 4, 8 or 16")));
        }
        if w1 == 4 && chunk == 64 && pb.dk.max(pb.dv) >= 128 {
            return Err(invalid("W1=4 with CHUNK=64 and head dim 128 runs out of registers (spills): use W1=8".into()));
        }
        let dv = pb.dv as u32;
        if bv == 0 {
            // 16 when 32 would leave more than half the SMs idle; 64 when even 64 gives two blocks per SM (every
            // value block re-reads its pair's chunk operands: wider blocks read fewer bytes from L2). Measured on the
            // H100 (2026-12-06, same run, with SGRID=vb): BV=64 on 8 warps with 2 stages 2.576 ms vs 2.742 at BV=32
            // (B4 T4096 H64, 512 blocks of 64) and 1.957 vs 2.087 (varlen 8 x 1024 H96, 1536 blocks), while B1 T8192
            // H96 (192 blocks of 64) took 2.100 vs 2.035: there BV=32 stays.
            let heads = pb.num_seqs() * pb.hv;
            bv = if 2 * heads * pb.dv / 32 < ASSUMED_SMS {
                16
            } else if pb.dv.is_multiple_of(64) && heads * pb.dv / 64 >= 2 * ASSUMED_SMS {
                64
            } else {
                32
            };
        }
        if !matches!(bv, 16 | 32 | 64 | 128) || bv > dv || !dv.is_multiple_of(bv) {
            return Err(invalid(format!("BV={bv} must be 16, 32, 64 or 128 and divide V={dv}")));
        }
        if w2 == 0 {
            // 8 warps for value blocks wider than 32, else 4: a chunk-32 x 32 output tile does not split over 8
            // warps (half of them duplicate its products). Measured on the H200 (2026-12-01, same run, chunk 32,
            // 3 stages, where 8 warps had been picked because the 128 blocks fit on the SMs at once): W2=4 took
            // 6.819 ms at B1 T65536 H32 (8 warps 7.340), 1.879 at T16384 H32 safe (1.945), 1.980 exact (2.114).
            w2 = if bv > 32 { 8 } else { 4 };
        }
        if !matches!(w2, 4 | 8 | 16) {
            return Err(invalid(format!("W2={w2}: 0, 4, 8 or 16")));
        }
        if stages == 0 && bv == 64 && w2 == 8 {
            // 64 columns on 8 warps: 2 stages (ptxas, 2026-12-06: 128 registers, two blocks per SM; 3 stages
            // take 154 registers, one block per SM, which the register model below does not see).
            stages = 2;
        }
        if stages == 0 {
            // More operand stages multiply the chunk buffers (38 -> 67 -> 96 KB at chunk 32, K = V = 128, BV = 32)
            // and let chunk j + S - 1's loads overlap S - 1 chunks of work instead of half of one; they are free
            // as long as they cost none of the resident blocks the grid needs. So: the deepest ring (3, 2, 1)
            // with which `min(ceil(blocks / SMs), blocks per SM by registers)` blocks still fit on an SM, the
            // registers taken as 128 a thread (ptxas: 123-128 at 1 and 3 stages; 153 for 2 stages on 4 warps,
            // i.e. 3 blocks per SM, which shared memory caps at anyway: 3 x 67 KB) -- e.g. 3 stages at H32 (128
            // blocks, one per SM), 2 at H96 (384 blocks: 3 per SM, 3 x 67 KB), 1 at B4 H64 (1024 blocks: 4 per SM
            // by registers at 4 warps, 4 x 38 KB).
            let blocks = pb.num_seqs() * pb.hv * pb.dv / bv as usize;
            let want = blocks.div_ceil(ASSUMED_SMS).min(65536 / (128 * 32 * w2 as usize)).max(1) as u32;
            let fits = |s: u32| want * (state_shared_bytes(pb.dk as u32, chunk, bv, s) + 1024) <= SM_SHARED_BYTES;
            stages = [3, 2].into_iter().find(|&s| fits(s)).unwrap_or(1);
        }
        if state_shared_bytes(pb.dk as u32, chunk, bv, stages) > MAX_SHARED_BYTES {
            return Err(invalid(format!(
                "STAGES={stages} at chunk {chunk}, BV={bv}: {} bytes of shared memory (max {MAX_SHARED_BYTES})",
                state_shared_bytes(pb.dk as u32, chunk, bv, stages)
            )));
        }
        // f32 accumulator registers per thread: the state and the two chunk accumulators.
        let regs = (pb.dk as u32 + 2 * chunk) * bv / (32 * w2);
        if regs > 64 {
            return Err(invalid(format!(
                "state K={} x BV={bv} and two {chunk} x {bv} accumulators on {w2} warps: {regs} registers a thread (max 64)",
                pb.dk
            )));
        }
        let dt = |name: &str| -> Result<DType, OpError> {
            match knobs.str(name)? {
                "f16" => Ok(DType::F16),
                "bf16" => Ok(DType::Bf16),
                other => Err(invalid(format!("{name}={other}: f16 or bf16"))),
            }
        };
        // Knob sets written before ARENA existed mean the separate buffers.
        let arena_knob = if knobs.0.contains_key("ARENA") { knobs.u32("ARENA")? } else { 0 };
        let arena = match arena_knob {
            0 | 2 => false,
            1 => true,
            other => return Err(invalid(format!("ARENA={other}: 0, 1 or 2"))),
        };
        // Knob sets written before XDIAG existed mean the hierarchy.
        let xdiag = match if knobs.0.contains_key("XDIAG") { knobs.u32("XDIAG")? } else { 0 } {
            0 => false,
            1 => true,
            other => return Err(invalid(format!("XDIAG={other}: 0 or 1"))),
        };
        // Knob sets written before EX2 / ODIAG / SYNC existed mean exp2f, the level pass and four barriers.
        let ex2_ftz = match if knobs.0.contains_key("EX2") { knobs.str("EX2")? } else { "exact" } {
            "ftz" => true,
            "exact" => false,
            other => return Err(invalid(format!("EX2={other}: ftz or exact"))),
        };
        let midoff = match if knobs.0.contains_key("ODIAG") { knobs.u32("ODIAG")? } else { 0 } {
            0 => false,
            1 => (pb.safe || xdiag) && chunk == 32 && !arena,
            other => return Err(invalid(format!("ODIAG={other}: 0 or 1"))),
        };
        // ARENA=2: the slim layout of the separate-buffer kernel (see `intra::IntraOpts::slim`) where it applies
        // (safe path, chunk 32, ODIAG=1, W1 <= 8, V <= K); elsewhere the separate buffers, as ODIAG does.
        // (The phase-B buffers fit in sQ + sOp's bytes for V <= K.)
        let slim = arena_knob == 2 && pb.safe && midoff && w1 <= 8 && pb.dv <= pb.dk;
        let two_bars = match if knobs.0.contains_key("SYNC") { knobs.u32("SYNC")? } else { 4 } {
            2 => stages >= 2,
            4 => false,
            other => return Err(invalid(format!("SYNC={other}: 2 or 4"))),
        };
        // GSWZ (not an axis of the knob space; absent = pairs: knob sets written before it were made at codegen
        // v8 or earlier, whose records no longer match their keys): the layout of the intra kernel's f32 G~ buffer.
        // `rows`: the 16-bit operands' XOR swizzle, 2-way bank conflicts on its 8-byte pair accesses (13.4 M of the
        // kernel's 132.5 M shared wavefronts at B1 T8192 H96, ncu, 2026-12-02). `pairs`: Swizzle::Xor16BPairs, no
        // conflicts: faster on every preset (H200, 2026-12-04, same run, with W and U regrouped into 8-byte
        // stores as the kernel does on its plain variants: T8192 H96 1.545 vs 1.577 ms, T65536 H32 4.483 vs 4.581,
        // T16384 safe 1.176 vs 1.198, exact 1.351 vs 1.379, B4 T4096 H64 2.153 vs 2.195).
        let g_pairs = match if knobs.0.contains_key(GSWZ_KNOB) { knobs.str(GSWZ_KNOB)? } else { "pairs" } {
            "rows" => false,
            "pairs" => true,
            other => return Err(invalid(format!("{GSWZ_KNOB}={other}: rows or pairs"))),
        };
        // Knob sets without TSPLIT (all of them before it existed) mean the one-part plan; 0 (the default) is
        // the automatic choice of [`auto_tsplit`].
        let tsplit = match if knobs.0.contains_key("TSPLIT") { knobs.u32("TSPLIT")? } else { 1 } {
            0 => auto_tsplit(pb, chunk),
            t => t,
        };
        if !TSPLIT_VALUES.contains(&tsplit) {
            return Err(invalid(format!("TSPLIT={tsplit}: 0 (auto) or one of {TSPLIT_VALUES:?}")));
        }
        let state_grid = match if knobs.0.contains_key(SGRID_KNOB) { knobs.str(SGRID_KNOB)? } else { "vb" } {
            "seqs" => state::StateGrid::Seqs,
            "vb" => state::StateGrid::ValueBlocks,
            other => return Err(invalid(format!("{SGRID_KNOB}={other}: seqs or vb"))),
        };
        Ok(Launch {
            chunk,
            w1,
            arena,
            slim,
            xdiag,
            ex2_ftz,
            midoff,
            two_bars,
            g_pairs,
            bv,
            w2,
            stages,
            op_dt: dt("OPDT")?,
            lvl_dt: dt("LVLDT")?,
            tsplit,
            state_grid,
        })
    }
}

// ------------------------------------------------------------------------------------------------------------
// Problems.

/// The dims of `kda` presets (see [`KdaProblem::from_preset`]).
pub const DIMS: &[DimDecl] = &[
    DimDecl::optional("B", 1, dims::MAX_GROUPS, "sequences of T tokens (instead of N)"),
    DimDecl::optional("T", 0, dims::MAX_ROWS, "tokens per sequence"),
    DimDecl::required("H", 1, dims::MAX_HEADS, "query/key heads"),
    DimDecl::optional("HV", 1, dims::MAX_HEADS, "value heads, a multiple of H (default H)"),
    DimDecl::required("K", 1, 128, "key head dim: 32, 64 or 128"),
    DimDecl::optional("V", 1, 128, "value head dim: 32, 64 or 128 (default K)"),
    DimDecl::optional("N", 1, dims::MAX_GROUPS, "varlen: the number of sequences (then B = 1)"),
    DimDecl::indexed("L", "N", 0, dims::MAX_ROWS, "varlen: tokens of sequence i"),
    DimDecl::flag("safe", "1: the safe-gate path (default), 0: the exact path"),
    DimDecl::optional("gate", 0, 3, "gate form: 0 pre-computed, 1 lb*sigmoid, 2 standard, 3 lb*sigmoid(exp(A_log)*..)"),
    DimDecl::flag("bias", "1: the gate's bias"),
    DimDecl::flag("l2norm", "1: in-kernel l2norm of q and k"),
    DimDecl::flag("bsig", "1: in-kernel sigmoid of beta"),
    DimDecl::flag("h0", "1: an initial state"),
    DimDecl::flag("extreme", "1: gates of -1000 mixed in (exact path)"),
];

/// Elements of q, k, v, g, o and the per-chunk states of a `kda` problem (or, `decode`, of N sequences of T
/// tokens against their states).
fn kda_footprint(p: &Preset, decode: bool) -> f64 {
    let h = dims::size(p, "H", 0);
    let hv = dims::size(p, "HV", h as i64);
    let k = dims::size(p, "K", 0);
    let v = dims::size(p, "V", k as i64);
    let (seqs, tokens) = if decode {
        let n = dims::size(p, "N", 0);
        (n, n * dims::size(p, "T", 1))
    } else if p.dims.contains_key("N") {
        let n = dims::size(p, "N", 0);
        (n, dims::family_sum(p, "L", n))
    } else {
        let b = dims::size(p, "B", 0);
        (b, b * dims::size(p, "T", 0))
    };
    tokens * hv * (3.0 * k + 2.0 * v) + (tokens / 64.0 + 2.0 * seqs) * hv * k * v
}

/// One chunked-KDA problem.
#[derive(Clone, Debug, PartialEq)]
pub struct KdaProblem {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
    /// Sequence lengths (varlen, B = 1); `None`: B sequences of T tokens.
    pub lens: Option<Vec<usize>>,
    pub safe: bool,
    pub gate: GateForm,
    pub l2norm: bool,
    pub beta_sigmoid: bool,
    pub h0: bool,
    /// Gates of -1000 mixed in (exact path tests).
    pub extreme: bool,
}

impl KdaProblem {
    /// Resolve a preset: dims `B`, `T`, `H`, `K`, and optionally `HV` (default H), `V` (default K), `safe`
    /// (default 1), `gate` (0 pre, 1 lb*sigmoid, 2 standard, 3 lb*sigmoid(exp(A_log)*..)) with `bias`, `l2norm`, `bsig`, `h0`, `extreme`,
    /// and for varlen `N` with lengths `L0..L{N-1}` (then B = 1 and T = their sum).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let flag = |d: &str| p.get_or(d, 0) != 0;
        let (b, t, lens) = if let Some(&n) = p.dims.get("N") {
            let lens: Vec<usize> = (0..n).map(|i| p.get_or(&format!("L{i}"), 0).max(0) as usize).collect();
            (1, lens.iter().sum(), Some(lens))
        } else {
            (p.get("B")? as usize, p.get("T")? as usize, None)
        };
        let h = p.get("H")? as usize;
        let dk = p.get("K")? as usize;
        let pb = KdaProblem {
            b,
            t,
            h,
            hv: p.get_or("HV", h as i64) as usize,
            dk,
            dv: p.get_or("V", dk as i64) as usize,
            lens,
            safe: p.get_or("safe", 1) != 0,
            gate: GateForm::from_code(p.get_or("gate", 0), flag("bias"))?,
            l2norm: flag("l2norm"),
            beta_sigmoid: flag("bsig"),
            h0: flag("h0"),
            extreme: flag("extreme"),
        };
        pb.validate()?;
        Ok(pb)
    }

    /// Shapes and options the kernels support.
    pub fn validate(&self) -> Result<(), OpError> {
        for (arg, d) in [("K", self.dk), ("V", self.dv)] {
            if !matches!(d, 32 | 64 | 128) {
                return Err(bad(arg, format!("head dim {d}: the kernels support 32, 64 and 128")));
            }
        }
        if self.h == 0 || self.hv == 0 || !self.hv.is_multiple_of(self.h) {
            return Err(bad("HV", format!("HV = {} must be a positive multiple of H = {}", self.hv, self.h)));
        }
        if self.b == 0 {
            return Err(bad("B", "need at least one sequence".into()));
        }
        if self.safe && matches!(self.gate, GateForm::Standard { .. }) {
            return Err(bad(
                "gate",
                "the safe path needs gates in [lb, 0): the standard form -exp(A_log)*softplus(..) is unbounded; \
                 use the exact path (safe=0) or the lb*sigmoid form"
                    .into(),
            ));
        }
        if self.safe && self.extreme {
            return Err(bad("extreme", "gates of -1000 need the exact path (safe=0)".into()));
        }
        Ok(())
    }

    /// Total tokens (rows of q).
    pub fn tokens(&self) -> usize {
        self.b * self.t
    }
    /// Number of sequences N.
    pub fn num_seqs(&self) -> usize {
        self.lens.as_ref().map_or(self.b, |l| l.len())
    }
    /// Sequences as (first row, end row).
    pub fn seqs(&self) -> Vec<(usize, usize)> {
        match &self.lens {
            Some(l) => l
                .iter()
                .scan(0usize, |s, &n| {
                    let r = (*s, *s + n);
                    *s += n;
                    Some(r)
                })
                .collect(),
            None => (0..self.b).map(|i| (i * self.t, (i + 1) * self.t)).collect(),
        }
    }
    /// The chunk table `[(row0, len)]` and the per-sequence `[(first chunk, chunks)]` for a chunk size.
    pub fn chunk_tables(&self, chunk: usize) -> (Vec<i64>, Vec<i64>) {
        let (mut ctab, mut stab) = (vec![], vec![]);
        for (s, e) in self.seqs() {
            let first = ctab.len() / 2;
            let mut r = s;
            while r < e {
                let len = chunk.min(e - r);
                ctab.extend([r as i64, len as i64]);
                r += len;
            }
            stab.extend([first as i64, (ctab.len() / 2 - first) as i64]);
        }
        (ctab, stab)
    }
    /// The kernel variant.
    pub fn spec(&self) -> KdaSpec {
        KdaSpec {
            dk: self.dk as u32,
            dv: self.dv as u32,
            safe: self.safe,
            gate: self.gate,
            l2norm: self.l2norm,
            beta_sigmoid: self.beta_sigmoid,
            h0: self.h0,
        }
    }
    /// The query scale K^-1/2 (as the f32 the kernels use).
    pub fn scale(&self) -> f32 {
        (1.0 / (self.dk as f64).sqrt()) as f32
    }
    fn describe(&self) -> String {
        let shape = match &self.lens {
            Some(l) if l.len() <= 8 => format!("varlen {l:?}"),
            Some(l) => format!("varlen N={} T={}", l.len(), self.t),
            None => format!("B{} T{}", self.b, self.t),
        };
        format!(
            "{shape} H{} HV{} K{} V{} {}{} gate={}{}{}{}",
            self.h,
            self.hv,
            self.dk,
            self.dv,
            if self.safe { "safe" } else { "exact" },
            if self.extreme { "(-1000 gates)" } else { "" },
            self.gate.name(),
            if self.l2norm { " l2norm" } else { "" },
            if self.beta_sigmoid { " beta-sigmoid" } else { "" },
            if self.h0 { " h0" } else { "" },
        )
    }
}

/// The host-side gate check of the safe path: every pre-computed gate must be a number `>= lb`. Run before
/// anything is launched; the error is [`OpError::BadInput`] naming `g`.
pub fn check_gates(g: &HostTensor, lb: f32) -> Result<(), OpError> {
    let bad_at = g.data.par_chunks_exact(4).position_first(|b| {
        let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        v.is_nan() || v < lb
    });
    match bad_at {
        None => Ok(()),
        Some(i) => Err(bad(
            "g",
            format!(
                "the safe-gate path needs every gate in [{lb}, 0): g[{i}] = {} (use the exact path, safe=0, for \
                 unbounded gates)",
                g.get_f32(i)
            ),
        )),
    }
}

/// Inputs of one problem, as the kernels take them (`[B*T, ...]` rows).
#[derive(Clone, Debug)]
pub struct KdaData {
    pub q: HostTensor,
    pub k: HostTensor,
    pub v: HostTensor,
    pub g: HostTensor,
    pub beta: HostTensor,
    pub bias: Option<HostTensor>,
    pub a_log: Option<HostTensor>,
    pub h0: Option<HostTensor>,
}

/// Unit-L2 rows of `dim` (normalised in f32), rounded to bf16.
fn unit_rows(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut x = data::normal(n * dim, 1.0, seed);
    x.par_chunks_mut(dim).for_each(|r| {
        let s = r.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-20);
        r.iter_mut().for_each(|v| *v /= s);
    });
    x
}

impl KdaData {
    /// Seeded inputs: q, k unit rows (plain normal draws when the kernel normalises them), v ~ N(0, 1), beta
    /// uniform in (0, 1) (or N(0, 1) logits), h0 ~ N(0, 1); gates `lb*sigmoid(N(0,1))` on the safe path,
    /// `log(sigmoid(N(0,1)))` on the exact path with about 2% set to -1000 when `extreme`; raw gate inputs
    /// N(0, 1), biases N(0, 0.5^2) and `A_log` uniform in (-1, 1) for the in-kernel gate forms.
    pub fn generate(pb: &KdaProblem, seed: u64) -> KdaData {
        let (tt, h, hv, dk, dv) = (pb.tokens(), pb.h, pb.hv, pb.dk, pb.dv);
        let qk = |s: u64| {
            if pb.l2norm { data::normal(tt * h * dk, 1.0, s) } else { unit_rows(tt * h, dk, s) }
        };
        let q = data::tensor(DType::Bf16, &[tt, h, dk], &qk(seed ^ 0x71));
        let k = data::tensor(DType::Bf16, &[tt, h, dk], &qk(seed ^ 0x6b));
        let v = data::tensor(DType::Bf16, &[tt, hv, dv], &data::normal(tt * hv * dv, 1.0, seed ^ 0x76));
        let ng = tt * hv * dk;
        let mut g = data::normal(ng, 1.0, seed ^ 0x67);
        match pb.gate {
            GateForm::Pre if pb.safe => g.par_iter_mut().for_each(|x| *x = LOWER_BOUND / (1.0 + (-*x).exp())),
            GateForm::Pre => {
                let u = data::uniform(ng, 0.0, 1.0, seed ^ 0x65);
                g.par_iter_mut().zip(u).for_each(|(x, u)| {
                    *x = if pb.extreme && u < 0.02 { -1000.0 } else { -(1.0 + (-*x).exp()).ln() };
                });
            }
            _ => {}
        }
        let g = data::tensor(DType::F32, &[tt, hv, dk], &g);
        let beta = if pb.beta_sigmoid {
            data::normal(tt * hv, 1.0, seed ^ 0x62)
        } else {
            data::uniform(tt * hv, 0.02, 1.0, seed ^ 0x62)
        };
        let beta = data::tensor(DType::Bf16, &[tt, hv], &beta);
        let bias =
            pb.gate.has_bias().then(|| data::tensor(DType::F32, &[hv, dk], &data::normal(hv * dk, 0.5, seed ^ 0x31)));
        let a_log =
            pb.gate.has_a_log().then(|| data::tensor(DType::F32, &[hv], &data::uniform(hv, -1.0, 1.0, seed ^ 0x41)));
        let n = pb.num_seqs();
        let h0 = pb
            .h0
            .then(|| data::tensor(DType::F32, &[n, hv, dk, dv], &data::normal(n * hv * dk * dv, 1.0, seed ^ 0x68)));
        KdaData { q, k, v, g, beta, bias, a_log, h0 }
    }

    /// The reference inputs of one (sequence, value head) pair: rows `rows` of q/k head `hv / (HV/H)` and of
    /// v, g (the effective log-decay, from the gate form in f64), beta (after the sigmoid when asked) and h0.
    pub fn pair_inputs(&self, pb: &KdaProblem, rows: (usize, usize), seq: usize, hv: usize) -> rk::KdaInputs {
        let (dk, dv) = (pb.dk, pb.dv);
        let hq = hv / (pb.hv / pb.h);
        let t = rows.1 - rows.0;
        let mut x = rk::KdaInputs::new(1, t, 1, 1, dk, dv, vec![], vec![], vec![], vec![], vec![]);
        for r in rows.0..rows.1 {
            let qo = (r * pb.h + hq) * dk;
            x.q.extend((0..dk).map(|i| self.q.get_f32(qo + i)));
            x.k.extend((0..dk).map(|i| self.k.get_f32(qo + i)));
            let vo = (r * pb.hv + hv) * dv;
            x.v.extend((0..dv).map(|j| self.v.get_f32(vo + j)));
            let go = (r * pb.hv + hv) * dk;
            x.g.extend((0..dk).map(|i| {
                let raw = self.g.get_f32(go + i) as f64;
                let bias = self.bias.as_ref().map_or(0.0, |b| b.get_f32(hv * dk + i) as f64);
                let a_log = || self.a_log.as_ref().expect("A_log of the gate form").get_f32(hv) as f64;
                (match pb.gate {
                    GateForm::Pre => raw,
                    GateForm::Safe { a_log: false, .. } => rk::gate_safe(raw, bias, LOWER_BOUND as f64),
                    GateForm::Safe { a_log: true, .. } => rk::gate_safe_scaled(raw, a_log(), bias, LOWER_BOUND as f64),
                    GateForm::Standard { .. } => rk::gate_standard(raw, a_log(), bias),
                }) as f32
            }));
            let bv = self.beta.get_f32(r * pb.hv + hv) as f64;
            x.beta.push(if pb.beta_sigmoid { (1.0 / (1.0 + (-bv).exp())) as f32 } else { bv as f32 });
        }
        x.h0 = self.h0.as_ref().map(|h0| {
            let o = (seq * pb.hv + hv) * dk * dv;
            (0..dk * dv).map(|i| h0.get_f32(o + i)).collect()
        });
        x.scale = Some(pb.scale() as f64);
        x.use_qk_l2norm = pb.l2norm;
        x
    }
}

/// The two chunked kernels of a problem at resolved knobs.
pub fn chunk_kernels(pb: &KdaProblem, l: &Launch) -> Result<(Kernel, Kernel), OpError> {
    let spec = pb.spec();
    Ok((
        intra::build_intra(
            &spec,
            l.chunk,
            l.w1,
            l.op_dt,
            l.lvl_dt,
            intra::IntraOpts {
                arena: l.arena,
                slim: l.slim,
                xdiag: l.xdiag,
                ex2_ftz: l.ex2_ftz,
                midoff: l.midoff,
                g_pairs: l.g_pairs,
            },
        )?,
        state_kernel(&spec, l)?,
    ))
}

/// The state pass of a variant at resolved knobs.
pub fn state_kernel(spec: &KdaSpec, l: &Launch) -> Result<Kernel, OpError> {
    state::build_state_in(spec, l.chunk, l.bv, l.w2, l.op_dt, l.stages, l.two_bars, l.state_grid)
}

/// The chunk ranges `[lo, hi)` of the parts of a `TSPLIT = parts` plan over `nch` chunks: part p is
/// `[p*nch/P, (p+1)*nch/P)` of the global chunk table with `P = min(parts, nch)`, so no part is empty (no parts
/// when there is no chunk).
pub fn time_parts(nch: usize, parts: u32) -> Vec<(usize, usize)> {
    let p = (parts as usize).min(nch);
    (0..p).map(|i| (i * nch / p, (i + 1) * nch / p)).collect()
}

/// The per-sequence `[first, count]` rows of a part `[lo, hi)` of the chunk table from the whole table's `stab`:
/// each sequence's chunks inside the part, `first` counted from `lo`; `[0, 0]` for a sequence with no chunk there
/// (the state pass then passes its state through unchanged: the chunk loop runs zero times between the state's
/// load from `h0` or zeros and its store to `ht`).
pub fn part_seq_table(stab: &[i64], lo: usize, hi: usize) -> Vec<i64> {
    stab.chunks_exact(2)
        .flat_map(|e| {
            let (a, b) = ((e[0] as usize).max(lo), ((e[0] + e[1]) as usize).min(hi));
            if a < b { [(a - lo) as i64, (b - a) as i64] } else { [0, 0] }
        })
        .collect()
}

/// The plan of a chunked problem: checks the inputs (safe-path gates on the host), then intra + state pass.
///
/// `TSPLIT = P > 1` (with at least two chunks): the chunk table is cut along time into P parts of consecutive
/// chunks (see [`time_parts`]; chunk boundaries, so the kernels are unchanged and a sequence may span parts).
/// Part p has its own chunk table (absolute token rows, so every part writes its own rows of the one `o`), its own
/// sequence table ([`part_seq_table`]), its own scratch (its chunks only: the scratch totals that of one part),
/// and its state pass starts from the state the previous part's pass ended with (`h{p-1}`, a `[N, HV, K, V]` f32
/// scratch; part 0 from `h0`, or zeros through the no-`h0` kernel) and the last part's writes `ht`. Steps:
/// intra(p) on the main stream; state(p) on the side stream, waiting for intra(p) (state(p-1) precedes it on the
/// side stream), so on a GPU the state pass of part p can run while intra(p+1) does. The arithmetic of every
/// chunk step is that of the one-part plan, in the same order, so `o` and `ht` are the same bits.
pub fn chunk_plan(pb: &KdaProblem, d: &KdaData, knobs: &Knobs) -> Result<Plan, OpError> {
    pb.validate()?;
    if pb.safe && pb.gate == GateForm::Pre {
        check_gates(&d.g, LOWER_BOUND)?;
    }
    let l = Launch::resolve(knobs, pb)?;
    let (k1, k2) = chunk_kernels(pb, &l)?;
    let (ctab, stab) = pb.chunk_tables(l.chunk as usize);
    let nch = ctab.len() / 2;
    let parts = time_parts(nch, l.tsplit);
    if parts.len() > 1 {
        return split_plan(pb, d, &l, k1, &ctab, &stab, &parts);
    }
    let (tt, hv, dk, dv, c, n) = (pb.tokens(), pb.hv, pb.dk, pb.dv, l.chunk as usize, pb.num_seqs());
    let mut plan = Plan::default();
    let mut a1 = token_inputs(&mut plan, d);
    let ct = plan.input("ctab", HostTensor::from_i64(DType::I32, &[nch, 2], &ctab));
    let st = plan.input("stab", HostTensor::from_i64(DType::I32, &[n, 2], &stab));
    let wu = plan.scratch("wu", l.op_dt, &[hv, nch, c, dk + dv]);
    let qb = plan.scratch("qbar", l.op_dt, &[hv, nch, c, dk]);
    let kb = plan.scratch("kbar", l.op_dt, &[hv, nch, c, dk]);
    let pm = plan.scratch("p", l.op_dt, &[hv, nch, c, c]);
    let gam = plan.scratch("gamma", DType::F32, &[hv, nch, dk]);
    a1.extend([ct, wu, qb, kb, pm, gam]);
    let s1 = intra_scalars(pb);
    let mut a2 = vec![wu, qb, kb, pm, gam, ct, st];
    if let Some(h0) = &d.h0 {
        a2.push(plan.input("h0", h0.clone()));
    }
    let o = plan.output("o", DType::Bf16, &[tt, hv, dv]);
    let ht = plan.output("ht", DType::F32, &[n, hv, dk, dv]);
    a2.extend([o, ht]);
    if nch > 0 {
        plan.step(k1, &a1, &s1);
    }
    plan.step(k2, &a2, &[]);
    Ok(plan)
}

/// The per-token inputs of the intra kernel, added to `plan` in its argument order: q, k, v, g, beta, then the
/// gate's bias and A_log where the problem has them.
fn token_inputs(plan: &mut Plan, d: &KdaData) -> Vec<usize> {
    let mut a = vec![
        plan.input("q", d.q.clone()),
        plan.input("k", d.k.clone()),
        plan.input("v", d.v.clone()),
        plan.input("g", d.g.clone()),
        plan.input("beta", d.beta.clone()),
    ];
    if let Some(b) = &d.bias {
        a.push(plan.input("bias", b.clone()));
    }
    if let Some(l) = &d.a_log {
        a.push(plan.input("a_log", l.clone()));
    }
    a
}

/// The scalars of the intra kernel.
pub fn intra_scalars(pb: &KdaProblem) -> Vec<(&'static str, SymValue)> {
    let mut s1 = vec![("scale", SymValue::Float(pb.scale()))];
    if matches!(pb.gate, GateForm::Safe { .. }) {
        s1.push(("lb", SymValue::Float(LOWER_BOUND)));
    }
    s1
}

/// The `TSPLIT > 1` plan of [`chunk_plan`] over at least two parts.
fn split_plan(
    pb: &KdaProblem,
    d: &KdaData,
    l: &Launch,
    k1: Kernel,
    ctab: &[i64],
    stab: &[i64],
    parts: &[(usize, usize)],
) -> Result<Plan, OpError> {
    let (tt, hv, dk, dv, c, n) = (pb.tokens(), pb.hv, pb.dk, pb.dv, l.chunk as usize, pb.num_seqs());
    // The state pass from zeros (part 0 without h0) and from a given state (every other part).
    let spec = pb.spec();
    let k2_from = state_kernel(&KdaSpec { h0: true, ..spec }, l)?;
    let k2_zero = if pb.h0 { None } else { Some(state_kernel(&KdaSpec { h0: false, ..spec }, l)?) };
    let mut plan = Plan::default();
    let a1_common = token_inputs(&mut plan, d);
    let mut prev_state = d.h0.as_ref().map(|h0| plan.input("h0", h0.clone()));
    let o = plan.output("o", DType::Bf16, &[tt, hv, dv]);
    let ht = plan.output("ht", DType::F32, &[n, hv, dk, dv]);
    let s1 = intra_scalars(pb);
    for (p, &(lo, hi)) in parts.iter().enumerate() {
        let m = hi - lo;
        let ct = plan.input(&format!("ctab@{p}"), HostTensor::from_i64(DType::I32, &[m, 2], &ctab[2 * lo..2 * hi]));
        let st =
            plan.input(&format!("stab@{p}"), HostTensor::from_i64(DType::I32, &[n, 2], &part_seq_table(stab, lo, hi)));
        let wu = plan.scratch(&format!("wu@{p}"), l.op_dt, &[hv, m, c, dk + dv]);
        let qb = plan.scratch(&format!("qbar@{p}"), l.op_dt, &[hv, m, c, dk]);
        let kb = plan.scratch(&format!("kbar@{p}"), l.op_dt, &[hv, m, c, dk]);
        let pm = plan.scratch(&format!("p@{p}"), l.op_dt, &[hv, m, c, c]);
        let gam = plan.scratch(&format!("gamma@{p}"), DType::F32, &[hv, m, dk]);
        let mut a1 = a1_common.clone();
        a1.extend([ct, wu, qb, kb, pm, gam]);
        let intra = plan.step_on(k1.clone(), &a1, &s1, 0, &[]);
        let out_state =
            if p + 1 == parts.len() { ht } else { plan.scratch(&format!("h@{p}"), DType::F32, &[n, hv, dk, dv]) };
        let mut a2 = vec![wu, qb, kb, pm, gam, ct, st];
        let kernel = match prev_state {
            Some(h) => {
                a2.push(h);
                k2_from.clone()
            }
            None => k2_zero.clone().expect("the no-h0 state kernel"),
        };
        a2.extend([o, out_state]);
        plan.step_on(kernel, &a2, &[], 1, &[intra]);
        prev_state = Some(out_state);
    }
    Ok(plan)
}

/// Compare `o: [rows, HV, V]` and `ht: [N, HV, K, V]` with the f64 recurrence on (sequence, value head) pairs.
pub fn check_pairs(
    pb: &KdaProblem,
    d: &KdaData,
    out: &Outputs,
    pairs: &[(usize, usize)],
    scope: String,
) -> Result<CheckReport, OpError> {
    let o = out.get("o")?;
    let ht = out.get("ht")?;
    let seqs = pb.seqs();
    let (dk, dv, hvn) = (pb.dk, pb.dv, pb.hv);
    type Quad = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);
    let per: Vec<Result<Quad, OpError>> = pairs
        .par_iter()
        .map(|&(n, hv)| {
            let rows = seqs[n];
            let x = d.pair_inputs(pb, rows, n, hv);
            let r = rk::kda_recurrent(&x).map_err(|e| OpError::Internal(format!("reference: {e}")))?;
            let mut got_o = Vec::with_capacity(r.o.len());
            for row in rows.0..rows.1 {
                let base = (row * hvn + hv) * dv;
                got_o.extend((0..dv).map(|j| o.get_f32(base + j) as f64));
            }
            let sb = (n * hvn + hv) * dk * dv;
            let got_s: Vec<f64> = (0..dk * dv).map(|i| ht.get_f32(sb + i) as f64).collect();
            Ok((r.o, got_o, r.final_state, got_s))
        })
        .collect();
    let (mut wo, mut go, mut ws, mut gs) = (vec![], vec![], vec![], vec![]);
    for p in per {
        let (a, b, c, e) = p?;
        wo.extend(a);
        go.extend(b);
        ws.extend(c);
        gs.extend(e);
    }
    let ro = crate::check::compare("o", &go, &wo, Tolerance::Bf16, scope.clone());
    let rs = crate::check::compare("final state", &gs, &ws, Tolerance::Bf16, scope);
    Ok(ro.merge(rs))
}

/// Which (sequence, value head) pairs a check covers: all of them while the f64 recurrence stays cheap (about
/// 2^28 multiply-adds), else the first and last pair plus seeded others, at most 8 (fewer for long sequences).
pub fn check_scope(pb: &KdaProblem, seed: u64) -> (Vec<(usize, usize)>, String) {
    let n = pb.num_seqs();
    let all: Vec<(usize, usize)> = (0..n).flat_map(|s| (0..pb.hv).map(move |h| (s, h))).collect();
    let cost = pb.tokens() * pb.hv * pb.dk * pb.dv;
    if cost <= 1 << 28 {
        return (all, format!("all {} (sequence, value head) pairs: every o and state element", n * pb.hv));
    }
    let seqs = pb.seqs();
    let longest = seqs.iter().map(|(s, e)| e - s).max().unwrap_or(0).max(1);
    let budget = ((1usize << 31) / (longest * pb.dk * pb.dv)).clamp(2, 8);
    let mut pick = vec![(0, 0), (n - 1, pb.hv - 1)];
    let mut s = seed | 1;
    while pick.len() < budget.min(all.len()) {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let p = all[(s >> 33) as usize % all.len()];
        if !pick.contains(&p) {
            pick.push(p);
        }
    }
    pick.sort();
    pick.dedup();
    let scope = format!(
        "{} sampled (sequence, value head) pairs of {} {:?}: every o row and state element of each",
        pick.len(),
        all.len(),
        pick
    );
    (pick, scope)
}

// ------------------------------------------------------------------------------------------------------------
// The `kda` operator.

/// The in-kernel options of the FlashKDA comparison (issue 42), as preset dims: K = V = 128 on the safe path, L2
/// norm of q and k, the gate `lb * sigmoid(exp(A_log[h]) * (g + bias))` with a `[H, K]` bias (`gate=3`, FlashKDA's
/// form), beta sigmoid, an f32 initial state (the final state is always written).
pub const FLASHKDA_OPTIONS: [(&str, i64); 8] =
    [("K", 128), ("V", 128), ("safe", 1), ("gate", 3), ("bias", 1), ("l2norm", 1), ("bsig", 1), ("h0", 1)];

/// The suffix of the FlashKDA comparison presets' names (the options of [`FLASHKDA_OPTIONS`], named as the
/// kernel tags name them).
pub const FLASHKDA_SUFFIX: &str = "K128 safe lbsigab l2 bsig h0";

/// The six shapes FlashKDA is compared on (issue 42), with [`FLASHKDA_OPTIONS`]: three single sequences, a batch
/// of four, and two varlen batches (8 x 1024 and six ragged lengths) at 96 heads.
pub fn flashkda_presets() -> Vec<Preset> {
    let with = |name: String, shape: Vec<(String, i64)>| {
        let dims: Vec<(String, i64)> =
            shape.into_iter().chain(FLASHKDA_OPTIONS.iter().map(|&(k, v)| (k.to_string(), v))).collect();
        Preset { name: format!("{name} {FLASHKDA_SUFFIX}"), dims: dims.into_iter().collect() }
    };
    let dense = |b: i64, t: i64, h: i64| {
        with(format!("B{b} T{t} H{h}"), vec![("B".into(), b), ("T".into(), t), ("H".into(), h)])
    };
    let varlen = |name: &str, lens: &[i64], h: i64| {
        let mut shape = vec![("N".to_string(), lens.len() as i64), ("H".to_string(), h)];
        shape.extend(lens.iter().enumerate().map(|(i, &l)| (format!("L{i}"), l)));
        with(format!("varlen {name} H{h}"), shape)
    };
    vec![
        dense(1, 8192, 96),
        dense(1, 65536, 32),
        dense(1, 8192, 64),
        dense(4, 4096, 64),
        varlen("8x1024", &[1024; 8], 96),
        varlen("[1300,547,2048,963,271,3063]", &[1300, 547, 2048, 963, 271, 3063], 96),
    ]
}

/// Chunked KDA forward (`kda`).
pub struct Kda;

struct KdaInstance {
    pb: KdaProblem,
    d: KdaData,
    seed: u64,
}

impl Operator for Kda {
    fn name(&self) -> &'static str {
        "kda"
    }
    /// The plain intra kernels (no in-kernel gate, norm or beta options: `_pre_c` in the name) with the
    /// pair-swizzled G~ buffer (`GSWZ=pairs`, the default: `_gp`) and W/U regrouped into 8-byte stores spill 8
    /// (exact path) to 16 bytes (safe path) under their 80-register cap, and are the fastest measured (H200,
    /// 2026-12-04, same runs as FLA: B1 T8192 H96 1.545 ms vs 1.577 with the other swizzle and 1.608 with pair stores, see
    /// [`intra`]). Every other kda kernel: none.
    fn known_spill_bytes(&self, kernel: &Kernel) -> u32 {
        // The plain intra kernels with `GSWZ=pairs`: 16 bytes (measured fastest). The intra kernels with the
        // in-kernel L2 norm: 8 bytes under the 80-register cap of the slim layout since the norms are one warp a
        // row (measured faster with the spill: H100, 2026-12-06, intra kernel 1.39 -> 1.27 ms at B1 T8192 H96 with
        // every in-kernel option).
        let n = &kernel.name;
        let intra = n.starts_with("k3k_kda_intra_");
        if intra && n.contains("_pre_c") && n.ends_with("_gp") {
            16
        } else if intra && n.contains("_l2_") {
            8
        } else {
            0
        }
    }
    fn summary(&self) -> &'static str {
        "chunked Kimi Delta Attention forward (safe-gate and exact diagonal tiles, varlen, GVA, h0, in-kernel l2norm/gates/beta sigmoid)"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn plan_knobs(&self) -> KnobSpace {
        let parts = std::iter::once(0i64).chain(TSPLIT_VALUES.iter().map(|&t| t as i64));
        KnobSpace::default().axis("TSPLIT", "time parts of each sequence's chunk loop (0: automatic)", parts)
    }
    fn bench_presets(&self) -> Vec<Preset> {
        let p = |name: &str, b: i64, t: i64, h: i64, safe: i64| {
            Preset::new(name, &[("B", b), ("T", t), ("H", h), ("K", 128), ("V", 128), ("safe", safe)])
        };
        let mut v = vec![
            p("B1 T8192 H96 K128 safe", 1, 8192, 96, 1),
            p("B1 T65536 H32 K128 safe", 1, 65536, 32, 1),
            p("B1 T16384 H32 K128 safe", 1, 16384, 32, 1),
            p("B1 T16384 H32 K128 exact", 1, 16384, 32, 0),
            p("B4 T4096 H64 K128 safe", 4, 4096, 64, 1),
        ];
        v.extend(flashkda_presets());
        v
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        const T_EDGE: [i64; 7] = [1, 15, 17, 63, 64, 65, 130];
        let safe = rng.random_bool(0.5);
        // Small head dims keep the interpreter fast; K = V = 128 now and then with a tiny T.
        let big = rng.random_bool(0.1);
        let (dk, dv) =
            if big { (128, 128) } else { ([32i64, 64][rng.random_range(0..2)], [32i64, 64][rng.random_range(0..2)]) };
        let h = rng.random_range(1..=2i64);
        let hv = h * [1i64, 2][rng.random_range(0..2)];
        let mut dims: Vec<(String, i64)> =
            vec![("H".into(), h), ("HV".into(), hv), ("K".into(), dk), ("V".into(), dv), ("safe".into(), safe as i64)];
        let mut desc = String::new();
        if rng.random_bool(0.3) {
            let n = rng.random_range(1..=4i64);
            dims.push(("N".into(), n));
            for i in 0..n {
                let l = [0i64, 1, 15, 63, 17, 65][rng.random_range(0..6)];
                dims.push((format!("L{i}"), if big { l.min(17) } else { l }));
                desc.push_str(&format!("{l},"));
            }
        } else {
            let t = if big { [1i64, 17][rng.random_range(0..2)] } else { T_EDGE[rng.random_range(0..T_EDGE.len())] };
            dims.push(("B".into(), if t <= 65 { rng.random_range(1..=2) } else { 1 }));
            dims.push(("T".into(), t));
            desc = format!("T{t}");
        }
        let gate = if safe { [0i64, 0, 1, 3][rng.random_range(0..4)] } else { [0i64, 0, 2, 3][rng.random_range(0..4)] };
        dims.push(("gate".into(), gate));
        dims.push(("bias".into(), rng.random_bool(0.5) as i64));
        dims.push(("l2norm".into(), rng.random_bool(0.3) as i64));
        dims.push(("bsig".into(), rng.random_bool(0.3) as i64));
        dims.push(("h0".into(), rng.random_bool(0.5) as i64));
        dims.push(("extreme".into(), (!safe && gate == 0 && rng.random_bool(0.5)) as i64));
        Preset {
            name: format!("kda [{desc}] H{h} HV{hv} K{dk} V{dv} {}", if safe { "safe" } else { "exact" }),
            dims: dims.into_iter().collect(),
        }
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(self.name(), DIMS, p)?;
        dims::bound(self.name(), p, kda_footprint(p, false))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = KdaProblem::from_preset(p)?;
        let d = KdaData::generate(&pb, seed);
        Ok(Box::new(KdaInstance { pb, d, seed }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = KdaProblem::from_preset(p)?;
        let l = Launch::resolve(knobs, &pb)?;
        let (a, b) = chunk_kernels(&pb, &l)?;
        let mut ks = vec![a, b];
        // A split plan without h0 also runs the state pass from a given state (every part after the first).
        let nch = pb.chunk_tables(l.chunk as usize).0.len() / 2;
        if !pb.h0 && time_parts(nch, l.tsplit).len() > 1 {
            ks.push(state_kernel(&KdaSpec { h0: true, ..pb.spec() }, &l)?);
        }
        Ok(ks)
    }
    fn bucket_dims(&self, p: &Preset) -> Vec<(String, u64)> {
        match KdaProblem::from_preset(p) {
            Ok(pb) => vec![
                ("tokens_per_seq".into(), (pb.tokens() / pb.num_seqs().max(1)) as u64),
                ("heads".into(), (pb.num_seqs() * pb.hv) as u64),
                ("K".into(), pb.dk as u64),
                ("V".into(), pb.dv as u64),
                ("safe".into(), pb.safe as u64),
            ],
            Err(_) => vec![],
        }
    }
}

impl Instance for KdaInstance {
    fn describe(&self) -> String {
        format!("{} seed={}", self.pb.describe(), self.seed)
    }
    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        chunk_plan(&self.pb, &self.d, knobs)
    }
    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let (pairs, scope) = check_scope(&self.pb, self.seed);
        check_pairs(&self.pb, &self.d, out, &pairs, scope)
    }
    fn work(&self) -> Work {
        let pb = &self.pb;
        let (tt, h, hv, dk, dv, n) =
            (pb.tokens() as f64, pb.h as f64, pb.hv as f64, pb.dk as f64, pb.dv as f64, pb.num_seqs() as f64);
        // The paper's count per head (Eq. 13, chunk 64), as the anchor script uses it.
        let flops = hv * tt * (6.0 * dk * dv + 3.0 * 64.0 * dk + 64.0 * 64.0);
        let state = n * hv * dk * dv * 4.0;
        let bytes = 2.0 * tt * h * dk * 2.0
            + tt * hv * dv * 2.0
            + tt * hv * dk * 4.0
            + tt * hv * 2.0
            + if pb.h0 { state } else { 0.0 }
            + tt * hv * dv * 2.0
            + state;
        Work { flops, bytes }
    }
    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        let cu: Option<Vec<usize>> = pb.lens.as_ref().map(|_| {
            let mut cu = vec![0];
            cu.extend(pb.seqs().iter().map(|s| s.1));
            cu
        });
        serde_json::json!({
            "B": pb.b, "T": pb.t, "H": pb.h, "HV": pb.hv, "K": pb.dk, "V": pb.dv,
            "cu_seqlens": cu, "safe": pb.safe, "lower_bound": LOWER_BOUND, "gate": pb.gate.name(),
            "gate_bias": pb.gate.has_bias(), "gate_a_log": pb.gate.has_a_log(), "l2norm": pb.l2norm,
            "beta_sigmoid": pb.beta_sigmoid, "h0": pb.h0, "output_final_state": true, "scale": pb.scale(),
        })
    }
}

pub use decode::KdaDecode;

#[cfg(test)]
mod tests {
    use super::*;

    /// The six FlashKDA comparison presets: their shapes (tokens, sequences, heads, varlen lengths) and every
    /// option of issue 42 (the scaled safe gate with its bias, L2 norm, beta sigmoid, h0), as the peer reads them
    /// from `problem()`.
    #[test]
    fn kda_flashkda_presets_resolve() {
        let op = Kda;
        let all = op.bench_presets();
        let fk: Vec<_> = all.iter().filter(|p| p.name.ends_with(FLASHKDA_SUFFIX)).collect();
        assert_eq!(fk.len(), 6, "{:?}", all.iter().map(|p| &p.name).collect::<Vec<_>>());
        let want = [(8192, 1, 96), (65536, 1, 32), (8192, 1, 64), (16384, 4, 64), (8192, 8, 96), (8192, 6, 96)];
        for (p, (tokens, seqs, heads)) in fk.iter().zip(want) {
            op.check_dims(p).unwrap_or_else(|e| panic!("{}: {e}", p.name));
            let pb = KdaProblem::from_preset(p).unwrap();
            assert_eq!((pb.tokens(), pb.num_seqs(), pb.hv, pb.h), (tokens, seqs, heads, heads), "{}", p.name);
            assert_eq!((pb.dk, pb.dv, pb.safe), (128, 128, true), "{}", p.name);
            assert_eq!(pb.gate, GateForm::Safe { bias: true, a_log: true }, "{}", p.name);
            assert!(pb.l2norm && pb.beta_sigmoid && pb.h0 && !pb.extreme, "{}", p.name);
        }
        let ragged = KdaProblem::from_preset(fk[5]).unwrap();
        assert_eq!(ragged.lens.as_deref(), Some(&[1300, 547, 2048, 963, 271, 3063][..]));
        let inst = op
            .instance(
                &Preset::new(
                    "small",
                    &[("N", 2), ("L0", 5), ("L1", 7), ("H", 2)].into_iter().chain(FLASHKDA_OPTIONS).collect::<Vec<_>>(),
                ),
                1,
            )
            .unwrap();
        let j = inst.problem();
        assert_eq!(j["cu_seqlens"], serde_json::json!([0, 5, 12]));
        assert_eq!(
            (j["gate"].as_str(), j["gate_bias"].as_bool(), j["gate_a_log"].as_bool()),
            (Some("lbsigab"), Some(true), Some(true))
        );
        assert_eq!(
            (j["l2norm"].as_bool(), j["beta_sigmoid"].as_bool(), j["h0"].as_bool()),
            (Some(true), Some(true), Some(true))
        );
    }
}
