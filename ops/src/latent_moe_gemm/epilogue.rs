//! The epilogue of one tile: the fused GLU and routing weight on the accumulator registers, then the bf16 store
//! of `y`, from registers or (STORE=tma) through shared staging buffers and bulk tensor stores.

use super::Epilogue;
use super::kernel::GemmKernel;
use super::walk::Coords;
use k3k_ir::*;

/// STORE=tma: two staging buffers of 64 output columns (128-byte rows, the 128-byte swizzle of the map).
pub(super) const SLICE: u32 = 64;

impl GemmKernel<'_> {
    /// An idle sibling of a cluster stores nothing. EPI_TURN: one warpgroup at a time.
    pub fn epilogue(&self, b: &mut KernelBuilder, cs: &Coords) {
        let c = self.c;
        b.in_turn_if(c.epi_turn, |b| {
            if c.cluster2 {
                b.if_(cs.valid.clone(), |b| self.epilogue_tile(b, cs));
            } else {
                self.epilogue_tile(b, cs);
            }
        });
    }

    /// The fused GLU and routing weight from the accumulator registers, then the bf16 store.
    fn epilogue_tile(&self, b: &mut KernelBuilder, cs: &Coords) {
        let (spec, n_out, acc) = (self.spec, &self.io.n_out, self.tiles.acc);
        let out_rows = view(
            self.io.y,
            cs.r0.clone() * n_out.clone() + cs.n0.clone(),
            n_out.clone(),
            cs.rows_valid.clone(),
            n_out.clone() - cs.n0.clone(),
            spec.out_vec,
        );
        if let Some(u) = self.tiles.acc_up {
            b.map(acc, glu(spec.epilogue, Expr::Elem(acc), Expr::Elem(u)));
        }
        if let (Some(pv), Some(p)) = (self.tiles.pv, self.io.p) {
            b.load_vec(pv, vec_view(p, cs.r0.clone(), 1i64, cs.rows_valid.clone()));
            b.map(acc, Expr::Elem(acc) * Expr::RowVal(pv));
        }
        match self.tiles.staging {
            Some(staging) => self.store_staged(b, cs, out_rows, staging),
            None => b.store(acc, Place::Global(out_rows)),
        }
    }

    /// STORE=tma: a tile whose rows all lie in its group leaves as bulk stores of 64 columns, alternating between
    /// the two staging buffers: before a buffer is rewritten, the store that read it two slices ago (possibly the
    /// previous tile's) has finished reading; the last ones drain under the next tile. A group's last, partial
    /// m-tile takes the register path.
    fn store_staged(
        &self,
        b: &mut KernelBuilder,
        cs: &Coords,
        out_rows: GlobalView,
        (sy, ymap, slices): (SharedId, TmapId, Option<VarId>),
    ) {
        let (bm, acc_n, acc) = (self.c.bm, self.acc_n, self.tiles.acc);
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
}

/// The gated product of gate `a` and up `u` (SEMANTICS.md section 2.1): SiTU-GLU `[4 tanh(a/4) sigmoid(a)] *
/// [25 tanh(u/25)]` or SwiGLU `silu(a) * u`.
fn glu(epilogue: Epilogue, a: Expr, u: Expr) -> Expr {
    match epilogue {
        Epilogue::SituGlu => (&a * 0.25f64).tanh() * 4.0f64 * a.sigmoid() * ((&u * 0.04f64).tanh() * 25.0f64),
        Epilogue::SwiGlu => a.silu() * u,
        Epilogue::None => unreachable!(),
    }
}
