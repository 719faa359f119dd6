//! Device, buffers, modules and launches.

use crate::{RuntimeError, cuda};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute_enum};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, PushKernelArg};
use k3k_codegen::CompiledModule;
use k3k_ir::{HostTensor, Kernel, SymValue, TensorShape, bind, eval_grid};
use std::sync::{Arc, OnceLock};

/// What a GPU is (part of tuning keys and reports).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub shared_optin_bytes: usize,
    pub l2_bytes: usize,
    pub memory_bytes: usize,
    pub driver_version: i32,
}

/// An open GPU: the main stream (every upload, download, timing event and launch goes there), and on demand one
/// side stream for plans whose steps overlap (see [`Gpu::side_stream`]).
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub info: GpuInfo,
    side: OnceLock<Arc<CudaStream>>,
}

/// A tensor in device memory.
pub struct DeviceTensor {
    pub buf: CudaSlice<u8>,
    pub dtype: k3k_ir::DType,
    pub shape: Vec<usize>,
    pub ptr: u64,
}

impl DeviceTensor {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of payload.
    pub fn bytes(&self) -> usize {
        self.dtype.storage_bytes(self.len())
    }
}

/// A kernel loaded into the context, ready to launch.
pub struct LoadedKernel {
    pub kernel: Kernel,
    pub func: CudaFunction,
    pub shared_bytes: usize,
    pub registers: i32,
    pub local_bytes: i32,
    /// The value a launch gives the kernel's `NUM_SMS` symbol (the size of a persistent grid): the SM count, or for
    /// a kernel launched in thread-block clusters the CTAs that can be resident at once in whole clusters
    /// (`cuOccupancyMaxActiveClusters` x the cluster size). A persistent grid of `SM count` CTAs in clusters of two
    /// need not fit at once (a cluster lives in one GPC; a GPC with an odd number of free SMs leaves one idle), and
    /// the clusters left over would run as a second wave. (On the H200 this sizing did not change the CLUSTER=2
    /// GEMM's time: session 6 calls 2-3, NOTES.md.)
    pub persistent_ctas: u32,
    /// CTAs of this kernel that fit on one SM at once (`cuOccupancyMaxActiveBlocksPerMultiprocessor` at its block
    /// size and shared memory): a persistent grid of more per SM runs its surplus after the others.
    pub blocks_per_sm: u32,
}

