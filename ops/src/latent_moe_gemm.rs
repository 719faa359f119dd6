//! `latent_moe_gemm`: the grouped GEMM over routed experts of SEMANTICS.md section 2.1 (and the dense GEMM as its one-group
//! case), written as an IR tile program.
//!
//! `y[r, n] = p[r]? * sum_k x[r, k] * w[g(r), n, k]`, where expert g owns rows `offs[g-1]..offs[g]`
//! (inclusive cumulative ends, groups may be empty), optionally followed by the SiTU-GLU or SwiGLU epilogue
//! over the two halves of N. One persistent program walks the (group, m-tile, n-tile) space: each block takes
//! every `grid.x`-th tile, so empty and tiny groups cost no blocks. The K loop is a `STAGES`-deep `cp.async`
//! pipeline feeding `mma.sync` or `wgmma` from swizzled shared tiles. With `OVERLAP=on` the walk is software
//! pipelined: the next tile's group search overlaps the current tile's last product, and the next tile's first
//! stages are in flight during the current tile's epilogue (see
//! `lab/2026-12-01/1645-profile-latent_moe_gemm-sass-analysis.md`).

use crate::OpError;
use k3k_ir::*;

/// The fused epilogue over the two halves of N (gate = first N/2 columns, up = last N/2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Epilogue {
    None,
    /// `h = [4 tanh(a/4) sigmoid(a)] * [25 tanh(b/25)]`.
    SituGlu,
    /// `h = silu(a) * b`.
    SwiGlu,
}

impl Epilogue {
    /// True for the gated forms (output has N/2 columns).
    pub fn is_glu(self) -> bool {
        self != Epilogue::None
    }
    /// Output column `j` of one row in f64 (the reference), from the row's product `acc` over all N columns (the
    /// gated forms: gate `acc[j]`, up `acc[j + N/2]`).
    pub fn reference(self, acc: &[f64], j: usize) -> f64 {
        let no = acc.len() / 2;
        match self {
            Epilogue::None => acc[j],
            Epilogue::SituGlu => k3k_reference::gemm::situ_glu(acc[j], acc[j + no]),
            Epilogue::SwiGlu => k3k_reference::gemm::swiglu(acc[j], acc[j + no]),
        }
    }
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Epilogue::None => "none",
            Epilogue::SituGlu => "situ_glu",
            Epilogue::SwiGlu => "swiglu",
        }
    }
}

/// What a kernel variant computes (fixed by the problem, not tuned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GemmSpec {
    /// Grouped over `offs` (false: one dense [M, K] x [N, K]^T product).
    pub grouped: bool,
    pub epilogue: Epilogue,
    /// Multiply each output row by a routing weight `p[r]`.
    pub row_scale: bool,
    /// Elements per global load of x and w: 8 when K % 8 == 0 (16-byte cp.async), else 4, 2 or 1.
    pub in_vec: u32,
    /// Elements per store of y: 8, 4, 2 or 1, the widest the output width divides (8: 16-byte stores).
    pub out_vec: u32,
}

impl GemmSpec {
    /// The variant for a problem shape: the widest accesses K and the output width allow.
    pub fn for_shape(grouped: bool, epilogue: Epilogue, row_scale: bool, k: usize, n_out: usize) -> Self {
        let in_vec = [8u32, 4, 2, 1].into_iter().find(|v| k.is_multiple_of(*v as usize)).unwrap_or(1);
        let out_vec = [8u32, 4, 2, 1].into_iter().find(|v| n_out.is_multiple_of(*v as usize)).unwrap_or(1);
        GemmSpec { grouped, epilogue, row_scale, in_vec, out_vec }
    }
    /// The alignment class, part of the tuning key.
    pub fn alignment(&self) -> String {
        format!("in{}_out{}", self.in_vec, self.out_vec)
    }
}

/// The tuning knobs and their meaning.
pub fn knob_space() -> KnobSpace {
    KnobSpace::default()
        .axis("BM", "rows of x per block tile", [64i64, 128])
        .axis("BN", "columns of w per block tile (gate+up together for GLU)", [64i64, 128, 256])
        .axis("BK", "K slice per pipeline stage", [32i64, 64])
        .axis("STAGES", "cp.async pipeline depth", [2i64, 3, 4])
        .axis("WM", "warps along M", [1i64, 2, 4])
        .axis("WN", "warps along N", [1i64, 2, 4])
        .axis("RASTER", "tile order inside a group: m (neighbouring blocks share a weight tile) or n", ["m", "n"])
        .axis(
            "MMA",
            "tensor-core path: sync (mma.sync m16n8k16 from ldmatrix) or wgmma (sm_90a warpgroup MMA from 128-byte-swizzled shared tiles; BK=64, WN=1, WM=BM/16)",
            ["sync", "wgmma"],
        )
        .axis(
            LOAD_KNOB,
            "operand loads (MMA=wgmma only): cp_async (every thread copies 16-byte chunks, cp.async groups + a barrier per k-step) or tma (one thread issues bulk tensor copies per stage into the same 128-byte-swizzled tiles, completing on a per-stage mbarrier the consumers wait on)",
            ["cp_async", "tma"],
        )
        // Values the kernel builder takes that the tuner does not sample (hand-picked or older knob sets).
        .accepts(LOAD_KNOB, "`auto`: TMA where the copy engine serves the shape", ["auto"])
        .accepts(STORE_KNOB, "epilogue store: reg (from registers) or tma (bulk tensor store)", ["reg", "tma"])
        .accepts(OVERLAP_KNOB, "epilogue overlapped with the next tile's loads", ["on", "off"])
        .accepts(PRODUCER_KNOB, "TMA producer: one thread or one warp", ["thread", "warp"])
        .accepts(RELEASE_KNOB, "stage release: one thread or one warp", ["thread", "warp"])
        .accepts(EPI_TURN_KNOB, "epilogues in turns", ["off", "on"])
        .accepts(CLUSTER_KNOB, "CTAs per thread-block cluster", [1i64, 2])
        .accepts(CLUSTER_ALONG_KNOB, "cluster pairs along m or n", ["m", "n"])
        .accepts(AHEAD_KNOB, "stages loaded ahead (auto or a count)", ["auto"])
}

/// The knob `LOAD` (`auto` | `cp_async` | `tma`, absent = `cp_async`, the default `auto`): how the operand tiles
/// reach shared memory; `auto` is `tma` where the copy engine can serve the shape (MMA=wgmma, BK=64, K a multiple
/// of 8), else `cp_async`.
pub const LOAD_KNOB: &str = "LOAD";

/// The knob `OVERLAP` (`off` | `on`, absent = `off`), not an axis of [`knob_space`]; `on` in [`default_knobs`]
/// since 2026-12-04 (with the producer warpgroup, same run: mean1024 2.0620 ms vs 2.0690 off, K3072 1.0322 vs
/// 1.0399, SiTU-GLU + p 0.6702 vs 0.6861, mean256 and G56 mean64 equal): `off` is the plain tile walk (each tile
/// searches its group from group 0 and fills its pipeline
/// after the previous tile's epilogue); `on` software-pipelines the walk (the next tile's group search, starting
/// where the previous one ended, overlaps the current tile's last product, and the next tile's first stages
/// are issued before the current tile's epilogue).
pub const OVERLAP_KNOB: &str = "OVERLAP";

/// The knob `CLUSTER` (`1` | `2`, absent = `1`), not an axis of [`knob_space`] nor part of [`default_knobs`]:
/// measured on the H200 (2026-12-04, same runs as the defaults), the best pair (along n, AHEAD=2, OVERLAP=on)
/// reads 2.1394 ms at G28 mean1024 K3584 N6144 against 2.1036 for one CTA per tile, 1.0867 / 1.0596 at K3072
/// N3584, 0.6856 / 0.6620 at G56 mean64: the L2 traffic the multicast saves (ncu: L2 throughput 49% vs 70%) is
/// given back while thread 0 of consumer warp 0, the producer, waits for the peer's releases. `2` launches the
/// blocks in thread-block clusters of two (LOAD=tma only) that compute sibling tiles of one (group, k-loop) and
/// share the operand both need through `.multicast::cluster` copies: each CTA copies half of the shared tile
/// into both CTAs' shared memory, so each reads 32 instead of 48 KiB per k-step from L2 at 128x256 tiles with
/// [`CLUSTER_ALONG_KNOB`] = `m`. With
/// `LOAD=auto` on a shape the copy engine cannot serve, the cp.async kernel runs unpaired; with `LOAD=cp_async`,
/// CLUSTER=2 is an error.
pub const CLUSTER_KNOB: &str = "CLUSTER";

/// The knob `CLUSTER_ALONG` (`m` | `n`, absent = `m`; only with CLUSTER=2): which tiles a cluster pairs. `m`:
/// two neighbouring m-tiles of one n-tile (they share the weight tile, BN rows; a group with an odd m-tile
/// count leaves the second CTA of its last pair idle: it still copies its half of the weights and takes part
/// in the barriers, but runs no products and stores nothing). `n`: two neighbouring n-tiles of one m-tile
/// (they share the x tile, BM rows; idle only when the n-tile count is odd).
pub const CLUSTER_ALONG_KNOB: &str = "CLUSTER_ALONG";

