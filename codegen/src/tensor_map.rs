//! Host side of the TMA descriptors ([`k3k_ir::tma`]): one `CUtensorMap` per [`TensorMapDecl`] of a kernel,
//! encoded with the driver's `cuTensorMapEncodeTiled` from the launch's tensor shapes and device addresses,
//! and passed by value after the symbols (the renderer's `const __grid_constant__ k3k::TensorMap` arguments).
//! The encoding's preconditions are checked first, so a bad argument is an error naming it rather than the
//! driver's `CUDA_ERROR_INVALID_VALUE`.

use cudarc::driver::DeviceRepr;
use cudarc::driver::sys::{
    CUresult, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave, CUtensorMapL2promotion,
    CUtensorMapSwizzle, cuTensorMapEncodeTiled,
};
use k3k_ir::*;

/// A `CUtensorMap` as a kernel argument (128 bytes, 64-byte aligned, passed by value).
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct TensorMapArg(pub CUtensorMap);

// SAFETY: a plain-old-data 128-byte struct, passed by value exactly as the kernel declares it.
unsafe impl DeviceRepr for TensorMapArg {}

/// Why a tensor map could not be encoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TensorMapError {
    #[error("tensor map `{map}` of kernel `{kernel}`: tensor `{arg}` base address {addr:#x} is not 16-byte aligned")]
    Misaligned { kernel: String, map: String, arg: String, addr: u64 },
    #[error(
        "tensor map `{map}` of kernel `{kernel}`: tensor `{arg}` dim {dim} has a stride of {bytes} bytes, not a \
         multiple of 16 (the copy engine needs 16-byte strides: pad the row)"
    )]
    Stride { kernel: String, map: String, arg: String, dim: usize, bytes: u64 },
    #[error("tensor map `{map}` of kernel `{kernel}`: tensor `{arg}`: {why}")]
    Shape { kernel: String, map: String, arg: String, why: String },
    #[error("tensor map `{map}` of kernel `{kernel}` over tensor `{arg}`: cuTensorMapEncodeTiled failed: {err}")]
    Encode { kernel: String, map: String, arg: String, err: String },
}

/// The driver's element type of a dtype.
fn data_type(d: DType) -> Option<CUtensorMapDataType> {
    use CUtensorMapDataType::*;
    Some(match d {
        DType::Bf16 => CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F16 => CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::F32 => CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::I32 => CU_TENSOR_MAP_DATA_TYPE_INT32,
        DType::U32 => CU_TENSOR_MAP_DATA_TYPE_UINT32,
        DType::I64 => CU_TENSOR_MAP_DATA_TYPE_INT64,
        DType::U64 => CU_TENSOR_MAP_DATA_TYPE_UINT64,
        DType::U8 | DType::E4m3 | DType::E8m0 => CU_TENSOR_MAP_DATA_TYPE_UINT8,
        DType::E2m1 => return None,
    })
}

/// The driver's parameters of one map, innermost first: dims, byte strides of dims 1.., box.
pub type MapParams = (Vec<u64>, Vec<u64>, Vec<u32>);

/// The driver's parameters of one map, after the checks. Pure (no driver call), so it is tested without a GPU.
pub fn map_params(k: &Kernel, m: &TensorMapDecl, shape: &[usize], addr: u64) -> Result<MapParams, TensorMapError> {
    let p = &k.tensors[m.tensor.0 as usize];
    let (kernel, map, arg) = (k.name.clone(), m.name.clone(), p.name.clone());
    if !addr.is_multiple_of(16) {
        return Err(TensorMapError::Misaligned { kernel, map, arg, addr });
    }
    let rank = m.box_dims.len();
    if shape.len() != rank || !(1..=5).contains(&rank) {
        let why = format!("rank {} for a map of rank {rank} (1..=5)", shape.len());
        return Err(TensorMapError::Shape { kernel, map, arg, why });
    }
    let dims: Vec<u64> = (0..rank).map(|i| shape[rank - 1 - i] as u64).collect();
    if let Some(i) = dims.iter().position(|&d| d == 0 || d > 1 << 32) {
        let why = format!("dim {} of {} elements: the copy engine needs 1..=2^32", rank - 1 - i, dims[i]);
        return Err(TensorMapError::Shape { kernel, map, arg, why });
    }
    if let Some(b) = m.box_dims.iter().find(|&&b| b == 0 || b > TMA_MAX_BOX) {
        let why = format!("box dim {b} outside 1..={TMA_MAX_BOX}");
        return Err(TensorMapError::Shape { kernel, map, arg, why });
    }
    let mut strides = vec![];
    let mut s = p.dtype.storage_bytes(1) as u64;
    for (i, d) in dims.iter().enumerate().take(rank - 1) {
        s *= d;
        if !s.is_multiple_of(16) || s >= 1 << 40 {
            return Err(TensorMapError::Stride { kernel, map, arg, dim: rank - 2 - i, bytes: s });
        }
        strides.push(s);
    }
    Ok((dims, strides, m.box_dims.clone()))
}

/// Encode every tensor map of `k` for a launch with these tensor shapes and device addresses (kernel order).
/// A map over an empty tensor is passed zeroed (nothing can be copied from it).
pub fn encode(k: &Kernel, shapes: &[&[usize]], addrs: &[u64]) -> Result<Vec<TensorMapArg>, TensorMapError> {
    k.tensor_maps
        .iter()
        .map(|m| {
            let t = m.tensor.0 as usize;
            if shapes[t].contains(&0) {
                // An empty tensor has nothing to copy (a program issues no copies from it); the driver cannot
                // encode it, and a zeroed map faults rather than reads anything if used.
                // SAFETY: CUtensorMap is plain old data.
                return Ok(TensorMapArg(unsafe { std::mem::zeroed() }));
            }
            let (dims, strides, boxd) = map_params(k, m, shapes[t], addrs[t])?;
            let p = &k.tensors[t];
            let err = |e: String| TensorMapError::Encode {
                kernel: k.name.clone(),
                map: m.name.clone(),
                arg: p.name.clone(),
                err: e,
            };
            let dt = data_type(p.dtype).ok_or_else(|| err(format!("no copy-engine type for {}", p.dtype)))?;
            let swizzle = match m.swizzle {
                Swizzle::Xor16B => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                Swizzle::None => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
                Swizzle::Xor16BPairs => return Err(err("no copy-engine layout for Xor16BPairs (validated)".into())),
            };
            let elem_strides = vec![1u32; boxd.len()];
            let mut out = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
            // SAFETY: every pointer is to a live array of `rank` (strides: rank - 1) elements; the output is a
            // 128-byte aligned CUtensorMap the driver fills; the global address is a device pointer of the
            // tensor (checked aligned), which the map only records.
            let r = unsafe {
                cuTensorMapEncodeTiled(
                    out.as_mut_ptr(),
                    dt,
                    boxd.len() as u32,
                    addrs[t] as *mut std::ffi::c_void,
                    dims.as_ptr(),
                    strides.as_ptr(),
                    boxd.as_ptr(),
                    elem_strides.as_ptr(),
                    CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                    swizzle,
                    CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
                )
            };
            if r != CUresult::CUDA_SUCCESS {
                return Err(err(format!("{r:?}")));
            }
            // SAFETY: the driver wrote the map (CUDA_SUCCESS).
            Ok(TensorMapArg(unsafe { out.assume_init() }))
        })
        .collect()
}
