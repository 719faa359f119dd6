//! Views of device memory the caller owns, typed by element, as launch arguments.

use super::{Elem, Error};
use k3k_runtime::ArgRef;
use k3k_runtime::cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use std::marker::PhantomData;

/// The most dims a view has (k3k's kernels take at most 5).
pub const MAX_RANK: usize = 6;

/// A shape held inline (a view is made per launch; it allocates nothing).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    dims: [usize; MAX_RANK],
    rank: u8,
}

impl Shape {
    /// A shape of at most [`MAX_RANK`] dims.
    pub fn new(dims: &[usize]) -> Result<Shape, Error> {
        if dims.len() > MAX_RANK {
            return Err(Error::View {
                what: "shape".into(),
                why: format!("{dims:?} has {} dims; at most {MAX_RANK} are supported", dims.len()),
            });
        }
        let mut s = Shape { dims: [0; MAX_RANK], rank: dims.len() as u8 };
        s.dims[..dims.len()].copy_from_slice(dims);
        Ok(s)
    }
    /// The dims.
    pub fn as_slice(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }
    /// Number of elements (`None` on overflow).
    pub fn elements(&self) -> Option<usize> {
        self.as_slice().iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }
    /// Bytes a dense row-major tensor of this shape and `T` occupies.
    fn bytes<T: Elem>(&self, what: &str) -> Result<usize, Error> {
        self.elements().map(|n| T::DTYPE.storage_bytes(n)).ok_or_else(|| Error::View {
            what: what.into(),
            why: format!("shape {:?} has more elements than fit in memory", self.as_slice()),
        })
    }
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_slice())
    }
}

/// Check that `strides` (in elements, one per dim) are the dense row-major strides of `shape`: k3k's kernels
/// address their tensors densely, so any other layout must be copied by the caller first.
fn check_dense(what: &str, shape: &[usize], strides: &[usize]) -> Result<(), Error> {
    let bad = |why: String| Err(Error::View { what: what.into(), why });
    if strides.len() != shape.len() {
        return bad(format!("{} strides for a shape of {} dims {shape:?}", strides.len(), shape.len()));
    }
    let mut want = 1usize;
    for i in (0..shape.len()).rev() {
        // A dim of size 1 may carry any stride (frameworks leave them arbitrary).
        if shape[i] != 1 && strides[i] != want {
            let dense: Vec<usize> = (0..shape.len()).map(|j| shape[j + 1..].iter().product()).collect();
            return bad(format!(
                "strides {strides:?} (elements) are not the dense row-major strides {dense:?} of shape {shape:?}; k3k's \
                 kernels take dense row-major tensors"
            ));
        }
        want = want.saturating_mul(shape[i]);
    }
    Ok(())
}

fn check_size<T: Elem>(what: &str, shape: &Shape, have: usize) -> Result<(), Error> {
    let need = shape.bytes::<T>(what)?;
    if have < need {
        return Err(Error::View {
            what: what.into(),
            why: format!(
                "a {} tensor of shape {:?} needs {need} bytes; the buffer has {have}",
                T::DTYPE.name(),
                shape.as_slice()
            ),
        });
    }
    Ok(())
}

/// A device tensor a launch reads: [`View`], [`ViewMut`] or k3k's [`super::Tensor`].
pub trait In<T: Elem> {
    /// The launch argument (address, dtype, shape).
    fn arg(&self) -> ArgRef<'_>;
}

/// A device tensor a launch writes: [`ViewMut`] or k3k's [`super::Tensor`] (taken as `&mut`).
pub trait Out<T: Elem>: In<T> {}

/// A read-only view of device memory the caller owns, as a dense row-major tensor of `T` of some shape.
///
/// Made from a cudarc buffer ([`View::of`]: a `CudaSlice`, `CudaView` or `CudaViewMut` of any element type
/// whose bytes hold the tensor), or from a raw device pointer ([`View::from_raw`], `unsafe`). A view made from
/// a cudarc buffer holds cudarc's read guard for `stream`: when event tracking is on for the buffer's context,
/// `stream` waits for the buffer's last write, and the read is recorded when the view is dropped (after the
/// launch was enqueued).
pub struct View<'a, T: Elem> {
    ptr: u64,
    shape: Shape,
    _sync: Option<SyncOnDrop<'a>>,
    _t: PhantomData<&'a T>,
}

impl<'a, T: Elem> View<'a, T> {
    /// A view of `buf` (its first `shape`'s bytes) for launches on `stream`.
    pub fn of<U>(buf: &'a impl DevicePtr<U>, stream: &'a CudaStream, shape: &[usize]) -> Result<Self, Error> {
        let shape = Shape::new(shape)?;
        check_size::<T>("View::of", &shape, buf.num_bytes())?;
        let (ptr, sync) = buf.device_ptr(stream);
        Ok(View { ptr, shape, _sync: Some(sync), _t: PhantomData })
    }

    /// A view of a raw device address holding a dense row-major tensor of `shape`.
    ///
    /// # Safety
    /// `ptr` must be a device address of the context the kernels run in, with the tensor's bytes readable
    /// until every launch that reads it has run.
    pub unsafe fn from_raw(ptr: u64, shape: &[usize]) -> Result<Self, Error> {
        Ok(View { ptr, shape: Shape::new(shape)?, _sync: None, _t: PhantomData })
    }

