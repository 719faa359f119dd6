//! Device, buffers, modules and launches.

use crate::{RuntimeError, cuda};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute_enum};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr};
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

/// One tensor argument of a launch: a device address with the dtype and shape the kernel sees. Made from a
/// [`DeviceTensor`] ([`DeviceTensor::arg`]) or, by a caller that owns the memory, with [`ArgRef::new`]; it
/// borrows nothing, so a launch can take memory from any allocator (cudarc slices, a framework's caching
/// allocator, a model's own arena).
#[derive(Clone, Copy, Debug)]
pub struct ArgRef<'a> {
    ptr: u64,
    dtype: k3k_ir::DType,
    shape: &'a [usize],
}

impl<'a> ArgRef<'a> {
    /// An argument at device address `ptr` holding a dense row-major `dtype` tensor of `shape`.
    ///
    /// # Safety
    /// `ptr` must be an address of the context the kernel is launched in, with at least
    /// `dtype.storage_bytes(product of shape)` bytes readable (and writable where the kernel writes), and stay
    /// valid until the launch has run on its stream.
    pub unsafe fn new(ptr: u64, dtype: k3k_ir::DType, shape: &'a [usize]) -> Self {
        ArgRef { ptr, dtype, shape }
    }
    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    /// The element type.
    pub fn dtype(&self) -> k3k_ir::DType {
        self.dtype
    }
    /// The shape.
    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }
}

impl DeviceTensor {
    /// This tensor as a launch argument.
    pub fn arg(&self) -> ArgRef<'_> {
        ArgRef { ptr: self.ptr, dtype: self.dtype, shape: &self.shape }
    }
}

/// A kernel loaded into the context, ready to launch.
pub struct LoadedKernel {
    pub kernel: Kernel,
    /// The context the module was loaded in (launches bind it and refuse a stream of another context).
    pub ctx: Arc<CudaContext>,
    pub func: CudaFunction,
    pub shared_bytes: usize,
    pub registers: i32,
    pub local_bytes: i32,
    /// The value a launch gives the kernel's `NUM_SMS` symbol (the size of a persistent grid): the SM count, or for
    /// a kernel launched in thread-block clusters the CTAs that can be resident at once in whole clusters
    /// (`cuOccupancyMaxActiveClusters` x the cluster size). A persistent grid of `SM count` CTAs in clusters of two
    /// need not fit at once (a cluster lives in one GPC; a GPC with an odd number of free SMs leaves one idle), and
    /// the clusters left over would run as a second wave. (On the H200 this sizing did not change the CLUSTER=2
    /// GEMM's time, measured 2026-12-01: lab/NOTES.md.)
    pub persistent_ctas: u32,
    /// CTAs of this kernel that fit on one SM at once (`cuOccupancyMaxActiveBlocksPerMultiprocessor` at its block
    /// size and shared memory): a persistent grid of more per SM runs its surplus after the others.
    pub blocks_per_sm: u32,
}

impl GpuInfo {
    /// What the device of `ctx` is (a handful of attribute queries; no allocation, no synchronisation).
    pub fn query(ctx: &CudaContext) -> Result<GpuInfo, RuntimeError> {
        let attr = |a| cuda("device attribute", ctx.attribute(a));
        let (maj, min) = cuda("compute capability", ctx.compute_capability())?;
        let mut driver_version = 0i32;
        // SAFETY: valid out-pointer.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) };
        Ok(GpuInfo {
            ordinal: ctx.ordinal(),
            name: cuda("device name", ctx.name())?,
            compute_capability: (maj as u32, min as u32),
            sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            shared_optin_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as usize,
            l2_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
            memory_bytes: cuda("total memory", ctx.total_mem())?,
            driver_version,
        })
    }
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
        let info = GpuInfo::query(&ctx)?;
        Ok(Gpu { ctx, stream, info, side: OnceLock::new() })
    }

    /// A `Gpu` on the caller's CUDA world: the context of `stream` (a cudarc stream the caller created, in a
    /// context it owns), with `stream` as the main stream for uploads, downloads and launches. Nothing of the
    /// context is changed (its event tracking stays as the caller set it), and no stream or memory is created.
    pub fn from_stream(stream: Arc<CudaStream>) -> Result<Gpu, RuntimeError> {
        let ctx = stream.context().clone();
        let info = GpuInfo::query(&ctx)?;
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

    /// Load a compiled kernel into this GPU's context (see [`load_kernel`]).
    pub fn load(&self, kernel: &Kernel, m: &CompiledModule) -> Result<LoadedKernel, RuntimeError> {
        load_kernel(&self.ctx, &self.info, kernel, m)
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
        let args: Vec<ArgRef<'_>> = tensors.iter().map(|t| t.arg()).collect();
        // SAFETY: a live cudarc stream.
        unsafe { launch_raw(stream.cu_stream(), lk, &args, scalars) }
    }
}

