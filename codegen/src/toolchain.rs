//! Finding NVRTC and ptxas on this machine, with no CUDA toolkit required.
//!
//! Search order (first hit wins), for `libnvrtc.so.13` and `ptxas`:
//! 1. `K3K_NVRTC` (the library file or its folder) and `K3K_PTXAS` (the binary);
//! 2. `K3K_CUDA_TOOLS`: a folder where the PyPI wheels `nvidia-cuda-nvrtc==13.0.88` and
//!    `nvidia-cuda-nvcc==13.0.88` were installed with `pip install --target` (`nvidia/cu13/{lib,bin}`);
//! 3. `.tools/cuda` under `K3K_HOME` (the k3k checkout a copied binary is used with), then beside the running
//!    binary (`<dir of k3k>/.tools/cuda`), then in the k3k checkout this was built from (where `.ci/run` and
//!    `scripts/install-cuda-tools.sh` put the wheels);
//! 4. `CUDA_HOME`/`CUDA_PATH`, then `/usr/local/cuda` (`lib64`, `targets/x86_64-linux/lib`, `bin`);
//! 5. the system loader (`LD_LIBRARY_PATH`, `ldconfig`) for the library and `PATH` for ptxas.
//!
//! The library found is loaded once with `RTLD_GLOBAL` before cudarc asks the loader for `libnvrtc.so.13`, so
//! cudarc binds to it without `LD_LIBRARY_PATH`; a missing library is a typed error, never a panic.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// NVRTC's library file name for CUDA 13.
pub const NVRTC_LIB: &str = "libnvrtc.so.13";

/// Why the CUDA compiler tools are not usable.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ToolchainError {
    #[error(
        "libnvrtc.so.13 (NVRTC 13.0) was not found; searched: {searched}. Install it with \
         `scripts/install-cuda-tools.sh` (pip wheels nvidia-cuda-nvrtc==13.0.88 and nvidia-cuda-nvcc==13.0.88 \
         into .tools/cuda), or set K3K_NVRTC=/path/to/libnvrtc.so.13"
    )]
    NvrtcMissing { searched: String },
    #[error("{path} could not be loaded: {reason}")]
    NvrtcLoad { path: String, reason: String },
    #[error("ptxas was not found; searched: {searched}. Install nvidia-cuda-nvcc==13.0.88 or set K3K_PTXAS")]
    PtxasMissing { searched: String },
    /// A `K3K_*` variable names something that is not there (a set variable is never silently skipped).
    #[error("{var}={value:?}: {reason}")]
    BadEnv { var: &'static str, value: String, reason: String },
}

/// The environment variables that point the search at the tools.
pub const TOOL_ENV: [&str; 3] = ["K3K_NVRTC", "K3K_PTXAS", "K3K_CUDA_TOOLS"];

/// `Err` when `K3K_NVRTC`, `K3K_PTXAS` or `K3K_CUDA_TOOLS` is set but empty or names no existing path (a folder
/// for `K3K_CUDA_TOOLS`, a file or a folder holding `libnvrtc.so.13` for `K3K_NVRTC`, a file for `K3K_PTXAS`).
pub fn check_tool_env() -> Result<(), ToolchainError> {
    check_env(true, true)
}

