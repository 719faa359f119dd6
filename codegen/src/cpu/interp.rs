//! The reference semantics of the IR: a straightforward interpreter over logical tiles.
//!
//! Blocks run one after another; inside a block each statement runs to completion for the whole block, so
//! asynchronous copies are immediate and barriers are no-ops. Tiles hold logical row-major values (a bf16 tile
//! holds f32 values rounded to bf16, as its registers would). Every global access is bounds-checked: an index
//! outside a tensor is an error here, where a GPU would read garbage or fault.

use half::{bf16, f16};
use k3k_ir::*;

/// Why a CPU run failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InterpError {
    #[error(transparent)]
    Ir(#[from] IrError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("kernel `{kernel}`, block {block:?}: {what} index {index} is outside tensor `{tensor}` of {len} elements")]
    OutOfBounds { kernel: String, block: [u32; 3], what: &'static str, tensor: String, index: i64, len: usize },
    #[error("kernel `{kernel}`, block {block:?}: shared `{buf}` tile index {index} is outside 0..{count}")]
    SharedIndex { kernel: String, block: [u32; 3], buf: String, index: i64, count: u32 },
    #[error("kernel `{kernel}`: {what}")]
    Arith { kernel: String, what: String },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum V {
    I(i64),
    F(f32),
    B(bool),
}

impl V {
    fn i(self) -> i64 {
        match self {
            V::I(v) => v,
            V::F(v) => v as i64,
            V::B(v) => v as i64,
        }
    }
    fn f(self) -> f32 {
        match self {
            V::F(v) => v,
            V::I(v) => v as f32,
            V::B(v) => v as i64 as f32,
        }
    }
    fn b(self) -> bool {
        match self {
            V::B(v) => v,
            _ => panic!("validated: bool expected"),
        }
    }
}

/// Round to what a register or shared element of `dtype` keeps.
fn round_to(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::Bf16 => bf16::from_f32(v).to_f32(),
        DType::F16 => f16::from_f32(v).to_f32(),
        _ => v,
    }
}

struct Block<'a> {
    k: &'a Kernel,
    syms: &'a [SymValue],
    block: [u32; 3],
    grid: [u32; 3],
    vars: Vec<V>,
    tiles: Vec<Vec<f64>>,
    vecs: Vec<Vec<f32>>,
    shared: Vec<Vec<f64>>,
}

/// Options of a CPU run.
#[derive(Clone, Copy, Debug)]
pub struct InterpOptions {
    /// The value given to a `NUM_SMS` symbol (persistent grids).
    pub num_sms: i64,
}

impl Default for InterpOptions {
    fn default() -> Self {
        InterpOptions { num_sms: 4 }
    }
}

/// Run a kernel on host tensors (in kernel argument order); outputs are written in place.
pub fn run(
    k: &Kernel,
    tensors: &mut [HostTensor],
    scalars: &[(&str, SymValue)],
    opts: InterpOptions,
) -> Result<(), InterpError> {
    validate(k)?;
    let shapes: Vec<TensorShape<'_>> =
        tensors.iter().map(|t| TensorShape { dtype: t.dtype, shape: &t.shape }).collect();
    let syms = bind(k, &shapes, scalars, opts.num_sms)?;
    let Some(grid) = eval_grid(k, &syms)? else { return Ok(()) };
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                let mut b = Block {
                    k,
                    syms: &syms,
                    block: [x, y, z],
                    grid,
                    vars: vec![V::I(0); k.vars.len()],
                    tiles: k.tiles.iter().map(|t| vec![0.0; (t.rows * t.cols) as usize]).collect(),
                    vecs: k.vecs.iter().map(|v| vec![0.0; v.rows as usize]).collect(),
                    shared: k.shared.iter().map(|s| vec![0.0; (s.rows * s.cols * s.count) as usize]).collect(),
                };
                b.body(&k.body, tensors)?;
            }
        }
    }
    Ok(())
}

/// Element context of an expression evaluation.
#[derive(Clone, Copy)]
struct At {
    r: usize,
    c: usize,
    tile_cols: usize,
}

