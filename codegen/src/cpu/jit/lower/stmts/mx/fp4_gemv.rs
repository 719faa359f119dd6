//! Lowering [`Stmt::Fp4Gemv`] (the extension module `k3k_ir::fp4_gemv`): its operands, then the runtime call.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    /// Lower an `fp4_gemv` statement: the output window's shared index and the three global views, in the
    /// interpreter's order, then [`Self::host_tile`].
    pub(super) fn fp4_gemv(&mut self, s: &Stmt) -> Result<(), JitError> {
        match s {
            Stmt::Fp4Gemv { out, words, scales, x, .. } => {
                let mut args = vec![self.shared_index(out)?];
                args.extend(self.global_view(words)?);
                args.extend(self.global_view(scales)?);
                args.extend(self.global_view(x)?);
                self.host_tile(s, &args);
            }
            _ => unreachable!("not a `fp4_gemv` statement"),
        }
        Ok(())
    }
}
