//! Per-thread statements of threads regions: scalar and shared stores, atomics, register arrays and wide
//! accesses.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    pub(super) fn thread_stmt(&mut self, s: &Stmt) -> Result<(), JitError> {
        match s {
            Stmt::StoreScalar { tensor, index, value } => {
                let i = self.int(index)?;
                let i = self.check_index(*tensor, i, 1);
                let (v, t) = self.expr(value)?;
                match t {
                    Ty::F => self.store_f32(*tensor, i, v),
                    t => {
                        let v = self.as_int(v, t);
                        self.store_i64(*tensor, i, v)
                    }
                }
            }
            Stmt::SharedStore { buf, index, row, col, value } => {
                let a = self.shared_element(*buf, index, row, col, 1)?;
                let (v, t) = self.expr(value)?;
                let dtype = self.k.shared[buf.0 as usize].dtype;
                if !self.layout.overlaps[buf.0 as usize].is_empty() {
                    let bid = self.iconst(buf.0 as i64);
                    let f = rt::host_claim as *const u8;
                    self.call(f, &[self.ptr, types::I64], types::I64, &[self.ctx, bid]);
                }
                if dtype.is_int() {
                    let i = self.as_int(v, t);
                    let i = self.wrap_int(dtype, i);
                    self.b.ins().store(self.trusted, i, a, 0);
                } else {
                    let f = self.stored_float(dtype, v, t);
                    self.b.ins().store(self.trusted, f, a, 0);
                }
            }
            Stmt::Atomic { target, op, value, fetch } => {
                let (v, t) = self.expr(value)?;
                let (vi, vf) = (self.as_int(v, t), self.as_float(v, t));
                let opc = self.iconst(rt::ATOMIC_OPS.iter().position(|o| o == op).expect("listed") as i64);
                // The host function, the tensor or buffer, the (flat) index and whether it holds floats.
                let (f, id, i, float) = match target {
                    AtomicTarget::Global { tensor, index } => {
                        let i = self.int(index)?;
                        let i = self.check_index(*tensor, i, 2);
                        let float = self.k.tensors[tensor.0 as usize].dtype == DType::F32;
                        (rt::host_atomic_global as *const u8, tensor.0, i, float)
                    }
                    AtomicTarget::Shared { buf, index, row, col } => {
                        let flat = self.shared_flat(*buf, index, row, col, 2)?;
                        let float = !self.k.shared[buf.0 as usize].dtype.is_int();
                        (rt::host_atomic_shared as *const u8, buf.0, flat, float)
                    }
                };
                let id = self.iconst(id as i64);
                let (p, i64t) = (self.ptr, types::I64);
                let old = self.call(f, &[p, i64t, i64t, i64t, i64t, types::F32], i64t, &[self.ctx, id, i, opc, vi, vf]);
                if let Some(var) = fetch {
                    let old = if float {
                        let w = self.b.ins().ireduce(types::I32, old);
                        self.b.ins().bitcast(types::F32, self.plain, w)
                    } else {
                        old
                    };
                    self.b.def_var(self.vars[var.0 as usize], old);
                }
            }
            Stmt::LetArray { arr, len, ty, init } => {
                let (v, t) = self.expr(init)?;
                let v = match ty {
                    ScalarTy::Int => self.as_int(v, t),
                    ScalarTy::Float => self.as_float(v, t),
                    ScalarTy::Bool => v,
                };
                let off = self.layout.arrays[arr.0 as usize] as i64;
                let n = self.iconst(*len as i64);
                self.b.ins().store(self.trusted, n, self.frame, off as i32);
                self.for_range(*len as i64, &mut |l, i| {
                    let a = l.flat_addr(off + 8, i, 8);
                    l.b.ins().store(l.trusted, v, a, 0);
                    Ok(())
                })?;
            }
            Stmt::ArraySet { arr, index, value } => {
                let a = self.array_slot(*arr, index)?;
                let (v, _) = self.expr(value)?;
                self.b.ins().store(self.trusted, v, a, 0);
            }
            Stmt::LoadWide { arr, at, tensor, index, lanes } | Stmt::StoreWide { tensor, index, arr, at, lanes } => {
                // Element by element through the scalar paths (the interpreter's conversions), after the
                // interpreter's checks in its order: alignment, then per lane the tensor index and the array slot.
                let store = matches!(s, Stmt::StoreWide { .. });
                let what = if store { 4 } else { 3 };
                let i = self.int(index)?;
                self.fail_if_misaligned(i, *lanes, tensor.0 as i64, what);
                let float = ScalarTy::of_dtype(self.k.tensors[tensor.0 as usize].dtype) == ScalarTy::Float;
                for j in 0..*lanes as i64 {
                    let ij = self.b.ins().iadd_imm_s(i, j);
                    let ij = self.check_index(*tensor, ij, what);
                    let a = self.array_slot(*arr, &Expr::Int(*at as i64 + j))?;
                    if store {
                        if float {
                            let v = self.b.ins().load(types::F32, self.trusted, a, 0);
                            self.store_f32(*tensor, ij, v);
                        } else {
                            let v = self.b.ins().load(types::I64, self.trusted, a, 0);
                            self.store_i64(*tensor, ij, v);
                        }
                    } else {
                        let v = if float { self.load_f32(*tensor, ij) } else { self.load_i64(*tensor, ij) };
                        self.b.ins().store(self.trusted, v, a, 0);
                    }
                }
            }
            Stmt::SharedLoadWide { buf, col, lanes, .. } | Stmt::SharedStoreWide { buf, col, lanes, .. } => {
                // Lane by lane through the scalar statements, after the interpreter's alignment check (the column
                // evaluated once here and as a constant offset per lane: the expressions are pure).
                let store = matches!(s, Stmt::SharedStoreWide { .. });
                let what = if store { 6 } else { 5 };
                let c = self.int(col)?;
                self.fail_if_misaligned(c, *lanes, buf.0 as i64, what);
                for j in 0..*lanes as i64 {
                    let lane = crate::cpu::interp::shared_wide_lane(s, col.clone() + j, j);
                    self.thread_stmt(&lane)?;
                }
            }
            _ => unreachable!("not a per-thread statement"),
        }
        Ok(())
    }
    /// The wide accesses' alignment check (the interpreter's `Misaligned`): element `v` of tensor or shared buffer
    /// `id` a multiple of `lanes`; `what` names the access (3, 4: wide load, store; 5, 6: wide shared load, store).
    fn fail_if_misaligned(&mut self, v: Value, lanes: u32, id: i64, what: i64) {
        let low = self.b.ins().band_imm_s(v, lanes as i64 - 1);
        let z = self.iconst(0);
        let bad = self.b.ins().icmp(IntCC::NotEqual, low, z);
        let t = self.thread_or_none();
        let t = self.b.ins().smax(t, z);
        let (id, nl, w) = (self.iconst(id), self.iconst(lanes as i64), self.iconst(what));
        self.fail_if(bad, Fail::Misaligned, &[id, v, nl, w, t]);
    }
}
