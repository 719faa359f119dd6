//! The knobs of [`build_kernel`](super::build_kernel), declared once ([`GemmKnobs`]): each knob's meaning, the
//! tuning space, the default record, and what a record written before a knob existed means (`absent`). The
//! measurements behind each default are on the field.

use crate::typed_knobs::{AutoOr, knob_enum, knob_set};
use k3k_ir::{KnobSpace, Knobs};

/// The knob name of [`GemmKnobs::load`].
pub const LOAD_KNOB: &str = "LOAD";
/// The knob name of [`GemmKnobs::overlap`].
pub const OVERLAP_KNOB: &str = "OVERLAP";
/// The knob name of [`GemmKnobs::cluster`].
pub const CLUSTER_KNOB: &str = "CLUSTER";
/// The knob name of [`GemmKnobs::cluster_along`].
pub const CLUSTER_ALONG_KNOB: &str = "CLUSTER_ALONG";
/// The knob name of [`GemmKnobs::ahead`].
pub const AHEAD_KNOB: &str = "AHEAD";
/// The knob name of [`GemmKnobs::release`].
pub const RELEASE_KNOB: &str = "RELEASE";
/// The knob name of [`GemmKnobs::producer`].
pub const PRODUCER_KNOB: &str = "PRODUCER";
/// The knob name of [`GemmKnobs::epi_turn`].
pub const EPI_TURN_KNOB: &str = "EPI_TURN";
/// The knob name of [`GemmKnobs::store`].
pub const STORE_KNOB: &str = "STORE";

knob_enum! {
    /// `RASTER`: the tile order inside a group.
    pub enum Raster: str {
        /// Along m: neighbouring blocks share a weight tile.
        M = "m",
        N = "n",
    }
}

knob_enum! {
    /// `MMA`: the tensor-core path.
    pub enum Mma: str {
        /// `mma.sync` m16n8k16 from `ldmatrix`.
        Sync = "sync",
        /// sm_90a warpgroup MMA from 128-byte-swizzled shared tiles.
        Wgmma = "wgmma",
    }
}

knob_enum! {
    /// `LOAD`: how the operand tiles reach shared memory.
    pub enum OperandLoad: str {
        /// `tma` where the copy engine can serve the shape (MMA=wgmma, BK=64, K a multiple of 8), else
        /// `cp_async`.
        Auto = "auto",
        /// Every thread copies 16-byte chunks (cp.async groups and a barrier per k-step).
        CpAsync = "cp_async",
        /// One thread issues bulk tensor copies per stage into the 128-byte-swizzled tiles, completing on a
        /// per-stage mbarrier the consumers wait on.
        Tma = "tma",
    }
}

knob_enum! {
    /// `STORE`: how the epilogue writes `y`.
    pub enum EpilogueStore: str {
        /// Every thread stores its accumulator pairs to global memory ([`k3k_ir::Stmt::Store`]).
        Reg = "reg",
        /// Bulk tensor stores from shared staging buffers ([`k3k_ir::Stmt::TmaStore`]).
        Tma = "tma",
    }
}

knob_enum! {
    /// `OVERLAP`: whether the tile walk is software pipelined.
    pub enum Overlap: str {
        On = "on",
        Off = "off",
    }
}

knob_enum! {
    /// `PRODUCER`: who issues the TMA ring's copies.
    pub enum ProducerBy: str {
        /// Thread 0 of consumer warp 0, between its own k-steps.
        Thread = "thread",
        /// A dedicated producer warp past the consumer warps ([`k3k_ir::Stmt::Producer`]).
        Warp = "warp",
    }
}

knob_enum! {
    /// `RELEASE`: how consumers release a stage to the producer.
    pub enum ReleaseBy: str {
        /// Every thread arrives on the slot's empty barrier (count = threads).
        Thread = "thread",
        /// Lane 0 of each warp, after the warp converges (count = warps).
        Warp = "warp",
    }
}

