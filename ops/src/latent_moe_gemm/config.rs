//! The resolved configuration of one kernel ([`Config`]): the knobs read for the problem's variant, every
//! `auto` resolved, the combinations that cannot run refused, and the settings that do not apply to the resolved
//! path switched off. The kernel builder reads only this.

use super::GemmSpec;
use super::knobs::*;
use crate::OpError;
use k3k_ir::{KnobValue, Knobs};

/// `AHEAD=auto` before it is resolved (never a valid depth: depths are below STAGES <= 4).
const AHEAD_AUTO: u32 = u32::MAX;

/// What the kernel builder reads.
pub(super) struct Config {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub stages: u32,
    pub wm: u32,
    pub wn: u32,
    pub raster_m: bool,
    pub wgmma: bool,
    pub overlap: bool,
    /// Operand tiles by TMA (bulk tensor copies completing on per-stage mbarriers) instead of cp.async.
    pub tma: bool,
    /// CLUSTER=2: pairs of CTAs sharing one operand by multicast; `pair_m`: the pair covers two m-tiles.
    pub cluster2: bool,
    pub pair_m: bool,
    /// AHEAD=a (LOAD=tma): the producer stream with `a` stages in flight; `None`: the in-loop schedule.
    pub ahead: Option<u32>,
    /// RELEASE=warp (LOAD=tma): one empty-barrier arrival per warp instead of one per thread.
    pub warp_release: bool,
    /// PRODUCER=warp: the producer stream runs on a dedicated producer warp ([`k3k_ir::Stmt::Producer`]).
    pub producer_warp: bool,
    /// EPI_TURN=on: the consumer warpgroups store their epilogues in turn.
    pub epi_turn: bool,
    /// STORE=tma: full tiles leave through shared staging buffers and bulk tensor stores.
    pub tma_store: bool,
}

impl Config {
    /// Read and resolve a knob set for a variant; an impossible combination is `OpError::InvalidKnobs` saying why.
    pub fn resolve(spec: &GemmSpec, knobs: &Knobs) -> Result<Config, OpError> {
        cfg(spec, knobs)
    }
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

fn cfg(spec: &GemmSpec, k: &Knobs) -> Result<Config, OpError> {
    let c = Config {
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
