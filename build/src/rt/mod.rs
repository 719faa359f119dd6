//! The run-time half: what the generated launchers in `OUT_DIR/k3k_kernels.rs` call.
//!
//! - [`Tensor<T>`]: a device tensor whose element type is part of its Rust type ([`Bf16`], [`F32`], [`I32`],
//!   ...), so a launcher's signature says which dtype each argument has; shapes are checked at the call
//!   against the kernel's symbolic dims (the same [`k3k_ir::bind`] the CLI and the interpreter use) and
//!   against the dims the kernel was built for (its *pins*), with errors naming the argument.
//! - [`KernelImage`]: one kernel as embedded in the binary (PTX, CUBIN for sm_90a when ptxas was there, or
//!   CUDA C for run-time NVRTC, plus the serialized IR that drives the shape checks).
//! - [`Loaded`]: a kernel loaded on one GPU; [`PlanRunner`]: a recorded multi-kernel plan of an operator.
//!
//! Nothing here needs NVRTC unless a kernel was embedded as CUDA C (`Builder::runtime_nvrtc(true)`).

pub use k3k_ir::{DType, HostTensor, Kernel, SymValue};
pub use k3k_runtime::{DeviceTensor, Gpu, GpuInfo, RuntimeError, TimingOptions};

use k3k_codegen::CompiledModule;
use k3k_ir::{Dim, TensorShape, bind};
use k3k_runtime::LoadedKernel;
use std::marker::PhantomData;

/// Why a generated launcher could not load or launch a kernel.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A CUDA error, or arguments that do not fit the kernel's symbolic shapes (names the argument).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An argument has the right rank and dtype but not the size this kernel was built for.
    #[error(
        "kernel `{kernel}`: argument `{arg}` dim {dim} (`{sym}`): this kernel was built for {sym} = {expected}, got {got}"
    )]
    Pinned { kernel: String, arg: String, dim: usize, sym: String, expected: i64, got: i64 },
    /// A tensor's dtype is not the one its Rust type or a plan buffer says.
    #[error("{what}: expected a {expected} tensor, got {got}")]
    DType { what: String, expected: DType, got: DType },
    /// A plan input or output does not have the shape the plan was recorded for.
    #[error("plan `{plan}`: buffer `{buffer}`: expected shape {expected:?}, got {got:?}")]
    Shape { plan: String, buffer: String, expected: Vec<usize>, got: Vec<usize> },
    /// The embedded kernel is unusable (its IR does not parse, or no code was embedded).
    #[error("kernel `{kernel}`: {why}")]
    Embedded { kernel: String, why: String },
    /// Run-time NVRTC failed (only for kernels embedded as CUDA C).
    #[error("kernel `{kernel}`: run-time NVRTC compile failed: {why}")]
    Nvrtc { kernel: String, why: String },
    /// A kernel loaded in one CUDA context was launched with a [`Gpu`] of another.
    #[error("kernel `{kernel}` was loaded on another GPU context than the one it was launched on")]
    WrongGpu { kernel: String },
}

// ------------------------------------------------------------------------------------------------------------
// Element types.

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

// ------------------------------------------------------------------------------------------------------------
// Embedded kernels.

/// One kernel as embedded by `k3k-build` (one per target GPU and kernel).
#[derive(Debug)]
pub struct KernelImage {
    /// The GPU slug (`nvidia-h200`) whose knobs this variant was built with.
    pub gpu: &'static str,
    /// The kernel (and PTX entry) name.
    pub name: &'static str,
    /// The knobs, `NAME=value,...`.
    pub knobs: &'static str,
    /// Where the knobs came from (a results file and bucket, or the operator's defaults).
    pub knobs_source: &'static str,
    /// The kernel's launch interface as JSON: its IR without the body (arguments, symbols, grid, threads,
    /// shared memory), which drives the shape checks and the launch.
    pub ir_json: &'static str,
    /// PTX from NVRTC at build time (absent with run-time NVRTC).
    pub ptx: Option<&'static str>,
    /// CUBIN for sm_90a from ptxas at build time, when asked for and ptxas was found.
    pub cubin: Option<&'static [u8]>,
    /// Self-contained CUDA C, for run-time NVRTC.
    pub cuda: Option<&'static str>,
}

