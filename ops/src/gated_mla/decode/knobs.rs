//! The decode knobs, declared once ([`DecodeKnobs`]: each knob's meaning, the knob space, the default record and
//! what a record written before a knob existed means), and the knob sets (wgmma, per row count).

use super::*;

knob_enum! {
    /// `SCORES`: who computes a block's score tile.
    pub enum Scores: str {
        /// Every warp column group computes the `[BM, BN]` scores of its rows itself.
        Replicated = "replicated",
        /// The score columns are split and exchanged through shared memory (see [`DecodeKnobs::scores`]).
        Shared = "shared",
    }
}

knob_enum! {
    /// An on / off knob the records write as the integer `0` or `1` (`BT_PREFETCH`, `QK_UNROLL`).
    pub enum Flag: u32 {
        Off = 0,
        On = 1,
    }
}

knob_enum! {
    /// `LOAD`: how the K/V ring is filled.
    pub enum RingLoad: str {
        /// Every thread copies 16-byte chunks (a wait and a block barrier per tile).
        CpAsync = "cp_async",
        /// Thread 0 issues one bulk tensor copy per 64-column chunk of a page, on per-slot full / empty mbarriers.
        Tma = "tma",
    }
}

knob_set! {
    /// The decode kernel's knobs (the split kernel and the direct one), read from a record by
    /// [`DecodeKnobs::from_knobs`]: the tuning space ([`decode_knob_space`]), the default record
    /// ([`decode_default_knobs`]) and the meaning of a knob a record leaves out (`absent`: records written before
    /// it existed) come from this one declaration. One declaration for both tensor-core paths: `MMA` is an axis
    /// of the one space and one record; the knobs of one path only are refused on the other by the checks of
    /// [`DecodeCfg`].
    ///
    /// The default record is [`decode_knobs_for_rows`]`(16)`, the mma.sync kernel (the plan maps it to the knobs
    /// for the problem's row count, see [`decode_plan_knobs`](crate::gated_mla::ops::decode_plan_knobs)).
    pub struct DecodeKnobs for "gated_mla_decode" {
        /// `BM`: packed (query, head) rows per block.
        bm: u32 = "BM" => { axis: "packed (query, head) rows per block" [16, 32, 48, 64], default: 16, },
        /// `BN`: keys per pipeline stage (divides the page).
        bn: u32 = "BN" => {
            axis: "keys per pipeline stage (divides the page; 16 only with replicated scores or \
             MMA=wgmma)"
                [16, 32, 64],
            default: 64,
        },
        /// `WM`: warp rows (the score tile is on `[WM, 1]` warps).
        wm: u32 = "WM" => { axis: "warp rows: the score tile is on [WM, 1] warps" [1, 2, 3, 4], default: 1, },
        /// `WN`: warp columns splitting the 512 value columns.
        wn: u32 = "WN" => { axis: "warp columns splitting the 512 value columns" [1, 2, 4], default: 4, },
        /// `STAGES`: the depth of the K/V ring.
        stages: u32 = "STAGES" => {
            axis: "cp.async depth of the KV ring (STAGES - 1 tiles in flight while one is used: 4 at BN = 32 keeps \
             three 37 KB tiles in flight in the shared memory of two 64-key stages)"
                [2, 3, 4],
            default: 2,
        },
        /// `SCORES`: who computes the score tile (see the axis text).
        scores: Scores = "SCORES" => {
            axis: "replicated: every warp column group computes the [BM, BN] scores of its rows itself; shared: the \
             WN groups split the score columns and exchange them through shared memory (MMA=wgmma, VWG=2: \
             warpgroup 0 alone computes the scores and the softmax and shares P and the row scale through shared \
             memory; both warpgroups multiply their value columns)"
                [Scores::Replicated, Scores::Shared],
            default: Scores::Shared,
        },
        /// `SWN` (absent: 0): with `SCORES=shared`, the warp column groups that split the score columns (0: all
        /// `WN`).
        swn: u32 = "SWN" => {
            axis: "SCORES=shared: warp column groups that split the score columns (0: all WN; fewer lets BN = 32 run \
             on 4 warps, each pair computing the same 16 columns, so that two blocks fit an SM)"
                [0, 2],
            default: 0,
            absent: 0,
        },
        /// `BT_PREFETCH` (absent: 0): read the block-table entry of the next tile one loop iteration early.
        bt_prefetch: Flag = "BT_PREFETCH" => {
            axis: "1: read the block-table entry of the next tile to load one loop iteration early (0: right before \
             its copies, which then wait for the load)"
                [Flag::Off, Flag::On],
            default: Flag::Off,
            absent: Flag::Off,
        },
        /// `QK_ACCS` (absent: 1): independent partial score accumulators of the score product.
        qk_accs: u32 = "QK_ACCS" => {
            axis: "independent partial score accumulators the 9 chunks of the 576-deep score product rotate over \
             (shorter tensor-core dependency chains; summed before the softmax)"
                [1, 3],
            default: 1,
            absent: 1,
        },
        /// `MMA` (absent: `sync`): the tensor-core path (see the axis text).
        mma: Mma = "MMA" => {
            axis: "sync: mma.sync on [WM, WN] warps (16-row warp tiles); wgmma: the Hopper warpgroup instructions, \
             BM / 64 warpgroups of 64 packed rows on [BM / 16, 1] warps (WN=1; SCORES=shared only with VWG=2), the \
             [BM, BN] scores and a DV / DVS value slice per block, K and V from the same shared stage"
                [Mma::Sync, Mma::Wgmma],
            default: Mma::Sync,
            absent: Mma::Sync,
        },
        /// `DVS` (absent: 1; MMA=wgmma): value-column splits, one block each.
        dvs: u32 = "DVS" => {
            axis: "MMA=wgmma: value-column splits, one block each (the grid's x covers m-tiles times DVS; every split \
             recomputes the scores of its rows): the accumulator is BM x DV / DVS"
                [1, 2, 4],
            default: 1,
            absent: 1,
        },
        /// `QK_UNROLL` (absent: 0; MMA=wgmma): unroll the 9 score products of a tile.
        qk_unroll: Flag = "QK_UNROLL" => {
            axis: "MMA=wgmma: 1 unrolls the 9 asynchronous score products of a tile (their shared-memory descriptors \
             become constants plus the slot offset); 0 keeps the loop rolled"
                [Flag::Off, Flag::On],
            default: Flag::Off,
            absent: Flag::Off,
        },
        /// `OVERLAP` (absent: false; MMA=wgmma): tile j's softmax under tile j-1's `P V` product.
        overlap: bool = "OVERLAP" => {
            axis: "MMA=wgmma: issue tile j's score product, then tile j-1's P V product, and run tile j's softmax \
             while P V is in flight (K and V share a stage, so the ring holds two tiles in use and loads STAGES - 2 \
             ahead: STAGES >= 3); with SCORES=shared, every warpgroup's tile j-1 P V runs under warpgroup 0's tile j \
             softmax"
                [false, true],
            absent: false,
        },
        /// `VWG` (absent: 1; MMA=wgmma, BM=64): warpgroups per block sharing its Q tile and K/V stages.
        vwg: u32 = "VWG" => {
            axis: "MMA=wgmma, BM=64: warpgroups per block sharing its Q tile and K/V stages; each computes the scores \
             and 32 of every 64 value columns (DVS=1 at VWG=2 holds all 512 columns in 128 registers per thread)"
                [1, 2],
            absent: 1,
        },
        /// `SOFTMAX` (absent: `exact`; MMA=wgmma): how the online softmax scales the scores.
        softmax: Softmax = "SOFTMAX" => {
            axis: "MMA=wgmma: exact (scores scaled, then exp2) or fast (max of the raw scores, the scale folded into \
             one fused multiply-add per exponent, exp2_ftz)"
                [Softmax::Exact, Softmax::Fast],
            absent: Softmax::Exact,
        },
        /// `LOAD` (absent: `cp_async`): how the K/V ring is filled.
        load: RingLoad = "LOAD" => {
            axis: "the K/V ring by cp.async (every thread copies 16-byte chunks; a wait and a block barrier per tile) \
             or tma (thread 0 issues one bulk tensor copy per 64-column chunk of a page, on per-slot full / empty \
             mbarriers; MMA=wgmma: no block barrier, the warpgroups only meet where they exchange data)"
                [RingLoad::CpAsync, RingLoad::Tma],
            absent: RingLoad::CpAsync,
        },
    }
}

