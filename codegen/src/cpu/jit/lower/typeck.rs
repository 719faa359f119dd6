//! The type pass: the static type of every variable and array, checking that the JIT lowers every statement
//! and expression of a kernel (else it falls back to the interpreter).

use super::*;

/// Types of the variables (from their `Let`s and loops), checking every statement and expression is lowered.
pub(super) struct Types<'a> {
    pub(super) k: &'a Kernel,
    pub(super) vars: Vec<Option<Ty>>,
    /// Element type and length of each array (from its `LetArray`s, which must agree).
    pub(super) arrays: Vec<Option<(ScalarTy, u32)>>,
}

impl<'a> Types<'a> {
    pub(super) fn new(k: &'a Kernel) -> Result<Self, JitError> {
        let mut arrays: Vec<Option<(ScalarTy, u32)>> = vec![None; k.arrays.len()];
        let mut clash = None;
        k.visit_stmts(&mut |s| {
            if let Stmt::LetArray { arr, len, ty, .. } = s {
                match arrays.get_mut(arr.0 as usize) {
                    Some(slot @ None) => *slot = Some((*ty, *len)),
                    Some(Some(old)) if *old == (*ty, *len) => {}
                    _ => clash = Some(arr.0),
                }
            }
        });
        if let Some(a) = clash {
            return Err(unsupported(format!("array #{a} is introduced with different types or lengths")));
        }
        // Storage types added to the IR after the JIT fall back rather than reach a conversion it lacks.
        let dtypes = k.tensors.iter().map(|t| t.dtype).chain(k.shared.iter().map(|s| s.dtype));
        if let Some(d) = dtypes.chain(k.tiles.iter().map(|t| t.dtype)).find(|d| !DType::ALL.contains(d)) {
            return Err(unsupported(format!("dtype {d}")));
        }
        let mut t = Types { k, vars: vec![None; k.vars.len()], arrays };
        t.stmts(&k.body)?;
        Ok(t)
    }

    /// A shared window must lie inside its buffer (`bands` windows stacked down for a banded operand).
    pub(super) fn window(&self, r: &SharedRef, bands: u32) -> Result<(), JitError> {
        self.ty(&r.index)?;
        let d = self.k.shared.get(r.buf.0 as usize).ok_or_else(|| unsupported("no such shared buffer"))?;
        if r.row0 + bands * r.rows > d.rows || r.col0 + r.cols > d.cols {
            return Err(unsupported(format!("shared window outside `{}`", d.name)));
        }
        Ok(())
    }

    pub(super) fn operand(&self, acc: TileId, o: &Operand) -> Result<(), JitError> {
        match o {
            Operand::Reg(_) => Ok(()),
            Operand::Shared { src, .. } => self.window(src, 1),
            Operand::Banded { src, .. } => self.window(src, self.k.tiles[acc.0 as usize].warps[0]),
        }
    }

    pub(super) fn global_view(&self, v: &GlobalView) -> Result<(), JitError> {
        for e in [&v.offset, &v.row_stride, &v.rows, &v.cols] {
            self.ty(e)?;
        }
        Ok(())
    }

    /// The tile moved to or from a place, with shapes that match (the runtime loops over the tile's).
    pub(super) fn place(&self, tile: TileId, p: &Place, store: bool) -> Result<(), JitError> {
        let t = &self.k.tiles[tile.0 as usize];
        match p {
            Place::Shared(r) => {
                if (r.rows, r.cols) != (t.rows, t.cols) {
                    return Err(unsupported("shared window and tile shapes differ"));
                }
                self.window(r, 1)
            }
            Place::Global(v) => {
                let dt = self.k.tensors[v.tensor.0 as usize].dtype;
                if t.dtype != DType::I32 && (dt == DType::E2m1 || (store && dt == DType::E8m0)) {
                    return Err(unsupported(format!("float tile moves through {dt}")));
                }
                self.global_view(v)
            }
        }
    }

    pub(super) fn set_var(&mut self, v: VarId, ty: Ty) -> Result<(), JitError> {
        match self.vars[v.0 as usize] {
            Some(old) if old != ty => {
                Err(unsupported(format!("variable `{}` changes type", self.k.vars[v.0 as usize].name)))
            }
            _ => {
                self.vars[v.0 as usize] = Some(ty);
                Ok(())
            }
        }
    }

