//! MXFP4 statements (`dequant_fp4`, `dequant_fp4_stream`, `fp4_gemv` in [`fp4_gemv`]), through the runtime.

mod fp4_gemv;

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    pub(super) fn mx_stmt(&mut self, s: &Stmt) -> Result<(), JitError> {
        match s {
            Stmt::DequantFp4 { words, scales, .. } => {
                let qi = self.shared_index(words)?;
                let si = self.shared_index(scales)?;
                self.host_tile(s, &[qi, si]);
            }
            Stmt::DequantFp4Stream { words, scales, prefetch, .. } => {
                let mut args = vec![];
                args.extend(self.global_view(words)?);
                args.extend(self.global_view(scales)?);
                if let Some(p) = prefetch {
                    // Evaluated as the interpreter does (its errors end the run the same way); the views follow.
                    self.expr(&p.first)?;
                    args.extend(self.global_view(&p.words)?);
                    args.extend(self.global_view(&p.scales)?);
                }
                self.host_tile(s, &args);
            }
            Stmt::Fp4Gemv(g) => self.fp4_gemv(s, g)?,
            _ => unreachable!("not a MXFP4 statement"),
        }
        Ok(())
    }
}