/// The knob `AHEAD` (an integer 1..=STAGES-1, or `auto`; absent = the in-loop schedule), LOAD=tma only, not an
/// axis of [`knob_space`]. The default is `auto`: STAGES-1 where the TMA ring runs without a cluster (STAGES-2
/// for a pair, below, and with a producer warp, [`PRODUCER_KNOB`]), measured on the H200 (2026-12-02,
/// same run, defaults otherwise): AHEAD=3 vs the in-loop schedule 0.6653 / 0.6739 ms at G28 mean256, 2.1839 / 2.2385 at mean1024, 1.0945 / 1.1373 at
/// K3072 N3584, 0.6683 / 0.6853 at G56 mean64 (AHEAD=2 0.6604 / 2.1819 / 1.1028 / 0.6862; RELEASE=warp was slower
/// everywhere). Absent (tuned records and knob-space points written before AHEAD): the schedule measured as the
/// default until then (at k-step `kt` thread 0 first refills the slot of `kt+STAGES-2`, whose previous use was released at
/// step `kt-1`, then the product of `kt` is issued: STAGES-2 stages in flight, and each tile's first stages are
/// issued at the tile's start). `AHEAD=a`: a continuous producer stream over the block's whole tile walk: the
/// producer (thread 0) keeps its own cursor (tile, k-step, coordinates), issues `a` stages before the walk and
/// then one per k-step, right after the step's `wgmma.wait_group` and release (the refill of use `u+a` waits for
/// the release of use `u+a-STAGES`, at `a = STAGES-1` the slot of `u-1` released in the same step), so `a`
/// stages are in flight whatever the tile boundaries: the next tile's first stages are issued during the last
/// k-steps of the current one, and no block barrier is left in the walk. With `LOAD=auto` on a shape the copy
/// engine cannot serve (the cp.async kernel) the knob is ignored; with `LOAD=cp_async` it is an error. With
/// `CLUSTER=2` each CTA of a pair runs its own stream over the pair's common walk: its producer copies its half
/// of the shared operand into both CTAs and refills a slot once both CTAs' warps released it (`auto`: STAGES-2
/// for a pair, measured best; see `cfg`).
pub const AHEAD_KNOB: &str = "AHEAD";

/// `AHEAD=auto` before it is resolved (never a valid depth: depths are below STAGES <= 4).
const AHEAD_AUTO: u32 = u32::MAX;

/// The knob `RELEASE` (`thread` | `warp`, absent = `thread`), LOAD=tma only, not yet an axis of [`knob_space`]:
/// how consumers release a stage to the producer: every thread arrives on the slot's empty barrier (count =
/// threads), or lane 0 of each warp after the warp converges (count = warps; the CLUSTER=2 path always does the
/// latter, on both CTAs). Ignored where `LOAD=auto` resolves to cp.async; an error with `LOAD=cp_async`.
pub const RELEASE_KNOB: &str = "RELEASE";

/// The knob `PRODUCER` (`thread` | `warp`, absent = `thread`), with the producer stream (`AHEAD`) only, not an
/// axis of [`knob_space`]; `warp` in [`default_knobs`] since 2026-12-04 (H200, same run as the thread-0 producer,
/// both with AHEAD=auto: mean256 0.6092 vs 0.6220 ms, mean1024 2.0690 vs 2.0837, K3072 1.0399 vs 1.0449, G56 mean64
/// 0.6406 vs 0.6440, SiTU-GLU + p 0.6861 vs 0.7067; `lab/2026-12-04/1309-h200-run/`). Without the TMA
/// ring (the cp.async kernel) it is ignored. Who issues the TMA ring's copies.
/// `thread`: thread 0 of consumer warp 0, between its own k-steps (its warp waits while it waits for a slot's
/// release). `warp`: a dedicated producer warp past the consumer warps (warp specialization, [`Stmt::Producer`]),
/// which runs the same stream ahead of the consumers as far as the empty barriers let it; no consumer warp ever
/// waits for a release or spends issue slots on copies.
pub const PRODUCER_KNOB: &str = "PRODUCER";

/// The knob `EPI_TURN` (`off` | `on`, absent = `off`), not an axis of [`knob_space`]: with the producer stream
/// on a wgmma kernel of two or more consumer warpgroups, `on` runs each tile's epilogue in turn
/// ([`Stmt::InTurn`]): warpgroup 0 stores its rows while warpgroup 1 waits, then warpgroup 1 stores while
/// warpgroup 0 already issues the next tile's products. After the first tile the warpgroups stay staggered by
/// one epilogue, so each one's epilogue runs under the other's tensor-core products instead of both idling
/// the tensor cores at once (the effect FlashAttention-3 and CUTLASS's ping-pong kernels get from one output
/// tile per warpgroup, here with the cooperative tile and no extra registers; the price is ring depth: the
/// leading warpgroup runs up to one epilogue ahead of the slot releases of the other). Measured on the H200
/// (2026-12-04, same run, register stores): no gain (mean1024 2.0451 vs 2.0419 ms, K3072 1.0327 vs 1.0329,
/// mean256 0.6221 vs 0.6092, SiTU-GLU + p 0.6937 vs 0.6643): the lead eats the 4-slot ring. An error on the
/// mma.sync path, with one warpgroup or with `STORE=tma`; ignored where no producer stream runs (the cp.async
/// kernel).
pub const EPI_TURN_KNOB: &str = "EPI_TURN";

/// The knob `STORE` (`reg` | `tma`, absent = `reg`), not an axis of [`knob_space`]; `tma` in [`default_knobs`]
/// since 2026-12-04 (H200, two runs, same runs as the register stores: G28 mean1024 K3584 N6144 2.0529 / 2.0292
/// vs 2.0614 / 2.0907 ms, K3072 N3584 1.0188 / 1.0228 vs 1.0347 / 1.0384, mean256 0.6139 / 0.6208 vs 0.6143 /
/// 0.6255, G56 mean64 0.6619 / 0.6628 vs 0.6576 / 0.6596, SiTU-GLU + p 0.6782 / 0.6836 vs 0.6879 / 0.6827;
/// `lab/2026-12-04/1622-h200-run/`, `lab/2026-12-04/1626-h200-run/`). How the epilogue writes `y`.
/// `reg`: every thread stores its accumulator pairs to global memory ([`Stmt::Store`]), a burst the tensor cores
/// wait behind once per tile. `tma`: tiles whose rows all lie inside their group go through two 128x64
/// shared staging buffers ([`Stmt::StoreCols`]) and bulk tensor stores ([`Stmt::TmaStore`]), 64 columns at a
/// time, which drain while the next tile's products run (CUTLASS's TMA-store epilogue); a group's last,
/// partial m-tile keeps the register path (a box would overwrite the next group's rows). Needs the TMA ring
/// (LOAD=tma resolved) and `y` rows of a multiple of 8 elements; elsewhere the register path runs.
pub const STORE_KNOB: &str = "STORE";

/// The knobs used when no tuning record exists.
pub fn default_knobs() -> Knobs {
    Knobs::new()
        .with("BM", 128i64)
        .with("BN", 256i64)
        .with("BK", 64i64)
        .with("STAGES", 4i64)
        .with("WM", 8i64)
        .with("WN", 1i64)
        .with("RASTER", "m")
        .with("MMA", "wgmma")
        .with(LOAD_KNOB, "auto")
        .with(AHEAD_KNOB, "auto")
        .with(OVERLAP_KNOB, "on")
        .with(PRODUCER_KNOB, "warp")
        .with(STORE_KNOB, "tma")
}

/// The best mma.sync configuration measured on the H200 (2026-11-29), kept as the portable fallback.
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

struct Cfg {
    bm: u32,
    bn: u32,
    bk: u32,
    stages: u32,
    wm: u32,
    wn: u32,
    raster_m: bool,
    wgmma: bool,
    overlap: bool,
    /// Operand tiles by TMA (bulk tensor copies completing on per-stage mbarriers) instead of cp.async.
    tma: bool,
    /// CLUSTER=2: pairs of CTAs sharing one operand by multicast; `pair_m`: the pair covers two m-tiles.
    cluster2: bool,
    pair_m: bool,
    /// AHEAD=a (LOAD=tma): the producer stream with `a` stages in flight; `None`: the in-loop schedule.
    ahead: Option<u32>,
    /// RELEASE=warp (LOAD=tma): one empty-barrier arrival per warp instead of one per thread.
    warp_release: bool,
    /// PRODUCER=warp: the producer stream runs on a dedicated producer warp ([`Stmt::Producer`]).
    producer_warp: bool,
    /// EPI_TURN=on: the consumer warpgroups store their epilogues in turn.
    epi_turn: bool,
    /// STORE=tma: full tiles leave through shared staging buffers and bulk tensor stores.
    tma_store: bool,
}

/// A string knob with two values, each meaning one setting (`absent`: knob sets written before the knob
/// existed); any other value is an error naming the knob and both values, in `values` order.
fn two_way(k: &Knobs, name: &str, absent: bool, values: [(&str, bool); 2]) -> Result<bool, OpError> {
    if !k.0.contains_key(name) {
        return Ok(absent);
    }
    let v = k.str(name)?;
    values.iter().find(|(s, _)| *s == v).map(|&(_, b)| b).ok_or_else(|| OpError::InvalidKnobs {
        op: "latent_moe_gemm",
        knobs: k.to_string(),
        why: format!("{name} must be {} or {}, got {v}", values[0].0, values[1].0),
    })
}

