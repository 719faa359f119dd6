//! Expressions -> C expressions. Ints are `long long`, floats `float`; every operator maps onto C or a
//! prelude helper with the interpreter's semantics.

use super::{Ctx, Renderer, c_type, float_lit, scalar_c_type, sym_arg, tensor_arg};
use k3k_ir::*;

impl<'a> Renderer<'a> {
    /// Render `e` in a context (element maps and vector maps see their loop's element indices).
    pub(super) fn e(&self, e: &Expr, ctx: Ctx) -> String {
        let k = self.k;
        match e {
            Expr::Int(v) => format!("{v}LL"),
            Expr::Float(v) => float_lit(*v),
            Expr::Bool(v) => v.to_string(),
            Expr::Sym(s) => sym_arg(k, *s),
            Expr::Var(v) => format!("x{}", v.0),
            Expr::Special(Special::BlockIdx(a)) => format!("((long long)blockIdx.{})", ["x", "y", "z"][*a as usize]),
            Expr::Special(Special::GridDim(a)) => format!("((long long)gridDim.{})", ["x", "y", "z"][*a as usize]),
            Expr::Special(Special::ThreadIdx) => "((long long)threadIdx.x)".into(),
            Expr::Special(Special::LaneIdx) => "((long long)k3k::lane_id())".into(),
            Expr::Special(Special::WarpIdx) => "((long long)k3k::warp_id())".into(),
            Expr::Un(op, a) => {
                let a = self.e(a, ctx);
                match op {
                    UnOp::Neg => format!("(-{a})"),
                    UnOp::Not => format!("(!{a})"),
                    UnOp::Abs => format!("k3k::abs_({a})"),
                    UnOp::Exp => format!("expf({a})"),
                    UnOp::Exp2 => format!("exp2f({a})"),
                    UnOp::Log => format!("logf({a})"),
                    UnOp::Log2 => format!("log2f({a})"),
                    UnOp::Sqrt => format!("sqrtf({a})"),
                    UnOp::Rsqrt => format!("rsqrtf({a})"),
                    UnOp::Recip => format!("k3k::recip({a})"),
                    UnOp::Tanh => format!("tanhf({a})"),
                    UnOp::Sigmoid => format!("k3k::sigmoid({a})"),
                    UnOp::Softplus => format!("k3k::softplus({a})"),
                    UnOp::Silu => format!("k3k::silu({a})"),
                    UnOp::Floor => format!("floorf({a})"),
                    UnOp::Ceil => format!("ceilf({a})"),
                    UnOp::IsNan => format!("k3k::isnan_({a})"),
                    UnOp::IsFinite => format!("k3k::isfinite_({a})"),
                    UnOp::RoundBf16 => format!("k3k::round_bf16({a})"),
                    UnOp::Ilogb => format!("k3k::ilogb_exact({a})"),
                    UnOp::Bits => format!("((long long)__float_as_uint({a}))"),
                    UnOp::FromBits => format!("__uint_as_float((unsigned)({a}))"),
                    UnOp::Trunc => format!("truncf({a})"),
                    UnOp::Round => format!("rintf({a})"),
                    UnOp::Exp2Ftz => format!("k3k::exp2_ftz({a})"),
                }
            }
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.e(a, ctx), self.e(b, ctx));
                match op {
                    BinOp::Min => format!("k3k::min_({a}, {b})"),
                    BinOp::Max => format!("k3k::max_({a}, {b})"),
                    BinOp::Ldexp => format!("k3k::ldexp_f({a}, {b})"),
                    BinOp::Fp4Pair => format!("((long long)k3k::fp4_packed_bits((unsigned)({a}), (int)({b}) & 3))"),
                    _ => format!("({a} {} {b})", op.symbol()),
                }
            }
            Expr::Select(c, a, b) => format!("({} ? {} : {})", self.e(c, ctx), self.e(a, ctx), self.e(b, ctx)),
            Expr::Cast(t, a) => format!("(({}){})", scalar_c_type(*t), self.e(a, ctx)),
            Expr::Load { tensor, index } => {
                let conv = if ScalarTy::of_dtype(k.tensors[tensor.0 as usize].dtype) == ScalarTy::Float {
                    "to_f32"
                } else {
                    "to_i64"
                };
                format!("k3k::{conv}({}[{}])", tensor_arg(k, *tensor), self.e(index, Ctx::Scalar))
            }
            Expr::Elem(t) => format!("t{}.get(b_, f_, j_)", t.0),
            Expr::RowVal(v) => match ctx {
                Ctx::Row => format!("v{}.v[b_][h_]", v.0),
                _ => format!("v{}.v[b_][j_ >> 1]", v.0),
            },
            Expr::RowIdx => "((long long)r_)".into(),
            Expr::ColIdx => "((long long)c_)".into(),
            Expr::SharedLoad { buf, index, row, col } => {
                let d = &k.shared[buf.0 as usize];
                let conv = if ScalarTy::of_dtype(d.dtype) == ScalarTy::Float { "to_f32" } else { "to_i64" };
                format!("k3k::{conv}(*{})", self.shared_elem(*buf, index, row, col, ctx))
            }
            Expr::ArrayGet(a, index) => format!("a{}[(int)({})]", a.0, self.e(index, ctx)),
        }
    }

    /// A pointer to element (row, col) of tile `index` of a shared buffer.
    pub(super) fn shared_elem(&self, buf: SharedId, index: &Expr, row: &Expr, col: &Expr, ctx: Ctx) -> String {
        format!(
            "k3k::shared_elem<{}, {}>(s{}, {}, {}, {})",
            c_type(self.k.shared[buf.0 as usize].dtype),
            self.shared_layout(buf),
            buf.0,
            self.e(index, ctx),
            self.e(row, ctx),
            self.e(col, ctx)
        )
    }
}
