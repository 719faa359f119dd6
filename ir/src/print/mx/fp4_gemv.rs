//! Printing [`Stmt::Fp4Gemv`] (the extension module `k3k_ir::fp4_gemv`).

use super::*;
use crate::fp4_gemv::Fp4Gemv;

/// Print an `fp4_gemv` statement.
pub(super) fn fp4_gemv_stmt(k: &Kernel, g: &Fp4Gemv, pad: &str, s: &mut String) {
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
