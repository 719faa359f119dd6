//! The MXFP4 statements: shared and streamed FP4 decodes and the FP4 GEMV.

use super::*;

/// Print one MXFP4 statement.
pub(super) fn mx_stmt(k: &Kernel, st: &Stmt, pad: &str, s: &mut String) {
    match st {
        Stmt::Fp4Gemv {
            out,
            scratch,
            words,
            scales,
            x,
            packed,
            fold,
            finite,
            chunk,
            ring,
            staged,
            l2_prefetch,
            tiled,
            bulk,
            x_two_ahead,
        } => {
            let _ = writeln!(
                s,
                "{pad}{}[{}][{}+{}, {}+{}] = fp4_gemv({}, {}, x={}){}{}{}{} chunk={chunk} ring={ring}{}{}{}{} scratch={}",
                k.shared[out.buf.0 as usize].name,
                expr(k, &out.index),
                out.row0,
                out.rows,
                out.col0,
                out.cols,
                global_view(k, words),
                global_view(k, scales),
                global_view(k, x),
                if *packed { " packed" } else { " natural" },
                if *tiled { " tiled" } else { "" },
                if *fold { " fold" } else { "" },
                if *finite { " finite" } else { "" },
                if *staged { " staged" } else { "" },
                if *l2_prefetch > 0 { format!(" l2_prefetch={l2_prefetch}") } else { String::new() },
                if *bulk { " bulk" } else { "" },
                if *x_two_ahead { " x_two_ahead" } else { "" },
                k.shared[scratch.0 as usize].name,
            );
        }
        Stmt::DequantFp4Stream { tile, words, scales, packed, fold, finite, prefetch } => {
            let _ = writeln!(
                s,
                "{pad}{} = dequant_fp4_stream({}, {}){}{}{}{}",
                k.tiles[tile.0 as usize].name,
                global_view(k, words),
                global_view(k, scales),
                if *packed { " packed" } else { " natural" },
                if *fold { " fold" } else { "" },
                if *finite { " finite" } else { "" },
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
                "{pad}{} = dequant_fp4({}, {}){}{}{}",
                k.tiles[tile.0 as usize].name,
                shared_ref(k, words),
                shared_ref(k, scales),
                if *packed { " packed" } else { " natural" },
                if *fold { " fold" } else { "" },
                if *finite { " finite" } else { "" }
            );
        }
        _ => unreachable!("not a MXFP4 statement"),
    }
}
