//! MX (OCP Microscaling) number formats, bit-exact with SEMANTICS.md section 1: E2M1 (fp4), E4M3 (fp8),
//! E8M0 scales, bf16 rounding, and block quantization / dequantization of `[rows, K]` matrices.
//!
//! Every conversion here is exact arithmetic: element values are scaled by exact powers of two in
//! f64 and rounded once (round to nearest, ties to even), so the GPU kernels must reproduce these
//! bytes exactly.

use crate::error::{RefError, check_len, prod};

/// Number of consecutive elements along K that share one E8M0 scale.
pub const MX_BLOCK: usize = 32;

/// Magnitudes of the E2M1 codes 0..=7 (code | 8 is the negative).
pub const E2M1_MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Largest finite E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;

/// Largest finite E4M3 magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// The E8M0 scale byte that means NaN.
pub const E8M0_NAN: u8 = 255;

/// Decodes the low 4 bits of `code` as E2M1 (1 sign, 2 exponent bits with bias 1, 1 mantissa bit);
/// the high 4 bits are ignored. Code 8 decodes to -0.0.
pub fn e2m1_to_f32(code: u8) -> f32 {
    let mag = E2M1_MAGNITUDES[(code & 7) as usize];
    if code & 8 != 0 { -mag } else { mag }
}

/// Encodes `x` as an E2M1 code in 0..=15: round to nearest, ties to even code, saturating to +-6.
/// The sign is kept, so negative values that round to zero give 8 (-0). `+-inf` saturates to +-6.
/// NaN (which E2M1 cannot represent) gives 0x7 (+6), the satfinite "NaN -> MAX_NORM" choice;
/// [`quantize`] never feeds NaN here (a block holding NaN gets scale 255 and codes 0).
pub fn f32_to_e2m1(x: f32) -> u8 {
    encode_e2m1(x as f64)
}

/// E2M1 encoder on an exact f64 input (see [`f32_to_e2m1`]).
fn encode_e2m1(x: f64) -> u8 {
    if x.is_nan() {
        return 0x7;
    }
    let sign = if x.is_sign_negative() { 8 } else { 0 };
    let a = x.abs();
    // Midpoints between consecutive magnitudes; at a tie the even code wins, i.e. the tie at
    // THRESH[i] (between codes i and i+1) rounds up exactly when i + 1 is even.
    const THRESH: [f64; 7] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0];
    let mut code = 0u8;
    for (i, &t) in THRESH.iter().enumerate() {
        if a > t || (a == t && i % 2 == 1) {
            code = i as u8 + 1;
        }
    }
    sign | code
}

/// Decodes an E4M3 (fp8 "e4m3fn": bias 7, no inf, max 448) byte; S.1111.111 (0x7F, 0xFF) is NaN.
/// Exponent field 0 is subnormal: m * 2^-9.
pub fn e4m3_to_f32(code: u8) -> f32 {
    let neg = code & 0x80 != 0;
    let e = ((code >> 3) & 0xF) as i32;
    let m = (code & 7) as f64;
    if e == 15 && m == 7.0 {
        return f32::NAN;
    }
    let mag = if e == 0 { m * 2f64.powi(-9) } else { (8.0 + m) * 2f64.powi(e - 10) };
    let v = mag as f32;
    if neg { -v } else { v }
}

/// Encodes `x` as E4M3: round to nearest, ties to even, satfinite (|x| >= 448 and +-inf give +-448,
/// i.e. 0x7E / 0xFE), subnormals (multiples of 2^-9 below 2^-6) rounded correctly, sign kept
/// (so tiny negatives give 0x80 = -0). NaN gives 0x7F.
pub fn f32_to_e4m3(x: f32) -> u8 {
    encode_e4m3(x as f64)
}

