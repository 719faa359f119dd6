//! The MXFP4 statements: shared and streamed FP4 decodes and the FP4 GEMV (rendered by [`fp4_gemv`]).

mod fp4_gemv;

use super::*;

impl<'a> Renderer<'a> {
    pub(super) fn mx_stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::DequantFp4 { tile, words, scales, packed, fold, finite } => {
                let line = format!(
                    "k3k::dequant_fp4<{packed}, {fold}, {finite}, {}, {}, {}>(t{}, {}, {}, {}, {}, {}, {});",
                    self.tile_ty(*tile),
                    self.shared_layout(words.buf),
                    self.shared_layout(scales.buf),
                    tile.0,
                    self.shared_ptr(words),
                    words.row0,
                    words.col0,
                    self.shared_ptr(scales),
                    scales.row0,
                    scales.col0
                );
                self.line(&line);
            }
            Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch: None } => {
                let line = format!(
                    "k3k::dequant_fp4_stream<{packed}, {fold}, {finite}, {}>(t{}, {}, {});",
                    self.tile_ty(*tile),
                    tile.0,
                    self.view_args(words),
                    self.view_args(scales)
                );
                self.line(&line);
            }
            Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch: Some(p) } => {
                let line = format!(
                    "k3k::dequant_fp4_stream_pf<{packed}, {fold}, {finite}, {}>(t{}, {}, {}, {}, {}, {}, {});",
                    self.tile_ty(*tile),
                    tile.0,
                    prefetch_buf(*tile, *packed),
                    self.e(&p.first, Ctx::Scalar),
                    self.view_args(words),
                    self.view_args(scales),
                    self.view_args(&p.words),
                    self.view_args(&p.scales)
                );
                self.line(&line);
            }
            Stmt::Fp4Gemv(g) => self.fp4_gemv(g),
            _ => unreachable!("not a MXFP4 statement"),
        }
    }
}
