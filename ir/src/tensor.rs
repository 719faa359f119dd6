//! Host-side tensors: raw little-endian storage with a dtype and a shape, plus element conversions. Used to
//! feed the CPU interpreter and to move data to and from a GPU.

use crate::dtype::DType;
use half::{bf16, f16};

/// A dense row-major tensor in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// Decode an E4M3 byte (bias 7, NaN = S.1111.111, no inf).
pub fn e4m3_to_f32(b: u8) -> f32 {
    let s = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0xf) as i32;
    let m = (b & 7) as f32;
    if e == 15 && b & 7 == 7 {
        return f32::NAN;
    }
    if e == 0 { s * m / 8.0 * 2f32.powi(-6) } else { s * (1.0 + m / 8.0) * 2f32.powi(e - 7) }
}

/// Encode to E4M3: round to nearest even, saturate to +-448, NaN stays NaN.
pub fn f32_to_e4m3(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs();
    if a >= 448.0 {
        return sign | 0x7e;
    }
    // Candidates are all finite non-negative codes 0..=0x7e; pick the nearest, ties to an even mantissa.
    let mut best = 0u8;
    let mut best_err = f32::INFINITY;
    for code in 0u8..=0x7e {
        let v = e4m3_to_f32(code);
        let err = (v - a).abs();
        if err < best_err || (err == best_err && code & 1 == 0) {
            best = code;
            best_err = err;
        }
    }
    sign | best
}

/// Decode an E8M0 scale byte: 2^(e-127), 255 = NaN.
pub fn e8m0_to_f32(b: u8) -> f32 {
    if b == 255 { f32::NAN } else { (2.0f64).powi(b as i32 - 127) as f32 }
}

impl HostTensor {
    /// A tensor of zero bytes.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Self {
        let n: usize = shape.iter().product();
        HostTensor { dtype, shape: shape.to_vec(), data: vec![0; dtype.storage_bytes(n)] }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True for a tensor with no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// From f32 values, rounding to the dtype (floats RNE; ints truncate; E4M3 RNE saturating).
    pub fn from_f32(dtype: DType, shape: &[usize], vals: &[f32]) -> Self {
        let mut t = Self::zeros(dtype, shape);
        assert_eq!(vals.len(), t.len(), "HostTensor::from_f32: {} values for shape {:?}", vals.len(), shape);
        for (i, v) in vals.iter().enumerate() {
            t.set_f32(i, *v);
        }
        t
    }

    /// From integer values (I32, U32, I64, U64, U8 storage).
    pub fn from_i64(dtype: DType, shape: &[usize], vals: &[i64]) -> Self {
        let mut t = Self::zeros(dtype, shape);
        assert_eq!(vals.len(), t.len(), "HostTensor::from_i64: {} values for shape {:?}", vals.len(), shape);
        for (i, v) in vals.iter().enumerate() {
            t.set_i64(i, *v);
        }
        t
    }

    /// From raw bytes (e.g. packed fp4 or E8M0 scales).
    pub fn from_bytes(dtype: DType, shape: &[usize], data: Vec<u8>) -> Self {
        let n: usize = shape.iter().product();
        assert_eq!(data.len(), dtype.storage_bytes(n), "HostTensor::from_bytes: size mismatch");
        HostTensor { dtype, shape: shape.to_vec(), data }
    }

    /// Element i as f32 (ints converted; E2M1 not addressable, view as U8).
    pub fn get_f32(&self, i: usize) -> f32 {
        let d = &self.data;
        match self.dtype {
            DType::F32 => f32::from_le_bytes(d[4 * i..4 * i + 4].try_into().unwrap()),
            DType::Bf16 => bf16::from_bits(u16::from_le_bytes([d[2 * i], d[2 * i + 1]])).to_f32(),
            DType::F16 => f16::from_bits(u16::from_le_bytes([d[2 * i], d[2 * i + 1]])).to_f32(),
            DType::E4m3 => e4m3_to_f32(d[i]),
            DType::E8m0 => e8m0_to_f32(d[i]),
            DType::E2m1 => panic!("E2M1 storage is packed: view it as U8"),
            _ => self.get_i64(i) as f32,
        }
    }

