//! The runtime's MXFP4 statements: shared and streamed FP4 decodes and the FP4 GEMV (in [`fp4_gemv`]), as the
//! interpreter.

mod fp4_gemv;

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
            Stmt::Fp4Gemv(g) => fp4_gemv::fp4_gemv(ctx, g, arg)?,
            _ => unreachable!("not a MXFP4 statement"),
        }
    }
    Ok(())
}