/// E4M3 encoder on an exact f64 input (see [`f32_to_e4m3`]).
fn encode_e4m3(x: f64) -> u8 {
    if x.is_nan() {
        return 0x7F;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs();
    if a >= E4M3_MAX as f64 {
        return sign | 0x7E;
    }
    // Grid spacing: 2^-9 in the subnormal range (a < 2^-6), else 2^(floor(log2 a) - 3).
    let e = if a < 2f64.powi(-6) { -6 } else { floor_log2_f64(a) };
    let quantum = 2f64.powi(e - 3);
    let r = (a / quantum).round_ties_even(); // a / quantum is exact (power-of-two divisor)
    // Subnormal: code = r (r = 8 is exactly the min normal, code 0x08). Normal: r in 8..=16 and
    // the code ((e + 7) << 3) + (r - 8) also carries r = 16 into the next exponent.
    let code = if e == -6 && a < 2f64.powi(-6) { r as u8 } else { (((e + 7) << 3) as u8) + (r as u8 - 8) };
    sign | code
}

/// floor(log2 a) for a positive finite f64, exactly, from the exponent bits.
fn floor_log2_f64(a: f64) -> i32 {
    debug_assert!(a > 0.0 && a.is_finite());
    let bits = a.to_bits();
    let exp = ((bits >> 52) & 0x7FF) as i32;
    if exp == 0 {
        let mant = bits & ((1u64 << 52) - 1);
        -1074 + (63 - mant.leading_zeros() as i32)
    } else {
        exp - 1023
    }
}

/// floor(log2 a) for a positive finite f32 (normal or subnormal), exactly, from the exponent bits.
pub fn floor_log2_f32(a: f32) -> i32 {
    let bits = a.to_bits() & 0x7FFF_FFFF;
    let exp = (bits >> 23) as i32;
    if exp == 0 {
        let mant = bits & 0x7F_FFFF;
        -149 + (31 - mant.leading_zeros() as i32)
    } else {
        exp - 127
    }
}

/// Decodes an E8M0 scale byte: 2^(e - 127) for e in 0..=254 (e = 0 is the f32 subnormal 2^-127,
/// exact), NaN for e = 255.
pub fn e8m0_to_f32(e: u8) -> f32 {
    match e {
        255 => f32::NAN,
        0 => f32::from_bits(0x0040_0000),
        _ => f32::from_bits((e as u32) << 23),
    }
}

/// Rounds an f32 to the nearest bf16 (ties to even, through `half::bf16`) and back to f32.
pub fn bf16_round(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// Rounds every element of `x` to bf16 (see [`bf16_round`]).
pub fn bf16_round_slice(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| bf16_round(v)).collect()
}

/// How the per-block power-of-two scale X is chosen from the block's amax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleRule {
    /// OCP rule: X = 2^(floor(log2 amax) - emax), emax = 2 (fp4) or 8 (e4m3); may clip amax.
    Floor,
    /// Never clips: X = 2^ceil(log2(amax / maxval)), maxval = 6 (fp4) or 448 (e4m3), i.e. the
    /// smallest power of two with amax <= maxval * X (computed exactly).
    Ceil,
}

/// Element format of an MX tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MxFormat {
    /// MXFP4: E2M1 elements, two per byte (element 2i in the low nibble).
    Fp4,
    /// MXFP8: E4M3 elements, one per byte.
    Fp8,
}

impl MxFormat {
    /// Largest finite element magnitude (6 or 448).
    pub fn max_value(self) -> f32 {
        match self {
            MxFormat::Fp4 => E2M1_MAX,
            MxFormat::Fp8 => E4M3_MAX,
        }
    }

    /// Exponent of the largest power of two not above `max_value` (2 or 8), used by `Floor`.
    pub fn emax(self) -> i32 {
        match self {
            MxFormat::Fp4 => 2,
            MxFormat::Fp8 => 8,
        }
    }

    /// Decodes one element code of this format (fp4: low 4 bits).
    pub fn decode(self, code: u8) -> f32 {
        match self {
            MxFormat::Fp4 => e2m1_to_f32(code),
            MxFormat::Fp8 => e4m3_to_f32(code),
        }
    }

    /// Encodes one (already scaled) value in this format: RNE, saturating, sign kept.
    pub fn encode(self, x: f32) -> u8 {
        match self {
            MxFormat::Fp4 => f32_to_e2m1(x),
            MxFormat::Fp8 => f32_to_e4m3(x),
        }
    }

    /// Bytes of element storage per row of K elements (K/2 for fp4, K for fp8).
    pub fn row_bytes(self, k: usize) -> usize {
        match self {
            MxFormat::Fp4 => k / 2,
            MxFormat::Fp8 => k,
        }
    }
}

