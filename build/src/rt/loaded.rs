//! A kernel loaded in one context, once per context, and its checked launch.

use super::{AsContext, AsStream, Error, KernelImage, pick};
use k3k_codegen::CompiledModule;
use k3k_ir::{Dim, Kernel, SymValue, TensorShape, bind};
use k3k_runtime::{ArgRef, CudaContext, GpuInfo, LoadedKernel, RuntimeError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Modules loaded so far, by (context, embedded image): a kernel is loaded once per context however many
/// launchers or plans use it, and unloaded when the last of them is dropped.
type Cache = Mutex<HashMap<(usize, usize), Weak<LoadedKernel>>>;
static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();

/// A kernel loaded in one context, with the dims it was built for.
pub struct Loaded {
    lk: Arc<LoadedKernel>,
    image: &'static KernelImage,
    pins: &'static [(&'static str, i64)],
}

impl Loaded {
    /// Load the variant of `images` built for the device of `ctx` (by its name's slug, else the first): CUBIN
    /// on an sm_90 device when embedded, else PTX (JIT-compiled by the driver), else CUDA C compiled now with
    /// NVRTC. A kernel already loaded in this context is shared, not loaded again.
    pub fn load(
        ctx: &(impl AsContext + ?Sized),
        images: &'static [KernelImage],
        pins: &'static [(&'static str, i64)],
    ) -> Result<Self, Error> {
        let ctx = ctx.context();
        let info = GpuInfo::query(ctx)?;
        Self::load_image_in(ctx, &info, pick(images, &info), pins)
    }

    /// Load one image in `ctx` (see [`Loaded::load`]).
    pub fn load_image(
        ctx: &(impl AsContext + ?Sized),
        image: &'static KernelImage,
        pins: &'static [(&'static str, i64)],
    ) -> Result<Self, Error> {
        let ctx = ctx.context();
        Self::load_image_in(ctx, &GpuInfo::query(ctx)?, image, pins)
    }

    pub(crate) fn load_image_in(
        ctx: &Arc<CudaContext>,
        info: &GpuInfo,
        image: &'static KernelImage,
        pins: &'static [(&'static str, i64)],
    ) -> Result<Self, Error> {
        let key = (ctx.cu_ctx() as usize, image as *const KernelImage as usize);
        let cache = CACHE.get_or_init(Default::default);
        // Loading (and run-time NVRTC) happens under the lock: two threads asking for one kernel load it once.
        let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lk) = map.get(&key).and_then(Weak::upgrade) {
            return Ok(Loaded { lk, image, pins });
        }
        let lk = Arc::new(Self::load_module(ctx, info, image)?);
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(key, Arc::downgrade(&lk));
        Ok(Loaded { lk, image, pins })
    }

    fn load_module(ctx: &Arc<CudaContext>, info: &GpuInfo, image: &'static KernelImage) -> Result<LoadedKernel, Error> {
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
        let cubin = image.cubin.filter(|_| info.compute_capability == (9, 0)).map(|c| c.to_vec());
        let module = CompiledModule {
            kernel: image.name.into(),
            key: String::new(),
            ptx,
            cubin,
            resources: None,
            nvrtc_ms: 0.0,
            cached: true,
        };
        Ok(k3k_runtime::load_kernel(ctx, info, &kernel, &module)?)
    }

    /// True when `other` uses the same loaded module (the same kernel loaded in the same context).
    pub fn shares_module_with(&self, other: &Loaded) -> bool {
        Arc::ptr_eq(&self.lk, &other.lk)
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

    /// Check a launch's arguments without launching: dtypes and symbolic shapes ([`k3k_ir::bind`]) and the
    /// pinned dims.
    pub fn check_args(&self, tensors: &[ArgRef<'_>], scalars: &[(&str, SymValue)]) -> Result<(), Error> {
        let syms = k3k_runtime::bind_args(&self.lk, tensors, scalars)?;
        check_pins(&self.lk.kernel, self.pins, &syms)
    }

    /// Launch on `stream` (a stream of the context this kernel was loaded in): tensors in kernel order, named
    /// scalars. Checks the dtypes, the symbolic shapes and the pinned dims (one binding of the symbols), then
    /// enqueues the kernel; nothing is allocated, copied or waited for.
    pub fn launch(
        &self,
        stream: &(impl AsStream + ?Sized),
        tensors: &[ArgRef<'_>],
        scalars: &[(&str, SymValue)],
    ) -> Result<(), Error> {
        let syms = k3k_runtime::bind_args(&self.lk, tensors, scalars)?;
        check_pins(&self.lk.kernel, self.pins, &syms)?;
        // SAFETY: `AsStream` is an unsafe trait: its implementors hand out valid stream handles; `syms` were bound
        // from these tensors just above.
        Ok(unsafe { k3k_runtime::launch_bound(stream.cu_stream(), &self.lk, tensors, &syms) }?)
    }
}

/// The checks of [`Loaded::launch`] on a kernel's launch interface, without a GPU: `tensors` bind to its
/// symbolic dims and every pinned dim has the value the kernel was built for. The error names the argument.
pub fn check_launch(
    k: &Kernel,
    pins: &[(&str, i64)],
    tensors: &[ArgRef<'_>],
    scalars: &[(&str, SymValue)],
    num_sms: i64,
) -> Result<(), Error> {
    let shapes: Vec<TensorShape<'_>> =
        tensors.iter().map(|t| TensorShape { dtype: t.dtype(), shape: t.shape() }).collect();
    let syms = bind(k, &shapes, scalars, num_sms).map_err(RuntimeError::from)?;
    check_pins(k, pins, &syms)
}

/// Every pinned dim of `k` has, among the bound `syms`, the value the kernel was built for; the error names
/// the first argument that carries the dim.
fn check_pins(k: &Kernel, pins: &[(&str, i64)], syms: &[SymValue]) -> Result<(), Error> {
    for &(name, expected) in pins {
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
    Ok(())
}