/// [`check_tool_env`] for the variables of one tool: `K3K_CUDA_TOOLS`, and `K3K_NVRTC` or `K3K_PTXAS`.
fn check_env(nvrtc: bool, ptxas: bool) -> Result<(), ToolchainError> {
    let bad = |var: &'static str, value: &str, reason: &str| {
        Err(ToolchainError::BadEnv { var, value: value.to_string(), reason: reason.to_string() })
    };
    if let Some(v) = std::env::var_os("K3K_CUDA_TOOLS") {
        let v = v.to_string_lossy().into_owned();
        if v.trim().is_empty() {
            return bad("K3K_CUDA_TOOLS", &v, "empty (unset it, or name the folder of the pip wheels)");
        }
        if !Path::new(&v).is_dir() {
            return bad("K3K_CUDA_TOOLS", &v, "no such folder (expected the folder holding nvidia/cu13/{lib,bin})");
        }
    }
    if let Some(v) = std::env::var_os("K3K_NVRTC").filter(|_| nvrtc) {
        let v = v.to_string_lossy().into_owned();
        let p = Path::new(&v);
        if v.trim().is_empty() {
            return bad("K3K_NVRTC", &v, "empty (unset it, or name libnvrtc.so.13 or its folder)");
        }
        if p.is_dir() {
            if !p.join(NVRTC_LIB).is_file() {
                return bad("K3K_NVRTC", &v, &format!("the folder holds no {NVRTC_LIB}"));
            }
        } else if !p.is_file() {
            return bad("K3K_NVRTC", &v, &format!("no such file (expected {NVRTC_LIB} or its folder)"));
        }
    }
    if let Some(v) = std::env::var_os("K3K_PTXAS").filter(|_| ptxas) {
        let v = v.to_string_lossy().into_owned();
        if v.trim().is_empty() {
            return bad("K3K_PTXAS", &v, "empty (unset it, or name the ptxas binary)");
        }
        if !Path::new(&v).is_file() {
            return bad("K3K_PTXAS", &v, "no such file (expected the ptxas binary)");
        }
    }
    Ok(())
}

/// A bound in seconds from `var`: a positive number of seconds, at most a day (86400), or `default_s` when
/// the variable is unset. Anything else is [`ToolchainError::BadEnv`] naming the variable.
pub fn seconds_from_env(var: &'static str, default_s: f64) -> Result<std::time::Duration, ToolchainError> {
    let Ok(v) = std::env::var(var) else {
        return Ok(std::time::Duration::from_secs_f64(default_s));
    };
    match v.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86400.0 => Ok(std::time::Duration::from_secs_f64(s)),
        _ => Err(ToolchainError::BadEnv {
            var,
            value: v,
            reason: "expected a number of seconds, more than 0 and at most 86400".into(),
        }),
    }
}

fn checkout_tools() -> PathBuf {
    // codegen/ lives one level below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(".tools").join("cuda")
}

fn tool_roots() -> Vec<PathBuf> {
    let mut roots = vec![];
    if let Ok(d) = std::env::var("K3K_CUDA_TOOLS") {
        roots.push(PathBuf::from(d));
    }
    if let Some(h) = std::env::var_os("K3K_HOME").filter(|h| !h.is_empty()) {
        roots.push(PathBuf::from(h).join(".tools").join("cuda"));
    }
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        roots.push(dir.join(".tools").join("cuda"));
    }
    roots.push(checkout_tools());
    roots
}

fn cuda_homes() -> Vec<PathBuf> {
    let mut v = vec![];
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(d) = std::env::var(var) {
            v.push(PathBuf::from(d));
        }
    }
    v.push(PathBuf::from("/usr/local/cuda"));
    v
}

/// Candidate paths of libnvrtc.so.13, in search order.
pub fn nvrtc_candidates() -> Vec<PathBuf> {
    let mut c = vec![];
    if let Ok(p) = std::env::var("K3K_NVRTC") {
        let p = PathBuf::from(p);
        c.push(if p.is_dir() { p.join(NVRTC_LIB) } else { p });
    }
    for r in tool_roots() {
        c.push(r.join("nvidia/cu13/lib").join(NVRTC_LIB));
    }
    for h in cuda_homes() {
        c.push(h.join("lib64").join(NVRTC_LIB));
        c.push(h.join("targets/x86_64-linux/lib").join(NVRTC_LIB));
    }
    c
}

/// Candidate paths of ptxas, in search order.
pub fn ptxas_candidates() -> Vec<PathBuf> {
    let mut c = vec![];
    if let Ok(p) = std::env::var("K3K_PTXAS") {
        c.push(PathBuf::from(p));
    }
    for r in tool_roots() {
        c.push(r.join("nvidia/cu13/bin/ptxas"));
    }
    for h in cuda_homes() {
        c.push(h.join("bin/ptxas"));
    }
    if let Ok(path) = std::env::var("PATH") {
        for d in std::env::split_paths(&path) {
            c.push(d.join("ptxas"));
        }
    }
    c
}

