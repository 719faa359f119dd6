//! The checks of [`Stmt::Fp4Gemv`] (the extension module `k3k_ir::fp4_gemv`).

use super::*;
use crate::fp4_gemv::{Fp4Gemv, Fp4Ring};

impl<'a> Checker<'a> {
    /// [`Stmt::Fp4Gemv`]: the fused MXFP4 matrix-vector product.
    pub(super) fn fp4_gemv(&mut self, g: &Fp4Gemv) -> Result<(), IrError> {
        let (out, words, scales, x) = (&g.out, &g.words, &g.scales, &g.x);
        let &Fp4Gemv { scratch, packed, chunk, ring, staged, l2_prefetch, tiled, bulk, x_two_ahead, .. } = g;
        self.path.push("fp4_gemv".to_string());
        let o = self.shared_ref(out)?;
        let sc = self.shared(scratch)?;
        let warps = self.k.threads / 32;
        let bad = |what: String| Err(self.err(IrErrorKind::Layout, what));
        if o.dtype != DType::F32 || !out.rows.is_multiple_of(16) || out.rows == 0 || !matches!(out.cols, 8 | 16) {
            return bad(format!(
                "fp4_gemv out: an f32 window of R x T rows (R a multiple of 16, T 8 or 16), got `{}` ({}) {}x{}",
                o.name, o.dtype, out.rows, out.cols
            ));
        }
        // Staged: the partials alias the rings (their size is checked below), whatever the tiles' shape.
        if sc.dtype != DType::F32
            || (!staged && (sc.rows * sc.cols < out.rows * out.cols || sc.count < warps))
            || sc.alias.is_some()
        {
            return bad(format!(
                "fp4_gemv scratch: an unaliased f32 buffer of at least {} elements per tile and {warps} tiles (one per \
                 warp), got `{}` ({}) {}x{} x{}",
                out.rows * out.cols,
                sc.name,
                sc.dtype,
                sc.rows,
                sc.cols,
                sc.count
            ));
        }
        if scratch == out.buf {
            return bad("fp4_gemv: scratch and out must be different buffers".into());
        }
        if let Fp4Ring::Shared(staging) = g.ring() {
            let have = sc.count as u64 * sc.rows as u64 * sc.cols as u64 * 4;
            let need = staging.scratch_bytes(warps, out.rows);
            if have < need {
                return bad(format!(
                    "fp4_gemv staged: scratch `{}` needs {need} bytes for {warps} warps' rings of {ring} \
                     stages, has {have}",
                    sc.name
                ));
            }
        }
        if tiled && !(staged && packed && out.cols == 8) {
            return bad(format!(
                "fp4_gemv: tiled words need the staged ring, the packed layout and 8-token tiles (staged \
                 {staged}, packed {packed}, {} tokens)",
                out.cols
            ));
        }
        if x_two_ahead && !(staged && out.cols == 8) {
            return bad(format!(
                "fp4_gemv: x_two_ahead needs the staged ring and 8-token tiles (staged {staged}, {} tokens)",
                out.cols
            ));
        }
        if bulk && !(tiled && l2_prefetch == 0) {
            return bad(format!(
                "fp4_gemv: bulk copies need tiled words and no l2_prefetch (tiled {tiled}, l2_prefetch \
                 {l2_prefetch})"
            ));
        }
        if !matches!(l2_prefetch, 0 | 64 | 128 | 256) || (l2_prefetch > 0 && !staged) {
            return bad(format!(
                "fp4_gemv: l2_prefetch {l2_prefetch} (0, 64, 128 or 256 bytes; non-zero only with staged)"
            ));
        }
        if !matches!(chunk, 1 | 2 | 4 | 8) || !(1..=8).contains(&ring) || !self.k.threads.is_multiple_of(32) {
            return bad(format!("fp4_gemv: chunk {chunk} (1, 2, 4 or 8) and ring {ring} (1..=8) on whole warps"));
        }
        let q = self.global_view(words)?;
        if q.dtype != DType::U32 || words.vec != 4 {
            return Err(self.err(
                IrErrorKind::Type,
                format!("fp4_gemv words: a u32 view with vec = 4, got `{}` ({}) vec {}", q.name, q.dtype, words.vec),
            ));
        }
        let s8 = self.global_view(scales)?;
        if s8.dtype != DType::U8 {
            return Err(self.err(
                IrErrorKind::Type,
                format!("fp4_gemv scales: a u8 view is needed, got `{}` ({})", s8.name, s8.dtype),
            ));
        }
        let xv = self.global_view(x)?;
        if xv.dtype != DType::Bf16 || x.vec != 8 {
            return Err(self.err(
                IrErrorKind::Type,
                format!("fp4_gemv x: a bf16 view with vec = 8, got `{}` ({}) vec {}", xv.name, xv.dtype, x.vec),
            ));
        }
        self.path.pop();
        Ok(())
    }
}
