//! The MXFP4 statements on the CPU: shared and streamed FP4 decodes and the FP4 GEMV (run by [`fp4_gemv`]; the
//! decode and the GEMV's sums are `tiles::dequant_fp4_at` and [`fp4_gemv_sums`], shared with the JIT's
//! runtime).

mod fp4_gemv;

use super::tiles::dequant_fp4_at;
use super::{Block, InterpError};
pub(crate) use fp4_gemv::fp4_gemv_sums;
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
            Stmt::Fp4Gemv(g) => self.fp4_gemv(g, tensors)?,
            _ => unreachable!("not a MXFP4 statement"),
        }
        Ok(())
    }
}
