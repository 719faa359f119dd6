//! Element types of tensors and tiles.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An element type. `E2m1` is a 4-bit type: tensors of it are stored two per byte (element 2i in the low
/// nibble), so programs usually view such storage as `U8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DType {
    Bf16,
    F16,
    F32,
    /// fp8 E4M3 (bias 7, max 448, NaN = S.1111.111, no inf).
    E4m3,
    /// fp4 E2M1 (bias 1, max 6, no inf/NaN); 4 bits.
    E2m1,
    /// E8M0 shared scale: 2^(e-127), 255 = NaN.
    E8m0,
    U8,
    I32,
    U32,
    I64,
    U64,
}

impl DType {
    /// Storage size in bits of one element.
    pub fn bits(self) -> u32 {
        match self {
            DType::E2m1 => 4,
            DType::E4m3 | DType::E8m0 | DType::U8 => 8,
            DType::Bf16 | DType::F16 => 16,
            DType::F32 | DType::I32 | DType::U32 => 32,
            DType::I64 | DType::U64 => 64,
        }
    }

    /// Storage size in bytes of one element (4-bit types round up to 1; use [`DType::storage_bytes`]).
    pub fn size_bytes(self) -> usize {
        (self.bits() as usize).div_ceil(8)
    }

    /// Bytes needed to store `n` elements.
    pub fn storage_bytes(self, n: usize) -> usize {
        (n * self.bits() as usize).div_ceil(8)
    }

    /// True for types whose scalar value the IR treats as a float (f32 arithmetic).
    pub fn is_float(self) -> bool {
        matches!(self, DType::Bf16 | DType::F16 | DType::F32)
    }

    /// True for integer storage types.
    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I32 | DType::U32 | DType::I64 | DType::U64)
    }

    /// The short lowercase name used by the printer and in results files.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::E4m3 => "e4m3",
            DType::E2m1 => "e2m1",
            DType::E8m0 => "e8m0",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
        }
    }

    /// All dtypes, for listings and tests.
    pub const ALL: [DType; 11] = [
        DType::Bf16,
        DType::F16,
        DType::F32,
        DType::E4m3,
        DType::E2m1,
        DType::E8m0,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ];
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The type of a scalar or element expression. Integers are 64-bit, floats are f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScalarTy {
    Int,
    Float,
    Bool,
}

impl ScalarTy {
    /// The expression type a loaded element of `dtype` has.
    pub fn of_dtype(dtype: DType) -> ScalarTy {
        if dtype.is_float() || matches!(dtype, DType::E4m3 | DType::E2m1 | DType::E8m0) {
            ScalarTy::Float
        } else {
            ScalarTy::Int
        }
    }
}

impl fmt::Display for ScalarTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScalarTy::Int => "int",
            ScalarTy::Float => "float",
            ScalarTy::Bool => "bool",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_of_packed_fp4() {
        assert_eq!(DType::E2m1.storage_bytes(32), 16);
        assert_eq!(DType::E2m1.storage_bytes(3), 2);
        assert_eq!(DType::Bf16.storage_bytes(3), 6);
        assert_eq!(DType::F32.size_bytes(), 4);
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = DType::ALL.iter().map(|d| d.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DType::ALL.len());
    }
}
