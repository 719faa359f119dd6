//! The runtime's [`Stmt::Fp4Gemv`] (the extension module `k3k_ir::fp4_gemv`), as the interpreter.

use super::*;
use crate::cpu::interp::fp4_gemv_sums;

/// Run an `fp4_gemv` statement for the current block (see [`host_tile`]).
/// SAFETY: as `tile_stmt`.
pub(super) unsafe fn fp4_gemv(ctx: &mut Ctx, g: &Fp4Gemv, arg: &dyn Fn(usize) -> i64) -> Result<(), InterpError> {
    let (k, f, block, hosts) = unsafe { parts(ctx) };
    let check = bounds(k, block);
    unsafe {
        let Fp4Gemv { out, scratch, words, scales, x, packed, fold, finite, tiled, .. } = g;
        // The interpreter's sums: per valid row, its decoded blocks, one f32 sum per token in column order.
        let base = f.shared_base(out, arg(0));
        let (qo, qs, qr, qc) = (arg(1), arg(2), arg(3), arg(4));
        let (so, ss, sr, sc) = (arg(5), arg(6), arg(7), arg(8));
        let (xo, xs, xr, xc) = (arg(9), arg(10), arg(11), arg(12));
        let (rows, cols) = (out.rows as usize, out.cols as usize);
        let res = fp4_gemv_sums(
            (rows, cols),
            [(qo, qs, qr, qc), (so, ss, sr, sc), (xo, xs, xr, xc)],
            (*packed, *fold, *finite, *tiled),
            |i| {
                let si = check("fp4_gemv scales", scales.tensor, i, hosts)?;
                Ok(hosts[scales.tensor.0 as usize].get_i64(si) as u32)
            },
            |i| {
                let qi = check("fp4_gemv words", words.tensor, i, hosts)?;
                Ok(hosts[words.tensor.0 as usize].get_i64(qi) as u32)
            },
            |i| {
                let xi = check("fp4_gemv x", x.tensor, i, hosts)?;
                Ok(hosts[x.tensor.0 as usize].get_f32(xi))
            },
        )?;
        // The interpreter poisons the scratch buffer (the GPU's partials are unspecified).
        let sd = &k.shared[scratch.0 as usize];
        for i in 0..(sd.rows * sd.cols * sd.count) as usize {
            f.set_shared(*scratch, i, f64::NAN);
        }
        let d = &k.shared[out.buf.0 as usize];
        for r in 0..rows {
            for c in 0..cols {
                let at = base + (out.row0 as usize + r) * d.cols as usize + out.col0 as usize + c;
                f.set_shared(out.buf, at, res[r * cols + c] as f64);
            }
        }
    }
    Ok(())
}
