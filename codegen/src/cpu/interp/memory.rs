//! Storage of the interpreter: scalar values, the rounding a store into each dtype applies, and shared
//! buffers (exact integers for integer buffers, so u64 histograms and bit patterns survive).

use half::{bf16, f16};
use k3k_ir::DType;
use k3k_ir::tensor::{e4m3_to_f32, f32_to_e4m3};

/// A scalar value of an expression.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum V {
    I(i64),
    F(f32),
    B(bool),
}

impl V {
    /// As an int (floats truncate, like C).
    pub(crate) fn i(self) -> i64 {
        match self {
            V::I(v) => v,
            V::F(v) => v as i64,
            V::B(v) => v as i64,
        }
    }
    /// As a float.
    pub(crate) fn f(self) -> f32 {
        match self {
            V::F(v) => v,
            V::I(v) => v as f32,
            V::B(v) => v as i64 as f32,
        }
    }
    /// As a bool (the validator guarantees the type).
    pub(super) fn b(self) -> bool {
        match self {
            V::B(v) => v,
            _ => panic!("validated: bool expected"),
        }
    }
}

/// Round to what a register or memory element of float `dtype` keeps.
#[inline]
pub(crate) fn round_to(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::Bf16 => bf16::from_f32(v).to_f32(),
        DType::F16 => f16::from_f32(v).to_f32(),
        DType::E4m3 => e4m3_to_f32(f32_to_e4m3(v)),
        _ => v,
    }
}

/// Wrap an integer to what an element of integer `dtype` keeps (u64 keeps its bits in an i64, as
/// `HostTensor::get_i64` gives them).
#[inline]
pub(crate) fn wrap_int(dtype: DType, v: i64) -> i64 {
    match dtype {
        DType::U8 => v as u8 as i64,
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        _ => v,
    }
}

/// The contents of one shared buffer (all its tiles, row-major, logical layout).
#[derive(Clone, Debug)]
pub(super) enum SharedMem {
    /// Float storage: values already rounded to the buffer's dtype.
    Float(Vec<f64>),
    /// Integer storage: values already wrapped to the buffer's dtype.
    Int(Vec<i64>),
}

impl SharedMem {
    /// Zeroed storage of `len` elements of `dtype`.
    pub(super) fn new(dtype: DType, len: usize) -> Self {
        if dtype.is_int() { SharedMem::Int(vec![0; len]) } else { SharedMem::Float(vec![0.0; len]) }
    }

    /// Element `i` as an expression value.
    pub(super) fn get(&self, i: usize) -> V {
        match self {
            SharedMem::Float(m) => V::F(m[i] as f32),
            SharedMem::Int(m) => V::I(m[i]),
        }
    }

    /// Element `i` as a tile value (ints exactly as f64).
    pub(super) fn get_f64(&self, i: usize) -> f64 {
        match self {
            SharedMem::Float(m) => m[i],
            SharedMem::Int(m) => m[i] as f64,
        }
    }

    /// Store `v` into element `i`, converting it as a store into `dtype` does.
    pub(super) fn set(&mut self, dtype: DType, i: usize, v: V) {
        match self {
            SharedMem::Float(m) => m[i] = round_to(dtype, v.f()) as f64,
            SharedMem::Int(m) => m[i] = wrap_int(dtype, v.i()),
        }
    }

    /// Fill with the poison of a clobbered aliased buffer: NaN, or [`k3k_ir::SHARED_POISON`] wrapped.
    pub(super) fn poison(&mut self, dtype: DType) {
        match self {
            SharedMem::Float(m) => m.fill(f64::NAN),
            SharedMem::Int(m) => m.fill(wrap_int(dtype, k3k_ir::SHARED_POISON)),
        }
    }

    /// Store a tile value (f64) into element `i` of `dtype` storage.
    pub(super) fn set_f64(&mut self, dtype: DType, i: usize, v: f64) {
        match self {
            SharedMem::Float(m) => m[i] = round_to(dtype, v as f32) as f64,
            SharedMem::Int(m) => m[i] = wrap_int(dtype, v as i64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_convert_like_the_gpu() {
        assert_eq!(wrap_int(DType::U32, -1), 0xffff_ffff);
        assert_eq!(wrap_int(DType::I32, 0x1_0000_0005), 5);
        assert_eq!(wrap_int(DType::U8, 257), 1);
        assert_eq!(round_to(DType::Bf16, 1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round_to(DType::E4m3, 1000.0), 448.0);
        let mut m = SharedMem::new(DType::U64, 2);
        m.set(DType::U64, 1, V::I(-1));
        assert_eq!(m.get(1), V::I(-1));
    }
}
