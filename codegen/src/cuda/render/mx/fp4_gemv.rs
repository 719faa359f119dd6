//! Rendering [`Stmt::Fp4Gemv`] (the extension module `k3k_ir::fp4_gemv`) as one call of the prelude's
//! `k3k::fp4_gemv` (`prelude/tiles/fp4_gemv.cuh`).

use super::*;

impl<'a> Renderer<'a> {
    /// Render an `fp4_gemv` statement.
    pub(super) fn fp4_gemv(&mut self, g: &Fp4Gemv) {
        let k = self.k;
        let (out, Fp4Flags { packed, fold, finite }) = (&g.out, g.flags());
        let line = format!(
            "k3k::fp4_gemv<{packed}, {fold}, {finite}, {}, {}, {}, {}, {}, {}, {}{}>({}, {}, {}, s{}, {}, {}, {});",
            out.rows,
            out.cols,
            k.threads / 32,
            g.chunk,
            g.ring,
            self.shared_layout(out.buf),
            self.shared_layout(g.scratch),
            match (g.staged, g.l2_prefetch, g.tiled, g.bulk, g.x_two_ahead) {
                (false, ..) => String::new(),
                (true, n, t, b, true) => format!(", true, {n}, {t}, {b}, true"),
                (true, 0, false, _, false) => ", true".to_string(),
                (true, n, false, _, false) => format!(", true, {n}"),
                (true, n, true, false, false) => format!(", true, {n}, true"),
                (true, n, true, true, false) => format!(", true, {n}, true, true"),
            },
            self.shared_ptr(out),
            out.row0,
            out.col0,
            g.scratch.0,
            self.view_args(&g.words),
            self.view_args(&g.scales),
            self.view_args(&g.x)
        );
        self.line(&line);
    }
}