impl<'a> Block<'a> {
    fn oob(&self, what: &'static str, t: TensorId, index: i64, len: usize) -> InterpError {
        InterpError::OutOfBounds {
            kernel: self.k.name.clone(),
            block: self.block,
            what,
            tensor: self.k.tensors[t.0 as usize].name.clone(),
            index,
            len,
        }
    }

    fn eval(&self, e: &Expr, at: Option<At>, tensors: &[HostTensor]) -> Result<V, InterpError> {
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
            Expr::Load { tensor, index } => {
                let i = self.eval(index, None, tensors)?.i();
                let t = &tensors[tensor.0 as usize];
                if i < 0 || i as usize >= t.len() {
                    return Err(self.oob("scalar load", *tensor, i, t.len()));
                }
                if ScalarTy::of_dtype(t.dtype) == ScalarTy::Float {
                    V::F(t.get_f32(i as usize))
                } else {
                    V::I(t.get_i64(i as usize))
                }
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
                    (UnOp::Neg, V::I(v)) => V::I(-v),
                    (UnOp::Neg, V::F(v)) => V::F(-v),
                    (UnOp::Abs, V::I(v)) => V::I(v.abs()),
                    (UnOp::Abs, V::F(v)) => V::F(v.abs()),
                    (UnOp::Not, V::B(v)) => V::B(!v),
                    (UnOp::IsNan, V::F(v)) => V::B(v.is_nan()),
                    (UnOp::IsFinite, V::F(v)) => V::B(v.is_finite()),
                    (op, a) => V::F(unary_f32(*op, a.f())),
                }
            }
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.eval(a, at, tensors)?, self.eval(b, at, tensors)?);
                self.binary(*op, a, b)?
            }
        })
    }

    fn binary(&self, op: BinOp, a: V, b: V) -> Result<V, InterpError> {
        use BinOp::*;
        let arith = |what: &str| InterpError::Arith { kernel: self.k.name.clone(), what: what.into() };
        Ok(match (a, b) {
            (V::I(x), V::I(y)) => match op {
                Add => V::I(x.wrapping_add(y)),
                Sub => V::I(x.wrapping_sub(y)),
                Mul => V::I(x.wrapping_mul(y)),
                Div => V::I(x.checked_div(y).ok_or_else(|| arith("integer division by zero"))?),
                Rem => V::I(x.checked_rem(y).ok_or_else(|| arith("integer remainder by zero"))?),
                Min => V::I(x.min(y)),
                Max => V::I(x.max(y)),
                Lt => V::B(x < y),
                Le => V::B(x <= y),
                Gt => V::B(x > y),
                Ge => V::B(x >= y),
                Eq => V::B(x == y),
                Ne => V::B(x != y),
                Shl => V::I(x.wrapping_shl(y as u32)),
                Shr => V::I(x.wrapping_shr(y as u32)),
                BitAnd => V::I(x & y),
                BitOr => V::I(x | y),
                BitXor => V::I(x ^ y),
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
                Lt => V::B(x < y),
                Le => V::B(x <= y),
                Gt => V::B(x > y),
                Ge => V::B(x >= y),
                Eq => V::B(x == y),
                Ne => V::B(x != y),
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

    fn int(&self, e: &Expr, tensors: &[HostTensor]) -> Result<i64, InterpError> {
        Ok(self.eval(e, None, tensors)?.i())
    }

    fn shared_base(&self, r: &SharedRef, tensors: &[HostTensor]) -> Result<usize, InterpError> {
        let d = &self.k.shared[r.buf.0 as usize];
        let i = self.int(&r.index, tensors)?;
        if i < 0 || i >= d.count as i64 {
            return Err(InterpError::SharedIndex {
                kernel: self.k.name.clone(),
                block: self.block,
                buf: d.name.clone(),
                index: i,
                count: d.count,
            });
        }
        Ok(i as usize * (d.rows * d.cols) as usize)
    }

    /// Read logical element (r, c) of a shared window.
    fn shared_at(&self, r: &SharedRef, base: usize, row: usize, col: usize) -> f64 {
        let d = &self.k.shared[r.buf.0 as usize];
        self.shared[r.buf.0 as usize][base + (r.row0 as usize + row) * d.cols as usize + r.col0 as usize + col]
    }

    fn body(&mut self, body: &[Stmt], tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        for s in body {
            self.stmt(s, tensors)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt, tensors: &mut [HostTensor]) -> Result<(), InterpError> {
        let k = self.k;
        match s {
            Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                self.vars[var.0 as usize] = self.eval(value, None, tensors)?;
            }
            Stmt::For { var, start, end, step, body, .. } => {
                let (mut i, e, st) = (self.int(start, tensors)?, self.int(end, tensors)?, self.int(step, tensors)?);
                if st <= 0 {
                    return Err(InterpError::Arith { kernel: k.name.clone(), what: format!("loop step {st} <= 0") });
                }
                while i < e {
                    self.vars[var.0 as usize] = V::I(i);
                    self.body(body, tensors)?;
                    i += st;
                }
            }
            Stmt::If { cond, then_body, else_body } => {
                if self.eval(cond, None, tensors)?.b() {
                    self.body(then_body, tensors)?;
                } else {
                    self.body(else_body, tensors)?;
                }
            }
            Stmt::Barrier | Stmt::AsyncCommit | Stmt::AsyncWait { .. } => {}
            Stmt::Map { tile, value } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let mut out = vec![0.0f64; rows * cols];
                for r in 0..rows {
                    for c in 0..cols {
                        let v = self.eval(value, Some(At { r, c, tile_cols: cols }), tensors)?;
                        out[r * cols + c] = match d.dtype {
                            DType::I32 => v.i() as i32 as f64,
                            dt => round_to(dt, v.f()) as f64,
                        };
                    }
                }
                self.tiles[tile.0 as usize] = out;
            }
            Stmt::VecMap { vec, value } => {
                let rows = k.vecs[vec.0 as usize].rows as usize;
                let mut out = vec![0.0f32; rows];
                for (r, o) in out.iter_mut().enumerate() {
                    *o = self.eval(value, Some(At { r, c: 0, tile_cols: 0 }), tensors)?.f();
                }
                self.vecs[vec.0 as usize] = out;
            }
            Stmt::Reduce { vec, tile, op, accumulate } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                for r in 0..rows {
                    let row = &self.tiles[tile.0 as usize][r * cols..(r + 1) * cols];
                    let mut a = row[0] as f32;
                    for &v in &row[1..] {
                        a = reduce(*op, a, v as f32);
                    }
                    let slot = &mut self.vecs[vec.0 as usize][r];
                    *slot = if *accumulate { reduce(*op, *slot, a) } else { a };
                }
            }
            Stmt::Mma { acc, a, b } => self.mma(*acc, a, b, tensors)?,
            Stmt::CopyAsync { dst, src } => {
                let base = self.shared_base(dst, tensors)?;
                let d = &k.shared[dst.buf.0 as usize];
                let (off, stride, rows, cols) = (
                    self.int(&src.offset, tensors)?,
                    self.int(&src.row_stride, tensors)?,
                    self.int(&src.rows, tensors)?,
                    self.int(&src.cols, tensors)?,
                );
                let t = &tensors[src.tensor.0 as usize];
                for r in 0..dst.rows as usize {
                    for c in 0..dst.cols as usize {
                        let v = if (r as i64) < rows && (c as i64) < cols {
                            let i = off + r as i64 * stride + c as i64;
                            if i < 0 || i as usize >= t.len() {
                                return Err(self.oob("async copy", src.tensor, i, t.len()));
                            }
                            if d.dtype.is_int() { t.get_i64(i as usize) as f64 } else { t.get_f32(i as usize) as f64 }
                        } else {
                            0.0
                        };
                        self.shared[dst.buf.0 as usize]
                            [base + (dst.row0 as usize + r) * d.cols as usize + dst.col0 as usize + c] = v;
                    }
                }
            }
            Stmt::Load { tile, src } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                let mut out = vec![0.0f64; rows * cols];
                match src {
                    Place::Shared(r) => {
                        let base = self.shared_base(r, tensors)?;
                        for i in 0..rows {
                            for j in 0..cols {
                                out[i * cols + j] = self.shared_at(r, base, i, j);
                            }
                        }
                    }
                    Place::Global(v) => {
                        let (off, stride, vr, vc) = (
                            self.int(&v.offset, tensors)?,
                            self.int(&v.row_stride, tensors)?,
                            self.int(&v.rows, tensors)?,
                            self.int(&v.cols, tensors)?,
                        );
                        let t = &tensors[v.tensor.0 as usize];
                        for i in 0..rows {
                            for j in 0..cols {
                                if (i as i64) < vr && (j as i64) < vc {
                                    let idx = off + i as i64 * stride + j as i64;
                                    if idx < 0 || idx as usize >= t.len() {
                                        return Err(self.oob("tile load", v.tensor, idx, t.len()));
                                    }
                                    out[i * cols + j] = if d.dtype == DType::I32 {
                                        t.get_i64(idx as usize) as f64
                                    } else {
                                        t.get_f32(idx as usize) as f64
                                    };
                                }
                            }
                        }
                    }
                }
                for v in out.iter_mut() {
                    *v = match d.dtype {
                        DType::I32 => *v as i64 as i32 as f64,
                        dt => round_to(dt, *v as f32) as f64,
                    };
                }
                self.tiles[tile.0 as usize] = out;
            }
            Stmt::Store { tile, dst } => {
                let d = &k.tiles[tile.0 as usize];
                let (rows, cols) = (d.rows as usize, d.cols as usize);
                match dst {
                    Place::Shared(r) => {
                        let base = self.shared_base(r, tensors)?;
                        let sd = &k.shared[r.buf.0 as usize];
                        for i in 0..rows {
                            for j in 0..cols {
                                let v = self.tiles[tile.0 as usize][i * cols + j];
                                let v = if sd.dtype.is_int() { v } else { round_to(sd.dtype, v as f32) as f64 };
                                self.shared[r.buf.0 as usize]
                                    [base + (r.row0 as usize + i) * sd.cols as usize + r.col0 as usize + j] = v;
                            }
                        }
                    }
                    Place::Global(v) => {
                        let (off, stride, vr, vc) = (
                            self.int(&v.offset, tensors)?,
                            self.int(&v.row_stride, tensors)?,
                            self.int(&v.rows, tensors)?,
                            self.int(&v.cols, tensors)?,
                        );
                        for i in 0..rows.min(vr.max(0) as usize) {
                            for j in 0..cols.min(vc.max(0) as usize) {
                                let idx = off + i as i64 * stride + j as i64;
                                let len = tensors[v.tensor.0 as usize].len();
                                if idx < 0 || idx as usize >= len {
                                    return Err(self.oob("tile store", v.tensor, idx, len));
                                }
                                let val = self.tiles[tile.0 as usize][i * cols + j];
                                let t = &mut tensors[v.tensor.0 as usize];
                                if d.dtype == DType::I32 {
                                    t.set_i64(idx as usize, val as i64);
                                } else {
                                    t.set_f32(idx as usize, val as f32);
                                }
                            }
                        }
                    }
                }
            }
            Stmt::LoadVec { vec, src } => {
                let (off, stride, vr) =
                    (self.int(&src.offset, tensors)?, self.int(&src.stride, tensors)?, self.int(&src.rows, tensors)?);
                let rows = k.vecs[vec.0 as usize].rows as usize;
                let t = &tensors[src.tensor.0 as usize];
                for r in 0..rows {
                    self.vecs[vec.0 as usize][r] = if (r as i64) < vr {
                        let i = off + r as i64 * stride;
                        if i < 0 || i as usize >= t.len() {
                            return Err(self.oob("vector load", src.tensor, i, t.len()));
                        }
                        t.get_f32(i as usize)
                    } else {
                        0.0
                    };
                }
            }
            Stmt::StoreVec { vec, dst } => {
                let (off, stride, vr) =
                    (self.int(&dst.offset, tensors)?, self.int(&dst.stride, tensors)?, self.int(&dst.rows, tensors)?);
                let rows = k.vecs[vec.0 as usize].rows as usize;
                for r in 0..rows.min(vr.max(0) as usize) {
                    let i = off + r as i64 * stride;
                    let len = tensors[dst.tensor.0 as usize].len();
                    if i < 0 || i as usize >= len {
                        return Err(self.oob("vector store", dst.tensor, i, len));
                    }
                    let v = self.vecs[vec.0 as usize][r];
                    tensors[dst.tensor.0 as usize].set_f32(i as usize, v);
                }
            }
        }
        Ok(())
    }

    /// Logical element (i, j) of an operand (after its transpose).
    fn operand(&self, o: &Operand, tensors: &[HostTensor]) -> Result<(usize, usize, Vec<f64>), InterpError> {
        Ok(match o {
            Operand::Reg(t) => {
                let d = &self.k.tiles[t.0 as usize];
                (d.rows as usize, d.cols as usize, self.tiles[t.0 as usize].clone())
            }
            Operand::Shared { src, transpose } => {
                let base = self.shared_base(src, tensors)?;
                let (wr, wc) = (src.rows as usize, src.cols as usize);
                let (r, c) = if *transpose { (wc, wr) } else { (wr, wc) };
                let mut m = vec![0.0; r * c];
                for i in 0..r {
                    for j in 0..c {
                        m[i * c + j] =
                            if *transpose { self.shared_at(src, base, j, i) } else { self.shared_at(src, base, i, j) };
                    }
                }
                (r, c, m)
            }
        })
    }

    fn mma(&mut self, acc: TileId, a: &Operand, b: &Operand, tensors: &[HostTensor]) -> Result<(), InterpError> {
        let (m, kd, av) = self.operand(a, tensors)?;
        let (_, n, bv) = self.operand(b, tensors)?;
        let accv = &mut self.tiles[acc.0 as usize];
        for i in 0..m {
            for j in 0..n {
                // Products of bf16/f16 values are exact in f32; the tensor core sums in f32.
                let mut s = accv[i * n + j] as f32;
                for p in 0..kd {
                    s += (av[i * kd + p] as f32) * (bv[p * n + j] as f32);
                }
                accv[i * n + j] = s as f64;
            }
        }
        Ok(())
    }
}

