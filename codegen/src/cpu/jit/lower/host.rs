//! Host functions compiled code calls: the interpreter's own float semantics (unary functions, `min`/`max`,
//! `ldexp`) and narrow-float conversions.

use super::*;

pub(super) const UNOPS: [UnOp; 25] = [
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

pub(super) extern "C" fn host_unary(op: i64, x: f32) -> f32 {
    unary_f32(UNOPS[op as usize], x)
}
pub(super) extern "C" fn host_min(a: f32, b: f32) -> f32 {
    a.min(b)
}
pub(super) extern "C" fn host_max(a: f32, b: f32) -> f32 {
    a.max(b)
}
pub(super) extern "C" fn host_fp4_pair(word: i64, f: i64) -> i64 {
    fp4::packed_pair_bits(word as u32, (f & 3) as usize) as i64
}
pub(super) extern "C" fn host_ldexp(x: f32, n: i64) -> f32 {
    let n = n.clamp(-400, 400) as i32;
    (x as f64 * 2f64.powi(n)) as f32
}
pub(super) extern "C" fn host_f16_to_f32(b: i64) -> f32 {
    half::f16::from_bits(b as u16).to_f32()
}
pub(super) extern "C" fn host_e4m3_to_f32(b: i64) -> f32 {
    k3k_ir::tensor::e4m3_to_f32(b as u8)
}
pub(super) extern "C" fn host_e8m0_to_f32(b: i64) -> f32 {
    k3k_ir::tensor::e8m0_to_f32(b as u8)
}
pub(super) extern "C" fn host_f32_to_f16(x: f32) -> i64 {
    half::f16::from_f32(x).to_bits() as i64
}
pub(super) extern "C" fn host_f32_to_e4m3(x: f32) -> i64 {
    k3k_ir::tensor::f32_to_e4m3(x) as i64
}