/// A quantized `[rows, k]` MX matrix. `q` is `[rows, k/2]` (fp4, element 2i in the low nibble,
/// 2i+1 in the high nibble) or `[rows, k]` (fp8 E4M3 bytes); `s` is `[rows, k/32]` E8M0 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MxTensor {
    /// Number of rows R.
    pub rows: usize,
    /// Reduction length K (a multiple of 32).
    pub k: usize,
    /// Element storage, `[rows, k/2]` (fp4) or `[rows, k]` (fp8), row-major.
    pub q: Vec<u8>,
    /// Scale bytes, `[rows, k/32]`, row-major.
    pub s: Vec<u8>,
    /// Element format.
    pub format: MxFormat,
}

impl MxTensor {
    /// Checks that `k` is a multiple of 32 and that `q` and `s` have the lengths `rows`, `k`
    /// and `format` imply.
    pub fn validate(&self) -> Result<(), RefError> {
        if !self.k.is_multiple_of(MX_BLOCK) {
            return Err(RefError::KNotMultipleOf32 { arg: "k", k: self.k });
        }
        let qshape = match self.format {
            MxFormat::Fp4 => "[rows, k/2]",
            MxFormat::Fp8 => "[rows, k]",
        };
        check_len("q", self.q.len(), qshape, &[self.rows, self.format.row_bytes(self.k)])?;
        check_len("s", self.s.len(), "[rows, k/32]", &[self.rows, self.k / MX_BLOCK])?;
        Ok(())
    }

    /// The element codes unpacked to one byte per element, `[rows, k]` (fp4: values 0..=15).
    pub fn codes(&self) -> Vec<u8> {
        match self.format {
            MxFormat::Fp4 => unpack_nibbles(&self.q),
            MxFormat::Fp8 => self.q.clone(),
        }
    }
}

/// Packs fp4 codes two per byte: `byte[i] = codes[2i] & 0xF | (codes[2i+1] & 0xF) << 4`.
/// `codes` must have even length.
pub fn pack_nibbles(codes: &[u8]) -> Result<Vec<u8>, RefError> {
    if !codes.len().is_multiple_of(2) {
        return Err(RefError::Shape {
            arg: "codes",
            expected: "an even number of fp4 codes".into(),
            got: format!("{} codes", codes.len()),
        });
    }
    Ok(codes.chunks_exact(2).map(|p| (p[0] & 0xF) | ((p[1] & 0xF) << 4)).collect())
}

/// Unpacks bytes into 2 codes each: `out[2i]` = low nibble of byte i, `out[2i+1]` = high nibble.
pub fn unpack_nibbles(packed: &[u8]) -> Vec<u8> {
    packed.iter().flat_map(|&b| [b & 0xF, b >> 4]).collect()
}

/// The unbiased scale exponent (in [-127, 127]) a block with this amax gets, or `None` when the
/// amax is not finite (scale byte 255). `amax` = 0 gives -127 (scale byte 0).
pub fn scale_exponent(amax: f32, format: MxFormat, rule: ScaleRule) -> Option<i32> {
    if !amax.is_finite() {
        return None;
    }
    let amax = amax.abs();
    if amax == 0.0 {
        return Some(-127);
    }
    let fl = floor_log2_f32(amax);
    let e = match rule {
        ScaleRule::Floor => fl - format.emax(),
        ScaleRule::Ceil => {
            // Smallest e with amax <= maxval * 2^e; exact in f64. maxval is in
            // [2^emax, 2^(emax+1)), so the answer is fl - emax or fl - emax + 1.
            let maxval = format.max_value() as f64;
            let mut e = fl - format.emax() - 1;
            while maxval * 2f64.powi(e) < amax as f64 {
                e += 1;
            }
            e
        }
    };
    Some(e.clamp(-127, 127))
}

