//! The prefill knobs, declared once ([`PrefillKnobs`]: each knob's meaning, the knob space, the default record
//! and what a record written before a knob existed means), and the mma.sync and wgmma knob sets.

use super::*;

knob_enum! {
    /// `QORDER` (causal only): how the block index maps to (q-tile, head).
    pub enum QOrder: str {
        /// Each head's q-tiles from the last (longest) to the first, head after head.
        Head = "head",
        /// All the q-tiles of a group of `HGROUP` heads longest first with the heads innermost (FA3's LPT
        /// schedule), so the last wave holds only short tiles.
        Lpt = "lpt",
    }
}

knob_enum! {
    /// `LOAD`: how the Q tile and the K/V ring reach shared memory (see [`PrefillKnobs::load`]).
    pub enum PrefillLoad: str {
        /// Every thread copies 16-byte chunks (commit groups and a block barrier per KV tile).
        CpAsync = "cp_async",
        /// Thread 0 issues bulk tensor copies completing on per-slot mbarriers (MMA=wgmma only).
        Tma = "tma",
        /// `tma` for MMA=wgmma with at most two consumer warpgroups (BM <= 128), else `cp_async`.
        Auto = "auto",
    }
}

knob_enum! {
    /// `PRODUCER`: who issues the TMA kernel's Q, K and V copies (see [`PrefillKnobs::producer`]).
    pub enum Producer: str {
        /// Thread 0, in the consumers' loop.
        Thread = "thread",
        /// A dedicated producer warpgroup ([`Stmt::Producer`]).
        Warp = "warp",
    }
}

/// The knob name of [`PrefillKnobs::load`].
pub const PREFILL_LOAD_KNOB: &str = "LOAD";
/// The knob name of [`PrefillKnobs::producer`].
pub const PREFILL_PRODUCER_KNOB: &str = "PRODUCER";
/// The knob name of [`PrefillKnobs::persist`].
pub const PREFILL_PERSIST_KNOB: &str = "PERSIST";
/// The knob name of [`PrefillKnobs::pingpong`].
pub const PREFILL_PINGPONG_KNOB: &str = "PINGPONG";

