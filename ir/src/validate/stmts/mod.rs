//! Statement checks of the validator: [`Checker::stmt`] applies the placement rules (`placement`) and hands
//! each statement to its family's check: scalar control and nested bodies (`control`), per-thread statements of
//! threads regions (`threads`), tiles and tensor-core products (`tiles`), barriers and asynchronous copies
//! (`sync`) and the MXFP4 statements (`mx`).

use super::*;

mod control;
mod mx;
mod placement;
mod sync;
mod threads;
mod tiles;

impl<'a> Checker<'a> {
    pub(super) fn body(&mut self, body: &[Stmt]) -> Result<(), IrError> {
        for (i, s) in body.iter().enumerate() {
            self.path.push(format!("[{i}]"));
            self.stmt(s)?;
            self.path.pop();
        }
        Ok(())
    }

    pub(super) fn stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match (Self::placement(s), self.region.is_some()) {
            ((name, Placement::BlockOnly), true) => {
                return Err(self.err(
                    IrErrorKind::Scope,
                    format!(
                        "`{name}` is a block-level statement and cannot appear inside a threads region \
                         (end the region before it and start a new one after it)"
                    ),
                ));
            }
            ((name, Placement::RegionOnly), false) => {
                return Err(self.err(
                    IrErrorKind::Scope,
                    format!("`{name}` is per-thread code: it is only valid inside a threads region"),
                ));
            }
            _ => {}
        }
        if self.k.producer_warp {
            self.producer_placement(s)?;
        } else if matches!(s, Stmt::Producer { .. }) {
            return Err(self.err(
                IrErrorKind::Scope,
                "a `producer` body needs a producer-warp kernel (`KernelBuilder::producer_warp`)",
            ));
        }
        if self.in_turn {
            self.turn_placement(s)?;
        }
        if self.first_wgs.is_some() {
            self.first_wgs_placement(s)?;
        }
        let skeleton = self.k.producer_warp && !self.producer && self.region.is_none();
        self.skeleton
            .set(skeleton && matches!(s, Stmt::Let { .. } | Stmt::Assign { .. } | Stmt::For { .. } | Stmt::If { .. }));
        let r = self.stmt_inner(s);
        self.skeleton.set(false);
        r
    }

    /// The statement's own checks, by family.
    pub(super) fn stmt_inner(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s.family() {
            StmtFamily::Control => self.control_stmt(s),
            StmtFamily::Threads => self.thread_stmt(s),
            StmtFamily::Mx if self.k.tiles.iter().any(|t| t.solo) => {
                Err(self.err(IrErrorKind::Layout, "solo tiles are not supported beside the MX statements"))
            }
            StmtFamily::Mx => self.mx_stmt(s),
            StmtFamily::Tiles | StmtFamily::Mma => {
                self.solo_reads(s)?;
                self.tile_stmt(s)
            }
            StmtFamily::Sync => self.sync_stmt(s),
        }
    }
}