/// Quantizes a row-major `[rows, k]` f32 matrix to MX, per 32-element block along k:
/// amax = max |x|; scale exponent by `rule` (see [`ScaleRule`], exponent clamped to [-127, 127],
/// amax = 0 gives scale byte 0); elements are x / X rounded to nearest (ties to even) and
/// saturated to +-maxval, sign kept. A block containing NaN or +-inf gets scale byte 255 and all
/// its element codes are 0 (the whole block then dequantizes to NaN).
/// Errors: `k % 32 != 0` gives `KNotMultipleOf32`; `x.len() != rows * k` gives `Shape`.
pub fn quantize(x: &[f32], rows: usize, k: usize, format: MxFormat, rule: ScaleRule) -> Result<MxTensor, RefError> {
    if !k.is_multiple_of(MX_BLOCK) {
        return Err(RefError::KNotMultipleOf32 { arg: "k", k });
    }
    check_len("x", x.len(), "[rows, k]", &[rows, k])?;
    let nblocks = k / MX_BLOCK;
    let mut codes = vec![0u8; prod("x", &[rows, k])?];
    let mut s = vec![0u8; rows * nblocks];
    for (bi, (block, out)) in x.chunks_exact(MX_BLOCK).zip(codes.chunks_exact_mut(MX_BLOCK)).enumerate() {
        let finite = block.iter().all(|v| v.is_finite());
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let exp = if finite { scale_exponent(amax, format, rule) } else { None };
        match exp {
            None => {
                s[bi] = E8M0_NAN;
                out.fill(0);
            }
            Some(e) => {
                s[bi] = (e + 127) as u8;
                let inv = 2f64.powi(-e); // exact
                for (o, &v) in out.iter_mut().zip(block) {
                    let y = v as f64 * inv; // exact (f64 has room for every f32 * 2^+-127)
                    *o = match format {
                        MxFormat::Fp4 => encode_e2m1(y),
                        MxFormat::Fp8 => encode_e4m3(y),
                    };
                }
            }
        }
    }
    let q = match format {
        MxFormat::Fp4 => pack_nibbles(&codes)?,
        MxFormat::Fp8 => codes,
    };
    Ok(MxTensor { rows, k, q, s, format })
}