/// The decode tuning knobs (see [`DecodeKnobs`]).
pub fn decode_knob_space() -> KnobSpace {
    DecodeKnobs::space()
}

/// The wgmma decode knobs: one warpgroup of 64 packed rows per block, 64-key stages (72 KB each) in a 2-deep
/// ring beside the 72 KB Q tile, the value columns in `dvs` slices (128 accumulator registers per thread at
/// `dvs = 2`), the 9 score products unrolled (ptxas sm_90a: 238 registers, 0 spills at `dvs = 2`; the rolled
/// loop issues ~790 instructions per warp and tile for its 36 `wgmma`s, unrolled ~575).
pub fn decode_wgmma_knobs(dvs: i64) -> Knobs {
    Knobs::new()
        .with("MMA", "wgmma")
        .with("SCORES", "replicated")
        .with("BM", 64i64)
        .with("WM", 4i64)
        .with("WN", 1i64)
        .with("BN", 64i64)
        .with("STAGES", 2i64)
        .with("SWN", 0i64)
        .with("QK_ACCS", 1i64)
        .with("BT_PREFETCH", 0i64)
        .with("DVS", dvs)
        .with("QK_UNROLL", 1i64)
}

/// The decode knobs used when no tuning record exists: the defaults of [`DecodeKnobs`], which are
/// [`decode_knobs_for_rows`]`(16)`.
pub fn decode_default_knobs() -> Knobs {
    DecodeKnobs::defaults()
}

