//! Expressions: values, unary and binary operators.

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    pub(super) fn expr(&mut self, e: &Expr) -> Result<(Value, Ty), JitError> {
        let ty = self.types.ty(e)?;
        let v = match e {
            Expr::Int(v) => self.iconst(*v),
            Expr::Float(v) => self.b.ins().f32const(*v as f32),
            Expr::Bool(v) => self.b.ins().iconst(types::I8, *v as i64),
            Expr::Sym(s) => self.syms[s.0 as usize],
            Expr::Var(v) => self.b.use_var(self.vars[v.0 as usize]),
            Expr::Special(s) => match s {
                Special::BlockIdx(a) => self.block[*a as usize],
                Special::GridDim(a) => self.grid[*a as usize],
                Special::ThreadIdx | Special::LaneIdx | Special::WarpIdx => {
                    let t = self.thread.ok_or_else(|| unsupported("thread index outside a region"))?;
                    let t = self.b.use_var(t);
                    match s {
                        Special::ThreadIdx => t,
                        Special::LaneIdx => self.b.ins().band_imm_s(t, 31),
                        _ => self.b.ins().ushr_imm_u(t, 5),
                    }
                }
            },
            Expr::Load { tensor, index } => {
                let i = self.int(index)?;
                let i = self.check_index(*tensor, i, 0);
                match ty {
                    Ty::F => self.load_f32(*tensor, i),
                    _ => self.load_i64(*tensor, i),
                }
            }
            Expr::Cast(_, a) => {
                let (v, t) = self.expr(a)?;
                match ty {
                    Ty::F => self.as_float(v, t),
                    Ty::I => self.as_int(v, t),
                    Ty::B => v,
                }
            }
            Expr::Select(c, a, b) => {
                // Lazy, like the interpreter: only the chosen side runs (and may fail).
                let (c, _) = self.expr(c)?;
                let (tb, eb, join) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
                let r = self.b.append_block_param(join, ty.clif());
                self.b.ins().brif(c, tb, &[], eb, &[]);
                for (blk, side) in [(tb, a), (eb, b)] {
                    self.b.switch_to_block(blk);
                    self.b.seal_block(blk);
                    let (v, _) = self.expr(side)?;
                    self.b.ins().jump(join, &[v.into()]);
                }
                self.b.switch_to_block(join);
                self.b.seal_block(join);
                r
            }
            Expr::Un(op, a) => {
                let (x, t) = self.expr(a)?;
                self.unary(*op, x, t)
            }
            Expr::Bin(op, a, b) => {
                let (x, tx) = self.expr(a)?;
                let (y, _) = self.expr(b)?;
                self.binary(*op, x, tx, y)
            }
            Expr::SharedLoad { buf, index, row, col } => {
                let a = self.shared_element(*buf, index, row, col, 0)?;
                self.b.ins().load(ty.clif(), self.trusted, a, 0)
            }
            Expr::ArrayGet(arr, index) => {
                let a = self.array_slot(*arr, index)?;
                self.b.ins().load(ty.clif(), self.trusted, a, 0)
            }
            Expr::Elem(t) => {
                let (r, c, cols) = self.at.ok_or_else(|| unsupported("tile element outside a map"))?;
                let a = self.elem_addr(self.layout.tiles[t.0 as usize] as i64, r, c, cols, 4);
                if ty == Ty::I {
                    self.b.ins().sload32(self.trusted, a, 0)
                } else {
                    self.b.ins().load(types::F32, self.trusted, a, 0)
                }
            }
            Expr::RowVal(v) => {
                let (r, _, _) = self.at.ok_or_else(|| unsupported("row value outside a map"))?;
                let a = self.flat_addr(self.layout.vecs[v.0 as usize] as i64, r, 4);
                self.b.ins().load(types::F32, self.trusted, a, 0)
            }
            Expr::RowIdx => self.at.ok_or_else(|| unsupported("row index outside a map"))?.0,
            Expr::ColIdx => self.at.ok_or_else(|| unsupported("column index outside a map"))?.1,
            #[allow(unreachable_patterns)]
            _ => return Err(unsupported("expression")),
        };
        Ok((v, ty))
    }

    pub(super) fn unary(&mut self, op: UnOp, x: Value, t: Ty) -> Value {
        match (op, t) {
            (UnOp::RoundBf16, _) => {
                let x = self.as_float(x, t);
                self.round_to(DType::Bf16, x)
            }
            (UnOp::Neg, Ty::I) => self.b.ins().ineg(x),
            (UnOp::Neg, Ty::F) => self.b.ins().fneg(x),
            (UnOp::Abs, Ty::I) => self.b.ins().iabs(x),
            (UnOp::Abs, Ty::F) => self.b.ins().fabs(x),
            (UnOp::Not, _) => self.b.ins().bxor_imm_s(x, 1),
            (UnOp::IsNan, _) => self.b.ins().fcmp(FloatCC::Unordered, x, x),
            (UnOp::IsFinite, _) => {
                let a = self.b.ins().fabs(x);
                let inf = self.b.ins().f32const(f32::INFINITY);
                self.b.ins().fcmp(FloatCC::LessThan, a, inf)
            }
            (UnOp::Bits, _) => {
                let w = self.b.ins().bitcast(types::I32, self.plain, x);
                self.b.ins().uextend(types::I64, w)
            }
            (UnOp::FromBits, _) => {
                let w = self.b.ins().ireduce(types::I32, x);
                self.b.ins().bitcast(types::F32, self.plain, w)
            }
            (UnOp::Sqrt, _) => {
                let x = self.as_float(x, t);
                self.b.ins().sqrt(x)
            }
            (UnOp::Recip, _) => {
                let x = self.as_float(x, t);
                let one = self.b.ins().f32const(1.0);
                self.b.ins().fdiv(one, x)
            }
            (UnOp::Rsqrt, _) => {
                let x = self.as_float(x, t);
                let s = self.b.ins().sqrt(x);
                let one = self.b.ins().f32const(1.0);
                self.b.ins().fdiv(one, s)
            }
            _ => {
                let x = self.as_float(x, t);
                let code = UNOPS.iter().position(|o| *o == op).expect("every unary op is listed") as i64;
                let c = self.iconst(code);
                self.call(host_unary as *const u8, &[types::I64, types::F32], types::F32, &[c, x])
            }
        }
    }

    pub(super) fn binary(&mut self, op: BinOp, x: Value, tx: Ty, y: Value) -> Value {
        use BinOp::*;
        match tx {
            Ty::I if op != Ldexp => match op {
                Add => self.b.ins().iadd(x, y),
                Sub => self.b.ins().isub(x, y),
                Mul => self.b.ins().imul(x, y),
                Div | Rem => {
                    // checked_div / checked_rem: zero divisors and MIN / -1 fail.
                    let zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                    let min = self.b.ins().icmp_imm_s(IntCC::Equal, x, i64::MIN);
                    let m1 = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                    let ovf = self.b.ins().band(min, m1);
                    let bad = self.b.ins().bor(zero, ovf);
                    let (r, z) = (self.iconst((op == Rem) as i64), self.iconst(0));
                    self.fail_if(bad, Fail::DivZero, &[r, z, z]);
                    if op == Div { self.b.ins().sdiv(x, y) } else { self.b.ins().srem(x, y) }
                }
                Min => self.b.ins().smin(x, y),
                Max => self.b.ins().smax(x, y),
                Lt => self.b.ins().icmp(IntCC::SignedLessThan, x, y),
                Le => self.b.ins().icmp(IntCC::SignedLessThanOrEqual, x, y),
                Gt => self.b.ins().icmp(IntCC::SignedGreaterThan, x, y),
                Ge => self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, x, y),
                Eq => self.b.ins().icmp(IntCC::Equal, x, y),
                Ne => self.b.ins().icmp(IntCC::NotEqual, x, y),
                Shl => self.b.ins().ishl(x, y),
                Shr => self.b.ins().sshr(x, y),
                BitAnd => self.b.ins().band(x, y),
                BitOr => self.b.ins().bor(x, y),
                BitXor => self.b.ins().bxor(x, y),
                Fp4Pair => self.call(host_fp4_pair as *const u8, &[types::I64, types::I64], types::I64, &[x, y]),
                And | Or | Ldexp => unreachable!("typed"),
            },
            Ty::F if op == Ldexp => self.call(host_ldexp as *const u8, &[types::F32, types::I64], types::F32, &[x, y]),
            Ty::F => match op {
                Add => self.b.ins().fadd(x, y),
                Sub => self.b.ins().fsub(x, y),
                Mul => self.b.ins().fmul(x, y),
                Div => self.b.ins().fdiv(x, y),
                Min => self.call(host_min as *const u8, &[types::F32, types::F32], types::F32, &[x, y]),
                Max => self.call(host_max as *const u8, &[types::F32, types::F32], types::F32, &[x, y]),
                Lt => self.b.ins().fcmp(FloatCC::LessThan, x, y),
                Le => self.b.ins().fcmp(FloatCC::LessThanOrEqual, x, y),
                Gt => self.b.ins().fcmp(FloatCC::GreaterThan, x, y),
                Ge => self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, x, y),
                Eq => self.b.ins().fcmp(FloatCC::Equal, x, y),
                Ne => self.b.ins().fcmp(FloatCC::NotEqual, x, y),
                _ => unreachable!("typed"),
            },
            _ => match op {
                And => self.b.ins().band(x, y),
                Or => self.b.ins().bor(x, y),
                Eq => self.b.ins().icmp(IntCC::Equal, x, y),
                Ne => self.b.ins().icmp(IntCC::NotEqual, x, y),
                _ => unreachable!("typed"),
            },
        }
    }
}
