//! MX (OCP Microscaling) operators of SEMANTICS.md sections 1 and 2.2, written in the IR:
//!
//! - [`quant`]: `mx.quantize` (f32 or bf16 -> MXFP4 / MXFP8, `Floor` or `Ceil` scale rule) and `mx.dequantize`
//!   (MX -> f32 or bf16), bit-exact with `k3k_reference::mx`;
//! - [`matmul`]: `mxfp4_matmul`, `y = x · dequant(w)^T` with MXFP4 weights dequantized on chip into bf16
//!   tensor-core operands, dense or grouped over ragged experts, with the fused epilogues of
//!   `latent_moe_gemm` and an optional split-K for decode shapes;
//! - [`prefill`]: `mxfp4_matmul` `PATH=dq_gemm` for many tokens: the weights dequantized once into a bf16
//!   scratch (`2*G*N*K` bytes), then the `latent_moe_gemm` kernel;
//! - [`pack`]: an offline re-layout of MXFP4 weights that gives each thread its eight values of a 32-wide
//!   block in one 32-bit word, placed for a short decode (`unpack(pack(w)) == w`; layout: [`k3k_ir::fp4`]).
//!
//! Layouts (SEMANTICS.md section 1.3): a `[R, K]` MXFP4 matrix is `q: [R, K/2] u8` (element 2i in the LOW nibble) and
//! `s: [R, K/32] u8` (E8M0); MXFP8 is `q: [R, K] u8` (E4M3 bytes) and the same `s`. K must be a multiple of 32.

pub mod fp8;
pub mod matmul;
pub mod pack;
pub mod prefill;
pub mod quant;

use crate::OpError;
use k3k_ir::{Expr, KernelBuilder};
pub use k3k_reference::mx::{MxFormat, ScaleRule};

/// Elements per E8M0 scale.
pub const BLOCK: usize = 32;

/// `K % 32 == 0`, or a typed error naming K (checked before anything is built or launched).
pub fn check_k(op: &'static str, arg: &str, k: usize) -> Result<(), OpError> {
    if !k.is_multiple_of(BLOCK) || k == 0 {
        return Err(OpError::BadInput {
            op,
            arg: arg.into(),
            why: format!("K = {k} must be a positive multiple of 32 (one E8M0 scale per 32 elements along K)"),
        });
    }
    Ok(())
}

/// A buffer has exactly the bytes `[rows, cols]` implies, or a typed error naming it and what was expected.
pub fn check_bytes(op: &'static str, arg: &str, got: usize, shape: &str, dims: &[usize]) -> Result<(), OpError> {
    let want: usize = dims.iter().product();
    if got != want {
        return Err(OpError::BadInput {
            op,
            arg: arg.into(),
            why: format!("expected {shape} = {dims:?} ({want} bytes), got {got} bytes"),
        });
    }
    Ok(())
}

/// Format code used in presets: 0 = MXFP4, 1 = MXFP8.
pub fn format_of(op: &'static str, code: i64) -> Result<MxFormat, OpError> {
    match code {
        0 => Ok(MxFormat::Fp4),
        1 => Ok(MxFormat::Fp8),
        _ => Err(OpError::BadInput { op, arg: "fmt".into(), why: format!("0 (MXFP4) or 1 (MXFP8), got {code}") }),
    }
}

/// Scale-rule code used in presets: 0 = Floor (OCP), 1 = Ceil (never clips).
pub fn rule_of(op: &'static str, code: i64) -> Result<ScaleRule, OpError> {
    match code {
        0 => Ok(ScaleRule::Floor),
        1 => Ok(ScaleRule::Ceil),
        _ => Err(OpError::BadInput { op, arg: "rule".into(), why: format!("0 (Floor) or 1 (Ceil), got {code}") }),
    }
}

/// Short name of a format.
pub fn format_name(f: MxFormat) -> &'static str {
    match f {
        MxFormat::Fp4 => "fp4",
        MxFormat::Fp8 => "fp8",
    }
}

/// Short name of a scale rule.
pub fn rule_name(r: ScaleRule) -> &'static str {
    match r {
        ScaleRule::Floor => "floor",
        ScaleRule::Ceil => "ceil",
    }
}

// ------------------------------------------------------------------------------------------------------------
// Exact decoders as IR expressions (integer byte in, f32 out). Every one is exact: bit patterns and products
// with powers of two, so the GPU and the interpreter give the reference's bits.

