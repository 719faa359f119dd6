//! Statement checks of the validator: placement rules and every statement kind.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn body(&mut self, body: &[Stmt]) -> Result<(), IrError> {
        for (i, s) in body.iter().enumerate() {
            self.path.push(format!("[{i}]"));
            self.stmt(s)?;
            self.path.pop();
        }
        Ok(())
    }

    /// The statement's name in messages, and where it may appear.
    pub(super) fn placement(s: &Stmt) -> (&'static str, Placement) {
        use Placement::*;
        match s {
            Stmt::Let { .. } => ("let", Anywhere),
            Stmt::Assign { .. } => ("assign", Anywhere),
            Stmt::For { .. } => ("for", Anywhere),
            Stmt::If { .. } => ("if", Anywhere),
            Stmt::Barrier => ("barrier", BlockOnly),
            Stmt::Map { .. } => ("map", BlockOnly),
            Stmt::VecMap { .. } => ("vec_map", BlockOnly),
            Stmt::Reduce { .. } => ("reduce", BlockOnly),
            Stmt::Mma { .. } => ("mma", BlockOnly),
            Stmt::MmaAsync { .. } => ("mma_async", BlockOnly),
            Stmt::MmaWait { .. } => ("mma_wait", BlockOnly),
            Stmt::CopyAsync { .. } => ("copy_async", BlockOnly),
            Stmt::MbarInit { .. } => ("mbar_init", BlockOnly),
            Stmt::MbarArriveExpectTx { .. } => ("mbar_arrive_expect_tx", BlockOnly),
            Stmt::MbarArrive { .. } => ("mbar_arrive", BlockOnly),
            Stmt::MbarWait { .. } => ("mbar_wait", BlockOnly),
            Stmt::TmaLoad(_) => ("tma_load", BlockOnly),
            Stmt::TmaStore(_) => ("tma_store", BlockOnly),
            Stmt::TmaStoreWait { .. } => ("tma_store_wait", BlockOnly),
            Stmt::StoreCols { .. } => ("tile column store", BlockOnly),
            Stmt::MbarArriveCluster { .. } => ("mbar_arrive_cluster", BlockOnly),
            Stmt::ClusterSync => ("cluster_sync", BlockOnly),
            Stmt::AsyncCommit => ("async commit", BlockOnly),
            Stmt::AsyncWait { .. } => ("async wait", BlockOnly),
            Stmt::Load { .. } => ("tile load", BlockOnly),
            Stmt::Store { .. } => ("tile store", BlockOnly),
            Stmt::LoadVec { .. } => ("vector load", BlockOnly),
            Stmt::StoreVec { .. } => ("vector store", BlockOnly),
            Stmt::Scan { .. } => ("scan", BlockOnly),
            Stmt::DequantFp4 { .. } => ("dequant_fp4", BlockOnly),
            Stmt::DequantFp4Stream { .. } => ("dequant_fp4_stream", BlockOnly),
            Stmt::Fp4Gemv { .. } => ("fp4_gemv", BlockOnly),
            Stmt::Threads { .. } => ("threads region", BlockOnly),
            Stmt::Producer { .. } => ("producer", BlockOnly),
            Stmt::InTurn { .. } => ("in_turn", BlockOnly),
            Stmt::FirstWarpgroups { .. } => ("first_warpgroups", BlockOnly),
            Stmt::StoreScalar { .. } => ("store_scalar", RegionOnly),
            Stmt::SharedStore { .. } => ("shared_store", RegionOnly),
            Stmt::Atomic { .. } => ("atomic", RegionOnly),
            Stmt::LetArray { .. } => ("let_array", RegionOnly),
            Stmt::ArraySet { .. } => ("array_set", RegionOnly),
            Stmt::LoadWide { .. } => ("load_wide", RegionOnly),
            Stmt::StoreWide { .. } => ("store_wide", RegionOnly),
            Stmt::WarpShuffle { .. } => ("warp_shuffle", RegionOnly),
            Stmt::WarpSync => ("syncwarp", RegionOnly),
            Stmt::Fence => ("fence", RegionOnly),
        }
    }

    pub(super) fn stmt(&mut self, s: &Stmt) -> Result<(), IrError> {
        match (Self::placement(s), self.region.is_some()) {
            ((name, Placement::BlockOnly), true) => {
                return Err(self.err(
                    IrErrorKind::Scope,
                    format!(
                        "`{name}` is a block-level statement and cannot appear inside a threads region \
                         (end the region before it and start a new one after it)"
                    ),
                ));
            }
            ((name, Placement::RegionOnly), false) => {
                return Err(self.err(
                    IrErrorKind::Scope,
                    format!("`{name}` is per-thread code: it is only valid inside a threads region"),
                ));
            }
            _ => {}
        }
        if self.k.producer_warp {
            self.producer_placement(s)?;
        } else if matches!(s, Stmt::Producer { .. }) {
            return Err(self.err(
                IrErrorKind::Scope,
                "a `producer` body needs a producer-warp kernel (`KernelBuilder::producer_warp`)",
            ));
        }
        if self.in_turn {
            self.turn_placement(s)?;
        }
        if self.first_wgs.is_some() {
            self.first_wgs_placement(s)?;
        }
        let skeleton = self.k.producer_warp && !self.producer && self.region.is_none();
        self.skeleton
            .set(skeleton && matches!(s, Stmt::Let { .. } | Stmt::Assign { .. } | Stmt::For { .. } | Stmt::If { .. }));
        let r = self.stmt_inner(s);
        self.skeleton.set(false);
        r
    }

    /// Inside an [`Stmt::InTurn`] body: nothing that waits for another consumer warpgroup (which may be waiting
    /// for the turn this warpgroup holds).
    pub(super) fn turn_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let what = match s {
            Stmt::Barrier
            | Stmt::Scan { .. }
            | Stmt::Fp4Gemv { .. }
            | Stmt::TmaStore(_)
            | Stmt::TmaStoreWait { .. } => "a barrier",
            Stmt::MbarInit { .. } => "a barrier initialization (a block barrier)",
            Stmt::ClusterSync => "a cluster barrier",
            Stmt::MbarWait { elected: true, .. } if !self.producer => {
                "an elected mbarrier wait outside a producer body (its thread may wait for a release another \
                 warpgroup makes after its own turn)"
            }
            Stmt::InTurn { .. } => "a nested `in_turn`",
            _ => return Ok(()),
        };
        Err(self.err(
            IrErrorKind::Scope,
            format!(
                "{what} inside an `in_turn` body: the warpgroup holding the turn would wait for one waiting for \
                 the turn"
            ),
        ))
    }

    /// Inside a [`Stmt::FirstWarpgroups`] body: only what a warpgroup runs on its own (the other warpgroups skip
    /// the body, so nothing may wait for them or spread its work over them).
    pub(super) fn first_wgs_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let ok = matches!(
            s,
            Stmt::Let { .. }
                | Stmt::Assign { .. }
                | Stmt::For { .. }
                | Stmt::If { .. }
                | Stmt::Map { .. }
                | Stmt::VecMap { .. }
                | Stmt::Reduce { .. }
                | Stmt::Mma { .. }
                | Stmt::MmaAsync { .. }
                | Stmt::MmaWait { .. }
                | Stmt::Load { .. }
                | Stmt::Store { .. }
                | Stmt::LoadVec { .. }
                | Stmt::StoreVec { .. }
                | Stmt::StoreCols { .. }
        );
        if ok {
            return Ok(());
        }
        let (name, _) = Self::placement(s);
        Err(self.err(
            IrErrorKind::Scope,
            format!(
                "`{name}` inside a `first_warpgroups` body: the other warpgroups skip the body, so it holds scalar \
                 control and tile statements a warpgroup runs on its own (no barriers, copies, threads regions or \
                 nested turns)"
            ),
        ))
    }

    /// Producer-warp kernels: what may appear inside and outside [`Stmt::Producer`] bodies.
    pub(super) fn producer_placement(&self, s: &Stmt) -> Result<(), IrError> {
        let elected =
            matches!(s, Stmt::TmaLoad(_) | Stmt::MbarArriveExpectTx { .. } | Stmt::MbarWait { elected: true, .. });
        let control = matches!(s, Stmt::Let { .. } | Stmt::Assign { .. } | Stmt::For { .. } | Stmt::If { .. });
        if self.producer && !(elected || control) {
            let (name, _) = Self::placement(s);
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "`{name}` inside a `producer` body: the producer warp runs scalar control, elected mbarrier \
                     waits, expect_tx arrivals and TMA copies only"
                ),
            ));
        }
        if !self.producer && elected {
            let (name, _) = Self::placement(s);
            return Err(self.err(
                IrErrorKind::Scope,
                format!(
                    "`{name}` outside a `producer` body of a producer-warp kernel: its elected thread is the \
                     producer warp's, so it belongs in a `producer` body"
                ),
            ));
        }
        Ok(())
    }

    /// A nested body (`first_warpgroups`, `in_turn`, `producer`) in a scope of its own, named `label` in error
    /// paths, with its context set by `enter` for the body's duration and cleared by `leave`.
    fn region(
        &mut self,
        label: String,
        body: &[Stmt],
        enter: impl FnOnce(&mut Self),
        leave: impl FnOnce(&mut Self),
    ) -> Result<(), IrError> {
        self.path.push(label);
        enter(self);
        self.scopes.push(Scope::default());
        let r = self.body(body);
        self.scopes.pop();
        leave(self);
        self.path.pop();
        r
    }

    pub(super) fn stmt_inner(&mut self, s: &Stmt) -> Result<(), IrError> {
        match s {
            Stmt::FirstWarpgroups { count, body } => {
                let t = self.k.threads;
                if self.k.producer_warp || !t.is_multiple_of(128) || *count == 0 || 128 * count >= t {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "`first_warpgroups` of {count} needs at least {} whole warpgroups (threads a multiple of \
                             128) and no producer warp; the kernel has {t} threads{}",
                            count + 1,
                            if self.k.producer_warp { " and a producer warp" } else { "" }
                        ),
                    ));
                }
                // Products the body starts complete inside it: a `mma_wait(0)` at its top level after the last
                // statement that starts one (ptxas 13.0 serializes every wgmma of a kernel whose products stay in
                // flight across such a branch, its note C7518).
                let starts = |t: &Stmt| {
                    let mut any = false;
                    t.visit(&mut |u| any |= matches!(u, Stmt::MmaAsync { .. }));
                    any
                };
                if let Some(last) = body.iter().rposition(starts)
                    && !body[last..].iter().any(|t| matches!(t, Stmt::MmaWait { pending: 0 }))
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        "a `first_warpgroups` body leaves `mma_async` products in flight: wait for them inside it \
                         (`mma_wait(0)` after the last; ptxas serializes every wgmma of a kernel whose products stay \
                         in flight across the branch)",
                    ));
                }
                self.region(
                    format!("first {count} warpgroups"),
                    body,
                    |v| v.first_wgs = Some((*count, v.scopes.len())),
                    |v| v.first_wgs = None,
                )?;
            }
            Stmt::InTurn { body } => {
                let t = self.k.threads;
                if !t.is_multiple_of(128) || t < 256 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "`in_turn` needs at least two whole consumer warpgroups (threads a multiple of 128, \
                             at least 256; the kernel has {t})"
                        ),
                    ));
                }
                self.region("in_turn".into(), body, |v| v.in_turn = true, |v| v.in_turn = false)?;
            }
            Stmt::Producer { body } => {
                self.region("producer".into(), body, |v| v.producer = true, |v| v.producer = false)?;
            }
            Stmt::Let { var, value } => {
                if var.0 as usize >= self.k.vars.len() {
                    return Err(self.err(IrErrorKind::Scope, format!("no variable #{}", var.0)));
                }
                let t = self.ty(value, Ctx::Scalar { allow_special: true })?;
                self.introduce(*var, t, "variable")?;
            }
            Stmt::Assign { var, value } => {
                let want = self.var_ty(*var).ok_or_else(|| {
                    self.err(IrErrorKind::Scope, format!("assignment to variable #{} out of scope", var.0))
                })?;
                if let (Some((_, base)), Some(at)) = (self.first_wgs, self.var_scope(*var))
                    && at < base
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "variable `{}` is introduced outside the `first_warpgroups` body: the warpgroups that skip \
                             the body would keep its old value (introduce a variable inside, or write through shared \
                             memory)",
                            self.var_name(*var)
                        ),
                    ));
                }
                if let (Some(base), Some(at)) = (self.region, self.var_scope(*var))
                    && at < base
                {
                    return Err(self.err(
                        IrErrorKind::Scope,
                        format!(
                            "variable `{}` is introduced outside the threads region: assigning it inside would give \
                             every thread its own value of a block-level variable (introduce a per-thread variable, \
                             or write through shared memory)",
                            self.var_name(*var)
                        ),
                    ));
                }
                self.scalar(value, want, "assigned value")?;
            }
            Stmt::For { var, start, end, step, body, .. } => {
                self.path.push(format!("for `{}`", self.k.vars.get(var.0 as usize).map_or("?", |v| &v.name)));
                for (e, what) in [(start, "loop start"), (end, "loop end"), (step, "loop step")] {
                    self.scalar(e, ScalarTy::Int, what)?;
                }
                if let Some(st) = step.as_const_int()
                    && st <= 0
                {
                    return Err(self.err(IrErrorKind::Shape, "loop step must be positive"));
                }
                if var.0 as usize >= self.k.vars.len()
                    || self.var_types[var.0 as usize].replace(ScalarTy::Int).is_some()
                {
                    return Err(self.err(IrErrorKind::Scope, format!("loop variable #{} is missing or reused", var.0)));
                }
                self.scopes.push(Scope::with_var(*var, ScalarTy::Int));
                self.body(body)?;
                self.scopes.pop();
                self.path.pop();
            }
            Stmt::If { cond, then_body, else_body } => {
                self.scalar(cond, ScalarTy::Bool, "if condition")?;
                self.path.push("then".into());
                self.scopes.push(Scope::default());
                self.body(then_body)?;
                self.scopes.pop();
                self.path.pop();
                self.path.push("else".into());
                self.scopes.push(Scope::default());
                self.body(else_body)?;
                self.scopes.pop();
                self.path.pop();
            }
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
                let t = self
                    .k
                    .tensors
                    .get(tensor.0 as usize)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", tensor.0)))?;
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
                        let t = self
                            .k
                            .tensors
                            .get(tensor.0 as usize)
                            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", tensor.0)))?;
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
            Stmt::Barrier | Stmt::AsyncCommit | Stmt::AsyncWait { .. } | Stmt::Fence => {}
            Stmt::DequantFp4 { tile, words, scales, packed, .. } => {
                let t = self.tile(*tile)?;
                self.path.push(format!("dequant_fp4 `{}`", t.name));
                let wc = t.cols / t.warps[1].max(1);
                if t.dtype != DType::Bf16 || !t.cols.is_multiple_of(32) || !wc.is_multiple_of(32) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4 decodes into a bf16 tile whose columns and per-warp column band are \
                             multiples of 32; `{}` is {} {}x{} on {:?} warps",
                            t.name, t.dtype, t.rows, t.cols, t.warps
                        ),
                    ));
                }
                let dq = self.shared_ref(words)?;
                let ds = self.shared_ref(scales)?;
                if dq.dtype != DType::U32 || words.rows != t.rows || words.cols != t.cols / 8 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "dequant_fp4 words: a u32 window of {}x{} is needed, got shared `{}` ({}) {}x{}",
                            t.rows,
                            t.cols / 8,
                            dq.name,
                            dq.dtype,
                            words.rows,
                            words.cols
                        ),
                    ));
                }
                // The natural layout reads a block's four words as one 16-byte access.
                if !*packed && (!words.col0.is_multiple_of(4) || !dq.row_bytes().is_multiple_of(16)) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4 (natural layout) reads 16-byte blocks: shared `{}` rows of {} bytes and \
                             window col0 = {} must be multiples of 16 bytes",
                            dq.name,
                            dq.row_bytes(),
                            words.col0
                        ),
                    ));
                }
                if ds.dtype != DType::U8 || scales.rows != t.rows || scales.cols != t.cols / 32 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!(
                            "dequant_fp4 scales: a u8 window of {}x{} is needed, got shared `{}` ({}) {}x{}",
                            t.rows,
                            t.cols / 32,
                            ds.name,
                            ds.dtype,
                            scales.rows,
                            scales.cols
                        ),
                    ));
                }
                self.path.pop();
            }
            Stmt::DequantFp4Stream { tile, words, scales, prefetch, .. } => {
                let t = self.tile(*tile)?;
                self.path.push(format!("dequant_fp4_stream `{}`", t.name));
                let wc = t.cols / t.warps[1].max(1);
                if t.dtype != DType::Bf16 || !t.cols.is_multiple_of(32) || !wc.is_multiple_of(32) {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "dequant_fp4_stream decodes into a bf16 tile whose columns and per-warp column band \
                             are multiples of 32; `{}` is {} {}x{} on {:?} warps",
                            t.name, t.dtype, t.rows, t.cols, t.warps
                        ),
                    ));
                }
                let mut views = vec![(words, scales, "")];
                if let Some(p) = prefetch {
                    self.scalar(&p.first, ScalarTy::Bool, "dequant_fp4_stream prefetch first flag")?;
                    views.push((&p.words, &p.scales, "prefetch "));
                }
                for (words, scales, what) in views {
                    let q = self.global_view(words)?;
                    if q.dtype != DType::U32 || words.vec != 4 {
                        return Err(self.err(
                            IrErrorKind::Type,
                            format!(
                                "dequant_fp4_stream {what}words: a u32 view with vec = 4 (one 16-byte block per \
                                 access) is needed, got `{}` ({}) vec {}",
                                q.name, q.dtype, words.vec
                            ),
                        ));
                    }
                    let sc = self.global_view(scales)?;
                    if sc.dtype != DType::U8 {
                        return Err(self.err(
                            IrErrorKind::Type,
                            format!(
                                "dequant_fp4_stream {what}scales: a u8 view is needed, got `{}` ({})",
                                sc.name, sc.dtype
                            ),
                        ));
                    }
                }
                self.path.pop();
            }
            Stmt::Fp4Gemv {
                out,
                scratch,
                words,
                scales,
                x,
                packed,
                chunk,
                ring,
                staged,
                l2_prefetch,
                tiled,
                bulk,
                x_two_ahead,
                ..
            } => {
                self.path.push("fp4_gemv".to_string());
                let o = self.shared_ref(out)?;
                let sc = self.shared(*scratch)?;
                let warps = self.k.threads / 32;
                let bad = |what: String| Err(self.err(IrErrorKind::Layout, what));
                if o.dtype != DType::F32 || !out.rows.is_multiple_of(16) || out.rows == 0 || !matches!(out.cols, 8 | 16)
                {
                    return bad(format!(
                        "fp4_gemv out: an f32 window of R x T rows (R a multiple of 16, T 8 or 16), got `{}` ({}) {}x{}",
                        o.name, o.dtype, out.rows, out.cols
                    ));
                }
                // Staged: the partials alias the rings (their size is checked below), whatever the tiles' shape.
                if sc.dtype != DType::F32
                    || (!*staged && (sc.rows * sc.cols < out.rows * out.cols || sc.count < warps))
                    || sc.alias.is_some()
                {
                    return bad(format!(
                        "fp4_gemv scratch: an unaliased f32 buffer of at least {} elements per tile and {warps} tiles (one per \
                         warp), got `{}` ({}) {}x{} x{}",
                        out.rows * out.cols,
                        sc.name,
                        sc.dtype,
                        sc.rows,
                        sc.cols,
                        sc.count
                    ));
                }
                if *scratch == out.buf {
                    return bad("fp4_gemv: scratch and out must be different buffers".into());
                }
                if *staged {
                    let have = sc.count as u64 * sc.rows as u64 * sc.cols as u64 * 4;
                    let staging = Fp4Staging {
                        stages: *ring,
                        l2_prefetch: *l2_prefetch,
                        tiled: *tiled,
                        bulk: *bulk,
                        x_two_ahead: *x_two_ahead,
                    };
                    let need = staging.scratch_bytes(warps, out.rows);
                    if have < need {
                        return bad(format!(
                            "fp4_gemv staged: scratch `{}` needs {need} bytes for {warps} warps' rings of {ring} \
                             stages, has {have}",
                            sc.name
                        ));
                    }
                }
                if *tiled && !(*staged && *packed && out.cols == 8) {
                    return bad(format!(
                        "fp4_gemv: tiled words need the staged ring, the packed layout and 8-token tiles (staged \
                         {staged}, packed {packed}, {} tokens)",
                        out.cols
                    ));
                }
                if *x_two_ahead && !(*staged && out.cols == 8) {
                    return bad(format!(
                        "fp4_gemv: x_two_ahead needs the staged ring and 8-token tiles (staged {staged}, {} tokens)",
                        out.cols
                    ));
                }
                if *bulk && !(*tiled && *l2_prefetch == 0) {
                    return bad(format!(
                        "fp4_gemv: bulk copies need tiled words and no l2_prefetch (tiled {tiled}, l2_prefetch \
                         {l2_prefetch})"
                    ));
                }
                if !matches!(l2_prefetch, 0 | 64 | 128 | 256) || (*l2_prefetch > 0 && !*staged) {
                    return bad(format!(
                        "fp4_gemv: l2_prefetch {l2_prefetch} (0, 64, 128 or 256 bytes; non-zero only with staged)"
                    ));
                }
                if !matches!(chunk, 1 | 2 | 4 | 8) || !(1..=8).contains(ring) || !self.k.threads.is_multiple_of(32) {
                    return bad(format!(
                        "fp4_gemv: chunk {chunk} (1, 2, 4 or 8) and ring {ring} (1..=8) on whole warps"
                    ));
                }
                let q = self.global_view(words)?;
                if q.dtype != DType::U32 || words.vec != 4 {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!(
                            "fp4_gemv words: a u32 view with vec = 4, got `{}` ({}) vec {}",
                            q.name, q.dtype, words.vec
                        ),
                    ));
                }
                let s8 = self.global_view(scales)?;
                if s8.dtype != DType::U8 {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("fp4_gemv scales: a u8 view is needed, got `{}` ({})", s8.name, s8.dtype),
                    ));
                }
                let xv = self.global_view(x)?;
                if xv.dtype != DType::Bf16 || x.vec != 8 {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!("fp4_gemv x: a bf16 view with vec = 8, got `{}` ({}) vec {}", xv.name, xv.dtype, x.vec),
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
            Stmt::MbarInit { bar, count } => {
                let m = self
                    .k
                    .mbarriers
                    .get(bar.0 as usize)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no mbarrier declaration #{}", bar.0)))?;
                if *count == 0 || *count >= 1 << 20 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!("mbarrier `{}`: arrival count {count} outside 1..2^20", m.name),
                    ));
                }
            }
            Stmt::MbarArriveExpectTx { bar, bytes } => {
                self.mbar_ref(bar)?;
                if *bytes >= 1 << 20 {
                    return Err(self.err(IrErrorKind::Shape, format!("expect_tx of {bytes} bytes: at most 2^20 - 1")));
                }
            }
            Stmt::MbarArrive { bar } => self.mbar_ref(bar)?,
            Stmt::MbarWait { bar, parity, .. } => {
                self.mbar_ref(bar)?;
                self.scalar(parity, ScalarTy::Int, "mbarrier wait parity")?;
            }
            Stmt::TmaLoad(t) => {
                self.tma_load(t)?;
                if let Some(mask) = &t.multicast {
                    self.scalar(mask, ScalarTy::Int, "tma multicast mask")?;
                    self.cluster_mask(mask)?;
                }
            }
            Stmt::TmaStore(t) => self.tma_store(t)?,
            Stmt::TmaStoreWait { .. } => {}
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
            Stmt::MbarArriveCluster { bar, cta } => {
                self.mbar_ref(bar)?;
                self.scalar(cta, ScalarTy::Int, "cluster CTA rank")?;
                let n = self.k.cluster_size() as i64;
                if let Some(c) = cta.as_const_int()
                    && (c < 0 || c >= n)
                {
                    return Err(self.err(IrErrorKind::Shape, format!("cluster CTA rank {c} outside 0..{n}")));
                }
            }
            Stmt::ClusterSync => {}
            Stmt::MmaWait { .. } => {}
            Stmt::CopyAsync { dst, src } => {
                let d = self.shared_ref(dst)?;
                let t = self.global_view(src)?;
                if t.dtype != d.dtype {
                    return Err(self.err(
                        IrErrorKind::Type,
                        format!(
                            "async copy from `{}` ({}) into shared `{}` ({}) cannot convert",
                            t.name, t.dtype, d.name, d.dtype
                        ),
                    ));
                }
                if dst.cols % src.vec != 0 || dst.col0 % src.vec != 0 {
                    return Err(self.err(
                        IrErrorKind::Shape,
                        format!("window cols {} not a multiple of vec {}", dst.cols, src.vec),
                    ));
                }
                // Every access lands on a multiple of its size only if the shared rows are.
                if d.dtype.storage_bytes(d.cols as usize) % d.dtype.storage_bytes(src.vec as usize) != 0 {
                    return Err(self.err(
                        IrErrorKind::Layout,
                        format!(
                            "shared `{}` rows ({} elements) are not a multiple of the copy's vec {}",
                            d.name, d.cols, src.vec
                        ),
                    ));
                }
            }
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
                let t = self
                    .k
                    .tensors
                    .get(view.tensor.0 as usize)
                    .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", view.tensor.0)))?;
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
        }
        Ok(())
    }

    /// The value type of a scalar store into `dtype` storage.
    pub(super) fn scalar_storage(&self, dtype: DType, what: &str) -> Result<ScalarTy, IrError> {
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
    pub(super) fn shared_coords(&self, d: &SharedDecl, index: &Expr, row: &Expr, col: &Expr) -> Result<(), IrError> {
        for (e, n, what) in [(index, d.count, "tile index"), (row, d.rows, "row"), (col, d.cols, "col")] {
            if let Some(v) = e.as_const_int()
                && (v < 0 || v >= n as i64)
            {
                return Err(self.err(IrErrorKind::Shape, format!("shared `{}`: {what} {v} is outside 0..{n}", d.name)));
            }
        }
        Ok(())
    }

    /// A constant array index must be inside the array.
    /// A wide access ([`Stmt::LoadWide`] / [`Stmt::StoreWide`]): an 8- or 16-byte access of a supported dtype,
    /// an array of the tensor's expression type holding `at + lanes` elements, and an index not provably
    /// misaligned.
    pub(super) fn wide(
        &mut self,
        arr: ArrId,
        at: u32,
        tensor: crate::expr::TensorId,
        index: &Expr,
        lanes: u32,
        store: bool,
    ) -> Result<(), IrError> {
        let t = self
            .k
            .tensors
            .get(tensor.0 as usize)
            .ok_or_else(|| self.err(IrErrorKind::Scope, format!("no tensor #{}", tensor.0)))?;
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
        let bytes = t.dtype.size_bytes() as u32 * lanes;
        if lanes == 0 || !matches!(bytes, 8 | 16) {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("{what} of tensor `{}`: {lanes} x {} is {bytes} bytes, not 8 or 16", t.name, t.dtype),
            ));
        }
        self.scalar(index, ScalarTy::Int, &format!("{what} index"))?;
        if let Some(r) = provable_residue(index, lanes as i64)
            && r != 0
        {
            return Err(self.err(
                IrErrorKind::Layout,
                format!(
                    "{what} of tensor `{}`: index {} is {r} modulo {lanes} (misaligned: it must be a multiple of the \
                     {lanes} lanes)",
                    t.name,
                    crate::print::expr(self.k, index)
                ),
            ));
        }
        let (ty, len) = self.array(arr)?;
        let name = self.k.arrays.get(arr.0 as usize).map_or("?", |d| &d.name);
        if ty != ScalarTy::of_dtype(t.dtype) {
            return Err(self.err(
                IrErrorKind::Type,
                format!("{what}: array `{name}` holds {ty}, tensor `{}` is {}", t.name, t.dtype),
            ));
        }
        if at as u64 + lanes as u64 > len as u64 {
            return Err(self.err(
                IrErrorKind::Shape,
                format!("{what}: array `{name}` of {len} elements cannot hold elements {at}..{}", at + lanes),
            ));
        }
        Ok(())
    }

    pub(super) fn array_index(&self, a: ArrId, index: &Expr, len: u32) -> Result<(), IrError> {
        if let Some(v) = index.as_const_int()
            && (v < 0 || v >= len as i64)
        {
            let name = self.k.arrays.get(a.0 as usize).map_or("?", |d| &d.name);
            return Err(self.err(IrErrorKind::Shape, format!("array `{name}` of {len} elements indexed at {v}")));
        }
        Ok(())
    }
}