    /// Element i as i64 (floats truncate).
    pub fn get_i64(&self, i: usize) -> i64 {
        let d = &self.data;
        match self.dtype {
            DType::U8 | DType::E2m1 => d[i] as i64,
            DType::I32 => i32::from_le_bytes(d[4 * i..4 * i + 4].try_into().unwrap()) as i64,
            DType::U32 => u32::from_le_bytes(d[4 * i..4 * i + 4].try_into().unwrap()) as i64,
            DType::I64 => i64::from_le_bytes(d[8 * i..8 * i + 8].try_into().unwrap()),
            DType::U64 => u64::from_le_bytes(d[8 * i..8 * i + 8].try_into().unwrap()) as i64,
            _ => self.get_f32(i) as i64,
        }
    }

    /// Store f32 into element i (rounding to the dtype).
    pub fn set_f32(&mut self, i: usize, v: f32) {
        let d = &mut self.data;
        match self.dtype {
            DType::F32 => d[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
            DType::Bf16 => d[2 * i..2 * i + 2].copy_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes()),
            DType::F16 => d[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes()),
            DType::E4m3 => d[i] = f32_to_e4m3(v),
            DType::E8m0 | DType::E2m1 => panic!("{} is written as raw bytes", self.dtype),
            _ => self.set_i64(i, v as i64),
        }
    }

    /// Store i64 into element i (wrapping to the storage width).
    pub fn set_i64(&mut self, i: usize, v: i64) {
        let d = &mut self.data;
        match self.dtype {
            DType::U8 | DType::E2m1 | DType::E8m0 => d[i] = v as u8,
            DType::I32 => d[4 * i..4 * i + 4].copy_from_slice(&(v as i32).to_le_bytes()),
            DType::U32 => d[4 * i..4 * i + 4].copy_from_slice(&(v as u32).to_le_bytes()),
            DType::I64 | DType::U64 => d[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes()),
            _ => self.set_f32(i, v as f32),
        }
    }

    /// All elements as f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        (0..self.len()).map(|i| self.get_f32(i)).collect()
    }

    /// All elements as f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get_f32(i) as f64).collect()
    }

    /// Fill every element with NaN (float types) or 0xFF bytes (others): the poison written before a run so
    /// that an unwritten output element shows.
    pub fn poison(&mut self) {
        match self.dtype {
            DType::F32 | DType::Bf16 | DType::F16 => {
                for i in 0..self.len() {
                    self.set_f32(i, f32::NAN);
                }
            }
            _ => self.data.fill(0xff),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_roundtrips_every_code() {
        for code in 0u8..=255 {
            let v = e4m3_to_f32(code);
            if v.is_nan() {
                assert_eq!(code & 0x7f, 0x7f);
                continue;
            }
            let back = f32_to_e4m3(v);
            // +0 and -0 keep their sign.
            assert_eq!(back, code, "code {code:#x} value {v}");
        }
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(f32_to_e4m3(1e9), 0x7e);
        assert_eq!(f32_to_e4m3(-1e9), 0xfe);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let t = HostTensor::from_f32(DType::Bf16, &[2], &[1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0]);
        assert_eq!(t.get_f32(0), 1.0);
        assert_eq!(t.get_f32(1), 1.0 + 4.0 / 256.0);
    }

    #[test]
    fn poison_marks_floats_nan() {
        let mut t = HostTensor::from_f32(DType::Bf16, &[3], &[1.0, 2.0, 3.0]);
        t.poison();
        assert!(t.to_f32_vec().iter().all(|v| v.is_nan()));
        let mut t = HostTensor::from_i64(DType::I32, &[2], &[1, 2]);
        t.poison();
        assert_eq!(t.get_i64(0), -1);
    }
}