    /// As [`View::from_raw`], with the strides (in elements) the caller's tensor has: refused with a typed
    /// error unless they are dense row-major (what a framework's non-contiguous tensor would need copied).
    ///
    /// # Safety
    /// As [`View::from_raw`].
    pub unsafe fn from_raw_strided(ptr: u64, shape: &[usize], strides: &[usize]) -> Result<Self, Error> {
        check_dense("View::from_raw_strided", shape, strides)?;
        // SAFETY: forwarded from the caller.
        unsafe { Self::from_raw(ptr, shape) }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.shape.as_slice()
    }

    /// The launch argument (as [`In::arg`]).
    pub fn arg(&self) -> ArgRef<'_> {
        In::arg(self)
    }
}

impl<T: Elem> In<T> for View<'_, T> {
    fn arg(&self) -> ArgRef<'_> {
        // SAFETY: the address was vouched for at construction (a cudarc buffer of enough bytes, or the caller
        // of an unsafe constructor).
        unsafe { ArgRef::new(self.ptr, T::DTYPE, self.shape.as_slice()) }
    }
}

/// A writable view of device memory the caller owns (see [`View`]); made from a `&mut` cudarc buffer, so the
/// borrow checker keeps other views of it away while it lives.
pub struct ViewMut<'a, T: Elem> {
    ptr: u64,
    shape: Shape,
    _sync: Option<SyncOnDrop<'a>>,
    _t: PhantomData<&'a mut T>,
}

impl<'a, T: Elem> ViewMut<'a, T> {
    /// A writable view of `buf` (its first `shape`'s bytes) for launches on `stream`.
    pub fn of<U>(buf: &'a mut impl DevicePtrMut<U>, stream: &'a CudaStream, shape: &[usize]) -> Result<Self, Error> {
        let shape = Shape::new(shape)?;
        check_size::<T>("ViewMut::of", &shape, buf.num_bytes())?;
        let (ptr, sync) = buf.device_ptr_mut(stream);
        Ok(ViewMut { ptr, shape, _sync: Some(sync), _t: PhantomData })
    }

    /// A writable view of a raw device address holding a dense row-major tensor of `shape`.
    ///
    /// # Safety
    /// `ptr` must be a device address of the context the kernels run in, with the tensor's bytes readable and
    /// writable, not used by anything else, until every launch that uses it has run.
    pub unsafe fn from_raw(ptr: u64, shape: &[usize]) -> Result<Self, Error> {
        Ok(ViewMut { ptr, shape: Shape::new(shape)?, _sync: None, _t: PhantomData })
    }

    /// As [`ViewMut::from_raw`], refusing strides that are not dense row-major.
    ///
    /// # Safety
    /// As [`ViewMut::from_raw`].
    pub unsafe fn from_raw_strided(ptr: u64, shape: &[usize], strides: &[usize]) -> Result<Self, Error> {
        check_dense("ViewMut::from_raw_strided", shape, strides)?;
        // SAFETY: forwarded from the caller.
        unsafe { Self::from_raw(ptr, shape) }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.shape.as_slice()
    }

    /// The launch argument (as [`In::arg`]).
    pub fn arg(&self) -> ArgRef<'_> {
        In::arg(self)
    }
}

impl<T: Elem> In<T> for ViewMut<'_, T> {
    fn arg(&self) -> ArgRef<'_> {
        // SAFETY: as for `View`.
        unsafe { ArgRef::new(self.ptr, T::DTYPE, self.shape.as_slice()) }
    }
}
impl<T: Elem> Out<T> for ViewMut<'_, T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::{Bf16, F32};

    #[test]
    fn raw_views_check_rank_and_strides() {
        // SAFETY: the views are never launched.
        unsafe {
            let v = View::<Bf16>::from_raw(0x1000, &[4, 8]).unwrap();
            assert_eq!(v.arg().shape(), &[4, 8]);
            assert_eq!(v.arg().dtype(), k3k_ir::DType::Bf16);
            assert!(View::<F32>::from_raw_strided(0x1000, &[4, 8], &[8, 1]).is_ok());
            // A size-1 dim may carry any stride.
            assert!(View::<F32>::from_raw_strided(0x1000, &[1, 8], &[123, 1]).is_ok());
            let e = View::<F32>::from_raw_strided(0x1000, &[4, 8], &[1, 4]).err().unwrap();
            assert!(e.to_string().contains("dense row-major strides [8, 1]"), "{e}");
            let e = ViewMut::<F32>::from_raw_strided(0x1000, &[4, 8], &[16, 1]).err().unwrap();
            assert!(e.to_string().contains("[16, 1]"), "{e}");
            assert!(ViewMut::<F32>::from_raw_strided(0x1000, &[4, 8], &[8]).is_err());
            let e = View::<F32>::from_raw(0x1000, &[1; 7]).err().unwrap();
            assert!(e.to_string().contains("at most 6"), "{e}");
        }
    }

    #[test]
    fn size_check_counts_storage_bytes() {
        let s = Shape::new(&[3, 64]).unwrap();
        assert!(check_size::<Bf16>("t", &s, 384).is_ok());
        let e = check_size::<Bf16>("t", &s, 383).unwrap_err();
        assert!(e.to_string().contains("needs 384 bytes; the buffer has 383"), "{e}");
        // Packed FP4: two values a byte.
        assert!(check_size::<crate::rt::E2m1>("t", &s, 96).is_ok());
        let huge = Shape::new(&[usize::MAX, 2]).unwrap();
        assert!(check_size::<F32>("t", &huge, usize::MAX).is_err());
    }
}
