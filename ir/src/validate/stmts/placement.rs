//! Placement rules of the validator: where each statement may appear (block level, threads regions,
//! `in_turn`, `first_warpgroups` and producer bodies).

use super::*;

impl<'a> Checker<'a> {
    /// The statement's name in messages, and where it may appear.
    pub(in crate::validate) fn placement(s: &Stmt) -> (&'static str, Placement) {
        use Placement::*;
        match s {
            Stmt::Let { .. } => ("let", Anywhere),
            Stmt::Assign { .. } => ("assign", Anywhere),
            Stmt::For { .. } => ("for", Anywhere),
            Stmt::If { .. } => ("if", Anywhere),
            Stmt::Barrier => ("barrier", BlockOnly),
            Stmt::Map { .. } => ("map", BlockOnly),
            Stmt::VecMap { .. } => ("vec_map", BlockOnly),
            Stmt::Reduce { .. } => ("reduce", BlockOnly),
            Stmt::Mma { .. } => ("mma", BlockOnly),
            Stmt::MmaAsync { .. } => ("mma_async", BlockOnly),
            Stmt::MmaWait { .. } => ("mma_wait", BlockOnly),
            Stmt::CopyAsync { .. } => ("copy_async", BlockOnly),
            Stmt::MbarInit { .. } => ("mbar_init", BlockOnly),
            Stmt::MbarArriveExpectTx { .. } => ("mbar_arrive_expect_tx", BlockOnly),
            Stmt::MbarArrive { .. } => ("mbar_arrive", BlockOnly),
            Stmt::MbarWait { .. } => ("mbar_wait", BlockOnly),
            Stmt::TmaLoad(_) => ("tma_load", BlockOnly),
            Stmt::TmaStore(_) => ("tma_store", BlockOnly),
            Stmt::TmaStoreWait { .. } => ("tma_store_wait", BlockOnly),
            Stmt::StoreCols { .. } => ("tile column store", BlockOnly),
            Stmt::MbarArriveCluster { .. } => ("mbar_arrive_cluster", BlockOnly),
            Stmt::ClusterSync => ("cluster_sync", BlockOnly),
            Stmt::GridDep(_) => ("grid_dep", BlockOnly),
            Stmt::AsyncCommit => ("async commit", BlockOnly),
            Stmt::AsyncWait { .. } => ("async wait", BlockOnly),
            Stmt::Load { .. } => ("tile load", BlockOnly),
            Stmt::Store { .. } => ("tile store", BlockOnly),
            Stmt::LoadVec { .. } => ("vector load", BlockOnly),
            Stmt::StoreVec { .. } => ("vector store", BlockOnly),
            Stmt::Scan { .. } => ("scan", BlockOnly),
            Stmt::DequantFp4 { .. } => ("dequant_fp4", BlockOnly),
            Stmt::DequantFp4Stream { .. } => ("dequant_fp4_stream", BlockOnly),
            Stmt::Fp4Gemv(_) => ("fp4_gemv", BlockOnly),
            Stmt::Threads { .. } => ("threads region", BlockOnly),
            Stmt::Producer { .. } => ("producer", BlockOnly),
            Stmt::InTurn { .. } => ("in_turn", BlockOnly),
            Stmt::FirstWarpgroups { .. } => ("first_warpgroups", BlockOnly),
            Stmt::StoreScalar { .. } => ("store_scalar", RegionOnly),
            Stmt::SharedStore { .. } => ("shared_store", RegionOnly),
            Stmt::Atomic { .. } => ("atomic", RegionOnly),
            Stmt::LetArray { .. } => ("let_array", RegionOnly),
            Stmt::ArraySet { .. } => ("array_set", RegionOnly),
            Stmt::LoadWide { .. } => ("load_wide", RegionOnly),
            Stmt::StoreWide { .. } => ("store_wide", RegionOnly),
            Stmt::SharedLoadWide { .. } => ("shared_load_wide", RegionOnly),
            Stmt::SharedStoreWide { .. } => ("shared_store_wide", RegionOnly),
            Stmt::WarpShuffle { .. } => ("warp_shuffle", RegionOnly),
            Stmt::WarpSync => ("syncwarp", RegionOnly),
            Stmt::Fence => ("fence", RegionOnly),
        }
    }

    /// Inside an [`Stmt::InTurn`] body: nothing that waits for another consumer warpgroup (which may be waiting
    /// for the turn this warpgroup holds).
    pub(super) fn turn_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let what = match s {
            Stmt::Barrier | Stmt::Scan { .. } | Stmt::Fp4Gemv(_) | Stmt::TmaStore(_) | Stmt::TmaStoreWait { .. } => {
                "a barrier"
            }
            Stmt::MbarInit { .. } => "a barrier initialization (a block barrier)",
            Stmt::ClusterSync => "a cluster barrier",
            Stmt::MbarWait { elected: true, .. } if !self.producer => {
                "an elected mbarrier wait outside a producer body (its thread may wait for a release another \
                 warpgroup makes after its own turn)"
            }
            Stmt::InTurn { .. } => "a nested `in_turn`",
            _ => return Ok(()),
        };
        Err(self.err(
            IrErrorKind::Scope,
            format!(
                "{what} inside an `in_turn` body: the warpgroup holding the turn would wait for one waiting for \
                 the turn"
            ),
        ))
    }

    /// Inside a [`Stmt::FirstWarpgroups`] body: only what a warpgroup runs on its own (the other warpgroups skip
    /// the body, so nothing may wait for them or spread its work over them).
    pub(super) fn first_wgs_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let ok = matches!(
            s,
            Stmt::Let { .. }
                | Stmt::Assign { .. }
                | Stmt::For { .. }
                | Stmt::If { .. }
                | Stmt::Map { .. }
                | Stmt::VecMap { .. }
                | Stmt::Reduce { .. }
                | Stmt::Mma { .. }
                | Stmt::MmaAsync { .. }
                | Stmt::MmaWait { .. }
                | Stmt::Load { .. }
                | Stmt::Store { .. }
                | Stmt::LoadVec { .. }
                | Stmt::StoreVec { .. }
                | Stmt::StoreCols { .. }
        );
        if ok {
            return Ok(());
        }
        let (name, _) = Self::placement(s);
        Err(self.err(
            IrErrorKind::Scope,
            format!(
                "`{name}` inside a `first_warpgroups` body: the other warpgroups skip the body, so it holds scalar \
                 control and tile statements a warpgroup runs on its own (no barriers, copies, threads regions or \
                 nested turns)"
            ),
        ))
    }

    /// Producer-warp kernels: what may appear inside and outside [`Stmt::Producer`] bodies.
    pub(super) fn producer_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let elected =
            matches!(s, Stmt::TmaLoad(_) | Stmt::MbarArriveExpectTx { .. } | Stmt::MbarWait { elected: true, .. });
        let control = matches!(s, Stmt::Let { .. } | Stmt::Assign { .. } | Stmt::For { .. } | Stmt::If { .. });
        if self.producer && !(elected || control) {
            let (name, _) = Self::placement(s);
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "`{name}` inside a `producer` body: the producer warp runs scalar control, elected mbarrier \
                     waits, expect_tx arrivals and TMA copies only"
                ),
            ));
        }
        if !self.producer && elected {
            let (name, _) = Self::placement(s);
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "`{name}` outside a `producer` body of a producer-warp kernel: its elected thread is the \
                     producer warp's, so it belongs in a `producer` body"
                ),
            ));
        }
        Ok(())
    }
}