fn cfg(spec: &GemmSpec, k: &Knobs) -> Result<Cfg, OpError> {
    let c = Cfg {
        bm: k.u32("BM")?,
        bn: k.u32("BN")?,
        bk: k.u32("BK")?,
        stages: k.u32("STAGES")?,
        wm: k.u32("WM")?,
        wn: k.u32("WN")?,
        raster_m: k.str("RASTER")? == "m",
        wgmma: match k.0.get("MMA") {
            None => false,
            Some(_) => k.str("MMA")? == "wgmma",
        },
        // Records written before the knob existed mean the plain tile walk.
        overlap: two_way(k, OVERLAP_KNOB, false, [("on", true), ("off", false)])?,
        // Records written before the knob existed mean cp_async; `auto` is resolved below.
        tma: false,
        cluster2: match k.0.get(CLUSTER_KNOB) {
            None => false,
            Some(_) => match k.u32(CLUSTER_KNOB)? {
                1 => false,
                2 => true,
                other => {
                    return Err(OpError::InvalidKnobs {
                        op: "latent_moe_gemm",
                        knobs: k.to_string(),
                        why: format!("CLUSTER must be 1 or 2, got {other}"),
                    });
                }
            },
        },
        pair_m: two_way(k, CLUSTER_ALONG_KNOB, true, [("m", true), ("n", false)])?,
        ahead: match k.0.get(AHEAD_KNOB) {
            None => None,
            // `auto` is resolved below, once the load path and the cluster are known.
            Some(KnobValue::Str(a)) if a == "auto" => Some(AHEAD_AUTO),
            Some(_) => Some(k.u32(AHEAD_KNOB)?),
        },
        warp_release: two_way(k, RELEASE_KNOB, false, [("thread", false), ("warp", true)])?,
        producer_warp: two_way(k, PRODUCER_KNOB, false, [("thread", false), ("warp", true)])?,
        epi_turn: two_way(k, EPI_TURN_KNOB, false, [("off", false), ("on", true)])?,
        tma_store: two_way(k, STORE_KNOB, false, [("reg", false), ("tma", true)])?,
    };
    let load = match k.0.get(LOAD_KNOB) {
        None => "cp_async".to_string(),
        Some(_) => k.str(LOAD_KNOB)?.to_string(),
    };
    let mut c = c;
    c.tma = match load.as_str() {
        "tma" => true,
        "cp_async" => false,
        // Measured on the H200 (2026-12-01, `lab/NOTES.md`, same run): TMA at STAGES=4 beat cp.async on all five
        // presets (mean256 0.623 vs 0.694 ms, mean1024 2.117 vs 2.305, K3072 1.021 vs 1.115, G56 mean64 0.725 vs
        // 0.766, SiTU-GLU+p 0.757 vs 0.951); where the copy engine cannot serve the shape, the cp.async pipeline.
        "auto" => c.wgmma && c.bk == 64 && spec.in_vec == 8,
        other => {
            return Err(OpError::InvalidKnobs {
                op: "latent_moe_gemm",
                knobs: k.to_string(),
                why: format!("LOAD must be auto, cp_async or tma, got {other}"),
            });
        }
    };
    let invalid = |why: String| Err(OpError::InvalidKnobs { op: "latent_moe_gemm", knobs: k.to_string(), why });
    let acc_cols = if spec.epilogue.is_glu() { c.bn / 2 } else { c.bn };
    if !c.bm.is_multiple_of(16 * c.wm) {
        return invalid(format!("BM={} is not a multiple of 16*WM={}", c.bm, 16 * c.wm));
    }
    if acc_cols % (16 * c.wn) != 0 {
        return invalid(format!("accumulator width {acc_cols} is not a multiple of 16*WN={}", 16 * c.wn));
    }
    if c.stages < 2 || !c.bk.is_multiple_of(16) {
        return invalid("STAGES >= 2 and BK a multiple of 16 are required".into());
    }
    if c.wgmma && (c.bk != 64 || c.wn != 1 || c.wm * 16 != c.bm || c.stages < 3 || acc_cols > 256) {
        return invalid(format!(
            "MMA=wgmma needs BK=64, WN=1, WM=BM/16 (one warpgroup per 64 rows), STAGES>=3 and at most 256 accumulator columns (got BK={}, WN={}, WM={}, BM={}, STAGES={}, {acc_cols} columns)",
            c.bk, c.wn, c.wm, c.bm, c.stages
        ));
    }
    if c.tma && spec.in_vec != 8 {
        return invalid(format!(
            "LOAD=tma needs K a multiple of 8 (the copy engine needs 16-byte row strides; this variant has in_vec={})",
            spec.in_vec
        ));
    }
    if c.tma && (!c.wgmma || c.bk != 64) {
        return invalid(format!(
            "LOAD=tma needs MMA=wgmma and BK=64 (the copy engine writes the 128-byte-swizzled rows wgmma reads; got MMA={}, BK={})",
            if c.wgmma { "wgmma" } else { "sync" },
            c.bk
        ));
    }
    // LOAD=auto on a shape the copy engine cannot serve (K not a multiple of 8): the cp.async kernel, unpaired.
    if c.cluster2 && !c.tma && load == "auto" {
        c.cluster2 = false;
    }
    if c.cluster2 && !c.tma {
        return invalid("CLUSTER=2 needs LOAD=tma (the shared operand arrives by multicast bulk tensor copies)".into());
    }
    // The producer stream and warp releases are schedules of the TMA ring: ignored where LOAD=auto runs the
    // cp.async kernel, an error on request of cp.async.
    if !c.tma && load == "auto" {
        c.ahead = None;
        c.warp_release = false;
    }
    // PRODUCER=warp (a default) is ignored where no TMA ring runs, as AHEAD=auto is.
    if !c.tma {
        c.producer_warp = false;
    }
    // AHEAD=auto (the default): STAGES-1 stages in flight on the TMA ring without a cluster; STAGES-2 for a pair,
    // whose refill then waits for a release (its peer's included) one step old instead of the one just made
    // (H200, 2026-12-04, mean1024 K3584 N6144 along m: AHEAD=2 2.1907 ms, in-loop 2.2656, AHEAD=3
    // 2.3684; along n: AHEAD=2 2.1936, AHEAD=1 2.7577).
    // With a producer warp (PRODUCER=warp) STAGES-2 as well (2026-12-04, same run, AHEAD=2 vs 3: mean256
    // 0.6153 / 0.6252 ms, mean1024 2.0600 / 2.0864, K3072 1.0408 / 1.0418, G56 mean64 0.6574 / 0.6547).
    if c.ahead == Some(AHEAD_AUTO) {
        c.ahead = c.tma.then(|| if c.cluster2 || c.producer_warp { c.stages - 2 } else { c.stages - 1 });
    }
    if !c.tma && (c.ahead.is_some() || c.warp_release) {
        return invalid(
            "AHEAD and RELEASE=warp need LOAD=tma (they schedule the mbarrier ring of the copy engine)".into(),
        );
    }
    if let Some(a) = c.ahead
        && (a < 1 || a >= c.stages)
    {
        return invalid(format!("AHEAD={a} must be in 1..=STAGES-1 = {}", c.stages - 1));
    }
    if c.producer_warp && c.ahead.is_none() {
        return invalid("PRODUCER=warp needs the producer stream (LOAD=tma and AHEAD, e.g. AHEAD=auto)".into());
    }
    if c.epi_turn && (!c.wgmma || c.wm < 8) {
        return invalid(format!(
            "EPI_TURN=on needs MMA=wgmma and two or more consumer warpgroups to take turns (WM >= 8, got MMA={}, WM={})",
            if c.wgmma { "wgmma" } else { "sync" },
            c.wm
        ));
    }
    // The turns only stagger the warpgroups where no block barrier re-aligns them: the producer stream.
    if c.ahead.is_none() {
        c.epi_turn = false;
    }
    if c.epi_turn && c.tma_store {
        return invalid("EPI_TURN=on and STORE=tma do not combine (the bulk stores synchronize the warpgroups)".into());
    }
    // The bulk-store epilogue rides on the TMA ring's kernel and needs 16-byte rows of y and whole 64-column
    // slices of the accumulator.
    if !c.tma || spec.out_vec != 8 || !acc_cols.is_multiple_of(64) {
        c.tma_store = false;
    }
    let warps = c.wm * c.wn;
    if warps > 8 {
        return invalid(format!("{warps} warps: at most 8"));
    }
    // Accumulator registers per thread (f32): keep well under the 255-register cap.
    let acc_regs = c.bm * c.bn / (32 * warps);
    if acc_regs > 128 {
        return invalid(format!("{acc_regs} accumulator registers per thread (max 128)"));
    }
    Ok(c)
}

/// Issue `acc += a @ w^T` for one shared weight tile of `bn` rows x `bk` (tile `slot` of `sw`). With `acc_up`
/// (a GLU epilogue) the top `bn/2` rows are the gate and feed `acc`, the bottom `bn/2` the up projection and
/// feed `acc_up`. `accumulate: None` uses `mma.sync`; `Some(flag)` the warpgroup path (`flag` false: the product
/// overwrites the accumulators).
#[allow(clippy::too_many_arguments)]
pub fn weight_products(
    b: &mut KernelBuilder,
    acc: TileId,
    acc_up: Option<TileId>,
    a: Operand,
    sw: SharedId,
    slot: Expr,
    bn: u32,
    bk: u32,
    accumulate: Option<Expr>,
) {
    let issue = |b: &mut KernelBuilder, t: TileId, a: Operand, w: Operand| match &accumulate {
        None => b.mma(t, a, w),
        Some(flag) => b.mma_async_init(t, a, w, flag.clone()),
    };
    if let Some(u) = acc_up {
        let half = bn / 2;
        let bg = Operand::Shared { src: b.window(sw, slot.clone(), 0, 0, half, bk), transpose: true };
        let bu = Operand::Shared { src: b.window(sw, slot, half, 0, half, bk), transpose: true };
        issue(b, acc, a.clone(), bg);
        issue(b, u, a, bu);
    } else {
        let bt = Operand::Shared { src: b.slot(sw, slot), transpose: true };
        issue(b, acc, a, bt);
    }
}

