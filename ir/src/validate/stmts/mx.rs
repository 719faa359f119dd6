//! MXFP4 statements: `dequant_fp4`, `dequant_fp4_stream` and `fp4_gemv`.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn mx_stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s {
            Stmt::DequantFp4 { tile, words, scales, packed, .. } => {
                let t = self.tile(*tile)?;
                self.path.push(format!("dequant_fp4 `{}`", t.name));
                let wc = t.cols / t.warps[1].max(1);
                if t.dtype != DType::Bf16 || !t.cols.is_multiple_of(32) || !wc.is_multiple_of(32) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4 decodes into a bf16 tile whose columns and per-warp column band are \
                             multiples of 32; `{}` is {} {}x{} on {:?} warps",
                            t.name, t.dtype, t.rows, t.cols, t.warps
                        ),
                    ));
                }
                let dq = self.shared_ref(words)?;
                let ds = self.shared_ref(scales)?;
                if dq.dtype != DType::U32 || words.rows != t.rows || words.cols != t.cols / 8 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "dequant_fp4 words: a u32 window of {}x{} is needed, got shared `{}` ({}) {}x{}",
                            t.rows,
                            t.cols / 8,
                            dq.name,
                            dq.dtype,
                            words.rows,
                            words.cols
                        ),
                    ));
                }
                // The natural layout reads a block's four words as one 16-byte access.
                if !*packed && (!words.col0.is_multiple_of(4) || !dq.row_bytes().is_multiple_of(16)) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4 (natural layout) reads 16-byte blocks: shared `{}` rows of {} bytes and \
                             window col0 = {} must be multiples of 16 bytes",
                            dq.name,
                            dq.row_bytes(),
                            words.col0
                        ),
                    ));
                }
                if ds.dtype != DType::U8 || scales.rows != t.rows || scales.cols != t.cols / 32 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "dequant_fp4 scales: a u8 window of {}x{} is needed, got shared `{}` ({}) {}x{}",
                            t.rows,
                            t.cols / 32,
                            ds.name,
                            ds.dtype,
                            scales.rows,
                            scales.cols
                        ),
                    ));
                }
                self.path.pop();
            }
            Stmt::DequantFp4Stream { tile, words, scales, prefetch, .. } => {
                let t = self.tile(*tile)?;
                self.path.push(format!("dequant_fp4_stream `{}`", t.name));
                let wc = t.cols / t.warps[1].max(1);
                if t.dtype != DType::Bf16 || !t.cols.is_multiple_of(32) || !wc.is_multiple_of(32) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4_stream decodes into a bf16 tile whose columns and per-warp column band \
                             are multiples of 32; `{}` is {} {}x{} on {:?} warps",
                            t.name, t.dtype, t.rows, t.cols, t.warps
                        ),
                    ));
                }
                let mut views = vec![(words, scales, "")];
                if let Some(p) = prefetch {
                    self.scalar(&p.first, ScalarTy::Bool, "dequant_fp4_stream prefetch first flag")?;
                    views.push((&p.words, &p.scales, "prefetch "));
                }
                for (words, scales, what) in views {
                    let q = self.global_view(words)?;
                    if q.dtype != DType::U32 || words.vec != 4 {
                        return Err(self.err(
                            IrErrorKind::Type,
                            format!(
                                "dequant_fp4_stream {what}words: a u32 view with vec = 4 (one 16-byte block per \
                                 access) is needed, got `{}` ({}) vec {}",
                                q.name, q.dtype, words.vec
                            ),
                        ));
                    }
                    let sc = self.global_view(scales)?;
                    if sc.dtype != DType::U8 {
                        return Err(self.err(
                            IrErrorKind::Type,
                            format!(
                                "dequant_fp4_stream {what}scales: a u8 view is needed, got `{}` ({})",
                                sc.name, sc.dtype
                            ),
                        ));
                    }
                }
                self.path.pop();
            }
            Stmt::Fp4Gemv(g) => self.fp4_gemv(g)?,
            _ => unreachable!("not a MXFP4 statement"),
        }
        Ok(())
    }

    /// [`Stmt::Fp4Gemv`]: the fused MXFP4 matrix-vector product.
    fn fp4_gemv(&mut self, g: &Fp4Gemv) -> Result<(), IrError> {
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
