//! The runtime's MXFP4 statements: shared and streamed FP4 decodes and the FP4 GEMV, as the interpreter.

use super::*;

/// Run a MXFP4 statement for the current block (see [`host_tile`]).
/// SAFETY: as `tile_stmt`.
pub(super) unsafe fn mx_stmt(ctx: &mut Ctx, s: &Stmt, arg: &dyn Fn(usize) -> i64) -> Result<(), InterpError> {
    let (k, f, block, hosts) = unsafe { parts(ctx) };
    let check = bounds(k, block);
    unsafe {
        match s {
            Stmt::DequantFp4 { tile, words, scales, packed, fold, finite } => {
                // The interpreter's decode, element by element (the tile is bf16: every value is exact in it).
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let (qb, sb) = (f.shared_base(words, arg(0)), f.shared_base(scales, arg(1)));
                for r in 0..rows {
                    for c in 0..cols {
                        let word = |i| Ok(f.shared_at(words, qb, r, i) as u32);
                        let scale = |b| Ok(f.shared_at(scales, sb, r, b) as u32);
                        f.set_tile(*tile, r * cols + c, dequant_fp4_at(c, (*packed, *fold, *finite), word, scale)?);
                    }
                }
            }
            Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch } => {
                // The interpreter's decode, element by element; with a prefetch, its views first (arguments 8..16,
                // bounds-checked as the GPU's loads), then the statement's own views overwrite every element.
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let mut passes = vec![];
                if let Some(p) = prefetch {
                    passes.push((8usize, p.words.tensor, p.scales.tensor));
                }
                passes.push((0, words.tensor, scales.tensor));
                for (base, wt, st) in passes {
                    let (qo, qs, qr, qc) = (arg(base), arg(base + 1), arg(base + 2), arg(base + 3));
                    let (so, ss, sr, sc) = (arg(base + 4), arg(base + 5), arg(base + 6), arg(base + 7));
                    for r in 0..rows {
                        for c in 0..cols {
                            let (ri, bl) = (r as i64, (c / 32) as i64);
                            let val = if ri >= qr || ri >= sr || bl >= qc / 4 || bl >= sc {
                                0.0
                            } else {
                                let read = |what, t: TensorId, at| {
                                    Ok(hosts[t.0 as usize].get_i64(check(what, t, at, hosts)?) as u32)
                                };
                                let word = |i| read("dequant_fp4_stream words", wt, qo + ri * qs + i as i64);
                                let scale = |b| read("dequant_fp4_stream scales", st, so + ri * ss + b as i64);
                                dequant_fp4_at(c, (*packed, *fold, *finite), word, scale)?
                            };
                            f.set_tile(*tile, r * cols + c, val);
                        }
                    }
                }
            }
            Stmt::Fp4Gemv(g) => {
                let Fp4Gemv { out, scratch, words, scales, x, packed, fold, finite, tiled, .. } = &**g;
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
            _ => unreachable!("not a MXFP4 statement"),
        }
    }
    Ok(())
}
