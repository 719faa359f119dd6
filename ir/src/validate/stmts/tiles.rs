//! Tile statements: loads and stores of tiles and vectors, column stores, `map`, `vec_map`, `reduce`,
//! `scan`, and the tensor-core products (`mma`, `mma_async`, `mma_wait`).

use super::*;

impl<'a> Checker<'a> {
    /// Solo tiles ([`RegTileDecl::solo`]): their replica warps hold no values, so a solo tile is read only by
    /// stores, maps into solo tiles (checked with the map's element reads) and products into a solo accumulator
    /// of the same warps; no reductions, scans or warpgroup products on them.
    pub(super) fn solo_reads(&self, s: &Stmt) -> Result<(), IrError> {
        let solo = |t: &TileId| self.k.tiles.get(t.0 as usize).is_some_and(|d| d.solo);
        let bad = |what: &str| Err(self.err(IrErrorKind::Layout, format!("solo tile: {what}")));
        match s {
            Stmt::Reduce { tile, .. } | Stmt::Scan { tile, .. } if solo(tile) => bad("no row reductions or scans"),
            Stmt::MmaAsync { acc, a, .. } if solo(acc) || matches!(a, Operand::Reg(t) if solo(t)) => {
                bad("no warpgroup products")
            }
            Stmt::Mma { acc, a: Operand::Reg(t), .. } if solo(t) => {
                let (c, x) = (self.tile(*acc)?, self.tile(*t)?);
                if c.solo && c.warps == x.warps {
                    Ok(())
                } else {
                    bad("a register A operand needs a solo accumulator of its warps")
                }
            }
            _ => Ok(()),
        }
    }

    pub(super) fn tile_stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s {
            Stmt::Scan { tile, scratch, op: _ } => {
                let t = self.tile(*tile)?;
                let d = self.shared(*scratch)?;
                self.path.push(format!("scan `{}`", t.name));
                if t.dtype != DType::F32 {
                    return Err(
                        self.err(IrErrorKind::Type, format!("scans run on f32 tiles, `{}` is {}", t.name, t.dtype))
                    );
                }
                if d.dtype != DType::F32 || d.rows < t.rows || d.cols < t.cols {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "scan scratch `{}` ({} {}x{}) must be f32 and at least {}x{}",
                            d.name, d.dtype, d.rows, d.cols, t.rows, t.cols
                        ),
                    ));
                }
                self.path.pop();
            }
            Stmt::Map { tile, value } => {
                let t = self.tile(*tile)?;
                self.path.push(format!("map `{}`", t.name));
                let want = if t.dtype == DType::I32 { ScalarTy::Int } else { ScalarTy::Float };
                self.expect(value, Ctx::Elem { tile: t }, want, "mapped value")?;
                self.path.pop();
            }
            Stmt::VecMap { vec, value } => {
                let v = self.vec(*vec)?;
                self.path.push(format!("vec_map `{}`", v.name));
                self.expect(value, Ctx::Row { vec: v }, ScalarTy::Float, "row value")?;
                self.path.pop();
            }
            Stmt::Reduce { vec, tile, .. } => {
                let (v, t) = (self.vec(*vec)?, self.tile(*tile)?);
                if t.warps[1] != 1 {
                    return Err(
                        self.err(IrErrorKind::Layout, format!("row reduction of `{}` needs warps[1] = 1", t.name))
                    );
                }
                if v.rows != t.rows || v.warps != t.warps {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!("vector `{}` must match tile `{}` rows and warps", v.name, t.name),
                    ));
                }
                if t.dtype == DType::I32 {
                    return Err(self.err(IrErrorKind::Type, "row reductions are over float tiles"));
                }
            }
            Stmt::Mma { acc, a, b } => self.mma(*acc, a, b)?,
            Stmt::MmaAsync { acc, a, b, accumulate } => {
                self.scalar(accumulate, ScalarTy::Bool, "mma_async accumulate flag")?;
                self.mma_async(*acc, a, b)?
            }
            Stmt::StoreCols { tile, col0, dst } => {
                let t = self.tile(*tile)?;
                let d = self.shared_ref(dst)?;
                if dst.rows != t.rows
                    || !col0.is_multiple_of(8)
                    || !dst.cols.is_multiple_of(8)
                    || dst.cols == 0
                    || col0 + dst.cols > t.cols
                {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "columns {col0}..{} of tile `{}` ({}x{}) into a {}x{} shared window: the window needs the tile's rows, and the columns must lie inside the tile at multiples of 8",
                            col0 + dst.cols,
                            t.name,
                            t.rows,
                            t.cols,
                            dst.rows,
                            dst.cols
                        ),
                    ));
                }
                if (t.dtype == DType::I32) != d.dtype.is_int() {
                    return Err(self.err(IrErrorKind::Type, "int tiles move to and from int storage only"));
                }
            }
            Stmt::MmaWait { .. } => {}
            Stmt::Load { tile, src: place } | Stmt::Store { tile, dst: place } => {
                let t = self.tile(*tile)?;
                match place {
                    Place::Shared(r) => {
                        let d = self.shared_ref(r)?;
                        if r.rows != t.rows || r.cols != t.cols {
                            return Err(self.err(
                                IrErrorKind::Shape,
                                format!(
                                    "tile `{}` is {}x{}, shared window is {}x{}",
                                    t.name, t.rows, t.cols, r.rows, r.cols
                                ),
                            ));
                        }
                        if (t.dtype == DType::I32) != d.dtype.is_int() {
                            return Err(self.err(IrErrorKind::Type, "int tiles move to and from int storage only"));
                        }
                    }
                    Place::Global(v) => {
                        let g = self.global_view(v)?;
                        if (t.dtype == DType::I32) != g.dtype.is_int() {
                            return Err(self.err(IrErrorKind::Type, "int tiles move to and from int tensors only"));
                        }
                        if matches!(s, Stmt::Store { .. }) && g.access == Access::Read {
                            return Err(self.err(IrErrorKind::Type, format!("tensor `{}` is read-only", g.name)));
                        }
                        // (A store's `vec` is the alignment of the view's offset and row stride; 16-bit stores
                        // with vec 4 or 8 regroup a quad's pairs into 8- or 16-byte accesses, others move pairs.)
                    }
                }
            }
            Stmt::LoadVec { vec, src: view } | Stmt::StoreVec { vec, dst: view } => {
                self.vec(*vec)?;
                let t = self.tensor(view.tensor)?;
                if !t.dtype.is_float() {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("row vectors move to and from float tensors, `{}` is {}", t.name, t.dtype),
                    ));
                }
                for (e, what) in [(&view.offset, "offset"), (&view.stride, "stride"), (&view.rows, "rows")] {
                    self.scalar(e, ScalarTy::Int, what)?;
                }
            }
            _ => unreachable!("not a tile statement"),
        }
        Ok(())
    }
}
