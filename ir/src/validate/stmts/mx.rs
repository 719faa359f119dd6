//! MXFP4 statements: `dequant_fp4`, `dequant_fp4_stream` and `fp4_gemv` (its checks in [`fp4_gemv`]).

mod fp4_gemv;

use super::*;

impl<'a> Checker<'a> {
    /// The destination tile of a dequant statement `what` (entered into the path): bf16, its columns and each
    /// warp's column band multiples of 32 (whole scale blocks).
    fn dequant_tile(&mut self, tile: TileId, what: &str) -> Result<&'a RegTileDecl, IrError> {
        let t = self.tile(tile)?;
        self.path.push(format!("{what} `{}`", t.name));
        let wc = t.cols / t.warps[1].max(1);
        if t.dtype != DType::Bf16 || !t.cols.is_multiple_of(32) || !wc.is_multiple_of(32) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "{what} decodes into a bf16 tile whose columns and per-warp column band are multiples of 32; \
                     `{}` is {} {}x{} on {:?} warps",
                    t.name, t.dtype, t.rows, t.cols, t.warps
                ),
            ));
        }
        Ok(t)
    }

    /// `what`'s shared window `r` (of buffer `d`): a `dtype` window of `[rows, cols]`.
    fn window(
        &self,
        what: &str,
        r: &SharedRef,
        d: &SharedDecl,
        dtype: DType,
        [rows, cols]: [u32; 2],
    ) -> Result<(), IrError> {
        if d.dtype != dtype || r.rows != rows || r.cols != cols {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "{what}: a {dtype} window of {rows}x{cols} is needed, got shared `{}` ({}) {}x{}",
                    d.name, d.dtype, r.rows, r.cols
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn mx_stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s {
            Stmt::DequantFp4 { tile, words, scales, packed, .. } => {
                let t = self.dequant_tile(*tile, "dequant_fp4")?;
                let dq = self.shared_ref(words)?;
                let ds = self.shared_ref(scales)?;
                self.window("dequant_fp4 words", words, dq, DType::U32, [t.rows, t.cols / 8])?;
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
                self.window("dequant_fp4 scales", scales, ds, DType::U8, [t.rows, t.cols / 32])?;
                self.path.pop();
            }
            Stmt::DequantFp4Stream { tile, words, scales, prefetch, .. } => {
                self.dequant_tile(*tile, "dequant_fp4_stream")?;
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
}
