//! Where launches go and where kernels load: the caller's streams and contexts.

use k3k_runtime::cudarc::driver::sys::CUstream;
use k3k_runtime::{CudaContext, CudaStream, Gpu};
use std::sync::Arc;

/// A stream a launch is enqueued on: a cudarc [`CudaStream`] (or an `Arc` of one), a raw `CUstream` behind
/// [`RawStream`], or k3k's [`Gpu`] (its main stream). The stream must belong to the context the kernel was
/// loaded in; a launch on another context's stream is refused with a typed error.
///
/// # Safety
/// An implementor's `cu_stream` returns a valid stream handle (or null, the legacy default stream) that stays
/// valid while the implementor lives.
pub unsafe trait AsStream {
    /// The driver handle.
    fn cu_stream(&self) -> CUstream;
}

// SAFETY: a live stream owned by the value.
unsafe impl AsStream for CudaStream {
    fn cu_stream(&self) -> CUstream {
        CudaStream::cu_stream(self)
    }
}
// SAFETY: a live stream owned by the value.
unsafe impl AsStream for Arc<CudaStream> {
    fn cu_stream(&self) -> CUstream {
        CudaStream::cu_stream(self)
    }
}
// SAFETY: a live stream owned by the value.
unsafe impl AsStream for Gpu {
    fn cu_stream(&self) -> CUstream {
        self.stream.cu_stream()
    }
}

/// A raw driver stream handle (`CUstream`, or a `cudaStream_t` of the runtime API: the same handle), for a
/// caller whose streams come from another library (a framework's current stream, a C++ engine).
#[derive(Clone, Copy, Debug)]
pub struct RawStream(CUstream);

impl RawStream {
    /// Wrap a stream handle.
    ///
    /// # Safety
    /// `stream` must be a valid stream (or null, the legacy default stream of the current context) that
    /// outlives every launch enqueued through this value.
    pub unsafe fn new(stream: CUstream) -> Self {
        RawStream(stream)
    }
}

// SAFETY: `RawStream::new`'s caller vouched for the handle.
unsafe impl AsStream for RawStream {
    fn cu_stream(&self) -> CUstream {
        self.0
    }
}

/// A CUDA context kernels are loaded in: a cudarc [`CudaContext`], the context of a cudarc stream, or k3k's
/// [`Gpu`]. Loading binds the context to the calling thread (as every cudarc call does) and changes nothing
/// else of it.
pub trait AsContext {
    /// The context.
    fn context(&self) -> &Arc<CudaContext>;
}

impl AsContext for Arc<CudaContext> {
    fn context(&self) -> &Arc<CudaContext> {
        self
    }
}
impl AsContext for CudaStream {
    fn context(&self) -> &Arc<CudaContext> {
        CudaStream::context(self)
    }
}
impl AsContext for Arc<CudaStream> {
    fn context(&self) -> &Arc<CudaContext> {
        CudaStream::context(self)
    }
}
impl AsContext for Gpu {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}

// SAFETY: forwards to the referent's valid handle.
unsafe impl<T: AsStream + ?Sized> AsStream for &T {
    fn cu_stream(&self) -> CUstream {
        (**self).cu_stream()
    }
}
impl<T: AsContext + ?Sized> AsContext for &T {
    fn context(&self) -> &Arc<CudaContext> {
        (**self).context()
    }
}