fn reduce(op: ReduceOp, a: f32, b: f32) -> f32 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

fn ldexp(x: f32, n: i64) -> f32 {
    let n = n.clamp(-400, 400) as i32;
    (x as f64 * 2f64.powi(n)) as f32
}

/// The f32 semantics of the float unary operators (what the prelude computes).
pub fn unary_f32(op: UnOp, x: f32) -> f32 {
    match op {
        UnOp::Exp => x.exp(),
        UnOp::Exp2 => x.exp2(),
        UnOp::Log => x.ln(),
        UnOp::Log2 => x.log2(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Rsqrt => 1.0 / x.sqrt(),
        UnOp::Recip => 1.0 / x,
        UnOp::Tanh => x.tanh(),
        UnOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnOp::Softplus => {
            if x > 20.0 {
                x
            } else {
                x.exp().ln_1p()
            }
        }
        UnOp::Silu => x / (1.0 + (-x).exp()),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::RoundBf16 => bf16::from_f32(x).to_f32(),
        UnOp::Ilogb => {
            if x == 0.0 || !x.is_finite() {
                f32::NAN
            } else {
                let b = x.abs().to_bits();
                let e = (b >> 23) as i32;
                if e == 0 { (-118 - b.leading_zeros() as i32) as f32 } else { (e - 127) as f32 }
            }
        }
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Not | UnOp::IsNan | UnOp::IsFinite => unreachable!("not a float -> float op"),
    }
}