    pub(super) fn stmts(&mut self, body: &[Stmt]) -> Result<(), JitError> {
        for s in body {
            match s {
                Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                    let t = self.ty(value)?;
                    self.set_var(*var, t)?;
                }
                Stmt::For { var, start, end, step, body, .. } => {
                    for e in [start, end, step] {
                        self.ty(e)?;
                    }
                    self.set_var(*var, Ty::I)?;
                    self.stmts(body)?;
                }
                Stmt::If { cond, then_body, else_body } => {
                    if self.ty(cond)? != Ty::B {
                        return Err(unsupported("non-bool condition"));
                    }
                    self.stmts(then_body)?;
                    self.stmts(else_body)?;
                }
                s if crate::cpu::sequential_noop(s) => {}
                Stmt::Threads { body }
                | Stmt::Producer { body }
                | Stmt::InTurn { body }
                | Stmt::FirstWarpgroups { body, .. } => self.stmts(body)?,
                Stmt::StoreScalar { tensor, index, value } => {
                    self.ty(index)?;
                    let vt = self.ty(value)?;
                    let dt = self.k.tensors[tensor.0 as usize].dtype;
                    if vt == Ty::F && matches!(dt, DType::E8m0 | DType::E2m1) {
                        return Err(unsupported(format!("float store into {dt}")));
                    }
                }
                Stmt::Map { tile, value } => {
                    let want = if self.k.tiles[tile.0 as usize].dtype == DType::I32 { Ty::I } else { Ty::F };
                    if self.ty(value)? != want {
                        return Err(unsupported("mapped value type"));
                    }
                }
                Stmt::VecMap { value, .. } => {
                    if self.ty(value)? != Ty::F {
                        return Err(unsupported("row value type"));
                    }
                }
                Stmt::Reduce { tile, .. } | Stmt::Scan { tile, .. } => {
                    if self.k.tiles[tile.0 as usize].dtype == DType::I32 {
                        return Err(unsupported("reduction or scan of an int tile"));
                    }
                }
                Stmt::Mma { acc, a, b } => {
                    self.operand(*acc, a)?;
                    self.operand(*acc, b)?;
                }
                Stmt::MmaAsync { acc, a, b, accumulate } => {
                    if self.ty(accumulate)? != Ty::B {
                        return Err(unsupported("non-bool accumulate flag"));
                    }
                    self.operand(*acc, a)?;
                    self.operand(*acc, b)?;
                }
                Stmt::CopyAsync { dst, src } => {
                    self.window(dst, 1)?;
                    self.global_view(src)?;
                    let dt = self.k.tensors[src.tensor.0 as usize].dtype;
                    if dt == DType::E2m1 && !self.k.shared[dst.buf.0 as usize].dtype.is_int() {
                        return Err(unsupported("float copy of e2m1"));
                    }
                }
                Stmt::WarpShuffle { var, op, value } => {
                    let t = match (op, self.ty(value)?) {
                        (WarpOp::Ballot, Ty::B) => Ty::I,
                        (WarpOp::Ballot, _) | (_, Ty::B) => return Err(unsupported("warp shuffle value type")),
                        (_, t) => t,
                    };
                    self.set_var(*var, t)?;
                }
                Stmt::WarpSync => {}
                Stmt::DequantFp4 { words, scales, .. } => {
                    self.window(words, 1)?;
                    self.window(scales, 1)?;
                }
                Stmt::DequantFp4Stream { words, scales, prefetch, .. } => {
                    self.global_view(words)?;
                    self.global_view(scales)?;
                    if let Some(p) = prefetch {
                        self.global_view(&p.words)?;
                        self.global_view(&p.scales)?;
                        if self.ty(&p.first)? != Ty::B {
                            return Err(unsupported("prefetch flag type"));
                        }
                    }
                }
                Stmt::Fp4Gemv(g) => {
                    let Fp4Gemv { out, words, scales, x, .. } = &**g;
                    self.window(out, 1)?;
                    self.global_view(words)?;
                    self.global_view(scales)?;
                    self.global_view(x)?;
                }
                Stmt::Load { tile, src } => self.place(*tile, src, false)?,
                Stmt::Store { tile, dst } => self.place(*tile, dst, true)?,
                Stmt::StoreCols { dst, .. } => self.window(dst, 1)?,
                Stmt::TmaStore(t) => {
                    self.window(&t.src, 1)?;
                    for c in &t.coords {
                        self.ty(c)?;
                    }
                }
                Stmt::TmaStoreWait { .. } => {}
                Stmt::LoadVec { src: v, .. } | Stmt::StoreVec { dst: v, .. } => {
                    for e in [&v.offset, &v.stride, &v.rows] {
                        self.ty(e)?;
                    }
                    if !self.k.tensors[v.tensor.0 as usize].dtype.is_float() {
                        return Err(unsupported("row vector of a non-float tensor"));
                    }
                }
                Stmt::SharedStore { index, row, col, value, .. } => {
                    for e in [index, row, col, value] {
                        self.ty(e)?;
                    }
                }
                Stmt::Atomic { target, op, value, fetch } => {
                    if !rt::ATOMIC_OPS.contains(op) {
                        return Err(unsupported(format!("atomic {}", op.name())));
                    }
                    self.ty(value)?;
                    let float = match target {
                        AtomicTarget::Global { tensor, index } => {
                            self.ty(index)?;
                            self.k.tensors[tensor.0 as usize].dtype == DType::F32
                        }
                        AtomicTarget::Shared { buf, index, row, col } => {
                            for e in [index, row, col] {
                                self.ty(e)?;
                            }
                            !self.k.shared[buf.0 as usize].dtype.is_int()
                        }
                    };
                    if let Some(v) = fetch {
                        self.set_var(*v, if float { Ty::F } else { Ty::I })?;
                    }
                }
                Stmt::LetArray { arr, ty, init, .. } => {
                    let t = self.ty(init)?;
                    if self.arrays[arr.0 as usize].is_none() || (*ty == ScalarTy::Bool && t != Ty::B) {
                        return Err(unsupported("array initial value"));
                    }
                }
                Stmt::ArraySet { arr, index, value } => {
                    self.ty(index)?;
                    let want = self.arrays[arr.0 as usize].map(|(t, _)| scalar_ty(t));
                    if Some(self.ty(value)?) != want {
                        return Err(unsupported("array element type"));
                    }
                }
                Stmt::LoadWide { arr, index, .. }
                | Stmt::StoreWide { arr, index, .. }
                | Stmt::SharedLoadWide { arr, index, .. }
                | Stmt::SharedStoreWide { arr, index, .. } => {
                    self.ty(index)?;
                    if let Stmt::SharedLoadWide { row, col, .. } | Stmt::SharedStoreWide { row, col, .. } = s {
                        self.ty(row)?;
                        self.ty(col)?;
                    }
                    if self.arrays.get(arr.0 as usize).copied().flatten().is_none() {
                        return Err(unsupported("wide access of an array without a let_array"));
                    }
                }
                Stmt::MbarInit { .. } => {}
                Stmt::MbarArriveExpectTx { bar, .. } | Stmt::MbarArrive { bar } => {
                    self.ty(&bar.index)?;
                }
                Stmt::MbarWait { bar, parity, .. } => {
                    self.ty(&bar.index)?;
                    self.ty(parity)?;
                }
                Stmt::TmaLoad(t) => {
                    self.window(&t.dst, 1)?;
                    for c in &t.coords {
                        self.ty(c)?;
                    }
                    self.ty(&t.bar.index)?;
                    if let Some(m) = &t.multicast {
                        self.ty(m)?;
                    }
                }
                Stmt::MbarArriveCluster { bar, cta } => {
                    self.ty(&bar.index)?;
                    self.ty(cta)?;
                }
                Stmt::ClusterSync => {}
                #[allow(unreachable_patterns)]
                other => return Err(unsupported(format!("statement {}", stmt_name(other)))),
            }
        }
        Ok(())
    }

    pub(super) fn ty(&self, e: &Expr) -> Result<Ty, JitError> {
        Ok(match e {
            Expr::Int(_) => Ty::I,
            Expr::Float(_) => Ty::F,
            Expr::Bool(_) => Ty::B,
            Expr::Sym(s) => match self.k.syms[s.0 as usize].kind {
                SymKind::Float => Ty::F,
                _ => Ty::I,
            },
            Expr::Var(v) => self.vars[v.0 as usize].unwrap_or(Ty::I),
            Expr::Special(_) => Ty::I,
            Expr::Un(op, a) => {
                let a = self.ty(a)?;
                if !UNOPS.contains(op) {
                    return Err(unsupported(format!("unary operator {}", op.name())));
                }
                match (op, a) {
                    (UnOp::Neg | UnOp::Abs, Ty::I) => Ty::I,
                    (UnOp::Not, Ty::B) => Ty::B,
                    (UnOp::IsNan | UnOp::IsFinite, Ty::F) => Ty::B,
                    (UnOp::Bits, Ty::F) => Ty::I,
                    (UnOp::FromBits, Ty::I) => Ty::F,
                    (UnOp::Not | UnOp::IsNan | UnOp::IsFinite | UnOp::Bits | UnOp::FromBits, _) => {
                        return Err(unsupported(format!("{} of {a:?}", op.name())));
                    }
                    (_, Ty::B) => return Err(unsupported(format!("{} of a bool", op.name()))),
                    _ => Ty::F,
                }
            }
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.ty(a)?, self.ty(b)?);
                match (a, b) {
                    (Ty::I, Ty::I) if !matches!(op, BinOp::And | BinOp::Or | BinOp::Ldexp) => {
                        if op.is_comparison() {
                            Ty::B
                        } else {
                            Ty::I
                        }
                    }
                    (Ty::F, Ty::I) if *op == BinOp::Ldexp => Ty::F,
                    (Ty::F, Ty::F)
                        if matches!(
                            op,
                            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max
                        ) =>
                    {
                        Ty::F
                    }
                    (Ty::F, Ty::F) if op.is_comparison() => Ty::B,
                    (Ty::B, Ty::B) if matches!(op, BinOp::And | BinOp::Or | BinOp::Eq | BinOp::Ne) => Ty::B,
                    _ => return Err(unsupported(format!("{a:?} {} {b:?}", op.symbol()))),
                }
            }
            Expr::Select(c, a, b) => {
                let (c, a, b) = (self.ty(c)?, self.ty(a)?, self.ty(b)?);
                if c != Ty::B || a != b {
                    return Err(unsupported("select types"));
                }
                a
            }
            Expr::Cast(ScalarTy::Float, a) => {
                self.ty(a)?;
                Ty::F
            }
            Expr::Cast(ScalarTy::Int, a) => {
                self.ty(a)?;
                Ty::I
            }
            Expr::Cast(ScalarTy::Bool, a) => {
                let t = self.ty(a)?;
                if t != Ty::B {
                    return Err(unsupported("cast to bool"));
                }
                Ty::B
            }
            Expr::Load { tensor, index } => {
                self.ty(index)?;
                let dt = self.k.tensors[tensor.0 as usize].dtype;
                match ScalarTy::of_dtype(dt) {
                    ScalarTy::Float if dt == DType::E2m1 => return Err(unsupported("scalar load of e2m1")),
                    ScalarTy::Float => Ty::F,
                    _ => Ty::I,
                }
            }
            Expr::SharedLoad { buf, index, row, col } => {
                for e in [index, row, col] {
                    self.ty(e)?;
                }
                if self.k.shared[buf.0 as usize].dtype.is_int() { Ty::I } else { Ty::F }
            }
            Expr::ArrayGet(a, index) => {
                self.ty(index)?;
                match self.arrays.get(a.0 as usize).copied().flatten() {
                    Some((t, _)) => scalar_ty(t),
                    None => return Err(unsupported("array without a let_array")),
                }
            }
            Expr::Elem(t) => {
                if self.k.tiles[t.0 as usize].dtype == DType::I32 {
                    Ty::I
                } else {
                    Ty::F
                }
            }
            Expr::RowVal(_) => Ty::F,
            Expr::RowIdx | Expr::ColIdx => Ty::I,
            #[allow(unreachable_patterns)]
            _ => return Err(unsupported("expression")),
        })
    }
}