/// A threads region in which each thread takes the items `thread_idx + i * threads` of `0..items`, `i` in
/// `0..ceil(items / threads)` (an unrolled loop): `body` gets the item index `idx`, which can pass `items` on the
/// last step where the threads do not divide the items (the body tests it where it must).
pub fn per_thread(b: &mut KernelBuilder, items: i64, threads: u32, body: impl FnOnce(&mut KernelBuilder, Expr)) {
    let per = (items + threads as i64 - 1) / threads as i64;
    b.threads(|b| {
        b.for_unrolled("i", 0i64, per, 1i64, |b, i| {
            let idx = b.let_("idx", Expr::thread_idx() + i * threads as i64);
            body(b, idx);
        });
    });
}

/// 2^126 as an f32 (exact).
pub const TWO_126: f64 = 8.507059173023462e37;
/// 2^120 as an f32 (exact).
pub const TWO_120: f64 = 1.329227995784916e36;

/// An E8M0 byte -> 2^(e-127); 255 is NaN, 0 the subnormal 2^-127.
pub fn e8m0(s: Expr) -> Expr {
    Expr::select(
        s.eq(255i64),
        f64::NAN,
        Expr::select(s.eq(0i64), Expr::Int(0x40_0000).from_bits(), s.shl(23i64).from_bits()),
    )
}

/// `2^126 * 2^(e-127) = 2^(e-1)` for an E8M0 byte e in 0..=128 (one multiplier instead of two); 255 is NaN.
/// Only valid when every scale byte is at most 128 or 255 (see [`matmul::scales_foldable`]).
pub fn e8m0_times_2_126(s: Expr) -> Expr {
    Expr::select(s.eq(255i64), f64::NAN, (s + 126i64).shl(23i64).from_bits())
}

/// An E2M1 code (0..=15) -> its value times 2^-126, as an f32 bit pattern: the sign to bit 31 and the two
/// exponent bits and the mantissa bit to bits 24..22 make 2^(e-127)(1 + m/2) (e = 0: the subnormal m 2^-127),
/// i.e. the E2M1 value (bias 1) divided by 2^126. One multiply places two copies of the code (at bits 22..25 and
/// 28..31, no carries between them) and one mask keeps the sign of the second and the magnitude of the first:
/// the code is used once, so a byte read for it is read once.
pub fn fp4_bits(nib: Expr) -> Expr {
    (nib * 0x1040_0000i64).bitand(0x81C0_0000i64).from_bits()
}

/// Value `h` (0 low, 1 high) of pair `f` (0..4) of a 32-bit word in k3k's packed layout ([`k3k_ir::fp4`]), as
/// [`fp4_bits`] gives a code: its E2M1 value times 2^-126, as f32 bits. The pair is built as the GPU decoders
/// build it ([`Expr::fp4_pair`]); a half's 16 bits become the f32's high half.
pub fn packed_fp4_bits(word: &Expr, f: impl Into<Expr>, h: impl Into<Expr>) -> Expr {
    word.fp4_pair(f).shr(h.into().shl(4i64)).shl(16i64).from_bits()
}

/// An E2M1 code (0..=15) -> its value (exact).
pub fn fp4_value(nib: Expr) -> Expr {
    fp4_bits(nib) * TWO_126
}

/// An E4M3 byte -> its value (exact; S.1111.111 is NaN): the bits moved into an f32 make 2^(E-127)(1 + m/8)
/// (E = 0: m/8 2^-126), the E4M3 value (bias 7) divided by 2^120.
pub fn fp8_value(b: Expr) -> Expr {
    Expr::select(
        b.bitand(0x7fi64).eq(0x7fi64),
        f64::NAN,
        (b.bitand(0x80i64).shl(24i64)).bitor(b.bitand(0x7fi64).shl(20i64)).from_bits() * TWO_120,
    )
}

/// Nibble `h` (0 low, 1 high) of a byte.
pub fn nibble(byte: Expr, h: Expr) -> Expr {
    byte.shr(h.shl(2i64)).bitand(15i64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn constants_are_exact_powers_of_two() {
        assert_eq!(super::TWO_126 as f32, 2f32.powi(126));
        assert_eq!(super::TWO_120 as f32, 2f32.powi(120));
        assert_eq!(super::TWO_126, 2f64.powi(126));
        assert_eq!(super::TWO_120, 2f64.powi(120));
    }
}