impl KernelImage {
    /// The kernel's launch interface (its IR without the body).
    pub fn kernel(&self) -> Result<Kernel, Error> {
        serde_json::from_str(self.ir_json)
            .map_err(|e| Error::Embedded { kernel: self.name.into(), why: format!("embedded IR does not parse: {e}") })
    }

    /// Check that the image is usable without a GPU: the IR parses and names this kernel, and PTX (or CUDA C)
    /// is embedded and defines the entry point.
    pub fn verify(&self) -> Result<(), Error> {
        let k = self.kernel()?;
        let bad = |why: String| Err(Error::Embedded { kernel: self.name.into(), why });
        if k.name != self.name {
            return bad(format!("embedded IR is kernel `{}`", k.name));
        }
        match (self.ptx, self.cuda) {
            (Some(ptx), _) if !ptx.contains(&format!(".entry {}", self.name)) => {
                bad("embedded PTX does not define the entry point".into())
            }
            (None, Some(src)) if !src.contains(self.name) => bad("embedded CUDA C does not define the kernel".into()),
            (None, None) => bad("neither PTX nor CUDA C is embedded".into()),
            _ => Ok(()),
        }
    }

    /// How this image gets to the GPU: `"cubin"`, `"ptx"` or `"nvrtc"`.
    pub fn code_kind(&self) -> &'static str {
        match (self.cubin, self.ptx) {
            (Some(_), _) => "cubin",
            (None, Some(_)) => "ptx",
            _ => "nvrtc",
        }
    }
}

/// The variant of `images` built for `gpu` (by slug of its name), else the first.
pub fn pick<'a, T: HasGpu>(images: &'a [T], gpu: &Gpu) -> &'a T {
    let slug = slugify(&gpu.info.name);
    images.iter().find(|i| i.gpu() == slug).unwrap_or(&images[0])
}

/// Something built for one GPU slug.
pub trait HasGpu {
    fn gpu(&self) -> &str;
}
impl HasGpu for KernelImage {
    fn gpu(&self) -> &str {
        self.gpu
    }
}
impl HasGpu for &KernelImage {
    fn gpu(&self) -> &str {
        self.gpu
    }
}
impl HasGpu for PlanSpec {
    fn gpu(&self) -> &str {
        self.gpu
    }
}

/// The GPU slug of a device name, as `results/<slug>/` uses it: `NVIDIA H200` -> `nvidia-h200`.
pub fn slugify(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("unknown");
    }
    out
}

fn ctx_id(gpu: &Gpu) -> usize {
    std::sync::Arc::as_ptr(&gpu.ctx) as usize
}

/// A kernel loaded on one GPU, with the dims it was built for.
pub struct Loaded {
    lk: LoadedKernel,
    image: &'static KernelImage,
    pins: &'static [(&'static str, i64)],
    ctx: usize,
}

