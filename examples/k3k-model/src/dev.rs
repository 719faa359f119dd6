//! The model's device buffers: cudarc allocations on its own stream, each with the dtype and shape it holds,
//! and the views k3k's launchers take.

use crate::host::Res;
use k3k_build::rt::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use k3k_build::rt::{DType, Elem, HostTensor, View, ViewMut};
use std::sync::Arc;

/// One device buffer of the model.
pub struct Buf {
    pub d: CudaSlice<u8>,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// The residual stream around layer `l` of `xs` (the model's hidden states between layers): its input `xs[l]` and
/// its output `xs[l + 1]`.
pub fn layer_io(xs: &mut [Buf], l: usize) -> (&Buf, &mut Buf) {
    let (before, after) = xs.split_at_mut(l + 1);
    (&before[l], &mut after[0])
}

impl Buf {
    /// A buffer poisoned with 0xFF bytes (NaN in every float format, -1 in i32): whatever a kernel fails to
    /// write shows up in the checks.
    pub fn alloc(s: &Arc<CudaStream>, dtype: DType, shape: &[usize]) -> Res<Buf> {
        let n: usize = shape.iter().product();
        let d = s.clone_htod(&vec![0xffu8; dtype.storage_bytes(n)])?;
        Ok(Buf { d, dtype, shape: shape.to_vec() })
    }

    /// Values rounded to `dtype` and uploaded.
    pub fn upload(s: &Arc<CudaStream>, dtype: DType, shape: &[usize], vals: &[f32]) -> Res<Buf> {
        Self::from_bytes(s, dtype, shape, HostTensor::from_f32(dtype, shape, vals).data)
    }

    /// i32 values uploaded.
    pub fn upload_i32(s: &Arc<CudaStream>, shape: &[usize], vals: &[i32]) -> Res<Buf> {
        Self::from_bytes(s, DType::I32, shape, vals.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    /// Raw bytes (MXFP4 codes and scales) uploaded.
    pub fn from_bytes(s: &Arc<CudaStream>, dtype: DType, shape: &[usize], bytes: Vec<u8>) -> Res<Buf> {
        let n: usize = shape.iter().product();
        if bytes.len() != dtype.storage_bytes(n) {
            return Err(format!("{} bytes for a {} tensor of shape {shape:?}", bytes.len(), dtype.name()).into());
        }
        Ok(Buf { d: s.clone_htod(&bytes)?, dtype, shape: shape.to_vec() })
    }

    /// Every value, as f32.
    pub fn fetch(&self, s: &Arc<CudaStream>) -> Res<Vec<f32>> {
        let t = HostTensor::from_bytes(self.dtype, &self.shape, s.clone_dtoh(&self.d)?);
        Ok((0..t.len()).map(|i| t.get_f32(i)).collect())
    }

    /// Every value of an i32 buffer.
    pub fn fetch_i32(&self, s: &Arc<CudaStream>) -> Res<Vec<i32>> {
        let b = s.clone_dtoh(&self.d)?;
        Ok(b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// The rows `rows` (of the leading dim) as f32.
    pub fn fetch_rows(&self, s: &Arc<CudaStream>, rows: std::ops::Range<usize>) -> Res<Vec<f32>> {
        let row: usize = self.shape[1..].iter().product();
        let bytes = self.dtype.storage_bytes(row);
        let part = self.d.slice(rows.start * bytes..rows.end * bytes);
        let shape = [rows.len(), row];
        let t = HostTensor::from_bytes(self.dtype, &shape, s.clone_dtoh(&part)?);
        Ok((0..t.len()).map(|i| t.get_f32(i)).collect())
    }

    /// Copy of another buffer of the same size (device to device, on the stream).
    pub fn copy_from(&mut self, s: &Arc<CudaStream>, src: &Buf) -> Res<()> {
        s.memcpy_dtod(&src.d, &mut self.d)?;
        Ok(())
    }

    /// The buffer as a launcher's input, with its own shape.
    pub fn v<'a, T: Elem>(&'a self, s: &'a CudaStream) -> Res<View<'a, T>> {
        self.dtype_is::<T>()?;
        Ok(View::of(&self.d, s, &self.shape)?)
    }

    /// The buffer as a launcher's input of another (no larger) shape.
    pub fn v_as<'a, T: Elem>(&'a self, s: &'a CudaStream, shape: &[usize]) -> Res<View<'a, T>> {
        self.dtype_is::<T>()?;
        Ok(View::of(&self.d, s, shape)?)
    }

    /// The buffer as a launcher's output, with its own shape.
    pub fn m<'a, T: Elem>(&'a mut self, s: &'a CudaStream) -> Res<ViewMut<'a, T>> {
        self.dtype_is::<T>()?;
        Ok(ViewMut::of(&mut self.d, s, &self.shape)?)
    }

    /// The buffer as a launcher's output of another (no larger) shape.
    pub fn m_as<'a, T: Elem>(&'a mut self, s: &'a CudaStream, shape: &[usize]) -> Res<ViewMut<'a, T>> {
        self.dtype_is::<T>()?;
        Ok(ViewMut::of(&mut self.d, s, shape)?)
    }

    /// The device address, for the engine's own kernels.
    pub fn ptr(&self, s: &CudaStream) -> u64 {
        self.d.device_ptr(s).0
    }

    fn dtype_is<T: Elem>(&self) -> Res<()> {
        if T::DTYPE != self.dtype {
            return Err(format!("a {} buffer used as {}", self.dtype.name(), T::DTYPE.name()).into());
        }
        Ok(())
    }
}
