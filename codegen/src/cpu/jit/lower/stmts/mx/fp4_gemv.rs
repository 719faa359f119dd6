//! Lowering [`Stmt::Fp4Gemv`] (the extension module `k3k_ir::fp4_gemv`): its operands, then the runtime call.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    /// Lower an `fp4_gemv` statement `s` (its fields `g`): the output window's shared index and the three global
    /// views, in the interpreter's order, then [`Self::host_tile`].
    pub(super) fn fp4_gemv(&mut self, s: &Stmt, g: &Fp4Gemv) -> Result<(), JitError> {
        let Fp4Gemv { out, words, scales, x, .. } = g;
        let mut args = vec![self.shared_index(out)?];
        args.extend(self.global_view(words)?);
        args.extend(self.global_view(scales)?);
        args.extend(self.global_view(x)?);
        self.host_tile(s, &args);
        Ok(())
    }
}
