//! [`Stmt::Fp4Gemv`] on the CPU (the extension module `k3k_ir::fp4_gemv`): the interpreter's statement and the
//! sums it shares with the JIT's runtime.

use super::super::tiles::dequant_fp4_value;
use super::super::{Block, InterpError};
use k3k_ir::*;

impl<'a> Block<'a> {
    /// Execute an `fp4_gemv` statement.
    pub(super) fn fp4_gemv(&mut self, g: &Fp4Gemv, tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        let k = self.k;
        let Fp4Gemv { out, scratch, words, scales, x, packed, fold, finite, tiled, .. } = g;
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
        Ok(())
    }
}

/// The sums of `Stmt::Fp4Gemv`, shared by the interpreter and the JIT's host call so that both compute them
/// alike: `out[r, t]` for every weight row below the words' and the scales' valid rows, its decoded blocks (every
/// block valid in both views) times token `t`'s activations, one f32 sum in column order; x is read in whole
/// 8-column groups, as the GPU's 16-byte loads. `views` are (offset, row stride, rows, cols) of the words, the
/// scales and x; `flags` are (packed, fold, finite, tiled); `scale`, `word` and `xval` read one element of their
/// tensor at a flat index (checking it). With `tiled`, the words' and the scales' views start at the stored place
/// of their first element and their elements follow tile-major from there ([`fp4::tile_major`] of the index
/// relative to the view, the views' row strides as row lengths; `Stmt::Fp4Gemv`).
pub(crate) fn fp4_gemv_sums(
    (rows, cols): (usize, usize),
    views: [(i64, i64, i64, i64); 3],
    (packed, fold, finite, tiled): (bool, bool, bool, bool),
    mut scale: impl FnMut(i64) -> Result<u32, InterpError>,
    mut word: impl FnMut(i64) -> Result<u32, InterpError>,
    mut xval: impl FnMut(i64) -> Result<f32, InterpError>,
) -> Result<Vec<f32>, InterpError> {
    let [(qo, qs, qr, qc), (so, ss, sr, sc), (xo, xs, xr, xc)] = views;
    let nblk = (qc / 4).min(sc).max(0);
    let mut res = vec![0.0f32; rows * cols];
    for r in 0..rows {
        let ri = r as i64;
        if ri >= qr || ri >= sr {
            continue;
        }
        let mut wv = Vec::with_capacity(nblk as usize * 32);
        // Element `i` of a view (its index relative to the view's start, row-major with the view's stride).
        let at = |i: i64, stride: i64, unit: usize| -> i64 {
            if tiled && i >= 0 && stride > 0 { fp4::tile_major(i as usize, stride as usize, unit) as i64 } else { i }
        };
        for bl in 0..nblk {
            let sv = scale(so + at(ri * ss + bl, ss, fp4::TILE_QUAD_SCALES))?;
            for c in 0..32usize {
                let (w, p) = fp4::slot(c % 32, packed);
                let wd = word(qo + at(ri * qs + 4 * bl + w as i64, qs, fp4::TILE_QUAD_WORDS))?;
                wv.push(dequant_fp4_value(fp4::code(wd, p, packed), sv, fold, finite));
            }
        }
        for t in 0..cols.min(xr.max(0) as usize) {
            let mut acc = 0.0f32;
            for (c, &w) in wv.iter().enumerate() {
                let xv = if (c as i64 / 8) * 8 + 8 <= xc { xval(xo + t as i64 * xs + c as i64)? } else { 0.0 };
                acc += w * xv;
            }
            res[r * cols + t] = acc;
        }
    }
    Ok(res)
}
