//! The prefill knob space, its named knobs and the default, mma.sync and wgmma knob sets.

use super::*;

/// The prefill tuning knobs.
///
/// `MMA` picks the tensor-core path: `sync` is the FlashAttention-2 style kernel on `mma.sync` (`WM` warps,
/// each owning `BM / WM` query rows), `wgmma` the FlashAttention-3 style kernel on the Hopper warpgroup
/// instructions: `BM / 64` warpgroups each owning 64 query rows (so `WM = BM / 16`), `S = Q K^T` from
/// shared memory, `O += P V` with P in registers and V read N-contiguous. `OVERLAP` (wgmma only) issues the
/// product `P V` of the previous KV tile together with the next score product and runs the softmax while it
/// is in flight (the V ring then runs one tile behind the K ring). `QORDER` (causal only) maps the block
/// index to (q-tile, head): `head` walks each head's q-tiles from the last (longest) to the first, head after
/// head; `lpt` walks all the q-tiles of a group of `HGROUP` heads longest first with the heads innermost
/// (FA3's LPT schedule), so the last wave holds only short tiles; `HGROUP` (optional, default 0) is the group
/// size, 0 meaning as many heads as keep 32 MB of K/V. `SOFTMAX=fast` (optional, default `exact`) runs the
/// online softmax on the raw scores: the row max is taken before scaling (the scale is positive), the scale
/// folds into the exponent (`exp2(s * tau log2 e - m * tau log2 e)`, one fused multiply-add), unmasked tiles
/// pay no scaling pass, and the exponentials are `exp2_ftz` (one MUFU.EX2, weights below 2^-126 flushed to 0,
/// where `exp2` adds a range test and two predicated multiplies). Knob sets without `MMA` / `OVERLAP` /
/// `QORDER` / `SOFTMAX` mean `sync` / false / `head` / `exact`. `SMGUARD=true` (`OVERLAP` only; optional, default
/// false) wraps each tile's softmax statistics and exponentials in an always-true guard (`kv0 < n_end`, which
/// holds for every tile of the loop): ptxas schedules the wait for the previous tile's `P V` at the top of the
/// basic block that holds it, which without the guard is the block of the softmax itself (so the softmax ran
/// after `P V`; SASS of the default: `WARPGROUP.DEPBAR.LE gsb0, 0x0` before the first row max), and with it is
/// the block after the softmax, so the exponentials run while `P V` is in flight.
pub fn prefill_knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("MMA", "tensor-core instructions (mma.sync or warpgroup wgmma)", ["sync", "wgmma"])
        .axis("BM", "query rows per block", [64i64, 128])
        .axis("BN", "keys per pipeline stage", [32i64, 64, 128])
        .axis("WM", "warps (each owns BM/WM query rows; wgmma: BM/16)", [4i64, 8])
        .axis("STAGES", "cp.async depth of the K/V ring", [2i64, 3])
        .axis("QK_UNROLL", "unroll the loop over the 64-column chunks of the score product", [true, false])
        .axis("OVERLAP", "wgmma: run the softmax while the previous tile's P V product is in flight", [false, true])
        .axis(
            "QORDER",
            "causal block order: per head, or longest tiles first over L2-sized head groups",
            ["head", "lpt"],
        )
        .axis(
            "SOFTMAX",
            "online softmax: scaled scores and exp2, or raw-score max with the scale in exp2_ftz",
            ["exact", "fast"],
        )
        .axis(
            "SMGUARD",
            "OVERLAP: the softmax in its own basic block, so that the P V wait stays after it",
            [false, true],
        )
        .axis(
            PREFILL_PINGPONG_KNOB,
            "OVERLAP: the warpgroups issue their products in turn (ping-pong), one's softmax under the other's \
             products",
            [false, true],
        )
        .axis(
            PREFILL_LOAD_KNOB,
            "wgmma: Q/K/V tiles by cp.async (every thread, commit groups and a block barrier per KV tile) or by TMA \
             (thread 0 issues bulk tensor copies completing on per-slot mbarriers)",
            ["cp_async", "tma"],
        )
}

/// The prefill knob `LOAD` (`cp_async` | `tma` | `auto`; absent = `cp_async`): how the Q tile and the K/V
/// ring reach shared memory. `tma` (MMA=wgmma only) has thread 0 issue one bulk tensor copy per 64-column
/// chunk (boxes `[64, 1, BM or BN]` over `[d, H, T or S]`, landing 128-byte-swizzled exactly as the wgmma
/// descriptors read them) completing on a full mbarrier per ring slot (separate ones for K and V, so the
/// overlapped schedule's V ring can run one tile behind); every thread arrives on the slot's empty mbarrier
/// once the product that read it has completed, and thread 0 waits for that before refilling the slot (no
/// block barrier in the KV loop). Rows past a sequence's end are loaded from the next sequence (or read as zero
/// past the tensor) and masked exactly like the zero rows of the cp.async path. `auto` (the default) is `tma`
/// for MMA=wgmma with at most two consumer warpgroups (BM <= 128; every such shape qualifies: the rows are
/// 384/256 bytes, the boxes at most 256 rows) and `cp_async` for MMA=sync (whose V tile has 256-byte rows) and
/// for BM=192 (whose TMA kernel spills under the 168-register cap); it is accepted but not an axis of
/// [`prefill_knob_space`] (it would duplicate points).
pub const PREFILL_LOAD_KNOB: &str = "LOAD";