knob_enum! {
    /// `EPI_TURN`: whether the consumer warpgroups store their epilogues in turn.
    pub enum EpiTurn: str {
        Off = "off",
        On = "on",
    }
}

knob_enum! {
    /// `CLUSTER`: CTAs per thread-block cluster.
    pub enum ClusterSize: u32 {
        One = 1,
        Two = 2,
    }
}

knob_enum! {
    /// `CLUSTER_ALONG`: which sibling tiles a cluster of two pairs.
    pub enum ClusterAlong: str {
        /// Two neighbouring m-tiles of one n-tile (they share the weight tile).
        M = "m",
        /// Two neighbouring n-tiles of one m-tile (they share the x tile).
        N = "n",
    }
}

/// `AHEAD`: stages the producer stream keeps in flight: `auto` (resolved once the load path, the cluster and the
/// producer are known, see `Config`) or a count in 1..=STAGES-1.
pub type Ahead = AutoOr;

knob_set! {
    /// The knobs of the latent expert GEMM, read from a record by [`GemmKnobs::from_knobs`]. The space, the
    /// default record and the legacy meaning of absent knobs come from this one declaration.
    pub struct GemmKnobs for "latent_moe_gemm" {
        /// `BM`: rows of x per block tile.
        bm: u32 = "BM" => { axis: "rows of x per block tile" [64, 128], default: 128, },
        /// `BN`: columns of w per block tile (gate and up together for a GLU).
        bn: u32 = "BN" => {
            axis: "columns of w per block tile (gate+up together for GLU)" [64, 128, 256],
            default: 256,
        },
        /// `BK`: the K slice per pipeline stage.
        bk: u32 = "BK" => { axis: "K slice per pipeline stage" [32, 64], default: 64, },
        /// `STAGES`: the pipeline depth.
        stages: u32 = "STAGES" => { axis: "cp.async pipeline depth" [2, 3, 4], default: 4, },
        /// `WM`: warps along M.
        wm: u32 = "WM" => { axis: "warps along M" [1, 2, 4], default: 8, },
        /// `WN`: warps along N.
        wn: u32 = "WN" => { axis: "warps along N" [1, 2, 4], default: 1, },
        /// `RASTER`: the tile order inside a group.
        raster: Raster = "RASTER" => {
            axis: "tile order inside a group: m (neighbouring blocks share a weight tile) or n" [Raster::M, Raster::N],
            default: Raster::M,
        },
        /// `MMA` (absent: `sync`): the tensor-core path; `wgmma` needs BK=64, WN=1, WM=BM/16.
        mma: Mma = "MMA" => {
            axis: "tensor-core path: sync (mma.sync m16n8k16 from ldmatrix) or wgmma (sm_90a warpgroup MMA from 128-byte-swizzled shared tiles; BK=64, WN=1, WM=BM/16)"
                [Mma::Sync, Mma::Wgmma],
            default: Mma::Wgmma,
            absent: Mma::Sync,
        },
        /// `LOAD` (absent: `cp_async`, default `auto`): how the operand tiles reach shared memory.
        ///
        /// `auto` is `tma` where the copy engine can serve the shape (MMA=wgmma, BK=64, K a multiple of 8), else
        /// `cp_async`. Measured on the H200 (2026-12-01, `lab/NOTES.md`, same run): TMA at STAGES=4 beat
        /// cp.async on all five presets (mean256 0.623 vs 0.694 ms, mean1024 2.117 vs 2.305, K3072 1.021 vs
        /// 1.115, G56 mean64 0.725 vs 0.766, SiTU-GLU+p 0.757 vs 0.951).
        load: OperandLoad = LOAD_KNOB => {
            axis: "operand loads (MMA=wgmma only): cp_async (every thread copies 16-byte chunks, cp.async groups + a barrier per k-step) or tma (one thread issues bulk tensor copies per stage into the same 128-byte-swizzled tiles, completing on a per-stage mbarrier the consumers wait on)"
                [OperandLoad::CpAsync, OperandLoad::Tma],
            accepts: "`auto`: TMA where the copy engine serves the shape" [OperandLoad::Auto],
            default: OperandLoad::Auto,
            absent: OperandLoad::CpAsync,
        },
        /// `STORE` (absent: `reg`; `tma` in the defaults since 2026-12-04): how the epilogue writes `y`.
        ///
        /// Measured on the H200 (two runs, same runs as the register stores): G28 mean1024 K3584 N6144 2.0529 /
        /// 2.0292 vs 2.0614 / 2.0907 ms, K3072 N3584 1.0188 / 1.0228 vs 1.0347 / 1.0384, mean256 0.6139 / 0.6208
        /// vs 0.6143 / 0.6255, G56 mean64 0.6619 / 0.6628 vs 0.6576 / 0.6596, SiTU-GLU + p 0.6782 / 0.6836 vs
        /// 0.6879 / 0.6827; `lab/2026-12-04/1622-h200-run/`, `lab/2026-12-04/1626-h200-run/`.
        /// `reg`: every thread stores its accumulator pairs to global memory ([`k3k_ir::Stmt::Store`]), a burst
        /// the tensor cores wait behind once per tile. `tma`: tiles whose rows all lie inside their group go
        /// through two 128x64 shared staging buffers ([`k3k_ir::Stmt::StoreCols`]) and bulk tensor stores
        /// ([`k3k_ir::Stmt::TmaStore`]), 64 columns at a time, which drain while the next tile's products run
        /// (CUTLASS's TMA-store epilogue); a group's last, partial m-tile keeps the register path (a box would
        /// overwrite the next group's rows). Needs the TMA ring (LOAD=tma resolved) and `y` rows of a multiple of
        /// 8 elements; elsewhere the register path runs.
        store: EpilogueStore = STORE_KNOB => {
            accepts: "epilogue store: reg (from registers) or tma (bulk tensor store)"
                [EpilogueStore::Reg, EpilogueStore::Tma],
            default: EpilogueStore::Tma,
            absent: EpilogueStore::Reg,
        },
        /// `OVERLAP` (absent: `off`; `on` in the defaults since 2026-12-04): whether the walk is software
        /// pipelined.
        ///
        /// Measured with the producer warpgroup, same run: mean1024 2.0620 ms vs 2.0690 off, K3072 1.0322 vs
        /// 1.0399, SiTU-GLU + p 0.6702 vs 0.6861, mean256 and G56 mean64 equal. `off` is the plain tile walk
        /// (each tile searches its group from group 0 and fills its pipeline after the previous tile's
        /// epilogue); `on` software-pipelines the walk (the next tile's group search, starting where the
        /// previous one ended, overlaps the current tile's last product, and the next tile's first stages are
        /// issued before the current tile's epilogue).
        overlap: Overlap = OVERLAP_KNOB => {
            accepts: "epilogue overlapped with the next tile's loads" [Overlap::On, Overlap::Off],
            default: Overlap::On,
            absent: Overlap::Off,
        },
        /// `PRODUCER` (absent: `thread`; `warp` in the defaults since 2026-12-04): who issues the TMA ring's
        /// copies, with the producer stream ([`Self::ahead`]) only; ignored without the TMA ring (the cp.async
        /// kernel).
        ///
        /// Measured on the H200, same run as the thread-0 producer, both with AHEAD=auto: mean256 0.6092 vs
        /// 0.6220 ms, mean1024 2.0690 vs 2.0837, K3072 1.0399 vs 1.0449, G56 mean64 0.6406 vs 0.6440, SiTU-GLU +
        /// p 0.6861 vs 0.7067; `lab/2026-12-04/1309-h200-run/`. `thread`: thread 0 of consumer warp 0, between
        /// its own k-steps (its warp waits while it waits for a slot's release). `warp`: a dedicated producer
        /// warp past the consumer warps (warp specialization, [`k3k_ir::Stmt::Producer`]), which runs the same
        /// stream ahead of the consumers as far as the empty barriers let it; no consumer warp ever waits for a
        /// release or spends issue slots on copies.
        producer: ProducerBy = PRODUCER_KNOB => {
            accepts: "TMA producer: one thread or one warp" [ProducerBy::Thread, ProducerBy::Warp],
            default: ProducerBy::Warp,
            absent: ProducerBy::Thread,
        },
        /// `RELEASE` (absent: `thread`), LOAD=tma only: how consumers release a stage to the producer: every
        /// thread arrives on the slot's empty barrier (count = threads), or lane 0 of each warp after the warp
        /// converges (count = warps; the CLUSTER=2 path always does the latter, on both CTAs). Ignored where
        /// `LOAD=auto` resolves to cp.async; an error with `LOAD=cp_async`.
        release: ReleaseBy = RELEASE_KNOB => {
            accepts: "stage release: one thread or one warp" [ReleaseBy::Thread, ReleaseBy::Warp],
            absent: ReleaseBy::Thread,
        },
        /// `EPI_TURN` (absent: `off`): with the producer stream on a wgmma kernel of two or more consumer
        /// warpgroups, `on` runs each tile's epilogue in turn ([`k3k_ir::Stmt::InTurn`]).
        ///
        /// Warpgroup 0 stores its rows while warpgroup 1 waits, then warpgroup 1 stores while warpgroup 0
        /// already issues the next tile's products. After the first tile the warpgroups stay staggered by one
        /// epilogue, so each one's epilogue runs under the other's tensor-core products instead of both idling
        /// the tensor cores at once (the effect FlashAttention-3 and CUTLASS's ping-pong kernels get from one
        /// output tile per warpgroup, here with the cooperative tile and no extra registers; the price is ring
        /// depth: the leading warpgroup runs up to one epilogue ahead of the slot releases of the other).
        /// Measured on the H200 (2026-12-04, same run, register stores): no gain (mean1024 2.0451 vs 2.0419 ms,
        /// K3072 1.0327 vs 1.0329, mean256 0.6221 vs 0.6092, SiTU-GLU + p 0.6937 vs 0.6643): the lead eats the
        /// 4-slot ring. An error on the mma.sync path, with one warpgroup or with `STORE=tma`; ignored where no
        /// producer stream runs (the cp.async kernel).
        epi_turn: EpiTurn = EPI_TURN_KNOB => {
            accepts: "epilogues in turns" [EpiTurn::Off, EpiTurn::On],
            absent: EpiTurn::Off,
        },
        /// `CLUSTER` (absent: `1`), not in the defaults: `2` launches the blocks in thread-block clusters of two
        /// (LOAD=tma only) that compute sibling tiles of one (group, k-loop) and share the operand both need.
        ///
        /// The shared operand arrives through `.multicast::cluster` copies: each CTA copies half of the shared
        /// tile into both CTAs' shared memory, so each reads 32 instead of 48 KiB per k-step from L2 at 128x256
        /// tiles with [`Self::cluster_along`] = `m`. Measured on the H200 (2026-12-04, same runs as the
        /// defaults), the best pair (along n, AHEAD=2, OVERLAP=on) reads 2.1394 ms at G28 mean1024 K3584 N6144
        /// against 2.1036 for one CTA per tile, 1.0867 / 1.0596 at K3072 N3584, 0.6856 / 0.6620 at G56 mean64:
        /// the L2 traffic the multicast saves (ncu: L2 throughput 49% vs 70%) is given back while thread 0 of
        /// consumer warp 0, the producer, waits for the peer's releases. With `LOAD=auto` on a shape the copy
        /// engine cannot serve, the cp.async kernel runs unpaired; with `LOAD=cp_async`, CLUSTER=2 is an error.
        cluster: ClusterSize = CLUSTER_KNOB => {
            accepts: "CTAs per thread-block cluster" [ClusterSize::One, ClusterSize::Two],
            absent: ClusterSize::One,
        },
        /// `CLUSTER_ALONG` (absent: `m`; only with CLUSTER=2): which tiles a cluster pairs. `m`: two
        /// neighbouring m-tiles of one n-tile (they share the weight tile, BN rows; a group with an odd m-tile
        /// count leaves the second CTA of its last pair idle: it still copies its half of the weights and takes
        /// part in the barriers, but runs no products and stores nothing). `n`: two neighbouring n-tiles of one
        /// m-tile (they share the x tile, BM rows; idle only when the n-tile count is odd).
        cluster_along: ClusterAlong = CLUSTER_ALONG_KNOB => {
            accepts: "cluster pairs along m or n" [ClusterAlong::M, ClusterAlong::N],
            absent: ClusterAlong::M,
        },
        /// `AHEAD` (an integer 1..=STAGES-1, or `auto`; absent: the in-loop schedule, `None`), LOAD=tma only.
        ///
        /// The default is `auto`: STAGES-1 where the TMA ring runs without a cluster (STAGES-2 for a pair and
        /// with a producer warp, [`Self::producer`]), measured on the H200 (2026-12-02, same run, defaults
        /// otherwise): AHEAD=3 vs the in-loop schedule 0.6653 / 0.6739 ms at G28 mean256, 2.1839 / 2.2385 at
        /// mean1024, 1.0945 / 1.1373 at K3072 N3584, 0.6683 / 0.6853 at G56 mean64 (AHEAD=2 0.6604 / 2.1819 /
        /// 1.1028 / 0.6862; RELEASE=warp was slower everywhere).
        ///
        /// Absent (tuned records and knob-space points written before AHEAD): the schedule measured as the
        /// default until then (at k-step `kt` thread 0 first refills the slot of `kt+STAGES-2`, whose previous
        /// use was released at step `kt-1`, then the product of `kt` is issued: STAGES-2 stages in flight, and
        /// each tile's first stages are issued at the tile's start). `AHEAD=a`: a continuous producer stream
        /// over the block's whole tile walk: the producer (thread 0) keeps its own cursor (tile, k-step,
        /// coordinates), issues `a` stages before the walk and then one per k-step, right after the step's
        /// `wgmma.wait_group` and release (the refill of use `u+a` waits for the release of use `u+a-STAGES`, at
        /// `a = STAGES-1` the slot of `u-1` released in the same step), so `a` stages are in flight whatever the
        /// tile boundaries: the next tile's first stages are issued during the last k-steps of the current one,
        /// and no block barrier is left in the walk. With `LOAD=auto` on a shape the copy engine cannot serve
        /// (the cp.async kernel) the knob is ignored; with `LOAD=cp_async` it is an error. With `CLUSTER=2` each
        /// CTA of a pair runs its own stream over the pair's common walk: its producer copies its half of the
        /// shared operand into both CTAs and refills a slot once both CTAs' warps released it.
        ahead: Option<Ahead> = AHEAD_KNOB => {
            accepts: "stages loaded ahead (auto or a count)" [Some(Ahead::Auto)],
            default: Some(Ahead::Auto),
            absent: None,
        },
    }
}

