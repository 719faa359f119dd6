//! Rendering [`Stmt::Fp4Gemv`] (the extension module `k3k_ir::fp4_gemv`) as one call of the prelude's
//! `k3k::fp4_gemv` (`prelude/tiles/fp4_gemv.cuh`).

use super::*;

impl<'a> Renderer<'a> {
    /// Render an `fp4_gemv` statement.
    pub(super) fn fp4_gemv(&mut self, s: &Stmt) {
        let k = self.k;
        match s {
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
                let line = format!(
                    "k3k::fp4_gemv<{packed}, {fold}, {finite}, {}, {}, {}, {chunk}, {ring}, {}, {}{}>({}, {}, {}, s{}, {}, {}, {});",
                    out.rows,
                    out.cols,
                    k.threads / 32,
                    self.shared_layout(out.buf),
                    self.shared_layout(*scratch),
                    match (*staged, *l2_prefetch, *tiled, *bulk, *x_two_ahead) {
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
                    scratch.0,
                    self.view_args(words),
                    self.view_args(scales),
                    self.view_args(x)
                );
                self.line(&line);
            }
            _ => unreachable!("not a `fp4_gemv` statement"),
        }
    }
}
