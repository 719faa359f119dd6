//! IR -> Cranelift IR for the statements and expressions the JIT covers (see the module docs of `jit`).
//!
//! Where each part lives: the type pass that checks every statement and expression is lowered (`typeck`), the
//! host functions compiled code calls for the interpreter's float semantics (`host`), the statements by family
//! (`stmts`), threads regions with warp statements (`lockstep`), the block frame of tiles, vectors, shared
//! buffers and arrays (`frame`), global memory (`global`) and expressions (`exprs`). This file holds the
//! failure codes, [`define`] and the lowering state [`Lower`].

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

mod exprs;
mod frame;
mod global;
mod host;
mod lockstep;
mod stmts;
mod typeck;

use host::*;
use typeck::Types;

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

const WHAT: [&str; 7] =
    ["scalar load", "scalar store", "atomic", "wide load", "wide store", "wide shared load", "wide shared store"];
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
            // (Codes 5 and 6, the wide shared accesses, name a shared buffer.)
            tensor: if err[4] >= 5 { &k.shared[err[1] as usize].name } else { &k.tensors[err[1] as usize].name }
                .clone(),
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

fn scalar_ty(t: ScalarTy) -> Ty {
    match t {
        ScalarTy::Int => Ty::I,
        ScalarTy::Float => Ty::F,
        ScalarTy::Bool => Ty::B,
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
        Stmt::Fp4Gemv(_) => "fp4_gemv",
        Stmt::WarpShuffle { .. } => "warp_shuffle",
        Stmt::WarpSync => "warp_sync",
        Stmt::Fence => "fence",
        Stmt::GridDep(_) => "grid_dep",
        Stmt::SharedStore { .. } => "shared store",
        Stmt::Atomic { .. } => "atomic",
        Stmt::LetArray { .. } => "let_array",
        Stmt::ArraySet { .. } => "array_set",
        Stmt::LoadWide { .. } => "load_wide",
        Stmt::StoreWide { .. } => "store_wide",
        Stmt::SharedLoadWide { .. } => "shared_load_wide",
        Stmt::SharedStoreWide { .. } => "shared_store_wide",
        _ => "statement",
    }
}

/// Check that the JIT lowers every statement and expression of a kernel.
pub(super) fn check(k: &Kernel) -> Result<(), JitError> {
    Types::new(k).map(|_| ())
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
}