/// The prefill knob `PRODUCER` (`thread` | `warp`; absent = `thread`), for the TMA kernel of at most two consumer
/// warpgroups (ignored elsewhere: cp.async, BM=192); `warp` in [`prefill_default_knobs`] since 2026-12-04 (H200, same
/// run: causal T8192 H96 3.9859 ms vs 4.3065, T32768 H12 6.9094 vs 7.5580; `lab/2026-12-04/
/// 1309-h200-run/`); not an axis of [`prefill_knob_space`] (on the cp.async points, half of the space, it would
/// duplicate kernels). Who issues the Q, K and V copies.
/// `thread`: thread 0, in the consumers' loop (its warp waits there for a slot's release). `warp`: a dedicated
/// producer warpgroup (warp specialization, [`Stmt::Producer`]) that runs the same loads ahead of the consumers as
/// far as the empty barriers let it.
pub const PREFILL_PRODUCER_KNOB: &str = "PRODUCER";

/// The prefill knob `PERSIST` (bool; absent = false): a persistent grid of one block per SM (`NUM_SMS`) that walks
/// the (q-tile, head) items head after head, each head's longest q-tile paired with its shortest, a pair per step,
/// `gridDim.x` pairs apart, instead of one block per item. The K / V ring and its barrier phases run on across items,
/// so the producer warpgroup loads the next item's first K / V tiles while the consumers finish the current one, and
/// its Q tile (a `q_empty` barrier, released once the item's last score product is complete) during the current
/// item's last softmax, P V product and epilogue, which reads the gate straight from global memory (the Q buffer may
/// already hold the next item's tile). For the overlapped wgmma kernel with `LOAD=tma`, `PRODUCER=warp` and
/// `QORDER=head` (an error elsewhere); varlen problems keep one block per item.
///
/// Measured slower, so neither a default nor an axis of [`prefill_knob_space`]: on the H200 (2026-12-04,
/// same run against the defaults) causal T8192 H96 3.9228 ms vs 3.6674, T32768 H12 7.1403 vs 6.3995 (a plain
/// round robin over the longest-first order was 17% / 32% slower, an earlier run that day). The static walk leaves about 3% imbalance
/// by the arithmetic, and ncu (that day) counted some 10% more instructions issued for the same work; where the rest
/// goes is not known. Kept as the base of a dynamic item scheduler (an atomic item counter, as in FA3), which needs
/// the item index handed from the producer to the consumers through shared memory.
pub const PREFILL_PERSIST_KNOB: &str = "PERSIST";

/// The prefill knob `PINGPONG` (bool; absent = false; `OVERLAP` with two or more consumer warpgroups): the
/// warpgroups issue each tile's products (`S = Q K^T` and the previous tile's `O += P V`) in turn
/// ([`Stmt::InTurn`], FlashAttention-3's ping-pong schedule), so that one warpgroup's products run on the tensor
/// cores while the other runs its softmax. The first KV tile is peeled off the loop (its turn holds the score
/// product only). In [`prefill_default_knobs`] since 2026-12-04 (H200, same run against the earlier defaults of
/// that day: causal T8192 H96 3.7363 ms vs 3.9565, T32768 H12 6.5232 vs 6.9020; with the thread-0 producer 4.1346 vs
/// 4.2651; `lab/2026-12-04/1437-h200-run/`). An error where it cannot apply (knob sets that change
/// `OVERLAP` or `WM` from the defaults say `PINGPONG=false`).
pub const PREFILL_PINGPONG_KNOB: &str = "PINGPONG";

/// The prefill knobs used when no tuning record exists: the wgmma kernel ([`prefill_wgmma_knobs`] with the
/// overlapped schedule, 0 spills at 192 registers; 4.97 ms causal T = 8192 H = 96 on an H200 against 8.73
/// for the mma.sync kernel, whose knobs are [`prefill_sync_knobs`]) with the causal blocks per head
/// (`QORDER=head`: on the H200, 2026-12-01, same run, it measured 4.933 ms at T8192 H96 and 9.229 at T32768 H12
/// against 4.977 / 9.300 for the LPT order, which stays in the knob space).
pub fn prefill_default_knobs() -> Knobs {
    // SOFTMAX=fast measured on the H200 (2026-12-01, same run): causal T8192 H96 4.825 ms against 4.983 exact,
    // T32768 H12 8.797 against 9.057 (SMGUARD=true was slower on both: 5.028 / 9.162).
    // LOAD=auto (TMA for the wgmma kernel) from the H200 (2026-12-01, same run): T8192 H96 4.486
    // ms against 4.812 with cp.async, T32768 H12 7.912 against 8.663 (BN=64 STAGES=3 with TMA: 6.474 / 11.818).
    prefill_wgmma_knobs()
        .with("OVERLAP", true)
        .with("QORDER", "head")
        .with("SOFTMAX", "fast")
        .with(PREFILL_LOAD_KNOB, "auto")
        .with(PREFILL_PRODUCER_KNOB, "warp")
        .with(PREFILL_PINGPONG_KNOB, true)
}

/// The mma.sync prefill knobs (the fastest mma.sync point of a first sweep on an H200: 218 TFLOP/s causal at
/// T = 8192, H = 96; BM = 64 with 4 warps was 202).
pub fn prefill_sync_knobs() -> Knobs {
    Knobs::new()
        .with("MMA", "sync")
        .with("BM", 128i64)
        .with("BN", 64i64)
        .with("WM", 8i64)
        .with("STAGES", 2i64)
        .with("QK_UNROLL", true)
        .with("OVERLAP", false)
}

/// The plain (not overlapped) wgmma prefill knobs: two consumer warpgroups of 64 query rows, 128-key tiles in
/// a 2-deep ring.
pub fn prefill_wgmma_knobs() -> Knobs {
    Knobs::new()
        .with("MMA", "wgmma")
        .with("BM", 128i64)
        .with("BN", 128i64)
        .with("WM", 8i64)
        .with("STAGES", 2i64)
        .with("QK_UNROLL", true)
        .with("OVERLAP", false)
}