knob_set! {
    /// The prefill knobs, read from a record by [`PrefillKnobs::from_knobs`]: the tuning space
    /// ([`prefill_knob_space`]), the default record ([`prefill_default_knobs`]) and the meaning of a knob a record
    /// leaves out (`absent`: records written before it existed) come from this one declaration. One declaration
    /// for both tensor-core paths: `MMA` is an axis of the one space and one record, and all the other knobs but
    /// the wgmma-only ones (which the checks of [`PrefillCfg`] refuse elsewhere) mean the same on both.
    ///
    /// The default record is the wgmma kernel ([`prefill_wgmma_knobs`] with the overlapped schedule, 0 spills at
    /// 192 registers; 4.97 ms causal T = 8192 H = 96 on an H200 against 8.73 for the mma.sync kernel, whose knobs
    /// are [`prefill_sync_knobs`]) with the causal blocks per head (`QORDER=head`: on the H200, 2026-12-01, same
    /// run, it measured 4.933 ms at T8192 H96 and 9.229 at T32768 H12 against 4.977 / 9.300 for the LPT order,
    /// which stays in the knob space).
    pub struct PrefillKnobs for "gated_mla_prefill" {
        /// `MMA` (absent: `sync`): the tensor-core path. `sync` is the FlashAttention-2 style kernel on
        /// `mma.sync` (`WM` warps, each owning `BM / WM` query rows), `wgmma` the FlashAttention-3 style kernel on
        /// the Hopper warpgroup instructions: `BM / 64` warpgroups each owning 64 query rows (so `WM = BM / 16`),
        /// `S = Q K^T` from shared memory, `O += P V` with P in registers and V read N-contiguous.
        mma: Mma = "MMA" => {
            axis: "tensor-core instructions (mma.sync or warpgroup wgmma)" [Mma::Sync, Mma::Wgmma],
            default: Mma::Wgmma,
            absent: Mma::Sync,
        },
        /// `BM`: query rows per block.
        bm: u32 = "BM" => { axis: "query rows per block" [64, 128], default: 128, },
        /// `BN`: keys per pipeline stage.
        bn: u32 = "BN" => { axis: "keys per pipeline stage" [32, 64, 128], default: 128, },
        /// `WM`: warps (each owns `BM / WM` query rows; wgmma: `BM / 16`).
        wm: u32 = "WM" => { axis: "warps (each owns BM/WM query rows; wgmma: BM/16)" [4, 8], default: 8, },
        /// `STAGES`: the depth of the K/V ring.
        stages: u32 = "STAGES" => { axis: "cp.async depth of the K/V ring" [2, 3], default: 2, },
        /// `QK_UNROLL`: unroll the loop over the 64-column chunks of the score product.
        qk_unroll: bool = "QK_UNROLL" => {
            axis: "unroll the loop over the 64-column chunks of the score product" [true, false],
            default: true,
        },
        /// `OVERLAP` (wgmma only; absent: false): issue the product `P V` of the previous KV tile together with
        /// the next score product and run the softmax while it is in flight (the V ring then runs one tile behind
        /// the K ring).
        overlap: bool = "OVERLAP" => {
            axis: "wgmma: run the softmax while the previous tile's P V product is in flight" [false, true],
            default: true,
            absent: false,
        },
        /// `QORDER` (causal only; absent: `head`): the block order, see [`QOrder`].
        qorder: QOrder = "QORDER" => {
            axis: "causal block order: per head, or longest tiles first over L2-sized head groups"
                [QOrder::Head, QOrder::Lpt],
            default: QOrder::Head,
            absent: QOrder::Head,
        },
        /// `SOFTMAX` (absent: `exact`): `fast` runs the online softmax on the raw scores: the row max is taken
        /// before scaling (the scale is positive), the scale folds into the exponent (`exp2(s * tau log2 e - m *
        /// tau log2 e)`, one fused multiply-add), unmasked tiles pay no scaling pass, and the exponentials are
        /// `exp2_ftz` (one MUFU.EX2, weights below 2^-126 flushed to 0, where `exp2` adds a range test and two
        /// predicated multiplies). `fast` in the defaults: measured on the H200 (2026-12-01, same run): causal
        /// T8192 H96 4.825 ms against 4.983 exact, T32768 H12 8.797 against 9.057 (SMGUARD=true was slower on
        /// both: 5.028 / 9.162).
        softmax: Softmax = "SOFTMAX" => {
            axis: "online softmax: scaled scores and exp2, or raw-score max with the scale in exp2_ftz"
                [Softmax::Exact, Softmax::Fast],
            default: Softmax::Fast,
            absent: Softmax::Exact,
        },
        /// `SMGUARD` (`OVERLAP` only; absent: false): wraps each tile's softmax statistics and exponentials in an
        /// always-true guard (`kv0 < n_end`, which holds for every tile of the loop): ptxas schedules the wait for
        /// the previous tile's `P V` at the top of the basic block that holds it, which without the guard is the
        /// block of the softmax itself (so the softmax ran after `P V`; SASS of the default:
        /// `WARPGROUP.DEPBAR.LE gsb0, 0x0` before the first row max), and with it is the block after the softmax,
        /// so the exponentials run while `P V` is in flight.
        smguard: bool = "SMGUARD" => {
            axis: "OVERLAP: the softmax in its own basic block, so that the P V wait stays after it" [false, true],
            absent: false,
        },
        /// `PINGPONG` (absent: false; `OVERLAP` with two or more consumer warpgroups): the warpgroups issue each
        /// tile's products (`S = Q K^T` and the previous tile's `O += P V`) in turn ([`Stmt::InTurn`],
        /// FlashAttention-3's ping-pong schedule), so that one warpgroup's products run on the tensor cores while
        /// the other runs its softmax. The first KV tile is peeled off the loop (its turn holds the score product
        /// only). In the defaults since 2026-12-04 (H200, same run against the earlier defaults of that day:
        /// causal T8192 H96 3.7363 ms vs 3.9565, T32768 H12 6.5232 vs 6.9020; with the thread-0 producer 4.1346
        /// vs 4.2651; `lab/2026-12-04/1437-h200-run/`). An error where it cannot apply (knob sets that change
        /// `OVERLAP` or `WM` from the defaults say `PINGPONG=false`).
        pingpong: bool = PREFILL_PINGPONG_KNOB => {
            axis: "OVERLAP: the warpgroups issue their products in turn (ping-pong), one's softmax under the other's \
             products"
                [false, true],
            default: true,
            absent: false,
        },
        /// `LOAD` (absent: `cp_async`; `auto` in the defaults, accepted but not an axis: it would duplicate
        /// points): how the Q tile and the K/V ring reach shared memory. `tma` (MMA=wgmma only) has thread 0
        /// issue one bulk tensor copy per 64-column chunk (boxes `[64, 1, BM or BN]` over `[d, H, T or S]`,
        /// landing 128-byte-swizzled exactly as the wgmma descriptors read them) completing on a full mbarrier
        /// per ring slot (separate ones for K and V, so the overlapped schedule's V ring can run one tile behind);
        /// every thread arrives on the slot's empty mbarrier once the product that read it has completed, and
        /// thread 0 waits for that before refilling the slot (no block barrier in the KV loop). Rows past a
        /// sequence's end are loaded from the next sequence (or read as zero past the tensor) and masked exactly
        /// like the zero rows of the cp.async path. `auto` is `tma` for MMA=wgmma with at most two consumer
        /// warpgroups (BM <= 128; every such shape qualifies: the rows are 384/256 bytes, the boxes at most 256
        /// rows) and `cp_async` for MMA=sync (whose V tile has 256-byte rows) and for BM=192 (whose TMA kernel
        /// spills under the 168-register cap). `auto` from the H200 (2026-12-01, same run): T8192 H96 4.486 ms
        /// against 4.812 with cp.async, T32768 H12 7.912 against 8.663 (BN=64 STAGES=3 with TMA: 6.474 /
        /// 11.818).
        load: PrefillLoad = PREFILL_LOAD_KNOB => {
            axis: "wgmma: Q/K/V tiles by cp.async (every thread, commit groups and a block barrier per KV tile) or by \
             TMA (thread 0 issues bulk tensor copies completing on per-slot mbarriers)"
                [PrefillLoad::CpAsync, PrefillLoad::Tma],
            default: PrefillLoad::Auto,
            absent: PrefillLoad::CpAsync,
        },
        /// `HGROUP` (absent: 0; not an axis): the LPT head group size of `QORDER=lpt`, 0 meaning as many heads as
        /// keep 32 MB of K/V.
        hgroup: u32 = "HGROUP" => { absent: 0, },
        /// `PRODUCER` (absent: `thread`; not an axis: on the cp.async points, half of the space, it would
        /// duplicate kernels), for the TMA kernel of at most two consumer warpgroups (ignored elsewhere: cp.async,
        /// BM=192): who issues the Q, K and V copies. `thread`: thread 0, in the consumers' loop (its warp waits
        /// there for a slot's release). `warp`: a dedicated producer warpgroup (warp specialization,
        /// [`Stmt::Producer`]) that runs the same loads ahead of the consumers as far as the empty barriers let
        /// it. `warp` in the defaults since 2026-12-04 (H200, same run: causal T8192 H96 3.9859 ms vs 4.3065,
        /// T32768 H12 6.9094 vs 7.5580; `lab/2026-12-04/1309-h200-run/`).
        producer: Producer = PREFILL_PRODUCER_KNOB => { default: Producer::Warp, absent: Producer::Thread, },
        /// `PERSIST` (absent: false; not an axis): a persistent grid of one block per SM (`NUM_SMS`) that walks
        /// the (q-tile, head) items head after head, each head's longest q-tile paired with its shortest, a pair
        /// per step, `gridDim.x` pairs apart, instead of one block per item. The K / V ring and its barrier phases
        /// run on across items, so the producer warpgroup loads the next item's first K / V tiles while the
        /// consumers finish the current one, and its Q tile (a `q_empty` barrier, released once the item's last
        /// score product is complete) during the current item's last softmax, P V product and epilogue, which
        /// reads the gate straight from global memory (the Q buffer may already hold the next item's tile). For
        /// the overlapped wgmma kernel with `LOAD=tma`, `PRODUCER=warp` and `QORDER=head` (an error elsewhere);
        /// varlen problems keep one block per item.
        ///
        /// Measured slower, so neither a default nor an axis: on the H200 (2026-12-04, same run against the
        /// defaults) causal T8192 H96 3.9228 ms vs 3.6674, T32768 H12 7.1403 vs 6.3995 (a plain round robin over
        /// the longest-first order was 17% / 32% slower, an earlier run that day). The static walk leaves about
        /// 3% imbalance by the arithmetic, and ncu (that day) counted some 10% more instructions issued for the
        /// same work; where the rest goes is not known. Kept as the base of a dynamic item scheduler (an atomic
        /// item counter, as in FA3), which needs the item index handed from the producer to the consumers through
        /// shared memory.
        persist: bool = PREFILL_PERSIST_KNOB => { absent: false, },
    }
}

