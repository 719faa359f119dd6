//! The MXFP4 statements on the CPU: shared and streamed FP4 decodes and the FP4 GEMV (the decode and the
//! GEMV's sums are `tiles::dequant_fp4_at` and `tiles::fp4_gemv_sums`, shared with the JIT's runtime).

use super::tiles::{dequant_fp4_at, fp4_gemv_sums};
use super::{Block, InterpError};
use k3k_ir::*;

impl<'a> Block<'a> {
    /// Execute one MXFP4 statement.
    pub(super) fn mx_stmt(&mut self, s: &Stmt, tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        let k = self.k;
        match s {
            Stmt::DequantFp4 { tile, words, scales, packed, fold, finite } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let qb = self.shared_base(words, tensors)?;
                let sb = self.shared_base(scales, tensors)?;
                let mut out = vec![0.0f64; rows * cols];
                for r in 0..rows {
                    for c in 0..cols {
                        let word = |i| Ok(self.shared_at(words, qb, r, i) as u32);
                        let scale = |b| Ok(self.shared_at(scales, sb, r, b) as u32);
                        out[r * cols + c] = dequant_fp4_at(c, (*packed, *fold, *finite), word, scale)?;
                    }
                }
                self.tiles[tile.0 as usize] = out;
            }
            Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch } => {
                if let Some(p) = prefetch {
                    // The GPU issues the prefetch views' loads: bound-check them the same way (the decode of
                    // the statement's own views below overwrites every element of the tile).
                    self.eval(&p.first, None, tensors)?;
                    let pre = Stmt::DequantFp4Stream {
                        tile: *tile,
                        words: p.words.clone(),
                        scales: p.scales.clone(),
                        packed: *packed,
                        fold: *fold,
                        finite: *finite,
                        prefetch: None,
                    };
                    self.mx_stmt(&pre, tensors)?;
                }
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let (qo, qs, qr, qc) = self.view(words, tensors)?;
                let (so, ss, sr, sc) = self.view(scales, tensors)?;
                let mut out = vec![0.0f64; rows * cols];
                for r in 0..rows {
                    for c in 0..cols {
                        let (ri, bl) = (r as i64, (c / 32) as i64);
                        if ri >= qr || ri >= sr || bl >= qc / 4 || bl >= sc {
                            continue;
                        }
                        let read = |what, t, at| Ok(self.global_read(what, t, at, true, tensors)? as u32);
                        let word = |i: usize| read("dequant_fp4_stream words", words.tensor, qo + ri * qs + i as i64);
                        let scale =
                            |b: usize| read("dequant_fp4_stream scales", scales.tensor, so + ri * ss + b as i64);
                        out[r * cols + c] = dequant_fp4_at(c, (*packed, *fold, *finite), word, scale)?;
                    }
                }
                self.tiles[tile.0 as usize] = out;
            }
            Stmt::Fp4Gemv(g) => {
                let Fp4Gemv { out, scratch, words, scales, x, packed, fold, finite, tiled, .. } = &**g;
                let (qo, qs, qr, qc) = self.view(words, tensors)?;
                let (so, ss, sr, sc) = self.view(scales, tensors)?;
                let (xo, xs, xr, xc) = self.view(x, tensors)?;
                let base = self.shared_base(out, tensors)?;
                let (rows, cols) = (out.rows as usize, out.cols as usize);
                let res = fp4_gemv_sums(
                    (rows, cols),
                    [(qo, qs, qr, qc), (so, ss, sr, sc), (xo, xs, xr, xc)],
                    (*packed, *fold, *finite, *tiled),
                    |i| Ok(self.global_read("fp4_gemv scales", scales.tensor, i, true, tensors)? as u32),
                    |i| Ok(self.global_read("fp4_gemv words", words.tensor, i, true, tensors)? as u32),
                    |i| Ok(self.global_read("fp4_gemv x", x.tensor, i, false, tensors)? as f32),
                )?;
                // The GPU leaves its warps' partials in `scratch`: unspecified, poisoned here.
                self.claim(*scratch);
                self.shared[scratch.0 as usize].poison(DType::F32);
                self.claim(out.buf);
                let d = &k.shared[out.buf.0 as usize];
                for r in 0..rows {
                    for c in 0..cols {
                        let at = base + (out.row0 as usize + r) * d.cols as usize + out.col0 as usize + c;
                        self.shared[out.buf.0 as usize].set_f64(d.dtype, at, res[r * cols + c] as f64);
                    }
                }
            }
            _ => unreachable!("not a MXFP4 statement"),
        }
        Ok(())
    }
}
