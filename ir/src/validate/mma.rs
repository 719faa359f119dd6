//! The validator's checks of the tensor-core products (`mma`, `mma_async` and their shared operands).

use super::*;

impl<'a> Checker<'a> {
    /// A register A operand of an `mma` or `mma_async` (`what` prefixes the message): tile `t` on the accumulator
    /// `c`'s row bands, warps `[c.warps[0], 1]`.
    fn reg_a(&self, t: TileId, c: &RegTileDecl, what: &str) -> Result<&'a RegTileDecl, IrError> {
        let t = self.tile(t)?;
        if t.warps != [c.warps[0], 1] {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "{what}register A operand `{}` must use warps [{}, 1] (the accumulator's row bands)",
                    t.name, c.warps[0]
                ),
            ));
        }
        Ok(t)
    }

    /// A shared mma operand is read with `ldmatrix`, 16-byte rows of 8 elements at a time: its rows and its
    /// first column must sit on 16-byte boundaries.
    pub(super) fn mma_shared(&self, src: &SharedRef) -> Result<&'a SharedDecl, IrError> {
        let d = self.shared_ref(src)?;
        if !d.dtype.storage_bytes(d.cols as usize).is_multiple_of(16) || !src.col0.is_multiple_of(8) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma operand in shared `{}`: rows of {} bytes and window col0 = {} must be 16-byte aligned",
                    d.name,
                    d.dtype.storage_bytes(d.cols as usize),
                    src.col0
                ),
            ));
        }
        Ok(d)
    }

    /// A `wgmma` operand: a K-major window of 128-byte swizzled rows, starting on an 8-row atom at column 0.
    /// A shared `wgmma` operand: Xor16B-swizzled 128-byte rows, the window at column 0 on a multiple of 8 rows.
    pub(super) fn wgmma_shared(&self, src: &SharedRef, which: &str) -> Result<DType, IrError> {
        let d = self.shared_ref(src)?;
        // E4M3 words (the FP8 form): a window may start at a k32 step of the row (8 words).
        let col_ok = src.col0 == 0 || (d.dtype == DType::U32 && src.col0.is_multiple_of(8));
        if !d.is_swizzle_128b() || !d.rows.is_multiple_of(8) || !col_ok || !src.row0.is_multiple_of(8) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma_async: the {which} operand's shared `{}` must have Xor16B-swizzled 128-byte rows ({} bytes \
                     here), a multiple of 8 rows, and the window must start at column 0 on a multiple of 8 rows \
                     (row0 {}, col0 {})",
                    d.name,
                    d.row_bytes(),
                    src.row0,
                    src.col0
                ),
            ));
        }
        Ok(d.dtype)
    }

    pub(super) fn mma_async(&self, acc: TileId, a: &Operand, b: &Operand) -> Result<(), IrError> {
        let c = self.tile(acc)?;
        if c.dtype != DType::F32 {
            return Err(self.err(IrErrorKind::Type, format!("mma_async accumulator `{}` must be f32", c.name)));
        }
        // Warps [4g, 1]: g warpgroups of 64 rows, replicated over the block's other warpgroups (each replica
        // computes the same product). Warps [4g, 2] (column bands, all warps of the block): warpgroup g * j + i
        // computes row band i, column band j, reading the same columns of an N-contiguous B.
        let groups = c.warps[0] / 4;
        let banded = c.warps[1] > 1;
        let warps_ok = if banded {
            c.warps[1] == 2 && c.warps[0] * 2 == self.k.warps()
        } else {
            c.warps[1] == 1 && self.k.warps().is_multiple_of(c.warps[0])
        };
        if groups == 0 || !c.warps[0].is_multiple_of(4) || !warps_ok || c.rows != 64 * groups {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma_async accumulator `{}` ({}x{} on warps {:?}) must have 64 rows per warpgroup on warps [4*g, 1] \
                     (replicated over the block's {} warps) or [4*g, 2] using all of them",
                    c.name,
                    c.rows,
                    c.cols,
                    c.warps,
                    self.k.warps()
                ),
            ));
        }
        let n = c.cols / c.warps[1];
        if n > 256 || !n.is_multiple_of(8) || !c.cols.is_multiple_of(c.warps[1]) {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("mma_async: N = {n} per warpgroup must be a multiple of 8 up to 256"),
            ));
        }
        if banded && !matches!(b, Operand::Shared { transpose: false, .. }) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma_async accumulator `{}` on column bands needs a B operand stored [K, N] (N-contiguous)",
                    c.name
                ),
            ));
        }
        // A: a K-contiguous shared window [M, K] (K <= 64, one swizzled row), or a 16-bit register tile on the
        // accumulator's warps (its m16n8 pairs are the register A fragments of m64nNk16).
        let (am, ak, adt, a_kmax) = match a {
            Operand::Shared { src, transpose: false } => {
                let dt = self.wgmma_shared(src, "A")?;
                (src.rows, src.cols, dt, 64)
            }
            Operand::Reg(t) => {
                let t = self.reg_a(*t, c, "mma_async: ")?;
                (t.rows, t.cols, t.dtype, u32::MAX)
            }
            _ => {
                return Err(self.err(
                    IrErrorKind::Layout,
                    "mma_async: the A operand is a register tile or a shared window stored K-contiguous as [M, K]",
                ));
            }
        };
        // B: stored [N, K] (K-contiguous, read transposed; K <= 64) or [K, N] (N-contiguous, N = 64: one
        // swizzled row, the wgmma transpose mode; K any multiple of 16).
        let (bn, bk, bdt, b_kmax) = match b {
            Operand::Shared { src, transpose: true } => {
                let dt = self.wgmma_shared(src, "B")?;
                (src.rows, src.cols, dt, 64)
            }
            Operand::Shared { src, transpose: false } => {
                let dt = self.wgmma_shared(src, "B")?;
                if src.cols != 64 || !src.rows.is_multiple_of(16) {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "mma_async: a B operand stored [K, N] must be N = 64 columns by a multiple of 16 rows \
                             ({}x{} here)",
                            src.rows, src.cols
                        ),
                    ));
                }
                (src.cols, src.rows, dt, u32::MAX)
            }
            _ => {
                return Err(self
                    .err(IrErrorKind::Layout, "mma_async: the B operand must be a shared window ([N, K] or [K, N])"));
            }
        };
        if adt == DType::U32 || bdt == DType::U32 {
            // E4M3 codes packed four to a u32 word (`mma_fp8.rs`).
            return self.mma_async_e4m3(c, a, b, (am, ak, adt), (bn, bk, bdt));
        }
        if !matches!(adt, DType::Bf16 | DType::F16) || adt != bdt {
            return Err(self.err(
                IrErrorKind::Type,
                format!("mma_async operands must both be bf16 or both f16, got {adt} and {bdt}"),
            ));
        }
        if am != c.rows || bn != c.cols || ak != bk || !ak.is_multiple_of(16) || ak > a_kmax.min(b_kmax) {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "mma_async shapes: acc {}x{}, a {am}x{ak}, b {bk}x{bn} (K must match and be a multiple of 16, at \
                     most 64 for a K-contiguous shared operand)",
                    c.rows, c.cols
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn mma(&self, acc: TileId, a: &Operand, b: &Operand) -> Result<(), IrError> {
        let c = self.tile(acc)?;
        if c.dtype != DType::F32 {
            return Err(self.err(IrErrorKind::Type, format!("mma accumulator `{}` must be f32", c.name)));
        }
        if (c.cols / c.warps[1]) % 16 != 0 {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "mma accumulator `{}`: each warp's column band ({}) must be a multiple of 16",
                    c.name,
                    c.cols / c.warps[1]
                ),
            ));
        }
        if [a, b].iter().any(|o| self.operand_dtype(o) == Some(DType::U32)) {
            // E4M3 codes packed four to a u32 word (`mma_fp8.rs`).
            return self.mma_sync_e4m3(c, a, b);
        }
        // Logical [rows, cols] of each operand and its element type.
        let (am, ak, adt) = match a {
            Operand::Reg(t) => {
                let t = self.reg_a(*t, c, "")?;
                (t.rows, t.cols, t.dtype)
            }
            Operand::Shared { src, transpose } => {
                let d = self.mma_shared(src)?;
                if *transpose { (src.cols, src.rows, d.dtype) } else { (src.rows, src.cols, d.dtype) }
            }
            Operand::Banded { .. } => {
                return Err(self.err(IrErrorKind::Layout, "a banded operand can only be the B operand"));
            }
        };
        let (bk, bn, bdt) = match b {
            Operand::Reg(_) => return Err(self.err(IrErrorKind::Layout, "the B operand must come from shared memory")),
            Operand::Shared { src, transpose } => {
                let d = self.mma_shared(src)?;
                if *transpose { (src.cols, src.rows, d.dtype) } else { (src.rows, src.cols, d.dtype) }
            }
            Operand::Banded { src, transpose } => {
                let d = self.mma_shared(src)?;
                let last = src.row0 + c.warps[0] * src.rows;
                if last > d.rows {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "banded operand: {} row bands of {} rows from row {} end at row {last}, outside shared `{}` ({} rows)",
                            c.warps[0], src.rows, src.row0, d.name, d.rows
                        ),
                    ));
                }
                if *transpose { (src.cols, src.rows, d.dtype) } else { (src.rows, src.cols, d.dtype) }
            }
        };
        if !matches!(adt, DType::Bf16 | DType::F16) || adt != bdt {
            return Err(
                self.err(IrErrorKind::Type, format!("mma operands must both be bf16 or both f16, got {adt} and {bdt}"))
            );
        }
        if am != c.rows || bn != c.cols || ak != bk || ak % 16 != 0 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "mma shapes: acc {}x{}, a {am}x{ak}, b {bk}x{bn} (K must match and be a multiple of 16)",
                    c.rows, c.cols
                ),
            ));
        }
        Ok(())
    }
}