/// Build the kernel for a variant and a knob set.
pub fn build_kernel(spec: &GemmSpec, knobs: &Knobs) -> Result<Kernel, OpError> {
    let c = cfg(spec, knobs)?;
    let glu = spec.epilogue.is_glu();
    let threads = 32 * c.wm * c.wn;
    let name = format!(
        "k3k_gemm_{}{}_{}_{}_{}",
        if spec.grouped { "grouped" } else { "dense" },
        if spec.row_scale { "_p" } else { "" },
        spec.epilogue.name(),
        spec.alignment(),
        knobs.id().to_lowercase()
    );
    let mut b = KernelBuilder::new(&name, threads);
    b.knobs(knobs.clone());
    if c.producer_warp {
        b.producer_warp();
    }
    let m = b.dim("M");
    let kd = b.dim("K");
    let n = b.dim("N");
    let x = b.tensor("x", DType::Bf16, &[m.clone(), kd.clone()], Access::Read);
    let (g_count, w, offs) = if spec.grouped {
        let g = b.dim("G");
        let w = b.tensor("w", DType::Bf16, &[g.clone(), n.clone(), kd.clone()], Access::Read);
        let offs = b.tensor("offs", DType::I32, std::slice::from_ref(&g), Access::Read);
        (g, w, Some(offs))
    } else {
        let w = b.tensor("w", DType::Bf16, &[n.clone(), kd.clone()], Access::Read);
        (Expr::Int(1), w, None)
    };
    let p = spec.row_scale.then(|| b.tensor("p", DType::F32, std::slice::from_ref(&m), Access::Read));
    // Output width: N, or N/2 = NH for the GLU forms (the launcher checks N == 2*NH).
    let n_out = if glu { b.dim("NH") } else { n.clone() };
    let y = b.tensor("y", DType::Bf16, &[m.clone(), n_out.clone()], Access::Write);
    let num_sms = b.int_arg(NUM_SMS);
    if c.cluster2 {
        // Whole clusters of two: NUM_SMS (for a cluster kernel the launcher passes the CTAs resident at once in whole
        // clusters, so the persistent grid is one wave) rounded down to even, at least one cluster.
        let clusters = Expr::Bin(BinOp::Max, Box::new(num_sms.clone() / 2i64), Box::new(Expr::Int(1)));
        b.grid(clusters * 2i64, 1i64, 1i64);
        b.cluster([2, 1, 1]);
    } else {
        b.grid(num_sms, 1i64, 1i64);
    }

    let (bm, bn, bk, st) = (c.bm, c.bn, c.bk, c.stages);
    let acc_n = if glu { bn / 2 } else { bn };
    let warps = [c.wm, c.wn];
    let sa = b.shared("sA", DType::Bf16, bm, bk, st, Swizzle::Xor16B);
    let sb = b.shared("sB", DType::Bf16, bn, bk, st, Swizzle::Xor16B);
    let acc = b.tile("acc", DType::F32, bm, acc_n, warps);
    // With an odd number of slices per tile the buffers alternate across tiles too: `y_slices` counts the block's
    // bulk stores, whose parity picks the buffer (a per-tile index would rewrite the buffer of the store just
    // issued: the CPU backends, which read a store's source at its retiring wait, caught it at BN=64). With an
    // even number the slice index within the tile is the same parity.
    let staging = c.tma_store.then(|| {
        let buf = b.shared("sY", DType::Bf16, bm, SLICE, 2, Swizzle::Xor16B);
        let map = b.tensor_map("y_map", y, &[SLICE, bm], Swizzle::Xor16B);
        let odd = (acc_n / SLICE) % 2 == 1;
        (buf, map, odd.then(|| b.let_var("y_slices", 0i64)))
    });
    let acc_up = glu.then(|| b.tile("acc_up", DType::F32, bm, acc_n, warps));
    let pv = spec.row_scale.then(|| b.vec("p_rows", bm, warps));

    let n_tiles = n_out.ceil_div(acc_n as i64);
    // CLUSTER=2: the walk is over units of two sibling tiles (along M or N); a unit's CTA takes the tile of its
    // cluster rank. Both CTAs of a cluster walk the same units, so they run the same k-steps.
    let pair_m = c.cluster2 && c.pair_m;
    let pair_n = c.cluster2 && !c.pair_m;
    let unit_n = if pair_n { n_tiles.ceil_div(2i64) } else { n_tiles.clone() };
    let rank = b.cluster_rank();
    // The persistent walk: block b (cluster b/2) takes every grid-th unit.
    let (walk_first, walk_step) = if c.cluster2 {
        (Expr::block_idx(0) / 2i64, Expr::grid_dim(0) / 2i64)
    } else {
        (Expr::block_idx(0), Expr::grid_dim(0))
    };
    // Total tiles over all groups.
    let total = b.let_var("total", 0i64);
    b.for_("g", 0i64, g_count.clone(), 1i64, |b, g| {
        let rows = group_end_of(offs, &m, &g) - group_start_of(offs, &g);
        b.assign(total, Expr::Var(total) + units_of(rows, bm, pair_m, &unit_n));
    });
    let k_tiles = b.let_("k_tiles", kd.ceil_div(bk as i64));
    // Stages loaded ahead of the first product: the wgmma ring keeps one product in flight, so STAGES-2.
    let ahead = if c.wgmma { st - 2 } else { st - 1 };

    // LOAD=tma: tensor maps over x ([K, M], boxes [BK, BM]) and w ([K, N(, G)], boxes [BK, BN or BN/2 (, 1)]),
    // one full barrier per stage, and a running k-step counter `kbase` (k-steps of earlier tiles of this block),
    // so that stage use `u = kbase + kt` goes to slot `u % STAGES` and waits for phase parity `(u / STAGES) % 2`
    // whatever the tiles' K-step counts.
    let tma = c.tma.then(|| {
        // CLUSTER=2 along M: each CTA copies half of the weight tile (BN/2 rows: the gate or the up half
        // with a GLU); along N: half of the x tile (BM/2 rows).
        let half_rows = if glu || pair_m { bn / 2 } else { bn };
        let x_rows = if pair_n { bm / 2 } else { bm };
        let xm = b.tensor_map("x_map", x, &[bk, x_rows], Swizzle::Xor16B);
        let wm = if spec.grouped {
            b.tensor_map("w_map", w, &[bk, half_rows, 1], Swizzle::Xor16B)
        } else {
            b.tensor_map("w_map", w, &[bk, half_rows], Swizzle::Xor16B)
        };
        let full = b.mbarriers("full", st);
        let empty = b.mbarriers("empty", st);
        (xm, wm, full, empty)
    });
    let kbase = tma.map(|(_, _, full, empty)| {
        b.mbar_init(full, 1);
        if c.cluster2 {
            // A slot is refilled by both CTAs' copies: its release counts one arrival per warp of each CTA,
            // and both CTAs' barriers are initialized before either CTA arrives on or copies into the peer's.
            b.mbar_init(empty, 2 * (threads / 32));
            b.cluster_sync();
        } else if c.warp_release {
            b.mbar_init(empty, threads / 32);
        } else {
            b.mbar_init(empty, threads);
        }
        b.let_var("kbase", 0i64)
    });
    let stage_bytes = 2 * bk * (bm + bn);
    let ring = StageRing::new(st, c.ahead.is_some());
    let prod = c.ahead.map(|_| Producer {
        tile: b.let_var("p_tile", walk_first.clone()),
        kt: b.let_var("p_kt", 0i64),
        use_: b.let_var("p_use", 0i64),
        grp: b.let_var("p_grp", 0i64),
        r0: b.let_var("p_r0", 0i64),
        n0: b.let_var("p_n0", 0i64),
        g: b.let_var("p_g", 0i64),
        local: b.let_var("p_local", 0i64),
        from: (b.let_var("p_walk_g", 0i64), b.let_var("p_walk_seen", 0i64)),
    });
    let g = GemmKernel {
        spec,
        c: &c,
        glu,
        acc_n,
        m,
        n,
        kd,
        n_out,
        g_count,
        x,
        w,
        offs,
        p,
        y,
        sa,
        sb,
        acc,
        acc_up,
        pv,
        staging,
        pair_m,
        pair_n,
        unit_n,
        rank,
        walk_step: walk_step.clone(),
        total,
        k_tiles,
        ahead,
        tma,
        kbase,
        ring,
        stage_bytes,
        prod,
    };

    if let Some(p) = &g.prod {
        // AHEAD: the producer stream runs `AHEAD` stages ahead of the consumers over the whole walk (the
        // loads of a tile's first stages are issued during the previous tile's last k-steps), so the walk has
        // no prologue per tile and no block barrier; the consumers find their tiles with a forward search
        // (OVERLAP=on: the next tile's, while the current tile's last product is in flight).
        // (PRODUCER=warp: the stream's first stages and every later one come from the producer warp.)
        b.producer_if(c.producer_warp, |b| {
            b.if_(Expr::Var(p.tile).lt(Expr::Var(total)), |b| g.locate(b, p));
            b.for_("s", 0i64, c.ahead.unwrap_or(1) as i64, 1i64, |b, _| g.produce(b, p));
        });
        let from = (b.let_var("walk_g", 0i64), b.let_var("walk_seen", 0i64));
        if c.overlap {
            let cur_grp = b.let_var("cur_grp", 0i64);
            let cur_local = b.let_var("cur_local", 0i64);
            let first = walk_first.clone();
            b.if_(first.lt(Expr::Var(total)), |b| g.search(b, first.clone(), cur_grp, cur_local, Some(from)));
            b.for_("tile", walk_first.clone(), total, walk_step.clone(), |b, t| {
                let cs = g.coords(b, Expr::Var(cur_grp), Expr::Var(cur_local));
                let next = &t + walk_step.clone();
                let nxt_grp = b.let_var("nxt_grp", 0i64);
                let nxt_local = b.let_var("nxt_local", 0i64);
                g.main_loop(b, &cs, &|b: &mut KernelBuilder| {
                    b.if_(next.lt(Expr::Var(total)), |b| g.search(b, next.clone(), nxt_grp, nxt_local, Some(from)))
                });
                g.advance(b);
                g.epilogue(b, &cs);
                b.assign(cur_grp, Expr::Var(nxt_grp));
                b.assign(cur_local, Expr::Var(nxt_local));
            });
        } else {
            b.for_("tile", walk_first.clone(), total, walk_step.clone(), |b, t| {
                let grp = b.let_var("grp", 0i64);
                let local = b.let_var("local", 0i64);
                g.search(b, t, grp, local, Some(from));
                let cs = g.coords(b, Expr::Var(grp), Expr::Var(local));
                g.main_loop(b, &cs, &|_: &mut KernelBuilder| {});
                g.advance(b);
                g.epilogue(b, &cs);
            });
        }
    } else if c.overlap {
        // Software-pipelined tile walk: the next tile's group search runs while the current tile's last product
        // is in flight (and starts where the previous search ended), and its first stages are issued before the
        // current tile's epilogue, so the refill latency is hidden behind the epilogue.
        let from = (b.let_var("walk_g", 0i64), b.let_var("walk_seen", 0i64));
        let cur_grp = b.let_var("cur_grp", 0i64);
        let cur_local = b.let_var("cur_local", 0i64);
        let first = walk_first.clone();
        b.if_(first.lt(Expr::Var(total)), |b| {
            g.search(b, first.clone(), cur_grp, cur_local, Some(from));
            let cs = g.coords(b, Expr::Var(cur_grp), Expr::Var(cur_local));
            g.prologue(b, Some(&cs));
        });
        b.if_(first.ge(Expr::Var(total)), |b| g.prologue(b, None));
        b.for_("tile", walk_first.clone(), total, walk_step.clone(), |b, t| {
            let cs = g.coords(b, Expr::Var(cur_grp), Expr::Var(cur_local));
            let next = &t + walk_step.clone();
            let nxt_grp = b.let_var("nxt_grp", 0i64);
            let nxt_local = b.let_var("nxt_local", 0i64);
            // The search runs while the tile's last product is still in flight.
            g.main_loop(b, &cs, &|b: &mut KernelBuilder| {
                b.if_(next.lt(Expr::Var(total)), |b| g.search(b, next.clone(), nxt_grp, nxt_local, Some(from)))
            });
            g.advance(b);
            // Every warp is done reading the shared tiles before the next tile's first stages overwrite them.
            b.barrier();
            // One commit group per stage on both branches (the conditions are block-uniform).
            b.if_(next.lt(Expr::Var(total)), |b| {
                let ns = g.coords(b, Expr::Var(nxt_grp), Expr::Var(nxt_local));
                g.prologue(b, Some(&ns));
            });
            b.if_(next.ge(Expr::Var(total)), |b| g.prologue(b, None));
            g.epilogue(b, &cs);
            b.assign(cur_grp, Expr::Var(nxt_grp));
            b.assign(cur_local, Expr::Var(nxt_local));
        });
        if !c.tma {
            b.wait(0);
        }
    } else {
        b.for_("tile", walk_first.clone(), total, walk_step.clone(), |b, t| {
            let grp = b.let_var("grp", 0i64);
            let local = b.let_var("local", 0i64);
            g.search(b, t, grp, local, None);
            let cs = g.coords(b, Expr::Var(grp), Expr::Var(local));
            g.prologue(b, Some(&cs));
            g.main_loop(b, &cs, &|_: &mut KernelBuilder| {});
            if c.tma {
                g.advance(b);
            } else {
                b.wait(0);
            }
            g.epilogue(b, &cs);
            // Every warp must be done reading shared tiles before the next tile's prologue overwrites them.
            b.barrier();
        });
    }
    if c.cluster2 {
        // No CTA exits while its peer may still arrive on its barriers or copy into its shared memory.
        b.cluster_sync();
    }
    Ok(b.finish()?)
}

