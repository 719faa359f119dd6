//! Expression checks of the validator: lookups, scopes, types, shared references and global views.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn tile(&self, id: TileId) -> Result<&'a RegTileDecl, IrError> {
        self.k
            .tiles
            .get(id.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no register tile #{}", id.0)))
    }

    pub(super) fn vec(&self, id: VecId) -> Result<&'a VecDecl, IrError> {
        self.k.vecs.get(id.0 as usize).ok_or_else(|| self.err(IrErrorKind::Scope, format!("no row vector #{}", id.0)))
    }

    pub(super) fn shared(&self, id: SharedId) -> Result<&'a SharedDecl, IrError> {
        self.k
            .shared
            .get(id.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no shared buffer #{}", id.0)))
    }

    pub(super) fn tensor(&self, id: crate::TensorId) -> Result<&'a TensorParam, IrError> {
        self.k.tensors.get(id.0 as usize).ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", id.0)))
    }

    pub(super) fn var_ty(&self, v: VarId) -> Option<ScalarTy> {
        self.scopes.iter().rev().find_map(|s| s.vars.get(&v).copied())
    }

    /// The index of the scope that introduced a variable.
    pub(super) fn var_scope(&self, v: VarId) -> Option<usize> {
        self.scopes.iter().rposition(|s| s.vars.contains_key(&v))
    }

    pub(super) fn array(&self, a: ArrId) -> Result<(ScalarTy, u32), IrError> {
        self.scopes.iter().rev().find_map(|s| s.arrays.get(&a).copied()).ok_or_else(|| {
            let name = self.k.arrays.get(a.0 as usize).map_or("?", |d| &d.name);
            self.err(IrErrorKind::Scope, format!("array #{} `{name}` used out of scope", a.0))
        })
    }

    pub(super) fn var_name(&self, v: VarId) -> &str {
        self.k.vars.get(v.0 as usize).map_or("?", |d| &d.name)
    }

    /// Introduce a variable in the innermost scope.
    pub(super) fn introduce(&mut self, var: VarId, t: ScalarTy, what: &str) -> Result<(), IrError> {
        if var.0 as usize >= self.k.vars.len() {
            return Err(self.err(IrErrorKind::Scope, format!("no variable #{}", var.0)));
        }
        if self.var_types[var.0 as usize].replace(t).is_some() {
            return Err(self.err(IrErrorKind::Scope, format!("{what} #{} is introduced twice", var.0)));
        }
        self.scopes.last_mut().unwrap().vars.insert(var, t);
        Ok(())
    }

    /// The type of an expression in a context.
    pub(super) fn ty(&self, e: &Expr, ctx: Ctx<'_>) -> Result<ScalarTy, IrError> {
        use ScalarTy::*;
        Ok(match e {
            Expr::Int(_) => Int,
            Expr::Float(_) => Float,
            Expr::Bool(_) => Bool,
            Expr::Sym(s) => match self.k.syms.get(s.0 as usize) {
                Some(d) if d.kind == SymKind::Float => Float,
                Some(_) => Int,
                None => return Err(self.err(IrErrorKind::Scope, format!("no symbol #{}", s.0))),
            },
            Expr::Var(v) => self.var_read_ty(v)?,
            Expr::Special(sp) => match ctx {
                Ctx::Scalar { allow_special: false } => {
                    return Err(self.err(IrErrorKind::Type, "block indices are not allowed here"));
                }
                _ if sp.is_per_thread() && self.region.is_none() => {
                    let name = match sp {
                        Special::ThreadIdx => "ThreadIdx",
                        Special::LaneIdx => "LaneIdx",
                        _ => "WarpIdx",
                    };
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("{name} differs between threads: it is only valid inside a threads region"),
                    ));
                }
                _ => Int,
            },
            Expr::SharedLoad { buf, index, row, col } => self.shared_load_ty(buf, index, row, col, ctx)?,
            Expr::ArrayGet(a, index) => {
                let (t, len) = self.array(*a)?;
                let it = self.ty(index, ctx)?;
                if it != Int {
                    return Err(self.err(IrErrorKind::Type, format!("array index must be int, got {it}")));
                }
                self.array_index(*a, index, len)?;
                t
            }
            Expr::Load { tensor, index } => self.load_ty(tensor, index)?,
            Expr::Elem(t) => self.elem_ty(t, ctx)?,
            Expr::RowVal(v) => self.row_val_ty(v, ctx)?,
            Expr::RowIdx => match ctx {
                Ctx::Scalar { .. } => return Err(self.err(IrErrorKind::Type, "RowIdx is only valid inside a map")),
                _ => Int,
            },
            Expr::ColIdx => match ctx {
                Ctx::Elem { .. } => Int,
                _ => return Err(self.err(IrErrorKind::Type, "ColIdx is only valid inside a tile map")),
            },
            Expr::Cast(to, a) => {
                let from = self.ty(a, ctx)?;
                if *to == Bool && from != Bool {
                    return Err(self.err(IrErrorKind::Type, "use a comparison to make a bool"));
                }
                *to
            }
            Expr::Select(c, a, b) => {
                if self.ty(c, ctx)? != Bool {
                    return Err(self.err(IrErrorKind::Type, "select condition must be bool"));
                }
                let (ta, tb) = (self.ty(a, ctx)?, self.ty(b, ctx)?);
                if ta != tb {
                    return Err(self.err(IrErrorKind::Type, format!("select arms differ: {ta} vs {tb}")));
                }
                ta
            }
            Expr::Un(op, a) => self.un_ty(op, a, ctx)?,
            Expr::Bin(op, a, b) => self.bin_ty(op, a, b, ctx)?,
        })
    }

    /// The type of a variable read (in scope, and not a producer warp's variable read outside the producer bodies).
    fn var_read_ty(&self, v: &VarId) -> Result<ScalarTy, IrError> {
        if !self.producer && self.producer_owned.contains(v) {
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "variable `{}` is assigned by the producer warp (in a `producer` body) and read outside \
                     the producer bodies: the consumer threads never see its value",
                    self.var_name(*v)
                ),
            ));
        }
        self.var_ty(*v).ok_or_else(|| self.err(IrErrorKind::Scope, format!("variable #{} used out of scope", v.0)))
    }

    /// The type of a shared element read.
    fn shared_load_ty(
        &self,
        buf: &SharedId,
        index: &Expr,
        row: &Expr,
        col: &Expr,
        ctx: Ctx<'_>,
    ) -> Result<ScalarTy, IrError> {
        use ScalarTy::*;
        let d = self.shared(*buf)?;
        if self.skeleton.get() {
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "shared `{}` is read by block-level control of a producer-warp kernel, which both roles \
                     run: the producer warp would read it unsynchronized",
                    d.name
                ),
            ));
        }
        if d.dtype.bits() < 8 {
            return Err(
                self.err(IrErrorKind::Type, format!("shared `{}`: 4-bit elements cannot be read one by one", d.name))
            );
        }
        for (e, what) in [(index, "shared load tile index"), (row, "shared load row"), (col, "shared load col")] {
            let t = self.ty(e, ctx)?;
            if t != Int {
                return Err(self.err(IrErrorKind::Type, format!("{what} must be int, got {t}")));
            }
        }
        self.shared_coords(d, index, row, col)?;
        Ok(ScalarTy::of_dtype(d.dtype))
    }

    /// The type of a global element read.
    fn load_ty(&self, tensor: &crate::TensorId, index: &Expr) -> Result<ScalarTy, IrError> {
        use ScalarTy::*;
        let t = self.tensor(*tensor)?;
        if self.ty(index, Ctx::Scalar { allow_special: true })? != Int {
            return Err(self.err(IrErrorKind::Type, "load index must be int"));
        }
        if self.skeleton.get() && t.access != Access::Read {
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "tensor `{}`, which the kernel writes, is read by block-level control of a producer-warp \
                     kernel, which both roles run: the producer warp would read it unsynchronized",
                    t.name
                ),
            ));
        }
        if t.dtype.bits() < 8 {
            return Err(self.err(IrErrorKind::Type, "scalar loads of 4-bit types are not supported; view as u8"));
        }
        Ok(ScalarTy::of_dtype(t.dtype))
    }

    /// The type of a tile element read inside a map.
    fn elem_ty(&self, t: &TileId, ctx: Ctx<'_>) -> Result<ScalarTy, IrError> {
        use ScalarTy::*;
        let decl = self.tile(*t)?;
        match ctx {
            Ctx::Elem { tile } => {
                if decl.solo && !tile.solo {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!("solo tile `{}` read while mapping `{}`, which is not solo", decl.name, tile.name),
                    ));
                }
                if decl.rows != tile.rows || decl.cols != tile.cols || decl.warps != tile.warps {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "tile `{}` ({}x{} on {:?}) read while mapping `{}` ({}x{} on {:?}): shapes and warps must match",
                            decl.name, decl.rows, decl.cols, decl.warps, tile.name, tile.rows, tile.cols, tile.warps
                        ),
                    ));
                }
            }
            _ => return Err(self.err(IrErrorKind::Type, "tile elements can only be read inside a map")),
        }
        Ok(if decl.dtype == DType::I32 { Int } else { Float })
    }

    /// The type of a row vector read inside a map.
    fn row_val_ty(&self, v: &VecId, ctx: Ctx<'_>) -> Result<ScalarTy, IrError> {
        use ScalarTy::*;
        let vd = self.vec(*v)?;
        let (rows, warps) = match ctx {
            Ctx::Elem { tile } => (tile.rows, tile.warps),
            Ctx::Row { vec } => (vec.rows, vec.warps),
            Ctx::Scalar { .. } => {
                return Err(self.err(IrErrorKind::Type, "row vectors can only be read inside a map"));
            }
        };
        if vd.rows != rows || vd.warps[0] != warps[0] {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "row vector `{}` ({} rows on {:?}) does not match {} rows on {:?}",
                    vd.name, vd.rows, vd.warps, rows, warps
                ),
            ));
        }
        if let Ctx::Elem { tile } = ctx
            && vd.warps[1] != tile.warps[1]
        {
            return Err(self.err(IrErrorKind::Layout, format!("row vector `{}` warps differ from the tile's", vd.name)));
        }
        Ok(Float)
    }

    /// The type of a unary operation.
    fn un_ty(&self, op: &UnOp, a: &Expr, ctx: Ctx<'_>) -> Result<ScalarTy, IrError> {
        use ScalarTy::*;
        let t = self.ty(a, ctx)?;
        Ok(match op {
            UnOp::Not => {
                if t != Bool {
                    return Err(self.err(IrErrorKind::Type, "`not` needs a bool"));
                }
                Bool
            }
            UnOp::Neg | UnOp::Abs => {
                if t == Bool {
                    return Err(self.err(IrErrorKind::Type, format!("`{}` needs a number", op.name())));
                }
                t
            }
            UnOp::IsNan | UnOp::IsFinite => {
                if t != Float {
                    return Err(self.err(IrErrorKind::Type, format!("`{}` needs a float", op.name())));
                }
                Bool
            }
            UnOp::Bits => {
                if t != Float {
                    return Err(self.err(IrErrorKind::Type, format!("`bits` needs a float, got {t}")));
                }
                Int
            }
            UnOp::FromBits => {
                if t != Int {
                    return Err(self.err(IrErrorKind::Type, format!("`from_bits` needs an int, got {t}")));
                }
                Float
            }
            _ => {
                if t != Float {
                    return Err(self.err(IrErrorKind::Type, format!("`{}` needs a float, got {t}", op.name())));
                }
                Float
            }
        })
    }

    /// The type of a binary operation.
    fn bin_ty(&self, op: &BinOp, a: &Expr, b: &Expr, ctx: Ctx<'_>) -> Result<ScalarTy, IrError> {
        use ScalarTy::*;
        let (ta, tb) = (self.ty(a, ctx)?, self.ty(b, ctx)?);
        Ok(match op {
            BinOp::Ldexp => {
                if ta != Float || tb != Int {
                    return Err(self.err(IrErrorKind::Type, "ldexp takes (float, int)"));
                }
                Float
            }
            BinOp::And | BinOp::Or => {
                if ta != Bool || tb != Bool {
                    return Err(self.err(IrErrorKind::Type, format!("`{}` takes bools", op.symbol())));
                }
                Bool
            }
            BinOp::Rem | BinOp::Shl | BinOp::Shr | BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Fp4Pair => {
                if ta != Int || tb != Int {
                    return Err(self.err(IrErrorKind::Type, format!("`{}` takes ints, got {ta} and {tb}", op.symbol())));
                }
                Int
            }
            _ => {
                if ta != tb || ta == Bool && !matches!(op, BinOp::Eq | BinOp::Ne) {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("`{}` needs two numbers of one type, got {ta} and {tb} (cast explicitly)", op.symbol()),
                    ));
                }
                if op.is_comparison() { Bool } else { ta }
            }
        })
    }

    pub(super) fn expect(&self, e: &Expr, ctx: Ctx<'_>, want: ScalarTy, what: &str) -> Result<(), IrError> {
        let t = self.ty(e, ctx)?;
        if t != want {
            return Err(self.err(IrErrorKind::Type, format!("{what} must be {want}, got {t}")));
        }
        Ok(())
    }

    pub(super) fn scalar(&self, e: &Expr, want: ScalarTy, what: &str) -> Result<(), IrError> {
        self.expect(e, Ctx::Scalar { allow_special: true }, want, what)
    }

    pub(super) fn shared_ref(&self, r: &SharedRef) -> Result<&'a SharedDecl, IrError> {
        let d = self.shared(r.buf)?;
        self.scalar(&r.index, ScalarTy::Int, "shared tile index")?;
        if let Some(i) = r.index.as_const_int()
            && (i < 0 || i >= d.count as i64)
        {
            return Err(self.err(IrErrorKind::Shape, format!("shared `{}` has {} tiles, index {i}", d.name, d.count)));
        }
        if r.rows == 0 || r.cols == 0 || r.row0 + r.rows > d.rows || r.col0 + r.cols > d.cols {
            return Err(self.err(
                IrErrorKind::Shape,
                format!(
                    "window rows {}..{} cols {}..{} is outside shared `{}` ({}x{})",
                    r.row0,
                    r.row0 + r.rows,
                    r.col0,
                    r.col0 + r.cols,
                    d.name,
                    d.rows,
                    d.cols
                ),
            ));
        }
        Ok(d)
    }

    pub(super) fn global_view(&self, v: &GlobalView) -> Result<&'a TensorParam, IrError> {
        let t = self.tensor(v.tensor)?;
        for (e, what) in [
            (&v.offset, "view offset"),
            (&v.row_stride, "view row stride"),
            (&v.rows, "view rows"),
            (&v.cols, "view cols"),
        ] {
            self.scalar(e, ScalarTy::Int, what)?;
        }
        if !matches!(v.vec, 1 | 2 | 4 | 8 | 16) || t.dtype.storage_bytes(v.vec as usize) > 16 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("view of `{}`: vec = {} must be 1, 2, 4, 8 or 16 and at most 16 bytes", t.name, v.vec),
            ));
        }
        if t.dtype.bits() < 8 {
            return Err(self.err(IrErrorKind::Type, format!("tensor `{}`: view 4-bit storage as u8", t.name)));
        }
        Ok(t)
    }
}
