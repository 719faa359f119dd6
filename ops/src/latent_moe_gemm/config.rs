//! The resolved configuration of one kernel ([`Config`]): the typed knobs ([`GemmKnobs`]) with every `auto`
//! resolved for the problem's variant, the combinations that cannot run refused, and the settings that do not
//! apply to the resolved path switched off. The kernel builder reads only this.

use super::GemmSpec;
use super::knobs::*;
use crate::OpError;
use k3k_ir::Knobs;

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

/// `AHEAD=auto` before it is resolved (never a valid depth: depths are below STAGES <= 4).
const AHEAD_AUTO: u32 = u32::MAX;

impl Config {
    /// Read and resolve a record for a variant; an impossible combination is `OpError::InvalidKnobs` saying why.
    pub fn resolve(spec: &GemmSpec, knobs: &Knobs) -> Result<Config, OpError> {
        let k = GemmKnobs::from_knobs(knobs)?;
        let invalid = |why: String| OpError::InvalidKnobs { op: GemmKnobs::OP, knobs: knobs.to_string(), why };
        let mut c = Config::read(&k);
        c.tma = match k.load {
            OperandLoad::Tma => true,
            OperandLoad::CpAsync => false,
            OperandLoad::Auto => c.wgmma && c.bk == 64 && spec.in_vec == 8,
        };
        let auto_load = k.load == OperandLoad::Auto;
        c.check_tiles(spec).map_err(invalid)?;
        c.resolve_cluster(auto_load).map_err(invalid)?;
        c.resolve_stream(auto_load).map_err(invalid)?;
        c.resolve_epilogue(spec).map_err(invalid)?;
        c.check_budget().map_err(invalid)?;
        Ok(c)
    }

    /// The knobs as given (`AHEAD=auto` as [`AHEAD_AUTO`], the load path still to resolve).
    fn read(k: &GemmKnobs) -> Config {
        Config {
            bm: k.bm,
            bn: k.bn,
            bk: k.bk,
            stages: k.stages,
            wm: k.wm,
            wn: k.wn,
            raster_m: k.raster == Raster::M,
            wgmma: k.mma == Mma::Wgmma,
            overlap: k.overlap == Overlap::On,
            tma: false,
            cluster2: k.cluster == ClusterSize::Two,
            pair_m: k.cluster_along == ClusterAlong::M,
            // `auto` is resolved once the load path and the cluster are known.
            ahead: k.ahead.map(|a| match a {
                Ahead::Auto => AHEAD_AUTO,
                Ahead::Value(a) => a,
            }),
            warp_release: k.release == ReleaseBy::Warp,
            producer_warp: k.producer == ProducerBy::Warp,
            epi_turn: k.epi_turn == EpiTurn::On,
            tma_store: k.store == EpilogueStore::Tma,
        }
    }

    /// Accumulator columns (BN, or BN/2 with a GLU).
    fn acc_cols(&self, spec: &GemmSpec) -> u32 {
        if spec.epilogue.is_glu() { self.bn / 2 } else { self.bn }
    }

