//! IR -> Cranelift IR for the statements and expressions the JIT covers (see the module docs of `jit`).

use super::rt::{self, Layout};
use super::{Ctx, JitError, TensorRef};
use crate::cpu::interp::{InterpError, unary_f32};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    AbiParam, Block, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind, Type, Value, types,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};
use k3k_ir::*;
use std::mem::offset_of;

/// Failure codes written to `Ctx::err[0]`.
#[derive(Clone, Copy)]
enum Fail {
    /// A global access out of bounds: (tensor, index, what).
    OutOfBounds = 1,
    /// Integer division or remainder by zero (or overflow): (is_rem, 0, 0).
    DivZero = 2,
    /// A loop step <= 0: (step, 0, 0).
    Step = 3,
    /// A shared tile index outside its buffer: (buf, index).
    SharedIndex = 4,
    /// A shared element outside its buffer: (what, buf, index, row, col, thread or -1).
    SharedElement = 5,
    /// An array index outside the array: (array, index, len, thread).
    ArrayIndex = 6,
    /// A wide access whose index is not a multiple of its lanes: (tensor, index, lanes, what, thread).
    Misaligned = 7,
}

const WHAT: [&str; 5] = ["scalar load", "scalar store", "atomic", "wide load", "wide store"];
const SHARED_WHAT: [&str; 3] = ["load", "store", "atomic"];

/// The interpreter's error for a failed block.
pub(super) fn error(k: &Kernel, block: [u32; 3], err: &[i64; 8], tensors: &[HostTensor]) -> InterpError {
    let arith = |what: String| InterpError::Arith { kernel: k.name.clone(), what };
    match err[0] {
        1 => InterpError::OutOfBounds {
            kernel: k.name.clone(),
            block,
            what: WHAT[err[3] as usize],
            tensor: k.tensors[err[1] as usize].name.clone(),
            index: err[2],
            len: tensors[err[1] as usize].len(),
        },
        2 => arith(if err[1] == 1 { "integer remainder by zero" } else { "integer division by zero" }.into()),
        3 => arith(format!("loop step {} <= 0", err[1])),
        4 => {
            let d = &k.shared[err[1] as usize];
            InterpError::SharedIndex {
                kernel: k.name.clone(),
                block,
                buf: d.name.clone(),
                index: err[2],
                count: d.count,
            }
        }
        5 => {
            let d = &k.shared[err[2] as usize];
            InterpError::SharedElement {
                kernel: k.name.clone(),
                block,
                thread: (err[6] >= 0).then_some(err[6] as u32),
                what: SHARED_WHAT[err[1] as usize],
                buf: d.name.clone(),
                index: err[3],
                row: err[4],
                col: err[5],
                count: d.count,
                rows: d.rows,
                cols: d.cols,
            }
        }
        6 => InterpError::ArrayIndex {
            kernel: k.name.clone(),
            block,
            thread: err[4] as u32,
            array: k.arrays[err[1] as usize].name.clone(),
            index: err[2],
            len: err[3] as usize,
        },
        7 => InterpError::Misaligned {
            kernel: k.name.clone(),
            block,
            thread: err[5] as u32,
            what: WHAT[err[4] as usize],
            tensor: k.tensors[err[1] as usize].name.clone(),
            index: err[2],
            lanes: err[3] as u32,
        },
        c => arith(format!("JIT failure code {c}")),
    }
}

/// Static type of an expression value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    I,
    F,
    B,
}

impl Ty {
    fn clif(self) -> Type {
        match self {
            Ty::I => types::I64,
            Ty::F => types::F32,
            Ty::B => types::I8,
        }
    }
}

/// A start, end or step of a counted loop (see `Lower::counted_loop`): a value, or a constant.
#[derive(Clone, Copy)]
enum Bound {
    Value(Value),
    Const(i64),
}

fn unsupported(what: impl Into<String>) -> JitError {
    JitError::Unsupported(what.into())
}

/// Types of the variables (from their `Let`s and loops), checking every statement and expression is lowered.
struct Types<'a> {
    k: &'a Kernel,
    vars: Vec<Option<Ty>>,
    /// Element type and length of each array (from its `LetArray`s, which must agree).
    arrays: Vec<Option<(ScalarTy, u32)>>,
}

fn scalar_ty(t: ScalarTy) -> Ty {
    match t {
        ScalarTy::Int => Ty::I,
        ScalarTy::Float => Ty::F,
        ScalarTy::Bool => Ty::B,
    }
}

