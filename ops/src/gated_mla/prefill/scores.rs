//! Scores and products: the scale and causal mask, the online softmax's score pass, `Q K^T` and `P V`.

use super::*;

impl PrefillKernel<'_> {
    /// Scale the raw scores into the log2 domain; mask only the tiles that cross the diagonal or the end of the
    /// keys.
    pub(super) fn scale_mask(&self, b: &mut KernelBuilder, it: &PrefillItem, kv0: Expr) {
        let (causal, bn) = (self.spec.causal, self.c.bn);
        let tile_end = kv0.clone() + bn as i64;
        let need_mask = if causal {
            tile_end.clone().gt(self.s_n.clone()).or((tile_end - 1i64).gt(it.diag.clone()))
        } else {
            tile_end.gt(self.s_n.clone())
        };
        let key = kv0 + Expr::ColIdx;
        let mut visible = key.lt(self.s_n.clone());
        if causal {
            visible = visible.and(key.le(it.m0.clone() + Expr::RowIdx + self.s_n.clone() - self.t_n.clone()));
        }
        mask_scores(b, self.s, need_mask, visible, &self.scale_log2, self.c.fast_softmax);
    }

    pub(super) fn softmax_scores(&self, b: &mut KernelBuilder) {
        step_scores(b, &self.sm, self.s, &self.scale_log2, self.c.fast_softmax);
    }

    /// wgmma: S = Q K^T over the three 64-column chunks (the first starts the tile).
    pub(super) fn qk_async(&self, b: &mut KernelBuilder, slot: Expr) {
        qk_chunks(b, self.s, self.sq, self.sk, slot * self.nqk as i64, self.nqk, self.c.qk_unroll, QkMma::Async);
    }

    /// The score product as three statements (no loop): inside a turn (PINGPONG), so that the renderer sees
    /// which products the following wait leaves in flight.
    pub(super) fn qk_flat(&self, b: &mut KernelBuilder, slot: Expr) {
        for cc in 0..self.nqk as i64 {
            let qa = Operand::Shared { src: b.slot(self.sq, cc), transpose: false };
            let kb = Operand::Shared { src: b.slot(self.sk, slot.clone() * self.nqk as i64 + cc), transpose: true };
            b.mma_async_init(self.s, qa, kb, Expr::Bool(cc > 0));
        }
    }

    /// wgmma: O += P V per 64-column value slice (B stored [keys, values]).
    pub(super) fn pv_async(&self, b: &mut KernelBuilder, slot: Expr) {
        for (cv, &acc) in self.accs.iter().enumerate() {
            let vb =
                Operand::Shared { src: b.slot(self.sv, slot.clone() * self.nv as i64 + cv as i64), transpose: false };
            b.mma_async(acc, Operand::Reg(self.p), vb);
        }
    }
}