/// STORE=tma: two staging buffers of 64 output columns (128-byte rows, the 128-byte swizzle of the map).
const SLICE: u32 = 64;

/// A tile's coordinates from its group and local index.
struct Coords {
    /// First row of x (and y) of the tile.
    r0: Expr,
    /// Rows of the tile inside its group (may exceed BM).
    rows_valid: Expr,
    /// First output column.
    n0: Expr,
    /// Offset of the group's weight matrix.
    w_base: Expr,
    /// The group (the outer coordinate of the weights' tensor map).
    grp: Expr,
    /// CLUSTER=2: the tile lies inside its group and the output (a sibling past the end only copies its
    /// share of the operand and takes part in the barriers).
    valid: Expr,
}

/// AHEAD=a: the producer's own cursor over the block's tile walk (every thread keeps it, block-uniform; thread
/// 0 issues): the tile and k-step it loads next, that tile's coordinates, its next stage use, and the state
/// of its forward group search.
struct Producer {
    tile: VarId,
    kt: VarId,
    use_: VarId,
    grp: VarId,
    r0: VarId,
    n0: VarId,
    g: VarId,
    local: VarId,
    from: (VarId, VarId),
}

/// The first row of group `g` (grouped: `offs[g - 1]`, 0 for the first group).
fn group_start_of(offs: Option<TensorId>, g: &Expr) -> Expr {
    match offs {
        Some(o) => Expr::select(g.gt(0i64), Expr::Load { tensor: o, index: Box::new(g - 1i64) }, Expr::Int(0)),
        None => Expr::Int(0),
    }
}

/// The end of group `g`'s rows (grouped: `offs[g]`; dense: `M`).
fn group_end_of(offs: Option<TensorId>, m: &Expr, g: &Expr) -> Expr {
    match offs {
        Some(o) => Expr::Load { tensor: o, index: Box::new(g.clone()) },
        None => m.clone(),
    }
}

/// The walk's units of a group of `rows` rows (CLUSTER=2 along M: pairs of m-tiles) times the units per row of
/// tiles.
fn units_of(rows: Expr, bm: u32, pair_m: bool, unit_n: &Expr) -> Expr {
    let mt = rows.ceil_div(bm as i64);
    (if pair_m { mt.ceil_div(2i64) } else { mt }) * unit_n.clone()
}

/// What the GEMM's tile walk shares ([`build_kernel`]): the problem, the knobs, the tensors, the stage ring and
/// its barriers, the accumulators, the walk's bounds and the producer's cursor.
struct GemmKernel<'a> {
    spec: &'a GemmSpec,
    c: &'a Cfg,
    glu: bool,
    /// Accumulator columns (BN, or BN/2 with a GLU).
    acc_n: u32,
    m: Expr,
    n: Expr,
    kd: Expr,
    n_out: Expr,
    g_count: Expr,
    x: TensorId,
    w: TensorId,
    offs: Option<TensorId>,
    p: Option<TensorId>,
    y: TensorId,
    sa: SharedId,
    sb: SharedId,
    acc: TileId,
    acc_up: Option<TileId>,
    pv: Option<VecId>,
    staging: Option<(SharedId, TmapId, Option<VarId>)>,
    pair_m: bool,
    pair_n: bool,
    unit_n: Expr,
    rank: Expr,
    walk_step: Expr,
    total: VarId,
    k_tiles: Expr,
    /// Stages loaded ahead of the first product.
    ahead: u32,
    tma: Option<(TmapId, TmapId, MbarId, MbarId)>,
    kbase: Option<VarId>,
    ring: StageRing,
    stage_bytes: u32,
    prod: Option<Producer>,
}

