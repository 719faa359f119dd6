//! Scalar and element-wise expressions.
//!
//! One expression type serves three contexts. In a *scalar* context (loop bounds, offsets, conditions) the
//! leaves are constants, symbols (shape dims and scalar kernel arguments), variables, block indices, scalar
//! loads from global tensors ([`Expr::Load`]) and from shared tiles ([`Expr::SharedLoad`]). In an *element*
//! context (the body of [`crate::Stmt::Map`]) it may also read the current element of a register tile
//! ([`Expr::Elem`]), the current row's value of a row vector ([`Expr::RowVal`]) and the element's tile-local
//! coordinates ([`Expr::RowIdx`], [`Expr::ColIdx`]). Inside a [`crate::Stmt::Threads`] region (a *thread*
//! context) it may read the thread's coordinates ([`Expr::thread_idx`], [`Expr::lane_idx`],
//! [`Expr::warp_idx`]) and its register arrays ([`Expr::ArrayGet`]). The validator checks which leaves are
//! allowed where. Integers are 64-bit, floats f32, and there are no implicit conversions: use
//! [`Expr::to_float`] / [`Expr::to_int`], or [`Expr::bits`] / [`Expr::from_bits`] for exact bit patterns.

use crate::dtype::ScalarTy;
use serde::{Deserialize, Serialize};

/// Index newtypes: `u32` indices into the kernel's declaration lists.
macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub struct $name(pub u32);
    )*};
}

ids! {
    /// Index of a shape symbol or scalar kernel argument in [`crate::Kernel::syms`].
    SymId;
    /// Index of a variable in [`crate::Kernel::vars`].
    VarId;
    /// Index of a tensor argument in [`crate::Kernel::tensors`].
    TensorId;
    /// Index of a register tile in [`crate::Kernel::tiles`].
    TileId;
    /// Index of a row vector in [`crate::Kernel::vecs`].
    VecId;
    /// Index of a shared-memory buffer in [`crate::Kernel::shared`].
    SharedId;
    /// Index of a per-thread register array in [`crate::Kernel::arrays`] (introduced by [`crate::Stmt::LetArray`]
    /// inside a [`crate::Stmt::Threads`] region).
    ArrId;
}

/// Built-in launch coordinates.
///
/// The block coordinates are block-uniform and valid in any scalar context. The thread coordinates differ
/// between the threads of a block, so they are only valid inside a [`crate::Stmt::Threads`] region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Special {
    /// `blockIdx.{x,y,z}`.
    BlockIdx(u8),
    /// `gridDim.{x,y,z}`.
    GridDim(u8),
    /// `threadIdx.x`, in `0..threads` (threads regions only).
    ThreadIdx,
    /// The thread's lane in its warp, `threadIdx.x % 32` (threads regions only).
    LaneIdx,
    /// The thread's warp in the block, `threadIdx.x / 32` (threads regions only).
    WarpIdx,
}

impl Special {
    /// True for the per-thread coordinates, which only threads regions may read.
    pub fn is_per_thread(self) -> bool {
        matches!(self, Special::ThreadIdx | Special::LaneIdx | Special::WarpIdx)
    }
}

/// Unary operators. Float ops take and give floats; `Not` takes bool; `Neg`/`Abs` work on ints and floats;
/// `Bits` takes a float and gives an int, `FromBits` the reverse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnOp {
    Neg,
    Not,
    Abs,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Recip,
    Tanh,
    Sigmoid,
    Softplus,
    Silu,
    Floor,
    Ceil,
    /// True if the float is NaN.
    IsNan,
    /// True if the float is finite.
    IsFinite,
    /// f32 -> bf16 -> f32 rounding (round to nearest even), the value a bf16 store keeps.
    RoundBf16,
    /// The unbiased exponent e of a finite nonzero float with 2^e <= |x| < 2^(e+1) (as a float); exact, from the bits.
    Ilogb,
    /// Float -> int: the IEEE-754 bits of the f32, zero-extended (`0..2^32`); exact.
    Bits,
    /// Int -> float: the f32 whose bits are the low 32 bits of the int; exact (inverse of [`UnOp::Bits`]).
    FromBits,
    /// Round toward zero to an integral float (`truncf`).
    Trunc,
    /// Round to the nearest integral float, ties to even (`rintf`).
    Round,
    /// `2^x` with a subnormal result flushed to +0 (the GPU's one-instruction `ex2.approx.ftz.f32`, whose
    /// approximation error is that of `exp2`; `exp2` itself pays for subnormal results with a range test and
    /// two scalings around the same instruction). For softmax-style sums where weights below 2^-126 carry
    /// nothing.
    Exp2Ftz,
}

