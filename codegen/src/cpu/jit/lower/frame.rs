//! The block frame: loops over tiles, element addresses of tiles, vectors, shared buffers and arrays, float
//! rounding and integer wrapping of stored elements, and the runtime calls of the bulk tile statements.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    /// Emit `for i in 0..n { body(i) }` (n > 0 a constant).
    pub(super) fn for_range(
        &mut self,
        n: i64,
        body: &mut dyn FnMut(&mut Self, Value) -> Result<(), JitError>,
    ) -> Result<(), JitError> {
        self.counted_loop(Bound::Const(0), Bound::Const(n), Bound::Const(1), body)
    }

    /// Emit `for (i = start; i < end; i += step) { body(i) }`: the loop of `Stmt::For`, of the threads
    /// of a block and of [`Self::for_range`]. A constant end or step is taken as an immediate.
    pub(super) fn counted_loop(
        &mut self,
        start: Bound,
        end: Bound,
        step: Bound,
        body: &mut dyn FnMut(&mut Self, Value) -> Result<(), JitError>,
    ) -> Result<(), JitError> {
        let (head, body_b, exit) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        let i = self.b.append_block_param(head, types::I64);
        let start = match start {
            Bound::Value(v) => v,
            Bound::Const(n) => self.iconst(n),
        };
        self.b.ins().jump(head, &[start.into()]);
        self.b.switch_to_block(head);
        let go = match end {
            Bound::Value(e) => self.b.ins().icmp(IntCC::SignedLessThan, i, e),
            Bound::Const(n) => self.b.ins().icmp_imm_s(IntCC::SignedLessThan, i, n),
        };
        self.b.ins().brif(go, body_b, &[], exit, &[]);
        self.b.switch_to_block(body_b);
        self.b.seal_block(body_b);
        body(self, i)?;
        let next = match step {
            Bound::Value(st) => self.b.ins().iadd(i, st),
            Bound::Const(n) => self.b.ins().iadd_imm_s(i, n),
        };
        self.b.ins().jump(head, &[next.into()]);
        self.b.seal_block(head);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        Ok(())
    }

    /// The address of element (r, c) of a `cols`-column object at byte `off` of the frame.
    pub(super) fn elem_addr(&mut self, off: i64, r: Value, c: Value, cols: i64, size: i64) -> Value {
        let rc = self.b.ins().imul_imm_s(r, cols);
        let i = self.b.ins().iadd(rc, c);
        self.flat_addr(off, i, size)
    }

    /// The address of element `i` of `size` bytes of an object at byte `off` of the frame.
    pub(super) fn flat_addr(&mut self, off: i64, i: Value, size: i64) -> Value {
        let bytes = self.b.ins().imul_imm_s(i, size);
        let a = self.b.ins().iadd(self.frame, bytes);
        self.b.ins().iadd_imm_s(a, off)
    }

    /// A value as a float element of `dtype` stores it: rounded to `dtype`, NaNs quieted.
    pub(super) fn stored_float(&mut self, dtype: DType, v: Value, t: Ty) -> Value {
        let f = self.as_float(v, t);
        let f = self.round_to(dtype, f);
        self.quiet(f)
    }

    /// `round_to(dtype, x)`: what a float register or shared element of `dtype` keeps.
    pub(super) fn round_to(&mut self, dtype: DType, x: Value) -> Value {
        match dtype {
            DType::Bf16 => {
                let h = self.f32_to_bf16_bits(x);
                let w = self.b.ins().ishl_imm_s(h, 16);
                self.b.ins().bitcast(types::F32, self.plain, w)
            }
            DType::F16 | DType::E4m3 => {
                let c = self.iconst(rt::dtype_code(dtype));
                self.call(rt::host_round_to as *const u8, &[types::I64, types::F32], types::F32, &[c, x])
            }
            _ => x,
        }
    }

    /// The bits of `half::bf16::from_f32(x)` (round to nearest even; NaNs keep their payload's high part and
    /// turn quiet), as an i32 in 0..2^16: inline, the same function the interpreter calls.
    pub(super) fn f32_to_bf16_bits(&mut self, x: Value) -> Value {
        let p = self.plain;
        let b = &mut self.b;
        let w = b.ins().bitcast(types::I32, p, x);
        let hi = b.ins().ushr_imm_u(w, 16);
        let abs = b.ins().band_imm_s(w, 0x7fff_ffff);
        let nan = b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, abs, 0x7f80_0000);
        let quiet = b.ins().bor_imm_s(hi, 0x40);
        let rb = b.ins().band_imm_s(w, 0x8000);
        let rest = b.ins().band_imm_s(w, 3 * 0x8000 - 1);
        let rb = b.ins().icmp_imm_s(IntCC::NotEqual, rb, 0);
        let rest = b.ins().icmp_imm_s(IntCC::NotEqual, rest, 0);
        let up = b.ins().band(rb, rest);
        let up = b.ins().uextend(types::I32, up);
        let rounded = b.ins().iadd(hi, up);
        b.ins().select(nan, quiet, rounded)
    }

    /// `rt::quiet`: signalling NaNs become quiet, as through the interpreter's f64 tile and shared storage.
    pub(super) fn quiet(&mut self, x: Value) -> Value {
        let p = self.plain;
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let w = self.b.ins().bitcast(types::I32, p, x);
        let q = self.b.ins().bor_imm_s(w, 0x0040_0000);
        let q = self.b.ins().bitcast(types::F32, p, q);
        self.b.ins().select(nan, q, x)
    }

    /// `wrap_int(dtype, v)`.
    pub(super) fn wrap_int(&mut self, dtype: DType, v: Value) -> Value {
        match dtype {
            DType::U8 => self.b.ins().band_imm_s(v, 0xff),
            DType::I32 => {
                let w = self.b.ins().ireduce(types::I32, v);
                self.b.ins().sextend(types::I64, w)
            }
            DType::U32 => {
                let w = self.b.ins().ireduce(types::I32, v);
                self.b.ins().uextend(types::I64, w)
            }
            _ => v,
        }
    }

    /// The thread index inside a region, else -1.
    pub(super) fn thread_or_none(&mut self) -> Value {
        match self.thread {
            Some(t) => self.b.use_var(t),
            None => self.iconst(-1),
        }
    }

    /// Evaluate and check the tile index of a shared window (the interpreter's `shared_base`).
    pub(super) fn shared_index(&mut self, r: &SharedRef) -> Result<Value, JitError> {
        let i = self.int(&r.index)?;
        let count = self.k.shared[r.buf.0 as usize].count as i64;
        let bad = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, i, count);
        let b = self.iconst(r.buf.0 as i64);
        self.fail_if(bad, Fail::SharedIndex, &[b, i]);
        Ok(i)
    }

    /// The checked tile index of a shared operand (0 for a register operand).
    pub(super) fn operand_index(&mut self, o: &Operand) -> Result<Value, JitError> {
        match o {
            Operand::Reg(_) => Ok(self.iconst(0)),
            Operand::Shared { src, .. } | Operand::Banded { src, .. } => self.shared_index(src),
        }
    }

    /// Offset, row stride, rows and cols of a global view.
    pub(super) fn global_view(&mut self, v: &GlobalView) -> Result<[Value; 4], JitError> {
        Ok([self.int(&v.offset)?, self.int(&v.row_stride)?, self.int(&v.rows)?, self.int(&v.cols)?])
    }

    /// Evaluate and check element (row, col) of tile `index` of a shared buffer; its flat element index.
    pub(super) fn shared_flat(
        &mut self,
        buf: SharedId,
        index: &Expr,
        row: &Expr,
        col: &Expr,
        what: i64,
    ) -> Result<Value, JitError> {
        let (i, r, c) = (self.int(index)?, self.int(row)?, self.int(col)?);
        let d = &self.k.shared[buf.0 as usize];
        let (count, rows, cols) = (d.count as i64, d.rows as i64, d.cols as i64);
        let b1 = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, i, count);
        let b2 = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, r, rows);
        let b3 = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, c, cols);
        let bad = self.b.ins().bor(b1, b2);
        let bad = self.b.ins().bor(bad, b3);
        let (w, bid, t) = (self.iconst(what), self.iconst(buf.0 as i64), self.thread_or_none());
        self.fail_if(bad, Fail::SharedElement, &[w, bid, i, r, c, t]);
        let ir = self.b.ins().imul_imm_s(i, rows);
        let ir = self.b.ins().iadd(ir, r);
        let irc = self.b.ins().imul_imm_s(ir, cols);
        Ok(self.b.ins().iadd(irc, c))
    }

    /// The frame address of a checked shared element.
    pub(super) fn shared_element(
        &mut self,
        buf: SharedId,
        index: &Expr,
        row: &Expr,
        col: &Expr,
        what: i64,
    ) -> Result<Value, JitError> {
        let flat = self.shared_flat(buf, index, row, col, what)?;
        let size = rt::shared_elem_bytes(self.k.shared[buf.0 as usize].dtype) as i64;
        let off = self.layout.shared[buf.0 as usize] as i64;
        Ok(self.flat_addr(off, flat, size))
    }

    /// The frame address of a checked element of the current thread's array.
    pub(super) fn array_slot(&mut self, arr: ArrId, index: &Expr) -> Result<Value, JitError> {
        let i = self.int(index)?;
        let off = self.layout.arrays[arr.0 as usize] as i64;
        let len = self.b.ins().load(types::I64, self.trusted, self.frame, off as i32);
        let bad = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, len);
        let (a, t) = (self.iconst(arr.0 as i64), self.thread_or_none());
        let z = self.iconst(0);
        let t = self.b.ins().smax(t, z);
        self.fail_if(bad, Fail::ArrayIndex, &[a, i, len, t]);
        Ok(self.flat_addr(off + 8, i, 8))
    }

    /// Run tile statement `s` in the runtime with its evaluated scalar operands.
    pub(super) fn host_tile(&mut self, s: &Stmt, args: &[Value]) {
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            8 * args.len().max(1) as u32,
            3,
        ));
        for (i, a) in args.iter().enumerate() {
            self.b.ins().stack_store(self.ptr, *a, slot, 8 * i as i32);
        }
        let p = self.b.ins().stack_addr(self.ptr, slot, 0);
        let sp = self.b.ins().iconst(self.ptr, s as *const Stmt as i64);
        let ptr = self.ptr;
        let r = self.call(rt::host_tile as *const u8, &[ptr, ptr, ptr], types::I32, &[self.ctx, sp, p]);
        let ok = self.b.create_block();
        self.b.ins().brif(r, self.ret1, &[], ok, &[]);
        self.b.switch_to_block(ok);
        self.b.seal_block(ok);
    }
}
