//! Statements: [`Lower::stmt`] hands each statement to its family: scalar control, nested bodies and threads
//! regions (`control`), per-thread statements (`threads`), tiles (`tiles`), copies and barriers (`sync`) and
//! the MXFP4 statements (`mx`).

use super::*;

mod control;
mod mx;
mod sync;
mod threads;
mod tiles;

impl<'a, 'f> Lower<'a, 'f> {
    pub(super) fn stmts(&mut self, body: &[Stmt]) -> Result<(), JitError> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    pub(super) fn stmt(&mut self, s: &Stmt) -> Result<(), JitError> {
        match s {
            Stmt::Let { .. }
            | Stmt::Assign { .. }
            | Stmt::For { .. }
            | Stmt::If { .. }
            | Stmt::Barrier
            | Stmt::AsyncCommit
            | Stmt::AsyncWait { .. }
            | Stmt::MmaWait { .. }
            | Stmt::Fence
            | Stmt::Producer { .. }
            | Stmt::InTurn { .. }
            | Stmt::FirstWarpgroups { .. }
            | Stmt::Threads { .. } => self.control_stmt(s),
            Stmt::StoreScalar { .. }
            | Stmt::SharedStore { .. }
            | Stmt::Atomic { .. }
            | Stmt::LetArray { .. }
            | Stmt::ArraySet { .. }
            | Stmt::LoadWide { .. }
            | Stmt::StoreWide { .. } => self.thread_stmt(s),
            Stmt::Map { .. }
            | Stmt::VecMap { .. }
            | Stmt::Reduce { .. }
            | Stmt::Scan { .. }
            | Stmt::Mma { .. }
            | Stmt::MmaAsync { .. }
            | Stmt::StoreCols { .. }
            | Stmt::Load { .. }
            | Stmt::Store { .. }
            | Stmt::LoadVec { .. }
            | Stmt::StoreVec { .. } => self.tile_stmt(s),
            Stmt::CopyAsync { .. }
            | Stmt::MbarInit { .. }
            | Stmt::MbarArriveExpectTx { .. }
            | Stmt::MbarArrive { .. }
            | Stmt::MbarWait { .. }
            | Stmt::TmaLoad(_)
            | Stmt::MbarArriveCluster { .. }
            | Stmt::ClusterSync
            | Stmt::TmaStore(_)
            | Stmt::TmaStoreWait { .. } => self.sync_stmt(s),
            Stmt::DequantFp4 { .. } | Stmt::DequantFp4Stream { .. } | Stmt::Fp4Gemv { .. } => self.mx_stmt(s),
            #[allow(unreachable_patterns)]
            other => Err(unsupported(format!("statement {}", stmt_name(other)))),
        }
    }
}