impl GemmKernel<'_> {
    fn group_start(&self, g: &Expr) -> Expr {
        group_start_of(self.offs, g)
    }

    fn group_end(&self, g: &Expr) -> Expr {
        group_end_of(self.offs, &self.m, g)
    }

    fn units(&self, rows: Expr) -> Expr {
        units_of(rows, self.c.bm, self.pair_m, &self.unit_n)
    }

    /// The ring use of k-step `kt` (LOAD=tma: after the block's earlier tiles' k-steps).
    fn use_of(&self, kt: &Expr) -> Expr {
        match self.kbase {
            Some(v) => Expr::Var(v) + kt.clone(),
            None => kt.clone(),
        }
    }

    /// After a tile's K loop: its k-steps are behind the block.
    fn advance(&self, b: &mut KernelBuilder) {
        if let Some(v) = self.kbase {
            b.assign(v, Expr::Var(v) + self.k_tiles.clone());
        }
    }

    /// The ring slot of stage use `u` and the parity of its phase. AHEAD (whose uses are never negative) with a
    /// power-of-two STAGES: a mask and a shift (the measured in-loop schedule keeps its expressions).
    fn slot_of(&self, u: Expr) -> Expr {
        self.ring.slot(u)
    }

    fn phase_of(&self, u: Expr) -> Expr {
        self.ring.phase(u)
    }

    fn load_stage(&self, b: &mut KernelBuilder, cs: &Coords, kt: Expr) {
        self.load_stage_at(b, cs, kt.clone(), self.use_of(&kt));
    }

    /// Find tile `t`'s group and its index inside the group: `grp`, `local`. With `from = (g0, seen0)` the walk
    /// starts at group `g0`, before which `seen0` tiles lie (a block's tiles only move forward), and updates both.
    fn search(&self, b: &mut KernelBuilder, t: Expr, grp: VarId, local: VarId, from: Option<(VarId, VarId)>) {
        let g_count = &self.g_count;
        let (start, seen_init) = match from {
            Some((g0, s0)) => (Expr::Var(g0), Expr::Var(s0)),
            None => (Expr::Int(0), Expr::Int(0)),
        };
        let seen = b.let_var("seen", seen_init);
        let found = from.map(|_| b.let_var("found_seen", 0i64));
        // Once the tile's group is behind (`seen > t`), the remaining groups cost a compare each: no `offs`
        // loads, no tile counts (the walk is a forward scan that finds its group within a group or two, but
        // the IR's loops run to their end; ncu, 2026-12-04: the unguarded scan ran ~830 instructions per warp
        // per tile at G28, with its dependent loads longer than the product it overlaps).
        b.for_("g", start, g_count.clone(), 1i64, |b, g| {
            b.if_(t.ge(Expr::Var(seen)), |b| {
                let rows = self.group_end(&g) - self.group_start(&g);
                let tg = b.let_("tg", self.units(rows));
                b.if_(t.lt(Expr::Var(seen) + tg.clone()), |b| {
                    b.assign(grp, g.clone());
                    b.assign(local, &t - Expr::Var(seen));
                    if let Some(f) = found {
                        b.assign(f, Expr::Var(seen));
                    }
                });
                b.assign(seen, Expr::Var(seen) + tg);
            });
        });
        if let (Some((g0, s0)), Some(f)) = (from, found) {
            b.assign(g0, Expr::Var(grp));
            b.assign(s0, Expr::Var(f));
        }
    }

    /// A tile's coordinates from its group and local index.
    fn coords(&self, b: &mut KernelBuilder, grp: Expr, local: Expr) -> Coords {
        let (c, bm, acc_n, pair_m, pair_n) = (self.c, self.c.bm, self.acc_n, self.pair_m, self.pair_n);
        let (unit_n, rank, n, kd, n_out) = (&self.unit_n, &self.rank, &self.n, &self.kd, &self.n_out);
        let row0 = b.let_("row0", self.group_start(&grp));
        let rows_g = b.let_("rows_g", self.group_end(&grp) - row0.clone());
        let m_tiles = rows_g.ceil_div(bm as i64);
        let unit_m = if pair_m { m_tiles.ceil_div(2i64) } else { m_tiles };
        let (mt, nt) = if c.raster_m {
            (local.clone() % unit_m.clone(), local / unit_m)
        } else {
            (local.clone() / unit_n.clone(), local % unit_n.clone())
        };
        let (mt, nt) = if pair_m {
            (mt * 2i64 + rank.clone(), nt)
        } else if pair_n {
            (mt, nt * 2i64 + rank.clone())
        } else {
            (mt, nt)
        };
        let m0 = b.let_("m0", mt * bm as i64);
        let n0 = b.let_("n0", nt * acc_n as i64);
        let rows_valid = b.let_("rows_valid", rows_g - m0.clone());
        let w_base = b.let_("w_base", grp.clone() * n.clone() * kd.clone());
        let r0 = b.let_("r0", row0 + m0);
        let valid = if pair_m {
            rows_valid.gt(0i64)
        } else if pair_n {
            n0.lt(n_out.clone())
        } else {
            Expr::Bool(true)
        };
        Coords { r0, rows_valid, n0, w_base, grp, valid }
    }

    /// Release a slot to the producers: every thread (CLUSTER=1), one arrival per warp (RELEASE=warp: rank 0 of
    /// the one-CTA cluster is the block itself), or one arrival per warp on both CTAs' barrier (CLUSTER=2).
    fn release(&self, b: &mut KernelBuilder, empty: MbarId, slot: Expr) {
        let c = self.c;
        if c.cluster2 {
            b.mbar_arrive_cluster(empty, slot.clone(), 0i64);
            b.mbar_arrive_cluster(empty, slot, 1i64);
        } else if c.warp_release {
            b.mbar_arrive_cluster(empty, slot, 0i64);
        } else {
            b.mbar_arrive(empty, slot);
        }
    }

    /// Load k-step `kt` of tile `cs` as stage use `use_` of the ring: slot `use_ % STAGES` (LOAD=tma: waiting for
    /// that use's empty phase and completing on its full barrier; the cp.async path is called with `use_ = kt`).
    fn load_stage_at(&self, b: &mut KernelBuilder, cs: &Coords, kt: Expr, use_: Expr) {
        let (spec, c, glu, pair_m, rank) = (self.spec, self.c, self.glu, self.pair_m, &self.rank);
        let (bm, bn, bk, stage_bytes) = (c.bm, c.bn, c.bk, self.stage_bytes);
        let (x, w, sa, sb, tma, ring) = (self.x, self.w, self.sa, self.sb, self.tma, &self.ring);
        let (n, kd, n_out) = (&self.n, &self.kd, &self.n_out);
        let slot = self.slot_of(use_.clone());
        if let Some((xm, wm, full, empty)) = tma {
            // The producer (thread 0) waits until every thread has released the slot's previous use (`use -
            // STAGES`: phase `use / STAGES - 1` of its empty barrier; a fresh barrier passes parity 1 at once).
            b.mbar_wait_elected(empty, slot.clone(), ring.empty_parity(use_));
            let k0 = kt * bk as i64;
            // (CLUSTER=2: the full stage, half of the shared operand from each CTA of the pair.)
            b.mbar_arrive_expect_tx(full, slot.clone(), stage_bytes);
            let wc = |row: Expr| -> Vec<Expr> {
                if spec.grouped { vec![k0.clone(), row, cs.grp.clone()] } else { vec![k0.clone(), row] }
            };
            if c.cluster2 {
                // Rank r copies half r of the shared operand into both CTAs (mask 0b11); the other operand is
                // its own. Rows past the group's end come from the next group (or read zero past M).
                for r in 0..2u32 {
                    b.if_(rank.eq(r as i64), |b| {
                        if pair_m {
                            b.tma_load(
                                xm,
                                b.slot(sa, slot.clone()),
                                vec![k0.clone(), cs.r0.clone()],
                                full,
                                slot.clone(),
                            );
                            let half = bn / 2;
                            let row = if glu {
                                if r == 0 { cs.n0.clone() } else { n_out.clone() + cs.n0.clone() }
                            } else {
                                cs.n0.clone() + (r * half) as i64
                            };
                            let dst = b.window(sb, slot.clone(), r * half, 0, half, bk);
                            b.tma_load_multicast(wm, dst, wc(row), full, slot.clone(), 3i64);
                        } else {
                            let half = bm / 2;
                            let dst = b.window(sa, slot.clone(), r * half, 0, half, bk);
                            let coords = vec![k0.clone(), cs.r0.clone() + (r * half) as i64];
                            b.tma_load_multicast(xm, dst, coords, full, slot.clone(), 3i64);
                            if glu {
                                let h = bn / 2;
                                let g_dst = b.window(sb, slot.clone(), 0, 0, h, bk);
                                let u_dst = b.window(sb, slot.clone(), h, 0, h, bk);
                                b.tma_load(wm, g_dst, wc(cs.n0.clone()), full, slot.clone());
                                b.tma_load(wm, u_dst, wc(n_out.clone() + cs.n0.clone()), full, slot.clone());
                            } else {
                                b.tma_load(wm, b.slot(sb, slot.clone()), wc(cs.n0.clone()), full, slot.clone());
                            }
                        }
                    });
                }
                return;
            }
            // Rows past the group's end come from the next group (or read zero past M): never stored.
            b.tma_load(xm, b.slot(sa, slot.clone()), vec![k0.clone(), cs.r0.clone()], full, slot.clone());
            if glu {
                let half = bn / 2;
                let g_dst = b.window(sb, slot.clone(), 0, 0, half, bk);
                let u_dst = b.window(sb, slot.clone(), half, 0, half, bk);
                b.tma_load(wm, g_dst, wc(cs.n0.clone()), full, slot.clone());
                b.tma_load(wm, u_dst, wc(n_out.clone() + cs.n0.clone()), full, slot);
            } else {
                b.tma_load(wm, b.slot(sb, slot.clone()), wc(cs.n0.clone()), full, slot);
            }
            return;
        }
        let k0 = kt * bk as i64;
        let a_src = view(
            x,
            cs.r0.clone() * kd.clone() + k0.clone(),
            kd.clone(),
            cs.rows_valid.clone(),
            kd.clone() - k0.clone(),
            spec.in_vec,
        );
        let a_dst = b.slot(sa, slot.clone());
        b.copy_async(a_dst, a_src);
        if glu {
            // Gate rows n0.. and up rows NH+n0.. share one shared tile (top and bottom halves).
            let half = bn / 2;
            let g_src = view(
                w,
                cs.w_base.clone() + cs.n0.clone() * kd.clone() + k0.clone(),
                kd.clone(),
                n_out.clone() - cs.n0.clone(),
                kd.clone() - k0.clone(),
                spec.in_vec,
            );
            let u_src = view(
                w,
                cs.w_base.clone() + (n_out.clone() + cs.n0.clone()) * kd.clone() + k0.clone(),
                kd.clone(),
                n_out.clone() - cs.n0.clone(),
                kd.clone() - k0.clone(),
                spec.in_vec,
            );
            let g_dst = b.window(sb, slot.clone(), 0, 0, half, bk);
            let u_dst = b.window(sb, slot, half, 0, half, bk);
            b.copy_async(g_dst, g_src);
            b.copy_async(u_dst, u_src);
        } else {
            let b_src = view(
                w,
                cs.w_base.clone() + cs.n0.clone() * kd.clone() + k0.clone(),
                kd.clone(),
                n.clone() - cs.n0.clone(),
                kd.clone() - k0,
                spec.in_vec,
            );
            let b_dst = b.slot(sb, slot);
            b.copy_async(b_dst, b_src);
        }
    }

    /// The producer finds the coordinates of its tile (`p_tile < total`).
    fn locate(&self, b: &mut KernelBuilder, p: &Producer) {
        self.search(b, Expr::Var(p.tile), p.g, p.local, Some(p.from));
        let cs = self.coords(b, Expr::Var(p.g), Expr::Var(p.local));
        b.assign(p.grp, cs.grp);
        b.assign(p.r0, cs.r0);
        b.assign(p.n0, cs.n0);
    }

    /// Issue the producer's next stage (if its walk is not over) and advance its cursor, moving to its next
    /// tile after the last k-step. No stage at all when K = 0 (the consumers run no k-steps either).
    fn produce(&self, b: &mut KernelBuilder, p: &Producer) {
        let (total, k_tiles, walk_step) = (self.total, &self.k_tiles, &self.walk_step);
        b.if_(Expr::Var(p.tile).lt(Expr::Var(total)).and(k_tiles.gt(0i64)), |b| {
            let pc = Coords {
                r0: Expr::Var(p.r0),
                rows_valid: Expr::Int(0),
                n0: Expr::Var(p.n0),
                w_base: Expr::Int(0),
                grp: Expr::Var(p.grp),
                valid: Expr::Bool(true),
            };
            self.load_stage_at(b, &pc, Expr::Var(p.kt), Expr::Var(p.use_));
            b.assign(p.use_, Expr::Var(p.use_) + 1i64);
            b.assign(p.kt, Expr::Var(p.kt) + 1i64);
            b.if_(Expr::Var(p.kt).ge(k_tiles.clone()), |b| {
                b.assign(p.kt, 0i64);
                b.assign(p.tile, Expr::Var(p.tile) + walk_step.clone());
                b.if_(Expr::Var(p.tile).lt(Expr::Var(total)), |b| self.locate(b, p));
            });
        });
    }

    /// The stages before the first product; one commit group per stage whether or not it loads.
    fn prologue(&self, b: &mut KernelBuilder, cs: Option<&Coords>) {
        let (c, ahead, k_tiles) = (self.c, self.ahead, &self.k_tiles);
        for s in 0..ahead {
            if let Some(cs) = cs {
                b.if_(Expr::Int(s as i64).lt(k_tiles.clone()), |b| self.load_stage(b, cs, Expr::Int(s as i64)));
            }
            if !c.tma {
                b.commit();
            }
        }
    }

    /// The K loop of one tile; ends with every product complete (but shared tiles possibly still being read by
    /// other warps: a barrier must precede any refill). `tail` runs after the last product is issued and before it
    /// is waited for (scalar work to overlap it).
    fn main_loop(&self, b: &mut KernelBuilder, cs: &Coords, tail: &dyn Fn(&mut KernelBuilder)) {
        let (c, st, bn, bk) = (self.c, self.c.stages, self.c.bn, self.c.bk);
        let (acc, acc_up, sa, sb, tma, k_tiles, prod) =
            (self.acc, self.acc_up, self.sa, self.sb, self.tma, &self.k_tiles, &self.prod);
        if !c.wgmma {
            b.map(acc, 0.0f64);
            if let Some(u) = acc_up {
                b.map(u, 0.0f64);
            }
        }
        if c.wgmma {
            // Warpgroup MMA pipeline: a stage's shared tile is refilled two iterations after its product was
            // issued (by then every warpgroup has waited for it), so STAGES-2 loads and one product are in flight.
            let groups = if acc_up.is_some() { 2 } else { 1 };
            b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
                if !c.tma {
                    b.wait(st - 3);
                    // Every warpgroup is done with the product that last read the slot refilled here.
                    b.barrier();
                }
                // (LOAD=tma: the producer waits for the slot's empty barrier instead.)
                if prod.is_none() {
                    let next = &kt + (st - 2) as i64;
                    b.if_(next.lt(k_tiles.clone()), |b| self.load_stage(b, cs, next.clone()));
                }
                let slot = self.slot_of(self.use_of(&kt));
                if let Some((_, _, full, _)) = tma {
                    b.mbar_wait(full, slot.clone(), self.phase_of(self.use_of(&kt)));
                } else {
                    b.commit();
                }
                let a = Operand::Shared { src: b.slot(sa, slot.clone()), transpose: false };
                // The first product of a tile overwrites the accumulators (no zeroing instructions).
                let accumulate = kt.gt(0i64);
                if c.cluster2 {
                    // An idle sibling (past its group's end) runs no products.
                    b.if_(cs.valid.clone(), |b| weight_products(b, acc, acc_up, a, sb, slot, bn, bk, Some(accumulate)));
                } else {
                    weight_products(b, acc, acc_up, a, sb, slot, bn, bk, Some(accumulate));
                }
                b.mma_wait(groups);
                // The previous k-step's products are complete: release their slot to the producer.
                if let Some((_, _, _, empty)) = tma {
                    b.if_(kt.gt(0i64), |b| self.release(b, empty, self.slot_of(self.use_of(&kt) - 1i64)));
                }
                // AHEAD: the producer's next stage, into the slot released `STAGES - AHEAD` uses ago (at
                // AHEAD = STAGES-1 the one just released: thread 0 waits for the other warps' releases while
                // this step's products run).
                if let Some(p) = &prod {
                    b.producer_if(c.producer_warp, |b| self.produce(b, p));
                }
            });
            tail(b);
            b.mma_wait(0);
            if let Some((_, _, _, empty)) = tma {
                let last = self.use_of(&(k_tiles.clone() - 1i64));
                b.if_(k_tiles.gt(0i64), |b| self.release(b, empty, self.slot_of(last)));
            }
            // K = 0: no product ran, the result is zero.
            b.if_(k_tiles.le(0i64), |b| {
                b.map(acc, 0.0f64);
                if let Some(u) = acc_up {
                    b.map(u, 0.0f64);
                }
            });
        } else {
            b.for_("kt", 0i64, k_tiles.clone(), 1i64, |b, kt| {
                b.wait(st - 2);
                b.barrier();
                let next = &kt + (st - 1) as i64;
                b.if_(next.lt(k_tiles.clone()), |b| self.load_stage(b, cs, next.clone()));
                b.commit();
                let slot = &kt % st as i64;
                let a = Operand::Shared { src: b.slot(sa, slot.clone()), transpose: false };
                weight_products(b, acc, acc_up, a, sb, slot, bn, bk, None);
            });
            tail(b);
        }
    }

    /// Epilogue: the fused GLU and routing weight from the accumulator registers, then the bf16 store.
    fn epilogue_tile(&self, b: &mut KernelBuilder, cs: &Coords) {
        let (spec, bm, acc_n, n_out) = (self.spec, self.c.bm, self.acc_n, &self.n_out);
        let (y, p, pv, acc, acc_up, staging) = (self.y, self.p, self.pv, self.acc, self.acc_up, self.staging);
        let out_rows = view(
            y,
            cs.r0.clone() * n_out.clone() + cs.n0.clone(),
            n_out.clone(),
            cs.rows_valid.clone(),
            n_out.clone() - cs.n0.clone(),
            spec.out_vec,
        );
        if let Some(u) = acc_up {
            let a = Expr::Elem(acc);
            let bb = Expr::Elem(u);
            let h = match spec.epilogue {
                Epilogue::SituGlu => (&a * 0.25f64).tanh() * 4.0f64 * a.sigmoid() * ((&bb * 0.04f64).tanh() * 25.0f64),
                Epilogue::SwiGlu => a.silu() * bb,
                Epilogue::None => unreachable!(),
            };
            b.map(acc, h);
        }
        if let (Some(pv), Some(p)) = (pv, p) {
            b.load_vec(pv, vec_view(p, cs.r0.clone(), 1i64, cs.rows_valid.clone()));
            b.map(acc, Expr::Elem(acc) * Expr::RowVal(pv));
        }
        match staging {
            // A tile whose rows all lie in its group leaves as bulk stores of 64 columns, alternating between
            // the two staging buffers: before a buffer is rewritten, the store that read it two slices ago
            // (possibly the previous tile's) has finished reading; the last ones drain under the next tile.
            Some((sy, ymap, slices)) => {
                let full = cs.rows_valid.ge(bm as i64);
                b.if_(full.clone(), |b| {
                    for j in 0..acc_n / SLICE {
                        let parity = match slices {
                            Some(v) => Expr::Var(v).bitand(1i64),
                            None => Expr::Int((j % 2) as i64),
                        };
                        let buf = b.window(sy, parity, 0, 0, bm, SLICE);
                        b.tma_store_wait(1);
                        b.store_cols(acc, j * SLICE, buf.clone());
                        b.tma_store(ymap, buf, vec![cs.n0.clone() + (j * SLICE) as i64, cs.r0.clone()]);
                        if let Some(v) = slices {
                            b.assign(v, Expr::Var(v) + 1i64);
                        }
                    }
                });
                b.if_(full.not(), |b| b.store(acc, Place::Global(out_rows)));
            }
            None => b.store(acc, Place::Global(out_rows)),
        }
    }

    /// An idle sibling of a cluster stores nothing. EPI_TURN: one warpgroup at a time.
    fn epilogue(&self, b: &mut KernelBuilder, cs: &Coords) {
        let c = self.c;
        b.in_turn_if(c.epi_turn, |b| {
            if c.cluster2 {
                b.if_(cs.valid.clone(), |b| self.epilogue_tile(b, cs));
            } else {
                self.epilogue_tile(b, cs);
            }
        });
    }
}
// ------------------------------------------------------------------------------------------------------------
// Problems, inputs, checks.