impl Loaded {
    /// Load the variant of `images` built for `gpu` (else the first): CUBIN on an sm_90 device when embedded,
    /// else PTX (JIT-compiled by the driver), else CUDA C compiled now with NVRTC.
    pub fn load(
        gpu: &Gpu,
        images: &'static [KernelImage],
        pins: &'static [(&'static str, i64)],
    ) -> Result<Self, Error> {
        Self::load_image(gpu, pick(images, gpu), pins)
    }

    /// Load one image.
    pub fn load_image(
        gpu: &Gpu,
        image: &'static KernelImage,
        pins: &'static [(&'static str, i64)],
    ) -> Result<Self, Error> {
        let kernel = image.kernel()?;
        let ptx = match (image.ptx, image.cuda) {
            (Some(ptx), _) => ptx.to_string(),
            (None, Some(src)) => {
                k3k_codegen::nvrtc::compile_ptx(image.name, src, k3k_codegen::ARCH)
                    .map_err(|e| Error::Nvrtc { kernel: image.name.into(), why: e.to_string() })?
                    .ptx
            }
            (None, None) => {
                return Err(Error::Embedded { kernel: image.name.into(), why: "no code embedded".into() });
            }
        };
        let cubin = image.cubin.filter(|_| gpu.info.compute_capability == (9, 0)).map(|c| c.to_vec());
        let module = CompiledModule {
            kernel: image.name.into(),
            key: String::new(),
            ptx,
            cubin,
            resources: None,
            nvrtc_ms: 0.0,
            cached: true,
        };
        let lk = gpu.load(&kernel, &module)?;
        Ok(Loaded { lk, image, pins, ctx: ctx_id(gpu) })
    }

    /// The embedded image this was loaded from.
    pub fn image(&self) -> &'static KernelImage {
        self.image
    }
    /// The kernel's launch interface (its IR without the body).
    pub fn kernel(&self) -> &Kernel {
        &self.lk.kernel
    }
    /// Registers per thread and local memory bytes the driver reports.
    pub fn resources(&self) -> (i32, i32) {
        (self.lk.registers, self.lk.local_bytes)
    }

    /// Launch: tensors in kernel order, named scalars. Checks the GPU, the dtypes and symbolic shapes
    /// ([`k3k_ir::bind`]) and the pinned dims, then enqueues the kernel on the GPU's stream.
    pub fn launch(&self, gpu: &Gpu, tensors: &[&DeviceTensor], scalars: &[(&str, SymValue)]) -> Result<(), Error> {
        let k = &self.lk.kernel;
        if ctx_id(gpu) != self.ctx {
            return Err(Error::WrongGpu { kernel: k.name.clone() });
        }
        if !self.pins.is_empty() {
            let shapes: Vec<TensorShape<'_>> =
                tensors.iter().map(|t| TensorShape { dtype: t.dtype, shape: &t.shape }).collect();
            let syms = bind(k, &shapes, scalars, gpu.info.sm_count as i64).map_err(RuntimeError::from)?;
            for &(name, expected) in self.pins {
                let Some(s) = k.sym(name) else { continue };
                let got = syms[s.0 as usize].as_int();
                if got != expected {
                    let (arg, dim) = k
                        .tensors
                        .iter()
                        .find_map(|p| p.dims.iter().position(|d| *d == Dim::Sym(s)).map(|i| (p.name.clone(), i)))
                        .unwrap_or_else(|| (name.to_string(), 0));
                    return Err(Error::Pinned { kernel: k.name.clone(), arg, dim, sym: name.into(), expected, got });
                }
            }
        }
        Ok(gpu.launch(&self.lk, tensors, scalars)?)
    }
}

// ------------------------------------------------------------------------------------------------------------
// Recorded plans.

/// What a plan buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufRole {
    /// Given by the caller at every run.
    Input,
    /// A table that depends only on the shape (chunk tables, bin edges): embedded, uploaded once at load.
    Const,
    /// Written by the plan; given by the caller (see the generated `Outputs`).
    Output,
    /// Workspace between steps; allocated once at load.
    Scratch,
}

/// One buffer of a recorded plan.
#[derive(Debug)]
pub struct BufferSpec {
    pub name: &'static str,
    pub role: BufRole,
    pub dtype: DType,
    pub shape: &'static [usize],
    /// Contents of a [`BufRole::Const`] buffer (little-endian storage bytes).
    pub data: &'static [u8],
}

/// One launch of a recorded plan.
#[derive(Debug)]
pub struct StepSpec {
    /// Index into [`PlanSpec::kernels`].
    pub kernel: usize,
    /// Buffer indices in kernel argument order.
    pub args: &'static [usize],
    pub scalars: &'static [(&'static str, SymValue)],
}

/// An operator's plan for one shape on one GPU, recorded at build time.
#[derive(Debug)]
pub struct PlanSpec {
    pub name: &'static str,
    pub gpu: &'static str,
    pub kernels: &'static [&'static KernelImage],
    pub buffers: &'static [BufferSpec],
    pub steps: &'static [StepSpec],
}