impl UnOp {
    /// The printer's name of the operator.
    pub fn name(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Not => "not",
            UnOp::Abs => "abs",
            UnOp::Exp => "exp",
            UnOp::Exp2 => "exp2",
            UnOp::Log => "log",
            UnOp::Log2 => "log2",
            UnOp::Sqrt => "sqrt",
            UnOp::Rsqrt => "rsqrt",
            UnOp::Recip => "recip",
            UnOp::Tanh => "tanh",
            UnOp::Sigmoid => "sigmoid",
            UnOp::Softplus => "softplus",
            UnOp::Silu => "silu",
            UnOp::Floor => "floor",
            UnOp::Ceil => "ceil",
            UnOp::IsNan => "isnan",
            UnOp::IsFinite => "isfinite",
            UnOp::RoundBf16 => "round_bf16",
            UnOp::Ilogb => "ilogb",
            UnOp::Bits => "bits",
            UnOp::FromBits => "from_bits",
            UnOp::Trunc => "trunc",
            UnOp::Round => "round",
            UnOp::Exp2Ftz => "exp2_ftz",
        }
    }
}

/// Binary operators. Arithmetic needs both sides of one type; comparisons give bool; `And`/`Or` take bools;
/// `Rem`, shifts and bit ops take ints. Integer `Div` truncates toward zero like C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Min,
    Max,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
    Shl,
    Shr,
    BitAnd,
    BitOr,
    BitXor,
    /// `x * 2^n` for float x and int n (exact scaling by a power of two).
    Ldexp,
    /// `fp4_pair(word, f)`: pair `f & 3` of a 32-bit word in k3k's packed MXFP4 layout as the bf16x2 bit
    /// pattern of its two values times 2^-126 ([`crate::fp4::packed_pair_bits`]; ints, the word's low 32 bits).
    Fp4Pair,
}

impl BinOp {
    /// The printer's spelling of the operator.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Min => "min",
            BinOp::Max => "max",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Ldexp => "ldexp",
            BinOp::Fp4Pair => "fp4_pair",
        }
    }

    /// Operators printed as function calls rather than infix.
    pub fn is_call(self) -> bool {
        matches!(self, BinOp::Min | BinOp::Max | BinOp::Ldexp | BinOp::Fp4Pair)
    }

    /// Comparisons produce bool.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne)
    }
}

/// A scalar or element expression (see the module docs for which leaves are valid where).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Sym(SymId),
    Var(VarId),
    Special(Special),
    Un(UnOp, Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    Cast(ScalarTy, Box<Expr>),
    /// `tensor[index]` read from global memory (flat element index); int tensors give ints, float tensors floats.
    Load {
        tensor: TensorId,
        index: Box<Expr>,
    },
    /// Element context: the current element of a register tile.
    Elem(TileId),
    /// Element or row context: the current row's value of a row vector.
    RowVal(VecId),
    /// Element or row context: the tile-local row of the current element.
    RowIdx,
    /// Element context: the tile-local column of the current element.
    ColIdx,
    /// Element (row, col) of tile `index` of a shared buffer (any context; int buffers give ints, float
    /// buffers floats). The GPU reads through the buffer's swizzled layout; the sub-expressions are
    /// evaluated in the surrounding context, so a map may read `shared[0][RowIdx, ColIdx]`. What other
    /// threads wrote is only visible after a barrier.
    SharedLoad {
        buf: SharedId,
        index: Box<Expr>,
        row: Box<Expr>,
        col: Box<Expr>,
    },
    /// Element `index` of a per-thread register array (threads regions only).
    ArrayGet(ArrId, Box<Expr>),
}