impl Gpu {
    /// True when a CUDA driver library can be loaded on this machine.
    pub fn driver_present() -> bool {
        // SAFETY: probing dlopen; no CUDA call is made.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }

    /// Open GPU `ordinal`.
    pub fn open(ordinal: usize) -> Result<Gpu, RuntimeError> {
        if !Self::driver_present() {
            return Err(RuntimeError::NoDriver);
        }
        let count =
            CudaContext::device_count().map_err(|e| RuntimeError::NoGpu { count: 0, extra: format!(": {e:?}") })?;
        if count <= ordinal as i32 {
            return Err(RuntimeError::NoGpu { count, extra: format!(", ordinal {ordinal} requested") });
        }
        let ctx = cuda("create context", CudaContext::new(ordinal))?;
        // Skip cudarc's per-buffer event bookkeeping (it would add work between timed launches). All memory
        // traffic (uploads, poisoning, downloads, frees) goes through `stream`; the only other stream is the side
        // stream of [`Gpu::side_stream`], on which only kernels of a plan run, and every hazard between the two is
        // covered by k3k's own events: a plan's launches on the side stream first wait for an event recorded on
        // the main stream when the plan is enqueued (so they follow every earlier upload, memset and launch), a
        // side launch that reads what a main launch wrote (or the other way round) waits for that launch's event,
        // and the main stream waits for the side stream's last launch before the plan returns (so timing end
        // events, downloads, syncs and frees follow it) -- see `k3k_ops::plan::GpuExec` and `Plan::check_schedule`,
        // which refuses a plan whose declared waits leave a buffer shared across the streams unordered.
        // SAFETY: as above; no buffer is used on the side stream outside those fences.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let attr = |a| cuda("device attribute", ctx.attribute(a));
        let (maj, min) = cuda("compute capability", ctx.compute_capability())?;
        let mut driver_version = 0i32;
        // SAFETY: valid out-pointer.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) };
        let info = GpuInfo {
            ordinal,
            name: cuda("device name", ctx.name())?,
            compute_capability: (maj as u32, min as u32),
            sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            shared_optin_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as usize,
            l2_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
            memory_bytes: cuda("total memory", ctx.total_mem())?,
            driver_version,
        };
        Ok(Gpu { ctx, stream, info, side: OnceLock::new() })
    }

    /// Number of GPUs the driver reports (0 when there is no driver).
    pub fn count() -> usize {
        if !Self::driver_present() {
            return 0;
        }
        CudaContext::device_count().map(|c| c.max(0) as usize).unwrap_or(0)
    }

    fn wrap(&self, buf: CudaSlice<u8>, dtype: k3k_ir::DType, shape: &[usize]) -> DeviceTensor {
        let ptr = {
            let (ptr, _sync) = buf.device_ptr(&self.stream);
            ptr
        };
        DeviceTensor { buf, dtype, shape: shape.to_vec(), ptr }
    }

    /// Copy a host tensor to the device.
    pub fn upload(&self, t: &HostTensor) -> Result<DeviceTensor, RuntimeError> {
        let buf = if t.data.is_empty() {
            cuda("alloc", self.stream.alloc_zeros::<u8>(16))?
        } else {
            cuda("upload", self.stream.clone_htod(&t.data))?
        };
        Ok(self.wrap(buf, t.dtype, &t.shape))
    }

    /// A device tensor filled with 0xFF bytes: NaN in every float format (bf16, f16, f32), -1 in ints.
    pub fn poisoned(&self, dtype: k3k_ir::DType, shape: &[usize]) -> Result<DeviceTensor, RuntimeError> {
        let n: usize = shape.iter().product();
        let bytes = dtype.storage_bytes(n).max(16);
        let buf = cuda("alloc", self.stream.alloc_zeros::<u8>(bytes))?;
        let t = self.wrap(buf, dtype, shape);
        self.poison(&t)?;
        Ok(t)
    }

    /// Overwrite a tensor with 0xFF bytes.
    pub fn poison(&self, t: &DeviceTensor) -> Result<(), RuntimeError> {
        // SAFETY: the range is inside the allocation; the stream orders it with later launches.
        cuda("memset", unsafe {
            cudarc::driver::result::memset_d8_async(t.ptr, 0xff, t.buf.len(), self.stream.cu_stream())
        })
    }

    /// Copy a device tensor back.
    pub fn download(&self, t: &DeviceTensor) -> Result<HostTensor, RuntimeError> {
        let mut data = cuda("download", self.stream.clone_dtoh(&t.buf))?;
        data.truncate(t.bytes());
        Ok(HostTensor { dtype: t.dtype, shape: t.shape.clone(), data })
    }

    /// Wait for all queued work and surface any asynchronous error (e.g. an illegal address in a kernel).
    pub fn sync(&self) -> Result<(), RuntimeError> {
        cuda("synchronize", self.stream.synchronize())
    }

    /// Load a compiled kernel (CUBIN when present, else PTX that the driver JIT-compiles).
    pub fn load(&self, kernel: &Kernel, m: &CompiledModule) -> Result<LoadedKernel, RuntimeError> {
        let image = match &m.cubin {
            Some(c) => cudarc::nvrtc::Ptx::from_binary(c.clone()),
            None => cudarc::nvrtc::Ptx::from_src(m.ptx.clone()),
        };
        let module = cuda(&format!("load module of `{}`", kernel.name), self.ctx.load_module(image))?;
        let func = cuda(&format!("load function `{}`", kernel.name), module.load_function(&kernel.name))?;
        let shared_bytes = kernel.shared_bytes();
        if shared_bytes > self.info.shared_optin_bytes {
            return Err(RuntimeError::SharedMemory {
                kernel: kernel.name.clone(),
                need: shared_bytes,
                limit: self.info.shared_optin_bytes,
            });
        }
        cuda(
            "set max dynamic shared memory",
            func.set_attribute(
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared_bytes as i32,
            ),
        )?;
        let registers = cuda("function registers", func.num_regs())?;
        let local_bytes = cuda("function local memory", func.local_size_bytes())?;
        let persistent_ctas = self.resident_cluster_ctas(kernel, &func, shared_bytes)?;
        let mut blocks: std::ffi::c_int = 0;
        // SAFETY: a loaded function of this context and a valid out pointer.
        let r = unsafe {
            cudarc::driver::sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut blocks,
                func.cu_function(),
                kernel.launch_threads() as std::ffi::c_int,
                shared_bytes,
            )
        };
        cuda(&format!("max active blocks per SM of `{}`", kernel.name), r.result())?;
        let blocks_per_sm = blocks.max(0) as u32;
        Ok(LoadedKernel {
            kernel: kernel.clone(),
            func,
            shared_bytes,
            registers,
            local_bytes,
            persistent_ctas,
            blocks_per_sm,
        })
    }

    /// The CTAs of `kernel` that fit on this GPU at once in whole clusters (the SM count for a kernel without a
    /// cluster shape). A cluster kernel of which not one cluster fits is an error, not a hang.
    fn resident_cluster_ctas(
        &self,
        kernel: &Kernel,
        func: &CudaFunction,
        shared_bytes: usize,
    ) -> Result<u32, RuntimeError> {
        let [cx, cy, cz] = kernel.cluster;
        let size = cx * cy * cz;
        if size <= 1 {
            return Ok(self.info.sm_count);
        }
        let config = cudarc::driver::sys::CUlaunchConfig {
            gridDimX: cx,
            gridDimY: cy,
            gridDimZ: cz,
            blockDimX: kernel.launch_threads(),
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shared_bytes as u32,
            hStream: std::ptr::null_mut(),
            attrs: std::ptr::null_mut(),
            numAttrs: 0,
        };
        let mut clusters: std::ffi::c_int = 0;
        // SAFETY: a loaded function of this context, a config without attributes (the cluster shape is compiled
        // into the kernel by `__cluster_dims__`), and a valid out pointer.
        let r =
            unsafe { cudarc::driver::sys::cuOccupancyMaxActiveClusters(&mut clusters, func.cu_function(), &config) };
        cuda(&format!("max active clusters of `{}`", kernel.name), r.result())?;
        if clusters <= 0 {
            return Err(RuntimeError::Cuda {
                what: format!("max active clusters of `{}`", kernel.name),
                err: format!("not one cluster of {size} CTAs with {shared_bytes} bytes of shared memory each fits"),
            });
        }
        Ok(clusters as u32 * size)
    }