/// Locate ptxas.
pub fn find_ptxas() -> Result<PathBuf, ToolchainError> {
    check_env(false, true)?;
    let cands = ptxas_candidates();
    cands.iter().find(|p| p.is_file()).cloned().ok_or_else(|| ToolchainError::PtxasMissing {
        searched: cands.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
    })
}

static NVRTC: OnceLock<Result<String, ToolchainError>> = OnceLock::new();

/// Load NVRTC once (see the module docs); returns where it came from.
pub fn load_nvrtc() -> Result<String, ToolchainError> {
    NVRTC
        .get_or_init(|| {
            use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
            check_env(true, false)?;
            let cands = nvrtc_candidates();
            for p in &cands {
                if !p.is_file() {
                    continue;
                }
                // The builtins library sits beside NVRTC and is opened by it at compile time.
                if let Some(dir) = p.parent() {
                    for name in ["libnvrtc-builtins.so.13.0", "libnvrtc-builtins.so.13"] {
                        let b = dir.join(name);
                        if b.is_file() {
                            // SAFETY: loading a shared library runs its initialisers; NVRTC's are benign.
                            if let Ok(lib) = unsafe { Library::open(Some(&b), RTLD_NOW | RTLD_GLOBAL) } {
                                std::mem::forget(lib);
                            }
                            break;
                        }
                    }
                }
                // SAFETY: as above. The handle is leaked on purpose: cudarc keeps using the library.
                return match unsafe { Library::open(Some(p), RTLD_NOW | RTLD_GLOBAL) } {
                    Ok(lib) => {
                        // A library that is not NVRTC (or one cudarc cannot find again under NVRTC's names) is an
                        // error here, not a panic in cudarc's first call.
                        for sym in ["nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetPTX"] {
                            // SAFETY: only the symbol's presence is checked; it is not called.
                            if unsafe { lib.get::<*const ()>(sym.as_bytes()) }.is_err() {
                                return Err(ToolchainError::NvrtcLoad {
                                    path: p.display().to_string(),
                                    reason: format!("it is not NVRTC (no symbol `{sym}`)"),
                                });
                            }
                        }
                        std::mem::forget(lib);
                        // SAFETY: loads by name only (what cudarc's first call will do).
                        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                            return Err(ToolchainError::NvrtcLoad {
                                path: p.display().to_string(),
                                reason: format!("loaded, but not found again under the name {NVRTC_LIB} (its soname)"),
                            });
                        }
                        Ok(p.display().to_string())
                    }
                    Err(e) => Err(ToolchainError::NvrtcLoad { path: p.display().to_string(), reason: e.to_string() }),
                };
            }
            // Last resort: whatever the system loader finds.
            // SAFETY: as above.
            if let Ok(lib) = unsafe { Library::open(Some(NVRTC_LIB), RTLD_NOW | RTLD_GLOBAL) } {
                std::mem::forget(lib);
                return Ok(format!("{NVRTC_LIB} (system loader)"));
            }
            Err(ToolchainError::NvrtcMissing {
                searched: cands
                    .iter()
                    .map(|p| p.display().to_string())
                    .chain(std::iter::once(format!("{NVRTC_LIB} via LD_LIBRARY_PATH/ldconfig")))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        })
        .clone()
}

/// NVRTC's version as "major.minor" (loads NVRTC).
pub fn nvrtc_version() -> Result<String, ToolchainError> {
    load_nvrtc()?;
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: NVRTC is loaded; the out-pointers are valid.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(ToolchainError::NvrtcLoad { path: "nvrtc".into(), reason: format!("nvrtcVersion failed: {r:?}") });
    }
    Ok(format!("{major}.{minor}"))
}
