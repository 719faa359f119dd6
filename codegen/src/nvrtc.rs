//! CUDA C -> PTX through NVRTC (and optionally -> CUBIN through ptxas, see [`crate::ptxas`]).

use crate::toolchain::{ToolchainError, load_nvrtc};
use cudarc::nvrtc::result as nv;
use std::ffi::{CStr, CString};
use std::time::Instant;

/// The GPU architecture we compile for: Hopper with its arch-specific features (wgmma, setmaxnreg).
pub const ARCH: &str = "sm_90a";

/// Why a compile failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    #[error("NVRTC rejected kernel `{kernel}` ({status}):\n{log}")]
    Rejected { kernel: String, status: String, log: String },
    #[error("NVRTC failed for kernel `{kernel}`: {reason}")]
    Internal { kernel: String, reason: String },
}

/// NVRTC's output for one source.
#[derive(Debug, Clone)]
pub struct NvrtcOutput {
    pub ptx: String,
    pub log: String,
    pub millis: f64,
}

/// The options every k3k kernel is compiled with.
pub fn options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "-std=c++17".into(), "--device-as-default-execution-space".into()]
}

/// Compile `src` (whose kernel is named `kernel`) to PTX for `arch`.
pub fn compile_ptx(kernel: &str, src: &str, arch: &str) -> Result<NvrtcOutput, CompileError> {
    load_nvrtc()?;
    let t0 = Instant::now();
    let internal = |reason: String| CompileError::Internal { kernel: kernel.into(), reason };
    let csrc = CString::new(src).map_err(|_| internal("source contains a NUL byte".into()))?;
    let cname = CString::new(format!("{kernel}.cu")).map_err(|_| internal("name contains a NUL byte".into()))?;
    let prog = nv::create_program(&csrc, Some(&cname)).map_err(|e| internal(format!("create: {e:?}")))?;
    let opts = options(arch);
    // SAFETY: `prog` is a live program; options are valid C strings.
    let compiled = unsafe { nv::compile_program(prog, &opts) };
    // SAFETY: as above.
    let log = unsafe { nv::get_program_log(prog) }
        .map(|raw| unsafe { CStr::from_ptr(raw.as_ptr()) }.to_string_lossy().into_owned())
        .unwrap_or_default();
    let result = match compiled {
        Err(e) => Err(CompileError::Rejected { kernel: kernel.into(), status: format!("{e:?}"), log }),
        Ok(()) => {
            // SAFETY: compiled successfully.
            match unsafe { nv::get_ptx(prog) } {
                Ok(raw) => {
                    let ptx = unsafe { CStr::from_ptr(raw.as_ptr()) }.to_string_lossy().into_owned();
                    Ok(NvrtcOutput { ptx, log, millis: t0.elapsed().as_secs_f64() * 1e3 })
                }
                Err(e) => Err(internal(format!("get_ptx: {e:?}"))),
            }
        }
    };
    // SAFETY: destroying the program we created.
    let _ = unsafe { nv::destroy_program(prog) };
    result
}