/// The prefill tuning knobs (see [`PrefillKnobs`]).
pub fn prefill_knob_space() -> KnobSpace {
    PrefillKnobs::space()
}

/// The prefill knobs used when no tuning record exists (see [`PrefillKnobs`]).
pub fn prefill_default_knobs() -> Knobs {
    PrefillKnobs::defaults()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_record_is_the_one_written_out_before_the_declaration() {
        // The default record as it was written out until 2026-12-07 (the kernel names and tuning keys depend on it).
        let written = prefill_wgmma_knobs()
            .with("OVERLAP", true)
            .with("QORDER", "head")
            .with("SOFTMAX", "fast")
            .with("LOAD", "auto")
            .with("PRODUCER", "warp")
            .with("PINGPONG", true);
        assert_eq!(prefill_default_knobs(), written);
        let t = PrefillKnobs::from_knobs(&written).unwrap();
        assert_eq!((t.mma, t.bm, t.bn, t.wm, t.stages, t.qk_unroll), (Mma::Wgmma, 128, 128, 8, 2, true));
        assert_eq!((t.overlap, t.qorder, t.softmax, t.load), (true, QOrder::Head, Softmax::Fast, PrefillLoad::Auto));
        assert_eq!((t.producer, t.pingpong, t.smguard, t.hgroup, t.persist), (Producer::Warp, true, false, 0, false));
        let space = prefill_knob_space();
        let names: Vec<&str> = space.axes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, &PrefillKnobs::NAMES[..12], "the axes are the declaration's first twelve knobs");
    }

    #[test]
    fn records_older_than_a_knob_keep_their_meaning() {
        let mut old = prefill_sync_knobs();
        old.0.remove("MMA");
        old.0.remove("OVERLAP");
        let t = PrefillKnobs::from_knobs(&old).unwrap();
        assert_eq!(
            (t.mma, t.overlap, t.qorder, t.softmax, t.smguard),
            (Mma::Sync, false, QOrder::Head, Softmax::Exact, false)
        );
        assert_eq!(
            (t.load, t.producer, t.pingpong, t.persist, t.hgroup),
            (PrefillLoad::CpAsync, Producer::Thread, false, false, 0)
        );
        // The tile knobs have no legacy meaning.
        let mut no_bm = old;
        no_bm.0.remove("BM");
        let e = PrefillKnobs::from_knobs(&no_bm).unwrap_err().to_string();
        assert!(e.contains("`BM` is missing"), "{e}");
    }

    #[test]
    fn bad_values_name_the_knob_and_the_values_it_takes() {
        let e = |k: Knobs| build_prefill(&PrefillSpec::new(true, true, false), &k).unwrap_err().to_string();
        let d = prefill_default_knobs();
        let msg = e(d.clone().with(PREFILL_LOAD_KNOB, "dma"));
        assert!(msg.ends_with("LOAD must be cp_async, tma or auto, got dma"), "{msg}");
        let msg = e(d.clone().with("QORDER", "rows"));
        assert!(msg.ends_with("QORDER must be head or lpt, got rows"), "{msg}");
        let msg = e(d.clone().with(PREFILL_PRODUCER_KNOB, "block"));
        assert!(msg.ends_with("PRODUCER must be thread or warp, got block"), "{msg}");
        let msg = e(d.clone().with("MMA", "tensor"));
        assert!(msg.ends_with("MMA must be sync or wgmma, got tensor"), "{msg}");
        // A value of the wrong kind is the record's error, naming the knob and the kind expected.
        let msg = e(d.with("OVERLAP", 1i64));
        assert!(msg.contains("`OVERLAP` has value `1`, expected true or false"), "{msg}");
    }
}