use crate::data;
use crate::dims::{self, DimDecl};
use crate::op::{CheckReport, Instance, Operator, Preset, Work};
use crate::plan::{Outputs, Plan};
use k3k_reference::gemm as refgemm;
use k3k_reference::metrics::Tolerance;
use rand::Rng;
use rand::rngs::StdRng;

/// The `latent_moe_gemm` operator.
pub struct LatentMoeGemm;

/// Ragged group sizes drawn around `mean` (first group empty, multiples of `align`), deterministic for a seed.
pub fn ragged_counts(g: usize, mean: usize, align: usize, seed: u64) -> Vec<usize> {
    let u = data::uniform(g, 0.0, 2.0, seed);
    u.iter()
        .enumerate()
        .map(|(i, v)| if i == 0 { 0 } else { ((v * mean as f32).round() as usize / align) * align })
        .collect()
}

fn epilogue_of(code: i64) -> Result<Epilogue, OpError> {
    match code {
        0 => Ok(Epilogue::None),
        1 => Ok(Epilogue::SituGlu),
        2 => Ok(Epilogue::SwiGlu),
        _ => Err(OpError::BadInput {
            op: "latent_moe_gemm",
            arg: "epilogue".into(),
            why: format!("unknown code {code}"),
        }),
    }
}

/// The dims of `latent_moe_gemm` presets (see [`GemmProblem::from_preset`]).
pub const DIMS: &[DimDecl] = &[
    DimDecl::required("K", 1, dims::MAX_COLS, "reduction dim"),
    DimDecl::required("N", 1, dims::MAX_COLS, "output columns (a GLU epilogue halves them)"),
    DimDecl::optional("M", 0, dims::MAX_ROWS, "rows of a dense product (instead of G)"),
    DimDecl::optional("G", 1, dims::MAX_GROUPS, "groups (routed experts)"),
    DimDecl::optional("mean", 0, dims::MAX_ROWS, "mean rows per group, drawn ragged (with G)"),
    DimDecl::optional("seed", 0, i64::MAX, "seed of the ragged draw (with mean)"),
    DimDecl::indexed("c", "G", 0, dims::MAX_ROWS, "rows of group i (instead of mean)"),
    DimDecl::optional("epilogue", 0, 2, "0 none, 1 SiTU-GLU, 2 SwiGLU"),
    DimDecl::flag("p", "1: routing weights scale each row"),
];

/// The elements of a `latent_moe_gemm` or `mxfp4_matmul` problem: weights, activations and outputs (rows of a
/// ragged draw count up to twice the mean).
pub fn gemm_footprint(p: &Preset) -> f64 {
    let (k, n) = (dims::size(p, "K", 0), dims::size(p, "N", 0));
    let g = if p.dims.contains_key("M") { 1.0 } else { dims::size(p, "G", 0) };
    let m = if p.dims.contains_key("M") {
        dims::size(p, "M", 0)
    } else if p.dims.contains_key("c0") {
        dims::family_sum(p, "c", g)
    } else if p.dims.contains_key("per") {
        g * dims::size(p, "per", 0)
    } else {
        2.0 * g * dims::size(p, "mean", 0)
    };
    g * n * k + m * k + m * n
}

/// A concrete problem.
#[derive(Clone, Debug)]
pub struct GemmProblem {
    pub grouped: bool,
    pub counts: Vec<usize>,
    pub k: usize,
    pub n: usize,
    pub epilogue: Epilogue,
    pub row_scale: bool,
}

