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
            // The no-op synchronisation statements and threads regions are lowered with the scalar control;
            // warp statements only inside lockstep regions (`lockstep`).
            s if crate::cpu::sequential_noop(s) || matches!(s, Stmt::Threads { .. }) => self.control_stmt(s),
            Stmt::WarpShuffle { .. } | Stmt::WarpSync => Err(unsupported(format!("statement {}", stmt_name(s)))),
            _ => match s.family() {
                StmtFamily::Control => self.control_stmt(s),
                StmtFamily::Threads => self.thread_stmt(s),
                StmtFamily::Tiles | StmtFamily::Mma => self.tile_stmt(s),
                StmtFamily::Sync => self.sync_stmt(s),
                StmtFamily::Mx => self.mx_stmt(s),
            },
        }
    }
}
