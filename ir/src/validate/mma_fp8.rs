//! The validator's checks of the FP8 form of `mma_async` (`wgmma ... .e4m3.e4m3`, see [`crate::Stmt::MmaAsync`]):
//! both operands are shared windows of u32 words, each word four E4M3 codes (byte j = element 4c + j of the row),
//! stored K-contiguous in 128-byte rows (32 words = 128 E4M3 values of K, `Swizzle::Xor16B`). 8-bit `wgmma`
//! operands have no transpose mode: A is `[M, K]` (not transposed), B `[N, K]` (read transposed), and K (in
//! elements: 4 x the window's columns) is a multiple of 32 up to 128.

use super::*;

/// The A and B operands' logical `(rows, cols, dtype)` as `mma_async` read them (cols in words for u32).
type Dims = (u32, u32, DType);

impl<'a> Checker<'a> {
    pub(super) fn mma_async_e4m3(
        &self,
        c: &RegTileDecl,
        a: &Operand,
        b: &Operand,
        (am, ak, adt): Dims,
        (bn, bk, bdt): Dims,
    ) -> Result<(), IrError> {
        if adt != DType::U32 || bdt != DType::U32 {
            return Err(self.err(
                IrErrorKind::Type,
                format!("mma_async: E4M3 operands (u32 words of four codes) must be both A and B, got {adt} and {bdt}"),
            ));
        }
        if !matches!(a, Operand::Shared { transpose: false, .. })
            || !matches!(b, Operand::Shared { transpose: true, .. })
        {
            return Err(self.err(
                IrErrorKind::Layout,
                "mma_async with E4M3 operands: A a shared window [M, K] and B a shared window [N, K], both \
                 K-contiguous (8-bit wgmma operands have no transpose mode)",
            ));
        }
        if c.warps[1] != 1 {
            return Err(self.err(
                IrErrorKind::Layout,
                format!("mma_async with E4M3 operands: accumulator `{}` on warps [4*g, 1] only", c.name),
            ));
        }
        // K in elements: four codes per word; one k32 step is 32 bytes (8 words) of each row.
        let k_el = 4 * ak;
        if am != c.rows || bn != c.cols || ak != bk || !k_el.is_multiple_of(32) || k_el == 0 || k_el > 128 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "mma_async (E4M3) shapes: acc {}x{}, a {am}x{k_el}, b {bn}x{} (K in codes must match and be a \
                     multiple of 32, at most 128: one 128-byte row)",
                    c.rows,
                    c.cols,
                    4 * bk
                ),
            ));
        }
        Ok(())
    }
}

impl<'a> Checker<'a> {
    /// The element type of an operand's storage (register tile or shared buffer), if its id is declared.
    pub(super) fn operand_dtype(&self, o: &Operand) -> Option<DType> {
        match o {
            Operand::Reg(t) => self.k.tiles.get(t.0 as usize).map(|t| t.dtype),
            Operand::Shared { src, .. } | Operand::Banded { src, .. } => {
                self.k.shared.get(src.buf.0 as usize).map(|d| d.dtype)
            }
        }
    }