/// Launch a kernel on any stream of its context: tensors in kernel order, named scalars. The shapes are bound
/// against the kernel's symbolic dims, the grid is evaluated, the TMA descriptors are encoded on the host and
/// the launch is enqueued with `cuLaunchKernel`: nothing is allocated on the device, nothing is copied and
/// nothing waits, so the call can be captured into a CUDA graph. A stream of another context is refused.
///
/// # Safety
/// `stream` must be a valid stream handle (or null, the legacy default stream of the current context).
pub unsafe fn launch_raw(
    stream: cudarc::driver::sys::CUstream,
    lk: &LoadedKernel,
    tensors: &[ArgRef<'_>],
    scalars: &[(&str, SymValue)],
) -> Result<(), RuntimeError> {
    let syms = bind_args(lk, tensors, scalars)?;
    // SAFETY: forwarded from the caller; `syms` were bound from these tensors.
    unsafe { launch_bound(stream, lk, tensors, &syms) }
}

/// The kernel's symbol values for a launch on `tensors` and `scalars` (their shapes checked against the
/// kernel's symbolic dims, `NUM_SMS` the kernel's persistent grid size): what [`launch_bound`] takes, so that a
/// caller that checks more of the symbols (pinned dims) binds once.
pub fn bind_args(
    lk: &LoadedKernel,
    tensors: &[ArgRef<'_>],
    scalars: &[(&str, SymValue)],
) -> Result<Vec<SymValue>, RuntimeError> {
    let shapes: Vec<TensorShape<'_>> = tensors.iter().map(|t| TensorShape { dtype: t.dtype, shape: t.shape }).collect();
    Ok(bind(&lk.kernel, &shapes, scalars, lk.persistent_ctas as i64)?)
}

/// [`launch_raw`] with the symbols already bound by [`bind_args`].
///
/// # Safety
/// As [`launch_raw`], and `syms` are [`bind_args`]'s result for these `tensors`.
pub unsafe fn launch_bound(
    stream: cudarc::driver::sys::CUstream,
    lk: &LoadedKernel,
    tensors: &[ArgRef<'_>],
    syms: &[SymValue],
) -> Result<(), RuntimeError> {
    let k = &lk.kernel;
    let Some(grid) = eval_grid(k, syms)? else { return Ok(()) };
    for (p, t) in k.tensors.iter().zip(tensors) {
        if t.ptr % 16 != 0 {
            return Err(RuntimeError::Misaligned { arg: p.name.clone(), addr: t.ptr });
        }
    }
    cuda("bind context", lk.ctx.bind_to_thread())?;
    let mut stream_ctx: cudarc::driver::sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a stream handle the caller vouches for and a valid out pointer; a query, not a stream operation.
    let r = unsafe { cudarc::driver::sys::cuStreamGetCtx(stream, &mut stream_ctx) };
    cuda("stream context", r.result())?;
    if stream_ctx != lk.ctx.cu_ctx() {
        return Err(RuntimeError::WrongContext { kernel: k.name.clone() });
    }
    let mut ptrs: Vec<u64> = tensors.iter().map(|t| t.ptr).collect();
    let mut ints: Vec<i64> = syms.iter().map(|s| s.as_int()).collect();
    let mut floats: Vec<f32> = syms.iter().map(|s| if let SymValue::Float(f) = s { *f } else { 0.0 }).collect();
    // TMA descriptors, encoded for these tensors (after the symbols in the signature).
    let shapes: Vec<&[usize]> = tensors.iter().map(|t| t.shape).collect();
    let mut maps = k3k_codegen::tensor_map::encode(k, &shapes, &ptrs)?;
    // The kernel's parameters, in the order of the signature the renderer emitted for `k`: tensor pointers, one
    // i64/f32 per symbol, one CUtensorMap by value per tensor map.
    let mut params: Vec<*mut std::ffi::c_void> = Vec::with_capacity(ptrs.len() + syms.len() + maps.len());
    params.extend(ptrs.iter_mut().map(|p| p as *mut u64 as *mut std::ffi::c_void));
    for (i, s) in syms.iter().enumerate() {
        params.push(match s {
            SymValue::Int(_) => &mut ints[i] as *mut i64 as *mut std::ffi::c_void,
            SymValue::Float(_) => &mut floats[i] as *mut f32 as *mut std::ffi::c_void,
        });
    }
    params.extend(maps.iter_mut().map(|m| m as *mut _ as *mut std::ffi::c_void));
    if k.waits_on_prior_grid() {
        // SAFETY: as below.
        return unsafe { launch_dependent(stream, lk, grid, &mut params) };
    }
    // SAFETY: the parameter count, order and types follow the kernel's signature (above); every shape was checked
    // by `bind`; every pointer was vouched for by its `ArgRef`; the parameter storage outlives the call.
    let r = unsafe {
        cudarc::driver::result::launch_kernel(
            lk.func.cu_function(),
            (grid[0], grid[1], grid[2]),
            (k.launch_threads(), 1, 1),
            lk.shared_bytes as u32,
            stream,
            &mut params,
        )
    };
    cuda(&format!("launch `{}`", k.name), r)
}

/// A programmatic dependent launch (`cuLaunchKernelEx` with `PROGRAMMATIC_STREAM_SERIALIZATION`): the kernel's
/// blocks may start once every block of the grid before it on `stream` has run `griddepcontrol.launch_dependents`
/// or exited, and its `griddepcontrol.wait` ([`k3k_ir::GridDep::Wait`]) holds them until that grid has completed.
/// Captured into a CUDA graph, the launch becomes a programmatic edge.
///
/// # Safety
/// As [`launch_bound`]'s call of `cuLaunchKernel`: `params` follow the kernel's signature and outlive the call.
unsafe fn launch_dependent(
    stream: cudarc::driver::sys::CUstream,
    lk: &LoadedKernel,
    grid: [u32; 3],
    params: &mut [*mut std::ffi::c_void],
) -> Result<(), RuntimeError> {
    use cudarc::driver::sys::{CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue, CUlaunchConfig};
    let k = &lk.kernel;
    // SAFETY: a plain C union of integers and structs of integers; all-zero is a valid value of each.
    let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attr = CUlaunchAttribute {
        id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = CUlaunchConfig {
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: k.launch_threads(),
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: lk.shared_bytes as u32,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: a valid config (its attribute outlives the call), a loaded function of the stream's context, and
    // the caller's parameters.
    let r = unsafe {
        cudarc::driver::sys::cuLaunchKernelEx(&config, lk.func.cu_function(), params.as_mut_ptr(), std::ptr::null_mut())
    };
    cuda(&format!("launch `{}` (programmatic dependent launch)", k.name), r.result())
}

/// Load a compiled kernel into `ctx` (CUBIN when present, else PTX that the driver JIT-compiles); `info` is the
/// context's device ([`GpuInfo::query`]). The module stays loaded as long as the [`LoadedKernel`] lives.
pub fn load_kernel(
    ctx: &Arc<CudaContext>,
    info: &GpuInfo,
    kernel: &Kernel,
    m: &CompiledModule,
) -> Result<LoadedKernel, RuntimeError> {
    let image = match &m.cubin {
        Some(c) => cudarc::nvrtc::Ptx::from_binary(c.clone()),
        None => cudarc::nvrtc::Ptx::from_src(m.ptx.clone()),
    };
    let module = cuda(&format!("load module of `{}`", kernel.name), ctx.load_module(image))?;
    let func = cuda(&format!("load function `{}`", kernel.name), module.load_function(&kernel.name))?;
    let shared_bytes = kernel.shared_bytes();
    if shared_bytes > info.shared_optin_bytes {
        return Err(RuntimeError::SharedMemory {
            kernel: kernel.name.clone(),
            need: shared_bytes,
            limit: info.shared_optin_bytes,
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
    let persistent_ctas = resident_cluster_ctas(info, kernel, &func, shared_bytes)?;
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
        ctx: ctx.clone(),
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
    info: &GpuInfo,
    kernel: &Kernel,
    func: &CudaFunction,
    shared_bytes: usize,
) -> Result<u32, RuntimeError> {
    let [cx, cy, cz] = kernel.cluster;
    let size = cx * cy * cz;
    if size <= 1 {
        return Ok(info.sm_count);
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
    let r = unsafe { cudarc::driver::sys::cuOccupancyMaxActiveClusters(&mut clusters, func.cu_function(), &config) };
    cuda(&format!("max active clusters of `{}`", kernel.name), r.result())?;
    if clusters <= 0 {
        return Err(RuntimeError::Cuda {
            what: format!("max active clusters of `{}`", kernel.name),
            err: format!("not one cluster of {size} CTAs with {shared_bytes} bytes of shared memory each fits"),
        });
    }
    Ok(clusters as u32 * size)
}
