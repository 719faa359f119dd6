//! The producer stream (AHEAD): its own cursor over the block's tile walk ([`Producer`]), which it keeps
//! `AHEAD` stages ahead of the consumers across tile boundaries ([`GemmKernel::produce`]).

use super::kernel::{GemmKernel, Walk};
use super::walk::Coords;
use k3k_ir::*;

/// AHEAD=a: the producer's own cursor over the block's tile walk (every thread keeps it, block-uniform; thread
/// 0 issues): the tile and k-step it loads next, that tile's coordinates, its next stage use, and the state
/// of its forward group search.
pub(super) struct Producer {
    pub tile: VarId,
    pub kt: VarId,
    pub use_: VarId,
    pub grp: VarId,
    pub r0: VarId,
    pub n0: VarId,
    pub g: VarId,
    pub local: VarId,
    pub from: (VarId, VarId),
}

impl Producer {
    /// The cursor at the block's first tile.
    pub fn declare(b: &mut KernelBuilder, walk: &Walk) -> Producer {
        Producer {
            tile: b.let_var("p_tile", walk.first.clone()),
            kt: b.let_var("p_kt", 0i64),
            use_: b.let_var("p_use", 0i64),
            grp: b.let_var("p_grp", 0i64),
            r0: b.let_var("p_r0", 0i64),
            n0: b.let_var("p_n0", 0i64),
            g: b.let_var("p_g", 0i64),
            local: b.let_var("p_local", 0i64),
            from: (b.let_var("p_walk_g", 0i64), b.let_var("p_walk_seen", 0i64)),
        }
    }
}

impl GemmKernel<'_> {
    /// The producer finds the coordinates of its tile (`p_tile < total`).
    pub fn locate(&self, b: &mut KernelBuilder, p: &Producer) {
        self.search(b, Expr::Var(p.tile), p.g, p.local, Some(p.from));
        let cs = self.coords(b, Expr::Var(p.g), Expr::Var(p.local));
        b.assign(p.grp, cs.grp);
        b.assign(p.r0, cs.r0);
        b.assign(p.n0, cs.n0);
    }

    /// Issue the producer's next stage (if its walk is not over) and advance its cursor, moving to its next
    /// tile after the last k-step. No stage at all when K = 0 (the consumers run no k-steps either).
    pub fn produce(&self, b: &mut KernelBuilder, p: &Producer) {
        let (total, k_tiles, walk_step) = (self.walk.total, &self.walk.k_tiles, &self.walk.step);
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
}
