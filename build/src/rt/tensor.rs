//! Element types and k3k's own device tensor.

use super::Error;
use k3k_ir::{DType, HostTensor};
use k3k_runtime::{ArgRef, DeviceTensor, Gpu};
use std::marker::PhantomData;

mod sealed {
    pub trait Sealed {}
}

/// An element type a [`Tensor`] can hold (a marker type per [`DType`]).
pub trait Elem: sealed::Sealed + Send + Sync + 'static {
    const DTYPE: DType;
}

macro_rules! elems {
    ($($t:ident => $d:ident),* $(,)?) => {$(
        #[doc = concat!("Marker for `", stringify!($d), "` elements.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $t;
        impl sealed::Sealed for $t {}
        impl Elem for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

elems!(Bf16 => Bf16, F16 => F16, F32 => F32, E4m3 => E4m3, E2m1 => E2m1, E8m0 => E8m0, U8 => U8, I32 => I32,
       U32 => U32, I64 => I64, U64 => U64);

/// A device tensor of element type `T` (contiguous, row-major).
pub struct Tensor<T: Elem> {
    inner: DeviceTensor,
    _t: PhantomData<T>,
}

impl<T: Elem> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor<{}>{:?}", T::DTYPE.name(), self.inner.shape)
    }
}

impl<T: Elem> Tensor<T> {
    /// Wrap a device tensor, checking its dtype.
    pub fn from_device(t: DeviceTensor) -> Result<Self, Error> {
        if t.dtype != T::DTYPE {
            return Err(Error::DType { what: "Tensor::from_device".into(), expected: T::DTYPE, got: t.dtype });
        }
        Ok(Tensor { inner: t, _t: PhantomData })
    }
    /// Copy a host tensor to the device (its dtype must be `T`'s).
    pub fn upload(gpu: &Gpu, t: &HostTensor) -> Result<Self, Error> {
        if t.dtype != T::DTYPE {
            return Err(Error::DType { what: "Tensor::upload".into(), expected: T::DTYPE, got: t.dtype });
        }
        Self::from_device(gpu.upload(t)?)
    }
    /// Upload f32 values, rounded to `T` (floats round to nearest even; ints truncate).
    pub fn from_f32(gpu: &Gpu, shape: &[usize], vals: &[f32]) -> Result<Self, Error> {
        Self::upload(gpu, &HostTensor::from_f32(T::DTYPE, shape, vals))
    }
    /// Upload integer values (for integer `T`).
    pub fn from_i64(gpu: &Gpu, shape: &[usize], vals: &[i64]) -> Result<Self, Error> {
        Self::upload(gpu, &HostTensor::from_i64(T::DTYPE, shape, vals))
    }
    /// A tensor of zero bytes.
    pub fn zeros(gpu: &Gpu, shape: &[usize]) -> Result<Self, Error> {
        Self::upload(gpu, &HostTensor::zeros(T::DTYPE, shape))
    }
    /// A tensor filled with 0xFF bytes (NaN in every float format): an element a kernel fails to write shows.
    pub fn poisoned(gpu: &Gpu, shape: &[usize]) -> Result<Self, Error> {
        Self::from_device(gpu.poisoned(T::DTYPE, shape)?)
    }
    /// Copy back to the host.
    pub fn download(&self, gpu: &Gpu) -> Result<HostTensor, Error> {
        Ok(gpu.download(&self.inner)?)
    }
    /// Copy back as f32 values (waits for queued work).
    pub fn to_f32_vec(&self, gpu: &Gpu) -> Result<Vec<f32>, Error> {
        let h = self.download(gpu)?;
        Ok((0..h.len()).map(|i| h.get_f32(i)).collect())
    }
    /// Fill with 0xFF bytes again.
    pub fn poison(&self, gpu: &Gpu) -> Result<(), Error> {
        Ok(gpu.poison(&self.inner)?)
    }
    /// The same storage under another shape with the same number of elements.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Self, Error> {
        let n: usize = shape.iter().product();
        if n != self.inner.len() {
            return Err(Error::Shape {
                plan: "reshape".into(),
                buffer: "tensor".into(),
                expected: self.inner.shape.clone(),
                got: shape.to_vec(),
            });
        }
        self.inner.shape = shape.to_vec();
        Ok(self)
    }
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.inner.shape
    }
    /// The untyped device tensor.
    pub fn dev(&self) -> &DeviceTensor {
        &self.inner
    }
    /// Unwrap.
    pub fn into_device(self) -> DeviceTensor {
        self.inner
    }
}

impl<T: Elem> super::In<T> for Tensor<T> {
    fn arg(&self) -> ArgRef<'_> {
        self.inner.arg()
    }
}
impl<T: Elem> super::Out<T> for Tensor<T> {}
