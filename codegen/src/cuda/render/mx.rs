//! The MXFP4 statements: shared and streamed FP4 decodes and the FP4 GEMV.

use super::*;

impl<'a> Renderer<'a> {
    pub(super) fn mx_stmt(&mut self, s: &Stmt) {
        let k = self.k;
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
            Stmt::Fp4Gemv(g) => {
                let (out, Fp4Flags { packed, fold, finite }) = (&g.out, g.flags());
                let line = format!(
                    "k3k::fp4_gemv<{packed}, {fold}, {finite}, {}, {}, {}, {}, {}, {}, {}{}>({}, {}, {}, s{}, {}, {}, {});",
                    out.rows,
                    out.cols,
                    k.threads / 32,
                    g.chunk,
                    g.ring,
                    self.shared_layout(out.buf),
                    self.shared_layout(g.scratch),
                    match (g.staged, g.l2_prefetch, g.tiled, g.bulk, g.x_two_ahead) {
                        (false, ..) => String::new(),
                        (true, n, t, b, true) => format!(", true, {n}, {t}, {b}, true"),
                        (true, 0, false, _, false) => ", true".to_string(),
                        (true, n, false, _, false) => format!(", true, {n}"),
                        (true, n, true, false, false) => format!(", true, {n}, true"),
                        (true, n, true, true, false) => format!(", true, {n}, true, true"),
                    },
                    self.shared_ptr(out),
                    out.row0,
                    out.col0,
                    g.scratch.0,
                    self.view_args(&g.words),
                    self.view_args(&g.scales),
                    self.view_args(&g.x)
                );
                self.line(&line);
            }
            _ => unreachable!("not a MXFP4 statement"),
        }
    }
}