    /// Launch a kernel on the main stream: tensors in kernel order, named scalars. Shapes are checked against the
    /// kernel first.
    pub fn launch(
        &self,
        lk: &LoadedKernel,
        tensors: &[&DeviceTensor],
        scalars: &[(&str, SymValue)],
    ) -> Result<(), RuntimeError> {
        self.launch_on(&self.stream, lk, tensors, scalars)
    }

    /// The side stream, created on first use (non-blocking, so it never synchronises implicitly with the main
    /// stream, which is the legacy default stream; at the context's greatest priority, so that its few blocks are
    /// given SMs ahead of a large grid's waiting blocks of the main stream as soon as any retire). Work on it is
    /// ordered only by events ([`Gpu::new_sync_event`], [`Gpu::record`], [`Gpu::wait`]).
    pub fn side_stream(&self) -> Result<&Arc<CudaStream>, RuntimeError> {
        if let Some(s) = self.side.get() {
            return Ok(s);
        }
        cuda("bind context", self.ctx.bind_to_thread())?;
        // (least, greatest): lower numbers are higher priorities; the default stream has priority 0, the least.
        let (_least, greatest) = cuda("stream priority range", cudarc::driver::result::stream::get_priority_range())?;
        let s = cuda("create side stream", self.ctx.new_stream_with_priority(greatest))?;
        Ok(self.side.get_or_init(|| s))
    }

    /// A synchronisation event (no timing).
    pub fn new_sync_event(&self) -> Result<CudaEvent, RuntimeError> {
        cuda("create event", self.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)))
    }

    /// Record `ev` on `stream` (it completes when everything enqueued on `stream` so far has).
    pub fn record(&self, ev: &CudaEvent, stream: &CudaStream) -> Result<(), RuntimeError> {
        cuda("event record", ev.record(stream))
    }

    /// Make `stream`'s later work wait for `ev`'s last record (a later record of `ev` does not affect it).
    pub fn wait(&self, stream: &CudaStream, ev: &CudaEvent) -> Result<(), RuntimeError> {
        cuda("stream wait event", stream.wait(ev))
    }

    /// Launch a kernel on `stream` (the main stream or [`Gpu::side_stream`]), as [`Gpu::launch`].
    pub fn launch_on(
        &self,
        stream: &CudaStream,
        lk: &LoadedKernel,
        tensors: &[&DeviceTensor],
        scalars: &[(&str, SymValue)],
    ) -> Result<(), RuntimeError> {
        let k = &lk.kernel;
        let shapes: Vec<TensorShape<'_>> =
            tensors.iter().map(|t| TensorShape { dtype: t.dtype, shape: &t.shape }).collect();
        let syms = bind(k, &shapes, scalars, lk.persistent_ctas as i64)?;
        let Some(grid) = eval_grid(k, &syms)? else { return Ok(()) };
        for (p, t) in k.tensors.iter().zip(tensors) {
            if t.ptr % 16 != 0 {
                return Err(RuntimeError::Misaligned { arg: p.name.clone(), addr: t.ptr });
            }
        }
        let ptrs: Vec<u64> = tensors.iter().map(|t| t.ptr).collect();
        let ints: Vec<i64> = syms.iter().map(|s| s.as_int()).collect();
        let floats: Vec<f32> = syms.iter().map(|s| if let SymValue::Float(f) = s { *f } else { 0.0 }).collect();
        // TMA descriptors, encoded for these tensors (after the symbols in the signature).
        let shapes: Vec<&[usize]> = tensors.iter().map(|t| t.shape.as_slice()).collect();
        let maps = k3k_codegen::tensor_map::encode(k, &shapes, &ptrs)?;
        let mut b = stream.launch_builder(&lk.func);
        for p in &ptrs {
            b.arg(p);
        }
        for (i, s) in syms.iter().enumerate() {
            match s {
                SymValue::Int(_) => b.arg(&ints[i]),
                SymValue::Float(_) => b.arg(&floats[i]),
            };
        }
        for m in &maps {
            b.arg(m);
        }
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (grid[0], grid[1], grid[2]),
            block_dim: (k.launch_threads(), 1, 1),
            shared_mem_bytes: lk.shared_bytes as u32,
        };
        // SAFETY: argument count, order and types follow the kernel signature the renderer emitted for `k`
        // (tensor pointers, then one i64/f32 per symbol, then one CUtensorMap by value per tensor map), and every shape was checked by `bind`.
        cuda(&format!("launch `{}`", k.name), unsafe { b.launch(cfg) }.map(|_| ()))
    }
}
