//! The MXFP4 statements: shared and streamed FP4 decodes and the FP4 GEMV.

use super::*;

/// Print one MXFP4 statement.
pub(super) fn mx_stmt(k: &Kernel, st: &Stmt, pad: &str, s: &mut String) {
    match st {
        Stmt::Fp4Gemv(g) => {
            let out = &g.out;
            let _ = writeln!(
                s,
                "{pad}{}[{}][{}+{}, {}+{}] = fp4_gemv({}, {}, x={}){}{}{}{} chunk={} ring={}{}{}{}{} scratch={}",
                k.shared[out.buf.0 as usize].name,
                expr(k, &out.index),
                out.row0,
                out.rows,
                out.col0,
                out.cols,
                global_view(k, &g.words),
                global_view(k, &g.scales),
                global_view(k, &g.x),
                if g.packed { " packed" } else { " natural" },
                if g.tiled { " tiled" } else { "" },
                if g.fold { " fold" } else { "" },
                if g.finite { " finite" } else { "" },
                g.chunk,
                g.ring,
                if g.staged { " staged" } else { "" },
                if g.l2_prefetch > 0 { format!(" l2_prefetch={}", g.l2_prefetch) } else { String::new() },
                if g.bulk { " bulk" } else { "" },
                if g.x_two_ahead { " x_two_ahead" } else { "" },
                k.shared[g.scratch.0 as usize].name,
            );
        }
        Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch } => {
            let _ = writeln!(
                s,
                "{pad}{} = dequant_fp4_stream({}, {}){}{}",
                k.tiles[tile.0 as usize].name,
                global_view(k, words),
                global_view(k, scales),
                fp4_flags(*packed, *fold, *finite),
                match prefetch {
                    Some(p) => format!(
                        " prefetch({}, {}, first={})",
                        global_view(k, &p.words),
                        global_view(k, &p.scales),
                        expr(k, &p.first)
                    ),
                    None => String::new(),
                }
            );
        }
        Stmt::DequantFp4 { tile, words, scales, packed, fold, finite } => {
            let _ = writeln!(
                s,
                "{pad}{} = dequant_fp4({}, {}){}",
                k.tiles[tile.0 as usize].name,
                shared_ref(k, words),
                shared_ref(k, scales),
                fp4_flags(*packed, *fold, *finite)
            );
        }
        _ => unreachable!("not a MXFP4 statement"),
    }
}

/// The weight flags of a decode statement as printed: ` packed` or ` natural`, then ` fold` and ` finite` where set.
fn fp4_flags(packed: bool, fold: bool, finite: bool) -> String {
    let layout = if packed { " packed" } else { " natural" };
    format!("{layout}{}{}", if fold { " fold" } else { "" }, if finite { " finite" } else { "" })
}
