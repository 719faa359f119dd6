//! `kda` and `kda.decode`: the Kimi Delta Attention forward of SEMANTICS.md section 2.3 as IR tile programs.
//!
//! Layouts (time-major, row-major): `q, k: [B, T, H, K]` bf16, `v: [B, T, HV, V]` bf16, `g: [B, T, HV, K]` f32
//! (the log-decay, or the raw gate input for the in-kernel gate forms, which may also be bf16: dim `gbf16`), `beta: [B, T, HV]` bf16 (post-sigmoid,
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
//! 2026-12-07: `USTATE=1` (knob, not the default; issue 42) forms `U = (I + L)^-1 Diag(beta) v` in the state pass
//! instead of the intra kernel: the intra kernel no longer reads v and writes W with the U substitution's factors
//! (N_ii, the strictly lower blocks of L, beta: 1.6 KB instead of U's 8 KB per chunk and value head at K = V = 128),
//! and each state-pass block reads its value block of v and runs the same substitution (`state::StateBufs::form_u`),
//! bit for bit the same U on the CPU backends (`lab/2026-12-07/kda-ustate.md`).
//!
//! 2026-12-07: `SLOAD=tma` (knob, not the default; issue 42) runs the state pass of [`state_tma`]: the value blocks of
//! a (sequence, value head) pair form a thread-block cluster and W, Qbar, Kbar and gamma are copied once for it by TMA
//! multicast (L2 -> SM bytes a chunk and block 28.5 -> 10.1 KB at BV=32, V=128), U and P by `cp.async` as before; the
//! same bits as `SLOAD=cp` on the CPU backends (`lab/2026-12-07/kda-state-2.md`).
//!
//! Checks compare with `k3k_reference::kda::kda_recurrent` (f64) per (sequence, value head) pair: every pair for
//! small problems, a documented sample of pairs (first, last and seeded others; every o row and state element of
//! each) for the benchmark sizes, whose full f64 recurrence would take minutes on a CPU.
//!
//! Where each part lives: [`problem`] (the gate forms, [`KdaSpec`], the preset dims, [`KdaProblem`] with its
//! validation and chunk tables, the host gate check, the seeded inputs [`KdaData`]), [`knobs`] (the knobs declared
//! once in [`KdaKnobs`], resolved for a problem by [`Launch::resolve`]), [`plan`] (the kernels of a problem,
//! [`chunk_plan`] and the `TSPLIT` split plan), [`check`] (the comparison with the f64 recurrence), [`presets`]
//! (benchmark, FlashKDA and random presets), [`intra`] and [`state`] (the two chunked kernels; [`state_tma`] the
//! state pass with `SLOAD=tma`), [`decode`]
//! (`kda.decode`), [`varlen`]; this file holds the [`Operator`] impl of `kda`.

pub mod check;
pub mod decode;
pub mod intra;
pub mod knobs;
pub mod plan;
pub mod presets;
pub mod problem;
pub mod state;
pub mod state_tma;
pub mod varlen;

pub use check::*;
pub use knobs::*;
pub use plan::*;
pub use presets::*;
pub use problem::*;

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
        // The row-major maps (`IMAP=rows|ops|gate`, kernel names with `_rq`), measured faster with their spill
        // (H100, 2026-12-07: the intra kernel 0.909 -> 0.832 ms at the plain safe B1 T8192 H96, 1.107 -> 0.885 with
        // FlashKDA's options): 24 bytes of stack (20 spilled) on the plain safe path, 16 with the in-kernel options
        // (the partial-chunk copy with `IFOLD`; the full-chunk copy of the defaults 4).
        let n = &kernel.name;
        let intra = n.starts_with("k3k_kda_intra_");
        let rows = intra && n.contains("_rq");
        // (`_gp` then, at the name's end or before the `FULLC` / `GSIG` suffixes `_fc`, `_gsf`.)
        let plain_pairs = intra && n.contains("_pre_c") && (n.ends_with("_gp") || n.contains("_gp_"));
        if rows && n.contains("_pre_c") {
            24
        } else if (rows && n.contains("_l2_")) || plain_pairs {
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
        bench_presets()
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        random_case(rng)
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
        let g_bytes = if pb.g_bf16 { 2.0 } else { 4.0 };
        let bytes = 2.0 * tt * h * dk * 2.0
            + tt * hv * dv * 2.0
            + tt * hv * dk * g_bytes
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
            "gate_bias": pb.gate.has_bias(), "gate_a_log": pb.gate.has_a_log(),
            "g_dtype": if pb.g_bf16 { "bf16" } else { "f32" }, "l2norm": pb.l2norm,
            "beta_sigmoid": pb.beta_sigmoid, "h0": pb.h0, "output_final_state": true, "scale": pb.scale(),
        })
    }
}

pub use decode::KdaDecode;