/// `From` conversions into one variant of [`Expr`]: `variant(as type): source types`.
macro_rules! expr_from {
    ($($variant:ident($ty:ty): $($src:ty),+;)*) => {$($(
        impl From<$src> for Expr {
            #[allow(clippy::unnecessary_cast)]
            fn from(v: $src) -> Self {
                Expr::$variant(v as $ty)
            }
        }
    )+)*};
}

expr_from! {
    Int(i64): i64, i32, u32, usize;
    Float(f64): f64, f32;
    Bool(bool): bool;
}

impl From<SymId> for Expr {
    fn from(v: SymId) -> Self {
        Expr::Sym(v)
    }
}
impl From<VarId> for Expr {
    fn from(v: VarId) -> Self {
        Expr::Var(v)
    }
}
impl From<&Expr> for Expr {
    fn from(v: &Expr) -> Self {
        v.clone()
    }
}

macro_rules! binop_trait {
    ($tr:ident, $m:ident, $op:expr) => {
        impl<R: Into<Expr>> std::ops::$tr<R> for Expr {
            type Output = Expr;
            fn $m(self, rhs: R) -> Expr {
                Expr::bin($op, self, rhs.into())
            }
        }
        impl<R: Into<Expr>> std::ops::$tr<R> for &Expr {
            type Output = Expr;
            fn $m(self, rhs: R) -> Expr {
                Expr::bin($op, self.clone(), rhs.into())
            }
        }
    };
}
binop_trait!(Add, add, BinOp::Add);
binop_trait!(Sub, sub, BinOp::Sub);
binop_trait!(Mul, mul, BinOp::Mul);
binop_trait!(Div, div, BinOp::Div);
binop_trait!(Rem, rem, BinOp::Rem);

impl std::ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::un(UnOp::Neg, self)
    }
}
impl std::ops::Neg for &Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::un(UnOp::Neg, self.clone())
    }
}

macro_rules! un_method {
    ($($m:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($m), "(self)`.")]
            pub fn $m(&self) -> Expr { Expr::un(UnOp::$op, self.clone()) }
        )*
    };
}
macro_rules! bin_method {
    ($($m:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("`self ", stringify!($m), " rhs`.")]
            pub fn $m(&self, rhs: impl Into<Expr>) -> Expr { Expr::bin(BinOp::$op, self.clone(), rhs.into()) }
        )*
    };
}

