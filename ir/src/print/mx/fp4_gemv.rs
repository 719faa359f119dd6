//! Printing [`Stmt::Fp4Gemv`] (the extension module `k3k_ir::fp4_gemv`).

use super::*;

/// Print an `fp4_gemv` statement.
pub(super) fn fp4_gemv_stmt(k: &Kernel, st: &Stmt, pad: &str, s: &mut String) {
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
        _ => unreachable!("not a `fp4_gemv` statement"),
    }
}