impl<'a> Types<'a> {
    fn new(k: &'a Kernel) -> Result<Self, JitError> {
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
    fn window(&self, r: &SharedRef, bands: u32) -> Result<(), JitError> {
        self.ty(&r.index)?;
        let d = self.k.shared.get(r.buf.0 as usize).ok_or_else(|| unsupported("no such shared buffer"))?;
        if r.row0 + bands * r.rows > d.rows || r.col0 + r.cols > d.cols {
            return Err(unsupported(format!("shared window outside `{}`", d.name)));
        }
        Ok(())
    }

    fn operand(&self, acc: TileId, o: &Operand) -> Result<(), JitError> {
        match o {
            Operand::Reg(_) => Ok(()),
            Operand::Shared { src, .. } => self.window(src, 1),
            Operand::Banded { src, .. } => self.window(src, self.k.tiles[acc.0 as usize].warps[0]),
        }
    }

    fn global_view(&self, v: &GlobalView) -> Result<(), JitError> {
        for e in [&v.offset, &v.row_stride, &v.rows, &v.cols] {
            self.ty(e)?;
        }
        Ok(())
    }

    /// The tile moved to or from a place, with shapes that match (the runtime loops over the tile's).
    fn place(&self, tile: TileId, p: &Place, store: bool) -> Result<(), JitError> {
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

    fn set_var(&mut self, v: VarId, ty: Ty) -> Result<(), JitError> {
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

    fn stmts(&mut self, body: &[Stmt]) -> Result<(), JitError> {
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
                Stmt::Barrier | Stmt::AsyncCommit | Stmt::AsyncWait { .. } | Stmt::MmaWait { .. } | Stmt::Fence => {}
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
                Stmt::Fp4Gemv { out, words, scales, x, .. } => {
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
                Stmt::LoadWide { arr, index, .. } | Stmt::StoreWide { arr, index, .. } => {
                    self.ty(index)?;
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

    fn ty(&self, e: &Expr) -> Result<Ty, JitError> {
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

fn stmt_name(s: &Stmt) -> &'static str {
    match s {
        Stmt::Map { .. } => "map",
        Stmt::VecMap { .. } => "vec_map",
        Stmt::Reduce { .. } => "reduce",
        Stmt::Mma { .. } => "mma",
        Stmt::MmaAsync { .. } => "mma_async",
        Stmt::CopyAsync { .. } => "copy_async",
        Stmt::Load { .. } => "tile load",
        Stmt::Store { .. } => "tile store",
        Stmt::StoreCols { .. } => "tile column store",
        Stmt::TmaStore(_) => "tma_store",
        Stmt::LoadVec { .. } => "load_vec",
        Stmt::StoreVec { .. } => "store_vec",
        Stmt::Scan { .. } => "scan",
        Stmt::DequantFp4 { .. } => "dequant_fp4",
        Stmt::DequantFp4Stream { .. } => "dequant_fp4_stream",
        Stmt::Fp4Gemv { .. } => "fp4_gemv",
        Stmt::WarpShuffle { .. } => "warp_shuffle",
        Stmt::WarpSync => "warp_sync",
        Stmt::Fence => "fence",
        Stmt::SharedStore { .. } => "shared store",
        Stmt::Atomic { .. } => "atomic",
        Stmt::LetArray { .. } => "let_array",
        Stmt::ArraySet { .. } => "array_set",
        Stmt::LoadWide { .. } => "load_wide",
        Stmt::StoreWide { .. } => "store_wide",
        _ => "statement",
    }
}

/// Check that the JIT lowers every statement and expression of a kernel.
pub(super) fn check(k: &Kernel) -> Result<(), JitError> {
    Types::new(k).map(|_| ())
}

// ---- host functions (the interpreter's own float semantics) ----

const UNOPS: [UnOp; 25] = [
    UnOp::Neg,
    UnOp::Not,
    UnOp::Abs,
    UnOp::Exp,
    UnOp::Exp2,
    UnOp::Log,
    UnOp::Log2,
    UnOp::Sqrt,
    UnOp::Rsqrt,
    UnOp::Recip,
    UnOp::Tanh,
    UnOp::Sigmoid,
    UnOp::Softplus,
    UnOp::Silu,
    UnOp::Floor,
    UnOp::Ceil,
    UnOp::IsNan,
    UnOp::IsFinite,
    UnOp::RoundBf16,
    UnOp::Ilogb,
    UnOp::Bits,
    UnOp::FromBits,
    UnOp::Trunc,
    UnOp::Round,
    UnOp::Exp2Ftz,
];

extern "C" fn host_unary(op: i64, x: f32) -> f32 {
    unary_f32(UNOPS[op as usize], x)
}
extern "C" fn host_min(a: f32, b: f32) -> f32 {
    a.min(b)
}
extern "C" fn host_max(a: f32, b: f32) -> f32 {
    a.max(b)
}
extern "C" fn host_fp4_pair(word: i64, f: i64) -> i64 {
    fp4::packed_pair_bits(word as u32, (f & 3) as usize) as i64
}
extern "C" fn host_ldexp(x: f32, n: i64) -> f32 {
    let n = n.clamp(-400, 400) as i32;
    (x as f64 * 2f64.powi(n)) as f32
}
extern "C" fn host_f16_to_f32(b: i64) -> f32 {
    half::f16::from_bits(b as u16).to_f32()
}
extern "C" fn host_e4m3_to_f32(b: i64) -> f32 {
    k3k_ir::tensor::e4m3_to_f32(b as u8)
}
extern "C" fn host_e8m0_to_f32(b: i64) -> f32 {
    k3k_ir::tensor::e8m0_to_f32(b as u8)
}
extern "C" fn host_f32_to_f16(x: f32) -> i64 {
    half::f16::from_f32(x).to_bits() as i64
}
extern "C" fn host_f32_to_e4m3(x: f32) -> i64 {
    k3k_ir::tensor::f32_to_e4m3(x) as i64
}

/// Define the kernel's block function `fn(*mut Ctx) -> i32` in the module.
pub(super) fn define(module: &mut JITModule, k: &Kernel) -> Result<(FuncId, Layout), JitError> {
    let types = Types::new(k)?;
    let layout = Layout::new(k, &types.arrays);
    let ptr = module.target_config().pointer_type();
    let mut ctx = module.make_context();
    ctx.func.signature.params.push(AbiParam::new(ptr));
    ctx.func.signature.returns.push(AbiParam::new(types::I32));
    let frontend = module.target_config();
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let ctx_ptr = b.block_params(entry)[0];
        let fail = b.create_block();
        for _ in 0..7 {
            b.append_block_param(fail, types::I64);
        }
        let ret1 = b.create_block();
        let mut l = Lower::new(k, b, ptr, ctx_ptr, [fail, ret1], &types, &layout);
        l.stmts(&k.body)?;
        let zero = l.b.ins().iconst(types::I32, 0);
        l.b.ins().return_(&[zero]);
        // A runtime function failed (its error is in the context): return 1.
        l.b.switch_to_block(ret1);
        let one = l.b.ins().iconst(types::I32, 1);
        l.b.ins().return_(&[one]);
        // The failure exit: record the code and operands, return 1.
        l.b.switch_to_block(fail);
        let ps = l.b.block_params(fail).to_vec();
        for (i, p) in ps.iter().enumerate() {
            let off = (offset_of!(Ctx, err) + 8 * i) as i32;
            l.b.ins().store(l.trusted, *p, ctx_ptr, off);
        }
        let one = l.b.ins().iconst(types::I32, 1);
        l.b.ins().return_(&[one]);
        l.b.seal_all_blocks();
        l.b.finalize(frontend);
    }
    let name = format!("k3k_jit_{}", stable_hash(k));
    let id = module
        .declare_function(&name, Linkage::Local, &ctx.func.signature)
        .map_err(|e| JitError::Cranelift(e.to_string()))?;
    module.define_function(id, &mut ctx).map_err(|e| JitError::Cranelift(format!("{e:?}")))?;
    module.clear_context(&mut ctx);
    Ok((id, layout))
}

struct Lower<'a, 'f> {
    k: &'a Kernel,
    b: FunctionBuilder<'f>,
    ptr: Type,
    fail: Block,
    types: &'a Types<'a>,
    vars: Vec<Variable>,
    /// (data pointer, element count) of each tensor.
    tensors: Vec<(Value, Value)>,
    syms: Vec<Value>,
    block: Vec<Value>,
    grid: Vec<Value>,
    /// The thread index variable inside a region.
    thread: Option<Variable>,
    /// Memory flags: plain (tensor data, unaligned) and trusted (the context).
    plain: MemFlagsData,
    trusted: MemFlagsData,
    /// The context and the block's frame.
    ctx: Value,
    frame: Value,
    layout: &'a Layout,
    /// Returns 1 (a runtime function's error is in the context).
    ret1: Block,
    /// Inside a map: the element's row and column, and the mapped tile's column count (0 in a vector map).
    at: Option<(Value, Value, i64)>,
}

impl<'a, 'f> Lower<'a, 'f> {
    fn new(
        k: &'a Kernel,
        mut b: FunctionBuilder<'f>,
        ptr: Type,
        ctx: Value,
        [fail, ret1]: [Block; 2],
        types: &'a Types<'a>,
        layout: &'a Layout,
    ) -> Self {
        let flags = MemFlagsData::trusted();
        let plain = MemFlagsData::new();
        let tref = b.ins().load(ptr, flags, ctx, offset_of!(Ctx, tensors) as i32);
        let tensors = (0..k.tensors.len())
            .map(|i| {
                let base = (i * size_of::<TensorRef>()) as i32;
                let p = b.ins().load(ptr, flags, tref, base + offset_of!(TensorRef, ptr) as i32);
                let n = b.ins().load(types::I64, flags, tref, base + offset_of!(TensorRef, len) as i32);
                (p, n)
            })
            .collect();
        let sp = b.ins().load(ptr, flags, ctx, offset_of!(Ctx, syms) as i32);
        let syms = (0..k.syms.len())
            .map(|i| {
                let v = b.ins().load(types::I64, flags, sp, 8 * i as i32);
                if k.syms[i].kind == SymKind::Float {
                    let low = b.ins().ireduce(types::I32, v);
                    b.ins().bitcast(types::F32, plain, low)
                } else {
                    v
                }
            })
            .collect();
        let block =
            (0..3).map(|i| b.ins().load(types::I64, flags, ctx, (offset_of!(Ctx, block) + 8 * i) as i32)).collect();
        let grid =
            (0..3).map(|i| b.ins().load(types::I64, flags, ctx, (offset_of!(Ctx, grid) + 8 * i) as i32)).collect();
        // Every variable starts as 0 of its type (the interpreter starts them at int 0; programs set them first).
        let vars = types
            .vars
            .iter()
            .map(|t| {
                let t = t.unwrap_or(Ty::I);
                let v = b.declare_var(t.clif());
                let z = match t {
                    Ty::F => b.ins().f32const(0.0),
                    t => b.ins().iconst(t.clif(), 0),
                };
                b.def_var(v, z);
                v
            })
            .collect();
        let frame = b.ins().load(ptr, flags, ctx, offset_of!(Ctx, frame) as i32);
        Lower {
            k,
            b,
            ptr,
            fail,
            types,
            vars,
            tensors,
            syms,
            block,
            grid,
            thread: None,
            plain,
            trusted: flags,
            ctx,
            frame,
            layout,
            ret1,
            at: None,
        }
    }

    fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(types::I64, v)
    }

    /// Branch to the failure exit when `bad` (an i8 bool) holds.
    fn fail_if(&mut self, bad: Value, code: Fail, ops: &[Value]) {
        let ok = self.b.create_block();
        let c = self.iconst(code as i64);
        let z = self.iconst(0);
        let args: Vec<_> =
            std::iter::once(c).chain(ops.iter().copied()).chain(std::iter::repeat(z)).take(7).map(Into::into).collect();
        self.b.ins().brif(bad, self.fail, &args, ok, &[]);
        self.b.switch_to_block(ok);
        self.b.seal_block(ok);
    }

    fn call(&mut self, f: *const u8, params: &[Type], ret: Type, args: &[Value]) -> Value {
        let mut sig = Signature::new(self.b.func.signature.call_conv);
        sig.params.extend(params.iter().map(|t| AbiParam::new(*t)));
        sig.returns.push(AbiParam::new(ret));
        let sref = self.b.import_signature(sig);
        let callee = self.b.ins().iconst(self.ptr, f as i64);
        let inst = self.b.ins().call_indirect(sref, callee, args);
        self.b.inst_results(inst)[0]
    }

    // ---- value conversions (the interpreter's `V::i`, `V::f`) ----

    fn as_int(&mut self, v: Value, t: Ty) -> Value {
        match t {
            Ty::I => v,
            Ty::F => self.b.ins().fcvt_to_sint_sat(types::I64, v),
            Ty::B => self.b.ins().uextend(types::I64, v),
        }
    }

    fn as_float(&mut self, v: Value, t: Ty) -> Value {
        match t {
            Ty::F => v,
            Ty::I => self.b.ins().fcvt_from_sint(types::F32, v),
            Ty::B => {
                let i = self.b.ins().uextend(types::I64, v);
                self.b.ins().fcvt_from_sint(types::F32, i)
            }
        }
    }

    fn int(&mut self, e: &Expr) -> Result<Value, JitError> {
        let (v, t) = self.expr(e)?;
        Ok(self.as_int(v, t))
    }

    // ---- statements ----

    fn stmts(&mut self, body: &[Stmt]) -> Result<(), JitError> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), JitError> {
        match s {
            Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                let (v, _) = self.expr(value)?;
                self.b.def_var(self.vars[var.0 as usize], v);
            }
            Stmt::For { var, start, end, step, body, .. } => {
                let (i0, e, st) = (self.int(start)?, self.int(end)?, self.int(step)?);
                let bad = self.b.ins().icmp_imm_s(IntCC::SignedLessThanOrEqual, st, 0);
                let z = self.iconst(0);
                self.fail_if(bad, Fail::Step, &[st, z, z]);
                self.counted_loop(Bound::Value(i0), Bound::Value(e), Bound::Value(st), &mut |s, i| {
                    s.b.def_var(s.vars[var.0 as usize], i);
                    s.stmts(body)
                })?;
            }
            Stmt::If { cond, then_body, else_body } => {
                let (c, _) = self.expr(cond)?;
                let (tb, eb, join) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
                self.b.ins().brif(c, tb, &[], eb, &[]);
                for (blk, body) in [(tb, then_body), (eb, else_body)] {
                    self.b.switch_to_block(blk);
                    self.b.seal_block(blk);
                    self.stmts(body)?;
                    self.b.ins().jump(join, &[]);
                }
                self.b.switch_to_block(join);
                self.b.seal_block(join);
            }
            // Blocks and threads run one after another: the fence orders nothing more.
            Stmt::Barrier | Stmt::AsyncCommit | Stmt::AsyncWait { .. } | Stmt::MmaWait { .. } | Stmt::Fence => {}
            // The producer warp's statements take effect in program order (see `Stmt::Producer`).
            Stmt::Producer { body } => self.stmts(body)?,
            // Turns only schedule the warpgroups' issue; the block runs as one (see `Stmt::InTurn`).
            Stmt::InTurn { body } => self.stmts(body)?,
            // The other warpgroups only skip the body; its tiles are the running warpgroups' alone (validated).
            Stmt::FirstWarpgroups { body, .. } => self.stmts(body)?,
            Stmt::Threads { body } if body.iter().any(rt::is_warp_stmt) => self.lockstep(body)?,
            Stmt::Threads { body } => {
                let t = self.b.declare_var(types::I64);
                let n = self.iconst(self.k.threads as i64);
                self.counted_loop(Bound::Const(0), Bound::Value(n), Bound::Const(1), &mut |s, i| {
                    s.b.def_var(t, i);
                    let outer = s.thread.replace(t);
                    s.stmts(body)?;
                    s.thread = outer;
                    Ok(())
                })?;
            }
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
            Stmt::Map { tile, value } => {
                let d = &self.k.tiles[tile.0 as usize];
                let (rows, cols, dtype) = (d.rows as i64, d.cols as i64, d.dtype);
                let off = self.layout.tiles[tile.0 as usize] as i64;
                self.for_range(rows, &mut |l, r| {
                    l.for_range(cols, &mut |l, c| {
                        let outer = l.at.replace((r, c, cols));
                        let (v, t) = l.expr(value)?;
                        l.at = outer;
                        let a = l.elem_addr(off, r, c, cols, 4);
                        if dtype == DType::I32 {
                            let i = l.as_int(v, t);
                            l.b.ins().istore32(l.trusted, i, a, 0);
                        } else {
                            let f = l.stored_float(dtype, v, t);
                            l.b.ins().store(l.trusted, f, a, 0);
                        }
                        Ok(())
                    })
                })?;
            }
            Stmt::VecMap { vec, value } => {
                let rows = self.k.vecs[vec.0 as usize].rows as i64;
                let off = self.layout.vecs[vec.0 as usize] as i64;
                self.for_range(rows, &mut |l, r| {
                    let z = l.iconst(0);
                    let outer = l.at.replace((r, z, 0));
                    let (v, t) = l.expr(value)?;
                    l.at = outer;
                    let f = l.as_float(v, t);
                    let a = l.flat_addr(off, r, 4);
                    l.b.ins().store(l.trusted, f, a, 0);
                    Ok(())
                })?;
            }
            Stmt::Reduce { .. } | Stmt::Scan { .. } => self.host_tile(s, &[]),
            Stmt::Mma { a, b, .. } => {
                let ai = self.operand_index(a)?;
                let bi = self.operand_index(b)?;
                self.host_tile(s, &[ai, bi]);
            }
            Stmt::MmaAsync { a, b, accumulate, .. } => {
                let (acc, t) = self.expr(accumulate)?;
                let acc = self.as_int(acc, t);
                let ai = self.operand_index(a)?;
                let bi = self.operand_index(b)?;
                self.host_tile(s, &[ai, bi, acc]);
            }
            Stmt::CopyAsync { dst, src } => {
                let i = self.shared_index(dst)?;
                let v = self.global_view(src)?;
                self.host_tile(s, &[i, v[0], v[1], v[2], v[3]]);
            }
            // Barrier state lives in the frame; the runtime checks it as the interpreter does.
            Stmt::MbarInit { .. } => self.host_tile(s, &[]),
            Stmt::MbarArriveExpectTx { bar, .. } | Stmt::MbarArrive { bar } => {
                let i = self.int(&bar.index)?;
                self.host_tile(s, &[i]);
            }
            Stmt::MbarWait { bar, parity, .. } => {
                let p = self.int(parity)?;
                let i = self.int(&bar.index)?;
                self.host_tile(s, &[i, p]);
            }
            Stmt::TmaLoad(t) => {
                // The interpreter's order: shared tile index, coordinates, barrier index.
                let mut args = vec![self.shared_index(&t.dst)?];
                for c in &t.coords {
                    args.push(self.int(c)?);
                }
                args.push(self.int(&t.bar.index)?);
                if let Some(m) = &t.multicast {
                    args.push(self.int(m)?);
                }
                self.host_tile(s, &args);
            }
            // Cluster statements (`cpu::cluster`): the runtime reaches the peers' frames.
            Stmt::MbarArriveCluster { bar, cta } => {
                let i = self.int(&bar.index)?;
                let c = self.int(cta)?;
                self.host_tile(s, &[i, c]);
            }
            Stmt::ClusterSync => self.host_tile(s, &[]),
            Stmt::DequantFp4 { words, scales, .. } => {
                let qi = self.shared_index(words)?;
                let si = self.shared_index(scales)?;
                self.host_tile(s, &[qi, si]);
            }
            Stmt::DequantFp4Stream { words, scales, prefetch, .. } => {
                let mut args = vec![];
                args.extend(self.global_view(words)?);
                args.extend(self.global_view(scales)?);
                if let Some(p) = prefetch {
                    // Evaluated as the interpreter does (its errors end the run the same way); the views follow.
                    self.expr(&p.first)?;
                    args.extend(self.global_view(&p.words)?);
                    args.extend(self.global_view(&p.scales)?);
                }
                self.host_tile(s, &args);
            }
            Stmt::Fp4Gemv { out, words, scales, x, .. } => {
                let mut args = vec![self.shared_index(out)?];
                args.extend(self.global_view(words)?);
                args.extend(self.global_view(scales)?);
                args.extend(self.global_view(x)?);
                self.host_tile(s, &args);
            }
            Stmt::StoreCols { dst, .. } => {
                let i = self.shared_index(dst)?;
                self.host_tile(s, &[i]);
            }
            Stmt::TmaStore(t) => {
                // The interpreter's order: shared tile index, coordinates.
                let mut args = vec![self.shared_index(&t.src)?];
                for c in &t.coords {
                    args.push(self.int(c)?);
                }
                self.host_tile(s, &args);
            }
            // The runtime retires the older stores (reads their sources) here.
            Stmt::TmaStoreWait { .. } => self.host_tile(s, &[]),
            Stmt::Load { src: p, .. } | Stmt::Store { dst: p, .. } => match p {
                Place::Shared(r) => {
                    let i = self.shared_index(r)?;
                    self.host_tile(s, &[i]);
                }
                Place::Global(v) => {
                    let v = self.global_view(v)?;
                    self.host_tile(s, &v);
                }
            },
            Stmt::LoadVec { src: v, .. } | Stmt::StoreVec { dst: v, .. } => {
                let args = [self.int(&v.offset)?, self.int(&v.stride)?, self.int(&v.rows)?];
                self.host_tile(s, &args);
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
                let low = self.b.ins().band_imm_s(i, *lanes as i64 - 1);
                let z = self.iconst(0);
                let bad = self.b.ins().icmp(IntCC::NotEqual, low, z);
                let t = self.thread_or_none();
                let t = self.b.ins().smax(t, z);
                let (tid, nl, w) = (self.iconst(tensor.0 as i64), self.iconst(*lanes as i64), self.iconst(what));
                self.fail_if(bad, Fail::Misaligned, &[tid, i, nl, w, t]);
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
            #[allow(unreachable_patterns)]
            other => return Err(unsupported(format!("statement {}", stmt_name(other)))),
        }
        Ok(())
    }

    // ---- lockstep regions (warp shuffles and syncs) ----

    /// A threads region with warp statements (validated to sit at its top level), as the interpreter's
    /// `lockstep`: the statements between two warp statements run for every thread, each with its own
    /// variables and arrays (kept in its record of the lane area between segments, see `rt::Layout`), then the
    /// warp statement runs for all threads together (a shuffle: every thread evaluates its value at the end of
    /// the segment before, then `rt::host_warp` gives each its source lane's). Every thread starts from the
    /// variables' values at the region's start and no arrays; afterwards the variables and the block's arrays
    /// are as they were before the region.
    fn lockstep(&mut self, body: &[Stmt]) -> Result<(), JitError> {
        let l = self.layout;
        let (n, stride) = (self.k.threads as i64, l.lane_stride as i64);
        let arr_words = ((l.size - l.arrays_at) / 8) as i64;
        let tys: Vec<Type> = self.types.vars.iter().map(|t| t.unwrap_or(Ty::I).clif()).collect();
        let lanes = self.b.ins().load(self.ptr, self.trusted, self.ctx, offset_of!(Ctx, lanes) as i32);
        let saved = self.b.ins().iadd_imm_s(lanes, n * stride);
        let frame_arrays = self.b.ins().iadd_imm_s(self.frame, l.arrays_at as i64);
        let entry: Vec<Value> = self.vars.iter().map(|v| self.b.use_var(*v)).collect();
        // Save the block's arrays; every thread starts with the entry values and arrays of length 0.
        self.copy_words(saved, frame_arrays, arr_words)?;
        self.for_range(n, &mut |s, t| {
            let rec = s.lane_record(lanes, t, stride);
            for (i, v) in entry.iter().enumerate() {
                s.b.ins().store(s.trusted, *v, rec, 8 * i as i32);
            }
            let z = s.iconst(0);
            for a in &l.arrays {
                let off = l.lane_arrays + (a - l.arrays_at);
                s.b.ins().store(s.trusted, z, rec, off as i32);
            }
            Ok(())
        })?;
        let t = self.b.declare_var(types::I64);
        let mut seg = 0;
        loop {
            let end = body[seg..].iter().position(rt::is_warp_stmt).map_or(body.len(), |p| seg + p);
            let warp = body.get(end);
            self.for_range(n, &mut |s, tv| {
                s.b.def_var(t, tv);
                let outer = s.thread.replace(t);
                let rec = s.lane_record(lanes, tv, stride);
                // The thread's state: its variables and arrays.
                for (i, ty) in tys.iter().enumerate() {
                    let v = s.b.ins().load(*ty, s.trusted, rec, 8 * i as i32);
                    s.b.def_var(s.vars[i], v);
                }
                let rec_arrays = s.b.ins().iadd_imm_s(rec, l.lane_arrays as i64);
                s.copy_words(frame_arrays, rec_arrays, arr_words)?;
                s.stmts(&body[seg..end])?;
                if let Some(Stmt::WarpShuffle { value, .. }) = warp {
                    let (v, _) = s.expr(value)?;
                    s.b.ins().store(s.trusted, v, rec, l.lane_value as i32);
                }
                for i in 0..tys.len() {
                    let v = s.b.use_var(s.vars[i]);
                    s.b.ins().store(s.trusted, v, rec, 8 * i as i32);
                }
                s.copy_words(rec_arrays, frame_arrays, arr_words)?;
                s.thread = outer;
                Ok(())
            })?;
            if let Some(w @ Stmt::WarpShuffle { .. }) = warp {
                let sp = self.b.ins().iconst(self.ptr, w as *const Stmt as i64);
                let ptr = self.ptr;
                self.call(rt::host_warp as *const u8, &[ptr, ptr], types::I32, &[self.ctx, sp]);
            }
            if end >= body.len() {
                break;
            }
            seg = end + 1;
        }
        // The block's arrays and the variables as before the region.
        self.copy_words(frame_arrays, saved, arr_words)?;
        for (v, e) in self.vars.clone().into_iter().zip(entry) {
            self.b.def_var(v, e);
        }
        Ok(())
    }

    /// The address of thread `t`'s record in the lane area.
    fn lane_record(&mut self, lanes: Value, t: Value, stride: i64) -> Value {
        let off = self.b.ins().imul_imm_s(t, stride);
        self.b.ins().iadd(lanes, off)
    }

    /// Copy `words` 8-byte words from `src` to `dst` (distinct areas).
    fn copy_words(&mut self, dst: Value, src: Value, words: i64) -> Result<(), JitError> {
        if words == 0 {
            return Ok(());
        }
        self.for_range(words, &mut |s, i| {
            let off = s.b.ins().imul_imm_s(i, 8);
            let (d, a) = (s.b.ins().iadd(dst, off), s.b.ins().iadd(src, off));
            let v = s.b.ins().load(types::I64, s.trusted, a, 0);
            s.b.ins().store(s.trusted, v, d, 0);
            Ok(())
        })
    }

    // ---- the block frame (tiles, vectors, shared memory, arrays) ----

    /// Emit `for i in 0..n { body(i) }` (n > 0 a constant).
    fn for_range(
        &mut self,
        n: i64,
        body: &mut dyn FnMut(&mut Self, Value) -> Result<(), JitError>,
    ) -> Result<(), JitError> {
        self.counted_loop(Bound::Const(0), Bound::Const(n), Bound::Const(1), body)
    }

    /// Emit `for (i = start; i < end; i += step) { body(i) }`: the loop of `Stmt::For`, of the threads
    /// of a block and of [`Self::for_range`]. A constant end or step is taken as an immediate.
    fn counted_loop(
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
    fn elem_addr(&mut self, off: i64, r: Value, c: Value, cols: i64, size: i64) -> Value {
        let rc = self.b.ins().imul_imm_s(r, cols);
        let i = self.b.ins().iadd(rc, c);
        self.flat_addr(off, i, size)
    }

    /// The address of element `i` of `size` bytes of an object at byte `off` of the frame.
    fn flat_addr(&mut self, off: i64, i: Value, size: i64) -> Value {
        let bytes = self.b.ins().imul_imm_s(i, size);
        let a = self.b.ins().iadd(self.frame, bytes);
        self.b.ins().iadd_imm_s(a, off)
    }

    /// A value as a float element of `dtype` stores it: rounded to `dtype`, NaNs quieted.
    fn stored_float(&mut self, dtype: DType, v: Value, t: Ty) -> Value {
        let f = self.as_float(v, t);
        let f = self.round_to(dtype, f);
        self.quiet(f)
    }

    /// `round_to(dtype, x)`: what a float register or shared element of `dtype` keeps.
    fn round_to(&mut self, dtype: DType, x: Value) -> Value {
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
    fn f32_to_bf16_bits(&mut self, x: Value) -> Value {
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
    fn quiet(&mut self, x: Value) -> Value {
        let p = self.plain;
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let w = self.b.ins().bitcast(types::I32, p, x);
        let q = self.b.ins().bor_imm_s(w, 0x0040_0000);
        let q = self.b.ins().bitcast(types::F32, p, q);
        self.b.ins().select(nan, q, x)
    }

    /// `wrap_int(dtype, v)`.
    fn wrap_int(&mut self, dtype: DType, v: Value) -> Value {
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
    fn thread_or_none(&mut self) -> Value {
        match self.thread {
            Some(t) => self.b.use_var(t),
            None => self.iconst(-1),
        }
    }

    /// Evaluate and check the tile index of a shared window (the interpreter's `shared_base`).
    fn shared_index(&mut self, r: &SharedRef) -> Result<Value, JitError> {
        let i = self.int(&r.index)?;
        let count = self.k.shared[r.buf.0 as usize].count as i64;
        let bad = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, i, count);
        let b = self.iconst(r.buf.0 as i64);
        self.fail_if(bad, Fail::SharedIndex, &[b, i]);
        Ok(i)
    }

    /// The checked tile index of a shared operand (0 for a register operand).
    fn operand_index(&mut self, o: &Operand) -> Result<Value, JitError> {
        match o {
            Operand::Reg(_) => Ok(self.iconst(0)),
            Operand::Shared { src, .. } | Operand::Banded { src, .. } => self.shared_index(src),
        }
    }

    /// Offset, row stride, rows and cols of a global view.
    fn global_view(&mut self, v: &GlobalView) -> Result<[Value; 4], JitError> {
        Ok([self.int(&v.offset)?, self.int(&v.row_stride)?, self.int(&v.rows)?, self.int(&v.cols)?])
    }

    /// Evaluate and check element (row, col) of tile `index` of a shared buffer; its flat element index.
    fn shared_flat(
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
    fn shared_element(
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
    fn array_slot(&mut self, arr: ArrId, index: &Expr) -> Result<Value, JitError> {
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
    fn host_tile(&mut self, s: &Stmt, args: &[Value]) {
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

    // ---- global memory (HostTensor::{get,set}_{f32,i64}) ----

    /// Bounds-check a flat element index of a tensor.
    fn check_index(&mut self, t: TensorId, i: Value, what: i64) -> Value {
        let len = self.tensors[t.0 as usize].1;
        let bad = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, len);
        let (tid, w) = (self.iconst(t.0 as i64), self.iconst(what));
        self.fail_if(bad, Fail::OutOfBounds, &[tid, i, w]);
        i
    }

    fn addr(&mut self, t: TensorId, i: Value, size: i64) -> Value {
        let base = self.tensors[t.0 as usize].0;
        let off = self.b.ins().imul_imm_s(i, size);
        self.b.ins().iadd(base, off)
    }

    fn load_f32(&mut self, t: TensorId, i: Value) -> Value {
        let dt = self.k.tensors[t.0 as usize].dtype;
        let f = self.plain;
        match dt {
            DType::F32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().load(types::F32, f, a, 0)
            }
            DType::Bf16 => {
                let a = self.addr(t, i, 2);
                let h = self.b.ins().uload16(types::I32, f, a, 0);
                let w = self.b.ins().ishl_imm_s(h, 16);
                self.b.ins().bitcast(types::F32, self.plain, w)
            }
            DType::F16 | DType::E4m3 | DType::E8m0 => {
                let (size, fun): (i64, *const u8) = match dt {
                    DType::F16 => (2, host_f16_to_f32 as *const u8),
                    DType::E4m3 => (1, host_e4m3_to_f32 as *const u8),
                    _ => (1, host_e8m0_to_f32 as *const u8),
                };
                let a = self.addr(t, i, size);
                let bits = if size == 2 {
                    self.b.ins().uload16(types::I64, f, a, 0)
                } else {
                    self.b.ins().uload8(types::I64, f, a, 0)
                };
                self.call(fun, &[types::I64], types::F32, &[bits])
            }
            _ => {
                let v = self.load_i64(t, i);
                self.b.ins().fcvt_from_sint(types::F32, v)
            }
        }
    }

    fn load_i64(&mut self, t: TensorId, i: Value) -> Value {
        let dt = self.k.tensors[t.0 as usize].dtype;
        let f = self.plain;
        match dt {
            DType::U8 | DType::E2m1 => {
                let a = self.addr(t, i, 1);
                self.b.ins().uload8(types::I64, f, a, 0)
            }
            DType::I32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().sload32(f, a, 0)
            }
            DType::U32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().uload32(f, a, 0)
            }
            DType::I64 | DType::U64 => {
                let a = self.addr(t, i, 8);
                self.b.ins().load(types::I64, f, a, 0)
            }
            _ => {
                let v = self.load_f32(t, i);
                self.b.ins().fcvt_to_sint_sat(types::I64, v)
            }
        }
    }

    fn store_f32(&mut self, t: TensorId, i: Value, v: Value) {
        let dt = self.k.tensors[t.0 as usize].dtype;
        let f = self.plain;
        match dt {
            DType::F32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().store(f, v, a, 0);
            }
            DType::Bf16 => {
                let bits = self.f32_to_bf16_bits(v);
                let a = self.addr(t, i, 2);
                self.b.ins().istore16(f, bits, a, 0);
            }
            DType::F16 => {
                let bits = self.call(host_f32_to_f16 as *const u8, &[types::F32], types::I64, &[v]);
                let a = self.addr(t, i, 2);
                self.b.ins().istore16(f, bits, a, 0);
            }
            DType::E4m3 => {
                let bits = self.call(host_f32_to_e4m3 as *const u8, &[types::F32], types::I64, &[v]);
                let a = self.addr(t, i, 1);
                self.b.ins().istore8(f, bits, a, 0);
            }
            DType::E8m0 | DType::E2m1 => unreachable!("checked: no float stores into {dt}"),
            _ => {
                let iv = self.b.ins().fcvt_to_sint_sat(types::I64, v);
                self.store_i64(t, i, iv);
            }
        }
    }

    fn store_i64(&mut self, t: TensorId, i: Value, v: Value) {
        let dt = self.k.tensors[t.0 as usize].dtype;
        let f = self.plain;
        match dt {
            DType::U8 | DType::E2m1 | DType::E8m0 => {
                let a = self.addr(t, i, 1);
                self.b.ins().istore8(f, v, a, 0);
            }
            DType::I32 | DType::U32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().istore32(f, v, a, 0);
            }
            DType::I64 | DType::U64 => {
                let a = self.addr(t, i, 8);
                self.b.ins().store(f, v, a, 0);
            }
            _ => {
                let fv = self.b.ins().fcvt_from_sint(types::F32, v);
                self.store_f32(t, i, fv);
            }
        }
    }

    // ---- expressions ----

    fn expr(&mut self, e: &Expr) -> Result<(Value, Ty), JitError> {
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

    fn unary(&mut self, op: UnOp, x: Value, t: Ty) -> Value {
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

    fn binary(&mut self, op: BinOp, x: Value, tx: Ty, y: Value) -> Value {
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