/// The automatic decode knobs for `rows = s_q * H` packed query rows per request ([`decode_auto_wgmma_knobs`]
/// from 64 rows, one full warpgroup m-tile; below that the mma.sync kernel, [`decode_sync_knobs_for_rows`] with
/// `MMA=sync` spelled out). 2026-12-01, same run, b128 S4096: 96 heads 0.727 ms on the wgmma kernel of that day
/// against 0.838 for the sync BM=32 knobs; 12 heads 0.394 ms wgmma against 0.239 sync (a 64-row tile holds 12
/// useful rows).
pub fn decode_knobs_for_rows(rows: usize) -> Knobs {
    if rows >= 64 {
        decode_auto_wgmma_knobs()
    } else {
        decode_sync_knobs_for_rows(rows).with("MMA", "sync").with("DVS", 1i64).with("QK_UNROLL", 0i64)
    }
}

/// The automatic wgmma decode knobs: two warpgroups per block sharing its Q tile and K/V ring (`VWG=2`, all 512
/// value columns in one block: `DVS=1`), warpgroup 0 alone computing the scores and the softmax and passing P and
/// the row scale through shared memory (`SCORES=shared`), the K/V ring by bulk tensor copies on mbarriers
/// (`LOAD=tma`, no block barrier per tile for the ring), the fast softmax and the score loop unrolled (no spills).
/// Measured on the H200 (2026-12-05, b128 S4096 H96, every set checked on the GPU in the same
/// run): same run, **0.351 ms** against 0.451 for the automatic knobs of 2026-12-04 (replicated scores, cp.async ring,
/// rolled); `SCORES=shared` alone 0.394 (rolled) / 0.391 (unrolled), `LOAD=tma` alone 0.450 / 0.406, both rolled
/// 0.376; 32-key stages 0.59-0.63 with or without `OVERLAP`. Torch's decode path 0.758 ms in the same call.
pub fn decode_auto_wgmma_knobs() -> Knobs {
    decode_wgmma_knobs(1)
        .with("VWG", 2i64)
        .with("SCORES", "shared")
        .with("LOAD", "tma")
        .with("SOFTMAX", "fast")
        .with("QK_UNROLL", 1i64)
}