impl Expr {
    /// Build a unary node.
    pub fn un(op: UnOp, a: Expr) -> Expr {
        Expr::Un(op, Box::new(a))
    }
    /// Build a binary node.
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }
    /// `cond ? a : b`.
    pub fn select(cond: impl Into<Expr>, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        Expr::Select(Box::new(cond.into()), Box::new(a.into()), Box::new(b.into()))
    }
    /// `blockIdx.x` etc.
    pub fn block_idx(axis: u8) -> Expr {
        Expr::Special(Special::BlockIdx(axis))
    }
    /// `gridDim.x` etc.
    pub fn grid_dim(axis: u8) -> Expr {
        Expr::Special(Special::GridDim(axis))
    }
    /// `threadIdx.x` (threads regions only).
    pub fn thread_idx() -> Expr {
        Expr::Special(Special::ThreadIdx)
    }
    /// The thread's lane, `threadIdx.x % 32` (threads regions only).
    pub fn lane_idx() -> Expr {
        Expr::Special(Special::LaneIdx)
    }
    /// The thread's warp, `threadIdx.x / 32` (threads regions only).
    pub fn warp_idx() -> Expr {
        Expr::Special(Special::WarpIdx)
    }
    /// Element (row, col) of tile `index` of shared buffer `buf` (see [`Expr::SharedLoad`]).
    pub fn shared_load(buf: SharedId, index: impl Into<Expr>, row: impl Into<Expr>, col: impl Into<Expr>) -> Expr {
        Expr::SharedLoad { buf, index: Box::new(index.into()), row: Box::new(row.into()), col: Box::new(col.into()) }
    }
    /// Element `index` of a per-thread register array (see [`Expr::ArrayGet`]).
    pub fn array_get(arr: ArrId, index: impl Into<Expr>) -> Expr {
        Expr::ArrayGet(arr, Box::new(index.into()))
    }
    /// `tensor[index]` read from global memory (see [`Expr::Load`]).
    pub fn load(tensor: TensorId, index: impl Into<Expr>) -> Expr {
        Expr::Load { tensor, index: Box::new(index.into()) }
    }
    /// Convert an int or bool to float.
    pub fn to_float(&self) -> Expr {
        Expr::Cast(ScalarTy::Float, Box::new(self.clone()))
    }
    /// Convert a float (truncating toward zero) or bool to int.
    pub fn to_int(&self) -> Expr {
        Expr::Cast(ScalarTy::Int, Box::new(self.clone()))
    }
    /// Integer ceiling division for non-negative operands.
    pub fn ceil_div(&self, d: impl Into<Expr>) -> Expr {
        let d = d.into();
        (self.clone() + d.clone() - 1i64) / d
    }
    un_method!(exp => Exp, exp2 => Exp2, log => Log, log2 => Log2, sqrt => Sqrt, rsqrt => Rsqrt,
        recip => Recip, tanh => Tanh, sigmoid => Sigmoid, softplus => Softplus, silu => Silu,
        floor => Floor, ceil => Ceil, abs => Abs, not => Not, is_nan => IsNan, is_finite => IsFinite,
        round_bf16 => RoundBf16, ilogb => Ilogb, bits => Bits, from_bits => FromBits, trunc => Trunc,
        round => Round, exp2_ftz => Exp2Ftz);
    bin_method!(min => Min, max => Max, lt => Lt, le => Le, gt => Gt, ge => Ge, eq => Eq, ne => Ne,
        and => And, or => Or, shl => Shl, shr => Shr, bitand => BitAnd, bitor => BitOr, bitxor => BitXor,
        ldexp => Ldexp, fp4_pair => Fp4Pair);

    /// Visit every node, parents before children.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Un(_, a) | Expr::Cast(_, a) => a.visit(f),
            Expr::Bin(_, a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Expr::Select(c, a, b) => {
                c.visit(f);
                a.visit(f);
                b.visit(f);
            }
            Expr::Load { index, .. } | Expr::ArrayGet(_, index) => index.visit(f),
            Expr::SharedLoad { index, row, col, .. } => {
                index.visit(f);
                row.visit(f);
                col.visit(f);
            }
            _ => {}
        }
    }

    /// True if the expression reads element-context leaves (tile elements, row vectors, coordinates).
    pub fn uses_element_leaves(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| {
            if matches!(e, Expr::Elem(_) | Expr::RowVal(_) | Expr::RowIdx | Expr::ColIdx) {
                found = true;
            }
        });
        found
    }

    /// Fold to an integer constant when the expression is built from integer constants only.
    pub fn as_const_int(&self) -> Option<i64> {
        match self {
            Expr::Int(v) => Some(*v),
            Expr::Bin(op, a, b) => {
                let (a, b) = (a.as_const_int()?, b.as_const_int()?);
                Some(match op {
                    BinOp::Add => a.checked_add(b)?,
                    BinOp::Sub => a.checked_sub(b)?,
                    BinOp::Mul => a.checked_mul(b)?,
                    BinOp::Div if b != 0 => a / b,
                    BinOp::Rem if b != 0 => a % b,
                    BinOp::Min => a.min(b),
                    BinOp::Max => a.max(b),
                    _ => return None,
                })
            }
            Expr::Un(UnOp::Neg, a) => a.as_const_int().map(|v| -v),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_build_trees() {
        let e = Expr::Int(3) + Expr::Int(4) * Expr::Sym(SymId(0));
        assert!(matches!(e, Expr::Bin(BinOp::Add, _, _)));
        assert_eq!((Expr::Int(7) * 6i64 - 2i64).as_const_int(), Some(40));
        assert_eq!(Expr::Int(10).ceil_div(4i64).as_const_int(), Some(3));
        assert_eq!(Expr::Sym(SymId(0)).as_const_int(), None);
    }

    #[test]
    fn element_leaves_are_detected() {
        assert!((Expr::Elem(TileId(0)) * 2.0).uses_element_leaves());
        assert!(!(Expr::Sym(SymId(1)) + 1i64).uses_element_leaves());
    }
}
