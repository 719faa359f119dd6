//! # k3k-runtime: running generated kernels on a CUDA GPU
//!
//! A thin safe layer over cudarc's driver API: open a device (with typed errors when there is no driver or
//! no GPU, never a panic), move [`HostTensor`]s to and from the device, load compiled modules, launch an IR
//! kernel with its arguments checked against the kernel's symbolic shapes, and time launches with CUDA events.

mod device;
mod timing;

/// The cudarc crate k3k is built on: a caller uses this one so that its streams and buffers are the types the
/// launchers take.
pub use cudarc;
/// cudarc's context, for callers that load kernels in their own.
pub use cudarc::driver::CudaContext;
/// The driver API's raw handles, for callers that pass their own streams.
pub use cudarc::driver::sys::{CUcontext, CUstream};
/// The stream and event types of [`Gpu::side_stream`] and [`Gpu::new_sync_event`].
pub use cudarc::driver::{CudaEvent, CudaStream};
pub use device::{ArgRef, DeviceTensor, Gpu, GpuInfo, LoadedKernel, bind_args, launch_bound, launch_raw, load_kernel};
pub use timing::{TimingOptions, median};

use k3k_codegen::CodegenError;
use k3k_ir::BindError;

/// Why something failed on (or for lack of) a GPU.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "no CUDA driver: libcuda.so could not be loaded (this machine has no NVIDIA driver; k3k still compiles \
         and verifies kernels on the CPU)"
    )]
    NoDriver,
    #[error("no CUDA GPU found (the driver reports {count} devices{extra})")]
    NoGpu { count: i32, extra: String },
    #[error("CUDA call failed during {what}: {err}")]
    Cuda { what: String, err: String },
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    #[error("kernel `{kernel}` needs {need} bytes of shared memory; this GPU allows {limit}")]
    SharedMemory { kernel: String, need: usize, limit: usize },
    #[error(
        "kernel `{kernel}` was loaded in another CUDA context than the stream it was launched on (load it once per \
         context, on a stream's context)"
    )]
    WrongContext { kernel: String },
    #[error("tensor `{arg}` base address {addr:#x} is not 16-byte aligned")]
    Misaligned { arg: String, addr: u64 },
    #[error(transparent)]
    TensorMap(#[from] k3k_codegen::tensor_map::TensorMapError),
}

pub(crate) fn cuda<T>(what: &str, r: Result<T, cudarc::driver::DriverError>) -> Result<T, RuntimeError> {
    r.map_err(|e| RuntimeError::Cuda { what: what.to_string(), err: format!("{e:?}") })
}