/// The mma.sync decode knobs for `rows = s_q * H` packed query rows per request (the automatic knobs before
/// the wgmma kernel).
///
/// Up to 16 rows: BM = 16 on [1, 4] warps with 64-key stages (170 KB of shared memory, one block of 4 warps
/// per SM); more rows: BM = 32 on [2, 4] warps. The 32-key variant that fits two blocks per SM (`BN=32,
/// SWN=2, QK_ACCS=3, BT_PREFETCH=1`, 92 KB) was slower on the H200 (see the measurements below); it stays in the
/// knob space for the tuner.
pub fn decode_sync_knobs_for_rows(rows: usize) -> Knobs {
    // Measured on the H200 (2026-11-30, b128 S4096, same run): for 12 heads these knobs took 0.287 ms against
    // 0.432 ms for BN=32 with duplicated score warps (SWN=2), three score accumulators and the block-table
    // prefetch; for 96 heads BM=32 without those took 0.777 ms against 0.831 ms with them. The split-KV pair is
    // what was timed then; the direct kernel (no combine, the plan's default since 2026-12-01) took 0.1682 ms against
    // 0.1892 for the split pair at these knobs at 12 heads (H200, 2026-12-01).
    let k = Knobs::new()
        .with("SCORES", "shared")
        .with("BN", 64i64)
        .with("WN", 4i64)
        .with("STAGES", 2i64)
        .with("SWN", 0i64)
        .with("QK_ACCS", 1i64)
        .with("BT_PREFETCH", 0i64);
    match rows {
        0..=16 => k.with("BM", 16i64).with("WM", 1i64),
        _ => k.with("BM", 32i64).with("WM", 2i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_record_is_the_sync_knobs_for_sixteen_rows() {
        // The plan compares a record with the defaults to map it to the knobs of the problem's row count.
        assert_eq!(decode_default_knobs(), decode_knobs_for_rows(16));
        let t = DecodeKnobs::from_knobs(&decode_default_knobs()).unwrap();
        assert_eq!((t.bm, t.bn, t.wm, t.wn, t.stages, t.scores), (16, 64, 1, 4, 2, Scores::Shared));
        assert_eq!(
            (t.swn, t.bt_prefetch, t.qk_accs, t.mma, t.dvs, t.qk_unroll),
            (0, Flag::Off, 1, Mma::Sync, 1, Flag::Off)
        );
        assert_eq!((t.overlap, t.vwg, t.softmax, t.load), (false, 1, Softmax::Exact, RingLoad::CpAsync));
        let space = decode_knob_space();
        let names: Vec<&str> = space.axes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, DecodeKnobs::NAMES);
        let t = DecodeKnobs::from_knobs(&decode_auto_wgmma_knobs()).unwrap();
        assert_eq!(
            (t.mma, t.vwg, t.scores, t.load, t.softmax, t.qk_unroll),
            (Mma::Wgmma, 2, Scores::Shared, RingLoad::Tma, Softmax::Fast, Flag::On)
        );
    }

    #[test]
    fn records_older_than_a_knob_keep_their_meaning() {
        // The mma.sync knob sets leave out the knobs that came with the wgmma kernel (MMA, DVS, QK_UNROLL, OVERLAP,
        // VWG, SOFTMAX, LOAD); here SWN, QK_ACCS and BT_PREFETCH too.
        let mut old = decode_sync_knobs_for_rows(32);
        for k in ["SWN", "QK_ACCS", "BT_PREFETCH"] {
            old.0.remove(k);
        }
        let t = DecodeKnobs::from_knobs(&old).unwrap();
        assert_eq!((t.bm, t.wm, t.swn, t.qk_accs, t.bt_prefetch, t.mma, t.dvs), (32, 2, 0, 1, Flag::Off, Mma::Sync, 1));
        assert_eq!(
            (t.qk_unroll, t.overlap, t.vwg, t.softmax, t.load),
            (Flag::Off, false, 1, Softmax::Exact, RingLoad::CpAsync)
        );
        old.0.remove("SCORES");
        let e = DecodeKnobs::from_knobs(&old).unwrap_err().to_string();
        assert!(e.contains("`SCORES` is missing"), "{e}");
    }

    #[test]
    fn bad_values_name_the_knob_and_the_values_it_takes() {
        let e = |k: Knobs| build_decode(&DecodeSpec::default(), &k).unwrap_err().to_string();
        let d = decode_default_knobs();
        let msg = e(d.clone().with("BT_PREFETCH", 2i64));
        assert!(msg.ends_with("BT_PREFETCH must be 0 or 1, got 2"), "{msg}");
        let msg = e(d.clone().with("QK_UNROLL", 2i64));
        assert!(msg.ends_with("QK_UNROLL must be 0 or 1, got 2"), "{msg}");
        let msg = e(d.clone().with("SCORES", "split"));
        assert!(msg.ends_with("SCORES must be replicated or shared, got split"), "{msg}");
        let msg = e(d.with("LOAD", "auto"));
        assert!(msg.ends_with("LOAD must be cp_async or tma, got auto"), "{msg}");
    }
}