    /// The E4M3 form of `mma` (`mma.sync m16n8k32 .e4m3.e4m3`, see [`crate::Stmt::Mma`]): A a shared window of u32
    /// words `[M, K/4]` (not transposed), B a shared window `[N, K/4]` read transposed, K a multiple of 32, both
    /// 16-byte aligned rows (read by `ldmatrix` on their b16 view: 8 rows x 16 codes is the 8-bit fragment).
    pub(super) fn mma_sync_e4m3(&self, c: &RegTileDecl, a: &Operand, b: &Operand) -> Result<(), IrError> {
        let (Operand::Shared { src: sa, transpose: false }, Operand::Shared { src: sb, transpose: true }) = (a, b)
        else {
            return Err(self.err(
                IrErrorKind::Layout,
                "mma with E4M3 operands: A a shared window [M, K] (not transposed) and B a shared window [N, K] \
                 read transposed, both K-contiguous u32 words of four codes (no register or banded operands)",
            ));
        };
        let (da, db) = (self.mma_shared(sa)?, self.mma_shared(sb)?);
        if da.dtype != DType::U32 || db.dtype != DType::U32 {
            return Err(self.err(
                IrErrorKind::Type,
                format!(
                    "mma: E4M3 operands (u32 words of four codes) must be both A and B, got {} and {}",
                    da.dtype, db.dtype
                ),
            ));
        }
        // K in codes: four per word; one k32 step is 8 words of each row.
        let k_el = 4 * sa.cols;
        if sa.rows != c.rows || sb.rows != c.cols || sa.cols != sb.cols || k_el == 0 || !k_el.is_multiple_of(32) {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "mma (E4M3) shapes: acc {}x{}, a {}x{k_el}, b {}x{} (K in codes must match and be a multiple of 32)",
                    c.rows,
                    c.cols,
                    sa.rows,
                    sb.rows,
                    4 * sb.cols
                ),
            ));
        }
        if !c.rows.is_multiple_of(16 * c.warps[0]) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma (E4M3) accumulator `{}`: each warp's row band ({} rows on {} warps) must be a multiple of 16",
                    c.name, c.rows, c.warps[0]
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// A 128-thread kernel with one FP8 product: A `[64, 8 x aw]` words, B `[n, 8 x bw]` words (transposed or not).
    fn fp8(aw: u32, bw: u32, b_transpose: bool, a_dt: DType) -> Result<Kernel, IrError> {
        let mut b = KernelBuilder::new("fp8", 128);
        let sa = b.shared("sa", a_dt, 64, if a_dt == DType::U32 { 32 } else { 64 }, 1, Swizzle::Xor16B);
        let sb = b.shared("sb", DType::U32, 64, 32, 1, Swizzle::Xor16B);
        let acc = b.tile("acc", DType::F32, 64, 64, [4, 1]);
        let a = Operand::Shared { src: b.window(sa, 0i64, 0, 0, 64, 8 * aw), transpose: false };
        let w = Operand::Shared { src: b.window(sb, 0i64, 0, 0, 64, 8 * bw), transpose: b_transpose };
        b.mma_async_init(acc, a, w, false);
        b.mma_wait(0);
        b.finish()
    }

    #[test]
    fn fp8_products_validate_and_refuse_by_kind() {
        for k in 1..=4 {
            assert!(fp8(k, k, true, DType::U32).is_ok(), "K = {}", 32 * k);
        }
        let e = fp8(2, 2, false, DType::U32).unwrap_err();
        assert!(matches!(e.kind, IrErrorKind::Layout | IrErrorKind::Shape), "{e}");
        assert_eq!(fp8(2, 1, true, DType::U32).unwrap_err().kind, IrErrorKind::Shape);
        assert_eq!(fp8(2, 2, true, DType::Bf16).unwrap_err().kind, IrErrorKind::Type);
    }

    /// A 128-thread kernel with one E4M3 `mma` (mma.sync): A `[64, 8 aw]` words, B `[32, 8 bw]` words (transposed
    /// or not), the accumulator `[64, 32]` on warps [4, 1] or [2, 2]; `b_dt` the B buffer's type.
    fn sync_fp8(aw: u32, bw: u32, b_transpose: bool, b_dt: DType, warps: [u32; 2]) -> Result<Kernel, IrError> {
        let mut b = KernelBuilder::new("fp8s", 128);
        let sa = b.shared("sa", DType::U32, 64, 32, 1, Swizzle::Xor16B);
        let sb = b.shared("sb", b_dt, 32, if b_dt == DType::U32 { 32 } else { 64 }, 1, Swizzle::Xor16B);
        let acc = b.tile("acc", DType::F32, 64, 32, warps);
        let a = Operand::Shared { src: b.window(sa, 0i64, 0, 8, 64, 8 * aw), transpose: false };
        let w = Operand::Shared { src: b.window(sb, 0i64, 0, 0, 32, 8 * bw), transpose: b_transpose };
        b.mma(acc, a, w);
        b.finish()
    }

    #[test]
    fn fp8_sync_products_validate_and_refuse_by_kind() {
        for k in 1..=3 {
            assert!(sync_fp8(k, k, true, DType::U32, [4, 1]).is_ok(), "K = {}", 32 * k);
            assert!(sync_fp8(k, k, true, DType::U32, [2, 2]).is_ok(), "K = {}, warps [2, 2]", 32 * k);
        }
        assert_eq!(sync_fp8(2, 2, false, DType::U32, [4, 1]).unwrap_err().kind, IrErrorKind::Layout);
        assert_eq!(sync_fp8(2, 1, true, DType::U32, [4, 1]).unwrap_err().kind, IrErrorKind::Shape);
        assert_eq!(sync_fp8(2, 2, true, DType::Bf16, [4, 1]).unwrap_err().kind, IrErrorKind::Type);
        // 32 columns on 4 column bands: 8 per warp, not a multiple of 16.
        assert_eq!(sync_fp8(1, 1, true, DType::U32, [1, 4]).unwrap_err().kind, IrErrorKind::Layout);
    }
}
