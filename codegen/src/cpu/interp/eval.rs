//! Expression evaluation: scalar, row, element and thread contexts.

use super::memory::V;
use super::{Block, InterpError, unary_f32};
use k3k_ir::*;

/// Element context of an expression evaluation: the element's tile-local coordinates.
#[derive(Clone, Copy)]
pub(super) struct At {
    pub(super) r: usize,
    pub(super) c: usize,
    pub(super) tile_cols: usize,
}

impl<'a> Block<'a> {
    /// Evaluate `e`; `at` is the current element (maps) or row (vector maps).
    pub(super) fn eval(&self, e: &Expr, at: Option<At>, tensors: &[HostTensor]) -> Result<V, InterpError> {
        Ok(match e {
            Expr::Int(v) => V::I(*v),
            Expr::Float(v) => V::F(*v as f32),
            Expr::Bool(v) => V::B(*v),
            Expr::Sym(s) => match self.syms[s.0 as usize] {
                SymValue::Int(v) => V::I(v),
                SymValue::Float(v) => V::F(v),
            },
            Expr::Var(v) => self.vars[v.0 as usize],
            Expr::Special(Special::BlockIdx(a)) => V::I(self.block[*a as usize] as i64),
            Expr::Special(Special::GridDim(a)) => V::I(self.grid[*a as usize] as i64),
            Expr::Special(Special::ThreadIdx) => V::I(self.thread.expect("validated: inside a region") as i64),
            Expr::Special(Special::LaneIdx) => V::I((self.thread.expect("validated: inside a region") % 32) as i64),
            Expr::Special(Special::WarpIdx) => V::I((self.thread.expect("validated: inside a region") / 32) as i64),
            Expr::Load { tensor, index } => {
                let i = self.eval(index, None, tensors)?.i();
                let i = self.global_index("scalar load", *tensor, i, tensors)?;
                let t = &tensors[tensor.0 as usize];
                if ScalarTy::of_dtype(t.dtype) == ScalarTy::Float { V::F(t.get_f32(i)) } else { V::I(t.get_i64(i)) }
            }
            Expr::SharedLoad { buf, index, row, col } => {
                let (index, row, col) = (
                    self.eval(index, at, tensors)?.i(),
                    self.eval(row, at, tensors)?.i(),
                    self.eval(col, at, tensors)?.i(),
                );
                let i = self.shared_element("load", *buf, index, row, col)?;
                self.shared[buf.0 as usize].get(i)
            }
            Expr::ArrayGet(a, index) => {
                let i = self.eval(index, at, tensors)?.i();
                let i = self.array_slot(*a, i)?;
                self.arrays[a.0 as usize][i]
            }
            Expr::Elem(t) => {
                let at = at.expect("validated: element context");
                let v = self.tiles[t.0 as usize][at.r * at.tile_cols + at.c];
                if self.k.tiles[t.0 as usize].dtype == DType::I32 { V::I(v as i64) } else { V::F(v as f32) }
            }
            Expr::RowVal(v) => V::F(self.vecs[v.0 as usize][at.expect("validated: row context").r]),
            Expr::RowIdx => V::I(at.expect("validated").r as i64),
            Expr::ColIdx => V::I(at.expect("validated").c as i64),
            Expr::Cast(ScalarTy::Float, a) => V::F(self.eval(a, at, tensors)?.f()),
            Expr::Cast(ScalarTy::Int, a) => V::I(self.eval(a, at, tensors)?.i()),
            Expr::Cast(ScalarTy::Bool, a) => self.eval(a, at, tensors)?,
            Expr::Select(c, a, b) => {
                if self.eval(c, at, tensors)?.b() {
                    self.eval(a, at, tensors)?
                } else {
                    self.eval(b, at, tensors)?
                }
            }
            Expr::Un(op, a) => {
                let a = self.eval(a, at, tensors)?;
                match (op, a) {
                    (UnOp::Neg, V::I(v)) => V::I(v.wrapping_neg()),
                    (UnOp::Neg, V::F(v)) => V::F(-v),
                    (UnOp::Abs, V::I(v)) => V::I(v.wrapping_abs()),
                    (UnOp::Abs, V::F(v)) => V::F(v.abs()),
                    (UnOp::Not, V::B(v)) => V::B(!v),
                    (UnOp::IsNan, V::F(v)) => V::B(v.is_nan()),
                    (UnOp::IsFinite, V::F(v)) => V::B(v.is_finite()),
                    (UnOp::Bits, V::F(v)) => V::I(v.to_bits() as i64),
                    (UnOp::FromBits, V::I(v)) => V::F(f32::from_bits(v as u32)),
                    (op, a) => V::F(unary_f32(*op, a.f())),
                }
            }
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.eval(a, at, tensors)?, self.eval(b, at, tensors)?);
                self.binary(*op, a, b)?
            }
        })
    }

    /// Check an index into the current thread's array.
    pub(super) fn array_slot(&self, a: ArrId, i: i64) -> Result<usize, InterpError> {
        let len = self.arrays[a.0 as usize].len();
        if i < 0 || i as usize >= len {
            return Err(InterpError::ArrayIndex {
                kernel: self.k.name.clone(),
                block: self.block,
                thread: self.thread.unwrap_or(0),
                array: self.k.arrays[a.0 as usize].name.clone(),
                index: i,
                len,
            });
        }
        Ok(i as usize)
    }

    fn binary(&self, op: BinOp, a: V, b: V) -> Result<V, InterpError> {
        use BinOp::*;
        Ok(match (a, b) {
            (V::I(x), V::I(y)) => match op {
                Add => V::I(x.wrapping_add(y)),
                Sub => V::I(x.wrapping_sub(y)),
                Mul => V::I(x.wrapping_mul(y)),
                Div => V::I(x.checked_div(y).ok_or_else(|| self.arith("integer division by zero"))?),
                Rem => V::I(x.checked_rem(y).ok_or_else(|| self.arith("integer remainder by zero"))?),
                Min => V::I(x.min(y)),
                Max => V::I(x.max(y)),
                Lt | Le | Gt | Ge | Eq | Ne => V::B(compare(op, x, y)),
                Shl => V::I(x.wrapping_shl(y as u32)),
                Shr => V::I(x.wrapping_shr(y as u32)),
                BitAnd => V::I(x & y),
                BitOr => V::I(x | y),
                BitXor => V::I(x ^ y),
                Fp4Pair => V::I(fp4::packed_pair_bits(x as u32, (y & 3) as usize) as i64),
                And | Or | Ldexp => unreachable!("validated"),
            },
            (V::F(x), V::I(n)) if op == Ldexp => V::F(ldexp(x, n)),
            (V::F(x), V::F(y)) => match op {
                Add => V::F(x + y),
                Sub => V::F(x - y),
                Mul => V::F(x * y),
                Div => V::F(x / y),
                Min => V::F(x.min(y)),
                Max => V::F(x.max(y)),
                Lt | Le | Gt | Ge | Eq | Ne => V::B(compare(op, x, y)),
                _ => unreachable!("validated"),
            },
            (V::B(x), V::B(y)) => match op {
                And => V::B(x && y),
                Or => V::B(x || y),
                Eq => V::B(x == y),
                Ne => V::B(x != y),
                _ => unreachable!("validated"),
            },
            _ => unreachable!("validated: operand types"),
        })
    }
}

/// A comparison `op` (`Lt`, `Le`, `Gt`, `Ge`, `Eq` or `Ne`) of two integers or two floats (IEEE: every comparison
/// with a NaN is false, but `Ne`).
fn compare<T: PartialOrd>(op: BinOp, x: T, y: T) -> bool {
    match op {
        BinOp::Lt => x < y,
        BinOp::Le => x <= y,
        BinOp::Gt => x > y,
        BinOp::Ge => x >= y,
        BinOp::Eq => x == y,
        BinOp::Ne => x != y,
        _ => unreachable!("not a comparison"),
    }
}

fn ldexp(x: f32, n: i64) -> f32 {
    let n = n.clamp(-400, 400) as i32;
    (x as f64 * 2f64.powi(n)) as f32
}