/// A recorded plan loaded on one GPU: its kernels, its constant tables and its scratch buffers.
pub struct PlanRunner {
    spec: &'static PlanSpec,
    kernels: Vec<Loaded>,
    /// Per buffer: the plan's own tensor (constants and scratch).
    owned: Vec<Option<DeviceTensor>>,
}

impl PlanRunner {
    /// Load the variant of `plans` built for `gpu` (else the first).
    pub fn load(gpu: &Gpu, plans: &'static [PlanSpec]) -> Result<Self, Error> {
        let spec = pick(plans, gpu);
        let kernels = spec.kernels.iter().map(|im| Loaded::load_image(gpu, im, &[])).collect::<Result<_, _>>()?;
        let owned = spec
            .buffers
            .iter()
            .map(|b| match b.role {
                BufRole::Const => Ok(Some(gpu.upload(&HostTensor::from_bytes(b.dtype, b.shape, b.data.to_vec()))?)),
                BufRole::Scratch => Ok(Some(gpu.poisoned(b.dtype, b.shape)?)),
                BufRole::Input | BufRole::Output => Ok(None),
            })
            .collect::<Result<_, Error>>()?;
        Ok(PlanRunner { spec, kernels, owned })
    }

    /// The recorded plan.
    pub fn spec(&self) -> &'static PlanSpec {
        self.spec
    }

    /// The buffer specs of one role, in plan order.
    pub fn buffers(&self, role: BufRole) -> impl Iterator<Item = &'static BufferSpec> + use<> {
        self.spec.buffers.iter().filter(move |b| b.role == role)
    }

    /// A poisoned device tensor for output buffer `name`.
    pub fn alloc_output(&self, gpu: &Gpu, name: &str) -> Result<DeviceTensor, Error> {
        let b = self.spec.buffers.iter().find(|b| b.name == name && b.role == BufRole::Output).ok_or_else(|| {
            Error::Embedded { kernel: self.spec.name.into(), why: format!("plan has no output `{name}`") }
        })?;
        Ok(gpu.poisoned(b.dtype, b.shape)?)
    }

    /// Run every step: `inputs` and `outputs` in plan order of their role (as the generated structs list them).
    pub fn run(&self, gpu: &Gpu, inputs: &[&DeviceTensor], outputs: &[&DeviceTensor]) -> Result<(), Error> {
        let (mut ii, mut oi) = (0usize, 0usize);
        let mut bufs: Vec<&DeviceTensor> = Vec::with_capacity(self.spec.buffers.len());
        for (b, own) in self.spec.buffers.iter().zip(&self.owned) {
            let given = match b.role {
                BufRole::Input => {
                    ii += 1;
                    inputs.get(ii - 1).copied()
                }
                BufRole::Output => {
                    oi += 1;
                    outputs.get(oi - 1).copied()
                }
                BufRole::Const | BufRole::Scratch => own.as_ref(),
            };
            let t = given.ok_or_else(|| Error::Embedded {
                kernel: self.spec.name.into(),
                why: format!("no tensor given for buffer `{}`", b.name),
            })?;
            if t.dtype != b.dtype {
                return Err(Error::DType {
                    what: format!("plan `{}`: buffer `{}`", self.spec.name, b.name),
                    expected: b.dtype,
                    got: t.dtype,
                });
            }
            if t.shape != b.shape {
                return Err(Error::Shape {
                    plan: self.spec.name.into(),
                    buffer: b.name.into(),
                    expected: b.shape.to_vec(),
                    got: t.shape.clone(),
                });
            }
            bufs.push(t);
        }
        for s in self.spec.steps {
            let args: Vec<&DeviceTensor> = s.args.iter().map(|&i| bufs[i]).collect();
            let scalars: Vec<(&str, SymValue)> = s.scalars.iter().map(|(n, v)| (*n, *v)).collect();
            self.kernels[s.kernel].launch(gpu, &args, &scalars)?;
        }
        Ok(())
    }
}