impl GemmProblem {
    /// Resolve a preset: dims `G`, `K`, `N`, and either `mean` (+ `seed`) for drawn ragged counts or `M` for a
    /// dense product; optional `epilogue` (0 none, 1 SiTU-GLU, 2 SwiGLU) and `p` (1 = routing weights).
    pub fn from_preset(p: &Preset) -> Result<Self, OpError> {
        let k = p.get("K")? as usize;
        let n = p.get("N")? as usize;
        let epilogue = epilogue_of(p.get_or("epilogue", 0))?;
        let row_scale = p.get_or("p", 0) == 1;
        let (grouped, counts) = if let Some(&m) = p.dims.get("M") {
            (false, vec![m as usize])
        } else if p.dims.contains_key("c0") {
            let g = p.get("G")? as usize;
            (true, (0..g).map(|i| p.get_or(&format!("c{i}"), 0) as usize).collect())
        } else {
            let g = p.get("G")? as usize;
            (true, ragged_counts(g, p.get("mean")? as usize, 8, p.get_or("seed", 1) as u64))
        };
        if epilogue.is_glu() && !n.is_multiple_of(2) {
            return Err(OpError::BadInput {
                op: "latent_moe_gemm",
                arg: "N".into(),
                why: format!("a GLU epilogue needs an even N, got {n}"),
            });
        }
        Ok(GemmProblem { grouped, counts, k, n, epilogue, row_scale })
    }
    /// Total rows.
    pub fn m(&self) -> usize {
        self.counts.iter().sum()
    }
    /// Output columns.
    pub fn n_out(&self) -> usize {
        if self.epilogue.is_glu() { self.n / 2 } else { self.n }
    }
    /// The kernel variant.
    pub fn spec(&self) -> GemmSpec {
        GemmSpec::for_shape(self.grouped, self.epilogue, self.row_scale, self.k, self.n_out())
    }
    /// Inclusive cumulative group ends.
    pub fn offs(&self) -> Vec<i64> {
        self.counts
            .iter()
            .scan(0i64, |s, c| {
                *s += *c as i64;
                Some(*s)
            })
            .collect()
    }
}

struct GemmInstance {
    pb: GemmProblem,
    x: Vec<f32>,
    w: Vec<f32>,
    p: Option<Vec<f32>>,
    plan_inputs: Vec<(String, k3k_ir::HostTensor)>,
    seed: u64,
}

impl Operator for LatentMoeGemm {
    fn name(&self) -> &'static str {
        "latent_moe_gemm"
    }
    fn summary(&self) -> &'static str {
        "grouped GEMM over ragged routed experts (and dense GEMM), bf16 in, f32 accumulate, fused SiTU-GLU/SwiGLU and routing weight"
    }
    fn knob_space(&self) -> KnobSpace {
        knob_space()
    }
    fn default_knobs(&self) -> Knobs {
        default_knobs()
    }
    fn bench_presets(&self) -> Vec<Preset> {
        vec![
            Preset::new("G28 mean256 K3584 N6144", &[("G", 28), ("mean", 256), ("K", 3584), ("N", 6144)]),
            Preset::new("G28 mean1024 K3584 N6144", &[("G", 28), ("mean", 1024), ("K", 3584), ("N", 6144)]),
            Preset::new("G28 mean1024 K3072 N3584", &[("G", 28), ("mean", 1024), ("K", 3072), ("N", 3584)]),
            Preset::new("G56 mean64 K3584 N6144", &[("G", 56), ("mean", 64), ("K", 3584), ("N", 6144)]),
            Preset::new(
                "G28 mean256 K3584 N6144 situ_glu+p",
                &[("G", 28), ("mean", 256), ("K", 3584), ("N", 6144), ("epilogue", 1), ("p", 1)],
            ),
        ]
    }
    fn random_case(&self, rng: &mut StdRng) -> Preset {
        const EDGE: [i64; 9] = [1, 15, 16, 17, 31, 63, 64, 65, 130];
        let pick = |rng: &mut StdRng| -> i64 {
            if rng.random_bool(0.5) { EDGE[rng.random_range(0..EDGE.len())] } else { rng.random_range(1..=160) }
        };
        let k = pick(rng);
        let epilogue = rng.random_range(0..3i64);
        let mut n = pick(rng);
        if epilogue != 0 && n % 2 == 1 {
            n += 1;
        }
        let p = rng.random_bool(0.5) as i64;
        if rng.random_bool(0.15) {
            let m = pick(rng);
            return Preset::new(
                &format!("dense M{m} K{k} N{n} epi{epilogue} p{p}"),
                &[("M", m), ("K", k), ("N", n), ("epilogue", epilogue), ("p", p)],
            );
        }
        let g = rng.random_range(1..=6i64);
        let mut dims = vec![
            ("G".to_string(), g),
            ("K".to_string(), k),
            ("N".to_string(), n),
            ("epilogue".to_string(), epilogue),
            ("p".to_string(), p),
        ];
        let mut desc = String::new();
        for i in 0..g {
            let c = if rng.random_bool(0.25) { 0 } else { pick(rng) };
            dims.push((format!("c{i}"), c));
            desc.push_str(&format!("{c},"));
        }
        Preset { name: format!("G{g} [{desc}] K{k} N{n} epi{epilogue} p{p}"), dims: dims.into_iter().collect() }
    }
    fn check_dims(&self, p: &Preset) -> Result<(), OpError> {
        dims::check(self.name(), DIMS, p)?;
        dims::bound(self.name(), p, gemm_footprint(p))
    }
    fn instance(&self, p: &Preset, seed: u64) -> Result<Box<dyn Instance>, OpError> {
        self.check_dims(p)?;
        let pb = GemmProblem::from_preset(p)?;
        let (m, k, n, g) = (pb.m(), pb.k, pb.n, pb.counts.len());
        let mut x = data::normal(m * k, 1.0, seed);
        data::round_bf16(&mut x);
        let mut w = data::normal(g * n * k, (k as f32).powf(-0.5), seed ^ 0x5151);
        data::round_bf16(&mut w);
        let p = pb.row_scale.then(|| data::uniform(m, 0.1, 1.0, seed ^ 0x7a7a));
        let mut plan_inputs = vec![("x".to_string(), data::tensor(DType::Bf16, &[m, k], &x))];
        if pb.grouped {
            plan_inputs.push(("w".into(), data::tensor(DType::Bf16, &[g, n, k], &w)));
            plan_inputs.push(("offs".into(), HostTensor::from_i64(DType::I32, &[g], &pb.offs())));
        } else {
            plan_inputs.push(("w".into(), data::tensor(DType::Bf16, &[n, k], &w)));
        }
        if let Some(p) = &p {
            plan_inputs.push(("p".into(), data::tensor(DType::F32, &[m], p)));
        }
        Ok(Box::new(GemmInstance { pb, x, w, p, plan_inputs, seed }))
    }
    fn kernels(&self, p: &Preset, knobs: &Knobs) -> Result<Vec<Kernel>, OpError> {
        self.check_dims(p)?;
        let pb = GemmProblem::from_preset(p)?;
        Ok(vec![build_kernel(&pb.spec(), knobs)?])
    }
    fn bucket_dims(&self, p: &Preset) -> Vec<(String, u64)> {
        let pb = match GemmProblem::from_preset(p) {
            Ok(pb) => pb,
            Err(_) => return vec![],
        };
        let nonempty = pb.counts.iter().filter(|c| **c > 0).count().max(1);
        vec![
            ("rows_per_group".into(), (pb.m() / nonempty) as u64),
            ("K".into(), pb.k as u64),
            ("N".into(), pb.n as u64),
            ("groups".into(), pb.counts.len() as u64),
        ]
    }
}

use k3k_ir::HostTensor;

impl Instance for GemmInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        format!(
            "{} M={} K={} N={} groups={} epilogue={} p={} seed={}",
            if pb.grouped { "grouped" } else { "dense" },
            pb.m(),
            pb.k,
            pb.n,
            if pb.counts.len() <= 8 { format!("{:?}", pb.counts) } else { format!("{} groups", pb.counts.len()) },
            pb.epilogue.name(),
            pb.row_scale,
            self.seed
        )
    }

    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        let pb = &self.pb;
        let kernel = build_kernel(&pb.spec(), knobs)?;
        let mut plan = Plan::default();
        let mut args = vec![];
        for (name, t) in &self.plan_inputs {
            args.push(plan.input(name, t.clone()));
        }
        args.push(plan.output("y", DType::Bf16, &[pb.m(), pb.n_out()]));
        plan.step(kernel, &args, &[]);
        Ok(plan)
    }

    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        let pb = &self.pb;
        let y = out.get("y")?.to_f64_vec();
        let (m, k, n, no) = (pb.m(), pb.k, pb.n, pb.n_out());
        // Every row for small problems, a sample of rows (each group's first, middle and last included) for big ones.
        let rows = crate::check::checked_rows(&pb.counts, m * n * k <= 1 << 26, self.seed);
        let group_of = crate::check::row_groups(&pb.counts);
        use rayon::prelude::*;
        type RowPair = (Vec<f64>, Vec<f64>);
        let per_row: Vec<Result<RowPair, OpError>> = rows
            .par_iter()
            .map(|&r| {
                let g = group_of[r];
                let wg = &self.w[g * n * k..(g + 1) * n * k];
                let acc = refgemm::matmul_nt(&self.x[r * k..(r + 1) * k], 1, k, wg, n)
                    .map_err(|e| OpError::Internal(e.to_string()))?;
                let scale = self.p.as_ref().map_or(1.0, |p| p[r] as f64);
                let want: Vec<f64> = (0..no).map(|j| scale * pb.epilogue.reference(&acc, j)).collect();
                Ok((want, y[r * no..(r + 1) * no].to_vec()))
            })
            .collect();
        let mut want = Vec::with_capacity(rows.len() * no);
        let mut got = Vec::with_capacity(rows.len() * no);
        for r in per_row {
            let (w, g) = r?;
            want.extend(w);
            got.extend(g);
        }
        let scope =
            if rows.len() == m { format!("all {m} rows") } else { format!("{} sampled rows of {m}", rows.len()) };
        let mut report = crate::check::compare("y", &got, &want, Tolerance::Bf16, scope);
        if !report.passed {
            report.detail.push_str(&crate::check::error_pattern(&got, &want, rows.len(), no));
        }
        Ok(report)
    }

    fn work(&self) -> Work {
        let pb = &self.pb;
        let (m, k, n) = (pb.m() as f64, pb.k as f64, pb.n as f64);
        let groups_used = pb.counts.iter().filter(|c| **c > 0).count() as f64;
        Work {
            flops: 2.0 * m * n * k,
            bytes: 2.0 * (m * k + groups_used * n * k + m * pb.n_out() as f64)
                + if pb.row_scale { 4.0 * m } else { 0.0 },
        }
    }

    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({
            "grouped": pb.grouped, "counts": pb.counts, "K": pb.k, "N": pb.n,
            "epilogue": pb.epilogue.name(), "p": pb.row_scale, "M": pb.m(),
        })
    }
}
