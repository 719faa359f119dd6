//! What this machine offers: GPU, driver, NVRTC, ptxas. Used by `k3k doctor` and the main job.

use k3k_codegen::toolchain;
use k3k_runtime::{Gpu, GpuInfo};
use serde::Serialize;

/// The toolchain and device situation.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub gpu: Result<GpuInfo, String>,
    pub gpu_count: usize,
    pub nvrtc: Result<String, String>,
    pub nvrtc_version: Result<String, String>,
    pub ptxas: Result<String, String>,
}

impl Environment {
    /// Probe everything (opens GPU 0 when there is one).
    pub fn probe() -> Self {
        let gpu = Gpu::open(0).map(|g| g.info).map_err(|e| e.to_string());
        Environment {
            gpu,
            gpu_count: Gpu::count(),
            nvrtc: toolchain::load_nvrtc().map_err(|e| e.to_string()),
            nvrtc_version: toolchain::nvrtc_version().map_err(|e| e.to_string()),
            ptxas: toolchain::find_ptxas().map(|p| p.display().to_string()).map_err(|e| e.to_string()),
        }
    }
}

/// The results-folder name of a GPU (`nvidia-h200`).
pub fn gpu_slug(name: &str) -> String {
    k3k_tuner::key::slugify(name)
}
