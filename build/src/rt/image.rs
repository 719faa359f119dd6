//! Kernels as `k3k-build` embeds them, and the choice of the variant built for a device.

use super::{Error, PlanSpec};
use k3k_ir::Kernel;
use k3k_runtime::GpuInfo;

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

/// The variant of `images` built for the device `info` describes (by slug of its name), else the first.
pub fn pick<'a, T: HasGpu>(images: &'a [T], info: &GpuInfo) -> &'a T {
    let slug = slugify(&info.name);
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

/// The GPU slug of a device name, as `results/<slug>/` uses it: `NVIDIA H200` -> `nvidia-h200` (the tuner's
/// rule, [`k3k_tuner::key::slugify`]).
pub use k3k_tuner::key::slugify;
