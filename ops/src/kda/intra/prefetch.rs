//! `IPF=1`: each intra-chunk block prefetches into L2 the rows of q, k, v and g that a later block will load.
//!
//! The ncu profile of the H100 (2026-12-07 21:47 UTC, B4 T4096 H64 at FlashKDA's options) put about a fifth of the
//! kernel's stall samples on the first global loads of a block (the chunk table, `A_log`, the gate rows: long
//! scoreboard) and on the barriers behind them: every block starts cold, and its inputs come from DRAM. The blocks
//! run in launch order (chunk fastest, then value head) about [`PREFETCH_AHEAD`] at a time, so a block that asks
//! for the rows of the block that many places after it has them on their way to L2 about when that block starts.
//! The hint changes no value: the same kernel without it computes the same bits.

use super::Intra;
use k3k_ir::*;

/// How many blocks ahead in launch order a block prefetches: about the blocks resident at once (132 SMs with three
/// blocks each at the slim layout's 71 KB).
pub const PREFETCH_AHEAD: i64 = 396;

impl Intra {
    /// Inside the loads' threads region (thread index `t`): threads C.. (idle there while the first C load beta)
    /// prefetch, for the block [`PREFETCH_AHEAD`] places later, one 128-byte line each of its rows of q, k, v (not with
    /// `USTATE=1`, whose intra kernel does not read v) and g, rows past that chunk's length left out.
    pub(super) fn prefetch_ahead(&self, b: &mut KernelBuilder, t: &Expr) {
        let Some((ctab, nch)) = self.prefetch.clone() else { return };
        let (cc, kk, vv) = (self.cc, self.kk, self.vv);
        let (h, hv) = (self.h.clone(), self.hv.clone());
        // `slot_base` is the block's place in launch order: value head x chunks + chunk.
        let later = self.slot_base.clone() + PREFETCH_AHEAD;
        b.if_(t.ge(cc).and(later.lt(hv.clone() * nch.clone())), |b| {
            let ch = b.let_("pf_ch", &later % nch.clone());
            let hv2 = b.let_("pf_hv", &later / nch);
            let row0 = b.let_("pf_row0", Expr::load(ctab, &ch * 2i64));
            let len = b.let_("pf_len", Expr::load(ctab, &ch * 2i64 + 1i64));
            let hq2 = &hv2 / (hv.clone() / h.clone());
            let g_bytes = if self.spec.g_bf16 { 2 } else { 4 };
            let mut rows = vec![(self.q, hq2.clone(), h.clone(), kk, 2), (self.k, hq2, h, kk, 2)];
            if self.ufac.is_none() {
                rows.push((self.v, hv2.clone(), hv.clone(), vv, 2));
            }
            rows.push((self.g, hv2, hv, kk, g_bytes));
            // One item a line, the tensors' lines one after another, over threads C.. in turn.
            let mut items = vec![];
            let mut total = 0i64;
            for (tensor, head, heads, cols, bytes) in rows {
                let per_line = 128 / bytes;
                let lines = (cols + per_line - 1) / per_line;
                items.push((total, lines, per_line, tensor, head, heads, cols));
                total += cc * lines;
            }
            b.for_("pf_i", t.clone() - cc, total, self.threads as i64 - cc, |b, i| {
                for (off, lines, per_line, tensor, head, heads, cols) in items {
                    let j = &i - off;
                    let (r, l) = (&j / lines, &j % lines);
                    let at = ((&row0 + r.clone()) * heads + head) * cols + l * per_line;
                    b.if_(i.ge(off).and(j.lt(cc * lines)).and(r.lt(len.clone())), |b| b.prefetch_l2(tensor, at));
                }
            });
        });
    }
}