/// The tuning knobs and their meaning.
pub fn knob_space() -> KnobSpace {
    GemmKnobs::space()
}

/// The knobs used when no tuning record exists.
pub fn default_knobs() -> Knobs {
    GemmKnobs::defaults()
}

/// The best mma.sync configuration measured on the H200 (2026-11-29), kept as the portable fallback. A record
/// (the knobs it leaves out take their `absent` meaning), so that its kernel keeps its name.
pub fn sync_knobs() -> Knobs {
    Knobs::new()
        .with("BM", 128i64)
        .with("BN", 256i64)
        .with("BK", 32i64)
        .with("STAGES", 3i64)
        .with("WM", 2i64)
        .with("WN", 4i64)
        .with("RASTER", "m")
        .with("MMA", "sync")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k3k_ir::KnobValue;

    #[test]
    fn the_default_record_reads_as_declared() {
        let k = GemmKnobs::from_knobs(&default_knobs()).unwrap();
        assert_eq!((k.bm, k.bn, k.bk, k.stages, k.wm, k.wn), (128, 256, 64, 4, 8, 1));
        assert_eq!((k.raster, k.mma, k.load, k.store), (Raster::M, Mma::Wgmma, OperandLoad::Auto, EpilogueStore::Tma));
        assert_eq!((k.overlap, k.producer, k.ahead), (Overlap::On, ProducerBy::Warp, Some(Ahead::Auto)));
        // Knobs left out of the default record take their legacy meaning.
        assert_eq!((k.release, k.epi_turn), (ReleaseBy::Thread, EpiTurn::Off));
        assert_eq!((k.cluster, k.cluster_along), (ClusterSize::One, ClusterAlong::M));
        // The typed record writes back the knobs the default record holds, plus the ones it left out.
        let back = k.to_knobs();
        for (name, v) in &default_knobs().0 {
            assert_eq!(back.0.get(name), Some(v), "{name}");
        }
        assert_eq!(GemmKnobs::from_knobs(&back).unwrap(), k);
    }

    #[test]
    fn records_older_than_a_knob_keep_their_meaning() {
        let k = GemmKnobs::from_knobs(&sync_knobs()).unwrap();
        assert_eq!(
            (k.mma, k.load, k.store, k.overlap),
            (Mma::Sync, OperandLoad::CpAsync, EpilogueStore::Reg, Overlap::Off)
        );
        assert_eq!((k.producer, k.ahead), (ProducerBy::Thread, None));
        // A record without MMA predates the warpgroup path.
        let mut old = sync_knobs();
        old.0.remove("MMA");
        assert_eq!(GemmKnobs::from_knobs(&old).unwrap().mma, Mma::Sync);
        // Tile knobs have no legacy meaning.
        let mut no_bm = sync_knobs();
        no_bm.0.remove("BM");
        let e = GemmKnobs::from_knobs(&no_bm).unwrap_err().to_string();
        assert!(e.contains("`BM` is missing"), "{e}");
    }

    #[test]
    fn values_are_read_in_their_kind_and_words_are_checked() {
        let with = |name: &str, v: KnobValue| {
            let mut k = default_knobs();
            k.set(name, v);
            GemmKnobs::from_knobs(&k)
        };
        assert_eq!(with(AHEAD_KNOB, KnobValue::Int(2)).unwrap().ahead, Some(Ahead::Value(2)));
        assert_eq!(with(CLUSTER_KNOB, KnobValue::Int(2)).unwrap().cluster, ClusterSize::Two);
        let e = with(CLUSTER_KNOB, KnobValue::Int(3)).unwrap_err().to_string();
        assert!(e.contains("CLUSTER must be 1 or 2, got 3"), "{e}");
        let e = with(LOAD_KNOB, "bulk".into()).unwrap_err().to_string();
        assert!(e.contains("LOAD must be auto, cp_async or tma, got bulk"), "{e}");
        let e = with("RASTER", "row".into()).unwrap_err().to_string();
        assert!(e.contains("RASTER must be m or n, got row"), "{e}");
        // A number where a word is expected (and the reverse) is the record's own error.
        assert!(with(STORE_KNOB, KnobValue::Int(1)).is_err());
        assert!(with("BM", "128".into()).is_err());
        assert!(with(AHEAD_KNOB, "soon".into()).is_err());
    }

    #[test]
    fn the_space_is_the_declaration_in_order() {
        let s = knob_space();
        let axes: Vec<&str> = s.axes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(axes, ["BM", "BN", "BK", "STAGES", "WM", "WN", "RASTER", "MMA", "LOAD"]);
        let accepted: Vec<&str> = s.accepted.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            accepted,
            ["LOAD", "STORE", "OVERLAP", "PRODUCER", "RELEASE", "EPI_TURN", "CLUSTER", "CLUSTER_ALONG", "AHEAD"]
        );
        assert_eq!(s.size(), 2592);
        assert_eq!(GemmKnobs::NAMES.len(), 17);
        // Every point of the space reads.
        for k in s.strided(50) {
            GemmKnobs::from_knobs(&k).unwrap();
        }
    }
}