    fn mma_name(&self) -> &'static str {
        if self.wgmma { "wgmma" } else { "sync" }
    }

    /// The tile shape against the warps, the MMA path and the load path.
    fn check_tiles(&self, spec: &GemmSpec) -> Result<(), String> {
        let c = self;
        let acc_cols = c.acc_cols(spec);
        if !c.bm.is_multiple_of(16 * c.wm) {
            return Err(format!("BM={} is not a multiple of 16*WM={}", c.bm, 16 * c.wm));
        }
        if !acc_cols.is_multiple_of(16 * c.wn) {
            return Err(format!("accumulator width {acc_cols} is not a multiple of 16*WN={}", 16 * c.wn));
        }
        if c.stages < 2 || !c.bk.is_multiple_of(16) {
            return Err("STAGES >= 2 and BK a multiple of 16 are required".into());
        }
        if c.wgmma && (c.bk != 64 || c.wn != 1 || c.wm * 16 != c.bm || c.stages < 3 || acc_cols > 256) {
            return Err(format!(
                "MMA=wgmma needs BK=64, WN=1, WM=BM/16 (one warpgroup per 64 rows), STAGES>=3 and at most 256 accumulator columns (got BK={}, WN={}, WM={}, BM={}, STAGES={}, {acc_cols} columns)",
                c.bk, c.wn, c.wm, c.bm, c.stages
            ));
        }
        if c.tma && spec.in_vec != 8 {
            return Err(format!(
                "LOAD=tma needs K a multiple of 8 (the copy engine needs 16-byte row strides; this variant has in_vec={})",
                spec.in_vec
            ));
        }
        if c.tma && (!c.wgmma || c.bk != 64) {
            return Err(format!(
                "LOAD=tma needs MMA=wgmma and BK=64 (the copy engine writes the 128-byte-swizzled rows wgmma reads; got MMA={}, BK={})",
                c.mma_name(),
                c.bk
            ));
        }
        Ok(())
    }

    /// CLUSTER=2 rides on the TMA ring: LOAD=auto on a shape the copy engine cannot serve (K not a multiple of
    /// 8) runs the cp.async kernel unpaired; on request of cp.async it is an error.
    fn resolve_cluster(&mut self, auto_load: bool) -> Result<(), String> {
        if self.cluster2 && !self.tma && auto_load {
            self.cluster2 = false;
        }
        if self.cluster2 && !self.tma {
            return Err("CLUSTER=2 needs LOAD=tma (the shared operand arrives by multicast bulk tensor copies)".into());
        }
        Ok(())
    }

    /// The producer stream (AHEAD, PRODUCER) and warp releases are schedules of the TMA ring: ignored where
    /// LOAD=auto runs the cp.async kernel, an error on request of cp.async.
    fn resolve_stream(&mut self, auto_load: bool) -> Result<(), String> {
        let c = self;
        if !c.tma && auto_load {
            c.ahead = None;
            c.warp_release = false;
        }
        // PRODUCER=warp (a default) is ignored where no TMA ring runs, as AHEAD=auto is.
        if !c.tma {
            c.producer_warp = false;
        }
        // AHEAD=auto (the default): STAGES-1 stages in flight on the TMA ring without a cluster; STAGES-2 for a
        // pair, whose refill then waits for a release (its peer's included) one step old instead of the one just
        // made (H200, 2026-12-04, mean1024 K3584 N6144 along m: AHEAD=2 2.1907 ms, in-loop 2.2656, AHEAD=3
        // 2.3684; along n: AHEAD=2 2.1936, AHEAD=1 2.7577).
        // With a producer warp (PRODUCER=warp) STAGES-2 as well (2026-12-04, same run, AHEAD=2 vs 3: mean256
        // 0.6153 / 0.6252 ms, mean1024 2.0600 / 2.0864, K3072 1.0408 / 1.0418, G56 mean64 0.6574 / 0.6547).
        if c.ahead == Some(AHEAD_AUTO) {
            c.ahead = c.tma.then(|| if c.cluster2 || c.producer_warp { c.stages - 2 } else { c.stages - 1 });
        }
        if !c.tma && (c.ahead.is_some() || c.warp_release) {
            return Err(
                "AHEAD and RELEASE=warp need LOAD=tma (they schedule the mbarrier ring of the copy engine)".into()
            );
        }
        if let Some(a) = c.ahead
            && (a < 1 || a >= c.stages)
        {
            return Err(format!("AHEAD={a} must be in 1..=STAGES-1 = {}", c.stages - 1));
        }
        if c.producer_warp && c.ahead.is_none() {
            return Err("PRODUCER=warp needs the producer stream (LOAD=tma and AHEAD, e.g. AHEAD=auto)".into());
        }
        Ok(())
    }

    /// EPI_TURN and STORE=tma, where the resolved path can run them.
    fn resolve_epilogue(&mut self, spec: &GemmSpec) -> Result<(), String> {
        let c = self;
        if c.epi_turn && (!c.wgmma || c.wm < 8) {
            return Err(format!(
                "EPI_TURN=on needs MMA=wgmma and two or more consumer warpgroups to take turns (WM >= 8, got MMA={}, WM={})",
                c.mma_name(),
                c.wm
            ));
        }
        // The turns only stagger the warpgroups where no block barrier re-aligns them: the producer stream.
        if c.ahead.is_none() {
            c.epi_turn = false;
        }
        if c.epi_turn && c.tma_store {
            return Err("EPI_TURN=on and STORE=tma do not combine (the bulk stores synchronize the warpgroups)".into());
        }
        // The bulk-store epilogue rides on the TMA ring's kernel and needs 16-byte rows of y and whole 64-column
        // slices of the accumulator.
        if !c.tma || spec.out_vec != 8 || !c.acc_cols(spec).is_multiple_of(64) {
            c.tma_store = false;
        }
        Ok(())
    }

    /// Warps per block and accumulator registers per thread.
    fn check_budget(&self) -> Result<(), String> {
        let warps = self.wm * self.wn;
        if warps > 8 {
            return Err(format!("{warps} warps: at most 8"));
        }
        // Accumulator registers per thread (f32): keep well under the 255-register cap.
        let acc_regs = self.bm * self.bn / (32 * warps);
        if acc_regs > 128 {
            return Err(format!("{acc_regs} accumulator registers per thread (max 128)"));
        }
        Ok(())
    }
}
