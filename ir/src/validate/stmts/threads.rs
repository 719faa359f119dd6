//! Per-thread statements of threads regions: the region itself, scalar and shared stores, atomics,
//! register arrays, wide accesses and warp shuffles, with their index and storage checks.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn thread_stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s {
            Stmt::Fence => {}
            Stmt::WarpShuffle { .. } | Stmt::WarpSync => {
                let top = self.region.is_some_and(|base| self.scopes.len() == base + 1);
                if !top {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        "warp shuffles and syncwarp must be at the top level of a threads region (every lane of \
                         every warp runs them), not inside its loops or conditionals",
                    ));
                }
                if let Stmt::WarpShuffle { var, op, value } = s {
                    let t = self.ty(value, Ctx::Scalar { allow_special: true })?;
                    let bad_lane = match *op {
                        WarpOp::ShflXor(m) => !(1..=31).contains(&m),
                        WarpOp::ShflIdx(l) => l > 31,
                        WarpOp::ShflUp(d) => !(1..=31).contains(&d),
                        WarpOp::Ballot => false,
                    };
                    if bad_lane {
                        return Err(
                            self.err(IrErrorKind::Shape, format!("warp {}: lane operand out of range", op.name()))
                        );
                    }
                    let out = match (op, t) {
                        (WarpOp::Ballot, ScalarTy::Bool) => ScalarTy::Int,
                        (WarpOp::Ballot, _) => {
                            return Err(self.err(IrErrorKind::Type, "warp ballot takes a bool value"));
                        }
                        (_, ScalarTy::Bool) => {
                            return Err(self.err(IrErrorKind::Type, "warp shuffles take an int or float value"));
                        }
                        (_, t) => t,
                    };
                    self.introduce(*var, out, "variable")?;
                }
            }
            Stmt::Threads { body } => {
                self.path.push("threads".into());
                self.region = Some(self.scopes.len());
                self.scopes.push(Scope::default());
                self.body(body)?;
                self.scopes.pop();
                self.region = None;
                self.path.pop();
            }
            Stmt::StoreScalar { tensor, index, value } => {
                let t = self.tensor(*tensor)?;
                if t.access == Access::Read {
                    return Err(self.err(IrErrorKind::Type, format!("tensor `{}` is read-only", t.name)));
                }
                let want = self.scalar_storage(t.dtype, &format!("tensor `{}`", t.name))?;
                self.scalar(index, ScalarTy::Int, "store index")?;
                self.scalar(value, want, "stored value")?;
            }
            Stmt::SharedStore { buf, index, row, col, value } => {
                let d = self.shared(*buf)?;
                let want = self.scalar_storage(d.dtype, &format!("shared `{}`", d.name))?;
                for (e, what) in
                    [(index, "shared store tile index"), (row, "shared store row"), (col, "shared store col")]
                {
                    self.scalar(e, ScalarTy::Int, what)?;
                }
                self.shared_coords(d, index, row, col)?;
                self.scalar(value, want, "stored value")?;
            }
            Stmt::Atomic { target, op: _, value, fetch } => {
                let (dtype, what) = match target {
                    AtomicTarget::Global { tensor, index } => {
                        let t = self.tensor(*tensor)?;
                        if t.access == Access::Read {
                            return Err(self.err(IrErrorKind::Type, format!("tensor `{}` is read-only", t.name)));
                        }
                        self.scalar(index, ScalarTy::Int, "atomic index")?;
                        (t.dtype, format!("tensor `{}`", t.name))
                    }
                    AtomicTarget::Shared { buf, index, row, col } => {
                        let d = self.shared(*buf)?;
                        for (e, what) in [(index, "atomic tile index"), (row, "atomic row"), (col, "atomic col")] {
                            self.scalar(e, ScalarTy::Int, what)?;
                        }
                        self.shared_coords(d, index, row, col)?;
                        (d.dtype, format!("shared `{}`", d.name))
                    }
                };
                if !matches!(dtype, DType::I32 | DType::U32 | DType::I64 | DType::U64 | DType::F32) {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("atomics update i32, u32, i64, u64 or f32 storage; {what} is {dtype}"),
                    ));
                }
                let want = ScalarTy::of_dtype(dtype);
                self.scalar(value, want, "atomic operand")?;
                if let Some(v) = fetch {
                    self.introduce(*v, want, "atomic result variable")?;
                }
            }
            Stmt::LetArray { arr, len, ty, init } => {
                if arr.0 as usize >= self.k.arrays.len() {
                    return Err(self.err(IrErrorKind::Scope, format!("no array #{}", arr.0)));
                }
                if std::mem::replace(&mut self.array_seen[arr.0 as usize], true) {
                    return Err(self.err(IrErrorKind::Scope, format!("array #{} is introduced twice", arr.0)));
                }
                if *len == 0 || *len > MAX_ARRAY_LEN {
                    return Err(
                        self.err(IrErrorKind::Resource, format!("array length {len} must be in 1..={MAX_ARRAY_LEN}"))
                    );
                }
                self.scalar(init, *ty, "array initial value")?;
                self.scopes.last_mut().unwrap().arrays.insert(*arr, (*ty, *len));
            }
            Stmt::ArraySet { arr, index, value } => {
                let (t, len) = self.array(*arr)?;
                self.scalar(index, ScalarTy::Int, "array index")?;
                self.array_index(*arr, index, len)?;
                self.scalar(value, t, "array element")?;
            }
            Stmt::LoadWide { arr, at, tensor, index, lanes } | Stmt::StoreWide { tensor, index, arr, at, lanes } => {
                let store = matches!(s, Stmt::StoreWide { .. });
                self.wide(*arr, *at, *tensor, index, *lanes, store)?;
            }
            Stmt::SharedLoadWide { arr, at, buf, index, row, col, lanes }
            | Stmt::SharedStoreWide { buf, index, row, col, arr, at, lanes } => {
                let store = matches!(s, Stmt::SharedStoreWide { .. });
                self.shared_wide(*arr, *at, *buf, [index, row, col], *lanes, store)?;
            }
            _ => unreachable!("not a per-thread statement"),
        }
        Ok(())
    }

    /// The value type of a scalar store into `dtype` storage.
    pub(in crate::validate) fn scalar_storage(&self, dtype: DType, what: &str) -> Result<ScalarTy, IrError> {
        match dtype {
            DType::F32 | DType::Bf16 | DType::F16 | DType::E4m3 => Ok(ScalarTy::Float),
            DType::U8 | DType::I32 | DType::U32 | DType::I64 | DType::U64 => Ok(ScalarTy::Int),
            DType::E2m1 | DType::E8m0 => Err(self.err(
                IrErrorKind::Type,
                format!("{what}: scalar stores of {dtype} are not supported (compute the bits and view it as u8)"),
            )),
        }
    }

    /// Constant shared coordinates must be inside the buffer.
    pub(in crate::validate) fn shared_coords(
        &self,
        d: &SharedDecl,
        index: &Expr,
        row: &Expr,
        col: &Expr,
    ) -> Result<(), IrError> {
        for (e, n, what) in [(index, d.count, "tile index"), (row, d.rows, "row"), (col, d.cols, "col")] {
            if let Some(v) = e.as_const_int()
                && (v < 0 || v >= n as i64)
            {
                return Err(self.err(IrErrorKind::Shape, format!("shared `{}`: {what} {v} is outside 0..{n}", d.name)));
            }
        }
        Ok(())
    }

    /// A wide access ([`Stmt::LoadWide`] / [`Stmt::StoreWide`]): an 8- or 16-byte access of a supported dtype,
    /// an array of the tensor's expression type holding `at + lanes` elements, and an index not provably
    /// misaligned.
    pub(in crate::validate) fn wide(
        &mut self,
        arr: ArrId,
        at: u32,
        tensor: crate::expr::TensorId,
        index: &Expr,
        lanes: u32,
        store: bool,
    ) -> Result<(), IrError> {
        let t = self.tensor(tensor)?;
        let what = if store { "wide store" } else { "wide load" };
        if store && t.access == Access::Read {
            return Err(self.err(IrErrorKind::Type, format!("{what}: tensor `{}` is read-only", t.name)));
        }
        if !matches!(
            t.dtype,
            DType::F32 | DType::Bf16 | DType::F16 | DType::U8 | DType::I32 | DType::U32 | DType::I64 | DType::U64
        ) {
            return Err(self.err(
                IrErrorKind::Type,
                format!(
                    "{what} of tensor `{}`: {} elements cannot move wide (f32, bf16, f16 or ints)",
                    t.name, t.dtype
                ),
            ));
        }
        let owner = format!("tensor `{}`", t.name);
        self.wide_bytes(what, &owner, t.dtype, lanes)?;
        self.scalar(index, ScalarTy::Int, &format!("{what} index"))?;
        self.wide_aligned(what, &owner, "index", index, lanes)?;
        self.wide_array(what, &owner, t.dtype, arr, at, lanes)
    }

    /// A wide shared access ([`Stmt::SharedLoadWide`] / [`Stmt::SharedStoreWide`]): an 8- or 16-byte access of a
    /// 16- or 32-bit buffer whose rows are whole 16-byte chunks, a column not provably misaligned with the last
    /// lane inside the row, an array of the buffer's expression type holding `at + lanes` elements.
    pub(in crate::validate) fn shared_wide(
        &mut self,
        arr: ArrId,
        at: u32,
        buf: SharedId,
        [index, row, col]: [&Expr; 3],
        lanes: u32,
        store: bool,
    ) -> Result<(), IrError> {
        let d = self.shared(buf)?;
        let what = if store { "wide shared store" } else { "wide shared load" };
        if !matches!(d.dtype, DType::F32 | DType::Bf16 | DType::F16 | DType::I32 | DType::U32) {
            return Err(self.err(
                IrErrorKind::Type,
                format!(
                    "{what} of shared `{}`: {} elements cannot move wide (f32, bf16, f16, i32, u32)",
                    d.name, d.dtype
                ),
            ));
        }
        let owner = format!("shared `{}`", d.name);
        self.wide_bytes(what, &owner, d.dtype, lanes)?;
        let size = d.dtype.size_bytes() as u32;
        if !(d.cols * size).is_multiple_of(16) {
            return Err(self.err(
                IrErrorKind::Layout,
                format!("{what} of shared `{}`: rows of {} bytes are not whole 16-byte chunks", d.name, d.cols * size),
            ));
        }
        for (e, w) in [(index, "tile index"), (row, "row"), (col, "col")] {
            self.scalar(e, ScalarTy::Int, &format!("{what} {w}"))?;
        }
        self.shared_coords(d, index, row, col)?;
        if let Some(c) = col.as_const_int()
            && c + lanes as i64 > d.cols as i64
        {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("{what} of shared `{}`: columns {c}..{} pass the row's {}", d.name, c + lanes as i64, d.cols),
            ));
        }
        self.wide_aligned(what, &owner, "column", col, lanes)?;
        self.wide_array(what, &owner, d.dtype, arr, at, lanes)
    }

    /// A wide access of `lanes` elements of `dtype` in `owner` (`tensor `x`` / `shared `x``) moves 8 or 16 bytes.
    fn wide_bytes(&self, what: &str, owner: &str, dtype: DType, lanes: u32) -> Result<(), IrError> {
        let bytes = dtype.size_bytes() as u32 * lanes;
        if lanes == 0 || !matches!(bytes, 8 | 16) {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("{what} of {owner}: {lanes} x {dtype} is {bytes} bytes, not 8 or 16"),
            ));
        }
        Ok(())
    }

    /// A wide access's element coordinate (`coord`: `index`, `column`) is not provably misaligned with its lanes.
    fn wide_aligned(&self, what: &str, owner: &str, coord: &str, e: &Expr, lanes: u32) -> Result<(), IrError> {
        if let Some(r) = provable_residue(e, lanes as i64)
            && r != 0
        {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "{what} of {owner}: {coord} {} is {r} modulo {lanes} (misaligned: it must be a multiple of the \
                     {lanes} lanes)",
                    crate::print::expr(self.k, e)
                ),
            ));
        }
        Ok(())
    }

    /// A wide access's register array holds `dtype`'s expression type and elements `at..at + lanes`.
    fn wide_array(
        &self,
        what: &str,
        owner: &str,
        dtype: DType,
        arr: ArrId,
        at: u32,
        lanes: u32,
    ) -> Result<(), IrError> {
        let (ty, len) = self.array(arr)?;
        let name = self.k.arrays.get(arr.0 as usize).map_or("?", |d| &d.name);
        if ty != ScalarTy::of_dtype(dtype) {
            return Err(self.err(IrErrorKind::Type, format!("{what}: array `{name}` holds {ty}, {owner} is {dtype}")));
        }
        if at as u64 + lanes as u64 > len as u64 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("{what}: array `{name}` of {len} elements cannot hold elements {at}..{}", at + lanes),
            ));
        }
        Ok(())
    }

    /// A constant array index must be inside the array.
    pub(in crate::validate) fn array_index(&self, a: ArrId, index: &Expr, len: u32) -> Result<(), IrError> {
        if let Some(v) = index.as_const_int()
            && (v < 0 || v >= len as i64)
        {
            let name = self.k.arrays.get(a.0 as usize).map_or("?", |d| &d.name);
            return Err(self.err(IrErrorKind::Shape, format!("array `{name}` of {len} elements indexed at {v}")));
        }
        Ok(())
    }
}