/// Dequantizes an MX tensor to a row-major `[rows, k]` f32 matrix: value = decode(code) *
/// 2^(e - 127), computed exactly in f64 and converted to f32 (exact unless the value is beyond
/// the f32 range: it then becomes +-inf; [`quantize`] can produce that only for |x| near f32::MAX,
/// e.g. `Ceil` rounds f32::MAX to 4 * 2^126 = 2^128). Scale byte 255 makes the whole block NaN; an
/// fp8 NaN code gives NaN. Errors if the tensor's buffers do not match its shape.
pub fn dequantize(t: &MxTensor) -> Result<Vec<f32>, RefError> {
    t.validate()?;
    let codes = t.codes();
    let mut out = vec![0f32; codes.len()];
    for (bi, (cb, ob)) in codes.chunks_exact(MX_BLOCK).zip(out.chunks_exact_mut(MX_BLOCK)).enumerate() {
        let e = t.s[bi];
        if e == E8M0_NAN {
            ob.fill(f32::NAN);
            continue;
        }
        let scale = 2f64.powi(e as i32 - 127);
        for (o, &c) in ob.iter_mut().zip(cb) {
            *o = (t.format.decode(c) as f64 * scale) as f32;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Brute-force nearest representable value, ties to the code with an even LSB, saturating.
    fn brute_encode(x: f64, format: MxFormat) -> u8 {
        let ncodes: u16 = match format {
            MxFormat::Fp4 => 16,
            MxFormat::Fp8 => 256,
        };
        let maxv = format.max_value() as f64;
        let xc = x.clamp(-maxv, maxv);
        let mut best: Option<(f64, u8)> = None;
        for c in 0..ncodes {
            let c = c as u8;
            let v = format.decode(c) as f64;
            if v.is_nan() || v.is_sign_negative() != x.is_sign_negative() {
                continue;
            }
            let d = (v - xc).abs();
            best = match best {
                None => Some((d, c)),
                Some((bd, bc)) if d < bd || (d == bd && c & 1 == 0 && bc & 1 == 1) => Some((d, c)),
                b => b,
            };
        }
        best.unwrap().1
    }

    #[test]
    fn fp4_codes_round_trip() {
        for c in 0u8..16 {
            assert_eq!(f32_to_e2m1(e2m1_to_f32(c)), c, "code {c}");
            assert_eq!(e2m1_to_f32(c | 0xF0), e2m1_to_f32(c), "high bits ignored");
        }
        assert_eq!(e2m1_to_f32(0x7), 6.0);
        assert_eq!(e2m1_to_f32(0x9), -0.5);
        assert!(e2m1_to_f32(8).is_sign_negative());
    }

    #[test]
    fn e4m3_codes_round_trip() {
        for c in 0u16..256 {
            let c = c as u8;
            let v = e4m3_to_f32(c);
            if c & 0x7F == 0x7F {
                assert!(v.is_nan(), "code {c:#x} must be NaN");
                assert_eq!(f32_to_e4m3(v), 0x7F);
            } else {
                assert!(v.is_finite());
                assert_eq!(f32_to_e4m3(v), c, "code {c:#x} value {v}");
            }
        }
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x78), 256.0);
    }

    #[test]
    fn scalar_rounding_cases() {
        // fp4: ties to even, saturation, sign kept.
        let cases = [
            (0.25f32, 0u8),
            (0.2500001, 1),
            (0.75, 2),
            (1.25, 2),
            (1.75, 4),
            (2.5, 4),
            (3.5, 6),
            (5.0, 6),
            (5.0001, 7),
            (7.0, 7),
            (1e30, 7),
            (f32::INFINITY, 7),
            (-f32::INFINITY, 15),
            (-0.1, 8),
            (-0.75, 10),
            (f32::NAN, 7),
        ];
        for (x, c) in cases {
            assert_eq!(f32_to_e2m1(x), c, "fp4 of {x}");
        }
        // e4m3: ties to even in normal and subnormal ranges, satfinite.
        let cases8 = [
            (17.0f32, 0x58u8),
            (19.0, 0x5A),
            (2f32.powi(-10), 0x00),
            (3.0 * 2f32.powi(-10), 0x02),
            (464.0, 0x7E),
            (1e9, 0x7E),
            (f32::INFINITY, 0x7E),
            (-f32::INFINITY, 0xFE),
            (-1e-30, 0x80),
            (f32::NAN, 0x7F),
            (0.375, 0x2C),
        ];
        for (x, c) in cases8 {
            assert_eq!(f32_to_e4m3(x), c, "e4m3 of {x}");
        }
    }

    #[test]
    fn encoders_match_brute_force() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let seed: u64 = rand::rng().random();
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..20000 {
            let e: i32 = rng.random_range(-14..11);
            let x = (rng.random::<f64>() * 2.0 - 1.0) * 2f64.powi(e);
            let x = x as f32;
            assert_eq!(f32_to_e2m1(x), brute_encode(x as f64, MxFormat::Fp4), "seed {seed} x {x}");
            assert_eq!(f32_to_e4m3(x), brute_encode(x as f64, MxFormat::Fp8), "seed {seed} x {x}");
        }
        // every midpoint of the e4m3 grid (exact ties) and its neighbours
        for c in 0u8..0x7E {
            let a = e4m3_to_f32(c) as f64;
            let b = e4m3_to_f32(c + 1) as f64;
            let mid = ((a + b) / 2.0) as f32;
            assert_eq!(f32_to_e4m3(mid), brute_encode(mid as f64, MxFormat::Fp8), "mid {mid}");
            let c_even = if c & 1 == 0 { c } else { c + 1 };
            assert_eq!(f32_to_e4m3(mid), c_even, "tie at {mid}");
        }
    }

    #[test]
    fn e8m0_and_bf16() {
        assert_eq!(e8m0_to_f32(127), 1.0);
        assert_eq!(e8m0_to_f32(128), 2.0);
        assert_eq!(e8m0_to_f32(254), 2f32.powi(127));
        assert_eq!(e8m0_to_f32(1), 2f32.powi(-126));
        assert_eq!(e8m0_to_f32(0) as f64, 2f64.powi(-127));
        assert!(e8m0_to_f32(255).is_nan());
        assert_eq!(bf16_round(1.0 + 2f32.powi(-8)), 1.0); // tie -> even
        assert_eq!(bf16_round(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        assert_eq!(bf16_round(1.0 + 2f32.powi(-7)), 1.0 + 2f32.powi(-7));
        assert!(bf16_round(f32::NAN).is_nan());
    }

    #[test]
    fn nibble_packing_is_low_first() {
        let codes = [1u8, 2, 0xF, 0x7];
        let p = pack_nibbles(&codes).unwrap();
        assert_eq!(p, vec![0x21, 0x7F]);
        assert_eq!(unpack_nibbles(&p), codes.to_vec());
        assert!(pack_nibbles(&[1, 2, 3]).is_err());
    }

    fn block(head: &[f32]) -> Vec<f32> {
        let mut b = vec![0f32; 32];
        b[..head.len()].copy_from_slice(head);
        b
    }

    /// (block head, format, rule, expected scale byte, expected first codes)
    #[test]
    fn hand_checked_quantization_table() {
        use MxFormat::*;
        use ScaleRule::*;
        let p = |e: i32| 2f32.powi(e);
        type Case = (Vec<f32>, MxFormat, ScaleRule, u8, Vec<u8>);
        let cases: Vec<Case> = vec![
            // amax exactly a power of two: X = 1 under both rules; RNE ties; sign kept
            (vec![4.0, 0.25, 0.75, -1.25, 2.5, 3.5, 1.75, -0.1], Fp4, Floor, 127, vec![6, 0, 2, 10, 4, 6, 4, 8]),
            (vec![4.0, 0.25, 0.75, -1.25, 2.5, 3.5, 1.75, -0.1], Fp4, Ceil, 127, vec![6, 0, 2, 10, 4, 6, 4, 8]),
            // amax = 7.9 * 2^3: floor clips to 6, ceil picks X = 16 and rounds 3.95 -> 4
            (vec![7.9 * 8.0, -8.0], Fp4, Floor, 130, vec![7, 10]),
            (vec![7.9 * 8.0, -8.0], Fp4, Ceil, 131, vec![6, 9]),
            // amax = 6 exactly: no clipping either way
            (vec![6.0, -6.0, 1.0], Fp4, Floor, 127, vec![7, 15, 2]),
            (vec![6.0, -6.0, 1.0], Fp4, Ceil, 127, vec![7, 15, 2]),
            // amax just above 6 * 2^k: ceil goes one up
            (vec![6.0 * p(-3) * (1.0 + p(-20))], Fp4, Ceil, 125, vec![5]),
            // huge values
            (vec![f32::MAX, -f32::MAX, 1.0], Fp4, Floor, 252, vec![7, 15, 0]),
            (vec![f32::MAX, -f32::MAX, 1.0], Fp4, Ceil, 253, vec![6, 14, 0]),
            (vec![f32::MAX, 1.0], Fp8, Floor, 246, vec![0x7E, 0]),
            (vec![f32::MAX, 1.0], Fp8, Ceil, 247, vec![0x78, 0]),
            // fp8 saturation under floor, none under ceil
            (vec![500.0, 17.0, 19.0], Fp8, Floor, 127, vec![0x7E, 0x58, 0x5A]),
            (vec![500.0, 17.0, 19.0], Fp8, Ceil, 128, vec![0x78, 0x50, 0x52]),
            (vec![448.0, -448.0], Fp8, Ceil, 127, vec![0x7E, 0xFE]),
            // tiny values: exponent clamped to -127
            (vec![p(-149)], Fp4, Floor, 0, vec![0]),
            (vec![p(-149)], Fp8, Ceil, 0, vec![0]),
            (vec![3.0 * p(-130)], Fp8, Floor, 0, vec![0x2C]),
            (vec![3.0 * p(-130)], Fp4, Floor, 0, vec![1]),
            (vec![p(-120), p(-123)], Fp4, Floor, 5, vec![6, 1]),
            // all-zero block (and -0): smallest scale
            (vec![], Fp4, Floor, 0, vec![0, 0]),
            (vec![-0.0], Fp4, Ceil, 0, vec![8]),
            (vec![-0.0], Fp8, Floor, 0, vec![0x80]),
            // non-finite amax: scale 255, codes 0
            (vec![1.0, f32::INFINITY, 2.0], Fp4, Floor, 255, vec![0, 0, 0]),
            (vec![1.0, f32::NAN, 2.0], Fp8, Ceil, 255, vec![0, 0, 0]),
            (vec![-f32::INFINITY], Fp8, Floor, 255, vec![0]),
        ];
        for (i, (head, format, rule, sbyte, codes)) in cases.into_iter().enumerate() {
            let x = block(&head);
            let t = quantize(&x, 1, 32, format, rule).unwrap();
            assert_eq!(t.s, vec![sbyte], "case {i}: scale of {head:?} {format:?} {rule:?}");
            let got = t.codes();
            assert_eq!(&got[..codes.len()], &codes[..], "case {i}: codes of {head:?} {format:?} {rule:?}");
            let deq = dequantize(&t).unwrap();
            if sbyte == 255 {
                assert!(deq.iter().all(|v| v.is_nan()), "case {i}: NaN block");
            } else {
                // (f32::MAX under Ceil rounds to 4 * 2^126 = 2^128, which overflows f32)
                for (j, (&d, &xv)) in deq.iter().zip(&x).enumerate() {
                    assert!(d.is_finite() || xv.abs() > 2f32.powi(127), "case {i} elem {j}");
                }
            }
        }
    }

    #[test]
    fn quantize_layout_and_errors() {
        // element 2i low nibble, 2i+1 high nibble; second block gets its own scale
        let mut x = vec![0f32; 64];
        x[0] = 1.0;
        x[1] = -2.0;
        x[32] = 64.0;
        let t = quantize(&x, 1, 64, MxFormat::Fp4, ScaleRule::Floor).unwrap();
        assert_eq!(t.q.len(), 32);
        assert_eq!(t.s, vec![126, 131]); // amax 2 -> X = 1/2; amax 64 -> X = 16
        assert_eq!(t.q[0], 0x4 | (0xE << 4)); // 1.0/0.5 = 2 -> code 4; -2/0.5 = -4 -> code 14
        assert!(matches!(
            quantize(&[0.0; 48], 1, 48, MxFormat::Fp4, ScaleRule::Floor),
            Err(RefError::KNotMultipleOf32 { k: 48, .. })
        ));
        assert!(matches!(
            quantize(&[0.0; 60], 2, 32, MxFormat::Fp8, ScaleRule::Floor),
            Err(RefError::Shape { arg: "x", .. })
        ));
        let mut bad = t.clone();
        bad.s.pop();
        assert!(dequantize(&bad).is_err());
        bad = t.clone();
        bad.k = 40;
        assert!(matches!(dequantize(&bad), Err(RefError::KNotMultipleOf32 { .. })));
    }

    /// Spacing of the element grid around |y| (y = x / X, |y| <= maxval).
    fn grid_spacing(y: f64, format: MxFormat) -> f64 {
        let y = y.abs();
        match format {
            MxFormat::Fp4 => {
                if y < 2.0 {
                    0.5
                } else if y < 4.0 {
                    1.0
                } else {
                    2.0
                }
            }
            MxFormat::Fp8 => {
                if y < 2f64.powi(-6) {
                    2f64.powi(-9)
                } else {
                    2f64.powi(floor_log2_f64(y) - 3)
                }
            }
        }
    }

    fn check_error_bound(x: &[f32], format: MxFormat, rule: ScaleRule) -> Result<(), TestCaseError> {
        let rows = x.len() / 64;
        let t = quantize(x, rows, 64, format, rule).unwrap();
        let d = dequantize(&t).unwrap();
        let maxv = format.max_value() as f64;
        for i in 0..x.len() {
            let xs = 2f64.powi(t.s[i / 32] as i32 - 127);
            let y = x[i] as f64 / xs;
            let err = (d[i] as f64 - x[i] as f64).abs();
            if y.abs() > maxv {
                prop_assert!(rule == ScaleRule::Floor, "ceil must never saturate: y={y}");
                prop_assert_eq!(d[i] as f64, maxv.copysign(y) * xs);
            } else {
                let bound = 0.5 * grid_spacing(y, format) * xs;
                prop_assert!(err <= bound, "x={} d={} err={} bound={}", x[i], d[i], err, bound);
            }
        }
        Ok(())
    }

    fn mx_input() -> impl Strategy<Value = Vec<f32>> {
        (1usize..3, -130i32..120).prop_flat_map(|(rows, e)| {
            prop::collection::vec(
                (-1.0f64..1.0, -12i32..3).prop_map(move |(m, d)| (m * 2f64.powi(e + d)) as f32),
                rows * 64,
            )
        })
    }

    proptest! {
        #[test]
        fn dequantize_quantize_error_is_bounded(x in mx_input()) {
            for format in [MxFormat::Fp4, MxFormat::Fp8] {
                for rule in [ScaleRule::Floor, ScaleRule::Ceil] {
                    check_error_bound(&x, format, rule)?;
                }
            }
        }
    }
}
